//! The protocol cores driven by hand: synthetic completions in, staged work requests
//! out, no fabric at all. Checks wire formats byte by byte (headers the requester
//! sends, RDMA_ERROR the responder sends), how a requester treats RDMA_ERROR and
//! unparseable replies, the initial credit of one, and stray completions.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma::fabric::RemoteAddr;
use rpcrdma::fabric::{Completion, SendOp, WcOpcode, WcStatus};
use rpcrdma::testing::fast_reg_slots;
use rpcrdma::testing::wire::{Posted, PostedRecv, Wire};
use rpcrdma::wire::header::{encode_err_chunk, encode_err_vers, RdmaError};
use rpcrdma::wire::private_data::PrivateData;
use rpcrdma::{CallRequest, CallStatus, SubmitRefusal, TransportError};
use rpcrdma::{CallView, Padding, ReplyWriter, Service, ServiceError};
use rpcrdma::{
    CloseReason, ConnConfig, ConnEvent, ConnState, CorePools, RegBuf, RequesterCore, ResponderCore,
};
use rpcrdma::{CreditTable, GrantPolicy};
use rpcrdma_pools::HugePages;

fn pools() -> CorePools {
    crate::engine_support::hand_pools(
        ["t-recv", "t-send", "t-large"],
        [128, 128, 8],
        [0x11, 0x22, 0x33],
    )
}

fn cfg() -> ConnConfig {
    ConnConfig {
        credits: 8,
        large_buf_size: 65536,
        large_bufs: 8,
        send_bufs: 128,
        queue_len: 8,
        hugepages: HugePages::Never,
        ..ConnConfig::default()
    }
}

fn peer_pd() -> [u8; 8] {
    PrivateData::new(4096, 4096, true)
        .to_bytes()
        .expect("encodes")
}

fn requester() -> (RequesterCore, CorePools, Wire, Instant) {
    requester_with(&cfg())
}

/// A requester configured by `conf`, established with receives posted.
fn requester_with(conf: &ConnConfig) -> (RequesterCore, CorePools, Wire, Instant) {
    let (mut core, pools) = unestablished(conf);
    let now = Instant::now();
    let mut qp = Wire::new([&pools.recv, &pools.send, &pools.large]);
    core.on_established(&peer_pd(), now);
    qp.pump(&mut core, now);
    (core, pools, qp, now)
}

/// A requester configured by `conf` whose connection is not yet established, with the
/// pools it draws from.
fn unestablished(conf: &ConnConfig) -> (RequesterCore, CorePools) {
    let pools = pools();
    let mrs = fast_reg_slots(1, 40);
    let credits = Arc::new(CreditTable::new(8, false));
    let core = RequesterCore::requester(conf, &pools, &mrs, credits).expect("core");
    (core, pools)
}

fn null_call(pools: &CorePools) -> CallRequest {
    let mut m = RegBuf::from_pool(&pools.send).expect("buffer");
    let mut v = Vec::new();
    for w in [0u32, 0, 2, 7, 1, 0, 0, 0, 0, 0] {
        v.extend_from_slice(&w.to_be_bytes());
    }
    m.fill(&v).expect("fits");
    CallRequest::new(m, 256)
}

fn be(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes(b[4 * i..4 * i + 4].try_into().expect("word"))
}

#[test]
fn missing_or_foreign_private_data_means_rfc8166_defaults() {
    for peer in [&[][..], &[1, 2, 3, 4, 5, 6, 7, 8][..]] {
        let (mut core, _pools) = unestablished(&cfg());
        core.on_established(peer, Instant::now());
        let th = core.thresholds();
        assert_eq!(
            (th.send, th.recv, th.remote_invalidate),
            (1024, 1024, false)
        );
    }
    // Found after other layers' data (RFC 8797 §5.2).
    let (core, _pools, _qp, _now) = requester();
    let th = core.thresholds();
    assert_eq!((th.send, th.recv, th.remote_invalidate), (4096, 4096, true));
    let (mut core, _pools) = unestablished(&cfg());
    let mut wrapped = b"other layer".to_vec();
    wrapped.extend_from_slice(
        &PrivateData::new(2048, 8192, true)
            .to_bytes()
            .expect("encodes"),
    );
    core.on_established(&wrapped, Instant::now());
    let th = core.thresholds();
    assert_eq!((th.send, th.recv, th.remote_invalidate), (4096, 2048, true));
}

#[test]
fn requester_sends_rdma_msg_with_empty_lists_and_the_xid_in_both_headers() {
    let (mut core, pools, mut qp, now) = requester();
    assert_eq!(
        qp.recvs.len(),
        20,
        "credits + 4 receives posted up front, + 8 for reply continuation groups"
    );
    core.submit(null_call(&pools), 7, now).expect("submitted");
    qp.pump(&mut core, now);
    assert_eq!(qp.sends.len(), 1);
    let b = &qp.sends[0].bytes;
    assert_eq!(qp.sends[0].op, SendOp::Send);
    assert_eq!(
        b.len(),
        28 + 40,
        "header, then the message as a second entry"
    );
    let xid = be(b, 0);
    assert_eq!(
        [be(b, 1), be(b, 2), be(b, 3), be(b, 4), be(b, 5), be(b, 6)],
        [1, 8, 0, 0, 0, 0],
        "version 1, 8 credits asked, RDMA_MSG, three empty lists"
    );
    assert_eq!(
        be(b, 7),
        xid,
        "the engine wrote the XID into the RPC header"
    );
}

#[test]
fn rdma_error_fails_exactly_its_xid() {
    let (mut core, pools, mut qp, now) = requester();
    core.submit(null_call(&pools), 1, now).expect("submitted");
    qp.pump(&mut core, now);
    let xid1 = be(&qp.sends[0].bytes, 0);
    for wc in qp.complete_sends() {
        core.handle_completion(&wc, now);
    }
    // ERR_VERS for the first call, granting 2 credits.
    let mut err = [0u8; 64];
    let n = encode_err_vers(xid1, 2, &mut err).expect("encodes");
    let wc = qp.deliver(&err[..n]);
    core.handle_completion(&wc, now);
    let o = core.poll_outcome().expect("outcome");
    assert_eq!((o.tag, o.xid), (1, xid1));
    assert_eq!(
        o.status,
        CallStatus::Transport(TransportError::Rdma(RdmaError::Vers { low: 1, high: 1 }))
    );
    assert_eq!(
        core.credits().granted(),
        2,
        "an RDMA_ERROR still carries a grant"
    );
    // Two more calls; ERR_CHUNK for the second only.
    core.submit(null_call(&pools), 2, now).expect("submitted");
    core.submit(null_call(&pools), 3, now).expect("submitted");
    qp.pump(&mut core, now);
    assert_eq!(qp.sends.len(), 2, "the grant of 2 lets both go");
    let xid2 = be(&qp.sends[0].bytes, 0);
    let xid3 = be(&qp.sends[1].bytes, 0);
    for wc in qp.complete_sends() {
        core.handle_completion(&wc, now);
    }
    let n = encode_err_chunk(xid3, 2, &mut err).expect("encodes");
    let wc = qp.deliver(&err[..n]);
    core.handle_completion(&wc, now);
    let o = core.poll_outcome().expect("outcome");
    assert_eq!((o.tag, o.xid), (3, xid3));
    assert_eq!(
        o.status,
        CallStatus::Transport(TransportError::Rdma(RdmaError::Chunk))
    );
    assert!(core.poll_outcome().is_none(), "call 2 is still waiting");
    assert_eq!(core.active(), 1);
    let _ = xid2;
}

