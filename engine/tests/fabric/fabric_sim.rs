//! Tests of the `sim` provider beyond the shared conformance suite: determinism,
//! virtual time and progress, observability, and fault injection.
//!
//! Everything runs on the test's thread against virtual time, so waits are bounded by
//! a number of polls (deterministic) rather than by a wall-clock deadline.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rpcrdma::fabric::sim::{
    FailPoint, FaultConfig, SimAddr, SimCm, SimConfig, SimCq, SimDevice, SimMr, SimNet, SimPd,
    SimQp, TraceKind,
};
use rpcrdma::fabric::{
    Access, CmEvent, Completion, CompletionQueue, ConnId, ConnectionManager, Device, FabricError,
    MemoryRegion, PostErrorKind, ProtectionDomain, QpCaps, QpConfig, QpInit, QpState, QueuePair,
    RecvWr, RemoteAddr, SendWr, Sge, WcOpcode, WcStatus, RNR_RETRY_INFINITE,
};
use rpcrdma_pools::{Arena, ArenaOptions, HugePages};

/// Most polls any wait may take (virtual time makes this deterministic).
const MAX_POLLS: usize = 200_000;
const ARENA: usize = 1 << 20;

/// One simulated host.
struct Host {
    arena: Arc<Arena>,
    mr: SimMr,
    cq: SimCq,
    cm: SimCm,
    pd: SimPd,
    dev: SimDevice,
    done: Vec<Completion>,
    events: Vec<CmEvent<rpcrdma::fabric::sim::SimConnRequest>>,
}

impl Host {
    fn new(net: &SimNet, cq_depth: u32) -> Host {
        let dev = net.open_device();
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(cq_depth).unwrap();
        let cm = dev.create_cm().unwrap();
        // A private (not shareable) arena: sim registers any memory.
        let opts = ArenaOptions::new(ARENA).hugepages(HugePages::Never);
        let arena = Arc::new(Arena::new(&opts).unwrap());
        let mr = pd.reg_arena(&arena, Access::ALL).unwrap();
        Host {
            arena,
            mr,
            cq,
            cm,
            pd,
            dev,
            done: Vec::new(),
            events: Vec::new(),
        }
    }

    fn pump(&mut self) {
        let mut buf = [Completion::EMPTY; 8];
        let n = self.cq.poll(&mut buf);
        self.done.extend_from_slice(&buf[..n]);
        if let Some(e) = self.cm.poll_event().unwrap() {
            self.events.push(e);
        }
    }

    fn sge(&self, off: usize, len: usize) -> Sge {
        Sge::new(
            self.arena.base() as u64 + off as u64,
            len as u32,
            self.mr.lkey(),
        )
    }

    fn remote(&self, off: usize) -> RemoteAddr {
        RemoteAddr {
            addr: self.arena.base() as u64 + off as u64,
            rkey: self.mr.rkey(),
        }
    }

    fn fill(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.arena.len());
        // SAFETY: in bounds; the provider touches this memory only inside polls, which
        // run on this thread.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.arena.base().add(off), data.len())
        }
    }

    fn read(&self, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= self.arena.len());
        let mut v = vec![0u8; len];
        // SAFETY: as in `fill`.
        unsafe { std::ptr::copy_nonoverlapping(self.arena.base().add(off), v.as_mut_ptr(), len) }
        v
    }

    fn disconnects(&self) -> usize {
        self.events
            .iter()
            .filter(|e| matches!(e, CmEvent::Disconnected { .. }))
            .count()
    }
}

/// Queue-pair objects of a host (a free function so the borrow stays on two fields).
fn init<'a>(
    pd: &'a SimPd,
    cq: &'a SimCq,
    config: QpConfig,
) -> QpInit<'a, rpcrdma::fabric::sim::Sim> {
    QpInit {
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        config,
    }
}

/// Polls `hosts` in order until `cond` holds; fails after [`MAX_POLLS`] rounds.
fn wait(hosts: &mut [&mut Host], what: &str, mut cond: impl FnMut(&[&mut Host]) -> bool) {
    for _ in 0..MAX_POLLS {
        for h in hosts.iter_mut() {
            h.pump();
        }
        if cond(hosts) {
            return;
        }
    }
    panic!("no progress after {MAX_POLLS} polls waiting for {what}");
}

