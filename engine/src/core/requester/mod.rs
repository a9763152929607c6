//! The requester (client) protocol core: call slots, credits, chunk registration,
//! reply matching and invalidation, as a sans-IO state machine.
//!
//! Life of a call:
//!
//! 1. [`submit`](RequesterHalf::submit) validates it and starts it at once, or queues it
//!    (in order) until a credit, a slot, registration slots and send-queue room are all
//!    available.
//! 2. Starting stages FastReg work requests for its chunks (fresh keys), then the Send
//!    of its transport header (and its message, when inline) — one chain, no waiting:
//!    the send queue executes them in order.
//! 3. The reply's receive completion is matched by XID (the low bits of every XID are
//!    its slot). The grant it carries updates the credit table and frees the call's
//!    credit. Keys the responder invalidated (Send With Invalidate) are dead; the
//!    others get a LocalInvalidate.
//! 4. When every key is dead the outcome is delivered (buffers and all); when every work
//!    request is back the slot is free again.
//!
//! In [`RegMode::Persistent`] there are no per-call keys: chunks advertise the
//! persistent registration of the pool their buffer comes from, steps 2 and 3 stage no
//! FastReg or LocalInvalidate, and nothing can revoke the peer's access to a buffer. So a
//! call that ends without a reply (it timed out) keeps its buffers, quarantined in its
//! slot, until a late reply proves the responder finished with them or the connection
//! is drained; its outcome carries no buffers.

/// Hands the buffers of `$req` (a `CallRequest` the caller owns), just staged on slot
/// `$slot`, to the slot. A macro rather than a method so that the request's fields move
/// straight from where the caller holds it: passed by value, the whole request (a few
/// hundred octets, the lists' uninitialised places and all) would be copied first.
macro_rules! adopt {
    ($half:expr, $slot:expr, $req:expr) => {{
        let s = &mut $half.slots[$slot as usize];
        s.msg = Some($req.msg);
        // A free slot's lists are empty: moving an empty list in would only copy its
        // uninitialised places. An empty list holds nothing to drop, so it is
        // forgotten rather than run through its (out-of-line) drop glue.
        if !$req.ddp_args.is_empty() {
            s.ddp_args = $req.ddp_args;
        } else {
            core::mem::forget($req.ddp_args);
        }
        if !$req.write_sinks.is_empty() {
            s.sinks = $req.write_sinks;
        } else {
            core::mem::forget($req.write_sinks);
        }
    }};
}

mod cont;
mod ddp_reply;
mod plain;
mod pull;
mod reply;
mod send_ddp;
mod slot;
mod start;
mod xidmap;

use std::sync::Arc;
use std::time::Instant;

use rpcrdma_pools::{Pool, PoolCache};

use self::pull::{Dones, PullState, DONE_BUFS};
use self::reply::{interpret, status_of, Body, Interpreted};
use self::slot::{Answer, CallSlot, MrState, SlotState};
use super::config::{ConnConfig, RegMode, ReplyChunks, Role, Sizes};
use super::event::ConnEvent;
use super::fixed::{FixedQueue, IndexStack};
use super::mrs::{FastRegSlot, MrTable};
use super::regbuf::RegBuf;
use super::rpcmsg::{encode_null_call, NULL_CALL_LEN};
use super::transport::{CloseReason, ConnState, Transport, Violation};
use super::wrid::{WrId, WrKind};
use super::{CoreError, CorePools};
use crate::credits::CreditTable;
use crate::fabric::{Completion, SendOp};
use crate::requester::{
    CallRequest, CallStatus, DdpArgs, Outcome, Reply, Resend, SubmitError, SubmitRefusal,
    TransportError, WriteSinks, MAX_WRITE_SINKS,
};
use crate::wire::header::{HeaderView, Limits};
use crate::wire::private_data::PrivateData;

/// Counters of one requester connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequesterStats {
    /// Calls sent.
    pub calls_sent: u64,
    /// Of those, sent as long calls (Position-Zero Read chunk).
    pub long_calls: u64,
    /// Of those, sent as RDMA_MSGP: DDP arguments inline, padded (RFC 5666 §3.9).
    pub padded_calls: u64,
    /// Calls that offered a Reply chunk.
    pub reply_chunks: u64,
    /// Outcomes delivered.
    pub outcomes: u64,
    /// Calls that had to wait in the queue.
    pub queued: u64,
    /// Receives whose transport header did not parse (dropped, RFC 8166 §4.5.2).
    pub bad_headers: u64,
    /// Replies for no outstanding call (dropped).
    pub unmatched: u64,
    /// Late replies to calls that had timed out.
    pub late_replies: u64,
    /// Of the unmatched replies, those claiming Write or Reply chunk results (the
    /// responder wrote into memory no outstanding call offered). In persistent mode each
    /// ends the connection.
    pub stray_chunk_replies: u64,
    /// Keys invalidated by the responder's Send With Invalidate.
    pub remote_invalidations: u64,
    /// Local invalidations posted.
    pub local_invalidations: u64,
    /// Send With Invalidate naming a key of another call, or no key of ours.
    pub foreign_invalidations: u64,
    /// Persistent mode: calls whose outcome was delivered without their buffers,
    /// because the peer could still access them (timed out with no reply yet).
    pub quarantined: u64,
    /// RDMA_DONE messages received (ignored by a requester).
    pub done_received: u64,
    /// Replies pulled from responder-provided Read chunks and delivered.
    pub read_chunk_replies: u64,
    /// RDMA_DONE messages sent (pull completion notifications).
    pub dones_sent: u64,
    /// Of the replies with a Read chunk, those for no call in flight: answered with
    /// RDMA_DONE all the same (the draft's §4.1.3).
    pub dones_for_unknown_xids: u64,
    /// DONEs that found their queue full (never while its sizing holds).
    pub dones_dropped: u64,
    /// Completions whose `wr_id` named nothing outstanding (provider bugs).
    pub stray_completions: u64,
    /// Refills that found the receive pool empty.
    pub recv_starved: u64,
    /// Work requests the outbox refused (zero unless its sizing invariant broke).
    pub outbox_overflows: u64,
    /// Calls that timed out and still hold their credit now (no reply yet): each is a
    /// credit the window lacks until a late reply or the end of the connection.
    pub timed_out_holding_credit: u64,
    /// Credits given up for lost when the connection was declared broken for them
    /// ([`CloseReason::CreditsLost`]).
    pub credits_lost: u64,
    /// Times the connection was declared broken because timed-out calls held credits
    /// past `ConnConfig::credit_reclaim` (at most one per connection).
    pub credit_loss_disconnects: u64,
    /// True when chunks advertise persistent registrations ([`RegMode::Persistent`]:
    /// the chunk pools are reachable by the peer for the connection's life), false for
    /// per-RPC fast registration. `Registration::Auto` picks persistent on devices
    /// without fast registration; this is how operators see it.
    pub persistent_registration: bool,
    /// Calls sent as a continuation group of more than one Send
    /// (draft-dnoveck-rpcrdma-rtrext §4).
    pub cont_calls: u64,
    /// Sends that carried calls (one per call, or a group's count).
    pub call_messages: u64,
    /// DDP arguments sent by send-based DDP (placed into the peer's receive segments
    /// instead of offered as Read chunks).
    pub send_ddp_items: u64,
    /// Calls that asked for their reply's bulk item by send-based DDP (`optxrq_rsd`)
    /// instead of offering a Write chunk.
    pub send_ddp_reply_asks: u64,
    /// Reply bulk items received by send-based DDP (XMDTYPE_TBSN results), each handed
    /// over in the receive segment it landed in.
    pub send_ddp_reply_items: u64,
    /// Reply directions answered XMDTYPE_TOOSHORT (the item came in the payload).
    pub ddp_replies_too_short: u64,
    /// Reply directions answered XMDTYPE_NOITEM (the reply had no bulk item).
    pub ddp_replies_no_item: u64,
    /// Receives that carried replies, or parts of reply groups (RDMA_OPTIONAL included).
    pub reply_messages: u64,
    /// Replies received as continuation groups of more than one message.
    pub cont_replies: u64,
    /// ROPT_XMTCONT with no reply group in progress (dropped).
    pub bad_continuations: u64,
    /// Reply groups broken off (wrong XID, sequence or type, an intervening message):
    /// their calls fail with `BadReply::Continuation`.
    pub broken_reply_groups: u64,
    /// ROPT_XMTERR received (a call group the responder found broken).
    pub transmit_errors_received: u64,
    /// ROPT_XMTERR sent (a reply group found broken).
    pub transmit_errors_sent: u64,
    /// ROPT_XCHUPD received (the peer's characteristics replaced).
    pub chars_updates: u64,
    /// ROPT_XCHUPD sent (this end's receive buffer structure, when it did not fit the
    /// connect request).
    pub chars_updates_sent: u64,
}

