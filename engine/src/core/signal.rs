//! Selective signaling: which send-queue requests ask for a completion, and the ledger
//! that accounts for the ones that do not.
//!
//! Verbs (and every provider here) complete a queue pair's send queue in order, and an
//! unsignaled request that succeeds reports nothing: its slot is released when a later
//! signaled request completes. A failed or flushed request always reports, signaled or
//! not. So when a completion for request X arrives, every request posted before X that
//! has not reported has executed successfully. The ledger keeps every staged send-queue
//! request in posting order; a completion retires the ones before it, and the core feeds
//! each of those to the same handlers as a successful completion, so the per-slot and
//! send-queue accounting stays exact.
//!
//! Only plain Sends of calls go unsignaled, at most `interval - 1` in a row; everything
//! else (Reads, Writes, registrations, invalidations, sends that invalidate, RDMA_DONE,
//! replies) is signaled as before. Replies stay signaled because the barrier below
//! completes only once the peer executes it, and on the userspace providers (shm, siw)
//! a peer executes nothing unless it polls: a server may poll for ever, but a client
//! that got its last reply may never poll again, and the reply's context and buffer
//! would stay held (an idle connection could not release them). A call's barrier is
//! executed by the server, which always polls. Unsignaled Sends at the end of the queue
//! would hold
//! their slots and buffers until some later request completes, so when the connection
//! stages nothing for [`IDLE_BARRIER`], or starts draining, the core posts a barrier: a
//! signaled zero-length RDMA Read, which moves nothing, checks no key (InfiniBand, iWARP
//! RFC 5040 and every provider here) and completes only after every request before it.
//!
//! What it costs (measured with `perf/insns.sh`'s regions, `RPCRDMA_SIGNAL_EVERY`
//! set on the bench): the decision and the ring entry are inlined into the call's
//! staging; a completion retires the run before it without a completion made up for
//! each (the requester's `retire_call_send`: the slot's count of work requests, the
//! send-queue room given back once for the run); the idle barrier's clock is looked at
//! every [`SIGHTINGS`] polls that see an unsignaled tail. A call answered before its
//! unsignaled Send is retired has its outcome and its credit back at once, and its slot
//! (whose header buffer the Send gathers from, the provider's until the Send is
//! retired) is parked: the requester keeps up to `interval - 1` spare slots for those,
//! so no call waits for a slot on their account, and a connection whose slots are all
//! free or parked counts as idle (a call made then is posted at once). On shm that
//! makes selective signaling about even with signaling everything (NULL 3479 -> 3487,
//! ECHO 3907 -> 3925, depth-32 rate 3185 -> 3188 instructions per call at 16; before,
//! 3479 -> 4323 NULL at 8 and 3190 -> 3274 rate at 16): a shm Send completion costs the
//! engine only about 70 instructions (the CQ step, the completion loop's dispatch and
//! `on_send_completion`), about what the bookkeeping costs, so the default stays 1.
//!
//! Why it matters: siw reports a Send complete only after a zero-length Read proves the
//! peer executed it (`SiwConfig::confirm_completions`), one extra message each way per
//! signaled Send; and on every provider a completion costs a CQ entry and a pass through
//! the core.

use std::time::{Duration, Instant};

use super::wrid::WrKind;
use crate::fabric::SendOp;

/// How long trailing unsignaled Sends may wait for a later request before a barrier is
/// posted for them. Long against a round trip (so a busy connection never needs one),
/// short against anything a caller would wait on (their slots and buffers are held).
pub(crate) const IDLE_BARRIER: Duration = Duration::from_micros(200);

/// Polls that see an unsignaled tail between two looks at the clock (a power of two):
/// a connection making calls one at a time polls once or twice per call with such a
/// tail, and a look costs a time subtraction; idle, a busy-polling driver makes these
/// polls in well under a microsecond.
const SIGHTINGS: u32 = 8;

