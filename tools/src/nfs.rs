//! `rpcrdma nfs`: an NFSv3 or NFSv4.1 client over the engine. NFSv3: the export's root
//! handle comes from MOUNT over TCP (the port from `--mount-port`, else the server's
//! portmapper). NFSv4.1: no MOUNT; a session is set up and the export is looked up from
//! the server's pseudo-root. Then `ls`, `get`, `put` and `bench` run over RPC-over-RDMA
//! with READ data in Write chunks and WRITE data in Read chunks.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use rpcrdma::fabric::shm::{ShmDevice, ShmProvider};
use rpcrdma::fabric::siw::{SiwConfig, SiwDevice, SiwProvider};
use rpcrdma::fabric::Provider;
use rpcrdma::ConnConfig;
use rpcrdma_ulp::nfs::client::{getport, mount, Nfs3Client, NfsClientError};
use rpcrdma_ulp::nfs::mount::{MOUNT_PROGRAM, MOUNT_V3};
use rpcrdma_ulp::nfs::v3::types::Ftype3;
use rpcrdma_ulp::nfs::v41::client::{Nfs41Client, OpenFile};
use rpcrdma_ulp::nfs::v41::ftype;

use crate::endpoint::Endpoint;
use crate::error::CliError;

/// What to do.
#[derive(Debug, Clone)]
pub enum NfsOp {
    /// List a directory.
    Ls(String),
    /// Copy a file from the server to a local file (`-`: standard output).
    Get(String, PathBuf),
    /// Copy a local file (`-`: standard input) to the server.
    Put(PathBuf, String),
    /// NFSv4.1: open a file for reading with a read delegation and hold it until the
    /// server recalls it (answered, then returned) or the time is up.
    Hold(String, Duration),
    /// Measure READs or WRITEs of one file.
    Bench(BenchOpts),
}

/// `nfs bench` settings.
#[derive(Debug, Clone)]
pub struct BenchOpts {
    /// WRITE instead of READ.
    pub write: bool,
    /// Octets per call.
    pub size: u32,
    /// Calls in flight.
    pub depth: u32,
    /// How long to run.
    pub duration: Duration,
    /// The file used, relative to the export (created and filled first).
    pub path: String,
    /// Print JSON.
    pub json: bool,
}

/// What `nfs bench` measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchReport {
    /// "read" or "write".
    pub op: &'static str,
    /// Octets per call.
    pub size: u32,
    /// Calls in flight.
    pub depth: u32,
    /// Calls completed.
    pub ops: u64,
    /// Seconds measured.
    pub seconds: f64,
    /// Calls per second.
    pub ops_per_sec: f64,
    /// Payload gigabytes (10^9 octets) per second.
    pub gb_per_sec: f64,
    /// Latency percentiles in microseconds: p50, p90, p99, p99.9, max.
    pub latency_us: [f64; 5],
}

/// Which NFS version to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NfsVers {
    /// NFSv3 with MOUNT.
    V3,
    /// NFSv4.1 with a session.
    V41,
}

/// `nfs` settings.
#[derive(Debug, Clone)]
pub struct NfsClientOpts {
    /// The NFS version.
    pub vers: NfsVers,
    /// Connection configuration.
    pub conn: ConnConfig,
    /// MOUNT's TCP port; `None` asks the portmapper (NFSv3 only).
    pub mount_port: Option<u16>,
    /// The MOUNT path (NFSv3), or the export's path from the pseudo-root (NFSv4.1).
    pub export: String,
    /// Connect and per-call timeout.
    pub timeout: Duration,
    /// siw: confirm Sends and Writes with zero-length Reads (`SiwConfig::confirm_completions`).
    pub siw_confirm: bool,
    /// The operation.
    pub op: NfsOp,
}

/// The siw device, with the confirmation Reads `o` asks for.
fn siw_device(o: &NfsClientOpts) -> Result<SiwDevice, CliError> {
    SiwDevice::with_config(SiwConfig {
        confirm_completions: o.siw_confirm,
        ..SiwConfig::default()
    })
    .map_err(|e| CliError::Serve(format!("siw: {e}")))
}

fn nfs_err(e: NfsClientError) -> CliError {
    CliError::Nfs(e.to_string())
}

