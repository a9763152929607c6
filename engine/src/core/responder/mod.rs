//! The responder (server) protocol core: receives calls, pulls their Read chunks,
//! hands them to the [`Service`], and sends replies inline, through the Reply chunk, or
//! as RDMA_ERROR — as a sans-IO state machine.
//!
//! Life of a call (one reply context each):
//!
//! 1. The receive completes; the receive is restocked at once, so the credits granted
//!    stay backed by posted receives. The header is parsed: a bad one is answered with
//!    ERR_VERS or ERR_CHUNK (RFC 8166 §4.5) and goes no further.
//! 2. Read chunks (a long call's Position-Zero chunk, DDP-eligible arguments) are
//!    pulled with RDMA Reads into large registered buffers.
//! 3. The [`Service`] handles the call and writes its reply into a registered buffer:
//!    right behind the room reserved for the reply's header in the context's send
//!    buffer, or in a large buffer when the requester offered a Reply chunk.
//! 4. The reply goes out as one chain: RDMA Writes of DDP results into the Write chunks,
//!    RDMA Writes of the body into the Reply chunk when it does not fit inline, then the
//!    Send (with Invalidate, when both peers allow it: RFC 8797 §4.1) of the header and
//!    the inline body. When the Send completes the context's buffers go back.

mod cont;
mod context;
mod ddp_reply;
mod exposed;
mod inspect;
pub(crate) use inspect::MAX_CHUNK_SEGMENTS;
mod plain;
mod reply;
mod send_ddp;

/// Segments a group's send-based DDP items may span (one per transmission).
const GROUP_SEGMENTS: usize = crate::wire::private_data::CONTINUATION_GROUP_MAX as usize;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma_pools::{Pool, PoolCache};

use self::context::{Context, Delivery, Step};
use self::exposed::{ExpState, ExposedTable};
use self::inspect::inspect;
use self::plain::PlainAnswer;
use super::config::{ConnConfig, Role};
use super::fixed::{FixedQueue, FixedVec, IndexStack};
use super::mrs::FastRegSlot;
use super::regbuf::RegBuf;
use super::rpcmsg::encode_accepted_error;
use super::transport::{ConnState, Transport};
use super::wrid::{WrId, WrKind};
use super::{CoreError, CorePools};
use crate::credits::GrantPolicy;
use crate::fabric::{Completion, RemoteAddr, SendOp};
use crate::service::{
    CallView, DdpItem, Padding, ReplyWriter, Service, ServiceError, MAX_DDP_ITEMS, MAX_WRITE_CHUNKS,
};
use crate::wire::header::{
    BodyView, HeaderView, Limits, Procedure, RdmaError, ResponderAction, FIXED_HEADER_LEN,
    SEGMENT_LEN, WORD_LEN,
};
use crate::wire::xdr::pad4;

/// Counters of one responder connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ResponderStats {
    /// Calls handed to the service.
    pub calls: u64,
    /// Of those, long calls (Position-Zero Read chunk).
    pub long_calls: u64,
    /// DDP-eligible arguments pulled from Read chunks.
    pub ddp_args: u64,
    /// DDP results written into Write chunks.
    pub ddp_results: u64,
    /// Replies sent inline.
    pub inline_replies: u64,
    /// Replies written into the Reply chunk.
    pub chunk_replies: u64,
    /// Calls the service declined (answered with an RPC error reply).
    pub service_errors: u64,
    /// RDMA_ERROR / ERR_VERS sent.
    pub err_vers: u64,
    /// RDMA_ERROR / ERR_CHUNK sent (bad headers, unusable chunks, replies too large).
    pub err_chunk: u64,
    /// Messages dropped without an answer (no XID, RDMA_ERROR from a requester, or a
    /// version 1 message longer than the receive size that ran into a DDP segment).
    pub dropped: u64,
    /// Calls the service chose not to answer (`ReplyWriter::no_reply`): each keeps one
    /// of the requester's credits until the requester gives up on the call.
    pub no_reply: u64,
    /// Of `ddp_results`, those written straight from memory the engine already held
    /// (the call's pulled Read chunks, a service's shared buffer): no copy was made.
    pub ddp_zero_copy: u64,
    /// Calls beyond the credits granted: protocol violations, dropped (RFC 8166
    /// §3.3.1). Counted when a call finds every context in use and the held calls
    /// already as many as the largest grant (`GrantPolicy::max`): the requester then
    /// has more calls outstanding than it was ever granted.
    pub overruns: u64,
    /// Calls within the credits that found every reply context in use (their replies'
    /// Sends not yet completed) and were held, receive buffer and all, in arrival
    /// order until a context freed. None is lost: each is served in turn.
    pub held: u64,
    /// Calls held now, waiting for a context (a gauge, not a counter).
    pub holding: u64,
    /// Calls whose context found no header buffer in the pool it draws them from
    /// (`CorePools::headers`: a poll group's, all in use). Not dropped: such a call
    /// waits, stalled in arrival order, until a buffer comes back.
    pub header_starved: u64,
    /// RDMA_DONE messages received.
    pub done_received: u64,
    /// Replies sent as RDMA_NOMSG with a responder-provided Position-Zero Read chunk
    /// (draft-cel-nfsv4-rpcrdma-reliable-reply §4.1.1).
    pub read_chunk_replies: u64,
    /// RDMA_DONE for an XID with no exposed reply: dropped silently (§4.1.3).
    pub done_unknown: u64,
    /// Exposed replies whose DONE never came within `ConnConfig::done_timeout`,
    /// invalidated anyway.
    pub done_timeouts: u64,
    /// Exposed replies whose key died by the DONE's Send With Invalidate.
    pub done_remote_invalidations: u64,
    /// Exposed replies now: registered, or not yet given back (a gauge, not a counter).
    pub exposed: u64,
    /// Replies sent with Send With Invalidate.
    pub remote_invalidations: u64,
    /// Times a context waited for buffers or send-queue room.
    pub stalls: u64,
    /// Completions whose `wr_id` named nothing outstanding (provider bugs).
    pub stray_completions: u64,
    /// Refills that found the receive pool empty.
    pub recv_starved: u64,
    /// Work requests the outbox refused (zero unless its sizing invariant broke).
    pub outbox_overflows: u64,
    /// RDMA_OPTIONAL messages received (draft-dnoveck-rpcrdma-rtrext transmissions).
    pub optional_messages: u64,
    /// Calls received as continuation groups of more than one message.
    pub cont_calls: u64,
    /// Replies sent as continuation groups.
    pub cont_replies: u64,
    /// Sends those reply groups took.
    pub cont_reply_messages: u64,
    /// Call groups found broken (each answered with ROPT_XMTERR when it could be).
    pub broken_call_groups: u64,
    /// ROPT_XMTERR sent.
    pub transmit_errors_sent: u64,
    /// ROPT_XMTERR received (a reply group the requester found broken).
    pub transmit_errors_received: u64,
    /// ROPT_XCHUPD received (the peer's characteristics replaced).
    pub chars_updates: u64,
    /// ROPT_XCHUPD sent (`Connection::send_chars_update`).
    pub chars_updates_sent: u64,
    /// Bulk items received by send-based DDP (each handed to the service in the DDP
    /// segment it landed in).
    pub send_ddp_items: u64,
    /// Replies whose bulk item went by send-based DDP into the requester's receive
    /// segment (XMDTYPE_TBSN results).
    pub send_ddp_replies: u64,
    /// Reply directions answered XMDTYPE_TOOSHORT: the item was shorter than the
    /// requester's `minlen` and went in the payload stream.
    pub ddp_replies_too_short: u64,
    /// Reply directions answered XMDTYPE_NOITEM: the reply had no DDP-eligible item.
    pub ddp_replies_no_item: u64,
}

