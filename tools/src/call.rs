//! `rpcrdma call`: one RPC to a server (normally `rpcrdma serve`), with the payload
//! inline or in chunks as asked, and a summary of the reply, the message shape and the
//! timing.

use rpcrdma::wire::rtr::XMTREQ_HEADER_LEN;
use std::time::{Duration, Instant};

use rpcrdma::fabric::shm::{ShmDevice, ShmProvider};
use rpcrdma::fabric::siw::{SiwDevice, SiwProvider};
use rpcrdma::fabric::Provider;
use rpcrdma::iwarp::crc32c::crc32c;
use rpcrdma::wire::ccp::ConfigRdmaReq;
use rpcrdma::Requester;
use rpcrdma::{CallRequest, CallStatus, Outcome};
use rpcrdma::{ConnConfig, ConnEvent, ConnState, RegBuf};
use rpcrdma_ulp::binding::with_keepalive;
use rpcrdma_ulp::builtin::{
    echo_proc, is_source_pattern, EchoData, EchoProgram, SinkRes, SourceArgs, ECHO_MAX_DATA,
    ECHO_PROGRAM,
};
use rpcrdma_ulp::client::{inline_call, CallPlan, DdpBufs, OutcomeResults};
use rpcrdma_ulp::ddp::{encode_call, XdrCodec};
use rpcrdma_ulp::rpc::{CallHeader, OpaqueAuth};
use serde::Serialize;

use crate::endpoint::Endpoint;
use crate::error::{connect_error, CliError};

/// Octets an inline message needs beyond its payload (RPC and transport headers, length
/// word, slack): a payload that does not fit goes to a chunk in `auto` mode.
const INLINE_OVERHEAD: usize = 128;

/// What to call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// A built-in echo procedure (`echo_proc::*`) of [`ECHO_PROGRAM`] v1.
    Echo(u32),
    /// Any program: `size` octets as one opaque argument (none when zero).
    Raw {
        /// Program.
        prog: u32,
        /// Version.
        vers: u32,
        /// Procedure.
        procedure: u32,
    },
}

/// A chunk choice: forced on, forced off, or the tool decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Decide by size.
    Auto,
    /// Use the chunk.
    On,
    /// Never use the chunk (Reply chunk: a reply too large for inline then comes in a
    /// responder-provided Read chunk, where the server supports it).
    Off,
}

/// `call` settings.
#[derive(Debug, Clone)]
pub struct CallOpts {
    /// What to call.
    pub target: Target,
    /// Payload octets (ECHO, SINK, raw), or octets asked for (SOURCE).
    pub size: usize,
    /// Argument in a Read chunk.
    pub read_chunk: Choice,
    /// Result in a Write chunk.
    pub write_chunk: Choice,
    /// Offer a Reply chunk.
    pub reply_chunk: Choice,
    /// Connection settings (from [`requester_config`]).
    pub conn: ConnConfig,
    /// Connect and call deadline, each.
    pub timeout: Duration,
    /// Keepalive probes to see answered after the reply before closing (needs
    /// `conn.keepalive`).
    pub probes: u64,
    /// Run CONF_RDMA first and apply its results (RFC 5666 §6).
    pub ccp: bool,
}

/// The connection settings of a call to `target`: `base`, with keepalive probes after
/// every `keepalive` of silence when asked. The probes are NULL calls to the program
/// being called, which its server answers with SUCCESS: the engine's own default
/// probe program is served by nobody, so each probe would cost the server a
/// PROG_UNAVAIL reply (and a log line or counter there).
pub fn requester_config(
    base: ConnConfig,
    target: Target,
    keepalive: Option<Duration>,
) -> ConnConfig {
    match keepalive {
        Some(interval) => {
            let (prog, vers, _, _) = names(target);
            with_keepalive(base, prog, vers, interval)
        }
        None => base,
    }
}

