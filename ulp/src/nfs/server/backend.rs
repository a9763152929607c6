//! [`NfsBackend`]: what an appliance implements to be served as NFSv3.
//!
//! The backend works with [`FileKey`]s (a file number and a generation); the server turns
//! them into opaque, keyed-hash-protected NFS file handles ([`super::handle`]) and
//! back, so a backend never sees a forged handle: the server answers those with
//! NFS3ERR_BADHANDLE itself. A key that was valid once but names nothing any more is
//! the backend's to refuse with NFS3ERR_STALE.
//!
//! Methods take `&self` and may be called from several connections' poller threads and
//! the TCP threads at once: backends synchronize internally. Names are raw octets
//! (NFSv3 does not say which character set); the server has already refused empty
//! names, names with `/` or NUL, and names longer than [`FsLimits::name_max`].

use super::super::v3::args::{MknodData, StableHow};
use super::super::v3::types::{Fattr3, Nfsstat3, Sattr3, Verf, WccAttr};

/// A file as the backend identifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct FileKey {
    /// File number (`fileid3`): unique within the file system while the file exists.
    pub id: u64,
    /// Generation: distinguishes files that reuse a number, so that a handle to a
    /// deleted file stays stale after its number is reused. 0 when the backend cannot
    /// tell.
    pub gen: u32,
}

/// How CREATE treats an existing file (`createmode3` without the attributes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateMode {
    /// Use the existing file (its size set by the attributes, if given).
    Unchecked,
    /// Fail with NFS3ERR_EXIST if it exists.
    Guarded,
    /// Exclusive create with this verifier: a retransmission with the same verifier
    /// finds the file it created and succeeds (RFC 1813 §3.3.8).
    Exclusive(Verf),
}

/// One directory entry from [`NfsBackend::readdir`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's file.
    pub key: FileKey,
    /// Its name.
    pub name: Vec<u8>,
    /// The cookie that continues the listing after this entry (never 0).
    pub cookie: u64,
}

/// What [`NfsBackend::read`] did. The attributes come with it because the backend has
/// the file open anyway, and looking them up again would cost as much as the READ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadDone {
    /// Octets read into the caller's buffer.
    pub len: usize,
    /// Whether they reach the end of the file.
    pub eof: bool,
    /// The file's attributes after the read, if known.
    pub attr: Option<Fattr3>,
}

/// What [`NfsBackend::write`] did, with the file's attributes around it (WRITE's
/// `wcc_data`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteDone {
    /// How durable the data is (at least what was asked).
    pub committed: StableHow,
    /// Attributes before the write, if known.
    pub before: Option<WccAttr>,
    /// Attributes after the write, if known.
    pub after: Option<Fattr3>,
}

/// Space figures for FSSTAT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FsSpace {
    /// Total octets.
    pub tbytes: u64,
    /// Free octets.
    pub fbytes: u64,
    /// Free octets for unprivileged users.
    pub abytes: u64,
    /// Total file slots.
    pub tfiles: u64,
    /// Free file slots.
    pub ffiles: u64,
    /// Free file slots for unprivileged users.
    pub afiles: u64,
}

/// Static properties for FSINFO and PATHCONF.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsLimits {
    /// Longest file name.
    pub name_max: u32,
    /// Most hard links to a file.
    pub link_max: u32,
    /// Largest file.
    pub max_file_size: u64,
    /// Whether hard links are supported.
    pub links: bool,
    /// Whether symbolic links are supported.
    pub symlinks: bool,
}

impl Default for FsLimits {
    fn default() -> Self {
        FsLimits {
            name_max: 255,
            link_max: 32_000,
            max_file_size: i64::MAX as u64,
            links: true,
            symlinks: true,
        }
    }
}

/// A file system served over NFSv3.
pub trait NfsBackend: Send + Sync {
    /// The export's root directory.
    fn root(&self) -> FileKey;

    /// File system identifier (`fsid3`), also bound into the handles.
    fn fsid(&self) -> u64;

    /// Static limits.
    fn limits(&self) -> FsLimits {
        FsLimits::default()
    }

    /// Attributes of a file.
    fn getattr(&self, file: FileKey) -> Result<Fattr3, Nfsstat3>;

