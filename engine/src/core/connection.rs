//! One connection's protocol core, whatever roles it plays: a requester half (calls
//! out, replies in), a responder half (calls in, replies out), or both (RFC 8167
//! bidirectional RPC-over-RDMA), sharing one transport: connection state, negotiated
//! thresholds, receives, the send-queue budget, the outbox and the event queue.
//!
//! The connection owns what both halves share and everything that is about the
//! connection rather than a call: its life (established, failed, drained, closed), the
//! receive table, and posting. Each received message goes to the half it is for: on a
//! connection with one role, to that role; with both, by what the message is (a call or
//! a reply, [`super::demux`]). Send-queue completions go to the half that staged the
//! request, which its `wr_id` names.
//!
//! The type parameters are the two role slots: a [`RequesterHalf`] or [`NoRequester`], a
//! [`ResponderHalf`] or [`NoResponder`]. Roles are fixed when the connection is built and
//! dispatch is static: a one-role connection never asks which half a message is for, and
//! carries no trace of the other half.

use std::sync::Arc;
use std::time::Instant;

use super::config::{ConnConfig, RegMode, Role, Sizes};
use super::demux::{direction, Direction};
use super::event::ConnEvent;
use super::mrs::FastRegSlot;
use super::outbox::{PostFailure, Transmit, Transmitter};
use super::regbuf::RegBuf;
use super::requester::{ProbeError, RequesterHalf, RequesterStats};
use super::responder::{ResponderHalf, ResponderStats};
use super::signal::SendLedger;
use super::srq_ledger::{Exposure, SrqLedger};
use super::transport::{flush_of, settle_refused, CloseReason, ConnState, Staged, Transport};
use super::wrid::{WrId, WrKind};
use super::{CoreError, CorePools};
use crate::credits::{CreditTable, GrantPolicy};
use crate::fabric::{Completion, PeerAbort, WcOpcode, WcStatus};
use crate::requester::{CallRequest, Outcome, SubmitError};
use crate::service::Service;
use crate::wire::header::Limits;
use crate::wire::private_data::{
    find_private_data, Advertisement, Extensions, InlineThresholds, PrivateData,
};
use crate::wire::rtr::TransportChars;

/// The requester slot of a connection that makes no calls.
#[derive(Debug, Default)]
pub struct NoRequester;

/// The responder slot of a connection that serves no calls.
#[derive(Debug, Default)]
pub struct NoResponder;

/// A requester-only connection core.
pub type RequesterCore = Connection<RequesterHalf, NoResponder>;

/// A responder-only connection core.
pub type ResponderCore<S> = Connection<NoRequester, ResponderHalf<S>>;

/// A connection core playing both roles (RFC 8167).
pub type BidiCore<S> = Connection<RequesterHalf, ResponderHalf<S>>;

/// What a connection asks of its requester slot: a [`RequesterHalf`] or
/// [`NoRequester`]. Sealed: the slot types are the engine's own. Dispatch is static, so
/// a connection without a requester carries no trace of one.
pub trait RequesterRole: roles::Sealed {
    #[doc(hidden)]
    const PRESENT: bool;
    #[doc(hidden)]
    fn on_recv(&mut self, t: &mut Transport, buf: RegBuf, swi: Option<u32>, now: Instant);
    #[doc(hidden)]
    fn on_send_completion(&mut self, t: &mut Transport, id: WrId, wc: &Completion);
    /// An unsignaled Send of the call in `slot` executed (a later completion retired
    /// it: `core/signal.rs`); true when it was the slot's, so its send-queue room
    /// comes back.
    #[doc(hidden)]
    fn retire_call_send(&mut self, slot: u32) -> bool;
    #[doc(hidden)]
    fn on_fail(&mut self, t: &mut Transport);
    #[doc(hidden)]
    fn close_drained(&mut self, t: &mut Transport);
    #[doc(hidden)]
    fn prepare(&mut self, t: &mut Transport, now: Instant);
    #[doc(hidden)]
    fn on_established(&mut self, t: &mut Transport, now: Instant);
    #[doc(hidden)]
    fn next_timeout(&self, t: &Transport) -> Option<Instant>;
    #[doc(hidden)]
    fn handle_timeout(&mut self, t: &mut Transport, now: Instant);
    #[doc(hidden)]
    fn active(&self) -> usize;
    #[doc(hidden)]
    fn local_pd(&self) -> Option<PrivateData>;
    #[doc(hidden)]
    fn awaits_reply(&self, xid: u32) -> bool;
    #[doc(hidden)]
    fn forward(&self) -> bool;
    /// Outcomes waiting for the driver to take them (none without a requester).
    #[doc(hidden)]
    #[inline(always)]
    fn outcomes_waiting(&self) -> usize {
        0
    }
    /// A forward responder's core with this requester slot (none, or the backward
    /// direction's: RFC 8167).
    #[doc(hidden)]
    fn responder_core<S: Service>(
        cfg: &ConnConfig,
        pools: &CorePools,
        service: S,
        policy: Arc<GrantPolicy>,
    ) -> Result<Connection<Self, ResponderHalf<S>>, CoreError>
    where
        Self: Sized;
    /// The sizes of a forward responder with this requester slot.
    #[doc(hidden)]
    fn responder_sizes(cfg: &ConnConfig) -> Sizes
    where
        Self: Sized;
    /// Hands `service` the finished backward calls, then lets it make new ones.
    #[doc(hidden)]
    fn run_backchannel<S: Service>(&mut self, t: &mut Transport, service: &mut S, now: Instant);
}

/// What a connection asks of its responder slot: a [`ResponderHalf`] or
/// [`NoResponder`]. Sealed, static dispatch.
pub trait ResponderRole: roles::Sealed {
    #[doc(hidden)]
    const PRESENT: bool;
    #[doc(hidden)]
    fn on_recv(&mut self, t: &mut Transport, buf: RegBuf, swi: Option<u32>);
    #[doc(hidden)]
    fn on_send_completion(&mut self, t: &mut Transport, id: WrId, wc: &Completion);
    #[doc(hidden)]
    fn on_fail(&mut self, t: &mut Transport);
    #[doc(hidden)]
    fn close_drained(&mut self, t: &mut Transport);
    #[doc(hidden)]
    fn on_established(&mut self, t: &mut Transport);
    #[doc(hidden)]
    fn prepare(&mut self, t: &mut Transport, now: Instant);
    #[doc(hidden)]
    fn active(&self) -> usize;
    #[doc(hidden)]
    fn can_expose(&self) -> bool;
    #[doc(hidden)]
    fn waits_for_header(&self) -> bool;
    /// A fresh slot for the next connection of a reconnecting requester; `None` when
    /// the slot cannot be made again (a backchannel service lives in one core).
    #[doc(hidden)]
    fn for_reconnect() -> Option<Self>
    where
        Self: Sized;
}

mod roles {
    pub trait Sealed {}
    impl Sealed for super::RequesterHalf {}
    impl<S> Sealed for super::ResponderHalf<S> {}
    impl Sealed for super::NoRequester {}
    impl Sealed for super::NoResponder {}
}

