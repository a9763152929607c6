//! Protection domains and memory registrations of the shm provider.

use std::sync::Arc;

use rpcrdma_pools::Arena;

use super::device::DeviceShared;
use super::table::Mapping;
use super::ShmProvider;
use crate::fabric::error::FabricError;
use crate::fabric::mr::Access;
use crate::fabric::provider::ProtectionDomain;

/// A shm protection domain.
#[derive(Debug)]
pub struct ShmPd {
    pub(crate) dev: Arc<DeviceShared>,
    pub(crate) id: u16,
}

impl ShmPd {
    /// The domain's id (registrations and queue pairs must agree on it).
    pub fn id(&self) -> u16 {
        self.id
    }
}

/// A shm registration: a fixed range of an arena, or a fast-registration slot.
#[derive(Debug)]
pub struct ShmMr {
    dev: Arc<DeviceShared>,
    index: u32,
    key: u32,
    addr: u64,
    len: usize,
    fast: bool,
}

impl ProtectionDomain for ShmPd {
    type P = ShmProvider;

    /// Registers part of a shareable arena. Arenas without a file descriptor are refused
    /// with [`FabricError::NotShareable`]: the peer maps registered memory, so on shm only
    /// shareable arenas can be registered (a verbs provider accepts any memory).
    fn reg_mr(
        &self,
        arena: &Arc<Arena>,
        offset: usize,
        len: usize,
        access: Access,
    ) -> Result<ShmMr, FabricError> {
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
        let arena_idx = self.dev.arena_index(arena)?;
        let addr = arena.base() as u64 + offset as u64;
        let (index, key) = self.dev.table.register(
            self.id,
            access,
            &Mapping {
                arena: arena_idx,
                offset: offset as u64,
                iova: addr,
                len: len as u64,
            },
        )?;
        Ok(ShmMr {
            dev: self.dev.clone(),
            index,
            key,
            addr,
            len,
            fast: false,
        })
    }

    fn alloc_fast_mr(&self, max_len: usize) -> Result<ShmMr, FabricError> {
        if max_len == 0 {
            return Err(FabricError::BadLength(0));
        }
        let (index, key) = self.dev.table.alloc_fast(self.id, max_len as u64)?;
        Ok(ShmMr {
            dev: self.dev.clone(),
            index,
            key,
            addr: 0,
            len: max_len,
            fast: true,
        })
    }
}

crate::fabric::mr::soft_memory_region!(ShmMr);

impl Drop for ShmMr {
    fn drop(&mut self) {
        self.dev.table.release(self.index);
    }
}
