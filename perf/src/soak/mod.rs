//! `rpcrdma-perf soak`: many connections, mixed call shapes, random faults and a server
//! killed with SIGKILL and restarted halfway, for a while; then the accounting: every
//! call had exactly one outcome, every success echoed its own bytes, and nothing is left
//! registered on either side.
//!
//! The server is a child process (this binary with `soak --serve`): the ULP's
//! `Dispatcher` with the echo program and the soak's `ledger` program behind a
//! `Responder`, over `Faulty<P>` when `--faults` is given, with one duplicate request
//! cache for all its connections. It runs until its stdin closes, then closes its
//! connections and reports what its device still holds (`leaked N`); while it runs it
//! reports what its cache replayed and whether any call ran twice. The client side (this
//! process) keeps `--connections` requesters busy with ECHO calls of 16 octets to 40 KiB
//! (inline, long calls through Position-Zero Read chunks, Reply chunks) and, one call in
//! four, ledger RECORD calls (not idempotent, up to 1 KiB), reconnecting each
//! connection after it closes, and kills and restarts the server at half time.
//!
//! By default each requester reconnects and retransmits by itself (`ConnConfig::reconnect`,
//! ECHO marked idempotent, RECORD not, and the server keeping a cache), so `retried`
//! counts the calls it sent again, `duplicates suppressed` the retransmissions the
//! server's cache answered without running them again, and failures are calls that ran
//! out of sends; with `--no-reconnect` the soak makes a new requester after each loss
//! and `retried` counts the calls it re-issued. Every failure is counted by kind.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use rpcrdma::fabric::faulty::{FaultConfig, Faulty, FaultyDevice};
use rpcrdma::fabric::shm::ShmDevice;
use rpcrdma::fabric::sim::SimRng;
use rpcrdma::fabric::siw::SiwDevice;
use rpcrdma::fabric::{Device, Provider};
use rpcrdma::{CallStatus, ConnConfig, ConnState, Requester, Responder};
use rpcrdma_pools::HugePages;
use rpcrdma_ulp::echo;
use rpcrdma_ulp::program::Dispatcher;

mod ledger;

use crate::cli::ProviderName;
use crate::fabric::{FabricKind, Shm, Siw};

/// `rpcrdma-perf soak`.
#[derive(Debug, Parser)]
#[command(name = "rpcrdma-perf soak")]
pub struct SoakArgs {
    /// Provider (shm or siw).
    #[arg(long, value_enum, default_value = "shm")]
    pub provider: ProviderName,
    /// Client connections.
    #[arg(long, default_value_t = 8)]
    pub connections: usize,
    /// How long to run, in seconds.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Inject faults on both sides (refused posts, dropped connections, peer aborts,
    /// delayed completions, stalls).
    #[arg(long)]
    pub faults: bool,
    /// Seed of the faults and call sizes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Do not kill and restart the server halfway.
    #[arg(long)]
    pub no_kill: bool,
    /// Do not let the requesters reconnect and retransmit (`ConnConfig::reconnect`):
    /// the soak makes a new requester after each loss and counts the lost calls failed.
    #[arg(long)]
    pub no_reconnect: bool,
    /// The server keeps no duplicate request cache while the requesters still count on
    /// one: retransmitted RECORDs then run twice and the soak must fail (a check that
    /// the ledger catches what a missing cache lets through).
    #[arg(long)]
    pub no_reply_cache: bool,
    /// Run the server side on this address (used by the soak itself).
    #[arg(long, hide = true)]
    pub serve: Option<String>,
}

/// The fault rates of a soak: enough to break a connection every few hundred calls.
fn fault_config(seed: u64) -> FaultConfig {
    FaultConfig {
        seed,
        post_failure_ppm: 1_000,
        disconnect_ppm: 5_000,
        abort_ppm: 500,
        delay_ppm: 50_000,
        max_completion_delay: 20,
        stall_ppm: 1_000,
        max_stall_polls: 500,
    }
}

