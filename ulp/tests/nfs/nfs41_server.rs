//! The NFSv4.1 server end to end: the crate's `Nfs41Client` against `NfsService` (NFSv3
//! and NFSv4.1 on one program) over the engine's shm provider, on a host directory.
//! Session setup, lookups, create/write/commit/close, the read back through Write
//! chunks (WRITEs from Read chunks), READDIR of many entries in pages, RENAME, REMOVE,
//! SETATTR of the size, mkdir, the slot reply cache (a retried SEQUENCE replays the
//! cached reply and does not run the COMPOUND again), misordered sequence ids and bad
//! slots, bad and old stateids, export escapes, and the per-operation counters.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma::fabric::shm::{ShmAddr, ShmDevice, ShmProvider};
use rpcrdma::ConnConfig;
use rpcrdma::{NoRequester, RequesterHalf, RequesterRole, Responder};
use rpcrdma_pools::HugePages;
use rpcrdma_ulp::ddp::{DdpCursor, XdrCodec};
use rpcrdma_ulp::nfs::client::NfsClientError;
use rpcrdma_ulp::nfs::server::{HostFs, MemFs, NfsConfig, NfsService, NfsShared};
use rpcrdma_ulp::nfs::v4::ops;
use rpcrdma_ulp::nfs::v41::client::{Nfs41Client, OpenFile};
use rpcrdma_ulp::nfs::v41::compound::{ArgOp, CompoundRes, CreateArgs, CreateType, ResBody};
use rpcrdma_ulp::nfs::v41::{ftype, Fattr4, Nfsstat4, Stateid4};
use rpcrdma_ulp::program::Dispatcher;

use crate::nfs_support::TempDir;

const MIB: usize = 1 << 20;
const DEADLINE: Duration = Duration::from_secs(20);

fn cfg() -> ConnConfig {
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

/// A server thread answering every connection with `NfsService` over `shared`.
struct Server {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    addr: ShmAddr,
}

impl Server {
    fn start(shared: Arc<NfsShared>, tag: &str) -> Server {
        Self::start_as::<NoRequester>(shared, tag)
    }

    /// A server whose connections can call their clients (RFC 8167).
    fn start_calling(shared: Arc<NfsShared>, tag: &str) -> Server {
        Self::start_as::<RequesterHalf>(shared, tag)
    }

    fn start_as<B: RequesterRole + 'static>(shared: Arc<NfsShared>, tag: &str) -> Server {
        let addr =
            ShmAddr::abstract_name(format!("rpcrdma-nfs41-srv-{tag}-{}", std::process::id()));
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = {
            let (stop, addr) = (stop.clone(), addr.clone());
            std::thread::spawn(move || {
                let inline = cfg().inline_send as usize;
                let factory =
                    move || NfsService::new(Dispatcher::new(), shared.clone(), inline).ok();
                let mut s = Responder::<ShmProvider, NfsService, _, B>::bind_roles(
                    ShmDevice::new(),
                    &addr,
                    cfg(),
                    factory,
                )
                .expect("server binds");
                ready_tx.send(()).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    if s.poll(Instant::now()) == 0 {
                        std::thread::yield_now();
                    }
                }
            })
        };
        ready_rx.recv_timeout(DEADLINE).expect("server listening");
        Server {
            stop,
            thread: Some(thread),
            addr,
        }
    }

    fn client(&self) -> Nfs41Client<ShmProvider> {
        Nfs41Client::<ShmProvider>::connect(&ShmDevice::new(), &self.addr, &cfg(), DEADLINE)
            .expect("session set up")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn shared_on(dir: &std::path::Path) -> Arc<NfsShared> {
    NfsShared::new(
        Arc::new(HostFs::new(dir).unwrap()),
        NfsConfig {
            max_read: MIB as u32,
            max_write: MIB as u32,
            max_readdir: 64 * 1024,
            ..NfsConfig::default()
        },
    )
}

fn nfs4_err<T: std::fmt::Debug>(r: Result<T, NfsClientError>) -> (u32, Nfsstat4) {
    match r {
        Err(NfsClientError::Nfs4 { op, status }) => (op, status),
        other => panic!("expected an NFSv4 error, got {other:?}"),
    }
}

fn decode_res(bytes: &[u8]) -> CompoundRes<'_> {
    let mut c = DdpCursor::inline(bytes, 0);
    let r = CompoundRes::decode(&mut c).expect("COMPOUND4res decodes");
    c.finish().expect("nothing left over");
    r
}

