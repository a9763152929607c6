//! Why a transport header was rejected, and what a responder sends back for it.
//!
//! The reply mapping follows RFC 8166 §4.5:
//!
//! | condition | reply | why |
//! |---|---|---|
//! | fewer than 4 octets (no XID) | drop | an RDMA_ERROR must echo the XID (RFC 8166 §4.2.1, §4.5) and there is none |
//! | XID read, version word cut off | drop | ERR_VERS answers a version that was read and is unsupported (§4.5.1); ERR_CHUNK answers parse errors under a recognized version (§4.5.2); neither holds |
//! | version other than 1 | ERR_VERS, low = high = 1 | §4.5.1; the rest of the header is not parsed, as its layout belongs to the other version |
//! | anything else | ERR_CHUNK | §4.5.2 (e.g. bad `rdma_proc`, RDMA_NOMSG without chunks, XID mismatch); RFC 8267 §6.4.2 for lists beyond our limits |
//!
//! These are the responder's duties. A requester that fails to parse a reply drops it
//! (RFC 8166 §4.5.2) and never sends ERR_VERS (§4.5.1).

use core::fmt;

use super::consts::RPCRDMA_VERSION;
use super::repr::{BodyRepr, HeaderRepr, RdmaError};
use super::segment::Segment;
use crate::wire::xdr::XdrError;

/// The part of the header in which a problem was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Field {
    /// `rdma_xid`.
    Xid,
    /// `rdma_vers`.
    Version,
    /// `rdma_credit`.
    Credit,
    /// `rdma_proc`.
    Procedure,
    /// RDMA_MSGP `rdma_align` / `rdma_thresh`.
    Padding,
    /// The Read list.
    ReadList,
    /// The Write list.
    WriteList,
    /// The Reply chunk.
    ReplyChunk,
    /// RDMA_ERROR `rdma_err`.
    ErrorCode,
    /// ERR_VERS `rdma_vers_low` / `rdma_vers_high`.
    VersionRange,
    /// The RPC message after an RDMA_MSG or RDMA_MSGP header.
    RpcMessage,
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Field::Xid => "xid",
            Field::Version => "version",
            Field::Credit => "credit",
            Field::Procedure => "procedure",
            Field::Padding => "RDMA_MSGP padding",
            Field::ReadList => "read list",
            Field::WriteList => "write list",
            Field::ReplyChunk => "reply chunk",
            Field::ErrorCode => "error code",
            Field::VersionRange => "ERR_VERS version range",
            Field::RpcMessage => "RPC message",
        })
    }
}

/// What exactly was wrong with a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderErrorKind {
    /// The input ended inside `field`.
    #[error("truncated in {field} at offset {offset}: needed {needed} octets, {available} left")]
    Truncated {
        /// Where the input ended.
        field: Field,
        /// Offset of the item that did not fit.
        offset: usize,
        /// Octets that item needs.
        needed: usize,
        /// Octets left at `offset`.
        available: usize,
    },
    /// `rdma_vers` is not 1 (RFC 8166 §4.5.1).
    #[error("version {version}, only {RPCRDMA_VERSION} is supported")]
    VersionMismatch {
        /// The version found.
        version: u32,
    },
    /// `rdma_proc` is not one of the five procedures (RFC 8166 §4.5.2).
    #[error("unknown procedure {proc}")]
    UnknownProcedure {
        /// The value found.
        proc: u32,
    },
    /// A list "more entries" word or the Reply chunk's optional marker is neither 0 nor 1.
    #[error("{field} discriminator at offset {offset} is {value}, not 0 or 1")]
    BadDiscriminant {
        /// The list it belongs to.
        field: Field,
        /// Offset of the word.
        offset: usize,
        /// The value found.
        value: u32,
    },
    /// The Read list has more entries than [`Limits::max_read_segments`](super::Limits).
    #[error("read list has more than {max} segments (entry at offset {offset})")]
    TooManyReadSegments {
        /// Offset of the first entry past the limit.
        offset: usize,
        /// The limit.
        max: u32,
    },
    /// A run of Read list entries sharing a position is longer than
    /// [`Limits::max_segments_per_chunk`](super::Limits).
    #[error("read chunk at position {position} has more than {max} segments")]
    ReadChunkTooLong {
        /// The run's position.
        position: u32,
        /// The limit.
        max: u32,
    },
    /// The Write list has more chunks than [`Limits::max_write_chunks`](super::Limits).
    #[error("write list has more than {max} chunks (chunk at offset {offset})")]
    TooManyWriteChunks {
        /// Offset of the first chunk past the limit.
        offset: usize,
        /// The limit.
        max: u32,
    },
    /// A Write chunk or the Reply chunk announces more segments than
    /// [`Limits::max_segments_per_chunk`](super::Limits).
    #[error("{field} chunk at offset {offset} has {count} segments, more than {max}")]
    TooManySegments {
        /// The Write list or the Reply chunk.
        field: Field,
        /// Offset of the segment count.
        offset: usize,
        /// The announced count.
        count: u32,
        /// The limit.
        max: u32,
    },
    /// A segment runs past the end of the 64-bit address space: its last octet's offset,
    /// `offset + length - 1`, overflows.
    #[error("{field} segment at offset {offset}: offset {:#x} + length {} wraps", .segment.offset, .segment.length)]
    SegmentWraps {
        /// The list it belongs to.
        field: Field,
        /// Offset of the segment.
        offset: usize,
        /// The segment.
        segment: Segment,
    },
    /// `rdma_err` is neither ERR_VERS nor ERR_CHUNK. RFC 8166 §4.1.2's union has no
    /// default arm (RFC 5666's `rdma_extra[8]` is gone).
    #[error("unknown RDMA_ERROR code {code}")]
    UnknownErrorCode {
        /// The value found.
        code: u32,
    },
    /// An RDMA_NOMSG header with no Read list, no Write list and no Reply chunk: there is
    /// nowhere the RPC message could be (RFC 8166 §4.5.2 names this case).
    #[error("RDMA_NOMSG without any chunk to carry the RPC message")]
    NomsgWithoutChunks,
    /// An RDMA_MSG or RDMA_MSGP header is not followed by at least an RPC XID.
    #[error("RPC message missing: {available} octets after the header, need an XID")]
    MissingRpcMessage {
        /// Octets after the header.
        available: usize,
    },
    /// The XID of the RPC message differs from `rdma_xid` (RFC 8166 §4.2.1, §4.5.2).
    #[error("RPC message xid {rpc_xid:#010x} differs")]
    RpcXidMismatch {
        /// The XID at the start of the RPC message.
        rpc_xid: u32,
    },
    /// An XDR primitive failed in a way none of the kinds above describes.
    #[error("{field}: {error}")]
    Xdr {
        /// Where.
        field: Field,
        /// The primitive's error.
        #[source]
        error: XdrError,
    },
}

