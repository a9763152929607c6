//! The connection manager: RDMA-CM on a non-blocking event channel.
//!
//! Queue pairs are not created by `rdma_create_qp`: the provider creates them itself
//! (see `qp`), so it can post receives before address resolution and choose each
//! queue pair's own RNR retry count and RNR timer, which RDMA-CM would otherwise take
//! from the peer's connection message. On InfiniBand/RoCE the provider therefore drives
//! RTR and RTS itself from `rdma_init_qp_attr` (active side on
//! `RDMA_CM_EVENT_CONNECT_RESPONSE`, then `rdma_establish`; passive side before
//! `rdma_accept`); on iWARP the kernel's iWARP CM moves the queue pair to RTS.
//!
//! A queue pair that fails (a completion in error) or is dropped gets disconnected on
//! the next `poll_event`, so the peer learns of it as it would from a NIC.

use std::collections::HashMap;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdma_sys::{
    ibv_qp_attr, ibv_qp_attr_mask, ibv_qp_state, rdma_accept, rdma_ack_cm_event, rdma_bind_addr,
    rdma_cm_event, rdma_cm_event_type, rdma_cm_id, rdma_conn_param, rdma_connect,
    rdma_create_event_channel, rdma_create_id, rdma_destroy_event_channel, rdma_destroy_id,
    rdma_disconnect, rdma_establish, rdma_event_channel, rdma_get_cm_event, rdma_get_peer_addr,
    rdma_init_qp_attr, rdma_listen, rdma_port_space, rdma_reject, rdma_resolve_addr,
    rdma_resolve_route,
};

use crate::fabric::ConnectionManager;
use crate::fabric::{
    CmEvent, CmPrivateData, ConnId, FabricError, QpInit, QpState, MAX_PRIVATE_DATA,
};

use super::addr::{from_sockaddr, VerbsAddr};
use super::device::{DeviceShared, PrivateDataKind};
use super::qp::{QpShared, VerbsQp};
use super::rnr::min_rnr_timer_code;
use super::VerbsProvider;

/// Address and route resolution timeout.
const RESOLVE_TIMEOUT_MS: i32 = 2000;
/// IBTA CM reject reason "consumer defined": the peer application rejected.
const IB_REJ_CONSUMER: i32 = 28;
/// Transport retries before a silent peer fails requests (IB: each waits the CM's
/// packet-lifetime-derived timeout).
const RETRY_COUNT: u8 = 7;
/// Cap on outstanding RDMA Reads per queue pair in each direction.
const MAX_RD_ATOMIC: i32 = 16;

static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

/// The event channel, freed after every id on it.
pub(crate) struct Channel {
    ch: *mut rdma_event_channel,
}

// SAFETY: librdmacm event channels and their ids may be used from any thread.
unsafe impl Send for Channel {}
// SAFETY: as above.
unsafe impl Sync for Channel {}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: every id of the channel holds an Arc to this and is destroyed first.
        unsafe { rdma_destroy_event_channel(self.ch) }
    }
}

/// A connect request waiting for `accept` or `reject`; dropping it rejects it.
pub struct VerbsConnRequest {
    id: *mut rdma_cm_id,
    _channel: Arc<Channel>,
}

// SAFETY: RDMA-CM ids may be used from any thread; the request owns its id.
unsafe impl Send for VerbsConnRequest {}

impl std::fmt::Debug for VerbsConnRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsConnRequest").finish_non_exhaustive()
    }
}

impl VerbsConnRequest {
    fn take(&mut self) -> *mut rdma_cm_id {
        std::mem::replace(&mut self.id, std::ptr::null_mut())
    }
}

