//! Send-based DDP, requester side (draft-dnoveck-rpcrdma-rtrext §7): a call whose DDP
//! argument fits a DDP-targetable segment of the peer's advertised receive buffer
//! structure goes as one ROPT_XMTREQ whose `optxrq_ddp` places the argument by target
//! buffer segment number, instead of RDMA_MSG with a Read chunk: no registration, no
//! RDMA Read round trip, and the argument lands in the receiver's segment, which its
//! service gets without a copy. See `engine/DESIGN.md`, "Send-based DDP".

use std::time::Instant;

use super::RequesterHalf;
use crate::core::regbuf::RegBuf;
use crate::core::transport::Transport;
use crate::core::wrid::{WrId, WrKind};
use crate::fabric::{SendOp, Sge};
use crate::requester::{CallRequest, Reply, MAX_WRITE_SINKS};
use crate::wire::header::{FIXED_HEADER_LEN, WORD_LEN};
use crate::wire::rtr::place::{
    self, DdpLayout, Loc, MItem, ReplyDirection, TbsnLoc, MAX_ITEM_SEGMENTS,
};
use crate::wire::rtr::OptxInfo;

/// How a call goes by send-based DDP: one transmission carrying the payload stream, a
/// filler up to the peer's DDP segment, and the item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DdpPlan {
    /// Octets of the ROPT_XMTREQ header.
    header_len: u32,
    /// Filler between the payload stream and the item (§7.2's padding).
    filler: u32,
    /// The item's location to announce.
    loc: TbsnLoc,
}

/// An item of one segment number, at its start (all this planner makes).
fn one_segment(tbsn: u32) -> TbsnLoc {
    let mut bsnum = [0; MAX_ITEM_SEGMENTS];
    bsnum[0] = tbsn;
    TbsnLoc {
        offset: 0,
        n: 1,
        bsnum,
    }
}

impl RequesterHalf {
    /// The send-based DDP shape for `req`, when both peers negotiated the round-trip
    /// extensions, the peer advertised DDP-targetable receive segments, the call has
    /// exactly one DDP argument and no Write sink (ROPT_XMTREQ carries no version 1
    /// chunk lists), the argument fits the segment the first transmission reaches
    /// (`place::plan` with one transmission), and the reply fits inline (no receives
    /// are lent). Otherwise the call goes as before (a Read chunk).
    pub(super) fn plan_send_ddp(&self, t: &Transport, req: &CallRequest) -> Option<DdpPlan> {
        if self.params.inline_only || !t.extensions.continuation || !t.peer_chars.continuation() {
            return None;
        }
        let layout = DdpLayout::of(t.peer_chars.recv_buf.as_ref()?)?;
        let [arg] = req.ddp_args.as_slice() else {
            return None;
        };
        if !req.write_sinks.is_empty() || arg.data.is_empty() {
            return None;
        }
        let plain_hdr = FIXED_HEADER_LEN + 3 * WORD_LEN;
        if req.max_reply_len as usize + plain_hdr > t.thresholds.recv as usize {
            return None;
        }
        let len = u32::try_from(arg.data.len()).ok()?;
        // Only where it pays (DESIGN.md, "Shape choice").
        if len > self.params.send_ddp_max {
            return None;
        }
        let probe = MItem {
            disp: arg.position,
            length: len,
            loc: Loc::Tbsn(one_segment(0)),
        };
        let header_len = place::xmtreq_header_len(&[probe]) as u32;
        let payload = u32::try_from(req.msg.len()).ok()?;
        let p = place::plan(
            &layout,
            header_len,
            payload,
            crate::wire::rtr::XMTCONT_HEADER_LEN as u32,
            &[len],
            1,
        )
        .ok()?;
        let loc = p.locs[0];
        let (_, seg_off, _) = layout.locate(*loc.segments().first()?);
        let filler = seg_off.checked_sub(header_len + payload)?;
        // The filler is gathered from the item's own buffer (octets the peer gets
        // anyway): it must be that long.
        if filler as usize > arg.data.capacity() {
            return None;
        }
        Some(DdpPlan {
            header_len,
            filler,
            loc,
        })
    }