/// The message shape the call used.
#[derive(Debug, Clone, Serialize)]
pub struct Shape {
    /// RDMA_MSG (inline), RDMA_MSGP (inline with the payload padded, after `--ccp`) or
    /// RDMA_NOMSG (the message went in a Position-Zero Read chunk).
    pub call: &'static str,
    /// Read chunks (DDP arguments, and the Position-Zero chunk of a long call).
    pub read_chunks: usize,
    /// Write chunks offered.
    pub write_chunks: usize,
    /// Reply chunks offered (0 or 1).
    pub reply_chunks: u64,
    /// Replies pulled from a responder-provided Read chunk (0 or 1).
    pub reply_read_chunks: u64,
    /// RDMA_DONE sent for that chunk.
    pub done_sent: bool,
    /// Sends the call took: 1, or a continuation group's count
    /// (draft-dnoveck-rpcrdma-rtrext ROPT_XMTREQ + ROPT_XMTCONTs).
    pub call_messages: u64,
    /// Receives the reply took: 1, or its continuation group's count.
    pub reply_messages: u64,
    /// DDP arguments the call placed by send-based DDP into the server's receive
    /// segments (draft-dnoveck-rpcrdma-rtrext §7) instead of Read chunks.
    pub send_ddp_items: u64,
    /// Reply bulk items the server placed by send-based DDP into this end's receive
    /// segments (§7.4; `call --send-ddp`) instead of writing them into a Write chunk.
    pub send_ddp_reply_items: u64,
}

/// The JSON (and text) summary.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Provider.
    pub provider: &'static str,
    /// Server address.
    pub addr: String,
    /// Procedure name.
    pub name: String,
    /// Program, version, procedure.
    pub prog: u32,
    /// Version.
    pub vers: u32,
    /// Procedure.
    pub procedure: u32,
    /// Payload size asked for.
    pub size: usize,
    /// The XID the engine assigned.
    pub xid: u32,
    /// "SUCCESS" or the failure.
    pub status: String,
    /// Reply message octets (inline or through the Reply chunk; without Write chunk
    /// data).
    pub reply_len: usize,
    /// Octets received through Write chunks.
    pub write_chunk_octets: usize,
    /// What the reply was checked against, e.g. "echoed 4096 octets match".
    pub check: String,
    /// Message shape.
    pub shape: Shape,
    /// Connection set-up time, microseconds.
    pub connect_us: f64,
    /// Submit-to-outcome time, microseconds.
    pub call_us: f64,
    /// Keepalive probes the server answered while the connection was up.
    pub keepalive_probes: u64,
    /// How chunk memory was registered: "fastreg" (per-RPC keys, invalidated when the
    /// call ends) or "persistent" (the chunk pools stay reachable by the server for the
    /// connection's life).
    pub registration: &'static str,
    /// What CONF_RDMA agreed (`--ccp`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ccp: Option<CcpAgreed>,
}

/// The Connection Configuration Protocol's exchange (RFC 5666 §6.2) and what it changed.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CcpAgreed {
    /// The server's largest inline call (`maxcall_sendsize`).
    pub maxcall_sendsize: u32,
    /// The server's receive-buffer alignment (`align`), used for RDMA_MSGP padding.
    pub align: u32,
    /// RDMA Reads the server lets be active against it (`maxrdmaread`).
    pub maxrdmaread: u32,
    /// The send threshold in force afterwards (never above the private-data one).
    pub send_threshold: u32,
}

fn call_err(reason: impl Into<String>) -> CliError {
    CliError::Call(reason.into())
}

