//! [`DdpEncoder`]: encoding procedure arguments or results, moving DDP-eligible items
//! into chunks instead of copying them inline.

use rpcrdma::wire::xdr::{pad4, BufferTooSmall, XdrEncoder};

use super::list::{DdpList, ListFull, ReadItem, WriteItem, MAX_DDP_ITEMS};
use crate::rpc::EncodeError;

/// Why arguments or results could not be encoded. Nothing of the failing item was
/// written or recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DdpEncodeError {
    /// The caller's buffer is too small; offsets count from the start of the message.
    #[error("message needs {needed} octets inline, buffer holds {available}")]
    BufferTooSmall {
        /// Octets needed up to and including the failing item.
        needed: usize,
        /// Octets available for the message.
        available: usize,
    },
    /// More DDP items than [`MAX_DDP_ITEMS`], or more Write chunks offered than that.
    #[error("more than {capacity} chunks in one message")]
    TooManyChunks {
        /// The limit.
        capacity: usize,
    },
    /// A DDP-eligible result is longer than the Write chunk the requester offered for it.
    /// RFC 8267 §6.4.1 requires the result to use a matching non-empty chunk, so it cannot
    /// fall back to inline; the responder reports the overrun instead (RFC 8267 §3.1).
    #[error("result of {len} octets does not fit write chunk {chunk} of {capacity} octets")]
    WriteChunkTooSmall {
        /// Index of the chunk in the Write list.
        chunk: u32,
        /// Octets the chunk can take.
        capacity: u64,
        /// Octets of the result.
        len: usize,
    },
    /// An item is longer than an XDR length word can say, or a Read chunk would sit
    /// beyond the 32-bit XDR position range.
    #[error("{value} does not fit a 32-bit XDR length or position")]
    TooLong {
        /// The length or position that does not fit.
        value: usize,
    },
    /// The RPC header could not be encoded.
    #[error("{0}")]
    Header(#[source] EncodeError),
}

impl From<ListFull> for DdpEncodeError {
    fn from(e: ListFull) -> Self {
        DdpEncodeError::TooManyChunks {
            capacity: e.capacity,
        }
    }
}

impl From<EncodeError> for DdpEncodeError {
    fn from(e: EncodeError) -> Self {
        match e {
            EncodeError::BufferTooSmall { needed, available } => {
                DdpEncodeError::BufferTooSmall { needed, available }
            }
            e => DdpEncodeError::Header(e),
        }
    }
}

/// What happens to DDP-eligible items.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// Everything inline.
    Inline,
    /// Requester encoding a call: items of at least `min_len` octets become Read chunks.
    Read { min_len: usize },
    /// Responder encoding a reply: item `n` goes to Write chunk `n` when the requester
    /// offered it non-empty.
    Write {
        capacities: [u64; MAX_DDP_ITEMS],
        offered: usize,
        next: usize,
    },
}

/// An XDR encoder for an RPC message body that knows which items are DDP-eligible.
///
/// Non-DDP items are written inline as [`XdrEncoder`] writes them. For a DDP-eligible
/// item moved to a chunk ([`opaque_ddp`](Self::opaque_ddp)) only the length word is
/// written inline; the data is recorded, by reference, in a fixed-capacity list, and its
/// XDR roundup is written nowhere (RFC 8166 §3.4.5). Positions count from the first octet
/// of the RPC message (the XID), and count the roundup of earlier chunked items, because
/// they are offsets in the XDR stream the receiver reconstructs.
///
/// Encoding never allocates.
#[derive(Debug)]
pub struct DdpEncoder<'b, 'd> {
    xdr: XdrEncoder<'b>,
    /// Offset of the encoder's buffer in the message (the header before it).
    base: usize,
    /// Octets available for the whole message.
    available: usize,
    gap: usize,
    mode: Mode,
    /// DDP-eligible items shorter than this go inline without a look at `mode`: every
    /// item when all is inline, a call's items under its Read chunk threshold, none for
    /// results with Write chunks.
    inline_below: usize,
    reads: DdpList<ReadItem<'d>>,
    writes: DdpList<WriteItem<'d>>,
}

