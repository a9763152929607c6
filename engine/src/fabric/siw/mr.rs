//! Protection domains and memory registrations.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rpcrdma_pools::Arena;

use super::device::DeviceShared;
use super::SiwProvider;
use crate::fabric::mr::Access;
use crate::fabric::FabricError;
use crate::fabric::ProtectionDomain;

/// Most distinct arenas one protection domain registers memory in.
const MAX_ARENAS: usize = 1024;

/// The arenas a protection domain's registrations live in. siw places and reads
/// registered memory in-process, at addresses that passed a key check; keeping the
/// arenas here, held by the domain, each of its registrations and the driver's engine
/// of each of its queue pairs, keeps every such address mapped while anything could
/// still use it, and lets the arenas go with the connection that registered them (the
/// engine gives each connection its own domain), not with the device.
#[derive(Debug)]
pub(crate) struct PdMemory {
    arenas: Mutex<Vec<Arc<Arena>>>,
    /// The device's count of arenas held by live domains.
    live: Arc<AtomicUsize>,
}

impl PdMemory {
    pub(crate) fn new(live: Arc<AtomicUsize>) -> PdMemory {
        PdMemory {
            arenas: Mutex::new(Vec::new()),
            live,
        }
    }

    /// Keeps `arena` mapped for as long as this domain's memory is held.
    fn keep(&self, arena: &Arc<Arena>) -> Result<(), FabricError> {
        let mut list = self.arenas.lock().unwrap_or_else(|e| e.into_inner());
        if list.iter().any(|a| Arc::ptr_eq(a, arena)) {
            return Ok(());
        }
        if list.len() >= MAX_ARENAS {
            return Err(FabricError::Exhausted {
                what: "registered arenas of one protection domain",
                max: MAX_ARENAS,
            });
        }
        list.push(arena.clone());
        self.live.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Gives back the whole pages of `[addr, addr + len)`, which must lie in one of this
    /// domain's arenas ([`Arena::release`]: punched out of a shareable arena's memfd,
    /// dropped from a private one, nothing for hugepages). Returns the octets released;
    /// a range outside every arena releases nothing. A cold path: takes the list's lock.
    pub(crate) fn release(&self, addr: u64, len: u64) -> usize {
        let (Ok(p), Ok(n)) = (usize::try_from(addr), usize::try_from(len)) else {
            return 0;
        };
        let list = self.arenas.lock().unwrap_or_else(|e| e.into_inner());
        let ptr = p as *const u8;
        list.iter()
            .find(|a| a.contains(ptr, n))
            .and_then(|a| a.offset_of(ptr).map(|off| a.release(off, n)))
            .and_then(Result::ok)
            .unwrap_or(0)
    }
}

impl Drop for PdMemory {
    fn drop(&mut self) {
        let list = self.arenas.get_mut().unwrap_or_else(|e| e.into_inner());
        self.live.fetch_sub(list.len(), Ordering::Relaxed);
    }
}

/// A siw protection domain.
#[derive(Debug)]
pub struct SiwPd {
    pub(crate) dev: Arc<DeviceShared>,
    pub(crate) id: u32,
    pub(crate) memory: Arc<PdMemory>,
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
    /// Keeps the domain's arenas mapped while the key may be in use.
    _memory: Arc<PdMemory>,
    index: u32,
    key: u32,
    addr: u64,
    len: usize,
    fast: bool,
}

impl ProtectionDomain for SiwPd {
    type P = SiwProvider;

    /// Registers part of any arena (siw reads and writes memory in-process, so arenas
    /// need not be shareable). The arena stays mapped while the domain, any of its
    /// registrations or any of its queue pairs lives.
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
        self.memory.keep(arena)?;
        let addr = arena.base() as u64 + offset as u64;
        let (index, key) = self.dev.keys.register(self.id, access, addr, len as u64)?;
        Ok(SiwMr {
            dev: self.dev.clone(),
            _memory: self.memory.clone(),
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
            _memory: self.memory.clone(),
            index,
            key,
            addr: 0,
            len: max_len,
            fast: true,
        })
    }

    /// Creates a shared receive queue whose receives are checked in this domain (and
    /// whose arenas it keeps mapped while queue pairs may place into them).
    fn create_srq(
        &self,
        recv_cq: &super::SiwCq,
        cfg: crate::fabric::SrqConfig,
    ) -> Result<super::SiwSrq, FabricError> {
        super::SiwSrq::create(self.dev.clone(), self.id, self.memory.clone(), recv_cq, cfg)
    }
}

crate::fabric::mr::soft_memory_region!(SiwMr);

impl Drop for SiwMr {
    fn drop(&mut self) {
        self.dev.keys.release(self.index);
    }
}
