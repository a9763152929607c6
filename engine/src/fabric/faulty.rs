//! `Faulty<P>`: any provider with faults injected behind the provider interface, so the
//! same faults reach the engine over shm, siw, sim and verbs. Seeded: one seed gives the
//! same decisions in the same order (what the decisions meet still depends on the inner
//! provider's timing, except on sim).
//!
//! What it injects, each at a rate per million chances ([`FaultConfig`]):
//!
//! - **a refused post**: `post_send` refuses the chain's first request
//!   ([`PostErrorKind::Malformed`], nothing posted), as a device out of resources would;
//! - **a dropped connection**: after a `post_send`, the connection manager disconnects
//!   that connection at its next poll, as a peer or network failure would (drawn per
//!   message, not per poll, so the rate per call does not depend on how fast the
//!   machine polls);
//! - **an abort from the peer**: a connection is disconnected and its queue pair
//!   reports [`PeerAbort`] (kind [`Operation`](AbortKind::Operation)), as after an iWARP
//!   Terminate; a mock of the peer's decision, since only siw peers can send one, but
//!   what the local side sees is what it would see;
//! - **delayed and reordered completions**: a completion queue holds completions back
//!   for up to [`FaultConfig::max_completion_delay`] polls, keeping each queue pair's
//!   own order (which verbs guarantees) while completions of different queue pairs
//!   overtake each other (which it does not forbid);
//! - **a stalled side**: a completion queue stops being polled for up to
//!   [`FaultConfig::max_stall_polls`] polls, so on providers that make progress in the
//!   poll (shm, siw) the peer's requests wait, as behind a stalled process.
//!
//! And one deterministic switch, not drawn: a [`SendCompletionGate`] holds back every
//! send-queue completion of the device's queues while receives' completions still
//! pass, for as long as a test keeps it closed (send completions trailing new
//! receives by any number of rounds, which verbs allows: it orders a work queue's
//! completions, not a send queue's against a receive queue's).
//!
//! [`FaultCounters`] says what was injected.
//!
//! The accept hook (`accept_prepared`) runs after the inner provider's `accept`, before
//! anything is polled: right for providers that make progress only in their polls
//! (shm, siw, sim), where nothing the peer sends is taken in before the hook's receives
//! are posted. Over verbs hardware the peer's first Send could beat them, so wrapping
//! verbs suits tests that tolerate that (and is why the soak runs shm and siw).

use std::collections::{HashMap, VecDeque};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::abort::{AbortKind, PeerAbort};
use super::cm::{CmEvent, ConnId};
use super::error::{FabricError, PostError, PostErrorKind};
use super::mr::Access;
use super::provider::{
    CompletionQueue, ConnectionManager, Device, ProtectionDomain, Provider, QpInit, QueuePair,
};
use super::sim::SimRng;
use super::types::{
    Completion, DeviceCaps, PeerAddr, QpCaps, QpState, RecvWr, SendWr, SrqConfig, WcOpcode,
};
use rpcrdma_pools::Arena;

/// Rates are per this many chances.
pub const PER_MILLION: u32 = 1_000_000;

/// What to inject and how often. All rates default to zero (no faults).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultConfig {
    /// Seed of the decisions.
    pub seed: u64,
    /// Per `post_send` call: refuse it.
    pub post_failure_ppm: u32,
    /// Per `post_send` call: the connection is dropped (its manager disconnects it at
    /// its next poll).
    pub disconnect_ppm: u32,
    /// Per `post_send` call: the peer aborts the connection.
    pub abort_ppm: u32,
    /// Per completion: hold it back (up to `max_completion_delay` polls).
    pub delay_ppm: u32,
    /// Most polls a completion is held back.
    pub max_completion_delay: u32,
    /// Per completion-queue poll: stop polling (up to `max_stall_polls` polls).
    pub stall_ppm: u32,
    /// Most polls a stall lasts.
    pub max_stall_polls: u32,
}

