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
use rpcrdma::{
    CallRequest, CallStatus, CallView, ConnConfig, Pair, ReplyWriter, Service, ServiceError,
};

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

/// A message-continuation call group (draft-dnoveck-rpcrdma-rtrext §4) that completes
/// while every context waits for its reply's completion is held like a call in one
/// message, and served in its turn: the 16 small calls take the 16 contexts, then a
/// 20 KB ECHO goes as a group of Sends (6 of the 8 credits) and two small calls take the
/// rest; all three are held, then served in order once the completions come.
fn a_held_call_group_is_served_in_its_turn<N: Net>(net: N) {
    let cfg = ConnConfig {
        inline_send: 4096,
        inline_recv: 4096,
        extensions: true,
        ..test_config()
    };
    const CREDITS: u32 = 8;
    let sdev = FaultyDevice::<N::P>::new(net.device(), FaultConfig::default());
    let cdev = FaultyDevice::<N::P>::new(net.device(), FaultConfig::default());
    let gate = sdev.send_completion_gate();
    let order = Arc::new(Mutex::new(Vec::new()));
    let service = Recorder {
        inner: TestService::default(),
        order: order.clone(),
    };
    let mut p: Pair<Faulty<N::P>, Recorder> =
        Pair::connect(&cdev, sdev, &net.addr(), &cfg, &cfg, service, DEADLINE)
            .expect("pair connects");
    assert!(p.requester.core().extensions().continuation);
    let contexts = 2 * CREDITS;
    const BIG: usize = 20_000;
    let data = |tag: u32| {
        let mut d = tag.to_be_bytes().to_vec();
        d.extend_from_slice(&pattern(if tag == contexts { BIG } else { 60 }, tag as u8));
        d
    };
    gate.close();
    let calls = contexts + 3;
    let mut outcomes = Vec::new();
    for tag in 0..calls {
        let mut b = if tag == contexts {
            // Only once every small call before it is answered: a group needs its
            // credits free at once (else it goes by Read chunk, the draft's §4.3).
            let answered = p.run_until(DEADLINE, |p| {
                while let Some(o) = p.next_outcome() {
                    outcomes.push(o);
                }
                outcomes.len() == contexts as usize
            });
            assert!(answered, "{} of {contexts} answered", outcomes.len());
            p.requester.alloc_large().expect("large buffer")
        } else {
            p.requester.alloc_msg().expect("send buffer")
        };
        write_call(&mut b, PROC_ECHO, &opaque(&data(tag)));
        let room = if tag == contexts {
            BIG as u32 + 512
        } else {
            512
        };
        p.requester
            .submit(CallRequest::new(b, room), u64::from(tag))
            .expect("accepted (queued)");
    }
    let full = p.run_until(DEADLINE, |p| {
        while let Some(o) = p.next_outcome() {
            outcomes.push(o);
        }
        let s = p.responder().expect("responder").stats();
        assert_eq!(s.overruns, 0, "a call within the credits was dropped");
        s.holding == 3
    });
    let s = p.responder().expect("responder").stats();
    assert!(full, "{} outcomes, stats {s:?}", outcomes.len());
    assert_eq!(s.cont_calls, 0, "the group is held, not served yet");
    gate.open();
    let done = p.run_until(DEADLINE, |p| {
        while let Some(o) = p.next_outcome() {
            outcomes.push(o);
        }
        outcomes.len() == calls as usize
    });
    let s = p.responder().expect("responder").stats();
    assert!(done, "{} of {calls} outcomes, stats {s:?}", outcomes.len());
    outcomes.sort_by_key(|o| o.tag);
    for (i, o) in outcomes.iter().enumerate() {
        assert_eq!(o.tag, i as u64, "exactly one outcome per call");
        assert_eq!(o.status, CallStatus::Success, "call {i}");
        assert_eq!(results(o), &opaque(&data(i as u32))[..], "call {i}");
    }
    assert_eq!(
        *order.lock().expect("order"),
        (0..calls).collect::<Vec<_>>(),
        "served once each, in arrival order"
    );
    assert_eq!((s.cont_calls, s.held, s.overruns), (1, 3, 0), "{s:?}");
}

per_provider!(
    withheld_reply_completions_lose_no_call,
    a_held_call_group_is_served_in_its_turn
);

