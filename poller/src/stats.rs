//! Per-poller counters: kept in plain locals by the poller and published to relaxed atomics
//! every few iterations, before parking and at exit, so readers on other threads never make
//! the hot loop write a shared cache line.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of one poller's counters. Values lag the poller by at most
/// `PollerConfig::stats_interval` iterations while it runs; they are exact after it parks
/// or stops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollerStats {
    /// Loop iterations.
    pub iterations: u64,
    /// Iterations in which something (a message, a timer or a task) did work.
    pub busy_iterations: u64,
    /// Sum of the work counts returned by [`Task::poll`](crate::Task::poll).
    pub work_items: u64,
    /// Mailbox commands handled (messages delivered, tasks added or removed).
    pub messages: u64,
    /// Timers fired.
    pub timers_fired: u64,
    /// Times the poller went to sleep.
    pub parks: u64,
    /// Sleeps ended by a doorbell or wake fd rather than by the timeout.
    pub wakeups: u64,
    /// Commands addressed to a task that no longer exists (dropped).
    pub stale_commands: u64,
    /// Tasks currently running on the poller.
    pub tasks: u64,
}

impl PollerStats {
    /// Fraction of iterations that did work (0 when there were none): a poller near 1.0 is
    /// saturated, one near 0.0 is mostly polling empty queues.
    pub fn busy_fraction(&self) -> f64 {
        if self.iterations == 0 {
            0.0
        } else {
            self.busy_iterations as f64 / self.iterations as f64
        }
    }

    /// Field-wise sum, for group totals.
    pub fn add(&self, other: &PollerStats) -> PollerStats {
        PollerStats {
            iterations: self.iterations + other.iterations,
            busy_iterations: self.busy_iterations + other.busy_iterations,
            work_items: self.work_items + other.work_items,
            messages: self.messages + other.messages,
            timers_fired: self.timers_fired + other.timers_fired,
            parks: self.parks + other.parks,
            wakeups: self.wakeups + other.wakeups,
            stale_commands: self.stale_commands + other.stale_commands,
            tasks: self.tasks + other.tasks,
        }
    }
}

/// Counters of every poller in a group, by poller index.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GroupStats {
    /// One entry per poller, in group order.
    pub pollers: Vec<PollerStats>,
}

impl GroupStats {
    /// All pollers added together.
    pub fn total(&self) -> PollerStats {
        self.pollers
            .iter()
            .fold(PollerStats::default(), |acc, s| acc.add(s))
    }
}

/// The published copy. Only the owning poller writes it, so plain stores suffice.
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct SharedCounters {
    iterations: AtomicU64,
    busy_iterations: AtomicU64,
    work_items: AtomicU64,
    messages: AtomicU64,
    timers_fired: AtomicU64,
    parks: AtomicU64,
    wakeups: AtomicU64,
    stale_commands: AtomicU64,
    tasks: AtomicU64,
}

impl SharedCounters {
    pub(crate) fn publish(&self, s: &PollerStats) {
        let r = Ordering::Relaxed;
        self.iterations.store(s.iterations, r);
        self.busy_iterations.store(s.busy_iterations, r);
        self.work_items.store(s.work_items, r);
        self.messages.store(s.messages, r);
        self.timers_fired.store(s.timers_fired, r);
        self.parks.store(s.parks, r);
        self.wakeups.store(s.wakeups, r);
        self.stale_commands.store(s.stale_commands, r);
        self.tasks.store(s.tasks, r);
    }

    pub(crate) fn snapshot(&self) -> PollerStats {
        let r = Ordering::Relaxed;
        PollerStats {
            iterations: self.iterations.load(r),
            busy_iterations: self.busy_iterations.load(r),
            work_items: self.work_items.load(r),
            messages: self.messages.load(r),
            timers_fired: self.timers_fired.load(r),
            parks: self.parks.load(r),
            wakeups: self.wakeups.load(r),
            stale_commands: self.stale_commands.load(r),
            tasks: self.tasks.load(r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn publish_snapshot_round_trip_and_busy_fraction() {
        let c = SharedCounters::default();
        assert_eq!(c.snapshot().busy_fraction(), 0.0);
        let s = PollerStats {
            iterations: 8,
            busy_iterations: 2,
            work_items: 3,
            messages: 4,
            timers_fired: 5,
            parks: 6,
            wakeups: 7,
            stale_commands: 1,
            tasks: 9,
        };
        c.publish(&s);
        assert_eq!(c.snapshot(), s);
        assert_eq!(s.busy_fraction(), 0.25);
        let g = GroupStats {
            pollers: vec![s, s],
        };
        assert_eq!(g.total().messages, 8);
        assert_eq!(g.total().busy_fraction(), 0.25);
    }
}
