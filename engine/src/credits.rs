//! RPC-over-RDMA credits (RFC 8166 §3.3.1): how many calls a requester may have
//! outstanding, and what a responder grants.
//!
//! - [`CreditTable`] is the requester's view of one connection: the latest grant, the
//!   calls in flight and the keepalive probe's reserved credit. It is a handful of
//!   atomics (no lock), shared between the poller that sends calls and application
//!   threads that want to see the backlog.
//! - [`GrantPolicy`] is the responder's: what each reply grants, bounded by the receives
//!   it keeps posted and adjustable at run time from any thread.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Bit of the flight word counting the keepalive probe; the low 32 bits count calls.
const PROBE_BIT: u64 = 1 << 32;
const CALLS_MASK: u64 = PROBE_BIT - 1;

/// A requester's credit state for one connection.
///
/// The grant starts at one: a requester may send a single call until the first reply
/// tells it more (RFC 8166 §3.3.1). With the probe reserve on (RFC 8267 §6.7.2), one
/// granted credit is kept back from ordinary calls whenever the grant is at least two,
/// so a health probe can always be sent on a connection whose calls are all stuck.
#[derive(Debug)]
pub struct CreditTable {
    /// The responder's latest grant, already clamped to `1..=limit`.
    granted: AtomicU32,
    /// Calls in flight (low 32 bits) and the probe (bit 32).
    flight: AtomicU64,
    /// Calls waiting in the requester's queue for a credit.
    waiting: AtomicU32,
    /// The requester's own ceiling: its call slots.
    limit: u32,
    reserve_probe: bool,
    acquired: AtomicU64,
    denied: AtomicU64,
}

/// A consistent-enough copy of a [`CreditTable`] for display and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditSnapshot {
    /// The current grant.
    pub granted: u32,
    /// Calls in flight (not counting the probe).
    pub in_flight: u32,
    /// Whether the keepalive probe is in flight.
    pub probe_in_flight: bool,
    /// Calls queued for a credit.
    pub waiting: u32,
    /// Credits an ordinary call could take now.
    pub available: u32,
    /// Credits ever handed out.
    pub acquired: u64,
    /// Acquisitions refused for want of a credit.
    pub denied: u64,
}

impl CreditTable {
    /// A table for a requester with `limit` call slots (at least one).
    pub fn new(limit: u32, reserve_probe: bool) -> CreditTable {
        CreditTable {
            granted: AtomicU32::new(1),
            flight: AtomicU64::new(0),
            waiting: AtomicU32::new(0),
            limit: limit.max(1),
            reserve_probe,
            acquired: AtomicU64::new(0),
            denied: AtomicU64::new(0),
        }
    }

    /// The requester's ceiling.
    #[inline]
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The current grant.
    #[inline]
    pub fn granted(&self) -> u32 {
        self.granted.load(Ordering::Acquire)
    }

    /// Calls in flight, not counting the probe.
    #[inline]
    pub fn in_flight(&self) -> u32 {
        (self.flight.load(Ordering::Acquire) & CALLS_MASK) as u32
    }

    fn usable_for_calls(&self, granted: u32) -> u32 {
        if self.reserve_probe && granted >= 2 {
            granted - 1
        } else {
            granted
        }
    }

    /// Credits an ordinary call could take now.
    pub fn available(&self) -> u32 {
        let granted = self.granted();
        let flight = self.flight.load(Ordering::Acquire);
        let calls = (flight & CALLS_MASK) as u32;
        let probe = u32::from(flight & PROBE_BIT != 0);
        let by_total = granted.saturating_sub(calls + probe);
        let by_calls = self.usable_for_calls(granted).saturating_sub(calls);
        by_total.min(by_calls)
    }

