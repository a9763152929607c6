//! Reconnection and retransmission for a [`Requester`] with `ConnConfig::reconnect`.
//!
//! When a connection ends, the core hands back every call it lost before any answer as
//! an outcome carrying `Outcome::resend` (its buffers, XID and the rest of its
//! request). The driver takes those outcomes in instead of delivering them, connects
//! again over the same resources (protection domain, completion queue, pools: the
//! buffers the calls hold stay valid) with a fresh core and fresh fast-registration
//! slots (the old keys die with the old slots), and, once the new connection is up,
//! submits them again in their original order under their original XIDs, so a server's
//! duplicate request cache recognises them (RFC 8267 §6.7.2: retransmission belongs on
//! a new connection). Each call has a budget of sends (`Reconnect::max_sends`); a call
//! that is not idempotent is sent again only when the server keeps a duplicate request
//! cache, and fails with `TransportError::NotRetransmitted` otherwise. Every call still
//! gets exactly one outcome: the one the driver delivers.
//!
//! Nothing here runs per call on a connection that does not reconnect, and on one that
//! does, only the outcome path looks at `resend` (one branch); the rest runs when a
//! connection has ended.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::requester::Requester;
use crate::core::config::{ConnConfig, Reconnect};
use crate::core::ConnState;
use crate::credits::CreditTable;
use crate::fabric::Provider;
use crate::requester::{CallRequest, CallStatus, Outcome, SubmitRefusal, TransportError};

/// What a reconnecting requester keeps across connections.
pub(crate) struct Again<P: Provider> {
    policy: Reconnect,
    pub(super) addr: P::Addr,
    pub(super) cfg: ConnConfig,
    pub(super) credits: Arc<CreditTable>,
    /// Calls to send again once connected, in their original order, with the number of
    /// times each was sent so far.
    pending: VecDeque<(u64, CallRequest, u32)>,
    /// Calls lost at least once and not finished: tag, sends so far, and when the call
    /// was first lost.
    sends: Vec<(u64, u32, Instant)>,
    /// Outcomes ready for the application (failed for good, or from a replaced core).
    finished: VecDeque<Outcome>,
    /// When to try connecting next, once the connection has ended.
    next_attempt: Option<Instant>,
    backoff: Duration,
    /// The current connection has reached Established (backoff resets then).
    up: bool,
    /// The application closed the connection: no more reconnecting.
    closing: bool,
    stats: ReconnectStats,
}

/// What reconnection did so far ([`Requester::reconnect_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReconnectStats {
    /// New connections made after a loss.
    pub reconnects: u64,
    /// Attempts that failed to start (the next waits longer).
    pub failed_attempts: u64,
    /// Calls sent again on a new connection.
    pub retransmitted: u64,
    /// Calls that ran out of sends.
    pub gave_up: u64,
    /// Calls not sent again because neither they nor the server allow it.
    pub not_retransmitted: u64,
}

impl<P: Provider> Again<P> {
    pub(super) fn new(
        policy: Reconnect,
        addr: &P::Addr,
        cfg: &ConnConfig,
        credits: Arc<CreditTable>,
    ) -> Self {
        let room = cfg.credits as usize + cfg.queue_len;
        Again {
            policy,
            addr: addr.clone(),
            cfg: cfg.clone(),
            credits,
            pending: VecDeque::with_capacity(room),
            sends: Vec::with_capacity(room),
            finished: VecDeque::with_capacity(room),
            next_attempt: None,
            backoff: policy.backoff,
            up: false,
            closing: false,
            stats: ReconnectStats::default(),
        }
    }

    /// Times `tag` was sent so far (once unless it was sent again) and when it was
    /// first lost (`now` if this is the first time).
    fn sends_of(&self, tag: u64, now: Instant) -> (u32, Instant) {
        self.sends
            .iter()
            .find(|(t, _, _)| *t == tag)
            .map_or((1, now), |(_, n, at)| (*n, *at))
    }

    /// `tag` finished: forget its count.
    fn forget(&mut self, tag: u64) {
        if !self.sends.is_empty() {
            self.sends.retain(|(t, _, _)| *t != tag);
        }
    }

    /// An outcome the application gets: its `resend` cleared, its count forgotten.
    fn finish(&mut self, mut o: Outcome) {
        o.resend = None;
        self.forget(o.tag);
        self.finished.push_back(o);
    }

