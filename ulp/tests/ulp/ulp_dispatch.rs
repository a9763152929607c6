//! Every answer the dispatcher can give, checked byte for byte against the reply layouts
//! of RFC 5531 §9 (`rpc_msg`, `reply_body`, `accepted_reply`, `rejected_reply`), with
//! the echo program's results per its XDR (rpcrdma_ulp::builtin), and the answers its
//! duplicate request cache gives.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rpcrdma_ulp::binding::{ProcInfo, ReplySize};
use rpcrdma_ulp::builtin::{
    echo_proc, CcpProgram, EchoProgram, NullProgram, ECHO_PROGRAM, NULL_PROGRAM,
};
use rpcrdma_ulp::ddp::{DdpCursor, DdpEncodeError, DdpEncoder, ReadItem, WriteItem};
use rpcrdma_ulp::program::{
    AuthPolicy, ClientAddr, DispatchError, Dispatched, Dispatcher, Drc, DrcConfig, InboundCall,
    ProcError, Program, RegisterError,
};
use rpcrdma_ulp::rpc::{AuthFlavor, AuthStat, AuthSys, CallHeader, Gids, OpaqueAuth, RpcErrorKind};

use rpcrdma::wire::ccp::{ConfigRdmaReply, CONFIG_RDMA_PROG, CONF_RDMA};

const XID: u32 = 0x0102_0304;

/// Big-endian XDR words.
fn words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|v| v.to_be_bytes()).collect()
}

fn header(prog: u32, vers: u32, procedure: u32) -> CallHeader<'static> {
    CallHeader {
        xid: XID,
        prog,
        vers,
        procedure,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    }
}

/// A call message: header then raw argument bytes.
fn call_msg(h: &CallHeader<'_>, args: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; h.encoded_len()];
    let n = h.encode(&mut buf).expect("header encodes");
    buf.truncate(n);
    buf.extend_from_slice(args);
    buf
}

/// A test program that reports each kind of procedure failure.
struct Probe;

const PROBE: u32 = 0x2f00_00f0;
static PROBE_INFO: ProcInfo = ProcInfo::plain(1, "PROBE", ReplySize::fixed(4096));

impl Program for Probe {
    fn prog(&self) -> u32 {
        PROBE
    }
    fn versions(&self) -> (u32, u32) {
        (2, 3)
    }
    fn proc_info(&self, _vers: u32, procedure: u32) -> Option<&'static ProcInfo> {
        (1..=6).contains(&procedure).then_some(&PROBE_INFO)
    }
    fn call<'d>(
        &'d mut self,
        call: &CallHeader<'d>,
        args: &mut DdpCursor<'d>,
        results: &mut DdpEncoder<'_, 'd>,
    ) -> Result<(), ProcError> {
        match call.procedure {
            1 => Err(ProcError::SystemErr),
            2 => Err(ProcError::ProcUnavail),
            3 => Err(ProcError::Auth(AuthStat::TooWeak)),
            // Writes results, then finds its arguments bad: the results must vanish.
            4 => {
                results.u32(0xdead_beef)?;
                let _ = args.u32()?;
                Ok(())
            }
            // Results larger than any small reply buffer.
            5 => {
                for i in 0..1024 {
                    results.u32(i)?;
                }
                Ok(())
            }
            // Decodes nothing: leftover arguments are the dispatcher's to catch.
            _ => {
                results.u32(6)?;
                Ok(())
            }
        }
    }
}

fn dispatcher() -> Dispatcher {
    let mut d = Dispatcher::new();
    d.register(Box::new(EchoProgram::with_source_max(64)))
        .unwrap();
    d.register(Box::new(NullProgram::default())).unwrap();
    d.register(Box::new(Probe)).unwrap();
    d
}

/// Dispatches an inline call and returns the reply bytes.
fn answer(d: &mut Dispatcher, msg: &[u8]) -> Vec<u8> {
    let mut out = [0u8; 512];
    match d.dispatch(&InboundCall::inline(msg), &mut out) {
        Ok(Dispatched::Reply(r)) => {
            assert_eq!(r.xid, XID);
            assert!(r.write_chunks.is_empty());
            assert_eq!(
                r.header.encoded_len(),
                r.header.encode(&mut [0u8; 64]).unwrap()
            );
            out[..r.len].to_vec()
        }
        other => panic!("expected a reply, got {other:?}"),
    }
}

