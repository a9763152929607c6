//! Protection domains and memory registrations of the shm provider.

use std::sync::Arc;

use rpcrdma_pools::Arena;

use super::arenas::PdArenas;
use super::device::DeviceShared;
use super::table::Mapping;
use super::ShmProvider;
use crate::fabric::mr::Access;
use crate::fabric::FabricError;
use crate::fabric::ProtectionDomain;

/// What outlives a [`ShmPd`] handle while its registrations or queue pairs live: its
/// id and its arenas. Dropping the last reference releases both.
pub(crate) struct PdShared {
    pub(crate) dev: Arc<DeviceShared>,
    pub(crate) id: u16,
    pub(crate) arenas: PdArenas,
}

impl PdShared {
    pub(crate) fn new(dev: Arc<DeviceShared>, id: u16) -> Arc<PdShared> {
        Arc::new(PdShared {
            arenas: PdArenas::new(dev.cfg.max_arenas),
            dev,
            id,
        })
    }
}

impl std::fmt::Debug for PdShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PdShared").field("id", &self.id).finish()
    }
}

impl Drop for PdShared {
    fn drop(&mut self) {
        self.dev.release_pd(self.id, self.arenas.count());
    }
}

/// A shm protection domain.
pub struct ShmPd {
    pub(crate) dev: Arc<DeviceShared>,
    pub(crate) id: u16,
    pub(crate) shared: Arc<PdShared>,
}

impl std::fmt::Debug for ShmPd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmPd")
            .field("id", &self.id)
            .field("arenas", &self.shared.arenas.count())
            .finish()
    }
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
    /// Keeps the domain (its id and the arena list the key's place indexes) alive.
    pd: Arc<PdShared>,
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
        let dev = &self.dev;
        let arena_idx = self.shared.arenas.index_of(arena, || dev.arena_added())?;
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
        self.dev.count_mr(true);
        Ok(ShmMr {
            pd: self.shared.clone(),
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
        self.dev.count_mr(true);
        Ok(ShmMr {
            pd: self.shared.clone(),
            index,
            key,
            addr: 0,
            len: max_len,
            fast: true,
        })
    }

    /// Creates a shared receive queue whose receives are checked in this domain.
    fn create_srq(
        &self,
        recv_cq: &super::ShmCq,
        cfg: crate::fabric::SrqConfig,
    ) -> Result<super::ShmSrq, FabricError> {
        super::ShmSrq::create(
            self.dev.clone(),
            self.shared.clone(),
            recv_cq.shared.clone(),
            cfg,
        )
    }
}

crate::fabric::mr::soft_memory_region!(ShmMr);

impl Drop for ShmMr {
    fn drop(&mut self) {
        self.pd.dev.table.release(self.index);
        self.pd.dev.count_mr(false);
    }
}
