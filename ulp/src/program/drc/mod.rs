//! [`Drc`]: a duplicate request cache for the [`Dispatcher`](super::Dispatcher), with
//! its key ([`DrcKey`], [`ClientAddr`]), storage (`table`) and counters ([`DrcStats`]).

mod key;
mod stats;
mod table;
#[cfg(test)]
mod tests;

use core::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};

pub use key::{ClientAddr, DrcKey};
pub use stats::DrcStats;

use table::{Begin, Slot, Table, ENTRY_COST};

/// The shortest RPC reply (an accepted header with an empty verifier): a cache whose
/// largest reply is shorter could store nothing.
const SHORTEST_REPLY: usize = crate::binding::ACCEPTED_REPLY_HEADER_LEN as usize;

/// Most entries a cache may have (16 Mi: about 1.5 GB of bookkeeping).
pub const MAX_DRC_ENTRIES: usize = 1 << 24;

/// A [`DrcConfig`] that cannot work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DrcConfigError {
    /// No entries, or more than [`MAX_DRC_ENTRIES`].
    #[error("a duplicate request cache needs 1 to {MAX_DRC_ENTRIES} entries, not {entries}")]
    Entries {
        /// The number asked for.
        entries: usize,
    },
    /// The largest cacheable reply is shorter than any reply.
    #[error("the largest cached reply must be at least {SHORTEST_REPLY} octets, not {max_reply}")]
    MaxReplyTooSmall {
        /// The length asked for.
        max_reply: usize,
    },
    /// The reply storage cannot hold even the largest cacheable reply.
    #[error("{reply_bytes} octets of reply storage cannot hold a {max_reply}-octet reply")]
    StorageTooSmall {
        /// Octets of reply storage.
        reply_bytes: usize,
        /// The largest cacheable reply.
        max_reply: usize,
    },
}

/// The size of a [`Drc`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrcConfig {
    entries: u32,
    reply_bytes: usize,
    max_reply: usize,
}

impl DrcConfig {
    /// 1024 entries, 512 KiB of replies, replies up to 4 KiB. An NFSv3 reply worth
    /// caching is at most 304 octets (CREATE's: RPC header, handle, attributes and the
    /// directory's before and after attributes), so entries, not bytes, normally bound
    /// it.
    pub const DEFAULT: DrcConfig = DrcConfig {
        entries: 1024,
        reply_bytes: 512 * 1024,
        max_reply: 4096,
    };

    /// `entries` entries and `reply_bytes` octets to store replies of at most
    /// `max_reply` octets in (a longer one is not cached).
    pub fn new(
        entries: usize,
        reply_bytes: usize,
        max_reply: usize,
    ) -> Result<DrcConfig, DrcConfigError> {
        if entries == 0 || entries > MAX_DRC_ENTRIES {
            return Err(DrcConfigError::Entries { entries });
        }
        if max_reply < SHORTEST_REPLY {
            return Err(DrcConfigError::MaxReplyTooSmall { max_reply });
        }
        if reply_bytes < max_reply {
            return Err(DrcConfigError::StorageTooSmall {
                reply_bytes,
                max_reply,
            });
        }
        Ok(DrcConfig {
            entries: entries as u32,
            reply_bytes,
            max_reply,
        })
    }

    /// Number of entries (stored replies and running calls together).
    pub fn entries(&self) -> usize {
        self.entries as usize
    }

    /// Octets of reply storage.
    pub fn reply_bytes(&self) -> usize {
        self.reply_bytes
    }

    /// Longest reply that is cached.
    pub fn max_reply(&self) -> usize {
        self.max_reply
    }

    /// Octets a cache of this size allocates: its entries with their hash index, and
    /// the reply storage.
    pub fn memory_bytes(&self) -> usize {
        let n = self.entries as usize;
        n * ENTRY_COST
            + (n.next_power_of_two() - n) * core::mem::size_of::<u32>()
            + self.reply_bytes
    }
}

impl Default for DrcConfig {
    fn default() -> Self {
        DrcConfig::DEFAULT
    }
}

