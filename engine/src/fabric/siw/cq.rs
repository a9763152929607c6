//! Completion queues. A queue is a fixed ring inside the device engine; polling one
//! runs the engine first (there is no hardware: this is where siw makes progress), then
//! moves completions out.

use std::collections::VecDeque;
use std::sync::Arc;

use super::device::{DeviceShared, Retire};
use crate::fabric::Completion;
use crate::fabric::CompletionQueue;
use crate::fabric::FabricError;

/// The engine's side of a completion queue.
pub(crate) struct CqRing {
    ring: VecDeque<Completion>,
    depth: u32,
    /// Completions the attached queues could have outstanding at once.
    reserved: u64,
}

impl CqRing {
    fn new(depth: u32) -> CqRing {
        CqRing {
            ring: VecDeque::with_capacity(depth as usize),
            depth,
            reserved: 0,
        }
    }

    /// Room for one more completion? A full ring holds back the queue pairs that would
    /// add to it (they retry at the next poll) rather than overrun.
    #[inline]
    pub(crate) fn has_room(&self) -> bool {
        self.ring.len() < self.depth as usize
    }

    /// Adds a completion; the caller checked [`CqRing::has_room`], so this never grows
    /// the ring.
    #[inline]
    pub(crate) fn push(&mut self, c: Completion) {
        debug_assert!(self.has_room());
        self.ring.push_back(c);
    }

    pub(crate) fn reserve(&mut self, n: u64) -> Result<(), FabricError> {
        let want = self.reserved + n;
        if want > u64::from(self.depth) {
            return Err(FabricError::CqTooSmall {
                needed: want,
                depth: self.depth,
            });
        }
        self.reserved = want;
        Ok(())
    }

    pub(crate) fn unreserve(&mut self, n: u64) {
        self.reserved = self.reserved.saturating_sub(n);
    }

    fn drain(&mut self, out: &mut [Completion]) -> usize {
        let n = out.len().min(self.ring.len());
        for slot in out.iter_mut().take(n) {
            if let Some(c) = self.ring.pop_front() {
                *slot = c;
            }
        }
        n
    }
}

/// The engine's completion queues, by number. Numbers are never reused, so a queue pair
/// outliving its completion queue cannot feed another one.
#[derive(Default)]
pub(crate) struct CqTable {
    rings: Vec<Option<CqRing>>,
}

impl CqTable {
    pub(crate) fn create(&mut self, depth: u32) -> usize {
        self.rings.push(Some(CqRing::new(depth)));
        self.rings.len() - 1
    }

    pub(crate) fn remove(&mut self, id: usize) {
        if let Some(slot) = self.rings.get_mut(id) {
            *slot = None;
        }
    }

    #[inline]
    pub(crate) fn get(&mut self, id: usize) -> Option<&mut CqRing> {
        self.rings.get_mut(id).and_then(Option::as_mut)
    }

    pub(crate) fn drain(&mut self, id: usize, out: &mut [Completion]) -> usize {
        self.get(id).map_or(0, |r| r.drain(out))
    }
}

/// A siw completion queue.
pub struct SiwCq {
    pub(crate) dev: Arc<DeviceShared>,
    pub(crate) id: usize,
    depth: u32,
}

impl std::fmt::Debug for SiwCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SiwCq")
            .field("id", &self.id)
            .field("depth", &self.depth)
            .finish()
    }
}

impl SiwCq {
    pub(crate) fn new(dev: Arc<DeviceShared>, depth: u32) -> Result<SiwCq, FabricError> {
        if depth == 0 || depth > dev.cfg.max_cq_depth {
            return Err(FabricError::InvalidCaps {
                what: "cq depth",
                requested: depth,
                max: dev.cfg.max_cq_depth,
            });
        }
        let id = dev.driver.with(|d| d.cqs.create(depth));
        Ok(SiwCq { dev, id, depth })
    }
}

impl CompletionQueue for SiwCq {
    fn poll(&mut self, out: &mut [Completion]) -> usize {
        let id = self.id;
        self.dev
            .progress_then(true, |d| d.cqs.drain(id, out))
            .unwrap_or(0)
    }

    fn depth(&self) -> u32 {
        self.depth
    }
}

impl Drop for SiwCq {
    fn drop(&mut self) {
        self.dev.retire(Retire::Cq(self.id));
    }
}
