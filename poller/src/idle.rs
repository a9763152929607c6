//! What a poller does with a loop iteration in which no task did any work.

use std::time::Duration;

/// Escalating back-off for idle loop iterations: `spin_iters` plain re-polls, then
/// `pause_iters` iterations each ending in a CPU pause hint, then `yield_iters` iterations
/// each ending in `sched_yield`, then (if `park` is set) sleeping until woken or for at most
/// the given duration. Any iteration that does work resets the count.
///
/// With `park: None` the poller never sleeps: after the configured stages it keeps repeating
/// the last non-empty one (yield, else pause, else spin). The default is pure busy polling
/// ([`IdlePolicy::busy_poll`]), which owns its core; on a shared machine, or in tests, use a
/// policy that parks.
///
/// A parked poller wakes when its mailbox gets work, when shutdown is requested, when its
/// next timer is due, or when a task's [wake fd](crate::Task::wake_fd) becomes readable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdlePolicy {
    /// Idle iterations that simply poll again.
    pub spin_iters: u32,
    /// Further idle iterations that end with `core::hint::spin_loop()`.
    pub pause_iters: u32,
    /// Further idle iterations that end with `std::thread::yield_now()`.
    pub yield_iters: u32,
    /// After the stages above, park for at most this long (must be non-zero); `None` never
    /// parks.
    pub park: Option<Duration>,
}

impl IdlePolicy {
    /// Never sleeps, never yields: lowest latency, one core fully used per poller.
    pub const fn busy_poll() -> Self {
        IdlePolicy {
            spin_iters: 0,
            pause_iters: 0,
            yield_iters: 0,
            park: None,
        }
    }

    /// Spins briefly, then parks for at most `max` at a time. Suits tests, shared machines
    /// and mostly idle endpoints.
    pub const fn parking(max: Duration) -> Self {
        IdlePolicy {
            spin_iters: 64,
            pause_iters: 256,
            yield_iters: 16,
            park: Some(max),
        }
    }

    /// The action for the `idle`-th consecutive idle iteration (1-based).
    pub(crate) fn step(&self, idle: u64) -> IdleStep {
        let spin = u64::from(self.spin_iters);
        let pause = spin + u64::from(self.pause_iters);
        let yld = pause + u64::from(self.yield_iters);
        if idle <= spin {
            IdleStep::Spin
        } else if idle <= pause {
            IdleStep::Pause
        } else if idle <= yld {
            IdleStep::Yield
        } else if let Some(max) = self.park {
            IdleStep::Park(max)
        } else if self.yield_iters > 0 {
            IdleStep::Yield
        } else if self.pause_iters > 0 {
            IdleStep::Pause
        } else {
            IdleStep::Spin
        }
    }
}

impl Default for IdlePolicy {
    /// [`IdlePolicy::busy_poll`].
    fn default() -> Self {
        IdlePolicy::busy_poll()
    }
}

/// One idle action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IdleStep {
    Spin,
    Pause,
    Yield,
    Park(Duration),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_escalate_in_order() {
        let p = IdlePolicy {
            spin_iters: 2,
            pause_iters: 1,
            yield_iters: 2,
            park: Some(Duration::from_millis(5)),
        };
        let steps: Vec<IdleStep> = (1..=7).map(|n| p.step(n)).collect();
        use IdleStep::*;
        let park = Park(Duration::from_millis(5));
        assert_eq!(steps, vec![Spin, Spin, Pause, Yield, Yield, park, park]);
    }

    #[test]
    fn without_park_the_last_stage_repeats() {
        let yielding = IdlePolicy {
            spin_iters: 1,
            pause_iters: 1,
            yield_iters: 1,
            park: None,
        };
        assert_eq!(yielding.step(1_000_000), IdleStep::Yield);
        let pausing = IdlePolicy {
            yield_iters: 0,
            ..yielding
        };
        assert_eq!(pausing.step(1_000_000), IdleStep::Pause);
        assert_eq!(IdlePolicy::busy_poll().step(u64::MAX), IdleStep::Spin);
    }

    #[test]
    fn huge_stage_counts_do_not_overflow() {
        let p = IdlePolicy {
            spin_iters: u32::MAX,
            pause_iters: u32::MAX,
            yield_iters: u32::MAX,
            park: Some(Duration::from_secs(1)),
        };
        assert_eq!(p.step(u64::from(u32::MAX) * 3), IdleStep::Yield);
        assert_eq!(
            p.step(u64::from(u32::MAX) * 3 + 1),
            IdleStep::Park(Duration::from_secs(1))
        );
    }
}
