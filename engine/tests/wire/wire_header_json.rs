//! The owned [`Header`]'s JSON form (feature `serde`): readable names and numbers, and
//! bytes -> JSON -> bytes is exact, which the `rpcrdma decode` / `encode` CLI relies on.
#![cfg(feature = "serde")]

use rpcrdma::wire::header::*;

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}

fn bytes_json_bytes(wire: &[u8]) -> serde_json::Value {
    let h = Header::parse(wire, &Limits::DEFAULT).unwrap();
    let json = serde_json::to_string(&h).unwrap();
    let back: Header = serde_json::from_str(&json).unwrap();
    assert_eq!(back, h);
    assert_eq!(back.to_bytes(), wire);
    serde_json::from_str(&json).unwrap()
}

// RFC 8166 §4.3: one of each list in an RDMA_MSG, with its RPC message.
#[test]
fn msg_json_is_readable_and_exact() {
    let wire = hex("
        11223344 00000001 00000020 00000000
        00000001 00000010 00000001 00000100 00000000 00001000
        00000000
        00000001 00000001 00000002 00000200 00000000 00002000
        00000000
        00000001 00000000
        11223344 00000000");
    let v = bytes_json_bytes(&wire);
    assert_eq!(
        v,
        serde_json::json!({
            "xid": 0x1122_3344u32,
            "credit": 32,
            "proc": "RDMA_MSG",
            "reads": [{"position": 16, "handle": 1, "length": 256, "offset": 4096}],
            "writes": [[{"handle": 2, "length": 512, "offset": 8192}]],
            "reply": [],
            "payload": "1122334400000000",
        })
    );
}

#[test]
fn every_procedure_survives_json() {
    for wire in [
        "11223344 00000001 00000020 00000001 00000000 00000000 00000001 00000001 00000005 00000010 ffffffff fffffff0",
        "11223344 00000001 00000020 00000002 00001000 00000400 00000000 00000000 00000000 11223344",
        "11223344 00000001 00000020 00000003",
        "11223344 00000001 00000020 00000004 00000001 00000001 00000002",
        "11223344 00000001 00000020 00000004 00000002",
    ] {
        bytes_json_bytes(&hex(wire));
    }
}

#[test]
fn json_names_follow_the_rfc() {
    let v = bytes_json_bytes(&hex(
        "11223344 00000001 00000020 00000004 00000001 00000001 00000002",
    ));
    assert_eq!(
        v,
        serde_json::json!({"xid": 0x1122_3344u32, "credit": 32, "proc": "RDMA_ERROR", "err": "ERR_VERS", "low": 1, "high": 2})
    );
    let v = bytes_json_bytes(&hex(
        "11223344 00000001 00000020 00000002 00001000 00000400 00000000 00000000 00000000 11223344",
    ));
    assert_eq!(v["proc"], "RDMA_MSGP");
    assert_eq!(v["align"], 4096);
    assert_eq!(v["thresh"], 1024);
    assert_eq!(v["reply"], serde_json::Value::Null);
    // Offsets above 2^53 stay exact: serde_json keeps u64 integers.
    let v = bytes_json_bytes(&hex("11223344 00000001 00000020 00000001 00000000 00000000 00000001 00000001 00000005 00000010 ffffffff fffffff0"));
    assert_eq!(
        v["reply"][0]["offset"],
        serde_json::json!(0xffff_ffff_ffff_fff0u64)
    );
}

#[test]
fn hand_written_json_encodes() {
    // Lists may be left out, and the payload is optional.
    let h: Header =
        serde_json::from_str(r#"{"xid": 7, "credit": 1, "proc": "RDMA_NOMSG", "reply": []}"#)
            .unwrap();
    assert_eq!(
        h.to_bytes(),
        hex("00000007 00000001 00000001 00000001 00000000 00000000 00000001 00000000")
    );
    let h: Header =
        serde_json::from_str(r#"{"xid": 7, "credit": 1, "proc": "RDMA_DONE"}"#).unwrap();
    assert_eq!(h.to_bytes(), hex("00000007 00000001 00000001 00000003"));
    let h: Header = serde_json::from_str(
        r#"{"xid": 7, "credit": 1, "proc": "RDMA_MSG", "payload": "00000007AB"}"#,
    )
    .unwrap();
    assert_eq!(h.payload, [0, 0, 0, 7, 0xab]);
    for bad in [
        r#"{"xid": 7, "credit": 1, "proc": "RDMA_BOGUS"}"#,
        r#"{"xid": 7, "credit": 1, "proc": "RDMA_MSG", "payload": "abc"}"#,
        r#"{"xid": 7, "credit": 1, "proc": "RDMA_MSG", "payload": "zz"}"#,
        r#"{"xid": 7, "credit": 1, "proc": "RDMA_ERROR", "err": "ERR_OTHER"}"#,
    ] {
        assert!(serde_json::from_str::<Header>(bad).is_err(), "{bad}");
    }
}