impl Drop for VerbsConnRequest {
    fn drop(&mut self) {
        let id = self.take();
        if !id.is_null() {
            // SAFETY: the id is live and owned here; rejected and destroyed once.
            unsafe {
                rdma_reject(id, std::ptr::null(), 0);
                rdma_destroy_id(id);
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Active: resolving address, then route.
    Resolving,
    /// Active: connect request sent.
    Connecting,
    /// Passive: accepted, waiting for the connection to be established.
    Accepting,
    Established,
}

struct Conn {
    id: *mut rdma_cm_id,
    qp: Arc<QpShared>,
    phase: Phase,
    /// Active side: what the connect request carries.
    private_data: CmPrivateData,
    /// `disconnect` was called or the provider disconnected a failed queue pair.
    closing: bool,
    /// Active side on iWARP: wake-up Writes still to send while the peer is unheard
    /// ([`VerbsCm::wake_stranded`]).
    wake: Option<Wake>,
}

/// Kernel siw (Linux 6.1, `siw_accept`) sends a passive connection's MPA Reply before it
/// moves the socket from its connection manager to the queue pair
/// (`siw_qp_socket_assoc`), and the manager's data-ready callback ignores data in that
/// state: an FPDU the active side sends as soon as it has the Reply (a requester's first
/// call) can land in between and then stays unread in the socket until more data
/// arrives, which for a call waiting for its reply is never. The lab saw it on siw0 in
/// about one connection of a hundred: the server's receives posted, nothing completed,
/// and `ss` showing the call's 92 octets unread in the server's TCP stream. So an
/// active connection on iWARP that has sent something and not yet heard from its peer
/// posts a zero-length RDMA Write [`WAKE_FIRST`] after it was established, then 5 times
/// later each time, [`WAKE_READS`] in all: data on the peer's socket, whose callback
/// (the queue pair's by then) reads everything queued, the stranded FPDU first. A peer
/// that answered is never sent one. The userspace siw provider does the same with
/// zero-length Reads (`fabric/siw/engine.rs`, `Wake`), whose responses it checks
/// itself; kernel siw fails the queue pair on the stale length its peer answers a
/// zero-length Read with now and then, so a Write, which asks for nothing, it is here.
#[derive(Debug, Clone, Copy)]
struct Wake {
    /// When to post the next one.
    next: Instant,
    /// Wake-up Writes posted so far.
    sent: u32,
}

/// Delay before the first wake-up Write.
const WAKE_FIRST: Duration = Duration::from_millis(10);
/// Wake-up Writes at most per connection (10 ms, 50 ms, 250 ms, 1.25 s, 6.25 s).
const WAKE_READS: u32 = 5;

/// What a [`Wake`] schedule says at one look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WakeStep {
    /// Nothing due yet.
    Wait,
    /// Post a wake-up Write now; `last` when it is the schedule's last.
    Post { last: bool },
    /// The schedule is over (the peer was heard from, or the connection is going).
    End,
}

impl Wake {
    /// A schedule starting at `now` (the connection was just established).
    fn new(now: Instant) -> Wake {
        Wake {
            next: now + WAKE_FIRST,
            sent: 0,
        }
    }

    /// The step at `now`; `over` when the peer was heard from or the connection fails,
    /// `sent` when this side has sent anything (nothing of ours can be stranded before:
    /// the schedule waits, a first delay at a time, without counting).
    fn step(&mut self, now: Instant, over: bool, sent: bool) -> WakeStep {
        if over {
            return WakeStep::End;
        }
        if now < self.next {
            return WakeStep::Wait;
        }
        if !sent {
            self.next = now + WAKE_FIRST;
            return WakeStep::Wait;
        }
        self.sent += 1;
        // From now, not from the due time: a late look does not bunch the next ones.
        self.next = now + WAKE_FIRST * 5u32.pow(self.sent);
        WakeStep::Post {
            last: self.sent >= WAKE_READS,
        }
    }
}

/// An RDMA-CM event channel with its listeners and connections.
pub struct VerbsCm {
    dev: Arc<DeviceShared>,
    channel: Arc<Channel>,
    listeners: Vec<*mut rdma_cm_id>,
    conns: HashMap<u64, Conn>,
    alarm: Arc<AtomicBool>,
    /// Connections with a wake-up schedule (`Conn::wake`): polls skip the look while 0.
    waking: usize,
}

// SAFETY: ids and the channel may be used from any thread; VerbsCm owns them.
unsafe impl Send for VerbsCm {}

impl std::fmt::Debug for VerbsCm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsCm")
            .field("listeners", &self.listeners.len())
            .field("conns", &self.conns.len())
            .finish()
    }
}

impl Drop for VerbsCm {
    fn drop(&mut self) {
        for (_, c) in self.conns.drain() {
            c.qp.disconnected();
            // SAFETY: each id is live and destroyed once; its events were all acked.
            unsafe { rdma_destroy_id(c.id) };
        }
        for id in self.listeners.drain(..) {
            // SAFETY: as above.
            unsafe { rdma_destroy_id(id) };
        }
    }
}

