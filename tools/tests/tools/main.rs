//! The `rpcrdma` binary end to end, run as separate processes: decode/encode/info,
//! serve and call, serve --nfs, and a server that stays up across many connections
//! (`RPCRDMA_SEQUENTIAL_CONNECTIONS=1000 cargo test -p rpcrdma-tools --test tools
//! serve_stays_up`). One test binary, one module per former file.

mod cli;
mod serve_call;
mod serve_cores;
mod serve_nfs;
mod serve_stats;
mod serve_stays_up;
