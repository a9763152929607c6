//! End to end over shm, sim and siw: RFC 8167 bidirectional RPC-over-RDMA. A forward
//! responder ([`Responder::bind_calling`]) calls its requester while the requester
//! ([`Requester::connect_serving`]) keeps forward calls at depth: both directions busy at
//! once on one connection, each with its own credits, every call exactly one outcome,
//! backward calls that would need chunks refused with a typed error, pools full at the
//! end; and a seeded simulation replays exactly.

use crate::engine_support;

use engine_support::*;
use std::collections::BTreeMap;
use std::time::Instant;

use rpcrdma::{
    Backchannel, CallRequest, CallStatus, CallView, ConnConfig, ConnState, CorePools, Outcome,
    ReplyWriter, Requester, RequesterHalf, Responder, ResponderHalf, Service, ServiceError,
    SubmitRefusal,
};

/// Forward calls on the requester.
const FORWARD: u64 = 160;
/// Forward calls kept in flight.
const DEPTH: u64 = 8;
/// Backward calls the responder's service makes.
const BACKWARD: u64 = 80;

/// The forward responder's service: serves [`TestService`]'s program, and calls its
/// requester `BACKWARD` times (ECHO, sizes by tag), keeping up to `backward_depth`
/// calls submitted, after first checking that calls needing chunks are refused.
struct Calling {
    serve: TestService,
    next: u64,
    backward_depth: u64,
    outcomes: BTreeMap<u64, (CallStatus, u32, bool)>,
    refusals: Vec<SubmitRefusal>,
    /// Most backward calls seen in flight at once (by the credit table).
    max_in_flight: u32,
}

impl Calling {
    fn new(backward_depth: u64) -> Self {
        Calling {
            serve: TestService::default(),
            next: 0,
            backward_depth,
            outcomes: BTreeMap::new(),
            refusals: Vec::new(),
            max_in_flight: 0,
        }
    }
}

fn backward_len(tag: u64) -> usize {
    (tag as usize * 37) % 1500
}

fn call_msg(calls: &Backchannel<'_>, proc_: u32, args: &[u8]) -> rpcrdma::RegBuf {
    let mut b = calls.alloc_msg().expect("backchannel send buffer");
    write_call(&mut b, proc_, args);
    b
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
        if !calls.is_open() {
            return;
        }
        if self.refusals.is_empty() {
            // RFC 8167 §5: the backward direction is inline only. A message too long
            // for the inline threshold, and a reply that may not fit inline, would
            // need chunks: refused at submit, nothing sent.
            let long = call_msg(calls, PROC_ECHO, &opaque(&pattern(4040, 1)));
            let big_reply = call_msg(calls, PROC_NULL, &[]);
            for req in [
                CallRequest::new(long, 256),
                CallRequest::new(big_reply, 64 * 1024),
            ] {
                let e = calls.submit(req, u64::MAX).expect_err("needs chunks");
                self.refusals.push(e.reason);
            }
        }
        let in_flight = self.next - self.outcomes.len() as u64;
        if self.next < BACKWARD && in_flight < self.backward_depth {
            let tag = self.next;
            let data = pattern(backward_len(tag), tag as u8);
            let req = CallRequest::new(call_msg(calls, PROC_ECHO, &opaque(&data)), 2048);
            calls.submit(req, tag).expect("backward call accepted");
            self.next += 1;
        }
    }

    fn backchannel_outcome(&mut self, o: Outcome) {
        let ok = o.status == CallStatus::Success
            && o.reply.as_ref().is_some_and(|r| {
                r.bytes().get(REPLY_HDR..)
                    == Some(&opaque(&pattern(backward_len(o.tag), o.tag as u8))[..])
            });
        let prev = self.outcomes.insert(o.tag, (o.status, o.xid, ok));
        assert!(prev.is_none(), "backward call {} got two outcomes", o.tag);
    }
}

type Server<P> = Responder<P, Calling, Box<dyn FnMut() -> Option<Calling> + Send>, RequesterHalf>;

struct Run {
    forward: BTreeMap<u64, (CallStatus, u32)>,
    backward: BTreeMap<u64, (CallStatus, u32, bool)>,
    both_busy: u64,
}

