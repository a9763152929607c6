//! End to end over shm, sim and siw: message continuation
//! (draft-dnoveck-rpcrdma-rtrext §4). With 4 KiB inline thresholds, a 20 KB ECHO goes as
//! a group of Sends each way when both peers offer extensions (no RDMA Read, no Reply
//! chunk), and as before (Position-Zero Read chunk, Reply chunk) when either does not;
//! the peers' characteristics are exchanged at connection start.

use crate::engine_support;

use engine_support::*;
use rpcrdma::fabric::{Provider, QueuePair, SendWr};
use rpcrdma::wire::private_data::CONTINUATION_GROUP_MAX;
use rpcrdma::wire::rtr::{
    MsgDir, OptxInfo, RDMA_OPTIONAL, ROPT_XMTCONT, ROPT_XMTREQ, ROPT_XMTRESP,
};
use rpcrdma::{CallRequest, CallStatus, ConnConfig, Pair};

const ECHO_LEN: usize = 20_000;

fn cfg(extensions: bool) -> ConnConfig {
    ConnConfig {
        inline_send: 4096,
        inline_recv: 4096,
        extensions,
        ..test_config()
    }
}

/// A small call, so the responder's grant (one credit until its first reply) opens the
/// window: a group needs a credit per Send, and with fewer free the call goes by
/// Position-Zero Read chunk instead (the draft's §4.3).
fn open_window<P: Provider>(p: &mut Pair<P, TestService>) {
    let m = msg(p, PROC_NULL, &[]);
    assert_eq!(
        call(p, CallRequest::new(m, 256)).status,
        CallStatus::Success
    );
    assert!(p.requester.credits().granted() >= 6);
}

/// A 20 KB ECHO: the reply carries the same 20 KB back.
fn echo<P: Provider>(p: &mut Pair<P, TestService>, seed: u8) -> rpcrdma::Outcome {
    let data = pattern(ECHO_LEN, seed);
    let m = msg(p, PROC_ECHO, &opaque(&data));
    let o = call(p, CallRequest::new(m, 24 + 4 + ECHO_LEN as u32 + 64));
    assert_eq!(o.status, CallStatus::Success, "{:?}", o.status);
    assert_eq!(&results(&o)[4..4 + ECHO_LEN], &data[..]);
    o
}

fn both_enabled_goes_by_continuation<N: Net>(net: N) {
    let mut p = pair(&net, &cfg(true), &cfg(true));
    let ext = p.requester.core().extensions();
    assert!(ext.continuation);
    let chars = p.requester.core().peer_chars();
    assert!(chars.continuation());
    assert_eq!(
        chars.req_rx_limit,
        CONTINUATION_GROUP_MAX.min(8),
        "the server's credits"
    );
    open_window(&mut p);
    let before = p.requester.stats();
    let rbefore = p.responder().expect("responder").stats();
    for seed in 0..3 {
        echo(&mut p, seed);
    }
    let after = p.requester.stats();
    let r = p.responder().expect("responder").stats();
    // 20 044 octets of call in pieces of 4096 - 44 (ROPT_XMTREQ's header): five Sends;
    // 20 028 of reply in pieces of 4096 - 40: five.
    assert_eq!(after.cont_calls - before.cont_calls, 3);
    assert_eq!(after.call_messages - before.call_messages, 3 * 5);
    assert_eq!(after.cont_replies - before.cont_replies, 3);
    assert_eq!(after.reply_messages - before.reply_messages, 3 * 5);
    // No RDMA Read (no Position-Zero Read chunk, no pulled reply), no Reply chunk.
    assert_eq!(after.long_calls, before.long_calls);
    assert_eq!(after.reply_chunks, before.reply_chunks);
    assert_eq!(after.read_chunk_replies, before.read_chunk_replies);
    assert_eq!(r.long_calls, rbefore.long_calls);
    assert_eq!(r.chunk_replies, rbefore.chunk_replies);
    assert_eq!(r.cont_calls - rbefore.cont_calls, 3);
    assert_eq!(r.cont_replies - rbefore.cont_replies, 3);
    assert_eq!(r.cont_reply_messages - rbefore.cont_reply_messages, 3 * 5);
    assert_eq!(r.broken_call_groups, 0);
    // Credits all back: one RPC took six, and gave six back.
    let c = p.requester.credits();
    assert_eq!(c.in_flight(), 0);
    // Small calls still go as plain RDMA_MSG.
    let small = msg(&p, PROC_ECHO, &opaque(b"hi"));
    let o = call(&mut p, CallRequest::new(small, 256));
    assert_eq!(o.status, CallStatus::Success);
    assert_eq!(p.requester.stats().call_messages, after.call_messages + 1);
}

