//! End to end over shm, sim and siw: send-based DDP (draft-dnoveck-rpcrdma-rtrext §7).
//! A responder with `ConnConfig::send_ddp` posts scatter receives (a 4 KiB header
//! segment, then a 1 MiB DDP-targetable segment) and advertises that structure in its
//! accept; a WRITE-like call with a 1 MiB DDP argument then goes as one ROPT_XMTREQ
//! that places the argument into the segment (no Read chunk, no RDMA Read), and the
//! service gets the segment as its `DdpItem`. Without the advertisement, or with
//! extensions off on either side, the argument goes by Read chunk as before. A bad
//! placement is answered with OPTXERR_BADTBSN / OPTXERR_BADOFF.

use crate::engine_support;

use engine_support::*;
use rpcrdma::fabric::{Provider, QueuePair, SendWr};
use rpcrdma::wire::rtr::place::{
    encode_xmtreq, encode_xmtresp, xmtreq_header_len, xmtresp_header_len, Loc, MItem, TbsnLoc,
};
use rpcrdma::wire::rtr::OptxInfo;
use rpcrdma::{BadReply, CallRequest, CallStatus, ConnConfig, Pair, TransportError};

/// The bulk item: 1 MiB.
const ITEM: usize = 1 << 20;
/// The DDP segment: the large buffer size.
const SEG: u32 = (1 << 20) + 4096;

fn cfg(extensions: bool, send_ddp: bool) -> ConnConfig {
    ConnConfig {
        inline_send: 4096,
        inline_recv: 4096,
        credits: 4,
        large_buf_size: SEG,
        large_bufs: 4,
        extensions,
        send_ddp: Some(send_ddp),
        // Every provider, shm included (where the device default is never: see
        // `the_shape_follows_the_device`).
        send_ddp_max: Some(u32::MAX),
        ..test_config()
    }
}

/// A WRITE-like call: PROC_SUM_ITEMS with one `ITEM`-octet DDP argument; checks the
/// service saw it whole (length and checksum) and its buffer comes back.
fn write_like<P: Provider>(p: &mut Pair<P, TestService>, seed: u8) {
    let data = pattern(ITEM, seed);
    let mut req = CallRequest::new(msg(p, PROC_SUM_ITEMS, &(ITEM as u32).to_be_bytes()), 512);
    req.push_ddp_arg(CALL_HDR as u32 + 4, large_with(p, &data))
        .expect("room");
    let o = call(p, req);
    assert_eq!(
        o.status,
        CallStatus::Success,
        "{:?} {:?}",
        p.requester.stats(),
        p.responder().map(|r| r.stats())
    );
    let res = results(&o);
    assert_eq!(word(res, 0), 1);
    assert_eq!(word(res, 4) as usize, ITEM);
    let sum = data
        .iter()
        .fold(0u32, |a, &b| a.wrapping_mul(31).wrapping_add(u32::from(b)));
    assert_eq!(word(res, 8), sum, "the item arrived intact");
    assert_eq!(o.ddp_args.len(), 1, "the argument's buffer comes back");
}

fn a_1mib_write_like_call_goes_by_send_ddp<N: Net>(net: N) {
    let mut p = pair(&net, &cfg(true, false), &cfg(true, true));
    let chars = p.requester.core().peer_chars();
    let rbs = chars.recv_buf.expect("the accept carried XCHAR_RBSTRUCT");
    assert_eq!(rbs.ddp_segments(), 1);
    assert_eq!(rbs.length, 4096 + SEG);
    for seed in 0..4 {
        write_like(&mut p, seed);
    }
    let st = p.requester.stats();
    let r = p.responder().expect("responder").stats();
    assert_eq!(st.send_ddp_items, 4);
    assert_eq!(st.call_messages, 4, "one Send per call");
    assert_eq!(r.send_ddp_items, 4);
    // No Read chunk offered, none pulled: no RDMA Read at all.
    assert_eq!((st.long_calls, r.long_calls, r.ddp_args), (0, 0, 0));
    assert_eq!(r.broken_call_groups, 0);
    let seen = &p.responder().expect("responder").service().seen;
    assert_eq!(
        seen.items,
        vec![(CALL_HDR as u32 + 4, CALL_HDR + 4, ITEM); 4],
        "position, offset in the message, length"
    );
    assert_eq!(p.requester.credits().in_flight(), 0);
}

