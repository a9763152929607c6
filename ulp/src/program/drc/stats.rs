//! [`DrcStats`]: what a duplicate request cache did, for operators and tests.

use core::fmt;

/// Counters and levels of a [`Drc`](super::Drc).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DrcStats {
    /// Replies stored (calls that completed with a cacheable reply).
    pub insertions: u64,
    /// Retransmissions answered with the cached reply, the call not run again.
    pub hits: u64,
    /// Retransmissions dropped, without a reply, because the original was still running.
    pub in_progress_drops: u64,
    /// Stored replies dropped to make room (for an entry or for bytes).
    pub evictions: u64,
    /// Calls whose XID, program, version, procedure and client matched a cached entry
    /// but whose arguments did not: an XID reused for another call, which ran.
    pub checksum_misses: u64,
    /// Calls that ran without leaving a reply in the cache: every entry was busy with a
    /// running call, the reply was too long or not a plain SUCCESS reply (an RPC error,
    /// results in Write chunks, no reply at all), or it did not fit the reply buffer.
    pub uncached: u64,
    /// Entries holding a reply now.
    pub entries: u64,
    /// Octets of cached replies now.
    pub reply_bytes: u64,
    /// Entries reserved by running calls now.
    pub in_progress: u64,
}

impl fmt::Display for DrcStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "duplicate request cache: {} replayed, {} dropped in progress, {} inserted, \
             {} evicted, {} checksum misses, {} uncached; holds {} replies ({} octets)",
            self.hits,
            self.in_progress_drops,
            self.insertions,
            self.evictions,
            self.checksum_misses,
            self.uncached,
            self.entries,
            self.reply_bytes
        )
    }
}
