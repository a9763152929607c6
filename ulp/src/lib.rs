//! rpcrdma-ulp: ONC RPC version 2 (RFC 5531), the upper-layer interface, the NFS binding
//! (RFC 8267) and built-in programs.
//!
//! - [`rpc`]: call and reply headers.
//! - [`ddp`]: XDR encoding and decoding with DDP-eligible items in Read and Write chunks
//!   (positions and roundup per RFC 8166 §3.4.5), and the requester's [`ddp::CallEncoder`].
//! - [`binding`]: per-procedure declarations ([`binding::ProcInfo`]): DDP-eligible items
//!   and reply size bounds.
//! - [`program`]: the [`program::Program`] trait and the [`program::Dispatcher`], which
//!   is the engine's responder `Service`.
//! - [`builtin`]: NULL, echo/sink/source and CCP programs.
//! - [`nfs`]: the RFC 8267 tables for NFSv2, v3, v4 and the auxiliary protocols.
//! - [`client`]: building engine `CallRequest`s and reading `Outcome`s with the codecs.
//! - [`echo`]: the echo program with a call builder and a reply reader, for examples.
#![warn(missing_docs)]
pub mod binding;
pub mod builtin;
pub mod ccp;
pub mod client;
pub mod ddp;
pub mod echo;
pub mod nfs;
pub mod program;
pub mod rpc;

pub use program::Dispatcher;

/// The README's example runs as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
