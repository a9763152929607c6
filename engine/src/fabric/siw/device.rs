//! The siw device: the key table, the arenas registered memory lives in, and the
//! progress engine every object of the device drives.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_queue::SegQueue;

use super::claim::Claim;
use super::cm::SiwCm;
use super::config::SiwConfig;
use super::cq::SiwCq;
use super::driver::Driver;
use super::keys::KeyTable;
use super::mr::SiwPd;
use super::qp::MAX_MSG_SIZE;
use super::{SiwProvider, MAX_SGE};
use crate::fabric::mr::MAX_KEY_INDEX;
use crate::fabric::ConnId;
use crate::fabric::Device;
use crate::fabric::DeviceCaps;
use crate::fabric::FabricError;
use crate::iwarp::mpa::MAX_IRD_ORD;

static NEXT_DEVICE: AtomicU64 = AtomicU64::new(1);

/// An object whose handle was dropped; the engine forgets it at its next progress (a
/// handle cannot wait for the claim in `drop`).
#[derive(Debug)]
pub(crate) enum Retire {
    /// A queue pair: its connection is closed and its queues' reservations returned.
    Qp(ConnId),
    /// A completion queue.
    Cq(usize),
    /// A connection manager: its listeners close, its pending requests are rejected.
    Cm(usize),
    /// A connect request dropped without an answer: it is rejected.
    Request(usize, ConnId),
    /// An idle connection: its receive buffer's pages go back (if it holds nothing).
    Trim(ConnId),
    /// Completion-queue room reserved by a dropped shared receive queue.
    Reservation {
        /// The completion queue.
        cq: usize,
        /// Completions reserved.
        n: u64,
    },
}

/// State shared by everything created from one device.
pub(crate) struct DeviceShared {
    pub(crate) id: u64,
    pub(crate) cfg: SiwConfig,
    pub(crate) keys: KeyTable,
    /// Arenas held by live protection domains (each domain keeps its own list; see
    /// [`PdMemory`](super::mr::PdMemory)).
    pub(crate) live_arenas: Arc<AtomicUsize>,
    next_pd: AtomicU32,
    next_qp: AtomicU32,
    pub(crate) driver: Claim<Driver>,
    retired: SegQueue<Retire>,
    /// Objects pushed onto `retired` and not yet taken: every poll looks, and one load
    /// of this is cheaper than popping an empty `SegQueue` (issue 14).
    retired_count: AtomicUsize,
}

impl std::fmt::Debug for DeviceShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SiwDevice")
            .field("id", &self.id)
            .field("cfg", &self.cfg)
            .finish()
    }
}

impl DeviceShared {
    pub(crate) fn alloc_pd_id(&self) -> u32 {
        self.next_pd.fetch_add(1, Ordering::Relaxed)
    }

    pub(crate) fn alloc_qp_num(&self) -> u32 {
        self.next_qp.fetch_add(1, Ordering::Relaxed)
    }

    /// Hands a dropped object to the engine.
    pub(crate) fn retire(&self, r: Retire) {
        self.retired.push(r);
        // After the push: whoever sees the count sees the object (a poll that misses
        // a count not yet raised takes the object at its next look).
        self.retired_count.fetch_add(1, Ordering::Release);
    }

    /// Takes the next dropped object, if any.
    #[inline]
    pub(crate) fn next_retired(&self) -> Option<Retire> {
        if self.retired_count.load(Ordering::Acquire) == 0 {
            return None;
        }
        let r = self.retired.pop()?;
        self.retired_count.fetch_sub(1, Ordering::Relaxed);
        Some(r)
    }

    /// Runs the engine once (`data`: also the running FPDU streams), then `f` on it;
    /// `None` when another thread is running it (it makes the same progress).
    #[inline]
    pub(crate) fn progress_then<R>(
        &self,
        data: bool,
        f: impl FnOnce(&mut Driver) -> R,
    ) -> Option<R> {
        self.driver.try_with(|d| {
            d.progress(self, data);
            f(d)
        })
    }
}

/// An opened siw device. Cheap to clone; every clone is the same device. Meant to be
/// used by one poller thread (see the module documentation).
#[derive(Debug, Clone)]
pub struct SiwDevice {
    pub(crate) shared: Arc<DeviceShared>,
}

