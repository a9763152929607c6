//! Builders for the two ends, and the blocking conveniences an embedding application
//! wants first: a requester that is connected when it is handed over and answers
//! [`call`](Requester::call) with the outcome, and a server that runs on a thread of
//! its own until told to stop.
//!
//! ```text
//! Requester::connect(&dev, &addr).credits(32).open()?   -> Requester (established)
//! Responder::listen(dev, &addr).limits(..).serve(factory)? -> Responder (listening)
//! ```

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{ConnError, Requester, Responder, ResponderLimits};
use crate::core::{ConnConfig, ConnState};
use crate::fabric::{Device, Provider};
use crate::requester::{CallRequest, Outcome, SubmitError};
use crate::service::Service;

/// How long [`RequesterBuilder::open`] waits for the connection by default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Settings for a requester connection; see [`Requester::connect`].
#[derive(Debug)]
#[must_use = "a builder does nothing until `open`"]
pub struct RequesterBuilder<'a, P: Provider> {
    dev: &'a P::Device,
    addr: &'a P::Addr,
    cfg: ConnConfig,
    timeout: Duration,
}

impl<P: Provider> Requester<P> {
    /// Starts building a requester connection to `addr` through `dev`, with
    /// [`ConnConfig::default`] settings until told otherwise. The provider is the
    /// device's.
    pub fn connect<'a, D>(dev: &'a D, addr: &'a P::Addr) -> RequesterBuilder<'a, P>
    where
        D: Device<P = P>,
        P: Provider<Device = D>,
    {
        RequesterBuilder {
            dev,
            addr,
            cfg: ConnConfig::default(),
            timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }

    /// Submits `req` and polls this connection until its outcome arrives: for an
    /// application that owns the connection's thread while the responder runs
    /// elsewhere. The engine's own timer bounds the wait (`timeout` becomes the call's
    /// timeout), so there is always exactly one outcome, possibly
    /// [`CallStatus::Timeout`](crate::requester::CallStatus::Timeout) or a transport
    /// failure. Outcomes of other calls that finish meanwhile are dropped: use
    /// [`submit`](Self::submit) and [`poll_outcome`](Self::poll_outcome) to keep
    /// several calls in flight.
    pub fn call(
        &mut self,
        mut req: CallRequest,
        timeout: Duration,
    ) -> Result<Outcome, SubmitError> {
        req.timeout = Some(timeout);
        let tag = u64::MAX - 1;
        self.submit(req, tag)?;
        loop {
            let now = self.clock().now();
            self.poll(now);
            while let Some(o) = self.poll_outcome() {
                if o.tag == tag {
                    return Ok(o);
                }
            }
        }
    }
}

impl<'a, P: Provider> RequesterBuilder<'a, P> {
    /// Every setting at once.
    pub fn config(mut self, cfg: ConnConfig) -> Self {
        self.cfg = cfg;
        self
    }

    /// Credits to ask the responder for (calls in flight at once).
    pub fn credits(mut self, credits: u32) -> Self {
        self.cfg.credits = credits;
        self
    }

    /// The inline thresholds to offer (RFC 8797): largest Send this end makes and
    /// receives.
    pub fn inline(mut self, send: u32, recv: u32) -> Self {
        self.cfg.inline_send = send;
        self.cfg.inline_recv = recv;
        self
    }

    /// Seed for XIDs and key generations, for reproducible runs.
    pub fn seed(mut self, seed: u64) -> Self {
        self.cfg.seed = Some(seed);
        self
    }

    /// How long [`open`](Self::open) waits for the connection
    /// ([`DEFAULT_CONNECT_TIMEOUT`] unless set).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Connects and polls until the connection is established: the connection is
    /// ready for calls when this returns.
    pub fn open(self) -> Result<Requester<P>, ConnError> {
        let mut conn = Requester::connect_with(self.dev, self.addr, &self.cfg)?;
        let end = Instant::now() + self.timeout;
        loop {
            let now = conn.clock().now();
            conn.poll(now);
            match conn.state() {
                ConnState::Established => return Ok(conn),
                ConnState::Draining | ConnState::Closed => return Err(ConnError::NotEstablished),
                ConnState::Connecting if Instant::now() > end => {
                    return Err(ConnError::ConnectTimeout(self.timeout))
                }
                ConnState::Connecting => std::thread::yield_now(),
            }
        }
    }
}

/// Settings for a listening server; see [`Responder::listen`].
#[derive(Debug)]
#[must_use = "a builder does nothing until `serve`"]
pub struct ResponderBuilder<'a, P: Provider> {
    dev: P::Device,
    addr: &'a P::Addr,
    cfg: ConnConfig,
    limits: ResponderLimits,
    /// Set by [`release_idle`](Self::release_idle); the server's default otherwise.
    release_idle: Option<Option<Duration>>,
}

