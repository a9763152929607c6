//! MOUNT version 3 (RFC 1813 Appendix I): procedure numbers, [`ProcInfo`]s and the XDR
//! codecs of its arguments and results. MOUNT gives a client the root file handle of an
//! export; it runs over TCP next to NFS/RDMA (RFC 8267 §5.1), see
//! [`crate::nfs::server::tcp`].

use crate::binding::{ProcInfo, ReplySize};
use crate::ddp::{DdpCursor, DdpDecodeError, DdpEncodeError, DdpEncoder, XdrCodec};

/// The MOUNT program number.
pub const MOUNT_PROGRAM: u32 = 100_005;
/// The MOUNT version this module speaks.
pub const MOUNT_V3: u32 = 3;
/// MNTPATHLEN: longest export path.
pub const MNTPATHLEN: u32 = 1024;
/// MNTNAMLEN: longest host or group name.
pub const MNTNAMLEN: u32 = 255;
/// FHSIZE3: longest file handle.
pub const FHSIZE3: u32 = 64;

/// Procedure numbers.
pub mod procs {
    /// MOUNTPROC3_NULL.
    pub const NULL: u32 = 0;
    /// MOUNTPROC3_MNT.
    pub const MNT: u32 = 1;
    /// MOUNTPROC3_DUMP.
    pub const DUMP: u32 = 2;
    /// MOUNTPROC3_UMNT.
    pub const UMNT: u32 = 3;
    /// MOUNTPROC3_UMNTALL.
    pub const UMNTALL: u32 = 4;
    /// MOUNTPROC3_EXPORT.
    pub const EXPORT: u32 = 5;
}

/// `mountstat3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MountStat3(pub u32);

impl MountStat3 {
    /// MNT3_OK.
    pub const OK: MountStat3 = MountStat3(0);
    /// MNT3ERR_PERM.
    pub const PERM: MountStat3 = MountStat3(1);
    /// MNT3ERR_NOENT: no such export.
    pub const NOENT: MountStat3 = MountStat3(2);
    /// MNT3ERR_IO.
    pub const IO: MountStat3 = MountStat3(5);
    /// MNT3ERR_ACCES.
    pub const ACCES: MountStat3 = MountStat3(13);
    /// MNT3ERR_NOTDIR.
    pub const NOTDIR: MountStat3 = MountStat3(20);
    /// MNT3ERR_INVAL.
    pub const INVAL: MountStat3 = MountStat3(22);
    /// MNT3ERR_NAMETOOLONG.
    pub const NAMETOOLONG: MountStat3 = MountStat3(63);
    /// MNT3ERR_NOTSUPP.
    pub const NOTSUPP: MountStat3 = MountStat3(10004);
    /// MNT3ERR_SERVERFAULT.
    pub const SERVERFAULT: MountStat3 = MountStat3(10006);

    /// The RFC 1813 name, e.g. `"MNT3ERR_NOENT"`, or `None` if unknown.
    pub const fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "MNT3_OK",
            1 => "MNT3ERR_PERM",
            2 => "MNT3ERR_NOENT",
            5 => "MNT3ERR_IO",
            13 => "MNT3ERR_ACCES",
            20 => "MNT3ERR_NOTDIR",
            22 => "MNT3ERR_INVAL",
            63 => "MNT3ERR_NAMETOOLONG",
            10004 => "MNT3ERR_NOTSUPP",
            10006 => "MNT3ERR_SERVERFAULT",
            _ => return None,
        })
    }
}

impl core::fmt::Display for MountStat3 {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "mountstat3({})", self.0),
        }
    }
}

/// Every MOUNT v3 procedure, indexed by number. Reply sizes bound the fixed parts; DUMP
/// and EXPORT lists are bounded by what the server holds, and travel over TCP anyway.
/// All are idempotent: mounting or unmounting twice only rewrites the server's
/// advisory mount list.
pub static PROCEDURES: [ProcInfo; 6] = [
    ProcInfo::NULL,
    // mountres3_ok: status, fhandle3 (4 + 64), auth_flavors<> (we return one).
    ProcInfo::plain(procs::MNT, "MNT", ReplySize::fixed(4 + 68 + 4 + 4 * 8)).marked_idempotent(),
    ProcInfo::plain(procs::DUMP, "DUMP", ReplySize::fixed(64 * 1024))
        .marked_idempotent()
        .marked_reply_usually_small(),
    ProcInfo::plain(procs::UMNT, "UMNT", ReplySize::fixed(0)).marked_idempotent(),
    ProcInfo::plain(procs::UMNTALL, "UMNTALL", ReplySize::fixed(0)).marked_idempotent(),
    ProcInfo::plain(procs::EXPORT, "EXPORT", ReplySize::fixed(64 * 1024))
        .marked_idempotent()
        .marked_reply_usually_small(),
];

