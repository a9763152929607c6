//! The `rpcrdma` command-line tool: decode and encode RPC-over-RDMA transport headers and
//! RFC 8797 private data, report what this build and machine offer the engine, serve the
//! built-in programs (`serve`) and make one call to a server (`call`).
//!
//! Exit status: 0 on success, 1 when the input or the environment is at fault (one line
//! on standard error says what and, where possible, how to fix it), 2 for usage errors.
#![warn(missing_docs)]

mod call;
mod decode;
mod encode;
mod endpoint;
mod error;
mod hex;
mod info;
mod input;
mod nfs;
mod rpc_summary;
mod rpcbind;
mod serve;
mod serve_groups;
mod signal;
mod stats;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgGroup, Args, Parser, Subcommand};
use rpcrdma::wire::header::Limits;
use rpcrdma::wire::private_data::{PrivateData, MAX_INLINE_SIZE};
use rpcrdma::{ConnConfig, Registration};
use rpcrdma_ulp::builtin::echo_proc;
use serde::Serialize;

use crate::call::{Choice, Target};
use crate::endpoint::{Endpoint, ProviderArg};
use crate::error::CliError;

/// Inspect RPC-over-RDMA traffic and this machine's RDMA setup.
#[derive(Debug, Parser)]
#[command(name = "rpcrdma", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print one transport header (or, with --private-data, an RFC 8797 message) as JSON.
    Decode(DecodeArgs),
    /// Turn decode's JSON back into the exact octets.
    Encode(EncodeArgs),
    /// Show built-in providers, RDMA devices, hugepages and CPUs.
    Info(InfoArgs),
    /// Serve the built-in programs (NULL; ECHO/SINK/SOURCE with DDP payloads), and with
    /// --nfs DIR or --nfs-mem NFSv3 and MOUNT, until Ctrl-C.
    Serve(ServeArgs),
    /// Make one RPC to a server and print the reply, the message shape and the timing.
    Call(CallArgs),
    /// NFSv3 or NFSv4.1 client over RPC-over-RDMA: ls, get, put and bench against an NFS
    /// server (ours or Linux nfsd); NFSv3 gets the root handle from MOUNT over TCP.
    Nfs(NfsArgs),
    /// Live counters of a running `rpcrdma serve`: per connection calls, octets, chunk
    /// shapes, RDMA errors sent, credits in use, receive-queue depth.
    Stats(StatsArgs),
}

#[derive(Debug, Args)]
struct StatsArgs {
    /// The server's process id (read over its local stats socket), or the IP:PORT of
    /// its `--metrics` endpoint.
    target: String,
    /// Print the snapshot as JSON.
    #[arg(long, conflicts_with = "prometheus")]
    json: bool,
    /// Print the Prometheus text exposition format.
    #[arg(long)]
    prometheus: bool,
}

#[derive(Debug, Args)]
struct NfsArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// NFS version: 3, or 4.1 (no MOUNT: the export is looked up from the pseudo-root).
    #[arg(long, default_value = "3", value_name = "3|4.1")]
    vers: String,
    /// TCP port of the server's MOUNT service (default: ask its portmapper, port 111).
    #[arg(long, value_name = "PORT")]
    mount_port: Option<u16>,
    /// The export's MOUNT path (NFSv3) or its path from the pseudo-root (NFSv4.1); PATHs
    /// are relative to it.
    #[arg(long, value_name = "PATH", default_value = "/")]
    export: String,
    /// Seconds to wait for the connection and for each reply.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    timeout: f64,
    /// siw only: confirm each Send and RDMA Write with a zero-length RDMA Read before
    /// completing it (strict RC completions), instead of completing it once written to
    /// the socket as Linux siw does (the default). Not against Linux siw peers: kernel
    /// 6.1's siw answers such a Read that it had to queue with the previous request's
    /// length and key (stray octets, a bad CRC, or a bad STag).
    #[arg(long, conflicts_with = "siw_no_confirm")]
    siw_confirm: bool,
    /// siw only: complete Sends and Writes once written to the socket. The default
    /// since siw completes on transmit; accepted so that scripts keep working.
    #[arg(long, hide = true)]
    siw_no_confirm: bool,
    #[command(subcommand)]
    op: NfsCmd,
}

