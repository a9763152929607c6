//! The `rpcrdma-perf` command line: option parsing and resolution, and tiny real runs of
//! every subcommand (small iteration counts; nothing here asserts on timing).

use std::process::{Command, Output};
use std::time::Duration;

use clap::Parser;
use rpcrdma_perf::cli::Cli;
use rpcrdma_perf::config::{AmountJson, Config};
use rpcrdma_perf::spec::Mode;
use rpcrdma_perf::units::Amount;
use serde_json::Value;

fn config(args: &[&str]) -> Result<Config, String> {
    let cli = Cli::try_parse_from(std::iter::once("rpcrdma-perf").chain(args.iter().copied()))
        .map_err(|e| e.to_string())?;
    Config::from_cli(&cli).map_err(|e| e.to_string())
}

fn perf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rpcrdma-perf"))
        .args(args)
        .output()
        .expect("run rpcrdma-perf")
}

#[test]
fn no_arguments_is_the_suite_with_baselines() {
    let c = config(&[]).unwrap();
    assert!(c.suite);
    assert!(c.baseline);
    let modes: Vec<Mode> = c.modes.iter().map(|m| m.mode).collect();
    assert_eq!(modes, vec![Mode::Lat, Mode::Rate, Mode::Bw]);
    assert_eq!(c.measure, AmountJson::Seconds(1.0));
    assert_eq!(c.budget.warmup, Amount::Time(Duration::from_millis(100)));
    assert!(!c.rpc_available);
}

#[test]
fn subcommands_resolve_sizes_depths_and_amounts() {
    let c = config(&[
        "bw",
        "--size",
        "4k..16k,1m",
        "--depth",
        "4",
        "--iters",
        "500",
    ])
    .unwrap();
    assert!(!c.suite);
    assert!(!c.baseline, "baselines are opt-in outside the suite");
    assert_eq!(c.modes.len(), 1);
    assert_eq!(c.modes[0].sizes, vec![4096, 8192, 16384, 1 << 20]);
    assert_eq!(c.modes[0].depth, 4);
    assert_eq!(c.budget.stop, Amount::Iters(500));
    assert_eq!(c.budget.warmup, Amount::Iters(50));

    let c = config(&[
        "lat",
        "--duration",
        "250ms",
        "--warmup",
        "10ms",
        "--baseline",
        "--inline",
        "8k",
        "--credits",
        "32",
        "--connections",
        "2",
    ])
    .unwrap();
    assert_eq!(c.budget.stop, Amount::Time(Duration::from_millis(250)));
    assert_eq!(c.budget.warmup, Amount::Time(Duration::from_millis(10)));
    assert!(c.baseline);
    assert_eq!(c.inline_threshold, 8192);
    assert_eq!(c.credits, 32);
    assert_eq!(c.connections, 2);

    // The last of --baseline / --no-baseline wins.
    assert!(!config(&["--baseline", "--no-baseline"]).unwrap().baseline);
    assert!(config(&["--no-baseline", "--baseline"]).unwrap().baseline);
}

#[test]
fn bad_options_are_refused_with_a_reason() {
    for (args, want) in [
        (&["lat", "--depth", "4"][..], "use bw or rate"),
        (&["bw", "--size", "1m..4k"], "small to large"),
        (&["bw", "--size", "4q"], "suffix"),
        (&["rate", "--iters", "0"], "at least 1"),
        (&["rate", "--connections", "0"], "between 1 and 256"),
        (&["lat", "--cores", "100000"], "not available"),
        (&["lat", "--provider", "siw"], "not built"),
        (
            &["lat", "--iters", "10", "--duration", "1s"],
            "cannot be used with",
        ),
    ] {
        let e = config(args).expect_err(&format!("{args:?} should be refused"));
        assert!(e.contains(want), "{args:?}: {e}");
    }
}

fn tiny(mode: &str, extra: &[&str]) -> String {
    let mut args = vec![mode, "--iters", "200", "--baseline", "--size", "256"];
    args.extend_from_slice(extra);
    let out = perf(&args);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "{mode}: {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("p99.9 us"), "{stdout}");
    assert!(
        stdout.contains("RPC rows are not available yet"),
        "{stdout}"
    );
    stdout
}

#[test]
fn tiny_lat_run_prints_the_table() {
    let t = tiny("lat", &[]);
    assert!(t.contains("lat  physical pingpong"), "{t}");
    assert!(t.contains("lat  fabric   send/recv"), "{t}");
    assert!(t.contains("vs physical pingpong"), "{t}");
}

#[test]
fn tiny_bw_run_prints_the_table() {
    let t = tiny("bw", &["--depth", "4", "--connections", "2"]);
    for want in [
        "physical memcpy",
        "physical ring",
        "fabric   write",
        "vs physical memcpy",
    ] {
        assert!(t.contains(want), "{want}: {t}");
    }
}

#[test]
fn tiny_rate_run_prints_the_table() {
    let t = tiny("rate", &["--depth", "8"]);
    assert!(t.contains("fabric   send"), "{t}");
}

#[test]
fn json_has_figures_and_the_full_configuration() {
    let plot = std::env::temp_dir().join(format!("rpcrdma-perf-{}.svg", std::process::id()));
    let out = perf(&[
        "lat",
        "--iters",
        "200",
        "--baseline",
        "--json",
        "--plot",
        plot.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    assert_eq!(v["tool"], "rpcrdma-perf");
    for key in [
        "suite",
        "modes",
        "provider",
        "connections",
        "measure",
        "warmup",
        "cores",
        "inline_threshold",
        "credits",
        "baseline",
        "rpc_available",
        "plot",
    ] {
        assert!(
            v["config"].get(key).is_some(),
            "config.{key} missing: {}",
            v["config"]
        );
    }
    assert_eq!(v["config"]["measure"]["iters"], 200);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows {
        for key in [
            "layer",
            "bench",
            "mode",
            "size",
            "depth",
            "connections",
            "ratio",
        ] {
            assert!(r.get(key).is_some(), "row.{key} missing: {r}");
        }
        let f = &r["figures"];
        for key in [
            "p50_ns",
            "p90_ns",
            "p99_ns",
            "p999_ns",
            "max_ns",
            "min_ns",
            "mean_ns",
            "ops",
            "elapsed_s",
            "ops_per_s",
            "gb_per_s",
            "truncated",
        ] {
            assert!(f.get(key).is_some(), "figures.{key} missing: {r}");
        }
        assert_eq!(f["ops"], 200);
        assert!(f["p50_ns"].as_u64().unwrap() <= f["p99_ns"].as_u64().unwrap());
        assert!(f["p99_ns"].as_u64().unwrap() <= f["max_ns"].as_u64().unwrap());
    }
    assert_eq!(rows[1]["ratio"]["against"], "physical pingpong");
    assert!(v["notes"][0].as_str().unwrap().contains("RPC rows"));
    let svg = std::fs::read_to_string(&plot).expect("plot written");
    std::fs::remove_file(&plot).unwrap();
    assert!(svg.starts_with("<svg"), "{svg}");
    assert_eq!(svg.matches("<polyline").count(), 2, "one curve per row");
    assert!(svg.trim_end().ends_with("</svg>"));
}

#[test]
fn nothing_to_measure_without_baselines_is_an_error() {
    let out = perf(&["lat", "--iters", "10"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("--baseline"), "{err}");
    let out = perf(&["lat", "--provider", "verbs"]);
    assert_eq!(out.status.code(), Some(2));
}
