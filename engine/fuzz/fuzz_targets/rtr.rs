//! Fuzzes the message-continuation codec (draft-dnoveck-rpcrdma-rtrext on version 1):
//! arbitrary input must never panic; an accepted message with empty DDP arrays must
//! re-encode to exactly its header and payload; the characteristics list decoder must
//! never panic and what it accepts (without a receive buffer structure, which the engine
//! never sends) must re-encode to a list that decodes to the same value. Send-based DDP:
//! every typed `xmddp_mitem` decoded from an accepted message re-encodes to its own XDR,
//! and checking its TBSN placement against any received receive buffer structure never
//! panics (it is accepted or answered with BADTBSN / BADOFF). A request's reply
//! direction (`optxrq_rsd`), when it is the one shape the engine takes, re-encodes to
//! the octets it came from.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rpcrdma::wire::rtr::place::{encode_xmtreq_rsd, xmtreq_rsd_header_len, DdpLayout, Loc, ReplyDirection};
use rpcrdma::wire::rtr::{DdpArray, RtrBody, RtrView, TransportChars};
use rpcrdma::wire::xdr::{XdrCursor, XdrEncoder};

/// Each item of `arr` re-encodes to the octets it came from; TBSN placements are
/// checked against `layout` without panicking.
fn items(arr: &DdpArray<'_>, layout: Option<&DdpLayout>) {
    let mut at = 4;
    for m in arr.mitems() {
        let Ok(m) = m else { return };
        let n = m.encoded_len();
        let mut out = vec![0u8; n];
        m.encode(&mut XdrEncoder::new(&mut out)).expect("exact length fits");
        assert_eq!(&out[..], &arr.xdr[at..at + n]);
        at += n;
        if let (Some(l), Loc::Tbsn(t)) = (layout, m.loc) {
            for count in [1, 2, 16] {
                if let Ok(p) = l.check(count, m.length, &t) {
                    let sum: u64 = p.as_slice().iter().map(|x| u64::from(x.2)).sum();
                    assert_eq!(sum, u64::from(m.length));
                }
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // A receive buffer structure from the input's tail, when one decodes there.
    let layout = (0..data.len().min(64))
        .filter_map(|i| TransportChars::decode(&mut XdrCursor::new(&data[i..])).ok())
        .find_map(|c| c.recv_buf)
        .and_then(|r| DdpLayout::of(&r));
    if let Ok(v) = RtrView::parse(data) {
        match v.body {
            RtrBody::XmtReq(q) => {
                items(&q.ddp, layout.as_ref());
                if let Ok(Some(d)) = ReplyDirection::of(&q.rsd) {
                    let n = xmtreq_rsd_header_len(&[], Some(&d));
                    let mut out = vec![0u8; n];
                    let got = encode_xmtreq_rsd(&mut out, 0, 0, q.count, q.rsbuf, q.pslen, &[], Some(&d))
                        .expect("exact length fits");
                    assert_eq!(got, n);
                    // The rsd array sits right before count, rsbuf, pslen.
                    let rsd_out = &out[n - 12 - q.rsd.xdr.len()..n - 12];
                    assert_eq!(rsd_out, q.rsd.xdr);
                }
            }
            RtrBody::XmtResp(r) => items(&r.ddp, layout.as_ref()),
            _ => {}
        }
        let empty_ddp = match v.body {
            RtrBody::XmtReq(q) => q.ddp.is_empty() && q.rsd.is_empty(),
            RtrBody::XmtResp(r) => r.ddp.is_empty(),
            // A characteristics list re-encodes in its own order (checked below).
            RtrBody::CharsUpdate(_) => false,
            _ => true,
        };
        assert!(v.header_len + v.payload.len() <= data.len());
        if empty_ddp {
            let m = v.to_message();
            let mut out = vec![0u8; m.header.encoded_len()];
            let n = m.header.encode(&mut out).expect("exact length fits");
            assert_eq!(n, v.header_len);
            assert_eq!(&out[..n], &data[..n]);
        }
    }
    if let Ok(c) = TransportChars::decode(&mut XdrCursor::new(data)) {
        let c = TransportChars { recv_buf: None, ..c };
        let mut out = vec![0u8; c.encoded_len()];
        let mut enc = XdrEncoder::new(&mut out);
        c.encode(&mut enc).expect("exact length fits");
        let again = TransportChars::decode(&mut XdrCursor::new(&out)).expect("re-decodes");
        assert_eq!(again, c);
    }
});