impl<'b, 'd> DdpEncoder<'b, 'd> {
    #[inline]
    fn with_mode(buf: &'b mut [u8], base: usize, mode: Mode) -> Self {
        let available = base.saturating_add(buf.len());
        let inline_below = match mode {
            Mode::Inline => usize::MAX,
            Mode::Read { min_len } => min_len,
            Mode::Write { .. } => 0,
        };
        DdpEncoder {
            xdr: XdrEncoder::new(buf),
            base,
            available,
            gap: 0,
            mode,
            inline_below,
            reads: DdpList::new(),
            writes: DdpList::new(),
        }
    }

    /// Encodes into `buf`, which starts `base` octets into the message (after the RPC
    /// header), with every item inline.
    pub fn inline(buf: &'b mut [u8], base: usize) -> Self {
        Self::with_mode(buf, base, Mode::Inline)
    }

    /// Encodes call arguments into `buf` (starting `base` octets into the message):
    /// DDP-eligible items of at least `min_len` octets become Read chunks; shorter ones
    /// stay inline, where they cost less than a chunk.
    pub fn read_chunks(buf: &'b mut [u8], base: usize, min_len: usize) -> Self {
        Self::with_mode(buf, base, Mode::Read { min_len })
    }

    /// Encodes results into `buf` (starting `base` octets into the message) for a
    /// requester that offered Write chunks of `capacities` octets, in Write list order
    /// (zero for an empty chunk).
    #[inline]
    pub fn write_chunks(
        buf: &'b mut [u8],
        base: usize,
        capacities: &[u64],
    ) -> Result<Self, DdpEncodeError> {
        // No Write chunk offered (nearly every call): every item goes inline, as in
        // `inline`, without a table of capacities to clear and carry.
        if capacities.is_empty() {
            return Ok(Self::with_mode(buf, base, Mode::Inline));
        }
        let mut caps = [0u64; MAX_DDP_ITEMS];
        caps.get_mut(..capacities.len())
            .ok_or(DdpEncodeError::TooManyChunks {
                capacity: MAX_DDP_ITEMS,
            })?
            .copy_from_slice(capacities);
        Ok(Self::with_mode(
            buf,
            base,
            Mode::Write {
                capacities: caps,
                offered: capacities.len(),
                next: 0,
            },
        ))
    }

    /// Offset of the next inline octet from the start of the message.
    pub const fn position(&self) -> usize {
        self.base + self.xdr.position()
    }

    /// Offset of the next item in the reconstructed XDR stream.
    pub const fn xdr_position(&self) -> usize {
        self.position() + self.gap
    }

    /// The inline octets this encoder wrote so far (from the start of its buffer, not of
    /// the message), e.g. for a server's reply cache.
    pub fn written(&self) -> &[u8] {
        self.xdr.written()
    }

    /// Overwrites the 32-bit word at `at` (an offset in this encoder's buffer, as in
    /// [`written`](Self::written)) that was encoded earlier; out of range does nothing.
    pub fn patch_u32(&mut self, at: usize, v: u32) {
        if let Some(w) = self.xdr.written_mut().get_mut(at..at + 4) {
            w.copy_from_slice(&v.to_be_bytes());
        }
    }

    /// The Read chunks recorded so far.
    pub fn read_items(&self) -> &[ReadItem<'d>] {
        self.reads.as_slice()
    }

    /// The Write chunks filled so far.
    pub fn write_items(&self) -> &[WriteItem<'d>] {
        self.writes.as_slice()
    }