/// What [`RequesterHalf::try_start`] did with a call.
enum Start {
    /// Staged on this slot; its buffers are to be adopted.
    Started(u32),
    /// Not now: resources are short (the call can wait for them).
    Short,
    /// Never: the call is refused.
    Refused(SubmitRefusal),
}

/// A call waiting for resources.
struct Queued {
    req: CallRequest,
    tag: u64,
    deadline: Option<Instant>,
}

/// Why a health check could not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// The connection is not established.
    #[error("connection is not established")]
    NotConnected,
    /// A probe is already out.
    #[error("a probe is already in flight")]
    InFlight,
    /// No credit is free for it (the grant is one and a call holds it).
    #[error("no credit is free for a probe")]
    NoCredit,
    /// The send queue is full.
    #[error("send queue is full")]
    Busy,
}

/// Fixed settings copied out of the [`ConnConfig`].
struct Params {
    credits_requested: u32,
    call_timeout: core::time::Duration,
    keepalive: Option<core::time::Duration>,
    probe_timeout: core::time::Duration,
    credit_reclaim: Option<core::time::Duration>,
    probe_program: (u32, u32),
    limits: Limits,
    /// `ConnConfig::max_chunks`: DDP Read chunks and Write chunks allowed per call.
    max_chunks: usize,
    /// `ConnConfig::reply_chunks`.
    reply_chunks: ReplyChunks,
    /// `ConnConfig::send_ddp_max`, resolved for the device
    /// ([`RequesterHalf::apply_device`]).
    send_ddp_max: u32,
    /// Whether `ConnConfig::send_ddp_max` was set (else the device decides).
    send_ddp_max_set: bool,
    /// The same for reply results: `ConnConfig::send_ddp_max`, else 0 (never).
    send_ddp_reply_max: u32,
    /// The backward direction of a two-role connection (RFC 8167 §5): calls go inline
    /// or not at all ([`SubmitRefusal::NeedsChunks`]).
    inline_only: bool,
}

/// The requester side of one connection. The core re-keys its fast-registration slots
/// itself (it holds their keys, the driver their handles) and stages every fabric operation in
/// its outbox (the connection's, borrowed per input).
pub struct RequesterHalf {
    params: Params,
    local_pd: PrivateData,
    credits: Arc<CreditTable>,
    slots: Box<[CallSlot]>,
    free_slots: IndexStack,
    probe_slot: u32,
    /// Slots whose call has its outcome and which wait only for their Send to be
    /// retired (`plain::finish_plain`; with selective signaling, until a later
    /// completion): no call of theirs is in flight.
    parked: u32,
    slot_bits: u32,
    next_seq: u32,
    /// Caller-chosen XIDs of calls in flight (see [`CallRequest::xid`]).
    own_xids: xidmap::XidMap,
    mode: RegMode,
    /// Largest chunk one registration covers.
    max_chunk: usize,
    /// Largest `CallRequest::max_reply_len` allowed: a large buffer, within one
    /// registration.
    reply_limit: usize,
    mrs: MrTable,
    large: PoolCache,
    send_pool: Pool,
    queue: FixedQueue<Queued>,
    outcomes: FixedQueue<Outcome>,
    /// The connection's failure has been handled here ([`Self::on_fail`]).
    failed: bool,
    /// Calls lost with the connection come out with `Outcome::resend` set, so the
    /// driver can send them again on the next one (`ConnConfig::reconnect`).
    hand_back: bool,
    next_deadline: Option<Instant>,
    last_rx: Option<Instant>,
    /// RDMA_DONE buffers, and DONEs and pulls waiting for resources.
    dones: Dones,
    /// Largest responder-provided Read chunk pulled (a large buffer).
    max_pull: u32,
    /// The first segment of the last responder-provided Read chunk pulled (tests read
    /// it again to prove the key dead).
    pub(super) last_pull: Option<crate::wire::header::Segment>,
    /// Test hook: DONEs are not sent (a requester that neglects them, the draft's
    /// §4.1.3).
    pub(super) drop_dones: bool,
    /// Message continuation: the reserve of receives and the reply group in progress.
    cont: cont::ReqCont,
    stats: RequesterStats,
    /// Test hook (feature `testing`): replies taken by the plain path
    /// (`plain::finish_plain`), so that a test can tell which path answered its call.
    #[cfg(feature = "testing")]
    pub(super) plain_replies: u64,
}

impl RequesterHalf {
    /// A requester for `cfg` over registered `pools`, with fast-registration slots
    /// `mrs` (each covering at least `cfg.large_buf_size` bytes) and a credit table
    /// shared with application threads. Receives are staged at once; nothing is sent
    /// before the connection is established.
    pub fn new(
        cfg: &ConnConfig,
        pools: &CorePools,
        mrs: &[FastRegSlot],
        credits: Arc<CreditTable>,
    ) -> Result<Self, CoreError> {
        if mrs.is_empty() {
            return Err(CoreError::NoMemoryRegions);
        }
        Self::with_mode(cfg, pools, RegMode::FastReg, mrs, credits)
    }

    /// A requester in [`RegMode::Persistent`]: no fast-registration slots; every chunk
    /// buffer must come from an arena registered with remote read and write access for
    /// the connection's protection domain (the driver registers its pools so).
    pub fn new_persistent(
        cfg: &ConnConfig,
        pools: &CorePools,
        credits: Arc<CreditTable>,
    ) -> Result<Self, CoreError> {
        Self::with_mode(cfg, pools, RegMode::Persistent, &[], credits)
    }

    /// The backward-direction requester of a forward responder (RFC 8167): `cfg` is the
    /// backchannel's ([`ConnConfig::backchannel`]). Its calls are inline only (§5), so it
    /// registers nothing and needs no fast-registration slots, and it has no say in the
    /// private data the connection offers (the forward responder's).
    pub fn new_backchannel(
        cfg: &ConnConfig,
        pools: &CorePools,
        credits: Arc<CreditTable>,
    ) -> Result<Self, CoreError> {
        let mut half = Self::with_mode(cfg, pools, RegMode::Persistent, &[], credits)?;
        half.params.inline_only = true;
        Ok(half)
    }

    /// The pool call messages come from.
    pub(crate) fn send_pool(&self) -> &Pool {
        &self.send_pool
    }

    /// True for a backward-direction requester ([`Self::new_backchannel`]).
    pub(crate) fn is_backchannel(&self) -> bool {
        self.params.inline_only
    }

