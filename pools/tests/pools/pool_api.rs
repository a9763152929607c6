//! Single-threaded behaviour of pools, caches and buffers through the public API.

use std::collections::HashSet;
use std::sync::Arc;

use rpcrdma_pools::{
    Arena, ArenaOptions, BufToken, HugePages, Pool, PoolConfig, PoolError, RegKeys, CACHE_LINE,
};

fn cfg(name: &'static str, size: usize, count: u32) -> PoolConfig {
    PoolConfig::new(name, size, count)
        .hugepages(HugePages::Never)
        .cache_size(8)
}

#[test]
fn buffers_are_cache_line_aligned_sized_and_disjoint() {
    let pool = Pool::new(&cfg("sizes", 100, 50)).unwrap();
    assert_eq!(pool.buf_size(), 100);
    assert_eq!(pool.stride(), 128);
    let mut cache = pool.cache();
    let mut bufs = Vec::new();
    for _ in 0..50 {
        let mut b = cache.get().unwrap();
        assert_eq!(b.len(), 100);
        assert_eq!(b.addr() % CACHE_LINE as u64, 0);
        assert_eq!(b.as_mut_slice().len(), 100);
        let base = pool.arena().base() as u64;
        assert_eq!(b.addr() - base, b.offset() as u64);
        assert_eq!(b.offset(), b.index() as usize * 128);
        assert!(pool.arena().contains(b.as_ptr(), b.len()));
        // Fill every byte with the slot's index: overlapping slots would clobber each other.
        let tag = b.index() as u8;
        b.as_mut_slice().fill(tag);
        bufs.push(b);
    }
    for b in &bufs {
        assert!(b.as_slice().iter().all(|&x| x == b.index() as u8));
    }
    let idx: HashSet<u32> = bufs.iter().map(|b| b.index()).collect();
    assert_eq!(idx.len(), 50);
    for b in bufs {
        cache.put(b).unwrap();
    }
}

#[test]
fn larger_alignment_is_honoured() {
    let pool = Pool::new(&cfg("ddp", 5000, 4).align(4096)).unwrap();
    assert_eq!(pool.stride(), 8192);
    let mut cache = pool.cache();
    let mut out: [Option<_>; 4] = Default::default();
    cache.get_bulk(&mut out).unwrap();
    for b in out.iter().flatten() {
        assert_eq!(b.addr() % 4096, 0);
    }
    cache.put_bulk(&mut out).unwrap();
}

#[test]
fn bad_configurations_are_typed_errors() {
    let bad = [
        cfg("z", 0, 1),
        cfg("z", 1, 0),
        cfg("z", 64, 1).align(96),
        cfg("z", 64, 1).cache_size(0),
    ];
    for c in &bad {
        let e = Pool::new(c).unwrap_err();
        assert!(matches!(e, PoolError::InvalidConfig(_)), "{e}");
        assert!(!e.to_string().is_empty());
    }
}

#[test]
fn exhaustion_is_an_error_and_recovers() {
    let pool = Pool::new(&cfg("small", 64, 10)).unwrap();
    let mut cache = pool.cache();
    let mut held: Vec<_> = (0..10).map(|_| cache.get().unwrap()).collect();
    assert!(matches!(cache.get(), Err(PoolError::Exhausted)));
    assert!(matches!(pool.get(), Err(PoolError::Exhausted)));
    let s = pool.stats();
    assert_eq!((s.count, s.available, s.cached, s.in_use), (10, 0, 0, 10));
    assert_eq!(s.high_water, 10);
    cache.put(held.pop().unwrap()).unwrap();
    let again = cache.get().unwrap();
    held.push(again);
    for b in held {
        cache.put(b).unwrap();
    }
    assert!(!pool.is_full(), "cached buffers are not back until flushed");
    assert_eq!(pool.stats().cached, 10);
    cache.flush();
    assert!(pool.is_full());
    assert_eq!(pool.stats().in_use, 0);
}

#[test]
fn dropping_a_cache_flushes_it() {
    let pool = Pool::new(&cfg("dropflush", 64, 30)).unwrap();
    {
        let mut cache = pool.cache();
        let b = cache.get().unwrap();
        assert_eq!(cache.len(), 8, "refill tops up to the cache size");
        cache.put(b).unwrap();
        assert!(!pool.is_full());
    }
    assert!(pool.is_full());
    assert_eq!(pool.stats().cached, 0);
}

