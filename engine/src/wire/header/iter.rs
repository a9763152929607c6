//! Iterators over validated chunk lists, reading straight from the received bytes.
//!
//! They are only built by [`HeaderView::parse`](super::HeaderView::parse) over byte
//! ranges it has checked, so they never fail; should a range ever be short anyway, the
//! iterator ends instead of panicking.

use core::iter::FusedIterator;

use super::consts::{READ_LIST_ENTRY_LEN, SEGMENT_LEN, WORD_LEN};
use super::segment::{ReadSegment, Segment};

/// The segments of one chunk (a Write chunk or the Reply chunk), in wire order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segments<'a> {
    bytes: &'a [u8],
}

impl<'a> Segments<'a> {
    /// Segments over `bytes`, a whole number of 16-octet wire segments.
    #[inline]
    pub(crate) const fn new(bytes: &'a [u8]) -> Segments<'a> {
        Segments { bytes }
    }

    /// The segment at `index`, if there is one.
    #[inline]
    pub fn get(&self, index: usize) -> Option<Segment> {
        let start = index.checked_mul(SEGMENT_LEN)?;
        let b = self.bytes.get(start..)?.first_chunk::<SEGMENT_LEN>()?;
        Some(Segment::from_wire(b))
    }

    /// Sum of the segments' lengths: the chunk's capacity in octets. Cannot overflow,
    /// as a u32 count of u32 lengths fits in 64 bits.
    pub fn total_length(&self) -> u64 {
        self.clone().map(|s| u64::from(s.length)).sum()
    }

    /// The wire octets of the segments (without the count word).
    #[inline]
    pub const fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

impl Iterator for Segments<'_> {
    type Item = Segment;

    #[inline]
    fn next(&mut self) -> Option<Segment> {
        let (seg, rest) = self.bytes.split_first_chunk::<SEGMENT_LEN>()?;
        self.bytes = rest;
        Some(Segment::from_wire(seg))
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.bytes.len() / SEGMENT_LEN;
        (n, Some(n))
    }
}

impl DoubleEndedIterator for Segments<'_> {
    #[inline]
    fn next_back(&mut self) -> Option<Segment> {
        let (rest, seg) = self.bytes.split_last_chunk::<SEGMENT_LEN>()?;
        self.bytes = rest;
        Some(Segment::from_wire(seg))
    }
}

impl ExactSizeIterator for Segments<'_> {}
impl FusedIterator for Segments<'_> {}

/// The Read list entries, in wire order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadList<'a> {
    /// Whole wire entries: "more" word, position, segment.
    entries: &'a [u8],
}

impl<'a> ReadList<'a> {
    #[inline]
    pub(crate) const fn new(entries: &'a [u8]) -> ReadList<'a> {
        ReadList { entries }
    }

    /// The Read list grouped into Read chunks.
    #[inline]
    pub const fn chunks(&self) -> ReadChunks<'a> {
        ReadChunks {
            entries: self.entries,
        }
    }
}

#[inline]
fn read_entry(entry: &[u8; READ_LIST_ENTRY_LEN]) -> ReadSegment {
    let [_, _, _, _, body @ ..] = *entry;
    ReadSegment::from_wire(&body)
}

#[inline]
fn entry_position(entry: &[u8]) -> Option<u32> {
    let b = entry.get(WORD_LEN..)?.first_chunk::<WORD_LEN>()?;
    Some(u32::from_be_bytes(*b))
}

impl Iterator for ReadList<'_> {
    type Item = ReadSegment;

    #[inline]
    fn next(&mut self) -> Option<ReadSegment> {
        let (entry, rest) = self.entries.split_first_chunk::<READ_LIST_ENTRY_LEN>()?;
        self.entries = rest;
        Some(read_entry(entry))
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.entries.len() / READ_LIST_ENTRY_LEN;
        (n, Some(n))
    }
}