/// Connects `client` to `server` (which listens at `addr`); returns (client qp, server qp).
fn connect(
    server: &mut Host,
    client: &mut Host,
    addr: SimAddr,
    config: QpConfig,
) -> (SimQp, SimQp) {
    let cqp = client
        .cm
        .connect(&addr, init(&client.pd, &client.cq, config), b"hello")
        .unwrap();
    wait(&mut [&mut *server, &mut *client], "connect request", |h| {
        h[0].events
            .iter()
            .any(|e| matches!(e, CmEvent::ConnectRequest { .. }))
    });
    let pos = server
        .events
        .iter()
        .position(|e| matches!(e, CmEvent::ConnectRequest { .. }))
        .unwrap();
    let CmEvent::ConnectRequest { request, .. } = server.events.remove(pos) else {
        unreachable!()
    };
    let sqp = server
        .cm
        .accept(request, init(&server.pd, &server.cq, config), b"welcome")
        .unwrap();
    let (cc, sc) = (cqp.conn_id(), sqp.conn_id());
    let up = |h: &Host, c: ConnId| {
        h.events
            .iter()
            .any(|e| matches!(e, CmEvent::Established { conn, .. } if *conn == c))
    };
    wait(&mut [&mut *server, &mut *client], "established", |h| {
        up(h[0], sc) && up(h[1], cc)
    });
    server.events.clear();
    client.events.clear();
    (cqp, sqp)
}

fn listen(h: &mut Host, port: u64) -> SimAddr {
    let addr = SimAddr(port);
    h.cm.listen(&addr).unwrap();
    addr
}

fn config(depth: u32) -> QpConfig {
    QpConfig {
        caps: QpCaps {
            max_send_wr: depth,
            max_recv_wr: depth,
            max_send_sge: 4,
            max_recv_sge: 4,
        },
        rnr_retry: RNR_RETRY_INFINITE,
        min_rnr_timer: Duration::from_micros(10),
    }
}

/// Counts every wr_id's completions per queue pair, failing on a duplicate.
fn tally(done: &[Completion]) -> BTreeMap<(u32, u64), WcStatus> {
    let mut m = BTreeMap::new();
    for c in done {
        let prev = m.insert((c.qp_num, c.wr_id), c.status);
        assert!(prev.is_none(), "completed twice: {c:?}");
    }
    m
}

// ---------------------------------------------------------------------------------
// A seeded workload over three connections, used by the determinism and fault tests
// ---------------------------------------------------------------------------------

const CONNS: usize = 3;
const OPS: u64 = 48;
const RECVS: u64 = 24;

/// What one run of the workload observed.
#[derive(Debug, PartialEq, Eq)]
struct Run {
    hash: u64,
    trace: Vec<rpcrdma::fabric::sim::TraceEvent>,
    /// (qp, wr_id, status) in the order the server and clients saw them.
    order: Vec<(u32, u64, WcStatus)>,
    statuses: BTreeMap<(u32, u64), WcStatus>,
    disconnects: usize,
    drops: u64,
}

