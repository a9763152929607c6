//! The fabric providers (`rpcrdma::fabric`): the conformance suite on shm, sim and siw,
//! and each provider's own rules (shm, sim, siw with its kernel-compat, Terminate and
//! tshark checks). One test binary, one module per former file.
//!
//! Not here, each a binary of its own: `fabric_shm_alloc` and `siw_alloc` (counting
//! global allocators), `fabric_shm_churn` (asserts on this process's resident memory),
//! `fabric_shm_two_process` (`harness = false`), and the verbs provider (`tests/verbs`).

#[path = "../conformance/mod.rs"]
#[macro_use]
mod conformance;
#[path = "../engine_support/mod.rs"]
mod engine_support;
#[path = "../shm_support/mod.rs"]
mod shm_support;
#[path = "../siw_support/mod.rs"]
mod siw_support;

mod fabric_conformance;
mod fabric_shm_fastpath;
mod fabric_shm_inprocess;
mod fabric_shm_isolation;
mod fabric_sim;
mod fabric_sim_conformance;
mod fabric_siw;
mod fabric_siw_conformance;
mod siw_end_of_stream;
mod siw_kernel_compat;
mod siw_rpc_tshark;
mod siw_terminate;
mod siw_tshark;
