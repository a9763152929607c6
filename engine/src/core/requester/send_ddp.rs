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
use crate::wire::private_data::CONTINUATION_GROUP_MAX;
use crate::wire::rtr::place::{
    self, DdpLayout, Loc, MItem, ReplyDirection, TbsnLoc, MAX_ITEM_SEGMENTS, MAX_PLACED_ITEMS,
    MAX_REPLY_ITEMS,
};
use crate::wire::rtr::{OptxInfo, RtrOp, RtrRepr, XmtCont, ROPT_XMTREQ};

/// How a call goes by send-based DDP: a group of `place.count` transmissions (one
/// when the items fit the first's segments), the first carrying the payload stream,
/// every one a filler up to each DDP segment it fills and that segment's piece of an
/// item (draft §6.2, §7.2, §9.4: continuations carry bulk only, `pslen` 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DdpPlan {
    /// The peer's layout the placement was made for.
    layout: DdpLayout,
    /// Where each item goes, and each transmission's length.
    place: place::Placement,
    /// Fewer credits than transmissions are free, but nothing is in flight: the group
    /// goes alone (as a continuation group does, `cont.rs`).
    alone: bool,
}

/// Most gather entries one transmission of a send-based DDP group takes: header,
/// payload stream, filler, item piece (the send queue's `max_send_sge` with extensions
/// on). A peer structure needing more (several DDP segments per buffer with gaps) is
/// not placed.
const SGES_PER_SEND: usize = 4;

/// Octets of a continuation's header in a send-based DDP group.
const CONT_HEADER: u32 = crate::wire::rtr::XMTCONT_HEADER_LEN as u32;

/// An item of no segment, at offset 0 (a probe for header lengths).
fn probe_loc(n: usize) -> TbsnLoc {
    TbsnLoc {
        offset: 0,
        n: n.min(MAX_ITEM_SEGMENTS) as u8,
        bsnum: [0; MAX_ITEM_SEGMENTS],
    }
}

/// The `xmddp_mitem`s of `req`'s DDP arguments located by `locs`.
fn mitems<'a>(
    req: &CallRequest,
    locs: impl Fn(usize) -> TbsnLoc,
    out: &'a mut [MItem<'static>; MAX_PLACED_ITEMS],
) -> &'a [MItem<'static>] {
    let n = req.ddp_args.len().min(MAX_PLACED_ITEMS);
    for (i, (a, m)) in req.ddp_args.iter().zip(out.iter_mut()).enumerate() {
        *m = MItem {
            disp: a.position,
            length: a.data.len() as u32,
            loc: Loc::Tbsn(locs(i)),
        };
    }
    &out[..n]
}

/// A transmission's gather list: (argument index or `None` for the header/payload,
/// offset, length) entries are resolved at staging.
#[derive(Debug, Clone, Copy, Default)]
struct Piece {
    /// The argument whose octets go here.
    arg: usize,
    /// Octets of filler before it (gathered from the argument's own buffer).
    filler: u32,
    /// Offset in the argument.
    from: u32,
    /// Octets.
    len: u32,
}

/// The pieces of transmission `k`, in order, after its header (and, for the first,
/// the payload stream ending at `at`). `None` when one needs more gather entries than
/// a Send takes, or a filler is longer than the buffer it is gathered from.
fn pieces_of(
    p: &DdpPlan,
    req: &CallRequest,
    k: u32,
    mut at: u32,
    out: &mut [Piece; SGES_PER_SEND],
) -> Option<usize> {
    let mut n = 0usize;
    for (i, a) in req
        .ddp_args
        .iter()
        .enumerate()
        .take(usize::from(p.place.items))
    {
        let len = a.data.len() as u32;
        let pieces = p.layout.check(p.place.count, len, &p.place.locs[i]).ok()?;
        let mut from = 0u32;
        for &(tx, off, plen) in pieces.as_slice() {
            if tx == k {
                let filler = off.checked_sub(at)?;
                if filler as usize > a.data.capacity() {
                    return None;
                }
                *out.get_mut(n)? = Piece {
                    arg: i,
                    filler,
                    from,
                    len: plen,
                };
                n += 1;
                at = off + plen;
            }
            from += plen;
        }
    }
    Some(n)
}

