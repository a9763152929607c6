//! The common call in one pass each way (engine/DESIGN.md, "Requester: the plain
//! path"): an inline RDMA_MSG call without chunks, on an engine-chosen XID, with no call
//! queued before it; and the reply to such a call, an RDMA_MSG without chunks.
//!
//! The general path answers every shape: it plans the call against the thresholds,
//! checks it for continuation and both kinds of send-based DDP, registers chunks, and on
//! the reply interprets the header against what the call offered, records an `Answer`
//! in the slot and lets `progress` turn it into an outcome once every key is dead. For
//! the plain shape most of that is known beforehand to do nothing, so these functions
//! test the few conditions that make it so and then do only the work left: on the way
//! out the credit, the slot, the XID, the seven header words and the message copied
//! behind them, one Send; on the way back the credit, the outcome written where the
//! outcome queue keeps it, the slot freed. Anything else (or any doubt) goes the general
//! way, which gives the same result.

use std::time::Instant;

use super::reply::status_of;
use super::slot::{CallSlot, SlotState};
use super::RequesterHalf;
use crate::core::regbuf::RegBuf;
use crate::core::transport::{Transport, COPY_BEHIND_HEADER_MAX};
use crate::core::wrid::{WrId, WrKind};
use crate::fabric::SendOp;
use crate::requester::{CallRequest, DdpArgs, Outcome, Reply, Resend, WriteSinks};
use crate::wire::header::{encode_plain_msg, Limits, MIN_MSG_HEADER_LEN};

/// Octets of the largest transport header of a reply to a call that offers no chunk:
/// RDMA_MSG with three empty lists (the Write list echoed back is empty). A reply of at
/// most the receive threshold less this needs no Reply chunk (RFC 8166 §3.5.4).
pub(super) const PLAIN_REPLY_HEADER_LEN: usize = MIN_MSG_HEADER_LEN;

/// The XID and credit grant of a chunkless RDMA_MSG reply (seven words, the last three
/// zero, followed by an RPC message at least as long as its XID, which must match the
/// header's when `limits` require it): what [`HeaderView::parse`] yields for those
/// octets, read in one look; `None` for anything else.
///
/// [`HeaderView::parse`]: crate::wire::header::HeaderView::parse
#[inline(always)]
pub(super) fn plain_reply(buf: &[u8], limits: &Limits) -> Option<(u32, u32)> {
    let w = buf.first_chunk::<{ MIN_MSG_HEADER_LEN + 4 }>()?;
    let word = |i: usize| u32::from_be_bytes([w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]]);
    let xid = word(0);
    let plain = word(1) == crate::wire::header::RPCRDMA_VERSION
        && word(3) == crate::wire::header::RDMA_MSG
        && (word(4) | word(5) | word(6)) == 0
        && (!limits.require_rpc_xid || word(7) == xid);
    plain.then_some((xid, word(2)))
}

/// Writes the Send of a plain call into `s`'s header buffer: the transport header for
/// `xid` asking `credit` credits, then `msg` (at most [`COPY_BEHIND_HEADER_MAX`] octets)
/// behind it, so that the Send gathers one entry; stages that Send for `slot` on `t`,
/// which has send-queue room for it. False, with nothing staged, when the header buffer
/// is too short.
#[inline(always)]
fn stage_plain_send(
    t: &mut Transport,
    s: &mut CallSlot,
    slot: u32,
    xid: u32,
    credit: u32,
    msg: &[u8],
) -> bool {
    let total = MIN_MSG_HEADER_LEN + msg.len();
    let Some(out) = s.header.storage_mut().get_mut(..total) else {
        return false;
    };
    let (hdr, body) = out.split_at_mut(MIN_MSG_HEADER_LEN);
    if encode_plain_msg(hdr, xid, credit).is_none() {
        return false;
    }
    // By fixed moves up to 128 octets (a NULL call is 40, a 64-octet ECHO 108), not a
    // call into the library's `memcpy` of run-time length.
    crate::wire::copy::copy_short(body, msg);
    let Ok(sge) = s.header.sge(0, total) else {
        return false;
    };
    if !t.sq.take(1) {
        return false;
    }
    let wr_id = WrId::new(WrKind::CallSend, slot).encode();
    let staged = t.stage_one(wr_id, SendOp::Send, sge);
    // Room for a Send that was not staged (never, see `Transport::stage`) goes back.
    t.sq.give(u32::from(!staged));
    s.wrs = u32::from(staged);
    true
}

/// Writes `value` over `place`, which holds `None`, without looking at what it held:
/// a plain assignment would test the old value for a buffer to drop, which the caller
/// knows is not there (were it, the buffer would only be forgotten, never freed twice).
#[inline(always)]
fn put_over_none<T>(place: &mut Option<T>, value: Option<T>) {
    debug_assert!(place.is_none());
    // SAFETY: `place` is a valid, aligned, exclusive reference; overwriting it without
    // dropping the old value is at worst a leak, and the caller passes a `None`.
    unsafe { core::ptr::write(place, value) };
}

