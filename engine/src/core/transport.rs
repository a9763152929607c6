//! What both roles share: connection state, negotiated inline thresholds, the outbox,
//! the send-queue budget and the table of posted receives.

use core::fmt;
use std::time::Instant;

use rpcrdma_pools::{Pool, PoolCache};

use super::event::ConnEvent;
use super::fixed::{FixedQueue, IndexStack};
use super::outbox::Outbox;
use super::outbox::PostFailure;
use super::regbuf::RegBuf;
use super::signal::SendLedger;
use super::srq_ledger::Exposure;
use super::wrid::{WrId, WrKind};
use crate::fabric::{Completion, RemoteAddr, SendFlags, SendOp, Sge, WcOpcode, WcStatus};
use crate::wire::private_data::{Extensions, InlineThresholds};
use crate::wire::rtr::TransportChars;

/// Longest message a chunkless inline Send copies behind its transport header, so that
/// it gathers one entry instead of two: a call message (the requester's `stage_plain`)
/// or a reply body the service wrote in a large buffer (the responder's
/// `stage_plain_reply`). A second entry costs another key lookup and copy on shm and a
/// longer work request on a NIC; longer messages cost more to copy than that.
pub(crate) const COPY_BEHIND_HEADER_MAX: usize = 256;

/// Where a connection is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    /// Created: receives are staged, nothing may be sent until the CM reports the
    /// connection established.
    Connecting,
    /// Both directions work.
    Established,
    /// The connection failed or ended: nothing new is posted, and the core waits for
    /// every posted work request to come back (flushed) before releasing their memory.
    Draining,
    /// Everything came back; every call has its outcome and every buffer is released.
    Closed,
}

/// Why a connection stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// The connection manager reported a disconnect (either side).
    Disconnected,
    /// The peer rejected the connect request (a server refusing it, or no listener at
    /// the port): the connection never came up. A client may try again.
    Rejected,
    /// The connect request got no answer: the address or route did not resolve, or the
    /// attempt timed out or failed before the connection was set up.
    Unreachable,
    /// A work request failed with this status, which puts the queue pair in error.
    WorkRequestFailed(crate::fabric::WcStatus),
    /// The provider refused a post.
    PostRefused,
    /// The keepalive probe got no reply in time.
    PeerDead,
    /// The application closed the connection.
    Local,
    /// The peer broke the protocol in a way that makes going on unsafe (e.g. a reply
    /// claiming chunk writes for no outstanding call while chunks are registered
    /// persistently).
    ProtocolViolation(Violation),
    /// The peer aborted the connection saying why (an iWARP Terminate, in the
    /// provider-neutral [`PeerAbort`](crate::fabric::PeerAbort)). It replaces the failed
    /// work request or disconnect it caused as the reason.
    PeerAborted(crate::fabric::PeerAbort),
    /// Calls that timed out kept their credits past `ConnConfig::credit_reclaim`: the
    /// responder dropped them (or stalled), and RFC 8166 §3.3.1 credits cannot be taken
    /// back while it may still hold the calls, so the connection cannot go on at full
    /// window. `held` is how many credits were held by timed-out calls then.
    CreditsLost {
        /// Credits held by timed-out calls when the connection was declared broken.
        held: u32,
    },
}

/// How a peer broke the protocol so that the connection cannot go on
/// ([`CloseReason::ProtocolViolation`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Violation {
    /// A reply claiming Write or Reply chunk results for no call in flight while chunk
    /// memory is registered persistently: the writes may have landed in buffers
    /// another call now owns.
    #[error("reply with chunk results for no call")]
    ChunkResultsForNoCall,
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseReason::Disconnected => write!(f, "disconnected"),
            CloseReason::Rejected => write!(f, "the peer rejected the connect request"),
            CloseReason::Unreachable => write!(f, "no peer answered the connect request"),
            CloseReason::WorkRequestFailed(s) => write!(f, "work request failed: {s}"),
            CloseReason::PostRefused => write!(f, "provider refused a post"),
            CloseReason::PeerDead => write!(f, "peer did not answer the keepalive probe"),
            CloseReason::Local => write!(f, "closed locally"),
            CloseReason::ProtocolViolation(what) => write!(f, "protocol violation: {what}"),
            CloseReason::PeerAborted(why) => write!(f, "peer terminated the connection: {why}"),
            CloseReason::CreditsLost { held } => write!(
                f,
                "{held} credit(s) held by timed-out calls past the reclaim bound"
            ),
        }
    }
}

