//! `rpcrdma serve --cores 0,1` (poll groups, issue #13) holds 1000 shm connections: the
//! server process's resident memory (VmRSS from `/proc/PID/status`) grows by at most
//! 256 KiB per connection, the connections are spread over the two groups (the least
//! loaded takes the next), and so are their calls (`rpcrdma stats --json`, per group).
//! The clients are the engine's requesters in this process (their memory is not the
//! server's). Every wait has a deadline.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rpcrdma::fabric::shm::{ShmAddr, ShmDevice, ShmProvider};
use rpcrdma::{CallStatus, ConnConfig, Requester};
use rpcrdma_pools::HugePages;
use rpcrdma_ulp::echo;
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(120);
/// Most resident memory one idle connection may add to the server.
const BUDGET: u64 = 256 * 1024;
/// Overrides the number of clients (to measure other counts by hand).
const COUNT: &str = "RPCRDMA_CORES_CONNECTIONS";

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

/// Raises this process's open-file limit to its hard limit (the server, started
/// after, inherits it): each shm connection holds a few descriptors on each side.
fn raise_nofile() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        r.rlim_cur = r.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
    }
    r.rlim_cur
}

/// VmRSS of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the server's status");
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

fn stats(pid: u32) -> Value {
    let out = bin()
        .args(["stats", &pid.to_string(), "--json"])
        .output()
        .expect("runs rpcrdma stats");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

#[test]
fn serve_cores_holds_1000_connections_within_the_memory_budget() {
    let n: usize = std::env::var(COUNT)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let limit = raise_nofile();
    assert!(
        limit >= 8 * n as u64,
        "{n} connections need more descriptors than RLIMIT_NOFILE's hard limit {limit}"
    );
    let name = format!("rpcrdma-cores-{}", std::process::id());
    let mut child = bin()
        .args(["serve", "--provider", "shm", "--addr", &format!("@{name}")])
        .args(["--cores", "0,1", "--duration", "300"])
        .args(["--max-connections", &(n + 16).to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve starts");
    let out = child.stdout.take().expect("piped");
    let served = Served(child);
    let pid = served.0.id();
    let mut lines = BufReader::new(out).lines();
    loop {
        let line = lines.next().expect("serve says it serves").expect("a line");
        if line.contains("poll group(s) on cores") {
            break;
        }
    }
    // Keep reading (and dropping) what it prints, so it never blocks on stdout.
    std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
    let before = rss(pid);

    // Small clients: their memory is this process's, not measured.
    let cfg = ConnConfig {
        credits: 4,
        large_buf_size: 64 * 1024,
        large_bufs: 1,
        send_bufs: 8,
        queue_len: 4,
        mr_slots: 1,
        hugepages: HugePages::Never,
        ..ConnConfig::default()
    };
    let dev = ShmDevice::new();
    let addr = ShmAddr::abstract_name(name);
    let end = Instant::now() + DEADLINE;
    let start = Instant::now();
    let mut conns = Vec::with_capacity(n);
    for i in 0..n {
        let mut c = Requester::<ShmProvider>::connect(&dev, &addr)
            .config(cfg.clone())
            .timeout(DEADLINE)
            .open()
            .unwrap_or_else(|e| panic!("client {i} connects: {e}"));
        let msg = c.alloc_msg().expect("a send buffer");
        let o = c
            .call(echo::call(msg, &[i as u8; 16]).expect("an ECHO"), DEADLINE)
            .expect("submits");
        assert_eq!(o.status, CallStatus::Success, "ECHO on connection {i}");
        conns.push(c);
        assert!(Instant::now() < end, "{i} of {n} connected in time");
    }
    eprintln!(
        "{n} clients connected and called in {:.1?}",
        start.elapsed()
    );

    // The groups count calls ten times a second and publish their connections five
    // times: wait for both.
    let v = loop {
        let v = stats(pid);
        let groups = v["groups"].as_array().cloned().unwrap_or_default();
        let calls: u64 = groups.iter().filter_map(|g| g["calls"].as_u64()).sum();
        // A reply's send completion may be reaped after its client has the reply.
        let completions: u64 = groups
            .iter()
            .filter_map(|g| g["completions"].as_u64())
            .sum();
        // Each group publishes its connections' rows on its own schedule, too.
        let rows = v["connections"].as_array().map_or(0, Vec::len);
        if groups.len() == 2 && calls == n as u64 && completions >= 2 * n as u64 && rows == n {
            break v;
        }
        assert!(
            Instant::now() < end,
            "the groups never counted {n} calls: {v}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let after = rss(pid);
    let per = after.saturating_sub(before) / n as u64;
    eprintln!(
        "serve --cores 0,1: VmRSS {:.1} MiB -> {:.1} MiB with {n} connections: {:.1} KiB each",
        before as f64 / 1048576.0,
        after as f64 / 1048576.0,
        per as f64 / 1024.0
    );
    assert!(
        per <= BUDGET,
        "{:.1} KiB per connection, over the budget of {} KiB",
        per as f64 / 1024.0,
        BUDGET / 1024
    );
    // Sequential connects alternate between the two groups, and their calls with them.
    for (i, g) in v["groups"].as_array().expect("groups").iter().enumerate() {
        let half = ((n + 1 - i) / 2) as u64;
        assert_eq!(g["connections"].as_u64(), Some(half), "{g}");
        assert_eq!(g["calls"].as_u64(), Some(half), "{g}");
        assert!(g["completions"].as_u64() >= Some(2 * half), "{g}");
        // Held calls and overruns are counted per group; one call per connection
        // overruns nothing.
        assert!(g["held"].is_u64(), "{g}");
        assert_eq!(g["overruns"].as_u64(), Some(0), "{g}");
        // Each group serves receives from its shared queue (shm has one): some of its
        // connections are on it, each with a share of at least one credit, and no Send
        // found it empty.
        assert!(g["srq_depth"].as_u64() > Some(0), "{g}");
        let on = g["srq_connections"].as_u64().unwrap_or(0);
        assert!(on > 0 && on <= half, "{g}");
        assert!(g["receive_share"].as_u64() >= Some(1), "{g}");
        assert!(g["srq_low"].as_u64() >= Some(1), "{g}");
        // What the queue promised its connections never exceeds it (its ledger).
        let promised = g["srq_promised"].as_u64().unwrap_or(0);
        assert!(
            promised >= on && Some(promised) <= g["srq_depth"].as_u64(),
            "{g}"
        );
    }
    assert_eq!(v["connections"].as_array().map(Vec::len), Some(n));
    drop(conns);
    drop(served);
}
