//! The world's tables: queue pairs with their queues, completion queues, connection
//! managers and connection sides, and the connection-manager messages in flight.

use std::collections::VecDeque;

use super::config::SIM_MAX_SGE;
use super::slab::Idx;
use super::SimAddr;
use crate::fabric::{CmPrivateData, ConnId};
use crate::fabric::{Completion, QpConfig, QpState, SendOp, Sge, WcOpcode, WcStatus};

/// The verdict on an executed send-queue request, waiting to be reported in queue order.
#[derive(Debug, Clone, Copy)]
pub(super) struct Done {
    pub(super) status: WcStatus,
    /// When the initiator learns it (the ACK's arrival).
    pub(super) at: u64,
    pub(super) byte_len: u32,
}

/// A posted send-queue request, with its scatter-gather list copied inline.
#[derive(Debug, Clone, Copy)]
pub(super) struct SqEntry {
    pub(super) wr_id: u64,
    pub(super) op: SendOp,
    pub(super) sgl: [Sge; SIM_MAX_SGE],
    pub(super) nsge: u8,
    pub(super) signaled: bool,
    pub(super) len: u64,
    /// When it executes (never before the previous request of the queue pair).
    pub(super) exec_at: u64,
    /// Orders requests of different queue pairs due at the same instant.
    pub(super) tiebreak: u64,
    /// RNR retries left.
    pub(super) rnr_left: u8,
    /// Counted once for fail points, even if retried after RNR.
    pub(super) counted: bool,
    pub(super) done: Option<Done>,
}

impl SqEntry {
    pub(super) fn sgl(&self) -> &[Sge] {
        &self.sgl[..usize::from(self.nsge)]
    }
}

/// The completion opcode of a send-queue operation.
pub(super) const fn opcode_of(op: SendOp) -> WcOpcode {
    match op {
        SendOp::Send | SendOp::SendWithInvalidate { .. } => WcOpcode::Send,
        SendOp::RdmaWrite { .. } => WcOpcode::RdmaWrite,
        SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
        SendOp::FastReg { .. } => WcOpcode::FastReg,
        SendOp::LocalInvalidate { .. } => WcOpcode::LocalInvalidate,
    }
}

/// A posted receive.
#[derive(Debug, Clone, Copy)]
pub(super) struct RqEntry {
    pub(super) wr_id: u64,
    pub(super) sgl: [Sge; SIM_MAX_SGE],
    pub(super) nsge: u8,
    /// Usable from this time on (slow-receiver fault).
    pub(super) ready_at: u64,
}

impl RqEntry {
    pub(super) fn sgl(&self) -> &[Sge] {
        &self.sgl[..usize::from(self.nsge)]
    }

    pub(super) fn capacity(&self) -> u64 {
        self.sgl().iter().map(|s| u64::from(s.length)).sum()
    }
}

#[derive(Debug)]
pub(super) struct QpSlot {
    pub(super) num: u32,
    pub(super) device: u32,
    pub(super) pd: u32,
    pub(super) send_cq: Idx,
    pub(super) recv_cq: Idx,
    pub(super) config: QpConfig,
    pub(super) state: QpState,
    pub(super) conn: ConnId,
    /// The connected peer's queue pair.
    pub(super) peer: Option<Idx>,
    /// Requests not yet reported: executed ones (with `done`) first, then pending ones
    /// from `next_exec` on.
    pub(super) sq: VecDeque<SqEntry>,
    pub(super) next_exec: usize,
    pub(super) last_exec_at: u64,
    pub(super) last_done_at: u64,
    /// Successful unsignaled requests whose slots the next completion releases.
    pub(super) sq_unsignaled: u32,
    /// Slots held by completions in the CQ that were not polled yet.
    pub(super) sq_unpolled: u32,
    pub(super) rq: VecDeque<RqEntry>,
    pub(super) rq_unpolled: u32,
    /// The shared receive queue its Sends take receives from instead of `rq`.
    pub(super) srq: Option<Idx>,
    /// This side's RNR timer in virtual nanoseconds (how long a sender waits).
    pub(super) rnr_timer_ns: u64,
}

