//! Arguments of every NFSv3 procedure (RFC 1813 §3.3). Handles, names and data borrow
//! the call message (or its Read chunk): decoding never copies. The DDP-eligible items
//! (WRITE data, the SYMLINK target) go through `opaque_ddp`, so they may arrive inline or
//! in a Read chunk at their XDR position (RFC 8267 §4).

use super::macros::xdr_struct;
use super::types::{
    enum_word, DirOpArgs3, Ftype3, NfsFh3, NfsTime3, Sattr3, Verf, MAX_PATH_DECODE,
};
use crate::ddp::{DdpCursor, DdpDecodeError, DdpEncodeError, DdpEncoder, XdrCodec};

/// `stable_how`: how durable a WRITE must be before the reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StableHow {
    /// UNSTABLE: may be cached; COMMIT makes it durable.
    Unstable = 0,
    /// DATA_SYNC: data durable before the reply.
    DataSync = 1,
    /// FILE_SYNC: data and metadata durable before the reply.
    FileSync = 2,
}

impl<'d> XdrCodec<'d> for StableHow {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        e.u32(*self as u32)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        Ok(match enum_word(c, 0..=2, "stable_how")? {
            0 => StableHow::Unstable,
            1 => StableHow::DataSync,
            _ => StableHow::FileSync,
        })
    }
}

xdr_struct! {
    /// SETATTR3args.
    pub struct SetattrArgs<'d> {
        /// The file.
        pub object: NfsFh3<'d>,
        /// What to set.
        pub new_attributes: Sattr3,
        /// `sattrguard3`: only if the file's ctime still equals this.
        pub guard: Option<NfsTime3>,
    }
}

xdr_struct! {
    /// ACCESS3args.
    pub struct AccessArgs<'d> {
        /// The file.
        pub object: NfsFh3<'d>,
        /// ACCESS3_* bits asked about.
        pub access: u32,
    }
}

xdr_struct! {
    /// READ3args.
    pub struct ReadArgs<'d> {
        /// The file.
        pub file: NfsFh3<'d>,
        /// Where to start.
        pub offset: u64,
        /// Octets wanted.
        pub count: u32,
    }
}

/// WRITE3args. `data` is DDP-eligible: it may arrive in a Read chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteArgs<'d> {
    /// The file.
    pub file: NfsFh3<'d>,
    /// Where to write.
    pub offset: u64,
    /// Octets to write (must equal the data's length, RFC 1813 §3.3.7).
    pub count: u32,
    /// Durability asked for.
    pub stable: StableHow,
    /// The data.
    pub data: &'d [u8],
}

impl<'d> XdrCodec<'d> for WriteArgs<'d> {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        self.file.encode(e)?;
        e.u64(self.offset)?;
        e.u32(self.count)?;
        self.stable.encode(e)?;
        e.opaque_ddp(self.data)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        let file = NfsFh3::decode(c)?;
        let offset = c.u64()?;
        let count_at = c.position();
        let count = c.u32()?;
        let stable = StableHow::decode(c)?;
        let data = c.opaque_ddp(u32::MAX)?;
        if data.len() != count as usize {
            // A count that disagrees with the data is malformed, not a short write.
            return Err(DdpDecodeError::Invalid {
                offset: count_at,
                what: "WRITE3args.count differs from the data length",
            });
        }
        Ok(WriteArgs {
            file,
            offset,
            count,
            stable,
            data,
        })
    }
}

/// `createhow3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateHow3 {
    /// UNCHECKED: create, or use the existing file.
    Unchecked(Sattr3),
    /// GUARDED: fail with NFS3ERR_EXIST if it exists.
    Guarded(Sattr3),
    /// EXCLUSIVE: create with this verifier (stored so a retransmission succeeds).
    Exclusive(Verf),
}

impl<'d> XdrCodec<'d> for CreateHow3 {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        match self {
            CreateHow3::Unchecked(a) => {
                e.u32(0)?;
                a.encode(e)
            }
            CreateHow3::Guarded(a) => {
                e.u32(1)?;
                a.encode(e)
            }
            CreateHow3::Exclusive(v) => {
                e.u32(2)?;
                v.encode(e)
            }
        }
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        Ok(match enum_word(c, 0..=2, "createmode3")? {
            0 => CreateHow3::Unchecked(Sattr3::decode(c)?),
            1 => CreateHow3::Guarded(Sattr3::decode(c)?),
            _ => CreateHow3::Exclusive(Verf::decode(c)?),
        })
    }
}

