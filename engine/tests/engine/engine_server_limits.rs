//! The limits a server operator sets (`ResponderLimits`), end to end over shm, sim and siw:
//! a connection cap that rejects the request past it, an idle timeout that closes a
//! silent connection (and only a silent one), and a handshake timeout for a connection
//! whose requester never finishes connecting. Every wait has a deadline.

use crate::engine_support;

use std::time::{Duration, Instant};

use engine_support::*;
use rpcrdma::fabric::Provider;
use rpcrdma::ConnState;
use rpcrdma::{CallRequest, CallStatus};
use rpcrdma::{Requester, Responder, ResponderLimits};

type TestServer<P> = Responder<P, TestService, fn() -> Option<TestService>>;

fn server<N: Net>(
    net: &N,
    limits: ResponderLimits,
) -> (TestServer<N::P>, <N::P as Provider>::Addr) {
    let addr = net.addr();
    let factory: fn() -> Option<TestService> = || Some(TestService::default());
    let mut s = Responder::bind(net.device(), &addr, test_config(), factory).expect("server binds");
    s.set_limits(limits);
    (s, addr)
}

/// Polls the server and `clients` until `done` says so, or fails at the deadline.
fn drive<P: Provider>(
    server: &mut TestServer<P>,
    clients: &mut [&mut Requester<P>],
    what: &str,
    mut done: impl FnMut(&TestServer<P>, &[&mut Requester<P>]) -> bool,
) {
    let end = Instant::now() + DEADLINE;
    loop {
        let now = Instant::now();
        server.poll(now);
        for c in clients.iter_mut() {
            c.poll(now);
        }
        if done(server, clients) {
            return;
        }
        assert!(Instant::now() < end, "{what}: not within {DEADLINE:?}");
        std::thread::yield_now();
    }
}

fn null_call<P: Provider>(server: &mut TestServer<P>, c: &mut Requester<P>) {
    let mut m = c.alloc_msg().expect("message buffer");
    write_call(&mut m, PROC_NULL, &[]);
    c.submit(CallRequest::new(m, 256), 1).expect("submitted");
    let end = Instant::now() + DEADLINE;
    loop {
        let now = Instant::now();
        server.poll(now);
        c.poll(now);
        if let Some(o) = c.poll_outcome() {
            assert_eq!(o.status, CallStatus::Success);
            return;
        }
        assert!(Instant::now() < end, "no reply to NULL");
        std::thread::yield_now();
    }
}

fn connect<N: Net>(net: &N, addr: &<N::P as Provider>::Addr) -> Requester<N::P> {
    let dev = net.device();
    let mut cfg = test_config();
    cfg.registration = net.registration();
    Requester::connect_with(&dev, addr, &cfg).expect("connect starts")
}

fn connections_past_the_cap_are_rejected<N: Net>(net: N) {
    let limits = ResponderLimits {
        max_connections: 1,
        ..ResponderLimits::default()
    };
    let (mut s, addr) = server(&net, limits);
    let mut a = connect(&net, &addr);
    drive(&mut s, &mut [&mut a], "first connection", |_, c| {
        c[0].state() == ConnState::Established
    });
    null_call(&mut s, &mut a);
    let mut b = connect(&net, &addr);
    drive(&mut s, &mut [&mut a, &mut b], "second refused", |_, c| {
        c[1].state() == ConnState::Closed
    });
    assert_eq!(s.counters().over_limit, 1);
    assert_eq!(s.counters().accepted, 1);
    assert_eq!(
        a.state(),
        ConnState::Established,
        "the first one is untouched"
    );
    null_call(&mut s, &mut a);
    // Room again once the first one is gone.
    a.close();
    drive(&mut s, &mut [&mut a], "first closed", |s, c| {
        c[0].state() == ConnState::Closed && s.connections().is_empty()
    });
    let mut c = connect(&net, &addr);
    drive(&mut s, &mut [&mut c], "third connection", |_, c| {
        c[0].state() == ConnState::Established
    });
    null_call(&mut s, &mut c);
    assert_eq!(s.counters().accepted, 2);
}

fn a_silent_connection_is_closed_after_the_idle_timeout<N: Net>(net: N) {
    let idle = Duration::from_millis(400);
    let limits = ResponderLimits {
        idle_timeout: Some(idle),
        ..ResponderLimits::default()
    };
    let (mut s, addr) = server(&net, limits);
    let mut busy = connect(&net, &addr);
    let mut quiet = connect(&net, &addr);
    drive(&mut s, &mut [&mut busy, &mut quiet], "both up", |_, c| {
        c.iter().all(|c| c.state() == ConnState::Established)
    });
    null_call(&mut s, &mut quiet);
    // The busy one calls every 100 ms, well inside the timeout, for three timeouts.
    let start = Instant::now();
    while start.elapsed() < 3 * idle {
        null_call(&mut s, &mut busy);
        let pause = Instant::now() + Duration::from_millis(100);
        while Instant::now() < pause {
            let now = Instant::now();
            s.poll(now);
            busy.poll(now);
            quiet.poll(now);
            std::thread::yield_now();
        }
    }
    drive(
        &mut s,
        &mut [&mut busy, &mut quiet],
        "quiet closed",
        |_, c| c[1].state() == ConnState::Closed,
    );
    assert!(
        start.elapsed() >= idle,
        "closed before the idle timeout could pass"
    );
    assert_eq!(busy.state(), ConnState::Established, "the busy one stays");
    assert_eq!(s.counters().idle_closed, 1);
    null_call(&mut s, &mut busy);
}

per_provider!(
    connections_past_the_cap_are_rejected,
    a_silent_connection_is_closed_after_the_idle_timeout,
);

/// shm accepts on the requester's REQ and establishes on its RTU, which the requester
/// sends from its own poll: a requester that never polls again leaves the server's
/// connection connecting, holding its pools, until the handshake timeout.
#[test]
fn a_connection_that_never_establishes_is_closed_at_the_handshake_timeout() {
    let net = ShmNet;
    let limits = ResponderLimits {
        handshake_timeout: Duration::from_millis(300),
        ..ResponderLimits::default()
    };
    let (mut s, addr) = server(&net, limits);
    let stuck = connect(&net, &addr);
    let start = Instant::now();
    drive(&mut s, &mut [], "request accepted", |s, _| {
        s.counters().accepted == 1
    });
    drive(&mut s, &mut [], "stuck connection closed", |s, _| {
        s.connections().is_empty()
    });
    assert!(start.elapsed() >= Duration::from_millis(300));
    assert_eq!(s.counters().handshake_timeouts, 1);
    drop(stuck);
}