    /// Ends encoding of a reply, returning only its filled Write chunks: for the caller
    /// that has read [`position`](Self::position) and has no use for the (empty) Read
    /// chunks, which [`finish`](Self::finish) would copy out too.
    #[inline]
    pub(crate) fn into_writes(self) -> DdpList<WriteItem<'d>> {
        // Nearly every reply fills no Write chunk: a fresh empty list is one store,
        // where moving this one out copies its eight (uninitialised) places.
        if self.writes.is_empty() {
            return DdpList::new();
        }
        self.writes
    }

    /// Ends encoding, returning the inline length of the message, the Read chunks
    /// (requester) and the filled Write chunks (responder).
    pub fn finish(self) -> Encoded<'d> {
        Encoded {
            len: self.position(),
            xdr_len: self.xdr_position(),
            reads: self.reads,
            writes: self.writes,
        }
    }

    fn map(&self, e: BufferTooSmall) -> DdpEncodeError {
        DdpEncodeError::BufferTooSmall {
            needed: self.base.saturating_add(e.needed),
            available: self.available,
        }
    }

    /// Encodes an unsigned 32-bit integer.
    #[inline]
    pub fn u32(&mut self, v: u32) -> Result<(), DdpEncodeError> {
        self.xdr.u32(v).map_err(|e| self.map(e))
    }

    /// Encodes a signed 32-bit integer.
    #[inline]
    pub fn i32(&mut self, v: i32) -> Result<(), DdpEncodeError> {
        self.xdr.i32(v).map_err(|e| self.map(e))
    }

    /// Encodes an unsigned hyper integer.
    #[inline]
    pub fn u64(&mut self, v: u64) -> Result<(), DdpEncodeError> {
        self.xdr.u64(v).map_err(|e| self.map(e))
    }

    /// Encodes a boolean.
    #[inline]
    pub fn bool(&mut self, v: bool) -> Result<(), DdpEncodeError> {
        self.xdr.bool(v).map_err(|e| self.map(e))
    }

    /// Encodes an optional-data discriminant.
    #[inline]
    pub fn optional(&mut self, present: bool) -> Result<(), DdpEncodeError> {
        self.xdr.optional(present).map_err(|e| self.map(e))
    }

    /// Encodes fixed-length opaque data inline.
    #[inline]
    pub fn opaque_fixed(&mut self, data: &[u8]) -> Result<(), DdpEncodeError> {
        self.xdr.opaque_fixed(data).map_err(|e| self.map(e))
    }

    /// Encodes inline `opaque<>` (an item that is not DDP-eligible).
    #[inline]
    pub fn opaque(&mut self, data: &[u8]) -> Result<(), DdpEncodeError> {
        self.xdr.opaque(data).map_err(|e| self.map(e))
    }

    /// Encodes inline `string<>` (an item that is not DDP-eligible).
    #[inline]
    pub fn string(&mut self, s: &[u8]) -> Result<(), DdpEncodeError> {
        self.opaque(s)
    }

    /// Encodes a DDP-eligible `opaque<>`.
    ///
    /// - Call arguments: an item of at least the encoder's threshold becomes a Read chunk
    ///   at the XDR position just after its length word.
    /// - Results: the item takes the next Write chunk; if the requester offered it
    ///   non-empty the data goes there (and must fit), otherwise, or when no chunk is
    ///   left, the data goes inline (RFC 8267 §6.4.1). Empty data is never placed.
    // Inlined: an item that goes inline anyway (no Write chunk offered, nearly every
    // reply) is encoded where it is called, without the out-of-line call's register saves
    // (about twenty instructions per item); any other mode goes to `opaque_ddp_placed`.
    #[inline(always)]
    pub fn opaque_ddp(&mut self, data: &'d [u8]) -> Result<(), DdpEncodeError> {
        // Inline, or a call's argument under its Read chunk threshold (an inline call's
        // every argument): the data goes inline, as `opaque_ddp_placed` would put it,
        // told by one compare.
        if data.len() < self.inline_below {
            if u32::try_from(data.len()).is_err() {
                return Err(DdpEncodeError::TooLong { value: data.len() });
            }
            return self.opaque(data);
        }
        self.opaque_ddp_placed(data)
    }

    /// [`opaque_ddp`](Self::opaque_ddp) in the Read and Write modes.
    #[inline(never)]
    fn opaque_ddp_placed(&mut self, data: &'d [u8]) -> Result<(), DdpEncodeError> {
        let len =
            u32::try_from(data.len()).map_err(|_| DdpEncodeError::TooLong { value: data.len() })?;
        // Matched in place: the Write mode's capacity table is not copied out.
        match &self.mode {
            Mode::Inline => self.opaque(data),
            &Mode::Read { min_len } => {
                if data.len() < min_len || data.is_empty() {
                    return self.opaque(data);
                }
                let at = self.xdr_position() + 4;
                let position =
                    u32::try_from(at).map_err(|_| DdpEncodeError::TooLong { value: at })?;
                if self.reads.len() == MAX_DDP_ITEMS {
                    return Err(DdpEncodeError::TooManyChunks {
                        capacity: MAX_DDP_ITEMS,
                    });
                }
                self.u32(len)?;
                self.reads.push(ReadItem { position, data })?;
                self.gap += pad4(data.len());
                Ok(())
            }
            Mode::Write {
                capacities,
                offered,
                next,
            } => {
                let next = *next;
                let capacity = if next < *offered { capacities[next] } else { 0 };
                // An empty item has nothing to place: its length word goes inline and its
                // chunk comes back empty, which the requester reads as inline.
                if capacity == 0 || data.is_empty() {
                    self.opaque(data)?;
                } else if data.len() as u64 > capacity {
                    return Err(DdpEncodeError::WriteChunkTooSmall {
                        chunk: next as u32,
                        capacity,
                        len: data.len(),
                    });
                } else {
                    // The list holds MAX_DDP_ITEMS and at most that many chunks are
                    // offered, so the push cannot fail after the length word went out.
                    self.u32(len)?;
                    let at = self.position().min(u32::MAX as usize) as u32;
                    self.writes.push(WriteItem {
                        chunk: next as u32,
                        data,
                        at,
                    })?;
                    self.gap += pad4(data.len());
                }
                self.skip_ddp();
                Ok(())
            }
        }
    }

    /// Encodes a DDP-eligible `string<>`; same rules as [`opaque_ddp`](Self::opaque_ddp).
    #[inline]
    pub fn string_ddp(&mut self, s: &'d [u8]) -> Result<(), DdpEncodeError> {
        self.opaque_ddp(s)
    }

    /// Marks a place where a DDP-eligible result could have been but is not (a union arm
    /// without it): the next Write chunk stays unused, and the engine returns it empty
    /// (RFC 8267 §6.4.1). Does nothing for call arguments.
    pub fn skip_ddp(&mut self) {
        if let Mode::Write { next, .. } = &mut self.mode {
            *next += 1;
        }
    }
}

