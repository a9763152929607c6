//! A stateful fuzz driver over the `sim` provider: the engine's real drivers (a
//! [`Requester<Sim>`] and a [`Responder<Sim>`]) each connected to a *rogue* peer, a raw
//! simulated queue pair whose every step the input chooses.
//!
//! - **Rogue responder vs our requester.** The rogue accepts the connection (with RFC
//!   8797 private data, garbage, or nothing; or rejects it), receives our calls, and
//!   answers with what the input says: well-formed replies to a call it saw (inline,
//!   through the Reply chunk, with Write chunk results; any credit value), replies to
//!   unknown XIDs, RDMA_ERROR, RDMA_DONE, RDMA_NOMSG and RDMA_MSGP with arbitrary chunk
//!   lists, truncated or garbage headers, RDMA Writes and Reads against the chunks our
//!   requester advertised (the keys it saw and neighbouring guesses, offsets and
//!   lengths in and out of range), and disconnects.
//! - **Rogue requester vs our responder.** The rogue connects and sends calls: well
//!   formed with Read, Write and Reply chunks pointing into its own memory (valid or
//!   bogus keys, lengths and offsets, a read-only region, regions not registered at
//!   all), long calls, too many chunks, any credit request, garbage, RDMA_DONE and
//!   RDMA_ERROR, bursts beyond the credit window, and disconnects.
//!
//! Sim faults (random drops, RNR, CQ stalls, fail points) and virtual time come from the
//! input too. Each run is bounded in steps and polls.
//!
//! What must hold (a panic is a fuzz failure): nothing panics; every call our requester
//! accepted gets at most one outcome, and exactly one once the connection is closed
//! and drained; none for a call never accepted; in fast-registration mode every key a
//! call advertised is dead when its outcome is delivered; the responder survives and
//! frees the connection once it ends; once the drivers are dropped their pools read
//! full and no registration of theirs is left in the fabric; and the rogue's memory
//! outside what it registered for remote writing (unregistered gaps, a read-only
//! region) is byte for byte what it was.
//!
//! Used by the `sim_peer` fuzz target (`engine/fuzz`) and by unit tests that run it over
//! seeded inputs. Hidden from the documentation: a test harness, not the engine's API.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use rpcrdma_pools::{Arena, ArenaOptions, HugePages, Pool};

use super::peer_fuzz::{Input, Ledger};
use crate::conn::{Requester, Responder};
use crate::core::{ConnConfig, ConnState, CorePools, Registration};
use crate::fabric::sim::{
    FailPoint, FaultConfig, Sim, SimAddr, SimConfig, SimCq, SimDevice, SimMr, SimNet, SimPd, SimQp,
};
use crate::fabric::{
    Access, CmEvent, Completion, CompletionQueue, ConnId, ConnectionManager, Device, MemoryRegion,
    ProtectionDomain, QpCaps, QpConfig, QpInit, QueuePair, RecvWr, RemoteAddr, SendOp, SendWr, Sge,
    WcOpcode, WcStatus,
};
use crate::requester::{CallRequest, CallStatus, TransportError};
use crate::service::{CallView, ReplyWriter, Service, ServiceError};
use crate::wire::header::{
    BodyRepr, ChunkListsRepr, Header, HeaderBody, HeaderRepr, Limits, RdmaError, ReadSegment,
    Segment,
};
use crate::wire::private_data::PrivateData;

/// What one run reached, for a test to see that inputs get to the interesting paths.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Report {
    /// Runs that set up the requester scenario / the responder scenario.
    pub requester_runs: u64,
    /// See [`Report::requester_runs`].
    pub responder_runs: u64,
    /// Connections that reached `Established` on our side.
    pub established: u64,
    /// Calls our requester accepted.
    pub accepted: u64,
    /// Outcomes it delivered.
    pub outcomes: u64,
    /// Outcomes that were a successful reply.
    pub replies: u64,
    /// Outcomes that were an RDMA_ERROR from the rogue.
    pub rdma_errors: u64,
    /// Outcomes that were a timeout.
    pub timeouts: u64,
    /// Calls of ours the rogue responder received.
    pub calls_seen: u64,
    /// Rogue Sends that reached our requester (success completions at the rogue).
    pub to_requester: u64,
    /// Rogue Sends that reached our responder.
    pub to_responder: u64,
    /// Rogue RDMA Writes and Reads that moved bytes.
    pub rogue_rdma_ok: u64,
    /// Rogue RDMA Writes and Reads the fabric refused.
    pub rogue_rdma_refused: u64,
    /// Calls our responder handed to its service.
    pub responder_calls: u64,
    /// RDMA_ERROR replies (ERR_VERS, ERR_CHUNK) our responder sent.
    pub responder_errors: u64,
    /// Messages the rogue requester received from our responder.
    pub from_responder: u64,
    /// Keys found dead when their call's outcome was delivered (fast registration).
    pub keys_dead_at_outcome: u64,
    /// New connections our requester made after losing one, and calls it sent again.
    pub reconnects: u64,
    /// See [`Report::reconnects`].
    pub retransmitted: u64,
    /// Calls a well-behaved requester made successfully after the rogue left.
    pub good_calls: u64,
}

impl Report {
    /// Adds `o`'s counts to these.
    pub fn add(&mut self, o: &Report) {
        self.requester_runs += o.requester_runs;
        self.responder_runs += o.responder_runs;
        self.established += o.established;
        self.accepted += o.accepted;
        self.outcomes += o.outcomes;
        self.replies += o.replies;
        self.rdma_errors += o.rdma_errors;
        self.timeouts += o.timeouts;
        self.calls_seen += o.calls_seen;
        self.to_requester += o.to_requester;
        self.to_responder += o.to_responder;
        self.rogue_rdma_ok += o.rogue_rdma_ok;
        self.rogue_rdma_refused += o.rogue_rdma_refused;
        self.responder_calls += o.responder_calls;
        self.responder_errors += o.responder_errors;
        self.from_responder += o.from_responder;
        self.keys_dead_at_outcome += o.keys_dead_at_outcome;
        self.reconnects += o.reconnects;
        self.retransmitted += o.retransmitted;
        self.good_calls += o.good_calls;
    }
}

/// Steps one run takes at most.
const MAX_STEPS: usize = 192;
/// Driver polls one run makes at most before tearing down.
const MAX_POLLS: u32 = 6000;
/// Polls the tear-down may take: far more than a flush needs, so running out means the
/// driver is stuck (a liveness bug), not that the bound was tight.
const DRAIN_POLLS: u32 = 20_000;

// The rogue's memory: one arena, some of it registered (each part for a purpose), some
// of it not, so stray accesses would show.
const SLOT: usize = 4096;
/// Receive buffers (local write).
const RECV_OFF: usize = 0;
const RECV_SLOTS: usize = 32;
/// Send staging (local).
const SEND_OFF: usize = RECV_OFF + RECV_SLOTS * SLOT;
const SEND_SLOTS: usize = 16;
/// Local sources and sinks of the rogue's own RDMA Writes and Reads.
const SCRATCH_OFF: usize = SEND_OFF + SEND_SLOTS * SLOT;
const SCRATCH_SLOT: usize = 8192;
const SCRATCH_LEN: usize = SEND_SLOTS * SCRATCH_SLOT;
/// Unregistered gap.
const GAP1_OFF: usize = SCRATCH_OFF + SCRATCH_LEN;
const GAP_LEN: usize = 4096;
/// Remotely readable and writable: what the rogue requester's chunks point at.
const RW_OFF: usize = GAP1_OFF + GAP_LEN;
const RW_LEN: usize = 128 * 1024;
/// Unregistered gap.
const GAP2_OFF: usize = RW_OFF + RW_LEN;
/// Remotely readable only.
const RO_OFF: usize = GAP2_OFF + GAP_LEN;
const RO_LEN: usize = 64 * 1024;
/// Unregistered tail.
const TAIL_OFF: usize = RO_OFF + RO_LEN;
const ARENA_LEN: usize = TAIL_OFF + 64 * 1024;

