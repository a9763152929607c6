//! Calls that reach the responder before it hears that the connection is established.
//!
//! The passive side learns of establishment from the CM (the shm RTU, the verbs
//! ESTABLISHED event), while the requester may send as soon as it has the accept: on
//! shm the responder's completion-queue poll executes the requester's Send whether or
//! not its CM poll has read the RTU, so a call can be in the core while its
//! connection is still connecting. Such a call must be judged by what the connect
//! request negotiated (the requester's receive buffer structure for a reply asked for
//! by send-based DDP), and answered once the connection is established: before the
//! fix it was judged by the RFC 8166 defaults, broken off as a group with a bad TBSN,
//! and the ROPT_XMTERR could not be sent while connecting, so the call had no outcome
//! (the `tools` test `serve_call::call_shows_send_based_ddp_replies`, 31 of 100 runs
//! under load).

use std::time::Instant;

use crate::engine_support;

use engine_support::*;
use rpcrdma::fabric::shm::ShmProvider;
use rpcrdma::{CallRequest, CallStatus, ConnConfig, ConnState, Requester, Responder};

/// The requester's DDP segment.
const SEG: u32 = 256 * 1024;
/// A result over four segments: the reply is a group asked for by send-based DDP.
const ITEM: usize = 1 << 20;

fn cfg(send_ddp: bool) -> ConnConfig {
    ConnConfig {
        inline_send: 4096,
        inline_recv: 4096,
        credits: 8,
        large_buf_size: 1 << 20,
        large_bufs: 8,
        extensions: true,
        send_ddp: Some(send_ddp),
        send_ddp_segment: Some(SEG),
        send_ddp_max: Some(u32::MAX),
        ..test_config()
    }
}

type Server = Responder<ShmProvider, TestService, Box<dyn FnMut() -> Option<TestService>>>;

/// Polls `what` until `done` holds, failing the test at the deadline.
fn until(what: &str, mut step: impl FnMut() -> bool) {
    let end = Instant::now() + DEADLINE;
    while !step() {
        assert!(Instant::now() < end, "deadline passed waiting for {what}");
    }
}

