//! The siw data path must not allocate once a connection is up: posting, polling
//! (socket reads and writes, placement, confirmation Reads, completions). This binary
//! counts the calling thread's heap allocations while two connected siw devices on this
//! thread exchange Sends, RDMA Writes and RDMA Reads.

mod conformance;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::SocketAddr;
use std::time::Instant;

use conformance::{pair, Fixture, Pair, DEADLINE};
use rpcrdma::fabric::siw::{SiwDevice, SiwProvider};
use rpcrdma::fabric::{Completion, CompletionQueue, QueuePair, RecvWr, SendWr, WcStatus};

struct CountingAlloc;

thread_local! {
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: defers every operation to the system allocator; only counts.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

struct Siw;

impl Fixture for Siw {
    type P = SiwProvider;

    fn open_device() -> SiwDevice {
        SiwDevice::with_config(rpcrdma::fabric::siw::SiwConfig::strict()).expect("device")
    }

    fn unique_addr() -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    }
}

/// Polls both completion queues until `n` completions arrived at the server and `m` at
/// the client, all successful, without allocating (fixed arrays).
fn wait(p: &mut Pair<SiwProvider>, n: usize, m: usize) {
    let (mut got_s, mut got_c) = (0, 0);
    let mut buf = [Completion::EMPTY; 8];
    let end = Instant::now() + DEADLINE;
    while got_s < n || got_c < m {
        assert!(Instant::now() < end, "timed out");
        let k = p.s.h.cq.poll(&mut buf);
        assert!(buf[..k].iter().all(|c| c.status == WcStatus::Success));
        got_s += k;
        let k = p.c.h.cq.poll(&mut buf);
        assert!(buf[..k].iter().all(|c| c.status == WcStatus::Success));
        got_c += k;
    }
    assert_eq!((got_s, got_c), (n, m));
}

fn round(p: &mut Pair<SiwProvider>) {
    let rb = [p.s.sge(0, 4096)];
    p.s.qp.post_recv(&[RecvWr { wr_id: 1, sgl: &rb }]).unwrap();
    let sb = [p.c.sge(0, 2000)];
    let wb = [p.c.sge(8192, 8192)];
    let rdb = [p.c.sge(65536, 8192)];
    let chain = [
        SendWr::write(2, &wb, p.s.remote(100_000)),
        SendWr::read(3, &rdb, p.s.remote(200_000)),
        SendWr::send(4, &sb),
    ];
    p.c.qp.post_send(&chain).unwrap();
    wait(p, 1, 3);
}

#[test]
fn steady_state_send_write_read_do_not_allocate() {
    let probe = ALLOCS.with(Cell::get);
    drop(std::hint::black_box(vec![0u8; 16]));
    assert!(ALLOCS.with(Cell::get) > probe, "the counter counts");
    let mut p = pair::<Siw>();
    for _ in 0..20 {
        round(&mut p);
    }
    let before = ALLOCS.with(Cell::get);
    for _ in 0..200 {
        round(&mut p);
    }
    let n = ALLOCS.with(Cell::get) - before;
    assert_eq!(n, 0, "{n} allocations in 200 rounds");
}
