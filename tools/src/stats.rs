//! Live counters of a running `rpcrdma serve`, and `rpcrdma stats`.
//!
//! The serving loop takes a [`Snapshot`] of its server and connections a few times a
//! second, between bursts of polls (never per call: building one allocates), and
//! publishes it on a [`Board`]. The board's [`Exporter`] answers readers on two
//! endpoints:
//!
//! - always, a Unix socket in the abstract namespace named `rpcrdma-serve-PID`, which
//!   answers every connection with the snapshot as one JSON document and closes (what
//!   `rpcrdma stats PID` reads: no port to choose, no file to clean up, and only local
//!   processes reach it);
//! - with `serve --metrics ADDR`, an HTTP/1.0 endpoint on TCP: `GET /metrics` is the
//!   Prometheus text exposition format, `GET /json` the JSON document.
//!
//! Counters are cumulative per connection (calls, octets, message shapes, RDMA_ERRORs
//! sent, held calls, overruns, stalls) and gauges where they describe now (calls in progress,
//! receives posted, the credit target). A connection's counters go with it when it
//! closes; the server's totals (`calls_total`, octets, connections accepted and refused
//! by reason) keep counting.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::CliError;

/// One connection's counters and gauges.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnSample {
    /// The connection id (the provider's, unique while it lives).
    pub id: String,
    /// The peer, as the provider knows it.
    pub peer: String,
    /// Its state (`Established`, `Draining`, ...).
    pub state: String,
    /// Calls handed to the service.
    pub calls: u64,
    /// Octets of calls received (inline and DDP-eligible data).
    pub bytes_in: u64,
    /// Octets of replies sent (inline and through Write chunks).
    pub bytes_out: u64,
    /// Long calls (Position-Zero Read chunk).
    pub long_calls: u64,
    /// DDP-eligible arguments pulled from Read chunks.
    pub read_chunks: u64,
    /// Results written into Write chunks.
    pub write_chunks: u64,
    /// Replies sent inline.
    pub inline_replies: u64,
    /// Replies written into the Reply chunk.
    pub reply_chunks: u64,
    /// RDMA_ERROR ERR_VERS sent.
    pub err_vers: u64,
    /// RDMA_ERROR ERR_CHUNK sent.
    pub err_chunk: u64,
    /// Calls the service answered with an RPC error.
    pub rpc_errors: u64,
    /// Messages dropped without an answer.
    pub dropped: u64,
    /// Calls beyond the credits granted: protocol violations, dropped.
    pub overruns: u64,
    /// Calls that found every reply context in use (replies' Send completions not yet
    /// reaped) and waited for one, in order; none is lost.
    #[serde(default)]
    pub held: u64,
    /// Calls waiting for a reply context now.
    #[serde(default)]
    pub holding: u64,
    /// Times a call waited for buffers or send-queue room.
    pub stalls: u64,
    /// Calls in progress now (received, not yet fully answered): credits in use.
    pub in_progress: u64,
    /// Receives posted now: the receive queue's depth.
    pub recvs_posted: u64,
    /// The credit grant this connection aims for.
    pub credit_target: u64,
}

/// A server (one serving loop) at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The serving process.
    pub pid: u32,
    /// Provider and address served.
    pub provider: String,
    /// The address served.
    pub addr: String,
    /// Seconds since the server started.
    pub uptime_s: f64,
    /// Connect requests accepted.
    pub accepted: u64,
    /// Connect requests refused over the connection limit.
    pub refused_over_limit: u64,
    /// Connect requests refused by set-up.
    pub refused_setup: u64,
    /// Connections closed at the handshake timeout.
    pub handshake_timeouts: u64,
    /// Connections closed idle.
    pub idle_closed: u64,
    /// Calls served since start.
    pub calls: u64,
    /// Of those, NULL calls.
    pub nulls: u64,
    /// Calls for programs not served.
    pub prog_unavail: u64,
    /// Octets received since start.
    pub bytes_in: u64,
    /// Octets sent since start.
    pub bytes_out: u64,
    /// NFSv4.1 backchannel calls (RFC 8881 §20, over RFC 8167) sent and answered
    /// (accepted, SUCCESS), by callback procedure: CB_NULL probes.
    #[serde(default)]
    pub cb_null_sent: u64,
    /// CB_NULL calls answered.
    #[serde(default)]
    pub cb_null_answered: u64,
    /// CB_COMPOUND calls sent.
    #[serde(default)]
    pub cb_compound_sent: u64,
    /// CB_COMPOUND calls answered.
    #[serde(default)]
    pub cb_compound_answered: u64,
    /// CB_COMPOUNDs carrying CB_RECALL (a read delegation's recall) sent.
    #[serde(default)]
    pub cb_recall_sent: u64,
    /// CB_RECALLs the client answered NFS4_OK.
    #[serde(default)]
    pub cb_recall_answered: u64,
    /// The connections now.
    pub connections: Vec<ConnSample>,
    /// The poll groups (`serve --cores`: one per core; empty when one thread serves).
    #[serde(default)]
    pub groups: Vec<GroupStat>,
}

