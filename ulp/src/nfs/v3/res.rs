//! Results of every NFSv3 procedure (RFC 1813 §3.3). Every result is a union on
//! `nfsstat3` ([`NfsRes`]); READ and READLINK data are DDP-eligible (RFC 8267 §4), so
//! their failure arms mark the unused Write chunk ([`AttrNoData`]).

use super::args::StableHow;
use super::macros::xdr_struct;
use super::types::{
    Fattr3, NfsFh3, NfsTime3, Nfsstat3, PostOpAttr, PostOpFh3, Verf, WccData, MAX_NAME_DECODE,
    MAX_PATH_DECODE,
};
use crate::ddp::{DdpCursor, DdpDecodeError, DdpEncodeError, DdpEncoder, Void, XdrCodec};

/// A result union: `NFS3_OK` with `T`, any other status with `F`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NfsRes<T, F> {
    /// NFS3_OK.
    Ok(T),
    /// A failure status (never NFS3_OK) and its arm.
    Fail(Nfsstat3, F),
}

impl<T, F> NfsRes<T, F> {
    /// The status.
    pub fn status(&self) -> Nfsstat3 {
        match self {
            NfsRes::Ok(_) => Nfsstat3::OK,
            NfsRes::Fail(s, _) => *s,
        }
    }

    /// The success arm, or the failure status.
    pub fn ok(self) -> Result<T, Nfsstat3> {
        match self {
            NfsRes::Ok(t) => Ok(t),
            NfsRes::Fail(s, _) => Err(s),
        }
    }
}

impl<'d, T: XdrCodec<'d>, F: XdrCodec<'d>> XdrCodec<'d> for NfsRes<T, F> {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        match self {
            NfsRes::Ok(t) => {
                e.u32(0)?;
                t.encode(e)
            }
            NfsRes::Fail(s, f) => {
                // An "error" of NFS3_OK would make the reply undecodable; report it as
                // the catch-all instead.
                let s = if *s == Nfsstat3::OK {
                    Nfsstat3::SERVERFAULT
                } else {
                    *s
                };
                s.encode(e)?;
                f.encode(e)
            }
        }
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        let s = Nfsstat3::decode(c)?;
        if s == Nfsstat3::OK {
            T::decode(c).map(NfsRes::Ok)
        } else {
            F::decode(c).map(|f| NfsRes::Fail(s, f))
        }
    }
}

/// The failure arm of READ and READLINK: attributes, and the Write chunk that would
/// have carried the data left empty (RFC 8267 §6.4.1 pairing applies to the v3 arms too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AttrNoData(pub PostOpAttr);

impl<'d> XdrCodec<'d> for AttrNoData {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        self.0.encode(e)?;
        e.skip_ddp();
        Ok(())
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        let a = PostOpAttr::decode(c)?;
        c.skip_ddp()?;
        Ok(AttrNoData(a))
    }
}

/// GETATTR3res.
pub type GetattrRes = NfsRes<Fattr3, Void>;
/// SETATTR3res.
pub type SetattrRes = NfsRes<WccData, WccData>;
/// LOOKUP3res.
pub type LookupRes<'d> = NfsRes<LookupOk<'d>, PostOpAttr>;
/// ACCESS3res.
pub type AccessRes = NfsRes<AccessOk, PostOpAttr>;
/// READLINK3res.
pub type ReadlinkRes<'d> = NfsRes<ReadlinkOk<'d>, AttrNoData>;
/// READ3res.
pub type ReadRes<'d> = NfsRes<ReadOk<'d>, AttrNoData>;
/// WRITE3res.
pub type WriteRes = NfsRes<WriteOk, WccData>;
/// CREATE3res, MKDIR3res, SYMLINK3res and MKNOD3res.
pub type CreateRes<'d> = NfsRes<CreateOk<'d>, WccData>;
/// REMOVE3res and RMDIR3res.
pub type RemoveRes = NfsRes<WccData, WccData>;
/// RENAME3res.
pub type RenameRes = NfsRes<RenameWcc, RenameWcc>;
/// LINK3res.
pub type LinkRes = NfsRes<LinkWcc, LinkWcc>;
/// READDIR3res.
pub type ReaddirRes<'d> = NfsRes<ReaddirOk<'d>, PostOpAttr>;
/// READDIRPLUS3res.
pub type ReaddirplusRes<'d> = NfsRes<ReaddirplusOk<'d>, PostOpAttr>;
/// FSSTAT3res.
pub type FsstatRes = NfsRes<FsstatOk, PostOpAttr>;
/// FSINFO3res.
pub type FsinfoRes = NfsRes<FsinfoOk, PostOpAttr>;
/// PATHCONF3res.
pub type PathconfRes = NfsRes<PathconfOk, PostOpAttr>;
/// COMMIT3res.
pub type CommitRes = NfsRes<CommitOk, WccData>;

