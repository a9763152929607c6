//! `sim`: a deterministic, seeded, single-threaded simulated fabric for randomized
//! protocol tests.
//!
//! "The network" is an in-process event scheduler with a virtual clock, driven by a
//! seeded random stream ([`SimRng`]). Every posted request becomes an event executed
//! after a random delay; a queue pair's requests never overtake each other (RC
//! ordering), but different queue pairs and connections interleave freely. Virtual time
//! passes by one [`SimConfig::tick`] on every completion-queue `poll` and every
//! connection-manager `poll_event`, so an engine written as ordinary poll loops runs
//! unchanged; tests can also move time with [`SimNet::advance`] and
//! [`SimNet::run_until_idle`]. The same seed and the same sequence of calls give the
//! same history, event for event ([`SimNet::trace_hash`]).
//!
//! Semantics are those of every provider (checked by the shared conformance suite):
//! RNR with retries against the receiver's RNR timer, length, protection and remote
//! access errors, any of which fails both queue pairs, flush on error, Send With
//! Invalidate, FastReg and LocalInvalidate with key generations, and RDMA-CM-shaped
//! connection events with private data. As on shm, a device makes progress only while
//! it is polled: requests execute in their target's polls (see `world`'s notes). Registered memory is any
//! [`Arena`](rpcrdma_pools::Arena): both endpoints live in this process, so data moves
//! by copying between arena pointers, each range checked against the registration
//! table first.
//!
//! Faults ([`FaultConfig`], [`FailPoint`], [`SimNet::drop_connection`],
//! [`SimNet::stall_cq`]) are connection-level, as on a real RC fabric: nothing is ever
//! corrupted or lost without an error completion.
//!
//! Runs are reproducible from the seed when driven from one thread (the thread that
//! created the [`SimNet`]); see [`SimStats::foreign_thread_calls`].
//!
//! ```
//! use rpcrdma::fabric::sim::{Sim, SimConfig, SimNet};
//! use rpcrdma::fabric::{Device, Provider};
//!
//! let net = SimNet::new(SimConfig::seeded(42));
//! let client = net.open_device();
//! let server = net.open_device();
//! assert_eq!(<Sim as Provider>::NAME, "sim");
//! assert_eq!(client.caps(), server.caps());
//! ```

mod cm;
mod cmproto;
mod complete;
mod config;
mod cq;
mod device;
mod exec;
mod memory;
mod mr;
mod net;
mod qp;
mod rng;
mod slab;
mod state;
mod trace;
mod world;

pub use cm::{SimAddr, SimCm, SimConnRequest};
pub use config::{FailPoint, FaultConfig, SimConfig, SIM_MAX_SGE};
pub use cq::SimCq;
pub use device::{SimDevice, SimPd};
pub use mr::SimMr;
pub use net::{FailureReport, SimNet};
pub use qp::SimQp;
pub use rng::SimRng;
pub use trace::{CmTrace, FaultTrace, SimStats, TraceEvent, TraceKind};

use super::provider::Provider;

/// The simulated provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sim;

impl Provider for Sim {
    const NAME: &'static str = "sim";
    type Device = SimDevice;
    type Pd = SimPd;
    type Mr = SimMr;
    type Cq = SimCq;
    type Qp = SimQp;
    type Cm = SimCm;
    type ConnRequest = SimConnRequest;
    type Addr = SimAddr;
}