/// The segments of a call's send-based DDP items that span several receive segments
/// (`DdpItem::segments`): each such item's first sink, then the segments kept after it
/// (`Context::ddp_more`), and where each item's list is (`(from, n)`, by sink).
struct SegmentLists<'a> {
    slices: [&'a [u8]; GROUP_SEGMENTS],
    spans: [(usize, usize); 1 + MAX_DDP_ITEMS],
}

impl<'a> SegmentLists<'a> {
    /// `spans[k]` is how many of `more` follow sink `k`.
    #[cold]
    #[inline(never)]
    fn of(sinks: &'a [RegBuf], more: &'a [RegBuf], spans: &[u8]) -> SegmentLists<'a> {
        let mut l = SegmentLists {
            slices: [&[]; GROUP_SEGMENTS],
            spans: [(0, 0); 1 + MAX_DDP_ITEMS],
        };
        let (mut at, mut more_at) = (0usize, 0usize);
        for (k, &extra) in spans.iter().enumerate() {
            let extra = usize::from(extra);
            if extra == 0 {
                continue;
            }
            let (Some(first), Some(rest)) = (sinks.get(k), more.get(more_at..more_at + extra))
            else {
                break;
            };
            if at + 1 + extra > GROUP_SEGMENTS || k >= l.spans.len() {
                break;
            }
            l.slices[at] = first.as_slice();
            for (d, r) in l.slices[at + 1..].iter_mut().zip(rest) {
                *d = r.as_slice();
            }
            l.spans[k] = (at, 1 + extra);
            at += 1 + extra;
            more_at += extra;
        }
        l
    }
}

/// A call waiting for a free reply context.
// A group carries its send-based DDP placement and landed segments (`cont::CallAsm`,
// some 660 octets): boxing it would allocate on the overload path, and the queue's
// capacity is the largest grant, its entries untouched until a call is held.
#[allow(clippy::large_enum_variant)]
enum Held {
    /// A call in one message: its receive buffer.
    Call(RegBuf),
    /// A whole message-continuation call group, assembled (`cont.rs`).
    Group(cont::CallAsm),
    /// The answer to a call that cannot be served, which needs a context of its own
    /// to be sent: RDMA_ERROR ERR_CHUNK, or ROPT_XMTERR for a broken call group
    /// (`cont.rs`). Held like the call it answers, so it is never dropped for want
    /// of a context while the requester stays within its credits.
    Answer(cont::ErrorAnswer),
}

/// The credits a reply grants now: `policy`'s choice within what the connection's
/// receives allow (on a shared receive queue, within the room its ledger leaves; the
/// grant is then counted there, see `core/srq_ledger.rs`).
#[inline(always)]
fn grant(policy: &GrantPolicy, t: &mut Transport) -> u32 {
    let credit = policy.grant(t.recvs.grant_room());
    t.recvs.granted(credit);
    credit
}

/// The responder side of one connection, serving calls with `S`.
pub struct ResponderHalf<S> {
    service: S,
    policy: Arc<GrantPolicy>,
    limits: Limits,
    ctxs: Box<[Context]>,
    free: IndexStack,
    stalled: FixedQueue<u32>,
    /// Calls that found every context in use, in arrival order: their receive buffers,
    /// at most the largest grant's worth (a well-behaved requester never has more
    /// unanswered). Served as contexts free ([`Self::admit_held`]); non-empty only
    /// while no context is free, whenever a completion or a poll is done.
    held: FixedQueue<Held>,
    /// [`Self::admit_held`] is running (a context it frees is taken by its own loop).
    admitting: bool,
    large: PoolCache,
    /// A large buffer a plain reply's body was written in and copied out of behind its
    /// header (`stage_plain_send`): the next plain call writes its body there, without
    /// a get from and a put into `large` per call (one buffer at most, given back with
    /// the cache's).
    spare_body: Option<RegBuf>,
    /// Where contexts draw their header buffers while in use (`CorePools::headers`).
    headers: Option<PoolCache>,
    /// Contexts taken that still wait for a header buffer from `headers`.
    header_waits: u32,
    max_chunk: u64,
    /// `ConnConfig::max_chunks`: DDP Read chunks and Write chunks accepted per call.
    max_chunks: usize,
    sq_depth: u32,
    /// The connection's failure has been handled here ([`Self::on_fail`]).
    failed: bool,
    /// Replies exposed in responder-provided Read chunks (empty until the driver gives
    /// fast-registration slots: [`Self::set_reply_mrs`]).
    exposed: ExposedTable,
    /// `ConnConfig::done_timeout`.
    done_timeout: Duration,
    /// The latest `now` seen (each poll's): the start of an exposed reply's wait.
    now: Option<Instant>,
    /// Message continuation: the call group in progress.
    cont: cont::RespCont,
    stats: ResponderStats,
}

