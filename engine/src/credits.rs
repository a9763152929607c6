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

    #[inline]
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

    /// [`try_acquire`](Self::try_acquire) for the table's one writer: the requester
    /// core of the connection that owns it, on the thread that polls it.
    ///
    /// Single writer: the call counts (`flight`) and the acquired/denied counters are
    /// written only by the owning core; other threads only read them ([`snapshot`],
    /// [`available`], [`in_flight`]). The writer therefore sees its own last store
    /// when it loads, and may replace each read-modify-write (a compare-and-swap loop,
    /// a locked add) by a load and a store: a reader sees either the value before or
    /// the value after, exactly as with the atomic update, and the `Release` store
    /// publishes the same state. The public mutators ([`try_acquire`],
    /// [`release`]) stay atomic read-modify-writes, but calling them from elsewhere
    /// while the connection runs is a misuse in any case (a credit taken behind the
    /// core's back is one it accounts for nowhere); at worst such a call and an owner's
    /// update overwrite each other's count, never memory, and the owner corrects the
    /// count with its next update.
    ///
    /// [`snapshot`]: Self::snapshot
    /// [`available`]: Self::available
    /// [`in_flight`]: Self::in_flight
    /// [`try_acquire`]: Self::try_acquire
    /// [`release`]: Self::release
    // Always inlined: once per call on the plain path, where the call's entry and exit
    // cost about as much as the body.
    #[inline(always)]
    pub(crate) fn acquire_owned(&self) -> bool {
        let granted = self.granted();
        let usable = self.usable_for_calls(granted);
        // Relaxed: the only stores to `flight` are this thread's own.
        let f = self.flight.load(Ordering::Relaxed);
        let calls = (f & CALLS_MASK) as u32;
        let probe = u32::from(f & PROBE_BIT != 0);
        let ok = calls < usable && calls + probe < granted;
        if ok {
            self.flight.store(f + 1, Ordering::Release);
            bump_owned(&self.acquired);
        } else {
            bump_owned(&self.denied);
        }
        ok
    }

    /// [`release`](Self::release) for the table's one writer (see
    /// [`acquire_owned`](Self::acquire_owned) for why a load and a store suffice).
    #[inline(always)]
    pub(crate) fn release_owned(&self) {
        let f = self.flight.load(Ordering::Relaxed);
        if f & CALLS_MASK > 0 {
            self.flight.store(f - 1, Ordering::Release);
        }
    }

    /// Returns the probe's credit.
    pub fn release_probe(&self) {
        self.flight.fetch_and(!PROBE_BIT, Ordering::AcqRel);
    }

    /// Records the grant carried by a reply. Zero is a protocol violation when nothing
    /// else is outstanding (RFC 8166 §3.3.1) and would deadlock, so it counts as one; a
    /// grant above our own ceiling counts as the ceiling.
    // Inlined, and bounded by `max`/`min` rather than `clamp` (which checks its bounds
    // and was left out of line): once per reply. `limit` is at least 1 (`new`), so this
    // is `clamp(1, limit)`.
    #[inline]
    pub fn set_granted(&self, credit: u32) {
        self.granted
            .store(credit.max(1).min(self.limit), Ordering::Release);
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

/// Adds one to a counter only its owner's thread writes (see
/// [`CreditTable::acquire_owned`]): a load and a store, no locked add.
#[inline]
fn bump_owned(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
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
    // Inlined: every reply asks once, and the call costs about as much as the body.
    #[inline]
    pub fn grant(&self, posted_recvs: u32) -> u32 {
        // `max` is at least 1 (`new`): this is `clamp(1, max)` without the bounds check
        // `clamp` makes (and the out-of-line call it was compiled to).
        self.target().min(posted_recvs).max(1).min(self.max)
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

    /// The owner's load-and-store operations give what the atomic read-modify-writes
    /// give, step by step, the probe's reserve and the counters included.
    #[test]
    fn owned_updates_match_the_atomic_ones() {
        for reserve in [false, true] {
            let (a, b) = (CreditTable::new(8, reserve), CreditTable::new(8, reserve));
            let mut script = Vec::new();
            for i in 0..200u32 {
                script.push(i % 7);
            }
            for (i, op) in script.into_iter().enumerate() {
                match op {
                    0..=2 => assert_eq!(a.try_acquire(), b.acquire_owned(), "step {i}"),
                    3..=4 => {
                        a.release();
                        b.release_owned();
                    }
                    5 => {
                        let g = (i as u32 * 5) % 11;
                        a.set_granted(g);
                        b.set_granted(g);
                    }
                    _ => assert_eq!(a.try_acquire_probe(), b.try_acquire_probe(), "step {i}"),
                }
                assert_eq!(a.snapshot(), b.snapshot(), "step {i}");
            }
            // Releasing below zero is ignored by both.
            for _ in 0..20 {
                a.release();
                b.release_owned();
            }
            assert_eq!(a.snapshot(), b.snapshot());
            assert_eq!(b.in_flight(), 0);
        }
    }

    /// Readers on other threads see only states the single writer stored: never more
    /// calls in flight than granted, the acquired count never going back, and the
    /// final counts exact.
    #[test]
    fn readers_see_the_owners_updates_whole() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        let t = Arc::new(CreditTable::new(4, false));
        t.set_granted(4);
        let stop = Arc::new(AtomicBool::new(false));
        let reader = {
            let (t, stop) = (t.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut last = 0;
                let mut seen = 0u64;
                while !stop.load(Ordering::Acquire) || seen == 0 {
                    let s = t.snapshot();
                    assert!(s.in_flight <= s.granted, "{s:?}");
                    assert!(s.acquired >= last, "{s:?}");
                    last = s.acquired;
                    seen += 1;
                }
            })
        };
        const ROUNDS: u64 = 20_000;
        for _ in 0..ROUNDS {
            assert!(t.acquire_owned());
            assert!(t.acquire_owned());
            t.release_owned();
            t.release_owned();
        }
        stop.store(true, Ordering::Release);
        reader.join().expect("reader");
        let s = t.snapshot();
        assert_eq!((s.in_flight, s.acquired, s.denied), (0, 2 * ROUNDS, 0));
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
