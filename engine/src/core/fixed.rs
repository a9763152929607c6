//! Fixed-capacity containers for the data path: nothing here grows after construction,
//! so a full container is a typed refusal rather than a hidden allocation.

use core::fmt;
use core::mem::MaybeUninit;

/// Up to `N` values inline, in insertion order. Used for the per-call lists (DDP
/// arguments, write sinks, DDP results) that travel with a call by value.
///
/// The places past `len` are left uninitialised: an empty list costs one word to make
/// and nothing to drop, which matters because every call builds and drops several
/// (mostly empty) lists.
pub struct FixedVec<T, const N: usize> {
    /// `items[..len]` are initialised; the rest are not.
    items: [MaybeUninit<T>; N],
    len: usize,
}

impl<T, const N: usize> FixedVec<T, N> {
    /// An empty list.
    #[inline]
    pub const fn new() -> Self {
        FixedVec {
            items: [const { MaybeUninit::uninit() }; N],
            len: 0,
        }
    }

    /// Appends `value`, or hands it back when all `N` places are taken.
    #[inline]
    pub fn push(&mut self, value: T) -> Result<(), T> {
        match self.items.get_mut(self.len) {
            Some(slot) => {
                slot.write(value);
                self.len += 1;
                Ok(())
            }
            None => Err(value),
        }
    }

    /// Number of values held.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no value is held.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Most values the list can hold.
    #[inline]
    pub const fn capacity(&self) -> usize {
        N
    }

    /// The values in order, as a slice.
    #[inline]
    pub fn as_slice(&self) -> &[T] {
        // SAFETY: `items[..len]` are initialised (the type's invariant) and
        // `MaybeUninit<T>` has the layout of `T`.
        unsafe { core::slice::from_raw_parts(self.items.as_ptr().cast::<T>(), self.len) }
    }

    /// The values in order, as a writable slice.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as in `as_slice`; the borrow is unique.
        unsafe { core::slice::from_raw_parts_mut(self.items.as_mut_ptr().cast::<T>(), self.len) }
    }

    /// The value at `index`.
    #[inline]
    pub fn get(&self, index: usize) -> Option<&T> {
        self.as_slice().get(index)
    }

    /// The value at `index`, writable.
    #[inline]
    pub fn get_mut(&mut self, index: usize) -> Option<&mut T> {
        self.as_mut_slice().get_mut(index)
    }

    /// The values in order.
    #[inline]
    pub fn iter(&self) -> core::slice::Iter<'_, T> {
        self.as_slice().iter()
    }

    /// The values in order, writable.
    #[inline]
    pub fn iter_mut(&mut self) -> core::slice::IterMut<'_, T> {
        self.as_mut_slice().iter_mut()
    }

    /// Removes and returns the last value.
    #[inline]
    pub fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        // SAFETY: the place was initialised, and lowering `len` first means it is never
        // read or dropped again.
        Some(unsafe { self.items[self.len].assume_init_read() })
    }

    /// Removes every value, dropping them in order.
    #[inline]
    pub fn clear(&mut self) {
        let n = self.len;
        if n == 0 {
            return;
        }
        // `len` goes to zero first, so a panicking destructor can at worst leak the
        // values after it, never drop one twice.
        self.len = 0;
        // SAFETY: `items[..n]` were initialised and are no longer reachable.
        unsafe {
            core::ptr::drop_in_place(core::ptr::slice_from_raw_parts_mut(
                self.items.as_mut_ptr().cast::<T>(),
                n,
            ));
        }
    }

    /// Moves every value out, in order, leaving the list empty. Values the iterator is
    /// not asked for are dropped with it.
    #[inline]
    pub fn drain(&mut self) -> Drain<'_, T, N> {
        let end = self.len;
        self.len = 0;
        Drain {
            items: &mut self.items,
            next: 0,
            end,
        }
    }
}

/// The iterator of [`FixedVec::drain`].
pub struct Drain<'a, T, const N: usize> {
    /// `items[next..end]` are initialised and owned by the iterator.
    items: &'a mut [MaybeUninit<T>; N],
    next: usize,
    end: usize,
}

impl<T, const N: usize> Iterator for Drain<'_, T, N> {
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        if self.next >= self.end {
            return None;
        }
        let i = self.next;
        self.next += 1;
        // SAFETY: `items[i]` is initialised and, with `next` past it, read only here.
        Some(unsafe { self.items[i].assume_init_read() })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.end - self.next;
        (n, Some(n))
    }
}

impl<T, const N: usize> Drop for Drain<'_, T, N> {
    fn drop(&mut self) {
        for _ in self.by_ref() {}
    }
}

