//! The NFSv3 data types shared by many procedures (RFC 1813 §2.5-§2.6): status codes,
//! file handles, attributes and weak cache consistency data, with their XDR codecs.

use crate::ddp::{DdpCursor, DdpDecodeError, DdpEncodeError, DdpEncoder, XdrCodec};

/// NFS3_FHSIZE: the largest file handle (RFC 1813 §2.4).
pub const NFS3_FHSIZE: u32 = 64;
/// NFS3_COOKIEVERFSIZE, NFS3_CREATEVERFSIZE, NFS3_WRITEVERFSIZE: all 8 octets.
pub const NFS3_VERFSIZE: usize = 8;
/// Longest file name the decoders accept. Names longer than the server's `name_max`
/// but within this bound decode, so that the server can answer NFS3ERR_NAMETOOLONG as
/// RFC 1813 asks instead of GARBAGE_ARGS.
pub const MAX_NAME_DECODE: u32 = 1024;
/// Longest path (symbolic link target) the decoders accept (PATH_MAX).
pub const MAX_PATH_DECODE: u32 = 4096;

/// `nfsstat3` (RFC 1813 §2.6). A newtype rather than an enum so that a client decoding a
/// status this crate does not know still gets the number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Nfsstat3(pub u32);

impl Nfsstat3 {
    /// NFS3_OK.
    pub const OK: Nfsstat3 = Nfsstat3(0);
    /// NFS3ERR_PERM: not owner.
    pub const PERM: Nfsstat3 = Nfsstat3(1);
    /// NFS3ERR_NOENT: no such file or directory.
    pub const NOENT: Nfsstat3 = Nfsstat3(2);
    /// NFS3ERR_IO: hard I/O error.
    pub const IO: Nfsstat3 = Nfsstat3(5);
    /// NFS3ERR_NXIO: no such device or address.
    pub const NXIO: Nfsstat3 = Nfsstat3(6);
    /// NFS3ERR_ACCES: permission denied.
    pub const ACCES: Nfsstat3 = Nfsstat3(13);
    /// NFS3ERR_EXIST: the file exists.
    pub const EXIST: Nfsstat3 = Nfsstat3(17);
    /// NFS3ERR_XDEV: cross-device link.
    pub const XDEV: Nfsstat3 = Nfsstat3(18);
    /// NFS3ERR_NODEV: no such device.
    pub const NODEV: Nfsstat3 = Nfsstat3(19);
    /// NFS3ERR_NOTDIR: not a directory.
    pub const NOTDIR: Nfsstat3 = Nfsstat3(20);
    /// NFS3ERR_ISDIR: is a directory.
    pub const ISDIR: Nfsstat3 = Nfsstat3(21);
    /// NFS3ERR_INVAL: invalid argument.
    pub const INVAL: Nfsstat3 = Nfsstat3(22);
    /// NFS3ERR_FBIG: file too large.
    pub const FBIG: Nfsstat3 = Nfsstat3(27);
    /// NFS3ERR_NOSPC: no space left on device.
    pub const NOSPC: Nfsstat3 = Nfsstat3(28);
    /// NFS3ERR_ROFS: read-only file system.
    pub const ROFS: Nfsstat3 = Nfsstat3(30);
    /// NFS3ERR_MLINK: too many hard links.
    pub const MLINK: Nfsstat3 = Nfsstat3(31);
    /// NFS3ERR_NAMETOOLONG: file name too long.
    pub const NAMETOOLONG: Nfsstat3 = Nfsstat3(63);
    /// NFS3ERR_NOTEMPTY: directory not empty.
    pub const NOTEMPTY: Nfsstat3 = Nfsstat3(66);
    /// NFS3ERR_DQUOT: quota exceeded.
    pub const DQUOT: Nfsstat3 = Nfsstat3(69);
    /// NFS3ERR_STALE: the handle names a file that no longer exists (or never did here).
    pub const STALE: Nfsstat3 = Nfsstat3(70);
    /// NFS3ERR_REMOTE: too many levels of remote in path.
    pub const REMOTE: Nfsstat3 = Nfsstat3(71);
    /// NFS3ERR_BADHANDLE: the handle failed the server's internal consistency checks.
    pub const BADHANDLE: Nfsstat3 = Nfsstat3(10001);
    /// NFS3ERR_NOT_SYNC: SETATTR guard mismatch.
    pub const NOT_SYNC: Nfsstat3 = Nfsstat3(10002);
    /// NFS3ERR_BAD_COOKIE: READDIR cookie is stale.
    pub const BAD_COOKIE: Nfsstat3 = Nfsstat3(10003);
    /// NFS3ERR_NOTSUPP: operation not supported.
    pub const NOTSUPP: Nfsstat3 = Nfsstat3(10004);
    /// NFS3ERR_TOOSMALL: buffer or request too small.
    pub const TOOSMALL: Nfsstat3 = Nfsstat3(10005);
    /// NFS3ERR_SERVERFAULT: an error that maps to no other status.
    pub const SERVERFAULT: Nfsstat3 = Nfsstat3(10006);
    /// NFS3ERR_BADTYPE: type not supported by the server.
    pub const BADTYPE: Nfsstat3 = Nfsstat3(10007);
    /// NFS3ERR_JUKEBOX: retry later.
    pub const JUKEBOX: Nfsstat3 = Nfsstat3(10008);

