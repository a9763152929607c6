//! The generic fabric conformance suite (tests/conformance/) run against the `shm`
//! provider. Other providers add their own fixture and one `conformance_tests!` line.

use crate::conformance;

use conformance::Fixture;
use rpcrdma::fabric::shm::{ShmAddr, ShmDevice, ShmProvider};

/// shm: one device per simulated host, abstract-namespace socket names unique per
/// process and call.
pub struct ShmFixture;

impl Fixture for ShmFixture {
    type P = ShmProvider;

    fn open_device() -> ShmDevice {
        ShmDevice::new()
    }

    fn unique_addr() -> ShmAddr {
        ShmAddr::abstract_name(format!(
            "rpcrdma-conformance-{}-{}",
            std::process::id(),
            conformance::unique_number()
        ))
    }
}

conformance_tests!(ShmFixture);

/// Keys next to a real one are refused: the key table's bits are random.
#[test]
fn rdma_with_neighbouring_keys_fails() {
    conformance::rdma_with_neighbouring_keys_fails::<ShmFixture>();
}
