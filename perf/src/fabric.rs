//! Raw-fabric baselines, generic over any [`Provider`]: what the provider gives with no
//! RPC layer on top, modelled on perftest.
//!
//! - `send/recv` (lat, like `ib_send_lat`): the client Sends `size` octets, the server's
//!   Receive completes and it Sends `size` octets back; one round trip per operation.
//! - `write` (bw, like `ib_write_bw`): the client keeps `depth` RDMA Writes of `size`
//!   octets in flight per connection into the server's registered memory.
//! - `read` (bw, like `ib_read_bw`): the same with RDMA Reads of the server's memory.
//! - `send` (rate): the client keeps `depth` Sends in flight per connection; the server
//!   reposts each Receive as it completes.
//!
//! The server side runs on its own pinned thread and only polls its completion queue
//! (software providers execute the peer's requests there). Connection set-up exchanges
//! the server's buffer address and remote key in the accept private data.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use std::net::{Ipv4Addr, SocketAddr};

use rpcrdma::fabric::shm::{ShmAddr, ShmDevice, ShmProvider};
use rpcrdma::fabric::siw::{SiwDevice, SiwProvider};
use rpcrdma::fabric::{
    Access, CmEvent, Completion, CompletionQueue, ConnectionManager, Device, MemoryRegion,
    ProtectionDomain, Provider, QpCaps, QpConfig, QpInit, QueuePair, RecvWr, RemoteAddr, SendWr,
    Sge, WcOpcode, RNR_RETRY_INFINITE,
};
use rpcrdma_pools::{Arena, ArenaOptions, HugePages};

use crate::cli::{SiwCompletions, SiwCrc};
use crate::measure::{Measurement, Meter};
use crate::spec::{pin, BenchError, Mode, RowSpec};

/// How a provider is opened and addressed; everything else goes through the
/// [`Provider`] traits.
pub trait FabricKind {
    /// The provider.
    type P: Provider;
    /// Opens one device (one per simulated host).
    fn open() -> Result<<Self::P as Provider>::Device, BenchError>;
    /// A listening address nobody else uses.
    fn unique_addr() -> <Self::P as Provider>::Addr;
    /// An address from the command line (`--connect`, `server --addr`).
    fn parse_addr(s: &str) -> Result<<Self::P as Provider>::Addr, BenchError>;
}

fn socket_addr(s: &str) -> Result<SocketAddr, BenchError> {
    s.parse()
        .map_err(|e| BenchError::Setup(format!("address {s:?}: {e} (want IP:PORT)")))
}

/// The shared-memory provider.
pub struct Shm;

impl FabricKind for Shm {
    type P = ShmProvider;

    fn open() -> Result<ShmDevice, BenchError> {
        Ok(ShmDevice::new())
    }

    fn unique_addr() -> ShmAddr {
        use std::sync::atomic::AtomicU64;
        static NEXT: AtomicU64 = AtomicU64::new(0);
        ShmAddr::abstract_name(format!(
            "rpcrdma-perf-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ))
    }

    fn parse_addr(s: &str) -> Result<ShmAddr, BenchError> {
        // A path names a socket file; anything else an abstract-namespace name.
        Ok(if s.starts_with('/') {
            ShmAddr::Path(s.into())
        } else {
            ShmAddr::abstract_name(s.to_owned())
        })
    }
}

/// Software iWARP over loopback TCP.
pub struct Siw;

impl FabricKind for Siw {
    type P = SiwProvider;

    fn open() -> Result<SiwDevice, BenchError> {
        let cfg = siw_config(
            siw_completions(),
            SIW_CRC.get().copied().unwrap_or_default(),
        );
        Ok(SiwDevice::with_config(cfg)?)
    }

    fn unique_addr() -> SocketAddr {
        // A port the kernel just handed out and nobody holds: the listener binds it a
        // moment later (another process taking it in between fails set-up, not the run).
        let port = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|l| l.local_addr())
            .map_or(0, |a| a.port());
        SocketAddr::from((Ipv4Addr::LOCALHOST, port))
    }

    fn parse_addr(s: &str) -> Result<SocketAddr, BenchError> {
        socket_addr(s)
    }
}

/// rdma-core verbs on a real or software RDMA device (feature `verbs`): the device named
/// by `RPCRDMA_VERBS_DEV` (else the first one), reached at `RPCRDMA_VERBS_IP` (an address
/// the device owns; rdma_cm has no loopback device, so there is no default).
#[cfg(feature = "verbs")]
pub struct Verbs;

#[cfg(feature = "verbs")]
impl FabricKind for Verbs {
    type P = rpcrdma::fabric::verbs::VerbsProvider;

