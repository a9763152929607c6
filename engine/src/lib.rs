//! rpcrdma: a userspace, polled-mode RPC-over-RDMA engine.
//!
//! - [`wire`]: XDR codecs for RPC-over-RDMA v1 (RFC 8166, RFC 5666), RFC 8797 private
//!   data and the RFC 5666 Connection Configuration Protocol.
//! - [`fabric`]: the verbs-shaped fabric interface and its providers (`shm`).
//! - [`iwarp`]: sans-IO iWARP codecs (MPA, DDP, RDMAP, CRC32c, Terminate) for the `siw`
//!   provider.
#![warn(missing_docs)]

pub mod fabric;
pub mod iwarp;
pub mod wire;