/// On by default (DESIGN.md, "Send-based DDP by default"): with `send_ddp` and
/// `send_ddp_max` left to the device on both sides, a server posts DDP segments where
/// an RDMA Read costs a round trip and an idle connection's pages go back (siw, sim),
/// and a requester places a 1 MiB argument there in its one Send; elsewhere (shm,
/// verbs), and with extensions off on either side (`--no-extensions`), it goes by Read
/// chunk and nothing is advertised; to a requester without extensions nothing is
/// posted either.
fn send_ddp_by_default<N: Net>(net: N) {
    use rpcrdma::fabric::Device;
    let by_default = |extensions| ConnConfig {
        send_ddp: None,
        send_ddp_max: None,
        ..cfg(extensions, false)
    };
    let caps = net.device().caps();
    // Where a Read costs a round trip and idle pages go back: siw, sim (not shm, verbs).
    let posts = ConnConfig::send_ddp_by_device(caps.rdma_round_trip, caps.release_registered);
    for (client_ext, server_ext) in [(true, true), (false, true), (true, false)] {
        let mut p = pair(&net, &by_default(client_ext), &by_default(server_ext));
        let advertised = posts && client_ext && server_ext;
        // Posted only for a requester that offered continuation: a version-1-only one
        // gets plain receives, as before.
        let local = p.responder().expect("responder").core().local_chars();
        assert_eq!(local.recv_buf.is_some(), advertised, "segments posted");
        let rbs = p.requester.core().peer_chars().recv_buf;
        assert_eq!(rbs.is_some(), advertised, "{client_ext} {server_ext}");
        if let Some(rbs) = rbs {
            assert_eq!((rbs.ddp_segments(), rbs.length), (1, 4096 + SEG));
        }
        write_like(&mut p, 7);
        let st = p.requester.stats();
        let r = p.responder().expect("responder").stats();
        let n = u64::from(advertised);
        assert_eq!((st.send_ddp_items, r.send_ddp_items), (n, n));
        assert_eq!(r.ddp_args, 1 - n, "else pulled as a Read chunk");
        // Results never by default: the requester posted no segments.
        assert_eq!(st.send_ddp_reply_asks, 0);
    }
}

/// Characteristics updates later in a connection's life (ROPT_XCHUPD; DESIGN.md,
/// "Characteristics updates"): either end sends its characteristics as they are now,
/// after calls went, and the peer's view is replaced by them (the responder's keeps
/// its receive structure, so arguments still go by send-based DDP; the requester's,
/// posting no segments, clears the structure the responder knew of it). With
/// extensions off on either side nothing is sent: a version-1-only peer never sees
/// RDMA_OPTIONAL.
fn characteristics_update_later<N: Net>(net: N) {
    use rpcrdma::CharsUpdateError;
    let mut p = pair(&net, &cfg(true, false), &cfg(true, true));
    write_like(&mut p, 1);
    let server = p.responder_mut().expect("responder");
    let server_chars = server.core().local_chars();
    assert!(server_chars.recv_buf.is_some());
    server.send_chars_update().expect("staged");
    write_like(&mut p, 2);
    let st = p.requester.stats();
    let r = p.responder().expect("responder").stats();
    assert_eq!((r.chars_updates_sent, st.chars_updates), (1, 1));
    assert_eq!(p.requester.core().peer_chars(), server_chars);
    assert_eq!(st.send_ddp_items, 2, "the structure is still known");

    p.requester.send_chars_update().expect("staged");
    let o = read_like(&mut p, 1024);
    assert_eq!(o.status, CallStatus::Success);
    let st = p.requester.stats();
    let server = p.responder().expect("responder");
    assert_eq!(
        (st.chars_updates_sent, server.stats().chars_updates),
        (1, 1)
    );
    assert_eq!(server.core().peer_chars(), p.requester.core().local_chars());
    assert_eq!(server.core().peer_chars().recv_buf, None);
    assert_eq!(p.requester.credits().in_flight(), 0);

    for (client, server) in [
        (cfg(false, false), cfg(true, true)),
        (cfg(true, false), cfg(false, true)),
    ] {
        let mut p = pair(&net, &client, &server);
        write_like(&mut p, 3);
        let refused = Err(CharsUpdateError::NotNegotiated);
        assert_eq!(p.requester.send_chars_update(), refused);
        let s = p.responder_mut().expect("responder");
        assert_eq!(s.send_chars_update(), refused);
        write_like(&mut p, 4);
        let st = p.requester.stats();
        let r = p.responder().expect("responder").stats();
        assert_eq!((st.chars_updates_sent, r.chars_updates_sent), (0, 0));
        assert_eq!((st.chars_updates, r.chars_updates), (0, 0));
        assert_eq!(r.optional_messages, 0);
    }
}