/// Counts of send-queue slots: each staged request holds one until its completion
/// (an unsignaled one until the completion that retires it, `core/signal.rs`), and calls reserve slots for work they will stage later
/// (local invalidations) so that it can never find the queue full.
#[derive(Debug)]
pub(crate) struct SqBudget {
    depth: u32,
    held: u32,
}

impl SqBudget {
    pub(crate) fn new(depth: u32) -> Self {
        SqBudget { depth, held: 0 }
    }

    #[inline]
    pub(crate) fn free(&self) -> u32 {
        self.depth - self.held
    }

    #[inline]
    pub(crate) fn take(&mut self, n: u32) -> bool {
        if self.free() < n {
            return false;
        }
        self.held += n;
        true
    }

    #[inline]
    pub(crate) fn give(&mut self, n: u32) {
        self.held = self.held.saturating_sub(n);
    }

    #[inline]
    pub(crate) fn held(&self) -> u32 {
        self.held
    }
}

/// The table of receive buffers, posted and reposted in one chain per poll.
pub(crate) struct RecvTable {
    bufs: Box<[Option<RegBuf>]>,
    free: IndexStack,
    cache: PoolCache,
    /// Receives staged or posted and not yet completed.
    posted: u32,
    /// Refills that found the pool empty.
    pub(crate) starved: u64,
    /// Set when the connection's receives come from a shared receive queue (a poll
    /// group's): its part of the queue's ledger, which bounds what replies may grant
    /// ([`grant_room`](Self::grant_room)); the table then stages none of its own.
    shared: Option<Exposure>,
    /// Send-based DDP: every receive also takes a DDP segment from the large pool
    /// (`core/recv_segments.rs`).
    pub(crate) segments: Option<super::recv_segments::RecvSegments>,
    /// Test hook (feature `testing`): receives staged again with the buffer their
    /// message came in ([`repost`](Self::repost)), so a test can tell the in-place
    /// restock from one through the cache.
    #[cfg(feature = "testing")]
    pub(crate) reposted_in_place: u64,
}

impl RecvTable {
    pub(crate) fn new(depth: u32, pool: &Pool) -> Self {
        RecvTable {
            bufs: (0..depth).map(|_| None).collect(),
            free: IndexStack::full(depth),
            cache: pool.cache(),
            posted: 0,
            starved: 0,
            shared: None,
            segments: None,
            #[cfg(feature = "testing")]
            reposted_in_place: 0,
        }
    }

    /// Posts every receive as a header segment of `head_len` octets and a DDP segment
    /// from `large` (send-based DDP), before anything was posted: the receives staged
    /// so far are staged again that way.
    pub(crate) fn scatter(
        &mut self,
        outbox: &mut Outbox,
        large: &Pool,
        head_len: u32,
        seg_len: u32,
    ) {
        self.unstage(outbox);
        let depth = self.bufs.len() as u32;
        self.free = IndexStack::full(depth);
        self.segments = Some(super::recv_segments::RecvSegments::new(
            depth, large, head_len, seg_len,
        ));
        self.refill(outbox);
    }

    /// Drops the staged receives (their buffers go back).
    fn unstage(&mut self, outbox: &mut Outbox) {
        outbox.clear_recvs();
        for b in self.bufs.iter_mut() {
            if let Some(buf) = b.take() {
                buf.release_into(&mut self.cache);
            }
        }
        if let Some(s) = self.segments.as_mut() {
            s.release_all();
        }
        self.posted = 0;
    }

