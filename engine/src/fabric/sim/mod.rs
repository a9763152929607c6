//! `sim`: a deterministic, seeded simulated fabric for randomized protocol tests.
//!
//! "The network" is an in-process event scheduler with a virtual clock, driven by a
//! seeded random stream ([`SimRng`]). Every posted request becomes an event executed
//! after a random delay; a queue pair's requests never overtake each other (RC
//! ordering), but different queue pairs and connections interleave freely. The same
//! seed and the same sequence of calls give the same history, event for event
//! ([`SimNet::trace_hash`]).
//!
//! # Time and progress
//!
//! Virtual time passes by one [`SimConfig::tick`] on every completion-queue `poll` and
//! every connection-manager `poll_event`, so an engine written as ordinary poll loops
//! runs unchanged; tests can also move time with [`SimNet::advance`] and
//! [`SimNet::run_until_idle`]. Posting never executes anything by itself.
//!
//! As on shm, a device makes progress only while it is polled: a request executes in
//! the CQ polls of its *target* device (so a host's memory changes only inside its own
//! CQ polls, never behind its back between them), a completion is generated in the CQ
//! polls of its owner, and a connection message is delivered in the `poll_event` calls
//! of its destination. Waits in tests are best bounded by a number of polls, which is
//! deterministic.
//!
//! # Semantics
//!
//! Those of every provider, checked by the shared conformance suite: RNR with retries
//! against the receiver's RNR timer; length, protection and remote access errors, any
//! of which fails both queue pairs; flush on error (every outstanding request completes
//! exactly once); Send With Invalidate; FastReg and LocalInvalidate with key
//! generations; RDMA-CM-shaped connection events with private data. Registered memory
//! is any [`Arena`](rpcrdma_pools::Arena) (shareable or not): both endpoints live in this
//! process, so data moves by copying between arena pointers, each range checked against
//! the registration table first.
//!
//! # Faults and observation
//!
//! Random faults ([`FaultConfig`]: connection drops, spurious RNR, slow receivers, CQ
//! stalls) come from their own seeded stream; targeted ones are [`FailPoint`]s,
//! [`SimNet::drop_connection`], [`SimNet::schedule_random_drop`] and
//! [`SimNet::stall_cq`]. All are connection-level, as on a real RC fabric: nothing is
//! corrupted or lost without an error completion. [`SimNet::stats`] counts operations,
//! bytes and faults; a fixed-capacity trace ring plus [`SimNet::report_on_panic`] print
//! the seed and the last events when a test fails.
//!
//! # Threads
//!
//! Handles are `Send` (devices and protection domains `Sync`) as the provider traits
//! require, and the world sits behind an (uncontended) mutex, so the two sides may run
//! on two threads, as one conformance test does. Only a single-threaded run is
//! reproducible from its seed; [`SimStats::foreign_thread_calls`] counts calls from
//! other threads than the network's creator.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use rpcrdma::fabric::sim::{FaultConfig, SimAddr, SimConfig, SimNet};
//! use rpcrdma::fabric::{
//!     Access, CmEvent, Completion, CompletionQueue, ConnectionManager, Device, MemoryRegion,
//!     ProtectionDomain, QpConfig, QpInit, QueuePair, RecvWr, SendWr, Sge, WcStatus,
//!     RNR_RETRY_INFINITE,
//! };
//! use rpcrdma_pools::{Arena, ArenaOptions, HugePages};
//!
//! let faults = FaultConfig { rnr_per_mille: 100, ..FaultConfig::NONE };
//! let net = SimNet::new(SimConfig::seeded(42).with_faults(faults));
//! let _report = net.report_on_panic(); // seed and trace on stderr if this panics
//!
//! let (cdev, sdev) = (net.open_device(), net.open_device());
//! let (cpd, spd) = (cdev.alloc_pd()?, sdev.alloc_pd()?);
//! let (mut ccq, mut scq) = (cdev.create_cq(128)?, sdev.create_cq(128)?);
//! let (mut ccm, mut scm) = (cdev.create_cm()?, sdev.create_cm()?);
//! let opts = ArenaOptions::new(1 << 16).hugepages(HugePages::Never);
//! let (carena, sarena) = (Arc::new(Arena::new(&opts)?), Arc::new(Arena::new(&opts)?));
//! let cmr = cpd.reg_arena(&carena, Access::ALL)?;
//! let smr = spd.reg_arena(&sarena, Access::ALL)?;
//!
//! let config = QpConfig { rnr_retry: RNR_RETRY_INFINITE, ..QpConfig::default() };
//! scm.listen(&SimAddr(1))?;
//! let init = QpInit { pd: &cpd, send_cq: &ccq, recv_cq: &ccq, srq: None, config };
//! let mut cqp = ccm.connect(&SimAddr(1), init, b"client")?;
//! let (mut sqp, mut up) = (None, false);
//! for _ in 0..10_000 {
//!     if let Some(CmEvent::ConnectRequest { request, .. }) = scm.poll_event()? {
//!         let init = QpInit { pd: &spd, send_cq: &scq, recv_cq: &scq, srq: None, config };
//!         sqp = Some(scm.accept(request, init, b"server")?);
//!     }
//!     if let Some(CmEvent::Established { .. }) = ccm.poll_event()? {
//!         up = true;
//!         break;
//!     }
//! }
//! let mut sqp = sqp.expect("accepted");
//! assert!(up);
//!
//! let rb = [Sge::new(sarena.base() as u64, 64, smr.lkey())];
//! sqp.post_recv(&[RecvWr { wr_id: 1, sgl: &rb }])?;
//! let sb = [Sge::new(carena.base() as u64, 64, cmr.lkey())];
//! cqp.post_send(&[SendWr::send(2, &sb)])?;
//! let (mut got, mut buf) = (Vec::new(), [Completion::EMPTY; 4]);
//! for _ in 0..10_000 {
//!     let n = scq.poll(&mut buf); // the target's poll executes the Send
//!     got.extend_from_slice(&buf[..n]);
//!     let n = ccq.poll(&mut buf);
//!     got.extend_from_slice(&buf[..n]);
//!     if got.len() == 2 {
//!         break;
//!     }
//! }
//! assert!(got.iter().all(|c| c.status == WcStatus::Success));
//! assert_eq!(net.stats().ops_delivered, 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod cm;
mod cmproto;
mod complete;
mod config;
mod cq;
mod device;
mod exec;
mod lifecycle;
mod memory;
mod mr;
mod net;
mod qp;
mod rng;
mod slab;
mod srq;
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
pub use srq::SimSrq;
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
    type Srq = SimSrq;
    type Cm = SimCm;
    type ConnRequest = SimConnRequest;
    type Addr = SimAddr;
}
