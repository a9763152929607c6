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

/// Completions reaped per poll. Two per call in flight (its Send's and its reply's
/// receive on a requester; the call's receive and its reply's Send on a responder), so
/// 64 takes a whole depth-32 window in one poll: a batch of 32 held 16 calls' worth
/// (the send side is reaped first), and a driver loop at depth 32 made twice the polls,
/// each with its fixed cost (`perf/insns.sh` rate region 3262 -> 3232 instructions per
/// call, 11 -> 16 calls per turn; `engine_credits::one_poll_takes_a_full_depth_of_replies_shm`).
/// A [`Completion`](crate::fabric::Completion) is a few dozen octets: 64 of them are a
/// few KiB per driver.
pub(crate) const CQ_BATCH: usize = 64;

/// Once a connection is up, its connection manager is polled every this many polls:
/// CM progress can cost a system call (shm reads a socket), and a disconnect shows up
/// on the data path anyway (every posted request is flushed).
pub(crate) const CM_POLL_INTERVAL: u32 = 64;

/// ... and, by [`CmPacer`], at most once per this much time while the CM has news: on
/// shm a CM poll reads a socket (a system call: about a microsecond on one VM, ten on
/// another), and 64 polls of a busy connection take only a few microseconds, so
/// counting polls alone spent a tenth of a busy loop in system calls.
pub(crate) const CM_POLL_PERIOD: core::time::Duration = core::time::Duration::from_micros(50);

/// ... doubling after each CM poll that found nothing, up to this: a quiet established
/// connection's CM costs one system call per millisecond, so it no longer shows in a
/// round trip's tail (on a VM whose system calls took ten microseconds, one round trip
/// in a hundred met one at a 50 us period: RPC p99 11 us against 3.5 us without). A
/// disconnect or a new connection request to a quiet listener is noticed up to this much
/// later (the data path sees a disconnect sooner: every posted request is flushed; a
/// connection still connecting polls its CM every poll).
pub(crate) const CM_POLL_PERIOD_MAX: core::time::Duration = core::time::Duration::from_micros(1024);

/// Checks ([`CM_POLL_INTERVAL`] polls apart) in a row that may skip the CM while the
/// clock stands still (a simulation, a driver that passes the same `now`): the CM is
/// still polled every 1024 polls then.
const CM_MAX_SKIPS: u32 = 15;

/// When an established connection's connection manager is due: every
/// [`CM_POLL_INTERVAL`] polls, once its period has passed since the last time (or after
/// [`CM_MAX_SKIPS`] skips under a clock that stands still). The period starts at
/// [`CM_POLL_PERIOD`], doubles after each CM poll that found nothing
/// ([`CmPacer::found`]) up to [`CM_POLL_PERIOD_MAX`], and drops back when one found an
/// event. Reads no clock: the poll's `now` is the driver's.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CmPacer {
    polls: u32,
    skips: u32,
    /// When the CM is next due by time: the period after it last was.
    next: Option<std::time::Instant>,
    /// The `now` of the last check, to tell a clock that stands still.
    last: Option<std::time::Instant>,
    /// Doublings of [`CM_POLL_PERIOD`] in the current period.
    backoff: u32,
}