/// Without a structure advertised, or with extensions off on either side, the
/// argument goes by Read chunk, pulled by an RDMA Read.
fn without_the_structure_it_goes_by_read_chunk<N: Net>(net: N) {
    for (client, server) in [
        (cfg(true, false), cfg(true, false)),
        (cfg(false, false), cfg(true, true)),
        (cfg(true, false), cfg(false, true)),
    ] {
        let mut p = pair(&net, &client, &server);
        write_like(&mut p, 5);
        let st = p.requester.stats();
        let r = p.responder().expect("responder").stats();
        assert_eq!((st.send_ddp_items, r.send_ddp_items), (0, 0));
        assert_eq!(r.ddp_args, 1, "pulled as a Read chunk");
        assert_eq!(r.optional_messages, 0);
    }
}

/// A one-transmission ROPT_XMTREQ placing one item of `len` octets at `offset` in
/// segments `segs`, with a 48-octet payload, the filler up to the DDP segment, and
/// `landed` octets in the segment.
fn placed(xid: u32, len: u32, offset: u32, segs: &[u32], landed: usize) -> Vec<u8> {
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
    let n = encode_xmtreq(&mut v, xid, 4, 1, 0, 48, &items).expect("fits");
    assert_eq!(n, v.len());
    v.resize(n + 48, 0);
    v[n..n + 4].copy_from_slice(&xid.to_be_bytes());
    if landed > 0 {
        v.resize(4096 + landed, 0x5a);
    }
    v
}

/// Each bad placement gets its ROPT_XMTERR, and the connection carries on.
fn bad_placements_get_badtbsn_or_badoff<N: Net>(net: N) {
    let mut p = pair(&net, &cfg(true, false), &cfg(true, true));
    // Open the window (and prove the path) first.
    write_like(&mut p, 1);
    let cases = [
        // A segment past the group's last (one transmission, one segment: TBSN 0).
        (
            placed(0x71, 100, 0, &[1], 100),
            OptxInfo::BadTbsn {
                value: 1,
                min: 0,
                max: 0,
            },
        ),
        // An offset not a multiple of 4.
        (
            placed(0x72, 100, 2, &[0], 104),
            OptxInfo::BadOff {
                value: 2,
                min: 0,
                max: SEG - 1,
            },
        ),
        // Longer than the segment.
        (
            placed(0x73, SEG + 4, 0, &[0], 100),
            OptxInfo::BadOff {
                value: SEG + 4,
                min: 0,
                max: SEG,
            },
        ),
        // The Send stops short of the item's end.
        (
            placed(0x74, 1000, 0, &[0], 200),
            OptxInfo::BadOff {
                value: 1000,
                min: 0,
                max: 200,
            },
        ),
        // Nothing reached the segment.
        (
            placed(0x75, 100, 0, &[0], 0),
            OptxInfo::BadOff {
                value: 100,
                min: 0,
                max: 0,
            },
        ),
        // An empty segment list.
        (
            placed(0x76, 100, 0, &[], 100),
            OptxInfo::BadTbsn {
                value: 0,
                min: 0,
                max: 0,
            },
        ),
    ];
    for (k, (m, want)) in cases.iter().enumerate() {
        let before = p.requester.stats().transmit_errors_received;
        inject(&mut p, std::slice::from_ref(m));
        let ok = p.run_until(DEADLINE, |p| {
            p.requester.stats().transmit_errors_received > before
        });
        assert!(ok, "case {k}: ROPT_XMTERR came back");
        let e = p.requester.core().last_transmit_error().expect("recorded");
        assert_eq!(e.info, *want, "case {k}");
    }
    let r = p.responder().expect("responder").stats();
    assert_eq!(r.broken_call_groups, cases.len() as u64);
    assert_eq!(r.send_ddp_items, 1);
    // A version 1 call longer than the receive size runs into the DDP segment: dropped
    // (without send-based DDP the receive would have failed and ended the connection).
    let dropped = r.dropped;
    let mut long = Vec::new();
    for w in [0x77u32, 1, 4, 0, 0, 0, 0, 0x77, 0, 2] {
        long.extend_from_slice(&w.to_be_bytes());
    }
    long.resize(6000, 0);
    let mut buf = p.requester.alloc_large().expect("buffer");
    buf.fill(&long).expect("fits");
    let sge = buf.sge(0, long.len()).expect("registered");
    p.requester
        .qp_mut()
        .post_send(&[SendWr::send(0, &[sge])])
        .expect("posted");
    let ok = p.run_until(DEADLINE, |p| {
        p.responder().is_some_and(|r| r.stats().dropped > dropped)
    });
    assert!(ok, "the long version 1 message was dropped");
    drop(buf);
    // The connection carries on, and the segments were all given back.
    write_like(&mut p, 2);
    assert_eq!(p.responder().expect("responder").stats().send_ddp_items, 2);
}

