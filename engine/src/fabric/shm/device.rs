//! The shm device: key table, the arenas it has registered, and the announcement
//! channels that tell connected peers about arenas registered after they connected.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use rpcrdma_pools::Arena;

use super::cm::ShmCm;
use super::cq::ShmCq;
use super::pd::ShmPd;
use super::segment::{Segment, MAX_SGE};
use super::sock;
use super::table::{MrTable, Place};
use super::ShmProvider;
use crate::fabric::cm::{PrivateDataLimits, MAX_PRIVATE_DATA};
use crate::fabric::error::FabricError;
use crate::fabric::mr::MAX_KEY_INDEX;
use crate::fabric::provider::Device;
use crate::fabric::types::DeviceCaps;

/// Limits of a shm device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShmConfig {
    /// Registrations plus fast-registration slots.
    pub max_mr: u32,
    /// Distinct arenas that can be registered (at most 256).
    pub max_arenas: u32,
    /// Largest queue depth.
    pub max_qp_wr: u32,
    /// Largest completion-queue depth.
    pub max_cq_depth: u32,
}

impl Default for ShmConfig {
    fn default() -> Self {
        ShmConfig {
            max_mr: 16 * 1024,
            max_arenas: 64,
            max_qp_wr: 4096,
            max_cq_depth: 1 << 20,
        }
    }
}

/// Largest single message or transfer (verbs' usual 2 GiB).
pub(crate) const MAX_MSG_SIZE: u32 = 1 << 31;
const MAX_ARENAS: u32 = 256;

static NEXT_DEVICE: AtomicU64 = AtomicU64::new(1);

/// A channel that tells one connected peer about this device's arenas: the sending end
/// of a socket pair whose other end the peer holds, and the counter in our connection
/// segment the peer checks before it reads from its end.
pub(crate) struct Announcer {
    pub(crate) tx: OwnedFd,
    pub(crate) seg: Segment,
}

struct Setup {
    announcers: Vec<Weak<Announcer>>,
    next_pd: u32,
}

/// State shared by everything created from one device.
pub(crate) struct DeviceShared {
    pub(crate) id: u64,
    pub(crate) cfg: ShmConfig,
    pub(crate) table: MrTable,
    arenas: Box<[OnceLock<Arc<Arena>>]>,
    arena_count: AtomicU32,
    /// Registration of arenas and announcement channels (setup paths only).
    setup: Mutex<Setup>,
    next_qp: AtomicU32,
}

impl std::fmt::Debug for DeviceShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmDevice")
            .field("id", &self.id)
            .field("arenas", &self.arena_count.load(Ordering::Relaxed))
            .finish()
    }
}

/// Wire form of an arena announcement: index, reserved, length.
pub(crate) const ANNOUNCE_LEN: usize = 16;

fn announce(a: &Announcer, index: u32, arena: &Arena) -> Result<(), FabricError> {
    let fd = arena.fd().ok_or(FabricError::NotShareable)?;
    let mut msg = [0u8; ANNOUNCE_LEN];
    msg[..4].copy_from_slice(&index.to_le_bytes());
    msg[8..].copy_from_slice(&(arena.len() as u64).to_le_bytes());
    sock::send(&a.tx, &msg, &[fd]).map_err(|err| FabricError::Os {
        op: "announce arena",
        err,
    })?;
    // The peer reads its socket only for arenas below this count, so the descriptor
    // is already queued when it looks.
    a.seg.arenas_announced().store(index + 1, Ordering::Release);
    Ok(())
}

impl DeviceShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Setup> {
        self.setup.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Index of `arena` in the device's arena list, adding (and announcing) it first if
    /// needed. Only shareable arenas qualify: the peer must be able to map them.
    pub(crate) fn arena_index(&self, arena: &Arc<Arena>) -> Result<u32, FabricError> {
        if arena.fd().is_none() {
            return Err(FabricError::NotShareable);
        }
        let mut setup = self.lock();
        let count = self.arena_count.load(Ordering::Relaxed);
        for i in 0..count {
            if let Some(a) = self.arenas[i as usize].get() {
                if Arc::ptr_eq(a, arena) {
                    return Ok(i);
                }
            }
        }
        let slot = self
            .arenas
            .get(count as usize)
            .ok_or(FabricError::Exhausted {
                what: "registered arenas",
                max: self.arenas.len(),
            })?;
        // The slot is past `arena_count`, so nobody has set or read it yet.
        let _ = slot.set(arena.clone());
        self.arena_count.store(count + 1, Ordering::Release);
        setup.announcers.retain(|w| w.strong_count() > 0);
        for a in setup.announcers.iter().filter_map(Weak::upgrade) {
            // A peer that cannot be told (gone, or its socket full) fails its queue pair
            // when it meets the arena; other connections are unaffected.
            let _ = announce(&a, count, arena);
        }
        Ok(count)
    }

