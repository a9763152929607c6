//! Queue pairs of the shm provider: the state shared by the queue-pair handle (which
//! posts), the send completion queue (which retires send-queue requests) and the
//! receive completion queue (which executes the peer's requests), and the posting side.
//!
//! Each part has exactly one owner at a time, which is what makes the `UnsafeCell`s
//! sound: the handle is the only producer of the send and receive queues, the send CQ's
//! `poll(&mut self)` the only user of the completer, the receive CQ's the only user of
//! the executor. They meet through atomic counters (release on publish, acquire on read).

use crate::fabric::slots::Slots;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use super::completer::Completer;
use super::cq::CqShared;
use super::device::{DeviceShared, MAX_MSG_SIZE};
use super::exec::Executor;
use super::pd::PdShared;
use super::ring::Producer;
use super::segment::{copy_small, op, ReqHeader, ReqSlot, Segment, WireSge, INLINE_MAX, MAX_SGE};
use super::srq::SrqShared;
use crate::fabric::mr::Access;
use crate::fabric::ConnId;
use crate::fabric::QueuePair;
use crate::fabric::{
    Completion, PeerAddr, QpCaps, QpState, RecvWr, SendFlags, SendOp, SendWr, Sge, WcOpcode,
    WcStatus,
};
use crate::fabric::{FabricError, PostError, PostErrorKind};

const ST_INIT: u8 = 0;
const ST_RTR: u8 = 1;
const ST_RTS: u8 = 2;
const ST_ERR: u8 = 3;
const ST_DISC: u8 = 4;

/// A send-queue request as the completer needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SqEntry {
    pub wr_id: u64,
    pub opcode: WcOpcode,
    pub signaled: bool,
    pub byte_len: u32,
    /// Executed by the peer: its ack carries the status.
    pub remote: bool,
    pub ssn: u64,
    /// Status of a request finished at post time (local operations, local errors,
    /// requests posted in the error state).
    pub local: WcStatus,
}

impl SqEntry {
    const EMPTY: SqEntry = SqEntry {
        wr_id: 0,
        opcode: WcOpcode::Send,
        signaled: false,
        byte_len: 0,
        remote: false,
        ssn: 0,
        local: WcStatus::Success,
    };
}

/// A posted receive.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RqEntry {
    pub wr_id: u64,
    pub num_sge: u32,
    pub sge: [Sge; MAX_SGE],
}

impl RqEntry {
    pub(crate) const EMPTY: RqEntry = RqEntry {
        wr_id: 0,
        num_sge: 0,
        sge: [Sge::new(0, 0, 0); MAX_SGE],
    };
}

/// The queue pair's counters that its handle (posting) writes. On a cache line of
/// their own, so that a poster and a poller on different cores do not contend for
/// one line.
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct PosterLine {
    /// Send-queue entries published.
    pub(crate) sq_posted: AtomicU64,
    /// Send-queue position after the latest signaled request (0: none yet).
    pub(crate) sq_signaled: AtomicU64,
    /// Requests published on our ring: what the peer's acks may cover at most.
    pub(crate) req_pushed: AtomicU64,
    /// Receive-queue entries published.
    pub(crate) rq_posted: AtomicU64,
}

/// The queue pair's counters that its completion queues (polling) write.
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct PollerLine {
    /// Send-queue entries whose slots are free again.
    pub(crate) sq_freed: AtomicU64,
    /// Receive-queue entries taken by the executor.
    pub(crate) rq_consumed: AtomicU64,
}

/// Everything about one queue pair that more than one owner touches.
pub(crate) struct QpShared {
    pub(crate) qp_num: u32,
    pub(crate) conn: ConnId,
    pub(crate) dev: Arc<DeviceShared>,
    pub(crate) pd: u16,
    /// The protection domain's arenas: where our keys' places point. Held so they stay
    /// mapped while this queue pair may still execute requests.
    pub(crate) pdt: Arc<PdShared>,
    pub(crate) caps: QpCaps,
    /// Our RNR retry count, told to the peer (it executes our Sends).
    pub(crate) rnr_retry: u8,
    /// How long the peer's Sends wait for a receive between retries.
    pub(crate) min_rnr_timer: Duration,
    state: AtomicU8,
    /// Our segment: our request ring, the acks for it, our failed flag.
    pub(crate) own: Segment,
    pub(crate) sq: Slots<SqEntry>,
    /// Counters the posting side writes.
    pub(crate) posted: PosterLine,
    /// Counters the polling side writes.
    pub(crate) polled: PollerLine,
    pub(crate) rq: Slots<RqEntry>,
    /// The shared receive queue Sends take their receives from instead of `rq`.
    pub(crate) srq: Option<Arc<SrqShared>>,
    completer: UnsafeCell<Completer>,
    exec: UnsafeCell<Option<Executor>>,
    link_claimed: AtomicBool,
    linked: AtomicBool,
    /// The peer's segment, once connected (for its failed flag).
    pub(crate) peer: OnceLock<Segment>,
    pub(crate) destroyed: AtomicBool,
}

