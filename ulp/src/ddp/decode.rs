//! [`DdpCursor`]: decoding procedure arguments or results whose DDP-eligible items may
//! have arrived in chunks rather than inline.

use rpcrdma::wire::xdr::{pad4, XdrCursor, XdrError};
use rpcrdma::Padding;

use super::list::{ReadItem, MAX_DDP_ITEMS};

/// Why arguments or results did not decode. For a call, every variant means GARBAGE_ARGS
/// (RFC 5531 §9); offsets count from the first octet of the RPC message as received
/// inline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DdpDecodeError {
    /// The inline bytes ended early, a counted item exceeded its bound, a boolean was not 0
    /// or 1, or padding was not zero.
    #[error("{0}")]
    Xdr(#[from] XdrError),
    /// A chunk's length disagreed with the length word of the item it carries: it must
    /// hold the item's octets, optionally followed by its XDR roundup (RFC 5666 §3.7 allows
    /// a sender to include it) and nothing more.
    #[error("item of {len} octets (length word at offset {offset}) arrived in a chunk of {chunk_len} octets")]
    ChunkLength {
        /// Offset of the item's length word.
        offset: usize,
        /// The length word.
        len: u32,
        /// Octets in the chunk.
        chunk_len: usize,
    },
    /// A chunk was left over: no DDP-eligible item sat at its position (Read chunks) or
    /// in its place in the Write list (Write chunks).
    #[error("chunk {index} matches no DDP-eligible item")]
    UnusedChunk {
        /// Index of the chunk in the list the cursor was given.
        index: usize,
    },
    /// A Write chunk carried data where the results had no DDP-eligible item.
    #[error("write chunk {index} carries data for an item that has none")]
    UnexpectedChunkData {
        /// Index of the chunk in the Write list.
        index: usize,
    },
    /// Inline octets were left after the last item.
    #[error("{count} octets left over at offset {offset}")]
    TrailingBytes {
        /// Offset of the first unused octet.
        offset: usize,
        /// How many were left.
        count: usize,
    },
    /// The cursor was given more than [`MAX_DDP_ITEMS`] chunks.
    #[error("{count} chunks exceed the limit of {MAX_DDP_ITEMS}")]
    TooManyChunks {
        /// How many it was given.
        count: usize,
    },
    /// A value decoded but is outside what the procedure accepts.
    #[error("at offset {offset}: {what}")]
    Invalid {
        /// Offset of the value.
        offset: usize,
        /// What was wrong, for logs.
        what: &'static str,
    },
}

/// Where the DDP-eligible items that are not inline come from.
#[derive(Debug, Clone, Copy)]
enum Chunks<'a> {
    /// Everything is inline.
    None,
    /// A call's Read chunks, matched by XDR position (RFC 8166 §3.4.5).
    Read(&'a [ReadItem<'a>]),
    /// The data a responder wrote into a reply's Write chunks, in Write list order;
    /// an empty slice is a chunk that came back empty (RFC 8166 §3.4.6).
    Write(&'a [&'a [u8]]),
}

/// A decoding cursor over an RPC message's arguments or results.
///
/// Non-DDP items are read from the inline bytes exactly as [`XdrCursor`] reads them.
/// A DDP-eligible item (`opaque<>` or `string<>` declared so by the upper-layer binding)
/// is read with [`opaque_ddp`](Self::opaque_ddp): its length word is always inline, and
/// its data is either inline (with padding) or in a chunk (without roundup, and with no
/// padding left inline). The cursor keeps the XDR position — the offset the item would
/// have in the reconstructed message — so that Read chunks are found where RFC 8166
/// §3.4.5 puts them, and lends out slices of the chunk memory: decoding never copies.
#[derive(Debug, Clone)]
pub struct DdpCursor<'a> {
    xdr: XdrCursor<'a>,
    /// Octets of chunk data (with roundup) consumed so far: how far the XDR position runs
    /// ahead of the inline offset.
    gap: usize,
    /// RDMA_MSGP padding skipped so far: inline octets that are not in the XDR stream.
    padded: usize,
    padding: Option<Padding>,
    chunks: Chunks<'a>,
    /// Read chunks consumed (bit per index); Write chunks: index of the next one.
    used: u32,
}

