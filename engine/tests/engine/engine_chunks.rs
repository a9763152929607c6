//! End to end over shm, sim and siw: every chunk shape. Long calls (Position-Zero Read chunk,
//! RDMA_NOMSG), Reply chunks (used only when the reply does not fit inline), Read chunks
//! for DDP arguments at several positions with odd lengths (no roundup in the chunk,
//! positions counting it), and Write chunks filled, partly filled and left empty.

use crate::engine_support;

use engine_support::*;
use rpcrdma::{CallRequest, CallStatus, ConnConfig};

fn long_call_and_reply_chunk<N: Net>(net: N) {
    // Version 1 alone: between two rpcrdma peers with extensions a long call goes as a
    // continuation group instead (engine_continuation).
    let cfg = ConnConfig {
        extensions: false,
        ..test_config()
    };
    let mut p = pair(&net, &cfg, &cfg);
    let data = pattern(10_001, 3);
    let req = CallRequest::new(msg(&p, PROC_ECHO, &opaque(&data)), 12_000);
    let o = call(&mut p, req);
    assert_eq!(o.status, CallStatus::Success);
    assert_eq!(results(&o), &opaque(&data)[..]);
    let st = p.requester.stats();
    assert_eq!((st.long_calls, st.reply_chunks), (1, 1));
    let r = p.responder().expect("responder");
    assert_eq!(r.service().seen.long_calls, 1);
    assert_eq!(r.service().seen.reply_chunk, Some(12_000));
    assert_eq!(r.stats().chunk_replies, 1);
    assert_eq!(r.stats().inline_replies, 0);
}

/// The requester offers a Reply chunk only when the reply's maximum may not fit inline;
/// the responder uses an offered Reply chunk whenever the reply fits it, even a small
/// reply (draft-cel-nfsv4-rpcrdma-reliable-reply §5.3.2, as Linux nfsd does), and
/// replies inline when none was offered.
fn reply_chunk_used_whenever_offered<N: Net>(net: N) {
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    // Offered (the maximum is large), and used although the reply would fit inline.
    let req = CallRequest::new(msg(&p, PROC_BIG, &100u32.to_be_bytes()), 30_000);
    let o = call(&mut p, req);
    assert_eq!(o.status, CallStatus::Success);
    assert_eq!(results(&o), &opaque(&pattern(100, 7))[..]);
    let r = p.responder().expect("responder").stats();
    assert_eq!((r.inline_replies, r.chunk_replies), (0, 1));
    // Needed.
    let req = CallRequest::new(msg(&p, PROC_BIG, &20_000u32.to_be_bytes()), 30_000);
    let o = call(&mut p, req);
    assert_eq!(o.status, CallStatus::Success);
    assert_eq!(results(&o), &opaque(&pattern(20_000, 7))[..]);
    let r = p.responder().expect("responder").stats();
    assert_eq!((r.inline_replies, r.chunk_replies), (0, 2));
    // Not offered: a small maximum gets no Reply chunk, and the reply goes inline.
    let req = CallRequest::new(msg(&p, PROC_BIG, &8u32.to_be_bytes()), 512);
    let o = call(&mut p, req);
    assert_eq!(o.status, CallStatus::Success);
    assert_eq!(p.requester.stats().reply_chunks, 2);
    let r = p.responder().expect("responder").stats();
    assert_eq!((r.inline_replies, r.chunk_replies), (1, 2));
}

/// Three DDP-eligible opaque arguments with odd lengths; the inline payload keeps only
/// their length words.
fn read_chunks_at_several_positions<N: Net>(net: N) {
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    let lens = [1usize, 3, 4095];
    let datas: Vec<Vec<u8>> = lens
        .iter()
        .enumerate()
        .map(|(i, &n)| pattern(n, i as u8))
        .collect();
    let mut args = Vec::new();
    for d in &datas {
        args.extend_from_slice(&(d.len() as u32).to_be_bytes());
    }
    let mut req = CallRequest::new(msg(&p, PROC_SUM_ITEMS, &args), 512);
    // Positions count every earlier item with its roundup.
    let mut position = CALL_HDR as u32;
    let mut expect = Vec::new();
    for (i, d) in datas.iter().enumerate() {
        position += 4;
        expect.push((position, CALL_HDR + 4 * (i + 1), d.len()));
        req.push_ddp_arg(position, large_with(&p, d)).expect("room");
        position += d.len().next_multiple_of(4) as u32;
    }
    let o = call(&mut p, req);
    assert_eq!(o.status, CallStatus::Success);
    let res = results(&o);
    assert_eq!(word(res, 0), 3);
    for (i, d) in datas.iter().enumerate() {
        assert_eq!(word(res, 4 + 8 * i) as usize, d.len());
        let sum = d
            .iter()
            .fold(0u32, |a, &b| a.wrapping_mul(31).wrapping_add(u32::from(b)));
        assert_eq!(word(res, 8 + 8 * i), sum, "item {i} arrived intact");
    }
    let seen = &p.responder().expect("responder").service().seen;
    assert_eq!(seen.items, expect);
    assert_eq!(o.ddp_args.len(), 3, "DDP argument buffers come back");
}

