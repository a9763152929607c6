//! End to end over shm, sim and siw: replies in responder-provided Read chunks
//! (draft-cel-nfsv4-rpcrdma-reliable-reply §4). A reply that fits neither inline nor the
//! Reply chunk offered is exposed read-only by the responder, pulled by the requester
//! with RDMA Read and answered with RDMA_DONE, which frees it; a DONE that never comes
//! times out; a requester that leaves frees everything; a peer without the extension
//! gets ERR_CHUNK; the key is dead once DONE is processed.

use crate::engine_support;

use std::time::{Duration, Instant};

use engine_support::*;
use rpcrdma::fabric::{Provider, QueuePair, RemoteAddr, SendOp, SendWr, WcStatus};
use rpcrdma::wire::header::{HeaderRepr, RdmaError};
use rpcrdma::{CallRequest, CallStatus, ConnConfig, ConnState, Pair, TransportError};

/// `n` pattern octets from PROC_BIG, offering no Reply chunk (`max_reply_len` small).
fn big(p: &Pair<impl Provider, TestService>, n: u32, max_reply_len: u32) -> CallRequest {
    CallRequest::new(msg(p, PROC_BIG, &n.to_be_bytes()), max_reply_len)
}

/// Calls PROC_BIG for `n` octets.
fn call_big<P: Provider>(
    p: &mut Pair<P, TestService>,
    n: u32,
    max_reply_len: u32,
) -> rpcrdma::Outcome {
    let req = big(p, n, max_reply_len);
    call(p, req)
}

/// False when the responder cannot expose replies: its device has no fast registration
/// (kernel siw through verbs offers no type-2 memory windows to userspace), so it offers
/// no extension and a reply too large for what was offered gets ERR_CHUNK, which is
/// checked here instead.
fn exposes<N: Net>(net: &N, p: &mut Pair<N::P, TestService>) -> bool {
    if p.requester.core().extensions().reply_read_chunks {
        return true;
    }
    use rpcrdma::fabric::Device;
    assert!(
        !net.device().caps().fast_reg,
        "a device with fast registration negotiates the extension"
    );
    let o = call_big(p, 30_000, 512);
    assert_eq!(
        o.status,
        CallStatus::Transport(TransportError::Rdma(RdmaError::Chunk))
    );
    eprintln!("responder cannot expose replies on this device: ERR_CHUNK checked instead");
    false
}

/// Polls until the responder holds no exposed reply.
fn until_nothing_exposed<P: Provider>(p: &mut Pair<P, TestService>) {
    let ok = p.run_until(DEADLINE, |p| {
        p.responder().is_some_and(|r| r.stats().exposed == 0)
    });
    assert!(ok, "every exposed reply is freed");
}

/// Sizes around the thresholds: inline below, Read chunk above (no Reply chunk
/// offered), and a Reply chunk offered that is too small.
fn replies_around_the_thresholds<N: Net>(net: N) {
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    if !exposes(&net, &mut p) {
        return;
    }
    assert!(p.requester.core().extensions().reply_read_chunks);
    let inline = 4096 - REPLY_HDR as u32 - 4 - 28;
    let mut pulled = 0;
    for n in [
        1,
        inline - 8,
        inline + 100,
        4096,
        5000,
        40_000,
        65_536 - REPLY_HDR as u32 - 4,
    ] {
        let o = call_big(&mut p, n, 512);
        assert_eq!(o.status, CallStatus::Success, "size {n}");
        assert_eq!(
            results(&o),
            &opaque(&pattern(n as usize, 7))[..],
            "size {n}"
        );
        if n > 4096 - 128 {
            pulled += 1;
        }
    }
    // A Reply chunk of about 8 KiB, too small for 20000 octets: the Read chunk.
    let o = call_big(&mut p, 20_000, 8000);
    assert_eq!(o.status, CallStatus::Success);
    assert_eq!(results(&o), &opaque(&pattern(20_000, 7))[..]);
    pulled += 1;
    until_nothing_exposed(&mut p);
    let r = p.responder().expect("responder").stats();
    let q = p.requester.stats();
    assert!(r.read_chunk_replies >= pulled - 1, "{r:?}");
    assert_eq!(r.read_chunk_replies, q.read_chunk_replies);
    assert_eq!(q.dones_sent, q.read_chunk_replies);
    assert_eq!(r.done_received, q.dones_sent);
    assert_eq!((r.err_chunk, r.done_unknown, r.done_timeouts), (0, 0, 0));
    assert_eq!(r.chunk_replies, 0, "the small Reply chunk was not used");
    // Both set R (fast registration): every DONE was a Send With Invalidate naming the
    // exposed key, and these devices say so; else (persistent requester) plain Sends.
    if p.requester.thresholds().remote_invalidate {
        assert_eq!(r.done_remote_invalidations, r.done_received);
    } else {
        assert_eq!(r.done_remote_invalidations, 0);
    }
}

