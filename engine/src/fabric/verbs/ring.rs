//! Outstanding work requests of one queue (send or receive) of one queue pair.
//!
//! Verbs numbers nothing for us and leaves a completion's opcode undefined when it
//! failed, so every posted request gets a sequence number (its verbs `wr_id`) and an
//! entry here holding the caller's `wr_id`, the operation, the length and whether it was
//! signaled. The queue pair is the only producer, the completion queue its queue reports
//! to the only consumer. The ring is as deep as the queue pair was created, so "full"
//! here is the fabric's `QueueFull` whatever depth the device rounded its queue up to.
//!
//! Send-queue completions are handed out in posting order even when the device reports
//! them out of order (siw completes a Send when it leaves, before the response to an
//! earlier RDMA Read arrives): a completion is recorded in its slot and released once
//! everything before it is. Unsignaled requests report nothing on success and release
//! their slots when a later request completes, as on a NIC.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use crate::fabric::{WcOpcode, WcStatus};

use super::status::{code_status, status_code};

/// Tag bit of receive sequence numbers, so one CQ can tell the two queues apart even on
/// failed completions.
pub(super) const RECV_TAG: u64 = 1 << 63;
/// The `wr_id` of a wake-up Write (`QpShared::post_wake_write`): both tag bits set, which
/// no receive, shared receive or send sequence number carries, so the completion queue
/// tells it apart inside its rare shared-receive branch and drops it.
pub(super) const WAKE_WR_ID: u64 = u64::MAX;

/// What the completion of one request reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The caller's identifier.
    pub wr_id: u64,
    /// The operation.
    pub opcode: WcOpcode,
    /// Total bytes of the request.
    pub len: u32,
    /// Whether success is reported.
    pub signaled: bool,
}

struct Slot {
    wr_id: AtomicU64,
    /// Opcode in bits 0..8, signaled in bit 8, length in bits 32..64.
    meta: AtomicU64,
    /// 0 while outstanding; 1 + status code once the device reported it.
    done: AtomicU8,
}

/// A single-producer, single-consumer record of posted requests.
pub(crate) struct WrRing {
    slots: Box<[Slot]>,
    /// Next sequence number to hand out; written by the producer only.
    head: AtomicU64,
    /// First sequence number not released; written by the consumer only.
    tail: AtomicU64,
    /// One past the highest sequence number the device reported; consumer only.
    reported: AtomicU64,
    /// The first sequence number: `tail` past it means a request completed.
    base: u64,
}

fn opcode_code(op: WcOpcode) -> u64 {
    match op {
        WcOpcode::Send => 0,
        WcOpcode::RdmaWrite => 1,
        WcOpcode::RdmaRead => 2,
        WcOpcode::FastReg => 3,
        WcOpcode::LocalInvalidate => 4,
        WcOpcode::Recv => 5,
    }
}

fn code_opcode(code: u64) -> WcOpcode {
    match code {
        0 => WcOpcode::Send,
        1 => WcOpcode::RdmaWrite,
        2 => WcOpcode::RdmaRead,
        3 => WcOpcode::FastReg,
        4 => WcOpcode::LocalInvalidate,
        _ => WcOpcode::Recv,
    }
}

impl WrRing {
    /// A ring for `depth` outstanding requests (at least one) whose sequence numbers
    /// start at `base`.
    pub(crate) fn new(depth: u32, base: u64) -> WrRing {
        let depth = depth.max(1) as usize;
        WrRing {
            slots: (0..depth)
                .map(|_| Slot {
                    wr_id: AtomicU64::new(0),
                    meta: AtomicU64::new(0),
                    done: AtomicU8::new(0),
                })
                .collect(),
            head: AtomicU64::new(base),
            tail: AtomicU64::new(base),
            reported: AtomicU64::new(base),
            base,
        }
    }

    /// Any thread: whether a request of this ring was ever released by its completion
    /// (for a receive queue: a message arrived).
    pub(crate) fn released_any(&self) -> bool {
        self.tail.load(Ordering::Acquire) != self.base
    }

    /// Any thread: whether a request was ever posted on this ring.
    pub(crate) fn posted_any(&self) -> bool {
        self.head.load(Ordering::Acquire) != self.base
    }

    fn slot(&self, seq: u64) -> &Slot {
        &self.slots[(seq % self.slots.len() as u64) as usize]
    }

    /// The depth.
    pub(crate) fn depth(&self) -> u32 {
        // Built from a u32.
        self.slots.len() as u32
    }

