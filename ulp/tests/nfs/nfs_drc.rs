//! The duplicate request cache in the NFS server, end to end: NFSv3 calls sent twice
//! with the same XID over RPC-over-RDMA (shm) get the first reply again instead of
//! running twice; a different call under the same XID runs; idempotent calls are not
//! cached; and over TCP, a retransmission arriving on a second connection while the
//! original still runs is dropped, then answered from the cache.

use std::io::Write as _;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rpcrdma::fabric::shm::{ShmAddr, ShmDevice, ShmProvider};
use rpcrdma::ConnConfig;
use rpcrdma::Pair;
use rpcrdma::{CallStatus, Outcome};
use rpcrdma_pools::HugePages;
use rpcrdma_ulp::client::{inline_call, CallPlan, DdpBufs};
use rpcrdma_ulp::ddp::{encode_call, reply_results, XdrCodec};
use rpcrdma_ulp::nfs::server::tcp::{read_record, write_record, TcpConfig, TcpServer};
use rpcrdma_ulp::nfs::server::{
    CreateMode, DirEntry, FileKey, FsLimits, FsSpace, MemFs, NfsBackend, NfsConfig, NfsProgram,
    NfsService, NfsShared, ReadDone, WriteDone,
};
use rpcrdma_ulp::nfs::v3::args::*;
use rpcrdma_ulp::nfs::v3::res::*;
use rpcrdma_ulp::nfs::v3::types::*;
use rpcrdma_ulp::nfs::v3::{self, procs};
use rpcrdma_ulp::nfs::NFS_PROGRAM;
use rpcrdma_ulp::program::{Dispatcher, Drc, DrcStats};
use rpcrdma_ulp::rpc::{AuthSys, CallHeader, Gids, OpaqueAuth};

const DEADLINE: Duration = Duration::from_secs(20);

/// An AUTH_SYS caller, as a real client sends.
fn h(procedure: u32, xid: u32) -> CallHeader<'static> {
    CallHeader {
        xid,
        prog: NFS_PROGRAM,
        vers: 3,
        procedure,
        cred: OpaqueAuth::Sys(AuthSys {
            stamp: 1,
            machinename: b"drc-client",
            uid: 1000,
            gid: 1000,
            gids: Gids::EMPTY,
        }),
        verf: OpaqueAuth::None,
    }
}

fn config() -> ConnConfig {
    ConnConfig {
        credits: 8,
        large_buf_size: 64 * 1024,
        large_bufs: 8,
        send_bufs: 32,
        queue_len: 32,
        hugepages: HugePages::Never,
        ..ConnConfig::default()
    }
}

