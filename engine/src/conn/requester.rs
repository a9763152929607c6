//! The active side of a connection: a requester core over a provider.

use std::sync::Arc;
use std::time::Instant;

use rpcrdma_pools::PoolCache;

use super::resources::ConnResources;
use super::{ConnError, CQ_BATCH};
use crate::core::config::{ConnConfig, RegMode, Role};
use crate::core::fixed::FixedQueue;
use crate::core::{
    CharsUpdateError, CloseReason, ConnEvent, ConnState, Connection, NoResponder, ProbeError,
    RegBuf, RegBufError, RequesterHalf, RequesterStats, ResponderHalf, ResponderRole,
    ResponderStats,
};
use crate::credits::{CreditTable, GrantPolicy};
use crate::fabric::{
    Clock, CmEvent, Completion, ConnId, ConnectionManager, Device, Provider, QueuePair,
};
use crate::requester::{CallRequest, Outcome, SubmitError};
use crate::service::Service;
use crate::wire::private_data::InlineThresholds;

/// A requester connection: submit calls, poll, collect outcomes. `B` is the responder
/// slot: [`NoResponder`], or a [`ResponderHalf`] serving the responder's
/// backward-direction calls (RFC 8167; [`Requester::connect_serving`]).
pub struct Requester<P: Provider, B: ResponderRole = NoResponder> {
    pub(super) core: Connection<RequesterHalf, B>,
    /// The fast-registration slots' handles (the core holds their keys): dropped, which
    /// deregisters them, once the core has closed, so no key it handed out outlives
    /// the connection.
    fast_regs: Vec<P::Mr>,
    qp: P::Qp,
    cm: P::Cm,
    conn: ConnId,
    events: FixedQueue<ConnEvent>,
    /// When the connection manager is polled next.
    cm_pacer: super::CmPacer,
    /// Send buffers for [`take_msg`](Self::take_msg), restocked by
    /// [`recycle`](Self::recycle).
    msg_cache: PoolCache,
    /// Completion batch, reused by every poll.
    wcs: [Completion; CQ_BATCH],
    /// The last call submitted found no other started or waiting (see
    /// [`submit_at`](Self::submit_at)).
    solo: bool,
    res: ConnResources<P>,
    /// The device's clock: the system's, or a simulation's virtual one.
    pub(super) clock: Clock,
    /// Reconnection and retransmission state (`ConnConfig::reconnect`); `None` when off.
    pub(super) again: Option<Box<super::reconnect::Again<P>>>,
}

/// Makes a core (with fresh fast-registration slots, beside the responder slot `resp`)
/// and starts connecting it to `addr` over `res`, posting its receives.
#[allow(clippy::type_complexity)]
fn open<P: Provider, B: ResponderRole>(
    res: &ConnResources<P>,
    cm: &mut P::Cm,
    addr: &P::Addr,
    cfg: &ConnConfig,
    credits: &Arc<CreditTable>,
    now: Instant,
    resp: B,
) -> Result<(Vec<P::Mr>, Connection<RequesterHalf, B>, P::Qp), ConnError> {
    let (fast_regs, core) = match res.registration() {
        RegMode::FastReg => {
            let (mrs, slots) = res.fast_mrs(res.sizes.mr_slots, cfg.large_buf_size as usize)?;
            let core = Connection::with_requester(
                cfg,
                &res.pools,
                Some(&slots),
                credits.clone(),
                resp,
                res.sizes,
            );
            (mrs, core)
        }
        RegMode::Persistent => (
            Vec::new(),
            Connection::with_requester(cfg, &res.pools, None, credits.clone(), resp, res.sizes),
        ),
    };
    let mut core = core.map_err(ConnError::Core)?;
    core.apply_device(res.rdma_round_trip);
    let mut qp = cm
        .connect(
            addr,
            res.qp_init()?,
            &core.connect_private_data(res.connect_pd_max),
        )
        .map_err(ConnError::Fabric)?;
    super::post::transmit_staged::<P, _, _>(&mut core, &mut qp, now);
    Ok((fast_regs, core, qp))
}

impl<P: Provider> Requester<P> {
    /// Creates the connection's resources on `dev` and starts connecting to `addr`,
    /// offering RFC 8797 private data. Receives are posted at once; calls can be
    /// submitted once [`state`](Self::state) is `Established`.
    pub fn connect_with(
        dev: &P::Device,
        addr: &P::Addr,
        cfg: &ConnConfig,
    ) -> Result<Self, ConnError> {
        let res = ConnResources::<P>::new(dev, cfg, Role::Requester)?;
        Self::start(dev, addr, cfg, res, NoResponder)
    }
}

