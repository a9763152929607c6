//! rpcrdma-pools: hugepage arenas, fixed-size buffer pools and per-core caches.
//!
//! Knows nothing of RDMA: a fabric registers an [`Arena`] and stores its keys on it; the
//! pools carve fixed-size slots from arenas and hand them out in bulk, DPDK-mempool style.
#![warn(missing_docs)]

pub mod arena;

pub use arena::{Arena, ArenaError, ArenaOptions, HugePages, RegKeys};
