//! End to end: the Dispatcher serving the built-in programs as the engine's `Service`,
//! over the shm, sim and siw providers, with calls built through `client::CallPlan` from the
//! same codecs and ProcInfo bounds. Covers NULL, inline ECHO, Read chunks at one and two
//! positions (odd lengths), Write chunks, a Reply chunk, and the RPC and transport errors
//! the ULP produces.

use std::time::Duration;

use rpcrdma::fabric::shm::{ShmAddr, ShmDevice, ShmProvider};
use rpcrdma::fabric::sim::{Sim, SimAddr, SimConfig, SimNet};
use rpcrdma::fabric::siw::{SiwDevice, SiwProvider};
use rpcrdma::fabric::Provider;
use rpcrdma::wire::ccp::{ConfigRdmaReply, ConfigRdmaReq};
use rpcrdma::wire::header::RdmaError;
use rpcrdma::Pair;
use rpcrdma::{CallRequest, CallStatus, Outcome, RpcReplyError, TransportError};
use rpcrdma::{ConnConfig, RegBuf};
use rpcrdma_pools::HugePages;
use rpcrdma_ulp::builtin::CcpProgram;
use rpcrdma_ulp::builtin::{
    echo_proc, is_source_pattern, Echo2, EchoData, EchoProgram, NullProgram, SinkRes, SourceArgs,
    ECHO_PROGRAM, NULL_PROGRAM,
};
use rpcrdma_ulp::client::{inline_call, BuildError, CallPlan, DdpBufs, OutcomeResults};
use rpcrdma_ulp::ddp::{encode_call, ReplyError, XdrCodec};
use rpcrdma_ulp::program::Dispatcher;
use rpcrdma_ulp::rpc::{AcceptStatus, CallHeader, OpaqueAuth};

use crate::support;
use support::header;

const DEADLINE: Duration = Duration::from_secs(10);

/// What the test server's CCP program answers: a 2 KiB inline call limit (below the
/// 4 KiB negotiated through private data) and 64-octet receive-buffer alignment.
const SERVER_CCP: ConfigRdmaReply = ConfigRdmaReply {
    maxcall_sendsize: 2048,
    align: 64,
    maxrdmaread: 8,
};

trait Net {
    type P: Provider;
    fn device(&self) -> <Self::P as Provider>::Device;
    fn addr(&self) -> <Self::P as Provider>::Addr;
}

struct ShmNet;

impl Net for ShmNet {
    type P = ShmProvider;
    fn device(&self) -> ShmDevice {
        ShmDevice::new()
    }
    fn addr(&self) -> ShmAddr {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        ShmAddr::abstract_name(format!("rpcrdma-ulp-e2e-{}-{n}", std::process::id()))
    }
}

struct SimNetFixture(SimNet);

impl Net for SimNetFixture {
    type P = Sim;
    fn device(&self) -> <Sim as Provider>::Device {
        self.0.open_device()
    }
    fn addr(&self) -> SimAddr {
        SimAddr(1)
    }
}

/// siw: software iWARP over loopback TCP; addresses are ports the kernel just handed out
/// (and that nobody listens on any more).
struct SiwNet;

impl Net for SiwNet {
    type P = SiwProvider;
    fn device(&self) -> SiwDevice {
        SiwDevice::new().expect("open siw device")
    }
    fn addr(&self) -> std::net::SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        l.local_addr().expect("local address")
    }
}

fn config() -> ConnConfig {
    ConnConfig {
        credits: 8,
        large_buf_size: 64 * 1024,
        large_bufs: 32,
        send_bufs: 64,
        queue_len: 64,
        hugepages: HugePages::Never,
        ..ConnConfig::default()
    }
}

fn pair<N: Net>(net: &N) -> Pair<N::P, Dispatcher> {
    let mut d = Dispatcher::new();
    d.register(Box::new(CcpProgram::new(SERVER_CCP))).unwrap();
    d.register(Box::new(EchoProgram::with_source_max(60_000)))
        .unwrap();
    d.register(Box::new(NullProgram::default())).unwrap();
    let cfg = config();
    Pair::connect(
        &net.device(),
        net.device(),
        &net.addr(),
        &cfg,
        &cfg,
        d,
        DEADLINE,
    )
    .expect("pair connects")
}

