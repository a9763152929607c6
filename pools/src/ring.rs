//! A bounded multi-producer multi-consumer ring of `u32` slot indices with burst
//! enqueue and dequeue, shared by every cache of one pool.
//!
//! Each cell packs a 32-bit lap tag and a 32-bit value into one `AtomicU64`, so a
//! single load tells a consumer both whether the cell is published and what it holds.
//! A burst claims `k` consecutive ready cells with one compare-and-swap on the head
//! (or tail) position, which is what makes bulk operations cheap: one shared RMW per
//! burst instead of one per element.
//!
//! Tag protocol for the cell at position `p` (cell `p & mask`):
//! - tag `p`: empty, a producer may claim position `p`;
//! - tag `p + 1`: full, a consumer may claim position `p`;
//! - after a consumer takes it, tag `p + cap`: empty for the next lap.
//!
//! A thread that claimed cells but was preempted before publishing them makes others
//! see those cells as not ready. Consumers then wait briefly (the claim means the
//! value is on its way); producers wait too, since the ring is sized to hold every
//! index at once and so can only look full transiently.

use std::sync::atomic::{AtomicU64, Ordering};

/// Keeps a hot atomic on its own pair of cache lines (adjacent-line prefetch pairs
/// them on x86), so head and tail writers do not false-share.
#[repr(align(128))]
#[derive(Debug, Default)]
pub(crate) struct CachePadded<T>(pub(crate) T);

impl<T> std::ops::Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Spins a little, then yields, while another thread finishes publishing.
struct Backoff(u32);

impl Backoff {
    fn snooze(&mut self) {
        if self.0 < 7 {
            for _ in 0..(1u32 << self.0) {
                std::hint::spin_loop();
            }
            self.0 += 1;
        } else {
            std::thread::yield_now();
        }
    }
}

#[inline]
fn pack(tag: u32, value: u32) -> u64 {
    (u64::from(tag) << 32) | u64::from(value)
}

#[inline]
fn tag_of(cell: u64) -> u32 {
    (cell >> 32) as u32
}

/// Bounded MPMC ring of slot indices.
pub(crate) struct IndexRing {
    /// Next position a consumer will claim.
    head: CachePadded<AtomicU64>,
    /// Next position a producer will claim.
    tail: CachePadded<AtomicU64>,
    cells: Box<[AtomicU64]>,
    mask: u64,
    cap: u64,
}

impl std::fmt::Debug for IndexRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IndexRing")
            .field("cap", &self.cap)
            .field("len", &self.len())
            .finish()
    }
}

/// Largest ring the tag arithmetic supports: tags are positions truncated to 32 bits,
/// which stays unambiguous while the capacity is well below 2^32.
pub(crate) const MAX_RING_CAPACITY: usize = 1 << 31;

impl IndexRing {
    /// A ring able to hold at least `min_capacity` indices (rounded up to a power of
    /// two, at least 2). Returns `None` beyond [`MAX_RING_CAPACITY`].
    pub(crate) fn with_capacity(min_capacity: usize) -> Option<IndexRing> {
        let cap = min_capacity.max(2).checked_next_power_of_two()?;
        if cap > MAX_RING_CAPACITY {
            return None;
        }
        let cells = (0..cap)
            .map(|i| AtomicU64::new(pack(i as u32, 0)))
            .collect::<Vec<_>>()
            .into_boxed_slice();
        Some(IndexRing {
            head: CachePadded(AtomicU64::new(0)),
            tail: CachePadded(AtomicU64::new(0)),
            cells,
            mask: cap as u64 - 1,
            cap: cap as u64,
        })
    }