    /// Registers a new connection's announcement channel and tells it about every
    /// arena registered so far.
    pub(crate) fn add_announcer(&self, a: &Arc<Announcer>) -> Result<(), FabricError> {
        let mut setup = self.lock();
        let count = self.arena_count.load(Ordering::Relaxed);
        for i in 0..count {
            if let Some(arena) = self.arenas[i as usize].get() {
                announce(a, i, arena)?;
            }
        }
        setup.announcers.push(Arc::downgrade(a));
        Ok(())
    }

    /// A fresh protection-domain id.
    pub(crate) fn alloc_pd_id(&self) -> Result<u16, FabricError> {
        let mut setup = self.lock();
        let id = u16::try_from(setup.next_pd).map_err(|_| FabricError::Exhausted {
            what: "protection domains",
            max: usize::from(u16::MAX),
        })?;
        setup.next_pd += 1;
        Ok(id)
    }

    /// A fresh queue-pair number.
    pub(crate) fn alloc_qp_num(&self) -> u32 {
        self.next_qp.fetch_add(1, Ordering::Relaxed)
    }

    /// Local address of `len` bytes at `place`, checked against the arena's bounds.
    #[inline]
    pub(crate) fn local_ptr(&self, place: Place, len: u64) -> Option<*mut u8> {
        let arena = self.arenas.get(place.arena as usize)?.get()?;
        let end = place.offset.checked_add(len)?;
        if end > arena.len() as u64 {
            return None;
        }
        Some(arena.base().wrapping_add(place.offset as usize))
    }
}

/// An opened shm device. Cheap to clone; every clone is the same device.
#[derive(Debug, Clone)]
pub struct ShmDevice {
    pub(crate) shared: Arc<DeviceShared>,
}

impl ShmDevice {
    /// Opens a device with the default limits.
    pub fn new() -> ShmDevice {
        // The defaults are within every limit `with_config` checks.
        ShmDevice {
            shared: Arc::new(DeviceShared::build(ShmConfig::default())),
        }
    }

    /// Opens a device with `cfg`'s limits.
    pub fn with_config(cfg: ShmConfig) -> Result<ShmDevice, FabricError> {
        if cfg.max_mr == 0 || cfg.max_mr > MAX_KEY_INDEX + 1 {
            return Err(FabricError::InvalidCaps {
                what: "max_mr",
                requested: cfg.max_mr,
                max: MAX_KEY_INDEX + 1,
            });
        }
        if cfg.max_arenas == 0 || cfg.max_arenas > MAX_ARENAS {
            return Err(FabricError::InvalidCaps {
                what: "max_arenas",
                requested: cfg.max_arenas,
                max: MAX_ARENAS,
            });
        }
        let slots = super::segment::MAX_SLOTS;
        if cfg.max_qp_wr == 0 || cfg.max_qp_wr > slots {
            return Err(FabricError::InvalidCaps {
                what: "max_qp_wr",
                requested: cfg.max_qp_wr,
                max: slots,
            });
        }
        if cfg.max_cq_depth == 0 {
            return Err(FabricError::InvalidCaps {
                what: "max_cq_depth",
                requested: 0,
                max: u32::MAX,
            });
        }
        Ok(ShmDevice {
            shared: Arc::new(DeviceShared::build(cfg)),
        })
    }

    /// The limits the device was opened with.
    pub fn config(&self) -> ShmConfig {
        self.shared.cfg
    }
}

impl Default for ShmDevice {
    fn default() -> Self {
        ShmDevice::new()
    }
}

impl DeviceShared {
    fn build(cfg: ShmConfig) -> DeviceShared {
        DeviceShared {
            id: NEXT_DEVICE.fetch_add(1, Ordering::Relaxed),
            cfg,
            table: MrTable::new(cfg.max_mr),
            arenas: (0..cfg.max_arenas).map(|_| OnceLock::new()).collect(),
            arena_count: AtomicU32::new(0),
            setup: Mutex::new(Setup {
                announcers: Vec::new(),
                next_pd: 1,
            }),
            next_qp: AtomicU32::new(1),
        }
    }
}

impl Device for ShmDevice {
    type P = ShmProvider;

    fn caps(&self) -> DeviceCaps {
        DeviceCaps::strict_software(
            self.shared.cfg.max_qp_wr,
            MAX_SGE as u32,
            self.shared.table.capacity() as u32,
            self.shared.cfg.max_cq_depth,
            MAX_MSG_SIZE,
            PrivateDataLimits::uniform(MAX_PRIVATE_DATA),
        )
    }

    fn alloc_pd(&self) -> Result<ShmPd, FabricError> {
        Ok(ShmPd {
            dev: self.shared.clone(),
            id: self.shared.alloc_pd_id()?,
        })
    }

    fn create_cq(&self, depth: u32) -> Result<ShmCq, FabricError> {
        ShmCq::new(self.shared.clone(), depth)
    }

    fn create_cm(&self) -> Result<ShmCm, FabricError> {
        Ok(ShmCm::new(self.shared.clone()))
    }
}