impl<P: Provider, S: Service> Requester<P, ResponderHalf<S>> {
    /// As [`Requester::connect_with`], and the connection also serves the responder's
    /// backward-direction calls (RFC 8167) with `service`: their own credits
    /// ([`ConnConfig::backchannel_credits`], granted in the replies) and receives,
    /// inline messages only (a call with chunks, or a reply too large for inline, gets
    /// RDMA_ERROR/ERR_CHUNK). Reconnection is refused
    /// ([`ConfigError::ReconnectWithBackchannel`](crate::ConfigError::ReconnectWithBackchannel)).
    pub fn connect_serving(
        dev: &P::Device,
        addr: &P::Addr,
        cfg: &ConnConfig,
        service: S,
    ) -> Result<Self, ConnError> {
        if cfg.reconnect.is_some() {
            return Err(ConnError::Config(
                crate::core::ConfigError::ReconnectWithBackchannel,
            ));
        }
        let sizes = cfg.sizes_with_backchannel(Role::Requester);
        let res = ConnResources::<P>::with_sizes(dev, cfg, Role::Requester, sizes)?;
        let bc = cfg.backchannel().credits;
        let policy = Arc::new(GrantPolicy::new(bc, bc));
        let resp = ResponderHalf::new(&cfg.backchannel(), &res.pools, service, policy)
            .map_err(ConnError::Core)?;
        Self::start(dev, addr, cfg, res, resp)
    }

    /// The service answering the backward direction.
    pub fn service(&self) -> &S {
        self.core.service()
    }

    /// The service, writable.
    pub fn service_mut(&mut self) -> &mut S {
        self.core.service_mut()
    }

    /// The backward direction's counters (calls served).
    pub fn backchannel_stats(&self) -> ResponderStats {
        self.core.responder_stats()
    }
}

impl<P: Provider, B: ResponderRole> Requester<P, B> {
    fn start(
        dev: &P::Device,
        addr: &P::Addr,
        cfg: &ConnConfig,
        res: ConnResources<P>,
        resp: B,
    ) -> Result<Self, ConnError> {
        let credits = Arc::new(CreditTable::new(cfg.credits, cfg.keepalive.is_some()));
        let mut cm = dev.create_cm().map_err(ConnError::Fabric)?;
        let clock = dev.clock();
        let (fast_regs, core, qp) = open(&res, &mut cm, addr, cfg, &credits, clock.now(), resp)?;
        let conn = qp.conn_id();
        let again = cfg
            .reconnect
            .map(|policy| Box::new(super::reconnect::Again::new(policy, addr, cfg, credits)));
        Ok(Requester {
            core,
            fast_regs,
            qp,
            cm,
            conn,
            events: FixedQueue::with_capacity(32),
            cm_pacer: super::CmPacer::default(),
            msg_cache: res.pools.send.cache(),
            wcs: [Completion::EMPTY; CQ_BATCH],
            solo: false,
            res,
            clock,
            again,
        })
    }

    /// A new connection over the same resources (protection domain, pools, completion
    /// queue) with a fresh core and fresh fast-registration slots: what
    /// `ConnConfig::reconnect` does after a loss. The old queue pair and core go.
    pub(super) fn reopen(&mut self, now: Instant) -> Result<(), ConnError> {
        let Some(a) = self.again.as_deref() else {
            return Ok(());
        };
        // Only a connection without a backchannel service reconnects (the service
        // would have to move from the old core to the new one).
        let Some(resp) = B::for_reconnect() else {
            return Ok(());
        };
        // The old slots' keys die with their handles before new ones are made.
        self.fast_regs.clear();
        let (fast_regs, mut core, qp) = open(
            &self.res,
            &mut self.cm,
            &a.addr,
            &a.cfg,
            &a.credits,
            now,
            resp,
        )?;
        // XIDs go on from the old connection's: the calls sent again keep theirs, and
        // no new call may take one a server has seen.
        core.continue_xids(self.core.xid_sequence());
        self.conn = qp.conn_id();
        self.fast_regs = fast_regs;
        self.core = core;
        self.qp = qp;
        Ok(())
    }

