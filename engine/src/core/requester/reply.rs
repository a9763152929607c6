//! Reading a reply's transport header against what its call offered.

use crate::core::rpcmsg::classify_reply;
use crate::requester::{BadReply, CallStatus, TransportError, MAX_WRITE_SINKS};
use crate::service::Padding;
use crate::wire::header::{BodyView, HeaderView, Segment};

/// Most segments of a responder-provided Read chunk this requester pulls.
pub(super) const MAX_PULL_SEGMENTS: usize = 8;

/// A reply's responder-provided Position-Zero Read chunk, boiled down to plain values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PullPlan {
    pub(super) segs: [Segment; MAX_PULL_SEGMENTS],
    pub(super) n: u8,
    /// Octets of the whole chunk (the RPC reply message).
    pub(super) total: u32,
}

/// Where the reply's RPC message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Body {
    /// Inline, in the receive buffer at `start`, `len` octets.
    Inline {
        start: u32,
        len: u32,
        padding: Option<Padding>,
    },
    /// In the Reply chunk buffer, `len` octets.
    InChunk { len: u32 },
    /// In the responder's memory: a Position-Zero Read chunk to pull with RDMA Read
    /// (draft-cel-nfsv4-rpcrdma-reliable-reply §4.1.2).
    Pull(PullPlan),
}

/// A reply header boiled down to plain values, so the receive buffer can move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Interpreted {
    /// An RPC reply: where it is, and the octets written into each write sink.
    Reply {
        body: Body,
        sink_lens: [u32; MAX_WRITE_SINKS],
    },
    /// RDMA_ERROR for the call, or a reply that broke the protocol.
    Failed(TransportError),
    /// RDMA_DONE: nothing for a requester to do.
    Done,
}

/// Reads `hdr`, the reply to a call that offered write sinks of `sink_caps[..sinks]`
/// octets and a Reply chunk of `reply_cap` octets (0: none). `max_pull` is the largest
/// responder-provided Read chunk this requester pulls; 0 when the extension was not
/// negotiated (such a reply then fails its call: the draft's §4.1.3).
pub(super) fn interpret(
    hdr: &HeaderView<'_>,
    sink_caps: &[u32],
    reply_cap: u32,
    max_pull: u32,
) -> Interpreted {
    let (lists, padding) = match hdr.body() {
        BodyView::Msg(l) | BodyView::Nomsg(l) => (l, None),
        BodyView::Msgp {
            align,
            thresh,
            lists,
        } => {
            if !align.is_power_of_two() {
                return bad(BadReply::MsgpAlignment);
            }
            (
                lists,
                Some(Padding {
                    align: *align,
                    thresh: *thresh,
                    base: hdr.header_len(),
                }),
            )
        }
        BodyView::Done => return Interpreted::Done,
        BodyView::Error(e) => return Interpreted::Failed(TransportError::Rdma(*e)),
    };
    let mut pull = None;
    if lists.read_segment_count() != 0 {
        // A responder-provided Read chunk (the draft's §4.1): only when negotiated, only
        // in RDMA_NOMSG, only at position zero, and never beside a Reply chunk.
        if max_pull == 0
            || !matches!(hdr.body(), BodyView::Nomsg(_))
            || lists.reply_chunk().is_some()
        {
            return bad(BadReply::ReadChunks);
        }
        let mut plan = PullPlan {
            segs: [Segment::default(); MAX_PULL_SEGMENTS],
            n: 0,
            total: 0,
        };
        let mut total = 0u64;
        for r in lists.read_list() {
            if r.position != 0 || usize::from(plan.n) == MAX_PULL_SEGMENTS {
                return bad(BadReply::ReadChunks);
            }
            total += u64::from(r.segment.length);
            plan.segs[usize::from(plan.n)] = r.segment;
            plan.n += 1;
        }
        if total > u64::from(max_pull) {
            return bad(BadReply::ReadChunkTooLarge);
        }
        plan.total = total as u32;
        pull = Some(plan);
    }
    let mut sink_lens = [0u32; MAX_WRITE_SINKS];
    if lists.write_chunk_count() > sink_caps.len() {
        return bad(BadReply::TooManyWriteChunks);
    }
    for (i, chunk) in lists.write_list().enumerate() {
        if chunk.len() > 1 {
            return bad(BadReply::WriteChunkSegments);
        }
        let written = chunk.total_length();
        let cap = sink_caps.get(i).copied().unwrap_or(0);
        if written > u64::from(cap) {
            return bad(BadReply::WriteChunkOverrun);
        }
        sink_lens[i] = written as u32;
    }
    let body = match hdr.body() {
        BodyView::Nomsg(_) if pull.is_some() => match pull {
            Some(p) => Body::Pull(p),
            None => return bad(BadReply::ReadChunks),
        },
        BodyView::Nomsg(_) => {
            let Some(chunk) = lists.reply_chunk() else {
                return bad(BadReply::NomsgWithoutReplyChunk);
            };
            if reply_cap == 0 {
                return bad(BadReply::UnofferedReplyChunk);
            }
            if chunk.len() > 1 {
                return bad(BadReply::ReplyChunkSegments);
            }
            let len = chunk.total_length();
            if len > u64::from(reply_cap) {
                return bad(BadReply::ReplyChunkOverrun);
            }
            Body::InChunk { len: len as u32 }
        }
        _ => {
            let start = hdr.header_len();
            let len = hdr.after_header().len();
            Body::Inline {
                start: start as u32,
                len: len as u32,
                padding,
            }
        }
    };
    Interpreted::Reply { body, sink_lens }
}

fn bad(why: BadReply) -> Interpreted {
    Interpreted::Failed(TransportError::BadReply(why))
}

/// The status of an RPC reply message.
#[inline]
pub(super) fn status_of(msg: &[u8]) -> CallStatus {
    match classify_reply(msg) {
        Ok(()) => CallStatus::Success,
        Err(e) => CallStatus::RpcError(e),
    }
}