#[test]
fn nfs41_files_through_our_server() {
    let dir = TempDir::new("v41-files");
    let shared = shared_on(&dir.0);
    let srv = Server::start(shared.clone(), "files");
    let mut c = srv.client();
    assert!(c.slots() >= 1);
    let (rsize, wsize) = c.transfer_sizes();
    assert_eq!(
        (rsize, wsize),
        (MIB as u32, MIB as u32),
        "fore channel grants 1 MiB"
    );
    let root = c.set_export("/").unwrap();

    // put: 3 MiB and a bit: UNSTABLE WRITEs from Read chunks, COMMIT, CLOSE.
    let data: Vec<u8> = (0..3 * MIB + 123).map(|i| (i * 31 % 251) as u8).collect();
    let fh = c.put(&root, b"big.bin", &data).unwrap();
    assert_eq!(std::fs::read(dir.0.join("big.bin")).unwrap(), data);
    assert_eq!(c.lookup_path("big.bin").unwrap(), fh);
    let a = c.getattr(&fh).unwrap();
    assert_eq!(a.size, Some(data.len() as u64));
    assert_eq!(a.ftype, Some(ftype::NF4REG));
    assert_eq!(a.mode, Some(0o644));

    // get: READs into Write chunks, data identical.
    let mut back = Vec::new();
    assert_eq!(
        c.get(&root, b"big.bin", &mut back).unwrap(),
        data.len() as u64
    );
    assert!(back == data, "get returns what put wrote");
    let read = shared.counters.nfs4_op(ops::READ);
    assert!(read.calls >= 4, "{read:?}");
    assert!(
        read.write_chunks >= 4,
        "READ data went to Write chunks: {read:?}"
    );
    assert!(shared.counters.nfs4_op(ops::WRITE).calls >= 4);
    let compounds = shared.counters.compounds.get();
    // Three 1 MiB WRITEs; the last 123 octets go inline (under the 1 KiB chunk threshold).
    assert_eq!(
        compounds.read_chunks, 3,
        "WRITE data came in Read chunks: {compounds:?}"
    );
    assert!(shared.counters.nfs4_op(ops::SEQUENCE).calls > 10);
    assert!(shared
        .counters
        .lines()
        .iter()
        .any(|l| l.starts_with("NFS4 READ ") && l.contains("write ")));

    // SETATTR of the size through the open stateid.
    let f = c.open(&root, b"big.bin", None, true).unwrap();
    c.set_size(&f, 10).unwrap();
    assert_eq!(c.getattr(&fh).unwrap().size, Some(10));
    assert_eq!(std::fs::metadata(dir.0.join("big.bin")).unwrap().len(), 10);
    // A second OPEN by the same owner upgrades the open state: its seqid moves on, and
    // the first stateid is old now.
    let f2 = c.open(&root, b"big.bin", None, true).unwrap();
    assert_eq!(f2.stateid.other, f.stateid.other);
    assert_eq!(f2.stateid.seqid, f.stateid.seqid + 1);
    assert_eq!(
        nfs4_err(c.read(&f, 0, 10)),
        (ops::READ, Nfsstat4::OLD_STATEID)
    );
    let (got, eof) = c.read(&f2, 0, 100).unwrap();
    assert_eq!((got.as_slice(), eof), (&data[..10], true));
    // A stateid of another server instance (its first four octets name the instance).
    let stale = OpenFile {
        fh: f2.fh.clone(),
        stateid: Stateid4 {
            seqid: 1,
            other: [7; 12],
        },
        delegation: None,
    };
    assert_eq!(
        nfs4_err(c.read(&stale, 0, 10)),
        (ops::READ, Nfsstat4::STALE_STATEID)
    );
    // A stateid of this instance that the server never handed out.
    let mut other = f2.stateid.other;
    other[11] ^= 0x55;
    let bogus = OpenFile {
        fh: f2.fh.clone(),
        stateid: Stateid4 { seqid: 1, other },
        delegation: None,
    };
    assert_eq!(
        nfs4_err(c.read(&bogus, 0, 10)),
        (ops::READ, Nfsstat4::BAD_STATEID)
    );
    assert_eq!(
        nfs4_err(c.write(&bogus, 0, b"x", 2)),
        (ops::WRITE, Nfsstat4::BAD_STATEID)
    );
    // A read-only open cannot write.
    c.close_file(&f2).unwrap();
    let ro = c.open(&root, b"big.bin", None, false).unwrap();
    assert_eq!(
        nfs4_err(c.write(&ro, 0, b"x", 2)),
        (ops::WRITE, Nfsstat4::OPENMODE)
    );
    c.close_file(&ro).unwrap();
    // After CLOSE the stateid is gone.
    assert_eq!(
        nfs4_err(c.read(&ro, 0, 10)),
        (ops::READ, Nfsstat4::BAD_STATEID)
    );

    // mkdir, rename across directories, remove.
    let sub = c.mkdir(&root, b"sub").unwrap();
    assert!(dir.0.join("sub").is_dir());
    c.rename(&root, b"big.bin", &sub, b"moved.bin").unwrap();
    assert!(dir.0.join("sub/moved.bin").is_file());
    assert!(!dir.0.join("big.bin").exists());
    assert_eq!(
        nfs4_err(c.lookup_path("big.bin")),
        (ops::LOOKUP, Nfsstat4::NOENT)
    );
    c.remove(&sub, b"moved.bin").unwrap();
    assert!(!dir.0.join("sub/moved.bin").exists());
    c.remove(&root, b"sub").unwrap();
    assert!(!dir.0.join("sub").exists());
    assert_eq!(
        nfs4_err(c.remove(&root, b"sub")),
        (ops::REMOVE, Nfsstat4::NOENT)
    );

    // READDIR of many entries: several pages, every name once, cookies continuing.
    for i in 0..700 {
        std::fs::write(dir.0.join(format!("f{i:04}")), [i as u8; 3]).unwrap();
    }
    let list = c.list(&root).unwrap();
    let mut names: Vec<String> = list
        .iter()
        .map(|l| String::from_utf8(l.name.clone()).unwrap())
        .collect();
    names.sort();
    let want: Vec<String> = (0..700).map(|i| format!("f{i:04}")).collect();
    assert_eq!(names, want);
    assert!(list.iter().all(|l| l.attrs.size == Some(3)));
    assert!(
        shared.counters.nfs4_op(ops::READDIR).calls >= 2,
        "700 entries take more than one 32 KiB page"
    );
    assert!(
        shared.counters.compounds.get().reply_chunks >= 2,
        "READDIR pages went through the Reply chunk"
    );

    c.shutdown().unwrap();
}