fn conn_of(id: *mut rdma_cm_id) -> u64 {
    // SAFETY: ids handed to us by RDMA-CM are live while their event is processed.
    unsafe { (*id).context as u64 }
}

fn private_data_from(ev: &rdma_cm_event) -> CmPrivateData {
    // SAFETY: every event this provider reads is a connection event, whose parameter is
    // the `conn` member; the data pointer is valid until the event is acked.
    let (ptr, len) = unsafe { (ev.param.conn.private_data, ev.param.conn.private_data_len) };
    if ptr.is_null() || len == 0 {
        return CmPrivateData::EMPTY;
    }
    let len = usize::from(len).min(MAX_PRIVATE_DATA);
    // SAFETY: RDMA-CM guarantees `private_data_len` readable bytes.
    let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
    CmPrivateData::new(bytes).unwrap_or(CmPrivateData::EMPTY)
}

fn check_private(
    dev: &DeviceShared,
    data: &[u8],
    kind: PrivateDataKind,
) -> Result<(), FabricError> {
    let max = dev.private_data_limit(kind);
    if data.len() > max {
        return Err(FabricError::PrivateDataTooLong {
            len: data.len(),
            max,
        });
    }
    Ok(())
}

fn rd_atomic(v: i32) -> u8 {
    v.clamp(0, MAX_RD_ATOMIC) as u8
}

