//! RFC 5666 §6.2 Connection Configuration Protocol: hand-derived XDR vectors for
//! `config_rdma_req` and `config_rdma_reply`, error cases, and property tests.
//!
//! Both structures are three XDR unsigned integers (RFC 4506 §4.2: four octets each,
//! big-endian), in the order the §6.2 XDR lists them.

use proptest::prelude::*;
use rpcrdma::wire::ccp::{
    CcpError, ConfigRdmaReply, ConfigRdmaReq, CONFIG_RDMA_PROG, CONFIG_RDMA_VERS, CONF_RDMA,
};
use rpcrdma::wire::xdr::{BufferTooSmall, XdrCursor, XdrEncoder, XdrError};

/// maxcall_sendsize 1024, maxreply_sendsize 4096, maxrdmaread 8.
const REQ_BYTES: [u8; 12] = [
    0x00, 0x00, 0x04, 0x00, //
    0x00, 0x00, 0x10, 0x00, //
    0x00, 0x00, 0x00, 0x08,
];
const REQ: ConfigRdmaReq = ConfigRdmaReq {
    maxcall_sendsize: 1024,
    maxreply_sendsize: 4096,
    maxrdmaread: 8,
};

/// maxcall_sendsize 8192, align 64, maxrdmaread 16.
const REPLY_BYTES: [u8; 12] = [
    0x00, 0x00, 0x20, 0x00, //
    0x00, 0x00, 0x00, 0x40, //
    0x00, 0x00, 0x00, 0x10,
];
const REPLY: ConfigRdmaReply = ConfigRdmaReply {
    maxcall_sendsize: 8192,
    align: 64,
    maxrdmaread: 16,
};

#[test]
fn program_numbers_match_rfc_text() {
    // §6.2: program CONFIG_RDMA_PROG { version VERS1 { ... CONF_RDMA(...) = 1; } = 1; } = 100417;
    assert_eq!(CONFIG_RDMA_PROG, 100_417);
    assert_eq!(CONFIG_RDMA_VERS, 1);
    assert_eq!(CONF_RDMA, 1);
}

#[test]
fn request_vector() {
    let mut out = [0xeeu8; 16];
    assert_eq!(REQ.encode(&mut out), Ok(12));
    assert_eq!(out[..12], REQ_BYTES);
    assert_eq!(out[12..], [0xee; 4]);
    assert_eq!(ConfigRdmaReq::decode(&REQ_BYTES), Ok(REQ));
    assert_eq!(REQ.encoded_len(), 12);
    assert_eq!(ConfigRdmaReq::ENCODED_LEN, 12);
}

#[test]
fn reply_vector_has_align_in_the_middle() {
    let mut out = [0u8; 12];
    assert_eq!(REPLY.encode(&mut out), Ok(12));
    assert_eq!(out, REPLY_BYTES);
    let r = ConfigRdmaReply::decode(&REPLY_BYTES).unwrap();
    assert_eq!(r, REPLY);
    assert_eq!(r.align, 64, "second word is align, not a reply size");
    assert_eq!(REPLY.encoded_len(), 12);
}