#[test]
fn unparseable_and_unmatched_replies_are_dropped() {
    let (mut core, pools, mut qp, now) = requester();
    core.submit(null_call(&pools), 1, now).expect("submitted");
    qp.pump(&mut core, now);
    let xid = be(&qp.sends[0].bytes, 0);
    let wc = qp.deliver(&[1, 2, 3]);
    core.handle_completion(&wc, now);
    let mut err = [0u8; 64];
    let n = encode_err_chunk(xid ^ 0x100, 1, &mut err).expect("encodes");
    let wc = qp.deliver(&err[..n]);
    core.handle_completion(&wc, now);
    let st = core.requester_stats();
    assert_eq!((st.bad_headers, st.unmatched), (1, 1));
    assert!(core.poll_outcome().is_none());
    assert_eq!(core.active(), 1);
}

#[test]
fn one_credit_until_the_first_reply() {
    let (mut core, pools, mut qp, now) = requester();
    for tag in 0..3 {
        core.submit(null_call(&pools), tag, now).expect("submitted");
    }
    qp.pump(&mut core, now);
    assert_eq!(qp.sends.len(), 1, "one call goes, two wait");
    assert_eq!(core.queued(), 2);
    let xid = be(&qp.sends[0].bytes, 0);
    for wc in qp.complete_sends() {
        core.handle_completion(&wc, now);
    }
    // A reply granting 8.
    let mut reply = Vec::new();
    for w in [xid, 1, 8, 0, 0, 0, 0, xid, 1, 0, 0, 0, 0] {
        reply.extend_from_slice(&u32::to_be_bytes(w));
    }
    let wc = qp.deliver(&reply);
    core.handle_completion(&wc, now);
    let o = core.poll_outcome().expect("outcome");
    assert_eq!(o.status, CallStatus::Success);
    qp.pump(&mut core, now);
    assert_eq!(qp.sends.len(), 2, "both waiting calls went");
    assert_eq!(core.queued(), 0);
}

#[test]
fn queued_calls_time_out_without_touching_the_wire() {
    let (mut core, pools, mut qp, now) = requester();
    core.submit(null_call(&pools), 1, now).expect("submitted");
    let req = null_call(&pools).with_timeout(Duration::from_millis(5));
    core.submit(req, 2, now).expect("submitted");
    qp.pump(&mut core, now);
    let later = now + Duration::from_millis(10);
    assert!(core.next_timeout().is_some_and(|t| t <= later));
    core.handle_timeout(later);
    let o = core.poll_outcome().expect("outcome");
    assert_eq!((o.tag, o.status), (2, CallStatus::Timeout));
    assert!(o.msg.is_some(), "the message buffer comes back");
}

#[test]
fn timed_out_call_keeps_its_credit_until_the_late_reply() {
    let (mut core, pools, mut qp, now) = requester();
    let req = null_call(&pools).with_timeout(Duration::from_millis(5));
    core.submit(req, 1, now).expect("submitted");
    qp.pump(&mut core, now);
    let xid = be(&qp.sends[0].bytes, 0);
    for wc in qp.complete_sends() {
        core.handle_completion(&wc, now);
    }
    core.handle_timeout(now + Duration::from_millis(10));
    let o = core.poll_outcome().expect("outcome");
    assert_eq!((o.tag, o.status), (1, CallStatus::Timeout));
    assert_eq!(core.credits().in_flight(), 1);
    // A second call waits: the only credit is still taken.
    core.submit(null_call(&pools), 2, now).expect("submitted");
    qp.pump(&mut core, now);
    assert!(qp.sends.is_empty());
    let mut reply = Vec::new();
    for w in [xid, 1, 4, 0, 0, 0, 0, xid, 1, 0, 0, 0, 0] {
        reply.extend_from_slice(&u32::to_be_bytes(w));
    }
    let wc = qp.deliver(&reply);
    core.handle_completion(&wc, now);
    assert!(
        core.poll_outcome().is_none(),
        "no second outcome for call 1"
    );
    assert_eq!(core.requester_stats().late_replies, 1);
    assert_eq!(core.credits().in_flight(), 0);
    qp.pump(&mut core, now);
    assert_eq!(
        qp.sends.len(),
        1,
        "call 2 goes once the late reply freed the credit"
    );
}

#[test]
fn stray_completions_are_counted_not_trusted() {
    let (mut core, _pools, _qp, now) = requester();
    let wc = Completion {
        wr_id: 0xdead_beef,
        opcode: WcOpcode::Send,
        status: WcStatus::Success,
        byte_len: 0,
        qp_num: 1,
        invalidated_rkey: None,
    };
    core.handle_completion(&wc, now);
    // A CallSend completion for a free slot.
    let wc = Completion {
        wr_id: rpcrdma::WrId::new(rpcrdma::WrKind::CallSend, 3).encode(),
        ..wc
    };
    core.handle_completion(&wc, now);
    assert_eq!(core.requester_stats().stray_completions, 2);
}

/// Answers every call with a success header.
struct Ok0;

impl Service for Ok0 {
    fn handle_call(
        &mut self,
        call: &CallView<'_>,
        w: &mut ReplyWriter<'_>,
    ) -> Result<(), ServiceError> {
        for v in [call.xid(), 1, 0, 0, 0, 0] {
            w.put_u32(v).map_err(|_| ServiceError::SystemErr)?;
        }
        Ok(())
    }
}

fn responder() -> (ResponderCore<Ok0>, Arc<GrantPolicy>, Wire, Instant) {
    let pools = pools();
    let policy = Arc::new(GrantPolicy::new(8, 8));
    let mut core = ResponderCore::responder(&cfg(), &pools, Ok0, policy.clone()).expect("core");
    let now = Instant::now();
    let mut qp = Wire::new([&pools.recv, &pools.send, &pools.large]);
    core.on_established(&peer_pd(), now);
    qp.pump(&mut core, now);
    (core, policy, qp, now)
}

/// On kernel verbs the passive side's ESTABLISHED event can come after the peer's
/// first Sends, and a receive buffer structure too long for an InfiniBand REQ comes in
/// a characteristics update sent right after establishment: an update that arrives
/// before the responder hears the connection is established must survive the
/// connect-time characteristics (the lab's rxe0 failure of send-based DDP replies).
#[test]
fn a_characteristics_update_before_established_is_kept() {
    use rpcrdma::wire::rtr::chars::{RecvBufStructure, RTRS_XCONT, RTRS_XREQ, RTRS_XRESP};
    use rpcrdma::wire::rtr::{RtrOp, RtrRepr, TransportChars};
    let pools = pools();
    let policy = Arc::new(GrantPolicy::new(8, 8));
    let mut core = ResponderCore::responder(&cfg(), &pools, Ok0, policy).expect("core");
    let now = Instant::now();
    let mut qp = Wire::new([&pools.recv, &pools.send, &pools.large]);
    let chars = TransportChars {
        rtr_support: RTRS_XREQ | RTRS_XRESP | RTRS_XCONT,
        recv_buf: Some(RecvBufStructure::single(4096)),
        req_rx_limit: 3,
        resp_sx_limit: 5,
    };
    let update = RtrRepr {
        xid: 0,
        credit: 8,
        op: RtrOp::CharsUpdate(chars),
    };
    let mut msg = vec![0u8; update.encoded_len()];
    update.encode(&mut msg).expect("fits");
    // The peer's private data: version 1 with every extension, but no structure.
    let adv = rpcrdma::wire::private_data::Advertisement::new(
        &rpcrdma::wire::private_data::PrivateData::new(4096, 4096, true),
        rpcrdma::wire::private_data::Extensions::ALL,
    )
    .expect("encodes");
    qp.pump(&mut core, now);
    let wc = qp.deliver(&msg);
    core.handle_completion(&wc, now);
    assert_eq!(core.responder_stats().chars_updates, 1);
    core.on_established(adv.as_bytes(), now);
    let c = core.peer_chars();
    assert_eq!(
        (c.recv_buf, c.req_rx_limit, c.resp_sx_limit),
        (chars.recv_buf, 3, 5),
        "the update, not the connect-time characteristics"
    );
}

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// Feeds `msg` to the responder and returns what it sent back.
fn exchange(core: &mut ResponderCore<Ok0>, qp: &mut Wire, msg: &[u8], now: Instant) -> Vec<Posted> {
    let wc = qp.deliver(msg);
    core.handle_completion(&wc, now);
    qp.pump(core, now);
    let sent = Vec::from(qp.sends.clone());
    for wc in qp.complete_sends() {
        core.handle_completion(&wc, now);
    }
    sent
}

