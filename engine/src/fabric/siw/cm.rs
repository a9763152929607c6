//! The connection manager: listen, connect, accept and reject over TCP with MPA
//! Request/Reply frames carrying the private data, and events polled from the engine.
//!
//! Private data: ours goes after the RFC 6581 IRD/ORD words of a revision 2 frame; the
//! peer's is handed over from the same place (everything after IRD/ORD, or everything
//! in revision 1). An RFC 8797 message in it is found by the engine's own search (RFC
//! 8797 §5.2), so other layers' bytes in front of it do no harm.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};

use super::device::{DeviceShared, Retire};
use super::qp::SiwQp;
use super::SiwProvider;
use crate::fabric::FabricError;
use crate::fabric::{CmEvent, CmMessage, ConnId};
use crate::fabric::{ConnectionManager, QpInit};

/// A connect request waiting for `accept` or `reject`. Dropping it rejects the
/// connection without private data.
pub struct SiwConnRequest {
    dev: Weak<DeviceShared>,
    pub(crate) slot: usize,
    pub(crate) conn: ConnId,
    peer: SocketAddr,
    live: bool,
}

impl std::fmt::Debug for SiwConnRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SiwConnRequest")
            .field("conn", &self.conn)
            .field("peer", &self.peer)
            .finish()
    }
}

impl SiwConnRequest {
    pub(crate) fn new(
        dev: Weak<DeviceShared>,
        slot: usize,
        conn: ConnId,
        peer: SocketAddr,
    ) -> SiwConnRequest {
        SiwConnRequest {
            dev,
            slot,
            conn,
            peer,
            live: true,
        }
    }

    /// The address the request came from.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// Marks the request answered, so dropping it does nothing.
    pub(crate) fn consume(mut self) -> (usize, ConnId) {
        self.live = false;
        (self.slot, self.conn)
    }
}

impl Drop for SiwConnRequest {
    fn drop(&mut self) {
        if self.live {
            if let Some(dev) = self.dev.upgrade() {
                dev.retire(Retire::Request(self.slot, self.conn));
            }
        }
    }
}

/// The engine's per-manager event queues. Numbers are never reused.
#[derive(Default)]
pub(crate) struct CmTable {
    queues: Vec<Option<VecDeque<CmEvent<SiwConnRequest>>>>,
}

impl CmTable {
    pub(crate) fn create(&mut self) -> usize {
        self.queues.push(Some(VecDeque::new()));
        self.queues.len() - 1
    }

    /// Forgets manager `id`; its undelivered requests are rejected as they drop.
    pub(crate) fn remove(&mut self, id: usize) {
        if let Some(q) = self.queues.get_mut(id) {
            *q = None;
        }
    }

    /// Queues an event for manager `id` (dropped if the manager is gone).
    pub(crate) fn push(&mut self, id: usize, e: CmEvent<SiwConnRequest>) {
        if let Some(Some(q)) = self.queues.get_mut(id) {
            q.push_back(e);
        }
    }

    pub(crate) fn pop(&mut self, id: usize) -> Option<CmEvent<SiwConnRequest>> {
        self.queues.get_mut(id)?.as_mut()?.pop_front()
    }
}

/// A siw connection manager.
pub struct SiwCm {
    pub(crate) dev: Arc<DeviceShared>,
    pub(crate) id: usize,
}

impl std::fmt::Debug for SiwCm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SiwCm").field("id", &self.id).finish()
    }
}

impl SiwCm {
    pub(crate) fn new(dev: Arc<DeviceShared>) -> Result<SiwCm, FabricError> {
        let id = dev.driver.with(|d| d.cms.create());
        Ok(SiwCm { dev, id })
    }

    /// The address a listener of this manager is bound to (useful after listening on
    /// port 0).
    pub fn listen_addr(&self) -> Option<SocketAddr> {
        let id = self.id;
        self.dev.driver.with(|d| d.listen_addr(id))
    }
}

impl SiwCm {
    /// Refuses private data over this device's limit for `message`, before the request
    /// is consumed or a frame is built.
    fn check_private_data(&self, message: CmMessage, pd: &[u8]) -> Result<(), FabricError> {
        self.dev.cfg.private_data_limits().check(message, pd)
    }
}

impl ConnectionManager for SiwCm {
    type P = SiwProvider;

    fn listen(&mut self, addr: &SocketAddr) -> Result<(), FabricError> {
        let id = self.id;
        self.dev.driver.with(|d| d.listen(id, addr))
    }

    fn connect(
        &mut self,
        addr: &SocketAddr,
        init: QpInit<'_, SiwProvider>,
        private_data: &[u8],
    ) -> Result<SiwQp, FabricError> {
        self.check_private_data(CmMessage::Connect, private_data)?;
        let id = self.id;
        let dev = self.dev.clone();
        self.dev
            .driver
            .with(|d| d.connect(&dev, id, addr, &init, private_data))
    }

    fn accept(
        &mut self,
        request: SiwConnRequest,
        init: QpInit<'_, SiwProvider>,
        private_data: &[u8],
    ) -> Result<SiwQp, FabricError> {
        self.check_private_data(CmMessage::Accept, private_data)?;
        let dev = self.dev.clone();
        let (slot, conn) = request.consume();
        self.dev
            .driver
            .with(|d| d.accept(&dev, slot, conn, &init, private_data))
    }

    fn reject(&mut self, request: SiwConnRequest, private_data: &[u8]) -> Result<(), FabricError> {
        self.check_private_data(CmMessage::Reject, private_data)?;
        let (slot, conn) = request.consume();
        self.dev.driver.with(|d| d.reject(slot, conn, private_data))
    }

    fn disconnect(&mut self, conn: ConnId) -> Result<(), FabricError> {
        let id = self.id;
        self.dev.driver.with(|d| d.disconnect(id, conn))
    }

    fn poll_event(&mut self) -> Result<Option<CmEvent<SiwConnRequest>>, FabricError> {
        let id = self.id;
        Ok(self.dev.progress_then(false, |d| d.cms.pop(id)).flatten())
    }
}

impl Drop for SiwCm {
    fn drop(&mut self) {
        self.dev.retire(Retire::Cm(self.id));
    }
}