/// The ProcInfo bound for the reply, as the engine wants it.
fn max_reply(procedure: u32, requested: usize, write_chunk: bool) -> u32 {
    let info = EchoProgram::info(procedure).expect("declared");
    info.max_reply_len(requested as u32, write_chunk, 0) as u32
}

fn large_with<P: Provider>(p: &Pair<P, Dispatcher>, data: &[u8]) -> RegBuf {
    let mut b = p.requester.alloc_large().expect("large buffer");
    b.fill(data).expect("fits");
    b
}

/// A request whose arguments `encode` writes into the message buffer, borrowing the DDP
/// data from `bufs`.
fn request<P: Provider>(
    p: &Pair<P, Dispatcher>,
    bufs: DdpBufs,
    max_reply_len: u32,
    encode: impl FnOnce(&DdpBufs, &mut [u8]) -> CallPlan,
) -> CallRequest {
    let mut msg = p.requester.alloc_msg().expect("send buffer");
    let plan = encode(&bufs, msg.storage_mut());
    plan.into_request(msg, bufs, max_reply_len)
        .expect("request")
}

/// A request with no arguments beyond `words`.
fn words_call<P: Provider>(
    p: &Pair<P, Dispatcher>,
    h: &CallHeader<'_>,
    words: &[u32],
    max: u32,
) -> CallRequest {
    request(p, DdpBufs::new(), max, |d, buf| {
        let n = h.encode(buf).unwrap();
        let mut e = rpcrdma_ulp::ddp::DdpEncoder::inline(&mut buf[n..], n);
        for &w in words {
            e.u32(w).unwrap();
        }
        let done = e.finish();
        let call = rpcrdma_ulp::ddp::EncodedCall {
            xid: 0,
            len: done.len,
            xdr_len: done.len,
            read_chunks: done.reads,
        };
        CallPlan::new(&call, d).unwrap()
    })
}

fn call<P: Provider>(p: &mut Pair<P, Dispatcher>, req: CallRequest) -> Outcome {
    p.call(req, DEADLINE).expect("outcome before the deadline")
}

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

fn null_calls<N: Net>(net: N) {
    let mut p = pair(&net);
    for prog in [ECHO_PROGRAM, NULL_PROGRAM] {
        let req = words_call(&p, &header(prog, 0), &[], 32);
        let o = call(&mut p, req);
        assert_eq!(o.status, CallStatus::Success);
        assert_eq!(o.reply.as_ref().unwrap().len(), 24);
        let r = OutcomeResults::new(&o);
        let (xid, c) = r.cursor().unwrap();
        assert_eq!(xid, o.xid);
        c.finish().unwrap();
    }
}

fn echo_inline<N: Net>(net: N) {
    let mut p = pair(&net);
    for n in [0usize, 1, 3, 1000] {
        let payload = data(n, 1);
        let msg = p.requester.alloc_msg().unwrap();
        let h = header(ECHO_PROGRAM, echo_proc::ECHO);
        let max = max_reply(echo_proc::ECHO, n, false);
        let req = inline_call(msg, &h, &EchoData { data: &payload }, max).unwrap();
        assert!(req.ddp_args.is_empty());
        let o = call(&mut p, req);
        assert_eq!(o.status, CallStatus::Success, "size {n}");
        let r = OutcomeResults::new(&o);
        let (_, mut c) = r.cursor().unwrap();
        assert_eq!(EchoData::decode(&mut c).unwrap().data, &payload[..]);
        c.finish().unwrap();
    }
}

