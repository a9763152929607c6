//! What a shared receive queue has promised: the receives each of its connections may
//! consume before the queue is next refilled, summed, never above the queue's depth.
//!
//! RFC 8166 §3.3.1: a requester may have as many calls in flight as "the most recent
//! server-granted credit value" allows, and it learns that value only when it reads a
//! reply. So a connection whose grant shrinks keeps its old, larger one until its
//! requester has read the reply carrying the smaller; and a connection that arrives
//! takes receives before any grant (its first call, or a continuation group up to the
//! XCHAR_REQRXLIM it was told). A share computed from the number of connections alone
//! (`depth / (N + 1)`) holds only while arrivals come one at a time; several at once,
//! before the older connections read their smaller grants, could find the queue empty
//! (an RNR wait on shm and InfiniBand, a fatal Terminate on iWARP).
//!
//! The ledger keeps the bound exact instead. Each connection on the queue counts its
//! *exposure*: the largest grant its requester may still be acting on (at least the
//! request-group limit it was advertised), plus the receives its RDMA_DONEs may take.
//! A connection is admitted only while the sum leaves room for its first exposure, a
//! reply never grants more than the room the others leave, a grant that grows counts at
//! once, and a grant that shrinks counts only once the requester has provably read it
//! ([`Exposure`]).
//!
//! Since a grant is a promise for as long as the requester may act on it, and a client
//! that made one call and went quiet never reads a smaller one, grants on a shared
//! queue start small and grow with use: each reply may grant at most twice the last
//! (from the request-group limit, at least 1), up to the share. A client that keeps
//! calls in flight reaches its share within a few replies; one that calls now and then
//! holds little; one that goes idle starts small again (and the smaller grant its next
//! reply carries settles as above, or after the server's idle interval).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// The receives one shared queue has promised, shared by the queue's owner (a poll
/// group) and its connections. All of them live on the group's one thread; the
/// counter is atomic only so the ledger can be shared with the connections it
/// admits (relaxed operations, no contention).
#[derive(Debug)]
pub struct SrqLedger {
    depth: u32,
    exposed: AtomicU32,
}

impl SrqLedger {
    /// A ledger for a queue of `depth` receives, nothing promised yet.
    pub fn new(depth: u32) -> Arc<Self> {
        Arc::new(SrqLedger {
            depth,
            exposed: AtomicU32::new(0),
        })
    }

    /// The queue's depth.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Receives promised to the connections now.
    pub fn exposed(&self) -> u32 {
        self.exposed.load(Ordering::Relaxed)
    }

    /// Promises `n` receives to a connection arriving, if they fit.
    pub fn admit(&self, n: u32) -> bool {
        let now = self.exposed();
        match now.checked_add(n) {
            Some(sum) if sum <= self.depth => {
                self.exposed.store(sum, Ordering::Relaxed);
                true
            }
            _ => false,
        }
    }

    fn raise(&self, n: u32) {
        self.exposed.fetch_add(n, Ordering::Relaxed);
    }

    fn lower(&self, n: u32) {
        let now = self.exposed();
        self.exposed.store(now.saturating_sub(n), Ordering::Relaxed);
    }
}

/// One connection's part of a [`SrqLedger`]: what its replies may grant and what it
/// has promised.
#[derive(Debug)]
pub(crate) struct Exposure {
    ledger: Arc<SrqLedger>,
    /// The fair share the group sets (`depth / (N + 1)` less the DONE receives): what
    /// replies grant when the room allows.
    pub(crate) target: u32,
    /// Receives beyond the credits this connection may consume (RDMA_DONEs).
    done: u32,
    /// The request-group limit it was advertised (XCHAR_REQRXLIM): a requester with
    /// nothing in flight may send a group that long whatever its grant.
    floor: u32,
    /// The largest grant its requester may be acting on (at least `floor`); the ledger
    /// holds `eff + done` for it.
    eff: u32,
    /// A smaller grant sent, and the count of credit-consuming messages past which
    /// the requester must have read it.
    pending: Option<(u32, u64)>,
    /// Credit-consuming messages received (calls and continuation transmissions; not
    /// RDMA_DONE or Transmit Error, which take the DONE receives).
    credit_msgs: u64,
    /// The most the next reply may grant by use: twice the last grant.
    ramp: u32,
}

impl Exposure {
    /// A connection [`admit`](SrqLedger::admit)ted with `floor + done` receives.
    pub(crate) fn new(ledger: Arc<SrqLedger>, target: u32, floor: u32, done: u32) -> Self {
        let floor = floor.max(1);
        Exposure {
            ledger,
            target: target.max(1),
            done,
            floor,
            eff: floor,
            pending: None,
            credit_msgs: 0,
            ramp: floor,
        }
    }

    /// A call or continuation transmission arrived.
    #[inline]
    pub(crate) fn credit_msg(&mut self) {
        self.credit_msgs += 1;
    }

    /// The most the next reply may grant: the target, within the room the other
    /// connections leave; never 0 (RFC 8166 §3.3.1; admission left at least `floor`).
    #[inline]
    pub(crate) fn room(&mut self) -> u32 {
        if let Some((to, after)) = self.pending {
            if self.credit_msgs > after {
                self.settle(to);
            }
        }
        let mine = self.eff + self.done;
        let others = self.ledger.exposed().saturating_sub(mine);
        let room = self
            .ledger
            .depth
            .saturating_sub(others)
            .saturating_sub(self.done);
        self.target.min(self.ramp).min(room).max(1)
    }

