//! The unit of work a poller runs, and the context it hands to it.

use std::fmt;
use std::os::fd::RawFd;
use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::timer::{Nanos, TimerError, TimerHeap, TimerId, NEVER};

/// Something a poller polls run-to-completion on its thread: a completion queue, a
/// connection, a CM event source, a protocol timer owner.
///
/// `M` is the message type of the [`PollerGroup`](crate::PollerGroup) it runs in: what
/// application threads and other tasks send it (an RPC to submit, a connection event).
///
/// Every method runs on the poller's thread and must not block: a task that blocks stalls
/// every other task on that poller (and makes shutdown miss its deadline). A panic in a
/// task ends its poller thread; the poller's mailbox then refuses sends and shutdown
/// reports it.
pub trait Task<M>: Send {
    /// Do whatever work is ready and return how many units were done (completions reaped,
    /// requests handled). Zero means "nothing to do", and a poller whose tasks all return
    /// zero follows its idle policy.
    fn poll(&mut self, ctx: &mut PollCtx<'_>) -> usize;

    /// A message addressed to this task arrived through the poller's mailbox. The default
    /// drops it.
    fn on_message(&mut self, msg: M, ctx: &mut PollCtx<'_>) {
        let _ = (msg, ctx);
    }

    /// A timer this task armed with `token` is due.
    fn on_timer(&mut self, token: u64, ctx: &mut PollCtx<'_>) {
        let _ = (token, ctx);
    }

    /// The poller is about to park. Return `false` to veto (work arrived). Tasks backed by
    /// an event source arm its notification here (e.g. request a CQ event), then re-check
    /// for work that slipped in before arming: the standard arm-then-recheck pattern.
    fn before_park(&mut self) -> bool {
        true
    }

    /// A descriptor that becomes readable when this task has work; a parked poller wakes on
    /// it. Queried once, when the task is added. The task must consume the readiness in
    /// [`poll`](Self::poll) (e.g. read the completion channel), or the poller will wake
    /// straight back up every time it parks.
    fn wake_fd(&self) -> Option<RawFd> {
        None
    }

    /// Last call before the task is dropped: it was removed (by request, by itself, or at
    /// shutdown). A task that should live on elsewhere (a connection migrating to another
    /// poller) can move its state out here. Its timers are already cancelled.
    fn on_remove(&mut self) {}
}

/// Slot index plus generation inside one poller; the generation makes ids of removed tasks
/// stale instead of aliasing the slot's next occupant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct TaskKey {
    pub(crate) slot: u32,
    pub(crate) gen: u32,
}

/// Names a task on a particular poller. Returned by
/// [`PollerHandle::add_task`](crate::PollerHandle::add_task); messages sent to it after the
/// task is removed are dropped and counted as stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TaskId {
    pub(crate) poller: u32,
    pub(crate) key: TaskKey,
}

impl TaskId {
    /// Index of the poller (in its group) that runs this task.
    pub fn poller(&self) -> usize {
        self.poller as usize
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "task {}.{} on poller {}",
            self.key.slot, self.key.gen, self.poller
        )
    }
}

/// What a task may do from inside a callback: read the loop's clock, arm and cancel timers,
/// and ask to be removed. Built on the stack for each call; costs nothing to create.
pub struct PollCtx<'a> {
    pub(crate) timers: &'a mut TimerHeap,
    pub(crate) clock: &'a Clock,
    /// Per-iteration clock cache: [`NEVER`] until first read, so the clock is read at most
    /// once per loop iteration however many tasks ask.
    pub(crate) now: &'a mut Nanos,
    pub(crate) task: TaskId,
    pub(crate) remove: bool,
}

impl PollCtx<'_> {
    /// The calling task's id.
    pub fn task_id(&self) -> TaskId {
        self.task
    }

    /// Index of the poller running this task.
    pub fn poller_index(&self) -> usize {
        self.task.poller()
    }

    /// The current loop iteration's time: read once per iteration (lazily) and shared by
    /// every task, so it may lag the real clock by one iteration's work.
    pub fn now(&mut self) -> Instant {
        let ns = self.now_ns();
        self.clock.instant(ns)
    }

    pub(crate) fn now_ns(&mut self) -> Nanos {
        if *self.now == NEVER {
            *self.now = self.clock.now_ns();
        }
        *self.now
    }

    /// Arms a timer that calls this task's [`Task::on_timer`] with `token` at or after
    /// `deadline` (immediately, next iteration, if already past).
    pub fn arm_timer_at(&mut self, deadline: Instant, token: u64) -> Result<TimerId, TimerError> {
        let at = self.clock.nanos(deadline);
        self.timers.arm(at, self.task.key, token)
    }

    /// Arms a timer `delay` after [`now`](Self::now).
    pub fn arm_timer_after(&mut self, delay: Duration, token: u64) -> Result<TimerId, TimerError> {
        let delay = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
        // NEVER - 1 at most: a saturated deadline must still be a real, cancellable timer.
        let at = self.now_ns().saturating_add(delay).min(NEVER - 1);
        self.timers.arm(at, self.task.key, token)
    }

    /// Cancels a timer armed on this poller. Returns false if it already fired or was
    /// cancelled, so callers can tell whether the timer's work still needs doing.
    pub fn cancel_timer(&mut self, id: TimerId) -> bool {
        self.timers.cancel(id)
    }

    /// Number of timers armed on this poller (all tasks).
    pub fn timers_armed(&self) -> usize {
        self.timers.len()
    }

    /// Removes the calling task once this callback returns; [`Task::on_remove`] follows.
    pub fn remove_self(&mut self) {
        self.remove = true;
    }
}
