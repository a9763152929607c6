//! [`Pair`]: a requester and a responder connected over one provider and driven from
//! one thread — the synchronous harness for tests and benchmarks.

use core::time::Duration;
use std::time::Instant;

use super::requester::Requester;
use super::responder::{Responder, ResponderConn};
use super::ConnError;
use crate::core::config::ConnConfig;
use crate::core::fixed::FixedQueue;
use crate::core::ConnState;
use crate::fabric::Provider;
use crate::requester::{CallRequest, Outcome, SubmitError};
use crate::service::Service;

/// Why the harness gave up.
#[derive(Debug, thiserror::Error)]
pub enum PairError {
    /// Setting up a side failed.
    #[error("setup: {0}")]
    Conn(ConnError),
    /// The connection was not established, or a call not answered, before the deadline.
    #[error("deadline passed while {0}")]
    Timeout(PairWait),
    /// The requester refused the call.
    #[error("{0}")]
    Submit(SubmitError),
    /// The connection closed while waiting.
    #[error("connection closed")]
    Closed,
}

/// What the harness was waiting for when its deadline passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PairWait {
    /// The connection's establishment.
    #[error("connecting")]
    Connecting,
    /// A call's reply.
    #[error("waiting for a reply")]
    Reply,
}

type OneShot<S> = Box<dyn FnMut() -> Option<S> + Send>;

/// A connected requester/responder pair.
pub struct Pair<P: Provider, S> {
    /// The requester.
    pub requester: Requester<P>,
    /// The responder's server (one accepted connection).
    pub server: Responder<P, S, OneShot<S>>,
    stash: FixedQueue<Outcome>,
    next_tag: u64,
}

impl<P: Provider, S: Service + Send + 'static> Pair<P, S> {
    /// Listens on `addr` with `server_dev`, connects from `client_dev`, and polls both
    /// until the connection is established on both sides (or `deadline` passes).
    pub fn connect(
        client_dev: &P::Device,
        server_dev: P::Device,
        addr: &P::Addr,
        client_cfg: &ConnConfig,
        server_cfg: &ConnConfig,
        service: S,
        deadline: Duration,
    ) -> Result<Self, PairError> {
        let mut once = Some(service);
        let factory: OneShot<S> = Box::new(move || once.take());
        let mut server = Responder::bind(server_dev, addr, server_cfg.clone(), factory)
            .map_err(PairError::Conn)?;
        server.keep_closed(true);
        let requester =
            Requester::connect_with(client_dev, addr, client_cfg).map_err(PairError::Conn)?;
        let mut pair = Pair {
            requester,
            server,
            stash: FixedQueue::with_capacity(
                client_cfg.queue_len + 2 * client_cfg.credits as usize + 2,
            ),
            next_tag: 1 << 48,
        };
        let end = Instant::now() + deadline;
        loop {
            let now = Instant::now();
            pair.poll(pair.requester.clock().now());
            let server_up = pair
                .server
                .connections()
                .first()
                .is_some_and(|c| c.state() == ConnState::Established);
            match pair.requester.state() {
                ConnState::Established if server_up => return Ok(pair),
                ConnState::Draining | ConnState::Closed => return Err(PairError::Closed),
                _ => {}
            }
            if now > end {
                return Err(PairError::Timeout(PairWait::Connecting));
            }
        }
    }

    /// Polls both sides once.
    pub fn poll(&mut self, now: Instant) -> usize {
        self.server.poll(now) + self.requester.poll(now)
    }

    /// The responder connection.
    pub fn responder(&self) -> Option<&ResponderConn<P, S>> {
        self.server.connections().first()
    }

    /// The responder connection, writable.
    pub fn responder_mut(&mut self) -> Option<&mut ResponderConn<P, S>> {
        self.server.connections_mut().first_mut()
    }

    /// Submits `req` and polls both sides until its outcome arrives. Outcomes of other
    /// calls that finish meanwhile are kept for [`next_outcome`](Self::next_outcome).
    pub fn call(&mut self, req: CallRequest, deadline: Duration) -> Result<Outcome, PairError> {
        let tag = self.next_tag;
        self.next_tag += 1;
        self.requester.submit(req, tag).map_err(PairError::Submit)?;
        let end = Instant::now() + deadline;
        loop {
            let now = Instant::now();
            self.poll(self.requester.clock().now());
            while let Some(o) = self.requester.poll_outcome() {
                if o.tag == tag {
                    return Ok(o);
                }
                let _ = self.stash.push_back(o);
            }
            if now > end {
                return Err(PairError::Timeout(PairWait::Reply));
            }
        }
    }

    /// The next outcome: one kept by [`call`](Self::call), else a fresh one.
    pub fn next_outcome(&mut self) -> Option<Outcome> {
        self.stash
            .pop_front()
            .or_else(|| self.requester.poll_outcome())
    }

    /// Polls both sides until `done` holds or `deadline` passes; false on the deadline.
    pub fn run_until<F: FnMut(&mut Self) -> bool>(
        &mut self,
        deadline: Duration,
        mut done: F,
    ) -> bool {
        let end = Instant::now() + deadline;
        loop {
            let now = Instant::now();
            self.poll(self.requester.clock().now());
            if done(self) {
                return true;
            }
            if now > end {
                return false;
            }
        }
    }
}