#[test]
fn cache_overflow_flushes_oldest_half_to_the_ring() {
    let pool = Pool::new(&cfg("overflow", 64, 40)).unwrap();
    let mut a = pool.cache();
    assert_eq!(a.capacity(), 16);
    let held: Vec<_> = (0..40).map(|_| pool.get().unwrap()).collect();
    for b in held {
        a.put(b).unwrap();
        assert!(a.len() <= 16);
    }
    // 40 puts into a 16-slot cache: everything beyond the last flush stays local.
    assert_eq!(a.len() + pool.available(), 40);
    assert!(pool.available() >= 24);
    // Another cache can use what was flushed.
    let mut b = pool.cache();
    let x = b.get().unwrap();
    b.put(x).unwrap();
}

#[test]
fn lifo_cache_reuses_the_warm_buffer() {
    let pool = Pool::new(&cfg("lifo", 64, 16)).unwrap();
    let mut cache = pool.cache();
    let mut b = cache.get().unwrap();
    let i = b.index();
    b.as_mut_slice()[..4].copy_from_slice(b"warm");
    cache.put(b).unwrap();
    let b = cache.get().unwrap();
    assert_eq!(b.index(), i);
    assert_eq!(&b.as_slice()[..4], b"warm");
    cache.put(b).unwrap();
}

#[test]
fn bulk_get_is_all_or_nothing_and_fills_only_empty_entries() {
    let pool = Pool::new(&cfg("bulk", 64, 20).cache_size(16)).unwrap();
    let mut cache = pool.cache();
    let mut out: [Option<_>; 12] = Default::default();
    out[3] = Some(cache.get().unwrap());
    let kept = out[3].as_ref().unwrap().index();
    cache.get_bulk(&mut out).unwrap();
    assert!(out.iter().all(Option::is_some));
    assert_eq!(out[3].as_ref().unwrap().index(), kept);
    let idx: HashSet<u32> = out.iter().flatten().map(|b| b.index()).collect();
    assert_eq!(idx.len(), 12);

    // 8 left; asking for 10 fails and hands out nothing.
    let mut more: [Option<_>; 10] = Default::default();
    assert!(matches!(
        cache.get_bulk(&mut more),
        Err(PoolError::Exhausted)
    ));
    assert!(more.iter().all(Option::is_none));

    let mut huge: Vec<Option<_>> = (0..33).map(|_| None).collect();
    match cache.get_bulk(&mut huge) {
        Err(PoolError::BulkTooLarge { requested, max }) => assert_eq!((requested, max), (33, 32)),
        other => panic!("expected BulkTooLarge, got {other:?}"),
    }

    cache.put_bulk(&mut out).unwrap();
    assert!(out.iter().all(Option::is_none));
    cache.flush();
    assert!(pool.is_full());
}

#[test]
fn foreign_buffers_are_refused_and_given_back() {
    let p1 = Pool::new(&cfg("one", 64, 8)).unwrap();
    let p2 = Pool::new(&cfg("two", 64, 8)).unwrap();
    assert_ne!(p1.id(), p2.id());
    let mut c1 = p1.cache();
    let mut c2 = p2.cache();
    let b2 = c2.get().unwrap();
    assert!(!p1.owns(&b2) && p2.owns(&b2));
    let back = c1.put(b2).unwrap_err().0;
    assert_eq!(back.pool_id(), p2.id());
    let back = p1.put(back).unwrap_err().0;

    let mut mixed = [
        Some(c1.get().unwrap()),
        Some(back),
        None,
        Some(c1.get().unwrap()),
    ];
    match c1.put_bulk(&mut mixed) {
        Err(PoolError::ForeignBuffers { count }) => assert_eq!(count, 1),
        other => panic!("expected ForeignBuffers, got {other:?}"),
    }
    assert!(mixed[0].is_none() && mixed[2].is_none() && mixed[3].is_none());
    c2.put_bulk(&mut mixed).unwrap();
    drop((c1, c2));
    assert!(p1.is_full() && p2.is_full());
}