/// What was injected so far, over every object of one [`FaultyDevice`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounters {
    /// Posts refused.
    pub posts_refused: u64,
    /// Connections dropped.
    pub disconnects: u64,
    /// Peer aborts.
    pub aborts: u64,
    /// Completions held back.
    pub delayed: u64,
    /// Stalls started.
    pub stalls: u64,
}

#[derive(Debug, Default)]
struct Counters {
    posts_refused: AtomicU64,
    disconnects: AtomicU64,
    aborts: AtomicU64,
    delayed: AtomicU64,
    stalls: AtomicU64,
}

#[derive(Debug)]
struct Shared {
    cfg: FaultConfig,
    /// The decisions' generator; a lock because every object of the device draws from
    /// it (this is a test tool: the lock is taken per decision, never on a production
    /// path).
    rng: Mutex<SimRng>,
    /// Connections whose queue pair decided on an abort or a drop; their manager
    /// disconnects them.
    doomed: Mutex<Vec<ConnId>>,
    counters: Counters,
    /// [`SendCompletionGate`]: send-queue completions are held back while set.
    sends_gated: AtomicBool,
}

impl Shared {
    fn rng(&self) -> std::sync::MutexGuard<'_, SimRng> {
        self.rng.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True with probability `ppm` per million.
    fn chance(&self, ppm: u32) -> bool {
        ppm > 0 && self.rng().below(u64::from(PER_MILLION)) < u64::from(ppm)
    }

    /// `conn` is to be disconnected at its manager's next poll.
    fn doom(&self, conn: ConnId) {
        self.doomed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(conn);
    }

    /// Uniform in `1..=max` (1 when `max` is 0).
    fn upto(&self, max: u32) -> u64 {
        self.rng().range_inclusive(1, u64::from(max.max(1)))
    }
}

/// The provider `P` with faults injected.
#[derive(Debug)]
pub struct Faulty<P>(PhantomData<P>);

impl<P: Provider> Provider for Faulty<P> {
    const NAME: &'static str = "faulty";
    type Device = FaultyDevice<P>;
    type Pd = FaultyPd<P>;
    type Mr = P::Mr;
    type Cq = FaultyCq<P>;
    type Qp = FaultyQp<P>;
    /// Passed through: receives are posted to the inner queue as they are.
    type Srq = P::Srq;
    type Cm = FaultyCm<P>;
    type ConnRequest = P::ConnRequest;
    type Addr = P::Addr;
}

/// A device of `P` whose objects inject the faults of one [`FaultConfig`].
pub struct FaultyDevice<P: Provider> {
    inner: P::Device,
    shared: Arc<Shared>,
}