#[test]
fn bad_version_gets_err_vers_one_to_one() {
    let (mut core, _p, mut qp, now) = responder();
    let sent = exchange(&mut core, &mut qp, &words(&[0xabcd, 2, 1, 0, 0, 0, 0]), now);
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].bytes,
        words(&[0xabcd, 1, 8, 4, 1, 1, 1]),
        "RDMA_ERROR / ERR_VERS, versions 1..=1, echoing the XID"
    );
    assert_eq!(core.responder_stats().err_vers, 1);
}

#[test]
fn malformed_headers_get_err_chunk_and_the_connection_lives_on() {
    let (mut core, _p, mut qp, now) = responder();
    let cases: [&[u32]; 4] = [
        // Unknown procedure.
        &[7, 1, 1, 9],
        // RDMA_NOMSG with no chunks.
        &[7, 1, 1, 1, 0, 0, 0],
        // RDMA_MSG whose list is cut off.
        &[7, 1, 1, 0, 1],
        // RDMA_MSG with a Position-Zero Read chunk (the message cannot be both).
        &[7, 1, 1, 0, 1, 0, 0x100, 8, 0, 0x1000, 0, 0, 0, 7, 0],
    ];
    for c in cases {
        let sent = exchange(&mut core, &mut qp, &words(c), now);
        assert_eq!(sent.len(), 1, "{c:?}");
        assert_eq!(sent[0].bytes, words(&[7, 1, 8, 4, 2]), "{c:?}");
    }
    assert_eq!(core.responder_stats().err_chunk, 4);
    // Too short to carry an XID: nothing to answer.
    let sent = exchange(&mut core, &mut qp, &[1, 2], now);
    assert!(sent.is_empty());
    assert_eq!(core.responder_stats().dropped, 1);
    // And a good call still works.
    let call = words(&[9, 1, 1, 0, 0, 0, 0, 9, 0, 2, 7, 1, 0, 0, 0, 0, 0]);
    let sent = exchange(&mut core, &mut qp, &call, now);
    assert_eq!(sent.len(), 1);
    assert_eq!(&sent[0].bytes[..28], &words(&[9, 1, 8, 0, 0, 0, 0])[..]);
    assert_eq!(&sent[0].bytes[28..], &words(&[9, 1, 0, 0, 0, 0])[..]);
}

#[test]
fn grant_follows_the_policy_and_is_never_zero() {
    let (mut core, policy, mut qp, now) = responder();
    let call = |xid| words(&[xid, 1, 1, 0, 0, 0, 0, xid, 0, 2, 7, 1, 0, 0, 0, 0, 0]);
    policy.set_target(3);
    let sent = exchange(&mut core, &mut qp, &call(1), now);
    assert_eq!(be(&sent[0].bytes, 2), 3);
    policy.set_target(0);
    let sent = exchange(&mut core, &mut qp, &call(2), now);
    assert_eq!(be(&sent[0].bytes, 2), 1, "clamped to one");
    policy.set_target(100);
    let sent = exchange(&mut core, &mut qp, &call(3), now);
    assert_eq!(be(&sent[0].bytes, 2), 8, "bounded by the receives posted");
}

#[test]
fn requester_accepts_rdma_msgp_replies_with_their_padding() {
    let (mut core, pools, mut qp, now) = requester();
    core.submit(null_call(&pools), 1, now).expect("submitted");
    qp.pump(&mut core, now);
    let xid = be(&qp.sends[0].bytes, 0);
    for wc in qp.complete_sends() {
        core.handle_completion(&wc, now);
    }
    let reply = words(&[xid, 1, 8, 2, 16, 512, 0, 0, 0, xid, 1, 0, 0, 0, 0]);
    let wc = qp.deliver(&reply);
    core.handle_completion(&wc, now);
    let o = core.poll_outcome().expect("outcome");
    assert_eq!(o.status, CallStatus::Success);
    let r = o.reply.as_ref().expect("reply");
    assert_eq!(
        r.padding(),
        Some(Padding {
            align: 16,
            thresh: 512,
            base: 36
        })
    );
    assert_eq!(r.bytes(), &words(&[xid, 1, 0, 0, 0, 0])[..]);
}

/// Records what it saw; replies with a `body`-octet RPC reply and, when asked, a DDP
/// result of `ddp` octets into the first Write chunk.
#[derive(Default)]
struct Scripted {
    ddp: usize,
    body: usize,
    padding: Option<Padding>,
    done: Vec<u32>,
    calls: u32,
}

impl Service for Scripted {
    fn handle_call(
        &mut self,
        call: &CallView<'_>,
        w: &mut ReplyWriter<'_>,
    ) -> Result<(), ServiceError> {
        self.calls += 1;
        self.padding = call.padding();
        let e = |_| ServiceError::SystemErr;
        for v in [call.xid(), 1, 0, 0, 0, 0] {
            w.put_u32(v).map_err(e)?;
        }
        if self.ddp > 0 {
            let mut b = w.alloc_buf().map_err(|_| ServiceError::SystemErr)?;
            let data: Vec<u8> = (0..self.ddp).map(|i| i as u8).collect();
            b.fill(&data).map_err(|_| ServiceError::SystemErr)?;
            w.ddp_result(b).map_err(|_| ServiceError::SystemErr)?;
        }
        w.put_zeros(self.body.saturating_sub(24)).map_err(e)
    }

    fn on_done(&mut self, xid: u32) {
        self.done.push(xid);
    }
}

fn scripted(s: Scripted) -> (ResponderCore<Scripted>, Wire, Instant) {
    let pools = pools();
    let policy = Arc::new(GrantPolicy::new(8, 8));
    let mut core = ResponderCore::responder(&cfg(), &pools, s, policy).expect("core");
    let now = Instant::now();
    let mut qp = Wire::new([&pools.recv, &pools.send, &pools.large]);
    core.on_established(&peer_pd(), now);
    qp.pump(&mut core, now);
    (core, qp, now)
}

fn run(core: &mut ResponderCore<Scripted>, qp: &mut Wire, msg: &[u8], now: Instant) -> Vec<Posted> {
    let wc = qp.deliver(msg);
    core.handle_completion(&wc, now);
    qp.pump(core, now);
    let sent = Vec::from(qp.sends.clone());
    for wc in qp.complete_sends() {
        core.handle_completion(&wc, now);
    }
    sent
}

/// A segment's wire words: handle, length, 64-bit offset.
fn seg(h: u32, len: u32, off: u32) -> [u32; 4] {
    [h, len, 0, off]
}

