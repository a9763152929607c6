//! [`NfsProgram`]: NFS version 3 (program 100003) as a [`Program`] for the
//! [`Dispatcher`](crate::program::Dispatcher), over an [`NfsBackend`].
//!
//! One instance serves one connection (its scratch buffers are per connection); every
//! instance of a server shares one [`NfsShared`]: the backend, the handle key and the
//! counters. DDP follows RFC 8267 §4 through the codecs: READ data and the READLINK
//! target go into the requester's Write chunk when it offered one (from this program's
//! read buffer; the engine copies it once into registered memory), WRITE data and the
//! SYMLINK target are taken from wherever they arrived, and a reply longer than the
//! inline threshold goes into the Reply chunk, which the engine handles.

use std::sync::Arc;

use super::backend::{CreateMode, DirEntry, FileKey, NfsBackend};
use super::counters::{bump, NfsCounters};
use super::handle::{Handle, HandleKey};
use super::v41::state::StateLimits;
use super::v41::{Clock, Nfs41Conn, Nfs41State};
use crate::binding::ProcInfo;
use crate::ddp::{DdpCursor, DdpEncoder, Void, XdrCodec};
use crate::nfs::v3::args::{
    AccessArgs, CommitArgs, CreateArgs, CreateHow3, LinkArgs, MkdirArgs, MknodArgs, ReadArgs,
    ReaddirArgs, ReaddirplusArgs, RenameArgs, SetattrArgs, SymlinkArgs, WriteArgs,
};
use crate::nfs::v3::res::{
    access, fsf, AccessOk, AttrNoData, CommitOk, CreateOk, Entry3, EntryPlus3, FsinfoOk, FsstatOk,
    LinkWcc, LookupOk, NfsRes, PathconfOk, ReadOk, ReaddirOk, ReaddirplusOk, ReadlinkOk, RenameWcc,
    WriteOk,
};
use crate::nfs::v3::types::{
    DirOpArgs3, Fattr3, NfsFh3, NfsTime3, Nfsstat3, PostOpAttr, Sattr3, Verf, WccAttr, WccData,
};
use crate::nfs::v3::{self as tables, procs};
use crate::nfs::NFS_PROGRAM;
use crate::program::{Drc, DrcConfig, ProcError, Program};
use crate::rpc::CallHeader;

/// COMPOUND as this server declares it: like [`crate::nfs::v4::COMPOUND`], but marked
/// idempotent so that the dispatcher's duplicate request cache leaves it alone. NFSv4.1
/// retries are answered by the session's slot reply cache (RFC 8881 §2.10.6.1), which
/// is what makes them safe, and a COMPOUND without SEQUENCE holds only operations that
/// are safe to run again (EXCHANGE_ID, CREATE_SESSION with its own replay, DESTROY_*).
static COMPOUND_SERVED: ProcInfo = ProcInfo {
    idempotent: true,
    reply_usually_small: false,
    ..crate::nfs::v4::COMPOUND
};

/// Server-wide NFS settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NfsConfig {
    /// Largest READ (FSINFO `rtmax`); larger requests are clamped. Over RPC-over-RDMA
    /// keep it at most the engine's `large_buf_size`, the largest Write chunk result.
    pub max_read: u32,
    /// Largest WRITE (FSINFO `wtmax`); of a larger one only this much is written, as
    /// RFC 1813 §3.3.7 allows (the reply's count says so).
    pub max_write: u32,
    /// Largest READDIR / READDIRPLUS reply (FSINFO `dtpref`); larger `count`s are
    /// clamped.
    pub max_readdir: u32,
    /// The duplicate request cache for SETATTR, WRITE, CREATE, MKDIR, SYMLINK, MKNOD,
    /// REMOVE, RMDIR, RENAME and LINK (the procedures the NFSv3 table does not declare
    /// idempotent), shared by every connection and transport of the server; `None`
    /// runs every retransmission again.
    pub reply_cache: Option<DrcConfig>,
}

impl Default for NfsConfig {
    fn default() -> Self {
        NfsConfig {
            max_read: 256 * 1024,
            max_write: 256 * 1024,
            max_readdir: 64 * 1024,
            reply_cache: Some(DrcConfig::DEFAULT),
        }
    }
}

/// What every connection's [`NfsProgram`] (and the MOUNT program) share.
pub struct NfsShared {
    backend: Arc<dyn NfsBackend>,
    v41: super::v41::Nfs41State,
    key: HandleKey,
    config: NfsConfig,
    drc: Option<Arc<Drc>>,
    /// Calls per procedure and the chunks they used.
    pub counters: NfsCounters,
}

