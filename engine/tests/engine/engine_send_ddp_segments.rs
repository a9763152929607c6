//! End to end over shm, sim and siw: send-based DDP items across several receive
//! segments (draft-dnoveck-rpcrdma-rtrext §6.2, §7.3, §9.4). A responder posts small DDP
//! segments (`ConnConfig::send_ddp_segment`, 64 KiB here); a 256 KiB argument then goes
//! as a continuation group of four transmissions, each placing its piece into the DDP
//! segment of the receive it lands in (TBSNs 0..3, `xmdl_bsnum` listing them), and the
//! service gets the item as the list of those segments, or gathered into one buffer
//! when it takes only contiguous items. Several arguments go in one call; every error
//! the draft names for a placement gets its ROPT_XMTERR and the connection carries on.

use crate::engine_support;

use engine_support::*;
use rpcrdma::fabric::Provider;
use rpcrdma::wire::rtr::place::{encode_xmtreq, xmtreq_header_len, Loc, MItem, TbsnLoc};
use rpcrdma::wire::rtr::{OptxInfo, RtrOp, RtrRepr, XmtCont, ROPT_XMTREQ};
use rpcrdma::{CallRequest, CallStatus, ConnConfig, Pair};

/// The DDP segment.
const SEG: u32 = 64 * 1024;
/// The header segment (inline receive size).
const HEAD: usize = 4096;

fn cfg(send_ddp: bool) -> ConnConfig {
    ConnConfig {
        inline_send: HEAD as u32,
        inline_recv: HEAD as u32,
        credits: 16,
        large_buf_size: 1 << 20,
        large_bufs: 8,
        extensions: true,
        send_ddp: Some(send_ddp),
        send_ddp_segment: Some(SEG),
        send_ddp_max: Some(u32::MAX),
        ..test_config()
    }
}

fn pair_with<N: Net>(net: &N, segmented: bool) -> Pair<N::P, TestService> {
    let service = TestService {
        segmented,
        ..TestService::default()
    };
    Pair::connect(
        &net.device(),
        net.device(),
        &net.addr(),
        &cfg(false),
        &cfg(true),
        service,
        DEADLINE,
    )
    .expect("pair connects")
}

fn sum(d: &[u8]) -> u32 {
    d.iter()
        .fold(0u32, |a, &b| a.wrapping_mul(31).wrapping_add(u32::from(b)))
}

/// PROC_SUM_ITEMS with one argument per entry of `lens`; checks every item arrived
/// whole.
fn sum_items<P: Provider>(p: &mut Pair<P, TestService>, lens: &[usize], seed: u8) {
    let mut args = Vec::new();
    for &n in lens {
        args.extend_from_slice(&(n as u32).to_be_bytes());
    }
    // PROC_SUM_ITEMS reads only the items: the words are their XDR length words.
    let mut req = CallRequest::new(msg(p, PROC_SUM_ITEMS, &args), 512);
    let datas: Vec<Vec<u8>> = lens
        .iter()
        .enumerate()
        .map(|(k, &n)| pattern(n, seed.wrapping_add(k as u8)))
        .collect();
    // Positions in the full XDR stream: the length words, each item (padded) after
    // its own.
    let mut at = CALL_HDR as u32;
    for d in &datas {
        at += 4;
        req.push_ddp_arg(at, large_with(p, d)).expect("room");
        at += (d.len() as u32).next_multiple_of(4);
    }
    let o = call(p, req);
    assert_eq!(
        o.status,
        CallStatus::Success,
        "{:?} {:?}",
        p.requester.stats(),
        p.responder().map(|r| r.stats())
    );
    let res = results(&o);
    assert_eq!(word(res, 0) as usize, lens.len());
    for (k, d) in datas.iter().enumerate() {
        assert_eq!(word(res, 4 + 8 * k) as usize, d.len(), "item {k}: length");
        assert_eq!(word(res, 8 + 8 * k), sum(d), "item {k} arrived intact");
    }
    assert_eq!(
        o.ddp_args.len(),
        lens.len(),
        "the arguments' buffers come back"
    );
}