impl RequesterRole for RequesterHalf {
    const PRESENT: bool = true;
    #[inline(always)]
    fn on_recv(&mut self, t: &mut Transport, buf: RegBuf, swi: Option<u32>, now: Instant) {
        RequesterHalf::on_recv(self, t, buf, swi, now)
    }
    #[inline(always)]
    fn on_send_completion(&mut self, t: &mut Transport, id: WrId, wc: &Completion) {
        RequesterHalf::on_send_completion(self, t, id, wc)
    }
    #[inline(always)]
    fn retire_call_send(&mut self, slot: u32) -> bool {
        RequesterHalf::retire_call_send(self, slot)
    }
    fn on_fail(&mut self, t: &mut Transport) {
        RequesterHalf::on_fail(self, t)
    }
    fn close_drained(&mut self, t: &mut Transport) {
        RequesterHalf::close_drained(self, t)
    }
    #[inline(always)]
    fn prepare(&mut self, t: &mut Transport, now: Instant) {
        RequesterHalf::prepare(self, t, now)
    }
    fn on_established(&mut self, t: &mut Transport, now: Instant) {
        RequesterHalf::on_established(self, t, now)
    }
    #[inline(always)]
    fn next_timeout(&self, t: &Transport) -> Option<Instant> {
        RequesterHalf::next_timeout(self, t)
    }
    fn handle_timeout(&mut self, t: &mut Transport, now: Instant) {
        RequesterHalf::handle_timeout(self, t, now)
    }
    fn active(&self) -> usize {
        RequesterHalf::active(self)
    }
    fn local_pd(&self) -> Option<PrivateData> {
        // A backward-direction requester registers nothing: the forward responder's
        // offer stands.
        (!self.is_backchannel()).then(|| RequesterHalf::local_pd(self))
    }
    fn awaits_reply(&self, xid: u32) -> bool {
        RequesterHalf::awaits_reply(self, xid)
    }
    fn forward(&self) -> bool {
        !self.is_backchannel()
    }
    #[inline(always)]
    fn outcomes_waiting(&self) -> usize {
        RequesterHalf::outcomes_waiting(self)
    }
    fn responder_core<S: Service>(
        cfg: &ConnConfig,
        pools: &CorePools,
        service: S,
        policy: Arc<GrantPolicy>,
    ) -> Result<Connection<Self, ResponderHalf<S>>, CoreError> {
        let credits = Arc::new(CreditTable::new(cfg.backchannel().credits, false));
        Connection::responder_calling(cfg, pools, service, policy, credits)
    }
    fn responder_sizes(cfg: &ConnConfig) -> Sizes {
        cfg.sizes_with_backchannel(Role::Responder)
    }
    fn run_backchannel<S: Service>(&mut self, t: &mut Transport, service: &mut S, now: Instant) {
        while let Some(o) = self.poll_outcome() {
            service.backchannel_outcome(o);
        }
        let mut calls = Backchannel { t, req: self, now };
        service.backchannel(&mut calls);
    }
}

impl RequesterRole for NoRequester {
    const PRESENT: bool = false;
    #[inline(always)]
    fn on_recv(&mut self, t: &mut Transport, buf: RegBuf, _swi: Option<u32>, _now: Instant) {
        t.recvs.recycle(buf);
    }
    #[inline(always)]
    fn on_send_completion(&mut self, t: &mut Transport, _id: WrId, _wc: &Completion) {
        t.stray_completions += 1;
    }
    fn retire_call_send(&mut self, _slot: u32) -> bool {
        false
    }
    fn on_fail(&mut self, _t: &mut Transport) {}
    fn close_drained(&mut self, _t: &mut Transport) {}
    #[inline(always)]
    fn prepare(&mut self, _t: &mut Transport, _now: Instant) {}
    fn on_established(&mut self, _t: &mut Transport, _now: Instant) {}
    #[inline(always)]
    fn next_timeout(&self, _t: &Transport) -> Option<Instant> {
        None
    }
    fn handle_timeout(&mut self, _t: &mut Transport, _now: Instant) {}
    fn active(&self) -> usize {
        0
    }
    fn local_pd(&self) -> Option<PrivateData> {
        None
    }
    fn awaits_reply(&self, _xid: u32) -> bool {
        false
    }
    fn forward(&self) -> bool {
        false
    }
    fn responder_core<S: Service>(
        cfg: &ConnConfig,
        pools: &CorePools,
        service: S,
        policy: Arc<GrantPolicy>,
    ) -> Result<Connection<Self, ResponderHalf<S>>, CoreError> {
        Connection::responder(cfg, pools, service, policy)
    }
    fn responder_sizes(cfg: &ConnConfig) -> Sizes {
        cfg.sizes(Role::Responder)
    }
    #[inline(always)]
    fn run_backchannel<S: Service>(&mut self, _t: &mut Transport, _s: &mut S, _now: Instant) {}
}

impl<S: Service> ResponderRole for ResponderHalf<S> {
    const PRESENT: bool = true;
    #[inline(always)]
    fn on_recv(&mut self, t: &mut Transport, buf: RegBuf, swi: Option<u32>) {
        ResponderHalf::on_recv(self, t, buf, swi)
    }
    #[inline(always)]
    fn on_send_completion(&mut self, t: &mut Transport, id: WrId, wc: &Completion) {
        ResponderHalf::on_send_completion(self, t, id, wc)
    }
    fn on_fail(&mut self, t: &mut Transport) {
        ResponderHalf::on_fail(self, t)
    }
    fn close_drained(&mut self, t: &mut Transport) {
        ResponderHalf::close_drained(self, t)
    }
    fn on_established(&mut self, t: &mut Transport) {
        ResponderHalf::on_established(self, t)
    }
    #[inline(always)]
    fn prepare(&mut self, t: &mut Transport, now: Instant) {
        ResponderHalf::prepare(self, t, now)
    }
    fn active(&self) -> usize {
        ResponderHalf::active(self)
    }
    fn can_expose(&self) -> bool {
        ResponderHalf::can_expose(self)
    }
    fn waits_for_header(&self) -> bool {
        ResponderHalf::waits_for_header(self)
    }
    fn for_reconnect() -> Option<Self> {
        None
    }
}

impl ResponderRole for NoResponder {
    const PRESENT: bool = false;
    #[inline(always)]
    fn on_recv(&mut self, t: &mut Transport, buf: RegBuf, _swi: Option<u32>) {
        t.recvs.recycle(buf);
    }
    #[inline(always)]
    fn on_send_completion(&mut self, t: &mut Transport, _id: WrId, _wc: &Completion) {
        t.stray_completions += 1;
    }
    fn on_fail(&mut self, _t: &mut Transport) {}
    fn close_drained(&mut self, _t: &mut Transport) {}
    fn on_established(&mut self, _t: &mut Transport) {}
    #[inline(always)]
    fn prepare(&mut self, _t: &mut Transport, _now: Instant) {}
    fn active(&self) -> usize {
        0
    }
    fn can_expose(&self) -> bool {
        true
    }
    fn waits_for_header(&self) -> bool {
        false
    }
    fn for_reconnect() -> Option<Self> {
        Some(NoResponder)
    }
}

/// What a peer's `CONF_RDMA` results (RFC 5666 §6.2) say that a requester applies
/// ([`Connection::apply_peer_config`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerConfig {
    /// `maxcall_sendsize`: the largest inline call the peer accepts.
    pub max_inline_call: u32,
    /// `align`: the peer's receive-buffer alignment, for RDMA_MSGP padding.
    pub align: u32,
}

/// One connection's protocol core. See the module documentation.
pub struct Connection<R, P> {
    t: Transport,
    /// The RFC 8797 private data this end offers.
    local_pd: PrivateData,
    /// The extensions this end offers ([`ConnConfig::extensions`]).
    local_ext: Extensions,
    /// The characteristics offered with continuation.
    local_chars: TransportChars,
    /// Header limits, for telling calls from replies on a two-role connection.
    limits: Limits,
    req: R,
    resp: P,
}