/// MSG_ACCEPTED with an AUTH_NONE verifier and `accept_stat` (RFC 5531 §9
/// `accepted_reply`), followed by `rest`.
fn accepted(stat: u32, rest: &[u32]) -> Vec<u8> {
    let mut w = vec![XID, 1, 0, 0, 0, stat];
    w.extend_from_slice(rest);
    words(&w)
}

// RFC 5531 §9: SUCCESS with `void` results is the bare accepted header.
#[test]
fn null_procedure_of_every_program_succeeds() {
    let mut d = dispatcher();
    for (prog, vers) in [(ECHO_PROGRAM, 1), (NULL_PROGRAM, 1), (PROBE, 2), (PROBE, 3)] {
        let reply = answer(&mut d, &call_msg(&header(prog, vers, 0), &[]));
        assert_eq!(reply, accepted(0, &[]), "prog {prog:#x} vers {vers}");
    }
}

// NULL takes `void`: anything after the header is garbage (RFC 5531 §9 GARBAGE_ARGS = 4).
#[test]
fn null_with_arguments_is_garbage_args() {
    let mut d = dispatcher();
    let reply = answer(
        &mut d,
        &call_msg(&header(ECHO_PROGRAM, 1, 0), &[0, 0, 0, 1]),
    );
    assert_eq!(reply, accepted(4, &[]));
}

// PROG_UNAVAIL = 1.
#[test]
fn unknown_program_is_prog_unavail() {
    let mut d = dispatcher();
    let reply = answer(&mut d, &call_msg(&header(0x3fff_ffff, 1, 0), &[]));
    assert_eq!(reply, accepted(1, &[]));
}

// PROG_MISMATCH = 2 carries `struct { unsigned int low; unsigned int high; } mismatch_info`.
#[test]
fn unsupported_version_is_prog_mismatch_with_range() {
    let mut d = dispatcher();
    for vers in [1, 4, u32::MAX] {
        let reply = answer(&mut d, &call_msg(&header(PROBE, vers, 1), &[]));
        assert_eq!(reply, accepted(2, &[2, 3]), "vers {vers}");
        assert_eq!(reply.len(), 32);
    }
    let reply = answer(&mut d, &call_msg(&header(ECHO_PROGRAM, 2, 1), &[]));
    assert_eq!(reply, accepted(2, &[1, 1]));
}

// PROC_UNAVAIL = 3, both for undeclared procedures and when a program says so at run time.
#[test]
fn unknown_procedure_is_proc_unavail() {
    let mut d = dispatcher();
    for (prog, vers, procedure) in [(ECHO_PROGRAM, 1, 6), (NULL_PROGRAM, 1, 1), (PROBE, 2, 2)] {
        let reply = answer(&mut d, &call_msg(&header(prog, vers, procedure), &[]));
        assert_eq!(reply, accepted(3, &[]), "prog {prog:#x} proc {procedure}");
    }
}

// GARBAGE_ARGS = 4 for every way echo arguments can be malformed.
#[test]
fn malformed_echo_arguments_are_garbage_args() {
    let mut d = dispatcher();
    let cases: &[(&str, u32, Vec<u8>)] = &[
        ("no arguments", echo_proc::ECHO, vec![]),
        ("length word cut short", echo_proc::ECHO, vec![0, 0]),
        (
            "data shorter than its length",
            echo_proc::ECHO,
            words(&[5, 0x6162_6364]),
        ),
        (
            "non-zero padding",
            echo_proc::ECHO,
            [words(&[1]), vec![b'a', 0, 0, 1]].concat(),
        ),
        (
            "length over ECHO_MAX_DATA",
            echo_proc::SINK,
            words(&[(1 << 24) + 1]),
        ),
        ("trailing octets", echo_proc::ECHO, words(&[0, 0])),
        (
            "SOURCE over ECHO_MAX_DATA",
            echo_proc::SOURCE,
            words(&[(1 << 24) + 1]),
        ),
        ("ECHO2 missing b", echo_proc::ECHO2, words(&[0, 7])),
    ];
    for (what, procedure, args) in cases {
        let reply = answer(
            &mut d,
            &call_msg(&header(ECHO_PROGRAM, 1, *procedure), args),
        );
        assert_eq!(reply, accepted(4, &[]), "{what}");
    }
}

