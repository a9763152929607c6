//! Poll groups (issue #13): a server as two groups on two pollers, each group one
//! completion queue shared by its connections. Over shm and siw (real time: the
//! pollers read the system clock, so not sim). Pollers park when idle; every wait has a
//! deadline.

use crate::engine_support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use engine_support::*;
use rpcrdma::fabric::{Device, Provider};
use rpcrdma::{CallRequest, CallStatus, ConnState, Requester, ResponderLimits};
use rpcrdma::{GroupCounters, GroupSample, PollGroup, PollGroupTask};
use rpcrdma_poller::{IdlePolicy, PollerConfig, PollerGroup};

type Factory = fn() -> Option<TestService>;

/// Two groups serving at `addr`, one per poller; their counters.
fn start<N: Net>(
    net: &N,
    addr: &<N::P as Provider>::Addr,
) -> (PollerGroup<()>, Vec<Arc<GroupCounters>>)
where
    PollGroup<N::P, TestService, Factory>: Send,
{
    let factory: Factory = || Some(TestService::default());
    let groups = PollGroup::<N::P, TestService, Factory>::bind(
        net.device(),
        addr,
        test_config(),
        factory,
        2,
        ResponderLimits::default(),
    )
    .expect("groups listen");
    let counters = groups.iter().map(|g| g.counters().clone()).collect();
    let config = PollerConfig {
        idle: IdlePolicy::parking(Duration::from_millis(1)),
        ..PollerConfig::default()
    };
    let pollers = PollerGroup::<()>::start(&[0, 1], config).expect("pollers");
    for g in groups {
        let i = g.index();
        pollers
            .add_task(i, Box::new(PollGroupTask::new(g).allow_park(true)))
            .map_err(|_| "add group task")
            .expect("added");
    }
    (pollers, counters)
}

fn samples(counters: &[Arc<GroupCounters>]) -> Vec<GroupSample> {
    counters.iter().map(|c| c.sample()).collect()
}

/// Polls `counters` until `ok` holds for their samples, or fails at the deadline.
fn wait_until(counters: &[Arc<GroupCounters>], what: &str, ok: impl Fn(&[GroupSample]) -> bool) {
    wait_polling::<rpcrdma::fabric::shm::ShmProvider>(counters, &mut [], what, ok)
}

