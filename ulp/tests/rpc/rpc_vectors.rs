//! Byte-exact ONC RPC v2 header vectors, worked out by hand from the XDR in RFC 5531 §9
//! (`rpc_msg`, `call_body`, `reply_body`, `accepted_reply`, `rejected_reply`), §8.2
//! (`opaque_auth`) and Appendix A (`authsys_parms`). Every multi-octet value is big-endian
//! and every item is padded to four octets (RFC 4506 §3).

use rpcrdma_ulp::rpc::{
    AcceptStatus, AuthFlavor, AuthStat, AuthSys, CallHeader, Gids, MsgType, OpaqueAuth, Rejection,
    ReplyBody, ReplyHeader, RpcMessage,
};

/// Checks decode → value, value → encode → bytes, and the dispatching decoder.
fn check_call(bytes: &[u8], header_len: usize, expected: &CallHeader<'_>) {
    let (h, at) = CallHeader::decode(bytes).expect("vector decodes");
    assert_eq!(&h, expected);
    assert_eq!(at, header_len);
    assert_eq!(expected.encoded_len(), header_len);
    let mut out = [0xaau8; 1024];
    let n = expected.encode(&mut out).expect("vector encodes");
    assert_eq!(&out[..n], &bytes[..header_len]);
    let (m, at) = RpcMessage::decode(bytes).expect("dispatch decodes");
    assert_eq!(m, RpcMessage::Call(*expected));
    assert_eq!(m.msg_type(), MsgType::Call);
    assert_eq!(m.xid(), expected.xid);
    assert_eq!(at, header_len);
}

fn check_reply(bytes: &[u8], header_len: usize, expected: &ReplyHeader<'_>) {
    let (h, at) = ReplyHeader::decode(bytes).expect("vector decodes");
    assert_eq!(&h, expected);
    assert_eq!(at, header_len);
    assert_eq!(expected.encoded_len(), header_len);
    let mut out = [0xaau8; 1024];
    let n = expected.encode(&mut out).expect("vector encodes");
    assert_eq!(&out[..n], &bytes[..header_len]);
    let (m, at) = RpcMessage::decode(bytes).expect("dispatch decodes");
    assert_eq!(m, RpcMessage::Reply(*expected));
    assert_eq!(m.msg_type(), MsgType::Reply);
    assert_eq!(at, header_len);
}

/// NFSv3 NULL (program 100003, version 3, procedure 0) with AUTH_NONE credential and
/// verifier (RFC 5531 §9 call_body, §10.1 AUTH_NONE: zero-length body).
#[test]
fn null_call_auth_none() {
    #[rustfmt::skip]
    let bytes: [u8; 40] = [
        0x12, 0x34, 0x56, 0x78, // xid
        0x00, 0x00, 0x00, 0x00, // msg_type CALL
        0x00, 0x00, 0x00, 0x02, // rpcvers 2
        0x00, 0x01, 0x86, 0xa3, // prog 100003
        0x00, 0x00, 0x00, 0x03, // vers 3
        0x00, 0x00, 0x00, 0x00, // proc 0 (NULL)
        0x00, 0x00, 0x00, 0x00, // cred.flavor AUTH_NONE
        0x00, 0x00, 0x00, 0x00, // cred.body length 0
        0x00, 0x00, 0x00, 0x00, // verf.flavor AUTH_NONE
        0x00, 0x00, 0x00, 0x00, // verf.body length 0
    ];
    let call = CallHeader {
        xid: 0x1234_5678,
        prog: 100_003,
        vers: 3,
        procedure: 0,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    };
    check_call(&bytes, 40, &call);
}

