//! [`HeaderView::parse`]: one pass over a received header that checks everything the
//! accessors later rely on.

use super::consts::{
    Procedure, ERR_CHUNK, ERR_VERS, READ_LIST_ENTRY_LEN, RPCRDMA_VERSION, SEGMENT_LEN, WORD_LEN,
};
use super::error::{Field, HeaderError, HeaderErrorKind};
use super::iter::Segments;
use super::limits::Limits;
use super::repr::RdmaError;
use super::segment::{ReadSegment, Segment};
use super::view::{BodyView, ChunkListsView, HeaderView};
use crate::wire::xdr::{XdrCursor, XdrError};

/// Turns an XDR primitive's failure into the header error for `field`.
fn xdr_kind(field: Field, e: XdrError) -> HeaderErrorKind {
    match e {
        XdrError::Truncated {
            offset,
            needed,
            available,
        } => HeaderErrorKind::Truncated {
            field,
            offset,
            needed,
            available,
        },
        XdrError::BadDiscriminant { offset, value } => HeaderErrorKind::BadDiscriminant {
            field,
            offset,
            value,
        },
        XdrError::TooLong { offset, len, max } => HeaderErrorKind::TooManySegments {
            field,
            offset,
            count: len,
            max,
        },
        // The header has no opaque data, so padding cannot be wrong; the arm exists because
        // the primitive's error type is shared.
        other => HeaderErrorKind::Xdr {
            field,
            error: other,
        },
    }
}

/// Parsing state once the XID is known: every error from here on carries it.
struct Parser<'a, 'l> {
    c: XdrCursor<'a>,
    xid: u32,
    limits: &'l Limits,
}

