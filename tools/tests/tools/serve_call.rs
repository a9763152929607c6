//! `rpcrdma serve` and `rpcrdma call` end to end, as separate processes over shm: a
//! server on a temporary socket path, calls of every shape against it, an unreachable
//! address, and a clean shutdown on SIGINT. Every wait has a deadline and the server is
//! killed if a test fails before it stops.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Longest any child may run before the test gives up on it.
const DEADLINE: Duration = Duration::from_secs(60);

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
}

/// The server child; killed when dropped unless it already exited.
struct ServerGuard {
    child: Child,
    socket: PathBuf,
}

impl Drop for ServerGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

fn socket_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("rpcrdma-cli-{tag}-{}.sock", std::process::id()))
}

fn start_server(socket: &Path) -> ServerGuard {
    start_server_with(socket, &["--max-size", "262144"])
}

/// [`start_server`] with `extra` arguments instead of the default `--max-size`.
fn start_server_with(socket: &Path, extra: &[&str]) -> ServerGuard {
    let _ = std::fs::remove_file(socket);
    let child = bin()
        .args(["serve", "--provider", "shm", "--addr"])
        .arg(socket)
        .args(["--duration", "120"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rpcrdma serve");
    let mut guard = ServerGuard {
        child,
        socket: socket.to_owned(),
    };
    let end = Instant::now() + DEADLINE;
    while !socket.exists() {
        if let Ok(Some(st)) = guard.child.try_wait() {
            panic!("server exited early with {st}");
        }
        assert!(Instant::now() < end, "server socket never appeared");
        thread::sleep(Duration::from_millis(20));
    }
    guard
}

/// Waits for `child` with the deadline, killing it when it passes.
fn wait_output(mut child: Child) -> Output {
    let end = Instant::now() + DEADLINE;
    let status: ExitStatus = loop {
        if let Some(st) = child.try_wait().expect("try_wait") {
            break st;
        }
        if Instant::now() >= end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("child did not finish within {DEADLINE:?}");
        }
        thread::sleep(Duration::from_millis(10));
    };
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    if let Some(mut s) = child.stdout.take() {
        s.read_to_end(&mut stdout).expect("stdout");
    }
    if let Some(mut s) = child.stderr.take() {
        s.read_to_end(&mut stderr).expect("stderr");
    }
    Output {
        status,
        stdout,
        stderr,
    }
}

fn call(socket: &Path, args: &[&str]) -> Output {
    let child = bin()
        .args(["call", "--provider", "shm", "--addr"])
        .arg(socket)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rpcrdma call");
    wait_output(child)
}

fn call_json(socket: &Path, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.push("--json");
    let out = call(socket, &a);
    assert!(
        out.status.success(),
        "{args:?}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("call prints one JSON document")
}

fn shape(v: &Value) -> (String, u64, u64, u64) {
    let s = &v["shape"];
    (
        s["call"].as_str().unwrap().to_owned(),
        s["read_chunks"].as_u64().unwrap(),
        s["write_chunks"].as_u64().unwrap(),
        s["reply_chunks"].as_u64().unwrap(),
    )
}

#[test]
fn serve_answers_every_shape_and_stops_on_sigint() {
    let socket = socket_path("shapes");
    let mut server = start_server(&socket);

    let v = call_json(&socket, &["--null"]);
    assert_eq!(v["status"], "SUCCESS");
    assert_eq!(v["name"], "NULL");
    assert_eq!(v["reply_len"], 24, "accepted reply, no results");
    assert_eq!(shape(&v), ("RDMA_MSG".into(), 0, 0, 0));

    let v = call_json(&socket, &["--echo", "--size", "1000"]);
    assert_eq!(v["status"], "SUCCESS");
    assert_eq!(v["check"], "echoed 1000 octets match");
    assert_eq!(v["reply_len"], 24 + 4 + 1000);
    assert_eq!(shape(&v), ("RDMA_MSG".into(), 0, 0, 0));

    let v = call_json(
        &socket,
        &["--echo", "--size", "40001", "--read-chunk", "--write-chunk"],
    );
    assert_eq!(v["check"], "echoed 40001 octets match");
    assert_eq!(v["write_chunk_octets"], 40001);
    assert_eq!(v["reply_len"], 28, "only the length word inline");
    assert_eq!(shape(&v), ("RDMA_MSG".into(), 1, 1, 0));

    let v = call_json(&socket, &["--source", "--size", "30000", "--reply-chunk"]);
    assert_eq!(v["check"], "30000 octets of the source pattern");
    assert_eq!(v["write_chunk_octets"], 0);
    assert_eq!(
        v["reply_len"],
        28 + 30000,
        "the whole reply through the Reply chunk"
    );
    assert_eq!(shape(&v), ("RDMA_MSG".into(), 0, 0, 1));

    // Text form of a chunked SINK.
    let out = call(&socket, &["--sink", "--size", "20000", "--read-chunk"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("call SINK (prog 0x2f000001 vers 1 proc 2)"),
        "{text}"
    );
    assert!(
        text.contains("shape: RDMA_MSG, 1 read chunk, no write chunk"),
        "{text}"
    );
    assert!(text.contains("server saw 20000 octets"), "{text}");
    assert!(text.contains("time: connect"), "{text}");

    // An unknown program is an RPC error, reported as a failure in plain words.
    let out = call(
        &socket,
        &["--prog", "0x30000000", "--proc", "1", "--size", "0"],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("call failed") && err.contains("RPC error"),
        "{err}"
    );

    // SIGINT: the server disconnects, reports, and exits 0.
    let stdout = interrupt(&mut server);
    assert!(stdout.contains("listening on shm"), "{stdout}");
    assert!(stdout.contains("connection conn#"), "{stdout}");
    assert!(stdout.contains("stopping (signal)"), "{stdout}");
    // NULL, ECHO, ECHO, SOURCE, SINK and the unknown program: six calls.
    assert!(
        stdout.contains("stopped after") && stdout.contains(": 6 calls"),
        "{stdout}"
    );
    assert!(
        stdout.contains("6 calls (1 NULL, 1 PROG_UNAVAIL)"),
        "the dispatcher's counts: {stdout}"
    );
    assert!(!socket.exists(), "the listener removes its socket file");
}

#[test]
fn serve_stops_by_itself_after_duration() {
    let socket = socket_path("duration");
    let child = bin()
        .args(["serve", "--addr"])
        .arg(&socket)
        .args(["--duration", "1.5"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let out = wait_output(child);
    let _ = std::fs::remove_file(&socket);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("calls/s"), "per-second stats: {stdout}");
    assert!(stdout.contains("stopping (--duration elapsed)"), "{stdout}");
    assert!(stdout.contains("0 calls"), "{stdout}");
}

#[test]
fn call_without_a_server_says_how_to_start_one() {
    let socket = socket_path("nobody");
    let _ = std::fs::remove_file(&socket);
    let out = call(&socket, &["--null", "--timeout", "2"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("cannot reach an rpcrdma server"), "{err}");
    assert!(
        err.contains(&format!(
            "rpcrdma serve --provider shm --addr {}",
            socket.display()
        )),
        "{err}"
    );
}

#[test]
fn call_refuses_chunks_the_procedure_cannot_use() {
    let socket = socket_path("badopts");
    for (args, want) in [
        (&["--null", "--read-chunk"][..], "--read-chunk"),
        (&["--sink", "--write-chunk"], "--write-chunk"),
        (&["--echo", "--size", "100000000"], "--size"),
    ] {
        let out = call(&socket, args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains(want), "{args:?}: {err}");
    }
    let out = call(&socket, &["--null", "--sink"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "conflicting procedures are a usage error"
    );
}

/// Stops `server` with SIGINT and returns what it printed. Borrowed, not taken: dropping
/// the guard removes the socket file, which would hide whether the listener removed it.
fn interrupt(server: &mut ServerGuard) -> String {
    let kill = Command::new("kill")
        .args(["-INT", &server.child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(kill.success());
    let end = Instant::now() + DEADLINE;
    let status = loop {
        if let Some(st) = server.child.try_wait().expect("try_wait") {
            break st;
        }
        assert!(Instant::now() < end, "server did not stop after SIGINT");
        thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "server exit status {status}");
    let mut stdout = String::new();
    server
        .child
        .stdout
        .take()
        .expect("piped stdout")
        .read_to_string(&mut stdout)
        .expect("server output");
    stdout
}

/// `call --keepalive` probes with NULL calls to the program it calls, which the server
/// serves: every probe is a NULL answered SUCCESS there, none a PROG_UNAVAIL (as probes
/// to the engine's default probe program would be).
#[test]
fn keepalive_probes_are_nulls_of_the_called_program() {
    let socket = socket_path("keepalive");
    let mut server = start_server(&socket);
    let v = call_json(
        &socket,
        &[
            "--echo",
            "--size",
            "100",
            "--keepalive",
            "0.05",
            "--probes",
            "3",
        ],
    );
    assert_eq!(v["check"], "echoed 100 octets match");
    let probes = v["keepalive_probes"].as_u64().expect("probe count");
    assert!(probes >= 3, "{v}");
    let stdout = interrupt(&mut server);
    let line = stdout
        .lines()
        .find(|l| l.contains("stopped after"))
        .unwrap_or_else(|| panic!("no summary line: {stdout}"));
    let count = |what: &str| -> u64 {
        let before = line
            .split(what)
            .next()
            .and_then(|s| s.rsplit(['(', ' ']).find(|w| !w.is_empty()))
            .unwrap_or_else(|| panic!("no {what} count in {line}"));
        before
            .parse()
            .unwrap_or_else(|_| panic!("{what} count in {line}"))
    };
    assert_eq!(count(" PROG_UNAVAIL"), 0, "{line}");
    // The ECHO itself is not a NULL; a probe the server answered just as the client
    // closed is counted there but not by the client.
    assert!(count(" NULL") >= probes, "{line}");
}

/// `call` says how chunk memory was registered (text and JSON), and `--registration`
/// chooses it: per-RPC keys by default on shm, persistent pools when asked.
#[test]
fn call_says_how_chunk_memory_is_registered() {
    let socket = socket_path("registration");
    let mut server = start_server(&socket);
    let v = call_json(&socket, &["--echo", "--size", "40000", "--write-chunk"]);
    assert_eq!(v["registration"], "fastreg", "{v}");
    let v = call_json(
        &socket,
        &[
            "--echo",
            "--size",
            "40000",
            "--write-chunk",
            "--registration",
            "persistent",
        ],
    );
    assert_eq!(v["registration"], "persistent", "{v}");
    assert_eq!(v["check"], "echoed 40000 octets match");
    let out = call(&socket, &["--null", "--registration", "persistent"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("registration: persistent"), "{text}");
    let out = call(&socket, &["--null", "--registration", "sometimes"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("auto, fastreg or persistent"), "{err}");
    interrupt(&mut server);
}

/// A reply too large for inline, with no Reply chunk offered, comes in a Read chunk the
/// server provides; the client pulls it and sends RDMA_DONE. Without extensions on the
/// client the same call fails with ERR_CHUNK, at once.
#[test]
fn call_pulls_a_reply_from_the_servers_read_chunk() {
    let socket = socket_path("readchunk");
    let mut server = start_server(&socket);
    let v = call_json(
        &socket,
        &["--source", "--size", "200000", "--no-reply-chunk"],
    );
    assert_eq!(v["status"], "SUCCESS");
    assert_eq!(v["check"], "200000 octets of the source pattern");
    assert_eq!(v["reply_len"], 28 + 200000);
    assert_eq!(shape(&v), ("RDMA_MSG".into(), 0, 0, 0));
    assert_eq!(v["shape"]["reply_read_chunks"], 1);
    assert_eq!(v["shape"]["done_sent"], true);

    let out = call(
        &socket,
        &[
            "--source",
            "--size",
            "200000",
            "--no-reply-chunk",
            "--no-extensions",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("ERR_CHUNK"), "{err}");

    // The text form says where the reply came from.
    let out = call(
        &socket,
        &["--source", "--size", "100000", "--no-reply-chunk"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("reply pulled from the server's Read chunk (RDMA_DONE sent)"),
        "{text}"
    );
    let stdout = interrupt(&mut server);
    assert!(stdout.contains("stopping (signal)"), "{stdout}");
}

/// `call --ccp` runs RFC 5666's CONF_RDMA against `serve` and applies the answer: the
/// server's inline limit and its alignment; a payload sent by Read chunk without it goes
/// inline, padded, as RDMA_MSGP with it (the server decodes it past the padding: the
/// echo checks), and the text form says what was agreed.
#[test]
fn call_runs_ccp_and_pads_the_payload_inline() {
    let socket = socket_path("ccp");
    let mut server = start_server(&socket);
    let plain = call_json(&socket, &["--echo", "--size", "1000", "--read-chunk"]);
    assert_eq!(shape(&plain), ("RDMA_MSG".into(), 1, 0, 0));
    assert!(plain.get("ccp").is_none(), "{plain}");

    let v = call_json(
        &socket,
        &["--echo", "--size", "1000", "--read-chunk", "--ccp"],
    );
    assert_eq!(v["status"], "SUCCESS");
    assert_eq!(v["check"], "echoed 1000 octets match");
    assert_eq!(shape(&v), ("RDMA_MSGP".into(), 0, 0, 0));
    assert_eq!(v["ccp"]["align"], 64);
    assert_eq!(v["ccp"]["maxcall_sendsize"], 4096);
    assert_eq!(v["ccp"]["send_threshold"], 4096);

    // Too large to pad inline: the Read chunk stays (the echo comes back by whatever
    // the tool chooses for a reply this size).
    let v = call_json(
        &socket,
        &["--echo", "--size", "6000", "--read-chunk", "--ccp"],
    );
    assert_eq!(v["check"], "echoed 6000 octets match");
    let (kind, reads, _, _) = shape(&v);
    assert_eq!((kind.as_str(), reads), ("RDMA_MSG", 1));

    let out = call(&socket, &["--echo", "--size", "100", "--ccp"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("ccp: server takes inline calls up to 4096 octets, aligns receives at 64"),
        "{text}"
    );
    let stdout = interrupt(&mut server);
    assert!(stdout.contains("CCP 100417 v1"), "{stdout}");
}

/// Between two rpcrdma peers a 20 KB ECHO goes as a continuation group each way (4 KiB
/// inline: five Sends, no chunk); with `--no-extensions` as version 1 chunks.
#[test]
fn call_shows_message_continuation() {
    let socket = socket_path("continuation");
    let mut server = start_server(&socket);
    let v = call_json(&socket, &["--echo", "--size", "20000"]);
    assert_eq!(v["check"], "echoed 20000 octets match");
    assert_eq!(shape(&v), ("ROPT_XMTREQ".into(), 0, 0, 0));
    assert_eq!(v["shape"]["call_messages"], 5);
    assert_eq!(v["shape"]["reply_messages"], 5);
    let v = call_json(&socket, &["--echo", "--size", "20000", "--no-extensions"]);
    assert_eq!(v["check"], "echoed 20000 octets match");
    assert_eq!(shape(&v), ("RDMA_MSG".into(), 1, 1, 0));
    assert_eq!(v["shape"]["call_messages"], 1);
    assert_eq!(v["shape"]["reply_messages"], 1);
    let stdout = interrupt(&mut server);
    assert!(stdout.contains("stopping (signal)"), "{stdout}");
}

/// A server that posts DDP-targetable receive segments (siw's default, `--send-ddp`
/// elsewhere) still gets a 20 KB ECHO as a continuation group: its argument by
/// send-based DDP would leave the 20 KB reply to a Reply chunk. An argument whose reply
/// fits inline goes by send-based DDP.
#[test]
fn a_long_echo_prefers_a_group_to_send_ddp() {
    let socket = socket_path("continuation-sddp");
    let mut server = start_server_with(&socket, &["--max-size", "262144", "--send-ddp"]);
    let v = call_json(&socket, &["--echo", "--size", "20000"]);
    assert_eq!(v["check"], "echoed 20000 octets match");
    assert_eq!(shape(&v), ("ROPT_XMTREQ".into(), 0, 0, 0), "{v}");
    assert_eq!(v["shape"]["call_messages"], 5);
    assert_eq!(v["shape"]["send_ddp_items"], 0);
    let v = call_json(
        &socket,
        &[
            "--echo",
            "--size",
            "2000",
            "--read-chunk",
            "--send-ddp-max",
            "4096",
        ],
    );
    assert_eq!(v["shape"]["send_ddp_items"], 1, "{v}");
    let stdout = interrupt(&mut server);
    assert!(stdout.contains("stopping (signal)"), "{stdout}");
}

/// With `call --send-ddp` (the client posts DDP segments and advertises them), a 1 MiB
/// SOURCE (READ-like: small call, bulk reply) asks for the reply's item by send-based
/// DDP: the server places it in the client's receive segment with its reply's one
/// Send, no Write chunk; with 256 KiB segments as a reply group of four transmissions
/// (`reply_messages` 4); without the flag it comes by Write chunk.
#[test]
fn call_shows_send_based_ddp_replies() {
    let socket = socket_path("send-ddp-reply");
    let mut server = start_server_with(&socket, &["--max-size", "1048576"]);
    let v = call_json(
        &socket,
        &[
            "--source",
            "--size",
            "1048576",
            "--send-ddp",
            // The limit is on the sink offered (1 MiB and the reply's headroom).
            "--send-ddp-max",
            "2097152",
        ],
    );
    assert_eq!(v["status"], "SUCCESS", "{v}");
    assert_eq!(v["check"], "1048576 octets of the source pattern", "{v}");
    assert_eq!(shape(&v), ("ROPT_XMTREQ".into(), 0, 0, 0), "{v}");
    assert_eq!(v["shape"]["send_ddp_reply_items"], 1, "{v}");
    assert_eq!(v["shape"]["reply_messages"], 1);
    // With 256 KiB segments behind the client's receives the 1 MiB result comes as a
    // reply group of four transmissions, one piece in each (engine/DESIGN.md,
    // "Send-based DDP replies across segments").
    let v = call_json(
        &socket,
        &[
            "--source",
            "--size",
            "1048576",
            "--send-ddp",
            "--send-ddp-segment",
            "262144",
            "--send-ddp-max",
            "2097152",
        ],
    );
    assert_eq!(v["status"], "SUCCESS", "{v}");
    assert_eq!(v["check"], "1048576 octets of the source pattern", "{v}");
    assert_eq!(shape(&v), ("ROPT_XMTREQ".into(), 0, 0, 0), "{v}");
    assert_eq!(v["shape"]["send_ddp_reply_items"], 1, "{v}");
    assert_eq!(v["shape"]["reply_messages"], 4, "{v}");
    // Without a limit the shape follows the device: results by Write chunk.
    let v = call_json(&socket, &["--source", "--size", "1048576", "--send-ddp"]);
    assert_eq!(v["check"], "1048576 octets of the source pattern", "{v}");
    assert_eq!(shape(&v), ("RDMA_MSG".into(), 0, 1, 0), "{v}");
    assert_eq!(v["shape"]["send_ddp_reply_items"], 0);
    let stdout = interrupt(&mut server);
    assert!(stdout.contains("stopping (signal)"), "{stdout}");
}

/// With a server that posts DDP segments (`--send-ddp`), a 1 MiB SINK (WRITE-like:
/// bulk argument, small reply) places its payload by send-based DDP in one Send, no
/// Read chunk, when `--send-ddp-max` allows it; with `--no-extensions`, or by the shm
/// device's default (a Read there costs no round trip), it goes by Read chunk.
/// A 1 MiB argument to a server with 64 KiB DDP segments goes as a continuation group
/// of sixteen Sends, each placing its piece (engine/DESIGN.md, "Items across
/// segments"); the server's SINK sees it whole (gathered for the ULP).
#[test]
fn call_shows_send_based_ddp_across_segments() {
    let socket = socket_path("send-ddp-segments");
    let mut server = start_server_with(
        &socket,
        &[
            "--max-size",
            "1048576",
            "--send-ddp",
            "--send-ddp-segment",
            "65536",
        ],
    );
    let v = call_json(
        &socket,
        &["--sink", "--size", "1048576", "--send-ddp-max", "1048576"],
    );
    assert_eq!(v["status"], "SUCCESS", "{v}");
    assert_eq!(v["shape"]["send_ddp_items"], 1, "{v}");
    assert_eq!(v["shape"]["call_messages"], 16, "{v}");
    assert!(
        v["check"].as_str().unwrap().contains("match"),
        "the server saw the payload whole: {v}"
    );
    let stdout = interrupt(&mut server);
    assert!(stdout.contains("stopping (signal)"), "{stdout}");
}

#[test]
fn call_shows_send_based_ddp() {
    let socket = socket_path("send-ddp");
    let mut server = start_server_with(&socket, &["--max-size", "1048576", "--send-ddp"]);
    // On shm the device default is a Read chunk (a Read there costs no round trip):
    // the limit asks for send-based DDP.
    let v = call_json(
        &socket,
        &["--sink", "--size", "1048576", "--send-ddp-max", "1048576"],
    );
    assert_eq!(v["status"], "SUCCESS", "{v}");
    assert_eq!(shape(&v), ("ROPT_XMTREQ".into(), 0, 0, 0), "{v}");
    assert_eq!(v["shape"]["send_ddp_items"], 1);
    assert_eq!(v["shape"]["call_messages"], 1);
    assert!(
        v["check"].as_str().unwrap().contains("match"),
        "the server saw the payload whole: {v}"
    );
    let v = call_json(&socket, &["--sink", "--size", "1048576", "--no-extensions"]);
    assert_eq!(v["status"], "SUCCESS", "{v}");
    assert_eq!(shape(&v), ("RDMA_MSG".into(), 1, 0, 0), "{v}");
    assert_eq!(v["shape"]["send_ddp_items"], 0);
    let v = call_json(&socket, &["--sink", "--size", "1048576"]);
    assert_eq!(shape(&v), ("RDMA_MSG".into(), 1, 0, 0), "{v}");
    assert_eq!(v["shape"]["send_ddp_items"], 0);
    let stdout = interrupt(&mut server);
    assert!(stdout.contains("stopping (signal)"), "{stdout}");
}