#[derive(Debug, Subcommand)]
enum NfsCmd {
    /// List a directory: type and mode, uid, gid, size, name.
    Ls {
        /// The directory, relative to the export.
        #[arg(default_value = "/")]
        dir: String,
    },
    /// Copy a file from the server to FILE (`-`: standard output).
    Get {
        /// The file, relative to the export.
        path: String,
        /// Where to write it.
        file: PathBuf,
    },
    /// Copy FILE (`-`: standard input) to the server, creating or truncating PATH.
    Put {
        /// What to send.
        file: PathBuf,
        /// Where to put it, relative to the export.
        path: String,
    },
    /// NFSv4.1: open PATH for reading, asking for a read delegation, and hold it while
    /// answering the server's callbacks: a recall (CB_RECALL) is answered and the
    /// delegation returned (DELEGRETURN). Ends once it is returned or after SECONDS.
    Hold {
        /// The file, relative to the export.
        path: String,
        /// The longest to hold it.
        #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
        seconds: f64,
    },
    /// Measure READs or WRITEs of one file (created and filled first): latency
    /// percentiles, ops/s and GB/s.
    Bench {
        /// READ or WRITE.
        #[arg(long, value_enum, default_value = "read")]
        op: BenchOpArg,
        /// Octets per call (at most the server's rtmax/wtmax and 1 MiB).
        #[arg(long, default_value_t = 4096)]
        size: u32,
        /// Calls in flight (at most --credits).
        #[arg(long, default_value_t = 1)]
        depth: u32,
        /// Seconds to run.
        #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
        duration: f64,
        /// The file to use, relative to the export.
        #[arg(long, default_value = "rpcrdma-bench.dat")]
        file: String,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// `nfs bench --op`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BenchOpArg {
    /// READ into Write chunks.
    Read,
    /// UNSTABLE WRITE from Read chunks.
    Write,
}

/// Connection settings shared by serve and call.
#[derive(Debug, Args)]
struct ConnArgs {
    /// Fabric provider.
    #[arg(long, value_enum, default_value = "shm")]
    provider: ProviderArg,
    /// Address: a Unix socket path (or @name) for shm, IP:PORT for siw and verbs.
    #[arg(long)]
    addr: String,
    /// Inline threshold in octets, both directions (a multiple of 1024).
    #[arg(long = "inline", default_value_t = 4096)]
    inline: u32,
    /// Credits (requester: asked for; server: most granted).
    #[arg(long, default_value_t = 32)]
    credits: u32,
    /// Offer no protocol extension (plain RPC-over-RDMA version 1, as the Linux kernel
    /// speaks it): no responder-provided Read chunks for replies.
    #[arg(long)]
    no_extensions: bool,
    /// Send-based DDP (draft-dnoveck-rpcrdma-rtrext §7): post every receive with a DDP
    /// segment of the large buffer size and advertise it, on any provider. Server:
    /// accept bulk arguments so (without the flag, the engine's default: where the
    /// device calls for it, siw yes, shm and verbs no, and only for a client offering
    /// extensions; see engine/DESIGN.md "Send-based DDP by default").
    /// `call`: ask for the reply's bulk item so (a SOURCE's data lands in a receive
    /// segment, no Write chunk).
    #[arg(long)]
    send_ddp: bool,
    /// `call`: the largest bulk item moved by send-based DDP (a call's argument, a
    /// reply's result); without it the device decides (arguments where an RDMA Read
    /// costs a round trip, not on shm; results never: engine/DESIGN.md "Shape choice").
    #[arg(long, value_name = "BYTES")]
    send_ddp_max: Option<u32>,
    /// Octets of each DDP segment posted behind a receive (with send-based DDP), at most
    /// the large buffer size (the default). A bulk item longer than a segment goes as a
    /// continuation group, one Send per segment (engine/DESIGN.md, "Items across
    /// segments").
    #[arg(long, value_name = "BYTES")]
    send_ddp_segment: Option<u32>,
}

#[derive(Debug, Args)]
struct ServeArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// Stop after this many seconds (fractions allowed) instead of waiting for Ctrl-C.
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// Largest SOURCE reply and chunk, in octets.
    #[arg(long, default_value_t = 1 << 20)]
    max_size: u32,
    /// Most connections served at once; connect requests beyond it are rejected.
    #[arg(long, default_value_t = 1024)]
    max_connections: usize,
    /// Close a connection that has not finished connecting after this many seconds
    /// (also bounds the provider's own handshake: shm hello, siw MPA).
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    handshake_timeout: f64,
    /// Disconnect a connection that received nothing for this many seconds (0: never).
    #[arg(long, default_value_t = 360.0, value_name = "SECONDS")]
    idle_timeout: f64,
    /// Also serve NFSv3 from this host directory (nothing outside it is ever served),
    /// with MOUNT v3 on TCP.
    #[arg(long, value_name = "DIR", conflicts_with = "nfs_mem")]
    nfs: Option<PathBuf>,
    /// Also serve NFSv3 from an empty in-memory file system, with MOUNT v3 on TCP.
    #[arg(long)]
    nfs_mem: bool,
    /// The MOUNT path of the export.
    #[arg(long, value_name = "PATH", default_value = "/")]
    export_path: String,
    /// TCP port of MOUNT v3 (0: any free port; the port is printed at start).
    #[arg(long, value_name = "PORT", default_value_t = 20048)]
    mount_port: u16,
    /// Also serve NFSv3 over TCP on this port (0: any free port).
    #[arg(long, value_name = "PORT")]
    tcp_port: Option<u16>,
    /// Register MOUNT and NFS with the local rpcbind (port 111) while serving.
    #[arg(long)]
    rpcbind: bool,
    /// Serve live counters over HTTP on this IP:PORT: GET /metrics (Prometheus text)
    /// and GET /json (port 0: any free port, printed at start). `rpcrdma stats PID`
    /// works without it.
    #[arg(long, value_name = "IP:PORT")]
    metrics: Option<std::net::SocketAddr>,
    /// Serve with one poll group per listed core (`0,1` or `0-3`): a pinned poller
    /// each, one completion queue for all of a group's connections, new connections
    /// to the least loaded group. Without it one thread polls every connection.
    #[arg(long, value_name = "LIST", value_parser = core_list)]
    cores: Option<CoreList>,
}