const CANARY: u8 = 0xc5;
const SQ_DEPTH: u32 = 16;

/// The byte at `i` of the read-only region, before and after the run.
fn ro_pattern(i: usize) -> u8 {
    (i as u8).wrapping_mul(13) ^ 0x3c
}

/// Credit values a rogue picks from: zero, small, the usual, and absurd.
fn credit(input: &mut Input<'_>) -> u32 {
    match input.u8() % 8 {
        0 => 0,
        1 => 1,
        2 => 2,
        3 => 8,
        4 => 255,
        5 => 65_535,
        6 => u32::MAX,
        _ => input.u32(),
    }
}

/// Runs the scenario the input's first byte picks over the rest; panics when a promise
/// breaks.
pub fn run(data: &[u8]) -> Report {
    let mut input = Input { data };
    let which = input.u8();
    let seed = input.u64();
    let faults = faults(&mut input);
    // Steps from their own stream, parameters from the rest (as peer_fuzz does), so a
    // change to one step's parameters does not reshuffle the steps after it.
    let n_ops = usize::from(input.u16() % 1024);
    let ops = Input {
        data: input.bytes(n_ops),
    };
    let mut cfg = SimConfig::seeded(seed)
        .with_latency(Duration::from_micros(1), Duration::from_micros(30))
        .with_trace_capacity(0)
        .with_faults(faults);
    // A few hundred keys cover both drivers and the rogue; the default 64 K-slot key
    // table would cost more to build than most runs take.
    cfg.caps.max_mr = 512;
    let net = SimNet::new(cfg);
    if which & 1 == 0 {
        rogue_responder(&net, ops, input)
    } else {
        rogue_requester(&net, faults == FaultConfig::NONE, ops, input)
    }
}

/// Random faults: mostly none, so the deeper states are reached.
fn faults(input: &mut Input<'_>) -> FaultConfig {
    // Always six bytes, so what follows does not move when faults are off.
    let b = input.u8();
    let f = FaultConfig {
        drop_per_mille: u16::from(input.u8() % 8),
        rnr_per_mille: u16::from(input.u8() % 64),
        max_recv_delay: Duration::from_micros(u64::from(input.u8() % 64)),
        cq_stall_per_mille: u16::from(input.u8() % 32),
        max_cq_stall: Duration::from_micros(u64::from(input.u8())),
    };
    if b & 0xc0 == 0xc0 {
        f
    } else {
        FaultConfig::NONE
    }
}

/// The raw end of a connection: one device, an arena registered piecewise, a queue
/// pair the input drives.
struct Rogue {
    // Field order is drop order: the queue pair before the connection manager and
    // completion queue it uses, registrations before the arena.
    qp: Option<SimQp>,
    cm: crate::fabric::sim::SimCm,
    cq: SimCq,
    mrs: Vec<SimMr>,
    pd: SimPd,
    arena: Arc<Arena>,
    _dev: SimDevice,
    conn: Option<ConnId>,
    established: bool,
    disconnected: bool,
    local_key: u32,
    rw_key: u32,
    ro_key: u32,
    /// Send-queue requests posted and not completed.
    in_flight: u32,
    next_wr: u64,
    /// Messages received, oldest first (bounded).
    inbox: VecDeque<Vec<u8>>,
    received: u64,
    sends_ok: u64,
    rdma_ok: u64,
    rdma_refused: u64,
}

impl Rogue {
    fn new(net: &SimNet) -> Option<Rogue> {
        let dev = net.open_device();
        let pd = dev.alloc_pd().ok()?;
        let cq = dev.create_cq(256).ok()?;
        let cm = dev.create_cm().ok()?;
        let opts = ArenaOptions::new(ARENA_LEN).hugepages(HugePages::Never);
        let arena = Arc::new(Arena::new(&opts).ok()?);
        let mut r = Rogue {
            qp: None,
            cm,
            cq,
            mrs: Vec::new(),
            pd,
            arena,
            _dev: dev,
            conn: None,
            established: false,
            disconnected: false,
            local_key: 0,
            rw_key: 0,
            ro_key: 0,
            in_flight: 0,
            next_wr: 1,
            inbox: VecDeque::new(),
            received: 0,
            sends_ok: 0,
            rdma_ok: 0,
            rdma_refused: 0,
        };
        r.put(GAP1_OFF, &[CANARY; GAP_LEN]);
        r.put(GAP2_OFF, &[CANARY; GAP_LEN]);
        r.put(TAIL_OFF, &vec![CANARY; ARENA_LEN - TAIL_OFF]);
        let ro: Vec<u8> = (0..RO_LEN).map(ro_pattern).collect();
        r.put(RO_OFF, &ro);
        let mut reg = |off, len, access| -> Option<u32> {
            let mr = r.pd.reg_mr(&r.arena, off, len, access).ok()?;
            let key = mr.lkey();
            r.mrs.push(mr);
            Some(key)
        };
        let local_key = reg(RECV_OFF, GAP1_OFF - RECV_OFF, Access::LOCAL_WRITE)?;
        let rw_key = reg(
            RW_OFF,
            RW_LEN,
            Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
        )?;
        let ro_key = reg(RO_OFF, RO_LEN, Access::REMOTE_READ)?;
        r.local_key = local_key;
        r.rw_key = rw_key;
        r.ro_key = ro_key;
        Some(r)
    }

    fn addr(&self, off: usize) -> u64 {
        self.arena.base() as u64 + off as u64
    }

    /// Writes `bytes` at `off` of the arena (clipped to it).
    fn put(&self, off: usize, bytes: &[u8]) {
        let n = bytes.len().min(self.arena.len().saturating_sub(off));
        // SAFETY: `off + n` lies within the arena, which lives as long as `self`; the
        // simulation touches it only inside this thread's calls into the fabric, and
        // none is running.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), self.arena.base().add(off), n) };
    }

    /// The `n` bytes at `off` of the arena (clipped to it).
    fn get(&self, off: usize, n: usize) -> Vec<u8> {
        let n = n.min(self.arena.len().saturating_sub(off));
        // SAFETY: as in `put`; the bytes are copied out at once.
        unsafe { std::slice::from_raw_parts(self.arena.base().add(off), n).to_vec() }
    }

    fn qp_config() -> QpConfig {
        QpConfig {
            caps: QpCaps {
                max_send_wr: SQ_DEPTH,
                max_recv_wr: RECV_SLOTS as u32,
                max_send_sge: 1,
                max_recv_sge: 1,
            },
            // A rogue that overruns the credit window learns it from RNR, at most a
            // few times: infinite retry would keep its Sends alive for ever.
            rnr_retry: 3,
            ..QpConfig::default()
        }
    }

    fn post_recvs(&mut self) {
        let key = self.local_key;
        let base = self.addr(RECV_OFF);
        let Some(qp) = self.qp.as_mut() else {
            return;
        };
        for i in 0..RECV_SLOTS {
            let sge = [Sge::new(base + (i * SLOT) as u64, SLOT as u32, key)];
            let _ = qp.post_recv(&[RecvWr {
                wr_id: i as u64,
                sgl: &sge,
            }]);
        }
    }

    fn is_up(&self) -> bool {
        self.qp.is_some() && !self.disconnected
    }

    /// Sends `msg` (at most a slot); false when nothing could be posted.
    fn send(&mut self, msg: &[u8], invalidate: Option<u32>) -> bool {
        if !self.is_up() || self.in_flight >= SQ_DEPTH - 1 {
            return false;
        }
        let wr_id = self.next_wr;
        let off = SEND_OFF + (wr_id as usize % SEND_SLOTS) * SLOT;
        let n = msg.len().min(SLOT);
        self.put(off, &msg[..n]);
        let sge = [Sge::new(self.addr(off), n as u32, self.local_key)];
        let mut wr = SendWr::send(wr_id, &sge);
        if let Some(rkey) = invalidate {
            wr.op = SendOp::SendWithInvalidate { rkey };
        }
        self.post(wr)
    }