    /// Receives staged or posted and not yet completed, what a reply may grant; with
    /// shared receives, the share the receive queue keeps for this connection.
    #[inline]
    pub(crate) fn posted(&self) -> u32 {
        match &self.shared {
            None => self.posted,
            Some(e) => e.target,
        }
    }

    /// The most the next reply may grant: the receives posted, or on a shared receive
    /// queue the share within the room its ledger leaves (`core/srq_ledger.rs`).
    #[inline]
    pub(crate) fn grant_room(&mut self) -> u32 {
        match &mut self.shared {
            None => self.posted,
            Some(e) => e.room(),
        }
    }

    /// A reply granting `credit` is being sent (counted on a shared receive queue's
    /// ledger).
    #[inline]
    pub(crate) fn granted(&mut self, credit: u32) {
        if let Some(e) = &mut self.shared {
            e.granted(credit);
        }
    }

    /// A call or continuation transmission arrived (a shared receive queue's ledger
    /// counts them to know when a smaller grant has been read).
    #[inline]
    pub(crate) fn credit_msg(&mut self) {
        if let Some(e) = &mut self.shared {
            e.credit_msg();
        }
    }

    /// An idle connection on a shared receive queue: its smaller grant sent is taken as
    /// read ([`Exposure::settle_idle`]).
    pub(crate) fn settle_idle(&mut self) {
        if let Some(e) = &mut self.shared {
            e.settle_idle();
        }
    }

    /// Receives of the connection's own staged or posted and not yet completed.
    #[inline]
    pub(crate) fn own_posted(&self) -> u32 {
        self.posted
    }

    /// Switches to receives from a shared receive queue, before anything was posted:
    /// the staged receives are dropped (their buffers go back), none are staged again,
    /// and replies grant what `exposure` allows.
    pub(crate) fn share(&mut self, outbox: &mut Outbox, exposure: Exposure) {
        self.unstage(outbox);
        // A shared queue's receives are the group's: no DDP segments behind them.
        self.segments = None;
        self.free = IndexStack::full(0);
        self.shared = Some(exposure);
    }

    /// Moves the share of a connection on a shared receive queue (ignored otherwise).
    pub(crate) fn set_share(&mut self, share: u32) {
        if let Some(e) = &mut self.shared {
            e.target = share.max(1);
        }
    }

    /// Stages a receive for every free slot, as far as the pool allows.
    // The check inline, the loop not: every poll asks, and most find every receive
    // already posted, which then costs a branch rather than a call.
    #[inline(always)]
    pub(crate) fn refill(&mut self, outbox: &mut Outbox) {
        if !self.free.is_empty() {
            self.stage_free(outbox);
        }
    }

    /// [`refill`](Self::refill)'s loop.
    fn stage_free(&mut self, outbox: &mut Outbox) {
        while !self.free.is_empty() {
            let mut buf = match RegBuf::from_cache(&mut self.cache) {
                Ok(b) => b,
                Err(_) => {
                    self.starved += 1;
                    return;
                }
            };
            let cap = match self.segments.as_ref() {
                Some(s) => (s.head_len() as usize).min(buf.capacity()),
                None => buf.capacity(),
            };
            let Ok(sge) = buf.sge(0, cap) else {
                // An unregistered receive pool is a setup bug; stop rather than spin.
                self.starved += 1;
                return;
            };
            let Some(slot) = self.free.pop() else {
                return;
            };
            let wr_id = WrId::new(WrKind::Recv, slot).encode();
            let pushed = match self.segments.as_mut() {
                None => outbox.push_recv(wr_id, sge),
                Some(s) => match s.sge_for(slot) {
                    Some(seg) => outbox.push_recv2(wr_id, [sge, seg]),
                    None => {
                        let _ = self.free.push(slot);
                        buf.release_into(&mut self.cache);
                        self.starved += 1;
                        return;
                    }
                },
            };
            if pushed.is_err() {
                let _ = self.free.push(slot);
                buf.set_len(0).ok();
                buf.release_into(&mut self.cache);
                return;
            }
            self.bufs[slot as usize] = Some(buf);
            self.posted += 1;
        }
    }