/// A long call that also carries a DDP argument: Position-Zero chunk plus a chunk at
/// its position inside the pulled message.
fn long_call_with_ddp_argument<N: Net>(net: N) {
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    let big = pattern(5000, 9);
    let item = pattern(777, 4);
    // Arguments: opaque big (inline, makes the call long), then opaque item (DDP).
    let mut args = opaque(&big);
    args.extend_from_slice(&(item.len() as u32).to_be_bytes());
    let mut req = CallRequest::new(msg(&p, PROC_SUM_ITEMS, &args), 512);
    let position = (CALL_HDR + args.len()) as u32;
    req.push_ddp_arg(position, large_with(&p, &item))
        .expect("room");
    let o = call(&mut p, req);
    assert_eq!(o.status, CallStatus::Success);
    assert_eq!(word(results(&o), 0), 1);
    assert_eq!(word(results(&o), 4), 777);
    let r = p.responder().expect("responder");
    assert_eq!(r.service().seen.long_calls, 1);
    assert_eq!(
        r.service().seen.items,
        vec![(position, position as usize, 777)]
    );
}

fn write_chunk_gets_the_result_in_place<N: Net>(net: N) {
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    for n in [1usize, 5001, 40_000] {
        let data = pattern(n, 5);
        let mut req = CallRequest::new(msg(&p, PROC_ECHO_DDP, &opaque(&data[..n.min(1000)])), 512);
        // The argument goes inline when small; large ones travel as a Read chunk.
        if n > 1000 {
            req = CallRequest::new(msg(&p, PROC_ECHO_DDP, &(n as u32).to_be_bytes()), 512);
            req.push_ddp_arg((CALL_HDR + 4) as u32, large_with(&p, &data))
                .expect("room");
        }
        let sink = p.requester.alloc_large().expect("sink");
        req.push_write_sink(sink).expect("room");
        let o = call(&mut p, req);
        assert_eq!(o.status, CallStatus::Success, "size {n}");
        let expect = &data[..if n > 1000 { n } else { n.min(1000) }];
        // The reply body holds only the length word; the bytes are in the sink, with
        // no roundup written.
        assert_eq!(results(&o), &(expect.len() as u32).to_be_bytes()[..]);
        assert_eq!(o.write_result(0), Some(expect), "size {n}");
    }
    assert_eq!(p.responder().expect("responder").stats().ddp_results, 3);
}

fn write_chunks_partly_filled_and_empty<N: Net>(net: N) {
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    for (a, b) in [(3000u32, 0u32), (10, 7), (0, 0)] {
        let mut args = a.to_be_bytes().to_vec();
        args.extend_from_slice(&b.to_be_bytes());
        let mut req = CallRequest::new(msg(&p, PROC_TWO_RESULTS, &args), 512);
        for _ in 0..2 {
            req.push_write_sink(p.requester.alloc_large().expect("sink"))
                .expect("room");
        }
        let o = call(&mut p, req);
        assert_eq!(o.status, CallStatus::Success);
        assert_eq!(
            o.write_result(0),
            Some(&pattern(a as usize, 1)[..]),
            "{a},{b}"
        );
        assert_eq!(
            o.write_result(1),
            Some(&pattern(b as usize, 2)[..]),
            "{a},{b}"
        );
        assert_eq!(word(results(&o), 0), a);
        assert_eq!(word(results(&o), 4), b);
        let seen = &p.responder().expect("responder").service().seen;
        assert_eq!(seen.write_chunks, vec![64 * 1024, 64 * 1024]);
    }
}

fn ddp_result_without_write_chunk_goes_inline<N: Net>(net: N) {
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    let data = pattern(1001, 8);
    let req = CallRequest::new(msg(&p, PROC_ECHO_DDP, &opaque(&data)), 2000);
    let o = call(&mut p, req);
    assert_eq!(o.status, CallStatus::Success);
    assert_eq!(results(&o), &opaque(&data)[..]);
    assert_eq!(p.responder().expect("responder").stats().ddp_results, 0);
}

per_provider!(
    long_call_and_reply_chunk,
    reply_chunk_used_whenever_offered,
    read_chunks_at_several_positions,
    long_call_with_ddp_argument,
    write_chunk_gets_the_result_in_place,
    write_chunks_partly_filled_and_empty,
    ddp_result_without_write_chunk_goes_inline,
);