/// The first call of a connection has one credit (RFC 8166 §3.3.1) but may go as a
/// group alone: the responder's XCHAR_REQRXLIM (its credits, 8 here) says it takes one.
fn first_call_goes_as_a_group_alone<N: Net>(net: N) {
    let mut p = pair(&net, &cfg(true), &cfg(true));
    assert_eq!(p.requester.core().peer_chars().req_rx_limit, 8);
    assert_eq!(p.requester.credits().granted(), 1);
    echo(&mut p, 3);
    let st = p.requester.stats();
    assert_eq!((st.cont_calls, st.call_messages, st.long_calls), (1, 5, 0));
    assert_eq!(p.requester.credits().in_flight(), 0);
}

fn either_disabled_goes_as_before<N: Net>(net: N) {
    for (client, server) in [(false, true), (true, false)] {
        let mut p = pair(&net, &cfg(client), &cfg(server));
        assert!(!p.requester.core().extensions().continuation);
        assert!(!p.requester.core().peer_chars().continuation());
        open_window(&mut p);
        let before = p.requester.stats();
        let rbefore = p.responder().expect("responder").stats();
        echo(&mut p, 7);
        let after = p.requester.stats();
        let r = p.responder().expect("responder").stats();
        assert_eq!(after.cont_calls, 0);
        assert_eq!(after.call_messages - before.call_messages, 1);
        assert_eq!(
            after.long_calls - before.long_calls,
            1,
            "Position-Zero Read chunk"
        );
        assert_eq!(
            r.long_calls - rbefore.long_calls,
            1,
            "the responder read it"
        );
        assert_eq!(after.reply_chunks - before.reply_chunks, 1);
        assert_eq!(r.chunk_replies - rbefore.chunk_replies, 1);
        assert_eq!(r.optional_messages, 0);
    }
}

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// An RDMA_OPTIONAL message: header, optinfo words, then `payload` octets of 0x5a.
fn optional(xid: u32, opttype: u32, info: &[u32], payload: usize) -> Vec<u8> {
    let mut v = words(&[xid, 1, 8, RDMA_OPTIONAL, opttype, 4 * info.len() as u32]);
    v.extend_from_slice(&words(info));
    v.resize(v.len() + payload, 0x5a);
    v
}

fn xmtreq(xid: u32, count: u32, pslen: u32) -> Vec<u8> {
    optional(xid, ROPT_XMTREQ, &[0, 0, count, 0, pslen], pslen as usize)
}

fn xmtcont(xid: u32, xnum: u32, itype: u32, pslen: u32) -> Vec<u8> {
    optional(xid, ROPT_XMTCONT, &[xnum, itype, pslen], pslen as usize)
}

/// Posts `msgs` in order from the requester's queue pair, as a broken peer would.
fn inject<P: Provider>(p: &mut Pair<P, TestService>, msgs: &[Vec<u8>]) {
    let mut bufs = Vec::new();
    for m in msgs {
        let mut buf = p.requester.alloc_msg().expect("buffer");
        buf.fill(m).expect("fits");
        let sge = buf.sge(0, m.len()).expect("registered");
        // wr_id 0 names no kind: the requester counts its completion as stray.
        p.requester
            .qp_mut()
            .post_send(&[SendWr::send(0, &[sge])])
            .expect("posted");
        bufs.push(buf);
    }
    // The Sends complete before their buffers go back.
    let want = p.responder().map_or(0, |r| r.stats().optional_messages);
    let ok = p.run_until(DEADLINE, |p| {
        p.responder()
            .is_some_and(|r| r.stats().optional_messages + r.stats().calls > want)
    });
    assert!(ok, "the responder received them");
    drop(bufs);
}

