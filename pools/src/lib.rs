//! rpcrdma-pools: hugepage arenas, fixed-size buffer pools and per-core caches.
//!
//! Knows nothing of RDMA: a fabric registers an [`Arena`] and stores its keys on it; the
//! pools carve fixed-size slots from arenas and hand them out in bulk, DPDK-mempool style.
//!
//! - [`Pool`]: `count` buffers of one size, cache-line aligned, in an arena of its own
//!   or at an offset in a shared one; a lock-free ring of free slot indices.
//! - [`PoolCache`]: one per polling thread; get/put (single and bulk) touch only the
//!   cache, which refills from and flushes to the ring in bulk.
//! - [`Buf`]: a move-only handle to one buffer that knows its address, length, arena
//!   offset and registration keys.
//! - Memory by use: an arena made with [`ArenaOptions::prefault`]`(false)` (or a pool
//!   with [`PoolConfig::prefault`]`(false)`) is resident only where touched, and
//!   [`Pool::release_free`] gives the pages of the buffers now free back to the OS.
//!
//! ```
//! use rpcrdma_pools::{HugePages, Pool, PoolConfig, PoolError, RegKeys};
//!
//! # fn main() -> Result<(), PoolError> {
//! let pool = Pool::new(&PoolConfig::new("inline", 4096, 256).hugepages(HugePages::Never))?;
//! // A fabric registers the arena once, up front, and stores its keys on it.
//! pool.arena().set_keys(RegKeys { lkey: 0x10, rkey: 0x20 });
//!
//! let mut cache = pool.cache(); // one per polling thread
//! let mut buf = cache.get()?;
//! buf.as_mut_slice()[..5].copy_from_slice(b"hello");
//! let sge = buf.sge(5)?; // address, length and lkey, ready to post
//! assert_eq!(sge.lkey, 0x10);
//! cache.put(buf).map_err(|_| PoolError::ForeignBuffers { count: 1 })?;
//!
//! let mut burst: [Option<rpcrdma_pools::Buf>; 32] = Default::default();
//! cache.get_bulk(&mut burst)?;
//! cache.put_bulk(&mut burst)?;
//!
//! drop(cache); // flushes the cache back to the shared ring
//! assert!(pool.is_full());
//! # Ok(())
//! # }
//! ```
//!
//! Debug builds track each slot's state and panic on a double free or use after free.
//! Those can only arise through the unsafe [`Pool::from_raw`]; they are programming
//! errors, not bad input, so a loud panic is the right report.
#![warn(missing_docs)]

pub mod arena;
pub mod buf;
pub mod cache;
pub mod error;
pub mod pool;
mod ring;

pub use arena::{Arena, ArenaError, ArenaOptions, HugePages, RegKeys, UntrustedFd};
pub use buf::{Buf, BufToken, SgEntry};
pub use cache::PoolCache;
pub use error::{ConfigFault, ForeignBuf, PoolError};
pub use pool::{Pool, PoolConfig, PoolStats, CACHE_LINE};
