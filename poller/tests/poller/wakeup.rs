//! Idle policy and timers on live pollers: a parked poller wakes on a mailbox send, at its
//! next timer deadline and on a task's wake fd; timers fire in order; cancelled ones and
//! those of removed tasks never fire.
//!
//! Pollers here park for up to a minute at a time, so anything observed within the tests'
//! patience was a genuine wake-up, not a park timeout. Nothing asserts on elapsed time.

use crate::common;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::time::Duration;

use common::{long_park_config, recv, stop, wait_until};
use rpcrdma_poller::{PollCtx, PollerGroup, Task, TimerId};

enum Cmd {
    /// Arm a timer `after` from now with `token`.
    Arm {
        after: Duration,
        token: u64,
    },
    /// In one callback, so no timer can fire in between: arm each `(offset from now,
    /// token)`, then cancel the listed tokens (reporting whether each was still pending).
    Script {
        arm: Vec<(Duration, u64)>,
        cancel: Vec<u64>,
    },
    /// Cancel the timer armed with `token`, report whether it was still pending.
    Cancel {
        token: u64,
    },
    /// Arm an already-due timer and remove this task, in one callback.
    ArmAndQuit {
        token: u64,
    },
    Ping(u64),
}

#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Ping(u64),
    Fired(u64),
    Cancelled(u64, bool),
}

struct TimerTask {
    seen: Sender<Seen>,
    armed: Vec<(u64, TimerId)>,
}

impl TimerTask {
    fn new(seen: &Sender<Seen>) -> Box<Self> {
        Box::new(TimerTask {
            seen: seen.clone(),
            armed: Vec::new(),
        })
    }
}

impl TimerTask {
    fn cancel(&mut self, token: u64, ctx: &mut PollCtx<'_>) {
        let Some(&(_, id)) = self.armed.iter().find(|(t, _)| *t == token) else {
            return;
        };
        let first = ctx.cancel_timer(id);
        let second = ctx.cancel_timer(id);
        assert!(!second, "cancelling twice must be a no-op");
        let _ = self.seen.send(Seen::Cancelled(token, first));
    }
}

impl Task<Cmd> for TimerTask {
    fn poll(&mut self, _: &mut PollCtx<'_>) -> usize {
        0
    }

    fn on_message(&mut self, cmd: Cmd, ctx: &mut PollCtx<'_>) {
        match cmd {
            Cmd::Arm { after, token } => {
                let id = ctx.arm_timer_after(after, token).unwrap();
                self.armed.push((token, id));
            }
            Cmd::Script { arm, cancel } => {
                let base = ctx.now();
                for (offset, token) in arm {
                    let id = ctx.arm_timer_at(base + offset, token).unwrap();
                    self.armed.push((token, id));
                }
                for token in cancel {
                    self.cancel(token, ctx);
                }
            }
            Cmd::Cancel { token } => self.cancel(token, ctx),
            Cmd::ArmAndQuit { token } => {
                let now = ctx.now();
                ctx.arm_timer_at(now, token).unwrap();
                assert_eq!(ctx.timers_armed(), 1);
                ctx.remove_self();
            }
            Cmd::Ping(n) => {
                let _ = self.seen.send(Seen::Ping(n));
            }
        }
    }

    fn on_timer(&mut self, token: u64, _: &mut PollCtx<'_>) {
        let _ = self.seen.send(Seen::Fired(token));
    }
}

fn wait_parked(group: &PollerGroup<Cmd>, at_least: u64) {
    let h = group.handle(0).unwrap();
    wait_until("poller parked", || h.stats().parks >= at_least);
}

#[test]
fn a_parked_poller_wakes_on_a_mailbox_send() {
    let group = PollerGroup::<Cmd>::start(&[0], long_park_config()).unwrap();
    let (tx, rx) = mpsc::channel();
    let id = group.add_task(0, TimerTask::new(&tx)).unwrap();
    for round in 1..=3 {
        wait_parked(&group, round);
        group.send(id, Cmd::Ping(round)).unwrap();
        assert_eq!(recv(&rx, "ping to parked poller"), Seen::Ping(round));
    }
    let h = group.handle(0).unwrap();
    wait_until("wake-ups counted", || h.stats().wakeups >= 3);
    // The shutdown doorbell also wakes a parked poller: this returns well within the
    // one-minute park.
    wait_parked(&group, 4);
    stop(group);
}

#[test]
fn a_parked_poller_wakes_at_its_next_timer_deadline() {
    let group = PollerGroup::<Cmd>::start(&[0], long_park_config()).unwrap();
    let (tx, rx) = mpsc::channel();
    let id = group.add_task(0, TimerTask::new(&tx)).unwrap();
    wait_parked(&group, 1);
    let after = Duration::from_millis(30);
    group.send(id, Cmd::Arm { after, token: 7 }).unwrap();
    // Nobody sends anything else: only the timer deadline can end the park.
    assert_eq!(recv(&rx, "timer fired"), Seen::Fired(7));
    assert_eq!(stop(group).pollers[0].timers_fired, 1);
}

