//! End to end over shm, sim and siw: send-based DDP replies across segments and with
//! several results (draft-dnoveck-rpcrdma-rtrext §7.4, §6.2, §9.4). A requester posts
//! 256 KiB DDP segments behind its receives; a READ-like call whose Write sink holds
//! 1 MiB lends three receives (`optxrq_rsbuf`) and asks for its result by send-based
//! DDP; the responder answers with ROPT_XMTRESP + three ROPT_XMTCONTs, each placing a
//! quarter of the result into the segment of the receive it lands in (TBSNs 0..3), and
//! the outcome holds the result in the call's sink (gathered from the segments). Two
//! results (two Write sinks) come as one `xmddp_mitem` each, in order. Every bad case
//! is answered ROPT_XMTERR and fails the call; the connection carries on and every
//! segment goes back to its pool.

use crate::engine_support;

use engine_support::*;
use rpcrdma::fabric::Provider;
use rpcrdma::wire::rtr::place::{encode_xmtresp, xmtresp_header_len, Loc, MItem, TbsnLoc};
use rpcrdma::wire::rtr::{OptxInfo, RtrOp, RtrRepr, XmtCont, ROPT_XMTRESP};
use rpcrdma::{BadReply, CallRequest, CallStatus, ConnConfig, Pair, TransportError};

/// The requester's DDP segment.
const SEG: u32 = 256 * 1024;
/// The header segment (inline receive size).
const HEAD: usize = 4096;
/// A result over four segments.
const ITEM: usize = 1 << 20;