/// Every broken call group is answered with the ROPT_XMTERR the draft's §9.5 names,
/// once per group, and the connection carries on.
fn broken_call_groups_get_transmit_errors<N: Net>(net: N) {
    let mut p = pair(&net, &cfg(true), &cfg(true));
    open_window(&mut p);
    let cases: Vec<(Vec<Vec<u8>>, OptxInfo, u32)> = vec![
        // A continuation with no group.
        (
            vec![xmtcont(0x61, 1, ROPT_XMTREQ, 8)],
            OptxInfo::BadCont,
            0x61,
        ),
        // Another XID in the middle of a group.
        (
            vec![xmtreq(0x62, 3, 64), xmtcont(0x99, 1, ROPT_XMTREQ, 8)],
            OptxInfo::BadXid {
                expect: 0x62,
                current: 0x99,
            },
            0x62,
        ),
        // Transmission 2 where 1 was due.
        (
            vec![xmtreq(0x63, 3, 64), xmtcont(0x63, 2, ROPT_XMTREQ, 8)],
            OptxInfo::BadSeq {
                expect: 1,
                current: 2,
            },
            0x63,
        ),
        // A continuation of a reply inside a call group.
        (
            vec![xmtreq(0x64, 2, 64), xmtcont(0x64, 1, ROPT_XMTRESP, 8)],
            OptxInfo::BadOmt {
                expect: ROPT_XMTREQ,
                current: ROPT_XMTRESP,
            },
            0x64,
        ),
        // A new request before the group ended (its own group then completes).
        (
            vec![
                xmtreq(0x65, 2, 64),
                xmtreq(0x66, 2, 64),
                xmtcont(0x66, 1, ROPT_XMTREQ, 8),
            ],
            OptxInfo::BadOmt {
                expect: ROPT_XMTCONT,
                current: ROPT_XMTREQ,
            },
            0x65,
        ),
        // A version 1 message in the middle of a group.
        (
            vec![xmtreq(0x67, 2, 64), words(&[0x68, 1, 8, 0, 0, 0, 0])],
            OptxInfo::BadHmt {
                expect: RDMA_OPTIONAL,
                current: 0,
            },
            0x67,
        ),
        // A payload length past the end of the transmission.
        (
            vec![{
                let mut m = xmtreq(0x69, 1, 64);
                m.truncate(m.len() - 10);
                m
            }],
            OptxInfo::BadPl {
                value: 64,
                min: 0,
                max: 54,
            },
            0x69,
        ),
        // More transmissions than the advertised request receive limit.
        (
            vec![xmtreq(0x6a, CONTINUATION_GROUP_MAX + 1, 8)],
            OptxInfo::BadSeq {
                expect: CONTINUATION_GROUP_MAX,
                current: CONTINUATION_GROUP_MAX + 1,
            },
            0x6a,
        ),
    ];
    for (k, (msgs, want, xid)) in cases.into_iter().enumerate() {
        let before = p.requester.stats().transmit_errors_received;
        inject(&mut p, &msgs);
        let ok = p.run_until(DEADLINE, |p| {
            p.requester.stats().transmit_errors_received > before
        });
        assert!(ok, "case {k}: ROPT_XMTERR came back");
        let e = p.requester.core().last_transmit_error().expect("recorded");
        assert_eq!(e.info, want, "case {k}");
        assert_eq!(e.lead.map_or(e.bad.xid, |l| l.xid), xid, "case {k}");
        assert_eq!(e.bad.dir, MsgDir::Call);
    }
    // Eight groups broken, one ROPT_XMTERR each.
    let r = p.responder().expect("responder").stats();
    assert_eq!(r.broken_call_groups, 8);
    assert_eq!(r.transmit_errors_sent, 8);
    // The connection carries on: a group of our own still goes through.
    echo(&mut p, 9);
    assert!(p.requester.stats().cont_calls >= 1);
}

per_provider!(
    both_enabled_goes_by_continuation,
    first_call_goes_as_a_group_alone,
    either_disabled_goes_as_before,
    broken_call_groups_get_transmit_errors,
);