/// A DDP result in a Write chunk, and the rest of the reply in the Read chunk.
fn read_chunk_with_write_chunk<N: Net>(net: N) {
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    if !exposes(&net, &mut p) {
        return;
    }
    let mut args = 1000u32.to_be_bytes().to_vec();
    args.extend_from_slice(&30_000u32.to_be_bytes());
    let mut req = CallRequest::new(msg(&p, PROC_TWO_RESULTS, &args), 512);
    req.push_write_sink(p.requester.alloc_large().expect("sink"))
        .expect("room");
    let o = call(&mut p, req);
    assert_eq!(o.status, CallStatus::Success);
    assert_eq!(o.write_result(0), Some(&pattern(1000, 1)[..]));
    let res = results(&o);
    assert_eq!(word(res, 0), 1000);
    assert_eq!(word(res, 4), 30_000);
    assert_eq!(&res[8..8 + 30_000], &pattern(30_000, 2)[..]);
    until_nothing_exposed(&mut p);
    let r = p.responder().expect("responder").stats();
    assert_eq!((r.read_chunk_replies, r.ddp_results), (1, 1));
}

/// Several pulls at once, then many in a row with few credits: every credit comes back
/// (a DONE takes none) and the responder never finds a call without a receive.
fn concurrent_pulls_leak_no_credit<N: Net>(net: N) {
    let cfg = ConnConfig {
        credits: 4,
        ..test_config()
    };
    let mut p = pair(&net, &cfg, &cfg);
    if !exposes(&net, &mut p) {
        return;
    }
    // A first call for the grant.
    assert_eq!(call_big(&mut p, 1, 512).status, CallStatus::Success);
    for round in 0..40u32 {
        let sizes: Vec<u32> = (0..4).map(|k| 6000 + 997 * k + round).collect();
        for (k, &n) in sizes.iter().enumerate() {
            p.requester
                .submit(big(&p, n, 512), k as u64)
                .expect("submitted");
        }
        let mut got = vec![None; sizes.len()];
        let ok = p.run_until(DEADLINE, |p| {
            while let Some(o) = p.next_outcome() {
                let k = o.tag as usize;
                assert_eq!(o.status, CallStatus::Success, "round {round} call {k}");
                assert_eq!(results(&o), &opaque(&pattern(sizes[k] as usize, 7))[..]);
                got[k] = Some(());
            }
            got.iter().all(Option::is_some)
        });
        assert!(ok, "round {round}: every call answered");
    }
    until_nothing_exposed(&mut p);
    let r = p.responder().expect("responder").stats();
    let q = p.requester.stats();
    assert_eq!(r.read_chunk_replies, 160);
    assert_eq!(q.dones_sent, 160);
    assert_eq!(r.done_received, 160);
    assert_eq!(r.overruns, 0, "no call found its receive taken by a DONE");
    let c = p.requester.credits().snapshot();
    assert_eq!(c.in_flight, 0, "{c:?}");
    assert_eq!(c.granted, 4, "the window is whole after 160 DONEs: {c:?}");
    // And it still carries a full window of calls.
    assert_eq!(call_big(&mut p, 7000, 512).status, CallStatus::Success);
}