fn pair(shared: &Arc<NfsShared>) -> Pair<ShmProvider, NfsService> {
    static N: AtomicU64 = AtomicU64::new(0);
    let cfg = config();
    let svc = NfsService::new(Dispatcher::new(), shared.clone(), cfg.inline_send as usize).unwrap();
    let addr = ShmAddr::abstract_name(format!(
        "rpcrdma-nfs-drc-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
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

fn drc(shared: &NfsShared) -> &Drc {
    shared
        .reply_cache()
        .expect("the NFS server keeps a DRC by default")
}

fn stats(shared: &NfsShared) -> DrcStats {
    drc(shared).stats()
}

/// An NFS call with inline arguments and the caller's XID.
fn nfs<'a, A: XdrCodec<'a>>(
    p: &mut Pair<ShmProvider, NfsService>,
    procedure: u32,
    args: &A,
    xid: u32,
) -> Outcome {
    let msg = p.requester.alloc_msg().unwrap();
    let max = v3::proc_info(procedure).unwrap().max_reply_len(0, false, 0) as u32;
    let req = inline_call(msg, &h(procedure, xid), args, max)
        .unwrap()
        .with_xid(xid);
    let o = p.call(req, DEADLINE).expect("outcome");
    assert_eq!(o.status, CallStatus::Success);
    assert_eq!(o.xid, xid);
    o
}

/// The reply message, as it came off the wire.
fn bytes(o: &Outcome) -> Vec<u8> {
    o.reply.as_ref().expect("a reply").bytes().to_vec()
}

/// The results of a reply that used no Write chunk.
fn decode<'a, T: XdrCodec<'a>>(o: &'a Outcome) -> T {
    let reply = o.reply.as_ref().expect("a reply").bytes();
    let (_, mut c) = reply_results(reply, &[]).unwrap();
    let v = T::decode(&mut c).unwrap();
    c.finish().unwrap();
    v
}

fn create_args<'a>(dir: &'a [u8], name: &'a [u8]) -> CreateArgs<'a> {
    CreateArgs {
        place: DirOpArgs3 {
            dir: NfsFh3(dir),
            name,
        },
        how: CreateHow3::Guarded(Sattr3 {
            mode: Some(0o644),
            ..Sattr3::default()
        }),
    }
}

fn dirop<'a>(dir: &'a [u8], name: &'a [u8]) -> DirOpArgs3<'a> {
    DirOpArgs3 {
        dir: NfsFh3(dir),
        name,
    }
}

/// WRITE `data` at 0 with the data in a Read chunk, under `xid`.
fn write_from_chunk(
    p: &mut Pair<ShmProvider, NfsService>,
    file: &[u8],
    data: &[u8],
    xid: u32,
) -> Outcome {
    let mut bufs = DdpBufs::new();
    let mut b = p.requester.alloc_large().unwrap();
    b.fill(data).unwrap();
    bufs.push(b).unwrap();
    let mut msg = p.requester.alloc_msg().unwrap();
    let plan = {
        let args = WriteArgs {
            file: NfsFh3(file),
            offset: 0,
            count: data.len() as u32,
            stable: StableHow::FileSync,
            data: bufs.get(0).unwrap().as_slice(),
        };
        CallPlan::new(
            &encode_call(msg.storage_mut(), &h(procs::WRITE, xid), &args, 1).unwrap(),
            &bufs,
        )
        .unwrap()
    };
    let max = v3::proc_info(procs::WRITE)
        .unwrap()
        .max_reply_len(0, false, 0) as u32;
    let req = plan.into_request(msg, bufs, max).unwrap().with_xid(xid);
    assert_eq!(req.ddp_args.len(), 1, "the data travels in a Read chunk");
    let o = p.call(req, DEADLINE).expect("outcome");
    assert_eq!(o.status, CallStatus::Success);
    o
}

#[test]
fn retransmitted_nfs3_calls_over_rdma_get_the_first_reply() {
    let shared = NfsShared::new(Arc::new(MemFs::default()), NfsConfig::default());
    let root = shared.root_handle().as_bytes().to_vec();
    let mut p = pair(&shared);

    // CREATE (GUARDED), then the same call again: run twice it would be NFS3ERR_EXIST.
    let first = nfs(&mut p, procs::CREATE, &create_args(&root, b"a"), 0x1000);
    assert!(decode::<CreateRes>(&first).ok().is_ok(), "created");
    let again = nfs(&mut p, procs::CREATE, &create_args(&root, b"a"), 0x1000);
    assert_eq!(
        bytes(&again),
        bytes(&first),
        "the cached reply, byte for byte"
    );
    let s = stats(&shared);
    assert_eq!((s.hits, s.insertions), (1, 1), "{s:?}");
    assert_eq!(shared.counters.nfs_proc(procs::CREATE).calls, 1, "run once");

    // REMOVE twice with one XID: the second is not NFS3ERR_NOENT.
    let first = nfs(&mut p, procs::REMOVE, &dirop(&root, b"a"), 0x1001);
    assert!(decode::<RemoveRes>(&first).ok().is_ok(), "removed");
    let again = nfs(&mut p, procs::REMOVE, &dirop(&root, b"a"), 0x1001);
    assert_eq!(bytes(&again), bytes(&first));
    assert!(decode::<RemoveRes>(&again).ok().is_ok());
    assert_eq!(stats(&shared).hits, 2);

    // The same XID for a different call (another name): it runs, and is not a hit.
    let other = nfs(&mut p, procs::REMOVE, &dirop(&root, b"b"), 0x1001);
    assert_eq!(
        decode::<RemoveRes>(&other).ok().map(|_| ()),
        Err(Nfsstat3::NOENT),
        "executed, not replayed"
    );
    let s = stats(&shared);
    assert_eq!((s.hits, s.checksum_misses), (2, 1), "{s:?}");
    assert_eq!(shared.counters.nfs_proc(procs::REMOVE).calls, 2);

    // Idempotent procedures are not cached: GETATTR twice under one XID runs twice.
    let before = stats(&shared).insertions;
    for _ in 0..2 {
        let o = nfs(&mut p, procs::GETATTR, &NfsFh3(&root), 0x1002);
        assert!(decode::<GetattrRes>(&o).ok().is_ok());
    }
    assert_eq!(stats(&shared).insertions, before);
    assert_eq!(shared.counters.nfs_proc(procs::GETATTR).calls, 2);

    // WRITE from a Read chunk: the chunk's data is part of the key. The same data under
    // the same XID is a hit; other data under that XID runs.
    let o = nfs(&mut p, procs::CREATE, &create_args(&root, b"w"), 0x1004);
    let file = decode::<CreateRes>(&o)
        .ok()
        .expect("created")
        .obj
        .expect("a handle")
        .0
        .to_vec();
    let w1 = write_from_chunk(&mut p, &file, b"first data", 0x1003);
    assert_eq!(decode::<WriteRes>(&w1).ok().expect("written").count, 10);
    let w2 = write_from_chunk(&mut p, &file, b"first data", 0x1003);
    assert_eq!(bytes(&w2), bytes(&w1));
    let s = stats(&shared);
    assert_eq!((s.hits, s.checksum_misses), (3, 1), "{s:?}");
    let w3 = write_from_chunk(&mut p, &file, b"other data", 0x1003);
    assert_eq!(decode::<WriteRes>(&w3).ok().expect("written").count, 10);
    let s = stats(&shared);
    assert_eq!((s.hits, s.checksum_misses), (3, 2), "{s:?}");
    assert_eq!(shared.counters.nfs_proc(procs::WRITE).calls, 2);
    let key = shared.open(&file).unwrap();
    let mut buf = [0u8; 32];
    let n = shared.backend().read(key, 0, &mut buf).unwrap().len;
    assert_eq!(&buf[..n], b"other data");
}

#[test]
fn without_a_cache_a_retransmission_runs_again() {
    let shared = NfsShared::new(
        Arc::new(MemFs::default()),
        NfsConfig {
            reply_cache: None,
            ..NfsConfig::default()
        },
    );
    assert!(shared.reply_cache().is_none());
    let root = shared.root_handle().as_bytes().to_vec();
    let mut p = pair(&shared);
    let first = nfs(&mut p, procs::CREATE, &create_args(&root, b"a"), 0x2000);
    assert!(decode::<CreateRes>(&first).ok().is_ok());
    let again = nfs(&mut p, procs::CREATE, &create_args(&root, b"a"), 0x2000);
    assert_eq!(
        decode::<CreateRes>(&again).ok().map(|_| ()),
        Err(Nfsstat3::EXIST)
    );
}

/// MemFs whose CREATE of `slow` waits until the test opens the gate, so that a
/// retransmission can arrive while the original runs.
struct Gated {
    fs: MemFs,
    /// (CREATE of `slow` has started, the gate is open)
    state: Mutex<(bool, bool)>,
    cv: Condvar,
}

impl Gated {
    fn wait_started(&self) {
        let g = self.state.lock().unwrap();
        let (g, t) = self.cv.wait_timeout_while(g, DEADLINE, |s| !s.0).unwrap();
        assert!(!t.timed_out() && g.0, "CREATE never started");
    }

    fn open(&self) {
        self.state.lock().unwrap().1 = true;
        self.cv.notify_all();
    }
}

impl NfsBackend for Gated {
    fn root(&self) -> FileKey {
        self.fs.root()
    }
    fn fsid(&self) -> u64 {
        self.fs.fsid()
    }
    fn limits(&self) -> FsLimits {
        self.fs.limits()
    }
    fn getattr(&self, f: FileKey) -> Result<Fattr3, Nfsstat3> {
        self.fs.getattr(f)
    }
    fn setattr(&self, f: FileKey, a: &Sattr3) -> Result<Fattr3, Nfsstat3> {
        self.fs.setattr(f, a)
    }
    fn lookup(&self, d: FileKey, n: &[u8]) -> Result<FileKey, Nfsstat3> {
        self.fs.lookup(d, n)
    }
    fn readlink(&self, l: FileKey, out: &mut Vec<u8>) -> Result<(), Nfsstat3> {
        self.fs.readlink(l, out)
    }
    fn read(&self, f: FileKey, off: u64, buf: &mut [u8]) -> Result<ReadDone, Nfsstat3> {
        self.fs.read(f, off, buf)
    }
    fn write(
        &self,
        f: FileKey,
        off: u64,
        data: &[u8],
        stable: StableHow,
    ) -> Result<WriteDone, Nfsstat3> {
        self.fs.write(f, off, data, stable)
    }
    fn create(
        &self,
        d: FileKey,
        name: &[u8],
        mode: CreateMode,
        a: &Sattr3,
    ) -> Result<FileKey, Nfsstat3> {
        if name == b"slow" {
            let mut g = self.state.lock().unwrap();
            g.0 = true;
            self.cv.notify_all();
            let (g, t) = self.cv.wait_timeout_while(g, DEADLINE, |s| !s.1).unwrap();
            drop(g);
            if t.timed_out() {
                return Err(Nfsstat3::JUKEBOX);
            }
        }
        self.fs.create(d, name, mode, a)
    }
    fn mkdir(&self, d: FileKey, n: &[u8], a: &Sattr3) -> Result<FileKey, Nfsstat3> {
        self.fs.mkdir(d, n, a)
    }
    fn symlink(&self, d: FileKey, n: &[u8], t: &[u8], a: &Sattr3) -> Result<FileKey, Nfsstat3> {
        self.fs.symlink(d, n, t, a)
    }
    fn mknod(&self, d: FileKey, n: &[u8], what: &MknodData) -> Result<FileKey, Nfsstat3> {
        self.fs.mknod(d, n, what)
    }
    fn remove(&self, d: FileKey, n: &[u8]) -> Result<(), Nfsstat3> {
        self.fs.remove(d, n)
    }
    fn rmdir(&self, d: FileKey, n: &[u8]) -> Result<(), Nfsstat3> {
        self.fs.rmdir(d, n)
    }
    fn rename(&self, fd: FileKey, f: &[u8], td: FileKey, t: &[u8]) -> Result<(), Nfsstat3> {
        self.fs.rename(fd, f, td, t)
    }
    fn link(&self, f: FileKey, d: FileKey, n: &[u8]) -> Result<(), Nfsstat3> {
        self.fs.link(f, d, n)
    }
    fn readdir(
        &self,
        d: FileKey,
        cookie: u64,
        max: usize,
        out: &mut Vec<DirEntry>,
    ) -> Result<bool, Nfsstat3> {
        self.fs.readdir(d, cookie, max, out)
    }
    fn cookieverf(&self, d: FileKey) -> Result<Verf, Nfsstat3> {
        self.fs.cookieverf(d)
    }
    fn fsstat(&self, f: FileKey) -> Result<FsSpace, Nfsstat3> {
        self.fs.fsstat(f)
    }
    fn commit(&self, f: FileKey) -> Result<(), Nfsstat3> {
        self.fs.commit(f)
    }
    fn write_verifier(&self) -> Verf {
        self.fs.write_verifier()
    }
}

fn send(s: &mut TcpStream, hd: &CallHeader<'_>, args: &CreateArgs<'_>) {
    let mut buf = vec![0u8; 4096];
    let c = encode_call(&mut buf, hd, args, usize::MAX).unwrap();
    write_record(s, &buf[..c.len]).unwrap();
    s.flush().unwrap();
}

fn receive(s: &mut TcpStream) -> Vec<u8> {
    let mut r = Vec::new();
    assert!(read_record(s, 1 << 20, &mut r).unwrap());
    r
}

#[test]
fn a_retransmission_on_another_connection_waits_for_the_original_over_tcp() {
    let gated = Arc::new(Gated {
        fs: MemFs::default(),
        state: Mutex::new((false, false)),
        cv: Condvar::new(),
    });
    let shared = NfsShared::new(gated.clone(), NfsConfig::default());
    let root = shared.root_handle().as_bytes().to_vec();
    let factory = {
        let shared = shared.clone();
        Arc::new(move |_peer: std::net::SocketAddr| {
            let mut d = Dispatcher::new();
            d.register(Box::new(NfsProgram::new(shared.clone())))
                .unwrap();
            d
        })
    };
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp = TcpServer::spawn(l, TcpConfig::default(), factory).unwrap();
    let args = create_args(&root, b"slow");
    let hd = h(procs::CREATE, 0x3000);

    // The original, on the first connection, stops inside the backend.
    let mut one = TcpStream::connect(tcp.local_addr()).unwrap();
    send(&mut one, &hd, &args);
    gated.wait_started();
    // The client "reconnects" (a new port, the same address) and retransmits: dropped.
    let mut two = TcpStream::connect(tcp.local_addr()).unwrap();
    send(&mut two, &hd, &args);
    let end = Instant::now() + DEADLINE;
    while stats(&shared).in_progress_drops == 0 {
        assert!(Instant::now() < end, "the retransmission was never seen");
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(stats(&shared).in_progress, 1);
    gated.open();
    let original = receive(&mut one);
    let (xid, mut c) = reply_results(&original, &[]).unwrap();
    assert_eq!(xid, 0x3000);
    assert!(CreateRes::decode(&mut c).unwrap().ok().is_ok(), "created");

    // Retransmitted again after the original completed: the cached reply.
    send(&mut two, &hd, &args);
    assert_eq!(receive(&mut two), original);
    let s = stats(&shared);
    assert_eq!(
        (s.in_progress_drops, s.hits, s.insertions, s.in_progress),
        (1, 1, 1, 0),
        "{s:?}"
    );
    assert_eq!(shared.counters.nfs_proc(procs::CREATE).calls, 1);
}
