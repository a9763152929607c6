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
use rpcrdma::{CallRequest, CallStatus};
use rpcrdma::{CloseReason, ConnState};
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
    null_call_at(server, c, None);
}

/// A NULL call polled at `at` (a hand-held `now` the test moves itself), or at the real
/// time when `None`.
fn null_call_at<P: Provider>(
    server: &mut TestServer<P>,
    c: &mut Requester<P>,
    at: Option<Instant>,
) {
    let mut m = c.alloc_msg().expect("message buffer");
    write_call(&mut m, PROC_NULL, &[]);
    let now = at.unwrap_or_else(Instant::now);
    c.submit_at(CallRequest::new(m, 256), 1, now)
        .expect("submitted");
    let end = Instant::now() + DEADLINE;
    loop {
        let now = at.unwrap_or_else(Instant::now);
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
    // The requester knows it was refused, not cut off.
    assert_eq!(b.close_reason(), Some(CloseReason::Rejected));
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

/// The idle timer runs on a hand-held `now` (the responder reads no clock: every poll
/// carries it), so the busy connection's 100 ms between calls are 100 ms however long
/// the thread is descheduled; on the real clock a stall of 300 ms under load closed the
/// busy connection too.
fn a_silent_connection_is_closed_after_the_idle_timeout<N: Net>(net: N) {
    let idle = Duration::from_millis(400);
    let step = Duration::from_millis(100);
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
    // Every `now` the quiet call is polled at comes after this: its activity is noted
    // no earlier.
    let quiet_sent = Instant::now();
    null_call(&mut s, &mut quiet);
    let start = Instant::now();
    let mut clock = start;
    let mut closed_at = None;
    // The busy one calls every 100 ms of the hand clock, well inside the timeout, for
    // three timeouts.
    while clock < start + 3 * idle {
        null_call_at(&mut s, &mut busy, Some(clock));
        clock += step;
        // The server checks its limits with its CM polls (every 64 polls once the clock
        // moved, every 1024 while it stands still) and at most once per 100 ms of
        // `now`: these polls run exactly one check at this step's time, counted in
        // polls, not in time.
        for _ in 0..2048 {
            s.poll(clock);
            busy.poll(clock);
            quiet.poll(clock);
        }
        if closed_at.is_none() && s.counters().idle_closed > 0 {
            closed_at = Some(clock);
        }
        assert_eq!(busy.state(), ConnState::Established, "the busy one stays");
    }
    let closed_at = closed_at.expect("the quiet one was closed");
    assert!(
        closed_at >= quiet_sent + idle,
        "closed before the idle timeout could pass"
    );
    assert!(
        closed_at <= start + idle + 2 * step,
        "closed within two checks of the timeout: {:?}",
        closed_at - start
    );
    let end = Instant::now() + DEADLINE;
    while quiet.state() != ConnState::Closed {
        s.poll(clock);
        busy.poll(clock);
        quiet.poll(clock);
        assert!(Instant::now() < end, "the quiet requester saw its close");
    }
    assert_eq!(busy.state(), ConnState::Established, "the busy one stays");
    assert_eq!(s.counters().idle_closed, 1);
    null_call_at(&mut s, &mut busy, Some(clock));
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

/// A connect request to an address nobody listens on closes the requester with
/// `CloseReason::Unreachable` (shm: no socket at the name; sim: no listener; siw: the
/// TCP connect is refused).
fn a_connect_to_nobody_is_unreachable<N: Net>(net: N) {
    let (s, addr) = server(&net, ResponderLimits::default());
    drop(s);
    let mut c = connect(&net, &addr);
    let end = Instant::now() + DEADLINE;
    while c.state() != ConnState::Closed {
        c.poll(Instant::now());
        assert!(Instant::now() < end, "still {:?}", c.state());
        std::thread::yield_now();
    }
    assert_eq!(c.close_reason(), Some(CloseReason::Unreachable));
}

per_provider!(
    a_connect_to_nobody_is_unreachable,
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