    /// Producer: the next sequence number (nothing is reserved until [`WrRing::publish`]).
    pub(crate) fn head(&self) -> u64 {
        self.head.load(Ordering::Relaxed)
    }

    /// Producer: how many more requests fit.
    pub(crate) fn room(&self) -> u64 {
        let used = self.head() - self.tail.load(Ordering::Acquire);
        self.slots.len() as u64 - used
    }

    /// Producer: records request `seq` (which must be below `head() + room()`).
    pub(crate) fn write(&self, seq: u64, e: Entry) {
        let s = self.slot(seq);
        s.wr_id.store(e.wr_id, Ordering::Relaxed);
        s.meta.store(
            opcode_code(e.opcode) | u64::from(e.signaled) << 8 | u64::from(e.len) << 32,
            Ordering::Relaxed,
        );
    }

    /// Producer: makes every entry below `head` visible to the consumer. Called before
    /// the requests are handed to the device, so their completions find them.
    pub(crate) fn publish(&self, head: u64) {
        self.head.store(head, Ordering::Release);
    }

    fn entry(&self, seq: u64) -> Entry {
        let s = self.slot(seq);
        let meta = s.meta.load(Ordering::Relaxed);
        Entry {
            wr_id: s.wr_id.load(Ordering::Relaxed),
            opcode: code_opcode(meta & 0xff),
            len: (meta >> 32) as u32,
            signaled: meta & 1 << 8 != 0,
        }
    }

    /// Consumer: the device reported `seq` with `status`. False when `seq` is outside
    /// the outstanding window or was reported already (a second report for one split
    /// request keeps the first).
    pub(crate) fn record(&self, seq: u64, status: WcStatus) -> bool {
        let tail = self.tail.load(Ordering::Relaxed);
        if seq < tail || seq >= self.head.load(Ordering::Acquire) {
            return false;
        }
        let s = self.slot(seq);
        if s.done.load(Ordering::Relaxed) != 0 {
            return false;
        }
        s.done.store(1 + status_code(status), Ordering::Relaxed);
        if seq >= self.reported.load(Ordering::Relaxed) {
            self.reported.store(seq + 1, Ordering::Relaxed);
        }
        true
    }

    /// Consumer: whether a request is posted and not yet handed out.
    pub(crate) fn outstanding(&self) -> bool {
        self.tail.load(Ordering::Relaxed) < self.head.load(Ordering::Acquire)
    }

    /// Consumer: records every posted request the device has not reported as flushed
    /// (the queue pair is in error and the device will never report them: see
    /// `VerbsCq::sweep_errored`); [`WrRing::pop`] then hands them out in order. A late
    /// report of one of them is refused by [`WrRing::record`] (`done` set, or released).
    pub(crate) fn flush_unreported(&self) {
        let head = self.head.load(Ordering::Acquire);
        let flushed = 1 + status_code(WcStatus::WrFlushed);
        for seq in self.tail.load(Ordering::Relaxed)..head {
            let s = self.slot(seq);
            if s.done.load(Ordering::Relaxed) == 0 {
                s.done.store(flushed, Ordering::Relaxed);
            }
        }
        if head > self.reported.load(Ordering::Relaxed) {
            self.reported.store(head, Ordering::Relaxed);
        }
    }

