//! The drivers as poller tasks, and [`Client`]: the requester's face for application
//! threads.
//!
//! An application thread submits a call through the poller's mailbox and gets a
//! [`PendingCall`]: a ticket in a preallocated table with an atomic state it can poll or
//! park on. The requester task delivers each outcome into its ticket and unparks the
//! waiting thread. Nothing on that path allocates or locks: the ticket free list is a
//! lock-free bounded queue, the mailbox a lock-free ring.
//!
//! Code already running on the poller thread (another task) skips all this and drives a
//! [`Requester`] directly: `submit`, `poll`, `poll_outcome`.

use core::cell::UnsafeCell;
use core::fmt;
use core::sync::atomic::{AtomicU32, Ordering};
use core::time::Duration;
use std::sync::Arc;
use std::thread::Thread;
use std::time::Instant;

use crossbeam_queue::ArrayQueue;
use rpcrdma_poller::{PollCtx, PollerHandle, SendErrorKind, Task, TaskId, TimerId};
use rpcrdma_pools::Pool;

use super::requester::Requester;
use super::responder::Responder;
use crate::core::{ConnState, RegBuf, RegBufError};
use crate::credits::CreditTable;
use crate::fabric::Provider;
use crate::requester::{CallRequest, CallStatus, Outcome, SubmitError};
use crate::service::Service;

/// Tags of calls submitted through tickets carry this bit (and the ticket index).
const TICKET_TAG: u64 = 1 << 63;

const FREE: u32 = 0;
const PENDING: u32 = 1;
const DONE: u32 = 2;
const ABANDONED: u32 = 3;

/// What application threads send to a requester task.
// By value: the mailbox is a preallocated ring, and boxing the call would allocate once
// per RPC.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum ConnMsg {
    /// Send `req`; deliver its outcome into `ticket`.
    Submit {
        /// The call.
        req: CallRequest,
        /// Its ticket.
        ticket: u32,
    },
    /// Start a health check.
    HealthCheck,
    /// Close the connection.
    Close,
}

struct Ticket {
    state: AtomicU32,
    outcome: UnsafeCell<Option<Outcome>>,
    waiter: UnsafeCell<Option<Thread>>,
}

// SAFETY: `outcome` and `waiter` are handed between exactly two parties by `state`:
// the application thread writes `waiter` before sending the ticket through the mailbox
// (which orders it before the poller's reads) and reads `outcome` only after observing
// DONE with Acquire; the poller writes `outcome` only while the state is PENDING or
// ABANDONED (owned by the poller) and publishes it with a Release store or swap.
unsafe impl Sync for Ticket {}
unsafe impl Send for Ticket {}

/// The tickets of one requester, shared by its task and its clients.
pub struct CallTable {
    tickets: Box<[Ticket]>,
    free: ArrayQueue<u32>,
    send: Pool,
    app: Option<Pool>,
    credits: Arc<CreditTable>,
}

impl fmt::Debug for CallTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallTable")
            .field("tickets", &self.tickets.len())
            .field("free", &self.free.len())
            .finish()
    }
}

impl CallTable {
    fn new(n: usize, send: Pool, app: Option<Pool>, credits: Arc<CreditTable>) -> Self {
        let n = n.max(1);
        let free = ArrayQueue::new(n);
        for i in 0..n as u32 {
            let _ = free.push(i);
        }
        CallTable {
            tickets: (0..n)
                .map(|_| Ticket {
                    state: AtomicU32::new(FREE),
                    outcome: UnsafeCell::new(None),
                    waiter: UnsafeCell::new(None),
                })
                .collect(),
            free,
            send,
            app,
            credits,
        }
    }

    /// Tickets not in use.
    pub fn available(&self) -> usize {
        self.free.len()
    }

    /// Delivers `outcome` into ticket `i` (poller side).
    fn complete(&self, i: u32, outcome: Outcome) {
        let Some(t) = self.tickets.get(i as usize) else {
            return;
        };
        // SAFETY: the state is PENDING or ABANDONED: the poller owns the cell.
        unsafe { *t.outcome.get() = Some(outcome) };
        // Taken before DONE is published: from then on the caller may reuse the ticket
        // and its waiter cell. (A Thread clone is a reference-count increment.)
        // SAFETY: written by the caller before the ticket was sent; not written again
        // until the caller has seen DONE.
        let waiter = unsafe { (*t.waiter.get()).clone() };
        match t
            .state
            .compare_exchange(PENDING, DONE, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                if let Some(w) = waiter {
                    w.unpark();
                }
            }
            Err(_) => {
                // Nobody waits any more: drop the outcome (buffers go home) and recycle.
                // SAFETY: the state is ABANDONED: still ours.
                drop(unsafe { (*t.outcome.get()).take() });
                t.state.store(FREE, Ordering::Release);
                let _ = self.free.push(i);
            }
        }
    }
}

/// A call submitted from an application thread; its outcome arrives exactly once.
pub struct PendingCall {
    table: Arc<CallTable>,
    ticket: u32,
    taken: bool,
}

