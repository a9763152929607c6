//! Starting, addressing and stopping a set of pinned pollers.

use std::fmt;
use std::io;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::config::{ConfigError, PollerConfig};
use crate::handle::{ExitGuard, PollerHandle, Shared};
use crate::mailbox::{SendError, SendErrorKind};
use crate::poller::Poller;
use crate::stats::{GroupStats, PollerStats};
use crate::task::{Task, TaskId};

/// Whether a poller thread got the core it was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PinReport {
    /// Poller index in the group.
    pub index: usize,
    /// The core requested for it.
    pub core: usize,
    /// True if the thread's affinity is now exactly that core. False (core absent, outside
    /// the process's cpuset, or affinity unsupported) is not fatal: the poller runs
    /// wherever the scheduler puts it, which is correct but slower and noisier.
    pub pinned: bool,
}

/// Why [`PollerGroup::start`] failed. Pollers already started are stopped again.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The core list was empty.
    #[error("no cores given for pollers")]
    NoCores,
    /// The configuration was rejected.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// Creating a poller's eventfd failed.
    #[error("creating a poller eventfd: {0}")]
    EventFd(#[source] io::Error),
    /// Spawning a poller thread failed.
    #[error("spawning a poller thread: {0}")]
    Spawn(#[source] io::Error),
    /// A poller thread did not report in before `startup_timeout`, or died first.
    #[error("poller {index} did not start before the startup timeout")]
    NotStarted {
        /// The first poller that did not report.
        index: usize,
    },
}

/// A poller that had not stopped by the shutdown deadline. Its thread is still running
/// (typically a task blocked in a callback); keep this to wait for it longer, or drop it
/// to detach the thread.
#[derive(Debug)]
pub struct StuckPoller {
    index: usize,
    core: usize,
    thread: JoinHandle<PollerStats>,
}

impl StuckPoller {
    /// Poller index in the group.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Core it was started on.
    pub fn core(&self) -> usize {
        self.core
    }

    /// Waits until `deadline` for the thread to finish. `Ok` carries its final counters
    /// (`None` if it panicked); `Err` gives the poller back if it is still running.
    pub fn join_until(self, deadline: Instant) -> Result<Option<PollerStats>, StuckPoller> {
        if !wait_finished(&self.thread, deadline) {
            return Err(self);
        }
        Ok(self.thread.join().ok())
    }
}

/// Why [`PollerGroup::shutdown`] was not clean.
#[derive(Debug, thiserror::Error)]
#[error(
    "poller shutdown incomplete: still running {:?}, panicked {:?}",
    stuck_indices(.stuck),
    .panicked
)]
pub struct ShutdownError {
    /// Counters of every poller: final for those that stopped, last published for the rest.
    pub stats: GroupStats,
    /// Pollers still running at the deadline.
    pub stuck: Vec<StuckPoller>,
    /// Pollers whose thread panicked (a task panicked); they stopped, uncleanly.
    pub panicked: Vec<usize>,
}

/// The group indices of `stuck`, for [`ShutdownError`]'s message.
fn stuck_indices(stuck: &[StuckPoller]) -> Vec<usize> {
    stuck.iter().map(|s| s.index).collect()
}

struct Member<M> {
    handle: PollerHandle<M>,
    thread: Option<JoinHandle<PollerStats>>,
}

/// A set of pollers, one thread each, pinned to the cores given at start.
///
/// Dropping the group without [`shutdown`](Self::shutdown) asks every poller to stop and
/// detaches the threads without waiting.
pub struct PollerGroup<M: Send + 'static> {
    members: Vec<Member<M>>,
    pins: Vec<PinReport>,
}

