//! Completion-queue handles: polling is where virtual time passes.

use std::fmt;
use std::sync::Arc;

use super::slab::Idx;
use super::world::{Scope, World};
use crate::fabric::Completion;
use crate::fabric::CompletionQueue;

/// A completion queue of the simulated network.
///
/// Every `poll` advances the network's virtual clock by one tick and executes whatever
/// became due on this queue's device (requests targeting it and its own completions),
/// then returns this queue's completions, so an engine that simply polls makes the
/// simulation progress.
pub struct SimCq {
    pub(super) world: Arc<World>,
    pub(super) idx: Idx,
    pub(super) depth: u32,
    pub(super) device: u32,
}

impl fmt::Debug for SimCq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimCq")
            .field("slot", &self.idx.slot)
            .field("depth", &self.depth)
            .finish()
    }
}

impl CompletionQueue for SimCq {
    fn poll(&mut self, out: &mut [Completion]) -> usize {
        let (idx, device) = (self.idx, self.device);
        self.world
            .with(|w| {
                w.tick(Scope::Cq(device));
                w.poll_cq(idx, out)
            })
            .unwrap_or(0)
    }

    fn depth(&self) -> u32 {
        self.depth
    }
}

impl Drop for SimCq {
    fn drop(&mut self) {
        let idx = self.idx;
        let _ = self.world.with(|w| w.destroy_cq(idx));
    }
}