#[test]
fn results_are_split_over_segments_and_lists_echo_what_was_written() {
    let (mut core, mut qp, now) = scripted(Scripted {
        ddp: 250,
        body: 5000,
        ..Scripted::default()
    });
    let mut m = vec![0x77, 1, 4, 0, 0];
    // Write list: a 3-segment chunk of 300 octets, then a 2-segment chunk.
    m.extend([1, 3]);
    m.extend(seg(0x1001, 100, 0x1000));
    m.extend(seg(0x1002, 100, 0x2000));
    m.extend(seg(0x1003, 100, 0x3000));
    m.extend([1, 2]);
    m.extend(seg(0x1101, 64, 0x4000));
    m.extend(seg(0x1102, 64, 0x5000));
    m.push(0);
    // A Reply chunk of two 3000-octet segments.
    m.extend([1, 2]);
    m.extend(seg(0x2001, 3000, 0x8000));
    m.extend(seg(0x2002, 3000, 0x9000));
    m.extend([0x77, 0, 2, 7, 1, 0, 0, 0, 0, 0]);
    let sent = run(&mut core, &mut qp, &words(&m), now);
    let writes: Vec<(RemoteAddr, usize)> = sent
        .iter()
        .filter_map(|p| match p.op {
            SendOp::RdmaWrite { remote } => Some((remote, p.bytes.len())),
            _ => None,
        })
        .collect();
    let ra = |rkey, addr| RemoteAddr { addr, rkey };
    assert_eq!(
        writes,
        vec![
            (ra(0x1001, 0x1000), 100),
            (ra(0x1002, 0x2000), 100),
            (ra(0x1003, 0x3000), 50),
            (ra(0x2001, 0x8000), 3000),
            (ra(0x2002, 0x9000), 2000),
        ],
        "the 250-octet result fills segments in order; the 5000-octet body too"
    );
    assert_eq!(
        sent[0].bytes[..100],
        (0..100).map(|i| i as u8).collect::<Vec<_>>()[..]
    );
    assert_eq!(
        sent[2].bytes[..],
        (200..250).map(|i| i as u8).collect::<Vec<_>>()[..]
    );
    let reply = sent.last().expect("the Send comes last");
    assert_eq!(
        reply.op,
        SendOp::SendWithInvalidate { rkey: 0x2001 },
        "both sides allow remote invalidation: a key of this call"
    );
    let mut want = vec![0x77, 1, 8, 1, 0, 1, 3];
    want.extend(seg(0x1001, 100, 0x1000));
    want.extend(seg(0x1002, 100, 0x2000));
    want.extend(seg(0x1003, 50, 0x3000));
    // The unused chunk comes back empty; then the Reply chunk with what was written.
    want.extend([1, 0, 0, 1, 2]);
    want.extend(seg(0x2001, 3000, 0x8000));
    want.extend(seg(0x2002, 2000, 0x9000));
    assert_eq!(reply.bytes, words(&want), "RDMA_NOMSG echoing the chunks");
    assert_eq!(core.responder_stats().chunk_replies, 1);
}

#[test]
fn rdma_msgp_calls_are_served_with_their_padding() {
    let (mut core, mut qp, now) = scripted(Scripted {
        body: 24,
        ..Scripted::default()
    });
    let call = words(&[5, 1, 1, 2, 64, 1024, 0, 0, 0, 5, 0, 2, 7, 1, 0, 0, 0, 0, 0]);
    let sent = run(&mut core, &mut qp, &call, now);
    assert_eq!(sent.len(), 1);
    assert_eq!(
        core.service().padding,
        Some(Padding {
            align: 64,
            thresh: 1024,
            base: 36
        })
    );
    // An alignment that is not a power of two cannot be honoured: ERR_CHUNK.
    let call = words(&[6, 1, 1, 2, 3, 1024, 0, 0, 0, 6, 0, 2, 7, 1, 0, 0, 0, 0, 0]);
    let sent = run(&mut core, &mut qp, &call, now);
    assert_eq!(sent[0].bytes, words(&[6, 1, 8, 4, 2]));
    assert_eq!(core.service().calls, 1);
}

#[test]
fn rdma_done_is_routed_to_the_service_and_not_answered() {
    let (mut core, mut qp, now) = scripted(Scripted::default());
    let sent = run(&mut core, &mut qp, &words(&[0x99, 1, 1, 3]), now);
    assert!(sent.is_empty());
    assert_eq!(core.service().done, vec![0x99]);
    assert_eq!(core.responder_stats().done_received, 1);
}

/// Persistent registration: chunks advertise their pool's own remote key and the
/// buffer's address, only the Send is staged (no FastReg, no LocalInvalidate), remote
/// invalidation is not offered, and a Send With Invalidate the peer sends anyway is
/// counted as foreign instead of killing anything.
#[test]
fn persistent_requester_advertises_pool_keys_and_posts_only_the_send() {
    let pools = pools();
    let credits = Arc::new(CreditTable::new(8, false));
    let mut core: RequesterCore =
        RequesterCore::requester_persistent(&cfg(), &pools, credits).expect("core");
    assert_eq!(core.registration(), rpcrdma::RegMode::Persistent);
    let local = PrivateData::decode(&core.local_private_data()).expect("decodes");
    assert!(
        !local.remote_invalidate,
        "persistent keys must not be invalidated"
    );
    let now = Instant::now();
    let mut qp = Wire::new([&pools.recv, &pools.send, &pools.large]);
    core.on_established(&peer_pd(), now);
    assert!(!core.thresholds().remote_invalidate);
    qp.pump(&mut core, now);

    // A long call (message over the inline threshold) offering a Reply chunk.
    let mut m = RegBuf::from_pool(&pools.send).expect("buffer");
    let mut v = Vec::new();
    for w in [0u32, 0, 2, 7, 1, 0, 0, 0, 0, 0] {
        v.extend_from_slice(&w.to_be_bytes());
    }
    v.resize(4080, 0xab);
    m.fill(&v).expect("fits");
    let msg_addr = m.addr();
    core.submit(CallRequest::new(m, 8000), 9, now)
        .expect("submitted");
    qp.pump(&mut core, now);
    assert_eq!(qp.sends.len(), 1, "only the Send: {:?}", qp.sends);
    assert_eq!(qp.sends[0].op, SendOp::Send);
    let b = qp.sends[0].bytes.clone();
    assert_eq!(be(&b, 3), 1, "RDMA_NOMSG");
    assert_eq!((be(&b, 4), be(&b, 5)), (1, 0), "a Position-Zero Read chunk");
    assert_eq!(be(&b, 6), 0x22, "the send pool's persistent key");
    assert_eq!(be(&b, 7), 4080);
    let off = (u64::from(be(&b, 8)) << 32) | u64::from(be(&b, 9));
    assert_eq!(off, msg_addr);
    assert_eq!(
        (be(&b, 10), be(&b, 11)),
        (0, 0),
        "read list ends; no writes"
    );
    assert_eq!(
        (be(&b, 12), be(&b, 13)),
        (1, 1),
        "a one-segment Reply chunk"
    );
    assert_eq!(be(&b, 14), 0x33, "the large pool's persistent key");

    // The reply arrives inline, with an invalidation the requester never allowed.
    let xid = be(&b, 0);
    let mut reply = Vec::new();
    for w in [xid, 1, 8, 0, 0, 0, 0, xid, 1, 0, 0, 0, 0, 0] {
        reply.extend_from_slice(&w.to_be_bytes());
    }
    for wc in qp.complete_sends() {
        core.handle_completion(&wc, now);
    }
    let mut wc = qp.deliver(&reply);
    wc.invalidated_rkey = Some(0x33);
    core.handle_completion(&wc, now);
    let o = core.poll_outcome().expect("outcome");
    assert_eq!(o.status, CallStatus::Success);
    assert!(o.msg.is_some(), "buffers come back with the reply");
    let st = core.requester_stats();
    assert_eq!(
        (
            st.local_invalidations,
            st.remote_invalidations,
            st.foreign_invalidations,
            st.quarantined
        ),
        (0, 0, 1, 0)
    );
    qp.pump(&mut core, now);
    assert!(qp.sends.is_empty(), "no LocalInvalidate follows");
}