impl<S: Service> ResponderHalf<S> {
    /// A responder for `cfg` over registered `pools`, serving calls with `service` and
    /// granting credits by `policy`. Receives are staged at once.
    pub fn new(
        cfg: &ConnConfig,
        pools: &CorePools,
        service: S,
        policy: Arc<GrantPolicy>,
    ) -> Result<Self, CoreError> {
        cfg.validate().map_err(CoreError::Config)?;
        // The connection offers the private data; checked here so a bad inline size
        // is refused whatever roles the connection plays.
        cfg.private_data()
            .map_err(|e| CoreError::Config(crate::core::config::ConfigError::InlineSize(e)))?;
        let sizes = cfg.sizes(Role::Responder);
        let mut ctxs = Vec::with_capacity(sizes.slots as usize);
        for _ in 0..sizes.slots {
            let send = RegBuf::from_pool(&pools.send).map_err(CoreError::Buffers)?;
            // Parked buffers are never posted: only drawn ones need a registration.
            if pools.headers.is_none() {
                send.lkey().map_err(CoreError::Buffers)?;
            }
            ctxs.push(Context::new(send));
        }
        if let Some(h) = &pools.headers {
            if h.buf_size() < pools.send.buf_size() {
                return Err(CoreError::Buffers(super::RegBufError::TooLong {
                    len: pools.send.buf_size(),
                    capacity: h.buf_size(),
                }));
            }
        }
        // A well-behaved requester has at most the largest grant unanswered, so no more
        // calls can ever wait for a context.
        let held_cap = policy.max() as usize;
        Ok(ResponderHalf {
            service,
            policy,
            limits: cfg.limits,
            free: IndexStack::full(sizes.slots),
            stalled: FixedQueue::with_capacity(sizes.slots as usize),
            held: FixedQueue::with_capacity(held_cap),
            admitting: false,
            ctxs: ctxs.into_boxed_slice(),
            max_chunk: pools.large.buf_size() as u64,
            max_chunks: cfg.max_chunks as usize,
            large: pools.large.cache(),
            spare_body: None,
            headers: pools.headers.as_ref().map(Pool::cache),
            header_waits: 0,
            sq_depth: sizes.sq_depth,
            failed: false,
            exposed: ExposedTable::empty(),
            done_timeout: cfg.done_timeout,
            now: None,
            cont: cont::RespCont::new(cfg.extensions),
            stats: ResponderStats::default(),
        })
    }

    /// Gives the responder fast-registration slots to expose replies with (one reply
    /// each); keys' generation bytes come from `seed`. Without them a reply too large
    /// for what the requester offered gets ERR_CHUNK even when the peer negotiated
    /// responder-provided Read chunks.
    pub(crate) fn set_reply_mrs(&mut self, slots: &[FastRegSlot], seed: u64) {
        self.exposed = ExposedTable::new(slots, seed);
    }

    /// Whether replies can be exposed in responder-provided Read chunks (the driver gave
    /// fast-registration slots).
    pub(crate) fn can_expose(&self) -> bool {
        self.exposed.enabled()
    }

    /// The grant policy.
    pub fn policy(&self) -> &Arc<GrantPolicy> {
        &self.policy
    }

    /// The service.
    pub fn service(&self) -> &S {
        &self.service
    }

    /// The service, writable.
    pub fn service_mut(&mut self) -> &mut S {
        &mut self.service
    }

    /// Counters.
    pub fn stats(&self) -> ResponderStats {
        let mut s = self.stats;
        s.exposed = u64::from(self.exposed.live);
        s.holding = self.held.len() as u64;
        s
    }

    /// Returns the large buffers parked in this half's cache to the pool's ring.
    pub(crate) fn flush_cache(&mut self) {
        if let Some(b) = self.spare_body.take() {
            b.release_into(&mut self.large);
        }
        self.large.flush();
        if let Some(h) = &mut self.headers {
            h.flush();
        }
    }

    /// A free context for a call, with its header buffer drawn if contexts draw them
    /// (`CorePools::headers`); `None` when none is free. When the header pool is empty
    /// the context is taken all the same and waits for a buffer before its first step
    /// that writes a reply ([`draw_header`](Self::draw_header), from `advance_with`): a
    /// call within the credits is held, never dropped (counted in
    /// [`ResponderStats::header_starved`]).
    #[inline(always)]
    fn take_ctx(&mut self) -> Option<u32> {
        let i = self.free.pop()?;
        if let Some(cache) = &mut self.headers {
            match RegBuf::from_cache(cache) {
                Ok(fresh) => {
                    let c = &mut self.ctxs[i as usize];
                    c.parked = Some(core::mem::replace(&mut c.send, fresh));
                }
                Err(_) => {
                    self.stats.header_starved += 1;
                    self.header_waits += 1;
                }
            }
        }
        Some(i)
    }

    /// Draws context `i`'s header buffer after `take_ctx` found the pool empty; false
    /// while it still is (the context stays stalled, in order, and is retried with the
    /// others: `prepare`, which a poll group runs for connections that wait, see
    /// [`waits_for_header`](Self::waits_for_header)).
    #[cold]
    fn draw_header(&mut self, i: u32) -> bool {
        let Some(cache) = &mut self.headers else {
            return true;
        };
        match RegBuf::from_cache(cache) {
            Ok(fresh) => {
                let c = &mut self.ctxs[i as usize];
                c.parked = Some(core::mem::replace(&mut c.send, fresh));
                self.header_waits -= 1;
                true
            }
            Err(_) => false,
        }
    }

    /// True when context `i` may write its reply header: it holds a drawn buffer, or
    /// contexts keep theirs.
    fn has_header(&mut self, i: u32) -> bool {
        self.ctxs[i as usize].parked.is_some() || self.headers.is_none() || self.draw_header(i)
    }

    /// True while a call waits for a header buffer of the pool contexts draw from (a
    /// poll group's, all in use): the group then runs this connection's `prepare` on
    /// its polls until the call has one, as no completion of its own may come.
    pub fn waits_for_header(&self) -> bool {
        self.header_waits > 0
    }

    /// Frees context `i`: a drawn header buffer goes back to its pool.
    #[inline(always)]
    fn put_ctx(&mut self, i: u32) {
        if let Some(cache) = &mut self.headers {
            let c = &mut self.ctxs[i as usize];
            match c.parked.take() {
                Some(parked) => core::mem::replace(&mut c.send, parked).release_into(cache),
                // Freed while still waiting for its header buffer (a failed connection).
                None => self.header_waits -= 1,
            }
        }
        let _ = self.free.push(i);
    }

    /// Calls received and not yet fully answered.
    pub fn active(&self) -> usize {
        self.ctxs.iter().filter(|c| c.step != Step::Free).count()
    }

    /// A receive completed successfully: a call (or something to answer or drop);
    /// `swi` is the key its Send With Invalidate killed.
    #[inline(always)]
    pub(crate) fn on_recv(&mut self, t: &mut Transport, buf: RegBuf, swi: Option<u32>) {
        if matches!(t.state, ConnState::Established | ConnState::Connecting) {
            self.on_receive(t, buf, swi);
        } else {
            t.recvs.recycle(buf);
        }
    }

