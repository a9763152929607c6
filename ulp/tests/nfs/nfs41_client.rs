//! `Nfs41Client` against a small in-memory NFSv4.1 server written here (one export
//! directory of files), over the shm provider: session setup, the export looked up from
//! the pseudo-root, put (a DELAY on the first OPEN is retried) with WRITEs from Read
//! chunks, ls through READDIR, get with READs into Write chunks, errors named by
//! nfsstat4, pipelined READs on every session slot (the server checks each slot's
//! sequence id; one is answered NFS4ERR_DELAY and sent again), REMOVE, and DESTROY_SESSION / DESTROY_CLIENTID at the end.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rpcrdma::fabric::shm::{ShmAddr, ShmDevice, ShmProvider};
use rpcrdma::ConnConfig;
use rpcrdma::Responder;
use rpcrdma_ulp::binding::ProcInfo;
use rpcrdma_ulp::ddp::{DdpCursor, DdpEncoder, XdrCodec};
use rpcrdma_ulp::nfs::client::NfsClientError;
use rpcrdma_ulp::nfs::v4::{self, ops};
use rpcrdma_ulp::nfs::v41::client::Nfs41Client;
use rpcrdma_ulp::nfs::v41::compound::*;
use rpcrdma_ulp::nfs::v41::{
    attr, ftype, Bitmap4, ChangeInfo4, ChannelAttrs4, Fattr4, Nfsstat4, Stateid4,
};
use rpcrdma_ulp::nfs::NFS_PROGRAM;
use rpcrdma_ulp::program::{Dispatcher, ProcError, Program};
use rpcrdma_ulp::rpc::CallHeader;

const SID: [u8; 16] = *b"session-id-0001!";
const SLOTS: u32 = 4;
/// The server's fore channel bounds: 128 KiB of data plus headers.
const MAX_MSG: u32 = 128 * 1024 + 4096;

#[derive(Default)]
struct State {
    files: BTreeMap<Vec<u8>, Vec<u8>>,
    slots: Vec<u32>,
    delayed_open: bool,
    delayed_read: bool,
    opens: u32,
    closes: u32,
    session_destroyed: bool,
    clientid_destroyed: bool,
    /// The XID of every call, in arrival order.
    xids: Vec<u32>,
}

struct Fake(Arc<Mutex<State>>);

fn leak(v: Vec<u8>) -> &'static [u8] {
    Box::leak(v.into_boxed_slice())
}

fn attrs_of(mask: &Bitmap4, ft: u32, size: u64) -> Fattr4<'static> {
    let mut vals = Vec::new();
    let mut out = Bitmap4::default();
    for bit in mask.bits() {
        match bit {
            attr::TYPE => vals.extend_from_slice(&ft.to_be_bytes()),
            attr::SIZE => vals.extend_from_slice(&size.to_be_bytes()),
            attr::MODE => vals.extend_from_slice(&0o644u32.to_be_bytes()),
            attr::OWNER => vals.extend_from_slice(&[0, 0, 0, 1, b'0', 0, 0, 0]),
            _ => continue, // not supported: left out of the mask
        }
        out.set(bit);
    }
    Fattr4 {
        mask: out,
        vals: leak(vals),
    }
}

