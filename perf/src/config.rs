//! The resolved run configuration: what the command line asked for, with every default
//! filled in and checked against this machine and build.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

use crate::cli::{Cli, ModeCmd, ProviderName};
use crate::measure::Budget;
use crate::spec::Mode;
use crate::units::{Amount, ParseError};

/// Whether RPC benchmark rows exist in this build (they do: [`crate::rpc`]).
pub const RPC_AVAILABLE: bool = true;

/// One mode to run and its sizes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModePlan {
    /// The mode.
    pub mode: Mode,
    /// Message sizes, ascending.
    pub sizes: Vec<u64>,
    /// Operations in flight per connection.
    pub depth: u32,
}

/// A fully resolved run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    /// No subcommand: the short suite.
    pub suite: bool,
    /// Modes in run order.
    pub modes: Vec<ModePlan>,
    /// Fabric provider.
    pub provider: ProviderName,
    /// Connections per row.
    pub connections: u32,
    /// Measurement length: `{"iters": n}` or `{"seconds": s}`.
    pub measure: AmountJson,
    /// Warm-up length, same form.
    pub warmup: AmountJson,
    /// Cores: measuring thread first, responder second.
    pub cores: Vec<usize>,
    /// RPC inline threshold in octets (RPC rows only).
    pub inline_threshold: u64,
    /// RPC credits requested (RPC rows only).
    pub credits: u32,
    /// When siw Sends and Writes complete.
    pub siw_completions: crate::cli::SiwCompletions,
    /// Whether siw asks for MPA CRCs.
    pub siw_crc: crate::cli::SiwCrc,
    /// Baseline rows are measured.
    pub baseline: bool,
    /// RPC rows go to this remote responder instead of one in this process.
    pub connect: Option<String>,
    /// RPC rows exist in this build.
    pub rpc_available: bool,
    /// Print JSON instead of the table.
    #[serde(skip)]
    pub json: bool,
    /// Write an SVG latency plot here.
    pub plot: Option<PathBuf>,
    /// Draw the progress line on standard error.
    #[serde(skip)]
    pub progress: bool,
    /// The budget for each row.
    #[serde(skip)]
    pub budget: Budget,
}

/// An [`Amount`] as JSON.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AmountJson {
    /// Iterations.
    Iters(u64),
    /// Seconds.
    Seconds(f64),
}

impl From<Amount> for AmountJson {
    fn from(a: Amount) -> Self {
        match a {
            Amount::Iters(n) => AmountJson::Iters(n),
            Amount::Time(d) => AmountJson::Seconds(d.as_secs_f64()),
        }
    }
}

/// Default measurement per row.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(1);
/// Default warm-up per row when measuring by time.
pub const DEFAULT_WARMUP: Duration = Duration::from_millis(100);

fn bad(input: &str, reason: impl Into<String>) -> ParseError {
    ParseError {
        input: input.to_owned(),
        reason: reason.into(),
    }
}

/// Default sizes and depth of a mode when run on its own.
fn mode_default(mode: Mode) -> (Vec<u64>, u32) {
    match mode {
        Mode::Lat => (vec![64], 1),
        Mode::Bw => (vec![64 << 10], 16),
        Mode::Rate => (vec![64], 32),
    }
}

/// The no-argument suite: latency, rate and bandwidth at a few sizes.
fn suite_modes() -> Vec<ModePlan> {
    vec![
        ModePlan {
            mode: Mode::Lat,
            sizes: vec![64, 4 << 10],
            depth: 1,
        },
        ModePlan {
            mode: Mode::Rate,
            sizes: vec![64],
            depth: 32,
        },
        ModePlan {
            mode: Mode::Bw,
            sizes: vec![64 << 10, 1 << 20],
            depth: 8,
        },
    ]
}

/// The cores this process may run on, ascending.
pub fn available_cores() -> Vec<usize> {
    let mut ids: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect();
    ids.sort_unstable();
    ids
}

