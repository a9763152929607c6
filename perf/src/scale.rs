//! `rpcrdma-perf scale`: how the call rate grows with the server's cores.
//!
//! For k = 1, 2, ... of `--server-cores`, a server runs in another process
//! (`rpcrdma-perf server --cores` with the first k cores: one poll group each), and this
//! process measures the RPC echo rate against it with 1..N connections (`--connections`),
//! exactly as `rpcrdma-perf rate --connect` does. Each row is reported beside the
//! one-core row with as many connections (ratio), and with the server's measured cost:
//! the busy time of its groups (time in polls that did work) per call, and each group's
//! busy fraction and share of the calls (read from the server's `group` lines, see
//! [`crate::groups`]).
//!
//! What a row calls (`--proc`): ECHO, whose client costs about what the server does (so
//! on a 2-core machine a second server core only takes the client's), or SINK from
//! pre-built inline messages, which is server-bound (the server receives and CRCs the
//! payload, the client only submits and completes). `--client-park` lets the client
//! sleep while its calls are in flight instead of busy-polling a core the server needs;
//! `--rounds` measures one core and more cores in turns; `--nice` runs client and
//! server each in a session of its own whose autogroup weight is raised, since Linux
//! shares the CPU between sessions, not threads (see the README, "Scaling with server
//! cores"). Each row carries both ends' CPU per call, so a ratio below the cores says
//! whose cost it was.
//!
//! The model for more cores starts from that cost: groups share nothing on the call
//! path (own completion queue, own connections, no lock or shared counter per call), so
//! N cores serve at most N / (busy ns per call) calls a second, until the clients or
//! the fabric run out first. A measured ratio below the model says which: a group
//! busy far less than 100% was waiting for calls, not serving them.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicU64;
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use clap::Parser;
use serde::Serialize;

use crate::cli::{CoreList, ProviderName};
use crate::fabric::{FabricKind, Shm, Siw};
use crate::groups::GroupSample;
use crate::measure::{Budget, Meter};
use crate::rpc::{self, RpcBench, RpcParams};
use crate::spec::{BenchError, Mode, RowSpec};
use crate::units::{self, Amount};

/// `rpcrdma-perf scale`.
#[derive(Debug, Parser)]
#[command(name = "rpcrdma-perf scale")]
pub struct ScaleArgs {
    /// Fabric provider (shm or siw: the server is another process on this host).
    #[arg(long, value_enum, default_value = "shm")]
    pub provider: ProviderName,
    /// The server's cores; rows for the first 1, 2, ... of them.
    #[arg(long, value_parser = core_list, default_value = "0,1")]
    pub server_cores: CoreList,
    /// Core of the measuring (client) thread; unpinned by default (on a machine with
    /// no core to spare it runs wherever the scheduler finds room).
    #[arg(long)]
    pub client_core: Option<usize>,
    /// Connection counts, one row each.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    pub connections: Vec<u32>,
    /// The call: `echo` (ECHO, inline when it fits: client and server cost alike),
    /// `sink` (SINK, the payload inline in messages the client built once: the server
    /// receives it and CRCs every octet, the client only submits and completes: a
    /// storage appliance's write path, server-bound) or `sink-chunk` (SINK with the
    /// payload in a Read chunk; on shm the client's side executes the server's Read,
    /// so the copy is the client's cost).
    #[arg(long = "proc", value_enum, default_value = "echo")]
    pub procedure: ScaleProc,
    /// Payload, octets.
    #[arg(long, default_value = "64", value_parser = units::parse_size)]
    pub size: u64,
    /// Inline threshold, octets (both ends); default 4k, and for `sink` the payload
    /// and 1 KiB of headers, rounded up to 1 KiB.
    #[arg(long = "inline", value_parser = units::parse_size)]
    pub inline: Option<u64>,
    /// When the client's polls find nothing 64 times in a row, it sleeps this long
    /// (leaving its core to the server while its calls are in flight); 0 busy-polls.
    #[arg(long, default_value = "0", value_parser = units::parse_duration)]
    pub client_park: Duration,
    /// Calls in flight per connection.
    #[arg(long, default_value_t = 16)]
    pub depth: u32,
    /// The nice value of the server's and the client's scheduling groups. Each runs in
    /// a session of its own, and Linux's autogroup scheduling
    /// (`kernel.sched_autogroup_enabled`) shares the CPU between sessions, not
    /// threads: under other sessions' load a session gets about the same CPU with one
    /// busy thread or two, so a second core shows only as far as the other sessions
    /// leave it idle. A negative value (root) weights both sessions over the others for
    /// the run, as dedicated cores would; 0 leaves them an equal share.
    #[arg(long, default_value_t = 0, allow_hyphen_values = true,
          value_parser = clap::value_parser!(i32).range(-20..=19))]
    pub nice: i32,
    /// Measure each row for this long.
    #[arg(long, default_value = "1s", value_parser = units::parse_duration)]
    pub duration: Duration,
    /// Warm-up before each row.
    #[arg(long, default_value = "200ms", value_parser = units::parse_duration)]
    pub warmup: Duration,
    /// Measure every row this many times, one-core and more-core rows taking turns
    /// (on a shared machine the load moves: each round's ratio compares rows measured
    /// seconds apart, and the summary gives the median and range of the rounds).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub rounds: u32,
    /// Print the rows and the model as JSON.
    #[arg(long)]
    pub json: bool,
}

