//! End to end over shm, sim and siw: connections that end with calls in flight, timeouts,
//! and the keepalive probe. Every call gets exactly one outcome, and every pool is full
//! again once the outcomes are dropped.

use crate::engine_support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use engine_support::*;
use rpcrdma::fabric::Provider;
use rpcrdma::Pair;
use rpcrdma::{CallRequest, CallStatus, Outcome, TransportError};
use rpcrdma::{ConnConfig, ConnEvent, ConnState, CorePools, RegMode};

/// Ten calls of every shape, submitted after a first reply granted 8 credits, and
/// posted (but not executed: the responder is not polled).
fn ten_calls_in_flight<P: Provider>(p: &mut Pair<P, TestService>) {
    let req = CallRequest::new(msg(p, PROC_NULL, &[]), 256);
    assert_eq!(call(p, req).status, CallStatus::Success);
    for tag in 0..10u64 {
        let req = match tag % 3 {
            0 => CallRequest::new(msg(p, PROC_ECHO, &opaque(&pattern(50, 1))), 512),
            1 => CallRequest::new(msg(p, PROC_ECHO, &opaque(&pattern(9000, 2))), 10_000),
            _ => {
                let mut r = CallRequest::new(msg(p, PROC_ECHO_DDP, &700u32.to_be_bytes()), 512);
                r.push_ddp_arg((CALL_HDR + 4) as u32, large_with(p, &pattern(700, 3)))
                    .expect("room");
                r.push_write_sink(p.requester.alloc_large().expect("sink"))
                    .expect("room");
                r
            }
        };
        p.requester.submit(req, tag).expect("submitted");
    }
    p.requester.poll(Instant::now());
}

/// Polls until both sides are closed; returns the outcomes, one per tag.
fn run_to_closed<P: Provider>(p: &mut Pair<P, TestService>) -> BTreeMap<u64, Outcome> {
    let mut outcomes = BTreeMap::new();
    let done = p.run_until(DEADLINE, |p| {
        while let Some(o) = p.next_outcome() {
            assert!(outcomes.insert(o.tag, o).is_none(), "one outcome per call");
        }
        p.requester.state() == ConnState::Closed
            && p.responder()
                .is_some_and(|r| r.state() == ConnState::Closed)
    });
    assert!(
        done,
        "both sides closed: requester {:?}, responder {:?} (active {:?}, waiting for {:?}, {:?})",
        p.requester.state(),
        p.responder().map(|r| r.state()),
        p.responder().map(|r| r.active()),
        p.responder().map(|r| r.outstanding()),
        p.responder().map(|r| r.stats()),
    );
    while let Some(o) = p.next_outcome() {
        assert!(outcomes.insert(o.tag, o).is_none(), "one outcome per call");
    }
    outcomes
}

fn check_outcomes(outcomes: &BTreeMap<u64, Outcome>) {
    assert_eq!(
        outcomes.keys().copied().collect::<Vec<_>>(),
        (0..10).collect::<Vec<_>>()
    );
    for o in outcomes.values() {
        assert!(
            matches!(
                o.status,
                CallStatus::Success | CallStatus::Transport(TransportError::Disconnected)
            ),
            "{:?}",
            o.status
        );
        assert!(o.msg.is_some(), "the message buffer comes back");
    }
}

fn all_full(pools: &CorePools) -> bool {
    pools.recv.is_full() && pools.send.is_full() && pools.large.is_full()
}

fn pools_of<P: Provider>(p: &Pair<P, TestService>) -> (CorePools, CorePools) {
    (
        p.requester.resources().pools().clone(),
        p.responder()
            .expect("responder")
            .resources()
            .pools()
            .clone(),
    )
}

fn requester_closes_mid_flight<N: Net>(net: N) {
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    let (cpools, spools) = pools_of(&p);
    ten_calls_in_flight(&mut p);
    assert!(p.requester.active() > 1, "calls are in flight");
    p.requester.close();
    let outcomes = run_to_closed(&mut p);
    check_outcomes(&outcomes);
    assert!(outcomes
        .values()
        .any(|o| o.status == CallStatus::Transport(TransportError::Disconnected)));
    drop(outcomes);
    assert!(
        cpools.recv.is_full(),
        "every receive buffer is back at close"
    );
    assert!(spools.recv.is_full());
    assert_eq!(cpools.large.stats().in_use, 0);
    drop(p);
    assert!(
        all_full(&cpools),
        "requester pools: {:?}",
        cpools.send.stats()
    );
    assert!(all_full(&spools), "responder pools");
}

fn responder_disconnects_mid_flight<N: Net>(net: N) {
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    let (cpools, spools) = pools_of(&p);
    ten_calls_in_flight(&mut p);
    let conn = p.responder().expect("responder").conn_id();
    p.server.disconnect(conn).expect("disconnect");
    let outcomes = run_to_closed(&mut p);
    check_outcomes(&outcomes);
    assert!(p.requester.credits().snapshot().in_flight == 0);
    drop(outcomes);
    drop(p);
    assert!(all_full(&cpools));
    assert!(all_full(&spools));
}