fn configs(seed: Option<u64>) -> (ConnConfig, ConnConfig) {
    let mut c = test_config();
    c.seed = seed;
    c.backchannel_credits = 2;
    let mut s = test_config();
    s.seed = seed.map(|x| x ^ 0x55);
    s.backchannel_credits = 2;
    (c, s)
}

/// Runs the workload over `net`; returns every outcome once the connection is closed
/// and both sides' pools are full again.
fn run_both_ways<N: Net>(net: &N, seed: Option<u64>, backward_depth: u64) -> Run {
    let (ccfg, scfg) = configs(seed);
    let (cdev, sdev, addr) = (net.device(), net.device(), net.addr());
    let mut once = Some(Calling::new(backward_depth));
    let factory: Box<dyn FnMut() -> Option<Calling> + Send> = Box::new(move || once.take());
    let mut server: Server<N::P> =
        Responder::bind_calling(sdev, &addr, scfg, factory).expect("listens");
    server.keep_closed(true);
    let mut client: Requester<N::P, ResponderHalf<TestService>> =
        Requester::connect_serving(&cdev, &addr, &ccfg, TestService::default()).expect("connects");
    let end = Instant::now() + DEADLINE;
    let poll = |server: &mut Server<N::P>, client: &mut Requester<N::P, _>| {
        let now = client.clock().now();
        server.poll(now);
        client.poll(now);
    };
    while client.state() != ConnState::Established
        || server
            .connections()
            .first()
            .is_none_or(|c| c.state() != ConnState::Established)
    {
        assert!(Instant::now() < end, "connects");
        poll(&mut server, &mut client);
    }
    let cpools: CorePools = client.resources().pools().clone();
    let spools: CorePools = server.connections()[0].resources().pools().clone();
    let mut forward = BTreeMap::new();
    let (mut sent, mut both_busy) = (0u64, 0u64);
    loop {
        while sent < FORWARD && sent - forward.len() as u64 <= DEPTH {
            let data = pattern((sent as usize * 53) % 3000, sent as u8);
            let mut m = client.alloc_msg().expect("send buffer");
            write_call(&mut m, PROC_ECHO, &opaque(&data));
            client
                .submit(CallRequest::new(m, 4000), sent)
                .expect("forward call accepted");
            sent += 1;
        }
        poll(&mut server, &mut client);
        while let Some(o) = client.poll_outcome() {
            let data = pattern((o.tag as usize * 53) % 3000, o.tag as u8);
            assert_eq!(o.status, CallStatus::Success, "forward {}", o.tag);
            assert_eq!(results(&o), &opaque(&data)[..], "forward {}", o.tag);
            let prev = forward.insert(o.tag, (o.status, o.xid));
            assert!(prev.is_none(), "forward call {} got two outcomes", o.tag);
        }
        let sc = &server.connections()[0];
        let bc = sc.backchannel_credits().snapshot();
        let fc = client.credits().snapshot();
        if bc.in_flight > 0 && fc.in_flight > 0 {
            both_busy += 1;
        }
        assert!(bc.in_flight <= bc.granted && bc.granted <= 2, "{bc:?}");
        assert!(fc.in_flight <= fc.granted && fc.granted <= 8, "{fc:?}");
        let svc = sc.service();
        let svc_max = svc.max_in_flight.max(bc.in_flight);
        let done = forward.len() as u64 == FORWARD && svc.outcomes.len() as u64 == BACKWARD;
        server.connections_mut()[0].service_mut().max_in_flight = svc_max;
        if done {
            break;
        }
        assert!(
            Instant::now() < end,
            "forward {} of {FORWARD}, backward {} of {BACKWARD}",
            forward.len(),
            server.connections()[0].service().outcomes.len()
        );
    }
    // The backward direction was served by the requester's responder half, on its own
    // credits; nothing strayed.
    let served = client.backchannel_stats();
    assert_eq!(served.calls, BACKWARD);
    let sc = &server.connections()[0];
    assert_eq!(sc.stats().calls, FORWARD);
    assert_eq!(sc.backchannel_credits().snapshot().granted, 2);
    assert_eq!(client.credits().snapshot().granted, 8);
    assert_eq!(
        sc.service().refusals,
        vec![SubmitRefusal::NeedsChunks, SubmitRefusal::NeedsChunks]
    );
    assert_eq!(sc.backchannel_stats().stray_completions, 0);
    assert_eq!(client.stats().stray_completions, 0);
    let backward = sc.service().outcomes.clone();
    client.close();
    let closed_by = Instant::now() + DEADLINE;
    while client.state() != ConnState::Closed
        || server.connections()[0].state() != ConnState::Closed
    {
        assert!(Instant::now() < closed_by, "both sides close");
        poll(&mut server, &mut client);
    }
    drop(client);
    drop(server);
    for (side, p) in [("requester", &cpools), ("responder", &spools)] {
        assert!(
            p.recv.is_full() && p.send.is_full() && p.large.is_full(),
            "{side} pools full"
        );
    }
    Run {
        forward,
        backward,
        both_busy,
    }
}