#[test]
fn nfs41_sequence_replay_and_misordering() {
    let shared = NfsShared::new(Arc::new(MemFs::new(64 << 20)), NfsConfig::default());
    let srv = Server::start(shared.clone(), "seq");
    let mut c = srv.client();
    let root = c.set_export("/").unwrap();
    let seq = c.slot_seqid(0);
    let mk = [
        ArgOp::PutFh(&root),
        ArgOp::Create(CreateArgs {
            objtype: CreateType::Plain(ftype::NF4DIR),
            name: b"once",
            attrs: Fattr4::default(),
        }),
        ArgOp::GetFh,
    ];
    let first = c.raw_sequenced(0, seq, &mk).unwrap();
    let r = decode_res(&first);
    assert_eq!(r.status, Nfsstat4::OK, "{r:?}");
    assert_eq!(r.results.len(), 4);
    let creates = shared.counters.nfs4_op(ops::CREATE).calls;
    // The retry (same slot, same sequence id) gets the cached reply, octet for octet,
    // and CREATE does not run again (it would fail with NFS4ERR_EXIST).
    let again = c.raw_sequenced(0, seq, &mk).unwrap();
    assert_eq!(again, first);
    assert_eq!(shared.counters.nfs4_op(ops::CREATE).calls, creates);
    // A sequence id that is neither the last nor the next one.
    let r = c.raw_sequenced(0, seq + 5, &mk).unwrap();
    let r = decode_res(&r);
    assert_eq!(r.status, Nfsstat4::SEQ_MISORDERED);
    assert_eq!(r.results.len(), 1);
    // A slot beyond the table.
    let r = c.raw_sequenced(10_000, 1, &mk).unwrap();
    assert_eq!(decode_res(&r).status, Nfsstat4::BADSLOT);
    // The next sequence id runs the COMPOUND: now the directory exists.
    let r = c.raw_sequenced(0, seq + 1, &mk).unwrap();
    let r = decode_res(&r);
    assert_eq!(r.status, Nfsstat4::EXIST);
    assert_eq!(r.results[2].op, ops::CREATE);
    c.set_slot_seqid(0, seq + 2);
    // The client's own calls go on normally afterwards.
    assert!(c.lookup_path("once").is_ok());
    c.shutdown().unwrap();
}