    /// A send-queue request of this half completed (or was flushed).
    // Always inlined into the completion loop: a reply's Send completion is one per
    // call, and the call's register saves cost about a quarter of its work.
    #[inline(always)]
    pub(crate) fn on_send_completion(&mut self, t: &mut Transport, id: WrId, wc: &Completion) {
        match id.kind {
            WrKind::ReplyReg | WrKind::ReplyInv => self.on_exposed_completion(t, id, wc),
            WrKind::ChunkRead | WrKind::ChunkWrite | WrKind::ReplySend => {
                let i = id.slot as usize;
                let Some(c) = self.ctxs.get_mut(i) else {
                    self.stats.stray_completions += 1;
                    return;
                };
                // `matches!` rather than `==`: the derived `eq` (the enum has a variant
                // with data) is not always inlined, and this runs for every completion.
                if matches!(c.step, Step::Free) || c.wrs == 0 {
                    self.stats.stray_completions += 1;
                    return;
                }
                c.wrs -= 1;
                t.sq.give(1);
                if c.wrs == 0 {
                    if matches!(t.state, ConnState::Draining | ConnState::Closed)
                        || matches!(c.step, Step::Sent)
                    {
                        // Inlined here: a reply's Send completion frees nearly every
                        // context, so it spares the out-of-line call (and the context's
                        // second look-up: `release_inline`'s body on `c`).
                        if Self::empty_context(c, t, &mut self.large) {
                            self.release_sinks(i as u32);
                        }
                        self.put_ctx(i as u32);
                    } else if matches!(c.step, Step::Reading) {
                        c.step = Step::Dispatch;
                        self.run(t, i as u32);
                    }
                }
                // A context freed (a reply's Send completed): the oldest held call
                // takes it. Cold: held calls exist only while no context is free.
                if !self.held.is_empty() {
                    self.admit_held(t);
                }
            }
            _ => self.stats.stray_completions += 1,
        }
    }

    fn on_receive(&mut self, t: &mut Transport, buf: RegBuf, swi: Option<u32>) {
        // Restock first: the grant in the reply this call gets counts posted receives.
        // Where receives can be staged again in place, a call served at once restocks
        // with its own buffer instead, once read and before its reply's grant (`serve`);
        // every other path restocks before it may grant.
        let in_place = t.recvs.reposts_in_place();
        if !in_place {
            t.recvs.refill(&mut t.outbox);
        }
        // Send-based DDP: only an RDMA_OPTIONAL request may run into the DDP segment;
        // a version 1 message that did was longer than the receive size advertised
        // (RFC 8166 §3.3.2) and is dropped (DESIGN.md, "Send-based DDP").
        if t.recvs.landed_pending() && !crate::wire::rtr::is_optional(buf.as_slice()) {
            self.stats.dropped += 1;
            t.recvs.recycle(buf);
            return;
        }
        // Message continuation costs the common path one test: RDMA_OPTIONAL fails the
        // version 1 parse below and is taken there; only a group in progress needs a
        // look at every message (§4.2: no intervening message).
        if self.cont_group_open() {
            t.recvs.refill(&mut t.outbox);
            if self.takes_optional(t, buf.as_slice()) {
                self.on_optional(t, buf);
                return;
            }
            self.intervening(t, buf.as_slice());
        }
        let Some(i) = self.take_ctx() else {
            t.recvs.refill(&mut t.outbox);
            // Continuation transmissions need no context until their group completes.
            if self.takes_optional(t, buf.as_slice()) {
                self.on_optional(t, buf);
                return;
            }
            // A DONE needs no context: it still frees its exposed reply.
            if let Ok(h) = HeaderView::parse(buf.as_slice(), &self.limits) {
                if h.procedure() == Procedure::Done {
                    let xid = h.xid();
                    self.stats.done_received += 1;
                    t.recvs.recycle(buf);
                    self.on_done(t, xid, swi);
                    self.service.on_done(xid);
                    return;
                }
            }
            // Every context waits for its reply's Send completion, or serves a call:
            // the call waits its turn (or, beyond the credits, is dropped).
            self.hold(t, Held::Call(buf));
            return;
        };
        self.serve(t, i, buf, swi, in_place);
    }

