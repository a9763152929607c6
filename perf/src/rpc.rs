//! RPC rows: the engine's requester and responder drivers over a fabric provider,
//! serving the built-in programs of `rpcrdma-ulp` through its `Dispatcher`.
//!
//! - `echo` (lat, rate): ECHO of `size` octets; inline when the call and the reply fit
//!   the inline threshold, else the argument in a Read chunk and the result in a Write
//!   chunk (the engine's shape for large payloads).
//! - `read chunk` (bw): DISCARD with its `size`-octet argument in a Read chunk, so the
//!   responder pulls it with RDMA Reads and reads none of it; the reply (the length) is
//!   inline.
//! - `read chunk+crc` (bw): the same with SINK, which CRCs every octet it pulled (a
//!   second pass over the data, compared with memcpy+CRC).
//! - `write chunk` (bw): SOURCE of `size` octets into a Write chunk, so the responder
//!   pushes the result with RDMA Writes.
//! - `sink inline, pre-built` (`rpcrdma-perf scale --proc sink`): SINK with the payload
//!   inline, in messages encoded once per call slot and sent again with a new XID, so
//!   the client's cost per call is a submission and a completion.
//!
//! The responder (a [`Responder`]) busy-polls on the server core; the measuring thread
//! owns every requester connection and busy-polls them round-robin on the client core.
//! Every buffer a call needs is taken before the measured loop starts and comes back in
//! the call's outcome, so the loop allocates nothing: the message buffer comes from the
//! engine's pool, DDP argument and sink buffers are recycled from outcome to call, and
//! call tags index a preallocated table of send times. One call per connection is
//! checked for content before measuring; in the loop a call must succeed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rpcrdma::fabric::Provider;
use rpcrdma::{CallRequest, CallStatus, Outcome};
use rpcrdma::{ConnConfig, ConnState, RegBuf};
use rpcrdma::{Requester, Responder};
use rpcrdma_pools::HugePages;
use rpcrdma_ulp::builtin::{
    echo_proc, is_source_pattern, EchoData, EchoProgram, NullProgram, SinkRes, SourceArgs,
    ECHO_PROGRAM, ECHO_VERSION,
};
use rpcrdma_ulp::client::{inline_call, CallPlan, DdpBufs, OutcomeResults};
use rpcrdma_ulp::ddp::{encode_call, XdrCodec};
use rpcrdma_ulp::program::Dispatcher;
use rpcrdma_ulp::rpc::{CallHeader, OpaqueAuth};

use crate::fabric::FabricKind;
use crate::measure::{Measurement, Meter};
use crate::spec::{pin, BenchError, Mode, RowSpec};

/// How long connection set-up may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Octets an inline call or reply needs beyond its payload: the RPC header (40), the
/// length word, the transport header and room to spare. Payloads that do not fit move
/// to chunks.
const INLINE_OVERHEAD: usize = 128;
/// Smallest large-buffer size the rows configure (the engine needs room for long
/// messages and Reply chunks even when payloads are small).
const MIN_LARGE_BUF: usize = 64 << 10;

/// Which RPC a row makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcBench {
    /// ECHO: inline when it fits, else Read chunk in and Write chunk out.
    Echo,
    /// DISCARD with the argument in a Read chunk.
    ReadChunk,
    /// SINK (CRC32c of every octet) with the argument in a Read chunk.
    ReadChunkCrc,
    /// SOURCE into a Write chunk.
    WriteChunk,
    /// SINK with its payload inline, in call messages the client encodes once before
    /// measuring and sends again for every call (the engine writes only the XID): the
    /// client pays a submission and a completion per call, as one whose NIC moves the
    /// data would; the server receives, CRCs every octet and answers (a storage
    /// appliance's write path; on shm the target's executor also copies the message
    /// into the server's receive buffer, as its NIC would by DMA).
    SinkPrebuilt,
    /// DISCARD of a message too long for inline, sent as a continuation group of Sends
    /// (draft-dnoveck-rpcrdma-rtrext: one round trip).
    LongByGroup,
    /// The same call with extensions off: RDMA_NOMSG and a Position-Zero Read chunk
    /// (the responder's RDMA Read is a second round trip).
    LongByReadChunk,
    /// DISCARD of a bulk argument placed by send-based DDP into the server's receive
    /// segments (draft-dnoveck-rpcrdma-rtrext §7: one Send, one round trip).
    BulkBySendDdp,
    /// The same call to a server whose DDP segments are 64 KiB ([`DDP_SEGMENT`]): the
    /// argument goes as a continuation group, one Send per segment, each placing its
    /// piece (§6.2; still one round trip).
    BulkBySendDdpSegments,
    /// The same call to a server that advertises no DDP segment: a Read chunk the
    /// responder pulls (a second round trip).
    BulkByReadChunk,
    /// SOURCE whose bulk result the server places by send-based DDP into the client's
    /// receive segments (§7.4: no registration, no RDMA Write).
    BulkResultBySendDdp,
    /// The same call from a client that posts no DDP segment: a Write chunk.
    BulkResultByWriteChunk,
}

