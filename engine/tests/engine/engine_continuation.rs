//! End to end over shm, sim and siw: message continuation
//! (draft-dnoveck-rpcrdma-rtrext §4). With 4 KiB inline thresholds, a 20 KB ECHO goes as
//! a group of Sends each way when both peers offer extensions (no RDMA Read, no Reply
//! chunk), and as before (Position-Zero Read chunk, Reply chunk) when either does not;
//! the peers' characteristics are exchanged at connection start.

use crate::engine_support;

use engine_support::*;
use rpcrdma::fabric::Provider;
use rpcrdma::wire::private_data::CONTINUATION_GROUP_MAX;
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
    assert_eq!(call(p, CallRequest::new(m, 256)).status, CallStatus::Success);
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
    assert_eq!(chars.req_rx_limit, CONTINUATION_GROUP_MAX);
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
        assert_eq!(after.long_calls - before.long_calls, 1, "Position-Zero Read chunk");
        assert_eq!(r.long_calls - rbefore.long_calls, 1, "the responder read it");
        assert_eq!(after.reply_chunks - before.reply_chunks, 1);
        assert_eq!(r.chunk_replies - rbefore.chunk_replies, 1);
        assert_eq!(r.optional_messages, 0);
    }
}

per_provider!(both_enabled_goes_by_continuation, either_disabled_goes_as_before);