/// Three clients each post a random mix of Sends, Writes and Reads to one server;
/// every request is signaled. Returns what happened; asserts exactly-once completion
/// and per-queue-pair ordering along the way.
fn workload(cfg: SimConfig) -> Run {
    let net = SimNet::new(cfg);
    let _report = net.report_on_panic();
    let mut rng = net.workload_rng(0);
    let mut server = Host::new(&net, 4096);
    let addr = listen(&mut server, 1);
    let mut clients: Vec<Host> = (0..CONNS).map(|_| Host::new(&net, 256)).collect();
    let mut qps = Vec::new();
    for c in clients.iter_mut() {
        qps.push(connect(&mut server, c, addr, config(64)));
    }
    let mut posted: BTreeMap<(u32, u64), WcOpcode> = BTreeMap::new();
    let mut sends = vec![0usize; CONNS];
    for (i, (cqp, sqp)) in qps.iter_mut().enumerate() {
        let rb: Vec<[Sge; 1]> = (0..RECVS)
            .map(|r| [server.sge(i * 65536 + r as usize * 256, 256)])
            .collect();
        let recvs: Vec<RecvWr<'_>> = rb
            .iter()
            .enumerate()
            .map(|(r, sgl)| RecvWr {
                wr_id: 1000 + r as u64,
                sgl,
            })
            .collect();
        sqp.post_recv(&recvs).unwrap();
        for r in 0..RECVS {
            posted.insert((sqp.qp_num(), 1000 + r), WcOpcode::Recv);
        }
        let c = &clients[i];
        for op in 0..OPS {
            let len = 1 + rng.below(256) as usize;
            let sgl = [c.sge(op as usize * 512, len)];
            let kind = rng.below(3);
            let wr = if kind == 0 && sends[i] < RECVS as usize {
                sends[i] += 1;
                SendWr::send(op, &sgl)
            } else if kind == 1 {
                SendWr::write(
                    op,
                    &sgl,
                    server.remote(512 * 1024 + i * 65536 + op as usize * 256),
                )
            } else {
                SendWr::read(op, &sgl, server.remote(i * 65536))
            };
            posted.insert((cqp.qp_num(), op), opcode_of(&wr));
            cqp.post_send(&[wr]).unwrap();
        }
    }
    // Everything completes: the clients' requests, and the receives that Sends
    // consumed, or all receives where the connection failed (they are flushed).
    let target = |qps: &[(SimQp, SimQp)]| -> usize {
        qps.iter()
            .zip(&sends)
            .map(|((_, sqp), n)| {
                OPS as usize
                    + if sqp.state().is_error() {
                        RECVS as usize
                    } else {
                        *n
                    }
            })
            .sum()
    };
    let mut order = Vec::new();
    for _ in 0..MAX_POLLS {
        server.pump();
        for c in clients.iter_mut() {
            c.pump();
        }
        for h in std::iter::once(&mut server).chain(clients.iter_mut()) {
            order.extend(h.done.drain(..).map(|c| (c.qp_num, c.wr_id, c.status)));
        }
        if order.len() == target(&qps) {
            break;
        }
    }
    assert_eq!(order.len(), target(&qps), "not everything completed");
    let done: Vec<Completion> = order
        .iter()
        .map(|&(qp_num, wr_id, status)| Completion {
            qp_num,
            wr_id,
            status,
            ..Completion::EMPTY
        })
        .collect();
    let statuses = tally(&done);
    // Every completion is for something posted, with the right opcode family.
    for key in statuses.keys() {
        assert!(
            posted.contains_key(key),
            "completion for nothing posted: {key:?}"
        );
    }
    // Per queue pair, send-queue completions arrive in posting order, and a failure is
    // followed by flushes only.
    for (cqp, _) in &qps {
        let ids: Vec<(u64, WcStatus)> = order
            .iter()
            .filter(|(q, id, _)| *q == cqp.qp_num() && *id < 1000)
            .map(|&(_, id, st)| (id, st))
            .collect();
        assert!(
            ids.windows(2).all(|w| w[0].0 < w[1].0),
            "out of order: {ids:?}"
        );
        if let Some(first_bad) = ids.iter().position(|(_, s)| *s != WcStatus::Success) {
            assert!(ids[first_bad + 1..]
                .iter()
                .all(|(_, s)| *s == WcStatus::WrFlushed));
        }
    }
    let disconnects = server.disconnects() + clients.iter().map(Host::disconnects).sum::<usize>();
    Run {
        hash: net.trace_hash(),
        trace: net.trace(),
        order,
        statuses,
        disconnects,
        drops: net.stats().connections_dropped,
    }
}

fn opcode_of(wr: &SendWr<'_>) -> WcOpcode {
    match wr.op {
        rpcrdma::fabric::SendOp::RdmaWrite { .. } => WcOpcode::RdmaWrite,
        rpcrdma::fabric::SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
        _ => WcOpcode::Send,
    }
}

#[test]
fn same_seed_gives_an_identical_history() {
    let a = workload(SimConfig::seeded(7));
    let b = workload(SimConfig::seeded(7));
    assert_eq!(a.hash, b.hash);
    assert_eq!(a.trace, b.trace);
    assert_eq!(a.order, b.order);
    assert!(a.statuses.values().all(|s| *s == WcStatus::Success));
    assert_eq!(
        a.statuses.len(),
        CONNS * OPS as usize + a.order.iter().filter(|(_, id, _)| *id >= 1000).count()
    );
}

#[test]
fn different_seeds_interleave_queue_pairs_differently() {
    let runs: Vec<Run> = (1..=4).map(|s| workload(SimConfig::seeded(s))).collect();
    for (i, a) in runs.iter().enumerate() {
        for b in &runs[i + 1..] {
            assert_ne!(a.hash, b.hash);
            assert_ne!(a.order, b.order, "two seeds gave the same completion order");
        }
        // Completions of different queue pairs interleave (the order is not just one
        // connection after another).
        let qp_switches = a.order.windows(2).filter(|w| w[0].0 != w[1].0).count();
        assert!(
            qp_switches > 2 * CONNS,
            "queue pairs barely interleave: {qp_switches}"
        );
    }
}

#[test]
fn random_connection_drops_complete_everything_exactly_once() {
    let mut dropped_runs = 0;
    for seed in 0..6 {
        let faults = FaultConfig {
            drop_per_mille: 15,
            ..FaultConfig::NONE
        };
        let run = workload(SimConfig::seeded(seed).with_faults(faults));
        let again = workload(SimConfig::seeded(seed).with_faults(faults));
        assert_eq!(
            run.hash, again.hash,
            "faults are part of the seeded history"
        );
        assert!(run
            .statuses
            .values()
            .all(|s| matches!(s, WcStatus::Success | WcStatus::WrFlushed)));
        // Each killed connection is reported once on each side.
        assert_eq!(run.disconnects as u64, 2 * run.drops);
        if run.drops > 0 {
            dropped_runs += 1;
            assert!(run.statuses.values().any(|s| *s == WcStatus::WrFlushed));
        }
    }
    assert!(
        dropped_runs >= 2,
        "the fault rate never fired ({dropped_runs} runs)"
    );
}