impl<'a> Parser<'a, '_> {
    #[inline]
    fn fail<T>(&self, kind: HeaderErrorKind) -> Result<T, HeaderError> {
        Err(HeaderError::new(Some(self.xid), kind))
    }

    #[inline]
    fn u32(&mut self, field: Field) -> Result<u32, HeaderError> {
        let xid = self.xid;
        self.c
            .u32()
            .map_err(|e| HeaderError::new(Some(xid), xdr_kind(field, e)))
    }

    #[inline]
    fn more(&mut self, field: Field) -> Result<bool, HeaderError> {
        let xid = self.xid;
        self.c
            .optional()
            .map_err(|e| HeaderError::new(Some(xid), xdr_kind(field, e)))
    }

    /// Bytes `start..end` of the input; the parser only asks for ranges it walked.
    #[inline]
    fn span(&self, start: usize, end: usize) -> &'a [u8] {
        self.c.input().get(start..end).unwrap_or(&[])
    }

    fn check_segment(
        &self,
        field: Field,
        offset: usize,
        segment: Segment,
    ) -> Result<(), HeaderError> {
        if segment.wraps() {
            return self.fail(HeaderErrorKind::SegmentWraps {
                field,
                offset,
                segment,
            });
        }
        Ok(())
    }

    /// The Read list: a linked list of (position, segment) entries.
    fn read_list(&mut self) -> Result<(&'a [u8], u32), HeaderError> {
        let start = self.c.position();
        let mut entries = 0u32;
        let mut chunks = 0u32;
        let mut run: Option<(u32, u32)> = None;
        loop {
            let offset = self.c.position();
            if !self.more(Field::ReadList)? {
                return Ok((self.span(start, offset), chunks));
            }
            if entries >= self.limits.max_read_segments {
                return self.fail(HeaderErrorKind::TooManyReadSegments {
                    offset,
                    max: self.limits.max_read_segments,
                });
            }
            // One bounds check for the whole entry rather than one per word.
            let body = offset + WORD_LEN;
            let rest = self.c.rest();
            let Some(entry) = rest.first_chunk::<{ READ_LIST_ENTRY_LEN - WORD_LEN }>() else {
                return self.fail(HeaderErrorKind::Truncated {
                    field: Field::ReadList,
                    offset: body,
                    needed: READ_LIST_ENTRY_LEN - WORD_LEN,
                    available: rest.len(),
                });
            };
            let read = ReadSegment::from_wire(entry);
            self.check_segment(Field::ReadList, body + WORD_LEN, read.segment)?;
            let run_len = match run {
                Some((position, len)) if position == read.position => len.saturating_add(1),
                _ => {
                    chunks += 1;
                    1
                }
            };
            if run_len > self.limits.max_segments_per_chunk {
                return self.fail(HeaderErrorKind::ReadChunkTooLong {
                    position: read.position,
                    max: self.limits.max_segments_per_chunk,
                });
            }
            run = Some((read.position, run_len));
            entries += 1;
            self.skip(READ_LIST_ENTRY_LEN - WORD_LEN, Field::ReadList)?;
        }
    }

    #[inline]
    fn skip(&mut self, len: usize, field: Field) -> Result<(), HeaderError> {
        let xid = self.xid;
        self.c
            .skip(len)
            .map_err(|e| HeaderError::new(Some(xid), xdr_kind(field, e)))
    }

    /// A counted segment array (`xdr_write_chunk`). The count is checked against the
    /// limit and against the bytes left before any segment is looked at.
    fn chunk(&mut self, field: Field) -> Result<(&'a [u8], u32), HeaderError> {
        let xid = self.xid;
        let count = self
            .c
            .count(self.limits.max_segments_per_chunk)
            .map_err(|e| HeaderError::new(Some(xid), xdr_kind(field, e)))?;
        let start = self.c.position();
        let available = self.c.remaining();
        let len = (count as usize).checked_mul(SEGMENT_LEN);
        let Some(bytes) = len.and_then(|len| self.c.rest().get(..len)) else {
            return self.fail(HeaderErrorKind::Truncated {
                field,
                offset: start,
                needed: len.unwrap_or(usize::MAX),
                available,
            });
        };
        for (i, seg) in Segments::new(bytes).enumerate() {
            self.check_segment(field, start + i * SEGMENT_LEN, seg)?;
        }
        self.skip(bytes.len(), field)?;
        Ok((bytes, count))
    }

    /// The Write list: a linked list of counted segment arrays.
    fn write_list(&mut self) -> Result<(&'a [u8], u32, u32), HeaderError> {
        let start = self.c.position();
        let mut chunks = 0u32;
        let mut segments = 0u32;
        loop {
            let offset = self.c.position();
            if !self.more(Field::WriteList)? {
                return Ok((self.span(start, offset), chunks, segments));
            }
            if chunks >= self.limits.max_write_chunks {
                return self.fail(HeaderErrorKind::TooManyWriteChunks {
                    offset,
                    max: self.limits.max_write_chunks,
                });
            }
            let (_, count) = self.chunk(Field::WriteList)?;
            chunks += 1;
            // Each count fits the bytes of the input, so the sum stays far below u32::MAX
            // for any input that fits in memory; saturate rather than trust that.
            segments = segments.saturating_add(count);
        }
    }

    // Inlined with the chunkless case, the lists that carry chunks out of line: a call
    // for three compared words cost more in register saves than the compare.
    #[inline(always)]
    fn lists(&mut self) -> Result<ChunkListsView<'a>, HeaderError> {
        // No chunks at all (most messages): three zero discriminators, taken in one look.
        let at = self.c.position();
        if self.c.rest().get(..3 * WORD_LEN) == Some(&[0u8; 3 * WORD_LEN][..]) {
            self.skip(3 * WORD_LEN, Field::ReadList)?;
            return Ok(ChunkListsView {
                reads: self.span(at, at),
                read_chunks: 0,
                writes: self.span(at + WORD_LEN, at + WORD_LEN),
                write_chunks: 0,
                write_segments: 0,
                reply: None,
            });
        }
        self.lists_with_chunks()
    }

    /// [`lists`](Self::lists) when any list is not empty.
    #[inline(never)]
    fn lists_with_chunks(&mut self) -> Result<ChunkListsView<'a>, HeaderError> {
        let (reads, read_chunks) = self.read_list()?;
        let (writes, write_chunks, write_segments) = self.write_list()?;
        let reply = if self.more(Field::ReplyChunk)? {
            Some(self.chunk(Field::ReplyChunk)?.0)
        } else {
            None
        };
        Ok(ChunkListsView {
            reads,
            read_chunks,
            writes,
            write_chunks,
            write_segments,
            reply,
        })
    }

    fn error_body(&mut self) -> Result<RdmaError, HeaderError> {
        match self.u32(Field::ErrorCode)? {
            ERR_VERS => {
                let low = self.u32(Field::VersionRange)?;
                let high = self.u32(Field::VersionRange)?;
                Ok(RdmaError::Vers { low, high })
            }
            ERR_CHUNK => Ok(RdmaError::Chunk),
            code => self.fail(HeaderErrorKind::UnknownErrorCode { code }),
        }
    }
}