fn conn_config() -> ConnConfig {
    ConnConfig {
        credits: 16,
        large_buf_size: 64 * 1024,
        large_bufs: 32,
        hugepages: HugePages::Never,
        // A connection can go silent without breaking (seen under CPU starvation on
        // siw, until its driver learned to see a peer's close that arrives with the last
        // message: engine/DESIGN.md, "siw: socket readiness and the end of the stream"):
        // the health probe (RFC 8267 §6.7.2) finds such a connection within three
        // seconds, well inside a call's timeout, and the calls go again on a new
        // connection. Without it they time out and hold their outcomes until the
        // credit-reclaim bound. Kept as the defence against silent peers; with the fix
        // the soak stays clean without it too.
        keepalive: Some(Duration::from_secs(1)),
        probe_timeout: Duration::from_secs(2),
        ..ConnConfig::default()
    }
}

/// Each call's timeout: long enough that a loaded machine does not turn slowness into
/// failures.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Sizes of the echoed data: inline, around the 4 KiB thresholds, and large.
const SIZES: [usize; 8] = [16, 200, 1000, 3000, 4000, 5000, 9000, 40_000];

/// Sizes of the ledger's RECORD data (inline, so the server's cache keeps the replies).
const RECORD_SIZES: [usize; 3] = [16, 200, ledger::MAX_RECORD];

/// What the soak needs of a provider beyond [`FabricKind`] (devices, addresses): an
/// address as text for the server process, and what a device still holds.
trait SoakFabric: FabricKind {
    /// A fresh listening address, as `--serve` takes it.
    fn fresh_addr() -> String;
    /// Registrations and arenas still alive on `dev`.
    fn held(dev: &<Self::P as Provider>::Device) -> usize;
    /// Another handle on the same device.
    fn same(dev: &<Self::P as Provider>::Device) -> <Self::P as Provider>::Device;
}

impl SoakFabric for Shm {
    fn fresh_addr() -> String {
        format!("rpcrdma-soak-{}", std::process::id())
    }
    fn held(dev: &ShmDevice) -> usize {
        dev.live_registrations() + dev.live_arenas() + dev.live_pds()
    }
    fn same(dev: &ShmDevice) -> ShmDevice {
        dev.clone()
    }
}

impl SoakFabric for Siw {
    fn fresh_addr() -> String {
        Siw::unique_addr().to_string()
    }
    fn held(dev: &SiwDevice) -> usize {
        dev.live_registrations() + dev.live_arenas()
    }
    fn same(dev: &SiwDevice) -> SiwDevice {
        dev.clone()
    }
}

/// A device of `F`, or why not.
fn device<F: SoakFabric>() -> Result<<F::P as Provider>::Device, String> {
    F::open().map_err(|e| e.to_string())
}

/// `addr` as `F`'s address, or why not.
fn parse<F: SoakFabric>(addr: &str) -> Result<<F::P as Provider>::Addr, String> {
    F::parse_addr(addr).map_err(|e| e.to_string())
}

