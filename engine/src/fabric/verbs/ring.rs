//! Outstanding work requests of one queue (send or receive) of one queue pair.
//!
//! Verbs numbers nothing for us and leaves a completion's opcode undefined when it
//! failed, so every posted request gets a sequence number (its verbs `wr_id`) and an
//! entry here holding the caller's `wr_id`, the operation and the length. The queue
//! pair is the only producer, the completion queue its queues report to the only
//! consumer. A completion for sequence `n` retires every entry up to `n`: reliable
//! connections complete in order, and unsignaled requests release their slots when a
//! later signaled one completes, exactly as the send queue of a NIC does. The ring is
//! as deep as the queue pair was created, so "full" here is the fabric's `QueueFull`
//! whatever depth the device rounded its own queue up to.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::fabric::WcOpcode;

/// Tag bit of receive sequence numbers, so one CQ can tell the two queues apart even on
/// failed completions.
pub const RECV_TAG: u64 = 1 << 63;

/// What the completion of one request reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The caller's identifier.
    pub wr_id: u64,
    /// The operation.
    pub opcode: WcOpcode,
    /// Total bytes of the request.
    pub len: u32,
}

struct Slot {
    wr_id: AtomicU64,
    // opcode in the low byte, length above.
    meta: AtomicU64,
}

/// A single-producer, single-consumer record of posted requests.
pub struct WrRing {
    slots: Box<[Slot]>,
    /// Next sequence number to hand out; written by the producer only.
    head: AtomicU64,
    /// First sequence number not retired; written by the consumer only.
    tail: AtomicU64,
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
    pub fn new(depth: u32, base: u64) -> WrRing {
        let depth = depth.max(1) as usize;
        WrRing {
            slots: (0..depth)
                .map(|_| Slot {
                    wr_id: AtomicU64::new(0),
                    meta: AtomicU64::new(0),
                })
                .collect(),
            head: AtomicU64::new(base),
            tail: AtomicU64::new(base),
        }
    }

    /// The depth.
    pub fn depth(&self) -> u32 {
        // Built from a u32.
        self.slots.len() as u32
    }

    /// Producer: the next sequence number (nothing is reserved until [`WrRing::publish`]).
    pub fn head(&self) -> u64 {
        self.head.load(Ordering::Relaxed)
    }

    /// Producer: how many more requests fit.
    pub fn room(&self) -> u64 {
        let used = self.head() - self.tail.load(Ordering::Acquire);
        self.slots.len() as u64 - used
    }

    /// Producer: records request `seq` (which must be below `head() + room()`).
    pub fn write(&self, seq: u64, e: Entry) {
        let s = &self.slots[(seq % self.slots.len() as u64) as usize];
        s.wr_id.store(e.wr_id, Ordering::Relaxed);
        s.meta
            .store(opcode_code(e.opcode) | u64::from(e.len) << 8, Ordering::Relaxed);
    }

    /// Producer: makes every entry below `head` visible to the consumer. Called before
    /// the requests are handed to the device, so their completions find them.
    pub fn publish(&self, head: u64) {
        self.head.store(head, Ordering::Release);
    }

    /// Consumer: retires every entry up to `seq` and returns `seq`'s, or `None` when
    /// `seq` was already retired (a second completion for one split request) or was
    /// never published.
    pub fn retire(&self, seq: u64) -> Option<Entry> {
        let tail = self.tail.load(Ordering::Relaxed);
        if seq < tail || seq >= self.head.load(Ordering::Acquire) {
            return None;
        }
        let s = &self.slots[(seq % self.slots.len() as u64) as usize];
        let meta = s.meta.load(Ordering::Relaxed);
        let e = Entry {
            wr_id: s.wr_id.load(Ordering::Relaxed),
            opcode: code_opcode(meta & 0xff),
            len: (meta >> 8) as u32,
        };
        self.tail.store(seq + 1, Ordering::Release);
        Some(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(wr_id: u64) -> Entry {
        Entry {
            wr_id,
            opcode: WcOpcode::RdmaWrite,
            len: 4097,
        }
    }

    #[test]
    fn a_completion_retires_everything_before_it() {
        let r = WrRing::new(4, 0);
        assert_eq!(r.room(), 4);
        for seq in 0..4 {
            r.write(seq, e(100 + seq));
        }
        r.publish(4);
        assert_eq!(r.room(), 0);
        assert_eq!(r.retire(2), Some(e(102)));
        assert_eq!(r.room(), 3, "the unsignaled 0 and 1 left with 2");
        assert_eq!(r.retire(1), None, "already retired");
        assert_eq!(r.retire(4), None, "never published");
        assert_eq!(r.retire(3), Some(e(103)));
        assert_eq!(r.room(), 4);
    }

    #[test]
    fn entries_wrap_around_and_keep_their_fields() {
        let r = WrRing::new(3, 1 << 40);
        for seq in (1 << 40)..(1 << 40) + 10u64 {
            let op = if seq % 2 == 0 {
                WcOpcode::FastReg
            } else {
                WcOpcode::Recv
            };
            r.write(
                seq,
                Entry {
                    wr_id: seq * 7,
                    opcode: op,
                    len: u32::MAX - (seq as u32 & 0xff),
                },
            );
            r.publish(seq + 1);
            let got = r.retire(seq).expect("published");
            assert_eq!(got.wr_id, seq * 7);
            assert_eq!(got.opcode, op);
            assert_eq!(got.len, u32::MAX - (seq as u32 & 0xff));
        }
    }
}
