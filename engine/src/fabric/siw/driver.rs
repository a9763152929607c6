//! The device engine: one mio `Poll` (polled with a zero timeout, never waiting), the
//! listeners and connections, the completion rings and the event queues. It runs only
//! when a completion queue or the connection manager of the device is polled, on the
//! polling thread.

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use mio::net::TcpListener;
use mio::{Events, Interest, Poll, Token};

use super::cm::CmTable;
use super::config::SiwConfig;
use super::conn::{Conn, Ctx, Keep, Phase};
use super::cq::CqTable;
use super::device::{DeviceShared, Retire};
use super::engine::Engine;
use super::qp::{QpShared, SiwQp};
use super::{sock, SiwProvider, MAX_SGE};
use crate::fabric::FabricError;
use crate::fabric::QpInit;
use crate::fabric::{CmEvent, ConnId};
use crate::fabric::{QpState, RNR_RETRY_INFINITE};
use crate::iwarp::handshake::{Initiator, InitiatorConfig, Responder, ResponderConfig};

/// Connection ids are unique in the process, across devices.
static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

const EVENTS: usize = 256;

/// At most this many running connections are read speculatively, without asking epoll
/// first (see [`Driver::progress`]); with more, one `epoll_wait` is cheaper than a
/// `recv` on each.
const DIRECT_MAX_CONNS: usize = 4;

/// While reading speculatively, epoll is still asked every this many progress rounds,
/// for what only it reports: listeners with connections to accept, hang-ups of idle
/// sockets. A new connection waits at most this many polls to be accepted.
const EPOLL_EVERY: u32 = 32;

struct Listener {
    sock: TcpListener,
    cm: usize,
    ready: bool,
}

fn conn_token(slot: usize) -> Token {
    Token(slot << 1)
}

fn listener_token(slot: usize) -> Token {
    Token((slot << 1) | 1)
}

fn os(op: &'static str) -> impl FnOnce(io::Error) -> FabricError {
    move |err| FabricError::Os { op, err }
}

pub(crate) struct Driver {
    poll: Poll,
    events: Events,
    conns: Vec<Option<Box<Conn>>>,
    free: Vec<usize>,
    listeners: Vec<Option<Listener>>,
    pub(crate) cqs: CqTable,
    pub(crate) cms: CmTable,
    cfg: SiwConfig,
    dev: Weak<DeviceShared>,
    /// Every socket is a running connection not waiting for room, and there are few:
    /// the next data round reads them directly instead of asking epoll (set at the end
    /// of each round).
    direct: bool,
    /// Progress rounds since epoll was last asked.
    since_epoll: u32,
    /// The stall watchdog, when the environment asks for it (diagnostics).
    watch: Option<super::watch::Watch>,
}

impl Driver {
    pub(crate) fn new(poll: Poll, cfg: &SiwConfig, dev: Weak<DeviceShared>) -> Driver {
        // Read the environment now, not at a connection's first event inside a poll.
        super::watch::events_on();
        Driver {
            poll,
            events: Events::with_capacity(EVENTS),
            conns: Vec::new(),
            free: Vec::new(),
            listeners: Vec::new(),
            cqs: CqTable::default(),
            cms: CmTable::default(),
            cfg: cfg.clone(),
            dev,
            direct: false,
            since_epoll: 0,
            watch: super::watch::Watch::from_env(),
        }
    }