/// The declarations of MOUNT v3 procedure `procedure`.
pub fn proc_info(procedure: u32) -> Option<&'static ProcInfo> {
    PROCEDURES.get(procedure as usize)
}

/// `dirpath`: the argument of MNT and UMNT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirPath<'d>(pub &'d [u8]);

impl<'d> XdrCodec<'d> for DirPath<'d> {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        e.string(self.0)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        c.string(MNTPATHLEN).map(DirPath)
    }
}

/// `mountres3`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MountRes3<'d> {
    /// MNT3_OK: the export's root handle and the auth flavors the server accepts.
    Ok {
        /// `fhandle3`.
        fhandle: &'d [u8],
        /// RPC auth flavors, most preferred first.
        auth_flavors: Vec<u32>,
    },
    /// Any other status.
    Fail(MountStat3),
}

impl<'d> XdrCodec<'d> for MountRes3<'d> {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        match self {
            MountRes3::Ok {
                fhandle,
                auth_flavors,
            } => {
                e.u32(0)?;
                e.opaque(fhandle)?;
                e.u32(auth_flavors.len() as u32)?;
                for f in auth_flavors {
                    e.u32(*f)?;
                }
                Ok(())
            }
            MountRes3::Fail(s) => e.u32(if s.0 == 0 { 10006 } else { s.0 }),
        }
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        let s = c.u32()?;
        if s != 0 {
            return Ok(MountRes3::Fail(MountStat3(s)));
        }
        let fhandle = c.opaque(FHSIZE3)?;
        // Each flavor is a word: the message bounds the count.
        let n = c.count((c.remaining() / 4) as u32)?;
        let mut auth_flavors = Vec::with_capacity(n as usize);
        for _ in 0..n {
            auth_flavors.push(c.u32()?);
        }
        Ok(MountRes3::Ok {
            fhandle,
            auth_flavors,
        })
    }
}

/// One `mountbody` of DUMP's `mountlist`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MountEntry<'d> {
    /// The client's host name.
    pub hostname: &'d [u8],
    /// The path it mounted.
    pub directory: &'d [u8],
}

/// DUMP's result: every mount the server remembers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MountList<'d>(pub Vec<MountEntry<'d>>);

impl<'d> XdrCodec<'d> for MountList<'d> {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        for m in &self.0 {
            e.bool(true)?;
            e.string(m.hostname)?;
            e.string(m.directory)?;
        }
        e.bool(false)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        let mut v = Vec::new();
        while c.bool()? {
            v.push(MountEntry {
                hostname: c.string(MNTNAMLEN)?,
                directory: c.string(MNTPATHLEN)?,
            });
        }
        Ok(MountList(v))
    }
}

/// One `exportnode` of EXPORT's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportEntry<'d> {
    /// The export path.
    pub dir: &'d [u8],
    /// Groups allowed to mount it (empty: everyone).
    pub groups: Vec<&'d [u8]>,
}

/// EXPORT's result.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Exports<'d>(pub Vec<ExportEntry<'d>>);

impl<'d> XdrCodec<'d> for Exports<'d> {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        for x in &self.0 {
            e.bool(true)?;
            e.string(x.dir)?;
            for g in &x.groups {
                e.bool(true)?;
                e.string(g)?;
            }
            e.bool(false)?;
        }
        e.bool(false)
    }
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        let mut v = Vec::new();
        while c.bool()? {
            let dir = c.string(MNTPATHLEN)?;
            let mut groups = Vec::new();
            while c.bool()? {
                groups.push(c.string(MNTNAMLEN)?);
            }
            v.push(ExportEntry { dir, groups });
        }
        Ok(Exports(v))
    }
}
