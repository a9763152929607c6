//! `rpcrdma serve`: the built-in programs (NULL, and echo/sink/source/echo2 with
//! DDP-eligible payloads) on one provider and address, busy-polled on this thread. With
//! `--nfs DIR` or `--nfs-mem` it also serves NFSv3 (RFC 1813) and NFSv4.1 (RFC 8881), both
//! bound to RPC-over-RDMA by RFC 8267, from a host directory or from memory, with MOUNT v3
//! on TCP beside it (and, with `--tcp-port`, NFS on TCP too). NFSv4.1 clients find the
//! export at the root of the namespace (`/`).
//!
//! Prints each connection as it comes and goes and, once a second, calls and payload
//! octets per second. Publishes live counters per connection a few times a second
//! ([`crate::stats`]): `rpcrdma stats PID`, and with `--metrics ADDR` a Prometheus
//! endpoint. Stops on Ctrl-C (SIGINT), SIGTERM or after `--duration`:
//! connections are disconnected and given a bounded time to drain, then the process
//! exits 0.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rpcrdma::fabric::shm::{ShmConfig, ShmDevice, ShmProvider};
use rpcrdma::fabric::siw::{SiwConfig, SiwDevice, SiwProvider};
use rpcrdma::fabric::{ConnId, Provider};
use rpcrdma::wire::ccp::ConfigRdmaReply;
use rpcrdma::{Backchannel, NoRequester, Outcome, RequesterHalf, RequesterRole};
use rpcrdma::{CallView, ReplyWriter, Service, ServiceError};
use rpcrdma::{ConnConfig, ConnState};
use rpcrdma::{PollGroup, Responder, ResponderConn, ResponderCounters, ResponderLimits};
use rpcrdma_ulp::builtin::{
    echo_proc, CcpProgram, EchoProgram, NullProgram, ECHO_MAX_DATA, ECHO_PROGRAM, NULL_PROGRAM,
};
use rpcrdma_ulp::nfs::server::tcp::{TcpConfig, TcpServer};
use rpcrdma_ulp::nfs::server::{
    HostFs, MemFs, MountProgram, MountShared, NfsBackend, NfsConfig, NfsProgram, NfsService,
    NfsShared,
};
use rpcrdma_ulp::program::{DispatchStats, Dispatcher};

use crate::endpoint::Endpoint;
use crate::error::CliError;
use crate::signal;
use crate::stats::{Board, ConnSample, Exporter, GroupStat, Snapshot};

/// How long connections may take to drain at shutdown.
pub(crate) const DRAIN: Duration = Duration::from_secs(3);
/// Idle polls after which the loop yields its core once (a shared machine should not
/// lose a whole core to an idle server; a busy one never yields).
const IDLE_YIELD: u32 = 1024;

/// `serve` settings.
#[derive(Debug, Clone)]
pub struct ServeOpts {
    /// Stop after this long (tests); `None` runs until a signal.
    pub duration: Option<Duration>,
    /// Connection configuration of accepted connections.
    pub conn: ConnConfig,
    /// Largest SOURCE reply.
    pub source_max: usize,
    /// Connection cap, handshake and idle timeouts.
    pub limits: ResponderLimits,
    /// Serve NFSv3 too.
    pub nfs: Option<NfsOpts>,
    /// Serve the live counters over HTTP here (`--metrics`), beside the process's
    /// abstract stats socket.
    pub metrics: Option<SocketAddr>,
    /// Serve with one poll group per listed core (`--cores`); `None` polls every
    /// connection from this thread.
    pub cores: Option<Vec<usize>>,
}

/// What NFS serves from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NfsStore {
    /// A host directory (`--nfs DIR`), confined to it.
    Dir(PathBuf),
    /// An empty in-memory file system (`--nfs-mem`).
    Mem,
}

