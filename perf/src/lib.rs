//! `rpcrdma-perf`: the benchmark harness for rpcrdma.
//!
//! Modelled on perftest's `ib_send_lat` / `ib_write_bw`: latency (`lat`), bandwidth
//! (`bw`) and message rate (`rate`) rows at chosen sizes, depths and connection counts,
//! on pinned cores, each row warmed up and then measured for a time or an iteration
//! count under a hard deadline. Every layer is compared with the one below it:
//!
//! - physical: two threads and shared memory ([`physical`]), the machine's floor;
//! - fabric: the raw provider, Send/Recv and RDMA Write ([`fabric`], generic over
//!   [`rpcrdma::fabric::Provider`]);
//! - rpc: the engine serving the built-in echo program ([`rpc`]).
//!
//! Latencies go into a preallocated log-linear [`histogram::Histogram`] (no allocation
//! in the measured loop); results print as a table ([`report`]), JSON, or an SVG plot
//! ([`plot`]).
#![warn(missing_docs)]

pub mod cli;
pub mod config;
pub mod fabric;
pub mod groups;
pub mod histogram;
pub mod measure;
pub mod paired;
pub mod physical;
pub mod plot;
pub mod report;
pub mod rpc;
pub mod run;
pub mod scale;
pub mod server;
pub mod soak;
pub mod spec;
pub mod tcp;
pub mod units;
