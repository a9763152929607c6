//! Shared receive queues (`ProtectionDomain::create_srq`), the same contract on every
//! provider: one server with one completion queue and one shared receive queue serves
//! several clients, each on its own device.

use super::*;
use rpcrdma::fabric::{SharedReceiveQueue, SrqConfig};

/// Receives each server queue pair may hold taken but not yet reported.
const QP_RECV: u32 = 8;
/// The shared queue's depth.
const SRQ_DEPTH: u32 = 32;
/// Octets per receive buffer (and apart in the server's arena).
const SLOT: usize = 256;

/// The server: every queue pair takes its receives from `srq` and reports to `cq`.
pub struct SrqServer<P: Provider> {
    pub srq: P::Srq,
    pub qps: Vec<P::Qp>,
    pub h: Host<P>,
}

/// A server with `n` connected clients; `client` configures the clients' queue pairs.
pub struct SrqSetup<P: Provider> {
    pub s: SrqServer<P>,
    pub clients: Vec<Side<P>>,
}

fn server_config() -> QpConfig {
    QpConfig {
        caps: QpCaps {
            max_send_wr: 16,
            max_recv_wr: QP_RECV,
            max_send_sge: 4,
            max_recv_sge: 1,
        },
        ..QpConfig::default()
    }
}

impl<P: Provider> SrqSetup<P> {
    /// Polls the server and every client once.
    pub fn pump(&mut self) {
        self.s.h.pump();
        for c in &mut self.clients {
            c.h.pump();
        }
    }

    /// Polls until `cond` holds, failing the test after [`DEADLINE`].
    pub fn wait(&mut self, what: &str, mut cond: impl FnMut(&SrqSetup<P>) -> bool) {
        let end = Instant::now() + DEADLINE;
        loop {
            self.pump();
            if cond(self) {
                return;
            }
            assert!(
                Instant::now() < end,
                "timed out waiting for {what}: server reported {:?}",
                self.s.h.done
            );
            std::thread::yield_now();
        }
    }

    /// Posts receive `wr_id` into buffer `slot` of the server's arena.
    pub fn post(&mut self, wr_id: u64, slot: usize) {
        let b = [self.s.h.sge(slot * SLOT, SLOT)];
        self.s
            .srq
            .post_recv(&[RecvWr { wr_id, sgl: &b }])
            .expect("post to the shared receive queue");
    }

    /// Client `i` sends `data` (written at its arena's offset 0) as request `wr_id`.
    pub fn send(&mut self, i: usize, wr_id: u64, data: &[u8]) {
        let c = &mut self.clients[i];
        c.h.fill(0, data);
        let b = [c.h.sge(0, data.len())];
        c.qp.post_send(&[SendWr::send(wr_id, &b)]).expect("send");
    }

    /// Waits for `n` receive completions at the server and takes them.
    pub fn receives(&mut self, n: usize) -> Vec<Completion> {
        self.wait("receive completions", |s| {
            s.s.h
                .done
                .iter()
                .filter(|c| c.opcode == WcOpcode::Recv)
                .count()
                >= n
        });
        let (r, rest): (Vec<_>, Vec<_>) = self
            .s
            .h
            .done
            .drain(..)
            .partition(|c| c.opcode == WcOpcode::Recv);
        self.s.h.done = rest;
        assert_eq!(r.len(), n, "receive completions: {r:?}");
        r
    }
}