/// The responder core driven by hand (synthetic completions, no fabric): the exact
/// bound. With 8 credits (16 contexts) and no reply's Send completing, 16 calls are
/// served, the next 8 (what a requester granted 8 can still have outstanding) are held,
/// and one more, beyond any grant, is an overrun: dropped, never answered. Each Send
/// completion then frees a context for the oldest held call.
mod by_hand {
    use std::sync::Arc;
    use std::time::Instant;

    use rpcrdma::testing::wire::Wire;
    use rpcrdma::wire::private_data::PrivateData;
    use rpcrdma::{CallView, ReplyWriter, Service, ServiceError};
    use rpcrdma::{ConnConfig, CorePools, GrantPolicy, ResponderCore};
    use rpcrdma_pools::HugePages;

    /// Answers NULL, except the calls it leaves unanswered (`ReplyWriter::no_reply`).
    struct Ok0 {
        silent: &'static [u32],
    }

    impl Service for Ok0 {
        fn handle_call(
            &mut self,
            call: &CallView<'_>,
            w: &mut ReplyWriter<'_>,
        ) -> Result<(), ServiceError> {
            if self.silent.contains(&call.xid()) {
                w.no_reply();
                return Ok(());
            }
            for v in [call.xid(), 1, 0, 0, 0, 0] {
                w.put_u32(v).map_err(|_| ServiceError::SystemErr)?;
            }
            Ok(())
        }
    }

    fn pools() -> CorePools {
        crate::engine_support::hand_pools(
            ["h-recv", "h-send", "h-large"],
            [128, 128, 8],
            [0x11, 0x22, 0x33],
        )
    }

    /// A NULL call (program 7) with three empty chunk lists.
    fn call(xid: u32) -> Vec<u8> {
        [xid, 1, 1, 0, 0, 0, 0, xid, 0, 2, 7, 1, 0, 0, 0, 0, 0]
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect()
    }

    fn xid_of(bytes: &[u8]) -> u32 {
        u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
    }

    const CREDITS: u32 = 8;

    /// A responder core granting 8 credits (16 contexts), established with
    /// `private_data` from the requester, and its wire.
    fn established(
        silent: &'static [u32],
        private_data: &[u8],
    ) -> (ResponderCore<Ok0>, CorePools, Wire, Instant) {
        let cfg = ConnConfig {
            credits: CREDITS,
            large_buf_size: 65536,
            large_bufs: 8,
            send_bufs: 128,
            queue_len: 8,
            hugepages: HugePages::Never,
            ..ConnConfig::default()
        };
        let pools = pools();
        let policy = Arc::new(GrantPolicy::new(CREDITS, CREDITS));
        let mut core =
            ResponderCore::responder(&cfg, &pools, Ok0 { silent }, policy).expect("core");
        let now = Instant::now();
        let mut qp = Wire::new([&pools.recv, &pools.send, &pools.large]);
        core.on_established(private_data, now);
        qp.pump(&mut core, now);
        (core, pools, qp, now)
    }

    #[test]
    fn calls_past_the_contexts_are_held_and_only_calls_past_the_grant_overrun() {
        held_in_order(&[]);
    }

    /// Held calls the service leaves unanswered give their context straight back: the
    /// next held call takes it at once, in order.
    #[test]
    fn a_held_call_left_unanswered_frees_its_context_for_the_next() {
        held_in_order(&[18, 19, 23]);
    }