    /// An RDMA Write of `data` (`Some`) or a Read of `len` bytes, between scratch
    /// memory and `remote`. Scratch slots are used round-robin like the send slots, so
    /// none is rewritten while a request using it is still queued.
    fn rdma(&mut self, data: Option<&[u8]>, remote: RemoteAddr, len: usize) -> bool {
        if !self.is_up() || self.in_flight >= SQ_DEPTH - 1 {
            return false;
        }
        let wr_id = self.next_wr;
        let off = SCRATCH_OFF + (wr_id as usize % SEND_SLOTS) * SCRATCH_SLOT;
        let len = data.map_or(len, <[u8]>::len).min(SCRATCH_SLOT);
        if let Some(d) = data {
            self.put(off, &d[..len]);
        }
        let sge = [Sge::new(self.addr(off), len as u32, self.local_key)];
        let wr = match data {
            Some(_) => SendWr::write(wr_id, &sge, remote),
            None => SendWr::read(wr_id, &sge, remote),
        };
        self.post(wr)
    }

    fn post(&mut self, wr: SendWr<'_>) -> bool {
        let Some(qp) = self.qp.as_mut() else {
            return false;
        };
        if qp.post_send(&[wr]).is_err() {
            return false;
        }
        self.next_wr += 1;
        self.in_flight += 1;
        true
    }

    /// Reaps completions: received messages go to the inbox (and their receive is
    /// posted again); send-queue completions are counted.
    fn poll_cq(&mut self) {
        let mut wcs = [Completion::EMPTY; 16];
        loop {
            let n = self.cq.poll(&mut wcs);
            if n == 0 {
                return;
            }
            for wc in &wcs[..n] {
                self.on_completion(wc);
            }
        }
    }

    fn on_completion(&mut self, wc: &Completion) {
        // A replaced queue pair's flushed requests and receives concern nobody now.
        if self.qp.as_ref().is_none_or(|q| q.qp_num() != wc.qp_num) {
            return;
        }
        if wc.opcode == WcOpcode::Recv {
            if !wc.status.is_success() {
                return;
            }
            let i = (wc.wr_id as usize).min(RECV_SLOTS - 1);
            let msg = self.get(RECV_OFF + i * SLOT, (wc.byte_len as usize).min(SLOT));
            self.received += 1;
            if self.inbox.len() == 64 {
                self.inbox.pop_front();
            }
            self.inbox.push_back(msg);
            let sge = [Sge::new(
                self.addr(RECV_OFF + i * SLOT),
                SLOT as u32,
                self.local_key,
            )];
            if let Some(qp) = self.qp.as_mut() {
                let _ = qp.post_recv(&[RecvWr {
                    wr_id: i as u64,
                    sgl: &sge,
                }]);
            }
            return;
        }
        self.in_flight = self.in_flight.saturating_sub(1);
        let ok = wc.status.is_success();
        match wc.opcode {
            WcOpcode::Send => self.sends_ok += u64::from(ok),
            WcOpcode::RdmaWrite | WcOpcode::RdmaRead if ok => self.rdma_ok += 1,
            WcOpcode::RdmaWrite | WcOpcode::RdmaRead if wc.status != WcStatus::WrFlushed => {
                self.rdma_refused += 1
            }
            _ => {}
        }
    }

    /// Handles connection events: as a listener, answers a connect request as
    /// `answer` says (None rejects).
    fn poll_cm(&mut self, answer: &Option<Vec<u8>>) {
        while let Ok(Some(ev)) = self.cm.poll_event() {
            match ev {
                CmEvent::ConnectRequest { request, .. } => {
                    // One connection at a time: a new one (a requester reconnecting)
                    // replaces the old only once that has failed.
                    let old_dead = self
                        .qp
                        .as_ref()
                        .is_none_or(|q| self.disconnected || q.state().is_error());
                    if !old_dead {
                        let _ = self.cm.reject(request, &[]);
                        continue;
                    }
                    let Some(pd) = answer else {
                        let _ = self.cm.reject(request, &[]);
                        continue;
                    };
                    let init = QpInit {
                        pd: &self.pd,
                        send_cq: &self.cq,
                        recv_cq: &self.cq,
                        srq: None,
                        config: Self::qp_config(),
                    };
                    if let Ok(qp) = self.cm.accept(request, init, pd) {
                        self.conn = Some(qp.conn_id());
                        self.qp = Some(qp);
                        self.disconnected = false;
                        self.established = false;
                        self.in_flight = 0;
                        self.post_recvs();
                    }
                }
                CmEvent::Established { conn, .. } if Some(conn) == self.conn => {
                    self.established = true;
                }
                CmEvent::Rejected { conn, .. }
                | CmEvent::Unreachable { conn }
                | CmEvent::Disconnected { conn }
                    if Some(conn) == self.conn =>
                {
                    self.disconnected = true;
                }
                _ => {}
            }
        }
    }

    fn poll(&mut self, answer: &Option<Vec<u8>>) {
        self.poll_cm(answer);
        self.poll_cq();
    }

    fn disconnect(&mut self) {
        if let Some(c) = self.conn {
            let _ = self.cm.disconnect(c);
        }
    }

    /// The memory nobody was granted write access to is as it was set up.
    fn check_untouched(&self) {
        let gap = |off| self.get(off, GAP_LEN).iter().all(|&b| b == CANARY);
        assert!(
            gap(GAP1_OFF),
            "a peer wrote into the rogue's unregistered gap"
        );
        assert!(
            gap(GAP2_OFF),
            "a peer wrote into the rogue's unregistered gap"
        );
        assert!(
            self.get(TAIL_OFF, ARENA_LEN - TAIL_OFF)
                .iter()
                .all(|&b| b == CANARY),
            "a peer wrote past the rogue's registrations"
        );
        let ro = self.get(RO_OFF, RO_LEN);
        assert!(
            ro.iter().enumerate().all(|(i, &b)| b == ro_pattern(i)),
            "a peer wrote into memory registered for remote reading only"
        );
    }
}

/// Private data a rogue offers: RFC 8797 with chosen sizes, garbage, or none.
fn rogue_private_data(input: &mut Input<'_>) -> Vec<u8> {
    match input.u8() % 4 {
        0 | 1 => {
            let size = |b: u8| 1024 * (1 + u32::from(b % 4));
            let pd = PrivateData::new(size(input.u8()), size(input.u8()), input.u8() & 1 == 1);
            pd.to_bytes().map(|b| b.to_vec()).unwrap_or_default()
        }
        2 => {
            let n = usize::from(input.u8() % 56);
            input.bytes(n).to_vec()
        }
        _ => Vec::new(),
    }
}

/// A call our requester sent, as the rogue responder saw it.
struct SeenCall {
    xid: u32,
    header: Header,
    answered: bool,
}

impl SeenCall {
    /// Every segment the call advertised: Read list, Write list, Reply chunk.
    fn segments(&self) -> Vec<Segment> {
        let Some(lists) = self.lists() else {
            return Vec::new();
        };
        let mut v: Vec<Segment> = lists.reads.iter().map(|r| r.segment).collect();
        v.extend(lists.writes.iter().flatten().copied());
        v.extend(lists.reply.iter().flatten().copied());
        v
    }

    /// The call's chunk lists (none for a message that is not a call).
    fn lists(&self) -> Option<&crate::wire::header::ChunkLists> {
        match &self.header.body {
            HeaderBody::Msg(l) | HeaderBody::Nomsg(l) => Some(l),
            HeaderBody::Msgp { lists, .. } => Some(lists),
            _ => None,
        }
    }
}

/// An RPC reply header for `xid` with `accept_stat`.
fn rpc_reply(xid: u32, stat: u32) -> Vec<u8> {
    [xid, 1, 0, 0, 0, stat]
        .iter()
        .flat_map(|w| w.to_be_bytes())
        .collect()
}

fn encode(repr: &HeaderRepr<'_>, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0; repr.encoded_len()];
    let n = repr.encode(&mut v).unwrap_or(0);
    v.truncate(n);
    v.extend_from_slice(payload);
    v
}

