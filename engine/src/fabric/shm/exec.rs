//! The executor: "the NIC lives at the target". The receive CQ's poll consumes the
//! peer's request ring in posting order, checks every key against this device's table,
//! copies between the peer's memory (mapped here) and ours, reports receive completions
//! and acknowledges what it finished by moving the ring's tail (once per poll), naming a
//! failed request in the segment's NAK record first.
//!
//! Nothing is copied until every check of a request has passed, so a failing request
//! touches no byte, and a NAK moves both queue pairs to the error state.

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::time::Instant;

use rpcrdma_pools::Arena;

use super::arenas::{Announcement, ANNOUNCE_LEN};
use super::pd::PdShared;
use super::qp::{QpShared, RqEntry};
use super::srq::SrqShared;

/// The protection domain a receive's keys are checked in: the queue pair's own, or its
/// shared receive queue's.
#[derive(Clone, Copy)]
struct RecvDomain<'a> {
    pd: u16,
    pdt: &'a PdShared,
}

impl RecvDomain<'_> {
    /// Our receive buffer `sge`, checked now (a NIC checks at placement, not at post).
    #[inline(always)]
    fn run(self, qp: &QpShared, sge: &Sge) -> Option<Run> {
        Executor::target_run_in(
            qp,
            self,
            sge.lkey,
            Access::LOCAL_WRITE,
            sge.addr,
            sge.length,
        )
    }
}
use super::ring::Consumer;
use super::segment::{ack, copy_small, op, ReqHeader, ReqSlot, Segment, INLINE_MAX, MAX_SGE};
use super::sock::{self, Recv};
use crate::fabric::mr::Access;
use crate::fabric::FabricError;
use crate::fabric::{Completion, Sge, WcOpcode, WcStatus, RNR_RETRY_INFINITE};

/// Requests executed per poll before yielding to the caller.
const BUDGET: usize = 64;

struct RnrWait {
    since: Instant,
    retries_left: u8,
}

/// What executing one request produced.
enum Outcome {
    /// No receive posted yet: try again on a later poll.
    Wait,
    /// Finished: the ack status and whether a receive completion was written.
    Done { status: u32, completed: bool },
}

impl Outcome {
    fn nak(status: u32) -> Outcome {
        Outcome::Done {
            status,
            completed: false,
        }
    }

    const ACK: Outcome = Outcome::Done {
        status: ack::OK,
        completed: false,
    };
}

/// A contiguous run of bytes resolved from scatter-gather entries.
#[derive(Clone, Copy)]
struct Run {
    ptr: *mut u8,
    len: usize,
}

const NO_RUN: Run = Run {
    ptr: std::ptr::null_mut(),
    len: 0,
};

/// Copies `total` bytes from the gather list `src` to the scatter list `dst`.
///
/// # Safety
/// Every run must be valid for its length (reads for `src`, writes for `dst`), the
/// runs must not overlap, and both lists must hold at least `total` bytes.
unsafe fn scatter_gather(src: &[Run], dst: &[Run], total: usize) {
    let (mut si, mut so, mut di, mut dof) = (0, 0, 0, 0);
    let mut left = total;
    while left > 0 && si < src.len() && di < dst.len() {
        let n = (src[si].len - so).min(dst[di].len - dof).min(left);
        // SAFETY: so + n <= src[si].len and dof + n <= dst[di].len, per the contract.
        unsafe { std::ptr::copy_nonoverlapping(src[si].ptr.add(so), dst[di].ptr.add(dof), n) };
        left -= n;
        so += n;
        dof += n;
        if so == src[si].len {
            si += 1;
            so = 0;
        }
        if dof == dst[di].len {
            di += 1;
            dof = 0;
        }
    }
}

/// How much of its memory one peer may make us map.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PeerLimits {
    /// Arenas.
    pub max_arenas: u32,
    /// Bytes of one arena.
    pub max_arena_len: u64,
    /// Bytes of all its arenas together.
    pub max_bytes: u64,
}

/// The receive side of one connected queue pair.
pub(crate) struct Executor {
    peer: Segment,
    req: Consumer<ReqSlot>,
    announce_rx: OwnedFd,
    /// The peer's arenas, mapped here as it announces them (grows on announcement only,
    /// up to `limits.max_arenas`); unmapped when the queue pair goes.
    peer_arenas: Vec<Arena>,
    /// Bytes of `peer_arenas`.
    peer_bytes: u64,
    limits: PeerLimits,
    peer_rnr_retry: u8,
    rnr: Option<RnrWait>,
}