/// The requester neglects DONE: the responder invalidates the reply after its timeout,
/// counts it, and serves on.
///
/// On a [`HandClock`]: the timeout cannot fire before the reply was read however long
/// the thread is descheduled (on the real clock it once did under load, and the Read
/// then met a revoked key, as §4.1.3 says it should), and it must fire once the clock
/// has passed it.
fn lost_done_times_out<N: Net>(net: N) {
    let cfg = test_config();
    let timeout = Duration::from_millis(50);
    let server = ConnConfig {
        done_timeout: timeout,
        ..test_config()
    };
    let mut p = pair(&net, &cfg, &server);
    if !exposes(&net, &mut p) {
        return;
    }
    p.requester.core_mut().set_drop_dones(true);
    let mut clock = HandClock::at_pair(&p);
    let req = big(&p, 30_000, 512);
    let o = clock.call(&mut p, req, |_, _| {});
    assert_eq!(o.status, CallStatus::Success);
    assert_eq!(p.requester.stats().dones_sent, 0);
    let r = p.responder().expect("responder").stats();
    assert_eq!((r.exposed, r.done_timeouts), (1, 0), "not timed out yet");
    clock.advance(timeout + Duration::from_millis(1));
    let ok = clock.run_until(&mut p, |p| {
        p.responder().is_some_and(|r| r.stats().exposed == 0)
    });
    assert!(ok, "the timeout freed the exposed reply");
    let r = p.responder().expect("responder").stats();
    assert_eq!((r.done_timeouts, r.done_received), (1, 0));
    p.requester.core_mut().set_drop_dones(false);
    let req = big(&p, 30_000, 512);
    let o = clock.call(&mut p, req, |_, _| {});
    assert_eq!(o.status, CallStatus::Success);
    // The clock stands still: only the DONE can free this one.
    let ok = clock.run_until(&mut p, |p| {
        p.responder().is_some_and(|r| r.stats().exposed == 0)
    });
    assert!(ok, "the DONE freed the exposed reply");
    let r = p.responder().expect("responder").stats();
    assert_eq!((r.done_received, r.done_timeouts), (1, 1));
}

/// The requester leaves with replies exposed: the responder lets go of everything.
fn requester_leaves_before_done<N: Net>(net: N) {
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    if !exposes(&net, &mut p) {
        return;
    }
    let spools = p
        .responder()
        .expect("responder")
        .resources()
        .pools()
        .clone();
    p.requester.core_mut().set_drop_dones(true);
    for n in [10_000, 20_000, 30_000] {
        assert_eq!(call_big(&mut p, n, 512).status, CallStatus::Success);
    }
    assert_eq!(p.responder().expect("responder").stats().exposed, 3);
    p.requester.close();
    let ok = p.run_until(DEADLINE, |p| {
        p.requester.state() == ConnState::Closed
            && p.responder()
                .is_some_and(|r| r.state() == ConnState::Closed)
    });
    assert!(ok, "both sides closed");
    let r = p.responder().expect("responder").stats();
    assert_eq!(r.exposed, 0, "no exposed reply outlives the connection");
    drop(p);
    assert!(
        spools.recv.is_full() && spools.send.is_full() && spools.large.is_full(),
        "responder pools are full again"
    );
}

/// A DONE for an XID with nothing exposed is dropped silently; the connection lives.
fn unknown_xid_done_is_dropped<N: Net>(net: N) {
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    if !exposes(&net, &mut p) {
        return;
    }
    assert_eq!(call_big(&mut p, 8, 512).status, CallStatus::Success);
    let mut b = p.requester.alloc_msg().expect("buffer");
    let repr = HeaderRepr {
        xid: 0x0bad_f00d,
        credit: 8,
        body: rpcrdma::wire::header::BodyRepr::Done,
    };
    let n = repr.encode(b.storage_mut()).expect("encodes");
    let sge = b.sge(0, n).expect("sge");
    let sgl = [sge];
    p.requester
        .qp_mut()
        .post_send(&[SendWr::send(0x7777, &sgl)])
        .expect("posted");
    let ok = p.run_until(DEADLINE, |p| {
        p.responder().is_some_and(|r| r.stats().done_unknown == 1)
    });
    assert!(ok, "the DONE arrived");
    drop(b);
    let o = call_big(&mut p, 9000, 512);
    assert_eq!(o.status, CallStatus::Success, "the connection serves on");
    until_nothing_exposed(&mut p);
    let r = p.responder().expect("responder").stats();
    assert_eq!((r.done_unknown, r.done_received), (1, 2));
}