/// Entry point: `rpcrdma-perf soak ...` (argv without the program name and `soak`).
pub fn main(args: impl IntoIterator<Item = String>) -> std::process::ExitCode {
    let args = SoakArgs::parse_from(std::iter::once("rpcrdma-perf soak".to_owned()).chain(args));
    let r = match args.provider {
        ProviderName::Shm => run::<Shm>(&args),
        ProviderName::Siw => run::<Siw>(&args),
        ProviderName::Verbs => Err("soak runs on shm and siw".to_owned()),
    };
    match r {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("rpcrdma-perf soak: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

fn run<F: SoakFabric>(args: &SoakArgs) -> Result<bool, String> {
    match &args.serve {
        Some(addr) => serve::<F>(args, addr).map(|()| true),
        None => drive::<F>(args),
    }
}

/// The server process: serves until stdin closes, then reports what it still holds.
fn serve<F: SoakFabric>(args: &SoakArgs, addr: &str) -> Result<(), String> {
    let addr = parse::<F>(addr)?;
    let inner = device::<F>()?;
    let probe = F::same(&inner);
    let dev = FaultyDevice::<F::P>::new(
        inner,
        if args.faults {
            fault_config(args.seed ^ std::process::id() as u64)
        } else {
            FaultConfig::default()
        },
    );
    let book = Arc::new(ledger::Ledger::default());
    let drc = ledger::reply_cache();
    let no_cache = args.no_reply_cache;
    let factory = {
        let (book, drc) = (book.clone(), drc.clone());
        move || {
            let mut d = crate::rpc::dispatcher(64 * 1024);
            let program = ledger::LedgerProgram::new(book.clone(), drc.clone(), !no_cache);
            d.register(Box::new(program)).ok()?;
            Some(d)
        }
    };
    let mut server =
        Responder::<Faulty<F::P>, Dispatcher, _>::bind(dev, &addr, conn_config(), factory)
            .map_err(|e| format!("server binds: {e}"))?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = std::io::stdin().read_to_end(&mut sink);
            stop.store(true, Ordering::Release);
        });
    }
    println!("ready");
    let _ = std::io::stdout().flush();
    let clock = server.clock();
    // What the cache replayed and what ran twice, reported as it changes (a server killed
    // with SIGKILL has said what it knew up to its last report).
    let mut reported = (0, 0);
    let report = |reported: &mut (u64, u64)| {
        let now = (drc.stats().hits, book.ran_twice());
        if now != *reported {
            *reported = now;
            println!("server replayed {} ran-twice {}", now.0, now.1);
            let _ = std::io::stdout().flush();
        }
    };
    let mut next_report = Instant::now();
    while !stop.load(Ordering::Acquire) {
        if server.poll(clock.now()) == 0 {
            std::thread::yield_now();
        }
        if Instant::now() >= next_report {
            report(&mut reported);
            next_report = Instant::now() + Duration::from_millis(50);
        }
    }
    report(&mut reported);
    // Orderly end: disconnect everything, let the connections drain and go.
    let ids: Vec<_> = server.connections().iter().map(|c| c.conn_id()).collect();
    for id in ids {
        let _ = server.disconnect(id);
    }
    let end = Instant::now() + Duration::from_secs(10);
    while !server.connections().is_empty() && Instant::now() < end {
        server.poll(clock.now());
    }
    let left = server.connections().len();
    drop(server);
    // With the server gone, its device holds nothing, or what it holds leaked.
    println!("server leaked {}", left + settle::<F>(&probe));
    Ok(())
}