/// A 256 KiB argument in 64 KiB segments: four transmissions, no Read chunk; the
/// service sees the item as four segments (no copy) or gathered, as it asks.
fn an_item_across_segments_goes_as_a_group<N: Net>(net: N) {
    for segmented in [true, false] {
        let mut p = pair_with(&net, segmented);
        let rbs = p
            .requester
            .core()
            .peer_chars()
            .recv_buf
            .expect("advertised");
        assert_eq!(rbs.length, HEAD as u32 + SEG, "the segment size advertised");
        for seed in 0..3 {
            sum_items(&mut p, &[256 * 1024], seed);
        }
        // 1 MiB: sixteen transmissions, the most a group has.
        sum_items(&mut p, &[1 << 20], 9);
        let st = p.requester.stats();
        let r = p.responder().expect("responder").stats();
        assert_eq!(st.send_ddp_items, 4);
        assert_eq!(st.call_messages, 3 * 4 + 16, "one Send per segment");
        assert_eq!(st.cont_calls, 4);
        assert_eq!((st.long_calls, r.long_calls, r.ddp_args), (0, 0, 0));
        assert_eq!(r.send_ddp_items, 4);
        assert_eq!(r.broken_call_groups, 0);
        let seen = &p.responder().expect("responder").service().seen;
        assert_eq!(seen.segmented_items, if segmented { 4 } else { 0 });
        assert_eq!(
            seen.items[0],
            (CALL_HDR as u32 + 4, CALL_HDR + 4, 256 * 1024)
        );
        assert_eq!(p.requester.credits().in_flight(), 0);
        // An item of one segment's length still goes in one Send.
        sum_items(&mut p, &[SEG as usize], 3);
        assert_eq!(p.requester.stats().call_messages, 3 * 4 + 16 + 1);
    }
}

/// Two and three bulk arguments in one call (a WRITE-like call with several items):
/// each starts at a fresh segment, the group is as long as they need.
fn several_items_in_one_call<N: Net>(net: N) {
    let mut p = pair_with(&net, true);
    sum_items(&mut p, &[100 * 1024, 30 * 1024], 1);
    sum_items(&mut p, &[SEG as usize, 5000, 200 * 1024], 2);
    let st = p.requester.stats();
    // 100 KiB: 2 segments, 30 KiB: 1 (three transmissions); 64 KiB + 5000 + 200 KiB:
    // 1 + 1 + 4 (six).
    assert_eq!(st.call_messages, 3 + 6);
    assert_eq!(st.send_ddp_items, 5);
    assert_eq!(st.long_calls, 0);
    let r = p.responder().expect("responder").stats();
    assert_eq!(r.send_ddp_items, 5);
    let seen = &p.responder().expect("responder").service().seen;
    let lens: Vec<usize> = seen.items.iter().map(|i| i.2).collect();
    assert_eq!(lens, vec![100 * 1024, 30 * 1024, 65536, 5000, 200 * 1024]);
    // Only the items over a segment are segment lists.
    assert_eq!(seen.segmented_items, 2);
}

/// Over the peer's request transmission receive limit (here 4: its credits), the
/// item goes by Read chunk (§4.3, §8.4).
fn over_the_group_limit_it_goes_by_read_chunk<N: Net>(net: N) {
    let small = ConnConfig {
        credits: 4,
        ..cfg(true)
    };
    let mut p = Pair::<N::P, _>::connect(
        &net.device(),
        net.device(),
        &net.addr(),
        &cfg(false),
        &small,
        TestService::default(),
        DEADLINE,
    )
    .expect("pair connects");
    assert_eq!(p.requester.core().peer_chars().req_rx_limit, 4);
    sum_items(&mut p, &[256 * 1024], 1);
    sum_items(&mut p, &[256 * 1024 + 4], 2);
    let st = p.requester.stats();
    assert_eq!(st.send_ddp_items, 1, "four segments fit, five do not");
    assert_eq!(st.call_messages, 4 + 1);
}

/// With `send_ddp_max` left to the device (DESIGN.md, "Items across segments"), only
/// what one transmission carries goes by send-based DDP where a Read costs a round
/// trip (sim, siw); an argument needing a group goes by Read chunk; on shm neither.
fn by_default_only_one_transmission<N: Net>(net: N) {
    let client = ConnConfig {
        send_ddp_max: None,
        ..cfg(false)
    };
    let mut p = Pair::<N::P, _>::connect(
        &net.device(),
        net.device(),
        &net.addr(),
        &client,
        &cfg(true),
        TestService::default(),
        DEADLINE,
    )
    .expect("pair connects");
    sum_items(&mut p, &[SEG as usize], 1);
    sum_items(&mut p, &[256 * 1024], 2);
    let st = p.requester.stats();
    let round_trip = p.requester.core().send_ddp_max().0 > 0;
    assert_eq!(st.send_ddp_items, u64::from(round_trip), "one segment only");
    assert_eq!(st.cont_calls, 0, "no group");
    assert_eq!(st.call_messages, 2);
}