/// With persistent keys nothing revokes the responder's access, so a reply claiming
/// Write chunk results for no outstanding call (the responder wrote into memory another
/// call may own by now) ends the connection; with per-RPC keys it is only counted.
#[test]
fn stray_chunk_reply_ends_a_persistent_connection() {
    for persistent in [false, true] {
        let pools = pools();
        let credits = Arc::new(CreditTable::new(8, false));
        let mut core: RequesterCore = if persistent {
            RequesterCore::requester_persistent(&cfg(), &pools, credits).expect("core")
        } else {
            let mrs = fast_reg_slots(1, 40);
            RequesterCore::requester(&cfg(), &pools, &mrs, credits).expect("core")
        };
        let now = Instant::now();
        let mut qp = Wire::new([&pools.recv, &pools.send, &pools.large]);
        core.on_established(&peer_pd(), now);
        qp.pump(&mut core, now);
        while core.poll_event().is_some() {}
        // RDMA_MSG, XID of no call, one Write chunk of one segment, then the RPC reply.
        let xid: u32 = 0xdead_beef;
        let mut reply = Vec::new();
        for w in [xid, 1, 8, 0, 0, 1, 1, 0x33, 16, 0, 0x1000, 0, 0] {
            reply.extend_from_slice(&w.to_be_bytes());
        }
        for w in [xid, 1, 0, 0, 0, 0] {
            reply.extend_from_slice(&w.to_be_bytes());
        }
        let wc = qp.deliver(&reply);
        core.handle_completion(&wc, now);
        let st = core.requester_stats();
        assert_eq!((st.unmatched, st.stray_chunk_replies), (1, 1));
        let ev = core.poll_event();
        if persistent {
            assert!(
                matches!(
                    ev,
                    Some(ConnEvent::DisconnectRequested(
                        CloseReason::ProtocolViolation(_)
                    ))
                ),
                "{ev:?}"
            );
            assert_ne!(core.state(), ConnState::Established);
        } else {
            assert_eq!(ev, None);
            assert_eq!(core.state(), ConnState::Established);
        }
    }
}

/// A refused post leaves the queue pair untouched, so the engine itself must ask for the
/// disconnect that flushes what is posted; the call then gets exactly one outcome.
#[test]
fn refused_post_disconnects_and_the_call_gets_its_outcome() {
    let (mut core, pools, mut qp, now) = requester();
    while core.poll_event().is_some() {}
    core.submit(null_call(&pools), 7, now).expect("submitted");
    qp.refuse_sends = true;
    qp.pump(&mut core, now);
    assert_eq!(
        core.poll_event(),
        Some(ConnEvent::DisconnectRequested(CloseReason::PostRefused))
    );
    assert_ne!(core.state(), ConnState::Established);
    // The disconnect the connection layer carries out flushes the posted receives.
    core.on_disconnected();
    for PostedRecv { wr_id, .. } in qp.recvs.drain(..) {
        let wc = Completion {
            wr_id,
            opcode: WcOpcode::Recv,
            status: WcStatus::WrFlushed,
            byte_len: 0,
            qp_num: 1,
            invalidated_rkey: None,
        };
        core.handle_completion(&wc, now);
    }
    core.prepare(now);
    let o = core.poll_outcome().expect("the refused call's outcome");
    assert_eq!(o.tag, 7);
    assert!(
        matches!(o.status, CallStatus::Transport(_)),
        "{:?}",
        o.status
    );
    assert!(core.poll_outcome().is_none(), "exactly one outcome");
    assert_eq!(core.state(), ConnState::Closed);
}

/// The requester holds itself to `ConnConfig::max_chunks` (as a responder with the same
/// setting does with ERR_CHUNK): with two allowed, a third DDP argument or a third write
/// sink is refused at submit, nothing is posted and the request comes back whole; two
/// of each go out.
#[test]
fn requester_refuses_more_chunks_than_max_chunks() {
    let (mut core, pools, mut qp, now) = requester_with(&ConnConfig {
        max_chunks: 2,
        ..cfg()
    });

    let with_chunks = |args: usize, sinks: usize| {
        let mut req = null_call(&pools);
        for i in 0..args {
            let mut d = RegBuf::from_pool(&pools.send).expect("buffer");
            d.fill(&[i as u8; 8]).expect("fits");
            // Each argument sits at the message's end, after the ones before it.
            req.push_ddp_arg((40 + 8 * i) as u32, d).expect("room");
        }
        for _ in 0..sinks {
            let s = RegBuf::from_pool(&pools.large).expect("sink");
            req.push_write_sink(s).expect("room");
        }
        req
    };
    for (args, sinks) in [(3, 0), (0, 3), (3, 3)] {
        let e = core
            .submit(with_chunks(args, sinks), 1, now)
            .expect_err("over max_chunks");
        assert_eq!(e.reason, SubmitRefusal::TooManyChunks, "{args}/{sinks}");
        assert_eq!(e.request.ddp_args.len(), args);
        assert_eq!(e.request.write_sinks.len(), sinks);
        assert_eq!(e.request.msg.len(), 40);
        assert_eq!(
            e.request.ddp_args.get(2).map(|a| a.position),
            (args == 3).then_some(56)
        );
    }
    qp.pump(&mut core, now);
    assert!(
        qp.sends.is_empty(),
        "nothing refused went out: {:?}",
        qp.sends
    );
    assert_eq!(core.requester_stats().calls_sent, 0);

    core.submit(with_chunks(2, 2), 2, now)
        .expect("two of each are allowed");
    qp.pump(&mut core, now);
    assert_eq!(core.requester_stats().calls_sent, 1);
    let send = qp
        .sends
        .iter()
        .find(|p| p.op == SendOp::Send)
        .expect("the call's Send");
    let b = &send.bytes;
    assert_eq!(be(b, 3), 0, "RDMA_MSG");
    assert_eq!(be(b, 4), 1, "a Read list follows");
}

/// An RDMA_MSG reply to `xid` granting `credits`: a successful, empty RPC reply.
fn ok_reply(xid: u32, credits: u32) -> Vec<u8> {
    let mut reply = Vec::new();
    for w in [xid, 1, credits, 0, 0, 0, 0, xid, 1, 0, 0, 0, 0] {
        reply.extend_from_slice(&u32::to_be_bytes(w));
    }
    reply
}