    fn open() -> Result<rpcrdma::fabric::verbs::VerbsDevice, BenchError> {
        use rpcrdma::fabric::verbs::VerbsDevice;
        Ok(match std::env::var("RPCRDMA_VERBS_DEV") {
            Ok(name) => VerbsDevice::open(&name)?,
            Err(_) => VerbsDevice::open_first()?,
        })
    }

    fn unique_addr() -> rpcrdma::fabric::verbs::VerbsAddr {
        use std::sync::atomic::AtomicU32;
        static NEXT: AtomicU32 = AtomicU32::new(0);
        // An unparseable or missing address leaves 0.0.0.0, which rdma_cm refuses to
        // connect to: the row fails at set-up with the provider's error.
        let ip = std::env::var("RPCRDMA_VERBS_IP")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(std::net::IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        // rdma_cm ports are per node: spread processes apart, one port per row.
        let port =
            20_000 + (std::process::id() % 40) * 1000 + NEXT.fetch_add(1, Ordering::Relaxed) % 1000;
        rpcrdma::fabric::verbs::VerbsAddr(SocketAddr::new(ip, port as u16))
    }

    fn parse_addr(s: &str) -> Result<rpcrdma::fabric::verbs::VerbsAddr, BenchError> {
        socket_addr(s).map(rpcrdma::fabric::verbs::VerbsAddr)
    }
}

/// The process's choice of siw completions (set once from the configuration; a device
/// is opened per row, and `FabricKind::open` takes no arguments).
static SIW_COMPLETIONS: std::sync::OnceLock<SiwCompletions> = std::sync::OnceLock::new();

/// Sets when siw Sends and Writes complete, for every siw device opened afterwards (the
/// first call wins).
pub fn set_siw_completions(c: SiwCompletions) {
    let _ = SIW_COMPLETIONS.set(c);
}

fn siw_completions() -> SiwCompletions {
    SIW_COMPLETIONS.get().copied().unwrap_or_default()
}

/// The siw device settings a run's `--siw-completions` and `--siw-crc` choose.
fn siw_config(completions: SiwCompletions, crc: SiwCrc) -> rpcrdma::fabric::siw::SiwConfig {
    let mut cfg = rpcrdma::fabric::siw::SiwConfig::default();
    match completions {
        SiwCompletions::Strict => cfg.confirm_completions = true,
        SiwCompletions::SharedSegment => {
            cfg.confirm_completions = true;
            cfg.confirmation_own_segment = false;
        }
        SiwCompletions::OnTransmit => cfg.confirm_completions = false,
    }
    cfg.crc = crc == SiwCrc::On;
    cfg
}

/// The process's choice of siw CRCs (set once, as [`SIW_COMPLETIONS`]).
static SIW_CRC: std::sync::OnceLock<SiwCrc> = std::sync::OnceLock::new();

/// Sets whether siw devices opened afterwards ask for MPA CRCs (the first call wins).
pub fn set_siw_crc(c: SiwCrc) {
    let _ = SIW_CRC.set(c);
}

/// What a bandwidth row's client posts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BwOp {
    /// RDMA Write into the server's memory, each in flight from its own source slot.
    Write,
    /// RDMA Write into the server's memory, every one from the same source slot: the
    /// memory pattern of the RPC `write chunk` row, whose SOURCE writes its result from
    /// one registered copy per connection into a sink per call in flight (`Write` reads
    /// `depth` sources, which at 1 MiB no longer fit the caches the one source does).
    WriteOneSource,
    /// RDMA Read from the server's memory.
    Read,
}

/// How long connection set-up may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);
/// Completions taken per poll.
const POLL_BATCH: usize = 32;
/// Bytes of the accept private data: buffer address (8) and remote key (4).
const RDV_LEN: usize = 12;

/// One side's objects. Field order is drop order: queue pairs before the CM, the
/// registration before the arena.
struct Host<P: Provider> {
    qps: Vec<P::Qp>,
    cm: P::Cm,
    cq: P::Cq,
    mr: P::Mr,
    pd: P::Pd,
    _dev: P::Device,
    arena: Arc<Arena>,
}

impl<P: Provider> Host<P> {
    fn new(dev: P::Device, arena_len: usize, cq_depth: u32) -> Result<Host<P>, BenchError> {
        let opts = ArenaOptions::new(arena_len)
            .shareable(true)
            .hugepages(HugePages::Auto)
            .name("rpcrdma-perf");
        let arena = Arc::new(Arena::new(&opts).map_err(|e| BenchError::Memory(e.to_string()))?);
        let pd = dev.alloc_pd()?;
        let mr = pd.reg_arena(&arena, Access::ALL)?;
        let cq = dev.create_cq(cq_depth)?;
        let cm = dev.create_cm()?;
        Ok(Host {
            qps: Vec::new(),
            cm,
            cq,
            mr,
            pd,
            _dev: dev,
            arena,
        })
    }

