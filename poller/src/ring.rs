//! Bounded lock-free multi-producer, single-consumer ring: the storage under every mailbox.
//!
//! Each slot carries a sequence number (the Vyukov bounded-queue scheme): a producer claims
//! a position with one CAS on the tail only after seeing that the slot at that position is
//! free, so "full" is decided *before* the value moves. That is what lets a full mailbox
//! hand the caller's value straight back without ever wrapping it in anything. The
//! consumer side is a separate, non-cloneable [`Consumer`], so "single consumer" is
//! enforced by ownership rather than by a comment.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Keeps producer- and consumer-owned indices on separate cache lines (128 bytes covers the
/// adjacent-line prefetcher on x86).
#[repr(align(128))]
struct Padded<T>(T);

struct Slot<T> {
    /// `pos` when free for the producer claiming `pos`; `pos + 1` once that value is readable.
    seq: AtomicUsize,
    value: UnsafeCell<MaybeUninit<T>>,
}

/// The shared ring. Producers reach it through `&Ring` (usually inside an `Arc`); the single
/// consumer through [`Consumer`].
pub(crate) struct Ring<T> {
    slots: Box<[Slot<T>]>,
    mask: usize,
    tail: Padded<AtomicUsize>,
    /// Written only by the consumer; producers never read it.
    head: Padded<AtomicUsize>,
}

// SAFETY: values are moved in by one thread and out by another, never shared, so `T: Send`
// is enough; slot hand-over is ordered by the Release/Acquire pairs on `seq`.
unsafe impl<T: Send> Send for Ring<T> {}
// SAFETY: as above; `&Ring` only permits claiming slots (producers) and the consumer half is
// unique by construction.
unsafe impl<T: Send> Sync for Ring<T> {}

impl<T> Ring<T> {
    /// A ring holding at least `capacity` items (rounded up to a power of two, minimum 2).
    /// All memory is allocated here; pushing and popping never allocate.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        let cap = capacity.max(2).next_power_of_two();
        let slots = (0..cap)
            .map(|i| Slot {
                seq: AtomicUsize::new(i),
                value: UnsafeCell::new(MaybeUninit::uninit()),
            })
            .collect::<Vec<_>>()
            .into_boxed_slice();
        Ring {
            slots,
            mask: cap - 1,
            tail: Padded(AtomicUsize::new(0)),
            head: Padded(AtomicUsize::new(0)),
        }
    }

    /// Number of slots.
    pub(crate) fn capacity(&self) -> usize {
        self.mask + 1
    }

    /// Claims a slot and stores `wrap(value)` in it, or returns `value` untouched when the
    /// ring is full. `wrap` runs after the claim and must not panic (a claimed slot that is
    /// never published would stall the consumer); callers pass plain constructors.
    pub(crate) fn push_with<V>(&self, value: V, wrap: impl FnOnce(V) -> T) -> Result<(), V> {
        let mut pos = self.tail.0.load(Ordering::Relaxed);
        loop {
            let slot = &self.slots[pos & self.mask];
            let seq = slot.seq.load(Ordering::Acquire);
            // Wrapping difference read as signed: 0 = free for us, < 0 = still holds the
            // item from one lap ago (full), > 0 = another producer already took `pos`.
            let diff = seq.wrapping_sub(pos) as isize;
            if diff == 0 {
                match self.tail.0.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: the CAS made this thread the only writer of this slot until
                        // it publishes `pos + 1`; the consumer does not read before that.
                        unsafe { (*slot.value.get()).write(wrap(value)) };
                        slot.seq.store(pos.wrapping_add(1), Ordering::Release);
                        return Ok(());
                    }
                    Err(current) => pos = current,
                }
            } else if diff < 0 {
                return Err(value);
            } else {
                pos = self.tail.0.load(Ordering::Relaxed);
            }
        }
    }

    /// Plain push: `Err(value)` when full.
    #[cfg(test)]
    pub(crate) fn push(&self, value: T) -> Result<(), T> {
        self.push_with(value, |v| v)
    }

    /// True when the next item in consumer order is published. An item whose producer has
    /// claimed but not yet written its slot does not count; that producer checks for a
    /// parked consumer only after publishing, so no wake-up is lost.
    fn head_ready(&self) -> bool {
        let pos = self.head.0.load(Ordering::Relaxed);
        let slot = &self.slots[pos & self.mask];
        slot.seq.load(Ordering::Acquire) == pos.wrapping_add(1)
    }

    /// Pops one item. Caller must be the only consumer (guaranteed by [`Consumer`] and by
    /// `Drop`, which has `&mut self`).
    fn pop_single_consumer(&self) -> Option<T> {
        let pos = self.head.0.load(Ordering::Relaxed);
        let slot = &self.slots[pos & self.mask];
        if slot.seq.load(Ordering::Acquire) != pos.wrapping_add(1) {
            return None;
        }
        // SAFETY: `seq == pos + 1` (Acquire) means the producer finished writing this slot,
        // and we are the only consumer, so nobody else reads or frees it.
        let value = unsafe { (*slot.value.get()).assume_init_read() };
        // Hand the slot to the producer of the next lap.
        slot.seq.store(
            pos.wrapping_add(self.mask).wrapping_add(1),
            Ordering::Release,
        );
        self.head.0.store(pos.wrapping_add(1), Ordering::Relaxed);
        Some(value)
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // `&mut self`: no producer can be mid-push, so every claimed slot is published.
        while self.pop_single_consumer().is_some() {}
    }
}