impl<P: Provider> Clone for FaultyDevice<P>
where
    P::Device: Clone,
{
    fn clone(&self) -> Self {
        FaultyDevice {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<P: Provider> std::fmt::Debug for FaultyDevice<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyDevice")
            .field("provider", &P::NAME)
            .field("cfg", &self.shared.cfg)
            .finish()
    }
}

impl<P: Provider> FaultyDevice<P> {
    /// Wraps `inner`, injecting what `cfg` says.
    pub fn new(inner: P::Device, cfg: FaultConfig) -> Self {
        FaultyDevice {
            inner,
            shared: Arc::new(Shared {
                cfg,
                rng: Mutex::new(SimRng::new(cfg.seed)),
                doomed: Mutex::new(Vec::new()),
                counters: Counters::default(),
                sends_gated: AtomicBool::new(false),
            }),
        }
    }

    /// The wrapped device.
    pub fn inner(&self) -> &P::Device {
        &self.inner
    }

    /// What was injected so far.
    pub fn counters(&self) -> FaultCounters {
        self.report().counters()
    }

    /// A handle that reads this device's counters after the device has been handed
    /// away (to a `Responder`, say).
    pub fn report(&self) -> FaultReport {
        FaultReport(self.shared.clone())
    }

    /// The switch that holds back this device's send-queue completions (open at
    /// first), usable after the device has been handed away.
    pub fn send_completion_gate(&self) -> SendCompletionGate {
        SendCompletionGate(self.shared.clone())
    }
}

/// Holds back every send-queue completion (Send, RDMA Write and Read, registration,
/// invalidation) of one [`FaultyDevice`]'s completion queues while closed; receives'
/// completions pass. Opening it releases what it held, in the order the inner queue
/// gave it, ahead of anything newer. Deterministic: a test decides when.
#[derive(Debug, Clone)]
pub struct SendCompletionGate(Arc<Shared>);

impl SendCompletionGate {
    /// Holds send-queue completions back from now on.
    pub fn close(&self) {
        self.0.sends_gated.store(true, Ordering::Release);
    }

    /// Lets them through again, those held first.
    pub fn open(&self) {
        self.0.sends_gated.store(false, Ordering::Release);
    }
}

/// Reads the counters of one [`FaultyDevice`] (from [`FaultyDevice::report`]).
#[derive(Debug, Clone)]
pub struct FaultReport(Arc<Shared>);

impl FaultReport {
    /// What was injected so far.
    pub fn counters(&self) -> FaultCounters {
        let c = &self.0.counters;
        FaultCounters {
            posts_refused: c.posts_refused.load(Ordering::Relaxed),
            disconnects: c.disconnects.load(Ordering::Relaxed),
            aborts: c.aborts.load(Ordering::Relaxed),
            delayed: c.delayed.load(Ordering::Relaxed),
            stalls: c.stalls.load(Ordering::Relaxed),
        }
    }
}

impl<P: Provider> Device for FaultyDevice<P> {
    type P = Faulty<P>;

    fn caps(&self) -> DeviceCaps {
        DeviceCaps {
            // A completion held back outlives the poll that placed its message, so
            // memory may be written before the consumer hears of it.
            places_in_poll: false,
            ..self.inner.caps()
        }
    }

    fn alloc_pd(&self) -> Result<FaultyPd<P>, FabricError> {
        Ok(FaultyPd {
            inner: self.inner.alloc_pd()?,
        })
    }

    fn create_cq(&self, depth: u32) -> Result<FaultyCq<P>, FabricError> {
        Ok(FaultyCq {
            inner: self.inner.create_cq(depth)?,
            shared: self.shared.clone(),
            held: VecDeque::new(),
            gated: VecDeque::new(),
            last_release: HashMap::new(),
            polls: 0,
            stalled_until: 0,
        })
    }

    fn create_cm(&self) -> Result<FaultyCm<P>, FabricError> {
        Ok(FaultyCm {
            inner: self.inner.create_cm()?,
            shared: self.shared.clone(),
            live: Vec::new(),
        })
    }

    fn clock(&self) -> super::Clock {
        self.inner.clock()
    }
}

/// A protection domain of `P` (nothing injected).
#[derive(Debug)]
pub struct FaultyPd<P: Provider> {
    inner: P::Pd,
}

impl<P: Provider> ProtectionDomain for FaultyPd<P> {
    type P = Faulty<P>;

    fn reg_mr(
        &self,
        arena: &Arc<Arena>,
        offset: usize,
        len: usize,
        access: Access,
    ) -> Result<P::Mr, FabricError> {
        self.inner.reg_mr(arena, offset, len, access)
    }

    fn alloc_fast_mr(&self, max_len: usize) -> Result<P::Mr, FabricError> {
        self.inner.alloc_fast_mr(max_len)
    }

    fn create_srq(&self, recv_cq: &FaultyCq<P>, cfg: SrqConfig) -> Result<P::Srq, FabricError> {
        self.inner.create_srq(&recv_cq.inner, cfg)
    }
}

/// A completion queue of `P` that delays, reorders (across queue pairs) and stalls.
pub struct FaultyCq<P: Provider> {
    inner: P::Cq,
    shared: Arc<Shared>,
    /// Completions taken from the inner queue, with the poll they are released at.
    held: VecDeque<(u64, Completion)>,
    /// Send-queue completions held back by the closed [`SendCompletionGate`].
    gated: VecDeque<Completion>,
    /// Per queue pair, the latest release poll given, so its order is kept.
    last_release: HashMap<u32, u64>,
    polls: u64,
    stalled_until: u64,
}

impl<P: Provider> std::fmt::Debug for FaultyCq<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyCq")
            .field("held", &self.held.len())
            .field("polls", &self.polls)
            .finish()
    }
}