    /// One round: connection events, a batch of completions, timers, queued calls,
    /// posting. Returns the work done (events and completions handled).
    pub fn poll(&mut self, now: Instant) -> usize {
        let mut work = 0;
        let paced = self.cm_pacer.due(now);
        let cm_due = self.core.state() != ConnState::Established || paced;
        if cm_due {
            let events = self.poll_cm(now);
            if paced {
                self.cm_pacer.found(events);
            }
            work += events;
        }
        let core = &mut self.core;
        // The calls submitted since the last poll go out first (their receives posted
        // before them, as ever): the completion batch's replies and Send completions
        // are bookkeeping that can wait, the calls' Sends are the next round trips'
        // critical path. What the batch stages (receives restocked, RDMA_DONE, calls
        // that waited for a credit) goes out in the post after it.
        if core.sends_staged() {
            super::post::transmit_staged::<P, _, _>(core, &mut self.qp, now);
        }
        let qp = &self.qp;
        let wcs = self.res.reap_own_cq(&mut self.wcs);
        work += wcs.len();
        if !wcs.is_empty() {
            // Only a failure can follow a Terminate, so the fast path never asks.
            core.handle_completions(wcs, now, |core| {
                if let Some(why) = qp.peer_abort() {
                    core.on_peer_abort(why);
                }
            });
        }
        if core.next_timeout().is_some_and(|t| t <= now) {
            core.handle_timeout(now);
        }
        super::post::transmit_staged::<P, _, _>(core, &mut self.qp, now);
        while let Some(ev) = self.core.poll_event() {
            if let ConnEvent::DisconnectRequested(_) = ev {
                let _ = self.cm.disconnect(self.conn);
            }
            let _ = self.events.push_back(ev);
        }
        self.deregister_if_closed();
        if self.again.is_some() {
            work += self.reconnect_step(now);
        }
        work
    }

    /// Once the core has closed, deregisters the fast-registration slots: their keys
    /// can no longer be invalidated with work requests, and the handles are the only
    /// thing still granting them.
    #[inline]
    fn deregister_if_closed(&mut self) {
        if !self.fast_regs.is_empty() && self.core.state() == ConnState::Closed {
            self.fast_regs.clear();
        }
    }

    /// Handles every pending connection-manager event.
    fn poll_cm(&mut self, now: Instant) -> usize {
        let mut work = 0;
        loop {
            let ev = match self.cm.poll_event() {
                Ok(Some(ev)) => ev,
                Ok(None) => return work,
                Err(_) => {
                    self.core.on_disconnected();
                    return work;
                }
            };
            work += 1;
            match ev {
                CmEvent::Established { conn, private_data } if conn == self.conn => {
                    self.core.on_established(private_data.as_bytes(), now);
                }
                CmEvent::Rejected { conn, .. } if conn == self.conn => {
                    self.core.on_cm_close(CloseReason::Rejected);
                }
                CmEvent::Unreachable { conn } if conn == self.conn => {
                    self.core.on_cm_close(CloseReason::Unreachable);
                }
                CmEvent::Disconnected { conn } if conn == self.conn => {
                    if let Some(why) = self.qp.peer_abort() {
                        self.core.on_peer_abort(why);
                    }
                    self.core.on_disconnected();
                }
                // Not a listener: a stray request is refused by dropping it.
                _ => {}
            }
        }
    }

    /// Submits a call; its outcome comes from [`poll_outcome`](Self::poll_outcome)
    /// with `tag`.
    #[inline]
    pub fn submit(&mut self, req: CallRequest, tag: u64) -> Result<(), SubmitError> {
        let now = self.clock.now();
        self.submit_at(req, tag, now)
    }

    /// [`submit`](Self::submit) at `now`, a time the caller read from this
    /// connection's [`clock`](Self::clock) just before (the `now` its loop passes to
    /// [`poll`](Self::poll)): a driver loop that submits many calls per turn reads the
    /// clock once per turn instead of once per call. The call's deadline counts from
    /// `now`, so a stale `now` shortens it.
    ///
    /// A caller making one call at a time has its calls posted at once: a call
    /// submitted while no other is started or waiting, as the one before it was, goes
    /// alone (nothing would batch with it, and the next poll would only find the
    /// completion queue empty before posting it). Other calls are staged and posted
    /// together by the next [`poll`](Self::poll): a burst of calls (the first of which
    /// may find the connection idle) takes one post.
    #[inline]
    pub fn submit_at(
        &mut self,
        req: CallRequest,
        tag: u64,
        now: Instant,
    ) -> Result<(), SubmitError> {
        // One call at a time: this one and the one before found nothing in flight.
        let idle = self.core.requester_idle();
        let solo = idle && self.solo;
        self.solo = idle;
        self.core.submit(req, tag, now)?;
        if solo {
            super::post::transmit_staged::<P, _, _>(&mut self.core, &mut self.qp, now);
        }
        Ok(())
    }

