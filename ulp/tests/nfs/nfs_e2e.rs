//! End to end: MOUNT over TCP (record marking) gives the root handle of a real host
//! directory; NFSv3 then runs over RPC-over-RDMA on the engine's shm provider, through
//! `NfsService`: CREATE, a 1 MiB WRITE from a Read chunk, COMMIT, the READ back into a
//! Write chunk, READDIR of 1000 files through a Reply chunk, RENAME, REMOVE,
//! SYMLINK/READLINK, GETATTR fields, the chunk limits, and the per-procedure counters.

use std::io::Write as _;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use rpcrdma::fabric::shm::{ShmAddr, ShmDevice, ShmProvider};
use rpcrdma::ConnConfig;
use rpcrdma::Pair;
use rpcrdma::{CallRequest, CallStatus, Outcome};
use rpcrdma_pools::HugePages;
use rpcrdma_ulp::client::{inline_call, CallPlan, DdpBufs, OutcomeResults};
use rpcrdma_ulp::ddp::{encode_call, reply_results, XdrCodec};
use rpcrdma_ulp::nfs::mount::{self, DirPath, MountRes3, MOUNT_PROGRAM};
use rpcrdma_ulp::nfs::server::tcp::{read_record, write_record, TcpConfig, TcpServer};
use rpcrdma_ulp::nfs::server::{
    HostFs, MountProgram, MountShared, NfsConfig, NfsProgram, NfsService, NfsShared,
};
use rpcrdma_ulp::nfs::v3::args::*;
use rpcrdma_ulp::nfs::v3::res::*;
use rpcrdma_ulp::nfs::v3::types::*;
use rpcrdma_ulp::nfs::v3::{self, procs};
use rpcrdma_ulp::nfs::NFS_PROGRAM;
use rpcrdma_ulp::program::Dispatcher;
use rpcrdma_ulp::rpc::{CallHeader, OpaqueAuth};

use crate::nfs_support;
use nfs_support::TempDir;

const DEADLINE: Duration = Duration::from_secs(20);
const MIB: usize = 1 << 20;

fn h(prog: u32, procedure: u32, xid: u32) -> CallHeader<'static> {
    CallHeader {
        xid,
        prog,
        vers: 3,
        procedure,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    }
}

struct Server {
    shared: Arc<NfsShared>,
    tcp: TcpServer,
}

fn server(dir: &std::path::Path) -> Server {
    let backend = Arc::new(HostFs::new(dir).unwrap());
    let shared = NfsShared::new(
        backend,
        NfsConfig {
            max_read: MIB as u32,
            max_write: MIB as u32,
            max_readdir: 64 * 1024,
            ..NfsConfig::default()
        },
    );
    let mount = MountShared::new("/export", shared.clone());
    let factory = {
        let (shared, mount) = (shared.clone(), mount.clone());
        Arc::new(move |peer: std::net::SocketAddr| {
            let mut d = Dispatcher::new();
            d.register(Box::new(MountProgram::new(
                mount.clone(),
                peer.ip().to_string(),
            )))
            .unwrap();
            d.register(Box::new(NfsProgram::new(shared.clone())))
                .unwrap();
            d
        })
    };
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp = TcpServer::spawn(l, TcpConfig::default(), factory).unwrap();
    Server { shared, tcp }
}

/// One call over TCP; returns the reply record.
fn tcp_call<'a, A: XdrCodec<'a>>(s: &mut TcpStream, hd: &CallHeader<'_>, args: &A) -> Vec<u8> {
    let mut buf = vec![0u8; 4096];
    let c = encode_call(&mut buf, hd, args, usize::MAX).unwrap();
    // Two fragments, to exercise reassembly: the header, then the arguments.
    let (a, b) = buf[..c.len].split_at(40);
    s.write_all(&(a.len() as u32).to_be_bytes()).unwrap();
    s.write_all(a).unwrap();
    write_record(s, b).unwrap();
    let mut r = Vec::new();
    assert!(read_record(s, 1 << 20, &mut r).unwrap());
    r
}