    /// The RFC's name for the status, e.g. `"NFS3ERR_STALE"`, or `None` if unknown.
    pub const fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "NFS3_OK",
            1 => "NFS3ERR_PERM",
            2 => "NFS3ERR_NOENT",
            5 => "NFS3ERR_IO",
            6 => "NFS3ERR_NXIO",
            13 => "NFS3ERR_ACCES",
            17 => "NFS3ERR_EXIST",
            18 => "NFS3ERR_XDEV",
            19 => "NFS3ERR_NODEV",
            20 => "NFS3ERR_NOTDIR",
            21 => "NFS3ERR_ISDIR",
            22 => "NFS3ERR_INVAL",
            27 => "NFS3ERR_FBIG",
            28 => "NFS3ERR_NOSPC",
            30 => "NFS3ERR_ROFS",
            31 => "NFS3ERR_MLINK",
            63 => "NFS3ERR_NAMETOOLONG",
            66 => "NFS3ERR_NOTEMPTY",
            69 => "NFS3ERR_DQUOT",
            70 => "NFS3ERR_STALE",
            71 => "NFS3ERR_REMOTE",
            10001 => "NFS3ERR_BADHANDLE",
            10002 => "NFS3ERR_NOT_SYNC",
            10003 => "NFS3ERR_BAD_COOKIE",
            10004 => "NFS3ERR_NOTSUPP",
            10005 => "NFS3ERR_TOOSMALL",
            10006 => "NFS3ERR_SERVERFAULT",
            10007 => "NFS3ERR_BADTYPE",
            10008 => "NFS3ERR_JUKEBOX",
            _ => return None,
        })
    }

    /// The status for an I/O error from the host file system.
    pub fn from_io(e: &std::io::Error) -> Nfsstat3 {
        match e.raw_os_error() {
            Some(n) => Self::from_errno(n),
            None => match e.kind() {
                std::io::ErrorKind::NotFound => Nfsstat3::NOENT,
                std::io::ErrorKind::PermissionDenied => Nfsstat3::ACCES,
                std::io::ErrorKind::AlreadyExists => Nfsstat3::EXIST,
                std::io::ErrorKind::InvalidInput => Nfsstat3::INVAL,
                _ => Nfsstat3::IO,
            },
        }
    }

    /// The status for a Linux errno. The NFSv3 values were chosen to equal the Unix
    /// errnos, so those pass through; the rest become NFS3ERR_IO.
    pub fn from_errno(errno: i32) -> Nfsstat3 {
        match errno {
            1 | 2 | 5 | 6 | 13 | 17 | 18 | 19 | 20 | 21 | 22 | 27 | 28 | 30 | 31 => {
                Nfsstat3(errno as u32)
            }
            36 => Nfsstat3::NAMETOOLONG, // ENAMETOOLONG
            39 => Nfsstat3::NOTEMPTY,    // ENOTEMPTY
            122 => Nfsstat3::DQUOT,      // EDQUOT
            40 => Nfsstat3::INVAL,       // ELOOP: a symlink where a directory was needed
            95 => Nfsstat3::NOTSUPP,     // EOPNOTSUPP
            _ => Nfsstat3::IO,
        }
    }
}