/// A segment the input derives from `s`: itself, or off by a little in key, offset or
/// length (a rogue guessing its way past what it was granted).
fn perturb(input: &mut Input<'_>, s: Segment) -> Segment {
    let mut s = s;
    match input.u8() % 8 {
        0 => s.handle ^= 1,
        1 => s.handle = s.handle.wrapping_add(0x100),
        2 => s.handle = s.handle.wrapping_sub(0x100),
        3 => s.offset = s.offset.wrapping_add(u64::from(s.length)),
        4 => s.offset = s.offset.wrapping_sub(u64::from(input.u16())),
        5 => s.length = s.length.saturating_add(u32::from(input.u16()) + 1),
        _ => {}
    }
    s
}

/// Rogue responder vs our requester.
fn rogue_responder(net: &SimNet, mut ops: Input<'_>, mut input: Input<'_>) -> Report {
    let mut report = Report {
        requester_runs: 1,
        ..Report::default()
    };
    let Some(mut rogue) = Rogue::new(net) else {
        return report;
    };
    let addr = SimAddr(1);
    if rogue.cm.listen(&addr).is_err() {
        return report;
    }
    // How the rogue answers the connect request: private data, or a rejection.
    let answer = (!input.u8().is_multiple_of(16)).then(|| rogue_private_data(&mut input));
    let size = |b: u8| if b & 1 == 0 { 1024 } else { 4096 };
    let cfg = ConnConfig {
        inline_send: size(input.u8()),
        inline_recv: size(input.u8()),
        remote_invalidate: input.u8() & 1 == 1,
        credits: 1 + u32::from(input.u8() % 8),
        large_buf_size: 64 * 1024,
        large_bufs: 12,
        send_bufs: 32,
        queue_len: 16,
        call_timeout: Duration::from_millis(1 + u64::from(input.u8() % 40)),
        keepalive: (input.u8() & 3 == 0).then(|| Duration::from_millis(5)),
        probe_timeout: Duration::from_millis(5),
        credit_reclaim: (input.u8() & 1 == 1).then(|| Duration::from_millis(30)),
        registration: if input.u8() & 3 == 0 {
            Registration::Persistent
        } else {
            Registration::FastReg
        },
        seed: Some(net.seed()),
        hugepages: HugePages::Never,
        // Now and then the requester reconnects and sends lost calls again: outcomes
        // must stay exactly once across connections.
        reconnect: (input.u8() & 3 == 0).then(|| crate::core::config::Reconnect {
            backoff: Duration::from_micros(100),
            max_backoff: Duration::from_millis(2),
            max_sends: 1 + u32::from(input.u8() % 4),
            resend_for: (input.u8() & 1 == 0).then(|| Duration::from_millis(20)),
            server_has_drc: input.u8() & 1 == 0,
        }),
        ..ConnConfig::default()
    };
    let dev = net.open_device();
    let Ok(mut req) = Requester::<Sim>::connect_with(&dev, &addr, &cfg) else {
        return report;
    };
    let fast_reg = req.registration() == crate::core::RegMode::FastReg;
    let pools: CorePools = req.resources().pools().clone();
    let app: Option<Pool> = req.resources().app_pool().cloned();
    let mut ledger = Ledger { seen: Vec::new() };
    let mut calls: VecDeque<SeenCall> = VecDeque::new();
    let mut polls = 0u32;
    let mut was_up = false;

    let mut round = |req: &mut Requester<Sim>,
                     rogue: &mut Rogue,
                     calls: &mut VecDeque<SeenCall>,
                     ledger: &mut Ledger,
                     report: &mut Report| {
        let now = req.clock().now();
        req.poll(now);
        rogue.poll(&answer);
        if !was_up && req.state() == ConnState::Established {
            was_up = true;
            report.established += 1;
        }
        // What the rogue received: our calls (anything else is ignored).
        while let Some(msg) = rogue.inbox.pop_front() {
            if let Ok(h) = Header::parse(&msg, &Limits::PERMISSIVE) {
                report.calls_seen += 1;
                if calls.len() == 32 {
                    calls.pop_front();
                }
                calls.push_back(SeenCall {
                    xid: h.xid,
                    header: h,
                    answered: false,
                });
            }
        }
        while let Some(o) = req.poll_outcome() {
            ledger.outcome(o.tag);
            report.outcomes += 1;
            match o.status {
                CallStatus::Success => report.replies += 1,
                CallStatus::Transport(TransportError::Rdma(_)) => report.rdma_errors += 1,
                CallStatus::Timeout => report.timeouts += 1,
                _ => {}
            }
            // Keys die before the outcome is delivered, so a responder loses access
            // when the RPC completes. Checked while the queue pair still works: once
            // it has failed no peer reaches anything through it, and the keys die with
            // their registrations when the connection closes (checked at the end).
            if fast_reg && req.state() == ConnState::Established && !req.qp().state().is_error() {
                for c in calls.iter().filter(|c| c.xid == o.xid) {
                    for s in c.segments() {
                        assert!(
                            !net.key_is_live(s.handle),
                            "key {:#x} of call xid {:#x} live after its outcome ({:?})",
                            s.handle,
                            o.xid,
                            o.status
                        );
                        report.keys_dead_at_outcome += 1;
                    }
                }
            }
        }
        while req.poll_event().is_some() {}
        // The rogue never touches our queue pair: a completion naming nothing, or
        // work the outbox had no room for, would be the engine's own bug.
        let st = req.stats();
        assert_eq!(st.stray_completions, 0, "requester: stray completions");
        assert_eq!(st.outbox_overflows, 0, "requester: outbox overflow");
    };

    let mut steps = 0;
    while !ops.is_empty() && steps < MAX_STEPS && polls < MAX_POLLS {
        steps += 1;
        match ops.u8() % 16 {
            0..=2 => {
                if let Some(call) = call_request(&mut input, &req) {
                    if req.submit(call, ledger.seen.len() as u64).is_ok() {
                        ledger.accept();
                        report.accepted += 1;
                    }
                }
            }
            3..=5 => answer_call(&mut input, &mut rogue, &mut calls),
            6 => {
                // A reply to an XID nobody sent, perhaps claiming chunk results.
                let xid = input.u32();
                let credit = credit(&mut input);
                let seg = [Segment {
                    handle: input.u32(),
                    length: u32::from(input.u16()),
                    offset: input.u64(),
                }];
                let writes: [&[Segment]; 1] = [&seg];
                let lists = ChunkListsRepr {
                    reads: &[],
                    writes: if input.u8() & 1 == 1 { &writes } else { &[] },
                    reply: None,
                };
                let repr = HeaderRepr {
                    xid,
                    credit,
                    body: BodyRepr::Msg(lists),
                };
                rogue.send(&encode(&repr, &rpc_reply(xid, 0)), None);
            }
            7 => {
                // RDMA_ERROR, for a call seen or not.
                let xid = pick_xid(&mut input, &calls);
                let err = if input.u8() & 1 == 0 {
                    RdmaError::Chunk
                } else {
                    RdmaError::Vers {
                        low: input.u32(),
                        high: input.u32(),
                    }
                };
                let repr = HeaderRepr {
                    xid,
                    credit: credit(&mut input),
                    body: BodyRepr::Error(err),
                };
                let mut m = encode(&repr, &[]);
                if input.u8() & 7 == 0 {
                    // An error code nobody defined.
                    if let Some(w) = m.get_mut(16..20) {
                        w.copy_from_slice(&input.u32().to_be_bytes());
                    }
                }
                rogue.send(&m, None);
            }
            8 => {
                let xid = pick_xid(&mut input, &calls);
                let repr = HeaderRepr {
                    xid,
                    credit: credit(&mut input),
                    body: BodyRepr::Done,
                };
                rogue.send(&encode(&repr, &[]), None);
            }
            9 => {
                // RDMA_NOMSG or RDMA_MSGP with arbitrary lists.
                let xid = pick_xid(&mut input, &calls);
                let segs: Vec<Segment> = (0..input.u8() % 4)
                    .map(|_| Segment {
                        handle: input.u32(),
                        length: u32::from(input.u16()),
                        offset: input.u64(),
                    })
                    .collect();
                let lists = ChunkListsRepr {
                    reads: &[],
                    writes: &[],
                    reply: (input.u8() & 1 == 1).then_some(&segs[..]),
                };
                let body = if input.u8() & 1 == 0 {
                    BodyRepr::Nomsg(lists)
                } else {
                    BodyRepr::Msgp {
                        align: input.u32(),
                        thresh: input.u32(),
                        lists,
                    }
                };
                let repr = HeaderRepr {
                    xid,
                    credit: credit(&mut input),
                    body,
                };
                rogue.send(&encode(&repr, &rpc_reply(xid, 0)), None);
            }
            10 => {
                // Garbage, or a real reply cut short; now and then longer than any
                // receive buffer of ours (which ends the connection).
                let n = usize::from(input.u16() % if input.u8() == 0 { 1100 } else { 1024 });
                let mut m = input.bytes(n).to_vec();
                if input.u8() & 1 == 0 {
                    let xid = pick_xid(&mut input, &calls);
                    let repr = HeaderRepr {
                        xid,
                        credit: 1,
                        body: BodyRepr::Msg(ChunkListsRepr {
                            reads: &[],
                            writes: &[],
                            reply: None,
                        }),
                    };
                    let full = encode(&repr, &rpc_reply(xid, 0));
                    m = full[..n.min(full.len())].to_vec();
                }
                rogue.send(&m, None);
            }
            11 => {
                // RDMA against what a call advertised (or a guess next to it).
                let write = input.u8() & 1 == 1;
                let i = usize::from(input.u8());
                let seg = calls
                    .get(i % calls.len().max(1))
                    .and_then(|c| {
                        let s = c.segments();
                        s.get(usize::from(input.u8()) % s.len().max(1)).copied()
                    })
                    .unwrap_or(Segment {
                        handle: input.u32(),
                        length: 64,
                        offset: input.u64(),
                    });
                let s = perturb(&mut input, seg);
                let len = (s.length as usize).min(usize::from(input.u16()) + 1);
                let remote = RemoteAddr {
                    addr: s.offset,
                    rkey: s.handle,
                };
                let fill = vec![input.u8(); len.min(SCRATCH_SLOT)];
                rogue.rdma(write.then_some(&fill[..]), remote, len);
            }
            12 => {
                net.advance(Duration::from_micros(u64::from(input.u8()) * 200));
            }
            13 => match input.u8() % 8 {
                0 => rogue.disconnect(),
                1 => req.close(),
                2 => {
                    if let Some(c) = rogue.conn {
                        net.drop_connection(c);
                    }
                }
                _ => {}
            },
            14 => {
                let _ = req.health_check();
            }
            _ => {
                fail_point(&mut input, net);
            }
        }
        for _ in 0..1 + input.u8() % 8 {
            round(&mut req, &mut rogue, &mut calls, &mut ledger, &mut report);
            polls += 1;
        }
    }

    // Tear down: our side closes; everything flushes; every call gets its outcome.
    req.close();
    let mut n = 0;
    while req.state() != ConnState::Closed || ledger.seen.contains(&0) || req.active() > 0 {
        n += 1;
        assert!(
            n < DRAIN_POLLS,
            "requester stuck draining: state {:?}, {} active, {} outcomes missing",
            req.state(),
            req.active(),
            ledger.seen.iter().filter(|&&x| x == 0).count()
        );
        round(&mut req, &mut rogue, &mut calls, &mut ledger, &mut report);
        if n.is_multiple_of(256) {
            net.advance(Duration::from_millis(1));
        }
    }
    report.to_requester = rogue.sends_ok;
    if let Some(r) = req.reconnect_stats() {
        report.reconnects = r.reconnects;
        report.retransmitted = r.retransmitted;
    }
    report.rogue_rdma_ok = rogue.rdma_ok;
    report.rogue_rdma_refused = rogue.rdma_refused;
    let seen_keys: Vec<u32> = calls
        .iter()
        .flat_map(|c| c.segments())
        .map(|s| s.handle)
        .collect();
    drop(req);
    drop(dev);
    assert!(pools.recv.is_full(), "requester receive pool leaked");
    assert!(pools.send.is_full(), "requester send pool leaked");
    assert!(pools.large.is_full(), "requester large pool leaked");
    assert!(
        app.as_ref().is_none_or(|p| p.is_full()),
        "requester application pool leaked"
    );
    assert_eq!(
        net.registrations_in_use(),
        rogue.mrs.len(),
        "a registration of the requester outlived it"
    );
    for k in seen_keys {
        assert!(
            !net.key_is_live(k) || rogue_key(&rogue, k),
            "key {k:#x} live"
        );
    }
    rogue.check_untouched();
    drop(rogue);
    assert_eq!(net.registrations_in_use(), 0);
    report
}