impl core::fmt::Debug for NfsShared {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("NfsShared")
            .field("key", &self.key)
            .field("config", &self.config)
            .finish()
    }
}

impl NfsShared {
    /// Shares `backend` with a fresh random handle key (and an empty duplicate request
    /// cache, allocated now, if `config` asks for one).
    pub fn new(backend: Arc<dyn NfsBackend>, config: NfsConfig) -> Arc<NfsShared> {
        Self::with_v41(backend, config, StateLimits::default(), None)
    }

    /// As [`new`](Self::new), with the NFSv4.1 state under `limits` and its leases timed
    /// by `clock` (`None`: a monotonic clock).
    pub fn with_v41(
        backend: Arc<dyn NfsBackend>,
        config: NfsConfig,
        limits: StateLimits,
        clock: Option<Clock>,
    ) -> Arc<NfsShared> {
        let key = HandleKey::new(backend.fsid());
        Arc::new(NfsShared {
            v41: Nfs41State::new(limits, clock),
            backend,
            key,
            config,
            drc: config.reply_cache.map(|c| Arc::new(Drc::new(c))),
            counters: NfsCounters::default(),
        })
    }

    /// The duplicate request cache every connection's NFS program uses, with its
    /// counters ([`Drc::stats`]).
    pub fn reply_cache(&self) -> Option<&Arc<Drc>> {
        self.drc.as_ref()
    }

    /// An NFSv3 call is about to change `k`: NFSv4.1 clients' read delegations on it are
    /// recalled, and until they are returned the call gets NFS3ERR_JUKEBOX (the NFSv3
    /// name of NFS4ERR_DELAY: retry later).
    fn breaks(&self, k: FileKey) -> Result<(), Nfsstat3> {
        self.v41
            .break_delegations(None, k, &self.counters)
            .map_err(|_| Nfsstat3::JUKEBOX)
    }

    /// The NFSv4.1 state (clients, sessions, opens).
    pub fn v41(&self) -> &Nfs41State {
        &self.v41
    }

    /// The backend.
    pub fn backend(&self) -> &dyn NfsBackend {
        &*self.backend
    }

    /// The settings.
    pub fn config(&self) -> NfsConfig {
        self.config
    }

    /// The handle of the export root (what MOUNT returns).
    pub fn root_handle(&self) -> Handle {
        self.key.seal(self.backend.root())
    }

    /// The handle of `key`.
    pub fn handle(&self, key: FileKey) -> Handle {
        self.key.seal(key)
    }

    /// The file a client's handle names; forged or foreign handles are
    /// NFS3ERR_BADHANDLE.
    pub fn open(&self, fh: &[u8]) -> Result<FileKey, Nfsstat3> {
        self.key.open(fh)
    }

    fn attr(&self, k: FileKey) -> PostOpAttr {
        self.backend.getattr(k).ok()
    }

    fn pre(&self, k: FileKey) -> Option<WccAttr> {
        self.backend.getattr(k).ok().map(|a| WccAttr::of(&a))
    }

    fn wcc(&self, k: FileKey, before: Option<WccAttr>) -> WccData {
        WccData {
            before,
            after: self.attr(k),
        }
    }

    /// Checks a name a client wants to look up or create.
    fn name(&self, name: &[u8]) -> Result<(), Nfsstat3> {
        if name.is_empty() {
            return Err(Nfsstat3::NOENT);
        }
        // Linux nfsd answers a name with a slash NFS3ERR_ACCES; so do we. NUL cannot be
        // passed to the host at all.
        if name.contains(&b'/') || name.contains(&0) {
            return Err(Nfsstat3::ACCES);
        }
        if name.len() > self.backend.limits().name_max as usize {
            return Err(Nfsstat3::NAMETOOLONG);
        }
        Ok(())
    }

    /// Checks a name that will become a new directory entry.
    fn new_name(&self, name: &[u8]) -> Result<(), Nfsstat3> {
        self.name(name)?;
        if name == b"." || name == b".." {
            return Err(Nfsstat3::EXIST);
        }
        Ok(())
    }

    /// Checks a name whose entry will be removed or renamed.
    fn old_name(&self, name: &[u8]) -> Result<(), Nfsstat3> {
        self.name(name)?;
        if name == b"." || name == b".." {
            return Err(Nfsstat3::INVAL);
        }
        Ok(())
    }
}

