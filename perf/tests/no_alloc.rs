//! The measured loop's bookkeeping (histogram recording and the meter) never allocates.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma_perf::histogram::Histogram;
use rpcrdma_perf::measure::{Budget, Meter};
use rpcrdma_perf::units::Amount;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

struct Counting;

// SAFETY: forwards to the system allocator; only counts calls on the calling thread.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        System.realloc(p, l, n)
    }
}

#[global_allocator]
static A: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

#[test]
fn recording_and_ticking_do_not_allocate() {
    let mut h = Histogram::new();
    let budget = Budget {
        warmup: Amount::Iters(100),
        stop: Amount::Time(Duration::from_secs(3600)),
    };
    let mut m = Meter::new(budget, Arc::new(AtomicU64::new(0)));
    let before = allocs();
    let t = Instant::now();
    for i in 0..100_000u64 {
        h.record(i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (i % 64));
        assert!(m.tick(t, i));
    }
    let p = h.percentile(99.9);
    assert_eq!(allocs(), before, "the measured loop allocated");
    assert!(p <= h.max());
    assert_eq!(m.finish().ops, 100_000 - 100);
}