impl RequesterHalf {
    /// Starts `req` on the plain path when it has that shape and everything it needs is
    /// free now, and returns its slot (the caller then moves `req.msg` into it);
    /// `None`, with nothing changed, sends it the general way (which refuses, queues or
    /// starts it). The tests are those the general path would make for this shape:
    /// connection open, nothing queued, no chosen XID, no chunk, a message of 4 to
    /// [`COPY_BEHIND_HEADER_MAX`] octets that fits inline with its header and is
    /// registered, a reply bound that fits inline (no Reply chunk) and a large buffer,
    /// then a free slot, send-queue room and a credit.
    #[inline(always)]
    pub(super) fn start_plain(
        &mut self,
        t: &mut Transport,
        req: &mut CallRequest,
        tag: u64,
        now: Instant,
    ) -> Option<u32> {
        let len = req.msg.len();
        let th = t.thresholds;
        let reply = req.max_reply_len as usize;
        let plain = t.is_open()
            && self.queue.is_empty()
            && req.xid.is_none()
            && req.ddp_args.is_empty()
            && req.write_sinks.is_empty()
            && (4..=COPY_BEHIND_HEADER_MAX).contains(&len)
            && len + MIN_MSG_HEADER_LEN <= th.send as usize
            && len <= self.max_chunk
            && reply + PLAIN_REPLY_HEADER_LEN <= th.recv as usize
            && reply <= self.reply_limit
            && !self.free_slots.is_empty()
            && t.sq.free() >= 1
            && req.msg.lkey().is_ok();
        if !plain || !self.credits.acquire_owned() {
            return None;
        }
        let slot = self.free_slots.pop()?;
        let xid = self.make_xid(slot);
        if let Some(x) = req.msg.storage_mut().first_chunk_mut::<4>() {
            *x = xid.to_be_bytes();
        }
        let credit = self.params.credits_requested;
        let s = &mut self.slots[slot as usize];
        if !stage_plain_send(t, s, slot, xid, credit, req.msg.as_slice()) {
            let _ = self.free_slots.push(slot);
            self.credits.release_owned();
            return None;
        }
        // A free slot holds no registration, buffer or list (`progress` emptied it when
        // it retired), so only what a call sets is written.
        let deadline = now.checked_add(req.timeout.unwrap_or(self.params.call_timeout));
        s.state = SlotState::Sent;
        s.xid = xid;
        s.tag = tag;
        s.reserved = 0;
        s.reply_cap = 0;
        s.deadline = deadline;
        s.holds_credit = true;
        s.plain = true;
        // Read only to send a call lost with its connection again.
        if self.hand_back {
            s.resend = Resend::of(req);
        }
        self.note_deadline(deadline);
        self.stats.calls_sent += 1;
        self.stats.call_messages += 1;
        Some(slot)
    }

    /// [`start_plain`](Self::start_plain)'s Send for a call the general path planned as
    /// plain ([`stage_plain`](Self::stage_plain)): on `slot`, which has send-queue room.
    #[inline]
    pub(super) fn stage_plain_msg(
        &mut self,
        t: &mut Transport,
        slot: u32,
        xid: u32,
        msg: &[u8],
    ) -> bool {
        let credit = self.params.credits_requested;
        stage_plain_send(t, &mut self.slots[slot as usize], slot, xid, credit, msg)
    }

    /// True when `slot` holds a plain call carrying `xid` that still waits for its
    /// reply: [`finish_plain`](Self::finish_plain) may take a chunkless RDMA_MSG
    /// reply naming `xid` for it (when no Send With Invalidate came with the reply:
    /// a plain call exposes no key).
    #[inline(always)]
    pub(super) fn awaits_plain(&self, slot: u32, xid: u32) -> bool {
        self.slots.get(slot as usize).is_some_and(|s| {
            s.plain && matches!(s.state, SlotState::Sent) && s.xid == xid && s.holds_credit
        })
    }

    /// Ends the plain call in `slot` ([`awaits_plain`](Self::awaits_plain)) with its
    /// reply `buf`, a chunkless RDMA_MSG granting `credit`: the credit comes back, the
    /// outcome is written where the outcome queue keeps it, and the slot is freed when
    /// its Send has completed (else by that completion, in `progress`).
    #[inline(always)]
    pub(super) fn finish_plain(&mut self, slot: u32, credit: u32, buf: RegBuf) {
        self.credits.set_granted(credit);
        self.stats.reply_messages += 1;
        #[cfg(feature = "testing")]
        {
            self.plain_replies += 1;
        }
        let s = &mut self.slots[slot as usize];
        s.holds_credit = false;
        s.plain = false;
        let xid = s.xid;
        if s.own_xid {
            s.own_xid = false;
            self.own_xids.remove(xid);
        }
        self.credits.release_owned();
        let len = buf.len().saturating_sub(MIN_MSG_HEADER_LEN);
        let status = status_of(buf.as_slice().get(MIN_MSG_HEADER_LEN..).unwrap_or(&[]));
        let msg = s.msg.take();
        let tag = s.tag;
        if s.wrs == 0 && s.reserved == 0 {
            s.state = SlotState::Free;
            let _ = self.free_slots.push(slot);
        } else {
            s.state = SlotState::Delivered;
            s.parked = true;
            self.parked += 1;
        }
        self.stats.outcomes += 1;
        // Capacity is slots plus queue length, and each call has one outcome in it at
        // most until the driver drains it, so this cannot be full. The outcome is made
        // in its place from constants and the three words already in registers, and
        // its two buffers are written into it after: built whole in one expression,
        // the buffers went through the stack twice on the way (about 40 instructions
        // per reply, engine/DESIGN.md "Requester: the plain path").
        if let Some(o) = self.outcomes.push_back_with(|| Outcome {
            tag,
            xid,
            status,
            reply: None,
            msg: None,
            ddp_args: DdpArgs::new(),
            write_sinks: WriteSinks::new(),
            resend: None,
        }) {
            let reply = Reply {
                buf,
                start: MIN_MSG_HEADER_LEN as u32,
                len: len as u32,
                padding: None,
            };
            put_over_none(&mut o.reply, Some(reply));
            put_over_none(&mut o.msg, msg);
        }
    }
}
