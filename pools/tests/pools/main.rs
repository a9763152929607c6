//! Pools, caches and buffers through the public API, single- and multi-threaded. One
//! test binary, one module per former file. The allocation counter (`no_alloc`) is a
//! binary of its own.

mod pool_api;
mod threads;
