//! Live counters of a running `rpcrdma serve`: a requester (the engine's, in this
//! process) keeps a connection open and makes calls of known sizes and shapes; `rpcrdma
//! stats PID` (the local stats socket) and the `--metrics` HTTP endpoint then show that
//! connection with exactly those calls, its octets, its chunk shapes, credits and
//! receive-queue depth, and the server's totals.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rpcrdma::fabric::shm::{ShmAddr, ShmDevice, ShmProvider};
use rpcrdma::{CallStatus, ConnConfig, ConnState, Requester};
use rpcrdma_pools::HugePages;
use rpcrdma_ulp::echo;
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(60);

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
}

/// The server child; killed and reaped when dropped.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Waits for the samples to catch up: the server publishes a few times a second.
fn stats_until(pid: u32, done: impl Fn(&Value) -> bool) -> Value {
    let end = Instant::now() + DEADLINE;
    loop {
        let out = bin()
            .args(["stats", &pid.to_string(), "--json"])
            .output()
            .expect("runs rpcrdma stats");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
        if done(&v) {
            return v;
        }
        assert!(Instant::now() < end, "stats never showed it: {v}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn http_get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("metrics endpoint");
    write!(s, "GET {path} HTTP/1.0\r\n\r\n").unwrap();
    let mut resp = String::new();
    s.read_to_string(&mut resp).unwrap();
    resp
}

#[test]
fn stats_and_metrics_show_each_connection_live() {
    let sock = std::env::temp_dir().join(format!("rpcrdma-stats-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    let mut child = bin()
        .args(["serve", "--provider", "shm", "--addr"])
        .arg(&sock)
        .args(["--metrics", "127.0.0.1:0", "--duration", "120"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve starts");
    let out = child.stdout.take().unwrap();
    let served = Served(child);
    let pid = served.0.id();
    let mut lines = BufReader::new(out).lines();
    let metrics: SocketAddr = loop {
        let line = lines.next().expect("serve prints its endpoints").unwrap();
        if let Some(rest) = line.split("http://").nth(1) {
            break rest.split('/').next().unwrap().parse().unwrap();
        }
    };
    // Nothing connected yet: no rows.
    let v = stats_until(pid, |v| v["uptime_s"].as_f64().unwrap_or(0.0) > 0.0);
    assert_eq!(v["connections"].as_array().unwrap().len(), 0);

    // Version 1 shapes only: with extensions a long call goes as a continuation group.
    let cfg = ConnConfig {
        credits: 8,
        large_buf_size: 64 * 1024,
        large_bufs: 8,
        hugepages: HugePages::Never,
        extensions: false,
        ..ConnConfig::default()
    };
    let mut conn = Requester::<ShmProvider>::connect_with(
        &ShmDevice::new(),
        &ShmAddr::Path(sock.clone()),
        &cfg,
    )
    .expect("connect");
    let end = Instant::now() + DEADLINE;
    while conn.state() != ConnState::Established {
        conn.poll(Instant::now());
        assert!(Instant::now() < end, "connected");
    }
    // 5 small ECHOs inline and 2 large ones through a Position-Zero Read chunk (the
    // reply then comes in a Reply chunk).
    let sizes = [100usize, 100, 100, 100, 100, 9000, 9000];
    for (tag, &n) in sizes.iter().enumerate() {
        let data = vec![tag as u8; n];
        let msg = if n < 4000 {
            conn.alloc_msg()
        } else {
            conn.alloc_large()
        }
        .unwrap();
        conn.submit(echo::call(msg, &data).unwrap(), tag as u64)
            .unwrap();
        let o = loop {
            conn.poll(Instant::now());
            if let Some(o) = conn.poll_outcome() {
                break o;
            }
            assert!(Instant::now() < end, "outcome");
        };
        assert_eq!(o.status, CallStatus::Success);
        assert_eq!(echo::reply_data(&o).unwrap(), data);
    }

    let v = stats_until(pid, |v| {
        v["connections"]
            .as_array()
            // The last reply's Send completes at a server poll after the client has the
            // reply: wait for that too, not only for the call count.
            .is_some_and(|c| {
                c.len() == 1 && c[0]["calls"].as_u64() >= Some(7) && c[0]["in_progress"] == 0
            })
    });
    let c = &v["connections"][0];
    assert_eq!(c["calls"], 7, "{c}");
    assert_eq!(c["long_calls"], 2, "{c}");
    assert_eq!(c["reply_chunks"], 2, "{c}");
    assert_eq!(c["inline_replies"], 5, "{c}");
    assert_eq!(c["state"], "Established", "{c}");
    assert!(c["bytes_in"].as_u64().unwrap() > 18_000, "{c}");
    assert!(c["bytes_out"].as_u64().unwrap() > 18_000, "{c}");
    assert!(c["recvs_posted"].as_u64().unwrap() > 0, "{c}");
    assert!(c["credit_target"].as_u64().unwrap() > 0, "{c}");
    assert_eq!(c["in_progress"], 0, "{c}");
    // One call at a time: no call found every reply context busy, none overran.
    assert_eq!(c["held"], 0, "{c}");
    assert_eq!(c["holding"], 0, "{c}");
    assert_eq!(c["overruns"], 0, "{c}");
    assert!(
        c["peer"]
            .as_str()
            .unwrap()
            .contains(&std::process::id().to_string()),
        "{c}"
    );
    assert_eq!(v["accepted"], 1);
    assert!(v["calls"].as_u64().unwrap() >= 7);

    // The same over HTTP, as Prometheus text.
    let text = http_get(metrics, "/metrics");
    assert!(text.starts_with("HTTP/1.0 200 OK\r\n"), "{text}");
    assert!(text.contains("rpcrdma_connections 1\n"), "{text}");
    let id = c["id"].as_str().unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("rpcrdma_conn_calls_total{") && l.contains(id))
        .unwrap_or_else(|| panic!("conn_calls_total of {id}: {text}"));
    assert!(line.ends_with(" 7"), "{line}");
    for name in ["conn_held_total", "conn_holding", "conn_overruns_total"] {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("rpcrdma_{name}{{")) && l.contains(id))
            .unwrap_or_else(|| panic!("{name} of {id}: {text}"));
        assert!(line.ends_with(" 0"), "{line}");
    }
    assert!(http_get(metrics, "/json").contains("\"long_calls\":2"));
    assert!(http_get(metrics, "/nothing").starts_with("HTTP/1.0 404"));

    // The table for people names the connection.
    let out = bin().args(["stats", &pid.to_string()]).output().unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("1 connection(s)") && table.contains(id),
        "{table}"
    );
    assert!(
        table.contains(" held ") && table.contains(" ovrun "),
        "{table}"
    );

    // Closed, the connection's row goes; the totals stay.
    conn.close();
    let end = Instant::now() + DEADLINE;
    while conn.state() != ConnState::Closed {
        conn.poll(Instant::now());
        assert!(Instant::now() < end, "closed");
    }
    let v = stats_until(pid, |v| {
        v["connections"].as_array().is_some_and(|c| c.is_empty())
    });
    assert!(v["calls"].as_u64().unwrap() >= 7);
    drop(served);
    // Gone, the process answers no more.
    let out = bin().args(["stats", &pid.to_string()]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no rpcrdma serve with pid"));
    let out = bin().args(["stats", "not-a-target"]).output().unwrap();
    assert!(!out.status.success());
}
