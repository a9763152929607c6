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

/// ... and, by [`CmPacer`], at most once per this much time: on shm a CM poll reads a
/// socket (a system call of about a microsecond), and 64 polls of a busy connection take
/// only a few microseconds, so counting polls alone spent a tenth of a busy loop in
/// system calls. A disconnect is noticed this much later at most (the data path sees it
/// sooner: every posted request is flushed).
pub(crate) const CM_POLL_PERIOD: core::time::Duration = core::time::Duration::from_micros(50);

/// Checks ([`CM_POLL_INTERVAL`] polls apart) that may skip the CM for
/// [`CM_POLL_PERIOD`] in a row: under a clock that stands still (a simulation, a driver
/// that passes the same `now`) the CM is still polled every 1024 polls.
const CM_MAX_SKIPS: u32 = 15;

/// When an established connection's connection manager is due: every
/// [`CM_POLL_INTERVAL`] polls, once [`CM_POLL_PERIOD`] has passed since the last time
/// (or after [`CM_MAX_SKIPS`] skips). Reads no clock: the poll's `now` is the driver's.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CmPacer {
    polls: u32,
    skips: u32,
    /// When the CM is next due by time: [`CM_POLL_PERIOD`] after it last was.
    next: Option<std::time::Instant>,
}

impl CmPacer {
    /// Counts a poll at `now`; true when the CM should be polled in it.
    #[inline]
    pub(crate) fn due(&mut self, now: std::time::Instant) -> bool {
        self.polls = self.polls.wrapping_add(1);
        if self.polls & (CM_POLL_INTERVAL - 1) != 0 {
            return false;
        }
        self.due_by_time(now)
    }

    #[inline(never)]
    fn due_by_time(&mut self, now: std::time::Instant) -> bool {
        // Compared with the time it is next due, set when it was last due: a comparison
        // of two instants per check, not a subtraction.
        if self.skips < CM_MAX_SKIPS && self.next.is_some_and(|t| now < t) {
            self.skips += 1;
            return false;
        }
        self.skips = 0;
        self.next = now.checked_add(CM_POLL_PERIOD);
        true
    }
}

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
#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Polls (1-based) among `polls` in which the pacer says the CM is due, the clock
    /// advancing `step` per poll.
    fn due_polls(polls: u32, step: Duration) -> Vec<u32> {
        let mut p = CmPacer::default();
        let t0 = Instant::now();
        (1..=polls).filter(|&i| p.due(t0 + step * i)).collect()
    }

    #[test]
    fn a_slow_loop_polls_the_cm_every_interval() {
        // 64 polls of 1 us each are more than the period: every 64th poll is due.
        let due = due_polls(256, Duration::from_micros(1));
        assert_eq!(due, vec![64, 128, 192, 256]);
    }

    #[test]
    fn a_fast_loop_polls_the_cm_once_per_period() {
        // 64 polls of 100 ns are 6.4 us: only every 8th check (51.2 us) is due.
        let due = due_polls(2048, Duration::from_nanos(100));
        assert_eq!(due, vec![64, 576, 1088, 1600]);
    }

    #[test]
    fn a_still_clock_still_polls_the_cm() {
        // A simulation's clock that does not move: every (CM_MAX_SKIPS + 1)th check.
        let due = due_polls(4096, Duration::ZERO);
        assert_eq!(due, vec![64, 1088, 2112, 3136]);
    }
}
