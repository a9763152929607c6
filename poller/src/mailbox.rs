//! A poller's mailbox: the bounded ring other threads push commands into, the doorbell that
//! wakes the poller if it sleeps, and the task-slot allocator that lets a sender learn a new
//! task's id before the poller has even seen it.
//!
//! Sending never blocks and never allocates: a full ring hands the value back inside a
//! [`SendError`]. Commands from one sender are handled in the order sent (the ring is FIFO
//! in claim order), so "add task, then message it" from one thread always works.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;

use crate::ring::Ring;
use crate::task::{Task, TaskId, TaskKey};
use crate::wake::Doorbell;

/// Why a mailbox refused something; the refused value comes back in [`SendError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SendErrorKind {
    /// The mailbox is full: the poller is behind. Retry later or shed load.
    #[error("poller mailbox is full")]
    Full,
    /// The poller is stopping or stopped (or its thread died).
    #[error("poller is shut down")]
    Closed,
    /// Every task slot of the poller is taken (`PollerConfig::max_tasks`).
    #[error("poller has no free task slot")]
    NoTaskSlot,
    /// The task id belongs to another poller than the one asked.
    #[error("task id belongs to a different poller")]
    WrongPoller,
}

/// A refused send, carrying the value back to the sender so nothing is lost or dropped
/// behind its back.
#[derive(thiserror::Error)]
#[error("{kind}")]
pub struct SendError<T> {
    kind: SendErrorKind,
    value: T,
}

impl<T> SendError<T> {
    pub(crate) fn new(kind: SendErrorKind, value: T) -> Self {
        SendError { kind, value }
    }

    /// Why it was refused.
    pub fn kind(&self) -> SendErrorKind {
        self.kind
    }

    /// The value that was not sent.
    pub fn into_inner(self) -> T {
        self.value
    }
}

// Manual impls: the payload need not be Debug (tasks are trait objects).
impl<T> fmt::Debug for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SendError")
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

/// What travels through the ring.
pub(crate) struct Command<M> {
    pub(crate) key: TaskKey,
    pub(crate) body: Body<M>,
}

pub(crate) enum Body<M> {
    Message(M),
    Add(Box<dyn Task<M>>),
    Remove,
}

/// Everything senders share with one poller.
pub(crate) struct Mailbox<M> {
    pub(crate) ring: Arc<Ring<Command<M>>>,
    pub(crate) doorbell: Doorbell,
    closed: AtomicBool,
    /// Free task slots; senders pop one to name a task before the poller installs it.
    pub(crate) free_slots: ArrayQueue<u32>,
    /// Current generation of each slot. The poller bumps it (then frees the slot) on
    /// removal; a sender reads it after taking the slot from `free_slots`.
    pub(crate) slot_gens: Box<[AtomicU32]>,
}

impl<M> Mailbox<M> {
    pub(crate) fn new(capacity: usize, max_tasks: usize) -> std::io::Result<Self> {
        let free_slots = ArrayQueue::new(max_tasks);
        for slot in 0..max_tasks as u32 {
            // Cannot fail: exactly `max_tasks` pushes into a queue of that capacity.
            let _ = free_slots.push(slot);
        }
        Ok(Mailbox {
            ring: Arc::new(Ring::with_capacity(capacity)),
            doorbell: Doorbell::new()?,
            closed: AtomicBool::new(false),
            free_slots,
            slot_gens: (0..max_tasks).map(|_| AtomicU32::new(0)).collect(),
        })
    }