/// NFSv3 GETATTR with an AUTH_SYS credential (RFC 5531 Appendix A): a five-octet machine
/// name takes three octets of zero padding, and three supplementary gids follow. The
/// procedure arguments after the header are returned untouched.
#[test]
fn call_auth_sys_with_padding_and_gids() {
    #[rustfmt::skip]
    let bytes: [u8; 88] = [
        0x00, 0x00, 0xab, 0xcd, // xid
        0x00, 0x00, 0x00, 0x00, // CALL
        0x00, 0x00, 0x00, 0x02, // rpcvers 2
        0x00, 0x01, 0x86, 0xa3, // prog 100003
        0x00, 0x00, 0x00, 0x03, // vers 3
        0x00, 0x00, 0x00, 0x01, // proc 1 (GETATTR)
        0x00, 0x00, 0x00, 0x01, // cred.flavor AUTH_SYS
        0x00, 0x00, 0x00, 0x28, // cred.body length 40
        0x01, 0x02, 0x03, 0x04, //   stamp
        0x00, 0x00, 0x00, 0x05, //   machinename length 5
        b'h', b'o', b's', b't', //   "host1" ...
        b'1', 0x00, 0x00, 0x00, //   ... plus 3 octets of padding
        0x00, 0x00, 0x03, 0xe8, //   uid 1000
        0x00, 0x00, 0x00, 0x64, //   gid 100
        0x00, 0x00, 0x00, 0x03, //   gids count 3
        0x00, 0x00, 0x00, 0x64, //   100
        0x00, 0x00, 0x00, 0x0a, //   10
        0x00, 0x01, 0x23, 0x45, //   74565
        0x00, 0x00, 0x00, 0x00, // verf.flavor AUTH_NONE
        0x00, 0x00, 0x00, 0x00, // verf.body length 0
        0x00, 0x00, 0x00, 0x04, // args: nfs_fh3 length 4 ...
        0xde, 0xad, 0xbe, 0xef, //   ... handle
    ];
    let call = CallHeader {
        xid: 0xabcd,
        prog: 100_003,
        vers: 3,
        procedure: 1,
        cred: OpaqueAuth::Sys(AuthSys {
            stamp: 0x0102_0304,
            machinename: b"host1",
            uid: 1000,
            gid: 100,
            gids: Gids::new(&[100, 10, 0x12345]).unwrap(),
        }),
        verf: OpaqueAuth::None,
    };
    check_call(&bytes, 80, &call);
    let (_, at) = CallHeader::decode(&bytes).unwrap();
    assert_eq!(&bytes[at..], &[0, 0, 0, 4, 0xde, 0xad, 0xbe, 0xef]);
    match call.cred {
        OpaqueAuth::Sys(s) => assert_eq!(s.body_len(), 40),
        other => panic!("expected AUTH_SYS, got {other:?}"),
    }
}

/// Flavors other than AUTH_NONE and AUTH_SYS are carried raw (RFC 5531 §8.2): here an
/// RPCSEC_GSS (6) credential of five octets (padded to eight) and a verifier of four.
#[test]
fn call_with_raw_rpcsec_gss_auth() {
    #[rustfmt::skip]
    let bytes: [u8; 52] = [
        0xff, 0xff, 0xff, 0xff, // xid
        0x00, 0x00, 0x00, 0x00, // CALL
        0x00, 0x00, 0x00, 0x02, // rpcvers 2
        0x00, 0x01, 0x86, 0xa5, // prog 100005 (MOUNT)
        0x00, 0x00, 0x00, 0x03, // vers 3
        0x00, 0x00, 0x00, 0x05, // proc 5
        0x00, 0x00, 0x00, 0x06, // cred.flavor RPCSEC_GSS
        0x00, 0x00, 0x00, 0x05, // cred.body length 5
        0x01, 0x02, 0x03, 0x04, //   body ...
        0x05, 0x00, 0x00, 0x00, //   ... and padding
        0x00, 0x00, 0x00, 0x06, // verf.flavor RPCSEC_GSS
        0x00, 0x00, 0x00, 0x04, // verf.body length 4
        0x09, 0x08, 0x07, 0x06, //   body
    ];
    let call = CallHeader {
        xid: u32::MAX,
        prog: 100_005,
        vers: 3,
        procedure: 5,
        cred: OpaqueAuth::Raw {
            flavor: AuthFlavor::RPCSEC_GSS,
            body: &[1, 2, 3, 4, 5],
        },
        verf: OpaqueAuth::Raw {
            flavor: AuthFlavor::RPCSEC_GSS,
            body: &[9, 8, 7, 6],
        },
    };
    check_call(&bytes, 52, &call);
    assert_eq!(call.cred.flavor().to_string(), "RPCSEC_GSS");
    assert_eq!(AuthFlavor(99).to_string(), "flavor 99");
}