impl VerbsCm {
    pub(crate) fn new(dev: &Arc<DeviceShared>) -> Result<VerbsCm, FabricError> {
        // SAFETY: plain constructor call.
        let ch = unsafe { rdma_create_event_channel() };
        if ch.is_null() {
            return Err(FabricError::last_os("rdma_create_event_channel"));
        }
        let channel = Arc::new(Channel { ch });
        // SAFETY: ch is live; fcntl on its descriptor.
        let fd = unsafe { (*ch).fd };
        // SAFETY: fd is the channel's open descriptor.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        // SAFETY: as above.
        if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
            return Err(FabricError::last_os(
                "fcntl(O_NONBLOCK) on the RDMA-CM channel",
            ));
        }
        Ok(VerbsCm {
            dev: dev.clone(),
            channel,
            listeners: Vec::new(),
            conns: HashMap::new(),
            alarm: Arc::new(AtomicBool::new(false)),
            waking: 0,
        })
    }

    fn create_id(&self, context: u64) -> Result<*mut rdma_cm_id, FabricError> {
        let mut id = std::ptr::null_mut();
        // SAFETY: the channel is live; id receives the new id.
        let rc = unsafe {
            rdma_create_id(
                self.channel.ch,
                &mut id,
                context as *mut std::ffi::c_void,
                rdma_port_space::RDMA_PS_TCP,
            )
        };
        if rc != 0 {
            return Err(FabricError::last_os("rdma_create_id"));
        }
        Ok(id)
    }

    fn conn_param(&self, qp: &QpShared, data: &[u8]) -> rdma_conn_param {
        rdma_conn_param {
            private_data: if data.is_empty() {
                std::ptr::null()
            } else {
                data.as_ptr().cast()
            },
            // Checked against the transport limit (at most 196) by the caller.
            private_data_len: data.len() as u8,
            responder_resources: rd_atomic(self.dev.attr.max_qp_rd_atom),
            initiator_depth: rd_atomic(self.dev.attr.max_qp_init_rd_atom),
            flow_control: 1,
            retry_count: RETRY_COUNT,
            rnr_retry_count: qp.config.rnr_retry.min(7),
            srq: 0,
            qp_num: qp.qp_num,
        }
    }

    /// InfiniBand/RoCE: moves `qp` through RTR and RTS with the attributes RDMA-CM
    /// negotiated for `id`, except the RNR settings, which are the queue pair's own.
    fn ready(&self, id: *mut rdma_cm_id, qp: &QpShared) -> Result<(), FabricError> {
        for (state, op) in [
            (ibv_qp_state::IBV_QPS_RTR, "ibv_modify_qp(RTR)"),
            (ibv_qp_state::IBV_QPS_RTS, "ibv_modify_qp(RTS)"),
        ] {
            // SAFETY: all-zero is a valid ibv_qp_attr.
            let mut attr: ibv_qp_attr = unsafe { MaybeUninit::zeroed().assume_init() };
            attr.qp_state = state;
            let mut mask = 0;
            // SAFETY: id is live and bound to the device; attr and mask are writable.
            if unsafe { rdma_init_qp_attr(id, &mut attr, &mut mask) } != 0 {
                return Err(FabricError::last_os("rdma_init_qp_attr"));
            }
            if state == ibv_qp_state::IBV_QPS_RTR {
                attr.min_rnr_timer = min_rnr_timer_code(qp.config.min_rnr_timer);
                mask |= ibv_qp_attr_mask::IBV_QP_MIN_RNR_TIMER.0 as i32;
            } else {
                attr.rnr_retry = qp.config.rnr_retry.min(7);
                attr.retry_cnt = RETRY_COUNT;
                mask |= (ibv_qp_attr_mask::IBV_QP_RNR_RETRY.0
                    | ibv_qp_attr_mask::IBV_QP_RETRY_CNT.0) as i32;
            }
            qp.modify(&mut attr, mask, op)?;
        }
        Ok(())
    }

    /// Ends connection `conn` after a failure: its queue pair flushes, its id goes.
    fn drop_conn(&mut self, conn: u64) -> Option<Conn> {
        let c = self.conns.remove(&conn)?;
        c.qp.fail();
        c.qp.to_error();
        // SAFETY: the id is live, its events acked; destroyed once.
        unsafe { rdma_destroy_id(c.id) };
        Some(c)
    }

    /// Disconnects queue pairs that failed and forgets dropped ones.
    fn sweep(&mut self) {
        if !self.alarm.swap(false, Ordering::AcqRel) {
            return;
        }
        let orphans: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.qp.orphaned.load(Ordering::Acquire))
            .map(|(k, _)| *k)
            .collect();
        for k in orphans {
            if let Some(c) = self.conns.remove(&k) {
                // SAFETY: live id, events acked; disconnected and destroyed once.
                unsafe {
                    rdma_disconnect(c.id);
                    rdma_destroy_id(c.id);
                }
            }
        }
        for c in self.conns.values_mut() {
            if c.qp.state() == QpState::Error && !c.closing && c.phase == Phase::Established {
                c.closing = true;
                // SAFETY: live id.
                unsafe { rdma_disconnect(c.id) };
            }
        }
    }

    /// Reads one event from the channel: `Ok(None)` when there is none.
    fn handle_next(&mut self) -> Result<Option<Option<CmEvent<VerbsConnRequest>>>, FabricError> {
        let mut ev: *mut rdma_cm_event = std::ptr::null_mut();
        // SAFETY: the channel is live and non-blocking.
        if unsafe { rdma_get_cm_event(self.channel.ch, &mut ev) } != 0 {
            let err = std::io::Error::last_os_error();
            if err.kind() == std::io::ErrorKind::WouldBlock {
                return Ok(None);
            }
            return Err(FabricError::Os {
                op: "rdma_get_cm_event",
                err,
            });
        }
        // SAFETY: rdma_get_cm_event returned a live event; copied before the ack.
        let (id, kind, status, data) = unsafe {
            let e = &*ev;
            (e.id, e.event, e.status, private_data_from(e))
        };
        // SAFETY: acked once; nothing of it is used afterwards except the ids, which
        // outlive their events.
        unsafe { rdma_ack_cm_event(ev) };
        Ok(Some(self.handle(id, kind, status, data)))
    }

    fn handle(
        &mut self,
        id: *mut rdma_cm_id,
        kind: rdma_cm_event_type::Type,
        status: i32,
        data: CmPrivateData,
    ) -> Option<CmEvent<VerbsConnRequest>> {
        use rdma_cm_event_type::*;
        if kind == RDMA_CM_EVENT_CONNECT_REQUEST {
            return Some(CmEvent::ConnectRequest {
                request: VerbsConnRequest {
                    id,
                    _channel: self.channel.clone(),
                },
                private_data: data,
            });
        }
        let key = conn_of(id);
        let conn = ConnId(key);
        let (phase, qp) = {
            let c = self.conns.get(&key)?;
            (c.phase, c.qp.clone())
        };
        match kind {
            RDMA_CM_EVENT_ADDR_RESOLVED => {
                // SAFETY: live id, now bound to a device.
                let bound = unsafe { (*id).verbs };
                // SAFETY: live id.
                if bound != self.dev.ctx
                    || unsafe { rdma_resolve_route(id, RESOLVE_TIMEOUT_MS) } != 0
                {
                    self.drop_conn(key);
                    return Some(CmEvent::Unreachable { conn });
                }
                None
            }
            RDMA_CM_EVENT_ROUTE_RESOLVED => {
                let c = self.conns.get_mut(&key)?;
                let pd = c.private_data;
                c.phase = Phase::Connecting;
                let mut param = self.conn_param(&qp, pd.as_bytes());
                // SAFETY: live id with a resolved route; param and its private data
                // live across the call.
                if unsafe { rdma_connect(id, &mut param) } != 0 {
                    self.drop_conn(key);
                    return Some(CmEvent::Unreachable { conn });
                }
                None
            }
            RDMA_CM_EVENT_CONNECT_RESPONSE => {
                // InfiniBand/RoCE active side: the REP arrived; ready the QP, send RTU.
                // SAFETY: live id.
                if self.ready(id, &qp).is_err() || unsafe { rdma_establish(id) } != 0 {
                    // SAFETY: live id.
                    unsafe { rdma_reject(id, std::ptr::null(), 0) };
                    self.drop_conn(key);
                    return Some(CmEvent::Unreachable { conn });
                }
                self.established(key, &qp);
                Some(CmEvent::Established {
                    conn,
                    private_data: data,
                })
            }
            RDMA_CM_EVENT_ESTABLISHED => {
                if phase == Phase::Established {
                    return None;
                }
                self.established(key, &qp);
                if phase == Phase::Connecting && qp.wake_slot > 0 {
                    self.schedule_wake(key);
                }
                let private_data = if phase == Phase::Accepting {
                    CmPrivateData::EMPTY
                } else {
                    data
                };
                Some(CmEvent::Established { conn, private_data })
            }
            RDMA_CM_EVENT_REJECTED => {
                self.drop_conn(key);
                if self.dev.is_iwarp() || status == IB_REJ_CONSUMER {
                    Some(CmEvent::Rejected {
                        conn,
                        private_data: data,
                    })
                } else {
                    Some(CmEvent::Unreachable { conn })
                }
            }
            RDMA_CM_EVENT_ADDR_ERROR
            | RDMA_CM_EVENT_ROUTE_ERROR
            | RDMA_CM_EVENT_UNREACHABLE
            | RDMA_CM_EVENT_CONNECT_ERROR => {
                let was_up = phase == Phase::Established || phase == Phase::Accepting;
                self.drop_conn(key);
                Some(if was_up {
                    CmEvent::Disconnected { conn }
                } else {
                    CmEvent::Unreachable { conn }
                })
            }
            RDMA_CM_EVENT_DISCONNECTED | RDMA_CM_EVENT_DEVICE_REMOVAL => {
                let c = self.conns.remove(&key)?;
                c.qp.disconnected();
                // SAFETY: live id, events acked; destroyed once.
                unsafe { rdma_destroy_id(c.id) };
                Some(CmEvent::Disconnected { conn })
            }
            _ => None,
        }
    }

    /// Starts connection `key`'s wake-up schedule ([`Wake`]).
    #[cold]
    fn schedule_wake(&mut self, key: u64) {
        if let Some(c) = self.conns.get_mut(&key) {
            if c.wake.is_none() {
                c.wake = Some(Wake::new(Instant::now()));
                self.waking += 1;
            }
        }
    }

    /// Posts the wake-up Writes that are due ([`Wake`]) and ends the schedules of
    /// connections whose peer was heard from, whose Reads are all sent, or that failed.
    /// Costs a branch per poll while no schedule runs.
    fn wake_stranded(&mut self) {
        if self.waking == 0 {
            return;
        }
        let now = Instant::now();
        // Counted again here: connections removed meanwhile took their schedules along.
        let mut waking = 0;
        for c in self.conns.values_mut() {
            let Some(w) = &mut c.wake else {
                continue;
            };
            let over = c.qp.heard_from_peer() || c.closing || c.qp.state().is_error();
            match w.step(now, over, c.qp.sent_any()) {
                WakeStep::Wait => waking += 1,
                WakeStep::Post { last } => {
                    // Refused (the queue pair failed meanwhile): the failure ends it
                    // next time.
                    let _ = c.qp.post_wake_write();
                    if last {
                        c.wake = None;
                    } else {
                        waking += 1;
                    }
                }
                WakeStep::End => c.wake = None,
            }
        }
        self.waking = waking;
    }

    fn established(&mut self, key: u64, qp: &QpShared) {
        if let Some(c) = self.conns.get_mut(&key) {
            c.phase = Phase::Established;
        }
        qp.advance(QpState::ReadyToSend);
    }
}

