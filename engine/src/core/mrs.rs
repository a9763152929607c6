//! Fast-registration slots of a requester: `P::Mr` handles allocated once at setup,
//! re-keyed for every chunk they cover, so registering caller memory per RPC is a
//! FastReg work request and never a system call.

use super::fixed::IndexStack;
use crate::fabric::MemoryRegion;

/// The requester's fast-registration slots.
pub(crate) struct MrTable<M> {
    mrs: Vec<M>,
    free: IndexStack,
    max_len: usize,
}

impl<M: MemoryRegion> MrTable<M> {
    /// Takes ownership of `mrs` (fast-registration slots of at least `max_len` bytes).
    pub(crate) fn new(mrs: Vec<M>) -> Self {
        let max_len = mrs.iter().map(|m| m.len()).min().unwrap_or(0);
        let n = mrs.len() as u32;
        MrTable {
            mrs,
            free: IndexStack::full(n),
            max_len,
        }
    }

    /// Largest region one slot covers.
    pub(crate) fn max_len(&self) -> usize {
        self.max_len
    }

    /// Free slots.
    pub(crate) fn available(&self) -> usize {
        if self.mrs.is_empty() {
            0
        } else {
            self.free.len()
        }
    }

    /// Takes a free slot and moves it to a fresh key; returns the slot and the key.
    pub(crate) fn take(&mut self) -> Option<(u32, u32)> {
        let i = self.free.pop()?;
        self.mrs.get_mut(i as usize).map(|mr| (i, mr.rekey()))
    }

    /// Returns a slot whose key is invalid (locally or remotely invalidated).
    pub(crate) fn give(&mut self, i: u32) {
        let _ = self.free.push(i);
    }

    /// Deregisters every slot (drops the handles): after this no key the table ever
    /// handed out grants access to anything. Used when a connection ends, when the
    /// slots' keys can no longer be invalidated with work requests.
    pub(crate) fn destroy(&mut self) {
        self.mrs.clear();
        self.free = IndexStack::full(0);
    }
}