impl Config {
    /// Resolves the command line.
    pub fn from_cli(cli: &Cli) -> Result<Config, ParseError> {
        let o = &cli.opts;
        let suite = cli.command.is_none();
        let mut modes = match cli.command {
            None => suite_modes(),
            Some(cmd) => {
                let mode = match cmd {
                    ModeCmd::Lat => Mode::Lat,
                    ModeCmd::Bw => Mode::Bw,
                    ModeCmd::Rate => Mode::Rate,
                };
                let (sizes, depth) = mode_default(mode);
                vec![ModePlan { mode, sizes, depth }]
            }
        };
        for m in &mut modes {
            if let Some(s) = &o.size {
                m.sizes = s.0.clone();
            }
            if let Some(d) = o.depth {
                if m.mode != Mode::Lat {
                    m.depth = d;
                } else if !suite && d != 1 {
                    return Err(bad(
                        &d.to_string(),
                        "lat keeps one operation in flight; use bw or rate for --depth",
                    ));
                }
            }
        }
        if o.depth == Some(0) {
            return Err(bad("0", "--depth must be at least 1"));
        }
        if o.connections == 0 || o.connections > 256 {
            return Err(bad(
                &o.connections.to_string(),
                "--connections must be between 1 and 256",
            ));
        }
        match o.provider {
            ProviderName::Shm | ProviderName::Siw => {}
            ProviderName::Verbs if cfg!(feature = "verbs") => {}
            other => {
                return Err(bad(
                    other.name(),
                    "this provider is not built into rpcrdma-perf; use --provider shm or siw \
                     (verbs needs the `verbs` feature)",
                ))
            }
        }
        if o.connect.is_some() && o.baseline_choice() == Some(true) {
            return Err(bad(
                "--baseline",
                "the baselines run both ends in this process; they cannot go with --connect",
            ));
        }
        if o.credits == 0 {
            return Err(bad("0", "--credits must be at least 1"));
        }
        let inline = u32::try_from(o.inline).unwrap_or(u32::MAX);
        let probe = rpcrdma::ConnConfig {
            inline_send: inline,
            inline_recv: inline,
            ..rpcrdma::ConnConfig::default()
        };
        if let Err(e) = probe.validate() {
            return Err(bad(&o.inline.to_string(), format!("--inline: {e}")));
        }
        let stop = match (o.iters, o.duration) {
            (Some(0), _) => return Err(bad("0", "--iters must be at least 1")),
            (Some(n), _) => Amount::Iters(n),
            (None, Some(d)) if d.is_zero() => {
                return Err(bad("0", "--duration must be longer than zero"))
            }
            (None, Some(d)) => Amount::Time(d),
            (None, None) => Amount::Time(DEFAULT_DURATION),
        };
        let warmup = match (o.warmup, stop) {
            (Some(w), _) => w,
            (None, Amount::Iters(n)) => Amount::Iters(n / 10),
            (None, Amount::Time(_)) => Amount::Time(DEFAULT_WARMUP),
        };
        let available = available_cores();
        let cores = match &o.cores {
            Some(list) => {
                if let Some(c) = list.0.iter().find(|c| !available.contains(c)) {
                    return Err(bad(
                        &c.to_string(),
                        format!(
                            "core {c} is not available to this process; available: {}",
                            join(&available)
                        ),
                    ));
                }
                list.0.clone()
            }
            None => available.iter().copied().take(2).collect(),
        };
        let cores = if cores.is_empty() { vec![0] } else { cores };
        Ok(Config {
            suite,
            modes,
            provider: o.provider,
            connections: o.connections,
            measure: stop.into(),
            warmup: warmup.into(),
            cores,
            inline_threshold: o.inline,
            credits: o.credits,
            siw_completions: o.siw_completions,
            siw_crc: o.siw_crc,
            // Baselines need both ends in this process.
            baseline: o.connect.is_none() && o.baseline_choice().unwrap_or(suite),
            connect: o.connect.clone(),
            rpc_available: RPC_AVAILABLE,
            json: o.json,
            plot: o.plot.clone(),
            progress: o.progress || std::io::stderr().is_terminal(),
            budget: Budget { warmup, stop },
        })
    }

    /// Core of the measuring thread.
    pub fn client_core(&self) -> usize {
        self.cores.first().copied().unwrap_or(0)
    }

    /// Core of the responding thread (the measuring thread's core when only one given).
    pub fn server_core(&self) -> usize {
        self.cores
            .get(1)
            .copied()
            .unwrap_or_else(|| self.client_core())
    }
}

/// `0,1,2`.
pub fn join(v: &[usize]) -> String {
    v.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