/// Hundreds of calls whose item fills the segment exactly, with few credits and a
/// small large pool: the segments go round (posted, landed, held by the service,
/// recycled) without the receive queue ever running dry.
fn segments_go_round<N: Net>(net: N) {
    let small = |send_ddp| ConnConfig {
        inline_send: 4096,
        inline_recv: 4096,
        credits: 2,
        large_buf_size: 64 * 1024,
        large_bufs: 16,
        send_ddp: Some(send_ddp),
        send_ddp_max: Some(u32::MAX),
        ..test_config()
    };
    let mut p = pair(&net, &small(false), &small(true));
    let data = pattern(64 * 1024, 3);
    for k in 0..300 {
        let mut req = CallRequest::new(
            msg(&p, PROC_SUM_ITEMS, &(data.len() as u32).to_be_bytes()),
            512,
        );
        req.push_ddp_arg(CALL_HDR as u32 + 4, large_with(&p, &data))
            .expect("room");
        let o = call(&mut p, req);
        assert_eq!(
            o.status,
            CallStatus::Success,
            "call {k}: {:?}",
            p.responder().map(|r| r.stats())
        );
    }
    assert_eq!(p.requester.stats().send_ddp_items, 300);
    assert_eq!(
        p.responder().expect("responder").stats().recv_starved,
        0,
        "the receive table never found the large pool empty"
    );
}

/// A READ-like call: PROC_TWO_RESULTS asking for one `a`-octet result (and an empty
/// second), with one Write sink for it.
fn read_like<P: Provider>(p: &mut Pair<P, TestService>, a: u32) -> rpcrdma::Outcome {
    let mut args = a.to_be_bytes().to_vec();
    args.extend_from_slice(&0u32.to_be_bytes());
    let mut req = CallRequest::new(msg(p, PROC_TWO_RESULTS, &args), 512);
    req.push_write_sink(p.requester.alloc_large().expect("sink"))
        .expect("room");
    call(p, req)
}

/// Replies by send-based DDP (§7.4): a requester with `send_ddp` posts scatter
/// receives and advertises them in its connect request; a READ-like call with one
/// Write sink then asks (`optxrq_rsd`) for the reply's bulk item, which the responder
/// places into the requester's segment with its one Send (no Write chunk, no RDMA
/// Write); the outcome hands the segment back as the sink.
fn a_1mib_read_like_reply_comes_by_send_ddp<N: Net>(net: N) {
    let mut p = pair(&net, &cfg(true, true), &cfg(true, false));
    let rbs = p
        .responder()
        .expect("responder")
        .core()
        .peer_chars()
        .recv_buf
        .expect("the connect request carried XCHAR_RBSTRUCT");
    assert_eq!((rbs.ddp_segments(), rbs.length), (1, 4096 + SEG));
    for k in 0..4 {
        let o = read_like(&mut p, ITEM as u32);
        assert_eq!(o.status, CallStatus::Success, "call {k}");
        assert_eq!(word(results(&o), 0), ITEM as u32);
        assert_eq!(word(results(&o), 4), 0);
        assert!(
            o.write_result(0) == Some(&pattern(ITEM, 1)[..]),
            "call {k}: the item arrived intact"
        );
    }
    let st = p.requester.stats();
    let r = p.responder().expect("responder").stats();
    assert_eq!((st.send_ddp_reply_asks, st.send_ddp_reply_items), (4, 4));
    assert_eq!(r.send_ddp_replies, 4);
    assert_eq!(r.ddp_results, 0, "no Write chunk used: no RDMA Write");
    assert_eq!(st.reply_chunks, 0);
    assert_eq!(st.call_messages, 4, "one Send per call");
    assert_eq!(p.requester.credits().in_flight(), 0);
}