impl<M: Send + 'static> PollerGroup<M> {
    /// Starts one poller per entry of `cores` (poller `i` on `cores[i]`; a core may repeat)
    /// and waits until each has tried to pin itself. A failed pin is reported in
    /// [`pin_reports`](Self::pin_reports), not treated as an error.
    pub fn start(cores: &[usize], config: PollerConfig) -> Result<Self, StartError> {
        if cores.is_empty() {
            return Err(StartError::NoCores);
        }
        config.validate()?;
        let (tx, rx) = mpsc::channel::<(usize, bool)>();
        let mut group = PollerGroup {
            members: Vec::with_capacity(cores.len()),
            pins: Vec::with_capacity(cores.len()),
        };
        for (index, &core) in cores.iter().enumerate() {
            let shared = Arc::new(
                Shared::new(
                    index as u32,
                    core,
                    config.mailbox_capacity,
                    config.max_tasks,
                )
                .map_err(StartError::EventFd)?,
            );
            let thread_shared = shared.clone();
            let thread_config = config.clone();
            let tx = tx.clone();
            let thread = thread::Builder::new()
                .name(format!("{}-{index}", config.thread_name))
                .spawn(move || {
                    let _guard = ExitGuard(thread_shared.clone());
                    let pinned = pin_current_thread(core);
                    let poller = Poller::new(thread_shared, &thread_config);
                    let _ = tx.send((index, pinned));
                    drop(tx);
                    poller.run()
                })
                .map_err(StartError::Spawn)?;
            group.members.push(Member {
                handle: PollerHandle { shared },
                thread: Some(thread),
            });
            group.pins.push(PinReport {
                index,
                core,
                pinned: false,
            });
        }
        drop(tx);
        let deadline = Instant::now() + config.startup_timeout;
        let mut reported = vec![false; cores.len()];
        for _ in 0..cores.len() {
            let wait = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(wait) {
                Ok((index, pinned)) => {
                    reported[index] = true;
                    group.pins[index].pinned = pinned;
                }
                Err(_) => {
                    let index = reported.iter().position(|r| !r).unwrap_or(0);
                    return Err(StartError::NotStarted { index });
                }
            }
        }
        Ok(group)
    }

    /// Number of pollers.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Always false for a started group (start needs at least one core); here because
    /// [`len`](Self::len) is.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Handle of poller `index`; clone it to give other threads or tasks.
    pub fn handle(&self, index: usize) -> Option<&PollerHandle<M>> {
        self.members.get(index).map(|m| &m.handle)
    }

    /// All handles, in poller order.
    pub fn handles(&self) -> impl Iterator<Item = &PollerHandle<M>> {
        self.members.iter().map(|m| &m.handle)
    }

    /// Pinning outcome of each poller, in poller order.
    pub fn pin_reports(&self) -> &[PinReport] {
        &self.pins
    }

    /// Sends `msg` to task `to`, on whichever poller runs it.
    pub fn send(&self, to: TaskId, msg: M) -> Result<(), SendError<M>> {
        match self.handle(to.poller()) {
            Some(h) => h.send(to, msg),
            None => Err(SendError::new(SendErrorKind::WrongPoller, msg)),
        }
    }

    /// Adds `task` to poller `index`.
    pub fn add_task(
        &self,
        index: usize,
        task: Box<dyn Task<M>>,
    ) -> Result<TaskId, SendError<Box<dyn Task<M>>>> {
        match self.handle(index) {
            Some(h) => h.add_task(task),
            None => Err(SendError::new(SendErrorKind::WrongPoller, task)),
        }
    }

    /// Latest published counters of every poller.
    pub fn stats(&self) -> GroupStats {
        GroupStats {
            pollers: self.handles().map(|h| h.stats()).collect(),
        }
    }

    /// Asks every poller to stop and waits until `deadline` for them. Each poller first
    /// handles the commands already in its mailbox, then calls [`Task::on_remove`] on every
    /// task, then exits. New sends are refused with [`SendErrorKind::Closed`] from the
    /// moment shutdown starts (a send racing with it may be accepted and then dropped
    /// undelivered).
    ///
    /// `Err` lists the pollers still running at the deadline (their threads cannot be
    /// killed; see [`StuckPoller`]) and those that panicked.
    pub fn shutdown(mut self, deadline: Instant) -> Result<GroupStats, ShutdownError> {
        for m in &self.members {
            m.handle.shared.mailbox.close();
        }
        let members = std::mem::take(&mut self.members);
        let mut stats = vec![PollerStats::default(); members.len()];
        let mut panicked = Vec::new();
        let mut pending: Vec<(usize, PollerHandle<M>, JoinHandle<PollerStats>)> = Vec::new();
        for (index, m) in members.into_iter().enumerate() {
            if let Some(t) = m.thread {
                pending.push((index, m.handle, t));
            }
        }
        loop {
            let mut i = 0;
            while i < pending.len() {
                if pending[i].2.is_finished() {
                    let (index, handle, thread) = pending.swap_remove(i);
                    match thread.join() {
                        Ok(s) => stats[index] = s,
                        Err(_) => {
                            stats[index] = handle.stats();
                            panicked.push(index);
                        }
                    }
                } else {
                    i += 1;
                }
            }
            let now = Instant::now();
            if pending.is_empty() || now >= deadline {
                break;
            }
            thread::sleep((deadline - now).min(Duration::from_millis(1)));
        }
        panicked.sort_unstable();
        let mut stuck: Vec<StuckPoller> = pending
            .into_iter()
            .map(|(index, handle, thread)| {
                stats[index] = handle.stats();
                StuckPoller {
                    index,
                    core: handle.core(),
                    thread,
                }
            })
            .collect();
        stuck.sort_by_key(|s| s.index);
        let stats = GroupStats { pollers: stats };
        if stuck.is_empty() && panicked.is_empty() {
            Ok(stats)
        } else {
            Err(ShutdownError {
                stats,
                stuck,
                panicked,
            })
        }
    }
}

impl<M: Send + 'static> fmt::Debug for PollerGroup<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PollerGroup")
            .field("pins", &self.pins)
            .finish_non_exhaustive()
    }
}

impl<M: Send + 'static> Drop for PollerGroup<M> {
    fn drop(&mut self) {
        for m in &self.members {
            m.handle.shared.mailbox.close();
        }
    }
}

/// Pins the calling thread to `core`; false if that is impossible. core_affinity indexes a
/// fixed-size `cpu_set_t` without a bounds check (it panics for ids >= CPU_SETSIZE), so
/// out-of-range ids, which come straight from the user, are refused here first.
fn pin_current_thread(core: usize) -> bool {
    let limit = usize::try_from(libc::CPU_SETSIZE).unwrap_or(0);
    core < limit && core_affinity::set_for_current(core_affinity::CoreId { id: core })
}

fn wait_finished<T>(thread: &JoinHandle<T>, deadline: Instant) -> bool {
    loop {
        if thread.is_finished() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        thread::sleep((deadline - now).min(Duration::from_millis(1)));
    }
}