/// The 24-octet accepted-reply prefix every AUTH_NONE-verified accepted reply shares:
/// xid, REPLY, MSG_ACCEPTED, verf AUTH_NONE with empty body, then `accept_stat`.
#[rustfmt::skip]
fn accepted_prefix(xid: [u8; 4], accept_stat: u8) -> [u8; 24] {
    [
        xid[0], xid[1], xid[2], xid[3],
        0, 0, 0, 1, // REPLY
        0, 0, 0, 0, // MSG_ACCEPTED
        0, 0, 0, 0, // verf.flavor AUTH_NONE
        0, 0, 0, 0, // verf.body length 0
        0, 0, 0, accept_stat,
    ]
}

/// accepted_reply SUCCESS: the results follow the header (RFC 5531 §9, `opaque results[0]`).
#[test]
fn reply_accepted_success() {
    let mut bytes = accepted_prefix([0x12, 0x34, 0x56, 0x78], 0).to_vec();
    bytes.extend_from_slice(&[0, 0, 0, 0, 0xca, 0xfe, 0xf0, 0x0d]); // results
    let h = ReplyHeader::success(0x1234_5678);
    assert_eq!(
        h.body,
        ReplyBody::Accepted {
            verf: OpaqueAuth::None,
            status: AcceptStatus::Success
        }
    );
    check_reply(&bytes, 24, &h);
    let (_, at) = ReplyHeader::decode(&bytes).unwrap();
    assert_eq!(&bytes[at..], &[0, 0, 0, 0, 0xca, 0xfe, 0xf0, 0x0d]);
}

/// The accepted errors without data: PROG_UNAVAIL (1), PROC_UNAVAIL (3), GARBAGE_ARGS (4),
/// SYSTEM_ERR (5), each exactly the 24-octet prefix.
#[test]
fn reply_accepted_errors_without_data() {
    let xid = 0x0a0b_0c0d;
    let cases = [
        (
            1u8,
            ReplyHeader::prog_unavail(xid),
            AcceptStatus::ProgUnavail,
        ),
        (3, ReplyHeader::proc_unavail(xid), AcceptStatus::ProcUnavail),
        (4, ReplyHeader::garbage_args(xid), AcceptStatus::GarbageArgs),
        (5, ReplyHeader::system_err(xid), AcceptStatus::SystemErr),
    ];
    for (code, h, status) in cases {
        assert_eq!(h, ReplyHeader::accepted(xid, status));
        assert_eq!(status.code(), u32::from(code));
        let bytes = accepted_prefix([0x0a, 0x0b, 0x0c, 0x0d], code);
        check_reply(&bytes, 24, &h);
    }
}

/// PROG_MISMATCH (2) carries `mismatch_info { low, high }`.
#[test]
fn reply_accepted_prog_mismatch() {
    let mut bytes = accepted_prefix([0, 0, 0, 9], 2).to_vec();
    bytes.extend_from_slice(&[0, 0, 0, 2, 0, 0, 0, 4]);
    let h = ReplyHeader::prog_mismatch(9, 2, 4);
    assert_eq!(
        h.body,
        ReplyBody::Accepted {
            verf: OpaqueAuth::None,
            status: AcceptStatus::ProgMismatch { low: 2, high: 4 }
        }
    );
    check_reply(&bytes, 32, &h);
}