// ---------------------------------------------------------------------------------
// Virtual time and progress
// ---------------------------------------------------------------------------------

#[test]
fn each_poll_is_one_tick_and_posting_alone_does_nothing() {
    let net = SimNet::seeded(3);
    let mut s = Host::new(&net, 256);
    let mut c = Host::new(&net, 256);
    let addr = listen(&mut s, 9);
    let (mut cqp, _sqp) = connect(&mut s, &mut c, addr, config(16));
    c.fill(0, b"abcdefgh");
    let t0 = net.now();
    let before = net.stats();
    cqp.post_send(&[SendWr::write(1, &[c.sge(0, 8)], s.remote(100))])
        .unwrap();
    assert_eq!(net.now(), t0, "posting does not move time");
    assert_eq!(net.stats().ops_executed, before.ops_executed);
    // The Write executes at the target: polling only the initiator never runs it.
    for _ in 0..1000 {
        c.pump();
    }
    assert!(c.done.is_empty());
    assert_eq!(s.read(100, 8), vec![0; 8]);
    // Two polls (CQ and CM) per pump, one microsecond each.
    assert_eq!(net.now() - t0, Duration::from_micros(2000));
    let mut buf = [Completion::EMPTY; 4];
    assert_eq!(
        s.cq.poll(&mut buf),
        0,
        "the target's poll executes, reporting nothing"
    );
    assert_eq!(s.read(100, 8), b"abcdefgh".to_vec());
    wait(&mut [&mut c], "write completion", |h| !h[0].done.is_empty());
    assert_eq!(c.done[0].status, WcStatus::Success);
    assert_eq!(c.done[0].byte_len, 8);
}

#[test]
fn run_until_idle_finishes_everything_and_reports_endless_rnr() {
    let net = SimNet::seeded(4);
    let mut s = Host::new(&net, 256);
    let mut c = Host::new(&net, 256);
    let addr = listen(&mut s, 9);
    let (mut cqp, mut sqp) = connect(&mut s, &mut c, addr, config(16));
    let rb = [s.sge(0, 64)];
    sqp.post_recv(&[RecvWr { wr_id: 5, sgl: &rb }]).unwrap();
    let sb = [c.sge(0, 64)];
    cqp.post_send(&[SendWr::send(6, &sb)]).unwrap();
    assert!(net.run_until_idle(Duration::from_secs(1)));
    let mut buf = [Completion::EMPTY; 4];
    assert_eq!(c.cq.poll(&mut buf), 1);
    assert_eq!((buf[0].wr_id, buf[0].status), (6, WcStatus::Success));
    assert_eq!(s.cq.poll(&mut buf), 1);
    assert_eq!((buf[0].wr_id, buf[0].opcode), (5, WcOpcode::Recv));
    // A Send with no receive retries for ever: never idle.
    cqp.post_send(&[SendWr::send(7, &sb)]).unwrap();
    let t0 = net.now();
    assert!(!net.run_until_idle(Duration::from_millis(5)));
    assert_eq!(net.now() - t0, Duration::from_millis(5));
    assert!(net.stats().rnr_naks >= 5_000 / 10 - 1, "{:?}", net.stats());
    assert_eq!(cqp.state(), QpState::ReadyToSend);
}

#[test]
fn trace_ring_report_and_thread_accounting() {
    let cfg = SimConfig::seeded(11).with_trace_capacity(8);
    let net = SimNet::new(cfg);
    let mut s = Host::new(&net, 256);
    let mut c = Host::new(&net, 256);
    let addr = listen(&mut s, 9);
    let (mut cqp, _sqp) = connect(&mut s, &mut c, addr, config(16));
    let b = [c.sge(0, 8)];
    for i in 0..10 {
        cqp.post_send(&[SendWr::write(i, &b, s.remote(0))]).unwrap();
    }
    wait(&mut [&mut s, &mut c], "ten writes", |h| {
        h[1].done.len() == 10
    });
    let trace = net.trace();
    assert_eq!(trace.len(), 8, "the ring keeps the newest events");
    assert!(trace.windows(2).all(|w| w[0].seq + 1 == w[1].seq));
    let last = trace.last().unwrap();
    assert_eq!(
        last.kind,
        TraceKind::Complete(WcOpcode::RdmaWrite, WcStatus::Success)
    );
    assert_eq!(last.id, 9);
    let report = net.report();
    assert!(report.contains("seed=11"), "{report}");
    assert!(report.contains("cqe RdmaWrite wr=0x9"), "{report}");
    let stats = net.stats();
    assert_eq!(stats.ops_delivered, 10);
    assert_eq!(stats.bytes_moved, 80);
    assert_eq!(stats.foreign_thread_calls, 0);
    // Another thread may poll (the conformance suite does), but the run is no longer
    // reproducible from the seed, and the counter says so.
    let cq = &mut c.cq;
    std::thread::scope(|sc| {
        sc.spawn(|| {
            let mut buf = [Completion::EMPTY; 1];
            cq.poll(&mut buf)
        })
        .join()
        .unwrap()
    });
    assert_eq!(net.stats().foreign_thread_calls, 1);
}