/// The interval [`SendLedger::new`] keeps for a send queue of `depth` requests, `slots`
/// call slots (probe included) or send buffers, and
/// [`ConnConfig::signal_every`](super::ConnConfig::signal_every) `every`: clamped so
/// that the unsignaled tail never holds more than a quarter of the queue and leaves one
/// of `slots` free (among any `interval` calls in a row one is signaled, so when every
/// slot is taken one of them will complete and retire those before it). 1 turns the
/// ledger off.
pub(crate) fn interval(depth: u32, slots: u32, every: u32) -> u32 {
    every.min(depth / 4).min(slots.saturating_sub(1)).max(1)
}

/// One staged request on the ledger.
#[derive(Clone, Copy, Default)]
struct Entry {
    wr_id: u64,
    signaled: bool,
}

/// Staged send-queue requests not yet retired, in posting order, and the signaling
/// policy.
pub(crate) struct SendLedger {
    /// A ring of `cap` (a power of two) entries from `head`.
    ring: Box<[Entry]>,
    /// `cap - 1`.
    mask: usize,
    /// The newest entry is unsignaled (nothing after it will retire it).
    unsignaled_tail: bool,
    head: usize,
    len: usize,
    /// At most `interval - 1` unsignaled requests in a row; 1 signals every request and
    /// turns the ledger off.
    interval: u32,
    /// Unsignaled requests staged since the last signaled one.
    run: u32,
    /// Polls that saw the unsignaled tail since the last unsignaled request was
    /// staged: the clock is looked at every [`SIGHTINGS`]th.
    sightings: u32,
    /// When the [`SIGHTINGS`]th poll saw the last unsignaled request staged (valid
    /// from then on): a barrier is due `IDLE_BARRIER` after it. Staging has no clock,
    /// so the idle time is counted from the polls.
    seen_at: Option<Instant>,
    /// A barrier was refused by the provider: no further one is tried.
    barrier_refused: bool,
}

impl SendLedger {
    /// A ledger for a send queue of `depth` requests; `interval` as
    /// [`ConnConfig::signal_every`](super::ConnConfig::signal_every), clamped by
    /// [`interval`](self::interval) for `depth` and `slots` (call slots, probe
    /// included, or send buffers).
    pub(crate) fn new(depth: u32, slots: u32, interval: u32) -> SendLedger {
        let interval = self::interval(depth, slots, interval);
        // A power of two, so positions wrap with a mask.
        let cap = if interval > 1 {
            (depth as usize).next_power_of_two()
        } else {
            0
        };
        SendLedger {
            ring: vec![Entry::default(); cap].into_boxed_slice(),
            mask: cap.saturating_sub(1),
            unsignaled_tail: false,
            head: 0,
            len: 0,
            interval,
            run: 0,
            sightings: 0,
            seen_at: None,
            barrier_refused: false,
        }
    }

    /// Whether some requests go unsignaled (and the ledger is kept).
    #[inline(always)]
    pub(crate) fn enabled(&self) -> bool {
        self.interval > 1
    }

    /// Decides whether the request about to be staged is signaled, and records it.
    /// `false` only for a plain Send of a call within the interval. Inlined into the
    /// call's staging: a few compares and two stores.
    #[inline(always)]
    pub(crate) fn stage(&mut self, wr_id: u64, op: &SendOp) -> bool {
        if !self.enabled() {
            return true;
        }
        let kind = (wr_id >> 60) as u8;
        let may_skip = matches!(op, SendOp::Send)
            && kind == WrKind::CallSend as u8
            && self.run + 1 < self.interval;
        self.push(wr_id, !may_skip)
    }

    /// Records `wr_id` (`signaled` as decided); returns whether it is signaled.
    #[inline(always)]
    fn push(&mut self, wr_id: u64, signaled: bool) -> bool {
        let at = (self.head + self.len) & self.mask;
        let Some(e) = self.ring.get_mut(at).filter(|_| self.len < self.mask + 1) else {
            // Never: the ledger is as deep as the send queue, whose budget bounds what
            // is staged. Should it happen the request is signaled and not tracked (a
            // completion of an id not on the ledger retires nothing).
            self.run = 0;
            return true;
        };
        *e = Entry { wr_id, signaled };
        self.len += 1;
        self.unsignaled_tail = !signaled;
        if signaled {
            self.run = 0;
        } else {
            self.run += 1;
            self.sightings = 0;
        }
        signaled
    }

