//! The shm connection manager: a Unix seqpacket socket per connection carries the
//! REQ/REP/REJ/RTU/DREQ exchange and passes the connection segments and announcement
//! sockets. Everything is non-blocking and advanced by [`ShmCm::poll_event`].
//!
//! Closing the socket is the liveness signal: a peer that exits or drops its connection
//! manager shows up as an end-of-file, reported as `Disconnected` (or `Rejected` while
//! connecting).
//!
//! A listener admits only local users its device's [`PeerCheck`](super::PeerCheck)
//! allows (checked with `SO_PEERCRED` at accept), holds at most
//! [`ShmConfig::max_pending`] accepted sockets waiting for their REQ, and drops any
//! of them, and any connection still in its handshake, after
//! [`ShmConfig::handshake_timeout`]. The clock is read only while something is pending.
//!
//! [`ShmConfig::max_pending`]: super::ShmConfig::max_pending
//! [`ShmConfig::handshake_timeout`]: super::ShmConfig::handshake_timeout

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::arenas::Announcer;
use super::cred;
use super::device::DeviceShared;
use super::exec::{Executor, PeerLimits};
use super::msg::{Hello, Msg, MSG_MAX};
use super::qp::{QpParts, QpShared, ShmQp};
use super::segment::Segment;
use super::sock::{self, Recv, ShmAddr};
use super::ShmProvider;
use crate::fabric::FabricError;
use crate::fabric::RNR_RETRY_INFINITE;
use crate::fabric::{CmEvent, CmPrivateData, ConnId};
use crate::fabric::{ConnectionManager, QpInit};

static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

/// A connect request waiting for [`ConnectionManager::accept`] or
/// [`ConnectionManager::reject`]. Dropping it closes the socket, which the peer sees as
/// a rejection without private data.
pub struct ShmConnRequest {
    sock: OwnedFd,
    hello: Hello,
    seg: OwnedFd,
    announce: OwnedFd,
}

impl std::fmt::Debug for ShmConnRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmConnRequest")
            .field("peer_qp_num", &self.hello.qp_num)
            .field("private_data", &self.hello.private)
            .finish()
    }
}

struct Listener {
    sock: OwnedFd,
    addr: ShmAddr,
}

impl Drop for Listener {
    fn drop(&mut self) {
        sock::unlink(&self.addr);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// REQ sent, waiting for REP or REJ.
    Connecting,
    /// REP sent, waiting for RTU.
    AwaitRtu,
    Established,
}

/// An accepted socket whose REQ has not arrived yet.
struct Pending {
    sock: OwnedFd,
    since: Instant,
}

struct Conn {
    id: ConnId,
    sock: OwnedFd,
    qp: Arc<QpShared>,
    phase: Phase,
    /// When the handshake started (Connecting, AwaitRtu): it must end in time.
    since: Instant,
    /// Keeps the announcement channel alive for as long as the connection.
    _announcer: Arc<Announcer>,
}

/// A shm connection manager (event channel).
pub struct ShmCm {
    dev: Arc<DeviceShared>,
    listeners: Vec<Listener>,
    /// Accepted sockets whose REQ has not arrived yet (at most `max_pending`).
    incoming: Vec<Pending>,
    /// Our effective user id, which [`super::PeerCheck`] compares peers with.
    own_uid: u32,
    conns: Vec<Conn>,
    events: VecDeque<CmEvent<ShmConnRequest>>,
}

impl std::fmt::Debug for ShmCm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmCm")
            .field("listeners", &self.listeners.len())
            .field("conns", &self.conns.len())
            .field("pending_events", &self.events.len())
            .finish()
    }
}

