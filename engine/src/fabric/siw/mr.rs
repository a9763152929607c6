//! Protection domains and memory registrations.

use std::sync::Arc;

use rpcrdma_pools::Arena;

use super::device::DeviceShared;
use super::SiwProvider;
use crate::fabric::error::FabricError;
use crate::fabric::mr::Access;
use crate::fabric::provider::ProtectionDomain;

/// A siw protection domain.
#[derive(Debug)]
pub struct SiwPd {
    pub(crate) dev: Arc<DeviceShared>,
    pub(crate) id: u32,
}

impl SiwPd {
    /// The domain's number (registrations and queue pairs must agree on it).
    pub fn id(&self) -> u32 {
        self.id
    }
}

/// A siw registration: a fixed range of an arena, or a fast-registration slot. The
/// local and remote keys are the same value, the STag on the wire.
#[derive(Debug)]
pub struct SiwMr {
    dev: Arc<DeviceShared>,
    index: u32,
    key: u32,
    addr: u64,
    len: usize,
    fast: bool,
}

impl ProtectionDomain for SiwPd {
    type P = SiwProvider;

    /// Registers part of any arena (siw reads and writes memory in-process, so arenas
    /// need not be shareable). The device keeps the arena mapped for its own life.
    fn reg_mr(
        &self,
        arena: &Arc<Arena>,
        offset: usize,
        len: usize,
        access: Access,
    ) -> Result<SiwMr, FabricError> {
        if !access.is_valid() {
            return Err(FabricError::InvalidAccess(access));
        }
        if len == 0 {
            return Err(FabricError::BadLength(0));
        }
        if offset.checked_add(len).is_none_or(|end| end > arena.len()) {
            return Err(FabricError::OutOfRange {
                offset,
                len,
                arena_len: arena.len(),
            });
        }
        self.dev.keep_arena(arena)?;
        let addr = arena.base() as u64 + offset as u64;
        let (index, key) = self.dev.keys.register(self.id, access, addr, len as u64)?;
        Ok(SiwMr {
            dev: self.dev.clone(),
            index,
            key,
            addr,
            len,
            fast: false,
        })
    }

    fn alloc_fast_mr(&self, max_len: usize) -> Result<SiwMr, FabricError> {
        if max_len == 0 {
            return Err(FabricError::BadLength(0));
        }
        let (index, key) = self.dev.keys.alloc_fast(self.id, max_len as u64)?;
        Ok(SiwMr {
            dev: self.dev.clone(),
            index,
            key,
            addr: 0,
            len: max_len,
            fast: true,
        })
    }
}

crate::fabric::mr::soft_memory_region!(SiwMr);

impl Drop for SiwMr {
    fn drop(&mut self) {
        self.dev.keys.release(self.index);
    }
}