impl Connection<RequesterHalf, NoResponder> {
    /// A requester for `cfg` over registered `pools`, with fast-registration slots
    /// `mrs` (each covering at least `cfg.large_buf_size` bytes) and a credit table
    /// shared with application threads. Receives are staged at once; nothing is sent
    /// before [`on_established`](Self::on_established).
    pub fn requester(
        cfg: &ConnConfig,
        pools: &CorePools,
        mrs: &[FastRegSlot],
        credits: Arc<CreditTable>,
    ) -> Result<Self, CoreError> {
        let half = RequesterHalf::new(cfg, pools, mrs, credits)?;
        Self::assemble(cfg, pools, cfg.sizes(Role::Requester), half, NoResponder)
    }

    /// A requester in [`RegMode::Persistent`]: no fast-registration slots; every chunk
    /// buffer must come from an arena registered with remote read and write access for
    /// the connection's protection domain (the driver registers its pools so).
    pub fn requester_persistent(
        cfg: &ConnConfig,
        pools: &CorePools,
        credits: Arc<CreditTable>,
    ) -> Result<Self, CoreError> {
        let half = RequesterHalf::new_persistent(cfg, pools, credits)?;
        Self::assemble(cfg, pools, cfg.sizes(Role::Requester), half, NoResponder)
    }
}

impl<S: Service> Connection<NoRequester, ResponderHalf<S>> {
    /// A responder for `cfg` over registered `pools`, serving calls with `service` and
    /// granting credits by `policy`. Receives are staged at once.
    pub fn responder(
        cfg: &ConnConfig,
        pools: &CorePools,
        service: S,
        policy: Arc<GrantPolicy>,
    ) -> Result<Self, CoreError> {
        let half = ResponderHalf::new(cfg, pools, service, policy)?;
        Self::assemble(cfg, pools, cfg.sizes(Role::Responder), NoRequester, half)
    }

    /// Stages a characteristics update (ROPT_XCHUPD, draft-dnoveck-rpcrdma-rtrext §8;
    /// DESIGN.md, "Characteristics updates") carrying this end's characteristics as
    /// they are now ([`local_chars`](Self::local_chars)), which replace those the
    /// requester had (calls it plans after reading it follow them). Sent through a
    /// reply context, into one of the receives a requester keeps beyond its credits;
    /// counted in `ResponderStats::chars_updates_sent`.
    pub fn send_chars_update(&mut self) -> Result<(), CharsUpdateError> {
        let chars = self.chars_update_ready()?;
        if self.resp.stage_chars_update(&mut self.t, chars) {
            Ok(())
        } else {
            Err(CharsUpdateError::Busy)
        }
    }
}

/// Why a characteristics update (ROPT_XCHUPD) could not be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CharsUpdateError {
    /// The connection is not established.
    #[error("connection is not established")]
    NotConnected,
    /// Continuation was not negotiated (the peer offered no extensions, or this end
    /// has them off): the peer would not understand RDMA_OPTIONAL.
    #[error("the peer did not negotiate transport characteristics")]
    NotNegotiated,
    /// No send buffer or send-queue entry is free now; try again after a poll.
    #[error("no send buffer or send-queue entry is free")]
    Busy,
}

impl<S: Service> Connection<RequesterHalf, ResponderHalf<S>> {
    /// A connection playing both roles (RFC 8167): calls go out through the requester
    /// half (fast registration with `mrs`, or persistent registration when `mrs` is
    /// `None`) and come in to `service`. The receive table and send queue are sized
    /// for both directions.
    pub fn both_roles(
        cfg: &ConnConfig,
        pools: &CorePools,
        mrs: Option<&[FastRegSlot]>,
        credits: Arc<CreditTable>,
        service: S,
        policy: Arc<GrantPolicy>,
    ) -> Result<Self, CoreError> {
        let req = match mrs {
            Some(mrs) => RequesterHalf::new(cfg, pools, mrs, credits)?,
            None => RequesterHalf::new_persistent(cfg, pools, credits)?,
        };
        let resp = ResponderHalf::new(cfg, pools, service, policy)?;
        let sizes = Sizes::both(&cfg.sizes(Role::Requester), &cfg.sizes(Role::Responder));
        Self::assemble(cfg, pools, sizes, req, resp)
    }
}

impl<S: Service> Connection<RequesterHalf, ResponderHalf<S>> {
    /// A forward requester that also serves its responder's backward-direction calls
    /// (RFC 8167) with `service`: the requester half as [`Connection::requester`] (or
    /// persistent when `mrs` is `None`) on `cfg`, the responder half on
    /// [`ConnConfig::backchannel`] (its own credits, granted by `policy`). Pools must be
    /// sized by [`ConnConfig::sizes_with_backchannel`] for [`Role::Requester`].
    pub fn requester_serving(
        cfg: &ConnConfig,
        pools: &CorePools,
        mrs: Option<&[FastRegSlot]>,
        credits: Arc<CreditTable>,
        service: S,
        policy: Arc<GrantPolicy>,
    ) -> Result<Self, CoreError> {
        let resp = ResponderHalf::new(&cfg.backchannel(), pools, service, policy)?;
        let sizes = cfg.sizes_with_backchannel(Role::Requester);
        Self::with_requester(cfg, pools, mrs, credits, resp, sizes)
    }

    /// A forward responder that can call its requester (RFC 8167): the responder half
    /// as [`Connection::responder`] on `cfg`, a backward-direction requester
    /// ([`RequesterHalf::new_backchannel`]) on [`ConnConfig::backchannel`] with
    /// `credits`. Calls go out through [`Service::backchannel`] (see
    /// [`run_backchannel`](Self::run_backchannel)). Pools must be sized by
    /// [`ConnConfig::sizes_with_backchannel`] for [`Role::Responder`].
    pub fn responder_calling(
        cfg: &ConnConfig,
        pools: &CorePools,
        service: S,
        policy: Arc<GrantPolicy>,
        credits: Arc<CreditTable>,
    ) -> Result<Self, CoreError> {
        let req = RequesterHalf::new_backchannel(&cfg.backchannel(), pools, credits)?;
        let resp = ResponderHalf::new(cfg, pools, service, policy)?;
        Self::assemble(
            cfg,
            pools,
            cfg.sizes_with_backchannel(Role::Responder),
            req,
            resp,
        )
    }
}

/// Where a service makes calls to its peer on a two-role connection
/// ([`Service::backchannel`]). Outcomes come back through
/// [`Service::backchannel_outcome`] with the tag given here.
pub struct Backchannel<'a> {
    t: &'a mut Transport,
    req: &'a mut RequesterHalf,
    now: Instant,
}

impl Backchannel<'_> {
    /// A send buffer for a call message: inline-sized, as every call is on this
    /// direction of a forward responder (RFC 8167 §5).
    pub fn alloc_msg(&self) -> Result<RegBuf, super::regbuf::RegBufError> {
        RegBuf::from_pool(self.req.send_pool())
    }

    /// Submits a call; its outcome comes to [`Service::backchannel_outcome`] with
    /// `tag`. A call that would need a chunk is refused
    /// ([`SubmitRefusal::NeedsChunks`](crate::requester::SubmitRefusal::NeedsChunks)).
    pub fn submit(&mut self, req: CallRequest, tag: u64) -> Result<(), SubmitError> {
        self.req.submit(self.t, req, tag, self.now)
    }

    /// True while calls can be submitted (the connection is established).
    pub fn is_open(&self) -> bool {
        self.t.state == ConnState::Established
    }

    /// Credits a call could take now.
    pub fn available(&self) -> u32 {
        self.req.credits().snapshot().available
    }

    /// The backward direction's counters.
    pub fn stats(&self) -> RequesterStats {
        self.req.stats()
    }
}

