//! Send-based DDP, responder side (draft-dnoveck-rpcrdma-rtrext §7, §9.5): the bulk
//! items a ROPT_XMTREQ places by target buffer segment number are checked against the
//! receive buffer structure this end advertised (`core/recv_segments.rs`), and the DDP
//! segment they landed in becomes the item the service sees, without a copy. See
//! `engine/DESIGN.md`, "Send-based DDP".

use crate::core::regbuf::RegBuf;
use crate::wire::rtr::chars::RecvBufStructure;
use crate::wire::rtr::place::{DdpLayout, Loc, MAX_PLACED_ITEMS};
use crate::wire::rtr::{DdpArray, OptxInfo};

/// Transmissions a group may have (`CONTINUATION_GROUP_MAX`).
pub(super) const GROUP_MAX: usize = crate::wire::private_data::CONTINUATION_GROUP_MAX as usize;

/// One bulk item a request placed: its position in the XDR stream, its length, where
/// it starts in its first DDP segment, and the transmissions whose DDP segment holds a
/// piece of it (this end posts one DDP segment per receive, so a segment is a
/// transmission; bit `k` = transmission `k`, in increasing order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct PlacedItem {
    pub(super) disp: u32,
    pub(super) len: u32,
    pub(super) seg_off: u32,
    pub(super) txs: u16,
}

impl PlacedItem {
    /// The transmissions holding its pieces, in order.
    pub(super) fn transmissions(&self) -> impl Iterator<Item = usize> + '_ {
        (0..GROUP_MAX).filter(|k| self.txs & (1 << k) != 0)
    }
}

/// The items of one request, in order, and per transmission of its group the octets
/// that must have landed in that transmission's DDP segment (0: none of any item is
/// there).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Placed {
    pub(super) n: u8,
    pub(super) items: [PlacedItem; MAX_PLACED_ITEMS],
    pub(super) need: [u32; GROUP_MAX],
}

impl Placed {
    pub(super) fn as_slice(&self) -> &[PlacedItem] {
        &self.items[..usize::from(self.n)]
    }
}

/// A BADTBSN naming `value`, with the range `min..=max`.
fn bad_tbsn(value: u32, min: u32, max: u32) -> OptxInfo {
    OptxInfo::BadTbsn { value, min, max }
}

/// The receiver's check of a request's `optxrq_ddp` in a group of `count`
/// transmissions against `rbs` (the structure this end advertised; `None`: it
/// advertised none). Every item must be XMDTYPE_TBSN and pass [`DdpLayout::check`]
/// (segment numbers in range and strictly increasing, so none listed twice; the offset
/// inside the first and aligned; the segments long enough); items come in increasing
/// segment order (an item's first segment past the last one before it: no segment
/// holds two pieces); an item's position is a positive multiple of 4 (else BADOFF
/// naming it: it could not sit in the XDR stream). Pieces may lie in any transmission
/// of the group (§6.2: numbering runs "through all the buffer segments for all the
/// RPC-over-RDMA transmissions in the group"); `count` is at most [`GROUP_MAX`] (the
/// caller checks it after this).
pub(super) fn check(
    rbs: Option<RecvBufStructure>,
    count: u32,
    ddp: &DdpArray<'_>,
) -> Result<Placed, OptxInfo> {
    let Some(layout) = rbs.as_ref().and_then(DdpLayout::of) else {
        // No DDP-targetable segment advertised: no target buffer number is valid.
        return Err(bad_tbsn(0, 0, 0));
    };
    let count = count.min(GROUP_MAX as u32);
    let last = layout.total(count).saturating_sub(1);
    let mut out = Placed::default();
    let mut next_min = 0u32;
    for item in ddp.mitems() {
        let item = item.map_err(|_| bad_tbsn(0, next_min, last))?;
        let Loc::Tbsn(t) = item.loc else {
            // EXRW, and TOOSHORT / NOITEM (results only, §6.2 "Sem. Invalid").
            return Err(bad_tbsn(0, next_min, last));
        };
        if let Some(&first) = t.segments().first() {
            if first < next_min {
                return Err(bad_tbsn(first, next_min, last));
            }
        }
        if item.disp == 0 || !item.disp.is_multiple_of(4) {
            return Err(OptxInfo::BadOff {
                value: item.disp,
                min: 4,
                max: !3,
            });
        }
        let pieces = layout.check(count, item.length, &t)?;
        let (Some(&(_, off, _)), Some(&first)) = (pieces.as_slice().first(), t.segments().first())
        else {
            return Err(bad_tbsn(0, next_min, last));
        };
        let seg_start = layout.locate(first).1;
        let mut txs = 0u16;
        for (&b, &(k, poff, plen)) in t.segments().iter().zip(pieces.as_slice()) {
            // One DDP segment per receive here: each piece is its transmission's.
            if layout.per_buf != 1 || k as usize >= GROUP_MAX {
                return Err(bad_tbsn(b, next_min, last));
            }
            txs |= 1 << k;
            out.need[k as usize] = poff - layout.locate(b).1 + plen;
        }
        let slot = out
            .items
            .get_mut(usize::from(out.n))
            .ok_or_else(|| bad_tbsn(0, next_min, last))?;
        *slot = PlacedItem {
            disp: item.disp,
            len: item.length,
            seg_off: off - seg_start,
            txs,
        };
        out.n += 1;
        // Segments listed beyond what the item fills are not its: the next item may
        // not use them either.
        next_min = t.segments().last().map_or(next_min, |l| l + 1);
    }
    Ok(out)
}

