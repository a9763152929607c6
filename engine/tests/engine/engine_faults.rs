//! Nothing lost, nothing duplicated under random faults: a requester and a responder,
//! both over `Faulty<P>` (refused posts, dropped connections, peer aborts, delayed and
//! reordered completions, stalls), run thousands of echo calls over shm, siw and sim.
//! The requester reconnects whenever its connection closes. Every call submitted gets
//! exactly one outcome (a success echoing its own bytes, or a typed failure), before
//! its connection is dropped; faults of every kind were injected; the responder frees
//! every failed connection. One thread drives both ends, with a deadline.

use crate::engine_support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use engine_support::*;
use rpcrdma::fabric::faulty::{FaultConfig, FaultCounters, Faulty, FaultyDevice};
use rpcrdma::fabric::Provider;
use rpcrdma::{
    CallRequest, CallStatus, ConnState, Reconnect, Requester, Responder, TransportError,
};

/// Rates high enough that a few thousand calls meet every kind of fault many times.
fn faults(seed: u64) -> FaultConfig {
    FaultConfig {
        seed,
        post_failure_ppm: 3_000,
        disconnect_ppm: 20_000,
        abort_ppm: 2_000,
        delay_ppm: 100_000,
        max_completion_delay: 20,
        stall_ppm: 2_000,
        max_stall_polls: 200,
    }
}

/// What a run saw.
#[derive(Debug, Default)]
struct Run {
    submitted: u64,
    succeeded: u64,
    failed: u64,
    connections: u64,
    /// Failures by kind.
    not_retransmitted: u64,
    /// Calls the requester sent again on a new connection (reconnecting runs).
    retransmitted: u64,
    reconnects: u64,
}

/// How the requester copes with a lost connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The application makes a new requester; lost calls fail.
    Remake,
    /// `ConnConfig::reconnect`: the requester connects again and resends; every
    /// `non_idempotent_every`-th call is not idempotent (0: none).
    Reconnect {
        non_idempotent_every: u64,
        resend_for: Option<Duration>,
    },
}

fn sum(a: FaultCounters, b: FaultCounters) -> FaultCounters {
    FaultCounters {
        posts_refused: a.posts_refused + b.posts_refused,
        disconnects: a.disconnects + b.disconnects,
        aborts: a.aborts + b.aborts,
        delayed: a.delayed + b.delayed,
        stalls: a.stalls + b.stalls,
    }
}

/// Counts one outcome: it must be for a call without one yet (`pending` holds the bytes
/// each sent), a success echoes its own bytes, and a lost call never reaches the
/// application with `resend` set.
fn record(r: &mut Run, pending: &mut HashMap<u64, Vec<u8>>, o: &rpcrdma::Outcome) {
    let sent = pending
        .remove(&o.tag)
        .unwrap_or_else(|| panic!("outcome for call {} once, and only for a call sent", o.tag));
    assert!(o.resend.is_none(), "the driver keeps lost calls to itself");
    if o.status == CallStatus::Success {
        assert_eq!(
            results(o),
            opaque(&sent),
            "call {} echoed its own bytes",
            o.tag
        );
        r.succeeded += 1;
    } else {
        if o.status == CallStatus::Transport(TransportError::NotRetransmitted) {
            r.not_retransmitted += 1;
        }
        r.failed += 1;
    }
}

/// Both ends of a run, polled together by one thread.
struct Ends<'a, P: Provider> {
    server: &'a mut Server<P>,
    client: &'a mut Requester<Faulty<P>>,
    clock: &'a rpcrdma::fabric::Clock,
}

