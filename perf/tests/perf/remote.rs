//! The two-host split, run as two processes on this host: `rpcrdma-perf server` on one
//! side, `rpcrdma-perf lat|rate --connect ADDR` on the other, over shm and siw. The
//! client's rows must be measured (no error, every operation counted) against the remote
//! responder, with the baselines left out.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

fn perf() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rpcrdma-perf"))
}

/// Starts a server and waits for its "listening" line.
fn server(provider: &str, addr: &str) -> Child {
    let mut child = perf()
        .args([
            "server",
            "--provider",
            provider,
            "--addr",
            addr,
            "--for",
            "60",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .expect("starts rpcrdma-perf server");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().expect("stdout"))
        .read_line(&mut line)
        .expect("reads the banner");
    assert!(line.contains("listening on"), "server banner: {line:?}");
    child
}

fn remote_rows(provider: &str, addr: &str, mode: &str) -> serde_json::Value {
    let out = perf()
        .args([
            mode,
            "--provider",
            provider,
            "--connect",
            addr,
            "--iters",
            "500",
            "--json",
        ])
        .output()
        .expect("runs the client");
    assert!(
        out.status.success(),
        "{mode} --connect {addr}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn check(provider: &str, addr: &str) {
    let _turn = crate::one_busy_test_at_a_time();
    let mut s = server(provider, addr);
    for mode in ["lat", "rate"] {
        let doc = remote_rows(provider, addr, mode);
        assert_eq!(doc["config"]["connect"], addr);
        assert_eq!(
            doc["config"]["baseline"], false,
            "no baselines against a remote"
        );
        let rows = doc["rows"].as_array().expect("rows");
        assert!(!rows.is_empty());
        for r in rows {
            assert_eq!(r["layer"], "rpc", "{r}");
            assert!(r["error"].is_null(), "{mode} row failed: {r}");
            assert_eq!(r["figures"]["ops"], 500, "{r}");
            assert!(r["figures"]["p50_ns"].as_u64().unwrap_or(0) > 0, "{r}");
        }
    }
    let _ = s.kill();
    let _ = s.wait();
}

#[test]
fn a_client_measures_against_a_server_in_another_process_over_shm() {
    check(
        "shm",
        &format!("rpcrdma-perf-remote-{}", std::process::id()),
    );
}

#[test]
fn a_client_measures_against_a_server_in_another_process_over_siw() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    check("siw", &format!("127.0.0.1:{port}"));
}