/// Either peer without the extension: the reply that fits nothing gets ERR_CHUNK (the
/// permanent transport error the draft asks for), at once, and nothing is exposed.
fn peer_without_extension_gets_err_chunk<N: Net>(net: N) {
    let on = test_config();
    let off = ConnConfig {
        extensions: false,
        ..test_config()
    };
    for (client, server) in [(&off, &on), (&on, &off)] {
        let mut p = pair(&net, client, server);
        assert!(!p.requester.core().extensions().reply_read_chunks);
        let start = Instant::now();
        let o = call_big(&mut p, 30_000, 512);
        assert_eq!(
            o.status,
            CallStatus::Transport(TransportError::Rdma(RdmaError::Chunk))
        );
        assert!(start.elapsed() < DEADLINE);
        let r = p.responder().expect("responder").stats();
        assert_eq!((r.err_chunk, r.read_chunk_replies, r.exposed), (1, 0, 0));
        // Small replies are unaffected.
        assert_eq!(call_big(&mut p, 100, 512).status, CallStatus::Success);
    }
}

/// Once DONE is processed the chunk's key is dead: reading with it fails with a remote
/// access error (and costs the connection, as the draft's §4.1.3 says).
fn old_key_is_dead_after_done<N: Net>(net: N) {
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    if !exposes(&net, &mut p) {
        return;
    }
    let o = call_big(&mut p, 20_000, 512);
    assert_eq!(o.status, CallStatus::Success);
    drop(o);
    until_nothing_exposed(&mut p);
    let seg = p
        .requester
        .core()
        .last_pulled_segment()
        .expect("a chunk was pulled");
    let mut sink = p.requester.alloc_large().expect("sink");
    sink.fill(&[0xa5; 4096]).expect("fits");
    let sge = sink.sge(0, 4096).expect("sge");
    let sgl = [sge];
    // A pull id naming no call slot: the core fails the connection with the
    // completion's status, then counts the completion as stray.
    let wr = SendWr {
        wr_id: rpcrdma::WrId::new(rpcrdma::WrKind::ReplyPull, 999_999).encode(),
        op: SendOp::RdmaRead {
            remote: RemoteAddr {
                addr: seg.offset,
                rkey: seg.handle,
            },
        },
        sgl: &sgl,
        flags: rpcrdma::fabric::SendFlags::SIGNALED,
    };
    p.requester.qp_mut().post_send(&[wr]).expect("posted");
    let ok = p.run_until(DEADLINE, |p| p.requester.state() != ConnState::Established);
    assert!(ok, "the read failed and the connection ended");
    let mut reason = None;
    while let Some(e) = p.requester.poll_event() {
        if let rpcrdma::ConnEvent::Closed(r) | rpcrdma::ConnEvent::DisconnectRequested(r) = e {
            reason.get_or_insert(r);
        }
    }
    let _ = p.run_until(DEADLINE, |p| p.requester.state() == ConnState::Closed);
    while let Some(e) = p.requester.poll_event() {
        if let rpcrdma::ConnEvent::Closed(r) = e {
            reason.get_or_insert(r);
        }
    }
    match reason {
        // The statuses the fabric conformance suite allows a Read the peer refuses:
        // shm and sim may report it flushed once the peer has failed the connection,
        // siw still in transmission when the peer's Terminate arrives.
        Some(rpcrdma::CloseReason::WorkRequestFailed(st)) => assert!(
            matches!(
                st,
                WcStatus::RemoteAccessError | WcStatus::WrFlushed | WcStatus::LocalQpOperationError
            ),
            "{st:?}"
        ),
        Some(rpcrdma::CloseReason::PeerAborted(_)) => {}
        other => panic!("closed for {other:?}"),
    }
    assert!(
        sink.as_slice().iter().all(|&b| b == 0xa5),
        "not one octet of the old reply was read"
    );
}