/// Makes the call and returns its summary (an error when it fails or does not check).
pub fn run(ep: &Endpoint, opts: &CallOpts) -> Result<Summary, CliError> {
    opts.conn
        .validate()
        .map_err(|e| call_err(format!("connection settings: {e}")))?;
    check_options(opts)?;
    match ep {
        Endpoint::Shm(a) => call::<ShmProvider>(&ShmDevice::new(), a, ep, opts),
        Endpoint::Siw(a) => {
            let dev = SiwDevice::new().map_err(|e| call_err(format!("siw: {e}")))?;
            call::<SiwProvider>(&dev, a, ep, opts)
        }
        #[cfg(feature = "verbs")]
        Endpoint::Verbs(a) => {
            let dev = crate::endpoint::open_verbs().map_err(|e| call_err(format!("verbs: {e}")))?;
            let addr = rpcrdma::fabric::verbs::VerbsAddr(*a);
            call::<rpcrdma::fabric::verbs::VerbsProvider>(&dev, &addr, ep, opts)
        }
    }
}

fn names(t: Target) -> (u32, u32, u32, String) {
    match t {
        Target::Echo(p) => {
            let name = EchoProgram::info(p).map_or("?", |i| i.name);
            (ECHO_PROGRAM, 1, p, name.to_owned())
        }
        Target::Raw {
            prog,
            vers,
            procedure,
        } => (
            prog,
            vers,
            procedure,
            format!("prog {prog:#x} vers {vers} proc {procedure}"),
        ),
    }
}

fn has_arg(t: Target) -> bool {
    match t {
        Target::Echo(p) => matches!(p, echo_proc::ECHO | echo_proc::SINK),
        Target::Raw { .. } => true,
    }
}

fn has_result(t: Target) -> bool {
    matches!(t, Target::Echo(echo_proc::ECHO | echo_proc::SOURCE))
}

fn check_options(o: &CallOpts) -> Result<(), CliError> {
    let bad = |option, reason: &str| CliError::BadArgument {
        option,
        reason: reason.to_owned(),
    };
    if let Target::Echo(p) = o.target {
        if EchoProgram::info(p).is_none() || p == echo_proc::ECHO2 {
            return Err(bad(
                "--proc",
                "echo procedures here: NULL, ECHO, SINK, SOURCE",
            ));
        }
    }
    if o.read_chunk == Choice::On && (!has_arg(o.target) || o.size == 0) {
        return Err(bad(
            "--read-chunk",
            "needs a procedure with a payload argument (--echo, --sink or --prog) and --size > 0",
        ));
    }
    if o.write_chunk == Choice::On && !has_result(o.target) {
        return Err(bad(
            "--write-chunk",
            "needs a procedure with a payload result (--echo or --source)",
        ));
    }
    if o.size > ECHO_MAX_DATA as usize {
        return Err(bad(
            "--size",
            "at most 16 MiB (the echo program's ECHO_MAX_DATA)",
        ));
    }
    if o.size > o.conn.large_buf_size as usize {
        return Err(bad("--size", "larger than the largest chunk buffer"));
    }
    Ok(())
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(3))
        .collect()
}