/// `serve --nfs` settings.
#[derive(Debug, Clone)]
pub struct NfsOpts {
    /// What to export.
    pub store: NfsStore,
    /// The MOUNT path clients ask for (`--export-path`).
    pub export_path: String,
    /// MOUNT v3 TCP port (`--mount-port`; 0 picks a free one).
    pub mount_port: u16,
    /// NFSv3 TCP port (`--tcp-port`), if any.
    pub tcp_port: Option<u16>,
    /// Register MOUNT and NFS with the local rpcbind (`--rpcbind`).
    pub rpcbind: bool,
}

/// Counters the services of every connection add to.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) calls: AtomicU64,
    /// NULL calls answered (pings and keepalive probes).
    pub(crate) nulls: AtomicU64,
    /// Calls for a program not served here.
    pub(crate) prog_unavail: AtomicU64,
    pub(crate) bytes_in: AtomicU64,
    pub(crate) bytes_out: AtomicU64,
}

/// What a connection's calls go to: the built-in programs, or those and NFS.
enum Inner {
    Plain(Dispatcher),
    Nfs(NfsService),
}

impl Inner {
    fn stats(&self) -> DispatchStats {
        match self {
            Inner::Plain(d) => d.stats(),
            Inner::Nfs(n) => n.dispatcher().stats(),
        }
    }
}