#[test]
fn keys_are_visible_on_buffers_and_make_sg_entries() {
    let pool = Pool::new(&cfg("keys", 256, 4)).unwrap();
    let mut cache = pool.cache();
    let b = cache.get().unwrap();
    assert_eq!(b.keys(), None);
    assert!(matches!(b.sge(10), Err(PoolError::NotRegistered)));
    let keys = RegKeys {
        lkey: 0x11,
        rkey: 0x22,
    };
    pool.arena().set_keys(keys);
    assert_eq!(pool.keys(), Some(keys));
    assert_eq!(b.keys(), Some(keys));
    assert_eq!(b.lkey(), Some(0x11));
    let sge = b.sge(200).unwrap();
    assert_eq!((sge.addr, sge.len, sge.lkey), (b.addr(), 200, 0x11));
    assert!(matches!(
        b.sge(257),
        Err(PoolError::TooLong {
            requested: 257,
            len: 256
        })
    ));
    cache.put(b).unwrap();
}

#[test]
fn tokens_redeem_exactly_once_and_only_in_their_pool() {
    let pool = Pool::new(&cfg("tokens", 64, 4)).unwrap();
    let other = Pool::new(&cfg("other", 64, 4)).unwrap();
    let mut cache = pool.cache();
    let mut b = cache.get().unwrap();
    b.as_mut_slice()[0] = 0xee;
    let index = b.index();
    let t = b.into_token();
    let wr_id = t.to_u64();
    assert!(matches!(other.redeem(t), Err(PoolError::BadToken(_))));
    let b = pool.redeem(BufToken::from_u64(wr_id)).unwrap();
    assert_eq!((b.index(), b.as_slice()[0]), (index, 0xee));
    assert!(matches!(pool.redeem(t), Err(PoolError::BadToken(_))));
    // Out of range and never-issued tokens.
    let id = u64::from(pool.id()) << 32;
    assert!(pool.redeem(BufToken::from_u64(id | 99)).is_err());
    assert!(pool.redeem(BufToken::from_u64(id | 1)).is_err());
    cache.put(b).unwrap();
    cache.flush();
    assert!(pool.is_full());
}

#[test]
fn pools_share_one_arena_at_offsets() {
    let small = cfg("inline", 1024, 8);
    let large = cfg("reply", 8192, 4);
    let a_len = small.footprint().unwrap();
    let b_len = large.footprint().unwrap();
    let arena = Arc::new(
        Arena::new(&ArenaOptions::new(a_len + b_len).hugepages(HugePages::Never)).unwrap(),
    );
    let p1 = Pool::in_arena(&small, Arc::clone(&arena), 0).unwrap();
    let p2 = Pool::in_arena(&large, Arc::clone(&arena), a_len).unwrap();
    arena.set_keys(RegKeys { lkey: 7, rkey: 8 });
    let mut c1 = p1.cache();
    let mut c2 = p2.cache();
    let x = c1.get().unwrap();
    let y = c2.get().unwrap();
    assert!(x.offset() + x.len() <= a_len);
    assert!(y.offset() >= a_len && y.offset() + y.len() <= a_len + b_len);
    assert_eq!((x.lkey(), y.lkey()), (Some(7), Some(7)));
    c1.put(x).unwrap();
    c2.put(y).unwrap();

    assert!(matches!(
        Pool::in_arena(&large, Arc::clone(&arena), arena.len() - 100),
        Err(PoolError::OutOfArena { .. })
    ));
    assert!(matches!(
        Pool::in_arena(&large, Arc::clone(&arena), usize::MAX),
        Err(PoolError::OutOfArena { .. })
    ));
    assert!(matches!(
        Pool::in_arena(&small, arena, 32),
        Err(PoolError::InvalidConfig(_))
    ));
}

#[test]
fn buffers_stay_valid_after_their_pool_is_dropped() {
    let pool = Pool::new(&cfg("orphan", 64, 4)).unwrap();
    let mut b = pool.get().unwrap();
    drop(pool);
    // The pool leaked its memory instead of unmapping it under a live buffer.
    b.as_mut_slice().fill(3);
    assert!(b.as_slice().iter().all(|&x| x == 3));
    assert_eq!(b.len(), 64);
}

#[test]
fn high_water_tracks_the_peak_not_the_present() {
    let pool = Pool::new(&cfg("hw", 64, 100)).unwrap();
    let mut cache = pool.cache();
    let held: Vec<_> = (0..50).map(|_| cache.get().unwrap()).collect();
    let peak = pool.stats().high_water;
    assert!((50..=58).contains(&peak), "peak {peak}");
    for b in held {
        cache.put(b).unwrap();
    }
    cache.flush();
    let s = pool.stats();
    assert_eq!((s.in_use, s.high_water), (0, peak));
}