    /// Number of indices the ring can hold.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.cap as usize
    }

    /// Indices in the ring, counting ones a producer has claimed but not yet published.
    /// Exact when no operation is in flight.
    pub(crate) fn len(&self) -> usize {
        // Head first: it never passes tail, so reading tail second cannot undercount
        // below zero except through the reader's own staleness, which saturates.
        let head = self.head.load(Ordering::Acquire);
        let tail = self.tail.load(Ordering::Acquire);
        tail.saturating_sub(head) as usize
    }

    #[inline]
    fn cell(&self, pos: u64) -> &AtomicU64 {
        // The mask keeps the index below cells.len(), so this never goes out of bounds.
        &self.cells[(pos & self.mask) as usize]
    }

    /// Claims and publishes up to `values.len()` consecutive empty cells. Returns how
    /// many values were enqueued (0 when the ring looks full).
    #[inline]
    fn enqueue_burst(&self, values: &[u32]) -> usize {
        loop {
            // Relaxed is enough for the positions: the compare-and-swap below always
            // sees the latest tail, and the cell tags carry the data synchronisation.
            let tail = self.tail.load(Ordering::Relaxed);
            let mut k = 0;
            while k < values.len() {
                let pos = tail + k as u64;
                if tag_of(self.cell(pos).load(Ordering::Acquire)) != pos as u32 {
                    break;
                }
                k += 1;
            }
            if k == 0 {
                return 0;
            }
            if self
                .tail
                .compare_exchange_weak(tail, tail + k as u64, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                for (j, &v) in values[..k].iter().enumerate() {
                    let pos = tail + j as u64;
                    self.cell(pos)
                        .store(pack(pos.wrapping_add(1) as u32, v), Ordering::Release);
                }
                return k;
            }
        }
    }

    /// Claims up to `out.len()` consecutive published cells and copies their values to
    /// the front of `out`. Returns how many were taken (0 when none are ready).
    #[inline]
    fn dequeue_burst(&self, out: &mut [u32]) -> usize {
        loop {
            let head = self.head.load(Ordering::Relaxed);
            let mut k = 0;
            while k < out.len() {
                let pos = head + k as u64;
                let cell = self.cell(pos).load(Ordering::Acquire);
                if tag_of(cell) != pos.wrapping_add(1) as u32 {
                    break;
                }
                out[k] = cell as u32;
                k += 1;
            }
            if k == 0 {
                return 0;
            }
            if self
                .head
                .compare_exchange_weak(head, head + k as u64, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                // The values read above are ours: only a consumer that moved head past
                // these cells may change them, and that was this thread.
                for j in 0..k as u64 {
                    let pos = head + j;
                    self.cell(pos).store(
                        pack(pos.wrapping_add(self.cap) as u32, 0),
                        Ordering::Release,
                    );
                }
                return k;
            }
        }
    }

    /// Takes up to `out.len()` indices. Returns 0 only when the ring holds none.
    #[inline]
    pub(crate) fn dequeue(&self, out: &mut [u32]) -> usize {
        if out.is_empty() {
            return 0;
        }
        let mut backoff = Backoff(0);
        loop {
            let n = self.dequeue_burst(out);
            if n > 0 {
                return n;
            }
            // Nothing ready at head. If a producer has claimed that position its value
            // is moments away; otherwise the ring really is empty.
            let head = self.head.load(Ordering::Acquire);
            let tail = self.tail.load(Ordering::Acquire);
            if tail <= head {
                return 0;
            }
            backoff.snooze();
        }
    }

    /// Puts every index of `values` into the ring.
    ///
    /// # Panics
    ///
    /// When the ring already holds `capacity` indices: more indices were returned than
    /// exist, which only an unsafe double free (see `Pool::from_raw`) can cause.
    /// Waiting would spin forever, so this reports the corruption instead.
    #[inline]
    pub(crate) fn enqueue_all(&self, values: &[u32]) {
        let mut done = 0;
        let mut backoff = Backoff(0);
        while done < values.len() {
            let n = self.enqueue_burst(&values[done..]);
            done += n;
            if n == 0 {
                let head = self.head.load(Ordering::Acquire);
                let tail = self.tail.load(Ordering::Acquire);
                assert!(
                    tail.saturating_sub(head) < self.cap,
                    "rpcrdma-pools: free ring overflow — a buffer was returned twice \
                     (unsafe Pool::from_raw misuse)"
                );
                // Cells at tail are still being released by a consumer; wait for it.
                backoff.snooze();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::Arc;

    #[test]
    fn capacity_rounds_up_to_power_of_two() {
        assert_eq!(IndexRing::with_capacity(0).unwrap().capacity(), 2);
        assert_eq!(IndexRing::with_capacity(1).unwrap().capacity(), 2);
        assert_eq!(IndexRing::with_capacity(5).unwrap().capacity(), 8);
        assert_eq!(IndexRing::with_capacity(64).unwrap().capacity(), 64);
        assert!(IndexRing::with_capacity(MAX_RING_CAPACITY + 1).is_none());
    }

    #[test]
    fn fifo_order_and_wraparound() {
        let r = IndexRing::with_capacity(8).unwrap();
        let mut out = [0u32; 8];
        // Many laps with bursts that straddle the end of the cell array.
        for lap in 0..50u32 {
            let vals: Vec<u32> = (0..5).map(|i| lap * 10 + i).collect();
            r.enqueue_all(&vals);
            assert_eq!(r.len(), 5);
            assert_eq!(r.dequeue(&mut out[..3]), 3);
            assert_eq!(&out[..3], &vals[..3]);
            assert_eq!(r.dequeue(&mut out), 2);
            assert_eq!(&out[..2], &vals[3..]);
            assert_eq!(r.len(), 0);
            assert_eq!(r.dequeue(&mut out), 0);
        }
    }

    #[test]
    fn fills_to_capacity() {
        let r = IndexRing::with_capacity(4).unwrap();
        r.enqueue_all(&[1, 2, 3, 4]);
        assert_eq!(r.len(), 4);
        assert_eq!(r.enqueue_burst(&[5]), 0);
        let mut out = [0u32; 10];
        assert_eq!(r.dequeue(&mut out), 4);
        assert_eq!(&out[..4], &[1, 2, 3, 4]);
    }

    #[test]
    #[should_panic(expected = "returned twice")]
    fn overflow_is_reported_not_spun_on() {
        let r = IndexRing::with_capacity(2).unwrap();
        r.enqueue_all(&[1, 2, 3]);
    }

    #[test]
    fn concurrent_bursts_lose_and_duplicate_nothing() {
        const N: u32 = 4096;
        let r = Arc::new(IndexRing::with_capacity(N as usize).unwrap());
        let all: Vec<u32> = (0..N).collect();
        r.enqueue_all(&all);
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let r = Arc::clone(&r);
                std::thread::spawn(move || {
                    let mut held = Vec::new();
                    let mut buf = [0u32; 16];
                    for round in 0..2000usize {
                        let want = 1 + (round + t) % 16;
                        let n = r.dequeue(&mut buf[..want]);
                        held.extend_from_slice(&buf[..n]);
                        if held.len() > 40 || round % 3 == 0 {
                            let give = held.len().min(1 + round % 24);
                            r.enqueue_all(&held[held.len() - give..]);
                            held.truncate(held.len() - give);
                        }
                    }
                    held
                })
            })
            .collect();
        let mut seen = HashSet::new();
        for t in threads {
            for v in t.join().unwrap() {
                assert!(seen.insert(v), "index {v} held twice");
            }
        }
        let mut out = vec![0u32; N as usize];
        let mut n = 0;
        while n < out.len() {
            let got = r.dequeue(&mut out[n..]);
            if got == 0 {
                break;
            }
            n += got;
        }
        for &v in &out[..n] {
            assert!(seen.insert(v), "index {v} both held and in the ring");
        }
        assert_eq!(seen.len(), N as usize);
    }
}