// SAFETY: the UnsafeCells are each used by one owner at a time as described in the
// module documentation; everything else is atomics, immutable data or Send + Sync.
unsafe impl Send for QpShared {}
// SAFETY: as above.
unsafe impl Sync for QpShared {}

impl std::fmt::Debug for QpShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QpShared")
            .field("qp_num", &self.qp_num)
            .field("conn", &self.conn)
            .field("state", &self.state())
            .finish()
    }
}

impl QpShared {
    /// The current state.
    #[inline]
    pub(crate) fn state(&self) -> QpState {
        match self.state.load(Ordering::Acquire) {
            ST_INIT => QpState::Init,
            ST_RTR => QpState::ReadyToReceive,
            ST_RTS => QpState::ReadyToSend,
            ST_ERR => QpState::Error,
            _ => QpState::Disconnected,
        }
    }

    /// True in the error and disconnected states.
    #[inline]
    pub(crate) fn is_error(&self) -> bool {
        self.state.load(Ordering::Acquire) >= ST_ERR
    }

    /// Moves to the error state (if not there already) and tells the peer.
    #[inline(never)]
    pub(crate) fn set_error(&self) {
        let mut cur = self.state.load(Ordering::Acquire);
        while cur < ST_ERR {
            match self
                .state
                .compare_exchange_weak(cur, ST_ERR, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => break,
                Err(s) => cur = s,
            }
        }
        self.own.set_failed();
    }

    /// Moves to the disconnected state for good.
    pub(crate) fn set_disconnected(&self) {
        self.state.store(ST_DISC, Ordering::Release);
        self.own.set_failed();
    }

    fn advance(&self, from_max: u8, to: u8) -> bool {
        let mut cur = self.state.load(Ordering::Acquire);
        while cur <= from_max && cur < to {
            match self
                .state
                .compare_exchange_weak(cur, to, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return true,
                Err(s) => cur = s,
            }
        }
        false
    }

    /// Init → ReadyToReceive (accepted).
    pub(crate) fn set_rtr(&self) -> bool {
        self.advance(ST_INIT, ST_RTR)
    }

    /// Init/ReadyToReceive → ReadyToSend (established).
    pub(crate) fn set_rts(&self) -> bool {
        self.advance(ST_RTR, ST_RTS)
    }

    /// Hands the executor (and the peer's segment) to the receive side. Once only.
    pub(crate) fn link(&self, exec: Executor, peer: Segment) -> Result<(), FabricError> {
        if self
            .link_claimed
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(FabricError::Protocol("queue pair connected twice"));
        }
        // SAFETY: we won the claim, and the receive CQ does not touch `exec` until
        // `linked` is set below.
        unsafe { *self.exec.get() = Some(exec) };
        let _ = self.peer.set(peer);
        self.linked.store(true, Ordering::Release);
        Ok(())
    }

    /// Executes the peer's requests and reports receive completions (or flushes).
    ///
    /// # Safety
    /// Only the poll of this queue pair's one receive CQ may call this.
    pub(crate) unsafe fn recv_step(&self, out: &mut [Completion]) -> usize {
        if self.linked.load(Ordering::Acquire) {
            // SAFETY: linked, so `exec` is initialised and no longer written by `link`;
            // the caller is its only user.
            if let Some(ex) = unsafe { (*self.exec.get()).as_mut() } {
                return ex.step(self, out);
            }
        }
        if self.is_error() {
            return self.flush_recvs(out);
        }
        0
    }

    /// Retires send-queue requests and reports their completions.
    ///
    /// # Safety
    /// Only the poll of this queue pair's one send CQ may call this.
    pub(crate) unsafe fn send_step(&self, out: &mut [Completion]) -> usize {
        // SAFETY: the caller is the completer's only user.
        unsafe { (*self.completer.get()).step(self, out) }
    }

    /// Completes every posted receive as flushed (receive side only).
    #[inline(never)]
    pub(crate) fn flush_recvs(&self, out: &mut [Completion]) -> usize {
        let posted = self.posted.rq_posted.load(Ordering::Acquire);
        let mut c = self.polled.rq_consumed.load(Ordering::Relaxed);
        let mut n = 0;
        while c < posted && n < out.len() {
            // SAFETY: c < posted, published by the poster; we are the consumer.
            let e = unsafe { self.rq.read(c) };
            out[n] = Completion {
                wr_id: e.wr_id,
                opcode: WcOpcode::Recv,
                status: WcStatus::WrFlushed,
                byte_len: 0,
                qp_num: self.qp_num,
                invalidated_rkey: None,
            };
            n += 1;
            c += 1;
        }
        self.polled.rq_consumed.store(c, Ordering::Release);
        n
    }
}