    #[inline]
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed)
    }

    /// Refuse new commands and wake the poller so it notices.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        self.doorbell.ring();
    }

    #[inline]
    pub(crate) fn send(&self, key: TaskKey, msg: M) -> Result<(), SendError<M>> {
        if self.is_closed() {
            return Err(SendError::new(SendErrorKind::Closed, msg));
        }
        self.ring
            .push_with(msg, |m| Command {
                key,
                body: Body::Message(m),
            })
            .map_err(|m| SendError::new(SendErrorKind::Full, m))?;
        self.doorbell.notify();
        Ok(())
    }

    pub(crate) fn add_task(
        &self,
        poller: u32,
        task: Box<dyn Task<M>>,
    ) -> Result<TaskId, SendError<Box<dyn Task<M>>>> {
        if self.is_closed() {
            return Err(SendError::new(SendErrorKind::Closed, task));
        }
        let Some(slot) = self.free_slots.pop() else {
            return Err(SendError::new(SendErrorKind::NoTaskSlot, task));
        };
        // Acquire pairs with the poller's Release store made before it freed the slot.
        let gen = self.slot_gens[slot as usize].load(Ordering::Acquire);
        let key = TaskKey { slot, gen };
        match self.ring.push_with(task, |t| Command {
            key,
            body: Body::Add(t),
        }) {
            Ok(()) => {
                self.doorbell.notify();
                Ok(TaskId { poller, key })
            }
            Err(task) => {
                // Cannot fail: the slot came out of this queue, which has room for all.
                let _ = self.free_slots.push(slot);
                Err(SendError::new(SendErrorKind::Full, task))
            }
        }
    }

    pub(crate) fn remove_task(&self, id: TaskId) -> Result<(), SendError<TaskId>> {
        if self.is_closed() {
            return Err(SendError::new(SendErrorKind::Closed, id));
        }
        self.ring
            .push_with(id, |id| Command {
                key: id.key,
                body: Body::Remove,
            })
            .map_err(|id| SendError::new(SendErrorKind::Full, id))?;
        self.doorbell.notify();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::Consumer;
    use crate::task::PollCtx;

    struct Nop;
    impl Task<u32> for Nop {
        fn poll(&mut self, _: &mut PollCtx<'_>) -> usize {
            0
        }
    }

    #[test]
    fn full_mailbox_returns_message_and_add_returns_task_and_slot() {
        let mb = Mailbox::<u32>::new(2, 1).unwrap();
        let key = TaskKey { slot: 0, gen: 0 };
        mb.send(key, 1).unwrap();
        let id = mb.add_task(3, Box::new(Nop)).unwrap();
        assert_eq!(id.poller(), 3);
        let err = mb.send(key, 2).unwrap_err();
        assert_eq!(err.kind(), SendErrorKind::Full);
        assert_eq!(err.into_inner(), 2);
        // The only slot is taken by the queued add.
        let err = mb.add_task(3, Box::new(Nop)).unwrap_err();
        assert_eq!(err.kind(), SendErrorKind::NoTaskSlot);
        // Drain, free the slot as the poller would, and try again: the ring is now empty
        // so the add fails only if the slot was lost.
        let mut rx = Consumer::new(mb.ring.clone());
        assert!(rx.pop().is_some());
        assert!(rx.pop().is_some());
        mb.slot_gens[0].store(1, Ordering::Release);
        mb.free_slots.push(0).unwrap();
        mb.send(key, 9).unwrap();
        mb.send(key, 9).unwrap();
        let err = mb.add_task(3, Box::new(Nop)).unwrap_err();
        assert_eq!(err.kind(), SendErrorKind::Full);
        assert_eq!(
            mb.free_slots.len(),
            1,
            "a refused add must give its slot back"
        );
        assert!(rx.pop().is_some());
        let id2 = mb.add_task(3, Box::new(Nop)).unwrap();
        assert_eq!(id2.key, TaskKey { slot: 0, gen: 1 });
    }

    #[test]
    fn closed_mailbox_refuses_everything() {
        let mb = Mailbox::<u32>::new(8, 4).unwrap();
        mb.close();
        let key = TaskKey { slot: 0, gen: 0 };
        assert_eq!(mb.send(key, 5).unwrap_err().kind(), SendErrorKind::Closed);
        assert_eq!(
            mb.add_task(0, Box::new(Nop)).unwrap_err().kind(),
            SendErrorKind::Closed
        );
        let id = TaskId { poller: 0, key };
        let err = mb.remove_task(id).unwrap_err();
        assert_eq!(err.to_string(), "poller is shut down");
        assert_eq!(err.into_inner(), id);
    }
}
