//! The passive side: a listener, the responder connections it accepts, and a server
//! bundling both.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::resources::ConnResources;
use super::{ConnError, CQ_BATCH};
use crate::core::config::{ConnConfig, Role};
use crate::core::fixed::FixedQueue;
use crate::core::{
    CharsUpdateError, ConnEvent, ConnState, Connection, NoRequester, ProbeError, RegBuf,
    RequesterHalf, RequesterRole, RequesterStats, ResponderHalf, ResponderStats,
};
use crate::credits::{CreditTable, GrantPolicy};
use crate::fabric::{
    CmEvent, CmPrivateData, Completion, ConnId, ConnectionManager, Device, Provider, QueuePair,
};
use crate::service::Service;

/// A connection manager listening for requesters.
pub struct Listener<P: Provider> {
    pub(super) cm: P::Cm,
}

impl<P: Provider> Listener<P> {
    /// Listens on `addr`.
    pub fn bind(dev: &P::Device, addr: &P::Addr) -> Result<Self, ConnError> {
        let mut cm = dev.create_cm().map_err(ConnError::Fabric)?;
        cm.listen(addr).map_err(ConnError::Fabric)?;
        Ok(Listener { cm })
    }

    /// The next connection-manager event.
    pub fn poll_event(&mut self) -> Result<Option<CmEvent<P::ConnRequest>>, ConnError> {
        self.cm.poll_event().map_err(ConnError::Fabric)
    }

    /// The connection manager (test hook: feature `testing`).
    #[cfg(feature = "testing")]
    pub fn cm_mut(&mut self) -> &mut P::Cm {
        &mut self.cm
    }
}

#[cfg(feature = "testing")]
impl<P: Provider, S, B: RequesterRole> ResponderConn<P, S, B> {
    /// Sends `bytes` as one raw Send from a large buffer of this connection's pool, as a
    /// broken peer would (the completion counts as stray; the buffer is returned to the
    /// caller to drop once the peer took the message). Test hook: feature `testing`.
    pub fn inject_send(&mut self, bytes: &[u8]) -> Result<RegBuf, crate::fabric::FabricError> {
        use crate::fabric::{QueuePair, SendWr};
        let mut buf = RegBuf::from_pool(&self.res.pools.large)
            .map_err(|_| crate::fabric::FabricError::Unsupported("no large buffer"))?;
        buf.fill(bytes)
            .map_err(|_| crate::fabric::FabricError::Unsupported("message too long"))?;
        let sge = buf
            .sge(0, bytes.len())
            .map_err(|_| crate::fabric::FabricError::Unsupported("not registered"))?;
        self.qp
            .post_send(&[SendWr::send(0, &[sge])])
            .map_err(|_| crate::fabric::FabricError::Unsupported("post refused"))?;
        Ok(buf)
    }
}

/// A responder connection serving calls with `S`. `B` is the requester slot:
/// [`NoRequester`], or [`RequesterHalf`] for a connection whose service also calls its
/// requester (RFC 8167: [`Service::backchannel`]).
pub struct ResponderConn<P: Provider, S, B: RequesterRole = NoRequester> {
    core: Connection<B, ResponderHalf<S>>,
    qp: P::Qp,
    conn: ConnId,
    peer_pd: CmPrivateData,
    /// Fast-registration slots exposing replies (responder-provided Read chunks); kept
    /// until the connection is dropped, which deregisters them and kills their keys.
    #[allow(dead_code)]
    reply_mrs: Vec<P::Mr>,
    wants_disconnect: bool,
    events: FixedQueue<ConnEvent>,
    /// Completion batch, reused by every poll.
    wcs: [Completion; CQ_BATCH],
    res: ConnResources<P>,
    /// When the connection was accepted (the handshake deadline counts from here).
    accepted_at: Instant,
    /// Receive activity last seen by the server's idle check, and when it changed.
    last_activity: (u64, Instant),
    /// The device lets free registered pages go (`DeviceCaps::release_registered`).
    may_release: bool,
    /// Posted receives are written only during our polls (`DeviceCaps::places_in_poll`).
    placed_in_poll: bool,
    /// Free buffers were released since the last activity (once per idle spell).
    released: bool,
    /// The queue pair takes its receives from the group's shared receive queue.
    on_srq: bool,
}

