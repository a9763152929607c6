//! The NFSv4.1 READ and WRITE paths allocate nothing once warm: COMPOUNDs of SEQUENCE,
//! PUTFH and WRITE (data in a Read chunk, the reply cached in the slot) or READ (data
//! into a Write chunk, the reply not cacheable), dispatched through the ONC RPC
//! dispatcher to the NFSv4.1 server over the in-memory backend, and the slot's replay of
//! a cached reply. Counted with a global allocator wrapper, per thread, after warm-up.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use rpcrdma_ulp::ddp::{reply_results, DdpEncoder, XdrCodec};
use rpcrdma_ulp::nfs::server::{MemFs, NfsConfig, NfsProgram, NfsShared};
use rpcrdma_ulp::nfs::v41::compound::*;
use rpcrdma_ulp::nfs::v41::{ChannelAttrs4, Fattr4, Nfsstat4, SessionId, Stateid4};
use rpcrdma_ulp::program::{Dispatched, Dispatcher, InboundCall};
use rpcrdma_ulp::rpc::{CallHeader, OpaqueAuth};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.with(|c| c.set(c.get() + 1));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

const DATA: usize = 64 * 1024;

/// Encodes a COMPOUND of `ops` into `msg` (WRITE data of 1 KiB or more as Read chunks)
/// and dispatches it with one Write chunk of `DATA` octets offered; returns the
/// COMPOUND status, the octets of Write chunk data and of the inline reply.
fn run(
    d: &mut Dispatcher,
    msg: &mut [u8],
    out: &mut [u8],
    ops: &[ArgOp<'_>],
) -> (u32, usize, usize) {
    let h = CallHeader {
        xid: 9,
        prog: 100_003,
        vers: 4,
        procedure: 1,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    };
    let at = h.encode(msg).unwrap();
    let (_, rest) = msg.split_at_mut(at);
    let mut e = DdpEncoder::read_chunks(rest, at, 1024);
    e.string(b"").unwrap();
    e.u32(1).unwrap();
    e.u32(ops.len() as u32).unwrap();
    for op in ops {
        op.encode(&mut e).unwrap();
    }
    let enc = e.finish();
    let inbound = InboundCall {
        msg: &msg[..enc.len],
        reads: enc.reads.as_slice(),
        write_chunks: &[DATA as u64],
        padding: None,
    };
    let Ok(Dispatched::Reply(r)) = d.dispatch(&inbound, out) else {
        panic!("no reply");
    };
    let chunk = r
        .write_chunks
        .as_slice()
        .first()
        .map_or(0, |w| w.data.len());
    let (_, mut c) = reply_results(&out[..r.len], &[]).unwrap();
    (c.u32().unwrap(), chunk, r.len)
}

fn seq(sid: SessionId, seqid: u32) -> ArgOp<'static> {
    ArgOp::Sequence(SequenceArgs {
        sessionid: sid,
        sequenceid: seqid,
        slotid: 0,
        highest_slotid: 0,
        cachethis: true,
    })
}

fn body<'a>(out: &'a [u8], len: usize) -> CompoundRes<'a> {
    let (_, mut c) = reply_results(&out[..len], &[]).unwrap();
    CompoundRes::decode(&mut c).unwrap()
}

#[test]
fn nfs41_read_and_write_allocate_nothing_once_warm() {
    let shared = NfsShared::new(Arc::new(MemFs::new(16 << 20)), NfsConfig::default());
    let mut d = Dispatcher::new();
    d.register(Box::new(NfsProgram::new(shared.clone())))
        .unwrap();
    let mut msg = vec![0u8; 8192];
    let mut out = vec![0u8; 16384];
    let data = vec![0x5au8; DATA];

    // Setup (allocates): client, session, an open file with data.
    let x = ArgOp::ExchangeId(ExchangeIdArgs {
        verifier: [1; 8],
        owner: b"alloc",
        flags: 0,
        impl_id: None,
    });
    let (_, _, n) = run(&mut d, &mut msg, &mut out, &[x]);
    let (clientid, sequence) = match &body(&out, n).results[0].body {
        ResBody::ExchangeId(x) => (x.clientid, x.sequenceid),
        other => panic!("{other:?}"),
    };
    let attrs = ChannelAttrs4 {
        maxrequestsize: 1 << 20,
        maxresponsesize: 1 << 20,
        maxresponsesize_cached: 4096,
        maxoperations: 8,
        maxrequests: 1,
        ..ChannelAttrs4::default()
    };
    let cs = ArgOp::CreateSession(CreateSessionArgs {
        clientid,
        sequence,
        flags: 0,
        fore: attrs,
        back: attrs,
        cb_program: 1,
        cb_sec: CbSecParms::AUTH_NONE,
    });
    let (_, _, n) = run(&mut d, &mut msg, &mut out, &[cs]);
    let ResBody::CreateSession(s) = body(&out, n).results[0].body.clone() else {
        panic!()
    };
    let sid = s.sessionid;
    let root = shared.root_handle().as_bytes().to_vec();
    let open = ArgOp::Open(OpenArgs {
        seqid: 0,
        share_access: OPEN4_SHARE_ACCESS_BOTH,
        share_deny: 0,
        owner_clientid: clientid,
        owner: b"o",
        how: OpenHow::Create(CreateHow::Unchecked(Fattr4::default())),
        claim: OpenClaim::Null(b"f"),
    });
    let (st, _, n) = run(
        &mut d,
        &mut msg,
        &mut out,
        &[seq(sid, 1), ArgOp::PutFh(&root), open, ArgOp::GetFh],
    );
    assert_eq!(st, 0);
    let r = body(&out, n);
    let (ResBody::Open(o), ResBody::GetFh(fh)) = (&r.results[2].body, &r.results[3].body) else {
        panic!("{r:?}")
    };
    let stateid: Stateid4 = o.stateid;
    let fh = fh.to_vec();

    let mut seqid = 2;
    let round = |d: &mut Dispatcher, msg: &mut [u8], out: &mut [u8], seqid: &mut u32| {
        let w = ArgOp::Write(WriteArgs {
            stateid,
            offset: 0,
            stable: FILE_SYNC4,
            data: &data,
        });
        let (st, _, _) = run(
            d,
            msg,
            out,
            &[seq(sid, *seqid), ArgOp::PutFh(&fh), w.clone()],
        );
        assert_eq!(st, 0);
        // The retry replays the cached reply (the WRITE is not run again).
        let (st, _, _) = run(d, msg, out, &[seq(sid, *seqid), ArgOp::PutFh(&fh), w]);
        assert_eq!(st, 0);
        *seqid += 1;
        let rd = ArgOp::Read(ReadArgs {
            stateid,
            offset: 0,
            count: DATA as u32,
        });
        let (st, got, _) = run(d, msg, out, &[seq(sid, *seqid), ArgOp::PutFh(&fh), rd]);
        assert_eq!((st, got), (0, DATA));
        *seqid += 1;
    };
    for _ in 0..3 {
        round(&mut d, &mut msg, &mut out, &mut seqid);
    }
    let writes = shared.counters.nfs4_op(38).calls;
    let before = allocs();
    for _ in 0..50 {
        round(&mut d, &mut msg, &mut out, &mut seqid);
    }
    let n = allocs() - before;
    assert_eq!(
        n, 0,
        "{n} allocations in 50 rounds of WRITE, its replay and READ"
    );
    assert_eq!(
        shared.counters.nfs4_op(38).calls - writes,
        50,
        "replays did not run WRITE again"
    );
    assert_eq!(Nfsstat4::OK.0, 0);
}
