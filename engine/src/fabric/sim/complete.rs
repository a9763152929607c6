//! Posting, completions and the error state: how requests enter the queues, how
//! verdicts become completions in queue order, what polling releases, and flushing.

use super::config::SIM_MAX_SGE;
use super::slab::Idx;
use super::state::{opcode_of, CqEntry, Done, RqEntry, SqEntry};
use super::trace::{FaultTrace, TraceKind};
use super::world::WorldState;
use crate::fabric::{Completion, QpState, RecvWr, SendOp, SendWr, Sge, WcOpcode, WcStatus};
use crate::fabric::{PostError, PostErrorKind};

const NO_SGL: &str = "fast registration and local invalidation take no scatter-gather list";

impl WorldState {
    /// Posts a send-queue chain; stops at the first refused request.
    pub(super) fn post_send(&mut self, q: Idx, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        for (i, wr) in wrs.iter().enumerate() {
            let refuse = |kind| PostError { posted: i, kind };
            let Some(qp) = self.qps.get(q) else {
                return Err(refuse(PostErrorKind::InvalidState(QpState::Disconnected)));
            };
            let state = qp.state;
            if state != QpState::ReadyToSend && !state.is_error() {
                return Err(refuse(PostErrorKind::InvalidState(state)));
            }
            let caps = qp.config.caps;
            if qp.sq_outstanding() >= u64::from(caps.max_send_wr) {
                return Err(refuse(PostErrorKind::QueueFull {
                    depth: caps.max_send_wr,
                }));
            }
            if wr.sgl.len() > caps.max_send_sge as usize || wr.sgl.len() > SIM_MAX_SGE {
                return Err(refuse(PostErrorKind::TooManySge {
                    given: wr.sgl.len(),
                    max: caps.max_send_sge,
                }));
            }
            if matches!(
                wr.op,
                SendOp::FastReg { .. } | SendOp::LocalInvalidate { .. }
            ) && !wr.sgl.is_empty()
            {
                return Err(refuse(PostErrorKind::Malformed(NO_SGL)));
            }
            let len: u64 = wr.sgl.iter().map(|s| u64::from(s.length)).sum();
            let max = self.cfg.caps.max_msg_size;
            if len > u64::from(max) {
                return Err(refuse(PostErrorKind::TooLong { len, max }));
            }
            let latency = self.latency();
            let tiebreak = self.rng.next_u64();
            let now = self.now;
            let Some(qp) = self.qps.get_mut(q) else {
                return Err(refuse(PostErrorKind::InvalidState(QpState::Disconnected)));
            };
            let mut sgl = [Sge::default(); SIM_MAX_SGE];
            sgl[..wr.sgl.len()].copy_from_slice(wr.sgl);
            let exec_at = qp.last_exec_at.max(now.saturating_add(latency));
            let mut entry = SqEntry {
                wr_id: wr.wr_id,
                op: wr.op,
                sgl,
                nsge: wr.sgl.len() as u8,
                signaled: wr.flags.contains(crate::fabric::SendFlags::SIGNALED),
                len,
                exec_at,
                tiebreak,
                rnr_left: qp.config.rnr_retry,
                counted: false,
                done: None,
            };
            if state.is_error() {
                entry.done = Some(Done {
                    status: WcStatus::WrFlushed,
                    at: now,
                    byte_len: u32::try_from(len).unwrap_or(u32::MAX),
                });
                qp.sq.push_back(entry);
                qp.next_exec = qp.sq.len();
            } else {
                qp.last_exec_at = exec_at;
                qp.sq.push_back(entry);
            }
            let num = qp.num;
            self.record(TraceKind::PostSend(opcode_of(wr.op)), num, wr.wr_id, len);
        }
        Ok(())
    }

