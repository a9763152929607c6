//! A server that stays up: many sequential connections (`rpcrdma call --null`, each a
//! new process that connects, calls and closes) to one `rpcrdma serve`, on shm and on
//! siw. Every call must succeed and the server's resident memory afterwards must be
//! within 16 MiB of where it was after the first few: what a connection registers is
//! released when it ends, so the server is bounded by live connections, not by its
//! history.
//!
//! CI runs 100 connections per provider; `RPCRDMA_SEQUENTIAL_CONNECTIONS=1000` is the
//! release bar (the number), run by hand and reported in the README.

use std::io::Read;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Longest one call, or the server's start, may take.
const DEADLINE: Duration = Duration::from_secs(60);
/// Connections made before the baseline is read: the first ones fault in the
/// allocator's arenas and the server's code.
const WARMUP: usize = 5;
/// Allowed growth of the server's resident memory over the whole run.
const SLACK_KIB: u64 = 16 * 1024;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
}

fn connections() -> usize {
    std::env::var("RPCRDMA_SEQUENTIAL_CONNECTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
}

/// The server child; killed when dropped unless it already exited.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Resident memory of process `pid` in KiB, from /proc.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS line")
}

/// Resident memory once it stopped changing (three equal looks 100 ms apart, at most
/// three seconds): the baseline must not include a connection still being torn down.
fn settled_rss_kib(pid: u32) -> u64 {
    let end = Instant::now() + Duration::from_secs(3);
    let mut last = rss_kib(pid);
    let mut same = 0;
    while same < 2 && Instant::now() < end {
        thread::sleep(Duration::from_millis(100));
        let now = rss_kib(pid);
        same = if now == last { same + 1 } else { 0 };
        last = now;
    }
    last
}

fn start(provider: &str, addr: &str) -> Served {
    let child = bin()
        .args(["serve", "--provider", provider, "--addr", addr])
        .args(["--duration", "1200"])
        // Nobody reads the server's per-connection lines while it runs: a pipe would
        // fill after some thousand connections and stop the server mid-write.
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn rpcrdma serve");
    Served(child)
}

/// One `rpcrdma call --null`; retried while the server is still starting.
fn call(provider: &str, addr: &str, retry_until: Option<Instant>) -> Result<(), String> {
    loop {
        let mut child = bin()
            .args(["call", "--provider", provider, "--addr", addr, "--null"])
            .args(["--timeout", "10"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn rpcrdma call");
        let end = Instant::now() + DEADLINE;
        let status = loop {
            if let Some(st) = child.try_wait().expect("try_wait") {
                break st;
            }
            if Instant::now() >= end {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("call did not finish within {DEADLINE:?}"));
            }
            thread::sleep(Duration::from_millis(2));
        };
        if status.success() {
            return Ok(());
        }
        let mut err = String::new();
        if let Some(mut s) = child.stderr.take() {
            let _ = s.read_to_string(&mut err);
        }
        match retry_until {
            Some(t) if Instant::now() < t => thread::sleep(Duration::from_millis(50)),
            _ => return Err(format!("{status}: {err}")),
        }
    }
}

fn sequential_connections_leave_nothing_behind(provider: &str, addr: &str) {
    let server = start(provider, addr);
    let pid = server.0.id();
    call(provider, addr, Some(Instant::now() + DEADLINE)).expect("server comes up");
    for _ in 1..WARMUP {
        call(provider, addr, None).expect("warm-up call");
    }
    let base = settled_rss_kib(pid);
    let n = connections();
    let mut peak = base;
    for i in 0..n {
        if let Err(e) = call(provider, addr, None) {
            panic!(
                "{provider}: connection {} of {n} failed ({e}); server RSS {} KiB, {} KiB at \
                 the start",
                i + 1,
                rss_kib(pid),
                base
            );
        }
        if i % 10 == 9 {
            peak = peak.max(rss_kib(pid));
        }
    }
    // The last client's exit reaches the server a moment after the client sees its
    // reply; give the server that moment to drop the connection.
    let end = Instant::now() + Duration::from_secs(10);
    let mut after = rss_kib(pid);
    while after > base + SLACK_KIB && Instant::now() < end {
        thread::sleep(Duration::from_millis(50));
        after = rss_kib(pid);
    }
    eprintln!(
        "{provider}: {n} sequential connections; server RSS {base} KiB after {WARMUP}, \
         {after} KiB after all (peak seen {peak} KiB)"
    );
    assert!(
        after <= base + SLACK_KIB,
        "{provider}: server RSS grew from {base} KiB to {after} KiB over {n} connections"
    );
}

#[test]
fn sequential_shm_connections_leave_nothing_behind() {
    let addr = format!("@rpcrdma-stays-up-{}", std::process::id());
    sequential_connections_leave_nothing_behind("shm", &addr);
}

#[test]
fn sequential_siw_connections_leave_nothing_behind() {
    // A port the kernel just handed out and nobody listens on any more.
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("address").port()
    };
    sequential_connections_leave_nothing_behind("siw", &format!("127.0.0.1:{port}"));
}

/// A client whose host stops answering is, to the server, a connection that goes
/// silent: a stopped `rpcrdma call` (SIGSTOP: its kernel still acknowledges TCP, so
/// keepalive cannot tell) is disconnected by `--idle-timeout`, and the server says so.
#[test]
fn a_silent_siw_client_is_dropped_at_the_idle_timeout() {
    use std::io::{BufRead, BufReader};
    use std::sync::mpsc;
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("address").port()
    };
    let addr = format!("127.0.0.1:{port}");
    let mut server = Served(
        bin()
            .args(["serve", "--provider", "siw", "--addr", &addr])
            .args(["--duration", "60", "--idle-timeout", "1"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn rpcrdma serve"),
    );
    let (tx, lines) = mpsc::channel::<String>();
    let out = server.0.stdout.take().expect("stdout");
    thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    call("siw", &addr, Some(Instant::now() + DEADLINE)).expect("server comes up");
    // Stays connected after its reply, waiting a minute for a keepalive probe.
    let client = Served(
        bin()
            .args(["call", "--provider", "siw", "--addr", &addr, "--null"])
            .args(["--keepalive", "60", "--probes", "1", "--timeout", "120"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn rpcrdma call"),
    );
    let wait_for = |what: &str, pred: &dyn Fn(&str) -> bool| -> String {
        let end = Instant::now() + DEADLINE;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(l) if pred(&l) => return l,
                Ok(_) => {}
                Err(_) => panic!("the server never printed {what}"),
            }
        }
    };
    // The first call's connection comes and goes; the second one stays.
    let up = wait_for("a second connection", &|l| {
        l.starts_with("connection ") && l.ends_with(" established") && !l.contains("conn#1 ")
    });
    let id = up
        .strip_prefix("connection ")
        .and_then(|l| l.strip_suffix(" established"))
        .expect("connection id")
        .to_owned();
    let stopped = Command::new("kill")
        .args(["-STOP", &client.0.id().to_string()])
        .status()
        .expect("kill -STOP");
    assert!(stopped.success());
    let since = Instant::now();
    wait_for("the silent connection closed", &|l| {
        l == format!("connection {id} closed")
    });
    assert!(
        since.elapsed() >= Duration::from_millis(500),
        "closed before the idle timeout could pass"
    );
    let _ = Command::new("kill")
        .args(["-CONT", &client.0.id().to_string()])
        .status();
}
