//! Devices and protection domains of the simulated network.

use std::fmt;
use std::sync::Arc;

use rpcrdma_pools::Arena;

use super::cm::SimCm;
use super::cq::SimCq;
use super::mr::SimMr;
use super::srq::SimSrq;
use super::state::CqSlot;
use super::world::World;
use super::Sim;
use crate::fabric::mr::Access;
use crate::fabric::FabricError;
use crate::fabric::{Device, ProtectionDomain};
use crate::fabric::{DeviceCaps, SrqConfig};

/// A simulated device (one "NIC"): open as many as there are endpoints with
/// [`SimNet::open_device`](super::SimNet::open_device).
pub struct SimDevice {
    pub(super) world: Arc<World>,
    pub(super) id: u32,
    pub(super) caps: DeviceCaps,
}

impl fmt::Debug for SimDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimDevice").field("id", &self.id).finish()
    }
}

impl Device for SimDevice {
    type P = Sim;

    /// The network's virtual clock: drivers of simulated connections see time pass only
    /// as the simulation advances it (one tick per completion-queue poll), so a seed
    /// replays its run exactly, timeouts and keepalives included.
    fn clock(&self) -> crate::fabric::Clock {
        let world = Arc::clone(&self.world);
        let base = world.base;
        crate::fabric::Clock::virtual_time(
            base,
            Arc::new(move || std::time::Duration::from_nanos(world.with(|w| w.now).unwrap_or(0))),
        )
    }

    fn caps(&self) -> DeviceCaps {
        self.caps
    }

    fn alloc_pd(&self) -> Result<SimPd, FabricError> {
        let id = self.world.with(|w| w.new_pd_id()).map_err(|m| m.fabric())?;
        Ok(SimPd {
            world: Arc::clone(&self.world),
            id,
            device: self.id,
            max_msg: self.caps.max_msg_size,
        })
    }

    fn create_cq(&self, depth: u32) -> Result<SimCq, FabricError> {
        if depth == 0 || depth > self.caps.max_cq_depth {
            return Err(FabricError::InvalidCaps {
                what: "completion queue depth",
                requested: depth,
                max: self.caps.max_cq_depth,
            });
        }
        let device = self.id;
        let idx = self
            .world
            .with(|w| {
                w.cqs.insert(CqSlot {
                    device,
                    depth,
                    reserved: 0,
                    attached: 0,
                    handle_alive: true,
                    entries: std::collections::VecDeque::with_capacity(depth as usize),
                    stalled_until: 0,
                })
            })
            .map_err(|m| m.fabric())?;
        Ok(SimCq {
            world: Arc::clone(&self.world),
            idx,
            depth,
            device,
        })
    }

    fn create_cm(&self) -> Result<SimCm, FabricError> {
        let device = self.id;
        let idx = self
            .world
            .with(|w| w.create_cm(device))
            .map_err(|m| m.fabric())?;
        Ok(SimCm {
            world: Arc::clone(&self.world),
            idx,
            device,
        })
    }
}

/// A protection domain of a simulated device.
pub struct SimPd {
    pub(super) world: Arc<World>,
    pub(super) id: u32,
    pub(super) device: u32,
    max_msg: u32,
}

impl fmt::Debug for SimPd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimPd")
            .field("id", &self.id)
            .field("device", &self.device)
            .finish()
    }
}

impl ProtectionDomain for SimPd {
    type P = Sim;

    /// Registers any arena (shareable or not: both endpoints live in this process).
    fn reg_mr(
        &self,
        arena: &Arc<Arena>,
        offset: usize,
        len: usize,
        access: Access,
    ) -> Result<SimMr, FabricError> {
        let pd = self.id;
        let key = self
            .world
            .with(|w| w.mrs.register(pd, arena, offset, len, access))
            .map_err(|m| m.fabric())??;
        Ok(SimMr {
            world: Arc::clone(&self.world),
            key,
            fast: false,
            addr: arena.base() as u64 + offset as u64,
            len,
        })
    }

    fn alloc_fast_mr(&self, max_len: usize) -> Result<SimMr, FabricError> {
        if max_len == 0 || max_len as u64 > u64::from(self.max_msg) {
            return Err(FabricError::BadLength(max_len));
        }
        let pd = self.id;
        let key = self
            .world
            .with(|w| w.mrs.alloc_fast(pd, max_len as u64))
            .map_err(|m| m.fabric())??;
        Ok(SimMr {
            world: Arc::clone(&self.world),
            key,
            fast: true,
            addr: 0,
            len: max_len,
        })
    }

    fn create_srq(&self, recv_cq: &SimCq, cfg: SrqConfig) -> Result<SimSrq, FabricError> {
        if !Arc::ptr_eq(&recv_cq.world, &self.world) {
            return Err(FabricError::WrongDevice);
        }
        let (device, pd, cq) = (self.device, self.id, recv_cq.idx);
        let idx = self
            .world
            .with(|w| w.create_srq(device, pd, cq, cfg))
            .map_err(|m| m.fabric())??;
        Ok(SimSrq {
            world: Arc::clone(&self.world),
            idx,
            cfg,
        })
    }
}
