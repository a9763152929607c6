//! The generic fabric conformance suite (tests/conformance/) run against the `siw`
//! provider over loopback TCP.

mod conformance;

use std::net::{SocketAddr, TcpListener};

use conformance::Fixture;
use rpcrdma::fabric::siw::{SiwDevice, SiwProvider};

/// siw: one device per simulated host; addresses are loopback ports the kernel just
/// handed out (and that nobody listens on any more).
pub struct SiwFixture;

impl Fixture for SiwFixture {
    type P = SiwProvider;

    fn open_device() -> SiwDevice {
        SiwDevice::new().expect("open siw device")
    }

    fn unique_addr() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        l.local_addr().expect("local address")
    }
}

// Every rule but `send_waits_for_a_late_receive`: iWARP has no receiver-not-ready retry
// (a Send finding no receive is a DDP "no buffer available" error, fatal at once, RFC 5041
// §7), so no rnr_retry value can make a Send wait for a late receive. What siw does
// instead is checked by `fabric_siw.rs::send_without_receive_fails_at_once_even_with_infinite_rnr_retry`.
// The honest fix is a device capability the suite consults (see the siw report).
conformance_tests!(@each SiwFixture;
    cm_exchanges_private_data,
    cm_reject_delivers_private_data,
    cm_unreachable,
    cm_disconnect_flushes_both_sides,
    send_recv_integrity,
    rdma_write_integrity,
    rdma_read_integrity,
    chain_completes_in_order,
    writes_are_visible_before_the_following_send,
    post_beyond_depth_is_refused,
    unsignaled_requests_hold_their_slots,
    send_without_receive_exceeds_rnr_retries,
    send_longer_than_receive_fails_both_sides,
    rdma_write_with_bad_key_fails,
    rdma_read_with_bad_key_fails,
    send_with_invalidate_kills_the_key,
    send_with_invalidate_of_a_bad_key_fails,
    fast_reg_requires_a_fresh_key,
    local_protection_errors,
    separate_send_and_recv_cqs,
    registration_checks,
);