impl<P: ResponderRole> Connection<RequesterHalf, P> {
    /// Takes back a received buffer the application is done with (an outcome's reply):
    /// staged again as a receive where it lies when its slot is still free (the slot a
    /// requester leaves for it: `RecvTable::short_by_at_most`), else through the receive
    /// table's cache, which restocks the receives from it, rather than through the
    /// pool's shared ring. A buffer of another pool (a Reply chunk's) goes to its own
    /// pool.
    #[inline(always)]
    pub(crate) fn recycle_recv(&mut self, buf: RegBuf) {
        if self.t.state == ConnState::Established {
            // A receive buffer may go straight back into the slot its reply left.
            self.t.recvs.give_back(&mut self.t.outbox, buf);
        } else {
            self.t.recvs.recycle(buf);
        }
    }

    /// A forward requester (fast registration with `mrs`, persistent without) beside
    /// the responder slot `resp`, over queues of `sizes`.
    pub(crate) fn with_requester(
        cfg: &ConnConfig,
        pools: &CorePools,
        mrs: Option<&[FastRegSlot]>,
        credits: Arc<CreditTable>,
        resp: P,
        sizes: Sizes,
    ) -> Result<Self, CoreError> {
        let req = match mrs {
            Some(mrs) => RequesterHalf::new(cfg, pools, mrs, credits)?,
            None => RequesterHalf::new_persistent(cfg, pools, credits)?,
        };
        Self::assemble(cfg, pools, sizes, req, resp)
    }
}

impl<R: RequesterRole, P: ResponderRole> Connection<R, P> {
    fn assemble(
        cfg: &ConnConfig,
        pools: &CorePools,
        sizes: Sizes,
        req: R,
        resp: P,
    ) -> Result<Self, CoreError> {
        // The requester's offer wins on a two-role connection: persistent chunk keys
        // must never be invalidated by the peer.
        let local_pd = match req.local_pd() {
            Some(pd) => pd,
            None => cfg
                .private_data()
                .map_err(|e| CoreError::Config(super::config::ConfigError::InlineSize(e)))?,
        };
        let mut t = Transport::new(
            sizes.sq_depth,
            sizes.rq_depth,
            sizes.max_send_sge,
            &pools.recv,
            // Only calls go unsignaled: a responder alone keeps no ledger.
            SendLedger::new(
                sizes.sq_depth,
                sizes.slots.min(sizes.send_bufs),
                if R::PRESENT { cfg.signal_every } else { 1 },
            ),
        );
        // Send-based DDP (DESIGN.md, "Send-based DDP"): a responder alone (for calls)
        // or a requester alone (for replies) posts scatter receives matching the
        // structure it advertises.
        if P::PRESENT != R::PRESENT && cfg.scatter_receives() {
            let Transport { recvs, outbox, .. } = &mut t;
            recvs.scatter(
                outbox,
                &pools.large,
                cfg.advertised_recv(),
                cfg.ddp_segment_len(),
            );
        }
        Ok(Connection {
            t,
            local_pd,
            local_ext: cfg.offered_extensions(),
            local_chars: cfg.local_chars(),
            limits: cfg.limits,
            req,
            resp,
        })
    }

    /// The private data to offer when connecting or accepting: the RFC 8797 message,
    /// then the extension advertisement when [`ConnConfig::extensions`] is on.
    pub fn local_private_data(&self) -> Advertisement {
        // The receive buffer structure of the receives posted now (none once they come
        // from a shared receive queue).
        let chars = self.local_chars();
        Advertisement::with_chars(&self.local_pd, self.offered_extensions(), &chars)
            .unwrap_or(Advertisement::DEFAULT)
    }

    /// The private data to offer when connecting, in at most `max` octets (the
    /// provider's connect limit, `PrivateDataLimits::connect`): when the receive buffer
    /// structure makes it longer (an InfiniBand REQ carries 56 octets), the structure is
    /// left out and sent in a characteristics update (ROPT_XCHUPD) once the connection
    /// is established with continuation; replies are not asked to use the segments
    /// before (DESIGN.md, "Send-based DDP replies").
    pub fn connect_private_data(&mut self, max: usize) -> Advertisement {
        let a = self.local_private_data();
        if a.len() <= max || self.t.recvs.segments.is_none() {
            self.t.recv_structure_sent = self.t.recvs.segments.is_some();
            return a;
        }
        // The structure goes in a characteristics update once established
        // (ROPT_XCHUPD; DESIGN.md, "Characteristics updates"), when continuation is
        // negotiated; until then (and if never) the peer does not know it.
        self.t.recv_structure_sent = false;
        self.t.chars_update_pending = Some(TransportChars {
            recv_buf: self.t.recvs.segments.as_ref().map(|s| s.structure()),
            ..self.local_chars
        });
        let chars = TransportChars {
            recv_buf: None,
            ..self.local_chars
        };
        Advertisement::with_chars(&self.local_pd, self.offered_extensions(), &chars)
            .unwrap_or(Advertisement::DEFAULT)
    }

    /// What this end offers: [`ConnConfig::extensions`], but nothing from a responder
    /// that cannot expose replies (no fast-registration slots on its device), so a peer
    /// never leaves out a Reply chunk counting on a Read chunk that cannot come.
    fn offered_extensions(&self) -> Extensions {
        // A forward requester with a backchannel service offers as any requester: the
        // backward direction is inline only (RFC 8167 §5), it never exposes a reply.
        Extensions {
            reply_read_chunks: self.local_ext.reply_read_chunks
                && (self.resp.can_expose() || self.req.forward()),
            ..self.local_ext
        }
    }

    /// The extensions both peers offered (none before the connection is established,
    /// or, on the passive side, before [`on_connect_request`](Self::on_connect_request)).
    pub fn extensions(&self) -> Extensions {
        self.t.extensions
    }

    /// The peer's round-trip-reduction transport characteristics, fixed at
    /// establishment (on the passive side already at
    /// [`on_connect_request`](Self::on_connect_request)); defaults unless both peers
    /// negotiated continuation.
    pub fn peer_chars(&self) -> TransportChars {
        self.t.peer_chars
    }

    /// The transport characteristics this end advertises now: its configured ones
    /// and the receive buffer structure of the receives it posts (none once they come
    /// from a shared receive queue).
    pub fn local_chars(&self) -> TransportChars {
        TransportChars {
            recv_buf: self.t.recvs.segments.as_ref().map(|s| s.structure()),
            ..self.local_chars
        }
    }

    /// Checks a characteristics update may go now, and returns what it carries.
    fn chars_update_ready(&self) -> Result<TransportChars, CharsUpdateError> {
        if self.t.state != ConnState::Established {
            return Err(CharsUpdateError::NotConnected);
        }
        // Only after continuation was negotiated: a version-1-only peer never sees it.
        if !self.t.extensions.continuation {
            return Err(CharsUpdateError::NotNegotiated);
        }
        Ok(self.local_chars())
    }

    /// The connection state.
    #[inline]
    pub fn state(&self) -> ConnState {
        self.t.state
    }

    /// The negotiated inline thresholds (RFC 8166 defaults until established, or on the
    /// passive side until [`on_connect_request`](Self::on_connect_request)).
    pub fn thresholds(&self) -> InlineThresholds {
        self.t.thresholds
    }