/// A shm reliable-connected queue pair. Dropping it destroys the queue pair: the peer
/// sees it fail, and the connection manager disconnects.
pub struct ShmQp {
    pub(crate) shared: Arc<QpShared>,
    req: Producer<ReqSlot>,
    /// Sequence number after our latest RDMA Read: a Send posted before the target
    /// has finished it must not capture its payload early (see `push_remote`).
    reads_until: u64,
    /// The send queue's posting-side counters.
    sq: SqPoster,
    rq_head: u64,
    rq_consumed_seen: u64,
    /// Receives this queue pair may have posted: its `max_recv_wr`, or 0 when its
    /// receives come from a shared receive queue (`post_recv` refuses them all).
    rq_depth: u32,
    cq_reservations: [Option<(Arc<CqShared>, u64)>; 2],
    /// The peer process (`SO_PEERCRED` of the connection's socket), set by the CM.
    pub(crate) peer_addr: PeerAddr,
    /// Test hook: while set, the generator that garbles every request this side
    /// publishes ([`ShmQp::forge_requests`]).
    #[cfg(any(test, feature = "testing"))]
    forge: Option<crate::fabric::sim::SimRng>,
}

impl std::fmt::Debug for ShmQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.shared.fmt(f)
    }
}

/// Everything [`ShmQp::create`] needs.
pub(crate) struct QpParts {
    pub dev: Arc<DeviceShared>,
    pub pd: Arc<PdShared>,
    pub conn: ConnId,
    pub caps: QpCaps,
    pub rnr_retry: u8,
    pub min_rnr_timer: Duration,
    pub send_cq: Arc<CqShared>,
    pub recv_cq: Arc<CqShared>,
    pub srq: Option<Arc<SrqShared>>,
}

fn check_cap(what: &'static str, v: u32, min: u32, max: u32) -> Result<(), FabricError> {
    if v < min || v > max {
        return Err(FabricError::InvalidCaps {
            what,
            requested: v,
            max,
        });
    }
    Ok(())
}