    /// A reply granting `credit` is being sent.
    ///
    /// Growing counts at once. Shrinking counts once the requester has read it: a
    /// requester with `G` credits at most keeps `k - released <= G`, and replies sent
    /// before this one release at most the `M` credit messages received so far (a
    /// reply answers a call already received), so message `k > M + G` was sent after
    /// this reply was read; messages sent before it have all arrived (Sends are
    /// ordered). A requester that read it acts on its grant or a later reply's, so
    /// later smaller grants keep the first one's condition and settle to the largest
    /// of them (the next reply records again below that). A reply that ends up not
    /// sent cannot satisfy the condition, which needs a reply sent at or after it to
    /// have been read: counting it is only conservative.
    #[inline]
    pub(crate) fn granted(&mut self, credit: u32) {
        self.ramp = credit.max(self.floor).saturating_mul(2);
        let want = credit.max(self.floor);
        if want >= self.eff {
            if want > self.eff {
                self.ledger.raise(want - self.eff);
                self.eff = want;
            }
            self.pending = None;
        } else {
            self.pending = Some(match self.pending {
                None => (want, self.credit_msgs + u64::from(self.eff)),
                Some((to, after)) => (to.max(want), after),
            });
        }
    }

    /// The connection has been idle (nothing received, no call in progress) for the
    /// server's idle interval: a smaller grant sent before then is taken as read. RFC
    /// 5666 §7 lets a server recover resources by "the time-based window (or any
    /// other appropriate method)" when a client goes quiet; this one assumes a requester
    /// reads a delivered reply within that interval (default one second).
    pub(crate) fn settle_idle(&mut self) {
        if let Some((to, _)) = self.pending {
            self.settle(to);
        }
        // Its next grants start small again.
        self.ramp = self.floor;
    }

    fn settle(&mut self, to: u32) {
        if to < self.eff {
            self.ledger.lower(self.eff - to);
            self.eff = to;
        }
        self.pending = None;
    }

    /// Receives promised to this connection now (its exposure).
    #[cfg(test)]
    fn promised(&self) -> u32 {
        self.eff + self.done
    }
}

impl Drop for Exposure {
    /// A connection gone (its queue pair with it) takes no more receives.
    fn drop(&mut self) {
        self.ledger.lower(self.eff + self.done);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_stops_at_the_depth() {
        let l = SrqLedger::new(10);
        assert!(l.admit(4));
        assert!(l.admit(6));
        assert!(!l.admit(1));
        assert_eq!(l.exposed(), 10);
    }

    #[test]
    fn a_grant_grows_at_once_and_shrinks_only_once_read() {
        let l = SrqLedger::new(40);
        assert!(l.admit(2));
        let mut a = Exposure::new(l.clone(), 8, 1, 1);
        // Grows with use: 1, 2, 4, 8.
        for want in [1, 2, 4, 8] {
            a.credit_msg();
            assert_eq!(a.room(), want);
            a.granted(want);
        }
        assert_eq!(l.exposed(), 9, "8 credits + 1 DONE receive");
        // The share drops to 2: still 8 promised until the requester read it.
        a.target = 2;
        assert_eq!(a.room(), 2);
        a.granted(2);
        assert_eq!(l.exposed(), 9);
        // Four messages so far, 8 credits: message 13 (> 4 + 8) proves the read.
        for _ in 0..8 {
            a.credit_msg();
            assert_eq!(a.room(), 2);
            assert_eq!(l.exposed(), 9, "not yet provably read");
        }
        a.credit_msg();
        assert_eq!(a.room(), 2);
        assert_eq!(l.exposed(), 3, "2 credits + 1 DONE receive");
        drop(a);
        assert_eq!(l.exposed(), 0);
    }

    #[test]
    fn repeated_smaller_grants_keep_the_first_ones_condition() {
        let l = SrqLedger::new(40);
        assert!(l.admit(1));
        let mut a = Exposure::new(l.clone(), 8, 1, 0);
        a.ramp = 8;
        a.credit_msg();
        a.granted(8);
        a.target = 4;
        // One call at a time, each reply granting 4: the first such reply went after
        // message 2, so message 11 (> 2 + 8) settles it, not never.
        let mut settled_after = None;
        for n in 1..=12 {
            a.credit_msg();
            let g = a.room();
            a.granted(g);
            if settled_after.is_none() && l.exposed() == 4 {
                settled_after = Some(n);
            }
        }
        assert_eq!(settled_after, Some(10));
        // Idle: a pending smaller grant is taken as read.
        a.target = 2;
        let g = a.room();
        a.granted(g);
        assert_eq!(l.exposed(), 4);
        a.settle_idle();
        assert_eq!(l.exposed(), 2);
    }

    #[test]
    fn the_room_the_others_leave_caps_a_grant() {
        let l = SrqLedger::new(12);
        assert!(l.admit(1));
        let mut a = Exposure::new(l.clone(), 8, 1, 0);
        a.ramp = 8;
        let g = a.room();
        a.granted(g);
        assert_eq!(l.exposed(), 8);
        assert!(l.admit(1));
        let mut b = Exposure::new(l.clone(), 8, 1, 0);
        b.ramp = 8;
        // 12 - 8: b may grow to 4 at most while a holds 8.
        assert_eq!(b.room(), 4);
        b.granted(4);
        assert_eq!(l.exposed(), 12);
        assert!(!l.admit(1), "full");
        // Never 0, even with no room at all beyond its own.
        b.target = 8;
        assert_eq!(b.room(), 4);
    }

    #[test]
    fn the_floor_is_kept_whatever_the_grant() {
        let l = SrqLedger::new(20);
        assert!(l.admit(4));
        let mut a = Exposure::new(l.clone(), 1, 4, 0);
        a.granted(1);
        assert_eq!(l.exposed(), 4, "a group of 4 may still come");
        for _ in 0..10 {
            a.credit_msg();
        }
        let _ = a.room();
        assert_eq!(a.promised(), 4);
    }
}