fn core_list(s: &str) -> Result<CoreList, units::ParseError> {
    units::parse_cores(s).map(CoreList)
}

/// The procedure a scale row calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScaleProc {
    /// ECHO.
    Echo,
    /// SINK (CRC32c of every octet), inline, from pre-built messages.
    Sink,
    /// SINK with the payload in a Read chunk.
    SinkChunk,
}

impl ScaleProc {
    fn bench(self) -> RpcBench {
        match self {
            ScaleProc::Echo => RpcBench::Echo,
            ScaleProc::Sink => RpcBench::SinkPrebuilt,
            ScaleProc::SinkChunk => RpcBench::ReadChunkCrc,
        }
    }
}

impl ScaleArgs {
    /// Each server group's shared receive queue: every connection of the row with the
    /// most at full credit, twice over (a receive's buffer stays with its call until
    /// the reply is sent). The server's default sizes it for 1024 connections, which
    /// with a 64 KiB inline threshold is 600 MiB per group, every page of it first
    /// touched during the row (measured: 3,800 calls/s).
    pub fn srq_depth(&self) -> u32 {
        let most = self.connections.iter().copied().max().unwrap_or(1).max(1);
        most.saturating_mul(self.depth + 2)
            .saturating_mul(2)
            .max(64)
    }

    /// The inline threshold the rows use.
    pub fn inline(&self) -> u64 {
        match (self.inline, self.procedure) {
            (Some(i), _) => i,
            (None, ScaleProc::Sink) => (self.size + 1024).next_multiple_of(1024),
            (None, _) => 4096,
        }
    }
}

/// One measured row.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleRow {
    /// The round (0-based) the row was measured in.
    pub round: u32,
    /// Server cores (poll groups).
    pub server_cores: usize,
    /// Connections.
    pub connections: u32,
    /// Calls a second (client side).
    pub ops_per_s: f64,
    /// This rate over the one-core row's with as many connections in the same round.
    pub vs_one_core: f64,
    /// Median call latency, ns.
    pub p50_ns: u64,
    /// The server's busy time per call over all groups, ns (wall time in polls that
    /// did work: includes time the scheduler gave to other threads during such a poll).
    pub server_busy_ns_per_call: f64,
    /// The server groups' thread CPU time per call, ns (idle polling included: a
    /// measure of the call's cost only when the groups had no idle time).
    pub server_cpu_ns_per_call: f64,
    /// The client's (measuring thread's) CPU time per call, ns (busy-polling included
    /// when it does not park).
    pub client_cpu_ns_per_call: f64,
    /// Each group's busy fraction while the row was measured (busy time over the
    /// reports' window): near 1, the group was the bottleneck.
    pub group_busy: Vec<f64>,
    /// Each group's thread CPU time over the window, as a fraction of it: below its
    /// busy fraction, the scheduler ran other threads on the group's core.
    pub group_cpu: Vec<f64>,
    /// Each group's share of the row's calls.
    pub group_calls: Vec<u64>,
    /// Calls the server held for a free reply context while the row was measured
    /// (every group's: served once a context freed, none lost).
    pub held: u64,
    /// Calls the server dropped beyond the credits granted meanwhile (a protocol
    /// violation by the client: 0 from a well-behaved one).
    pub overruns: u64,
}

/// What the rows say about more cores.
#[derive(Debug, Clone, Serialize)]
pub struct Model {
    /// The one-core server's busy time per call at the most connections (median of the
    /// rounds), ns.
    pub busy_ns_per_call: f64,
    /// Calls a second one group can serve at that cost.
    pub per_core_ceiling: f64,
    /// The ceiling for 1, 2, 4, 8, 16 and 32 cores (groups share nothing per call).
    pub ceilings: Vec<(usize, f64)>,
}