// ---------------------------------------------------------------------------------
// Fault injection
// ---------------------------------------------------------------------------------

/// A connection with requests of every kind outstanding, some executed, is killed:
/// every request completes exactly once (executed ones with their verdict, the rest
/// flushed, in order), both managers report one Disconnected, and the queues' slots all
/// come back.
#[test]
fn dropped_connection_flushes_every_outstanding_request_once() {
    let net = SimNet::seeded(21);
    let _report = net.report_on_panic();
    let mut s = Host::new(&net, 256);
    let mut c = Host::new(&net, 256);
    let addr = listen(&mut s, 9);
    let (mut cqp, mut sqp) = connect(&mut s, &mut c, addr, config(32));
    let rb: Vec<[Sge; 1]> = (0..4).map(|i| [s.sge(i * 128, 128)]).collect();
    let recvs: Vec<RecvWr<'_>> = rb
        .iter()
        .enumerate()
        .map(|(i, sgl)| RecvWr {
            wr_id: 100 + i as u64,
            sgl,
        })
        .collect();
    sqp.post_recv(&recvs).unwrap();
    let crb = [c.sge(60_000, 64)];
    cqp.post_recv(&[RecvWr {
        wr_id: 200,
        sgl: &crb,
    }])
    .unwrap();
    let b = [c.sge(0, 64)];
    let read_sgls: Vec<[Sge; 1]> = (0..30).map(|i| [c.sge(8192 + 64 * i, 64)]).collect();
    let wrs: Vec<SendWr<'_>> = (0..30usize)
        .map(|i| match i % 3 {
            // Ten Sends for four receives: six wait in RNR when the link dies.
            0 => SendWr::send(i as u64, &b),
            1 => SendWr::write(i as u64, &b, s.remote(4096 + 64 * i)),
            _ => SendWr::read(i as u64, &read_sgls[i], s.remote(0)),
        })
        .collect();
    cqp.post_send(&wrs).unwrap();
    // Let part of it execute.
    wait(&mut [&mut s, &mut c], "some completions", |h| {
        h[1].done.len() >= 5
    });
    assert!(net.drop_connection(cqp.conn_id()));
    assert!(cqp.state().is_error() && sqp.state().is_error());
    wait(&mut [&mut s, &mut c], "both disconnected", |h| {
        h[0].disconnects() == 1 && h[1].disconnects() == 1
    });
    for _ in 0..1000 {
        s.pump();
        c.pump();
    }
    assert_eq!(
        (s.disconnects(), c.disconnects()),
        (1, 1),
        "one event per side"
    );
    assert_eq!(cqp.state(), QpState::Disconnected);
    assert_eq!(sqp.state(), QpState::Disconnected);
    let cs = tally(&c.done);
    let ss = tally(&s.done);
    assert_eq!(cs.len(), 31, "30 requests and one receive: {cs:?}");
    assert_eq!(ss.len(), 4);
    let ids: Vec<(u64, WcStatus)> = c
        .done
        .iter()
        .filter(|d| d.opcode != WcOpcode::Recv)
        .map(|d| (d.wr_id, d.status))
        .collect();
    assert_eq!(
        ids.iter().map(|x| x.0).collect::<Vec<_>>(),
        (0..30).collect::<Vec<_>>()
    );
    let first_flush = ids.iter().position(|x| x.1 == WcStatus::WrFlushed).unwrap();
    assert!(first_flush >= 5);
    assert!(ids[..first_flush].iter().all(|x| x.1 == WcStatus::Success));
    assert!(ids[first_flush..]
        .iter()
        .all(|x| x.1 == WcStatus::WrFlushed));
    assert_eq!(cs[&(cqp.qp_num(), 200)], WcStatus::WrFlushed);
    // The four receives were consumed by Sends or flushed.
    assert!(ss
        .values()
        .all(|s| matches!(s, WcStatus::Success | WcStatus::WrFlushed)));
    let stats = net.stats();
    assert_eq!((stats.connections_dropped, stats.faults_injected), (1, 1));
    // No slot leaked: a full queue's worth can be posted again (and is flushed).
    c.done.clear();
    let again: Vec<SendWr<'_>> = (0..32).map(|i| SendWr::send(500 + i, &b)).collect();
    cqp.post_send(&again).expect("every slot came back");
    wait(&mut [&mut c], "flushes", |h| h[0].done.len() == 32);
    assert!(c.done.iter().all(|d| d.status == WcStatus::WrFlushed));
    assert_eq!(tally(&c.done).len(), 32);
}