impl<P: Provider> ResponderBuilder<'_, P> {
    /// Every connection setting at once.
    pub fn config(mut self, cfg: ConnConfig) -> Self {
        self.cfg = cfg;
        self
    }

    /// Credits to grant each requester.
    pub fn credits(mut self, credits: u32) -> Self {
        self.cfg.credits = credits;
        self
    }

    /// Connection cap, handshake and idle timeouts.
    pub fn limits(mut self, limits: ResponderLimits) -> Self {
        self.limits = limits;
        self
    }

    /// How long an idle connection waits before its free buffers' memory is released
    /// (see [`Responder::set_release_idle`]).
    pub fn release_idle(mut self, after: Option<Duration>) -> Self {
        self.release_idle = Some(after);
        self
    }

    /// Listens, serving each accepted connection with a service from `factory` (which
    /// may refuse a connection by returning `None`).
    pub fn serve<S, F>(self, factory: F) -> Result<Responder<P, S, F>, ConnError>
    where
        S: Service,
        F: FnMut() -> Option<S>,
    {
        let mut server = Responder::bind(self.dev, self.addr, self.cfg, factory)?;
        server.set_limits(self.limits);
        if let Some(after) = self.release_idle {
            server.set_release_idle(after);
        }
        Ok(server)
    }
}

/// Tells a server running on its own thread ([`Responder::run`]) to return.
#[derive(Debug, Clone, Default)]
pub struct StopHandle(Arc<AtomicBool>);

impl StopHandle {
    /// Asks the server to stop after its current poll.
    pub fn stop(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// True once [`stop`](Self::stop) was called.
    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

impl<P: Provider> Responder<P, (), ()> {
    /// Starts building a server listening on `addr` with `dev`; the service comes
    /// with [`ResponderBuilder::serve`]. The provider is the device's.
    pub fn listen<D>(dev: D, addr: &P::Addr) -> ResponderBuilder<'_, P>
    where
        D: Device<P = P>,
        P: Provider<Device = D>,
    {
        ResponderBuilder {
            dev,
            addr,
            cfg: ConnConfig::default(),
            limits: ResponderLimits::default(),
            release_idle: None,
        }
    }
}

impl<P, S, F> Responder<P, S, F>
where
    P: Provider,
    S: Service,
    F: FnMut() -> Option<S>,
{
    /// Runs the server on a thread of its own ([`run`](Self::run)) until the returned
    /// handle's [`stop`](Serving::stop).
    pub fn spawn(self) -> Serving<P, S, F>
    where
        Self: Send + 'static,
    {
        let stop = StopHandle::default();
        let handle = stop.clone();
        let thread = std::thread::spawn(move || self.run(&handle));
        Serving { stop, thread }
    }

    /// Polls until `stop` is stopped, yielding the thread when a poll found nothing to
    /// do (an appliance pins pollers instead: `conn::task`). Returns the server, whose
    /// connections are still open.
    pub fn run(mut self, stop: &StopHandle) -> Self {
        let clock = self.clock();
        while !stop.is_stopped() {
            if self.poll(clock.now()) == 0 {
                std::thread::yield_now();
            }
        }
        self
    }
}

/// A server running on its own thread ([`Responder::spawn`]).
#[derive(Debug)]
pub struct Serving<P: Provider, S, F> {
    stop: StopHandle,
    thread: std::thread::JoinHandle<Responder<P, S, F>>,
}

impl<P: Provider, S, F> Serving<P, S, F> {
    /// Stops the server after its current poll and waits for its thread; the server
    /// comes back with its connections still open. `Err` carries the thread's panic.
    pub fn stop(self) -> std::thread::Result<Responder<P, S, F>> {
        self.stop.stop();
        self.thread.join()
    }
}