    /// Whether a completed receive's buffer may be staged again as it is
    /// ([`repost`](Self::repost)): the connection's own receives, one buffer each (not a
    /// shared receive queue's, nor scattered over DDP segments).
    #[inline(always)]
    pub(crate) fn reposts_in_place(&self) -> bool {
        self.segments.is_none() && self.shared.is_none()
    }

    /// Stages `buf`, the buffer of a completed receive of this table's whose message
    /// was read, as a receive again (then any other free slot, as
    /// [`refill`](Self::refill)): the restock of a served call without taking a buffer
    /// from the cache and giving this one back. With no slot free it goes back to the
    /// cache. Only when [`reposts_in_place`](Self::reposts_in_place).
    #[inline(always)]
    pub(crate) fn repost(&mut self, outbox: &mut Outbox, buf: RegBuf) {
        if self.repost_only(outbox, buf) {
            self.refill(outbox);
        }
    }

    /// [`repost`](Self::repost) without the refill of the other free slots after it
    /// (which the next `Connection::prepare` makes before anything is sent): true when
    /// `buf` was staged.
    #[inline(always)]
    fn repost_only(&mut self, outbox: &mut Outbox, mut buf: RegBuf) -> bool {
        let Some(slot) = self.free.pop() else {
            buf.release_into(&mut self.cache);
            return false;
        };
        let staged = match buf.sge(0, buf.capacity()) {
            Ok(sge) => outbox
                .push_recv(WrId::new(WrKind::Recv, slot).encode(), sge)
                .is_ok(),
            Err(_) => false,
        };
        if !staged {
            let _ = self.free.push(slot);
            buf.release_into(&mut self.cache);
            return false;
        }
        let _ = buf.set_len(0);
        self.bufs[slot as usize] = Some(buf);
        self.posted += 1;
        #[cfg(feature = "testing")]
        {
            self.reposted_in_place += 1;
        }
        true
    }

    /// True when [`refill`](Self::refill) may wait, on a connection that only makes
    /// calls, until it next sends (`Connection::prepare`): at most `lent` receives short
    /// (at most one when `lent` is 0), `lent` being the outcomes the caller has yet to
    /// take, each holding the buffer of the reply that ended its call, which
    /// [`give_back`](Self::give_back) stages again where it lies; the receives this
    /// table's own, one buffer each. Short by that many, a table sized for a reply to
    /// every call slot plus strays (`Sizes::rq_depth`) still holds one for every reply
    /// that can come: each receive missing is one a reply took, so its call needs none
    /// any more. A batch of replies (calls at depth) is restocked with its own buffers
    /// as the caller gives them back, none taken from the cache and none cached.
    #[inline(always)]
    pub(crate) fn short_by_at_most(&self, lent: usize) -> bool {
        self.free.len() <= lent.max(1) && self.reposts_in_place()
    }

    /// Gives back `buf`, a reply's buffer the caller has read: staged again as a receive
    /// where it lies ([`repost`](Self::repost)) when it is one of this table's receive
    /// buffers and a slot is free (a requester leaves the slot of the reply it handed
    /// out free: [`short_by_at_most`](Self::short_by_at_most)), else through the cache, as
    /// [`recycle`](Self::recycle). Only while the connection is open.
    #[inline(always)]
    pub(crate) fn give_back(&mut self, outbox: &mut Outbox, buf: RegBuf) {
        if !self.free.is_empty() && self.reposts_in_place() && buf.is_from(&self.cache) {
            // The other free slots wait for the buffers of the other outcomes, or for
            // the refill before the next Send.
            self.repost_only(outbox, buf);
        } else {
            self.recycle(buf);
        }
    }

    /// Takes the buffer of a completed receive, `byte_len` of it valid.
    #[inline]
    pub(crate) fn complete(&mut self, slot: u32, byte_len: u32) -> Option<RegBuf> {
        let mut buf = self.bufs.get_mut(slot as usize)?.take()?;
        let _ = self.free.push(slot);
        self.posted = self.posted.saturating_sub(1);
        // With DDP segments the header segment is what was posted of this buffer.
        let cap = match self.segments.as_mut() {
            Some(s) => {
                s.complete(slot, byte_len);
                (s.head_len() as usize).min(buf.capacity())
            }
            None => buf.capacity(),
        };
        let len = (byte_len as usize).min(cap);
        let _ = buf.set_len(len);
        Some(buf)
    }