/// ECHO with the payload in a Read chunk and the result in a Write chunk: neither
/// message carries the payload inline.
fn echo_read_and_write_chunks<N: Net>(net: N) {
    let mut p = pair(&net);
    for n in [1usize, 4093, 40_001] {
        let payload = data(n, 2);
        let mut bufs = DdpBufs::new();
        bufs.push(large_with(&p, &payload)).unwrap();
        let h = header(ECHO_PROGRAM, echo_proc::ECHO);
        let mut req = request(&p, bufs, max_reply(echo_proc::ECHO, n, true), |d, buf| {
            let args = EchoData {
                data: d.get(0).unwrap().as_slice(),
            };
            CallPlan::new(&encode_call(buf, &h, &args, 1).unwrap(), d).unwrap()
        });
        // Header 40 octets + length word: the Read chunk sits at position 44.
        assert_eq!(req.ddp_args.get(0).map(|a| a.position), Some(44));
        assert_eq!(req.msg.len(), 44);
        req.push_write_sink(p.requester.alloc_large().unwrap())
            .unwrap();
        let o = call(&mut p, req);
        assert_eq!(o.status, CallStatus::Success, "size {n}");
        assert_eq!(
            o.reply.as_ref().unwrap().len(),
            28,
            "only the length word inline"
        );
        assert_eq!(o.write_result(0), Some(&payload[..]));
        let r = OutcomeResults::new(&o);
        let (_, mut c) = r.cursor().unwrap();
        assert_eq!(EchoData::decode(&mut c).unwrap().data, &payload[..]);
        c.finish().unwrap();
    }
}

/// ECHO2: two Read chunks at different positions (odd lengths, so the second position
/// counts the first's roundup) and two Write chunks.
fn echo2_two_positions<N: Net>(net: N) {
    let mut p = pair(&net);
    let (a, b) = (data(5001, 3), data(77, 4));
    let mut bufs = DdpBufs::new();
    bufs.push(large_with(&p, &a)).unwrap();
    bufs.push(large_with(&p, &b)).unwrap();
    let h = header(ECHO_PROGRAM, echo_proc::ECHO2);
    let mut req = request(
        &p,
        bufs,
        max_reply(echo_proc::ECHO2, a.len() + b.len(), true),
        |d, buf| {
            let args = Echo2 {
                a: d.get(0).unwrap().as_slice(),
                tag: 0xfeed,
                b: d.get(1).unwrap().as_slice(),
            };
            CallPlan::new(&encode_call(buf, &h, &args, 1).unwrap(), d).unwrap()
        },
    );
    // a at 44; then a padded (5004), tag, len_b: b at 44 + 5004 + 8.
    let positions: Vec<u32> = req.ddp_args.iter().map(|d| d.position).collect();
    assert_eq!(positions, [44, 44 + 5004 + 8]);
    for _ in 0..2 {
        req.push_write_sink(p.requester.alloc_large().unwrap())
            .unwrap();
    }
    let o = call(&mut p, req);
    assert_eq!(o.status, CallStatus::Success);
    assert_eq!(o.write_result(0), Some(&a[..]));
    assert_eq!(o.write_result(1), Some(&b[..]));
    let r = OutcomeResults::new(&o);
    let (_, mut c) = r.cursor().unwrap();
    let back = Echo2::decode(&mut c).unwrap();
    c.finish().unwrap();
    assert_eq!((back.a, back.tag, back.b), (&a[..], 0xfeed, &b[..]));
}

