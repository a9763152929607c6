//! The seeded randomized simulation: the protocol core driven over the `sim` fabric
//! with random delays, reordering across queue pairs, spurious RNR, completion-queue
//! stalls and random connection drops, under a random mix of every call shape.
//!
//! For every seed: every call gets exactly one outcome, every successful reply carries
//! exactly the expected bytes, no credit leaks, nothing stray completes, and once the
//! connection is gone and the outcomes dropped every pool is full again. A failing
//! seed prints itself and the fabric's trace (`SimNet::report_on_panic`) and replays
//! the same run.

use crate::engine_support;

use std::collections::BTreeMap;
use std::time::Duration;

use engine_support::*;
use rpcrdma::fabric::sim::{FaultConfig, Sim, SimConfig, SimNet, SimRng};
use rpcrdma::wire::header::RdmaError;
use rpcrdma::Pair;
use rpcrdma::{CallRequest, CallStatus, Outcome, RpcReplyError, TransportError};
use rpcrdma::{ConnState, CorePools};

/// What a call must come back with, if it comes back with a reply.
#[derive(Debug)]
enum Expect {
    /// The reply's results (after the RPC header) equal these bytes.
    Results(Vec<u8>),
    /// Results equal `body`, and write sink `i` holds `sinks[i]`.
    WithSinks { body: Vec<u8>, sinks: Vec<Vec<u8>> },
    /// An RPC error with this accept_stat.
    RpcError(u32),
    /// RDMA_ERROR / ERR_CHUNK.
    ErrChunk,
}

/// Submits a random call; inline echoes (no chunks, so nothing for the responder to
/// reach once they time out) wait at most `inline_timeout` when it is set.
fn submit_random(
    p: &mut Pair<Sim, TestService>,
    rng: &mut SimRng,
    tag: u64,
    inline_timeout: Option<Duration>,
) -> Expect {
    let r = |rng: &mut SimRng, lo: u64, hi: u64| rng.range_inclusive(lo, hi) as usize;
    let (req, expect) = match rng.below(8) {
        0 => {
            let data = pattern(r(rng, 0, 2000), tag as u8);
            let mut req = CallRequest::new(msg(p, PROC_ECHO, &opaque(&data)), 2100);
            req.timeout = inline_timeout;
            (req, Expect::Results(opaque(&data)))
        }
        1 => {
            let data = pattern(r(rng, 4000, 20_000), tag as u8);
            let max = (data.len() + 100) as u32;
            let req = CallRequest::new(msg(p, PROC_ECHO, &opaque(&data)), max);
            (req, Expect::Results(opaque(&data)))
        }
        2 => {
            let n = r(rng, 1, 3);
            let datas: Vec<Vec<u8>> = (0..n)
                .map(|i| pattern(r(rng, 1, 5000), tag as u8 ^ i as u8))
                .collect();
            let args: Vec<u8> = datas
                .iter()
                .flat_map(|d| (d.len() as u32).to_be_bytes())
                .collect();
            let mut req = CallRequest::new(msg(p, PROC_SUM_ITEMS, &args), 512);
            let mut position = CALL_HDR as u32;
            let mut body = (n as u32).to_be_bytes().to_vec();
            for d in &datas {
                position += 4;
                req.push_ddp_arg(position, large_with(p, d)).expect("room");
                position += d.len().next_multiple_of(4) as u32;
                let sum = d
                    .iter()
                    .fold(0u32, |a, &b| a.wrapping_mul(31).wrapping_add(u32::from(b)));
                body.extend_from_slice(&(d.len() as u32).to_be_bytes());
                body.extend_from_slice(&sum.to_be_bytes());
            }
            (req, Expect::Results(body))
        }
        3 => {
            let data = pattern(r(rng, 1, 30_000), tag as u8);
            let mut req = CallRequest::new(
                msg(p, PROC_ECHO_DDP, &(data.len() as u32).to_be_bytes()),
                512,
            );
            req.push_ddp_arg((CALL_HDR + 4) as u32, large_with(p, &data))
                .expect("room");
            req.push_write_sink(p.requester.alloc_large().expect("sink"))
                .expect("room");
            let body = (data.len() as u32).to_be_bytes().to_vec();
            (
                req,
                Expect::WithSinks {
                    body,
                    sinks: vec![data],
                },
            )
        }
        4 => {
            let (a, b) = (r(rng, 0, 3000) as u32, r(rng, 0, 3000) as u32);
            let mut args = a.to_be_bytes().to_vec();
            args.extend_from_slice(&b.to_be_bytes());
            let mut req = CallRequest::new(msg(p, PROC_TWO_RESULTS, &args), 512);
            for _ in 0..2 {
                req.push_write_sink(p.requester.alloc_large().expect("sink"))
                    .expect("room");
            }
            (
                req,
                Expect::WithSinks {
                    body: args,
                    sinks: vec![pattern(a as usize, 1), pattern(b as usize, 2)],
                },
            )
        }
        5 => {
            let n = r(rng, 0, 20_000);
            let max = (n + 100) as u32;
            let req = CallRequest::new(msg(p, PROC_BIG, &(n as u32).to_be_bytes()), max);
            (req, Expect::Results(opaque(&pattern(n, 7))))
        }
        6 => {
            let req = CallRequest::new(msg(p, PROC_GARBAGE, &[]), 256);
            (req, Expect::RpcError(4))
        }
        _ => {
            // Fits neither inline nor a Reply chunk (none offered): a responder-provided
            // Read chunk, pulled and answered with RDMA_DONE.
            // Past the large buffers (64 KiB) even that is impossible: ERR_CHUNK.
            let n = r(rng, 5000, 70_000);
            let req = CallRequest::new(msg(p, PROC_BIG, &(n as u32).to_be_bytes()), 100);
            if REPLY_HDR + 4 + n.next_multiple_of(4) > 64 * 1024 {
                (req, Expect::ErrChunk)
            } else {
                (req, Expect::Results(opaque(&pattern(n, 7))))
            }
        }
    };
    p.requester.submit(req, tag).expect("submitted or queued");
    expect
}