/// As `wait_until`, polling `clients` between samples: a Send that completes only when
/// its peer answers (strict siw confirms each Send with a Read the peer serves in its
/// own poll) needs the client polled until the server has counted it.
fn wait_polling<P: Provider>(
    counters: &[Arc<GroupCounters>],
    clients: &mut [Requester<P>],
    what: &str,
    ok: impl Fn(&[GroupSample]) -> bool,
) {
    let end = Instant::now() + DEADLINE;
    loop {
        let s = samples(counters);
        if ok(&s) {
            return;
        }
        assert!(Instant::now() < end, "{what}: {s:?}");
        for c in clients.iter_mut() {
            c.poll(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn nulls<P: Provider>(conn: &mut Requester<P>, k: usize) {
    for i in 0..k {
        let mut b = conn.alloc_msg().expect("a send buffer");
        write_call(&mut b, PROC_NULL, &[]);
        let o = conn
            .call(CallRequest::new(b, 256), DEADLINE)
            .expect("submits");
        assert_eq!(o.status, CallStatus::Success, "NULL {i}");
    }
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

/// Six connections go alternately to the two groups (the least loaded takes the next)
/// and each group serves its own connections' calls.
fn calls_spread_over_groups<N: Net>(net: N)
where
    PollGroup<N::P, TestService, Factory>: Send,
    <N::P as Provider>::Device: Device<P = N::P>,
{
    const CONNS: usize = 6;
    const CALLS: usize = 25;
    let addr = net.addr();
    let (pollers, counters) = start(&net, &addr);
    let dev = net.device();
    let mut conns: Vec<_> = (0..CONNS).map(|_| connect::<N>(&dev, &addr)).collect();
    wait_until(&counters, "three connections each", |s| {
        s.iter().all(|g| g.connections == 3 && g.accepted == 3)
    });
    for c in &mut conns {
        nulls(c, CALLS);
    }
    // Calls are counted when a group checks its limits (ten times a second at most). A
    // call is a receive and a send completion at least, all from the group's one
    // queue; the last reply's send completion may be reaped after the client has the
    // reply, so both counts are waited for, with the clients polled meanwhile (on
    // strict siw that completion waits for the client to answer its confirming Read).
    wait_polling(
        &counters,
        &mut conns,
        "every call and its completions counted in its group",
        |s| {
            s.iter()
                .all(|g| g.calls == (3 * CALLS) as u64 && g.completions >= (2 * 3 * CALLS) as u64)
        },
    );
    drop(conns);
    pollers
        .shutdown(Instant::now() + DEADLINE)
        .expect("pollers stop");
}

/// A connection that disconnects leaves its group (and only its group): the group's
/// load drops, so the next connection goes there, and the others keep working.
fn disconnect_frees_its_place_in_the_group<N: Net>(net: N)
where
    PollGroup<N::P, TestService, Factory>: Send,
    <N::P as Provider>::Device: Device<P = N::P>,
{
    let addr = net.addr();
    let (pollers, counters) = start(&net, &addr);
    let dev = net.device();
    let mut conns: Vec<_> = (0..4).map(|_| connect::<N>(&dev, &addr)).collect();
    wait_until(&counters, "two connections each", |s| {
        s.iter().all(|g| g.connections == 2)
    });
    // The second connection went to group 1: close it.
    let mut gone = conns.remove(1);
    gone.close();
    let end = Instant::now() + DEADLINE;
    while gone.state() != ConnState::Closed {
        gone.poll(Instant::now());
        assert!(Instant::now() < end, "closed: {:?}", gone.state());
        std::thread::yield_now();
    }
    drop(gone);
    wait_until(&counters, "group 1 freed the connection", |s| {
        s[1].closed == 1 && s[1].connections == 1 && s[0].connections == 2 && s[0].closed == 0
    });
    let mut next = connect::<N>(&dev, &addr);
    wait_until(&counters, "the next connection went to group 1", |s| {
        s[1].accepted == 3 && s[1].connections == 2 && s[0].accepted == 2
    });
    nulls(&mut next, 3);
    for c in &mut conns {
        nulls(c, 3);
    }
    wait_until(&counters, "calls counted", |s| {
        s[0].calls == 6 && s[1].calls == 6
    });
    drop((conns, next));
    pollers
        .shutdown(Instant::now() + DEADLINE)
        .expect("pollers stop");
}

/// A poll group of two-role connections (RFC 8167; `PollGroup<_, _, _, RequesterHalf>`):
/// its service calls the requester back with ECHO, the requester's own service answers,
/// and every backward call has a successful outcome, with forward calls answered
/// meanwhile. The group is polled on this thread, beside the client.
fn a_group_of_two_role_connections_calls_back<N: Net>(net: N)
where
    <N::P as Provider>::Device: Device<P = N::P>,
{
    use rpcrdma::{Backchannel, CallView, Outcome, ReplyWriter, ResponderHalf, Service};
    use rpcrdma::{RequesterHalf, ServiceError};

    /// Serves forward calls; makes `left` backward ECHOs, one at a time.
    #[derive(Default)]
    struct Calling {
        serve: TestService,
        left: u32,
        out: bool,
        answered: Vec<CallStatus>,
    }
    impl Service for Calling {
        fn handle_call(
            &mut self,
            call: &CallView<'_>,
            reply: &mut ReplyWriter<'_>,
        ) -> Result<(), ServiceError> {
            self.serve.handle_call(call, reply)
        }
        fn backchannel(&mut self, calls: &mut Backchannel<'_>) {
            if !calls.is_open() || self.out || self.left == 0 {
                return;
            }
            let mut b = calls.alloc_msg().expect("backchannel send buffer");
            write_call(&mut b, PROC_ECHO, &opaque(b"back"));
            let mut req = CallRequest::new(b, 512);
            req.timeout = Some(DEADLINE);
            calls
                .submit(req, u64::from(self.left))
                .expect("backward call");
            self.left -= 1;
            self.out = true;
        }
        fn backchannel_outcome(&mut self, o: Outcome) {
            self.out = false;
            self.answered.push(o.status);
        }
    }

    let factory = || {
        Some(Calling {
            left: 5,
            ..Calling::default()
        })
    };
    let mut cfg = test_config();
    cfg.backchannel_credits = 2;
    let addr = net.addr();
    let mut groups = PollGroup::<N::P, Calling, _, RequesterHalf>::bind(
        net.device(),
        &addr,
        cfg.clone(),
        factory,
        1,
        ResponderLimits::default(),
    )
    .expect("group listens");
    let mut group = groups.pop().expect("one group");
    let mut client: Requester<N::P, ResponderHalf<TestService>> =
        Requester::connect_serving(&net.device(), &addr, &cfg, TestService::default())
            .expect("connects");
    let end = Instant::now() + DEADLINE;
    let mut forward = 0;
    loop {
        assert!(Instant::now() < end, "deadline: {forward} forward calls");
        let now = client.clock().now();
        group.poll(now);
        client.poll(now);
        // A forward NULL now and then, answered while the backward calls go on.
        if client.state() == ConnState::Established && forward < 5 {
            let mut b = client.alloc_msg().expect("a send buffer");
            write_call(&mut b, PROC_NULL, &[]);
            client
                .submit(CallRequest::new(b, 256), forward)
                .expect("forward call");
            forward += 1;
        }
        while let Some(o) = client.poll_outcome() {
            assert_eq!(o.status, CallStatus::Success, "forward {}", o.tag);
        }
        let done = group
            .connections()
            .first()
            .is_some_and(|c| c.service().answered.len() == 5);
        if done && client.credits().snapshot().in_flight == 0 {
            break;
        }
    }
    let service = group.connections()[0].service();
    assert!(
        service.answered.iter().all(|s| *s == CallStatus::Success),
        "{:?}",
        service.answered
    );
    assert_eq!(client.backchannel_stats().calls, 5);
}

mod shm {
    #[test]
    fn a_group_of_two_role_connections_calls_back() {
        super::a_group_of_two_role_connections_calls_back(super::engine_support::ShmNet);
    }
    #[test]
    fn calls_spread_over_groups() {
        super::calls_spread_over_groups(super::engine_support::ShmNet);
    }
    #[test]
    fn disconnect_frees_its_place_in_the_group() {
        super::disconnect_frees_its_place_in_the_group(super::engine_support::ShmNet);
    }
}

mod siw {
    use super::engine_support::SiwNet;
    #[test]
    fn a_group_of_two_role_connections_calls_back() {
        super::a_group_of_two_role_connections_calls_back(SiwNet {
            confirm_completions: true,
        });
    }
    #[test]
    fn calls_spread_over_groups() {
        super::calls_spread_over_groups(SiwNet {
            confirm_completions: true,
        });
    }
    #[test]
    fn disconnect_frees_its_place_in_the_group() {
        super::disconnect_frees_its_place_in_the_group(SiwNet {
            confirm_completions: false,
        });
    }
}