    /// Takes in a call lost with its connection: to send again, or to fail for good.
    fn take_back(&mut self, mut o: Outcome, now: Instant) {
        let Some(r) = o.resend else {
            self.finish(o);
            return;
        };
        let (sends, first_lost) = self.sends_of(o.tag, now);
        let too_late = self
            .policy
            .resend_for
            .is_some_and(|d| now.saturating_duration_since(first_lost) >= d);
        if self.closing {
            self.finish(o);
        } else if sends >= self.policy.max_sends || too_late {
            self.stats.gave_up += 1;
            self.finish(o);
        } else if !r.idempotent && !self.policy.server_has_drc {
            self.stats.not_retransmitted += 1;
            o.status = CallStatus::Transport(TransportError::NotRetransmitted);
            self.finish(o);
        } else {
            let tag = o.tag;
            match o.into_resend() {
                Ok(req) => {
                    if !self.sends.iter().any(|(t, _, _)| *t == tag) {
                        self.sends.push((tag, sends, first_lost));
                    }
                    self.pending.push_back((tag, req, sends));
                }
                Err(o) => self.finish(o),
            }
        }
    }
}

/// The outcome of a call that will not be sent again, built from its request.
fn lost_outcome(tag: u64, req: CallRequest) -> Outcome {
    let xid = req.xid.unwrap_or(0);
    Outcome::unsent(
        tag,
        xid,
        req,
        CallStatus::Transport(TransportError::Disconnected),
    )
}

impl<P: Provider, B: crate::core::ResponderRole> Requester<P, B> {
    /// [`poll_outcome`](Self::poll_outcome) when reconnecting: calls lost with their
    /// connection are taken back, everything else delivered.
    #[inline(never)]
    pub(super) fn poll_outcome_again(&mut self) -> Option<Outcome> {
        let a = self.again.as_deref_mut()?;
        loop {
            if let Some(o) = a.finished.pop_front() {
                return Some(o);
            }
            let o = self.core.poll_outcome()?;
            if o.resend.is_some() {
                a.take_back(o, self.clock.now());
                continue;
            }
            a.forget(o.tag);
            return Some(o);
        }
    }

    /// After each poll: notices the end of a connection, connects again when the
    /// backoff allows, and sends the lost calls again once connected. Returns the work
    /// done.
    #[cold]
    pub(super) fn reconnect_step(&mut self, now: Instant) -> usize {
        let Some(a) = self.again.as_deref_mut() else {
            return 0;
        };
        let mut work = 0;
        match self.core.state() {
            ConnState::Closed if !a.closing => {
                // Everything the old core still holds moves here before it is replaced.
                while let Some(o) = self.core.poll_outcome() {
                    a.take_back(o, now);
                    work += 1;
                }
                let at = *a.next_attempt.get_or_insert_with(|| {
                    if !a.up {
                        // The last attempt never came up: wait longer.
                        a.backoff = (a.backoff * 2).min(a.policy.max_backoff);
                    }
                    now + a.backoff
                });
                if now >= at {
                    a.next_attempt = None;
                    a.up = false;
                    work += 1;
                    match self.reopen(now) {
                        Ok(()) => {
                            if let Some(a) = self.again.as_deref_mut() {
                                a.stats.reconnects += 1;
                            }
                        }
                        Err(_) => {
                            if let Some(a) = self.again.as_deref_mut() {
                                a.stats.failed_attempts += 1;
                            }
                        }
                    }
                }
            }
            ConnState::Established => {
                if !a.up {
                    a.up = true;
                    a.backoff = a.policy.backoff;
                }
                while let Some((tag, req, sends)) = a.pending.pop_front() {
                    match self.core.submit(req, tag, now) {
                        Ok(()) => {
                            work += 1;
                            a.stats.retransmitted += 1;
                            if let Some(e) = a.sends.iter_mut().find(|(t, _, _)| *t == tag) {
                                e.1 = sends + 1;
                            }
                        }
                        Err(e) => match e.reason {
                            SubmitRefusal::QueueFull | SubmitRefusal::NotConnected => {
                                a.pending.push_front((tag, *e.request, sends));
                                break;
                            }
                            reason => {
                                let mut o = lost_outcome(tag, *e.request);
                                o.status = CallStatus::Refused(reason);
                                a.finish(o);
                            }
                        },
                    }
                }
            }
            _ => {}
        }
        work
    }

    /// The application closes: no more reconnecting, and calls waiting to be sent
    /// again fail now.
    pub(super) fn closing_for_good(&mut self) {
        if let Some(a) = self.again.as_deref_mut() {
            a.closing = true;
            while let Some((tag, req, _)) = a.pending.pop_front() {
                let o = lost_outcome(tag, req);
                a.finish(o);
            }
        }
    }

    /// What reconnection did so far (`None` without `ConnConfig::reconnect`).
    pub fn reconnect_stats(&self) -> Option<ReconnectStats> {
        self.again.as_deref().map(|a| a.stats)
    }

    /// Calls waiting for a new connection to be sent again.
    pub fn awaiting_resend(&self) -> usize {
        self.again.as_deref().map_or(0, |a| a.pending.len())
    }
}