impl<'a> DdpCursor<'a> {
    /// Decodes `msg` from offset `at` with every item inline.
    pub const fn inline(msg: &'a [u8], at: usize) -> Self {
        DdpCursor {
            xdr: XdrCursor::at(msg, at),
            gap: 0,
            padded: 0,
            padding: None,
            chunks: Chunks::None,
            used: 0,
        }
    }

    /// Decodes a call's arguments: `msg` is the RPC message as received inline (or
    /// reassembled from a Position-Zero Read chunk), `at` the offset where the arguments
    /// begin, and `reads` the other Read chunks' data with their positions, in any order.
    pub fn with_read_chunks(
        msg: &'a [u8],
        at: usize,
        reads: &'a [ReadItem<'a>],
    ) -> Result<Self, DdpDecodeError> {
        Ok(DdpCursor {
            chunks: Self::read_chunks(reads)?,
            ..Self::inline(msg, at)
        })
    }

    /// The chunks of a call with Read chunks `reads`, checked for their number. No Read
    /// chunks (nearly every call) decodes as all inline: the same answers, without a
    /// search of an empty list per DDP-eligible item and in `finish`.
    #[inline(always)]
    fn read_chunks(reads: &'a [ReadItem<'a>]) -> Result<Chunks<'a>, DdpDecodeError> {
        if reads.len() > MAX_DDP_ITEMS {
            return Err(DdpDecodeError::TooManyChunks { count: reads.len() });
        }
        Ok(if reads.is_empty() {
            Chunks::None
        } else {
            Chunks::Read(reads)
        })
    }

    /// [`with_read_chunks`](Self::with_read_chunks) then
    /// [`with_padding`](Self::with_padding), built in place: a dispatcher makes one per
    /// call, and moving the cursor through `with_padding` costs about ten instructions.
    #[inline(always)]
    pub(crate) fn call_args(
        msg: &'a [u8],
        at: usize,
        reads: &'a [ReadItem<'a>],
        padding: Option<Padding>,
    ) -> Result<Self, DdpDecodeError> {
        let chunks = Self::read_chunks(reads)?;
        Ok(DdpCursor {
            xdr: XdrCursor::at(msg, at),
            gap: 0,
            padded: 0,
            padding,
            chunks,
            used: 0,
        })
    }

    /// Decodes a reply's results: `msg` is the reply as received, `at` the offset where
    /// the results begin, and `written` the data the responder wrote into each Write chunk
    /// the requester offered, in Write list order, each cut to the length the responder
    /// returned for it.
    pub fn with_write_chunks(
        msg: &'a [u8],
        at: usize,
        written: &'a [&'a [u8]],
    ) -> Result<Self, DdpDecodeError> {
        if written.len() > MAX_DDP_ITEMS {
            return Err(DdpDecodeError::TooManyChunks {
                count: written.len(),
            });
        }
        Ok(DdpCursor {
            chunks: Chunks::Write(written),
            ..Self::inline(msg, at)
        })
    }

    /// Honours RDMA_MSGP padding (RFC 5666 §3.9): inline variable-length opaque data
    /// at or above the threshold is preceded by padding that aligns it in the receive
    /// buffer; the cursor skips it, and it does not count towards XDR positions.
    pub fn with_padding(mut self, padding: Option<Padding>) -> Self {
        self.padding = padding;
        self
    }

    /// Offset of the next inline octet from the start of the message.
    pub const fn position(&self) -> usize {
        self.xdr.position()
    }

    /// Offset of the next item in the reconstructed XDR stream, i.e. counting the chunk
    /// data (with roundup) consumed so far and not counting RDMA_MSGP padding.
    pub const fn xdr_position(&self) -> usize {
        self.xdr.position() + self.gap - self.padded
    }

    /// The whole inline message this cursor reads.
    pub const fn input(&self) -> &'a [u8] {
        self.xdr.input()
    }

    /// Passes over everything left, inline and in Read chunks, so that
    /// [`finish`](Self::finish) succeeds: for a server that stopped decoding on purpose
    /// (an NFSv4 COMPOUND ends at its first failing operation, leaving later operations
    /// undecoded).
    pub fn skip_rest(&mut self) {
        let _ = self.xdr.skip(self.xdr.remaining());
        if let Chunks::Read(reads) = self.chunks {
            self.used = if reads.len() >= 32 {
                u32::MAX
            } else {
                (1u32 << reads.len()) - 1
            };
        }
        if let Chunks::Write(written) = self.chunks {
            self.used = self.used.max(written.len() as u32);
        }
    }

    /// Inline octets left.
    pub const fn remaining(&self) -> usize {
        self.xdr.remaining()
    }

    /// Decodes an unsigned 32-bit integer.
    #[inline]
    pub fn u32(&mut self) -> Result<u32, DdpDecodeError> {
        Ok(self.xdr.u32()?)
    }

    /// Decodes a signed 32-bit integer.
    #[inline]
    pub fn i32(&mut self) -> Result<i32, DdpDecodeError> {
        Ok(self.xdr.i32()?)
    }

    /// Decodes an unsigned hyper integer.
    #[inline]
    pub fn u64(&mut self) -> Result<u64, DdpDecodeError> {
        Ok(self.xdr.u64()?)
    }

    /// Decodes a boolean.
    #[inline]
    pub fn bool(&mut self) -> Result<bool, DdpDecodeError> {
        Ok(self.xdr.bool()?)
    }

    /// Decodes an optional-data discriminant.
    #[inline]
    pub fn optional(&mut self) -> Result<bool, DdpDecodeError> {
        Ok(self.xdr.optional()?)
    }

    /// Decodes a count bounded by `max`.
    #[inline]
    pub fn count(&mut self, max: u32) -> Result<u32, DdpDecodeError> {
        Ok(self.xdr.count(max)?)
    }

    /// Decodes fixed-length opaque data (always inline: only variable-length items are
    /// DDP-eligible in the bindings this crate knows).
    #[inline]
    pub fn opaque_fixed(&mut self, len: usize) -> Result<&'a [u8], DdpDecodeError> {
        Ok(self.xdr.opaque_fixed(len)?)
    }

    /// Decodes inline `opaque<max>` (an item that is not DDP-eligible). On error the
    /// cursor has not moved.
    pub fn opaque(&mut self, max: u32) -> Result<&'a [u8], DdpDecodeError> {
        let start = (self.xdr.clone(), self.used);
        let len = match self.xdr.count(max) {
            Ok(len) => len,
            Err(e) => {
                self.rewind(start);
                return Err(e.into());
            }
        };
        self.inline_data(len, start)
    }

    /// Decodes inline `string<max>` (an item that is not DDP-eligible).
    #[inline]
    pub fn string(&mut self, max: u32) -> Result<&'a [u8], DdpDecodeError> {
        self.opaque(max)
    }

    /// Reads `len` octets of opaque data and their roundup after the length word, and
    /// any RDMA_MSGP padding before them; rewinds to `start` on error.
    fn inline_data(
        &mut self,
        len: u32,
        start: (XdrCursor<'a>, u32),
    ) -> Result<&'a [u8], DdpDecodeError> {
        let pad = match self.padding {
            Some(p) => p.pad_before(self.xdr.position(), len),
            None => 0,
        };
        let data = self
            .xdr
            .skip(pad)
            .and_then(|()| self.xdr.opaque_fixed(len as usize));
        match data {
            Ok(data) => {
                self.padded += pad;
                Ok(data)
            }
            Err(e) => {
                self.rewind(start);
                Err(e.into())
            }
        }
    }

    /// Decodes a DDP-eligible `opaque<max>`, from its chunk if it has one, else inline.
    ///
    /// - Read chunks: the chunk whose position equals the XDR position just after the
    ///   length word carries the data.
    /// - Write chunks: each call consumes the next chunk of the Write list (RFC 8166
    ///   §3.4.6 pairs them in order); a chunk that came back empty means the data is
    ///   inline, as RFC 8267 §6.4.1 prescribes when the requester offered an empty chunk.
    ///
    /// On error the cursor has not moved.
    // Inlined: all inline and no RDMA_MSGP padding (nearly every call) decodes the length
    // word and the data where it is called, without the chunk search and the padding
    // arithmetic, nor the out-of-line call's register saves (`opaque_ddp_chunked`).
    #[inline(always)]
    pub fn opaque_ddp(&mut self, max: u32) -> Result<&'a [u8], DdpDecodeError> {
        if let (Chunks::None, None) = (&self.chunks, self.padding) {
            // `XdrCursor::opaque` does not move on error.
            return Ok(self.xdr.opaque(max)?);
        }
        self.opaque_ddp_chunked(max)
    }

    /// [`opaque_ddp`](Self::opaque_ddp) with chunks or padding.
    #[inline(never)]
    fn opaque_ddp_chunked(&mut self, max: u32) -> Result<&'a [u8], DdpDecodeError> {
        let start = (self.xdr.clone(), self.used);
        let len_at = self.xdr.position();
        let len = match self.xdr.count(max) {
            Ok(len) => len,
            Err(e) => {
                self.rewind(start);
                return Err(e.into());
            }
        };
        let chunk = match self.chunks {
            Chunks::None => None,
            Chunks::Read(reads) => {
                let pos = self.xdr_position();
                let used = self.used;
                let found = reads
                    .iter()
                    .enumerate()
                    .find(|(i, r)| used & (1 << i) == 0 && usize::try_from(r.position) == Ok(pos));
                found.map(|(i, r)| (i, r.data))
            }
            Chunks::Write(written) => {
                let i = self.used as usize;
                self.used += 1;
                written.get(i).filter(|d| !d.is_empty()).map(|&d| (i, d))
            }
        };
        let Some((index, data)) = chunk else {
            return self.inline_data(len, start);
        };
        let len_us = len as usize;
        if data.len() < len_us || data.len() > pad4(len_us) {
            self.rewind(start);
            return Err(DdpDecodeError::ChunkLength {
                offset: len_at,
                len,
                chunk_len: data.len(),
            });
        }
        if let Chunks::Read(_) = self.chunks {
            self.used |= 1 << index;
        }
        self.gap += pad4(len_us);
        Ok(&data[..len_us])
    }

    /// Decodes a DDP-eligible `string<max>` (e.g. a symbolic link's target); same rules
    /// as [`opaque_ddp`](Self::opaque_ddp).
    #[inline]
    pub fn string_ddp(&mut self, max: u32) -> Result<&'a [u8], DdpDecodeError> {
        self.opaque_ddp(max)
    }

    /// Passes over a place where a DDP-eligible result could have been but is not (a
    /// union arm without it): with Write chunks, consumes the next chunk, which must have
    /// come back empty (RFC 8267 §6.4.1). Read chunks are found by position, so for them
    /// this does nothing.
    pub fn skip_ddp(&mut self) -> Result<(), DdpDecodeError> {
        if let Chunks::Write(written) = self.chunks {
            let i = self.used as usize;
            self.used += 1;
            if written.get(i).is_some_and(|d| !d.is_empty()) {
                return Err(DdpDecodeError::UnexpectedChunkData { index: i });
            }
        }
        Ok(())
    }

    /// Checks that the whole message was consumed: no inline octets left, every Read
    /// chunk used, and no later Write chunk carrying data.
    // Inlined: all inline and all read (nearly every call) is two compares where it is
    // called; anything else goes to `finish_general`.
    #[inline(always)]
    pub fn finish(&self) -> Result<(), DdpDecodeError> {
        if let (0, Chunks::None) = (self.xdr.remaining(), self.chunks) {
            return Ok(());
        }
        self.finish_general()
    }

    /// [`finish`](Self::finish) of any cursor.
    #[inline(never)]
    fn finish_general(&self) -> Result<(), DdpDecodeError> {
        if self.xdr.remaining() != 0 {
            return Err(DdpDecodeError::TrailingBytes {
                offset: self.xdr.position(),
                count: self.xdr.remaining(),
            });
        }
        match self.chunks {
            Chunks::None => Ok(()),
            Chunks::Read(reads) => match (0..reads.len()).find(|i| self.used & (1 << i) == 0) {
                Some(index) => Err(DdpDecodeError::UnusedChunk { index }),
                None => Ok(()),
            },
            Chunks::Write(written) => {
                let from = (self.used as usize).min(written.len());
                match written[from..].iter().position(|d| !d.is_empty()) {
                    Some(i) => Err(DdpDecodeError::UnusedChunk { index: from + i }),
                    None => Ok(()),
                }
            }
        }
    }

    fn rewind(&mut self, (xdr, used): (XdrCursor<'a>, u32)) {
        self.xdr = xdr;
        self.used = used;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The all-inline fast path of `opaque_ddp` (no chunks, no padding) answers as the
    /// general path does (forced here by padding that never pads): the same data or
    /// error, and on error a cursor that has not moved.
    #[test]
    fn inline_opaque_ddp_matches_the_general_path() {
        let never_pads = Some(Padding {
            align: 1,
            thresh: u32::MAX,
            base: 0,
        });
        let word = |v: u32| v.to_be_bytes().to_vec();
        let cases: Vec<(Vec<u8>, u32)> = vec![
            ([word(3), vec![1, 2, 3, 0]].concat(), 8),
            ([word(4), vec![1, 2, 3, 4]].concat(), 8),
            ([word(0)].concat(), 8),
            // Longer than the bound.
            ([word(9), vec![0; 12]].concat(), 8),
            // Truncated data, truncated padding, no length word at all.
            ([word(8), vec![1; 4]].concat(), 8),
            ([word(3), vec![1, 2, 3]].concat(), 8),
            (vec![0, 0], 8),
            // Non-zero padding.
            ([word(1), vec![7, 0, 1, 0]].concat(), 8),
        ];
        for (msg, max) in cases {
            let mut fast = DdpCursor::inline(&msg, 0);
            let mut general = DdpCursor::call_args(&msg, 0, &[], never_pads).unwrap();
            let (f, g) = (fast.opaque_ddp(max), general.opaque_ddp(max));
            assert_eq!(f, g, "{msg:?}");
            assert_eq!(fast.position(), general.position(), "{msg:?}");
            if f.is_err() {
                assert_eq!(fast.position(), 0, "moved on error: {msg:?}");
            }
            assert_eq!(fast.finish(), general.finish(), "{msg:?}");
        }
    }

    /// The two-compare `finish` answers as the general one, with and without octets
    /// left and with each kind of chunks, used or not.
    #[test]
    fn finish_fast_path_matches_the_general_one() {
        let msg = [0u8; 8];
        let data = [1u8; 4];
        let reads = [ReadItem {
            position: 4,
            data: &data,
        }];
        let written: [&[u8]; 2] = [&[], &data];
        for at in [0, 4, 8, 9] {
            let cursors = [
                DdpCursor::inline(&msg, at),
                DdpCursor::with_read_chunks(&msg, at, &reads).unwrap(),
                DdpCursor::with_read_chunks(&msg, at, &[]).unwrap(),
                DdpCursor::with_write_chunks(&msg, at, &written).unwrap(),
                DdpCursor::with_write_chunks(&msg, at, &written[..1]).unwrap(),
            ];
            for c in cursors {
                assert_eq!(c.finish(), c.finish_general(), "{c:?}");
            }
        }
        assert_eq!(DdpCursor::inline(&msg, 8).finish(), Ok(()));
        assert!(DdpCursor::inline(&msg, 4).finish().is_err());
    }

    /// A cursor built by `call_args` is the one `with_read_chunks` and `with_padding`
    /// build, with and without Read chunks.
    #[test]
    fn call_args_is_with_read_chunks_and_padding() {
        let msg = [0, 0, 0, 4, 0, 0, 0, 0];
        let data = [9u8; 4];
        let reads = [ReadItem {
            position: 4,
            data: &data,
        }];
        let pad = Some(Padding {
            align: 8,
            thresh: 1,
            base: 0,
        });
        for r in [&reads[..], &[]] {
            for p in [None, pad] {
                let mut a = DdpCursor::call_args(&msg, 0, r, p).unwrap();
                let mut b = DdpCursor::with_read_chunks(&msg, 0, r)
                    .unwrap()
                    .with_padding(p);
                assert_eq!(a.opaque_ddp(16), b.opaque_ddp(16));
                assert_eq!(a.xdr_position(), b.xdr_position());
                assert_eq!(a.finish(), b.finish());
            }
        }
        let too_many = [ReadItem::default(); MAX_DDP_ITEMS + 1];
        assert_eq!(
            DdpCursor::call_args(&msg, 0, &too_many, None).err(),
            DdpCursor::with_read_chunks(&msg, 0, &too_many).err()
        );
    }
}
