//! [`HeaderView`]: a validated, zero-copy view of a received transport header.

use super::consts::{Procedure, FIXED_HEADER_LEN, RPCRDMA_VERSION, WORD_LEN};
use super::iter::{ReadChunks, ReadList, Segments, WriteList};
use super::repr::{put_chunk, put_error, put_read_segment, RdmaError};
use crate::wire::xdr::{BufferTooSmall, XdrEncoder};

/// The three chunk lists of a received RDMA_MSG, RDMA_NOMSG or RDMA_MSGP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkListsView<'a> {
    /// Read list entries without the terminating word.
    pub(crate) reads: &'a [u8],
    pub(crate) read_chunks: u32,
    /// Write list entries without the terminating word.
    pub(crate) writes: &'a [u8],
    pub(crate) write_chunks: u32,
    pub(crate) write_segments: u32,
    /// Reply chunk segments without the count word.
    pub(crate) reply: Option<&'a [u8]>,
}

impl<'a> ChunkListsView<'a> {
    /// Lists that are all empty.
    pub(crate) const EMPTY: ChunkListsView<'static> = ChunkListsView {
        reads: &[],
        read_chunks: 0,
        writes: &[],
        write_chunks: 0,
        write_segments: 0,
        reply: None,
    };

    /// The Read list entries.
    #[inline]
    pub const fn read_list(&self) -> ReadList<'a> {
        ReadList::new(self.reads)
    }

    /// The Read list grouped into Read chunks.
    #[inline]
    pub const fn read_chunks(&self) -> ReadChunks<'a> {
        self.read_list().chunks()
    }

    /// The Write chunks.
    #[inline]
    pub const fn write_list(&self) -> WriteList<'a> {
        WriteList::new(self.writes, self.write_chunks)
    }

    /// The Reply chunk, if present.
    #[inline]
    pub fn reply_chunk(&self) -> Option<Segments<'a>> {
        self.reply.map(Segments::new)
    }

    /// Number of Read list entries (segments, over all Read chunks).
    #[inline]
    pub fn read_segment_count(&self) -> usize {
        self.read_list().len()
    }

    /// Number of Read chunks (runs of entries with equal positions).
    #[inline]
    pub const fn read_chunk_count(&self) -> usize {
        self.read_chunks as usize
    }

    /// Number of Write chunks.
    #[inline]
    pub const fn write_chunk_count(&self) -> usize {
        self.write_chunks as usize
    }

    /// Number of segments over all Write chunks.
    #[inline]
    pub const fn write_segment_count(&self) -> usize {
        self.write_segments as usize
    }

    /// Number of segments in the Reply chunk; 0 when there is none (see
    /// [`reply_chunk`](Self::reply_chunk) to tell an absent chunk from an empty one).
    #[inline]
    pub fn reply_segment_count(&self) -> usize {
        self.reply_chunk().map_or(0, |c| c.len())
    }

    /// Whether all three lists are empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.reads.is_empty() && self.writes.is_empty() && self.reply.is_none()
    }

    /// Octets of the three lists on the wire.
    pub fn encoded_len(&self) -> usize {
        let reply = match self.reply {
            Some(r) => 2 * WORD_LEN + r.len(),
            None => WORD_LEN,
        };
        self.reads.len() + WORD_LEN + self.writes.len() + WORD_LEN + reply
    }

    fn encode_to(&self, e: &mut XdrEncoder<'_>) -> Result<(), BufferTooSmall> {
        for r in self.read_list() {
            e.optional(true)?;
            put_read_segment(e, &r)?;
        }
        e.optional(false)?;
        for c in self.write_list() {
            e.optional(true)?;
            put_chunk(e, c)?;
        }
        e.optional(false)?;
        match self.reply_chunk() {
            Some(c) => {
                e.optional(true)?;
                put_chunk(e, c)
            }
            None => e.optional(false),
        }
    }
}

