//! Borrowed header representations for encoding into a send buffer.
//!
//! A [`HeaderRepr`] borrows its chunk lists from the caller, so building one never
//! allocates; [`HeaderRepr::encoded_len`] is exact and computed without writing, and
//! [`HeaderRepr::encode`] writes the transport header only: the RPC message of an
//! RDMA_MSG or RDMA_MSGP is the caller's to place after it (typically as a second
//! gather element of the same Send).
//!
//! The encoder writes what it is given. It does not apply the decoder's policy checks
//! ([`Limits`](super::Limits), RDMA_NOMSG without chunks, wrapping segments); building
//! headers that a peer accepts is the engine's job.

use super::consts::{
    ERR_CHUNK, ERR_VERS, FIXED_HEADER_LEN, MIN_MSG_HEADER_LEN, RDMA_DONE, RDMA_ERROR, RDMA_MSG,
    RDMA_MSGP, RDMA_NOMSG, READ_LIST_ENTRY_LEN, RPCRDMA_VERSION, SEGMENT_LEN, WORD_LEN,
};
use super::segment::{ReadSegment, Segment};
use crate::wire::xdr::{BufferTooSmall, XdrEncoder};
use core::borrow::Borrow;

/// Writes the header of an inline RDMA_MSG with three empty chunk lists (RFC 8166
/// §4.2) — XID, version 1, `credit`, RDMA_MSG, then three "absent" list
/// discriminators — without building a [`HeaderRepr`]: the shape of nearly every call
/// and reply, written on each one. Returns its length ([`MIN_MSG_HEADER_LEN`]), or
/// `None` when `buf` is shorter.
#[inline]
pub(crate) fn encode_plain_msg(buf: &mut [u8], xid: u32, credit: u32) -> Option<usize> {
    let out = buf.get_mut(..MIN_MSG_HEADER_LEN)?;
    let words = [xid, RPCRDMA_VERSION, credit, RDMA_MSG, 0, 0, 0];
    for (dst, w) in out.chunks_exact_mut(WORD_LEN).zip(words) {
        dst.copy_from_slice(&w.to_be_bytes());
    }
    Some(MIN_MSG_HEADER_LEN)
}

/// The body of an RDMA_ERROR message (RFC 8166 §4.1.2 `rpc_rdma_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "err"))]
pub enum RdmaError {
    /// ERR_VERS: the sender supports transport versions `low` through `high` inclusive.
    #[cfg_attr(feature = "serde", serde(rename = "ERR_VERS"))]
    Vers {
        /// Lowest supported version.
        low: u32,
        /// Highest supported version.
        high: u32,
    },
    /// ERR_CHUNK: the header or its chunks could not be parsed or processed.
    #[cfg_attr(feature = "serde", serde(rename = "ERR_CHUNK"))]
    Chunk,
}

impl RdmaError {
    /// The `rdma_err` wire value.
    #[inline]
    pub const fn code(&self) -> u32 {
        match self {
            RdmaError::Vers { .. } => ERR_VERS,
            RdmaError::Chunk => ERR_CHUNK,
        }
    }

    /// Octets of the body, including the `rdma_err` word.
    #[inline]
    pub const fn encoded_len(&self) -> usize {
        match self {
            RdmaError::Vers { .. } => 3 * WORD_LEN,
            RdmaError::Chunk => WORD_LEN,
        }
    }
}

/// The three chunk lists of RDMA_MSG, RDMA_NOMSG and RDMA_MSGP, borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkListsRepr<'a> {
    /// The Read list, in wire order.
    pub reads: &'a [ReadSegment],
    /// The Write list: one entry per Write chunk, each an array of segments.
    pub writes: &'a [&'a [Segment]],
    /// The Reply chunk, if any.
    pub reply: Option<&'a [Segment]>,
}

impl ChunkListsRepr<'_> {
    /// Three empty lists.
    pub const EMPTY: ChunkListsRepr<'static> = ChunkListsRepr {
        reads: &[],
        writes: &[],
        reply: None,
    };
}