#[test]
fn caller_chosen_xids_are_sent_matched_and_never_shared() {
    let (mut core, pools, mut qp, now) = requester();
    let own = 0xABCD_0001;
    core.submit(null_call(&pools).with_xid(own), 1, now)
        .expect("submitted");
    qp.pump(&mut core, now);
    let b = qp.sends[0].bytes.clone();
    assert_eq!(
        (be(&b, 0), be(&b, 7)),
        (own, own),
        "the caller's XID in both headers"
    );
    // While it is in flight, the same XID is refused at once.
    let e = core
        .submit(null_call(&pools).with_xid(own), 9, now)
        .expect_err("duplicate");
    assert_eq!(e.reason, SubmitRefusal::DuplicateXid);
    for wc in qp.complete_sends() {
        core.handle_completion(&wc, now);
    }
    let wc = qp.deliver(&ok_reply(own, 8));
    core.handle_completion(&wc, now);
    let o = core.poll_outcome().expect("outcome");
    assert_eq!((o.tag, o.xid, o.status), (1, own, CallStatus::Success));
    drop(o);

    // Caller-chosen and engine-assigned XIDs side by side, answered out of order. The
    // chosen ones are picked so their low bits name the slots the engine would use.
    let (x, y) = (0x0000_0001, 0x7777_0000);
    core.submit(null_call(&pools).with_xid(x), 2, now)
        .expect("submitted");
    core.submit(null_call(&pools), 3, now).expect("submitted");
    core.submit(null_call(&pools).with_xid(y), 4, now)
        .expect("submitted");
    qp.pump(&mut core, now);
    assert_eq!(qp.sends.len(), 3);
    let engine_xid = be(&qp.sends[1].bytes, 0);
    assert!(engine_xid != x && engine_xid != y);
    assert_eq!(
        (be(&qp.sends[0].bytes, 0), be(&qp.sends[2].bytes, 0)),
        (x, y)
    );
    for wc in qp.complete_sends() {
        core.handle_completion(&wc, now);
    }
    for (xid, tag) in [(y, 4), (engine_xid, 3), (x, 2)] {
        let wc = qp.deliver(&ok_reply(xid, 8));
        core.handle_completion(&wc, now);
        let o = core.poll_outcome().expect("outcome");
        assert_eq!(
            (o.tag, o.xid, o.status),
            (tag, xid, CallStatus::Success),
            "the reply to {xid:#x} finds its own call"
        );
    }
    assert_eq!(core.requester_stats().unmatched, 0);
    // A reply to an XID no call carries any more is dropped.
    let wc = qp.deliver(&ok_reply(x, 8));
    core.handle_completion(&wc, now);
    assert!(core.poll_outcome().is_none());
    assert_eq!(core.requester_stats().unmatched, 1);
    // Once answered, an XID may be used again.
    core.submit(null_call(&pools).with_xid(x), 5, now)
        .expect("an answered XID is free again");
}

/// An NFS client retransmits under its XID (for the server's duplicate request cache)
/// as soon as it has the first outcome; with selective signaling the first call's Send
/// may not have completed yet. The XID is free once the reply matched, and the second
/// reply finds the second call.
#[test]
fn an_answered_xid_is_free_before_its_send_completes() {
    let (mut core, pools, mut qp, now) = requester();
    let own = 0x0d0c_0001;
    core.submit(null_call(&pools).with_xid(own), 1, now)
        .expect("submitted");
    qp.pump(&mut core, now);
    // The reply comes before the Send's completion is reaped.
    let wc = qp.deliver(&ok_reply(own, 8));
    core.handle_completion(&wc, now);
    let o = core.poll_outcome().expect("outcome");
    assert_eq!((o.tag, o.xid, o.status), (1, own, CallStatus::Success));
    drop(o);
    core.submit(null_call(&pools).with_xid(own), 2, now)
        .expect("an answered XID is free again, its Send still outstanding");
    qp.pump(&mut core, now);
    for wc in qp.complete_sends() {
        core.handle_completion(&wc, now);
    }
    let wc = qp.deliver(&ok_reply(own, 8));
    core.handle_completion(&wc, now);
    let o = core.poll_outcome().expect("second outcome");
    assert_eq!((o.tag, o.xid, o.status), (2, own, CallStatus::Success));
    drop(o);
    // A third reply to that XID names no call.
    let wc = qp.deliver(&ok_reply(own, 8));
    core.handle_completion(&wc, now);
    assert!(core.poll_outcome().is_none());
    assert_eq!(core.requester_stats().unmatched, 1);
}

#[test]
fn a_queued_call_whose_xid_was_taken_meanwhile_is_refused_alone() {
    let (mut core, pools, mut qp, now) = requester();
    // One credit until the first reply: the first call goes, the next two wait.
    core.submit(null_call(&pools), 1, now).expect("submitted");
    let own = 0x1234_5678;
    core.submit(null_call(&pools).with_xid(own), 2, now)
        .expect("queued");
    core.submit(null_call(&pools).with_xid(own), 3, now)
        .expect("queued: no call in flight carries it yet");
    qp.pump(&mut core, now);
    assert_eq!(qp.sends.len(), 1);
    let first = be(&qp.sends[0].bytes, 0);
    for wc in qp.complete_sends() {
        core.handle_completion(&wc, now);
    }
    let wc = qp.deliver(&ok_reply(first, 8));
    core.handle_completion(&wc, now);
    let o = core.poll_outcome().expect("first outcome");
    assert_eq!((o.tag, o.status), (1, CallStatus::Success));
    drop(o);
    // Waiting calls start when the driver prepares the next batch.
    core.prepare(now);
    let o = core.poll_outcome().expect("the refused duplicate");
    assert_eq!(
        (o.tag, o.xid, o.status),
        (3, own, CallStatus::Refused(SubmitRefusal::DuplicateXid))
    );
    assert!(o.msg.is_some(), "its message buffer comes back");
    qp.pump(&mut core, now);
    assert_eq!(qp.sends.len(), 1, "the first call with that XID went");
    assert_eq!(be(&qp.sends[0].bytes, 0), own);
}

/// Carries every Send `from` posted into `to`'s receives (feeding `to_core` the receive
/// completions), completes everything `from` posted, and returns how many Sends crossed.
fn carry<A: rpcrdma::Transmitter, B: rpcrdma::Transmitter>(
    from: &mut Wire,
    from_core: &mut A,
    to: &mut Wire,
    to_core: &mut B,
    now: Instant,
    feed_a: impl Fn(&mut A, &Completion),
    feed_b: impl Fn(&mut B, &Completion),
) -> usize {
    let mut crossed = 0;
    let posted: Vec<Posted> = from.sends.drain(..).collect();
    for p in &posted {
        if matches!(p.op, SendOp::Send | SendOp::SendWithInvalidate { .. }) {
            let wc = to.deliver(&p.bytes);
            feed_b(to_core, &wc);
            crossed += 1;
        }
        let done = rpcrdma::testing::wire::completion_of(p, WcStatus::Success);
        feed_a(from_core, &done);
    }
    from.pump(from_core, now);
    to.pump(to_core, now);
    crossed
}

/// RFC 8167 in the core: two connections playing both roles call each other at the same
/// time over one connection each way. Every received message reaches the half it is for
/// (calls to the responder half, replies to the requester half), both calls succeed with
/// their own XIDs, and nothing is counted as stray, unmatched or dropped.
#[test]
fn a_two_role_connection_serves_and_calls_on_one_transport() {
    let now = Instant::now();
    let make = |key: u32| {
        let pools = pools();
        let mrs = fast_reg_slots(1 + key, 40);
        let credits = Arc::new(CreditTable::new(8, false));
        let policy = Arc::new(GrantPolicy::new(8, 8));
        let mut core =
            rpcrdma::BidiCore::both_roles(&cfg(), &pools, Some(&mrs), credits, Ok0, policy)
                .expect("two-role core");
        let mut wire = Wire::new([&pools.recv, &pools.send, &pools.large]);
        core.on_established(&peer_pd(), now);
        wire.pump(&mut core, now);
        (core, pools, wire)
    };
    let (mut a, apools, mut wa) = make(0);
    let (mut b, bpools, mut wb) = make(100);
    a.submit(null_call(&apools).with_xid(0xA1), 1, now)
        .expect("a calls b");
    b.submit(null_call(&bpools).with_xid(0xB1), 2, now)
        .expect("b calls a");
    wa.pump(&mut a, now);
    wb.pump(&mut b, now);
    let feed = |c: &mut rpcrdma::BidiCore<Ok0>, wc: &Completion| c.handle_completion(wc, now);
    let (mut oa, mut ob) = (None, None);
    for _ in 0..8 {
        carry(&mut wa, &mut a, &mut wb, &mut b, now, feed, feed);
        carry(&mut wb, &mut b, &mut wa, &mut a, now, feed, feed);
        oa = oa.or_else(|| a.poll_outcome());
        ob = ob.or_else(|| b.poll_outcome());
    }
    let (oa, ob) = (
        oa.expect("a's call answered"),
        ob.expect("b's call answered"),
    );
    assert_eq!((oa.tag, oa.xid, oa.status), (1, 0xA1, CallStatus::Success));
    assert_eq!((ob.tag, ob.xid, ob.status), (2, 0xB1, CallStatus::Success));
    for c in [&a, &b] {
        let (rq, rs) = (c.requester_stats(), c.responder_stats());
        assert_eq!((rq.calls_sent, rq.outcomes), (1, 1));
        assert_eq!(rs.calls, 1, "exactly the peer's call reached the service");
        assert_eq!(
            (rq.unmatched, rq.bad_headers, rq.stray_completions),
            (0, 0, 0)
        );
        assert_eq!(
            (rs.dropped, rs.err_chunk, rs.err_vers, rs.overruns),
            (0, 0, 0, 0)
        );
        assert_eq!(c.active(), 0);
        assert_eq!(c.state(), ConnState::Established);
    }
    drop((oa, ob));
    // Both halves shut down with the connection: the flushes come back and it closes.
    for (c, w) in [(&mut a, &mut wa), (&mut b, &mut wb)] {
        c.on_disconnected();
        for wc in w.flush() {
            c.handle_completion(&wc, now);
        }
        w.pump(c, now);
        assert_eq!(c.state(), ConnState::Closed);
    }
}