impl<'a> HeaderView<'a> {
    /// Parses and validates the transport header at the start of `buf`.
    ///
    /// `buf` is the whole received message: for RDMA_MSG and RDMA_MSGP the RPC message
    /// follows the header and, when [`Limits::require_rpc_xid`] is set, its XID is checked
    /// against the header's. Bytes after the header are otherwise not examined.
    ///
    /// Does not allocate. On failure, [`HeaderError::responder_reply`] says what to send.
    #[inline]
    pub fn parse(buf: &'a [u8], limits: &Limits) -> Result<HeaderView<'a>, HeaderError> {
        if let Some(h) = Self::parse_plain_msg(buf, limits) {
            return Ok(h);
        }
        Self::parse_general(buf, limits)
    }

    /// The header of nearly every message, RDMA_MSG with no chunks (seven words, the
    /// last three zero) followed by the RPC message, taken in one look; `None` for
    /// anything else, which [`parse_general`](Self::parse_general) takes. Yields what
    /// the general parse yields for the same octets.
    #[inline(always)]
    fn parse_plain_msg(buf: &'a [u8], limits: &Limits) -> Option<HeaderView<'a>> {
        const PLAIN: usize = 7 * WORD_LEN;
        // The header and the RPC message's XID.
        let w = buf.first_chunk::<{ PLAIN + WORD_LEN }>()?;
        let word =
            |i: usize| u32::from_be_bytes([w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]]);
        let xid = word(0);
        let plain = word(1) == RPCRDMA_VERSION
            && word(3) == Procedure::Msg as u32
            && (word(4) | word(5) | word(6)) == 0
            && (!limits.require_rpc_xid || word(7) == xid);
        plain.then(|| HeaderView {
            buf,
            xid,
            credit: word(2),
            header_len: PLAIN,
            body: BodyView::Msg(ChunkListsView {
                // Where the general parse places the empty lists: at the Read list's
                // discriminator and at the Write list's.
                reads: buf.get(4 * WORD_LEN..4 * WORD_LEN).unwrap_or(&[]),
                read_chunks: 0,
                writes: buf.get(5 * WORD_LEN..5 * WORD_LEN).unwrap_or(&[]),
                write_chunks: 0,
                write_segments: 0,
                reply: None,
            }),
        })
    }

    /// [`parse`](Self::parse) of any header.
    #[inline(never)]
    fn parse_general(buf: &'a [u8], limits: &Limits) -> Result<HeaderView<'a>, HeaderError> {
        let mut c = XdrCursor::new(buf);
        let xid = c
            .u32()
            .map_err(|e| HeaderError::new(None, xdr_kind(Field::Xid, e)))?;
        let mut p = Parser { c, xid, limits };
        let version = p.u32(Field::Version)?;
        if version != RPCRDMA_VERSION {
            // Stop here: the rest of the header is laid out by rules of a version we do
            // not know (RFC 8166 §4.5.1).
            return p.fail(HeaderErrorKind::VersionMismatch { version });
        }
        let credit = p.u32(Field::Credit)?;
        let proc = p.u32(Field::Procedure)?;
        let Some(procedure) = Procedure::from_u32(proc) else {
            return p.fail(HeaderErrorKind::UnknownProcedure { proc });
        };
        let body = match procedure {
            Procedure::Msg => BodyView::Msg(p.lists()?),
            Procedure::Nomsg => {
                let lists = p.lists()?;
                if lists.is_empty() {
                    return p.fail(HeaderErrorKind::NomsgWithoutChunks);
                }
                BodyView::Nomsg(lists)
            }
            Procedure::Msgp => {
                // RFC 5666 §4.3 `rpc_rdma_header_padded`: align and thresh come first.
                let align = p.u32(Field::Padding)?;
                let thresh = p.u32(Field::Padding)?;
                BodyView::Msgp {
                    align,
                    thresh,
                    lists: p.lists()?,
                }
            }
            Procedure::Done => BodyView::Done,
            Procedure::Error => BodyView::Error(p.error_body()?),
        };
        let header_len = p.c.position();
        if procedure.has_inline_message() && limits.require_rpc_xid {
            let rest = p.c.rest();
            let Some(rpc_xid) = rest.first_chunk::<WORD_LEN>() else {
                return p.fail(HeaderErrorKind::MissingRpcMessage {
                    available: rest.len(),
                });
            };
            let rpc_xid = u32::from_be_bytes(*rpc_xid);
            if rpc_xid != xid {
                return p.fail(HeaderErrorKind::RpcXidMismatch { rpc_xid });
            }
        }
        Ok(HeaderView {
            buf,
            xid,
            credit,
            header_len,
            body,
        })
    }
}

#[cfg(test)]
mod plain_msg_tests {
    use super::*;

    fn words(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    /// The one-look path and the general parse agree on every header the former takes,
    /// and it declines everything else.
    #[test]
    fn the_one_look_parse_matches_the_general_one() {
        let cases: [(Vec<u8>, bool); 9] = [
            (words(&[7, 1, 32, 0, 0, 0, 0, 7, 0, 2]), true),
            (words(&[7, 1, 32, 0, 0, 0, 0, 7]), true),
            // RPC XID mismatch: declined when the limits require it.
            (words(&[7, 1, 32, 0, 0, 0, 0, 8, 0]), false),
            // Too short for the header and the RPC XID.
            (words(&[7, 1, 32, 0, 0, 0, 0]), false),
            // A version-2 header, RDMA_NOMSG, a Read list, a Write list, a Reply chunk.
            (words(&[7, 2, 32, 0, 0, 0, 0, 7]), false),
            (words(&[7, 1, 32, 1, 0, 0, 0, 7]), false),
            (words(&[7, 1, 32, 0, 1, 0, 0, 7]), false),
            (words(&[7, 1, 32, 0, 0, 1, 0, 7]), false),
            (words(&[7, 1, 32, 0, 0, 0, 1, 7]), false),
        ];
        for limits in [Limits::DEFAULT, Limits::PERMISSIVE] {
            for (buf, plain) in &cases {
                let fast = HeaderView::parse_plain_msg(buf, &limits);
                let general = HeaderView::parse_general(buf, &limits);
                match fast {
                    Some(h) => {
                        assert_eq!(Ok(h), general, "{buf:?}");
                        assert_eq!(h.header_len(), 28);
                        assert!(*plain || !limits.require_rpc_xid, "{buf:?}");
                    }
                    None => assert!(!plain || buf.len() < 32, "declined a plain header: {buf:?}"),
                }
                assert_eq!(HeaderView::parse(buf, &limits), general, "{buf:?}");
            }
        }
    }
}
