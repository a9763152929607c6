//! The world: every object of one simulated network, the virtual clock, and the
//! scheduler that executes whatever is due.
//!
//! # Threads and determinism
//!
//! The provider traits require handles to be `Send` (and devices and protection
//! domains `Sync`), and the shared conformance suite drives the two sides of a
//! connection from two threads, so the state sits behind a mutex. A deterministic run
//! is a single-threaded one: the mutex is then never contended, and
//! [`SimStats::foreign_thread_calls`] (calls from threads other than the creator's)
//! stays 0, which randomized tests can assert.
//!
//! # Who makes progress
//!
//! As on shm, a device makes progress only while it is polled: a request executes in
//! the completion-queue polls of its *target* device (so a host's memory changes only
//! inside its own CQ polls), a completion is generated in the CQ polls of its owner, and
//! a connection message is delivered in the connection-manager polls of its
//! destination. [`SimNet::advance`] and [`SimNet::run_until_idle`] run everything.
//!
//! [`SimNet::advance`]: super::SimNet::advance
//! [`SimNet::run_until_idle`]: super::SimNet::run_until_idle

use core::time::Duration;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::config::{FailPoint, SimConfig};
use super::memory::MrTable;
use super::rng::SimRng;
use super::slab::{Idx, Slab};
use super::state::{CmMsg, CmSlot, ConnSide, CqSlot, QpSlot, ScheduledDrop};
use super::trace::{SimStats, Trace, TraceKind};
use super::SimAddr;
use crate::fabric::{FabricError, PostError, PostErrorKind};

/// Why the world refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Misuse {
    /// Called while the world was already in use further up the same thread's stack.
    Reentered,
}

const REENTERED: &str = "sim: re-entrant call into the simulated network";

impl Misuse {
    pub(super) fn fabric(self) -> FabricError {
        FabricError::Protocol(self.message())
    }

    pub(super) fn post(self, posted: usize) -> PostError {
        PostError {
            posted,
            kind: PostErrorKind::Malformed(self.message()),
        }
    }

    fn message(self) -> &'static str {
        match self {
            Misuse::Reentered => REENTERED,
        }
    }
}

static NEXT_THREAD_TOKEN: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD_TOKEN: Cell<u64> = const { Cell::new(0) };
}

/// A small number naming the calling thread (never 0).
fn thread_token() -> u64 {
    THREAD_TOKEN
        .try_with(|t| {
            if t.get() == 0 {
                t.set(NEXT_THREAD_TOKEN.fetch_add(1, Ordering::Relaxed));
            }
            t.get()
        })
        // During thread teardown: a token no live thread holds.
        .unwrap_or(u64::MAX)
}

pub(super) struct World {
    owner: u64,
    seed: u64,
    /// The instant virtual time zero maps to for drivers ([`crate::fabric::Clock`]).
    pub(super) base: std::time::Instant,
    /// Thread currently inside `with`, to refuse re-entry instead of deadlocking.
    holder: AtomicU64,
    foreign: AtomicU64,
    state: Mutex<WorldState>,
}

/// Clears the holder even if the closure panics.
struct Holding<'a>(&'a AtomicU64);

impl Drop for Holding<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Relaxed);
    }
}

impl World {
    pub(super) fn new(cfg: SimConfig) -> Arc<World> {
        Arc::new(World {
            owner: thread_token(),
            seed: cfg.seed,
            base: std::time::Instant::now(),
            holder: AtomicU64::new(0),
            foreign: AtomicU64::new(0),
            state: Mutex::new(WorldState::new(cfg)),
        })
    }

    pub(super) fn seed(&self) -> u64 {
        self.seed
    }

    pub(super) fn foreign_thread_calls(&self) -> u64 {
        self.foreign.load(Ordering::Relaxed)
    }

    /// Runs `f` on the state.
    pub(super) fn with<R>(&self, f: impl FnOnce(&mut WorldState) -> R) -> Result<R, Misuse> {
        let me = thread_token();
        if self.holder.load(Ordering::Relaxed) == me {
            return Err(Misuse::Reentered);
        }
        if me != self.owner {
            self.foreign.fetch_add(1, Ordering::Relaxed);
        }
        // A panic inside the world (a bug) leaves it usable for the failure report.
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        self.holder.store(me, Ordering::Relaxed);
        let _holding = Holding(&self.holder);
        s.stats.foreign_thread_calls = self.foreign_thread_calls();
        Ok(f(&mut s))
    }
}