/// Per-connection buffers, so that results can borrow them for the reply.
#[derive(Debug, Default)]
struct Scratch {
    data: Vec<u8>,
    dir: Vec<DirEntry>,
    handles: Vec<Handle>,
    attrs: Vec<PostOpAttr>,
    fh: Option<Handle>,
}

/// NFSv3 and NFSv4.1 for one connection (the dispatcher routes by version).
#[derive(Debug)]
pub struct NfsProgram {
    shared: Arc<NfsShared>,
    s: Scratch,
    v4: Nfs41Conn,
}

impl NfsProgram {
    /// A program instance over `shared`.
    pub fn new(shared: Arc<NfsShared>) -> NfsProgram {
        NfsProgram {
            shared,
            s: Scratch::default(),
            v4: Nfs41Conn::default(),
        }
    }
}

type R = Result<(), ProcError>;

/// Decodes the arguments and checks nothing is left over (before acting on them).
fn args<'d, A: XdrCodec<'d>>(c: &mut DdpCursor<'d>) -> Result<A, ProcError> {
    let a = A::decode(c)?;
    c.finish()?;
    Ok(a)
}

fn put<'d, T: XdrCodec<'d>>(e: &mut DdpEncoder<'_, 'd>, v: &T) -> R {
    v.encode(e).map_err(ProcError::Results)
}

impl Program for NfsProgram {
    fn prog(&self) -> u32 {
        NFS_PROGRAM
    }

    fn versions(&self) -> (u32, u32) {
        (3, 4)
    }

    fn proc_info(&self, vers: u32, procedure: u32) -> Option<&'static ProcInfo> {
        match (vers, procedure) {
            (3, p) => tables::proc_info(p),
            (4, crate::nfs::v4::procs::COMPOUND) => Some(&COMPOUND_SERVED),
            _ => None,
        }
    }

    fn reply_cache(&self) -> Option<Arc<Drc>> {
        self.shared.drc.clone()
    }

    fn call<'d>(
        &'d mut self,
        call: &CallHeader<'d>,
        c: &mut DdpCursor<'d>,
        e: &mut DdpEncoder<'_, 'd>,
    ) -> R {
        let sh: &'d NfsShared = &self.shared;
        if call.vers == 4 {
            bump(&sh.counters.compounds.calls);
            return super::v41::compound(sh, &mut self.v4, c, e);
        }
        let s: &'d mut Scratch = &mut self.s;
        let p = call.procedure;
        let status = match p {
            procs::GETATTR => getattr(sh, c, e),
            procs::SETATTR => setattr(sh, c, e),
            procs::LOOKUP => lookup(sh, s, c, e),
            procs::ACCESS => access_(sh, c, e),
            procs::READLINK => readlink(sh, s, c, e),
            procs::READ => read(sh, s, c, e),
            procs::WRITE => write(sh, c, e),
            procs::CREATE | procs::MKDIR | procs::SYMLINK | procs::MKNOD => create(sh, s, p, c, e),
            procs::REMOVE | procs::RMDIR => remove(sh, p, c, e),
            procs::RENAME => rename(sh, c, e),
            procs::LINK => link(sh, c, e),
            procs::READDIR => readdir(sh, s, c, e),
            procs::READDIRPLUS => readdirplus(sh, s, c, e),
            procs::FSSTAT => fsstat(sh, c, e),
            procs::FSINFO => fsinfo(sh, c, e),
            procs::PATHCONF => pathconf(sh, c, e),
            procs::COMMIT => commit(sh, c, e),
            _ => return Err(ProcError::ProcUnavail),
        }?;
        if let Some(k) = sh.counters.nfs.get(p as usize) {
            bump(&k.calls);
            if status != Nfsstat3::OK {
                bump(&k.errors);
            }
            if !e.write_items().is_empty() {
                bump(&k.write_chunks);
            }
        }
        Ok(())
    }
}

/// Every handler returns the NFS status it answered, for the counters.
type H = Result<Nfsstat3, ProcError>;

fn done<'d, T: XdrCodec<'d>, F: XdrCodec<'d>>(e: &mut DdpEncoder<'_, 'd>, r: NfsRes<T, F>) -> H {
    let s = r.status();
    put(e, &r)?;
    Ok(s)
}

fn getattr<'d>(sh: &NfsShared, c: &mut DdpCursor<'d>, e: &mut DdpEncoder<'_, 'd>) -> H {
    let fh: NfsFh3 = args(c)?;
    let r = sh.open(fh.0).and_then(|k| sh.backend.getattr(k));
    done(
        e,
        match r {
            Ok(a) => NfsRes::Ok(a),
            Err(s) => NfsRes::<Fattr3, Void>::Fail(s, Void),
        },
    )
}

