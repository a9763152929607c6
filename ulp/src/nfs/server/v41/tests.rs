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

/// RFC 8267 §6.4.1: the Nth Write chunk pairs with the Nth READ of the COMPOUND; a READ
/// that fails leaves its chunk empty and the next READ takes the next chunk. The data
/// in the chunks is not in the inline reply; the results decode with the chunks' data.
#[test]
fn reads_pair_with_write_chunks_in_compound_order() {
    let mut w = world(StateLimits::default());
    let (clientid, sid) = w.session(b"c5");
    let root = w.shared.root_handle().as_bytes().to_vec();
    let open = ArgOp::Open(OpenArgs {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_BOTH,
        share_deny: 0,
        owner_clientid: clientid,
        owner: b"me",
        how: OpenHow::Create(CreateHow::Unchecked(crate::nfs::v41::Fattr4::default())),
        claim: OpenClaim::Null(b"f"),
    });
    // The current stateid (seqid 1, other 0) names the OPEN's in the same COMPOUND.
    let current = crate::nfs::v41::Stateid4 {
        seqid: 1,
        other: [0; 12],
    };
    let write = ArgOp::Write(WriteArgs {
        stateid: current,
        offset: 0,
        stable: FILE_SYNC4,
        data: b"hello world",
    });
    let (s, _) = w.compound(&[seq(sid, 0, 1), ArgOp::PutFh(&root), open, write]);
    assert_eq!(s, Nfsstat4::OK);
    let fh = {
        let (s, _) = w.compound(&[seq(sid, 0, 2), ArgOp::PutFh(&root), ArgOp::Lookup(b"f")]);
        assert_eq!(s, Nfsstat4::OK);
        let k = w
            .shared
            .backend()
            .lookup(w.shared.backend().root(), b"f")
            .unwrap();
        w.shared.handle(k).as_bytes().to_vec()
    };
    let anon = crate::nfs::v41::Stateid4::default();
    let read = |offset, count| {
        ArgOp::Read(ReadArgs {
            stateid: anon,
            offset,
            count,
        })
    };
    let ops = [
        seq(sid, 0, 3),
        ArgOp::PutFh(&fh),
        read(0, 5),
        ArgOp::SaveFh,
        ArgOp::PutFh(&root),
        // A READ of a directory fails...
        read(0, 5),
    ];
    let msg = call(1, ops.len() as u32, &enc_ops(&ops));
    let chunks = [4096u64, 4096, 4096];
    let inbound = InboundCall {
        msg: &msg,
        reads: &[],
        write_chunks: &chunks,
        padding: None,
    };
    let (len, items) = match w.d.dispatch(&inbound, &mut w.reply) {
        Ok(Dispatched::Reply(r)) => (
            r.len,
            r.write_chunks
                .as_slice()
                .iter()
                .map(|i| (i.chunk, i.data.to_vec()))
                .collect::<Vec<_>>(),
        ),
        other => panic!("{other:?}"),
    };
    assert_eq!(items, vec![(0, b"hello".to_vec())]);
    let (_, c) = reply_results(&w.reply[..len], &[]).unwrap();
    let at = c.position();
    let written: [&[u8]; 3] = [b"hello", b"", b""];
    let mut c = DdpCursor::with_write_chunks(&w.reply[..len], at, &written).unwrap();
    let r = CompoundRes::decode(&mut c).unwrap();
    c.finish().unwrap();
    assert_eq!(r.status, Nfsstat4::ISDIR);
    assert_eq!(r.results[2].body, ResBody::Read(false, b"hello"));
    // Two READs that both succeed: chunk 0 and chunk 1, in order.
    let ops = [seq(sid, 0, 4), ArgOp::PutFh(&fh), read(6, 5), read(0, 5)];
    let msg = call(1, ops.len() as u32, &enc_ops(&ops));
    let inbound = InboundCall {
        msg: &msg,
        reads: &[],
        write_chunks: &chunks,
        padding: None,
    };
    match w.d.dispatch(&inbound, &mut w.reply) {
        Ok(Dispatched::Reply(r)) => {
            let items: Vec<_> = r
                .write_chunks
                .as_slice()
                .iter()
                .map(|i| (i.chunk, i.data.to_vec()))
                .collect();
            assert_eq!(items, vec![(0, b"world".to_vec()), (1, b"hello".to_vec())]);
        }
        other => panic!("{other:?}"),
    }
    // The reply used Write chunks, so the slot could not cache it: a retry is told so.
    let (s, _) = w.compound(&[seq(sid, 0, 4), ArgOp::PutFh(&fh)]);
    assert_eq!(s, Nfsstat4::RETRY_UNCACHED_REP);
}

