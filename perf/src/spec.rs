//! What one row of results measures, and the errors a row can end with.

use core::fmt;

use rpcrdma::fabric::{FabricError, PostError, WcOpcode, WcStatus};
use serde::Serialize;

/// The three benchmark shapes, after perftest's `*_lat`, `*_bw` and message-rate runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// One operation in flight: round-trip latency.
    Lat,
    /// `depth` operations of `size` octets in flight: bandwidth.
    Bw,
    /// `depth` small operations in flight: operations per second.
    Rate,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Lat => "lat",
            Mode::Bw => "bw",
            Mode::Rate => "rate",
        })
    }
}

/// Which layer a row measures. Each layer's rows are compared with the layer below.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Layer {
    /// Two threads and shared memory, no fabric: the machine's floor.
    Physical,
    /// The raw fabric provider (verbs-style Send/Recv and RDMA Write), no RPC.
    Fabric,
    /// The RPC engine.
    Rpc,
}

impl Layer {
    /// The layer a row of this layer is compared with.
    pub fn reference(self) -> Option<Layer> {
        match self {
            Layer::Physical => None,
            Layer::Fabric => Some(Layer::Physical),
            Layer::Rpc => Some(Layer::Fabric),
        }
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layer::Physical => "physical",
            Layer::Fabric => "fabric",
            Layer::Rpc => "rpc",
        })
    }
}

/// Everything a benchmark needs to run one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RowSpec {
    /// Benchmark shape.
    pub mode: Mode,
    /// Octets per operation.
    pub size: usize,
    /// Operations in flight per connection (1 for latency).
    pub depth: u32,
    /// Independent connections served round-robin by the same two threads.
    pub connections: u32,
    /// Core of the measuring (client) thread.
    pub client_core: usize,
    /// Core of the responding (server) thread.
    pub server_core: usize,
}

/// Why a row produced no figures.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Creating a fabric object failed.
    #[error("fabric: {0}")]
    Fabric(#[from] FabricError),
    /// A post was refused.
    #[error("post refused: {0}")]
    Post(#[from] PostError),
    /// A work request completed with an error status.
    #[error("{opcode:?} completed with {status}")]
    Completion {
        /// What completed.
        opcode: WcOpcode,
        /// How.
        status: WcStatus,
    },
    /// Memory for the row could not be had.
    #[error("memory: {0}")]
    Memory(String),
    /// Connection set-up did not finish.
    #[error("set-up: {0}")]
    Setup(String),
    /// An RPC could not be built or submitted, or did not succeed.
    #[error("rpc: {0}")]
    Rpc(String),
}

/// Pins the calling thread to `core`; false if the core does not exist or pinning failed
/// (the benchmark then runs unpinned, which the caller reports).
pub fn pin(core: usize) -> bool {
    core < libc::CPU_SETSIZE as usize
        && core_affinity::set_for_current(core_affinity::CoreId { id: core })
}
