//! Message continuation, responder side (draft-dnoveck-rpcrdma-rtrext §4): a call
//! received as a group (ROPT_XMTREQ then ROPT_XMTCONTs) is reassembled into one large
//! buffer and dispatched as a long call would be; a reply longer than the inline
//! threshold goes as a group (ROPT_XMTRESP then ROPT_XMTCONTs) into the receives the
//! requester lent (`optxrq_rsbuf`); a broken group is answered with ROPT_XMTERR.
//! See `engine/DESIGN.md`, "Message continuation".

use super::context::{Delivery, Step};
use super::send_ddp::{self, Placed, GROUP_MAX};
use super::{grant, ResponderHalf};
use crate::core::cont_split::Split;
use crate::core::fixed::FixedVec;
use crate::core::regbuf::RegBuf;
use crate::core::transport::Transport;
use crate::core::wrid::{WrId, WrKind};
use crate::fabric::SendOp;
use crate::service::Service;
use crate::wire::header::{
    BodyRepr, ChunkListsRepr, HeaderRepr, ReadSegment, Segment, FIXED_HEADER_LEN, WORD_LEN,
};
use crate::wire::private_data::CONTINUATION_GROUP_MAX;
use crate::wire::rtr::place::{DdpLayout, ReplyDirection, MAX_PLACED_ITEMS, MAX_REPLY_ITEMS};
use crate::wire::rtr::{
    MsgDir, OptxInfo, RtrBody, RtrOp, RtrRepr, RtrView, XmsId, XmtCont, XmtErr, RDMA_OPTIONAL,
    ROPT_XMTCONT, ROPT_XMTREQ, ROPT_XMTRESP, XMTRESP_HEADER_LEN,
};

/// Octets a reply group's headers take in the context's send buffer, per transmission.
const HEADER_STRIDE: usize = 40;

/// A call group being received.
pub(super) struct CallAsm {
    xid: u32,
    credit: u32,
    count: u32,
    next: u32,
    rsbuf: u32,
    /// The first transmission's receive buffer: becomes the call's header.
    first: RegBuf,
    buf: RegBuf,
    /// The bulk items placed by send-based DDP (none when `optxrq_ddp` is empty).
    placed: Placed,
    /// Per transmission, the DDP segment that landed with a piece of an item in it
    /// (kept until the group is whole; `responder/send_ddp.rs`).
    segs: [Option<RegBuf>; GROUP_MAX],
    /// The reply's bulk item is asked for by send-based DDP (`optxrq_rsd`).
    reply_ddp: Option<ReplyDirection>,
}

/// Continuation state of a responder.
#[derive(Default)]
pub(super) struct RespCont {
    /// This end offered continuation: before the passive side hears the connection is
    /// established, an RDMA_OPTIONAL is taken for one.
    pub(super) offered: bool,
    asm: Option<CallAsm>,
    /// The XID of the last group broken off: its later continuations are dropped
    /// silently (one ROPT_XMTERR per group).
    abandoned: Option<u32>,
}

impl RespCont {
    pub(super) fn new(offered: bool) -> Self {
        RespCont {
            offered,
            ..RespCont::default()
        }
    }
}

/// What a received optional message says, out of its view.
// Built once per received message on the stack; the placement is read in place.
#[allow(clippy::large_enum_variant)]
enum Msg {
    Req {
        count: u32,
        rsbuf: u32,
        /// The reply direction of `optxrq_rsd`, if any (`Err`: one not taken).
        rsd: Result<Option<ReplyDirection>, OptxInfo>,
        /// The placement of the items `optxrq_ddp` names (none when it is empty).
        placed: Result<Placed, OptxInfo>,
    },
    Cont(XmtCont),
    Resp,
    Err,
}