fn setattr<'d>(sh: &NfsShared, c: &mut DdpCursor<'d>, e: &mut DdpEncoder<'_, 'd>) -> H {
    let a: SetattrArgs = args(c)?;
    let k = match sh.open(a.object.0) {
        Ok(k) => k,
        Err(s) => return done(e, NfsRes::<WccData, WccData>::Fail(s, WccData::default())),
    };
    let before = sh.backend.getattr(k);
    let r = match (&before, a.guard) {
        (Err(s), _) => Err(*s),
        (Ok(b), Some(ctime)) if b.ctime != ctime => Err(Nfsstat3::NOT_SYNC),
        _ => sh
            .breaks(k)
            .and_then(|()| sh.backend.setattr(k, &a.new_attributes).map(|_| ())),
    };
    let wcc = sh.wcc(k, before.ok().map(|b| WccAttr::of(&b)));
    done(
        e,
        match r {
            Ok(()) => NfsRes::Ok(wcc),
            Err(s) => NfsRes::Fail(s, wcc),
        },
    )
}

fn lookup<'d>(
    sh: &NfsShared,
    s: &'d mut Scratch,
    c: &mut DdpCursor<'d>,
    e: &mut DdpEncoder<'_, 'd>,
) -> H {
    let a: DirOpArgs3 = args(c)?;
    let dir = match sh.open(a.dir.0) {
        Ok(k) => k,
        Err(st) => return done(e, NfsRes::<LookupOk, PostOpAttr>::Fail(st, None)),
    };
    let r = sh
        .name(a.name)
        .and_then(|()| sh.backend.lookup(dir, a.name));
    match r {
        Ok(k) => {
            let fh: &'d Handle = s.fh.insert(sh.handle(k));
            done(
                e,
                NfsRes::<_, PostOpAttr>::Ok(LookupOk {
                    object: NfsFh3(fh.as_bytes()),
                    obj_attributes: sh.attr(k),
                    dir_attributes: sh.attr(dir),
                }),
            )
        }
        Err(st) => done(e, NfsRes::<LookupOk, _>::Fail(st, sh.attr(dir))),
    }
}

fn access_<'d>(sh: &NfsShared, c: &mut DdpCursor<'d>, e: &mut DdpEncoder<'_, 'd>) -> H {
    let a: AccessArgs = args(c)?;
    let r = sh.open(a.object.0).and_then(|k| sh.backend.getattr(k));
    match r {
        Ok(attr) => {
            // The backend does not check permissions per user (see the backends), so
            // grant what the file type allows; the client still applies mode bits.
            let allowed = match attr.ftype {
                crate::nfs::v3::types::Ftype3::Dir => {
                    access::READ | access::LOOKUP | access::MODIFY | access::EXTEND | access::DELETE
                }
                _ => access::READ | access::MODIFY | access::EXTEND | access::EXECUTE,
            };
            done(
                e,
                NfsRes::<_, PostOpAttr>::Ok(AccessOk {
                    obj_attributes: Some(attr),
                    access: a.access & allowed,
                }),
            )
        }
        Err(st) => done(e, NfsRes::<AccessOk, PostOpAttr>::Fail(st, None)),
    }
}

fn readlink<'d>(
    sh: &NfsShared,
    s: &'d mut Scratch,
    c: &mut DdpCursor<'d>,
    e: &mut DdpEncoder<'_, 'd>,
) -> H {
    let fh: NfsFh3 = args(c)?;
    s.data.clear();
    let r = sh
        .open(fh.0)
        .and_then(|k| sh.backend.readlink(k, &mut s.data).map(|()| k));
    match r {
        Ok(k) => {
            let data: &'d [u8] = &s.data;
            done(
                e,
                NfsRes::<_, AttrNoData>::Ok(ReadlinkOk {
                    symlink_attributes: sh.attr(k),
                    data,
                }),
            )
        }
        Err(st) => done(e, NfsRes::<ReadlinkOk, _>::Fail(st, AttrNoData(None))),
    }
}

