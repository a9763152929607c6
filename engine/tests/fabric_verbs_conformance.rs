//! The generic fabric conformance suite (tests/conformance/) run against the `verbs`
//! provider on a real kernel RDMA device.
//!
//! It needs a device, so it is not part of plain `cargo test` (`test = false` in the
//! manifest): tools/lab/verbs.sh builds it on the host and runs it inside the qemu lab,
//! once per device, with `RPCRDMA_VERBS_DEV` (device name, e.g. `rxe0`) and
//! `RPCRDMA_VERBS_IP` (an IPv4 or IPv6 address owned by that device) set.

mod conformance;

use std::net::{IpAddr, SocketAddr};

use conformance::Fixture;
use rpcrdma::fabric::verbs::{VerbsAddr, VerbsDevice, VerbsProvider};

/// Device name variable.
const DEV_VAR: &str = "RPCRDMA_VERBS_DEV";
/// Address variable.
const IP_VAR: &str = "RPCRDMA_VERBS_IP";

/// verbs: every "host" opens the same device; addresses differ by port.
pub struct VerbsFixture;

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: this suite runs inside the qemu lab (tools/lab/verbs.sh), \
             which sets {DEV_VAR} and {IP_VAR}"
        )
    })
}

impl Fixture for VerbsFixture {
    type P = VerbsProvider;

    fn open_device() -> VerbsDevice {
        let name = env(DEV_VAR);
        VerbsDevice::open(&name).unwrap_or_else(|e| panic!("open {name}: {e}"))
    }

    fn unique_addr() -> VerbsAddr {
        let ip: IpAddr = env(IP_VAR)
            .parse()
            .unwrap_or_else(|e| panic!("{IP_VAR} is not an IP address: {e}"));
        // Ports are process-wide in rdma_cm: spread processes apart (a lab run may start
        // several in one boot) and give every call its own port.
        let base = 20_000 + (std::process::id() % 400) * 100;
        let port = base + (conformance::unique_number() % 100) as u32;
        VerbsAddr(SocketAddr::new(ip, port as u16))
    }
}

conformance_tests!(VerbsFixture);
