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
//! The model for more cores starts from that cost: groups share nothing on the call
//! path (own completion queue, own connections, no lock or shared counter per call), so
//! N cores serve at most N / (busy ns per call) calls a second, until the clients or
//! the fabric run out first. A measured ratio below the model says which: a group
//! busy far less than 100% was waiting for calls, not serving them.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::AtomicU64;
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::Duration;

use clap::Parser;
use serde::Serialize;

use crate::cli::{CoreList, ProviderName};
use crate::fabric::{FabricKind, Shm, Siw};
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
    /// ECHO payload, octets.
    #[arg(long, default_value = "64", value_parser = units::parse_size)]
    pub size: u64,
    /// Calls in flight per connection.
    #[arg(long, default_value_t = 16)]
    pub depth: u32,
    /// Measure each row for this long.
    #[arg(long, default_value = "1s", value_parser = units::parse_duration)]
    pub duration: Duration,
    /// Warm-up before each row.
    #[arg(long, default_value = "200ms", value_parser = units::parse_duration)]
    pub warmup: Duration,
    /// Print the rows and the model as JSON.
    #[arg(long)]
    pub json: bool,
}

fn core_list(s: &str) -> Result<CoreList, units::ParseError> {
    units::parse_cores(s).map(CoreList)
}

/// One measured row.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleRow {
    /// Server cores (poll groups).
    pub server_cores: usize,
    /// Connections.
    pub connections: u32,
    /// Calls a second (client side).
    pub ops_per_s: f64,
    /// This rate over the one-core row's with as many connections.
    pub vs_one_core: f64,
    /// Median call latency, ns.
    pub p50_ns: u64,
    /// The server's busy time per call over all groups, ns.
    pub server_busy_ns_per_call: f64,
    /// Each group's busy fraction while the row was measured (its busy time per call of
    /// the row times the measured rate): near 1, the group was the bottleneck.
    pub group_busy: Vec<f64>,
    /// Each group's share of the row's calls.
    pub group_calls: Vec<u64>,
}

/// What the rows say about more cores.
#[derive(Debug, Clone, Serialize)]
pub struct Model {
    /// The one-core server's busy time per call at the most connections, ns.
    pub busy_ns_per_call: f64,
    /// Calls a second one group can serve at that cost.
    pub per_core_ceiling: f64,
    /// The ceiling for 1, 2, 4, 8, 16 and 32 cores (groups share nothing per call).
    pub ceilings: Vec<(usize, f64)>,
}

/// The JSON document.
#[derive(Debug, Serialize)]
struct Document<'a> {
    tool: &'static str,
    provider: &'static str,
    size: u64,
    depth: u32,
    rows: &'a [ScaleRow],
    model: Option<Model>,
}

