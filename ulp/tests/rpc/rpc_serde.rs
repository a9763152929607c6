//! Headers serialize for the CLI's JSON output (feature `serde`).
#![cfg(feature = "serde")]

use rpcrdma_ulp::rpc::{AuthStat, AuthSys, CallHeader, Gids, OpaqueAuth, ReplyHeader};

#[test]
fn call_header_serializes_names_as_text_and_gids_as_list() {
    let h = CallHeader {
        xid: 5,
        prog: 100_003,
        vers: 3,
        procedure: 1,
        cred: OpaqueAuth::Sys(AuthSys {
            stamp: 9,
            machinename: b"host1",
            uid: 1000,
            gid: 100,
            gids: Gids::new(&[100, 10]).unwrap(),
        }),
        verf: OpaqueAuth::None,
    };
    let v = serde_json::to_value(h).unwrap();
    assert_eq!(v["prog"], 100_003);
    assert_eq!(v["cred"]["Sys"]["machinename"], "host1");
    assert_eq!(v["cred"]["Sys"]["gids"], serde_json::json!([100, 10]));
    assert_eq!(v["verf"], "None");
}

#[test]
fn non_utf8_machine_name_serializes_as_bytes() {
    let name = [0xff, 0x00];
    let sys = AuthSys {
        stamp: 0,
        machinename: &name,
        uid: 0,
        gid: 0,
        gids: Gids::EMPTY,
    };
    let v = serde_json::to_value(sys).unwrap();
    assert_eq!(v["machinename"], serde_json::json!([255, 0]));
}

#[test]
fn reply_header_serializes() {
    let v = serde_json::to_value(ReplyHeader::auth_error(3, AuthStat::BadCred)).unwrap();
    assert_eq!(v["xid"], 3);
    assert_eq!(v["body"]["Denied"]["AuthError"], "BadCred");
}
