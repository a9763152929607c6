//! The poller's steady state allocates nothing: mailbox sends from an application thread,
//! message delivery, timer arm/fire/cancel and the poll loop itself, including parking and
//! waking. A counting global allocator counts per thread, so the poller thread and the
//! sending thread are each measured on their own, after a warm-up.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{parking_config, wait_until};
use rpcrdma_poller::{PollCtx, PollerGroup, SendErrorKind, Task};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: defers to System for the allocation itself; only bumps a thread-local counter,
// which is const-initialised and so never allocates on first use.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        System.realloc(ptr, layout, new)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs_here() -> u64 {
    ALLOCS.with(|c| c.get())
}

const WARMUP: u64 = 2_000;
const MEASURED: u64 = 20_000;

/// Counts messages; after the warm-up it snapshots this thread's allocation count, and at
/// the end publishes how many allocations happened in between. Every message also arms a
/// timer and cancels the previous one; every 64th message instead arms a zero-delay timer that is left to fire.
struct Probe {
    seen: u64,
    start: u64,
    fired: Arc<AtomicU64>,
    result: Arc<AtomicU64>,
    pending: Option<rpcrdma_poller::TimerId>,
}

const NOT_DONE: u64 = u64::MAX;

impl Task<u64> for Probe {
    fn poll(&mut self, _: &mut PollCtx<'_>) -> usize {
        0
    }

    fn on_message(&mut self, msg: u64, ctx: &mut PollCtx<'_>) {
        self.seen += 1;
        if self.seen == WARMUP {
            self.start = allocs_here();
        }
        if msg.is_multiple_of(64) {
            // Left alone, so it fires on a later loop iteration.
            let _ = ctx.arm_timer_after(Duration::ZERO, msg);
        } else {
            if let Some(id) = self.pending.take() {
                ctx.cancel_timer(id);
            }
            self.pending = ctx.arm_timer_after(Duration::from_secs(3600), msg).ok();
        }
        if self.seen == WARMUP + MEASURED {
            self.result
                .store(allocs_here() - self.start, Ordering::Release);
        }
    }

    fn on_timer(&mut self, _token: u64, _: &mut PollCtx<'_>) {
        self.fired.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn steady_state_send_deliver_and_timers_allocate_nothing() {
    let group = PollerGroup::<u64>::start(&[0], parking_config()).expect("start poller");
    let fired = Arc::new(AtomicU64::new(0));
    let result = Arc::new(AtomicU64::new(NOT_DONE));
    let id = group
        .handle(0)
        .expect("poller 0")
        .add_task(Box::new(Probe {
            seen: 0,
            start: 0,
            fired: fired.clone(),
            result: result.clone(),
            pending: None,
        }))
        .expect("add task");

    let deadline = Instant::now() + common::PATIENCE;
    let mut sender_start = 0;
    for i in 1..=WARMUP + MEASURED {
        if i == WARMUP {
            sender_start = allocs_here();
        }
        let mut msg = i;
        loop {
            match group.send(id, msg) {
                Ok(()) => break,
                Err(e) if e.kind() == SendErrorKind::Full => {
                    assert!(Instant::now() < deadline, "mailbox stayed full");
                    msg = e.into_inner();
                    std::thread::yield_now();
                }
                Err(e) => panic!("send failed: {e}"),
            }
        }
    }
    let sender_allocs = allocs_here() - sender_start;

    wait_until("the poller to see every message", || {
        result.load(Ordering::Acquire) != NOT_DONE
    });
    let poller_allocs = result.load(Ordering::Acquire);
    wait_until("the zero-delay timers to fire", || {
        fired.load(Ordering::Relaxed) == (WARMUP + MEASURED) / 64
    });
    assert_eq!(
        sender_allocs, 0,
        "mailbox sends allocated {sender_allocs} times"
    );
    assert_eq!(
        poller_allocs, 0,
        "poller thread allocated {poller_allocs} times over {MEASURED} messages"
    );
    group
        .shutdown(Instant::now() + common::PATIENCE)
        .expect("shutdown");
}
