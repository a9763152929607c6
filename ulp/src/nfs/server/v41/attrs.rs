//! NFSv4 attributes (RFC 8881 §5) from the backend's NFSv3 attributes: which ones this
//! server supports, their XDR in an `attrlist4`, and the settable ones decoded into a
//! [`Sattr3`] for the backend.

use super::super::backend::FsLimits;
use crate::ddp::DdpCursor;
use crate::nfs::v3::types::{Fattr3, Ftype3, NfsTime3, Sattr3, SetTime};
use crate::nfs::v41::Nfsstat4;

/// Attribute numbers this server knows (RFC 8881 §5.6, §5.7).
pub mod a {
    #![allow(missing_docs)]
    pub const SUPPORTED_ATTRS: u32 = 0;
    pub const TYPE: u32 = 1;
    pub const FH_EXPIRE_TYPE: u32 = 2;
    pub const CHANGE: u32 = 3;
    pub const SIZE: u32 = 4;
    pub const LINK_SUPPORT: u32 = 5;
    pub const SYMLINK_SUPPORT: u32 = 6;
    pub const NAMED_ATTR: u32 = 7;
    pub const FSID: u32 = 8;
    pub const UNIQUE_HANDLES: u32 = 9;
    pub const LEASE_TIME: u32 = 10;
    pub const RDATTR_ERROR: u32 = 11;
    pub const CANSETTIME: u32 = 15;
    pub const CASE_INSENSITIVE: u32 = 16;
    pub const CASE_PRESERVING: u32 = 17;
    pub const CHOWN_RESTRICTED: u32 = 18;
    pub const FILEHANDLE: u32 = 19;
    pub const FILEID: u32 = 20;
    pub const FILES_AVAIL: u32 = 21;
    pub const FILES_FREE: u32 = 22;
    pub const FILES_TOTAL: u32 = 23;
    pub const HOMOGENEOUS: u32 = 26;
    pub const MAXFILESIZE: u32 = 27;
    pub const MAXLINK: u32 = 28;
    pub const MAXNAME: u32 = 29;
    pub const MAXREAD: u32 = 30;
    pub const MAXWRITE: u32 = 31;
    pub const MODE: u32 = 33;
    pub const NO_TRUNC: u32 = 34;
    pub const NUMLINKS: u32 = 35;
    pub const OWNER: u32 = 36;
    pub const OWNER_GROUP: u32 = 37;
    pub const RAWDEV: u32 = 41;
    pub const SPACE_AVAIL: u32 = 42;
    pub const SPACE_FREE: u32 = 43;
    pub const SPACE_TOTAL: u32 = 44;
    pub const SPACE_USED: u32 = 45;
    pub const TIME_ACCESS: u32 = 47;
    pub const TIME_ACCESS_SET: u32 = 48;
    pub const TIME_DELTA: u32 = 51;
    pub const TIME_METADATA: u32 = 52;
    pub const TIME_MODIFY: u32 = 53;
    pub const TIME_MODIFY_SET: u32 = 54;
    pub const MOUNTED_ON_FILEID: u32 = 55;
    pub const SUPPATTR_EXCLCREAT: u32 = 75;
}

/// Words of the attribute bitmaps this server handles (attributes 0-95).
pub const WORDS: usize = 3;

/// An attribute bitmap on the stack.
pub type Mask = [u32; WORDS];

const fn mask_of(bits: &[u32]) -> Mask {
    let mut m = [0u32; WORDS];
    let mut i = 0;
    while i < bits.len() {
        m[(bits[i] / 32) as usize] |= 1 << (bits[i] % 32);
        i += 1;
    }
    m
}