per_provider!(
    replies_around_the_thresholds,
    read_chunk_with_write_chunk,
    concurrent_pulls_leak_no_credit,
    lost_done_times_out,
    requester_leaves_before_done,
    unknown_xid_done_is_dropped,
    peer_without_extension_gets_err_chunk,
    old_key_is_dead_after_done,
    exhausted_slots_wait_for_a_timeout,
    read_chunk_policy_offers_no_reply_chunk,
    per_call_policy_follows_the_call,
    plain_replies_through_the_spare_body_match_the_first,
);

/// Every reply MR slot holds a reply whose DONE does not come: the next large reply
/// waits for one to time out, then goes out; nothing hangs and nothing is refused.
///
/// On a [`HandClock`], moved past the DONE timeout only while the call in flight has its
/// reply waiting for a slot (the responder stalled and has not exposed it): then every
/// exposed reply has been read (each earlier call has its outcome), so timing them out
/// races no Read. On the real clock a thread descheduled for longer than the 30 ms
/// timeout between a reply's arrival and its Read met a revoked key (a Protection
/// Terminate, as §4.1.3 says), and the test failed under load.
fn exhausted_slots_wait_for_a_timeout<N: Net>(net: N) {
    let cfg = test_config();
    let timeout = Duration::from_millis(30);
    let server = ConnConfig {
        credits: 2,
        done_timeout: timeout,
        ..test_config()
    };
    let mut p = pair(&net, &cfg, &server);
    if !exposes(&net, &mut p) {
        return;
    }
    p.requester.core_mut().set_drop_dones(true);
    let mut clock = HandClock::at_pair(&p);
    let mut moved = 0;
    for n in [10_000u32, 11_000, 12_000, 13_000, 14_000] {
        let before = p.responder().expect("responder").stats();
        let mut waited = false;
        let req = big(&p, n, 512);
        let o = clock.call(&mut p, req, |p, clock| {
            let r = p.responder().expect("responder").stats();
            if !waited
                && r.stalls > before.stalls
                && r.read_chunk_replies == before.read_chunk_replies
            {
                waited = true;
                clock.advance(timeout + Duration::from_millis(1));
            }
        });
        moved += u32::from(waited);
        assert_eq!(o.status, CallStatus::Success, "size {n}");
        assert_eq!(results(&o), &opaque(&pattern(n as usize, 7))[..]);
        assert!(p.responder().expect("responder").stats().exposed <= 2);
    }
    assert!(moved > 0, "a reply waited for a slot");
    clock.advance(timeout + Duration::from_millis(1));
    let ok = clock.run_until(&mut p, |p| {
        p.responder().is_some_and(|r| r.stats().exposed == 0)
    });
    assert!(ok, "every exposed reply is freed");
    let r = p.responder().expect("responder").stats();
    assert_eq!((r.read_chunk_replies, r.done_timeouts), (5, 5));
    assert!(r.stalls > 0, "a reply waited for a slot");
}

/// `ReplyChunks::ReadChunkWhenNegotiated` (the draft's §5.3.1): with a peer that provides
/// Read chunks no Reply chunk is offered, however large the reply may be; with one that
/// does not, the Reply chunk is offered as before.
fn read_chunk_policy_offers_no_reply_chunk<N: Net>(net: N) {
    let client = ConnConfig {
        reply_chunks: rpcrdma::ReplyChunks::ReadChunkWhenNegotiated,
        ..test_config()
    };
    let plain = ConnConfig {
        extensions: false,
        ..test_config()
    };
    for (server, via_read_chunk) in [(test_config(), true), (plain, false)] {
        let mut p = pair(&net, &client, &server);
        for n in [100u32, 30_000] {
            let o = call_big(&mut p, n, 60_000);
            assert_eq!(o.status, CallStatus::Success, "size {n}");
            assert_eq!(results(&o), &opaque(&pattern(n as usize, 7))[..]);
        }
        let q = p.requester.stats();
        // A responder that cannot expose replies offers no extension (see `exposes`).
        if via_read_chunk && p.requester.core().extensions().reply_read_chunks {
            assert_eq!((q.reply_chunks, q.read_chunk_replies), (0, 1));
        } else {
            assert_eq!((q.reply_chunks, q.read_chunk_replies), (2, 0));
        }
        until_nothing_exposed(&mut p);
    }
}

