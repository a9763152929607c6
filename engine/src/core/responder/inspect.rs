//! Checking a call's chunk lists before anything is done with them. A call that fails
//! here is answered with RDMA_ERROR/ERR_CHUNK (RFC 8166 §4.5.2); nothing is read or
//! written for it.

use crate::service::{MAX_DDP_ITEMS, MAX_WRITE_CHUNKS};
use crate::wire::header::{BodyView, HeaderView};
use crate::wire::xdr::pad4;

/// Most segments the responder handles in one Write chunk or the Reply chunk (RFC 8267
/// §6.4.2's 16, and the decoder's default limit).
pub(crate) const MAX_CHUNK_SEGMENTS: usize = 16;

/// What the checks found out about a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CallInfo {
    /// The message is in a Position-Zero Read chunk.
    pub(crate) long: bool,
    /// Read chunks (including position zero).
    pub(crate) read_chunks: usize,
    /// RDMA Reads needed: Read segments with a non-zero length.
    pub(crate) reads: u32,
    /// Octets the largest Read chunk holds.
    pub(crate) largest_chunk: u64,
}

/// Why a call's chunks cannot be processed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChunkProblem {
    /// RDMA_NOMSG without a Position-Zero Read chunk, or RDMA_MSG with one.
    MessagePlacement,
    /// More Read chunks, Write chunks or segments than the responder handles.
    TooMany,
    /// A Read chunk larger than the responder's buffers.
    TooLarge,
    /// Positions not multiples of four, not increasing, or beyond the message.
    BadPosition,
    /// RDMA_MSGP with an alignment that is not a power of two.
    BadAlignment,
    /// Needs more send-queue entries than the queue has.
    TooManyOperations,
}

/// Checks `h` (an RDMA_MSG, RDMA_NOMSG or RDMA_MSGP call) against what this responder
/// handles: buffers of `max_chunk` octets, a send queue of `sq_depth`, and at most
/// `max_chunks` DDP Read chunks and as many Write chunks (never more than its tables
/// hold, whatever the caller asks).
// The chunkless RDMA_MSG inline, the walk over chunks not: nearly every call has no
// chunks, and for those the checks below come down to one (a Send needs room).
#[inline(always)]
pub(crate) fn inspect(
    h: &HeaderView<'_>,
    max_chunk: u64,
    sq_depth: u32,
    max_chunks: usize,
) -> Result<CallInfo, ChunkProblem> {
    if let BodyView::Msg(lists) = h.body() {
        if lists.is_empty() {
            if sq_depth == 0 {
                return Err(ChunkProblem::TooManyOperations);
            }
            return Ok(CallInfo {
                long: false,
                read_chunks: 0,
                reads: 0,
                largest_chunk: 0,
            });
        }
    }
    inspect_chunks(h, max_chunk, sq_depth, max_chunks)
}

/// [`inspect`] of a call with chunks, or an RDMA_NOMSG or RDMA_MSGP one.
#[inline(never)]
fn inspect_chunks(
    h: &HeaderView<'_>,
    max_chunk: u64,
    sq_depth: u32,
    max_chunks: usize,
) -> Result<CallInfo, ChunkProblem> {
    let max_ddp = max_chunks.min(MAX_DDP_ITEMS);
    let max_writes = max_chunks.min(MAX_WRITE_CHUNKS);
    let Some(lists) = h.chunk_lists() else {
        return Err(ChunkProblem::MessagePlacement);
    };
    if let BodyView::Msgp { align, .. } = h.body() {
        if !align.is_power_of_two() {
            return Err(ChunkProblem::BadAlignment);
        }
    }
    let mut chunks = lists.read_chunks().peekable();
    let long = chunks.peek().is_some_and(|c| c.position() == 0);
    let nomsg = matches!(h.body(), BodyView::Nomsg(_));
    if long != nomsg {
        return Err(ChunkProblem::MessagePlacement);
    }
    let mut info = CallInfo {
        long,
        read_chunks: 0,
        reads: 0,
        largest_chunk: 0,
    };
    let mut msg_len = h.after_header().len() as u64;
    let mut moved = 0u64;
    let mut last_offset = 0u64;
    let mut last_position = 0u64;
    for (i, c) in lists.read_chunks().enumerate() {
        info.read_chunks += 1;
        if info.read_chunks > usize::from(long) + max_ddp {
            return Err(ChunkProblem::TooMany);
        }
        let total = c.total_length();
        if total > max_chunk {
            return Err(ChunkProblem::TooLarge);
        }
        info.largest_chunk = info.largest_chunk.max(total);
        info.reads += c.segments().filter(|s| s.length > 0).count() as u32;
        if long && i == 0 {
            msg_len = total;
            continue;
        }
        let position = u64::from(c.position());
        if position == 0 || position & 3 != 0 || position < last_position || position < moved {
            return Err(ChunkProblem::BadPosition);
        }
        let offset = position - moved;
        if offset < last_offset || offset > msg_len {
            return Err(ChunkProblem::BadPosition);
        }
        last_offset = offset;
        last_position = position;
        moved += pad4(total as usize) as u64;
    }
    if lists.write_chunk_count() > max_writes {
        return Err(ChunkProblem::TooMany);
    }
    let mut write_ops = 0u32;
    for w in lists.write_list() {
        if w.len() > MAX_CHUNK_SEGMENTS {
            return Err(ChunkProblem::TooMany);
        }
        write_ops += w.len() as u32;
    }
    if let Some(r) = lists.reply_chunk() {
        if r.len() > MAX_CHUNK_SEGMENTS {
            return Err(ChunkProblem::TooMany);
        }
        write_ops += r.len() as u32;
    }
    if info.reads + 1 > sq_depth || write_ops + 1 > sq_depth {
        return Err(ChunkProblem::TooManyOperations);
    }
    Ok(info)
}