impl<P: Provider> CompletionQueue for FaultyCq<P> {
    fn poll(&mut self, out: &mut [Completion]) -> usize {
        self.polls += 1;
        let cfg = &self.shared.cfg;
        if self.polls < self.stalled_until {
            return 0;
        }
        if self.shared.chance(cfg.stall_ppm) {
            self.stalled_until = self.polls + self.shared.upto(cfg.max_stall_polls);
            self.shared.counters.stalls.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        let gated = self.shared.sends_gated.load(Ordering::Acquire);
        let mut batch = [Completion::EMPTY; 32];
        let n = self.inner.poll(&mut batch);
        let mut given = 0;
        if !gated {
            while given < out.len() {
                let Some(wc) = self.gated.pop_front() else {
                    break;
                };
                out[given] = wc;
                given += 1;
            }
        }
        for wc in &batch[..n] {
            if (gated || !self.gated.is_empty()) && wc.opcode != WcOpcode::Recv {
                // Behind those already held, so a queue pair's send order stays.
                self.gated.push_back(*wc);
                continue;
            }
            let mut at = self.polls;
            if self.shared.chance(cfg.delay_ppm) {
                at += self.shared.upto(cfg.max_completion_delay);
                self.shared.counters.delayed.fetch_add(1, Ordering::Relaxed);
            }
            let last = self.last_release.entry(wc.qp_num).or_insert(0);
            at = at.max(*last);
            *last = at;
            // Keep `held` sorted by release poll, stable for equal ones.
            let pos = self.held.partition_point(|(t, _)| *t <= at);
            self.held.insert(pos, (at, *wc));
        }
        while given < out.len() {
            match self.held.front() {
                Some((t, _)) if *t <= self.polls => {
                    if let Some((_, wc)) = self.held.pop_front() {
                        out[given] = wc;
                        given += 1;
                    }
                }
                _ => break,
            }
        }
        if self.held.is_empty() {
            self.last_release.clear();
        }
        given
    }

    fn depth(&self) -> u32 {
        self.inner.depth()
    }
}

/// A queue pair of `P` whose posts may be refused or end in a peer abort.
pub struct FaultyQp<P: Provider> {
    inner: P::Qp,
    shared: Arc<Shared>,
    aborted: Option<PeerAbort>,
    /// The connection was chosen to be dropped (once is enough).
    dropped: bool,
}

impl<P: Provider> std::fmt::Debug for FaultyQp<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyQp")
            .field("inner", &self.inner.conn_id())
            .field("aborted", &self.aborted)
            .finish()
    }
}

impl<P: Provider> FaultyQp<P> {
    /// The wrapped queue pair.
    pub fn inner(&self) -> &P::Qp {
        &self.inner
    }
}

impl<P: Provider> QueuePair for FaultyQp<P> {
    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        let cfg = &self.shared.cfg;
        if !wrs.is_empty() && self.shared.chance(cfg.post_failure_ppm) {
            self.shared
                .counters
                .posts_refused
                .fetch_add(1, Ordering::Relaxed);
            return Err(PostError {
                posted: 0,
                kind: PostErrorKind::Malformed("refused by fault injection"),
            });
        }
        if self.aborted.is_none() && !self.dropped {
            if self.shared.chance(cfg.abort_ppm) {
                self.aborted = Some(PeerAbort::of_kind(AbortKind::Operation));
                self.shared.counters.aborts.fetch_add(1, Ordering::Relaxed);
                self.shared.doom(self.inner.conn_id());
            } else if self.shared.chance(cfg.disconnect_ppm) {
                self.dropped = true;
                self.shared
                    .counters
                    .disconnects
                    .fetch_add(1, Ordering::Relaxed);
                self.shared.doom(self.inner.conn_id());
            }
        }
        self.inner.post_send(wrs)
    }

    fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        self.inner.post_recv(wrs)
    }

    fn qp_num(&self) -> u32 {
        self.inner.qp_num()
    }

    fn conn_id(&self) -> ConnId {
        self.inner.conn_id()
    }

    fn state(&self) -> QpState {
        self.inner.state()
    }

    fn caps(&self) -> QpCaps {
        self.inner.caps()
    }

    fn peer_addr(&self) -> PeerAddr {
        self.inner.peer_addr()
    }

    fn peer_abort(&self) -> Option<PeerAbort> {
        self.inner.peer_abort().or(self.aborted)
    }
}