    fn with_mode(
        cfg: &ConnConfig,
        pools: &CorePools,
        mode: RegMode,
        mrs: &[FastRegSlot],
        credits: Arc<CreditTable>,
    ) -> Result<Self, CoreError> {
        cfg.validate().map_err(CoreError::Config)?;
        let local_pd = cfg
            .private_data_for(mode)
            .map_err(|e| CoreError::Config(crate::core::config::ConfigError::InlineSize(e)))?;
        let sizes: Sizes = cfg.sizes(Role::Requester);
        let mrs = MrTable::new(mrs, cfg.seed.unwrap_or_else(super::mrs::os_seed));
        let max_chunk = match mode {
            RegMode::FastReg => mrs.max_len(),
            RegMode::Persistent => cfg.large_buf_size as usize,
        };
        // With selective signaling (`core/signal.rs`) a call whose reply came before its
        // unsignaled Send was retired keeps its slot (whose header buffer the Send
        // gathers from: the provider's until the Send is retired) until a later
        // completion retires it: up to `interval - 1` such slots beside the credits'
        // own, so that no call waits for a slot on their account. Within the send
        // buffers beyond two per slot (headers and call messages).
        let every = crate::core::signal::interval(
            sizes.sq_depth,
            sizes.slots.min(sizes.send_bufs),
            cfg.signal_every,
        );
        let spare = (every - 1).min(sizes.send_bufs.saturating_sub(2 * sizes.slots));
        let n_slots = sizes.slots + spare;
        let mut slots = Vec::with_capacity(n_slots as usize);
        for i in 0..n_slots {
            let header = RegBuf::from_pool(&pools.send).map_err(CoreError::Buffers)?;
            header.lkey().map_err(CoreError::Buffers)?;
            slots.push(CallSlot::new(header, i == n_slots - 1));
        }
        let probe_slot = n_slots - 1;
        let mut done_bufs = Vec::new();
        if cfg.extensions {
            for _ in 0..DONE_BUFS {
                let b = RegBuf::from_pool(&pools.send).map_err(CoreError::Buffers)?;
                b.lkey().map_err(CoreError::Buffers)?;
                done_bufs.push(b);
            }
        }
        let slot_bits = 32 - (n_slots.max(2) - 1).leading_zeros();
        credits.reset();
        // XIDs start at a point drawn from the configured seed (reproducible runs) or
        // the OS's random source, so a restarted client does not reuse its
        // predecessor's XIDs. The core reads no clock for it.
        let s = cfg.seed.unwrap_or_else(super::mrs::os_seed);
        let seed = (s ^ (s >> 32)) as u32 ^ 0x5851_F42D;
        Ok(RequesterHalf {
            params: Params {
                credits_requested: cfg.credits,
                call_timeout: cfg.call_timeout,
                keepalive: cfg.keepalive,
                probe_timeout: cfg.probe_timeout,
                credit_reclaim: cfg.credit_reclaim,
                probe_program: cfg.probe_program,
                limits: cfg.limits,
                max_chunks: cfg.max_chunks as usize,
                reply_chunks: cfg.reply_chunks,
                send_ddp_max: cfg.send_ddp_max.unwrap_or(u32::MAX),
                send_ddp_max_set: cfg.send_ddp_max.is_some(),
                send_ddp_reply_max: cfg.send_ddp_max.unwrap_or(0),
                inline_only: false,
            },
            local_pd,
            credits,
            free_slots: IndexStack::full(probe_slot),
            slots: slots.into_boxed_slice(),
            probe_slot,
            parked: 0,
            slot_bits,
            next_seq: seed,
            own_xids: xidmap::XidMap::new(n_slots as usize),
            mode,
            max_chunk,
            reply_limit: pools.large.buf_size().min(max_chunk),
            mrs,
            large: pools.large.cache(),
            send_pool: pools.send.clone(),
            queue: FixedQueue::with_capacity(cfg.queue_len),
            outcomes: FixedQueue::with_capacity(n_slots as usize + cfg.queue_len),
            failed: false,
            hand_back: cfg.reconnect.is_some(),
            next_deadline: None,
            last_rx: None,
            dones: Dones::new(done_bufs, 2 * n_slots as usize),
            max_pull: cfg.large_buf_size,
            last_pull: None,
            drop_dones: false,
            #[cfg(feature = "testing")]
            plain_replies: 0,
            cont: cont::ReqCont::new(cfg.extensions),
            stats: RequesterStats::default(),
        })
    }

    /// Resolves what depends on the device: without `ConnConfig::send_ddp_max`, bulk
    /// goes by send-based DDP only where an RDMA Read costs a round trip.
    pub(crate) fn apply_device(&mut self, rdma_round_trip: bool) {
        if !self.params.send_ddp_max_set {
            self.params.send_ddp_max = if rdma_round_trip { u32::MAX } else { 0 };
        }
    }

    /// The largest bulk item this requester moves by send-based DDP: (call arguments,
    /// reply results).
    pub fn send_ddp_max(&self) -> (u32, u32) {
        (self.params.send_ddp_max, self.params.send_ddp_reply_max)
    }

    /// How this requester registers chunk memory.
    pub fn registration(&self) -> RegMode {
        self.mode
    }

    /// Send-queue slots a call of `plan` needs: its FastRegs, their later
    /// LocalInvalidates and the Send; the Send alone in persistent mode.
    fn sq_need(&self, plan: &start::Plan) -> u32 {
        match self.mode {
            RegMode::FastReg => 2 * plan.mrs + 1,
            RegMode::Persistent => 1,
        }
    }

    /// True when too few fast-registration slots are free for `plan`.
    fn regs_short(&self, plan: &start::Plan) -> bool {
        self.mode == RegMode::FastReg && self.mrs.available() < plan.mrs as usize
    }

    /// The RFC 8797 private data this requester offers.
    pub(crate) fn local_pd(&self) -> PrivateData {
        self.local_pd
    }

    /// The credit table.
    pub fn credits(&self) -> &Arc<CreditTable> {
        &self.credits
    }

    /// Counters.
    pub fn stats(&self) -> RequesterStats {
        let mut s = self.stats;
        s.timed_out_holding_credit = self.timed_out_holding_credit() as u64;
        s.persistent_registration = self.mode == RegMode::Persistent;
        s
    }

    /// Calls that timed out and still hold a credit.
    fn timed_out_holding_credit(&self) -> u32 {
        self.slots
            .iter()
            .filter(|s| s.state.answered() && !s.is_probe && s.holds_credit)
            .count() as u32
    }

    /// When a timed-out call holding its credit makes the connection broken: its deadline
    /// plus the reclaim bound (None when no bound is set).
    fn reclaim_deadline(&self, slot: usize) -> Option<Instant> {
        let s = &self.slots[slot];
        match (self.params.credit_reclaim, s.deadline) {
            (Some(r), Some(d)) if s.holds_credit && !s.is_probe => d.checked_add(r),
            _ => None,
        }
    }

    /// Declares the connection broken: timed-out calls held credits past the bound.
    #[cold]
    fn credits_lost(&mut self, t: &mut Transport) {
        let held = self.timed_out_holding_credit();
        self.stats.credits_lost += u64::from(held);
        self.stats.credit_loss_disconnects += 1;
        let reason = CloseReason::CreditsLost { held };
        let _ = t.events.push_back(ConnEvent::DisconnectRequested(reason));
        self.fail(t, reason);
    }

    /// True when no call is started or waiting: one submitted now goes alone, with
    /// nothing to batch with it (the driver then posts it at once).
    #[inline]
    pub(crate) fn idle(&self) -> bool {
        self.queue.is_empty()
            && self.free_slots.len() + self.parked as usize == self.probe_slot as usize
    }

    /// Calls queued for resources.
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Calls started whose outcome is not yet delivered, plus timed-out calls still
    /// holding a credit.
    pub fn active(&self) -> usize {
        self.slots.iter().filter(|s| s.state.in_use()).count()
    }

    /// The connection is established: silence counts for the keepalive from `now`,
    /// and a receive buffer structure that did not fit the connect request goes out as
    /// a characteristics update (ROPT_XCHUPD, when continuation was negotiated), before
    /// any call: the peer reads it first.
    pub(crate) fn on_established(&mut self, t: &mut Transport, now: Instant) {
        self.last_rx = Some(now);
        if let Some(chars) = t.chars_update_pending.take() {
            if t.extensions.continuation && self.stage_chars_update(t, chars) {
                t.recv_structure_sent = true;
            }
        }
    }

    /// Stages ROPT_XCHUPD carrying `chars` (DESIGN.md, "Characteristics updates"):
    /// outside the credit window, like RDMA_DONE, into one of the receives a responder
    /// with extensions posts beyond its credits. False, with nothing staged, when no
    /// DONE buffer or send-queue entry is free.
    pub(crate) fn stage_chars_update(
        &mut self,
        t: &mut Transport,
        chars: crate::wire::rtr::TransportChars,
    ) -> bool {
        let repr = crate::wire::rtr::RtrRepr {
            xid: 0,
            credit: self.params.credits_requested,
            op: crate::wire::rtr::RtrOp::CharsUpdate(chars),
        };
        let staged = self.stage_from_done_buf(t, |b| repr.encode(b).ok());
        if staged {
            self.stats.chars_updates_sent += 1;
        }
        staged
    }

