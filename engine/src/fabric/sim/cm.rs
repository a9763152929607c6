//! Connection-manager handles, pending connect requests and addresses.

use std::fmt;
use std::sync::Arc;

use super::lifecycle::QpSpec;
use super::qp::SimQp;
use super::slab::Idx;
use super::state::PendingEvent;
use super::world::{Scope, World};
use super::Sim;
use crate::fabric::FabricError;
use crate::fabric::{CmEvent, CmPrivateData, ConnId};
use crate::fabric::{ConnectionManager, QpInit};

/// An address on the simulated network: any number; one listener per number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SimAddr(pub u64);

/// A connection manager of the simulated network. `poll_event` advances virtual time
/// by one tick, as a completion-queue poll does, and delivers the connection messages
/// due at this manager's device.
pub struct SimCm {
    pub(super) world: Arc<World>,
    pub(super) idx: Idx,
    pub(super) device: u32,
}

impl fmt::Debug for SimCm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimCm")
            .field("slot", &self.idx.slot)
            .field("device", &self.device)
            .finish()
    }
}

/// A connect request waiting for `accept` or `reject`; dropping it rejects without
/// private data.
pub struct SimConnRequest {
    world: Arc<World>,
    cm: Idx,
    conn: ConnId,
    answered: bool,
}

impl SimConnRequest {
    /// The connection id the passive side will have if accepted.
    pub fn conn(&self) -> ConnId {
        self.conn
    }

    fn take(mut self) -> (Idx, ConnId) {
        self.answered = true;
        (self.cm, self.conn)
    }
}

impl fmt::Debug for SimConnRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimConnRequest")
            .field("conn", &self.conn)
            .finish()
    }
}

impl Drop for SimConnRequest {
    fn drop(&mut self) {
        if !self.answered {
            let (cm, conn) = (self.cm, self.conn);
            let _ = self
                .world
                .with(|w| w.reject(cm, conn, CmPrivateData::EMPTY));
        }
    }
}

impl SimCm {
    fn spec(&self, init: &QpInit<'_, Sim>) -> Result<QpSpec, FabricError> {
        let same = |w: &Arc<World>| Arc::ptr_eq(w, &self.world);
        if !same(&init.pd.world) || !same(&init.send_cq.world) || !same(&init.recv_cq.world) {
            return Err(FabricError::WrongDevice);
        }
        if init.send_cq.device != self.device || init.recv_cq.device != self.device {
            return Err(FabricError::WrongDevice);
        }
        if init.srq.is_some_and(|q| !same(&q.world)) {
            return Err(FabricError::WrongDevice);
        }
        Ok(QpSpec {
            device: self.device,
            pd: init.pd.id,
            pd_device: init.pd.device,
            send_cq: init.send_cq.idx,
            recv_cq: init.recv_cq.idx,
            srq: init.srq.map(|q| q.idx),
            config: init.config,
        })
    }

    fn qp(&self, idx: Idx, conn: ConnId, init: &QpInit<'_, Sim>) -> Result<SimQp, FabricError> {
        let num = self
            .world
            .with(|w| w.qps.get(idx).map_or(0, |q| q.num))
            .map_err(|m| m.fabric())?;
        Ok(SimQp {
            world: Arc::clone(&self.world),
            idx,
            num,
            conn,
            caps: init.config.caps,
        })
    }
}

impl ConnectionManager for SimCm {
    type P = Sim;

    fn listen(&mut self, addr: &SimAddr) -> Result<(), FabricError> {
        let (idx, addr) = (self.idx, *addr);
        self.world
            .with(|w| w.listen(idx, addr))
            .map_err(|m| m.fabric())?
    }

    fn connect(
        &mut self,
        addr: &SimAddr,
        init: QpInit<'_, Sim>,
        private_data: &[u8],
    ) -> Result<SimQp, FabricError> {
        let data = CmPrivateData::new(private_data)?;
        let spec = self.spec(&init)?;
        let (idx, addr) = (self.idx, *addr);
        let (q, conn) = self
            .world
            .with(|w| w.connect(idx, addr, spec, data))
            .map_err(|m| m.fabric())??;
        self.qp(q, conn, &init)
    }

    fn accept(
        &mut self,
        request: SimConnRequest,
        init: QpInit<'_, Sim>,
        private_data: &[u8],
    ) -> Result<SimQp, FabricError> {
        if !Arc::ptr_eq(&request.world, &self.world) {
            return Err(FabricError::WrongDevice);
        }
        // On failure the request is rejected (by its drop), so the active side hears.
        let data = CmPrivateData::new(private_data)?;
        let spec = self.spec(&init)?;
        let idx = self.idx;
        let conn = request.conn;
        let accepted = self
            .world
            .with(|w| w.accept(idx, conn, spec, data))
            .map_err(|m| m.fabric())?;
        let (q, conn) = accepted?;
        request.take();
        self.qp(q, conn, &init)
    }

    fn reject(&mut self, request: SimConnRequest, private_data: &[u8]) -> Result<(), FabricError> {
        if !Arc::ptr_eq(&request.world, &self.world) {
            return Err(FabricError::WrongDevice);
        }
        let data = CmPrivateData::new(private_data)?;
        let (cm, conn) = request.take();
        self.world
            .with(|w| w.reject(cm, conn, data))
            .map_err(|m| m.fabric())?
    }

    fn disconnect(&mut self, conn: ConnId) -> Result<(), FabricError> {
        let idx = self.idx;
        self.world
            .with(|w| w.disconnect(idx, conn))
            .map_err(|m| m.fabric())?
    }

    fn poll_event(&mut self) -> Result<Option<CmEvent<SimConnRequest>>, FabricError> {
        let (idx, device) = (self.idx, self.device);
        let ev = self
            .world
            .with(|w| {
                w.tick(Scope::Cm(device));
                w.poll_cm(idx)
            })
            .map_err(|m| m.fabric())?;
        Ok(ev.map(|e| match e {
            PendingEvent::ConnectRequest { conn, data } => CmEvent::ConnectRequest {
                request: SimConnRequest {
                    world: Arc::clone(&self.world),
                    cm: idx,
                    conn,
                    answered: false,
                },
                private_data: data,
            },
            PendingEvent::Established { conn, data } => CmEvent::Established {
                conn,
                private_data: data,
            },
            PendingEvent::Rejected { conn, data } => CmEvent::Rejected {
                conn,
                private_data: data,
            },
            PendingEvent::Unreachable { conn } => CmEvent::Unreachable { conn },
            PendingEvent::Disconnected { conn } => CmEvent::Disconnected { conn },
        }))
    }
}

impl Drop for SimCm {
    fn drop(&mut self) {
        let idx = self.idx;
        let _ = self.world.with(|w| w.destroy_cm(idx));
    }
}