fn mount_root(tcp: &TcpServer, path: &[u8]) -> Result<Vec<u8>, mount::MountStat3> {
    let mut s = TcpStream::connect(tcp.local_addr()).unwrap();
    let r = tcp_call(
        &mut s,
        &h(MOUNT_PROGRAM, mount::procs::MNT, 7),
        &DirPath(path),
    );
    let (xid, mut c) = reply_results(&r, &[]).unwrap();
    assert_eq!(xid, 7);
    let res = MountRes3::decode(&mut c).unwrap();
    c.finish().unwrap();
    match res {
        MountRes3::Ok {
            fhandle,
            auth_flavors,
        } => {
            assert!(auth_flavors.contains(&1), "AUTH_SYS offered");
            Ok(fhandle.to_vec())
        }
        MountRes3::Fail(s) => Err(s),
    }
}

fn config() -> ConnConfig {
    ConnConfig {
        credits: 8,
        large_buf_size: MIB as u32,
        large_bufs: 8,
        send_bufs: 32,
        queue_len: 32,
        hugepages: HugePages::Never,
        ..ConnConfig::default()
    }
}

fn pair(shared: &Arc<NfsShared>) -> Pair<ShmProvider, NfsService> {
    let cfg = config();
    let svc = NfsService::new(Dispatcher::new(), shared.clone(), cfg.inline_send as usize).unwrap();
    let addr = ShmAddr::abstract_name(format!("rpcrdma-nfs-e2e-{}", std::process::id()));
    Pair::connect(
        &ShmDevice::new(),
        ShmDevice::new(),
        &addr,
        &cfg,
        &cfg,
        svc,
        DEADLINE,
    )
    .expect("pair connects")
}

fn max_reply(procedure: u32, requested: usize, write_chunk: bool) -> u32 {
    v3::proc_info(procedure)
        .unwrap()
        .max_reply_len(requested as u32, write_chunk, 0) as u32
}

fn call(p: &mut Pair<ShmProvider, NfsService>, req: CallRequest) -> Outcome {
    let o = p.call(req, DEADLINE).expect("outcome");
    assert_eq!(o.status, CallStatus::Success);
    o
}

/// An NFS call with inline arguments and no Write chunk.
fn nfs<'a, A: XdrCodec<'a>>(
    p: &mut Pair<ShmProvider, NfsService>,
    procedure: u32,
    args: &A,
    requested: usize,
) -> Outcome {
    let msg = p.requester.alloc_msg().unwrap();
    let req = inline_call(
        msg,
        &h(NFS_PROGRAM, procedure, 0),
        args,
        max_reply(procedure, requested, false),
    )
    .unwrap();
    call(p, req)
}

/// Decodes an outcome's results as `$t` and maps them to owned data with `$f`.
macro_rules! res {
    ($o:expr, $t:ty, $f:expr) => {{
        let r = OutcomeResults::new(&$o);
        let (_, mut c) = r.cursor().unwrap();
        let v = <$t>::decode(&mut c).unwrap();
        c.finish().unwrap();
        $f(v)
    }};
}

fn data(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add((i >> 12) as u8))
        .collect()
}

