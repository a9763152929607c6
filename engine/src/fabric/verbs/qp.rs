//! Reliable-connected queue pairs: creation, state, and posting.
//!
//! Queue pairs are created with `ibv_create_qp` in the protection domain's context and
//! moved to INIT at once, so receives can be posted before the connection exists; the
//! connection manager then drives RTR and RTS (see `cm`). A chain of work requests is
//! translated into preallocated `ibv_send_wr`/`ibv_sge` arrays and handed to the device
//! with a single `ibv_post_send` (one doorbell); posting allocates nothing.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use rdma_sys::{
    ibv_access_flags, ibv_create_qp, ibv_destroy_qp, ibv_modify_qp, ibv_mr, ibv_mw, ibv_post_recv,
    ibv_post_send, ibv_qp, ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_cap, ibv_qp_init_attr,
    ibv_qp_state, ibv_qp_type, ibv_recv_wr, ibv_send_flags, ibv_send_wr, ibv_sge, ibv_wr_opcode,
};

use crate::fabric::mr::key_index;
use crate::fabric::QueuePair;
use crate::fabric::{
    ConnId, FabricError, PostError, PostErrorKind, QpCaps, QpConfig, QpInit, QpState, RecvWr,
    SendFlags, SendOp, SendWr, WcOpcode,
};

use super::cq::{flushed, CqShared};
use super::pd::{mw_access, PdShared};
use super::ring::{Entry, WrRing, RECV_TAG, WAKE_WR_ID};
use super::sendwr::{fill, VerbsOp};
use super::srq::SrqShared;
use super::VerbsProvider;

/// Inline data the provider asks for; small RPC-over-RDMA headers fit.
const WANT_INLINE: u32 = 64;

/// Sequence numbers of different queue pairs never overlap, so a stale completion of a
/// destroyed queue pair whose number was reused matches nothing.
static SEQ_BASE: AtomicU64 = AtomicU64::new(0);
const SEQ_SPAN: u64 = 1 << 40;

fn state_code(s: QpState) -> u8 {
    match s {
        QpState::Init => 0,
        QpState::ReadyToReceive => 1,
        QpState::ReadyToSend => 2,
        QpState::Error => 3,
        QpState::Disconnected => 4,
    }
}

fn code_state(c: u8) -> QpState {
    match c {
        0 => QpState::Init,
        1 => QpState::ReadyToReceive,
        2 => QpState::ReadyToSend,
        3 => QpState::Error,
        _ => QpState::Disconnected,
    }
}

/// What a queue pair shares with its completion queues and its connection manager.
pub(crate) struct QpShared {
    pub(crate) qp: *mut ibv_qp,
    pub(crate) qp_num: u32,
    pub(crate) conn: ConnId,
    pub(crate) sq: WrRing,
    pub(crate) rq: WrRing,
    state: AtomicU8,
    pub(crate) config: QpConfig,
    pub(crate) max_inline: u32,
    /// 1 when the send queue has a slot for the wake-up Write (active iWARP), else 0.
    pub(crate) wake_slot: u32,
    /// Raised when this queue pair fails or is dropped, for the connection manager to
    /// disconnect it (so the peer learns, as with a NIC's fatal error).
    pub(crate) alarm: Arc<AtomicBool>,
    /// The owner dropped the queue pair.
    pub(crate) orphaned: AtomicBool,
    /// When this side first found the queue pair in error (a failed completion or the
    /// connection manager's disconnect): the start of the grace after which its
    /// completion queues flush what the device never reports (`VerbsCq::sweep_errored`).
    pub(crate) errored_at: OnceLock<Instant>,
    pub(crate) send_cq: Arc<CqShared>,
    pub(crate) recv_cq: Arc<CqShared>,
    pub(crate) pd: Arc<PdShared>,
    /// The shared receive queue the QP takes receives from; held so it is destroyed
    /// after the QP (declared after `qp`'s destruction in `drop`).
    pub(crate) srq: Option<Arc<SrqShared>>,
}

// SAFETY: verbs QPs may be used from any thread; posting is serialised by the VerbsQp
// owner (&mut self), the rest is atomics and calls libibverbs makes thread-safe.
unsafe impl Send for QpShared {}
// SAFETY: as above.
unsafe impl Sync for QpShared {}

