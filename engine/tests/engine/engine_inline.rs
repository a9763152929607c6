//! End to end over shm, sim and siw: short calls and replies sent inline (RDMA_MSG both
//! ways), RPC-level errors, and the private-data negotiation.

use crate::engine_support;

use engine_support::*;
use rpcrdma::fabric::Provider;
use rpcrdma::ConnState;
use rpcrdma::{CallRequest, CallStatus, RpcReplyError};

fn null_call_round_trips<N: Net>(net: N) {
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    let req = CallRequest::new(msg(&p, PROC_NULL, &[]), 256);
    let o = call(&mut p, req);
    assert_eq!(o.status, CallStatus::Success);
    let r = o.reply.as_ref().expect("reply");
    assert_eq!(r.len(), REPLY_HDR);
    assert_eq!(word(r.bytes(), 0), o.xid, "reply carries the call's XID");
    let st = p.requester.stats();
    assert_eq!((st.calls_sent, st.long_calls, st.reply_chunks), (1, 0, 0));
    assert_eq!(p.responder().expect("responder").stats().inline_replies, 1);
}

fn caller_chosen_xids_cross_the_wire<N: Net>(net: N) {
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    // Counting up from a start whose low bits are those of engine XIDs of slot 0, with
    // engine-assigned calls in between.
    for (i, x) in (0xFEED_0000u32..0xFEED_0004).enumerate() {
        let data = pattern(100 + i, i as u8);
        let req = CallRequest::new(msg(&p, PROC_ECHO, &opaque(&data)), 4000).with_xid(x);
        let o = call(&mut p, req);
        assert_eq!((o.status, o.xid), (CallStatus::Success, x));
        let r = o.reply.as_ref().expect("reply");
        assert_eq!(
            word(r.bytes(), 0),
            x,
            "the responder answered the caller's XID"
        );
        assert_eq!(results(&o), &opaque(&data)[..]);
        let null = CallRequest::new(msg(&p, PROC_NULL, &[]), 256);
        let o = call(&mut p, null);
        assert_eq!(o.status, CallStatus::Success);
        assert_ne!(o.xid, x);
    }
}

fn echo_is_exact_for_many_sizes<N: Net>(net: N) {
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    for (i, n) in [0usize, 1, 2, 3, 4, 5, 100, 1000, 3000]
        .into_iter()
        .enumerate()
    {
        let data = pattern(n, i as u8);
        let req = CallRequest::new(msg(&p, PROC_ECHO, &opaque(&data)), 4000);
        let o = call(&mut p, req);
        assert_eq!(o.status, CallStatus::Success, "size {n}");
        assert_eq!(results(&o), &opaque(&data)[..], "size {n}");
    }
    let st = p.requester.stats();
    assert_eq!(st.calls_sent, 9);
    assert_eq!(st.long_calls, 0, "all fit the 4 KiB threshold");
}

/// A driver loop that takes message buffers from the connection's cache
/// (`Requester::take_msg`) and gives each outcome's buffers back (`Requester::recycle`):
/// the calls work, every reply is the call's, and once the connection is gone the send
/// and receive pools are full again (the caches gave everything back).
fn recycled_buffers_serve_call_after_call<N: Net>(net: N) {
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    let pools = p.requester.resources().pools().clone();
    for i in 0..200usize {
        let data = pattern(i % 97, i as u8);
        let mut m = p.requester.take_msg().expect("send buffer from the cache");
        write_call(&mut m, PROC_ECHO, &opaque(&data));
        let o = call(&mut p, CallRequest::new(m, 4000));
        assert_eq!(o.status, CallStatus::Success, "call {i}");
        assert_eq!(results(&o), &opaque(&data)[..], "call {i}");
        p.requester.recycle(o);
    }
    assert_eq!(p.requester.stats().calls_sent, 200);
    // Each reply's buffer, given back, went straight into the slot it left (all but
    // what a poll restocked first, e.g. where a call's Send went before the reply's
    // buffer came back), not through the cache (`RecvTable::give_back`).
    let in_place = p.requester.core().recvs_reposted_in_place();
    assert!(
        in_place >= 190,
        "{in_place} of 200 reply buffers reposted in place"
    );
    drop(p);
    assert!(pools.send.is_full(), "send buffers all back");
    assert!(pools.recv.is_full(), "receive buffers all back");
}

/// The same loop submitting at the turn's clock read (`Requester::submit_at`) and reading
/// each outcome where the engine keeps it (`Requester::poll_outcome_with`): every reply
/// is its call's, what the closure returns comes back, a poll with nothing finished
/// gives `None` without calling it, and the caches get every buffer back.
fn outcomes_read_in_place_give_their_buffers_back<N: Net>(net: N) {
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    let pools = p.requester.resources().pools().clone();
    let deadline = std::time::Instant::now() + DEADLINE;
    for i in 0..200u64 {
        let data = pattern((i % 97) as usize, i as u8);
        let mut m = p.requester.take_msg().expect("send buffer from the cache");
        write_call(&mut m, PROC_ECHO, &opaque(&data));
        let mut now = p.requester.clock().now();
        p.requester
            .submit_at(CallRequest::new(m, 4000), i, now)
            .expect("submitted");
        assert_eq!(
            p.requester
                .poll_outcome_with(|_| unreachable!("nothing finished yet")),
            None::<()>
        );
        let (tag, ok) = loop {
            p.poll(now);
            let seen = p.requester.poll_outcome_with(|o| {
                let ok = o.status == CallStatus::Success && results(o) == &opaque(&data)[..];
                (o.tag, ok)
            });
            if let Some(seen) = seen {
                break seen;
            }
            assert!(now < deadline, "call {i} answered before the deadline");
            now = p.requester.clock().now();
        };
        assert_eq!((tag, ok), (i, true), "call {i}");
    }
    assert_eq!(p.requester.stats().calls_sent, 200);
    drop(p);
    assert!(pools.send.is_full(), "send buffers all back");
    assert!(pools.recv.is_full(), "receive buffers all back");
}

