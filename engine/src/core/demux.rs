//! Which half of a two-role connection (RFC 8167) a received message is for.
//!
//! RFC 8167 §4.1 tells the two directions apart by the RPC message itself, not the
//! transport header: a call carries `msg_type` CALL (0), a reply REPLY (1), in the word
//! after the XID. Messages whose RPC message is not inline are told apart by their
//! chunks: an RDMA_NOMSG call carries its message in a Position-Zero Read chunk, a reply
//! in the Reply chunk the call offered (so no Read chunk), or, when both peers negotiated
//! responder-provided Read chunks (draft-cel-nfsv4-rpcrdma-reliable-reply), in a
//! Position-Zero Read chunk just like a long call's. Those two look alike on the wire, so
//! such a message is a reply exactly when its XID names a call of ours awaiting its reply
//! (`awaits_reply`); XIDs of the two directions are chosen independently (RFC 8167 §4.1),
//! so a peer's long call that happens to carry the XID of one of our calls in flight would
//! be taken for its reply, fail that call and be dropped: the price of an extension only
//! two rpcrdma peers ever use. Without the extension nothing changes. RDMA_ERROR only ever answers a
//! call (RFC 8166 §4.5), so it is a reply; RDMA_DONE is sent by a requester to the
//! responder that exposed memory, so it goes with calls. What does not parse goes to the
//! responder half, which answers it per RFC 8166 §4.5 as a one-role responder would.

use crate::wire::header::{BodyView, HeaderView, Limits};

/// The direction of a received message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// A call (or RDMA_DONE, or something unparseable): for the responder half.
    Call,
    /// A reply or RDMA_ERROR: for the requester half.
    Reply,
}

/// RPC `msg_type` REPLY (RFC 5531 §9).
const REPLY: u32 = 1;

/// The direction of the received message `msg`; `awaits_reply` says whether an XID names
/// a call of ours waiting for its reply, asked only for RDMA_NOMSG with a Read chunk when
/// `reply_reads` (responder-provided Read chunks negotiated).
pub(crate) fn direction(
    msg: &[u8],
    limits: &Limits,
    reply_reads: bool,
    awaits_reply: impl Fn(u32) -> bool,
) -> Direction {
    if crate::wire::rtr::is_optional(msg) {
        return optional_direction(msg);
    }
    let Ok(h) = HeaderView::parse(msg, limits) else {
        return Direction::Call;
    };
    match h.body() {
        BodyView::Error(_) => Direction::Reply,
        BodyView::Done => Direction::Call,
        BodyView::Nomsg(lists) => {
            if lists.read_segment_count() > 0 {
                if reply_reads && awaits_reply(h.xid()) {
                    Direction::Reply
                } else {
                    Direction::Call
                }
            } else {
                Direction::Reply
            }
        }
        BodyView::Msg(_) | BodyView::Msgp { .. } => {
            let word = h.rpc_message().and_then(|m| m.get(4..8));
            match word {
                Some(w) if u32::from_be_bytes([w[0], w[1], w[2], w[3]]) == REPLY => {
                    Direction::Reply
                }
                _ => Direction::Call,
            }
        }
    }
}

/// Message continuation (draft-dnoveck-rpcrdma-rtrext): a call group's transmissions
/// go to the responder, a reply group's to the requester; ROPT_XMTERR to the half whose
/// group it reports (a call's: the requester). Unparseable: the responder answers it.
fn optional_direction(msg: &[u8]) -> Direction {
    use crate::wire::rtr::{MsgDir, RtrBody, RtrView, ROPT_XMTREQ};
    match RtrView::parse(msg).map(|v| v.body) {
        Ok(RtrBody::XmtResp(_)) => Direction::Reply,
        Ok(RtrBody::XmtCont(c)) if c.itype != ROPT_XMTREQ => Direction::Reply,
        Ok(RtrBody::XmtErr(e)) if e.bad.dir == MsgDir::Call => Direction::Reply,
        _ => Direction::Call,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::header::{encode_err_chunk, encode_err_vers};

    fn msg(proc_: u32, lists: &[u32], rpc: &[u32]) -> Vec<u8> {
        let mut v = Vec::new();
        for w in [7u32, 1, 8, proc_].iter().chain(lists).chain(rpc) {
            v.extend_from_slice(&w.to_be_bytes());
        }
        v
    }

    #[test]
    fn calls_and_replies_are_told_apart_by_the_rpc_message() {
        let l = Limits::default();
        // RDMA_MSG, empty chunk lists, then XID and msg_type.
        assert_eq!(
            direction(&msg(0, &[0, 0, 0], &[7, 0, 2]), &l, false, |_| false),
            Direction::Call
        );
        assert_eq!(
            direction(&msg(0, &[0, 0, 0], &[7, 1, 0]), &l, false, |_| false),
            Direction::Reply
        );
        // RDMA_NOMSG with a Position-Zero Read chunk is a long call ...
        let pzrc = [1, 0, 1, 0x100, 0, 0x1000, 0, 0, 0];
        assert_eq!(
            direction(&msg(1, &pzrc, &[]), &l, false, |_| false),
            Direction::Call
        );
        // ... unless the extension is on and its XID is a call of ours awaiting a reply:
        // a responder-provided Read chunk.
        assert_eq!(
            direction(&msg(1, &pzrc, &[]), &l, true, |x| x == 7),
            Direction::Reply
        );
        assert_eq!(
            direction(&msg(1, &pzrc, &[]), &l, true, |x| x == 8),
            Direction::Call
        );
        assert_eq!(
            direction(&msg(1, &pzrc, &[]), &l, false, |x| x == 7),
            Direction::Call
        );
        // ... and without one, a reply that went into the Reply chunk.
        let reply_chunk = [0, 0, 1, 1, 9, 64, 0, 0x2000];
        assert_eq!(
            direction(&msg(1, &reply_chunk, &[]), &l, false, |_| false),
            Direction::Reply
        );
        // RDMA_DONE goes to the responder; RDMA_ERROR to the requester.
        assert_eq!(
            direction(&msg(3, &[], &[]), &l, false, |_| false),
            Direction::Call
        );
        let mut e = [0u8; 64];
        let n = encode_err_chunk(7, 8, &mut e).unwrap();
        assert_eq!(direction(&e[..n], &l, false, |_| false), Direction::Reply);
        let n = encode_err_vers(7, 8, &mut e).unwrap();
        assert_eq!(direction(&e[..n], &l, false, |_| false), Direction::Reply);
        // Garbage goes to the responder, which answers or drops it per RFC 8166 §4.5.
        assert_eq!(direction(&[1, 2, 3], &l, false, |_| false), Direction::Call);
    }
}