/// Every attribute this server supports (`supported_attrs`).
pub const SUPPORTED: Mask = mask_of(&[
    a::SUPPORTED_ATTRS,
    a::TYPE,
    a::FH_EXPIRE_TYPE,
    a::CHANGE,
    a::SIZE,
    a::LINK_SUPPORT,
    a::SYMLINK_SUPPORT,
    a::NAMED_ATTR,
    a::FSID,
    a::UNIQUE_HANDLES,
    a::LEASE_TIME,
    a::RDATTR_ERROR,
    a::CANSETTIME,
    a::CASE_INSENSITIVE,
    a::CASE_PRESERVING,
    a::CHOWN_RESTRICTED,
    a::FILEHANDLE,
    a::FILEID,
    a::FILES_AVAIL,
    a::FILES_FREE,
    a::FILES_TOTAL,
    a::HOMOGENEOUS,
    a::MAXFILESIZE,
    a::MAXLINK,
    a::MAXNAME,
    a::MAXREAD,
    a::MAXWRITE,
    a::MODE,
    a::NO_TRUNC,
    a::NUMLINKS,
    a::OWNER,
    a::OWNER_GROUP,
    a::RAWDEV,
    a::SPACE_AVAIL,
    a::SPACE_FREE,
    a::SPACE_TOTAL,
    a::SPACE_USED,
    a::TIME_ACCESS,
    a::TIME_ACCESS_SET,
    a::TIME_DELTA,
    a::TIME_METADATA,
    a::TIME_MODIFY,
    a::TIME_MODIFY_SET,
    a::MOUNTED_ON_FILEID,
    a::SUPPATTR_EXCLCREAT,
]);

/// The attributes SETATTR (and OPEN and CREATE) can set.
pub const SETTABLE: Mask = mask_of(&[
    a::SIZE,
    a::MODE,
    a::OWNER,
    a::OWNER_GROUP,
    a::TIME_ACCESS_SET,
    a::TIME_MODIFY_SET,
]);

/// Whether bit `n` is set in `m`.
pub fn has(m: &Mask, n: u32) -> bool {
    m.get((n / 32) as usize)
        .is_some_and(|w| w & (1 << (n % 32)) != 0)
}

/// Sets bit `n`.
pub fn set(m: &mut Mask, n: u32) {
    if let Some(w) = m.get_mut((n / 32) as usize) {
        *w |= 1 << (n % 32);
    }
}

/// Reads a client's `bitmap4` into a [`Mask`]: words past the third name attributes
/// this server does not have, so they are dropped.
pub fn read_mask(words: &[u32]) -> Mask {
    let mut m = [0u32; WORDS];
    for (d, s) in m.iter_mut().zip(words) {
        *d = *s;
    }
    m
}

/// Writes `m` as a `bitmap4` of its significant words into `out`.
pub fn put_mask(out: &mut Vec<u8>, m: &Mask) {
    let n = m.iter().rposition(|&w| w != 0).map_or(0, |i| i + 1);
    out.extend_from_slice(&(n as u32).to_be_bytes());
    for w in &m[..n] {
        out.extend_from_slice(&w.to_be_bytes());
    }
}

/// What attribute values come from besides the file's own attributes.
#[derive(Debug, Clone, Copy)]
pub struct AttrCtx<'a> {
    /// The file's handle.
    pub fh: &'a [u8],
    /// Backend limits.
    pub limits: FsLimits,
    /// Largest READ and WRITE.
    pub max_read: u32,
    /// Largest WRITE.
    pub max_write: u32,
    /// Lease time.
    pub lease: u32,
    /// Space figures, when asked for and known: total, free, avail octets and files.
    pub space: Option<super::super::backend::FsSpace>,
}

fn u32v(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}
fn u64v(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}
fn time(out: &mut Vec<u8>, t: NfsTime3) {
    u64v(out, u64::from(t.seconds));
    u32v(out, t.nseconds);
}
fn opaque(out: &mut Vec<u8>, b: &[u8]) {
    u32v(out, b.len() as u32);
    out.extend_from_slice(b);
    out.resize(out.len() + (4 - b.len() % 4) % 4, 0);
}

/// The `change` attribute: the ctime in nanoseconds, which moves on every change of data
/// or attributes.
pub fn change(f: &Fattr3) -> u64 {
    u64::from(f.ctime.seconds) * 1_000_000_000 + u64::from(f.ctime.nseconds)
}

