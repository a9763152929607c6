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
    assert!(c.rpc_available);
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
        (&["lat", "--credits", "0"], "at least 1"),
        (&["lat", "--inline", "100"], "--inline"),
        (
            &["lat", "--iters", "10", "--duration", "1s"],
            "cannot be used with",
        ),
    ] {
        let e = config(args).expect_err(&format!("{args:?} should be refused"));
        assert!(e.contains(want), "{args:?}: {e}");
    }
    // Without the `verbs` feature the provider is refused while parsing; with it, the
    // run itself must say what is missing (see `verbs_without_a_device_says_so`).
    if !cfg!(feature = "verbs") {
        let e = config(&["lat", "--provider", "verbs"]).expect_err("verbs is not built in");
        assert!(e.contains("not built"), "{e}");
    }
}

/// With the `verbs` feature on a host without RDMA devices (CI, this machine), a verbs
/// run fails its rows with the fix in plain words and a non-zero status.
#[test]
fn verbs_without_a_device_says_so() {
    let out = perf(&["lat", "--provider", "verbs", "--iters", "10"]);
    if !cfg!(feature = "verbs") {
        assert_eq!(out.status.code(), Some(2), "refused as not built in");
        return;
    }
    if std::path::Path::new("/sys/class/infiniband")
        .read_dir()
        .is_ok_and(|mut d| d.next().is_some())
    {
        return; // a host with RDMA devices: the lab's verbs step measures this for real
    }
    assert_eq!(out.status.code(), Some(1));
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("no RDMA device"), "{table}");
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
    assert!(stdout.contains("note: rpc rows:"), "{stdout}");
    assert!(!stdout.contains("failed"), "{stdout}");
    stdout
}

#[test]
fn tiny_lat_run_prints_the_table() {
    let t = tiny("lat", &[]);
    assert!(t.contains("lat  physical pingpong"), "{t}");
    assert!(t.contains("lat  fabric   send/recv"), "{t}");
    assert!(t.contains("vs physical pingpong"), "{t}");
    assert!(t.contains("lat  rpc      echo"), "{t}");
    assert!(t.contains("vs fabric send/recv"), "{t}");
}

#[test]
fn tiny_bw_run_prints_the_table() {
    let t = tiny("bw", &["--depth", "4", "--connections", "2"]);
    for want in [
        "physical memcpy",
        "physical ring",
        "fabric   write",
        "fabric   read",
        "vs physical memcpy",
        "rpc      read chunk",
        "vs fabric read",
        "fabric   write, one source",
        "rpc      write chunk",
        "vs fabric write, one source",
        "physical memcpy+crc",
        "rpc      read chunk+crc",
        "vs physical memcpy+crc",
    ] {
        assert!(t.contains(want), "{want}: {t}");
    }
}

#[test]
fn tiny_rate_run_prints_the_table() {
    let t = tiny("rate", &["--depth", "8", "--connections", "2"]);
    assert!(t.contains("fabric   send"), "{t}");
    assert!(t.contains("fabric   req/resp"), "{t}");
    assert!(t.contains("rate rpc      echo"), "{t}");
    // The RPC rate is compared with the request/response, not with one-way sends.
    let after_echo = t.split("rate rpc      echo").nth(1).unwrap_or("");
    assert!(after_echo.contains("vs fabric req/resp"), "{t}");
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
    assert_eq!(rows.len(), 3);
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
    assert_eq!(rows[2]["layer"], "rpc");
    assert_eq!(rows[2]["bench"], "echo");
    assert_eq!(rows[2]["ratio"]["against"], "fabric send/recv");
    assert!(v["config"]["rpc_available"].as_bool().unwrap());
    assert!(v["notes"][0].as_str().unwrap().contains("rpc rows"));
    let svg = std::fs::read_to_string(&plot).expect("plot written");
    std::fs::remove_file(&plot).unwrap();
    assert!(svg.starts_with("<svg"), "{svg}");
    assert_eq!(svg.matches("<polyline").count(), 3, "one curve per row");
    assert!(svg.trim_end().ends_with("</svg>"));
}

