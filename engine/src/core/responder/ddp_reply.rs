//! Send-based DDP replies across transmissions and with several results, responder
//! side (draft-dnoveck-rpcrdma-rtrext §7.4, §6.2, §9.4): a call whose direction holds
//! several `xmddp_rsditem`s, or that lent receives for its reply (`optxrq_rsbuf`), gets
//! a ROPT_XMTRESP (+ ROPT_XMTCONTs) whose `optxrs_ddp` holds one `xmddp_mitem` per
//! direction item, in order, and whose transmissions each carry a piece of a bulk item
//! into the DDP segment of the requester's receive it lands in (TBSNs through the
//! whole group, as for calls). The payload stream goes whole in the first
//! transmission; continuations carry bulk only (`pslen` 0). See `engine/DESIGN.md`,
//! "Send-based DDP replies across segments".

use super::context::{Context, Delivery, Step};
use super::{grant, ResponderHalf};
use crate::core::transport::Transport;
use crate::core::wrid::{WrId, WrKind};
use crate::fabric::{SendOp, Sge};
use crate::service::Service;
use crate::wire::header::RdmaError;
use crate::wire::private_data::CONTINUATION_GROUP_MAX;
use crate::wire::rtr::place::{
    self as pl, DdpLayout, Loc, MItem, ReplyDirection, TbsnLoc, MAX_ITEM_SEGMENTS, MAX_REPLY_ITEMS,
};
use crate::wire::rtr::{
    RtrOp, RtrRepr, XmtCont, ROPT_XMTRESP, XMTCONT_HEADER_LEN, XMTRESP_HEADER_LEN,
};

/// Transmissions a group may have.
const GROUP_MAX: usize = CONTINUATION_GROUP_MAX as usize;
/// Most direction items.
const ITEMS: usize = MAX_REPLY_ITEMS as usize;

/// Octets the headers of a send-based DDP reply to `dir` with `rsbuf` lent receives
/// may take in the context's send buffer: the ROPT_XMTRESP with one result per
/// direction item (at most `rsbuf + 1` segments among them all, since no two share
/// one) and a continuation header per lent receive. The dispatcher leaves this much
/// room before an inline body.
#[inline(always)]
pub(super) fn reply_header_room(dir: Option<ReplyDirection>, rsbuf: u32) -> usize {
    match dir {
        None => 0,
        Some(d) => {
            let items = d.items.clamp(1, MAX_REPLY_ITEMS) as usize;
            let rsbuf = (rsbuf as usize).min(GROUP_MAX - 1);
            XMTRESP_HEADER_LEN + 20 * items + 4 * (rsbuf + 1) + XMTCONT_HEADER_LEN * rsbuf
        }
    }
}

/// Records where each of the writer's results belongs in the reply body, for a call
/// whose reply goes by send-based DDP (`Context::result_at`).
pub(super) fn note_positions(at: &mut [u32; ITEMS], w: &crate::service::ReplyWriter<'_>) {
    for (k, a) in at.iter_mut().enumerate() {
        *a = w.result_position(k).unwrap_or(0);
    }
}

/// What one direction item gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    NoItem,
    TooShort(u32),
    Placed(u32),
}

/// A transmission's piece of a bulk item: the result it comes from, its offset there,
/// its length, and the filler before it.
#[derive(Debug, Clone, Copy, Default)]
struct Piece {
    item: usize,
    from: u32,
    len: u32,
    filler: u32,
}

/// Ends context `c`'s reply with RDMA_ERROR ERR_CHUNK (its results cannot be placed).
fn chunk_error(c: &mut Context) -> Option<bool> {
    c.results.clear();
    c.step = Step::Error(RdmaError::Chunk);
    Some(true)
}