impl<P: Provider> Ends<'_, P> {
    /// Polls both ends, recording outcomes, while `more` says so; fails after `within`.
    fn drain(
        &mut self,
        r: &mut Run,
        pending: &mut HashMap<u64, Vec<u8>>,
        within: Duration,
        more: impl Fn(&Requester<Faulty<P>>, &HashMap<u64, Vec<u8>>) -> bool,
    ) {
        let end = Instant::now() + within;
        while more(self.client, pending) {
            assert!(Instant::now() < end, "the last calls end: {pending:?}");
            let now = self.clock.now();
            self.server.poll(now);
            self.client.poll(now);
            while let Some(o) = self.client.poll_outcome() {
                record(r, pending, &o);
            }
        }
    }
}

type Server<P> = Responder<Faulty<P>, TestService, fn() -> Option<TestService>>;

/// Runs until `target` calls have outcomes. Returns the run, the server and the
/// injected faults (both ends).
fn run<N: Net>(net: &N, seed: u64, target: u64) -> (Run, Server<N::P>, FaultCounters) {
    run_mode(net, seed, target, Mode::Remake)
}

fn run_mode<N: Net>(
    net: &N,
    seed: u64,
    target: u64,
    mode: Mode,
) -> (Run, Server<N::P>, FaultCounters) {
    let sdev = FaultyDevice::<N::P>::new(net.device(), faults(seed));
    let cdev = FaultyDevice::<N::P>::new(net.device(), faults(seed ^ 0x00c1_1e47));
    let addr = net.addr();
    let server_faults = sdev.report();
    let factory: fn() -> Option<TestService> = || Some(TestService::default());
    let mut server =
        Server::<N::P>::bind(sdev, &addr, test_config(), factory).expect("server binds");
    let mut cfg = test_config();
    if let Mode::Reconnect { resend_for, .. } = mode {
        cfg.reconnect = Some(Reconnect {
            backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(50),
            max_sends: 50,
            resend_for,
            server_has_drc: false,
        });
    }
    let clock = rpcrdma::fabric::Device::clock(&cdev);
    let mut client = Requester::<Faulty<N::P>>::connect_with(&cdev, &addr, &cfg).expect("connects");
    let mut r = Run {
        connections: 1,
        ..Run::default()
    };
    // tag -> the bytes the call sent, for every call without an outcome yet.
    let mut pending: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut next_tag = 0u64;
    let end = Instant::now() + Duration::from_secs(120);
    while r.succeeded + r.failed < target {
        assert!(
            Instant::now() < end,
            "{target} outcomes before the deadline: {r:?}"
        );
        let now = clock.now();
        server.poll(now);
        client.poll(now);
        while let Some(o) = client.poll_outcome() {
            record(&mut r, &mut pending, &o);
        }
        match client.state() {
            ConnState::Closed if mode == Mode::Remake => {
                // The engine gives every call an outcome by the time it reports the
                // connection closed: nothing may be left to lose with it.
                assert!(
                    pending.is_empty(),
                    "calls left without outcome: {:?}",
                    pending.keys()
                );
                drop(client);
                client = Requester::<Faulty<N::P>>::connect_with(&cdev, &addr, &cfg)
                    .expect("reconnects");
                r.connections += 1;
            }
            ConnState::Established if pending.len() < 4 => {
                let data = pattern(16 + (next_tag % 300) as usize, next_tag as u8);
                if let Ok(mut b) = client.alloc_msg() {
                    write_call(&mut b, PROC_ECHO, &opaque(&data));
                    let idempotent = match mode {
                        Mode::Reconnect {
                            non_idempotent_every: n,
                            ..
                        } if n > 0 => !next_tag.is_multiple_of(n),
                        _ => true,
                    };
                    let mut req = CallRequest::new(b, 4000).idempotent(idempotent);
                    req.timeout = Some(Duration::from_secs(2));
                    if client.submit(req, next_tag).is_ok() {
                        pending.insert(next_tag, data);
                        r.submitted += 1;
                    }
                    next_tag += 1;
                }
            }
            _ => {}
        }
    }
    // Let the calls still out finish (a reconnecting requester sends lost ones again),
    // then close.
    // (A reconnecting requester may be between connections: it still owes outcomes.)
    let mut ends = Ends {
        server: &mut server,
        client: &mut client,
        clock: &clock,
    };
    ends.drain(&mut r, &mut pending, DEADLINE * 3, |c, p| {
        !p.is_empty() && (mode != Mode::Remake || c.state() != ConnState::Closed)
    });
    ends.client.close();
    ends.drain(&mut r, &mut pending, DEADLINE, |c, p| {
        c.state() != ConnState::Closed || !p.is_empty()
    });
    if let Some(s) = client.reconnect_stats() {
        r.retransmitted = s.retransmitted;
        r.reconnects = s.reconnects;
    }
    drop(client);
    // The server lets go of every connection once the client's is gone too.
    let end = Instant::now() + DEADLINE;
    while !server.connections().is_empty() {
        assert!(Instant::now() < end, "the server frees its connections");
        server.poll(clock.now());
    }
    assert_eq!(
        r.submitted,
        r.succeeded + r.failed,
        "one outcome per call: {r:?}"
    );
    (r, server, sum(server_faults.counters(), cdev.counters()))
}