fn check(o: &Outcome, e: &Expect) {
    match o.status {
        CallStatus::Transport(TransportError::Disconnected) | CallStatus::Timeout => return,
        CallStatus::Success => {}
        CallStatus::RpcError(RpcReplyError::Accepted(stat)) => {
            assert!(
                matches!(e, Expect::RpcError(s) if *s == stat),
                "{:?} for {e:?}",
                o.status
            );
            return;
        }
        CallStatus::Transport(TransportError::Rdma(RdmaError::Chunk)) => {
            assert!(matches!(e, Expect::ErrChunk), "ERR_CHUNK for {e:?}");
            return;
        }
        s => panic!("unexpected status {s:?} for {e:?}"),
    }
    match e {
        Expect::Results(b) => assert_eq!(results(o), &b[..], "tag {}", o.tag),
        Expect::WithSinks { body, sinks } => {
            assert_eq!(&results(o)[..body.len()], &body[..], "tag {}", o.tag);
            for (i, s) in sinks.iter().enumerate() {
                assert_eq!(o.write_result(i), Some(&s[..]), "tag {} sink {i}", o.tag);
            }
        }
        other => panic!("success for {other:?}"),
    }
}

fn all_full(pools: &CorePools) -> bool {
    pools.recv.is_full() && pools.send.is_full() && pools.large.is_full()
}

/// What one run produced, for comparing runs of one seed.
#[derive(Debug, PartialEq)]
struct Run {
    calls: u64,
    successes: u64,
    trace_hash: u64,
    /// Every call's status and XID, by tag.
    outcomes: BTreeMap<u64, (CallStatus, u32)>,
    timeouts: u64,
    probes_answered: u64,
    sim: rpcrdma::fabric::sim::SimStats,
}

fn run_seed(seed: u64, faults: FaultConfig) -> Run {
    run_seed_with(seed, faults, None, |_| {})
}