impl QpSlot {
    pub(super) fn sq_outstanding(&self) -> u64 {
        self.sq.len() as u64 + u64::from(self.sq_unsignaled) + u64::from(self.sq_unpolled)
    }

    pub(super) fn rq_outstanding(&self) -> u64 {
        self.rq.len() as u64 + u64::from(self.rq_unpolled)
    }
}

/// A completion waiting in a CQ, with what polling it releases.
#[derive(Debug, Clone, Copy)]
pub(super) struct CqEntry {
    pub(super) wc: Completion,
    pub(super) qp: Idx,
    /// Send-queue slots retired (the request plus unsignaled ones before it); 0 for
    /// receives.
    pub(super) release: u32,
    pub(super) recv: bool,
    /// The shared receive queue the receive came from (whose completion-queue room it
    /// holds until polled).
    pub(super) srq: Option<Idx>,
}

#[derive(Debug)]
pub(super) struct CqSlot {
    pub(super) device: u32,
    pub(super) depth: u32,
    /// Completions the attached queues could produce at once.
    pub(super) reserved: u64,
    pub(super) attached: u32,
    pub(super) handle_alive: bool,
    pub(super) entries: VecDeque<CqEntry>,
    pub(super) stalled_until: u64,
}

/// Where a connection side stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Active side: the request is out.
    Connecting,
    /// Passive side: reported to the listener, not answered yet.
    Requested,
    /// Passive side: accepted, waiting for the ready-to-use message.
    Accepted,
    /// Both directions work.
    Established,
    /// Over.
    Closed,
}

/// One side of a connection (each side has its own [`ConnId`], as RDMA-CM ids).
#[derive(Debug)]
pub(super) struct ConnSide {
    pub(super) cm: Idx,
    pub(super) qp: Option<Idx>,
    pub(super) peer: Option<ConnId>,
    pub(super) phase: Phase,
    /// Arrival time of the last message sent to this side: messages to one side
    /// arrive in the order they were sent.
    pub(super) last_msg_at: u64,
}

/// A connection-manager event waiting to be polled.
#[derive(Debug, Clone, Copy)]
pub(super) enum PendingEvent {
    ConnectRequest { conn: ConnId, data: CmPrivateData },
    Established { conn: ConnId, data: CmPrivateData },
    Rejected { conn: ConnId, data: CmPrivateData },
    Unreachable { conn: ConnId },
    Disconnected { conn: ConnId },
}

#[derive(Debug)]
pub(super) struct CmSlot {
    pub(super) device: u32,
    pub(super) events: VecDeque<PendingEvent>,
}

/// A connection-manager message in flight.
#[derive(Debug, Clone, Copy)]
pub(super) enum CmMsgKind {
    /// Connect request from the active side `from`.
    Req {
        from: ConnId,
        addr: SimAddr,
        data: CmPrivateData,
    },
    /// Accept reply to the active side `to`.
    Rep { to: ConnId, data: CmPrivateData },
    /// Ready-to-use to the passive side `to`.
    Rtu { to: ConnId },
    /// Reject to the active side `to`.
    Rej { to: ConnId, data: CmPrivateData },
    /// Disconnect notice to side `to`.
    Disc { to: ConnId },
}

#[derive(Debug, Clone, Copy)]
pub(super) struct CmMsg {
    pub(super) at: u64,
    /// The device whose polls deliver it (`None`: any).
    pub(super) device: Option<u32>,
    pub(super) tiebreak: u64,
    pub(super) kind: CmMsgKind,
}

/// A connection drop scheduled by a test.
#[derive(Debug, Clone, Copy)]
pub(super) struct ScheduledDrop {
    pub(super) at: u64,
    pub(super) tiebreak: u64,
    pub(super) conn: ConnId,
}