impl ChunkListsRepr<'_> {
    /// Octets of the three lists on the wire.
    pub fn encoded_len(&self) -> usize {
        let reads = self
            .reads
            .len()
            .saturating_mul(READ_LIST_ENTRY_LEN)
            .saturating_add(WORD_LEN);
        let writes = self.writes.iter().fold(WORD_LEN, |acc, c| {
            acc.saturating_add(chunk_len(c).saturating_add(WORD_LEN))
        });
        let reply = match self.reply {
            Some(c) => WORD_LEN.saturating_add(chunk_len(c)),
            None => WORD_LEN,
        };
        reads.saturating_add(writes).saturating_add(reply)
    }

    /// No Read list, no Write list, no Reply chunk.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.reads.is_empty() && self.writes.is_empty() && self.reply.is_none()
    }

    fn encode_to(&self, e: &mut XdrEncoder<'_>) -> Result<(), BufferTooSmall> {
        for r in self.reads {
            e.optional(true)?;
            put_read_segment(e, r)?;
        }
        e.optional(false)?;
        for c in self.writes {
            e.optional(true)?;
            put_chunk(e, *c)?;
        }
        e.optional(false)?;
        match self.reply {
            Some(c) => {
                e.optional(true)?;
                put_chunk(e, c)
            }
            None => e.optional(false),
        }
    }
}

/// Everything after `rdma_proc`, by procedure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyRepr<'a> {
    /// RDMA_MSG: the RPC message follows the header.
    Msg(ChunkListsRepr<'a>),
    /// RDMA_NOMSG: the RPC message travels in a chunk.
    Nomsg(ChunkListsRepr<'a>),
    /// RDMA_MSGP: padding parameters, then the lists (RFC 5666 §4.3 puts `rdma_align` and
    /// `rdma_thresh` before the lists).
    Msgp {
        /// `rdma_align`: the alignment the padding achieves.
        align: u32,
        /// `rdma_thresh`: opaque data at least this long is padded.
        thresh: u32,
        /// The chunk lists.
        lists: ChunkListsRepr<'a>,
    },
    /// RDMA_DONE: no body.
    Done,
    /// RDMA_ERROR with its error body.
    Error(RdmaError),
}

/// A transport header to encode. Its version is always [`RPCRDMA_VERSION`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderRepr<'a> {
    /// `rdma_xid`: the XID of the RPC message this header goes with.
    pub xid: u32,
    /// `rdma_credit`: credits requested (calls) or granted (replies).
    pub credit: u32,
    /// Procedure and body.
    pub body: BodyRepr<'a>,
}

impl HeaderRepr<'_> {
    /// The `rdma_proc` value.
    pub const fn proc_value(&self) -> u32 {
        match self.body {
            BodyRepr::Msg(_) => RDMA_MSG,
            BodyRepr::Nomsg(_) => RDMA_NOMSG,
            BodyRepr::Msgp { .. } => RDMA_MSGP,
            BodyRepr::Done => RDMA_DONE,
            BodyRepr::Error(_) => RDMA_ERROR,
        }
    }

    /// Exact number of octets [`encode`](Self::encode) writes.
    pub fn encoded_len(&self) -> usize {
        let body = match &self.body {
            BodyRepr::Msg(l) if l.is_empty() => return CHUNKLESS_MSG_LEN,
            BodyRepr::Msg(l) | BodyRepr::Nomsg(l) => l.encoded_len(),
            BodyRepr::Msgp { lists, .. } => lists.encoded_len().saturating_add(2 * WORD_LEN),
            BodyRepr::Done => 0,
            BodyRepr::Error(e) => e.encoded_len(),
        };
        FIXED_HEADER_LEN.saturating_add(body)
    }

    /// Writes the header at the start of `buf`, returning the octets written.
    ///
    /// On error the buffer's contents are unspecified; nothing beyond
    /// [`encoded_len`](Self::encoded_len) octets is touched either way.
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, BufferTooSmall> {
        if let BodyRepr::Msg(l) = &self.body {
            if l.is_empty() {
                // The common header (RDMA_MSG, no chunks): seven words in one go.
                let available = buf.len();
                let out = buf
                    .first_chunk_mut::<CHUNKLESS_MSG_LEN>()
                    .ok_or(BufferTooSmall {
                        needed: CHUNKLESS_MSG_LEN,
                        available,
                    })?;
                out[..4].copy_from_slice(&self.xid.to_be_bytes());
                out[4..8].copy_from_slice(&RPCRDMA_VERSION.to_be_bytes());
                out[8..12].copy_from_slice(&self.credit.to_be_bytes());
                out[12..16].copy_from_slice(&RDMA_MSG.to_be_bytes());
                // The three empty-list discriminators.
                out[16..].fill(0);
                return Ok(CHUNKLESS_MSG_LEN);
            }
        }
        let needed = self.encoded_len();
        if needed > buf.len() {
            // Checking up front reports the whole size, not the first item that failed.
            return Err(BufferTooSmall {
                needed,
                available: buf.len(),
            });
        }
        let mut e = XdrEncoder::new(buf);
        e.u32(self.xid)?;
        e.u32(RPCRDMA_VERSION)?;
        e.u32(self.credit)?;
        e.u32(self.proc_value())?;
        match &self.body {
            BodyRepr::Msg(l) | BodyRepr::Nomsg(l) => l.encode_to(&mut e)?,
            BodyRepr::Msgp {
                align,
                thresh,
                lists,
            } => {
                e.u32(*align)?;
                e.u32(*thresh)?;
                lists.encode_to(&mut e)?;
            }
            BodyRepr::Done => {}
            BodyRepr::Error(err) => put_error(&mut e, err)?,
        }
        Ok(e.finish())
    }
}

