//! Registration handles.

use std::fmt;
use std::sync::Arc;

use super::world::World;
use crate::fabric::mr::next_key;
use crate::fabric::provider::MemoryRegion;

/// A registration or fast-registration slot on the simulated network. The local and
/// remote keys are the same value. Dropping it deregisters: requests still naming its
/// key fail with a protection or remote access error.
pub struct SimMr {
    pub(super) world: Arc<World>,
    pub(super) key: u32,
    pub(super) fast: bool,
    pub(super) addr: u64,
    pub(super) len: usize,
}

impl fmt::Debug for SimMr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimMr")
            .field("key", &format_args!("{:#x}", self.key))
            .field("fast", &self.fast)
            .field("len", &self.len)
            .finish()
    }
}

impl MemoryRegion for SimMr {
    fn lkey(&self) -> u32 {
        self.key
    }

    fn rkey(&self) -> u32 {
        self.key
    }

    fn addr(&self) -> u64 {
        self.addr
    }

    fn len(&self) -> usize {
        self.len
    }

    fn rekey(&mut self) -> u32 {
        if self.fast {
            self.key = next_key(self.key);
        }
        self.key
    }
}

impl Drop for SimMr {
    fn drop(&mut self) {
        let key = self.key;
        // Refused only if dropped from inside the world, which handles never are.
        let _ = self.world.with(|w| w.mrs.release(key));
    }
}