/// The dispatcher with counting around it: into the server's totals, and into the
/// connection's own counters (plain fields: only the serving loop touches them).
pub(crate) struct Counted {
    inner: Inner,
    counters: Arc<Counters>,
    calls: u64,
    bytes_in: u64,
    bytes_out: u64,
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    let w = b.get(at..at + 4)?;
    Some(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

impl Service for Counted {
    fn set_peer(&mut self, peer: rpcrdma::fabric::PeerAddr) {
        match &mut self.inner {
            Inner::Plain(d) => d.set_peer(peer),
            Inner::Nfs(n) => n.set_peer(peer),
        }
    }

    fn handle_call(
        &mut self,
        call: &CallView<'_>,
        reply: &mut ReplyWriter<'_>,
    ) -> Result<(), ServiceError> {
        let chunks_before = reply.write_chunks_left();
        let seen = self.inner.stats();
        let r = match &mut self.inner {
            Inner::Plain(d) => d.handle_call(call, reply),
            Inner::Nfs(n) => n.handle_call(call, reply),
        };
        let now = self.inner.stats();
        let c = &self.counters;
        c.calls.fetch_add(1, Ordering::Relaxed);
        c.nulls
            .fetch_add(now.nulls.wrapping_sub(seen.nulls), Ordering::Relaxed);
        c.prog_unavail.fetch_add(
            now.prog_unavail.wrapping_sub(seen.prog_unavail),
            Ordering::Relaxed,
        );
        let ddp_in: usize = call.ddp_items().iter().map(|d| d.data.len()).sum();
        let bytes_in = (call.msg().len() + ddp_in) as u64;
        c.bytes_in.fetch_add(bytes_in, Ordering::Relaxed);
        self.calls += 1;
        self.bytes_in += bytes_in;
        let mut out = reply.len() as u64;
        // A result sent through a Write chunk is not in the body; for ECHO, SOURCE and
        // NFS READ/READLINK (one such result, last) the body's last word is its length.
        let msg = call.msg();
        let echo_like = (be32(msg, 12) == Some(ECHO_PROGRAM)
            && matches!(be32(msg, 20), Some(echo_proc::ECHO | echo_proc::SOURCE)))
            // NFSv3 READ and READLINK replies end with their data's length word too.
            || (be32(msg, 12) == Some(rpcrdma_ulp::nfs::NFS_PROGRAM)
                && be32(msg, 16) == Some(3)
                && matches!(be32(msg, 20), Some(5 | 6)));
        if echo_like && reply.write_chunks_left() < chunks_before && reply.len() >= 4 {
            out += u64::from(be32(reply.as_slice(), reply.len() - 4).unwrap_or(0));
        }
        c.bytes_out.fetch_add(out, Ordering::Relaxed);
        self.bytes_out += out;
        r
    }

    fn on_done(&mut self, xid: u32) {
        match &mut self.inner {
            Inner::Plain(d) => d.on_done(xid),
            Inner::Nfs(n) => n.on_done(xid),
        }
    }

    fn backchannel(&mut self, calls: &mut Backchannel<'_>) {
        if let Inner::Nfs(n) = &mut self.inner {
            n.backchannel(calls);
        }
    }

    fn backchannel_outcome(&mut self, outcome: Outcome) {
        if let Inner::Nfs(n) = &mut self.inner {
            n.backchannel_outcome(outcome);
        }
    }
}

/// Receive-buffer alignment the server announces through CCP (RFC 5666 §6.2), so that
/// a client's RDMA_MSGP padding starts inline bulk data on a cache line: the service's
/// copy of it (to a file, a CRC) then runs on aligned source addresses. Receive buffers
/// are not chained here, so page alignment (the RFC's example) would buy nothing and
/// cost up to 4095 octets of a 4 KiB inline message.
pub const CCP_ALIGN: u32 = 64;

/// What `serve` answers to CONF_RDMA for connections configured as `conn`: the largest
/// inline call it receives, [`CCP_ALIGN`], and as many concurrent RDMA Reads against it
/// as it grants credits (the software providers set no lower bound).
pub fn ccp_reply(conn: &ConnConfig) -> ConfigRdmaReply {
    ConfigRdmaReply {
        maxcall_sendsize: conn.inline_recv,
        align: CCP_ALIGN,
        maxrdmaread: conn.credits,
    }
}

/// The built-in programs, with `echo` (a clone: every connection shares its SOURCE
/// pattern, which is as long as `--max-size`) and the Connection Configuration Protocol
/// answering `ccp`.
pub fn dispatcher(echo: &EchoProgram, ccp: ConfigRdmaReply) -> Result<Dispatcher, CliError> {
    let mut d = Dispatcher::new();
    let err = |e: rpcrdma_ulp::program::RegisterError| CliError::Serve(format!("{e}"));
    d.register(Box::new(echo.clone())).map_err(err)?;
    d.register(Box::new(NullProgram::default())).map_err(err)?;
    d.register(Box::new(CcpProgram::new(ccp))).map_err(err)?;
    Ok(d)
}

/// Runs the server until a signal or the duration ends.
pub fn run(ep: &Endpoint, opts: &ServeOpts) -> Result<(), CliError> {
    opts.conn
        .validate()
        .map_err(|e| CliError::Serve(format!("connection settings: {e}")))?;
    signal::install().map_err(|e| CliError::Serve(format!("cannot catch Ctrl-C: {e}")))?;
    match ep {
        Endpoint::Shm(a) => {
            // The provider's own handshake (connect request, RTU) is bounded alike.
            let cfg = ShmConfig {
                handshake_timeout: opts.limits.handshake_timeout,
                ..ShmConfig::default()
            };
            let dev =
                ShmDevice::with_config(cfg).map_err(|e| CliError::Serve(format!("shm: {e}")))?;
            serve::<ShmProvider>(dev, a, ep, opts)
        }
        Endpoint::Siw(a) => {
            // TCP accept to the end of MPA is bounded alike.
            let cfg = SiwConfig {
                handshake_timeout: opts.limits.handshake_timeout,
                ..SiwConfig::default()
            };
            let dev =
                SiwDevice::with_config(cfg).map_err(|e| CliError::Serve(format!("siw: {e}")))?;
            serve::<SiwProvider>(dev, a, ep, opts)
        }
        #[cfg(feature = "verbs")]
        Endpoint::Verbs(a) => {
            let dev = crate::endpoint::open_verbs()
                .map_err(|e| CliError::Serve(format!("verbs: {e}")))?;
            let addr = rpcrdma::fabric::verbs::VerbsAddr(*a);
            serve::<rpcrdma::fabric::verbs::VerbsProvider>(dev, &addr, ep, opts)
        }
    }
}

pub(crate) fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    // A closed stdout must not stop the server; the line is only informational.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The once-a-second rate line and the stop conditions (a signal, `--duration`), the
/// same for one serving thread and for poll groups.
pub(crate) struct Ticker {
    start: Instant,
    end: Option<Instant>,
    /// When the last line was printed, and the calls and octets in and out then.
    last: (Instant, u64, u64, u64),
}

impl Ticker {
    /// Serving started at `start`, for `duration` if given.
    pub(crate) fn new(start: Instant, duration: Option<Duration>) -> Ticker {
        Ticker {
            start,
            end: duration.map(|d| start + d),
            last: (start, 0, 0, 0),
        }
    }

    /// Prints the rate line when a second has passed since the last one; `connections`
    /// says how many there are (only asked then).
    pub(crate) fn tick(
        &mut self,
        now: Instant,
        counters: &Counters,
        connections: impl FnOnce() -> String,
    ) {
        if now.duration_since(self.last.0) < Duration::from_secs(1) {
            return;
        }
        let secs = now.duration_since(self.last.0).as_secs_f64();
        let calls = counters.calls.load(Ordering::Relaxed);
        let rx = counters.bytes_in.load(Ordering::Relaxed);
        let tx = counters.bytes_out.load(Ordering::Relaxed);
        say(&format!(
            "{:>6.1}s  connections {}  calls/s {:.0}  in {}  out {}",
            now.duration_since(self.start).as_secs_f64(),
            connections(),
            calls.saturating_sub(self.last.1) as f64 / secs,
            rate(rx.saturating_sub(self.last.2), secs),
            rate(tx.saturating_sub(self.last.3), secs),
        ));
        self.last = (now, calls, rx, tx);
    }

    /// Why serving stops now, if it does.
    pub(crate) fn stop_reason(&self, now: Instant) -> Option<&'static str> {
        if signal::requested() {
            Some("signal")
        } else if self.end.is_some_and(|e| now >= e) {
            Some("--duration elapsed")
        } else {
            None
        }
    }
}

pub(crate) fn rate(octets: u64, secs: f64) -> String {
    let v = octets as f64 / secs.max(1e-9);
    if v >= 1e9 {
        format!("{:.2} GB/s", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2} MB/s", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.2} kB/s", v / 1e3)
    } else {
        format!("{v:.0} B/s")
    }
}