fn run_seed_with(
    seed: u64,
    faults: FaultConfig,
    inline_timeout: Option<Duration>,
    tune: impl Fn(&mut rpcrdma::ConnConfig),
) -> Run {
    let cfg = SimConfig::seeded(seed)
        .with_latency(Duration::from_micros(1), Duration::from_micros(200))
        .with_faults(faults);
    let net = SimNet::new(cfg);
    let _report = net.report_on_panic();
    let fixture = SimNetFixture(net.clone());
    let mut client = test_config();
    client.credits = 6;
    tune(&mut client);
    let mut server = test_config();
    server.credits = 4;
    let mut p = pair(&fixture, &client, &server);
    let cpools = p.requester.resources().pools().clone();
    let spools = p
        .responder()
        .expect("responder")
        .resources()
        .pools()
        .clone();
    let mut rng = net.workload_rng(1);
    let mut expect = BTreeMap::new();
    // Statuses only: the outcomes (and their buffers) are dropped once checked.
    let mut outcomes: BTreeMap<u64, (CallStatus, u32)> = BTreeMap::new();
    let mut probes_answered = 0u64;
    const CALLS: u64 = 120;
    let mut next = 0u64;
    let mut polls = 0u64;
    while outcomes.len() as u64 != next || next < CALLS {
        // The application's large pool bounds how much can be outstanding (a call takes
        // at most three of its buffers).
        let room = p
            .requester
            .resources()
            .app_pool()
            .is_some_and(|a| a.available() >= 12);
        if next < CALLS && room && p.requester.state() == ConnState::Established {
            for _ in 0..rng.below(4) {
                if next < CALLS {
                    expect.insert(next, submit_random(&mut p, &mut rng, next, inline_timeout));
                    next += 1;
                }
            }
        }
        if next < CALLS && p.requester.state() != ConnState::Established {
            // The connection dropped: nothing more can be submitted.
            break;
        }
        for _ in 0..rng.range_inclusive(1, 8) {
            // The sim device's virtual clock: timers fire at the same point of every run.
            let now = p.requester.clock().now();
            p.poll(now);
            polls += 1;
        }
        while let Some(o) = p.next_outcome() {
            let e = expect.get(&o.tag).expect("an outcome for a call we made");
            check(&o, e);
            assert!(
                outcomes.insert(o.tag, (o.status, o.xid)).is_none(),
                "one outcome per call"
            );
        }
        assert!(
            polls < 2_000_000,
            "seed {seed}: stuck with {} of {next} outcomes",
            outcomes.len()
        );
    }
    // Drain whatever is left (a dropped connection fails its calls once flushed).
    let done = p.run_until(DEADLINE, |p| {
        while let Some(o) = p.next_outcome() {
            if let Some(e) = expect.get(&o.tag) {
                check(&o, e);
            }
            assert!(
                outcomes.insert(o.tag, (o.status, o.xid)).is_none(),
                "one outcome per call"
            );
        }
        outcomes.len() as u64 == next
    });
    assert!(done, "seed {seed}: {} of {next} outcomes", outcomes.len());
    // A call that timed out holds its credit until its late reply, and a keepalive
    // probe may be out (its credit is not counted in flight): wait for those.
    p.run_until(DEADLINE, |p| {
        (p.requester.credits().in_flight() == 0 && p.requester.active() == 0)
            || p.requester.state() != ConnState::Established
    });
    let dropped = p.requester.state() != ConnState::Established;
    if !dropped {
        assert_eq!(p.requester.credits().in_flight(), 0, "no credit leaks");
        assert_eq!(p.requester.active(), 0);
        p.requester.close();
    }
    let closed = p.run_until(DEADLINE, |p| {
        p.requester.state() == ConnState::Closed
            && p.responder().is_none_or(|r| r.state() == ConnState::Closed)
    });
    assert!(closed, "seed {seed}: both sides close");
    assert_eq!(p.requester.stats().stray_completions, 0);
    assert_eq!(p.requester.stats().outbox_overflows, 0);
    if let Some(r) = p.responder() {
        assert_eq!(r.stats().stray_completions, 0);
        assert_eq!(r.stats().outbox_overflows, 0);
        // Every exposed reply was freed by its DONE, its timeout or the close: no
        // responder key outlives the connection.
        assert_eq!(r.stats().exposed, 0, "seed {seed}: no exposed reply left");
    }
    if !dropped {
        let (q, r) = (p.requester.stats(), p.responder().map(|r| r.stats()));
        // A DONE for every reply pulled (and for pulls whose call timed out meanwhile);
        // every reply pulled was one the responder exposed.
        assert!(q.dones_sent >= q.read_chunk_replies, "seed {seed}: {q:?}");
        if let Some(r) = r {
            assert!(r.read_chunk_replies >= q.read_chunk_replies, "seed {seed}");
            assert!(
                q.read_chunk_replies > 0,
                "seed {seed}: the path was exercised"
            );
        }
    }
    let successes = outcomes
        .values()
        .filter(|s| s.0 == CallStatus::Success)
        .count() as u64;
    let timeouts = outcomes
        .values()
        .filter(|s| s.0 == CallStatus::Timeout)
        .count() as u64;
    while let Some(ev) = p.requester.poll_event() {
        if let rpcrdma::ConnEvent::ProbeAnswered(_) = ev {
            probes_answered += 1;
        }
    }
    eprintln!(
        "seed {seed}: {next} calls, {successes} successes, dropped: {dropped}, sim: {:?}",
        net.stats()
    );
    drop(p);
    assert!(all_full(&cpools), "seed {seed}: requester pools full");
    assert!(all_full(&spools), "seed {seed}: responder pools full");
    Run {
        calls: next,
        successes,
        trace_hash: net.trace_hash(),
        outcomes,
        timeouts,
        probes_answered,
        sim: net.stats(),
    }
}