impl RpcBench {
    /// The row's name in the table.
    pub fn name(self) -> &'static str {
        match self {
            RpcBench::Echo => "echo",
            RpcBench::ReadChunk => "read chunk",
            RpcBench::ReadChunkCrc => "read chunk+crc",
            RpcBench::WriteChunk => "write chunk",
            RpcBench::SinkPrebuilt => "sink inline, pre-built",
            RpcBench::LongByGroup => "long call by group (1 round trip)",
            RpcBench::LongByReadChunk => "long call by read chunk (2 round trips)",
            RpcBench::BulkBySendDdp => "bulk argument by send DDP (1 round trip)",
            RpcBench::BulkBySendDdpSegments => {
                "bulk argument by send DDP, 64 KiB segments (1 round trip)"
            }
            RpcBench::BulkByReadChunk => "bulk argument by read chunk (2 round trips)",
            RpcBench::BulkResultBySendDdp => "bulk result by send DDP",
            RpcBench::BulkResultByWriteChunk => "bulk result by write chunk",
        }
    }
}

/// The DDP segment of the multi-segment send-DDP row.
pub const DDP_SEGMENT: u64 = 64 * 1024;

/// Whether the multi-segment send-DDP row runs at `size`: the argument spans more than
/// one [`DDP_SEGMENT`] and at most a group's worth of them (16).
pub fn spans_segments(size: u64) -> bool {
    size > DDP_SEGMENT && size <= LONG_GROUP_SENDS * DDP_SEGMENT
}

/// Whether a call of `size` octets is too long for `inline` (the long-call rows run).
pub fn is_long(size: u64, inline: u64) -> bool {
    size + INLINE_OVERHEAD as u64 > inline
}

/// Most Sends in the long-call rows' continuation group: the rows give the connection
/// this many credits, and a responder accepts groups of up to its credits, at most 16
/// (XCHAR_REQRXLIM).
const LONG_GROUP_SENDS: u64 = 16;

/// Whether a call of `size` octets fits one continuation group at `inline` octets per
/// Send (each Send spends up to 128 octets on headers): the long-call rows
/// run only at such sizes (beyond, the requester rightly sends a Read chunk).
pub fn fits_a_group(size: u64, inline: u64) -> bool {
    size + INLINE_OVERHEAD as u64
        <= LONG_GROUP_SENDS * inline.saturating_sub(INLINE_OVERHEAD as u64)
}

/// RPC settings from the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RpcParams {
    /// Inline threshold (both directions), octets.
    pub inline: u32,
    /// Credits the requester asks for (capped at what the row keeps in flight).
    pub credits: u32,
    /// The measuring thread's idle policy: `None` busy-polls; `Some(d)` sleeps `d`
    /// after [`CLIENT_IDLE_SPINS`] rounds in a row found nothing, so a client sharing a
    /// core with the server leaves it the core while its calls are in flight.
    pub client_park: Option<Duration>,
}

/// Poll rounds without an outcome a parking client goes through before it sleeps
/// (each round polls every connection: the calls just sent are on their way, so a
/// long spin only burns the core the server needs).
pub const CLIENT_IDLE_SPINS: u32 = 2;

/// The concrete shape of one row's calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shape {
    procedure: u32,
    /// The payload travels in a Read chunk.
    read_chunk: bool,
    /// The result comes back in a Write chunk.
    write_chunk: bool,
    /// The payload goes in the message, built in a large buffer (a long call).
    long_msg: bool,
    /// Messages are encoded once and sent again call after call.
    prebuilt: bool,
    /// The Read-chunk argument must go by send-based DDP (`Some(true)`), or must not
    /// (`Some(false)`); `None`: not checked.
    send_ddp: Option<bool>,
    /// The same for the Write-chunk result (send-based DDP of the reply).
    reply_send_ddp: Option<bool>,
}