    /// What a call lost to the connection's end fails with.
    fn lost(&self, t: &Transport) -> TransportError {
        match t.close_reason {
            Some(CloseReason::PeerAborted(why)) => TransportError::PeerAborted(why),
            _ => TransportError::Disconnected,
        }
    }

    /// Submits a call tagged `tag` (returned in its outcome). It starts at once if
    /// resources allow, else waits in order.
    // Inlined into its one caller, `Connection::submit`, which is never inlined: the
    // request reaches that one as a pointer to the driver's copy and is used there
    // in place, so it is still not copied on the way in, and the call no longer pays
    // a second frame's entry, exit and argument moves (`perf/insns.sh`: NULL 3920 ->
    // 3890, ECHO 4366 -> 4336, rate 3588 -> 3558).
    #[inline(always)]
    pub fn submit(
        &mut self,
        t: &mut Transport,
        mut req: CallRequest,
        tag: u64,
        now: Instant,
    ) -> Result<(), SubmitError> {
        if let Some(slot) = self.start_plain(t, &mut req, tag, now) {
            adopt!(self, slot, req);
            return Ok(());
        }
        if !t.is_open() {
            return Err(refuse(SubmitRefusal::NotConnected, req));
        }
        if let Err(r) = self.validate(&req) {
            return Err(refuse(r, req));
        }
        let timeout = req.timeout.unwrap_or(self.params.call_timeout);
        let deadline = now.checked_add(timeout);
        if self.queue.is_empty() {
            // try_start refuses a caller-chosen XID already in flight.
            match self.try_start(t, &mut req, tag, deadline, now) {
                Start::Started(slot) => {
                    adopt!(self, slot, req);
                    return Ok(());
                }
                Start::Refused(r) => return Err(refuse(r, req)),
                Start::Short => {}
            }
        } else if req.xid.is_some_and(|x| self.xid_in_flight(x)) {
            // Refused now rather than as an outcome once it would start.
            return Err(refuse(SubmitRefusal::DuplicateXid, req));
        }
        self.queue
            .push_back(Queued { req, tag, deadline })
            .map_err(|q| refuse(SubmitRefusal::QueueFull, q.req))?;
        self.stats.queued += 1;
        self.credits.set_waiting(self.queue.len() as u32);
        self.note_deadline(deadline);
        Ok(())
    }

    fn validate(&self, req: &CallRequest) -> Result<(), SubmitRefusal> {
        if req.msg.len() < 4 {
            return Err(SubmitRefusal::MessageTooShort);
        }
        if self.params.inline_only && !(req.ddp_args.is_empty() && req.write_sinks.is_empty()) {
            return Err(SubmitRefusal::NeedsChunks);
        }
        let max = self.max_chunk;
        if req.msg.lkey().is_err() {
            return Err(SubmitRefusal::NotRegistered);
        }
        if req.msg.len() > max {
            return Err(SubmitRefusal::ChunkTooLarge);
        }
        let mut moved = 0usize;
        let mut last_off = 0usize;
        for a in req.ddp_args.iter() {
            if a.data.lkey().is_err() {
                return Err(SubmitRefusal::NotRegistered);
            }
            if a.data.len() > max {
                return Err(SubmitRefusal::ChunkTooLarge);
            }
            let pos = a.position as usize;
            if pos == 0 || pos & 3 != 0 || pos < moved {
                return Err(SubmitRefusal::BadPosition);
            }
            let off = pos - moved;
            if off < last_off || off > req.msg.len() {
                return Err(SubmitRefusal::BadPosition);
            }
            last_off = off;
            moved += crate::wire::xdr::pad4(a.data.len());
        }
        for s in req.write_sinks.iter() {
            if s.lkey().is_err() {
                return Err(SubmitRefusal::NotRegistered);
            }
            if s.capacity() > max {
                return Err(SubmitRefusal::ChunkTooLarge);
            }
        }
        if req.max_reply_len as usize > self.reply_limit {
            return Err(SubmitRefusal::ReplyTooLarge);
        }
        Ok(())
    }

    /// Starts the health check (RFC 8267 §6.7.2): an RPC NULL on the reserved credit.
    /// Its result arrives as [`ConnEvent::ProbeAnswered`] or [`ConnEvent::PeerDead`].
    pub fn health_check(&mut self, t: &mut Transport, now: Instant) -> Result<(), ProbeError> {
        if !t.is_open() {
            return Err(ProbeError::NotConnected);
        }
        let slot = self.probe_slot;
        if self.slots[slot as usize].state.in_use() {
            return Err(ProbeError::InFlight);
        }
        if t.sq.free() < 1 {
            return Err(ProbeError::Busy);
        }
        let Ok(mut msg) = RegBuf::from_pool(&self.send_pool) else {
            return Err(ProbeError::Busy);
        };
        if !self.credits.try_acquire_probe() {
            return Err(ProbeError::NoCredit);
        }
        let xid = self.make_xid(slot);
        let (prog, vers) = self.params.probe_program;
        let n = encode_null_call(xid, prog, vers, msg.storage_mut()).unwrap_or(0);
        if n != NULL_CALL_LEN || msg.set_len(n).is_err() {
            self.credits.release_probe();
            return Err(ProbeError::Busy);
        }
        let mut req = CallRequest::new(msg, 1024);
        let deadline = now.checked_add(self.params.probe_timeout);
        let Ok(plan) = start::plan(
            &req,
            &t.thresholds,
            self.params.max_chunks,
            self.read_chunk_replies(t, &req),
            None,
        ) else {
            self.credits.release_probe();
            return Err(ProbeError::Busy);
        };
        if self.stage_call(t, slot, xid, plan, &mut req, u64::MAX, deadline, now) {
            adopt!(self, slot, req);
            self.slots[slot as usize].holds_credit = true;
            self.note_deadline(deadline);
            Ok(())
        } else {
            self.credits.release_probe();
            Err(ProbeError::Busy)
        }
    }

    /// Where the XID sequence stands: a core that replaces this one on a new
    /// connection ([`Self::continue_xids`]) goes on from here.
    pub(crate) fn xid_sequence(&self) -> u32 {
        self.next_seq
    }

    /// Continues the XID sequence of the core this one replaces (a reconnecting
    /// driver). Restarting it from the seed would hand new calls the XIDs of calls made
    /// on earlier connections, which a server's duplicate request cache takes for
    /// retransmissions (and answers with the old call's reply), and which calls sent
    /// again under their own XIDs would collide with.
    pub(crate) fn continue_xids(&mut self, seq: u32) {
        self.next_seq = seq;
    }

    // Always inlined: once per call, and left out of line when its callers grew.
    #[inline(always)]
    fn make_xid(&mut self, slot: u32) -> u32 {
        loop {
            self.next_seq = self.next_seq.wrapping_add(1);
            let xid = (self.next_seq << self.slot_bits) | slot;
            // Never hand out an XID a caller chose for a call still in flight: a reply
            // must name exactly one call.
            if self.own_xids.get(xid).is_none() {
                return xid;
            }
        }
    }

    /// True when a call in flight (sent, its slot not yet retired) carries `xid`.
    fn xid_in_flight(&self, xid: u32) -> bool {
        if self.own_xids.get(xid).is_some() {
            return true;
        }
        // A slot whose reply came (its credit is back) may still wait for its Send's
        // completion, but no reply can name it any more: its XID is free again.
        self.slots
            .get(self.slot_of(xid) as usize)
            .is_some_and(|s| s.state.in_use() && s.xid == xid && s.holds_credit)
    }

    /// The slot a reply's XID names, if any (the caller still checks the slot's XID).
    #[inline(always)]
    fn slot_for_reply(&self, xid: u32) -> u32 {
        match self.own_xids.get(xid) {
            Some(slot) => slot,
            None => self.slot_of(xid),
        }
    }

    fn slot_of(&self, xid: u32) -> u32 {
        xid & ((1u32 << self.slot_bits) - 1)
    }

