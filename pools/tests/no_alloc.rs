//! The hot path never allocates: a counting global allocator sees zero allocations
//! across many steady-state gets and puts, single and bulk, including refills from and
//! flushes to the shared ring and token round trips.
//!
//! Counting is per thread, so allocations by the test harness's other threads do not
//! disturb the result.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use rpcrdma_pools::{Buf, HugePages, Pool, PoolConfig, RegKeys};

struct Counting;

thread_local! {
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn count_one() {
    // try_with: the slot may already be gone during thread teardown.
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: forwards to the system allocator unchanged, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

#[test]
fn steady_state_get_put_bulk_and_tokens_do_not_allocate() {
    let pool = Pool::new(
        &PoolConfig::new("noalloc", 2048, 512)
            .hugepages(HugePages::Never)
            .cache_size(32),
    )
    .unwrap();
    pool.arena().set_keys(RegKeys { lkey: 1, rkey: 2 });
    let mut cache = pool.cache();
    let mut held: [Option<Buf>; 200] = [const { None }; 200];
    let mut bulk: [Option<Buf>; 32] = [const { None }; 32];

    // Sanity check that the counter works at all.
    let before = allocs();
    drop(std::hint::black_box(vec![1u8; 10]));
    assert_eq!(allocs(), before + 1);

    let before = allocs();
    let mut sum = 0u64;
    for round in 0..2000usize {
        // Single get/put.
        let mut b = cache.get().unwrap();
        b.as_mut_slice()[0] = round as u8;
        sum += u64::from(b.sge(100).unwrap().lkey);
        cache.put(b).unwrap();

        // Bulk of 32.
        cache.get_bulk(&mut bulk).unwrap();
        cache.put_bulk(&mut bulk).unwrap();

        // Hold many at once so the cache refills from and flushes to the ring.
        if round % 10 == 0 {
            for slot in held.iter_mut() {
                *slot = Some(cache.get().unwrap());
            }
            cache.put_bulk(&mut held).unwrap();
        }

        // Token round trip (work-request id path) and cache-bypassing ops.
        let t = cache.get().unwrap().into_token();
        let b = pool.redeem(t).unwrap();
        cache.put(b).unwrap();
        let b = pool.get().unwrap();
        pool.put(b).unwrap();
        sum += pool.available() as u64;
    }
    cache.flush();
    let after = allocs();
    std::hint::black_box(sum);
    assert_eq!(
        after - before,
        0,
        "hot path allocated {} times",
        after - before
    );
    assert!(pool.is_full());
}