// ---- responder-provided Read chunks, requester side, by hand ---------------------------

mod read_chunk_replies {
    use super::*;
    use rpcrdma::wire::header::{BodyRepr, ChunkListsRepr, HeaderRepr, ReadSegment, Segment};
    use rpcrdma::wire::private_data::{Advertisement, Extensions};
    use rpcrdma::BadReply;

    /// A requester established with a peer that offered `ext`.
    fn requester_ext(ext: Extensions) -> (RequesterCore, CorePools, Wire, Instant) {
        let (mut core, pools) = unestablished(&cfg());
        let now = Instant::now();
        let mut qp = Wire::new([&pools.recv, &pools.send, &pools.large]);
        let adv = Advertisement::new(&PrivateData::new(4096, 4096, true), ext).expect("encodes");
        core.on_established(adv.as_bytes(), now);
        qp.pump(&mut core, now);
        (core, pools, qp, now)
    }

    /// Sends a NULL call (no Reply chunk offered) and returns its XID.
    fn one_call(core: &mut RequesterCore, pools: &CorePools, qp: &mut Wire, now: Instant) -> u32 {
        core.submit(null_call(pools), 1, now).expect("submitted");
        qp.pump(core, now);
        let xid = be(&qp.sends[0].bytes, 0);
        for wc in qp.complete_sends() {
            core.handle_completion(&wc, now);
        }
        xid
    }

    /// RDMA_NOMSG whose Position-Zero Read chunk is `segs`.
    fn nomsg_reply(xid: u32, segs: &[Segment]) -> Vec<u8> {
        let reads: Vec<ReadSegment> = segs
            .iter()
            .map(|&segment| ReadSegment {
                position: 0,
                segment,
            })
            .collect();
        let repr = HeaderRepr {
            xid,
            credit: 8,
            body: BodyRepr::Nomsg(ChunkListsRepr {
                reads: &reads,
                writes: &[],
                reply: None,
            }),
        };
        let mut out = vec![0u8; 512];
        let n = repr.encode(&mut out).expect("encodes");
        out.truncate(n);
        out
    }