/// Everything after `rdma_proc` of a received header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyView<'a> {
    /// RDMA_MSG.
    Msg(ChunkListsView<'a>),
    /// RDMA_NOMSG.
    Nomsg(ChunkListsView<'a>),
    /// RDMA_MSGP.
    Msgp {
        /// `rdma_align`.
        align: u32,
        /// `rdma_thresh`.
        thresh: u32,
        /// The chunk lists.
        lists: ChunkListsView<'a>,
    },
    /// RDMA_DONE.
    Done,
    /// RDMA_ERROR.
    Error(RdmaError),
}

/// A received transport header, validated once by [`HeaderView::parse`]; every accessor
/// reads from the original bytes and cannot fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderView<'a> {
    pub(crate) buf: &'a [u8],
    pub(crate) xid: u32,
    pub(crate) credit: u32,
    pub(crate) header_len: usize,
    pub(crate) body: BodyView<'a>,
}

impl<'a> HeaderView<'a> {
    /// `rdma_xid`.
    #[inline]
    pub const fn xid(&self) -> u32 {
        self.xid
    }

    /// `rdma_vers`; always [`RPCRDMA_VERSION`], as other versions are rejected.
    #[inline]
    pub const fn version(&self) -> u32 {
        RPCRDMA_VERSION
    }

    /// `rdma_credit`: credits requested (in a call) or granted (in a reply).
    #[inline]
    pub const fn credit(&self) -> u32 {
        self.credit
    }

    /// `rdma_proc`.
    #[inline]
    pub const fn procedure(&self) -> Procedure {
        match self.body {
            BodyView::Msg(_) => Procedure::Msg,
            BodyView::Nomsg(_) => Procedure::Nomsg,
            BodyView::Msgp { .. } => Procedure::Msgp,
            BodyView::Done => Procedure::Done,
            BodyView::Error(_) => Procedure::Error,
        }
    }