/// Connects `n` clients to a server whose queue pairs share one receive queue, or
/// returns `None` where the device has none (`max_srq_wr` 0, `create_srq` answering
/// Unsupported).
pub fn srq_setup<F: Fixture>(n: usize, client: QpConfig) -> Option<SrqSetup<F::P>> {
    let o = Opts {
        server: server_config(),
        client,
        ..Opts::default()
    };
    let dev = F::open_device();
    let pd = dev.alloc_pd().expect("alloc_pd");
    let depth = SRQ_DEPTH + n as u32 * 16;
    let cq = dev.create_cq(depth).expect("create_cq");
    let cfg = SrqConfig {
        max_wr: SRQ_DEPTH,
        max_sge: 1,
    };
    let srq = match pd.create_srq(&cq, cfg) {
        Ok(q) => q,
        Err(FabricError::Unsupported(what)) => {
            assert!(
                !F::HAS_SRQ,
                "the device was expected to have shared receive queues: {what}"
            );
            assert_eq!(
                dev.caps().max_srq_wr,
                0,
                "Unsupported ({what}) but caps say otherwise"
            );
            return None;
        }
        Err(e) => panic!("create_srq: {e}"),
    };
    assert!(dev.caps().max_srq_wr >= SRQ_DEPTH);
    assert_eq!(srq.depth(), SRQ_DEPTH);
    assert_eq!(srq.posted(), 0);
    let arena = F::arena(o.arena_len);
    let mr = pd.reg_arena(&arena, Access::ALL).expect("register arena");
    let h = Host {
        arena,
        mr,
        cq,
        rcq: None,
        cm: dev.create_cm().expect("create_cm"),
        pd,
        dev,
        events: VecDeque::new(),
        done: Vec::new(),
    };
    let mut setup: SrqSetup<F::P> = SrqSetup {
        s: SrqServer {
            srq,
            qps: Vec::new(),
            h,
        },
        clients: Vec::new(),
    };
    let addr = F::unique_addr();
    setup.s.h.cm.listen(&addr).expect("listen");
    for _ in 0..n {
        let mut c = Host::<F::P>::new::<F>(&o, &o.client);
        let cqp = c.connect(&addr, o.client, b"").expect("connect");
        let i = setup.clients.len();
        setup.clients.push(Side { qp: cqp, h: c });
        setup.wait("a connect request", |s| !s.s.h.events.is_empty());
        let request = match setup.s.h.events.pop_front() {
            Some(CmEvent::ConnectRequest { request, .. }) => request,
            e => panic!("expected a connect request, got {e:?}"),
        };
        let sv = &mut setup.s;
        let init = QpInit {
            pd: &sv.h.pd,
            send_cq: &sv.h.cq,
            recv_cq: &sv.h.cq,
            srq: Some(&sv.srq),
            config: o.server,
        };
        let sqp =
            sv.h.cm
                .accept(request, init, b"")
                .expect("accept onto the srq");
        setup.s.qps.push(sqp);
        setup.wait("both ends established", |s| {
            s.clients[i].qp.state() == QpState::ReadyToSend
                && s.s.qps[i].state() == QpState::ReadyToSend
        });
        // Drop the Established events; nothing else is expected yet.
        setup.s.h.events.clear();
        setup.clients[i].h.events.clear();
    }
    Some(setup)
}

/// Sends from several queue pairs all land in the one shared queue: each completion
/// names the queue pair the Send came in on, in the receive the queue handed out next
/// (post order across queue pairs), with that client's bytes; a queue pair attached to
/// a shared queue refuses receives of its own.
pub fn srq_serves_several_queue_pairs<F: Fixture>() {
    let Some(mut t) = srq_setup::<F>(3, QpConfig::default()) else {
        return;
    };
    let b = [t.s.h.sge(0, 64)];
    let refused = t.s.qps[0].post_recv(&[RecvWr { wr_id: 1, sgl: &b }]);
    assert!(
        refused.is_err(),
        "a queue pair on a shared queue posts no receives"
    );
    for k in 0..6u64 {
        t.post(100 + k, k as usize);
    }
    assert_eq!(t.s.srq.posted(), 6);
    // One at a time, clients in the order 2, 0, 1, 2, 0, 1: the k-th Send takes the
    // k-th posted receive whoever sent it.
    let order = [2usize, 0, 1, 2, 0, 1];
    for (k, &i) in order.iter().enumerate() {
        let data = pattern(1000 + k as u64, 40 + k);
        t.send(i, k as u64, &data);
        let r = t.receives(1);
        expect(&r[0], 100 + k as u64, WcOpcode::Recv, WcStatus::Success);
        assert_eq!(
            r[0].qp_num,
            t.s.qps[i].qp_num(),
            "receive {k} names client {i}'s queue pair"
        );
        assert_eq!(r[0].byte_len as usize, data.len());
        assert_eq!(t.s.h.read(k * SLOT, data.len()), data, "receive {k}");
    }
    assert_eq!(t.s.srq.posted(), 0);
    // All three at once: three receives taken, each completion routed to the queue
    // pair whose client's bytes its buffer holds.
    for k in 6..9u64 {
        t.post(100 + k, k as usize);
    }
    for i in 0..3 {
        t.send(i, 50 + i as u64, &pattern(2000 + i as u64, 100));
    }
    let r = t.receives(3);
    let mut ids: Vec<u64> = r.iter().map(|c| c.wr_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![106, 107, 108]);
    for c in &r {
        assert_eq!(c.status, WcStatus::Success);
        let i =
            t.s.qps
                .iter()
                .position(|q| q.qp_num() == c.qp_num)
                .expect("a server queue pair");
        let slot = (c.wr_id - 100) as usize;
        assert_eq!(
            t.s.h.read(slot * SLOT, 100),
            pattern(2000 + i as u64, 100),
            "routed to {i}"
        );
    }
    // Every client's Send completed successfully.
    t.wait("the clients' send completions", |t| {
        t.clients.iter().all(|c| c.h.done.len() >= 3)
    });
    for c in &t.clients {
        assert!(
            c.h.done.iter().all(|x| x.status == WcStatus::Success),
            "{:?}",
            c.h.done
        );
    }
    for q in &t.s.qps {
        assert_eq!(q.state(), QpState::ReadyToSend);
    }
}

