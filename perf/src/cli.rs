//! The command line of `rpcrdma-perf`, parsed with clap.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Serialize;

use crate::units::{self, Amount, ParseError};

/// RPC-over-RDMA latency, message-rate and bandwidth benchmarks, beside the raw fabric
/// and the bare machine. With no subcommand: a short suite on shm (well under a minute).
#[derive(Debug, Parser)]
#[command(name = "rpcrdma-perf", version, about)]
pub struct Cli {
    /// What to measure; none runs the suite.
    #[command(subcommand)]
    pub command: Option<ModeCmd>,
    /// Options shared by every mode.
    #[command(flatten)]
    pub opts: Opts,
}

/// The benchmark shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Subcommand)]
pub enum ModeCmd {
    /// Round-trip latency with one operation in flight (like ib_send_lat).
    Lat,
    /// Bandwidth with --depth operations of --size octets in flight (like ib_write_bw).
    Bw,
    /// Operations per second with --depth small operations in flight.
    Rate,
}

/// When a siw Send or RDMA Write completes (the `siw` provider's
/// `SiwConfig::confirm_completions` and `confirmation_own_segment`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SiwCompletions {
    /// Once a zero-length Read, in a TCP segment of its own, proves the peer executed
    /// it (`SiwConfig::strict`: one FPDU per segment on the wire).
    Strict,
    /// The same proof, the Read sharing the segment of the FPDU it confirms.
    SharedSegment,
    /// Once written to the socket, as Linux siw does (no confirmation Reads; the
    /// provider's default).
    #[default]
    OnTransmit,
}

/// Whether siw asks for MPA CRCs (the `siw` provider's `SiwConfig::crc`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SiwCrc {
    /// Ask for CRCs: every FPDU carries one (the provider's default).
    #[default]
    On,
    /// Do not ask, as Linux siw by default: no CRCs unless the peer asks for them
    /// (RFC 5044 §7.1: either side asking puts CRCs on both directions).
    Off,
}

/// Fabric providers by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderName {
    /// Shared memory between threads or processes on this host.
    Shm,
    /// Software iWARP (kernel siw).
    Siw,
    /// rdma-core verbs on a real or software RDMA device.
    Verbs,
}

impl ProviderName {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ProviderName::Shm => "shm",
            ProviderName::Siw => "siw",
            ProviderName::Verbs => "verbs",
        }
    }
}

/// A list of sizes (`64,4k..1m`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeList(pub Vec<u64>);

/// A list of cores (`0,1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoreList(pub Vec<usize>);

fn sizes(s: &str) -> Result<SizeList, ParseError> {
    units::parse_sizes(s).map(SizeList)
}

fn cores(s: &str) -> Result<CoreList, ParseError> {
    units::parse_cores(s).map(CoreList)
}

fn duration(s: &str) -> Result<Duration, ParseError> {
    units::parse_duration(s)
}

fn amount(s: &str) -> Result<Amount, ParseError> {
    units::parse_amount(s)
}

fn size_u64(s: &str) -> Result<u64, ParseError> {
    units::parse_size(s)
}

/// Options for every mode (and the suite).
#[derive(Debug, Args)]
pub struct Opts {
    /// Fabric provider.
    #[arg(long, global = true, value_enum, default_value = "shm")]
    pub provider: ProviderName,
    /// Message sizes: a list of sizes and doubling ranges, e.g. 64,4k..1m.
    #[arg(long, global = true, value_parser = sizes, value_name = "SIZES")]
    pub size: Option<SizeList>,
    /// Operations in flight per connection (bw and rate).
    #[arg(long, global = true)]
    pub depth: Option<u32>,
    /// Connections, served round-robin by the same two threads.
    #[arg(long, global = true, default_value_t = 1)]
    pub connections: u32,
    /// Measure each row for this long (e.g. 500ms, 2s). Default 1s.
    #[arg(long, global = true, value_parser = duration, conflicts_with = "iters")]
    pub duration: Option<Duration>,
    /// Measure each row for this many operations instead of a time.
    #[arg(long, global = true)]
    pub iters: Option<u64>,
    /// Warm-up before each row: operations (200) or a time (100ms). Default 100ms, or a
    /// tenth of --iters.
    #[arg(long, global = true, value_parser = amount)]
    pub warmup: Option<Amount>,
    /// Cores to pin to: the measuring thread's first, then the responder's (e.g. 0,1).
    #[arg(long, global = true, value_parser = cores, value_name = "LIST")]
    pub cores: Option<CoreList>,
    /// RPC inline threshold in octets (RPC rows).
    #[arg(long = "inline", global = true, value_parser = size_u64, default_value = "4k")]
    pub inline: u64,
    /// RPC credits to request (RPC rows).
    #[arg(long, global = true, default_value_t = 128)]
    pub credits: u32,
    /// siw only: when Sends and Writes complete (what strict completions cost is the
    /// difference between the rows).
    #[arg(long, global = true, value_enum, default_value = "on-transmit")]
    pub siw_completions: SiwCompletions,
    /// siw only: whether to ask for MPA CRCs (what they cost is the difference
    /// between the rows; TCP baselines carry none).
    #[arg(long, global = true, value_enum, default_value = "on")]
    pub siw_crc: SiwCrc,
    /// Also measure the raw-fabric and physical baselines (default in the suite).
    #[arg(long, global = true, overrides_with = "no_baseline")]
    pub baseline: bool,
    /// Do not measure the baselines.
    #[arg(long, global = true, overrides_with = "baseline")]
    pub no_baseline: bool,
    /// Measure against a responder in another process or on another host (`rpcrdma-perf
    /// server`, or any `rpcrdma serve`) at this address: shm NAME or /PATH, siw and
    /// verbs IP:PORT. RPC rows only (the baselines need both ends here).
    #[arg(long, global = true, value_name = "ADDR")]
    pub connect: Option<String>,
    /// Print the results and the full configuration as JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
    /// Draw the latency distributions into this SVG file.
    #[arg(long, global = true, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Draw the progress line even when standard error is not a terminal.
    #[arg(long, global = true)]
    pub progress: bool,
}

impl Opts {
    /// `--baseline` / `--no-baseline`, whichever came last; `None` if neither.
    pub fn baseline_choice(&self) -> Option<bool> {
        if self.no_baseline {
            Some(false)
        } else if self.baseline {
            Some(true)
        } else {
            None
        }
    }
}
