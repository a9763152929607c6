//! Pools per poll group (issue #13; DESIGN.md, "Pools per poll group"): on a device
//! whose registrations pin (kernel verbs) a group's connections draw receive, reply-header
//! and large buffers from the group's pools, each connection registering the group's
//! arenas in its own protection domain. Forced on here over siw (whose registrations do
//! not pin, so the plumbing runs through a real provider on the host: own domains, key
//! rewriting, buffers drawn per call and returned), and refused on shm, whose peers map
//! their domain's registrations whole. The lab measures the memory on rxe0 and siw0
//! (`engine/tests/verbs/engine_verbs_group_memory.rs`).

use crate::engine_support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use engine_support::*;
use rpcrdma::fabric::{Device, Provider};
use rpcrdma::{CallRequest, CallStatus, Requester, ResponderLimits};
use rpcrdma::{GroupOptions, PollGroup};

type Factory = fn() -> Option<TestService>;
type Group<P> = Arc<Mutex<PollGroup<P, TestService, Factory>>>;

/// Connections of the test: more than the group's header pool could give every reply
/// context a buffer of its own for life.
const CONNS: usize = 12;
/// Payload of the long ECHO calls (a Read chunk pulled into a large buffer of the
/// group's, the reply through a Reply chunk from another; the test configuration's
/// large buffers are 64 KiB).
const LONG: usize = 60 * 1024;

/// One group at `addr` with `opts`, polled by a thread of its own until `stop`.
fn serve<N: Net>(
    net: &N,
    addr: &<N::P as Provider>::Addr,
    opts: GroupOptions,
) -> (Group<N::P>, Arc<AtomicBool>, std::thread::JoinHandle<()>)
where
    PollGroup<N::P, TestService, Factory>: Send + 'static,
    N::P: 'static,
{
    let factory: Factory = || Some(TestService::default());
    let mut groups = PollGroup::<N::P, TestService, Factory>::bind_with(
        net.device(),
        addr,
        test_config(),
        factory,
        1,
        ResponderLimits::default(),
        opts,
    )
    .expect("group listens");
    let group = Arc::new(Mutex::new(groups.pop().expect("one group")));
    let stop = Arc::new(AtomicBool::new(false));
    let driver = {
        let (group, stop) = (group.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                let did = group
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .poll(Instant::now());
                if did == 0 {
                    std::thread::yield_now();
                }
            }
        })
    };
    (group, stop, driver)
}

fn connect<N: Net>(
    dev: &<N::P as Provider>::Device,
    addr: &<N::P as Provider>::Addr,
) -> Requester<N::P>
where
    <N::P as Provider>::Device: Device<P = N::P>,
{
    Requester::connect(dev, addr)
        .config(test_config())
        .timeout(DEADLINE)
        .open()
        .expect("connects")
}

fn null_call<P: Provider>(conn: &mut Requester<P>, i: usize) {
    let mut b = conn.alloc_msg().expect("a send buffer");
    write_call(&mut b, PROC_NULL, &[]);
    let o = conn
        .call(CallRequest::new(b, 256), DEADLINE)
        .expect("submits");
    assert_eq!(o.status, CallStatus::Success, "NULL on connection {i}");
}

fn long_echo<P: Provider>(conn: &mut Requester<P>, i: usize) {
    let data = pattern(LONG, i as u8);
    let mut b = conn.alloc_large().expect("a large buffer");
    write_call(&mut b, PROC_ECHO, &opaque(&data));
    let o = conn
        .call(CallRequest::new(b, LONG as u32 + 1024), DEADLINE)
        .expect("submits");
    assert_eq!(o.status, CallStatus::Success, "ECHO on connection {i}");
    assert!(results(&o) == opaque(&data), "echoed exactly on {i}");
}

/// `k` NULL calls on each of `conns` at once.
fn pipelined<P: Provider>(conns: &mut [Requester<P>], k: u64) {
    for c in conns.iter_mut() {
        for t in 0..k {
            let mut b = c.alloc_msg().expect("a send buffer");
            write_call(&mut b, PROC_NULL, &[]);
            let mut req = CallRequest::new(b, 256);
            req.timeout = Some(DEADLINE);
            c.submit(req, t).expect("submits");
        }
    }
    let mut done = vec![0u64; conns.len()];
    let end = Instant::now() + 2 * DEADLINE;
    while done.iter().any(|&d| d < k) {
        for (i, c) in conns.iter_mut().enumerate() {
            c.poll(c.clock().now());
            while let Some(o) = c.poll_outcome() {
                assert_eq!(o.status, CallStatus::Success, "NULL on {i}");
                done[i] += 1;
            }
        }
        assert!(Instant::now() < end, "calls done: {done:?}");
    }
}

