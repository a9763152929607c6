//! The generic fabric conformance suite (tests/conformance/) run against the `sim`
//! provider, twice: with the default latencies, and with a different seed and latencies
//! wide enough that requests of different queue pairs interleave heavily.
//!
//! The suite's fixture is stateless, but every device of a test must share one
//! simulated network; each test runs on its own thread, so each gets its own network
//! from a thread-local.

use crate::conformance;

use std::time::Duration;

use rpcrdma::fabric::sim::{SimConfig, SimNet};

macro_rules! sim_fixture {
    ($(#[$doc:meta])* $name:ident, $cfg:expr) => {
        $(#[$doc])*
        pub struct $name;

        impl $name {
            fn net() -> SimNet {
                thread_local! {
                    static NET: SimNet = SimNet::new($cfg);
                }
                NET.with(SimNet::clone)
            }
        }

        impl conformance::Fixture for $name {
            type P = rpcrdma::fabric::sim::Sim;
            const REPORTS_PEER: bool = false;

            fn open_device() -> rpcrdma::fabric::sim::SimDevice {
                Self::net().open_device()
            }

            fn unique_addr() -> rpcrdma::fabric::sim::SimAddr {
                rpcrdma::fabric::sim::SimAddr(conformance::unique_number())
            }
        }
    };
}

sim_fixture!(
    /// Default settings (1–20 µs latency, 1 µs per poll).
    SimFixture,
    SimConfig::seeded(0x5eed)
);

sim_fixture!(
    /// Latencies from 1 µs to 300 µs and acknowledgements up to 100 µs late.
    SimWideFixture,
    {
        let mut cfg = SimConfig::seeded(0xdead_beef)
            .with_latency(Duration::from_micros(1), Duration::from_micros(300));
        cfg.max_ack_latency = Duration::from_micros(100);
        cfg
    }
);

conformance_tests!(SimFixture);

/// Keys next to a real one are refused: the key table's bits are random.
#[test]
fn rdma_with_neighbouring_keys_fails() {
    conformance::rdma_with_neighbouring_keys_fails::<SimFixture>();
}

mod wide {
    use super::SimWideFixture;
    crate::conformance_tests!(SimWideFixture);
}