#[test]
fn nfs41_export_escapes_fail() {
    let outer = TempDir::new("v41-escape");
    std::fs::create_dir(outer.0.join("export")).unwrap();
    std::fs::write(outer.0.join("secret"), b"outside").unwrap();
    std::os::unix::fs::symlink("../secret", outer.0.join("export/ln")).unwrap();
    std::os::unix::fs::symlink("/", outer.0.join("export/rootln")).unwrap();
    let shared = shared_on(&outer.0.join("export"));
    let srv = Server::start(shared, "escape");
    let mut c = srv.client();
    let root = c.set_export("/").unwrap();
    // ".." is no name in NFSv4; LOOKUPP at the export root has nowhere to go.
    assert_eq!(
        nfs4_err(c.lookup_path("..")),
        (ops::LOOKUP, Nfsstat4::BADNAME)
    );
    assert_eq!(
        nfs4_err(c.ops(&[ArgOp::PutRootFh, ArgOp::Lookupp])),
        (ops::LOOKUPP, Nfsstat4::NOENT)
    );
    assert_eq!(
        nfs4_err(c.ops(&[ArgOp::PutFh(&root), ArgOp::Lookup(b"a/../../secret")])),
        (ops::LOOKUP, Nfsstat4::BADNAME)
    );
    // Symbolic links are objects, never followed: OPEN of one, or a LOOKUP through it,
    // is NFS4ERR_SYMLINK.
    assert_eq!(
        nfs4_err(c.open(&root, b"ln", None, false)),
        (ops::OPEN, Nfsstat4::SYMLINK)
    );
    assert_eq!(
        nfs4_err(c.lookup_path("rootln/etc")),
        (ops::LOOKUP, Nfsstat4::SYMLINK)
    );
    // Forged handles: a flipped octet, a truncated one, one of another server instance.
    let mut forged = root.clone();
    forged[12] ^= 1;
    assert_eq!(
        nfs4_err(c.ops(&[ArgOp::PutFh(&forged), ArgOp::GetFh])),
        (ops::PUTFH, Nfsstat4::BADHANDLE)
    );
    assert_eq!(
        nfs4_err(c.ops(&[ArgOp::PutFh(&root[..20]), ArgOp::GetFh])),
        (ops::PUTFH, Nfsstat4::BADHANDLE)
    );
    let other = shared_on(&outer.0);
    let foreign = other.root_handle().as_bytes().to_vec();
    assert_eq!(
        nfs4_err(c.ops(&[ArgOp::PutFh(&foreign), ArgOp::GetFh])),
        (ops::PUTFH, Nfsstat4::BADHANDLE)
    );
    // Nothing outside was touched or listed.
    let list = c.list(&root).unwrap();
    let mut names: Vec<_> = list.iter().map(|l| l.name.clone()).collect();
    names.sort();
    assert_eq!(names, vec![b"ln".to_vec(), b"rootln".to_vec()]);
    // No session: operations other than the session ones are refused.
    c.shutdown().unwrap();
    let _ = ResBody::None;
}

