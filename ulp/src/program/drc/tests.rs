//! The cache on its own: hits, misses, checksum mismatches, in-progress drops and both
//! bounds.

use super::*;

fn key(xid: u32, checksum: u64) -> DrcKey {
    DrcKey {
        xid,
        prog: 100_003,
        vers: 3,
        procedure: 12,
        client: ClientAddr::Id(1),
        args_len: 40,
        checksum,
    }
}

/// A distinguishable reply of `len` octets for `xid`.
fn reply(xid: u32, len: usize) -> Vec<u8> {
    let mut r: Vec<u8> = (0..len).map(|i| (i as u8) ^ (xid as u8)).collect();
    r[..4].copy_from_slice(&xid.to_be_bytes());
    r
}

fn drc(entries: usize, reply_bytes: usize, max_reply: usize) -> Drc {
    Drc::new(DrcConfig::new(entries, reply_bytes, max_reply).unwrap())
}

/// Runs `key` to completion with `reply`; panics unless it was new.
fn store(c: &Drc, k: &DrcKey, r: &[u8]) {
    let mut out = [0u8; 64];
    match c.lookup(k, &mut out) {
        DrcLookup::New(p) => assert!(p.complete(r)),
        other => panic!("{k:?} should be new, got {other:?}"),
    }
}

fn replayed(c: &Drc, k: &DrcKey) -> Option<Vec<u8>> {
    let mut out = [0u8; 4096];
    match c.lookup(k, &mut out) {
        DrcLookup::Replayed { len } => Some(out[..len].to_vec()),
        // Forget the call again: the probe must not leave an entry behind.
        DrcLookup::New(p) => {
            drop(p);
            None
        }
        other => panic!("{k:?}: {other:?}"),
    }
}

#[test]
fn a_completed_call_is_replayed_byte_for_byte() {
    let c = drc(8, 4096, 512);
    let k = key(1, 0xabc);
    let r = reply(1, 120);
    store(&c, &k, &r);
    assert_eq!(replayed(&c, &k), Some(r.clone()));
    assert_eq!(replayed(&c, &k), Some(r));
    let s = c.stats();
    assert_eq!((s.insertions, s.hits, s.entries), (1, 2, 1));
    assert_eq!(s.reply_bytes, 120);
}

#[test]
fn other_keys_miss() {
    let c = drc(8, 4096, 512);
    store(&c, &key(1, 0xabc), &reply(1, 100));
    for other in [
        key(2, 0xabc),
        DrcKey {
            procedure: 13,
            ..key(1, 0xabc)
        },
        DrcKey {
            client: ClientAddr::Id(2),
            ..key(1, 0xabc)
        },
        DrcKey {
            vers: 2,
            ..key(1, 0xabc)
        },
    ] {
        assert_eq!(replayed(&c, &other), None, "{other:?}");
    }
    let s = c.stats();
    assert_eq!((s.hits, s.checksum_misses), (0, 0));
    // The probes were forgotten: only the stored reply is left.
    assert_eq!((s.entries, s.in_progress), (1, 0));
}

#[test]
fn a_reused_xid_with_other_arguments_is_not_a_hit() {
    let c = drc(8, 4096, 512);
    store(&c, &key(1, 0xabc), &reply(1, 100));
    let mut out = [0u8; 256];
    let other_args = key(1, 0xdef);
    match c.lookup(&other_args, &mut out) {
        DrcLookup::New(p) => assert!(p.complete(&reply(1, 90))),
        other => panic!("{other:?}"),
    }
    let longer = DrcKey {
        args_len: 41,
        ..key(1, 0xabc)
    };
    assert_eq!(replayed(&c, &longer), None);
    let s = c.stats();
    assert_eq!((s.hits, s.checksum_misses, s.insertions), (0, 2, 2));
    // Both calls keep their own replies.
    assert_eq!(replayed(&c, &key(1, 0xabc)).map(|r| r.len()), Some(100));
    assert_eq!(replayed(&c, &other_args).map(|r| r.len()), Some(90));
}

