//! End to end over shm, sim and siw: selective signaling (`ConnConfig::signal_every`).
//! Call Sends go unsignaled three in four; each retires with a later completion (or the
//! barrier posted when the connection idles or closes), so calls one at a time (which
//! leave an unsignaled tail after every reply) and bursts both get exactly one outcome
//! each, nothing is counted as a stray completion, and a close drains. A call answered
//! before its unsignaled Send is retired holds no slot another call waits for, and an
//! idle connection's barrier retires the trailing Sends.

use crate::engine_support;

use engine_support::*;

use rpcrdma::{CallRequest, CallStatus, ConnConfig, ConnState};

fn every_fourth() -> ConnConfig {
    ConnConfig {
        signal_every: 4,
        ..test_config()
    }
}

fn closes<P: rpcrdma::fabric::Provider>(p: &mut rpcrdma::Pair<P, TestService>) {
    p.requester.close();
    let closed = p.run_until(DEADLINE, |p| p.requester.state() == ConnState::Closed);
    assert!(closed, "the close drained: {:?}", p.requester.state());
    assert_eq!(p.requester.stats().stray_completions, 0);
}

fn unsignaled_calls_one_at_a_time_retire_exactly<N: Net>(net: N) {
    let mut p = pair(&net, &every_fourth(), &test_config());
    // More calls than call slots (8 credits): slots held by unsignaled Sends must come
    // back for the later calls to start.
    for tag in 0..50u8 {
        let data = pattern(64, tag);
        let req = CallRequest::new(msg(&p, PROC_ECHO, &opaque(&data)), 512);
        let o = call(&mut p, req);
        assert_eq!(o.status, CallStatus::Success, "call {tag}");
        assert_eq!(results(&o), &opaque(&data)[..], "call {tag}");
    }
    closes(&mut p);
}

fn unsignaled_calls_in_bursts_retire_exactly<N: Net>(net: N) {
    let mut p = pair(&net, &every_fourth(), &test_config());
    const CALLS: u64 = 40;
    for tag in 0..CALLS {
        let data = pattern(100 + tag as usize, tag as u8);
        let req = CallRequest::new(msg(&p, PROC_ECHO, &opaque(&data)), 512);
        p.requester.submit(req, tag).expect("accepted (queued)");
    }
    let mut outcomes = Vec::new();
    let done = p.run_until(DEADLINE, |p| {
        while let Some(o) = p.next_outcome() {
            outcomes.push(o);
        }
        outcomes.len() as u64 == CALLS
    });
    assert!(done, "{} of {CALLS} outcomes", outcomes.len());
    outcomes.sort_by_key(|o| o.tag);
    for (i, o) in outcomes.iter().enumerate() {
        assert_eq!(o.tag, i as u64, "exactly one outcome per call");
        assert_eq!(o.status, CallStatus::Success);
        assert_eq!(results(o), &opaque(&pattern(100 + i, i as u8))[..]);
    }
    closes(&mut p);
}

/// Calls one at a time until `n` unsignaled Sends wait at the end of the send queue
/// (answered, nothing after them to retire them).
fn leave_unsignaled_tail<P: rpcrdma::fabric::Provider>(
    p: &mut rpcrdma::Pair<P, TestService>,
    n: u32,
) {
    for tag in 0..64u8 {
        let data = pattern(64, tag);
        let req = CallRequest::new(msg(p, PROC_ECHO, &opaque(&data)), 512);
        let o = call(p, req);
        assert_eq!(o.status, CallStatus::Success, "call {tag}");
        if p.requester.core().outstanding().send_queue == n {
            return;
        }
    }
    panic!("never {n} unsignaled Sends at the tail");
}

fn answered_calls_hold_no_slot_a_call_waits_for<N: Net>(net: N) {
    let mut p = pair(&net, &every_fourth(), &test_config());
    // Three answered calls whose Sends are not yet retired (the most in a row).
    leave_unsignaled_tail(&mut p, 3);
    // As many calls as credits at once: none waits for a slot the three hold.
    const CALLS: u64 = 8;
    for tag in 0..CALLS {
        let req = CallRequest::new(msg(&p, PROC_ECHO, &opaque(&pattern(64, 7))), 512);
        p.requester.submit(req, 100 + tag).expect("accepted");
    }
    assert_eq!(p.requester.queued(), 0, "every call started at once");
    let mut n = 0;
    let done = p.run_until(DEADLINE, |p| {
        while let Some(o) = p.next_outcome() {
            assert_eq!(o.status, CallStatus::Success);
            n += 1;
        }
        n == CALLS
    });
    assert!(done, "{n} of {CALLS} outcomes");
    closes(&mut p);
}

fn an_idle_connection_retires_its_trailing_sends<N: Net>(net: N) {
    let mut p = pair(&net, &every_fourth(), &test_config());
    leave_unsignaled_tail(&mut p, 3);
    // Polled while idle: the barrier goes out and its completion retires them.
    let retired = p.run_until(DEADLINE, |p| {
        p.requester.core().outstanding().send_queue == 0
    });
    assert!(retired, "{:?}", p.requester.core().outstanding());
    assert_eq!(p.requester.stats().stray_completions, 0);
    // And the connection goes on as before.
    let req = CallRequest::new(msg(&p, PROC_ECHO, &opaque(&pattern(64, 9))), 512);
    assert_eq!(call(&mut p, req).status, CallStatus::Success);
    closes(&mut p);
}

fn a_close_with_unsignaled_sends_out_reports_each_call_once<N: Net>(net: N) {
    let mut p = pair(&net, &every_fourth(), &test_config());
    // Calls in flight, most of their Sends unsignaled, some posted and some not yet
    // answered, when the connection closes: each call gets exactly one outcome
    // (answered, or lost with the connection), and the close drains.
    const CALLS: u64 = 7;
    for tag in 0..CALLS {
        let req = CallRequest::new(msg(&p, PROC_ECHO, &opaque(&pattern(64, 3))), 512);
        p.requester.submit(req, tag).expect("accepted");
    }
    p.poll(p.requester.clock().now());
    p.requester.close();
    let mut seen = vec![0u32; CALLS as usize];
    let closed = p.run_until(DEADLINE, |p| {
        while let Some(o) = p.next_outcome() {
            if let Some(n) = seen.get_mut(o.tag as usize) {
                *n += 1;
            }
            assert!(
                matches!(o.status, CallStatus::Success | CallStatus::Transport(_)),
                "{:?}",
                o.status
            );
        }
        p.requester.state() == ConnState::Closed
    });
    assert!(closed, "the close drained: {:?}", p.requester.state());
    while let Some(o) = p.next_outcome() {
        if let Some(n) = seen.get_mut(o.tag as usize) {
            *n += 1;
        }
    }
    assert_eq!(seen, vec![1; CALLS as usize], "one outcome per call");
    assert_eq!(p.requester.core().outstanding().send_queue, 0);
    assert_eq!(p.requester.stats().stray_completions, 0);
}

per_provider!(
    a_close_with_unsignaled_sends_out_reports_each_call_once,
    unsignaled_calls_one_at_a_time_retire_exactly,
    unsignaled_calls_in_bursts_retire_exactly,
    answered_calls_hold_no_slot_a_call_waits_for,
    an_idle_connection_retires_its_trailing_sends,
);
