//! Executing send-queue requests when they fall due: the data movement, every check a
//! real RC queue pair makes, and the verdict that is reported in queue order later.

use super::memory::copy_segments;
use super::slab::Idx;
use super::state::{opcode_of, CqEntry, Done, SqEntry};
use super::trace::{FaultTrace, TraceKind};
use super::world::WorldState;
use crate::fabric::mr::Access;
use crate::fabric::{Completion, QpState, SendOp, WcOpcode, WcStatus, RNR_RETRY_INFINITE};

/// What executing a request led to.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    /// Finished with `status` (any failure moves both queue pairs to error).
    Done { status: WcStatus, byte_len: u32 },
    /// The peer had no usable receive: retry after its RNR timer.
    Rnr,
}

const fn fail(status: WcStatus) -> Outcome {
    Outcome::Done {
        status,
        byte_len: 0,
    }
}

/// The status a sender sees when its Send failed at the receiver with `status`.
const fn sender_status_for(receiver: WcStatus) -> WcStatus {
    match receiver {
        WcStatus::LocalLengthError => WcStatus::RemoteInvalidRequest,
        WcStatus::LocalAccessError => WcStatus::RemoteAccessError,
        _ => WcStatus::RemoteOperationError,
    }
}

fn len_u32(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

impl WorldState {
    /// Executes the next pending request of queue pair `q`.
    pub(super) fn exec_next(&mut self, q: Idx) {
        let Some(qp) = self.qps.get_mut(q) else {
            return;
        };
        let at = qp.next_exec;
        let Some(e) = qp.sq.get_mut(at) else {
            return;
        };
        let first_attempt = !e.counted;
        e.counted = true;
        let entry = *e;
        let conn = qp.conn;
        let opcode = opcode_of(entry.op);
        let is_data = matches!(
            opcode,
            WcOpcode::Send | WcOpcode::RdmaWrite | WcOpcode::RdmaRead
        );
        let injected = if first_attempt {
            self.op_counts[opcode as usize] += 1;
            self.fail_point_hit(opcode, q, entry.wr_id)
        } else {
            None
        };
        if is_data && self.fault_rng.chance(self.cfg.faults.drop_per_mille) {
            self.kill_connection(conn);
            if self.qps.get(q).is_none_or(|x| x.state.is_error()) {
                // Flushed with everything else of the connection.
                return;
            }
        }
        let outcome = match injected {
            Some(status) => fail(status),
            None => self.execute(q, &entry),
        };
        if is_data {
            self.stats.ops_executed += 1;
        } else {
            self.stats.local_ops += 1;
        }
        self.apply(q, &entry, outcome);
    }

    fn execute(&mut self, q: Idx, e: &SqEntry) -> Outcome {
        let Some(qp) = self.qps.get(q) else {
            return fail(WcStatus::GeneralError);
        };
        let pd = qp.pd;
        match e.op {
            SendOp::Send => self.exec_send(q, e, None),
            SendOp::SendWithInvalidate { rkey } => self.exec_send(q, e, Some(rkey)),
            SendOp::RdmaWrite { remote } => {
                let Some(src) = self.mrs.resolve_sgl(e.sgl(), pd, Access::NONE) else {
                    return fail(WcStatus::LocalProtectionError);
                };
                let Some(peer) = self.live_peer(q) else {
                    return fail(WcStatus::RetryExceeded);
                };
                let Some(dst) = self.mrs.resolve_remote(
                    remote.rkey,
                    peer.1,
                    remote.addr,
                    src.total(),
                    Access::REMOTE_WRITE,
                ) else {
                    return fail(WcStatus::RemoteAccessError);
                };
                copy_segments(&src, &dst);
                self.delivered(src.total())
            }
            SendOp::RdmaRead { remote } => {
                let Some(dst) = self.mrs.resolve_sgl(e.sgl(), pd, Access::LOCAL_WRITE) else {
                    return fail(WcStatus::LocalProtectionError);
                };
                let Some(peer) = self.live_peer(q) else {
                    return fail(WcStatus::RetryExceeded);
                };
                // As in InfiniBand, a zero-length RDMA operation checks no key.
                if dst.total() == 0 {
                    return self.delivered(0);
                }
                let Some(src) = self.mrs.resolve_remote(
                    remote.rkey,
                    peer.1,
                    remote.addr,
                    dst.total(),
                    Access::REMOTE_READ,
                ) else {
                    return fail(WcStatus::RemoteAccessError);
                };
                copy_segments(&src, &dst);
                self.delivered(dst.total())
            }
            SendOp::FastReg {
                key,
                region,
                access,
            } => match self.mrs.fast_reg(pd, key, region, access) {
                Ok(()) => fail(WcStatus::Success),
                Err(_) => fail(WcStatus::MemoryBindError),
            },
            SendOp::LocalInvalidate { key } => match self.mrs.invalidate(pd, key) {
                Ok(()) => fail(WcStatus::Success),
                Err(_) => fail(WcStatus::LocalProtectionError),
            },
        }
    }

    fn delivered(&mut self, bytes: u64) -> Outcome {
        self.stats.ops_delivered += 1;
        self.stats.bytes_moved += bytes;
        Outcome::Done {
            status: WcStatus::Success,
            byte_len: len_u32(bytes),
        }
    }

    /// The connected peer's queue pair and protection domain, if it accepts requests.
    /// A peer in the error state answers nothing, so the requester would time out.
    fn live_peer(&self, q: Idx) -> Option<(Idx, u32)> {
        let p = self.qps.get(q)?.peer?;
        let peer = self.qps.get(p)?;
        matches!(peer.state, QpState::ReadyToReceive | QpState::ReadyToSend).then_some((p, peer.pd))
    }

    fn exec_send(&mut self, q: Idx, e: &SqEntry, invalidate: Option<u32>) -> Outcome {
        let Some(pd) = self.qps.get(q).map(|x| x.pd) else {
            return fail(WcStatus::GeneralError);
        };
        let Some(src) = self.mrs.resolve_sgl(e.sgl(), pd, Access::NONE) else {
            return fail(WcStatus::LocalProtectionError);
        };
        let Some((p, peer_pd)) = self.live_peer(q) else {
            return fail(WcStatus::RetryExceeded);
        };
        if self.fault_rng.chance(self.cfg.faults.rnr_per_mille) {
            self.stats.faults_injected += 1;
            let num = self.qps.get(q).map_or(0, |x| x.num);
            self.record(TraceKind::Fault(FaultTrace::Rnr), num, e.wr_id, 0);
            return Outcome::Rnr;
        }
        let now = self.now;
        // The receive comes from the peer's shared receive queue, if it has one, and
        // its keys are checked in that queue's domain.
        let srq = self.qps.get(p).and_then(|x| x.srq);
        let (front, peer_pd) = match srq {
            Some(s) => {
                let q = self.srqs.get(s);
                (
                    q.and_then(|q| q.rq.front().copied()),
                    q.map_or(peer_pd, |q| q.pd),
                )
            }
            None => (self.qps.get(p).and_then(|x| x.rq.front().copied()), peer_pd),
        };
        let Some(recv) = front.filter(|r| r.ready_at <= now) else {
            return Outcome::Rnr;
        };
        self.op_counts[WcOpcode::Recv as usize] += 1;
        if let Some(status) = self.fail_point_hit(WcOpcode::Recv, p, recv.wr_id) {
            self.fail_receive(p, status);
            return fail(sender_status_for(status));
        }
        if src.total() > recv.capacity() {
            self.fail_receive(p, WcStatus::LocalLengthError);
            return fail(WcStatus::RemoteInvalidRequest);
        }
        let Some(dst) = self
            .mrs
            .resolve_sgl(recv.sgl(), peer_pd, Access::LOCAL_WRITE)
        else {
            self.fail_receive(p, WcStatus::LocalProtectionError);
            return fail(WcStatus::RemoteOperationError);
        };
        if let Some(rkey) = invalidate {
            if self.mrs.invalidate(peer_pd, rkey).is_err() {
                self.fail_receive(p, WcStatus::LocalAccessError);
                return fail(WcStatus::RemoteAccessError);
            }
        }
        copy_segments(&src, &dst);
        self.take_receive(p, srq);
        let Some(peer) = self.qps.get(p) else {
            return fail(WcStatus::GeneralError);
        };
        let (cq, num) = (peer.recv_cq, peer.num);
        let wc = Completion {
            wr_id: recv.wr_id,
            opcode: WcOpcode::Recv,
            status: WcStatus::Success,
            byte_len: len_u32(src.total()),
            qp_num: num,
            // A network modelling kernel siw (DeviceCaps::reports_remote_invalidation
            // false) invalidates but does not say so.
            invalidated_rkey: invalidate.filter(|_| self.cfg.caps.reports_remote_invalidation),
        };
        self.push_cqe(
            cq,
            CqEntry {
                wc,
                qp: p,
                release: 0,
                recv: true,
                srq,
            },
        );
        self.delivered(src.total())
    }

    /// Takes the head receive of `p`'s receive queue, or of its shared receive queue
    /// `srq`, counting it as unpolled until its completion is polled.
    fn take_receive(&mut self, p: Idx, srq: Option<Idx>) -> Option<super::state::RqEntry> {
        match srq {
            Some(s) => {
                let q = self.srqs.get_mut(s)?;
                let r = q.rq.pop_front()?;
                q.unpolled += 1;
                Some(r)
            }
            None => {
                let peer = self.qps.get_mut(p)?;
                let r = peer.rq.pop_front()?;
                peer.rq_unpolled += 1;
                Some(r)
            }
        }
    }

    /// The receiver's head receive completes with `status` and its queue pair fails.
    fn fail_receive(&mut self, p: Idx, status: WcStatus) {
        let Some(srq) = self.qps.get(p).map(|x| x.srq) else {
            return;
        };
        let Some(recv) = self.take_receive(p, srq) else {
            return;
        };
        let Some(peer) = self.qps.get(p) else {
            return;
        };
        let (cq, num) = (peer.recv_cq, peer.num);
        let wc = Completion {
            wr_id: recv.wr_id,
            opcode: WcOpcode::Recv,
            status,
            byte_len: 0,
            qp_num: num,
            invalidated_rkey: None,
        };
        self.push_cqe(
            cq,
            CqEntry {
                wc,
                qp: p,
                release: 0,
                recv: true,
                srq,
            },
        );
        self.qp_error(p);
    }

    fn apply(&mut self, q: Idx, entry: &SqEntry, outcome: Outcome) {
        let opcode = opcode_of(entry.op);
        let (status, byte_len) = match outcome {
            Outcome::Done { status, byte_len } => (status, byte_len),
            Outcome::Rnr => {
                let timer = self
                    .live_peer(q)
                    .and_then(|(p, _)| self.qps.get(p))
                    .map_or(1_000_000, |p| p.rnr_timer_ns);
                let tiebreak = self.rng.next_u64();
                let now = self.now;
                let Some(qp) = self.qps.get_mut(q) else {
                    return;
                };
                let num = qp.num;
                let infinite = qp.config.rnr_retry >= RNR_RETRY_INFINITE;
                let at = qp.next_exec;
                let Some(e) = qp.sq.get_mut(at) else {
                    return;
                };
                self.stats.rnr_naks += 1;
                self.trace
                    .record(now, TraceKind::RnrNak, num, entry.wr_id, 0);
                if infinite || e.rnr_left > 0 {
                    if !infinite {
                        e.rnr_left -= 1;
                    }
                    e.exec_at = now.saturating_add(timer);
                    e.tiebreak = tiebreak;
                    return;
                }
                (WcStatus::RnrRetryExceeded, 0)
            }
        };
        let ack = if status.is_success() {
            self.ack_delay()
        } else {
            0
        };
        let now = self.now;
        let Some(qp) = self.qps.get_mut(q) else {
            return;
        };
        let num = qp.num;
        let peer = qp.peer;
        let at = if status.is_success() {
            let t = qp.last_done_at.max(now.saturating_add(ack));
            qp.last_done_at = t;
            t
        } else {
            now
        };
        let idx = qp.next_exec;
        if let Some(e) = qp.sq.get_mut(idx) {
            // Send-queue completions carry the request's length, whatever the outcome.
            e.done = Some(Done {
                status,
                at,
                byte_len: len_u32(e.len),
            });
            qp.next_exec += 1;
        }
        let len = if status.is_success() {
            u64::from(byte_len)
        } else {
            entry.len
        };
        self.record(TraceKind::Exec(opcode, status), num, entry.wr_id, len);
        if !status.is_success() {
            // Whatever kills one side of an RC connection kills the other (the
            // responder's NAK or the requester's silence), as the suite requires.
            self.qp_error(q);
            if let Some(p) = peer {
                self.qp_error(p);
            }
        }
    }
}