    /// The next finished call.
    #[inline]
    pub fn poll_outcome(&mut self) -> Option<Outcome> {
        if self.again.is_some() {
            return self.poll_outcome_again();
        }
        self.core.poll_outcome()
    }

    /// The next finished call, handed to `f` where the engine keeps it, after which its
    /// buffers are taken back as [`recycle`](Self::recycle) takes them (the call message
    /// into the send-buffer cache, the reply into the receive cache; whatever `f` left in
    /// its DDP argument and write-sink lists is dropped: drain them in `f` to keep
    /// them). The same outcome as [`poll_outcome`](Self::poll_outcome) followed by
    /// `recycle`, without moving the outcome (a few hundred octets) out and back: for a
    /// driver loop on the connection's thread. `None` when no call has finished.
    // Always inlined: a driver loop calls it once per outcome and once more to find
    // none, and the out-of-line call's register saves cost about 19 instructions an
    // outcome (`perf/insns.sh`'s rate region).
    #[inline(always)]
    pub fn poll_outcome_with<T>(&mut self, f: impl FnOnce(&mut Outcome) -> T) -> Option<T> {
        if self.again.is_some() {
            let mut o = self.poll_outcome_again()?;
            let r = f(&mut o);
            self.recycle(o);
            return Some(r);
        }
        let (r, msg) = self.core.poll_outcome_with(f)?;
        if let Some(m) = msg {
            m.release_into(&mut self.msg_cache);
        }
        Some(r)
    }

    /// The next connection event.
    pub fn poll_event(&mut self) -> Option<ConnEvent> {
        self.events.pop_front()
    }

    /// Starts a health check (RFC 8267 §6.7.2); see [`ConnEvent::ProbeAnswered`] and
    /// [`ConnEvent::PeerDead`].
    pub fn health_check(&mut self) -> Result<(), ProbeError> {
        self.core.health_check(self.clock.now())
    }

    /// Sends this end's transport characteristics again in a characteristics update
    /// (ROPT_XCHUPD; `engine/DESIGN.md`, "Characteristics updates"), for example after
    /// its receive buffer structure changed. Staged now, posted by the next
    /// [`poll`](Self::poll); only once continuation was negotiated (a version-1-only
    /// peer never sees one).
    pub fn send_chars_update(&mut self) -> Result<(), CharsUpdateError> {
        self.core.send_chars_update()
    }

    /// A send buffer for a call message (inline-sized; see
    /// [`alloc_large`](Self::alloc_large) for long calls).
    pub fn alloc_msg(&self) -> Result<RegBuf, RegBufError> {
        RegBuf::from_pool(&self.res.pools.send)
    }

    /// A send buffer for a call message, as [`alloc_msg`](Self::alloc_msg) gives, from
    /// this connection's own cache of the send pool: no shared-ring operation and no
    /// pool-handle reference count while the cache has buffers, which
    /// [`recycle`](Self::recycle) keeps it stocked with. For a driver loop on the
    /// connection's thread.
    pub fn take_msg(&mut self) -> Result<RegBuf, RegBufError> {
        RegBuf::from_cache(&mut self.msg_cache)
    }

    /// Takes an outcome's engine buffers back (after the caller read what it wanted):
    /// the call message into the send-buffer cache [`take_msg`](Self::take_msg) draws
    /// from, the reply into the receive cache that restocks receives. Cheaper than
    /// dropping the outcome, which returns each buffer through its pool's shared ring.
    /// DDP arguments and write sinks (the application's buffers) are dropped: take
    /// them out first to keep them.
    pub fn recycle(&mut self, o: Outcome) {
        let Outcome { msg, reply, .. } = o;
        if let Some(m) = msg {
            m.release_into(&mut self.msg_cache);
        }
        if let Some(r) = reply {
            self.core.recycle_recv(r.buf);
        }
    }

