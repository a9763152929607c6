//! Completion queues: verbs completions polled in batches and translated through the
//! owning queue pair's request records.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use rdma_sys::{ibv_cq, ibv_create_cq, ibv_destroy_cq, ibv_poll_cq, ibv_wc};

use crate::fabric::CompletionQueue;
use crate::fabric::{Completion, FabricError, WcOpcode, WcStatus};

use super::device::DeviceShared;
use super::qp::QpShared;
use super::ring::{Entry, RECV_TAG, WAKE_WR_ID};
use super::srq::{SrqShared, SRQ_TAG};
use super::status::wc_status;

/// Most completions taken from the device per `ibv_poll_cq`.
pub const POLL_BATCH: usize = 32;

/// How long after a queue pair is found in error its completion queues wait before
/// completing, as flushed, the requests the device has still not reported.
///
/// Why: kernel siw and rxe flush what a userspace queue pair's queues hold at the moment
/// it enters the error state (the peer closed, a request failed). A request the
/// provider writes into the queue after that moment, because it had not yet polled the
/// completion or event that says so, is never processed and never reported: siw's
/// doorbell for a queue pair in error flushes only the kernel's own requests, and a
/// receive needs no doorbell at all. A connection draining after its peer's close then
/// waited for ever for those (`engine_verbs_disconnect::requester_closes_mid_flight` on
/// siw0, a responder stuck in `Draining` holding two send-queue slots per reply). The
/// device's own flushes are written when the state changes, long before the grace
/// ends; a report arriving after the sweep anyway is refused by the request ring.
const FLUSH_GRACE: Duration = Duration::from_millis(200);

/// How many device completion entries back one fabric entry: an RDMA Read split for a
/// device with few read scatter entries can fail piece by piece.
const DEVICE_ENTRIES_PER_ENTRY: u32 = 4;

/// The state a completion queue shares with the queue pairs reporting to it.
pub(crate) struct CqShared {
    pub(crate) dev: Arc<DeviceShared>,
    pub(crate) cq: *mut ibv_cq,
    depth: u32,
    /// Entries the attached queues may need, against `depth`.
    committed: Mutex<u64>,
    /// Queue pairs reporting here; changes bump `generation`.
    registry: Mutex<Vec<Arc<QpShared>>>,
    generation: AtomicU64,
    /// Flushes of requests posted to a queue pair already in error, which never reach
    /// the device.
    pub(crate) synthetic: ArrayQueue<Completion>,
    /// Shared receive queues reporting here; changes bump `generation` too.
    srqs: Mutex<Vec<Arc<SrqShared>>>,
    /// A queue pair reporting here is in error and may hold requests its device will
    /// never report ([`FLUSH_GRACE`]): polls that empty the device queue sweep.
    pub(crate) sweep_due: AtomicBool,
}

// SAFETY: a verbs CQ may be used from any thread; only the VerbsCq owner polls it.
unsafe impl Send for CqShared {}
// SAFETY: as above; the other fields are thread-safe.
unsafe impl Sync for CqShared {}

impl Drop for CqShared {
    fn drop(&mut self) {
        // SAFETY: every queue pair using the CQ holds an Arc to this and destroys its QP
        // first; destroyed once.
        unsafe { ibv_destroy_cq(self.cq) };
    }
}

impl CqShared {
    /// Reserves room for `n` entries; false when they would not fit.
    pub(crate) fn commit(&self, n: u64) -> Result<(), FabricError> {
        let mut c = self.committed.lock().unwrap_or_else(|p| p.into_inner());
        if *c + n > u64::from(self.depth) {
            return Err(FabricError::CqTooSmall {
                needed: *c + n,
                depth: self.depth,
            });
        }
        *c += n;
        Ok(())
    }

    /// Returns room reserved with [`CqShared::commit`].
    pub(crate) fn release(&self, n: u64) {
        let mut c = self.committed.lock().unwrap_or_else(|p| p.into_inner());
        *c = c.saturating_sub(n);
    }

    pub(crate) fn register(&self, qp: &Arc<QpShared>) {
        let mut r = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        r.push(qp.clone());
        self.generation.fetch_add(1, Ordering::Release);
    }