#[test]
fn field_order_with_distinct_values() {
    let req = ConfigRdmaReq {
        maxcall_sendsize: 0x0102_0304,
        maxreply_sendsize: 0x0506_0708,
        maxrdmaread: 0x090a_0b0c,
    };
    let mut out = [0u8; 12];
    req.encode(&mut out).unwrap();
    assert_eq!(out, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
    let reply = ConfigRdmaReply {
        maxcall_sendsize: 0xffff_ffff,
        align: 0,
        maxrdmaread: 0x8000_0001,
    };
    reply.encode(&mut out).unwrap();
    assert_eq!(out, [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0x80, 0, 0, 0x01]);
    assert_eq!(ConfigRdmaReply::decode(&out), Ok(reply));
}

#[test]
fn truncated_input_is_a_typed_error() {
    assert_eq!(
        ConfigRdmaReq::decode(&REQ_BYTES[..11]),
        Err(CcpError::Xdr(XdrError::Truncated {
            offset: 8,
            needed: 4,
            available: 3
        }))
    );
    assert_eq!(
        ConfigRdmaReply::decode(&[]),
        Err(CcpError::Xdr(XdrError::Truncated {
            offset: 0,
            needed: 4,
            available: 0
        }))
    );
}

#[test]
fn trailing_bytes_are_rejected() {
    let mut buf = [0u8; 16];
    buf[..12].copy_from_slice(&REPLY_BYTES);
    assert_eq!(
        ConfigRdmaReply::decode(&buf),
        Err(CcpError::TrailingBytes {
            offset: 12,
            extra: 4
        })
    );
    assert_eq!(
        ConfigRdmaReq::decode(&buf[..13]),
        Err(CcpError::TrailingBytes {
            offset: 12,
            extra: 1
        })
    );
}

#[test]
fn short_output_buffer_writes_nothing() {
    let mut out = [0u8; 11];
    assert_eq!(
        REQ.encode(&mut out),
        Err(BufferTooSmall {
            needed: 12,
            available: 11
        })
    );
    assert_eq!(
        REPLY.encode(&mut out),
        Err(BufferTooSmall {
            needed: 12,
            available: 11
        })
    );
    assert_eq!(out, [0; 11]);
}

#[test]
fn embedded_after_another_item() {
    // As RPC arguments the request follows other XDR (here one word standing in for the
    // call header); the cursor API leaves the position after the structure.
    let mut buf = [0u8; 20];
    let n = {
        let mut enc = XdrEncoder::new(&mut buf);
        enc.u32(0xdead_beef).unwrap();
        REQ.encode_to(&mut enc).unwrap();
        enc.u32(7).unwrap();
        enc.finish()
    };
    assert_eq!(n, 20);
    assert_eq!(buf[4..16], REQ_BYTES);
    let mut cur = XdrCursor::at(&buf, 4);
    assert_eq!(ConfigRdmaReq::decode_from(&mut cur), Ok(REQ));
    assert_eq!(cur.position(), 16);
    assert_eq!(cur.u32(), Ok(7));
}

#[test]
fn failed_cursor_decode_leaves_position() {
    let buf = [0u8; 10];
    let mut cur = XdrCursor::at(&buf, 2);
    assert!(matches!(
        ConfigRdmaReply::decode_from(&mut cur),
        Err(XdrError::Truncated { offset: 10, .. })
    ));
    assert_eq!(cur.position(), 2);
}

#[test]
fn errors_display() {
    let s = CcpError::TrailingBytes {
        offset: 12,
        extra: 4,
    }
    .to_string();
    assert!(s.contains("4") && s.contains("12"), "{s}");
    let e = CcpError::from(XdrError::Truncated {
        offset: 8,
        needed: 4,
        available: 3,
    });
    assert!(e.to_string().contains("offset 8"), "{e}");
    assert!(std::error::Error::source(&e).is_some());
}

#[cfg(feature = "serde")]
#[test]
fn serde_json_round_trip() {
    let json = serde_json::to_string(&REPLY).unwrap();
    assert_eq!(
        json,
        r#"{"maxcall_sendsize":8192,"align":64,"maxrdmaread":16}"#
    );
    assert_eq!(
        serde_json::from_str::<ConfigRdmaReply>(&json).unwrap(),
        REPLY
    );
    let json = serde_json::to_string(&REQ).unwrap();
    assert_eq!(serde_json::from_str::<ConfigRdmaReq>(&json).unwrap(), REQ);
}

proptest! {
    #[test]
    fn prop_request_round_trip(a in any::<u32>(), b in any::<u32>(), c in any::<u32>()) {
        let req = ConfigRdmaReq { maxcall_sendsize: a, maxreply_sendsize: b, maxrdmaread: c };
        let mut out = [0u8; 12];
        prop_assert_eq!(req.encode(&mut out), Ok(req.encoded_len()));
        prop_assert_eq!(&out[..4], &a.to_be_bytes()[..]);
        prop_assert_eq!(ConfigRdmaReq::decode(&out), Ok(req));
    }

    #[test]
    fn prop_reply_round_trip(a in any::<u32>(), b in any::<u32>(), c in any::<u32>()) {
        let reply = ConfigRdmaReply { maxcall_sendsize: a, align: b, maxrdmaread: c };
        let mut out = [0u8; 12];
        prop_assert_eq!(reply.encode(&mut out), Ok(reply.encoded_len()));
        prop_assert_eq!(ConfigRdmaReply::decode(&out), Ok(reply));
    }

    #[test]
    fn prop_arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..40)) {
        let req = ConfigRdmaReq::decode(&buf);
        let reply = ConfigRdmaReply::decode(&buf);
        // Exactly the 12-octet inputs decode, and they re-encode to themselves.
        prop_assert_eq!(req.is_ok(), buf.len() == 12);
        prop_assert_eq!(reply.is_ok(), buf.len() == 12);
        if let Ok(req) = req {
            let mut out = [0u8; 12];
            req.encode(&mut out).unwrap();
            prop_assert_eq!(&out[..], &buf[..]);
        }
        if let Ok(reply) = reply {
            let mut out = [0u8; 12];
            reply.encode(&mut out).unwrap();
            prop_assert_eq!(&out[..], &buf[..]);
        }
    }
}
