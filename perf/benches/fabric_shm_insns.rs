//! Instruction count of one 32-byte shm Send/Recv round trip, for callgrind.
//!
//! One thread drives both endpoints alternately (post a Send on one side, poll the other
//! side's CQ until its receive completes, repost the receive, answer), so the count is
//! the provider's software cost alone: stable under load, unlike wall-clock numbers on
//! a shared machine. Every wait is bounded by a poll count, never by time, so the
//! measured code is deterministic. Signals one Send in 16, like `fabric_shm`.
//!
//! ```text
//! cargo bench -p rpcrdma-perf --bench fabric_shm_insns --no-run   # prints the binary
//! valgrind --tool=callgrind --toggle-collect='*measured_round_trips*' \
//!     --callgrind-out-file=/tmp/shm.cg target/release/deps/fabric_shm_insns-<hash>
//! callgrind_annotate /tmp/shm.cg | head -30    # total Ir / ROUNDS = instructions per RTT
//! ```
//!
//! Without valgrind it just runs and prints ns per round trip as a sanity check.
//!
//! Instructions per round trip (two hops, each: post_send, the peer's CQ poll that
//! executes it and retires its own earlier sends, post_recv; the loop's own code
//! included), by entry point:
//!
//! | version                          | total | CQ poll | post_send | post_recv | memcpy |
//! |----------------------------------|-------|---------|-----------|-----------|--------|
//! | before (ack ring, 75dbd7a)       | 2557  | 1338    | 566       | 176       | 336    |
//! | coalesced acks                   | 2452  |         |           |           |        |
//! | FastForward slots, in place      | 2124  |         |           |           |        |
//! | inline small Sends               | 2064  |         |           |           |        |
//! | receive entries in place, epoch  | 1829  |         |           |           |        |
//! | run arrays, lazy acks, cold paths| 1632  | 842     | 530       | 65        | 44     |
//! | placement fast path, copy_small  | 1487  | 752     | 518       | 65        | 0      |
//!
//! The rest is this loop (about 150). Top self costs after: post_send 15%, the
//! executor's Send path 10%, the CQ loop 9%, the completer 5%, key-table lookups
//! (four per round trip) about 10% spread over both.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma::fabric::shm::{ShmAddr, ShmCm, ShmCq, ShmDevice, ShmMr, ShmPd, ShmProvider, ShmQp};
use rpcrdma::fabric::{
    Access, CmEvent, Completion, CompletionQueue, ConnectionManager, Device, MemoryRegion,
    ProtectionDomain, QpCaps, QpConfig, QpInit, QueuePair, RecvWr, SendFlags, SendWr, Sge,
    WcOpcode, WcStatus,
};
use rpcrdma_pools::{Arena, ArenaOptions, HugePages};

/// Round trips inside the measured function.
const ROUNDS: u64 = 10_000;
/// Request/response pairs inside the depth-32 region (`measured_req_resp`).
const RATE_OPS: u64 = 20_000;
/// Requests in flight in that region: the `rpcrdma-perf rate --depth 32` row's.
const RATE_DEPTH: usize = 32;
/// Receives the request/response server keeps posted and sends either side may have
/// queued: `rpcrdma-perf`'s `queue_depth` for a rate row (twice the depth, plus one).
const RATE_QUEUE: usize = 2 * RATE_DEPTH + 1;
/// Octets of each request and answer there: the RPC rate row's ECHO payload.
const RATE_MSG: usize = 64;
/// Round trips before it (first-touch page faults, lazy mappings).
const WARMUP: u64 = 1_000;
/// Polls a hop may take before the run is declared broken (one poll suffices).
const MAX_POLLS: u32 = 1_000;
const MSG: usize = 32;
const ARENA: usize = 1 << 20;
const SETUP_LIMIT: Duration = Duration::from_secs(5);

struct End {
    qp: ShmQp,
    cq: ShmCq,
    mr: ShmMr,
    arena: Arc<Arena>,
    _cm: ShmCm,
    _pd: ShmPd,
    _dev: ShmDevice,
    buf: [Completion; 32],
}

impl End {
    fn sge(&self, off: usize, len: usize) -> Sge {
        Sge::new(
            self.arena.base() as u64 + off as u64,
            len as u32,
            self.mr.lkey(),
        )
    }
}

