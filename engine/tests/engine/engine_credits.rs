//! End to end over shm, sim and siw: credits. A requester never has more calls out than
//! granted (one until the first reply), extra calls wait in order and none is lost;
//! the responder's grant moves with its policy.

use crate::engine_support;

use engine_support::*;
use std::time::Duration;

use rpcrdma::fabric::faulty::{FaultConfig, Faulty, FaultyDevice};
use rpcrdma::{CallRequest, CallStatus, Pair, Registration, TransportError};
use rpcrdma::{CloseReason, ConnEvent, ConnState};

fn more_calls_than_credits_queue_in_order<N: Net>(net: N) {
    let client = test_config();
    let mut server = test_config();
    server.credits = 2;
    let mut p = pair(&net, &client, &server);
    const CALLS: u64 = 24;
    for tag in 0..CALLS {
        let data = pattern(100 + tag as usize, tag as u8);
        let req = CallRequest::new(msg(&p, PROC_ECHO, &opaque(&data)), 512);
        p.requester.submit(req, tag).expect("accepted (queued)");
    }
    assert!(p.requester.queued() > 0);
    let mut outcomes = Vec::new();
    let mut max_in_flight = 0;
    let mut max_granted = 0;
    let done = p.run_until(DEADLINE, |p| {
        let c = p.requester.credits().snapshot();
        assert!(c.in_flight <= c.granted, "{c:?}");
        max_in_flight = max_in_flight.max(c.in_flight);
        max_granted = max_granted.max(c.granted);
        while let Some(o) = p.next_outcome() {
            outcomes.push(o);
        }
        outcomes.len() as u64 == CALLS
    });
    assert!(done, "{} of {CALLS} outcomes", outcomes.len());
    assert_eq!(max_granted, 2, "the responder granted 2");
    assert!(max_in_flight <= 2);
    outcomes.sort_by_key(|o| o.tag);
    for (i, o) in outcomes.iter().enumerate() {
        assert_eq!(o.tag, i as u64, "exactly one outcome per call");
        assert_eq!(o.status, CallStatus::Success);
        assert_eq!(results(o), &opaque(&pattern(100 + i, i as u8))[..]);
    }
    // Started in submission order: an XID is a sequence number above the slot bits (4
    // for 8 credits plus the probe slot), one step per call started.
    let seqs: Vec<u32> = outcomes.iter().map(|o| o.xid >> 4).collect();
    assert!(
        seqs.windows(2)
            .all(|w| w[1].wrapping_sub(w[0]) & 0x0fff_ffff == 1),
        "{seqs:?}"
    );
    assert!(p.requester.stats().queued > 0);
}

fn grant_follows_the_responder_policy<N: Net>(net: N) {
    let client = test_config();
    let mut server = test_config();
    server.credits = 6;
    let mut p = pair(&net, &client, &server);
    let null = |p: &mut rpcrdma::Pair<N::P, TestService>| {
        let req = CallRequest::new(msg(p, PROC_NULL, &[]), 256);
        assert_eq!(call(p, req).status, CallStatus::Success);
    };
    null(&mut p);
    assert_eq!(p.requester.credits().granted(), 6);
    p.responder().expect("responder").policy().set_target(2);
    null(&mut p);
    assert_eq!(p.requester.credits().granted(), 2, "adjusted down");
    p.responder().expect("responder").policy().set_target(5);
    null(&mut p);
    assert_eq!(p.requester.credits().granted(), 5, "and up again");
}

