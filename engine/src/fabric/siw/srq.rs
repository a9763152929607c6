//! Shared receive queues of siw. The handle posts (one producer); the device engine
//! takes, under the device claim, so one consumer at a time whichever queue pair's
//! inbound Send takes the receive. A taken receive is copied into the taking queue
//! pair's own receive ring (which its handle never posts to while it is attached), so
//! its completion is reported in that queue pair's order and its slot in the shared
//! queue is free at once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::device::{DeviceShared, Retire};
use super::mr::PdMemory;
use super::qp::RqWqe;
use super::MAX_SGE;
use crate::fabric::slots::Slots;
use crate::fabric::{FabricError, PostError, RecvWr, SharedReceiveQueue, SrqConfig};

/// What the handle and the engine share.
pub(crate) struct SrqShared {
    pub(crate) dev: Arc<DeviceShared>,
    /// The domain the receives' keys are checked in.
    pub(crate) pd: u32,
    /// That domain's arenas, kept mapped while a queue pair may place into them.
    _memory: Arc<PdMemory>,
    /// The receive completion queue of every attached queue pair.
    pub(crate) cq: usize,
    pub(crate) cfg: SrqConfig,
    rq: Slots<RqWqe>,
    posted: AtomicU64,
    taken: AtomicU64,
}

// SAFETY: slot cells are written only by the handle (`&mut self`) below `taken + depth`
// and read only by the engine (under the device claim) below `posted`; the counters
// publish with release and read with acquire. Everything else is immutable or Sync.
unsafe impl Send for SrqShared {}
// SAFETY: as above.
unsafe impl Sync for SrqShared {}

impl std::fmt::Debug for SrqShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SiwSrq")
            .field("pd", &self.pd)
            .field("depth", &self.cfg.max_wr)
            .finish()
    }
}

impl SrqShared {
    /// Takes the oldest posted receive. Only the device engine calls this, under the
    /// device claim.
    pub(crate) fn take(&self) -> Option<RqWqe> {
        let posted = self.posted.load(Ordering::Acquire);
        let taken = self.taken.load(Ordering::Relaxed);
        if taken >= posted {
            return None;
        }
        // SAFETY: published (below `posted`), not yet released (at `taken`); the engine
        // under the claim is the only reader.
        let w = unsafe { self.rq.read(taken) };
        self.taken.store(taken + 1, Ordering::Release);
        Some(w)
    }
}

/// A siw shared receive queue ([`crate::fabric::ProtectionDomain::create_srq`]).
pub struct SiwSrq {
    pub(crate) shared: Arc<SrqShared>,
}

impl std::fmt::Debug for SiwSrq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.shared.fmt(f)
    }
}

impl SiwSrq {
    pub(crate) fn create(
        dev: Arc<DeviceShared>,
        pd: u32,
        memory: Arc<PdMemory>,
        cq: &super::SiwCq,
        cfg: SrqConfig,
    ) -> Result<SiwSrq, FabricError> {
        if !Arc::ptr_eq(&cq.dev, &dev) {
            return Err(FabricError::WrongDevice);
        }
        let max_wr = crate::fabric::SOFTWARE_MAX_SRQ_WR;
        if cfg.max_wr == 0 || cfg.max_wr > max_wr {
            return Err(FabricError::InvalidCaps {
                what: "srq max_wr",
                requested: cfg.max_wr,
                max: max_wr,
            });
        }
        if cfg.max_sge > MAX_SGE as u32 {
            return Err(FabricError::InvalidCaps {
                what: "srq max_sge",
                requested: cfg.max_sge,
                max: MAX_SGE as u32,
            });
        }
        let id = cq.id;
        dev.driver.with(|d| {
            d.cqs
                .get(id)
                .ok_or(FabricError::WrongDevice)?
                .reserve(u64::from(cfg.max_wr))
        })?;
        Ok(SiwSrq {
            shared: Arc::new(SrqShared {
                dev,
                pd,
                _memory: memory,
                cq: id,
                cfg,
                rq: Slots::new(cfg.max_wr, RqWqe::EMPTY),
                posted: AtomicU64::new(0),
                taken: AtomicU64::new(0),
            }),
        })
    }
}

impl SharedReceiveQueue for SiwSrq {
    fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let sh = &*self.shared;
        // SAFETY: `&mut self` makes this handle the ring's only producer.
        unsafe {
            super::qp::post_recv_ring(
                &sh.rq,
                &sh.posted,
                &sh.taken,
                sh.cfg.max_wr,
                sh.cfg.max_sge,
                wrs,
            )
        }
    }

    fn depth(&self) -> u32 {
        self.shared.cfg.max_wr
    }

    fn posted(&self) -> u32 {
        let taken = self.shared.taken.load(Ordering::Acquire);
        let posted = self.shared.posted.load(Ordering::Acquire);
        posted.saturating_sub(taken) as u32
    }
}

impl Drop for SiwSrq {
    fn drop(&mut self) {
        let sh = &self.shared;
        sh.dev.retire(Retire::Reservation {
            cq: sh.cq,
            n: u64::from(sh.cfg.max_wr),
        });
    }
}
