//! Turning a [`Config`] into rows: which benchmarks run for each mode and size, running
//! them one after another, and the notes that explain what is missing.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use crate::cli::ProviderName;
use crate::config::Config;
use crate::fabric::{self, BwOp, FabricKind, Shm, Siw};
use crate::measure::{Meter, Progress};
use crate::paired;
use crate::physical;
use crate::report::{compute_ratios, Row};
use crate::rpc::{self, RpcBench, RpcParams};
use crate::spec::{Layer, Mode, RowSpec};
use crate::tcp;

/// Which code measures a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bench {
    /// [`physical::pingpong`].
    PhysPingpong,
    /// [`physical::ring`].
    PhysRing,
    /// [`physical::memcpy`].
    PhysMemcpy,
    /// [`physical::memcpy_crc`].
    PhysMemcpyCrc,
    /// [`tcp::pingpong`].
    TcpPingpong,
    /// [`tcp::pingpong_copy`].
    TcpPingpongCopy,
    /// [`tcp::stream`].
    TcpStream,
    /// [`fabric::run_op`] on the configured provider (`op` for bandwidth rows).
    Fabric(BwOp),
    /// [`fabric::run_request_response`] on the configured provider.
    FabricRequestResponse,
    /// [`rpc::run`] on the configured provider.
    Rpc(RpcBench),
    /// [`paired::run`]: fabric bandwidth `op` and the TCP stream in alternating slices.
    Paired(BwOp),
}

/// The paired fabric write row's name.
pub const PAIRED_WRITE: &str = "write, paired with tcp stream";

/// A row to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planned {
    /// Its layer.
    pub layer: Layer,
    /// Its name within the layer.
    pub name: &'static str,
    /// The code that measures it.
    pub bench: Bench,
    /// Its parameters.
    pub spec: RowSpec,
    /// The bench of the layer below it is compared with, when not the first one.
    pub against: Option<&'static str>,
}