#[test]
fn random_workloads_without_faults_all_succeed_where_they_should() {
    for seed in [1u64, 2, 3] {
        let Run {
            calls,
            successes: ok,
            ..
        } = run_seed(seed, FaultConfig::NONE);
        assert_eq!(calls, 120);
        assert!(ok > 60, "seed {seed}: {ok} successes");
    }
}

fn faults() -> FaultConfig {
    FaultConfig {
        drop_per_mille: 3,
        rnr_per_mille: 30,
        max_recv_delay: Duration::from_micros(50),
        cq_stall_per_mille: 20,
        max_cq_stall: Duration::from_micros(100),
    }
}

#[test]
fn random_workloads_with_faults_keep_every_invariant() {
    for seed in [11u64, 12, 13, 14, 15, 16] {
        run_seed(seed, faults());
    }
}

#[test]
fn a_seed_replays_the_same_history() {
    let a = run_seed(21, faults());
    let b = run_seed(21, faults());
    assert_eq!(a.trace_hash, b.trace_hash, "same seed, same fabric history");
    assert_eq!(
        (a.calls, a.successes, a.sim),
        (b.calls, b.successes, b.sim),
        "same seed, same calls"
    );
}

/// Timers in virtual time: calls time out and keepalive probes go out at the same
/// points of every run of one seed, and XIDs and keys come from the configured seed, so
/// two runs agree on every outcome (status and XID) and on the fabric's whole history.
/// A different seed gives a different history, so the comparison can fail.
#[test]
fn a_seed_replays_its_timeouts_and_probes() {
    let timers = |seed: u64| {
        move |c: &mut rpcrdma::ConnConfig| {
            c.seed = Some(seed);
            c.keepalive = Some(Duration::from_micros(300));
            c.probe_timeout = Duration::from_millis(5);
            c.credit_reclaim = None;
        }
    };
    let short = Some(Duration::from_micros(120));
    let a = run_seed_with(31, faults(), short, timers(31));
    let b = run_seed_with(31, faults(), short, timers(31));
    assert!(a.timeouts > 0, "the run reaches call timeouts: {a:?}");
    assert!(a.probes_answered > 0, "the run sends keepalive probes");
    eprintln!(
        "seed 31: {} timeouts, {} probes answered",
        a.timeouts, a.probes_answered
    );
    assert_eq!(a, b, "same seed, same run");
    let c = run_seed_with(32, faults(), short, timers(32));
    assert_ne!(a.trace_hash, c.trace_hash, "another seed, another history");
}