xdr_struct! {
    /// LOOKUP3resok.
    pub struct LookupOk<'d> {
        /// The object's handle.
        pub object: NfsFh3<'d>,
        /// Its attributes.
        pub obj_attributes: PostOpAttr,
        /// The directory's attributes.
        pub dir_attributes: PostOpAttr,
    }
}

xdr_struct! {
    /// ACCESS3resok.
    pub struct AccessOk {
        /// The object's attributes.
        pub obj_attributes: PostOpAttr,
        /// The ACCESS3_* bits granted.
        pub access: u32,
    }
}

/// READLINK3resok. The target is DDP-eligible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadlinkOk<'d> {
    /// The link's attributes.
    pub symlink_attributes: PostOpAttr,
    /// The target path.
    pub data: &'d [u8],
}

impl<'d> XdrCodec<'d> for ReadlinkOk<'d> {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        self.symlink_attributes.encode(e)?;
        e.string_ddp(self.data)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        Ok(ReadlinkOk {
            symlink_attributes: PostOpAttr::decode(c)?,
            data: c.string_ddp(MAX_PATH_DECODE)?,
        })
    }
}

/// READ3resok. The data is DDP-eligible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadOk<'d> {
    /// The file's attributes.
    pub file_attributes: PostOpAttr,
    /// Octets read.
    pub count: u32,
    /// Whether the read reached the end of the file.
    pub eof: bool,
    /// The data.
    pub data: &'d [u8],
}

impl<'d> XdrCodec<'d> for ReadOk<'d> {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        self.file_attributes.encode(e)?;
        e.u32(self.count)?;
        e.bool(self.eof)?;
        e.opaque_ddp(self.data)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        let file_attributes = PostOpAttr::decode(c)?;
        let count_at = c.position();
        let count = c.u32()?;
        let eof = c.bool()?;
        let data = c.opaque_ddp(u32::MAX)?;
        if data.len() != count as usize {
            return Err(DdpDecodeError::Invalid {
                offset: count_at,
                what: "READ3resok.count differs from the data length",
            });
        }
        Ok(ReadOk {
            file_attributes,
            count,
            eof,
            data,
        })
    }
}

xdr_struct! {
    /// WRITE3resok.
    pub struct WriteOk {
        /// The file's attributes before and after.
        pub file_wcc: WccData,
        /// Octets written.
        pub count: u32,
        /// How durable they are.
        pub committed: StableHow,
        /// The server's write verifier (changes when the server loses unstable data).
        pub verf: Verf,
    }
}

xdr_struct! {
    /// CREATE3resok (and MKDIR, SYMLINK, MKNOD).
    pub struct CreateOk<'d> {
        /// The new object's handle.
        pub obj: PostOpFh3<'d>,
        /// Its attributes.
        pub obj_attributes: PostOpAttr,
        /// The directory's attributes before and after.
        pub dir_wcc: WccData,
    }
}

xdr_struct! {
    /// Both arms of RENAME3res.
    pub struct RenameWcc {
        /// The source directory.
        pub fromdir_wcc: WccData,
        /// The target directory.
        pub todir_wcc: WccData,
    }
}

xdr_struct! {
    /// Both arms of LINK3res.
    pub struct LinkWcc {
        /// The file's attributes.
        pub file_attributes: PostOpAttr,
        /// The directory's attributes before and after.
        pub linkdir_wcc: WccData,
    }
}