/// `ReplyChunks::PerCall` (the draft's §5.3.1, per procedure through the ULP's
/// `ProcInfo`): only calls marked `prefers_read_chunk_reply` leave the Reply chunk out,
/// and only with a peer that provides Read chunks; the others offer it as before.
fn per_call_policy_follows_the_call<N: Net>(net: N) {
    let client = ConnConfig {
        reply_chunks: rpcrdma::ReplyChunks::PerCall,
        ..test_config()
    };
    let mut p = pair(&net, &client, &test_config());
    let negotiated = p.requester.core().extensions().reply_read_chunks;
    for (prefers, n) in [
        (true, 30_000u32),
        (false, 30_000),
        (true, 100),
        (false, 100),
    ] {
        let req = big(&p, n, 60_000).prefer_read_chunk_reply(prefers);
        let before = p.requester.stats();
        let o = call(&mut p, req);
        assert_eq!(o.status, CallStatus::Success, "size {n}, prefers {prefers}");
        assert_eq!(results(&o), &opaque(&pattern(n as usize, 7))[..]);
        let after = p.requester.stats();
        let offered = after.reply_chunks - before.reply_chunks;
        let pulled = after.read_chunk_replies - before.read_chunk_replies;
        if prefers && negotiated {
            // No Reply chunk: a large reply is pulled, a small one comes inline.
            assert_eq!((offered, pulled), (0, u64::from(n > 4096)), "size {n}");
        } else {
            assert_eq!((offered, pulled), (1, 0), "size {n}, prefers {prefers}");
        }
    }
    until_nothing_exposed(&mut p);
}

/// With the extension negotiated a plain call's reply body is written in a large
/// buffer: the first in one from the cache, later ones in the spare kept aside
/// (`spare_body`), copied behind the header where it lies when short. Every outcome
/// after the spare exists (short, longer than the copy bound, an RPC error, an exposed
/// reply) is the same as through the first call's buffer.
fn plain_replies_through_the_spare_body_match_the_first<N: Net>(net: N) {
    use rpcrdma::RpcReplyError;
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    let exposing = p.requester.core().extensions().reply_read_chunks;
    for round in 0..3 {
        for n in [1u32, 40, 300, 3000, 1, 30_000, 1] {
            if !exposing && n > 4096 - 128 {
                // Without the extension it gets ERR_CHUNK (`peer_without_extension_...`).
                continue;
            }
            let o = call_big(&mut p, n, 512);
            assert_eq!(o.status, CallStatus::Success, "round {round}, size {n}");
            assert_eq!(
                results(&o),
                &opaque(&pattern(n as usize, 7))[..],
                "round {round}, size {n}"
            );
        }
        let req = CallRequest::new(msg(&p, PROC_GARBAGE, &[]), 256);
        let o = call(&mut p, req);
        assert_eq!(
            o.status,
            CallStatus::RpcError(RpcReplyError::Accepted(4)),
            "round {round}: GARBAGE_ARGS"
        );
        let req = CallRequest::new(msg(&p, PROC_NULL, &[]), 256);
        let o = call(&mut p, req);
        assert_eq!(o.status, CallStatus::Success, "round {round}: NULL");
    }
    until_nothing_exposed(&mut p);
    let r = p.responder().expect("responder").stats();
    assert_eq!((r.err_chunk, r.dropped), (0, 0), "{r:?}");
}