/// A connection manager of `P` that drops connections.
pub struct FaultyCm<P: Provider> {
    inner: P::Cm,
    shared: Arc<Shared>,
    /// Connections of this manager that are up.
    live: Vec<ConnId>,
}

impl<P: Provider> std::fmt::Debug for FaultyCm<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultyCm")
            .field("live", &self.live)
            .finish()
    }
}

/// The inner provider's view of a queue pair's set-up.
fn inner_init<'a, P: Provider>(init: &QpInit<'a, Faulty<P>>) -> QpInit<'a, P> {
    QpInit {
        pd: &init.pd.inner,
        send_cq: &init.send_cq.inner,
        recv_cq: &init.recv_cq.inner,
        srq: init.srq,
        config: init.config,
    }
}

impl<P: Provider> FaultyCm<P> {
    fn wrap(&self, inner: P::Qp) -> FaultyQp<P> {
        FaultyQp {
            inner,
            shared: self.shared.clone(),
            aborted: None,
            dropped: false,
        }
    }

    /// Disconnects what the faults decided: connections whose queue pair chose an
    /// abort or a drop.
    fn inject(&mut self) {
        let doomed: Vec<ConnId> = {
            let mut d = self.shared.doomed.lock().unwrap_or_else(|e| e.into_inner());
            let mine: Vec<ConnId> = d
                .iter()
                .copied()
                .filter(|c| self.live.contains(c))
                .collect();
            d.retain(|c| !mine.contains(c));
            mine
        };
        for conn in doomed {
            let _ = self.inner.disconnect(conn);
        }
    }
}

impl<P: Provider> ConnectionManager for FaultyCm<P> {
    type P = Faulty<P>;

    fn listen(&mut self, addr: &P::Addr) -> Result<(), FabricError> {
        self.inner.listen(addr)
    }

    fn connect(
        &mut self,
        addr: &P::Addr,
        init: QpInit<'_, Faulty<P>>,
        private_data: &[u8],
    ) -> Result<FaultyQp<P>, FabricError> {
        let qp = self.inner.connect(addr, inner_init(&init), private_data)?;
        Ok(self.wrap(qp))
    }

    fn accept(
        &mut self,
        request: P::ConnRequest,
        init: QpInit<'_, Faulty<P>>,
        private_data: &[u8],
    ) -> Result<FaultyQp<P>, FabricError> {
        let qp = self
            .inner
            .accept(request, inner_init(&init), private_data)?;
        Ok(self.wrap(qp))
    }

    fn reject(&mut self, request: P::ConnRequest, private_data: &[u8]) -> Result<(), FabricError> {
        self.inner.reject(request, private_data)
    }

    fn disconnect(&mut self, conn: ConnId) -> Result<(), FabricError> {
        self.inner.disconnect(conn)
    }

    fn poll_event(&mut self) -> Result<Option<CmEvent<P::ConnRequest>>, FabricError> {
        self.inject();
        let ev = self.inner.poll_event()?;
        match &ev {
            Some(CmEvent::Established { conn, .. }) => self.live.push(*conn),
            Some(CmEvent::Disconnected { conn }) => self.live.retain(|c| c != conn),
            _ => {}
        }
        Ok(ev)
    }
}