    /// A large buffer (long call messages, DDP arguments, write sinks), from the
    /// application's pool.
    pub fn alloc_large(&self) -> Result<RegBuf, RegBufError> {
        match &self.res.app {
            Some(app) => RegBuf::from_pool(app),
            None => Err(RegBufError::Exhausted),
        }
    }

    /// Starts an orderly close: the CM disconnects, every call gets its outcome (with
    /// `ConnConfig::reconnect`, calls waiting to be sent again fail now, and no new
    /// connection is made).
    pub fn close(&mut self) {
        self.closing_for_good();
        self.core.close();
        self.deregister_if_closed();
    }

    /// The connection state.
    pub fn state(&self) -> ConnState {
        self.core.state()
    }

    /// Why the connection is closing or closed (`None` while it is up or being made):
    /// e.g. [`CloseReason::Rejected`] for a connect request the peer refused.
    pub fn close_reason(&self) -> Option<CloseReason> {
        self.core.close_reason()
    }

    /// The negotiated thresholds.
    pub fn thresholds(&self) -> InlineThresholds {
        self.core.thresholds()
    }

    /// Applies the peer's `CONF_RDMA` results (RFC 5666 §6.2) to this connection; see
    /// [`Connection::apply_peer_config`](crate::Connection::apply_peer_config). Returns
    /// the thresholds now in force.
    pub fn apply_peer_config(&mut self, peer: crate::PeerConfig) -> InlineThresholds {
        self.core.apply_peer_config(peer)
    }

    /// The credit table (shareable with other threads).
    pub fn credits(&self) -> &Arc<CreditTable> {
        self.core.credits()
    }

    /// How chunk memory is registered: [`RegMode::FastReg`] (per-RPC keys) or
    /// [`RegMode::Persistent`] (the chunk pools, registered once for the connection;
    /// see [`Registration`](crate::core::Registration) for the exposure this means).
    pub fn registration(&self) -> RegMode {
        self.core.registration()
    }

    /// Counters.
    pub fn stats(&self) -> RequesterStats {
        self.core.requester_stats()
    }

    /// Calls queued for credits or resources.
    pub fn queued(&self) -> usize {
        self.core.queued()
    }

    /// When the connection next has timer work (a call deadline, the keepalive): a
    /// poller that parks should wake by then.
    pub fn next_timeout(&self) -> Option<Instant> {
        self.core.next_timeout()
    }

    /// The extensions both peers offered (none before the connection is established).
    pub fn extensions(&self) -> crate::wire::private_data::Extensions {
        self.core.extensions()
    }

    /// The peer's transport characteristics (draft-dnoveck-rpcrdma-rtrext §8).
    pub fn peer_chars(&self) -> crate::wire::rtr::TransportChars {
        self.core.peer_chars()
    }

    /// Calls started whose outcome is not yet delivered, plus timed-out calls still
    /// holding a credit.
    pub fn active(&self) -> usize {
        self.core.active()
    }

    /// The core, for inspection (test hook: feature `testing`).
    #[cfg(feature = "testing")]
    pub fn core(&self) -> &Connection<RequesterHalf, B> {
        &self.core
    }

    /// The core, writable (test hook: feature `testing`).
    #[cfg(feature = "testing")]
    pub fn core_mut(&mut self) -> &mut Connection<RequesterHalf, B> {
        &mut self.core
    }

    /// The connection's resources (pools, protection domain).
    pub fn resources(&self) -> &ConnResources<P> {
        &self.res
    }

    /// The connection's resources, writable (to register application arenas).
    pub fn resources_mut(&mut self) -> &mut ConnResources<P> {
        &mut self.res
    }

    /// The clock this connection reads (its device's): pass its `now` to
    /// [`poll`](Self::poll).
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The connection id.
    pub fn conn_id(&self) -> ConnId {
        self.conn
    }

    /// The connection manager, to poll or disconnect directly (test hook: feature
    /// `testing`).
    #[cfg(feature = "testing")]
    pub fn cm_mut(&mut self) -> &mut P::Cm {
        &mut self.cm
    }

    /// The queue pair.
    pub fn qp(&self) -> &P::Qp {
        &self.qp
    }

    /// The queue pair, writable: for tests that inject raw messages. Work requests
    /// posted here bypass the core (their completions count as stray). Test hook:
    /// feature `testing`.
    #[cfg(feature = "testing")]
    pub fn qp_mut(&mut self) -> &mut P::Qp {
        &mut self.qp
    }
}