/// A `--cores` list, in the order given (a core may repeat: two groups on one core).
#[derive(Debug, Clone)]
struct CoreList(Vec<usize>);

/// Parses `0,1`, `0-3`, `0,2-3`.
fn core_list(s: &str) -> Result<CoreList, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim) {
        let num = |x: &str| {
            x.trim()
                .parse::<usize>()
                .map_err(|_| format!("{part:?}: a core is a number; lists look like 0,1 or 0-3"))
        };
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(part)?, num(part)?),
        };
        if lo > hi || hi - lo >= 1024 {
            return Err(format!("{part:?}: a range goes from low to high, e.g. 0-3"));
        }
        out.extend(lo..=hi);
    }
    Ok(CoreList(out))
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("what").args(["null", "echo", "sink", "source", "prog"])))]
struct CallArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// NULL of the echo program.
    #[arg(long)]
    null: bool,
    /// ECHO: the payload comes back (the default).
    #[arg(long)]
    echo: bool,
    /// SINK: the server returns the payload's length and CRC32c.
    #[arg(long)]
    sink: bool,
    /// SOURCE: the server returns --size octets of its pattern.
    #[arg(long)]
    source: bool,
    /// Any program number (with --vers and --proc); the payload is one opaque argument.
    #[arg(long, value_parser = parse_u32)]
    prog: Option<u32>,
    /// Version, with --prog.
    #[arg(long, requires = "prog", default_value = "1", value_parser = parse_u32)]
    vers: u32,
    /// Procedure: with --prog any number; alone, an echo procedure number.
    #[arg(long = "proc", value_parser = parse_u32)]
    procedure: Option<u32>,
    /// Payload octets (ECHO, SINK, --prog) or octets asked for (SOURCE).
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Send the payload in a Read chunk (default: only when it does not fit inline).
    #[arg(long)]
    read_chunk: bool,
    /// Take the result in a Write chunk (default: only when it does not fit inline).
    #[arg(long)]
    write_chunk: bool,
    /// Offer a Reply chunk for the whole reply (default: when the reply may not fit).
    #[arg(long, conflicts_with = "no_reply_chunk")]
    reply_chunk: bool,
    /// Never offer a Reply chunk: a reply too large for inline comes in a Read chunk the
    /// server provides (when both sides offer extensions), else fails with ERR_CHUNK.
    #[arg(long)]
    no_reply_chunk: bool,
    /// Give up connecting, and waiting for the reply, after this many seconds.
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
    timeout: f64,
    /// Probe the server after this many seconds of silence (RFC 8267 §6.7.2): NULL
    /// calls to the program being called.
    #[arg(long, value_name = "SECONDS")]
    keepalive: Option<f64>,
    /// After the reply, stay connected until this many keepalive probes were answered.
    #[arg(long, requires = "keepalive", default_value_t = 0)]
    probes: u64,
    /// How chunk memory is registered: auto (fast registration where the device has
    /// it, else persistent), fastreg (per-RPC keys; refused where the device has no fast
    /// registration) or persistent (the chunk pools stay reachable by the server for the
    /// connection's life). The summary says which was used.
    #[arg(long, default_value = "auto", value_name = "MODE", value_parser = parse_registration)]
    registration: Registration,
    /// Run RFC 5666's Connection Configuration Protocol first (CONF_RDMA) and apply what
    /// the server answers: its inline call limit and its receive-buffer alignment, which
    /// lets a Read-chunk payload that fits inline with padding go as RDMA_MSGP instead.
    #[arg(long)]
    ccp: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