impl<P: Provider, S: Service> ResponderConn<P, S> {
    /// Accepts `request` (whose private data was `peer_private_data`) on `listener`,
    /// with resources from `dev`, serving with `service`. Receives are posted before
    /// the first poll, so the requester's first call finds one.
    pub fn accept(
        listener: &mut Listener<P>,
        dev: &P::Device,
        request: P::ConnRequest,
        peer_private_data: &CmPrivateData,
        cfg: &ConnConfig,
        service: S,
    ) -> Result<Self, ConnError> {
        Self::accept_on(
            listener,
            dev,
            request,
            peer_private_data,
            cfg,
            service,
            None,
            None,
            None,
        )
    }

    /// Sends this end's transport characteristics again in a characteristics update
    /// (ROPT_XCHUPD; `engine/DESIGN.md`, "Characteristics updates"), for example after
    /// its receive buffer structure changed: the requester plans later calls by them.
    /// Staged now, posted by the next poll; only once continuation was negotiated (a
    /// version-1-only peer never sees one).
    pub fn send_chars_update(&mut self) -> Result<(), CharsUpdateError> {
        self.core.send_chars_update()
    }
}

impl<P: Provider, S: Service> ResponderConn<P, S, RequesterHalf> {
    /// The backward direction's counters (calls made through [`Service::backchannel`]).
    pub fn backchannel_stats(&self) -> RequesterStats {
        self.core.requester_stats()
    }

    /// The backward direction's credit table (RFC 8167 §4.3: its own credits, granted
    /// by the requester in its backward replies).
    pub fn backchannel_credits(&self) -> &Arc<CreditTable> {
        self.core.credits()
    }

    /// Probes the requester's backchannel with an RPC NULL on the backward direction's
    /// credits (see [`ConnEvent::ProbeAnswered`]).
    pub fn backchannel_probe(&mut self, now: Instant) -> Result<(), ProbeError> {
        self.core.health_check(now)
    }
}