#[cfg(debug_assertions)]
mod debug_checks {
    use super::*;

    #[test]
    #[should_panic(expected = "double free")]
    fn double_free_is_detected() {
        let pool = Pool::new(&cfg("df", 64, 4)).unwrap();
        let mut cache = pool.cache();
        let raw = cache.get().unwrap().into_raw();
        // SAFETY: deliberately violated to exercise the debug check.
        let (a, b) = unsafe { (pool.from_raw(raw), pool.from_raw(raw)) };
        cache.put(a).unwrap();
        let _ = cache.put(b);
    }

    #[test]
    #[should_panic(expected = "use after free")]
    fn use_after_free_is_detected_on_access() {
        let pool = Pool::new(&cfg("uaf", 64, 4)).unwrap();
        let mut cache = pool.cache();
        let raw = cache.get().unwrap().into_raw();
        // SAFETY: deliberately violated to exercise the debug check.
        let (a, b) = unsafe { (pool.from_raw(raw), pool.from_raw(raw)) };
        cache.put(a).unwrap();
        let _ = b.as_slice()[0];
    }

    #[test]
    #[should_panic(expected = "use after free")]
    fn from_raw_of_a_freed_slot_is_detected() {
        let pool = Pool::new(&cfg("uaf2", 64, 4)).unwrap();
        let mut cache = pool.cache();
        let b = cache.get().unwrap();
        let raw = b.index();
        cache.put(b).unwrap();
        // SAFETY: deliberately violated to exercise the debug check.
        let _b = unsafe { pool.from_raw(raw) };
    }
}

#[test]
fn handles_are_small_and_option_is_free() {
    use rpcrdma_pools::Buf;
    assert_eq!(std::mem::size_of::<Buf>(), 16);
    assert_eq!(std::mem::size_of::<Option<Buf>>(), 16);
}

#[test]
fn release_free_gives_back_only_free_buffers_and_keeps_every_buffer() {
    for shareable in [true, false] {
        let pool = Pool::new(
            &cfg("release", 8192, 16)
                .shareable(shareable)
                .prefault(false),
        )
        .unwrap();
        let mut cache = pool.cache();
        let mut held = Vec::new();
        let mut filled = std::collections::HashMap::new();
        for i in 0..16u8 {
            let mut b = cache.get().unwrap();
            b.as_mut_slice().fill(i + 1);
            filled.insert(b.index(), i + 1);
            held.push(b);
        }
        // Six go back to the ring, two to the cache; eight stay in use.
        let in_ring: Vec<_> = held.drain(..6).collect();
        let ring_idx: HashSet<u32> = in_ring.iter().map(|b| b.index()).collect();
        for b in in_ring {
            pool.put(b).unwrap();
        }
        let in_cache: Vec<_> = held.drain(..2).collect();
        let cache_idx: HashSet<u32> = in_cache.iter().map(|b| b.index()).collect();
        for b in in_cache {
            cache.put(b).unwrap();
        }
        assert_eq!(
            pool.release_free().unwrap(),
            6 * 8192,
            "shareable {shareable}"
        );
        assert_eq!(pool.available(), 6, "every free buffer is back in the ring");
        // Buffers in use keep their contents.
        for b in &held {
            let want = filled[&b.index()];
            assert!(b.as_slice().iter().all(|&x| x == want), "held buffer kept");
        }
        // Released buffers read as zero; cached ones were not touched.
        for _ in 0..8 {
            let b = cache.get().unwrap();
            let zero = b.as_slice().iter().all(|&x| x == 0);
            if ring_idx.contains(&b.index()) {
                assert!(zero, "a released buffer reads as zero");
            } else {
                assert!(cache_idx.contains(&b.index()));
                assert!(!zero, "a cached buffer keeps its contents");
            }
            held.push(b);
        }
        for b in held {
            cache.put(b).unwrap();
        }
        cache.flush();
        assert!(pool.is_full());
        // Nothing is free to release in a pool whose buffers are all out.
        let all: Vec<_> = (0..16).map(|_| pool.get().unwrap()).collect();
        assert_eq!(pool.release_free().unwrap(), 0);
        for b in all {
            pool.put(b).unwrap();
        }
    }
}
