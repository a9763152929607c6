//! Where a driver reads the time. The protocol cores never read a clock (every input
//! carries `now`); the driver in `conn/` asks its device's [`Clock`]. Real providers run
//! on the system's monotonic clock; the `sim` provider on its network's virtual clock,
//! so a seeded simulation is the same run every time, timers included.

use core::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A source of `now`.
#[derive(Clone, Default)]
pub struct Clock(Source);

#[derive(Clone, Default)]
enum Source {
    #[default]
    System,
    Virtual {
        /// The instant virtual time zero maps to (shared by every clock of one network,
        /// so instants from its devices compare).
        base: Instant,
        /// Virtual time since zero.
        read: Arc<dyn Fn() -> Duration + Send + Sync>,
    },
}

impl Clock {
    /// The system's monotonic clock ([`Instant::now`]).
    pub const fn system() -> Clock {
        Clock(Source::System)
    }

    /// A virtual clock: `read` says how much virtual time has passed since `base`.
    pub fn virtual_time(base: Instant, read: Arc<dyn Fn() -> Duration + Send + Sync>) -> Clock {
        Clock(Source::Virtual { base, read })
    }

    /// The current time.
    #[inline]
    pub fn now(&self) -> Instant {
        match &self.0 {
            Source::System => Instant::now(),
            Source::Virtual { base, read } => *base + read(),
        }
    }

    /// True for a virtual clock.
    pub fn is_virtual(&self) -> bool {
        matches!(self.0, Source::Virtual { .. })
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.0 {
            Source::System => "Clock::System",
            Source::Virtual { .. } => "Clock::Virtual",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn virtual_time_moves_only_when_told() {
        let ns = Arc::new(AtomicU64::new(0));
        let base = Instant::now();
        let read = {
            let ns = Arc::clone(&ns);
            Arc::new(move || Duration::from_nanos(ns.load(Ordering::Relaxed)))
        };
        let c = Clock::virtual_time(base, read);
        assert!(c.is_virtual() && !Clock::system().is_virtual());
        assert_eq!(c.now(), base);
        ns.store(1_500, Ordering::Relaxed);
        assert_eq!(c.now() - base, Duration::from_nanos(1_500));
        assert_eq!(c.clone().now(), c.now());
    }
}
