//! rpcrdma-poller: pinned busy-polling threads with an idle policy, cross-core mailboxes,
//! timers and clean shutdown. Knows nothing of RDMA.
//!
//! A [`PollerGroup`] starts one thread per requested core, pins it there
//! (a failed pin is reported in [`PollerGroup::pin_reports`], not fatal) and runs a loop
//! over the [`Task`]s it owns: completion queues, connections, event sources. Each loop
//! iteration handles a batch of mailbox commands, fires due timers and polls every task
//! once, run-to-completion. When nothing did work the [`IdlePolicy`] decides whether to
//! spin, pause, yield or park; a parked poller wakes through an eventfd when its mailbox
//! gets work, when shutdown starts, at its next timer deadline, or on a task's wake fd.
//!
//! Other threads reach a poller through a [`PollerHandle`]: send a message to a task, add a
//! task, remove one. The mailbox is a bounded lock-free ring; a full one returns the value
//! in a [`SendError`] instead of blocking, and nothing on that path allocates.
//!
//! Tasks arm and cancel timers through their [`PollCtx`]. Timers sit in a preallocated
//! heap whose earliest deadline is cached: a poller with no timer armed pays one integer
//! comparison per iteration, and one with timers armed reads the clock once every
//! `PollerConfig::timer_check_interval` iterations (never more than once per iteration).
//!
//! ```
//! use std::time::{Duration, Instant};
//! use rpcrdma_poller::{IdlePolicy, PollCtx, PollerConfig, PollerGroup, Task};
//!
//! struct Echo(std::sync::mpsc::Sender<u32>);
//! impl Task<u32> for Echo {
//!     fn poll(&mut self, _: &mut PollCtx<'_>) -> usize { 0 }
//!     fn on_message(&mut self, msg: u32, _: &mut PollCtx<'_>) {
//!         let _ = self.0.send(msg * 2);
//!     }
//! }
//!
//! let config = PollerConfig {
//!     idle: IdlePolicy::parking(Duration::from_millis(50)),
//!     ..PollerConfig::default()
//! };
//! let group = PollerGroup::<u32>::start(&[0], config)?;
//! let (tx, rx) = std::sync::mpsc::channel();
//! let id = group.handle(0).unwrap().add_task(Box::new(Echo(tx)))?;
//! group.send(id, 21)?;
//! assert_eq!(rx.recv_timeout(Duration::from_secs(10))?, 42);
//! group.shutdown(Instant::now() + Duration::from_secs(10))?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]

mod clock;
mod config;
mod group;
mod handle;
mod idle;
mod mailbox;
mod poller;
mod ring;
mod stats;
mod task;
mod timer;
mod wake;

pub use config::{ConfigError, ConfigField, PollerConfig};
pub use group::{PinReport, PollerGroup, ShutdownError, StartError, StuckPoller};
pub use handle::PollerHandle;
pub use idle::IdlePolicy;
pub use mailbox::{SendError, SendErrorKind};
pub use stats::{GroupStats, PollerStats};
pub use task::{PollCtx, Task, TaskId};
pub use timer::{TimerError, TimerId};