/// Serves with connections that can call their clients (RFC 8167) when NFS is served
/// (its NFSv4.1 side probes each client's backchannel), one-role connections otherwise.
fn serve<P: Provider>(
    dev: P::Device,
    addr: &P::Addr,
    ep: &Endpoint,
    opts: &ServeOpts,
) -> Result<(), CliError> {
    if opts.nfs.is_some() {
        serve_as::<P, RequesterHalf>(dev, addr, ep, opts)
    } else {
        serve_as::<P, NoRequester>(dev, addr, ep, opts)
    }
}

fn serve_as<P: Provider, B: RequesterRole + Send + 'static>(
    dev: P::Device,
    addr: &P::Addr,
    ep: &Endpoint,
    opts: &ServeOpts,
) -> Result<(), CliError> {
    let counters = Arc::new(Counters::default());
    // Build one dispatcher up front so a registration problem is reported before
    // listening; each connection gets its own, sharing one echo program's pattern.
    let echo = EchoProgram::with_source_max(opts.source_max.min(ECHO_MAX_DATA as usize));
    let ccp = ccp_reply(&opts.conn);
    dispatcher(&echo, ccp)?;
    let nfs = match &opts.nfs {
        Some(n) => Some(NfsSide::start(n, ep, &opts.conn)?),
        None => None,
    };
    let factory = {
        let counters = counters.clone();
        let shared = nfs.as_ref().map(|n| n.shared.clone());
        let inline_send = opts.conn.inline_send as usize;
        move || {
            let d = dispatcher(&echo, ccp).ok()?;
            let inner = match &shared {
                None => Inner::Plain(d),
                Some(s) => Inner::Nfs(NfsService::new(d, s.clone(), inline_send).ok()?),
            };
            Some(Counted {
                inner,
                counters: counters.clone(),
                calls: 0,
                bytes_in: 0,
                bytes_out: 0,
            })
        }
    };
    let cant_listen = |e: rpcrdma::ConnError| {
        CliError::Serve(format!("cannot listen on {ep} ({}): {e}", ep.provider()))
    };
    if let Some(cores) = &opts.cores {
        // With NFS, the groups' connections call their clients back, as below.
        let groups = PollGroup::<P, Counted, _, B>::bind(
            dev,
            addr,
            opts.conn.clone(),
            factory,
            cores.len(),
            opts.limits,
        )
        .map_err(cant_listen)?;
        let (board, exporter) = announce(ep, opts, nfs.as_ref())?;
        let r = crate::serve_groups::run(
            groups,
            cores,
            ep,
            opts,
            &counters,
            nfs.as_ref().map(|n| &*n.shared),
            &board,
        );
        drop(exporter);
        if let Some(n) = nfs {
            n.stop();
        }
        return r;
    }
    let mut server =
        Responder::<P, Counted, _, B>::bind_roles(dev, addr, opts.conn.clone(), factory)
            .map_err(cant_listen)?;
    server.set_limits(opts.limits);
    let (board, exporter) = announce(ep, opts, nfs.as_ref())?;
    let start = Instant::now();
    let mut next_sample = start;
    let mut ticker = Ticker::new(start, opts.duration);
    let mut known: Vec<(ConnId, bool)> = Vec::new();
    let mut idle = 0u32;
    let reason = loop {
        let now = Instant::now();
        if server.poll(now) == 0 {
            idle = idle.wrapping_add(1);
            if !idle.is_multiple_of(IDLE_YIELD) {
                continue;
            }
            thread::yield_now();
        } else {
            idle = 0;
        }
        // Everything below is bookkeeping, done between bursts of polls.
        let now = Instant::now();
        track(&server, &mut known);
        if now >= next_sample {
            board.publish(snapshot(
                &server,
                nfs.as_ref().map(|n| &*n.shared),
                &counters,
                ep,
                start,
            ));
            next_sample = now + SAMPLE_EVERY;
        }
        ticker.tick(now, &counters, || server.connections().len().to_string());
        if let Some(reason) = ticker.stop_reason(now) {
            break reason;
        }
    };
    say(&format!(
        "rpcrdma serve: stopping ({reason}); disconnecting"
    ));
    let ids: Vec<ConnId> = server.connections().iter().map(|c| c.conn_id()).collect();
    for id in ids {
        // A connection already going away refuses the disconnect; that is fine.
        let _ = server.disconnect(id);
    }
    let drain_end = Instant::now() + DRAIN;
    while !server.connections().is_empty() && Instant::now() < drain_end {
        server.poll(Instant::now());
        track(&server, &mut known);
    }
    board.publish(snapshot(
        &server,
        nfs.as_ref().map(|n| &*n.shared),
        &counters,
        ep,
        start,
    ));
    drop(exporter);
    let left = server.connections().len();
    say_totals(
        &server.counters(),
        &counters,
        nfs.as_ref().map(|n| &*n.shared),
        start,
        left,
    );
    if let Some(n) = nfs {
        n.stop();
    }
    Ok(())
}