impl Executor {
    /// An executor for the peer whose segment is `peer`, announcing arenas on
    /// `announce_rx`, retrying Sends `peer_rnr_retry` times.
    pub(crate) fn new(
        peer: Segment,
        announce_rx: OwnedFd,
        peer_rnr_retry: u8,
        limits: PeerLimits,
    ) -> Executor {
        Executor {
            req: peer.req_consumer(),
            peer,
            announce_rx,
            peer_arenas: Vec::new(),
            peer_bytes: 0,
            limits,
            peer_rnr_retry,
            rnr: None,
        }
    }

    /// Executes what the peer posted, writing receive completions into `out`.
    pub(crate) fn step(&mut self, qp: &QpShared, out: &mut [Completion]) -> usize {
        // One read of our state per poll (a failure set after it is seen by the next).
        if qp.is_error() || self.peer.has_failed() {
            return self.failed_step(qp, out);
        }
        let mut n = 0;
        for _ in 0..BUDGET {
            let Some(slot) = self.req.peek_prefetching() else {
                break;
            };
            // SAFETY: a published slot of the peer's live ring.
            let h = unsafe { ReqSlot::header(slot) };
            let is_send = matches!(h.op & !op::INLINE, op::SEND | op::SEND_INV);
            if is_send && n == out.len() {
                break;
            }
            let outcome = match h.op {
                _ if is_send => self.exec_send(qp, &h, slot, &mut out[n]),
                op::WRITE => self.exec_write(qp, &h, slot),
                op::READ => self.exec_read(qp, &h, slot),
                _ => Outcome::nak(ack::REMOTE_INVALID),
            };
            let Outcome::Done { status, completed } = outcome else {
                break;
            };
            if completed {
                n += 1;
            }
            if status != ack::OK {
                self.peer.post_nak(self.req.position(), status);
                self.req.advance();
                // The NAK must be visible before our failed flag, so the peer reports
                // the NAK's status rather than a flush for this request.
                self.fail(qp);
                return n + qp.flush_recvs(&mut out[n..]);
            }
            self.req.advance();
        }
        // One release store acknowledges everything executed in this poll.
        self.req.release();
        n
    }

    /// Our queue pair, or the peer, has failed: ours goes to the error state (if not
    /// there already) and the posted receives are flushed.
    #[cold]
    #[inline(never)]
    fn failed_step(&mut self, qp: &QpShared, out: &mut [Completion]) -> usize {
        if !qp.is_error() {
            qp.set_error();
        }
        qp.flush_recvs(out)
    }

    #[inline(never)]
    fn fail(&mut self, qp: &QpShared) {
        self.req.release();
        qp.set_error();
    }

    /// Maps the peer's arena `idx`, reading announcements until it has arrived.
    #[inline(never)]
    fn peer_arena(&mut self, idx: u32) -> Option<&Arena> {
        self.map_peer_arena(idx).ok()
    }

    /// Maps announced arenas up to `idx`, checking each against the peer limits and
    /// its descriptor against [`Arena::from_peer_fd`]'s rules. An error fails only
    /// this queue pair (the request naming the arena is NAKed).
    pub(crate) fn map_peer_arena(&mut self, idx: u32) -> Result<&Arena, FabricError> {
        let want = idx as usize;
        while self.peer_arenas.len() <= want {
            let announced = self.peer.arenas_announced().load(Ordering::Acquire);
            if idx >= announced {
                return Err(FabricError::Protocol("request names an unannounced arena"));
            }
            if self.peer_arenas.len() >= self.limits.max_arenas as usize {
                return Err(FabricError::Exhausted {
                    what: "arenas a peer may announce",
                    max: self.limits.max_arenas as usize,
                });
            }
            let mut buf = [0u8; ANNOUNCE_LEN + 1];
            let (n, mut fds) = match sock::recv(&self.announce_rx, &mut buf) {
                Ok(Recv::Msg(n, fds)) => (n, fds),
                Ok(_) => return Err(FabricError::Protocol("announced arena not received")),
                Err(err) => {
                    return Err(FabricError::Os {
                        op: "receive arena announcement",
                        err,
                    })
                }
            };
            let a = Announcement::decode(&buf[..n])?;
            if a.index as usize != self.peer_arenas.len() || fds.len() != 1 {
                return Err(FabricError::Protocol("arena announced out of order"));
            }
            let total = self.peer_bytes.saturating_add(a.len);
            if a.len > self.limits.max_arena_len || total > self.limits.max_bytes {
                return Err(FabricError::Protocol("peer announced too much memory"));
            }
            let fd = fds
                .take(0)
                .ok_or(FabricError::Protocol("announcement without descriptor"))?;
            let len = usize::try_from(a.len)
                .map_err(|_| FabricError::Protocol("peer announced too much memory"))?;
            let max = usize::try_from(self.limits.max_arena_len).unwrap_or(usize::MAX);
            let arena = Arena::from_peer_fd(fd, len, max).map_err(|_| {
                FabricError::Protocol("peer arena is not sealed memory of its length")
            })?;
            self.peer_bytes = total;
            self.peer_arenas.push(arena);
        }
        Ok(&self.peer_arenas[want])
    }

