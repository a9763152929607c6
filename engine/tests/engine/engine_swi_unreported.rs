//! Send With Invalidate on a device that invalidates the key but does not say which
//! (`DeviceCaps::reports_remote_invalidation` false, as kernel siw towards userspace),
//! modelled on sim: the FastReg requester must not take the missing report for "nothing
//! was invalidated" or for "the key is still live"; it invalidates every key locally
//! (invalidating an already invalid key succeeds) and keeps reusing its slots.

use crate::engine_support;

use engine_support::*;
use rpcrdma::fabric::sim::{SimConfig, SimNet};
use rpcrdma::RegMode;
use rpcrdma::{CallRequest, CallStatus};

#[test]
fn unreported_remote_invalidation_is_covered_by_local_invalidation() {
    let mut sc = SimConfig::seeded(7);
    sc.caps.reports_remote_invalidation = false;
    let net = SimNetFixture(SimNet::new(sc));
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    assert_eq!(p.requester.registration(), RegMode::FastReg);
    assert!(p.requester.thresholds().remote_invalidate);
    // More rounds than credits, so slots and their keys are reused after each
    // invalidation the requester was not told about.
    const ROUNDS: u64 = 20;
    for round in 0..ROUNDS {
        let data = pattern(3000, round as u8);
        let mut req = CallRequest::new(msg(&p, PROC_ECHO_DDP, &3000u32.to_be_bytes()), 20_000);
        req.push_ddp_arg((CALL_HDR + 4) as u32, large_with(&p, &data))
            .expect("room");
        req.push_write_sink(p.requester.alloc_large().expect("sink"))
            .expect("room");
        let o = call(&mut p, req);
        assert_eq!(o.status, CallStatus::Success, "round {round}");
        assert_eq!(o.write_result(0), Some(&data[..]), "round {round}");
    }
    let st = p.requester.stats();
    assert_eq!(
        st.remote_invalidations, 0,
        "no report reached the requester"
    );
    assert_eq!(st.foreign_invalidations, 0);
    assert_eq!(
        st.local_invalidations,
        3 * ROUNDS,
        "each call's three keys were invalidated locally"
    );
    assert_eq!(
        p.responder()
            .expect("responder")
            .stats()
            .remote_invalidations,
        ROUNDS,
        "the responder still invalidated one key per reply"
    );
}

/// The responder's side of it: RDMA_DONE arrives as Send With Invalidate naming the
/// exposed reply's key, but the device does not say so. The responder invalidates the
/// key locally all the same (already dead: that succeeds) and reuses its reply slots,
/// more rounds than it has.
#[test]
fn unreported_invalidation_by_done_is_covered_by_local_invalidation() {
    let mut sc = SimConfig::seeded(11);
    sc.caps.reports_remote_invalidation = false;
    let net = SimNetFixture(SimNet::new(sc));
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    assert!(p.requester.thresholds().remote_invalidate);
    const ROUNDS: u32 = 20;
    for round in 0..ROUNDS {
        let n = 9000 + round;
        let req = CallRequest::new(msg(&p, PROC_BIG, &n.to_be_bytes()), 512);
        let o = call(&mut p, req);
        assert_eq!(o.status, CallStatus::Success, "round {round}");
        assert_eq!(results(&o), &opaque(&pattern(n as usize, 7))[..]);
    }
    let ok = p.run_until(DEADLINE, |p| {
        p.responder().is_some_and(|r| r.stats().exposed == 0)
    });
    assert!(ok, "every exposed reply freed");
    let r = p.responder().expect("responder").stats();
    assert_eq!(r.read_chunk_replies, u64::from(ROUNDS));
    assert_eq!(r.done_received, u64::from(ROUNDS));
    assert_eq!(
        r.done_remote_invalidations, 0,
        "no report reached the responder"
    );
    assert_eq!(r.stray_completions, 0);
}
