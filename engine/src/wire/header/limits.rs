//! How much chunk-list complexity the decoder accepts.
//!
//! RPC-over-RDMA Version 1 puts no bound on the number of chunks or segments (RFC 8267
//! §6.4.2), but every entry costs parse time and, later, RDMA work requests and memory
//! registrations. A receiver that cannot handle a list answers ERR_CHUNK (RFC 8267 §6.4.2),
//! so these limits turn "more than we are prepared to process" into a typed error at parse
//! time rather than a failure halfway through moving data.

use super::consts::{FIXED_HEADER_LEN, READ_LIST_ENTRY_LEN, SEGMENT_LEN, WORD_LEN};

/// Bounds applied by [`HeaderView::parse`](super::HeaderView::parse).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limits {
    /// Most entries (segments) in the Read list, over all Read chunks.
    pub max_read_segments: u32,
    /// Most Write chunks in the Write list.
    pub max_write_chunks: u32,
    /// Most segments in any one chunk: a Write chunk, the Reply chunk, or a run of Read
    /// list entries that share a position.
    pub max_segments_per_chunk: u32,
    /// Whether RDMA_MSG and RDMA_MSGP must be followed by an RPC message whose XID equals
    /// the transport header's. RFC 8166 §4.2.1 requires the two to match and §4.5.2 names
    /// a mismatch as an XDR error; tools that look at headers captured without their
    /// payload turn this off.
    pub require_rpc_xid: bool,
}

impl Limits {
    /// The limits the engine uses unless configured otherwise.
    ///
    /// - 16 segments per chunk: what RFC 8267 §6.4.2 tells NFSv4 clients any chunk may
    ///   hold and servers must accept.
    /// - 32 Read segments: RFC 8267 §6.4.2 allows a Position-Zero Read chunk and one other
    ///   Read chunk in the same message, each of up to 16 segments.
    /// - 8 Write chunks: RFC 8267 §6.4.2 asks NFSv4 clients for one, but other upper
    ///   layers (and NFSv4 COMPOUNDs with several READs, RFC 8267 §6.4.1) may return more
    ///   than one DDP-eligible result; 8 covers those while keeping the worst-case header
    ///   (see [`Limits::max_header_len`]) to a few kilobytes.
    pub const DEFAULT: Limits = Limits {
        max_read_segments: 32,
        max_write_chunks: 8,
        max_segments_per_chunk: 16,
        require_rpc_xid: true,
    };

    /// No count limits and no RPC XID check: for tools that inspect whatever they are
    /// given. Only the input's length bounds the work.
    pub const PERMISSIVE: Limits = Limits {
        max_read_segments: u32::MAX,
        max_write_chunks: u32::MAX,
        max_segments_per_chunk: u32::MAX,
        require_rpc_xid: false,
    };

    /// The longest transport header (without RPC message) these limits admit, saturating
    /// at `usize::MAX`: the size of a buffer that can hold any header the decoder accepts.
    pub const fn max_header_len(&self) -> usize {
        let segs = self.max_segments_per_chunk as usize;
        let chunk = sat_add(WORD_LEN, sat_mul(segs, SEGMENT_LEN));
        let reads = sat_add(
            sat_mul(self.max_read_segments as usize, READ_LIST_ENTRY_LEN),
            WORD_LEN,
        );
        let writes = sat_add(
            sat_mul(self.max_write_chunks as usize, sat_add(WORD_LEN, chunk)),
            WORD_LEN,
        );
        let reply = sat_add(WORD_LEN, chunk);
        // The RDMA_MSGP alignment and threshold words make it the longest procedure.
        let fixed = FIXED_HEADER_LEN + 2 * WORD_LEN;
        sat_add(sat_add(fixed, reads), sat_add(writes, reply))
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

const fn sat_add(a: usize, b: usize) -> usize {
    a.saturating_add(b)
}

const fn sat_mul(a: usize, b: usize) -> usize {
    a.saturating_mul(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_worst_case_header_length() {
        // 24 fixed + (32*24 + 4) reads + (8*(4+4+16*16) + 4) writes + (4+4+16*16) reply.
        assert_eq!(
            Limits::DEFAULT.max_header_len(),
            24 + 772 + (8 * 264 + 4) + 264
        );
        assert_eq!(Limits::PERMISSIVE.max_header_len(), usize::MAX);
    }
}
