//! Poll groups: a server's connections spread over a few pinned cores, SPDK-style.
//!
//! A [`PollGroup`] is what one core serves. It owns **one completion queue**, shared by
//! the queue pairs of all its connections, and reaps it in batches of
//! [`CQ_BATCH`]: each completion goes to its connection by queue-pair number, and every
//! connection that got one then posts what it staged (one doorbell per queue). A poll
//! costs the same few instructions for one connection or a thousand until completions
//! arrive, and a batch can serve many connections.
//!
//! The groups of one server share its listener ([`PollGroup::bind`] makes them all):
//!
//! - whichever group polls the connection manager (every [`CM_POLL_INTERVAL`] polls,
//!   or every poll while it has a handshake in progress or no connection) routes what
//!   it reads: a connect request to the **least loaded** group (fewest connections,
//!   counting requests already routed to it), any other event to the group owning the
//!   connection it names. Routes are kept beside the listener, under its lock; nothing
//!   on the call path takes it.
//! - the chosen group accepts the request on its own thread, with the queue pair on its
//!   queue, and keeps the connection for life; closing removes it from the group and
//!   its resources (queue pair, pools, registrations) go with it.
//!
//! Each group counts its work in a [`GroupCounters`] any thread may read.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rpcrdma_poller::{PollCtx, Task};

use super::group_pools::GroupPools;
use super::responder::{Listener, ResponderConn, ResponderCounters, ResponderLimits};
use super::shared_recv::{SharedRecv, SHARED_RECV_TAG};
use super::{ConnError, CM_POLL_INTERVAL, CQ_BATCH, DEFAULT_RELEASE_IDLE};
use crate::core::config::{ConnConfig, Role};
use crate::core::{ConnState, NoRequester, RequesterRole};
use crate::fabric::{
    CmEvent, CmPrivateData, Completion, CompletionQueue, ConnId, ConnectionManager, Device,
    Provider, QueuePair, WcOpcode,
};
use crate::service::Service;

/// What one group did, readable from any thread. Written by the group's thread only
/// (plain stores: no read-modify-write on its path).
#[derive(Debug, Default)]
pub struct GroupCounters {
    connections: AtomicU64,
    accepted: AtomicU64,
    closed: AtomicU64,
    refused: AtomicU64,
    over_limit: AtomicU64,
    completions: AtomicU64,
    calls: AtomicU64,
    held: AtomicU64,
    overruns: AtomicU64,
    srq_depth: AtomicU64,
    srq_low: AtomicU64,
    receive_share: AtomicU64,
    srq_connections: AtomicU64,
    srq_promised: AtomicU64,
    idle_releases: AtomicU64,
    srq_unusable: AtomicBool,
}

/// A copy of one group's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupSample {
    /// Connections the group serves now.
    pub connections: u64,
    /// Connections it accepted.
    pub accepted: u64,
    /// Its connections that closed (and were removed, resources freed).
    pub closed: u64,
    /// Connect requests routed to it that it refused (factory said no, setup failed).
    pub refused: u64,
    /// Connect requests it refused because the server's connection cap was reached.
    pub over_limit: u64,
    /// Completions reaped from its queue.
    pub completions: u64,
    /// Calls its connections received (closed ones included), counted when the
    /// limits are checked (ten times a second at most).
    pub calls: u64,
    /// Calls its connections held because every reply context was in use (served
    /// once one freed: `ResponderStats::held`), closed connections included; counted
    /// with `calls`.
    pub held: u64,
    /// Calls its connections dropped beyond the credits granted (protocol violations:
    /// `ResponderStats::overruns`), closed connections included; counted with `calls`.
    pub overruns: u64,
    /// The depth of the group's shared receive queue (0: none).
    pub srq_depth: u64,
    /// The fewest receives the shared queue held right after a Send took one, before
    /// the group refilled it: a Send never found it empty while this stayed above 0
    /// (starts at the depth).
    pub srq_low: u64,
    /// What each connection's replies grant at most now: its share of the shared queue.
    pub receive_share: u64,
    /// Connections on the shared queue; the others (arrived when it had no share left
    /// to give) post receives of their own.
    pub srq_connections: u64,
    /// Receives the shared queue has promised its connections (their largest grants
    /// not yet provably superseded, request-group limits and DONE receives): never
    /// above its depth (`core/srq_ledger.rs`).
    pub srq_promised: u64,
    /// Times a connection went idle and gave its free buffers' memory back (counted
    /// with the limits, ten times a second at most).
    pub idle_releases: u64,
    /// Shared receives were asked for (`GroupOptions::shared_receives`) but the device
    /// checks a shared queue's buffers against each queue pair's protection domain
    /// (`DeviceCaps::srq_checks_qp_domain`: kernel verbs), and connections have domains
    /// of their own: the group has no shared queue (`srq_depth` 0) and its connections
    /// post their own receives.
    pub srq_unusable: bool,
}

