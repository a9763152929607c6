//! NFS version 4.1 (RFC 8881, which obsoletes RFC 5661) for a client: XDR codecs of
//! COMPOUND ([`compound`]) for the operations a simple client needs, the shared types
//! here (status, bitmaps, attributes, stateids, channel attributes), and a blocking
//! client over the engine ([`client::Nfs41Client`]).
//!
//! DDP follows RFC 8267 §6 (the tables are in [`super::v4`]): WRITE data is encoded with
//! [`DdpEncoder::opaque_ddp`] and so becomes a Read chunk at its XDR position; READ data
//! is decoded with [`DdpCursor::opaque_ddp`], which takes the next Write chunk of the
//! reply, so the Nth Write chunk pairs with the Nth READ in the COMPOUND (§6.4.1). A READ
//! that failed consumes its chunk too ([`DdpCursor::skip_ddp`]).

pub mod callback;
pub mod client;
pub mod compound;

#[cfg(test)]
mod tests;

use core::fmt;

use crate::ddp::{DdpCursor, DdpDecodeError, DdpEncodeError, DdpEncoder, XdrCodec};

/// NFSv4 minor version this module speaks.
pub const MINOR_VERSION: u32 = 1;

/// NFS4_OPAQUE_LIMIT: the bound of client owners, server owners and scopes.
pub const OPAQUE_LIMIT: u32 = 1024;

/// NFS4_FHSIZE: the largest file handle.
pub const FHSIZE: u32 = 128;

/// NFS4_SESSIONID_SIZE.
pub const SESSIONID_SIZE: usize = 16;

/// Bound this crate puts on decoded names and owner strings (not an RFC limit).
pub const NAME_LIMIT: u32 = 4096;

/// A session id (`sessionid4`).
pub type SessionId = [u8; SESSIONID_SIZE];

/// A verifier (`verifier4`).
pub type Verifier = [u8; 8];

/// `nfsstat4` (RFC 8881 §15.1): a status word; known values have names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Nfsstat4(pub u32);

macro_rules! nfsstat4 {
    ($( $c:ident = $v:expr, )*) => {
        impl Nfsstat4 {
            $(
                #[doc = concat!("NFS4ERR_", stringify!($c), " (", stringify!($v), ").")]
                pub const $c: Nfsstat4 = Nfsstat4($v);
            )*

            /// The RFC name (`NFS4_OK`, `NFS4ERR_NOENT`, ...), if the value is known.
            pub fn name(self) -> Option<&'static str> {
                if self.0 == 0 {
                    return Some("NFS4_OK");
                }
                match self.0 {
                    $( $v => Some(concat!("NFS4ERR_", stringify!($c))), )*
                    _ => None,
                }
            }
        }
    };
}

nfsstat4! {
    PERM = 1, NOENT = 2, IO = 5, NXIO = 6, ACCESS = 13, EXIST = 17, XDEV = 18,
    NOTDIR = 20, ISDIR = 21, INVAL = 22, FBIG = 27, NOSPC = 28, ROFS = 30, MLINK = 31,
    NAMETOOLONG = 63, NOTEMPTY = 66, DQUOT = 69, STALE = 70, BADHANDLE = 10001,
    BAD_COOKIE = 10003, NOTSUPP = 10004, TOOSMALL = 10005, SERVERFAULT = 10006,
    BADTYPE = 10007, DELAY = 10008, SAME = 10009, DENIED = 10010, EXPIRED = 10011,
    LOCKED = 10012, GRACE = 10013, FHEXPIRED = 10014, SHARE_DENIED = 10015,
    WRONGSEC = 10016, CLID_INUSE = 10017, RESOURCE = 10018, MOVED = 10019,
    NOFILEHANDLE = 10020, MINOR_VERS_MISMATCH = 10021, STALE_CLIENTID = 10022,
    STALE_STATEID = 10023, OLD_STATEID = 10024, BAD_STATEID = 10025, BAD_SEQID = 10026,
    NOT_SAME = 10027, LOCK_RANGE = 10028, SYMLINK = 10029, RESTOREFH = 10030,
    LEASE_MOVED = 10031, ATTRNOTSUPP = 10032, NO_GRACE = 10033, RECLAIM_BAD = 10034,
    RECLAIM_CONFLICT = 10035, BADXDR = 10036, LOCKS_HELD = 10037, OPENMODE = 10038,
    BADOWNER = 10039, BADCHAR = 10040, BADNAME = 10041, BAD_RANGE = 10042,
    LOCK_NOTSUPP = 10043, OP_ILLEGAL = 10044, DEADLOCK = 10045, FILE_OPEN = 10046,
    ADMIN_REVOKED = 10047, CB_PATH_DOWN = 10048, BADIOMODE = 10049, BADLAYOUT = 10050,
    BAD_SESSION_DIGEST = 10051, BADSESSION = 10052, BADSLOT = 10053,
    COMPLETE_ALREADY = 10054, CONN_NOT_BOUND_TO_SESSION = 10055,
    DELEG_ALREADY_WANTED = 10056, BACK_CHAN_BUSY = 10057, LAYOUTTRYLATER = 10058,
    LAYOUTUNAVAILABLE = 10059, NOMATCHING_LAYOUT = 10060, RECALLCONFLICT = 10061,
    UNKNOWN_LAYOUTTYPE = 10062, SEQ_MISORDERED = 10063, SEQUENCE_POS = 10064,
    REQ_TOO_BIG = 10065, REP_TOO_BIG = 10066, REP_TOO_BIG_TO_CACHE = 10067,
    RETRY_UNCACHED_REP = 10068, UNSAFE_COMPOUND = 10069, TOO_MANY_OPS = 10070,
    OP_NOT_IN_SESSION = 10071, HASH_ALG_UNSUPP = 10072, CLIENTID_BUSY = 10074,
    PNFS_IO_HOLE = 10075, SEQ_FALSE_RETRY = 10076, BAD_HIGH_SLOT = 10077,
    DEADSESSION = 10078, ENCR_ALG_UNSUPP = 10079, PNFS_NO_LAYOUT = 10080,
    NOT_ONLY_OP = 10081, WRONG_CRED = 10082, WRONG_TYPE = 10083,
    DIRDELEG_UNAVAIL = 10084, REJECT_DELEG = 10085, RETURNCONFLICT = 10086,
    DELEG_REVOKED = 10087,
}

