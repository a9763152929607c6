//! Helpers shared by the poller integration tests. Every wait has a deadline; a missed one
//! fails the test instead of hanging it.
#![allow(dead_code)]

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use rpcrdma_poller::{IdlePolicy, PollerConfig, PollerGroup};

/// Far longer than anything here should take; only reached when something is broken.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// Parks quickly (the machine has 2 shared cores) and publishes counters often.
pub fn parking_config() -> PollerConfig {
    PollerConfig {
        idle: IdlePolicy {
            spin_iters: 16,
            pause_iters: 16,
            yield_iters: 4,
            park: Some(Duration::from_millis(20)),
        },
        mailbox_capacity: 64,
        max_tasks: 16,
        max_timers: 64,
        stats_interval: 16,
        ..PollerConfig::default()
    }
}

/// Like [`parking_config`] but parks for up to a minute at a time, so anything that
/// happens within [`PATIENCE`] must have been a real wake-up, not a park timeout.
pub fn long_park_config() -> PollerConfig {
    let mut c = parking_config();
    c.idle.park = Some(Duration::from_secs(60));
    c
}

/// Polls `cond` every millisecond until it holds; panics with `what` after [`PATIENCE`].
pub fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Receives one value or panics naming `what` after [`PATIENCE`].
pub fn recv<T>(rx: &Receiver<T>, what: &str) -> T {
    match rx.recv_timeout(PATIENCE) {
        Ok(v) => v,
        Err(RecvTimeoutError::Timeout) => panic!("timed out waiting for: {what}"),
        Err(RecvTimeoutError::Disconnected) => panic!("sender gone while waiting for: {what}"),
    }
}

/// Shuts down and insists it was clean.
pub fn stop<M: Send + 'static>(group: PollerGroup<M>) -> rpcrdma_poller::GroupStats {
    match group.shutdown(Instant::now() + PATIENCE) {
        Ok(stats) => stats,
        Err(e) => panic!("unclean shutdown: {e}"),
    }
}
