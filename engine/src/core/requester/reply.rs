//! Reading a reply's transport header against what its call offered.

use crate::core::rpcmsg::classify_reply;
use crate::requester::{BadReply, CallStatus, TransportError, MAX_WRITE_SINKS};
use crate::service::Padding;
use crate::wire::header::{BodyView, HeaderView};

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
/// octets and a Reply chunk of `reply_cap` octets (0: none).
pub(super) fn interpret(hdr: &HeaderView<'_>, sink_caps: &[u32], reply_cap: u32) -> Interpreted {
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
    if lists.read_segment_count() != 0 {
        // Read chunks in replies (RFC 5666 §3.8) need an RDMA_DONE exchange this engine
        // never asks for: it always offers Write and Reply chunks instead.
        return bad(BadReply::ReadChunks);
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