impl Shape {
    fn of(bench: RpcBench, size: usize, inline: u32) -> Shape {
        match bench {
            RpcBench::Echo => {
                let chunks = size + INLINE_OVERHEAD > inline as usize;
                Shape {
                    procedure: echo_proc::ECHO,
                    read_chunk: chunks,
                    write_chunk: chunks,
                    long_msg: false,
                    prebuilt: false,
                    send_ddp: None,
                    reply_send_ddp: None,
                }
            }
            RpcBench::SinkPrebuilt => Shape {
                procedure: echo_proc::SINK,
                read_chunk: false,
                write_chunk: false,
                long_msg: false,
                prebuilt: true,
                send_ddp: None,
                reply_send_ddp: None,
            },
            RpcBench::LongByGroup | RpcBench::LongByReadChunk => Shape {
                procedure: echo_proc::DISCARD,
                read_chunk: false,
                write_chunk: false,
                long_msg: true,
                prebuilt: false,
                send_ddp: None,
                reply_send_ddp: None,
            },
            RpcBench::BulkBySendDdp
            | RpcBench::BulkBySendDdpSegments
            | RpcBench::BulkByReadChunk => Shape {
                procedure: echo_proc::DISCARD,
                read_chunk: true,
                write_chunk: false,
                long_msg: false,
                prebuilt: false,
                send_ddp: Some(bench != RpcBench::BulkByReadChunk),
                reply_send_ddp: None,
            },
            RpcBench::ReadChunk => Shape {
                procedure: echo_proc::DISCARD,
                read_chunk: true,
                write_chunk: false,
                long_msg: false,
                prebuilt: false,
                send_ddp: None,
                reply_send_ddp: None,
            },
            RpcBench::ReadChunkCrc => Shape {
                procedure: echo_proc::SINK,
                read_chunk: true,
                write_chunk: false,
                long_msg: false,
                prebuilt: false,
                send_ddp: None,
                reply_send_ddp: None,
            },
            RpcBench::WriteChunk => Shape {
                procedure: echo_proc::SOURCE,
                read_chunk: false,
                write_chunk: true,
                long_msg: false,
                prebuilt: false,
                send_ddp: None,
                reply_send_ddp: None,
            },
            RpcBench::BulkResultBySendDdp | RpcBench::BulkResultByWriteChunk => Shape {
                procedure: echo_proc::SOURCE,
                read_chunk: false,
                write_chunk: true,
                long_msg: false,
                prebuilt: false,
                send_ddp: None,
                reply_send_ddp: Some(bench == RpcBench::BulkResultBySendDdp),
            },
        }
    }

    fn max_reply(self, size: usize) -> Result<u32, BenchError> {
        let info = EchoProgram::info(self.procedure)
            .ok_or_else(|| BenchError::Rpc("echo procedure not declared".into()))?;
        u32::try_from(info.max_reply_len(size as u32, self.write_chunk, 0))
            .map_err(|_| BenchError::Rpc("reply bound exceeds 4 GiB".into()))
    }
}

fn header(procedure: u32) -> CallHeader<'static> {
    CallHeader {
        xid: 0,
        prog: ECHO_PROGRAM,
        vers: ECHO_VERSION,
        procedure,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    }
}

/// The built-in programs, as `rpcrdma serve` offers them: NULL and echo, SOURCE up to
/// `source_max` octets.
pub fn dispatcher(source_max: usize) -> Dispatcher {
    let mut d = Dispatcher::new();
    // Registering two distinct program numbers into a fresh dispatcher cannot clash;
    // a failure would only drop that program, which the check call then reports.
    let _ = d.register(Box::new(EchoProgram::with_source_max(source_max)));
    let _ = d.register(Box::new(NullProgram::default()));
    d
}

/// The connection configuration of a row (both sides).
fn conn_config(spec: &RowSpec, p: RpcParams) -> ConnConfig {
    let depth = spec.depth.max(1);
    let large = spec
        .size
        .max(MIN_LARGE_BUF)
        .max(p.inline as usize)
        .next_multiple_of(4096);
    ConnConfig {
        inline_send: p.inline,
        inline_recv: p.inline,
        credits: p.credits.min(depth + 1).max(1),
        large_buf_size: u32::try_from(large).unwrap_or(u32::MAX),
        // Requester: one argument and one sink per call in flight. Responder: a Read
        // sink and a DDP result per call in flight; both with slack for pool caches.
        large_bufs: 4 * (depth + 1) + 8,
        hugepages: HugePages::Auto,
        ..ConnConfig::default()
    }
}