fn both_directions_busy_at_once<N: Net>(net: N) {
    let run = run_both_ways(&net, None, 4);
    assert_eq!(run.forward.len() as u64, FORWARD);
    assert_eq!(run.backward.len() as u64, BACKWARD);
    for (tag, (status, _, ok)) in &run.backward {
        assert_eq!(*status, CallStatus::Success, "backward {tag}");
        assert!(ok, "backward {tag}: its echo came back");
    }
    assert!(
        run.both_busy > 0,
        "calls were in flight in both directions at once"
    );
}

/// A seeded simulation of the two-direction workload replays exactly: every call of
/// either direction gets the same outcome and XID on a second run of the seed.
#[test]
fn a_seeded_two_direction_run_replays() {
    for seed in [1u64, 0xbc, 0x8167] {
        let a = run_both_ways(&SimNetFixture::seeded(seed), Some(seed), 2);
        let b = run_both_ways(&SimNetFixture::seeded(seed), Some(seed), 2);
        assert_eq!(a.forward, b.forward, "seed {seed}: forward outcomes");
        assert_eq!(a.backward, b.backward, "seed {seed}: backward outcomes");
        assert_eq!(a.both_busy, b.both_busy, "seed {seed}");
        assert_eq!(a.backward.len() as u64, BACKWARD);
        assert!(a.backward.values().all(|v| v.2), "seed {seed}");
    }
}

/// A forward responder's service that makes `count` backward calls of `proc_` (ECHO of
/// a few octets, or DROP, which the requester's service never answers), up to its
/// credits, and keeps their outcomes.
struct Backward {
    serve: TestService,
    proc_: u32,
    count: u64,
    submitted: u64,
    outcomes: Vec<(u64, CallStatus)>,
}

impl Service for Backward {
    fn handle_call(
        &mut self,
        call: &CallView<'_>,
        reply: &mut ReplyWriter<'_>,
    ) -> Result<(), ServiceError> {
        self.serve.handle_call(call, reply)
    }

    fn backchannel(&mut self, calls: &mut Backchannel<'_>) {
        let waiting = self.submitted - self.outcomes.len() as u64;
        if calls.is_open() && self.submitted < self.count && waiting < 4 {
            let mut req = CallRequest::new(call_msg(calls, self.proc_, &opaque(b"bc")), 512);
            req.timeout = Some(DEADLINE * 3);
            calls
                .submit(req, self.submitted)
                .expect("backward call accepted");
            self.submitted += 1;
        }
    }

    fn backchannel_outcome(&mut self, o: Outcome) {
        self.outcomes.push((o.tag, o.status));
    }
}

type BackwardServer<P> =
    Responder<P, Backward, Box<dyn FnMut() -> Option<Backward> + Send>, RequesterHalf>;