/// Calls the responder drops (`no_reply`) time out holding their credits; once they
/// held them past `credit_reclaim` the connection is declared broken with a typed
/// reason, so a call queued behind them gets its outcome instead of waiting forever
/// (while the keepalive probe, on its reserved credit, would keep the peer alive).
fn credits_held_by_dropped_calls_end_the_connection<N: Net>(net: N) {
    let mut client = test_config();
    client.call_timeout = Duration::from_millis(100);
    client.credit_reclaim = Some(Duration::from_millis(300));
    client.keepalive = Some(Duration::from_millis(50));
    let mut server = test_config();
    server.credits = 3;
    let mut p = pair(&net, &client, &server);
    // On a hand-moved clock: the 100 ms call timeout fires only when the test moves the
    // clock, never on the NULL call because the thread was descheduled (on the real
    // clock a 100 ms stall under load would have timed it out).
    let mut clock = HandClock::at_pair(&p);
    // The first reply grants 3: two for calls, one kept back for the probe.
    let null = CallRequest::new(msg(&p, PROC_NULL, &[]), 256);
    assert_eq!(
        clock.call(&mut p, null, |_, _| {}).status,
        CallStatus::Success
    );
    assert_eq!(p.requester.credits().available(), 2);
    for tag in 0..2 {
        let req = CallRequest::new(msg(&p, PROC_DROP, &[]), 256);
        p.requester
            .submit_at(req, tag, clock.now())
            .expect("accepted");
    }
    assert!(
        clock.run_until(&mut p, |p| p
            .responder()
            .is_some_and(|r| r.stats().no_reply == 2)),
        "the responder dropped both"
    );
    assert!(
        p.next_outcome().is_none(),
        "no timeout before the clock moves"
    );
    clock.advance(client.call_timeout + Duration::from_millis(1));
    let mut timed_out = 0;
    assert!(
        clock.run_until(&mut p, |p| {
            while let Some(o) = p.next_outcome() {
                assert_eq!(o.status, CallStatus::Timeout, "dropped call {}", o.tag);
                timed_out += 1;
            }
            timed_out == 2
        }),
        "both dropped calls time out"
    );
    assert_eq!(p.requester.stats().timed_out_holding_credit, 2);
    assert_eq!(
        p.requester.credits().available(),
        0,
        "their credits are held"
    );
    // A call that needs a credit now waits behind them.
    let queued = CallRequest::new(msg(&p, PROC_NULL, &[]), 256).with_timeout(DEADLINE * 10);
    p.requester
        .submit_at(queued, 99, clock.now())
        .expect("accepted (queued)");
    clock.advance(client.credit_reclaim.expect("set") + Duration::from_millis(1));
    let mut reason = None;
    let mut outcome = None;
    let done = clock.run_until(&mut p, |p| {
        while let Some(ev) = p.requester.poll_event() {
            if let ConnEvent::Closed(r) = ev {
                reason = Some(r);
            }
        }
        if let Some(o) = p.next_outcome() {
            outcome = Some(o);
        }
        outcome.is_some() && reason.is_some()
    });
    assert!(
        done,
        "queued call outcome {outcome:?}, close reason {reason:?}"
    );
    let o = outcome.expect("outcome");
    assert_eq!(o.tag, 99);
    assert_eq!(
        o.status,
        CallStatus::Transport(TransportError::Disconnected)
    );
    assert_eq!(reason, Some(CloseReason::CreditsLost { held: 2 }));
    let st = p.requester.stats();
    assert_eq!(
        (st.credits_lost, st.credit_loss_disconnects),
        (2, 1),
        "{st:?}"
    );
    assert_eq!(st.timed_out_holding_credit, 0, "all released at close");
    assert_eq!(p.responder().map_or(2, |r| r.stats().no_reply), 2);
}

/// A plain call (inline, chunkless, engine-chosen XID: `core/requester/plain.rs`)
/// whose reply arrives before its Send completion is reported. Deterministic: the
/// requester's device holds back its send-queue completions (a closed
/// `SendCompletionGate`) until the outcome is out. The plain path then leaves the slot
/// `Delivered` holding its work request, and the completion retires it through the
/// general `progress`: the credit comes back exactly once (a second call still in
/// flight when the late completion lands keeps its credit), one outcome per call, and
/// the pools are full once the connection is gone.
fn plain_reply_before_its_send_completion_retires_once<N: Net>(net: N) {
    let mut client = test_config();
    if net.registration() != Registration::Auto {
        client.registration = net.registration();
    }
    let server = test_config();
    let cdev = FaultyDevice::<N::P>::new(net.device(), FaultConfig::default());
    let gate = cdev.send_completion_gate();
    // The server's device is wrapped too (both ends share a provider type); its gate
    // stays open.
    let sdev = FaultyDevice::<N::P>::new(net.device(), FaultConfig::default());
    let mut p: Pair<Faulty<N::P>, TestService> = Pair::connect(
        &cdev,
        sdev,
        &net.addr(),
        &client,
        &server,
        TestService::default(),
        DEADLINE,
    )
    .expect("pair connects");
    let pools = p.requester.resources().pools().clone();
    let send_queue_idle = p.requester.core().outstanding().send_queue;
    gate.close();

    // Call 1: answered while its Send completion is held back.
    let req = CallRequest::new(msg(&p, PROC_NULL, &[]), 256);
    p.requester.submit(req, 1).expect("submitted");
    let mut outcomes = Vec::new();
    let answered = p.run_until(DEADLINE, |p| {
        while let Some(o) = p.next_outcome() {
            outcomes.push(o);
        }
        !outcomes.is_empty()
    });
    assert!(answered, "call 1 answered with its Send completion held");
    assert_eq!(outcomes.len(), 1);
    assert_eq!(
        (outcomes[0].tag, outcomes[0].status),
        (1, CallStatus::Success)
    );
    assert!(outcomes[0].msg.is_some(), "the message buffer comes back");
    // The order really was reply first: the Send is still outstanding, the slot still
    // held for it, and the reply went the plain way.
    assert_eq!(
        p.requester.core().outstanding().send_queue,
        send_queue_idle + 1,
        "the call's Send has not completed"
    );
    assert_eq!(p.requester.active(), 1, "its slot waits for the completion");
    assert_eq!(
        p.requester.core().plain_replies(),
        1,
        "the plain path took it"
    );
    let c = p.requester.credits().snapshot();
    assert_eq!(
        (c.in_flight, c.acquired),
        (0, 1),
        "credit back at the reply: {c:?}"
    );

    // Call 2 takes a credit; the server is not polled, so it stays in flight while the
    // held completion of call 1 arrives.
    let req = CallRequest::new(msg(&p, PROC_NULL, &[]), 256);
    p.requester.submit(req, 2).expect("submitted");
    gate.open();
    let end = std::time::Instant::now() + DEADLINE;
    // Only the requester is polled: call 1's completion, released by the open gate,
    // retires its slot (call 2's Send may or may not complete meanwhile).
    assert_eq!(p.requester.active(), 2);
    while p.requester.active() > 1 {
        p.requester.poll(p.requester.clock().now());
        assert!(std::time::Instant::now() < end, "call 1's Send completes");
    }
    let c = p.requester.credits().snapshot();
    assert_eq!(
        (c.in_flight, c.acquired),
        (1, 2),
        "call 1's completion gave no second credit back: {c:?}"
    );
    assert_eq!(
        p.requester.active(),
        1,
        "call 1's slot retired, call 2's in use"
    );
    assert!(p.next_outcome().is_none(), "call 1 has one outcome");

    let done = p.run_until(DEADLINE, |p| {
        while let Some(o) = p.next_outcome() {
            outcomes.push(o);
        }
        outcomes.len() == 2
    });
    assert!(done, "call 2 answered");
    assert_eq!(
        (outcomes[1].tag, outcomes[1].status),
        (2, CallStatus::Success)
    );
    for _ in 0..50 {
        p.poll(p.requester.clock().now());
        assert!(p.next_outcome().is_none(), "an outcome arrived twice");
    }
    let c = p.requester.credits().snapshot();
    assert_eq!((c.in_flight, c.acquired), (0, 2), "{c:?}");
    assert_eq!(p.requester.active(), 0);
    assert_eq!(p.requester.core().plain_replies(), 2);
    assert_eq!(p.requester.stats().outcomes, 2);

    p.requester.close();
    let closed = p.run_until(DEADLINE, |p| {
        assert!(
            p.next_outcome().is_none(),
            "no outcome after the last call's"
        );
        p.requester.state() == ConnState::Closed
    });
    assert!(closed, "the requester closes");
    drop(outcomes);
    drop(p);
    assert!(
        pools.recv.is_full() && pools.send.is_full() && pools.large.is_full(),
        "requester pools full after close"
    );
}