// A program that wrote results and then failed gets a header-only reply; leftovers the
// program never looked at are caught by the dispatcher.
#[test]
fn program_failures_replace_partial_results() {
    let mut d = dispatcher();
    let reply = answer(&mut d, &call_msg(&header(PROBE, 2, 4), &[]));
    assert_eq!(reply, accepted(4, &[]));
    let reply = answer(&mut d, &call_msg(&header(PROBE, 2, 6), &words(&[1])));
    assert_eq!(reply, accepted(4, &[]));
    let reply = answer(&mut d, &call_msg(&header(PROBE, 2, 6), &[]));
    assert_eq!(reply, accepted(0, &[6]));
}

// SYSTEM_ERR = 5, from a program and from SOURCE beyond its buffer.
#[test]
fn system_errors() {
    let mut d = dispatcher();
    let reply = answer(&mut d, &call_msg(&header(PROBE, 3, 1), &[]));
    assert_eq!(reply, accepted(5, &[]));
    let reply = answer(
        &mut d,
        &call_msg(&header(ECHO_PROGRAM, 1, echo_proc::SOURCE), &words(&[65])),
    );
    assert_eq!(reply, accepted(5, &[]));
}

/// MSG_DENIED (1) with `reject_stat` and its data (RFC 5531 §9 `rejected_reply`).
fn denied(rest: &[u32]) -> Vec<u8> {
    let mut w = vec![XID, 1, 1];
    w.extend_from_slice(rest);
    words(&w)
}

// RPC_MISMATCH (reject_stat 0) with the supported range 2..2.
#[test]
fn wrong_rpc_version_is_rpc_mismatch() {
    let mut d = dispatcher();
    let mut msg = call_msg(&header(ECHO_PROGRAM, 1, 0), &[]);
    msg[8..12].copy_from_slice(&3u32.to_be_bytes());
    assert_eq!(answer(&mut d, &msg), denied(&[0, 2, 2]));
}

// AUTH_ERROR (reject_stat 1) with each auth_stat the dispatcher produces.
#[test]
fn credential_problems_are_auth_errors() {
    let mut d = dispatcher();
    // AUTH_NONE credential with a body: AUTH_BADCRED (1).
    let mut msg = words(&[XID, 0, 2, ECHO_PROGRAM, 1, 0, 0, 4, 0, 0, 0]);
    assert_eq!(answer(&mut d, &msg), denied(&[1, 1]));
    // AUTH_NONE verifier with a body: AUTH_BADVERF (3).
    msg = words(&[XID, 0, 2, ECHO_PROGRAM, 1, 0, 0, 0, 0, 4, 0]);
    assert_eq!(answer(&mut d, &msg), denied(&[1, 3]));
    // AUTH_SYS credential with an AUTH_SYS verifier: AUTH_BADVERF.
    let sys = OpaqueAuth::Sys(AuthSys {
        stamp: 1,
        machinename: b"host",
        uid: 0,
        gid: 0,
        gids: Gids::new(&[1, 2]).unwrap(),
    });
    let h = CallHeader {
        cred: sys,
        verf: sys,
        ..header(ECHO_PROGRAM, 1, 0)
    };
    assert_eq!(answer(&mut d, &call_msg(&h, &[])), denied(&[1, 3]));
    // ... and with an AUTH_NONE verifier it is accepted.
    let h = CallHeader {
        cred: sys,
        ..header(ECHO_PROGRAM, 1, 0)
    };
    assert_eq!(answer(&mut d, &call_msg(&h, &[])), accepted(0, &[]));
    // RPCSEC_GSS is not accepted by the default policy: AUTH_BADCRED.
    let gss = CallHeader {
        cred: OpaqueAuth::Raw {
            flavor: AuthFlavor::RPCSEC_GSS,
            body: &[0, 0, 0, 1],
        },
        ..header(ECHO_PROGRAM, 1, 0)
    };
    assert_eq!(answer(&mut d, &call_msg(&gss, &[])), denied(&[1, 1]));
    // A program may refuse credentials itself: AUTH_TOOWEAK (5).
    assert_eq!(
        answer(&mut d, &call_msg(&header(PROBE, 2, 3), &[])),
        denied(&[1, 5])
    );
    // With AUTH_NONE disallowed, an AUTH_NONE call is AUTH_BADCRED.
    d.set_auth_policy(AuthPolicy {
        none: false,
        ..AuthPolicy::DEFAULT
    });
    assert_eq!(
        answer(&mut d, &call_msg(&header(ECHO_PROGRAM, 1, 0), &[])),
        denied(&[1, 1])
    );
    // A policy that lets other flavors through hands them to the program.
    d.set_auth_policy(AuthPolicy {
        other: true,
        ..AuthPolicy::DEFAULT
    });
    assert_eq!(answer(&mut d, &call_msg(&gss, &[])), accepted(0, &[]));
}