/// `nfs_ftype4` of an NFSv3 type (the same numbers).
pub fn ftype4(t: Ftype3) -> u32 {
    t as u32
}

/// Appends the values of the attributes in `req` that this server supports to `out`
/// (in bit order) and returns the mask of those written. `rdattr_error` is written as
/// NFS4_OK: a failing file never gets here.
pub fn encode(out: &mut Vec<u8>, req: &Mask, f: &Fattr3, ctx: &AttrCtx<'_>) -> Mask {
    let mut written = [0u32; WORDS];
    for w in 0..WORDS {
        let bits = req[w] & SUPPORTED[w];
        for b in 0..32u32 {
            if bits & (1 << b) == 0 {
                continue;
            }
            let n = w as u32 * 32 + b;
            let sp = ctx.space.unwrap_or_default();
            match n {
                a::SUPPORTED_ATTRS => {
                    let mut m = Vec::new();
                    put_mask(&mut m, &SUPPORTED);
                    out.extend_from_slice(&m);
                }
                a::TYPE => u32v(out, ftype4(f.ftype)),
                a::FH_EXPIRE_TYPE => u32v(out, 0), // FH4_PERSISTENT
                a::CHANGE => u64v(out, change(f)),
                a::SIZE => u64v(out, f.size),
                a::LINK_SUPPORT => u32v(out, ctx.limits.links as u32),
                a::SYMLINK_SUPPORT => u32v(out, ctx.limits.symlinks as u32),
                a::NAMED_ATTR | a::CASE_INSENSITIVE => u32v(out, 0),
                a::FSID => {
                    u64v(out, f.fsid);
                    u64v(out, 0);
                }
                a::UNIQUE_HANDLES
                | a::CANSETTIME
                | a::CASE_PRESERVING
                | a::CHOWN_RESTRICTED
                | a::HOMOGENEOUS
                | a::NO_TRUNC => u32v(out, 1),
                a::LEASE_TIME => u32v(out, ctx.lease),
                a::RDATTR_ERROR => u32v(out, 0),
                a::FILEHANDLE => opaque(out, ctx.fh),
                a::FILEID | a::MOUNTED_ON_FILEID => u64v(out, f.fileid),
                a::FILES_AVAIL => u64v(out, sp.afiles),
                a::FILES_FREE => u64v(out, sp.ffiles),
                a::FILES_TOTAL => u64v(out, sp.tfiles),
                a::MAXFILESIZE => u64v(out, ctx.limits.max_file_size),
                a::MAXLINK => u32v(out, ctx.limits.link_max),
                a::MAXNAME => u32v(out, ctx.limits.name_max),
                a::MAXREAD => u64v(out, u64::from(ctx.max_read)),
                a::MAXWRITE => u64v(out, u64::from(ctx.max_write)),
                a::MODE => u32v(out, f.mode & 0o7777),
                a::NUMLINKS => u32v(out, f.nlink),
                a::OWNER => num_string(out, f.uid),
                a::OWNER_GROUP => num_string(out, f.gid),
                a::RAWDEV => {
                    u32v(out, f.rdev.0);
                    u32v(out, f.rdev.1);
                }
                a::SPACE_AVAIL => u64v(out, sp.abytes),
                a::SPACE_FREE => u64v(out, sp.fbytes),
                a::SPACE_TOTAL => u64v(out, sp.tbytes),
                a::SPACE_USED => u64v(out, f.used),
                a::TIME_ACCESS => time(out, f.atime),
                a::TIME_DELTA => time(
                    out,
                    NfsTime3 {
                        seconds: 0,
                        nseconds: 1,
                    },
                ),
                a::TIME_METADATA => time(out, f.ctime),
                a::TIME_MODIFY => time(out, f.mtime),
                a::SUPPATTR_EXCLCREAT => {
                    let mut m = Vec::new();
                    put_mask(&mut m, &SETTABLE);
                    out.extend_from_slice(&m);
                }
                // Write-only (the *_SET attributes): never returned.
                _ => continue,
            }
            written[w] |= 1 << b;
        }
    }
    written
}

