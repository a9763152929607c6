//! Creating and destroying queue pairs and completion queues inside the world: the
//! device limits and completion-queue capacity checks, and what a destroyed queue pair
//! leaves behind (its connection ends, its CQ reservations are returned).

use std::collections::VecDeque;

use super::slab::Idx;
use super::state::QpSlot;
use super::world::WorldState;
use crate::fabric::ConnId;
use crate::fabric::FabricError;
use crate::fabric::{QpConfig, QpState, RNR_RETRY_INFINITE};

/// The objects a new queue pair is made of, resolved from the caller's handles.
#[derive(Debug, Clone, Copy)]
pub(super) struct QpSpec {
    pub(super) device: u32,
    pub(super) pd: u32,
    pub(super) pd_device: u32,
    pub(super) send_cq: Idx,
    pub(super) recv_cq: Idx,
    pub(super) srq: Option<Idx>,
    pub(super) config: QpConfig,
}

fn check_cap(what: &'static str, requested: u32, max: u32) -> Result<(), FabricError> {
    if requested == 0 || requested > max {
        return Err(FabricError::InvalidCaps {
            what,
            requested,
            max,
        });
    }
    Ok(())
}

impl WorldState {
    pub(super) fn max_sge(&self) -> u32 {
        self.cfg.caps.max_sge.min(super::config::SIM_MAX_SGE as u32)
    }

    pub(super) fn create_qp(
        &mut self,
        spec: QpSpec,
        state: QpState,
        conn: ConnId,
    ) -> Result<Idx, FabricError> {
        if spec.pd_device != spec.device {
            return Err(FabricError::WrongDevice);
        }
        let caps = spec.config.caps;
        let max_wr = self.cfg.caps.max_qp_wr;
        let max_sge = self.max_sge();
        check_cap("max_send_wr", caps.max_send_wr, max_wr)?;
        check_cap("max_recv_wr", caps.max_recv_wr, max_wr)?;
        check_cap("max_send_sge", caps.max_send_sge, max_sge)?;
        check_cap("max_recv_sge", caps.max_recv_sge, max_sge)?;
        if spec.config.rnr_retry > RNR_RETRY_INFINITE {
            return Err(FabricError::InvalidCaps {
                what: "rnr_retry",
                requested: u32::from(spec.config.rnr_retry),
                max: u32::from(RNR_RETRY_INFINITE),
            });
        }
        if let Some(s) = spec.srq {
            let q = self.srqs.get(s).ok_or(FabricError::WrongDevice)?;
            if q.device != spec.device {
                return Err(FabricError::WrongDevice);
            }
            if q.cq != spec.recv_cq {
                return Err(FabricError::SrqMismatch(
                    "the receive completion queue is not the one the shared receive queue was created for",
                ));
            }
        }
        let send = u64::from(caps.max_send_wr);
        // The shared queue reserved its receives' completions on that queue already.
        let recv = if spec.srq.is_some() {
            0
        } else {
            u64::from(caps.max_recv_wr)
        };
        let cq_need = |w: &WorldState, cq: Idx, add: u64| -> Result<(), FabricError> {
            let c = w.cqs.get(cq).ok_or(FabricError::WrongDevice)?;
            if c.device != spec.device {
                return Err(FabricError::WrongDevice);
            }
            let needed = c.reserved + add;
            if needed > u64::from(c.depth) {
                return Err(FabricError::CqTooSmall {
                    needed,
                    depth: c.depth,
                });
            }
            Ok(())
        };
        if spec.send_cq == spec.recv_cq {
            cq_need(self, spec.send_cq, send + recv)?;
        } else {
            cq_need(self, spec.send_cq, send)?;
            cq_need(self, spec.recv_cq, recv)?;
        }
        for (cq, n) in [(spec.send_cq, send), (spec.recv_cq, recv)] {
            if let Some(c) = self.cqs.get_mut(cq) {
                c.reserved += n;
                c.attached += 1;
            }
        }
        let num = self.new_qp_num();
        let rnr_timer_ns = super::world::dur_ns(spec.config.min_rnr_timer).max(1);
        Ok(self.qps.insert(QpSlot {
            num,
            device: spec.device,
            pd: spec.pd,
            send_cq: spec.send_cq,
            recv_cq: spec.recv_cq,
            config: spec.config,
            state,
            conn,
            peer: None,
            sq: VecDeque::with_capacity(caps.max_send_wr as usize),
            next_exec: 0,
            last_exec_at: 0,
            last_done_at: 0,
            sq_unsignaled: 0,
            sq_unpolled: 0,
            rq: VecDeque::with_capacity(caps.max_recv_wr as usize),
            rq_unpolled: 0,
            srq: spec.srq,
            rnr_timer_ns,
        }))
    }

    /// The queue pair's handle was dropped: it leaves its connection (the peer sees a
    /// disconnect) and its completion queues.
    pub(super) fn destroy_qp(&mut self, q: Idx) {
        let Some(qp) = self.qps.get(q) else {
            return;
        };
        let conn = qp.conn;
        if self.conns.get(&conn.0).is_some_and(|s| s.qp == Some(q)) {
            self.close_side(conn, false);
            if let Some(s) = self.conns.get_mut(&conn.0) {
                s.qp = None;
            }
        }
        let Some(qp) = self.qps.remove(q) else {
            return;
        };
        let caps = qp.config.caps;
        let recv = if qp.srq.is_some() {
            0
        } else {
            u64::from(caps.max_recv_wr)
        };
        self.release_cq(qp.send_cq, u64::from(caps.max_send_wr));
        self.release_cq(qp.recv_cq, recv);
    }

    pub(super) fn destroy_cq(&mut self, cq: Idx) {
        let gone = match self.cqs.get_mut(cq) {
            Some(c) => {
                c.handle_alive = false;
                c.attached == 0
            }
            None => false,
        };
        if gone {
            self.cqs.remove(cq);
        }
    }
}