/// §7.4's other results: an item shorter than the direction's `minlen` comes in the
/// payload stream (XMDTYPE_TOOSHORT, the sink comes back empty), a reply without an
/// item answers XMDTYPE_NOITEM, and so does an error reply.
fn short_and_missing_reply_items<N: Net>(net: N) {
    let mut p = pair(&net, &cfg(true, true), &cfg(true, false));
    let o = read_like(&mut p, 100);
    assert_eq!(o.status, CallStatus::Success);
    let res = results(&o);
    assert_eq!(word(res, 0), 100);
    assert_eq!(&res[4..104], &pattern(100, 1)[..], "the item is inline");
    assert_eq!(word(res, 104), 0);
    assert_eq!(o.write_result(0), Some(&[][..]), "the sink is empty");
    let o = read_like(&mut p, 0);
    assert_eq!(o.status, CallStatus::Success);
    assert_eq!((word(results(&o), 0), word(results(&o), 4)), (0, 0));
    let mut req = CallRequest::new(msg(&p, PROC_GARBAGE, &[]), 512);
    req.push_write_sink(p.requester.alloc_large().expect("sink"))
        .expect("room");
    let o = call(&mut p, req);
    assert!(o.reply.is_some(), "an error reply: {:?}", o.status);
    let st = p.requester.stats();
    let r = p.responder().expect("responder").stats();
    assert_eq!((st.ddp_replies_too_short, r.ddp_replies_too_short), (1, 1));
    assert_eq!((st.ddp_replies_no_item, r.ddp_replies_no_item), (2, 2));
    assert_eq!((st.send_ddp_reply_items, r.send_ddp_replies), (0, 0));
    // And a large one still goes by send-based DDP.
    let o = read_like(&mut p, 200_000);
    assert!(o.write_result(0) == Some(&pattern(200_000, 1)[..]));
    assert_eq!(p.requester.stats().send_ddp_reply_items, 1);
}

/// Without the requester's structure (no `send_ddp` there, or extensions off on either
/// side) the reply's item goes by Write chunk, as before.
fn without_the_structure_replies_use_write_chunks<N: Net>(net: N) {
    for (client, server) in [
        (cfg(true, false), cfg(true, false)),
        (cfg(false, true), cfg(true, false)),
        (cfg(true, true), cfg(false, false)),
    ] {
        let mut p = pair(&net, &client, &server);
        let o = read_like(&mut p, 300_000);
        assert!(o.write_result(0) == Some(&pattern(300_000, 1)[..]));
        let st = p.requester.stats();
        let r = p.responder().expect("responder").stats();
        assert_eq!((st.send_ddp_reply_asks, r.send_ddp_replies), (0, 0));
        assert_eq!(r.ddp_results, 1, "written by RDMA Write");
    }
}

/// An ROPT_XMTRESP for call `xid` whose `optxrs_ddp` holds `items`, with a short
/// payload, then `landed` octets in the requester's DDP segment.
fn resp(xid: u32, items: &[MItem<'_>], landed: usize) -> Vec<u8> {
    let mut v = vec![0u8; xmtresp_header_len(items)];
    let n = encode_xmtresp(&mut v, xid, 4, 1, 28, items).expect("fits");
    for w in [xid, 1, 0, 0, 0, 0, 0] {
        v.extend_from_slice(&w.to_be_bytes());
    }
    assert_eq!(v.len(), n + 28);
    if landed > 0 {
        v.resize(4096 + landed, 0x5a);
    }
    v
}

fn tbsn(segs: &[u32]) -> Loc<'static> {
    let mut loc = TbsnLoc {
        offset: 0,
        n: segs.len() as u8,
        bsnum: [0; 32],
    };
    loc.bsnum[..segs.len()].copy_from_slice(segs);
    Loc::Tbsn(loc)
}