fn parse_registration(s: &str) -> Result<Registration, String> {
    s.parse().map_err(|e| format!("{e}"))
}

fn parse_u32(s: &str) -> Result<u32, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.map_err(|_| format!("{s:?} is not a 32-bit number (decimal or 0x hex)"))
}

fn seconds(option: &'static str, v: f64) -> Result<Duration, CliError> {
    Duration::try_from_secs_f64(v)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| CliError::BadArgument {
            option,
            reason: format!("{v} is not a positive number of seconds"),
        })
}

fn conn_config(a: &ConnArgs, largest: usize) -> ConnConfig {
    // Chunk buffers hold the largest payload plus room for a reply's headers.
    let large = (largest + 64 * 1024).next_multiple_of(4096).max(256 * 1024);
    ConnConfig {
        inline_send: a.inline,
        inline_recv: a.inline,
        credits: a.credits,
        large_buf_size: u32::try_from(large).unwrap_or(u32::MAX),
        extensions: !a.no_extensions,
        // Without the flag, the engine's default (DESIGN.md, "Send-based DDP by
        // default").
        send_ddp: if a.send_ddp {
            Some(true)
        } else {
            ConnConfig::default().send_ddp
        },
        send_ddp_max: a.send_ddp_max,
        send_ddp_segment: a.send_ddp_segment,
        ..ConnConfig::default()
    }
}

