//! The I/O driver: binds a protocol core to a fabric [`Provider`], its pools and its
//! connection manager.
//!
//! A driver owns the queue pair, the completion queue and the registered pools of one
//! connection. Each [`poll`](Requester::poll) reaps up to [`CQ_BATCH`] completions,
//! feeds them to the core, lets the core restock receives and start queued work, and
//! posts what the core staged: the receive chain, then the send chain, one doorbell
//! each.
//!
//! - [`Requester`]: the active side; connects, submits calls, yields outcomes.
//! - [`Listener`] and [`ResponderConn`]: the passive side; [`Responder`] bundles a listener
//!   with the connections it accepts.
//! - [`Pair`]: a requester and a responder connected over one provider and driven from
//!   one thread, for tests and benchmarks.
//! - [`task`]: the same drivers as poller tasks, and [`Client`](task::Client), the
//!   application-thread face of a requester.
//!
//! [`Provider`]: crate::fabric::Provider

mod builder;
mod group;
mod group_pools;
mod pair;
mod post;
mod reconnect;
mod requester;
mod resources;
mod responder;
mod shared_recv;
pub(crate) mod task;

pub use builder::{
    RequesterBuilder, ResponderBuilder, Serving, StopHandle, DEFAULT_CONNECT_TIMEOUT,
};
pub use group::{
    GroupCounters, GroupOptions, GroupSample, PollGroup, PollGroupTask, DEFAULT_GROUP_POOL_CONNS,
};
pub use pair::{Pair, PairError, PairWait};
#[cfg(any(test, feature = "testing"))]
pub(crate) use post::post_transmit;
pub use reconnect::ReconnectStats;
pub use requester::Requester;
pub use resources::ConnResources;
pub use responder::{
    Listener, Responder, ResponderConn, ResponderCounters, ResponderLimits, DEFAULT_RELEASE_IDLE,
};

use crate::core::{ConfigError, CoreError};
use crate::fabric::FabricError;
use rpcrdma_pools::PoolError;

/// Completions reaped per poll.
pub(crate) const CQ_BATCH: usize = 32;

/// Once a connection is up, its connection manager is polled every this many polls:
/// CM progress can cost a system call (shm reads a socket), and a disconnect shows up
/// on the data path anyway (every posted request is flushed).
pub(crate) const CM_POLL_INTERVAL: u32 = 64;

const _: () = assert!(CM_POLL_INTERVAL.is_power_of_two());

/// Why a connection could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    /// The configuration is unusable.
    #[error("configuration: {0}")]
    Config(#[source] ConfigError),
    /// The fabric refused a setup call.
    #[error("fabric: {0}")]
    Fabric(#[source] FabricError),
    /// A pool could not be created.
    #[error("pool: {0}")]
    Pool(#[source] PoolError),
    /// The core could not be built.
    #[error("core: {0}")]
    Core(#[source] CoreError),
    /// The peer refused or dropped the connection before it was established.
    #[error("connection closed before it was established")]
    NotEstablished,
    /// The connection was not established within this time.
    #[error("connection not established within {0:?}")]
    ConnectTimeout(core::time::Duration),
}