fn read<'d>(
    sh: &NfsShared,
    s: &'d mut Scratch,
    c: &mut DdpCursor<'d>,
    e: &mut DdpEncoder<'_, 'd>,
) -> H {
    let a: ReadArgs = args(c)?;
    let k = match sh.open(a.file.0) {
        Ok(k) => k,
        Err(st) => return done(e, NfsRes::<ReadOk, _>::Fail(st, AttrNoData(None))),
    };
    // Oversized counts are clamped to rtmax, as RFC 1813 §3.3.6 allows.
    let want = a.count.min(sh.config.max_read) as usize;
    if s.data.len() < want {
        s.data.resize(want, 0);
    }
    match sh.backend.read(k, a.offset, &mut s.data[..want]) {
        Ok(r) => {
            let data: &'d [u8] = &s.data[..r.len];
            done(
                e,
                NfsRes::<_, AttrNoData>::Ok(ReadOk {
                    file_attributes: r.attr,
                    count: r.len as u32,
                    eof: r.eof,
                    data,
                }),
            )
        }
        Err(st) => done(e, NfsRes::<ReadOk, _>::Fail(st, AttrNoData(sh.attr(k)))),
    }
}

fn write<'d>(sh: &NfsShared, c: &mut DdpCursor<'d>, e: &mut DdpEncoder<'_, 'd>) -> H {
    let a: WriteArgs = args(c)?;
    let k = match sh.open(a.file.0) {
        Ok(k) => k,
        Err(st) => return done(e, NfsRes::<WriteOk, WccData>::Fail(st, WccData::default())),
    };
    if let Err(st) = sh.breaks(k) {
        return done(e, NfsRes::<WriteOk, WccData>::Fail(st, WccData::default()));
    }
    // A WRITE larger than wtmax is cut short; the reply's count tells the client.
    let n = a.data.len().min(sh.config.max_write as usize);
    // The backend reports the attributes around the write, from the descriptor it
    // wrote through: no extra lookups on the hot path.
    match sh.backend.write(k, a.offset, &a.data[..n], a.stable) {
        Ok(w) => done(
            e,
            NfsRes::<_, WccData>::Ok(WriteOk {
                file_wcc: WccData {
                    before: w.before,
                    after: w.after,
                },
                count: n as u32,
                committed: w.committed,
                verf: sh.backend.write_verifier(),
            }),
        ),
        Err(st) => done(e, NfsRes::<WriteOk, _>::Fail(st, sh.wcc(k, None))),
    }
}

fn create<'d>(
    sh: &NfsShared,
    s: &'d mut Scratch,
    p: u32,
    c: &mut DdpCursor<'d>,
    e: &mut DdpEncoder<'_, 'd>,
) -> H {
    // Decode first, whatever the procedure: malformed arguments are GARBAGE_ARGS before
    // anything is looked at.
    enum Op<'a> {
        Create(CreateHow3),
        Mkdir(Sattr3),
        Symlink(Sattr3, &'a [u8]),
        Mknod(crate::nfs::v3::args::MknodData),
    }
    let (place, op) = match p {
        procs::CREATE => {
            let a: CreateArgs = args(c)?;
            (a.place, Op::Create(a.how))
        }
        procs::MKDIR => {
            let a: MkdirArgs = args(c)?;
            (a.place, Op::Mkdir(a.attributes))
        }
        procs::SYMLINK => {
            let a: SymlinkArgs = args(c)?;
            (a.place, Op::Symlink(a.attributes, a.target))
        }
        _ => {
            let a: MknodArgs = args(c)?;
            (a.place, Op::Mknod(a.what))
        }
    };
    let dir = match sh.open(place.dir.0) {
        Ok(k) => k,
        Err(st) => return done(e, NfsRes::<CreateOk, WccData>::Fail(st, WccData::default())),
    };
    let before = sh.pre(dir);
    let b = &sh.backend;
    let r = sh.new_name(place.name).and_then(|()| match op {
        Op::Create(how) => {
            let (mode, attrs) = match how {
                CreateHow3::Unchecked(a) => (CreateMode::Unchecked, a),
                CreateHow3::Guarded(a) => (CreateMode::Guarded, a),
                CreateHow3::Exclusive(v) => (CreateMode::Exclusive(v), Sattr3::default()),
            };
            b.create(dir, place.name, mode, &attrs)
        }
        Op::Mkdir(a) => b.mkdir(dir, place.name, &a),
        Op::Symlink(a, target) => {
            if target.contains(&0) {
                Err(Nfsstat3::INVAL)
            } else {
                b.symlink(dir, place.name, target, &a)
            }
        }
        Op::Mknod(what) => b.mknod(dir, place.name, &what),
    });
    let dir_wcc = sh.wcc(dir, before);
    match r {
        Ok(k) => {
            let fh: &'d Handle = s.fh.insert(sh.handle(k));
            done(
                e,
                NfsRes::<_, WccData>::Ok(CreateOk {
                    obj: Some(NfsFh3(fh.as_bytes())),
                    obj_attributes: sh.attr(k),
                    dir_wcc,
                }),
            )
        }
        Err(st) => done(e, NfsRes::<CreateOk, _>::Fail(st, dir_wcc)),
    }
}