#[derive(Debug, Args)]
struct DecodeArgs {
    /// The input as hex text (spaces, colons and 0x prefixes allowed; `-` reads hex text
    /// from standard input).
    #[arg(long, value_name = "HEX", conflicts_with = "file")]
    hex: Option<String>,
    /// A binary file holding the message; `-` (the default) is standard input.
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,
    /// One line of JSON instead of indented JSON.
    #[arg(long)]
    compact: bool,
    /// Decode RFC 8797 connection private data (searched for at any offset) instead of a
    /// transport header.
    #[arg(long)]
    private_data: bool,
    /// With --private-data: this end's advertisement as `SEND,RECV[,ri]` (sizes in octets,
    /// k suffix allowed), used to work out the negotiated thresholds. Default: the
    /// largest sizes with R set, so the result shows the peer's limits.
    #[arg(long, value_name = "SEND,RECV[,ri]", requires = "private_data")]
    local: Option<String>,
    /// Accept any number of chunks and segments and an RPC message with another XID (or
    /// none), e.g. for headers captured without their payload. By default the engine's
    /// limits apply, so errors name the reply the engine would send.
    #[arg(long, conflicts_with = "private_data")]
    permissive: bool,
}

#[derive(Debug, Args)]
struct EncodeArgs {
    /// The JSON (decode's output, or its "header" object); `-` (the default) is standard
    /// input.
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,
    /// Write hex words and a newline instead of raw octets.
    #[arg(long)]
    hex: bool,
}

#[derive(Debug, Args)]
struct InfoArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Read /sys and /proc under this directory instead of / (for tests).
    #[arg(long, hide = true, default_value = "/")]
    root: PathBuf,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Decode(a) => run_decode(&a),
        Command::Encode(a) => run_encode(&a),
        Command::Info(a) => run_info(&a),
        Command::Serve(a) => run_serve(&a),
        Command::Call(a) => run_call(&a),
        Command::Nfs(a) => run_nfs(&a),
        Command::Stats(a) => run_stats(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rpcrdma: {e}");
            ExitCode::FAILURE
        }
    }
}

fn write_stdout(bytes: &[u8]) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|()| out.flush())
        .map_err(CliError::Write)
}

fn print_json<T: Serialize>(value: &T, compact: bool) -> Result<(), CliError> {
    let mut text = if compact {
        serde_json::to_string(value)
    } else {
        serde_json::to_string_pretty(value)
    }
    .map_err(CliError::Json)?;
    text.push('\n');
    write_stdout(text.as_bytes())
}

fn run_decode(a: &DecodeArgs) -> Result<(), CliError> {
    let file = a.file.clone().unwrap_or_else(input::stdin_path);
    let buf = input::octets(a.hex.as_deref(), &file)?;
    if a.private_data {
        let local = match &a.local {
            Some(s) => parse_local(s)?,
            None => PrivateData::new(MAX_INLINE_SIZE, MAX_INLINE_SIZE, true),
        };
        let d = decode::decode_private_data(&buf, local)?;
        return print_json(&d, a.compact);
    }
    let limits = if a.permissive {
        Limits::PERMISSIVE
    } else {
        Limits::DEFAULT
    };
    if rpcrdma::wire::rtr::is_optional(&buf) {
        return print_json(&decode::decode_optional(&buf)?, a.compact);
    }
    let d = decode::decode_header(&buf, &limits)?;
    print_json(&d, a.compact)
}

fn run_encode(a: &EncodeArgs) -> Result<(), CliError> {
    let path = a.file.clone().unwrap_or_else(input::stdin_path);
    let raw = input::read_all(&path)?;
    let text = String::from_utf8_lossy(&raw);
    let enc = encode::encode_json(&text, &Limits::PERMISSIVE)?;
    if let Some(w) = &enc.warning {
        eprintln!("rpcrdma: {w}");
    }
    if a.hex {
        let mut line = hex::format_words(&enc.bytes);
        line.push('\n');
        write_stdout(line.as_bytes())
    } else if std::io::stdout().is_terminal() {
        Err(CliError::BinaryToTerminal)
    } else {
        write_stdout(&enc.bytes)
    }
}

fn run_info(a: &InfoArgs) -> Result<(), CliError> {
    let info = info::gather(Path::new(&a.root));
    if a.json {
        print_json(&info, false)
    } else {
        write_stdout(info::render(&info).as_bytes())
    }
}