impl<T, const N: usize> Drop for FixedVec<T, N> {
    #[inline]
    fn drop(&mut self) {
        self.clear();
    }
}

impl<T, const N: usize> Default for FixedVec<T, N> {
    #[inline]
    fn default() -> Self {
        Self::new()
    }
}

impl<T: fmt::Debug, const N: usize> fmt::Debug for FixedVec<T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// A FIFO ring of `capacity` values, allocated once.
///
/// Its places are uninitialised until pushed to, like [`FixedVec`]'s: a push writes the
/// value once, where an `Option` per place would first build the `Some` and then move
/// it in (and a pop would move it out twice), which for an outcome of a few hundred
/// octets is most of what the queue costs.
pub(crate) struct FixedQueue<T> {
    /// The `len` places from `head` (wrapping) are initialised; the rest are not.
    slots: Box<[MaybeUninit<T>]>,
    head: usize,
    len: usize,
}

impl<T> FixedQueue<T> {
    /// A queue holding at most `capacity` values (at least one).
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        FixedQueue {
            slots: (0..capacity).map(|_| MaybeUninit::uninit()).collect(),
            head: 0,
            len: 0,
        }
    }

    /// The index of the place `n` after the head.
    #[inline(always)]
    fn wrap(&self, n: usize) -> usize {
        let at = self.head + n;
        // `head < capacity` and `n <= capacity`, so one subtraction wraps it (cheaper
        // than a division on every push and pop).
        if at >= self.slots.len() {
            at - self.slots.len()
        } else {
            at
        }
    }

    /// Appends `value` at the back, or hands it back when full.
    #[inline(always)]
    pub(crate) fn push_back(&mut self, value: T) -> Result<(), T> {
        if self.len == self.slots.len() {
            return Err(value);
        }
        let at = self.wrap(self.len);
        self.slots[at].write(value);
        self.len += 1;
        Ok(())
    }

    /// Appends the value `make` builds at the back, building it only when there is room
    /// for it (`None` when full), and returns it in place. Built where it is stored, the
    /// value is not moved after.
    #[inline(always)]
    pub(crate) fn push_back_with(&mut self, make: impl FnOnce() -> T) -> Option<&mut T> {
        if self.len == self.slots.len() {
            return None;
        }
        let at = self.wrap(self.len);
        self.len += 1;
        Some(self.slots[at].write(make()))
    }

    /// Puts `value` back at the front (undoing a `pop_front`), or hands it back when full.
    pub(crate) fn push_front(&mut self, value: T) -> Result<(), T> {
        if self.len == self.slots.len() {
            return Err(value);
        }
        self.head = self.wrap(self.slots.len() - 1);
        self.slots[self.head].write(value);
        self.len += 1;
        Ok(())
    }

    /// Takes the value at the front.
    #[inline(always)]
    pub(crate) fn pop_front(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let at = self.head;
        self.head = self.wrap(1);
        self.len -= 1;
        // SAFETY: the place at the old head was initialised (one of the `len` from it)
        // and, with `head` moved past it and `len` lowered, is outside the initialised
        // range now, so it is read only here and never dropped.
        Some(unsafe { self.slots[at].assume_init_read() })
    }

    /// The value at the front, writable in place.
    #[inline(always)]
    pub(crate) fn front_mut(&mut self) -> Option<&mut T> {
        if self.len == 0 {
            return None;
        }
        // SAFETY: with `len > 0` the place at `head` is initialised.
        Some(unsafe { self.slots[self.head].assume_init_mut() })
    }

    /// Drops the value at the front where it lies (a `pop_front` without moving it out).
    #[inline(always)]
    pub(crate) fn drop_front(&mut self) {
        if self.len == 0 {
            return;
        }
        let at = self.head;
        self.head = self.wrap(1);
        self.len -= 1;
        // SAFETY: the place at the old head was initialised and, with `head` moved past
        // it and `len` lowered, is outside the initialised range now: dropped only here.
        unsafe { self.slots[at].assume_init_drop() }
    }

    /// Removes the front value without running its destructor (nothing when empty).
    /// Safe (a value not dropped is only leaked): for a caller that has already taken
    /// everything with a destructor out of the value, so that the drop glue's walk over
    /// its fields would free nothing.
    #[inline]
    pub(crate) fn forget_front(&mut self) {
        if self.len == 0 {
            return;
        }
        self.head = self.wrap(1);
        self.len -= 1;
    }

    /// The value at the front.
    pub(crate) fn front(&self) -> Option<&T> {
        if self.len == 0 {
            return None;
        }
        // SAFETY: with `len > 0` the place at `head` is initialised.
        Some(unsafe { self.slots[self.head].assume_init_ref() })
    }

    /// Number of values queued.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is queued.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<T> Drop for FixedQueue<T> {
    fn drop(&mut self) {
        // Drops the queued values, front first.
        while self.pop_front().is_some() {}
    }
}

