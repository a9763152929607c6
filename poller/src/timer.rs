//! Preallocated indexed min-heap of timer deadlines, one per poller.
//!
//! Entries live in a fixed slab; the heap orders slab indices by `(deadline, arm sequence)`,
//! so equal deadlines fire in the order they were armed. Each entry remembers its heap
//! position, which makes cancel O(log n) and frees its slot at once (no tombstones piling up
//! when a keepalive is re-armed on every message). The earliest deadline is cached in a
//! plain field so "is anything due?" is one comparison.

use crate::task::TaskKey;

/// Deadlines are nanoseconds since the owning poller's clock epoch.
pub(crate) type Nanos = u64;

/// "No timer armed": compares later than every real deadline.
pub(crate) const NEVER: Nanos = Nanos::MAX;

const NOT_QUEUED: u32 = u32::MAX;

/// Names one armed timer on one poller; stale after it fires or is cancelled (cancelling a
/// stale id is a harmless no-op).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimerId {
    slot: u32,
    gen: u32,
}

/// Why a timer could not be armed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TimerError {
    /// Every preallocated timer slot is in use (`PollerConfig::max_timers`).
    #[error("all {capacity} timer slots of this poller are armed")]
    Full {
        /// The configured capacity.
        capacity: usize,
    },
}

/// What a due timer carries back to the poller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fired {
    pub(crate) owner: TaskKey,
    pub(crate) token: u64,
}

#[derive(Clone, Copy)]
struct Entry {
    deadline: Nanos,
    seq: u64,
    token: u64,
    owner: TaskKey,
    gen: u32,
    heap_pos: u32,
}

pub(crate) struct TimerHeap {
    entries: Vec<Entry>,
    heap: Vec<u32>,
    free: Vec<u32>,
    next_seq: u64,
    next_deadline: Nanos,
}

impl TimerHeap {
    /// Room for `capacity` simultaneously armed timers, all allocated now.
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        let idle = Entry {
            deadline: NEVER,
            seq: 0,
            token: 0,
            owner: TaskKey { slot: 0, gen: 0 },
            gen: 0,
            heap_pos: NOT_QUEUED,
        };
        TimerHeap {
            entries: vec![idle; capacity],
            heap: Vec::with_capacity(capacity),
            // Popped from the back: lowest slots first, which keeps tests readable.
            free: (0..capacity as u32).rev().collect(),
            next_seq: 0,
            next_deadline: NEVER,
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }

    /// Earliest armed deadline, or [`NEVER`].
    #[inline]
    pub(crate) fn next_deadline(&self) -> Nanos {
        self.next_deadline
    }

    pub(crate) fn arm(
        &mut self,
        deadline: Nanos,
        owner: TaskKey,
        token: u64,
    ) -> Result<TimerId, TimerError> {
        let Some(slot) = self.free.pop() else {
            return Err(TimerError::Full {
                capacity: self.capacity(),
            });
        };
        let seq = self.next_seq;
        self.next_seq += 1;
        let pos = self.heap.len() as u32;
        let e = &mut self.entries[slot as usize];
        e.deadline = deadline;
        e.seq = seq;
        e.token = token;
        e.owner = owner;
        e.heap_pos = pos;
        let gen = e.gen;
        self.heap.push(slot);
        self.sift_up(pos as usize);
        self.refresh_next();
        Ok(TimerId { slot, gen })
    }

    /// Cancels `id`; false when it already fired, was cancelled, or never existed here.
    pub(crate) fn cancel(&mut self, id: TimerId) -> bool {
        let Some(e) = self.entries.get(id.slot as usize) else {
            return false;
        };
        if e.gen != id.gen || e.heap_pos == NOT_QUEUED {
            return false;
        }
        self.remove_at(e.heap_pos as usize);
        true
    }

    /// Cancels every timer armed by `owner` (a removed task). O(capacity); removal is rare.
    pub(crate) fn cancel_owner(&mut self, owner: TaskKey) -> usize {
        // Walk the slab, not the heap: removing from the heap reorders it under the walk.
        let mut cancelled = 0;
        for slot in 0..self.entries.len() {
            let e = &self.entries[slot];
            if e.heap_pos != NOT_QUEUED && e.owner == owner {
                self.remove_at(e.heap_pos as usize);
                cancelled += 1;
            }
        }
        cancelled
    }

    /// Removes and returns the earliest timer if its deadline is `<= now`.
    pub(crate) fn pop_due(&mut self, now: Nanos) -> Option<Fired> {
        if self.next_deadline > now {
            return None;
        }
        let slot = *self.heap.first()? as usize;
        let fired = Fired {
            owner: self.entries[slot].owner,
            token: self.entries[slot].token,
        };
        self.remove_at(0);
        Some(fired)
    }

    fn remove_at(&mut self, pos: usize) {
        let slot = self.heap.swap_remove(pos);
        let e = &mut self.entries[slot as usize];
        e.heap_pos = NOT_QUEUED;
        e.gen = e.gen.wrapping_add(1);
        // Cannot overflow: the slot came out of `free` and `free` has capacity for all.
        self.free.push(slot);
        if pos < self.heap.len() {
            let moved = self.heap[pos] as usize;
            self.entries[moved].heap_pos = pos as u32;
            // The element moved in from the end may belong above or below `pos`.
            let pos = self.sift_up(pos);
            self.sift_down(pos);
        }
        self.refresh_next();
    }

    #[inline]
    fn refresh_next(&mut self) {
        self.next_deadline = match self.heap.first() {
            Some(&slot) => self.entries[slot as usize].deadline,
            None => NEVER,
        };
    }