    fn sge(&self, off: usize, len: usize) -> Sge {
        Sge::new(
            self.arena.base() as u64 + off as u64,
            len as u32,
            self.mr.lkey(),
        )
    }

    /// Connects (`request` None) or accepts one connection; the queue pair joins `qps`.
    fn open_qp(
        &mut self,
        addr: &P::Addr,
        request: Option<P::ConnRequest>,
        config: QpConfig,
        private_data: &[u8],
    ) -> Result<(), BenchError> {
        let init = QpInit {
            pd: &self.pd,
            send_cq: &self.cq,
            recv_cq: &self.cq,
            srq: None,
            config,
        };
        let qp = match request {
            Some(r) => self.cm.accept(r, init, private_data)?,
            None => self.cm.connect(addr, init, private_data)?,
        };
        self.qps.push(qp);
        Ok(())
    }
}

/// Receives each server connection keeps posted, and sends each side may have queued.
fn queue_depth(spec: &RowSpec) -> u32 {
    match spec.mode {
        Mode::Lat => 4,
        Mode::Bw => spec.depth.max(1) + 1,
        // A request/response server may hold an answer per request in flight plus one
        // per request answered whose Send it has not yet seen complete (the client
        // consumed it and asked again within the same poll): twice the depth.
        Mode::Rate => 2 * spec.depth.max(1) + 1,
    }
}

fn qp_config(spec: &RowSpec) -> QpConfig {
    let d = queue_depth(spec);
    QpConfig {
        caps: QpCaps {
            max_send_wr: d,
            max_recv_wr: d,
            max_send_sge: 1,
            max_recv_sge: 1,
        },
        // A late repost must slow a sender down, not kill the connection.
        rnr_retry: RNR_RETRY_INFINITE,
        ..QpConfig::default()
    }
}

/// Connects `spec.connections` queue pairs between two fresh hosts. Returns (client,
/// server, server buffer as the client must address it).
#[allow(clippy::type_complexity)]
fn connect<F: FabricKind>(
    spec: &RowSpec,
) -> Result<(Host<F::P>, Host<F::P>, RemoteAddr), BenchError> {
    let conns = spec.connections.max(1) as usize;
    let d = queue_depth(spec) as usize;
    // Receive (or target) buffers per connection and slot, then one buffer for sends.
    let arena_len = (conns + 1) * d * spec.size + 4096;
    let cq_depth = u32::try_from(conns * d * 2)
        .map_err(|_| BenchError::Setup("too many connections for one completion queue".into()))?;
    let mut server = Host::<F::P>::new(F::open()?, arena_len, cq_depth)?;
    let mut client = Host::<F::P>::new(F::open()?, arena_len, cq_depth)?;
    let addr = F::unique_addr();
    server.cm.listen(&addr)?;
    let cfg = qp_config(spec);
    let remote = RemoteAddr {
        addr: server.arena.base() as u64,
        rkey: server.mr.rkey(),
    };
    let mut rdv = [0u8; RDV_LEN];
    rdv[..8].copy_from_slice(&remote.addr.to_be_bytes());
    rdv[8..].copy_from_slice(&remote.rkey.to_be_bytes());
    for _ in 0..conns {
        client.open_qp(&addr, None, cfg, b"rpcrdma-perf")?;
    }
    let end = Instant::now() + SETUP_TIMEOUT;
    let (mut accepted, mut client_up, mut server_up) = (0, 0, 0);
    let mut seen_remote = None;
    while client_up < conns || server_up < conns {
        if Instant::now() >= end {
            return Err(BenchError::Setup(format!(
                "{} of {conns} connections up after {}s",
                client_up.min(server_up),
                SETUP_TIMEOUT.as_secs()
            )));
        }
        if let Some(ev) = server.cm.poll_event()? {
            match ev {
                CmEvent::ConnectRequest { request, .. } => {
                    server.open_qp(&addr, Some(request), cfg, &rdv)?;
                    accepted += 1;
                }
                CmEvent::Established { .. } => server_up += 1,
                other => {
                    return Err(BenchError::Setup(format!("server saw {other:?}")));
                }
            }
        }
        if let Some(ev) = client.cm.poll_event()? {
            match ev {
                CmEvent::Established { private_data, .. } => {
                    let b = private_data.as_bytes();
                    if b.len() < RDV_LEN {
                        return Err(BenchError::Setup(format!(
                            "accept private data has {} octets, expected {RDV_LEN}",
                            b.len()
                        )));
                    }
                    let mut a = [0u8; 8];
                    a.copy_from_slice(&b[..8]);
                    let mut k = [0u8; 4];
                    k.copy_from_slice(&b[8..RDV_LEN]);
                    seen_remote = Some(RemoteAddr {
                        addr: u64::from_be_bytes(a),
                        rkey: u32::from_be_bytes(k),
                    });
                    client_up += 1;
                }
                other => return Err(BenchError::Setup(format!("client saw {other:?}"))),
            }
        }
        if accepted < conns || client_up < conns {
            thread::yield_now();
        }
    }
    let remote = seen_remote.ok_or_else(|| BenchError::Setup("no accept private data".into()))?;
    Ok((client, server, remote))
}

fn wr_id(conn: usize, slot: usize) -> u64 {
    (conn as u64) << 32 | slot as u64
}

fn split_wr_id(id: u64) -> (usize, usize) {
    ((id >> 32) as usize, (id & 0xffff_ffff) as usize)
}

fn check(c: &Completion) -> Result<(), BenchError> {
    if c.status.is_success() {
        Ok(())
    } else {
        Err(BenchError::Completion {
            opcode: c.opcode,
            status: c.status,
        })
    }
}

/// Offset of receive buffer `slot` of connection `conn`.
fn slot_off(spec: &RowSpec, conn: usize, slot: usize) -> usize {
    (conn * queue_depth(spec) as usize + slot) * spec.size
}

fn post_recv<P: Provider>(
    h: &mut Host<P>,
    spec: &RowSpec,
    conn: usize,
    slot: usize,
) -> Result<(), BenchError> {
    let sge = [h.sge(slot_off(spec, conn, slot), spec.size)];
    let wr = [RecvWr {
        wr_id: wr_id(conn, slot),
        sgl: &sge,
    }];
    h.qps[conn].post_recv(&wr)?;
    Ok(())
}

/// The server thread: reposts receives and, if `reply` (latency, request/response),
/// answers each with a Send.
fn serve<P: Provider>(
    mut h: Host<P>,
    spec: RowSpec,
    reply: bool,
    stop: Arc<AtomicBool>,
    deadline: Instant,
) -> Result<(), BenchError> {
    pin(spec.server_core);
    let conns = h.qps.len();
    let mut sends_out = vec![0u32; conns];
    // Answers owed: requests received while the send queue was full (a Send's
    // completion may come polls after the request its answer allowed).
    let mut owed = vec![0u32; conns];
    let max_send = queue_depth(&spec);
    // Replies come from the area after the receive buffers.
    let reply_off = slot_off(&spec, conns, 0);
    let mut wc = [Completion::EMPTY; POLL_BATCH];
    let mut idle = 0u32;
    while !stop.load(Ordering::Relaxed) {
        let n = h.cq.poll(&mut wc);
        for c in &wc[..n] {
            check(c)?;
            let (conn, slot) = split_wr_id(c.wr_id);
            if conn >= conns {
                return Err(BenchError::Setup(format!(
                    "unknown work request id {:#x}",
                    c.wr_id
                )));
            }
            match c.opcode {
                WcOpcode::Recv => {
                    post_recv(&mut h, &spec, conn, slot)?;
                    owed[conn] += u32::from(reply);
                }
                _ => sends_out[conn] = sends_out[conn].saturating_sub(1),
            }
        }
        for conn in 0..conns {
            while owed[conn] > 0 && sends_out[conn] < max_send {
                let sge = [h.sge(reply_off, spec.size)];
                h.qps[conn].post_send(&[SendWr::send(wr_id(conn, 0), &sge)])?;
                sends_out[conn] += 1;
                owed[conn] -= 1;
            }
        }
        if n == 0 {
            idle = idle.wrapping_add(1);
            if idle & 1023 == 0 && Instant::now() >= deadline {
                break;
            }
            std::hint::spin_loop();
        } else {
            idle = 0;
        }
    }
    Ok(())
}

/// Runs one raw-fabric row on provider `F` (bandwidth rows with RDMA Write).
pub fn run<F: FabricKind>(spec: &RowSpec, meter: Meter) -> Result<Measurement, BenchError> {
    run_op::<F>(spec, BwOp::Write, meter)
}

/// Runs one raw-fabric row on provider `F`; bandwidth rows post `op`.
pub fn run_op<F: FabricKind>(
    spec: &RowSpec,
    op: BwOp,
    meter: Meter,
) -> Result<Measurement, BenchError> {
    let (mut client, mut server, remote) = connect::<F>(spec)?;
    let conns = client.qps.len();
    let recv_slots = queue_depth(spec) as usize;
    if spec.mode != Mode::Bw {
        for conn in 0..conns {
            for slot in 0..recv_slots {
                post_recv(&mut server, spec, conn, slot)?;
                if spec.mode == Mode::Lat {
                    post_recv(&mut client, spec, conn, slot)?;
                }
            }
        }
    }
    let reply = spec.mode == Mode::Lat;
    measure_against(server, spec, reply, meter, |meter| match spec.mode {
        Mode::Lat => client_lat(&mut client, spec, meter),
        Mode::Bw | Mode::Rate => client_stream(&mut client, spec, op, remote, meter),
    })
}

/// Runs `client` on the client core, measuring with `meter`, while `server` is served
/// (answering each receive with a Send if `reply`) on its own thread; then stops the
/// server and reports the first error of either side.
fn measure_against<P: Provider>(
    server: Host<P>,
    spec: &RowSpec,
    reply: bool,
    mut meter: Meter,
    client: impl FnOnce(&mut Meter) -> Result<(), BenchError>,
) -> Result<Measurement, BenchError> {
    meter.restart();
    let stop = Arc::new(AtomicBool::new(false));
    let server_thread = {
        let (stop, spec, deadline) = (stop.clone(), *spec, meter.deadline());
        thread::spawn(move || serve(server, spec, reply, stop, deadline))
    };
    pin(spec.client_core);
    let result = client(&mut meter);
    stop.store(true, Ordering::Relaxed);
    let served = server_thread
        .join()
        .unwrap_or_else(|_| Err(BenchError::Setup("server thread panicked".into())));
    result?;
    served?;
    Ok(meter.finish())
}

/// Runs the request/response row on provider `F`: `spec.depth` Sends in flight per
/// connection, each answered by the server with a Send of the same size, an operation
/// counted (and its time taken) when its answer is received. The RPC rate row's like for
/// like: a request/response at the same depth, without RPC. Every Send is signaled, as
/// the engine's are.
pub fn run_request_response<F: FabricKind>(
    spec: &RowSpec,
    meter: Meter,
) -> Result<Measurement, BenchError> {
    let (mut client, mut server, _) = connect::<F>(spec)?;
    let conns = client.qps.len();
    let depth = spec.depth.max(1) as usize;
    for conn in 0..conns {
        for slot in 0..queue_depth(spec) as usize {
            post_recv(&mut server, spec, conn, slot)?;
        }
        for slot in 0..depth {
            post_recv(&mut client, spec, conn, slot)?;
        }
    }
    measure_against(server, spec, true, meter, |meter| {
        client_request_response(&mut client, spec, meter)
    })
}

/// After an empty poll: spins, and every 1024 empty polls in a row asks the meter
/// whether the row is over.
fn idle_expired(idle: &mut u32, meter: &mut Meter) -> bool {
    *idle = idle.wrapping_add(1);
    if *idle & 1023 == 0 && meter.expired(Instant::now()) {
        return true;
    }
    std::hint::spin_loop();
    false
}

fn client_request_response<P: Provider>(
    h: &mut Host<P>,
    spec: &RowSpec,
    meter: &mut Meter,
) -> Result<(), BenchError> {
    let conns = h.qps.len();
    let depth = spec.depth.max(1) as usize;
    let max_send = queue_depth(spec);
    let send_off = slot_off(spec, conns, 0);
    // Requests awaiting their answer, and Sends not yet completed, per connection.
    let mut awaiting = vec![0usize; conns];
    let mut sends_out = vec![0u32; conns];
    // When each request went out: a ring per connection, answers come in order (RC).
    let mut posted_at = vec![Instant::now(); conns * depth];
    let mut head = vec![0usize; conns];
    let mut wc = [Completion::EMPTY; POLL_BATCH];
    let mut idle = 0u32;
    loop {
        let now = Instant::now();
        for conn in 0..conns {
            while awaiting[conn] < depth && sends_out[conn] < max_send {
                let sge = [h.sge(send_off, spec.size)];
                h.qps[conn].post_send(&[SendWr::send(wr_id(conn, 0), &sge)])?;
                posted_at[conn * depth + (head[conn] + awaiting[conn]) % depth] = now;
                awaiting[conn] += 1;
                sends_out[conn] += 1;
            }
        }
        let n = h.cq.poll(&mut wc);
        if n == 0 {
            if idle_expired(&mut idle, meter) {
                return Ok(());
            }
            continue;
        }
        idle = 0;
        let done_at = Instant::now();
        for c in &wc[..n] {
            check(c)?;
            let (conn, slot) = split_wr_id(c.wr_id);
            if conn >= conns {
                return Err(BenchError::Setup(format!(
                    "unknown work request id {:#x}",
                    c.wr_id
                )));
            }
            if c.opcode != WcOpcode::Recv {
                sends_out[conn] = sends_out[conn].saturating_sub(1);
                continue;
            }
            post_recv(h, spec, conn, slot)?;
            if awaiting[conn] == 0 {
                return Err(BenchError::Setup(format!(
                    "an answer nobody asked for on connection {conn}"
                )));
            }
            let at = posted_at[conn * depth + head[conn]];
            head[conn] = (head[conn] + 1) % depth;
            awaiting[conn] -= 1;
            if !meter.tick(done_at, (done_at - at).as_nanos() as u64) {
                return Ok(());
            }
        }
    }
}

fn client_lat<P: Provider>(
    h: &mut Host<P>,
    spec: &RowSpec,
    meter: &mut Meter,
) -> Result<(), BenchError> {
    let conns = h.qps.len();
    let send_off = slot_off(spec, conns, 0);
    let max_send = queue_depth(spec);
    let mut sends_out = vec![0u32; conns];
    let mut wc = [Completion::EMPTY; POLL_BATCH];
    let mut t = Instant::now();
    'run: loop {
        for conn in 0..conns {
            while sends_out[conn] >= max_send {
                let n = h.cq.poll(&mut wc);
                for c in &wc[..n] {
                    check(c)?;
                    let (cn, slot) = split_wr_id(c.wr_id);
                    if c.opcode == WcOpcode::Recv {
                        return Err(BenchError::Setup(format!(
                            "unexpected reply on connection {cn} slot {slot}"
                        )));
                    }
                    sends_out[cn] = sends_out[cn].saturating_sub(1);
                }
                if meter.expired(Instant::now()) {
                    break 'run;
                }
            }
            let sge = [h.sge(send_off, spec.size)];
            h.qps[conn].post_send(&[SendWr::send(wr_id(conn, 0), &sge)])?;
            sends_out[conn] += 1;
            let mut polls = 0u32;
            let replied = loop {
                let n = h.cq.poll(&mut wc);
                let mut got = false;
                for c in &wc[..n] {
                    check(c)?;
                    let (cn, slot) = split_wr_id(c.wr_id);
                    if c.opcode == WcOpcode::Recv {
                        post_recv(h, spec, cn, slot)?;
                        got = true;
                    } else {
                        sends_out[cn] = sends_out[cn].saturating_sub(1);
                    }
                }
                if got {
                    break true;
                }
                polls = polls.wrapping_add(1);
                if polls & 1023 == 0 && meter.expired(Instant::now()) {
                    break false;
                }
                std::hint::spin_loop();
            };
            if !replied {
                break 'run;
            }
            let now = Instant::now();
            let lat = (now - t).as_nanos() as u64;
            t = now;
            if !meter.tick(now, lat) {
                break 'run;
            }
        }
    }
    Ok(())
}