fn rogue_key(rogue: &Rogue, k: u32) -> bool {
    [rogue.local_key, rogue.rw_key, rogue.ro_key].contains(&k)
}

/// An XID of a call the rogue saw, or any.
fn pick_xid(input: &mut Input<'_>, calls: &VecDeque<SeenCall>) -> u32 {
    let i = usize::from(input.u8());
    match calls.get(i % calls.len().max(1)) {
        Some(c) if i & 0x80 == 0 => c.xid,
        _ => input.u32(),
    }
}

/// Arms a targeted failure (the nth execution of some operation fails), now and then;
/// true when it did.
fn fail_point(input: &mut Input<'_>, net: &SimNet) -> bool {
    const OPS: [WcOpcode; 6] = [
        WcOpcode::Send,
        WcOpcode::RdmaWrite,
        WcOpcode::RdmaRead,
        WcOpcode::FastReg,
        WcOpcode::LocalInvalidate,
        WcOpcode::Recv,
    ];
    const STATUSES: [WcStatus; 4] = [
        WcStatus::RemoteAccessError,
        WcStatus::LocalProtectionError,
        WcStatus::RetryExceeded,
        WcStatus::GeneralError,
    ];
    let b = input.u8();
    if b & 3 != 0 {
        return false;
    }
    net.fail_op(FailPoint {
        opcode: OPS[usize::from(input.u8()) % OPS.len()],
        nth: 1 + u64::from(input.u8() % 32),
        status: STATUSES[usize::from(input.u8()) % STATUSES.len()],
    });
    true
}

/// A call from the input: an RPC call header and payload (inline or long), perhaps
/// Write sinks, DDP arguments, a large reply (Reply chunk) and a short timeout.
fn call_request(input: &mut Input<'_>, req: &Requester<Sim>) -> Option<CallRequest> {
    let shape = input.u8();
    let extra = if shape & 8 == 8 {
        usize::from(input.u16() % 9000)
    } else {
        usize::from(input.u16() % 600)
    };
    let mut msg = if extra > 900 {
        req.alloc_large().ok()?
    } else {
        req.alloc_msg().ok()?
    };
    let mut v = Vec::with_capacity(40 + extra);
    for w in [
        0u32,
        0,
        2,
        0x2000_0099,
        1,
        u32::from(input.u8()),
        0,
        0,
        0,
        0,
    ] {
        v.extend_from_slice(&w.to_be_bytes());
    }
    v.resize(40 + extra, 0xa5);
    msg.fill(&v).ok()?;
    let max_reply = if shape & 16 == 16 {
        8192 + u32::from(input.u16() % 30_000)
    } else {
        512
    };
    let mut call = CallRequest::new(msg, max_reply);
    for _ in 0..shape & 3 {
        if let Ok(sink) = req.alloc_large() {
            if call.push_write_sink(sink).is_err() {
                break;
            }
        }
    }
    if shape & 4 == 4 {
        if let Ok(mut data) = req.alloc_large() {
            let n = 1 + usize::from(input.u16()) % 6000;
            if data.fill(&vec![0x5a; n]).is_ok() {
                let _ = call.push_ddp_arg(40, data);
            }
        }
    }
    if shape & 32 == 32 {
        call = call.with_timeout(Duration::from_micros(50 + u64::from(input.u16())));
    }
    Some(call.idempotent(shape & 64 == 64))
}