fn config() -> QpConfig {
    QpConfig {
        caps: QpCaps {
            max_send_wr: 256,
            max_recv_wr: 256,
            max_send_sge: 1,
            max_recv_sge: 1,
        },
        ..QpConfig::default()
    }
}

type Half = (ShmDevice, ShmPd, ShmCq, ShmCm, Arc<Arena>, ShmMr);

fn half() -> Half {
    let dev = ShmDevice::new();
    let pd = dev.alloc_pd().expect("pd");
    let cq = dev.create_cq(1024).expect("cq");
    let cm = dev.create_cm().expect("cm");
    let opts = ArenaOptions::new(ARENA)
        .shareable(true)
        .hugepages(HugePages::Never);
    let arena = Arc::new(Arena::new(&opts).expect("shareable arena"));
    let mr = pd.reg_arena(&arena, Access::ALL).expect("register");
    (dev, pd, cq, cm, arena, mr)
}

fn connected_pair(tag: &str) -> (End, End) {
    let addr = ShmAddr::abstract_name(format!("rpcrdma-insns-{tag}-{}", std::process::id()));
    let mut s = half();
    let mut c = half();
    s.3.listen(&addr).expect("listen");
    let init = QpInit::<ShmProvider> {
        pd: &c.1,
        send_cq: &c.2,
        recv_cq: &c.2,
        srq: None,
        config: config(),
    };
    let cqp = c.3.connect(&addr, init, b"").expect("connect");
    let end = Instant::now() + SETUP_LIMIT;
    let mut sqp = None;
    let (mut s_up, mut c_up) = (false, false);
    while !(s_up && c_up) {
        assert!(Instant::now() < end, "connection setup timed out");
        match s.3.poll_event().expect("server cm") {
            Some(CmEvent::ConnectRequest { request, .. }) => {
                let init = QpInit::<ShmProvider> {
                    pd: &s.1,
                    send_cq: &s.2,
                    recv_cq: &s.2,
                    srq: None,
                    config: config(),
                };
                sqp = Some(s.3.accept(request, init, b"").expect("accept"));
            }
            Some(CmEvent::Established { .. }) => s_up = true,
            Some(e) => panic!("server: unexpected {e:?}"),
            None => {}
        }
        match c.3.poll_event().expect("client cm") {
            Some(CmEvent::Established { .. }) => c_up = true,
            Some(e) => panic!("client: unexpected {e:?}"),
            None => {}
        }
    }
    let mk = |h: Half, qp: ShmQp| End {
        qp,
        cq: h.2,
        mr: h.5,
        arena: h.4,
        _cm: h.3,
        _pd: h.1,
        _dev: h.0,
        buf: [Completion::EMPTY; 32],
    };
    (mk(c, cqp), mk(s, sqp.expect("server queue pair")))
}

fn flags(i: u64, signal_all: bool) -> SendFlags {
    if signal_all || i % 16 == 15 {
        SendFlags::SIGNALED
    } else {
        SendFlags::NONE
    }
}

/// One message from `from` to `to`: false if anything failed or never arrived. With
/// `signal_all` every Send is signaled and the sender reaps its completion before the
/// hop ends, as the engine's default configuration does (the like-for-like baseline).
#[inline(always)]
fn hop(from: &mut End, to: &mut End, i: u64, signal_all: bool) -> bool {
    let sb = [from.sge(4096, MSG)];
    let rb = [to.sge(0, MSG)];
    if from
        .qp
        .post_send(&[SendWr::send(i, &sb).with_flags(flags(i, signal_all))])
        .is_err()
    {
        return false;
    }
    let mut polls = 0;
    let mut reaped = false;
    loop {
        let n = to.cq.poll(&mut to.buf);
        let mut got = false;
        for c in &to.buf[..n] {
            if c.status != WcStatus::Success {
                return false;
            }
            got |= c.opcode == WcOpcode::Recv;
        }
        if got {
            break;
        }
        // The sender's poll retires its send queue.
        let n = from.cq.poll(&mut from.buf);
        reaped |= from.buf[..n].iter().any(|c| c.opcode == WcOpcode::Send);
        polls += 1;
        if polls == MAX_POLLS {
            return false;
        }
    }
    if signal_all && !reaped && !reap_send(from) {
        return false;
    }
    to.qp.post_recv(&[RecvWr { wr_id: i, sgl: &rb }]).is_ok()
}

