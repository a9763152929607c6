//! The responder's service API as an embedder uses it, end to end over shm with the
//! Dispatcher as the engine's `Service`: zero-copy DDP results, calls dropped without a
//! reply, keepalive probes to the ULP program's NULL, and the shared chunk limit.

use std::time::Duration;

use rpcrdma::fabric::shm::{ShmAddr, ShmDevice, ShmProvider};
use rpcrdma::limits::DEFAULT_MAX_CHUNKS;
use rpcrdma::limits::MAX_DDP_ARGS;
use rpcrdma::wire::header::RdmaError;
use rpcrdma::Pair;
use rpcrdma::{CallRequest, CallStatus, Outcome, TransportError};
use rpcrdma::{ConnConfig, ConnEvent, RegBuf};
use rpcrdma_pools::HugePages;
use rpcrdma_ulp::binding::{with_keepalive, ProcInfo};
use rpcrdma_ulp::builtin::{
    echo_proc, is_source_pattern, Echo2, EchoProgram, ECHO_PROGRAM, ECHO_VERSION,
};
use rpcrdma_ulp::client::{CallPlan, DdpBufs};
use rpcrdma_ulp::ddp::{encode_call, DdpCursor, DdpEncoder};
use rpcrdma_ulp::program::{Dispatched, Dispatcher, InboundCall, ProcError, Program};
use rpcrdma_ulp::rpc::CallHeader;

use crate::support;
use support::header;

const DEADLINE: Duration = Duration::from_secs(10);

/// A program whose procedure 1 is always "in progress" in its duplicate-request cache:
/// it drops the call without a reply.
const DRC_PROGRAM: u32 = 0x2f00_00d0;

struct DrcProgram;

static DROPPED: ProcInfo = ProcInfo {
    procedure: 1,
    name: "IN_PROGRESS",
    ddp_args: &[],
    ddp_results: &[],
    reply: rpcrdma_ulp::binding::ReplySize::fixed(0),
    short_reply_retry: false,
    idempotent: false,
    reply_usually_small: false,
};

impl Program for DrcProgram {
    fn prog(&self) -> u32 {
        DRC_PROGRAM
    }
    fn versions(&self) -> (u32, u32) {
        (1, 1)
    }
    fn proc_info(&self, _vers: u32, procedure: u32) -> Option<&'static ProcInfo> {
        (procedure == 1).then_some(&DROPPED)
    }
    fn call<'d>(
        &'d mut self,
        _call: &CallHeader<'d>,
        _args: &mut DdpCursor<'d>,
        _results: &mut DdpEncoder<'_, 'd>,
    ) -> Result<(), ProcError> {
        Err(ProcError::NoReply)
    }
}

fn addr() -> ShmAddr {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    ShmAddr::abstract_name(format!("rpcrdma-ulp-api-{}-{n}", std::process::id()))
}

fn config() -> ConnConfig {
    ConnConfig {
        credits: 4,
        large_buf_size: 64 * 1024,
        large_bufs: 16,
        send_bufs: 32,
        queue_len: 16,
        hugepages: HugePages::Never,
        ..ConnConfig::default()
    }
}

fn pair(client: &ConnConfig, server: &ConnConfig) -> Pair<ShmProvider, Dispatcher> {
    let mut d = Dispatcher::new();
    d.register(Box::new(EchoProgram::with_source_max(60_000)))
        .expect("register echo");
    d.register(Box::new(DrcProgram)).expect("register drc");
    Pair::connect(
        &ShmDevice::new(),
        ShmDevice::new(),
        &addr(),
        client,
        server,
        d,
        DEADLINE,
    )
    .expect("pair connects")
}

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed))
        .collect()
}

fn large_with(p: &Pair<ShmProvider, Dispatcher>, data: &[u8]) -> RegBuf {
    let mut b = p.requester.alloc_large().expect("large buffer");
    b.fill(data).expect("fits");
    b
}

fn max_reply(procedure: u32, requested: usize) -> u32 {
    let info = EchoProgram::info(procedure).expect("declared");
    info.max_reply_len(requested as u32, true, 0) as u32
}

/// ECHO2 with both payloads in Read chunks and a Write chunk for each result.
fn echo2(p: &Pair<ShmProvider, Dispatcher>, a: &[u8], b: &[u8]) -> CallRequest {
    let mut bufs = DdpBufs::new();
    bufs.push(large_with(p, a)).expect("room");
    bufs.push(large_with(p, b)).expect("room");
    let h = header(ECHO_PROGRAM, echo_proc::ECHO2);
    let mut msg = p.requester.alloc_msg().expect("send buffer");
    let args = Echo2 {
        a: bufs.get(0).expect("a").as_slice(),
        tag: 7,
        b: bufs.get(1).expect("b").as_slice(),
    };
    let plan = CallPlan::new(
        &encode_call(msg.storage_mut(), &h, &args, 1).expect("encodes"),
        &bufs,
    )
    .expect("plan");
    let mut req = plan
        .into_request(msg, bufs, max_reply(echo_proc::ECHO2, a.len() + b.len()))
        .expect("request");
    for _ in 0..2 {
        req.push_write_sink(p.requester.alloc_large().expect("sink"))
            .expect("room");
    }
    req
}

