//! `rpcrdma-perf`: the benchmark harness. See the library documentation.

use std::process::ExitCode;

use clap::Parser;
use rpcrdma_perf::cli::Cli;
use rpcrdma_perf::config::{join, Config};
use rpcrdma_perf::plot;
use rpcrdma_perf::report::{table, Row};
use rpcrdma_perf::run::{notes, plan, run_all};
use serde::Serialize;

#[derive(Serialize)]
struct Document<'a> {
    tool: &'static str,
    version: &'static str,
    config: &'a Config,
    rows: &'a [Row],
    notes: &'a [String],
}

fn describe(cfg: &Config) -> String {
    let what = if cfg.suite {
        "suite (lat, rate, bw)".to_owned()
    } else {
        cfg.modes
            .iter()
            .map(|m| m.mode.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        "rpcrdma-perf {}: {what} on {}, cores {}, {} per row after {} warm-up, {} connection(s); times in microseconds",
        env!("CARGO_PKG_VERSION"),
        cfg.provider.name(),
        join(&cfg.cores),
        cfg.budget.stop,
        cfg.budget.warmup,
        cfg.connections,
    )
}

fn main() -> ExitCode {
    // `soak` and `server` have their own options (`rpcrdma-perf soak --help`).
    match std::env::args().nth(1).as_deref() {
        Some("soak") => return rpcrdma_perf::soak::main(std::env::args().skip(2)),
        // The responder of a two-host run (`rpcrdma-perf server --help`).
        Some("server") => return rpcrdma_perf::server::main(std::env::args().skip(2)),
        // Rate by server cores, the server in another process (`rpcrdma-perf scale --help`).
        Some("scale") => return rpcrdma_perf::scale::main(std::env::args().skip(2)),
        _ => {}
    }
    let cli = Cli::parse();
    let cfg = match Config::from_cli(&cli) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rpcrdma-perf: {e}");
            return ExitCode::from(2);
        }
    };
    let notes = notes(&cfg);
    let planned = plan(&cfg);
    if planned.is_empty() {
        eprintln!(
            "rpcrdma-perf: nothing to measure: this build has no RPC rows and baselines are \
             off; add --baseline to measure the raw-fabric and physical baselines"
        );
        return ExitCode::FAILURE;
    }
    if !cfg.json {
        println!("{}", describe(&cfg));
    }
    let rows = run_all(&cfg, &planned);
    if cfg.json {
        let doc = Document {
            tool: "rpcrdma-perf",
            version: env!("CARGO_PKG_VERSION"),
            config: &cfg,
            rows: &rows,
            notes: &notes,
        };
        match serde_json::to_string_pretty(&doc) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("rpcrdma-perf: cannot render JSON: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        print!("{}", table(&rows));
        for n in &notes {
            println!("note: {n}");
        }
    }
    if let Some(path) = &cfg.plot {
        let svg = plot::svg(&describe(&cfg), &rows);
        if let Err(e) = std::fs::write(path, svg) {
            eprintln!(
                "rpcrdma-perf: cannot write the plot to {}: {e}",
                path.display()
            );
            return ExitCode::FAILURE;
        }
    }
    if rows.iter().any(|r| r.figures.is_none()) {
        eprintln!("rpcrdma-perf: some rows failed; see the table");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
