//! Replies exposed in responder-provided Read chunks (draft-cel-nfsv4-rpcrdma-reliable-
//! reply §4), waiting for the requester's RDMA_DONE.
//!
//! Each entry pairs one fast-registration slot with the large buffer holding one reply:
//! entry `m` uses MR slot `m`, so taking a slot is taking the entry. An entry is
//! registered read-only under a fresh key when the reply is staged, and dies in one of
//! three ways: RDMA_DONE for its XID (invalidated by the DONE's Send With Invalidate, or
//! by a LocalInvalidate), the `done_timeout` passing first (LocalInvalidate, counted),
//! or the connection ending (the driver deregisters the slots). Its buffer goes back only
//! once the key is dead and its work requests are all complete, so the peer can never
//! read memory that is holding something else.
//!
//! The table is sized at setup (one entry per reply MR slot, at most
//! [`crate::limits::MAX_EXPOSED_REPLIES`]) and a DONE is matched by a scan of it: DONEs
//! are as rare as replies too large for anything the requester offered.

use std::time::Instant;

use super::ResponderHalf;
use crate::core::mrs::{FastRegSlot, MrTable};
use crate::core::regbuf::RegBuf;
use crate::core::transport::Transport;
use crate::core::wrid::{WrId, WrKind};
use crate::fabric::{Access, Completion, SendOp};
use crate::service::Service;
use crate::wire::header::Segment;

/// Where an exposed reply is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ExpState {
    /// Unused: its MR slot is in the table.
    Free,
    /// Registered and advertised; waits for RDMA_DONE until `deadline`.
    Live,
    /// A LocalInvalidate is posted for the key.
    Invalidating,
    /// The key is dead; the entry waits for its work requests before it is freed.
    Dead,
}

pub(super) struct Exposed {
    pub(super) state: ExpState,
    pub(super) xid: u32,
    pub(super) key: u32,
    /// The reply, in a large buffer, for as long as the key may be used.
    pub(super) body: Option<RegBuf>,
    pub(super) deadline: Option<Instant>,
    /// Work requests (FastReg, LocalInvalidate) posted and not yet completed.
    pub(super) wrs: u32,
    /// Send-queue room held for the LocalInvalidate, taken when the reply was staged.
    pub(super) reserved: u32,
}

/// The responder's exposed replies and the MR slots they use.
pub(super) struct ExposedTable {
    pub(super) entries: Box<[Exposed]>,
    pub(super) mrs: MrTable,
    /// Entries not `Free`.
    pub(super) live: u32,
    /// The earliest deadline of a `Live` entry (maybe passed already by a DONE).
    pub(super) next_deadline: Option<Instant>,
}

impl ExposedTable {
    /// An empty table: no MR slots, so no reply is ever exposed.
    pub(super) fn empty() -> Self {
        ExposedTable {
            entries: Box::new([]),
            mrs: MrTable::new(&[], 0),
            live: 0,
            next_deadline: None,
        }
    }

    /// A table over the fast-registration `slots`, keyed from `seed`.
    pub(super) fn new(slots: &[FastRegSlot], seed: u64) -> Self {
        let entries = slots
            .iter()
            .map(|s| Exposed {
                state: ExpState::Free,
                xid: 0,
                key: s.key,
                body: None,
                deadline: None,
                wrs: 0,
                reserved: 0,
            })
            .collect();
        ExposedTable {
            entries,
            mrs: MrTable::new(slots, seed),
            live: 0,
            next_deadline: None,
        }
    }

    /// Whether replies can be exposed at all (the driver gave slots).
    pub(super) fn enabled(&self) -> bool {
        !self.entries.is_empty()
    }

    /// Largest reply one entry can expose.
    pub(super) fn max_len(&self) -> usize {
        self.mrs.max_len()
    }

    /// The live entry for `xid`, if any.
    pub(super) fn find_live(&self, xid: u32) -> Option<u32> {
        self.entries
            .iter()
            .position(|e| e.state == ExpState::Live && e.xid == xid)
            .map(|i| i as u32)
    }

    /// Notes a new deadline.
    pub(super) fn note_deadline(&mut self, d: Instant) {
        self.next_deadline = Some(self.next_deadline.map_or(d, |n| n.min(d)));
    }

    /// Recomputes the earliest deadline of the live entries.
    pub(super) fn recompute_deadline(&mut self) {
        self.next_deadline = self
            .entries
            .iter()
            .filter(|e| e.state == ExpState::Live)
            .filter_map(|e| e.deadline)
            .min();
    }
}