fn remove<'d>(sh: &NfsShared, p: u32, c: &mut DdpCursor<'d>, e: &mut DdpEncoder<'_, 'd>) -> H {
    let a: DirOpArgs3 = args(c)?;
    let dir = match sh.open(a.dir.0) {
        Ok(k) => k,
        Err(st) => return done(e, NfsRes::<WccData, WccData>::Fail(st, WccData::default())),
    };
    let before = sh.pre(dir);
    let r = sh.old_name(a.name).and_then(|()| {
        if let Ok(k) = sh.backend.lookup(dir, a.name) {
            sh.breaks(k)?;
        }
        if p == procs::RMDIR {
            sh.backend.rmdir(dir, a.name)
        } else {
            sh.backend.remove(dir, a.name)
        }
    });
    let wcc = sh.wcc(dir, before);
    done(
        e,
        match r {
            Ok(()) => NfsRes::Ok(wcc),
            Err(st) => NfsRes::Fail(st, wcc),
        },
    )
}

fn rename<'d>(sh: &NfsShared, c: &mut DdpCursor<'d>, e: &mut DdpEncoder<'_, 'd>) -> H {
    let a: RenameArgs = args(c)?;
    let dirs = sh
        .open(a.from.dir.0)
        .and_then(|f| Ok((f, sh.open(a.to.dir.0)?)));
    let (from, to) = match dirs {
        Ok(d) => d,
        Err(st) => {
            let none = RenameWcc {
                fromdir_wcc: WccData::default(),
                todir_wcc: WccData::default(),
            };
            return done(e, NfsRes::<RenameWcc, RenameWcc>::Fail(st, none));
        }
    };
    let (b1, b2) = (sh.pre(from), sh.pre(to));
    let r = sh
        .old_name(a.from.name)
        .and_then(|()| sh.new_name(a.to.name))
        .and_then(|()| {
            for (d, n) in [(from, a.from.name), (to, a.to.name)] {
                if let Ok(k) = sh.backend.lookup(d, n) {
                    sh.breaks(k)?;
                }
            }
            sh.backend.rename(from, a.from.name, to, a.to.name)
        });
    let w = RenameWcc {
        fromdir_wcc: sh.wcc(from, b1),
        todir_wcc: sh.wcc(to, b2),
    };
    done(
        e,
        match r {
            Ok(()) => NfsRes::Ok(w),
            Err(st) => NfsRes::Fail(st, w),
        },
    )
}

fn link<'d>(sh: &NfsShared, c: &mut DdpCursor<'d>, e: &mut DdpEncoder<'_, 'd>) -> H {
    let a: LinkArgs = args(c)?;
    let keys = sh
        .open(a.file.0)
        .and_then(|f| Ok((f, sh.open(a.link.dir.0)?)));
    let (file, dir) = match keys {
        Ok(k) => k,
        Err(st) => {
            let none = LinkWcc {
                file_attributes: None,
                linkdir_wcc: WccData::default(),
            };
            return done(e, NfsRes::<LinkWcc, LinkWcc>::Fail(st, none));
        }
    };
    let before = sh.pre(dir);
    let r = sh
        .new_name(a.link.name)
        .and_then(|()| sh.backend.link(file, dir, a.link.name));
    let w = LinkWcc {
        file_attributes: sh.attr(file),
        linkdir_wcc: sh.wcc(dir, before),
    };
    done(
        e,
        match r {
            Ok(()) => NfsRes::Ok(w),
            Err(st) => NfsRes::Fail(st, w),
        },
    )
}

/// Checks a READDIR cookie against the directory's verifier: a non-zero cookie with a
/// non-zero verifier that is no longer current is NFS3ERR_BAD_COOKIE (RFC 1813
/// §3.3.16); an all-zero verifier is accepted, as clients send one with cookie 0 and
/// some send it on every call.
fn check_cookie(cookie: u64, sent: &Verf, now: &Verf) -> Result<(), Nfsstat3> {
    if cookie != 0 && *sent != Verf::default() && sent != now {
        return Err(Nfsstat3::BAD_COOKIE);
    }
    Ok(())
}