pub(super) fn dur_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Which due work a call may run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope {
    /// Everything (the test moving time).
    All,
    /// Requests targeting, and completions owned by, this device (a CQ poll).
    Cq(u32),
    /// Connection messages to this device (a connection-manager poll).
    Cm(u32),
}

/// What kind of work an item is, for [`Scope`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lane {
    Data(u32),
    Cm(Option<u32>),
    Global,
}

impl Scope {
    fn admits(self, lane: Lane) -> bool {
        match (self, lane) {
            (Scope::All, _) | (_, Lane::Global) => true,
            (Scope::Cq(d), Lane::Data(e)) => d == e,
            // A message whose destination manager is gone is delivered by anyone.
            (Scope::Cm(d), Lane::Cm(e)) => e.is_none_or(|e| e == d),
            _ => false,
        }
    }
}

/// What the scheduler found due.
#[derive(Debug, Clone, Copy)]
enum Due {
    Exec(Idx),
    Complete(Idx),
    Cm(usize),
    Drop(usize),
}

pub(super) struct WorldState {
    pub(super) cfg: SimConfig,
    pub(super) now: u64,
    tick_ns: u64,
    min_latency_ns: u64,
    max_latency_ns: u64,
    max_ack_ns: u64,
    pub(super) max_recv_delay_ns: u64,
    pub(super) max_cq_stall_ns: u64,
    /// Delays and tie-breaks.
    pub(super) rng: SimRng,
    /// Random faults only, so enabling them does not move the delays.
    pub(super) fault_rng: SimRng,
    next_qp_num: u32,
    next_conn: u64,
    next_device: u32,
    next_pd: u32,
    pub(super) mrs: MrTable,
    pub(super) cqs: Slab<CqSlot>,
    pub(super) qps: Slab<QpSlot>,
    pub(super) srqs: Slab<super::srq::SrqSlot>,
    pub(super) cms: Slab<CmSlot>,
    pub(super) conns: BTreeMap<u64, ConnSide>,
    pub(super) listeners: Vec<(SimAddr, Idx)>,
    pub(super) cm_msgs: Vec<CmMsg>,
    pub(super) drops: Vec<ScheduledDrop>,
    pub(super) fail_points: Vec<FailPoint>,
    /// Executions per completion opcode, for fail points.
    pub(super) op_counts: [u64; 6],
    pub(super) stats: SimStats,
    pub(super) trace: Trace,
}

impl WorldState {
    fn new(cfg: SimConfig) -> Self {
        WorldState {
            now: 0,
            tick_ns: dur_ns(cfg.tick).max(1),
            min_latency_ns: dur_ns(cfg.min_latency),
            max_latency_ns: dur_ns(cfg.max_latency),
            max_ack_ns: dur_ns(cfg.max_ack_latency),
            max_recv_delay_ns: dur_ns(cfg.faults.max_recv_delay),
            max_cq_stall_ns: dur_ns(cfg.faults.max_cq_stall),
            rng: SimRng::stream(cfg.seed, 1),
            fault_rng: SimRng::stream(cfg.seed, 2),
            next_qp_num: 1,
            next_conn: 1,
            next_device: 1,
            next_pd: 1,
            // Keys from the network's seed: the same seed gives the same keys.
            mrs: MrTable::new(cfg.caps.max_mr as usize, Some(cfg.seed)),
            cqs: Slab::new(),
            qps: Slab::new(),
            srqs: Slab::new(),
            cms: Slab::new(),
            conns: BTreeMap::new(),
            listeners: Vec::new(),
            cm_msgs: Vec::new(),
            drops: Vec::new(),
            fail_points: Vec::new(),
            op_counts: [0; 6],
            stats: SimStats::default(),
            trace: Trace::new(cfg.trace_capacity),
            cfg,
        }
    }

    pub(super) fn new_device_id(&mut self) -> u32 {
        let d = self.next_device;
        self.next_device += 1;
        d
    }

    pub(super) fn new_pd_id(&mut self) -> u32 {
        let p = self.next_pd;
        self.next_pd += 1;
        p
    }

    pub(super) fn new_qp_num(&mut self) -> u32 {
        let n = self.next_qp_num;
        self.next_qp_num += 1;
        n
    }

    pub(super) fn new_conn_id(&mut self) -> crate::fabric::ConnId {
        let c = self.next_conn;
        self.next_conn += 1;
        crate::fabric::ConnId(c)
    }

    /// A one-way delay for a request or a connection message.
    pub(super) fn latency(&mut self) -> u64 {
        self.rng
            .range_inclusive(self.min_latency_ns, self.max_latency_ns)
    }