// A server never answers what it cannot attribute to a call: no XID, a bad msg_type,
// or a REPLY.
#[test]
fn non_calls_are_dropped() {
    let mut d = dispatcher();
    let mut out = [0u8; 64];
    type KindCheck = fn(&RpcErrorKind) -> bool;
    let cases: [(Vec<u8>, KindCheck); 3] = [
        (vec![1, 2], |k| matches!(k, RpcErrorKind::Xdr(_))),
        (words(&[XID, 2, 2]), |k| {
            matches!(k, RpcErrorKind::BadMsgType { value: 2 })
        }),
        (words(&[XID, 1, 0, 0, 0, 0]), |k| {
            matches!(k, RpcErrorKind::UnexpectedMsgType { .. })
        }),
    ];
    for (msg, kind) in cases {
        match d.dispatch(&InboundCall::inline(&msg), &mut out) {
            Ok(Dispatched::Drop(e)) => assert!(kind(&e.kind), "{e}"),
            other => panic!("expected a drop, got {other:?}"),
        }
    }
}

// A call cut short inside its header still has an XID: GARBAGE_ARGS.
#[test]
fn truncated_header_is_garbage_args() {
    let mut d = dispatcher();
    let msg = words(&[XID, 0, 2, ECHO_PROGRAM]);
    assert_eq!(answer(&mut d, &msg), accepted(4, &[]));
}

// ECHO with everything inline: the reply carries length, data and zero padding.
#[test]
fn echo_inline_reply_is_exact() {
    let mut d = dispatcher();
    let args = [words(&[5]), b"hello".to_vec(), vec![0, 0, 0]].concat();
    let reply = answer(
        &mut d,
        &call_msg(&header(ECHO_PROGRAM, 1, echo_proc::ECHO), &args),
    );
    assert_eq!(reply, [accepted(0, &[5]), b"hello\0\0\0".to_vec()].concat());
}

// SINK answers `sink_res`: the length and the CRC32c of the data. CRC32c("123456789") is
// 0xe3069283 (RFC 3720 Appendix B.4 check value).
#[test]
fn sink_returns_length_and_crc32c() {
    let mut d = dispatcher();
    let args = [words(&[9]), b"123456789\0\0\0".to_vec()].concat();
    let reply = answer(
        &mut d,
        &call_msg(&header(ECHO_PROGRAM, 1, echo_proc::SINK), &args),
    );
    assert_eq!(reply, accepted(0, &[9, 0xe306_9283]));
}

// DISCARD answers the data's length only, and checks the argument's XDR like SINK.
#[test]
fn discard_returns_the_length_only() {
    let mut d = dispatcher();
    let args = [words(&[9]), b"123456789\0\0\0".to_vec()].concat();
    let reply = answer(
        &mut d,
        &call_msg(&header(ECHO_PROGRAM, 1, echo_proc::DISCARD), &args),
    );
    assert_eq!(reply, accepted(0, &[9]));
    let too_long = answer(
        &mut d,
        &call_msg(
            &header(ECHO_PROGRAM, 1, echo_proc::DISCARD),
            &words(&[(1 << 24) + 1]),
        ),
    );
    assert_eq!(too_long, accepted(4, &[]), "GARBAGE_ARGS");
}

