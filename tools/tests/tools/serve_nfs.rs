//! `rpcrdma serve --nfs DIR` as a separate process: MOUNT over TCP gives the root handle
//! of a temporary directory, NFSv3 NULL, GETATTR, LOOKUP and READ (into a Write chunk)
//! run over shm through the engine's requester, a REMOVE retransmitted under its XID is
//! answered from the duplicate request cache, GETATTR also runs over NFS-on-TCP, and the
//! stop lines count the calls per procedure and chunk type, and the replays.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use rpcrdma::fabric::shm::{ShmAddr, ShmDevice, ShmProvider};
use rpcrdma::Requester;
use rpcrdma::{CallRequest, CallStatus, Outcome};
use rpcrdma::{ConnConfig, ConnState};
use rpcrdma_pools::HugePages;
use rpcrdma_ulp::client::{inline_call, OutcomeResults};
use rpcrdma_ulp::ddp::{encode_call, reply_results, Void, XdrCodec};
use rpcrdma_ulp::nfs::mount::{self, DirPath, Exports, MountRes3};
use rpcrdma_ulp::nfs::server::tcp::{read_record, write_record};
use rpcrdma_ulp::nfs::v3::args::ReadArgs;
use rpcrdma_ulp::nfs::v3::res::{GetattrRes, LookupRes, RemoveRes};
use rpcrdma_ulp::nfs::v3::types::{DirOpArgs3, Ftype3, NfsFh3};
use rpcrdma_ulp::nfs::v3::{self, procs};
use rpcrdma_ulp::rpc::{CallHeader, OpaqueAuth};

const DEADLINE: Duration = Duration::from_secs(60);

struct Guard {
    child: Child,
    dir: PathBuf,
    sock: PathBuf,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        let _ = std::fs::remove_file(&self.sock);
    }
}

fn h(prog: u32, procedure: u32) -> CallHeader<'static> {
    CallHeader {
        xid: 0x5eed,
        prog,
        vers: 3,
        procedure,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    }
}

fn tcp_call<'a, A: XdrCodec<'a>>(to: SocketAddr, hd: &CallHeader<'_>, args: &A) -> Vec<u8> {
    let mut s = TcpStream::connect(to).unwrap();
    let mut buf = vec![0u8; 4096];
    let c = encode_call(&mut buf, hd, args, usize::MAX).unwrap();
    write_record(&mut s, &buf[..c.len]).unwrap();
    s.flush().unwrap();
    let mut r = Vec::new();
    assert!(read_record(&mut s, 1 << 20, &mut r).unwrap());
    r
}