/// Says what is served where, and starts publishing the live counters.
fn announce(
    ep: &Endpoint,
    opts: &ServeOpts,
    nfs: Option<&NfsSide>,
) -> Result<(Arc<Board>, Exporter), CliError> {
    say(&format!(
        "rpcrdma serve: listening on {} {ep}; programs NULL {NULL_PROGRAM:#010x} v1, ECHO \
         {ECHO_PROGRAM:#010x} v1 (NULL, ECHO, SINK, SOURCE, ECHO2), CCP 100417 v1 (CONF_RDMA: \
         align {CCP_ALIGN}); inline {} octets, {} credits; Ctrl-C stops",
        ep.provider(),
        opts.conn.inline_recv,
        opts.conn.credits
    ));
    if let Some(n) = nfs {
        n.announce(ep);
    }
    let board = Arc::new(Board::default());
    let exporter = Exporter::start(board.clone(), opts.metrics)?;
    say(&format!(
        "rpcrdma serve: live counters: rpcrdma stats {}{}",
        std::process::id(),
        exporter
            .metrics
            .map(|a| format!(", http://{a}/metrics (Prometheus), http://{a}/json"))
            .unwrap_or_default()
    ));
    Ok((board, exporter))
}

/// The closing lines: connections by outcome, calls and octets.
pub(crate) fn say_totals(
    cc: &ResponderCounters,
    counters: &Counters,
    nfs: Option<&NfsShared>,
    start: Instant,
    left: usize,
) {
    say(&format!(
        "rpcrdma serve: connections: {} accepted, {} refused over --max-connections, {} \
         refused by setup, {} closed at the handshake timeout, {} closed idle",
        cc.accepted, cc.over_limit, cc.refused, cc.handshake_timeouts, cc.idle_closed
    ));
    say(&format!(
        "rpcrdma serve: stopped after {:.1}s: {} calls ({} NULL, {} PROG_UNAVAIL), {} octets \
         in, {} octets out{}{}",
        start.elapsed().as_secs_f64(),
        counters.calls.load(Ordering::Relaxed),
        counters.nulls.load(Ordering::Relaxed),
        counters.prog_unavail.load(Ordering::Relaxed),
        counters.bytes_in.load(Ordering::Relaxed),
        counters.bytes_out.load(Ordering::Relaxed),
        nfs.map(|n| format!("; backchannel: {}", n.counters.callback_line()))
            .unwrap_or_default(),
        if left == 0 {
            String::new()
        } else {
            format!("; {left} connection(s) still draining were dropped")
        }
    ));
}

