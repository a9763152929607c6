//! Message continuation, requester side (draft-dnoveck-rpcrdma-rtrext §4): a call sent
//! as a group of Sends (ROPT_XMTREQ then ROPT_XMTCONTs), and a reply received as a group
//! (ROPT_XMTRESP then ROPT_XMTCONTs) reassembled into one large buffer. See
//! `engine/DESIGN.md`, "Message continuation".

use std::time::Instant;

use super::slot::SlotState;
use super::RequesterHalf;
use crate::core::cont_split::Split;
use crate::core::regbuf::RegBuf;
use crate::core::transport::Transport;
use crate::core::wrid::{WrId, WrKind};
use crate::requester::{BadReply, CallRequest, CallStatus, Reply, TransportError, MAX_WRITE_SINKS};
use crate::wire::header::{FIXED_HEADER_LEN, WORD_LEN};
use crate::wire::private_data::CONTINUATION_GROUP_MAX;
use crate::wire::rtr::{
    MsgDir, OptxInfo, RtrBody, RtrOp, RtrRepr, RtrView, XmsId, XmtCont, XmtErr, ROPT_XMTCONT,
    ROPT_XMTREQ, ROPT_XMTRESP, XMTREQ_HEADER_LEN, XMTRESP_HEADER_LEN,
};

use crate::core::config::CONT_RECV_RESERVE;

/// Octets of a chunkless RDMA_MSG header: a call longer than inline less this is long.
pub(super) const PLAIN_HEADER_LEN: usize = FIXED_HEADER_LEN + 3 * WORD_LEN;

/// Octets a call's group headers take in the slot's header buffer, per transmission.
const HEADER_STRIDE: usize = 48;

/// What [`RequesterHalf::group_sent`] records of a group just staged.
pub(super) struct GroupSent {
    pub(super) xid: u32,
    pub(super) tag: u64,
    /// Transmissions in the group.
    pub(super) count: u32,
    /// Of them, staged (the rest the send queue refused).
    pub(super) staged: u32,
    /// Credits taken beyond the call's own.
    pub(super) extra: u32,
    /// Receives lent for the reply's continuations.
    pub(super) rsbuf: u32,
}

/// How a call goes by continuation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ContPlan {
    /// Transmissions of the call (`optxrq_count`).
    pub(super) count: u32,
    /// Receives lent for the reply's continuations (`optxrq_rsbuf`).
    pub(super) rsbuf: u32,
    /// Fewer credits than transmissions are free, but nothing is in flight: the group
    /// goes alone, holding every credit there is (the peer's XCHAR_REQRXLIM says it
    /// takes a group this long).
    pub(super) alone: bool,
}

/// What a received optional message says, out of its view.
// Built once per received optional message on the stack (the results of a send-based
// DDP reply are read in place).
#[allow(clippy::large_enum_variant)]
enum Msg {
    Resp {
        count: u32,
        /// The results of a send-based DDP reply (`None`: `optxrs_ddp` is empty).
        ddp: Option<Result<super::send_ddp::ReplyItems, OptxInfo>>,
    },
    Cont(XmtCont),
    Err(crate::wire::rtr::XmtErr),
    Req,
    Chars(crate::wire::rtr::TransportChars),
}

/// A reply group being received.
pub(super) struct ReplyAsm {
    pub(super) xid: u32,
    pub(super) slot: u32,
    pub(super) count: u32,
    pub(super) next: u32,
    pub(super) buf: Option<RegBuf>,
    pub(super) len: usize,
    pub(super) swi: Option<u32>,
    /// The results of a send-based DDP reply group and the segments landed so far
    /// (`requester/ddp_reply.rs`); `None` for a plain reply group.
    pub(super) ddp: Option<super::ddp_reply::DdpReplyAsm>,
}

/// Continuation state of a requester.
pub(super) struct ReqCont {
    /// Reserved receives not lent to any call.
    pub(super) reserve_free: u32,
    /// Receives lent to reply groups in progress, returned one per continuation.
    pub(super) lent_to_asm: u32,
    pub(super) asm: Option<ReplyAsm>,
    /// The last ROPT_XMTERR received (tests read it).
    pub(super) last_err: Option<crate::wire::rtr::XmtErr>,
}

impl ReqCont {
    pub(super) fn new(extensions: bool) -> Self {
        ReqCont {
            reserve_free: if extensions { CONT_RECV_RESERVE } else { 0 },
            lent_to_asm: 0,
            asm: None,
            last_err: None,
        }
    }
}