impl Nfsstat4 {
    /// NFS4_OK.
    pub const OK: Nfsstat4 = Nfsstat4(0);

    /// Whether this is NFS4_OK.
    pub const fn is_ok(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Display for Nfsstat4 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "nfsstat4({})", self.0),
        }
    }
}

impl<'d> XdrCodec<'d> for Nfsstat4 {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        e.u32(self.0)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        c.u32().map(Nfsstat4)
    }
}

/// Attribute numbers (RFC 8881 §5.6, §5.7) this crate decodes.
pub mod attr {
    /// `type` (nfs_ftype4).
    pub const TYPE: u32 = 1;
    /// `change` (changeid4).
    pub const CHANGE: u32 = 3;
    /// `size` (uint64).
    pub const SIZE: u32 = 4;
    /// `fileid` (uint64).
    pub const FILEID: u32 = 20;
    /// `mode` (mode4).
    pub const MODE: u32 = 33;
    /// `numlinks` (uint32).
    pub const NUMLINKS: u32 = 35;
    /// `owner` (utf8str_mixed).
    pub const OWNER: u32 = 36;
    /// `owner_group` (utf8str_mixed).
    pub const OWNER_GROUP: u32 = 37;
    /// `time_modify` (nfstime4).
    pub const TIME_MODIFY: u32 = 53;
}

/// `nfs_ftype4` values.
pub mod ftype {
    /// Regular file.
    pub const NF4REG: u32 = 1;
    /// Directory.
    pub const NF4DIR: u32 = 2;
    /// Block device.
    pub const NF4BLK: u32 = 3;
    /// Character device.
    pub const NF4CHR: u32 = 4;
    /// Symbolic link.
    pub const NF4LNK: u32 = 5;
    /// Socket.
    pub const NF4SOCK: u32 = 6;
    /// FIFO.
    pub const NF4FIFO: u32 = 7;
    /// Named attribute directory.
    pub const NF4ATTRDIR: u32 = 8;
    /// Named attribute.
    pub const NF4NAMEDATTR: u32 = 9;
}

/// The most words of a `bitmap4` this crate decodes.
pub const BITMAP_WORDS: u32 = 8;

/// `bitmap4`: `uint32_t bitmap4<>`, bit `n` in word `n / 32`, bit `n % 32`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bitmap4(pub Vec<u32>);

impl Bitmap4 {
    /// The bitmap with exactly these bits set.
    pub fn of(bits: &[u32]) -> Self {
        let mut b = Bitmap4::default();
        for &n in bits {
            b.set(n);
        }
        b
    }

    /// Sets bit `n`.
    pub fn set(&mut self, n: u32) {
        let w = (n / 32) as usize;
        if self.0.len() <= w {
            self.0.resize(w + 1, 0);
        }
        self.0[w] |= 1 << (n % 32);
    }

    /// Whether bit `n` is set.
    pub fn contains(&self, n: u32) -> bool {
        self.0
            .get((n / 32) as usize)
            .is_some_and(|w| w & (1 << (n % 32)) != 0)
    }

