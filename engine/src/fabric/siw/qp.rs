//! Queue pairs: the part shared between the handle that posts and the device engine
//! that executes, and the handle itself.
//!
//! Posting is a doorbell, as on hardware: the handle copies each work request into a
//! preallocated slot and publishes the new tail with one release store; the engine
//! (inside `poll`) reads slots up to the tail and, when it has finished with a request,
//! publishes how far it has retired them, which frees the slots. Nothing is locked or
//! allocated.
//!
//! Posting touches the socket in one case only (issue 14, sixth round): one Send,
//! short enough for one flat write, posted to a queue pair whose transmitter is idle
//! (nothing queued, framed or half written, no Read Response or Terminate owed, no
//! request ahead of it), with completions on transmit and no wire tap, while the
//! device's engine is free. Then `post_send` takes the device claim (one
//! compare-and-swap, never waiting) and writes the Send with one `send`, as the next
//! poll would have done first (`Engine::send_one`); otherwise the request waits for
//! `poll` as before. The rule used to be "posting never touches the socket: progress
//! happens in poll", for these reasons, each kept:
//!
//! - the engine and the socket belong to whoever holds the device claim: `post_send`
//!   only writes while holding it, and a poller holding it meanwhile sends the request
//!   itself (the handle may live on another thread than the poller);
//! - completion order: only a request with nothing ahead of it is written, and its
//!   completion is reported by the next poll's `emit`, in order, as always;
//! - strict completions attach a confirmation Read and a tap sees every FPDU framed:
//!   both keep the poll's general path (no write from `post_send`);
//! - the poll's guessed read after a write: the connection notes the write
//!   (`Conn::send_now`), and its next step skips the guess as after its own write;
//! - a failed write (the connection lost) is handled by the next step, where the
//!   driver's tables are at hand; a full socket leaves the usual half-written batch.

use crate::fabric::slots::Slots;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use super::device::DeviceShared;
use super::MAX_SGE;
use crate::fabric::ConnId;
use crate::fabric::QueuePair;
use crate::fabric::{PostError, PostErrorKind};
use crate::fabric::{QpCaps, QpState, RecvWr, SendFlags, SendOp, SendWr, Sge, WcOpcode};
use crate::iwarp::terminate::TerminateReason;

/// Largest single message or RDMA transfer (verbs' usual 2 GiB; DDP's 32-bit message
/// offsets allow 4 GiB).
pub(crate) const MAX_MSG_SIZE: u32 = 1 << 31;

const ST_INIT: u8 = 0;
const ST_RTR: u8 = 1;
const ST_RTS: u8 = 2;
const ST_ERR: u8 = 3;
const ST_DISC: u8 = 4;

/// A send-queue work request as the engine keeps it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SqWqe {
    pub wr_id: u64,
    pub op: SendOp,
    pub signaled: bool,
    pub fence: bool,
    pub num_sge: u8,
    pub sge: [Sge; MAX_SGE],
    /// Sum of the entries' lengths.
    pub len: u64,
}

impl SqWqe {
    const EMPTY: SqWqe = SqWqe {
        wr_id: 0,
        op: SendOp::Send,
        signaled: false,
        fence: false,
        num_sge: 0,
        sge: [Sge::new(0, 0, 0); MAX_SGE],
        len: 0,
    };

    #[inline]
    pub(crate) fn sgl(&self) -> &[Sge] {
        &self.sge[..usize::from(self.num_sge)]
    }

    /// The completion opcode of this request.
    pub(crate) fn wc_opcode(&self) -> WcOpcode {
        match self.op {
            SendOp::Send | SendOp::SendWithInvalidate { .. } => WcOpcode::Send,
            SendOp::RdmaWrite { .. } => WcOpcode::RdmaWrite,
            SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
            SendOp::FastReg { .. } => WcOpcode::FastReg,
            SendOp::LocalInvalidate { .. } => WcOpcode::LocalInvalidate,
        }
    }
}

/// A posted receive.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RqWqe {
    pub wr_id: u64,
    pub num_sge: u8,
    pub sge: [Sge; MAX_SGE],
    pub len: u64,
}