    pub(crate) fn register_srq(&self, srq: &Arc<SrqShared>) {
        let mut r = self.srqs.lock().unwrap_or_else(|p| p.into_inner());
        r.push(srq.clone());
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Forgets a shared receive queue whose handle was dropped: completions of its
    /// receives still arriving are dropped (destroying a queue reports nothing for
    /// the receives it held).
    pub(crate) fn unregister_srq(&self, srq: &SrqShared) {
        let mut r = self.srqs.lock().unwrap_or_else(|p| p.into_inner());
        r.retain(|q| !std::ptr::eq(Arc::as_ptr(q), srq));
        self.generation.fetch_add(1, Ordering::Release);
    }

    pub(crate) fn unregister(&self, qp: &QpShared) {
        let mut r = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        r.retain(|q| !std::ptr::eq(Arc::as_ptr(q), qp));
        self.generation.fetch_add(1, Ordering::Release);
    }
}

/// A completion queue.
pub struct VerbsCq {
    pub(crate) shared: Arc<CqShared>,
    /// The registry as of `seen`, so polling takes no lock.
    cache: Vec<Arc<QpShared>>,
    /// The shared receive queues as of `seen`.
    srq_cache: Vec<Arc<SrqShared>>,
    seen: u64,
}

impl std::fmt::Debug for VerbsCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsCq")
            .field("depth", &self.shared.depth)
            .finish_non_exhaustive()
    }
}