impl DoubleEndedIterator for ReadList<'_> {
    #[inline]
    fn next_back(&mut self) -> Option<ReadSegment> {
        let (rest, entry) = self.entries.split_last_chunk::<READ_LIST_ENTRY_LEN>()?;
        self.entries = rest;
        Some(read_entry(entry))
    }
}

impl ExactSizeIterator for ReadList<'_> {}
impl FusedIterator for ReadList<'_> {}

/// One Read chunk: consecutive Read list entries that share an XDR position
/// (RFC 8166 §3.4.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadChunk<'a> {
    position: u32,
    entries: ReadList<'a>,
}

impl<'a> ReadChunk<'a> {
    /// The XDR position of the chunk's data; zero for a Position-Zero Read chunk, which
    /// carries the whole RPC message (RFC 8166 §3.5.3).
    #[inline]
    pub const fn position(&self) -> u32 {
        self.position
    }

    /// Number of segments in the chunk.
    #[inline]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the chunk has no segments (never true for chunks from a Read list).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.entries.len() == 0
    }

    /// The chunk's segments in wire order.
    #[inline]
    pub fn segments(&self) -> core::iter::Map<ReadList<'a>, fn(ReadSegment) -> Segment> {
        fn segment_of(r: ReadSegment) -> Segment {
            r.segment
        }
        self.entries
            .clone()
            .map(segment_of as fn(ReadSegment) -> Segment)
    }

    /// Sum of the segments' lengths.
    pub fn total_length(&self) -> u64 {
        self.segments().map(|s| u64::from(s.length)).sum()
    }
}

/// The Read list grouped into Read chunks: each maximal run of entries with equal
/// positions is one chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadChunks<'a> {
    entries: &'a [u8],
}

impl<'a> Iterator for ReadChunks<'a> {
    type Item = ReadChunk<'a>;

    fn next(&mut self) -> Option<ReadChunk<'a>> {
        let position = entry_position(self.entries)?;
        let mut run = 0usize;
        while let Some(entry) = self.entries.get(run..) {
            if entry_position(entry) != Some(position) {
                break;
            }
            run += READ_LIST_ENTRY_LEN;
        }
        let (chunk, rest) = self.entries.split_at_checked(run)?;
        self.entries = rest;
        Some(ReadChunk {
            position,
            entries: ReadList::new(chunk),
        })
    }
}

impl FusedIterator for ReadChunks<'_> {}

/// The Write list: one [`Segments`] per Write chunk, in wire order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteList<'a> {
    /// Whole wire entries: "more" word, count, segments.
    entries: &'a [u8],
    remaining: u32,
}

impl<'a> WriteList<'a> {
    #[inline]
    pub(crate) const fn new(entries: &'a [u8], chunks: u32) -> WriteList<'a> {
        WriteList {
            entries,
            remaining: chunks,
        }
    }
}

impl<'a> Iterator for WriteList<'a> {
    type Item = Segments<'a>;

    fn next(&mut self) -> Option<Segments<'a>> {
        let Some((segments, rest)) = split_write_entry(self.entries) else {
            // Keeps size_hint truthful should the bytes ever disagree with the count.
            self.remaining = 0;
            return None;
        };
        self.entries = rest;
        self.remaining = self.remaining.saturating_sub(1);
        Some(Segments::new(segments))
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.remaining as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for WriteList<'_> {}

/// Splits one Write list entry ("more" word, count, segments) off the front of `entries`.
fn split_write_entry(entries: &[u8]) -> Option<(&[u8], &[u8])> {
    let (_more, rest) = entries.split_first_chunk::<WORD_LEN>()?;
    let (count, rest) = rest.split_first_chunk::<WORD_LEN>()?;
    let len = (u32::from_be_bytes(*count) as usize).checked_mul(SEGMENT_LEN)?;
    rest.split_at_checked(len)
}
impl FusedIterator for WriteList<'_> {}