/// The seeded simulation with message loss (each lost message breaks the connection,
/// as on a real RC queue pair), delays and CQ stalls, under a workload of continuation
/// groups each way and small calls: every call gets one outcome (its 20 KB echoed
/// exactly, or a transport failure when the connection broke, mid-group or not), no
/// credit or reserved receive leaks while connected, and every pool is full once both
/// sides closed. Across the seeds some connections break while groups are in flight.
#[test]
fn seeded_sim_with_lost_messages_and_disconnects_mid_group() {
    use rpcrdma::fabric::sim::{FaultConfig, SimConfig, SimNet};
    use rpcrdma::{ConnState, TransportError};
    use std::time::Duration;

    let mut broke_with_groups_out = 0;
    let mut groups = 0;
    for seed in 0x70u64..0x78 {
        let faults = FaultConfig {
            drop_per_mille: 4,
            rnr_per_mille: 0,
            max_recv_delay: Duration::from_micros(50),
            cq_stall_per_mille: 20,
            max_cq_stall: Duration::from_micros(100),
        };
        let net = SimNet::new(
            SimConfig::seeded(seed)
                .with_latency(Duration::from_micros(1), Duration::from_micros(100))
                .with_faults(faults),
        );
        let _report = net.report_on_panic();
        let fixture = SimNetFixture(net.clone());
        let mut p = pair(&fixture, &cfg(true), &cfg(true));
        let cpools = p.requester.resources().pools().clone();
        let spools = p
            .responder()
            .expect("responder")
            .resources()
            .pools()
            .clone();
        let mut rng = net.workload_rng(2);
        let mut expect = std::collections::BTreeMap::new();
        let mut outcomes = 0usize;
        let mut broke_mid = false;
        for tag in 0..40u64 {
            if p.requester.state() != ConnState::Established {
                break;
            }
            let big = rng.below(3) != 0;
            let n = if big {
                5000 + rng.below(15_000) as usize
            } else {
                100
            };
            let data = pattern(n, tag as u8);
            let m = msg(&p, PROC_ECHO, &opaque(&data));
            let req = CallRequest::new(m, (n + 200) as u32);
            p.requester.submit(req, tag).expect("submitted");
            expect.insert(tag, data);
            for _ in 0..rng.range_inclusive(1, 6) {
                let now = p.requester.clock().now();
                p.poll(now);
            }
            while let Some(o) = p.next_outcome() {
                outcomes += 1;
                match o.status {
                    CallStatus::Success => {
                        let want = &expect[&o.tag];
                        assert_eq!(&results(&o)[4..4 + want.len()], &want[..], "seed {seed}");
                    }
                    // A group call lost with the connection (sent, or its reply group
                    // on the way).
                    CallStatus::Transport(TransportError::Disconnected) => {
                        broke_mid |= expect[&o.tag].len() > 4096;
                    }
                    other => panic!("seed {seed}: tag {}: {other:?}", o.tag),
                }
            }
        }
        let n = expect.len();
        let expect = &expect;
        let broke_mid = &mut broke_mid;
        let done = p.run_until(DEADLINE, |p| {
            while let Some(o) = p.next_outcome() {
                outcomes += 1;
                if o.status == CallStatus::Transport(TransportError::Disconnected) {
                    *broke_mid |= expect[&o.tag].len() > 4096;
                }
                assert!(
                    matches!(
                        o.status,
                        CallStatus::Success | CallStatus::Transport(TransportError::Disconnected)
                    ),
                    "seed {seed}: {:?}",
                    o.status
                );
            }
            outcomes == n
        });
        assert!(done, "seed {seed}: {outcomes} of {n} outcomes");
        groups += p.requester.stats().cont_calls;
        eprintln!(
            "seed {seed}: {n} calls, state {:?}, groups {}, broke mid {}, sim {:?}",
            p.requester.state(),
            p.requester.stats().cont_calls,
            *broke_mid,
            net.stats()
        );
        if p.requester.state() == ConnState::Established {
            assert_eq!(p.requester.credits().in_flight(), 0, "seed {seed}: credits");
            p.requester.close();
        } else if *broke_mid {
            broke_with_groups_out += 1;
        }
        let closed = p.run_until(DEADLINE, |p| {
            p.requester.state() == ConnState::Closed
                && p.responder().is_none_or(|r| r.state() == ConnState::Closed)
        });
        assert!(closed, "seed {seed}: both sides close");
        drop(p);
        for (who, pools) in [("requester", &cpools), ("responder", &spools)] {
            assert!(
                pools.recv.is_full() && pools.send.is_full() && pools.large.is_full(),
                "seed {seed}: {who} pools full"
            );
        }
    }
    assert!(groups > 20, "continuation groups were exercised: {groups}");
    assert!(
        broke_with_groups_out > 0,
        "some connection broke with calls in flight"
    );
}