fn call<P: Provider>(
    dev: &P::Device,
    addr: &P::Addr,
    ep: &Endpoint,
    o: &CallOpts,
) -> Result<Summary, CliError> {
    let unreachable = |reason: String| CliError::Unreachable {
        provider: ep.provider(),
        addr: ep.to_string(),
        reason,
    };
    let t0 = Instant::now();
    let mut conn = Requester::<P>::connect_with(dev, addr, &o.conn)
        .map_err(|e| connect_error(ep.provider(), ep.to_string(), e))?;
    let end = t0 + o.timeout;
    loop {
        conn.poll(Instant::now());
        match conn.state() {
            ConnState::Established => break,
            ConnState::Connecting if Instant::now() < end => std::thread::yield_now(),
            ConnState::Connecting => {
                return Err(unreachable(format!(
                    "no answer within {:.1}s",
                    o.timeout.as_secs_f64()
                )))
            }
            _ => {
                let why = conn
                    .close_reason()
                    .map_or_else(|| "closed".to_string(), |r| r.to_string());
                return Err(unreachable(format!("connection failed: {why}")));
            }
        }
    }
    let connect_us = t0.elapsed().as_secs_f64() * 1e6;
    let ccp = if o.ccp {
        Some(configure(&mut conn, o)?)
    } else {
        None
    };
    let (prog, vers, procedure, name) = names(o.target);
    let payload = pattern(o.size);
    let inline_room = (o.conn.inline_send as usize).saturating_sub(INLINE_OVERHEAD);
    // With message continuation negotiated, a payload that a group of Sends can carry
    // goes in the message itself (the engine then sends it as a group, its reply
    // likewise): no DDP chunk by default.
    let by_group = {
        let chars = conn.peer_chars();
        let per = (conn.thresholds().send as usize).saturating_sub(XMTREQ_HEADER_LEN);
        let limit = chars.req_rx_limit.min(chars.resp_sx_limit) as usize;
        conn.extensions().continuation && o.size + INLINE_OVERHEAD <= limit * per
    };
    // With a server that advertised DDP-targetable receive segments the payload goes
    // as a DDP argument, which the engine places by send-based DDP when it fits a
    // segment and the reply fits inline (one Send, no Read), else by Read chunk.
    let by_ddp = conn.extensions().continuation
        && conn
            .peer_chars()
            .recv_buf
            .is_some_and(|r| r.ddp_segments() > 0);
    // Send-based DDP carries the argument in one Send only when the reply then fits
    // inline; a reply as large as the argument (ECHO) would need a Reply chunk, so a
    // group that carries both (two Sends' worth of round trips fewer) wins.
    let reply_inline =
        !has_result(o.target) || o.size + INLINE_OVERHEAD <= o.conn.inline_recv as usize;
    let read_chunk = has_arg(o.target)
        && o.size > 0
        && (o.read_chunk == Choice::On
            || (o.size > inline_room && (!by_group || (by_ddp && reply_inline))));
    let write_chunk = has_result(o.target)
        && (o.write_chunk == Choice::On
            || (o.write_chunk == Choice::Auto
                && o.reply_chunk == Choice::Auto
                && o.size > inline_room
                && !(by_group && has_arg(o.target))));
    let mut max_reply = match o.target {
        Target::Echo(p) => EchoProgram::info(p)
            .map_or(0, |i| i.max_reply_len(o.size as u32, write_chunk, 0))
            .min(u64::from(u32::MAX)) as u32,
        // Unknown procedure: room for whatever fits a Reply chunk buffer.
        Target::Raw { .. } => o.conn.large_buf_size,
    };
    if o.reply_chunk == Choice::On {
        // A bound above the receive threshold is what makes the engine offer one.
        max_reply = max_reply.max(o.conn.inline_recv);
    }
    if o.reply_chunk == Choice::Off {
        // A bound well within the receive threshold: no Reply chunk is offered.
        max_reply = max_reply.min(256);
    }
    let header = CallHeader {
        xid: 0,
        prog,
        vers,
        procedure,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    };
    // A message larger than inline (no Read chunk asked for) is built in a large
    // buffer: it goes as a continuation group, or in a Position-Zero Read chunk.
    let msg = if !read_chunk && has_arg(o.target) && o.size > inline_room {
        conn.alloc_large()
    } else {
        conn.alloc_msg()
    }
    .map_err(|e| call_err(format!("message buffer: {e}")))?;
    let build =
        |e: rpcrdma_ulp::client::BuildError| call_err(format!("cannot encode the call: {e}"));
    let mut req: CallRequest = if read_chunk {
        let mut arg = conn
            .alloc_large()
            .map_err(|e| call_err(format!("argument buffer: {e}")))?;
        arg.fill(&payload)
            .map_err(|e| call_err(format!("argument buffer: {e}")))?;
        let mut bufs = DdpBufs::new();
        bufs.push(arg).map_err(|_| call_err("argument list full"))?;
        let mut msg = msg;
        let plan = {
            let data = bufs.get(0).map_or(&[][..], RegBuf::as_slice);
            let enc = encode_call(msg.storage_mut(), &header, &EchoData { data }, 1)
                .map_err(|e| call_err(format!("cannot encode the call: {e}")))?;
            CallPlan::new(&enc, &bufs).map_err(build)?
        };
        plan.into_request(msg, bufs, max_reply).map_err(build)?
    } else {
        match o.target {
            Target::Echo(echo_proc::SOURCE) => {
                inline_call(msg, &header, &SourceArgs { len: o.size as u32 }, max_reply)
            }
            Target::Echo(echo_proc::NULL) => inline_call(msg, &header, &Nothing, max_reply),
            Target::Raw { .. } if o.size == 0 => inline_call(msg, &header, &Nothing, max_reply),
            _ => inline_call(msg, &header, &EchoData { data: &payload }, max_reply),
        }
        .map_err(build)?
    };
    if write_chunk {
        let sink = conn
            .alloc_large()
            .map_err(|e| call_err(format!("sink buffer: {e}")))?;
        req.push_write_sink(sink)
            .map_err(|_| call_err("sink list full"))?;
    }
    // Every target's argument is one opaque, so padding it is unambiguous.
    req.pad_inline_ddp = true;
    let (ddp_args, sinks) = (req.ddp_args.len(), req.write_sinks.len());
    let before = conn.stats();
    let t1 = Instant::now();
    let outcome = call_once(&mut conn, req, 1, o.timeout, "reply")?;
    let call_us = t1.elapsed().as_secs_f64() * 1e6;
    let after = conn.stats();
    let long = after.long_calls > before.long_calls;
    let padded = after.padded_calls > before.padded_calls;
    let call_messages = after.call_messages - before.call_messages;
    let send_ddp_items = after.send_ddp_items - before.send_ddp_items;
    let reply_asks = after.send_ddp_reply_asks - before.send_ddp_reply_asks;
    let shape = Shape {
        call: if long {
            "RDMA_NOMSG"
        } else if after.cont_calls > before.cont_calls || send_ddp_items > 0 || reply_asks > 0 {
            "ROPT_XMTREQ"
        } else if padded {
            "RDMA_MSGP"
        } else {
            "RDMA_MSG"
        },
        read_chunks: if padded {
            0
        } else {
            ddp_args.saturating_sub(send_ddp_items as usize)
        } + usize::from(long),
        // A sink whose item was asked for by send-based DDP was not offered.
        write_chunks: sinks.saturating_sub(reply_asks as usize),
        reply_chunks: after.reply_chunks - before.reply_chunks,
        reply_read_chunks: after.read_chunk_replies - before.read_chunk_replies,
        done_sent: after.dones_sent > before.dones_sent,
        call_messages,
        reply_messages: after.reply_messages - before.reply_messages,
        send_ddp_items,
        send_ddp_reply_items: after.send_ddp_reply_items - before.send_ddp_reply_items,
    };
    // The DONE is staged with the outcome: one more poll posts it before closing.
    conn.poll(Instant::now());
    let check = check_reply(o, &outcome, &payload);
    // The probes asked for go out while the connection idles after the reply; each
    // needs `keepalive` of silence and may take a probe timeout to be answered.
    let mut probes = 0u64;
    let answered = |ev: ConnEvent| u64::from(matches!(ev, ConnEvent::ProbeAnswered(_)));
    while let Some(ev) = conn.poll_event() {
        probes += answered(ev);
    }
    if let (Some(k), true) = (o.conn.keepalive, o.probes > 0 && check.is_ok()) {
        let per_probe = k.saturating_add(o.conn.probe_timeout);
        let wait = per_probe.saturating_mul(u32::try_from(o.probes).unwrap_or(u32::MAX));
        // Past what an Instant can hold is the same as no deadline at all.
        let end = Instant::now().checked_add(wait.saturating_add(o.timeout));
        while probes < o.probes {
            conn.poll(Instant::now());
            while let Some(ev) = conn.poll_event() {
                probes += answered(ev);
            }
            if conn.state() != ConnState::Established {
                return Err(call_err(format!(
                    "connection lost after {probes} of {} keepalive probes were answered",
                    o.probes
                )));
            }
            if end.is_some_and(|e| Instant::now() >= e) {
                return Err(call_err(format!(
                    "{probes} of {} keepalive probes answered within {:.1}s",
                    o.probes,
                    wait.as_secs_f64()
                )));
            }
            // Idle between probes: nothing to do but wait for the next one.
            std::thread::yield_now();
        }
    }
    conn.close();
    let summary = Summary {
        provider: ep.provider(),
        addr: ep.to_string(),
        name,
        prog,
        vers,
        procedure,
        size: o.size,
        xid: outcome.xid,
        status: status_words(&outcome),
        reply_len: outcome.reply.as_ref().map_or(0, |r| r.len()),
        write_chunk_octets: outcome.write_sinks.iter().map(RegBuf::len).sum(),
        check: match &check {
            Ok(s) | Err(s) => s.clone(),
        },
        shape,
        connect_us,
        call_us,
        keepalive_probes: probes,
        registration: conn.registration().name(),
        ccp,
    };
    match check {
        Ok(_) => Ok(summary),
        Err(why) => Err(call_err(format!(
            "{} {}: {why}",
            summary.name, summary.status
        ))),
    }
}