impl Drop for QpShared {
    fn drop(&mut self) {
        // SAFETY: the last reference is gone; destroyed once, before its CQs and PD
        // (whose Arcs are fields, dropped after this).
        unsafe { ibv_destroy_qp(self.qp) };
        let r = self.recv_reservation();
        let s = u64::from(self.config.caps.max_send_wr);
        if Arc::ptr_eq(&self.send_cq, &self.recv_cq) {
            self.send_cq.release(s + r);
        } else {
            self.send_cq.release(s);
            self.recv_cq.release(r);
        }
    }
}

impl QpShared {
    /// Receive completions reserved on the receive CQ: none with a shared receive
    /// queue, which reserved its own.
    fn recv_reservation(&self) -> u64 {
        if self.srq.is_some() {
            0
        } else {
            u64::from(self.config.caps.max_recv_wr)
        }
    }

    pub(crate) fn state(&self) -> QpState {
        code_state(self.state.load(Ordering::Acquire))
    }

    /// Whether the peer was ever heard from on this queue pair: a receive completed.
    pub(crate) fn heard_from_peer(&self) -> bool {
        self.rq.released_any()
    }

    /// Whether the owner ever posted a request on the send queue.
    pub(crate) fn sent_any(&self) -> bool {
        self.sq.posted_any()
    }

    /// Posts one zero-length RDMA Write, unsignaled, on the slot kept for it
    /// (`wake_slot`): data arriving on the connection, which makes a kernel siw peer
    /// read its socket, and with it a message of ours stranded there
    /// (`VerbsCm::wake_stranded`). A zero-length Write places nothing and no key is
    /// checked for it (kernel siw returns before any check; the remote key 1 and local
    /// key 0 are what siw's own RTR Write carries), and it asks nothing back, so no
    /// response of the peer's can be wrong (kernel siw answers a zero-length Read with
    /// a stale length now and then, which fails the queue pair: the lab saw `rresp
    /// len: 28 != 0`). Its completion (a flush or an error only) is dropped by the
    /// completion queue (`WAKE_WR_ID`). Posted from the connection manager's thread
    /// beside the owner's posts: the provider serialises posts to one send queue. False
    /// when there is no such slot or the device refused it.
    pub(crate) fn post_wake_write(&self) -> bool {
        // Only beside a send queue with room: a flush then reports no more completions
        // than the queue pair reserved on its completion queue, as the owner's own
        // requests and this one fit its depth.
        if self.wake_slot == 0 || self.state().is_error() || self.sq.room() == 0 {
            return false;
        }
        let mut sge = ibv_sge {
            addr: 0,
            length: 0,
            lkey: 0,
        };
        // SAFETY: all-zero is a valid ibv_send_wr (null next, no flags).
        let mut wr: ibv_send_wr = unsafe { MaybeUninit::zeroed().assume_init() };
        wr.wr_id = WAKE_WR_ID;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
        wr.wr.rdma = rdma_sys::rdma_t {
            remote_addr: 0,
            rkey: 1,
        };
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the QP is live; `wr` and `sge` live across the call, which copies them.
        unsafe { ibv_post_send(self.qp, &mut wr, &mut bad) == 0 }
    }