/// What `dev` still holds once its provider has had time to retire what closed
/// connections left (siw's driver thread frees a queue pair's memory when its last
/// transfer is done, not when the handle drops).
fn settle<F: SoakFabric>(dev: &<F::P as Provider>::Device) -> usize {
    use rpcrdma::fabric::CompletionQueue;
    // Software providers make progress (retirements included) only while something
    // polls: a scratch completion queue does.
    let mut scratch = dev.create_cq(1).ok();
    let mut wc = [rpcrdma::fabric::Completion::EMPTY; 1];
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(cq) = scratch.as_mut() {
            cq.poll(&mut wc);
        }
        let held = F::held(dev);
        if held == 0 || Instant::now() > end {
            return held;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A server child process, and the thread reading its reports.
struct ServerProc {
    child: Child,
    reports: std::thread::JoinHandle<ServerReport>,
}

/// What a server process reported (its last word on each).
#[derive(Debug, Default, Clone, Copy)]
struct ServerReport {
    /// Retransmissions its cache answered.
    replayed: u64,
    /// Calls that ran twice.
    ran_twice: u64,
    /// What its device still held at the end (`None`: it did not say).
    leaked: Option<usize>,
}

impl ServerReport {
    fn read(out: impl BufRead) -> ServerReport {
        let mut r = ServerReport::default();
        for line in out.lines() {
            let Ok(line) = line else { break };
            if let Some(n) = line.strip_prefix("server leaked ") {
                r.leaked = n.trim().parse().ok();
            } else if let Some(rest) = line.strip_prefix("server replayed ") {
                let mut words = rest.split_whitespace();
                let replayed = words.next().and_then(|w| w.parse().ok());
                let twice = words.nth(1).and_then(|w| w.parse().ok());
                if let (Some(a), Some(b)) = (replayed, twice) {
                    (r.replayed, r.ran_twice) = (a, b);
                }
            }
        }
        r
    }
}

impl ServerProc {
    fn start(args: &SoakArgs, addr: &str, generation: u64) -> Result<ServerProc, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(exe);
        cmd.args([
            "soak",
            "--provider",
            args.provider.name(),
            "--seed",
            &(args.seed + generation).to_string(),
            "--serve",
            addr,
        ]);
        if args.faults {
            cmd.arg("--faults");
        }
        if args.no_reply_cache {
            cmd.arg("--no-reply-cache");
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("start the server: {e}"))?;
        let mut line = String::new();
        let out = child.stdout.take().ok_or("server stdout")?;
        let mut out = BufReader::new(out);
        out.read_line(&mut line).map_err(|e| e.to_string())?;
        if line.trim() != "ready" {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("server did not start: {line:?}"));
        }
        let reports = std::thread::spawn(move || ServerReport::read(out));
        Ok(ServerProc { child, reports })
    }

    /// Kills it (SIGKILL) and returns what it reported until then.
    fn kill(mut self) -> ServerReport {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.reports.join().unwrap_or_default()
    }

    /// Closes its stdin and reads its reports to the end.
    fn finish(mut self) -> Result<ServerReport, String> {
        drop(self.child.stdin.take());
        let status = self.child.wait().map_err(|e| e.to_string())?;
        let report = self.reports.join().unwrap_or_default();
        if !status.success() {
            return Err(format!("server exited with {status}"));
        }
        match report.leaked {
            Some(_) => Ok(report),
            None => Err("no final report from the server".to_owned()),
        }
    }
}

/// One client connection and its calls without an outcome (tag -> data sent).
struct Client<P: Provider> {
    conn: Option<Requester<Faulty<P>>>,
    pending: HashMap<u64, Vec<u8>>,
    retry_at: Instant,
}

#[derive(Debug, Default)]
struct Tally {
    issued: u64,
    completed: u64,
    retried: u64,
    /// Retransmissions the servers' caches answered without running the call again.
    suppressed: u64,
    /// Calls that ran twice on one server.
    ran_twice: u64,
    failed: BTreeMap<String, u64>,
    lost: u64,
    duplicated: u64,
    wrong: u64,
    connections: u64,
}

fn failure_kind(s: &CallStatus) -> String {
    match s {
        CallStatus::Transport(_) => "transport",
        CallStatus::Timeout => "timeout",
        CallStatus::RpcError(_) => "rpc",
        CallStatus::Refused(_) => "refused",
        CallStatus::Success => "undecodable",
    }
    .to_owned()
}