#[test]
fn timers_fire_in_deadline_order_and_cancelled_ones_never_fire() {
    let group = PollerGroup::<Cmd>::start(&[0], long_park_config()).unwrap();
    let (tx, rx) = mpsc::channel();
    let id = group.add_task(0, TimerTask::new(&tx)).unwrap();
    let ms = Duration::from_millis;
    // Armed out of order; 5 shares 2's deadline but was armed later; 3 is cancelled in
    // the same callback, and its deadline lies before the last timer's.
    let arm = vec![
        (ms(40), 4),
        (ms(10), 1),
        (ms(30), 3),
        (ms(20), 2),
        (ms(20), 5),
    ];
    let script = Cmd::Script {
        arm,
        cancel: vec![3],
    };
    group.send(id, script).unwrap();
    let mut seen = Vec::new();
    loop {
        let s = recv(&rx, "timer events");
        let last = s == Seen::Fired(4);
        seen.push(s);
        if last {
            break;
        }
    }
    use Seen::*;
    assert_eq!(
        seen,
        vec![Cancelled(3, true), Fired(1), Fired(2), Fired(5), Fired(4)]
    );
    // Cancelling after firing reports "already gone".
    group.send(id, Cmd::Cancel { token: 1 }).unwrap();
    assert_eq!(recv(&rx, "late cancel"), Cancelled(1, false));
    assert_eq!(stop(group).pollers[0].timers_fired, 4);
}

#[test]
fn timers_of_a_removed_task_never_fire() {
    let group = PollerGroup::<Cmd>::start(&[0], long_park_config()).unwrap();
    let (doomed_tx, doomed_rx) = mpsc::channel();
    let (sentinel_tx, sentinel_rx) = mpsc::channel();
    let doomed = group.add_task(0, TimerTask::new(&doomed_tx)).unwrap();
    let sentinel = group.add_task(0, TimerTask::new(&sentinel_tx)).unwrap();
    group.send(doomed, Cmd::ArmAndQuit { token: 1 }).unwrap();
    let after = Duration::from_millis(10);
    group.send(sentinel, Cmd::Arm { after, token: 2 }).unwrap();
    let h = group.handle(0).unwrap();
    // The doomed timer was due before the sentinel was even armed, so once the sentinel
    // fires the doomed one would have too, had removal not cancelled it.
    assert_eq!(recv(&sentinel_rx, "sentinel timer"), Seen::Fired(2));
    assert!(doomed_rx.try_recv().is_err(), "removed task's timer fired");
    wait_until("doomed task removed", || h.stats().tasks == 1);
    let last = stop(group);
    assert_eq!(last.pollers[0].timers_fired, 1);
    assert!(doomed_rx.try_recv().is_err(), "removed task's timer fired");
}

/// Owns an eventfd that the test writes to; its poll consumes the readiness.
struct FdTask {
    fd: OwnedFd,
    hits: Arc<AtomicU64>,
}

impl Task<Cmd> for FdTask {
    fn poll(&mut self, _: &mut PollCtx<'_>) -> usize {
        let mut value = 0u64;
        // SAFETY: 8-byte read into a live u64 from an eventfd we own.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), (&mut value as *mut u64).cast(), 8) };
        if n == 8 {
            self.hits.fetch_add(value, Ordering::Relaxed);
            1
        } else {
            0
        }
    }

    fn wake_fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }
}

#[test]
fn a_parked_poller_wakes_on_a_task_wake_fd() {
    // SAFETY: plain syscall, result checked.
    let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    assert!(raw >= 0);
    // SAFETY: fresh descriptor, owned from here on.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: dup of a valid descriptor; checked below.
    let writer = unsafe { libc::dup(fd.as_raw_fd()) };
    assert!(writer >= 0);
    // SAFETY: fresh descriptor from dup.
    let writer = unsafe { OwnedFd::from_raw_fd(writer) };

    let group = PollerGroup::<Cmd>::start(&[0], long_park_config()).unwrap();
    let hits = Arc::new(AtomicU64::new(0));
    group
        .add_task(
            0,
            Box::new(FdTask {
                fd,
                hits: hits.clone(),
            }),
        )
        .unwrap();
    let h = group.handle(0).unwrap();
    for round in 1..=2u64 {
        wait_until("poller parked", || h.stats().parks >= round);
        let one = 1u64;
        // SAFETY: 8-byte write from a live u64 to a descriptor we own.
        let n = unsafe { libc::write(writer.as_raw_fd(), (&one as *const u64).cast(), 8) };
        assert_eq!(n, 8);
        wait_until("fd readiness consumed", || {
            hits.load(Ordering::Relaxed) == round
        });
    }
    stop(group);
}

/// Vetoes every park, as a task with undrained work would.
struct NeverPark {
    asked: Arc<AtomicBool>,
}

impl Task<Cmd> for NeverPark {
    fn poll(&mut self, _: &mut PollCtx<'_>) -> usize {
        0
    }

    fn before_park(&mut self) -> bool {
        self.asked.store(true, Ordering::Relaxed);
        false
    }
}

#[test]
fn a_task_can_veto_parking() {
    let group = PollerGroup::<Cmd>::start(&[0], long_park_config()).unwrap();
    let asked = Arc::new(AtomicBool::new(false));
    group
        .add_task(
            0,
            Box::new(NeverPark {
                asked: asked.clone(),
            }),
        )
        .unwrap();
    let h = group.handle(0).unwrap();
    // With no task yet the poller may have parked; from the first veto on it must not.
    // `parks` is published at each park, so this reading is exact.
    wait_until("first veto", || asked.load(Ordering::Relaxed));
    let parks_before = h.stats().parks;
    let iterations_before = h.stats().iterations;
    wait_until("idle iterations pile up", || {
        h.stats().iterations > iterations_before + 10_000
    });
    let last = stop(group);
    assert_eq!(last.pollers[0].parks, parks_before);
}