fn timeout_kills_the_keys_before_reporting<N: Net>(net: N) {
    // The argument must go by Read chunk (a responder posting DDP segments, as siw's
    // and sim's do by default, would take it by send-based DDP).
    let cfg = ConnConfig {
        send_ddp: Some(false),
        ..test_config()
    };
    let mut p = pair(&net, &cfg, &cfg);
    // Starve the responder of large buffers: the call arrives, but cannot pull its Read
    // chunk, so no reply comes.
    let large = p
        .responder()
        .expect("responder")
        .resources()
        .pools()
        .large
        .clone();
    let mut held = Vec::new();
    while let Ok(b) = large.get() {
        held.push(b);
    }
    let data = pattern(600, 4);
    let mut req = CallRequest::new(msg(&p, PROC_ECHO_DDP, &(600u32).to_be_bytes()), 512)
        .with_timeout(Duration::from_millis(30));
    req.push_ddp_arg((CALL_HDR + 4) as u32, large_with(&p, &data))
        .expect("room");
    p.requester.submit(req, 1).expect("submitted");
    let mut outcome = None;
    let done = p.run_until(DEADLINE, |p| {
        outcome = p.requester.poll_outcome();
        outcome.is_some()
    });
    assert!(done, "the timeout fired");
    let o = outcome.expect("outcome");
    assert_eq!(o.status, CallStatus::Timeout);
    assert_eq!(
        p.requester.credits().in_flight(),
        1,
        "the credit stays taken: the responder still holds the call"
    );
    if p.requester.registration() == RegMode::Persistent {
        timeout_quarantines_persistent_buffers(p, o, large, held);
        return;
    }
    assert_eq!(
        o.ddp_args.len(),
        1,
        "buffers come back after their keys died"
    );
    assert_eq!(p.requester.stats().local_invalidations, 1);
    drop(o);
    // Let the responder go on: its RDMA Read names a dead key, which fails and ends the
    // connection, as on any RC fabric. The service never sees the call.
    for b in held {
        let _ = large.put(b);
    }
    let done = p.run_until(DEADLINE, |p| p.requester.state() == ConnState::Closed);
    assert!(done, "the late Read ended the connection");
    assert_eq!(p.responder().expect("responder").service().seen.calls, 0);
    assert_eq!(p.requester.credits().in_flight(), 0);
}

/// Persistent keys cannot be killed: the timed-out call's outcome comes without its
/// buffers, which stay out of every pool until the late reply proves the responder is
/// done with them; the connection survives.
fn timeout_quarantines_persistent_buffers<P: rpcrdma::fabric::Provider>(
    mut p: rpcrdma::Pair<P, TestService>,
    o: rpcrdma::Outcome,
    large: rpcrdma_pools::Pool,
    held: Vec<rpcrdma_pools::Buf>,
) {
    assert_eq!(o.ddp_args.len(), 0, "the DDP argument stays quarantined");
    assert!(o.msg.is_none(), "the call message stays quarantined");
    let st = p.requester.stats();
    assert_eq!((st.quarantined, st.local_invalidations), (1, 0));
    let app = p
        .requester
        .alloc_large()
        .expect("probe buffer")
        .pool()
        .expect("the pool has handles");
    let app_free = app.available();
    drop(o);
    assert_eq!(
        app.available(),
        app_free,
        "dropping the outcome freed nothing"
    );
    for b in held {
        let _ = large.put(b);
    }
    // The responder now pulls the (still registered) argument and answers late.
    let done = p.run_until(DEADLINE, |p| p.requester.stats().late_replies == 1);
    assert!(done, "the late reply arrived");
    assert_eq!(p.responder().expect("responder").service().seen.calls, 1);
    assert_eq!(
        app.available(),
        app_free + 1,
        "the argument is back in its pool"
    );
    assert_eq!(p.requester.credits().in_flight(), 0);
    assert_eq!(p.requester.state(), ConnState::Established);
    let req = CallRequest::new(msg(&p, PROC_NULL, &[]), 256);
    assert_eq!(call(&mut p, req).status, CallStatus::Success);
}

fn health_check_answered<N: Net>(net: N) {
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    p.requester.health_check().expect("probe sent");
    assert!(p.requester.health_check().is_err(), "one probe at a time");
    let mut answered = false;
    let done = p.run_until(DEADLINE, |p| {
        while let Some(ev) = p.requester.poll_event() {
            answered |= matches!(ev, ConnEvent::ProbeAnswered(_));
        }
        answered
    });
    assert!(done);
    assert_eq!(p.responder().expect("responder").service().seen.calls, 1);
    // The connection is still fine, and the probe slot is free again.
    let req = CallRequest::new(msg(&p, PROC_NULL, &[]), 256);
    assert_eq!(call(&mut p, req).status, CallStatus::Success);
    p.requester.health_check().expect("second probe");
}

fn dead_peer_is_detected<N: Net>(net: N) {
    let mut cfg = test_config();
    cfg.probe_timeout = Duration::from_millis(30);
    let mut p = pair(&net, &cfg, &cfg);
    p.requester.health_check().expect("probe sent");
    let end = Instant::now() + DEADLINE;
    let mut dead = false;
    // The responder is never polled: it looks dead.
    while !(dead && p.requester.state() == ConnState::Closed) {
        p.requester.poll(Instant::now());
        while let Some(ev) = p.requester.poll_event() {
            dead |= ev == ConnEvent::PeerDead;
        }
        assert!(
            Instant::now() < end,
            "dead={dead} state={:?}",
            p.requester.state()
        );
    }
}

fn keepalive_probes_an_idle_connection<N: Net>(net: N) {
    let mut cfg = test_config();
    cfg.keepalive = Some(Duration::from_millis(20));
    let mut p = pair(&net, &cfg, &cfg);
    let mut answered = 0;
    let done = p.run_until(DEADLINE, |p| {
        while let Some(ev) = p.requester.poll_event() {
            answered += u32::from(matches!(ev, ConnEvent::ProbeAnswered(_)));
        }
        answered >= 2
    });
    assert!(done, "two keepalive probes answered");
    // With a grant of 8 and the probe reserve, calls may use 7.
    assert_eq!(p.requester.credits().available(), 7);
}

per_provider!(
    requester_closes_mid_flight,
    responder_disconnects_mid_flight,
    timeout_kills_the_keys_before_reporting,
    health_check_answered,
    dead_peer_is_detected,
    keepalive_probes_an_idle_connection,
);
