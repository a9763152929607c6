//! Property tests: random headers survive encode → decode unchanged; arbitrary and mutated
//! bytes never panic, fail with errors that point inside the input, and whenever they do
//! decode, re-encoding reproduces the header bytes exactly.

use proptest::prelude::*;
use rpcrdma::wire::xdr::XdrError;
use rpcrdma_ulp::rpc::{
    AcceptStatus, AuthFlavor, AuthStat, AuthSys, CallHeader, Gids, MsgType, OpaqueAuth, Rejection,
    ReplyBody, ReplyHeader, RpcError, RpcErrorKind, RpcMessage, ServerReply,
};

/// Owned stand-in for `OpaqueAuth`, which borrows.
#[derive(Debug, Clone)]
enum Auth {
    None,
    Sys {
        stamp: u32,
        name: Vec<u8>,
        uid: u32,
        gid: u32,
        gids: Vec<u32>,
    },
    Raw {
        flavor: u32,
        body: Vec<u8>,
    },
}

impl Auth {
    fn view(&self) -> OpaqueAuth<'_> {
        match self {
            Auth::None => OpaqueAuth::None,
            Auth::Sys {
                stamp,
                name,
                uid,
                gid,
                gids,
            } => OpaqueAuth::Sys(AuthSys {
                stamp: *stamp,
                machinename: name,
                uid: *uid,
                gid: *gid,
                gids: Gids::new(gids).expect("strategy keeps gids <= 16"),
            }),
            Auth::Raw { flavor, body } => OpaqueAuth::Raw {
                flavor: AuthFlavor(*flavor),
                body,
            },
        }
    }
}

fn auth() -> impl Strategy<Value = Auth> {
    prop_oneof![
        Just(Auth::None),
        (
            any::<u32>(),
            prop::collection::vec(any::<u8>(), 0..=255),
            any::<u32>(),
            any::<u32>(),
            prop::collection::vec(any::<u32>(), 0..=16),
        )
            .prop_map(|(stamp, name, uid, gid, gids)| Auth::Sys {
                stamp,
                name,
                uid,
                gid,
                gids
            }),
        (2u32.., prop::collection::vec(any::<u8>(), 0..=400))
            .prop_map(|(flavor, body)| Auth::Raw { flavor, body }),
    ]
}

fn accept_status() -> impl Strategy<Value = AcceptStatus> {
    prop_oneof![
        Just(AcceptStatus::Success),
        Just(AcceptStatus::ProgUnavail),
        (any::<u32>(), any::<u32>())
            .prop_map(|(low, high)| AcceptStatus::ProgMismatch { low, high }),
        Just(AcceptStatus::ProcUnavail),
        Just(AcceptStatus::GarbageArgs),
        Just(AcceptStatus::SystemErr),
    ]
}

/// Owned reply: the verifier is the only borrowed part.
#[derive(Debug, Clone)]
enum Reply {
    Accepted(Auth, AcceptStatus),
    Denied(Rejection),
}

fn reply() -> impl Strategy<Value = (u32, Reply)> {
    let denied = prop_oneof![
        (any::<u32>(), any::<u32>()).prop_map(|(low, high)| Rejection::RpcMismatch { low, high }),
        prop::sample::select(AuthStat::ALL.to_vec()).prop_map(Rejection::AuthError),
    ];
    (
        any::<u32>(),
        prop_oneof![
            (auth(), accept_status()).prop_map(|(v, s)| Reply::Accepted(v, s)),
            denied.prop_map(Reply::Denied),
        ],
    )
}

fn reply_view(xid: u32, r: &Reply) -> ReplyHeader<'_> {
    ReplyHeader {
        xid,
        body: match r {
            Reply::Accepted(verf, status) => ReplyBody::Accepted {
                verf: verf.view(),
                status: *status,
            },
            Reply::Denied(d) => ReplyBody::Denied(*d),
        },
    }
}

/// Every invariant a decode attempt must satisfy, whatever the input.
fn check_decode(input: &[u8]) {
    let mut out = [0u8; 1024];
    match CallHeader::decode(input) {
        Ok((h, at)) => {
            let n = h.encode(&mut out).expect("a decoded call re-encodes");
            assert_eq!(n, at);
            assert_eq!(&out[..n], &input[..at], "re-encoding reproduces the input");
        }
        Err(e) => check_error(input, &e),
    }
    match ReplyHeader::decode(input) {
        Ok((h, at)) => {
            let n = h.encode(&mut out).expect("a decoded reply re-encodes");
            assert_eq!(n, at);
            assert_eq!(&out[..n], &input[..at], "re-encoding reproduces the input");
        }
        Err(e) => check_error(input, &e),
    }
    match RpcMessage::decode(input) {
        Ok((m, at)) => {
            assert_eq!(m.encoded_len(), at);
            let n = m.encode(&mut out).expect("a decoded message re-encodes");
            assert_eq!(&out[..n], &input[..at]);
        }
        Err(e) => check_error(input, &e),
    }
}