#[test]
fn scheduled_random_drop_is_reproducible() {
    let at = |seed| {
        let net = SimNet::seeded(seed);
        let mut s = Host::new(&net, 256);
        let mut c = Host::new(&net, 256);
        let addr = listen(&mut s, 9);
        let (cqp, sqp) = connect(&mut s, &mut c, addr, config(16));
        let after = net
            .schedule_random_drop(sqp.conn_id(), Duration::from_millis(1))
            .unwrap();
        assert!(after <= Duration::from_millis(1));
        let t0 = net.now();
        wait(&mut [&mut s, &mut c], "drop", |_| cqp.state().is_error());
        assert!(net.now() - t0 >= after);
        wait(&mut [&mut s, &mut c], "events", |h| {
            h[0].disconnects() == 1 && h[1].disconnects() == 1
        });
        (after, net.trace_hash())
    };
    assert_eq!(at(5), at(5));
    assert_ne!(at(5).0, at(6).0);
    let net = SimNet::seeded(1);
    assert!(matches!(
        net.schedule_drop(ConnId(999), Duration::ZERO),
        Err(FabricError::UnknownConn(ConnId(999)))
    ));
    assert!(!net.drop_connection(ConnId(999)));
}

#[test]
fn fail_point_fails_the_third_read_with_remote_access_error() {
    let net = SimNet::seeded(8);
    let mut s = Host::new(&net, 256);
    let mut c = Host::new(&net, 256);
    let addr = listen(&mut s, 9);
    let (mut cqp, sqp) = connect(&mut s, &mut c, addr, config(16));
    net.fail_op(FailPoint {
        opcode: WcOpcode::RdmaRead,
        nth: 3,
        status: WcStatus::RemoteAccessError,
    });
    s.fill(0, &[7; 64]);
    let sinks: Vec<[Sge; 1]> = (0..5).map(|i| [c.sge(1000 + 64 * i, 64)]).collect();
    let reads: Vec<SendWr<'_>> = sinks
        .iter()
        .enumerate()
        .map(|(i, sgl)| SendWr::read(i as u64, sgl, s.remote(0)))
        .collect();
    cqp.post_send(&reads).unwrap();
    wait(&mut [&mut s, &mut c], "five completions", |h| {
        h[1].done.len() == 5
    });
    let st: Vec<WcStatus> = c.done.iter().map(|d| d.status).collect();
    assert_eq!(
        st,
        [
            WcStatus::Success,
            WcStatus::Success,
            WcStatus::RemoteAccessError,
            WcStatus::WrFlushed,
            WcStatus::WrFlushed
        ]
    );
    assert_eq!(c.read(1000, 128), vec![7; 128]);
    assert_eq!(
        c.read(1128, 64),
        vec![0; 64],
        "the failed read placed nothing"
    );
    assert!(sqp.state().is_error(), "both sides fail");
    assert_eq!(net.stats().faults_injected, 1);
    assert!(net
        .trace()
        .iter()
        .any(|e| matches!(e.kind, TraceKind::Fault(_)) && e.id == 2));
}

#[test]
fn fail_point_on_a_receive_fails_both_sides() {
    let net = SimNet::seeded(9);
    let mut s = Host::new(&net, 256);
    let mut c = Host::new(&net, 256);
    let addr = listen(&mut s, 9);
    let (mut cqp, mut sqp) = connect(&mut s, &mut c, addr, config(16));
    net.fail_op(FailPoint {
        opcode: WcOpcode::Recv,
        nth: 2,
        status: WcStatus::LocalLengthError,
    });
    let rb = [s.sge(0, 64)];
    let recvs: Vec<RecvWr<'_>> = (0..3)
        .map(|i| RecvWr {
            wr_id: 10 + i,
            sgl: &rb,
        })
        .collect();
    sqp.post_recv(&recvs).unwrap();
    let b = [c.sge(0, 8)];
    cqp.post_send(&[
        SendWr::send(1, &b),
        SendWr::send(2, &b),
        SendWr::send(3, &b),
    ])
    .unwrap();
    wait(&mut [&mut s, &mut c], "completions", |h| {
        h[0].done.len() == 3 && h[1].done.len() == 3
    });
    let srv: Vec<(u64, WcStatus)> = s.done.iter().map(|d| (d.wr_id, d.status)).collect();
    let cli: Vec<(u64, WcStatus)> = c.done.iter().map(|d| (d.wr_id, d.status)).collect();
    assert_eq!(
        srv,
        [
            (10, WcStatus::Success),
            (11, WcStatus::LocalLengthError),
            (12, WcStatus::WrFlushed)
        ]
    );
    assert_eq!(
        cli,
        [
            (1, WcStatus::Success),
            (2, WcStatus::RemoteInvalidRequest),
            (3, WcStatus::WrFlushed)
        ]
    );
}