/// GETATTR returns the requested attributes this server supports, in bit order, and
/// leaves the others out of the mask; share reservations conflict as RFC 8881 §9.7 says.
#[test]
fn getattr_values_and_share_reservations() {
    use super::attrs::a;
    let mut w = world(StateLimits::default());
    let (clientid, sid) = w.session(b"c6");
    let req = crate::nfs::v41::Bitmap4::of(&[
        a::SUPPORTED_ATTRS,
        a::TYPE,
        a::FH_EXPIRE_TYPE,
        a::LEASE_TIME,
        a::FILEHANDLE,
        a::MAXREAD,
        12, // acl: not supported, left out
        a::SUPPATTR_EXCLCREAT,
    ]);
    let ops = [seq(sid, 0, 1), ArgOp::PutRootFh, ArgOp::Getattr(req)];
    let bytes = w.raw(&call(1, 3, &enc_ops(&ops))).unwrap();
    let r = CompoundRes::decode(&mut DdpCursor::inline(&bytes, 0)).unwrap();
    let ResBody::Getattr(f) = &r.results[2].body else {
        panic!("{r:?}")
    };
    assert!(!f.mask.contains(12));
    assert!(f.mask.contains(a::SUPPATTR_EXCLCREAT));
    let mut c = DdpCursor::inline(f.vals, 0);
    let n = c.count(8).unwrap();
    let words: Vec<u32> = (0..n).map(|_| c.u32().unwrap()).collect();
    assert_eq!(words, super::attrs::SUPPORTED.to_vec());
    assert_eq!(c.u32().unwrap(), crate::nfs::v41::ftype::NF4DIR);
    assert_eq!(c.u32().unwrap(), 0, "FH4_PERSISTENT");
    assert_eq!(c.u32().unwrap(), 90, "lease_time");
    let root = w.shared.root_handle();
    assert_eq!(c.opaque(128).unwrap(), root.as_bytes());
    assert_eq!(c.u64().unwrap(), u64::from(NfsConfig::default().max_read));
    let n = c.count(8).unwrap();
    let words: Vec<u32> = (0..n).map(|_| c.u32().unwrap()).collect();
    assert_eq!(words, super::attrs::SETTABLE[..2].to_vec());
    c.finish().unwrap();

    // Owner "a" opens with deny WRITE; owner "b" asking for write access is denied,
    // read access is granted.
    let open = |owner: &'static [u8], access: u32, deny: u32| {
        ArgOp::Open(OpenArgs {
            seqid: 0,
            share_access: access,
            share_deny: deny,
            owner_clientid: clientid,
            owner,
            how: OpenHow::Create(CreateHow::Unchecked(crate::nfs::v41::Fattr4::default())),
            claim: OpenClaim::Null(b"shared"),
        })
    };
    let root = root.as_bytes().to_vec();
    let (s, _) = w.compound(&[seq(sid, 0, 2), ArgOp::PutFh(&root), open(b"a", 1, 2)]);
    assert_eq!(s, Nfsstat4::OK);
    let (s, _) = w.compound(&[seq(sid, 0, 3), ArgOp::PutFh(&root), open(b"b", 3, 0)]);
    assert_eq!(s, Nfsstat4::SHARE_DENIED);
    let (s, _) = w.compound(&[seq(sid, 0, 4), ArgOp::PutFh(&root), open(b"b", 1, 0)]);
    assert_eq!(s, Nfsstat4::OK);
    assert_eq!(w.shared.v41().lock().opens.len(), 2);
}