fn check_error(input: &[u8], e: &RpcError) {
    assert!(e.offset <= input.len(), "{e}");
    assert!(!e.to_string().is_empty());
    if let RpcErrorKind::Xdr(XdrError::Truncated { offset, needed, .. }) = e.kind {
        assert!(offset + needed > input.len(), "{e}");
    }
    if input.len() >= 4 {
        assert_eq!(
            e.xid,
            Some(u32::from_be_bytes([input[0], input[1], input[2], input[3]]))
        );
    } else {
        assert_eq!(e.xid, None);
    }
    match e.server_reply() {
        ServerReply::Drop => {}
        ServerReply::Send(r) => {
            assert_eq!(e.msg_type, Some(MsgType::Call));
            assert_eq!(Some(r.xid), e.xid, "answers echo the xid");
            let mut out = [0u8; 64];
            assert!(r.encode(&mut out).is_ok());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn call_round_trip(
        xid in any::<u32>(), prog in any::<u32>(), vers in any::<u32>(), procedure in any::<u32>(),
        cred in auth(), verf in auth(), args in prop::collection::vec(any::<u8>(), 0..64),
    ) {
        let h = CallHeader { xid, prog, vers, procedure, cred: cred.view(), verf: verf.view() };
        let mut buf = vec![0u8; h.encoded_len() + args.len()];
        let n = h.encode(&mut buf).unwrap();
        prop_assert_eq!(n, h.encoded_len());
        buf[n..].copy_from_slice(&args);
        let (d, at) = CallHeader::decode(&buf).unwrap();
        prop_assert_eq!(d, h);
        prop_assert_eq!(at, n);
        prop_assert_eq!(&buf[at..], &args[..]);
        prop_assert_eq!(RpcMessage::decode(&buf).unwrap(), (RpcMessage::Call(h), n));
    }

    #[test]
    fn reply_round_trip((xid, r) in reply(), results in prop::collection::vec(any::<u8>(), 0..64)) {
        let h = reply_view(xid, &r);
        let mut buf = vec![0u8; h.encoded_len() + results.len()];
        let n = h.encode(&mut buf).unwrap();
        prop_assert_eq!(n, h.encoded_len());
        buf[n..].copy_from_slice(&results);
        let (d, at) = ReplyHeader::decode(&buf).unwrap();
        prop_assert_eq!(d, h);
        prop_assert_eq!(at, n);
        prop_assert_eq!(RpcMessage::decode(&buf).unwrap(), (RpcMessage::Reply(h), n));
    }

    #[test]
    fn arbitrary_bytes_never_panic(input in prop::collection::vec(any::<u8>(), 0..600)) {
        check_decode(&input);
    }

    /// Random bytes rarely get past `msg_type`; start from a plausible prefix instead.
    #[test]
    fn plausible_prefixes_never_panic(
        xid in any::<u32>(),
        words in prop::collection::vec(prop_oneof![0u32..20, any::<u32>()], 0..40),
        tail in prop::collection::vec(any::<u8>(), 0..8),
    ) {
        let mut input = xid.to_be_bytes().to_vec();
        input.extend(words.iter().flat_map(|w| w.to_be_bytes()));
        input.extend(tail);
        check_decode(&input);
    }

    #[test]
    fn mutated_messages_never_panic(
        xid in any::<u32>(), cred in auth(), verf in auth(), (rxid, r) in reply(),
        pick_call in any::<bool>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut buf = [0u8; 1024];
        let n = if pick_call {
            CallHeader { xid, prog: 1, vers: 2, procedure: 3, cred: cred.view(), verf: verf.view() }
                .encode(&mut buf)
        } else {
            reply_view(rxid, &r).encode(&mut buf)
        }
        .unwrap();
        let msg = &mut buf[..n];
        for (at, byte) in edits {
            msg[at.index(n)] = byte;
        }
        check_decode(msg);
        check_decode(&msg[..cut.index(n + 1)]);
    }
}