/// After a CREATE_SESSION that asked for a backchannel (CONN_BACK_CHAN), a server whose
/// connections can call their clients probes it with CB_NULL to the client's callback
/// program (RFC 8881 §18.36, §20.1); the client's callback service answers over the same
/// connection (RFC 8167), and the server counts it sent and answered. A one-role server
/// sends nothing and counts nothing.
#[test]
fn the_backchannel_is_probed_with_cb_null_and_answered() {
    let dir = TempDir::new("nfs41-cb");
    let shared = shared_on(&dir.0);
    let srv = Server::start_calling(shared.clone(), "cb");
    let mut c = srv.client();
    let end = Instant::now() + DEADLINE;
    while shared.counters.callback(0).answered == 0 {
        assert!(Instant::now() < end, "{:?}", shared.counters.callback(0));
        c.serve_callbacks(Duration::from_millis(2));
    }
    let cb = shared.counters.callback(0);
    assert_eq!((cb.sent, cb.answered, cb.failed), (1, 1, 0));
    assert_eq!(shared.counters.callback(1).sent, 0, "no CB_COMPOUND");
    let answered = c.callbacks();
    assert_eq!((answered.nulls, answered.refused), (1, 0));
    assert!(shared
        .counters
        .callback_line()
        .starts_with("CB_NULL sent 1 answered 1 failed 0"));
    // The forward direction is unaffected: an ordinary COMPOUND after the probe.
    c.set_export("/").expect("the export is the root");
    drop(c);
    drop(srv);

    let shared = shared_on(&dir.0);
    let srv = Server::start(shared.clone(), "cb-one-role");
    let mut c = srv.client();
    c.set_export("/").expect("the export is the root");
    c.serve_callbacks(Duration::from_millis(20));
    assert_eq!(shared.counters.callback(0), Default::default());
    assert_eq!(c.callbacks().nulls, 0);
}

/// Polls `c` (answering its callbacks, returning what is recalled) until `done`.
fn serve_until(
    c: &mut Nfs41Client<ShmProvider>,
    what: &str,
    mut done: impl FnMut(&Nfs41Client<ShmProvider>) -> bool,
) {
    let end = Instant::now() + DEADLINE;
    while !done(c) {
        assert!(Instant::now() < end, "{what}");
        c.serve_callbacks(Duration::from_millis(2));
    }
}

