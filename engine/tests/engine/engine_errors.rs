//! End to end over shm, sim and siw: RDMA_ERROR both ways, and Send With Invalidate on and
//! off. Raw headers are injected on the requester's queue pair, bypassing its core.

use crate::engine_support;

use engine_support::*;
use rpcrdma::fabric::{QueuePair, SendWr};
use rpcrdma::wire::header::RdmaError;
use rpcrdma::{CallRequest, CallStatus, TransportError};
use rpcrdma::{ConnState, RegMode};

fn reply_that_fits_nothing_gets_err_chunk<N: Net>(net: N) {
    // Without responder-provided Read chunks (`engine_read_chunk_replies` has them).
    let cfg = rpcrdma::ConnConfig {
        extensions: false,
        ..test_config()
    };
    let mut p = pair(&net, &cfg, &cfg);
    // No Reply chunk offered (small maximum), a reply larger than the inline threshold.
    let req = CallRequest::new(msg(&p, PROC_BIG, &6000u32.to_be_bytes()), 100);
    let o = call(&mut p, req);
    assert_eq!(
        o.status,
        CallStatus::Transport(TransportError::Rdma(RdmaError::Chunk))
    );
    assert!(o.reply.is_none());
    // A Reply chunk too small for the actual reply: ERR_CHUNK too, nothing written.
    let req = CallRequest::new(msg(&p, PROC_BIG, &9000u32.to_be_bytes()), 5000);
    let o = call(&mut p, req);
    assert_eq!(
        o.status,
        CallStatus::Transport(TransportError::Rdma(RdmaError::Chunk))
    );
    let r = p.responder().expect("responder").stats();
    assert_eq!((r.err_chunk, r.chunk_replies), (2, 0));
    // Only those calls failed.
    let req = CallRequest::new(msg(&p, PROC_BIG, &9000u32.to_be_bytes()), 9100);
    let o = call(&mut p, req);
    assert_eq!(o.status, CallStatus::Success);
    assert_eq!(results(&o), &opaque(&pattern(9000, 7))[..]);
}

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

fn injected_bad_headers_get_rdma_errors<N: Net>(net: N) {
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    let bad: [Vec<u8>; 4] = [
        words(&[0x51, 2, 1, 0, 0, 0, 0]),        // version 2: ERR_VERS
        words(&[0x52, 1, 1, 9]),                 // unknown procedure: ERR_CHUNK
        words(&[0x53, 1, 1, 1, 0, 0, 0]),        // RDMA_NOMSG without chunks: ERR_CHUNK
        words(&[0x54, 1, 1, 0, 1, 0, 0x100, 8]), // truncated Read list: ERR_CHUNK
    ];
    for (i, b) in bad.iter().enumerate() {
        let mut buf = p.requester.alloc_msg().expect("buffer");
        buf.fill(b).expect("fits");
        let sge = buf.sge(0, b.len()).expect("registered");
        // wr_id 0 names no kind: the requester counts its completion as stray.
        p.requester
            .qp_mut()
            .post_send(&[SendWr::send(0, &[sge])])
            .expect("posted");
        let want = i as u64 + 1;
        let done = p.run_until(DEADLINE, |p| p.requester.stats().unmatched >= want);
        assert!(done, "the RDMA_ERROR for injection {i} came back");
        drop(buf);
    }
    let r = p.responder().expect("responder").stats();
    assert_eq!((r.err_vers, r.err_chunk), (1, 3));
    // Neither side dropped the connection.
    let req = CallRequest::new(msg(&p, PROC_NULL, &[]), 256);
    assert_eq!(call(&mut p, req).status, CallStatus::Success);
    assert_eq!(p.requester.state(), ConnState::Established);
}

/// A call with a write sink and a Reply chunk: three registrations, of which a Send
/// With Invalidate kills one.
fn chunky_call<P: rpcrdma::fabric::Provider>(p: &mut rpcrdma::Pair<P, TestService>) {
    let data = pattern(3000, 1);
    let mut req = CallRequest::new(msg(p, PROC_ECHO_DDP, &(3000u32).to_be_bytes()), 20_000);
    req.push_ddp_arg((CALL_HDR + 4) as u32, large_with(p, &data))
        .expect("room");
    req.push_write_sink(p.requester.alloc_large().expect("sink"))
        .expect("room");
    let o = call(p, req);
    assert_eq!(o.status, CallStatus::Success);
    assert_eq!(o.write_result(0), Some(&data[..]));
}

/// Persistent keys must never be invalidated: the requester advertises no remote
/// invalidation, so the responder answers with plain Sends, and nothing is invalidated
/// locally either.
fn persistent_mode_never_invalidates<P: rpcrdma::fabric::Provider>(
    p: &mut rpcrdma::Pair<P, TestService>,
) {
    assert!(!p.requester.thresholds().remote_invalidate);
    chunky_call(p);
    let st = p.requester.stats();
    assert_eq!(
        (
            st.remote_invalidations,
            st.local_invalidations,
            st.foreign_invalidations
        ),
        (0, 0, 0)
    );
    assert_eq!(
        p.responder()
            .expect("responder")
            .stats()
            .remote_invalidations,
        0
    );
}

fn send_with_invalidate_when_both_allow<N: Net>(net: N) {
    let cfg = test_config();
    let mut p = pair(&net, &cfg, &cfg);
    if p.requester.registration() == RegMode::Persistent {
        persistent_mode_never_invalidates(&mut p);
        return;
    }
    assert!(p.requester.thresholds().remote_invalidate);
    chunky_call(&mut p);
    let st = p.requester.stats();
    assert_eq!(st.remote_invalidations, 1, "the reply invalidated one key");
    assert_eq!(
        st.local_invalidations, 2,
        "the other two were invalidated locally"
    );
    assert_eq!(st.foreign_invalidations, 0, "the key belonged to the call");
    assert_eq!(
        p.responder()
            .expect("responder")
            .stats()
            .remote_invalidations,
        1
    );
}

fn plain_send_when_either_side_refuses<N: Net>(net: N) {
    for (client_ri, server_ri) in [(false, true), (true, false)] {
        let mut client = test_config();
        client.remote_invalidate = client_ri;
        let mut server = test_config();
        server.remote_invalidate = server_ri;
        let mut p = pair(&net, &client, &server);
        if p.requester.registration() == RegMode::Persistent {
            persistent_mode_never_invalidates(&mut p);
            continue;
        }
        assert!(!p.requester.thresholds().remote_invalidate);
        chunky_call(&mut p);
        let st = p.requester.stats();
        assert_eq!((st.remote_invalidations, st.local_invalidations), (0, 3));
        assert_eq!(
            p.responder()
                .expect("responder")
                .stats()
                .remote_invalidations,
            0
        );
    }
}

per_provider!(
    reply_that_fits_nothing_gets_err_chunk,
    injected_bad_headers_get_rdma_errors,
    send_with_invalidate_when_both_allow,
    plain_send_when_either_side_refuses,
);