impl ConnectionManager for VerbsCm {
    type P = VerbsProvider;

    fn listen(&mut self, addr: &VerbsAddr) -> Result<(), FabricError> {
        let id = self.create_id(0)?;
        let fail = |e: FabricError| {
            // SAFETY: live id, never shared; destroyed once.
            unsafe { rdma_destroy_id(id) };
            Err(e)
        };
        let mut sa = addr.to_sockaddr();
        // SAFETY: id is live; sa is a valid socket address for the call.
        if unsafe { rdma_bind_addr(id, (&mut sa as *mut libc::sockaddr_storage).cast()) } != 0 {
            return fail(FabricError::last_os("rdma_bind_addr"));
        }
        // SAFETY: live id; a specific address binds it to the device owning it.
        let bound = unsafe { (*id).verbs };
        if !bound.is_null() && bound != self.dev.ctx {
            return fail(FabricError::WrongDevice);
        }
        // SAFETY: id is live and bound.
        if unsafe { rdma_listen(id, 64) } != 0 {
            return fail(FabricError::last_os("rdma_listen"));
        }
        self.listeners.push(id);
        Ok(())
    }

    fn connect(
        &mut self,
        addr: &VerbsAddr,
        init: QpInit<'_, VerbsProvider>,
        private_data: &[u8],
    ) -> Result<VerbsQp, FabricError> {
        check_private(&self.dev, private_data, PrivateDataKind::Connect)?;
        let data = CmPrivateData::new(private_data)?;
        let key = NEXT_CONN.fetch_add(1, Ordering::Relaxed);
        let id = self.create_id(key)?;
        // iWARP: the active side's queue pair keeps a send slot for wake-up Writes.
        let wake = self.dev.is_iwarp();
        let mut qp = match VerbsQp::create(init, ConnId(key), self.alarm.clone(), wake) {
            Ok(qp) => qp,
            Err(e) => {
                // SAFETY: live id, never shared; destroyed once.
                unsafe { rdma_destroy_id(id) };
                return Err(e);
            }
        };
        qp.peer_addr = crate::fabric::PeerAddr::Ip(addr.0);
        let mut dst = addr.to_sockaddr();
        // SAFETY: id is live; dst is a valid socket address for the call.
        let rc = unsafe {
            rdma_resolve_addr(
                id,
                std::ptr::null_mut(),
                (&mut dst as *mut libc::sockaddr_storage).cast(),
                RESOLVE_TIMEOUT_MS,
            )
        };
        if rc != 0 {
            let e = FabricError::last_os("rdma_resolve_addr");
            // SAFETY: live id, never shared; destroyed once.
            unsafe { rdma_destroy_id(id) };
            return Err(e);
        }
        self.conns.insert(
            key,
            Conn {
                id,
                qp: qp.shared.clone(),
                phase: Phase::Resolving,
                private_data: data,
                closing: false,
                wake: None,
            },
        );
        Ok(qp)
    }