    /// The procedure-specific body.
    #[inline]
    pub const fn body(&self) -> &BodyView<'a> {
        &self.body
    }

    /// The chunk lists of RDMA_MSG, RDMA_NOMSG and RDMA_MSGP; `None` for the others.
    #[inline]
    pub const fn chunk_lists(&self) -> Option<&ChunkListsView<'a>> {
        match &self.body {
            BodyView::Msg(l) | BodyView::Nomsg(l) | BodyView::Msgp { lists: l, .. } => Some(l),
            BodyView::Done | BodyView::Error(_) => None,
        }
    }

    #[inline]
    const fn lists_or_empty(&self) -> &ChunkListsView<'a> {
        match self.chunk_lists() {
            Some(l) => l,
            None => &ChunkListsView::EMPTY,
        }
    }

    /// RDMA_MSGP `(rdma_align, rdma_thresh)`.
    #[inline]
    pub const fn padding(&self) -> Option<(u32, u32)> {
        match self.body {
            BodyView::Msgp { align, thresh, .. } => Some((align, thresh)),
            _ => None,
        }
    }

    /// The RDMA_ERROR body.
    #[inline]
    pub const fn error(&self) -> Option<RdmaError> {
        match self.body {
            BodyView::Error(e) => Some(e),
            _ => None,
        }
    }

    /// The Read list entries (empty for RDMA_DONE and RDMA_ERROR).
    #[inline]
    pub const fn read_list(&self) -> ReadList<'a> {
        self.lists_or_empty().read_list()
    }

    /// The Read list grouped into Read chunks.
    #[inline]
    pub const fn read_chunks(&self) -> ReadChunks<'a> {
        self.lists_or_empty().read_chunks()
    }

    /// The Write chunks (empty for RDMA_DONE and RDMA_ERROR).
    #[inline]
    pub const fn write_list(&self) -> WriteList<'a> {
        self.lists_or_empty().write_list()
    }

    /// The Reply chunk, if present.
    #[inline]
    pub fn reply_chunk(&self) -> Option<Segments<'a>> {
        self.lists_or_empty().reply_chunk()
    }

    /// Number of Read list entries.
    #[inline]
    pub fn read_segment_count(&self) -> usize {
        self.lists_or_empty().read_segment_count()
    }

    /// Number of Read chunks.
    #[inline]
    pub const fn read_chunk_count(&self) -> usize {
        self.lists_or_empty().read_chunk_count()
    }

    /// Number of Write chunks.
    #[inline]
    pub const fn write_chunk_count(&self) -> usize {
        self.lists_or_empty().write_chunk_count()
    }

    /// Number of segments over all Write chunks.
    #[inline]
    pub const fn write_segment_count(&self) -> usize {
        self.lists_or_empty().write_segment_count()
    }

    /// Number of Reply chunk segments; 0 when there is no Reply chunk.
    #[inline]
    pub fn reply_segment_count(&self) -> usize {
        self.lists_or_empty().reply_segment_count()
    }

    /// Octets of the transport header, i.e. the offset of whatever follows it.
    #[inline]
    pub const fn header_len(&self) -> usize {
        self.header_len
    }

    /// The transport header's own octets.
    #[inline]
    pub fn header_bytes(&self) -> &'a [u8] {
        self.buf.get(..self.header_len).unwrap_or(self.buf)
    }

    /// Offset of the RPC message for RDMA_MSG and RDMA_MSGP, which carry it right after
    /// the header (RFC 5666 §4.1; RDMA_MSGP padding is applied inside the message).
    /// `None` for the other procedures: RDMA_NOMSG's message is in a chunk.
    #[inline]
    pub const fn rpc_msg_offset(&self) -> Option<usize> {
        if self.procedure().has_inline_message() {
            Some(self.header_len)
        } else {
            None
        }
    }

    /// The inline RPC message of RDMA_MSG and RDMA_MSGP, which begins with its XID.
    #[inline]
    pub fn rpc_message(&self) -> Option<&'a [u8]> {
        self.rpc_msg_offset().map(|_| self.after_header())
    }

    /// Whatever follows the header in the buffer, for any procedure.
    #[inline]
    pub fn after_header(&self) -> &'a [u8] {
        self.buf.get(self.header_len..).unwrap_or(&[])
    }

    /// Octets [`encode_into`](Self::encode_into) writes: equal to
    /// [`header_len`](Self::header_len), as every field has exactly one encoding.
    pub fn encoded_len(&self) -> usize {
        FIXED_HEADER_LEN
            + match &self.body {
                BodyView::Msg(l) | BodyView::Nomsg(l) => l.encoded_len(),
                BodyView::Msgp { lists, .. } => 2 * WORD_LEN + lists.encoded_len(),
                BodyView::Done => 0,
                BodyView::Error(e) => e.encoded_len(),
            }
    }

    /// Encodes the header again, field by field, into `buf`; the result equals
    /// [`header_bytes`](Self::header_bytes). Used to forward or log a header and to check
    /// the codec against itself.
    pub fn encode_into(&self, buf: &mut [u8]) -> Result<usize, BufferTooSmall> {
        let needed = self.encoded_len();
        if needed > buf.len() {
            return Err(BufferTooSmall {
                needed,
                available: buf.len(),
            });
        }
        let mut e = XdrEncoder::new(buf);
        e.u32(self.xid)?;
        e.u32(RPCRDMA_VERSION)?;
        e.u32(self.credit)?;
        e.u32(self.procedure().as_u32())?;
        match &self.body {
            BodyView::Msg(l) | BodyView::Nomsg(l) => l.encode_to(&mut e)?,
            BodyView::Msgp {
                align,
                thresh,
                lists,
            } => {
                e.u32(*align)?;
                e.u32(*thresh)?;
                lists.encode_to(&mut e)?;
            }
            BodyView::Done => {}
            BodyView::Error(err) => put_error(&mut e, err)?,
        }
        Ok(e.finish())
    }
}