    /// One round of progress: dropped handles, readiness, then every connection. With
    /// `data` false (connection-manager polls) connections whose FPDU stream is running
    /// are left for the completion queues: placing a peer's data and reporting its
    /// completion then happen in the same `poll`, so an application that reads a receive
    /// buffer right after its completion never finds the next message already in it.
    pub(crate) fn progress(&mut self, dev: &DeviceShared, data: bool) {
        while let Some(r) = dev.next_retired() {
            self.retire(r);
        }
        // Speculative reads (issue 14): with a few running connections and nothing only
        // epoll can tell (a handshake's progress, room in a full socket), a round reads
        // each connection directly. An idle round then costs one `recv` per connection
        // (EAGAIN) instead of an `epoll_wait`, and a message costs one `recv` instead of
        // an `epoll_wait` plus a `recv`. Readiness events queued meanwhile are harmless:
        // they only make a later round try one read more.
        let direct = data && self.direct;
        self.since_epoll += 1;
        if (!direct || self.since_epoll >= EPOLL_EVERY)
            && self
                .poll
                .poll(&mut self.events, Some(Duration::ZERO))
                .is_ok()
        {
            self.since_epoll = 0;
            for ev in self.events.iter() {
                let t = ev.token().0;
                if t & 1 == 1 {
                    if let Some(Some(l)) = self.listeners.get_mut(t >> 1) {
                        l.ready = true;
                    }
                } else if let Some(Some(c)) = self.conns.get_mut(t >> 1) {
                    c.readable |= ev.is_readable() || ev.is_read_closed() || ev.is_error();
                    c.writable |= ev.is_writable() || ev.is_write_closed() || ev.is_error();
                    // Sticky: the end of the stream raises no event of its own once
                    // this one is taken (see `Conn::drained_if_short`).
                    c.read_closed |= ev.is_read_closed() || ev.is_error();
                }
            }
        }
        self.accept_incoming();
        // Read once per progress, and only while some connection is in its handshake.
        let mut now: Option<Instant> = None;
        let mut running = 0;
        let mut need_epoll = false;
        for slot in 0..self.conns.len() {
            let Some(c) = self.conns[slot].as_mut() else {
                continue;
            };
            if !data && matches!(c.phase, Phase::Running | Phase::Closed) {
                continue;
            }
            let guess = direct && matches!(c.phase, Phase::Running);
            c.speculative = guess && !c.readable;
            if guess {
                c.readable = true;
            }
            let mut ctx = Ctx {
                keys: &dev.keys,
                cqs: &mut self.cqs,
                cms: &mut self.cms,
                cfg: &self.cfg,
                dev: &self.dev,
                slot,
            };
            let mut keep = c.step(&mut ctx);
            if keep == Keep::Yes && c.in_handshake() {
                let t = *now.get_or_insert_with(Instant::now);
                if t.saturating_duration_since(c.started) >= self.cfg.handshake_timeout {
                    keep = c.expire_handshake(&mut ctx);
                }
            }
            if keep == Keep::Remove {
                self.remove_conn(slot);
                continue;
            }
            if c.sock.is_some() {
                running += 1;
                need_epoll |= !matches!(c.phase, Phase::Running)
                    || (!c.writable && c.engine.as_ref().is_some_and(Engine::tx_waiting));
            }
        }
        if data {
            self.direct = !need_epoll && running <= DIRECT_MAX_CONNS;
        }
        if let Some(w) = self.watch.as_mut() {
            w.check(&self.conns);
        }
    }

    /// `post_send`'s immediate write (see `qp.rs`): the connection in `slot`, if it is
    /// still `id`'s, writes a lone small Send posted to its idle transmitter.
    pub(crate) fn send_now(&mut self, slot: usize, id: ConnId, keys: &super::keys::KeyTable) {
        if let Some(Some(c)) = self.conns.get_mut(slot) {
            if c.id == id {
                c.send_now(keys);
            }
        }
    }