#[test]
fn injected_rnr_and_slow_receivers_delay_but_do_not_lose_sends() {
    let faults = FaultConfig {
        rnr_per_mille: 300,
        max_recv_delay: Duration::from_micros(50),
        ..FaultConfig::NONE
    };
    let net = SimNet::new(SimConfig::seeded(12).with_faults(faults));
    let mut s = Host::new(&net, 256);
    let mut c = Host::new(&net, 256);
    let addr = listen(&mut s, 9);
    let (mut cqp, mut sqp) = connect(&mut s, &mut c, addr, config(32));
    let rb: Vec<[Sge; 1]> = (0..20).map(|i| [s.sge(i * 64, 64)]).collect();
    let recvs: Vec<RecvWr<'_>> = rb
        .iter()
        .enumerate()
        .map(|(i, sgl)| RecvWr {
            wr_id: i as u64,
            sgl,
        })
        .collect();
    sqp.post_recv(&recvs).unwrap();
    let sb: Vec<[Sge; 1]> = (0..20).map(|i| [c.sge(i * 64, 64)]).collect();
    for (i, sgl) in sb.iter().enumerate() {
        c.fill(i * 64, &[i as u8; 64]);
        cqp.post_send(&[SendWr::send(i as u64, sgl)]).unwrap();
    }
    wait(&mut [&mut s, &mut c], "all sends", |h| {
        h[0].done.len() == 20 && h[1].done.len() == 20
    });
    assert!(s
        .done
        .iter()
        .chain(&c.done)
        .all(|d| d.status == WcStatus::Success));
    for i in 0..20 {
        assert_eq!(
            s.read(i * 64, 64),
            vec![i as u8; 64],
            "send {i} landed in order"
        );
    }
    let st = net.stats();
    assert!(st.rnr_naks > 0 && st.faults_injected > 0, "{st:?}");

    // With no retries allowed, an injected RNR is fatal.
    let faults = FaultConfig {
        rnr_per_mille: 1000,
        ..FaultConfig::NONE
    };
    let net = SimNet::new(SimConfig::seeded(12).with_faults(faults));
    let mut s = Host::new(&net, 256);
    let mut c = Host::new(&net, 256);
    let addr = listen(&mut s, 9);
    let cfg = QpConfig {
        rnr_retry: 0,
        ..config(8)
    };
    let (mut cqp, mut sqp) = connect(&mut s, &mut c, addr, cfg);
    let rb = [s.sge(0, 64)];
    let sb = [c.sge(0, 64)];
    sqp.post_recv(&[RecvWr { wr_id: 1, sgl: &rb }]).unwrap();
    cqp.post_send(&[SendWr::send(2, &sb)]).unwrap();
    wait(&mut [&mut s, &mut c], "failure", |h| {
        !h[0].done.is_empty() && !h[1].done.is_empty()
    });
    assert_eq!(c.done[0].status, WcStatus::RnrRetryExceeded);
    assert_eq!(s.done[0].status, WcStatus::WrFlushed);
}

#[test]
fn stalled_cq_holds_completions_for_the_stall() {
    let net = SimNet::seeded(13);
    let mut s = Host::new(&net, 256);
    let mut c = Host::new(&net, 256);
    let addr = listen(&mut s, 9);
    let (mut cqp, _sqp) = connect(&mut s, &mut c, addr, config(16));
    let b = [c.sge(0, 8)];
    cqp.post_send(&[SendWr::write(1, &b, s.remote(0))]).unwrap();
    assert!(net.run_until_idle(Duration::from_millis(1)));
    net.stall_cq(&c.cq, Duration::from_micros(500)).unwrap();
    let mut buf = [Completion::EMPTY; 2];
    // 499 polls of 1 µs stay inside the stall.
    for _ in 0..499 {
        assert_eq!(c.cq.poll(&mut buf), 0);
    }
    assert_eq!(c.cq.poll(&mut buf), 1);
    assert_eq!((buf[0].wr_id, buf[0].status), (1, WcStatus::Success));
    // A CQ of another network is refused.
    let other = SimNet::seeded(13);
    assert!(matches!(
        other.stall_cq(&c.cq, Duration::from_micros(1)),
        Err(FabricError::WrongDevice)
    ));

    // Random stalls: everything still arrives, in order per queue pair.
    let faults = FaultConfig {
        cq_stall_per_mille: 200,
        max_cq_stall: Duration::from_micros(100),
        ..FaultConfig::NONE
    };
    let run = workload(SimConfig::seeded(14).with_faults(faults));
    assert!(run.statuses.values().all(|s| *s == WcStatus::Success));
}