impl RequesterHalf {
    /// The send-based DDP shape for `req`, when both peers negotiated the round-trip
    /// extensions, the peer advertised DDP-targetable receive segments, every DDP
    /// argument is non-empty and no longer than `send_ddp_max` and there is no Write
    /// sink (ROPT_XMTREQ carries no version 1 chunk lists), the reply fits inline (no
    /// receives are lent), and the arguments fit the segments of a group the peer takes
    /// (its XCHAR_REQRXLIM, at most 16) whose credits are free now (§4.3, as for a
    /// continuation group: else a Read chunk). An argument longer than a segment fills
    /// successive segments, in later transmissions of the group when the peer's buffers
    /// have one segment each (§6.2); several arguments each start at a fresh segment.
    /// Otherwise the call goes as before (Read chunks).
    pub(super) fn plan_send_ddp(&self, t: &Transport, req: &CallRequest) -> Option<DdpPlan> {
        if self.params.inline_only || !t.extensions.continuation || !t.peer_chars.continuation() {
            return None;
        }
        let layout = DdpLayout::of(t.peer_chars.recv_buf.as_ref()?)?;
        let args = req.ddp_args.as_slice();
        if args.is_empty() || args.len() > MAX_PLACED_ITEMS || !req.write_sinks.is_empty() {
            return None;
        }
        let plain_hdr = FIXED_HEADER_LEN + 3 * WORD_LEN;
        if req.max_reply_len as usize + plain_hdr > t.thresholds.recv as usize {
            return None;
        }
        let mut lens = [0u32; MAX_PLACED_ITEMS];
        for (l, a) in lens.iter_mut().zip(args) {
            let len = u32::try_from(a.data.len()).ok()?;
            // Only where it pays (DESIGN.md, "Shape choice").
            if len == 0 || len > self.params.send_ddp_max {
                return None;
            }
            *l = len;
        }
        let lens = &lens[..args.len()];
        let max_count = t.peer_chars.req_rx_limit.min(CONTINUATION_GROUP_MAX);
        let payload = u32::try_from(req.msg.len()).ok()?;
        // The first header's length depends on the segment numbers it lists: planned
        // with a guess (each item's segments if all were the first's length), then
        // again with the real length if that was longer. A shorter real header only
        // lengthens the first filler.
        let (_, _, seg0) = layout.locate(0);
        let mut store = [MItem {
            disp: 0,
            length: 0,
            loc: Loc::NoItem,
        }; MAX_PLACED_ITEMS];
        let mut guess = place::xmtreq_header_len(mitems(
            req,
            |i| probe_loc(lens[i].div_ceil(seg0.max(1)) as usize),
            &mut store,
        )) as u32;
        let mut planned = None;
        for _ in 0..2 {
            let p = place::plan(&layout, guess, payload, CONT_HEADER, lens, max_count).ok()?;
            let real = place::xmtreq_header_len(mitems(req, |i| p.locs[i], &mut store)) as u32;
            if real <= guess {
                planned = Some(p);
                break;
            }
            guess = real;
        }
        let place = planned?;
        // The payload stream stays in the first transmission's header segment: a
        // responder reads it from the receive buffer, never from a DDP segment
        // (DESIGN.md, "Items across segments"). A longer call goes as a group or by
        // Read chunks.
        if guess + payload > layout.locate(0).1 {
            return None;
        }
        let count = place.count;
        // A group of Sends measured slower than a Read chunk on shm and siw (DESIGN.md,
        // "Items across segments": the responder's Sends per segment and, for a
        // service that takes contiguous items, the gather copy): by the device's
        // default only what one transmission carries goes by send-based DDP; a group
        // only with `send_ddp_max` set by hand.
        if count > 1 && !self.params.send_ddp_max_set {
            return None;
        }
        let alone = count > self.credits.available();
        if alone && self.credits.in_flight() != 0 {
            return None;
        }
        let header_room = self.slots.first().map_or(0, |s| s.header.capacity());
        if guess as usize + (count as usize - 1) * CONT_HEADER as usize > header_room {
            return None;
        }
        let plan = DdpPlan {
            layout,
            place,
            alone,
        };
        // Every transmission's gather list fits a Send.
        let mut scratch = [Piece::default(); SGES_PER_SEND];
        for k in 0..count {
            let (at, fixed) = if k == 0 {
                (guess + payload, 2)
            } else {
                (CONT_HEADER, 1)
            };
            let n = pieces_of(&plan, req, k, at, &mut scratch)?;
            let fillers = scratch[..n].iter().filter(|p| p.filler > 0).count();
            if fixed + n + fillers > SGES_PER_SEND {
                return None;
            }
        }
        Some(plan)
    }

