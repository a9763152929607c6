//! Shared receive queues of the shm provider: one producer (the [`ShmSrq`] handle,
//! posting) and one consumer, the poll of the receive completion queue the queue was
//! created for, which executes the Sends of every attached queue pair and so takes
//! their receives one at a time. That is why an attached queue pair must use that
//! completion queue for its receives: the queue keeps the single-producer,
//! single-consumer hand-over of a queue pair's own receive queue (no lock, no
//! compare-and-swap).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::cq::CqShared;
use super::device::DeviceShared;
use super::pd::PdShared;
use super::qp::RqEntry;
use super::segment::MAX_SGE;
use crate::fabric::slots::Slots;
use crate::fabric::{FabricError, PostError, PostErrorKind, RecvWr, SharedReceiveQueue, SrqConfig};

/// A counter on a cache line of its own (the poster's and the consumer's do not share).
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct Line(pub(crate) AtomicU64);

/// What the handle and the consuming poll share.
pub(crate) struct SrqShared {
    pub(crate) dev: Arc<DeviceShared>,
    /// The domain the receives' keys are checked in.
    pub(crate) pd: u16,
    /// Its arenas: where the receives' keys point.
    pub(crate) pdt: Arc<PdShared>,
    /// The one receive completion queue of every attached queue pair.
    pub(crate) cq: Arc<CqShared>,
    pub(crate) cfg: SrqConfig,
    pub(crate) rq: Slots<RqEntry>,
    /// Receives published by the handle.
    pub(crate) posted: Line,
    /// Receives taken by a Send.
    pub(crate) consumed: Line,
}

// SAFETY: the slot cells are written only by the handle (`&mut self`) for sequence
// numbers below `consumed + depth`, and read only by the one consuming poll for
// sequence numbers below `posted`; the counters publish with release and read with
// acquire. Everything else is immutable or Send + Sync.
unsafe impl Send for SrqShared {}
// SAFETY: as above.
unsafe impl Sync for SrqShared {}

impl Drop for SrqShared {
    fn drop(&mut self) {
        self.cq.unreserve(u64::from(self.cfg.max_wr));
    }
}

impl std::fmt::Debug for SrqShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SrqShared")
            .field("pd", &self.pd)
            .field("depth", &self.cfg.max_wr)
            .finish()
    }
}

impl SrqShared {
    /// The oldest posted receive not yet taken, if any.
    ///
    /// # Safety
    /// Only the consuming poll (of `cq`) calls this and [`SrqShared::take`].
    #[inline]
    pub(crate) unsafe fn front(&self) -> Option<&RqEntry> {
        let posted = self.posted.0.load(Ordering::Acquire);
        let consumed = self.consumed.0.load(Ordering::Relaxed);
        // SAFETY: consumed < posted: published, and ours until released by `take`.
        (consumed < posted).then(|| unsafe { self.rq.get(consumed) })
    }

    /// Releases the entry [`SrqShared::front`] returned to the poster.
    ///
    /// # Safety
    /// As for `front`, after the last use of the entry it returned.
    #[inline]
    pub(crate) unsafe fn take(&self) {
        let consumed = self.consumed.0.load(Ordering::Relaxed);
        self.consumed.0.store(consumed + 1, Ordering::Release);
    }
}

/// A shm shared receive queue ([`crate::fabric::ProtectionDomain::create_srq`]).
pub struct ShmSrq {
    pub(crate) shared: Arc<SrqShared>,
    head: u64,
    consumed_seen: u64,
}

impl std::fmt::Debug for ShmSrq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.shared.fmt(f)
    }
}

impl ShmSrq {
    pub(crate) fn create(
        dev: Arc<DeviceShared>,
        pd: Arc<PdShared>,
        cq: Arc<CqShared>,
        cfg: SrqConfig,
    ) -> Result<ShmSrq, FabricError> {
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
        cq.reserve(u64::from(cfg.max_wr))?;
        Ok(ShmSrq {
            shared: Arc::new(SrqShared {
                pd: pd.id,
                pdt: pd,
                dev,
                cq,
                cfg,
                rq: Slots::new(cfg.max_wr, RqEntry::EMPTY),
                posted: Line::default(),
                consumed: Line::default(),
            }),
            head: 0,
            consumed_seen: 0,
        })
    }
}

impl SharedReceiveQueue for ShmSrq {
    fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let sh = &*self.shared;
        let depth = u64::from(sh.cfg.max_wr);
        let mut result = Ok(());
        for (i, wr) in wrs.iter().enumerate() {
            if self.head - self.consumed_seen >= depth {
                self.consumed_seen = sh.consumed.0.load(Ordering::Acquire);
                if self.head - self.consumed_seen >= depth {
                    result = Err(PostError {
                        posted: i,
                        kind: PostErrorKind::QueueFull {
                            depth: depth as u32,
                        },
                    });
                    break;
                }
            }
            if wr.sgl.len() > sh.cfg.max_sge as usize {
                result = Err(PostError {
                    posted: i,
                    kind: PostErrorKind::TooManySge {
                        given: wr.sgl.len(),
                        max: sh.cfg.max_sge,
                    },
                });
                break;
            }
            // SAFETY: head - consumed < depth, so the slot is free; one producer. The
            // reference ends before `posted` publishes the entry.
            let e = unsafe { sh.rq.cell_mut(self.head) };
            e.wr_id = wr.wr_id;
            e.num_sge = wr.sgl.len() as u32;
            for (d, s) in e.sge.iter_mut().zip(wr.sgl) {
                *d = *s;
            }
            self.head += 1;
        }
        sh.posted.0.store(self.head, Ordering::Release);
        result
    }

    fn depth(&self) -> u32 {
        self.shared.cfg.max_wr
    }

    fn posted(&self) -> u32 {
        let consumed = self.shared.consumed.0.load(Ordering::Acquire);
        self.head.saturating_sub(consumed) as u32
    }
}