/// The rows `cfg` asks for, in run order: per mode and size, each layer from the bottom.
/// Baselines come with `cfg.baseline`; RPC rows whenever the build has them.
pub fn plan(cfg: &Config) -> Vec<Planned> {
    let mut out = Vec::new();
    let (base, rpc) = (cfg.baseline, cfg.rpc_available);
    for m in &cfg.modes {
        for &size in &m.sizes {
            let spec = RowSpec {
                mode: m.mode,
                size: size as usize,
                depth: if m.mode == Mode::Lat { 1 } else { m.depth },
                connections: cfg.connections,
                client_core: cfg.client_core(),
                server_core: cfg.server_core(),
            };
            let mut push = |want: bool, layer, name, bench, against| {
                if want {
                    out.push(Planned {
                        layer,
                        name,
                        bench,
                        spec,
                        against,
                    });
                }
            };
            let echo = Bench::Rpc(RpcBench::Echo);
            match m.mode {
                Mode::Lat => {
                    push(base, Layer::Physical, "pingpong", Bench::PhysPingpong, None);
                    // siw runs over kernel TCP: its floor is a busy-polled TCP ping-pong.
                    let tcp = base && cfg.provider == ProviderName::Siw;
                    push(
                        tcp,
                        Layer::Physical,
                        "tcp pingpong",
                        Bench::TcpPingpong,
                        None,
                    );
                    push(
                        base,
                        Layer::Fabric,
                        "send/recv",
                        Bench::Fabric(BwOp::Write),
                        tcp.then_some("tcp pingpong"),
                    );
                    // A chunked echo (both directions placed directly) beside an RPC
                    // over TCP's floor: the same octets each way plus one copy on each
                    // receiving side.
                    let size = spec.size as u64;
                    let copy = tcp && rpc && rpc::is_long(size, cfg.inline_threshold);
                    push(
                        copy,
                        Layer::Physical,
                        "tcp pingpong+copy",
                        Bench::TcpPingpongCopy,
                        None,
                    );
                    let echo_against = copy.then_some("physical tcp pingpong+copy");
                    push(rpc, Layer::Rpc, RpcBench::Echo.name(), echo, echo_against);
                    // A call too long for inline: by continuation against the same call
                    // by Position-Zero Read chunk (the round trip the draft saves).
                    if rpc
                        && rpc::is_long(size, cfg.inline_threshold)
                        && rpc::fits_a_group(size, cfg.inline_threshold)
                    {
                        let long = spec;
                        let (g, r) = (RpcBench::LongByGroup, RpcBench::LongByReadChunk);
                        for (b, against) in [
                            (r, None),
                            (g, Some("rpc long call by read chunk (2 round trips)")),
                        ] {
                            out.push(Planned {
                                layer: Layer::Rpc,
                                name: b.name(),
                                bench: Bench::Rpc(b),
                                spec: long,
                                against,
                            });
                        }
                    }
                    // A bulk argument: placed by send-based DDP against a Read chunk
                    // (draft-dnoveck-rpcrdma-rtrext §7: the RDMA Read round trip saved).
                    if rpc && rpc::is_long(spec.size as u64, cfg.inline_threshold) {
                        let (d, r) = (RpcBench::BulkBySendDdp, RpcBench::BulkByReadChunk);
                        for (b, against) in [
                            (r, None),
                            (d, Some("rpc bulk argument by read chunk (2 round trips)")),
                        ] {
                            out.push(Planned {
                                layer: Layer::Rpc,
                                name: b.name(),
                                bench: Bench::Rpc(b),
                                spec,
                                against,
                            });
                        }
                        // The same argument over several 64 KiB segments: a group of
                        // Sends, still one round trip (§6.2).
                        if rpc::spans_segments(spec.size as u64) {
                            let b = RpcBench::BulkBySendDdpSegments;
                            out.push(Planned {
                                layer: Layer::Rpc,
                                name: b.name(),
                                bench: Bench::Rpc(b),
                                spec,
                                against: Some("rpc bulk argument by read chunk (2 round trips)"),
                            });
                        }
                        // A bulk result: placed by send-based DDP against a Write chunk
                        // (§7.4: no registration, no RDMA Write).
                        let (d, w) = (
                            RpcBench::BulkResultBySendDdp,
                            RpcBench::BulkResultByWriteChunk,
                        );
                        for (b, against) in [(w, None), (d, Some("rpc bulk result by write chunk"))]
                        {
                            out.push(Planned {
                                layer: Layer::Rpc,
                                name: b.name(),
                                bench: Bench::Rpc(b),
                                spec,
                                against,
                            });
                        }
                    }
                }
                Mode::Rate => {
                    push(base, Layer::Physical, "ring", Bench::PhysRing, None);
                    push(
                        base,
                        Layer::Fabric,
                        "send",
                        Bench::Fabric(BwOp::Write),
                        None,
                    );
                    // One-way sends are no measure for an RPC, which waits for an
                    // answer: the echo rate is compared with a request/response at the
                    // same depth.
                    push(
                        base,
                        Layer::Fabric,
                        "req/resp",
                        Bench::FabricRequestResponse,
                        None,
                    );
                    let rr = Some("req/resp");
                    push(rpc, Layer::Rpc, RpcBench::Echo.name(), echo, rr);
                }
                Mode::Bw => {
                    // memcpy first: an RDMA Write or Read on shm is one copy, so that is
                    // the floor the fabric rows are compared with.
                    push(base, Layer::Physical, "memcpy", Bench::PhysMemcpy, None);
                    push(base, Layer::Physical, "ring", Bench::PhysRing, None);
                    push(
                        base,
                        Layer::Physical,
                        "memcpy+crc",
                        Bench::PhysMemcpyCrc,
                        None,
                    );
                    let tcp = base && cfg.provider == ProviderName::Siw;
                    push(tcp, Layer::Physical, "tcp stream", Bench::TcpStream, None);
                    let floor = tcp.then_some("tcp stream");
                    push(
                        base,
                        Layer::Fabric,
                        "write",
                        Bench::Fabric(BwOp::Write),
                        floor,
                    );
                    push(
                        base,
                        Layer::Fabric,
                        "write, one source",
                        Bench::Fabric(BwOp::WriteOneSource),
                        floor,
                    );
                    push(
                        base,
                        Layer::Fabric,
                        "read",
                        Bench::Fabric(BwOp::Read),
                        floor,
                    );
                    // The rows above and the TCP stream, each measured on its own, swing
                    // apart on a loaded machine: the bulk comparison is made in
                    // alternating slices of one run (the ratio of record).
                    push(
                        tcp,
                        Layer::Fabric,
                        PAIRED_WRITE,
                        Bench::Paired(BwOp::Write),
                        None,
                    );
                    // A Read chunk is pulled with RDMA Reads, a Write chunk pushed with
                    // RDMA Writes: each is compared with that raw operation, done with
                    // the same memory: the Read chunk's arguments and the responder's
                    // sinks are one buffer per call in flight on each side, as the read
                    // row's slots; SOURCE writes from one registered copy into a sink
                    // per call, as the one-source write row.
                    let (rd, wr) = (RpcBench::ReadChunk, RpcBench::WriteChunk);
                    push(rpc, Layer::Rpc, rd.name(), Bench::Rpc(rd), Some("read"));
                    push(
                        rpc,
                        Layer::Rpc,
                        wr.name(),
                        Bench::Rpc(wr),
                        Some("write, one source"),
                    );
                    // The sink that CRCs what it pulled, beside its floor: a copy and a
                    // CRC (the Read is the copy).
                    let crc = RpcBench::ReadChunkCrc;
                    let floor = base.then_some("physical memcpy+crc");
                    push(rpc, Layer::Rpc, crc.name(), Bench::Rpc(crc), floor);
                }
            }
        }
    }
    out
}