/// SINK with a Read chunk; SOURCE into a Write chunk, and without one into a Reply chunk
/// sized from ProcInfo.
fn sink_and_source<N: Net>(net: N) {
    let mut p = pair(&net);
    let payload = data(20_000, 5);
    let mut bufs = DdpBufs::new();
    bufs.push(large_with(&p, &payload)).unwrap();
    let h = header(ECHO_PROGRAM, echo_proc::SINK);
    let req = request(&p, bufs, max_reply(echo_proc::SINK, 0, false), |d, buf| {
        let args = EchoData {
            data: d.get(0).unwrap().as_slice(),
        };
        CallPlan::new(&encode_call(buf, &h, &args, 1).unwrap(), d).unwrap()
    });
    let o = call(&mut p, req);
    let r = OutcomeResults::new(&o);
    let (_, mut c) = r.cursor().unwrap();
    let res = SinkRes::decode(&mut c).unwrap();
    assert_eq!(res.len, 20_000);
    assert_eq!(res.crc32c, rpcrdma::iwarp::crc32c::crc32c(&payload));

    for (n, sink) in [(50_000usize, true), (30_000, false)] {
        let msg = p.requester.alloc_msg().unwrap();
        let h = header(ECHO_PROGRAM, echo_proc::SOURCE);
        let max = max_reply(echo_proc::SOURCE, n, sink);
        let mut req = inline_call(msg, &h, &SourceArgs { len: n as u32 }, max).unwrap();
        if sink {
            req.push_write_sink(p.requester.alloc_large().unwrap())
                .unwrap();
        }
        let o = call(&mut p, req);
        assert_eq!(o.status, CallStatus::Success, "{n}");
        let r = OutcomeResults::new(&o);
        let (_, mut c) = r.cursor().unwrap();
        let got = EchoData::decode(&mut c).unwrap().data;
        assert_eq!(got.len(), n);
        assert!(is_source_pattern(got));
    }
    let st = p.requester.stats();
    assert_eq!(
        st.reply_chunks, 1,
        "only the sinkless SOURCE needed a Reply chunk"
    );
}

/// Errors the ULP produces: RPC errors for this XID, and ERR_CHUNK for an overrun; the
/// connection carries on.
fn errors<N: Net>(net: N) {
    let mut p = pair(&net);
    let simple = |p: &mut Pair<N::P, Dispatcher>, h: CallHeader<'static>| {
        let req = words_call(p, &h, &[1], 64);
        call(p, req)
    };
    let o = simple(&mut p, header(0x3000_0000, 1));
    assert_eq!(
        o.status,
        CallStatus::RpcError(RpcReplyError::Accepted(1)),
        "PROG_UNAVAIL"
    );
    let r = OutcomeResults::new(&o);
    assert_eq!(
        r.cursor().err(),
        Some(ReplyError::NotSuccess {
            xid: o.xid,
            status: AcceptStatus::ProgUnavail
        })
    );
    let o = simple(
        &mut p,
        CallHeader {
            vers: 9,
            ..header(ECHO_PROGRAM, 1)
        },
    );
    assert_eq!(
        o.status,
        CallStatus::RpcError(RpcReplyError::Accepted(2)),
        "PROG_MISMATCH"
    );
    let o = simple(&mut p, header(ECHO_PROGRAM, 99));
    assert_eq!(
        o.status,
        CallStatus::RpcError(RpcReplyError::Accepted(3)),
        "PROC_UNAVAIL"
    );
    // ECHO whose length word promises data that is not there.
    let o = simple(&mut p, header(ECHO_PROGRAM, echo_proc::ECHO));
    assert_eq!(
        o.status,
        CallStatus::RpcError(RpcReplyError::Accepted(4)),
        "GARBAGE_ARGS"
    );
    // SOURCE beyond the program's buffer.
    let req = words_call(&p, &header(ECHO_PROGRAM, echo_proc::SOURCE), &[60_001], 64);
    let o = call(&mut p, req);
    assert_eq!(
        o.status,
        CallStatus::RpcError(RpcReplyError::Accepted(5)),
        "SYSTEM_ERR"
    );
    // RPCSEC_GSS credentials: AUTH_ERROR.
    let gss = CallHeader {
        cred: OpaqueAuth::Raw {
            flavor: rpcrdma_ulp::rpc::AuthFlavor::RPCSEC_GSS,
            body: &[0; 8],
        },
        ..header(ECHO_PROGRAM, 0)
    };
    let o = simple(&mut p, gss);
    assert_eq!(
        o.status,
        CallStatus::RpcError(RpcReplyError::Denied),
        "AUTH_ERROR"
    );
    // A Write chunk smaller than the DDP-eligible result: a reply overrun, ERR_CHUNK.
    let mut req = words_call(&p, &header(ECHO_PROGRAM, echo_proc::SOURCE), &[40_000], 64);
    let mut small = p.requester.alloc_msg().unwrap();
    small.set_len(0).unwrap();
    assert!(small.capacity() < 40_000);
    req.push_write_sink(small).unwrap();
    let o = call(&mut p, req);
    assert_eq!(
        o.status,
        CallStatus::Transport(TransportError::Rdma(RdmaError::Chunk))
    );
    // Still usable.
    let o = simple(&mut p, header(NULL_PROGRAM, 0));
    assert_eq!(
        o.status,
        CallStatus::RpcError(RpcReplyError::Accepted(4)),
        "NULL with an argument"
    );
    let req = words_call(&p, &header(NULL_PROGRAM, 0), &[], 32);
    assert_eq!(call(&mut p, req).status, CallStatus::Success);
}