    /// Posts a chain of receives; stops at the first refused one.
    pub(super) fn post_recv(&mut self, q: Idx, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        for (i, wr) in wrs.iter().enumerate() {
            let refuse = |kind| PostError { posted: i, kind };
            let Some(qp) = self.qps.get(q) else {
                return Err(refuse(PostErrorKind::InvalidState(QpState::Disconnected)));
            };
            if qp.srq.is_some() {
                return Err(refuse(PostErrorKind::Malformed(
                    "the queue pair takes its receives from a shared receive queue",
                )));
            }
            let caps = qp.config.caps;
            if qp.rq_outstanding() >= u64::from(caps.max_recv_wr) {
                return Err(refuse(PostErrorKind::QueueFull {
                    depth: caps.max_recv_wr,
                }));
            }
            if wr.sgl.len() > caps.max_recv_sge as usize || wr.sgl.len() > SIM_MAX_SGE {
                return Err(refuse(PostErrorKind::TooManySge {
                    given: wr.sgl.len(),
                    max: caps.max_recv_sge,
                }));
            }
            let delay = if self.max_recv_delay_ns > 0 {
                self.fault_rng.range_inclusive(0, self.max_recv_delay_ns)
            } else {
                0
            };
            let now = self.now;
            let len: u64 = wr.sgl.iter().map(|s| u64::from(s.length)).sum();
            let Some(qp) = self.qps.get_mut(q) else {
                return Err(refuse(PostErrorKind::InvalidState(QpState::Disconnected)));
            };
            let num = qp.num;
            if qp.state.is_error() {
                qp.rq_unpolled += 1;
                let wc = flushed(wr.wr_id, WcOpcode::Recv, num);
                let cq = qp.recv_cq;
                self.record(TraceKind::PostRecv, num, wr.wr_id, len);
                self.push_cqe(
                    cq,
                    CqEntry {
                        wc,
                        qp: q,
                        release: 0,
                        recv: true,
                        srq: None,
                    },
                );
                continue;
            }
            let mut sgl = [Sge::default(); SIM_MAX_SGE];
            sgl[..wr.sgl.len()].copy_from_slice(wr.sgl);
            qp.rq.push_back(RqEntry {
                wr_id: wr.wr_id,
                sgl,
                nsge: wr.sgl.len() as u8,
                ready_at: now.saturating_add(delay),
            });
            self.record(TraceKind::PostRecv, num, wr.wr_id, len);
        }
        Ok(())
    }

    /// Reports the head of `q`'s send queue, whose verdict is due.
    pub(super) fn complete_head(&mut self, q: Idx) {
        let Some(qp) = self.qps.get_mut(q) else {
            return;
        };
        let Some(done) = qp.sq.front().and_then(|h| h.done) else {
            return;
        };
        let Some(e) = qp.sq.pop_front() else {
            return;
        };
        qp.next_exec = qp.next_exec.saturating_sub(1);
        if done.status.is_success() && !e.signaled {
            // Its slot is released by the next completion this queue reports.
            qp.sq_unsignaled += 1;
            return;
        }
        let release = qp.sq_unsignaled + 1;
        qp.sq_unsignaled = 0;
        qp.sq_unpolled += release;
        let wc = Completion {
            wr_id: e.wr_id,
            opcode: opcode_of(e.op),
            status: done.status,
            byte_len: done.byte_len,
            qp_num: qp.num,
            invalidated_rkey: None,
        };
        let cq = qp.send_cq;
        self.push_cqe(
            cq,
            CqEntry {
                wc,
                qp: q,
                release,
                recv: false,
                srq: None,
            },
        );
    }

    /// Queues a completion on `cq` (which has room: queue pairs reserve their depth).
    pub(super) fn push_cqe(&mut self, cq: Idx, entry: CqEntry) {
        let wc = entry.wc;
        self.stats.completions += 1;
        match wc.status {
            WcStatus::Success => {}
            WcStatus::WrFlushed => self.stats.flushed += 1,
            _ => self.stats.error_completions += 1,
        }
        self.record(
            TraceKind::Complete(wc.opcode, wc.status),
            wc.qp_num,
            wc.wr_id,
            u64::from(wc.byte_len),
        );
        let stall = if self.fault_rng.chance(self.cfg.faults.cq_stall_per_mille) {
            Some(self.fault_rng.range_inclusive(0, self.max_cq_stall_ns))
        } else {
            None
        };
        let now = self.now;
        let Some(c) = self.cqs.get_mut(cq) else {
            return;
        };
        c.entries.push_back(entry);
        if let Some(s) = stall {
            c.stalled_until = c.stalled_until.max(now.saturating_add(s));
            self.stats.faults_injected += 1;
            self.record(
                TraceKind::Fault(FaultTrace::CqStall),
                wc.qp_num,
                wc.wr_id,
                s,
            );
        }
    }