/// The unique consuming end of a [`Ring`]. Not `Clone`.
pub(crate) struct Consumer<T> {
    ring: Arc<Ring<T>>,
}

impl<T> Consumer<T> {
    /// Wraps `ring`; the caller promises no other `Consumer` exists for it.
    pub(crate) fn new(ring: Arc<Ring<T>>) -> Self {
        Consumer { ring }
    }

    /// Next item in FIFO (claim) order, if published.
    pub(crate) fn pop(&mut self) -> Option<T> {
        self.ring.pop_single_consumer()
    }

    /// True when [`pop`](Self::pop) would return an item.
    pub(crate) fn has_ready(&self) -> bool {
        self.ring.head_ready()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::thread;
    use std::time::{Duration, Instant};

    #[test]
    fn capacity_rounds_up_to_power_of_two() {
        assert_eq!(Ring::<u8>::with_capacity(0).capacity(), 2);
        assert_eq!(Ring::<u8>::with_capacity(5).capacity(), 8);
        assert_eq!(Ring::<u8>::with_capacity(8).capacity(), 8);
    }

    #[test]
    fn full_ring_returns_the_value_and_fifo_survives_many_laps() {
        let ring = Arc::new(Ring::with_capacity(4));
        let mut rx = Consumer::new(ring.clone());
        let mut next_in = 0u32;
        let mut next_out = 0u32;
        for _lap in 0..10 {
            while ring.push(next_in).is_ok() {
                next_in += 1;
            }
            assert_eq!(ring.push(999), Err(999));
            assert!(rx.has_ready());
            while let Some(v) = rx.pop() {
                assert_eq!(v, next_out);
                next_out += 1;
            }
            assert!(!rx.has_ready());
        }
        assert_eq!(next_in, 40);
        assert_eq!(next_out, 40);
    }

    #[test]
    fn push_with_does_not_call_wrap_when_full() {
        let ring = Ring::<String>::with_capacity(2);
        ring.push("a".into()).unwrap();
        ring.push("b".into()).unwrap();
        let mut wrapped = false;
        let back = ring.push_with(7u32, |v| {
            wrapped = true;
            v.to_string()
        });
        assert_eq!(back, Err(7));
        assert!(!wrapped);
    }

    #[test]
    fn dropping_the_ring_drops_queued_items() {
        let drops = Arc::new(AtomicU64::new(0));
        struct Counted(Arc<AtomicU64>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        {
            let ring = Ring::with_capacity(8);
            for _ in 0..5 {
                assert!(ring.push(Counted(drops.clone())).is_ok());
            }
        }
        assert_eq!(drops.load(Ordering::Relaxed), 5);
    }

    #[test]
    fn two_producers_keep_their_own_order() {
        const PER: u64 = 20_000;
        let ring = Arc::new(Ring::<(u64, u64)>::with_capacity(16));
        let mut rx = Consumer::new(ring.clone());
        let deadline = Instant::now() + Duration::from_secs(30);
        let producers: Vec<_> = (0..2u64)
            .map(|id| {
                let ring = ring.clone();
                thread::spawn(move || {
                    let mut seq = 0;
                    while seq < PER && Instant::now() < deadline {
                        match ring.push((id, seq)) {
                            Ok(()) => seq += 1,
                            Err(_) => thread::yield_now(),
                        }
                    }
                    seq
                })
            })
            .collect();
        let mut next = [0u64; 2];
        while next.iter().sum::<u64>() < 2 * PER && Instant::now() < deadline {
            match rx.pop() {
                Some((id, seq)) => {
                    assert_eq!(seq, next[id as usize], "producer {id} out of order");
                    next[id as usize] += 1;
                }
                None => thread::yield_now(),
            }
        }
        for p in producers {
            assert_eq!(p.join().unwrap(), PER);
        }
        assert_eq!(next, [PER, PER]);
        assert!(rx.pop().is_none());
    }
}
