//! Fuzzes the message-continuation codec (draft-dnoveck-rpcrdma-rtrext on version 1):
//! arbitrary input must never panic; an accepted message with empty DDP arrays must
//! re-encode to exactly its header and payload; the characteristics list decoder must
//! never panic and what it accepts (without a receive buffer structure, which the engine
//! never sends) must re-encode to a list that decodes to the same value.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rpcrdma::wire::rtr::{RtrBody, RtrView, TransportChars};
use rpcrdma::wire::xdr::{XdrCursor, XdrEncoder};

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = RtrView::parse(data) {
        let empty_ddp = match v.body {
            RtrBody::XmtReq(q) => q.ddp.is_empty() && q.rsd.is_empty(),
            RtrBody::XmtResp(r) => r.ddp.is_empty(),
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
