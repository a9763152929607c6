//! Poller configuration and its validation.

use std::fmt;
use std::time::Duration;

use crate::idle::IdlePolicy;

/// Settings shared by every poller of a group. All sizes are fixed at start: nothing grows
/// while the pollers run.
#[derive(Clone, Debug)]
pub struct PollerConfig {
    /// What to do when an iteration finds no work.
    pub idle: IdlePolicy,
    /// Mailbox slots per poller (rounded up to a power of two). A full mailbox refuses new
    /// items rather than blocking.
    pub mailbox_capacity: usize,
    /// Most tasks one poller can hold at once.
    pub max_tasks: usize,
    /// Most timers one poller can have armed at once.
    pub max_timers: usize,
    /// Most mailbox commands handled per loop iteration, so a flood of messages cannot starve
    /// the tasks' own polling.
    pub mailbox_batch: usize,
    /// Publish counters every this many iterations (rounded up to a power of two).
    pub stats_interval: u32,
    /// While timers are armed, compare the clock against the next deadline every this many
    /// iterations (rounded up to a power of two). Reading the clock costs about as much as
    /// several empty loop iterations, so 1 (every iteration) is the most precise and the
    /// default of 8 makes a timer at most 7 iterations late, microseconds at worst.
    pub timer_check_interval: u32,
    /// Thread name prefix; poller `i` is named `{prefix}-{i}`.
    pub thread_name: String,
    /// How long [`PollerGroup::start`](crate::PollerGroup::start) waits for each thread to
    /// report in.
    pub startup_timeout: Duration,
}

impl Default for PollerConfig {
    fn default() -> Self {
        PollerConfig {
            idle: IdlePolicy::busy_poll(),
            mailbox_capacity: 1024,
            max_tasks: 256,
            max_timers: 4096,
            mailbox_batch: 64,
            stats_interval: 1024,
            timer_check_interval: 8,
            thread_name: "rpcrdma-poll".to_string(),
            startup_timeout: Duration::from_secs(10),
        }
    }
}

/// A [`PollerConfig`] value that cannot work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A size that must be at least 1 was 0.
    #[error("poller config: {field} must be at least 1")]
    Zero {
        /// The offending field.
        field: ConfigField,
    },
    /// A size too large for the poller's 32-bit indices (or for a power-of-two ring).
    #[error("poller config: {field} must be at most {max}")]
    TooLarge {
        /// The offending field.
        field: ConfigField,
        /// The largest accepted value.
        max: usize,
    },
    /// `idle.park` was `Some(Duration::ZERO)`, which would spin through syscalls.
    #[error("poller config: idle.park must be None or a non-zero duration")]
    ZeroPark,
    /// `thread_name` contains a NUL byte, which no OS thread name can hold.
    #[error("poller config: thread_name contains a NUL byte")]
    ThreadName,
}

/// A count of [`PollerConfig`] that [`ConfigError::Zero`] or [`ConfigError::TooLarge`]
/// names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ConfigField {
    /// [`PollerConfig::mailbox_capacity`].
    MailboxCapacity,
    /// [`PollerConfig::max_tasks`].
    MaxTasks,
    /// [`PollerConfig::max_timers`].
    MaxTimers,
    /// [`PollerConfig::mailbox_batch`].
    MailboxBatch,
    /// [`PollerConfig::stats_interval`].
    StatsInterval,
    /// [`PollerConfig::timer_check_interval`].
    TimerCheckInterval,
}

impl ConfigField {
    /// The field's name, as [`ConfigError`]'s message gives it.
    pub const fn what(self) -> &'static str {
        match self {
            ConfigField::MailboxCapacity => "mailbox_capacity",
            ConfigField::MaxTasks => "max_tasks",
            ConfigField::MaxTimers => "max_timers",
            ConfigField::MailboxBatch => "mailbox_batch",
            ConfigField::StatsInterval => "stats_interval",
            ConfigField::TimerCheckInterval => "timer_check_interval",
        }
    }
}

impl fmt::Display for ConfigField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.what())
    }
}

/// Upper bound for every count: keeps slot indices in `u32` and rings allocatable.
const MAX_COUNT: usize = 1 << 24;

impl PollerConfig {
    /// Checks every field; [`PollerGroup::start`](crate::PollerGroup::start) calls this.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, value) in [
            (ConfigField::MailboxCapacity, self.mailbox_capacity),
            (ConfigField::MaxTasks, self.max_tasks),
            (ConfigField::MaxTimers, self.max_timers),
            (ConfigField::MailboxBatch, self.mailbox_batch),
            (ConfigField::StatsInterval, self.stats_interval as usize),
            (
                ConfigField::TimerCheckInterval,
                self.timer_check_interval as usize,
            ),
        ] {
            if value == 0 {
                return Err(ConfigError::Zero { field });
            }
            if value > MAX_COUNT {
                return Err(ConfigError::TooLarge {
                    field,
                    max: MAX_COUNT,
                });
            }
        }
        if self.idle.park == Some(Duration::ZERO) {
            return Err(ConfigError::ZeroPark);
        }
        // std's thread builder panics on a NUL in the name; refuse it here instead.
        if self.thread_name.contains('\0') {
            return Err(ConfigError::ThreadName);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid_and_bad_values_are_named() {
        assert_eq!(PollerConfig::default().validate(), Ok(()));
        let c = PollerConfig {
            max_tasks: 0,
            ..PollerConfig::default()
        };
        assert_eq!(
            c.validate(),
            Err(ConfigError::Zero {
                field: ConfigField::MaxTasks
            })
        );
        assert_eq!(
            c.validate().unwrap_err().to_string(),
            "poller config: max_tasks must be at least 1"
        );
        let c = PollerConfig {
            mailbox_capacity: usize::MAX,
            ..PollerConfig::default()
        };
        assert!(matches!(
            c.validate(),
            Err(ConfigError::TooLarge {
                field: ConfigField::MailboxCapacity,
                ..
            })
        ));
        let c = PollerConfig {
            idle: IdlePolicy::parking(Duration::ZERO),
            ..PollerConfig::default()
        };
        assert_eq!(c.validate(), Err(ConfigError::ZeroPark));
        assert!(c.validate().unwrap_err().to_string().contains("idle.park"));
        let c = PollerConfig {
            thread_name: "poll\0er".into(),
            ..PollerConfig::default()
        };
        assert_eq!(c.validate(), Err(ConfigError::ThreadName));
    }
}