    /// Resolves the peer's translated entries of `slot` to runs in our mapping of its
    /// arenas. `None` means the peer broke the protocol.
    fn peer_runs(
        &mut self,
        h: &ReqHeader,
        slot: *const ReqSlot,
        runs: &mut [Run; MAX_SGE],
    ) -> Option<usize> {
        let n = h.num_sge as usize;
        if n > MAX_SGE {
            return None;
        }
        let mut total: u64 = 0;
        for (i, run) in runs.iter_mut().enumerate().take(n) {
            // SAFETY: a published slot of the peer's live ring; i < n <= MAX_SGE.
            let sge = unsafe { ReqSlot::sge(slot, i) };
            let arena = self.peer_arena(sge.arena)?;
            let end = sge.offset.checked_add(u64::from(sge.len))?;
            if end > arena.len() as u64 {
                return None;
            }
            *run = Run {
                ptr: arena.base().wrapping_add(sge.offset as usize),
                len: sge.len as usize,
            };
            total += u64::from(sge.len);
        }
        (total == u64::from(h.total_len)).then_some(n)
    }

    /// Resolves our own `[addr, addr+len)` under `rkey` with `need`.
    #[inline]
    fn target_run_in(
        qp: &QpShared,
        dom: RecvDomain<'_>,
        rkey: u32,
        need: Access,
        addr: u64,
        len: u32,
    ) -> Option<Run> {
        let len64 = u64::from(len);
        let place = qp.dev.table.lookup(rkey, dom.pd, need, addr, len64).ok()?;
        let ptr = dom.pdt.arenas.local_ptr(place, len64)?;
        Some(Run {
            ptr,
            len: len as usize,
        })
    }

    fn target_run(qp: &QpShared, rkey: u32, need: Access, addr: u64, len: u32) -> Option<Run> {
        let len64 = u64::from(len);
        let place = qp.dev.table.lookup(rkey, qp.pd, need, addr, len64).ok()?;
        let ptr = qp.pdt.arenas.local_ptr(place, len64)?;
        Some(Run {
            ptr,
            len: len as usize,
        })
    }

    #[inline(never)]
    fn exec_write(&mut self, qp: &QpShared, h: &ReqHeader, slot: *const ReqSlot) -> Outcome {
        let mut src = [NO_RUN; MAX_SGE];
        let Some(ns) = self.peer_runs(h, slot, &mut src) else {
            return Outcome::nak(ack::REMOTE_OP);
        };
        // As in InfiniBand, a zero-length RDMA operation checks no key.
        if h.total_len > 0 {
            let Some(dst) =
                Self::target_run(qp, h.key, Access::REMOTE_WRITE, h.remote_addr, h.total_len)
            else {
                return Outcome::nak(ack::REMOTE_ACCESS);
            };
            // SAFETY: src runs lie inside the peer's arenas as mapped here, dst inside
            // one of our registered arenas (bounds checked above); separate mappings.
            unsafe { scatter_gather(&src[..ns], &[dst], h.total_len as usize) };
        }
        Outcome::ACK
    }

    #[inline(never)]
    fn exec_read(&mut self, qp: &QpShared, h: &ReqHeader, slot: *const ReqSlot) -> Outcome {
        let mut dst = [NO_RUN; MAX_SGE];
        let Some(nd) = self.peer_runs(h, slot, &mut dst) else {
            return Outcome::nak(ack::REMOTE_OP);
        };
        if h.total_len > 0 {
            let Some(src) =
                Self::target_run(qp, h.key, Access::REMOTE_READ, h.remote_addr, h.total_len)
            else {
                return Outcome::nak(ack::REMOTE_ACCESS);
            };
            // SAFETY: as in exec_write, with the directions swapped.
            unsafe { scatter_gather(&[src], &dst[..nd], h.total_len as usize) };
        }
        Outcome::ACK
    }