impl<P: Provider, S: Service, B: RequesterRole> ResponderConn<P, S, B> {
    /// [`accept`](ResponderConn::accept) for either requester slot; with `group_cq`,
    /// the queue pair completes into that queue (a poll group's, shared by its
    /// connections), which the group polls and routes by queue-pair number
    /// ([`on_completion`](Self::on_completion)), instead of a queue of the connection's
    /// own. With `shared` (a poll group's shared receive queue, on `group_cq`, and the
    /// terms of this connection's part of it) the queue pair takes its receives from
    /// that queue, if its ledger admits the connection, and the core grants at most the
    /// share within the ledger's room ([`super::shared_recv`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn accept_on(
        listener: &mut Listener<P>,
        dev: &P::Device,
        request: P::ConnRequest,
        peer_private_data: &CmPrivateData,
        cfg: &ConnConfig,
        service: S,
        group_cq: Option<&P::Cq>,
        shared: Option<(&P::Srq, super::shared_recv::ShareTerms<'_>)>,
        group_pools: Option<&super::group_pools::GroupPools<P>>,
    ) -> Result<Self, ConnError> {
        // Send-based DDP by default where the device calls for it, to a requester that
        // offered continuation (DESIGN.md, "Send-based DDP by default"): the pools and
        // receives follow the resolution.
        let caps = dev.caps();
        let peer_cont =
            crate::wire::private_data::Extensions::find(peer_private_data.as_bytes()).continuation;
        let resolved =
            cfg.resolved_for_responder(caps.rdma_round_trip, caps.release_registered, peer_cont);
        let cfg = resolved.as_ref().unwrap_or(cfg);
        let sizes = B::responder_sizes(cfg);
        let res = match (group_cq, group_pools) {
            (Some(_), Some(g)) => ConnResources::<P>::in_group(dev, cfg, sizes, g)?,
            (Some(_), None) => ConnResources::<P>::without_cq(dev, cfg, Role::Responder, sizes)?,
            (None, _) => ConnResources::<P>::with_sizes(dev, cfg, Role::Responder, sizes)?,
        };
        // Credits never count the receives kept for RDMA_DONE beyond them.
        let policy = Arc::new(GrantPolicy::new(cfg.credits, cfg.credits.max(1)));
        let mut core =
            B::responder_core(cfg, &res.pools, service, policy).map_err(ConnError::Core)?;
        // A group's pools: requests carry this connection's keys for the group's arenas.
        core.set_local_key_map(res.key_map());
        // Slots to expose replies in responder-provided Read chunks; none on a device
        // without fast registration, or whose keys ran out: such replies then get
        // ERR_CHUNK, as from a responder without the extension (the connection is
        // worth more than the extension).
        let fast = res.sizes.mr_slots > 0 && dev.caps().fast_reg;
        let slots = fast.then(|| res.fast_mrs(res.sizes.mr_slots, cfg.large_buf_size as usize));
        let reply_mrs = match slots {
            Some(Ok((mrs, slots))) => {
                let seed = cfg
                    .seed
                    .map_or_else(crate::core::mrs::os_seed, |s| s ^ 0x7265_706c_795f_6d72);
                core.set_reply_mrs(&slots, seed);
                mrs
            }
            Some(Err(_)) | None => Vec::new(),
        };
        let mut init = match group_cq {
            Some(cq) => res.qp_init_on(cq),
            None => res.qp_init()?,
        };
        let mut on_srq = false;
        if let (Some((srq, terms)), Some(_)) = (shared, group_cq) {
            // Admitted only if the queue's ledger has room for what it may take before
            // its first grant; otherwise it keeps the receives staged for it.
            if core.use_shared_receives(terms.share, terms.ledger, terms.floor, terms.done) {
                init.srq = Some(srq);
                on_srq = true;
            }
        }
        // What the connect request negotiates holds for calls that arrive before the CM
        // reports establishment (on shm the executor runs them into our receives as
        // soon as the requester has our accept; DESIGN.md, "Calls before
        // establishment"). After the reply slots: they decide what this end offers.
        core.on_connect_request(peer_private_data.as_bytes());
        let private_data = core.local_private_data();
        let now = dev.clock().now();
        // Receives go in before the peer hears of the acceptance: an iWARP peer may send
        // right after the MPA Reply, and a Send without a receive is fatal there.
        let qp = listener
            .cm
            .accept_prepared(request, init, &private_data, &mut |qp| {
                super::post::transmit_staged::<P, _, _>(&mut core, qp, now);
            })
            .map_err(ConnError::Fabric)?;
        let conn = qp.conn_id();
        // Before the first call is handled: the service keys per-client state on it.
        core.service_mut().set_peer(qp.peer_addr());
        Ok(ResponderConn {
            core,
            qp,
            conn,
            peer_pd: *peer_private_data,
            reply_mrs,
            wants_disconnect: false,
            events: FixedQueue::with_capacity(32),
            wcs: [Completion::EMPTY; CQ_BATCH],
            res,
            accepted_at: now,
            last_activity: (0, now),
            may_release: dev.caps().release_registered,
            placed_in_poll: dev.caps().places_in_poll,
            released: false,
            on_srq,
        })
    }