/// Read delegations and their recall (RFC 8881 §10.4, §18.6, §20.2): a client whose
/// backchannel answered CB_NULL and that asks for no less gets OPEN_DELEGATE_READ on an
/// OPEN for reading, and READs with the delegation stateid. Another client's OPEN for
/// writing is answered NFS4ERR_DELAY while the server sends CB_SEQUENCE + CB_RECALL
/// over the holder's backchannel; the holder answers NFS4_OK and returns the
/// delegation with DELEGRETURN, after which the OPEN succeeds. DELEGRETURN of a returned,
/// a foreign-instance or a missing-handle stateid gets the RFC's errors.
#[test]
fn a_read_delegation_is_recalled_when_another_client_opens_for_write() {
    use rpcrdma_ulp::nfs::v41::compound::{OpenArgs, OpenClaim, OpenHow};
    let dir = TempDir::new("nfs41-deleg");
    std::fs::write(dir.0.join("f"), b"delegated data").unwrap();
    let shared = shared_on(&dir.0);
    let srv = Server::start_calling(shared.clone(), "deleg");

    // The holder, once its backchannel is proven.
    let mut a = srv.client();
    a.set_want_delegations(true);
    serve_until(&mut a, "CB_NULL answered", |_| {
        shared.counters.callback(0).answered == 1
    });
    let root = a.set_export("/").unwrap();
    let fa = a.open(&root, b"f", None, false).unwrap();
    let d = fa.delegation.expect("a read delegation");
    assert_eq!(a.delegations_held(), 1);
    let with_deleg = OpenFile {
        fh: fa.fh.clone(),
        stateid: d,
        delegation: None,
    };
    assert_eq!(
        a.read(&with_deleg, 0, 100).unwrap(),
        (b"delegated data".to_vec(), true)
    );
    assert_eq!(
        nfs4_err(a.write(&with_deleg, 0, b"x", 2)),
        (ops::WRITE, Nfsstat4::OPENMODE)
    );
    // A second OPEN of the file by the holder: no second delegation.
    assert_eq!(a.open(&root, b"f", None, false).unwrap().delegation, None);

    // Another client (asking for none) opens it for writing: DELAY, once, unretried.
    let mut b = srv.client();
    let rootb = b.set_export("/").unwrap();
    let owner = b"writer".to_vec();
    let open_w = ArgOp::Open(OpenArgs {
        seqid: 0,
        share_access: 2 | 0x0400,
        share_deny: 0,
        owner_clientid: b.clientid(),
        owner: &owner,
        how: OpenHow::NoCreate,
        claim: OpenClaim::Null(b"f"),
    });
    let seq = b.slot_seqid(0);
    let raw = b
        .raw_sequenced(0, seq, &[ArgOp::PutFh(&rootb), open_w])
        .unwrap();
    b.set_slot_seqid(0, seq + 1);
    let r = decode_res(&raw);
    assert_eq!(r.status, Nfsstat4::DELAY);
    assert_eq!(
        r.results.last().map(|o| (o.op, o.status)),
        Some((ops::OPEN, Nfsstat4::DELAY))
    );
    // The recall reaches the holder, who answers and returns the delegation.
    serve_until(&mut a, "delegation returned", |a| {
        a.delegations_returned() == 1
    });
    let cb = a.callbacks();
    assert_eq!((cb.recalls, cb.recalls_held), (1, 1));
    assert_eq!(a.delegations_held(), 0);
    let k = shared.counters.callback(2);
    assert_eq!((k.sent, k.answered, k.failed), (1, 1, 0), "CB_RECALL");
    assert_eq!(shared.counters.callback(1).answered, 1, "CB_COMPOUND");
    assert!(
        shared.counters.callback_line().contains(
            "CB_RECALL sent 1 answered 1 failed 0; delegations granted 1 returned 1 revoked 0"
        ),
        "{}",
        shared.counters.callback_line()
    );
    // Now the writer's OPEN goes through, and its WRITE lands.
    let fb = b.open(&rootb, b"f", None, true).unwrap();
    b.write(&fb, 0, b"D", 2).unwrap();
    assert_eq!(std::fs::read(dir.0.join("f")).unwrap(), b"Delegated data");
    // While another client has it open for writing, a reader gets no delegation.
    assert_eq!(a.open(&root, b"f", None, false).unwrap().delegation, None);

    // The returned delegation is gone: READ and DELEGRETURN with it are BAD_STATEID.
    assert_eq!(
        nfs4_err(a.read(&with_deleg, 0, 10)),
        (ops::READ, Nfsstat4::BAD_STATEID)
    );
    assert_eq!(
        nfs4_err(a.delegreturn(&fa.fh, d)),
        (ops::DELEGRETURN, Nfsstat4::BAD_STATEID)
    );
    // One of another server instance: STALE_STATEID; no current file handle first.
    let foreign = Stateid4 {
        seqid: 1,
        other: [7; 12],
    };
    assert_eq!(
        nfs4_err(a.delegreturn(&fa.fh, foreign)),
        (ops::DELEGRETURN, Nfsstat4::STALE_STATEID)
    );
    assert_eq!(
        nfs4_err(a.ops(&[ArgOp::Delegreturn(d)])),
        (ops::DELEGRETURN, Nfsstat4::NOFILEHANDLE)
    );
    // The holder's own writes never recall its own delegation: a fresh one on "g",
    // then a write-open of "g" by the holder succeeds at once.
    std::fs::write(dir.0.join("g"), b"g").unwrap();
    let fg = a.open(&root, b"g", None, false).unwrap();
    assert!(fg.delegation.is_some());
    a.open(&root, b"g", None, true).unwrap();
    assert_eq!(
        shared.counters.callback(2).sent,
        1,
        "no recall of the holder's own"
    );

    // An NFSv3 WRITE conflicts too: NFS3ERR_JUKEBOX until the holder returns it.
    std::fs::write(dir.0.join("h"), b"h").unwrap();
    let fh = a.open(&root, b"h", None, false).unwrap();
    assert!(fh.delegation.is_some());
    let mut v3 = rpcrdma_ulp::nfs::client::Nfs3Client::<ShmProvider>::connect(
        &ShmDevice::new(),
        &srv.addr,
        &cfg(),
        root.clone(),
        DEADLINE,
    )
    .unwrap();
    let stable = rpcrdma_ulp::nfs::v3::args::StableHow::FileSync;
    match v3.write(&fh.fh, 0, b"H", stable) {
        Err(NfsClientError::Nfs(s)) => {
            assert_eq!(s, rpcrdma_ulp::nfs::v3::types::Nfsstat3::JUKEBOX)
        }
        other => panic!("expected JUKEBOX, got {other:?}"),
    }
    serve_until(&mut a, "second delegation returned", |a| {
        a.delegations_returned() == 2
    });
    v3.write(&fh.fh, 0, b"H", stable).unwrap();
    assert_eq!(std::fs::read(dir.0.join("h")).unwrap(), b"H");
    assert_eq!(shared.counters.callback(2).answered, 2);
    drop(v3);
    b.shutdown().unwrap();
    a.shutdown().unwrap();
}