fn run_on<F: FabricKind>(
    cfg: &Config,
    p: &Planned,
    meter: Meter,
) -> Result<crate::measure::Measurement, crate::spec::BenchError> {
    match p.bench {
        Bench::PhysPingpong => physical::pingpong(&p.spec, meter),
        Bench::PhysRing => physical::ring(&p.spec, meter),
        Bench::PhysMemcpy => physical::memcpy(&p.spec, meter),
        Bench::PhysMemcpyCrc => physical::memcpy_crc(&p.spec, meter),
        Bench::TcpPingpong => tcp::pingpong(&p.spec, meter),
        Bench::TcpPingpongCopy => tcp::pingpong_copy(&p.spec, meter),
        Bench::TcpStream => tcp::stream(&p.spec, meter),
        Bench::Fabric(op) => fabric::run_op::<F>(&p.spec, op, meter),
        Bench::FabricRequestResponse => fabric::run_request_response::<F>(&p.spec, meter),
        // Run by [`run_one`], which keeps the pairs.
        Bench::Paired(op) => {
            paired::run::<F>(&p.spec, op, cfg.budget, Arc::new(AtomicU64::new(0))).map(|(m, _)| m)
        }
        Bench::Rpc(b) => {
            let params = RpcParams {
                inline: u32::try_from(cfg.inline_threshold).unwrap_or(u32::MAX),
                credits: cfg.credits,
                client_park: None,
            };
            rpc::run::<F>(&p.spec, b, params, meter, cfg.connect.as_deref())
        }
    }
}

/// Runs one planned row.
pub fn run_one(cfg: &Config, p: &Planned, index: usize, total: usize) -> Row {
    let counter = Arc::new(AtomicU64::new(0));
    let label = format!(
        "[{}/{total}] {} {} {} {}",
        index + 1,
        p.spec.mode,
        p.layer,
        p.name,
        crate::units::fmt_size(p.spec.size as u64)
    );
    let _progress = Progress::start(cfg.progress, label, counter.clone());
    if let Bench::Paired(op) = p.bench {
        let result = match cfg.provider {
            ProviderName::Siw => paired::run::<Siw>(&p.spec, op, cfg.budget, counter),
            #[cfg(feature = "verbs")]
            ProviderName::Verbs => paired::run::<fabric::Verbs>(&p.spec, op, cfg.budget, counter),
            _ => paired::run::<Shm>(&p.spec, op, cfg.budget, counter),
        };
        return match result {
            Ok((m, pairs)) => Row::measured(p.layer, p.name, &p.spec, m).with_paired(pairs),
            Err(e) => Row::failed(p.layer, p.name, &p.spec, e.to_string()),
        };
    }
    let meter = Meter::new(cfg.budget, counter);
    let result = match cfg.provider {
        ProviderName::Siw => run_on::<Siw>(cfg, p, meter),
        #[cfg(feature = "verbs")]
        ProviderName::Verbs => run_on::<fabric::Verbs>(cfg, p, meter),
        // Config refuses providers this build cannot run, so anything else is shm.
        _ => run_on::<Shm>(cfg, p, meter),
    };
    let row = match result {
        Ok(m) => Row::measured(p.layer, p.name, &p.spec, m),
        Err(e) => Row::failed(p.layer, p.name, &p.spec, e.to_string()),
    };
    row.compared_with(p.against)
}

/// Runs every planned row and computes the ratios.
pub fn run_all(cfg: &Config, planned: &[Planned]) -> Vec<Row> {
    fabric::set_siw_completions(cfg.siw_completions);
    fabric::set_siw_crc(cfg.siw_crc);
    let mut rows: Vec<Row> = planned
        .iter()
        .enumerate()
        .map(|(i, p)| run_one(cfg, p, i, planned.len()))
        .collect();
    compute_ratios(&mut rows);
    rows
}