xdr_struct! {
    /// CREATE3args.
    pub struct CreateArgs<'d> {
        /// Directory and name.
        pub place: DirOpArgs3<'d>,
        /// How to create.
        pub how: CreateHow3,
    }
}

xdr_struct! {
    /// MKDIR3args.
    pub struct MkdirArgs<'d> {
        /// Directory and name.
        pub place: DirOpArgs3<'d>,
        /// Initial attributes.
        pub attributes: Sattr3,
    }
}

/// SYMLINK3args. The target (`symlink_data`) is DDP-eligible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SymlinkArgs<'d> {
    /// Directory and name of the link.
    pub place: DirOpArgs3<'d>,
    /// Attributes of the link.
    pub attributes: Sattr3,
    /// The target path, stored verbatim.
    pub target: &'d [u8],
}

impl<'d> XdrCodec<'d> for SymlinkArgs<'d> {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        self.place.encode(e)?;
        self.attributes.encode(e)?;
        e.string_ddp(self.target)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        Ok(SymlinkArgs {
            place: DirOpArgs3::decode(c)?,
            attributes: Sattr3::decode(c)?,
            target: c.string_ddp(MAX_PATH_DECODE)?,
        })
    }
}

/// `mknoddata3`: what MKNOD makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MknodData {
    /// NF3CHR or NF3BLK with attributes and device numbers.
    Device(Ftype3, Sattr3, (u32, u32)),
    /// NF3SOCK or NF3FIFO with attributes.
    Special(Ftype3, Sattr3),
    /// Any other type: no data (the server answers NFS3ERR_BADTYPE).
    Other(Ftype3),
}

impl<'d> XdrCodec<'d> for MknodData {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        match self {
            MknodData::Device(t, a, (major, minor)) => {
                t.encode(e)?;
                a.encode(e)?;
                e.u32(*major)?;
                e.u32(*minor)
            }
            MknodData::Special(t, a) => {
                t.encode(e)?;
                a.encode(e)
            }
            MknodData::Other(t) => t.encode(e),
        }
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        let t = Ftype3::decode(c)?;
        Ok(match t {
            Ftype3::Chr | Ftype3::Blk => {
                MknodData::Device(t, Sattr3::decode(c)?, (c.u32()?, c.u32()?))
            }
            Ftype3::Sock | Ftype3::Fifo => MknodData::Special(t, Sattr3::decode(c)?),
            _ => MknodData::Other(t),
        })
    }
}

xdr_struct! {
    /// MKNOD3args.
    pub struct MknodArgs<'d> {
        /// Directory and name.
        pub place: DirOpArgs3<'d>,
        /// What to make.
        pub what: MknodData,
    }
}

xdr_struct! {
    /// RENAME3args.
    pub struct RenameArgs<'d> {
        /// Old directory and name.
        pub from: DirOpArgs3<'d>,
        /// New directory and name.
        pub to: DirOpArgs3<'d>,
    }
}

xdr_struct! {
    /// LINK3args.
    pub struct LinkArgs<'d> {
        /// The existing file.
        pub file: NfsFh3<'d>,
        /// Directory and name of the new link.
        pub link: DirOpArgs3<'d>,
    }
}

xdr_struct! {
    /// READDIR3args.
    pub struct ReaddirArgs<'d> {
        /// The directory.
        pub dir: NfsFh3<'d>,
        /// Where to continue (0: from the start).
        pub cookie: u64,
        /// The verifier the server returned with `cookie`.
        pub cookieverf: Verf,
        /// Largest READDIR3resok, XDR overhead included.
        pub count: u32,
    }
}

xdr_struct! {
    /// READDIRPLUS3args.
    pub struct ReaddirplusArgs<'d> {
        /// The directory.
        pub dir: NfsFh3<'d>,
        /// Where to continue.
        pub cookie: u64,
        /// The verifier returned with `cookie`.
        pub cookieverf: Verf,
        /// Most octets of directory information (names and file ids).
        pub dircount: u32,
        /// Largest READDIRPLUS3resok, XDR overhead included.
        pub maxcount: u32,
    }
}

xdr_struct! {
    /// COMMIT3args.
    pub struct CommitArgs<'d> {
        /// The file.
        pub file: NfsFh3<'d>,
        /// Start of the range (0 with `count` 0: the whole file).
        pub offset: u64,
        /// Length of the range.
        pub count: u32,
    }
}