    /// Moves to `s` unless already in an error state (errors are final).
    pub(crate) fn advance(&self, s: QpState) {
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                (!code_state(c).is_error()).then_some(state_code(s))
            });
    }

    /// Records a failure reported by a completion; raises the alarm the first time.
    pub(crate) fn fail(&self) {
        let changed = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                (!code_state(c).is_error()).then_some(state_code(QpState::Error))
            })
            .is_ok();
        if changed {
            self.alarm.store(true, Ordering::Release);
        }
        self.mark_errored();
    }

    /// Starts the flush grace (once) and has both completion queues sweep for it.
    fn mark_errored(&self) {
        if self.errored_at.set(Instant::now()).is_ok() {
            self.send_cq.sweep_due.store(true, Ordering::Release);
            self.recv_cq.sweep_due.store(true, Ordering::Release);
        }
    }

    /// The connection ended: final state, and the device flushes everything.
    pub(crate) fn disconnected(&self) {
        self.state
            .store(state_code(QpState::Disconnected), Ordering::Release);
        self.to_error();
        self.mark_errored();
    }

    /// Moves the verbs QP to ERR, which flushes every outstanding request.
    pub(crate) fn to_error(&self) {
        // SAFETY: all-zero is a valid ibv_qp_attr.
        let mut attr: ibv_qp_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        attr.qp_state = ibv_qp_state::IBV_QPS_ERR;
        // SAFETY: the QP is live while self is; attr is valid for the mask.
        unsafe { ibv_modify_qp(self.qp, &mut attr, ibv_qp_attr_mask::IBV_QP_STATE.0 as i32) };
    }

    /// Applies `attr` with `mask` to the verbs QP.
    pub(crate) fn modify(
        &self,
        attr: &mut ibv_qp_attr,
        mask: i32,
        op: &'static str,
    ) -> Result<(), FabricError> {
        // SAFETY: the QP is live while self is; the caller built attr for the mask.
        if unsafe { ibv_modify_qp(self.qp, attr, mask) } != 0 {
            return Err(FabricError::last_os(op));
        }
        Ok(())
    }
}

fn check_cap(what: &'static str, requested: u32, max: i32) -> Result<(), FabricError> {
    let max = max.max(0) as u32;
    if requested == 0 || requested > max {
        return Err(FabricError::InvalidCaps {
            what,
            requested,
            max,
        });
    }
    Ok(())
}

/// A reliable-connected queue pair.
pub struct VerbsQp {
    pub(crate) shared: Arc<QpShared>,
    send_wrs: Box<[ibv_send_wr]>,
    send_sges: Box<[ibv_sge]>,
    /// Fabric request each verbs send request came from.
    owner: Box<[u32]>,
    recv_wrs: Box<[ibv_recv_wr]>,
    recv_sges: Box<[ibv_sge]>,
    /// The RDMA CM's peer: where we connected, or the accepted request's source.
    pub(crate) peer_addr: crate::fabric::PeerAddr,
}

// SAFETY: the arrays hold raw pointers into themselves only while a post is under way
// on the owning thread; the shared part is Send.
unsafe impl Send for VerbsQp {}

impl std::fmt::Debug for VerbsQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsQp")
            .field("qp_num", &self.shared.qp_num)
            .field("conn", &self.shared.conn)
            .field("state", &self.shared.state())
            .finish()
    }
}

impl Drop for VerbsQp {
    fn drop(&mut self) {
        self.shared.orphaned.store(true, Ordering::Release);
        self.shared.to_error();
        self.shared.send_cq.unregister(&self.shared);
        if !Arc::ptr_eq(&self.shared.send_cq, &self.shared.recv_cq) {
            self.shared.recv_cq.unregister(&self.shared);
        }
        self.shared.alarm.store(true, Ordering::Release);
    }
}

fn zeroed_array<T>(n: usize) -> Box<[T]> {
    // SAFETY: only instantiated with verbs request and SGE structs, for which all-zero
    // bytes (null pointers, zero counts) are valid values.
    (0..n)
        .map(|_| unsafe { MaybeUninit::<T>::zeroed().assume_init() })
        .collect()
}