/// More cores against one, over the rounds.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    /// Server cores.
    pub server_cores: usize,
    /// Connections.
    pub connections: u32,
    /// Each round's rate over that round's one-core rate.
    pub ratios: Vec<f64>,
    /// Their median.
    pub median: f64,
    /// The smallest.
    pub min: f64,
    /// The largest.
    pub max: f64,
}

/// The JSON document.
#[derive(Debug, Serialize)]
struct Document<'a> {
    tool: &'static str,
    provider: &'static str,
    procedure: ScaleProc,
    size: u64,
    inline: u64,
    client_park_us: f64,
    depth: u32,
    nice: i32,
    rounds: u32,
    rows: &'a [ScaleRow],
    ratios: Vec<Ratio>,
    model: Option<Model>,
}

/// Entry point: `rpcrdma-perf scale ...` (argv without the program name and `scale`).
pub fn main(args: impl IntoIterator<Item = String>) -> std::process::ExitCode {
    let argv: Vec<String> = args.into_iter().collect();
    let args = ScaleArgs::parse_from(
        std::iter::once("rpcrdma-perf scale".to_owned()).chain(argv.iter().cloned()),
    );
    if args.nice != 0 {
        match own_session(&argv) {
            Ok(Session::Own) => {}
            Ok(Session::RanIn(code)) => return code,
            Err(e) => {
                eprintln!("rpcrdma-perf scale: {e}");
                return std::process::ExitCode::from(2);
            }
        }
        if let Err(e) = set_autogroup_nice(std::process::id(), args.nice) {
            eprintln!("rpcrdma-perf scale: {e}");
            return std::process::ExitCode::from(2);
        }
    }
    let r = match args.provider {
        ProviderName::Shm => run::<Shm>(&args),
        ProviderName::Siw => run::<Siw>(&args),
        ProviderName::Verbs => Err(BenchError::Setup(
            "scale runs its server on this host: shm or siw".into(),
        )),
    };
    let rows = match r {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("rpcrdma-perf scale: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let model = model(&rows);
    let ratios = ratios(&rows);
    if args.json {
        let doc = Document {
            tool: "rpcrdma-perf scale",
            provider: args.provider.name(),
            procedure: args.procedure,
            size: args.size,
            inline: args.inline(),
            client_park_us: args.client_park.as_secs_f64() * 1e6,
            depth: args.depth,
            nice: args.nice,
            rounds: args.rounds,
            rows: &rows,
            ratios,
            model,
        };
        match serde_json::to_string_pretty(&doc) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("rpcrdma-perf scale: cannot render JSON: {e}");
                return std::process::ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", table(&rows, &ratios, model.as_ref()));
    }
    std::process::ExitCode::SUCCESS
}

/// The server child; killed and reaped when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Every report of the server so far: when it was read, and each group's counters.
type Reports = Arc<Mutex<Vec<(Instant, Vec<GroupSample>)>>>;

/// The groups' counters over `from..to`: the difference between the first report read
/// at or after `from` and the last read by `to` (the server reports every
/// [`crate::groups::REPORT_EVERY`], so a row of a second or more spans many), or,
/// with fewer than two reports inside, the reports just outside it.
fn window(r: &Reports, from: Instant, to: Instant) -> (Vec<GroupSample>, Duration) {
    let reports = r.lock().unwrap_or_else(PoisonError::into_inner);
    let inside: Vec<&(Instant, Vec<GroupSample>)> = reports
        .iter()
        .filter(|(t, _)| *t >= from && *t <= to)
        .collect();
    let (first, last) = match (inside.first(), inside.last()) {
        (Some(a), Some(b)) if inside.len() >= 2 => (*a, *b),
        _ => {
            let before = reports.iter().rev().find(|(t, _)| *t < from);
            let after = reports.iter().find(|(t, _)| *t > to).or(reports.last());
            match (before.or(reports.first()), after) {
                (Some(a), Some(b)) => (a, b),
                _ => return (Vec::new(), Duration::ZERO),
            }
        }
    };
    let diff = last
        .1
        .iter()
        .zip(&first.1)
        .map(|(x, y)| GroupSample {
            calls: x.calls.saturating_sub(y.calls),
            busy_ns: x.busy_ns.saturating_sub(y.busy_ns),
            cpu_ns: x.cpu_ns.saturating_sub(y.cpu_ns),
            held: x.held.saturating_sub(y.held),
            overruns: x.overruns.saturating_sub(y.overruns),
        })
        .collect();
    (diff, last.0.saturating_duration_since(first.0))
}

/// An address for the server of row set `k`.
fn addr_text(provider: ProviderName, k: usize) -> Result<String, BenchError> {
    match provider {
        ProviderName::Siw => {
            let l = std::net::TcpListener::bind("127.0.0.1:0")
                .map_err(|e| BenchError::Setup(format!("a free port: {e}")))?;
            let a = l
                .local_addr()
                .map_err(|e| BenchError::Setup(format!("a free port: {e}")))?;
            Ok(a.to_string())
        }
        _ => Ok(format!("rpcrdma-perf-scale-{}-{k}", std::process::id())),
    }
}

/// Where the measuring client runs.
enum Session {
    /// This process leads a session of its own now.
    Own,
    /// A copy of this process ran in a session of its own and exited so.
    RanIn(std::process::ExitCode),
}

/// Set by the copy of `scale` that runs in its own session.
const SESSION_ENV: &str = "RPCRDMA_PERF_SCALE_SESSION";

/// Puts the client in a session (autogroup) of its own, so `--nice` weights it alone
/// and nothing of the caller's: `setsid` here, or, for a process group leader (which
/// may not), the same command again in a child that calls it.
fn own_session(argv: &[String]) -> Result<Session, BenchError> {
    // SAFETY: setsid takes no pointers; it fails harmlessly for a group leader.
    if unsafe { libc::setsid() } >= 0 || std::env::var_os(SESSION_ENV).is_some() {
        return Ok(Session::Own);
    }
    let exe = std::env::current_exe().map_err(|e| BenchError::Setup(format!("own binary: {e}")))?;
    let mut cmd = Command::new(exe);
    cmd.arg("scale").args(argv).env(SESSION_ENV, "1");
    // SAFETY: only setsid (async-signal-safe) between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let status = cmd
        .status()
        .map_err(|e| BenchError::Setup(format!("run in a session of its own: {e}")))?;
    let code = status
        .code()
        .and_then(|c| u8::try_from(c).ok())
        .unwrap_or(2);
    Ok(Session::RanIn(std::process::ExitCode::from(code)))
}

/// Sets the nice value of process `pid`'s autogroup (its session's scheduling group).
fn set_autogroup_nice(pid: u32, nice: i32) -> Result<(), BenchError> {
    let path = format!("/proc/{pid}/autogroup");
    std::fs::write(&path, nice.to_string()).map_err(|e| {
        BenchError::Setup(format!(
            "--server-nice {nice}: writing {path}: {e} (a negative value needs root, and \
             the kernel autogroup scheduling)"
        ))
    })
}

/// Starts `rpcrdma-perf server --cores cores` at `addr`; returns it once it serves, with
/// its groups' reports as they come.
fn start_server(
    a: &ScaleArgs,
    addr: &str,
    cores: &[usize],
) -> Result<(Server, Reports), BenchError> {
    let exe = std::env::current_exe().map_err(|e| BenchError::Setup(format!("own binary: {e}")))?;
    let list: Vec<String> = cores.iter().map(|c| c.to_string()).collect();
    let credits = a.depth + 1;
    // The server stops by itself if this process dies without killing it.
    let per_row = a.warmup + a.duration + Duration::from_secs(2);
    let lifetime = per_row * a.connections.len() as u32 + Duration::from_secs(30);
    let mut cmd = Command::new(exe);
    // SAFETY: the closure runs in the child between fork and exec and calls only
    // setsid, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            // A session, and so an autogroup, of its own (see `--server-nice`).
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd
        .args(["server", "--provider", a.provider.name(), "--addr", addr])
        .args(["--cores", &list.join(",")])
        .args(["--credits", &credits.to_string()])
        .args(["--max-size", &a.size.max(4096).max(a.inline()).to_string()])
        .args(["--inline", &a.inline().to_string()])
        .args(["--srq-depth", &a.srq_depth().to_string()])
        .args(["--for", &format!("{:.1}", lifetime.as_secs_f64())])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| BenchError::Setup(format!("start the server: {e}")))?;
    let out = child
        .stdout
        .take()
        .ok_or_else(|| BenchError::Setup("server stdout".into()))?;
    let server = Server(child);
    if a.nice != 0 {
        set_autogroup_nice(server.0.id(), a.nice)?;
    }
    let l: Reports = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = mpsc::channel();
    {
        let l = l.clone();
        let n = cores.len();
        std::thread::spawn(move || {
            // A report is one line per group, the last group's line ending it.
            let mut current = vec![GroupSample::default(); n];
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Some((g, sample)) = crate::groups::parse_line(&line) {
                    if let Some(slot) = current.get_mut(g) {
                        *slot = sample;
                    }
                    if g + 1 == n {
                        l.lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push((Instant::now(), current.clone()));
                        let _ = tx.send(());
                    }
                }
            }
        });
    }
    rx.recv_timeout(Duration::from_secs(10))
        .map_err(|_| BenchError::Setup("the server never reported its groups".into()))?;
    Ok((server, l))
}