fn run_serve(a: &ServeArgs) -> Result<(), CliError> {
    let ep = Endpoint::parse(a.conn.provider, &a.conn.addr)?;
    let duration = a.duration.map(|d| seconds("--duration", d)).transpose()?;
    // 0 turns the idle timeout off; anything else must be a positive duration.
    let idle = if a.idle_timeout == 0.0 {
        None
    } else {
        Some(seconds("--idle-timeout", a.idle_timeout)?)
    };
    let opts = serve::ServeOpts {
        duration,
        conn: conn_config(&a.conn, a.max_size as usize),
        source_max: a.max_size as usize,
        limits: rpcrdma::ResponderLimits {
            max_connections: a.max_connections,
            handshake_timeout: seconds("--handshake-timeout", a.handshake_timeout)?,
            idle_timeout: idle,
        },
        nfs: nfs_opts(a)?,
        metrics: a.metrics,
        cores: a.cores.as_ref().map(|c| c.0.clone()),
    };
    serve::run(&ep, &opts)
}

fn run_stats(a: &StatsArgs) -> Result<(), CliError> {
    let snap = stats::fetch(&stats::Target::parse(&a.target)?)?;
    if a.json {
        print_json(&snap, false)
    } else if a.prometheus {
        write_stdout(snap.prometheus().as_bytes())
    } else {
        write_stdout(snap.table().as_bytes())
    }
}

fn run_nfs(a: &NfsArgs) -> Result<(), CliError> {
    let vers = match a.vers.as_str() {
        "3" => nfs::NfsVers::V3,
        "4.1" => nfs::NfsVers::V41,
        v => {
            return Err(CliError::BadArgument {
                option: "--vers",
                reason: format!("{v:?} is not an NFS version this client knows (3, 4.1)"),
            })
        }
    };
    let ep = Endpoint::parse(a.conn.provider, &a.conn.addr)?;
    let timeout = seconds("--timeout", a.timeout)?;
    let op = match &a.op {
        NfsCmd::Ls { dir } => nfs::NfsOp::Ls(dir.clone()),
        NfsCmd::Get { path, file } => nfs::NfsOp::Get(path.clone(), file.clone()),
        NfsCmd::Put { file, path } => nfs::NfsOp::Put(file.clone(), path.clone()),
        NfsCmd::Hold { path, seconds: s } => {
            if vers != nfs::NfsVers::V41 {
                return Err(CliError::BadArgument {
                    option: "hold",
                    reason: "delegations are NFSv4.1's (--vers 4.1)".into(),
                });
            }
            nfs::NfsOp::Hold(path.clone(), seconds("--seconds", *s)?)
        }
        NfsCmd::Bench {
            op,
            size,
            depth,
            duration,
            file,
            json,
        } => {
            if *depth == 0 || *depth > a.conn.credits {
                return Err(CliError::BadArgument {
                    option: "--depth",
                    reason: format!("{depth} is not within 1..={} (--credits)", a.conn.credits),
                });
            }
            nfs::NfsOp::Bench(nfs::BenchOpts {
                write: *op == BenchOpArg::Write,
                size: *size,
                depth: *depth,
                duration: seconds("--duration", *duration)?,
                path: file.clone(),
                json: *json,
            })
        }
    };
    let opts = nfs::NfsClientOpts {
        vers,
        // One READ or WRITE of up to 1 MiB per chunk buffer.
        conn: conn_config(&a.conn, 1 << 20),
        mount_port: a.mount_port,
        export: a.export.clone(),
        timeout,
        siw_confirm: a.siw_confirm,
        op,
    };
    nfs::run(&ep, &opts)
}