/// Busy-polls `server` until `stop` is set or, looked at only while idle (every 1024
/// empty polls), `deadline` has passed.
pub fn busy_serve<P: Provider, F: FnMut() -> Option<Dispatcher>>(
    server: &mut Responder<P, Dispatcher, F>,
    stop: &AtomicBool,
    deadline: Option<Instant>,
) {
    let clock = server.clock();
    let mut idle = 0u32;
    // The clock is read after a poll that did work and every 64 empty polls, not per
    // poll, as the fabric rows' echo server reads it: the engine's timers (CM pacing,
    // keepalive, retransmission) run in microseconds to seconds, and an empty poll
    // takes tens of nanoseconds (a clock read on a guest without a TSC clocksource is a
    // system call: tools/lab, engine/DESIGN.md "Lab: what a verbs round trip costs").
    let mut now = clock.now();
    while !stop.load(Ordering::Relaxed) {
        if server.poll(now) == 0 {
            idle = idle.wrapping_add(1);
            if idle & 63 == 0 {
                now = clock.now();
                if idle & 1023 == 0 && deadline.is_some_and(|d| now >= d) {
                    return;
                }
            }
            std::hint::spin_loop();
        } else {
            idle = 0;
            now = clock.now();
        }
    }
}

/// The responder's configuration for `rpcrdma-perf server`: calls of up to `max_size`
/// octets, `p.credits` of them in flight per connection.
pub fn server_config(max_size: usize, p: RpcParams) -> ConnConfig {
    let large = max_size.max(MIN_LARGE_BUF).next_multiple_of(4096);
    ConnConfig {
        inline_send: p.inline,
        inline_recv: p.inline,
        credits: p.credits.max(1),
        large_buf_size: u32::try_from(large).unwrap_or(u32::MAX),
        large_bufs: 4 * (p.credits.max(1) + 1) + 8,
        hugepages: HugePages::Auto,
        ..ConnConfig::default()
    }
}

/// A deterministic payload, so a check call can tell it from garbage.
fn payload_byte(i: usize) -> u8 {
    (i as u8).wrapping_mul(31).wrapping_add(7)
}

/// One requester connection and the buffers its calls cycle through.
struct Conn<P: Provider> {
    conn: Requester<P>,
    /// Free call tags (indices into `posted_at`).
    tags: Vec<u32>,
    posted_at: Vec<Instant>,
    /// DDP argument buffers, filled with the payload once.
    args: Vec<RegBuf>,
    /// Write sink buffers.
    sinks: Vec<RegBuf>,
    /// Encoded call messages sent again call after call (pre-built shapes).
    msgs: Vec<RegBuf>,
    in_flight: usize,
}

/// Everything a row's calls share.
struct Caller<'a> {
    shape: Shape,
    size: usize,
    max_reply: u32,
    payload: &'a [u8],
}