impl core::fmt::Display for Nfsstat3 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "nfsstat3({})", self.0),
        }
    }
}

impl<'d> XdrCodec<'d> for Nfsstat3 {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        e.u32(self.0)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        c.u32().map(Nfsstat3)
    }
}

/// Decodes a word that must be one of `valid`, naming `what` otherwise.
pub(crate) fn enum_word(
    c: &mut DdpCursor<'_>,
    valid: core::ops::RangeInclusive<u32>,
    what: &'static str,
) -> Result<u32, DdpDecodeError> {
    let offset = c.position();
    let v = c.u32()?;
    if valid.contains(&v) {
        Ok(v)
    } else {
        Err(DdpDecodeError::Invalid { offset, what })
    }
}

/// `ftype3`: the type of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ftype3 {
    /// NF3REG: regular file.
    Reg = 1,
    /// NF3DIR: directory.
    Dir = 2,
    /// NF3BLK: block device.
    Blk = 3,
    /// NF3CHR: character device.
    Chr = 4,
    /// NF3LNK: symbolic link.
    Lnk = 5,
    /// NF3SOCK: socket.
    Sock = 6,
    /// NF3FIFO: named pipe.
    Fifo = 7,
}

impl Ftype3 {
    /// The type for an `ftype3` value 1..=7.
    pub const fn from_u32(v: u32) -> Option<Ftype3> {
        Some(match v {
            1 => Ftype3::Reg,
            2 => Ftype3::Dir,
            3 => Ftype3::Blk,
            4 => Ftype3::Chr,
            5 => Ftype3::Lnk,
            6 => Ftype3::Sock,
            7 => Ftype3::Fifo,
            _ => return None,
        })
    }
}

impl<'d> XdrCodec<'d> for Ftype3 {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        e.u32(*self as u32)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        let v = enum_word(c, 1..=7, "ftype3")?;
        Ok(Ftype3::from_u32(v).unwrap_or(Ftype3::Reg))
    }
}

/// `nfs_fh3`: an opaque file handle of at most [`NFS3_FHSIZE`] octets, borrowed from the
/// message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct NfsFh3<'a>(pub &'a [u8]);

impl<'d> XdrCodec<'d> for NfsFh3<'d> {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        e.opaque(self.0)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        c.opaque(NFS3_FHSIZE).map(NfsFh3)
    }
}

/// `nfstime3`: seconds and nanoseconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct NfsTime3 {
    /// Seconds.
    pub seconds: u32,
    /// Nanoseconds.
    pub nseconds: u32,
}

impl NfsTime3 {
    /// The current time of this host.
    pub fn now() -> NfsTime3 {
        let d = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        NfsTime3 {
            seconds: d.as_secs() as u32,
            nseconds: d.subsec_nanos(),
        }
    }
}

impl<'d> XdrCodec<'d> for NfsTime3 {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        e.u32(self.seconds)?;
        e.u32(self.nseconds)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        Ok(NfsTime3 {
            seconds: c.u32()?,
            nseconds: c.u32()?,
        })
    }
}