impl fmt::Debug for PendingCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PendingCall")
            .field("ticket", &self.ticket)
            .finish()
    }
}

impl PendingCall {
    fn ticket(&self) -> &Ticket {
        &self.table.tickets[self.ticket as usize]
    }

    /// True once the outcome is there.
    pub fn is_done(&self) -> bool {
        self.ticket().state.load(Ordering::Acquire) == DONE
    }

    /// The outcome, if it is there.
    pub fn try_take(&mut self) -> Option<Outcome> {
        if self.taken || !self.is_done() {
            return None;
        }
        let t = self.ticket();
        // SAFETY: DONE was observed with Acquire: the poller is finished with the cell.
        let o = unsafe { (*t.outcome.get()).take() };
        // SAFETY: as above; the waiter is ours again.
        unsafe { *t.waiter.get() = None };
        t.state.store(FREE, Ordering::Release);
        let _ = self.table.free.push(self.ticket);
        self.taken = true;
        o
    }

    /// Waits (spinning briefly, then parking) until the outcome arrives or `deadline`
    /// passes; on the deadline the call stays pending and comes back.
    pub fn wait_until(mut self, deadline: Instant) -> Result<Outcome, PendingCall> {
        let mut spins = 0u32;
        loop {
            if let Some(o) = self.try_take() {
                return Ok(o);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(self);
            }
            if spins < 1000 {
                spins += 1;
                core::hint::spin_loop();
            } else {
                std::thread::park_timeout((deadline - now).min(Duration::from_millis(10)));
            }
        }
    }
}

impl Drop for PendingCall {
    fn drop(&mut self) {
        if self.taken {
            return;
        }
        let t = &self.table.tickets[self.ticket as usize];
        if t.state
            .compare_exchange(PENDING, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            // The poller recycles the ticket when the outcome arrives.
            return;
        }
        // DONE: take and drop the outcome here.
        let _ = self.try_take();
    }
}

/// Why [`Client::call`] did not submit.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Every ticket is in use.
    #[error("no free call ticket")]
    NoTicket(Box<CallRequest>),
    /// The poller's mailbox refused the message (full, or the poller is gone); the
    /// request comes back.
    #[error("poller mailbox refused the call")]
    Mailbox(Option<Box<CallRequest>>),
}

/// A requester's face for application threads: cheap to clone, `Send + Sync`.
#[derive(Clone)]
pub struct Client {
    table: Arc<CallTable>,
    handle: PollerHandle<ConnMsg>,
    task: TaskId,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client").field("task", &self.task).finish()
    }
}

impl Client {
    /// A client of the requester task `task`, added to the poller behind `handle`, that
    /// shares `table` with it.
    pub fn new(handle: PollerHandle<ConnMsg>, task: TaskId, table: Arc<CallTable>) -> Self {
        Client {
            table,
            handle,
            task,
        }
    }

    /// Submits `req` from this thread.
    pub fn call(&self, req: CallRequest) -> Result<PendingCall, ClientError> {
        let Some(ticket) = self.table.free.pop() else {
            return Err(ClientError::NoTicket(Box::new(req)));
        };
        let t = &self.table.tickets[ticket as usize];
        // SAFETY: the ticket is FREE and off the free list: only we touch it.
        unsafe { *t.waiter.get() = Some(std::thread::current()) };
        t.state.store(PENDING, Ordering::Release);
        match self.handle.send(self.task, ConnMsg::Submit { req, ticket }) {
            Ok(()) => Ok(PendingCall {
                table: self.table.clone(),
                ticket,
                taken: false,
            }),
            Err(e) => {
                t.state.store(FREE, Ordering::Release);
                let _ = self.table.free.push(ticket);
                match e.into_inner() {
                    ConnMsg::Submit { req, .. } => Err(ClientError::Mailbox(Some(Box::new(req)))),
                    _ => Err(ClientError::Mailbox(None)),
                }
            }
        }
    }

    /// Asks the requester to run a health check.
    pub fn health_check(&self) -> Result<(), SendErrorKind> {
        self.handle
            .send(self.task, ConnMsg::HealthCheck)
            .map_err(|e| e.kind())
    }

    /// Asks the requester to close.
    pub fn close(&self) -> Result<(), SendErrorKind> {
        self.handle
            .send(self.task, ConnMsg::Close)
            .map_err(|e| e.kind())
    }

    /// An inline-sized registered buffer for a call message.
    pub fn alloc_msg(&self) -> Result<RegBuf, RegBufError> {
        RegBuf::from_pool(&self.table.send)
    }

    /// A large registered buffer from the application's pool.
    pub fn alloc_large(&self) -> Result<RegBuf, RegBufError> {
        match &self.table.app {
            Some(app) => RegBuf::from_pool(app),
            None => Err(RegBufError::Exhausted),
        }
    }

    /// The connection's credit table.
    pub fn credits(&self) -> &Arc<CreditTable> {
        &self.table.credits
    }

    /// The call tickets.
    pub fn table(&self) -> &Arc<CallTable> {
        &self.table
    }
}