/// READDIR3resok without entries: status, post_op_attr, verifier, list end, eof.
const READDIR_FIXED: usize = 4 + 88 + 8 + 4 + 4;

fn readdir<'d>(
    sh: &NfsShared,
    s: &'d mut Scratch,
    c: &mut DdpCursor<'d>,
    e: &mut DdpEncoder<'_, 'd>,
) -> H {
    let a: ReaddirArgs = args(c)?;
    let dir = match sh.open(a.dir.0) {
        Ok(k) => k,
        Err(st) => return done(e, NfsRes::<ReaddirOk, PostOpAttr>::Fail(st, None)),
    };
    let budget = a.count.min(sh.config.max_readdir) as usize;
    s.dir.clear();
    let r = sh.backend.cookieverf(dir).and_then(|verf| {
        check_cookie(a.cookie, &a.cookieverf, &verf)?;
        // Each entry takes at least 24 octets: ask for no more than could fit.
        let max = budget.saturating_sub(READDIR_FIXED) / 24 + 1;
        let eof = sh.backend.readdir(dir, a.cookie, max, &mut s.dir)?;
        Ok((verf, eof))
    });
    let (verf, eof) = match r {
        Ok(v) => v,
        Err(st) => return done(e, NfsRes::<ReaddirOk, _>::Fail(st, sh.attr(dir))),
    };
    let mut used = READDIR_FIXED;
    let mut entries = Vec::with_capacity(s.dir.len());
    for d in s.dir.iter() {
        let n = Entry3::xdr_len(d.name.len());
        if used + n > budget {
            break;
        }
        used += n;
        entries.push(Entry3 {
            fileid: d.key.id,
            name: &d.name,
            cookie: d.cookie,
        });
    }
    if entries.is_empty() && !s.dir.is_empty() {
        return done(
            e,
            NfsRes::<ReaddirOk, _>::Fail(Nfsstat3::TOOSMALL, sh.attr(dir)),
        );
    }
    let eof = eof && entries.len() == s.dir.len();
    done(
        e,
        NfsRes::<_, PostOpAttr>::Ok(ReaddirOk {
            dir_attributes: sh.attr(dir),
            cookieverf: verf,
            entries,
            eof,
        }),
    )
}

fn readdirplus<'d>(
    sh: &NfsShared,
    s: &'d mut Scratch,
    c: &mut DdpCursor<'d>,
    e: &mut DdpEncoder<'_, 'd>,
) -> H {
    let a: ReaddirplusArgs = args(c)?;
    let dir = match sh.open(a.dir.0) {
        Ok(k) => k,
        Err(st) => return done(e, NfsRes::<ReaddirplusOk, PostOpAttr>::Fail(st, None)),
    };
    let budget = a.maxcount.min(sh.config.max_readdir) as usize;
    let dircount = a.dircount as usize;
    s.dir.clear();
    s.handles.clear();
    s.attrs.clear();
    let r = sh.backend.cookieverf(dir).and_then(|verf| {
        check_cookie(a.cookie, &a.cookieverf, &verf)?;
        // With attributes and a handle each entry takes at least 24 + 88 + 4 + 40.
        let max = budget.saturating_sub(READDIR_FIXED) / 156 + 1;
        let eof = sh.backend.readdir(dir, a.cookie, max, &mut s.dir)?;
        Ok((verf, eof))
    });
    let (verf, eof) = match r {
        Ok(v) => v,
        Err(st) => return done(e, NfsRes::<ReaddirplusOk, _>::Fail(st, sh.attr(dir))),
    };
    for d in s.dir.iter() {
        s.handles.push(sh.handle(d.key));
        s.attrs.push(sh.attr(d.key));
    }
    let (dirs, handles, attrs): (&'d [DirEntry], &'d [Handle], &'d [PostOpAttr]) =
        (&s.dir, &s.handles, &s.attrs);
    let mut used = READDIR_FIXED;
    let mut names = 0usize;
    let mut entries = Vec::with_capacity(dirs.len());
    for ((d, h), at) in dirs.iter().zip(handles).zip(attrs) {
        let entry = EntryPlus3 {
            fileid: d.key.id,
            name: &d.name,
            cookie: d.cookie,
            name_attributes: *at,
            name_handle: Some(NfsFh3(h.as_bytes())),
        };
        let (n, dn) = entry.xdr_len();
        if used + n > budget || (dircount > 0 && names + dn > dircount && !entries.is_empty()) {
            break;
        }
        used += n;
        names += dn;
        entries.push(entry);
    }
    if entries.is_empty() && !dirs.is_empty() {
        return done(
            e,
            NfsRes::<ReaddirplusOk, _>::Fail(Nfsstat3::TOOSMALL, sh.attr(dir)),
        );
    }
    let eof = eof && entries.len() == dirs.len();
    done(
        e,
        NfsRes::<_, PostOpAttr>::Ok(ReaddirplusOk {
            dir_attributes: sh.attr(dir),
            cookieverf: verf,
            entries,
            eof,
        }),
    )
}

fn fsstat<'d>(sh: &NfsShared, c: &mut DdpCursor<'d>, e: &mut DdpEncoder<'_, 'd>) -> H {
    let fh: NfsFh3 = args(c)?;
    let r = sh.open(fh.0).and_then(|k| Ok((k, sh.backend.fsstat(k)?)));
    match r {
        Ok((k, f)) => done(
            e,
            NfsRes::<_, PostOpAttr>::Ok(FsstatOk {
                obj_attributes: sh.attr(k),
                tbytes: f.tbytes,
                fbytes: f.fbytes,
                abytes: f.abytes,
                tfiles: f.tfiles,
                ffiles: f.ffiles,
                afiles: f.afiles,
                invarsec: 0,
            }),
        ),
        Err(st) => done(e, NfsRes::<FsstatOk, PostOpAttr>::Fail(st, None)),
    }
}