#[test]
fn without_baselines_only_rpc_rows_run() {
    let out = perf(&["lat", "--iters", "200", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["layer"], "rpc");
    assert_eq!(rows[0]["figures"]["ops"], 200);
    assert!(rows[0]["ratio"].is_null(), "no baseline to compare with");
}

/// The RPC rows of every mode in one JSON document each: tiny runs, with large payloads
/// taking the chunk paths (echo above the inline threshold, read and write chunks).
#[test]
fn rpc_rows_of_every_mode_are_in_the_json() {
    for (mode, extra, want) in [
        (
            "lat",
            &["--size", "64,8k"][..],
            // 8k is too long for inline: the same call by continuation and by
            // Position-Zero Read chunk, its argument by send-based DDP and by Read
            // chunk, and its result by send-based DDP and by Write chunk.
            &[
                "echo",
                "echo",
                "long call by read chunk (2 round trips)",
                "long call by group (1 round trip)",
                "bulk argument by read chunk (2 round trips)",
                "bulk argument by send DDP (1 round trip)",
                "bulk result by write chunk",
                "bulk result by send DDP",
            ][..],
        ),
        ("rate", &["--depth", "4", "--connections", "2"], &["echo"]),
        (
            "bw",
            &["--size", "64k", "--depth", "2"],
            &["read chunk", "write chunk", "read chunk+crc"],
        ),
    ] {
        let mut args = vec![mode, "--iters", "200", "--json"];
        args.extend_from_slice(extra);
        let out = perf(&args);
        assert!(
            out.status.success(),
            "{mode}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
        let rows = v["rows"].as_array().unwrap();
        let names: Vec<&str> = rows.iter().map(|r| r["bench"].as_str().unwrap()).collect();
        assert_eq!(names, want, "{mode}");
        for r in rows {
            assert_eq!(r["layer"], "rpc", "{mode}: {r}");
            assert!(r["error"].is_null(), "{mode}: {r}");
            assert_eq!(r["figures"]["ops"], 200, "{mode}: {r}");
            assert!(
                r["figures"]["gb_per_s"].as_f64().unwrap() > 0.0,
                "{mode}: {r}"
            );
        }
    }
}

#[test]
fn siw_chunked_echo_is_compared_with_a_tcp_ping_pong_plus_a_copy() {
    // 8 KiB does not fit the 4 KiB inline threshold: the echo moves by chunks, and its
    // floor is an RPC over TCP's, the same octets each way plus one copy on each side.
    let rows = perf_rows(&[
        "lat",
        "--provider",
        "siw",
        "--size",
        "8k",
        "--iters",
        "50",
        "--baseline",
        "--json",
    ]);
    let copy = row(&rows, "tcp pingpong+copy");
    assert_eq!(copy["layer"], "physical");
    assert_eq!(copy["figures"]["ops"], 50, "{copy}");
    assert_eq!(
        row(&rows, "echo")["ratio"]["against"],
        "physical tcp pingpong+copy"
    );
}

/// Runs `rpcrdma-perf ARGS` (with `--json`), checks it succeeded, returns its rows.
fn perf_rows(args: &[&str]) -> Vec<Value> {
    let out = perf(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    v["rows"].as_array().expect("a rows array").clone()
}

/// The row named `bench` among `rows`.
fn row<'a>(rows: &'a [Value], bench: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["bench"] == bench)
        .unwrap_or_else(|| panic!("no {bench} row in {rows:?}"))
}

#[test]
fn siw_runs_rpc_and_fabric_rows_over_loopback() {
    let out = perf(&[
        "lat",
        "--provider",
        "siw",
        "--iters",
        "200",
        "--baseline",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(v["config"]["provider"], "siw");
    let rows = v["rows"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["bench"].as_str().unwrap()).collect();
    assert_eq!(names, ["pingpong", "tcp pingpong", "send/recv", "echo"]);
    // siw's floor is kernel TCP: the fabric row is compared with the TCP ping-pong.
    assert_eq!(rows[2]["ratio"]["against"], "physical tcp pingpong");
    assert_eq!(rows[3]["ratio"]["against"], "fabric send/recv");
    for r in rows {
        assert_eq!(r["figures"]["ops"], 200, "{r}");
    }
}

#[test]
fn siw_bandwidth_is_compared_with_a_tcp_stream() {
    let rows = perf_rows(&[
        "bw",
        "--provider",
        "siw",
        "--size",
        "64k",
        "--depth",
        "2",
        "--iters",
        "50",
        "--baseline",
        "--json",
    ]);
    assert!(
        row(&rows, "tcp stream")["figures"]["gb_per_s"]
            .as_f64()
            .unwrap()
            > 0.0
    );
    assert_eq!(
        row(&rows, "write")["ratio"]["against"],
        "physical tcp stream"
    );
    assert_eq!(
        row(&rows, "read")["ratio"]["against"],
        "physical tcp stream"
    );
    // The bulk ratio of record: the write row and the stream in alternating slices,
    // its ratio the median of the pairs' own ratios.
    let p = row(&rows, "write, paired with tcp stream");
    assert!(p["figures"]["gb_per_s"].as_f64().unwrap() > 0.0, "{p}");
    assert_eq!(p["ratio"]["against"], "physical tcp stream, paired");
    let pairs = p["paired"]["pairs"].as_array().expect("the pairs");
    assert_eq!(pairs.len(), 8, "{p}");
    assert_eq!(p["paired"]["slice_ops"], 50);
    let mut ratios: Vec<f64> = pairs
        .iter()
        .map(|q| {
            let (b, s) = (
                q["base_gb_per_s"].as_f64().unwrap(),
                q["gb_per_s"].as_f64().unwrap(),
            );
            assert!(b > 0.0 && s > 0.0, "{q}");
            let r = q["ratio"].as_f64().unwrap();
            assert!((r - s / b).abs() < 1e-9, "{q}");
            r
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    let median = (ratios[3] + ratios[4]) / 2.0;
    let r = &p["paired"]["ratio"];
    assert!((r["median"].as_f64().unwrap() - median).abs() < 1e-9, "{r}");
    assert!((p["ratio"]["gb_per_s"].as_f64().unwrap() - median).abs() < 1e-9);
    assert_eq!(r["min"].as_f64().unwrap(), ratios[0]);
    assert_eq!(r["max"].as_f64().unwrap(), ratios[7]);
    let calls = p["paired"]["base_syscalls_per_mib"]
        .as_array()
        .expect("counted");
    assert!(calls[0].as_f64().unwrap() >= calls[1].as_f64().unwrap());
}

/// Runs a siw latency run with `flag` at each of `modes`: each succeeds, its notes say
/// `note: {note} {mode} `, and it has the row `row`; an unknown mode is refused.
fn siw_option_is_chosen_and_reported(flag: &str, modes: &[&str], note: &str, row: &str) {
    for mode in modes {
        let out = perf(&[
            "lat",
            "--provider",
            "siw",
            "--iters",
            "100",
            "--baseline",
            flag,
            mode,
        ]);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{flag} {mode}: {text}");
        assert!(text.contains(&format!("note: {note} {mode} ")), "{text}");
        assert!(text.contains(row), "{text}");
    }
    let out = perf(&["lat", flag, "sometimes"]);
    assert!(!out.status.success());
}

/// `--siw-completions` reaches the provider: without confirmation Reads a Send completes
/// on transmit, and the note says which was measured.
#[test]
fn siw_completions_are_chosen_and_reported() {
    siw_option_is_chosen_and_reported(
        "--siw-completions",
        &["strict", "shared-segment", "on-transmit"],
        "siw completions:",
        "lat  fabric   send/recv",
    );
}

/// `--siw-crc off` runs siw without MPA CRCs (as Linux siw's default) and says so;
/// anything but `on` or `off` is refused.
#[test]
fn siw_crc_is_chosen_and_reported() {
    siw_option_is_chosen_and_reported(
        "--siw-crc",
        &["on", "off"],
        "siw CRCs:",
        "lat  rpc      echo",
    );
}