/// Twelve connections of one group draw from its pools: the header pool holds one
/// connection's worth (48 buffers for 12 x 16 reply contexts, so contexts can only
/// draw theirs per call), every connection has a protection domain and a parking pool
/// of its own but the same large and header pools, NULL and long calls work on every
/// one (sequentially, then 4 x 8 NULLs at once), no call starved, and once the group
/// idles every buffer is back in the group's pools.
fn connections_draw_from_the_group_pools<N: Net>(net: N)
where
    PollGroup<N::P, TestService, Factory>: Send + 'static,
    <N::P as Provider>::Device: Device<P = N::P>,
    N::P: 'static,
{
    let addr = net.addr();
    let opts = GroupOptions {
        group_pools: Some(true),
        group_pool_conns: 1,
        release_idle: Some(Duration::from_millis(50)),
        ..GroupOptions::default()
    };
    let (group, stop, driver) = serve(&net, &addr, opts);
    let dev = net.device();
    let mut conns: Vec<_> = (0..CONNS).map(|_| connect::<N>(&dev, &addr)).collect();
    {
        let g = group.lock().unwrap_or_else(|e| e.into_inner());
        let cs = g.connections();
        assert_eq!(cs.len(), CONNS);
        let first = cs[0].resources().pools();
        let headers = first
            .headers
            .as_ref()
            .expect("headers drawn from the group");
        assert!(
            headers.count() < CONNS * 16,
            "{} header buffers: fewer than the contexts",
            headers.count()
        );
        for c in cs {
            let p = c.resources().pools();
            assert_eq!(p.large.id(), first.large.id(), "one large pool");
            assert_eq!(p.recv.id(), first.recv.id(), "one receive pool");
            let h = p.headers.as_ref().expect("headers drawn from the group");
            assert_eq!(h.id(), headers.id(), "one header pool");
            assert!(
                p.send.keys().is_none(),
                "parked buffers are never registered"
            );
        }
        let parks: std::collections::HashSet<u32> =
            cs.iter().map(|c| c.resources().pools().send.id()).collect();
        assert_eq!(parks.len(), CONNS, "a parking pool each");
    }
    for (i, c) in conns.iter_mut().enumerate() {
        null_call(c, i);
        long_echo(c, i);
        null_call(c, i);
    }
    pipelined(&mut conns[..4], 8);
    // Idle: the connections' caches go back to the group's pools. The clients keep
    // polling: over siw a reply's Send completes only once its confirmation Read is
    // answered, which a client that stopped polling after its outcome never does.
    let end = Instant::now() + DEADLINE;
    loop {
        for c in conns.iter_mut() {
            c.poll(c.clock().now());
            assert!(c.poll_outcome().is_none(), "no call left");
        }
        {
            let g = group.lock().unwrap_or_else(|e| e.into_inner());
            let cs = g.connections();
            let starved: u64 = cs.iter().map(|c| c.stats().header_starved).sum();
            assert_eq!(starved, 0, "no call found the header pool empty");
            let p = cs[0].resources().pools();
            let headers = p.headers.as_ref().expect("group headers");
            if headers.is_full() && p.large.is_full() {
                let calls: u64 = cs.iter().map(|c| c.stats().calls).sum();
                assert_eq!(calls, (CONNS * 3 + 4 * 8) as u64);
                break;
            }
            assert!(
                Instant::now() < end,
                "group pools back: headers {:?}, large {:?}",
                headers.stats(),
                p.large.stats()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Still serving after the idle release.
    for (i, c) in conns.iter_mut().enumerate() {
        null_call(c, i);
    }
    drop(conns);
    stop.store(true, Ordering::Release);
    driver.join().expect("the driver thread");
}

/// A call that finds the group's header pool empty waits for a buffer instead of being
/// dropped (a call within the credits that is dropped is lost until the requester's
/// timeout): with every header buffer held by the test, a NULL call stays unanswered
/// and counted in `header_starved`, not in `overruns`, and is answered once the
/// buffers are back, though its connection has no completion of its own to wake it.
fn a_call_waits_for_a_header_buffer<N: Net>(net: N)
where
    PollGroup<N::P, TestService, Factory>: Send + 'static,
    <N::P as Provider>::Device: Device<P = N::P>,
    N::P: 'static,
{
    let addr = net.addr();
    let opts = GroupOptions {
        group_pools: Some(true),
        group_pool_conns: 1,
        release_idle: Some(Duration::from_millis(50)),
        ..GroupOptions::default()
    };
    let (group, stop, driver) = serve(&net, &addr, opts);
    let dev = net.device();
    let mut conns: Vec<_> = (0..2).map(|_| connect::<N>(&dev, &addr)).collect();
    for (i, c) in conns.iter_mut().enumerate() {
        null_call(c, i);
    }
    // Idle: the connections' caches are back in the pool; then the test takes every
    // header buffer.
    let end = Instant::now() + DEADLINE;
    let (headers, held) = loop {
        // The requesters run too: a reply's Send completes once its peer took it.
        for c in conns.iter_mut() {
            c.poll(c.clock().now());
        }
        {
            let g = group.lock().unwrap_or_else(|e| e.into_inner());
            let h = g.connections()[0].resources().pools().headers.clone();
            let h = h.expect("group headers");
            if h.is_full() {
                let mut held = Vec::with_capacity(h.count());
                while let Ok(b) = h.get() {
                    held.push(b);
                }
                assert_eq!(held.len(), h.count(), "every header buffer held");
                break (h, held);
            }
            let active: Vec<usize> = g.connections().iter().map(|c| c.active()).collect();
            assert!(
                Instant::now() < end,
                "headers back: {:?}, calls in progress {active:?}",
                h.stats()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut b = conns[0].alloc_msg().expect("a send buffer");
    write_call(&mut b, PROC_NULL, &[]);
    let mut req = CallRequest::new(b, 256);
    req.timeout = Some(2 * DEADLINE);
    conns[0].submit(req, 7).expect("submits");
    let starved = |g: &Group<N::P>| {
        let g = g.lock().unwrap_or_else(|e| e.into_inner());
        let cs = g.connections();
        (
            cs.iter().map(|c| c.stats().header_starved).sum::<u64>(),
            cs.iter().map(|c| c.stats().overruns).sum::<u64>(),
        )
    };
    let end = Instant::now() + DEADLINE;
    loop {
        let c = &mut conns[0];
        c.poll(c.clock().now());
        assert!(
            c.poll_outcome().is_none(),
            "answered with no header buffer to answer with"
        );
        let (waits, overruns) = starved(&group);
        assert_eq!(overruns, 0, "the call was dropped as an overrun");
        if waits > 0 {
            break;
        }
        assert!(Instant::now() < end, "the call never reached the responder");
    }
    for b in held {
        assert!(headers.put(b).is_ok(), "a header buffer back to its pool");
    }
    let end = Instant::now() + DEADLINE;
    let o = loop {
        let c = &mut conns[0];
        c.poll(c.clock().now());
        if let Some(o) = c.poll_outcome() {
            break o;
        }
        assert!(Instant::now() < end, "the waiting call was never answered");
    };
    assert_eq!(o.tag, 7);
    assert_eq!(
        o.status,
        CallStatus::Success,
        "answered once a buffer came back"
    );
    assert_eq!(starved(&group), (1, 0), "one wait, no drop");
    for (i, c) in conns.iter_mut().enumerate() {
        null_call(c, i);
    }
    drop(headers);
    drop(conns);
    stop.store(true, Ordering::Release);
    driver.join().expect("the driver thread");
}

/// On shm a peer maps its domain's registrations whole: asked for group pools, a group
/// keeps each connection's own (and its calls work).
fn shm_keeps_pools_per_connection<N: Net>(net: N)
where
    PollGroup<N::P, TestService, Factory>: Send + 'static,
    <N::P as Provider>::Device: Device<P = N::P>,
    N::P: 'static,
{
    let addr = net.addr();
    let opts = GroupOptions {
        group_pools: Some(true),
        ..GroupOptions::default()
    };
    let (group, stop, driver) = serve(&net, &addr, opts);
    let dev = net.device();
    let mut conns: Vec<_> = (0..2).map(|_| connect::<N>(&dev, &addr)).collect();
    for (i, c) in conns.iter_mut().enumerate() {
        null_call(c, i);
        long_echo(c, i);
    }
    {
        let g = group.lock().unwrap_or_else(|e| e.into_inner());
        let cs = g.connections();
        assert!(cs.iter().all(|c| c.resources().pools().headers.is_none()));
        assert_ne!(
            cs[0].resources().pools().large.id(),
            cs[1].resources().pools().large.id(),
            "pools of their own"
        );
    }
    drop(conns);
    stop.store(true, Ordering::Release);
    driver.join().expect("the driver thread");
}

mod shm {
    #[test]
    fn shm_keeps_pools_per_connection() {
        super::shm_keeps_pools_per_connection(super::engine_support::ShmNet);
    }
}

mod siw {
    use super::engine_support::SiwNet;
    #[test]
    fn connections_draw_from_the_group_pools() {
        super::connections_draw_from_the_group_pools(SiwNet {
            confirm_completions: true,
        });
    }

    #[test]
    fn a_call_waits_for_a_header_buffer() {
        super::a_call_waits_for_a_header_buffer(SiwNet {
            confirm_completions: true,
        });
    }
}
