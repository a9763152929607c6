//! [`Header`]: an owned, allocating form of a whole received message for tools and
//! tests, with a readable JSON form under the `serde` feature. The engine itself uses
//! [`HeaderView`] and [`HeaderRepr`], which do not allocate.

use super::consts::Procedure;
use super::error::HeaderError;
use super::limits::Limits;
use super::repr::{BodyRepr, ChunkListsRepr, HeaderRepr, RdmaError};
use super::segment::{ReadSegment, Segment};
use super::view::{BodyView, ChunkListsView, HeaderView};
use crate::wire::xdr::BufferTooSmall;

/// Owned chunk lists.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ChunkLists {
    /// The Read list in wire order.
    #[cfg_attr(feature = "serde", serde(default))]
    pub reads: Vec<ReadSegment>,
    /// The Write list: the segments of each Write chunk.
    #[cfg_attr(feature = "serde", serde(default))]
    pub writes: Vec<Vec<Segment>>,
    /// The Reply chunk, if any.
    #[cfg_attr(feature = "serde", serde(default))]
    pub reply: Option<Vec<Segment>>,
}

impl ChunkLists {
    fn from_view(v: &ChunkListsView<'_>) -> ChunkLists {
        ChunkLists {
            reads: v.read_list().collect(),
            writes: v.write_list().map(|c| c.collect()).collect(),
            reply: v.reply_chunk().map(|c| c.collect()),
        }
    }
}

/// Owned procedure and body. In JSON the procedure is the `"proc"` member, named as in
/// the RFCs (`"RDMA_MSG"` ...), next to the body's members.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(tag = "proc"))]
pub enum HeaderBody {
    /// RDMA_MSG.
    #[cfg_attr(feature = "serde", serde(rename = "RDMA_MSG"))]
    Msg(ChunkLists),
    /// RDMA_NOMSG.
    #[cfg_attr(feature = "serde", serde(rename = "RDMA_NOMSG"))]
    Nomsg(ChunkLists),
    /// RDMA_MSGP.
    #[cfg_attr(feature = "serde", serde(rename = "RDMA_MSGP"))]
    Msgp {
        /// `rdma_align`.
        align: u32,
        /// `rdma_thresh`.
        thresh: u32,
        /// The chunk lists.
        #[cfg_attr(feature = "serde", serde(flatten))]
        lists: ChunkLists,
    },
    /// RDMA_DONE.
    #[cfg_attr(feature = "serde", serde(rename = "RDMA_DONE"))]
    Done,
    /// RDMA_ERROR.
    #[cfg_attr(feature = "serde", serde(rename = "RDMA_ERROR"))]
    Error(RdmaError),
}

/// A whole message: transport header plus whatever followed it (the RPC message of
/// RDMA_MSG and RDMA_MSGP). Encoding it reproduces the parsed bytes exactly.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Header {
    /// `rdma_xid`.
    pub xid: u32,
    /// `rdma_credit`.
    pub credit: u32,
    /// Procedure and body.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub body: HeaderBody,
    /// Octets after the header; lower-case hex in JSON, omitted when empty.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Vec::is_empty", with = "hex_bytes")
    )]
    pub payload: Vec<u8>,
}

impl Header {
    /// Parses `buf` (see [`HeaderView::parse`]) into an owned header.
    pub fn parse(buf: &[u8], limits: &Limits) -> Result<Header, HeaderError> {
        HeaderView::parse(buf, limits).map(|v| Header::from_view(&v))
    }

    /// Copies a view, including the bytes after the header.
    pub fn from_view(v: &HeaderView<'_>) -> Header {
        let body = match v.body() {
            BodyView::Msg(l) => HeaderBody::Msg(ChunkLists::from_view(l)),
            BodyView::Nomsg(l) => HeaderBody::Nomsg(ChunkLists::from_view(l)),
            BodyView::Msgp {
                align,
                thresh,
                lists,
            } => HeaderBody::Msgp {
                align: *align,
                thresh: *thresh,
                lists: ChunkLists::from_view(lists),
            },
            BodyView::Done => HeaderBody::Done,
            BodyView::Error(e) => HeaderBody::Error(*e),
        };
        Header {
            xid: v.xid(),
            credit: v.credit(),
            body,
            payload: v.after_header().to_vec(),
        }
    }

