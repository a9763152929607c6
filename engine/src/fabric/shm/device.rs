//! The shm device: key table, limits, and the bookkeeping that keeps its tables
//! bounded by what is alive (protection-domain ids are reused, and each domain's arenas
//! go with it; see [`super::arenas`]).

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::cm::ShmCm;
use super::cq::ShmCq;
use super::cred::PeerCheck;
use super::pd::{PdShared, ShmPd};
use super::segment::MAX_SGE;
use super::table::MrTable;
use super::ShmProvider;
use crate::fabric::mr::MAX_KEY_INDEX;
use crate::fabric::Device;
use crate::fabric::DeviceCaps;
use crate::fabric::FabricError;
use crate::fabric::{PrivateDataLimits, MAX_PRIVATE_DATA};

/// Limits of a shm device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShmConfig {
    /// Registrations plus fast-registration slots.
    pub max_mr: u32,
    /// Distinct arenas one protection domain can register (at most 256).
    pub max_arenas: u32,
    /// Largest queue depth.
    pub max_qp_wr: u32,
    /// Largest completion-queue depth.
    pub max_cq_depth: u32,
    /// Which local users may connect to this device's listeners (checked with
    /// `SO_PEERCRED` when a connection is accepted).
    pub peer_check: PeerCheck,
    /// Accepted connections still waiting for their connect request; a connection
    /// beyond this is closed at once.
    pub max_pending: u32,
    /// How long an accepted connection may take to send its connect request, and an
    /// outgoing or accepted one to finish the handshake, before it is dropped.
    pub handshake_timeout: Duration,
    /// Longest arena a peer may announce (bytes); a longer one fails its connection.
    pub max_peer_arena_len: u64,
    /// Most bytes of arenas one peer connection may announce in all.
    pub max_peer_bytes: u64,
    /// Where memory keys come from: `None` (the default) draws them under a secret from
    /// the OS, so peers cannot predict them; a seed makes them reproducible (tests,
    /// traces to compare).
    pub key_seed: Option<u64>,
}

impl Default for ShmConfig {
    fn default() -> Self {
        ShmConfig {
            max_mr: 16 * 1024,
            max_arenas: 64,
            max_qp_wr: 4096,
            max_cq_depth: 1 << 20,
            peer_check: PeerCheck::SameUid,
            max_pending: 64,
            handshake_timeout: Duration::from_secs(5),
            max_peer_arena_len: 4 << 30,
            max_peer_bytes: 16 << 30,
            key_seed: None,
        }
    }
}

/// Largest single message or transfer (verbs' usual 2 GiB).
pub(crate) const MAX_MSG_SIZE: u32 = 1 << 31;
const MAX_ARENAS: u32 = 256;

static NEXT_DEVICE: AtomicU64 = AtomicU64::new(1);

/// Protection-domain ids: fresh ones from a counter, released ones reused first.
struct PdIds {
    free: Vec<u16>,
    next: u32,
}

/// State shared by everything created from one device.
pub(crate) struct DeviceShared {
    pub(crate) id: u64,
    pub(crate) cfg: ShmConfig,
    pub(crate) table: MrTable,
    /// Protection-domain ids (setup paths only).
    pd_ids: Mutex<PdIds>,
    next_qp: AtomicU32,
    /// Arenas in the lists of live protection domains.
    live_arenas: AtomicUsize,
    /// Live registrations and fast-registration slots.
    live_mrs: AtomicUsize,
    /// Live protection domains.
    live_pds: AtomicUsize,
}

impl std::fmt::Debug for DeviceShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmDevice")
            .field("id", &self.id)
            .field("live_pds", &self.live_pds.load(Ordering::Relaxed))
            .field("live_arenas", &self.live_arenas.load(Ordering::Relaxed))
            .finish()
    }
}