impl Caller<'_> {
    /// Builds and submits one call on `c`. Allocates nothing: the message buffer is
    /// the engine's, the others were set aside before the loop.
    fn submit<P: Provider>(&self, c: &mut Conn<P>, now: Instant) -> Result<(), BenchError> {
        let tag = c
            .tags
            .pop()
            .ok_or_else(|| BenchError::Rpc("no free call tag".into()))?;
        if self.shape.prebuilt {
            let msg = c
                .msgs
                .pop()
                .ok_or_else(|| BenchError::Rpc("no free pre-built message".into()))?;
            return Self::send(c, CallRequest::new(msg, self.max_reply), tag, now);
        }
        let mut msg = if self.shape.long_msg {
            c.conn.alloc_large()
        } else {
            c.conn.take_msg()
        }
        .map_err(|e| BenchError::Rpc(format!("message buffer: {e}")))?;
        let h = header(self.shape.procedure);
        let build = |e: rpcrdma_ulp::client::BuildError| BenchError::Rpc(format!("encode: {e}"));
        let mut req = match self.shape.procedure {
            echo_proc::SOURCE => inline_call(
                msg,
                &h,
                &SourceArgs {
                    len: self.size as u32,
                },
                self.max_reply,
            )
            .map_err(build)?,
            _ if self.shape.read_chunk => {
                let mut bufs = DdpBufs::new();
                let arg = c
                    .args
                    .pop()
                    .ok_or_else(|| BenchError::Rpc("no free argument buffer".into()))?;
                if let Err(back) = bufs.push(arg) {
                    c.args.push(back);
                    return Err(BenchError::Rpc("argument list full".into()));
                }
                let plan = {
                    let data = bufs.get(0).map_or(&[][..], |b| b.as_slice());
                    let call = encode_call(msg.storage_mut(), &h, &EchoData { data }, 1)
                        .map_err(|e| BenchError::Rpc(format!("encode: {e}")))?;
                    CallPlan::new(&call, &bufs).map_err(build)?
                };
                plan.into_request(msg, bufs, self.max_reply)
                    .map_err(build)?
            }
            _ => {
                // Inline ECHO: the payload is copied into the message, as an
                // application would.
                inline_call(msg, &h, &EchoData { data: self.payload }, self.max_reply)
                    .map_err(build)?
            }
        };
        if self.shape.write_chunk {
            let sink = c
                .sinks
                .pop()
                .ok_or_else(|| BenchError::Rpc("no free sink buffer".into()))?;
            if let Err(back) = req.push_write_sink(sink) {
                c.sinks.push(back);
                return Err(BenchError::Rpc("sink list full".into()));
            }
        }
        Self::send(c, req, tag, now)
    }

    /// Submits `req` as call `tag`.
    fn send<P: Provider>(
        c: &mut Conn<P>,
        req: CallRequest,
        tag: u32,
        now: Instant,
    ) -> Result<(), BenchError> {
        c.posted_at[tag as usize] = now;
        match c.conn.submit_at(req, u64::from(tag), now) {
            Ok(()) => {
                c.in_flight += 1;
                Ok(())
            }
            Err(e) => Err(BenchError::Rpc(e.to_string())),
        }
    }

    /// The next finished call on `c`, read where the engine keeps it: its buffers back
    /// into the connection's lists and caches; its tag and status.
    fn next_done<P: Provider>(&self, c: &mut Conn<P>) -> Option<(usize, CallStatus)> {
        let (args, sinks, tags, msgs) = (&mut c.args, &mut c.sinks, &mut c.tags, &mut c.msgs);
        let prebuilt = self.shape.prebuilt;
        let done = c.conn.poll_outcome_with(|o| {
            if prebuilt {
                if let Some(m) = o.msg.take() {
                    msgs.push(m);
                }
            }
            for a in o.ddp_args.drain() {
                args.push(a.data);
            }
            for s in o.write_sinks.drain() {
                sinks.push(s);
            }
            tags.push(o.tag as u32);
            (o.tag as usize, o.status)
        })?;
        c.in_flight = c.in_flight.saturating_sub(1);
        Some(done)
    }

    /// Takes an outcome's buffers back into the connection's lists and returns its tag
    /// and status.
    fn recycle<P: Provider>(&self, c: &mut Conn<P>, mut o: Outcome) -> (usize, CallStatus) {
        if self.shape.prebuilt {
            if let Some(m) = o.msg.take() {
                c.msgs.push(m);
            }
        }
        for a in o.ddp_args.drain() {
            c.args.push(a.data);
        }
        for s in o.write_sinks.drain() {
            c.sinks.push(s);
        }
        let tag = o.tag as usize;
        let status = o.status;
        c.tags.push(o.tag as u32);
        c.in_flight = c.in_flight.saturating_sub(1);
        // The message and reply buffers back to the connection's caches.
        c.conn.recycle(o);
        (tag, status)
    }

    /// Whether the outcome carries exactly what the procedure should return.
    fn verify(&self, o: &Outcome) -> Result<(), String> {
        if o.status != CallStatus::Success {
            return Err(format!("call ended with {:?}", o.status));
        }
        let r = OutcomeResults::new(o);
        let (_, mut cur) = r.cursor().map_err(|e| format!("reply: {e}"))?;
        match self.shape.procedure {
            echo_proc::SINK => {
                let res = SinkRes::decode(&mut cur).map_err(|e| e.to_string())?;
                if res.len as usize != self.size
                    || res.crc32c != rpcrdma::iwarp::crc32c::crc32c(self.payload)
                {
                    return Err(format!(
                        "SINK saw {} octets (crc {:#x}), sent {}",
                        res.len, res.crc32c, self.size
                    ));
                }
            }
            echo_proc::DISCARD => {
                let len = cur.u32().map_err(|e| e.to_string())?;
                if len as usize != self.size {
                    return Err(format!("DISCARD saw {len} octets, sent {}", self.size));
                }
            }
            echo_proc::SOURCE => {
                let d = EchoData::decode(&mut cur).map_err(|e| e.to_string())?;
                if d.data.len() != self.size || !is_source_pattern(d.data) {
                    return Err(format!(
                        "SOURCE returned {} octets not matching the pattern",
                        d.data.len()
                    ));
                }
            }
            _ => {
                let d = EchoData::decode(&mut cur).map_err(|e| e.to_string())?;
                if d.data != self.payload {
                    return Err(format!(
                        "ECHO returned {} octets that differ from the {} sent",
                        d.data.len(),
                        self.size
                    ));
                }
            }
        }
        cur.finish().map_err(|e| e.to_string())
    }
}

