//! The fabric: a verbs-shaped interface to RDMA transports, and its providers.
//!
//! The interface mirrors libibverbs and RDMA-CM closely enough that an rdma-core provider
//! maps one-to-one: devices, protection domains, memory registrations with local and
//! remote keys, completion queues, reliable-connected queue pairs with send and receive
//! queues of fixed depth, and a polled connection manager with private data.
//!
//! Semantics are strict on purpose: whatever would kill a real RC connection (a Send
//! finding no receive, a Send longer than the receive, a bad remote key, an overfull
//! queue) fails here too, with the verbs status, so engine bugs show up on the software
//! providers rather than on the first NIC.
//!
//! # Fast registration and invalidation are work requests
//!
//! [`SendOp::FastReg`] and [`SendOp::LocalInvalidate`] are posted on the send queue, as
//! verbs `IB_WR_REG_MR`/`IB_WR_LOCAL_INV`, rather than being direct calls on a handle:
//!
//! - it is the only form a userspace verbs provider can implement without a system call
//!   (rdma-core offers type-2 memory-window binds and local invalidation as send-queue
//!   work requests, nothing synchronous);
//! - the queue orders them: a chain `[FastReg, Send(advertising the key)]` needs one
//!   doorbell and no wait, exactly as RPC-over-RDMA clients do per RPC;
//! - the engine handles one kind of asynchronous result (completions) for everything.
//!
//! On providers without hardware they are cheap: shm executes them at post time (they
//! touch only the local key table) and reports their completions in queue order.
//!
//! # Memory
//!
//! Registration takes an [`Arena`](rpcrdma_pools::Arena) (plus an optional sub-range):
//! on shm the arena must be shareable, because the peer maps it; a verbs provider
//! accepts any arena. Keys are `index << 8 | generation`; see [`mr`].

mod abort;
mod clock;
mod cm;
mod error;
pub mod faulty;
pub(crate) mod keytable;
pub mod mr;
mod provider;
pub mod shm;
pub mod sim;
pub mod siw;
pub(crate) mod slots;
mod types;
#[cfg(feature = "verbs")]
pub mod verbs;

pub use abort::{AbortKind, AbortSite, AbortSource, PeerAbort};
pub use clock::Clock;
pub use cm::{CmEvent, CmMessage, CmPrivateData, ConnId, PrivateDataLimits, MAX_PRIVATE_DATA};
pub use error::{FabricError, PostError, PostErrorKind};
pub use mr::Access;
pub use provider::{
    CompletionQueue, ConnectionManager, Device, MemoryRegion, ProtectionDomain, Provider, QpInit,
    QueuePair, SharedReceiveQueue,
};
pub use types::{
    Completion, DeviceCaps, PeerAddr, QpCaps, QpConfig, QpState, RecvWr, RemoteAddr, SendFlags,
    SendOp, SendWr, Sge, SrqConfig, WcOpcode, WcStatus, RNR_RETRY_INFINITE, SOFTWARE_MAX_SRQ_WR,
};

/// `len` deterministic pseudo-random octets from the xorshift state `x`: the inputs a
/// fuzzer's first minutes would send, for the unit tests of the fuzz entry points.
#[cfg(test)]
pub(crate) fn junk(x: &mut u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|_| {
            *x ^= *x << 13;
            *x ^= *x >> 7;
            *x ^= *x << 17;
            *x as u8
        })
        .collect()
}