    /// Extra delay before an initiator sees a completion.
    pub(super) fn ack_delay(&mut self) -> u64 {
        self.rng.range_inclusive(0, self.max_ack_ns)
    }

    pub(super) fn record(&mut self, kind: TraceKind, qp: u32, id: u64, len: u64) {
        self.trace.record(self.now, kind, qp, id, len);
    }

    /// One poll's worth of virtual time, then what became due within `scope`.
    pub(super) fn tick(&mut self, scope: Scope) {
        self.now = self.now.saturating_add(self.tick_ns);
        self.stats.now_ns = self.now;
        self.run_due(scope);
    }

    /// Moves the clock forward by `ns` and runs everything that became due.
    pub(super) fn advance(&mut self, ns: u64) {
        self.now = self.now.saturating_add(ns);
        self.stats.now_ns = self.now;
        self.run_due(Scope::All);
    }

    /// Jumps from event to event until nothing is pending or `limit_ns` of virtual time
    /// passed; true when idle.
    pub(super) fn run_until_idle(&mut self, limit_ns: u64) -> bool {
        let deadline = self.now.saturating_add(limit_ns);
        loop {
            self.run_due(Scope::All);
            let Some(t) = self.next_pending_time() else {
                return true;
            };
            if t > deadline {
                self.now = deadline;
                self.stats.now_ns = self.now;
                return false;
            }
            self.now = self.now.max(t);
            self.stats.now_ns = self.now;
        }
    }

    /// Executes everything due now within `scope`, earliest first; ties between queue
    /// pairs are broken by the random tie-break drawn at post time.
    pub(super) fn run_due(&mut self, scope: Scope) {
        while let Some((_, _, due)) = self.earliest(self.now, scope) {
            match due {
                Due::Exec(q) => self.exec_next(q),
                Due::Complete(q) => self.complete_head(q),
                Due::Cm(i) => {
                    let m = self.cm_msgs.swap_remove(i);
                    self.deliver_cm(m);
                }
                Due::Drop(i) => {
                    let d = self.drops.swap_remove(i);
                    self.kill_connection(d.conn);
                }
            }
        }
    }

    fn next_pending_time(&self) -> Option<u64> {
        let ev = self.earliest(u64::MAX, Scope::All).map(|(t, _, _)| t);
        let stall = self
            .cqs
            .iter()
            .filter(|(_, c)| c.stalled_until > self.now && !c.entries.is_empty())
            .map(|(_, c)| c.stalled_until)
            .min();
        match (ev, stall) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The device whose polls execute the next request of `qp`: the target's for data
    /// requests (the "NIC" lives at the target), the owner's otherwise.
    fn executor(&self, qp: &QpSlot, op: crate::fabric::SendOp) -> u32 {
        use crate::fabric::SendOp;
        match op {
            SendOp::FastReg { .. } | SendOp::LocalInvalidate { .. } => qp.device,
            _ => qp
                .peer
                .and_then(|p| self.qps.get(p))
                .map_or(qp.device, |p| p.device),
        }
    }

    fn earliest(&self, limit: u64, scope: Scope) -> Option<(u64, u64, Due)> {
        let mut best: Option<(u64, u64, Due)> = None;
        let mut consider = |t: u64, tb: u64, lane: Lane, d: Due| {
            if scope.admits(lane)
                && t <= limit
                && best.is_none_or(|(bt, btb, _)| (t, tb) < (bt, btb))
            {
                best = Some((t, tb, d));
            }
        };
        for slot in 0..self.qps.slots() {
            let Some((idx, qp)) = self.qps.at_slot(slot) else {
                continue;
            };
            if let Some(head) = qp.sq.front() {
                if let Some(done) = head.done {
                    consider(
                        done.at,
                        head.tiebreak,
                        Lane::Data(qp.device),
                        Due::Complete(idx),
                    );
                }
            }
            if let Some(e) = qp.sq.get(qp.next_exec) {
                let on = self.executor(qp, e.op);
                consider(e.exec_at, e.tiebreak, Lane::Data(on), Due::Exec(idx));
            }
        }
        for (i, m) in self.cm_msgs.iter().enumerate() {
            consider(m.at, m.tiebreak, Lane::Cm(m.device), Due::Cm(i));
        }
        for (i, d) in self.drops.iter().enumerate() {
            consider(d.at, d.tiebreak, Lane::Global, Due::Drop(i));
        }
        best
    }
}
