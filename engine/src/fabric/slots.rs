//! Fixed slots handed from one producer to one consumer by sequence number: the work
//! queues of the software providers (shm, siw). Publication and release of a sequence
//! number are the caller's (an atomic counter each side); these accessors only index.

use core::cell::UnsafeCell;

/// A fixed array of entries passed from one producer to one consumer by sequence number.
pub(crate) struct Slots<T> {
    cells: Box<[UnsafeCell<T>]>,
    mask: u64,
}

impl<T: Copy> Slots<T> {
    pub(crate) fn new(depth: u32, empty: T) -> Slots<T> {
        let n = depth.next_power_of_two();
        Slots {
            cells: (0..n).map(|_| UnsafeCell::new(empty)).collect(),
            mask: u64::from(n - 1),
        }
    }

    /// # Safety
    /// Only the producer calls this, for a sequence number the consumer has released.
    #[inline]
    pub(crate) unsafe fn write(&self, seq: u64, v: T) {
        // SAFETY: per the contract nobody else touches this cell now.
        unsafe { *self.cells[(seq & self.mask) as usize].get() = v }
    }

    /// # Safety
    /// Only the consumer calls this, for a sequence number the producer has published.
    #[inline]
    pub(crate) unsafe fn read(&self, seq: u64) -> T {
        // SAFETY: per the contract the producer finished writing this cell.
        unsafe { *self.cells[(seq & self.mask) as usize].get() }
    }

    /// The cell for `seq`, to fill in place (large entries are not built and copied).
    ///
    /// # Safety
    /// As for [`Slots::write`]; the reference must be gone before the entry is published.
    #[inline]
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn cell_mut(&self, seq: u64) -> &mut T {
        // SAFETY: per the contract nobody else touches this cell now.
        unsafe { &mut *self.cells[(seq & self.mask) as usize].get() }
    }

    /// The entry for `seq`, read in place.
    ///
    /// # Safety
    /// As for [`Slots::read`]; the reference must be gone before the entry is released
    /// back to the producer.
    #[inline]
    pub(crate) unsafe fn get(&self, seq: u64) -> &T {
        // SAFETY: per the contract the producer finished writing this cell and will not
        // touch it until it is released.
        unsafe { &*self.cells[(seq & self.mask) as usize].get() }
    }
}
