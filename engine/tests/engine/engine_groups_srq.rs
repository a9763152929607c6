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

fn close<P: Provider>(mut c: Requester<P>) {
    c.close();
    let end = Instant::now() + DEADLINE;
    while c.state() != ConnState::Closed {
        c.poll(Instant::now());
        assert!(Instant::now() < end, "closed: {:?}", c.state());
        std::thread::yield_now();
    }
}

/// Each connection's grant is its share of the queue for the connections there are:
/// it shrinks as clients connect (8, 8, 7, 4, 2); a sixth, which would leave no share,
/// posts receives of its own (full credits) while the others keep theirs; the shares
/// grow back as clients leave.
fn credits_follow_the_connections<N: Net>(net: N)
where
    PollGroup<N::P, TestService, Factory>: Send,
    <N::P as Provider>::Device: Device<P = N::P>,
{
    let addr = net.addr();
    let (pollers, counters) = start(&net, &addr);
    let dev = net.device();
    let mut conns = Vec::new();
    for n in 1..=5u32 {
        conns.push(connect::<N>(&dev, &addr).expect("connects"));
        let want = share(n).expect("fits");
        wait_until(&counters, "the share moved", |s| {
            s.connections == u64::from(n) && s.receive_share == u64::from(want)
        });
        for (i, c) in conns.iter_mut().enumerate() {
            assert_eq!(null_grant(c), want, "{n} connections: connection {i}");
        }
    }
    assert_eq!(share(6), None);
    // A sixth does not fit on the queue: it gets receives of its own.
    let mut sixth = connect::<N>(&dev, &addr).expect("the sixth connects");
    wait_until(&counters, "the sixth accepted", |s| {
        s.connections == 6 && s.srq_connections == 5
    });
    assert_eq!(null_grant(&mut sixth), 8, "its own receives: full credits");
    for c in &mut conns {
        assert_eq!(null_grant(c), 2, "the shared queue's five keep their share");
    }
    // Three of the shared queue's leave: the two left get 8 again.
    for c in conns.drain(2..) {
        close(c);
    }
    wait_until(&counters, "three closed", |s| {
        s.connections == 3
            && s.srq_connections == 2
            && s.receive_share == u64::from(share(2).expect("fits"))
    });
    for c in &mut conns {
        assert_eq!(null_grant(c), 8);
    }
    assert_eq!(null_grant(&mut sixth), 8);
    conns.push(sixth);
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
    let mut done = [0u64; 5];
    let end = Instant::now() + 4 * DEADLINE;
    while done.iter().any(|&d| d < CALLS) {
        for (i, c) in conns.iter_mut().enumerate() {
            // More queued than granted: the requester holds the rest back.
            while submitted[i] < CALLS && c.queued() < 16 {
                let mut b = c.alloc_msg().expect("a send buffer");
                write_call(&mut b, PROC_NULL, &[]);
                c.submit(CallRequest::new(b, 256), submitted[i])
                    .expect("submits");
                submitted[i] += 1;
            }
            c.poll(Instant::now());
            while let Some(o) = c.poll_outcome() {
                assert_eq!(o.status, CallStatus::Success, "connection {i}");
                done[i] += 1;
            }
            assert_eq!(c.state(), ConnState::Established, "connection {i}");
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

mod shm {
    #[test]
    fn credits_follow_the_connections() {
        super::credits_follow_the_connections(super::engine_support::ShmNet);
    }
    #[test]
    fn granted_credits_never_overrun_the_queue() {
        super::granted_credits_never_overrun_the_queue(super::engine_support::ShmNet);
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
}