    /// Gives the memory of this connection's free buffers back to the operating system
    /// (`Pool::release_free`): the buffers parked in the core's caches go back to their
    /// pools first, then every buffer in a pool's ring has its pages released (they read
    /// as zero, and are faulted in again when next used). Where the provider places a
    /// peer's messages only during this side's polls (`DeviceCaps::places_in_poll`:
    /// shm), the posted receives' pages go too: nothing can land in them until the next
    /// poll, which runs on this thread after this returns. The reply contexts' header
    /// buffers and buffers a call holds keep theirs. Does nothing while a call is in
    /// progress, or on a device whose registrations pin their pages
    /// (`DeviceCaps::release_registered`: verbs). Returns the bytes released (whether
    /// they were resident or not). On a shared receive queue (any device) an idle
    /// connection also gives back the receives a larger grant held once a smaller one
    /// was sent (`Connection::settle_idle_grant`).
    ///
    /// A cold path (a system call per run of free buffers, and an allocation): the
    /// server calls it once per idle spell of a connection
    /// ([`Responder::set_release_idle`]).
    pub fn release_free_memory(&mut self) -> usize {
        if self.core.active() != 0 {
            return 0;
        }
        // Idle on a shared receive queue: a smaller grant sent is taken as read.
        self.core.settle_idle_grant();
        if !self.may_release {
            // A group's pools: what this connection's caches hold goes back for the
            // group's other connections (nothing is released: the pages stay pinned).
            if self.res.group_pools() {
                self.core.flush_pool_caches();
            }
            return 0;
        }
        self.core.flush_pool_caches();
        self.qp.release_idle_memory();
        let p = &self.res.pools;
        // A failure leaves that memory resident, nothing worse: count what went.
        let mut released: usize = [&p.large, &p.recv, &p.send]
            .iter()
            .map(|pool| pool.release_free().unwrap_or(0))
            .sum();
        if self.placed_in_poll {
            let (arena, len) = (p.recv.arena(), p.recv.stride());
            self.core.for_each_posted_receive(|addr| {
                if let Some(off) = arena.offset_of(addr as *const u8) {
                    released += arena.release(off, len).unwrap_or(0);
                }
            });
        }
        released
    }

    /// Messages received so far, of any kind: the server's idle check compares it
    /// between looks (a counter sum, so the check costs nothing per RPC).
    fn received(&self) -> u64 {
        let s = self.core.responder_stats();
        s.calls + s.err_vers + s.err_chunk + s.dropped + s.done_received + s.overruns
    }

    /// Closes the connection past the handshake or idle timeout, or releases its free
    /// buffers' memory once per idle spell, counting what it did in `counters`.
    pub(super) fn check_limits(
        &mut self,
        now: Instant,
        limits: &ResponderLimits,
        release_idle: Option<Duration>,
        counters: &mut ResponderCounters,
    ) {
        match self.state() {
            ConnState::Connecting
                if now.saturating_duration_since(self.accepted_at) >= limits.handshake_timeout =>
            {
                counters.handshake_timeouts += 1;
                self.close();
            }
            ConnState::Established => {
                let seen = self.received();
                let idle = now.saturating_duration_since(self.last_activity.1);
                if seen != self.last_activity.0 {
                    self.last_activity = (seen, now);
                    self.released = false;
                } else if limits.idle_timeout.is_some_and(|t| idle >= t) {
                    counters.idle_closed += 1;
                    self.close();
                } else if !self.released
                    && release_idle.is_some_and(|t| idle >= t)
                    && self.active() == 0
                {
                    self.released = true;
                    counters.idle_releases += 1;
                    counters.released_bytes += self.release_free_memory() as u64;
                }
            }
            _ => {}
        }
    }

    /// Hands the connection a CM event that names it.
    pub fn on_cm_event<R>(&mut self, ev: &CmEvent<R>, now: Instant) {
        match ev {
            CmEvent::Established { conn, .. } if *conn == self.conn => {
                self.core.on_established(self.peer_pd.as_bytes(), now);
            }
            CmEvent::Disconnected { conn } if *conn == self.conn => {
                if let Some(why) = self.qp.peer_abort() {
                    self.core.on_peer_abort(why);
                }
                self.core.on_disconnected();
            }
            _ => {}
        }
    }