    /// The set bits in ascending order: the order of values in an `attrlist4`.
    pub fn bits(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().enumerate().flat_map(|(i, &w)| {
            (0..32u32)
                .filter(move |b| w & (1 << b) != 0)
                .map(move |b| i as u32 * 32 + b)
        })
    }
}

impl<'d> XdrCodec<'d> for Bitmap4 {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        e.u32(self.0.len() as u32)?;
        for &w in &self.0 {
            e.u32(w)?;
        }
        Ok(())
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        let n = c.count(BITMAP_WORDS)?;
        let mut v = Vec::with_capacity(n as usize);
        for _ in 0..n {
            v.push(c.u32()?);
        }
        Ok(Bitmap4(v))
    }
}

/// `fattr4`: an attribute bitmap and the XDR of the attributes it names, in bit order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Fattr4<'d> {
    /// `attrmask`.
    pub mask: Bitmap4,
    /// `attr_vals` (`attrlist4`, opaque).
    pub vals: &'d [u8],
}

impl Fattr4<'_> {
    /// Encodes into an encoder of any lifetime (nothing is DDP-eligible here).
    pub fn encode_any(&self, e: &mut DdpEncoder<'_, '_>) -> Result<(), DdpEncodeError> {
        self.mask.encode(e)?;
        e.opaque(self.vals)
    }
}

impl<'d> XdrCodec<'d> for Fattr4<'d> {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        self.encode_any(e)
    }

    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        Ok(Fattr4 {
            mask: Bitmap4::decode(c)?,
            vals: c.opaque(u32::MAX)?,
        })
    }
}

/// `nfstime4`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NfsTime4 {
    /// Seconds since the epoch.
    pub seconds: i64,
    /// Nanoseconds.
    pub nseconds: u32,
}

/// The attributes this crate understands, decoded from an [`Fattr4`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Attrs {
    /// `type` (an [`ftype`] value).
    pub ftype: Option<u32>,
    /// `change`.
    pub change: Option<u64>,
    /// `size`.
    pub size: Option<u64>,
    /// `fileid`.
    pub fileid: Option<u64>,
    /// `mode` (permission bits).
    pub mode: Option<u32>,
    /// `numlinks`.
    pub numlinks: Option<u32>,
    /// `owner`, e.g. `"0"` or `"root@domain"`.
    pub owner: Option<String>,
    /// `owner_group`.
    pub owner_group: Option<String>,
    /// `time_modify`.
    pub time_modify: Option<NfsTime4>,
}

/// The attributes [`Attrs`] holds, for GETATTR and READDIR requests.
pub fn attrs_request() -> Bitmap4 {
    Bitmap4::of(&[
        attr::TYPE,
        attr::CHANGE,
        attr::SIZE,
        attr::FILEID,
        attr::MODE,
        attr::NUMLINKS,
        attr::OWNER,
        attr::OWNER_GROUP,
        attr::TIME_MODIFY,
    ])
}

impl Attrs {
    /// Decodes the attributes of `f`. An attribute this crate does not know makes the
    /// rest unreadable (`attrlist4` has no per-attribute lengths), so it is an error, as
    /// is a value list with octets left over.
    pub fn decode(f: &Fattr4<'_>) -> Result<Attrs, DdpDecodeError> {
        let mut c = DdpCursor::inline(f.vals, 0);
        let mut a = Attrs::default();
        for bit in f.mask.bits() {
            match bit {
                attr::TYPE => a.ftype = Some(c.u32()?),
                attr::CHANGE => a.change = Some(c.u64()?),
                attr::SIZE => a.size = Some(c.u64()?),
                attr::FILEID => a.fileid = Some(c.u64()?),
                attr::MODE => a.mode = Some(c.u32()?),
                attr::NUMLINKS => a.numlinks = Some(c.u32()?),
                attr::OWNER => {
                    a.owner = Some(String::from_utf8_lossy(c.string(NAME_LIMIT)?).into_owned())
                }
                attr::OWNER_GROUP => {
                    a.owner_group =
                        Some(String::from_utf8_lossy(c.string(NAME_LIMIT)?).into_owned())
                }
                attr::TIME_MODIFY => {
                    a.time_modify = Some(NfsTime4 {
                        seconds: c.u64()? as i64,
                        nseconds: c.u32()?,
                    })
                }
                _ => {
                    return Err(DdpDecodeError::Invalid {
                        offset: c.position(),
                        what: "fattr4 holds an attribute this client did not ask for",
                    })
                }
            }
        }
        c.finish()?;
        Ok(a)
    }

