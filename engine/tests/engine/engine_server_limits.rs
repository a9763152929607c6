//! The limits a server operator sets (`ResponderLimits`), end to end over shm, sim and siw:
//! a connection cap that rejects the request past it, an idle timeout that closes a
//! silent connection (and only a silent one), a handshake timeout for a connection
//! whose requester never finishes connecting, and the memory of an idle connection's
//! free buffers given back (`Responder::set_release_idle`) without breaking it. Every
//! wait has a deadline.

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

/// A long ECHO of `data` (a Read chunk out, a Reply chunk back), checked byte for byte.
fn long_echo<P: Provider>(server: &mut TestServer<P>, c: &mut Requester<P>, data: &[u8]) {
    let mut m = c.alloc_large().expect("large buffer");
    write_call(&mut m, PROC_ECHO, &opaque(data));
    c.submit(CallRequest::new(m, data.len() as u32 + 1024), 2)
        .expect("submitted");
    let end = Instant::now() + DEADLINE;
    loop {
        let now = Instant::now();
        server.poll(now);
        c.poll(now);
        if let Some(o) = c.poll_outcome() {
            assert_eq!(o.status, CallStatus::Success);
            assert!(results(&o) == opaque(data), "echoed exactly");
            return;
        }
        assert!(Instant::now() < end, "no reply to ECHO");
        std::thread::yield_now();
    }
}

/// Whether every buffer now free in `pool` reads as zero.
fn free_buffers_zero(pool: &rpcrdma_pools::Pool) -> bool {
    let mut bufs = Vec::new();
    while let Ok(b) = pool.get() {
        bufs.push(b);
    }
    assert!(!bufs.is_empty(), "free buffers to look at");
    let zero = bufs.iter().all(|b| b.as_slice().iter().all(|&x| x == 0));
    for b in bufs {
        pool.put(b).expect("its own buffer");
    }
    zero
}

/// A connection idle past `set_release_idle` gives its free buffers' memory back (they
/// read as zero: the pages were released), once per idle spell, and serves calls
/// byte-exact afterwards.
fn an_idle_connection_gives_its_free_buffers_back_and_still_works<N: Net>(net: N) {
    let (mut s, addr) = server(&net, ResponderLimits::default());
    s.set_release_idle(Some(Duration::from_millis(50)));
    let mut c = connect(&net, &addr);
    drive(&mut s, &mut [&mut c], "established", |s, c| {
        c[0].state() == ConnState::Established
            && s.connections().first().map(|x| x.state()) == Some(ConnState::Established)
    });
    let first = pattern(40 * 1024, 1);
    long_echo(&mut s, &mut c, &first);
    let releases = s.counters().idle_releases;
    let large = s.connections()[0].resources().pools().large.clone();
    drive(&mut s, &mut [&mut c], "released", |s, _| {
        s.counters().idle_releases > releases
    });
    assert!(s.counters().released_bytes > 0);
    // The Read chunk's sink held the call's data: every free buffer reads as zero now,
    // so its pages were given back (the core's cache was flushed into the pool first).
    assert!(
        free_buffers_zero(&large),
        "the free large buffers were released"
    );
    // It still works, with the data exact, and is released again after.
    let second = pattern(40 * 1024, 2);
    long_echo(&mut s, &mut c, &second);
    null_call(&mut s, &mut c);
    let releases = s.counters().idle_releases;
    drive(&mut s, &mut [&mut c], "released again", |s, _| {
        s.counters().idle_releases > releases
    });
    assert!(free_buffers_zero(&large));
    long_echo(&mut s, &mut c, &pattern(1000, 3));
}

per_provider!(
    connections_past_the_cap_are_rejected,
    a_silent_connection_is_closed_after_the_idle_timeout,
    an_idle_connection_gives_its_free_buffers_back_and_still_works,
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