/// What every provider's run must show.
fn check(r: &Run, f: &FaultCounters) {
    assert!(r.succeeded > r.failed, "most calls succeed: {r:?}");
    assert!(r.failed > 0, "faults failed some calls: {r:?}");
    assert!(r.connections > 3, "connections were lost and remade: {r:?}");
    assert!(
        f.posts_refused > 0 && f.disconnects > 0 && f.aborts > 0 && f.delayed > 0 && f.stalls > 0,
        "every kind of fault was injected: {f:?}"
    );
}

#[test]
fn no_outcome_lost_or_duplicated_under_faults_shm() {
    let (r, server, f) = run(&ShmNet, 0x5eed_0001, 5000);
    eprintln!("shm: {r:?} {f:?}");
    check(&r, &f);
    drop(server);
}

#[test]
fn no_outcome_lost_or_duplicated_under_faults_siw() {
    let net = SiwNet {
        confirm_completions: true,
    };
    let (r, _server, f) = run(&net, 0x5eed_0002, 1500);
    eprintln!("siw: {r:?} {f:?}");
    check(&r, &f);
}

#[test]
fn no_outcome_lost_or_duplicated_under_faults_sim() {
    let net = SimNetFixture::seeded(0x5eed_0003);
    let (r, _server, f) = run(&net, 0x5eed_0003, 5000);
    eprintln!("sim: {r:?} {f:?}");
    check(&r, &f);
}

/// Reconnecting and resending idempotent calls: every call succeeds (each exactly once
/// in the outcomes), though connections keep breaking.
fn reconnecting<N: Net>(net: &N, seed: u64, target: u64) {
    let mode = Mode::Reconnect {
        non_idempotent_every: 0,
        resend_for: None,
    };
    let (r, _server, f) = run_mode(net, seed, target, mode);
    eprintln!("reconnecting: {r:?} {f:?}");
    assert_eq!(r.failed, 0, "every call succeeded: {r:?}");
    assert_eq!(r.succeeded, r.submitted, "{r:?}");
    assert!(r.reconnects > 3, "connections were lost and remade: {r:?}");
    assert!(r.retransmitted > 0, "lost calls were sent again: {r:?}");
    assert_eq!(r.connections, 1, "one requester throughout: {r:?}");
}

#[test]
fn reconnecting_requester_loses_no_idempotent_call_shm() {
    reconnecting(&ShmNet, 0x5eed_0011, 3000);
}

#[test]
fn reconnecting_requester_loses_no_idempotent_call_siw() {
    let net = SiwNet {
        confirm_completions: true,
    };
    reconnecting(&net, 0x5eed_0012, 1500);
}

#[test]
fn reconnecting_requester_loses_no_idempotent_call_sim() {
    reconnecting(&SimNetFixture::seeded(0x5eed_0013), 0x5eed_0013, 3000);
}