/// A requester connection run as a poller task.
pub struct RequesterTask<P: Provider> {
    conn: Requester<P>,
    table: Arc<CallTable>,
    timer: Option<(Instant, TimerId)>,
    park_while_busy: bool,
}

impl<P: Provider> RequesterTask<P> {
    /// Wraps an (ideally established) connection, with `tickets` call tickets for
    /// application threads. Hand the table to [`Client::new`].
    pub fn new(conn: Requester<P>, tickets: usize) -> (Self, Arc<CallTable>) {
        let table = Arc::new(CallTable::new(
            tickets,
            conn.resources().pools().send.clone(),
            conn.resources().app_pool().cloned(),
            conn.credits().clone(),
        ));
        (
            RequesterTask {
                conn,
                table: table.clone(),
                timer: None,
                park_while_busy: false,
            },
            table,
        )
    }

    /// Lets the poller park (for at most its idle policy's maximum) even while calls
    /// are in flight: replies are then noticed up to that much later. Off by default;
    /// for shared machines and tests.
    pub fn park_while_busy(mut self, yes: bool) -> Self {
        self.park_while_busy = yes;
        self
    }

    fn route(&mut self) {
        while let Some(o) = self.conn.poll_outcome() {
            if o.tag & TICKET_TAG != 0 {
                self.table.complete((o.tag & !TICKET_TAG) as u32, o);
            }
            // Calls submitted without a ticket have nobody to hand an outcome to; the
            // outcome (and its buffers) is dropped.
        }
    }
}

impl<P: Provider> Task<ConnMsg> for RequesterTask<P>
where
    Requester<P>: Send,
{
    fn poll(&mut self, ctx: &mut PollCtx<'_>) -> usize {
        let now = ctx.now();
        let work = self.conn.poll(now);
        self.route();
        // Keep a poller timer at the core's next deadline, so a parked poller wakes for it.
        let next = self.conn.next_timeout();
        if next != self.timer.map(|t| t.0) {
            if let Some((_, id)) = self.timer.take() {
                ctx.cancel_timer(id);
            }
            if let Some(at) = next {
                if let Ok(id) = ctx.arm_timer_at(at, 0) {
                    self.timer = Some((at, id));
                }
            }
        }
        if self.conn.state() == ConnState::Closed {
            ctx.remove_self();
        }
        work
    }

    fn on_message(&mut self, msg: ConnMsg, ctx: &mut PollCtx<'_>) {
        match msg {
            ConnMsg::Submit { req, ticket } => {
                let tag = TICKET_TAG | u64::from(ticket);
                if let Err(e) = self.conn.submit(req, tag) {
                    self.table.complete(ticket, refused(tag, e));
                }
            }
            ConnMsg::HealthCheck => {
                let _ = self.conn.health_check();
            }
            ConnMsg::Close => self.conn.close(),
        }
        let _ = ctx;
    }

    fn on_timer(&mut self, _token: u64, _ctx: &mut PollCtx<'_>) {
        // The next poll handles whatever is due.
        self.timer = None;
    }

    fn before_park(&mut self) -> bool {
        // Completion queues have no wake descriptor here: keep polling while anything
        // is in flight (unless told a bounded park is fine).
        self.park_while_busy || (self.conn.active() == 0 && self.conn.queued() == 0)
    }

    fn on_remove(&mut self) {
        // Give calls in flight their outcome: close, and poll (briefly: removal must
        // not stall the poller) until the flushes are back. Calls still pending after
        // that are reported to their callers by their own deadlines.
        self.conn.close();
        let end = Instant::now() + Duration::from_millis(50);
        while self.conn.state() != ConnState::Closed && Instant::now() < end {
            let now = self.conn.clock().now();
            self.conn.poll(now);
            self.route();
        }
        self.route();
    }
}

/// The outcome of a call the requester refused.
fn refused(tag: u64, e: SubmitError) -> Outcome {
    Outcome::unsent(tag, 0, *e.request, CallStatus::Refused(e.reason))
}

/// A server run as a poller task. By default it never lets its poller park: a
/// responder learns of an arriving call only by polling.
pub struct ResponderTask<P: Provider, S, F> {
    server: Responder<P, S, F>,
    allow_park: bool,
}

impl<P: Provider, S, F> ResponderTask<P, S, F> {
    /// Wraps `server`.
    pub fn new(server: Responder<P, S, F>) -> Self {
        ResponderTask {
            server,
            allow_park: false,
        }
    }

    /// Lets the poller park (for at most its idle policy's maximum), trading reply
    /// latency for a free core; for shared machines and tests.
    pub fn allow_park(mut self, yes: bool) -> Self {
        self.allow_park = yes;
        self
    }
}

impl<P, S, F> Task<ConnMsg> for ResponderTask<P, S, F>
where
    P: Provider,
    S: Service,
    F: FnMut() -> Option<S>,
    Responder<P, S, F>: Send,
{
    fn poll(&mut self, ctx: &mut PollCtx<'_>) -> usize {
        self.server.poll(ctx.now())
    }

    fn before_park(&mut self) -> bool {
        self.allow_park
    }
}
