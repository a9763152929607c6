//! Fuzzes the RFC 5666 §6 Connection Configuration Protocol decoders: arbitrary input
//! must never panic, and anything accepted must re-encode to exactly the input.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rpcrdma::wire::ccp::{ConfigRdmaReply, ConfigRdmaReq};
use rpcrdma::wire::xdr::XdrCursor;

fuzz_target!(|data: &[u8]| {
    let mut out = [0u8; 12];

    if let Ok(req) = ConfigRdmaReq::decode(data) {
        let n = req.encode(&mut out).expect("12-octet buffer fits");
        assert_eq!(n, req.encoded_len());
        assert_eq!(&out[..n], data);
    }
    if let Ok(reply) = ConfigRdmaReply::decode(data) {
        let n = reply.encode(&mut out).expect("12-octet buffer fits");
        assert_eq!(n, reply.encoded_len());
        assert_eq!(&out[..n], data);
    }

    // The streaming decoder accepts any input with at least 12 octets and consumes
    // exactly the structure.
    let mut cur = XdrCursor::new(data);
    match ConfigRdmaReq::decode_from(&mut cur) {
        Ok(req) => {
            assert_eq!(cur.position(), 12);
            req.encode(&mut out).expect("12-octet buffer fits");
            assert_eq!(&out[..], &data[..12]);
        }
        Err(_) => {
            assert!(data.len() < 12);
            assert_eq!(cur.position(), 0);
        }
    }
});