/// `entry3`: one READDIR entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry3<'d> {
    /// File number.
    pub fileid: u64,
    /// Name.
    pub name: &'d [u8],
    /// Cookie to continue after this entry.
    pub cookie: u64,
}

impl Entry3<'_> {
    /// Octets the entry takes in a READDIR3resok, its list discriminant included.
    pub const fn xdr_len(name_len: usize) -> usize {
        4 + 8 + 4 + pad4(name_len) + 8
    }
}

const fn pad4(n: usize) -> usize {
    (n + 3) & !3
}

/// `entryplus3`: one READDIRPLUS entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryPlus3<'d> {
    /// File number.
    pub fileid: u64,
    /// Name.
    pub name: &'d [u8],
    /// Cookie to continue after this entry.
    pub cookie: u64,
    /// Attributes.
    pub name_attributes: PostOpAttr,
    /// Handle.
    pub name_handle: PostOpFh3<'d>,
}

impl EntryPlus3<'_> {
    /// Octets the entry takes in a READDIRPLUS3resok (its list discriminant included),
    /// and the part of it RFC 1813 counts against `dircount` (file id, name, cookie).
    pub fn xdr_len(&self) -> (usize, usize) {
        let attrs = if self.name_attributes.is_some() {
            88
        } else {
            4
        };
        let fh = match self.name_handle {
            Some(h) => 8 + pad4(h.0.len()),
            None => 4,
        };
        let dir = 8 + 4 + pad4(self.name.len()) + 8;
        (4 + dir + attrs + fh, dir)
    }
}

/// Encodes an XDR optional-data list (`entry3 *entries` with `nextentry`), which is the
/// same as a sequence of "value follows" booleans ending with FALSE.
fn encode_list<'d, T>(
    e: &mut DdpEncoder<'_, 'd>,
    items: &[T],
    mut each: impl FnMut(&mut DdpEncoder<'_, 'd>, &T) -> Result<(), DdpEncodeError>,
) -> Result<(), DdpEncodeError> {
    for i in items {
        e.bool(true)?;
        each(e, i)?;
    }
    e.bool(false)
}

/// Decodes an optional-data list; bounded by the message, since each entry consumes at
/// least a word.
fn decode_list<'d, T>(
    c: &mut DdpCursor<'d>,
    mut each: impl FnMut(&mut DdpCursor<'d>) -> Result<T, DdpDecodeError>,
) -> Result<Vec<T>, DdpDecodeError> {
    let mut v = Vec::new();
    while c.bool()? {
        v.push(each(c)?);
    }
    Ok(v)
}

/// READDIR3resok.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaddirOk<'d> {
    /// The directory's attributes.
    pub dir_attributes: PostOpAttr,
    /// The verifier to send back with later cookies.
    pub cookieverf: Verf,
    /// The entries.
    pub entries: Vec<Entry3<'d>>,
    /// Whether the last entry is the directory's last.
    pub eof: bool,
}

impl<'d> XdrCodec<'d> for ReaddirOk<'d> {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        self.dir_attributes.encode(e)?;
        self.cookieverf.encode(e)?;
        encode_list(e, &self.entries, |e, x| {
            e.u64(x.fileid)?;
            e.string(x.name)?;
            e.u64(x.cookie)
        })?;
        e.bool(self.eof)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        Ok(ReaddirOk {
            dir_attributes: PostOpAttr::decode(c)?,
            cookieverf: Verf::decode(c)?,
            entries: decode_list(c, |c| {
                Ok(Entry3 {
                    fileid: c.u64()?,
                    name: c.string(MAX_NAME_DECODE)?,
                    cookie: c.u64()?,
                })
            })?,
            eof: c.bool()?,
        })
    }
}

/// READDIRPLUS3resok.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaddirplusOk<'d> {
    /// The directory's attributes.
    pub dir_attributes: PostOpAttr,
    /// The verifier to send back with later cookies.
    pub cookieverf: Verf,
    /// The entries.
    pub entries: Vec<EntryPlus3<'d>>,
    /// Whether the last entry is the directory's last.
    pub eof: bool,
}