/// `fattr3`: the attributes of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fattr3 {
    /// Type.
    pub ftype: Ftype3,
    /// Protection mode bits (the low 12 bits of `st_mode`).
    pub mode: u32,
    /// Hard links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in octets.
    pub size: u64,
    /// Octets of disk space used.
    pub used: u64,
    /// Device numbers (`specdata3`) for block and character devices.
    pub rdev: (u32, u32),
    /// File system identifier.
    pub fsid: u64,
    /// File number, unique within the file system.
    pub fileid: u64,
    /// Last access.
    pub atime: NfsTime3,
    /// Last modification of the data.
    pub mtime: NfsTime3,
    /// Last change of the attributes.
    pub ctime: NfsTime3,
}

impl<'d> XdrCodec<'d> for Fattr3 {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        self.ftype.encode(e)?;
        e.u32(self.mode)?;
        e.u32(self.nlink)?;
        e.u32(self.uid)?;
        e.u32(self.gid)?;
        e.u64(self.size)?;
        e.u64(self.used)?;
        e.u32(self.rdev.0)?;
        e.u32(self.rdev.1)?;
        e.u64(self.fsid)?;
        e.u64(self.fileid)?;
        self.atime.encode(e)?;
        self.mtime.encode(e)?;
        self.ctime.encode(e)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        Ok(Fattr3 {
            ftype: Ftype3::decode(c)?,
            mode: c.u32()?,
            nlink: c.u32()?,
            uid: c.u32()?,
            gid: c.u32()?,
            size: c.u64()?,
            used: c.u64()?,
            rdev: (c.u32()?, c.u32()?),
            fsid: c.u64()?,
            fileid: c.u64()?,
            atime: NfsTime3::decode(c)?,
            mtime: NfsTime3::decode(c)?,
            ctime: NfsTime3::decode(c)?,
        })
    }
}

/// XDR `T *` / a union on a boolean: present or not.
impl<'d, T: XdrCodec<'d>> XdrCodec<'d> for Option<T> {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        match self {
            Some(v) => {
                e.bool(true)?;
                v.encode(e)
            }
            None => e.bool(false),
        }
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        if c.bool()? {
            T::decode(c).map(Some)
        } else {
            Ok(None)
        }
    }
}

/// `post_op_attr`: attributes after the operation, if the server has them.
pub type PostOpAttr = Option<Fattr3>;
/// `post_op_fh3`: the handle of a created object, if the server returns it.
pub type PostOpFh3<'a> = Option<NfsFh3<'a>>;

/// `wcc_attr`: the attributes weak cache consistency compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WccAttr {
    /// Size in octets.
    pub size: u64,
    /// Last modification.
    pub mtime: NfsTime3,
    /// Last attribute change.
    pub ctime: NfsTime3,
}

impl WccAttr {
    /// The subset of `a` that `wcc_attr` holds.
    pub const fn of(a: &Fattr3) -> WccAttr {
        WccAttr {
            size: a.size,
            mtime: a.mtime,
            ctime: a.ctime,
        }
    }
}

impl<'d> XdrCodec<'d> for WccAttr {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        e.u64(self.size)?;
        self.mtime.encode(e)?;
        self.ctime.encode(e)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        Ok(WccAttr {
            size: c.u64()?,
            mtime: NfsTime3::decode(c)?,
            ctime: NfsTime3::decode(c)?,
        })
    }
}

/// `pre_op_attr`.
pub type PreOpAttr = Option<WccAttr>;

/// `wcc_data`: a directory's or file's attributes before and after an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WccData {
    /// Before.
    pub before: PreOpAttr,
    /// After.
    pub after: PostOpAttr,
}

impl<'d> XdrCodec<'d> for WccData {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        self.before.encode(e)?;
        self.after.encode(e)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        Ok(WccData {
            before: Option::decode(c)?,
            after: Option::decode(c)?,
        })
    }
}