/// A Send finding the shared queue empty is handled as one finding an empty receive
/// queue (receiver-not-ready retries, then RnrRetryExceeded; on iWARP a Terminate at
/// once): that connection fails, and only that one. The queue and the other queue
/// pairs go on, and a receive posted afterwards goes to the next Send.
pub fn srq_empty_fails_only_that_connection<F: Fixture>() {
    let client = QpConfig {
        rnr_retry: 1,
        ..QpConfig::default()
    };
    let Some(mut t) = srq_setup::<F>(2, client) else {
        return;
    };
    let caps = t.s.h.dev.caps();
    t.post(100, 0);
    t.send(0, 1, &pattern(1, 32));
    let r = t.receives(1);
    expect(&r[0], 100, WcOpcode::Recv, WcStatus::Success);
    assert_eq!(t.s.srq.posted(), 0);
    // The queue is empty now: client 1's Send finds nothing.
    t.send(1, 2, &pattern(2, 32));
    t.wait("the connection of client 1 fails", |t| {
        t.clients[1].qp.state().is_error() && t.s.qps[1].state().is_error()
    });
    t.wait("client 1's send completion", |t| {
        !t.clients[1].h.done.is_empty()
    });
    let allowed = requester_statuses(&caps, WcStatus::RnrRetryExceeded);
    expect_any(&t.clients[1].h.done[0], 2, WcOpcode::Send, &allowed);
    // Nothing was taken for it, and nothing placed.
    assert!(
        t.s.h.done.iter().all(|c| c.opcode != WcOpcode::Recv),
        "{:?}",
        t.s.h.done
    );
    assert_eq!(t.s.h.read(SLOT, 32), vec![0; 32]);
    // Client 0 goes on with a receive posted now.
    t.post(101, 1);
    t.send(0, 3, &pattern(3, 48));
    let r = t.receives(1);
    expect(&r[0], 101, WcOpcode::Recv, WcStatus::Success);
    assert_eq!(r[0].qp_num, t.s.qps[0].qp_num());
    assert_eq!(t.s.h.read(SLOT, 48), pattern(3, 48));
    assert_eq!(t.s.qps[0].state(), QpState::ReadyToSend);
}

/// Destroying a queue pair leaves the shared queue's receives posted for the others,
/// still in post order.
pub fn srq_survives_a_destroyed_queue_pair<F: Fixture>() {
    let Some(mut t) = srq_setup::<F>(2, QpConfig::default()) else {
        return;
    };
    for k in 0..4u64 {
        t.post(100 + k, k as usize);
    }
    t.send(0, 1, &pattern(10, 32));
    let r = t.receives(1);
    expect(&r[0], 100, WcOpcode::Recv, WcStatus::Success);
    assert_eq!(r[0].qp_num, t.s.qps[0].qp_num());
    // Server queue pair 0 goes, then its client.
    drop(t.s.qps.remove(0));
    t.wait("client 0 sees its connection end", |t| {
        t.clients[0].qp.state().is_error()
    });
    drop(t.clients.remove(0));
    assert_eq!(t.s.srq.posted(), 3);
    for k in 0..3u64 {
        t.send(0, 10 + k, &pattern(20 + k, 64));
        let r = t.receives(1);
        expect(&r[0], 101 + k, WcOpcode::Recv, WcStatus::Success);
        assert_eq!(r[0].qp_num, t.s.qps[0].qp_num());
        assert_eq!(t.s.h.read((1 + k as usize) * SLOT, 64), pattern(20 + k, 64));
    }
    assert_eq!(t.s.srq.posted(), 0);
}
