//! Test harnesses shared by the engine's tests, the fuzz targets and the benchmarks:
//! a [`Wire`](wire::Wire) that stands where a queue pair would so core tests can assert
//! on staged work requests directly, and the peer-side fuzz driver. Hidden from the
//! documentation: not part of the engine's API.

pub mod peer_fuzz;
pub mod wire;
