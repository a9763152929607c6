//! Poll groups with a shared receive queue (issue #13): the group's connections take
//! their receives from one queue, and each connection's replies grant at most its share
//! of it, which moves as connections come and go (RFC 8166 §3.3: never 0, never more
//! than can be received). Over shm and siw (on siw a Send finding the queue empty is a
//! fatal Terminate, so calls succeeding there prove none did). Real time on one poller
//! that parks when idle; every wait has a deadline.

use crate::engine_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use engine_support::*;
use rpcrdma::fabric::{Device, Provider};
use rpcrdma::{CallRequest, CallStatus, ConnState, Requester, ResponderLimits};
use rpcrdma::{GroupCounters, GroupOptions, GroupSample, PollGroup, PollGroupTask};
use rpcrdma_poller::{IdlePolicy, PollerConfig, PollerGroup};

type Factory = fn() -> Option<TestService>;

/// The shared queue's depth in these tests: with 8 credits and 8 RDMA_DONE receives a
/// connection (`test_config`, extensions on), shares of 8, 8, 7, 4, 2 for 1 to 5
/// connections, and no room for a sixth.
const DEPTH: u32 = 60;
/// Receives a connection may take beyond its credits (RDMA_DONEs of exposed replies).
const DONE_EXTRA: u32 = 8;

/// The share of each of `n` connections (`conn/shared_recv.rs`).
fn share(n: u32) -> Option<u32> {
    let s = (DEPTH / (n + 1)).checked_sub(DONE_EXTRA)?;
    (s >= 1).then_some(s.min(8))
}

/// One group with a shared queue of `DEPTH` serving at `addr`, on one poller.
fn start<N: Net>(net: &N, addr: &<N::P as Provider>::Addr) -> (PollerGroup<()>, Arc<GroupCounters>)
where
    PollGroup<N::P, TestService, Factory>: Send,
{
    let factory: Factory = || Some(TestService::default());
    let mut groups = PollGroup::<N::P, TestService, Factory>::bind_with(
        net.device(),
        addr,
        test_config(),
        factory,
        1,
        ResponderLimits::default(),
        GroupOptions {
            shared_receives: true,
            srq_depth: DEPTH,
            // No idle settling of grants: what the ledger holds follows the calls only.
            release_idle: None,
            ..GroupOptions::default()
        },
    )
    .expect("group listens");
    let g = groups.pop().expect("one group");
    assert_eq!(
        g.shared_receives(),
        Some((DEPTH, DEPTH)),
        "every receive posted"
    );
    let counters = g.counters().clone();
    let config = PollerConfig {
        idle: IdlePolicy::parking(Duration::from_millis(1)),
        ..PollerConfig::default()
    };
    let pollers = PollerGroup::<()>::start(&[0], config).expect("poller");
    pollers
        .add_task(0, Box::new(PollGroupTask::new(g).allow_park(true)))
        .map_err(|_| "add group task")
        .expect("added");
    (pollers, counters)
}