    fn accept_incoming(&mut self) {
        for li in 0..self.listeners.len() {
            let Some(l) = self.listeners[li].as_mut() else {
                continue;
            };
            if !l.ready {
                continue;
            }
            while let Some(l) = self.listeners[li].as_mut() {
                match l.sock.accept() {
                    Ok((s, _)) => {
                        let pending = self
                            .conns
                            .iter()
                            .flatten()
                            .filter(|c| matches!(c.phase, Phase::AwaitRequest(_)))
                            .count();
                        if pending >= self.cfg.max_pending_handshakes {
                            // Closed unread: a peer that opens connections and stays
                            // silent holds at most this many, each a receive buffer.
                            drop(s);
                            continue;
                        }
                        let cm = l.cm;
                        let _ = s.set_nodelay(true);
                        if let Some(k) = &self.cfg.keepalive {
                            let _ = sock::set_keepalive(s.as_raw_fd(), k);
                        }
                        let id = ConnId(NEXT_CONN.fetch_add(1, Ordering::Relaxed));
                        let resp = Responder::new(ResponderConfig {
                            crc: self.cfg.crc,
                            ird: self.cfg.ird,
                            ord: self.cfg.ord,
                        });
                        let mut c = Conn::new(
                            id,
                            cm,
                            Some(s),
                            Phase::AwaitRequest(Box::new(resp)),
                            &self.cfg,
                        );
                        // The request may already be waiting.
                        c.readable = true;
                        if self.insert_conn(c).is_err() {
                            continue;
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        l.ready = false;
                        break;
                    }
                }
            }
        }
    }

    fn insert_conn(&mut self, c: Conn) -> Result<usize, FabricError> {
        let slot = self.free.pop().unwrap_or(self.conns.len());
        if let Some(e) = c.engine.as_ref() {
            e.qp.slot.store(slot, Ordering::Relaxed);
        }
        if slot == self.conns.len() {
            self.conns.push(None);
        }
        let mut c = Box::new(c);
        if let Some(s) = c.sock.as_mut() {
            if let Err(err) = self.poll.registry().register(
                s,
                conn_token(slot),
                Interest::READABLE | Interest::WRITABLE,
            ) {
                self.free.push(slot);
                return Err(FabricError::Os {
                    op: "register a socket",
                    err,
                });
            }
        }
        self.conns[slot] = Some(c);
        Ok(slot)
    }

    fn remove_conn(&mut self, slot: usize) {
        if let Some(mut c) = self.conns.get_mut(slot).and_then(Option::take) {
            super::watch::event(&c, "removed");
            if let Some(s) = c.sock.as_mut() {
                let _ = self.poll.registry().deregister(s);
            }
            if let Some(e) = &c.engine {
                let caps = e.qp.caps;
                let (send_cq, recv_cq) = (e.send_cq, e.recv_cq);
                if let Some(cq) = self.cqs.get(send_cq) {
                    cq.unreserve(u64::from(caps.max_send_wr));
                }
                if let Some(cq) = self.cqs.get(recv_cq) {
                    cq.unreserve(e.qp.recv_reservation());
                }
            }
            self.free.push(slot);
        }
    }

    fn find(&self, conn: ConnId) -> Option<usize> {
        self.conns
            .iter()
            .position(|c| c.as_ref().is_some_and(|c| c.id == conn))
    }

    fn retire(&mut self, r: Retire) {
        match r {
            Retire::Qp(conn) => {
                if let Some(slot) = self.find(conn) {
                    self.remove_conn(slot);
                }
            }
            Retire::Cq(id) => self.cqs.remove(id),
            Retire::Trim(conn) => {
                if let Some(slot) = self.find(conn) {
                    if let Some(Some(c)) = self.conns.get_mut(slot) {
                        c.trim_rx();
                        if let (Some(e), Some(dev)) = (c.engine.as_ref(), self.dev.upgrade()) {
                            e.release_posted_receives(&dev.keys);
                        }
                    }
                }
            }
            Retire::Reservation { cq, n } => {
                if let Some(cq) = self.cqs.get(cq) {
                    cq.unreserve(n);
                }
            }
            Retire::Cm(id) => {
                self.cms.remove(id);
                for l in &mut self.listeners {
                    if l.as_ref().is_some_and(|l| l.cm == id) {
                        if let Some(mut l) = l.take() {
                            let _ = self.poll.registry().deregister(&mut l.sock);
                        }
                    }
                }
            }
            Retire::Request(slot, conn) => {
                let cfg = self.cfg.clone();
                if let Some(Some(c)) = self.conns.get_mut(slot) {
                    if c.id == conn && matches!(c.phase, Phase::Deciding(_)) {
                        c.reject_now(&cfg, &[]);
                    }
                }
            }
        }
    }

    pub(crate) fn listen(&mut self, cm: usize, addr: &SocketAddr) -> Result<(), FabricError> {
        let mut sock = sock::listen(addr, self.cfg.sock_opts()).map_err(os("listen"))?;
        let slot = self
            .listeners
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.listeners.len());
        if slot == self.listeners.len() {
            self.listeners.push(None);
        }
        self.poll
            .registry()
            .register(&mut sock, listener_token(slot), Interest::READABLE)
            .map_err(os("register a listener"))?;
        self.listeners[slot] = Some(Listener {
            sock,
            cm,
            ready: true,
        });
        Ok(())
    }

    pub(crate) fn listen_addr(&self, cm: usize) -> Option<SocketAddr> {
        self.listeners
            .iter()
            .flatten()
            .find(|l| l.cm == cm)
            .and_then(|l| l.sock.local_addr().ok())
    }

