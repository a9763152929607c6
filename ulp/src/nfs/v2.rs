//! NFS version 2 (RFC 1094) under the Legacy NFS binding (RFC 8267 §4).
//!
//! DDP-eligible items are the same four as for NFSv3: WRITE data, the SYMLINK pathname,
//! READ data and the READLINK pathname. Result sizes from RFC 1094 §2.3 (octets):
//! `fattr` is 68 (eleven words and three `timeval`s), `fhandle` 32, `attrstat`
//! 4 + 68, `diropres` 4 + 32 + 68, `path` at most 1024 (MAXPATHLEN), `nfsdata` at most
//! 8192 (MAXDATA).

use crate::binding::{DataBound, DdpEligible, ProcInfo, ReplySize};

/// Procedure numbers (RFC 1094 §2.2).
pub mod procs {
    /// NULL.
    pub const NULL: u32 = 0;
    /// GETATTR.
    pub const GETATTR: u32 = 1;
    /// SETATTR.
    pub const SETATTR: u32 = 2;
    /// ROOT (obsolete).
    pub const ROOT: u32 = 3;
    /// LOOKUP.
    pub const LOOKUP: u32 = 4;
    /// READLINK.
    pub const READLINK: u32 = 5;
    /// READ.
    pub const READ: u32 = 6;
    /// WRITECACHE (unused).
    pub const WRITECACHE: u32 = 7;
    /// WRITE.
    pub const WRITE: u32 = 8;
    /// CREATE.
    pub const CREATE: u32 = 9;
    /// REMOVE.
    pub const REMOVE: u32 = 10;
    /// RENAME.
    pub const RENAME: u32 = 11;
    /// LINK.
    pub const LINK: u32 = 12;
    /// SYMLINK.
    pub const SYMLINK: u32 = 13;
    /// MKDIR.
    pub const MKDIR: u32 = 14;
    /// RMDIR.
    pub const RMDIR: u32 = 15;
    /// READDIR.
    pub const READDIR: u32 = 16;
    /// STATFS.
    pub const STATFS: u32 = 17;
}

/// MAXPATHLEN.
pub const MAX_PATH_LEN: u32 = 1024;
/// MAXDATA.
pub const MAX_DATA: u32 = 8192;

const STATUS: u32 = 4;
const FATTR: u32 = 68;
const ATTRSTAT: u32 = STATUS + FATTR;
const DIROPRES: u32 = STATUS + 32 + FATTR;

/// writeargs.data.
pub const WRITE_DATA: DdpEligible = DdpEligible {
    name: "writeargs.data",
    max_len: MAX_DATA,
};
/// symlinkargs.to (the pathname).
pub const SYMLINK_TO: DdpEligible = DdpEligible {
    name: "symlinkargs.to",
    max_len: MAX_PATH_LEN,
};
/// readokres.data.
pub const READ_DATA: DdpEligible = DdpEligible {
    name: "readokres.data",
    max_len: MAX_DATA,
};
/// readlinkres.data (the pathname).
pub const READLINK_DATA: DdpEligible = DdpEligible {
    name: "readlinkres.data",
    max_len: MAX_PATH_LEN,
};

const fn fixed(procedure: u32, name: &'static str, octets: u32) -> ProcInfo {
    ProcInfo::plain(procedure, name, ReplySize::fixed(octets))
}

/// Every NFSv2 procedure, indexed by number. SETATTR, WRITE, CREATE, REMOVE, RENAME,
/// LINK, SYMLINK, MKDIR and RMDIR are not idempotent (as in NFSv3: RFC 1813 §4.5).
pub static PROCEDURES: [ProcInfo; 18] = [
    ProcInfo::NULL,
    fixed(procs::GETATTR, "GETATTR", ATTRSTAT).marked_idempotent(),
    fixed(procs::SETATTR, "SETATTR", ATTRSTAT),
    fixed(procs::ROOT, "ROOT", 0).marked_idempotent(),
    fixed(procs::LOOKUP, "LOOKUP", DIROPRES).marked_idempotent(),
    // readlinkres: status + path<MAXPATHLEN>.
    ProcInfo {
        procedure: procs::READLINK,
        name: "READLINK",
        ddp_args: &[],
        ddp_results: &[READLINK_DATA],
        reply: ReplySize::with_data(STATUS + 4, DataBound::Protocol(MAX_PATH_LEN), true, STATUS),
        short_reply_retry: false,
        idempotent: true,
        reply_usually_small: false,
    },
    // readres: status + fattr + nfsdata (at most the requested count, itself at most
    // MAXDATA).
    ProcInfo {
        procedure: procs::READ,
        name: "READ",
        ddp_args: &[],
        ddp_results: &[READ_DATA],
        reply: ReplySize::with_data(ATTRSTAT + 4, DataBound::Requested, true, STATUS),
        short_reply_retry: false,
        idempotent: true,
        reply_usually_small: false,
    },
    fixed(procs::WRITECACHE, "WRITECACHE", 0).marked_idempotent(),
    ProcInfo {
        procedure: procs::WRITE,
        name: "WRITE",
        ddp_args: &[WRITE_DATA],
        ddp_results: &[],
        reply: ReplySize::fixed(ATTRSTAT),
        short_reply_retry: false,
        idempotent: false,
        reply_usually_small: false,
    },
    fixed(procs::CREATE, "CREATE", DIROPRES),
    fixed(procs::REMOVE, "REMOVE", STATUS),
    fixed(procs::RENAME, "RENAME", STATUS),
    fixed(procs::LINK, "LINK", STATUS),
    ProcInfo {
        procedure: procs::SYMLINK,
        name: "SYMLINK",
        ddp_args: &[SYMLINK_TO],
        ddp_results: &[],
        reply: ReplySize::fixed(STATUS),
        short_reply_retry: false,
        idempotent: false,
        reply_usually_small: false,
    },
    fixed(procs::MKDIR, "MKDIR", DIROPRES),
    fixed(procs::RMDIR, "RMDIR", STATUS),
    // readdirres: status, the entry list (at most `count` octets, RFC 1094 §2.2.17), the
    // list terminator and eof.
    ProcInfo::plain(
        procs::READDIR,
        "READDIR",
        ReplySize::with_data(STATUS + 4 + 4, DataBound::Requested, false, STATUS),
    )
    .marked_idempotent(),
    // statfsres: status + tsize, bsize, blocks, bfree, bavail.
    fixed(procs::STATFS, "STATFS", STATUS + 5 * 4).marked_idempotent(),
];

/// The declarations of NFSv2 procedure `procedure`.
pub fn proc_info(procedure: u32) -> Option<&'static ProcInfo> {
    PROCEDURES.get(procedure as usize)
}