/// CallPlan accepts only Read chunks that are whole registered buffers, each once; an
/// item below the threshold stays inline and its buffer is released.
fn call_plan_checks_buffers<N: Net>(net: N) {
    let mut p = pair(&net);
    let payload = data(3000, 6);
    let mut bufs = DdpBufs::new();
    bufs.push(large_with(&p, &payload)).unwrap();
    let mut msg = p.requester.alloc_msg().unwrap();
    let h = header(ECHO_PROGRAM, echo_proc::ECHO);
    let part = {
        let d = &bufs.get(0).unwrap().as_slice()[1..];
        let call = encode_call(msg.storage_mut(), &h, &EchoData { data: d }, 1).unwrap();
        CallPlan::new(&call, &bufs)
    };
    assert_eq!(part, Err(BuildError::NotWholeBuffer { position: 44 }));
    let outside = {
        let call = encode_call(msg.storage_mut(), &h, &EchoData { data: &payload }, 1).unwrap();
        CallPlan::new(&call, &bufs)
    };
    assert_eq!(outside, Err(BuildError::NotWholeBuffer { position: 44 }));
    let twice = {
        let d = bufs.get(0).unwrap().as_slice();
        let args = Echo2 { a: d, tag: 0, b: d };
        let h2 = header(ECHO_PROGRAM, echo_proc::ECHO2);
        let call = encode_call(msg.storage_mut(), &h2, &args, 1).unwrap();
        CallPlan::new(&call, &bufs)
    };
    assert_eq!(
        twice,
        Err(BuildError::NotWholeBuffer {
            position: 44 + 3000 + 8
        })
    );
    let plan = {
        let d = bufs.get(0).unwrap().as_slice();
        let call = encode_call(msg.storage_mut(), &h, &EchoData { data: d }, 4096).unwrap();
        CallPlan::new(&call, &bufs).unwrap()
    };
    assert_eq!(plan.positions().count(), 0);
    let req = plan
        .into_request(msg, bufs, max_reply(echo_proc::ECHO, payload.len(), false))
        .unwrap();
    assert!(req.ddp_args.is_empty());
    assert_eq!(req.msg.len(), 44 + 3000);
    let o = call(&mut p, req);
    let r = OutcomeResults::new(&o);
    let (_, mut c) = r.cursor().unwrap();
    assert_eq!(EchoData::decode(&mut c).unwrap().data, &payload[..]);
}

macro_rules! per_provider {
    ($($name:ident),* $(,)?) => {
        mod shm {
            $(
                #[test]
                fn $name() {
                    super::$name(super::ShmNet);
                }
            )*
        }
        mod sim {
            $(
                #[test]
                fn $name() {
                    super::$name(super::SimNetFixture(super::SimNet::new(super::SimConfig::seeded(0x0e3))));
                }
            )*
        }
        mod siw {
            $(
                #[test]
                fn $name() {
                    super::$name(super::SiwNet);
                }
            )*
        }
    };
}

per_provider!(
    null_calls,
    echo_inline,
    echo_read_and_write_chunks,
    echo2_two_positions,
    sink_and_source,
    errors,
    call_plan_checks_buffers,
    ccp_then_padded_calls,
);

