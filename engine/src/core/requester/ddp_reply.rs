//! Send-based DDP replies across transmissions and with several results, requester
//! side (draft-dnoveck-rpcrdma-rtrext §7.4, §6.2, §9.4): a ROPT_XMTRESP whose
//! `optxrs_ddp` holds one result per `xmddp_rsditem` the call asked for, whose bulk
//! items lie in the DDP segments of the receives the call lent (`optxrq_rsbuf`), TBSNs
//! running through every transmission of the group. The placement is checked against
//! this end's own receive structure when the group's first transmission arrives; each
//! continuation's landed segment is kept while a piece is in it; when the group is
//! whole, an item in one segment becomes its Write sink (no copy) and an item across
//! several is gathered into the caller's Write sink (one copy). See `engine/DESIGN.md`,
//! "Send-based DDP replies across segments".

use super::cont::{payload_of, ReplyAsm};
use super::send_ddp::{fit_item, ReplyItem, ReplyItems};
use super::RequesterHalf;
use crate::core::regbuf::RegBuf;
use crate::core::transport::Transport;
use crate::requester::{BadReply, Reply, MAX_WRITE_SINKS};
use crate::wire::private_data::CONTINUATION_GROUP_MAX;
use crate::wire::rtr::place::{DdpLayout, MAX_REPLY_ITEMS};
use crate::wire::rtr::{OptxInfo, XmtCont};

/// Transmissions a group may have.
const GROUP_MAX: usize = CONTINUATION_GROUP_MAX as usize;

/// One result of the reply, as checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Result1 {
    /// XMDTYPE_TBSN: the item's length, where it starts in its first segment, and the
    /// transmissions whose segment holds a piece (bit `k`: transmission `k`). This
    /// end posts one DDP segment per receive, so a segment is a transmission.
    placed: Option<(u32, u32, u16)>,
    /// XMDTYPE_TOOSHORT (else NOITEM when not placed).
    too_short: bool,
}

/// A send-based DDP reply group being received (`ReplyAsm::ddp`).
pub(super) struct DdpReplyAsm {
    n: u8,
    results: [Result1; MAX_REPLY_ITEMS as usize],
    /// Per transmission, the octets that must land in its DDP segment.
    need: [u32; GROUP_MAX],
    /// Per transmission, the segment that landed with a piece in it.
    segs: [Option<RegBuf>; GROUP_MAX],
}

fn refuse() -> OptxInfo {
    OptxInfo::BadTbsn {
        value: 0,
        min: 0,
        max: 0,
    }
}

/// Checks `items` (the results of a reply group of `count` transmissions) against this
/// end's layout `l` and the Write sinks' capacities `caps` (one result per sink, in
/// order): every placed item passes [`DdpLayout::check`], items come in increasing
/// segment order (BADTBSN naming the first segment that is not past the last one
/// before it), and none is longer than its sink (BADOFF naming the length, range
/// 0..the sink's capacity).
fn check(
    l: &DdpLayout,
    count: u32,
    items: &ReplyItems,
    caps: &[usize],
) -> Result<DdpReplyAsm, OptxInfo> {
    if items.as_slice().len() != caps.len() || count as usize > GROUP_MAX || l.per_buf != 1 {
        return Err(refuse());
    }
    let last = l.total(count).saturating_sub(1);
    let mut out = DdpReplyAsm {
        n: items.n,
        results: [Result1::default(); MAX_REPLY_ITEMS as usize],
        need: [0; GROUP_MAX],
        segs: core::array::from_fn(|_| None),
    };
    let mut next_min = 0u32;
    for (i, (item, &cap)) in items.as_slice().iter().zip(caps).enumerate() {
        let r = &mut out.results[i];
        match *item {
            ReplyItem::TooShort => r.too_short = true,
            ReplyItem::NoItem => {}
            ReplyItem::Placed { length, loc } => {
                let pieces = l.check(count, length, &loc)?;
                let segs = loc.segments();
                let first = segs.first().copied().ok_or_else(refuse)?;
                if first < next_min {
                    return Err(OptxInfo::BadTbsn {
                        value: first,
                        min: next_min,
                        max: last,
                    });
                }
                if length as usize > cap {
                    // Longer than the Write sink the caller offered for it.
                    return Err(OptxInfo::BadOff {
                        value: length,
                        min: 0,
                        max: cap as u32,
                    });
                }
                let mut txs = 0u16;
                let mut seg_off = 0;
                for (j, (&b, &(k, off, plen))) in segs.iter().zip(pieces.as_slice()).enumerate() {
                    let start = l.locate(b).1;
                    if j == 0 {
                        seg_off = off - start;
                    }
                    txs |= 1 << k;
                    out.need[k as usize] = off - start + plen;
                }
                r.placed = Some((length, seg_off, txs));
                next_min = segs.last().map_or(next_min, |x| x + 1);
            }
        }
    }
    Ok(out)
}