/// Calls at depth: a batch of replies handed out together leaves its receive slots for
/// the replies' own buffers (`RecvTable::short_by_at_most`), so each buffer the driver
/// gives back (`Requester::poll_outcome_with`) is staged again where it lies, none
/// taken from the cache and none cached; the receives are all posted again after, the
/// next batch works, and the pools are full once the connection is gone.
fn a_batch_of_replies_is_restocked_with_its_own_buffers<N: Net>(net: N) {
    const BATCH: u64 = 6;
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    let pools = p.requester.resources().pools().clone();
    let depth = p.requester.core().recvs_posted();
    let deadline = std::time::Instant::now() + DEADLINE;
    for round in 0..4u64 {
        let now = p.requester.clock().now();
        for i in 0..BATCH {
            let data = pattern(i as usize + 1, i as u8);
            let mut m = p.requester.take_msg().expect("send buffer from the cache");
            write_call(&mut m, PROC_ECHO, &opaque(&data));
            p.requester
                .submit_at(CallRequest::new(m, 4000), round * BATCH + i, now)
                .expect("submitted");
        }
        // Every reply arrives before any is taken.
        let want = (round + 1) * BATCH;
        while p.requester.stats().outcomes < want {
            p.poll(p.requester.clock().now());
            assert!(
                std::time::Instant::now() < deadline,
                "round {round} answered before the deadline"
            );
        }
        let in_place = p.requester.core().recvs_reposted_in_place();
        let mut tags = Vec::new();
        while let Some((tag, ok)) = p
            .requester
            .poll_outcome_with(|o| (o.tag, o.status == CallStatus::Success))
        {
            assert!(ok, "call {tag} succeeded");
            tags.push(tag);
        }
        tags.sort_unstable();
        let expected: Vec<u64> = (round * BATCH..want).collect();
        assert_eq!(tags, expected, "round {round}: each call one outcome");
        // The first batch starts on the one credit a new connection has and the rest
        // of it when the first reply grants more: those calls' Sends, staged in the
        // poll that reaps that reply, restock its slot from the cache first.
        let reposted = p.requester.core().recvs_reposted_in_place() - in_place;
        let want_in_place = if round == 0 {
            BATCH - 1..=BATCH
        } else {
            BATCH..=BATCH
        };
        assert!(
            want_in_place.contains(&reposted),
            "round {round}: {reposted} of {BATCH} reply buffers staged again where they lie"
        );
        assert_eq!(
            p.requester.core().recvs_posted(),
            depth,
            "round {round}: every receive staged again"
        );
    }
    drop(p);
    assert!(pools.send.is_full(), "send buffers all back");
    assert!(pools.recv.is_full(), "receive buffers all back");
}

fn service_errors_become_rpc_errors<N: Net>(net: N) {
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    let req = CallRequest::new(msg(&p, PROC_GARBAGE, &[]), 256);
    let o = call(&mut p, req);
    assert_eq!(
        o.status,
        CallStatus::RpcError(RpcReplyError::Accepted(4)),
        "GARBAGE_ARGS"
    );
    let req = CallRequest::new(msg(&p, 77, &[]), 256);
    let o = call(&mut p, req);
    assert_eq!(o.status, CallStatus::RpcError(RpcReplyError::Accepted(3)));
    // The connection is unaffected.
    let req = CallRequest::new(msg(&p, PROC_NULL, &[]), 256);
    let o = call(&mut p, req);
    assert_eq!(o.status, CallStatus::Success);
    assert_eq!(p.requester.state(), ConnState::Established);
}

fn thresholds_come_from_private_data<N: Net>(net: N) {
    let client = ConnConfigExt::with_inline(test_config(), 8192, 2048, true);
    let server = ConnConfigExt::with_inline(test_config(), 4096, 16384, false);
    let p = pair(&net, &client, &server);
    let th = p.requester.thresholds();
    // Client sends min(8192, server recv 16384); receives min(server send 4096, 2048).
    assert_eq!((th.send, th.recv), (8192, 2048));
    assert!(!th.remote_invalidate, "the server did not set R");
    let _ = <N::P as Provider>::NAME;
}

/// Builder shorthand for the tests.
trait ConnConfigExt {
    fn with_inline(self, send: u32, recv: u32, ri: bool) -> Self;
}

impl ConnConfigExt for rpcrdma::ConnConfig {
    fn with_inline(mut self, send: u32, recv: u32, ri: bool) -> Self {
        self.inline_send = send;
        self.inline_recv = recv;
        self.remote_invalidate = ri;
        self.large_buf_size = self.large_buf_size.max(send).max(recv);
        self
    }
}

per_provider!(
    null_call_round_trips,
    caller_chosen_xids_cross_the_wire,
    echo_is_exact_for_many_sizes,
    recycled_buffers_serve_call_after_call,
    outcomes_read_in_place_give_their_buffers_back,
    a_batch_of_replies_is_restocked_with_its_own_buffers,
    service_errors_become_rpc_errors,
    thresholds_come_from_private_data,
);