    /// One round: a batch of completions (running the service on calls), stalled work,
    /// posting. Returns the completions handled.
    pub fn poll(&mut self, now: Instant) -> usize {
        let core = &mut self.core;
        let qp = &self.qp;
        let wcs = self.res.reap_own_cq(&mut self.wcs);
        let work = wcs.len();
        if !wcs.is_empty() {
            // Only a failure can follow a Terminate, so the fast path never asks.
            core.handle_completions(wcs, now, |core| {
                if let Some(why) = qp.peer_abort() {
                    core.on_peer_abort(why);
                }
            });
        }
        self.after_completions(now);
        work
    }

    /// Hands the core one completion of this connection's queue pair, reaped by its
    /// poll group from the queue the group's connections share.
    #[inline]
    pub(super) fn on_completion(&mut self, wc: &Completion, now: Instant) {
        complete(&mut self.core, &self.qp, wc, now);
    }

    /// A receive of the group's shared queue completed on this connection's queue
    /// pair: `buf` holds the message.
    #[inline]
    pub(super) fn on_shared_recv(&mut self, buf: RegBuf, wc: &Completion, now: Instant) {
        if !wc.status.is_success() {
            if let Some(why) = self.qp.peer_abort() {
                self.core.on_peer_abort(why);
            }
        }
        self.core.handle_shared_recv(buf, wc, now);
    }

    /// Whether the connection takes its receives from its group's shared receive queue.
    pub fn on_shared_receives(&self) -> bool {
        self.on_srq
    }

    /// Moves this connection's share of the group's shared receive queue: the most
    /// its next replies grant.
    pub(super) fn set_receive_share(&mut self, share: u32) {
        self.core.set_receive_share(share);
    }

    /// What follows a batch of completions: backward-direction deadlines and calls
    /// (nothing on a one-role responder), stalled work, posting (one doorbell per
    /// queue), and the core's events.
    #[inline]
    pub(super) fn after_completions(&mut self, now: Instant) {
        let core = &mut self.core;
        if core.next_timeout().is_some_and(|t| t <= now) {
            core.handle_timeout(now);
        }
        core.run_backchannel(now);
        super::post::transmit_staged::<P, _, _>(core, &mut self.qp, now);
        while let Some(ev) = self.core.poll_event() {
            if let ConnEvent::DisconnectRequested(_) = ev {
                self.wants_disconnect = true;
            }
            let _ = self.events.push_back(ev);
        }
    }

    /// True while a call waits for a header buffer of its poll group's pool (no
    /// completion of its own will come to retry it: the group does).
    pub(super) fn waits_for_header(&self) -> bool {
        self.core.waits_for_header()
    }

    /// True (once) when the core asked for a disconnect the listener's CM must carry
    /// out.
    pub fn take_disconnect_request(&mut self) -> bool {
        core::mem::take(&mut self.wants_disconnect)
    }

    /// The next connection event.
    pub fn poll_event(&mut self) -> Option<ConnEvent> {
        self.events.pop_front()
    }

    /// Starts a local close.
    pub fn close(&mut self) {
        self.core.close();
    }

    /// The connection state.
    pub fn state(&self) -> ConnState {
        self.core.state()
    }

    /// Counters.
    pub fn stats(&self) -> ResponderStats {
        self.core.responder_stats()
    }

    /// The grant policy (adjustable from any thread).
    pub fn policy(&self) -> &Arc<GrantPolicy> {
        self.core.policy()
    }

    /// The service.
    pub fn service(&self) -> &S {
        self.core.service()
    }

    /// The service, writable.
    pub fn service_mut(&mut self) -> &mut S {
        self.core.service_mut()
    }

    /// Calls received and not yet fully answered.
    pub fn active(&self) -> usize {
        self.core.active()
    }

