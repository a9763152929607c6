//! Several threads, each with its own cache, sharing one pool: no buffer is lost or
//! handed to two owners, and the pool is full again at the end.
//!
//! Every wait has a deadline (channel receives time out), and no assertion depends on
//! timing: exhaustion under contention is legal backpressure and is merely counted.

use std::collections::HashSet;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use rpcrdma_pools::{Buf, HugePages, Pool, PoolConfig, PoolError};

const DEADLINE: Duration = Duration::from_secs(20);

fn pool(count: u32, cache: usize) -> Pool {
    Pool::new(
        &PoolConfig::new("threads", 64, count)
            .hugepages(HugePages::Never)
            .cache_size(cache),
    )
    .unwrap()
}

/// Writes an owner stamp into the buffer; a second concurrent owner would overwrite it.
fn stamp(b: &mut Buf, v: u64) {
    b.as_mut_slice()[..8].copy_from_slice(&v.to_le_bytes());
}

fn stamp_of(b: &Buf) -> u64 {
    let mut s = [0u8; 8];
    s.copy_from_slice(&b.as_slice()[..8]);
    u64::from_le_bytes(s)
}

#[test]
fn grabbing_everything_from_many_threads_sees_every_slot_once() {
    const N: u32 = 2000;
    const T: usize = 4;
    let pool = pool(N, 16);
    let (held_tx, held_rx) = mpsc::channel::<Vec<u32>>();
    let mut release = Vec::new();
    let mut handles = Vec::new();
    for t in 0..T {
        let pool = pool.clone();
        let held_tx = held_tx.clone();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        release.push(go_tx);
        handles.push(thread::spawn(move || {
            let mut cache = pool.cache();
            let mut mine = Vec::new();
            let mut bulk: [Option<Buf>; 8] = Default::default();
            // Alternate single and bulk gets until the pool runs dry. Nobody puts in
            // this phase, so Exhausted really means every buffer is held somewhere.
            loop {
                if mine.len() % 3 == t % 3 {
                    match cache.get_bulk(&mut bulk) {
                        Ok(()) => mine.extend(bulk.iter_mut().filter_map(Option::take)),
                        Err(PoolError::Exhausted) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
                match cache.get() {
                    Ok(b) => mine.push(b),
                    Err(PoolError::Exhausted) => break,
                    Err(e) => panic!("{e}"),
                }
            }
            assert!(
                cache.is_empty(),
                "Exhausted with buffers still in the cache"
            );
            held_tx.send(mine.iter().map(Buf::index).collect()).unwrap();
            go_rx.recv_timeout(DEADLINE).expect("release signal");
            for b in mine {
                cache.put(b).unwrap();
            }
        }));
    }
    drop(held_tx);
    let mut seen = HashSet::new();
    for _ in 0..T {
        let idx = held_rx
            .recv_timeout(DEADLINE)
            .expect("a thread died or hung");
        for i in idx {
            assert!(seen.insert(i), "slot {i} held by two threads");
        }
    }
    assert_eq!(seen.len(), N as usize);
    assert!(seen.iter().all(|&i| i < N));
    assert_eq!(pool.stats().in_use, N as usize);
    for go in release {
        go.send(()).unwrap();
    }
    for h in handles {
        h.join().unwrap();
    }
    assert!(pool.is_full());
    let s = pool.stats();
    assert_eq!(
        (s.available, s.cached, s.in_use, s.high_water),
        (2000, 0, 0, 2000)
    );
}

#[test]
fn buffers_passed_between_threads_are_neither_lost_nor_shared() {
    const N: u32 = 1024;
    const T: usize = 4;
    const ROUNDS: u64 = 20_000;
    let pool = pool(N, 16);
    let mut txs = Vec::new();
    let mut rxs = Vec::new();
    for _ in 0..T {
        // Bounded, so in-flight buffers cannot starve the pool while a peer sleeps.
        let (tx, rx) = mpsc::sync_channel::<(Buf, u64)>(64);
        txs.push(tx);
        rxs.push(rx);
    }
    // Thread t sends to thread t+1 and receives from thread t-1.
    txs.rotate_left(1);
    let mut handles = Vec::new();
    for (t, (tx, rx)) in txs.into_iter().zip(rxs).enumerate() {
        let pool = pool.clone();
        handles.push(thread::spawn(move || {
            let mut cache = pool.cache();
            let mut exhausted = 0u64;
            let mut received = 0u64;
            let mut sent = 0u64;
            let check_and_return = |cache: &mut rpcrdma_pools::PoolCache, b: Buf, s: u64| {
                assert_eq!(
                    stamp_of(&b),
                    s,
                    "buffer {} changed under its owner",
                    b.index()
                );
                if s.is_multiple_of(5) {
                    // Some go straight to the shared ring, bypassing the cache.
                    cache.pool().put(b).unwrap();
                } else {
                    cache.put(b).unwrap();
                }
            };
            for round in 0..ROUNDS {
                // Return what peers sent first, so exhaustion here is only transient.
                while let Ok((b, s)) = rx.try_recv() {
                    received += 1;
                    check_and_return(&mut cache, b, s);
                }
                let mut bulk: [Option<Buf>; 12] = Default::default();
                let n = 1 + (round as usize + t) % 12;
                match cache.get_bulk(&mut bulk[..n]) {
                    Ok(()) => {}
                    Err(PoolError::Exhausted) => {
                        exhausted += 1;
                        // Let the peers holding our buffers run (fairness, not timing).
                        thread::yield_now();
                        continue;
                    }
                    Err(e) => panic!("{e}"),
                }
                let mut local = Vec::with_capacity(n);
                for (k, slot) in bulk[..n].iter_mut().enumerate() {
                    let Some(mut b) = slot.take() else {
                        panic!("bulk get left a hole")
                    };
                    let s = ((t as u64) << 48) | (round << 8) | k as u64;
                    stamp(&mut b, s);
                    if k % 2 == 0 {
                        match tx.try_send((b, s)) {
                            Ok(()) => sent += 1,
                            Err(mpsc::TrySendError::Full(back)) => local.push(back),
                            Err(mpsc::TrySendError::Disconnected(_)) => panic!("peer died"),
                        }
                    } else {
                        local.push((b, s));
                    }
                }
                for (b, s) in local {
                    check_and_return(&mut cache, b, s);
                }
            }
            // Drop our sender first so the ring of senders unwinds without a cycle.
            drop(tx);
            loop {
                match rx.recv_timeout(DEADLINE) {
                    Ok((b, s)) => {
                        received += 1;
                        check_and_return(&mut cache, b, s);
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                    Err(mpsc::RecvTimeoutError::Timeout) => panic!("peer hung"),
                }
            }
            (sent, received, exhausted)
        }));
    }
    let (mut total_sent, mut total_received) = (0, 0);
    for h in handles {
        let (sent, received, exhausted) = h.join().unwrap();
        eprintln!("thread sent {sent}, received {received}, hit exhaustion {exhausted} times");
        total_sent += sent;
        total_received += received;
    }
    assert_eq!(total_sent, total_received, "buffers lost in transit");
    assert!(total_received > 0);
    assert!(
        pool.is_full(),
        "stats after all caches dropped: {:?}",
        pool.stats()
    );
    let s = pool.stats();
    assert_eq!((s.cached, s.in_use), (0, 0));
    assert!(s.high_water > 0 && s.high_water <= N as usize);

    // Every slot is still present exactly once.
    let mut cache = pool.cache();
    let mut seen = HashSet::new();
    let mut all = Vec::new();
    while let Ok(b) = cache.get() {
        assert!(seen.insert(b.index()));
        all.push(b);
    }
    assert_eq!(seen.len(), N as usize);
    for b in all {
        cache.put(b).unwrap();
    }
}

#[test]
fn caches_move_to_their_threads_and_flush_on_exit() {
    let pool = pool(256, 32);
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let mut cache = pool.cache();
            thread::spawn(move || {
                for _ in 0..500 {
                    let b = cache.get().unwrap();
                    cache.put(b).unwrap();
                }
                cache.len()
            })
        })
        .collect();
    for h in handles {
        assert!(h.join().unwrap() > 0, "a cache kept nothing local");
    }
    // The caches were dropped at thread exit, which flushed them.
    assert!(pool.is_full());
}