/// Runs one `nfs` operation.
pub fn run(ep: &Endpoint, o: &NfsClientOpts) -> Result<(), CliError> {
    if o.vers == NfsVers::V41 {
        return match ep {
            Endpoint::Shm(a) => op4::<ShmProvider>(&ShmDevice::new(), a, o),
            Endpoint::Siw(a) => {
                let dev = siw_device(o)?;
                op4::<SiwProvider>(&dev, a, o)
            }
            #[cfg(feature = "verbs")]
            Endpoint::Verbs(a) => {
                let dev = crate::endpoint::open_verbs()
                    .map_err(|e| CliError::Serve(format!("verbs: {e}")))?;
                let addr = rpcrdma::fabric::verbs::VerbsAddr(*a);
                op4::<rpcrdma::fabric::verbs::VerbsProvider>(&dev, &addr, o)
            }
        };
    }
    let host = match ep {
        Endpoint::Shm(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        Endpoint::Siw(a) => a.ip(),
        #[cfg(feature = "verbs")]
        Endpoint::Verbs(a) => a.ip(),
    };
    let port = match o.mount_port {
        Some(p) => p,
        None => getport(host, MOUNT_PROGRAM, MOUNT_V3, o.timeout).map_err(nfs_err)?,
    };
    let root = mount(SocketAddr::new(host, port), &o.export, o.timeout).map_err(nfs_err)?;
    match ep {
        Endpoint::Shm(a) => op::<ShmProvider>(&ShmDevice::new(), a, root, o),
        Endpoint::Siw(a) => {
            let dev = siw_device(o)?;
            op::<SiwProvider>(&dev, a, root, o)
        }
        #[cfg(feature = "verbs")]
        Endpoint::Verbs(a) => {
            let dev = crate::endpoint::open_verbs()
                .map_err(|e| CliError::Serve(format!("verbs: {e}")))?;
            let addr = rpcrdma::fabric::verbs::VerbsAddr(*a);
            op::<rpcrdma::fabric::verbs::VerbsProvider>(&dev, &addr, root, o)
        }
    }
}

fn type_char(t: Ftype3) -> char {
    match t {
        Ftype3::Reg => '-',
        Ftype3::Dir => 'd',
        Ftype3::Lnk => 'l',
        Ftype3::Blk => 'b',
        Ftype3::Chr => 'c',
        Ftype3::Sock => 's',
        Ftype3::Fifo => 'p',
    }
}

/// Splits `a/b/c` into (`a/b`, `c`).
fn parent_and_name(path: &str) -> Result<(&str, &str), CliError> {
    let p = path.trim_end_matches('/');
    let (dir, name) = p.rsplit_once('/').unwrap_or(("", p));
    if name.is_empty() || name == "." || name == ".." {
        return Err(CliError::BadArgument {
            option: "PATH",
            reason: format!("{path:?} does not name a file"),
        });
    }
    Ok((dir, name))
}

/// Slots of `size` octets the bench file holds; calls cycle through them.
const BENCH_SLOTS: u64 = 64;

/// What the bench loop drives: calls started with a tag and reported by it.
trait Pipelined {
    fn start(&mut self, offset: u64, len: u32, data: &[u8], tag: u64) -> Result<(), CliError>;
    fn poll_done(&mut self) -> Option<(u64, Result<u32, CliError>)>;
}

struct V3Bench<'a, P: Provider> {
    c: &'a mut Nfs3Client<P>,
    fh: Vec<u8>,
}

impl<P: Provider> Pipelined for V3Bench<'_, P> {
    fn start(&mut self, offset: u64, len: u32, data: &[u8], tag: u64) -> Result<(), CliError> {
        self.c
            .start(&self.fh, offset, len, data, tag)
            .map_err(nfs_err)
    }
    fn poll_done(&mut self) -> Option<(u64, Result<u32, CliError>)> {
        self.c.poll_done().map(|(t, r)| (t, r.map_err(nfs_err)))
    }
}

struct V41Bench<'a, P: Provider> {
    c: &'a mut Nfs41Client<P>,
    f: OpenFile,
}

impl<P: Provider> Pipelined for V41Bench<'_, P> {
    fn start(&mut self, offset: u64, len: u32, data: &[u8], tag: u64) -> Result<(), CliError> {
        self.c
            .start(&self.f, offset, len, data, tag)
            .map_err(nfs_err)
    }
    fn poll_done(&mut self) -> Option<(u64, Result<u32, CliError>)> {
        self.c.poll_done().map(|(t, r)| (t, r.map_err(nfs_err)))
    }
}

fn bench_fill(size: u32) -> Vec<u8> {
    (0..u64::from(size) * BENCH_SLOTS)
        .map(|i| (i % 251) as u8)
        .collect()
}