/// Polls `conns` until every one is established, the deadline passes, or one fails.
fn establish<P: Provider>(conns: &mut [Conn<P>], end: Instant) -> Result<(), BenchError> {
    loop {
        let mut up = 0;
        for c in conns.iter_mut() {
            c.conn.poll(Instant::now());
            match c.conn.state() {
                ConnState::Established => up += 1,
                ConnState::Connecting => {}
                other => {
                    return Err(BenchError::Setup(format!(
                        "RPC connection ended during set-up ({other:?})"
                    )))
                }
            }
        }
        if up == conns.len() {
            return Ok(());
        }
        if Instant::now() >= end {
            return Err(BenchError::Setup(format!(
                "{up} of {} RPC connections up after {}s",
                conns.len(),
                SETUP_TIMEOUT.as_secs()
            )));
        }
        thread::yield_now();
    }
}

/// Runs one RPC row on provider `F`.
pub fn run<F: FabricKind>(
    spec: &RowSpec,
    bench: RpcBench,
    params: RpcParams,
    mut meter: Meter,
    connect: Option<&str>,
) -> Result<Measurement, BenchError> {
    let mut cfg = conn_config(spec, params);
    // The read-chunk row is the same call between peers without extensions; both
    // long-call rows have credits enough for a group of 16 Sends (a
    // responder accepts groups of up to its credits: XCHAR_REQRXLIM).
    cfg.extensions = bench != RpcBench::LongByReadChunk;
    if matches!(bench, RpcBench::LongByGroup | RpcBench::LongByReadChunk) {
        cfg.credits = cfg.credits.max(LONG_GROUP_SENDS as u32);
        // The whole RPC message (call header and SIZE octets) is built in one large
        // buffer, so it needs room beyond SIZE.
        let whole = spec.size.saturating_add(4096).next_multiple_of(4096);
        cfg.large_buf_size = cfg
            .large_buf_size
            .max(u32::try_from(whole).unwrap_or(u32::MAX));
    }
    // The send-DDP rows post DDP segments and advertise them (the same configuration
    // serves both ends here: the server's for arguments, the client's for results),
    // and use them on every provider, shm too (where the device default is not to:
    // DESIGN.md, "Shape choice"), so the rows compare the shapes.
    // The other rows post none, so their shapes stay what they compare (a server
    // would otherwise post them by default on siw and take arguments so).
    let send_ddp = matches!(
        bench,
        RpcBench::BulkBySendDdp | RpcBench::BulkResultBySendDdp | RpcBench::BulkBySendDdpSegments
    );
    cfg.send_ddp = Some(send_ddp);
    cfg.send_ddp_max = send_ddp.then_some(u32::MAX);
    if bench == RpcBench::BulkBySendDdpSegments {
        // One Send per segment: the group needs a credit each (a responder accepts
        // groups of up to its credits, at most 16).
        cfg.send_ddp_segment = Some(DDP_SEGMENT as u32);
        cfg.credits = cfg.credits.max(LONG_GROUP_SENDS as u32);
    }
    cfg.validate()
        .map_err(|e| BenchError::Setup(format!("connection configuration: {e}")))?;
    let shape = Shape::of(bench, spec.size, params.inline);
    if let Some(remote) = connect {
        let addr = F::parse_addr(remote)?;
        client::<F>(spec, &cfg, shape, &addr, params.client_park, &mut meter)?;
        return Ok(meter.finish());
    }
    let addr = F::unique_addr();
    let source_max = spec.size.max(1);
    let mut server =
        Responder::<F::P, Dispatcher, _>::bind(F::open()?, &addr, cfg.clone(), move || {
            Some(dispatcher(source_max))
        })
        .map_err(|e| BenchError::Setup(format!("server: {e}")))?;
    let stop = Arc::new(AtomicBool::new(false));
    // The server outlives set-up and the row; it stops by itself at the row's hard
    // deadline if the measuring thread never tells it to.
    let server_deadline = meter.deadline() + SETUP_TIMEOUT;
    let server_core = spec.server_core;
    let server_thread = {
        let stop = stop.clone();
        thread::spawn(move || {
            pin(server_core);
            busy_serve(&mut server, &stop, Some(server_deadline));
        })
    };
    let result = client::<F>(spec, &cfg, shape, &addr, params.client_park, &mut meter);
    stop.store(true, Ordering::Relaxed);
    if server_thread.join().is_err() {
        return Err(BenchError::Setup("RPC server thread panicked".into()));
    }
    result?;
    Ok(meter.finish())
}