    /// No receive posted: wait for one within the peer's RNR retry budget.
    #[inline(never)]
    fn receiver_not_ready(&mut self, qp: &QpShared) -> Outcome {
        match &mut self.rnr {
            None => {
                if self.peer_rnr_retry == 0 {
                    return Outcome::nak(ack::RNR_EXCEEDED);
                }
                self.rnr = Some(RnrWait {
                    since: Instant::now(),
                    retries_left: self.peer_rnr_retry,
                });
                Outcome::Wait
            }
            Some(w) => {
                let now = Instant::now();
                if now.duration_since(w.since) < qp.min_rnr_timer {
                    return Outcome::Wait;
                }
                // One retry found no receive either.
                w.since = now;
                if w.retries_left != RNR_RETRY_INFINITE {
                    w.retries_left -= 1;
                    if w.retries_left == 0 {
                        self.rnr = None;
                        return Outcome::nak(ack::RNR_EXCEEDED);
                    }
                }
                Outcome::Wait
            }
        }
    }

    fn exec_send(
        &mut self,
        qp: &QpShared,
        h: &ReqHeader,
        slot: *const ReqSlot,
        out: &mut Completion,
    ) -> Outcome {
        if let Some(srq) = &qp.srq {
            return self.exec_send_shared(qp, srq, h, slot, out);
        }
        let posted = qp.posted.rq_posted.load(Ordering::Acquire);
        let consumed = qp.polled.rq_consumed.load(Ordering::Relaxed);
        if consumed == posted {
            return self.receiver_not_ready(qp);
        }
        self.rnr = None;
        // SAFETY: consumed < posted: the poster published this entry; we are the
        // receive queue's only consumer, and release it below, after the last use of
        // `recv`.
        let recv = unsafe { qp.rq.get(consumed) };
        let wr_id = recv.wr_id;
        let dom = RecvDomain {
            pd: qp.pd,
            pdt: &qp.pdt,
        };
        let placed = self.place_recv(qp, dom, h, slot, recv);
        qp.polled.rq_consumed.store(consumed + 1, Ordering::Release);
        Self::received(qp, h, wr_id, placed, out)
    }

    /// [`exec_send`](Self::exec_send) of a queue pair taking its receives from a shared
    /// receive queue. Out of line: the common path keeps one branch.
    #[inline(never)]
    fn exec_send_shared(
        &mut self,
        qp: &QpShared,
        srq: &SrqShared,
        h: &ReqHeader,
        slot: *const ReqSlot,
        out: &mut Completion,
    ) -> Outcome {
        // SAFETY: the queue pair's receive CQ is the shared queue's (checked at
        // creation), and this runs in its poll: the queue's one consumer.
        let Some(recv) = (unsafe { srq.front() }) else {
            return self.receiver_not_ready(qp);
        };
        self.rnr = None;
        let wr_id = recv.wr_id;
        let dom = RecvDomain {
            pd: srq.pd,
            pdt: &srq.pdt,
        };
        let placed = self.place_shared(qp, dom, h, slot, recv);
        // SAFETY: as above; `recv` is not used after this.
        unsafe { srq.take() };
        Self::received(qp, h, wr_id, placed, out)
    }

    /// The receive completion of a Send placed (or refused) into receive `wr_id`, and
    /// the ack for the sender.
    #[inline(always)]
    fn received(
        qp: &QpShared,
        h: &ReqHeader,
        wr_id: u64,
        placed: Result<Option<u32>, (WcStatus, u32)>,
        out: &mut Completion,
    ) -> Outcome {
        let (status, byte_len, inv, ack_status) = match placed {
            Ok(inv) => (WcStatus::Success, h.total_len, inv, ack::OK),
            Err((status, ack_status)) => (status, 0, None, ack_status),
        };
        *out = Completion {
            wr_id,
            opcode: WcOpcode::Recv,
            status,
            byte_len,
            qp_num: qp.qp_num,
            invalidated_rkey: inv,
        };
        Outcome::Done {
            status: ack_status,
            completed: true,
        }
    }

    /// [`place_recv`](Self::place_recv) for the shared receive queue's path, as a call
    /// of its own, so the common path's copy stays the only one inlined.
    #[inline(never)]
    fn place_shared(
        &mut self,
        qp: &QpShared,
        dom: RecvDomain<'_>,
        h: &ReqHeader,
        slot: *const ReqSlot,
        recv: &RqEntry,
    ) -> Result<Option<u32>, (WcStatus, u32)> {
        self.place_recv(qp, dom, h, slot, recv)
    }