/// Bad results in a send-based DDP reply (from a broken responder: injected from its
/// queue pair for a call it dropped) fail the call with the Transmit Error the
/// requester answers, and the connection carries on.
fn bad_reply_results_fail_the_call<N: Net>(net: N) {
    let mut p = pair(&net, &cfg(true, true), &cfg(true, false));
    let o = read_like(&mut p, 8192);
    assert!(o.write_result(0) == Some(&pattern(8192, 1)[..]));
    let item = |length, loc| MItem {
        disp: 28,
        length,
        loc,
    };
    let exrw_seg = [0u8; 16];
    let cases: Vec<(Vec<u8>, OptxInfo)> = vec![
        // A segment past the group's last (one transmission, one segment: TBSN 0).
        (
            resp(0x5101, &[item(100, tbsn(&[1]))], 100),
            OptxInfo::BadTbsn {
                value: 1,
                min: 0,
                max: 0,
            },
        ),
        // Two results for one direction.
        (
            resp(0x5102, &[item(100, tbsn(&[0])), item(0, Loc::NoItem)], 100),
            OptxInfo::BadTbsn {
                value: 0,
                min: 0,
                max: 0,
            },
        ),
        // An explicit-RDMA result the requester never asked for.
        (
            resp(
                0x5103,
                &[item(
                    16,
                    Loc::Exrw {
                        count: 1,
                        xdr: &exrw_seg,
                    },
                )],
                0,
            ),
            OptxInfo::BadTbsn {
                value: 0,
                min: 0,
                max: 0,
            },
        ),
        // Nothing reached the segment.
        (
            resp(0x5104, &[item(5000, tbsn(&[0]))], 0),
            OptxInfo::BadOff {
                value: 5000,
                min: 0,
                max: 0,
            },
        ),
        // The Send stops short of the item's end.
        (
            resp(0x5105, &[item(5000, tbsn(&[0]))], 200),
            OptxInfo::BadOff {
                value: 5000,
                min: 0,
                max: 200,
            },
        ),
    ];
    for (k, (m, want)) in cases.iter().enumerate() {
        let xid = word(m, 0);
        let mut req = CallRequest::new(msg(&p, PROC_DROP, &[]), 512).with_xid(xid);
        req.push_write_sink(p.requester.alloc_large().expect("sink"))
            .expect("room");
        p.requester.submit(req, k as u64).expect("accepted");
        let asks = p.requester.stats().send_ddp_reply_asks;
        let dropped = p.run_until(DEADLINE, |p| {
            p.responder().is_some_and(|r| r.stats().no_reply > k as u64)
        });
        assert!(dropped, "case {k}: the responder dropped the call");
        assert_eq!(asks, k as u64 + 2, "case {k}: asked for a DDP reply");
        let errs = p
            .responder()
            .expect("responder")
            .stats()
            .transmit_errors_received;
        let buf = p
            .responder_mut()
            .expect("responder")
            .inject_send(m)
            .expect("sent");
        let mut outcome = None;
        let ok = p.run_until(DEADLINE, |p| {
            if outcome.is_none() {
                outcome = p.next_outcome();
            }
            outcome.is_some()
                && p.responder()
                    .is_some_and(|r| r.stats().transmit_errors_received > errs)
        });
        assert!(ok, "case {k}: an outcome and a ROPT_XMTERR");
        drop(buf);
        let o = outcome.expect("outcome");
        assert_eq!(
            o.status,
            CallStatus::Transport(TransportError::BadReply(BadReply::Continuation(*want))),
            "case {k}"
        );
    }
    // The connection carries on, segments and credits intact.
    let o = read_like(&mut p, ITEM as u32);
    assert!(o.write_result(0) == Some(&pattern(ITEM, 1)[..]));
    assert_eq!(p.requester.stats().send_ddp_reply_items, 2);
    assert_eq!(p.requester.credits().in_flight(), 0);
}

/// Shape choice (DESIGN.md): without `send_ddp_max` the device decides for arguments.
/// On shm, where a Read is one copy by the target with no round trip, they go by Read
/// chunk even though the server posts segments; on siw (a round trip per Read) by
/// send-based DDP. Results go by Write chunk on both (no round trip to save). A limit
/// set by hand wins either way.
fn shape_choice(net: impl Net, round_trip: bool) {
    let by_device = |send_ddp_max| ConnConfig {
        send_ddp_max,
        ..cfg(true, true)
    };
    let mut p = pair(&net, &by_device(None), &by_device(None));
    let expect = if round_trip { u32::MAX } else { 0 };
    assert_eq!(p.requester.core().send_ddp_max(), (expect, 0));
    write_like(&mut p, 1);
    let o = read_like(&mut p, ITEM as u32);
    assert!(o.write_result(0) == Some(&pattern(ITEM, 1)[..]));
    let st = p.requester.stats();
    let r = p.responder().expect("responder").stats();
    let n = u64::from(round_trip);
    assert_eq!((st.send_ddp_items, st.send_ddp_reply_items), (n, 0));
    assert_eq!(
        (r.ddp_args, r.ddp_results),
        (1 - n, 1),
        "by Read and Write chunk"
    );
    // A limit below the item sends it by chunks; one above, by send-based DDP.
    for (max, by_send) in [(ITEM as u32 - 1, false), (SEG, true)] {
        let mut p = pair(&net, &by_device(Some(max)), &by_device(None));
        write_like(&mut p, 2);
        let o = read_like(&mut p, ITEM as u32);
        assert!(o.write_result(0) == Some(&pattern(ITEM, 1)[..]));
        let st = p.requester.stats();
        let n = u64::from(by_send);
        assert_eq!(
            (st.send_ddp_items, st.send_ddp_reply_items),
            (n, n),
            "limit {max}"
        );
    }
}