impl VerbsQp {
    /// Creates the verbs QP for connection `conn` and moves it to INIT.
    pub(crate) fn create(
        init: QpInit<'_, VerbsProvider>,
        conn: ConnId,
        alarm: Arc<AtomicBool>,
        wake: bool,
    ) -> Result<VerbsQp, FabricError> {
        let pd = &init.pd.shared;
        let dev = &pd.dev;
        let send_cq = &init.send_cq.shared;
        let recv_cq = &init.recv_cq.shared;
        if !Arc::ptr_eq(&send_cq.dev, dev) || !Arc::ptr_eq(&recv_cq.dev, dev) {
            return Err(FabricError::WrongDevice);
        }
        let caps: QpCaps = init.config.caps;
        let a = &dev.attr;
        check_cap("max_send_wr", caps.max_send_wr, a.max_qp_wr)?;
        check_cap("max_recv_wr", caps.max_recv_wr, a.max_qp_wr)?;
        check_cap("max_send_sge", caps.max_send_sge, a.max_sge)?;
        check_cap("max_recv_sge", caps.max_recv_sge, a.max_sge)?;
        let expansion = caps.max_send_sge.div_ceil(dev.max_sge_rd());
        // With `wake` (an active connection on iWARP): one more slot for the wake-up
        // Write (`QpShared::post_wake_write`), beside the requests the owner may post.
        // No completion room is reserved for it: it is unsignaled, so only a flush or an
        // error reports it, it is posted only while the owner's queue has room, and a
        // Write completes once transmitted, so it holds its slot for a moment.
        let wake_slot = u32::from(wake);
        let device_send_wr = caps
            .max_send_wr
            .saturating_mul(expansion)
            .saturating_add(wake_slot);
        check_cap(
            "max_send_wr (RDMA Reads split for the device)",
            device_send_wr,
            a.max_qp_wr,
        )?;

        let srq = match init.srq {
            Some(q) if !Arc::ptr_eq(&q.shared.cq.dev, dev) => return Err(FabricError::WrongDevice),
            Some(q) if !Arc::ptr_eq(&q.shared.cq, recv_cq) => {
                return Err(FabricError::SrqMismatch(
                    "the receive completion queue is not the one the shared receive queue was created for",
                ))
            }
            Some(q) => Some(q.shared.clone()),
            None => None,
        };
        // The shared queue reserved its receives' completions on that queue already.
        let r = if srq.is_some() {
            0
        } else {
            u64::from(caps.max_recv_wr)
        };
        let s = u64::from(caps.max_send_wr);
        if Arc::ptr_eq(send_cq, recv_cq) {
            send_cq.commit(s + r)?;
        } else {
            send_cq.commit(s)?;
            if let Err(e) = recv_cq.commit(r) {
                send_cq.release(s);
                return Err(e);
            }
        }
        let release = || {
            if Arc::ptr_eq(send_cq, recv_cq) {
                send_cq.release(s + r);
            } else {
                send_cq.release(s);
                recv_cq.release(r);
            }
        };

        let mut qp = std::ptr::null_mut();
        let mut got = ibv_qp_cap {
            max_send_wr: 0,
            max_recv_wr: 0,
            max_send_sge: 0,
            max_recv_sge: 0,
            max_inline_data: 0,
        };
        // Some devices refuse inline data altogether; ask for none then.
        for inline in [WANT_INLINE, 0] {
            let mut attr = ibv_qp_init_attr {
                qp_context: std::ptr::null_mut(),
                send_cq: send_cq.cq,
                recv_cq: recv_cq.cq,
                srq: srq.as_ref().map_or(std::ptr::null_mut(), |q| q.srq),
                cap: ibv_qp_cap {
                    max_send_wr: device_send_wr,
                    max_recv_wr: caps.max_recv_wr,
                    max_send_sge: caps.max_send_sge,
                    max_recv_sge: caps.max_recv_sge,
                    max_inline_data: inline,
                },
                qp_type: ibv_qp_type::IBV_QPT_RC,
                sq_sig_all: 0,
            };
            // SAFETY: pd and both CQs are live and belong to the same context (checked
            // above); attr is fully initialised.
            qp = unsafe { ibv_create_qp(pd.pd, &mut attr) };
            if !qp.is_null() {
                got = attr.cap;
                break;
            }
        }
        if qp.is_null() {
            let e = FabricError::last_os("ibv_create_qp");
            release();
            return Err(e);
        }
        let base = SEQ_BASE.fetch_add(SEQ_SPAN, Ordering::Relaxed);
        let shared = Arc::new(QpShared {
            qp,
            // SAFETY: ibv_create_qp returned a live QP.
            qp_num: unsafe { (*qp).qp_num },
            conn,
            sq: WrRing::new(caps.max_send_wr, base),
            rq: WrRing::new(caps.max_recv_wr, base),
            state: AtomicU8::new(state_code(QpState::Init)),
            config: init.config,
            max_inline: got.max_inline_data,
            wake_slot,
            alarm,
            orphaned: AtomicBool::new(false),
            errored_at: OnceLock::new(),
            send_cq: send_cq.clone(),
            recv_cq: recv_cq.clone(),
            pd: pd.clone(),
            srq,
        });
        // From here on dropping `shared` destroys the QP and releases the CQ room.

        // SAFETY: all-zero is a valid ibv_qp_attr.
        let mut attr: ibv_qp_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        attr.qp_state = ibv_qp_state::IBV_QPS_INIT;
        attr.pkey_index = 0;
        attr.port_num = 1;
        attr.qp_access_flags = ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0
            | ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
            | ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
        let mask = ibv_qp_attr_mask::IBV_QP_STATE.0
            | ibv_qp_attr_mask::IBV_QP_PKEY_INDEX.0
            | ibv_qp_attr_mask::IBV_QP_PORT.0
            | ibv_qp_attr_mask::IBV_QP_ACCESS_FLAGS.0;
        shared.modify(&mut attr, mask as i32, "ibv_modify_qp(INIT)")?;

        send_cq.register(&shared);
        if !Arc::ptr_eq(send_cq, recv_cq) {
            recv_cq.register(&shared);
        }
        let send_slots = (caps.max_send_wr * expansion) as usize;
        Ok(VerbsQp {
            shared,
            send_wrs: zeroed_array(send_slots),
            send_sges: zeroed_array((caps.max_send_wr * caps.max_send_sge) as usize),
            owner: vec![0; send_slots].into_boxed_slice(),
            recv_wrs: zeroed_array(caps.max_recv_wr as usize),
            recv_sges: zeroed_array((caps.max_recv_wr * caps.max_recv_sge) as usize),
            peer_addr: crate::fabric::PeerAddr::Unknown,
        })
    }