/// How often the live counters are sampled.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_millis(200);

/// The server's counters and each connection's, now.
fn snapshot<P: Provider, F, B: RequesterRole>(
    server: &Responder<P, Counted, F, B>,
    nfs: Option<&NfsShared>,
    counters: &Counters,
    ep: &Endpoint,
    start: Instant,
) -> Snapshot
where
    F: FnMut() -> Option<Counted>,
{
    let connections = server.connections().iter().map(conn_sample).collect();
    server_snapshot(
        &server.counters(),
        nfs,
        counters,
        ep,
        start,
        connections,
        Vec::new(),
    )
}

/// A snapshot from the server-wide counters (one responder's, or the sum over the poll
/// groups of `serve --cores`) and the connections' and groups' samples.
pub(crate) fn server_snapshot(
    cc: &ResponderCounters,
    nfs: Option<&NfsShared>,
    counters: &Counters,
    ep: &Endpoint,
    start: Instant,
    connections: Vec<ConnSample>,
    groups: Vec<GroupStat>,
) -> Snapshot {
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let callback = |i| nfs.map_or(Default::default(), |n: &NfsShared| n.counters.callback(i));
    let (cb_null, cb_compound, cb_recall) = (callback(0), callback(1), callback(2));
    Snapshot {
        pid: std::process::id(),
        provider: ep.provider().to_string(),
        addr: ep.to_string(),
        uptime_s: start.elapsed().as_secs_f64(),
        accepted: cc.accepted,
        refused_over_limit: cc.over_limit,
        refused_setup: cc.refused,
        handshake_timeouts: cc.handshake_timeouts,
        idle_closed: cc.idle_closed,
        calls: load(&counters.calls),
        nulls: load(&counters.nulls),
        prog_unavail: load(&counters.prog_unavail),
        bytes_in: load(&counters.bytes_in),
        bytes_out: load(&counters.bytes_out),
        cb_null_sent: cb_null.sent,
        cb_null_answered: cb_null.answered,
        cb_compound_sent: cb_compound.sent,
        cb_compound_answered: cb_compound.answered,
        cb_recall_sent: cb_recall.sent,
        cb_recall_answered: cb_recall.answered,
        connections,
        groups,
    }
}