fn bench<P: Provider>(c: &mut Nfs3Client<P>, b: &BenchOpts) -> Result<BenchReport, CliError> {
    let (rsize, wsize) = c.transfer_sizes();
    let size = b.size.clamp(1, if b.write { wsize } else { rsize });
    let (dir, name) = parent_and_name(&b.path)?;
    let dfh = c.lookup_path(dir).map_err(nfs_err)?;
    let fh = c
        .put(&dfh, name.as_bytes(), &bench_fill(size))
        .map_err(nfs_err)?;
    bench_loop(&mut V3Bench { c, fh }, b, size, b.depth)
}

fn bench4<P: Provider>(c: &mut Nfs41Client<P>, b: &BenchOpts) -> Result<BenchReport, CliError> {
    let (rsize, wsize) = c.transfer_sizes();
    let size = b.size.clamp(1, if b.write { wsize } else { rsize });
    let depth = b.depth.min(c.slots() as u32);
    if depth < b.depth {
        eprintln!(
            "rpcrdma nfs: the server granted {} session slots; depth {depth}",
            c.slots()
        );
    }
    let (dir, name) = parent_and_name(&b.path)?;
    let dfh = c.lookup_path(dir).map_err(nfs_err)?;
    c.put(&dfh, name.as_bytes(), &bench_fill(size))
        .map_err(nfs_err)?;
    let f = c
        .open(&dfh, name.as_bytes(), None, b.write)
        .map_err(nfs_err)?;
    let mut t = V41Bench { c, f };
    let r = bench_loop(&mut t, b, size, depth);
    let closed = t.c.close_file(&t.f).map_err(nfs_err);
    let r = r?;
    closed?;
    Ok(r)
}