// SOURCE returns the pattern 0, 1, 2, ... (mod 251).
#[test]
fn source_returns_the_pattern() {
    let mut d = dispatcher();
    let reply = answer(
        &mut d,
        &call_msg(&header(ECHO_PROGRAM, 1, echo_proc::SOURCE), &words(&[6])),
    );
    assert_eq!(
        reply,
        [accepted(0, &[6]), vec![0, 1, 2, 3, 4, 5, 0, 0]].concat()
    );
}

// ECHO with its argument in a Read chunk and its result in a Write chunk: neither the
// call nor the reply carries the data inline, and the result is the call's own data.
#[test]
fn echo_through_read_and_write_chunks() {
    let mut d = dispatcher();
    let payload = [7u8; 13];
    let msg = call_msg(&header(ECHO_PROGRAM, 1, echo_proc::ECHO), &words(&[13]));
    // Header 40 octets, length word 4: the data sits at XDR position 44.
    let reads = [ReadItem {
        position: 44,
        data: &payload,
    }];
    let call = InboundCall {
        msg: &msg,
        reads: &reads,
        write_chunks: &[4096],
        padding: None,
    };
    let mut out = [0u8; 64];
    let Ok(Dispatched::Reply(r)) = d.dispatch(&call, &mut out) else {
        panic!("no reply");
    };
    assert_eq!(&out[..r.len], &accepted(0, &[13])[..]);
    assert_eq!(
        r.write_chunks
            .iter()
            .map(|w| (w.chunk, w.data))
            .collect::<Vec<_>>(),
        vec![(0, &payload[..])]
    );
    assert!(
        core::ptr::eq(r.write_chunks[0].data, &payload[..]),
        "zero-copy echo"
    );
}

// ECHO2 with both payloads in Read chunks at different positions and both results in
// Write chunks.
#[test]
fn echo2_through_two_read_chunks() {
    let mut d = dispatcher();
    let (a, b) = ([1u8; 5], [2u8; 3]);
    // Inline: header (40), len_a, tag, len_b. XDR stream: len_a at 40, a at 44..49 with
    // roundup to 52, tag at 52, len_b at 56, b at 60.
    let msg = call_msg(
        &header(ECHO_PROGRAM, 1, echo_proc::ECHO2),
        &words(&[5, 0xabcd, 3]),
    );
    let reads = [
        ReadItem {
            position: 60,
            data: &b,
        },
        ReadItem {
            position: 44,
            data: &a,
        },
    ];
    let call = InboundCall {
        msg: &msg,
        reads: &reads,
        write_chunks: &[8, 8],
        padding: None,
    };
    let mut out = [0u8; 64];
    let Ok(Dispatched::Reply(r)) = d.dispatch(&call, &mut out) else {
        panic!("no reply");
    };
    assert_eq!(&out[..r.len], &accepted(0, &[5, 0xabcd, 3])[..]);
    assert_eq!(
        r.write_chunks.as_slice(),
        &[
            WriteItem {
                chunk: 0,
                data: &a[..],
                at: 28,
            },
            WriteItem {
                chunk: 1,
                data: &b[..],
                at: 36,
            }
        ]
    );
    // A Read chunk at a position where no DDP-eligible item sits is GARBAGE_ARGS.
    let reads = [ReadItem {
        position: 48,
        data: &a,
    }];
    let call = InboundCall {
        reads: &reads,
        ..call
    };
    let Ok(Dispatched::Reply(r)) = d.dispatch(&call, &mut out) else {
        panic!("no reply");
    };
    assert_eq!(&out[..r.len], &accepted(4, &[])[..]);
}

