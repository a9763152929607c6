//! End to end over shm, sim and siw: a call that finds every reply context of the
//! responder in use (their replies' Send completions not yet reaped) is held and served
//! once a context frees, in arrival order; no call within the credits is lost
//! (DESIGN.md, "Responder: a reply context").
//!
//! Deterministic, not timed: the server's device is wrapped in `Faulty` with its
//! `SendCompletionGate` closed, so no reply's Send completion reaches the responder
//! while the requester reads the replies and sends the next calls on the credits they
//! return. The test runs until the responder holds a full window of calls (every
//! context waits for a completion), which it can only reach by holding them; then it
//! opens the gate and every call must be answered exactly once, in order.

use crate::engine_support;

use engine_support::*;
use std::sync::{Arc, Mutex};

use rpcrdma::fabric::faulty::{FaultConfig, Faulty, FaultyDevice};
use rpcrdma::{CallRequest, CallStatus, CallView, Pair, ReplyWriter, Service, ServiceError};

/// The test program, recording the order its ECHO calls arrive in (by their tag: the
/// first word of the echoed data).
struct Recorder {
    inner: TestService,
    order: Arc<Mutex<Vec<u32>>>,
}

impl Service for Recorder {
    fn handle_call(
        &mut self,
        call: &CallView<'_>,
        w: &mut ReplyWriter<'_>,
    ) -> Result<(), ServiceError> {
        if let Some(tag) = call.msg().get(CALL_HDR + 4..CALL_HDR + 8) {
            let tag = u32::from_be_bytes([tag[0], tag[1], tag[2], tag[3]]);
            self.order.lock().expect("order").push(tag);
        }
        self.inner.handle_call(call, w)
    }
}

fn tagged(tag: u32) -> Vec<u8> {
    let mut d = tag.to_be_bytes().to_vec();
    d.extend_from_slice(&pattern(60, tag as u8));
    d
}

fn withheld_reply_completions_lose_no_call<N: Net>(net: N) {
    let client = test_config();
    let mut server = test_config();
    const CREDITS: u32 = 4;
    server.credits = CREDITS;
    let sdev = FaultyDevice::<N::P>::new(net.device(), FaultConfig::default());
    let cdev = FaultyDevice::<N::P>::new(net.device(), FaultConfig::default());
    let gate = sdev.send_completion_gate();
    let order = Arc::new(Mutex::new(Vec::new()));
    let service = Recorder {
        inner: TestService::default(),
        order: order.clone(),
    };
    let mut p: Pair<Faulty<N::P>, Recorder> = Pair::connect(
        &cdev,
        sdev,
        &net.addr(),
        &client,
        &server,
        service,
        DEADLINE,
    )
    .expect("pair connects");
    let contexts = 2 * CREDITS as usize;
    gate.close();
    const CALLS: u32 = 40;
    for tag in 0..CALLS {
        let mut b = p.requester.alloc_msg().expect("send buffer");
        write_call(&mut b, PROC_ECHO, &opaque(&tagged(tag)));
        p.requester
            .submit(CallRequest::new(b, 512), u64::from(tag))
            .expect("accepted (queued)");
    }
    let mut outcomes = Vec::new();
    // Every context ends up waiting for its reply's completion, and the requester,
    // having read those replies, spends the credits they returned on calls the
    // responder can only hold.
    let full = p.run_until(DEADLINE, |p| {
        while let Some(o) = p.next_outcome() {
            outcomes.push(o);
        }
        let s = p.responder().expect("responder").stats();
        assert_eq!(s.overruns, 0, "a call within the credits was dropped");
        s.holding == u64::from(CREDITS)
    });
    let s = p.responder().expect("responder").stats();
    assert!(
        full,
        "the responder never held a full window: {} outcomes, stats {s:?}",
        outcomes.len()
    );
    assert_eq!(s.calls as usize, contexts, "one call per context served");
    assert_eq!(p.responder().expect("responder").active(), contexts);
    assert!(outcomes.len() <= contexts);
    // The completions come: contexts free one by one and the held calls are served.
    gate.open();
    let done = p.run_until(DEADLINE, |p| {
        while let Some(o) = p.next_outcome() {
            outcomes.push(o);
        }
        outcomes.len() == CALLS as usize
    });
    let s = p.responder().expect("responder").stats();
    assert!(done, "{} of {CALLS} outcomes, stats {s:?}", outcomes.len());
    // A few more rounds: nothing else arrives.
    for _ in 0..50 {
        p.poll(p.requester.clock().now());
        assert!(p.next_outcome().is_none(), "an outcome arrived twice");
    }
    outcomes.sort_by_key(|o| o.tag);
    for (i, o) in outcomes.iter().enumerate() {
        assert_eq!(o.tag, i as u64, "exactly one outcome per call");
        assert_eq!(o.status, CallStatus::Success, "call {i}");
        assert_eq!(results(o), &opaque(&tagged(i as u32))[..], "call {i}");
    }
    assert_eq!(
        *order.lock().expect("order"),
        (0..CALLS).collect::<Vec<_>>(),
        "served once each, in arrival order"
    );
    let s = p.responder().expect("responder").stats();
    assert_eq!(s.calls, u64::from(CALLS));
    assert_eq!((s.overruns, s.holding), (0, 0));
    assert!(s.held >= u64::from(CREDITS), "{s:?}");
    assert_eq!(s.dropped, 0);
}

per_provider!(withheld_reply_completions_lose_no_call);