    /// Serves the message in `buf` (a call, or something to answer or drop) with
    /// context `i`, just taken; `in_place` is `t.recvs.reposts_in_place()` (fixed
    /// once the connection is set up; the caller has it at hand).
    #[inline(always)]
    fn serve(&mut self, t: &mut Transport, i: u32, buf: RegBuf, swi: Option<u32>, in_place: bool) {
        enum Next {
            Drop,
            Done(u32),
            Error(u32, RdmaError),
            Call(u32, bool),
        }
        let parsed = HeaderView::parse(buf.as_slice(), &self.limits);
        // The common case first: a chunkless inline call, nobody waiting ahead of it,
        // on receives staged again in place. What the general steps below would make
        // of it is known without them (a call without reads, as `inspect` finds a
        // chunkless RDMA_MSG whenever the send queue has any depth; no ledger to count
        // it in, as in-place reposts exclude a shared receive queue), so it goes
        // straight to the service and its reply's Send: fewer instructions between the
        // receive completion and the reply's post (DESIGN.md, "the plain path").
        if let Ok(h) = &parsed {
            if in_place && self.sq_depth != 0 && self.stalled.is_empty() && self.is_plain(t, i, h) {
                // (`dispatch_plain` records the XID and the step: nothing is written
                // between `is_plain`'s look at the context and its own.)
                let (done, recv) = match self.dispatch_plain(t, i, h) {
                    PlainAnswer::Waits => {
                        t.recvs.refill(&mut t.outbox);
                        (false, Some(buf))
                    }
                    // The call is read and its reply, behind the room for its header,
                    // goes in a plain Send that has room: the receive buffer is staged
                    // again before the reply's grant counts the receives posted.
                    PlainAnswer::Inline(len) if t.sq.take(1) => {
                        t.recvs.repost(&mut t.outbox, buf);
                        self.stage_plain_taken(t, i, len);
                        (true, None)
                    }
                    // Anything else (no send-queue room included): as the general
                    // path would, restocked first.
                    PlainAnswer::Inline(_) | PlainAnswer::Other => {
                        t.recvs.refill(&mut t.outbox);
                        (self.reply_plain(t, i, h), Some(buf))
                    }
                };
                if let Some(recv) = recv {
                    self.put_back_recv(t, i, recv);
                }
                if !done {
                    self.stats.stalls += 1;
                    let _ = self.stalled.push_back(i);
                }
                return;
            }
        }
        // A chunkless inline call served at once restocks with its own receive buffer
        // (`RecvTable::repost`, below); anything else restocks now, before it may grant.
        let plain = matches!(&parsed, Ok(h) if self.stalled.is_empty() && self.is_plain(t, i, h));
        if !plain || !t.recvs.reposts_in_place() {
            t.recvs.refill(&mut t.outbox);
        }
        if parsed.is_err() && self.takes_optional(t, buf.as_slice()) {
            self.put_ctx(i);
            self.on_optional(t, buf);
            return;
        }
        let next = match &parsed {
            Err(e) => match e.responder_reply() {
                ResponderAction::Drop => Next::Drop,
                ResponderAction::ErrVers { xid } => Next::Error(
                    xid,
                    RdmaError::Vers {
                        low: crate::wire::header::RPCRDMA_VERSION,
                        high: crate::wire::header::RPCRDMA_VERSION,
                    },
                ),
                ResponderAction::ErrChunk { xid } => Next::Error(xid, RdmaError::Chunk),
            },
            Ok(h) => match h.procedure() {
                Procedure::Done => Next::Done(h.xid()),
                Procedure::Error => Next::Drop,
                Procedure::Msg | Procedure::Nomsg | Procedure::Msgp => {
                    match inspect(h, self.max_chunk, self.sq_depth, self.max_chunks) {
                        Ok(info) => Next::Call(h.xid(), info.read_chunks > 0),
                        Err(_) => Next::Error(h.xid(), RdmaError::Chunk),
                    }
                }
            },
        };
        if plain && !matches!(next, Next::Call(_, false)) {
            // Not reached for a chunkless RDMA_MSG (always a call); kept so that no
            // path can skip the restock.
            t.recvs.refill(&mut t.outbox);
        }
        let c = &mut self.ctxs[i as usize];
        match next {
            Next::Drop => {
                self.stats.dropped += 1;
                t.recvs.recycle(buf);
                self.put_ctx(i);
            }
            Next::Done(xid) => {
                self.stats.done_received += 1;
                t.recvs.recycle(buf);
                self.put_ctx(i);
                self.on_done(t, xid, swi);
                self.service.on_done(xid);
            }
            Next::Error(xid, e) => {
                t.recvs.recycle(buf);
                c.xid = xid;
                c.step = Step::Error(e);
                self.run_in_order(t, i);
            }
            Next::Call(xid, reads) => {
                t.recvs.credit_msg();
                c.xid = xid;
                c.step = if reads {
                    Step::StartReads
                } else {
                    Step::Dispatch
                };
                match &parsed {
                    // The common case: an inline call with nobody waiting ahead of it
                    // is served with the header just parsed, not parsed again.
                    Ok(h) if !reads && self.stalled.is_empty() => {
                        let (done, recv) = if !plain {
                            (self.advance_with(t, i, Some(h)), Some(buf))
                        } else if !t.recvs.reposts_in_place() {
                            (self.serve_plain(t, i, h), Some(buf))
                        } else {
                            // Served at the start (the plain path); should it ever get
                            // here, the general path, restocked first.
                            t.recvs.refill(&mut t.outbox);
                            (self.advance_with(t, i, Some(h)), Some(buf))
                        };
                        if let Some(buf) = recv {
                            self.put_back_recv(t, i, buf);
                        }
                        if !done {
                            self.stats.stalls += 1;
                            let _ = self.stalled.push_back(i);
                        }
                    }
                    _ => {
                        c.recv = Some(buf);
                        self.run_in_order(t, i);
                    }
                }
            }
        }
    }

    /// A call that found no free context: held in arrival order until one frees, or,
    /// when as many calls are held as the largest grant allows, dropped as an overrun
    /// (the requester exceeded its credits: RFC 8166 §3.3.1 lets the responder drop
    /// such a call; DESIGN.md, "Responder: a reply context").
    #[cold]
    #[inline(never)]
    fn hold(&mut self, t: &mut Transport, call: Held) {
        match self.held.push_back(call) {
            Ok(()) => self.stats.held += 1,
            Err(call) => {
                self.stats.overruns += 1;
                self.let_go(t, call);
            }
        }
    }

    /// Gives a held call's buffers back.
    fn let_go(&mut self, t: &mut Transport, call: Held) {
        match call {
            Held::Call(buf) => t.recvs.recycle(buf),
            Held::Group(asm) => self.let_go_group(t, asm),
            Held::Answer(_) => {}
        }
    }

    /// Serves held calls, oldest first, while contexts are free (a reply's Send
    /// completed, or a call went unanswered). On a connection no longer open they are
    /// let go: nothing may be sent.
    #[cold]
    #[inline(never)]
    fn admit_held(&mut self, t: &mut Transport) {
        if self.admitting {
            return;
        }
        self.admitting = true;
        while !self.held.is_empty() {
            if !matches!(t.state, ConnState::Established | ConnState::Connecting) {
                self.let_go_held(t);
                break;
            }
            // Answers held while connecting would only be held again: they wait for
            // `on_established`.
            if t.state == ConnState::Connecting {
                break;
            }
            let Some(i) = self.take_ctx() else {
                break;
            };
            match self.held.pop_front() {
                Some(Held::Call(buf)) => {
                    let in_place = t.recvs.reposts_in_place();
                    self.serve(t, i, buf, None, in_place)
                }
                Some(Held::Group(asm)) => self.complete_in(t, i, asm),
                Some(Held::Answer(a)) => self.answer_in(t, i, a),
                None => {
                    self.put_ctx(i);
                    break;
                }
            }
        }
        self.admitting = false;
    }

    /// Lets every held call go (the connection failed or drained).
    fn let_go_held(&mut self, t: &mut Transport) {
        while let Some(call) = self.held.pop_front() {
            self.let_go(t, call);
        }
    }

    /// Runs context `i` now, or queues it behind contexts already waiting for
    /// resources (keeping arrival order).
    fn run_in_order(&mut self, t: &mut Transport, i: u32) {
        if self.stalled.is_empty() {
            self.run(t, i);
        } else {
            let _ = self.stalled.push_back(i);
        }
    }

    /// Gives context `i` its receive buffer back after a step borrowed it, or recycles
    /// the buffer when the context was released meanwhile or its reply is posted (no
    /// work request of the reply points into the call's receive buffer, so a context
    /// waiting for its Send's completion holds no receive: the receive buffers a
    /// connection holds stay within those posted and its unanswered calls, held ones
    /// included).
    #[inline(always)]
    fn put_back_recv(&mut self, t: &mut Transport, i: u32, recv: RegBuf) {
        let c = &mut self.ctxs[i as usize];
        if matches!(c.step, Step::Free | Step::Sent) {
            t.recvs.recycle(recv);
        } else {
            c.recv = Some(recv);
        }
    }