#[test]
fn a_retransmission_of_a_running_call_is_dropped_until_it_completes() {
    let c = drc(8, 4096, 512);
    let k = key(5, 1);
    let mut out = [0u8; 256];
    let DrcLookup::New(p) = c.lookup(&k, &mut out) else {
        panic!("new");
    };
    assert!(matches!(c.lookup(&k, &mut out), DrcLookup::InProgress));
    assert!(matches!(c.lookup(&k, &mut out), DrcLookup::InProgress));
    assert_eq!(c.stats().in_progress, 1);
    assert!(p.complete(&reply(5, 64)));
    assert_eq!(replayed(&c, &k), Some(reply(5, 64)));
    let s = c.stats();
    assert_eq!((s.in_progress_drops, s.hits, s.in_progress), (2, 1, 0));
}

#[test]
fn a_call_dropped_without_a_reply_runs_again() {
    let c = drc(8, 4096, 512);
    let k = key(6, 1);
    let mut out = [0u8; 256];
    match c.lookup(&k, &mut out) {
        DrcLookup::New(p) => drop(p),
        other => panic!("{other:?}"),
    }
    assert!(matches!(c.lookup(&k, &mut out), DrcLookup::New(_)));
    let s = c.stats();
    assert_eq!((s.uncached, s.in_progress, s.entries), (2, 0, 0));
}

#[test]
fn entries_bound_the_cache_and_the_oldest_go_first() {
    let c = drc(4, 64 * 1024, 512);
    for xid in 0..10 {
        store(&c, &key(xid, 7), &reply(xid, 50));
        assert!(c.stats().entries <= 4);
    }
    let s = c.stats();
    assert_eq!((s.entries, s.insertions, s.evictions), (4, 10, 6));
    for xid in 6..10 {
        assert_eq!(replayed(&c, &key(xid, 7)), Some(reply(xid, 50)));
    }
    // (Each miss below reserves an entry, evicting again: hence last.)
    for xid in 0..6 {
        assert_eq!(replayed(&c, &key(xid, 7)), None, "xid {xid} was evicted");
    }
}

#[test]
fn reply_bytes_bound_the_cache() {
    // Room for 1000 octets: three 300-octet replies, whatever the entry count.
    let c = drc(64, 1000, 300);
    for xid in 0..20 {
        store(&c, &key(xid, 7), &reply(xid, 300));
        let s = c.stats();
        assert!(s.reply_bytes <= 1000, "{s:?}");
        assert!(s.entries <= 3, "{s:?}");
    }
    // Replies never straddle the ring's end, and wrapping keeps the newest intact.
    for xid in 17..20 {
        assert_eq!(replayed(&c, &key(xid, 7)), Some(reply(xid, 300)));
    }
    assert_eq!(replayed(&c, &key(16, 7)), None);
    // Mixed sizes: a long reply evicts as many short ones as it needs.
    store(&c, &key(100, 7), &reply(100, 30));
    store(&c, &key(101, 7), &reply(101, 290));
    let s = c.stats();
    assert!(s.reply_bytes <= 1000, "{s:?}");
    assert_eq!(replayed(&c, &key(100, 7)), Some(reply(100, 30)));
    assert_eq!(replayed(&c, &key(101, 7)), Some(reply(101, 290)));
}

#[test]
fn a_reply_longer_than_the_limit_is_not_kept() {
    let c = drc(8, 4096, 256);
    let k = key(9, 1);
    let mut out = [0u8; 64];
    let DrcLookup::New(p) = c.lookup(&k, &mut out) else {
        panic!("new");
    };
    assert!(!p.complete(&reply(9, 257)));
    assert_eq!(replayed(&c, &k), None);
    let s = c.stats();
    assert_eq!((s.insertions, s.entries, s.uncached), (0, 0, 2));
}

#[test]
fn a_replay_that_does_not_fit_the_buffer_says_so() {
    let c = drc(8, 4096, 512);
    let k = key(3, 3);
    store(&c, &k, &reply(3, 200));
    let mut small = [0u8; 199];
    assert!(matches!(
        c.lookup(&k, &mut small),
        DrcLookup::ReplayOverrun { len: 200 }
    ));
    assert_eq!(c.stats().hits, 0);
}