    /// Stages `req` on `slot` as a group of ROPT_XMTREQ (+ ROPT_XMTCONTs) placing its
    /// DDP arguments by `p`, all in one chain (§4.2: nothing intervenes); the caller
    /// holds one credit, the group's others are taken here. False on any shortage,
    /// with nothing staged or taken.
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
        let count = p.place.count;
        if t.sq.free() < count {
            return false;
        }
        let Some(extra) = self.take_group_credits(count, p.alone) else {
            return false;
        };
        let give_back = |me: &mut Self| {
            for _ in 0..extra {
                me.credits.release_owned();
            }
        };
        if let Some(x) = req.msg.storage_mut().get_mut(..4) {
            x.copy_from_slice(&xid.to_be_bytes());
        }
        let credit = self.params.credits_requested;
        let mut store = [MItem {
            disp: 0,
            length: 0,
            loc: Loc::NoItem,
        }; MAX_PLACED_ITEMS];
        let items = mitems(req, |i| p.place.locs[i], &mut store);
        let pslen = req.msg.len() as u32;
        let s = &mut self.slots[slot as usize];
        let Some(hlen) = s
            .header
            .storage_mut()
            .get_mut(..)
            .and_then(|b| place::encode_xmtreq(b, xid, credit, count, 0, pslen, items).ok())
        else {
            give_back(self);
            return false;
        };
        // Every transmission's gather list, built before anything is staged.
        let mut sgls = [[Sge::default(); SGES_PER_SEND]; CONTINUATION_GROUP_MAX as usize];
        let mut lens = [0usize; CONTINUATION_GROUP_MAX as usize];
        let mut ok = true;
        for k in 0..count {
            let s = &mut self.slots[slot as usize];
            let (at, head) = if k == 0 {
                (hlen as u32 + pslen, s.header.sge(0, hlen).ok())
            } else {
                let off = hlen + (k as usize - 1) * CONT_HEADER as usize;
                let repr = RtrRepr {
                    xid,
                    credit,
                    op: RtrOp::XmtCont(XmtCont {
                        xnum: k,
                        itype: ROPT_XMTREQ,
                        pslen: 0,
                    }),
                };
                let n = s
                    .header
                    .storage_mut()
                    .get_mut(off..off + CONT_HEADER as usize)
                    .and_then(|b| repr.encode(b).ok());
                (CONT_HEADER, n.and_then(|n| s.header.sge(off, n).ok()))
            };
            let sgl = &mut sgls[k as usize];
            let mut n = 0usize;
            let mut push = |e: Option<Sge>, n: &mut usize| match e {
                Some(e) if e.length == 0 => true,
                Some(e) if *n < SGES_PER_SEND => {
                    sgl[*n] = e;
                    *n += 1;
                    true
                }
                _ => false,
            };
            ok &= push(head, &mut n);
            if k == 0 {
                ok &= push(req.msg.sge(0, req.msg.len()).ok(), &mut n);
            }
            let mut pieces = [Piece::default(); SGES_PER_SEND];
            let Some(np) = pieces_of(&p, req, k, at, &mut pieces) else {
                ok = false;
                break;
            };
            for pc in &pieces[..np] {
                let Some(a) = req.ddp_args.as_slice().get(pc.arg) else {
                    ok = false;
                    break;
                };
                ok &= push(a.data.sge(0, pc.filler as usize).ok(), &mut n);
                ok &= push(a.data.sge(pc.from as usize, pc.len as usize).ok(), &mut n);
            }
            lens[k as usize] = n;
        }
        if !ok {
            give_back(self);
            return false;
        }
        t.sq.take(count);
        let wr_id = WrId::new(WrKind::CallSend, slot).encode();
        let mut staged = 0u32;
        for k in 0..count as usize {
            staged += u32::from(t.stage(wr_id, SendOp::Send, &sgls[k][..lens[k]]));
        }
        t.sq.give(count - staged);
        let sent = super::cont::GroupSent {
            xid,
            tag,
            count,
            staged,
            extra,
            rsbuf: 0,
        };
        self.group_sent(slot, sent, req, deadline, now);
        self.stats.send_ddp_items += u64::from(p.place.items);
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
    /// Receives lent for the reply's continuations (`optxrq_rsbuf`).
    rsbuf: u32,
}