impl GroupCounters {
    /// The counters now.
    pub fn sample(&self) -> GroupSample {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        GroupSample {
            connections: l(&self.connections),
            accepted: l(&self.accepted),
            closed: l(&self.closed),
            refused: l(&self.refused),
            over_limit: l(&self.over_limit),
            completions: l(&self.completions),
            calls: l(&self.calls),
            held: l(&self.held),
            overruns: l(&self.overruns),
            srq_depth: l(&self.srq_depth),
            srq_low: l(&self.srq_low),
            receive_share: l(&self.receive_share),
            srq_connections: l(&self.srq_connections),
            srq_promised: l(&self.srq_promised),
            idle_releases: l(&self.idle_releases),
            srq_unusable: self.srq_unusable.load(Ordering::Relaxed),
        }
    }
}

/// Adds `n` to a counter only its owner writes.
#[inline]
fn bump(a: &AtomicU64, n: u64) {
    a.store(a.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// How [`PollGroup::bind_with`] sets groups up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupOptions {
    /// Serve the group's connections' receives from one shared receive queue per
    /// group, with buffers from one pool of the group's, where the device has shared
    /// receive queues (`DeviceCaps::max_srq_wr`) that queue pairs of different
    /// protection domains can share (`DeviceCaps::srq_checks_qp_domain` false: not on
    /// kernel verbs, where [`GroupSample::srq_unusable`] says so); else each connection
    /// posts its own. On by default.
    pub shared_receives: bool,
    /// The shared queue's depth; 0 sizes it for the group's share of the connection
    /// cap (each connection one credit plus its RDMA_DONE receives), and at least four
    /// connections' full credits, within the device's limit.
    pub srq_depth: u32,
    /// How long a connection is idle (nothing received, no call in progress) before
    /// it gives its free buffers' memory back and, on the shared queue, the receives a
    /// larger grant held once a smaller one was sent
    /// (`ResponderConn::release_free_memory`); `None` never. Default
    /// [`DEFAULT_RELEASE_IDLE`].
    pub release_idle: Option<Duration>,
    /// Whether the group's connections draw receive, reply-header and large buffers
    /// from pools of the group's, registered in each connection's own protection
    /// domain, instead of pools of their own (DESIGN.md, "Pools per poll group").
    /// `None` (the default) does where the device's registrations pin their pages
    /// (`DeviceCaps::release_registered` false: kernel verbs), where pools of a
    /// connection's own would stay resident for its life; elsewhere a connection's
    /// pools are its own and an idle one gives their pages back. Connections whose
    /// service also calls its requester (RFC 8167), and connections on a device whose
    /// peers map their domain's registrations whole
    /// (`DeviceCaps::peer_maps_registrations`: shm), always have pools of their own.
    pub group_pools: Option<bool>,
    /// Busy connections the group's pools hold reply-header buffers for at once (with
    /// [`group_pools`](Self::group_pools)), and, with a shared receive queue, the
    /// connections it has no room for, which post receives of their own (without one,
    /// the receive pool holds every connection's: the group's share of
    /// `ResponderLimits::max_connections`). The large pool holds one connection's large
    /// buffers (`ConnConfig::large_bufs`). Default [`DEFAULT_GROUP_POOL_CONNS`].
    pub group_pool_conns: u32,
}

/// Default of [`GroupOptions::group_pool_conns`].
pub const DEFAULT_GROUP_POOL_CONNS: u32 = 8;

impl Default for GroupOptions {
    fn default() -> Self {
        GroupOptions {
            shared_receives: true,
            srq_depth: 0,
            release_idle: Some(DEFAULT_RELEASE_IDLE),
            group_pools: None,
            group_pool_conns: DEFAULT_GROUP_POOL_CONNS,
        }
    }
}

/// A connection-manager event for a group: a request to accept, or an event naming
/// one of its connections (carried without a request type).
enum Inbound<R> {
    Request(R, CmPrivateData),
    Event(CmEvent<()>),
}

/// A group's incoming events. `pending` lets the owner skip the lock while empty.
struct Inbox<R> {
    queue: Mutex<VecDeque<Inbound<R>>>,
    pending: AtomicBool,
}

/// The listener, and which group owns which connection.
struct Listening<P: Provider> {
    listener: Listener<P>,
    routes: HashMap<ConnId, usize>,
}

/// What the groups of one server share.
struct Shared<P: Provider, F> {
    dev: P::Device,
    cfg: ConnConfig,
    factory: F,
    limits: ResponderLimits,
    release_idle: Option<Duration>,
    listening: Mutex<Listening<P>>,
    inboxes: Box<[Inbox<P::ConnRequest>]>,
    /// Connections of each group, counting requests routed to it and not yet accepted.
    loads: Box<[AtomicUsize]>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere leaves the data consistent (every update is one insert or
    // remove): keep serving.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<P: Provider, F> Shared<P, F> {
    fn post(&self, group: usize, msg: Inbound<P::ConnRequest>) {
        if let Some(inbox) = self.inboxes.get(group) {
            lock(&inbox.queue).push_back(msg);
            inbox.pending.store(true, Ordering::Release);
        }
    }

    /// The group with the fewest connections (the first of equals).
    fn least_loaded(&self) -> usize {
        let mut best = (usize::MAX, 0);
        for (i, l) in self.loads.iter().enumerate() {
            let n = l.load(Ordering::Relaxed);
            if n < best.0 {
                best = (n, i);
            }
        }
        best.1
    }

    fn total_load(&self) -> usize {
        self.loads.iter().map(|l| l.load(Ordering::Relaxed)).sum()
    }
}

/// One core's share of a server: one completion queue for all of its connections.
/// `B` is the connections' requester slot: [`NoRequester`] (one role), or
/// [`RequesterHalf`](crate::RequesterHalf) for connections whose service calls its
/// requester (RFC 8167, [`Service::backchannel`]), as `Responder::bind_roles`.
pub struct PollGroup<P: Provider, S, F, B: RequesterRole = NoRequester> {
    index: usize,
    shared: Arc<Shared<P, F>>,
    cq: P::Cq,
    conns: Vec<ResponderConn<P, S, B>>,
    /// The shared receive queue of the group's connections, if it has one. After
    /// `conns`, so their queue pairs go before its buffers' registration does.
    shared_recv: Option<SharedRecv<P>>,
    /// The pools the group's connections draw from, if they share them. After
    /// `conns`: their registrations of its arenas go first.
    pools: Option<GroupPools<P>>,
    /// Completions counted at the last look, and since when that count has not moved
    /// (an idle group gives its shared pool's free memory back once per idle spell).
    idle: (u64, Option<Instant>),
    /// The fewest receives the shared queue held after a Send took one.
    srq_low: u32,
    /// Connections on the shared queue (the others post their own receives).
    srq_conns: u32,
    /// Queue-pair number to index in `conns`.
    by_qp: HashMap<u32, usize>,
    wcs: [Completion; CQ_BATCH],
    /// Connections that got completions in the current batch (indices into `conns`).
    touched: [usize; CQ_BATCH],
    /// Some connection's call waits for a header buffer (`retry_header_waiters`).
    header_waiters: bool,
    /// Events taken from the inbox, handled without its lock held.
    scratch: VecDeque<Inbound<P::ConnRequest>>,
    counters: Arc<GroupCounters>,
    /// Handshakes in progress (the CM is polled every round while there are any).
    connecting: usize,
    polls: u32,
    completions: u64,
    /// Calls of connections already removed.
    retired_calls: u64,
    /// Held calls and overruns of the connections removed, likewise.
    retired_held: u64,
    retired_overruns: u64,
    limit_counters: ResponderCounters,
    last_check: Option<Instant>,
}

impl<P, S, F, B> PollGroup<P, S, F, B>
where
    P: Provider,
    S: Service,
    F: Fn() -> Option<S>,
    B: RequesterRole,
{
    /// Listens on `addr` with `dev` and makes `groups` poll groups serving what
    /// arrives there (at least one), each connection with `cfg` and a service from
    /// `factory`, within `limits` (the connection cap counts every group's). Give each
    /// group its own thread (a poller task: [`PollGroupTask`]), one per core.
    pub fn bind(
        dev: P::Device,
        addr: &P::Addr,
        cfg: ConnConfig,
        factory: F,
        groups: usize,
        limits: ResponderLimits,
    ) -> Result<Vec<Self>, ConnError> {
        Self::bind_with(
            dev,
            addr,
            cfg,
            factory,
            groups,
            limits,
            GroupOptions::default(),
        )
    }

    /// [`bind`](Self::bind) with `opts` (shared receive queues or not, and their depth).
    pub fn bind_with(
        dev: P::Device,
        addr: &P::Addr,
        cfg: ConnConfig,
        factory: F,
        groups: usize,
        limits: ResponderLimits,
        opts: GroupOptions,
    ) -> Result<Vec<Self>, ConnError> {
        cfg.validate().map_err(ConnError::Config)?;
        let groups = groups.max(1);
        let listener = Listener::bind(&dev, addr)?;
        // Room for every connection a group may get (its share of the cap, and one
        // more for a request routed while another is closing), within the device's
        // limit: beyond it, accepts fail (CqTooSmall) and are counted as refused.
        let one_role = B::responder_sizes(&cfg) == cfg.sizes(Role::Responder);
        // Never where a peer maps its domain's registrations whole (shm): the group's
        // arenas would be every peer's to read.
        let group_pools = one_role
            && !dev.caps().peer_maps_registrations
            && opts.group_pools.unwrap_or(!dev.caps().release_registered);
        // Connections on the group's pools get a send queue for what their credits need
        // (`group_sq_depth`), unless the configuration names one.
        let mut cfg = cfg;
        if group_pools && cfg.sq_depth == 0 {
            cfg.sq_depth = super::group_pools::group_sq_depth(&cfg);
        }
        let per_conn = u64::from(B::responder_sizes(&cfg).cq_depth);
        let share = (limits.max_connections.div_ceil(groups) + 1) as u64;
        let depth = (per_conn * share).min(u64::from(dev.caps().max_cq_depth)) as u32;
        // Receives beyond the credits a connection may consume (RDMA_DONEs, and the
        // backward direction's replies on a two-role connection).
        let sizes = B::responder_sizes(&cfg);
        let done_extra = sizes.rq_depth.saturating_sub(cfg.credits);
        // Each connection has a protection domain of its own (its peer's keys reach only
        // its memory), so where the device checks a shared queue's buffers against the
        // arriving queue pair's domain (kernel verbs) no queue can serve them: the
        // group says so in its counters (`srq_unusable`) and each connection posts its
        // own receives, from the group's receive pool where it has one.
        let srq_unusable = opts.shared_receives && dev.caps().srq_checks_qp_domain;
        let srq_depth = match (opts.shared_receives && !srq_unusable, opts.srq_depth) {
            (false, _) => None,
            (true, 0) => SharedRecv::<P>::depth_for(&dev, &cfg, done_extra, share as u32),
            (true, d) => Some(d.min(dev.caps().max_srq_wr)).filter(|&d| d > 0),
        };
        let depth = match srq_depth {
            // The shared queue's receives complete here too.
            Some(d) => depth.saturating_add(d).min(dev.caps().max_cq_depth),
            None => depth,
        };
        let mut cqs = Vec::with_capacity(groups);
        for _ in 0..groups {
            let cq = dev.create_cq(depth).map_err(ConnError::Fabric)?;
            let srq = match srq_depth {
                Some(d) => SharedRecv::create(&dev, &cq, &cfg, done_extra, d, share as u32)?,
                None => None,
            };
            let pools = match group_pools {
                // Without a shared queue every connection posts its own receives; with
                // one, only those it has no room for (a few: its depth is sized for
                // the group's share).
                true => Some(GroupPools::create(
                    &dev,
                    &cfg,
                    &sizes,
                    opts.group_pool_conns,
                    match srq {
                        Some(_) => opts.group_pool_conns,
                        None => share as u32,
                    },
                )?),
                false => None,
            };
            cqs.push((cq, srq, pools));
        }
        let shared = Arc::new(Shared {
            dev,
            cfg,
            factory,
            limits,
            release_idle: opts.release_idle,
            listening: Mutex::new(Listening {
                listener,
                routes: HashMap::new(),
            }),
            inboxes: (0..groups)
                .map(|_| Inbox {
                    queue: Mutex::new(VecDeque::new()),
                    pending: AtomicBool::new(false),
                })
                .collect(),
            loads: (0..groups).map(|_| AtomicUsize::new(0)).collect(),
        });
        Ok(cqs
            .into_iter()
            .enumerate()
            .map(|(index, (cq, shared_recv, pools))| PollGroup {
                index,
                shared: shared.clone(),
                cq,
                srq_low: shared_recv.as_ref().map_or(0, |s| s.depth()),
                srq_conns: 0,
                counters: Arc::new(GroupCounters {
                    srq_unusable: AtomicBool::new(srq_unusable),
                    srq_depth: AtomicU64::new(
                        shared_recv.as_ref().map_or(0, |s| u64::from(s.depth())),
                    ),
                    srq_low: AtomicU64::new(
                        shared_recv.as_ref().map_or(0, |s| u64::from(s.depth())),
                    ),
                    ..GroupCounters::default()
                }),
                shared_recv,
                pools,
                idle: (0, None),
                conns: Vec::new(),
                by_qp: HashMap::new(),
                wcs: [Completion::EMPTY; CQ_BATCH],
                touched: [0; CQ_BATCH],
                header_waiters: false,
                scratch: VecDeque::new(),
                connecting: 0,
                polls: 0,
                completions: 0,
                retired_calls: 0,
                retired_held: 0,
                retired_overruns: 0,
                limit_counters: ResponderCounters::default(),
                last_check: None,
            })
            .collect())
    }

    /// One round: routed events, the connection manager when due, one batch of
    /// completions from the group's queue. Returns the work done.
    pub fn poll(&mut self, now: Instant) -> usize {
        self.polls = self.polls.wrapping_add(1);
        let mut work = 0;
        let cm_due = self.polls & (CM_POLL_INTERVAL - 1) == 0
            || self.connecting > 0
            || self.conns.is_empty();
        if cm_due {
            work += self.poll_cm();
        }
        if self.shared.inboxes[self.index]
            .pending
            .load(Ordering::Acquire)
        {
            work += self.drain_inbox(now);
        }
        work += self.reap(now);
        if self.header_waiters {
            work += self.retry_header_waiters(now);
        }
        if cm_due {
            self.check(now);
        }
        work
    }

    /// Runs the connections whose calls wait for a header buffer of the group's pool
    /// (all in use when they came): a buffer another connection gave back is theirs
    /// now, though no completion of their own says so. Only while some wait; counts
    /// the connections that stopped waiting.
    #[cold]
    fn retry_header_waiters(&mut self, now: Instant) -> usize {
        let mut still = false;
        let mut served = 0;
        for c in self.conns.iter_mut().filter(|c| c.waits_for_header()) {
            c.after_completions(now);
            let waits = c.waits_for_header();
            still |= waits;
            served += usize::from(!waits);
        }
        self.header_waiters = still;
        served
    }

    /// Reaps one batch and lets each connection that got completions post.
    fn reap(&mut self, now: Instant) -> usize {
        let n = self.cq.poll(&mut self.wcs).min(CQ_BATCH);
        if n == 0 {
            return 0;
        }
        let mut touched = 0;
        for wc in &self.wcs[..n] {
            // A shared receive: its buffer is the group's; the connection whose queue
            // pair took it gets the message (a removed one's returns to the pool).
            let shared =
                wc.wr_id & SHARED_RECV_TAG == SHARED_RECV_TAG && wc.opcode == WcOpcode::Recv;
            let buf = match (&mut self.shared_recv, shared) {
                (Some(s), true) => {
                    let b = s.complete(wc);
                    self.srq_low = self.srq_low.min(s.posted());
                    b
                }
                _ => None,
            };
            // A completion of a queue pair already removed (flushed after its
            // connection closed) has nobody to go to.
            let Some(&i) = self.by_qp.get(&wc.qp_num) else {
                continue;
            };
            match buf {
                Some(b) => self.conns[i].on_shared_recv(b, wc, now),
                None if shared => {}
                None => self.conns[i].on_completion(wc, now),
            }
            if !self.touched[..touched].contains(&i) {
                self.touched[touched] = i;
                touched += 1;
            }
        }
        for &i in &self.touched[..touched] {
            self.conns[i].after_completions(now);
            self.header_waiters |= self.conns[i].waits_for_header();
        }
        if let Some(s) = &mut self.shared_recv {
            s.refill();
            self.counters
                .srq_low
                .store(u64::from(self.srq_low), Ordering::Relaxed);
            self.counters
                .srq_promised
                .store(u64::from(s.promised()), Ordering::Relaxed);
        }
        self.completions += n as u64;
        self.counters
            .completions
            .store(self.completions, Ordering::Relaxed);
        n
    }

    /// Reads the connection manager if no other group is reading it, and routes what
    /// it reports.
    fn poll_cm(&mut self) -> usize {
        let shared = &*self.shared;
        let Ok(mut l) = shared.listening.try_lock() else {
            return 0;
        };
        let mut work = 0;
        while let Ok(Some(ev)) = l.listener.poll_event() {
            work += 1;
            match ev {
                CmEvent::ConnectRequest {
                    request,
                    private_data,
                } => {
                    if shared.total_load() >= shared.limits.max_connections {
                        bump(&self.counters.over_limit, 1);
                        let _ = l.listener.cm.reject(request, &[]);
                        continue;
                    }
                    let g = shared.least_loaded();
                    shared.loads[g].fetch_add(1, Ordering::AcqRel);
                    shared.post(g, Inbound::Request(request, private_data));
                }
                other => {
                    let routed = other.conn().and_then(|c| l.routes.get(&c).copied());
                    if let Some(g) = routed {
                        shared.post(g, Inbound::Event(without_request(other)));
                    }
                }
            }
        }
        work
    }

    /// Accepts the requests routed here and hands events to their connections.
    fn drain_inbox(&mut self, now: Instant) -> usize {
        {
            let inbox = &self.shared.inboxes[self.index];
            let mut q = lock(&inbox.queue);
            inbox.pending.store(false, Ordering::Release);
            std::mem::swap(&mut *q, &mut self.scratch);
        }
        let mut work = 0;
        while let Some(msg) = self.scratch.pop_front() {
            work += 1;
            match msg {
                Inbound::Request(request, pd) => self.accept(request, &pd),
                Inbound::Event(ev) => {
                    let found = ev
                        .conn()
                        .and_then(|c| self.conns.iter().position(|x| x.conn_id() == c));
                    if let Some(i) = found {
                        self.conns[i].on_cm_event(&ev, now);
                        self.conns[i].after_completions(now);
                    }
                }
            }
        }
        self.recount();
        work
    }

    fn accept(&mut self, request: P::ConnRequest, pd: &CmPrivateData) {
        let shared = &*self.shared;
        let Some(service) = (shared.factory)() else {
            bump(&self.counters.refused, 1);
            shared.loads[self.index].fetch_sub(1, Ordering::AcqRel);
            let _ = lock(&shared.listening).listener.cm.reject(request, &[]);
            return;
        };
        // With a shared receive queue: the share each of its connections gets once
        // this one is in. None left: this connection posts receives of its own (the
        // group's queue has room for them, as without a shared queue).
        let mut l = lock(&shared.listening);
        let srq = self
            .shared_recv
            .as_ref()
            .and_then(|s| Some((s.srq(), s.terms(self.srq_conns + 1)?)));
        match ResponderConn::accept_on(
            &mut l.listener,
            &shared.dev,
            request,
            pd,
            &shared.cfg,
            service,
            Some(&self.cq),
            srq,
            self.pools.as_ref(),
        ) {
            Ok(c) => {
                l.routes.insert(c.conn_id(), self.index);
                drop(l);
                self.by_qp.insert(c.qp().qp_num(), self.conns.len());
                self.srq_conns += u32::from(c.on_shared_receives());
                self.conns.push(c);
                self.reshare();
                bump(&self.counters.accepted, 1);
                self.counters
                    .connections
                    .store(self.conns.len() as u64, Ordering::Relaxed);
            }
            Err(_) => {
                drop(l);
                bump(&self.counters.refused, 1);
                shared.loads[self.index].fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Handshakes in progress.
    fn recount(&mut self) {
        self.connecting = self
            .conns
            .iter()
            .filter(|c| c.state() == ConnState::Connecting)
            .count();
    }

    /// With the CM polls: limits (ten looks a second at most), disconnects the
    /// connections asked for, removal of closed connections, the call counter.
    fn check(&mut self, now: Instant) {
        let look = self
            .last_check
            .is_none_or(|t| now.saturating_duration_since(t) >= Duration::from_millis(100));
        if look {
            self.last_check = Some(now);
        }
        let (limits, release_idle) = (self.shared.limits, self.shared.release_idle);
        let mut calls = self.retired_calls;
        let (mut held, mut overruns) = (self.retired_held, self.retired_overruns);
        let mut closed_any = false;
        for c in &mut self.conns {
            if look {
                c.check_limits(now, &limits, release_idle, &mut self.limit_counters);
                let st = c.stats();
                calls += st.calls;
                held += st.held;
                overruns += st.overruns;
            }
            // Work staged outside a completion (a close asked for above) posts here.
            c.after_completions(now);
            if c.take_disconnect_request() {
                let _ = lock(&self.shared.listening)
                    .listener
                    .cm
                    .disconnect(c.conn_id());
            }
            closed_any |= c.state() == ConnState::Closed;
        }
        if closed_any {
            self.remove_closed();
        }
        if look {
            self.counters.calls.store(calls, Ordering::Relaxed);
            self.counters.held.store(held, Ordering::Relaxed);
            self.counters.overruns.store(overruns, Ordering::Relaxed);
            self.counters
                .idle_releases
                .store(self.limit_counters.idle_releases, Ordering::Relaxed);
            self.release_idle_receives(now);
        }
        self.recount();
    }

    /// Drops closed connections: their queue pairs leave the group's queue, their pools
    /// and registrations are freed.
    fn remove_closed(&mut self) {
        let mut i = 0;
        while i < self.conns.len() {
            if self.conns[i].state() != ConnState::Closed {
                i += 1;
                continue;
            }
            let c = self.conns.swap_remove(i);
            self.by_qp.remove(&c.qp().qp_num());
            if let Some(moved) = self.conns.get(i) {
                self.by_qp.insert(moved.qp().qp_num(), i);
            }
            lock(&self.shared.listening).routes.remove(&c.conn_id());
            self.srq_conns -= u32::from(c.on_shared_receives());
            let st = c.stats();
            self.retired_calls += st.calls;
            self.retired_held += st.held;
            self.retired_overruns += st.overruns;
            self.shared.loads[self.index].fetch_sub(1, Ordering::AcqRel);
            bump(&self.counters.closed, 1);
            drop(c);
        }
        self.counters
            .connections
            .store(self.conns.len() as u64, Ordering::Relaxed);
        self.reshare();
    }

    /// Once per idle spell of `release_idle` (no completion at all), gives the memory
    /// of the shared pool's free buffers back (the posted receives keep theirs: a
    /// provider may place into them at any time).
    fn release_idle_receives(&mut self, now: Instant) {
        let (Some(s), Some(after)) = (&mut self.shared_recv, self.shared.release_idle) else {
            return;
        };
        match self.idle {
            (seen, _) if seen != self.completions => self.idle = (self.completions, Some(now)),
            (_, Some(since)) if now.saturating_duration_since(since) >= after => {
                s.release_free();
                self.idle.1 = None;
            }
            _ => {}
        }
    }

    /// Gives every connection its share of the shared receive queue for the number
    /// of connections now (their next replies grant it).
    fn reshare(&mut self) {
        let Some(s) = &self.shared_recv else {
            return;
        };
        let share = s.share(self.srq_conns).unwrap_or(1);
        for c in &mut self.conns {
            c.set_receive_share(share);
        }
        self.counters
            .receive_share
            .store(u64::from(share), Ordering::Relaxed);
        self.counters
            .srq_connections
            .store(u64::from(self.srq_conns), Ordering::Relaxed);
        self.counters
            .srq_promised
            .store(u64::from(s.promised()), Ordering::Relaxed);
    }

    /// The shared receive queue's depth and the receives posted in it now, if the
    /// group has one.
    pub fn shared_receives(&self) -> Option<(u32, u32)> {
        self.shared_recv.as_ref().map(|s| (s.depth(), s.posted()))
    }

    /// The shared receive queue's ledger (`None` without one): the receives promised to
    /// its connections now (their largest grants not yet provably superseded, their
    /// request-group limits and DONE receives; never above the depth), the
    /// request-group limit (XCHAR_REQRXLIM) its connections are advertised, and the
    /// receives the provider holds posted right now (fewer than
    /// [`shared_receives`](Self::shared_receives) says while Sends have landed that the
    /// group has not polled yet).
    pub fn shared_receive_ledger(&self) -> Option<(u32, u32, u32)> {
        self.shared_recv
            .as_ref()
            .map(|s| (s.promised(), s.floor(), s.untaken()))
    }

    /// What each connection's replies grant at most now: its share of the shared
    /// receive queue (`None` without one).
    pub fn receive_share(&self) -> Option<u32> {
        self.shared_recv
            .as_ref()
            .and_then(|s| s.share(self.srq_conns))
    }

    /// Starts disconnecting every connection (at shutdown); keep polling until
    /// [`is_empty`](Self::is_empty) to let them drain.
    pub fn disconnect_all(&mut self) {
        let mut l = lock(&self.shared.listening);
        for c in &self.conns {
            // One already going away refuses: fine.
            let _ = l.listener.cm.disconnect(c.conn_id());
        }
        drop(l);
    }

    /// The group's index (0 up to the number of groups).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The group's counters (clone the `Arc` to read them from another thread).
    pub fn counters(&self) -> &Arc<GroupCounters> {
        &self.counters
    }

    /// The connections this group serves.
    pub fn connections(&self) -> &[ResponderConn<P, S, B>] {
        &self.conns
    }

    /// True when the group serves no connection.
    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    /// Limits enforced on this group's connections so far (handshake and idle
    /// timeouts, idle releases).
    pub fn limit_counters(&self) -> ResponderCounters {
        self.limit_counters
    }

    /// The completion queue the group's connections share.
    pub fn cq(&self) -> &P::Cq {
        &self.cq
    }
}

/// `ev` (not a connect request) without the request type.
fn without_request<R>(ev: CmEvent<R>) -> CmEvent<()> {
    match ev {
        CmEvent::ConnectRequest { private_data, .. } => CmEvent::ConnectRequest {
            request: (),
            private_data,
        },
        CmEvent::Established { conn, private_data } => CmEvent::Established { conn, private_data },
        CmEvent::Rejected { conn, private_data } => CmEvent::Rejected { conn, private_data },
        CmEvent::Unreachable { conn } => CmEvent::Unreachable { conn },
        CmEvent::Disconnected { conn } => CmEvent::Disconnected { conn },
    }
}

/// A poll group as a poller task (any message type: it takes none). By default it
/// never lets its poller park: a group learns of an arriving call only by polling.
pub struct PollGroupTask<P: Provider, S, F, B: RequesterRole = NoRequester> {
    group: PollGroup<P, S, F, B>,
    allow_park: bool,
}

impl<P: Provider, S, F, B: RequesterRole> PollGroupTask<P, S, F, B> {
    /// Wraps `group`.
    pub fn new(group: PollGroup<P, S, F, B>) -> Self {
        PollGroupTask {
            group,
            allow_park: false,
        }
    }

    /// Lets the poller park (for at most its idle policy's maximum), trading reply
    /// latency for a free core; for shared machines and tests.
    pub fn allow_park(mut self, yes: bool) -> Self {
        self.allow_park = yes;
        self
    }
}

impl<P, S, F, B, M> Task<M> for PollGroupTask<P, S, F, B>
where
    P: Provider,
    S: Service,
    F: Fn() -> Option<S>,
    B: RequesterRole,
    PollGroup<P, S, F, B>: Send,
{
    fn poll(&mut self, ctx: &mut PollCtx<'_>) -> usize {
        self.group.poll(ctx.now())
    }

    fn before_park(&mut self) -> bool {
        self.allow_park
    }

    fn on_remove(&mut self) {
        self.group.disconnect_all();
    }
}