impl SiwDevice {
    /// Opens a device with the default settings.
    pub fn new() -> Result<SiwDevice, FabricError> {
        SiwDevice::with_config(SiwConfig::default())
    }

    /// Opens a device with `cfg`.
    pub fn with_config(cfg: SiwConfig) -> Result<SiwDevice, FabricError> {
        // Resolve the CRC32c path now: its first use reads `RPCRDMA_CRC32C` (an
        // allocation), which must not fall in a connection's first FPDU.
        crate::iwarp::crc32c::path();
        let checks: [(&'static str, u32, u32); 5] = [
            ("max_mr", cfg.max_mr, MAX_KEY_INDEX + 1),
            ("max_qp_wr", cfg.max_qp_wr, 1 << 20),
            ("max_cq_depth", cfg.max_cq_depth, 1 << 24),
            ("ird", u32::from(cfg.ird), u32::from(MAX_IRD_ORD)),
            ("ord", u32::from(cfg.ord), u32::from(MAX_IRD_ORD)),
        ];
        for (what, requested, max) in checks {
            if requested == 0 || requested > max {
                return Err(FabricError::InvalidCaps {
                    what,
                    requested,
                    max,
                });
            }
        }
        if cfg.rx_buffer < 1024 {
            return Err(FabricError::InvalidCaps {
                what: "rx_buffer",
                requested: cfg.rx_buffer as u32,
                max: u32::MAX,
            });
        }
        let poll = mio::Poll::new().map_err(|err| FabricError::Os {
            op: "create the event poll",
            err,
        })?;
        Ok(SiwDevice {
            shared: Arc::new_cyclic(|weak| DeviceShared {
                id: NEXT_DEVICE.fetch_add(1, Ordering::Relaxed),
                keys: KeyTable::with_seed(cfg.max_mr, cfg.key_seed),
                driver: Claim::new(Driver::new(poll, &cfg, weak.clone())),
                cfg,
                live_arenas: Arc::new(AtomicUsize::new(0)),
                next_pd: AtomicU32::new(1),
                next_qp: AtomicU32::new(1),
                retired: SegQueue::new(),
                retired_count: AtomicUsize::new(0),
            }),
        })
    }

    /// The settings the device was opened with.
    pub fn config(&self) -> &SiwConfig {
        &self.shared.cfg
    }

    /// Arenas held by the device's live protection domains (registrations and queue
    /// pairs keep their domain's arenas): bounded by live connections, not by history.
    pub fn live_arenas(&self) -> usize {
        self.shared.live_arenas.load(Ordering::Relaxed)
    }

    /// Registrations and fast-registration slots in use.
    pub fn live_registrations(&self) -> usize {
        self.shared.keys.in_use()
    }
}

impl Device for SiwDevice {
    type P = SiwProvider;

    fn caps(&self) -> DeviceCaps {
        // Strict like the other software providers: the confirmation Read brings the
        // peer's verdict back to the requester, so Sends do not complete on transmit.
        DeviceCaps {
            // iWARP (RFC 5041 §7): an untagged message without a buffer is a DDP error.
            rnr_retry: false,
            ..DeviceCaps::strict_software(
                self.shared.cfg.max_qp_wr,
                MAX_SGE as u32,
                self.shared.keys.capacity() as u32,
                self.shared.cfg.max_cq_depth,
                MAX_MSG_SIZE,
                self.shared.cfg.private_data_limits(),
            )
        }
    }

    fn alloc_pd(&self) -> Result<SiwPd, FabricError> {
        Ok(SiwPd {
            dev: self.shared.clone(),
            id: self.shared.alloc_pd_id(),
            memory: Arc::new(super::mr::PdMemory::new(self.shared.live_arenas.clone())),
        })
    }

    fn create_cq(&self, depth: u32) -> Result<SiwCq, FabricError> {
        SiwCq::new(self.shared.clone(), depth)
    }

    fn create_cm(&self) -> Result<SiwCm, FabricError> {
        SiwCm::new(self.shared.clone())
    }
}
