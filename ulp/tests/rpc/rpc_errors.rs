//! Malformed RPC headers give typed errors that say where and what, and tell a server how
//! to answer (RFC 5531 §9: RPC_MISMATCH for a wrong `rpcvers`, AUTH_ERROR for bad
//! credentials, GARBAGE_ARGS otherwise, silence when there is nothing to answer).
//! Invalid values are refused by the encoder.

use std::error::Error as _;

use rpcrdma::wire::xdr::XdrError;
use rpcrdma_ulp::rpc::{
    AuthField, AuthFlavor, AuthStat, AuthSys, AuthSysError, CallHeader, EncodeError, Gids, MsgType,
    OpaqueAuth, ReplyHeader, RpcError, RpcErrorKind, RpcMessage, ServerReply,
};

const XID: u32 = 0x0102_0304;

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// xid, CALL, rpcvers 2, prog, vers, proc: everything before the credential.
fn call_prefix() -> Vec<u8> {
    words(&[XID, 0, 2, 100_003, 3, 0])
}

fn call_err(bytes: &[u8]) -> RpcError {
    let e = CallHeader::decode(bytes).expect_err("malformed call must not decode");
    // The dispatching decoder must agree with the call decoder.
    assert_eq!(RpcMessage::decode(bytes).expect_err("dispatch"), e);
    e
}

fn reply_err(bytes: &[u8]) -> RpcError {
    let e = ReplyHeader::decode(bytes).expect_err("malformed reply must not decode");
    assert_eq!(RpcMessage::decode(bytes).expect_err("dispatch"), e);
    e
}

fn encode_reply(r: ServerReply) -> Vec<u8> {
    match r {
        ServerReply::Send(h) => {
            let mut out = [0u8; 64];
            let n = h.encode(&mut out).expect("server replies encode");
            out[..n].to_vec()
        }
        ServerReply::Drop => panic!("expected a reply, got Drop"),
    }
}

#[test]
fn too_short_for_xid_is_dropped() {
    for len in 0..4 {
        let e = call_err(&[0u8; 3][..len]);
        assert_eq!(e.xid, None);
        assert_eq!(e.msg_type, None);
        assert_eq!(e.offset, 0);
        assert!(matches!(
            e.kind,
            RpcErrorKind::Xdr(XdrError::Truncated { offset: 0, .. })
        ));
        assert_eq!(e.server_reply(), ServerReply::Drop);
    }
}

/// With the xid but no direction, the server cannot know it is a call: drop.
#[test]
fn missing_msg_type_is_dropped_but_keeps_xid() {
    let e = call_err(&words(&[XID])[..]);
    assert_eq!(e.xid, Some(XID));
    assert_eq!(e.msg_type, None);
    assert_eq!(e.offset, 4);
    assert_eq!(e.server_reply(), ServerReply::Drop);
}

#[test]
fn bad_msg_type() {
    let e = call_err(&words(&[XID, 2, 2]));
    assert_eq!(e.kind, RpcErrorKind::BadMsgType { value: 2 });
    assert_eq!((e.xid, e.msg_type, e.offset), (Some(XID), None, 4));
    assert_eq!(e.server_reply(), ServerReply::Drop);
    assert_eq!(
        reply_err(&words(&[XID, 7])).kind,
        RpcErrorKind::BadMsgType { value: 7 }
    );
}

/// A server never answers a reply, and a client does not take a call for a reply.
#[test]
fn wrong_direction() {
    let reply = words(&[XID, 1, 1, 1, 1]); // AUTH_ERROR(AUTH_BADCRED)
    let e = CallHeader::decode(&reply).unwrap_err();
    assert_eq!(
        e.kind,
        RpcErrorKind::UnexpectedMsgType {
            found: MsgType::Reply
        }
    );
    assert_eq!(e.server_reply(), ServerReply::Drop);

    let mut call = call_prefix();
    call.extend(words(&[0, 0, 0, 0]));
    let e = ReplyHeader::decode(&call).unwrap_err();
    assert_eq!(
        e.kind,
        RpcErrorKind::UnexpectedMsgType {
            found: MsgType::Call
        }
    );
    assert_eq!(e.server_reply(), ServerReply::Drop);
    assert!(RpcMessage::decode(&call).is_ok() && RpcMessage::decode(&reply).is_ok());
}