    /// Changes attributes; returns the new ones.
    fn setattr(&self, file: FileKey, attrs: &Sattr3) -> Result<Fattr3, Nfsstat3>;

    /// Looks `name` up in `dir`. `"."` is `dir`; `".."` is its parent, and the root's
    /// parent is the root (the export is the whole world). Symbolic links are returned,
    /// never followed.
    fn lookup(&self, dir: FileKey, name: &[u8]) -> Result<FileKey, Nfsstat3>;

    /// The target of a symbolic link, appended to `out`.
    fn readlink(&self, link: FileKey, out: &mut Vec<u8>) -> Result<(), Nfsstat3>;

    /// Reads at `offset` into `buf`. Past the end: 0 octets and end of file.
    fn read(&self, file: FileKey, offset: u64, buf: &mut [u8]) -> Result<ReadDone, Nfsstat3>;

    /// Writes `data` at `offset`, at least as durably as `stable` asks.
    fn write(
        &self,
        file: FileKey,
        offset: u64,
        data: &[u8],
        stable: StableHow,
    ) -> Result<WriteDone, Nfsstat3>;

    /// Creates a regular file.
    fn create(
        &self,
        dir: FileKey,
        name: &[u8],
        mode: CreateMode,
        attrs: &Sattr3,
    ) -> Result<FileKey, Nfsstat3>;

    /// Creates a directory.
    fn mkdir(&self, dir: FileKey, name: &[u8], attrs: &Sattr3) -> Result<FileKey, Nfsstat3>;

    /// Creates a symbolic link holding `target` verbatim.
    fn symlink(
        &self,
        dir: FileKey,
        name: &[u8],
        target: &[u8],
        attrs: &Sattr3,
    ) -> Result<FileKey, Nfsstat3>;

    /// Creates a special file. Default: NFS3ERR_NOTSUPP.
    fn mknod(&self, dir: FileKey, name: &[u8], what: &MknodData) -> Result<FileKey, Nfsstat3> {
        let _ = (dir, name, what);
        Err(Nfsstat3::NOTSUPP)
    }

    /// Removes a non-directory.
    fn remove(&self, dir: FileKey, name: &[u8]) -> Result<(), Nfsstat3>;

    /// Removes an empty directory.
    fn rmdir(&self, dir: FileKey, name: &[u8]) -> Result<(), Nfsstat3>;

    /// Renames `from_dir/from_name` to `to_dir/to_name`, replacing a compatible target.
    fn rename(
        &self,
        from_dir: FileKey,
        from_name: &[u8],
        to_dir: FileKey,
        to_name: &[u8],
    ) -> Result<(), Nfsstat3>;

    /// Makes a hard link to `file` as `dir/name`.
    fn link(&self, file: FileKey, dir: FileKey, name: &[u8]) -> Result<(), Nfsstat3>;

    /// Lists `dir` after `cookie` (0: from the start), at most `max` entries, appended
    /// to `out` in cookie order; returns whether the listing reached the end. `"."` and
    /// `".."` are not listed. A cookie the backend cannot continue from is
    /// NFS3ERR_BAD_COOKIE.
    fn readdir(
        &self,
        dir: FileKey,
        cookie: u64,
        max: usize,
        out: &mut Vec<DirEntry>,
    ) -> Result<bool, Nfsstat3>;

    /// The cookie verifier of `dir` now: cookies handed out under one verifier remain
    /// valid while it stays the same. Default: the directory's mtime.
    fn cookieverf(&self, dir: FileKey) -> Result<Verf, Nfsstat3> {
        let a = self.getattr(dir)?;
        let mut v = [0u8; 8];
        v[..4].copy_from_slice(&a.mtime.seconds.to_be_bytes());
        v[4..].copy_from_slice(&a.mtime.nseconds.to_be_bytes());
        Ok(Verf(v))
    }

    /// Space figures.
    fn fsstat(&self, file: FileKey) -> Result<FsSpace, Nfsstat3>;

    /// Makes unstable writes to `file` durable.
    fn commit(&self, file: FileKey) -> Result<(), Nfsstat3>;

    /// The write verifier: it must change whenever unstable data may have been lost
    /// (e.g. a restart), so clients know to resend it.
    fn write_verifier(&self) -> Verf;
}