    /// Consumer: the next completion to hand out in posting order, releasing slots on
    /// the way; `None` when the oldest outstanding request has not been reported.
    pub(crate) fn pop(&self) -> Option<(Entry, WcStatus)> {
        let head = self.head.load(Ordering::Acquire);
        let reported = self.reported.load(Ordering::Relaxed);
        let mut t = self.tail.load(Ordering::Relaxed);
        let mut out = None;
        while t < head {
            let s = self.slot(t);
            let done = s.done.load(Ordering::Relaxed);
            let e = self.entry(t);
            if done != 0 {
                s.done.store(0, Ordering::Relaxed);
                t += 1;
                let status = code_status(done - 1);
                if e.signaled || !status.is_success() {
                    out = Some((e, status));
                    break;
                }
            } else if !e.signaled && t < reported {
                // Released by a later request's completion.
                t += 1;
            } else {
                break;
            }
        }
        self.tail.store(t, Ordering::Release);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn says_whether_anything_was_posted_or_released() {
        let r = WrRing::new(4, 1 << 40);
        assert!(!r.posted_any() && !r.released_any());
        r.write(r.head(), e(7, true));
        r.publish(r.head() + 1);
        assert!(r.posted_any() && !r.released_any(), "posted, not completed");
        assert!(r.record(1 << 40, WcStatus::Success));
        assert!(r.pop().is_some());
        assert!(r.released_any(), "a completion released it");
    }

    fn e(wr_id: u64, signaled: bool) -> Entry {
        Entry {
            wr_id,
            opcode: WcOpcode::RdmaWrite,
            len: 4097,
            signaled,
        }
    }

    #[test]
    fn a_completion_releases_the_unsignaled_requests_before_it() {
        let r = WrRing::new(4, 0);
        assert_eq!(r.room(), 4);
        for seq in 0..4 {
            r.write(seq, e(100 + seq, seq == 2 || seq == 3));
        }
        r.publish(4);
        assert_eq!(r.room(), 0);
        assert!(r.record(2, WcStatus::Success));
        assert_eq!(r.pop(), Some((e(102, true), WcStatus::Success)));
        assert_eq!(r.room(), 3, "the unsignaled 0 and 1 left with 2");
        assert!(!r.record(1, WcStatus::Success), "already released");
        assert!(!r.record(4, WcStatus::Success), "never published");
        assert_eq!(r.pop(), None, "3 is outstanding");
        assert!(r.record(3, WcStatus::WrFlushed));
        assert!(
            !r.record(3, WcStatus::Success),
            "a second report keeps the first"
        );
        assert_eq!(r.pop(), Some((e(103, true), WcStatus::WrFlushed)));
        assert_eq!(r.room(), 4);
    }

    #[test]
    fn flushing_the_unreported_hands_each_out_once_and_refuses_late_reports() {
        let r = WrRing::new(8, 0);
        for seq in 0..4 {
            r.write(seq, e(200 + seq, seq != 1));
        }
        r.publish(4);
        assert!(r.record(0, WcStatus::Success));
        assert!(r.record(3, WcStatus::Success), "reported out of order");
        r.flush_unreported();
        assert!(r.outstanding());
        assert_eq!(r.pop(), Some((e(200, true), WcStatus::Success)));
        assert_eq!(
            r.pop(),
            Some((e(201, false), WcStatus::WrFlushed)),
            "an unsignaled request never executed is reported failed"
        );
        assert_eq!(r.pop(), Some((e(202, true), WcStatus::WrFlushed)));
        assert!(
            !r.record(3, WcStatus::WrFlushed),
            "the device's own report kept"
        );
        assert_eq!(r.pop(), Some((e(203, true), WcStatus::Success)));
        assert!(
            !r.record(2, WcStatus::WrFlushed),
            "a late report is refused"
        );
        assert_eq!(r.pop(), None);
        assert!(!r.outstanding());
        r.flush_unreported();
        assert_eq!(r.pop(), None, "nothing left to flush");
    }

    #[test]
    fn out_of_order_reports_come_out_in_posting_order() {
        let r = WrRing::new(8, 1 << 40);
        let b = 1 << 40;
        for i in 0..4 {
            r.write(b + i, e(i, true));
        }
        r.publish(b + 4);
        // The Send (3) is reported before the Read (2) it follows.
        for i in [0, 1, 3] {
            assert!(r.record(b + i, WcStatus::Success));
        }
        assert_eq!(r.pop().map(|x| x.0.wr_id), Some(0));
        assert_eq!(r.pop().map(|x| x.0.wr_id), Some(1));
        assert_eq!(r.pop(), None, "3 waits for 2");
        assert!(r.record(b + 2, WcStatus::Success));
        assert_eq!(r.pop().map(|x| x.0.wr_id), Some(2));
        assert_eq!(r.pop().map(|x| x.0.wr_id), Some(3));
        assert_eq!(r.pop(), None);
        assert_eq!(r.room(), 8);
    }

    #[test]
    fn unsignaled_failures_are_reported_and_fields_survive_wrapping() {
        let r = WrRing::new(3, 0);
        for seq in 0..10u64 {
            let ent = Entry {
                wr_id: seq * 7,
                opcode: if seq % 2 == 0 {
                    WcOpcode::FastReg
                } else {
                    WcOpcode::Recv
                },
                len: u32::MAX - seq as u32,
                signaled: false,
            };
            r.write(seq, ent);
            r.publish(seq + 1);
            assert!(r.record(seq, WcStatus::RemoteAccessError));
            assert_eq!(r.pop(), Some((ent, WcStatus::RemoteAccessError)));
        }
    }
}