/// The payload section of a received message, by its place.
pub(super) fn payload_of(b: &RegBuf, off: usize, len: usize) -> &[u8] {
    b.as_slice().get(off..off + len).unwrap_or(&[])
}

/// The big-endian word at `at` (0 past the end).
fn word(buf: &[u8], at: usize) -> u32 {
    buf.get(at..at + 4)
        .map_or(0, |w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

fn div_ceil(a: usize, b: usize) -> usize {
    a.div_ceil(b.max(1))
}

impl RequesterHalf {
    /// The continuation shape for `req`, when both peers negotiated it and it beats a
    /// chunk: the call does not fit inline (its reply then comes as a group too when
    /// it may not fit inline), the call has no DDP
    /// arguments or Write sinks (ROPT_XMTREQ here carries no version 1 chunk lists), the
    /// group fits the peer's limits, enough credits are free now (the draft's §4.3:
    /// else a Position-Zero Read chunk), and enough reserved receives for the reply.
    pub(super) fn plan_cont(&self, t: &Transport, req: &CallRequest) -> Option<ContPlan> {
        // The backward direction is inline only (RFC 8167 §5): one message per call,
        // whatever the forward direction negotiated.
        if self.params.inline_only || !t.extensions.continuation || !t.peer_chars.continuation() {
            return None;
        }
        if req.ddp_args.iter().any(|a| !a.data.is_empty()) || !req.write_sinks.is_empty() {
            return None;
        }
        let th = t.thresholds;
        let plain_hdr = FIXED_HEADER_LEN + 3 * WORD_LEN;
        let call_inline = plain_hdr + req.msg.len() <= th.send as usize;
        let reply_max = req.max_reply_len as usize;
        let reply_inline = reply_max + plain_hdr <= th.recv as usize;
        // A call that fits inline goes as RDMA_MSG, with a Reply chunk when its reply
        // may not fit: that costs no round trip either, and keeps the reserved
        // receives for groups (DESIGN.md, "Message continuation").
        if call_inline {
            return None;
        }
        let per_call = (th.send as usize).checked_sub(XMTREQ_HEADER_LEN)?;
        let count = div_ceil(req.msg.len(), per_call).max(1) as u32;
        let limit = t.peer_chars.req_rx_limit.min(CONTINUATION_GROUP_MAX);
        let alone = count > self.credits.available();
        if count > limit || (alone && self.credits.in_flight() != 0) {
            return None;
        }
        if req.msg.len() > self.max_pull as usize || reply_max > self.max_pull as usize {
            return None;
        }
        let rsbuf = if reply_inline {
            0
        } else {
            let per_reply = (th.recv as usize).checked_sub(XMTRESP_HEADER_LEN)?;
            div_ceil(reply_max, per_reply) as u32 - 1
        };
        let resp_limit = t.peer_chars.resp_sx_limit.min(CONTINUATION_GROUP_MAX);
        if rsbuf + 1 > resp_limit || rsbuf > self.cont.reserve_free {
            return None;
        }
        Some(ContPlan {
            count,
            rsbuf,
            alone,
        })
    }

    /// Credits for the transmissions of a group of `count` beyond the first (whose
    /// credit the call already holds): how many were taken, or `None`, nothing taken,
    /// when they are not all free. A group that goes `alone` (nothing in flight, the
    /// peer's XCHAR_REQRXLIM taking a group this long) goes with every credit there is.
    pub(super) fn take_group_credits(&mut self, count: u32, alone: bool) -> Option<u32> {
        let mut extra = 0;
        while extra + 1 < count {
            if !self.credits.acquire_owned() {
                if alone {
                    break;
                }
                for _ in 0..extra {
                    self.credits.release_owned();
                }
                return None;
            }
            extra += 1;
        }
        Some(extra)
    }

    /// Stages `req` on `slot` as a continuation group of `cp.count` Sends; the caller
    /// holds one credit for it, the rest are taken here. False on any shortage, with
    /// nothing staged or taken.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn stage_cont(
        &mut self,
        t: &mut Transport,
        slot: u32,
        xid: u32,
        cp: ContPlan,
        req: &mut CallRequest,
        tag: u64,
        deadline: Option<Instant>,
        now: Instant,
    ) -> bool {
        let n = cp.count as usize;
        if t.sq.free() < cp.count || self.slots[slot as usize].header.capacity() < n * HEADER_STRIDE
        {
            return false;
        }
        let Some(extra) = self.take_group_credits(cp.count, cp.alone) else {
            return false;
        };
        if let Some(x) = req.msg.storage_mut().get_mut(..4) {
            x.copy_from_slice(&xid.to_be_bytes());
        }
        let per = t.thresholds.send as usize - XMTREQ_HEADER_LEN;
        let credit = self.params.credits_requested;
        let s = &mut self.slots[slot as usize];
        let split = Split {
            xid,
            credit,
            count: cp.count,
            per,
            len: req.msg.len(),
            headers: &mut s.header,
            stride: HEADER_STRIDE,
            body: &req.msg,
        };
        let (count, rsbuf) = (cp.count, cp.rsbuf);
        let lead = |pslen| RtrOp::XmtReq {
            count,
            rsbuf,
            pslen,
        };
        let Some(group) = split.cut(ROPT_XMTREQ, lead) else {
            for _ in 0..extra {
                self.credits.release_owned();
            }
            return false;
        };
        t.sq.take(cp.count);
        let staged = group.stage(t, WrId::new(WrKind::CallSend, slot).encode());
        t.sq.give(cp.count - staged);
        self.cont.reserve_free -= cp.rsbuf;
        let sent = GroupSent {
            xid,
            tag,
            count: cp.count,
            staged,
            extra,
            rsbuf: cp.rsbuf,
        };
        self.group_sent(slot, sent, req, deadline, now);
        true
    }

    /// Marks `slot` sent as a group (a continuation group, or send-based DDP's group of
    /// Sends): its state, the group's extra credits and lent receives, the counters.
    pub(super) fn group_sent(
        &mut self,
        slot: u32,
        g: GroupSent,
        req: &CallRequest,
        deadline: Option<Instant>,
        now: Instant,
    ) {
        let s = &mut self.slots[slot as usize];
        s.sent_without_chunks(
            g.xid,
            g.tag,
            g.staged,
            deadline,
            now,
            crate::requester::Resend::of(req),
        );
        s.cont_credits = g.extra;
        s.rsbuf = g.rsbuf;
        self.stats.calls_sent += 1;
        self.stats.cont_calls += u64::from(g.count > 1);
        self.stats.call_messages += u64::from(g.count);
    }

    #[cold]
    /// Gives back what a call holds for continuation beyond its first credit: the
    /// extra credits of its group, and the receives lent for its reply (those a reply
    /// group still expects stay lent until they arrive).
    pub(super) fn release_cont(&mut self, slot: u32) {
        let s = &mut self.slots[slot as usize];
        for _ in 0..s.cont_credits {
            self.credits.release_owned();
        }
        s.cont_credits = 0;
        self.cont.reserve_free += s.rsbuf;
        s.rsbuf = 0;
    }

    /// A received RDMA_OPTIONAL message.
    pub(super) fn on_optional(
        &mut self,
        t: &mut Transport,
        buf: RegBuf,
        swi: Option<u32>,
        now: Instant,
    ) {
        self.last_rx = Some(now);
        let view = match RtrView::parse(buf.as_slice()) {
            Ok(v) => v,
            Err(e) => {
                self.stats.bad_headers += 1;
                let bad = (word(buf.as_slice(), 0), None);
                t.recvs.recycle(buf);
                self.broken_reply_group_at(t, e.optx(), bad);
                return;
            }
        };
        self.stats.reply_messages += 1;
        // Plain values out of the view, so the receive buffer can move.
        let (xid, credit) = (view.xid, view.credit);
        let (poff, plen) = (view.header_len, view.payload.len());
        let body = match view.body {
            RtrBody::XmtResp(r) => Msg::Resp {
                count: r.count,
                ddp: (!r.ddp.is_empty()).then(|| super::send_ddp::ReplyItems::of(&r.ddp)),
            },
            RtrBody::XmtCont(c) => Msg::Cont(c),
            RtrBody::XmtErr(e) => Msg::Err(e),
            RtrBody::XmtReq(_) => Msg::Req,
            RtrBody::CharsUpdate(c) => Msg::Chars(c),
        };
        match body {
            Msg::Resp { count, ddp } => {
                if self.cont.asm.is_some() {
                    let info = OptxInfo::BadOmt {
                        expect: ROPT_XMTCONT,
                        current: ROPT_XMTRESP,
                    };
                    self.broken_reply_group_at(t, Some(info), (xid, Some(0)));
                }
                let slot = self.slot_for_reply(xid);
                let matched = self
                    .slots
                    .get(slot as usize)
                    .is_some_and(|s| s.state.in_use() && s.xid == xid && s.holds_credit);
                if !matched {
                    self.stats.unmatched += 1;
                    t.recvs.recycle(buf);
                    return;
                }
                self.credits.set_granted(credit);
                if let Some(items) = ddp {
                    let one = match &items {
                        Ok(i) => i.single().filter(|_| count == 1),
                        Err(_) => None,
                    };
                    if one.is_none() || self.slots[slot as usize].sinks.len() > 1 {
                        // Several results, or a result across transmissions
                        // (`requester/ddp_reply.rs`).
                        self.on_ddp_reply_first(
                            t,
                            slot,
                            (xid, count),
                            buf,
                            (poff, plen),
                            items,
                            swi,
                        );
                        return;
                    }
                    let item =
                        items.map(|i| i.single().unwrap_or(super::send_ddp::ReplyItem::NoItem));
                    // A send-based DDP reply (`requester/send_ddp.rs`) of one result in
                    // one transmission.
                    self.release_cont(slot);
                    self.release_credit(slot);
                    if self.slots[slot as usize].state.answered() {
                        drop(t.recvs.take_landed()); // back to the pool
                        t.recvs.recycle(buf);
                        self.stats.late_replies += 1;
                        self.progress(slot);
                        return;
                    }
                    let item = if count == 1 {
                        item
                    } else {
                        Err(OptxInfo::BadSeq {
                            expect: 1,
                            current: count,
                        })
                    };
                    if let Err((info, buf)) =
                        self.on_ddp_reply(t, slot, buf, (poff, plen), item, swi)
                    {
                        t.recvs.recycle(buf);
                        self.fail_call(t, slot, BadReply::Continuation(info), swi);
                        self.send_transmit_error(t, (xid, 0), None, info);
                    }
                    return;
                }
                let lent = self.slots[slot as usize].rsbuf;
                let bad = if count == 0 || count - 1 > lent {
                    Some(OptxInfo::BadSeq {
                        expect: lent + 1,
                        current: count,
                    })
                } else {
                    None
                };
                // The receives the rest of the group will use stay lent until they come.
                let expected = if bad.is_some() { 0 } else { count - 1 };
                self.slots[slot as usize].rsbuf -= expected;
                self.cont.lent_to_asm += expected;
                self.release_cont(slot);
                self.release_credit(slot);
                let late = self.slots[slot as usize].state.answered();
                let large = if late || bad.is_some() {
                    None
                } else {
                    RegBuf::from_cache(&mut self.large).ok()
                };
                let mut asm = ReplyAsm {
                    xid,
                    slot,
                    count,
                    next: 1,
                    buf: large,
                    len: 0,
                    swi,
                    ddp: None,
                };
                let copied = asm.append(payload_of(&buf, poff, plen));
                t.recvs.recycle(buf);
                if late {
                    self.stats.late_replies += 1;
                    self.progress(slot);
                } else if let Some(info) = bad {
                    self.fail_call(t, slot, BadReply::Continuation(info), swi);
                    self.send_transmit_error(t, (xid, 0), None, info);
                    return;
                } else if !copied {
                    let info = OptxInfo::BadPl {
                        value: plen as u32,
                        min: 0,
                        max: self.max_pull,
                    };
                    self.fail_call(t, slot, BadReply::Continuation(info), swi);
                    self.send_transmit_error(t, (xid, 0), None, info);
                    asm.buf = None;
                }
                if asm.count > 1 {
                    self.cont.asm = Some(asm);
                } else {
                    self.deliver(t, asm);
                }
            }
            Msg::Cont(c) => {
                // The DDP segment this transmission reached into, if it did (a send-based
                // DDP reply group's piece; anything else goes back to the pool).
                let landed = t.recvs.take_landed();
                let Some(asm) = self.cont.asm.as_mut() else {
                    self.stats.bad_continuations += 1;
                    t.recvs.recycle(buf);
                    return;
                };
                let err = if xid != asm.xid {
                    Some(OptxInfo::BadXid {
                        expect: asm.xid,
                        current: xid,
                    })
                } else if c.itype != ROPT_XMTRESP {
                    Some(OptxInfo::BadOmt {
                        expect: ROPT_XMTRESP,
                        current: c.itype,
                    })
                } else if c.xnum != asm.next {
                    Some(OptxInfo::BadSeq {
                        expect: asm.next,
                        current: c.xnum,
                    })
                } else {
                    None
                };
                if err.is_some() {
                    t.recvs.recycle(buf);
                    self.broken_reply_group_at(t, err, (xid, Some(c.xnum)));
                    return;
                }
                self.cont.lent_to_asm = self.cont.lent_to_asm.saturating_sub(1);
                self.cont.reserve_free += 1;
                asm.next += 1;
                if asm.buf.is_none() {
                    // A group being swallowed (its call already answered): counted off.
                    t.recvs.recycle(buf);
                    if asm.next == asm.count {
                        self.cont.asm = None;
                    }
                    return;
                }
                if asm.ddp.is_some() {
                    self.on_ddp_cont(t, c, buf, landed);
                    return;
                }
                let copied = asm.append(payload_of(&buf, poff, plen));
                t.recvs.recycle(buf);
                if !copied {
                    let info = OptxInfo::BadPl {
                        value: c.pslen,
                        min: 0,
                        max: self.max_pull,
                    };
                    self.broken_reply_group_at(t, Some(info), (xid, Some(c.xnum)));
                    return;
                }
                if asm.next == asm.count {
                    if let Some(asm) = self.cont.asm.take() {
                        self.deliver(t, asm);
                    }
                }
            }
            Msg::Err(e) => {
                t.recvs.recycle(buf);
                self.stats.transmit_errors_received += 1;
                self.cont.last_err = Some(e);
                // The group's lead names the call when the error was found later on.
                let xid = e.lead.map_or(e.bad.xid, |l| l.xid);
                let slot = self.slot_for_reply(xid);
                let in_flight = self.slots.get(slot as usize).is_some_and(|s| {
                    matches!(s.state, SlotState::Sent) && s.xid == xid && s.holds_credit
                });
                if in_flight {
                    self.release_cont(slot);
                    self.release_credit(slot);
                    let st = CallStatus::Transport(TransportError::TransmitError(e.info));
                    self.answer(t, slot, st, None, [0; MAX_WRITE_SINKS], None);
                }
            }
            Msg::Chars(c) => {
                // ROPT_XCHUPD: the peer's characteristics from now on (calls already
                // planned are not affected). Not part of any group: one inside a reply
                // group breaks it (§4.2).
                t.recvs.recycle(buf);
                self.stats.reply_messages -= 1;
                if self.cont.asm.is_some() {
                    let info = OptxInfo::BadOmt {
                        expect: ROPT_XMTCONT,
                        current: crate::wire::rtr::ROPT_XCHUPD,
                    };
                    self.broken_reply_group_at(t, Some(info), (xid, None));
                }
                t.update_peer_chars(c);
                self.stats.chars_updates += 1;
            }
            Msg::Req => {
                // A call, on a connection whose responder half is not this one.
                self.stats.bad_headers += 1;
                t.recvs.recycle(buf);
            }
        }
    }

    /// A reply group in progress is broken (`info`, or an unparseable message) by
    /// what arrived in its next place (a version 1 message): as
    /// [`broken_reply_group_at`](Self::broken_reply_group_at).
    pub(super) fn broken_reply_group(&mut self, t: &mut Transport, info: Option<OptxInfo>) {
        let bad = self.cont.asm.as_ref().map_or(0, |a| a.xid);
        self.broken_reply_group_at(t, info, (bad, None));
    }

    /// A reply group in progress is broken (`info`, or an unparseable message) by the
    /// transmission `bad` (its XID, and its transmission number when it has one, else
    /// the place it took in the group): the group's call fails with
    /// [`BadReply::Continuation`], the receives it still had lent come back, and the
    /// responder is told with ROPT_XMTERR (the draft's §5.4: the Transmit Error
    /// operation "needs to be supported by every endpoint that sends" these operations,
    /// "This includes cases in which the problem is one with a reply").
    pub(super) fn broken_reply_group_at(
        &mut self,
        t: &mut Transport,
        info: Option<OptxInfo>,
        bad: (u32, Option<u32>),
    ) {
        let Some(asm) = self.cont.asm.take() else {
            return;
        };
        self.stats.broken_reply_groups += 1;
        let left = asm.count.saturating_sub(asm.next);
        self.cont.lent_to_asm = self.cont.lent_to_asm.saturating_sub(left);
        self.cont.reserve_free += left;
        let slot = asm.slot;
        let live = self.slots.get(slot as usize).is_some_and(|s| {
            matches!(s.state, SlotState::Sent) && s.xid == asm.xid && asm.buf.is_some()
        });
        let (lead, next) = (asm.xid, asm.next);
        drop(asm);
        let info = info.unwrap_or(OptxInfo::BadCont);
        if live {
            self.fail_call(t, slot, BadReply::Continuation(info), None);
        }
        self.send_transmit_error(t, (bad.0, bad.1.unwrap_or(next)), Some(lead), info);
    }

    /// Sends ROPT_XMTERR about a reply transmission (`bad`: XID and transmission
    /// number; `lead`: the XID of the group it broke, if it was not the group's first).
    /// It goes like RDMA_DONE, from a DONE buffer and outside the credit window: it
    /// consumes one of the receives a responder posts beyond its credits when
    /// extensions are on (DESIGN.md, "The credit problem"), and nothing answers it.
    /// Diagnostic only (§5.4), so it is simply not sent when no DONE buffer or
    /// send-queue entry is free.
    pub(super) fn send_transmit_error(
        &mut self,
        t: &mut Transport,
        bad: (u32, u32),
        lead: Option<u32>,
        info: OptxInfo,
    ) {
        let err = XmtErr {
            bad: XmsId {
                xid: bad.0,
                dir: MsgDir::Reply,
                seq: bad.1,
            },
            lead: lead.map(|xid| XmsId {
                xid,
                dir: MsgDir::Reply,
                seq: 0,
            }),
            info,
        };
        let repr = RtrRepr {
            xid: lead.unwrap_or(bad.0),
            credit: self.params.credits_requested,
            op: RtrOp::XmtErr(err),
        };
        if self.stage_from_done_buf(t, |b| repr.encode(b).ok()) {
            self.stats.transmit_errors_sent += 1;
        }
    }

    /// The last ROPT_XMTERR received.
    #[cfg(feature = "testing")]
    pub(crate) fn last_transmit_error(&self) -> Option<crate::wire::rtr::XmtErr> {
        self.cont.last_err
    }

    /// True while a reply group is being received (a version 1 message now breaks it).
    #[inline]
    pub(super) fn reply_group_open(&self) -> bool {
        self.cont.asm.is_some()
    }

    pub(super) fn fail_call(
        &mut self,
        t: &mut Transport,
        slot: u32,
        why: BadReply,
        swi: Option<u32>,
    ) {
        if matches!(self.slots[slot as usize].state, SlotState::Sent) {
            let st = CallStatus::Transport(TransportError::BadReply(why));
            self.answer(t, slot, st, None, [0; MAX_WRITE_SINKS], swi);
        }
    }

    /// A whole reply group: delivered from its buffer (the one copy of continuation).
    fn deliver(&mut self, t: &mut Transport, asm: ReplyAsm) {
        let ReplyAsm {
            xid,
            slot,
            buf,
            len,
            swi,
            count,
            ..
        } = asm;
        let Some(buf) = buf else {
            return;
        };
        let live = self
            .slots
            .get(slot as usize)
            .is_some_and(|s| matches!(s.state, SlotState::Sent) && s.xid == xid);
        if !live {
            return;
        }
        self.stats.cont_replies += u64::from(count > 1);
        let reply = Reply {
            buf,
            start: 0,
            len: len as u32,
            padding: None,
        };
        let status = super::reply::status_of(reply.bytes());
        self.answer(t, slot, status, Some(reply), [0; MAX_WRITE_SINKS], swi);
    }
}

impl ReplyAsm {
    /// Appends a payload section; false when the buffer cannot hold it (or there is
    /// none: the group is being swallowed).
    pub(super) fn append(&mut self, payload: &[u8]) -> bool {
        let Some(b) = self.buf.as_mut() else {
            return false;
        };
        let end = self.len + payload.len();
        match b.storage_mut().get_mut(self.len..end) {
            Some(dst) => {
                dst.copy_from_slice(payload);
                self.len = end;
                b.set_len(end).is_ok()
            }
            None => false,
        }
    }
}
