//! The COMPOUND rules and the session and client state, driven through the ONC RPC
//! dispatcher with hand-made calls (no transport): minor versions, where SEQUENCE and
//! the session-less operations may stand, unknown and illegal operations, bad XDR,
//! CREATE_SESSION negotiation and replay, leases on an injected clock, bounded tables.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::state::StateLimits;
use crate::ddp::{reply_results, DdpCursor, DdpEncoder, XdrCodec};
use crate::nfs::server::{MemFs, NfsConfig, NfsProgram, NfsShared};
use crate::nfs::v4::ops;
use crate::nfs::v41::compound::*;
use crate::nfs::v41::{ChannelAttrs4, Nfsstat4, SessionId};
use crate::program::{Dispatched, Dispatcher, InboundCall};
use crate::rpc::{AcceptStatus, CallHeader, OpaqueAuth, ReplyBody, ReplyHeader};

struct World {
    d: Dispatcher,
    shared: Arc<NfsShared>,
    clock: Arc<AtomicU64>,
    reply: Vec<u8>,
}

fn world(limits: StateLimits) -> World {
    let clock = Arc::new(AtomicU64::new(1000));
    let c2 = clock.clone();
    let shared = NfsShared::with_v41(
        Arc::new(MemFs::new(1 << 20)),
        NfsConfig::default(),
        limits,
        Some(Arc::new(move || c2.load(Ordering::Relaxed))),
    );
    let mut d = Dispatcher::new();
    d.register(Box::new(NfsProgram::new(shared.clone())))
        .unwrap();
    World {
        d,
        shared,
        clock,
        reply: vec![0; 64 * 1024],
    }
}