fn word(buf: &[u8], at: usize) -> u32 {
    buf.get(at..at + 4)
        .map_or(0, |w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

impl<S: Service> ResponderHalf<S> {
    /// A call group is being received.
    #[inline(always)]
    pub(super) fn cont_group_open(&self) -> bool {
        self.cont.asm.is_some()
    }

    /// Whether a receive is continuation traffic to handle here.
    #[inline]
    pub(super) fn takes_optional(&self, t: &Transport, buf: &[u8]) -> bool {
        let on = t.extensions.continuation
            || (self.cont.offered && t.state == crate::core::transport::ConnState::Connecting);
        on && crate::wire::rtr::is_optional(buf)
    }

    /// A version 1 message arrived: one in the middle of a call group breaks it
    /// (OPTXERR_BADHMT, §4.2: "without any intervening message").
    pub(super) fn intervening(&mut self, t: &mut Transport, buf: &[u8]) {
        if let Some(asm) = self.cont.asm.as_ref() {
            let (xid, seq) = (asm.xid, asm.next);
            let info = OptxInfo::BadHmt {
                expect: RDMA_OPTIONAL,
                current: word(buf, 12),
            };
            self.break_group(t, word(buf, 0), seq, Some(xid), info);
        }
    }

    /// A received RDMA_OPTIONAL message (continuation negotiated).
    pub(super) fn on_optional(&mut self, t: &mut Transport, buf: RegBuf) {
        self.stats.optional_messages += 1;
        let view = match RtrView::parse(buf.as_slice()) {
            Ok(v) => v,
            Err(e) => {
                let xid = word(buf.as_slice(), 0);
                t.recvs.recycle(buf);
                match e.optx() {
                    Some(info) => {
                        let seq = self.cont.asm.as_ref().map_or(0, |a| a.next);
                        let lead = self.cont.asm.as_ref().map(|a| a.xid);
                        self.break_group(t, xid, seq, lead, info);
                    }
                    None => self.stats.dropped += 1,
                }
                return;
            }
        };
        let (xid, credit) = (view.xid, view.credit);
        let (poff, plen) = (view.header_len, view.payload.len());
        let msg = match view.body {
            RtrBody::XmtReq(q) => Msg::Req {
                count: q.count,
                rsbuf: q.rsbuf,
                rsd: ReplyDirection::of(&q.rsd).and_then(|d| match d {
                    // A direction needs the requester's DDP segments (its
                    // XCHAR_RBSTRUCT): without them no segment number is valid.
                    Some(_)
                        if t.peer_chars
                            .recv_buf
                            .as_ref()
                            .and_then(DdpLayout::of)
                            .is_none() =>
                    {
                        Err(OptxInfo::BadTbsn {
                            value: 0,
                            min: 0,
                            max: 0,
                        })
                    }
                    d => Ok(d),
                }),
                placed: if q.ddp.is_empty() {
                    Ok(Placed::default())
                } else {
                    let rbs = t.recvs.segments.as_ref().map(|s| s.structure());
                    send_ddp::check(rbs, q.count, &q.ddp)
                },
            },
            RtrBody::XmtCont(c) => Msg::Cont(c),
            RtrBody::XmtResp(_) => Msg::Resp,
            RtrBody::XmtErr(_) => Msg::Err,
            RtrBody::CharsUpdate(c) => {
                t.recvs.recycle(buf);
                self.chars_update(t, xid, c);
                return;
            }
        };
        if matches!(msg, Msg::Req { .. } | Msg::Cont(_)) {
            // One credit per transmission (§4.3): the shared queue's ledger counts it.
            t.recvs.credit_msg();
        }
        match msg {
            Msg::Err => {
                // About a reply group of ours: nothing to recover, the requester failed
                // that call.
                self.stats.transmit_errors_received += 1;
                t.recvs.recycle(buf);
            }
            Msg::Resp => {
                t.recvs.recycle(buf);
                let info = OptxInfo::BadOmt {
                    expect: ROPT_XMTREQ,
                    current: ROPT_XMTRESP,
                };
                self.break_group(t, xid, 0, None, info);
            }
            Msg::Req {
                count,
                rsbuf,
                rsd,
                placed,
            } => {
                if let Some(a) = self.cont.asm.as_ref() {
                    let (lead, seq) = (a.xid, a.next);
                    let info = OptxInfo::BadOmt {
                        expect: ROPT_XMTCONT,
                        current: ROPT_XMTREQ,
                    };
                    self.break_group(t, xid, seq, Some(lead), info);
                }
                self.cont.abandoned = None;
                // The segment this transmission reached into, if it did: kept when a
                // piece of an item is there, else back to the pool.
                let landed = t.recvs.take_landed();
                let reply_ddp = rsd.as_ref().ok().copied().flatten();
                let mut first_seg = None;
                let bad = if let Err(info) = rsd {
                    // Reply directions other than one TBSN item are not taken
                    // (DESIGN.md, "Send-based DDP replies").
                    drop(landed); // back to the pool (`core/recv_segments.rs`)
                    Some(info)
                } else {
                    match placed.as_ref() {
                        Err(info) => {
                            drop(landed);
                            Some(*info)
                        }
                        Ok(p) => match send_ddp::keep_landed(p, 0, landed) {
                            Ok(seg) => {
                                first_seg = seg;
                                None
                            }
                            Err(info) => Some(info),
                        },
                    }
                };
                let placed = placed.unwrap_or_default();
                let bad = if bad.is_some() {
                    bad
                } else if count == 0 || count > CONTINUATION_GROUP_MAX {
                    Some(OptxInfo::BadSeq {
                        expect: CONTINUATION_GROUP_MAX,
                        current: count,
                    })
                } else {
                    None
                };
                if let Some(info) = bad {
                    t.recvs.recycle(buf);
                    drop(first_seg); // back to the pool (`core/recv_segments.rs`)
                    self.break_group(t, xid, 0, None, info);
                    self.cont.abandoned = Some(xid);
                    return;
                }
                let Ok(large) = RegBuf::from_cache(&mut self.large) else {
                    // No buffer for the call: as for a long call with no sink, the
                    // call's chunks cannot be processed (ERR_CHUNK), and the rest of
                    // its group is dropped.
                    t.recvs.recycle(buf);
                    drop(first_seg); // back to the pool (`core/recv_segments.rs`)
                    self.cont.abandoned = Some(xid);
                    self.error_reply(t, xid);
                    return;
                };
                let mut asm = CallAsm {
                    xid,
                    credit,
                    count,
                    next: 1,
                    rsbuf,
                    first: buf,
                    buf: large,
                    placed,
                    segs: core::array::from_fn(|_| None),
                    reply_ddp,
                };
                asm.segs[0] = first_seg;
                if !asm.append(poff, plen, None) {
                    let cap = asm.buf.capacity() as u32;
                    let CallAsm { first, buf, .. } = asm;
                    t.recvs.recycle(first);
                    buf.release_into(&mut self.large);
                    // The segments go back to the pool with `asm`.
                    let info = OptxInfo::BadPl {
                        value: plen as u32,
                        min: 0,
                        max: cap,
                    };
                    self.break_group(t, xid, 0, None, info);
                    self.cont.abandoned = Some(xid);
                    return;
                }
                if count == 1 {
                    self.complete(t, asm);
                } else {
                    self.cont.asm = Some(asm);
                }
            }
            Msg::Cont(c) => {
                // The DDP segment this transmission reached into, if it did.
                let landed = t.recvs.take_landed();
                let Some(asm) = self.cont.asm.as_mut() else {
                    drop(landed); // back to the pool (`core/recv_segments.rs`)
                    t.recvs.recycle(buf);
                    if self.cont.abandoned == Some(xid) {
                        self.stats.dropped += 1;
                    } else {
                        self.break_group(t, xid, c.xnum, None, OptxInfo::BadCont);
                    }
                    return;
                };
                let err = if xid != asm.xid {
                    Some(OptxInfo::BadXid {
                        expect: asm.xid,
                        current: xid,
                    })
                } else if c.itype != ROPT_XMTREQ {
                    Some(OptxInfo::BadOmt {
                        expect: ROPT_XMTREQ,
                        current: c.itype,
                    })
                } else if c.xnum != asm.next {
                    Some(OptxInfo::BadSeq {
                        expect: asm.next,
                        current: c.xnum,
                    })
                } else if !asm.append(poff, plen, Some(&buf)) {
                    Some(OptxInfo::BadPl {
                        value: c.pslen,
                        min: 0,
                        max: (asm.buf.capacity() - asm.buf.len()) as u32,
                    })
                } else {
                    // A piece of an item that did not land whole (a Send stopping
                    // short) breaks the group (§9.5 BADOFF).
                    let k = c.xnum as usize;
                    match send_ddp::keep_landed(&asm.placed, k, landed) {
                        Ok(seg) => {
                            if let Some(slot) = asm.segs.get_mut(k) {
                                *slot = seg;
                            }
                            None
                        }
                        Err(info) => Some(info),
                    }
                };
                t.recvs.recycle(buf);
                let lead = asm.xid;
                if let Some(info) = err {
                    self.break_group(t, xid, c.xnum, Some(lead), info);
                    return;
                }
                asm.next += 1;
                if asm.next == asm.count {
                    if let Some(asm) = self.cont.asm.take() {
                        self.complete(t, asm);
                    }
                }
            }
        }
    }

    /// Abandons the group in progress (if any) and tells the requester with
    /// ROPT_XMTERR: `xid`/`seq` name the transmission where the error was found,
    /// `lead` the group's XID when it began earlier.
    fn break_group(
        &mut self,
        t: &mut Transport,
        xid: u32,
        seq: u32,
        lead: Option<u32>,
        info: OptxInfo,
    ) {
        if let Some(asm) = self.cont.asm.take() {
            self.cont.abandoned = Some(asm.xid);
            t.recvs.recycle(asm.first);
            asm.buf.release_into(&mut self.large);
            // Its landed segments go back to the pool with `asm.segs`.
        }
        self.stats.broken_call_groups += 1;
        let err = XmtErr {
            bad: XmsId {
                xid,
                dir: MsgDir::Call,
                seq,
            },
            lead: lead.map(|l| XmsId {
                xid: l,
                dir: MsgDir::Call,
                seq: 0,
            }),
            info,
        };
        // The error goes to the group's call (its lead) when there is one. With no
        // context free it waits its turn like the call it answers (`hold`); then it
        // is sent at once or not at all (like a full send queue): a transmission
        // error is no call, so it does not wait for a header buffer.
        let answer = ErrorAnswer::XmtErr {
            xid: lead.unwrap_or(xid),
            err,
        };
        match self.take_ctx() {
            Some(i) => self.answer_in(t, i, answer),
            None => self.hold(t, super::Held::Answer(answer)),
        }
    }

    /// RDMA_ERROR ERR_CHUNK for `xid`, through a context of its own (held for one
    /// when none is free).
    fn error_reply(&mut self, t: &mut Transport, xid: u32) {
        let answer = ErrorAnswer::ErrChunk { xid };
        match self.take_ctx() {
            Some(i) => self.answer_in(t, i, answer),
            None => self.hold(t, super::Held::Answer(answer)),
        }
    }

    /// Sends `answer` with context `i`, just taken.
    pub(super) fn answer_in(&mut self, t: &mut Transport, i: u32, answer: ErrorAnswer) {
        match answer {
            ErrorAnswer::ErrChunk { xid } => {
                let c = &mut self.ctxs[i as usize];
                c.xid = xid;
                c.step = Step::Error(crate::wire::header::RdmaError::Chunk);
                self.run_in_order(t, i);
            }
            ErrorAnswer::XmtErr { xid, err } => {
                if t.state == crate::core::transport::ConnState::Connecting {
                    // A group broken before the CM reported establishment: nothing may be
                    // sent yet, so the error waits for it like a held call
                    // (`ResponderHalf::on_established` admits it) instead of being lost.
                    self.put_ctx(i);
                    self.hold(t, super::Held::Answer(ErrorAnswer::XmtErr { xid, err }));
                    return;
                }
                if self.stage_optional_in(t, i, xid, RtrOp::XmtErr(err)) == Optional::Staged {
                    self.stats.transmit_errors_sent += 1;
                }
            }
        }
    }

    /// A whole call group: its first receive becomes an RDMA_NOMSG header with one
    /// Position-Zero Read segment naming nothing (never read: the message is already
    /// in the context's first sink), so the call is dispatched exactly as a long call
    /// whose chunk was pulled. A bulk item placed by send-based DDP becomes one more
    /// Read segment naming nothing, at the item's position, whose sink is the DDP
    /// segment it landed in: the service sees it as a `DdpItem` like a pulled Read
    /// chunk, and the segment goes back to the large pool with the context.
    fn complete(&mut self, t: &mut Transport, asm: CallAsm) {
        // No free context: the group waits its turn like any call (`hold`).
        match self.take_ctx() {
            Some(i) => self.complete_in(t, i, asm),
            None => self.hold(t, super::Held::Group(asm)),
        }
    }

    /// Gives a whole call group's buffers back (it was held and is let go).
    pub(super) fn let_go_group(&mut self, t: &mut Transport, asm: CallAsm) {
        t.recvs.recycle(asm.first);
        asm.buf.release_into(&mut self.large);
        // Its landed segments go back to the pool with `asm.segs`.
    }

    /// [`complete`](Self::complete) with context `i`, just taken.
    pub(super) fn complete_in(&mut self, t: &mut Transport, i: u32, asm: CallAsm) {
        let CallAsm {
            xid,
            credit,
            rsbuf,
            mut first,
            buf,
            count,
            placed,
            mut segs,
            reply_ddp,
            ..
        } = asm;
        let mut seg = [ReadSegment {
            position: 0,
            segment: Segment::new(0, buf.len() as u32, 0),
        }; 1 + MAX_PLACED_ITEMS];
        let mut n_seg = 1;
        // Each item's segments, in order: its first becomes the item's sink, the rest
        // (an item across several transmissions) are kept beside the sinks, or gathered
        // into one large buffer for a service that takes only contiguous items.
        let seg_len = t.recvs.segments.as_ref().map_or(0, |s| s.seg_len());
        let segmented = self.service.takes_segmented_ddp_items();
        let mut items: FixedVec<(RegBuf, u8), MAX_PLACED_ITEMS> = FixedVec::new();
        let mut more: FixedVec<RegBuf, GROUP_MAX> = FixedVec::new();
        let mut ok = true;
        for it in placed.as_slice() {
            let mut left = it.len;
            let mut off = it.seg_off;
            let mut pieces: FixedVec<RegBuf, GROUP_MAX> = FixedVec::new();
            for k in it.transmissions() {
                let Some(mut s) = segs.get_mut(k).and_then(Option::take) else {
                    ok = false;
                    break;
                };
                let take = seg_len.saturating_sub(off).min(left);
                ok &= send_ddp::fit(&mut s, off, take).is_ok();
                left -= take;
                off = 0;
                let _ = pieces.push(s);
            }
            ok &= left == 0 && !pieces.is_empty();
            if !ok {
                break;
            }
            // Segments after the item's first kept beside the sinks (0: contiguous).
            let extra = if segmented { pieces.len() - 1 } else { 0 } as u8;
            let sink = if pieces.len() == 1 || segmented {
                let mut d = pieces.drain();
                let Some(head) = d.next() else { break };
                for s in d {
                    ok &= more.push(s).is_ok();
                }
                Some(head)
            } else {
                // The gather copy (DESIGN.md, "Items across segments").
                self.gather(&mut pieces, it.len)
            };
            let Some(sink) = sink else {
                ok = false;
                break;
            };
            seg[n_seg] = ReadSegment {
                position: it.disp,
                segment: Segment::new(0, it.len, 0),
            };
            n_seg += 1;
            if items.push((sink, extra)).is_err() {
                ok = false;
                break;
            }
        }
        // A reply direction becomes one Write chunk naming nothing, as long as the
        // requester's DDP segment: the service hands its result to it as to any Write
        // chunk, and `stage_ddp_reply` places it in the requester's segment instead.
        // With receives lent (`optxrq_rsbuf`), as long as the segments of the whole
        // group, one chunk per direction item (`responder/ddp_reply.rs`).
        let reply_seg = [Segment::new(
            0,
            t.peer_chars
                .recv_buf
                .as_ref()
                .and_then(DdpLayout::of)
                .map_or(0, |l| l.locate(0).2)
                .saturating_mul(rsbuf.min(CONTINUATION_GROUP_MAX - 1) + 1),
            0,
        )];
        let writes: [&[Segment]; MAX_REPLY_ITEMS as usize] = [&reply_seg; MAX_REPLY_ITEMS as usize];
        let n_writes = reply_ddp.map_or(0, |d| d.items.clamp(1, MAX_REPLY_ITEMS) as usize);
        let repr = HeaderRepr {
            xid,
            credit,
            body: BodyRepr::Nomsg(ChunkListsRepr {
                reads: &seg[..n_seg],
                writes: &writes[..n_writes],
                reply: None,
            }),
        };
        let encoded = repr
            .encode(first.storage_mut())
            .ok()
            .is_some_and(|n| first.set_len(n).is_ok());
        let c = &mut self.ctxs[i as usize];
        c.xid = xid;
        c.rsbuf = rsbuf;
        c.assembled = true;
        c.reply_ddp = reply_ddp;
        c.recv = Some(first);
        let _ = c.sinks.push(buf);
        for (k, (s, extra)) in items.drain().enumerate() {
            self.stats.send_ddp_items += 1;
            c.ddp_spans[k + 1] = extra;
            // Room for 1 + MAX_DDP_ITEMS sinks: every item's fits.
            if let Err(s) = c.sinks.push(s) {
                drop(s);
            }
        }
        if !more.is_empty() {
            // Once per context, the first time it takes such an item (`Context::ddp_more`).
            let list = c
                .ddp_more
                .get_or_insert_with(|| Box::new(super::context::DdpMore::new()));
            for s in more.drain() {
                if let Err(s) = list.push(s) {
                    drop(s);
                }
            }
        }
        c.step = if ok && encoded {
            Step::Dispatch
        } else {
            Step::Error(crate::wire::header::RdmaError::Chunk)
        };
        self.stats.cont_calls += u64::from(count > 1);
        self.run_in_order(t, i);
    }

    /// One item's `pieces` gathered, in order, into one large buffer (one copy) for a
    /// service that takes only contiguous items
    /// ([`Service::takes_segmented_ddp_items`](crate::service::Service::takes_segmented_ddp_items));
    /// the pieces go back to the pool. `None` when no large buffer is free or one is
    /// shorter than the item.
    fn gather(&mut self, pieces: &mut FixedVec<RegBuf, GROUP_MAX>, len: u32) -> Option<RegBuf> {
        let mut out = RegBuf::from_cache(&mut self.large).ok()?;
        if out.capacity() < len as usize {
            out.release_into(&mut self.large);
            return None;
        }
        let mut at = 0usize;
        for p in pieces.drain() {
            let n = p.len();
            if let Some(dst) = out.storage_mut().get_mut(at..at + n) {
                dst.copy_from_slice(p.as_slice());
            }
            at += n;
            // `p` back to the pool (`core/recv_segments.rs`).
        }
        let _ = out.set_len(at);
        Some(out)
    }

    /// Stages context `i`'s reply as a continuation group when the call lent receives
    /// for one, the reply does not fit inline and the group fits them. `None`: not
    /// this way (inline, or the usual fallbacks); `Some(progressed)` otherwise.
    pub(super) fn stage_cont_reply(&mut self, t: &mut Transport, i: u32) -> Option<bool> {
        let th = t.thresholds;
        let c = &self.ctxs[i as usize];
        if c.rsbuf == 0 || !t.extensions.continuation || !c.results.is_empty() {
            return None;
        }
        let Delivery::Body { len } = c.delivery else {
            return None;
        };
        let body = c.body.as_ref()?;
        let plain_hdr = FIXED_HEADER_LEN + 3 * WORD_LEN;
        if plain_hdr + len <= th.send as usize {
            return None;
        }
        let per = (th.send as usize).checked_sub(XMTRESP_HEADER_LEN)?;
        let m = len.div_ceil(per.max(1)) as u32;
        if m > c.rsbuf + 1 || m > CONTINUATION_GROUP_MAX || len > body.capacity() {
            return None;
        }
        if c.send.capacity() < m as usize * HEADER_STRIDE {
            return None;
        }
        if !t.sq.take(m) {
            return Some(false);
        }
        let credit = grant(&self.policy, t);
        let c = &mut self.ctxs[i as usize];
        let Some(body) = c.body.as_ref() else {
            t.sq.give(m);
            return None;
        };
        let split = Split {
            xid: c.xid,
            credit,
            count: m,
            per,
            len,
            headers: &mut c.send,
            stride: HEADER_STRIDE,
            body,
        };
        let lead = |pslen| RtrOp::XmtResp { count: m, pslen };
        let Some(group) = split.cut(ROPT_XMTRESP, lead) else {
            t.sq.give(m);
            c.step = Step::Error(crate::wire::header::RdmaError::Chunk);
            return Some(true);
        };
        let staged = group.stage(t, WrId::new(WrKind::ReplySend, i).encode());
        t.sq.give(m - staged);
        c.wrs += staged;
        c.step = Step::Sent;
        self.stats.cont_replies += 1;
        self.stats.cont_reply_messages += u64::from(m);
        Some(true)
    }

    /// ROPT_XCHUPD: the peer's characteristics from now on (groups already sent or
    /// begun are not affected). Not part of any group, so one arriving inside a call
    /// group breaks it (§4.2: "without any intervening message").
    fn chars_update(&mut self, t: &mut Transport, xid: u32, c: crate::wire::rtr::TransportChars) {
        if let Some((lead, next)) = self.cont.asm.as_ref().map(|a| (a.xid, a.next)) {
            let info = OptxInfo::BadOmt {
                expect: crate::wire::rtr::ROPT_XMTCONT,
                current: crate::wire::rtr::ROPT_XCHUPD,
            };
            self.break_group(t, xid, next, Some(lead), info);
        }
        t.update_peer_chars(c);
        self.stats.chars_updates += 1;
    }

    /// Stages ROPT_XCHUPD carrying `chars` (DESIGN.md, "Characteristics updates")
    /// through a context of its own, as a transmission error goes: into one of the
    /// receives a requester keeps beyond its credits for strays. False, with nothing
    /// staged, when no context, header buffer or send-queue entry is free.
    pub(crate) fn stage_chars_update(
        &mut self,
        t: &mut Transport,
        chars: crate::wire::rtr::TransportChars,
    ) -> bool {
        let staged = self.stage_optional(t, 0, RtrOp::CharsUpdate(chars)) == Optional::Staged;
        if staged {
            self.stats.chars_updates_sent += 1;
        }
        staged
    }

    /// Stages one RDMA_OPTIONAL message `op` to `xid`, answering no call, through a
    /// context of its own (freed by the Send's completion), at once or not at all: it
    /// does not wait for a header buffer or send-queue room.
    fn stage_optional(&mut self, t: &mut Transport, xid: u32, op: RtrOp) -> Optional {
        let Some(i) = self.take_ctx() else {
            return Optional::NoContext;
        };
        self.stage_optional_in(t, i, xid, op)
    }

    /// [`stage_optional`](Self::stage_optional) with context `i`, just taken (given
    /// back when nothing is staged).
    fn stage_optional_in(&mut self, t: &mut Transport, i: u32, xid: u32, op: RtrOp) -> Optional {
        if !t.is_open() || !self.has_header(i) || !t.sq.take(1) {
            self.put_ctx(i);
            return Optional::NotStaged;
        }
        let credit = grant(&self.policy, t);
        let c = &mut self.ctxs[i as usize];
        let repr = RtrRepr { xid, credit, op };
        let sge = repr
            .encode(c.send.storage_mut())
            .ok()
            .and_then(|n| c.send.sge(0, n).ok());
        let Some(sge) = sge else {
            t.sq.give(1);
            self.put_ctx(i);
            return Optional::NotStaged;
        };
        c.xid = xid;
        c.step = Step::Sent;
        let wr_id = WrId::new(WrKind::ReplySend, i).encode();
        if t.stage(wr_id, SendOp::Send, &[sge]) {
            c.wrs += 1;
            Optional::Staged
        } else {
            t.sq.give(1);
            self.release(t, i);
            Optional::NotStaged
        }
    }

    /// Returns the group in progress at connection end.
    pub(super) fn drop_group(&mut self, t: &mut Transport) {
        if let Some(asm) = self.cont.asm.take() {
            t.recvs.recycle(asm.first);
            asm.buf.release_into(&mut self.large);
            // Its landed segments go back to the pool with `asm.segs`.
        }
    }
}

/// An answer to a call that cannot be served, sent through a reply context of its
/// own (held for one like a call when none is free).
pub(super) enum ErrorAnswer {
    /// RDMA_ERROR ERR_CHUNK for the call `xid`.
    ErrChunk {
        /// The call's XID.
        xid: u32,
    },
    /// ROPT_XMTERR for a broken call group, to the group's call `xid`.
    XmtErr {
        /// The XID the error goes to.
        xid: u32,
        /// What was wrong.
        err: XmtErr,
    },
}

/// What [`ResponderHalf::stage_optional`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Optional {
    /// No reply context was free.
    NoContext,
    /// Closed, or no header buffer, send-queue room or encoding: nothing staged.
    NotStaged,
    /// Staged; the context is freed by the Send's completion.
    Staged,
}

impl CallAsm {
    /// Appends the payload section at `off..off + len` of `src` (of the first receive
    /// when `None`); false when the buffer cannot hold it.
    fn append(&mut self, off: usize, len: usize, src: Option<&RegBuf>) -> bool {
        let from = src.unwrap_or(&self.first);
        let Some(payload) = from.as_slice().get(off..off + len) else {
            return false;
        };
        let at = self.buf.len();
        let end = at + len;
        match self.buf.storage_mut().get_mut(at..end) {
            Some(dst) => {
                dst.copy_from_slice(payload);
                self.buf.set_len(end).is_ok()
            }
            None => false,
        }
    }
}
