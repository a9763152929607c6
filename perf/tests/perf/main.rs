//! The `rpcrdma-perf` command line and its latency histogram. One test binary, one module
//! per former file. The allocation counter (`no_alloc`) is a binary of its own.

mod cli;
mod histogram;
mod remote;
mod scale;
mod soak;