    /// Applies what the peer's Connection Configuration Protocol results said (RFC 5666
    /// §6.2, `CONF_RDMA`), for this connection (a new connection starts from its private
    /// data again): calls are sent inline only up to the peer's `maxcall_sendsize`
    /// (never above what was negotiated, never below RFC 8166's 1024-octet minimum, which
    /// every peer must receive), and its `align`, when a power of two above 1, lets
    /// calls that allow it go as RDMA_MSGP. Returns the thresholds now in force.
    pub fn apply_peer_config(&mut self, peer: PeerConfig) -> InlineThresholds {
        let t = &mut self.t;
        t.thresholds.send = t
            .thresholds
            .send
            .min(peer.max_inline_call.max(crate::limits::MIN_INLINE_SIZE));
        t.peer_align = (peer.align > 1 && peer.align.is_power_of_two()).then_some(peer.align);
        t.thresholds
    }

    /// The peer's receive-buffer alignment in force for RDMA_MSGP, if any
    /// ([`apply_peer_config`](Self::apply_peer_config)).
    pub fn peer_align(&self) -> Option<u32> {
        self.t.peer_align
    }

    /// The passive side accepts a connect request that carried `peer_private_data`:
    /// what the connection negotiates from it (inline thresholds, extensions, the peer's
    /// characteristics) is in force from now on for what arrives, while the connection
    /// is still connecting. The requester may send as soon as it has the accept, and
    /// its calls can reach this end before the CM reports establishment (the shm
    /// executor runs in the completion-queue poll, a verbs ESTABLISHED event can come
    /// after the first Sends): a call that asks for its reply by send-based DDP must be
    /// judged by the requester's receive buffer structure, not by the defaults
    /// (DESIGN.md, "Calls before establishment"). Nothing is sent before
    /// [`on_established`](Self::on_established), which negotiates the same again.
    pub fn on_connect_request(&mut self, peer_private_data: &[u8]) {
        if self.t.state == ConnState::Connecting {
            self.negotiate(peer_private_data);
        }
    }

    /// Sets what `peer_private_data` and this end's offer negotiate (RFC 8797 §5:
    /// absent or foreign data means RFC 8166 defaults).
    fn negotiate(&mut self, peer_private_data: &[u8]) {
        let local_ext = self.offered_extensions();
        let t = &mut self.t;
        t.thresholds = InlineThresholds::from_received(Some(&self.local_pd), peer_private_data);
        // Extensions only ride along with a valid version 1 message (they extend it).
        let peer_v1 = matches!(find_private_data(peer_private_data), Ok(Some(_)));
        let peer_ext = if peer_v1 {
            Extensions::find(peer_private_data)
        } else {
            Extensions::NONE
        };
        t.extensions = Extensions::negotiate(local_ext, peer_ext);
        // The peer's characteristics (draft-dnoveck-rpcrdma-rtrext §8): what it sent
        // with continuation, else the defaults (one transmission each way).
        // An update that came before establishment (ROPT_XCHUPD) supersedes them; it is
        // kept until then, as this runs again at establishment.
        t.peer_chars = if t.extensions.continuation {
            t.early_chars
                .unwrap_or_else(|| Extensions::find_chars(peer_private_data))
        } else {
            TransportChars::DEFAULT
        };
    }

    /// The connection manager reported the connection established; `peer_private_data`
    /// is what the peer sent with its connect request or accept (RFC 8797 §5: absent
    /// or foreign data means RFC 8166 defaults). Calls that arrived before this wait
    /// for it.
    pub fn on_established(&mut self, peer_private_data: &[u8], now: Instant) {
        if self.t.state != ConnState::Connecting {
            return;
        }
        self.negotiate(peer_private_data);
        let t = &mut self.t;
        t.early_chars = None;
        t.state = ConnState::Established;
        self.req.on_established(t, now);
        self.resp.on_established(t);
        let _ = t.events.push_back(ConnEvent::Established(t.thresholds));
    }

    /// The connection ended (a CM disconnect, or a failure the driver cannot name).
    pub fn on_disconnected(&mut self) {
        self.fail(CloseReason::Disconnected);
    }

    /// The connect request was rejected ([`CloseReason::Rejected`]) or got no answer
    /// ([`CloseReason::Unreachable`]), or the connection ended for `reason`: the
    /// connection drains as for [`on_disconnected`](Self::on_disconnected), with the
    /// reason the connection manager gave, so a client can tell a refused connect from
    /// a lost connection.
    pub fn on_cm_close(&mut self, reason: CloseReason) {
        self.fail(reason);
    }

    /// Why the connection is closing or closed (`None` while it is up or being made).
    pub fn close_reason(&self) -> Option<CloseReason> {
        self.t.close_reason
    }

    /// The provider saw the peer's abort
    /// ([`QueuePair::peer_abort`](crate::fabric::QueuePair::peer_abort)): it becomes the
    /// close reason, over the failed work request or disconnect it caused, and calls
    /// that fail from now on carry it
    /// ([`TransportError::PeerAborted`](crate::requester::TransportError::PeerAborted)).
    pub fn on_peer_abort(&mut self, why: PeerAbort) {
        if self.t.state == ConnState::Closed {
            return;
        }
        // Failing first runs the halves' shutdown when the Terminate is the first news
        // of trouble; otherwise it only replaces the reason it caused.
        self.fail(CloseReason::PeerAborted(why));
        self.t.peer_aborted(why);
    }

    /// Starts an orderly local close: queued calls fail now, calls in flight fail once
    /// the driver's disconnect flushes them.
    pub fn close(&mut self) {
        if matches!(self.t.state, ConnState::Established | ConnState::Connecting) {
            let _ = self
                .t
                .events
                .push_back(ConnEvent::DisconnectRequested(CloseReason::Local));
        }
        self.fail(CloseReason::Local);
    }

    /// Stops new work and starts draining for `reason`; both halves let go of what
    /// never reached the wire.
    fn fail(&mut self, reason: CloseReason) {
        if matches!(self.t.state, ConnState::Draining | ConnState::Closed) {
            return;
        }
        self.t.fail(reason);
        self.after_failure();
    }

    /// A half may fail the connection on its own (a keepalive gone unanswered, a
    /// protocol violation): the other half learns of it here, after each input, and
    /// a drained connection closes.
    #[inline(always)]
    fn settle(&mut self) {
        if self.t.state == ConnState::Draining {
            self.after_failure();
            self.maybe_close();
        }
    }

    #[cold]
    fn after_failure(&mut self) {
        self.req.on_fail(&mut self.t);
        self.resp.on_fail(&mut self.t);
    }

    /// Once draining has nothing outstanding: the halves release everything, and the
    /// connection is closed.
    #[cold]
    fn maybe_close(&mut self) {
        if !self.t.drained() {
            return;
        }
        self.req.close_drained(&mut self.t);
        self.resp.close_drained(&mut self.t);
        self.t.recvs.flush_cache();
        self.t.state = ConnState::Closed;
        let reason = self.t.close_reason.unwrap_or(CloseReason::Disconnected);
        let _ = self.t.events.push_back(ConnEvent::Closed(reason));
    }

    /// The next connection event.
    pub fn poll_event(&mut self) -> Option<ConnEvent> {
        self.t.events.pop_front()
    }

    /// When [`handle_timeout`](Self::handle_timeout) next has something to do.
    #[inline]
    pub fn next_timeout(&self) -> Option<Instant> {
        self.req.next_timeout(&self.t)
    }