impl RqWqe {
    pub(crate) const EMPTY: RqWqe = RqWqe {
        wr_id: 0,
        num_sge: 0,
        sge: [Sge::new(0, 0, 0); MAX_SGE],
        len: 0,
    };

    #[inline]
    pub(crate) fn sgl(&self) -> &[Sge] {
        &self.sge[..usize::from(self.num_sge)]
    }
}

/// Everything about a queue pair that its handle and the engine both touch.
pub(crate) struct QpShared {
    pub(crate) qp_num: u32,
    pub(crate) conn: ConnId,
    pub(crate) pd: u32,
    pub(crate) caps: QpCaps,
    state: AtomicU8,
    pub(crate) sq: Slots<SqWqe>,
    /// Requests published by the handle.
    pub(crate) sq_posted: AtomicU64,
    /// Requests the engine is done with (their slots are free).
    pub(crate) sq_retired: AtomicU64,
    pub(crate) rq: Slots<RqWqe>,
    pub(crate) rq_posted: AtomicU64,
    pub(crate) rq_retired: AtomicU64,
    /// The peer's Terminate, set once by the engine before it fails the queue pair, so
    /// the handle reads it without a lock.
    pub(crate) peer_terminate: std::sync::OnceLock<TerminateReason>,
    /// The shared receive queue inbound Sends take receives from; then `rq` holds
    /// the engine's copies of the receives this queue pair took (its handle posts none).
    pub(crate) srq: Option<Arc<super::srq::SrqShared>>,
    /// The driver's slot of this queue pair's connection (`usize::MAX` until it has
    /// one), so that `post_send` finds the connection without a search; the driver
    /// checks the connection id there, since a slot is reused after a connection goes.
    pub(crate) slot: AtomicUsize,
}

// SAFETY: the slot cells are written only by the handle (`&mut self` posting) for
// sequence numbers below `retired + depth`, and read only by the engine (which runs
// under the device claim) for sequence numbers below `posted`; the counters are
// published with release and read with acquire. Everything else is atomics or
// immutable.
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
    pub(crate) fn new(qp_num: u32, conn: ConnId, pd: u32, caps: QpCaps, state: QpState) -> Self {
        QpShared {
            qp_num,
            conn,
            pd,
            caps,
            state: AtomicU8::new(match state {
                QpState::Init => ST_INIT,
                QpState::ReadyToReceive => ST_RTR,
                QpState::ReadyToSend => ST_RTS,
                QpState::Error => ST_ERR,
                QpState::Disconnected => ST_DISC,
            }),
            sq: Slots::new(caps.max_send_wr, SqWqe::EMPTY),
            sq_posted: AtomicU64::new(0),
            sq_retired: AtomicU64::new(0),
            rq: Slots::new(caps.max_recv_wr, RqWqe::EMPTY),
            rq_posted: AtomicU64::new(0),
            rq_retired: AtomicU64::new(0),
            peer_terminate: std::sync::OnceLock::new(),
            srq: None,
            slot: AtomicUsize::new(usize::MAX),
        }
    }

    /// Receive completions this queue pair reserved on its receive completion queue:
    /// none with a shared receive queue, which reserved them itself.
    pub(crate) fn recv_reservation(&self) -> u64 {
        if self.srq.is_some() {
            0
        } else {
            u64::from(self.caps.max_recv_wr)
        }
    }

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

    /// Moves forward to `to` (ready-to-receive or ready-to-send) unless already there or
    /// failed.
    pub(crate) fn advance(&self, to: QpState) {
        let to = match to {
            QpState::ReadyToReceive => ST_RTR,
            _ => ST_RTS,
        };
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s < to).then_some(to)
            });
    }

    /// Moves to the error state (a disconnected queue pair stays disconnected).
    pub(crate) fn set_error(&self) {
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s < ST_ERR).then_some(ST_ERR)
            });
    }

    /// Moves to the disconnected state, unless an error came first.
    pub(crate) fn set_disconnected(&self) {
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                (s < ST_ERR).then_some(ST_DISC)
            });
    }
}