/// One poll group's counters (`serve --cores`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupStat {
    /// The group's index.
    pub group: usize,
    /// The core its poller was asked to run on.
    pub core: usize,
    /// Whether the poller got that core.
    pub pinned: bool,
    /// Connections it serves now.
    pub connections: u64,
    /// Connections it accepted.
    pub accepted: u64,
    /// Its connections that closed and were freed.
    pub closed: u64,
    /// Completions reaped from its one completion queue.
    pub completions: u64,
    /// Calls its connections received.
    pub calls: u64,
    /// Calls its connections held for a free reply context (served once one freed).
    #[serde(default)]
    pub held: u64,
    /// Calls its connections dropped beyond the credits granted (protocol violations).
    #[serde(default)]
    pub overruns: u64,
    /// Depth of its shared receive queue (0: its connections post their own receives).
    #[serde(default)]
    pub srq_depth: u64,
    /// The fewest receives the shared queue held right after a Send took one (above 0:
    /// no Send found it empty).
    #[serde(default)]
    pub srq_low: u64,
    /// The credits each of its connections on the shared queue may grant now.
    #[serde(default)]
    pub receive_share: u64,
    /// Its connections on the shared queue.
    #[serde(default)]
    pub srq_connections: u64,
    /// Receives the shared queue has promised its connections (never above its depth).
    #[serde(default)]
    pub srq_promised: u64,
    /// Shared receives were asked for, but the device checks a shared queue's buffers
    /// against each queue pair's protection domain (kernel verbs) and connections have
    /// their own: no shared queue, each connection posts its own receives.
    #[serde(default)]
    pub srq_unusable: bool,
}