    /// Fails calls whose deadline passed, and starts the keepalive probe when due.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.req.handle_timeout(&mut self.t, now);
        self.settle();
    }

    /// Feeds one completion.
    #[inline]
    pub fn handle_completion(&mut self, wc: &Completion, now: Instant) {
        // Unsignaled Sends before a send-queue completion executed and retire with it
        // (`core/signal.rs`): each is fed as the success it reported nothing for.
        if self.t.ledger.enabled() && (wc.wr_id >> 60) != WrKind::Recv as u64 {
            self.retire_implied(wc, now);
        }
        self.handle_one(wc, now);
    }

    /// Feeds a batch of completions in order, each as
    /// [`handle_completion`](Self::handle_completion) would; `on_failure` runs just
    /// before a failed one is fed (a driver asks its queue pair whether the peer
    /// aborted). One call per CQ poll instead of one per completion: at depth a poll
    /// reaps 32, and the per-call entry and exit of this large function cost about 18
    /// instructions a completion (four completions an RPC; `perf/insns.sh`'s rate
    /// region).
    #[inline(never)]
    pub fn handle_completions(
        &mut self,
        wcs: &[Completion],
        now: Instant,
        mut on_failure: impl FnMut(&mut Self),
    ) {
        for wc in wcs {
            if !wc.status.is_success() {
                on_failure(self);
            }
            if self.t.ledger.enabled() && (wc.wr_id >> 60) != WrKind::Recv as u64 {
                self.retire_implied(wc, now);
            }
            self.handle_one(wc, now);
        }
    }

    /// Takes `wc`'s request off the send ledger, first retiring the unsignaled ones
    /// before it as successes. Those are calls' Sends (nothing else goes unsignaled),
    /// each retired by the requester directly (its slot's count of work requests and
    /// the send-queue room), without a completion made up for it and fed through the
    /// dispatch; anything else found there (never) takes the general way. Out of line:
    /// one send-queue completion in `signal_every` comes here.
    #[inline(never)]
    fn retire_implied(&mut self, wc: &Completion, now: Instant) {
        let Some(before) = self.t.ledger.position(wc.wr_id, wc.status.is_success()) else {
            return;
        };
        let mut given = 0;
        for i in 0..before {
            let earlier = self.t.ledger.peek(i);
            if earlier >> 60 == WrKind::CallSend as u64 {
                given += u32::from(self.req.retire_call_send(earlier as u32));
            } else {
                // Anything else (never): fed as the success it reported nothing for.
                self.handle_one_outlined(&implied_success(earlier, wc.qp_num), now);
            }
        }
        self.t.sq.give(given);
        self.t.ledger.drop_front(before + 1);
    }

    /// [`handle_one`](Self::handle_one) as a call, for the rare paths.
    #[inline(never)]
    fn handle_one_outlined(&mut self, wc: &Completion, now: Instant) {
        self.handle_one(wc, now);
    }

    /// [`handle_completion`](Self::handle_completion) of one request.
    ///
    /// The kinds every call completes (a receive, a call's Send on a requester, a
    /// reply's Send on a responder) are told apart by their four bits first, each then
    /// dispatched with its kind known where it is compiled: the general decode checks
    /// the kind against every value and builds a `WrId` that the dispatch matches on
    /// again (about 16 instructions a completion, four completions an RPC). Anything
    /// else is decoded and dispatched as before; the same handler runs either way.
    #[inline(always)]
    fn handle_one(&mut self, wc: &Completion, now: Instant) {
        let raw = wc.wr_id;
        let kind = raw >> 60;
        if kind == WrKind::Recv as u64 {
            self.handle_id(WrId::of_raw(WrKind::Recv, raw), wc, now);
        } else if R::PRESENT && kind == WrKind::CallSend as u64 {
            self.handle_id(WrId::of_raw(WrKind::CallSend, raw), wc, now);
        } else if P::PRESENT && kind == WrKind::ReplySend as u64 {
            self.handle_id(WrId::of_raw(WrKind::ReplySend, raw), wc, now);
        } else if let Ok(id) = WrId::decode(raw) {
            self.handle_id(id, wc, now);
        } else {
            self.t.stray_completions += 1;
        }
    }

    /// [`handle_one`](Self::handle_one) of a request whose id decoded as `id`.
    #[inline(always)]
    fn handle_id(&mut self, id: WrId, wc: &Completion, now: Instant) {
        if !wc.status.is_success() {
            self.fail(CloseReason::WorkRequestFailed(wc.status));
        }
        let t = &mut self.t;
        match id.kind {
            WrKind::Recv => {
                let Some(buf) = t.recvs.complete(id.slot, wc.byte_len) else {
                    t.stray_completions += 1;
                    return;
                };
                self.deliver(buf, wc, now);
            }
            WrKind::CallSend
            | WrKind::FastReg
            | WrKind::LocalInv
            | WrKind::ReplyPull
            | WrKind::DoneSend => self.req.on_send_completion(t, id, wc),
            WrKind::ChunkRead
            | WrKind::ChunkWrite
            | WrKind::ReplySend
            | WrKind::ReplyReg
            | WrKind::ReplyInv => self.resp.on_send_completion(t, id, wc),
            WrKind::Barrier => t.sq.give(1),
        }
        self.settle();
    }

    /// A received message (its buffer `buf`, completion `wc`) to the half it is for.
    #[inline(always)]
    fn deliver(&mut self, buf: RegBuf, wc: &Completion, now: Instant) {
        let t = &mut self.t;
        if !wc.status.is_success() {
            t.recvs.recycle(buf);
        } else if !P::PRESENT
            || (R::PRESENT
                && direction(
                    buf.as_slice(),
                    &self.limits,
                    t.extensions.reply_read_chunks,
                    |x| self.req.awaits_reply(x),
                ) == Direction::Reply)
        {
            self.req.on_recv(t, buf, wc.invalidated_rkey, now);
        } else {
            self.resp.on_recv(t, buf, wc.invalidated_rkey);
        }
    }

    /// Takes its receives from a shared receive queue from now on (a poll group's,
    /// which posts them and hands each one in with
    /// [`handle_shared_recv`](Self::handle_shared_recv)): the receives staged at
    /// construction are dropped, none are staged again, and replies grant at most
    /// `share` credits (at least 1) until [`set_receive_share`](Self::set_receive_share)
    /// moves it, within the room the queue's `ledger` leaves. Call before the
    /// connection's first post and before its private data is built.
    ///
    /// The connection's request-group limit (XCHAR_REQRXLIM: a requester with nothing
    /// in flight may send a continuation group that long whatever its grant) is lowered
    /// to `floor` (at least 1), and the ledger must
    /// [`admit`](SrqLedger::admit) that many receives for it (1 without continuation)
    /// plus `done`, the receives beyond its credits that its RDMA_DONEs may take.
    /// Returns false, changing nothing, when they do not fit: the connection then keeps
    /// receives of its own. It returns what it holds in the ledger when dropped.
    pub fn use_shared_receives(
        &mut self,
        share: u32,
        ledger: &std::sync::Arc<SrqLedger>,
        floor: u32,
        done: u32,
    ) -> bool {
        let limit = self.local_chars.req_rx_limit.min(floor.max(1));
        // Without continuation offered no group can come: the first call's one credit.
        let floor = if self.local_ext.continuation {
            limit
        } else {
            1
        };
        if !ledger.admit(floor + done) {
            return false;
        }
        self.local_chars.req_rx_limit = limit;
        let exposure = Exposure::new(ledger.clone(), share, floor, done);
        let t = &mut self.t;
        t.recvs.share(&mut t.outbox, exposure);
        true
    }

    /// The connection has been idle for the server's idle interval (nothing received,
    /// no call in progress): on a shared receive queue, a smaller grant its replies
    /// carried is taken as read and the receives the larger one held go back to the
    /// queue's ledger (`core/srq_ledger.rs`).
    pub fn settle_idle_grant(&mut self) {
        self.t.recvs.settle_idle();
    }

    /// The receives a shared receive queue keeps for this connection: the most its
    /// next replies grant (RFC 8166 §3.3: never more than can be received).
    pub fn set_receive_share(&mut self, share: u32) {
        self.t.recvs.set_share(share);
    }

    /// A receive of a shared receive queue completed for this connection: `buf` (the
    /// group's buffer, returned to its pool when the message is done with) holds
    /// `wc.byte_len` octets of the message.
    pub fn handle_shared_recv(&mut self, mut buf: RegBuf, wc: &Completion, now: Instant) {
        if !wc.status.is_success() {
            self.fail(CloseReason::WorkRequestFailed(wc.status));
        }
        let len = (wc.byte_len as usize).min(buf.capacity());
        let _ = buf.set_len(len);
        self.deliver(buf, wc, now);
        self.settle();
    }

    /// After the provider refused a barrier while draining: the unsignaled Sends left
    /// are retired as executed (a queue pair that takes no requests reports its
    /// flushes on its own), so the connection can close.
    #[cold]
    fn retire_unreported(&mut self, now: Instant) {
        while let Some(id) = self.t.ledger.take_unreported() {
            self.handle_one_outlined(&implied_success(id, 0), now);
        }
    }

    /// Per-poll work before posting: start queued calls, resume replies that waited
    /// for resources, restock receives; finish closing once drained.
    #[inline]
    pub fn prepare(&mut self, now: Instant) {
        match self.t.state {
            ConnState::Established => {
                self.req.prepare(&mut self.t, now);
                self.resp.prepare(&mut self.t, now);
                self.t.barrier_if_due(now);
                // A connection that only makes calls leaves the slots of the replies
                // it handed out for those replies' buffers, which the caller gives back
                // (`poll_outcome_with`) and which are staged again as they are, instead
                // of ones taken from the cache now and those cached after; it restocks
                // before it next sends, so every Send goes out with every receive
                // posted (`RecvTable::short_by_at_most`).
                if P::PRESENT
                    || self.t.outbox.send_len() != 0
                    || !self.t.recvs.short_by_at_most(self.req.outcomes_waiting())
                {
                    self.t.recvs.refill(&mut self.t.outbox);
                }
            }
            ConnState::Connecting => self.t.recvs.refill(&mut self.t.outbox),
            ConnState::Draining => {
                self.t.barrier_if_due(now);
                self.retire_unreported(now);
                self.maybe_close();
            }
            ConnState::Closed => {}
        }
    }

    /// The poll's work requests: runs [`prepare`](Self::prepare), then hands out
    /// everything staged (`None` when nothing is). The driver posts the receive chain,
    /// then the send chain, and reports with [`on_posted`](Self::on_posted) or
    /// [`on_post_failed`](Self::on_post_failed).
    #[inline]
    pub fn poll_transmit(&mut self, now: Instant) -> Option<Transmit<'_>> {
        self.prepare(now);
        Transmit::of(&self.t.outbox)
    }

    /// The driver posted the whole [`Transmit`]: its requests now complete through
    /// [`handle_completion`](Self::handle_completion).
    #[inline]
    pub fn on_posted(&mut self) {
        self.t.outbox.clear();
    }

    /// The provider refused part of the [`Transmit`]. A refused post leaves the queue
    /// pair as it was, so the connection fails (a disconnect is requested); what did
    /// not go out is accounted as flushed, so every call still gets exactly one outcome.
    pub fn on_post_failed(&mut self, failure: PostFailure, now: Instant) {
        settle_refused(self, failure, now);
    }

    /// Calls in progress in either direction: calls started whose outcome is not yet
    /// delivered (plus timed-out calls still holding a credit), and calls received and
    /// not yet fully answered.
    pub fn active(&self) -> usize {
        self.req.active() + self.resp.active()
    }

    /// Work handed to the queue pair and not yet complete (what `Draining` waits for).
    pub fn outstanding(&self) -> super::Outstanding {
        self.t.outstanding()
    }

    /// Receives posted (or staged to be) and not yet completed: the depth of the
    /// receive queue, for operators.
    pub fn recvs_posted(&self) -> u32 {
        self.t.recvs.posted()
    }
}