impl<T> fmt::Debug for FixedQueue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FixedQueue")
            .field("len", &self.len)
            .field("capacity", &self.slots.len())
            .finish()
    }
}

/// A stack of free indices `0..n`, allocated once: the free list of a slot table.
#[derive(Debug)]
pub(crate) struct IndexStack {
    free: Box<[u32]>,
    len: usize,
}

impl IndexStack {
    /// Every index of `0..n` free, lowest handed out first.
    pub(crate) fn full(n: u32) -> Self {
        IndexStack {
            free: (0..n).rev().collect(),
            len: n as usize,
        }
    }

    /// Takes a free index.
    #[inline(always)]
    pub(crate) fn pop(&mut self) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        Some(self.free[self.len])
    }

    /// Returns an index. Returning more indices than the stack was built with is refused
    /// (it would mean a double free in the caller's bookkeeping).
    #[inline]
    pub(crate) fn push(&mut self, index: u32) -> Result<(), u32> {
        match self.free.get_mut(self.len) {
            Some(slot) => {
                *slot = index;
                self.len += 1;
                Ok(())
            }
            None => Err(index),
        }
    }

    /// Free indices.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// True when every index is taken.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_vec_refuses_past_capacity_and_drains_in_order() {
        let mut v: FixedVec<u32, 2> = FixedVec::new();
        assert!(v.push(1).is_ok());
        assert!(v.push(2).is_ok());
        assert_eq!(v.push(3), Err(3));
        assert_eq!(v.drain().collect::<Vec<_>>(), vec![1, 2]);
        assert!(v.is_empty());
    }

    #[test]
    fn fixed_vec_drops_each_value_once() {
        use std::rc::Rc;
        let counter = Rc::new(());
        {
            let mut v: FixedVec<Rc<()>, 4> = FixedVec::new();
            for _ in 0..3 {
                assert!(v.push(counter.clone()).is_ok());
            }
            assert_eq!(Rc::strong_count(&counter), 4);
            // A drain dropped after one value drops the rest with it.
            let mut d = v.drain();
            let first = d.next();
            assert!(first.is_some());
            drop(d);
            assert_eq!(Rc::strong_count(&counter), 2);
            drop(first);
            assert!(v.is_empty());
            assert!(v.push(counter.clone()).is_ok());
            assert!(v.push(counter.clone()).is_ok());
            assert!(v.pop().is_some());
            assert_eq!(v.get(0).map(|r| Rc::ptr_eq(r, &counter)), Some(true));
            assert!(v.get(1).is_none());
            assert_eq!(Rc::strong_count(&counter), 2);
        }
        assert_eq!(Rc::strong_count(&counter), 1);
    }

    #[test]
    fn queue_wraps_and_push_front_restores_order() {
        let mut q = FixedQueue::with_capacity(3);
        for i in 0..3 {
            assert!(q.push_back(i).is_ok());
        }
        assert_eq!(q.push_back(9), Err(9));
        assert_eq!(q.pop_front(), Some(0));
        assert!(q.push_back(3).is_ok());
        let x = q.pop_front();
        assert_eq!(x, Some(1));
        assert!(q.push_front(1).is_ok());
        let all: Vec<_> = core::iter::from_fn(|| q.pop_front()).collect();
        assert_eq!(all, vec![1, 2, 3]);
    }

    #[test]
    fn queue_drops_what_it_holds_once() {
        use std::rc::Rc;
        let counter = Rc::new(());
        {
            let mut q = FixedQueue::with_capacity(3);
            for _ in 0..3 {
                assert!(q.push_back_with(|| counter.clone()).is_some());
            }
            assert!(q.push_back_with(|| counter.clone()).is_none());
            assert_eq!(Rc::strong_count(&counter), 4);
            drop(q.pop_front());
            assert!(q.push_back(counter.clone()).is_ok());
            assert!(q.front().is_some_and(|r| Rc::ptr_eq(r, &counter)));
            assert_eq!(Rc::strong_count(&counter), 4);
        }
        assert_eq!(Rc::strong_count(&counter), 1);
    }

    #[test]
    fn index_stack_refuses_double_free() {
        let mut s = IndexStack::full(2);
        assert_eq!(s.pop(), Some(0));
        assert_eq!(s.pop(), Some(1));
        assert_eq!(s.pop(), None);
        assert!(s.push(1).is_ok());
        assert!(s.push(0).is_ok());
        assert_eq!(s.push(0), Err(0));
    }
}