    /// Stages `req` on `slot` as one ROPT_XMTREQ placing its DDP argument by `p`; the
    /// caller holds the credit. False on any shortage, with nothing staged.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn stage_send_ddp(
        &mut self,
        t: &mut Transport,
        slot: u32,
        xid: u32,
        p: DdpPlan,
        req: &mut CallRequest,
        tag: u64,
        deadline: Option<Instant>,
        now: Instant,
    ) -> bool {
        let Some(arg) = req.ddp_args.as_slice().first() else {
            return false;
        };
        if t.sq.free() < 1 {
            return false;
        }
        if let Some(x) = req.msg.storage_mut().get_mut(..4) {
            x.copy_from_slice(&xid.to_be_bytes());
        }
        let item = MItem {
            disp: arg.position,
            length: arg.data.len() as u32,
            loc: Loc::Tbsn(p.loc),
        };
        let credit = self.params.credits_requested;
        let s = &mut self.slots[slot as usize];
        let Some(hlen) = s
            .header
            .storage_mut()
            .get_mut(..p.header_len as usize)
            .and_then(|b| {
                place::encode_xmtreq(b, xid, credit, 1, 0, req.msg.len() as u32, &[item]).ok()
            })
        else {
            return false;
        };
        let sges = (
            s.header.sge(0, hlen),
            req.msg.sge(0, req.msg.len()),
            arg.data.sge(0, p.filler as usize),
            arg.data.sge(0, arg.data.len()),
        );
        let (Ok(h), Ok(m), Ok(f), Ok(d)) = sges else {
            return false;
        };
        let mut sgl = [Sge::default(); 4];
        let mut n = 0;
        for e in [h, m, f, d] {
            if e.length > 0 {
                sgl[n] = e;
                n += 1;
            }
        }
        if !self.stage_one_send(t, slot, &sgl[..n], xid, req, tag, deadline, now) {
            return false;
        }
        self.stats.send_ddp_items += 1;
        true
    }

    /// Stages a call's one Send of `sgl` on `slot` and marks the slot sent without
    /// chunks, one message and no continuation credits (both send-based DDP shapes).
    /// False, with nothing staged, when the send queue refuses it.
    #[allow(clippy::too_many_arguments)]
    fn stage_one_send(
        &mut self,
        t: &mut Transport,
        slot: u32,
        sgl: &[Sge],
        xid: u32,
        req: &CallRequest,
        tag: u64,
        deadline: Option<Instant>,
        now: Instant,
    ) -> bool {
        t.sq.take(1);
        if !t.stage(
            WrId::new(WrKind::CallSend, slot).encode(),
            SendOp::Send,
            sgl,
        ) {
            t.sq.give(1);
            return false;
        }
        let s = &mut self.slots[slot as usize];
        s.sent_without_chunks(
            xid,
            tag,
            1,
            deadline,
            now,
            crate::requester::Resend::of(req),
        );
        s.cont_credits = 0;
        s.rsbuf = 0;
        self.stats.calls_sent += 1;
        self.stats.call_messages += 1;
        true
    }
}

/// The `xmdrsdi_minlen` a requester asks for, at most: a reply item shorter than this
/// comes back in the payload stream (XMDTYPE_TOOSHORT), where copying it costs less
/// than the filler that would carry it to a segment.
pub(super) const REPLY_DDP_MINLEN: u32 = 1024;

/// How a call asks for its reply's bulk item by send-based DDP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ReplyDdpPlan {
    /// Octets of the ROPT_XMTREQ header.
    header_len: u32,
    /// The direction to send.
    dir: ReplyDirection,
}

