//! The generic fabric conformance suite (tests/conformance/) run against the `siw`
//! provider over loopback TCP.

use crate::conformance;

use std::net::{SocketAddr, TcpListener};

use conformance::Fixture;
use rpcrdma::fabric::siw::{SiwConfig, SiwDevice, SiwProvider};

/// siw: one device per simulated host; addresses are loopback ports the kernel just
/// handed out (and that nobody listens on any more).
pub struct SiwFixture;

impl Fixture for SiwFixture {
    type P = SiwProvider;

    fn open_device() -> SiwDevice {
        SiwDevice::with_config(SiwConfig::strict()).expect("open siw device")
    }

    fn unique_addr() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        l.local_addr().expect("local address")
    }
}

// The whole suite, unchanged. iWARP's lack of receiver-not-ready retry is a device
// capability (`DeviceCaps::rnr_retry == false`) that the suite's RNR rules consult.
conformance_tests!(SiwFixture);

/// Keys next to a real one are refused: the key table's bits are random.
#[test]
fn rdma_with_neighbouring_keys_fails() {
    conformance::rdma_with_neighbouring_keys_fails::<SiwFixture>();
}
