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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError {
    /// A size that must be at least 1 was 0.
    Zero {
        /// The offending field.
        field: &'static str,
    },
    /// A size too large for the poller's 32-bit indices (or for a power-of-two ring).
    TooLarge {
        /// The offending field.
        field: &'static str,
        /// The largest accepted value.
        max: usize,
    },
    /// `idle.park` was `Some(Duration::ZERO)`, which would spin through syscalls.
    ZeroPark,
    /// `thread_name` contains a NUL byte, which no OS thread name can hold.
    ThreadName,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Zero { field } => write!(f, "poller config: {field} must be at least 1"),
            ConfigError::TooLarge { field, max } => {
                write!(f, "poller config: {field} must be at most {max}")
            }
            ConfigError::ZeroPark => {
                write!(
                    f,
                    "poller config: idle.park must be None or a non-zero duration"
                )
            }
            ConfigError::ThreadName => {
                f.write_str("poller config: thread_name contains a NUL byte")
            }
        }
    }
}

impl std::error::Error for ConfigError {}

/// Upper bound for every count: keeps slot indices in `u32` and rings allocatable.
const MAX_COUNT: usize = 1 << 24;

impl PollerConfig {
    /// Checks every field; [`PollerGroup::start`](crate::PollerGroup::start) calls this.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (field, value) in [
            ("mailbox_capacity", self.mailbox_capacity),
            ("max_tasks", self.max_tasks),
            ("max_timers", self.max_timers),
            ("mailbox_batch", self.mailbox_batch),
            ("stats_interval", self.stats_interval as usize),
            ("timer_check_interval", self.timer_check_interval as usize),
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
        assert_eq!(c.validate(), Err(ConfigError::Zero { field: "max_tasks" }));
        let c = PollerConfig {
            mailbox_capacity: usize::MAX,
            ..PollerConfig::default()
        };
        assert!(matches!(
            c.validate(),
            Err(ConfigError::TooLarge {
                field: "mailbox_capacity",
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