#[test]
fn nfs3_over_rdma_with_mount_over_tcp() {
    let t = TempDir::new("e2e");
    let srv = server(&t.0);
    // MOUNT over TCP: the export path and a directory below it; nothing else.
    assert_eq!(
        mount_root(&srv.tcp, b"/elsewhere"),
        Err(mount::MountStat3::NOENT)
    );
    assert_eq!(
        mount_root(&srv.tcp, b"/export/../"),
        Err(mount::MountStat3::NOENT)
    );
    let root = mount_root(&srv.tcp, b"/export/").unwrap();
    let mut p = pair(&srv.shared);

    // NULL and GETATTR of the root.
    let o = nfs(&mut p, 0, &rpcrdma_ulp::ddp::Void, 0);
    res!(o, rpcrdma_ulp::ddp::Void, |_| ());
    let o = nfs(&mut p, procs::GETATTR, &NfsFh3(&root), 0);
    let a = res!(o, GetattrRes, |r: GetattrRes| r.ok().unwrap());
    assert_eq!(a.ftype, Ftype3::Dir);
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::metadata(&t.0).unwrap();
    assert_eq!(a.fileid, md.ino());
    assert_eq!(a.mode, md.mode() & 0o7777);

    // CREATE.
    let o = nfs(
        &mut p,
        procs::CREATE,
        &CreateArgs {
            place: DirOpArgs3 {
                dir: NfsFh3(&root),
                name: b"big",
            },
            how: CreateHow3::Guarded(Sattr3 {
                mode: Some(0o600),
                ..Sattr3::default()
            }),
        },
        0,
    );
    let big = res!(o, CreateRes, |r: CreateRes| r
        .ok()
        .unwrap()
        .obj
        .unwrap()
        .0
        .to_vec());

    // WRITE 1 MiB, UNSTABLE, from a Read chunk.
    let payload = data(MIB);
    let mut bufs = DdpBufs::new();
    let mut b = p.requester.alloc_large().unwrap();
    b.fill(&payload).unwrap();
    bufs.push(b).unwrap();
    let mut msg = p.requester.alloc_msg().unwrap();
    let hd = h(NFS_PROGRAM, procs::WRITE, 0);
    let plan = {
        let args = WriteArgs {
            file: NfsFh3(&big),
            offset: 0,
            count: MIB as u32,
            stable: StableHow::Unstable,
            data: bufs.get(0).unwrap().as_slice(),
        };
        CallPlan::new(
            &encode_call(msg.storage_mut(), &hd, &args, 1).unwrap(),
            &bufs,
        )
        .unwrap()
    };
    let req = plan
        .into_request(msg, bufs, max_reply(procs::WRITE, 0, false))
        .unwrap();
    assert_eq!(req.ddp_args.len(), 1, "the data travels in a Read chunk");
    let o = call(&mut p, req);
    let w = res!(o, WriteRes, |r: WriteRes| r.ok().unwrap());
    assert_eq!(w.count, MIB as u32);
    assert_eq!(w.file_wcc.after.unwrap().size, MIB as u64);

    // COMMIT: same verifier as the WRITE.
    let o = nfs(
        &mut p,
        procs::COMMIT,
        &CommitArgs {
            file: NfsFh3(&big),
            offset: 0,
            count: 0,
        },
        0,
    );
    let cv = res!(o, CommitRes, |r: CommitRes| r.ok().unwrap().verf);
    assert_eq!(cv, w.verf);
    assert_eq!(std::fs::read(t.0.join("big")).unwrap(), payload);

    // READ it back into a Write chunk.
    let msg = p.requester.alloc_msg().unwrap();
    let mut req = inline_call(
        msg,
        &h(NFS_PROGRAM, procs::READ, 0),
        &ReadArgs {
            file: NfsFh3(&big),
            offset: 0,
            count: MIB as u32,
        },
        max_reply(procs::READ, MIB, true),
    )
    .unwrap();
    req.push_write_sink(p.requester.alloc_large().unwrap())
        .unwrap();
    let o = call(&mut p, req);
    assert!(o.reply.as_ref().unwrap().len() < 200, "data not inline");
    assert_eq!(o.write_result(0).map(<[u8]>::len), Some(MIB));
    let (n, eof, same) = res!(o, ReadRes, |r: ReadRes| {
        let ok = r.ok().unwrap();
        (ok.count, ok.eof, ok.data == &payload[..])
    });
    assert_eq!((n, eof, same), (MIB as u32, true, true));

    // With a Write chunk offered: past EOF is empty with eof, a forged handle is
    // BADHANDLE; neither puts anything in the chunk.
    for (fh, offset, want) in [
        (big.clone(), 2 * MIB as u64, Nfsstat3::OK),
        (
            {
                let mut x = big.clone();
                x[30] ^= 1;
                x
            },
            0,
            Nfsstat3::BADHANDLE,
        ),
    ] {
        let msg = p.requester.alloc_msg().unwrap();
        let mut req = inline_call(
            msg,
            &h(NFS_PROGRAM, procs::READ, 0),
            &ReadArgs {
                file: NfsFh3(&fh),
                offset,
                count: 4096,
            },
            max_reply(procs::READ, 4096, true),
        )
        .unwrap();
        req.push_write_sink(p.requester.alloc_large().unwrap())
            .unwrap();
        let o = call(&mut p, req);
        assert_eq!(o.write_result(0).map(<[u8]>::len).unwrap_or(0), 0);
        let (st, eof) = res!(o, ReadRes, |r: ReadRes| match r {
            NfsRes::Ok(ok) => (Nfsstat3::OK, ok.eof && ok.count == 0),
            NfsRes::Fail(s, _) => (s, false),
        });
        assert_eq!(st, want);
        assert_eq!(eof, want == Nfsstat3::OK);
    }

    // 1000 files, then READDIR in one call through a Reply chunk.
    let o = nfs(
        &mut p,
        procs::MKDIR,
        &MkdirArgs {
            place: DirOpArgs3 {
                dir: NfsFh3(&root),
                name: b"many",
            },
            attributes: Sattr3::default(),
        },
        0,
    );
    let many = res!(o, CreateRes, |r: CreateRes| r
        .ok()
        .unwrap()
        .obj
        .unwrap()
        .0
        .to_vec());
    for i in 0..1000 {
        let name = format!("f{i:04}");
        let o = nfs(
            &mut p,
            procs::CREATE,
            &CreateArgs {
                place: DirOpArgs3 {
                    dir: NfsFh3(&many),
                    name: name.as_bytes(),
                },
                how: CreateHow3::Unchecked(Sattr3::default()),
            },
            0,
        );
        res!(o, CreateRes, |r: CreateRes| assert_eq!(
            r.status(),
            Nfsstat3::OK
        ));
    }
    let reply_chunks_before = p.requester.stats().reply_chunks;
    let o = nfs(
        &mut p,
        procs::READDIR,
        &ReaddirArgs {
            dir: NfsFh3(&many),
            cookie: 0,
            cookieverf: Verf::default(),
            count: 64 * 1024,
        },
        64 * 1024,
    );
    assert_eq!(p.requester.stats().reply_chunks, reply_chunks_before + 1);
    let (count, eof, first, last) = res!(o, ReaddirRes, |r: ReaddirRes| {
        let ok = r.ok().unwrap();
        (
            ok.entries.len(),
            ok.eof,
            ok.entries[0].name.to_vec(),
            ok.entries.last().unwrap().name.to_vec(),
        )
    });
    assert_eq!((count, eof), (1000, true));
    assert_eq!(
        (first.as_slice(), last.as_slice()),
        (&b"f0000"[..], &b"f0999"[..])
    );

    // READDIRPLUS gives working handles.
    let o = nfs(
        &mut p,
        procs::READDIRPLUS,
        &ReaddirplusArgs {
            dir: NfsFh3(&root),
            cookie: 0,
            cookieverf: Verf::default(),
            dircount: 4096,
            maxcount: 8192,
        },
        8192,
    );
    let fhs: Vec<(Vec<u8>, Vec<u8>)> = res!(o, ReaddirplusRes, |r: ReaddirplusRes| r
        .ok()
        .unwrap()
        .entries
        .iter()
        .map(|e| (e.name.to_vec(), e.name_handle.unwrap().0.to_vec()))
        .collect());
    let (_, big2) = fhs.iter().find(|(n, _)| n == b"big").unwrap();
    assert_eq!(big2, &big);

    // RENAME and REMOVE.
    let o = nfs(
        &mut p,
        procs::RENAME,
        &RenameArgs {
            from: DirOpArgs3 {
                dir: NfsFh3(&many),
                name: b"f0000",
            },
            to: DirOpArgs3 {
                dir: NfsFh3(&root),
                name: b"moved",
            },
        },
        0,
    );
    res!(o, RenameRes, |r: RenameRes| assert_eq!(
        r.status(),
        Nfsstat3::OK
    ));
    assert!(t.0.join("moved").exists() && !t.0.join("many/f0000").exists());
    let o = nfs(
        &mut p,
        procs::REMOVE,
        &DirOpArgs3 {
            dir: NfsFh3(&root),
            name: b"moved",
        },
        0,
    );
    res!(o, RemoveRes, |r: RemoveRes| assert_eq!(
        r.status(),
        Nfsstat3::OK
    ));
    assert!(!t.0.join("moved").exists());

    // SYMLINK (target inline: short) and READLINK into a Write chunk.
    let o = nfs(
        &mut p,
        procs::SYMLINK,
        &SymlinkArgs {
            place: DirOpArgs3 {
                dir: NfsFh3(&root),
                name: b"ln",
            },
            attributes: Sattr3::default(),
            target: b"many/f0001",
        },
        0,
    );
    let ln = res!(o, CreateRes, |r: CreateRes| r
        .ok()
        .unwrap()
        .obj
        .unwrap()
        .0
        .to_vec());
    let msg = p.requester.alloc_msg().unwrap();
    let mut req = inline_call(
        msg,
        &h(NFS_PROGRAM, procs::READLINK, 0),
        &NfsFh3(&ln),
        max_reply(procs::READLINK, 4096, true),
    )
    .unwrap();
    req.push_write_sink(p.requester.alloc_large().unwrap())
        .unwrap();
    let o = call(&mut p, req);
    assert_eq!(o.write_result(0), Some(&b"many/f0001"[..]));
    let target = res!(o, ReadlinkRes, |r: ReadlinkRes| r
        .ok()
        .unwrap()
        .data
        .to_vec());
    assert_eq!(target, b"many/f0001");

    // GETATTR fields of the big file.
    let o = nfs(&mut p, procs::GETATTR, &NfsFh3(&big), 0);
    let a = res!(o, GetattrRes, |r: GetattrRes| r.ok().unwrap());
    let md = std::fs::metadata(t.0.join("big")).unwrap();
    assert_eq!(a.ftype, Ftype3::Reg);
    assert_eq!(a.size, MIB as u64);
    assert_eq!(a.mode, 0o600);
    assert_eq!((a.uid, a.gid, a.nlink), (md.uid(), md.gid(), 1));
    assert_eq!(a.fileid, md.ino());
    assert_eq!(a.mtime.seconds as i64, md.mtime());

    // A forged handle is BADHANDLE and the connection stays up.
    let mut forged = big.clone();
    forged[20] ^= 0xff;
    let o = nfs(&mut p, procs::GETATTR, &NfsFh3(&forged), 0);
    res!(o, GetattrRes, |r: GetattrRes| assert_eq!(
        r.status(),
        Nfsstat3::BADHANDLE
    ));

    // Malformed arguments over RDMA: GARBAGE_ARGS for that call, connection up.
    let mut msg = p.requester.alloc_msg().unwrap();
    let n = h(NFS_PROGRAM, procs::GETATTR, 0)
        .encode(msg.storage_mut())
        .unwrap();
    // A handle length of 100: over NFS3_FHSIZE, and past the message's end.
    msg.storage_mut()[n..n + 4].copy_from_slice(&100u32.to_be_bytes());
    msg.set_len(n + 4).unwrap();
    let o = p
        .call(CallRequest::new(msg, 64), DEADLINE)
        .expect("outcome");
    assert_eq!(
        o.status,
        CallStatus::RpcError(rpcrdma::RpcReplyError::Accepted(4)),
        "GARBAGE_ARGS"
    );

    // Two Write chunks on a READ are past the chunk limit: ERR_CHUNK, connection up.
    let msg = p.requester.alloc_msg().unwrap();
    let mut req = inline_call(
        msg,
        &h(NFS_PROGRAM, procs::READ, 0),
        &ReadArgs {
            file: NfsFh3(&big),
            offset: 0,
            count: 10,
        },
        max_reply(procs::READ, 10, true),
    )
    .unwrap();
    for _ in 0..2 {
        req.push_write_sink(p.requester.alloc_large().unwrap())
            .unwrap();
    }
    let o = p.call(req, DEADLINE).expect("outcome");
    assert_ne!(o.status, CallStatus::Success);
    let o = nfs(&mut p, procs::GETATTR, &NfsFh3(&root), 0);
    res!(o, GetattrRes, |r: GetattrRes| assert_eq!(
        r.status(),
        Nfsstat3::OK
    ));

    // The counters saw which chunks each procedure used.
    let c = &srv.shared.counters;
    let write = c.nfs_proc(procs::WRITE);
    assert_eq!((write.calls, write.read_chunks), (1, 1));
    let read = c.nfs_proc(procs::READ);
    assert_eq!((read.calls, read.write_chunks, read.errors), (3, 1, 1));
    let rd = c.nfs_proc(procs::READDIR);
    assert_eq!((rd.calls, rd.reply_chunks), (1, 1));
    let rl = c.nfs_proc(procs::READLINK);
    assert_eq!(rl.write_chunks, 1);
    assert_eq!(c.nfs_proc(procs::CREATE).calls, 1001);
    assert_eq!(c.nfs_proc(procs::GETATTR).errors, 1);
    assert_eq!(c.chunk_limit.load(std::sync::atomic::Ordering::Relaxed), 1);
    // The 1 MiB READ went from the backend straight into registered memory.
    assert_eq!(
        c.zero_copy_reads.load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    let lines = c.lines().join("\n");
    assert!(
        lines.contains("NFS3 READ 3 calls (1 errors; chunks: read 0, write 1, reply 0)"),
        "{lines}"
    );
    assert!(lines.contains("MOUNT3 MNT 3 calls (2 errors"), "{lines}");
}
