//! The poller's monotonic clock, in nanoseconds since the poller started.
//!
//! Timers store plain `u64` nanoseconds so the heap compares integers and "is anything due"
//! is one comparison; `Instant` appears only at the API edge.

use std::time::{Duration, Instant};

use crate::timer::{Nanos, NEVER};

pub(crate) struct Clock {
    epoch: Instant,
}

impl Clock {
    pub(crate) fn new() -> Self {
        Clock {
            epoch: Instant::now(),
        }
    }

    /// Reads the monotonic clock (a vDSO call, no syscall on Linux).
    #[inline]
    pub(crate) fn now_ns(&self) -> Nanos {
        self.nanos(Instant::now())
    }

    /// `t` as nanoseconds since the epoch: instants before the epoch map to 0 (already due)
    /// and far-future ones stop just short of [`NEVER`], which means "no timer".
    pub(crate) fn nanos(&self, t: Instant) -> Nanos {
        let ns = t.saturating_duration_since(self.epoch).as_nanos();
        u64::try_from(ns).unwrap_or(NEVER).min(NEVER - 1)
    }

    pub(crate) fn instant(&self, ns: Nanos) -> Instant {
        self.epoch + Duration::from_nanos(ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_round_trip_and_clamp() {
        let clock = Clock::new();
        let later = clock.instant(5_000);
        assert_eq!(clock.nanos(later), 5_000);
        let before = clock.epoch.checked_sub(Duration::from_secs(1));
        if let Some(before) = before {
            assert_eq!(clock.nanos(before), 0);
        }
        assert!(clock.now_ns() < NEVER);
    }
}