fn run<F: FabricKind>(a: &ScaleArgs) -> Result<Vec<ScaleRow>, BenchError> {
    let mut rows: Vec<ScaleRow> = Vec::new();
    let cores = &a.server_cores.0;
    for round in 0..a.rounds {
        let first = rows.len();
        for k in 1..=cores.len() {
            let addr = addr_text(a.provider, k)?;
            let (server, reports) = start_server(a, &addr, &cores[..k])?;
            for &c in &a.connections {
                rows.push(row::<F>(a, &addr, &reports, round, k, c)?);
            }
            drop(server);
        }
        // Each round against its own one-core rows.
        let one: Vec<(u32, f64)> = rows[first..]
            .iter()
            .filter(|r| r.server_cores == 1)
            .map(|r| (r.connections, r.ops_per_s))
            .collect();
        for r in &mut rows[first..] {
            if let Some((_, base)) = one.iter().find(|(c, _)| *c == r.connections) {
                r.vs_one_core = if *base > 0.0 {
                    r.ops_per_s / base
                } else {
                    f64::NAN
                };
            }
        }
    }
    Ok(rows)
}

/// Measures one row: `c` connections against the server at `addr` with `k` groups.
fn row<F: FabricKind>(
    a: &ScaleArgs,
    addr: &str,
    reports: &Reports,
    round: u32,
    k: usize,
    c: u32,
) -> Result<ScaleRow, BenchError> {
    let params = RpcParams {
        inline: u32::try_from(a.inline()).unwrap_or(u32::MAX),
        credits: a.depth + 1,
        client_park: (!a.client_park.is_zero()).then_some(a.client_park),
    };
    let spec = RowSpec {
        mode: Mode::Rate,
        size: a.size as usize,
        depth: a.depth,
        connections: c,
        // Out of range: not pinned.
        client_core: a.client_core.unwrap_or(usize::MAX),
        server_core: 0,
    };
    let budget = Budget {
        warmup: Amount::Time(a.warmup),
        stop: Amount::Time(a.duration),
    };
    let meter = Meter::new(budget, Arc::new(AtomicU64::new(0)));
    let m = rpc::run::<F>(&spec, a.procedure.bench(), params, meter, Some(addr))?;
    // The server prints every 50 ms: wait for the reports that close the row.
    std::thread::sleep(crate::groups::REPORT_EVERY * 3);
    let (diff, span) = window(reports, m.started, m.started + m.elapsed);
    let secs = m.elapsed.as_secs_f64();
    let ops = if secs > 0.0 { m.ops as f64 / secs } else { 0.0 };
    let span_ns = span.as_nanos() as f64;
    let fraction = |x: u64| {
        if span_ns > 0.0 {
            x as f64 / span_ns
        } else {
            f64::NAN
        }
    };
    let group_busy: Vec<f64> = diff.iter().map(|d| fraction(d.busy_ns)).collect();
    let group_cpu: Vec<f64> = diff.iter().map(|d| fraction(d.cpu_ns)).collect();
    // Per call: the groups' time over the window divided by the client's rate (the
    // server counts its calls only ten times a second, too coarse to divide by).
    let per_call = |fractions: &[f64]| {
        if ops > 0.0 {
            fractions.iter().sum::<f64>() / ops * 1e9
        } else {
            f64::NAN
        }
    };
    Ok(ScaleRow {
        round,
        server_cores: k,
        connections: c,
        ops_per_s: ops,
        vs_one_core: f64::NAN,
        p50_ns: m.hist.percentile(50.0),
        server_busy_ns_per_call: per_call(&group_busy),
        server_cpu_ns_per_call: per_call(&group_cpu),
        client_cpu_ns_per_call: match m.cpu {
            Some(t) if m.ops > 0 => t.as_nanos() as f64 / m.ops as f64,
            _ => f64::NAN,
        },
        group_busy,
        group_cpu,
        group_calls: diff.iter().map(|d| d.calls).collect(),
        held: diff.iter().map(|d| d.held).sum(),
        overruns: diff.iter().map(|d| d.overruns).sum(),
    })
}

