//! Queue-pair handles.

use std::fmt;
use std::sync::Arc;

use super::slab::Idx;
use super::world::World;
use crate::fabric::ConnId;
use crate::fabric::PostError;
use crate::fabric::QueuePair;
use crate::fabric::{QpCaps, QpState, RecvWr, SendWr};

/// A reliable-connected queue pair of the simulated network.
///
/// Posting only queues: nothing executes until virtual time passes (a poll, or
/// [`SimNet::advance`](super::SimNet::advance)). Each request then executes after its own
/// random delay, never before the previous request of the same queue pair.
pub struct SimQp {
    pub(super) world: Arc<World>,
    pub(super) idx: Idx,
    pub(super) num: u32,
    pub(super) conn: ConnId,
    pub(super) caps: QpCaps,
}

impl fmt::Debug for SimQp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimQp")
            .field("num", &self.num)
            .field("conn", &self.conn)
            .finish()
    }
}

impl QueuePair for SimQp {
    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        let idx = self.idx;
        self.world
            .with(|w| w.post_send(idx, wrs))
            .map_err(|m| m.post(0))?
    }

    fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let idx = self.idx;
        self.world
            .with(|w| w.post_recv(idx, wrs))
            .map_err(|m| m.post(0))?
    }

    fn qp_num(&self) -> u32 {
        self.num
    }

    fn conn_id(&self) -> ConnId {
        self.conn
    }

    fn state(&self) -> QpState {
        let idx = self.idx;
        self.world
            .with(|w| w.qps.get(idx).map_or(QpState::Disconnected, |q| q.state))
            .unwrap_or(QpState::Error)
    }

    fn caps(&self) -> QpCaps {
        self.caps
    }
}

impl Drop for SimQp {
    fn drop(&mut self) {
        let idx = self.idx;
        let _ = self.world.with(|w| w.destroy_qp(idx));
    }
}