impl RequesterHalf {
    /// The send-based DDP shape for `req`'s reply (draft §7.4), when the round-trip
    /// extensions are negotiated, the peer sends such replies (`RTRS_SDDP_REPLY`), this
    /// end posts DDP segments and advertised them, the call has exactly one Write sink
    /// and no DDP argument, the sink fits one segment (the expected item fits), the call
    /// fits inline as a ROPT_XMTREQ, and the reply's payload fits the header segment.
    /// Otherwise the call goes as before (a Write chunk).
    pub(super) fn plan_reply_ddp(&self, t: &Transport, req: &CallRequest) -> Option<ReplyDdpPlan> {
        if self.params.inline_only
            || !t.extensions.continuation
            || !t.peer_chars.sends_ddp_replies()
            || !req.ddp_args.is_empty()
        {
            return None;
        }
        if !t.recv_structure_sent {
            return None;
        }
        let own = t.recvs.segments.as_ref()?.structure();
        let layout = DdpLayout::of(&own)?;
        let [sink] = req.write_sinks.as_slice() else {
            return None;
        };
        let (_, head, seg_len) = layout.locate(0);
        if sink.capacity() > seg_len as usize
            || sink.capacity() > self.params.send_ddp_reply_max as usize
        {
            return None;
        }
        // The reply's header and payload land before the segment; what room is left
        // bounds the item that may come back inline (TOOSHORT).
        let room = (head as usize)
            .checked_sub(crate::wire::rtr::XMTRESP_HEADER_LEN + 24)?
            .checked_sub(req.max_reply_len as usize)?;
        let minlen = REPLY_DDP_MINLEN.min(room as u32) & !3;
        let msg_len = u32::try_from(req.msg.len()).ok()?;
        let dir = ReplyDirection {
            begin: 0,
            end: msg_len,
            minlen,
        };
        let header_len = place::xmtreq_rsd_header_len(&[], Some(&dir));
        if header_len + req.msg.len() > t.thresholds.send as usize {
            return None;
        }
        Some(ReplyDdpPlan {
            header_len: header_len as u32,
            dir,
        })
    }

    /// Stages `req` on `slot` as one ROPT_XMTREQ asking for its reply's bulk item by
    /// `p`; its Write sink is neither registered nor offered (the outcome hands back
    /// the receive segment the item landed in instead). The caller holds the credit.
    /// False on any shortage, with nothing staged.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn stage_reply_ddp(
        &mut self,
        t: &mut Transport,
        slot: u32,
        xid: u32,
        p: ReplyDdpPlan,
        req: &mut CallRequest,
        tag: u64,
        deadline: Option<Instant>,
        now: Instant,
    ) -> bool {
        if t.sq.free() < 1 {
            return false;
        }
        if let Some(x) = req.msg.storage_mut().get_mut(..4) {
            x.copy_from_slice(&xid.to_be_bytes());
        }
        let credit = self.params.credits_requested;
        let s = &mut self.slots[slot as usize];
        let Some(hlen) = s
            .header
            .storage_mut()
            .get_mut(..p.header_len as usize)
            .and_then(|b| {
                let pslen = req.msg.len() as u32;
                place::encode_xmtreq_rsd(b, xid, credit, 1, 0, pslen, &[], Some(&p.dir)).ok()
            })
        else {
            return false;
        };
        let (Ok(h), Ok(m)) = (s.header.sge(0, hlen), req.msg.sge(0, req.msg.len())) else {
            return false;
        };
        if !self.stage_one_send(t, slot, &[h, m], xid, req, tag, deadline, now) {
            return false;
        }
        self.slots[slot as usize].reply_ddp = true;
        self.stats.send_ddp_reply_asks += 1;
        true
    }

    /// The one result of a reply to a call that asked for its bulk item by send-based
    /// DDP (`slot`, one transmission: it lent no receives), whose payload stream is
    /// `poff..poff + plen` of `buf`. §7.4: the result is XMDTYPE_TBSN (checked against
    /// this end's structure; the segment it landed in becomes the call's Write sink in
    /// the outcome, with no copy), XMDTYPE_TOOSHORT (the item is in the payload stream:
    /// the sink comes back empty, which a reader of the reply takes as "inline") or
    /// XMDTYPE_NOITEM (no item). Anything else fails the call with the Transmit Error
    /// it is answered with.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_ddp_reply(
        &mut self,
        t: &mut Transport,
        slot: u32,
        buf: RegBuf,
        (poff, plen): (usize, usize),
        item: Result<ReplyItem, OptxInfo>,
        swi: Option<u32>,
    ) -> Result<(), (OptxInfo, RegBuf)> {
        let landed = t.recvs.take_landed();
        let asked = self.slots[slot as usize].reply_ddp;
        let refuse = OptxInfo::BadTbsn {
            value: 0,
            min: 0,
            max: 0,
        };
        let item = match item {
            Ok(i) if asked => i,
            Ok(_) => return Err((refuse, buf)),
            Err(info) => return Err((info, buf)),
        };
        let mut lens = [0u32; MAX_WRITE_SINKS];
        let mut seg_for_sink = None;
        match item {
            ReplyItem::Placed { length, loc } => {
                let Some(layout) = t
                    .recvs
                    .segments
                    .as_ref()
                    .and_then(|s| DdpLayout::of(&s.structure()))
                else {
                    return Err((refuse, buf));
                };
                let pieces = match layout.check(1, length, &loc) {
                    Ok(p) => p,
                    Err(info) => return Err((info, buf)),
                };
                let [(0, off, _)] = pieces.as_slice() else {
                    // One segment per receive here: an item across two cannot be.
                    return Err((refuse, buf));
                };
                let cap = self.slots[slot as usize]
                    .sinks
                    .as_slice()
                    .first()
                    .map_or(0, |b| b.capacity());
                if length as usize > cap {
                    // Longer than the Write sink the caller offered for it.
                    return Err((
                        OptxInfo::BadOff {
                            value: length,
                            min: 0,
                            max: cap as u32,
                        },
                        buf,
                    ));
                }
                let Some(mut seg) = landed else {
                    return Err((
                        OptxInfo::BadOff {
                            value: length,
                            min: 0,
                            max: 0,
                        },
                        buf,
                    ));
                };
                let seg_start = layout
                    .locate(loc.segments().first().copied().unwrap_or(0))
                    .1;
                if let Err(info) = fit_item(&mut seg, off - seg_start, length) {
                    return Err((info, buf));
                }
                lens[0] = length;
                seg_for_sink = Some(seg);
                self.stats.send_ddp_reply_items += 1;
            }
            ReplyItem::TooShort => self.stats.ddp_replies_too_short += 1,
            ReplyItem::NoItem => self.stats.ddp_replies_no_item += 1,
        }
        if let Some(seg) = seg_for_sink {
            // The caller's sink goes back to its pool; the segment takes its place.
            if let Some(sink) = self.slots[slot as usize].sinks.get_mut(0) {
                drop(core::mem::replace(sink, seg));
            }
        }
        let reply = Reply {
            buf,
            start: poff as u32,
            len: plen as u32,
            padding: None,
        };
        let status = super::reply::status_of(reply.bytes());
        self.answer(t, slot, status, Some(reply), lens, swi);
        Ok(())
    }
}