    /// Runs `step` on context `i` with its call header. The header was validated on
    /// arrival; it is parsed again here because a context cannot hold a view of its
    /// own buffer. The buffer leaves the context for the duration of the step.
    fn with_header(
        &mut self,
        t: &mut Transport,
        i: u32,
        step: fn(&mut Self, &mut Transport, u32, &HeaderView<'_>) -> bool,
    ) -> bool {
        let Some(recv) = self.ctxs[i as usize].recv.take() else {
            self.ctxs[i as usize].step = Step::Error(RdmaError::Chunk);
            return true;
        };
        let progressed = match HeaderView::parse(recv.as_slice(), &self.limits) {
            Ok(h) => step(self, t, i, &h),
            Err(_) => {
                self.ctxs[i as usize].step = Step::Error(RdmaError::Chunk);
                true
            }
        };
        self.put_back_recv(t, i, recv);
        progressed
    }

    /// Advances context `i` as far as resources allow; queues it when they do not.
    fn run(&mut self, t: &mut Transport, i: u32) {
        if !self.advance(t, i) {
            self.stats.stalls += 1;
            let _ = self.stalled.push_back(i);
        }
    }

    /// Advances context `i`; false when it must wait for resources.
    fn advance(&mut self, t: &mut Transport, i: u32) -> bool {
        self.advance_with(t, i, None)
    }

    /// Advances context `i`, using `header` (the call's parsed transport header, when
    /// the caller has it) instead of parsing the receive buffer again.
    fn advance_with(&mut self, t: &mut Transport, i: u32, header: Option<&HeaderView<'_>>) -> bool {
        // A context that found the header pool empty waits for a buffer here, before
        // any step that could write its reply (when the connection is open: otherwise
        // the loop below releases it).
        if self.header_waits > 0
            && self.ctxs[i as usize].parked.is_none()
            && t.state == ConnState::Established
            && !self.draw_header(i)
        {
            return false;
        }
        loop {
            match t.state {
                ConnState::Established => {}
                // Calls can arrive before the passive side hears that the connection is
                // established; their work waits (nothing may be sent yet).
                ConnState::Connecting => return false,
                ConnState::Draining | ConnState::Closed => {
                    if self.ctxs[i as usize].wrs == 0 {
                        self.release(t, i);
                    }
                    return true;
                }
            }
            let progressed = match self.ctxs[i as usize].step {
                Step::StartReads => self.start_reads(t, i),
                Step::Dispatch => match header {
                    Some(h) => self.dispatch(t, i, h),
                    None => self.with_header(t, i, Self::dispatch),
                },
                Step::Reply => match header {
                    Some(h) => self.stage_reply(t, i, h),
                    None => self.with_header(t, i, Self::stage_reply),
                },
                Step::Error(e) => self.stage_error(t, i, e),
                Step::Free | Step::Reading | Step::Sent => return true,
            };
            if !progressed {
                return false;
            }
        }
    }

    /// Takes large buffers and send-queue room, and stages the RDMA Reads of every
    /// Read chunk.
    fn start_reads(&mut self, t: &mut Transport, i: u32) -> bool {
        let c = &mut self.ctxs[i as usize];
        let Some(recv) = c.recv.as_ref() else {
            c.step = Step::Error(RdmaError::Chunk);
            return true;
        };
        let Ok(h) = HeaderView::parse(recv.as_slice(), &self.limits) else {
            c.step = Step::Error(RdmaError::Chunk);
            return true;
        };
        let Ok(info) = inspect(&h, self.max_chunk, self.sq_depth, self.max_chunks) else {
            c.step = Step::Error(RdmaError::Chunk);
            return true;
        };
        if t.sq.free() < info.reads {
            return false;
        }
        // All or nothing: the Read sinks and, when a Reply chunk is offered, the body
        // buffer too, so no context ever holds buffers while waiting for more.
        let needs_body = h.reply_chunk().is_some() && c.body.is_none();
        while c.sinks.len() < info.read_chunks || (needs_body && c.body.is_none()) {
            match RegBuf::from_cache(&mut self.large) {
                Ok(b) if c.sinks.len() < info.read_chunks => {
                    let _ = c.sinks.push(b);
                }
                Ok(b) => c.body = Some(b),
                Err(_) => {
                    for b in c.sinks.drain() {
                        b.release_into(&mut self.large);
                    }
                    if let Some(b) = c.body.take() {
                        b.release_into(&mut self.large);
                    }
                    return false;
                }
            }
        }
        t.sq.take(info.reads);
        let mut n = 0u32;
        for (k, chunk) in h.read_chunks().enumerate() {
            let Some(sink) = c.sinks.get_mut(k) else {
                break;
            };
            let mut off = 0usize;
            for seg in chunk.segments() {
                if seg.length == 0 {
                    continue;
                }
                let Ok(sge) = sink.sge(off, seg.length as usize) else {
                    break;
                };
                let wr_id = WrId::new(WrKind::ChunkRead, i).with_aux(n).encode();
                let op = SendOp::RdmaRead {
                    remote: RemoteAddr {
                        addr: seg.offset,
                        rkey: seg.handle,
                    },
                };
                n += u32::from(t.stage(wr_id, op, &[sge]));
                off += seg.length as usize;
            }
            let _ = sink.set_len(off);
        }
        // Room was taken for every Read; give back what was not staged.
        t.sq.give(info.reads - n);
        c.wrs += n;
        self.stats.long_calls += u64::from(info.long);
        self.stats.ddp_args += (info.read_chunks - usize::from(info.long)) as u64;
        c.step = if n == 0 {
            Step::Dispatch
        } else {
            Step::Reading
        };
        true
    }

    /// Runs the service on a call whose chunks are all pulled; `h` is its header.
    fn dispatch(&mut self, t: &mut Transport, i: u32, h: &HeaderView<'_>) -> bool {
        let th = t.thresholds;
        let c = &mut self.ctxs[i as usize];
        // A continuation call whose requester lent receives: the reply may go as a
        // group, so it is written into a large buffer.
        let cont_cap = if c.rsbuf > 0 && t.extensions.continuation {
            (c.rsbuf as usize + 1)
                * (th.send as usize).saturating_sub(crate::wire::rtr::XMTRESP_HEADER_LEN)
        } else {
            0
        };
        // A send-based DDP reply's header (one result item) may be longer than the
        // version 1 header the body is placed behind.
        let ddp_reply_hdr = ddp_reply::reply_header_room(c.reply_ddp, c.rsbuf);
        let Context {
            send,
            body_off,
            sinks,
            ddp_more,
            ddp_spans,
            body,
            results,
            step,
            result_at,
            ..
        } = c;
        let Some(lists) = h.chunk_lists() else {
            *step = Step::Error(RdmaError::Chunk);
            return true;
        };
        let mut write_caps = [0u64; MAX_WRITE_CHUNKS];
        let mut n_writes = 0;
        let mut write_list_len = WORD_LEN;
        for (k, w) in lists.write_list().enumerate().take(MAX_WRITE_CHUNKS) {
            write_caps[k] = w.total_length();
            n_writes = k + 1;
            write_list_len += 2 * WORD_LEN + w.len() * SEGMENT_LEN;
        }
        // The largest header an inline reply can have: the Write list echoed with every
        // segment, no Read list, no Reply chunk.
        let inline_hdr_max =
            (FIXED_HEADER_LEN + WORD_LEN + write_list_len + WORD_LEN).max(ddp_reply_hdr);
        let send_limit = (th.send as usize).min(send.capacity());
        let inline_cap = send_limit.saturating_sub(inline_hdr_max);
        let reply_cap = lists.reply_chunk().map(|r| r.total_length());
        // With responder-provided Read chunks negotiated, no reply is too large for the
        // requester: the service writes into a large buffer, which is exposed when the
        // reply fits neither inline nor the Reply chunk (draft §4.1.1).
        let expose = t.extensions.reply_read_chunks && self.exposed.enabled();
        if (reply_cap.is_some() || expose || cont_cap > 0) && body.is_none() {
            match RegBuf::from_cache(&mut self.large) {
                Ok(b) => *body = Some(b),
                Err(_) => return false,
            }
        }
        let long = matches!(h.body(), BodyView::Nomsg(_));
        let padding = match h.body() {
            BodyView::Msgp { align, thresh, .. } => Some(Padding {
                align: *align,
                thresh: *thresh,
                base: h.header_len(),
            }),
            _ => None,
        };
        let msg: &[u8] = if long {
            sinks.get(0).map_or(&[], |s| s.as_slice())
        } else {
            h.after_header()
        };
        // A list rather than an array of placeholders: most calls have no DDP items,
        // and an empty list costs nothing to make.
        // A send-based DDP item across several receive segments is handed over as the
        // list of them (`DdpItem::segments`). The lists are built only for a call that
        // has such an item: filling their arrays cost a NULL call more than the rest
        // of its dispatch.
        let lists;
        let (slices, spans): (&[&[u8]], &[(usize, usize)]) = match ddp_more {
            Some(more) if !more.is_empty() => {
                lists = SegmentLists::of(sinks.as_slice(), more.as_slice(), ddp_spans);
                (&lists.slices, &lists.spans)
            }
            _ => (&[], &[]),
        };
        let mut items: FixedVec<DdpItem<'_>, MAX_DDP_ITEMS> = FixedVec::new();
        let mut moved = 0usize;
        for (k, chunk) in h.read_chunks().enumerate() {
            if long && k == 0 {
                continue;
            }
            let Some(sink) = sinks.get(k) else {
                break;
            };
            let position = chunk.position();
            let (from, n) = spans.get(k).copied().unwrap_or((0, 0));
            let segments = slices.get(from..from + n).unwrap_or(&[]);
            let item = DdpItem {
                position,
                msg_offset: (position as usize).saturating_sub(moved),
                data: if n == 0 { sink.as_slice() } else { &[] },
                segments,
            };
            if items.push(item).is_err() {
                break;
            }
            moved += pad4(item.len());
        }
        let view = CallView {
            xid: h.xid(),
            credit: h.credit(),
            msg,
            ddp: items.as_slice(),
            write_chunks: &write_caps[..n_writes],
            reply_chunk: reply_cap,
            padding,
            long,
        };
        let body_slice: &mut [u8] = match body.as_mut() {
            Some(b) => {
                let cap = if expose {
                    self.exposed.max_len()
                } else {
                    inline_cap.max(reply_cap.unwrap_or(0) as usize)
                }
                .max(cont_cap);
                let all = b.storage_mut();
                let n = cap.min(all.len());
                &mut all[..n]
            }
            None => {
                *body_off = inline_hdr_max;
                send.storage_mut()
                    .get_mut(inline_hdr_max..send_limit)
                    .unwrap_or(&mut [])
            }
        };
        let mut writer = ReplyWriter::new(
            body_slice,
            &write_caps[..n_writes],
            results,
            Some(&mut self.large),
            Some(sinks),
        );
        let result = self.service.handle_call(&view, &mut writer);
        // The items borrow the context's buffers; done with them before it is released.
        drop(items);
        if ddp_reply_hdr > 0 {
            ddp_reply::note_positions(result_at, &writer);
        }
        let (len, overflow, no_reply) = (writer.len(), writer.overflow(), writer.is_no_reply());
        self.dispatched(
            t,
            i,
            result,
            len,
            overflow.is_some(),
            no_reply,
            (inline_hdr_max, send_limit),
        );
        true
    }

    /// What the service made of context `i`'s call: a reply of `len` octets, or its
    /// error (`result`), a reply too large for anything the requester offered
    /// (`overflowed`), or none (`no_reply`). An error's reply is written where the
    /// service wrote: in the body buffer, or in the send buffer's `inline_area`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn dispatched(
        &mut self,
        t: &mut Transport,
        i: u32,
        result: Result<(), ServiceError>,
        len: usize,
        overflowed: bool,
        no_reply: bool,
        inline_area: (usize, usize),
    ) {
        self.stats.calls += 1;
        if no_reply {
            // Nothing goes out: the receive was reposted on arrival, so the grant stays
            // backed; the context and its buffers go back now.
            self.stats.no_reply += 1;
            self.ctxs[i as usize].results.clear();
            self.release(t, i);
            return;
        }
        let c = &mut self.ctxs[i as usize];
        c.delivery = match result {
            // An overflow means the reply fits nothing the requester offered, whatever
            // the handler made of it (RFC 8166 §3.5.4: ERR_CHUNK).
            _ if overflowed => {
                c.results.clear();
                Delivery::TooLarge
            }
            Ok(()) => Delivery::Body { len },
            Err(e) => {
                self.stats.service_errors += 1;
                c.results.clear();
                let out: &mut [u8] = match c.body.as_mut() {
                    Some(b) => b.storage_mut(),
                    None => c
                        .send
                        .storage_mut()
                        .get_mut(inline_area.0..inline_area.1)
                        .unwrap_or(&mut []),
                };
                match encode_accepted_error(c.xid, e, out) {
                    Ok(n) => Delivery::Body { len: n },
                    Err(_) => Delivery::TooLarge,
                }
            }
        };
        c.step = Step::Reply;
    }