    /// Gives a buffer back to the pool through this table's cache.
    pub(crate) fn recycle(&mut self, buf: RegBuf) {
        buf.release_into(&mut self.cache);
    }

    /// The buffers of the receives staged or posted now.
    pub(crate) fn posted_bufs(&self) -> impl Iterator<Item = &RegBuf> {
        self.bufs.iter().flatten()
    }

    /// Returns cached buffers to the pool, so it reads as full once everything is back.
    pub(crate) fn flush_cache(&mut self) {
        self.cache.flush();
    }

    /// The DDP segment the last completed receive's Send reached into, if any
    /// (`core/recv_segments.rs`).
    #[inline]
    pub(crate) fn take_landed(&mut self) -> Option<RegBuf> {
        self.segments.as_mut().and_then(|s| s.take_landed())
    }

    /// The last completed receive's Send ran into its DDP segment.
    #[inline]
    pub(crate) fn landed_pending(&self) -> bool {
        self.segments.as_ref().is_some_and(|s| s.landed_pending())
    }
}

/// State and resources every connection has, whatever its role. Public only so the
/// sealed role traits can name it; nothing outside the crate can build or read one.
#[doc(hidden)]
pub struct Transport {
    pub(crate) state: ConnState,
    pub(crate) close_reason: Option<CloseReason>,
    pub(crate) thresholds: InlineThresholds,
    /// Extensions both peers offered (none until established).
    pub(crate) extensions: Extensions,
    /// The peer's receive-buffer alignment, when its CONF_RDMA results gave one
    /// (RFC 5666 §6): calls that allow it go as RDMA_MSGP.
    pub(crate) peer_align: Option<u32>,
    /// The peer's transport characteristics (draft-dnoveck-rpcrdma-rtrext §8).
    pub(crate) peer_chars: TransportChars,
    /// A characteristics update (ROPT_XCHUPD) that arrived before this end heard the
    /// connection was established (the passive side's CM event can trail the peer's
    /// first Sends): applied over the connect-time characteristics once it does.
    pub(crate) early_chars: Option<TransportChars>,
    /// This end's characteristics to send in an update (ROPT_XCHUPD) once established:
    /// its receive buffer structure did not fit the connect request.
    pub(crate) chars_update_pending: Option<TransportChars>,
    /// The peer was told this end's receive buffer structure (connect request or
    /// update): only then may a reply's item be asked for by send-based DDP.
    pub(crate) recv_structure_sent: bool,
    pub(crate) outbox: Outbox,
    pub(crate) sq: SqBudget,
    /// Which staged requests are signaled, and those not yet retired.
    pub(crate) ledger: SendLedger,
    pub(crate) recvs: RecvTable,
    /// Requests the outbox refused (never, while its sizing invariant holds).
    pub(crate) outbox_overflows: u64,
    /// Completions naming no request of the connection (provider bugs).
    pub(crate) stray_completions: u64,
    /// Events for the driver, from either half.
    pub(crate) events: FixedQueue<ConnEvent>,
}

