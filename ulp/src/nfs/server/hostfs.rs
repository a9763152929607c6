//! [`HostFs`]: an [`NfsBackend`] serving a directory of the host, never anything outside
//! it.
//!
//! Confinement does not rely on path strings. The server holds the export root open and
//! reaches every file by walking from that descriptor one component at a time with
//! `openat(..., O_NOFOLLOW | O_DIRECTORY)`, checking at each step that the directory
//! opened is the inode the walk expected. Symbolic links are never followed: the last
//! component is acted on with `*at(..., AT_SYMLINK_NOFOLLOW)` calls or opened with
//! `O_NOFOLLOW`, so a link to `/etc` (or `../../..`) is served as a link, whose target
//! the client reads with READLINK and resolves on its own side, as NFS intends. `".."` is
//! answered from the server's own table and stops at the export root. Names with `/` or
//! NUL are refused before they reach the kernel.
//!
//! File handles carry (fsid, inode, generation) sealed by the server ([`super::handle`]);
//! the generation is derived from the file's birth time (`statx`), so a handle to a
//! deleted file stays stale when its inode number is reused;
//! this backend maps an inode back to a place through a table of the (parent, name)
//! pairs it has handed out (LOOKUP, READDIR, CREATE...), and then re-checks the inode on
//! disk. A handle whose file is gone, or whose inode is no longer at the remembered
//! place, is NFS3ERR_STALE. Handles do not survive a server restart (the table and the
//! handle key are in memory).
//!
//! Linux only (it uses `/proc/self/fd` to read directories and change modes through
//! descriptors that cannot follow links).

use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Mutex;

use super::super::v3::args::StableHow;
use super::super::v3::types::{Fattr3, Ftype3, NfsTime3, Nfsstat3, Sattr3, SetTime, Verf, WccAttr};
use super::backend::{
    CreateMode, DirEntry, FileKey, FsLimits, FsSpace, NfsBackend, ReadDone, WriteDone,
};

/// Deepest directory nesting a handle may be resolved through; guards against a
/// corrupted table looping.
const MAX_DEPTH: usize = 4096;

/// A host directory served over NFS.
#[derive(Debug)]
pub struct HostFs {
    root: OwnedFd,
    root_ino: u64,
    root_gen: u32,
    dev: u64,
    /// inode -> (parent inode, name, generation) for every file handed out.
    table: Mutex<HashMap<u64, Entry>>,
    verf: Verf,
}

fn errno() -> Nfsstat3 {
    Nfsstat3::from_io(&io::Error::last_os_error())
}

fn cstr(name: &[u8]) -> Result<CString, Nfsstat3> {
    // The server already refused these; checking again keeps the backend safe on its
    // own.
    if name.is_empty() || name.contains(&b'/') || name == b"." || name == b".." {
        return Err(Nfsstat3::ACCES);
    }
    CString::new(name).map_err(|_| Nfsstat3::ACCES)
}

fn stat_fd(fd: RawFd) -> Result<libc::stat, Nfsstat3> {
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: `st` is a valid out-pointer; fstat does not retain it.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(errno());
    }
    Ok(st)
}

fn stat_at(dir: RawFd, name: &CString) -> Result<libc::stat, Nfsstat3> {
    let mut st: libc::stat = unsafe { core::mem::zeroed() };
    // SAFETY: valid C string and out-pointer; AT_SYMLINK_NOFOLLOW never leaves `dir`.
    if unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(errno());
    }
    Ok(st)
}

