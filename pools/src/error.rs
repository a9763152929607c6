//! Errors returned by pools, caches and buffers.

use std::fmt;

use crate::arena::ArenaError;
use crate::buf::Buf;

/// Why a pool operation failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum PoolError {
    /// No free buffer: every buffer is in use or parked in other threads' caches.
    /// This is backpressure; retry after buffers come back.
    Exhausted,
    /// A bulk get asked for more buffers than a cache can hold at once.
    BulkTooLarge {
        /// Buffers asked for.
        requested: usize,
        /// Most a single bulk get on this cache can return.
        max: usize,
    },
    /// The pool configuration is unusable.
    InvalidConfig(&'static str),
    /// The pool does not fit in the arena at the offset given.
    OutOfArena {
        /// Offset the pool was to start at.
        offset: usize,
        /// Bytes the pool needs from that offset.
        needed: usize,
        /// Length of the arena.
        arena_len: usize,
    },
    /// Creating the pool's arena failed.
    Arena(ArenaError),
    /// A bulk put was handed buffers of another pool; they were left in place.
    ForeignBuffers {
        /// How many such buffers were left.
        count: usize,
    },
    /// A token does not name a buffer of this pool that is currently parked as a token
    /// (wrong pool, out of range, already redeemed, or never issued).
    BadToken(u64),
    /// A scatter-gather entry was asked for before the arena was registered.
    NotRegistered,
    /// A scatter-gather entry longer than the buffer was asked for.
    TooLong {
        /// Length asked for.
        requested: usize,
        /// Length of the buffer.
        len: usize,
    },
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::Exhausted => write!(f, "buffer pool exhausted"),
            PoolError::BulkTooLarge { requested, max } => write!(
                f,
                "bulk get of {requested} buffers exceeds the cache's limit of {max}"
            ),
            PoolError::InvalidConfig(why) => write!(f, "invalid pool configuration: {why}"),
            PoolError::OutOfArena {
                offset,
                needed,
                arena_len,
            } => write!(
                f,
                "pool needs {needed} bytes at offset {offset} but the arena is {arena_len} bytes"
            ),
            PoolError::Arena(e) => write!(f, "pool arena: {e}"),
            PoolError::ForeignBuffers { count } => {
                write!(
                    f,
                    "{count} buffers belong to another pool and were not taken"
                )
            }
            PoolError::BadToken(t) => write!(f, "buffer token {t:#x} is not redeemable here"),
            PoolError::NotRegistered => write!(f, "the pool's arena has no registration keys"),
            PoolError::TooLong { requested, len } => {
                write!(
                    f,
                    "segment of {requested} bytes exceeds the {len}-byte buffer"
                )
            }
        }
    }
}

impl std::error::Error for PoolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PoolError::Arena(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ArenaError> for PoolError {
    fn from(e: ArenaError) -> Self {
        PoolError::Arena(e)
    }
}

/// A buffer handed to the wrong pool's `put`; it is given back so it is not lost.
#[derive(Debug)]
pub struct ForeignBuf(pub Buf);

impl fmt::Display for ForeignBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "buffer of pool {} returned to another pool",
            self.0.pool_id()
        )
    }
}

impl std::error::Error for ForeignBuf {}