fn fsinfo<'d>(sh: &NfsShared, c: &mut DdpCursor<'d>, e: &mut DdpEncoder<'_, 'd>) -> H {
    let fh: NfsFh3 = args(c)?;
    let r = sh
        .open(fh.0)
        .and_then(|k| sh.backend.getattr(k).map(|a| (k, a)));
    match r {
        Ok((_, attr)) => {
            let l = sh.backend.limits();
            let cfg = sh.config;
            let mut properties = fsf::HOMOGENEOUS | fsf::CANSETTIME;
            if l.links {
                properties |= fsf::LINK;
            }
            if l.symlinks {
                properties |= fsf::SYMLINK;
            }
            done(
                e,
                NfsRes::<_, PostOpAttr>::Ok(FsinfoOk {
                    obj_attributes: Some(attr),
                    rtmax: cfg.max_read,
                    rtpref: cfg.max_read,
                    rtmult: 4096,
                    wtmax: cfg.max_write,
                    wtpref: cfg.max_write,
                    wtmult: 4096,
                    dtpref: cfg.max_readdir,
                    maxfilesize: l.max_file_size,
                    time_delta: NfsTime3 {
                        seconds: 0,
                        nseconds: 1,
                    },
                    properties,
                }),
            )
        }
        Err(st) => done(e, NfsRes::<FsinfoOk, PostOpAttr>::Fail(st, None)),
    }
}

fn pathconf<'d>(sh: &NfsShared, c: &mut DdpCursor<'d>, e: &mut DdpEncoder<'_, 'd>) -> H {
    let fh: NfsFh3 = args(c)?;
    let r = sh.open(fh.0).and_then(|k| sh.backend.getattr(k));
    match r {
        Ok(attr) => {
            let l = sh.backend.limits();
            done(
                e,
                NfsRes::<_, PostOpAttr>::Ok(PathconfOk {
                    obj_attributes: Some(attr),
                    linkmax: l.link_max,
                    name_max: l.name_max,
                    no_trunc: true,
                    chown_restricted: true,
                    case_insensitive: false,
                    case_preserving: true,
                }),
            )
        }
        Err(st) => done(e, NfsRes::<PathconfOk, PostOpAttr>::Fail(st, None)),
    }
}

fn commit<'d>(sh: &NfsShared, c: &mut DdpCursor<'d>, e: &mut DdpEncoder<'_, 'd>) -> H {
    let a: CommitArgs = args(c)?;
    let k = match sh.open(a.file.0) {
        Ok(k) => k,
        Err(st) => return done(e, NfsRes::<CommitOk, WccData>::Fail(st, WccData::default())),
    };
    let before = sh.pre(k);
    let r = sh.backend.commit(k);
    let wcc = sh.wcc(k, before);
    done(
        e,
        match r {
            Ok(()) => NfsRes::Ok(CommitOk {
                file_wcc: wcc,
                verf: sh.backend.write_verifier(),
            }),
            Err(st) => NfsRes::Fail(st, wcc),
        },
    )
}