// The requester offered a Write chunk too small for the result, or a reply buffer too
// small for the results: a reply overrun, for the transport to answer with ERR_CHUNK.
#[test]
fn overruns_are_reported_not_replied() {
    let mut d = dispatcher();
    let msg = call_msg(&header(ECHO_PROGRAM, 1, echo_proc::SOURCE), &words(&[64]));
    let call = InboundCall {
        write_chunks: &[63],
        ..InboundCall::inline(&msg)
    };
    let mut out = [0u8; 256];
    assert_eq!(
        d.dispatch(&call, &mut out),
        Err(DispatchError::ReplyOverrun {
            xid: XID,
            error: DdpEncodeError::WriteChunkTooSmall {
                chunk: 0,
                capacity: 63,
                len: 64
            }
        })
    );
    let msg = call_msg(&header(PROBE, 2, 5), &[]);
    // 1024 words after the 24-octet header: the 59th word would end at 260.
    assert_eq!(
        d.dispatch(&InboundCall::inline(&msg), &mut out),
        Err(DispatchError::ReplyOverrun {
            xid: XID,
            error: DdpEncodeError::BufferTooSmall {
                needed: 260,
                available: 256
            }
        })
    );
    // Nine Write chunks exceed what a reply can carry.
    let msg = call_msg(&header(ECHO_PROGRAM, 1, echo_proc::SOURCE), &words(&[1]));
    let call = InboundCall {
        write_chunks: &[1; 9],
        ..InboundCall::inline(&msg)
    };
    assert!(matches!(
        d.dispatch(&call, &mut out),
        Err(DispatchError::ReplyOverrun {
            error: DdpEncodeError::TooManyChunks { capacity: 8 },
            ..
        })
    ));
    // A buffer that cannot hold even a header.
    let msg = call_msg(&header(ECHO_PROGRAM, 1, 0), &[]);
    assert_eq!(
        d.dispatch(&InboundCall::inline(&msg), &mut out[..20]),
        Err(DispatchError::ReplyBufferTooSmall {
            xid: XID,
            needed: 24,
            available: 20
        })
    );
}

#[test]
fn registration_and_lookup() {
    let mut d = dispatcher();
    assert_eq!(
        d.register(Box::new(EchoProgram::new())),
        Err(RegisterError { prog: ECHO_PROGRAM })
    );
    let progs: Vec<_> = d.programs().collect();
    assert_eq!(
        progs,
        [
            (ECHO_PROGRAM, (1, 1)),
            (NULL_PROGRAM, (1, 1)),
            (PROBE, (2, 3))
        ]
    );
    assert_eq!(d.proc_info(ECHO_PROGRAM, 1, 0), Some(&ProcInfo::NULL));
    assert_eq!(
        d.proc_info(ECHO_PROGRAM, 1, echo_proc::ECHO)
            .map(|p| p.name),
        Some("ECHO")
    );
    assert_eq!(d.proc_info(ECHO_PROGRAM, 2, echo_proc::ECHO), None);
    assert_eq!(d.proc_info(NULL_PROGRAM, 1, 1), None);
    assert_eq!(d.proc_info(7, 1, 0), None);
}

// RFC 5666 §6: CONF_RDMA takes config_rdma_req and returns config_rdma_reply.
#[test]
fn ccp_conf_rdma() {
    let mut d = Dispatcher::new();
    let ours = ConfigRdmaReply {
        maxcall_sendsize: 4096,
        align: 64,
        maxrdmaread: 16,
    };
    d.register(Box::new(CcpProgram::new(ours))).unwrap();
    let msg = call_msg(
        &header(CONFIG_RDMA_PROG, 1, CONF_RDMA),
        &words(&[1024, 2048, 4]),
    );
    assert_eq!(answer(&mut d, &msg), accepted(0, &[4096, 64, 16]));
    let short = call_msg(
        &header(CONFIG_RDMA_PROG, 1, CONF_RDMA),
        &words(&[1024, 2048]),
    );
    assert_eq!(answer(&mut d, &short), accepted(4, &[]));
    let long = call_msg(
        &header(CONFIG_RDMA_PROG, 1, CONF_RDMA),
        &words(&[1, 2, 3, 4]),
    );
    assert_eq!(answer(&mut d, &long), accepted(4, &[]));
}

