//! Lock-free single-producer/single-consumer rings over shared memory.
//!
//! Head and tail are monotonically increasing 64-bit counters on their own cache lines,
//! so they never wrap and full/empty are unambiguous. Each side keeps a private copy of
//! the other side's counter and rereads the shared one only when its copy says full or
//! empty. A producer writes any number of slots and then publishes them with one release
//! store of the head: one doorbell per chain.
//!
//! The peer may be another process, so nothing read from the ring is trusted: counters
//! that would put more than the capacity in flight are reported as corruption, and slot
//! types are plain integers valid for every bit pattern.

use std::marker::PhantomData;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rpcrdma_pools::Arena;

/// Slot types: `repr(C)` structs of integers, valid for any bit pattern.
///
/// # Safety
/// Implementors must be `Copy`, contain no padding-sensitive invariants, pointers,
/// `bool`s or enums: reading arbitrary bytes as `Self` must be sound.
pub(crate) unsafe trait Pod: Copy {
    /// Writes `v` into the shared slot `dst`. Types may write only the part that means
    /// something, to move fewer cache lines.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `Self`.
    #[inline]
    unsafe fn store(dst: *mut Self, v: &Self) {
        // SAFETY: per the contract.
        unsafe { ptr::write_volatile(dst, *v) }
    }

    /// Reads the shared slot `src` (see [`Pod::store`]).
    ///
    /// # Safety
    /// `src` must be valid for reads of `Self`.
    #[inline]
    unsafe fn load(src: *const Self) -> Self {
        // SAFETY: per the contract; any bytes are a valid Self.
        unsafe { ptr::read_volatile(src) }
    }
}

/// The shared counters of one ring moved outside their valid range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Corrupt;

/// Where a ring lives inside a mapping.
pub(crate) struct RingMem {
    pub head: *const AtomicU64,
    pub tail: *const AtomicU64,
    pub slots: *mut u8,
    /// Number of slots; a power of two.
    pub cap: u64,
}

/// The producing end of a ring.
pub(crate) struct Producer<T: Pod> {
    _map: Arc<Arena>,
    head: *const AtomicU64,
    tail: *const AtomicU64,
    slots: *mut T,
    cap: u64,
    next: u64,
    published: u64,
    tail_seen: u64,
    _t: PhantomData<T>,
}

// SAFETY: the pointers target the mapping `_map` keeps alive; the producer is the only
// writer of `head` and of unpublished slots, whichever thread it moves to.
unsafe impl<T: Pod> Send for Producer<T> {}

impl<T: Pod> Producer<T> {
    /// A producer over `mem`, which must lie inside `map`, be aligned for `T` and for the
    /// counters, and have exactly one producer.
    ///
    /// # Safety
    /// `mem` must describe memory inside `map` as stated.
    pub(crate) unsafe fn new(map: Arc<Arena>, mem: RingMem) -> Self {
        // SAFETY: the caller guarantees head/tail point at live counters.
        let (next, tail) = unsafe {
            (
                (*mem.head).load(Ordering::Acquire),
                (*mem.tail).load(Ordering::Acquire),
            )
        };
        Producer {
            _map: map,
            head: mem.head,
            tail: mem.tail,
            slots: mem.slots.cast(),
            cap: mem.cap,
            next,
            published: next,
            tail_seen: tail,
            _t: PhantomData,
        }
    }

    /// Free slots, rereading the consumer's counter only when the cached one says full.
    #[inline]
    pub(crate) fn room(&mut self) -> Result<u64, Corrupt> {
        let mut used = self.next.wrapping_sub(self.tail_seen);
        if used >= self.cap {
            // SAFETY: `tail` points into the mapping kept alive by `_map`.
            self.tail_seen = unsafe { (*self.tail).load(Ordering::Acquire) };
            used = self.next.wrapping_sub(self.tail_seen);
        }
        if used > self.cap {
            return Err(Corrupt);
        }
        Ok(self.cap - used)
    }

    /// Writes `v` into the next slot (not yet visible). The caller checked [`room`].
    ///
    /// [`room`]: Producer::room
    #[inline]
    pub(crate) fn push(&mut self, v: T) {
        let i = (self.next & (self.cap - 1)) as usize;
        // SAFETY: i < cap, and the slot is free: the caller checked room() and we are
        // the only producer.
        unsafe { T::store(self.slots.add(i), &v) };
        self.next += 1;
    }

    /// Makes every pushed slot visible with one release store.
    #[inline]
    pub(crate) fn publish(&mut self) {
        if self.next != self.published {
            // SAFETY: `head` points into the mapping kept alive by `_map`.
            unsafe { (*self.head).store(self.next, Ordering::Release) };
            self.published = self.next;
        }
    }
}

/// The consuming end of a ring.
pub(crate) struct Consumer<T: Pod> {
    _map: Arc<Arena>,
    head: *const AtomicU64,
    tail: *const AtomicU64,
    slots: *const T,
    cap: u64,
    next: u64,
    released: u64,
    head_seen: u64,
}

// SAFETY: as for Producer: the mapping is kept alive and this is the only consumer.
unsafe impl<T: Pod> Send for Consumer<T> {}

impl<T: Pod> Consumer<T> {
    /// A consumer over `mem` (see [`Producer::new`]).
    ///
    /// # Safety
    /// `mem` must describe memory inside `map`, suitably aligned, with one consumer.
    pub(crate) unsafe fn new(map: Arc<Arena>, mem: RingMem) -> Self {
        // SAFETY: the caller guarantees head/tail point at live counters.
        let (head, next) = unsafe {
            (
                (*mem.head).load(Ordering::Acquire),
                (*mem.tail).load(Ordering::Acquire),
            )
        };
        Consumer {
            _map: map,
            head: mem.head,
            tail: mem.tail,
            slots: mem.slots.cast(),
            cap: mem.cap,
            next,
            released: next,
            head_seen: head,
        }
    }

    /// The next published slot, if any, without consuming it.
    #[inline]
    pub(crate) fn peek(&mut self) -> Result<Option<T>, Corrupt> {
        if self.next == self.head_seen {
            // SAFETY: `head` points into the mapping kept alive by `_map`.
            self.head_seen = unsafe { (*self.head).load(Ordering::Acquire) };
            if self.head_seen.wrapping_sub(self.next) > self.cap {
                return Err(Corrupt);
            }
            if self.next == self.head_seen {
                return Ok(None);
            }
        }
        let i = (self.next & (self.cap - 1)) as usize;
        // SAFETY: i < cap; T is Pod, so whatever bytes the producer left are a valid T;
        // the acquire load of `head` made the slot's contents visible.
        Ok(Some(unsafe { T::load(self.slots.add(i)) }))
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