/// The interleaving, step by step: the responder accepts (its CM sends the REP), the
/// requester hears it and sends the RTU, then its call; the responder's connection
/// polls its completion queue only (the executor runs the Send into a receive) before
/// the responder's CM poll reads the RTU. The call must still get its reply.
#[test]
fn a_send_ddp_reply_call_before_the_rtu_is_answered() {
    let net = ShmNet;
    let (cdev, sdev, addr) = (net.device(), net.device(), net.addr());
    let mut once = Some(TestService::default());
    let factory: Box<dyn FnMut() -> Option<TestService>> = Box::new(move || once.take());
    let mut server: Server = Responder::bind(sdev, &addr, cfg(false), factory).expect("listens");
    let mut client = Requester::<ShmProvider>::connect_with(&cdev, &addr, &cfg(true))
        .expect("connect request sent");
    until("the accept", || {
        server.poll(Instant::now());
        !server.connections().is_empty()
    });
    until("the requester's establishment", || {
        client.poll(Instant::now());
        client.state() == ConnState::Established
    });
    // A READ-like call whose 1 MiB result is asked for by send-based DDP (a reply
    // group into the requester's 256 KiB segments).
    let mut b = client.alloc_msg().expect("send buffer");
    write_call(&mut b, PROC_TWO_RESULTS, &words(&[ITEM as u32, 0]));
    let mut req = CallRequest::new(b, 512);
    req.push_write_sink(client.alloc_large().expect("sink"))
        .expect("room");
    client.submit(req, 1).expect("submitted");
    client.poll(Instant::now());
    assert_eq!(client.stats().calls_sent, 1, "the call is on the wire");
    // The responder's completion queue only: the call lands while it is connecting.
    let conn = &mut server.connections_mut()[0];
    until("the call's receive", || {
        conn.poll(Instant::now());
        conn.stats().optional_messages == 1
    });
    assert_eq!(
        conn.state(),
        ConnState::Connecting,
        "the interleaving: the call came before the RTU was read"
    );
    // Now everything, as the server and the client run it.
    let mut outcome = None;
    until("the call's outcome", || {
        server.poll(Instant::now());
        client.poll(Instant::now());
        outcome = client.poll_outcome();
        outcome.is_some()
    });
    let o = outcome.expect("outcome");
    let r = server.connections()[0].stats();
    assert_eq!(
        r.broken_call_groups, 0,
        "the group was judged by the connect request"
    );
    assert_eq!(o.status, CallStatus::Success);
    assert_eq!(word(results(&o), 0), ITEM as u32);
    assert!(
        o.write_result(0) == Some(&pattern(ITEM, 1)[..]),
        "the result arrived intact"
    );
    let st = client.stats();
    assert_eq!((st.send_ddp_reply_asks, st.send_ddp_reply_items), (1, 1));
    assert_eq!(st.reply_messages, 4, "a reply group of four transmissions");
}

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// The safety net: a Send that waits for a receive that never comes. The engine sets
/// the RNR retry count to infinite (RPC-over-RDMA credits mean a well-behaved
/// responder always has a receive posted), so the provider never fails such a Send;
/// a peer whose receives never appear must still not leave a call without an outcome:
/// the requester's call timeout ends it. The peer here is a bare shm queue pair that
/// accepts and polls (its target executes the requester's requests, finding no
/// receive every time) but never posts a receive.
#[test]
fn a_call_whose_send_waits_for_a_receive_forever_times_out() {
    use rpcrdma::fabric::{
        CmEvent, Completion, CompletionQueue, ConnectionManager, Device, QpCaps, QpConfig, QpInit,
        QueuePair,
    };
    use std::time::Duration;

    let net = ShmNet;
    let (cdev, sdev, addr) = (net.device(), net.device(), net.addr());
    let mut cm = sdev.create_cm().expect("cm");
    cm.listen(&addr).expect("listens");
    let pd = sdev.alloc_pd().expect("pd");
    let mut cq = sdev.create_cq(64).expect("cq");
    let client_cfg = ConnConfig {
        call_timeout: Duration::from_millis(200),
        ..test_config()
    };
    let mut client =
        Requester::<ShmProvider>::connect_with(&cdev, &addr, &client_cfg).expect("connecting");
    let mut qp = None;
    until("the connect request", || {
        client.poll(Instant::now());
        if let Ok(Some(CmEvent::ConnectRequest { request, .. })) = cm.poll_event() {
            let init = QpInit {
                pd: &pd,
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                config: QpConfig {
                    caps: QpCaps {
                        max_send_wr: 16,
                        max_recv_wr: 16,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                    },
                    ..QpConfig::default()
                },
            };
            qp = Some(cm.accept(request, init, &[]).expect("accepts"));
        }
        qp.is_some()
    });
    let mut wcs = [Completion::EMPTY; 16];
    let mut polled = 0;
    until("the requester's establishment", || {
        client.poll(Instant::now());
        let _ = cm.poll_event();
        polled += cq.poll(&mut wcs);
        client.state() == ConnState::Established
    });
    let mut b = client.alloc_msg().expect("send buffer");
    write_call(&mut b, PROC_NULL, &[]);
    client
        .submit(CallRequest::new(b, 256), 7)
        .expect("submitted");
    let mut outcome = None;
    until("the call's outcome", || {
        client.poll(Instant::now());
        let _ = cm.poll_event();
        polled += cq.poll(&mut wcs);
        outcome = client.poll_outcome();
        outcome.is_some()
    });
    let o = outcome.expect("outcome");
    assert_eq!(o.status, CallStatus::Timeout, "{:?}", o.status);
    assert_eq!(o.tag, 7);
    assert_eq!(polled, 0, "the peer never received anything");
    assert_eq!(client.stats().calls_sent, 1, "the call was on the wire");
    let qp = qp.expect("accepted");
    assert!(
        !qp.state().is_error(),
        "the Send is still waiting for a receive, not failed"
    );
}