/// The median of `v` (NaN when empty).
fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// Each more-core row set against one core, over the rounds.
pub fn ratios(rows: &[ScaleRow]) -> Vec<Ratio> {
    let mut out: Vec<Ratio> = Vec::new();
    for r in rows.iter().filter(|r| r.server_cores > 1) {
        match out
            .iter_mut()
            .find(|o| o.server_cores == r.server_cores && o.connections == r.connections)
        {
            Some(o) => o.ratios.push(r.vs_one_core),
            None => out.push(Ratio {
                server_cores: r.server_cores,
                connections: r.connections,
                ratios: vec![r.vs_one_core],
                median: f64::NAN,
                min: f64::NAN,
                max: f64::NAN,
            }),
        }
    }
    for o in &mut out {
        o.median = median(&o.ratios);
        let finite = o.ratios.iter().copied().filter(|x| x.is_finite());
        o.min = finite.clone().fold(f64::INFINITY, f64::min);
        o.max = finite.fold(f64::NEG_INFINITY, f64::max);
    }
    out
}

/// The model from the one-core rows with the most connections (their median).
pub fn model(rows: &[ScaleRow]) -> Option<Model> {
    let most = rows
        .iter()
        .filter(|r| r.server_cores == 1 && r.server_busy_ns_per_call.is_finite())
        .map(|r| r.connections)
        .max()?;
    let busy: Vec<f64> = rows
        .iter()
        .filter(|r| r.server_cores == 1 && r.connections == most)
        .map(|r| r.server_busy_ns_per_call)
        .collect();
    let busy = median(&busy);
    let per_core = 1e9 / busy;
    Some(Model {
        busy_ns_per_call: busy,
        per_core_ceiling: per_core,
        ceilings: [1usize, 2, 4, 8, 16, 32]
            .iter()
            .map(|&n| (n, n as f64 * per_core))
            .collect(),
    })
}