    /// The answer to a broken call group (ROPT_XMTERR) needs a context of its own:
    /// with none free it waits like the call it answers, and goes out once a reply's
    /// Send completes (it used to be dropped and counted as an overrun, leaving the
    /// requester to its timeout).
    #[test]
    fn a_transmit_error_waits_for_a_context() {
        use rpcrdma::wire::private_data::{Advertisement, Extensions};
        use rpcrdma::wire::rtr::{
            OptxInfo, RtrBody, RtrView, RDMA_OPTIONAL, ROPT_XMTCONT, ROPT_XMTREQ,
        };
        let adv = Advertisement::new(&PrivateData::new(4096, 4096, true), Extensions::ALL)
            .expect("encodes");
        let (mut core, _pools, mut qp, now) = established(&[], adv.as_bytes());
        let contexts = 2 * CREDITS;
        for xid in 1..=contexts {
            let wc = qp.deliver(&call(xid));
            core.handle_completion(&wc, now);
            qp.pump(&mut core, now);
        }
        assert_eq!(qp.sends.len(), contexts as usize, "every context replying");
        // A continuation with no group before it: broken, answered ROPT_XMTERR.
        let words = [
            0x77u32,
            1,
            8,
            RDMA_OPTIONAL,
            ROPT_XMTCONT,
            12,
            1,
            ROPT_XMTREQ,
            8,
            0,
            0,
        ];
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
        let wc = qp.deliver(&bytes);
        core.handle_completion(&wc, now);
        qp.pump(&mut core, now);
        let s = core.responder_stats();
        assert_eq!(s.broken_call_groups, 1);
        assert_eq!(
            (s.held, s.holding, s.overruns, s.transmit_errors_sent),
            (1, 1, 0, 0),
            "{s:?}"
        );
        assert_eq!(qp.sends.len(), contexts as usize, "nothing sent yet");
        let wc = qp
            .complete_send(rpcrdma::fabric::WcStatus::Success)
            .expect("a reply to complete");
        core.handle_completion(&wc, now);
        qp.pump(&mut core, now);
        let s = core.responder_stats();
        assert_eq!((s.holding, s.overruns, s.transmit_errors_sent), (0, 0, 1));
        let sent = qp.sends.back().expect("the error went out");
        let view = RtrView::parse(&sent.bytes).expect("an RDMA_OPTIONAL message");
        let RtrBody::XmtErr(e) = view.body else {
            panic!("not a transmission error: {:?}", view.body);
        };
        assert_eq!((e.bad.xid, e.info), (0x77, OptxInfo::BadCont));
    }

    fn held_in_order(silent: &'static [u32]) {
        let pd = PrivateData::new(4096, 4096, true)
            .to_bytes()
            .expect("encodes");
        let (mut core, _pools, mut qp, now) = established(silent, &pd);
        let contexts = 2 * CREDITS;
        let send = |core: &mut ResponderCore<Ok0>, qp: &mut Wire, xid: u32| {
            let wc = qp.deliver(&call(xid));
            core.handle_completion(&wc, now);
            qp.pump(core, now);
        };
        for xid in 1..=contexts {
            send(&mut core, &mut qp, xid);
        }
        assert_eq!(qp.sends.len(), contexts as usize, "one reply per context");
        assert_eq!(core.active(), contexts as usize);
        for xid in contexts + 1..=contexts + CREDITS {
            send(&mut core, &mut qp, xid);
        }
        let s = core.responder_stats();
        assert_eq!((s.held, s.holding, s.overruns), (8, 8, 0), "{s:?}");
        assert_eq!(
            qp.sends.len(),
            contexts as usize,
            "held calls wait, unanswered"
        );
        // One more than any grant allows outstanding: a violation, dropped.
        let rogue = contexts + CREDITS + 1;
        send(&mut core, &mut qp, rogue);
        let s = core.responder_stats();
        assert_eq!((s.held, s.holding, s.overruns), (8, 8, 1), "{s:?}");
        // The replies' Sends complete one at a time: each frees a context for the
        // oldest held call, whose reply goes out at once.
        let mut answered: Vec<u32> = qp.sends.iter().map(|p| xid_of(&p.bytes)).collect();
        while let Some(wc) = qp.complete_send(rpcrdma::fabric::WcStatus::Success) {
            core.handle_completion(&wc, now);
            qp.pump(&mut core, now);
            if let Some(p) = qp.sends.back() {
                let xid = xid_of(&p.bytes);
                if !answered.contains(&xid) {
                    answered.push(xid);
                }
            }
        }
        assert_eq!(
            answered,
            (1..=contexts + CREDITS)
                .filter(|x| !silent.contains(x))
                .collect::<Vec<_>>(),
            "every call within the credits answered once, in arrival order; the rogue not"
        );
        let s = core.responder_stats();
        assert_eq!(s.calls, u64::from(contexts + CREDITS));
        assert_eq!(s.no_reply, silent.len() as u64);
        assert_eq!((s.holding, s.overruns), (0, 1));
        assert_eq!(core.active(), 0);
    }
}