/// The rogue answers a call it saw, in a shape the input picks.
fn answer_call(input: &mut Input<'_>, rogue: &mut Rogue, calls: &mut VecDeque<SeenCall>) {
    // Mostly the oldest unanswered call, sometimes any (answering twice).
    let pick = input.u8();
    let idx = if pick & 0xc0 == 0xc0 {
        usize::from(pick) % calls.len().max(1)
    } else {
        match calls.iter().position(|c| !c.answered) {
            Some(i) => i,
            None => return,
        }
    };
    let Some(c) = calls.get_mut(idx) else {
        return;
    };
    c.answered = true;
    let xid = c.xid;
    let credit = credit(input);
    let stat = if input.u8() & 15 == 0 {
        u32::from(input.u8() % 6)
    } else {
        0
    };
    let mut body = rpc_reply(xid, stat);
    body.resize(24 + usize::from(input.u16() % 700), 0x77);
    let Some(lists) = c.lists().cloned() else {
        return;
    };
    // Send With Invalidate of one of the call's keys, or a key it never had.
    let invalidate = match input.u8() % 8 {
        0 => c.segments().first().map(|s| s.handle),
        1 => Some(input.u32()),
        _ => None,
    };
    let how = input.u8() % 4;
    // Write chunk results: bytes into the call's Write chunks (perhaps more than
    // offered), the lengths written echoed back.
    let mut written: Vec<Vec<Segment>> = Vec::new();
    if how != 0 {
        for chunk in &lists.writes {
            let mut out = Vec::new();
            let mut want = usize::from(input.u16() % 9000);
            for s in chunk {
                let s = if input.u8() & 15 == 0 {
                    perturb(input, *s)
                } else {
                    *s
                };
                let n = want.min(s.length as usize);
                if n > 0 {
                    let remote = RemoteAddr {
                        addr: s.offset,
                        rkey: s.handle,
                    };
                    rogue.rdma(Some(&vec![0x42; n.min(SCRATCH_SLOT)]), remote, n);
                }
                want -= n;
                out.push(Segment {
                    length: n as u32,
                    ..s
                });
            }
            written.push(out);
        }
    }
    let writes: Vec<&[Segment]> = written.iter().map(|w| &w[..]).collect();
    // The reply through the Reply chunk (RDMA_NOMSG), if offered and chosen.
    if how == 3 {
        if let Some(reply) = &lists.reply {
            let mut out = Vec::new();
            let mut left = body.len();
            let mut at = 0;
            for s in reply {
                let n = left.min(s.length as usize);
                if n > 0 {
                    let remote = RemoteAddr {
                        addr: s.offset,
                        rkey: s.handle,
                    };
                    rogue.rdma(Some(&body[at..at + n]), remote, n);
                }
                left -= n;
                at += n;
                out.push(Segment {
                    length: n as u32,
                    ..*s
                });
            }
            let repr = HeaderRepr {
                xid,
                credit,
                body: BodyRepr::Nomsg(ChunkListsRepr {
                    reads: &[],
                    writes: &writes,
                    reply: Some(&out),
                }),
            };
            rogue.send(&encode(&repr, &[]), invalidate);
            return;
        }
    }
    let repr = HeaderRepr {
        xid,
        credit,
        body: BodyRepr::Msg(ChunkListsRepr {
            reads: &[],
            writes: &writes,
            reply: None,
        }),
    };
    rogue.send(&encode(&repr, &body), invalidate);
}

/// Our responder's service: the procedure number (modulo 6) picks what it does.
#[derive(Debug, Default)]
struct Echo;

impl Service for Echo {
    fn handle_call(
        &mut self,
        call: &CallView<'_>,
        w: &mut ReplyWriter<'_>,
    ) -> Result<(), ServiceError> {
        let msg = call.msg();
        let word = |i: usize| {
            msg.get(4 * i..4 * i + 4)
                .map_or(0, |b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        };
        let over = |_| ServiceError::SystemErr;
        let header = |w: &mut ReplyWriter<'_>| {
            for v in [call.xid(), 1, 0, 0, 0, 0] {
                w.put_u32(v).map_err(over)?;
            }
            Ok::<(), ServiceError>(())
        };
        match word(5) % 6 {
            0 => header(w),
            1 => {
                // Echo the arguments and every DDP item inline.
                header(w)?;
                w.put(msg.get(40..).unwrap_or(&[])).map_err(over)?;
                for i in call.ddp_items() {
                    w.put(i.data).map_err(over)?;
                }
                Ok(())
            }
            2 => {
                // The first DDP item (or the arguments) back as a DDP result.
                header(w)?;
                let data = call
                    .ddp_items()
                    .first()
                    .map_or_else(|| msg.get(40..).unwrap_or(&[]), |i| i.data);
                w.put_u32(data.len() as u32).map_err(over)?;
                if w.next_write_chunk().is_some() && !data.is_empty() {
                    let mut b = w.alloc_buf().map_err(|_| ServiceError::SystemErr)?;
                    b.fill(data).map_err(|_| ServiceError::SystemErr)?;
                    if w.ddp_result(b).is_ok() {
                        return Ok(());
                    }
                }
                w.put(data).map_err(over)
            }
            3 => {
                // As many bytes as the first argument says: a Reply chunk's worth.
                header(w)?;
                w.put_zeros((word(10) % (1 << 17)) as usize).map_err(over)
            }
            4 => Err(ServiceError::GarbageArgs),
            _ => {
                w.no_reply();
                Ok(())
            }
        }
    }
}

/// A segment of the rogue's memory for a chunk: the read-write region mostly, else
/// the read-only one, a local-only or unregistered range, or a made-up key.
fn rogue_segment(input: &mut Input<'_>, rogue: &Rogue, len: u32) -> Segment {
    let off = u64::from(input.u16()) % (RW_LEN as u64 / 2);
    let (handle, offset) = match input.u8() % 16 {
        0 => (rogue.ro_key, rogue.addr(RO_OFF) + off % (RO_LEN as u64 / 2)),
        1 => (rogue.local_key, rogue.addr(SCRATCH_OFF)),
        2 => (rogue.rw_key, rogue.addr(GAP2_OFF) - u64::from(len / 2)),
        3 => (rogue.rw_key ^ 0x100, rogue.addr(RW_OFF) + off),
        4 => (input.u32(), input.u64()),
        5 => (rogue.rw_key, rogue.addr(RW_OFF) + RW_LEN as u64 - 8),
        _ => (rogue.rw_key, rogue.addr(RW_OFF) + off),
    };
    Segment {
        handle,
        length: len,
        offset,
    }
}

/// An RPC call for our responder, `args` bytes of arguments after the header.
fn rpc_call(xid: u32, proc_: u32, args: &[u8]) -> Vec<u8> {
    let mut v: Vec<u8> = [xid, 0, 2, 0x2000_0099, 1, proc_, 0, 0, 0, 0]
        .iter()
        .flat_map(|w| w.to_be_bytes())
        .collect();
    v.extend_from_slice(args);
    v
}