fn enc_ops(ops: &[ArgOp<'_>]) -> Vec<u8> {
    let mut out = vec![0u8; 8192];
    let mut e = DdpEncoder::inline(&mut out, 0);
    for op in ops {
        op.encode(&mut e).unwrap();
    }
    let n = e.finish().len;
    out.truncate(n);
    out
}

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// A COMPOUND call: `tag`, `minor`, `count` and the operations' octets as given.
fn call(minor: u32, count: u32, body: &[u8]) -> Vec<u8> {
    let h = CallHeader {
        xid: 0x77,
        prog: 100_003,
        vers: 4,
        procedure: 1,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    };
    let mut msg = vec![0u8; 64];
    let n = h.encode(&mut msg).unwrap();
    msg.truncate(n);
    msg.extend(words(&[3]));
    msg.extend(b"tag\0");
    msg.extend(words(&[minor, count]));
    msg.extend_from_slice(body);
    msg
}

impl World {
    /// The reply's octets, or the RPC accept status when it is not SUCCESS.
    fn raw(&mut self, msg: &[u8]) -> Result<Vec<u8>, AcceptStatus> {
        let len = match self.d.dispatch(&InboundCall::inline(msg), &mut self.reply) {
            Ok(Dispatched::Reply(r)) => r.len,
            other => panic!("{other:?}"),
        };
        let r = &self.reply[..len];
        let (h, _) = ReplyHeader::decode(r).unwrap();
        match h.body {
            ReplyBody::Accepted {
                status: AcceptStatus::Success,
                ..
            } => {
                let (_, c) = reply_results(r, &[]).unwrap();
                Ok(c.input()[c.position()..].to_vec())
            }
            ReplyBody::Accepted { status, .. } => Err(status),
            other => panic!("{other:?}"),
        }
    }

    fn compound(&mut self, ops: &[ArgOp<'_>]) -> (Nfsstat4, Vec<(u32, Nfsstat4)>) {
        let msg = call(1, ops.len() as u32, &enc_ops(ops));
        let bytes = self.raw(&msg).expect("SUCCESS");
        let mut c = DdpCursor::inline(&bytes, 0);
        let r = CompoundRes::decode(&mut c).expect("results decode");
        c.finish().unwrap();
        assert_eq!(r.tag, b"tag");
        (
            r.status,
            r.results.iter().map(|r| (r.op, r.status)).collect(),
        )
    }

    fn session(&mut self, owner: &[u8]) -> (u64, SessionId) {
        let bytes = self
            .raw(&call(
                1,
                1,
                &enc_ops(&[ArgOp::ExchangeId(ExchangeIdArgs {
                    verifier: [1; 8],
                    owner,
                    flags: 0,
                    impl_id: None,
                })]),
            ))
            .unwrap();
        let r = CompoundRes::decode(&mut DdpCursor::inline(&bytes, 0)).unwrap();
        let ResBody::ExchangeId(x) = &r.results[0].body else {
            panic!("{r:?}")
        };
        assert_eq!(x.flags & EXCHGID4_FLAG_CONFIRMED_R, 0, "new: unconfirmed");
        let (clientid, seq) = (x.clientid, x.sequenceid);
        let cs = create_session(clientid, seq);
        let bytes = self.raw(&call(1, 1, &enc_ops(&[cs]))).unwrap();
        let r = CompoundRes::decode(&mut DdpCursor::inline(&bytes, 0)).unwrap();
        let ResBody::CreateSession(s) = &r.results[0].body else {
            panic!("{r:?}")
        };
        (clientid, s.sessionid)
    }
}

fn create_session(clientid: u64, sequence: u32) -> ArgOp<'static> {
    ArgOp::CreateSession(CreateSessionArgs {
        clientid,
        sequence,
        flags: 0x3,
        fore: ChannelAttrs4 {
            headerpadsize: 0,
            maxrequestsize: u32::MAX,
            maxresponsesize: u32::MAX,
            maxresponsesize_cached: u32::MAX,
            maxoperations: 1000,
            maxrequests: 1000,
            rdma_ird: None,
        },
        back: ChannelAttrs4 {
            maxrequests: 2,
            maxoperations: 2,
            maxrequestsize: 4096,
            maxresponsesize: 4096,
            ..ChannelAttrs4::default()
        },
        cb_program: 0x4000_0000,
        cb_sec: CbSecParms::AUTH_NONE,
    })
}

fn seq(sid: SessionId, slot: u32, seqid: u32) -> ArgOp<'static> {
    ArgOp::Sequence(SequenceArgs {
        sessionid: sid,
        sequenceid: seqid,
        slotid: slot,
        highest_slotid: 0,
        cachethis: false,
    })
}

#[test]
fn minor_versions_other_than_1_are_refused_with_no_results() {
    let mut w = world(StateLimits::default());
    for minor in [0, 2, 99] {
        let bytes = w
            .raw(&call(minor, 1, &enc_ops(&[ArgOp::PutRootFh])))
            .unwrap();
        let r = CompoundRes::decode(&mut DdpCursor::inline(&bytes, 0)).unwrap();
        assert_eq!(r.status, Nfsstat4::MINOR_VERS_MISMATCH);
        assert_eq!(r.tag, b"tag");
        assert!(r.results.is_empty());
    }
    // A header that does not decode is GARBAGE_ARGS.
    let mut m = call(1, 1, &[]);
    m.truncate(m.len() - 6);
    assert_eq!(w.raw(&m), Err(AcceptStatus::GarbageArgs));
}

#[test]
fn sequence_placement_and_session_less_operations() {
    let mut w = world(StateLimits::default());
    assert_eq!(
        w.compound(&[ArgOp::PutRootFh, ArgOp::GetFh]),
        (
            Nfsstat4::OP_NOT_IN_SESSION,
            vec![(ops::PUTROOTFH, Nfsstat4::OP_NOT_IN_SESSION)]
        )
    );
    let x = ArgOp::ExchangeId(ExchangeIdArgs {
        verifier: [1; 8],
        owner: b"c1",
        flags: 0,
        impl_id: None,
    });
    assert_eq!(w.compound(&[x, ArgOp::PutRootFh]).0, Nfsstat4::NOT_ONLY_OP);
    let (_, sid) = w.session(b"c1");
    let (s, r) = w.compound(&[seq(sid, 0, 1), ArgOp::PutRootFh, seq(sid, 0, 2)]);
    assert_eq!(s, Nfsstat4::SEQUENCE_POS);
    assert_eq!(r.len(), 3);
    // Unknown session, slot.
    assert_eq!(
        w.compound(&[seq([9; 16], 0, 1), ArgOp::PutRootFh]).0,
        Nfsstat4::BADSESSION
    );
    assert_eq!(w.compound(&[seq(sid, 500, 1)]).0, Nfsstat4::BADSLOT);
}