    /// Stages RDMA_ERROR for context `i`.
    fn stage_error(&mut self, t: &mut Transport, i: u32, e: RdmaError) -> bool {
        if t.sq.free() < 1 {
            return false;
        }
        let credit = grant(&self.policy, t);
        let c = &mut self.ctxs[i as usize];
        let repr = crate::wire::header::HeaderRepr {
            xid: c.xid,
            credit,
            body: crate::wire::header::BodyRepr::Error(e),
        };
        let Ok(n) = repr.encode(c.send.storage_mut()) else {
            self.release(t, i);
            return true;
        };
        let Ok(sge) = c.send.sge(0, n) else {
            self.release(t, i);
            return true;
        };
        // The call's chunks and results are moot now, and so is its receive.
        if let Some(b) = c.recv.take() {
            t.recvs.recycle(b);
        }
        for b in c.sinks.drain() {
            b.release_into(&mut self.large);
        }
        c.results.clear();
        t.sq.take(1);
        let wr_id = WrId::new(WrKind::ReplySend, i).encode();
        if t.stage(wr_id, SendOp::Send, &[sge]) {
            c.wrs += 1;
        } else {
            t.sq.give(1);
        }
        c.step = Step::Sent;
        match e {
            RdmaError::Vers { .. } => self.stats.err_vers += 1,
            RdmaError::Chunk => self.stats.err_chunk += 1,
        }
        true
    }

