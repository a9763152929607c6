//! The duplicate request cache's storage: a fixed array of entries with a hash index,
//! and a ring of reply bytes, all allocated when the cache is made.
//!
//! Entries that hold a reply are kept in completion order, which is also the order of
//! their bytes in the ring: evicting the oldest entry frees the ring's oldest bytes, so
//! one eviction rule serves both bounds (entries and bytes), and storing a reply is a
//! copy to the ring's head after evicting from its tail. A replay does not move an entry
//! (that would break the ring order); a DRC protects the window just after a reply went
//! out, whether or not a retransmission was already answered.

use super::key::DrcKey;
use super::stats::DrcStats;

/// "No entry" in the links.
const NIL: u32 = u32::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// On the free list.
    Free,
    /// The call is running; a retransmission is dropped.
    InProgress,
    /// The reply is `len` octets at absolute ring position `at`.
    Done { at: u64, len: u32 },
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    key: DrcKey,
    state: State,
    /// Bumped on every reuse, so a stale [`Slot`] cannot settle a later call.
    generation: u32,
    /// Next entry in the same hash bucket, or on the free list.
    chain: u32,
    /// Neighbours in completion order (entries in `Done` only).
    older: u32,
    newer: u32,
}

const VACANT: Entry = Entry {
    key: DrcKey {
        xid: 0,
        prog: 0,
        vers: 0,
        procedure: 0,
        client: super::key::ClientAddr::Unknown,
        args_len: 0,
        checksum: 0,
    },
    state: State::Free,
    generation: 0,
    chain: NIL,
    older: NIL,
    newer: NIL,
};

/// An entry reserved for a running call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Slot {
    index: u32,
    generation: u32,
}

/// What [`Table::begin`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Begin {
    /// Not cached: the call runs in this slot.
    New(Slot),
    /// The original is still running.
    InProgress,
    /// The cached reply, copied to the caller's buffer.
    Replayed { len: usize },
    /// The cached reply is longer than the caller's buffer.
    ReplayOverrun { len: usize },
    /// Every entry holds a running call.
    Full,
}

/// Octets of bookkeeping per entry: the entry and its share of the hash index.
pub(super) const ENTRY_COST: usize = core::mem::size_of::<Entry>() + core::mem::size_of::<u32>();

/// The cache proper; [`Drc`](super::Drc) puts it behind a lock.
pub(super) struct Table {
    entries: Box<[Entry]>,
    /// Heads of the hash chains; as many as entries, rounded up to a power of two.
    buckets: Box<[u32]>,
    free: u32,
    oldest: u32,
    newest: u32,
    ring: Box<[u8]>,
    /// Absolute ring position where the next reply goes (its index is `head % len`).
    head: u64,
    max_reply: usize,
    pub(super) stats: DrcStats,
}

impl Table {
    /// A table of `entries` entries (at least one, fewer than `u32::MAX`) and a ring of
    /// `ring_bytes` octets for replies of at most `max_reply` octets (at most
    /// `ring_bytes`): the only allocations it ever makes.
    pub(super) fn new(entries: u32, ring_bytes: usize, max_reply: usize) -> Table {
        let n = entries.max(1) as usize;
        let mut slots = vec![VACANT; n].into_boxed_slice();
        for (i, e) in slots.iter_mut().enumerate() {
            e.chain = if i + 1 < n { i as u32 + 1 } else { NIL };
        }
        Table {
            entries: slots,
            buckets: vec![NIL; n.next_power_of_two()].into_boxed_slice(),
            free: 0,
            oldest: NIL,
            newest: NIL,
            ring: vec![0; ring_bytes.max(1)].into_boxed_slice(),
            head: 0,
            max_reply: max_reply.min(ring_bytes),
            stats: DrcStats::default(),
        }
    }

    fn bucket(&self, key: &DrcKey) -> usize {
        (key.transaction_hash() as usize) & (self.buckets.len() - 1)
    }

    fn entry(&self, i: u32) -> Option<&Entry> {
        self.entries.get(i as usize)
    }

    fn entry_mut(&mut self, i: u32) -> Option<&mut Entry> {
        self.entries.get_mut(i as usize)
    }

    /// Looks `key` up. A hit copies the cached reply into `out`; a miss reserves an
    /// entry, in progress, for the call.
    pub(super) fn begin(&mut self, key: &DrcKey, out: &mut [u8]) -> Begin {
        let b = self.bucket(key);
        let mut i = self.buckets[b];
        let mut reused_xid = false;
        while let Some(e) = self.entry(i) {
            if e.key == *key {
                return match e.state {
                    State::InProgress => {
                        self.stats.in_progress_drops += 1;
                        Begin::InProgress
                    }
                    State::Done { at, len } => self.replay(at, len as usize, out),
                    // Free entries are never in a bucket.
                    State::Free => Begin::Full,
                };
            }
            reused_xid |= e.key.same_transaction(key);
            i = e.chain;
        }
        if reused_xid {
            self.stats.checksum_misses += 1;
        }
        let Some(index) = self.take_entry() else {
            self.stats.uncached += 1;
            return Begin::Full;
        };
        let head = self.buckets[b];
        let Some(e) = self.entry_mut(index) else {
            return Begin::Full;
        };
        e.key = *key;
        e.state = State::InProgress;
        e.generation = e.generation.wrapping_add(1);
        e.chain = head;
        let generation = e.generation;
        self.buckets[b] = index;
        self.stats.in_progress += 1;
        Begin::New(Slot { index, generation })
    }