#[test]
fn running_calls_are_never_evicted() {
    let c = drc(2, 4096, 512);
    let mut out = [0u8; 64];
    let (DrcLookup::New(a), DrcLookup::New(b)) = (
        c.lookup(&key(1, 1), &mut out),
        c.lookup(&key(2, 1), &mut out),
    ) else {
        panic!("two entries");
    };
    assert!(matches!(c.lookup(&key(3, 1), &mut out), DrcLookup::Full));
    assert!(matches!(
        c.lookup(&key(1, 1), &mut out),
        DrcLookup::InProgress
    ));
    assert!(a.complete(&reply(1, 40)));
    // The third call takes the completed entry's place; the second still runs.
    match c.lookup(&key(3, 1), &mut out) {
        DrcLookup::New(p) => assert!(p.complete(&reply(3, 40))),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        c.lookup(&key(2, 1), &mut out),
        DrcLookup::InProgress
    ));
    assert!(b.complete(&reply(2, 40)));
    assert_eq!(replayed(&c, &key(2, 1)), Some(reply(2, 40)));
    assert_eq!(replayed(&c, &key(3, 1)), Some(reply(3, 40)));
    let s = c.stats();
    assert_eq!((s.evictions, s.uncached, s.entries), (1, 1, 2));
}

#[test]
fn configs_are_checked_and_their_cost_stated() {
    assert_eq!(
        DrcConfig::new(0, 4096, 512),
        Err(DrcConfigError::Entries { entries: 0 })
    );
    assert_eq!(
        DrcConfig::new(8, 4096, 10),
        Err(DrcConfigError::MaxReplyTooSmall { max_reply: 10 })
    );
    assert_eq!(
        DrcConfig::new(8, 100, 512),
        Err(DrcConfigError::StorageTooSmall {
            reply_bytes: 100,
            max_reply: 512
        })
    );
    let d = DrcConfig::DEFAULT;
    assert_eq!(
        DrcConfig::new(d.entries(), d.reply_bytes(), d.max_reply()),
        Ok(d)
    );
    // The documented cost: about 100 octets an entry on top of the reply storage.
    let per_entry = (d.memory_bytes() - d.reply_bytes()) / d.entries();
    assert!((64..=128).contains(&per_entry), "{per_entry}");
    assert!(d.memory_bytes() < 640 * 1024, "{}", d.memory_bytes());
}

mod random {
    //! Random sequences of calls against the invariants: a replay is always the reply
    //! stored last for its key, a reply just stored replays at once, and the bounds hold.

    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::*;

    /// One call: which of 12 keys, the reply length, and whether it completes.
    fn op() -> impl Strategy<Value = (u8, usize, bool)> {
        (0u8..12, 24usize..=300, prop::bool::weighted(0.8))
    }

    proptest! {
        #[test]
        fn replays_are_exact_and_bounds_hold(
            entries in 1usize..8,
            reply_bytes in 300usize..2000,
            ops in prop::collection::vec(op(), 1..200),
        ) {
            let c = drc(entries, reply_bytes, 300);
            let mut stored: HashMap<DrcKey, Vec<u8>> = HashMap::new();
            let mut out = [0u8; 512];
            for (n, (which, len, completes)) in ops.into_iter().enumerate() {
                let k = key(u32::from(which / 2), u64::from(which % 2));
                match c.lookup(&k, &mut out) {
                    DrcLookup::New(p) => {
                        // A retransmission while it runs is dropped.
                        prop_assert!(matches!(c.lookup(&k, &mut out), DrcLookup::InProgress));
                        if completes {
                            let r = reply(n as u32, len);
                            prop_assert!(p.complete(&r));
                            prop_assert_eq!(replayed(&c, &k), Some(r.clone()));
                            stored.insert(k, r);
                        } else {
                            drop(p);
                        }
                    }
                    DrcLookup::Replayed { len } => {
                        prop_assert_eq!(Some(&out[..len].to_vec()), stored.get(&k));
                    }
                    other => prop_assert!(false, "{:?}", other),
                }
                let s = c.stats();
                prop_assert!(s.entries <= entries as u64, "{:?}", s);
                prop_assert!(s.reply_bytes <= reply_bytes as u64, "{:?}", s);
                prop_assert_eq!(s.insertions - s.evictions, s.entries);
                prop_assert_eq!(s.in_progress, 0);
            }
        }
    }
}