impl DeviceShared {
    /// A protection-domain id: a released one if any, else a fresh one.
    pub(crate) fn alloc_pd_id(&self) -> Result<u16, FabricError> {
        let mut ids = self.pd_ids.lock().unwrap_or_else(|e| e.into_inner());
        let id = match ids.free.pop() {
            Some(id) => id,
            None => {
                let id = u16::try_from(ids.next).map_err(|_| FabricError::Exhausted {
                    what: "protection domains",
                    max: usize::from(u16::MAX),
                })?;
                ids.next += 1;
                id
            }
        };
        self.live_pds.fetch_add(1, Ordering::Relaxed);
        Ok(id)
    }

    /// Gives back the id of a protection domain that is gone with everything that used
    /// it (its registrations hold it, so no key of the old domain remains), and
    /// forgets its `arenas`.
    pub(crate) fn release_pd(&self, id: u16, arenas: u32) {
        self.live_arenas
            .fetch_sub(arenas as usize, Ordering::Relaxed);
        self.live_pds.fetch_sub(1, Ordering::Relaxed);
        let mut ids = self.pd_ids.lock().unwrap_or_else(|e| e.into_inner());
        ids.free.push(id);
    }

    /// A protection domain added an arena to its list.
    pub(crate) fn arena_added(&self) {
        self.live_arenas.fetch_add(1, Ordering::Relaxed);
    }

    /// A registration (or fast-registration slot) was made (`true`) or dropped.
    pub(crate) fn count_mr(&self, made: bool) {
        if made {
            self.live_mrs.fetch_add(1, Ordering::Relaxed);
        } else {
            self.live_mrs.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// A fresh queue-pair number.
    pub(crate) fn alloc_qp_num(&self) -> u32 {
        self.next_qp.fetch_add(1, Ordering::Relaxed)
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
        if cfg.max_pending == 0 {
            return Err(FabricError::InvalidCaps {
                what: "max_pending",
                requested: 0,
                max: u32::MAX,
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

    /// Arenas held in the lists of live protection domains (each is mapped by the
    /// peers of its domain's connections). Returns to its earlier value when a
    /// connection's domain, registrations and queue pairs are gone.
    pub fn live_arenas(&self) -> usize {
        self.shared.live_arenas.load(Ordering::Relaxed)
    }

    /// Live registrations plus fast-registration slots (key-table occupancy).
    pub fn live_registrations(&self) -> usize {
        self.shared.live_mrs.load(Ordering::Relaxed)
    }

    /// Live protection domains (their ids are reused once they are gone).
    pub fn live_pds(&self) -> usize {
        self.shared.live_pds.load(Ordering::Relaxed)
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
            table: MrTable::new(cfg.max_mr, cfg.key_seed),
            pd_ids: Mutex::new(PdIds {
                free: Vec::new(),
                next: 1,
            }),
            next_qp: AtomicU32::new(1),
            live_arenas: AtomicUsize::new(0),
            live_mrs: AtomicUsize::new(0),
            live_pds: AtomicUsize::new(0),
        }
    }
}

impl Device for ShmDevice {
    type P = ShmProvider;

    fn caps(&self) -> DeviceCaps {
        DeviceCaps {
            // The NIC lives at the target: a peer's requests execute in our CQ poll.
            places_in_poll: true,
            // A Read is a copy by the target's poller: no round trip.
            rdma_round_trip: false,
            // The peer process maps the arenas registered for its connection.
            peer_maps_registrations: true,
            ..DeviceCaps::strict_software(
                self.shared.cfg.max_qp_wr,
                MAX_SGE as u32,
                self.shared.table.capacity() as u32,
                self.shared.cfg.max_cq_depth,
                MAX_MSG_SIZE,
                PrivateDataLimits::uniform(MAX_PRIVATE_DATA),
            )
        }
    }

    fn alloc_pd(&self) -> Result<ShmPd, FabricError> {
        let id = self.shared.alloc_pd_id()?;
        Ok(ShmPd {
            dev: self.shared.clone(),
            id,
            shared: PdShared::new(self.shared.clone(), id),
        })
    }

    fn create_cq(&self, depth: u32) -> Result<ShmCq, FabricError> {
        ShmCq::new(self.shared.clone(), depth)
    }

    fn create_cm(&self) -> Result<ShmCm, FabricError> {
        Ok(ShmCm::new(self.shared.clone()))
    }
}