    /// Moves up to `out.len()` completions of `cq` out, releasing their queue slots.
    pub(super) fn poll_cq(&mut self, cq: Idx, out: &mut [Completion]) -> usize {
        let now = self.now;
        let Some(c) = self.cqs.get_mut(cq) else {
            return 0;
        };
        if c.stalled_until > now {
            return 0;
        }
        let mut n = 0;
        while n < out.len() {
            let Some(e) = c.entries.pop_front() else {
                break;
            };
            out[n] = e.wc;
            n += 1;
            if let Some(q) = e.srq.and_then(|s| self.srqs.get_mut(s)) {
                q.unpolled = q.unpolled.saturating_sub(1);
            } else if let Some(qp) = self.qps.get_mut(e.qp) {
                if e.recv {
                    qp.rq_unpolled = qp.rq_unpolled.saturating_sub(1);
                } else {
                    qp.sq_unpolled = qp.sq_unpolled.saturating_sub(e.release);
                }
            }
        }
        n
    }

    /// Moves `q` to the error state: every request not yet executed and every posted
    /// receive completes as flushed, after the verdicts already reached.
    pub(super) fn qp_error(&mut self, q: Idx) {
        let now = self.now;
        let Some(qp) = self.qps.get_mut(q) else {
            return;
        };
        if qp.state.is_error() {
            return;
        }
        qp.state = QpState::Error;
        for e in qp.sq.iter_mut() {
            match &mut e.done {
                // Verdicts already reached are reported right away, before the flushes.
                Some(d) => d.at = d.at.min(now),
                None => {
                    e.done = Some(Done {
                        status: WcStatus::WrFlushed,
                        at: now,
                        byte_len: u32::try_from(e.len).unwrap_or(u32::MAX),
                    })
                }
            }
        }
        qp.next_exec = qp.sq.len();
        let num = qp.num;
        self.record(TraceKind::QpError, num, 0, 0);
        loop {
            let Some(qp) = self.qps.get_mut(q) else {
                return;
            };
            let Some(r) = qp.rq.pop_front() else {
                break;
            };
            qp.rq_unpolled += 1;
            let cq = qp.recv_cq;
            let wc = flushed(r.wr_id, WcOpcode::Recv, num);
            self.push_cqe(
                cq,
                CqEntry {
                    wc,
                    qp: q,
                    release: 0,
                    recv: true,
                    srq: None,
                },
            );
        }
    }

    /// If a fail point matches the execution just counted, consumes it.
    pub(super) fn fail_point_hit(
        &mut self,
        opcode: WcOpcode,
        q: Idx,
        wr_id: u64,
    ) -> Option<WcStatus> {
        let count = self.op_counts[opcode as usize];
        let pos = self
            .fail_points
            .iter()
            .position(|f| f.opcode == opcode && f.nth == count && !f.status.is_success())?;
        let fp = self.fail_points.swap_remove(pos);
        self.stats.faults_injected += 1;
        let num = self.qps.get(q).map_or(0, |x| x.num);
        self.record(TraceKind::Fault(FaultTrace::FailPoint), num, wr_id, 0);
        Some(fp.status)
    }
}

fn flushed(wr_id: u64, opcode: WcOpcode, qp_num: u32) -> Completion {
    Completion {
        wr_id,
        opcode,
        status: WcStatus::WrFlushed,
        byte_len: 0,
        qp_num,
        invalidated_rkey: None,
    }
}