fn wait_until(counters: &GroupCounters, what: &str, ok: impl Fn(&GroupSample) -> bool) {
    let end = Instant::now() + DEADLINE;
    loop {
        let s = counters.sample();
        if ok(&s) {
            return;
        }
        assert!(Instant::now() < end, "{what}: {s:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn connect<N: Net>(
    dev: &<N::P as Provider>::Device,
    addr: &<N::P as Provider>::Addr,
) -> Result<Requester<N::P>, rpcrdma::ConnError>
where
    <N::P as Provider>::Device: Device<P = N::P>,
{
    Requester::connect(dev, addr)
        .config(test_config())
        .timeout(DEADLINE)
        .open()
}

/// One NULL call; returns the credits its reply granted.
fn null_grant<P: Provider>(conn: &mut Requester<P>) -> u32 {
    let mut b = conn.alloc_msg().expect("a send buffer");
    write_call(&mut b, PROC_NULL, &[]);
    let o = conn
        .call(CallRequest::new(b, 256), DEADLINE)
        .expect("submits");
    assert_eq!(o.status, CallStatus::Success);
    conn.credits().granted()
}

/// NULL calls until the grant stops growing (a shared queue's grants start small and
/// double with each reply, up to the share); returns it.
fn warm<P: Provider>(conn: &mut Requester<P>) -> u32 {
    let mut last = null_grant(conn);
    for _ in 0..10 {
        let g = null_grant(conn);
        if g == last {
            return g;
        }
        last = g;
    }
    last
}

/// Polls connection `i` once: the outcomes it had, each a success, and it still up.
fn reap<P: Provider>(c: &mut Requester<P>, i: usize) -> u32 {
    c.poll(Instant::now());
    let mut n = 0;
    while let Some(o) = c.poll_outcome() {
        assert_eq!(o.status, CallStatus::Success, "connection {i}");
        n += 1;
    }
    assert_eq!(c.state(), ConnState::Established, "connection {i}");
    n
}

fn close<P: Provider>(mut c: Requester<P>) {
    c.close();
    let end = Instant::now() + DEADLINE;
    while c.state() != ConnState::Closed {
        c.poll(Instant::now());
        assert!(Instant::now() < end, "closed: {:?}", c.state());
        std::thread::yield_now();
    }
}

/// Each connection's grant is its share of the queue for the connections there are,
/// within what the queue's ledger leaves: a newcomer starts at 1 and doubles with each
/// reply up to its share (8, 8, 7, 4); the
/// older ones are told the smaller share at once but keep their larger grant in the
/// ledger until they have provably read it (RFC 8166 §3.3.1: a requester acts on the
/// latest grant it read), so a fifth that would not fit posts receives of its own (full
/// credits); once the older ones' calls prove the smaller grant read, a sixth fits on
/// the queue; the shares grow back as clients leave.
fn credits_follow_the_connections<N: Net>(net: N)
where
    PollGroup<N::P, TestService, Factory>: Send,
    <N::P as Provider>::Device: Device<P = N::P>,
{
    let addr = net.addr();
    let (pollers, counters) = start(&net, &addr);
    let promised = || counters.sample().srq_promised as u32;
    let dev = net.device();
    let mut conns = Vec::new();
    for n in 1..=4u32 {
        conns.push(connect::<N>(&dev, &addr).expect("connects"));
        let want = share(n).expect("fits");
        wait_until(&counters, "the share moved", |s| {
            s.connections == u64::from(n)
                && s.srq_connections == u64::from(n)
                && s.receive_share == u64::from(want)
        });
        let newest = conns.last_mut().expect("one");
        assert_eq!(
            null_grant(newest),
            1,
            "{n} connections: the newest starts at 1"
        );
        assert_eq!(warm(newest), want, "{n} connections: the newest");
        for (i, c) in conns.iter_mut().enumerate() {
            assert_eq!(warm(c), want, "{n} connections: connection {i}");
        }
    }
    // What they may still send: 8 + 8 + 7 of the older grants (not yet provably read),
    // 4 of the newest, and 8 DONE receives each, within the queue.
    wait_until(&counters, "promised receives", |s| {
        s.srq_promised == u64::from(4 * DONE_EXTRA + 8 + 8 + 7 + 4)
    });
    // A fifth does not fit: receives of its own, full credits.
    let mut fifth = connect::<N>(&dev, &addr).expect("the fifth connects");
    wait_until(&counters, "the fifth accepted", |s| {
        s.connections == 5 && s.srq_connections == 4
    });
    assert_eq!(null_grant(&mut fifth), 8, "its own receives: full credits");
    // The first two keep calling: once a call comes that the old grant could not
    // cover, the smaller one was read, and its receives go back.
    // (Each reply still grants 4; the first smaller grant, 7, settles 8 calls after
    // it was sent, then 4 another 7 calls later.)
    for c in &mut conns[..2] {
        for _ in 0..20 {
            assert_eq!(null_grant(c), 4);
        }
    }
    let end = Instant::now() + DEADLINE;
    while promised() != 4 * DONE_EXTRA + 4 + 4 + 7 + 4 {
        assert!(Instant::now() < end, "settled: {}", promised());
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut sixth = connect::<N>(&dev, &addr).expect("the sixth connects");
    wait_until(&counters, "the sixth on the queue", |s| {
        s.connections == 6 && s.srq_connections == 5
    });
    let g = null_grant(&mut sixth);
    assert!(
        (1..=share(5).expect("fits")).contains(&g),
        "the sixth's grant {g}"
    );
    assert!(promised() <= DEPTH);
    conns.push(sixth);
    // Three of the shared queue's leave (the third, fourth and sixth): the two left
    // get their share of two again.
    for c in conns.drain(2..) {
        close(c);
    }
    wait_until(&counters, "three closed", |s| {
        s.connections == 3
            && s.srq_connections == 2
            && s.receive_share == u64::from(share(2).expect("fits"))
    });
    for c in &mut conns {
        assert_eq!(warm(c), 8);
    }
    assert_eq!(null_grant(&mut fifth), 8);
    conns.push(fifth);
    let s = counters.sample();
    assert_eq!(s.srq_depth, u64::from(DEPTH));
    assert!(s.srq_low >= 1, "a Send never found the queue empty: {s:?}");
    drop(conns);
    pollers
        .shutdown(Instant::now() + DEADLINE)
        .expect("poller stops");
}

/// Five clients each keep as many calls in flight as they are granted (the requester
/// sends only under its credits), 200 calls each: every call succeeds, no connection
/// fails, and the queue never ran dry (on siw, a Send finding it empty would have been
/// a fatal Terminate).
fn granted_credits_never_overrun_the_queue<N: Net>(net: N)
where
    PollGroup<N::P, TestService, Factory>: Send,
    <N::P as Provider>::Device: Device<P = N::P>,
{
    const CALLS: u64 = 200;
    let addr = net.addr();
    let (pollers, counters) = start(&net, &addr);
    let dev = net.device();
    let mut conns: Vec<_> = (0..5)
        .map(|_| connect::<N>(&dev, &addr).expect("connects"))
        .collect();
    wait_until(&counters, "five connections", |s| s.connections == 5);
    let mut submitted = [0u64; 5];
    let mut done = [0u32; 5];
    let end = Instant::now() + 4 * DEADLINE;
    while done.iter().any(|&d| u64::from(d) < CALLS) {
        for (i, c) in conns.iter_mut().enumerate() {
            // More queued than granted: the requester holds the rest back.
            while submitted[i] < CALLS && c.queued() < 16 {
                let mut b = c.alloc_msg().expect("a send buffer");
                write_call(&mut b, PROC_NULL, &[]);
                c.submit(CallRequest::new(b, 256), submitted[i])
                    .expect("submits");
                submitted[i] += 1;
            }
            done[i] += reap(c, i);
        }
        assert!(Instant::now() < end, "calls done: {done:?}");
    }
    for c in &conns {
        assert_eq!(c.credits().granted(), share(5).expect("fits"));
    }
    wait_until(&counters, "calls counted", |s| s.calls >= 5 * CALLS);
    let s = counters.sample();
    assert!(s.srq_low >= 1, "a Send never found the queue empty: {s:?}");
    assert!(s.srq_low < u64::from(DEPTH), "the queue was used: {s:?}");
    drop(conns);
    pollers
        .shutdown(Instant::now() + DEADLINE)
        .expect("poller stops");
}

/// Clients arriving together, while the older ones still hold a larger grant, never
/// overrun the queue: its ledger (`core/srq_ledger.rs`) admits a connection only while
/// what everyone may still send fits, and caps each reply's grant by the room the others
/// leave. Three clients take 8 credits each of a 32-deep queue; eight more arrive (by
/// the share alone all would get 2 each: 24 + 16 = 40 receives for 32); the grants of
/// those on the queue sum to at most its depth, and then every client sends all its
/// grant allows at once and every call succeeds (on siw a Send finding the queue empty
/// would be a fatal Terminate).
fn arrivals_together_never_overrun_the_queue<N: Net>(net: N)
where
    PollGroup<N::P, TestService, Factory>: Send + 'static,
    <N::P as Provider>::Device: Device<P = N::P>,
    N::P: 'static,
{
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;
    const QUEUE: u32 = 32;
    let addr = net.addr();
    let factory: Factory = || Some(TestService::default());
    // No RDMA_DONE receives (extensions off on the server): the queue holds credits only.
    let cfg = rpcrdma::ConnConfig {
        extensions: false,
        ..test_config()
    };
    let mut groups = PollGroup::<N::P, TestService, Factory>::bind_with(
        net.device(),
        &addr,
        cfg,
        factory,
        1,
        ResponderLimits {
            max_connections: 16,
            ..ResponderLimits::default()
        },
        GroupOptions {
            shared_receives: true,
            srq_depth: QUEUE,
            release_idle: None,
            ..GroupOptions::default()
        },
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
    let ledger = || {
        group
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .shared_receive_ledger()
            .expect("a shared queue")
    };
    let dev = net.device();
    let mut conns = Vec::new();
    for _ in 0..3 {
        let mut c = connect::<N>(&dev, &addr).expect("connects");
        assert_eq!(warm(&mut c), 8, "a full share");
        conns.push(c);
    }
    for _ in 3..11 {
        let mut c = connect::<N>(&dev, &addr).expect("connects");
        let g = warm(&mut c);
        assert!(g >= 1, "never 0");
        conns.push(c);
        let (promised, floor, _) = ledger();
        assert!(promised <= QUEUE, "promised {promised} of {QUEUE}");
        assert_eq!(floor, 1, "the share with the group full (32 / 17)");
    }
    // The fourth grew to its share (6 of 32 / 5), the fifth to what was left (2); the
    // other six did not fit and post receives of their own. By the share alone all
    // eleven would be on the queue with 2 each: 24 + 16 = 40 receives for 32.
    let on_queue: Vec<bool> = {
        let g = group.lock().unwrap_or_else(|e| e.into_inner());
        g.connections()
            .iter()
            .map(|c| c.on_shared_receives())
            .collect()
    };
    let granted: u32 = conns
        .iter()
        .zip(&on_queue)
        .filter(|(_, &q)| q)
        .map(|(c, _)| c.credits().granted())
        .sum();
    assert_eq!(on_queue.iter().filter(|&&q| q).count(), 5, "{on_queue:?}");
    assert_eq!(granted, QUEUE, "the queue's grants: 8 + 8 + 8 + 6 + 2");
    // Every client sends at once as many calls as its grant allows (16 queued each;
    // the requester holds the rest back): all of it finds posted receives.
    for c in &mut conns {
        for t in 0..16u64 {
            let mut b = c.alloc_msg().expect("a send buffer");
            write_call(&mut b, PROC_NULL, &[]);
            c.submit(CallRequest::new(b, 256), t).expect("submits");
        }
        c.poll(Instant::now());
    }
    let mut done = vec![0u32; conns.len()];
    let end = Instant::now() + 2 * DEADLINE;
    while done.iter().any(|&d| d < 16) {
        for (i, c) in conns.iter_mut().enumerate() {
            done[i] += reap(c, i);
        }
        assert!(Instant::now() < end, "calls done: {done:?}");
    }
    assert!(ledger().0 <= QUEUE);
    drop(conns);
    stop.store(true, Ordering::Release);
    driver.join().expect("the driver thread");
}

/// A client that reads its replies only now and then (a parked client, as
/// `rpcrdma-perf scale --client-park` runs it), with every credit in use on two
/// connections of one group: between two of its wake-ups the group polls twice, and in
/// each wake-up the client reads every reply it has and sends as many new calls. A
/// responder holds a call's context until its reply's Send completes, two per credit;
/// on shm the reply completes once the client has executed it, which it did before
/// sending the call that follows. The group must reap those completions before it takes
/// the calls they enabled: reaping receives first, one batch of new calls at a time,
/// the contexts ran out by the third wake-up and calls within the credits were dropped
/// (RFC 8166 §3.3.1 allows that only beyond them), so they never completed and the
/// connection collapsed to the few calls left (measured: 61,000 calls/s with one
/// connection, 4,000 with two). Deterministic: one thread polls both ends in turn, and
/// the number of polls is bounded, not timed.
fn a_parked_client_loses_no_call<N: Net>(net: N)
where
    PollGroup<N::P, TestService, Factory>: Send + 'static,
    <N::P as Provider>::Device: Device<P = N::P>,
    N::P: 'static,
{
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Mutex;
    // As `rpcrdma-perf scale --depth 32` runs it: 33 credits, 32 calls in flight on
    // each connection (a full completion batch), and a queue with room for both
    // connections' grants twice over.
    const CREDITS: u32 = 33;
    const IN_FLIGHT: u64 = 32;
    const CONNS: usize = 2;
    const WAKES: u32 = 24;
    let addr = net.addr();
    let factory: Factory = || Some(TestService::default());
    let cfg = rpcrdma::ConnConfig {
        credits: CREDITS,
        extensions: false,
        send_bufs: 128,
        ..test_config()
    };
    let mut groups = PollGroup::<N::P, TestService, Factory>::bind_with(
        net.device(),
        &addr,
        cfg.clone(),
        factory,
        1,
        ResponderLimits::default(),
        GroupOptions {
            shared_receives: true,
            srq_depth: 2 * (CREDITS + 2) * CONNS as u32,
            release_idle: None,
            ..GroupOptions::default()
        },
    )
    .expect("group listens");
    let group = Arc::new(Mutex::new(groups.pop().expect("one group")));
    // A driver thread serves while the connections come up and their grants grow.
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
    let dev = net.device();
    let mut conns = Vec::new();
    for _ in 0..CONNS {
        let mut c = Requester::connect(&dev, &addr)
            .config(cfg.clone())
            .timeout(DEADLINE)
            .open()
            .expect("connects");
        assert_eq!(warm(&mut c), CREDITS, "a full grant");
        conns.push(c);
    }
    stop.store(true, Ordering::Release);
    driver.join().expect("the driver thread");
    let mut group = Arc::try_unwrap(group)
        .map_err(|_| "the driver is gone")
        .expect("one owner")
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());
    let submit = |c: &mut Requester<N::P>, tag: u64| {
        let mut b = c.alloc_msg().expect("a send buffer");
        write_call(&mut b, PROC_NULL, &[]);
        c.submit(CallRequest::new(b, 256), tag).expect("submits");
    };
    let mut sent = 0u64;
    for c in &mut conns {
        for _ in 0..IN_FLIGHT {
            submit(c, sent);
            sent += 1;
        }
        c.poll(Instant::now());
    }
    // One wake-up: every reply there is read, a new call sent for each.
    let wake = |conns: &mut Vec<Requester<N::P>>, sent: &mut u64| -> u64 {
        let mut got = 0;
        for (i, c) in conns.iter_mut().enumerate() {
            let n = reap(c, i);
            for _ in 0..n {
                submit(c, *sent);
                *sent += 1;
            }
            c.poll(Instant::now());
            got += u64::from(n);
        }
        got
    };
    let mut done = 0u64;
    for _ in 0..WAKES {
        group.poll(Instant::now());
        group.poll(Instant::now());
        done += wake(&mut conns, &mut sent);
    }
    // Stop sending; whatever is in flight must come back (bounded by polls, not time).
    for _ in 0..10_000 {
        if done == sent {
            break;
        }
        group.poll(Instant::now());
        for (i, c) in conns.iter_mut().enumerate() {
            done += u64::from(reap(c, i));
        }
    }
    let overruns: Vec<u64> = group
        .connections()
        .iter()
        .map(|c| c.stats().overruns)
        .collect();
    assert_eq!(overruns, vec![0; CONNS], "calls within the credits dropped");
    assert_eq!(done, sent, "every call sent completed");
    assert!(
        done >= u64::from(WAKES) * IN_FLIGHT,
        "{done} calls over {WAKES} wake-ups of two connections with {IN_FLIGHT} each in flight"
    );
    for c in conns {
        close(c);
    }
}

mod shm {
    #[test]
    fn credits_follow_the_connections() {
        super::credits_follow_the_connections(super::engine_support::ShmNet);
    }
    #[test]
    fn granted_credits_never_overrun_the_queue() {
        super::granted_credits_never_overrun_the_queue(super::engine_support::ShmNet);
    }
    #[test]
    fn arrivals_together_never_overrun_the_queue() {
        super::arrivals_together_never_overrun_the_queue(super::engine_support::ShmNet);
    }
    #[test]
    fn a_parked_client_loses_no_call() {
        super::a_parked_client_loses_no_call(super::engine_support::ShmNet);
    }
}

mod siw {
    use super::engine_support::SiwNet;
    #[test]
    fn credits_follow_the_connections() {
        super::credits_follow_the_connections(SiwNet {
            confirm_completions: false,
        });
    }
    #[test]
    fn granted_credits_never_overrun_the_queue() {
        super::granted_credits_never_overrun_the_queue(SiwNet {
            confirm_completions: true,
        });
    }
    #[test]
    fn arrivals_together_never_overrun_the_queue() {
        super::arrivals_together_never_overrun_the_queue(SiwNet {
            confirm_completions: true,
        });
    }
}
