//! Errors returned by pools, caches and buffers.

use crate::arena::ArenaError;
use crate::buf::Buf;

/// Why a pool operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// No free buffer: every buffer is in use or parked in other threads' caches.
    /// This is backpressure; retry after buffers come back.
    #[error("buffer pool exhausted")]
    Exhausted,
    /// A bulk get asked for more buffers than a cache can hold at once.
    #[error("bulk get of {requested} buffers exceeds the cache's limit of {max}")]
    BulkTooLarge {
        /// Buffers asked for.
        requested: usize,
        /// Most a single bulk get on this cache can return.
        max: usize,
    },
    /// The pool configuration is unusable.
    #[error("invalid pool configuration: {0}")]
    InvalidConfig(ConfigFault),
    /// The pool does not fit in the arena at the offset given.
    #[error("pool needs {needed} bytes at offset {offset} but the arena is {arena_len} bytes")]
    OutOfArena {
        /// Offset the pool was to start at.
        offset: usize,
        /// Bytes the pool needs from that offset.
        needed: usize,
        /// Length of the arena.
        arena_len: usize,
    },
    /// Creating the pool's arena failed.
    #[error("pool arena: {0}")]
    Arena(#[from] ArenaError),
    /// A bulk put was handed buffers of another pool; they were left in place.
    #[error("{count} buffers belong to another pool and were not taken")]
    ForeignBuffers {
        /// How many such buffers were left.
        count: usize,
    },
    /// A token does not name a buffer of this pool that is currently parked as a token
    /// (wrong pool, out of range, already redeemed, or never issued).
    #[error("buffer token {0:#x} is not redeemable here")]
    BadToken(u64),
    /// A scatter-gather entry was asked for before the arena was registered.
    #[error("the pool's arena has no registration keys")]
    NotRegistered,
    /// A scatter-gather entry longer than the buffer was asked for.
    #[error("segment of {requested} bytes exceeds the {len}-byte buffer")]
    TooLong {
        /// Length asked for.
        requested: usize,
        /// Length of the buffer.
        len: usize,
    },
}

/// What is wrong with a pool configuration ([`PoolError::InvalidConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigFault {
    /// The buffer size rounded up to the alignment overflows `usize`.
    #[error("buffer size overflows")]
    BufSizeOverflow,
    /// Stride times count overflows `usize`.
    #[error("pool size overflows")]
    PoolSizeOverflow,
    /// The buffer size is zero.
    #[error("buffer size is zero")]
    ZeroBufSize,
    /// The buffer size does not fit in 32 bits.
    #[error("buffer size exceeds 4 GiB")]
    BufSizeTooLarge,
    /// The buffer count is zero.
    #[error("buffer count is zero")]
    ZeroCount,
    /// More buffers than a ring can index.
    #[error("more than 2^31 buffers")]
    TooManyBufs,
    /// The alignment is not a power of two.
    #[error("alignment is not a power of two")]
    AlignNotPowerOfTwo,
    /// The per-thread cache size is zero.
    #[error("cache size is zero")]
    ZeroCacheSize,
    /// The per-thread cache size is above half the ring capacity.
    #[error("cache size is too large")]
    CacheSizeTooLarge,
    /// The arena offset leaves the first buffer misaligned.
    #[error("arena offset does not give aligned buffers")]
    MisalignedOffset,
    /// The arena's base address is null.
    #[error("null arena")]
    NullArena,
}

/// A buffer handed to the wrong pool's `put`; it is given back so it is not lost.
#[derive(Debug, thiserror::Error)]
#[error("buffer of pool {} returned to another pool", .0.pool_id())]
pub struct ForeignBuf(pub Buf);