/// A duplicate request cache: answers a retransmitted call that is not idempotent with
/// the reply the original got instead of running it again (RFC 1813 §4.5; the idea of
/// Linux nfsd's reply cache, `fs/nfsd/nfscache.c`).
///
/// A [`Dispatcher`](super::Dispatcher) consults the cache of a program that has one
/// ([`Program::reply_cache`](super::Program::reply_cache)) for each call to a procedure
/// not declared [`idempotent`](crate::binding::ProcInfo::idempotent), keyed by
/// [`DrcKey`]:
///
/// - not found: an entry is reserved **in progress** and the call runs. A plain SUCCESS
///   reply (NFS errors included: they are results) is then stored and the entry is
///   **done**; anything else (an RPC error reply, results in Write chunks, no reply, a
///   reply too long to cache) releases the entry, and a retransmission runs again;
/// - found in progress: the retransmission is dropped without a reply (the original's
///   reply answers the client);
/// - found done: the cached reply is sent again, byte for byte, and counted
///   ([`DrcStats::hits`]).
///
/// One cache serves every connection of a server (it is shared, behind a lock held
/// only for a lookup or a store), because a client retransmits on a new connection.
///
/// # Bounds and memory
///
/// [`DrcConfig`] fixes the number of entries and the octets of reply storage; both are
/// allocated when the cache is made and never grow, and looking up, storing or evicting
/// allocates nothing. The memory is [`DrcConfig::memory_bytes`]: 92 octets per entry on
/// 64-bit targets (the key, state and links, and the hash index) plus the reply
/// storage; the default (1024 entries, 512 KiB of replies) is 604 KiB per server.
///
/// When either bound is reached the oldest stored replies are evicted first. A replay
/// does not refresh an entry: replies sit in a ring in the order they were stored, so
/// that one eviction order frees both entries and bytes, and a cache like this protects
/// the moments after a reply went out whether or not it was already replayed. Running
/// calls are never evicted; when every entry holds one, a new call runs uncached. There
/// is no expiry by age (Linux drops entries after two minutes): nothing here reads a
/// clock, so a reply stays until the bounds push it out.
pub struct Drc {
    config: DrcConfig,
    table: Mutex<Table>,
}

impl fmt::Debug for Drc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The counters, not the (large) table; never waits for the lock.
        let stats = self.table.try_lock().ok().map(|t| t.stats);
        f.debug_struct("Drc")
            .field("config", &self.config)
            .field("stats", &stats)
            .finish()
    }
}

/// What [`Drc::lookup`] found.
#[derive(Debug)]
pub enum DrcLookup<'c> {
    /// Not cached: run the call, then store its reply with [`DrcPending::complete`] (or
    /// drop the `DrcPending` to forget the call).
    New(DrcPending<'c>),
    /// A retransmission of a call still running: send nothing.
    InProgress,
    /// A retransmission of a completed call: its reply, `len` octets, is now at the
    /// start of the buffer passed in. Send it.
    Replayed {
        /// Octets of the reply.
        len: usize,
    },
    /// A retransmission of a completed call whose `len`-octet reply does not fit the
    /// buffer passed in (the requester offered less room this time).
    ReplayOverrun {
        /// Octets of the cached reply.
        len: usize,
    },
    /// Every entry holds a running call: run this one uncached.
    Full,
}

impl Drc {
    /// An empty cache; allocates all it will ever use.
    pub fn new(config: DrcConfig) -> Drc {
        Drc {
            config,
            table: Mutex::new(Table::new(
                config.entries,
                config.reply_bytes,
                config.max_reply,
            )),
        }
    }

    /// Its size.
    pub fn config(&self) -> DrcConfig {
        self.config
    }

    /// Counters and levels.
    pub fn stats(&self) -> DrcStats {
        self.lock().stats
    }

    /// Looks up the call `key` names; a cached reply is copied into `reply`.
    pub fn lookup<'c>(&'c self, key: &DrcKey, reply: &mut [u8]) -> DrcLookup<'c> {
        match self.lock().begin(key, reply) {
            Begin::New(slot) => DrcLookup::New(DrcPending {
                drc: self,
                slot: Some(slot),
            }),
            Begin::InProgress => DrcLookup::InProgress,
            Begin::Replayed { len } => DrcLookup::Replayed { len },
            Begin::ReplayOverrun { len } => DrcLookup::ReplayOverrun { len },
            Begin::Full => DrcLookup::Full,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        // The table is consistent between calls (nothing in it panics midway), so a
        // panic elsewhere while the lock was held leaves nothing to repair.
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A call the cache holds in progress. Complete it with its reply, or drop it (on any
/// path, unwinding included) to forget the call, so that a retransmission runs again.
#[derive(Debug)]
pub struct DrcPending<'c> {
    drc: &'c Drc,
    slot: Option<Slot>,
}

impl DrcPending<'_> {
    /// Stores `reply`, the complete RPC reply message, for retransmissions. Returns
    /// whether it was stored (a reply longer than [`DrcConfig::max_reply`] is not).
    pub fn complete(mut self, reply: &[u8]) -> bool {
        match self.slot.take() {
            Some(slot) => self.drc.lock().complete(slot, reply),
            None => false,
        }
    }
}

impl Drop for DrcPending<'_> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            self.drc.lock().abandon(slot);
        }
    }
}