#[test]
fn shape_choice_on_shm_is_by_chunks() {
    shape_choice(engine_support::ShmNet, false);
}

#[test]
fn shape_choice_on_siw_is_by_send_ddp() {
    shape_choice(
        engine_support::SiwNet {
            confirm_completions: true,
        },
        true,
    );
}

/// Where the requester's receive structure does not fit its connect request (a sim
/// device with an InfiniBand REQ's 56 octets of private data), it goes in a
/// characteristics update (ROPT_XCHUPD) right after establishment, before any call,
/// and replies' items come by send-based DDP all the same.
#[test]
fn the_structure_goes_in_an_update_when_the_connect_request_is_short() {
    use rpcrdma::fabric::sim::{SimConfig, SimNet};
    let mut sc = SimConfig::seeded(0x5eed);
    sc.caps.private_data.connect = rpcrdma::wire::private_data::ADVERTISEMENT_MAX;
    let net = SimNetFixture(SimNet::new(sc));
    let mut p = pair(&net, &cfg(true, true), &cfg(true, false));
    for k in 0..3 {
        let o = read_like(&mut p, ITEM as u32);
        assert!(o.write_result(0) == Some(&pattern(ITEM, 1)[..]), "call {k}");
    }
    let st = p.requester.stats();
    let r = p.responder().expect("responder").stats();
    assert_eq!((st.chars_updates_sent, r.chars_updates), (1, 1));
    assert_eq!((st.send_ddp_reply_items, r.send_ddp_replies), (3, 3));
    let rbs = p
        .responder()
        .expect("responder")
        .core()
        .peer_chars()
        .recv_buf
        .expect("the update carried XCHAR_RBSTRUCT");
    assert_eq!(rbs.ddp_segments(), 1);
    // With extensions off on the responder there is no update (a version-1-only peer
    // never sees RDMA_OPTIONAL) and results come by Write chunk.
    let mut p = pair(&net, &cfg(true, true), &cfg(false, false));
    let o = read_like(&mut p, ITEM as u32);
    assert!(o.write_result(0) == Some(&pattern(ITEM, 1)[..]));
    let st = p.requester.stats();
    assert_eq!((st.chars_updates_sent, st.send_ddp_reply_asks), (0, 0));
}

per_provider!(
    send_ddp_by_default,
    characteristics_update_later,
    segments_go_round,
    a_1mib_write_like_call_goes_by_send_ddp,
    without_the_structure_it_goes_by_read_chunk,
    bad_placements_get_badtbsn_or_badoff,
    a_1mib_read_like_reply_comes_by_send_ddp,
    short_and_missing_reply_items,
    without_the_structure_replies_use_write_chunks,
    bad_reply_results_fail_the_call,
);