/// Doublings from [`CM_POLL_PERIOD`] that reach at least [`CM_POLL_PERIOD_MAX`].
const CM_MAX_BACKOFF: u32 = 5;
const _: () =
    assert!(CM_POLL_PERIOD.as_micros() << CM_MAX_BACKOFF >= CM_POLL_PERIOD_MAX.as_micros());

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

    /// What the CM poll that [`CmPacer::due`] asked for found: `events` handled. None
    /// doubles the period (up to [`CM_POLL_PERIOD_MAX`]); any brings it back to
    /// [`CM_POLL_PERIOD`].
    #[inline]
    pub(crate) fn found(&mut self, events: usize) {
        self.backoff = if events > 0 {
            0
        } else {
            (self.backoff + 1).min(CM_MAX_BACKOFF)
        };
    }

    fn period(&self) -> core::time::Duration {
        (CM_POLL_PERIOD * (1 << self.backoff)).min(CM_POLL_PERIOD_MAX)
    }

    #[inline(never)]
    fn due_by_time(&mut self, now: std::time::Instant) -> bool {
        // Compared with the time it is next due, set when it was last due: a comparison
        // of two instants per check, not a subtraction. Skips are counted only while the
        // clock stands still: with a moving clock the period alone decides (counting
        // checks there polled the CM every thousand polls, tens of microseconds).
        let still = self.last == Some(now);
        self.last = Some(now);
        if !still {
            self.skips = 0;
        }
        if self.skips < CM_MAX_SKIPS && self.next.is_some_and(|t| now < t) {
            self.skips += u32::from(still);
            return false;
        }
        self.skips = 0;
        self.next = now.checked_add(self.period());
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
    /// advancing `step` per poll, the CM never finding anything.
    fn due_polls(polls: u32, step: Duration) -> Vec<u32> {
        due_polls_finding(polls, step, 0)
    }

    /// Like [`due_polls`], each due CM poll finding `events`.
    fn due_polls_finding(polls: u32, step: Duration, events: usize) -> Vec<u32> {
        let mut p = CmPacer::default();
        let t0 = Instant::now();
        (1..=polls)
            .filter(|&i| {
                let due = p.due(t0 + step * i);
                if due {
                    p.found(events);
                }
                due
            })
            .collect()
    }

    #[test]
    fn a_slow_loop_polls_the_cm_every_interval() {
        // 64 polls of 1 us each are more than the period: every 64th poll is due while
        // the CM has news.
        let due = due_polls_finding(256, Duration::from_micros(1), 1);
        assert_eq!(due, vec![64, 128, 192, 256]);
    }

    #[test]
    fn a_fast_loop_polls_the_cm_once_per_period() {
        // 64 polls of 100 ns are 6.4 us: only every 8th check (51.2 us) is due.
        let due = due_polls_finding(2048, Duration::from_nanos(100), 1);
        assert_eq!(due, vec![64, 576, 1088, 1600]);
    }

    #[test]
    fn a_quiet_cm_is_polled_once_per_millisecond() {
        // Polls of 100 ns, the CM never finding anything: the gaps double from 51.2 us
        // until they reach the longest period, and stay there.
        let due = due_polls(100_000, Duration::from_nanos(100));
        let gaps: Vec<u32> = due.windows(2).map(|w| w[1] - w[0]).collect();
        // 50, 100, 200, 400, 800 us, then 1024 us (10,240 polls) for good.
        assert_eq!(&gaps[..6], &[512, 1024, 2048, 4032, 8000, 10_240]);
        assert!(gaps[6..].iter().all(|&g| g == 10_240), "{gaps:?}");
    }

    #[test]
    fn news_brings_the_short_period_back() {
        let mut p = CmPacer::default();
        let t0 = Instant::now();
        let step = Duration::from_nanos(100);
        let mut due = Vec::new();
        for i in 1..=60_000u32 {
            if p.due(t0 + step * i) {
                // Nothing for the first 40,000 polls, then an event at every poll.
                p.found(usize::from(i > 40_000));
                due.push(i);
            }
        }
        let after: Vec<u32> = due.iter().copied().filter(|&i| i > 40_000).collect();
        let gaps: Vec<u32> = after.windows(2).map(|w| w[1] - w[0]).collect();
        // The first poll that finds news was set a long period ahead; from it on the
        // period is 51.2 us again.
        assert_eq!(gaps[0], 10_240, "{gaps:?}");
        assert!(
            gaps.len() > 2 && gaps[1..].iter().all(|&g| g == 512),
            "{gaps:?}"
        );
    }

    #[test]
    fn a_still_clock_still_polls_the_cm() {
        // A simulation's clock that does not move: every (CM_MAX_SKIPS + 1)th check.
        let due = due_polls(4096, Duration::ZERO);
        assert_eq!(due, vec![64, 1088, 2112, 3136]);
    }
}