impl<P: ResponderRole> Connection<RequesterHalf, P> {
    /// Submits a call tagged `tag` (returned in its outcome). It starts at once if
    /// resources allow, else waits in order.
    // Never inlined (and `RequesterHalf::submit` inlined into it): a by-value request
    // is handed on as a pointer to the caller's copy, where inlining would copy it (a
    // few hundred octets) into a local of the inlined body first.
    #[inline(never)]
    pub fn submit(&mut self, req: CallRequest, tag: u64, now: Instant) -> Result<(), SubmitError> {
        let r = self.req.submit(&mut self.t, req, tag, now);
        self.settle();
        r
    }

    /// The next finished call.
    #[inline]
    pub fn poll_outcome(&mut self) -> Option<Outcome> {
        self.req.poll_outcome()
    }

    /// True when the requester has no call started or waiting (see
    /// `conn::Requester::submit_at`, which posts a call submitted then at once).
    #[inline]
    pub(crate) fn requester_idle(&self) -> bool {
        self.req.idle()
    }

    /// True when Sends are staged and not yet handed to the driver (see
    /// `conn::Requester::poll`, which posts them before it handles a completion batch).
    #[inline(always)]
    pub(crate) fn sends_staged(&self) -> bool {
        self.t.outbox.send_len() != 0
    }

    /// The next finished call, handed to `f` where it lies; then its reply buffer goes
    /// back to the receive table, staged again as a receive when its slot is free (as
    /// [`recycle_recv`](Self::recycle_recv)), and
    /// the outcome is dropped in place. Returns what `f` returned and the call message
    /// buffer, for the driver's send-buffer cache.
    // Always inlined into the driver's `poll_outcome_with` (itself inlined into the
    // caller's loop): once per outcome, and the call's register saves cost about 10
    // instructions an outcome.
    #[inline(always)]
    pub(crate) fn poll_outcome_with<T>(
        &mut self,
        f: impl FnOnce(&mut Outcome) -> T,
    ) -> Option<(T, Option<RegBuf>)> {
        let o = self.req.front_outcome()?;
        let r = f(o);
        let msg = o.msg.take();
        let reply = o.reply.take();
        // Asked of the outcome in hand, not of the front looked up again.
        let bare = super::requester::owns_nothing(o);
        self.req.drop_front_outcome(bare);
        if let Some(reply) = reply {
            self.recycle_recv(reply.buf);
        }
        Some((r, msg))
    }

    /// Starts the health check (RFC 8267 §6.7.2): an RPC NULL on the reserved credit.
    /// Its result arrives as [`ConnEvent::ProbeAnswered`] or [`ConnEvent::PeerDead`].
    pub fn health_check(&mut self, now: Instant) -> Result<(), ProbeError> {
        self.req.health_check(&mut self.t, now)
    }

    /// Stages a characteristics update (ROPT_XCHUPD, draft-dnoveck-rpcrdma-rtrext §8;
    /// DESIGN.md, "Characteristics updates") carrying this end's characteristics as
    /// they are now ([`local_chars`](Self::local_chars)), which replace those the
    /// responder had. Outside the credit window, like RDMA_DONE; counted in
    /// `RequesterStats::chars_updates_sent`. On a connection playing both roles the
    /// requester half sends it.
    pub fn send_chars_update(&mut self) -> Result<(), CharsUpdateError> {
        let chars = self.chars_update_ready()?;
        if self.req.stage_chars_update(&mut self.t, chars) {
            self.t.recv_structure_sent |= chars.recv_buf.is_some();
            Ok(())
        } else {
            Err(CharsUpdateError::Busy)
        }
    }

