//! Task add/remove through mailboxes, self-removal, shutdown (clean, stuck, panicked),
//! counters and pinning reports.

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{parking_config, recv, stop, wait_until, PATIENCE};
use rpcrdma_poller::{PollCtx, PollerGroup, SendErrorKind, Task, TaskId};

#[derive(Debug, PartialEq, Eq)]
enum Event {
    Message(&'static str, u32),
    Removed(&'static str),
}

/// Reports what happens to it; removes itself when sent `u32::MAX`.
struct Recorder {
    name: &'static str,
    events: Sender<Event>,
    polls: Arc<AtomicU64>,
}

impl Recorder {
    fn boxed(name: &'static str, events: &Sender<Event>) -> (Box<Self>, Arc<AtomicU64>) {
        let polls = Arc::new(AtomicU64::new(0));
        let task = Box::new(Recorder {
            name,
            events: events.clone(),
            polls: polls.clone(),
        });
        (task, polls)
    }
}

impl Task<u32> for Recorder {
    fn poll(&mut self, _: &mut PollCtx<'_>) -> usize {
        self.polls.fetch_add(1, Ordering::Relaxed);
        0
    }

    fn on_message(&mut self, msg: u32, ctx: &mut PollCtx<'_>) {
        if msg == u32::MAX {
            ctx.remove_self();
        }
        let _ = self.events.send(Event::Message(self.name, msg));
    }

    fn on_remove(&mut self) {
        let _ = self.events.send(Event::Removed(self.name));
    }
}

#[test]
fn tasks_are_added_messaged_and_removed_through_the_mailbox() {
    let group = PollerGroup::<u32>::start(&[0], parking_config()).unwrap();
    let h = group.handle(0).unwrap();
    let (tx, rx) = mpsc::channel();
    let (task, polls) = Recorder::boxed("a", &tx);
    let a = h.add_task(task).unwrap();
    // Sent right after the add, from the same thread: must find the task installed.
    h.send(a, 1).unwrap();
    assert_eq!(recv(&rx, "message"), Event::Message("a", 1));
    wait_until("task polled", || polls.load(Ordering::Relaxed) > 0);
    assert_eq!(h.stats().tasks, 1);

    h.send(a, 2).unwrap();
    h.remove_task(a).unwrap();
    // Queued before the removal, so delivered before it.
    assert_eq!(recv(&rx, "message before removal"), Event::Message("a", 2));
    assert_eq!(recv(&rx, "removal"), Event::Removed("a"));
    wait_until("task count drops", || h.stats().tasks == 0);

    h.send(a, 3).unwrap();
    h.remove_task(a).unwrap();
    wait_until("both stale commands counted", || {
        h.stats().stale_commands == 2
    });
    let polls_after_removal = polls.load(Ordering::Relaxed);
    stop(group);
    assert_eq!(polls.load(Ordering::Relaxed), polls_after_removal);
    assert!(
        rx.try_recv().is_err(),
        "nothing more may reach a removed task"
    );
}

#[test]
fn a_task_removing_itself_leaves_the_others_running() {
    let group = PollerGroup::<u32>::start(&[0], parking_config()).unwrap();
    let h = group.handle(0).unwrap();
    let (tx, rx) = mpsc::channel();
    let mut ids: Vec<(TaskId, Arc<AtomicU64>)> = Vec::new();
    for name in ["first", "middle", "last"] {
        let (task, polls) = Recorder::boxed(name, &tx);
        ids.push((h.add_task(task).unwrap(), polls));
    }
    // Remove the first one: the poll list swaps "last" into its place mid-iteration.
    h.send(ids[0].0, u32::MAX).unwrap();
    assert_eq!(recv(&rx, "quit message"), Event::Message("first", u32::MAX));
    assert_eq!(recv(&rx, "self-removal"), Event::Removed("first"));
    wait_until("two tasks left", || h.stats().tasks == 2);

    let before: Vec<u64> = ids.iter().map(|(_, p)| p.load(Ordering::Relaxed)).collect();
    wait_until("survivors keep being polled", || {
        ids[1].1.load(Ordering::Relaxed) > before[1] + 10
            && ids[2].1.load(Ordering::Relaxed) > before[2] + 10
    });
    assert_eq!(ids[0].1.load(Ordering::Relaxed), before[0]);
    for (id, name) in [(ids[1].0, "middle"), (ids[2].0, "last")] {
        h.send(id, 5).unwrap();
        assert_eq!(recv(&rx, "survivor message"), Event::Message(name, 5));
    }

    // Shutdown retires the survivors.
    stop(group);
    let mut removed: Vec<Event> = rx.try_iter().collect();
    removed.sort_by_key(|e| format!("{e:?}"));
    assert_eq!(
        removed,
        vec![Event::Removed("last"), Event::Removed("middle")]
    );
}

#[test]
fn shutdown_delivers_accepted_messages_and_reports_final_counters() {
    let group = PollerGroup::<u32>::start(&[0, 0], parking_config()).unwrap();
    let (tx, rx) = mpsc::channel();
    let (task, _) = Recorder::boxed("t", &tx);
    let id = group.add_task(1, task).unwrap();
    for i in 0..10 {
        group.send(id, i).unwrap();
    }
    let stats = stop(group);
    let events: Vec<Event> = rx.try_iter().collect();
    let mut expected: Vec<Event> = (0..10).map(|i| Event::Message("t", i)).collect();
    expected.push(Event::Removed("t"));
    assert_eq!(events, expected);
    assert_eq!(stats.pollers.len(), 2);
    assert_eq!(stats.pollers[1].messages, 11);
    assert_eq!(stats.pollers[1].tasks, 0);
    assert_eq!(stats.pollers[0].messages, 0);
    assert_eq!(stats.total().messages, 11);
}

/// Blocks in `poll` until released: a poller that will miss its shutdown deadline.
struct Stuck {
    entered: Option<Sender<()>>,
    release: Receiver<()>,
}

impl Task<u32> for Stuck {
    fn poll(&mut self, _: &mut PollCtx<'_>) -> usize {
        if let Some(entered) = self.entered.take() {
            let _ = entered.send(());
            let _ = self.release.recv_timeout(PATIENCE);
        }
        0
    }
}

#[test]
fn shutdown_reports_a_poller_that_misses_the_deadline() {
    let group = PollerGroup::<u32>::start(&[0, 0], parking_config()).unwrap();
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    group
        .add_task(
            1,
            Box::new(Stuck {
                entered: Some(entered_tx),
                release: release_rx,
            }),
        )
        .unwrap();
    recv(&entered_rx, "poller 1 blocked");

    let err = group
        .shutdown(Instant::now() + Duration::from_millis(50))
        .unwrap_err();
    let stuck: Vec<usize> = err.stuck.iter().map(|s| s.index()).collect();
    assert_eq!(stuck, vec![1], "only the blocked poller is stuck");
    assert!(err.panicked.is_empty());
    assert!(err.to_string().contains("still running [1]"), "{err}");

    release_tx.send(()).unwrap();
    let straggler = err.stuck.into_iter().next().unwrap();
    assert_eq!(straggler.core(), 0);
    let final_stats = straggler
        .join_until(Instant::now() + PATIENCE)
        .expect("released poller finishes")
        .expect("and did not panic");
    assert_eq!(final_stats.tasks, 0, "its task was retired on the way out");
}

struct Bomb;

impl Task<u32> for Bomb {
    fn poll(&mut self, _: &mut PollCtx<'_>) -> usize {
        0
    }

    fn on_message(&mut self, _: u32, _: &mut PollCtx<'_>) {
        panic!("task failure injected by test");
    }
}

#[test]
fn a_poller_killed_by_a_panicking_task_closes_its_mailbox_and_is_reported() {
    let group = PollerGroup::<u32>::start(&[0], parking_config()).unwrap();
    let h = group.handle(0).unwrap().clone();
    let id = h.add_task(Box::new(Bomb)).unwrap();
    h.send(id, 0).unwrap();
    wait_until("poller thread ends", || !h.is_running());
    assert_eq!(h.send(id, 1).unwrap_err().kind(), SendErrorKind::Closed);
    let err = group.shutdown(Instant::now() + PATIENCE).unwrap_err();
    assert_eq!(err.panicked, vec![0]);
    assert!(err.stuck.is_empty());
}

/// Reports one unit of work on each of its first `budget` polls.
struct Worker {
    budget: u64,
}

impl Task<u32> for Worker {
    fn poll(&mut self, _: &mut PollCtx<'_>) -> usize {
        if self.budget == 0 {
            return 0;
        }
        self.budget -= 1;
        1
    }
}

#[test]
fn counters_move_and_are_readable_from_other_threads() {
    let group = PollerGroup::<u32>::start(&[0], parking_config()).unwrap();
    let h = group.handle(0).unwrap();
    h.add_task(Box::new(Worker { budget: 500 })).unwrap();
    // Counters are published before every park, so once the work is done and the poller
    // has gone idle they are exact.
    wait_until("work finished and poller parked", || {
        let s = h.stats();
        s.work_items == 500 && s.parks > 0
    });
    let s = h.stats();
    assert_eq!(s.tasks, 1);
    assert_eq!(s.messages, 1);
    assert!(s.busy_iterations >= 500, "{s:?}");
    assert!(
        s.iterations > s.busy_iterations,
        "idle iterations happened: {s:?}"
    );
    let busy = s.busy_fraction();
    assert!(busy > 0.0 && busy < 1.0, "{busy}");
    let group_stats = group.stats();
    assert_eq!(group_stats.pollers.len(), 1);
    assert!(group_stats.total().iterations >= s.iterations);
    let last = stop(group);
    assert!(last.pollers[0].iterations >= s.iterations);
}

#[test]
fn a_core_that_cannot_be_pinned_is_reported_and_the_poller_still_works() {
    // Beyond any cpu_set_t, and inside one but (on this machine) absent.
    let impossible = 1 << 20;
    let absent = 1023;
    let group = PollerGroup::<u32>::start(&[0, impossible, absent], parking_config()).unwrap();
    let reports = group.pin_reports();
    assert_eq!(reports.len(), 3);
    assert_eq!((reports[1].index, reports[1].core), (1, impossible));
    assert!(!reports[1].pinned);
    assert_eq!((reports[2].index, reports[2].core), (2, absent));
    assert!(!reports[2].pinned);
    let core0_allowed = core_affinity::get_core_ids()
        .unwrap_or_default()
        .iter()
        .any(|c| c.id == 0);
    assert_eq!(reports[0].pinned, core0_allowed);

    let (tx, rx) = mpsc::channel();
    let (task, _) = Recorder::boxed("unpinned", &tx);
    let id = group.add_task(1, task).unwrap();
    group.send(id, 42).unwrap();
    assert_eq!(
        recv(&rx, "message on unpinned poller"),
        Event::Message("unpinned", 42)
    );
    stop(group);
}