/// One connection's live counters.
pub(crate) fn conn_sample<P: Provider, B: RequesterRole>(
    c: &ResponderConn<P, Counted, B>,
) -> ConnSample {
    use rpcrdma::fabric::QueuePair;
    let st = c.stats();
    let svc = c.service();
    ConnSample {
        id: c.conn_id().to_string(),
        peer: format!("{:?}", c.qp().peer_addr()),
        state: format!("{:?}", c.state()),
        calls: svc.calls,
        bytes_in: svc.bytes_in,
        bytes_out: svc.bytes_out,
        long_calls: st.long_calls,
        read_chunks: st.ddp_args,
        write_chunks: st.ddp_results,
        inline_replies: st.inline_replies,
        reply_chunks: st.chunk_replies,
        err_vers: st.err_vers,
        err_chunk: st.err_chunk,
        rpc_errors: st.service_errors,
        dropped: st.dropped,
        overruns: st.overruns,
        held: st.held,
        holding: st.holding,
        stalls: st.stalls,
        in_progress: c.active() as u64 + st.holding,
        recvs_posted: u64::from(c.recvs_posted()),
        credit_target: u64::from(c.policy().target()),
    }
}

/// Prints connections that came up or went away since the last look.
fn track<P: Provider, F, B: RequesterRole>(
    server: &Responder<P, Counted, F, B>,
    known: &mut Vec<(ConnId, bool)>,
) where
    F: FnMut() -> Option<Counted>,
{
    for c in server.connections() {
        let id = c.conn_id();
        let up = c.state() == ConnState::Established;
        match known.iter_mut().find(|(k, _)| *k == id) {
            Some((_, announced)) => {
                if up && !*announced {
                    *announced = true;
                    say(&format!("connection {id} established"));
                }
            }
            None => {
                known.push((id, up));
                if up {
                    say(&format!("connection {id} established"));
                }
            }
        }
    }
    known.retain(|(id, announced)| {
        let live = server.connections().iter().any(|c| c.conn_id() == *id);
        if !live && *announced {
            say(&format!("connection {id} closed"));
        }
        live
    });
}

/// The NFS side of `serve`: the shared state every connection's NFS program uses, and
/// the TCP servers for MOUNT and NFS.
struct NfsSide {
    shared: Arc<NfsShared>,
    what: String,
    export: String,
    mount: TcpServer,
    tcp: Option<TcpServer>,
    registered: Vec<crate::rpcbind::Registration>,
}

