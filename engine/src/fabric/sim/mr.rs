//! Registration handles.

use std::fmt;
use std::sync::Arc;

use super::world::World;

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

crate::fabric::mr::soft_memory_region!(SimMr);

impl Drop for SimMr {
    fn drop(&mut self) {
        let key = self.key;
        // Refused only if dropped from inside the world, which handles never are.
        let _ = self.world.with(|w| w.mrs.release(key));
    }
}