/// Transmission `k`'s landed DDP segment `landed` against what `placed` put there:
/// kept (`Ok(Some)`) when a piece of an item is in it and all its octets landed;
/// `Ok(None)` (and the segment back to the pool) when no piece is; BADOFF when the
/// Send stopped short of its piece (naming the item's length, range 0..what of it
/// landed: §9.5 "the actual value together with a range of valid values").
pub(super) fn keep_landed(
    placed: &Placed,
    k: usize,
    landed: Option<RegBuf>,
) -> Result<Option<RegBuf>, OptxInfo> {
    let need = placed.need.get(k).copied().unwrap_or(0);
    if need == 0 {
        drop(landed); // back to the pool (`core/recv_segments.rs`)
        return Ok(None);
    }
    let got = landed.as_ref().map_or(0, |s| s.len() as u32);
    if got < need {
        let item = placed
            .as_slice()
            .iter()
            .find(|i| i.txs & (1 << k) != 0)
            .map_or(need, |i| i.len);
        return Err(OptxInfo::BadOff {
            value: item,
            min: 0,
            max: item.saturating_sub(need - got),
        });
    }
    Ok(landed)
}

/// Makes the landed segment `seg` hold exactly `len` octets that start `off` octets
/// into it (moved to its start when a sender placed them at an offset: ours never
/// does, a foreign sender's item then costs one move inside the segment).
pub(super) fn fit(seg: &mut RegBuf, off: u32, len: u32) -> Result<(), OptxInfo> {
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

/// What a reply direction gets (draft §7.4: "For each xmddp_rsditem, there will be a
/// corresponding xmddp_mitem").
enum ReplyShape {
    /// XMDTYPE_TBSN: the item placed at the start of segment `tbsn`, `filler` octets
    /// after the payload stream.
    Placed { len: u32, tbsn: u32, filler: u32 },
    /// XMDTYPE_TOOSHORT: shorter than `minlen`, copied into the payload stream.
    TooShort { len: u32 },
    /// XMDTYPE_NOITEM: the reply has no DDP-eligible item.
    NoItem,
}

impl<S: crate::service::Service> super::ResponderHalf<S> {
    /// Stages context `i`'s reply as one ROPT_XMTRESP answering the call's reply
    /// direction, when it asked for one. `None`: not this way (no direction, or no
    /// body: the usual paths, ERR_CHUNK); `Some(progressed)` otherwise.
    #[inline(always)]
    pub(super) fn stage_ddp_reply(
        &mut self,
        t: &mut crate::core::transport::Transport,
        i: u32,
    ) -> Option<bool> {
        // The common reply asked for nothing: one test, no call (the NULL path).
        self.ctxs[i as usize].reply_ddp?;
        self.stage_ddp_reply_asked(t, i)
    }

    /// [`stage_ddp_reply`](Self::stage_ddp_reply) for a call that asked.
    #[inline(never)]
    fn stage_ddp_reply_asked(
        &mut self,
        t: &mut crate::core::transport::Transport,
        i: u32,
    ) -> Option<bool> {
        use crate::core::wrid::{WrId, WrKind};
        use crate::fabric::{SendOp, Sge};
        use crate::wire::rtr::place::{self as pl, MItem, TbsnLoc, MAX_ITEM_SEGMENTS};

        let c = &self.ctxs[i as usize];
        let dir = c.reply_ddp?;
        let super::context::Delivery::Body { len } = c.delivery else {
            return None;
        };
        if dir.items > 1 || c.rsbuf > 0 {
            // Several results, or receives lent for a group (`responder/ddp_reply.rs`).
            return self.stage_ddp_reply_group(t, i, dir);
        }
        let Some(layout) = t.peer_chars.recv_buf.as_ref().and_then(DdpLayout::of) else {
            // The requester's segments went away (a characteristics update): the call's
            // Write chunk is this engine's fiction, so nothing else can carry the item.
            let c = &mut self.ctxs[i as usize];
            c.results.clear();
            c.step = super::context::Step::Error(crate::wire::header::RdmaError::Chunk);
            return Some(true);
        };
        // Octets before the requester's first DDP segment: where the header and payload
        // stream land.
        let (_, head, _) = layout.locate(0);
        let item = match c.results.get(0) {
            Some(Some(d)) => Some(d.len() as u32),
            _ => None,
        };
        let at = c.result_at[0] as usize;
        let shape = match item {
            None | Some(0) => ReplyShape::NoItem,
            Some(n) if n < dir.minlen => ReplyShape::TooShort { len: n },
            Some(n) => {
                let probe = MItem {
                    disp: c.result_at[0],
                    length: n,
                    loc: Loc::Tbsn(TbsnLoc {
                        offset: 0,
                        n: 1,
                        bsnum: [0; MAX_ITEM_SEGMENTS],
                    }),
                };
                let hlen = pl::xmtresp_header_len(&[probe]) as u32;
                match pl::plan(&layout, hlen, len as u32, 0, &[n], 1) {
                    Ok(p) => {
                        let tbsn = p.locs[0].segments().first().copied().unwrap_or(0);
                        let (_, off, _) = layout.locate(tbsn);
                        // The planner skipped every segment the payload reaches into.
                        let filler = off.saturating_sub(hlen + len as u32);
                        ReplyShape::Placed {
                            len: n,
                            tbsn,
                            filler,
                        }
                    }
                    // Not placeable in the requester's segments: ERR_CHUNK below.
                    Err(_) => {
                        let c = &mut self.ctxs[i as usize];
                        c.results.clear();
                        c.step = super::context::Step::Error(crate::wire::header::RdmaError::Chunk);
                        return Some(true);
                    }
                }
            }
        };
        if t.sq.free() < 1 {
            return Some(false);
        }
        let credit = super::grant(&self.policy, t);
        let c = &mut self.ctxs[i as usize];
        let super::context::Context {
            send,
            body_off,
            body,
            sinks,
            results,
            xid,
            ..
        } = c;
        // The body: its own buffer, or the send buffer behind the header's room.
        let body_base = if body.is_some() { 0 } else { *body_off };
        let mut pslen = len;
        if let ReplyShape::TooShort { len: n } = shape {
            // §7.4: "it is not treated as bulk data and the corresponding data item
            // appears in the payload stream": moved back in at its position (a copy of
            // fewer than `minlen` octets).
            let padded = crate::wire::xdr::pad4(n as usize);
            let data: Option<&[u8]> = results.get(0).and_then(|d| d.as_ref()?.bytes(sinks));
            let store: &mut [u8] = match body.as_mut() {
                Some(b) => b.storage_mut(),
                None => send.storage_mut().get_mut(body_base..).unwrap_or(&mut []),
            };
            let fits = at <= len && len + padded <= store.len();
            let (Some(data), true) = (data, fits) else {
                results.clear();
                c.step = super::context::Step::Error(crate::wire::header::RdmaError::Chunk);
                return Some(true);
            };
            store.copy_within(at..len, at + padded);
            store[at..at + n as usize].copy_from_slice(data);
            store[at + n as usize..at + padded].fill(0);
            pslen = len + padded;
            if let Some(b) = body.as_mut() {
                let _ = b.set_len(pslen);
            }
        }
        let mitem = match shape {
            ReplyShape::Placed { len: n, tbsn, .. } => {
                let mut bsnum = [0; MAX_ITEM_SEGMENTS];
                bsnum[0] = tbsn;
                MItem {
                    disp: at as u32,
                    length: n,
                    loc: Loc::Tbsn(TbsnLoc {
                        offset: 0,
                        n: 1,
                        bsnum,
                    }),
                }
            }
            ReplyShape::TooShort { len: n } => MItem {
                disp: at as u32,
                length: n,
                loc: Loc::TooShort,
            },
            ReplyShape::NoItem => MItem {
                disp: 0,
                length: 0,
                loc: Loc::NoItem,
            },
        };
        let hlen = pl::xmtresp_header_len(&[mitem]);
        let header_room = if body.is_some() {
            send.capacity()
        } else {
            body_base
        };
        let lands_in_head =
            matches!(shape, ReplyShape::Placed { .. }) || hlen + pslen <= head as usize;
        if hlen > header_room || !lands_in_head {
            // Never: the dispatcher left room for this header, and the requester
            // asked only for replies its header segment holds.
            results.clear();
            c.step = super::context::Step::Error(crate::wire::header::RdmaError::Chunk);
            return Some(true);
        }
        let Some(n) = send
            .storage_mut()
            .get_mut(..hlen)
            .and_then(|b| pl::encode_xmtresp(b, *xid, credit, 1, pslen as u32, &[mitem]).ok())
        else {
            results.clear();
            c.step = super::context::Step::Error(crate::wire::header::RdmaError::Chunk);
            return Some(true);
        };
        let mut sgl = [Sge::default(); 4];
        let mut k = 0;
        let mut push = |e: Option<Sge>| {
            if let Some(e) = e.filter(|e| e.length > 0) {
                sgl[k] = e;
                k += 1;
            }
        };
        push(send.sge(0, n).ok());
        push(match body.as_ref() {
            Some(b) => b.sge(0, pslen).ok(),
            None => send.sge(body_base, pslen).ok(),
        });
        if let ReplyShape::Placed {
            len: ilen, filler, ..
        } = shape
        {
            if let Some(Some(d)) = results.get(0) {
                // §7.2's padding up to the requester's DDP segment: octets of the item
                // itself when it is that long (the requester gets them anyway), else
                // of this context's send buffer (what went to this requester before).
                let pad = if filler as usize <= d.len() {
                    d.sge(sinks, 0, filler as usize)
                } else {
                    send.sge(0, filler as usize).ok()
                };
                let Some(pad) = pad.or(if filler == 0 {
                    Some(Sge::default())
                } else {
                    None
                }) else {
                    results.clear();
                    c.step = super::context::Step::Error(crate::wire::header::RdmaError::Chunk);
                    return Some(true);
                };
                push(Some(pad));
                push(d.sge(sinks, 0, ilen as usize));
            }
        }
        t.sq.take(1);
        let wr_id = WrId::new(WrKind::ReplySend, i).encode();
        if t.stage(wr_id, SendOp::Send, &sgl[..k]) {
            c.wrs += 1;
        } else {
            t.sq.give(1);
        }
        c.step = super::context::Step::Sent;
        match shape {
            ReplyShape::Placed { .. } => self.stats.send_ddp_replies += 1,
            ReplyShape::TooShort { .. } => self.stats.ddp_replies_too_short += 1,
            ReplyShape::NoItem => self.stats.ddp_replies_no_item += 1,
        }
        Some(true)
    }
}