/// The responder core driven by hand: a call group broken while the connection is
/// still connecting (here a continuation with no group open, OPTXERR_BADCONT) is
/// answered with ROPT_XMTERR once the connection is established, not dropped because
/// nothing could be sent when it was found.
mod by_hand {
    use std::sync::Arc;
    use std::time::Instant;

    use rpcrdma::testing::wire::Wire;
    use rpcrdma::wire::private_data::{Advertisement, Extensions, PrivateData};
    use rpcrdma::wire::rtr::{OptxInfo, RtrBody, RtrOp, RtrRepr, RtrView, XmtCont, ROPT_XMTREQ};
    use rpcrdma::{CallView, ConnConfig, CorePools, GrantPolicy, ReplyWriter, ResponderCore};
    use rpcrdma::{Service, ServiceError};
    use rpcrdma_pools::HugePages;

    fn pools() -> CorePools {
        crate::engine_support::hand_pools(
            ["e-recv", "e-send", "e-large"],
            [128, 128, 8],
            [0x11, 0x22, 0x33],
        )
    }

    /// Answers nothing: no call reaches it here.
    struct Never;

    impl Service for Never {
        fn handle_call(
            &mut self,
            _call: &CallView<'_>,
            _w: &mut ReplyWriter<'_>,
        ) -> Result<(), ServiceError> {
            Err(ServiceError::SystemErr)
        }
    }

    #[test]
    fn a_group_broken_while_connecting_is_answered_once_established() {
        let pools = pools();
        let cfg = ConnConfig {
            credits: 8,
            large_buf_size: 65536,
            large_bufs: 8,
            send_bufs: 128,
            queue_len: 8,
            hugepages: HugePages::Never,
            extensions: true,
            ..ConnConfig::default()
        };
        let policy = Arc::new(GrantPolicy::new(8, 8));
        let mut core = ResponderCore::responder(&cfg, &pools, Never, policy).expect("core");
        let now = Instant::now();
        let mut qp = Wire::new([&pools.recv, &pools.send, &pools.large]);
        let adv = Advertisement::new(&PrivateData::new(4096, 4096, true), Extensions::ALL)
            .expect("encodes");
        core.on_connect_request(adv.as_bytes());
        assert!(
            core.extensions().continuation,
            "negotiated from the connect request"
        );
        qp.pump(&mut core, now);
        let stray = RtrRepr {
            xid: 0x1234,
            credit: 8,
            op: RtrOp::XmtCont(XmtCont {
                xnum: 1,
                itype: ROPT_XMTREQ,
                pslen: 0,
            }),
        };
        let mut msg = vec![0u8; stray.encoded_len()];
        stray.encode(&mut msg).expect("fits");
        let wc = qp.deliver(&msg);
        core.handle_completion(&wc, now);
        qp.pump(&mut core, now);
        assert_eq!(core.responder_stats().broken_call_groups, 1);
        assert!(qp.sends.is_empty(), "nothing is sent while connecting");
        core.on_established(adv.as_bytes(), now);
        qp.pump(&mut core, now);
        assert_eq!(qp.sends.len(), 1, "the ROPT_XMTERR goes once established");
        let v = RtrView::parse(&qp.sends[0].bytes).expect("an RDMA_OPTIONAL message");
        assert_eq!(v.xid, 0x1234);
        let RtrBody::XmtErr(e) = v.body else {
            panic!("expected ROPT_XMTERR, got {:?}", v.body);
        };
        assert_eq!(e.info, OptxInfo::BadCont);
        assert_eq!(core.responder_stats().transmit_errors_sent, 1);
    }
}