/// Rogue requester vs our responder.
fn rogue_requester(
    net: &SimNet,
    clean_fabric: bool,
    mut ops: Input<'_>,
    mut input: Input<'_>,
) -> Report {
    let mut report = Report {
        responder_runs: 1,
        ..Report::default()
    };
    let size = |b: u8| if b & 1 == 0 { 1024 } else { 4096 };
    let cfg = ConnConfig {
        inline_send: size(input.u8()),
        inline_recv: size(input.u8()),
        remote_invalidate: input.u8() & 1 == 1,
        credits: 1 + u32::from(input.u8() % 8),
        large_buf_size: 64 * 1024,
        large_bufs: 8,
        send_bufs: 32,
        hugepages: HugePages::Never,
        ..ConnConfig::default()
    };
    let addr = SimAddr(2);
    let sdev = net.open_device();
    let Ok(mut server) = Responder::bind(sdev, &addr, cfg, || Some(Echo)) else {
        return report;
    };
    server.set_limits(crate::conn::ResponderLimits {
        max_connections: 4,
        handshake_timeout: Duration::from_millis(20),
        idle_timeout: Some(Duration::from_millis(50)),
    });
    let Some(mut rogue) = Rogue::new(net) else {
        return report;
    };
    let pd = rogue_private_data(&mut input);
    let init = QpInit {
        pd: &rogue.pd,
        send_cq: &rogue.cq,
        recv_cq: &rogue.cq,
        srq: None,
        config: Rogue::qp_config(),
    };
    match rogue.cm.connect(&addr, init, &pd) {
        Ok(qp) => {
            rogue.conn = Some(qp.conn_id());
            rogue.qp = Some(qp);
            rogue.post_recvs();
        }
        Err(_) => return report,
    }
    let mut polls = 0u32;
    let mut pools: Option<CorePools> = None;
    let mut was_up = false;
    let mut xids: Vec<u32> = Vec::new();
    let mut next_xid = input.u32();
    let mut armed = false;

    let mut round = |server: &mut Responder<Sim, Echo, _>,
                     rogue: &mut Rogue,
                     pools: &mut Option<CorePools>,
                     report: &mut Report| {
        let now = server.clock().now();
        server.poll(now);
        rogue.poll(&None);
        if let Some(c) = server.connections().first() {
            if pools.is_none() {
                *pools = Some(c.resources().pools().clone());
            }
            if !was_up && c.state() == ConnState::Established {
                was_up = true;
                report.established += 1;
            }
        }
        for c in server.connections_mut() {
            let s = c.stats();
            assert_eq!(s.stray_completions, 0, "responder: stray completions");
            assert_eq!(s.outbox_overflows, 0, "responder: outbox overflow");
            report.responder_calls = report.responder_calls.max(s.calls);
            report.responder_errors = report.responder_errors.max(s.err_vers + s.err_chunk);
            while c.poll_event().is_some() {}
        }
        report.from_responder = rogue.received;
        rogue.inbox.clear();
    };

    let mut steps = 0;
    while !ops.is_empty() && steps < MAX_STEPS && polls < MAX_POLLS {
        steps += 1;
        match ops.u8() % 12 {
            0..=4 => {
                let xid = match input.u8() % 8 {
                    0 => xids.last().copied().unwrap_or(0),
                    1 => input.u32(),
                    _ => {
                        next_xid = next_xid.wrapping_add(1);
                        next_xid
                    }
                };
                xids.push(xid);
                if xids.len() > 64 {
                    xids.remove(0);
                }
                let m = rogue_call(&mut input, &rogue, xid);
                rogue.send(&m, None);
            }
            5 => {
                // A burst, past whatever credit was granted.
                for _ in 0..input.u8() % 24 {
                    next_xid = next_xid.wrapping_add(1);
                    let m = rogue_call(&mut input, &rogue, next_xid);
                    rogue.send(&m, None);
                }
            }
            6 => {
                // Too many chunks for the responder's limits.
                next_xid = next_xid.wrapping_add(1);
                let seg = rogue_segment(&mut input, &rogue, 64);
                let n = 9 + usize::from(input.u8() % 40);
                let reads: Vec<ReadSegment> = (0..n)
                    .map(|i| ReadSegment {
                        position: 40 + 4 * (i as u32 % 3),
                        segment: seg,
                    })
                    .collect();
                let one = [seg];
                let writes: Vec<&[Segment]> = (0..n).map(|_| &one[..]).collect();
                let lists = if input.u8() & 1 == 0 {
                    ChunkListsRepr {
                        reads: &reads,
                        writes: &[],
                        reply: None,
                    }
                } else {
                    ChunkListsRepr {
                        reads: &[],
                        writes: &writes,
                        reply: None,
                    }
                };
                let repr = HeaderRepr {
                    xid: next_xid,
                    credit: credit(&mut input),
                    body: BodyRepr::Msg(lists),
                };
                rogue.send(&encode(&repr, &rpc_call(next_xid, 1, &[0; 8])), None);
            }
            7 => {
                // Garbage, a truncated call, or a call of another version.
                let n = usize::from(input.u16() % 1100);
                let mut m = input.bytes(n).to_vec();
                match input.u8() % 3 {
                    0 => {
                        let full = rogue_call(&mut input, &rogue, next_xid);
                        m = full[..n.min(full.len())].to_vec();
                    }
                    1 => {
                        let mut full = rogue_call(&mut input, &rogue, next_xid);
                        if let Some(v) = full.get_mut(4..8) {
                            v.copy_from_slice(&input.u32().to_be_bytes());
                        }
                        m = full;
                    }
                    _ => {}
                }
                rogue.send(&m, None);
            }
            8 => {
                // RDMA_DONE or RDMA_ERROR from a requester.
                let xid = match xids.get(usize::from(input.u8()) % xids.len().max(1)) {
                    Some(x) if input.u8() & 1 == 0 => *x,
                    _ => input.u32(),
                };
                let body = if input.u8() & 1 == 0 {
                    BodyRepr::Done
                } else {
                    BodyRepr::Error(RdmaError::Chunk)
                };
                let repr = HeaderRepr {
                    xid,
                    credit: credit(&mut input),
                    body,
                };
                rogue.send(&encode(&repr, &[]), None);
            }
            9 => net.advance(Duration::from_micros(u64::from(input.u8()) * 200)),
            10 => match input.u8() % 8 {
                0 => rogue.disconnect(),
                1 => {
                    if let Some(c) = rogue.conn {
                        net.drop_connection(c);
                    }
                }
                _ => {}
            },
            _ => armed |= fail_point(&mut input, net),
        }
        for _ in 0..1 + input.u8() % 8 {
            round(&mut server, &mut rogue, &mut pools, &mut report);
            polls += 1;
        }
    }
    report.to_responder = rogue.sends_ok;
    // The rogue goes away; the responder must notice and free the connection.
    rogue.disconnect();
    let mut n = 0;
    while !server.connections().is_empty() {
        n += 1;
        assert!(
            n < DRAIN_POLLS,
            "responder kept the connection: {:?}",
            server
                .connections()
                .iter()
                .map(|c| (c.state(), c.active()))
                .collect::<Vec<_>>()
        );
        round(&mut server, &mut rogue, &mut pools, &mut report);
        if n.is_multiple_of(256) {
            net.advance(Duration::from_millis(1));
        }
    }
    if let Some(p) = &pools {
        assert!(p.recv.is_full(), "responder receive pool leaked");
        assert!(p.send.is_full(), "responder send pool leaked");
        assert!(p.large.is_full(), "responder large pool leaked");
    }
    // After all that, the responder still serves a well-behaved requester (when no
    // fault is left that could break that connection too).
    if clean_fabric && !armed {
        good_call(net, &addr, &mut server);
        report.good_calls += 1;
    }
    drop(server);
    assert_eq!(
        net.registrations_in_use(),
        rogue.mrs.len(),
        "a registration of the responder outlived it"
    );
    rogue.check_untouched();
    drop(rogue);
    assert_eq!(net.registrations_in_use(), 0);
    report
}