impl ShmQp {
    /// Creates a queue pair with its own segment, attached to its completion queues.
    pub(crate) fn create(p: QpParts) -> Result<ShmQp, FabricError> {
        let max_wr = p.dev.cfg.max_qp_wr;
        check_cap("max_send_wr", p.caps.max_send_wr, 1, max_wr)?;
        check_cap("max_recv_wr", p.caps.max_recv_wr, 1, max_wr)?;
        check_cap("max_send_sge", p.caps.max_send_sge, 0, MAX_SGE as u32)?;
        check_cap("max_recv_sge", p.caps.max_recv_sge, 0, MAX_SGE as u32)?;
        if p.rnr_retry > 7 {
            return Err(FabricError::InvalidCaps {
                what: "rnr_retry",
                requested: u32::from(p.rnr_retry),
                max: 7,
            });
        }
        let mut reservations: [Option<(Arc<CqShared>, u64)>; 2] = [None, None];
        let send_n = u64::from(p.caps.max_send_wr);
        p.send_cq.reserve(send_n)?;
        reservations[0] = Some((p.send_cq.clone(), send_n));
        if let Some(srq) = &p.srq {
            if !Arc::ptr_eq(&srq.dev, &p.dev) {
                p.send_cq.unreserve(send_n);
                return Err(FabricError::WrongDevice);
            }
            if !Arc::ptr_eq(&srq.cq, &p.recv_cq) {
                p.send_cq.unreserve(send_n);
                return Err(FabricError::SrqMismatch(
                    "the receive completion queue is not the one the shared receive queue was created for",
                ));
            }
        }
        // The shared queue reserved its receives' completions on that queue already.
        let recv_n = if p.srq.is_some() {
            0
        } else {
            u64::from(p.caps.max_recv_wr)
        };
        if let Err(e) = p.recv_cq.reserve(recv_n) {
            p.send_cq.unreserve(send_n);
            return Err(e);
        }
        reservations[1] = Some((p.recv_cq.clone(), recv_n));
        let release = |r: &[Option<(Arc<CqShared>, u64)>; 2]| {
            for (cq, n) in r.iter().flatten() {
                cq.unreserve(*n);
            }
        };
        let own = match Segment::create(p.caps.max_send_wr.next_power_of_two()) {
            Ok(s) => s,
            Err(e) => {
                release(&reservations);
                return Err(e);
            }
        };
        let shared = Arc::new(QpShared {
            qp_num: p.dev.alloc_qp_num(),
            conn: p.conn,
            pd: p.pd.id,
            pdt: p.pd,
            caps: p.caps,
            rnr_retry: p.rnr_retry,
            min_rnr_timer: p.min_rnr_timer,
            state: AtomicU8::new(ST_INIT),
            sq: Slots::new(p.caps.max_send_wr, SqEntry::EMPTY),
            posted: PosterLine::default(),
            polled: PollerLine::default(),
            rq: Slots::new(
                if p.srq.is_some() {
                    1
                } else {
                    p.caps.max_recv_wr
                },
                RqEntry::EMPTY,
            ),
            srq: p.srq,
            completer: UnsafeCell::new(Completer::new(own.acks())),
            exec: UnsafeCell::new(None),
            link_claimed: AtomicBool::new(false),
            linked: AtomicBool::new(false),
            peer: OnceLock::new(),
            destroyed: AtomicBool::new(false),
            dev: p.dev,
            own,
        });
        let same = Arc::ptr_eq(&p.send_cq, &p.recv_cq);
        let attached = if same {
            p.send_cq.attach(&shared, true, true)
        } else {
            p.send_cq
                .attach(&shared, true, false)
                .and_then(|()| p.recv_cq.attach(&shared, false, true))
        };
        if let Err(e) = attached {
            // A half-attached queue pair is detached by its CQ once it sees `destroyed`.
            shared.destroyed.store(true, Ordering::Release);
            p.send_cq.changed();
            p.recv_cq.changed();
            release(&reservations);
            return Err(e);
        }
        let rq_depth = if shared.srq.is_some() {
            0
        } else {
            shared.caps.max_recv_wr
        };
        Ok(ShmQp {
            req: shared.own.req_producer(),
            shared,
            reads_until: 0,
            peer_addr: PeerAddr::Unknown,
            #[cfg(any(test, feature = "testing"))]
            forge: None,
            sq: SqPoster::default(),
            rq_head: 0,
            rq_consumed_seen: 0,
            rq_depth,
            cq_reservations: reservations,
        })
    }

    /// Fills the next ring slot for a Send, Write or Read, translating the local
    /// entries, and publishes it; returns its sequence number. Nothing is published on
    /// error.
    fn push_remote(&mut self, wr: &SendWr<'_>, total: u32) -> Result<u64, WcStatus> {
        let (opc, key, raddr, need) = match wr.op {
            SendOp::Send => (op::SEND, 0, 0, Access::NONE),
            SendOp::SendWithInvalidate { rkey } => (op::SEND_INV, rkey, 0, Access::NONE),
            SendOp::RdmaWrite { remote } => (op::WRITE, remote.rkey, remote.addr, Access::NONE),
            SendOp::RdmaRead { remote } => {
                (op::READ, remote.rkey, remote.addr, Access::LOCAL_WRITE)
            }
            SendOp::FastReg { .. } | SendOp::LocalInvalidate { .. } => {
                return Err(WcStatus::LocalQpOperationError)
            }
        };
        let slot = self.req.slot();
        if opc != op::READ && opc != op::WRITE && total <= INLINE_MAX && self.reads_done() {
            self.fill_inline(slot, wr)?;
            let h = ReqHeader {
                op: opc | op::INLINE,
                num_sge: 0,
                remote_addr: 0,
                total_len: total,
                key,
            };
            // SAFETY: the caller checked room, so the slot is free and unpublished; we
            // are the ring's only producer.
            unsafe { ReqSlot::set_header(slot, h) };
            return Ok(self.commit());
        }
        let sh = &*self.shared;
        // post_send checked the entry count against max_send_sge <= MAX_SGE.
        for (i, sge) in wr.sgl.iter().enumerate().take(MAX_SGE) {
            let place = sh
                .dev
                .table
                .lookup(sge.lkey, sh.pd, need, sge.addr, u64::from(sge.length))
                .map_err(|_| WcStatus::LocalProtectionError)?;
            let e = WireSge {
                arena: place.arena,
                len: sge.length,
                offset: place.offset,
            };
            // SAFETY: the caller checked room, so the slot is free and unpublished; we
            // are the ring's only producer; i < MAX_SGE.
            unsafe { ReqSlot::set_sge(slot, i, e) };
        }
        let h = ReqHeader {
            op: opc,
            num_sge: wr.sgl.len().min(MAX_SGE) as u32,
            remote_addr: raddr,
            total_len: total,
            key,
        };
        // SAFETY: as above.
        unsafe { ReqSlot::set_header(slot, h) };
        let ssn = self.commit();
        if opc == op::READ {
            self.reads_until = ssn + 1;
        }
        Ok(ssn)
    }

