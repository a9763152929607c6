//! The connection manager's protocol inside the world: listen, connect, accept,
//! reject, disconnect, the messages between the sides (request, reply, ready-to-use,
//! reject, disconnect) and connection-killing faults.

use super::lifecycle::QpSpec;
use super::slab::Idx;
use super::state::{CmMsg, CmMsgKind, CmSlot, ConnSide, PendingEvent, Phase};
use super::trace::{CmTrace, FaultTrace, TraceKind};
use super::world::WorldState;
use super::SimAddr;
use crate::fabric::FabricError;
use crate::fabric::QpState;
use crate::fabric::{CmPrivateData, ConnId};

use std::collections::VecDeque;

impl WorldState {
    pub(super) fn create_cm(&mut self, device: u32) -> Idx {
        self.cms.insert(CmSlot {
            device,
            events: VecDeque::new(),
        })
    }

    /// The connection manager's handle was dropped: its listeners go, unanswered
    /// requests are rejected and its connections are disconnected.
    pub(super) fn destroy_cm(&mut self, cm: Idx) {
        self.listeners.retain(|(_, c)| *c != cm);
        let mine: Vec<(u64, Phase)> = self
            .conns
            .iter()
            .filter(|(_, s)| s.cm == cm)
            .map(|(id, s)| (*id, s.phase))
            .collect();
        for (id, phase) in mine {
            match phase {
                Phase::Requested => {
                    let _ = self.reject(cm, ConnId(id), CmPrivateData::EMPTY);
                }
                Phase::Closed => {}
                _ => self.close_side(ConnId(id), false),
            }
        }
        self.cms.remove(cm);
    }

    pub(super) fn listen(&mut self, cm: Idx, addr: SimAddr) -> Result<(), FabricError> {
        if self.listeners.iter().any(|(a, _)| *a == addr) {
            return Err(FabricError::BadAddress("address already in use"));
        }
        self.listeners.push((addr, cm));
        Ok(())
    }

    pub(super) fn connect(
        &mut self,
        cm: Idx,
        addr: SimAddr,
        spec: QpSpec,
        data: CmPrivateData,
    ) -> Result<(Idx, ConnId), FabricError> {
        self.check_cm(cm, spec.device)?;
        let conn = self.new_conn_id();
        let q = self.create_qp(spec, QpState::Init, conn)?;
        self.conns.insert(
            conn.0,
            ConnSide {
                cm,
                qp: Some(q),
                peer: None,
                phase: Phase::Connecting,
                last_msg_at: 0,
            },
        );
        self.send_cm(
            None,
            CmMsgKind::Req {
                from: conn,
                addr,
                data,
            },
        );
        Ok((q, conn))
    }

    pub(super) fn accept(
        &mut self,
        cm: Idx,
        request: ConnId,
        spec: QpSpec,
        data: CmPrivateData,
    ) -> Result<(Idx, ConnId), FabricError> {
        self.check_cm(cm, spec.device)?;
        let active = match self.conns.get(&request.0) {
            Some(s) if s.cm == cm && s.phase == Phase::Requested => s.peer,
            _ => return Err(FabricError::UnknownConn(request)),
        };
        let q = self.create_qp(spec, QpState::ReadyToReceive, request)?;
        let active_qp = active
            .and_then(|a| self.conns.get(&a.0))
            .filter(|s| s.phase == Phase::Connecting)
            .and_then(|s| s.qp);
        if let Some(qp) = self.qps.get_mut(q) {
            qp.peer = active_qp;
        }
        if let Some(s) = self.conns.get_mut(&request.0) {
            s.qp = Some(q);
            s.phase = Phase::Accepted;
        }
        if let Some(a) = active {
            self.send_cm(Some(a), CmMsgKind::Rep { to: a, data });
        }
        Ok((q, request))
    }

    pub(super) fn reject(
        &mut self,
        cm: Idx,
        request: ConnId,
        data: CmPrivateData,
    ) -> Result<(), FabricError> {
        let active = match self.conns.get_mut(&request.0) {
            Some(s) if s.cm == cm && s.phase == Phase::Requested => {
                s.phase = Phase::Closed;
                s.peer
            }
            _ => return Err(FabricError::UnknownConn(request)),
        };
        if let Some(a) = active {
            self.send_cm(Some(a), CmMsgKind::Rej { to: a, data });
        }
        Ok(())
    }