    /// Tries to start `req` now. On [`Start::Started`] the call is staged on the slot
    /// it names, and the caller hands the request's buffers over with
    /// `adopt!`; otherwise nothing changed. The request is borrowed so
    /// that it is not moved (a few hundred octets) on the way in and back out.
    #[inline(always)]
    fn try_start(
        &mut self,
        t: &mut Transport,
        req: &mut CallRequest,
        tag: u64,
        deadline: Option<Instant>,
        now: Instant,
    ) -> Start {
        // Only a call too long for inline can go as a group.
        let cont = if req.msg.len() + cont::PLAIN_HEADER_LEN > t.thresholds.send as usize {
            self.plan_cont(t, req)
        } else {
            None
        };
        // Only a call with a DDP argument can place it by send-based DDP.
        let sddp = if cont.is_none() && !req.ddp_args.is_empty() {
            self.plan_send_ddp(t, req)
        } else {
            None
        };
        // Only a call with a Write sink can have its reply's item placed so.
        let rddp = if cont.is_none() && sddp.is_none() && !req.write_sinks.is_empty() {
            self.plan_reply_ddp(t, req)
        } else {
            None
        };
        let plan = match start::plan(
            req,
            &t.thresholds,
            self.params.max_chunks,
            self.read_chunk_replies(t, req),
            t.peer_align,
        ) {
            // Continuation needs no chunk and no registration.
            Ok(_) | Err(SubmitRefusal::HeaderTooLarge)
                if cont.is_some() || sddp.is_some() || rddp.is_some() =>
            {
                start::Plan {
                    long: false,
                    reply_chunk: false,
                    mrs: 0,
                    msgp: None,
                }
            }
            Ok(p) => p,
            Err(r) => return Start::Refused(r),
        };
        // Thresholds are known only once established, so a backward call's size is
        // checked here, where the shape is chosen (RFC 8167 §5: inline only).
        if self.params.inline_only && plan.mrs > 0 {
            return Start::Refused(SubmitRefusal::NeedsChunks);
        }
        if req.xid.is_some_and(|x| self.xid_in_flight(x)) {
            return Start::Refused(SubmitRefusal::DuplicateXid);
        }
        let needs_reply_buf = plan.reply_chunk;
        if self.free_slots.is_empty()
            || self.regs_short(&plan)
            || t.sq.free() < self.sq_need(&plan)
            || (needs_reply_buf && self.large.is_empty() && self.large.pool().available() == 0)
        {
            return Start::Short;
        }
        if !self.credits.acquire_owned() {
            return Start::Short;
        }
        let Some(slot) = self.free_slots.pop() else {
            self.credits.release_owned();
            return Start::Short;
        };
        let own = req.xid;
        let xid = match own {
            Some(x) => x,
            None => self.make_xid(slot),
        };
        let staged = match (cont, sddp, rddp) {
            (Some(cp), _, _) => self.stage_cont(t, slot, xid, cp, req, tag, deadline, now),
            (None, Some(dp), _) => self.stage_send_ddp(t, slot, xid, dp, req, tag, deadline, now),
            (None, None, Some(rp)) => {
                self.stage_reply_ddp(t, slot, xid, rp, req, tag, deadline, now)
            }
            (None, None, None) => self.stage_call(t, slot, xid, plan, req, tag, deadline, now),
        };
        if staged {
            let s = &mut self.slots[slot as usize];
            s.holds_credit = true;
            // The map holds one entry per slot at most and has room for all of them.
            s.own_xid = own.is_some() && self.own_xids.insert(xid, slot);
            self.note_deadline(deadline);
            Start::Started(slot)
        } else {
            let _ = self.free_slots.push(slot);
            self.credits.release_owned();
            Start::Short
        }
    }

    fn note_deadline(&mut self, d: Option<Instant>) {
        if let Some(d) = d {
            self.next_deadline = Some(self.next_deadline.map_or(d, |n| n.min(d)));
        }
    }

    /// Starts calls that were waiting, in order, as far as resources allow.
    fn admit_queued(&mut self, t: &mut Transport, now: Instant) {
        while t.is_open() {
            let Some(mut q) = self.queue.pop_front() else {
                break;
            };
            match self.try_start(t, &mut q.req, q.tag, q.deadline, now) {
                Start::Started(slot) => adopt!(self, slot, q.req),
                Start::Short => {
                    let _ = self.queue.push_front(q);
                    break;
                }
                Start::Refused(reason) => {
                    // Thresholds are fixed once established, so a request that fit at
                    // submission still fits; what can refuse it now is a caller-chosen
                    // XID that a call started since then also carries. It fails alone.
                    let xid = q.req.xid.unwrap_or(0);
                    let status = CallStatus::Refused(reason);
                    self.push_outcome(Outcome::unsent(q.tag, xid, q.req, status));
                }
            }
        }
        self.credits.set_waiting(self.queue.len() as u32);
    }

    #[inline(always)]
    fn push_outcome(&mut self, o: Outcome) {
        self.stats.outcomes += 1;
        // Capacity is slots plus queue length, and each call has one outcome in it at
        // most until the driver drains it, so this cannot be full.
        let _ = self.outcomes.push_back(o);
    }

    /// The next finished call.
    #[inline]
    pub fn poll_outcome(&mut self) -> Option<Outcome> {
        self.outcomes.pop_front()
    }

    /// Outcomes finished and not yet taken by the driver (each may hold the buffer of
    /// the receive its reply came in: `RecvTable::short_by_at_most`).
    #[inline(always)]
    pub(crate) fn outcomes_waiting(&self) -> usize {
        self.outcomes.len()
    }

    /// The next finished call where it lies in the outcome queue, to be read (and
    /// emptied) in place and then dropped with [`drop_front_outcome`](Self::drop_front_outcome):
    /// an outcome is a few hundred octets, which `poll_outcome` moves out.
    #[inline]
    pub(crate) fn front_outcome(&mut self) -> Option<&mut Outcome> {
        self.outcomes.front_mut()
    }