fn client_stream<P: Provider>(
    h: &mut Host<P>,
    spec: &RowSpec,
    op: BwOp,
    remote: RemoteAddr,
    meter: &mut Meter,
) -> Result<(), BenchError> {
    let conns = h.qps.len();
    let depth = spec.depth.max(1) as usize;
    let rdma = spec.mode == Mode::Bw;
    let mut outstanding = vec![0usize; conns];
    let mut next_slot = vec![0usize; conns];
    let mut posted_at = vec![Instant::now(); conns * depth];
    let mut wc = [Completion::EMPTY; POLL_BATCH];
    let mut idle = 0u32;
    loop {
        let now = Instant::now();
        for conn in 0..conns {
            while outstanding[conn] < depth {
                let slot = next_slot[conn];
                next_slot[conn] = (slot + 1) % depth;
                let off = slot_off(spec, conn, slot);
                let src = if op == BwOp::WriteOneSource {
                    slot_off(spec, conn, 0)
                } else {
                    off
                };
                let sge = [h.sge(src, spec.size)];
                let id = wr_id(conn, slot);
                let wr = if rdma {
                    let peer = RemoteAddr {
                        addr: remote.addr + off as u64,
                        rkey: remote.rkey,
                    };
                    match op {
                        BwOp::Write | BwOp::WriteOneSource => SendWr::write(id, &sge, peer),
                        BwOp::Read => SendWr::read(id, &sge, peer),
                    }
                } else {
                    SendWr::send(id, &sge)
                };
                h.qps[conn].post_send(&[wr])?;
                posted_at[conn * depth + slot] = now;
                outstanding[conn] += 1;
            }
        }
        let n = h.cq.poll(&mut wc);
        if n == 0 {
            if idle_expired(&mut idle, meter) {
                return Ok(());
            }
            continue;
        }
        idle = 0;
        let done_at = Instant::now();
        for c in &wc[..n] {
            check(c)?;
            let (conn, slot) = split_wr_id(c.wr_id);
            let (Some(out), Some(at)) = (
                outstanding.get_mut(conn),
                posted_at.get(conn * depth + slot),
            ) else {
                return Err(BenchError::Setup(format!(
                    "unknown work request id {:#x}",
                    c.wr_id
                )));
            };
            *out = out.saturating_sub(1);
            let lat = (done_at - *at).as_nanos() as u64;
            if !meter.tick(done_at, lat) {
                return Ok(());
            }
        }
    }
}