/// The requester core by hand (`testing::Wire`): what its group looks like on the
/// wire, a reply group reassembled, a broken reply group and a ROPT_XMTERR naming a
/// call in flight.
mod by_hand {
    use std::sync::Arc;
    use std::time::Instant;

    use rpcrdma::testing::fast_reg_slots;
    use rpcrdma::testing::wire::Wire;
    use rpcrdma::wire::private_data::{Advertisement, Extensions, PrivateData};
    use rpcrdma::wire::rtr::chars::{RTRS_XCONT, RTRS_XREQ, RTRS_XRESP};
    use rpcrdma::wire::rtr::{
        MsgDir, OptxInfo, RtrBody, RtrOp, RtrRepr, RtrView, TransportChars, XmsId, XmtCont, XmtErr,
        ROPT_XMTREQ, ROPT_XMTRESP,
    };
    use rpcrdma::{
        BadReply, CallRequest, CallStatus, ConnConfig, CorePools, CreditTable, RegBuf,
        RequesterCore, TransportError,
    };
    use rpcrdma_pools::HugePages;

    fn pools() -> CorePools {
        crate::engine_support::hand_pools(
            ["recv", "send", "large"],
            [64, 256, 32],
            [0x10, 0x20, 0x30],
        )
    }

    fn setup() -> (RequesterCore, CorePools, Wire, Instant, Arc<CreditTable>) {
        let cfg = ConnConfig {
            credits: 8,
            large_buf_size: 65536,
            large_bufs: 8,
            send_bufs: 128,
            queue_len: 8,
            hugepages: HugePages::Never,
            ..ConnConfig::default()
        };
        let pools = pools();
        let credits = Arc::new(CreditTable::new(8, false));
        let mrs = fast_reg_slots(1, 40);
        let mut core = RequesterCore::requester(&cfg, &pools, &mrs, credits.clone()).expect("core");
        let now = Instant::now();
        let mut qp = Wire::new([&pools.recv, &pools.send, &pools.large]);
        let adv = Advertisement::new(&PrivateData::new(4096, 4096, true), Extensions::ALL)
            .expect("encodes");
        core.on_established(adv.as_bytes(), now);
        qp.pump(&mut core, now);
        (core, pools, qp, now, credits)
    }

    /// A call of `len` octets (RPC header, then 0x33s) in a large buffer.
    fn long_call(pools: &CorePools, len: usize, max_reply: u32) -> CallRequest {
        let mut m = RegBuf::from_pool(&pools.large).expect("buffer");
        let mut v = Vec::new();
        for w in [0u32, 0, 2, 7, 1, 0, 0, 0, 0, 0] {
            v.extend_from_slice(&w.to_be_bytes());
        }
        v.resize(len, 0x33);
        m.fill(&v).expect("fits");
        CallRequest::new(m, max_reply)
    }

    fn encode(xid: u32, op: RtrOp, payload: &[u8]) -> Vec<u8> {
        let r = RtrRepr { xid, credit: 8, op };
        let mut v = vec![0u8; r.encoded_len()];
        r.encode(&mut v).expect("fits");
        v.extend_from_slice(payload);
        v
    }

    /// An accepted-success reply header for `xid` followed by `n` octets of 0x44.
    fn reply_bytes(xid: u32, n: usize) -> Vec<u8> {
        let mut v = Vec::new();
        for w in [xid, 1, 0, 0, 0, 0] {
            v.extend_from_slice(&w.to_be_bytes());
        }
        v.resize(24 + n, 0x44);
        v
    }