/// The seeded simulation with message loss (each lost message breaks the connection),
/// delays and CQ stalls, under a workload of calls whose DDP argument goes by
/// send-based DDP, READ-like calls whose result comes back by send-based DDP, and small
/// calls: every call gets one outcome (its argument's checksum or its result right, or
/// a transport failure when the connection broke), and every pool is full
/// once both sides closed, so the DDP segments posted, landed and held by the service
/// all went back, including on connections that broke with such calls in flight.
#[test]
fn seeded_sim_with_lost_messages_and_disconnects_mid_call() {
    use rpcrdma::fabric::sim::{FaultConfig, SimConfig, SimNet};
    use rpcrdma::{ConnState, TransportError};
    use std::time::Duration;

    let small_seg = |send_ddp| ConnConfig {
        inline_send: 4096,
        inline_recv: 4096,
        extensions: true,
        send_ddp: Some(send_ddp),
        send_ddp_max: Some(u32::MAX),
        ..test_config()
    };
    let mut broke_with_ddp_out = 0;
    let mut placed = 0;
    let mut replies_placed = 0;
    for seed in 0x90u64..0x98 {
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
        // Both post DDP segments: calls place arguments, replies place results.
        let mut p = pair(&fixture, &small_seg(true), &small_seg(true));
        let cpools = p.requester.resources().pools().clone();
        let spools = p
            .responder()
            .expect("responder")
            .resources()
            .pools()
            .clone();
        let mut rng = net.workload_rng(3);
        let mut expect = std::collections::BTreeMap::new();
        let mut outcomes = 0usize;
        let mut broke_mid = false;
        let sum = |d: &[u8]| {
            d.iter()
                .fold(0u32, |a, &b| a.wrapping_mul(31).wrapping_add(u32::from(b)))
        };
        let check = |o: &rpcrdma::Outcome, (read_like, want): &(bool, Vec<u8>)| {
            let res = results(o);
            if *read_like {
                assert_eq!(word(res, 0) as usize, want.len());
                assert!(
                    o.write_result(0) == Some(&want[..]),
                    "the result arrived intact"
                );
            } else if want.is_empty() {
                assert_eq!(word(res, 0), 0);
            } else {
                assert_eq!((word(res, 0), word(res, 4) as usize), (1, want.len()));
                assert_eq!(word(res, 8), sum(want), "the item arrived intact");
            }
        };
        for tag in 0..40u64 {
            if p.requester.state() != ConnState::Established {
                break;
            }
            let n = if rng.below(3) != 0 {
                5000 + rng.below(60_000) as usize
            } else {
                0
            };
            let read_like = n > 0 && rng.below(2) == 0;
            let data = pattern(n, if read_like { 1 } else { tag as u8 });
            let req = if read_like {
                let mut args = (n as u32).to_be_bytes().to_vec();
                args.extend_from_slice(&0u32.to_be_bytes());
                let mut r = CallRequest::new(msg(&p, PROC_TWO_RESULTS, &args), 512);
                r.push_write_sink(p.requester.alloc_large().expect("sink"))
                    .expect("room");
                r
            } else if n > 0 {
                let m = msg(&p, PROC_SUM_ITEMS, &(n as u32).to_be_bytes());
                let mut r = CallRequest::new(m, 512);
                r.push_ddp_arg(CALL_HDR as u32 + 4, large_with(&p, &data))
                    .expect("room");
                r
            } else {
                CallRequest::new(msg(&p, PROC_SUM_ITEMS, &[]), 512)
            };
            p.requester.submit(req, tag).expect("submitted");
            expect.insert(tag, (read_like, data));
            for _ in 0..rng.range_inclusive(1, 6) {
                let now = p.requester.clock().now();
                p.poll(now);
            }
            while let Some(o) = p.next_outcome() {
                outcomes += 1;
                match o.status {
                    CallStatus::Success => check(&o, &expect[&o.tag]),
                    CallStatus::Transport(TransportError::Disconnected) => {
                        broke_mid |= !expect[&o.tag].1.is_empty();
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
                match o.status {
                    CallStatus::Success => check(&o, &expect[&o.tag]),
                    CallStatus::Transport(TransportError::Disconnected) => {
                        *broke_mid |= !expect[&o.tag].1.is_empty();
                    }
                    other => panic!("seed {seed}: tag {}: {other:?}", o.tag),
                }
            }
            outcomes == n
        });
        assert!(done, "seed {seed}: {outcomes} of {n} outcomes");
        placed += p.requester.stats().send_ddp_items;
        replies_placed += p.requester.stats().send_ddp_reply_items;
        assert_eq!(
            p.requester.stats().long_calls + p.requester.stats().cont_calls,
            0,
            "seed {seed}: every argument by send-based DDP"
        );
        eprintln!(
            "seed {seed}: {n} calls, state {:?}, placed {}, broke mid {}, sim {:?}",
            p.requester.state(),
            p.requester.stats().send_ddp_items,
            *broke_mid,
            net.stats()
        );
        if p.requester.state() == ConnState::Established {
            assert_eq!(p.requester.credits().in_flight(), 0, "seed {seed}: credits");
            p.requester.close();
        } else if *broke_mid {
            broke_with_ddp_out += 1;
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
    assert!(placed > 20, "send-based DDP was exercised: {placed}");
    assert!(
        replies_placed > 20,
        "send-based DDP replies were exercised: {replies_placed}"
    );
    assert!(
        broke_with_ddp_out > 0,
        "some connection broke with DDP calls in flight"
    );
}