/// The client side of a paired row's fabric bandwidth ([`crate::paired`]): its
/// connection kept across slices, each slice posting `op`s as the bandwidth rows do and
/// ending with nothing in flight (so the server may turn to the other side's work).
pub(crate) struct PairClient<P: Provider> {
    h: Host<P>,
    spec: RowSpec,
    op: BwOp,
    remote: RemoteAddr,
    outstanding: Vec<usize>,
    next_slot: Vec<usize>,
    posted_at: Vec<Instant>,
}

/// The server side of a paired row's fabric bandwidth: polls its completion queue (a
/// software provider executes the peer's Writes and Reads there) while asked to.
pub(crate) struct PairServer<P: Provider> {
    h: Host<P>,
}

/// Connects a paired row's fabric side: `spec.connections` queue pairs, as the
/// bandwidth rows (same queue depths, memory and provider settings).
#[allow(clippy::type_complexity)]
pub(crate) fn pair_connect<F: FabricKind>(
    spec: &RowSpec,
    op: BwOp,
) -> Result<(PairClient<F::P>, PairServer<F::P>), BenchError> {
    let (client, server, remote) = connect::<F>(spec)?;
    let conns = client.qps.len();
    let depth = spec.depth.max(1) as usize;
    Ok((
        PairClient {
            h: client,
            spec: *spec,
            op,
            remote,
            outstanding: vec![0; conns],
            next_slot: vec![0; conns],
            posted_at: vec![Instant::now(); conns * depth],
        },
        PairServer { h: server },
    ))
}