fn client<F: FabricKind>(
    spec: &RowSpec,
    cfg: &ConnConfig,
    shape: Shape,
    addr: &<F::P as Provider>::Addr,
    park: Option<Duration>,
    meter: &mut Meter,
) -> Result<(), BenchError> {
    pin(spec.client_core);
    let depth = if spec.mode == Mode::Lat {
        1
    } else {
        spec.depth.max(1) as usize
    };
    let payload: Vec<u8> = (0..spec.size).map(payload_byte).collect();
    let max_reply = shape.max_reply(spec.size)?;
    let caller = Caller {
        shape,
        size: spec.size,
        max_reply,
        payload: &payload,
    };
    let dev = F::open()?;
    let mut conns = Vec::with_capacity(spec.connections.max(1) as usize);
    for _ in 0..spec.connections.max(1) {
        let conn = Requester::<F::P>::connect_with(&dev, addr, cfg)
            .map_err(|e| BenchError::Setup(format!("connect: {e}")))?;
        conns.push(Conn {
            conn,
            tags: (0..depth as u32).rev().collect(),
            posted_at: vec![Instant::now(); depth],
            args: Vec::with_capacity(depth),
            sinks: Vec::with_capacity(depth),
            msgs: Vec::with_capacity(depth),
            in_flight: 0,
        });
    }
    establish(&mut conns, Instant::now() + SETUP_TIMEOUT)?;
    for c in &mut conns {
        for _ in 0..depth {
            if shape.read_chunk {
                let mut b = c
                    .conn
                    .alloc_large()
                    .map_err(|e| BenchError::Memory(format!("argument buffer: {e}")))?;
                b.fill(&payload)
                    .map_err(|e| BenchError::Memory(format!("argument buffer: {e}")))?;
                c.args.push(b);
            }
            if shape.write_chunk {
                let b = c
                    .conn
                    .alloc_large()
                    .map_err(|e| BenchError::Memory(format!("sink buffer: {e}")))?;
                c.sinks.push(b);
            }
            if shape.prebuilt {
                let msg = c
                    .conn
                    .take_msg()
                    .map_err(|e| BenchError::Memory(format!("message buffer: {e}")))?;
                let h = header(shape.procedure);
                let req =
                    inline_call(msg, &h, &EchoData { data: &payload }, max_reply).map_err(|e| {
                        BenchError::Rpc(format!(
                            "a {}-octet inline call: {e} (raise the inline threshold)",
                            spec.size
                        ))
                    })?;
                c.msgs.push(req.msg);
            }
        }
        // One checked call per connection: the rows measure calls that work.
        caller.submit(c, Instant::now())?;
        let end = Instant::now() + SETUP_TIMEOUT;
        let o = loop {
            c.conn.poll(Instant::now());
            if let Some(o) = c.conn.poll_outcome() {
                break o;
            }
            if Instant::now() >= end {
                return Err(BenchError::Rpc("no reply to the check call".into()));
            }
        };
        caller.verify(&o).map_err(BenchError::Rpc)?;
        caller.recycle(c, o);
    }
    meter.restart();
    let before: Vec<_> = conns.iter().map(|c| c.conn.stats()).collect();
    let lat = spec.mode == Mode::Lat;
    let result = measure(&mut conns, &caller, depth, lat, park, meter);
    // A long-call row measures the shape its name says (its round trips), or fails.
    if shape.long_msg {
        for (c, b) in conns.iter().zip(&before) {
            let a = c.conn.stats();
            let calls = a.calls_sent - b.calls_sent;
            let (groups, long) = (a.cont_calls - b.cont_calls, a.long_calls - b.long_calls);
            let want = if cfg.extensions { groups } else { long };
            if want != calls {
                return Err(BenchError::Rpc(format!(
                    "{calls} calls: {groups} by group, {long} by read chunk"
                )));
            }
        }
    }
    // A bulk row measures the shape its name says, or fails.
    type Placed = fn(&rpcrdma::RequesterStats) -> u64;
    let checks: [(Option<bool>, Placed, &str); 2] = [
        (shape.send_ddp, |s| s.send_ddp_items, ""),
        (shape.reply_send_ddp, |s| s.send_ddp_reply_items, "results "),
    ];
    for (want, placed_of, what) in checks {
        let Some(want) = want else { continue };
        for (c, b) in conns.iter().zip(&before) {
            let a = c.conn.stats();
            let calls = a.calls_sent - b.calls_sent;
            let placed = placed_of(&a) - placed_of(b);
            if placed != if want { calls } else { 0 } {
                return Err(BenchError::Rpc(format!(
                    "{calls} calls: {placed} {what}by send-based DDP"
                )));
            }
        }
    }
    // Let what is still in flight finish, so buffers go home before the connections
    // close (bounded: the server is still polling).
    let end = Instant::now() + SETUP_TIMEOUT;
    while conns.iter().any(|c| c.in_flight > 0) && Instant::now() < end {
        for c in &mut conns {
            c.conn.poll(Instant::now());
            while let Some(o) = c.conn.poll_outcome() {
                caller.recycle(c, o);
            }
        }
    }
    result
}