per_provider!(
    more_calls_than_credits_queue_in_order,
    grant_follows_the_responder_policy,
    credits_held_by_dropped_calls_end_the_connection,
    plain_reply_before_its_send_completion_retires_once,
);

/// One requester poll takes a full depth's replies: 32 calls in flight answered
/// together leave 64 completions on the requester's queue (each call's Send and its
/// reply's receive), and the driver reaps them in one batch (`conn::CQ_BATCH`), so a
/// driver loop at depth 32 hands back all 32 outcomes per turn instead of the 16 a
/// batch of 32 completions holds (the send side is reaped first).
#[test]
fn one_poll_takes_a_full_depth_of_replies_shm() {
    const DEPTH: u64 = 32;
    let mut cfg = test_config();
    cfg.credits = DEPTH as u32 + 1;
    cfg.large_bufs = 4 * cfg.credits + 8;
    let mut p = pair(&ShmNet, &cfg, &cfg);
    // The first reply grants the credits.
    let req = CallRequest::new(msg(&p, PROC_NULL, &[]), 256);
    assert_eq!(call(&mut p, req).status, CallStatus::Success);
    assert_eq!(p.requester.credits().granted(), DEPTH as u32 + 1);
    for tag in 0..DEPTH {
        let req = CallRequest::new(msg(&p, PROC_NULL, &[]), 256);
        p.requester.submit(req, tag).expect("accepted");
    }
    // Posts the staged calls; nothing has come back yet.
    let now = p.requester.clock().now();
    p.requester.poll(now);
    assert!(p.next_outcome().is_none());
    // The server alone takes every call and posts every reply.
    let end = std::time::Instant::now() + DEADLINE;
    let mut served = 0;
    while served < DEPTH as usize {
        served += p.server.poll(p.requester.clock().now());
        assert!(std::time::Instant::now() < end, "{served} calls served");
    }
    // (The count may include the first call's reply completion: a few more polls take
    // whatever call is left; none of them can complete a reply the requester has not
    // executed.)
    for _ in 0..100 {
        p.server.poll(p.requester.clock().now());
    }
    let now = p.requester.clock().now();
    let reaped = p.requester.poll(now);
    assert!(
        reaped >= 2 * DEPTH as usize,
        "{reaped} completions reaped in one poll"
    );
    let mut tags = Vec::new();
    while let Some(o) = p.next_outcome() {
        assert_eq!(o.status, CallStatus::Success);
        tags.push(o.tag);
    }
    tags.sort_unstable();
    assert_eq!(
        tags,
        (0..DEPTH).collect::<Vec<_>>(),
        "every outcome after one poll"
    );
}