/// A rejected transport header: what was wrong, and the XID if it could be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("RPC-over-RDMA header{}: {kind}", xid_words(*.xid))]
pub struct HeaderError {
    xid: Option<u32>,
    kind: HeaderErrorKind,
}

impl HeaderError {
    /// An error in a header whose XID is `xid` (`None` when not even that was readable).
    #[inline]
    pub const fn new(xid: Option<u32>, kind: HeaderErrorKind) -> HeaderError {
        HeaderError { xid, kind }
    }

    /// The header's `rdma_xid`, when the input was long enough to hold it.
    #[inline]
    pub const fn xid(&self) -> Option<u32> {
        self.xid
    }

    /// What was wrong.
    #[inline]
    pub const fn kind(&self) -> &HeaderErrorKind {
        &self.kind
    }

    /// What a responder sends back for this header (see the module documentation for the
    /// table and its RFC 8166 §4.5 references).
    pub const fn responder_reply(&self) -> ResponderAction {
        let Some(xid) = self.xid else {
            return ResponderAction::Drop;
        };
        match self.kind {
            HeaderErrorKind::Truncated {
                field: Field::Version,
                ..
            } => ResponderAction::Drop,
            HeaderErrorKind::VersionMismatch { .. } => ResponderAction::ErrVers { xid },
            _ => ResponderAction::ErrChunk { xid },
        }
    }
}

/// The XID part of [`HeaderError`]'s message: empty when the XID was unreadable.
fn xid_words(xid: Option<u32>) -> String {
    xid.map(|x| format!(" xid {x:#010x}")).unwrap_or_default()
}

/// What a responder does about a header it could not accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ResponderAction {
    /// Send RDMA_ERROR / ERR_VERS echoing `xid`, advertising versions 1 through 1.
    ErrVers {
        /// The XID to echo.
        xid: u32,
    },
    /// Send RDMA_ERROR / ERR_CHUNK echoing `xid`.
    ErrChunk {
        /// The XID to echo.
        xid: u32,
    },
    /// Send nothing.
    Drop,
}

impl ResponderAction {
    /// The RDMA_ERROR header to send, granting `credit`, or `None` for [`Drop`].
    ///
    /// [`Drop`]: ResponderAction::Drop
    pub const fn reply(&self, credit: u32) -> Option<HeaderRepr<'static>> {
        match *self {
            ResponderAction::ErrVers { xid } => Some(HeaderRepr {
                xid,
                credit,
                body: BodyRepr::Error(RdmaError::Vers {
                    low: RPCRDMA_VERSION,
                    high: RPCRDMA_VERSION,
                }),
            }),
            ResponderAction::ErrChunk { xid } => Some(HeaderRepr {
                xid,
                credit,
                body: BodyRepr::Error(RdmaError::Chunk),
            }),
            ResponderAction::Drop => None,
        }
    }
}
