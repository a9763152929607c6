//! Fixed-capacity containers for the data path: nothing here grows after construction,
//! so a full container is a typed refusal rather than a hidden allocation.

use core::fmt;

/// Up to `N` values inline, in insertion order. Used for the per-call lists (DDP
/// arguments, write sinks, DDP results) that travel with a call by value.
pub struct FixedVec<T, const N: usize> {
    items: [Option<T>; N],
    len: usize,
}

impl<T, const N: usize> FixedVec<T, N> {
    /// An empty list.
    pub fn new() -> Self {
        FixedVec {
            items: core::array::from_fn(|_| None),
            len: 0,
        }
    }

    /// Appends `value`, or hands it back when all `N` places are taken.
    pub fn push(&mut self, value: T) -> Result<(), T> {
        match self.items.get_mut(self.len) {
            Some(slot) => {
                *slot = Some(value);
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

    /// The value at `index`.
    #[inline]
    pub fn get(&self, index: usize) -> Option<&T> {
        self.items.get(index).and_then(Option::as_ref)
    }

    /// The value at `index`, writable.
    #[inline]
    pub fn get_mut(&mut self, index: usize) -> Option<&mut T> {
        self.items.get_mut(index).and_then(Option::as_mut)
    }

    /// The values in order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.items[..self.len].iter().filter_map(Option::as_ref)
    }

    /// The values in order, writable.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> {
        self.items[..self.len].iter_mut().filter_map(Option::as_mut)
    }

    /// Removes and returns the last value.
    pub fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        self.items[self.len].take()
    }

    /// Removes every value, dropping them in order.
    pub fn clear(&mut self) {
        for slot in &mut self.items[..self.len] {
            *slot = None;
        }
        self.len = 0;
    }

    /// Moves every value out, in order, leaving the list empty.
    pub fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        let n = self.len;
        self.len = 0;
        self.items[..n].iter_mut().filter_map(Option::take)
    }
}

impl<T, const N: usize> Default for FixedVec<T, N> {
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
pub struct FixedQueue<T> {
    slots: Box<[Option<T>]>,
    head: usize,
    len: usize,
}

impl<T> FixedQueue<T> {
    /// A queue holding at most `capacity` values (at least one).
    pub fn with_capacity(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        FixedQueue {
            slots: (0..capacity).map(|_| None).collect(),
            head: 0,
            len: 0,
        }
    }

    /// Appends `value` at the back, or hands it back when full.
    pub fn push_back(&mut self, value: T) -> Result<(), T> {
        if self.len == self.slots.len() {
            return Err(value);
        }
        let at = (self.head + self.len) % self.slots.len();
        self.slots[at] = Some(value);
        self.len += 1;
        Ok(())
    }

    /// Puts `value` back at the front (undoing a `pop_front`), or hands it back when full.
    pub fn push_front(&mut self, value: T) -> Result<(), T> {
        if self.len == self.slots.len() {
            return Err(value);
        }
        self.head = (self.head + self.slots.len() - 1) % self.slots.len();
        self.slots[self.head] = Some(value);
        self.len += 1;
        Ok(())
    }

    /// Takes the value at the front.
    pub fn pop_front(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let v = self.slots[self.head].take();
        self.head = (self.head + 1) % self.slots.len();
        self.len -= 1;
        v
    }

    /// The value at the front.
    pub fn front(&self) -> Option<&T> {
        if self.len == 0 {
            return None;
        }
        self.slots[self.head].as_ref()
    }

    /// Number of values queued.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is queued.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when another push would be refused.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.len == self.slots.len()
    }

    /// Most values the queue holds.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.slots.len()
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
pub struct IndexStack {
    free: Box<[u32]>,
    len: usize,
}

impl IndexStack {
    /// Every index of `0..n` free, lowest handed out first.
    pub fn full(n: u32) -> Self {
        IndexStack {
            free: (0..n).rev().collect(),
            len: n as usize,
        }
    }

    /// Takes a free index.
    #[inline]
    pub fn pop(&mut self) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        Some(self.free[self.len])
    }

    /// Returns an index. Returning more indices than the stack was built with is refused
    /// (it would mean a double free in the caller's bookkeeping).
    #[inline]
    pub fn push(&mut self, index: u32) -> Result<(), u32> {
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
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when every index is taken.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Total indices managed.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.free.len()
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
