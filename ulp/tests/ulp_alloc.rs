//! The hot paths allocate nothing: encoding a call with Read chunks, dispatching it
//! (header decode, routing, argument decode, result encode with Write chunks), decoding
//! the reply, and the duplicate request cache (storing, evicting and replaying replies).
//! Counted with a global allocator wrapper, per thread, after setup.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use rpcrdma_ulp::binding::{ProcInfo, ReplySize};
use rpcrdma_ulp::builtin::{echo_proc, Echo2, EchoData, EchoProgram, SourceArgs, ECHO_PROGRAM};
use rpcrdma_ulp::ddp::{encode_call, reply_results, DdpCursor, DdpEncoder, Void, XdrCodec};
use rpcrdma_ulp::program::{
    Dispatched, Dispatcher, Drc, DrcConfig, InboundCall, ProcError, Program,
};
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

fn header(procedure: u32, xid: u32) -> CallHeader<'static> {
    CallHeader {
        xid,
        prog: ECHO_PROGRAM,
        vers: 1,
        procedure,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    }
}

/// One ECHO2 round trip (Read chunks in, Write chunks out) and one SOURCE; returns the
/// number of octets checked so the work cannot be optimised away.
fn round_trips(
    d: &mut Dispatcher,
    a: &[u8],
    b: &[u8],
    msg: &mut [u8],
    out: &mut [u8],
    xid: u32,
) -> usize {
    let args = Echo2 { a, tag: xid, b };
    let call = encode_call(msg, &header(echo_proc::ECHO2, xid), &args, 1).unwrap();
    assert_eq!(call.read_chunks.len(), 2);
    let inbound = InboundCall {
        msg: &msg[..call.len],
        reads: &call.read_chunks,
        write_chunks: &[4096, 4096],
        padding: None,
    };
    let Ok(Dispatched::Reply(r)) = d.dispatch(&inbound, out) else {
        panic!("no reply");
    };
    let written = [r.write_chunks[0].data, r.write_chunks[1].data];
    let (_, mut c) = reply_results(&out[..r.len], &written).unwrap();
    let back = Echo2::decode(&mut c).unwrap();
    c.finish().unwrap();
    assert_eq!(back, args);
    let mut n = back.a.len() + back.b.len();

    let mut small = [0u8; 64];
    let call = encode_call(
        &mut small,
        &header(echo_proc::SOURCE, xid),
        &SourceArgs { len: 100 },
        1,
    )
    .unwrap();
    let Ok(Dispatched::Reply(r)) = d.dispatch(&InboundCall::inline(&small[..call.len]), out) else {
        panic!("no reply");
    };
    let (_, mut c) = reply_results(&out[..r.len], &[]).unwrap();
    n += EchoData::decode(&mut c).unwrap().data.len();
    n
}

#[test]
fn steady_state_allocates_nothing() {
    let mut d = Dispatcher::new();
    d.register(Box::new(EchoProgram::with_source_max(4096)))
        .unwrap();
    let (a, b) = (vec![1u8; 1000], vec![2u8; 333]);
    let (mut msg, mut out) = (vec![0u8; 256], vec![0u8; 4096]);
    // Warm up: anything lazily initialised happens here.
    round_trips(&mut d, &a, &b, &mut msg, &mut out, 0);
    // The counter sees this thread's allocations.
    let probe_from = allocs();
    let probe = std::hint::black_box(vec![0u8; 16]);
    assert_eq!(allocs() - probe_from, 1);
    drop(probe);
    let before = allocs();
    let mut total = 0;
    for xid in 1..=100 {
        total += round_trips(&mut d, &a, &b, &mut msg, &mut out, xid);
    }
    let after = allocs();
    assert_eq!(total, 100 * (1000 + 333 + 100));
    assert_eq!(
        after - before,
        0,
        "allocations in 200 steady-state round trips"
    );
}

/// A program whose one procedure (no arguments) is not idempotent: it counts its calls
/// and returns the count, so a replay (the old count) is told from a second run (a new
/// one).
struct Tally {
    n: u32,
    drc: Arc<Drc>,
}

const TALLY_PROGRAM: u32 = 0x2f00_00d1;
static BUMP: ProcInfo = ProcInfo::plain(1, "BUMP", ReplySize::fixed(4));

impl Program for Tally {
    fn prog(&self) -> u32 {
        TALLY_PROGRAM
    }
    fn versions(&self) -> (u32, u32) {
        (1, 1)
    }
    fn proc_info(&self, _vers: u32, procedure: u32) -> Option<&'static ProcInfo> {
        (procedure == 1).then_some(&BUMP)
    }
    fn call<'d>(
        &'d mut self,
        _call: &CallHeader<'d>,
        _args: &mut DdpCursor<'d>,
        results: &mut DdpEncoder<'_, 'd>,
    ) -> Result<(), ProcError> {
        self.n += 1;
        results.u32(self.n)?;
        Ok(())
    }
    fn reply_cache(&self) -> Option<Arc<Drc>> {
        Some(self.drc.clone())
    }
}

/// BUMP under `xid`; returns the count in the reply.
fn bump(d: &mut Dispatcher, msg: &mut [u8], out: &mut [u8], xid: u32) -> u32 {
    let h = CallHeader {
        xid,
        prog: TALLY_PROGRAM,
        vers: 1,
        procedure: 1,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    };
    let call = encode_call(msg, &h, &Void, usize::MAX).unwrap();
    let Ok(Dispatched::Reply(r)) = d.dispatch(&InboundCall::inline(&msg[..call.len]), out) else {
        panic!("no reply");
    };
    let (_, mut c) = reply_results(&out[..r.len], &[]).unwrap();
    let n = c.u32().unwrap();
    c.finish().unwrap();
    n
}

#[test]
fn the_duplicate_request_cache_allocates_nothing_per_call() {
    let drc = Arc::new(Drc::new(DrcConfig::new(16, 4096, 256).unwrap()));
    let mut d = Dispatcher::new();
    d.register(Box::new(Tally {
        n: 0,
        drc: drc.clone(),
    }))
    .unwrap();
    let (mut msg, mut out) = (vec![0u8; 256], vec![0u8; 256]);
    assert_eq!(bump(&mut d, &mut msg, &mut out, 0), 1);
    let before = allocs();
    for xid in 1..=200 {
        let first = bump(&mut d, &mut msg, &mut out, xid);
        assert_eq!(first, xid + 1, "a new call runs");
        assert_eq!(
            bump(&mut d, &mut msg, &mut out, xid),
            first,
            "a retransmission replays"
        );
    }
    let after = allocs();
    let s = drc.stats();
    assert_eq!((s.insertions, s.hits), (201, 200), "{s:?}");
    assert_eq!(s.evictions, 201 - 16, "{s:?}");
    assert_eq!(after - before, 0, "allocations in 400 cached dispatches");
}