/// RFC 5531 §9: a call with rpcvers other than 2 is answered MSG_DENIED / RPC_MISMATCH
/// with the supported range, echoing the xid. The rest of the message is not looked at.
#[test]
fn rpc_version_mismatch_answers_rpc_mismatch() {
    for rest in [&[][..], &[100_003u32, 3, 0][..]] {
        let mut bytes = words(&[XID, 0, 3]);
        bytes.extend(words(rest));
        let e = call_err(&bytes);
        assert_eq!(e.kind, RpcErrorKind::RpcVersionMismatch { found: 3 });
        assert_eq!(e.xid, Some(XID));
        assert_eq!(e.offset, 8);
        assert_eq!(
            encode_reply(e.server_reply()),
            words(&[XID, 1, 1, 0, 2, 2]),
            "xid, REPLY, MSG_DENIED, RPC_MISMATCH, low 2, high 2"
        );
    }
}

/// Cutting a valid AUTH_SYS call anywhere after the direction is GARBAGE_ARGS with the xid;
/// before it, there is nothing to answer.
#[test]
fn every_truncation_is_typed() {
    let call = CallHeader {
        xid: XID,
        prog: 100_003,
        vers: 3,
        procedure: 1,
        cred: OpaqueAuth::Sys(AuthSys {
            stamp: 1,
            machinename: b"abc",
            uid: 0,
            gid: 0,
            gids: Gids::new(&[1, 2]).unwrap(),
        }),
        verf: OpaqueAuth::None,
    };
    let mut buf = [0u8; 128];
    let n = call.encode(&mut buf).unwrap();
    for len in 0..n {
        let e = call_err(&buf[..len]);
        match e.kind {
            RpcErrorKind::Xdr(XdrError::Truncated {
                offset,
                needed,
                available,
            }) => {
                assert!(offset + needed > len, "cut at {len}: {e}");
                assert_eq!(available, len.saturating_sub(offset), "cut at {len}");
            }
            other => panic!("cut at {len}: unexpected {other:?}"),
        }
        let expected = if len < 8 {
            ServerReply::Drop
        } else {
            ServerReply::Send(ReplyHeader::garbage_args(XID))
        };
        assert_eq!(e.server_reply(), expected, "cut at {len}");
    }
    assert_eq!(
        encode_reply(call_err(&buf[..n - 1]).server_reply()),
        words(&[XID, 1, 0, 0, 0, 4]),
        "xid, REPLY, MSG_ACCEPTED, verf AUTH_NONE, GARBAGE_ARGS"
    );
}

/// RFC 5531 §8.2 bounds `opaque_auth` bodies at 400 octets.
#[test]
fn auth_body_over_400_is_badcred_or_badverf() {
    let mut ok = call_prefix();
    ok.extend(words(&[6, 400]));
    ok.extend([0u8; 400]);
    ok.extend(words(&[0, 0]));
    assert!(CallHeader::decode(&ok).is_ok(), "exactly 400 is allowed");

    let mut bytes = call_prefix();
    bytes.extend(words(&[6, 401]));
    bytes.extend([0u8; 404]);
    let e = call_err(&bytes);
    assert_eq!(
        e.kind,
        RpcErrorKind::AuthBodyTooLong {
            field: AuthField::Cred,
            len: 401
        }
    );
    assert_eq!(e.offset, 28, "the cred length word");
    assert_eq!(
        encode_reply(e.server_reply()),
        words(&[XID, 1, 1, 1, 1]),
        "xid, REPLY, MSG_DENIED, AUTH_ERROR, AUTH_BADCRED"
    );

    let mut bytes = call_prefix();
    bytes.extend(words(&[0, 0, 6, u32::MAX]));
    let e = call_err(&bytes);
    assert_eq!(
        e.kind,
        RpcErrorKind::AuthBodyTooLong {
            field: AuthField::Verf,
            len: u32::MAX
        }
    );
    assert_eq!(
        e.server_reply(),
        ServerReply::Send(ReplyHeader::auth_error(XID, AuthStat::BadVerf))
    );
}

#[test]
fn auth_none_with_body_is_rejected() {
    let mut bytes = call_prefix();
    bytes.extend(words(&[0, 4, 0xdead_beef, 0, 0]));
    let e = call_err(&bytes);
    assert_eq!(
        e.kind,
        RpcErrorKind::AuthNoneBody {
            field: AuthField::Cred,
            len: 4
        }
    );
    assert_eq!(
        e.server_reply(),
        ServerReply::Send(ReplyHeader::auth_error(XID, AuthStat::BadCred))
    );
}

