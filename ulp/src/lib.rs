//! rpcrdma-ulp: ONC RPC version 2 (RFC 5531), the upper-layer interface, the NFS binding
//! (RFC 8267) and built-in programs.
#![warn(missing_docs)]
pub mod binding;
pub mod builtin;
pub mod client;
pub mod ddp;
pub mod nfs;
pub mod program;
pub mod rpc;