/// Submits `req` and polls `conn` until its outcome, or fails naming `what` after
/// `timeout`.
fn call_once<P: Provider>(
    conn: &mut Requester<P>,
    req: CallRequest,
    tag: u64,
    timeout: Duration,
    what: &str,
) -> Result<Outcome, CliError> {
    conn.submit(req, tag).map_err(|e| call_err(e.to_string()))?;
    let end = Instant::now() + timeout;
    loop {
        conn.poll(Instant::now());
        if let Some(out) = conn.poll_outcome() {
            return Ok(out);
        }
        if Instant::now() >= end {
            return Err(call_err(format!(
                "no {what} within {:.1}s ({})",
                timeout.as_secs_f64(),
                stall_report(conn)
            )));
        }
    }
}

/// What the requester holds when a call stalls: enough to tell a call that never
/// left (queued, no credit, no Send posted) from one whose reply never came.
fn stall_report<P: Provider>(conn: &Requester<P>) -> String {
    let s = conn.stats();
    let c = conn.credits().snapshot();
    format!(
        "state {:?}, calls sent {}, messages {}, queued {}, active {}, credits granted {} \
         in flight {}, outcomes {}, unmatched {}, stray completions {}, receive starved {}, \
         outbox overflows {}",
        conn.state(),
        s.calls_sent,
        s.call_messages,
        conn.queued(),
        conn.active(),
        c.granted,
        c.in_flight,
        s.outcomes,
        s.unmatched,
        s.stray_completions,
        s.recv_starved,
        s.outbox_overflows
    )
}