/// The measured loop. Latency mode keeps one call in flight overall, taking the
/// connections in turn; otherwise each connection keeps `depth` in flight. With
/// `park`, rounds that find nothing end in a sleep once [`CLIENT_IDLE_SPINS`] of them
/// came in a row (a system call per idle stretch, none per call).
fn measure<P: Provider>(
    conns: &mut [Conn<P>],
    caller: &Caller<'_>,
    depth: usize,
    lat: bool,
    park: Option<Duration>,
    meter: &mut Meter,
) -> Result<(), BenchError> {
    let mut next = 0usize;
    let mut total_in_flight = 0usize;
    let mut idle = 0u32;
    // Clock reads as in the fabric rows: one per batch of outcomes (its instant is also
    // the send time of the calls submitted right after it), and every 64 empty turns
    // for the engine's timers; none per empty poll.
    let mut now = Instant::now();
    loop {
        if lat {
            if total_in_flight == 0 {
                let n = conns.len();
                caller.submit(&mut conns[next], now)?;
                next = (next + 1) % n;
                total_in_flight += 1;
            }
        } else {
            for c in conns.iter_mut() {
                while c.in_flight < depth {
                    caller.submit(c, now)?;
                    total_in_flight += 1;
                }
            }
        }
        let mut got = 0;
        // The polls take the last instant read; the outcomes a poll brings read the
        // clock once (their completion time, and the next calls' send time).
        for c in conns.iter_mut() {
            c.conn.poll(now);
            let mut done_at = None;
            while let Some((tag, status)) = caller.next_done(c) {
                let done = *done_at.get_or_insert_with(|| {
                    now = Instant::now();
                    now
                });
                got += 1;
                total_in_flight = total_in_flight.saturating_sub(1);
                if status != CallStatus::Success {
                    return Err(BenchError::Rpc(format!("call ended with {status:?}")));
                }
                let at = c.posted_at.get(tag).copied().unwrap_or(done);
                if !meter.tick(done, (done - at).as_nanos() as u64) {
                    return Ok(());
                }
            }
        }
        if got == 0 {
            idle = idle.wrapping_add(1);
            if idle & 63 == 0 {
                now = Instant::now();
                if idle & 1023 == 0 && meter.expired(now) {
                    return Ok(());
                }
            }
            match park {
                Some(d) if idle >= CLIENT_IDLE_SPINS => {
                    thread::sleep(d);
                    now = Instant::now();
                    if meter.expired(now) {
                        return Ok(());
                    }
                }
                _ => std::hint::spin_loop(),
            }
        } else {
            idle = 0;
        }
    }
}