    /// Publishes the filled slot; returns its sequence number.
    #[inline]
    fn commit(&mut self) -> u64 {
        #[cfg(any(test, feature = "testing"))]
        if self.forge.is_some() {
            self.garble_slot();
        }
        let ssn = self.req.position();
        self.shared
            .posted
            .req_pushed
            .store(ssn + 1, Ordering::Relaxed);
        self.req.commit();
        ssn
    }

    /// True when every RDMA Read posted so far has finished. An inline Send captures
    /// its payload now, while a Send by reference is read by the target after every
    /// earlier request has executed; so that a Send sourced from an earlier Read's sink
    /// carries the Read's data either way, a Send goes inline only when no Read is
    /// still in flight.
    #[inline]
    fn reads_done(&mut self) -> bool {
        self.reads_until == 0
            || self.req.consumed() >= self.reads_until && {
                self.reads_until = 0;
                true
            }
    }

    /// Copies a Send's payload into the body of `slot`, checking every entry's key.
    fn fill_inline(&self, slot: *mut ReqSlot, wr: &SendWr<'_>) -> Result<(), WcStatus> {
        let sh = &*self.shared;
        // SAFETY: the slot is free and unpublished (see push_remote).
        let body = unsafe { ReqSlot::body(slot) };
        let mut at = 0usize;
        for sge in wr.sgl {
            let len = u64::from(sge.length);
            let src = sh
                .dev
                .table
                .lookup(sge.lkey, sh.pd, Access::NONE, sge.addr, len)
                .ok()
                .and_then(|place| sh.pdt.arenas.local_ptr(place, len))
                .ok_or(WcStatus::LocalProtectionError)?;
            // SAFETY: src is inside one of our registered arenas for len bytes (checked
            // by local_ptr); the entries sum to total <= INLINE_MAX, the body's size,
            // so at + len stays inside the body; arena and ring are separate mappings.
            unsafe { copy_small(src, body.add(at), sge.length as usize) };
            at += sge.length as usize;
        }
        Ok(())
    }

    /// Runs a FastReg or LocalInvalidate now: they touch only our key table.
    #[inline(never)]
    fn local_op(&self, wr: &SendWr<'_>) -> WcStatus {
        let sh = &*self.shared;
        match wr.op {
            SendOp::FastReg {
                key,
                region,
                access,
            } => match sh.dev.table.fast_reg_over(key, sh.pd, access, &region) {
                Ok(()) => WcStatus::Success,
                Err(_) => WcStatus::MemoryBindError,
            },
            SendOp::LocalInvalidate { key } => match sh.dev.table.invalidate(key, sh.pd) {
                Ok(()) => WcStatus::Success,
                Err(_) => WcStatus::LocalProtectionError,
            },
            _ => WcStatus::LocalQpOperationError,
        }
    }

    fn publish_send(&mut self) {
        self.sq.publish(&self.shared.posted);
    }
}

/// The send queue's counters on the posting side, and the three steps every post
/// makes with them (room check, entry write, publication), shared by the inline fast
/// path and the general path so that the two cannot drift apart.
#[derive(Debug, Default)]
struct SqPoster {
    /// Send-queue entries written.
    head: u64,
    /// Send-queue position after the latest signaled request (0: none yet).
    signaled: u64,
    /// The completer's `sq_freed` as last read.
    freed_seen: u64,
}

impl SqPoster {
    /// True when the send queue has a free slot: checked against the cached
    /// `sq_freed`, which is reloaded only when that copy says the queue is full.
    #[inline(always)]
    fn has_room(&mut self, polled: &PollerLine, depth: u64) -> bool {
        if self.head - self.freed_seen >= depth {
            self.freed_seen = polled.sq_freed.load(Ordering::Acquire);
            if self.head - self.freed_seen >= depth {
                return false;
            }
        }
        true
    }