/// The first transmission of a group of `count` placing one item of `len` octets at
/// `offset` in segments `segs`: a 48-octet payload, the filler up to the DDP segment,
/// and `landed` octets in it.
fn first(xid: u32, count: u32, len: u32, offset: u32, segs: &[u32], landed: usize) -> Vec<u8> {
    let mut loc = TbsnLoc {
        offset,
        n: segs.len() as u8,
        bsnum: [0; 32],
    };
    loc.bsnum[..segs.len()].copy_from_slice(segs);
    let items = [MItem {
        disp: 44,
        length: len,
        loc: Loc::Tbsn(loc),
    }];
    let mut v = vec![0u8; xmtreq_header_len(&items)];
    let n = encode_xmtreq(&mut v, xid, 4, count, 0, 48, &items).expect("fits");
    v.resize(n + 48, 0);
    v[n..n + 4].copy_from_slice(&xid.to_be_bytes());
    if landed > 0 {
        v.resize(HEAD + landed, 0x5a);
    }
    v
}

/// Continuation `xnum` of group `xid`, with `landed` octets in its DDP segment.
fn cont(xid: u32, xnum: u32, landed: usize) -> Vec<u8> {
    let r = RtrRepr {
        xid,
        credit: 4,
        op: RtrOp::XmtCont(XmtCont {
            xnum,
            itype: ROPT_XMTREQ,
            pslen: 0,
        }),
    };
    let mut v = vec![0u8; r.encoded_len()];
    r.encode(&mut v).expect("fits");
    if landed > 0 {
        v.resize(HEAD + landed, 0x6b);
    }
    v
}

/// Every error the draft states for a placement across segments, each answered with
/// its ROPT_XMTERR; the connection carries on and every segment goes back.
fn bad_group_placements_get_their_errors<N: Net>(net: N) {
    let mut p = pair_with(&net, true);
    sum_items(&mut p, &[100 * 1024], 1);
    let s = SEG as usize;
    let cases: Vec<(Vec<Vec<u8>>, OptxInfo)> = vec![
        // A segment listed twice.
        (
            vec![first(0x81, 2, 2 * SEG, 0, &[0, 0], s), cont(0x81, 1, s)],
            OptxInfo::BadTbsn {
                value: 0,
                min: 1,
                max: 1,
            },
        ),
        // A segment past the group's last (two transmissions: TBSNs 0 and 1).
        (
            vec![first(0x82, 2, 2 * SEG, 0, &[0, 2], s), cont(0x82, 1, s)],
            OptxInfo::BadTbsn {
                value: 2,
                min: 1,
                max: 1,
            },
        ),
        // An offset not a multiple of 4.
        (
            vec![first(0x83, 2, SEG, 6, &[0, 1], s), cont(0x83, 1, s)],
            OptxInfo::BadOff {
                value: 6,
                min: 0,
                max: SEG - 1,
            },
        ),
        // The segments listed cannot hold the item.
        (
            vec![first(0x84, 2, 2 * SEG + 4, 0, &[0, 1], s), cont(0x84, 1, s)],
            OptxInfo::BadOff {
                value: 2 * SEG + 4,
                min: 0,
                max: 2 * SEG,
            },
        ),
        // The second Send stops short of its piece.
        (
            vec![
                first(0x85, 2, SEG + 1000, 0, &[0, 1], s),
                cont(0x85, 1, 200),
            ],
            OptxInfo::BadOff {
                value: SEG + 1000,
                min: 0,
                max: SEG + 200,
            },
        ),
        // The group broken mid-item by another group's first transmission.
        (
            vec![
                first(0x86, 3, 2 * SEG, 0, &[0, 1], s),
                first(0x87, 1, 100, 0, &[0], 100),
            ],
            OptxInfo::BadOmt {
                expect: rpcrdma::wire::rtr::ROPT_XMTCONT,
                current: ROPT_XMTREQ,
            },
        ),
        // A continuation out of order mid-item.
        (
            vec![first(0x88, 3, 2 * SEG, 0, &[0, 1], s), cont(0x88, 2, s)],
            OptxInfo::BadSeq {
                expect: 1,
                current: 2,
            },
        ),
    ];
    for (k, (msgs, want)) in cases.iter().enumerate() {
        let before = p.requester.stats().transmit_errors_received;
        inject(&mut p, msgs);
        let ok = p.run_until(DEADLINE, |p| {
            p.requester.stats().transmit_errors_received > before
        });
        assert!(ok, "case {k}: ROPT_XMTERR came back");
        let e = p.requester.core().last_transmit_error().expect("recorded");
        assert_eq!(e.info, *want, "case {k}");
    }
    let r = p.responder().expect("responder").stats();
    assert_eq!(r.broken_call_groups, cases.len() as u64);
    // Nothing of a broken group was handed on; the one-transmission call that broke
    // the sixth group is whole, and taken.
    assert_eq!(r.send_ddp_items, 2);
    // The connection carries on.
    sum_items(&mut p, &[256 * 1024], 2);
    assert_eq!(p.responder().expect("responder").stats().send_ddp_items, 3);
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
    assert!(spools.large.is_full(), "every segment went back");
}