    fn replay(&mut self, at: u64, len: usize, out: &mut [u8]) -> Begin {
        let Some(dst) = out.get_mut(..len) else {
            return Begin::ReplayOverrun { len };
        };
        let start = (at % self.ring.len() as u64) as usize;
        match self.ring.get(start..start + len) {
            Some(src) => {
                dst.copy_from_slice(src);
                self.stats.hits += 1;
                Begin::Replayed { len }
            }
            // Cannot happen: replies are stored contiguously.
            None => Begin::Full,
        }
    }

    /// An entry for a new call: a free one, else the oldest completed one. `None` when
    /// every entry holds a running call.
    fn take_entry(&mut self) -> Option<u32> {
        if self.free != NIL {
            let i = self.free;
            self.free = self.entry(i)?.chain;
            return Some(i);
        }
        if self.oldest == NIL {
            return None;
        }
        let i = self.oldest;
        self.evict_oldest();
        self.free = self.entry(i)?.chain;
        Some(i)
    }

    /// Stores `reply` as the answer to the call in `slot`. A reply longer than the
    /// largest cacheable one releases the entry instead; so does a stale slot (which
    /// [`DrcPending`](super::DrcPending) never hands in). Returns whether it was stored.
    pub(super) fn complete(&mut self, slot: Slot, reply: &[u8]) -> bool {
        if !self.holds(slot) {
            return false;
        }
        if reply.len() > self.max_reply {
            self.release(slot);
            return false;
        }
        let at = self.reserve(reply.len());
        let start = (at % self.ring.len() as u64) as usize;
        if let Some(dst) = self.ring.get_mut(start..start + reply.len()) {
            dst.copy_from_slice(reply);
        }
        let newest = self.newest;
        let Some(e) = self.entry_mut(slot.index) else {
            return false;
        };
        e.state = State::Done {
            at,
            len: reply.len() as u32,
        };
        e.older = newest;
        e.newer = NIL;
        match self.entry_mut(newest) {
            Some(n) => n.newer = slot.index,
            None => self.oldest = slot.index,
        }
        self.newest = slot.index;
        let s = &mut self.stats;
        s.in_progress -= 1;
        s.insertions += 1;
        s.entries += 1;
        s.reply_bytes += reply.len() as u64;
        true
    }

    /// Forgets the call in `slot` without a reply: a retransmission runs again.
    pub(super) fn abandon(&mut self, slot: Slot) {
        if self.holds(slot) {
            self.release(slot);
        }
    }

    fn holds(&self, slot: Slot) -> bool {
        self.entry(slot.index)
            .is_some_and(|e| e.generation == slot.generation && e.state == State::InProgress)
    }

    /// Frees an in-progress entry.
    fn release(&mut self, slot: Slot) {
        self.unhash(slot.index);
        let free = self.free;
        if let Some(e) = self.entry_mut(slot.index) {
            e.state = State::Free;
            e.chain = free;
            self.free = slot.index;
        }
        self.stats.in_progress -= 1;
        self.stats.uncached += 1;
    }

    /// Absolute ring position for `len` octets (at most the ring's size), contiguous in
    /// the ring: evicts the oldest replies until they fit.
    fn reserve(&mut self, len: usize) -> u64 {
        let cap = self.ring.len() as u64;
        let len = (len as u64).min(cap);
        loop {
            let mut at = self.head;
            let off = at % cap;
            if off + len > cap {
                // Would wrap: start at the beginning of the ring instead.
                at += cap - off;
            }
            let tail = match self.entry(self.oldest).map(|e| e.state) {
                Some(State::Done { at: t, .. }) => t,
                _ => at,
            };
            if at + len - tail <= cap {
                self.head = at + len;
                return at;
            }
            self.evict_oldest();
        }
    }

    /// Drops the oldest completed entry, unlinked and unhashed, to the free list.
    fn evict_oldest(&mut self) {
        let i = self.oldest;
        let Some(&e) = self.entry(i) else {
            return;
        };
        self.oldest = e.newer;
        match self.entry_mut(e.newer) {
            Some(n) => n.older = NIL,
            None => self.newest = NIL,
        }
        self.unhash(i);
        let free = self.free;
        if let Some(x) = self.entry_mut(i) {
            x.state = State::Free;
            x.chain = free;
            x.older = NIL;
            x.newer = NIL;
        }
        self.free = i;
        let s = &mut self.stats;
        s.evictions += 1;
        s.entries -= 1;
        if let State::Done { len, .. } = e.state {
            s.reply_bytes -= u64::from(len);
        }
    }

    /// Removes entry `i` from its hash chain.
    fn unhash(&mut self, i: u32) {
        let Some(e) = self.entry(i) else {
            return;
        };
        let (b, next) = (self.bucket(&e.key), e.chain);
        if self.buckets[b] == i {
            self.buckets[b] = next;
            return;
        }
        let mut at = self.buckets[b];
        while let Some(p) = self.entry(at) {
            if p.chain == i {
                if let Some(p) = self.entry_mut(at) {
                    p.chain = next;
                }
                return;
            }
            at = p.chain;
        }
    }
}