    /// Returns context `i`'s buffers and frees it.
    fn release(&mut self, t: &mut Transport, i: u32) {
        self.release_inline(t, i);
    }

    /// [`release`](Self::release), inlined into its caller.
    #[inline(always)]
    fn release_inline(&mut self, t: &mut Transport, i: u32) {
        let Some(c) = self.ctxs.get_mut(i as usize) else {
            return;
        };
        if matches!(c.step, Step::Free) {
            return;
        }
        if Self::empty_context(c, t, &mut self.large) {
            self.release_sinks(i);
        }
        // Held calls are not admitted here: a release can happen in the middle of a
        // step of context `i` (an unanswered call, a failed encode), whose caller
        // still names `i`; they are admitted where a completion or a poll is done
        // with its context (`on_send_completion`, `prepare`).
        self.put_ctx(i);
    }

    /// [`release`](Self::release)'s work on context `c` (in use) itself: its receive
    /// and body buffers given back, its fields reset and its step `Free`. True when it
    /// also holds pulled Read chunks or send-based DDP segments, for
    /// [`release_sinks`](Self::release_sinks) (none for nearly every call); the caller
    /// then frees the context (`put_ctx`).
    #[inline(always)]
    fn empty_context(c: &mut Context, t: &mut Transport, large: &mut PoolCache) -> bool {
        if let Some(b) = c.recv.take() {
            t.recvs.recycle(b);
        }
        if let Some(b) = c.body.take() {
            b.release_into(large);
        }
        c.results.clear();
        c.wrs = 0;
        c.rsbuf = 0;
        c.reply_ddp = None;
        c.step = Step::Free;
        c.assembled || !c.sinks.is_empty()
    }

    /// [`release`](Self::release) of context `i`'s pulled Read chunks and send-based
    /// DDP segments.
    #[cold]
    #[inline(never)]
    fn release_sinks(&mut self, i: u32) {
        let c = &mut self.ctxs[i as usize];
        let assembled = c.assembled;
        for (k, b) in c.sinks.drain().enumerate() {
            if assembled && k > 0 {
                // A send-based DDP segment (`responder/send_ddp.rs`): the receive
                // table took it from the pool, not through this cache, so it goes
                // back there; through the cache it would grow the cache by one per
                // call until the receive table found the pool empty.
                drop(b);
            } else {
                b.release_into(&mut self.large);
            }
        }
        // More segments of send-based DDP items (only an assembled call has them, and
        // its `ddp_spans`): back to the pool, as above.
        if let Some(more) = c.ddp_more.as_mut() {
            more.clear();
        }
        c.ddp_spans = [0; 1 + MAX_DDP_ITEMS];
        c.assembled = false;
    }

    /// The connection failed (here or in the other half): stalled contexts stop, and
    /// contexts with nothing outstanding let go of their buffers. Idempotent.
    pub(crate) fn on_fail(&mut self, t: &mut Transport) {
        if self.failed {
            return;
        }
        self.failed = true;
        while self.stalled.pop_front().is_some() {}
        self.let_go_held(t);
        self.drop_group(t);
        // Invalidations not yet staged never will be: their room comes back (the keys
        // die when the driver deregisters the slots, after the drain).
        for e in self.exposed.entries.iter_mut() {
            t.sq.give(e.reserved);
            e.reserved = 0;
        }
        for i in 0..self.ctxs.len() {
            if self.ctxs[i].step != Step::Free && self.ctxs[i].wrs == 0 {
                self.release(t, i as u32);
            }
        }
    }

    /// The connection drained (nothing outstanding): every context lets go.
    #[cold]
    pub(crate) fn close_drained(&mut self, t: &mut Transport) {
        self.let_go_held(t);
        for i in 0..self.ctxs.len() {
            self.release(t, i as u32);
        }
        // Nothing is outstanding: every exposed reply lets go; the driver drops the
        // slots' handles next, which kills every key handed out.
        for e in self.exposed.entries.iter_mut() {
            if let Some(b) = e.body.take() {
                b.release_into(&mut self.large);
            }
            e.state = ExpState::Free;
            e.wrs = 0;
            e.reserved = 0;
        }
        self.exposed.live = 0;
        self.exposed.next_deadline = None;
        self.exposed.mrs.destroy();
        if let Some(b) = self.spare_body.take() {
            b.release_into(&mut self.large);
        }
        self.large.flush();
    }

    /// The connection is established: what had to wait for it goes now (the
    /// ROPT_XMTERR of a group broken while connecting, held: `answer_in`).
    pub(crate) fn on_established(&mut self, t: &mut Transport) {
        if !self.held.is_empty() {
            self.admit_held(t);
        }
    }

    /// Per-poll work before posting: resume contexts that waited for resources.
    #[inline]
    pub(crate) fn prepare(&mut self, t: &mut Transport, now: Instant) {
        self.now = Some(now);
        if self.exposed.next_deadline.is_some_and(|d| now >= d) {
            self.expire(t, now);
        }
        if t.is_open() {
            while let Some(&i) = self.stalled.front() {
                if !self.advance(t, i) {
                    break;
                }
                let _ = self.stalled.pop_front();
                // The step may have freed the context (a call left unanswered).
                if !self.held.is_empty() {
                    self.admit_held(t);
                }
            }
        }
    }
}