/// A program with a duplicate request cache: procedure 1 (not idempotent) returns a run
/// count shared by every instance, so a replay (an old count) is told from a run;
/// procedure 2 (not idempotent) fails with SYSTEM_ERR; procedure 3 is procedure 1
/// declared idempotent.
struct Counted {
    runs: Arc<AtomicU32>,
    drc: Arc<Drc>,
}

const COUNTED: u32 = 0x2f00_00f1;
static COUNT: ProcInfo = ProcInfo::plain(1, "COUNT", ReplySize::fixed(4));
static FAIL: ProcInfo = ProcInfo::plain(2, "FAIL", ReplySize::fixed(0));
static PEEK: ProcInfo = ProcInfo::plain(3, "PEEK", ReplySize::fixed(4)).marked_idempotent();

impl Program for Counted {
    fn prog(&self) -> u32 {
        COUNTED
    }
    fn versions(&self) -> (u32, u32) {
        (1, 1)
    }
    fn proc_info(&self, _vers: u32, procedure: u32) -> Option<&'static ProcInfo> {
        [&COUNT, &FAIL, &PEEK]
            .into_iter()
            .find(|p| p.procedure == procedure)
    }
    fn call<'d>(
        &'d mut self,
        call: &CallHeader<'d>,
        args: &mut DdpCursor<'d>,
        results: &mut DdpEncoder<'_, 'd>,
    ) -> Result<(), ProcError> {
        let n = self.runs.fetch_add(1, Ordering::Relaxed) + 1;
        let _ = args.u32()?;
        if call.procedure == 2 {
            return Err(ProcError::SystemErr);
        }
        results.u32(n)?;
        Ok(())
    }
    fn reply_cache(&self) -> Option<Arc<Drc>> {
        Some(self.drc.clone())
    }
}

/// Two connections' dispatchers from `client_a` and `client_b`, sharing one cache.
fn counted_pair(client_a: ClientAddr, client_b: ClientAddr) -> (Dispatcher, Dispatcher, Arc<Drc>) {
    let runs = Arc::new(AtomicU32::new(0));
    let drc = Arc::new(Drc::new(DrcConfig::default()));
    let mk = |client| {
        let mut d = Dispatcher::new();
        d.set_client(client);
        d.register(Box::new(Counted {
            runs: runs.clone(),
            drc: drc.clone(),
        }))
        .unwrap();
        assert!(d.reply_cache(COUNTED).is_some());
        d
    };
    (mk(client_a), mk(client_b), drc)
}

#[test]
fn a_retransmission_on_another_connection_from_the_same_client_is_replayed() {
    let me = ClientAddr::Ip([192, 0, 2, 7].into());
    let (mut a, mut b, drc) = counted_pair(me, me);
    let msg = call_msg(&header(COUNTED, 1, 1), &words(&[42]));
    assert_eq!(answer(&mut a, &msg), accepted(0, &[1]));
    assert_eq!(answer(&mut b, &msg), accepted(0, &[1]), "replayed");
    // Other arguments under the same XID: run.
    let other = call_msg(&header(COUNTED, 1, 1), &words(&[43]));
    assert_eq!(answer(&mut b, &other), accepted(0, &[2]));
    let s = drc.stats();
    assert_eq!(
        (s.hits, s.insertions, s.checksum_misses),
        (1, 2, 1),
        "{s:?}"
    );
}

#[test]
fn the_same_xid_from_another_client_runs() {
    let (mut a, mut b, drc) = counted_pair(ClientAddr::Id(1), ClientAddr::Id(2));
    let msg = call_msg(&header(COUNTED, 1, 1), &words(&[42]));
    assert_eq!(answer(&mut a, &msg), accepted(0, &[1]));
    assert_eq!(answer(&mut b, &msg), accepted(0, &[2]));
    assert_eq!(
        answer(&mut b, &msg),
        accepted(0, &[2]),
        "replayed to its own client"
    );
    assert_eq!(drc.stats().hits, 1);
}