/// RFC 5666 §6 then §3.9: CONF_RDMA tells the requester the server's largest inline call
/// and its receive-buffer alignment; applied, calls that allow it carry their DDP
/// arguments inline, padded, in RDMA_MSGP (two opaques of odd lengths: both padded, the
/// second's position counting the first's roundup), and the server decodes them past
/// the padding. Calls that do not allow it, or whose padded message exceeds the server's
/// 2 KiB limit, still use Read chunks; before CCP nothing is padded.
fn ccp_then_padded_calls<N: Net>(net: N) {
    let mut p = pair(&net);
    let echo2 = |p: &Pair<N::P, Dispatcher>, a: &[u8], b: &[u8]| {
        let mut bufs = DdpBufs::new();
        bufs.push(large_with(p, a)).unwrap();
        bufs.push(large_with(p, b)).unwrap();
        let h = header(ECHO_PROGRAM, echo_proc::ECHO2);
        request(
            p,
            bufs,
            max_reply(echo_proc::ECHO2, a.len() + b.len(), false),
            |d, buf| {
                let args = Echo2 {
                    a: d.get(0).unwrap().as_slice(),
                    tag: 0xbeef,
                    b: d.get(1).unwrap().as_slice(),
                };
                CallPlan::new(&encode_call(buf, &h, &args, 1).unwrap(), d).unwrap()
            },
        )
        .pad_inline_ddp(true)
    };
    let check = |o: &Outcome, a: &[u8], b: &[u8]| {
        assert_eq!(o.status, CallStatus::Success);
        let r = OutcomeResults::new(o);
        let (_, mut c) = r.cursor().unwrap();
        let back = Echo2::decode(&mut c).unwrap();
        c.finish().unwrap();
        assert_eq!((back.a, back.tag, back.b), (a, 0xbeef, b));
    };
    let (a, b) = (data(1001, 6), data(77, 7));
    // Before CCP: the peer's alignment is unknown, so Read chunks.
    let req = echo2(&p, &a, &b);
    let o = call(&mut p, req);
    check(&o, &a, &b);
    assert_eq!(p.requester.stats().padded_calls, 0);
    let args_before = p.responder().unwrap().stats().ddp_args;
    assert_eq!(args_before, 2);

    let ours = ConfigRdmaReq {
        maxcall_sendsize: 4096,
        maxreply_sendsize: 4096,
        maxrdmaread: 4,
    };
    let req = rpcrdma_ulp::ccp::call(p.requester.alloc_msg().unwrap(), ours).unwrap();
    let o = call(&mut p, req);
    let theirs = rpcrdma_ulp::ccp::reply(&o).expect("CONF_RDMA results");
    assert_eq!(theirs, SERVER_CCP);
    let th = p
        .requester
        .apply_peer_config(rpcrdma_ulp::ccp::peer_config(&theirs));
    assert_eq!(th.send, 2048, "the server's smaller limit is in force");

    let req = echo2(&p, &a, &b);
    let o = call(&mut p, req);
    check(&o, &a, &b);
    let q = p.requester.stats();
    assert_eq!((q.padded_calls, q.long_calls), (1, 0));
    assert_eq!(
        p.responder().unwrap().stats().ddp_args,
        args_before,
        "no Read chunk was pulled"
    );

    // Not allowed by the caller: Read chunks as before.
    let req = echo2(&p, &a, &b).pad_inline_ddp(false);
    let o = call(&mut p, req);
    check(&o, &a, &b);
    assert_eq!(p.requester.stats().padded_calls, 1);
    // Too large for 2 KiB with padding: Read chunks.
    let big = data(2000, 8);
    let req = echo2(&p, &big, &b);
    let o = call(&mut p, req);
    check(&o, &big, &b);
    assert_eq!(p.requester.stats().padded_calls, 1);
    assert_eq!(p.responder().unwrap().stats().ddp_args, args_before + 4);
}
