//! Decodes arbitrary bytes as an RPC call header, a reply header and either; whatever
//! decodes must re-encode to exactly the bytes it came from, and whatever fails must give
//! a typed error that points inside the input and a server answer that echoes the xid.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rpcrdma_ulp::rpc::{CallHeader, ReplyHeader, RpcError, RpcMessage, ServerReply};

/// Largest header: six words plus two 400-octet `opaque_auth`s with their two words each.
const MAX_HEADER: usize = 6 * 4 + 2 * (8 + 400);

fn check_error(data: &[u8], e: &RpcError) {
    assert!(e.offset <= data.len(), "{e}");
    let xid = data
        .get(..4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    assert_eq!(e.xid, xid);
    if let ServerReply::Send(r) = e.server_reply() {
        assert_eq!(Some(r.xid), xid);
        let mut out = [0u8; 64];
        let n = r.encode(&mut out).expect("server replies fit 64 octets");
        let (back, at) = ReplyHeader::decode(&out[..n]).expect("server replies decode");
        assert_eq!((back, at), (r, n));
    }
}

fn check_reencode(
    data: &[u8],
    at: usize,
    encoded: Result<usize, impl core::fmt::Debug>,
    out: &[u8],
) {
    let n = encoded.expect("decoded headers re-encode");
    assert!(n <= MAX_HEADER);
    assert_eq!(n, at);
    assert_eq!(&out[..n], &data[..at]);
}

fuzz_target!(|data: &[u8]| {
    let mut out = [0u8; MAX_HEADER];
    match CallHeader::decode(data) {
        Ok((h, at)) => {
            assert_eq!(h.encoded_len(), at);
            let r = h.encode(&mut out);
            check_reencode(data, at, r, &out);
        }
        Err(e) => check_error(data, &e),
    }
    match ReplyHeader::decode(data) {
        Ok((h, at)) => {
            assert_eq!(h.encoded_len(), at);
            let r = h.encode(&mut out);
            check_reencode(data, at, r, &out);
        }
        Err(e) => check_error(data, &e),
    }
    match RpcMessage::decode(data) {
        Ok((m, at)) => {
            let r = m.encode(&mut out);
            check_reencode(data, at, r, &out);
        }
        Err(e) => check_error(data, &e),
    }
});