impl<P: Provider> PairClient<P> {
    /// Keeps `depth` operations in flight per connection until `end` (or, with
    /// `max_ops`, until that many completed), then stops posting and waits for the rest;
    /// `on_done(instant, latency ns)` is called for every completion, the waited-for
    /// ones included (the wire stays busy until the last). False if the hard deadline
    /// passed first.
    pub(crate) fn slice(
        &mut self,
        end: Instant,
        max_ops: Option<u64>,
        deadline: Instant,
        mut on_done: impl FnMut(Instant, u64),
    ) -> Result<bool, BenchError> {
        let h = &mut self.h;
        let spec = &self.spec;
        let conns = h.qps.len();
        let depth = spec.depth.max(1) as usize;
        let mut wc = [Completion::EMPTY; POLL_BATCH];
        let mut done = 0u64;
        let mut posting = true;
        loop {
            let now = Instant::now();
            if posting && (max_ops.is_some_and(|m| done >= m) || (max_ops.is_none() && now >= end))
            {
                posting = false;
            }
            if !posting && self.outstanding.iter().all(|&o| o == 0) {
                return Ok(true);
            }
            if now >= deadline {
                return Ok(false);
            }
            for conn in 0..conns {
                while posting && self.outstanding[conn] < depth {
                    let slot = self.next_slot[conn];
                    self.next_slot[conn] = (slot + 1) % depth;
                    let off = slot_off(spec, conn, slot);
                    let src = if self.op == BwOp::WriteOneSource {
                        slot_off(spec, conn, 0)
                    } else {
                        off
                    };
                    let sge = [h.sge(src, spec.size)];
                    let id = wr_id(conn, slot);
                    let peer = RemoteAddr {
                        addr: self.remote.addr + off as u64,
                        rkey: self.remote.rkey,
                    };
                    let wr = match self.op {
                        BwOp::Write | BwOp::WriteOneSource => SendWr::write(id, &sge, peer),
                        BwOp::Read => SendWr::read(id, &sge, peer),
                    };
                    h.qps[conn].post_send(&[wr])?;
                    self.posted_at[conn * depth + slot] = now;
                    self.outstanding[conn] += 1;
                }
            }
            let n = h.cq.poll(&mut wc);
            if n == 0 {
                std::hint::spin_loop();
                continue;
            }
            let done_at = Instant::now();
            for c in &wc[..n] {
                check(c)?;
                let (conn, slot) = split_wr_id(c.wr_id);
                let (Some(out), Some(at)) = (
                    self.outstanding.get_mut(conn),
                    self.posted_at.get(conn * depth + slot),
                ) else {
                    return Err(BenchError::Setup(format!(
                        "unknown work request id {:#x}",
                        c.wr_id
                    )));
                };
                *out = out.saturating_sub(1);
                done += 1;
                on_done(done_at, (done_at - *at).as_nanos() as u64);
            }
        }
    }
}