    /// Places a Send into receive `recv`, whose keys belong to `dom`.
    #[inline(always)]
    fn place_recv(
        &mut self,
        qp: &QpShared,
        dom: RecvDomain<'_>,
        h: &ReqHeader,
        slot: *const ReqSlot,
        recv: &RqEntry,
    ) -> Result<Option<u32>, (WcStatus, u32)> {
        match recv.sge.get(..recv.num_sge as usize) {
            // A small Send into a one-entry receive, the common case: no run arrays.
            Some([sge]) if h.op & op::INLINE != 0 => Self::place_inline(qp, dom, h, slot, sge),
            _ => self.place(qp, dom, h, slot, recv),
        }
    }

    /// Places an inline payload into a one-entry receive. The same checks in the same
    /// order as [`Executor::place`]; returns the invalidated key, or the receive's
    /// status and the NAK.
    #[inline(always)]
    fn place_inline(
        qp: &QpShared,
        dom: RecvDomain<'_>,
        h: &ReqHeader,
        slot: *const ReqSlot,
        sge: &Sge,
    ) -> Result<Option<u32>, (WcStatus, u32)> {
        // Our receive buffer, checked now (a NIC checks at placement, not at post).
        let dst = dom
            .run(qp, sge)
            .ok_or((WcStatus::LocalProtectionError, ack::REMOTE_OP))?;
        if h.total_len > sge.length {
            return Err((WcStatus::LocalLengthError, ack::REMOTE_INVALID));
        }
        if h.total_len > INLINE_MAX {
            return Err((WcStatus::GeneralError, ack::REMOTE_OP));
        }
        let inv = Self::invalidate_for(qp, h)?;
        // SAFETY: the body of a published slot of the peer's live ring holds
        // INLINE_MAX >= total_len bytes; dst is inside one of our registered arenas for
        // sge.length >= total_len bytes (checked); separate mappings.
        unsafe {
            copy_small(
                ReqSlot::body(slot.cast_mut()),
                dst.ptr,
                h.total_len as usize,
            )
        };
        Ok(inv)
    }

    /// Send With Invalidate: kills our key named by the peer (before placement, so a
    /// failing invalidation places nothing).
    #[inline]
    fn invalidate_for(qp: &QpShared, h: &ReqHeader) -> Result<Option<u32>, (WcStatus, u32)> {
        if h.op & !op::INLINE != op::SEND_INV {
            return Ok(None);
        }
        match qp.dev.table.invalidate(h.key, qp.pd) {
            Ok(()) => Ok(Some(h.key)),
            Err(_) => Err((WcStatus::LocalAccessError, ack::REMOTE_ACCESS)),
        }
    }

    /// Places any Send into any receive: checks every receive entry, the length, the
    /// source, the invalidation, then copies. Returns as [`Executor::place_inline`].
    #[inline(never)]
    fn place(
        &mut self,
        qp: &QpShared,
        dom: RecvDomain<'_>,
        h: &ReqHeader,
        slot: *const ReqSlot,
        recv: &RqEntry,
    ) -> Result<Option<u32>, (WcStatus, u32)> {
        // Our receive buffers, checked now (a NIC checks at placement, not at post).
        let sges = &recv.sge[..(recv.num_sge as usize).min(MAX_SGE)];
        let mut dst = [NO_RUN; MAX_SGE];
        let mut cap: u64 = 0;
        for (run, sge) in dst.iter_mut().zip(sges) {
            *run = dom
                .run(qp, sge)
                .ok_or((WcStatus::LocalProtectionError, ack::REMOTE_OP))?;
            cap += u64::from(sge.length);
        }
        if u64::from(h.total_len) > cap {
            return Err((WcStatus::LocalLengthError, ack::REMOTE_INVALID));
        }
        let mut src = [NO_RUN; MAX_SGE];
        let ns = if h.op & op::INLINE != 0 {
            if h.total_len > INLINE_MAX {
                return Err((WcStatus::GeneralError, ack::REMOTE_OP));
            }
            src[0] = Run {
                // SAFETY: a published slot of the peer's live ring. Only read through.
                ptr: unsafe { ReqSlot::body(slot.cast_mut()) },
                len: h.total_len as usize,
            };
            1
        } else {
            self.peer_runs(h, slot, &mut src)
                .ok_or((WcStatus::GeneralError, ack::REMOTE_OP))?
        };
        let inv = Self::invalidate_for(qp, h)?;
        // SAFETY: src runs lie in the peer's arenas as mapped here or in its slot's body
        // (total_len <= INLINE_MAX), dst runs in our registered arenas (bounds checked);
        // cap >= total_len was checked above.
        unsafe { scatter_gather(&src[..ns], &dst[..sges.len()], h.total_len as usize) };
        Ok(inv)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsFd, FromRawFd};