impl DdpReplyAsm {
    /// Transmission `k`'s landed segment: kept when a piece is in it and all of it
    /// landed, back to the pool when none is; BADOFF (the item's length, range 0..what
    /// of it landed) when the Send stopped short.
    fn keep(&mut self, k: usize, landed: Option<RegBuf>) -> Result<(), OptxInfo> {
        let need = self.need.get(k).copied().unwrap_or(0);
        if need == 0 {
            drop(landed); // back to the pool (`core/recv_segments.rs`)
            return Ok(());
        }
        let got = landed.as_ref().map_or(0, |s| s.len() as u32);
        if got < need {
            let item = self.results[..usize::from(self.n)]
                .iter()
                .filter_map(|r| r.placed)
                .find(|p| p.2 & (1 << k) != 0)
                .map_or(need, |p| p.0);
            return Err(OptxInfo::BadOff {
                value: item,
                min: 0,
                max: item.saturating_sub(need - got),
            });
        }
        self.segs[k] = landed;
        Ok(())
    }
}

impl RequesterHalf {
    /// The first transmission (`xid`, `count` transmissions) of a send-based DDP reply
    /// that is not one result in one transmission: checks the group's size against
    /// the receives lent, the results against the call's direction and this end's
    /// structure, keeps the landed segment and the payload stream (copied into a large
    /// buffer, as a reply group's is), and completes at once when `count` is 1. A bad
    /// group fails the call with `BadReply::Continuation` and is answered ROPT_XMTERR;
    /// its later transmissions are dropped as they come (their lent receives back).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_ddp_reply_first(
        &mut self,
        t: &mut Transport,
        slot: u32,
        (xid, count): (u32, u32),
        buf: RegBuf,
        (poff, plen): (usize, usize),
        items: Result<ReplyItems, OptxInfo>,
        swi: Option<u32>,
    ) {
        let landed = t.recvs.take_landed();
        let s = &self.slots[slot as usize];
        let (lent, asked) = (s.rsbuf, s.reply_ddp);
        let mut caps = [0usize; MAX_WRITE_SINKS];
        let n_sinks = s.sinks.len().min(MAX_WRITE_SINKS);
        for (c, b) in caps.iter_mut().zip(s.sinks.as_slice()) {
            *c = b.capacity();
        }
        let size_bad = count == 0 || count - 1 > lent;
        // The receives the rest of the group uses stay lent until they come.
        let expected = if size_bad { 0 } else { count - 1 };
        self.slots[slot as usize].rsbuf -= expected;
        self.cont.lent_to_asm += expected;
        self.release_cont(slot);
        self.release_credit(slot);
        let late = self.slots[slot as usize].state.answered();
        let layout = t
            .recvs
            .segments
            .as_ref()
            .and_then(|s| DdpLayout::of(&s.structure()));
        let checked = if size_bad {
            Err(OptxInfo::BadSeq {
                expect: lent + 1,
                current: count,
            })
        } else if !asked {
            Err(refuse())
        } else {
            items.and_then(|i| match layout.as_ref() {
                Some(l) => check(l, count, &i, &caps[..n_sinks]),
                None => Err(refuse()),
            })
        };
        let mut asm = ReplyAsm {
            xid,
            slot,
            count: if size_bad { 1 } else { count },
            next: 1,
            buf: None,
            len: 0,
            swi,
            ddp: None,
        };
        let outcome = if late {
            drop(landed);
            self.stats.late_replies += 1;
            self.progress(slot);
            Ok(())
        } else {
            checked.and_then(|mut d| {
                d.keep(0, landed)?;
                asm.buf = RegBuf::from_cache(&mut self.large).ok();
                if !asm.append(payload_of(&buf, poff, plen)) {
                    return Err(OptxInfo::BadPl {
                        value: plen as u32,
                        min: 0,
                        max: self.max_pull,
                    });
                }
                asm.ddp = Some(d);
                Ok(())
            })
        };
        t.recvs.recycle(buf);
        if let Err(info) = outcome {
            // The rest of the group is swallowed (no buffer): its receives come back.
            if let Some(b) = asm.buf.take() {
                b.release_into(&mut self.large);
            }
            asm.ddp = None;
            self.fail_call(t, slot, BadReply::Continuation(info), swi);
            self.send_transmit_error(t, (xid, 0), None, info);
        }
        if asm.count > 1 {
            self.cont.asm = Some(asm);
        } else {
            self.finish_ddp_reply(t, asm);
        }
    }

    /// A continuation `c` of the send-based DDP reply group in progress (already
    /// checked for its XID, type and number, its lent receive counted back): it
    /// carries bulk only (`pslen` 0, else BADPL), and its landed segment is kept
    /// (BADOFF when its piece did not all land). The last one completes the group.
    pub(super) fn on_ddp_cont(
        &mut self,
        t: &mut Transport,
        c: XmtCont,
        buf: RegBuf,
        landed: Option<RegBuf>,
    ) {
        t.recvs.recycle(buf);
        let Some(asm) = self.cont.asm.as_mut() else {
            return;
        };
        let k = c.xnum as usize;
        let kept = if c.pslen != 0 {
            Err(OptxInfo::BadPl {
                value: c.pslen,
                min: 0,
                max: 0,
            })
        } else {
            match asm.ddp.as_mut() {
                Some(d) => d.keep(k, landed),
                None => Ok(()),
            }
        };
        let xid = asm.xid;
        if let Err(info) = kept {
            // This transmission's receive is already counted back; the group's other
            // lent receives come back with it.
            self.broken_reply_group_at(t, Some(info), (xid, Some(c.xnum)));
            return;
        }
        if asm.next == asm.count {
            if let Some(asm) = self.cont.asm.take() {
                self.finish_ddp_reply(t, asm);
            }
        }
    }

    /// A whole send-based DDP reply group: each result to its Write sink (the landed
    /// segment itself for an item in one segment; gathered into the caller's sink for
    /// one across several), the payload stream as the reply.
    fn finish_ddp_reply(&mut self, t: &mut Transport, asm: ReplyAsm) {
        let ReplyAsm {
            xid,
            slot,
            buf,
            len,
            swi,
            count,
            ddp,
            ..
        } = asm;
        let (Some(buf), Some(mut d)) = (buf, ddp) else {
            return;
        };
        let live = self
            .slots
            .get(slot as usize)
            .is_some_and(|s| matches!(s.state, super::slot::SlotState::Sent) && s.xid == xid);
        if !live {
            buf.release_into(&mut self.large);
            return;
        }
        let mut lens = [0u32; MAX_WRITE_SINKS];
        let mut bad = None;
        let (mut placed, mut short, mut none) = (0u64, 0u64, 0u64);
        for (i, r) in d.results[..usize::from(d.n)].iter().enumerate() {
            let Some((length, seg_off, txs)) = r.placed else {
                if r.too_short {
                    short += 1;
                } else {
                    none += 1;
                }
                continue;
            };
            let mut ks = (0..GROUP_MAX).filter(|k| txs & (1 << k) != 0);
            let (Some(k0), None) = (ks.next(), ks.clone().next()) else {
                // Across several segments: gathered into the caller's sink (one copy).
                let Some(sink) = self.slots[slot as usize].sinks.get_mut(i) else {
                    bad = Some(refuse());
                    break;
                };
                let mut at = 0usize;
                let mut off = seg_off as usize;
                for k in (0..GROUP_MAX).filter(|k| txs & (1 << k) != 0) {
                    let Some(seg) = d.segs[k].take() else {
                        bad = Some(refuse());
                        break;
                    };
                    let take = seg.len().saturating_sub(off).min(length as usize - at);
                    match (
                        seg.as_slice().get(off..off + take),
                        sink.storage_mut().get_mut(at..at + take),
                    ) {
                        (Some(src), Some(dst)) => dst.copy_from_slice(src),
                        _ => {
                            bad = Some(refuse());
                            break;
                        }
                    }
                    at += take;
                    off = 0;
                    // `seg` back to the pool.
                }
                if bad.is_none() && at != length as usize {
                    bad = Some(OptxInfo::BadOff {
                        value: length,
                        min: 0,
                        max: at as u32,
                    });
                }
                if bad.is_some() {
                    break;
                }
                lens[i] = length;
                placed += 1;
                continue;
            };
            let Some(mut seg) = d.segs[k0].take() else {
                bad = Some(refuse());
                break;
            };
            if let Err(info) = fit_item(&mut seg, seg_off, length) {
                bad = Some(info);
                break;
            }
            // The caller's sink goes back to its pool; the segment takes its place.
            if let Some(sink) = self.slots[slot as usize].sinks.get_mut(i) {
                drop(core::mem::replace(sink, seg));
            }
            lens[i] = length;
            placed += 1;
        }
        if let Some(info) = bad {
            buf.release_into(&mut self.large);
            self.fail_call(t, slot, BadReply::Continuation(info), swi);
            self.send_transmit_error(t, (xid, 0), None, info);
            return;
        }
        self.stats.send_ddp_reply_items += placed;
        self.stats.ddp_replies_too_short += short;
        self.stats.ddp_replies_no_item += none;
        self.stats.cont_replies += u64::from(count > 1);
        let reply = Reply {
            buf,
            start: 0,
            len: len as u32,
            padding: None,
        };
        let status = super::reply::status_of(reply.bytes());
        self.answer(t, slot, status, Some(reply), lens, swi);
    }
}