    #[test]
    fn a_long_call_goes_as_a_group_and_its_reply_group_is_reassembled() {
        let (mut core, pools, mut qp, now, credits) = setup();
        // 6000 octets: 4052 + 1948, in two Sends; a reply of up to 9000 lends two receives.
        core.submit(long_call(&pools, 6000, 9000), 1, now)
            .expect("submitted");
        qp.pump(&mut core, now);
        assert_eq!(qp.sends.len(), 2);
        let first = RtrView::parse(&qp.sends[0].bytes).expect("RDMA_OPTIONAL");
        let xid = first.xid;
        let RtrBody::XmtReq(q) = first.body else {
            panic!("{:?}", first.body)
        };
        assert_eq!((q.count, q.rsbuf, q.pslen), (2, 2, 4052));
        assert_eq!(
            &first.payload[..4],
            &xid.to_be_bytes(),
            "the XID in the RPC header"
        );
        let second = RtrView::parse(&qp.sends[1].bytes).expect("RDMA_OPTIONAL");
        assert_eq!(
            second.body,
            RtrBody::XmtCont(XmtCont {
                xnum: 1,
                itype: ROPT_XMTREQ,
                pslen: 1948
            })
        );
        // Before any reply the grant is one credit (RFC 8166 §3.3.1): the group goes
        // alone, holding it (the responder's XCHAR_REQRXLIM takes the group).
        assert_eq!(credits.in_flight(), 1, "every credit there is");
        for wc in qp.complete_sends() {
            core.handle_completion(&wc, now);
        }
        // The reply: 24 + 7000 octets in three transmissions.
        let body = reply_bytes(xid, 7000);
        let (a, rest) = body.split_at(4000);
        let (b, c) = rest.split_at(2000);
        let msgs = [
            encode(
                xid,
                RtrOp::XmtResp {
                    count: 3,
                    pslen: a.len() as u32,
                },
                a,
            ),
            encode(
                xid,
                RtrOp::XmtCont(XmtCont {
                    xnum: 1,
                    itype: ROPT_XMTRESP,
                    pslen: b.len() as u32,
                }),
                b,
            ),
            encode(
                xid,
                RtrOp::XmtCont(XmtCont {
                    xnum: 2,
                    itype: ROPT_XMTRESP,
                    pslen: c.len() as u32,
                }),
                c,
            ),
        ];
        for m in &msgs {
            assert!(core.poll_outcome().is_none(), "not before the whole group");
            let wc = qp.deliver(m);
            core.handle_completion(&wc, now);
        }
        let o = core.poll_outcome().expect("outcome");
        assert_eq!(o.status, CallStatus::Success);
        assert_eq!(o.reply.as_ref().expect("reply").bytes(), &body[..]);
        assert_eq!(credits.in_flight(), 0);
        let st = core.requester_stats();
        assert_eq!((st.cont_calls, st.cont_replies), (1, 1));
        assert_eq!((st.call_messages, st.reply_messages), (2, 3));
    }

    #[test]
    fn a_broken_reply_group_fails_its_call() {
        let (mut core, pools, mut qp, now, credits) = setup();
        core.submit(long_call(&pools, 6000, 9000), 1, now)
            .expect("submitted");
        qp.pump(&mut core, now);
        let xid = RtrView::parse(&qp.sends[0].bytes).expect("parses").xid;
        for wc in qp.complete_sends() {
            core.handle_completion(&wc, now);
        }
        let first = encode(
            xid,
            RtrOp::XmtResp {
                count: 3,
                pslen: 100,
            },
            &reply_bytes(xid, 76),
        );
        let skip = encode(
            xid,
            RtrOp::XmtCont(XmtCont {
                xnum: 2,
                itype: ROPT_XMTRESP,
                pslen: 0,
            }),
            &[],
        );
        for m in [&first, &skip] {
            let wc = qp.deliver(m);
            core.handle_completion(&wc, now);
        }
        let o = core.poll_outcome().expect("outcome");
        assert_eq!(
            o.status,
            CallStatus::Transport(TransportError::BadReply(BadReply::Continuation(
                OptxInfo::BadSeq {
                    expect: 1,
                    current: 2
                }
            )))
        );
        assert_eq!(credits.in_flight(), 0);
        assert_eq!(core.requester_stats().broken_reply_groups, 1);
        // The responder is told (§5.4): ROPT_XMTERR naming the transmission found bad
        // and the group's lead, sent outside the credit window.
        let sent = qp.sends.len();
        qp.pump(&mut core, now);
        assert_eq!(qp.sends.len(), sent + 1, "one ROPT_XMTERR");
        let err = RtrView::parse(&qp.sends.back().expect("sent").bytes).expect("parses");
        assert_eq!(
            err.body,
            RtrBody::XmtErr(XmtErr {
                bad: XmsId {
                    xid,
                    dir: MsgDir::Reply,
                    seq: 2
                },
                lead: Some(XmsId {
                    xid,
                    dir: MsgDir::Reply,
                    seq: 0
                }),
                info: OptxInfo::BadSeq {
                    expect: 1,
                    current: 2
                },
            })
        );
        assert_eq!(err.xid, xid);
        assert_eq!(core.requester_stats().transmit_errors_sent, 1);
        assert_eq!(credits.in_flight(), 0, "no credit taken for it");
        for wc in qp.complete_sends() {
            core.handle_completion(&wc, now);
        }
        // More transmissions than receives lent: refused at the first message.
        core.submit(long_call(&pools, 6000, 9000), 2, now)
            .expect("submitted");
        qp.pump(&mut core, now);
        let xid2 = RtrView::parse(&qp.sends.back().expect("sent").bytes)
            .expect("parses")
            .xid;
        assert_ne!(xid2, xid);
        let too_long = encode(
            xid2,
            RtrOp::XmtResp {
                count: 4,
                pslen: 100,
            },
            &reply_bytes(xid2, 76),
        );
        let wc = qp.deliver(&too_long);
        core.handle_completion(&wc, now);
        let o = core.poll_outcome().expect("outcome");
        assert_eq!(
            o.status,
            CallStatus::Transport(TransportError::BadReply(BadReply::Continuation(
                OptxInfo::BadSeq {
                    expect: 3,
                    current: 4
                }
            )))
        );
        // Told too, the group's first transmission being the bad one (no lead).
        qp.pump(&mut core, now);
        let err = RtrView::parse(&qp.sends.back().expect("sent").bytes).expect("parses");
        let RtrBody::XmtErr(e) = err.body else {
            panic!("{:?}", err.body)
        };
        assert_eq!(
            (e.bad, e.lead),
            (
                XmsId {
                    xid: xid2,
                    dir: MsgDir::Reply,
                    seq: 0
                },
                None
            )
        );
        assert_eq!(core.requester_stats().transmit_errors_sent, 2);
    }