#[test]
fn only_successful_non_idempotent_calls_are_cached() {
    let (mut a, _, drc) = counted_pair(ClientAddr::Unknown, ClientAddr::Unknown);
    // SYSTEM_ERR: forgotten, so the retransmission runs again.
    let fail = call_msg(&header(COUNTED, 1, 2), &words(&[0]));
    assert_eq!(answer(&mut a, &fail), accepted(5, &[]));
    assert_eq!(answer(&mut a, &fail), accepted(5, &[]));
    // GARBAGE_ARGS (no argument word): forgotten too.
    let garbage = call_msg(&header(COUNTED, 1, 1), &[]);
    assert_eq!(answer(&mut a, &garbage), accepted(4, &[]));
    assert_eq!(answer(&mut a, &garbage), accepted(4, &[]));
    // Idempotent: never looked up.
    let peek = call_msg(&header(COUNTED, 1, 3), &words(&[0]));
    assert_eq!(answer(&mut a, &peek), accepted(0, &[5]));
    assert_eq!(answer(&mut a, &peek), accepted(0, &[6]));
    let s = drc.stats();
    assert_eq!(
        (s.hits, s.insertions, s.uncached, s.entries),
        (0, 0, 4, 0),
        "{s:?}"
    );
}

#[test]
fn a_replay_too_long_for_the_buffer_is_an_overrun() {
    let (mut a, _, _) = counted_pair(ClientAddr::Unknown, ClientAddr::Unknown);
    let msg = call_msg(&header(COUNTED, 1, 1), &words(&[42]));
    assert_eq!(answer(&mut a, &msg), accepted(0, &[1]));
    let mut small = [0u8; 27];
    assert!(matches!(
        a.dispatch(&InboundCall::inline(&msg), &mut small),
        Err(DispatchError::ReplyOverrun { xid: XID, .. })
    ));
}

/// Polls `server` and `client` until the server holds one established connection, or
/// fails at the deadline; returns what its dispatcher was told of the client.
fn client_seen_by<P: rpcrdma::fabric::Provider>(
    dev: P::Device,
    addr: P::Addr,
    client_dev: &P::Device,
) -> ClientAddr
where
    P::Device: Clone,
{
    use rpcrdma::{ConnConfig, Requester, Responder};
    use std::time::{Duration, Instant};
    let cfg = ConnConfig {
        credits: 4,
        hugepages: rpcrdma_pools::HugePages::Never,
        ..ConnConfig::default()
    };
    let factory: fn() -> Option<Dispatcher> = || Some(Dispatcher::new());
    let mut server =
        Responder::<P, Dispatcher, _>::bind(dev, &addr, cfg.clone(), factory).expect("binds");
    let mut client = Requester::<P>::connect_with(client_dev, &addr, &cfg).expect("connects");
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        let now = Instant::now();
        server.poll(now);
        client.poll(now);
        if client.state() == rpcrdma::ConnState::Established && server.connections().len() == 1 {
            return server.connections()[0].service().client();
        }
        assert!(Instant::now() < end, "connection established in time");
        std::thread::yield_now();
    }
}

/// The engine tells the dispatcher who its connection's client is when it accepts the
/// connection (`Service::set_peer`), so the reply cache keys on it: over shm the
/// client's process (user and process id), over siw its IP address.
#[test]
fn an_accepted_connection_names_its_client() {
    use rpcrdma::fabric::shm::{ShmAddr, ShmDevice, ShmProvider};
    use rpcrdma::fabric::siw::{SiwDevice, SiwProvider};
    let addr = ShmAddr::abstract_name(format!("rpcrdma-ulp-peer-{}", std::process::id()));
    let seen = client_seen_by::<ShmProvider>(ShmDevice::new(), addr, &ShmDevice::new());
    // SAFETY: geteuid has no inputs and cannot fail.
    let uid = unsafe { libc::geteuid() };
    assert_eq!(
        seen,
        ClientAddr::Id(u64::from(uid) << 32 | u64::from(std::process::id()))
    );

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let dev = SiwDevice::new().expect("siw device");
    let seen = client_seen_by::<SiwProvider>(dev.clone(), addr, &dev);
    assert_eq!(seen, ClientAddr::Ip([127, 0, 0, 1].into()));
}