per_provider!(
    an_item_across_segments_goes_as_a_group,
    several_items_in_one_call,
    over_the_group_limit_it_goes_by_read_chunk,
    by_default_only_one_transmission,
    bad_group_placements_get_their_errors,
);

/// A seeded simulation (message loss, delays, CQ stalls) of calls whose arguments span
/// up to thirteen 16 KiB segments, one or two per call: one outcome per call, every
/// item intact when the call succeeds, some connections broken with groups
/// mid-item, and every pool of both sides full after close (segments posted, landed
/// in a group in progress, or held by the service all go back).
#[test]
fn seeded_sim_with_lost_messages_and_disconnects_mid_item() {
    use rpcrdma::fabric::sim::{FaultConfig, SimConfig, SimNet};
    use rpcrdma::{ConnState, TransportError};
    use std::time::Duration;

    let conf = |send_ddp| ConnConfig {
        send_ddp_segment: Some(16 * 1024),
        large_buf_size: 256 * 1024,
        large_bufs: 80,
        ..cfg(send_ddp)
    };
    let mut broke_mid = 0;
    let mut groups = 0;
    for seed in 0xa0u64..0xa8 {
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
        let mut p = Pair::<rpcrdma::fabric::sim::Sim, TestService>::connect(
            &fixture.device(),
            fixture.device(),
            &fixture.addr(),
            &conf(false),
            &conf(true),
            TestService {
                segmented: seed % 2 == 0,
                ..TestService::default()
            },
            DEADLINE,
        )
        .expect("pair connects");
        let cpools = p.requester.resources().pools().clone();
        let spools = p
            .responder()
            .expect("responder")
            .resources()
            .pools()
            .clone();
        let mut rng = net.workload_rng(5);
        let mut expect = std::collections::BTreeMap::new();
        let mut outcomes = 0usize;
        let mut broke = false;
        let check = |o: &rpcrdma::Outcome, want: &Vec<Vec<u8>>| {
            let res = results(o);
            assert_eq!(word(res, 0) as usize, want.len());
            for (k, d) in want.iter().enumerate() {
                assert_eq!(word(res, 4 + 8 * k) as usize, d.len());
                assert_eq!(word(res, 8 + 8 * k), sum(d), "the item arrived intact");
            }
        };
        for tag in 0..30u64 {
            if p.requester.state() != ConnState::Established {
                break;
            }
            let n_items = 1 + rng.below(2) as usize;
            let datas: Vec<Vec<u8>> = (0..n_items)
                .map(|k| pattern(4 + 4 * rng.below(50_000) as usize, (tag as u8) ^ k as u8))
                .collect();
            let mut args = Vec::new();
            for d in &datas {
                args.extend_from_slice(&(d.len() as u32).to_be_bytes());
            }
            let mut req = CallRequest::new(msg(&p, PROC_SUM_ITEMS, &args), 512);
            let mut at = CALL_HDR as u32;
            for d in &datas {
                at += 4;
                req.push_ddp_arg(at, large_with(&p, d)).expect("room");
                at += d.len() as u32;
            }
            p.requester.submit(req, tag).expect("submitted");
            expect.insert(tag, datas);
            for _ in 0..rng.range_inclusive(1, 6) {
                let now = p.requester.clock().now();
                p.poll(now);
            }
            while let Some(o) = p.next_outcome() {
                outcomes += 1;
                match o.status {
                    CallStatus::Success => check(&o, &expect[&o.tag]),
                    CallStatus::Transport(TransportError::Disconnected) => broke = true,
                    other => panic!("seed {seed}: tag {}: {other:?}", o.tag),
                }
            }
        }
        let n = expect.len();
        let expect = &expect;
        let broke_ref = &mut broke;
        let done = p.run_until(DEADLINE, |p| {
            while let Some(o) = p.next_outcome() {
                outcomes += 1;
                match o.status {
                    CallStatus::Success => check(&o, &expect[&o.tag]),
                    CallStatus::Transport(TransportError::Disconnected) => *broke_ref = true,
                    other => panic!("seed {seed}: tag {}: {other:?}", o.tag),
                }
            }
            outcomes == n
        });
        assert!(done, "seed {seed}: {outcomes} of {n} outcomes");
        groups += p.requester.stats().cont_calls;
        eprintln!(
            "seed {seed}: {n} calls, state {:?}, placed {}, groups {}, sim {:?}",
            p.requester.state(),
            p.requester.stats().send_ddp_items,
            p.requester.stats().cont_calls,
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
    // Calls find the credits of a long group only when few are in flight; the others
    // go by Read chunk (§4.3), which is the shape choice, not a failure.
    assert!(groups > 20, "multi-segment groups were exercised: {groups}");
    assert!(broke_mid > 0, "some connection broke with groups in flight");
}