/// What the reader should know about this run beyond the figures.
pub fn notes(cfg: &Config) -> Vec<String> {
    let mut n = Vec::new();
    if cfg.rpc_available {
        n.push(format!(
            "rpc rows: the engine serving the built-in echo program over {}, responder \
             busy-polling the server core, requester(s) on the measuring thread. echo = ECHO \
             of SIZE octets, inline when it fits the {} octet inline threshold, else Read \
             chunk in and Write chunk out; read chunk = DISCARD with a Read chunk, the data \
             pulled and not read (compared with fabric read); read chunk+crc = SINK, which \
             CRCs every octet pulled (compared with physical memcpy+crc); write chunk = SOURCE into a Write chunk, written from one \
             registered copy into a sink per call (compared with fabric write, one source: \
             the same memory pattern; fabric write reads a source per Write in flight); long call by group = DISCARD of SIZE octets too long for inline, \
             sent as a continuation group of Sends (draft-dnoveck-rpcrdma-rtrext, one round \
             trip; compared with the same call by read chunk = RDMA_NOMSG and a Position-Zero \
             Read chunk the responder pulls, two round trips, between peers without \
             extensions); bulk argument by send DDP = DISCARD whose SIZE-octet argument is \
             placed into the server's receive segments in the call's one Send \
             (draft-dnoveck-rpcrdma-rtrext §7, one round trip; compared with the same \
             argument by read chunk, two round trips); bulk argument by send DDP, 64 KiB \
             segments = the same argument to a server whose DDP segments are 64 KiB, sent \
             as a continuation group of one Send per segment (§6.2, still one round trip; \
             run where SIZE spans 2 to 16 segments); bulk result by send DDP = SOURCE \
             whose SIZE-octet result the server places into the client's receive segments \
             in the reply's one Send (§7.4; compared with the same result by write chunk); \
             the send-DDP rows force that shape on every provider (the engine's default \
             does not pick it where it measures slower: engine/DESIGN.md \"Shape choice\"); \
             a long-call or bulk row fails unless every call took its shape.",
            cfg.provider.name(),
            cfg.inline_threshold
        ));
    } else {
        n.push(
            "RPC rows are not available in this build: only the raw-fabric and physical \
             baselines are measured."
                .to_owned(),
        );
    }
    if cfg.provider == ProviderName::Siw {
        n.push(format!(
            "siw completions: {} (--siw-completions strict: a Send or Write completes once a \
             zero-length Read in its own TCP segment proves the peer executed it; \
             shared-segment: that Read shares the FPDU's segment; on-transmit: no proof, \
             as Linux siw).",
            match cfg.siw_completions {
                crate::cli::SiwCompletions::Strict => "strict",
                crate::cli::SiwCompletions::SharedSegment => "shared-segment",
                crate::cli::SiwCompletions::OnTransmit => "on-transmit",
            }
        ));
        if cfg.baseline && cfg.modes.iter().any(|m| m.mode == Mode::Bw) {
            n.push(format!(
                "fabric {PAIRED_WRITE}: the write row and the tcp stream in alternating \
                 slices of one run ({} ms each, at least {} pairs, A B then B A; same \
                 sockets, connection and settings as those rows, set up once, untimed), \
                 each slice timed from its start to its last operation (a fabric slice \
                 waits for what it has in flight, a TCP slice pauses the stream as it \
                 stands); \
                 its ratio is the \
                 median of the per-pair ratios (the bulk ratio of record: the separate \
                 rows, seconds apart, swing with the machine). The TCP side's system calls \
                 per MiB are counted as made (each read or write is one); siw's are not \
                 counted in process (strace -f -c the row, as perf/syscalls.sh does).",
                paired::SLICE.as_millis(),
                paired::MIN_PAIRS
            ));
        }
        n.push(match cfg.siw_crc {
            crate::cli::SiwCrc::On => "siw CRCs: on (every FPDU carries an MPA CRC32c; \
                                       --siw-crc off measures without, as Linux siw's default)."
                .to_string(),
            crate::cli::SiwCrc::Off => "siw CRCs: off (neither end asks for MPA CRCs, as \
                                        Linux siw's default; a peer that asks still gets them)."
                .to_string(),
        });
    }
    if let Some(addr) = &cfg.connect {
        n.push(format!(
            "remote responder at {addr}: RPC rows only; its core, threads and settings are \
             its own (run it as `rpcrdma-perf server --provider {} --addr {addr}`).",
            cfg.provider.name()
        ));
    } else if cfg.client_core() == cfg.server_core() {
        n.push(format!(
            "client and server threads share core {}: figures include scheduler hand-offs.",
            cfg.client_core()
        ));
    }
    n.push(
        "latency: lat = one round trip (request and reply of SIZE octets each); bw and rate \
         = post to completion with DEPTH in flight (fabric send: one-way, to the Send's \
         completion; fabric req/resp: a Send answered by a Send of SIZE octets, to the \
         answer's arrival, the rate RPC echo is compared with). GB/s counts SIZE octets \
         per operation."
            .to_owned(),
    );
    n
}