/// The address printed after `label` (up to the next `;` or the end of the line).
fn addr_after(line: &str, label: &str) -> SocketAddr {
    let at = line
        .find(label)
        .unwrap_or_else(|| panic!("{label} in {line}"))
        + label.len();
    line[at..]
        .split(';')
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// `rpcrdma serve --provider PROVIDER --addr ADDR --nfs DIR --mount-port 0 EXTRA...
/// --duration 60`, guarded (killed, `dir` and `sock` removed when dropped), and the
/// MOUNT address it prints.
fn spawn_nfs_serve(
    provider: &str,
    addr: &std::ffi::OsStr,
    dir: &std::path::Path,
    sock: PathBuf,
    extra: &[&str],
) -> (Guard, SocketAddr) {
    let child = Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
        .args(["serve", "--provider", provider, "--addr"])
        .arg(addr)
        .arg("--nfs")
        .arg(dir)
        .args(["--mount-port", "0"])
        .args(extra)
        .args(["--duration", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn rpcrdma serve");
    let mut g = Guard {
        child,
        dir: dir.to_path_buf(),
        sock,
    };
    let mut out = BufReader::new(g.child.stdout.take().unwrap());
    let mut line = String::new();
    let mount_at = loop {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "serve ended early");
        if line.contains("MOUNT v3 on tcp") {
            break addr_after(&line, "MOUNT v3 on tcp ");
        }
    };
    (g, mount_at)
}

fn call(conn: &mut Requester<ShmProvider>, req: CallRequest) -> Outcome {
    conn.submit(req, 1).expect("submit");
    let end = Instant::now() + DEADLINE;
    loop {
        conn.poll(Instant::now());
        if let Some(o) = conn.poll_outcome() {
            assert_eq!(o.status, CallStatus::Success);
            return o;
        }
        assert!(Instant::now() < end, "no outcome");
    }
}

#[test]
fn serve_nfs_mount_over_tcp_and_nfs_over_shm() {
    let dir = std::env::temp_dir().join(format!("rpcrdma-serve-nfs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("hello.txt"), b"hello over rdma\n").unwrap();
    std::fs::write(dir.join("gone.txt"), b"removed once\n").unwrap();
    let sock = std::env::temp_dir().join(format!("rpcrdma-serve-nfs-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    let child = Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
        .args(["serve", "--provider", "shm", "--addr"])
        .arg(&sock)
        .arg("--nfs")
        .arg(&dir)
        .args(["--mount-port", "0", "--tcp-port", "0", "--duration", "60"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rpcrdma serve");
    let mut g = Guard {
        child,
        dir: dir.clone(),
        sock: sock.clone(),
    };
    let (tx, rx) = mpsc::channel();
    let out = BufReader::new(g.child.stdout.take().unwrap());
    thread::spawn(move || {
        for l in out.lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let nfs_line = loop {
        let l = rx
            .recv_timeout(DEADLINE)
            .expect("serve prints its NFS line");
        if l.contains("MOUNT v3 on tcp") {
            break l;
        }
    };
    let mount_at = addr_after(&nfs_line, "MOUNT v3 on tcp ");
    let nfs_tcp = addr_after(&nfs_line, "NFSv3 on tcp ");

    // MOUNT over TCP.
    let r = tcp_call(
        mount_at,
        &h(mount::MOUNT_PROGRAM, mount::procs::EXPORT),
        &Void,
    );
    let (_, mut c) = reply_results(&r, &[]).unwrap();
    assert_eq!(Exports::decode(&mut c).unwrap().0[0].dir, b"/");
    let r = tcp_call(
        mount_at,
        &h(mount::MOUNT_PROGRAM, mount::procs::MNT),
        &DirPath(b"/"),
    );
    let (_, mut c) = reply_results(&r, &[]).unwrap();
    let root = match MountRes3::decode(&mut c).unwrap() {
        MountRes3::Ok { fhandle, .. } => fhandle.to_vec(),
        MountRes3::Fail(s) => panic!("MNT: {s:?}"),
    };

    // NFS over shm through the engine.
    let cfg = ConnConfig {
        credits: 4,
        large_buf_size: 1 << 20,
        large_bufs: 4,
        send_bufs: 16,
        queue_len: 16,
        hugepages: HugePages::Never,
        ..ConnConfig::default()
    };
    let mut conn = Requester::<ShmProvider>::connect_with(
        &ShmDevice::new(),
        &ShmAddr::Path(sock.clone()),
        &cfg,
    )
    .expect("connect over shm");
    let end = Instant::now() + DEADLINE;
    while conn.state() != ConnState::Established {
        conn.poll(Instant::now());
        assert!(
            Instant::now() < end,
            "never established: {:?}",
            conn.state()
        );
    }
    let max = |p: u32, n: u32, w: bool| v3::proc_info(p).unwrap().max_reply_len(n, w, 0) as u32;
    let msg = conn.alloc_msg().unwrap();
    let o = call(
        &mut conn,
        inline_call(msg, &h(100_003, 0), &Void, 0).unwrap(),
    );
    assert_eq!(o.reply.as_ref().unwrap().len(), 24, "NULL: header only");
    let msg = conn.alloc_msg().unwrap();
    let req = inline_call(
        msg,
        &h(100_003, procs::GETATTR),
        &NfsFh3(&root),
        max(procs::GETATTR, 0, false),
    );
    let o = call(&mut conn, req.unwrap());
    let r = OutcomeResults::new(&o);
    let (_, mut c) = r.cursor().unwrap();
    let a = GetattrRes::decode(&mut c).unwrap().ok().unwrap();
    assert_eq!(a.ftype, Ftype3::Dir);
    assert_eq!(a.fileid, std::fs::metadata(&dir).unwrap().ino());
    let msg = conn.alloc_msg().unwrap();
    let req = inline_call(
        msg,
        &h(100_003, procs::LOOKUP),
        &DirOpArgs3 {
            dir: NfsFh3(&root),
            name: b"hello.txt",
        },
        max(procs::LOOKUP, 0, false),
    );
    let o = call(&mut conn, req.unwrap());
    let r = OutcomeResults::new(&o);
    let (_, mut c) = r.cursor().unwrap();
    let file = LookupRes::decode(&mut c)
        .unwrap()
        .ok()
        .unwrap()
        .object
        .0
        .to_vec();
    let msg = conn.alloc_msg().unwrap();
    let mut req = inline_call(
        msg,
        &h(100_003, procs::READ),
        &ReadArgs {
            file: NfsFh3(&file),
            offset: 0,
            count: 4096,
        },
        max(procs::READ, 4096, true),
    )
    .unwrap();
    req.push_write_sink(conn.alloc_large().unwrap()).unwrap();
    let o = call(&mut conn, req);
    assert_eq!(o.write_result(0), Some(&b"hello over rdma\n"[..]));

    // REMOVE retransmitted under its XID: the duplicate request cache answers the
    // second with the first reply (NFS3_OK), not NFS3ERR_NOENT.
    let mut removes = Vec::new();
    for _ in 0..2 {
        let msg = conn.alloc_msg().unwrap();
        let req = inline_call(
            msg,
            &h(100_003, procs::REMOVE),
            &DirOpArgs3 {
                dir: NfsFh3(&root),
                name: b"gone.txt",
            },
            max(procs::REMOVE, 0, false),
        )
        .unwrap()
        .with_xid(0x0d0c_0001);
        let o = call(&mut conn, req);
        removes.push(o.reply.as_ref().unwrap().bytes().to_vec());
    }
    assert_eq!(removes[0], removes[1]);
    let (_, mut c) = reply_results(&removes[1], &[]).unwrap();
    assert!(RemoveRes::decode(&mut c).unwrap().ok().is_ok());
    assert!(!dir.join("gone.txt").exists());

    // The built-in programs are still served next to NFS.
    let o = Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
        .args(["call", "--provider", "shm", "--addr"])
        .arg(&sock)
        .args(["--echo", "--size", "5000", "--read-chunk", "--write-chunk"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("echoed 5000 octets match"));

    // `rpcrdma call` names RPC errors from the reply, not by number.
    for (args, want) in [
        (
            &["--prog", "100003", "--vers", "3", "--proc", "99"][..],
            "RPC error PROC_UNAVAIL",
        ),
        (
            &["--prog", "100003", "--vers", "5", "--proc", "0"][..],
            "RPC error PROG_MISMATCH (server speaks versions 3..=4)",
        ),
        (
            &["--prog", "100003", "--vers", "3", "--proc", "1"][..],
            "RPC error GARBAGE_ARGS",
        ),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
            .args(["call", "--provider", "shm", "--addr"])
            .arg(&sock)
            .args(args)
            .output()
            .unwrap();
        assert!(!o.status.success());
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(want), "{args:?}: {e}");
    }

    // GETATTR over NFS-on-TCP too.
    let r = tcp_call(nfs_tcp, &h(100_003, procs::GETATTR), &NfsFh3(&root));
    let (_, mut c) = reply_results(&r, &[]).unwrap();
    assert_eq!(
        GetattrRes::decode(&mut c).unwrap().ok().unwrap().fileid,
        a.fileid
    );
    conn.close();

    // NFSv4.1 beside NFSv3: one session, one READ of the file into a Write chunk.
    let o = Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
        .args(["nfs", "--provider", "shm", "--addr"])
        .arg(&sock)
        .args(["--vers", "4.1", "--export", "/", "get", "hello.txt", "-"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.stdout, b"hello over rdma\n");

    // SIGINT: the stop lines count calls per procedure and chunk type.
    // SAFETY: signalling our own child.
    unsafe { libc::kill(g.child.id() as i32, libc::SIGINT) };
    let mut lines = Vec::new();
    let end = Instant::now() + DEADLINE;
    while let Ok(l) = rx.recv_timeout(end.saturating_duration_since(Instant::now())) {
        lines.push(l);
    }
    let status = g.child.wait().unwrap();
    assert!(status.success(), "{status:?}\n{}", lines.join("\n"));
    let all = lines.join("\n");
    assert!(
        all.contains("nfs: NFS3 GETATTR 2 calls (0 errors; chunks: read 0, write 0, reply 0)"),
        "{all}"
    );
    assert!(
        all.contains("nfs: NFS3 READ 1 calls (0 errors; chunks: read 0, write 1, reply 0)"),
        "{all}"
    );
    assert!(all.contains("nfs: MOUNT3 MNT 1 calls"), "{all}");
    assert!(all.contains("nfs: MOUNT3 EXPORT 1 calls"), "{all}");
    assert!(all.contains("nfs: NFS3 REMOVE 1 calls (0 errors"), "{all}");
    assert!(all.contains("nfs: NFS4 COMPOUND "), "{all}");
    assert!(
        all.contains("nfs: NFS4 EXCHANGE_ID 1 calls (0 errors"),
        "{all}"
    );
    assert!(
        all.contains("nfs: NFS4 CREATE_SESSION 1 calls (0 errors"),
        "{all}"
    );
    assert!(
        all.contains("nfs: NFS4 READ 1 calls (0 errors; chunks: read 0, write 1, reply 0)"),
        "{all}"
    );
    assert!(
        all.contains("nfs: duplicate request cache: 1 replayed, 0 dropped in progress, 1 inserted"),
        "{all}"
    );
}

#[test]
fn serve_nfs_argument_errors() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
            .args(args)
            .output()
            .expect("run rpcrdma")
    };
    // NFS-only options without --nfs.
    let o = run(&[
        "serve",
        "--provider",
        "shm",
        "--addr",
        "@nfs-args",
        "--tcp-port",
        "0",
    ]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("need --nfs DIR or --nfs-mem"), "{e}");
    // Both stores.
    let o = run(&[
        "serve",
        "--provider",
        "shm",
        "--addr",
        "@nfs-args",
        "--nfs",
        "/",
        "--nfs-mem",
    ]);
    assert_eq!(o.status.code(), Some(2), "a usage error");
    // A relative export path.
    let o = run(&[
        "serve",
        "--provider",
        "shm",
        "--addr",
        "@nfs-args",
        "--nfs-mem",
        "--export-path",
        "x",
    ]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("--export-path"));
    assert!(!o.status.success());
    // A directory that does not exist: named, before anything listens.
    let o = run(&[
        "serve",
        "--provider",
        "shm",
        "--addr",
        "@nfs-args",
        "--nfs",
        "/nonexistent/rpcrdma-nfs",
        "--mount-port",
        "0",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("/nonexistent/rpcrdma-nfs"), "{e}");
}

/// `rpcrdma nfs` against `rpcrdma serve --nfs`, both as processes over shm: put, ls, get
/// (compared octet by octet), and errors named by their NFS and MOUNT statuses.
#[test]
fn nfs_client_put_ls_get_against_serve() {
    let dir = std::env::temp_dir().join(format!("rpcrdma-nfs-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    let sock = std::env::temp_dir().join(format!("rpcrdma-nfs-cli-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    let (_g, mount_at) = spawn_nfs_serve(
        "shm",
        sock.as_os_str(),
        &dir,
        sock.clone(),
        &["--export-path", "/data"],
    );
    let port = mount_at.port().to_string();
    let nfs = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
            .args(["nfs", "--provider", "shm", "--addr"])
            .arg(&sock)
            .args(["--mount-port", &port, "--export", "/data"])
            .args(args)
            .output()
            .expect("run rpcrdma nfs")
    };
    // 3 MiB and a bit: several WRITEs and READs of up to 1 MiB each.
    let data: Vec<u8> = (0..3 * 1024 * 1024 + 12345u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let local = dir.with_extension("src");
    std::fs::write(&local, &data).unwrap();
    let o = nfs(&["put", local.to_str().unwrap(), "sub/big.bin"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(dir.join("sub/big.bin")).unwrap(), data);
    let o = nfs(&["ls", "sub"]);
    assert!(o.status.success());
    let ls = String::from_utf8_lossy(&o.stdout);
    assert!(ls.contains(&format!("{} big.bin", data.len())), "{ls}");
    assert!(ls.starts_with("-0644"), "{ls}");
    let back = dir.with_extension("back");
    let o = nfs(&["get", "sub/big.bin", back.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        std::fs::read(&back).unwrap() == data,
        "get returns what put sent"
    );
    let _ = std::fs::remove_file(&local);
    let _ = std::fs::remove_file(&back);
    // Errors name their status.
    let o = nfs(&["get", "sub/missing", "-"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("NFS3ERR_NOENT"));
    let o = Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
        .args(["nfs", "--provider", "shm", "--addr"])
        .arg(&sock)
        .args(["--mount-port", &port, "--export", "/elsewhere", "ls"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("MNT3ERR_NOENT"));
    let o = nfs(&["put", "/nonexistent-local-file", "x"]);
    assert!(!o.status.success());
    // NFSv4.1 on the same server and connection type: the export is the root of the
    // NFSv4 namespace. put, ls and get through a session, READs into Write chunks.
    let nfs4 = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
            .args(["nfs", "--provider", "shm", "--addr"])
            .arg(&sock)
            .args(["--vers", "4.1", "--export", "/"])
            .args(args)
            .output()
            .expect("run rpcrdma nfs --vers 4.1")
    };
    let small = dir.with_extension("src4");
    let data4: Vec<u8> = (0..1_500_000u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(&small, &data4).unwrap();
    let o = nfs4(&["put", small.to_str().unwrap(), "sub/v4.bin"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(dir.join("sub/v4.bin")).unwrap(), data4);
    let o = nfs4(&["ls", "sub"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ls = String::from_utf8_lossy(&o.stdout);
    assert!(ls.contains(&format!("{} v4.bin", data4.len())), "{ls}");
    assert!(ls.contains(" big.bin"), "{ls}");
    let back4 = dir.with_extension("back4");
    let o = nfs4(&["get", "sub/v4.bin", back4.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read(&back4).unwrap() == data4);
    let o = nfs4(&["get", "sub/missing", "-"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("NFS4ERR_NOENT"));
    let _ = std::fs::remove_file(&small);
    let _ = std::fs::remove_file(&back4);
    let o = nfs(&["--vers", "4.2", "ls"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("(3, 4.1)"));
    // bench: pipelined READs into Write chunks and WRITEs from Read chunks.
    for op in ["read", "write"] {
        let o = nfs(&[
            "bench",
            "--op",
            op,
            "--size",
            "65536",
            "--depth",
            "4",
            "--duration",
            "0.5",
            "--file",
            "sub/bench.dat",
            "--json",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["op"], op);
        assert!(v["ops"].as_u64().unwrap() > 0);
        let lat = v["latency_us"].as_array().unwrap();
        assert!(lat[0].as_f64().unwrap() > 0.0 && lat[0].as_f64() <= lat[4].as_f64());
        assert!(v["gb_per_sec"].as_f64().unwrap() > 0.0);
    }
    assert_eq!(
        std::fs::metadata(dir.join("sub/bench.dat")).unwrap().len(),
        64 * 65536
    );
}

/// The NFSv3 client library against `rpcrdma serve --nfs`: its calls carry the client's
/// own XIDs (counted up), and a READDIRPLUS whose reply outgrows the room first offered
/// (no Reply chunk) is refused with ERR_CHUNK and resent once with a Reply chunk when
/// the client offers no extensions; with them, the server provides a Read chunk instead
/// and nothing is resent.
#[test]
fn nfs_client_keeps_its_xids_and_recovers_from_a_reply_that_did_not_fit() {
    use rpcrdma_ulp::nfs::client::{mount, Nfs3Client};
    let dir = std::env::temp_dir().join(format!("rpcrdma-nfs-xid-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("many")).unwrap();
    for i in 0..200 {
        std::fs::write(
            dir.join(format!("many/file-with-a-longish-name-{i:04}")),
            b"x",
        )
        .unwrap();
    }
    let sock = std::env::temp_dir().join(format!("rpcrdma-nfs-xid-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    let (g, mount_at) = spawn_nfs_serve("shm", sock.as_os_str(), &dir, sock.clone(), &[]);
    let root = mount(mount_at, "/", DEADLINE).expect("MNT");
    // Plain version 1: a reply that fits nothing offered gets ERR_CHUNK.
    let cfg = ConnConfig {
        hugepages: HugePages::Never,
        extensions: false,
        ..ConnConfig::default()
    };
    let mut c = Nfs3Client::<ShmProvider>::connect(
        &ShmDevice::new(),
        &ShmAddr::Path(sock.clone()),
        &cfg,
        root.clone(),
        DEADLINE,
    )
    .expect("connect");
    let x0 = c.last_xid();
    c.getattr(&root).expect("GETATTR");
    assert_eq!(c.last_xid(), x0.wrapping_add(1), "one call, the next XID");
    let many = c.lookup(&root, b"many").expect("LOOKUP");
    assert_eq!(c.last_xid(), x0.wrapping_add(2));

    // First without a guess: the bound is offered and nothing is resent.
    let listed = c.list(&many).expect("READDIRPLUS");
    let files = |l: &[rpcrdma_ulp::nfs::client::Listed]| {
        l.iter().filter(|e| e.name.starts_with(b"file-")).count()
    };
    assert_eq!(files(&listed), 200);
    assert_eq!(c.reply_retries(), 0);
    // With 1 KiB guessed, every page of this directory is refused once and resent.
    c.set_reply_guess(Some(1024));
    let before = c.last_xid();
    let listed = c.list(&many).expect("READDIRPLUS after ERR_CHUNK");
    assert_eq!(files(&listed), 200, "the resent calls list everything");
    let retries = c.reply_retries();
    assert!(retries >= 1, "the first page did not fit 1 KiB");
    assert!(
        c.last_xid().wrapping_sub(before) as u64 >= 2 * retries,
        "each resend took a new XID"
    );
    // Small replies fit the guess and are not resent.
    c.getattr(&root).expect("GETATTR");
    assert_eq!(c.reply_retries(), retries);
    drop(c);
    // With extensions (the default) the same guess costs nothing: every page that
    // outgrows it comes in a Read chunk the server provides.
    let cfg = ConnConfig {
        extensions: true,
        ..cfg
    };
    let mut c = Nfs3Client::<ShmProvider>::connect(
        &ShmDevice::new(),
        &ShmAddr::Path(sock.clone()),
        &cfg,
        root.clone(),
        DEADLINE,
    )
    .expect("connect");
    c.set_reply_guess(Some(1024));
    let listed = c.list(&many).expect("READDIRPLUS through Read chunks");
    assert_eq!(files(&listed), 200);
    assert_eq!(c.reply_retries(), 0, "nothing resent");
    drop(c);
    drop(g);
}

/// `rpcrdma nfs --provider siw --siw-no-confirm` (no zero-length confirmation Reads, as
/// Linux siw peers need) against `rpcrdma serve --nfs --provider siw`: put, ls and get
/// of a file that takes several WRITEs and READs.
#[test]
fn nfs_client_over_siw_without_confirmation_reads() {
    let dir = std::env::temp_dir().join(format!("rpcrdma-nfs-siw-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let addr = format!("127.0.0.1:{port}");
    let (_g, mount_at) =
        spawn_nfs_serve("siw", addr.as_ref(), &dir, dir.with_extension("none"), &[]);
    let mport = mount_at.port().to_string();
    let nfs = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
            .args([
                "nfs",
                "--provider",
                "siw",
                "--siw-no-confirm",
                "--addr",
                &addr,
            ])
            .args(["--mount-port", &mport])
            .args(args)
            .output()
            .expect("run rpcrdma nfs")
    };
    let data: Vec<u8> = (0..2 * 1024 * 1024 + 999u32)
        .map(|i| (i.wrapping_mul(2_246_822_519) >> 11) as u8)
        .collect();
    let local = dir.with_extension("src");
    std::fs::write(&local, &data).unwrap();
    let o = nfs(&["put", local.to_str().unwrap(), "f.bin"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(dir.join("f.bin")).unwrap(), data);
    let o = nfs(&["ls"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("{} f.bin", data.len())));
    let back = dir.with_extension("back");
    let o = nfs(&["get", "f.bin", back.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        std::fs::read(&back).unwrap() == data,
        "get returns what put sent"
    );
    let _ = std::fs::remove_file(&local);
    let _ = std::fs::remove_file(&back);
}

/// The NFSv3 client keeps going through lost connections: over a shm device that drops
/// connections and aborts them at random (`fabric::faulty`, client side), against
/// `rpcrdma serve --nfs`, it reconnects and sends each lost call again under its XID
/// (the server's reply cache answers a retransmission of a call it ran); every file
/// written reads back exactly, and no operation fails.
#[test]
fn nfs_client_reconnects_and_retransmits_through_lost_connections() {
    use rpcrdma::fabric::faulty::{FaultConfig, Faulty, FaultyDevice};
    use rpcrdma_ulp::nfs::client::{mount, Nfs3Client};
    let dir = std::env::temp_dir().join(format!("rpcrdma-nfs-rc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = std::env::temp_dir().join(format!("rpcrdma-nfs-rc-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    let (g, mount_at) = spawn_nfs_serve("shm", sock.as_os_str(), &dir, sock.clone(), &[]);
    let root = mount(mount_at, "/", DEADLINE).expect("MNT");
    // The NFS client's own policy, with a larger send budget: faults come much faster
    // here (about one send in 35) than on any real network.
    let cfg = ConnConfig {
        hugepages: HugePages::Never,
        reconnect: Some(rpcrdma::Reconnect {
            max_sends: 50,
            server_has_drc: true,
            ..rpcrdma::Reconnect::default()
        }),
        ..ConnConfig::default()
    };
    let dev = FaultyDevice::<ShmProvider>::new(
        ShmDevice::new(),
        FaultConfig {
            seed: 0x0ef5,
            disconnect_ppm: 20_000,
            abort_ppm: 5_000,
            post_failure_ppm: 5_000,
            ..FaultConfig::default()
        },
    );
    let mut c = Nfs3Client::<Faulty<ShmProvider>>::connect(
        &dev,
        &ShmAddr::Path(sock.clone()),
        &cfg,
        root.clone(),
        DEADLINE,
    )
    .expect("connect");
    let mut written = Vec::new();
    for i in 0..120u32 {
        let name = format!("f{i:03}");
        let data: Vec<u8> = (0..(i * 97 % 9000 + 1)).map(|j| (j ^ i) as u8).collect();
        let fh = c
            .put(&root, name.as_bytes(), &data)
            .unwrap_or_else(|e| panic!("put {name}: {e} ({:?})", c.reconnect_stats()));
        written.push((fh, data));
    }
    for (i, (fh, data)) in written.iter().enumerate() {
        let mut got = Vec::new();
        c.get(fh, &mut got)
            .unwrap_or_else(|e| panic!("get f{i:03}: {e}"));
        assert_eq!(&got, data, "f{i:03} reads back as written");
        assert_eq!(
            std::fs::read(dir.join(format!("f{i:03}"))).unwrap(),
            *data,
            "and the server's file holds it"
        );
    }
    let s = c.reconnect_stats().expect("reconnecting by default");
    let f = dev.counters();
    eprintln!("{s:?} {f:?}");
    assert!(
        f.disconnects + f.aborts + f.posts_refused > 3,
        "faults happened: {f:?}"
    );
    assert!(s.reconnects > 3, "connections were remade: {s:?}");
    assert!(s.retransmitted > 0, "lost calls were sent again: {s:?}");
    assert_eq!(s.gave_up + s.not_retransmitted, 0, "{s:?}");
    drop(c);
    drop(g);
}

/// `rpcrdma serve --nfs --cores 0,1` (poll groups) calls its NFSv4.1 clients back as the
/// single-thread server does: `rpcrdma nfs hold` gets a read delegation (granted only
/// once its backchannel answered CB_NULL), a second client's `put` of the file makes
/// the server recall it (CB_RECALL over the holder's backchannel), the holder returns
/// it, and `rpcrdma stats` counts CB_NULL and CB_RECALL sent and answered.
#[test]
fn serve_cores_calls_nfs41_clients_back_and_recalls_a_delegation() {
    let tag = format!("rpcrdma-nfs-cores-{}", std::process::id());
    let dir = std::env::temp_dir().join(&tag);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("h.txt"), b"before").unwrap();
    let sock = std::env::temp_dir().join(format!("{tag}.sock"));
    let _ = std::fs::remove_file(&sock);
    let (g, _) = spawn_nfs_serve(
        "shm",
        sock.as_os_str(),
        &dir,
        sock.clone(),
        &["--cores", "0,1"],
    );
    let nfs4 = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_rpcrdma"));
        c.args(["nfs", "--provider", "shm", "--addr"])
            .arg(&sock)
            .args(["--vers", "4.1", "--export", "/"]);
        c
    };
    let mut holder = nfs4()
        .args(["hold", "h.txt", "--seconds", "50"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rpcrdma nfs hold");
    let mut err = BufReader::new(holder.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "hold ended early: {seen}"
        );
        seen.push_str(&line);
        if line.contains("hold h.txt: delegation") {
            assert!(line.contains("delegation granted"), "{seen}");
            break;
        }
    }
    let local = dir.with_extension("src");
    std::fs::write(&local, b"after").unwrap();
    let o = nfs4()
        .args(["put", local.to_str().unwrap(), "h.txt"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::read(dir.join("h.txt")).unwrap(), b"after");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    assert!(holder.wait().unwrap().success(), "{seen}{rest}");
    assert!(rest.contains("recalled 1 returned 1"), "{seen}{rest}");
    let _ = std::fs::remove_file(&local);
    // The watching thread publishes a few times a second: read the counters until the
    // recall's answer shows (the assertions below say what was missing after 10 s).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let v = loop {
        let out = Command::new(env!("CARGO_BIN_EXE_rpcrdma"))
            .args(["stats", &g.child.id().to_string(), "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        if v["cb_recall_answered"].as_u64() >= Some(1) || std::time::Instant::now() > deadline {
            break v;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert_eq!(v["groups"].as_array().map(Vec::len), Some(2), "{v}");
    // Both clients' backchannels were probed; the recall went out and was answered.
    assert_eq!(
        (v["cb_null_sent"].as_u64(), v["cb_null_answered"].as_u64()),
        (Some(2), Some(2)),
        "{v}"
    );
    assert_eq!(
        (
            v["cb_recall_sent"].as_u64(),
            v["cb_recall_answered"].as_u64()
        ),
        (Some(1), Some(1)),
        "{v}"
    );
}
