//! Mailbox delivery order, backpressure and refusal cases, through real poller threads.

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use common::{parking_config, recv, stop, wait_until, PATIENCE};
use rpcrdma_poller::{PollCtx, PollerConfig, PollerGroup, SendErrorKind, Task, TaskId};

/// Checks that each sender's sequence numbers arrive strictly in order.
struct OrderChecker {
    next: Vec<u64>,
    received: Arc<AtomicU64>,
    out_of_order: Arc<AtomicU64>,
}

impl Task<(usize, u64)> for OrderChecker {
    fn poll(&mut self, _: &mut PollCtx<'_>) -> usize {
        0
    }

    fn on_message(&mut self, (sender, seq): (usize, u64), _: &mut PollCtx<'_>) {
        if self.next[sender] != seq {
            self.out_of_order.fetch_add(1, Ordering::Relaxed);
        }
        self.next[sender] = seq + 1;
        self.received.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn each_senders_messages_arrive_in_send_order() {
    const SENDERS: usize = 3;
    const PER_SENDER: u64 = 3_000;
    // A small ring so senders hit "full" and the ring wraps many times.
    let config = PollerConfig {
        mailbox_capacity: 8,
        ..parking_config()
    };
    let group = PollerGroup::<(usize, u64)>::start(&[0], config).unwrap();
    let received = Arc::new(AtomicU64::new(0));
    let out_of_order = Arc::new(AtomicU64::new(0));
    let handle = group.handle(0).unwrap().clone();
    let id = handle
        .add_task(Box::new(OrderChecker {
            next: vec![0; SENDERS],
            received: received.clone(),
            out_of_order: out_of_order.clone(),
        }))
        .unwrap();

    let deadline = Instant::now() + PATIENCE;
    let senders: Vec<_> = (0..SENDERS)
        .map(|sender| {
            let handle = handle.clone();
            thread::spawn(move || {
                let (mut seq, mut refused) = (0, 0u64);
                while seq < PER_SENDER && Instant::now() < deadline {
                    match handle.send(id, (sender, seq)) {
                        Ok(()) => seq += 1,
                        Err(e) => {
                            assert_eq!(e.kind(), SendErrorKind::Full);
                            assert_eq!(e.into_inner(), (sender, seq), "refused value comes back");
                            refused += 1;
                            thread::yield_now();
                        }
                    }
                }
                (seq, refused)
            })
        })
        .collect();
    for s in senders {
        let (sent, _refused) = s.join().unwrap();
        assert_eq!(sent, PER_SENDER, "sender ran out of time");
    }
    let total = SENDERS as u64 * PER_SENDER;
    wait_until("all messages delivered", || {
        received.load(Ordering::Relaxed) == total
    });
    assert_eq!(out_of_order.load(Ordering::Relaxed), 0);
    let stats = stop(group);
    // Every message plus the add command went through the mailbox.
    assert_eq!(stats.pollers[0].messages, total + 1);
    assert_eq!(stats.pollers[0].stale_commands, 0);
}

/// Blocks the poller inside `poll` until released, so the test can fill its mailbox.
struct Gate {
    entered: Option<Sender<()>>,
    release: Receiver<()>,
    delivered: Sender<u32>,
}

impl Task<u32> for Gate {
    fn poll(&mut self, _: &mut PollCtx<'_>) -> usize {
        if let Some(entered) = self.entered.take() {
            let _ = entered.send(());
            // Bounded so a failing test cannot leave the poller blocked forever.
            let _ = self.release.recv_timeout(PATIENCE);
        }
        0
    }

    fn on_message(&mut self, msg: u32, _: &mut PollCtx<'_>) {
        let _ = self.delivered.send(msg);
    }
}

#[test]
fn full_mailbox_hands_the_message_back_and_the_poller_catches_up() {
    let config = PollerConfig {
        mailbox_capacity: 8,
        ..parking_config()
    };
    let group = PollerGroup::<u32>::start(&[0], config).unwrap();
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel();
    let (delivered_tx, delivered_rx) = mpsc::channel();
    let id = group
        .add_task(
            0,
            Box::new(Gate {
                entered: Some(entered_tx),
                release: release_rx,
                delivered: delivered_tx,
            }),
        )
        .unwrap();
    recv(&entered_rx, "poller blocked in the gate task");

    // The poller is stuck in `poll`, so the ring (empty now) takes exactly its capacity.
    let mut accepted = 0;
    let refused = loop {
        match group.send(id, accepted) {
            Ok(()) => accepted += 1,
            Err(e) => break e,
        }
        assert!(accepted <= 8, "mailbox accepted more than its capacity");
    };
    assert_eq!(accepted, 8);
    assert_eq!(refused.kind(), SendErrorKind::Full);
    assert_eq!(refused.to_string(), "poller mailbox is full");
    assert_eq!(refused.into_inner(), 8);

    release_tx.send(()).unwrap();
    for expected in 0..8 {
        assert_eq!(recv(&delivered_rx, "queued message"), expected);
    }
    // Room again once drained.
    group.send(id, 100).unwrap();
    assert_eq!(recv(&delivered_rx, "message after backpressure"), 100);
    stop(group);
}

struct Idle;

impl Task<u32> for Idle {
    fn poll(&mut self, _: &mut PollCtx<'_>) -> usize {
        0
    }
}

#[test]
fn wrong_poller_and_closed_poller_refuse_and_return_the_value() {
    let group = PollerGroup::<u32>::start(&[0, 0], parking_config()).unwrap();
    let h0 = group.handle(0).unwrap().clone();
    let h1 = group.handle(1).unwrap().clone();
    let id = h0.add_task(Box::new(Idle)).unwrap();
    assert_eq!(id.poller(), 0);

    let e = h1.send(id, 7).unwrap_err();
    assert_eq!((e.kind(), e.into_inner()), (SendErrorKind::WrongPoller, 7));
    let e = h1.remove_task(id).unwrap_err();
    assert_eq!(e.kind(), SendErrorKind::WrongPoller);

    stop(group);
    assert!(!h0.is_running());
    let e = h0.send(id, 9).unwrap_err();
    assert_eq!((e.kind(), e.into_inner()), (SendErrorKind::Closed, 9));
    let e = h0.add_task(Box::new(Idle)).unwrap_err();
    assert_eq!(e.kind(), SendErrorKind::Closed);
}

#[test]
fn task_slots_run_out_and_are_recycled_with_fresh_ids() {
    let config = PollerConfig {
        max_tasks: 2,
        ..parking_config()
    };
    let group = PollerGroup::<u32>::start(&[0], config).unwrap();
    let h = group.handle(0).unwrap();
    let a = h.add_task(Box::new(Idle)).unwrap();
    let _b = h.add_task(Box::new(Idle)).unwrap();
    let e = h.add_task(Box::new(Idle)).unwrap_err();
    assert_eq!(e.kind(), SendErrorKind::NoTaskSlot);

    h.remove_task(a).unwrap();
    wait_until("slot freed", || h.stats().tasks == 1);
    let c = h.add_task(Box::new(Idle)).unwrap();
    assert_ne!(c, a, "a recycled slot must not reuse the old id");
    // The stale id no longer reaches anything.
    h.send(a, 1).unwrap();
    wait_until("stale message counted", || h.stats().stale_commands == 1);
    assert_eq!(h.stats().tasks, 2);
    stop(group);
}

#[test]
fn start_rejects_no_cores_and_bad_config() {
    assert!(matches!(
        PollerGroup::<u32>::start(&[], parking_config()),
        Err(rpcrdma_poller::StartError::NoCores)
    ));
    let bad = PollerConfig {
        mailbox_batch: 0,
        ..parking_config()
    };
    let err = PollerGroup::<u32>::start(&[0], bad).err().unwrap();
    assert!(err.to_string().contains("mailbox_batch"), "{err}");
}

enum Hop {
    Start {
        rounds: u32,
        peer: TaskId,
        done: Sender<u32>,
    },
    Ball {
        from: TaskId,
        n: u32,
    },
}

/// Bounces a counter with a peer task on another poller through the peer's mailbox.
struct Bouncer {
    peers: Vec<rpcrdma_poller::PollerHandle<Hop>>,
    target: u32,
    done: Option<Sender<u32>>,
}

impl Task<Hop> for Bouncer {
    fn poll(&mut self, _: &mut PollCtx<'_>) -> usize {
        0
    }

    fn on_message(&mut self, msg: Hop, ctx: &mut PollCtx<'_>) {
        let (to, n) = match msg {
            Hop::Start { rounds, peer, done } => {
                self.target = rounds;
                self.done = Some(done);
                (peer, 0)
            }
            Hop::Ball { from, n } => (from, n + 1),
        };
        if self.done.is_some() && n >= self.target {
            if let Some(done) = self.done.take() {
                let _ = done.send(n);
            }
            return;
        }
        let me = ctx.task_id();
        // One ball in flight: the peer's mailbox always has room.
        assert!(self.peers[to.poller()]
            .send(to, Hop::Ball { from: me, n })
            .is_ok());
    }
}

#[test]
fn tasks_on_different_pollers_hand_work_to_each_other() {
    let group = PollerGroup::<Hop>::start(&[0, 1], parking_config()).unwrap();
    let peers: Vec<_> = group.handles().cloned().collect();
    let mut ids = Vec::new();
    for poller in 0..2 {
        let task = Box::new(Bouncer {
            peers: peers.clone(),
            target: 0,
            done: None,
        });
        ids.push(group.add_task(poller, task).unwrap());
    }
    assert_eq!((ids[0].poller(), ids[1].poller()), (0, 1));
    let (done_tx, done_rx) = mpsc::channel();
    let start = Hop::Start {
        rounds: 2_000,
        peer: ids[1],
        done: done_tx,
    };
    group.send(ids[0], start).unwrap();
    // Every other increment happens on the starting task, so it sees the target first.
    assert_eq!(recv(&done_rx, "ball bounced 2000 times"), 2_000);
    let stats = stop(group);
    // Poller 0 took the start, its add and 1000 balls; poller 1 its add and 1000 balls.
    assert_eq!(stats.pollers[0].messages, 1 + 1 + 1_000);
    assert_eq!(stats.pollers[1].messages, 1 + 1_000);
}