    /// Validates `init` and builds the queue pair's shared state and engine, reserving
    /// completion-queue room.
    fn new_qp(
        &mut self,
        dev: &Arc<DeviceShared>,
        conn: ConnId,
        init: &QpInit<'_, SiwProvider>,
        state: QpState,
    ) -> Result<(Arc<QpShared>, Engine), FabricError> {
        if !Arc::ptr_eq(&init.pd.dev, dev)
            || !Arc::ptr_eq(&init.send_cq.dev, dev)
            || !Arc::ptr_eq(&init.recv_cq.dev, dev)
        {
            return Err(FabricError::WrongDevice);
        }
        let caps = init.config.caps;
        let max_wr = self.cfg.max_qp_wr;
        for (what, v, max) in [
            ("max_send_wr", caps.max_send_wr, max_wr),
            ("max_recv_wr", caps.max_recv_wr, max_wr),
            ("max_send_sge", caps.max_send_sge, MAX_SGE as u32),
            ("max_recv_sge", caps.max_recv_sge, MAX_SGE as u32),
        ] {
            if v == 0 || v > max {
                return Err(FabricError::InvalidCaps {
                    what,
                    requested: v,
                    max,
                });
            }
        }
        if init.config.rnr_retry > RNR_RETRY_INFINITE {
            return Err(FabricError::InvalidCaps {
                what: "rnr_retry",
                requested: u32::from(init.config.rnr_retry),
                max: u32::from(RNR_RETRY_INFINITE),
            });
        }
        let (scq, rcq) = (init.send_cq.id, init.recv_cq.id);
        let srq = match init.srq {
            Some(q) if !Arc::ptr_eq(&q.shared.dev, dev) => return Err(FabricError::WrongDevice),
            Some(q) if q.shared.cq != rcq => {
                return Err(FabricError::SrqMismatch(
                    "the receive completion queue is not the one the shared receive queue was created for",
                ))
            }
            Some(q) => Some(q.shared.clone()),
            None => None,
        };
        // The shared queue reserved its receives' completions on that queue already.
        let nr = if srq.is_some() {
            0
        } else {
            u64::from(caps.max_recv_wr)
        };
        let ns = u64::from(caps.max_send_wr);
        if scq == rcq {
            self.cqs
                .get(scq)
                .ok_or(FabricError::WrongDevice)?
                .reserve(ns + nr)?;
        } else {
            self.cqs
                .get(scq)
                .ok_or(FabricError::WrongDevice)?
                .reserve(ns)?;
            let r = self
                .cqs
                .get(rcq)
                .ok_or(FabricError::WrongDevice)
                .and_then(|cq| cq.reserve(nr));
            if let Err(e) = r {
                if let Some(cq) = self.cqs.get(scq) {
                    cq.unreserve(ns);
                }
                return Err(e);
            }
        }
        let mut shared = QpShared::new(dev.alloc_qp_num(), conn, init.pd.id, caps, state);
        shared.srq = srq;
        let qp = Arc::new(shared);
        let mut engine = Engine::new(
            qp.clone(),
            scq,
            rcq,
            self.cfg.confirm_completions,
            self.cfg.ord,
            self.cfg.ird,
        );
        engine.tx.confirmation_own_write = self.cfg.confirmation_own_segment;
        engine.tx.coalesce = self.cfg.coalesce_sends;
        engine.tx.batch_message = self.cfg.batch_message_fpdus;
        engine.rx.predict = self.cfg.predict_fpdus;
        engine.memory = Some(init.pd.memory.clone());
        Ok((qp, engine))
    }

