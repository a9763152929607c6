//! Fixed numbers of the RPC-over-RDMA Version 1 transport header: the version, procedure
//! and error-code values (RFC 8166 §4.2, RFC 5666 §4.3) and the encoded sizes of its parts.

use core::fmt;

/// The only transport version this codec speaks (RFC 8166 §4.2.2).
pub const RPCRDMA_VERSION: u32 = 1;

/// `rdma_proc` value of RDMA_MSG: chunk lists, then the RPC message inline.
pub const RDMA_MSG: u32 = 0;
/// `rdma_proc` value of RDMA_NOMSG: chunk lists only; the RPC message travels in a chunk.
pub const RDMA_NOMSG: u32 = 1;
/// `rdma_proc` value of RDMA_MSGP: alignment, threshold, chunk lists, padded RPC message.
pub const RDMA_MSGP: u32 = 2;
/// `rdma_proc` value of RDMA_DONE: signals completion of a chunk transfer via RDMA Read.
pub const RDMA_DONE: u32 = 3;
/// `rdma_proc` value of RDMA_ERROR: reports a transport header the peer could not use.
pub const RDMA_ERROR: u32 = 4;

/// `rdma_err` value reporting an unsupported transport version (RFC 8166 §4.5.1).
pub const ERR_VERS: u32 = 1;
/// `rdma_err` value reporting a header or chunk that could not be parsed (RFC 8166 §4.5.2).
pub const ERR_CHUNK: u32 = 2;

/// Octets of one XDR word.
pub const WORD_LEN: usize = 4;
/// Octets of the four words every header starts with: xid, vers, credit, proc (RFC 8166 §4.2).
pub const FIXED_HEADER_LEN: usize = 16;
/// Octets of an RDMA segment: handle, length, 64-bit offset (RFC 8166 §3.4.3).
pub const SEGMENT_LEN: usize = 16;
/// Octets of one Read list entry on the wire: "more" discriminator, position, segment.
pub const READ_LIST_ENTRY_LEN: usize = WORD_LEN + WORD_LEN + SEGMENT_LEN;
/// Octets of an RDMA_MSG or RDMA_NOMSG header whose three chunk lists are all empty.
pub const MIN_MSG_HEADER_LEN: usize = FIXED_HEADER_LEN + 3 * WORD_LEN;
/// Octets of an RDMA_MSGP header whose three chunk lists are all empty.
pub const MIN_MSGP_HEADER_LEN: usize = MIN_MSG_HEADER_LEN + 2 * WORD_LEN;
/// Octets of an RDMA_DONE header (it has no body).
pub const DONE_HEADER_LEN: usize = FIXED_HEADER_LEN;
/// Octets of an RDMA_ERROR header carrying ERR_CHUNK.
pub const ERR_CHUNK_HEADER_LEN: usize = FIXED_HEADER_LEN + WORD_LEN;
/// Octets of an RDMA_ERROR header carrying ERR_VERS and its version range.
pub const ERR_VERS_HEADER_LEN: usize = FIXED_HEADER_LEN + 3 * WORD_LEN;
/// Octets of the smallest valid header of any procedure.
pub const MIN_HEADER_LEN: usize = FIXED_HEADER_LEN;

/// The `rdma_proc` discriminant of a transport header (RFC 8166 §4.2.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[repr(u32)]
pub enum Procedure {
    /// RDMA_MSG (0): chunk lists, then the RPC message inline.
    #[cfg_attr(feature = "serde", serde(rename = "RDMA_MSG"))]
    Msg = RDMA_MSG,
    /// RDMA_NOMSG (1): chunk lists only.
    #[cfg_attr(feature = "serde", serde(rename = "RDMA_NOMSG"))]
    Nomsg = RDMA_NOMSG,
    /// RDMA_MSGP (2): padded RDMA_MSG. RFC 8166 §4.6.1 forbids sending it and tells
    /// receivers to answer it with ERR_CHUNK; it is decoded here so that the engine can
    /// make that choice and tools can show old traffic.
    #[cfg_attr(feature = "serde", serde(rename = "RDMA_MSGP"))]
    Msgp = RDMA_MSGP,
    /// RDMA_DONE (3): end of a Read-Read transfer. RFC 8166 §4.6.2 tells receivers to
    /// ignore it.
    #[cfg_attr(feature = "serde", serde(rename = "RDMA_DONE"))]
    Done = RDMA_DONE,
    /// RDMA_ERROR (4): the peer could not use a header we sent.
    #[cfg_attr(feature = "serde", serde(rename = "RDMA_ERROR"))]
    Error = RDMA_ERROR,
}

impl Procedure {
    /// The procedure with wire value `v`, if there is one.
    #[inline]
    pub const fn from_u32(v: u32) -> Option<Procedure> {
        match v {
            RDMA_MSG => Some(Procedure::Msg),
            RDMA_NOMSG => Some(Procedure::Nomsg),
            RDMA_MSGP => Some(Procedure::Msgp),
            RDMA_DONE => Some(Procedure::Done),
            RDMA_ERROR => Some(Procedure::Error),
            _ => None,
        }
    }

    /// The wire value.
    #[inline]
    pub const fn as_u32(self) -> u32 {
        self as u32
    }

    /// The name the RFCs use, e.g. `"RDMA_MSG"`.
    pub const fn name(self) -> &'static str {
        match self {
            Procedure::Msg => "RDMA_MSG",
            Procedure::Nomsg => "RDMA_NOMSG",
            Procedure::Msgp => "RDMA_MSGP",
            Procedure::Done => "RDMA_DONE",
            Procedure::Error => "RDMA_ERROR",
        }
    }

    /// Whether headers of this procedure carry the three chunk lists.
    #[inline]
    pub const fn has_chunk_lists(self) -> bool {
        matches!(self, Procedure::Msg | Procedure::Nomsg | Procedure::Msgp)
    }

    /// Whether an RPC message follows the header in the same Send.
    #[inline]
    pub const fn has_inline_message(self) -> bool {
        matches!(self, Procedure::Msg | Procedure::Msgp)
    }
}

impl fmt::Display for Procedure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn procedure_values_match_rfc5666_4_3() {
        for (v, p) in [
            (0, Procedure::Msg),
            (1, Procedure::Nomsg),
            (2, Procedure::Msgp),
            (3, Procedure::Done),
            (4, Procedure::Error),
        ] {
            assert_eq!(Procedure::from_u32(v), Some(p));
            assert_eq!(p.as_u32(), v);
        }
        assert_eq!(Procedure::from_u32(5), None);
        assert_eq!(Procedure::from_u32(u32::MAX), None);
        assert_eq!(Procedure::Msgp.to_string(), "RDMA_MSGP");
    }

    #[test]
    fn header_sizes_add_up() {
        assert_eq!(MIN_MSG_HEADER_LEN, 28);
        assert_eq!(MIN_MSGP_HEADER_LEN, 36);
        assert_eq!(ERR_VERS_HEADER_LEN, 28);
        assert_eq!(ERR_CHUNK_HEADER_LEN, 20);
        assert_eq!(READ_LIST_ENTRY_LEN, 24);
    }
}