/// Polls `from`'s CQ until its signaled Send's completion comes (the executor already
/// acknowledged it, so the first poll normally has it).
#[inline(always)]
fn reap_send(from: &mut End) -> bool {
    for _ in 0..MAX_POLLS {
        let n = from.cq.poll(&mut from.buf);
        for c in &from.buf[..n] {
            if c.status != WcStatus::Success {
                return false;
            }
            if c.opcode == WcOpcode::Send {
                return true;
            }
        }
    }
    false
}

/// The region callgrind counts (`--toggle-collect='*measured_round_trips*'`).
#[inline(never)]
fn measured_round_trips(a: &mut End, b: &mut End, first: u64, n: u64) -> bool {
    for i in first..first + n {
        if !hop(a, b, i, false) || !hop(b, a, i, false) {
            return false;
        }
    }
    true
}

/// The like-for-like region (`--toggle-collect='*measured_signaled*'`): every Send
/// signaled and its completion reaped, as the engine does unless
/// `ConnConfig::signal_every` is set.
#[inline(never)]
fn measured_signaled(a: &mut End, b: &mut End, first: u64, n: u64) -> bool {
    for i in first..first + n {
        if !hop(a, b, i, true) || !hop(b, a, i, true) {
            return false;
        }
    }
    true
}

/// The request/response state of the depth-32 region, carried from the warm-up into the
/// measured region so that the region runs in steady state (32 requests in flight
/// when it starts and when it ends).
struct ReqResp {
    /// Requests sent and not yet answered (the client's view).
    awaiting: usize,
    /// Sends not yet completed, client and server.
    client_sends: usize,
    server_sends: usize,
    /// Answers the server owes (requests received while its send queue was full).
    owed: usize,
}

/// One turn of the request/response loop `rpcrdma-perf rate --baseline` runs as its
/// `fabric req/resp` row, both ends in this thread: the client tops its requests up to
/// `RATE_DEPTH` (one signaled Send posted per request, as the row does), the server
/// polls its CQ (reposting each receive, answering each request with a signaled Send of
/// the same size), the client polls its CQ (reposting each receive; an answer ends an
/// operation). Returns the answers the client received, or None on any failure.
#[inline(always)]
fn req_resp_turn(c: &mut End, s: &mut End, st: &mut ReqResp, refill: bool) -> Option<u64> {
    let send = [c.sge(8192, RATE_MSG)];
    while refill && st.awaiting < RATE_DEPTH && st.client_sends < RATE_QUEUE {
        c.qp.post_send(&[SendWr::send(0, &send)]).ok()?;
        st.awaiting += 1;
        st.client_sends += 1;
    }
    let n = s.cq.poll(&mut s.buf);
    for w in &s.buf[..n] {
        if w.status != WcStatus::Success {
            return None;
        }
        if w.opcode == WcOpcode::Recv {
            let slot = w.wr_id as usize;
            let rb = [s.sge(slot * RATE_MSG, RATE_MSG)];
            s.qp.post_recv(&[RecvWr {
                wr_id: w.wr_id,
                sgl: &rb,
            }])
            .ok()?;
            st.owed += 1;
        } else {
            st.server_sends -= 1;
        }
    }
    let reply = [s.sge(8192, RATE_MSG)];
    while st.owed > 0 && st.server_sends < RATE_QUEUE {
        s.qp.post_send(&[SendWr::send(0, &reply)]).ok()?;
        st.server_sends += 1;
        st.owed -= 1;
    }
    let n = c.cq.poll(&mut c.buf);
    let mut answers = 0;
    for w in &c.buf[..n] {
        if w.status != WcStatus::Success {
            return None;
        }
        if w.opcode == WcOpcode::Recv {
            let slot = w.wr_id as usize;
            let rb = [c.sge(slot * RATE_MSG, RATE_MSG)];
            c.qp.post_recv(&[RecvWr {
                wr_id: w.wr_id,
                sgl: &rb,
            }])
            .ok()?;
            st.awaiting = st.awaiting.checked_sub(1)?;
            answers += 1;
        } else {
            st.client_sends -= 1;
        }
    }
    Some(answers)
}