/// Builds a call whose credential is AUTH_SYS with the given body words.
fn auth_sys_call(body: &[u8]) -> Vec<u8> {
    let mut bytes = call_prefix();
    bytes.extend(words(&[1, body.len() as u32]));
    bytes.extend(body);
    bytes.extend(std::iter::repeat_n(0, (4 - body.len() % 4) % 4));
    bytes.extend(words(&[0, 0]));
    bytes
}

fn bad_auth_sys(body: &[u8]) -> (usize, AuthSysError) {
    let e = call_err(&auth_sys_call(body));
    assert_eq!(
        e.server_reply(),
        ServerReply::Send(ReplyHeader::auth_error(XID, AuthStat::BadCred))
    );
    match e.kind {
        RpcErrorKind::BadAuthSys {
            field: AuthField::Cred,
            reason,
        } => (e.offset, reason),
        other => panic!("expected BadAuthSys, got {other:?}"),
    }
}

/// RFC 5531 Appendix A: machinename<255>, gids<16>, and the body holds exactly one
/// `authsys_parms`. The body starts at offset 32 (after flavor and length words).
#[test]
fn malformed_auth_sys_bodies() {
    // machinename length 256
    let mut body = words(&[1, 256]);
    body.extend([b'a'; 256]);
    body.extend(words(&[0, 0, 0]));
    assert_eq!(
        bad_auth_sys(&body),
        (36, AuthSysError::MachineNameTooLong { len: 256 })
    );

    // 17 gids
    let mut body = words(&[1, 0, 0, 0, 17]);
    body.extend(words(&[5; 17]));
    assert_eq!(
        bad_auth_sys(&body),
        (48, AuthSysError::TooManyGids { count: 17 })
    );

    // one word too many
    assert_eq!(
        bad_auth_sys(&words(&[1, 0, 0, 0, 0, 9])),
        (52, AuthSysError::TrailingBytes { extra: 4 })
    );

    // body ends before gid: truncation is reported inside the body, at message offsets
    let (offset, reason) = bad_auth_sys(&words(&[1, 0, 0]));
    assert_eq!(offset, 44);
    assert_eq!(
        reason,
        AuthSysError::Xdr(XdrError::Truncated {
            offset: 44,
            needed: 4,
            available: 0
        })
    );

    // non-zero padding after a one-octet machine name
    let mut body = words(&[1, 1]);
    body.extend([b'x', 0, 7, 0]);
    body.extend(words(&[0, 0, 0]));
    assert_eq!(
        bad_auth_sys(&body),
        (
            41,
            AuthSysError::Xdr(XdrError::NonZeroPadding { offset: 41 })
        )
    );

    // the boundary values themselves are fine
    let mut body = words(&[1, 255]);
    body.extend([b'a'; 255]);
    body.push(0);
    body.extend(words(&[0, 0, 16]));
    body.extend(words(&[5; 16]));
    let bytes = auth_sys_call(&body);
    let (h, _) = CallHeader::decode(&bytes).expect("limits are inclusive");
    match h.cred {
        OpaqueAuth::Sys(s) => {
            assert_eq!(s.machinename.len(), 255);
            assert_eq!(s.gids.as_slice(), &[5; 16]);
        }
        other => panic!("expected AUTH_SYS, got {other:?}"),
    }
}

/// Padding after a raw `opaque_auth` body must be zero (RFC 4506 §4.10): XDR-level garbage.
#[test]
fn non_zero_auth_padding_is_garbage_args() {
    let mut bytes = call_prefix();
    bytes.extend(words(&[6, 1]));
    bytes.extend([1, 0, 0, 1]);
    bytes.extend(words(&[0, 0]));
    let e = call_err(&bytes);
    assert_eq!(
        e.kind,
        RpcErrorKind::Xdr(XdrError::NonZeroPadding { offset: 33 })
    );
    assert_eq!(e.offset, 33);
    assert_eq!(
        e.server_reply(),
        ServerReply::Send(ReplyHeader::garbage_args(XID))
    );
}