    /// For a completion of `wr_id` (`success` as its status): how many requests before
    /// it retire with it (executed, unsignaled, so they reported nothing); take them
    /// with [`pop`](Self::pop), then `wr_id` itself. A successful completion is one
    /// that was signaled (an unsignaled request reports only a failure), so the first
    /// signaled entry of that id is taken; a failure may be either. `None` when
    /// `wr_id` is not on the ledger (a stray or synthetic completion retires nothing).
    #[inline]
    pub(crate) fn position(&self, wr_id: u64, success: bool) -> Option<usize> {
        (0..self.len).find(|&i| {
            self.ring
                .get((self.head + i) & self.mask)
                .is_some_and(|e| e.wr_id == wr_id && (e.signaled || !success))
        })
    }

    /// The `i`th oldest request on the ledger (0 when there is none).
    #[inline(always)]
    pub(crate) fn peek(&self, i: usize) -> u64 {
        self.ring
            .get((self.head + i) & self.mask)
            .map_or(0, |e| e.wr_id)
    }

    /// Takes the `n` oldest requests off the ledger (all of them if fewer).
    #[inline(always)]
    pub(crate) fn drop_front(&mut self, n: usize) {
        let n = n.min(self.len);
        self.head = (self.head + n) & self.mask;
        self.len -= n;
        if self.len == 0 {
            self.unsignaled_tail = false;
        }
    }