fn cfg(send_ddp: bool) -> ConnConfig {
    ConnConfig {
        inline_send: HEAD as u32,
        inline_recv: HEAD as u32,
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

/// PROC_TWO_RESULTS asking for results of `a` and `b` octets, with `sinks` Write sinks.
fn two_results<P: Provider>(
    p: &mut Pair<P, TestService>,
    a: u32,
    b: u32,
    sinks: usize,
) -> rpcrdma::Outcome {
    let mut args = a.to_be_bytes().to_vec();
    args.extend_from_slice(&b.to_be_bytes());
    let mut req = CallRequest::new(msg(p, PROC_TWO_RESULTS, &args), 512);
    for _ in 0..sinks {
        req.push_write_sink(p.requester.alloc_large().expect("sink"))
            .expect("room");
    }
    call(p, req)
}

/// Closes `p` (every outcome dropped before) and checks both sides' large pools are
/// full: posted, landed and handed-over segments all went back.
fn close_and_check_pools<P: Provider>(mut p: Pair<P, TestService>) {
    let cpools = p.requester.resources().pools().clone();
    let spools = p
        .responder()
        .expect("responder")
        .resources()
        .pools()
        .clone();
    p.requester.close();
    let closed = p.run_until(DEADLINE, |p| {
        p.requester.state() == rpcrdma::ConnState::Closed
            && p.responder()
                .is_none_or(|r| r.state() == rpcrdma::ConnState::Closed)
    });
    assert!(closed, "both sides close");
    drop(p);
    assert!(cpools.large.is_full(), "every requester segment went back");
    assert!(spools.large.is_full(), "every responder buffer went back");
}

/// A 1 MiB READ-like result goes as a group of four transmissions, one 256 KiB piece
/// in each, with no Write chunk and no RDMA Write.
fn a_1mib_result_over_four_segments<N: Net>(net: N) {
    let mut p = pair(&net, &cfg(true), &cfg(false));
    for k in 0..3 {
        let o = two_results(&mut p, ITEM as u32, 0, 1);
        assert_eq!(o.status, CallStatus::Success, "call {k}");
        assert_eq!(word(results(&o), 0), ITEM as u32);
        assert_eq!(word(results(&o), 4), 0);
        assert!(
            o.write_result(0) == Some(&pattern(ITEM, 1)[..]),
            "call {k}: the result arrived intact"
        );
    }
    let st = p.requester.stats();
    let r = p.responder().expect("responder").stats();
    assert_eq!((st.send_ddp_reply_asks, st.send_ddp_reply_items), (3, 3));
    assert_eq!(st.cont_replies, 3);
    assert_eq!(st.reply_messages, 12, "four transmissions per reply");
    assert_eq!(st.call_messages, 3, "one Send per call");
    assert_eq!(r.send_ddp_replies, 3);
    assert_eq!(r.cont_reply_messages, 12);
    assert_eq!(r.ddp_results, 0, "no Write chunk used: no RDMA Write");
    assert_eq!(p.requester.credits().in_flight(), 0);
    // A result of one segment still goes in one transmission.
    let o = two_results(&mut p, 100_000, 0, 1);
    assert!(o.write_result(0) == Some(&pattern(100_000, 1)[..]));
    assert_eq!(p.requester.stats().reply_messages, 13);
    drop(o);
    close_and_check_pools(p);
}

/// Two results in one reply (two Write sinks): one `xmddp_mitem` each, in order, each
/// in its own segments; a short one comes inline (TOOSHORT) beside a placed one, an
/// empty one is NOITEM.
fn two_results_in_one_reply<N: Net>(net: N) {
    let mut p = pair(&net, &cfg(true), &cfg(false));
    let o = two_results(&mut p, 300_000, 100_000, 2);
    assert_eq!(o.status, CallStatus::Success);
    assert!(o.write_result(0) == Some(&pattern(300_000, 1)[..]));
    assert!(o.write_result(1) == Some(&pattern(100_000, 2)[..]));
    let st = p.requester.stats();
    assert_eq!(st.send_ddp_reply_items, 2);
    assert_eq!(st.reply_messages, 3, "two segments, then one");
    drop(o);
    // A short first result inline, the second placed.
    let o = two_results(&mut p, 100, 200_000, 2);
    assert_eq!(o.status, CallStatus::Success);
    let res = results(&o);
    assert_eq!(word(res, 0), 100);
    assert_eq!(
        &res[4..104],
        &pattern(100, 1)[..],
        "the short item is inline"
    );
    assert_eq!(word(res, 104), 200_000);
    assert_eq!(o.write_result(0), Some(&[][..]));
    assert!(o.write_result(1) == Some(&pattern(200_000, 2)[..]));
    drop(o);
    // An empty second result.
    let o = two_results(&mut p, 600_000, 0, 2);
    assert!(o.write_result(0) == Some(&pattern(600_000, 1)[..]));
    assert_eq!(o.write_result(1), Some(&[][..]));
    let st = p.requester.stats();
    let r = p.responder().expect("responder").stats();
    assert_eq!((st.send_ddp_reply_items, r.send_ddp_replies), (4, 4));
    assert_eq!((st.ddp_replies_too_short, r.ddp_replies_too_short), (1, 1));
    assert_eq!((st.ddp_replies_no_item, r.ddp_replies_no_item), (1, 1));
    assert_eq!(r.ddp_results, 0);
    assert_eq!(p.requester.credits().in_flight(), 0);
    drop(o);
    close_and_check_pools(p);
}

/// Without `send_ddp_max` set by hand, replies never go by send-based DDP (DESIGN.md,
/// "Shape choice"): the 1 MiB result comes by Write chunk.
fn by_default_results_use_write_chunks<N: Net>(net: N) {
    let client = ConnConfig {
        send_ddp_max: None,
        ..cfg(true)
    };
    let mut p = pair(&net, &client, &cfg(false));
    let o = two_results(&mut p, ITEM as u32, 50_000, 2);
    assert!(o.write_result(0) == Some(&pattern(ITEM, 1)[..]));
    assert!(o.write_result(1) == Some(&pattern(50_000, 2)[..]));
    let st = p.requester.stats();
    assert_eq!((st.send_ddp_reply_asks, st.cont_replies), (0, 0));
    assert_eq!(p.responder().expect("responder").stats().ddp_results, 2);
}

fn tbsn(offset: u32, segs: &[u32]) -> Loc<'static> {
    let mut loc = TbsnLoc {
        offset,
        n: segs.len() as u8,
        bsnum: [0; 32],
    };
    loc.bsnum[..segs.len()].copy_from_slice(segs);
    Loc::Tbsn(loc)
}

/// A ROPT_XMTRESP of `count` transmissions for call `xid` whose `optxrs_ddp` holds
/// `items`, a 28-octet payload, then `landed` octets in the requester's DDP segment.
fn first(xid: u32, count: u32, items: &[MItem<'_>], landed: usize) -> Vec<u8> {
    let mut v = vec![0u8; xmtresp_header_len(items)];
    let n = encode_xmtresp(&mut v, xid, 4, count, 28, items).expect("fits");
    for w in [xid, 1, 0, 0, 0, 0, 0] {
        v.extend_from_slice(&w.to_be_bytes());
    }
    assert_eq!(v.len(), n + 28);
    if landed > 0 {
        v.resize(HEAD + landed, 0x5a);
    }
    v
}

/// A ROPT_XMTCONT `xnum` of `xid`'s reply group with `pslen` payload octets, then
/// `landed` octets in the DDP segment.
fn cont(xid: u32, xnum: u32, pslen: u32, landed: usize) -> Vec<u8> {
    let repr = RtrRepr {
        xid,
        credit: 4,
        op: RtrOp::XmtCont(XmtCont {
            xnum,
            itype: ROPT_XMTRESP,
            pslen,
        }),
    };
    let mut v = vec![0u8; 64];
    let n = repr.encode(&mut v).expect("fits");
    v.truncate(n + pslen as usize);
    v.resize(n + pslen as usize, 0);
    if landed > 0 {
        v.resize(HEAD + landed, 0x5a);
    }
    v
}

/// Every bad reply group (injected from the responder's queue pair for calls it
/// dropped, each asking for one 1 MiB result: three receives lent) fails its call with
/// the Transmit Error the requester answers; the connection carries on and every
/// segment goes back.
fn bad_reply_groups_fail_the_call<N: Net>(net: N) {
    // Room in the responder's pool for the injected messages (its cache holds half).
    let server = ConnConfig {
        large_bufs: 32,
        ..cfg(false)
    };
    let mut p = pair(&net, &cfg(true), &server);
    let s = SEG as usize;
    let item = |length, loc| MItem {
        disp: 28,
        length,
        loc,
    };
    let cases: Vec<(Vec<Vec<u8>>, OptxInfo)> = vec![
        // A segment past the group's last (two transmissions: TBSNs 0 and 1).
        (
            vec![
                first(0x6101, 2, &[item(100, tbsn(0, &[2]))], 0),
                cont(0x6101, 1, 0, 100),
            ],
            OptxInfo::BadTbsn {
                value: 2,
                min: 0,
                max: 1,
            },
        ),
        // An offset not a multiple of 4.
        (
            vec![
                first(0x6102, 2, &[item(300_000, tbsn(6, &[0, 1]))], s),
                cont(0x6102, 1, 0, 300_000 - s),
            ],
            OptxInfo::BadOff {
                value: 6,
                min: 0,
                max: SEG - 1,
            },
        ),
        // The second Send stops short of its piece.
        (
            vec![
                first(0x6103, 2, &[item(300_000, tbsn(0, &[0, 1]))], s),
                cont(0x6103, 1, 0, 100),
            ],
            OptxInfo::BadOff {
                value: 300_000,
                min: 0,
                max: SEG + 100,
            },
        ),
        // The group broken mid-item by a continuation out of order.
        (
            vec![
                first(0x6104, 3, &[item(600_000, tbsn(0, &[0, 1, 2]))], s),
                cont(0x6104, 2, 0, s),
            ],
            OptxInfo::BadSeq {
                expect: 1,
                current: 2,
            },
        ),
        // ... and by another XID's continuation.
        (
            vec![
                first(0x6105, 2, &[item(300_000, tbsn(0, &[0, 1]))], s),
                cont(0x6999, 1, 0, s),
            ],
            OptxInfo::BadXid {
                expect: 0x6105,
                current: 0x6999,
            },
        ),
        // Two results for a call that asked for one.
        (
            vec![
                first(
                    0x6106,
                    2,
                    &[item(100, tbsn(0, &[0])), item(0, Loc::NoItem)],
                    100,
                ),
                cont(0x6106, 1, 0, 0),
            ],
            OptxInfo::BadTbsn {
                value: 0,
                min: 0,
                max: 0,
            },
        ),
        // More transmissions than receives lent (three).
        (
            vec![first(0x6107, 5, &[item(100, tbsn(0, &[0]))], 100)],
            OptxInfo::BadSeq {
                expect: 4,
                current: 5,
            },
        ),
        // A continuation carrying payload: the payload stream is the first's alone.
        (
            vec![
                first(0x6108, 2, &[item(300_000, tbsn(0, &[0, 1]))], s),
                cont(0x6108, 1, 8, 0),
            ],
            OptxInfo::BadPl {
                value: 8,
                min: 0,
                max: 0,
            },
        ),
    ];
    for (k, (msgs, want)) in cases.iter().enumerate() {
        let xid = word(&msgs[0], 0);
        let mut req = CallRequest::new(msg(&p, PROC_DROP, &[]), 512).with_xid(xid);
        req.push_write_sink(p.requester.alloc_large().expect("sink"))
            .expect("room");
        p.requester.submit(req, k as u64).expect("accepted");
        let dropped = p.run_until(DEADLINE, |p| {
            p.responder().is_some_and(|r| r.stats().no_reply > k as u64)
        });
        assert!(dropped, "case {k}: the responder dropped the call");
        assert_eq!(
            p.requester.stats().send_ddp_reply_asks,
            k as u64 + 1,
            "case {k}: asked for a DDP reply"
        );
        let errs = p
            .responder()
            .expect("responder")
            .stats()
            .transmit_errors_received;
        let msgs_before = p.requester.stats().reply_messages;
        let bufs: Vec<_> = msgs
            .iter()
            .map(|m| {
                p.responder_mut()
                    .expect("responder")
                    .inject_send(m)
                    .unwrap_or_else(|e| panic!("case {k}: injected: {e}"))
            })
            .collect();
        let mut outcome = None;
        // The outcome, the ROPT_XMTERR, and every message of the group received (the
        // rest of a broken group is dropped) before the next case.
        let ok = p.run_until(DEADLINE, |p| {
            if outcome.is_none() {
                outcome = p.next_outcome();
            }
            outcome.is_some()
                && p.responder()
                    .is_some_and(|r| r.stats().transmit_errors_received > errs)
                && p.requester.stats().reply_messages >= msgs_before + msgs.len() as u64
        });
        assert!(ok, "case {k}: an outcome and a ROPT_XMTERR");
        let msgs_in = p.requester.stats().reply_messages - msgs_before;
        drop(bufs);
        let o = outcome.expect("outcome");
        assert_eq!(
            o.status,
            CallStatus::Transport(TransportError::BadReply(BadReply::Continuation(*want))),
            "case {k} ({msgs_in} messages)"
        );
    }
    // The connection carries on, segments, lent receives and credits intact.
    let o = two_results(&mut p, ITEM as u32, 0, 1);
    assert!(o.write_result(0) == Some(&pattern(ITEM, 1)[..]));
    drop(o);
    let o = two_results(&mut p, 300_000, 300_000, 2);
    assert!(o.write_result(1) == Some(&pattern(300_000, 2)[..]));
    assert_eq!(p.requester.stats().send_ddp_reply_items, 3);
    assert_eq!(p.requester.credits().in_flight(), 0);
    drop(o);
    close_and_check_pools(p);
}

/// A seeded simulation (message loss, delays, CQ stalls) of READ-like calls with one or
/// two Write sinks of four 16 KiB segments each, whose results (0 to 60 000 octets:
/// none, inline, one segment or up to four) come by send-based DDP, as groups of up to
/// eight transmissions: one outcome per call, every result intact when the call
/// succeeds, some connections broken with reply groups in flight, and every pool of
/// both sides full after close (segments posted, landed in a group in progress, or
/// handed over all go back).
#[test]
fn seeded_sim_with_lost_messages_mid_reply_group() {
    use rpcrdma::fabric::sim::{FaultConfig, SimConfig, SimNet};
    use rpcrdma::ConnState;
    use std::time::Duration;

    let conf = |send_ddp| ConnConfig {
        send_ddp_segment: Some(16 * 1024),
        large_buf_size: 64 * 1024,
        large_bufs: 96,
        ..cfg(send_ddp)
    };
    let (mut broke_mid, mut groups) = (0, 0);
    for seed in 0xb0u64..0xb8 {
        let faults = FaultConfig {
            drop_per_mille: 2,
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
        let mut p = pair(&fixture, &conf(true), &conf(false));
        let cpools = p.requester.resources().pools().clone();
        let spools = p
            .responder()
            .expect("responder")
            .resources()
            .pools()
            .clone();
        let mut rng = net.workload_rng(6);
        let mut expect = std::collections::BTreeMap::new();
        let mut outcomes = 0usize;
        let mut broke = false;
        let check = |o: &rpcrdma::Outcome, (a, b, sinks): (u32, u32, usize)| {
            let res = results(o);
            assert_eq!(word(res, 0), a);
            for (k, (n, seed)) in [(a, 1u8), (b, 2u8)].into_iter().enumerate().take(sinks) {
                let got = o.write_result(k).expect("sink");
                if got.is_empty() {
                    // Inline (TOOSHORT) or none: the reader finds it in the body.
                    continue;
                }
                assert!(got == &pattern(n as usize, seed)[..], "result {k} intact");
            }
        };
        let handle = |o: rpcrdma::Outcome,
                      expect: &std::collections::BTreeMap<u64, (u32, u32, usize)>,
                      broke: &mut bool| {
            match o.status {
                CallStatus::Success => check(&o, expect[&o.tag]),
                CallStatus::Transport(TransportError::Disconnected) => *broke = true,
                other => panic!("seed {seed}: tag {}: {other:?}", o.tag),
            }
        };
        for tag in 0..30u64 {
            if p.requester.state() != ConnState::Established {
                break;
            }
            let sinks = 1 + rng.below(2) as usize;
            let mut len = || match rng.below(4) {
                0 => rng.below(1000) as u32,
                _ => rng.below(60_000) as u32,
            };
            let (a, b) = (len(), if sinks == 2 { len() } else { 0 });
            let mut args = a.to_be_bytes().to_vec();
            args.extend_from_slice(&b.to_be_bytes());
            let mut req = CallRequest::new(msg(&p, PROC_TWO_RESULTS, &args), 512);
            for _ in 0..sinks {
                req.push_write_sink(p.requester.alloc_large().expect("sink"))
                    .expect("room");
            }
            p.requester.submit(req, tag).expect("submitted");
            expect.insert(tag, (a, b, sinks));
            for _ in 0..rng.range_inclusive(1, 6) {
                let now = p.requester.clock().now();
                p.poll(now);
            }
            while let Some(o) = p.next_outcome() {
                outcomes += 1;
                handle(o, &expect, &mut broke);
            }
        }
        let n = expect.len();
        let done = p.run_until(DEADLINE, |p| {
            while let Some(o) = p.next_outcome() {
                outcomes += 1;
                handle(o, &expect, &mut broke);
            }
            outcomes == n
        });
        assert!(done, "seed {seed}: {outcomes} of {n} outcomes");
        groups += p.requester.stats().cont_replies;
        eprintln!(
            "seed {seed}: {n} calls, state {:?}, items {}, groups {}, sim {:?}",
            p.requester.state(),
            p.requester.stats().send_ddp_reply_items,
            p.requester.stats().cont_replies,
            net.stats()
        );
        if p.requester.state() == ConnState::Established {
            assert_eq!(p.requester.credits().in_flight(), 0, "seed {seed}: credits");
            p.requester.close();
        } else if broke {
            broke_mid += 1;
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
    assert!(groups > 20, "reply groups were exercised: {groups}");
    assert!(broke_mid > 0, "some connection broke with calls in flight");
}

per_provider!(
    a_1mib_result_over_four_segments,
    two_results_in_one_reply,
    by_default_results_use_write_chunks,
    bad_reply_groups_fail_the_call,
);