/// Out-of-range `reply_stat`, `accept_stat`, `reject_stat` and `auth_stat` values.
#[test]
fn unknown_reply_discriminants() {
    let cases = [
        (
            words(&[XID, 1, 2]),
            8,
            RpcErrorKind::UnknownReplyStat { value: 2 },
        ),
        (
            words(&[XID, 1, 0, 0, 0, 6]),
            20,
            RpcErrorKind::UnknownAcceptStat { value: 6 },
        ),
        (
            words(&[XID, 1, 1, 2]),
            12,
            RpcErrorKind::UnknownRejectStat { value: 2 },
        ),
        (
            words(&[XID, 1, 1, 1, 15]),
            16,
            RpcErrorKind::UnknownAuthStat { value: 15 },
        ),
    ];
    for (bytes, offset, kind) in cases {
        let e = reply_err(&bytes);
        assert_eq!(e.kind, kind);
        assert_eq!(e.offset, offset);
        assert_eq!(e.xid, Some(XID));
        assert_eq!(e.msg_type, Some(MsgType::Reply));
        assert_eq!(e.server_reply(), ServerReply::Drop);
    }
    // mismatch_info cut short
    let e = reply_err(&words(&[XID, 1, 0, 0, 0, 2, 1]));
    assert!(matches!(
        e.kind,
        RpcErrorKind::Xdr(XdrError::Truncated { offset: 28, .. })
    ));
}

#[test]
fn errors_display_and_chain() {
    let e = call_err(&words(&[XID, 0, 3]));
    let text = e.to_string();
    assert!(
        text.contains("0x01020304") && text.contains("rpcvers 3"),
        "{text}"
    );
    assert!(e.source().is_none());

    let e = call_err(&words(&[XID, 0, 2, 1]));
    assert!(e.to_string().contains("truncated"), "{e}");
    assert!(e.source().is_some(), "XDR faults are chained");

    let (_, reason) = bad_auth_sys(&words(&[1, 0, 0, 0, 17]));
    assert!(reason.to_string().contains("17 gids"), "{reason}");
}

fn sample_call<'a>(cred: OpaqueAuth<'a>) -> CallHeader<'a> {
    CallHeader {
        xid: XID,
        prog: 1,
        vers: 1,
        procedure: 1,
        cred,
        verf: OpaqueAuth::None,
    }
}

/// A short buffer fails before anything is written.
#[test]
fn encode_into_short_buffer() {
    let call = sample_call(OpaqueAuth::None);
    let mut buf = [0x55u8; 64];
    let need = call.encoded_len();
    assert_eq!(
        call.encode(&mut buf[..need - 1]),
        Err(EncodeError::BufferTooSmall {
            needed: need,
            available: need - 1
        })
    );
    assert!(buf.iter().all(|&b| b == 0x55), "nothing written");

    let reply = ReplyHeader::prog_mismatch(XID, 1, 2);
    assert_eq!(
        reply.encode(&mut buf[..31]),
        Err(EncodeError::BufferTooSmall {
            needed: 32,
            available: 31
        })
    );
    assert!(buf.iter().all(|&b| b == 0x55), "nothing written");
    let m = RpcMessage::Reply(reply);
    assert_eq!(m.encoded_len(), 32);
    assert_eq!(m.encode(&mut buf), Ok(32));
}

/// Values the decoder would refuse are refused by the encoder too.
#[test]
fn encode_rejects_invalid_values() {
    let mut buf = [0u8; 1024];
    let long_name = [b'n'; 256];
    let sys = OpaqueAuth::Sys(AuthSys {
        stamp: 0,
        machinename: &long_name,
        uid: 0,
        gid: 0,
        gids: Gids::EMPTY,
    });
    assert_eq!(
        sample_call(sys).encode(&mut buf),
        Err(EncodeError::MachineNameTooLong {
            field: AuthField::Cred,
            len: 256
        })
    );
    let big = [0u8; 401];
    let raw = OpaqueAuth::Raw {
        flavor: AuthFlavor::RPCSEC_GSS,
        body: &big,
    };
    assert_eq!(
        sample_call(raw).encode(&mut buf),
        Err(EncodeError::AuthBodyTooLong {
            field: AuthField::Cred,
            len: 401
        })
    );
    for flavor in [AuthFlavor::NONE, AuthFlavor::SYS] {
        let raw = OpaqueAuth::Raw { flavor, body: &[] };
        let reply = ReplyHeader {
            xid: XID,
            body: rpcrdma_ulp::rpc::ReplyBody::Accepted {
                verf: raw,
                status: rpcrdma_ulp::rpc::AcceptStatus::Success,
            },
        };
        assert_eq!(
            reply.encode(&mut buf),
            Err(EncodeError::TypedFlavorAsRaw {
                field: AuthField::Verf,
                flavor: flavor.0
            })
        );
    }
    assert_eq!(
        Gids::new(&[0; 17]),
        Err(AuthSysError::TooManyGids { count: 17 })
    );
    assert_eq!(Gids::new(&[3; 16]).map(|g| g.len()), Ok(16));
}