/// A reply direction's result, out of the message's view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReplyItem {
    /// XMDTYPE_TBSN.
    Placed {
        /// `xmdmi_length`.
        length: u32,
        /// Where.
        loc: TbsnLoc,
    },
    /// XMDTYPE_TOOSHORT.
    TooShort,
    /// XMDTYPE_NOITEM.
    NoItem,
}

impl ReplyItem {
    /// The one result of an `optxrs_ddp` (the requester sends one direction, and
    /// §7.4 gives "for each xmddp_rsditem ... a corresponding xmddp_mitem"): more or
    /// fewer, or an explicit-RDMA result it never asked for, is BADTBSN 0..0.
    pub(super) fn of(ddp: &crate::wire::rtr::DdpArray<'_>) -> Result<Self, OptxInfo> {
        let refuse = OptxInfo::BadTbsn {
            value: 0,
            min: 0,
            max: 0,
        };
        let mut items = ddp.mitems();
        let (Some(Ok(m)), None) = (items.next(), items.next()) else {
            return Err(refuse);
        };
        match m.loc {
            Loc::Tbsn(loc) => Ok(ReplyItem::Placed {
                length: m.length,
                loc,
            }),
            Loc::TooShort => Ok(ReplyItem::TooShort),
            Loc::NoItem => Ok(ReplyItem::NoItem),
            Loc::Exrw { .. } => Err(refuse),
        }
    }
}

/// Makes the landed segment `seg` hold exactly the item of `len` octets that starts
/// `off` octets into it (moved to its start when a sender placed it at an offset).
/// BADOFF when fewer octets landed than the item needs.
pub(crate) fn fit_item(seg: &mut RegBuf, off: u32, len: u32) -> Result<(), OptxInfo> {
    let (off, len) = (off as usize, len as usize);
    let landed = seg.len();
    if off + len > landed {
        return Err(OptxInfo::BadOff {
            value: len as u32,
            min: 0,
            max: landed.saturating_sub(off) as u32,
        });
    }
    if off > 0 {
        seg.storage_mut().copy_within(off..off + len, 0);
    }
    seg.set_len(len).map_err(|_| OptxInfo::BadOff {
        value: len as u32,
        min: 0,
        max: landed as u32,
    })
}