    /// Takes a credit for an ordinary call; false when none is available.
    #[inline]
    pub fn try_acquire(&self) -> bool {
        let granted = self.granted();
        let usable = self.usable_for_calls(granted);
        let r = self
            .flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |f| {
                let calls = (f & CALLS_MASK) as u32;
                let probe = u32::from(f & PROBE_BIT != 0);
                (calls < usable && calls + probe < granted).then_some(f + 1)
            });
        self.count(r.is_ok())
    }

    /// Takes the probe's credit; false when the probe is already out or no credit is
    /// left at all.
    pub fn try_acquire_probe(&self) -> bool {
        let granted = self.granted();
        let r = self
            .flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |f| {
                let calls = (f & CALLS_MASK) as u32;
                (f & PROBE_BIT == 0 && calls < granted).then_some(f | PROBE_BIT)
            });
        self.count(r.is_ok())
    }

    fn count(&self, ok: bool) -> bool {
        let c = if ok { &self.acquired } else { &self.denied };
        c.fetch_add(1, Ordering::Relaxed);
        ok
    }

    /// Returns an ordinary call's credit (its reply arrived, or it was abandoned with
    /// the connection).
    pub fn release(&self) {
        let _ = self
            .flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |f| {
                (f & CALLS_MASK > 0).then(|| f - 1)
            });
    }

    /// Returns the probe's credit.
    pub fn release_probe(&self) {
        self.flight.fetch_and(!PROBE_BIT, Ordering::AcqRel);
    }

    /// Records the grant carried by a reply. Zero is a protocol violation when nothing
    /// else is outstanding (RFC 8166 §3.3.1) and would deadlock, so it counts as one; a
    /// grant above our own ceiling counts as the ceiling.
    pub fn set_granted(&self, credit: u32) {
        self.granted
            .store(credit.clamp(1, self.limit), Ordering::Release);
    }

    /// Starts over for a new connection: grant one, nothing in flight.
    pub fn reset(&self) {
        self.granted.store(1, Ordering::Release);
        self.flight.store(0, Ordering::Release);
    }

    /// Publishes how many calls wait in the queue.
    pub fn set_waiting(&self, n: u32) {
        self.waiting.store(n, Ordering::Relaxed);
    }

    /// A copy of every counter.
    pub fn snapshot(&self) -> CreditSnapshot {
        let flight = self.flight.load(Ordering::Acquire);
        CreditSnapshot {
            granted: self.granted(),
            in_flight: (flight & CALLS_MASK) as u32,
            probe_in_flight: flight & PROBE_BIT != 0,
            waiting: self.waiting.load(Ordering::Relaxed),
            available: self.available(),
            acquired: self.acquired.load(Ordering::Relaxed),
            denied: self.denied.load(Ordering::Relaxed),
        }
    }
}

/// A responder's grant policy for one connection.
///
/// Each reply grants `min(target, receives posted)`, and never less than one (a zero
/// grant with nothing outstanding would deadlock the requester, RFC 8166 §3.3.1). The
/// target can be moved up or down at run time; the next reply carries the change.
#[derive(Debug)]
pub struct GrantPolicy {
    target: AtomicU32,
    max: u32,
}

impl GrantPolicy {
    /// A policy granting up to `target`, never more than `max` (the receive depth).
    pub fn new(target: u32, max: u32) -> GrantPolicy {
        let max = max.max(1);
        GrantPolicy {
            target: AtomicU32::new(target.clamp(1, max)),
            max,
        }
    }

    /// Moves the target (clamped to `1..=max`).
    pub fn set_target(&self, target: u32) {
        self.target
            .store(target.clamp(1, self.max), Ordering::Relaxed);
    }

    /// The current target.
    pub fn target(&self) -> u32 {
        self.target.load(Ordering::Relaxed)
    }

    /// The highest grant the policy can produce.
    pub fn max(&self) -> u32 {
        self.max
    }

    /// The grant for a reply sent while `posted_recvs` receives are posted.
    pub fn grant(&self, posted_recvs: u32) -> u32 {
        self.target().min(posted_recvs).clamp(1, self.max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_with_one_credit_until_a_grant() {
        let t = CreditTable::new(8, false);
        assert!(t.try_acquire());
        assert!(!t.try_acquire());
        t.set_granted(4);
        assert!(t.try_acquire());
        assert!(t.try_acquire());
        assert!(t.try_acquire());
        assert!(!t.try_acquire());
        assert_eq!(t.in_flight(), 4);
        t.release();
        assert_eq!(t.available(), 1);
    }

    #[test]
    fn probe_reserve_keeps_one_credit_back() {
        let t = CreditTable::new(8, true);
        t.set_granted(3);
        assert!(t.try_acquire());
        assert!(t.try_acquire());
        assert!(!t.try_acquire(), "third credit is the probe's");
        assert!(t.try_acquire_probe());
        assert!(!t.try_acquire_probe());
        t.release_probe();
        // With a grant of one there is nothing to reserve: calls may use it.
        let t = CreditTable::new(8, true);
        assert!(t.try_acquire());
        assert!(!t.try_acquire_probe());
    }

    #[test]
    fn grants_are_clamped_to_one_and_the_limit() {
        let t = CreditTable::new(4, false);
        t.set_granted(0);
        assert_eq!(t.granted(), 1);
        t.set_granted(100);
        assert_eq!(t.granted(), 4);
        t.release();
        assert_eq!(t.in_flight(), 0, "release below zero is ignored");
    }

    #[test]
    fn grant_policy_follows_receives_and_never_grants_zero() {
        let p = GrantPolicy::new(16, 32);
        assert_eq!(p.grant(32), 16);
        assert_eq!(p.grant(4), 4);
        assert_eq!(p.grant(0), 1);
        p.set_target(64);
        assert_eq!(p.grant(32), 32);
        p.set_target(0);
        assert_eq!(p.grant(32), 1);
    }
}