    fn accept(
        &mut self,
        request: VerbsConnRequest,
        init: QpInit<'_, VerbsProvider>,
        private_data: &[u8],
    ) -> Result<VerbsQp, FabricError> {
        self.accept_prepared(request, init, private_data, &mut |_| {})
    }

    fn accept_prepared(
        &mut self,
        mut request: VerbsConnRequest,
        init: QpInit<'_, VerbsProvider>,
        private_data: &[u8],
        before_reply: &mut dyn FnMut(&mut VerbsQp),
    ) -> Result<VerbsQp, FabricError> {
        check_private(&self.dev, private_data, PrivateDataKind::Accept)?;
        // SAFETY: the request's id is live until taken.
        if unsafe { (*request.id).verbs } != self.dev.ctx {
            return Err(FabricError::WrongDevice);
        }
        let key = NEXT_CONN.fetch_add(1, Ordering::Relaxed);
        let mut qp = VerbsQp::create(init, ConnId(key), self.alarm.clone(), false)?;
        // SAFETY: the request's id is live until taken; the CM filled in its route's
        // destination (the requester's address) when it reported the request.
        let peer = unsafe { from_sockaddr(rdma_get_peer_addr(&*request.id)) };
        qp.peer_addr = peer.map_or(
            crate::fabric::PeerAddr::Unknown,
            crate::fabric::PeerAddr::Ip,
        );
        if !self.dev.is_iwarp() {
            self.ready(request.id, &qp.shared)?;
        }
        // rdma_accept sends the MPA Reply on iWARP, and the peer may send at once.
        before_reply(&mut qp);
        let id = request.take();
        // SAFETY: live id now owned here; its context names the connection from now on.
        unsafe { (*id).context = key as *mut std::ffi::c_void };
        let mut param = self.conn_param(&qp.shared, private_data);
        // SAFETY: live id; param and its private data live across the call.
        if unsafe { rdma_accept(id, &mut param) } != 0 {
            let e = FabricError::last_os("rdma_accept");
            // SAFETY: live id, never shared; destroyed once.
            unsafe { rdma_destroy_id(id) };
            return Err(e);
        }
        qp.shared.advance(QpState::ReadyToReceive);
        self.conns.insert(
            key,
            Conn {
                id,
                qp: qp.shared.clone(),
                phase: Phase::Accepting,
                private_data: CmPrivateData::EMPTY,
                closing: false,
                wake: None,
            },
        );
        Ok(qp)
    }

