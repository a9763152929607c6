//! The cross-thread face of one poller: what application threads and other pollers hold to
//! hand it work.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::mailbox::{Mailbox, SendError, SendErrorKind};
use crate::stats::{PollerStats, SharedCounters};
use crate::task::{Task, TaskId};

/// State shared between one poller thread and its handles.
pub(crate) struct Shared<M> {
    pub(crate) index: u32,
    pub(crate) core: usize,
    pub(crate) mailbox: Mailbox<M>,
    pub(crate) counters: SharedCounters,
    pub(crate) exited: AtomicBool,
}

impl<M> Shared<M> {
    pub(crate) fn new(
        index: u32,
        core: usize,
        mailbox_capacity: usize,
        max_tasks: usize,
    ) -> std::io::Result<Self> {
        Ok(Shared {
            index,
            core,
            mailbox: Mailbox::new(mailbox_capacity, max_tasks)?,
            counters: SharedCounters::default(),
            exited: AtomicBool::new(false),
        })
    }
}

/// Marks the poller closed and exited however its thread ends, panics included, so senders
/// get [`SendErrorKind::Closed`] instead of filling a mailbox nobody drains.
pub(crate) struct ExitGuard<M>(pub(crate) Arc<Shared<M>>);

impl<M> Drop for ExitGuard<M> {
    fn drop(&mut self) {
        self.0.mailbox.close();
        self.0.exited.store(true, Ordering::Release);
    }
}

/// A cheap, cloneable, thread-safe handle to one poller. Every method is non-blocking and
/// allocation-free; a refused value comes back in the error.
pub struct PollerHandle<M> {
    pub(crate) shared: Arc<Shared<M>>,
}

impl<M> Clone for PollerHandle<M> {
    fn clone(&self) -> Self {
        PollerHandle {
            shared: self.shared.clone(),
        }
    }
}

impl<M> std::fmt::Debug for PollerHandle<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PollerHandle")
            .field("index", &self.shared.index)
            .field("core", &self.shared.core)
            .finish_non_exhaustive()
    }
}

impl<M: Send + 'static> PollerHandle<M> {
    /// This poller's index in its group.
    pub fn index(&self) -> usize {
        self.shared.index as usize
    }

    /// The core this poller was asked to run on (see
    /// [`PollerGroup::pin_reports`](crate::PollerGroup::pin_reports) for whether it is
    /// actually pinned there).
    pub fn core(&self) -> usize {
        self.shared.core
    }

    /// Queues `msg` for task `to`, delivered through [`Task::on_message`]. Messages from one
    /// sending thread arrive in the order sent. If `to` has been removed by the time the
    /// message is handled, the message is dropped and counted in
    /// [`PollerStats::stale_commands`].
    #[inline]
    pub fn send(&self, to: TaskId, msg: M) -> Result<(), SendError<M>> {
        if to.poller != self.shared.index {
            return Err(SendError::new(SendErrorKind::WrongPoller, msg));
        }
        self.shared.mailbox.send(to.key, msg)
    }

    /// Queues `task` for installation and returns its id at once; messages sent to that id
    /// after this call are handled after the task is installed. The task runs until removed
    /// or until shutdown.
    pub fn add_task(&self, task: Box<dyn Task<M>>) -> Result<TaskId, SendError<Box<dyn Task<M>>>> {
        self.shared.mailbox.add_task(self.shared.index, task)
    }

    /// Queues removal of task `id`: commands queued for it before this one are still
    /// delivered, then [`Task::on_remove`] runs and the task is dropped on the poller thread.
    pub fn remove_task(&self, id: TaskId) -> Result<(), SendError<TaskId>> {
        if id.poller != self.shared.index {
            return Err(SendError::new(SendErrorKind::WrongPoller, id));
        }
        self.shared.mailbox.remove_task(id)
    }

    /// The poller's most recently published counters.
    pub fn stats(&self) -> PollerStats {
        self.shared.counters.snapshot()
    }

    /// False once the poller thread has finished (after shutdown, or if a task panicked).
    pub fn is_running(&self) -> bool {
        !self.shared.exited.load(Ordering::Acquire)
    }
}
