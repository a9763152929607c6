//! Send-based DDP, requester side (draft-dnoveck-rpcrdma-rtrext §7): a call whose DDP
//! argument fits a DDP-targetable segment of the peer's advertised receive buffer
//! structure goes as one ROPT_XMTREQ whose `optxrq_ddp` places the argument by target
//! buffer segment number, instead of RDMA_MSG with a Read chunk: no registration, no
//! RDMA Read round trip, and the argument lands in the receiver's segment, which its
//! service gets without a copy. See `engine/DESIGN.md`, "Send-based DDP".

use std::time::Instant;

use super::RequesterHalf;
use crate::core::transport::Transport;
use crate::core::wrid::{WrId, WrKind};
use crate::fabric::{SendOp, Sge};
use crate::requester::CallRequest;
use crate::wire::header::{FIXED_HEADER_LEN, WORD_LEN};
use crate::wire::rtr::place::{self, DdpLayout, Loc, MItem, TbsnLoc, MAX_ITEM_SEGMENTS};

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
        t.sq.take(1);
        let staged = t.stage(
            WrId::new(WrKind::CallSend, slot).encode(),
            SendOp::Send,
            &sgl[..n],
        );
        if !staged {
            t.sq.give(1);
            return false;
        }
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
        self.stats.send_ddp_items += 1;
        true
    }
}