/// Runs CONF_RDMA (RFC 5666 §6) on `conn` and applies the server's answer.
fn configure<P: Provider>(conn: &mut Requester<P>, o: &CallOpts) -> Result<CcpAgreed, CliError> {
    let ours = ConfigRdmaReq {
        maxcall_sendsize: o.conn.inline_send,
        maxreply_sendsize: o.conn.inline_recv,
        maxrdmaread: o.conn.credits,
    };
    let msg = conn
        .alloc_msg()
        .map_err(|e| call_err(format!("message buffer: {e}")))?;
    let req = rpcrdma_ulp::ccp::call(msg, ours)
        .map_err(|e| call_err(format!("cannot encode CONF_RDMA: {e}")))?;
    let outcome = call_once(conn, req, 0, o.timeout, "CONF_RDMA reply")?;
    let theirs = rpcrdma_ulp::ccp::reply(&outcome).map_err(|e| call_err(e.to_string()))?;
    let th = conn.apply_peer_config(rpcrdma_ulp::ccp::peer_config(&theirs));
    Ok(CcpAgreed {
        maxcall_sendsize: theirs.maxcall_sendsize,
        align: theirs.align,
        maxrdmaread: theirs.maxrdmaread,
        send_threshold: th.send,
    })
}

/// No arguments.
struct Nothing;