/// A siw queue pair (reliable connected, over one TCP connection).
pub struct SiwQp {
    pub(crate) shared: Arc<QpShared>,
    pub(crate) dev: Arc<DeviceShared>,
    /// The TCP peer: where we connected, or where the accepted request came from.
    pub(crate) peer_addr: crate::fabric::PeerAddr,
}

impl std::fmt::Debug for SiwQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.shared.fmt(f)
    }
}

/// The sum of the entries' lengths. One entry (the common post) is read directly: the
/// general sum is vectorised, and its set-up cost more than the loop on one entry.
#[inline]
fn gather_len(sgl: &[Sge]) -> u64 {
    match sgl {
        [] => 0,
        [one] => u64::from(one.length),
        _ => sgl.iter().map(|s| u64::from(s.length)).sum(),
    }
}

/// Copies `sgl` into the front of `to` (`sgl` is at most `to`'s length, checked by the
/// caller); one entry is a plain store rather than a `memcpy` call.
#[inline]
fn copy_sgl(to: &mut [Sge; MAX_SGE], sgl: &[Sge]) {
    match sgl {
        [] => {}
        [one] => to[0] = *one,
        _ => to[..sgl.len()].copy_from_slice(sgl),
    }
}

/// Posts `wrs` into a receive ring of `depth` entries of at most `max_sge` gather
/// entries each, whose producer count is `posted` and consumer count `consumed`; one
/// release store publishes them all. A queue pair's own receive queue and the shared
/// receive queue post this way.
///
/// # Safety
/// The caller is the ring's only producer.
pub(crate) unsafe fn post_recv_ring(
    rq: &Slots<RqWqe>,
    posted: &AtomicU64,
    consumed: &AtomicU64,
    depth: u32,
    max_sge: u32,
    wrs: &[RecvWr<'_>],
) -> Result<(), PostError> {
    let consumed = consumed.load(Ordering::Acquire);
    let start = posted.load(Ordering::Relaxed);
    let mut tail = start;
    let mut refused = None;
    for (i, wr) in wrs.iter().enumerate() {
        let kind = if wr.sgl.len() > max_sge as usize {
            Some(PostErrorKind::TooManySge {
                given: wr.sgl.len(),
                max: max_sge,
            })
        } else if tail - consumed >= u64::from(depth) {
            Some(PostErrorKind::QueueFull { depth })
        } else {
            None
        };
        if let Some(kind) = kind {
            refused = Some(PostError { posted: i, kind });
            break;
        }
        // SAFETY: `tail - consumed < depth`, so the consumer is done with this slot, and
        // the caller is the only producer; the reference ends before the release store.
        let w = unsafe { rq.cell_mut(tail) };
        // Filled in place, only the entries given: the rest of `sge` is never read
        // (`sgl()` stops at `num_sge`).
        w.wr_id = wr.wr_id;
        w.num_sge = wr.sgl.len() as u8;
        w.len = gather_len(wr.sgl);
        copy_sgl(&mut w.sge, wr.sgl);
        tail += 1;
    }
    if tail != start {
        posted.store(tail, Ordering::Release);
    }
    refused.map_or(Ok(()), Err)
}

impl SiwQp {
    /// The peer's Terminate as it came, with its layout and copied header, once one put
    /// the queue pair in error ([`QueuePair::peer_abort`] gives the provider-neutral
    /// form).
    pub fn peer_terminate(&self) -> Option<TerminateReason> {
        self.shared.peer_terminate.get().copied()
    }
}

impl SiwQp {
    /// Writes the Send just posted if it is a lone small Send to an idle transmitter
    /// and nobody else is running the device's engine (one compare-and-swap; a busy
    /// engine is making progress for everyone, and its next poll sends it). Only with
    /// completions on transmit and without a wire tap: see the module documentation.
    #[inline]
    fn send_now(&self) {
        let dev = &*self.dev;
        if dev.cfg.confirm_completions || dev.cfg.tap.is_some() {
            return;
        }
        let sh = &*self.shared;
        let slot = sh.slot.load(Ordering::Relaxed);
        if slot == usize::MAX {
            return;
        }
        dev.driver
            .try_with(|d| d.send_now(slot, sh.conn, &dev.keys));
    }
}

impl QueuePair for SiwQp {
    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        let sh = &*self.shared;
        if let s @ (QpState::Init | QpState::ReadyToReceive) = sh.state() {
            return Err(PostError {
                posted: 0,
                kind: PostErrorKind::InvalidState(s),
            });
        }
        let depth = u64::from(sh.caps.max_send_wr);
        let retired = sh.sq_retired.load(Ordering::Acquire);
        let start = sh.sq_posted.load(Ordering::Relaxed);
        let mut tail = start;
        let mut refused = None;
        let mut last_len = 0;
        for (i, wr) in wrs.iter().enumerate() {
            let len = gather_len(wr.sgl);
            last_len = len;
            let kind = if matches!(
                wr.op,
                SendOp::FastReg { .. } | SendOp::LocalInvalidate { .. }
            ) && !wr.sgl.is_empty()
            {
                Some(PostErrorKind::Malformed(
                    "FastReg and LocalInvalidate take no scatter-gather list",
                ))
            } else if wr.sgl.len() > sh.caps.max_send_sge as usize {
                Some(PostErrorKind::TooManySge {
                    given: wr.sgl.len(),
                    max: sh.caps.max_send_sge,
                })
            } else if len > u64::from(MAX_MSG_SIZE) {
                Some(PostErrorKind::TooLong {
                    len,
                    max: MAX_MSG_SIZE,
                })
            } else if tail - retired >= depth {
                Some(PostErrorKind::QueueFull {
                    depth: sh.caps.max_send_wr,
                })
            } else {
                None
            };
            if let Some(kind) = kind {
                refused = Some(PostError { posted: i, kind });
                break;
            }
            // SAFETY: `tail - retired < depth`, so the engine is done with this slot;
            // we are the only producer (`&mut self`); the reference ends before the
            // release store below.
            let w = unsafe { sh.sq.cell_mut(tail) };
            // Filled in place, only the entries given: the rest of `sge` is never read
            // (`sgl()` stops at `num_sge`), so it is neither zeroed nor copied.
            w.wr_id = wr.wr_id;
            w.op = wr.op;
            w.signaled = wr.flags.contains(SendFlags::SIGNALED);
            w.fence = wr.flags.contains(SendFlags::FENCE);
            w.num_sge = wr.sgl.len() as u8;
            w.len = len;
            copy_sgl(&mut w.sge, wr.sgl);
            tail += 1;
        }
        if tail != start {
            // The doorbell: one release store publishes the whole chain.
            sh.sq_posted.store(tail, Ordering::Release);
            // One lone Send to an idle transmitter goes out now, from this thread, if
            // the device's engine is free (see the module documentation).
            if tail == start + 1 && last_len <= super::tx::one::ONE_MAX as u64 {
                self.send_now();
            }
        }
        refused.map_or(Ok(()), Err)
    }

    fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let sh = &*self.shared;
        if sh.srq.is_some() && !wrs.is_empty() {
            return Err(PostError {
                posted: 0,
                kind: PostErrorKind::Malformed(
                    "the queue pair takes its receives from a shared receive queue",
                ),
            });
        }
        // SAFETY: `&mut self` makes this handle the ring's only producer.
        unsafe {
            post_recv_ring(
                &sh.rq,
                &sh.rq_posted,
                &sh.rq_retired,
                sh.caps.max_recv_wr,
                sh.caps.max_recv_sge,
                wrs,
            )
        }
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

    fn release_idle_memory(&mut self) {
        self.dev
            .retire(super::device::Retire::Trim(self.shared.conn));
    }

    fn peer_abort(&self) -> Option<crate::fabric::PeerAbort> {
        self.peer_terminate().map(Into::into)
    }

    fn peer_addr(&self) -> crate::fabric::PeerAddr {
        self.peer_addr
    }

    fn caps(&self) -> QpCaps {
        self.shared.caps
    }
}

impl Drop for SiwQp {
    fn drop(&mut self) {
        self.dev.retire(super::device::Retire::Qp(self.shared.conn));
    }
}