fn open_at(dir: RawFd, name: &CString, flags: i32, mode: u32) -> Result<OwnedFd, Nfsstat3> {
    // SAFETY: valid C string; the returned descriptor is owned below.
    let fd = unsafe {
        libc::openat(
            dir,
            name.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            mode as libc::c_uint,
        )
    };
    if fd < 0 {
        return Err(match io::Error::last_os_error().raw_os_error() {
            // O_NOFOLLOW met a symbolic link.
            Some(libc::ELOOP) => Nfsstat3::INVAL,
            _ => errno(),
        });
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A remembered place: parent inode, name, and the file's generation.
type Entry = (u64, Vec<u8>, u32);

/// The generation of the file `name` in `dir`: derived from its birth time, which a
/// reused inode number does not share with the file that had it before. 0 where the
/// file system keeps no birth time (then only the inode number is checked).
fn gen_at(dir: RawFd, name: &std::ffi::CStr) -> u32 {
    let mut sx: libc::statx = unsafe { core::mem::zeroed() };
    // SAFETY: valid C string and out-pointer; AT_SYMLINK_NOFOLLOW stays in `dir`.
    let r = unsafe {
        libc::statx(
            dir,
            name.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_BTIME,
            &mut sx,
        )
    };
    if r != 0 || sx.stx_mask & libc::STATX_BTIME == 0 {
        return 0;
    }
    (sx.stx_btime.tv_sec as u32).rotate_left(16) ^ sx.stx_btime.tv_nsec
}

fn is_dir(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

fn is_lnk(st: &libc::stat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFLNK
}

fn time(sec: i64, nsec: i64) -> NfsTime3 {
    NfsTime3 {
        seconds: sec as u32,
        nseconds: nsec as u32,
    }
}

/// Where a file is: its directory (None: the export root's descriptor, for the root
/// itself, named ".", and for the files directly in it) and name, with its status.
struct Place {
    dir: Option<OwnedFd>,
    name: CString,
    st: libc::stat,
}

impl HostFs {
    /// Serves `root`, which must be a directory.
    pub fn new(root: &Path) -> io::Result<HostFs> {
        let c = CString::new(root.as_os_str().as_bytes())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // The root itself may be reached through links (the operator chose it); only
        // what is below it is confined.
        // SAFETY: valid C string.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fresh descriptor.
        let root = unsafe { OwnedFd::from_raw_fd(fd) };
        let st = stat_fd(root.as_raw_fd()).map_err(|_| io::Error::last_os_error())?;
        let t = NfsTime3::now();
        let mut verf = [0u8; 8];
        verf[..4].copy_from_slice(&t.seconds.to_be_bytes());
        verf[4..].copy_from_slice(&t.nseconds.to_be_bytes());
        let root_gen = gen_at(root.as_raw_fd(), c".");
        Ok(HostFs {
            root,
            root_ino: st.st_ino,
            root_gen,
            dev: st.st_dev,
            table: Mutex::new(HashMap::new()),
            verf: Verf(verf),
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn learn(&self, parent: u64, name: &[u8], st: &libc::stat, gen: u32) {
        if st.st_ino != self.root_ino {
            self.table().insert(st.st_ino, (parent, name.to_vec(), gen));
        }
    }

    /// Finds a file by walking from the root through the remembered chain.
    fn place(&self, key: FileKey) -> Result<Place, Nfsstat3> {
        if key.id == self.root_ino {
            if key.gen != self.root_gen {
                return Err(Nfsstat3::STALE);
            }
            return Ok(Place {
                dir: None,
                name: CString::from(c"."),
                st: stat_fd(self.root.as_raw_fd())?,
            });
        }
        // Chain from the file up to (not including) the root.
        let mut chain: Vec<(u64, Vec<u8>)> = Vec::new();
        {
            let t = self.table();
            let mut at = key.id;
            while at != self.root_ino {
                let (parent, name, _) = t.get(&at).ok_or(Nfsstat3::STALE)?;
                chain.push((at, name.clone()));
                if chain.len() > MAX_DEPTH {
                    return Err(Nfsstat3::STALE);
                }
                at = *parent;
            }
        }
        let (_, last) = chain.remove(0);
        let mut dir: Option<OwnedFd> = None;
        for (ino, name) in chain.iter().rev() {
            let c = cstr(name)?;
            let from = dir
                .as_ref()
                .map_or(self.root.as_raw_fd(), |d| d.as_raw_fd());
            let fd = open_at(from, &c, libc::O_RDONLY | libc::O_DIRECTORY, 0)
                .map_err(|_| Nfsstat3::STALE)?;
            let st = stat_fd(fd.as_raw_fd())?;
            if st.st_ino != *ino || st.st_dev != self.dev {
                return Err(Nfsstat3::STALE);
            }
            dir = Some(fd);
        }
        let name = cstr(&last)?;
        let from = dir
            .as_ref()
            .map_or(self.root.as_raw_fd(), |d| d.as_raw_fd());
        let st = stat_at(from, &name).map_err(|_| Nfsstat3::STALE)?;
        if st.st_ino != key.id || st.st_dev != self.dev || gen_at(from, &name) != key.gen {
            return Err(Nfsstat3::STALE);
        }
        // Directly under the root, the root descriptor serves (no dup per call).
        Ok(Place { dir, name, st })
    }

    fn dup_root(&self) -> Result<OwnedFd, Nfsstat3> {
        self.root.try_clone().map_err(|e| Nfsstat3::from_io(&e))
    }

    /// Opens a file found by `place` with `flags`, checking it is still that inode.
    fn open(&self, p: &Place, flags: i32) -> Result<OwnedFd, Nfsstat3> {
        let fd = match &p.dir {
            None => open_at(self.root.as_raw_fd(), &p.name, flags, 0)?,
            Some(d) => open_at(d.as_raw_fd(), &p.name, flags, 0)?,
        };
        let st = stat_fd(fd.as_raw_fd())?;
        if st.st_ino != p.st.st_ino || st.st_dev != self.dev {
            return Err(Nfsstat3::STALE);
        }
        Ok(fd)
    }

    fn open_dir(&self, key: FileKey) -> Result<OwnedFd, Nfsstat3> {
        let p = self.place(key)?;
        if !is_dir(&p.st) {
            return Err(Nfsstat3::NOTDIR);
        }
        if key.id == self.root_ino {
            return self.dup_root();
        }
        self.open(&p, libc::O_RDONLY | libc::O_DIRECTORY)
    }

    fn open_file(&self, key: FileKey, flags: i32) -> Result<(OwnedFd, libc::stat), Nfsstat3> {
        let p = self.place(key)?;
        if is_dir(&p.st) {
            return Err(Nfsstat3::ISDIR);
        }
        if is_lnk(&p.st) {
            return Err(Nfsstat3::INVAL);
        }
        if p.st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return Err(Nfsstat3::INVAL);
        }
        let fd = self.open(&p, flags | libc::O_NONBLOCK)?;
        Ok((fd, p.st))
    }

    fn attr(&self, st: &libc::stat) -> Fattr3 {
        let ftype = match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => Ftype3::Dir,
            libc::S_IFLNK => Ftype3::Lnk,
            libc::S_IFBLK => Ftype3::Blk,
            libc::S_IFCHR => Ftype3::Chr,
            libc::S_IFSOCK => Ftype3::Sock,
            libc::S_IFIFO => Ftype3::Fifo,
            _ => Ftype3::Reg,
        };
        Fattr3 {
            ftype,
            mode: st.st_mode & 0o7777,
            nlink: st.st_nlink as u32,
            uid: st.st_uid,
            gid: st.st_gid,
            size: st.st_size as u64,
            used: st.st_blocks as u64 * 512,
            rdev: (libc::major(st.st_rdev), libc::minor(st.st_rdev)),
            fsid: self.dev,
            fileid: st.st_ino,
            atime: time(st.st_atime, st.st_atime_nsec),
            mtime: time(st.st_mtime, st.st_mtime_nsec),
            ctime: time(st.st_ctime, st.st_ctime_nsec),
        }
    }

    /// Applies `a` to the file at `p`.
    fn apply(&self, p: &Place, a: &Sattr3) -> Result<(), Nfsstat3> {
        let dir = p
            .dir
            .as_ref()
            .map_or(self.root.as_raw_fd(), |d| d.as_raw_fd());
        if let Some(size) = a.size {
            if is_dir(&p.st) {
                return Err(Nfsstat3::ISDIR);
            }
            if p.st.st_mode & libc::S_IFMT != libc::S_IFREG {
                return Err(Nfsstat3::INVAL);
            }
            let fd = self.open(p, libc::O_WRONLY | libc::O_NONBLOCK)?;
            let size = i64::try_from(size).map_err(|_| Nfsstat3::FBIG)?;
            // SAFETY: plain syscall on an owned descriptor.
            if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
                return Err(errno());
            }
        }
        if a.uid.is_some() || a.gid.is_some() {
            let uid = a.uid.unwrap_or(u32::MAX);
            let gid = a.gid.unwrap_or(u32::MAX);
            // SAFETY: valid C string; AT_SYMLINK_NOFOLLOW acts on the entry itself.
            if unsafe { libc::fchownat(dir, p.name.as_ptr(), uid, gid, libc::AT_SYMLINK_NOFOLLOW) }
                != 0
            {
                return Err(errno());
            }
        }
        if let Some(mode) = a.mode {
            // Linux cannot change a link's mode, and chmod would follow it: skip links.
            if !is_lnk(&p.st) {
                // An O_PATH descriptor pins the inode without following links; chmod
                // through its /proc name reaches exactly that inode.
                let fd = self.open(p, libc::O_PATH)?;
                let path = CString::new(format!("/proc/self/fd/{}", fd.as_raw_fd()))
                    .map_err(|_| Nfsstat3::SERVERFAULT)?;
                // SAFETY: valid C string.
                if unsafe { libc::chmod(path.as_ptr(), (mode & 0o7777) as libc::mode_t) } != 0 {
                    return Err(errno());
                }
            }
        }
        if a.atime != SetTime::DontChange || a.mtime != SetTime::DontChange {
            let ts = |s: SetTime| match s {
                SetTime::DontChange => libc::timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_OMIT,
                },
                SetTime::ServerTime => libc::timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_NOW,
                },
                SetTime::ClientTime(t) => libc::timespec {
                    tv_sec: t.seconds as libc::time_t,
                    tv_nsec: t.nseconds.min(999_999_999) as libc::c_long,
                },
            };
            let times = [ts(a.atime), ts(a.mtime)];
            // SAFETY: valid C string and a two-element array.
            if unsafe {
                libc::utimensat(
                    dir,
                    p.name.as_ptr(),
                    times.as_ptr(),
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            } != 0
            {
                return Err(errno());
            }
        }
        Ok(())
    }

    /// Looks up `name` in the open directory `dfd` (inode `dir`), remembering it.
    fn child(
        &self,
        dfd: &OwnedFd,
        dir: u64,
        name: &[u8],
    ) -> Result<(libc::stat, FileKey), Nfsstat3> {
        let c = cstr(name)?;
        let st = stat_at(dfd.as_raw_fd(), &c)?;
        if st.st_dev != self.dev {
            // Another file system mounted inside the export: its inode numbers would
            // clash with ours, and it is not what was exported.
            return Err(Nfsstat3::ACCES);
        }
        let gen = gen_at(dfd.as_raw_fd(), &c);
        self.learn(dir, name, &st, gen);
        Ok((st, FileKey { id: st.st_ino, gen }))
    }

    fn forget_if_gone(&self, st: &libc::stat) {
        if is_dir(st) || st.st_nlink <= 1 {
            self.table().remove(&st.st_ino);
        }
    }
}

impl NfsBackend for HostFs {
    fn root(&self) -> FileKey {
        FileKey {
            id: self.root_ino,
            gen: self.root_gen,
        }
    }

    fn fsid(&self) -> u64 {
        self.dev
    }

    fn limits(&self) -> FsLimits {
        FsLimits::default()
    }

    fn getattr(&self, file: FileKey) -> Result<Fattr3, Nfsstat3> {
        Ok(self.attr(&self.place(file)?.st))
    }

    fn setattr(&self, file: FileKey, attrs: &Sattr3) -> Result<Fattr3, Nfsstat3> {
        let p = self.place(file)?;
        self.apply(&p, attrs)?;
        self.getattr(file)
    }

    fn lookup(&self, dir: FileKey, name: &[u8]) -> Result<FileKey, Nfsstat3> {
        match name {
            b"." => {
                self.open_dir(dir)?;
                Ok(dir)
            }
            b".." => {
                self.open_dir(dir)?;
                if dir.id == self.root_ino {
                    return Ok(dir);
                }
                let t = self.table();
                let parent = t.get(&dir.id).map(|e| e.0).ok_or(Nfsstat3::STALE)?;
                if parent == self.root_ino {
                    return Ok(self.root());
                }
                let gen = t.get(&parent).map(|e| e.2).ok_or(Nfsstat3::STALE)?;
                Ok(FileKey { id: parent, gen })
            }
            _ => {
                let dfd = self.open_dir(dir)?;
                self.child(&dfd, dir.id, name).map(|(_, k)| k)
            }
        }
    }

    fn readlink(&self, link: FileKey, out: &mut Vec<u8>) -> Result<(), Nfsstat3> {
        let p = self.place(link)?;
        if !is_lnk(&p.st) {
            return Err(Nfsstat3::INVAL);
        }
        let dir = p
            .dir
            .as_ref()
            .map_or(self.root.as_raw_fd(), |d| d.as_raw_fd());
        let mut buf = vec![0u8; 4096];
        // SAFETY: the buffer is valid for its length.
        let n =
            unsafe { libc::readlinkat(dir, p.name.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(errno());
        }
        out.extend_from_slice(&buf[..n as usize]);
        Ok(())
    }

    fn read(&self, file: FileKey, offset: u64, buf: &mut [u8]) -> Result<ReadDone, Nfsstat3> {
        let (fd, _) = self.open_file(file, libc::O_RDONLY)?;
        let mut done = 0usize;
        while done < buf.len() {
            let at = offset.saturating_add(done as u64);
            let Ok(at) = i64::try_from(at) else { break };
            // SAFETY: the destination is the unfilled rest of `buf`.
            let n = unsafe {
                libc::pread(
                    fd.as_raw_fd(),
                    buf[done..].as_mut_ptr().cast(),
                    buf.len() - done,
                    at,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(Nfsstat3::from_io(&e));
            }
            if n == 0 {
                break;
            }
            done += n as usize;
        }
        let st = stat_fd(fd.as_raw_fd())?;
        Ok(ReadDone {
            len: done,
            eof: offset.saturating_add(done as u64) >= st.st_size as u64,
            attr: Some(self.attr(&st)),
        })
    }

    fn write(
        &self,
        file: FileKey,
        offset: u64,
        data: &[u8],
        stable: StableHow,
    ) -> Result<WriteDone, Nfsstat3> {
        let (fd, st) = self.open_file(file, libc::O_WRONLY)?;
        let before = Some(WccAttr::of(&self.attr(&st)));
        let mut done = 0usize;
        while done < data.len() {
            let at =
                i64::try_from(offset.saturating_add(done as u64)).map_err(|_| Nfsstat3::FBIG)?;
            // SAFETY: the source is the unwritten rest of `data`.
            let n = unsafe {
                libc::pwrite(
                    fd.as_raw_fd(),
                    data[done..].as_ptr().cast(),
                    data.len() - done,
                    at,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(Nfsstat3::from_io(&e));
            }
            done += n as usize;
        }
        match stable {
            StableHow::Unstable => {}
            // SAFETY: plain syscalls on an owned descriptor.
            StableHow::DataSync => {
                if unsafe { libc::fdatasync(fd.as_raw_fd()) } != 0 {
                    return Err(errno());
                }
            }
            StableHow::FileSync => {
                if unsafe { libc::fsync(fd.as_raw_fd()) } != 0 {
                    return Err(errno());
                }
            }
        }
        Ok(WriteDone {
            committed: stable,
            before,
            after: stat_fd(fd.as_raw_fd()).ok().map(|st| self.attr(&st)),
        })
    }

    fn create(
        &self,
        dir: FileKey,
        name: &[u8],
        mode: CreateMode,
        attrs: &Sattr3,
    ) -> Result<FileKey, Nfsstat3> {
        let dfd = self.open_dir(dir)?;
        let c = cstr(name)?;
        let perm = attrs.mode.unwrap_or(0o644) & 0o7777;
        let excl = !matches!(mode, CreateMode::Unchecked);
        let flags =
            libc::O_CREAT | libc::O_WRONLY | libc::O_NONBLOCK | if excl { libc::O_EXCL } else { 0 };
        match open_at(dfd.as_raw_fd(), &c, flags, perm) {
            Ok(_) => {}
            Err(Nfsstat3::EXIST) => {
                if let CreateMode::Exclusive(v) = mode {
                    // A retransmitted exclusive create finds its verifier in the times
                    // (where Linux nfsd keeps it too).
                    let (st, k) = self.child(&dfd, dir.id, name)?;
                    let (a, m) = verf_times(&v);
                    if st.st_atime as u32 == a && st.st_mtime as u32 == m {
                        return Ok(k);
                    }
                }
                return Err(Nfsstat3::EXIST);
            }
            // O_NOFOLLOW refused an existing link of that name.
            Err(Nfsstat3::INVAL) => return Err(Nfsstat3::EXIST),
            Err(e) => return Err(e),
        }
        let (_, key) = self.child(&dfd, dir.id, name)?;
        let p = self.place(key)?;
        match mode {
            CreateMode::Exclusive(v) => {
                let (a, m) = verf_times(&v);
                let set = Sattr3 {
                    atime: SetTime::ClientTime(NfsTime3 {
                        seconds: a,
                        nseconds: 0,
                    }),
                    mtime: SetTime::ClientTime(NfsTime3 {
                        seconds: m,
                        nseconds: 0,
                    }),
                    ..Sattr3::default()
                };
                self.apply(&p, &set)?;
            }
            _ => {
                // The mode went in with the open (less the umask); set it exactly.
                self.apply(&p, attrs)?;
            }
        }
        Ok(key)
    }

    fn mkdir(&self, dir: FileKey, name: &[u8], attrs: &Sattr3) -> Result<FileKey, Nfsstat3> {
        let dfd = self.open_dir(dir)?;
        let c = cstr(name)?;
        let perm = attrs.mode.unwrap_or(0o755) & 0o7777;
        // SAFETY: valid C string.
        if unsafe { libc::mkdirat(dfd.as_raw_fd(), c.as_ptr(), perm as libc::mode_t) } != 0 {
            return Err(errno());
        }
        let (_, key) = self.child(&dfd, dir.id, name)?;
        self.apply(
            &self.place(key)?,
            &Sattr3 {
                size: None,
                ..*attrs
            },
        )?;
        Ok(key)
    }

    fn symlink(
        &self,
        dir: FileKey,
        name: &[u8],
        target: &[u8],
        _attrs: &Sattr3,
    ) -> Result<FileKey, Nfsstat3> {
        let dfd = self.open_dir(dir)?;
        let c = cstr(name)?;
        // Stored verbatim: the server never follows it.
        let t = CString::new(target).map_err(|_| Nfsstat3::INVAL)?;
        // SAFETY: valid C strings.
        if unsafe { libc::symlinkat(t.as_ptr(), dfd.as_raw_fd(), c.as_ptr()) } != 0 {
            return Err(errno());
        }
        self.child(&dfd, dir.id, name).map(|(_, k)| k)
    }

    fn remove(&self, dir: FileKey, name: &[u8]) -> Result<(), Nfsstat3> {
        let dfd = self.open_dir(dir)?;
        let c = cstr(name)?;
        let st = stat_at(dfd.as_raw_fd(), &c)?;
        if is_dir(&st) {
            return Err(Nfsstat3::ISDIR);
        }
        // SAFETY: valid C string.
        if unsafe { libc::unlinkat(dfd.as_raw_fd(), c.as_ptr(), 0) } != 0 {
            return Err(errno());
        }
        self.forget_if_gone(&st);
        Ok(())
    }

    fn rmdir(&self, dir: FileKey, name: &[u8]) -> Result<(), Nfsstat3> {
        match name {
            b"." => return Err(Nfsstat3::INVAL),
            b".." => return Err(Nfsstat3::NOTEMPTY),
            _ => {}
        }
        let dfd = self.open_dir(dir)?;
        let c = cstr(name)?;
        let st = stat_at(dfd.as_raw_fd(), &c)?;
        if !is_dir(&st) {
            return Err(Nfsstat3::NOTDIR);
        }
        // SAFETY: valid C string.
        if unsafe { libc::unlinkat(dfd.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) } != 0 {
            return Err(errno());
        }
        self.forget_if_gone(&st);
        Ok(())
    }

    fn rename(
        &self,
        from_dir: FileKey,
        from_name: &[u8],
        to_dir: FileKey,
        to_name: &[u8],
    ) -> Result<(), Nfsstat3> {
        let fd1 = self.open_dir(from_dir)?;
        let fd2 = self.open_dir(to_dir)?;
        let (c1, c2) = (cstr(from_name)?, cstr(to_name)?);
        let st = stat_at(fd1.as_raw_fd(), &c1)?;
        let replaced = stat_at(fd2.as_raw_fd(), &c2).ok();
        // SAFETY: valid C strings; renameat never follows links in either name.
        if unsafe { libc::renameat(fd1.as_raw_fd(), c1.as_ptr(), fd2.as_raw_fd(), c2.as_ptr()) }
            != 0
        {
            return Err(errno());
        }
        if let Some(old) = replaced.filter(|o| o.st_ino != st.st_ino) {
            self.forget_if_gone(&old);
        }
        let gen = gen_at(fd2.as_raw_fd(), &c2);
        self.learn(to_dir.id, to_name, &st, gen);
        Ok(())
    }

    fn link(&self, file: FileKey, dir: FileKey, name: &[u8]) -> Result<(), Nfsstat3> {
        let p = self.place(file)?;
        if is_dir(&p.st) {
            return Err(Nfsstat3::ISDIR);
        }
        let from = p
            .dir
            .as_ref()
            .map_or(self.root.as_raw_fd(), |d| d.as_raw_fd());
        let dfd = self.open_dir(dir)?;
        let c = cstr(name)?;
        // SAFETY: valid C strings; flags 0 links the entry itself, not a link's target.
        if unsafe { libc::linkat(from, p.name.as_ptr(), dfd.as_raw_fd(), c.as_ptr(), 0) } != 0 {
            return Err(errno());
        }
        Ok(())
    }

    fn readdir(
        &self,
        dir: FileKey,
        cookie: u64,
        max: usize,
        out: &mut Vec<DirEntry>,
    ) -> Result<bool, Nfsstat3> {
        use std::os::unix::fs::DirEntryExt;
        let dfd = self.open_dir(dir)?;
        // The /proc name of a descriptor is that directory, whatever happened to its
        // path.
        let rd = std::fs::read_dir(format!("/proc/self/fd/{}", dfd.as_raw_fd()))
            .map_err(|e| Nfsstat3::from_io(&e))?;
        let mut names: Vec<(Vec<u8>, u64)> = Vec::new();
        for e in rd {
            let e = e.map_err(|e| Nfsstat3::from_io(&e))?;
            names.push((e.file_name().as_bytes().to_vec(), e.ino()));
        }
        // Cookies are positions in name order, valid while the directory's mtime (the
        // cookie verifier) is unchanged.
        names.sort_unstable();
        let skip = usize::try_from(cookie).map_err(|_| Nfsstat3::BAD_COOKIE)?;
        if skip > names.len() {
            return Err(Nfsstat3::BAD_COOKIE);
        }
        let mut t = self.table();
        for (i, (name, ino)) in names.iter().enumerate().skip(skip).take(max) {
            let gen = CString::new(name.as_slice()).map_or(0, |c| gen_at(dfd.as_raw_fd(), &c));
            t.insert(*ino, (dir.id, name.clone(), gen));
            out.push(DirEntry {
                key: FileKey { id: *ino, gen },
                name: name.clone(),
                cookie: i as u64 + 1,
            });
        }
        Ok(skip + max >= names.len())
    }

    fn fsstat(&self, file: FileKey) -> Result<FsSpace, Nfsstat3> {
        self.place(file)?;
        let mut s: libc::statvfs = unsafe { core::mem::zeroed() };
        // SAFETY: valid out-pointer.
        if unsafe { libc::fstatvfs(self.root.as_raw_fd(), &mut s) } != 0 {
            return Err(errno());
        }
        let f = s.f_frsize as u64;
        Ok(FsSpace {
            tbytes: s.f_blocks as u64 * f,
            fbytes: s.f_bfree as u64 * f,
            abytes: s.f_bavail as u64 * f,
            tfiles: s.f_files as u64,
            ffiles: s.f_ffree as u64,
            afiles: s.f_favail as u64,
        })
    }

    fn commit(&self, file: FileKey) -> Result<(), Nfsstat3> {
        let (fd, _) = self.open_file(file, libc::O_RDONLY)?;
        // SAFETY: plain syscall on an owned descriptor.
        if unsafe { libc::fsync(fd.as_raw_fd()) } != 0 {
            return Err(errno());
        }
        Ok(())
    }

    fn write_verifier(&self) -> Verf {
        self.verf
    }
}

fn verf_times(v: &Verf) -> (u32, u32) {
    let a = u32::from_be_bytes([v.0[0], v.0[1], v.0[2], v.0[3]]);
    let m = u32::from_be_bytes([v.0[4], v.0[5], v.0[6], v.0[7]]);
    // Keep the seconds positive as a signed time_t on 32-bit readers.
    (a & 0x7fff_ffff, m & 0x7fff_ffff)
}