impl<S: Service> ResponderHalf<S> {
    /// Stages context `i`'s reply (a body of `len` octets) answering the direction
    /// `dir` of several items, or into the receives the call lent: each result
    /// XMDTYPE_NOITEM (none handed over), XMDTYPE_TOOSHORT (shorter than `minlen`:
    /// moved back into the body at its position) or XMDTYPE_TBSN (placed by
    /// `place::plan` into the requester's segments, in order, across as many
    /// transmissions as it takes, at most the lent receives + 1). Results that do not
    /// fit are ERR_CHUNK, as a result too long for a Write chunk. `Some(false)`: no
    /// send-queue room yet (nothing changed).
    pub(super) fn stage_ddp_reply_group(
        &mut self,
        t: &mut Transport,
        i: u32,
        dir: ReplyDirection,
    ) -> Option<bool> {
        let c = &self.ctxs[i as usize];
        let Delivery::Body { len } = c.delivery else {
            return None;
        };
        let Some(layout) = t.peer_chars.recv_buf.as_ref().and_then(DdpLayout::of) else {
            return chunk_error(&mut self.ctxs[i as usize]);
        };
        let (_, head, _) = layout.locate(0);
        let n = (dir.items.clamp(1, MAX_REPLY_ITEMS) as usize).min(ITEMS);
        let max_count = (c.rsbuf + 1).min(CONTINUATION_GROUP_MAX);
        // Each item's shape and its position in the body once the short ones before it
        // are back in; the body's final length.
        let mut shapes = [Shape::NoItem; ITEMS];
        let mut disp = [0u32; ITEMS];
        let mut lens = [0u32; ITEMS];
        let mut n_placed = 0usize;
        let mut pslen = len;
        let mut last_at = 0u32;
        for k in 0..n {
            let item = match c.results.get(k) {
                Some(Some(d)) => d.len() as u32,
                _ => 0,
            };
            let at = c.result_at[k];
            shapes[k] = match item {
                0 => Shape::NoItem,
                m if m < dir.minlen => Shape::TooShort(m),
                m => Shape::Placed(m),
            };
            if item > 0 {
                if at < last_at || at as usize > len {
                    // Results out of body order: their positions cannot be kept.
                    return chunk_error(&mut self.ctxs[i as usize]);
                }
                last_at = at;
            }
            disp[k] = at + (pslen - len) as u32;
            match shapes[k] {
                Shape::TooShort(m) => pslen += crate::wire::xdr::pad4(m as usize),
                Shape::Placed(m) => {
                    lens[n_placed] = m;
                    n_placed += 1;
                }
                Shape::NoItem => {}
            }
        }
        // The results, with their locations once planned.
        let mitems = |locs: &dyn Fn(usize) -> TbsnLoc, out: &mut [MItem<'static>; ITEMS]| {
            let mut p = 0;
            for k in 0..n {
                out[k] = match shapes[k] {
                    Shape::NoItem => MItem {
                        disp: 0,
                        length: 0,
                        loc: Loc::NoItem,
                    },
                    Shape::TooShort(m) => MItem {
                        disp: disp[k],
                        length: m,
                        loc: Loc::TooShort,
                    },
                    Shape::Placed(m) => {
                        p += 1;
                        MItem {
                            disp: disp[k],
                            length: m,
                            loc: Loc::Tbsn(locs(p - 1)),
                        }
                    }
                };
            }
        };
        let (_, _, seg0) = layout.locate(0);
        let mut store = [MItem {
            disp: 0,
            length: 0,
            loc: Loc::NoItem,
        }; ITEMS];
        // The header's length depends on the segments it lists: planned with a guess,
        // then again with the real length if that was longer (as a call's is).
        let probe = |j: usize| TbsnLoc {
            offset: 0,
            n: lens[j].div_ceil(seg0.max(1)).min(MAX_ITEM_SEGMENTS as u32) as u8,
            bsnum: [0; MAX_ITEM_SEGMENTS],
        };
        mitems(&probe, &mut store);
        let mut guess = pl::xmtresp_header_len(&store[..n]) as u32;
        let mut planned = None;
        for _ in 0..2 {
            let Ok(p) = pl::plan(
                &layout,
                guess,
                pslen as u32,
                XMTCONT_HEADER_LEN as u32,
                &lens[..n_placed],
                max_count,
            ) else {
                return chunk_error(&mut self.ctxs[i as usize]);
            };
            mitems(&|j| p.locs[j], &mut store);
            let real = pl::xmtresp_header_len(&store[..n]) as u32;
            if real <= guess {
                planned = Some(p);
                break;
            }
            guess = real;
        }
        let Some(plan) = planned else {
            return chunk_error(&mut self.ctxs[i as usize]);
        };
        let hlen = pl::xmtresp_header_len(&store[..n]);
        let count = plan.count;
        // Each transmission's piece (this engine's requester posts one DDP segment per
        // receive: a transmission carries at most one).
        let mut pieces: [Option<Piece>; GROUP_MAX] = [None; GROUP_MAX];
        let mut p_i = 0usize;
        for (k, sh) in shapes[..n].iter().enumerate() {
            let Shape::Placed(m) = *sh else { continue };
            let Ok(ps) = layout.check(count, m, &plan.locs[p_i]) else {
                return chunk_error(&mut self.ctxs[i as usize]);
            };
            p_i += 1;
            let mut from = 0u32;
            for &(tx, off, plen) in ps.as_slice() {
                let at = if tx == 0 {
                    hlen as u32 + pslen as u32
                } else {
                    XMTCONT_HEADER_LEN as u32
                };
                let slot = pieces.get_mut(tx as usize);
                let (Some(slot), Some(filler)) = (slot, off.checked_sub(at)) else {
                    return chunk_error(&mut self.ctxs[i as usize]);
                };
                if slot.is_some() {
                    return chunk_error(&mut self.ctxs[i as usize]);
                }
                *slot = Some(Piece {
                    item: k,
                    from,
                    len: plen,
                    filler,
                });
                from += plen;
            }
        }
        let c = &self.ctxs[i as usize];
        let body_base = if c.body.is_some() { 0 } else { c.body_off };
        let header_room = if c.body.is_some() {
            c.send.capacity()
        } else {
            body_base
        };
        let headers_end = hlen + (count as usize - 1) * XMTCONT_HEADER_LEN;
        if hlen + pslen > head as usize || headers_end > header_room {
            // Never: the requester asked only for replies its header segment holds, and
            // the dispatcher left room for these headers.
            return chunk_error(&mut self.ctxs[i as usize]);
        }
        if t.sq.free() < count {
            return Some(false);
        }
        let credit = grant(&self.policy, t);
        let c = &mut self.ctxs[i as usize];
        let Context {
            send,
            body,
            sinks,
            results,
            xid,
            result_at,
            ..
        } = c;
        // §7.4: a short item "is not treated as bulk data and the corresponding data
        // item appears in the payload stream": moved back in at its position (a copy of
        // fewer than `minlen` octets each).
        let mut cur = len;
        for k in 0..n {
            let Shape::TooShort(m) = shapes[k] else {
                continue;
            };
            let padded = crate::wire::xdr::pad4(m as usize);
            let at = result_at[k] as usize + (cur - len);
            let data: Option<&[u8]> = results.get(k).and_then(|d| d.as_ref()?.bytes(sinks));
            let store: &mut [u8] = match body.as_mut() {
                Some(b) => b.storage_mut(),
                None => send.storage_mut().get_mut(body_base..).unwrap_or(&mut []),
            };
            let (Some(data), true) = (data, cur + padded <= store.len()) else {
                return chunk_error(c);
            };
            store.copy_within(at..cur, at + padded);
            store[at..at + m as usize].copy_from_slice(data);
            store[at + m as usize..at + padded].fill(0);
            cur += padded;
        }
        if let Some(b) = body.as_mut() {
            let _ = b.set_len(pslen);
        }
        // Headers: the ROPT_XMTRESP, then each continuation's after it.
        let Some(h0) = send.storage_mut().get_mut(..hlen).and_then(|b| {
            pl::encode_xmtresp(b, *xid, credit, count, pslen as u32, &store[..n]).ok()
        }) else {
            return chunk_error(c);
        };
        for k in 1..count {
            let off = hlen + (k as usize - 1) * XMTCONT_HEADER_LEN;
            let repr = RtrRepr {
                xid: *xid,
                credit,
                op: RtrOp::XmtCont(XmtCont {
                    xnum: k,
                    itype: ROPT_XMTRESP,
                    pslen: 0,
                }),
            };
            let ok = send
                .storage_mut()
                .get_mut(off..off + XMTCONT_HEADER_LEN)
                .and_then(|b| repr.encode(b).ok())
                .is_some();
            if !ok {
                return chunk_error(c);
            }
        }
        // Every transmission's gather list, built before anything is staged.
        let mut sgls = [[Sge::default(); 4]; GROUP_MAX];
        let mut sizes = [0usize; GROUP_MAX];
        for k in 0..count as usize {
            let sgl = &mut sgls[k];
            let mut m = 0usize;
            let mut push = |e: Option<Sge>| -> bool {
                match e {
                    Some(e) if e.length == 0 => true,
                    Some(e) if m < sgl.len() => {
                        sgl[m] = e;
                        m += 1;
                        true
                    }
                    _ => false,
                }
            };
            let mut ok = if k == 0 {
                push(send.sge(0, h0).ok())
                    && push(match body.as_ref() {
                        Some(b) => b.sge(0, pslen).ok(),
                        None => send.sge(body_base, pslen).ok(),
                    })
            } else {
                let off = hlen + (k - 1) * XMTCONT_HEADER_LEN;
                push(send.sge(off, XMTCONT_HEADER_LEN).ok())
            };
            if let Some(p) = pieces[k] {
                // §7.2's padding up to the requester's DDP segment: octets of a result
                // that long (the requester gets them anyway), else of this context's
                // send buffer (what goes to this requester).
                let f = p.filler as usize;
                let pad = if f == 0 {
                    Some(Sge::default())
                } else {
                    results
                        .iter()
                        .flatten()
                        .find(|d| d.len() >= f)
                        .and_then(|d| d.sge(sinks, 0, f))
                        .or_else(|| send.sge(0, f).ok())
                };
                let piece = results
                    .get(p.item)
                    .and_then(|d| d.as_ref()?.sge(sinks, p.from as usize, p.len as usize));
                ok &= push(pad) && push(piece);
            }
            if !ok {
                return chunk_error(c);
            }
            sizes[k] = m;
        }
        t.sq.take(count);
        let wr_id = WrId::new(WrKind::ReplySend, i).encode();
        let mut staged = 0u32;
        for k in 0..count as usize {
            staged += u32::from(t.stage(wr_id, SendOp::Send, &sgls[k][..sizes[k]]));
        }
        t.sq.give(count - staged);
        c.wrs += staged;
        c.step = Step::Sent;
        for sh in &shapes[..n] {
            match sh {
                Shape::Placed(_) => self.stats.send_ddp_replies += 1,
                Shape::TooShort(_) => self.stats.ddp_replies_too_short += 1,
                Shape::NoItem => self.stats.ddp_replies_no_item += 1,
            }
        }
        self.stats.cont_replies += u64::from(count > 1);
        self.stats.cont_reply_messages += u64::from(count) * u64::from(count > 1);
        Some(true)
    }
}
