//! One call slot: everything a call in flight holds, preallocated per connection.

use core::time::Duration;
use std::time::Instant;

use crate::core::config::MAX_MRS_PER_CALL;
use crate::core::fixed::FixedVec;
use crate::core::regbuf::RegBuf;
use crate::requester::{CallStatus, DdpArgs, Reply, Resend, WriteSinks, MAX_WRITE_SINKS};

/// Where a slot is in its life (the diagram in `engine/DESIGN.md`, "Requester: a call
/// slot"). Whether it holds a credit is separate: a call that timed out keeps its
/// credit through `Answered` and `Delivered` until a late reply or the connection's end.
pub(super) enum SlotState {
    /// Unused.
    Free,
    /// The call's work requests are staged or posted; no answer yet.
    Sent,
    /// The call has its answer (a reply, RDMA_ERROR, a timeout, the connection's end)
    /// and waits for every key it exposed to die before the outcome goes out.
    Answered(Answer),
    /// The outcome went out; the slot waits for its work requests, reserved send-queue
    /// room and credit (a late reply to a call that timed out lands here and is
    /// recognised as late).
    Delivered,
}

impl SlotState {
    /// True unless the slot is free.
    #[inline]
    pub(super) fn in_use(&self) -> bool {
        !matches!(self, SlotState::Free)
    }

    /// True once the call has an answer (delivered or not).
    #[inline]
    pub(super) fn answered(&self) -> bool {
        matches!(self, SlotState::Answered(_) | SlotState::Delivered)
    }
}

/// The state of one fast registration a call made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MrState {
    /// The key is live: the peer may use it.
    Registered,
    /// A LocalInvalidate is posted for it.
    Invalidating,
    /// The key is dead (invalidated locally or by the peer's Send With Invalidate); the
    /// MR slot is back in the table.
    Invalid,
}

/// One registration of a call.
#[derive(Debug, Clone, Copy)]
pub(super) struct MrUse {
    pub(super) mr: u32,
    pub(super) key: u32,
    pub(super) state: MrState,
}

/// How the call ended, decided before its registrations are all dead.
pub(super) struct Answer {
    pub(super) status: CallStatus,
    pub(super) reply: Option<Reply>,
    pub(super) sink_lens: [u32; MAX_WRITE_SINKS],
    /// The call was lost with its connection, never answered: it may be sent again.
    pub(super) lost: bool,
}

pub(super) struct CallSlot {
    pub(super) state: SlotState,
    pub(super) xid: u32,
    pub(super) tag: u64,
    /// Holds this slot's transport headers; owned for the connection's life.
    pub(super) header: RegBuf,
    pub(super) msg: Option<RegBuf>,
    pub(super) ddp_args: DdpArgs,
    pub(super) sinks: WriteSinks,
    /// What each write sink was offered as (octets), for checking the returned lengths.
    pub(super) sink_caps: [u32; MAX_WRITE_SINKS],
    pub(super) reply_buf: Option<RegBuf>,
    /// Capacity of the offered Reply chunk; 0 when none was offered.
    pub(super) reply_cap: u32,
    pub(super) mrs: FixedVec<MrUse, MAX_MRS_PER_CALL>,
    /// Work requests posted for this slot and not yet completed.
    pub(super) wrs: u32,
    /// Counted in the requester's `parked`: delivered, waiting only for its Send.
    pub(super) parked: bool,
    /// Send-queue slots reserved for invalidations not yet staged.
    pub(super) reserved: u32,
    /// Whether the slot holds a credit (an ordinary one, or the probe's).
    pub(super) holds_credit: bool,
    pub(super) deadline: Option<Instant>,
    pub(super) started: Option<Instant>,
    pub(super) is_probe: bool,
    /// The XID was chosen by the caller and is mapped in the requester's `XidMap`.
    pub(super) own_xid: bool,
    /// What sending the call again would need (see `Outcome::resend`); set only when
    /// the connection sends lost calls again.
    pub(super) resend: Resend,
    /// The call went the plain way (inline, no chunk, not the probe, no continuation
    /// or send-based DDP, no lists to hand back): its reply may take the plain path
    /// (`plain.rs`).
    pub(super) plain: bool,
    /// The reply is being pulled from a responder-provided Read chunk.
    pub(super) pull: Option<super::pull::PullState>,
    /// Where the pull lands.
    pub(super) pull_buf: Option<RegBuf>,
    /// Credits held beyond the first by a call sent as a continuation group.
    pub(super) cont_credits: u32,
    /// Receives lent from the continuation reserve for this call's reply group
    /// (`optxrq_rsbuf`), until its reply arrives.
    pub(super) rsbuf: u32,
    /// The call asked for its reply's bulk item by send-based DDP (`optxrq_rsd`):
    /// its Write sink was not offered, and the item comes in a receive segment.
    pub(super) reply_ddp: bool,
}

impl CallSlot {
    pub(super) fn new(header: RegBuf, is_probe: bool) -> Self {
        CallSlot {
            state: SlotState::Free,
            xid: 0,
            tag: 0,
            header,
            msg: None,
            ddp_args: DdpArgs::new(),
            sinks: WriteSinks::new(),
            sink_caps: [0; MAX_WRITE_SINKS],
            reply_buf: None,
            reply_cap: 0,
            mrs: FixedVec::new(),
            wrs: 0,
            parked: false,
            reserved: 0,
            holds_credit: false,
            deadline: None,
            started: None,
            is_probe,
            own_xid: false,
            resend: Resend {
                xid: None,
                max_reply_len: 0,
                timeout: None,
                idempotent: false,
                prefers_read_chunk_reply: false,
                pad_inline_ddp: false,
            },
            plain: false,
            pull: None,
            pull_buf: None,
            cont_credits: 0,
            rsbuf: 0,
            reply_ddp: false,
        }
    }

    /// The slot now holds a call sent as Sends alone, with no chunk of its own to
    /// return: `wrs` work requests out, no registrations, no Write sink or Reply chunk
    /// offered. The continuation fields are the caller's.
    #[inline]
    pub(super) fn sent_without_chunks(
        &mut self,
        xid: u32,
        tag: u64,
        wrs: u32,
        deadline: Option<Instant>,
        now: Instant,
        resend: Resend,
    ) {
        self.state = SlotState::Sent;
        self.xid = xid;
        self.tag = tag;
        self.mrs.clear();
        self.wrs = wrs;
        self.reserved = 0;
        self.sink_caps = [0; MAX_WRITE_SINKS];
        self.reply_cap = 0;
        self.reply_buf = None;
        self.deadline = deadline;
        self.started = Some(now);
        self.resend = resend;
        self.reply_ddp = false;
        self.plain = false;
    }

    /// True when every registration of the call is dead.
    pub(super) fn all_invalid(&self) -> bool {
        self.mrs.iter().all(|m| m.state == MrState::Invalid)
    }

    /// True when nothing of the slot is outstanding any more.
    pub(super) fn retirable(&self) -> bool {
        matches!(self.state, SlotState::Delivered)
            && self.wrs == 0
            && self.reserved == 0
            && !self.holds_credit
    }

    /// How long the call has been out.
    pub(super) fn age(&self, now: Instant) -> Duration {
        self.started
            .map_or(Duration::ZERO, |s| now.saturating_duration_since(s))
    }
}