impl<'d> XdrCodec<'d> for Nothing {
    fn encode(
        &self,
        _: &mut rpcrdma_ulp::ddp::DdpEncoder<'_, 'd>,
    ) -> Result<(), rpcrdma_ulp::ddp::DdpEncodeError> {
        Ok(())
    }

    fn decode(
        _: &mut rpcrdma_ulp::ddp::DdpCursor<'d>,
    ) -> Result<Self, rpcrdma_ulp::ddp::DdpDecodeError> {
        Ok(Nothing)
    }
}

/// How the call ended, with RPC errors named as RFC 5531 names them (PROG_UNAVAIL,
/// PROG_MISMATCH with the range, GARBAGE_ARGS, RPC_MISMATCH, AUTH_ERROR with its reason)
/// from the reply itself.
fn status_words(out: &Outcome) -> String {
    use rpcrdma_ulp::ddp::{reply_results, ReplyError};
    use rpcrdma_ulp::nfs::client::NfsClientError;
    match out.status {
        CallStatus::Success => "SUCCESS".to_owned(),
        CallStatus::RpcError(e) => {
            let bytes = out.reply.as_ref().map_or(&[][..], |r| r.bytes());
            match reply_results(bytes, &[]) {
                Err(r @ (ReplyError::NotSuccess { .. } | ReplyError::Denied { .. })) => {
                    NfsClientError::Rpc(r).to_string()
                }
                _ => format!("RPC error {e:?}"),
            }
        }
        CallStatus::Transport(e) => format!("transport error: {e}"),
        CallStatus::Refused(r) => format!("refused: {r}"),
        CallStatus::Timeout => "timed out".to_owned(),
    }
}

/// Whether the reply is what the procedure promises for what was sent.
fn check_reply(o: &CallOpts, out: &Outcome, payload: &[u8]) -> Result<String, String> {
    if out.status != CallStatus::Success {
        return Err(format!("the call did not succeed ({})", status_words(out)));
    }
    let results = OutcomeResults::new(out);
    let (_, mut cur) = results
        .cursor()
        .map_err(|e| format!("reply does not decode: {e}"))?;
    let msg = match o.target {
        Target::Echo(echo_proc::NULL) => "NULL reply with no results".to_owned(),
        Target::Echo(echo_proc::ECHO) => {
            let d = EchoData::decode(&mut cur).map_err(|e| e.to_string())?;
            if d.data != payload {
                return Err(format!(
                    "echoed {} octets differ from the {} sent",
                    d.data.len(),
                    payload.len()
                ));
            }
            format!("echoed {} octets match", d.data.len())
        }
        Target::Echo(echo_proc::SINK) => {
            let r = SinkRes::decode(&mut cur).map_err(|e| e.to_string())?;
            if r.len as usize != payload.len() || r.crc32c != crc32c(payload) {
                return Err(format!(
                    "server saw {} octets with crc32c {:#010x}; sent {} with {:#010x}",
                    r.len,
                    r.crc32c,
                    payload.len(),
                    crc32c(payload)
                ));
            }
            format!(
                "server saw {} octets, crc32c {:#010x} matches",
                r.len, r.crc32c
            )
        }
        Target::Echo(_) => {
            let d = EchoData::decode(&mut cur).map_err(|e| e.to_string())?;
            if d.data.len() != o.size || !is_source_pattern(d.data) {
                return Err(format!(
                    "{} octets back, expected {} of the source pattern",
                    d.data.len(),
                    o.size
                ));
            }
            format!("{} octets of the source pattern", d.data.len())
        }
        Target::Raw { .. } => {
            // The accepted-reply header with an empty verifier is 24 octets.
            let n = out.reply.as_ref().map_or(0, |r| r.len()).saturating_sub(24);
            return Ok(format!("{n} octets of results (not checked)"));
        }
    };
    cur.finish().map_err(|e| format!("trailing results: {e}"))?;
    Ok(msg)
}