fn bench_loop(
    c: &mut impl Pipelined,
    b: &BenchOpts,
    size: u32,
    depth: u32,
) -> Result<BenchReport, CliError> {
    let payload = vec![0x5au8; size as usize];
    let data: &[u8] = if b.write { &payload } else { &[] };
    let mut lat_ns: Vec<u64> = Vec::new();
    let mut sent: std::collections::HashMap<u64, std::time::Instant> = Default::default();
    let (mut next, mut octets) = (0u64, 0u64);
    let t0 = std::time::Instant::now();
    let end = t0 + b.duration;
    let stall = b.duration + Duration::from_secs(30);
    loop {
        let now = std::time::Instant::now();
        while now < end && (sent.len() as u32) < depth {
            let offset = (next % BENCH_SLOTS) * u64::from(size);
            c.start(offset, size, data, next)?;
            sent.insert(next, std::time::Instant::now());
            next += 1;
        }
        if sent.is_empty() {
            break;
        }
        if let Some((tag, r)) = c.poll_done() {
            let n = r?;
            if let Some(t) = sent.remove(&tag) {
                lat_ns.push(t.elapsed().as_nanos() as u64);
            }
            octets += u64::from(n);
        }
        if t0.elapsed() > stall {
            return Err(CliError::Nfs(format!(
                "{} calls never completed",
                sent.len()
            )));
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    lat_ns.sort_unstable();
    let pct = |p: f64| {
        if lat_ns.is_empty() {
            return 0.0;
        }
        let i = ((lat_ns.len() as f64 * p).ceil() as usize).clamp(1, lat_ns.len()) - 1;
        lat_ns[i] as f64 / 1e3
    };
    let ops = lat_ns.len() as u64;
    Ok(BenchReport {
        op: if b.write { "write" } else { "read" },
        size,
        depth,
        ops,
        seconds: secs,
        ops_per_sec: ops as f64 / secs,
        gb_per_sec: octets as f64 / secs / 1e9,
        latency_us: [pct(0.5), pct(0.9), pct(0.99), pct(0.999), pct(1.0)],
    })
}

fn print_bench(out: &mut impl Write, r: &BenchReport, json: bool) -> Result<(), CliError> {
    let io = |e: std::io::Error| CliError::Nfs(e.to_string());
    if json {
        serde_json::to_writer_pretty(&mut *out, r).map_err(|e| CliError::Nfs(e.to_string()))?;
        return writeln!(out).map_err(io);
    }
    let [p50, p90, p99, p999, max] = r.latency_us;
    writeln!(
        out,
        "nfs bench {} size {} depth {}: {} ops in {:.2}s, {:.0} ops/s, {:.3} GB/s; \
         latency us p50 {p50:.1} p90 {p90:.1} p99 {p99:.1} p99.9 {p999:.1} max \
         {max:.1}",
        r.op, r.size, r.depth, r.ops, r.seconds, r.ops_per_sec, r.gb_per_sec
    )
    .map_err(io)
}

fn read_input(file: &std::path::Path) -> Result<Vec<u8>, CliError> {
    if file.as_os_str() == "-" {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut v)
            .map_err(|e| CliError::Nfs(e.to_string()))?;
        Ok(v)
    } else {
        std::fs::read(file).map_err(|e| CliError::Nfs(format!("{}: {e}", file.display())))
    }
}

fn type_char4(t: Option<u32>) -> char {
    match t {
        Some(ftype::NF4REG) => '-',
        Some(ftype::NF4DIR) => 'd',
        Some(ftype::NF4LNK) => 'l',
        Some(ftype::NF4BLK) => 'b',
        Some(ftype::NF4CHR) => 'c',
        Some(ftype::NF4SOCK) => 's',
        Some(ftype::NF4FIFO) => 'p',
        _ => '?',
    }
}

fn op4<P: Provider>(dev: &P::Device, addr: &P::Addr, o: &NfsClientOpts) -> Result<(), CliError> {
    let mut c = Nfs41Client::<P>::connect(dev, addr, &o.conn, o.timeout).map_err(nfs_err)?;
    let r = op4_run(&mut c, o);
    // The server's calls on the session's backchannel (RFC 8167), answered meanwhile.
    let cb = c.callbacks();
    let t = c.backchannel_transport();
    eprintln!(
        "rpcrdma nfs: backchannel ({}): answered {} CB_NULL, {} CB_COMPOUND ({} CB_RECALL); \
         {} refused; transport: {} calls, {} ERR_VERS, {} ERR_CHUNK, {} dropped",
        if c.backchannel_granted() {
            "granted"
        } else {
            "not granted"
        },
        cb.nulls,
        cb.compounds,
        cb.recalls,
        cb.refused,
        t.calls,
        t.err_vers,
        t.err_chunk,
        t.dropped
    );
    // The session and client id are ended even when the operation failed.
    let closed = c.shutdown().map_err(nfs_err);
    r?;
    closed
}

fn op4_run<P: Provider>(c: &mut Nfs41Client<P>, o: &NfsClientOpts) -> Result<(), CliError> {
    c.set_export(&o.export).map_err(nfs_err)?;
    let mut out = std::io::stdout().lock();
    let io = |e: std::io::Error| CliError::Nfs(e.to_string());
    match &o.op {
        NfsOp::Ls(dir) => {
            let fh = c.lookup_path(dir).map_err(nfs_err)?;
            let mut list = c.list(&fh).map_err(nfs_err)?;
            list.retain(|e| e.name != b"." && e.name != b"..");
            list.sort_by(|a, b| a.name.cmp(&b.name));
            for e in list {
                let name = String::from_utf8_lossy(&e.name);
                let a = &e.attrs;
                writeln!(
                    out,
                    "{}{:04o} {:>5} {:>5} {:>12} {name}",
                    type_char4(a.ftype),
                    a.mode.unwrap_or(0),
                    a.owner.as_deref().unwrap_or("?"),
                    a.owner_group.as_deref().unwrap_or("?"),
                    a.size.map_or_else(|| "?".to_string(), |s| s.to_string()),
                )
                .map_err(io)?;
            }
        }
        NfsOp::Get(path, file) => {
            let (dir, name) = parent_and_name(path)?;
            let dfh = c.lookup_path(dir).map_err(nfs_err)?;
            let n = if file.as_os_str() == "-" {
                c.get(&dfh, name.as_bytes(), &mut out).map_err(nfs_err)?
            } else {
                let mut f = std::io::BufWriter::new(
                    std::fs::File::create(file)
                        .map_err(|e| CliError::Nfs(format!("{}: {e}", file.display())))?,
                );
                let n = c.get(&dfh, name.as_bytes(), &mut f).map_err(nfs_err)?;
                f.flush().map_err(io)?;
                n
            };
            eprintln!("rpcrdma nfs: got {path} ({n} octets)");
        }
        NfsOp::Put(file, path) => {
            let data = read_input(file)?;
            let (dir, name) = parent_and_name(path)?;
            let dfh = c.lookup_path(dir).map_err(nfs_err)?;
            c.put(&dfh, name.as_bytes(), &data).map_err(nfs_err)?;
            eprintln!("rpcrdma nfs: put {path} ({} octets)", data.len());
        }
        NfsOp::Bench(b) => {
            let r = bench4(c, b)?;
            print_bench(&mut out, &r, b.json)?;
        }
        NfsOp::Hold(path, how_long) => hold4(c, path, *how_long)?,
    }
    out.flush().map_err(io)
}

/// OPENs `nfs hold` tries before it reports that no delegation was granted.
const HOLD_OPENS: u32 = 10;

/// `nfs hold`: OPEN for reading wanting a delegation, then poll (answering callbacks,
/// returning what is recalled) until the delegation is returned or `how_long` passed.
fn hold4<P: Provider>(
    c: &mut Nfs41Client<P>,
    path: &str,
    how_long: Duration,
) -> Result<(), CliError> {
    let (dir, name) = parent_and_name(path)?;
    let dfh = c.lookup_path(dir).map_err(nfs_err)?;
    c.set_want_delegations(true);
    // A server may decline at first and grant later (Linux nfsd delegates nothing
    // while a grace period runs or before it holds the client's callback path up; ours
    // waits for the CB_NULL answer). Open again, a few times, before saying none was
    // granted.
    let mut opens = 1;
    let mut f = c
        .open(&dfh, name.as_bytes(), None, false)
        .map_err(nfs_err)?;
    while f.delegation.is_none() && opens < HOLD_OPENS {
        c.close_file(&f).map_err(nfs_err)?;
        c.serve_callbacks(Duration::from_millis(300));
        f = c
            .open(&dfh, name.as_bytes(), None, false)
            .map_err(nfs_err)?;
        opens += 1;
    }
    eprintln!(
        "rpcrdma nfs: hold {path}: delegation {} ({opens} open(s))",
        if f.delegation.is_some() {
            "granted"
        } else {
            "not granted"
        }
    );
    let end = std::time::Instant::now() + how_long;
    while f.delegation.is_some() && c.delegations_returned() == 0 && std::time::Instant::now() < end
    {
        c.serve_callbacks(Duration::from_millis(10));
    }
    eprintln!(
        "rpcrdma nfs: hold {path}: recalled {} returned {}",
        c.callbacks().recalls_held,
        c.delegations_returned()
    );
    c.close_file(&f).map_err(nfs_err)
}

fn op<P: Provider>(
    dev: &P::Device,
    addr: &P::Addr,
    root: Vec<u8>,
    o: &NfsClientOpts,
) -> Result<(), CliError> {
    let mut c = Nfs3Client::<P>::connect(dev, addr, &o.conn, root, o.timeout).map_err(nfs_err)?;
    let mut out = std::io::stdout().lock();
    let io = |e: std::io::Error| CliError::Nfs(e.to_string());
    match &o.op {
        NfsOp::Ls(dir) => {
            let fh = c.lookup_path(dir).map_err(nfs_err)?;
            let mut list = c.list(&fh).map_err(nfs_err)?;
            // Like ls without -a: servers that list "." and ".." (Linux nfsd) show no more
            // than ours.
            list.retain(|e| e.name != b"." && e.name != b"..");
            list.sort_by(|a, b| a.name.cmp(&b.name));
            for e in list {
                let name = String::from_utf8_lossy(&e.name);
                match e.attr {
                    Some(a) => writeln!(
                        out,
                        "{}{:04o} {:>5} {:>5} {:>12} {name}",
                        type_char(a.ftype),
                        a.mode,
                        a.uid,
                        a.gid,
                        a.size
                    ),
                    None => writeln!(out, "?????? {:>5} {:>5} {:>12} {name}", "", "", ""),
                }
                .map_err(io)?;
            }
        }
        NfsOp::Get(path, file) => {
            let fh = c.lookup_path(path).map_err(nfs_err)?;
            let n = if file.as_os_str() == "-" {
                c.get(&fh, &mut out).map_err(nfs_err)?
            } else {
                let mut f = std::io::BufWriter::new(
                    std::fs::File::create(file)
                        .map_err(|e| CliError::Nfs(format!("{}: {e}", file.display())))?,
                );
                let n = c.get(&fh, &mut f).map_err(nfs_err)?;
                f.flush().map_err(io)?;
                n
            };
            eprintln!("rpcrdma nfs: got {path} ({n} octets)");
        }
        NfsOp::Put(file, path) => {
            let data = read_input(file)?;
            let (dir, name) = parent_and_name(path)?;
            let dfh = c.lookup_path(dir).map_err(nfs_err)?;
            c.put(&dfh, name.as_bytes(), &data).map_err(nfs_err)?;
            eprintln!("rpcrdma nfs: put {path} ({} octets)", data.len());
        }
        NfsOp::Bench(b) => {
            let r = bench(&mut c, b)?;
            print_bench(&mut out, &r, b.json)?;
        }
        NfsOp::Hold(..) => {
            return Err(CliError::Nfs("hold needs NFSv4.1 (--vers 4.1)".into()));
        }
    }
    out.flush().map_err(io)
}