    pub(super) fn disconnect(&mut self, cm: Idx, conn: ConnId) -> Result<(), FabricError> {
        match self.conns.get(&conn.0) {
            Some(s)
                if s.cm == cm
                    && matches!(
                        s.phase,
                        Phase::Connecting | Phase::Accepted | Phase::Established
                    ) => {}
            _ => return Err(FabricError::UnknownConn(conn)),
        }
        self.close_side(conn, true);
        Ok(())
    }

    fn check_cm(&self, cm: Idx, device: u32) -> Result<(), FabricError> {
        match self.cms.get(cm) {
            Some(c) if c.device == device => Ok(()),
            _ => Err(FabricError::WrongDevice),
        }
    }

    /// Ends this side now (its queue pair flushes and becomes disconnected) and tells
    /// the peer.
    pub(super) fn close_side(&mut self, conn: ConnId, report: bool) {
        let Some(s) = self.conns.get_mut(&conn.0) else {
            return;
        };
        if s.phase == Phase::Closed {
            return;
        }
        s.phase = Phase::Closed;
        let (cm, qp, peer) = (s.cm, s.qp, s.peer);
        if let Some(q) = qp {
            self.qp_error(q);
            if let Some(x) = self.qps.get_mut(q) {
                x.state = QpState::Disconnected;
            }
        }
        if report {
            self.push_event(cm, PendingEvent::Disconnected { conn });
        }
        if let Some(p) = peer {
            self.notify_disconnect(p);
        }
    }

    /// The peer side learns that the connection is gone: its queue pair fails at once
    /// (nothing more arrives), and the event follows the network delay.
    fn notify_disconnect(&mut self, to: ConnId) {
        let Some(s) = self.conns.get(&to.0) else {
            return;
        };
        // A request nobody answered yet is not a connection; accepting it later finds
        // the active side gone and reports the disconnect then.
        if matches!(s.phase, Phase::Closed | Phase::Requested) {
            return;
        }
        if let Some(q) = s.qp {
            self.qp_error(q);
        }
        self.send_cm(Some(to), CmMsgKind::Disc { to });
    }

    /// Fault: the connection dies under both sides (both queue pairs fail now, both
    /// managers report `Disconnected` after the network delay). False if there was
    /// nothing to kill.
    pub(super) fn kill_connection(&mut self, conn: ConnId) -> bool {
        let Some(s) = self.conns.get(&conn.0) else {
            return false;
        };
        if matches!(s.phase, Phase::Closed | Phase::Requested) {
            return false;
        }
        let peer = s.peer;
        let num = s.qp.and_then(|q| self.qps.get(q)).map_or(0, |x| x.num);
        self.stats.faults_injected += 1;
        self.stats.connections_dropped += 1;
        self.record(TraceKind::Fault(FaultTrace::DropConnection), num, conn.0, 0);
        self.notify_disconnect(conn);
        if let Some(p) = peer {
            self.notify_disconnect(p);
        }
        true
    }

    /// Finds the connection side `conn` (either side's id).
    pub(super) fn conn_exists(&self, conn: ConnId) -> bool {
        self.conns.contains_key(&conn.0)
    }

    /// The device of the manager that owns side `conn`.
    fn side_device(&self, conn: ConnId) -> Option<u32> {
        let s = self.conns.get(&conn.0)?;
        Some(self.cms.get(s.cm)?.device)
    }

    /// Sends a message to side `to`, or (a connect request, `to` = `None`) to whoever
    /// listens at its address, else back to its sender's device.
    fn send_cm(&mut self, to: Option<ConnId>, kind: CmMsgKind) {
        let latency = self.latency();
        let tiebreak = self.rng.next_u64();
        let mut at = self.now.saturating_add(latency);
        let device = match (to, kind) {
            (Some(c), _) => self.side_device(c),
            (None, CmMsgKind::Req { from, addr, .. }) => self
                .listeners
                .iter()
                .find(|(a, _)| *a == addr)
                .and_then(|(_, cm)| self.cms.get(*cm))
                .map(|c| c.device)
                .or_else(|| self.side_device(from)),
            (None, _) => None,
        };
        if let Some(s) = to.and_then(|c| self.conns.get_mut(&c.0)) {
            at = at.max(s.last_msg_at);
            s.last_msg_at = at;
        }
        self.cm_msgs.push(CmMsg {
            at,
            device,
            tiebreak,
            kind,
        });
    }

    fn push_event(&mut self, cm: Idx, ev: PendingEvent) {
        let (what, conn) = match ev {
            PendingEvent::ConnectRequest { conn, .. } => (CmTrace::ConnectRequest, conn),
            PendingEvent::Established { conn, .. } => (CmTrace::Established, conn),
            PendingEvent::Rejected { conn, .. } => (CmTrace::Rejected, conn),
            PendingEvent::Unreachable { conn } => (CmTrace::Unreachable, conn),
            PendingEvent::Disconnected { conn } => (CmTrace::Disconnected, conn),
        };
        self.stats.cm_events += 1;
        self.record(TraceKind::Cm(what), 0, conn.0, 0);
        if let Some(c) = self.cms.get_mut(cm) {
            c.events.push_back(ev);
        }
    }