    /// Writes `entry` at the head and advances it, remembering the position after it
    /// when it is signaled; published later by [`SqPoster::publish`].
    ///
    /// # Safety
    /// [`SqPoster::has_room`] returned true since the last push, and the caller is the
    /// queue's only producer.
    #[inline(always)]
    unsafe fn push(&mut self, sq: &Slots<SqEntry>, entry: SqEntry) {
        // SAFETY: head - freed < depth (the caller checked room), so the completer is
        // done with this slot; we are the only producer.
        unsafe { sq.write(self.head, entry) };
        self.head += 1;
        if entry.signaled {
            self.signaled = self.head;
        }
    }

    /// Makes the entries written so far visible to the completer.
    #[inline(always)]
    fn publish(&self, p: &PosterLine) {
        // Before sq_posted, whose release the completer acquires first.
        p.sq_signaled.store(self.signaled, Ordering::Relaxed);
        p.sq_posted.store(self.head, Ordering::Release);
    }
}

fn opcode_of(op: &SendOp) -> WcOpcode {
    match op {
        SendOp::Send | SendOp::SendWithInvalidate { .. } => WcOpcode::Send,
        SendOp::RdmaWrite { .. } => WcOpcode::RdmaWrite,
        SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
        SendOp::FastReg { .. } => WcOpcode::FastReg,
        SendOp::LocalInvalidate { .. } => WcOpcode::LocalInvalidate,
    }
}

impl ShmQp {
    /// How many arenas the peer has announced to this connection so far: what this
    /// side may map of the peer's memory (diagnostics and tests; zero before the
    /// connection is linked).
    pub fn peer_arenas_announced(&self) -> u32 {
        self.shared
            .peer
            .get()
            .map_or(0, |s| s.arenas_announced().load(Ordering::Acquire))
    }

    /// Test hook (feature `testing`): plays a hostile peer by storing `word` at
    /// `offset` of this queue pair's own connection segment (its request ring and the
    /// fields beside it), which the peer's target side reads. Returns false past the
    /// segment's end.
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub fn scribble_own_segment(&self, offset: usize, word: u64) -> bool {
        self.shared.own.scribble(offset, word)
    }

    /// Test hook (feature `testing`): plays a hostile peer that knows the ring
    /// protocol. While `seed` is non-zero, every request this side publishes has its
    /// header and body replaced by pseudo-random words (plausible opcodes, entry
    /// counts, lengths, keys and offsets, or plain noise) seeded by `seed`, and is
    /// published with its correct sequence number, so the peer's target parses it.
    /// Zero turns it off. This side's own bookkeeping stays as posted.
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub fn forge_requests(&mut self, seed: u64) {
        self.forge = (seed != 0).then(|| crate::fabric::sim::SimRng::new(seed));
    }

    #[cfg(any(test, feature = "testing"))]
    fn garble_slot(&mut self) {
        let Some(rng) = self.forge.as_mut() else {
            return;
        };
        let mut next = || rng.next_u64();
        let r = next();
        let plausible = r & 1 == 0;
        let h = if plausible {
            ReqHeader {
                op: ((r >> 8) as u32 % 6) | if r & 2 == 0 { op::INLINE } else { 0 },
                num_sge: (r >> 16) as u32 % 10,
                remote_addr: next() % (1 << 24),
                total_len: [0, 1, 160, 161, 4096, u32::MAX][(r >> 24) as usize % 6],
                key: (next() as u32) & 0xffff,
            }
        } else {
            ReqHeader {
                op: next() as u32,
                num_sge: next() as u32,
                remote_addr: next(),
                total_len: next() as u32,
                key: next() as u32,
            }
        };
        let slot = self.req.slot();
        let mut body = [0u64; INLINE_MAX as usize / 8];
        for (i, w) in body.iter_mut().enumerate() {
            *w = if plausible && i % 2 == 0 {
                // A WireSge's arena and length word: small arena numbers, any length.
                (next() % 8) | (next() % 0x2_0000) << 32
            } else if plausible {
                next() % (1 << 20)
            } else {
                next()
            };
        }
        // SAFETY: called from `commit` on the filled, still unpublished slot; we are
        // the ring's only producer, and the body holds INLINE_MAX octets.
        unsafe {
            ReqSlot::set_header(slot, h);
            std::ptr::copy_nonoverlapping(
                body.as_ptr().cast::<u8>(),
                ReqSlot::body(slot),
                INLINE_MAX as usize,
            );
        }
    }