impl VerbsCq {
    pub(crate) fn new(dev: &Arc<DeviceShared>, depth: u32) -> Result<VerbsCq, FabricError> {
        let max = dev.attr.max_cqe.max(1) as u32;
        if depth == 0 || depth > max {
            return Err(FabricError::InvalidCaps {
                what: "completion queue depth",
                requested: depth,
                max,
            });
        }
        let entries = depth.saturating_mul(DEVICE_ENTRIES_PER_ENTRY).min(max);
        // A provider may fail without setting errno (libsiw when its mapping of the
        // queue fails before or after its own calls): cleared first, so a stale value
        // from an earlier call (a non-blocking CM read's EAGAIN) is not reported.
        // SAFETY: errno is this thread's.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: the context is live while `dev` is; no channel, no vector.
        let cq = unsafe {
            ibv_create_cq(
                dev.ctx,
                entries as i32,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        if cq.is_null() {
            let err = std::io::Error::last_os_error();
            return Err(FabricError::Os {
                op: match err.raw_os_error() {
                    Some(0) => "ibv_create_cq (the provider set no errno)",
                    _ => "ibv_create_cq",
                },
                err,
            });
        }
        Ok(VerbsCq {
            shared: Arc::new(CqShared {
                dev: dev.clone(),
                cq,
                depth,
                committed: Mutex::new(0),
                registry: Mutex::new(Vec::new()),
                generation: AtomicU64::new(0),
                synthetic: ArrayQueue::new(depth as usize),
                srqs: Mutex::new(Vec::new()),
                sweep_due: AtomicBool::new(false),
            }),
            cache: Vec::new(),
            srq_cache: Vec::new(),
            seen: u64::MAX,
        })
    }

    fn refresh(&mut self) {
        let r = self
            .shared
            .registry
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        self.seen = self.shared.generation.load(Ordering::Acquire);
        self.cache.clear();
        self.cache.extend(r.iter().cloned());
        drop(r);
        let s = self.shared.srqs.lock().unwrap_or_else(|p| p.into_inner());
        self.srq_cache.clear();
        self.srq_cache.extend(s.iter().cloned());
    }

    /// A receive taken from a shared receive queue: its slot says whose it was.
    fn translate_shared(&mut self, wc: &ibv_wc) -> Option<Completion> {
        let status = wc_status(wc.status);
        if !status.is_success() {
            if let Some(qp) = self.cache.iter().find(|q| q.qp_num == wc.qp_num) {
                qp.fail();
            }
        }
        let srq = self.srq_cache.iter().find(|q| q.owns(wc.wr_id))?;
        let (wr_id, _len) = srq.complete(wc.wr_id)?;
        let ok = status.is_success();
        let flags = srq.cq.dev.with_inv_flags;
        let inv = (ok && wc.wc_flags & flags != 0)
            // SAFETY: as in `translate`.
            .then_some(unsafe { wc.imm_data_invalidated_rkey_union.invalidated_rkey });
        Some(Completion {
            wr_id,
            opcode: WcOpcode::Recv,
            status,
            byte_len: if ok { wc.byte_len } else { 0 },
            qp_num: wc.qp_num,
            invalidated_rkey: inv,
        })
    }

    /// A wake-up Write's completion (`QpShared::post_wake_write`; unsignaled, so only a
    /// flush or an error reaches here): nobody waits for it. An error fails its queue
    /// pair, as any failed request does.
    #[cold]
    fn wake_read_done(&mut self, wc: &ibv_wc) {
        if wc_status(wc.status).is_success() {
            return;
        }
        if let Some(qp) = self.cache.iter().find(|q| q.qp_num == wc.qp_num) {
            qp.fail();
        }
    }

    /// Records `wc` with its queue pair and returns the completion it releases, if any
    /// (send completions reported early stay parked until the earlier ones are in).
    fn translate(&mut self, wc: &ibv_wc) -> Option<Completion> {
        if wc.wr_id & SRQ_TAG != 0 {
            if wc.wr_id == WAKE_WR_ID {
                self.wake_read_done(wc);
                return None;
            }
            return self.translate_shared(wc);
        }
        let found = self.cache.iter().position(|q| q.qp_num == wc.qp_num);
        let at = match found {
            Some(i) => i,
            None => {
                // A queue pair registered while this poll was under way.
                self.refresh();
                self.cache.iter().position(|q| q.qp_num == wc.qp_num)?
            }
        };
        let qp = &self.cache[at];
        let recv = wc.wr_id & RECV_TAG != 0;
        let seq = wc.wr_id & !RECV_TAG;
        let status = wc_status(wc.status);
        if !status.is_success() {
            qp.fail();
        }
        if recv {
            // Receives of one queue pair complete in order, so this is `seq` itself.
            if !qp.rq.record(seq, status) {
                return None;
            }
            let (entry, status) = qp.rq.pop()?;
            let ok = status.is_success();
            // Kernel siw sets neither flag nor key in a userspace CQE (it invalidates
            // all the same): `None` there is DeviceCaps::reports_remote_invalidation
            // false, not a lost report.
            let inv = (ok && wc.wc_flags & qp.pd.dev.with_inv_flags != 0)
                // SAFETY: every member of the union is a plain u32; it holds the
                // invalidated key when the flag is set (and is only used then).
                .then_some(unsafe { wc.imm_data_invalidated_rkey_union.invalidated_rkey });
            let mut c = recv_completion(entry, status, qp.qp_num);
            c.byte_len = if ok { wc.byte_len } else { 0 };
            c.invalidated_rkey = inv;
            return Some(c);
        }
        qp.sq.record(seq, status);
        qp.sq.pop().map(|(e, st)| send_completion(e, st, qp.qp_num))
    }

    /// Moves send completions that became deliverable into `out[*produced..]`.
    fn drain_parked(&self, out: &mut [Completion], produced: &mut usize) {
        for qp in &self.cache {
            while *produced < out.len() {
                match qp.sq.pop() {
                    Some((e, st)) => {
                        out[*produced] = send_completion(e, st, qp.qp_num);
                        *produced += 1;
                    }
                    None => break,
                }
            }
        }
    }
}

impl VerbsCq {
    /// Completes, as flushed, what queue pairs in error for longer than [`FLUSH_GRACE`]
    /// still hold of the queues reporting here, into `out[*produced..]`; keeps the
    /// sweep due while any such queue pair has requests outstanding.
    #[cold]
    #[inline(never)]
    fn sweep_errored(&mut self, out: &mut [Completion], produced: &mut usize) {
        self.shared.sweep_due.store(false, Ordering::Release);
        let me = Arc::as_ptr(&self.shared);
        let now = Instant::now();
        for qp in &self.cache {
            let Some(at) = qp.errored_at.get() else {
                continue;
            };
            if now.duration_since(*at) < FLUSH_GRACE {
                continue;
            }
            let (sends, recvs) = queues_here(qp, me);
            if sends {
                qp.sq.flush_unreported();
            }
            if recvs {
                qp.rq.flush_unreported();
                while *produced < out.len() {
                    let Some((e, st)) = qp.rq.pop() else { break };
                    out[*produced] = recv_completion(e, st, qp.qp_num);
                    *produced += 1;
                }
            }
        }
        self.drain_parked(out, produced);
        // Still within the grace, or more than `out` had room for.
        let again = self.cache.iter().any(|qp| {
            let (sends, recvs) = queues_here(qp, me);
            qp.errored_at.get().is_some()
                && ((sends && qp.sq.outstanding()) || (recvs && qp.rq.outstanding()))
        });
        if again {
            self.shared.sweep_due.store(true, Ordering::Release);
        }
    }
}

/// Which of `qp`'s queues report to the completion queue at `cq`: (sends, receives);
/// receives only when the queue pair has its own receive queue.
fn queues_here(qp: &QpShared, cq: *const CqShared) -> (bool, bool) {
    (
        std::ptr::eq(Arc::as_ptr(&qp.send_cq), cq),
        std::ptr::eq(Arc::as_ptr(&qp.recv_cq), cq) && qp.srq.is_none(),
    )
}

/// A receive's completion as its record says (no octets, no invalidated key).
fn recv_completion(e: Entry, status: WcStatus, qp_num: u32) -> Completion {
    Completion {
        wr_id: e.wr_id,
        opcode: WcOpcode::Recv,
        status,
        byte_len: 0,
        qp_num,
        invalidated_rkey: None,
    }
}

fn send_completion(e: Entry, status: WcStatus, qp_num: u32) -> Completion {
    Completion {
        wr_id: e.wr_id,
        opcode: e.opcode,
        status,
        byte_len: e.len,
        qp_num,
        invalidated_rkey: None,
    }
}

impl CompletionQueue for VerbsCq {
    fn poll(&mut self, out: &mut [Completion]) -> usize {
        if self.shared.generation.load(Ordering::Acquire) != self.seen {
            self.refresh();
        }
        let mut produced = 0;
        self.drain_parked(out, &mut produced);
        // Each device completion releases at most one fabric completion here.
        let want = (out.len() - produced).min(POLL_BATCH);
        if want > 0 {
            let mut wcs: [MaybeUninit<ibv_wc>; POLL_BATCH] =
                [const { MaybeUninit::uninit() }; POLL_BATCH];
            // SAFETY: the CQ is live; wcs has room for `want` entries, which is what
            // the device may write.
            let n = unsafe { ibv_poll_cq(self.shared.cq, want as i32, wcs.as_mut_ptr().cast()) };
            for wc in wcs.iter().take(n.max(0) as usize) {
                // SAFETY: ibv_poll_cq initialised the first n entries.
                let wc = unsafe { wc.assume_init_ref() };
                if let Some(c) = self.translate(wc) {
                    out[produced] = c;
                    produced += 1;
                }
            }
            self.drain_parked(out, &mut produced);
            // The device queue is empty: what an errored queue pair still holds may
            // never be reported.
            if (n.max(0) as usize) < want && self.shared.sweep_due.load(Ordering::Acquire) {
                self.sweep_errored(out, &mut produced);
            }
        }
        while produced < out.len() {
            match self.shared.synthetic.pop() {
                Some(c) => {
                    out[produced] = c;
                    produced += 1;
                }
                None => break,
            }
        }
        produced
    }

    fn depth(&self) -> u32 {
        self.shared.depth
    }
}

/// A flushed completion for a request that never reached the device.
pub(crate) fn flushed(wr_id: u64, opcode: WcOpcode, qp_num: u32) -> Completion {
    Completion {
        wr_id,
        opcode,
        status: WcStatus::WrFlushed,
        byte_len: 0,
        qp_num,
        invalidated_rkey: None,
    }
}