    /// Work handed to the queue pair and not yet complete: what a connection in
    /// `Draining` still waits for.
    pub fn outstanding(&self) -> crate::Outstanding {
        self.core.outstanding()
    }

    /// Receives posted and not yet completed (the receive queue's depth).
    pub fn recvs_posted(&self) -> u32 {
        self.core.recvs_posted()
    }

    /// The core, for inspection (test hook: feature `testing`).
    #[cfg(feature = "testing")]
    pub fn core(&self) -> &Connection<B, ResponderHalf<S>> {
        &self.core
    }

    /// The connection's resources.
    pub fn resources(&self) -> &ConnResources<P> {
        &self.res
    }

    /// The connection id.
    pub fn conn_id(&self) -> ConnId {
        self.conn
    }

    /// The queue pair.
    pub fn qp(&self) -> &P::Qp {
        &self.qp
    }
}

/// Feeds one completion to `core` (the fast path never asks for a peer's abort: only a
/// failure can follow a Terminate).
#[inline]
fn complete<S: Service, B: RequesterRole, Q: QueuePair>(
    core: &mut Connection<B, ResponderHalf<S>>,
    qp: &Q,
    wc: &Completion,
    now: Instant,
) {
    if !wc.status.is_success() {
        if let Some(why) = qp.peer_abort() {
            core.on_peer_abort(why);
        }
    }
    core.handle_completion(wc, now);
}

/// A listener and the responder connections it accepted, each served by a service
/// from `factory` (which may refuse a connection by returning `None`).
pub struct Responder<P: Provider, S, F, B: RequesterRole = NoRequester> {
    listener: Listener<P>,
    dev: P::Device,
    cfg: ConnConfig,
    factory: F,
    conns: Vec<ResponderConn<P, S, B>>,
    keep_closed: bool,
    refused: u64,
    /// When the connection manager is polled next.
    cm_pacer: super::CmPacer,
    limits: ResponderLimits,
    counters: ResponderCounters,
    /// When the limits were last checked (they are checked on CM polls only).
    last_check: Option<Instant>,
    /// How long a connection is idle before its free buffers' memory is released.
    release_idle: Option<Duration>,
}

/// Default of [`Responder::set_release_idle`]: a connection that received nothing for
/// this long gives its free buffers' memory back. Long enough that a connection busy in
/// bursts does not fault its buffers in again after every pause; short enough that a
/// server's resident memory follows the connections that are working.
pub const DEFAULT_RELEASE_IDLE: Duration = Duration::from_secs(1);

/// Limits a server operator sets. What they bound: resident memory (every connection
/// holds its pools, mapped lazily: resident where used), and how long a peer that stops talking, or never finishes
/// connecting, can hold them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponderLimits {
    /// Connections served at once; connect requests beyond it are rejected.
    pub max_connections: usize,
    /// A connection accepted but not established within this time is closed (the
    /// providers bound their own handshakes too, before a request reaches the server).
    pub handshake_timeout: Duration,
    /// A connection that has received nothing (no call, no keepalive probe) for this
    /// long is disconnected; `None` keeps silent connections. Linux nfsd ages idle
    /// temporary transports out after about six minutes; the default matches it.
    pub idle_timeout: Option<Duration>,
}

impl Default for ResponderLimits {
    fn default() -> Self {
        ResponderLimits {
            max_connections: 1024,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Some(Duration::from_secs(360)),
        }
    }
}

/// What a server refused or closed, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResponderCounters {
    /// Connect requests accepted.
    pub accepted: u64,
    /// Connect requests refused because [`ResponderLimits::max_connections`] were served.
    pub over_limit: u64,
    /// Connect requests refused by the service factory or failed setup.
    pub refused: u64,
    /// Connections closed because they did not establish within the handshake timeout.
    pub handshake_timeouts: u64,
    /// Connections closed after the idle timeout.
    pub idle_closed: u64,
    /// Idle spells in which a connection's free buffers were released
    /// ([`Responder::set_release_idle`]).
    pub idle_releases: u64,
    /// Octets of free buffers given back in them (the ranges released, whether their
    /// pages were resident or not).
    pub released_bytes: u64,
}