/// Entry point: `rpcrdma-perf scale ...` (argv without the program name and `scale`).
pub fn main(args: impl IntoIterator<Item = String>) -> std::process::ExitCode {
    let args = ScaleArgs::parse_from(std::iter::once("rpcrdma-perf scale".to_owned()).chain(args));
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
    if args.json {
        let doc = Document {
            tool: "rpcrdma-perf scale",
            provider: args.provider.name(),
            size: args.size,
            depth: args.depth,
            rows: &rows,
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
        print!("{}", table(&rows, model.as_ref()));
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

/// Latest (calls, busy_ns) of each group, as the server last printed them.
type Latest = Arc<Mutex<Vec<(u64, u64)>>>;

fn latest(l: &Latest) -> Vec<(u64, u64)> {
    l.lock().unwrap_or_else(PoisonError::into_inner).clone()
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

/// Starts `rpcrdma-perf server --cores cores` at `addr`; returns it once it serves, with
/// its groups' latest counters.
fn start_server(
    a: &ScaleArgs,
    addr: &str,
    cores: &[usize],
) -> Result<(Server, Latest), BenchError> {
    let exe = std::env::current_exe().map_err(|e| BenchError::Setup(format!("own binary: {e}")))?;
    let list: Vec<String> = cores.iter().map(|c| c.to_string()).collect();
    let credits = a.depth + 1;
    let mut child = Command::new(exe)
        .args(["server", "--provider", a.provider.name(), "--addr", addr])
        .args(["--cores", &list.join(",")])
        .args(["--credits", &credits.to_string()])
        .args(["--max-size", &a.size.max(4096).to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| BenchError::Setup(format!("start the server: {e}")))?;
    let out = child
        .stdout
        .take()
        .ok_or_else(|| BenchError::Setup("server stdout".into()))?;
    let server = Server(child);
    let l: Latest = Arc::new(Mutex::new(vec![(0, 0); cores.len()]));
    let (tx, rx) = mpsc::channel();
    {
        let l = l.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Some((g, calls, busy)) = crate::groups::parse_line(&line) {
                    if let Some(slot) = l.lock().unwrap_or_else(PoisonError::into_inner).get_mut(g)
                    {
                        *slot = (calls, busy);
                    }
                    let _ = tx.send(());
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
    let params = RpcParams {
        inline: 4096,
        credits: a.depth + 1,
    };
    let cores = &a.server_cores.0;
    for k in 1..=cores.len() {
        let addr = addr_text(a.provider, k)?;
        let (server, l) = start_server(a, &addr, &cores[..k])?;
        for &c in &a.connections {
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
            let before = latest(&l);
            let m = rpc::run::<F>(&spec, RpcBench::Echo, params, meter, Some(&addr))?;
            // The server prints every 50 ms: wait for the lines that cover the row.
            std::thread::sleep(crate::groups::REPORT_EVERY * 3);
            let after = latest(&l);
            let diff: Vec<(u64, u64)> = after
                .iter()
                .zip(&before)
                .map(|(x, y)| (x.0.saturating_sub(y.0), x.1.saturating_sub(y.1)))
                .collect();
            let calls: u64 = diff.iter().map(|d| d.0).sum();
            let busy: u64 = diff.iter().map(|d| d.1).sum();
            let secs = m.elapsed.as_secs_f64();
            let ops = if secs > 0.0 { m.ops as f64 / secs } else { 0.0 };
            rows.push(ScaleRow {
                server_cores: k,
                connections: c,
                ops_per_s: ops,
                vs_one_core: f64::NAN,
                p50_ns: m.hist.percentile(50.0),
                server_busy_ns_per_call: if calls > 0 {
                    busy as f64 / calls as f64
                } else {
                    f64::NAN
                },
                // The server's counters cover more than the measured stretch (set-up,
                // warm-up, the drain after it), so a group's busy fraction is its busy
                // time per call of the window times the measured rate.
                group_busy: diff
                    .iter()
                    .map(|d| {
                        if calls > 0 {
                            d.1 as f64 / calls as f64 * ops / 1e9
                        } else {
                            0.0
                        }
                    })
                    .collect(),
                group_calls: diff.iter().map(|d| d.0).collect(),
            });
        }
        drop(server);
    }
    let one: Vec<(u32, f64)> = rows
        .iter()
        .filter(|r| r.server_cores == 1)
        .map(|r| (r.connections, r.ops_per_s))
        .collect();
    for r in &mut rows {
        if let Some((_, base)) = one.iter().find(|(c, _)| *c == r.connections) {
            r.vs_one_core = if *base > 0.0 {
                r.ops_per_s / base
            } else {
                f64::NAN
            };
        }
    }
    Ok(rows)
}

/// The model from the one-core row with the most connections.
pub fn model(rows: &[ScaleRow]) -> Option<Model> {
    let r = rows
        .iter()
        .filter(|r| r.server_cores == 1 && r.server_busy_ns_per_call.is_finite())
        .max_by_key(|r| r.connections)?;
    let per_core = 1e9 / r.server_busy_ns_per_call;
    Some(Model {
        busy_ns_per_call: r.server_busy_ns_per_call,
        per_core_ceiling: per_core,
        ceilings: [1usize, 2, 4, 8, 16, 32]
            .iter()
            .map(|&n| (n, n as f64 * per_core))
            .collect(),
    })
}

/// The table for people.
pub fn table(rows: &[ScaleRow], model: Option<&Model>) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:>6} {:>6} {:>12} {:>8} {:>9} {:>13}  {:<18} calls per group",
        "cores", "conns", "calls/s", "x 1-core", "p50 us", "busy ns/call", "group busy"
    );
    for r in rows {
        let busy: Vec<String> = r
            .group_busy
            .iter()
            .map(|b| format!("{:.0}%", b * 100.0))
            .collect();
        let calls: Vec<String> = r.group_calls.iter().map(|c| c.to_string()).collect();
        let _ = writeln!(
            s,
            "{:>6} {:>6} {:>12.0} {:>8.2} {:>9.1} {:>13.0}  {:<18} {}",
            r.server_cores,
            r.connections,
            r.ops_per_s,
            r.vs_one_core,
            r.p50_ns as f64 / 1e3,
            r.server_busy_ns_per_call,
            busy.join(" "),
            calls.join(" ")
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