/// The IP address the TCP services listen on: the RDMA address's (so a client finds
/// mountd where it finds NFS/RDMA), or loopback for shm.
fn tcp_ip(ep: &Endpoint) -> IpAddr {
    match ep {
        Endpoint::Shm(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        Endpoint::Siw(a) => a.ip(),
        #[cfg(feature = "verbs")]
        Endpoint::Verbs(a) => a.ip(),
    }
}

impl NfsSide {
    fn start(o: &NfsOpts, ep: &Endpoint, conn: &ConnConfig) -> Result<NfsSide, CliError> {
        let (backend, what): (Arc<dyn NfsBackend>, String) = match &o.store {
            NfsStore::Dir(d) => {
                let fs = HostFs::new(d)
                    .map_err(|e| CliError::Serve(format!("--nfs {}: {e}", d.display())))?;
                (Arc::new(fs), format!("directory {}", d.display()))
            }
            NfsStore::Mem => (Arc::new(MemFs::default()), "memory".to_string()),
        };
        // READ and WRITE data travel in one chunk, which the engine holds in one large
        // buffer: leave room for headers, keep 4 KiB multiples, at most 1 MiB.
        let data = (conn.large_buf_size.saturating_sub(64 * 1024) & !4095).clamp(4096, 1 << 20);
        let cfg = NfsConfig {
            max_read: data,
            max_write: data,
            max_readdir: (64 * 1024).min(data),
            ..NfsConfig::default()
        };
        let shared = NfsShared::new(backend, cfg);
        let mount = MountShared::new(&o.export_path, shared.clone());
        let ip = tcp_ip(ep);
        let bind = |port: u16, flag: &str| {
            TcpListener::bind(SocketAddr::new(ip, port))
                .map_err(|e| CliError::Serve(format!("{flag} {port}: cannot listen on {ip}: {e}")))
        };
        let tcp_cfg = TcpConfig {
            max_record: data as usize + 64 * 1024,
            reply_buf: data as usize + 64 * 1024,
            ..TcpConfig::default()
        };
        let mount_srv = {
            let mount = mount.clone();
            let factory = Arc::new(move |peer: SocketAddr| {
                let mut d = Dispatcher::new();
                // Registration into an empty dispatcher cannot collide.
                let _ = d.register(Box::new(MountProgram::new(
                    mount.clone(),
                    peer.ip().to_string(),
                )));
                d
            });
            TcpServer::spawn(bind(o.mount_port, "--mount-port")?, tcp_cfg, factory)
                .map_err(|e| CliError::Serve(format!("MOUNT over TCP: {e}")))?
        };
        let tcp = match o.tcp_port {
            None => None,
            Some(port) => {
                let (shared, mount) = (shared.clone(), mount.clone());
                let factory = Arc::new(move |peer: SocketAddr| {
                    let mut d = Dispatcher::new();
                    let _ = d.register(Box::new(NfsProgram::new(shared.clone())));
                    let _ = d.register(Box::new(MountProgram::new(
                        mount.clone(),
                        peer.ip().to_string(),
                    )));
                    d
                });
                Some(
                    TcpServer::spawn(bind(port, "--tcp-port")?, tcp_cfg, factory)
                        .map_err(|e| CliError::Serve(format!("NFS over TCP: {e}")))?,
                )
            }
        };
        let mut side = NfsSide {
            shared,
            what,
            export: o.export_path.clone(),
            mount: mount_srv,
            tcp,
            registered: Vec::new(),
        };
        if o.rpcbind {
            side.register(ep)?;
        }
        Ok(side)
    }

    /// Registers MOUNT (and NFS over TCP and RDMA) with the local rpcbind.
    fn register(&mut self, ep: &Endpoint) -> Result<(), CliError> {
        use crate::rpcbind::{set, Registration};
        use rpcrdma_ulp::nfs::mount::{MOUNT_PROGRAM, MOUNT_V3};
        use rpcrdma_ulp::nfs::NFS_PROGRAM;
        let mut want = vec![Registration::tcp(
            MOUNT_PROGRAM,
            MOUNT_V3,
            self.mount.local_addr(),
        )];
        if let Some(t) = &self.tcp {
            want.push(Registration::tcp(NFS_PROGRAM, 3, t.local_addr()));
        }
        match ep {
            Endpoint::Siw(a) => want.push(Registration::rdma(NFS_PROGRAM, 3, *a)),
            #[cfg(feature = "verbs")]
            Endpoint::Verbs(a) => want.push(Registration::rdma(NFS_PROGRAM, 3, *a)),
            Endpoint::Shm(_) => {}
        }
        for r in want {
            set(&r, true).map_err(|e| CliError::Serve(format!("--rpcbind: {e}")))?;
            self.registered.push(r);
        }
        Ok(())
    }

    fn announce(&self, ep: &Endpoint) {
        say(&format!(
            "rpcrdma serve: NFSv3 and NFSv4.1 (program 100003 v3 and v4) on {} {ep}, exporting {} as {}; \
             MOUNT v3 on tcp {}{}{}",
            ep.provider(),
            self.what,
            self.export,
            self.mount.local_addr(),
            match &self.tcp {
                Some(t) => format!("; NFSv3 on tcp {}", t.local_addr()),
                None => String::new(),
            },
            if self.registered.is_empty() {
                ""
            } else {
                "; registered with rpcbind"
            }
        ));
    }

    fn stop(self) {
        for r in &self.registered {
            // Best effort: a stale registration is rpcbind's to age out.
            let _ = crate::rpcbind::set(r, false);
        }
        let lines = self.shared.counters.lines();
        if lines.is_empty() {
            say("rpcrdma serve: nfs: no NFS or MOUNT calls");
        }
        for l in lines {
            say(&format!("rpcrdma serve: nfs: {l}"));
        }
        if let Some(drc) = self.shared.reply_cache() {
            say(&format!("rpcrdma serve: nfs: {}", drc.stats()));
        }
    }
}