fn call(p: &mut Pair<ShmProvider, Dispatcher>, req: CallRequest) -> Outcome {
    p.call(req, DEADLINE).expect("outcome before the deadline")
}

fn null(p: &mut Pair<ShmProvider, Dispatcher>, prog: u32) -> Outcome {
    let mut msg = p.requester.alloc_msg().expect("send buffer");
    let n = header(prog, 0).encode(msg.storage_mut()).expect("encodes");
    msg.set_len(n).expect("fits");
    call(p, CallRequest::new(msg, 64))
}

/// ECHO's results are slices of its pulled Read chunks: the engine writes them from
/// there (ReplyWriter::ddp_result_from_call) instead of copying each into a fresh
/// buffer, which the old Dispatcher always did.
#[test]
fn echo_results_go_out_from_the_read_chunks_without_a_copy() {
    let mut p = pair(&config(), &config());
    let (a, b) = (data(5001, 1), data(77, 2));
    let req = echo2(&p, &a, &b);
    let o = call(&mut p, req);
    assert_eq!(o.status, CallStatus::Success);
    assert_eq!(o.write_result(0), Some(&a[..]));
    assert_eq!(o.write_result(1), Some(&b[..]));
    let s = p.responder().expect("responder").stats();
    assert_eq!(s.ddp_results, 2);
    assert_eq!(s.ddp_zero_copy, 2, "both results written in place");

    // SOURCE's result is the program's own memory, which it copied once into a
    // registered buffer of the connection (Program::attach_registered, on the first call
    // offering a Write chunk): written from there too, call after call.
    for calls in [3, 4] {
        let req = source(&p, 3000);
        let o = call(&mut p, req);
        assert_eq!(o.status, CallStatus::Success);
        let result = o.write_result(0).expect("SOURCE result in the Write chunk");
        assert_eq!(result.len(), 3000);
        assert!(is_source_pattern(result), "SOURCE returned its pattern");
        let s = p.responder().expect("responder").stats();
        assert_eq!((s.ddp_results, s.ddp_zero_copy), (calls, calls));
    }
}

/// SOURCE of `len` octets with one Write chunk of a large buffer.
fn source(p: &Pair<ShmProvider, Dispatcher>, len: u32) -> CallRequest {
    let mut msg = p.requester.alloc_msg().expect("send buffer");
    let h = header(ECHO_PROGRAM, echo_proc::SOURCE);
    let n = h.encode(msg.storage_mut()).expect("encodes");
    msg.storage_mut()[n..n + 4].copy_from_slice(&len.to_be_bytes());
    msg.set_len(n + 4).expect("fits");
    let mut req = CallRequest::new(msg, max_reply(echo_proc::SOURCE, len as usize));
    req.push_write_sink(p.requester.alloc_large().expect("sink"))
        .expect("room");
    req
}

/// Where SOURCE's result lies: in the registered buffer the program was given
/// (Program::attach_registered), which the dispatcher lists for zero-copy Writes; or,
/// when none could be had, in the program's heap pattern, which the service copies.
#[test]
fn source_results_lie_in_registered_memory_when_the_program_got_some() {
    let pool = rpcrdma_pools::Pool::new(
        &rpcrdma_pools::PoolConfig::new("source-test", 8192, 2).hugepages(HugePages::Never),
    )
    .expect("pool");
    let mut msg = [0u8; 64];
    let n = header(ECHO_PROGRAM, echo_proc::SOURCE)
        .encode(&mut msg)
        .expect("encodes");
    msg[n..n + 4].copy_from_slice(&3000u32.to_be_bytes());
    let chunks = [8192u64];
    let call = InboundCall {
        msg: &msg[..n + 4],
        reads: &[],
        write_chunks: &chunks,
        padding: None,
    };
    for given in [true, false] {
        let mut d = Dispatcher::new();
        d.register(Box::new(EchoProgram::with_source_max(60_000)))
            .expect("register echo");
        let mut taken = 0;
        d.attach_registered(&mut || {
            taken += 1;
            if given {
                RegBuf::from_pool(&pool)
            } else {
                Err(rpcrdma::RegBufError::Exhausted)
            }
        });
        assert!(d.is_attached());
        assert_eq!(taken, 1, "one buffer asked for");
        let mut reply = [0u8; 256];
        let Ok(Dispatched::Reply(r)) = d.dispatch(&call, &mut reply) else {
            panic!("SOURCE answered");
        };
        let item = r.write_chunks.as_slice()[0];
        assert!(is_source_pattern(item.data) && item.data.len() == 3000);
        // The pool's arena holds both buffers: a result there is the registered copy.
        let base = pool.arena().base() as usize;
        let at = item.data.as_ptr() as usize;
        let in_pool = at >= base && at < base + pool.arena().len();
        assert_eq!(
            in_pool, given,
            "result from the registered copy iff given one"
        );
    }
}