/// Runs request/response turns until `n` answers came (refilling to the depth while
/// `refill`); false on a failure or `MAX_POLLS` turns in a row without an answer.
#[inline(always)]
fn req_resp_until(c: &mut End, s: &mut End, st: &mut ReqResp, n: u64, refill: bool) -> bool {
    let (mut done, mut idle) = (0, 0);
    while done < n {
        let Some(got) = req_resp_turn(c, s, st, refill) else {
            return false;
        };
        done += got;
        idle = if got == 0 { idle + 1 } else { 0 };
        if idle == MAX_POLLS {
            return false;
        }
    }
    true
}

/// The depth-32 request/response region (`--toggle-collect='*measured_req_resp*'`):
/// `n` answers with `RATE_DEPTH` requests in flight throughout (the warm-up left them
/// in flight; the region ends with as many).
#[inline(never)]
fn measured_req_resp(c: &mut End, s: &mut End, st: &mut ReqResp, n: u64) -> bool {
    req_resp_until(c, s, st, n, true)
}

/// A fresh connected pair for the request/response region, its receives posted as the
/// `rpcrdma-perf` row posts them: `RATE_QUEUE` on the server, `RATE_DEPTH` on the
/// client, one buffer per slot.
fn req_resp_pair() -> (End, End) {
    let (mut c, mut s) = connected_pair("req-resp");
    for (e, slots) in [(&mut c, RATE_DEPTH), (&mut s, RATE_QUEUE)] {
        for slot in 0..slots {
            let rb = [e.sge(slot * RATE_MSG, RATE_MSG)];
            e.qp.post_recv(&[RecvWr {
                wr_id: slot as u64,
                sgl: &rb,
            }])
            .expect("recv");
        }
    }
    (c, s)
}

/// Warm-up of the request/response region through a separate copy of the loop; leaves
/// `RATE_DEPTH` requests in flight.
#[inline(never)]
fn warm_up_req_resp(c: &mut End, s: &mut End, st: &mut ReqResp) -> bool {
    req_resp_until(c, s, st, WARMUP, true)
}

fn main() {
    let (mut a, mut b) = connected_pair("round-trip");
    for e in [&mut a, &mut b] {
        let rb = [e.sge(0, MSG)];
        for _ in 0..64 {
            e.qp.post_recv(&[RecvWr { wr_id: 0, sgl: &rb }])
                .expect("recv");
        }
    }
    assert!(warm_up(&mut a, &mut b), "warm-up round trips failed");
    let start = Instant::now();
    let ok = measured_round_trips(black_box(&mut a), black_box(&mut b), WARMUP, ROUNDS);
    let ns = start.elapsed().as_nanos() as f64 / ROUNDS as f64;
    assert!(ok, "measured round trips failed");
    let ok = measured_signaled(
        black_box(&mut a),
        black_box(&mut b),
        WARMUP + ROUNDS,
        ROUNDS,
    );
    assert!(ok, "measured signaled round trips failed");
    drop((a, b));
    let (mut c, mut s) = req_resp_pair();
    let mut st = ReqResp {
        awaiting: 0,
        client_sends: 0,
        server_sends: 0,
        owed: 0,
    };
    assert!(
        warm_up_req_resp(&mut c, &mut s, &mut st),
        "warm-up request/response failed"
    );
    let start = Instant::now();
    let ok = measured_req_resp(black_box(&mut c), black_box(&mut s), &mut st, RATE_OPS);
    let rr_ns = start.elapsed().as_nanos() as f64 / RATE_OPS as f64;
    assert!(ok, "measured request/response failed");
    // The requests still in flight are answered before the pair goes.
    let left = st.awaiting as u64;
    assert!(
        req_resp_until(&mut c, &mut s, &mut st, left, false),
        "draining request/response failed"
    );
    println!(
        "fabric_shm_insns: {ROUNDS} round trips, {ns:.0} ns each; {RATE_OPS} \
         request/response at depth {RATE_DEPTH}, {rr_ns:.0} ns each (one thread)"
    );
}

/// Warm-up through a separate copy of the loop, so callgrind's toggle sees only the
/// measured call.
#[inline(never)]
fn warm_up(a: &mut End, b: &mut End) -> bool {
    (0..WARMUP).all(|i| hop(a, b, i, false) && hop(b, a, i, false))
        && (0..WARMUP).all(|i| hop(a, b, i, true) && hop(b, a, i, true))
}
