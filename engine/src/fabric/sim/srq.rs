//! Shared receive queues of the simulated network: a queue of posted receives in the
//! world, taken in post order by the Sends of every attached queue pair, whose
//! completions go to the one receive completion queue the queue was created for.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;

use super::config::SIM_MAX_SGE;
use super::slab::Idx;
use super::state::RqEntry;
use super::world::{World, WorldState};
use crate::fabric::{
    FabricError, PostError, PostErrorKind, RecvWr, Sge, SharedReceiveQueue, SrqConfig,
};

/// A shared receive queue in the world.
#[derive(Debug)]
pub(super) struct SrqSlot {
    pub(super) device: u32,
    /// The domain its receives' keys are checked in.
    pub(super) pd: u32,
    /// The receive completion queue of every attached queue pair.
    pub(super) cq: Idx,
    pub(super) cfg: SrqConfig,
    pub(super) rq: VecDeque<RqEntry>,
    /// Receives taken whose completions were not polled yet (they hold room in `cq`).
    pub(super) unpolled: u32,
}

/// A shared receive queue of the simulated network
/// ([`crate::fabric::ProtectionDomain::create_srq`]). Dropping it discards the receives
/// still posted, reporting nothing for them.
pub struct SimSrq {
    pub(super) world: Arc<World>,
    pub(super) idx: Idx,
    pub(super) cfg: SrqConfig,
}

impl fmt::Debug for SimSrq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimSrq")
            .field("depth", &self.cfg.max_wr)
            .finish()
    }
}

impl WorldState {
    pub(super) fn create_srq(
        &mut self,
        device: u32,
        pd: u32,
        cq: Idx,
        cfg: SrqConfig,
    ) -> Result<Idx, FabricError> {
        // A network configured without them (`max_srq_wr` 0) models a device that
        // has none.
        let max_wr = self.cfg.caps.max_srq_wr;
        if max_wr == 0 {
            return Err(FabricError::Unsupported(
                "shared receive queues (max_srq_wr is 0)",
            ));
        }
        if cfg.max_wr == 0 || cfg.max_wr > max_wr {
            return Err(FabricError::InvalidCaps {
                what: "srq max_wr",
                requested: cfg.max_wr,
                max: max_wr,
            });
        }
        let max_sge = self.max_sge();
        if cfg.max_sge > max_sge {
            return Err(FabricError::InvalidCaps {
                what: "srq max_sge",
                requested: cfg.max_sge,
                max: max_sge,
            });
        }
        let c = self.cqs.get_mut(cq).ok_or(FabricError::WrongDevice)?;
        if c.device != device {
            return Err(FabricError::WrongDevice);
        }
        let needed = c.reserved + u64::from(cfg.max_wr);
        if needed > u64::from(c.depth) {
            return Err(FabricError::CqTooSmall {
                needed,
                depth: c.depth,
            });
        }
        c.reserved = needed;
        c.attached += 1;
        Ok(self.srqs.insert(SrqSlot {
            device,
            pd,
            cq,
            cfg,
            rq: VecDeque::with_capacity(cfg.max_wr as usize),
            unpolled: 0,
        }))
    }

    pub(super) fn destroy_srq(&mut self, s: Idx) {
        let Some(q) = self.srqs.remove(s) else {
            return;
        };
        self.release_cq(q.cq, u64::from(q.cfg.max_wr));
    }

    /// Returns `n` reserved completions of `cq` and one attachment; removes the queue
    /// when its handle and everything attached are gone.
    pub(super) fn release_cq(&mut self, cq: Idx, n: u64) {
        let gone = match self.cqs.get_mut(cq) {
            Some(c) => {
                c.reserved = c.reserved.saturating_sub(n);
                c.attached = c.attached.saturating_sub(1);
                c.attached == 0 && !c.handle_alive
            }
            None => false,
        };
        if gone {
            self.cqs.remove(cq);
        }
    }

    fn post_srq_recv(&mut self, s: Idx, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        for (i, wr) in wrs.iter().enumerate() {
            let refuse = |kind| PostError { posted: i, kind };
            let delay = if self.max_recv_delay_ns > 0 {
                self.fault_rng.range_inclusive(0, self.max_recv_delay_ns)
            } else {
                0
            };
            let now = self.now;
            let Some(q) = self.srqs.get_mut(s) else {
                return Err(refuse(PostErrorKind::Malformed(
                    "the shared receive queue is gone",
                )));
            };
            // Receives taken but not yet polled hold completion-queue room, which the
            // queue reserved for `max_wr` receives in all.
            if q.rq.len() + q.unpolled as usize >= q.cfg.max_wr as usize {
                return Err(refuse(PostErrorKind::QueueFull {
                    depth: q.cfg.max_wr,
                }));
            }
            if wr.sgl.len() > q.cfg.max_sge as usize || wr.sgl.len() > SIM_MAX_SGE {
                return Err(refuse(PostErrorKind::TooManySge {
                    given: wr.sgl.len(),
                    max: q.cfg.max_sge,
                }));
            }
            let mut sgl = [Sge::default(); SIM_MAX_SGE];
            sgl[..wr.sgl.len()].copy_from_slice(wr.sgl);
            q.rq.push_back(RqEntry {
                wr_id: wr.wr_id,
                sgl,
                nsge: wr.sgl.len() as u8,
                ready_at: now.saturating_add(delay),
            });
        }
        Ok(())
    }
}

impl SharedReceiveQueue for SimSrq {
    fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let idx = self.idx;
        self.world
            .with(|w| w.post_srq_recv(idx, wrs))
            .map_err(|m| m.post(0))?
    }

    fn depth(&self) -> u32 {
        self.cfg.max_wr
    }

    fn posted(&self) -> u32 {
        let idx = self.idx;
        self.world
            .with(|w| w.srqs.get(idx).map_or(0, |q| q.rq.len() as u32))
            .unwrap_or(0)
    }
}

impl Drop for SimSrq {
    fn drop(&mut self) {
        let idx = self.idx;
        let _ = self.world.with(|w| w.destroy_srq(idx));
    }
}