    /// Three segments are pulled with three RDMA Reads into one contiguous buffer, the
    /// reply is delivered from it, and RDMA_DONE follows as Send With Invalidate naming
    /// the chunk's first key. The call's credit came back with the reply.
    #[test]
    fn a_three_segment_chunk_is_pulled_delivered_and_done() {
        let (mut core, pools, mut qp, now) = requester_ext(Extensions::ALL);
        assert!(core.extensions().reply_read_chunks);
        let xid = one_call(&mut core, &pools, &mut qp, now);
        // The reply: accepted SUCCESS and 3000 octets of results.
        let mut msg = Vec::new();
        for w in [xid, 1, 0, 0, 0, 0] {
            msg.extend_from_slice(&w.to_be_bytes());
        }
        msg.extend((0..3000u32).map(|i| (i * 7) as u8));
        let lens = [1000u32, 1000, msg.len() as u32 - 2000];
        let segs: Vec<Segment> = lens
            .iter()
            .enumerate()
            .map(|(k, &l)| {
                Segment::new(0x100 * (k as u32 + 1), l, 0x7000_0000 + 0x10000 * k as u64)
            })
            .collect();
        let wc = qp.deliver(&nomsg_reply(xid, &segs));
        core.handle_completion(&wc, now);
        assert_eq!(core.credits().in_flight(), 0, "the credit came back");
        assert!(core.poll_outcome().is_none(), "not before the pull");
        qp.pump(&mut core, now);
        assert_eq!(qp.sends.len(), 3, "one Read per segment");
        let mut off = 0usize;
        let mut next_addr = None;
        for (p, seg) in qp.sends.iter().zip(&segs) {
            match p.op {
                SendOp::RdmaRead { remote } => {
                    assert_eq!((remote.rkey, remote.addr), (seg.handle, seg.offset));
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(p.sgl.len(), 1);
            assert_eq!(p.sgl[0].length, seg.length);
            if let Some(a) = next_addr {
                assert_eq!(p.sgl[0].addr, a, "contiguous in one buffer");
            }
            next_addr = Some(p.sgl[0].addr + u64::from(seg.length));
            // The responder's octets land where the Read scatters them.
            qp.write(p.sgl[0].addr, &msg[off..off + seg.length as usize])
                .expect("inside a pool");
            off += seg.length as usize;
        }
        for wc in qp.complete_sends() {
            core.handle_completion(&wc, now);
        }
        let o = core.poll_outcome().expect("delivered after the pull");
        assert_eq!(o.status, CallStatus::Success);
        assert_eq!(o.reply.as_ref().expect("reply").bytes(), &msg[..]);
        qp.pump(&mut core, now);
        assert_eq!(qp.sends.len(), 1, "RDMA_DONE");
        let done = &qp.sends[0];
        assert!(
            matches!(done.op, SendOp::SendWithInvalidate { rkey: 0x100 }),
            "{:?}",
            done.op
        );
        assert_eq!(done.bytes.len(), 16);
        assert_eq!(
            [be(&done.bytes, 0), be(&done.bytes, 1), be(&done.bytes, 3)],
            [xid, 1, 3]
        );
        assert!(qp.faults.is_empty(), "{:?}", qp.faults);
        let s = core.requester_stats();
        assert_eq!((s.read_chunk_replies, s.dones_sent), (1, 1));
        for wc in qp.complete_sends() {
            core.handle_completion(&wc, now);
        }
        assert_eq!(core.requester_stats().stray_completions, 0);
    }

    /// A Read chunk reply for no call in flight still gets its DONE (draft §4.1.3).
    #[test]
    fn an_unknown_xid_gets_done_too() {
        let (mut core, _pools, mut qp, now) = requester_ext(Extensions::ALL);
        let seg = Segment::new(0x4242, 5000, 0x9000_0000);
        let wc = qp.deliver(&nomsg_reply(0x1234_5678, &[seg]));
        core.handle_completion(&wc, now);
        qp.pump(&mut core, now);
        assert_eq!(qp.sends.len(), 1);
        assert!(matches!(
            qp.sends[0].op,
            SendOp::SendWithInvalidate { rkey: 0x4242 }
        ));
        assert_eq!(be(&qp.sends[0].bytes, 0), 0x1234_5678);
        assert_eq!(core.requester_stats().dones_for_unknown_xids, 1);
    }

    /// Without the extension negotiated the call fails (`BadReply::ReadChunks`), nothing
    /// is read, and DONE still goes out so the responder can let go (draft §4.1.3).
    #[test]
    fn without_the_extension_the_call_fails_and_done_goes_out() {
        let (mut core, pools, mut qp, now) = requester_ext(Extensions::NONE);
        assert!(!core.extensions().reply_read_chunks);
        let xid = one_call(&mut core, &pools, &mut qp, now);
        let seg = Segment::new(0x4242, 5000, 0x9000_0000);
        let wc = qp.deliver(&nomsg_reply(xid, &[seg]));
        core.handle_completion(&wc, now);
        let o = core.poll_outcome().expect("outcome");
        assert_eq!(
            o.status,
            CallStatus::Transport(TransportError::BadReply(BadReply::ReadChunks))
        );
        qp.pump(&mut core, now);
        assert_eq!(qp.sends.len(), 1, "only the DONE, no Read");
        assert!(matches!(
            qp.sends[0].op,
            SendOp::SendWithInvalidate { rkey: 0x4242 }
        ));
    }
}

mod read_chunk_replies_two_roles {
    use super::*;
    use rpcrdma::wire::private_data::{Advertisement, Extensions};

    /// Answers every call with 20000 octets of results: too large for inline.
    struct Big;

    impl Service for Big {
        fn handle_call(
            &mut self,
            call: &CallView<'_>,
            w: &mut ReplyWriter<'_>,
        ) -> Result<(), ServiceError> {
            for v in [call.xid(), 1, 0, 0, 0, 0] {
                w.put_u32(v).map_err(|_| ServiceError::SystemErr)?;
            }
            w.put(&[0x5a; 20_000]).map_err(|_| ServiceError::SystemErr)
        }
    }

    /// Carries what `from` posted: Sends into `to`'s receives, RDMA Reads from `to`'s
    /// memory into `from`'s; completes everything `from` posted.
    fn carry(
        from: &mut Wire,
        a: &mut BidiCore<Big>,
        to: &mut Wire,
        b: &mut BidiCore<Big>,
        now: Instant,
    ) {
        let posted: Vec<Posted> = from.sends.drain(..).collect();
        for p in &posted {
            match p.op {
                SendOp::Send => {
                    let wc = to.deliver(&p.bytes);
                    b.handle_completion(&wc, now);
                }
                SendOp::SendWithInvalidate { rkey } => {
                    let wc = to
                        .deliver_invalidating(&p.bytes, Some(rkey))
                        .expect("a posted receive");
                    b.handle_completion(&wc, now);
                }
                SendOp::RdmaRead { remote } => {
                    let mut data = vec![0u8; p.sgl[0].length as usize];
                    to.read(remote.addr, &mut data)
                        .expect("inside the peer's pools");
                    from.write(p.sgl[0].addr, &data).expect("inside our pools");
                }
                _ => {}
            }
            let done = rpcrdma::testing::wire::completion_of(p, WcStatus::Success);
            a.handle_completion(&done, now);
        }
        from.pump(a, now);
        to.pump(b, now);
    }

    use rpcrdma::BidiCore;

    /// RFC 8167 with responder-provided Read chunks on both sides: A's call gets a reply
    /// in B's Read chunk (RDMA_NOMSG + Position-Zero Read chunk, like a long call), which
    /// A's demux routes to its requester half because the XID is a call of A's awaiting
    /// its reply; B's long call (the same shape) reaches A's responder half. Both pull,
    /// both send RDMA_DONE, which the other's responder half takes, and everything
    /// exposed is freed.
    #[test]
    fn reply_read_chunks_and_long_calls_are_told_apart_on_two_role_connections() {
        let now = Instant::now();
        // Read-chunk replies without continuation: B's long call then goes in a
        // Position-Zero Read chunk, the shape this test tells apart from a reply.
        let read_chunks_only = Extensions {
            continuation: false,
            ..Extensions::ALL
        };
        let adv = Advertisement::new(&PrivateData::new(4096, 4096, true), read_chunks_only)
            .expect("encodes");
        let make = |key: u32| {
            let pools = pools();
            let mrs = fast_reg_slots(1 + key, 40);
            let credits = Arc::new(CreditTable::new(8, false));
            let policy = Arc::new(GrantPolicy::new(8, 8));
            let mut core = BidiCore::both_roles(&cfg(), &pools, Some(&mrs), credits, Big, policy)
                .expect("two-role core");
            core.set_reply_mrs(&fast_reg_slots(200 + key, 8), u64::from(key));
            let mut wire = Wire::new([&pools.recv, &pools.send, &pools.large]);
            core.on_established(adv.as_bytes(), now);
            wire.pump(&mut core, now);
            (core, pools, wire)
        };
        let (mut a, apools, mut wa) = make(0);
        let (mut b, bpools, mut wb) = make(100);
        assert!(a.extensions().reply_read_chunks && b.extensions().reply_read_chunks);
        a.submit(null_call(&apools).with_xid(0xA1), 1, now)
            .expect("a calls b");
        // B's call is too long for inline: RDMA_NOMSG with a Position-Zero Read chunk.
        let mut long = RegBuf::from_pool(&bpools.large).expect("buffer");
        let mut v = Vec::new();
        for w in [0u32, 0, 2, 7, 1, 0, 0, 0, 0, 0] {
            v.extend_from_slice(&w.to_be_bytes());
        }
        v.resize(6000, 0x11);
        long.fill(&v).expect("fits");
        b.submit(CallRequest::new(long, 256).with_xid(0xB1), 2, now)
            .expect("b calls a");
        wa.pump(&mut a, now);
        wb.pump(&mut b, now);
        let (mut oa, mut ob) = (None, None);
        for _ in 0..12 {
            carry(&mut wa, &mut a, &mut wb, &mut b, now);
            carry(&mut wb, &mut b, &mut wa, &mut a, now);
            oa = oa.or_else(|| a.poll_outcome());
            ob = ob.or_else(|| b.poll_outcome());
        }
        let (oa, ob) = (
            oa.expect("a's call answered"),
            ob.expect("b's call answered"),
        );
        for (o, tag, xid) in [(&oa, 1, 0xA1), (&ob, 2, 0xB1)] {
            assert_eq!((o.tag, o.xid, o.status), (tag, xid, CallStatus::Success));
            let bytes = o.reply.as_ref().expect("reply").bytes();
            assert_eq!(bytes.len(), 24 + 20_000);
            assert!(bytes[24..].iter().all(|&x| x == 0x5a));
        }
        for c in [&a, &b] {
            let (rq, rs) = (c.requester_stats(), c.responder_stats());
            assert_eq!((rq.read_chunk_replies, rq.dones_sent), (1, 1));
            assert_eq!(rs.calls, 1, "exactly the peer's call reached the service");
            assert_eq!(
                (rs.read_chunk_replies, rs.done_received, rs.exposed),
                (1, 1, 0)
            );
            assert_eq!(
                (rq.unmatched, rq.bad_headers, rq.stray_completions),
                (0, 0, 0)
            );
            assert_eq!(
                (rs.dropped, rs.err_chunk, rs.done_unknown, rs.overruns),
                (0, 0, 0, 0)
            );
            assert_eq!(c.active(), 0);
        }
        assert_eq!(b.responder_stats().long_calls, 0);
        assert_eq!(
            a.responder_stats().long_calls,
            1,
            "B's long call reached A's service"
        );
        assert!(wa.faults.is_empty() && wb.faults.is_empty());
    }
}