#[test]
fn unknown_illegal_and_malformed_operations_end_the_compound() {
    let mut w = world(StateLimits::default());
    let (_, sid) = w.session(b"c2");
    // COPY (60) is NFSv4.2: NOTSUPP; the GETFH after it is not decoded, and the call
    // is still answered (no GARBAGE_ARGS for the undecoded rest).
    let mut body = enc_ops(&[seq(sid, 0, 1), ArgOp::PutRootFh]);
    body.extend(words(&[60, 1, 2, 3]));
    body.extend(enc_ops(&[ArgOp::GetFh]));
    let bytes = w.raw(&call(1, 4, &body)).unwrap();
    let r = CompoundRes::decode(&mut DdpCursor::inline(&bytes, 0)).unwrap();
    assert_eq!(r.status, Nfsstat4::NOTSUPP);
    let got: Vec<_> = r.results.iter().map(|r| (r.op, r.status)).collect();
    assert_eq!(
        got,
        vec![
            (ops::SEQUENCE, Nfsstat4::OK),
            (ops::PUTROOTFH, Nfsstat4::OK),
            (60, Nfsstat4::NOTSUPP)
        ]
    );
    // An operation number outside NFSv4: OP_ILLEGAL, answered as ILLEGAL.
    let mut body = enc_ops(&[seq(sid, 0, 2)]);
    body.extend(words(&[7777]));
    let bytes = w.raw(&call(1, 2, &body)).unwrap();
    let r = CompoundRes::decode(&mut DdpCursor::inline(&bytes, 0)).unwrap();
    assert_eq!(r.status, Nfsstat4::OP_ILLEGAL);
    assert_eq!(r.results[1].op, ops::ILLEGAL);
    // A known operation with arguments that do not decode: BADXDR.
    let mut body = enc_ops(&[seq(sid, 0, 3), ArgOp::PutRootFh]);
    body.extend(words(&[ops::LOOKUP, 100_000]));
    let bytes = w.raw(&call(1, 3, &body)).unwrap();
    let r = CompoundRes::decode(&mut DdpCursor::inline(&bytes, 0)).unwrap();
    assert_eq!(r.status, Nfsstat4::BADXDR);
    // More operations than the count says are garbage, as for any RPC.
    let body = enc_ops(&[seq(sid, 0, 4), ArgOp::PutRootFh]);
    assert_eq!(w.raw(&call(1, 1, &body)), Err(AcceptStatus::GarbageArgs));
}