/// `set_atime` / `set_mtime` (`time_how`): how SETATTR and the creating procedures set
/// a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SetTime {
    /// DONT_CHANGE.
    #[default]
    DontChange,
    /// SET_TO_SERVER_TIME.
    ServerTime,
    /// SET_TO_CLIENT_TIME with the client's time.
    ClientTime(NfsTime3),
}

impl<'d> XdrCodec<'d> for SetTime {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        match self {
            SetTime::DontChange => e.u32(0),
            SetTime::ServerTime => e.u32(1),
            SetTime::ClientTime(t) => {
                e.u32(2)?;
                t.encode(e)
            }
        }
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        Ok(match enum_word(c, 0..=2, "time_how")? {
            0 => SetTime::DontChange,
            1 => SetTime::ServerTime,
            _ => SetTime::ClientTime(NfsTime3::decode(c)?),
        })
    }
}

/// `sattr3`: attributes to set; `None` leaves one unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Sattr3 {
    /// Mode bits.
    pub mode: Option<u32>,
    /// Owner.
    pub uid: Option<u32>,
    /// Group.
    pub gid: Option<u32>,
    /// Size (truncate or extend).
    pub size: Option<u64>,
    /// Access time.
    pub atime: SetTime,
    /// Modification time.
    pub mtime: SetTime,
}

/// `set_uint32` style: a boolean then the value.
struct U32Opt(Option<u32>);
impl<'d> XdrCodec<'d> for U32Opt {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        match self.0 {
            Some(v) => {
                e.bool(true)?;
                e.u32(v)
            }
            None => e.bool(false),
        }
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        Ok(U32Opt(if c.bool()? { Some(c.u32()?) } else { None }))
    }
}

impl<'d> XdrCodec<'d> for Sattr3 {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        U32Opt(self.mode).encode(e)?;
        U32Opt(self.uid).encode(e)?;
        U32Opt(self.gid).encode(e)?;
        match self.size {
            Some(s) => {
                e.bool(true)?;
                e.u64(s)?;
            }
            None => e.bool(false)?,
        }
        self.atime.encode(e)?;
        self.mtime.encode(e)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        Ok(Sattr3 {
            mode: U32Opt::decode(c)?.0,
            uid: U32Opt::decode(c)?.0,
            gid: U32Opt::decode(c)?.0,
            size: if c.bool()? { Some(c.u64()?) } else { None },
            atime: SetTime::decode(c)?,
            mtime: SetTime::decode(c)?,
        })
    }
}

/// `diropargs3`: a directory and a name in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DirOpArgs3<'a> {
    /// The directory.
    pub dir: NfsFh3<'a>,
    /// The name (`filename3`), not NUL-terminated, borrowed from the message.
    pub name: &'a [u8],
}

impl<'d> XdrCodec<'d> for DirOpArgs3<'d> {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        self.dir.encode(e)?;
        e.string(self.name)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        Ok(DirOpArgs3 {
            dir: NfsFh3::decode(c)?,
            name: c.string(MAX_NAME_DECODE)?,
        })
    }
}

/// An 8-octet verifier (`cookieverf3`, `createverf3`, `writeverf3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Verf(pub [u8; NFS3_VERFSIZE]);

impl<'d> XdrCodec<'d> for Verf {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        e.opaque_fixed(&self.0)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        let mut v = [0u8; NFS3_VERFSIZE];
        v.copy_from_slice(c.opaque_fixed(NFS3_VERFSIZE)?);
        Ok(Verf(v))
    }
}

// Plain XDR words as codecs, so that the NFS and MOUNT structures below can be declared
// field by field (`xdr_struct!`).
impl<'d> XdrCodec<'d> for u32 {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        e.u32(*self)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        c.u32()
    }
}

impl<'d> XdrCodec<'d> for u64 {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        e.u64(*self)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        c.u64()
    }
}

impl<'d> XdrCodec<'d> for bool {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        e.bool(*self)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        c.bool()
    }
}
