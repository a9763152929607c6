//! An embeddable NFSv3 (RFC 1813) and NFSv4.1 (RFC 8881, [`v41`]) server over
//! RPC-over-RDMA, with MOUNT and NFS over TCP beside it.
//!
//! - [`NfsBackend`]: what an appliance implements; [`MemFs`] (in memory) and
//!   [`HostFs`] (a host directory, confined to it) are provided.
//! - [`NfsProgram`] and [`MountProgram`]: the RPC programs, for a
//!   [`Dispatcher`](crate::program::Dispatcher); [`NfsShared`] and [`MountShared`] are
//!   what their per-connection instances share (backend, handle key, counters).
//! - [`NfsService`]: the engine `Service` for an NFS connection (chunk limits, chunk
//!   counters).
//! - [`tcp`]: ONC RPC over TCP with record marking, for MOUNT and NFS.
//! - [`handle`]: unforgeable file handles.
//!
//! ```no_run
//! use std::sync::Arc;
//! use rpcrdma_ulp::nfs::server::{MemFs, NfsConfig, NfsShared, NfsService};
//! use rpcrdma_ulp::program::Dispatcher;
//!
//! let shared = NfsShared::new(Arc::new(MemFs::default()), NfsConfig::default());
//! // One per accepted connection, e.g. from an `rpcrdma::Responder` factory:
//! let service = NfsService::new(Dispatcher::new(), shared.clone(), 4096).unwrap();
//! # let _ = service;
//! ```

pub mod backchannel;
mod backend;
mod counters;
pub mod handle;
mod hostfs;
mod mem;
mod mountprog;
mod program;
mod service;
pub mod tcp;
pub mod v41;

pub use backend::{
    CreateMode, DirEntry, FileKey, FsLimits, FsSpace, NfsBackend, ReadDone, WriteDone,
};
pub use counters::{CallbackCount, CallbackCounters, NfsCounters, ProcCount, ProcCounters};
pub use hostfs::HostFs;
pub use mem::MemFs;
pub use mountprog::{MountProgram, MountShared};
pub use program::{NfsConfig, NfsProgram, NfsShared};
pub use service::{NfsService, MAX_NFS_CHUNKS};