impl<P, S, F> Responder<P, S, F>
where
    P: Provider,
    S: Service,
    F: FnMut() -> Option<S>,
{
    /// Listens on `addr` with `dev`; accepted connections use `cfg`.
    pub fn bind(
        dev: P::Device,
        addr: &P::Addr,
        cfg: ConnConfig,
        factory: F,
    ) -> Result<Self, ConnError> {
        Self::bind_roles(dev, addr, cfg, factory)
    }
}

impl<P, S, F> Responder<P, S, F, RequesterHalf>
where
    P: Provider,
    S: Service,
    F: FnMut() -> Option<S>,
{
    /// As [`bind`](Responder::bind), and each accepted connection can also call its
    /// requester (RFC 8167): the service makes backward-direction calls in
    /// [`Service::backchannel`] and hears of them in [`Service::backchannel_outcome`],
    /// on [`ConnConfig::backchannel_credits`] credits of their own, inline only.
    pub fn bind_calling(
        dev: P::Device,
        addr: &P::Addr,
        cfg: ConnConfig,
        factory: F,
    ) -> Result<Self, ConnError> {
        Self::bind_roles(dev, addr, cfg, factory)
    }
}

impl<P, S, F, B> Responder<P, S, F, B>
where
    P: Provider,
    S: Service,
    F: FnMut() -> Option<S>,
    B: RequesterRole,
{
    /// [`bind`](Responder::bind) or [`bind_calling`](Responder::bind_calling), chosen
    /// by the requester slot `B` ([`NoRequester`] or [`RequesterHalf`]): for code
    /// generic over whether its connections call their requesters.
    pub fn bind_roles(
        dev: P::Device,
        addr: &P::Addr,
        cfg: ConnConfig,
        factory: F,
    ) -> Result<Self, ConnError> {
        cfg.validate().map_err(ConnError::Config)?;
        let listener = Listener::bind(&dev, addr)?;
        Ok(Responder {
            listener,
            dev,
            cfg,
            factory,
            conns: Vec::new(),
            keep_closed: false,
            refused: 0,
            cm_pacer: super::CmPacer::default(),
            limits: ResponderLimits::default(),
            counters: ResponderCounters::default(),
            last_check: None,
            release_idle: Some(DEFAULT_RELEASE_IDLE),
        })
    }

    /// How long a connection must have received nothing, with no call in progress,
    /// before the memory of its free buffers is given back to the operating system
    /// ([`ResponderConn::release_free_memory`]; once per idle spell; default
    /// [`DEFAULT_RELEASE_IDLE`]). The buffers stay in their pools and registered, and
    /// are faulted in again when used. `None` keeps whatever a connection has touched
    /// resident. Checked with the limits, from counters: nothing per RPC.
    pub fn set_release_idle(&mut self, after: Option<Duration>) {
        self.release_idle = after;
    }

    /// Applies `limits` (connections already served stay, even above a lowered cap).
    pub fn set_limits(&mut self, limits: ResponderLimits) {
        self.limits = limits;
    }

    /// The limits in force.
    pub fn limits(&self) -> ResponderLimits {
        self.limits
    }

    /// Accepted, refused and closed connections, by reason.
    pub fn counters(&self) -> ResponderCounters {
        ResponderCounters {
            refused: self.refused,
            ..self.counters
        }
    }

    /// Keep closed connections (for inspection) instead of dropping them at the next
    /// poll.
    pub fn keep_closed(&mut self, yes: bool) {
        self.keep_closed = yes;
    }

    /// One round: CM events (accepting requests, routing the rest), then every
    /// connection. Returns the work done.
    pub fn poll(&mut self, now: Instant) -> usize {
        let mut work = 0;
        let paced = self.cm_pacer.due(now);
        let cm_due = paced
            || self.conns.is_empty()
            || self
                .conns
                .iter()
                .any(|c| c.state() == ConnState::Connecting);
        if cm_due {
            let events = self.poll_cm(now);
            if paced {
                self.cm_pacer.found(events);
            }
            work += events;
            self.enforce_limits(now);
        }
        for c in &mut self.conns {
            work += c.poll(now);
            if c.take_disconnect_request() {
                let _ = self.listener.cm.disconnect(c.conn);
            }
        }
        if !self.keep_closed {
            self.conns.retain(|c| c.state() != ConnState::Closed);
        }
        work
    }

    /// Handles every pending connection-manager event: accepts requests, routes the
    /// rest to the connections they name.
    fn poll_cm(&mut self, now: Instant) -> usize {
        let mut work = 0;
        loop {
            let ev = match self.listener.poll_event() {
                Ok(Some(ev)) => ev,
                Ok(None) | Err(_) => return work,
            };
            work += 1;
            match ev {
                CmEvent::ConnectRequest {
                    request,
                    private_data,
                } => self.on_request(request, &private_data),
                other => {
                    for c in &mut self.conns {
                        c.on_cm_event(&other, now);
                    }
                }
            }
        }
    }

    /// Closes connections past the handshake or idle timeout. Runs with the CM polls
    /// (every [`CM_POLL_INTERVAL`](super::CM_POLL_INTERVAL) polls at most), so it reads
    /// counters, never the clock, on the call path.
    fn enforce_limits(&mut self, now: Instant) {
        // At most ten looks a second: each one sums every connection's counters.
        if self
            .last_check
            .is_some_and(|t| now.saturating_duration_since(t) < Duration::from_millis(100))
        {
            return;
        }
        self.last_check = Some(now);
        let limits = self.limits;
        let release_idle = self.release_idle;
        for c in &mut self.conns {
            c.check_limits(now, &limits, release_idle, &mut self.counters);
            if c.take_disconnect_request() {
                let _ = self.listener.cm.disconnect(c.conn);
            }
        }
    }

    fn on_request(&mut self, request: P::ConnRequest, private_data: &CmPrivateData) {
        let live = self
            .conns
            .iter()
            .filter(|c| c.state() != ConnState::Closed)
            .count();
        if live >= self.limits.max_connections {
            self.counters.over_limit += 1;
            let _ = self.listener.cm.reject(request, &[]);
            return;
        }
        let Some(service) = (self.factory)() else {
            self.refused += 1;
            let _ = self.listener.cm.reject(request, &[]);
            return;
        };
        match ResponderConn::accept_on(
            &mut self.listener,
            &self.dev,
            request,
            private_data,
            &self.cfg,
            service,
            None,
            None,
            None,
        ) {
            Ok(c) => {
                self.counters.accepted += 1;
                self.conns.push(c);
            }
            Err(_) => self.refused += 1,
        }
    }

    /// The accepted connections.
    pub fn connections(&self) -> &[ResponderConn<P, S, B>] {
        &self.conns
    }

    /// The accepted connections, writable.
    pub fn connections_mut(&mut self) -> &mut [ResponderConn<P, S, B>] {
        &mut self.conns
    }

    /// Removes and returns the accepted connections.
    pub fn take_connections(&mut self) -> Vec<ResponderConn<P, S, B>> {
        core::mem::take(&mut self.conns)
    }

    /// Disconnects connection `conn`.
    pub fn disconnect(&mut self, conn: ConnId) -> Result<(), ConnError> {
        self.listener.cm.disconnect(conn).map_err(ConnError::Fabric)
    }

    /// The clock this server's connections read (its device's): pass its `now` to
    /// [`poll`](Self::poll).
    pub fn clock(&self) -> crate::fabric::Clock {
        self.dev.clock()
    }

    /// Connect requests refused (factory said no, or setup failed).
    pub fn refused(&self) -> u64 {
        self.refused
    }
}
