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

per_provider!(both_directions_busy_at_once);

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