    /// Octets in this queue pair's own connection segment (test hook, feature
    /// `testing`).
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub fn own_segment_len(&self) -> usize {
        self.shared.own.len()
    }
}

impl ShmQp {
    /// Posts `wr` when it is the common request, a Send of one gather entry short
    /// enough to go inline, on a queue pair ready to send with room in its send queue
    /// and ring and no RDMA Read in flight, and its key checks out; false, with
    /// nothing published, for anything else (the general path then posts it, or
    /// refuses it or completes it in error, with the same checks in the same order).
    /// The general path's per-request tests (local operation, entry count, length
    /// sum, opcode) are settled here by the shape alone, and nothing is built for an
    /// error: about 97 instructions less per Send (`perf/insns.sh`: like-for-like shm
    /// round trip 2012 -> 1818, RPC NULL 4160 -> 3966, both by two Sends).
    #[inline(always)]
    fn post_inline_send(&mut self, wr: &SendWr<'_>) -> bool {
        let (SendOp::Send, [sge]) = (wr.op, wr.sgl) else {
            return false;
        };
        let sh = &*self.shared;
        if sge.length > INLINE_MAX
            || sh.caps.max_send_sge == 0
            || self.reads_until != 0
            || sh.state.load(Ordering::Acquire) != ST_RTS
        {
            return false;
        }
        if !self.sq.has_room(&sh.polled, u64::from(sh.caps.max_send_wr)) {
            return false;
        }
        let len = u64::from(sge.length);
        let Some(src) = sh
            .dev
            .table
            .lookup(sge.lkey, sh.pd, Access::NONE, sge.addr, len)
            .ok()
            .and_then(|place| sh.pdt.arenas.local_ptr(place, len))
        else {
            return false;
        };
        if !matches!(self.req.room(), Ok(r) if r > 0) {
            return false;
        }
        let slot = self.req.slot();
        // SAFETY: the ring has room, so the slot is free and unpublished, and we are its
        // only producer; src is inside one of our registered arenas for `len` octets
        // (checked by local_ptr), len <= INLINE_MAX, the body's size; arena and ring
        // are separate mappings.
        unsafe {
            copy_small(src, ReqSlot::body(slot), sge.length as usize);
            ReqSlot::set_header(
                slot,
                ReqHeader {
                    op: op::SEND | op::INLINE,
                    num_sge: 0,
                    remote_addr: 0,
                    total_len: sge.length,
                    key: 0,
                },
            );
        }
        let ssn = self.commit();
        // SAFETY: has_room returned true above; we are the only producer.
        unsafe {
            self.sq.push(
                &self.shared.sq,
                SqEntry {
                    wr_id: wr.wr_id,
                    opcode: WcOpcode::Send,
                    signaled: wr.flags.contains(SendFlags::SIGNALED),
                    byte_len: sge.length,
                    remote: true,
                    ssn,
                    local: WcStatus::Success,
                },
            )
        };
        self.publish_send();
        true
    }
}