impl Transport {
    /// The peer's characteristics from an update (ROPT_XCHUPD): in force now, and, when
    /// it came before the connection was reported established, kept for then too (the
    /// connect-time characteristics must not replace it). Before establishment it is
    /// in force at once only once continuation is known negotiated (a passive side told
    /// the connect request: `Connection::on_connect_request`), for the calls behind it.
    pub(crate) fn update_peer_chars(&mut self, c: TransportChars) {
        if self.state == ConnState::Connecting {
            self.early_chars = Some(c);
            if !self.extensions.continuation {
                return;
            }
        }
        self.peer_chars = c;
    }
    pub(crate) fn new(
        sq_depth: u32,
        rq_depth: u32,
        max_send_sge: u32,
        recv_pool: &Pool,
        ledger: SendLedger,
    ) -> Self {
        let mut t = Transport {
            state: ConnState::Connecting,
            close_reason: None,
            thresholds: InlineThresholds::DEFAULT,
            extensions: Extensions::NONE,
            peer_align: None,
            peer_chars: TransportChars::DEFAULT,
            early_chars: None,
            chars_update_pending: None,
            recv_structure_sent: false,
            outbox: Outbox::with_capacity(
                sq_depth as usize,
                (sq_depth * max_send_sge.max(1)) as usize,
                rq_depth as usize,
            ),
            sq: SqBudget::new(sq_depth),
            ledger,
            recvs: RecvTable::new(rq_depth, recv_pool),
            outbox_overflows: 0,
            stray_completions: 0,
            events: FixedQueue::with_capacity(32),
        };
        t.recvs.refill(&mut t.outbox);
        t
    }

    /// Starts draining for `reason` (the first reason sticks).
    pub(crate) fn fail(&mut self, reason: CloseReason) {
        if matches!(self.state, ConnState::Draining | ConnState::Closed) {
            return;
        }
        self.state = ConnState::Draining;
        self.close_reason = Some(reason);
    }

    /// Records the peer's abort as the reason, over the failed work request or
    /// disconnect it caused (a close for another reason stays as it was).
    pub(crate) fn peer_aborted(&mut self, why: crate::fabric::PeerAbort) {
        match self.close_reason {
            Some(CloseReason::WorkRequestFailed(_) | CloseReason::Disconnected)
                if self.state != ConnState::Closed =>
            {
                self.close_reason = Some(CloseReason::PeerAborted(why));
            }
            _ => {}
        }
    }

    /// Stages a send-queue request, signaled unless the ledger lets it go without
    /// (`core/signal.rs`). The outbox holds as many requests as the send queue, and
    /// every staged request holds a send-queue slot (taken or reserved before staging),
    /// so this cannot find it full; should that invariant ever break, the request is
    /// counted in `outbox_overflows` instead of being lost silently.
    #[inline]
    pub(crate) fn stage(&mut self, wr_id: u64, op: SendOp, sgl: &[Sge]) -> bool {
        if let [sge] = sgl {
            return self.stage_one(wr_id, op, *sge);
        }
        let flags = if self.ledger.enabled() {
            self.ledger_flags(wr_id, &op)
        } else {
            SendFlags::SIGNALED
        };
        let ok = self.outbox.push_send(wr_id, op, sgl, flags).is_ok();
        debug_assert!(ok, "outbox smaller than the send queue");
        if !ok {
            self.overflowed();
        }
        ok
    }

    /// [`stage`](Self::stage) for a request gathering the one entry `sge`, inlined
    /// into its caller: the plain call's Send (`core/requester/plain.rs`), staged
    /// once per call, spares the out-of-line call's register saves and the list-length
    /// dispatch.
    #[inline(always)]
    pub(crate) fn stage_one(&mut self, wr_id: u64, op: SendOp, sge: Sge) -> bool {
        let flags = if self.ledger.enabled() {
            self.ledger_flags(wr_id, &op)
        } else {
            SendFlags::SIGNALED
        };
        let ok = self.outbox.push_send_one(wr_id, op, sge, flags).is_ok();
        debug_assert!(ok, "outbox smaller than the send queue");
        if !ok {
            self.overflowed();
        }
        ok
    }

    #[cold]
    fn overflowed(&mut self) {
        self.ledger.forget_last(1);
        self.outbox_overflows += 1;
    }

    /// Records a request on the send ledger and says whether it is signaled: a few
    /// compares and stores, inlined into the staging (`core/signal.rs`).
    #[inline(always)]
    fn ledger_flags(&mut self, wr_id: u64, op: &SendOp) -> SendFlags {
        if self.ledger.stage(wr_id, op) {
            SendFlags::SIGNALED
        } else {
            SendFlags::NONE
        }
    }