/// One direction stuck (every credit held by calls its peer never answers, more waiting
/// behind them) does not hold up the other: with the backward direction stuck, 40
/// forward calls complete; with the forward direction stuck, 20 backward calls complete.
/// Closing then gives every stuck call exactly one outcome (the connection's end), and
/// the pools come back full.
fn a_stuck_direction_never_blocks_the_other<N: Net>(net: N) {
    for backward_stuck in [true, false] {
        let (ccfg, scfg) = configs(None);
        let (cdev, sdev, addr) = (net.device(), net.device(), net.addr());
        let (bproc, bcount) = if backward_stuck {
            (PROC_DROP, 2)
        } else {
            (PROC_ECHO, 20)
        };
        let mut once = Some(Backward {
            serve: TestService::default(),
            proc_: bproc,
            count: bcount,
            submitted: 0,
            outcomes: Vec::new(),
        });
        let factory: Box<dyn FnMut() -> Option<Backward> + Send> = Box::new(move || once.take());
        let mut server: BackwardServer<N::P> =
            Responder::bind_calling(sdev, &addr, scfg, factory).expect("listens");
        server.keep_closed(true);
        let mut client: Requester<N::P, ResponderHalf<TestService>> =
            Requester::connect_serving(&cdev, &addr, &ccfg, TestService::default())
                .expect("connects");
        let end = Instant::now() + DEADLINE;
        let poll = |server: &mut BackwardServer<N::P>, client: &mut Requester<N::P, _>| {
            assert!(
                Instant::now() < end,
                "deadline (backward stuck: {backward_stuck})"
            );
            let now = client.clock().now();
            server.poll(now);
            client.poll(now);
        };
        while client.state() != ConnState::Established || server.connections().is_empty() {
            poll(&mut server, &mut client);
        }
        let cpools: CorePools = client.resources().pools().clone();
        let (fproc, fcount) = if backward_stuck {
            (PROC_ECHO, 40u64)
        } else {
            (PROC_DROP, 8)
        };
        let mut forward = Vec::new();
        for tag in 0..fcount {
            let mut m = client.alloc_msg().expect("send buffer");
            write_call(&mut m, fproc, &opaque(b"fw"));
            let mut req = CallRequest::new(m, 512);
            req.timeout = Some(DEADLINE * 3);
            client.submit(req, tag).expect("forward call accepted");
        }
        let stuck_before = |server: &BackwardServer<N::P>, client: &Requester<N::P, _>| {
            let sc = &server.connections()[0];
            // Every credit of the stuck direction held (one: no reply ever raised the
            // grant above the first call's), nothing answered.
            if backward_stuck {
                let c = sc.backchannel_credits().snapshot();
                c.in_flight == c.granted && sc.service().outcomes.is_empty()
            } else {
                let c = client.credits().snapshot();
                c.in_flight == c.granted && c.waiting == 7
            }
        };
        // The free direction finishes while the other stays stuck.
        loop {
            poll(&mut server, &mut client);
            while let Some(o) = client.poll_outcome() {
                forward.push((o.tag, o.status));
            }
            let sc = &server.connections()[0];
            let free_done = if backward_stuck {
                forward.len() as u64 == fcount
            } else {
                sc.service().outcomes.len() as u64 == bcount
            };
            if free_done {
                assert!(
                    stuck_before(&server, &client),
                    "the other direction stayed stuck"
                );
                break;
            }
        }
        let free: Vec<CallStatus> = if backward_stuck {
            forward.iter().map(|o| o.1).collect()
        } else {
            server.connections()[0]
                .service()
                .outcomes
                .iter()
                .map(|o| o.1)
                .collect()
        };
        assert!(free.iter().all(|s| *s == CallStatus::Success), "{free:?}");
        client.close();
        while client.state() != ConnState::Closed
            || server.connections()[0].state() != ConnState::Closed
        {
            poll(&mut server, &mut client);
            while let Some(o) = client.poll_outcome() {
                forward.push((o.tag, o.status));
            }
        }
        // Every call of either direction: exactly one outcome.
        let mut tags: Vec<u64> = forward.iter().map(|o| o.0).collect();
        tags.sort_unstable();
        assert_eq!(tags, (0..fcount).collect::<Vec<_>>(), "forward outcomes");
        let mut btags: Vec<u64> = server.connections()[0]
            .service()
            .outcomes
            .iter()
            .map(|o| o.0)
            .collect();
        btags.sort_unstable();
        assert_eq!(btags, (0..bcount).collect::<Vec<_>>(), "backward outcomes");
        let spools: CorePools = server.connections()[0].resources().pools().clone();
        drop(client);
        drop(server);
        for p in [&cpools, &spools] {
            assert!(p.recv.is_full() && p.send.is_full() && p.large.is_full());
        }
    }
}

per_provider!(
    both_directions_busy_at_once,
    a_stuck_direction_never_blocks_the_other
);