impl<S: Service> ResponderHalf<S> {
    /// RDMA_DONE for `xid` arrived; `swi` is the key its Send With Invalidate killed.
    /// The exposed reply's key dies (already, or by a LocalInvalidate on the room held
    /// for it); a DONE for no exposed reply is dropped silently (draft §4.1.3).
    pub(super) fn on_done(&mut self, t: &mut Transport, xid: u32, swi: Option<u32>) {
        let Some(m) = self.exposed.find_live(xid) else {
            self.stats.done_unknown += 1;
            return;
        };
        let e = &mut self.exposed.entries[m as usize];
        if swi == Some(e.key) {
            self.stats.done_remote_invalidations += 1;
            e.state = ExpState::Dead;
            t.sq.give(e.reserved);
            e.reserved = 0;
            self.try_free_exposed(m);
        } else {
            self.invalidate_exposed(t, m);
        }
    }

    /// Stages the LocalInvalidate of exposed reply `m`, on the room held for it.
    fn invalidate_exposed(&mut self, t: &mut Transport, m: u32) {
        let e = &mut self.exposed.entries[m as usize];
        if !t.is_open() {
            // Draining: the key dies with the slots when the connection has closed.
            return;
        }
        let wr_id = WrId::new(WrKind::ReplyInv, m).encode();
        if e.reserved == 0 && !t.sq.take(1) {
            // Never: the room was held since the reply was staged. Try next poll.
            return;
        }
        e.reserved = 0;
        if t.stage(wr_id, SendOp::LocalInvalidate { key: e.key }, &[]) {
            e.wrs += 1;
            e.state = ExpState::Invalidating;
        } else {
            t.sq.give(1);
        }
    }

    /// A FastReg or LocalInvalidate of an exposed reply completed (or was flushed).
    pub(super) fn on_exposed_completion(&mut self, t: &mut Transport, id: WrId, wc: &Completion) {
        let Some(e) = self.exposed.entries.get_mut(id.slot as usize) else {
            self.stats.stray_completions += 1;
            return;
        };
        if e.state == ExpState::Free || e.wrs == 0 {
            self.stats.stray_completions += 1;
            return;
        }
        e.wrs -= 1;
        t.sq.give(1);
        if id.kind == WrKind::ReplyInv && wc.status.is_success() {
            e.state = ExpState::Dead;
        }
        self.try_free_exposed(id.slot);
    }

    /// Frees exposed reply `m` once its key is dead and nothing of it is outstanding.
    fn try_free_exposed(&mut self, m: u32) {
        let e = &mut self.exposed.entries[m as usize];
        if e.state != ExpState::Dead || e.wrs > 0 {
            return;
        }
        if let Some(b) = e.body.take() {
            b.release_into(&mut self.large);
        }
        e.state = ExpState::Free;
        e.deadline = None;
        self.exposed.live = self.exposed.live.saturating_sub(1);
        self.exposed.mrs.give(m);
    }

    /// Invalidates exposed replies whose DONE is overdue (draft §4.1.3: a requester
    /// that never sends it must not exhaust the responder).
    pub(super) fn expire(&mut self, t: &mut Transport, now: Instant) {
        for m in 0..self.exposed.entries.len() as u32 {
            let e = &self.exposed.entries[m as usize];
            if e.state == ExpState::Live && e.deadline.is_some_and(|d| now >= d) {
                self.stats.done_timeouts += 1;
                self.invalidate_exposed(t, m);
            }
        }
        self.exposed.recompute_deadline();
    }
}

impl ExposedTable {
    /// Exposes `body` (`len` octets of reply) for `xid` until `deadline`: takes an MR
    /// slot and stages its read-only FastReg under a fresh key (RFC 8166 §8.1: never the
    /// slot's previous one), and returns the Read segment to advertise. Gives the buffer
    /// back when every slot is in use (the reply waits for a DONE or a timeout). The
    /// caller has taken send-queue room for the FastReg and for the LocalInvalidate
    /// held here.
    pub(super) fn expose(
        &mut self,
        t: &mut Transport,
        xid: u32,
        body: RegBuf,
        len: usize,
        deadline: Option<Instant>,
    ) -> Result<Segment, RegBuf> {
        let Ok(region) = body.sge(0, len) else {
            return Err(body);
        };
        let Some((m, key)) = self.mrs.take() else {
            return Err(body);
        };
        let wr_id = WrId::new(WrKind::ReplyReg, m).encode();
        let op = SendOp::FastReg {
            key,
            region,
            access: Access::REMOTE_READ,
        };
        if !t.stage(wr_id, op, &[]) {
            self.mrs.give(m);
            return Err(body);
        }
        let e = &mut self.entries[m as usize];
        e.state = ExpState::Live;
        e.xid = xid;
        e.key = key;
        e.body = Some(body);
        e.deadline = deadline;
        e.wrs = 1;
        e.reserved = 1;
        self.live += 1;
        if let Some(d) = deadline {
            self.note_deadline(d);
        }
        Ok(Segment::new(key, region.length, region.addr))
    }
}