    /// Encodes the settable attributes among `size` and `mode` (the others are
    /// read-only or not supported here) as an `attrlist4`, with their mask.
    pub fn encode_settable(&self) -> (Bitmap4, Vec<u8>) {
        let mut mask = Bitmap4::default();
        let mut vals = Vec::new();
        if let Some(s) = self.size {
            mask.set(attr::SIZE);
            vals.extend_from_slice(&s.to_be_bytes());
        }
        if let Some(m) = self.mode {
            mask.set(attr::MODE);
            vals.extend_from_slice(&m.to_be_bytes());
        }
        (mask, vals)
    }
}

/// `stateid4`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Stateid4 {
    /// `seqid`.
    pub seqid: u32,
    /// `other`.
    pub other: [u8; 12],
}

impl<'d> XdrCodec<'d> for Stateid4 {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        e.u32(self.seqid)?;
        e.opaque_fixed(&self.other)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        let seqid = c.u32()?;
        let mut other = [0u8; 12];
        other.copy_from_slice(c.opaque_fixed(12)?);
        Ok(Stateid4 { seqid, other })
    }
}

/// `channel_attrs4` (RFC 8881 §18.36).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChannelAttrs4 {
    /// `ca_headerpadsize`.
    pub headerpadsize: u32,
    /// `ca_maxrequestsize`.
    pub maxrequestsize: u32,
    /// `ca_maxresponsesize`.
    pub maxresponsesize: u32,
    /// `ca_maxresponsesize_cached`.
    pub maxresponsesize_cached: u32,
    /// `ca_maxoperations`.
    pub maxoperations: u32,
    /// `ca_maxrequests`: slots.
    pub maxrequests: u32,
    /// `ca_rdma_ird<1>`.
    pub rdma_ird: Option<u32>,
}

impl<'d> XdrCodec<'d> for ChannelAttrs4 {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        for v in [
            self.headerpadsize,
            self.maxrequestsize,
            self.maxresponsesize,
            self.maxresponsesize_cached,
            self.maxoperations,
            self.maxrequests,
        ] {
            e.u32(v)?;
        }
        match self.rdma_ird {
            Some(v) => {
                e.u32(1)?;
                e.u32(v)
            }
            None => e.u32(0),
        }
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        let mut a = ChannelAttrs4 {
            headerpadsize: c.u32()?,
            maxrequestsize: c.u32()?,
            maxresponsesize: c.u32()?,
            maxresponsesize_cached: c.u32()?,
            maxoperations: c.u32()?,
            maxrequests: c.u32()?,
            rdma_ird: None,
        };
        if c.count(1)? == 1 {
            a.rdma_ird = Some(c.u32()?);
        }
        Ok(a)
    }
}

/// `change_info4`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChangeInfo4 {
    /// `atomic`.
    pub atomic: bool,
    /// `before`.
    pub before: u64,
    /// `after`.
    pub after: u64,
}

impl<'d> XdrCodec<'d> for ChangeInfo4 {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        e.bool(self.atomic)?;
        e.u64(self.before)?;
        e.u64(self.after)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        Ok(ChangeInfo4 {
            atomic: c.bool()?,
            before: c.u64()?,
            after: c.u64()?,
        })
    }
}

/// `nfs_impl_id4`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImplId<'d> {
    /// `nii_domain`.
    pub domain: &'d [u8],
    /// `nii_name`.
    pub name: &'d [u8],
    /// `nii_date`.
    pub date: NfsTime4,
}

impl ImplId<'_> {
    /// Encodes into an encoder of any lifetime (nothing is DDP-eligible here).
    pub fn encode_any(&self, e: &mut DdpEncoder<'_, '_>) -> Result<(), DdpEncodeError> {
        e.string(self.domain)?;
        e.string(self.name)?;
        e.u64(self.date.seconds as u64)?;
        e.u32(self.date.nseconds)
    }
}

impl<'d> XdrCodec<'d> for ImplId<'d> {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        self.encode_any(e)
    }

    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        Ok(ImplId {
            domain: c.string(NAME_LIMIT)?,
            name: c.string(NAME_LIMIT)?,
            date: NfsTime4 {
                seconds: c.u64()? as i64,
                nseconds: c.u32()?,
            },
        })
    }
}

/// Reads a fixed 16-octet session id.
pub(crate) fn sessionid(c: &mut DdpCursor<'_>) -> Result<SessionId, DdpDecodeError> {
    let mut s = [0u8; SESSIONID_SIZE];
    s.copy_from_slice(c.opaque_fixed(SESSIONID_SIZE)?);
    Ok(s)
}

/// Reads a fixed 8-octet verifier.
pub(crate) fn verifier(c: &mut DdpCursor<'_>) -> Result<Verifier, DdpDecodeError> {
    let mut v = [0u8; 8];
    v.copy_from_slice(c.opaque_fixed(8)?);
    Ok(v)
}