/// The table for people.
pub fn table(rows: &[ScaleRow], ratios: &[Ratio], model: Option<&Model>) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:>5} {:>5} {:>5} {:>10} {:>8} {:>9} {:>12} {:>10} {:>10}  {:<14} {:<14} calls per group",
        "round",
        "cores",
        "conns",
        "calls/s",
        "x 1-core",
        "p50 us",
        "busy ns/c",
        "srv cpu/c",
        "cli cpu/c",
        "group busy",
        "group cpu"
    );
    for r in rows {
        let busy: Vec<String> = r
            .group_busy
            .iter()
            .map(|b| format!("{:.0}%", b * 100.0))
            .collect();
        let cpu: Vec<String> = r
            .group_cpu
            .iter()
            .map(|b| format!("{:.0}%", b * 100.0))
            .collect();
        let calls: Vec<String> = r.group_calls.iter().map(|c| c.to_string()).collect();
        let _ = writeln!(
            s,
            "{:>5} {:>5} {:>5} {:>10.0} {:>8.2} {:>9.1} {:>12.0} {:>10.0} {:>10.0}  {:<14} {:<14} {}",
            r.round,
            r.server_cores,
            r.connections,
            r.ops_per_s,
            r.vs_one_core,
            r.p50_ns as f64 / 1e3,
            r.server_busy_ns_per_call,
            r.server_cpu_ns_per_call,
            r.client_cpu_ns_per_call,
            busy.join(" "),
            cpu.join(" "),
            calls.join(" ")
        );
    }
    for r in ratios {
        let _ = writeln!(
            s,
            "{} cores / 1 core, {} connection(s): median {:.2}, range {:.2} to {:.2} over {} \
             round(s)",
            r.server_cores,
            r.connections,
            r.median,
            r.min,
            r.max,
            r.ratios.len()
        );
    }
    if let Some(m) = model {
        let ceilings: Vec<String> = m
            .ceilings
            .iter()
            .map(|(n, v)| format!("{n}: {:.2} M/s", v / 1e6))
            .collect();
        let _ = writeln!(
            s,
            "model: a group is busy {:.0} ns per call (1 core, most connections), so one core \
             serves at most {:.2} M calls/s; groups share nothing per call, so N cores: {} \
             (while clients and the fabric keep up)",
            m.busy_ns_per_call,
            m.per_core_ceiling / 1e6,
            ceilings.join(", ")
        );
    }
    s
}