    #[inline]
    fn before(&self, a: u32, b: u32) -> bool {
        let (a, b) = (&self.entries[a as usize], &self.entries[b as usize]);
        (a.deadline, a.seq) < (b.deadline, b.seq)
    }

    fn swap(&mut self, i: usize, j: usize) {
        self.heap.swap(i, j);
        self.entries[self.heap[i] as usize].heap_pos = i as u32;
        self.entries[self.heap[j] as usize].heap_pos = j as u32;
    }

    fn sift_up(&mut self, mut pos: usize) -> usize {
        while pos > 0 {
            let parent = (pos - 1) / 2;
            if !self.before(self.heap[pos], self.heap[parent]) {
                break;
            }
            self.swap(pos, parent);
            pos = parent;
        }
        pos
    }

    fn sift_down(&mut self, mut pos: usize) {
        loop {
            let left = 2 * pos + 1;
            if left >= self.heap.len() {
                return;
            }
            let right = left + 1;
            let child = if right < self.heap.len() && self.before(self.heap[right], self.heap[left])
            {
                right
            } else {
                left
            };
            if !self.before(self.heap[child], self.heap[pos]) {
                return;
            }
            self.swap(pos, child);
            pos = child;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(slot: u32) -> TaskKey {
        TaskKey { slot, gen: 0 }
    }

    fn drain(h: &mut TimerHeap, now: Nanos) -> Vec<u64> {
        let mut out = Vec::new();
        while let Some(f) = h.pop_due(now) {
            out.push(f.token);
        }
        out
    }

    #[test]
    fn fires_in_deadline_order_and_only_when_due() {
        let mut h = TimerHeap::with_capacity(8);
        for (deadline, token) in [(30, 3), (10, 1), (20, 2), (40, 4)] {
            h.arm(deadline, owner(0), token).unwrap();
        }
        assert_eq!(h.next_deadline(), 10);
        assert_eq!(drain(&mut h, 9), Vec::<u64>::new());
        assert_eq!(drain(&mut h, 25), vec![1, 2]);
        assert_eq!(h.next_deadline(), 30);
        assert_eq!(drain(&mut h, 100), vec![3, 4]);
        assert_eq!(h.next_deadline(), NEVER);
    }

    #[test]
    fn equal_deadlines_fire_in_arm_order() {
        let mut h = TimerHeap::with_capacity(16);
        for token in 0..10 {
            h.arm(5, owner(0), token).unwrap();
        }
        assert_eq!(drain(&mut h, 5), (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn cancelled_timers_do_not_fire_and_free_their_slot() {
        let mut h = TimerHeap::with_capacity(3);
        let a = h.arm(10, owner(0), 1).unwrap();
        let b = h.arm(20, owner(0), 2).unwrap();
        let c = h.arm(30, owner(0), 3).unwrap();
        assert_eq!(
            h.arm(40, owner(0), 4),
            Err(TimerError::Full { capacity: 3 })
        );
        assert!(h.cancel(a));
        assert!(!h.cancel(a), "second cancel of the same id must be a no-op");
        assert_eq!(h.next_deadline(), 20);
        let d = h.arm(15, owner(0), 4).unwrap();
        assert_ne!(d, a, "a reused slot gets a new generation");
        assert!(
            !h.cancel(a),
            "stale id must not cancel the slot's new timer"
        );
        assert!(h.cancel(c));
        assert_eq!(drain(&mut h, 100), vec![4, 2]);
        assert!(!h.cancel(b), "fired timer cannot be cancelled");
        assert_eq!(h.len(), 0);
    }

    #[test]
    fn cancel_owner_removes_only_that_owner() {
        let mut h = TimerHeap::with_capacity(16);
        for i in 0..12u64 {
            h.arm(100 - i, owner((i % 3) as u32), i).unwrap();
        }
        assert_eq!(h.cancel_owner(owner(1)), 4);
        let fired = drain(&mut h, NEVER - 1);
        assert_eq!(fired, vec![11, 9, 8, 6, 5, 3, 2, 0]);
    }

    #[test]
    fn random_arm_cancel_matches_a_sorted_model() {
        // Deterministic xorshift so failures reproduce.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut h = TimerHeap::with_capacity(64);
        let mut model: Vec<(u64, u64, TimerId)> = Vec::new(); // (deadline, token, id)
        let mut now = 0;
        for token in 0..5_000u64 {
            match rnd() % 4 {
                0 | 1 => {
                    let deadline = now + rnd() % 1000;
                    match h.arm(deadline, owner(0), token) {
                        Ok(id) => model.push((deadline, token, id)),
                        Err(TimerError::Full { .. }) => assert_eq!(model.len(), 64),
                    }
                }
                2 if !model.is_empty() => {
                    let i = (rnd() as usize) % model.len();
                    let (_, _, id) = model.remove(i);
                    assert!(h.cancel(id));
                }
                _ => {
                    now += rnd() % 300;
                    // Stable sort keeps arm order among equal deadlines, like the heap.
                    model.sort_by_key(|&(d, t, _)| (d, t));
                    let due: Vec<u64> = model
                        .iter()
                        .take_while(|&&(d, _, _)| d <= now)
                        .map(|&(_, t, _)| t)
                        .collect();
                    model.drain(..due.len());
                    assert_eq!(drain(&mut h, now), due);
                }
            }
            assert_eq!(h.len(), model.len());
            let min = model.iter().map(|&(d, _, _)| d).min().unwrap_or(NEVER);
            assert_eq!(h.next_deadline(), min);
        }
    }
}