#[test]
fn create_session_negotiates_records_and_replays() {
    let mut w = world(StateLimits {
        slots: 8,
        max_ops: 16,
        ..StateLimits::default()
    });
    let x = ArgOp::ExchangeId(ExchangeIdArgs {
        verifier: [1; 8],
        owner: b"c3",
        flags: 0,
        impl_id: None,
    });
    let bytes = w.raw(&call(1, 1, &enc_ops(&[x]))).unwrap();
    let r = CompoundRes::decode(&mut DdpCursor::inline(&bytes, 0)).unwrap();
    let ResBody::ExchangeId(x) = &r.results[0].body else {
        panic!()
    };
    let clientid = x.clientid;
    let cs = enc_ops(&[create_session(clientid, 1)]);
    let first = w.raw(&call(1, 1, &cs)).unwrap();
    let r = CompoundRes::decode(&mut DdpCursor::inline(&first, 0)).unwrap();
    let ResBody::CreateSession(s) = r.results[0].body.clone() else {
        panic!("{r:?}")
    };
    assert_eq!(s.fore.maxrequests, 8, "slots negotiated down");
    assert_eq!(s.fore.maxoperations, 16);
    assert_eq!(
        s.flags, 0x2,
        "back channel on this connection granted, not persist"
    );
    {
        let t = w.shared.v41().lock();
        let sess = &t.sessions[&s.sessionid];
        assert_eq!(sess.cb_program, 0x4000_0000);
        assert_eq!(sess.back.maxrequests, 2);
        assert!(t.clients[&clientid].confirmed);
    }
    // The retry gets the same session; a skipped sequence is misordered.
    assert_eq!(w.raw(&call(1, 1, &cs)).unwrap(), first);
    let cs3 = enc_ops(&[create_session(clientid, 3)]);
    assert_eq!(
        CompoundRes::decode(&mut DdpCursor::inline(
            &w.raw(&call(1, 1, &cs3)).unwrap(),
            0
        ))
        .unwrap()
        .status,
        Nfsstat4::SEQ_MISORDERED
    );
    assert_eq!(
        w.compound(&[create_session(0xdead, 1)]).0,
        Nfsstat4::STALE_CLIENTID
    );
    // DESTROY_CLIENTID with a session is busy; after DESTROY_SESSION it goes.
    assert_eq!(
        w.compound(&[ArgOp::DestroyClientid(clientid)]).0,
        Nfsstat4::CLIENTID_BUSY
    );
    assert_eq!(
        w.compound(&[ArgOp::DestroySession(s.sessionid)]).0,
        Nfsstat4::OK
    );
    assert_eq!(
        w.compound(&[ArgOp::DestroyClientid(clientid)]).0,
        Nfsstat4::OK
    );
    assert_eq!(
        w.compound(&[seq(s.sessionid, 0, 1)]).0,
        Nfsstat4::BADSESSION
    );
}

#[test]
fn leases_expire_on_the_injected_clock() {
    let mut w = world(StateLimits {
        lease_secs: 10,
        ..StateLimits::default()
    });
    let (_, sid) = w.session(b"c4");
    // SEQUENCE renews the lease.
    for (i, t) in [1005u64, 1014, 1023].iter().enumerate() {
        w.clock.store(*t, Ordering::Relaxed);
        assert_eq!(
            w.compound(&[seq(sid, 0, i as u32 + 1)]).0,
            Nfsstat4::OK,
            "at {t}"
        );
    }
    w.clock.store(1034, Ordering::Relaxed);
    assert_eq!(w.compound(&[seq(sid, 0, 4)]).0, Nfsstat4::BADSESSION);
    assert!(
        w.shared.v41().lock().clients.is_empty(),
        "expired client dropped"
    );
}

#[test]
fn tables_are_bounded() {
    let mut w = world(StateLimits {
        clients: 2,
        sessions_per_client: 1,
        ..StateLimits::default()
    });
    let (clientid, _) = w.session(b"a");
    w.session(b"b");
    let x = ArgOp::ExchangeId(ExchangeIdArgs {
        verifier: [1; 8],
        owner: b"c",
        flags: 0,
        impl_id: None,
    });
    assert_eq!(w.compound(&[x]).0, Nfsstat4::SERVERFAULT);
    // A second session for a client with one already.
    assert_eq!(
        w.compound(&[create_session(clientid, 2)]).0,
        Nfsstat4::NOSPC
    );
    // Expired clients make room.
    w.clock.fetch_add(1000, Ordering::Relaxed);
    let x = ArgOp::ExchangeId(ExchangeIdArgs {
        verifier: [1; 8],
        owner: b"c",
        flags: 0,
        impl_id: None,
    });
    assert_eq!(w.compound(&[x]).0, Nfsstat4::OK);
}