    pub(super) fn poll_cm(&mut self, cm: Idx) -> Option<PendingEvent> {
        self.cms.get_mut(cm)?.events.pop_front()
    }

    /// A connection-manager message arrives.
    pub(super) fn deliver_cm(&mut self, m: CmMsg) {
        match m.kind {
            CmMsgKind::Req { from, addr, data } => {
                let Some(s) = self.conns.get(&from.0) else {
                    return;
                };
                if s.phase != Phase::Connecting {
                    return;
                }
                let (cm, qp) = (s.cm, s.qp);
                let listener = self
                    .listeners
                    .iter()
                    .find(|(a, _)| *a == addr)
                    .map(|(_, c)| *c);
                let Some(lcm) = listener else {
                    if let Some(s) = self.conns.get_mut(&from.0) {
                        s.phase = Phase::Closed;
                    }
                    if let Some(q) = qp {
                        self.qp_error(q);
                    }
                    self.push_event(cm, PendingEvent::Unreachable { conn: from });
                    return;
                };
                let passive = self.new_conn_id();
                self.conns.insert(
                    passive.0,
                    ConnSide {
                        cm: lcm,
                        qp: None,
                        peer: Some(from),
                        phase: Phase::Requested,
                        last_msg_at: 0,
                    },
                );
                if let Some(s) = self.conns.get_mut(&from.0) {
                    s.peer = Some(passive);
                }
                self.push_event(
                    lcm,
                    PendingEvent::ConnectRequest {
                        conn: passive,
                        data,
                    },
                );
            }
            CmMsgKind::Rep { to, data } => {
                let Some(s) = self.conns.get(&to.0) else {
                    return;
                };
                let (cm, qp, peer, phase) = (s.cm, s.qp, s.peer, s.phase);
                if phase != Phase::Connecting {
                    if let Some(p) = peer {
                        self.notify_disconnect(p);
                    }
                    return;
                }
                let peer_qp = peer.and_then(|p| self.conns.get(&p.0)).and_then(|s| s.qp);
                if let Some(x) = qp.and_then(|q| self.qps.get_mut(q)) {
                    x.peer = peer_qp;
                    if x.state == QpState::Init {
                        x.state = QpState::ReadyToSend;
                    }
                }
                if let Some(s) = self.conns.get_mut(&to.0) {
                    s.phase = Phase::Established;
                }
                self.push_event(cm, PendingEvent::Established { conn: to, data });
                if let Some(p) = peer {
                    self.send_cm(Some(p), CmMsgKind::Rtu { to: p });
                }
            }
            CmMsgKind::Rtu { to } => {
                let Some(s) = self.conns.get_mut(&to.0) else {
                    return;
                };
                if s.phase != Phase::Accepted {
                    return;
                }
                s.phase = Phase::Established;
                let (cm, qp) = (s.cm, s.qp);
                if let Some(x) = qp.and_then(|q| self.qps.get_mut(q)) {
                    if x.state == QpState::ReadyToReceive {
                        x.state = QpState::ReadyToSend;
                    }
                }
                self.push_event(
                    cm,
                    PendingEvent::Established {
                        conn: to,
                        data: CmPrivateData::EMPTY,
                    },
                );
            }
            CmMsgKind::Rej { to, data } => {
                let Some(s) = self.conns.get_mut(&to.0) else {
                    return;
                };
                if s.phase != Phase::Connecting {
                    return;
                }
                s.phase = Phase::Closed;
                let (cm, qp) = (s.cm, s.qp);
                if let Some(q) = qp {
                    self.qp_error(q);
                }
                self.push_event(cm, PendingEvent::Rejected { conn: to, data });
            }
            CmMsgKind::Disc { to } => {
                let Some(s) = self.conns.get_mut(&to.0) else {
                    return;
                };
                if s.phase == Phase::Closed {
                    return;
                }
                s.phase = Phase::Closed;
                let (cm, qp) = (s.cm, s.qp);
                if let Some(q) = qp {
                    self.qp_error(q);
                    if let Some(x) = self.qps.get_mut(q) {
                        x.state = QpState::Disconnected;
                    }
                }
                self.push_event(cm, PendingEvent::Disconnected { conn: to });
            }
        }
    }
}