impl ShmQp {
    /// [`QueuePair::post_send`] of any chain: every request checked, then posted (or
    /// completed in error); the send queue is published once at the end.
    #[inline(never)]
    fn post_send_general(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        let st = self.shared.state();
        let mut flushing = st.is_error();
        if !flushing && st != QpState::ReadyToSend {
            return Err(PostError {
                posted: 0,
                kind: PostErrorKind::InvalidState(st),
            });
        }
        let depth = u64::from(self.shared.caps.max_send_wr);
        let max_sge = self.shared.caps.max_send_sge;
        for (i, wr) in wrs.iter().enumerate() {
            let refuse = |kind| PostError { posted: i, kind };
            if !self.sq.has_room(&self.shared.polled, depth) {
                self.publish_send();
                return Err(refuse(PostErrorKind::QueueFull {
                    depth: depth as u32,
                }));
            }
            let local = matches!(
                wr.op,
                SendOp::FastReg { .. } | SendOp::LocalInvalidate { .. }
            );
            if local && !wr.sgl.is_empty() {
                self.publish_send();
                return Err(refuse(PostErrorKind::Malformed(
                    "FastReg and LocalInvalidate take no scatter-gather list",
                )));
            }
            if wr.sgl.len() > max_sge as usize {
                self.publish_send();
                return Err(refuse(PostErrorKind::TooManySge {
                    given: wr.sgl.len(),
                    max: max_sge,
                }));
            }
            let total: u64 = match wr.sgl {
                [one] => u64::from(one.length),
                many => many.iter().map(|s| u64::from(s.length)).sum(),
            };
            if total > u64::from(MAX_MSG_SIZE) {
                self.publish_send();
                return Err(refuse(PostErrorKind::TooLong {
                    len: total,
                    max: MAX_MSG_SIZE,
                }));
            }
            let mut entry = SqEntry {
                wr_id: wr.wr_id,
                opcode: opcode_of(&wr.op),
                signaled: wr.flags.contains(SendFlags::SIGNALED),
                byte_len: total as u32,
                remote: false,
                ssn: 0,
                local: WcStatus::WrFlushed,
            };
            if !flushing {
                if local {
                    entry.local = self.local_op(wr);
                } else {
                    // SQ accounting keeps ring occupancy below the depth, so room is
                    // only missing if the peer corrupted the counters.
                    let status = match self.req.room() {
                        Ok(r) if r > 0 => match self.push_remote(wr, total as u32) {
                            Ok(ssn) => {
                                entry.remote = true;
                                entry.ssn = ssn;
                                WcStatus::Success
                            }
                            Err(s) => s,
                        },
                        _ => WcStatus::LocalQpOperationError,
                    };
                    entry.local = status;
                }
                if !entry.local.is_success() {
                    // Accepted, but it fails: the QP goes to error and the rest flush.
                    self.shared.set_error();
                    flushing = true;
                }
            }
            // SAFETY: has_room returned true above; we are the only producer.
            unsafe { self.sq.push(&self.shared.sq, entry) };
        }
        self.publish_send();
        Ok(())
    }
}

impl QueuePair for ShmQp {
    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        // Leading common requests one by one (each published as it is posted, as its
        // ring slot is anyway), the rest the general way.
        if wrs.is_empty() {
            // The state check alone.
            return self.post_send_general(wrs);
        }
        let mut done = 0;
        while let Some(wr) = wrs.get(done) {
            if !self.post_inline_send(wr) {
                return self.post_send_general(&wrs[done..]).map_err(|mut e| {
                    e.posted += done;
                    e
                });
            }
            done += 1;
        }
        Ok(())
    }

    fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        // 0 on a shared receive queue: every post is refused as beyond the depth.
        let depth = u64::from(self.rq_depth);
        let max_sge = self.shared.caps.max_recv_sge;
        let mut result = Ok(());
        for (i, wr) in wrs.iter().enumerate() {
            if self.rq_head - self.rq_consumed_seen >= depth {
                self.rq_consumed_seen = self.shared.polled.rq_consumed.load(Ordering::Acquire);
                if self.rq_head - self.rq_consumed_seen >= depth {
                    result = Err(PostError {
                        posted: i,
                        kind: PostErrorKind::QueueFull {
                            depth: depth as u32,
                        },
                    });
                    break;
                }
            }
            if wr.sgl.len() > max_sge as usize {
                result = Err(PostError {
                    posted: i,
                    kind: PostErrorKind::TooManySge {
                        given: wr.sgl.len(),
                        max: max_sge,
                    },
                });
                break;
            }
            // SAFETY: rq_head - consumed < depth, so the slot is free; one producer. The
            // reference ends before rq_posted publishes the entry.
            let e = unsafe { self.shared.rq.cell_mut(self.rq_head) };
            e.wr_id = wr.wr_id;
            e.num_sge = wr.sgl.len() as u32;
            for (d, s) in e.sge.iter_mut().zip(wr.sgl) {
                *d = *s;
            }
            self.rq_head += 1;
        }
        self.shared
            .posted
            .rq_posted
            .store(self.rq_head, Ordering::Release);
        result
    }

    fn qp_num(&self) -> u32 {
        self.shared.qp_num
    }

    fn conn_id(&self) -> ConnId {
        self.shared.conn
    }

    fn state(&self) -> QpState {
        self.shared.state()
    }

    fn caps(&self) -> QpCaps {
        self.shared.caps
    }

    fn peer_addr(&self) -> PeerAddr {
        self.peer_addr
    }
}

impl Drop for ShmQp {
    fn drop(&mut self) {
        self.shared.set_error();
        self.shared.destroyed.store(true, Ordering::Release);
        for (cq, n) in self.cq_reservations.iter().flatten() {
            cq.changed();
            cq.unreserve(*n);
        }
    }
}