    /// `rdma_proc`.
    pub const fn procedure(&self) -> Procedure {
        match self.body {
            HeaderBody::Msg(_) => Procedure::Msg,
            HeaderBody::Nomsg(_) => Procedure::Nomsg,
            HeaderBody::Msgp { .. } => Procedure::Msgp,
            HeaderBody::Done => Procedure::Done,
            HeaderBody::Error(_) => Procedure::Error,
        }
    }

    /// Calls `f` with a borrowed representation of the transport header (without the
    /// payload). Builds one small vector of Write chunk slices.
    pub fn with_repr<R>(&self, f: impl FnOnce(&HeaderRepr<'_>) -> R) -> R {
        let lists = match &self.body {
            HeaderBody::Msg(l) | HeaderBody::Nomsg(l) | HeaderBody::Msgp { lists: l, .. } => {
                Some(l)
            }
            HeaderBody::Done | HeaderBody::Error(_) => None,
        };
        let writes: Vec<&[Segment]> = lists
            .map(|l| l.writes.iter().map(Vec::as_slice).collect())
            .unwrap_or_default();
        let lists_repr = lists.map_or(ChunkListsRepr::EMPTY, |l| ChunkListsRepr {
            reads: &l.reads,
            writes: &writes,
            reply: l.reply.as_deref(),
        });
        let body = match &self.body {
            HeaderBody::Msg(_) => BodyRepr::Msg(lists_repr),
            HeaderBody::Nomsg(_) => BodyRepr::Nomsg(lists_repr),
            HeaderBody::Msgp { align, thresh, .. } => BodyRepr::Msgp {
                align: *align,
                thresh: *thresh,
                lists: lists_repr,
            },
            HeaderBody::Done => BodyRepr::Done,
            HeaderBody::Error(e) => BodyRepr::Error(*e),
        };
        f(&HeaderRepr {
            xid: self.xid,
            credit: self.credit,
            body,
        })
    }

    /// Octets of the transport header alone.
    pub fn header_len(&self) -> usize {
        self.with_repr(|r| r.encoded_len())
    }

    /// Octets [`encode`](Self::encode) writes: header plus payload.
    pub fn encoded_len(&self) -> usize {
        self.header_len().saturating_add(self.payload.len())
    }

    /// Writes the header and then the payload into `buf`.
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, BufferTooSmall> {
        let needed = self.encoded_len();
        if needed > buf.len() {
            return Err(BufferTooSmall {
                needed,
                available: buf.len(),
            });
        }
        let n = self.with_repr(|r| r.encode(buf))?;
        let end = n + self.payload.len();
        let out = buf.get_mut(n..end).ok_or(BufferTooSmall {
            needed: end,
            available: n,
        })?;
        out.copy_from_slice(&self.payload);
        Ok(end)
    }

    /// Header and payload as a new vector.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.encoded_len()];
        // The vector is exactly encoded_len() long, so encode cannot run short.
        let n = self.encode(&mut out).unwrap_or(0);
        out.truncate(n);
        out
    }
}

impl From<&HeaderView<'_>> for Header {
    fn from(v: &HeaderView<'_>) -> Header {
        Header::from_view(v)
    }
}

/// Lower-case hex (de)serialization of byte vectors, readable in JSON.
#[cfg(feature = "serde")]
mod hex_bytes {
    use core::fmt;
    use serde::{de, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = String::with_capacity(bytes.len() * 2);
        for b in bytes {
            out.push(char::from(DIGITS[usize::from(b >> 4)]));
            out.push(char::from(DIGITS[usize::from(b & 0xf)]));
        }
        s.serialize_str(&out)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        d.deserialize_str(HexVisitor)
    }

    struct HexVisitor;

    impl de::Visitor<'_> for HexVisitor {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string of hexadecimal digit pairs")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<u8>, E> {
            let digits = v.as_bytes();
            if digits.len() & 1 != 0 {
                return Err(E::custom("hex string has an odd number of digits"));
            }
            digits
                .chunks_exact(2)
                .map(|pair| match (nibble(pair[0]), nibble(pair[1])) {
                    (Some(hi), Some(lo)) => Ok(hi << 4 | lo),
                    _ => Err(E::custom("hex string has a non-hex character")),
                })
                .collect()
        }
    }

    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            b'A'..=b'F' => Some(c - b'A' + 10),
            _ => None,
        }
    }
}