/// Escapes a Prometheus label value.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Snapshot {
    /// The Prometheus text exposition format (version 0.0.4).
    pub fn prometheus(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, v: f64| {
            let _ = writeln!(s, "# HELP rpcrdma_{name} {help}");
            let _ = writeln!(s, "# TYPE rpcrdma_{name} {kind}");
            let _ = writeln!(s, "rpcrdma_{name} {v}");
        };
        metric(
            "uptime_seconds",
            "gauge",
            "Seconds since the server started.",
            self.uptime_s,
        );
        metric(
            "connections",
            "gauge",
            "Connections now.",
            self.connections.len() as f64,
        );
        let totals: [(&str, &str, u64); 16] = [
            (
                "accepted_total",
                "Connect requests accepted.",
                self.accepted,
            ),
            (
                "refused_over_limit_total",
                "Connect requests refused over --max-connections.",
                self.refused_over_limit,
            ),
            (
                "refused_setup_total",
                "Connect requests refused by set-up.",
                self.refused_setup,
            ),
            (
                "handshake_timeouts_total",
                "Connections closed at the handshake timeout.",
                self.handshake_timeouts,
            ),
            (
                "idle_closed_total",
                "Connections closed idle.",
                self.idle_closed,
            ),
            ("calls_total", "Calls served.", self.calls),
            ("null_calls_total", "NULL calls served.", self.nulls),
            (
                "prog_unavail_total",
                "Calls for programs not served.",
                self.prog_unavail,
            ),
            (
                "received_bytes_total",
                "Octets of calls received.",
                self.bytes_in,
            ),
            (
                "sent_bytes_total",
                "Octets of replies sent.",
                self.bytes_out,
            ),
            (
                "cb_null_sent_total",
                "NFSv4.1 CB_NULL backchannel calls sent.",
                self.cb_null_sent,
            ),
            (
                "cb_null_answered_total",
                "NFSv4.1 CB_NULL backchannel calls answered.",
                self.cb_null_answered,
            ),
            (
                "cb_compound_sent_total",
                "NFSv4.1 CB_COMPOUND backchannel calls sent.",
                self.cb_compound_sent,
            ),
            (
                "cb_compound_answered_total",
                "NFSv4.1 CB_COMPOUND backchannel calls answered.",
                self.cb_compound_answered,
            ),
            (
                "cb_recall_sent_total",
                "NFSv4.1 CB_RECALL backchannel calls (delegation recalls) sent.",
                self.cb_recall_sent,
            ),
            (
                "cb_recall_answered_total",
                "NFSv4.1 CB_RECALL backchannel calls answered NFS4_OK.",
                self.cb_recall_answered,
            ),
        ];
        for (name, help, v) in totals {
            metric(name, "counter", help, v as f64);
        }
        type Field = fn(&ConnSample) -> u64;
        let per_conn: [(&str, &str, &str, Field); 18] = [
            (
                "conn_calls_total",
                "counter",
                "Calls of the connection.",
                |c| c.calls,
            ),
            (
                "conn_received_bytes_total",
                "counter",
                "Octets received.",
                |c| c.bytes_in,
            ),
            ("conn_sent_bytes_total", "counter", "Octets sent.", |c| {
                c.bytes_out
            }),
            (
                "conn_long_calls_total",
                "counter",
                "Long calls (Position-Zero Read chunk).",
                |c| c.long_calls,
            ),
            (
                "conn_read_chunks_total",
                "counter",
                "Arguments pulled from Read chunks.",
                |c| c.read_chunks,
            ),
            (
                "conn_write_chunks_total",
                "counter",
                "Results pushed into Write chunks.",
                |c| c.write_chunks,
            ),
            (
                "conn_inline_replies_total",
                "counter",
                "Replies sent inline.",
                |c| c.inline_replies,
            ),
            (
                "conn_reply_chunks_total",
                "counter",
                "Replies written into Reply chunks.",
                |c| c.reply_chunks,
            ),
            (
                "conn_err_vers_total",
                "counter",
                "RDMA_ERROR ERR_VERS sent.",
                |c| c.err_vers,
            ),
            (
                "conn_err_chunk_total",
                "counter",
                "RDMA_ERROR ERR_CHUNK sent.",
                |c| c.err_chunk,
            ),
            (
                "conn_rpc_errors_total",
                "counter",
                "Calls answered with an RPC error.",
                |c| c.rpc_errors,
            ),
            (
                "conn_overruns_total",
                "counter",
                "Calls beyond the credits granted (protocol violations, dropped).",
                |c| c.overruns,
            ),
            (
                "conn_held_total",
                "counter",
                "Calls held until a reply context freed (none lost).",
                |c| c.held,
            ),
            (
                "conn_holding",
                "gauge",
                "Calls waiting for a reply context now.",
                |c| c.holding,
            ),
            (
                "conn_stalls_total",
                "counter",
                "Waits for buffers or send-queue room.",
                |c| c.stalls,
            ),
            (
                "conn_in_progress",
                "gauge",
                "Calls in progress (credits in use).",
                |c| c.in_progress,
            ),
            (
                "conn_recvs_posted",
                "gauge",
                "Receives posted (receive-queue depth).",
                |c| c.recvs_posted,
            ),
            (
                "conn_credit_target",
                "gauge",
                "The credit grant aimed for.",
                |c| c.credit_target,
            ),
        ];
        type GroupField = fn(&GroupStat) -> u64;
        let per_group: [(&str, &str, &str, GroupField); 11] = [
            (
                "group_connections",
                "gauge",
                "Connections of the poll group.",
                |g| g.connections,
            ),
            (
                "group_closed_total",
                "counter",
                "Connections of the poll group that closed.",
                |g| g.closed,
            ),
            (
                "group_completions_total",
                "counter",
                "Completions reaped from the poll group's queue.",
                |g| g.completions,
            ),
            (
                "group_calls_total",
                "counter",
                "Calls received by the poll group's connections.",
                |g| g.calls,
            ),
            (
                "group_held_total",
                "counter",
                "Calls the poll group's connections held until a reply context freed.",
                |g| g.held,
            ),
            (
                "group_overruns_total",
                "counter",
                "Calls beyond the credits granted, dropped by the poll group's connections.",
                |g| g.overruns,
            ),
            (
                "group_srq_depth",
                "gauge",
                "Depth of the poll group's shared receive queue (0: none).",
                |g| g.srq_depth,
            ),
            (
                "group_srq_low",
                "gauge",
                "Fewest receives the shared queue held right after a Send took one.",
                |g| g.srq_low,
            ),
            (
                "group_receive_share",
                "gauge",
                "Credits each connection on the shared queue may grant now.",
                |g| g.receive_share,
            ),
            (
                "group_srq_connections",
                "gauge",
                "Connections of the poll group on its shared receive queue.",
                |g| g.srq_connections,
            ),
            (
                "group_srq_promised",
                "gauge",
                "Receives the shared receive queue has promised its connections.",
                |g| g.srq_promised,
            ),
        ];
        for (name, kind, help, get) in per_group {
            if self.groups.is_empty() {
                break;
            }
            let _ = writeln!(s, "# HELP rpcrdma_{name} {help}");
            let _ = writeln!(s, "# TYPE rpcrdma_{name} {kind}");
            for g in &self.groups {
                let _ = writeln!(
                    s,
                    "rpcrdma_{name}{{group=\"{}\",core=\"{}\"}} {}",
                    g.group,
                    g.core,
                    get(g)
                );
            }
        }
        for (name, kind, help, get) in per_conn {
            let _ = writeln!(s, "# HELP rpcrdma_{name} {help}");
            let _ = writeln!(s, "# TYPE rpcrdma_{name} {kind}");
            for c in &self.connections {
                let _ = writeln!(
                    s,
                    "rpcrdma_{name}{{conn=\"{}\",peer=\"{}\"}} {}",
                    label(&c.id),
                    label(&c.peer),
                    get(c)
                );
            }
        }
        s
    }

    /// A table for people: the totals, then a line per connection.
    pub fn table(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "rpcrdma serve (pid {}) on {} {}, up {:.1}s: {} connection(s); {} calls ({} NULL, \
             {} PROG_UNAVAIL), {} octets in, {} out; accepted {}, refused {} over the limit \
             and {} by set-up, {} handshake timeouts, {} closed idle; backchannel CB_NULL \
             sent {} answered {}, CB_COMPOUND sent {} answered {}, CB_RECALL sent {} answered {}",
            self.pid,
            self.provider,
            self.addr,
            self.uptime_s,
            self.connections.len(),
            self.calls,
            self.nulls,
            self.prog_unavail,
            self.bytes_in,
            self.bytes_out,
            self.accepted,
            self.refused_over_limit,
            self.refused_setup,
            self.handshake_timeouts,
            self.idle_closed,
            self.cb_null_sent,
            self.cb_null_answered,
            self.cb_compound_sent,
            self.cb_compound_answered,
            self.cb_recall_sent,
            self.cb_recall_answered
        );
        for g in &self.groups {
            let _ = writeln!(
                s,
                "group {} (core {}{}): {} connection(s), {} accepted, {} closed, {} calls, {} \
                 completions, {} held, {} overruns{}",
                g.group,
                g.core,
                if g.pinned { "" } else { ", not pinned" },
                g.connections,
                g.accepted,
                g.closed,
                g.calls,
                g.completions,
                g.held,
                g.overruns,
                if g.srq_depth > 0 {
                    format!(
                        "; shared receive queue {} deep, low {}, {} connection(s) on it, \
                         share {}, {} promised",
                        g.srq_depth, g.srq_low, g.srq_connections, g.receive_share, g.srq_promised
                    )
                } else if g.srq_unusable {
                    "; no shared receive queue (the device checks its buffers against each \
                     connection's protection domain): receives posted per connection"
                        .to_string()
                } else {
                    String::new()
                }
            );
        }
        if self.connections.is_empty() {
            return s;
        }
        let _ = writeln!(
            s,
            "{:<10} {:<24} {:<12} {:>10} {:>12} {:>12} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>5} {:>5} {:>5}",
            "conn", "peer", "state", "calls", "in", "out", "long", "read", "write", "rchunk",
            "errs", "stall", "held", "ovrun", "busy", "recvs", "grant"
        );
        for c in &self.connections {
            let _ = writeln!(
                s,
                "{:<10} {:<24} {:<12} {:>10} {:>12} {:>12} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>6} {:>5} {:>5} {:>5}",
                c.id,
                c.peer,
                c.state,
                c.calls,
                c.bytes_in,
                c.bytes_out,
                c.long_calls,
                c.read_chunks,
                c.write_chunks,
                c.reply_chunks,
                c.err_vers + c.err_chunk + c.rpc_errors,
                c.stalls,
                c.held,
                c.overruns,
                c.in_progress,
                c.recvs_posted,
                c.credit_target
            );
        }
        s
    }
}