fn drive<F: SoakFabric>(args: &SoakArgs) -> Result<bool, String> {
    let addr_s = F::fresh_addr();
    let addr = parse::<F>(&addr_s)?;
    let mut server = Some(ServerProc::start(args, &addr_s, 0)?);
    let cdev = FaultyDevice::<F::P>::new(
        device::<F>()?,
        if args.faults {
            fault_config(args.seed ^ 0x00c1_1e47)
        } else {
            FaultConfig::default()
        },
    );
    let clock = cdev.clock();
    let mut cfg = conn_config();
    if !args.no_reconnect {
        cfg.reconnect = Some(rpcrdma::Reconnect {
            backoff: Duration::from_millis(2),
            max_backoff: Duration::from_millis(200),
            max_sends: 20,
            resend_for: Some(Duration::from_secs(30)),
            server_has_drc: true,
        });
    }
    let start = Instant::now();
    let run_for = Duration::from_secs_f64(args.duration.max(0.5));
    let kill_at = start + run_for / 2;
    let mut killed = args.no_kill;
    let mut clients: Vec<Client<F::P>> = (0..args.connections.max(1))
        .map(|_| Client {
            conn: None,
            pending: HashMap::new(),
            retry_at: start,
        })
        .collect();
    let mut t = Tally::default();
    // Failures not yet made up for by a new call (`--no-reconnect`: the application
    // re-issues what failed, and each call issued while one is owed is a retry).
    let mut owed = 0u64;
    let mut next_tag = 0u64;
    let mut rng = SimRng::new(args.seed);
    let mut seen: HashMap<u64, u8> = HashMap::new();
    let stop_issuing = start + run_for;
    // A call whose send queue stopped completing is held until its keys die: its
    // timeout, then the credit-reclaim bound, then the disconnect that bound forces.
    // Waiting less would call "lost" an outcome the engine is still bound to deliver.
    let hard_end =
        stop_issuing + CALL_TIMEOUT + rpcrdma::DEFAULT_CREDIT_RECLAIM + Duration::from_secs(5);
    loop {
        let now = Instant::now();
        if !killed && now >= kill_at {
            if let Some(s) = server.take() {
                let r = s.kill();
                t.suppressed += r.replayed;
                t.ran_twice += r.ran_twice;
            }
            server = Some(ServerProc::start(args, &addr_s, 1)?);
            killed = true;
        }
        let issuing = now < stop_issuing;
        if !issuing && clients.iter().all(|c| c.pending.is_empty()) {
            break;
        }
        if now > hard_end {
            for c in &clients {
                t.lost += c.pending.len() as u64;
                if !c.pending.is_empty() {
                    // Say where the outcome got stuck: the report is the only trace.
                    eprintln!(
                        "soak: {} call(s) without an outcome, tags {:?}, connection {:?}",
                        c.pending.len(),
                        c.pending.keys().collect::<Vec<_>>(),
                        c.conn.as_ref().map(|conn| (
                            conn.state(),
                            conn.reconnect_stats(),
                            conn.awaiting_resend(),
                            conn.queued(),
                            conn.active(),
                            conn.next_timeout()
                                .map(|t| t.saturating_duration_since(Instant::now())),
                            conn.stats(),
                        )),
                    );
                }
            }
            break;
        }
        let tick = clock.now();
        for c in clients.iter_mut() {
            let Some(conn) = c.conn.as_mut() else {
                if issuing && now >= c.retry_at {
                    if let Ok(conn) = Requester::<Faulty<F::P>>::connect_with(&cdev, &addr, &cfg) {
                        c.conn = Some(conn);
                        t.connections += 1;
                    }
                    c.retry_at = now + Duration::from_millis(5);
                }
                continue;
            };
            conn.poll(tick);
            while let Some(o) = conn.poll_outcome() {
                let n = seen.entry(o.tag).or_insert(0);
                *n += 1;
                if *n > 1 {
                    t.duplicated += 1;
                    continue;
                }
                let Some(sent) = c.pending.remove(&o.tag) else {
                    t.wrong += 1;
                    continue;
                };
                match echo::reply_data(&o) {
                    Ok(got) if got == sent => t.completed += 1,
                    Ok(_) => t.wrong += 1,
                    Err(_) => {
                        *t.failed.entry(failure_kind(&o.status)).or_insert(0) += 1;
                        owed += 1;
                    }
                }
            }
            match conn.state() {
                ConnState::Closed if args.no_reconnect => {
                    // Every call has its outcome by the time the connection reports
                    // closed; whatever is still pending here is lost.
                    t.lost += c.pending.len() as u64;
                    c.pending.clear();
                    c.conn = None;
                    c.retry_at = now + Duration::from_millis(5);
                }
                ConnState::Established if issuing && c.pending.len() < 4 => {
                    // One call in four records in the ledger (small, not idempotent).
                    let record = rng.below(4) == 0;
                    let size = if record {
                        RECORD_SIZES[rng.below(RECORD_SIZES.len() as u64) as usize]
                    } else {
                        SIZES[rng.below(SIZES.len() as u64) as usize]
                    };
                    let mut data: Vec<u8> =
                        (0..size).map(|i| (i as u64 ^ next_tag) as u8).collect();
                    let msg = if size + 128 <= 4096 {
                        conn.alloc_msg()
                    } else {
                        conn.alloc_large()
                    };
                    let Ok(msg) = msg else { continue };
                    let req = if record {
                        data[..8].copy_from_slice(&next_tag.to_le_bytes());
                        ledger::record(msg, &data).map(|r| r.idempotent(false))
                    } else {
                        echo::call(msg, &data).map(|r| r.idempotent(true))
                    };
                    let Ok(mut req) = req else {
                        continue;
                    };
                    // Long enough that a loaded machine does not turn slowness into
                    // failures; the faults are what this run is about.
                    req.timeout = Some(CALL_TIMEOUT);
                    if conn.submit(req, next_tag).is_ok() {
                        c.pending.insert(next_tag, data);
                        t.issued += 1;
                        // A call re-issued after a transport failure counts as a retry.
                        if owed > 0 {
                            owed -= 1;
                            t.retried += 1;
                        }
                    }
                    next_tag += 1;
                }
                _ => {}
            }
        }
    }
    // Close every connection and wait for them to end.
    for c in clients.iter_mut() {
        if let Some(conn) = c.conn.as_mut() {
            conn.close();
        }
    }
    let end = Instant::now() + Duration::from_secs(10);
    while clients.iter().any(|c| {
        c.conn
            .as_ref()
            .is_some_and(|conn| conn.state() != ConnState::Closed)
    }) && Instant::now() < end
    {
        for c in clients.iter_mut() {
            if let Some(conn) = c.conn.as_mut() {
                conn.poll(clock.now());
                while conn.poll_outcome().is_some() {}
            }
        }
    }
    for c in &clients {
        if let Some(s) = c.conn.as_ref().and_then(|conn| conn.reconnect_stats()) {
            t.retried += s.retransmitted;
            t.connections += s.reconnects;
        }
    }
    clients.clear();
    let client_leaked = settle::<F>(cdev.inner());
    let last = server
        .take()
        .map_or(Ok(ServerReport::default()), ServerProc::finish)?;
    t.suppressed += last.replayed;
    t.ran_twice += last.ran_twice;
    let server_leaked = last.leaked.unwrap_or(0);
    let leaked = client_leaked + server_leaked;
    let failed: u64 = t.failed.values().sum();
    let faults = cdev.counters();
    println!(
        "soak {} {}s, {} connections{}{}: issued {} completed {} retried {} \
         duplicates suppressed {} failed {} {:?} connections made {}; client faults {:?}",
        args.provider.name(),
        args.duration,
        args.connections,
        if args.faults { ", faults" } else { "" },
        if args.no_kill {
            ""
        } else {
            ", server killed and restarted"
        },
        t.issued,
        t.completed,
        t.retried,
        t.suppressed,
        failed,
        t.failed,
        t.connections,
        faults,
    );
    println!(
        "lost {} duplicated {} leaked {} (client {client_leaked}, server {server_leaked}) \
         ran twice {}{}",
        t.lost,
        t.duplicated,
        leaked,
        t.ran_twice,
        if t.wrong > 0 {
            format!(" wrong {}", t.wrong)
        } else {
            String::new()
        }
    );
    let accounted = t.issued == t.completed + failed + t.lost;
    Ok(t.lost == 0
        && t.duplicated == 0
        && leaked == 0
        && t.wrong == 0
        && t.ran_twice == 0
        && accounted
        && t.completed > 0)
}