    #[test]
    fn a_characteristics_update_changes_the_shape_of_later_calls() {
        let (mut core, pools, mut qp, now, _credits) = setup();
        // The peer now takes requests of at most two Sends: a 9000-octet call (three
        // Sends, a group before the update: `a_transmit_error_fails_the_call_it_names`)
        // goes as a Position-Zero Read chunk instead.
        let update = encode(
            7,
            RtrOp::CharsUpdate(TransportChars {
                rtr_support: RTRS_XREQ | RTRS_XRESP | RTRS_XCONT,
                recv_buf: None,
                req_rx_limit: 2,
                resp_sx_limit: 16,
            }),
            &[],
        );
        let wc = qp.deliver(&update);
        core.handle_completion(&wc, now);
        assert_eq!(core.requester_stats().chars_updates, 1);
        core.submit(long_call(&pools, 9000, 256), 1, now)
            .expect("submitted");
        qp.pump(&mut core, now);
        let last = &qp.sends.back().expect("sent").bytes;
        assert!(RtrView::parse(last).is_err(), "not a group");
        assert_eq!(&last[12..16], &1u32.to_be_bytes(), "RDMA_NOMSG");
        assert_eq!(core.requester_stats().cont_calls, 0);
    }

    #[test]
    fn a_transmit_error_fails_the_call_it_names() {
        let (mut core, pools, mut qp, now, credits) = setup();
        core.submit(long_call(&pools, 9000, 256), 1, now)
            .expect("submitted");
        qp.pump(&mut core, now);
        assert_eq!(qp.sends.len(), 3);
        let xid = RtrView::parse(&qp.sends[0].bytes).expect("parses").xid;
        let info = OptxInfo::BadSeq {
            expect: 1,
            current: 2,
        };
        let err = encode(
            xid,
            RtrOp::XmtErr(XmtErr {
                bad: XmsId {
                    xid,
                    dir: MsgDir::Call,
                    seq: 2,
                },
                lead: Some(XmsId {
                    xid,
                    dir: MsgDir::Call,
                    seq: 0,
                }),
                info,
            }),
            &[],
        );
        let wc = qp.deliver(&err);
        core.handle_completion(&wc, now);
        for wc in qp.complete_sends() {
            core.handle_completion(&wc, now);
        }
        let o = core.poll_outcome().expect("outcome");
        assert_eq!(
            o.status,
            CallStatus::Transport(TransportError::TransmitError(info))
        );
        assert_eq!(credits.in_flight(), 0, "all three credits back");
        assert_eq!(core.last_transmit_error().map(|e| e.info), Some(info));
    }
}
