//! End to end over shm, sim and siw: credits. A requester never has more calls out than
//! granted (one until the first reply), extra calls wait in order and none is lost;
//! the responder's grant moves with its policy.

mod engine_support;

use engine_support::*;
use rpcrdma::requester::{CallRequest, CallStatus};

fn more_calls_than_credits_queue_in_order<N: Net>(net: N) {
    let client = test_config();
    let mut server = test_config();
    server.credits = 2;
    let mut p = pair(&net, &client, &server);
    const CALLS: u64 = 24;
    for tag in 0..CALLS {
        let data = pattern(100 + tag as usize, tag as u8);
        let req = CallRequest::new(msg(&p, PROC_ECHO, &opaque(&data)), 512);
        p.requester.submit(req, tag).expect("accepted (queued)");
    }
    assert!(p.requester.queued() > 0);
    let mut outcomes = Vec::new();
    let mut max_in_flight = 0;
    let mut max_granted = 0;
    let done = p.run_until(DEADLINE, |p| {
        let c = p.requester.credits().snapshot();
        assert!(c.in_flight <= c.granted, "{c:?}");
        max_in_flight = max_in_flight.max(c.in_flight);
        max_granted = max_granted.max(c.granted);
        while let Some(o) = p.next_outcome() {
            outcomes.push(o);
        }
        outcomes.len() as u64 == CALLS
    });
    assert!(done, "{} of {CALLS} outcomes", outcomes.len());
    assert_eq!(max_granted, 2, "the responder granted 2");
    assert!(max_in_flight <= 2);
    outcomes.sort_by_key(|o| o.tag);
    for (i, o) in outcomes.iter().enumerate() {
        assert_eq!(o.tag, i as u64, "exactly one outcome per call");
        assert_eq!(o.status, CallStatus::Success);
        assert_eq!(results(o), &opaque(&pattern(100 + i, i as u8))[..]);
    }
    // Started in submission order: an XID is a sequence number above the slot bits (4
    // for 8 credits plus the probe slot), one step per call started.
    let seqs: Vec<u32> = outcomes.iter().map(|o| o.xid >> 4).collect();
    assert!(
        seqs.windows(2)
            .all(|w| w[1].wrapping_sub(w[0]) & 0x0fff_ffff == 1),
        "{seqs:?}"
    );
    assert!(p.requester.stats().queued > 0);
}

fn grant_follows_the_responder_policy<N: Net>(net: N) {
    let client = test_config();
    let mut server = test_config();
    server.credits = 6;
    let mut p = pair(&net, &client, &server);
    let null = |p: &mut rpcrdma::conn::Pair<N::P, TestService>| {
        let req = CallRequest::new(msg(p, PROC_NULL, &[]), 256);
        assert_eq!(call(p, req).status, CallStatus::Success);
    };
    null(&mut p);
    assert_eq!(p.requester.credits().granted(), 6);
    p.responder().expect("responder").policy().set_target(2);
    null(&mut p);
    assert_eq!(p.requester.credits().granted(), 2, "adjusted down");
    p.responder().expect("responder").policy().set_target(5);
    null(&mut p);
    assert_eq!(p.requester.credits().granted(), 5, "and up again");
}

per_provider!(
    more_calls_than_credits_queue_in_order,
    grant_follows_the_responder_policy,
);
