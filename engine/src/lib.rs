//! rpcrdma: a userspace, polled-mode RPC-over-RDMA engine.
//!
//! - [`wire`]: XDR codecs for RPC-over-RDMA v1 (RFC 8166, RFC 5666), RFC 8797 private
//!   data and the RFC 5666 Connection Configuration Protocol.
//! - [`fabric`]: the verbs-shaped fabric interface and its providers (`shm`).
//! - [`iwarp`]: sans-IO iWARP codecs (MPA, DDP, RDMAP, CRC32c, Terminate) for the `siw`
//!   provider.
//! - [`core`]: the sans-IO RPC-over-RDMA protocol core (requester and responder);
//!   [`credits`], [`service`] (the responder's ULP interface) and [`requester`] (calls
//!   and outcomes) are its public faces.
//! - [`conn`]: the driver binding a core to a fabric provider, its pools and its CM.
#![warn(missing_docs)]

pub mod conn;
pub mod core;
pub mod credits;
pub mod fabric;
pub mod iwarp;
pub mod limits;
pub mod requester;
pub mod service;
#[doc(hidden)]
pub mod testing;
pub mod wire;
