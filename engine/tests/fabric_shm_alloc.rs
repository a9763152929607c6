//! The shm data path allocates nothing in steady state: posting Sends (small and large),
//! RDMA Writes and Reads, posting receives and polling both completion queues, counted
//! by a global allocator that tallies the calling thread's allocations.

mod conformance;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use conformance::{connect, Fixture, Opts, Side};
use rpcrdma::fabric::shm::{ShmAddr, ShmDevice, ShmProvider};
use rpcrdma::fabric::{
    Completion, CompletionQueue, QpCaps, QpConfig, QueuePair, RecvWr, SendFlags, SendWr, WcOpcode,
    WcStatus,
};

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

struct Counting;

// SAFETY: forwards to the system allocator; only counts calls on the calling thread.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

struct ShmFixture;

impl Fixture for ShmFixture {
    type P = ShmProvider;

    fn open_device() -> ShmDevice {
        ShmDevice::new()
    }

    fn unique_addr() -> ShmAddr {
        ShmAddr::abstract_name(format!(
            "rpcrdma-shm-alloc-{}-{}",
            std::process::id(),
            conformance::unique_number()
        ))
    }
}

type S = Side<ShmProvider>;

/// Most polls one step may take; one thread drives both sides, so one or two suffice.
const MAX_POLLS: u32 = 10_000;

/// Polls `side` until a completion with `opcode` arrives; panics on a failed one or
/// after [`MAX_POLLS`] polls. Polls `other` in between (it may owe the acks).
fn wait_for(side: &mut S, other: &mut S, opcode: WcOpcode) {
    let mut buf = [Completion::EMPTY; 8];
    for _ in 0..MAX_POLLS {
        let n = side.h.cq.poll(&mut buf);
        let mut found = false;
        for c in &buf[..n] {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
            found |= c.opcode == opcode;
        }
        if found {
            return;
        }
        let n = other.h.cq.poll(&mut buf);
        for c in &buf[..n] {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
        }
    }
    panic!("no {opcode:?} completion after {MAX_POLLS} polls");
}

/// One round of every data-path operation, client to server and back.
fn round(c: &mut S, s: &mut S, i: u64) {
    let flags = if i % 4 == 3 {
        SendFlags::SIGNALED
    } else {
        SendFlags::NONE
    };
    // A small Send each way.
    let (small_c, small_s) = ([c.sge(4096, 32)], [s.sge(4096, 32)]);
    let (rb_c, rb_s) = ([c.sge(0, 4096)], [s.sge(0, 4096)]);
    c.qp.post_send(&[SendWr::send(i, &small_c).with_flags(flags)])
        .expect("post small send");
    wait_for(s, c, WcOpcode::Recv);
    s.qp.post_recv(&[RecvWr {
        wr_id: i,
        sgl: &rb_s,
    }])
    .expect("repost");
    s.qp.post_send(&[SendWr::send(i, &small_s).with_flags(flags)])
        .expect("post small reply");
    wait_for(c, s, WcOpcode::Recv);
    c.qp.post_recv(&[RecvWr {
        wr_id: i,
        sgl: &rb_c,
    }])
    .expect("repost");
    // A large Send (two entries), an RDMA Write and an RDMA Read, signaled.
    let big = [c.sge(8192, 2000), c.sge(16384, 2000)];
    c.qp.post_send(&[SendWr::send(i, &big)])
        .expect("post large send");
    wait_for(s, c, WcOpcode::Recv);
    s.qp.post_recv(&[RecvWr {
        wr_id: i,
        sgl: &rb_s,
    }])
    .expect("repost");
    wait_for(c, s, WcOpcode::Send);
    let local = [c.sge(32768, 8192)];
    c.qp.post_send(&[SendWr::write(i, &local, s.remote(65536))])
        .expect("post write");
    wait_for(c, s, WcOpcode::RdmaWrite);
    c.qp.post_send(&[SendWr::read(i, &local, s.remote(65536))])
        .expect("post read");
    wait_for(c, s, WcOpcode::RdmaRead);
}

#[test]
fn steady_state_data_path_does_not_allocate() {
    let caps = QpCaps {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 2,
        max_recv_sge: 1,
    };
    let cfg = QpConfig {
        caps,
        ..QpConfig::default()
    };
    let o = Opts {
        server: cfg,
        client: cfg,
        ..Opts::default()
    };
    let mut p = connect::<ShmFixture>(&o);
    for side in [&mut p.c, &mut p.s] {
        let rb = [side.sge(0, 4096)];
        for w in 0..8 {
            side.qp
                .post_recv(&[RecvWr { wr_id: w, sgl: &rb }])
                .expect("post receive");
        }
    }
    // Warm up: first touches, lazily mapped peer arenas.
    for i in 0..50 {
        round(&mut p.c, &mut p.s, i);
    }
    let before = allocs();
    for i in 50..1050 {
        round(&mut p.c, &mut p.s, i);
    }
    assert_eq!(allocs() - before, 0, "the steady-state data path allocated");
    // The counter works: an allocation on this thread is seen.
    let v = std::hint::black_box(vec![1u8; 16]);
    assert!(allocs() > before, "allocation counter saw nothing");
    drop(v);
}