/// A program that drops a call: no reply goes out, the responder counts it and frees
/// the call's context at once, and the connection keeps serving with an unchanged
/// grant. The requester times the call out and, as documented, keeps its credit.
#[test]
fn a_dropped_call_gets_no_reply_and_the_grant_is_unchanged() {
    let mut p = pair(&config(), &config());
    let o = null(&mut p, ECHO_PROGRAM);
    assert_eq!(o.status, CallStatus::Success);
    let granted = p.requester.credits().granted();
    assert_eq!(granted, 4);

    let mut msg = p.requester.alloc_msg().expect("send buffer");
    let n = header(DRC_PROGRAM, 1)
        .encode(msg.storage_mut())
        .expect("encodes");
    msg.set_len(n).expect("fits");
    let req = CallRequest::new(msg, 64).with_timeout(Duration::from_millis(200));
    let o = call(&mut p, req);
    assert_eq!(o.status, CallStatus::Timeout);
    assert!(o.reply.is_none());

    let r = p.responder().expect("responder");
    let s = r.stats();
    assert_eq!(s.no_reply, 1);
    assert_eq!(s.calls, 2);
    assert_eq!((s.inline_replies, s.dropped, s.service_errors), (1, 0, 0));
    assert_eq!(r.active(), 0, "the dropped call's context is free");
    assert_eq!(r.service().stats().no_reply, 1);

    // Later calls are answered with the same grant: the dropped call's receive was
    // reposted when it arrived.
    let o = null(&mut p, ECHO_PROGRAM);
    assert_eq!(o.status, CallStatus::Success);
    assert_eq!(p.requester.credits().granted(), granted);
    // The requester's credit for the dropped call stays spent (no reply returns it).
    assert_eq!(p.requester.credits().in_flight(), 1);
}

fn probe(p: &mut Pair<ShmProvider, Dispatcher>) {
    p.requester.health_check().expect("probe starts");
    let mut answered = false;
    let done = p.run_until(DEADLINE, |p| {
        while let Some(ev) = p.requester.poll_event() {
            answered |= matches!(ev, ConnEvent::ProbeAnswered(_));
        }
        answered
    });
    assert!(done, "probe answered before the deadline");
}

/// The keepalive probe is a NULL call to the ULP's own program, as the Linux client
/// sends it: SUCCESS, where the engine's default private program gets PROG_UNAVAIL.
#[test]
fn keepalive_probes_the_ulp_programs_null() {
    let client = with_keepalive(
        config(),
        ECHO_PROGRAM,
        ECHO_VERSION,
        Duration::from_secs(3600),
    );
    assert_eq!(client.probe_program, (ECHO_PROGRAM, ECHO_VERSION));
    let mut p = pair(&client, &config());
    probe(&mut p);
    let s = p.responder().expect("responder").service().stats();
    assert_eq!((s.nulls, s.prog_unavail), (1, 0));

    // The engine's default names a program nobody serves: liveness, plus a
    // PROG_UNAVAIL the server counts.
    let mut p = pair(&config(), &config());
    probe(&mut p);
    let s = p.responder().expect("responder").service().stats();
    assert_eq!((s.nulls, s.prog_unavail), (0, 1));
}

/// One chunk limit with one default on both sides; a responder configured lower
/// answers a call past it with ERR_CHUNK (the old responder took up to eight).
#[test]
fn responder_refuses_calls_past_its_chunk_limit() {
    assert_eq!(ConnConfig::default().max_chunks, DEFAULT_MAX_CHUNKS);
    assert_eq!(DEFAULT_MAX_CHUNKS as usize, MAX_DDP_ARGS);

    let strict = ConnConfig {
        max_chunks: 1,
        ..config()
    };
    let mut p = pair(&config(), &strict);
    let (a, b) = (data(3000, 3), data(2000, 4));
    let req = echo2(&p, &a, &b);
    let o = call(&mut p, req);
    assert_eq!(
        o.status,
        CallStatus::Transport(TransportError::Rdma(RdmaError::Chunk))
    );
    assert_eq!(p.responder().expect("responder").stats().err_chunk, 1);
    // A call within the limit still works.
    let o = null(&mut p, ECHO_PROGRAM);
    assert_eq!(o.status, CallStatus::Success);

    // At the limit: two DDP arguments and two Write chunks are fine.
    let two = ConnConfig {
        max_chunks: 2,
        ..config()
    };
    let mut p = pair(&config(), &two);
    let req = echo2(&p, &a, &b);
    let o = call(&mut p, req);
    assert_eq!(o.status, CallStatus::Success);
    assert_eq!(o.write_result(1), Some(&b[..]));
}