    /// The credit table (shareable with application threads).
    pub fn credits(&self) -> &Arc<CreditTable> {
        self.req.credits()
    }

    /// Test hook (feature `testing`): stop or resume sending RDMA_DONE after pulling a
    /// responder-provided Read chunk, to play a requester that neglects it.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn set_drop_dones(&mut self, on: bool) {
        self.req.set_drop_dones(on);
    }

    /// Test hook (feature `testing`): the first segment of the last responder-provided
    /// Read chunk pulled.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn last_pulled_segment(&self) -> Option<crate::wire::header::Segment> {
        self.req.last_pulled_segment()
    }

    /// Resolves the requester's settings that depend on the device
    /// (`DeviceCaps::rdma_round_trip`: where send-based DDP pays).
    pub(crate) fn apply_device(&mut self, rdma_round_trip: bool) {
        self.req.apply_device(rdma_round_trip);
    }

    /// The largest bulk items the requester moves by send-based DDP, (call arguments,
    /// reply results), resolved for the device (`ConnConfig::send_ddp_max`).
    pub fn send_ddp_max(&self) -> (u32, u32) {
        self.req.send_ddp_max()
    }

    /// Test hook (feature `testing`): receives this connection staged again with the
    /// buffer their message came in (`RecvTable::repost`: a served call's on a
    /// responder, a reply's given back on a requester), rather than one from the cache.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn recvs_reposted_in_place(&self) -> u64 {
        self.t.recvs.reposted_in_place
    }

    /// Test hook (feature `testing`): replies the requester's plain path took (a
    /// chunkless reply to an inline chunkless call, `core/requester/plain.rs`).
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn plain_replies(&self) -> u64 {
        self.req.plain_replies
    }

    /// Test hook (feature `testing`): the last ROPT_XMTERR the requester received.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn last_transmit_error(&self) -> Option<crate::wire::rtr::XmtErr> {
        self.req.last_transmit_error()
    }

    /// How chunk memory is registered.
    pub fn registration(&self) -> RegMode {
        self.req.registration()
    }

    /// Calls queued for resources.
    pub fn queued(&self) -> usize {
        self.req.queued()
    }

    /// Where the requester's XID sequence stands (see [`Self::continue_xids`]).
    pub(crate) fn xid_sequence(&self) -> u32 {
        self.req.xid_sequence()
    }

    /// Continues the XID sequence of the core this one replaces, so a requester never
    /// reuses an XID across its connections.
    pub(crate) fn continue_xids(&mut self, seq: u32) {
        self.req.continue_xids(seq);
    }

    /// The requester half's counters.
    pub fn requester_stats(&self) -> RequesterStats {
        let mut s = self.req.stats();
        s.recv_starved = self.t.recvs.starved;
        s.outbox_overflows = self.t.outbox_overflows;
        s.stray_completions += self.t.stray_completions;
        s
    }
}

impl<R: RequesterRole, S: Service> Connection<R, ResponderHalf<S>> {
    /// Lets the service make backward-direction calls (RFC 8167) on a forward
    /// responder with a requester half: hands it every finished call
    /// ([`Service::backchannel_outcome`]), then asks it for new ones
    /// ([`Service::backchannel`]). Nothing on a one-role responder. A driver runs it
    /// once per poll, after the completions.
    #[inline(always)]
    pub fn run_backchannel(&mut self, now: Instant) {
        if R::PRESENT {
            self.req
                .run_backchannel(&mut self.t, self.resp.service_mut(), now);
            self.settle();
        }
    }

    /// The grant policy.
    pub fn policy(&self) -> &Arc<GrantPolicy> {
        self.resp.policy()
    }

    /// The service.
    pub fn service(&self) -> &S {
        self.resp.service()
    }

    /// The service, writable.
    pub fn service_mut(&mut self) -> &mut S {
        self.resp.service_mut()
    }

    /// Returns the buffers parked in this connection's receive and large-buffer caches
    /// to their pools' shared rings, where a pool can release their memory
    /// (`Pool::release_free`): what a server does for an idle connection. The caches
    /// refill from the rings on their next use.
    pub fn flush_pool_caches(&mut self) {
        self.flush_caches();
    }

    /// Rewrites local keys by `keys` in every request staged (now and later): a
    /// connection drawing from a poll group's pools, each arena registered in the
    /// connection's own domain (`core/outbox.rs`, `LocalKeyMap`).
    pub(crate) fn set_local_key_map(&mut self, keys: super::outbox::LocalKeyMap) {
        self.t.outbox.set_key_map(keys);
    }

    fn flush_caches(&mut self) {
        self.t.recvs.flush_cache();
        self.resp.flush_cache();
    }

    /// The address of every receive buffer staged or posted now: where a driver whose
    /// provider places messages only during its own polls may release their pages
    /// while the connection is idle (`DeviceCaps::places_in_poll`).
    pub fn for_each_posted_receive(&self, mut f: impl FnMut(u64)) {
        for b in self.t.recvs.posted_bufs() {
            f(b.addr());
        }
    }

    /// Gives the responder half fast-registration slots to expose replies in
    /// responder-provided Read chunks (one reply per slot; key generation bytes from
    /// `seed`). The driver keeps the slots' handles and drops them once the connection
    /// has closed. Without slots, a reply too large for what the requester offered gets
    /// ERR_CHUNK.
    pub fn set_reply_mrs(&mut self, slots: &[FastRegSlot], seed: u64) {
        self.resp.set_reply_mrs(slots, seed);
    }

    /// True while a call of the responder half waits for a header buffer from a poll
    /// group's pool (`ResponderHalf::waits_for_header`): its driver must run
    /// [`prepare`](Self::prepare) again though no completion came.
    pub fn waits_for_header(&self) -> bool {
        self.resp.waits_for_header()
    }

    /// The responder half's counters.
    pub fn responder_stats(&self) -> ResponderStats {
        let mut s = self.resp.stats();
        s.recv_starved = self.t.recvs.starved;
        s.outbox_overflows = self.t.outbox_overflows;
        s.stray_completions += self.t.stray_completions;
        s
    }
}

impl<R: RequesterRole, P: ResponderRole> Transmitter for Connection<R, P> {
    #[inline(always)]
    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit<'_>> {
        Connection::poll_transmit(self, now)
    }
    #[inline(always)]
    fn on_posted(&mut self) {
        Connection::on_posted(self)
    }
    fn on_post_failed(&mut self, failure: PostFailure, now: Instant) {
        Connection::on_post_failed(self, failure, now)
    }
}

impl<R: RequesterRole, P: ResponderRole> Staged for Connection<R, P> {
    fn transport(&mut self) -> &mut Transport {
        &mut self.t
    }
    fn flushed(&mut self, wr_id: u64, now: Instant) {
        self.handle_completion(&flush_of(wr_id), now);
    }
    fn post_refused(&mut self) {
        // A refused post leaves the queue pair as it was (not in error), so nothing
        // would flush what is already posted: only a disconnect ends those requests
        // and lets every call in flight get its outcome.
        if matches!(self.t.state, ConnState::Established | ConnState::Connecting) {
            let _ = self
                .t
                .events
                .push_back(ConnEvent::DisconnectRequested(CloseReason::PostRefused));
        }
        self.fail(CloseReason::PostRefused);
    }
}

/// The success an unsignaled request did not report, retired by a later completion.
fn implied_success(wr_id: u64, qp_num: u32) -> Completion {
    Completion {
        wr_id,
        opcode: WcOpcode::Send,
        status: WcStatus::Success,
        byte_len: 0,
        qp_num,
        invalidated_rkey: None,
    }
}