/// The NFS part of `serve`'s settings, if --nfs or --nfs-mem was given.
fn nfs_opts(a: &ServeArgs) -> Result<Option<serve::NfsOpts>, CliError> {
    let store = match (&a.nfs, a.nfs_mem) {
        (Some(dir), _) => serve::NfsStore::Dir(dir.clone()),
        (None, true) => serve::NfsStore::Mem,
        (None, false) => {
            let nfs_only = a.tcp_port.is_some() || a.rpcbind || a.export_path != "/";
            if nfs_only {
                return Err(CliError::BadArgument {
                    option: "--nfs",
                    reason: "--export-path, --tcp-port and --rpcbind need --nfs DIR or \
                             --nfs-mem"
                        .into(),
                });
            }
            return Ok(None);
        }
    };
    if !a.export_path.starts_with('/') {
        return Err(CliError::BadArgument {
            option: "--export-path",
            reason: format!(
                "{:?} is not an absolute path such as / or /srv",
                a.export_path
            ),
        });
    }
    Ok(Some(serve::NfsOpts {
        store,
        export_path: a.export_path.clone(),
        mount_port: a.mount_port,
        tcp_port: a.tcp_port,
        rpcbind: a.rpcbind,
    }))
}

fn run_call(a: &CallArgs) -> Result<(), CliError> {
    let ep = Endpoint::parse(a.conn.provider, &a.conn.addr)?;
    let target = if let Some(prog) = a.prog {
        Target::Raw {
            prog,
            vers: a.vers,
            procedure: a.procedure.unwrap_or(0),
        }
    } else if a.null {
        Target::Echo(echo_proc::NULL)
    } else if a.sink {
        Target::Echo(echo_proc::SINK)
    } else if a.source {
        Target::Echo(echo_proc::SOURCE)
    } else if let (false, Some(p)) = (a.echo, a.procedure) {
        Target::Echo(p)
    } else {
        Target::Echo(echo_proc::ECHO)
    };
    let on = |b: bool| if b { Choice::On } else { Choice::Auto };
    let keepalive = a.keepalive.map(|k| seconds("--keepalive", k)).transpose()?;
    let opts = call::CallOpts {
        target,
        size: if target == Target::Echo(echo_proc::NULL) {
            0
        } else {
            a.size
        },
        read_chunk: on(a.read_chunk),
        write_chunk: on(a.write_chunk),
        reply_chunk: if a.no_reply_chunk {
            Choice::Off
        } else {
            on(a.reply_chunk)
        },
        // One call gains nothing from hugepages, and should not warn about them.
        conn: call::requester_config(
            ConnConfig {
                hugepages: rpcrdma_pools::HugePages::Never,
                registration: a.registration,
                ..conn_config(&a.conn, a.size)
            },
            target,
            keepalive,
        ),
        timeout: seconds("--timeout", a.timeout)?,
        probes: a.probes,
        ccp: a.ccp,
    };
    let summary = call::run(&ep, &opts)?;
    if a.json {
        print_json(&summary, false)
    } else {
        write_stdout(call::render(&summary).as_bytes())
    }
}

/// Parses `SEND,RECV[,ri]` for `--local`.
fn parse_local(s: &str) -> Result<PrivateData, CliError> {
    let bad = |reason: String| CliError::BadArgument {
        option: "--local",
        reason,
    };
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    let (send, recv, ri) = match parts.as_slice() {
        [send, recv] => (*send, *recv, false),
        [send, recv, "ri"] => (*send, *recv, true),
        _ => {
            return Err(bad(format!(
                "expected SEND,RECV or SEND,RECV,ri (e.g. 4k,4k,ri), got {s:?}"
            )))
        }
    };
    let size = |v: &str| -> Result<u32, CliError> {
        let (digits, mult) = match v.strip_suffix(['k', 'K']) {
            Some(d) => (d, 1024),
            None => (v, 1),
        };
        digits
            .parse::<u32>()
            .ok()
            .and_then(|n| n.checked_mul(mult))
            .ok_or_else(|| bad(format!("{v:?} is not a size in octets (e.g. 4096 or 4k)")))
    };
    let local = PrivateData::new(size(send)?, size(recv)?, ri);
    // An advertisement that cannot be encoded could never have been sent.
    local.to_bytes().map_err(|e| {
        bad(format!(
            "{e} (sizes must be multiples of 1024 from 1k to 256k)"
        ))
    })?;
    Ok(local)
}