/// Octets of an RDMA_MSG header without chunks: the four fixed words and three empty
/// list discriminators.
const CHUNKLESS_MSG_LEN: usize = FIXED_HEADER_LEN + 3 * WORD_LEN;

/// Octets of a counted segment array (`xdr_write_chunk`): count word plus segments.
///
/// An array whose count does not fit the 32-bit count word has no encoding; it reports
/// `usize::MAX` so that [`HeaderRepr::encode`]'s up-front size check rejects it.
#[inline]
pub(crate) fn chunk_len(segments: &[Segment]) -> usize {
    if u32::try_from(segments.len()).is_err() {
        return usize::MAX;
    }
    segments
        .len()
        .saturating_mul(SEGMENT_LEN)
        .saturating_add(WORD_LEN)
}

#[inline]
pub(crate) fn put_segment(e: &mut XdrEncoder<'_>, s: &Segment) -> Result<(), BufferTooSmall> {
    e.u32(s.handle)?;
    e.u32(s.length)?;
    e.u64(s.offset)
}

#[inline]
pub(crate) fn put_read_segment(
    e: &mut XdrEncoder<'_>,
    r: &ReadSegment,
) -> Result<(), BufferTooSmall> {
    e.u32(r.position)?;
    put_segment(e, &r.segment)
}

/// Writes a counted segment array. More than `u32::MAX` segments cannot be expressed;
/// callers size-check first (see [`chunk_len`]), so that error is only a backstop.
pub(crate) fn put_chunk<I>(e: &mut XdrEncoder<'_>, segments: I) -> Result<(), BufferTooSmall>
where
    I: IntoIterator,
    I::IntoIter: ExactSizeIterator,
    I::Item: core::borrow::Borrow<Segment>,
{
    let it = segments.into_iter();
    let count = u32::try_from(it.len()).map_err(|_| BufferTooSmall {
        needed: usize::MAX,
        available: e.position(),
    })?;
    // `available` above is a lower bound: the encoder does not expose its capacity.
    e.u32(count)?;
    for s in it {
        put_segment(e, s.borrow())?;
    }
    Ok(())
}

pub(crate) fn put_error(e: &mut XdrEncoder<'_>, err: &RdmaError) -> Result<(), BufferTooSmall> {
    e.u32(err.code())?;
    if let RdmaError::Vers { low, high } = *err {
        e.u32(low)?;
        e.u32(high)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_msg_matches_the_general_encoder() {
        let lists = ChunkListsRepr {
            reads: &[],
            writes: &[],
            reply: None,
        };
        let repr = HeaderRepr {
            xid: 0x1234_5678,
            credit: 77,
            body: BodyRepr::Msg(lists),
        };
        let mut general = [0xaau8; 64];
        let n = repr.encode(&mut general).expect("encodes");
        let mut plain = [0x55u8; 64];
        assert_eq!(encode_plain_msg(&mut plain, 0x1234_5678, 77), Some(n));
        assert_eq!(plain[..n], general[..n]);
        assert_eq!(
            encode_plain_msg(&mut plain[..MIN_MSG_HEADER_LEN - 1], 1, 1),
            None
        );
    }
}