    pub(crate) fn connect(
        &mut self,
        dev: &Arc<DeviceShared>,
        cm: usize,
        addr: &SocketAddr,
        init: &QpInit<'_, SiwProvider>,
        private_data: &[u8],
    ) -> Result<SiwQp, FabricError> {
        let ini = Initiator::new(
            InitiatorConfig {
                crc: self.cfg.crc,
                revision: self.cfg.revision,
                ird: self.cfg.ird,
                ord: self.cfg.ord,
            },
            private_data,
        )
        .map_err(|_| FabricError::PrivateDataTooLong {
            len: private_data.len(),
            max: self.cfg.private_data_limits().connect,
        })?;
        let id = ConnId(NEXT_CONN.fetch_add(1, Ordering::Relaxed));
        let (qp, engine) = self.new_qp(dev, id, init, QpState::Init)?;
        let sock = sock::connect(addr, self.cfg.sock_opts());
        if let (Ok(s), Some(k)) = (&sock, &self.cfg.keepalive) {
            let _ = sock::set_keepalive(s.as_raw_fd(), k);
        }
        let failed_at_once = sock.is_err();
        let mut c = Conn::new(
            id,
            cm,
            sock.ok(),
            Phase::Connecting(Box::new(ini)),
            &self.cfg,
        );
        c.engine = Some(engine);
        if failed_at_once {
            if let Some(e) = c.engine.as_mut() {
                e.fail();
            }
            c.close();
            c.cm_open = false;
            self.cms.push(cm, CmEvent::Unreachable { conn: id });
        }
        if let Err(e) = self.insert_conn(c) {
            // Give back the reservations taken by `new_qp`.
            let caps = qp.caps;
            if let Some(cq) = self.cqs.get(init.send_cq.id) {
                cq.unreserve(u64::from(caps.max_send_wr));
            }
            if let Some(cq) = self.cqs.get(init.recv_cq.id) {
                cq.unreserve(qp.recv_reservation());
            }
            return Err(e);
        }
        Ok(SiwQp {
            shared: qp,
            dev: dev.clone(),
            peer_addr: crate::fabric::PeerAddr::Ip(*addr),
        })
    }

    pub(crate) fn accept(
        &mut self,
        dev: &Arc<DeviceShared>,
        slot: usize,
        conn: ConnId,
        init: &QpInit<'_, SiwProvider>,
        private_data: &[u8],
    ) -> Result<SiwQp, FabricError> {
        let deciding = self
            .conns
            .get(slot)
            .and_then(Option::as_ref)
            .is_some_and(|c| c.id == conn && matches!(c.phase, Phase::Deciding(_)));
        if !deciding {
            return Err(FabricError::UnknownConn(conn));
        }
        let (qp, mut engine) = self.new_qp(dev, conn, init, QpState::ReadyToReceive)?;
        let cfg = self.cfg.clone();
        let Some(c) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return Err(FabricError::UnknownConn(conn));
        };
        let Phase::Deciding(mut resp) = std::mem::replace(&mut c.phase, Phase::Closed) else {
            return Err(FabricError::UnknownConn(conn));
        };
        let reply = resp.accept(private_data);
        let (frame, est) = match reply {
            Ok((f, est)) => (f.to_vec(), est),
            Err(_) => {
                c.phase = Phase::Deciding(resp);
                return Err(FabricError::PrivateDataTooLong {
                    len: private_data.len(),
                    max: cfg.private_data_limits().accept,
                });
            }
        };
        let link = c.link(&est, &cfg);
        engine.establish(link);
        engine.qp.slot.store(slot, Ordering::Relaxed);
        c.engine = Some(engine);
        c.send_frame(&frame, &cfg);
        c.phase = Phase::Replying { accept: true };
        c.writable = true;
        Ok(SiwQp {
            shared: qp,
            dev: dev.clone(),
            peer_addr: crate::fabric::PeerAddr::Ip(c.peer),
        })
    }

    pub(crate) fn reject(
        &mut self,
        slot: usize,
        conn: ConnId,
        private_data: &[u8],
    ) -> Result<(), FabricError> {
        let cfg = self.cfg.clone();
        match self.conns.get_mut(slot).and_then(Option::as_mut) {
            Some(c) if c.id == conn && matches!(c.phase, Phase::Deciding(_)) => {
                c.reject_now(&cfg, private_data);
                c.writable = true;
                Ok(())
            }
            _ => Err(FabricError::UnknownConn(conn)),
        }
    }

    pub(crate) fn disconnect(&mut self, cm: usize, conn: ConnId) -> Result<(), FabricError> {
        let Some(slot) = self.find(conn) else {
            return Err(FabricError::UnknownConn(conn));
        };
        let Some(c) = self.conns[slot].as_mut() else {
            return Err(FabricError::UnknownConn(conn));
        };
        if !c.cm_open || c.cm != cm {
            return Err(FabricError::UnknownConn(conn));
        }
        super::watch::event(c, "disconnect asked");
        if let Some(e) = c.engine.as_mut() {
            e.qp.set_disconnected();
            e.fail();
        }
        c.report_down(&mut self.cms);
        match c.phase {
            Phase::Running | Phase::Replying { accept: true } => c.shut_write(),
            Phase::Draining | Phase::Closed => {}
            _ => c.close(),
        }
        Ok(())
    }
}