impl State {
    fn run(&mut self, args: &CompoundArgs<'_>) -> CompoundRes<'static> {
        let mut results = Vec::new();
        let mut cur: Option<Vec<u8>> = None;
        let mut status = Nfsstat4::OK;
        for op in &args.ops {
            let (st, body) = self.op(op, &mut cur);
            results.push(ResOp {
                op: op.op(),
                status: st,
                body,
            });
            if !st.is_ok() {
                status = st;
                break;
            }
        }
        CompoundRes {
            status,
            tag: b"",
            results,
        }
    }

    fn op(&mut self, op: &ArgOp<'_>, cur: &mut Option<Vec<u8>>) -> (Nfsstat4, ResBody<'static>) {
        let ok = |b| (Nfsstat4::OK, b);
        let file = |cur: &Option<Vec<u8>>| {
            cur.as_ref()
                .and_then(|f| f.strip_prefix(b"F"))
                .map(<[u8]>::to_vec)
        };
        match op {
            ArgOp::ExchangeId(_) => ok(ResBody::ExchangeId(ExchangeIdRes {
                clientid: 7,
                sequenceid: 1,
                flags: EXCHGID4_FLAG_CONFIRMED_R,
                server_minor_id: 0,
                server_major_id: b"fake",
                server_scope: b"fake",
                impl_id: None,
            })),
            ArgOp::CreateSession(a) => {
                // CONN_BACK_CHAN: the client serves callbacks on this connection.
                assert_eq!(
                    (a.clientid, a.sequence, a.flags, a.cb_sec.count),
                    (7, 1, 0x2, 1)
                );
                let fore = ChannelAttrs4 {
                    maxrequestsize: a.fore.maxrequestsize.min(MAX_MSG),
                    maxresponsesize: a.fore.maxresponsesize.min(MAX_MSG),
                    maxrequests: a.fore.maxrequests.min(SLOTS),
                    ..a.fore
                };
                self.slots = vec![0; fore.maxrequests as usize];
                ok(ResBody::CreateSession(CreateSessionRes {
                    sessionid: SID,
                    sequence: 1,
                    flags: 0,
                    fore,
                    back: a.back,
                }))
            }
            ArgOp::Sequence(a) => {
                if a.sessionid != SID || self.session_destroyed {
                    return (Nfsstat4::BADSESSION, ResBody::None);
                }
                let Some(last) = self.slots.get_mut(a.slotid as usize) else {
                    return (Nfsstat4::BADSLOT, ResBody::None);
                };
                if a.sequenceid != last.wrapping_add(1) {
                    return (Nfsstat4::SEQ_MISORDERED, ResBody::None);
                }
                *last = a.sequenceid;
                ok(ResBody::Sequence(SequenceRes {
                    sessionid: SID,
                    sequenceid: a.sequenceid,
                    slotid: a.slotid,
                    highest_slotid: SLOTS - 1,
                    target_highest_slotid: SLOTS - 1,
                    status_flags: 0,
                }))
            }
            ArgOp::ReclaimComplete(_) => ok(ResBody::None),
            ArgOp::PutRootFh => {
                *cur = Some(b"R".to_vec());
                ok(ResBody::None)
            }
            ArgOp::PutFh(fh) => {
                *cur = Some(fh.to_vec());
                ok(ResBody::None)
            }
            ArgOp::GetFh => match cur {
                Some(fh) => ok(ResBody::GetFh(leak(fh.clone()))),
                None => (Nfsstat4::NOFILEHANDLE, ResBody::None),
            },
            ArgOp::Lookup(name) => match (cur.as_deref(), *name) {
                (Some(b"R"), b"export") => {
                    *cur = Some(b"E".to_vec());
                    ok(ResBody::None)
                }
                (Some(b"E"), n) if self.files.contains_key(n) => {
                    *cur = Some([b"F", n].concat());
                    ok(ResBody::None)
                }
                (Some(b"R" | b"E"), _) => (Nfsstat4::NOENT, ResBody::None),
                _ => (Nfsstat4::NOTDIR, ResBody::None),
            },
            ArgOp::Getattr(mask) => match file(cur) {
                Some(n) => {
                    let size = self.files.get(&n).map_or(0, |d| d.len() as u64);
                    ok(ResBody::Getattr(attrs_of(mask, ftype::NF4REG, size)))
                }
                None => ok(ResBody::Getattr(attrs_of(mask, ftype::NF4DIR, 0))),
            },
            ArgOp::Open(a) => {
                if cur.as_deref() != Some(b"E") {
                    return (Nfsstat4::NOTDIR, ResBody::None);
                }
                if !self.delayed_open {
                    self.delayed_open = true;
                    return (Nfsstat4::DELAY, ResBody::None);
                }
                let OpenClaim::Null(name) = a.claim else {
                    return (Nfsstat4::NOTSUPP, ResBody::None);
                };
                match &a.how {
                    OpenHow::NoCreate if !self.files.contains_key(name) => {
                        return (Nfsstat4::NOENT, ResBody::None)
                    }
                    OpenHow::NoCreate => {}
                    OpenHow::Create(_) => {
                        self.files.insert(name.to_vec(), Vec::new());
                    }
                }
                self.opens += 1;
                *cur = Some([b"F", name].concat());
                ok(ResBody::Open(OpenRes {
                    stateid: Stateid4 {
                        seqid: 1,
                        other: [self.opens as u8; 12],
                    },
                    cinfo: ChangeInfo4::default(),
                    rflags: 0,
                    attrset: Bitmap4::default(),
                    delegation: OpenDelegation::NoneExt(0, None),
                }))
            }
            ArgOp::Read(a) => {
                let Some(d) = file(cur).and_then(|n| self.files.get(&n)) else {
                    return (Nfsstat4::BADHANDLE, ResBody::None);
                };
                // One pipelined READ is answered NFS4ERR_DELAY (only they read at 192 KiB).
                if a.offset == 3 * 65536 && !self.delayed_read {
                    self.delayed_read = true;
                    return (Nfsstat4::DELAY, ResBody::None);
                }
                let from = (a.offset as usize).min(d.len());
                let to = (from + a.count as usize).min(d.len());
                ok(ResBody::Read(to == d.len(), leak(d[from..to].to_vec())))
            }
            ArgOp::Write(a) => {
                let Some(d) = file(cur).and_then(|n| self.files.get_mut(&n)) else {
                    return (Nfsstat4::BADHANDLE, ResBody::None);
                };
                let end = a.offset as usize + a.data.len();
                if d.len() < end {
                    d.resize(end, 0);
                }
                d[a.offset as usize..end].copy_from_slice(a.data);
                ok(ResBody::Write(a.data.len() as u32, UNSTABLE4, [9; 8]))
            }
            ArgOp::Commit(..) => ok(ResBody::Commit([9; 8])),
            ArgOp::Close(_, s) => {
                self.closes += 1;
                ok(ResBody::Close(*s))
            }
            ArgOp::Readdir(a) => {
                let entries = self
                    .files
                    .iter()
                    .enumerate()
                    .map(|(i, (n, d))| DirEntry {
                        cookie: i as u64 + 3,
                        name: leak(n.clone()),
                        attrs: attrs_of(&a.attr_request, ftype::NF4REG, d.len() as u64),
                    })
                    .collect();
                ok(ResBody::Readdir(ReaddirRes {
                    cookieverf: [0; 8],
                    entries,
                    eof: true,
                }))
            }
            ArgOp::Remove(name) => match self.files.remove(*name) {
                Some(_) => ok(ResBody::Remove(ChangeInfo4::default())),
                None => (Nfsstat4::NOENT, ResBody::None),
            },
            ArgOp::DestroySession(s) => {
                assert_eq!(*s, SID);
                self.session_destroyed = true;
                ok(ResBody::None)
            }
            ArgOp::DestroyClientid(id) => {
                assert_eq!(*id, 7);
                assert!(
                    self.session_destroyed,
                    "DESTROY_CLIENTID before DESTROY_SESSION"
                );
                self.clientid_destroyed = true;
                ok(ResBody::None)
            }
            _ => (Nfsstat4::NOTSUPP, ResBody::None),
        }
    }
}

impl Program for Fake {
    fn prog(&self) -> u32 {
        NFS_PROGRAM
    }
    fn versions(&self) -> (u32, u32) {
        (4, 4)
    }
    fn proc_info(&self, _vers: u32, procedure: u32) -> Option<&'static ProcInfo> {
        v4::proc_info(procedure)
    }
    fn call<'d>(
        &'d mut self,
        call: &CallHeader<'d>,
        args: &mut DdpCursor<'d>,
        results: &mut DdpEncoder<'_, 'd>,
    ) -> Result<(), ProcError> {
        self.0.lock().unwrap().xids.push(call.xid);
        let a = CompoundArgs::decode(args).map_err(ProcError::GarbageArgs)?;
        args.finish().map_err(ProcError::GarbageArgs)?;
        assert_eq!(a.minorversion, 1);
        let first = a.ops.first().map(ArgOp::op);
        let sessionless = matches!(
            first,
            Some(
                ops::EXCHANGE_ID
                    | ops::CREATE_SESSION
                    | ops::DESTROY_SESSION
                    | ops::DESTROY_CLIENTID
            )
        );
        let res = if !sessionless && first != Some(ops::SEQUENCE) {
            CompoundRes {
                status: Nfsstat4::OP_NOT_IN_SESSION,
                tag: b"",
                results: vec![ResOp {
                    op: first.unwrap_or(ops::ILLEGAL),
                    status: Nfsstat4::OP_NOT_IN_SESSION,
                    body: ResBody::None,
                }],
            }
        } else {
            self.0.lock().unwrap().run(&a)
        };
        res.encode(results).map_err(ProcError::Results)
    }
}

