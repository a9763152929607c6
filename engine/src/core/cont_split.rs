//! One RPC message split into the Sends of a continuation group (draft-dnoveck-rpcrdma-
//! rtrext §4.2, §9.2–9.4), for both directions: the requester's call groups
//! (ROPT_XMTREQ + ROPT_XMTCONTs) and the responder's reply groups (ROPT_XMTRESP +
//! ROPT_XMTCONTs) are cut and staged by the same loop.
//!
//! Every transmission is a gather of two pieces: its header, encoded at a fixed stride
//! in a header buffer of the sender's, and its slice of the message body. Nothing of
//! the body is copied. All of a group's Sends are staged in one chain, so nothing
//! intervenes (§4.2) and the fabric posts them with one doorbell.

use crate::core::regbuf::RegBuf;
use crate::core::transport::Transport;
use crate::fabric::{SendOp, Sge};
use crate::wire::private_data::CONTINUATION_GROUP_MAX;
use crate::wire::rtr::{RtrOp, RtrRepr, XmtCont};

/// A group's gather lists, header first, ready to stage.
pub(crate) struct GroupSgls {
    sgls: [[Sge; 2]; CONTINUATION_GROUP_MAX as usize],
    count: usize,
}

/// How to cut one message into a group.
pub(crate) struct Split<'a> {
    /// The message's XID and the credit value every transmission carries.
    pub(crate) xid: u32,
    pub(crate) credit: u32,
    /// Transmissions in the group (at most [`CONTINUATION_GROUP_MAX`]).
    pub(crate) count: u32,
    /// Payload octets per transmission (the last takes the rest).
    pub(crate) per: usize,
    /// Octets of the message (`body[..len]`).
    pub(crate) len: usize,
    /// Where each header is encoded, `stride` octets apart.
    pub(crate) headers: &'a mut RegBuf,
    pub(crate) stride: usize,
    /// The message.
    pub(crate) body: &'a RegBuf,
}

impl Split<'_> {
    /// Encodes every header and builds the gather lists: the first transmission's
    /// operation comes from `lead` (given its payload length), the others are
    /// ROPT_XMTCONTs of `itype`. `None` when a header or a slice does not fit (nothing
    /// staged).
    pub(crate) fn cut(self, itype: u32, lead: impl Fn(u32) -> RtrOp) -> Option<GroupSgls> {
        let n = self.count as usize;
        if n == 0 || n > CONTINUATION_GROUP_MAX as usize {
            return None;
        }
        let mut g = GroupSgls {
            sgls: [[Sge::default(); 2]; CONTINUATION_GROUP_MAX as usize],
            count: n,
        };
        let mut off = 0usize;
        for (k, sgl) in g.sgls.iter_mut().enumerate().take(n) {
            let piece = self.per.min(self.len.checked_sub(off)?);
            let op = if k == 0 {
                lead(piece as u32)
            } else {
                RtrOp::XmtCont(XmtCont {
                    xnum: k as u32,
                    itype,
                    pslen: piece as u32,
                })
            };
            let repr = RtrRepr {
                xid: self.xid,
                credit: self.credit,
                op,
            };
            let at = k * self.stride;
            let hlen = self
                .headers
                .storage_mut()
                .get_mut(at..at + self.stride)
                .and_then(|b| repr.encode(b).ok())?;
            let h = self.headers.sge(at, hlen).ok()?;
            let b = self.body.sge(off, piece).ok()?;
            *sgl = [h, b];
            off += piece;
        }
        Some(g)
    }
}

impl GroupSgls {
    /// Stages the group's Sends, all with `wr_id`, in one chain; the caller has taken
    /// `count` send-queue entries. Returns how many were staged (all, unless the outbox
    /// overflowed, which closes the connection).
    pub(crate) fn stage(&self, t: &mut Transport, wr_id: u64) -> u32 {
        let mut staged = 0u32;
        for sgl in &self.sgls[..self.count] {
            // An empty payload piece (a zero-length message) goes as the header alone.
            let k = if sgl[1].length == 0 { 1 } else { 2 };
            staged += u32::from(t.stage(wr_id, SendOp::Send, &sgl[..k]));
        }
        staged
    }
}