/// An accepted reply whose verifier is AUTH_SHORT (2) (RFC 5531 Appendix A: the server may
/// hand the client a short-hand credential in the verifier), carried raw with padding.
#[test]
fn reply_accepted_with_auth_short_verifier() {
    #[rustfmt::skip]
    let bytes: [u8; 32] = [
        0x00, 0x00, 0x00, 0x07, // xid
        0x00, 0x00, 0x00, 0x01, // REPLY
        0x00, 0x00, 0x00, 0x00, // MSG_ACCEPTED
        0x00, 0x00, 0x00, 0x02, // verf.flavor AUTH_SHORT
        0x00, 0x00, 0x00, 0x06, // verf.body length 6
        0x61, 0x62, 0x63, 0x64, //   body ...
        0x65, 0x66, 0x00, 0x00, //   ... and padding
        0x00, 0x00, 0x00, 0x00, // SUCCESS
    ];
    let h = ReplyHeader {
        xid: 7,
        body: ReplyBody::Accepted {
            verf: OpaqueAuth::Raw {
                flavor: AuthFlavor::SHORT,
                body: b"abcdef",
            },
            status: AcceptStatus::Success,
        },
    };
    check_reply(&bytes, 32, &h);
}

/// rejected_reply RPC_MISMATCH (0) with the supported range 2..=2.
#[test]
fn reply_denied_rpc_mismatch() {
    #[rustfmt::skip]
    let bytes: [u8; 24] = [
        0x00, 0x00, 0x00, 0x2a, // xid
        0x00, 0x00, 0x00, 0x01, // REPLY
        0x00, 0x00, 0x00, 0x01, // MSG_DENIED
        0x00, 0x00, 0x00, 0x00, // RPC_MISMATCH
        0x00, 0x00, 0x00, 0x02, // low 2
        0x00, 0x00, 0x00, 0x02, // high 2
    ];
    let h = ReplyHeader::rpc_mismatch(42);
    assert_eq!(
        h.body,
        ReplyBody::Denied(Rejection::RpcMismatch { low: 2, high: 2 })
    );
    check_reply(&bytes, 24, &h);
}

/// rejected_reply AUTH_ERROR (1) for every `auth_stat` RFC 5531 §9 defines, 0 through 14
/// (13 and 14 are the RPCSEC_GSS values).
#[test]
fn reply_denied_auth_error_every_stat() {
    let names = [
        "AUTH_OK",
        "AUTH_BADCRED",
        "AUTH_REJECTEDCRED",
        "AUTH_BADVERF",
        "AUTH_REJECTEDVERF",
        "AUTH_TOOWEAK",
        "AUTH_INVALIDRESP",
        "AUTH_FAILED",
        "AUTH_KERB_GENERIC",
        "AUTH_TIMEEXPIRE",
        "AUTH_TKT_FILE",
        "AUTH_DECODE",
        "AUTH_NET_ADDR",
        "RPCSEC_GSS_CREDPROBLEM",
        "RPCSEC_GSS_CTXPROBLEM",
    ];
    assert_eq!(AuthStat::ALL.len(), names.len());
    for (v, name) in names.iter().enumerate() {
        let stat = AuthStat::from_u32(v as u32).expect("defined auth_stat");
        assert_eq!(stat as u32, v as u32);
        assert_eq!(stat.to_string(), *name);
        #[rustfmt::skip]
        let bytes: [u8; 20] = [
            0x00, 0x00, 0x01, 0x00, // xid 256
            0x00, 0x00, 0x00, 0x01, // REPLY
            0x00, 0x00, 0x00, 0x01, // MSG_DENIED
            0x00, 0x00, 0x00, 0x01, // AUTH_ERROR
            0x00, 0x00, 0x00, v as u8, // auth_stat
        ];
        let h = ReplyHeader::auth_error(256, stat);
        assert_eq!(h.body, ReplyBody::Denied(Rejection::AuthError(stat)));
        check_reply(&bytes, 20, &h);
    }
    assert_eq!(AuthStat::from_u32(15), None);
    assert_eq!(AuthStat::from_u32(u32::MAX), None);
}