    /// Stages a barrier (`core/signal.rs`) when unsignaled Sends at the end of the send
    /// queue have waited long enough for a later request, or the connection drains.
    #[inline(always)]
    pub(crate) fn barrier_if_due(&mut self, now: Instant) {
        // Never true with the ledger off; the first poll that sees a new unsignaled
        // tail only notes the time.
        if self.ledger.tail_unsignaled()
            && self
                .ledger
                .barrier_due(now, self.state == ConnState::Draining)
        {
            self.stage_barrier();
        }
    }

    #[inline(never)]
    fn stage_barrier(&mut self) {
        if !self.sq.take(1) {
            return;
        }
        // Moves nothing: a zero-length Read checks no key and names no local memory.
        let op = SendOp::RdmaRead {
            remote: RemoteAddr { addr: 0, rkey: 0 },
        };
        if !self.stage(WrId::new(WrKind::Barrier, 0).encode(), op, &[]) {
            self.sq.give(1);
        }
    }

    /// True while new work may be staged.
    #[inline]
    pub(crate) fn is_open(&self) -> bool {
        self.state == ConnState::Established
    }

    /// What the queue pair still holds: what a draining connection waits for.
    pub(crate) fn outstanding(&self) -> Outstanding {
        Outstanding {
            send_queue: self.sq.held(),
            receives: self.recvs.own_posted(),
            staged: self.outbox.len(),
        }
    }

    /// True once draining has nothing left outstanding.
    pub(crate) fn drained(&self) -> bool {
        self.state == ConnState::Draining
            && self.sq.held() == 0
            && self.recvs.own_posted() == 0
            && self.outbox.is_empty()
    }
}

/// Work a connection has handed to its queue pair and not yet seen complete. A
/// draining connection closes when all three are zero; a connection stuck in
/// `Draining` says here what it still waits for (its provider owes it completions).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Outstanding {
    /// Send-queue slots held: requests posted (or reserved) and not yet completed.
    pub send_queue: u32,
    /// The connection's own receives posted and not yet completed.
    pub receives: u32,
    /// Requests staged and not yet handed to the provider.
    pub staged: usize,
}

/// What [`settle_refused`] needs from a core.
pub(crate) trait Staged {
    /// The shared transport state.
    fn transport(&mut self) -> &mut Transport;
    /// Accounts a request that never reached the queue pair as flushed.
    fn flushed(&mut self, wr_id: u64, now: Instant);
    /// The provider refused a post: the connection fails.
    fn post_refused(&mut self);
}

/// A synthetic flush completion for a request that never reached the queue pair.
pub(crate) fn flush_of(wr_id: u64) -> Completion {
    Completion {
        wr_id,
        opcode: WcOpcode::Send,
        status: WcStatus::WrFlushed,
        byte_len: 0,
        qp_num: 0,
        invalidated_rkey: None,
    }
}

/// The driver could post only part of a core's transmit: the connection fails, and what
/// did not go out is fed back as flushed so every request is accounted exactly once.
#[cold]
pub(crate) fn settle_refused<C: Staged>(core: &mut C, f: PostFailure, now: Instant) {
    core.post_refused();
    let (recvs, sends) = {
        let o = &core.transport().outbox;
        (o.recv_len(), o.send_len())
    };
    for i in f.recvs_posted..recvs {
        if let Some(id) = core.transport().outbox.recv_id(i) {
            core.flushed(id, now);
        }
    }
    // The refused sends were the last staged: they retire nothing before them.
    let refused = sends.saturating_sub(f.sends_posted);
    let barrier = WrId::new(WrKind::Barrier, 0).encode();
    let t = core.transport();
    t.ledger.forget_last(refused);
    if (f.sends_posted..sends).any(|i| t.outbox.send_id(i) == Some(barrier)) {
        t.ledger.barrier_refused();
    }
    for i in f.sends_posted..sends {
        if let Some(id) = core.transport().outbox.send_id(i) {
            core.flushed(id, now);
        }
    }
    core.transport().outbox.clear();
}