/// Where the serving loop publishes its snapshots.
#[derive(Debug, Default)]
pub struct Board {
    latest: Mutex<Snapshot>,
}

impl Board {
    /// Replaces the published snapshot.
    pub fn publish(&self, s: Snapshot) {
        *self.latest.lock().unwrap_or_else(PoisonError::into_inner) = s;
    }

    /// The published snapshot.
    pub fn latest(&self) -> Snapshot {
        self.latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// The name of a serving process's abstract Unix socket.
pub fn socket_name(pid: u32) -> String {
    format!("rpcrdma-serve-{pid}")
}

/// How often the exporter's threads look at their stop flag.
const ACCEPT_POLL: Duration = Duration::from_millis(50);
/// How long a reader may take to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// The threads answering readers; stopped and joined on drop.
#[derive(Debug)]
pub struct Exporter {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    /// The bound metrics address, if any.
    pub metrics: Option<SocketAddr>,
}

impl Exporter {
    /// Starts the abstract-socket endpoint and, if `metrics` is given, the HTTP one.
    pub fn start(board: Arc<Board>, metrics: Option<SocketAddr>) -> Result<Exporter, CliError> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let name = socket_name(std::process::id());
        let unix = UnixAddr::from_abstract_name(name.as_bytes())
            .and_then(|a| UnixListener::bind_addr(&a))
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .map_err(|e| CliError::Serve(format!("stats socket @{name}: {e}")))?;
        {
            let (board, stop) = (board.clone(), stop.clone());
            threads.push(thread::spawn(move || loop {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                match unix.accept() {
                    Ok((mut s, _)) => {
                        let json = serde_json::to_string(&board.latest()).unwrap_or_default();
                        let _ = s.set_nonblocking(false);
                        let _ = s.write_all(json.as_bytes());
                    }
                    Err(_) => thread::sleep(ACCEPT_POLL),
                }
            }));
        }
        let mut bound = None;
        if let Some(addr) = metrics {
            let l = TcpListener::bind(addr)
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .map_err(|e| CliError::Serve(format!("--metrics {addr}: {e}")))?;
            bound = l.local_addr().ok();
            let (board, stop) = (board, stop.clone());
            threads.push(thread::spawn(move || loop {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                match l.accept() {
                    Ok((s, _)) => answer_http(s, &board),
                    Err(_) => thread::sleep(ACCEPT_POLL),
                }
            }));
        }
        Ok(Exporter {
            stop,
            threads,
            metrics: bound,
        })
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Answers one HTTP/1.0 request: `GET /metrics` or `GET /json`, else 404.
fn answer_http(s: TcpStream, board: &Board) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(READ_TIMEOUT));
    let mut line = String::new();
    let mut r = BufReader::new(&s);
    if r.read_line(&mut line).is_err() {
        return;
    }
    // The rest of the request header, up to its blank line.
    let mut h = String::new();
    while r.read_line(&mut h).is_ok_and(|n| n > 2) {
        h.clear();
    }
    let path = line.split_whitespace().nth(1).unwrap_or("");
    let (status, kind, body) = match (line.starts_with("GET "), path) {
        (true, "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4",
            board.latest().prometheus(),
        ),
        (true, "/json") => (
            "200 OK",
            "application/json",
            serde_json::to_string(&board.latest()).unwrap_or_default(),
        ),
        _ => (
            "404 Not Found",
            "text/plain",
            "GET /metrics or /json\n".to_owned(),
        ),
    };
    let mut w = &s;
    let _ = write!(
        w,
        "HTTP/1.0 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

/// What `rpcrdma stats` reads: a process id (its abstract socket) or a `--metrics`
/// address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A local `rpcrdma serve` by process id.
    Pid(u32),
    /// A `--metrics` endpoint.
    Http(SocketAddr),
}

impl Target {
    /// `PID` or `HOST:PORT`.
    pub fn parse(s: &str) -> Result<Target, CliError> {
        if let Ok(pid) = s.parse::<u32>() {
            return Ok(Target::Pid(pid));
        }
        s.parse::<SocketAddr>()
            .map(Target::Http)
            .map_err(|_| CliError::BadArgument {
                option: "TARGET",
                reason: format!("{s:?} is neither a process id nor an IP:PORT metrics address"),
            })
    }
}

/// Reads a snapshot from `target`.
pub fn fetch(target: &Target) -> Result<Snapshot, CliError> {
    let fail = |e: std::io::Error| CliError::Serve(format!("stats from {target:?}: {e}"));
    let body = match target {
        Target::Pid(pid) => {
            let name = socket_name(*pid);
            let addr = UnixAddr::from_abstract_name(name.as_bytes()).map_err(fail)?;
            let mut s = UnixStream::connect_addr(&addr).map_err(|e| {
                CliError::Serve(format!(
                    "no rpcrdma serve with pid {pid} answers on @{name}: {e}"
                ))
            })?;
            s.set_read_timeout(Some(READ_TIMEOUT)).map_err(fail)?;
            let mut body = String::new();
            s.read_to_string(&mut body).map_err(fail)?;
            body
        }
        Target::Http(addr) => {
            let mut s = TcpStream::connect_timeout(addr, READ_TIMEOUT).map_err(fail)?;
            s.set_read_timeout(Some(READ_TIMEOUT)).map_err(fail)?;
            write!(s, "GET /json HTTP/1.0\r\nHost: {addr}\r\n\r\n").map_err(fail)?;
            let mut resp = String::new();
            s.read_to_string(&mut resp).map_err(fail)?;
            let (head, body) = resp.split_once("\r\n\r\n").unwrap_or((&resp, ""));
            if !head.starts_with("HTTP/1.0 200") {
                return Err(CliError::Serve(format!(
                    "stats from {addr}: {}",
                    head.lines().next().unwrap_or("no answer")
                )));
            }
            body.to_owned()
        }
    };
    serde_json::from_str(&body)
        .map_err(|e| CliError::Serve(format!("stats from {target:?}: not a snapshot: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Snapshot {
        Snapshot {
            pid: 7,
            provider: "shm".into(),
            addr: "x".into(),
            calls: 12,
            connections: vec![ConnSample {
                id: "conn#3".into(),
                peer: "pid 9 \"uid\" 0".into(),
                calls: 5,
                recvs_posted: 32,
                ..ConnSample::default()
            }],
            ..Snapshot::default()
        }
    }

    #[test]
    fn prometheus_text_has_totals_and_escaped_per_connection_labels() {
        let t = sample().prometheus();
        assert!(t.contains("# TYPE rpcrdma_calls_total counter\nrpcrdma_calls_total 12\n"));
        assert!(t.contains("rpcrdma_connections 1\n"));
        assert!(t.contains(
            "rpcrdma_conn_calls_total{conn=\"conn#3\",peer=\"pid 9 \\\"uid\\\" 0\"} 5\n"
        ));
        assert!(t.contains("rpcrdma_conn_recvs_posted{conn=\"conn#3\""));
        assert!(t.contains("# TYPE rpcrdma_conn_held_total counter\n"));
        assert!(t.contains("rpcrdma_conn_held_total{conn=\"conn#3\""));
        assert!(t.contains("rpcrdma_conn_holding{conn=\"conn#3\""));
        // Per group only when there are groups.
        assert!(!t.contains("rpcrdma_group_held_total"));
        let mut g = sample();
        g.groups.push(GroupStat {
            group: 1,
            core: 1,
            held: 4,
            overruns: 2,
            ..GroupStat::default()
        });
        let t = g.prometheus();
        assert!(t.contains("rpcrdma_group_held_total{group=\"1\",core=\"1\"} 4\n"));
        assert!(t.contains("rpcrdma_group_overruns_total{group=\"1\",core=\"1\"} 2\n"));
        assert!(g.table().contains("4 held, 2 overruns"));
        // Every sample line is NAME[{labels}] VALUE.
        for l in t.lines().filter(|l| !l.starts_with('#')) {
            let v = l.rsplit(' ').next().unwrap();
            assert!(v.parse::<f64>().is_ok(), "{l}");
        }
    }

    #[test]
    fn targets_are_pids_or_socket_addresses() {
        assert_eq!(Target::parse("123").unwrap(), Target::Pid(123));
        assert_eq!(
            Target::parse("127.0.0.1:9").unwrap(),
            Target::Http("127.0.0.1:9".parse().unwrap())
        );
        assert!(Target::parse("nope").is_err());
    }
}