/// Calls that are not idempotent, to a server without a reply cache, are not sent
/// again: lost ones fail with `NotRetransmitted`, and only those fail.
#[test]
fn calls_that_are_not_idempotent_are_not_resent_without_a_server_reply_cache() {
    let mode = Mode::Reconnect {
        non_idempotent_every: 3,
        resend_for: None,
    };
    let (r, _server, _f) = run_mode(&ShmNet, 0x5eed_0014, 3000, mode);
    eprintln!("mixed: {r:?}");
    assert!(r.not_retransmitted > 0, "some were lost: {r:?}");
    assert_eq!(r.failed, r.not_retransmitted, "only those failed: {r:?}");
    assert!(r.retransmitted > 0, "{r:?}");
}

/// A call lost after its resend window (`Reconnect::resend_for`, zero here) is not sent
/// again: it fails with the error of its loss, and nothing is retransmitted.
#[test]
fn a_call_past_its_resend_window_fails_with_its_loss() {
    let mode = Mode::Reconnect {
        non_idempotent_every: 0,
        resend_for: Some(Duration::ZERO),
    };
    let (r, _server, _f) = run_mode(&ShmNet, 0x5eed_0015, 2000, mode);
    eprintln!("window: {r:?}");
    assert!(r.failed > 0, "lost calls failed: {r:?}");
    assert_eq!(r.not_retransmitted, 0, "{r:?}");
    assert!(r.reconnects > 3, "the connection itself was remade: {r:?}");
}

/// A requester that reconnects continues its XID sequence on each new connection
/// instead of restarting it from its seed: a new call never takes the XID of a call
/// made before, which a server's duplicate request cache would answer with that call's
/// cached reply (and a call sent again would be refused as a duplicate of the new one,
/// as the `sim_peer` fuzz target found).
#[test]
fn a_reconnecting_requester_never_reuses_an_xid() {
    use rpcrdma::fabric::sim::{Sim, SimAddr, SimNet};
    let net = SimNet::seeded(0x5eed_0021);
    let _report = net.report_on_panic();
    let (sdev, cdev) = (net.open_device(), net.open_device());
    let addr = SimAddr(unique());
    let mut cfg = test_config();
    cfg.seed = Some(7);
    cfg.reconnect = Some(Reconnect {
        backoff: Duration::from_micros(10),
        ..Reconnect::default()
    });
    let mut server =
        Responder::<Sim, _, _>::bind(sdev, &addr, test_config(), || Some(TestService::default()))
            .expect("listen");
    let mut req = Requester::<Sim>::connect_with(&cdev, &addr, &cfg).expect("connect");
    let mut poll = |req: &mut Requester<Sim>,
                    until: &mut dyn FnMut(&mut Requester<Sim>) -> bool| {
        for _ in 0..100_000 {
            let now = req.clock().now();
            req.poll(now);
            server.poll(now);
            if until(req) {
                return;
            }
        }
        panic!("no progress");
    };
    let mut xids = Vec::new();
    for round in 0..3u64 {
        poll(&mut req, &mut |r| r.state() == ConnState::Established);
        for i in 0..2 {
            let mut b = req.alloc_msg().expect("buffer");
            write_call(&mut b, PROC_NULL, &[]);
            req.submit(CallRequest::new(b, 512), round * 2 + i)
                .expect("submitted");
            let mut got = None;
            poll(&mut req, &mut |r| {
                got = r.poll_outcome();
                got.is_some()
            });
            let o = got.expect("an outcome");
            assert_eq!(o.status, CallStatus::Success);
            assert!(!xids.contains(&o.xid), "XID {:#x} again: {xids:x?}", o.xid);
            xids.push(o.xid);
        }
        assert!(net.drop_connection(req.conn_id()));
        poll(&mut req, &mut |r| r.state() != ConnState::Established);
    }
    let reconnects = req.reconnect_stats().map_or(0, |s| s.reconnects);
    assert!(reconnects >= 2, "{reconnects} reconnects");
}