// ---------------------------------------------------------------------------------
// Setup rules specific to sim
// ---------------------------------------------------------------------------------

#[test]
fn setup_is_checked() {
    let net = SimNet::seeded(1);
    let mut s = Host::new(&net, 16);
    let mut c = Host::new(&net, 16);
    let addr = listen(&mut s, 9);
    assert!(matches!(
        s.cm.listen(&addr),
        Err(FabricError::BadAddress(_))
    ));
    // 2 x 16 entries do not fit a 16-deep CQ.
    assert!(matches!(
        c.cm.connect(&addr, init(&c.pd, &c.cq, config(16)), b""),
        Err(FabricError::CqTooSmall {
            needed: 32,
            depth: 16
        })
    ));
    assert!(matches!(
        c.cm.connect(&addr, init(&c.pd, &c.cq, config(0)), b""),
        Err(FabricError::InvalidCaps { .. })
    ));
    assert!(matches!(
        c.dev.create_cq(0),
        Err(FabricError::InvalidCaps { .. })
    ));
    // Objects of another device or network are refused.
    let other = SimNet::seeded(1);
    let mut o = Host::new(&other, 64);
    let foreign = QpInit {
        pd: &c.pd,
        send_cq: &o.cq,
        recv_cq: &o.cq,
        srq: None,
        config: config(8),
    };
    assert!(matches!(
        o.cm.connect(&addr, foreign, b""),
        Err(FabricError::WrongDevice)
    ));
    let foreign = QpInit {
        pd: &s.pd,
        send_cq: &c.cq,
        recv_cq: &c.cq,
        srq: None,
        config: config(8),
    };
    assert!(matches!(
        c.cm.connect(&addr, foreign, b""),
        Err(FabricError::WrongDevice)
    ));
    // A dropped connect request is a rejection without private data.
    let qp =
        c.cm.connect(&addr, init(&c.pd, &c.cq, config(8)), b"x")
            .unwrap();
    wait(&mut [&mut s, &mut c], "request", |h| {
        !h[0].events.is_empty()
    });
    s.events.clear();
    wait(&mut [&mut s, &mut c], "rejected", |h| {
        !h[1].events.is_empty()
    });
    match &c.events[0] {
        CmEvent::Rejected { conn, private_data } => {
            assert_eq!(*conn, qp.conn_id());
            assert!(private_data.is_empty());
        }
        e => panic!("expected Rejected, got {e:?}"),
    }
    assert!(qp.state().is_error());
    // Fast-registration slots move their key's generation; plain registrations do not.
    let mut fast = c.pd.alloc_fast_mr(4096).unwrap();
    let k = fast.lkey();
    assert_ne!(fast.rekey(), k);
    let mut plain = c.pd.reg_mr(&c.arena, 0, 4096, Access::LOCAL_WRITE).unwrap();
    let k = plain.lkey();
    assert_eq!(plain.rekey(), k);
    assert!(matches!(
        c.pd.alloc_fast_mr(0),
        Err(FabricError::BadLength(0))
    ));
}

#[test]
fn destroying_a_queue_pair_disconnects_the_peer() {
    let net = SimNet::seeded(2);
    let mut s = Host::new(&net, 256);
    let mut c = Host::new(&net, 256);
    let addr = listen(&mut s, 9);
    let (cqp, mut sqp) = connect(&mut s, &mut c, addr, config(16));
    let rb = [s.sge(0, 64)];
    sqp.post_recv(&[RecvWr { wr_id: 1, sgl: &rb }]).unwrap();
    drop(cqp);
    wait(&mut [&mut s, &mut c], "server disconnect", |h| {
        h[0].disconnects() == 1 && !h[0].done.is_empty()
    });
    assert_eq!(s.done[0].status, WcStatus::WrFlushed);
    assert_eq!(sqp.state(), QpState::Disconnected);
    assert_eq!(c.disconnects(), 0, "the destroyed side reports nothing");
    let b = [s.sge(0, 8)];
    assert!(sqp.post_send(&[SendWr::send(2, &b)]).is_ok(), "posts flush");
    let err = sqp
        .post_send(&[SendWr {
            wr_id: 3,
            op: rpcrdma::fabric::SendOp::LocalInvalidate { key: 0 },
            sgl: &b,
            flags: rpcrdma::fabric::SendFlags::SIGNALED,
        }])
        .unwrap_err();
    assert!(matches!(err.kind, PostErrorKind::Malformed(_)));
}