/// Whether `req` asks for the space figures (which cost a backend call).
pub fn wants_space(req: &Mask) -> bool {
    [
        a::FILES_AVAIL,
        a::FILES_FREE,
        a::FILES_TOTAL,
        a::SPACE_AVAIL,
        a::SPACE_FREE,
        a::SPACE_TOTAL,
    ]
    .iter()
    .any(|&n| has(req, n))
}

/// Owners and groups go as numbers, which the Linux client accepts with AUTH_SYS (its
/// idmapper falls back to numeric ids).
fn num_string(out: &mut Vec<u8>, id: u32) {
    let mut buf = [0u8; 10];
    let mut n = id;
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    opaque(out, &buf[i..]);
}

fn parse_id(s: &[u8]) -> Result<u32, Nfsstat4> {
    // "uid" or "uid@domain": only numeric ids are understood.
    let digits = s.split(|&b| b == b'@').next().unwrap_or(&[]);
    if digits.is_empty() || digits.len() > 10 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(Nfsstat4::BADOWNER);
    }
    digits
        .iter()
        .try_fold(0u64, |acc, &d| Some(acc * 10 + u64::from(d - b'0')))
        .and_then(|v| u32::try_from(v).ok())
        .ok_or(Nfsstat4::BADOWNER)
}

fn settime(c: &mut DdpCursor<'_>) -> Result<SetTime, Nfsstat4> {
    let bad = |_| Nfsstat4::BADXDR;
    match c.u32().map_err(bad)? {
        0 => Ok(SetTime::ServerTime),
        1 => {
            let secs = c.u64().map_err(bad)? as i64;
            let nsecs = c.u32().map_err(bad)?;
            if nsecs >= 1_000_000_000 {
                return Err(Nfsstat4::INVAL);
            }
            let seconds = u32::try_from(secs).map_err(|_| Nfsstat4::INVAL)?;
            Ok(SetTime::ClientTime(NfsTime3 {
                seconds,
                nseconds: nsecs,
            }))
        }
        _ => Err(Nfsstat4::BADXDR),
    }
}

/// Decodes settable attributes (`mask`, `vals` of an `fattr4`) for the backend and
/// returns them with the mask of those present. An attribute that is supported but not
/// settable is NFS4ERR_INVAL, an unknown one NFS4ERR_ATTRNOTSUPP (RFC 8881 §18.30.4).
pub fn decode_settable(mask: &[u32], vals: &[u8]) -> Result<(Sattr3, Mask), Nfsstat4> {
    let bad = |_| Nfsstat4::BADXDR;
    if mask.iter().skip(WORDS).any(|&w| w != 0) {
        return Err(Nfsstat4::ATTRNOTSUPP);
    }
    let m = read_mask(mask);
    let mut s = Sattr3::default();
    let mut c = DdpCursor::inline(vals, 0);
    for (w, word) in m.iter().enumerate() {
        for b in 0..32u32 {
            if word & (1 << b) == 0 {
                continue;
            }
            let n = w as u32 * 32 + b;
            if !has(&SUPPORTED, n) {
                return Err(Nfsstat4::ATTRNOTSUPP);
            }
            match n {
                a::SIZE => s.size = Some(c.u64().map_err(bad)?),
                a::MODE => s.mode = Some(c.u32().map_err(bad)? & 0o7777),
                a::OWNER => s.uid = Some(parse_id(c.string(1024).map_err(bad)?)?),
                a::OWNER_GROUP => s.gid = Some(parse_id(c.string(1024).map_err(bad)?)?),
                a::TIME_ACCESS_SET => s.atime = settime(&mut c)?,
                a::TIME_MODIFY_SET => s.mtime = settime(&mut c)?,
                _ => return Err(Nfsstat4::INVAL),
            }
        }
    }
    c.finish().map_err(bad)?;
    Ok((s, m))
}