/// The summary as text lines.
pub fn render(s: &Summary) -> String {
    let ccp = s.ccp.map_or(String::new(), |c| {
        format!(
            "ccp: server takes inline calls up to {} octets, aligns receives at {}, allows {} \
             RDMA Reads; send threshold now {}\n",
            c.maxcall_sendsize, c.align, c.maxrdmaread, c.send_threshold
        )
    });
    ccp + &render_call(s)
}

fn render_call(s: &Summary) -> String {
    let chunks = |n: usize, what: &str| match n {
        0 => format!("no {what} chunk"),
        1 => format!("1 {what} chunk"),
        n => format!("{n} {what} chunks"),
    };
    format!(
        "call {} (prog {:#010x} vers {} proc {}) size {} to {} {}\n\
         shape: {}, {}, {}, {}{}{}{}{}\n\
         reply: {} xid {:#010x}, {} octet message{}; {}\n\
         registration: {}\n\
         time: connect {:.1} us, call {:.1} us\n{}",
        s.name,
        s.prog,
        s.vers,
        s.procedure,
        s.size,
        s.provider,
        s.addr,
        s.shape.call,
        chunks(s.shape.read_chunks, "read"),
        chunks(s.shape.write_chunks, "write"),
        chunks(s.shape.reply_chunks as usize, "reply"),
        if s.shape.reply_read_chunks > 0 {
            format!(
                ", reply pulled from the server's Read chunk{}",
                if s.shape.done_sent {
                    " (RDMA_DONE sent)"
                } else {
                    ""
                }
            )
        } else {
            String::new()
        },
        if s.shape.send_ddp_items > 0 {
            format!(
                ", send-based DDP: {} item(s) placed in the server's receive segments",
                s.shape.send_ddp_items
            )
        } else {
            String::new()
        },
        if s.shape.send_ddp_reply_items > 0 {
            format!(
                ", send-based DDP reply: {} item(s) placed in our receive segments",
                s.shape.send_ddp_reply_items
            )
        } else {
            String::new()
        },
        if s.shape.call_messages > 1 || s.shape.reply_messages > 1 {
            format!(
                ", message continuation: call in {} Send(s), reply in {}",
                s.shape.call_messages, s.shape.reply_messages
            )
        } else {
            String::new()
        },
        s.status,
        s.xid,
        s.reply_len,
        if s.write_chunk_octets > 0 {
            format!(" + {} octets by Write chunk", s.write_chunk_octets)
        } else {
            String::new()
        },
        s.check,
        match s.registration {
            "persistent" => "persistent (chunk pools reachable by the server while connected)",
            other => other,
        },
        s.connect_us,
        s.call_us,
        if s.keepalive_probes > 0 {
            format!("keepalive: {} probes answered\n", s.keepalive_probes)
        } else {
            String::new()
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rpcrdma::DEFAULT_PROBE_PROGRAM;

    #[test]
    fn keepalive_probes_name_the_called_program() {
        let k = Duration::from_millis(250);
        let c = requester_config(
            ConnConfig::default(),
            Target::Echo(echo_proc::SINK),
            Some(k),
        );
        assert_eq!(c.keepalive, Some(k));
        assert_eq!(c.probe_program, (ECHO_PROGRAM, 1));
        let raw = Target::Raw {
            prog: 0x3000_0042,
            vers: 3,
            procedure: 9,
        };
        let c = requester_config(ConnConfig::default(), raw, Some(k));
        assert_eq!(c.probe_program, (0x3000_0042, 3));
        // Without --keepalive nothing changes: no probes at all.
        let c = requester_config(ConnConfig::default(), raw, None);
        assert_eq!(c.keepalive, None);
        assert_eq!(c.probe_program, DEFAULT_PROBE_PROGRAM);
        assert_eq!(c.validate(), Ok(()));
    }
}