fn cfg() -> ConnConfig {
    ConnConfig {
        credits: 8,
        large_buf_size: 256 * 1024,
        ..ConnConfig::default()
    }
}

#[test]
fn nfs41_client_against_a_fake_server() {
    let state = Arc::new(Mutex::new(State::default()));
    let addr = ShmAddr::abstract_name(format!("rpcrdma-nfs41-test-{}", std::process::id()));
    let stop = Arc::new(AtomicBool::new(false));
    let server = {
        let (state, stop, addr) = (state.clone(), stop.clone(), addr.clone());
        std::thread::spawn(move || {
            let factory = move || {
                let mut d = Dispatcher::new();
                d.register(Box::new(Fake(state.clone()))).ok()?;
                Some(d)
            };
            // A plain version 1 server, as Linux nfsd is: a reply that outgrows the
            // room offered gets ERR_CHUNK, which the client must recover from (with
            // extensions it would come in a responder-provided Read chunk instead).
            let server_cfg = ConnConfig {
                extensions: false,
                ..cfg()
            };
            let mut s = Responder::<ShmProvider, Dispatcher, _>::bind(
                ShmDevice::new(),
                &addr,
                server_cfg,
                factory,
            )
            .expect("server binds");
            while !stop.load(Ordering::Relaxed) {
                if s.poll(Instant::now()) == 0 {
                    std::thread::yield_now();
                }
            }
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    let t = Duration::from_secs(20);
    let mut c = Nfs41Client::<ShmProvider>::connect(&ShmDevice::new(), &addr, &cfg(), t)
        .expect("session set up");
    assert_eq!(c.clientid(), 7);
    assert_eq!(c.slots(), SLOTS as usize);
    // The server's bound on messages (128 KiB of data and headers) sets both sizes.
    assert_eq!(c.transfer_sizes(), (128 * 1024, 128 * 1024));
    let root = c.set_export("/export").unwrap();
    assert_eq!(root, b"E");
    {
        // The client's own XIDs reach the server, one per call, counted up.
        let st = state.lock().unwrap();
        let last = *st.xids.last().expect("calls seen");
        assert_eq!(last, c.last_xid());
        for w in st.xids.windows(2) {
            assert_eq!(w[1], w[0].wrapping_add(1), "XIDs {:#x?}", st.xids);
        }
    }

    // put: 300 KiB and a bit, several WRITEs from Read chunks; the first OPEN is
    // answered NFS4ERR_DELAY and retried.
    let data: Vec<u8> = (0..300 * 1024 + 77u32)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    let fh = c.put(&root, b"a.bin", &data).unwrap();
    assert_eq!(fh, b"Fa.bin");
    assert!(state.lock().unwrap().delayed_open);
    assert_eq!(state.lock().unwrap().files[&b"a.bin".to_vec()], data);

    // ls
    let list = c.list(&root).unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].name, b"a.bin");
    assert_eq!(list[0].attrs.size, Some(data.len() as u64));
    assert_eq!(list[0].attrs.ftype, Some(ftype::NF4REG));
    assert_eq!(list[0].attrs.owner.as_deref(), Some("0"));
    let a = c.getattr(&fh).unwrap();
    assert_eq!((a.size, a.mode), (Some(data.len() as u64), Some(0o644)));

    // get: READs into Write chunks.
    let mut back = Vec::new();
    assert_eq!(
        c.get(&root, b"a.bin", &mut back).unwrap(),
        data.len() as u64
    );
    assert!(back == data, "get returns what put wrote");

    // Errors name the nfsstat4 and the operation.
    match c.get(&root, b"missing", &mut Vec::new()) {
        Err(
            e @ NfsClientError::Nfs4 {
                op: ops::OPEN,
                status: Nfsstat4::NOENT,
            },
        ) => {
            assert_eq!(e.to_string(), "NFS4ERR_NOENT (from OPEN)")
        }
        other => panic!("{other:?}"),
    }
    match c.lookup_path("nope/x") {
        Err(NfsClientError::Nfs4 {
            op: ops::LOOKUP,
            status: Nfsstat4::NOENT,
        }) => {}
        other => panic!("{other:?}"),
    }

    // Pipelined READs on every slot, twice round: each slot's sequence id must advance
    // (the server answers SEQ_MISORDERED otherwise).
    let f = c.open(&root, b"a.bin", None, false).unwrap();
    for round in 0..3u64 {
        for i in 0..SLOTS as u64 {
            c.start(&f, i * 65536, 65536, &[], round * 10 + i).unwrap();
        }
        assert!(c.start(&f, 0, 1, &[], 99).is_err(), "all slots busy");
        let mut done = 0;
        let end = Instant::now() + t;
        while done < SLOTS {
            if let Some((tag, r)) = c.poll_done() {
                assert_eq!(tag / 10, round);
                assert_eq!(r.unwrap(), 65536);
                done += 1;
            }
            assert!(Instant::now() < end, "pipelined READs never finished");
        }
    }
    assert!(
        state.lock().unwrap().delayed_read,
        "a pipelined READ was delayed and retried"
    );
    // A pipelined WRITE.
    c.start(&f, 0, 4, b"ABCD", 1).unwrap();
    let end = Instant::now() + t;
    loop {
        if let Some((1, r)) = c.poll_done() {
            assert_eq!(r.unwrap(), 4);
            break;
        }
        assert!(Instant::now() < end);
    }
    assert_eq!(
        &state.lock().unwrap().files[&b"a.bin".to_vec()][..4],
        b"ABCD"
    );
    c.close_file(&f).unwrap();

    // A directory whose listing outgrows the room a READDIR offers (this server ignores
    // maxcount and answers in one page): the responder refuses the reply with ERR_CHUNK,
    // the client resends once with the session's largest reply room, as the slot's next
    // request (the server checks the sequence ids).
    {
        let mut st = state.lock().unwrap();
        for i in 0..1000 {
            st.files.insert(
                format!("listing-{i:04}-with-a-name-long-enough").into_bytes(),
                Vec::new(),
            );
        }
    }
    assert_eq!(c.reply_retries(), 0);
    let list = c.list(&root).unwrap();
    assert_eq!(list.len(), 1001, "a.bin and the 1000 others");
    assert_eq!(c.reply_retries(), 1);
    {
        let mut st = state.lock().unwrap();
        st.files.retain(|n, _| !n.starts_with(b"listing-"));
    }
    let list = c.list(&root).unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(c.reply_retries(), 1, "a listing that fits is not resent");

    c.remove(&root, b"a.bin").unwrap();
    match c.remove(&root, b"a.bin") {
        Err(NfsClientError::Nfs4 {
            op: ops::REMOVE,
            status: Nfsstat4::NOENT,
        }) => {}
        other => panic!("{other:?}"),
    }
    c.shutdown().unwrap();
    {
        let s = state.lock().unwrap();
        assert!(s.session_destroyed && s.clientid_destroyed);
        assert_eq!(s.opens, s.closes, "every OPEN was closed");
    }
    stop.store(true, Ordering::Relaxed);
    server.join().unwrap();
}
