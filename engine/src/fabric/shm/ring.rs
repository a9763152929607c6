//! Lock-free single-producer/single-consumer rings over shared memory.
//!
//! Every slot carries its own sequence word (the FastForward trick): the producer fills
//! a slot in place and then release-stores `n + 1` into it, where `n` is the slot's
//! position, counting from zero and never wrapping. The consumer polls the next slot's
//! word rather than a shared head counter, so an idle poll touches one line and a busy
//! one finds the request in the line it has just read: one cache-line transfer per
//! request instead of two dependent ones. A stale word from the previous lap differs
//! by the capacity, so it never looks new.
//!
//! The consumer's tail (a monotonically increasing count of slots it has finished) is on
//! its own cache line; it is both the producer's flow control and, for the request ring,
//! the target's acknowledgement. The producer keeps a private copy and rereads the
//! shared one only when its copy says full.
//!
//! The peer may be another process, so nothing read from the ring is trusted: a tail
//! claiming more than was produced is reported as corruption, a slot word that is not
//! exactly the expected one means "not yet", and slot contents are read once into
//! locals before they are checked and used.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rpcrdma_pools::Arena;

/// Slot types: `repr(C)` structs whose first field is the `AtomicU64` sequence word and
/// whose other fields are plain integers, valid for any bit pattern.
///
/// # Safety
/// Implementors must be `repr(C)` with an `AtomicU64` at offset 0 and no field for
/// which some bit pattern is invalid (no references, `bool`s or enums).
pub(crate) unsafe trait Slot {}

/// The consumer's tail claims more slots than were ever produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Corrupt;

/// Where a ring lives inside a mapping.
pub(crate) struct RingMem {
    pub tail: *const AtomicU64,
    pub slots: *mut u8,
    /// Number of slots; a power of two.
    pub cap: u64,
}

#[inline]
fn seq_word<T: Slot>(slot: *const T) -> *const AtomicU64 {
    // Offset 0 holds the sequence word, per the `Slot` contract.
    slot.cast()
}

/// Cache-line size the prefetching peek steps by.
#[cfg(target_arch = "x86_64")]
const LINE: usize = 64;

/// The producing end of a ring.
pub(crate) struct Producer<T: Slot> {
    _map: Arc<Arena>,
    tail: *const AtomicU64,
    slots: *mut T,
    mask: u64,
    next: u64,
    tail_seen: u64,
}

// SAFETY: the pointers target the mapping `_map` keeps alive; the producer is the only
// writer of unpublished slots, whichever thread it moves to.
unsafe impl<T: Slot> Send for Producer<T> {}

impl<T: Slot> Producer<T> {
    /// A producer over `mem`, which must lie inside `map`, be aligned for `T` and for the
    /// tail, start zeroed, and have exactly one producer.
    ///
    /// # Safety
    /// `mem` must describe memory inside `map` as stated.
    pub(crate) unsafe fn new(map: Arc<Arena>, mem: RingMem) -> Self {
        Producer {
            _map: map,
            tail: mem.tail,
            slots: mem.slots.cast(),
            mask: mem.cap - 1,
            next: 0,
            tail_seen: 0,
        }
    }

    /// Free slots, rereading the consumer's counter only when the cached one says full.
    #[inline]
    pub(crate) fn room(&mut self) -> Result<u64, Corrupt> {
        let cap = self.mask + 1;
        let mut used = self.next.wrapping_sub(self.tail_seen);
        if used >= cap {
            // SAFETY: `tail` points into the mapping kept alive by `_map`.
            self.tail_seen = unsafe { (*self.tail).load(Ordering::Acquire) };
            used = self.next.wrapping_sub(self.tail_seen);
        }
        if used > cap {
            return Err(Corrupt);
        }
        Ok(cap - used)
    }

    /// How many slots the consumer has finished, read now (acquire: whatever the
    /// consumer did before releasing them is visible).
    #[inline]
    pub(crate) fn consumed(&mut self) -> u64 {
        // SAFETY: `tail` points into the mapping kept alive by `_map`.
        let tail = unsafe { (*self.tail).load(Ordering::Acquire) };
        if tail.wrapping_sub(self.tail_seen) <= self.mask + 1 {
            self.tail_seen = tail;
        }
        tail
    }

    /// Position of the slot [`slot`] returns (the request's sequence number).
    ///
    /// [`slot`]: Producer::slot
    #[inline]
    pub(crate) fn position(&self) -> u64 {
        self.next
    }