    /// Takes the oldest request off the ledger.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let id = self.ring.get(self.head).map_or(0, |e| e.wr_id);
        self.head = (self.head + 1) & self.mask;
        self.len -= 1;
        if self.len == 0 {
            self.unsignaled_tail = false;
        }
        Some(id)
    }

    /// Forgets the `n` requests staged last (the provider refused them; they are
    /// accounted as flushed without retiring anything before them).
    pub(crate) fn forget_last(&mut self, n: usize) {
        self.len -= n.min(self.len);
        self.run = 0;
        self.unsignaled_tail = self.len > 0
            && self
                .ring
                .get((self.head + self.len - 1) & self.mask)
                .is_some_and(|e| !e.signaled);
    }

    /// Whether the newest request on the ledger is unsignaled: nothing after it will
    /// retire it.
    #[inline(always)]
    pub(crate) fn tail_unsignaled(&self) -> bool {
        self.unsignaled_tail
    }

    /// Whether a barrier is due: an unsignaled tail that waited `IDLE_BARRIER` (timed
    /// from the [`SIGHTINGS`]th poll that saw it, looked at every `SIGHTINGS` polls),
    /// or any unsignaled tail while `draining`. Most polls only count.
    #[inline(always)]
    pub(crate) fn barrier_due(&mut self, now: Instant, draining: bool) -> bool {
        if !self.unsignaled_tail {
            return false;
        }
        self.sightings = self.sightings.wrapping_add(1);
        if self.sightings & (SIGHTINGS - 1) != 0 && !draining {
            return false;
        }
        self.barrier_due_slow(now, draining)
    }

    #[inline(never)]
    fn barrier_due_slow(&mut self, now: Instant, draining: bool) -> bool {
        if self.barrier_refused {
            return false;
        }
        if draining {
            return true;
        }
        if self.sightings == SIGHTINGS {
            self.seen_at = Some(now);
            return false;
        }
        self.seen_at
            .is_some_and(|t| now.saturating_duration_since(t) >= IDLE_BARRIER)
    }

    /// The provider refused a barrier: the queue pair takes no more requests, and what
    /// it holds reports through its own flushes. The unsignaled tail is retired as
    /// executed: handed back, oldest first, by [`take_unreported`](Self::take_unreported).
    pub(crate) fn barrier_refused(&mut self) {
        self.barrier_refused = true;
    }

    /// After a refused barrier: takes the oldest request of an all-unsignaled ledger.
    pub(crate) fn take_unreported(&mut self) -> Option<u64> {
        if !self.barrier_refused || self.len == 0 {
            return None;
        }
        if (0..self.len).any(|i| {
            self.ring
                .get((self.head + i) & self.mask)
                .is_some_and(|e| e.signaled)
        }) {
            return None;
        }
        self.pop()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::wrid::WrId;

    fn send(kind: WrKind, slot: u32) -> u64 {
        WrId::new(kind, slot).encode()
    }

    #[test]
    fn every_nth_send_is_signaled_and_a_completion_retires_those_before_it() {
        let mut l = SendLedger::new(64, 64, 4);
        let ids: Vec<u64> = (0..8).map(|i| send(WrKind::CallSend, i)).collect();
        let flags: Vec<bool> = ids.iter().map(|&id| l.stage(id, &SendOp::Send)).collect();
        assert_eq!(
            flags,
            [false, false, false, true, false, false, false, true]
        );
        // The completion of the 4th retires the three before it, then itself.
        assert_eq!(l.position(ids[3], true), Some(3));
        assert_eq!(
            (l.pop(), l.pop(), l.pop()),
            (Some(ids[0]), Some(ids[1]), Some(ids[2]))
        );
        assert_eq!(l.position(ids[3], true), Some(0));
        assert_eq!(l.pop(), Some(ids[3]));
        // A flush reported for an unsignaled one retires only what is before it.
        assert_eq!(l.position(ids[5], false), Some(1));
        // A stray id retires nothing.
        assert_eq!(l.position(send(WrKind::ReplySend, 99), true), None);
        assert!(!l.tail_unsignaled(), "the newest is signaled");
        for _ in 0..4 {
            l.pop();
        }
        assert_eq!(l.pop(), None);
        assert!(!l.tail_unsignaled());
    }

    #[test]
    fn reads_writes_and_other_kinds_are_always_signaled() {
        let mut l = SendLedger::new(64, 64, 16);
        let remote = crate::fabric::RemoteAddr { addr: 0, rkey: 0 };
        assert!(l.stage(send(WrKind::ChunkWrite, 0), &SendOp::RdmaWrite { remote }));
        assert!(l.stage(
            send(WrKind::ReplySend, 0),
            &SendOp::SendWithInvalidate { rkey: 7 }
        ));
        assert!(l.stage(send(WrKind::DoneSend, 0), &SendOp::Send));
        assert!(l.stage(send(WrKind::ReplySend, 1), &SendOp::Send));
        assert!(!l.stage(send(WrKind::CallSend, 1), &SendOp::Send));
        assert!(l.tail_unsignaled());
    }

    #[test]
    fn small_queues_signal_everything() {
        let mut l = SendLedger::new(64, 2, 16);
        assert!(!l.enabled());
        assert!(l.stage(send(WrKind::CallSend, 0), &SendOp::Send));
        let l = SendLedger::new(4, 64, 16);
        assert!(!l.enabled());
    }

    #[test]
    fn an_unsignaled_tail_asks_for_a_barrier_when_idle_or_draining() {
        let t0 = Instant::now();
        let mut l = SendLedger::new(64, 64, 8);
        assert!(!l.barrier_due(t0, true));
        l.stage(send(WrKind::CallSend, 0), &SendOp::Send);
        for _ in 0..2 * SIGHTINGS {
            assert!(
                !l.barrier_due(t0, false),
                "timed from the polls that saw it"
            );
        }
        assert!(l.barrier_due(t0, true));
        // The clock is looked at every SIGHTINGS polls.
        let mut polls = 0;
        while !l.barrier_due(t0 + IDLE_BARRIER, false) {
            polls += 1;
            assert!(polls < SIGHTINGS, "due within a look of the clock");
        }
        l.barrier_refused();
        assert!(!l.barrier_due(t0 + IDLE_BARRIER, true));
        assert_eq!(l.take_unreported(), Some(send(WrKind::CallSend, 0)));
        assert_eq!(l.take_unreported(), None);
    }
}