    /// Inline data this queue pair accepts per request (0: none).
    pub fn max_inline_data(&self) -> u32 {
        self.shared.max_inline
    }

    /// Sends posted to a queue pair in error never reach the device: they complete as
    /// flushed through the send CQ, in posting order.
    fn flush_sends(&self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        for (i, wr) in wrs.iter().enumerate() {
            let c = flushed(wr.wr_id, send_opcode(&wr.op), self.shared.qp_num);
            if self.shared.send_cq.synthetic.push(c).is_err() {
                return Err(PostError {
                    posted: i,
                    kind: PostErrorKind::QueueFull {
                        depth: self.shared.sq.depth(),
                    },
                });
            }
        }
        Ok(())
    }

    fn flush_recvs(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        for (i, wr) in wrs.iter().enumerate() {
            let c = flushed(wr.wr_id, WcOpcode::Recv, self.shared.qp_num);
            if self.shared.recv_cq.synthetic.push(c).is_err() {
                return Err(PostError {
                    posted: i,
                    kind: PostErrorKind::QueueFull {
                        depth: self.shared.rq.depth(),
                    },
                });
            }
        }
        Ok(())
    }
}

/// True when every entry lies inside a registration of `pd` (checked before sending
/// inline, where the device no longer looks at the keys).
fn sges_registered(pd: &PdShared, sgl: &[crate::fabric::Sge]) -> bool {
    let t = &pd.mrs;
    let g = t.read();
    sgl.iter().all(|s| match t.get(&g, s.lkey) {
        Some((mr, _)) => {
            let mr = mr.cast::<ibv_mr>();
            // SAFETY: the guard keeps the MR from being deregistered.
            let (start, len) = unsafe { ((*mr).addr as u64, (*mr).length as u64) };
            s.addr >= start && s.addr + u64::from(s.length) <= start + len
        }
        None => false,
    })
}

fn send_opcode(op: &SendOp) -> WcOpcode {
    match op {
        SendOp::Send | SendOp::SendWithInvalidate { .. } => WcOpcode::Send,
        SendOp::RdmaWrite { .. } => WcOpcode::RdmaWrite,
        SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
        SendOp::FastReg { .. } => WcOpcode::FastReg,
        SendOp::LocalInvalidate { .. } => WcOpcode::LocalInvalidate,
    }
}

/// Providers return a positive errno (rxe) or its negation (siw).
fn post_errno_kind(rc: i32, depth: u32) -> PostErrorKind {
    if rc.abs() == libc::ENOMEM {
        PostErrorKind::QueueFull { depth }
    } else {
        PostErrorKind::Malformed("the device refused the work request")
    }
}

