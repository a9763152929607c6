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
//!
//! The names an embedding application starts from are at the root: [`Requester`]
//! (`Requester::connect(&dev, &addr).credits(32).open()?`, then `call` or
//! `submit`/`poll`/`poll_outcome`), [`Responder`] (`Responder::listen(dev,
//! &addr).serve(factory)?`, then `poll` or `run` on a thread of its own), [`ConnConfig`],
//! [`CallRequest`], [`Outcome`], and the default provider under short names in [`shm`].
#![warn(missing_docs)]

pub mod conn;
pub mod core;
pub mod credits;
pub mod fabric;
pub mod iwarp;
pub mod limits;
pub mod requester;
pub mod service;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod testing;
pub mod wire;

pub use conn::{RequesterConn as Requester, Server as Responder};
pub use core::ConnConfig;
pub use requester::{CallRequest, CallStatus, Outcome};

/// The shared-memory provider, the embedded default, under short names.
pub mod shm {
    pub use crate::fabric::shm::{
        ShmAddr as Addr, ShmConfig as Config, ShmDevice as Device, ShmProvider as Provider,
    };
}
