//! Test harnesses shared by the engine's tests, the fuzz targets and the benchmarks:
//! a [`Wire`](wire::Wire) that stands where a queue pair would so core tests can assert
//! on staged work requests directly, and the peer-side fuzz drivers (the cores back to
//! back, and the real drivers against a rogue peer over the `sim` provider). Hidden from the
//! documentation: not part of the engine's API.

pub mod peer_fuzz;
pub mod sim_peer_fuzz;
pub mod wire;

use crate::core::FastRegSlot;
use crate::fabric::mr::make_key;

/// `n` fast-registration slots as a provider would hand them out (indices `first..`,
/// generation 0, 1 MiB each), for cores built without a provider.
pub fn fast_reg_slots(first: u32, n: u32) -> Vec<FastRegSlot> {
    (first..first + n)
        .map(|i| FastRegSlot {
            key: make_key(i, 0),
            max_len: 1 << 20,
        })
        .collect()
}