/// Connects a real requester to `server` at `addr`, makes one call that must succeed,
/// closes, and waits until the server has let the connection go.
fn good_call<F: FnMut() -> Option<Echo>>(
    net: &SimNet,
    addr: &SimAddr,
    server: &mut Responder<Sim, Echo, F>,
) {
    let cfg = ConnConfig {
        credits: 2,
        large_buf_size: 64 * 1024,
        large_bufs: 2,
        send_bufs: 8,
        seed: Some(1),
        hugepages: HugePages::Never,
        ..ConnConfig::default()
    };
    let dev = net.open_device();
    let mut req = Requester::<Sim>::connect_with(&dev, addr, &cfg).expect("connect");
    let step = |req: &mut Requester<Sim>, server: &mut Responder<Sim, Echo, F>| {
        let now = req.clock().now();
        req.poll(now);
        server.poll(now);
    };
    let mut n = 0;
    while req.state() == ConnState::Connecting && n < DRAIN_POLLS {
        step(&mut req, server);
        n += 1;
    }
    assert_eq!(req.state(), ConnState::Established, "the responder accepts");
    let mut msg = req.alloc_msg().expect("a send buffer");
    msg.fill(&rpc_call(0, 0, &[])).expect("fits");
    req.submit(CallRequest::new(msg, 512), 0)
        .expect("submitted");
    let outcome = loop {
        if let Some(o) = req.poll_outcome() {
            break o;
        }
        n += 1;
        assert!(n < 2 * DRAIN_POLLS, "the responder answers");
        step(&mut req, server);
    };
    assert_eq!(outcome.status, CallStatus::Success, "the responder answers");
    drop(outcome);
    req.close();
    while req.state() != ConnState::Closed || !server.connections().is_empty() {
        n += 1;
        assert!(n < 3 * DRAIN_POLLS, "both ends close");
        step(&mut req, server);
    }
}

/// A call from the rogue requester: inline (RDMA_MSG) or long (RDMA_NOMSG, the call in
/// a Position-Zero Read chunk), with Read, Write and Reply chunks into its memory.
fn rogue_call(input: &mut Input<'_>, rogue: &Rogue, xid: u32) -> Vec<u8> {
    let shape = input.u8();
    let proc_ = u32::from(input.u8() % 6);
    let nargs = usize::from(input.u16() % 1200);
    let mut args = (input.u32() % (1 << 17)).to_be_bytes().to_vec();
    args.resize(nargs.max(4), 0x61);
    let call = rpc_call(xid, proc_, &args);
    let mut reads = Vec::new();
    if shape & 1 == 1 {
        // A DDP argument at the end of the inline part (now and then somewhere else).
        let len = 1 + u32::from(input.u16() % 20_000);
        let skew = if input.u8() & 7 == 0 { input.u32() } else { 0 };
        reads.push(ReadSegment {
            position: (call.len() as u32).next_multiple_of(4) ^ skew,
            segment: rogue_segment(input, rogue, len),
        });
    }
    let writes: Vec<Vec<Segment>> = (0..(shape >> 1) & 3)
        .map(|_| {
            (0..1 + input.u8() % 2)
                .map(|_| {
                    let len = u32::from(input.u16() % 20_000);
                    rogue_segment(input, rogue, len)
                })
                .collect()
        })
        .collect();
    let writes: Vec<&[Segment]> = writes.iter().map(|w| &w[..]).collect();
    let reply = (shape & 8 == 8).then(|| {
        let len = u32::from(input.u16());
        [rogue_segment(input, rogue, len)]
    });
    let credit = credit(input);
    if shape & 16 == 16 {
        // Long call: the message sits in the rogue's memory for the responder to read.
        let off = (usize::from(input.u16()) % (RW_LEN / 2)) & !3;
        rogue.put(RW_OFF + off, &call);
        let mut pz = ReadSegment {
            position: 0,
            segment: Segment {
                handle: rogue.rw_key,
                length: call.len() as u32,
                offset: rogue.addr(RW_OFF + off),
            },
        };
        if input.u8() & 7 == 0 {
            pz.segment = perturb(input, pz.segment);
        }
        let mut all = vec![pz];
        all.extend(reads);
        let repr = HeaderRepr {
            xid,
            credit,
            body: BodyRepr::Nomsg(ChunkListsRepr {
                reads: &all,
                writes: &writes,
                reply: reply.as_ref().map(|r| &r[..]),
            }),
        };
        return encode(&repr, &[]);
    }
    let repr = HeaderRepr {
        xid,
        credit,
        body: BodyRepr::Msg(ChunkListsRepr {
            reads: &reads,
            writes: &writes,
            reply: reply.as_ref().map(|r| &r[..]),
        }),
    };
    encode(&repr, &call)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A splitmix64 stream of input bytes for `seed`, `len` long.
    fn bytes(seed: u64, len: usize) -> Vec<u8> {
        let mut s = seed;
        (0..len)
            .map(|_| {
                s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = s;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                (z ^ (z >> 31)) as u8
            })
            .collect()
    }

    /// An input for scenario `which` whose steps come mostly from `picks` (the step
    /// kinds that make traffic), so replies happen and the states after them are
    /// reached.
    fn shaped(seed: u64, which: u8, picks: &[u8], steps: u16) -> Vec<u8> {
        let mut v = vec![which];
        v.extend(bytes(seed, 8));
        v.push(if seed.is_multiple_of(4) { 0xff } else { 0 });
        v.extend(bytes(seed ^ 5, 5));
        v.extend_from_slice(&steps.to_le_bytes());
        v.extend(
            bytes(seed ^ 0xdead_beef, usize::from(steps))
                .iter()
                .map(|b| picks[usize::from(*b) % picks.len()]),
        );
        v.extend(bytes(seed.wrapping_mul(3), 6000));
        v
    }

    #[test]
    fn seeded_inputs_reach_every_path_and_keep_every_promise() {
        let mut total = Report::default();
        for seed in 0..120u64 {
            // Unshaped bytes, then traffic for each side.
            total.add(&run(&bytes(seed, 64 + (seed as usize % 9) * 150)));
            let req = [0, 1, 2, 3, 4, 5, 3, 4, 0, 11, 6, 7, 8, 9, 10, 12, 14];
            total.add(&run(&shaped(seed, 0, &req, 200)));
            // Mostly calls and answers, so connections live long and calls complete.
            let calm = [0, 3, 0, 4, 1, 5, 2, 3, 12];
            total.add(&run(&shaped(seed, 0, &calm, 200)));
            let resp = [0, 1, 2, 3, 4, 0, 1, 5, 6, 7, 8, 9, 11];
            total.add(&run(&shaped(seed, 1, &resp, 200)));
            // No fail points: then a good requester is served after the rogue leaves.
            let calm = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9];
            total.add(&run(&shaped(seed, 1, &calm, 120)));
        }
        eprintln!("{total:#?}");
        assert!(total.requester_runs > 100 && total.responder_runs > 100);
        assert!(total.established > 150, "{total:?}");
        assert!(total.accepted > 500, "{total:?}");
        assert!(total.calls_seen > 300, "{total:?}");
        assert!(total.replies > 100, "replies delivered: {total:?}");
        assert!(total.rdma_errors > 0, "RDMA_ERROR delivered: {total:?}");
        assert!(total.timeouts > 0, "{total:?}");
        assert!(total.to_requester > 500, "{total:?}");
        assert!(total.to_responder > 500, "{total:?}");
        assert!(
            total.rogue_rdma_ok > 0 && total.rogue_rdma_refused > 0,
            "{total:?}"
        );
        assert!(total.responder_calls > 200, "{total:?}");
        assert!(total.responder_errors > 20, "errors answered: {total:?}");
        assert!(total.from_responder > 200, "{total:?}");
        assert!(total.keys_dead_at_outcome > 20, "{total:?}");
        assert!(total.reconnects > 0 && total.retransmitted > 0, "{total:?}");
        assert!(total.good_calls > 50, "{total:?}");
    }

    #[test]
    fn empty_and_tiny_inputs_are_fine() {
        run(&[]);
        run(&[1]);
        run(&[0; 64]);
        run(&[1; 64]);
        run(&[0xff; 64]);
    }

    #[test]
    fn a_run_is_reproducible() {
        let data = shaped(7, 0, &[0, 3, 0, 3, 11, 12], 100);
        assert_eq!(run(&data), run(&data));
        let data = shaped(7, 1, &[0, 1, 5, 6, 9], 100);
        assert_eq!(run(&data), run(&data));
    }
}