    use super::super::testutil::memfd;

    const LIMITS: PeerLimits = PeerLimits {
        max_arenas: 4,
        max_arena_len: 1 << 20,
        max_bytes: 3 << 19,
    };

    /// An executor whose peer announces `(index, claimed length, descriptor)`s.
    fn executor_told(announced: Vec<(u32, u64, OwnedFd)>) -> Executor {
        let seg = Segment::create(16).unwrap();
        let (tx, rx) = sock::pair().unwrap();
        let n = announced.len() as u32;
        for (index, len, fd) in announced {
            let msg = Announcement { index, len }.encode();
            sock::send(&tx, &msg, &[fd.as_fd()]).unwrap();
        }
        seg.arenas_announced().store(n, Ordering::Release);
        // The sending end may close: what was sent stays queued.
        Executor::new(seg, rx, 0, LIMITS)
    }

    fn refused(announced: Vec<(u32, u64, OwnedFd)>, idx: u32) {
        let mut ex = executor_told(announced);
        match ex.map_peer_arena(idx) {
            Err(FabricError::Protocol(_) | FabricError::Exhausted { .. }) => {}
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn peer_arenas_that_could_hurt_us_are_refused() {
        // Unsealed: the peer could truncate it under our mapping (SIGBUS).
        refused(vec![(0, 8192, memfd(8192, false))], 0);
        // Truncated: shorter than announced.
        refused(vec![(0, 8192, memfd(4096, true))], 0);
        // Huge: above the per-arena bound, however large the (sparse) file.
        refused(vec![(0, 1 << 36, memfd(1 << 36, true))], 0);
        // Together above the per-connection bound.
        refused(
            vec![
                (0, 1 << 20, memfd(1 << 20, true)),
                (1, 1 << 20, memfd(1 << 20, true)),
            ],
            1,
        );
        // Out of order.
        refused(vec![(1, 4096, memfd(4096, true))], 0);
        // Not announced at all.
        refused(vec![(0, 4096, memfd(4096, true))], 1);
        // Not a memfd.
        let mut p = [0; 2];
        // SAFETY: room for two descriptors.
        assert_eq!(unsafe { libc::pipe(p.as_mut_ptr()) }, 0);
        // SAFETY: fresh and ours.
        let (r, _w) = unsafe { (OwnedFd::from_raw_fd(p[0]), OwnedFd::from_raw_fd(p[1])) };
        refused(vec![(0, 4096, r)], 0);
        // More arenas than allowed.
        let many = (0..5).map(|i| (i, 4096, memfd(4096, true))).collect();
        refused(many, 4);
    }

    #[test]
    fn sealed_peer_arenas_within_bounds_are_mapped() {
        let mut ex = executor_told(vec![
            (0, 4096, memfd(4096, true)),
            (1, 1 << 20, memfd(1 << 20, true)),
        ]);
        assert_eq!(ex.map_peer_arena(1).unwrap().len(), 1 << 20);
        assert_eq!(ex.map_peer_arena(0).unwrap().len(), 4096);
    }

    #[test]
    fn scatter_gather_crosses_uneven_boundaries() {
        let mut src_buf: Vec<u8> = (0..100u8).collect();
        let mut dst_buf = vec![0u8; 100];
        let s = src_buf.as_mut_ptr();
        let d = dst_buf.as_mut_ptr();
        let src = [
            Run { ptr: s, len: 3 },
            Run {
                ptr: s.wrapping_add(3),
                len: 50,
            },
            Run {
                ptr: s.wrapping_add(53),
                len: 47,
            },
        ];
        let dst = [
            Run { ptr: d, len: 10 },
            Run {
                ptr: d.wrapping_add(10),
                len: 1,
            },
            Run {
                ptr: d.wrapping_add(11),
                len: 89,
            },
        ];
        // SAFETY: all runs are inside the two live vectors.
        unsafe { scatter_gather(&src, &dst, 99) };
        assert_eq!(&dst_buf[..99], &src_buf[..99]);
        assert_eq!(dst_buf[99], 0);
    }
}