fn send_msg(s: &OwnedFd, m: &Msg, fds: &[std::os::fd::BorrowedFd<'_>]) -> std::io::Result<()> {
    let mut buf = [0u8; MSG_MAX];
    let n = m.encode(&mut buf);
    sock::send(s, &buf[..n], fds)
}

impl ShmCm {
    pub(crate) fn new(dev: Arc<DeviceShared>) -> ShmCm {
        ShmCm {
            dev,
            listeners: Vec::new(),
            incoming: Vec::new(),
            own_uid: cred::own_uid(),
            conns: Vec::new(),
            events: VecDeque::new(),
        }
    }

    /// Creates the queue pair of a new connection and its announcement channel; returns
    /// the receiving end of that channel, for the peer.
    fn new_qp(
        &self,
        init: &QpInit<'_, ShmProvider>,
        conn: ConnId,
    ) -> Result<(ShmQp, Arc<Announcer>, OwnedFd), FabricError> {
        if !Arc::ptr_eq(&init.pd.dev, &self.dev)
            || init.send_cq.shared.dev_id != self.dev.id
            || init.recv_cq.shared.dev_id != self.dev.id
        {
            return Err(FabricError::WrongDevice);
        }
        let qp = ShmQp::create(QpParts {
            dev: self.dev.clone(),
            pd: init.pd.shared.clone(),
            conn,
            caps: init.config.caps,
            rnr_retry: init.config.rnr_retry,
            min_rnr_timer: init.config.min_rnr_timer,
            send_cq: init.send_cq.shared.clone(),
            recv_cq: init.recv_cq.shared.clone(),
            srq: init.srq.map(|q| q.shared.clone()),
        })?;
        let (tx, rx) = sock::pair().map_err(|err| FabricError::Os {
            op: "socketpair",
            err,
        })?;
        let announcer = Arc::new(Announcer {
            tx,
            seg: qp.shared.own.clone(),
        });
        init.pd.shared.arenas.add_announcer(&announcer)?;
        Ok((qp, announcer, rx))
    }

    fn hello(qp: &ShmQp, private: CmPrivateData) -> Hello {
        Hello {
            seg_len: qp.shared.own.len() as u64,
            qp_num: qp.shared.qp_num,
            rnr_retry: qp.shared.rnr_retry,
            private,
        }
    }

    fn link(
        qp: &QpShared,
        seg: OwnedFd,
        hello: &Hello,
        announce: OwnedFd,
    ) -> Result<(), FabricError> {
        let peer = Segment::open(seg, hello.seg_len)?;
        let cfg = &qp.dev.cfg;
        let limits = PeerLimits {
            max_arenas: cfg.max_arenas,
            max_arena_len: cfg.max_peer_arena_len,
            max_bytes: cfg.max_peer_bytes,
        };
        let exec = Executor::new(
            peer.clone(),
            announce,
            hello.rnr_retry.min(RNR_RETRY_INFINITE),
            limits,
        );
        qp.link(exec, peer)
    }

    /// True when the local user at the other end of `s` may connect.
    fn admitted(&self, s: &OwnedFd) -> bool {
        cred::peer_uid(s).is_ok_and(|uid| self.dev.cfg.peer_check.allows(self.own_uid, uid))
    }

    fn accept_incoming(&mut self) -> Result<(), FabricError> {
        let max_pending = self.dev.cfg.max_pending as usize;
        let mut now = None;
        for l in &self.listeners {
            while let Some(s) =
                sock::accept(&l.sock).map_err(|err| FabricError::Os { op: "accept", err })?
            {
                // Refused here by closing: a peer of another user, or one too many
                // waiting for their REQ. Either sees a rejection without private data.
                if self.incoming.len() < max_pending && self.admitted(&s) {
                    let since = *now.get_or_insert_with(Instant::now);
                    self.incoming.push(Pending { sock: s, since });
                }
            }
        }
        if self.incoming.is_empty() {
            return Ok(());
        }
        let now = *now.get_or_insert_with(Instant::now);
        let timeout = self.dev.cfg.handshake_timeout;
        let mut buf = [0u8; MSG_MAX];
        let mut i = 0;
        while i < self.incoming.len() {
            match sock::recv(&self.incoming[i].sock, &mut buf) {
                Ok(Recv::WouldBlock) => {
                    if now.duration_since(self.incoming[i].since) >= timeout {
                        // Silent for too long: drop it, freeing its place.
                        self.incoming.swap_remove(i);
                    } else {
                        i += 1;
                    }
                }
                Ok(Recv::Msg(n, mut fds)) => {
                    let s = self.incoming.swap_remove(i).sock;
                    if let (Ok(Msg::Req(hello)), 2) = (Msg::decode(&buf[..n]), fds.len()) {
                        if let (Some(seg), Some(announce)) = (fds.take(0), fds.take(1)) {
                            self.events.push_back(CmEvent::ConnectRequest {
                                request: ShmConnRequest {
                                    sock: s,
                                    hello,
                                    seg,
                                    announce,
                                },
                                private_data: hello.private,
                            });
                        }
                    }
                    // Anything else is not a shm peer: dropping the socket refuses it.
                }
                Ok(Recv::Eof) | Err(_) => {
                    self.incoming.swap_remove(i);
                }
            }
        }
        Ok(())
    }

    /// The connection at `i` ended abnormally (socket closed, garbage received).
    fn lost(&mut self, i: usize) {
        let c = self.conns.swap_remove(i);
        if c.phase == Phase::Connecting {
            c.qp.set_error();
            self.events.push_back(CmEvent::Rejected {
                conn: c.id,
                private_data: CmPrivateData::EMPTY,
            });
        } else {
            c.qp.set_disconnected();
            self.events.push_back(CmEvent::Disconnected { conn: c.id });
        }
    }

    /// Handles message `m` on connection `i`; returns false if the connection is gone.
    fn handle(&mut self, i: usize, m: Msg, mut fds: sock::Fds) -> bool {
        let (id, phase) = (self.conns[i].id, self.conns[i].phase);
        match (phase, m) {
            (Phase::Connecting, Msg::Rep(hello)) => {
                let c = &self.conns[i];
                let linked = match (fds.take(0), fds.take(1)) {
                    (Some(seg), Some(ann)) => Self::link(&c.qp, seg, &hello, ann),
                    _ => Err(FabricError::Protocol("REP without descriptors")),
                };
                if linked.is_err() || send_msg(&c.sock, &Msg::Rtu, &[]).is_err() {
                    self.lost(i);
                    return false;
                }
                c.qp.set_rts();
                self.conns[i].phase = Phase::Established;
                self.events.push_back(CmEvent::Established {
                    conn: id,
                    private_data: hello.private,
                });
                true
            }
            (Phase::Connecting, Msg::Rej(p)) => {
                let c = self.conns.swap_remove(i);
                c.qp.set_error();
                self.events.push_back(CmEvent::Rejected {
                    conn: id,
                    private_data: p,
                });
                false
            }
            (Phase::AwaitRtu, Msg::Rtu) => {
                self.conns[i].qp.set_rts();
                self.conns[i].phase = Phase::Established;
                self.events.push_back(CmEvent::Established {
                    conn: id,
                    private_data: CmPrivateData::EMPTY,
                });
                true
            }
            (Phase::AwaitRtu | Phase::Established, Msg::Dreq) => {
                let c = self.conns.swap_remove(i);
                c.qp.set_disconnected();
                self.events.push_back(CmEvent::Disconnected { conn: id });
                false
            }
            _ => {
                self.lost(i);
                false
            }
        }
    }

    fn progress_conns(&mut self) {
        let mut buf = [0u8; MSG_MAX];
        let mut now = None;
        let timeout = self.dev.cfg.handshake_timeout;
        let mut i = 0;
        while i < self.conns.len() {
            let c = &self.conns[i];
            if c.qp.destroyed.load(Ordering::Acquire) {
                // The queue pair was dropped: that ends the connection, quietly here.
                let _ = send_msg(&c.sock, &Msg::Dreq, &[]);
                self.conns.swap_remove(i);
                continue;
            }
            match sock::recv(&c.sock, &mut buf) {
                Ok(Recv::WouldBlock) if c.phase != Phase::Established => {
                    let now = *now.get_or_insert_with(Instant::now);
                    if now.duration_since(c.since) >= timeout {
                        // The peer never finished the handshake.
                        self.lost(i);
                    } else {
                        i += 1;
                    }
                }
                Ok(Recv::WouldBlock) => i += 1,
                Ok(Recv::Msg(n, fds)) => match Msg::decode(&buf[..n]) {
                    // On success stay on this connection: more messages may be queued.
                    Ok(m) => {
                        self.handle(i, m, fds);
                    }
                    Err(_) => self.lost(i),
                },
                Ok(Recv::Eof) | Err(_) => self.lost(i),
            }
        }
    }
}

impl ConnectionManager for ShmCm {
    type P = ShmProvider;

    fn listen(&mut self, addr: &ShmAddr) -> Result<(), FabricError> {
        let s = sock::listen(addr)?;
        self.listeners.push(Listener {
            sock: s,
            addr: addr.clone(),
        });
        Ok(())
    }

    fn connect(
        &mut self,
        addr: &ShmAddr,
        init: QpInit<'_, ShmProvider>,
        private_data: &[u8],
    ) -> Result<ShmQp, FabricError> {
        let private = CmPrivateData::new(private_data)?;
        let id = ConnId(NEXT_CONN.fetch_add(1, Ordering::Relaxed));
        let (mut qp, announcer, rx) = self.new_qp(&init, id)?;
        let sent = match sock::connect(addr)? {
            Ok(s) => {
                qp.peer_addr = peer_of(&s);
                let own = qp.shared.own.fd().ok_or(FabricError::NotShareable)?;
                let m = Msg::Req(Self::hello(&qp, private));
                send_msg(&s, &m, &[own, rx.as_fd()]).map(|()| s)
            }
            Err(e) => Err(e),
        };
        match sent {
            Ok(s) => self.conns.push(Conn {
                id,
                sock: s,
                qp: qp.shared.clone(),
                phase: Phase::Connecting,
                since: Instant::now(),
                _announcer: announcer,
            }),
            Err(_) => {
                qp.shared.set_error();
                self.events.push_back(CmEvent::Unreachable { conn: id });
            }
        }
        Ok(qp)
    }

    fn accept(
        &mut self,
        request: ShmConnRequest,
        init: QpInit<'_, ShmProvider>,
        private_data: &[u8],
    ) -> Result<ShmQp, FabricError> {
        let private = CmPrivateData::new(private_data)?;
        let id = ConnId(NEXT_CONN.fetch_add(1, Ordering::Relaxed));
        let (mut qp, announcer, rx) = self.new_qp(&init, id)?;
        qp.peer_addr = peer_of(&request.sock);
        Self::link(&qp.shared, request.seg, &request.hello, request.announce)?;
        qp.shared.set_rtr();
        let own = qp.shared.own.fd().ok_or(FabricError::NotShareable)?;
        let m = Msg::Rep(Self::hello(&qp, private));
        send_msg(&request.sock, &m, &[own, rx.as_fd()]).map_err(|err| FabricError::Os {
            op: "send REP",
            err,
        })?;
        self.conns.push(Conn {
            id,
            sock: request.sock,
            qp: qp.shared.clone(),
            phase: Phase::AwaitRtu,
            since: Instant::now(),
            _announcer: announcer,
        });
        Ok(qp)
    }

    fn reject(&mut self, request: ShmConnRequest, private_data: &[u8]) -> Result<(), FabricError> {
        let private = CmPrivateData::new(private_data)?;
        send_msg(&request.sock, &Msg::Rej(private), &[]).map_err(|err| FabricError::Os {
            op: "send REJ",
            err,
        })
    }

    fn disconnect(&mut self, conn: ConnId) -> Result<(), FabricError> {
        let i = self
            .conns
            .iter()
            .position(|c| c.id == conn)
            .ok_or(FabricError::UnknownConn(conn))?;
        let c = self.conns.swap_remove(i);
        // The peer also learns from the socket closing; the DREQ just says it was on
        // purpose.
        let _ = send_msg(&c.sock, &Msg::Dreq, &[]);
        c.qp.set_disconnected();
        self.events.push_back(CmEvent::Disconnected { conn });
        Ok(())
    }

    fn poll_event(&mut self) -> Result<Option<CmEvent<ShmConnRequest>>, FabricError> {
        if self.events.is_empty() {
            self.accept_incoming()?;
            self.progress_conns();
        }
        Ok(self.events.pop_front())
    }
}

impl Drop for ShmCm {
    fn drop(&mut self) {
        for c in &self.conns {
            c.qp.set_disconnected();
        }
    }
}

/// The process at the other end of a connection socket, or `Unknown` when the kernel
/// does not say.
fn peer_of(s: &OwnedFd) -> crate::fabric::PeerAddr {
    cred::peer_cred(s).map_or(crate::fabric::PeerAddr::Unknown, |(pid, uid)| {
        crate::fabric::PeerAddr::Local { pid, uid }
    })
}