impl RequesterHalf {
    /// The send-based DDP shape for `req`'s reply (draft §7.4), when the round-trip
    /// extensions are negotiated, the peer sends such replies (`RTRS_SDDP_REPLY`), this
    /// end posts DDP segments and advertised them, the call has Write sinks (at most
    /// [`MAX_REPLY_ITEMS`], one direction item each) and no DDP argument, every sink is
    /// within `send_ddp_max`, the call fits inline as a ROPT_XMTREQ, and the reply's
    /// payload fits the header segment beside the result items. When the sinks need
    /// more than the first transmission's one segment (a result longer than a segment,
    /// or several results), the reply is asked for as a group (§6.2: TBSNs through all
    /// its transmissions) for which receives are lent (`optxrq_rsbuf`): only with
    /// `send_ddp_max` set by hand, within the peer's XCHAR_RESPSXLIM and the reserve of
    /// lent receives (DESIGN.md, "Send-based DDP replies across segments"). Otherwise
    /// the call goes as before (Write chunks).
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
        let sinks = req.write_sinks.as_slice();
        if sinks.is_empty() || sinks.len() > MAX_REPLY_ITEMS as usize {
            return None;
        }
        let (_, head, seg_len) = layout.locate(0);
        // Segments the results may fill, and the reply header's items naming them.
        let (mut segs, mut items_len) = (0u32, 0usize);
        for sink in sinks {
            let cap = u32::try_from(sink.capacity()).ok()?;
            if cap > self.params.send_ddp_reply_max {
                return None;
            }
            let n = cap.div_ceil(seg_len.max(1)).max(1);
            segs = segs.checked_add(n)?;
            items_len += 20 + 4 * n as usize;
        }
        let count = segs.div_ceil(layout.per_buf.max(1));
        if count > 1 {
            // A group of Sends for one reply: only by hand, as for arguments (DESIGN.md,
            // "Shape choice"), and within what the peer sends and we can lend.
            let limit = t.peer_chars.resp_sx_limit.min(CONTINUATION_GROUP_MAX);
            if !self.params.send_ddp_max_set
                || count > limit
                || count - 1 > self.cont.reserve_free
                || segs as usize > MAX_ITEM_SEGMENTS
            {
                return None;
            }
        }
        // The reply's header and payload land before the segment; what room is left
        // bounds the item that may come back inline (TOOSHORT).
        let room = (head as usize)
            .checked_sub(crate::wire::rtr::XMTRESP_HEADER_LEN + items_len)?
            .checked_sub(req.max_reply_len as usize)?;
        // Every result may come back inline.
        let minlen = REPLY_DDP_MINLEN.min((room / sinks.len()) as u32) & !3;
        let msg_len = u32::try_from(req.msg.len()).ok()?;
        let dir = ReplyDirection {
            begin: 0,
            end: msg_len,
            minlen,
            items: sinks.len() as u32,
        };
        let header_len = place::xmtreq_rsd_header_len(&[], Some(&dir));
        if header_len + req.msg.len() > t.thresholds.send as usize {
            return None;
        }
        Some(ReplyDdpPlan {
            header_len: header_len as u32,
            dir,
            rsbuf: count - 1,
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
                place::encode_xmtreq_rsd(b, xid, credit, 1, p.rsbuf, pslen, &[], Some(&p.dir)).ok()
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
        let s = &mut self.slots[slot as usize];
        s.reply_ddp = true;
        s.rsbuf = p.rsbuf;
        self.cont.reserve_free -= p.rsbuf;
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

/// The results of an `optxrs_ddp`, in order (§7.4: "For each xmddp_rsditem, there
/// will be a corresponding xmddp_mitem").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ReplyItems {
    /// Results.
    pub(super) n: u8,
    /// The first `n`.
    pub(super) items: [ReplyItem; MAX_REPLY_ITEMS as usize],
}

impl ReplyItems {
    /// The results.
    pub(super) fn as_slice(&self) -> &[ReplyItem] {
        &self.items[..usize::from(self.n)]
    }

    /// The results of an `optxrs_ddp` (at most [`MAX_REPLY_ITEMS`]: a requester sends
    /// no more direction items): more, or an explicit-RDMA result it never asked for,
    /// is BADTBSN 0..0. Whether their number is the number asked for is the caller's
    /// check.
    pub(super) fn of(ddp: &crate::wire::rtr::DdpArray<'_>) -> Result<Self, OptxInfo> {
        let refuse = OptxInfo::BadTbsn {
            value: 0,
            min: 0,
            max: 0,
        };
        let mut out = ReplyItems {
            n: 0,
            items: [ReplyItem::NoItem; MAX_REPLY_ITEMS as usize],
        };
        for m in ddp.mitems() {
            let m = m.map_err(|_| refuse)?;
            let item = match m.loc {
                Loc::Tbsn(loc) => ReplyItem::Placed {
                    length: m.length,
                    loc,
                },
                Loc::TooShort => ReplyItem::TooShort,
                Loc::NoItem => ReplyItem::NoItem,
                Loc::Exrw { .. } => return Err(refuse),
            };
            *out.items.get_mut(usize::from(out.n)).ok_or(refuse)? = item;
            out.n += 1;
        }
        Ok(out)
    }

    /// The one result, when there is exactly one.
    pub(super) fn single(&self) -> Option<ReplyItem> {
        match self.as_slice() {
            [one] => Some(*one),
            _ => None,
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