    fn reject(
        &mut self,
        mut request: VerbsConnRequest,
        private_data: &[u8],
    ) -> Result<(), FabricError> {
        check_private(&self.dev, private_data, PrivateDataKind::Reject)?;
        let id = request.take();
        let ptr = if private_data.is_empty() {
            std::ptr::null()
        } else {
            private_data.as_ptr().cast()
        };
        // SAFETY: live id owned here; the data lives across the call (length checked
        // against the transport limit, at most 196).
        let rc = unsafe { rdma_reject(id, ptr, private_data.len() as u8) };
        let result = if rc != 0 {
            Err(FabricError::last_os("rdma_reject"))
        } else {
            Ok(())
        };
        // SAFETY: live id; destroyed once.
        unsafe { rdma_destroy_id(id) };
        result
    }

    fn disconnect(&mut self, conn: ConnId) -> Result<(), FabricError> {
        let c = match self.conns.get_mut(&conn.0) {
            Some(c) if !c.closing => c,
            _ => return Err(FabricError::UnknownConn(conn)),
        };
        c.closing = true;
        c.qp.disconnected();
        // SAFETY: live id.
        if unsafe { rdma_disconnect(c.id) } != 0 {
            return Err(FabricError::last_os("rdma_disconnect"));
        }
        Ok(())
    }

    fn poll_event(&mut self) -> Result<Option<CmEvent<VerbsConnRequest>>, FabricError> {
        self.sweep();
        self.wake_stranded();
        loop {
            match self.handle_next()? {
                None => return Ok(None),
                Some(Some(e)) => return Ok(Some(e)),
                Some(None) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_writes_go_at_10_50_250_ms_and_stop_after_five() {
        let t0 = Instant::now();
        let mut w = Wake::new(t0);
        assert_eq!(w.step(t0, false, true), WakeStep::Wait, "nothing at once");
        let mut at = t0 + WAKE_FIRST;
        let mut gap = WAKE_FIRST;
        for k in 1..=WAKE_READS {
            assert_eq!(
                w.step(at - Duration::from_micros(1), false, true),
                WakeStep::Wait,
                "write {k} not before its time"
            );
            assert_eq!(
                w.step(at, false, true),
                WakeStep::Post {
                    last: k == WAKE_READS
                },
                "write {k} at {:?}",
                at - t0
            );
            gap *= 5;
            at += gap;
        }
    }

    #[test]
    fn nothing_goes_before_something_was_sent_nor_after_the_peer_answered() {
        let t0 = Instant::now();
        let mut w = Wake::new(t0);
        // Nothing sent yet: the schedule waits, one first delay at a time.
        let late = t0 + Duration::from_secs(30);
        assert_eq!(w.step(late, false, false), WakeStep::Wait);
        assert_eq!(w.step(late + WAKE_FIRST / 2, false, true), WakeStep::Wait);
        assert_eq!(
            w.step(late + WAKE_FIRST, false, true),
            WakeStep::Post { last: false },
            "the first of five, counted from when something was sent"
        );
        assert_eq!(
            w.step(late + Duration::from_secs(60), true, true),
            WakeStep::End
        );
        let mut w = Wake::new(t0);
        assert_eq!(
            w.step(t0 + Duration::from_secs(60), true, true),
            WakeStep::End
        );
    }
}