/// The address `Server::start_as` binds for `tag` (it derives it the same way).
fn server_addr(tag: &str) -> ShmAddr {
    ShmAddr::abstract_name(format!("rpcrdma-nfs41-srv-{tag}-{}", std::process::id()))
}

#[test]
fn a_client_connects_to_a_server_that_starts_late() {
    // The lab once saw Linux nfsd refuse one connect right after the client's previous
    // connection closed: the client connects again with a backoff until its timeout,
    // as the Linux client does, instead of failing on the first refusal. Here the first
    // attempts find nobody listening (shm reports them unreachable).
    let dir = TempDir::new("v41-late");
    std::fs::write(dir.0.join("seen.txt"), b"late").unwrap();
    let shared = shared_on(&dir.0);
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let late = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let srv = Server::start(shared, "late");
        started_tx.send(()).unwrap();
        // The server lives until the client is done with it.
        let _ = done_rx.recv_timeout(DEADLINE);
        drop(srv);
    });
    let t0 = Instant::now();
    let mut c = Nfs41Client::<ShmProvider>::connect(
        &ShmDevice::new(),
        &server_addr("late"),
        &cfg(),
        DEADLINE,
    )
    .expect("connected once the server came up");
    started_rx.recv_timeout(DEADLINE).unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(300),
        "the server was not up before"
    );
    let root = c.set_export("/").unwrap();
    let names: Vec<Vec<u8>> = c.list(&root).unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names, vec![b"seen.txt".to_vec()]);
    drop(c);
    done_tx.send(()).unwrap();
    late.join().unwrap();
}

#[test]
fn a_connect_nobody_answers_fails_naming_the_reason_and_the_attempts() {
    let t0 = Instant::now();
    let err = Nfs41Client::<ShmProvider>::connect(
        &ShmDevice::new(),
        &server_addr("nobody"),
        &cfg(),
        Duration::from_secs(2),
    )
    .map(|_| ())
    .unwrap_err();
    let elapsed = t0.elapsed();
    let NfsClientError::Connect(msg) = &err else {
        panic!("not a connect error: {err}");
    };
    assert!(
        msg.starts_with("no peer answered the connect request ("),
        "{msg}"
    );
    // 50 ms doubling to 1 s: attempts at 0, 50, 150, 350, 750 ms and 1.75 s.
    let attempts: u32 = msg
        .split_once(" (")
        .and_then(|(_, rest)| rest.split_once(' '))
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no attempt count in {msg}"));
    assert!(attempts >= 2, "{msg}");
    assert!(
        elapsed < Duration::from_secs(4),
        "gave up after {elapsed:?}"
    );
}