impl QueuePair for VerbsQp {
    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        let state = self.shared.state();
        if state.is_error() {
            return self.flush_sends(wrs);
        }
        if state != QpState::ReadyToSend {
            return Err(PostError {
                posted: 0,
                kind: PostErrorKind::InvalidState(state),
            });
        }
        let sh: &QpShared = &self.shared;
        let ring = &sh.sq;
        let depth = ring.depth();
        let head = ring.head();
        let room = ring.room();
        let caps = sh.config.caps;
        let max_msg = u64::from(sh.pd.dev.info.max_msg_size);
        let max_sge_rd = sh.pd.dev.max_sge_rd() as usize;
        // Held from lookup to post, so no registration named here is freed meanwhile;
        // taken only by chains that look keys up (fast registration).
        let mut guards = None;

        let mut nv = 0usize; // verbs requests built
        let mut ns = 0usize; // SGEs used
        let mut built = 0usize; // fabric requests built
        let mut refused = None;
        for (i, wr) in wrs.iter().enumerate() {
            if i as u64 >= room {
                refused = Some(PostErrorKind::QueueFull { depth });
                break;
            }
            if wr.sgl.len() > caps.max_send_sge as usize {
                refused = Some(PostErrorKind::TooManySge {
                    given: wr.sgl.len(),
                    max: caps.max_send_sge,
                });
                break;
            }
            let total: u64 = wr.sgl.iter().map(|s| u64::from(s.length)).sum();
            if total > max_msg {
                refused = Some(PostErrorKind::TooLong {
                    len: total,
                    max: sh.pd.dev.info.max_msg_size,
                });
                break;
            }
            let mut flags = 0u32;
            if wr.flags.contains(SendFlags::SIGNALED) {
                flags |= ibv_send_flags::IBV_SEND_SIGNALED.0;
            }
            if wr.flags.contains(SendFlags::FENCE) {
                flags |= ibv_send_flags::IBV_SEND_FENCE.0;
            }
            let seq = head + i as u64;
            let sge_at = ns;
            for s in wr.sgl {
                self.send_sges[ns] = ibv_sge {
                    addr: s.addr,
                    length: s.length,
                    lkey: s.lkey,
                };
                ns += 1;
            }
            let first = nv;
            let vop = match wr.op {
                SendOp::Send => VerbsOp::Send,
                SendOp::SendWithInvalidate { rkey } => VerbsOp::SendWithInvalidate(rkey),
                SendOp::RdmaWrite { remote } => VerbsOp::Write {
                    addr: remote.addr,
                    rkey: remote.rkey,
                },
                SendOp::RdmaRead { remote } => VerbsOp::Read {
                    addr: remote.addr,
                    rkey: remote.rkey,
                },
                SendOp::FastReg {
                    key,
                    region,
                    access,
                } => {
                    if !wr.sgl.is_empty() {
                        refused = Some(PostErrorKind::Malformed("FastReg takes no scatter list"));
                        break;
                    }
                    let (mw_guard, mr_guard) =
                        guards.get_or_insert_with(|| (sh.pd.mws.read(), sh.pd.mrs.read()));
                    let Some((mw, max_len)) = sh.pd.mws.get(mw_guard, key_index(key)) else {
                        refused = Some(PostErrorKind::Malformed(
                            "FastReg key names no fast-registration slot of this PD",
                        ));
                        break;
                    };
                    if u64::from(region.length) > max_len {
                        refused = Some(PostErrorKind::Malformed(
                            "FastReg region is longer than the slot",
                        ));
                        break;
                    }
                    let Some((mr, _)) = sh.pd.mrs.get(mr_guard, region.lkey) else {
                        refused = Some(PostErrorKind::Malformed(
                            "FastReg region names no registration of this PD",
                        ));
                        break;
                    };
                    VerbsOp::Bind {
                        mw: mw.cast::<ibv_mw>(),
                        mr: mr.cast::<ibv_mr>(),
                        rkey: key,
                        addr: region.addr,
                        length: u64::from(region.length),
                        access: mw_access(access),
                    }
                }
                SendOp::LocalInvalidate { key } => {
                    if !wr.sgl.is_empty() {
                        refused = Some(PostErrorKind::Malformed(
                            "LocalInvalidate takes no scatter list",
                        ));
                        break;
                    }
                    VerbsOp::LocalInvalidate(key)
                }
            };
            // The slot still holds the previous post's request: fill rewrites all of it.
            let sgl = self.send_sges[sge_at..].as_mut_ptr();
            fill(&mut self.send_wrs[nv], seq, sgl, wr.sgl.len(), flags, vop);
            let inline_ok = match wr.op {
                SendOp::Send | SendOp::RdmaWrite { .. } => true,
                // siw (through Linux 6.1) refuses inline Sends With Invalidate.
                SendOp::SendWithInvalidate { .. } => !sh.pd.dev.is_iwarp(),
                _ => false,
            } && total > 0
                && total <= u64::from(sh.max_inline);
            if inline_ok && sges_registered(&sh.pd, wr.sgl) {
                self.send_wrs[nv].send_flags |= ibv_send_flags::IBV_SEND_INLINE.0;
            }
            self.owner[nv] = i as u32;
            nv += 1;
            // A Read sink with more entries than the device takes (iWARP allows one)
            // becomes several Reads of consecutive remote ranges; only the last reports
            // success, all carry the same sequence number. Empty entries are dropped:
            // a zero-length iWARP Read still gets a response, which siw mismatches.
            if let SendOp::RdmaRead { remote } = wr.op {
                if wr.sgl.len() > max_sge_rd {
                    let mut kept = sge_at;
                    for k in sge_at..ns {
                        if self.send_sges[k].length > 0 {
                            self.send_sges[kept] = self.send_sges[k];
                            kept += 1;
                        }
                    }
                    // All empty: one empty Read, as the caller asked.
                    let used = (kept - sge_at).max(1);
                    let pieces = used.div_ceil(max_sge_rd);
                    let mut offset = 0u64;
                    for p in 0..pieces {
                        let lo = sge_at + p * max_sge_rd;
                        let hi = (lo + max_sge_rd).min(sge_at + used);
                        let piece_len: u64 = self.send_sges[lo..hi]
                            .iter()
                            .map(|s| u64::from(s.length))
                            .sum();
                        let idx = first + p;
                        if p > 0 {
                            self.owner[idx] = i as u32;
                            nv += 1;
                        }
                        let last = p + 1 == pieces;
                        let mut piece_flags = if last { flags } else { 0 };
                        if p == 0 && wr.flags.contains(SendFlags::FENCE) {
                            piece_flags |= ibv_send_flags::IBV_SEND_FENCE.0;
                        }
                        let sgl = self.send_sges[lo..].as_mut_ptr();
                        fill(
                            &mut self.send_wrs[idx],
                            seq,
                            sgl,
                            hi - lo,
                            piece_flags,
                            VerbsOp::Read {
                                addr: remote.addr + offset,
                                rkey: remote.rkey,
                            },
                        );
                        offset += piece_len;
                    }
                }
            }
            ring.write(
                seq,
                Entry {
                    wr_id: wr.wr_id,
                    opcode: send_opcode(&wr.op),
                    len: total.min(u64::from(u32::MAX)) as u32,
                    signaled: wr.flags.contains(SendFlags::SIGNALED),
                },
            );
            built += 1;
        }
        if built == 0 {
            return Err(PostError {
                posted: 0,
                kind: refused.unwrap_or(PostErrorKind::Malformed("empty chain")),
            });
        }
        let base = self.send_wrs.as_mut_ptr();
        for k in 0..nv {
            let next = if k + 1 < nv {
                // SAFETY: k + 1 < nv <= the array's length.
                unsafe { base.add(k + 1) }
            } else {
                std::ptr::null_mut()
            };
            self.send_wrs[k].next = next;
        }
        ring.publish(head + built as u64);
        let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
        // SAFETY: the QP is live; the chain links nv initialised requests whose SGE
        // pointers point into send_sges, and binds name windows and MRs the guards keep
        // alive until after the call.
        let rc = unsafe { ibv_post_send(sh.qp, base, &mut bad) };
        let posted_verbs = if rc == 0 {
            nv
        } else if bad.is_null() {
            0
        } else {
            // SAFETY: bad points into the chain, i.e. into send_wrs.
            unsafe { bad.offset_from(base) }.clamp(0, nv as isize) as usize
        };
        for v in &self.send_wrs[..posted_verbs] {
            if v.opcode == ibv_wr_opcode::IBV_WR_BIND_MW {
                // SAFETY: type-2 windows track their key in the consumer's ibv_mw: the
                // next bind must present the key this one installs. The window is alive
                // (guard), and one queue pair posts binds for it at a time (documented).
                unsafe {
                    let b = v.bind_mw_tso_union.bind_mw;
                    (*b.mw).rkey = b.rkey;
                }
            }
        }
        drop(guards);
        if rc != 0 {
            let posted = if posted_verbs < nv {
                self.owner[posted_verbs] as usize
            } else {
                built
            };
            ring.publish(head + posted as u64);
            return Err(PostError {
                posted,
                kind: post_errno_kind(rc, depth),
            });
        }
        match refused {
            Some(kind) => Err(PostError {
                posted: built,
                kind,
            }),
            None => Ok(()),
        }
    }

    fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        if self.shared.srq.is_some() && !wrs.is_empty() {
            return Err(PostError {
                posted: 0,
                kind: PostErrorKind::Malformed(
                    "the queue pair takes its receives from a shared receive queue",
                ),
            });
        }
        if self.shared.state().is_error() {
            return self.flush_recvs(wrs);
        }
        let sh: &QpShared = &self.shared;
        let ring = &sh.rq;
        let depth = ring.depth();
        let head = ring.head();
        let room = ring.room();
        let max_sge = sh.config.caps.max_recv_sge;
        let mut ns = 0usize;
        let mut built = 0usize;
        let mut refused = None;
        for (i, wr) in wrs.iter().enumerate() {
            if i as u64 >= room {
                refused = Some(PostErrorKind::QueueFull { depth });
                break;
            }
            if wr.sgl.len() > max_sge as usize {
                refused = Some(PostErrorKind::TooManySge {
                    given: wr.sgl.len(),
                    max: max_sge,
                });
                break;
            }
            let at = ns;
            let mut total = 0u64;
            for s in wr.sgl {
                self.recv_sges[ns] = ibv_sge {
                    addr: s.addr,
                    length: s.length,
                    lkey: s.lkey,
                };
                total += u64::from(s.length);
                ns += 1;
            }
            let seq = head + i as u64;
            let v = &mut self.recv_wrs[i];
            v.wr_id = seq | RECV_TAG;
            v.sg_list = self.recv_sges[at..].as_mut_ptr();
            v.num_sge = wr.sgl.len() as i32;
            ring.write(
                seq,
                Entry {
                    wr_id: wr.wr_id,
                    opcode: WcOpcode::Recv,
                    len: total.min(u64::from(u32::MAX)) as u32,
                    signaled: true,
                },
            );
            built += 1;
        }
        if built == 0 {
            return Err(PostError {
                posted: 0,
                kind: refused.unwrap_or(PostErrorKind::Malformed("empty chain")),
            });
        }
        let base = self.recv_wrs.as_mut_ptr();
        for k in 0..built {
            let next = if k + 1 < built {
                // SAFETY: k + 1 < built <= the array's length.
                unsafe { base.add(k + 1) }
            } else {
                std::ptr::null_mut()
            };
            self.recv_wrs[k].next = next;
        }
        ring.publish(head + built as u64);
        let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: the QP is live; the chain links `built` initialised receives whose SGE
        // pointers point into recv_sges.
        let rc = unsafe { ibv_post_recv(sh.qp, base, &mut bad) };
        if rc != 0 {
            let posted = if bad.is_null() {
                0
            } else {
                // SAFETY: bad points into the chain, i.e. into recv_wrs.
                unsafe { bad.offset_from(base) }.clamp(0, built as isize) as usize
            };
            ring.publish(head + posted as u64);
            return Err(PostError {
                posted,
                kind: post_errno_kind(rc, depth),
            });
        }
        match refused {
            Some(kind) => Err(PostError {
                posted: built,
                kind,
            }),
            None => Ok(()),
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

    fn caps(&self) -> QpCaps {
        self.shared.config.caps
    }

    fn peer_addr(&self) -> crate::fabric::PeerAddr {
        self.peer_addr
    }
}