    /// Drops the outcome [`front_outcome`](Self::front_outcome) showed; `bare` is
    /// what the caller found [`owns_nothing`] say of it. One that owns nothing (its
    /// buffers taken out, its lists empty) is removed without its drop glue (an
    /// out-of-line walk over every field, ~25 instructions per call on the NULL path,
    /// `perf/insns.sh`), and without looking the front up again (~10 more).
    #[inline(always)]
    pub(crate) fn drop_front_outcome(&mut self, bare: bool) {
        if bare {
            self.outcomes.forget_front();
        } else {
            self.outcomes.drop_front();
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) next has something to do.
    pub fn next_timeout(&self, t: &Transport) -> Option<Instant> {
        let keepalive = match (self.params.keepalive, self.last_rx) {
            (Some(k), Some(at)) if t.is_open() => at.checked_add(k),
            _ => None,
        };
        match (self.next_deadline, keepalive) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Fails calls whose deadline passed, and starts the keepalive probe when due.
    pub fn handle_timeout(&mut self, t: &mut Transport, now: Instant) {
        if let (Some(k), Some(at)) = (self.params.keepalive, self.last_rx) {
            if t.is_open() && now.saturating_duration_since(at) >= k {
                // A probe already out (or no credit for one) is fine: its own deadline
                // decides. Either way the silence is accounted for until `now`.
                let _ = self.health_check(t, now);
                self.last_rx = Some(now);
            }
        }
        if self.next_deadline.is_none_or(|d| d > now) {
            return;
        }
        self.next_deadline = None;
        // Queued calls never touched the wire: they time out directly.
        for _ in 0..self.queue.len() {
            let Some(q) = self.queue.pop_front() else {
                break;
            };
            if q.deadline.is_some_and(|d| d <= now) {
                self.push_outcome(Outcome::unsent(q.tag, 0, q.req, CallStatus::Timeout));
            } else {
                self.note_deadline(q.deadline);
                let _ = self.queue.push_back(q);
            }
        }
        self.credits.set_waiting(self.queue.len() as u32);
        let mut past_reclaim = false;
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            if !s.state.in_use() {
                continue;
            }
            if s.state.answered() {
                // Timed out (or answered and invalidating): a credit still held waits
                // for its late reply only until the reclaim bound.
                match self.reclaim_deadline(i) {
                    Some(r) if r <= now => past_reclaim = true,
                    r => self.note_deadline(r),
                }
                continue;
            }
            match s.deadline {
                Some(d) if d <= now => {
                    if s.is_probe {
                        let _ = t.events.push_back(ConnEvent::PeerDead);
                        let _ = t
                            .events
                            .push_back(ConnEvent::DisconnectRequested(CloseReason::PeerDead));
                        self.fail(t, CloseReason::PeerDead);
                        return;
                    }
                    self.answer(
                        t,
                        i as u32,
                        CallStatus::Timeout,
                        None,
                        [0; MAX_WRITE_SINKS],
                        None,
                    );
                    if self.slots[i].state.in_use() {
                        match self.reclaim_deadline(i) {
                            Some(r) if r <= now => past_reclaim = true,
                            r => self.note_deadline(r),
                        }
                    }
                }
                d => self.note_deadline(d),
            }
        }
        if past_reclaim && t.is_open() {
            self.credits_lost(t);
        }
    }

    /// A receive completed successfully: a reply (or a stray) to match.
    #[inline(always)]
    pub(crate) fn on_recv(
        &mut self,
        t: &mut Transport,
        buf: RegBuf,
        swi: Option<u32>,
        now: Instant,
    ) {
        if t.is_open() {
            self.on_receive(t, buf, swi, now);
        } else {
            t.recvs.recycle(buf);
        }
    }

    /// An unsignaled Send of the call in `slot` executed: retired by a later completion
    /// (`core/signal.rs`), as [`on_send_completion`](Self::on_send_completion) takes a
    /// successful one; true when it was counted in the slot (its send-queue room then
    /// comes back, given by the caller for the whole run). A slot parked by
    /// `finish_plain` is freed here as that function would have freed it.
    #[inline(always)]
    pub(crate) fn retire_call_send(&mut self, slot: u32) -> bool {
        // A free slot has no work request out (`progress` and `finish_plain` free
        // only those with none).
        let Some(s) = self.slots.get_mut(slot as usize).filter(|s| s.wrs != 0) else {
            self.stats.stray_completions += 1;
            return false;
        };
        s.wrs -= 1;
        // A call still waiting for its reply has nothing to deliver or retire.
        if matches!(s.state, SlotState::Sent) {
            return true;
        }
        if s.parked && s.wrs == 0 && s.reserved == 0 && !s.holds_credit {
            s.parked = false;
            s.state = SlotState::Free;
            self.parked = self.parked.saturating_sub(1);
            let _ = self.free_slots.push(slot);
        } else {
            self.progress(slot);
        }
        true
    }

    /// A send-queue request of this half completed (or was flushed). The common one,
    /// a call's Send done while the call waits for its reply, only counts its request
    /// and gives back its send-queue room, here in the completion loop; everything
    /// else goes out of line ([`on_send_completion_general`]), which would do the same
    /// for it: the call's entry and exit cost that Send about as much as its work.
    ///
    /// [`on_send_completion_general`]: Self::on_send_completion_general
    #[inline(always)]
    pub(crate) fn on_send_completion(&mut self, t: &mut Transport, id: WrId, wc: &Completion) {
        if id.kind == WrKind::CallSend {
            if let Some(s) = self.slots.get_mut(id.slot as usize) {
                if matches!(s.state, SlotState::Sent) && s.wrs != 0 {
                    s.wrs -= 1;
                    t.sq.give(1);
                    return;
                }
            }
        }
        self.on_send_completion_general(t, id, wc);
    }

    /// [`on_send_completion`](Self::on_send_completion) of any request.
    #[inline(never)]
    fn on_send_completion_general(&mut self, t: &mut Transport, id: WrId, wc: &Completion) {
        match id.kind {
            WrKind::CallSend | WrKind::FastReg | WrKind::LocalInv => {
                let Some(s) = self.slots.get_mut(id.slot as usize) else {
                    self.stats.stray_completions += 1;
                    return;
                };
                if !s.state.in_use() || s.wrs == 0 {
                    self.stats.stray_completions += 1;
                    return;
                }
                s.wrs -= 1;
                t.sq.give(1);
                // A call's Send done while the call still waits for its reply never gets
                // here: `on_send_completion` took it (it has nothing to deliver or retire).
                if id.kind == WrKind::LocalInv && wc.status.is_success() {
                    if let Some(m) = s.mrs.get_mut(id.aux as usize) {
                        if m.state == MrState::Invalidating {
                            m.state = MrState::Invalid;
                            self.mrs.give(m.mr);
                        }
                    }
                }
                self.progress(id.slot);
            }
            WrKind::ReplyPull => self.on_pull_completion(t, id, wc),
            WrKind::DoneSend => self.on_done_completion(t, id),
            _ => self.stats.stray_completions += 1,
        }
    }

    /// A reply (or a stray) to match. The plain reply to a plain call (engine/DESIGN.md,
    /// "Requester: the plain path") is taken here, in the completion loop it is inlined
    /// into; everything else out of line, by [`on_receive_general`]: the general
    /// function's frame and saved registers cost the plain reply about 20 instructions.
    ///
    /// [`on_receive_general`]: Self::on_receive_general
    #[inline(always)]
    fn on_receive(&mut self, t: &mut Transport, buf: RegBuf, swi: Option<u32>, now: Instant) {
        // Message continuation costs the common path one test: RDMA_OPTIONAL fails the
        // version 1 parse below and is taken there; only a reply group in progress
        // needs a look at every message (§4.2: no intervening message).
        let buf = if self.reply_group_open() {
            match self.on_receive_in_group(t, buf, swi, now) {
                Some(buf) => buf,
                None => return,
            }
        } else {
            buf
        };
        self.last_rx = Some(now);
        if swi.is_none() {
            if let Some((xid, credit)) = plain::plain_reply(buf.as_slice(), &self.params.limits) {
                let slot = self.slot_for_reply(xid);
                if self.awaits_plain(slot, xid) {
                    self.finish_plain(slot, credit, buf);
                    return;
                }
            }
        }
        self.on_receive_general(t, buf, swi, now);
    }

    /// A message received while a reply group is open: an RDMA_OPTIONAL is the group's
    /// (taken here, `None`); anything else breaks the group and is handed back to be
    /// matched as usual.
    #[cold]
    #[inline(never)]
    fn on_receive_in_group(
        &mut self,
        t: &mut Transport,
        buf: RegBuf,
        swi: Option<u32>,
        now: Instant,
    ) -> Option<RegBuf> {
        if crate::wire::rtr::is_optional(buf.as_slice()) {
            self.on_optional(t, buf, swi, now);
            return None;
        }
        // §4.2: a group "must be received in order without any intervening message".
        let current = buf
            .as_slice()
            .get(12..16)
            .map_or(0, |w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
        let info = crate::wire::rtr::OptxInfo::BadHmt {
            expect: crate::wire::rtr::RDMA_OPTIONAL,
            current,
        };
        self.broken_reply_group(t, Some(info));
        Some(buf)
    }

    /// A received message that is not the plain reply to a plain call waiting for it
    /// ([`on_receive`](Self::on_receive) looked for that): parsed, matched against its
    /// call and interpreted against what the call offered.
    #[inline(never)]
    fn on_receive_general(
        &mut self,
        t: &mut Transport,
        buf: RegBuf,
        swi: Option<u32>,
        now: Instant,
    ) {
        let hdr = match HeaderView::parse(buf.as_slice(), &self.params.limits) {
            Ok(h) => h,
            Err(_)
                if t.extensions.continuation && crate::wire::rtr::is_optional(buf.as_slice()) =>
            {
                self.on_optional(t, buf, swi, now);
                return;
            }
            Err(_) => {
                // RFC 8166 §4.5.2: a requester drops what it cannot parse.
                self.stats.bad_headers += 1;
                self.note_foreign_swi(t, swi, None);
                t.recvs.recycle(buf);
                return;
            }
        };
        let xid = hdr.xid();
        // A reply that exposes responder memory gets RDMA_DONE whatever becomes of it,
        // so the responder can invalidate (the draft's §4.1.3).
        let done_key = if hdr.read_segment_count() > 0 {
            hdr.chunk_lists()
                .and_then(|l| l.read_list().next())
                .map(|r| r.segment.handle)
        } else {
            None
        };
        let slot = self.slot_for_reply(xid);
        let matched = self
            .slots
            .get(slot as usize)
            .is_some_and(|s| s.state.in_use() && s.xid == xid && s.holds_credit);
        if !matched {
            self.stats.unmatched += 1;
            // A reply that says it wrote chunks, for no call that offered any: the
            // responder wrote where it had no business to. With per-RPC keys those
            // writes hit dead keys; with persistent ones they may have landed in buffers
            // another call now owns, so the connection cannot be trusted any more.
            let wrote = hdr.write_segment_count() > 0 || hdr.reply_segment_count() > 0;
            self.note_foreign_swi(t, swi, None);
            t.recvs.recycle(buf);
            if done_key.is_some() {
                self.stats.dones_for_unknown_xids += 1;
                self.send_done(t, xid, done_key);
            }
            if wrote {
                self.stats.stray_chunk_replies += 1;
                if self.mode == RegMode::Persistent {
                    let reason = CloseReason::ProtocolViolation(Violation::ChunkResultsForNoCall);
                    let _ = t.events.push_back(ConnEvent::DisconnectRequested(reason));
                    self.fail(t, reason);
                }
            }
            return;
        }
        self.credits.set_granted(hdr.credit());
        self.stats.reply_messages += 1;
        let s = &self.slots[slot as usize];
        let offered = &s.sink_caps[..s.sinks.len()];
        let max_pull = if t.extensions.reply_read_chunks {
            self.max_pull
        } else {
            0
        };
        let interp = interpret(&hdr, offered, s.reply_cap, max_pull);
        if interp == Interpreted::Done {
            self.stats.done_received += 1;
            t.recvs.recycle(buf);
            return;
        }
        // The responder is finished with the call: its credit comes back whatever the
        // call's fate.
        self.release_credit(slot);
        if self.slots[slot as usize].state.answered() {
            // A late reply to a call that timed out: its outcome is already delivered.
            self.stats.late_replies += 1;
            self.note_foreign_swi(t, swi, None);
            t.recvs.recycle(buf);
            self.progress(slot);
            if done_key.is_some() {
                self.send_done(t, xid, done_key);
            }
            return;
        }
        if self.slots[slot as usize].is_probe {
            let rtt = self.slots[slot as usize].age(now);
            let _ = t.events.push_back(ConnEvent::ProbeAnswered(rtt));
        }
        match interp {
            Interpreted::Reply {
                body: Body::Pull(plan),
                sink_lens,
            } => {
                t.recvs.recycle(buf);
                self.slots[slot as usize].pull = Some(PullState {
                    plan,
                    sink_lens,
                    swi,
                    pending: 0,
                    started: false,
                    ok: true,
                });
                if !self.start_pull(t, slot) && self.dones.pulls_waiting.push_back(slot).is_err() {
                    // Never: the queue holds every slot twice over.
                    self.slots[slot as usize].pull = None;
                    self.answer(
                        t,
                        slot,
                        CallStatus::Transport(TransportError::BadReply(
                            crate::requester::BadReply::ReadChunkTooLarge,
                        )),
                        None,
                        [0; MAX_WRITE_SINKS],
                        swi,
                    );
                    self.send_done(t, xid, done_key);
                }
            }
            Interpreted::Reply { body, sink_lens } => {
                let reply = match body {
                    Body::Inline {
                        start,
                        len,
                        padding,
                    } => Reply {
                        buf,
                        start,
                        len,
                        padding,
                    },
                    Body::Pull(_) => return,
                    Body::InChunk { len } => {
                        t.recvs.recycle(buf);
                        match self.slots[slot as usize].reply_buf.take() {
                            Some(rb) => Reply {
                                buf: rb,
                                start: 0,
                                len,
                                padding: None,
                            },
                            None => {
                                // `interpret` refused Reply chunks the call did not
                                // offer, so this is that case seen late.
                                let st = CallStatus::Transport(TransportError::BadReply(
                                    crate::requester::BadReply::UnofferedReplyChunk,
                                ));
                                self.answer(t, slot, st, None, [0; MAX_WRITE_SINKS], swi);
                                return;
                            }
                        }
                    }
                };
                let status = status_of(reply.bytes());
                self.answer(t, slot, status, Some(reply), sink_lens, swi);
            }
            Interpreted::Failed(e) => {
                t.recvs.recycle(buf);
                self.answer(
                    t,
                    slot,
                    CallStatus::Transport(e),
                    None,
                    [0; MAX_WRITE_SINKS],
                    swi,
                );
                // A Read chunk this requester will not pull still gets its DONE.
                if done_key.is_some() {
                    self.send_done(t, xid, done_key);
                }
            }
            Interpreted::Done => t.recvs.recycle(buf),
        }
    }

    /// Test hook: stop (or resume) sending RDMA_DONE.
    #[cfg(feature = "testing")]
    pub(crate) fn set_drop_dones(&mut self, on: bool) {
        self.drop_dones = on;
    }

    /// The first segment of the last responder-provided Read chunk pulled.
    #[cfg(feature = "testing")]
    pub(crate) fn last_pulled_segment(&self) -> Option<crate::wire::header::Segment> {
        self.last_pull
    }

    /// No Reply chunk is offered for `req`: the peer provides Read chunks for replies
    /// and the policy (for this call) relies on them.
    #[inline]
    fn read_chunk_replies(&self, t: &Transport, req: &CallRequest) -> bool {
        self.params
            .reply_chunks
            .omits_reply_chunk(t.extensions.reply_read_chunks, req.prefers_read_chunk_reply)
    }

    /// Whether `xid` names a call in flight that has no reply yet (the demux of a
    /// two-role connection asks, for RDMA_NOMSG with a Read chunk).
    pub(crate) fn awaits_reply(&self, xid: u32) -> bool {
        let slot = self.slot_for_reply(xid);
        self.slots
            .get(slot as usize)
            .is_some_and(|s| matches!(s.state, SlotState::Sent) && s.xid == xid && s.holds_credit)
    }

    fn release_credit(&mut self, slot: u32) {
        let s = &self.slots[slot as usize];
        if s.cont_credits | s.rsbuf != 0 {
            self.release_cont(slot);
        }
        let s = &mut self.slots[slot as usize];
        if s.holds_credit {
            s.holds_credit = false;
            // The reply matched (or can no longer come): a caller may carry this XID
            // again before the slot retires, so its mapping goes now.
            if s.own_xid {
                s.own_xid = false;
                self.own_xids.remove(s.xid);
            }
            if s.is_probe {
                self.credits.release_probe();
            } else {
                self.credits.release_owned();
            }
        }
    }

    /// Marks a key the responder invalidated with Send With Invalidate on a message
    /// that was not the reply of the key's call (RFC 8797 §4.1 forbids that; the key is
    /// dead all the same, so stop tracking it as live).
    fn note_foreign_swi(&mut self, t: &mut Transport, swi: Option<u32>, except: Option<u32>) {
        let Some(key) = swi else {
            return;
        };
        self.stats.foreign_invalidations += 1;
        for (i, s) in self.slots.iter_mut().enumerate() {
            if Some(i as u32) == except || !s.state.in_use() {
                continue;
            }
            for m in s.mrs.iter_mut() {
                if m.key == key && m.state == MrState::Registered {
                    m.state = MrState::Invalid;
                    self.mrs.give(m.mr);
                    if s.reserved > 0 {
                        s.reserved -= 1;
                        t.sq.give(1);
                    }
                }
            }
        }
    }

    /// Records how call `slot` ended and starts invalidating its keys; `swi` is the key
    /// the reply's Send With Invalidate already killed.
    fn answer(
        &mut self,
        t: &mut Transport,
        slot: u32,
        status: CallStatus,
        reply: Option<Reply>,
        sink_lens: [u32; MAX_WRITE_SINKS],
        swi: Option<u32>,
    ) {
        let open = t.is_open();
        let mut swi_used = swi.is_none();
        {
            let s = &mut self.slots[slot as usize];
            s.state = SlotState::Answered(Answer {
                status,
                reply,
                sink_lens,
                lost: false,
            });
            for (i, m) in s.mrs.iter_mut().enumerate() {
                if m.state != MrState::Registered {
                    continue;
                }
                if Some(m.key) == swi {
                    m.state = MrState::Invalid;
                    self.mrs.give(m.mr);
                    s.reserved = s.reserved.saturating_sub(1);
                    t.sq.give(1);
                    self.stats.remote_invalidations += 1;
                    swi_used = true;
                } else if open {
                    let wr_id = WrId::new(WrKind::LocalInv, slot)
                        .with_aux(i as u32)
                        .encode();
                    if t.stage(wr_id, SendOp::LocalInvalidate { key: m.key }, &[]) {
                        m.state = MrState::Invalidating;
                        s.reserved = s.reserved.saturating_sub(1);
                        s.wrs += 1;
                        self.stats.local_invalidations += 1;
                    }
                }
            }
        }
        if !swi_used {
            self.note_foreign_swi(t, swi, Some(slot));
        }
        self.progress(slot);
    }

    /// Delivers the outcome once every key is dead, and frees the slot once nothing is
    /// outstanding.
    fn progress(&mut self, slot: u32) {
        let hand_back = self.hand_back;
        let s = &mut self.slots[slot as usize];
        if !s.state.in_use() {
            return;
        }
        if matches!(s.state, SlotState::Answered(_)) && s.all_invalid() {
            if let SlotState::Answered(a) = core::mem::replace(&mut s.state, SlotState::Delivered) {
                // Persistent keys cannot be revoked: while the call still holds its
                // credit no reply has come, and the responder may yet read or write its
                // chunks. Its buffers stay in the slot until it retires (late reply or
                // drained connection) so no other call can be handed them meanwhile.
                let quarantine = self.mode == RegMode::Persistent && s.holds_credit;
                if !quarantine {
                    if let Some(rb) = s.reply_buf.take() {
                        rb.release_into(&mut self.large);
                    }
                } else {
                    self.stats.quarantined += 1;
                }
                // Built where the outcome queue stores it (an outcome is a few hundred
                // octets), with empty lists: on the common path they are, and building
                // them only to move them in would copy their uninitialised places.
                let lists = !quarantine && (!s.ddp_args.is_empty() || !s.sinks.is_empty());
                let resend = (a.lost && hand_back).then_some(Resend {
                    xid: Some(s.xid),
                    ..s.resend
                });
                let make = || Outcome {
                    tag: s.tag,
                    xid: s.xid,
                    status: a.status,
                    reply: a.reply,
                    msg: if quarantine { None } else { s.msg.take() },
                    ddp_args: DdpArgs::new(),
                    write_sinks: WriteSinks::new(),
                    resend,
                };
                if s.is_probe {
                    // The probe's buffers go back to their pools here.
                    let mut o = make();
                    if lists {
                        hand_back_lists(&mut o, s, &a.sink_lens);
                    }
                    drop(o);
                } else {
                    self.stats.outcomes += 1;
                    // Capacity is slots plus queue length, and each call has one outcome
                    // in it at most until the driver drains it, so this cannot be full.
                    if let Some(o) = self.outcomes.push_back_with(make) {
                        if lists {
                            hand_back_lists(o, s, &a.sink_lens);
                        }
                    }
                }
            }
        }
        let s = &mut self.slots[slot as usize];
        if s.retirable() {
            s.state = SlotState::Free;
            if s.parked {
                s.parked = false;
                debug_assert!(self.parked > 0);
                self.parked = self.parked.saturating_sub(1);
            }
            s.reply_ddp = false;
            if s.own_xid {
                s.own_xid = false;
                self.own_xids.remove(s.xid);
            }
            s.mrs.clear();
            if let Some(b) = s.pull_buf.take() {
                b.release_into(&mut self.large);
            }
            // Quarantined buffers (persistent mode) are safe to reuse now: the peer
            // answered, or the queue pair is drained.
            s.msg = None;
            s.ddp_args.clear();
            s.sinks.clear();
            if let Some(rb) = s.reply_buf.take() {
                rb.release_into(&mut self.large);
            }
            if !s.is_probe {
                let _ = self.free_slots.push(slot);
            }
        }
    }

    /// Stops new work and starts draining for `reason`.
    fn fail(&mut self, t: &mut Transport, reason: CloseReason) {
        if matches!(t.state, ConnState::Draining | ConnState::Closed) {
            return;
        }
        t.fail(reason);
        self.on_fail(t);
    }

    /// The connection failed (here or in the other half): calls that never touched the
    /// wire fail now, and reserved send-queue room comes back. Runs once.
    pub(crate) fn on_fail(&mut self, t: &mut Transport) {
        if self.failed {
            return;
        }
        self.failed = true;
        let lost = self.lost(t);
        // Calls that never touched the wire fail now (and may go on the next
        // connection, under their own XID or, if none was chosen, none yet).
        while let Some(q) = self.queue.pop_front() {
            let resend = self.hand_back.then_some(Resend {
                xid: q.req.xid,
                ..Resend::of(&q.req)
            });
            let xid = q.req.xid.unwrap_or(0);
            let mut o = Outcome::unsent(q.tag, xid, q.req, CallStatus::Transport(lost));
            o.resend = resend;
            self.push_outcome(o);
        }
        self.credits.set_waiting(0);
        self.dones.clear();
        // Invalidations not yet staged never will be: give their send-queue room back.
        for s in self.slots.iter_mut() {
            if s.reserved > 0 {
                t.sq.give(s.reserved);
                s.reserved = 0;
            }
        }
    }

    /// The connection drained (nothing outstanding): kill every key by deregistering
    /// the fast-registration slots, then fail what is left and release every buffer.
    #[cold]
    pub(crate) fn close_drained(&mut self, t: &mut Transport) {
        self.mrs.destroy();
        let lost = self.lost(t);
        for i in 0..self.slots.len() {
            let slot = i as u32;
            if !self.slots[i].state.in_use() {
                continue;
            }
            self.release_credit(slot);
            let s = &mut self.slots[i];
            for m in s.mrs.iter_mut() {
                m.state = MrState::Invalid;
            }
            s.pull = None;
            if let Some(b) = s.pull_buf.take() {
                b.release_into(&mut self.large);
            }
            s.wrs = 0;
            if matches!(s.state, SlotState::Sent) {
                s.state = SlotState::Answered(Answer {
                    status: CallStatus::Transport(lost),
                    reply: None,
                    sink_lens: [0; MAX_WRITE_SINKS],
                    lost: true,
                });
            }
            self.progress(slot);
        }
        self.credits.reset();
        self.large.flush();
    }

    /// Per-poll work before posting: start queued calls.
    #[inline]
    pub(crate) fn prepare(&mut self, t: &mut Transport, now: Instant) {
        if self.dones.busy() && t.is_open() {
            self.resume_pulls(t);
        }
        if !self.queue.is_empty() && t.is_open() {
            self.admit_queued(t, now);
        }
    }
}

/// True when `o` owns nothing with a destructor (its buffers taken out, its lists
/// empty), so that leaving it undropped frees nothing too late
/// ([`RequesterHalf::drop_front_outcome`]).
#[inline(always)]
pub(crate) fn owns_nothing(o: &Outcome) -> bool {
    // The fields not checked below own nothing (a compile-time proof, so that a field
    // given a destructor later cannot be leaked here unnoticed).
    const _: () = assert!(
        !core::mem::needs_drop::<crate::requester::CallStatus>()
            && !core::mem::needs_drop::<Option<crate::requester::Resend>>()
    );
    // Every field named (no `..`): a field added to `Outcome` fails to compile here
    // until it is checked or proven to own nothing above.
    let Outcome {
        tag: _,
        xid: _,
        status: _,
        resend: _,
        msg,
        reply,
        ddp_args,
        write_sinks,
    } = o;
    msg.is_none() && reply.is_none() && ddp_args.is_empty() && write_sinks.is_empty()
}

/// Moves the DDP arguments and write sinks of the call in `slot` into its outcome `o`,
/// each sink with its length set to the octets the responder wrote (`lens`, by sink).
#[cold]
fn hand_back_lists(o: &mut Outcome, slot: &mut CallSlot, lens: &[u32; MAX_WRITE_SINKS]) {
    o.ddp_args = core::mem::take(&mut slot.ddp_args);
    for (i, mut sink) in slot.sinks.drain().enumerate() {
        let _ = sink.set_len(lens.get(i).copied().unwrap_or(0) as usize);
        let _ = o.write_sinks.push(sink);
    }
}

fn refuse(reason: SubmitRefusal, req: CallRequest) -> SubmitError {
    SubmitError {
        reason,
        request: Box::new(req),
    }
}
