//! What the simulation observed: counters, a fixed-capacity ring of recent events for
//! failure reports, and a hash over every event ever recorded, so two runs can be
//! compared for identity without keeping their whole histories.

use core::fmt;

use crate::fabric::{WcOpcode, WcStatus};

/// Counters of one simulated network.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SimStats {
    /// Virtual nanoseconds since the network was created.
    pub now_ns: u64,
    /// Data requests (Send, Write, Read) executed, successfully or not.
    pub ops_executed: u64,
    /// Data requests that moved their bytes.
    pub ops_delivered: u64,
    /// Payload bytes moved by delivered requests.
    pub bytes_moved: u64,
    /// Fast registrations and local invalidations executed.
    pub local_ops: u64,
    /// Receiver-not-ready answers to Sends (each retry counts).
    pub rnr_naks: u64,
    /// Completions generated (successful or not, flushed included).
    pub completions: u64,
    /// Completions with a status other than success or flush.
    pub error_completions: u64,
    /// Flushed completions.
    pub flushed: u64,
    /// Faults injected (random and targeted).
    pub faults_injected: u64,
    /// Connections killed by faults.
    pub connections_dropped: u64,
    /// Connection-manager events queued for delivery.
    pub cm_events: u64,
    /// Calls from threads other than the one that created the network. A run is
    /// reproducible from its seed only while this is 0.
    pub foreign_thread_calls: u64,
}

/// What happened, in a [`TraceEvent`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceKind {
    /// A send-queue request was posted (`id` is its `wr_id`).
    PostSend(WcOpcode),
    /// A receive was posted (`id` is its `wr_id`).
    PostRecv,
    /// A send-queue request executed (`id` is its `wr_id`, `len` its length).
    Exec(WcOpcode, WcStatus),
    /// A Send found no usable receive at the peer (`id` is its `wr_id`).
    RnrNak,
    /// A completion was generated (`id` is its `wr_id`).
    Complete(WcOpcode, WcStatus),
    /// The queue pair entered the error state.
    QpError,
    /// A connection-manager event was queued (`id` is the connection).
    Cm(CmTrace),
    /// A fault was injected (`id` is the connection or `wr_id` concerned).
    Fault(FaultTrace),
}

/// Connection-manager steps in the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmTrace {
    /// A connect request reached a listener.
    ConnectRequest,
    /// A connection was reported established on one side.
    Established,
    /// A connect request was rejected.
    Rejected,
    /// No listener at the address.
    Unreachable,
    /// A side was reported disconnected.
    Disconnected,
}

/// Injected faults in the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultTrace {
    /// A connection was killed.
    DropConnection,
    /// A spurious receiver-not-ready answer.
    Rnr,
    /// A completion queue stalled.
    CqStall,
    /// A [`FailPoint`](super::FailPoint) fired.
    FailPoint,
}

/// One recorded event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceEvent {
    /// Sequence number over the network's life (survives ring wrap-around).
    pub seq: u64,
    /// Virtual time in nanoseconds.
    pub at_ns: u64,
    /// What happened.
    pub kind: TraceKind,
    /// Queue-pair number concerned (0 for none).
    pub qp: u32,
    /// Work-request id or connection id, per [`TraceKind`].
    pub id: u64,
    /// Bytes concerned.
    pub len: u64,
}

impl TraceKind {
    /// A stable numeric form for hashing.
    fn code(self) -> [u8; 3] {
        match self {
            TraceKind::PostSend(o) => [1, o as u8, 0],
            TraceKind::PostRecv => [2, 0, 0],
            TraceKind::Exec(o, s) => [3, o as u8, s as u8],
            TraceKind::RnrNak => [4, 0, 0],
            TraceKind::Complete(o, s) => [5, o as u8, s as u8],
            TraceKind::QpError => [6, 0, 0],
            TraceKind::Cm(c) => [7, c as u8, 0],
            TraceKind::Fault(f) => [8, f as u8, 0],
        }
    }
}

impl fmt::Display for TraceEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{:<6} t={:>9}.{:03}us qp={:<3} ",
            self.seq,
            self.at_ns / 1000,
            self.at_ns % 1000,
            self.qp
        )?;
        match self.kind {
            TraceKind::PostSend(o) => write!(f, "post {o:?} wr={:#x} len={}", self.id, self.len),
            TraceKind::PostRecv => write!(f, "post Recv wr={:#x} len={}", self.id, self.len),
            TraceKind::Exec(o, s) => {
                write!(f, "exec {o:?} wr={:#x} len={} -> {s:?}", self.id, self.len)
            }
            TraceKind::RnrNak => write!(f, "RNR NAK wr={:#x}", self.id),
            TraceKind::Complete(o, s) => {
                write!(f, "cqe {o:?} wr={:#x} len={} {s:?}", self.id, self.len)
            }
            TraceKind::QpError => write!(f, "qp -> error"),
            TraceKind::Cm(c) => write!(f, "cm {c:?} conn#{}", self.id),
            TraceKind::Fault(x) => write!(f, "FAULT {x:?} id={:#x}", self.id),
        }
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

/// The ring plus the running hash.
#[derive(Debug)]
pub(super) struct Trace {
    ring: Vec<TraceEvent>,
    capacity: usize,
    next_seq: u64,
    hash: u64,
}

impl Trace {
    pub(super) fn new(capacity: usize) -> Self {
        Trace {
            ring: Vec::with_capacity(capacity),
            capacity,
            next_seq: 0,
            hash: FNV_OFFSET,
        }
    }

    pub(super) fn record(&mut self, at_ns: u64, kind: TraceKind, qp: u32, id: u64, len: u64) {
        let ev = TraceEvent {
            seq: self.next_seq,
            at_ns,
            kind,
            qp,
            id,
            len,
        };
        self.next_seq += 1;
        let mut h = self.hash;
        let mut eat = |bytes: &[u8]| {
            for b in bytes {
                h ^= u64::from(*b);
                h = h.wrapping_mul(FNV_PRIME);
            }
        };
        eat(&at_ns.to_le_bytes());
        eat(&kind.code());
        eat(&qp.to_le_bytes());
        eat(&id.to_le_bytes());
        eat(&len.to_le_bytes());
        self.hash = h;
        if self.capacity == 0 {
            return;
        }
        if self.ring.len() < self.capacity {
            self.ring.push(ev);
        } else {
            // The ring is full: overwrite the oldest slot, found from the sequence number.
            let slot = (ev.seq % self.capacity as u64) as usize;
            self.ring[slot] = ev;
        }
    }

    pub(super) fn hash(&self) -> u64 {
        self.hash
    }

    pub(super) fn events_recorded(&self) -> u64 {
        self.next_seq
    }

    /// The retained events, oldest first.
    pub(super) fn snapshot(&self) -> Vec<TraceEvent> {
        let mut v = self.ring.clone();
        v.sort_by_key(|e| e.seq);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_newest_events_and_hash_covers_all() {
        let mut t = Trace::new(3);
        let mut u = Trace::new(0);
        for i in 0..5u64 {
            t.record(i, TraceKind::PostRecv, 1, i, 0);
            u.record(i, TraceKind::PostRecv, 1, i, 0);
        }
        let ids: Vec<u64> = t.snapshot().iter().map(|e| e.id).collect();
        assert_eq!(ids, vec![2, 3, 4]);
        assert!(u.snapshot().is_empty());
        assert_eq!(t.hash(), u.hash());
        assert_eq!(t.events_recorded(), 5);
        u.record(9, TraceKind::RnrNak, 1, 0, 0);
        assert_ne!(t.hash(), u.hash());
    }
}