impl<'d> XdrCodec<'d> for ReaddirplusOk<'d> {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        self.dir_attributes.encode(e)?;
        self.cookieverf.encode(e)?;
        encode_list(e, &self.entries, |e, x| {
            e.u64(x.fileid)?;
            e.string(x.name)?;
            e.u64(x.cookie)?;
            x.name_attributes.encode(e)?;
            x.name_handle.encode(e)
        })?;
        e.bool(self.eof)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        Ok(ReaddirplusOk {
            dir_attributes: PostOpAttr::decode(c)?,
            cookieverf: Verf::decode(c)?,
            entries: decode_list(c, |c| {
                Ok(EntryPlus3 {
                    fileid: c.u64()?,
                    name: c.string(MAX_NAME_DECODE)?,
                    cookie: c.u64()?,
                    name_attributes: PostOpAttr::decode(c)?,
                    name_handle: PostOpFh3::decode(c)?,
                })
            })?,
            eof: c.bool()?,
        })
    }
}

xdr_struct! {
    /// FSSTAT3resok.
    pub struct FsstatOk {
        /// The root's attributes.
        pub obj_attributes: PostOpAttr,
        /// Total octets.
        pub tbytes: u64,
        /// Free octets.
        pub fbytes: u64,
        /// Free octets available to the caller.
        pub abytes: u64,
        /// Total file slots.
        pub tfiles: u64,
        /// Free file slots.
        pub ffiles: u64,
        /// Free file slots available to the caller.
        pub afiles: u64,
        /// Seconds the numbers stay valid.
        pub invarsec: u32,
    }
}

xdr_struct! {
    /// FSINFO3resok.
    pub struct FsinfoOk {
        /// The root's attributes.
        pub obj_attributes: PostOpAttr,
        /// Largest READ.
        pub rtmax: u32,
        /// Preferred READ size.
        pub rtpref: u32,
        /// Suggested READ multiple.
        pub rtmult: u32,
        /// Largest WRITE.
        pub wtmax: u32,
        /// Preferred WRITE size.
        pub wtpref: u32,
        /// Suggested WRITE multiple.
        pub wtmult: u32,
        /// Preferred READDIR size.
        pub dtpref: u32,
        /// Largest file.
        pub maxfilesize: u64,
        /// Time granularity.
        pub time_delta: NfsTime3,
        /// FSF3_* bits.
        pub properties: u32,
    }
}

xdr_struct! {
    /// PATHCONF3resok.
    pub struct PathconfOk {
        /// The object's attributes.
        pub obj_attributes: PostOpAttr,
        /// Most hard links.
        pub linkmax: u32,
        /// Longest name.
        pub name_max: u32,
        /// Long names are refused rather than truncated.
        pub no_trunc: bool,
        /// Only the superuser may change owners.
        pub chown_restricted: bool,
        /// Names are compared case-insensitively.
        pub case_insensitive: bool,
        /// Names keep their case.
        pub case_preserving: bool,
    }
}

xdr_struct! {
    /// COMMIT3resok.
    pub struct CommitOk {
        /// The file's attributes before and after.
        pub file_wcc: WccData,
        /// The server's write verifier.
        pub verf: Verf,
    }
}

/// FSINFO `properties` bits.
pub mod fsf {
    /// FSF3_LINK: hard links are supported.
    pub const LINK: u32 = 0x1;
    /// FSF3_SYMLINK: symbolic links are supported.
    pub const SYMLINK: u32 = 0x2;
    /// FSF3_HOMOGENEOUS: PATHCONF is the same for every file.
    pub const HOMOGENEOUS: u32 = 0x8;
    /// FSF3_CANSETTIME: SETATTR can set times.
    pub const CANSETTIME: u32 = 0x10;
}

/// ACCESS3_* bits.
pub mod access {
    /// Read data or list a directory.
    pub const READ: u32 = 0x1;
    /// Look up a name in a directory.
    pub const LOOKUP: u32 = 0x2;
    /// Modify file data.
    pub const MODIFY: u32 = 0x4;
    /// Extend a file or add to a directory.
    pub const EXTEND: u32 = 0x8;
    /// Delete from a directory.
    pub const DELETE: u32 = 0x10;
    /// Execute a file.
    pub const EXECUTE: u32 = 0x20;
}