    /// The next slot, to fill in place before [`commit`]. The caller checked [`room`];
    /// until it commits, the consumer ignores the slot, so a slot filled halfway and
    /// abandoned is simply overwritten by the next request.
    ///
    /// [`commit`]: Producer::commit
    /// [`room`]: Producer::room
    #[inline]
    pub(crate) fn slot(&mut self) -> *mut T {
        // The index is masked below the capacity, so the pointer stays in the ring.
        self.slots.wrapping_add((self.next & self.mask) as usize)
    }

    /// Publishes the slot [`slot`] returned: one release store of its sequence word.
    ///
    /// [`slot`]: Producer::slot
    #[inline]
    pub(crate) fn commit(&mut self) {
        let slot = self.slot();
        self.next += 1;
        // SAFETY: the slot is inside the ring (see `slot`), its word is an aligned
        // AtomicU64 per the `Slot` contract, and the mapping is alive.
        unsafe { (*seq_word(slot)).store(self.next, Ordering::Release) };
    }
}

/// The consuming end of a ring.
pub(crate) struct Consumer<T: Slot> {
    _map: Arc<Arena>,
    tail: *const AtomicU64,
    slots: *const T,
    mask: u64,
    next: u64,
    released: u64,
}

// SAFETY: as for Producer: the mapping is kept alive and this is the only consumer.
unsafe impl<T: Slot> Send for Consumer<T> {}

impl<T: Slot> Consumer<T> {
    /// A consumer over `mem` (see [`Producer::new`]).
    ///
    /// # Safety
    /// `mem` must describe memory inside `map`, suitably aligned, with one consumer.
    pub(crate) unsafe fn new(map: Arc<Arena>, mem: RingMem) -> Self {
        Consumer {
            _map: map,
            tail: mem.tail,
            slots: mem.slots.cast(),
            mask: mem.cap - 1,
            next: 0,
            released: 0,
        }
    }

    /// The next published slot, if any, without consuming it. Its contents are the
    /// producer's until [`advance`]; read each field once.
    ///
    /// [`advance`]: Consumer::advance
    #[inline]
    pub(crate) fn peek(&self) -> Option<*const T> {
        let slot = self.slots.wrapping_add((self.next & self.mask) as usize);
        // SAFETY: the slot is inside the ring and the mapping is alive; the word is an
        // aligned AtomicU64 per the `Slot` contract. The acquire makes the producer's
        // writes to the slot visible.
        let word = unsafe { (*seq_word(slot)).load(Ordering::Acquire) };
        (word == self.next + 1).then_some(slot)
    }

    /// [`peek`], first asking for the slot's lines after the one holding its sequence
    /// word (a prefetch: no fault, no wait). Without it the body's lines are requested
    /// only once the word has been seen new, one cross-core transfer after the word's
    /// own; asked for together, a slot longer than a line arrives in one transfer's
    /// time (the producer writes the body before the word, and x86 loads see stores in
    /// order, so a prefetch that returns with the new word returns the new body too).
    ///
    /// [`peek`]: Consumer::peek
    #[inline]
    pub(crate) fn peek_prefetching(&self) -> Option<*const T> {
        #[cfg(target_arch = "x86_64")]
        {
            let slot = self
                .slots
                .wrapping_add((self.next & self.mask) as usize)
                .cast::<u8>();
            let mut line = LINE;
            while line < std::mem::size_of::<T>() {
                // SAFETY: a prefetch never faults and reads nothing into the program;
                // the address is inside the slot, inside the live mapping.
                unsafe {
                    core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                        slot.wrapping_add(line).cast(),
                    )
                };
                line += LINE;
            }
        }
        self.peek()
    }

    /// Sequence number of the slot [`peek`] returns next.
    ///
    /// [`peek`]: Consumer::peek
    #[inline]
    pub(crate) fn position(&self) -> u64 {
        self.next
    }

    /// Consumes the slot [`peek`] returned.
    ///
    /// [`peek`]: Consumer::peek
    #[inline]
    pub(crate) fn advance(&mut self) {
        self.next += 1;
    }

    /// Hands consumed slots back to the producer with one release store.
    #[inline]
    pub(crate) fn release(&mut self) {
        if self.next != self.released {
            // SAFETY: `tail` points into the mapping kept alive by `_map`.
            unsafe { (*self.tail).store(self.next, Ordering::Release) };
            self.released = self.next;
        }
    }
}