/// What a [`DdpEncoder`] produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Encoded<'d> {
    /// Octets of the message written inline (header included).
    pub len: usize,
    /// Length of the reconstructed XDR stream: inline octets plus chunk data with roundup.
    pub xdr_len: usize,
    /// Read chunks of a call, in XDR order.
    pub reads: DdpList<ReadItem<'d>>,
    /// Filled Write chunks of a reply, in Write list order.
    pub writes: DdpList<WriteItem<'d>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds an encoder in one of the modes over a buffer.
    type MakeEncoder = dyn Fn(&mut [u8]) -> DdpEncoder<'_, '_>;

    /// The one-compare inline test of `opaque_ddp` (`inline_below`) places every item as
    /// the mode-by-mode path (`opaque_ddp_placed`) does: the same result, inline octets,
    /// positions, Read chunks and Write chunks, in every mode, for items on both sides
    /// of the thresholds and buffers too short for them.
    #[test]
    fn inline_test_matches_the_placed_path() {
        let src: Vec<u8> = (0..40u8).collect();
        let caps: [&[u64]; 3] = [&[], &[0], &[16, 64]];
        for len in 0..=40 {
            let data = &src[..len];
            for size in [0, 3, 8, 24, 64] {
                let mut encoders: Vec<Box<MakeEncoder>> = vec![
                    Box::new(|b| DdpEncoder::inline(b, 40)),
                    Box::new(|b| DdpEncoder::read_chunks(b, 40, 1)),
                    Box::new(|b| DdpEncoder::read_chunks(b, 40, 9)),
                    Box::new(|b| DdpEncoder::read_chunks(b, 40, usize::MAX)),
                ];
                for c in caps {
                    encoders.push(Box::new(move |b| {
                        DdpEncoder::write_chunks(b, 40, c).unwrap()
                    }));
                }
                for make in &encoders {
                    let (mut a, mut b) = (vec![0xEEu8; size], vec![0xEEu8; size]);
                    let mut fast = make(&mut a);
                    let mut placed = make(&mut b);
                    let (f, p) = (fast.opaque_ddp(data), placed.opaque_ddp_placed(data));
                    assert_eq!(f, p, "length {len} into {size}");
                    assert_eq!(fast.xdr_position(), placed.xdr_position(), "{len}");
                    assert_eq!(fast.read_items(), placed.read_items(), "{len}");
                    assert_eq!(fast.write_items(), placed.write_items(), "{len}");
                    assert_eq!(fast.finish(), placed.finish(), "{len}");
                    assert_eq!(a, b, "length {len} into {size}");
                }
            }
        }
    }
}