impl<P: Provider> PairServer<P> {
    /// Polls while `go` says so (asked every 64 polls that find nothing); false if the
    /// hard deadline passed first.
    pub(crate) fn serve_while(
        &mut self,
        deadline: Instant,
        go: impl Fn() -> bool,
    ) -> Result<bool, BenchError> {
        let mut wc = [Completion::EMPTY; POLL_BATCH];
        let mut idle = 0u32;
        loop {
            let n = self.h.cq.poll(&mut wc);
            for c in &wc[..n] {
                check(c)?;
            }
            if n == 0 {
                idle = idle.wrapping_add(1);
                if idle & 63 == 0 {
                    if !go() {
                        return Ok(true);
                    }
                    if idle & 1023 == 0 && Instant::now() >= deadline {
                        return Ok(false);
                    }
                }
                std::hint::spin_loop();
            } else {
                idle = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--siw-crc` and `--siw-completions` set exactly the settings they name.
    #[test]
    fn siw_options_choose_the_device_settings() {
        let on = siw_config(SiwCompletions::OnTransmit, SiwCrc::On);
        assert!(on.crc && !on.confirm_completions);
        let off = siw_config(SiwCompletions::Strict, SiwCrc::Off);
        assert!(!off.crc && off.confirm_completions && off.confirmation_own_segment);
        let shared = siw_config(SiwCompletions::SharedSegment, SiwCrc::On);
        assert!(shared.crc && shared.confirm_completions && !shared.confirmation_own_segment);
    }
}
