//! NFS version 3 (RFC 1813) under the Legacy NFS binding (RFC 8267 §4).
//!
//! DDP-eligible items (RFC 8267 §4): the opaque file data argument of WRITE, the pathname
//! argument of SYMLINK, the opaque file data result of READ and the pathname result of
//! READLINK. Nothing else. No NFSv3 procedure benefits from short Reply chunk retry
//! (§4.1).
//!
//! Result sizes, from the XDR of RFC 1813 §2.5 and §3.3 (octets):
//!
//! | item          | size | made of                                               |
//! |---------------|------|-------------------------------------------------------|
//! | `fattr3`      | 84   | type, mode, nlink, uid, gid (5×4) + size, used, rdev, fsid, fileid, atime, mtime, ctime (8×8) |
//! | `post_op_attr`| 88   | bool + `fattr3`                                       |
//! | `wcc_attr`    | 24   | size + mtime + ctime                                  |
//! | `pre_op_attr` | 28   | bool + `wcc_attr`                                     |
//! | `wcc_data`    | 116  | `pre_op_attr` + `post_op_attr`                        |
//! | `nfs_fh3`     | 68   | length + 64 (NFS3_FHSIZE)                             |
//! | `post_op_fh3` | 72   | bool + `nfs_fh3`                                      |
//!
//! Every result starts with a 4-octet `nfsstat3`.
//!
//! The XDR codecs of every argument and result are in [`types`], [`args`] and [`res`];
//! the server that uses them is [`crate::nfs::server`].

use crate::binding::{DataBound, DdpEligible, ProcInfo, ReplySize};

pub mod args;
mod macros;
pub mod res;
pub mod types;

/// Procedure numbers (RFC 1813 §3.3).
pub mod procs {
    /// NULL.
    pub const NULL: u32 = 0;
    /// GETATTR.
    pub const GETATTR: u32 = 1;
    /// SETATTR.
    pub const SETATTR: u32 = 2;
    /// LOOKUP.
    pub const LOOKUP: u32 = 3;
    /// ACCESS.
    pub const ACCESS: u32 = 4;
    /// READLINK.
    pub const READLINK: u32 = 5;
    /// READ.
    pub const READ: u32 = 6;
    /// WRITE.
    pub const WRITE: u32 = 7;
    /// CREATE.
    pub const CREATE: u32 = 8;
    /// MKDIR.
    pub const MKDIR: u32 = 9;
    /// SYMLINK.
    pub const SYMLINK: u32 = 10;
    /// MKNOD.
    pub const MKNOD: u32 = 11;
    /// REMOVE.
    pub const REMOVE: u32 = 12;
    /// RMDIR.
    pub const RMDIR: u32 = 13;
    /// RENAME.
    pub const RENAME: u32 = 14;
    /// LINK.
    pub const LINK: u32 = 15;
    /// READDIR.
    pub const READDIR: u32 = 16;
    /// READDIRPLUS.
    pub const READDIRPLUS: u32 = 17;
    /// FSSTAT.
    pub const FSSTAT: u32 = 18;
    /// FSINFO.
    pub const FSINFO: u32 = 19;
    /// PATHCONF.
    pub const PATHCONF: u32 = 20;
    /// COMMIT.
    pub const COMMIT: u32 = 21;
}

/// `fattr3`.
pub const FATTR3_LEN: u32 = 84;
/// `post_op_attr` with attributes.
pub const POST_OP_ATTR_LEN: u32 = 4 + FATTR3_LEN;
/// `wcc_data` with both attribute sets.
pub const WCC_DATA_LEN: u32 = 4 + 24 + POST_OP_ATTR_LEN;
/// `nfs_fh3` at its largest (NFS3_FHSIZE = 64).
pub const NFS_FH3_MAX_LEN: u32 = 4 + 64;
/// `post_op_fh3` with a handle.
pub const POST_OP_FH3_LEN: u32 = 4 + NFS_FH3_MAX_LEN;

const STATUS: u32 = 4;
/// The failure arm most procedures share: status + `post_op_attr`.
const FAIL_ATTR: u32 = STATUS + POST_OP_ATTR_LEN;
/// Status + `wcc_data`: both arms of SETATTR, REMOVE, RMDIR; the failure arm of the
/// creating procedures, WRITE and COMMIT.
const STATUS_WCC: u32 = STATUS + WCC_DATA_LEN;
/// CREATE, MKDIR, SYMLINK, MKNOD success: `post_op_fh3` + `post_op_attr` + `wcc_data`.
const CREATED: u32 = STATUS + POST_OP_FH3_LEN + POST_OP_ATTR_LEN + WCC_DATA_LEN;

/// WRITE3args.data.
pub const WRITE_DATA: DdpEligible = DdpEligible {
    name: "WRITE3args.data",
    max_len: u32::MAX,
};
/// SYMLINK3args.symlink.symlink_data (the pathname).
pub const SYMLINK_DATA: DdpEligible = DdpEligible {
    name: "SYMLINK3args.symlink.symlink_data",
    max_len: u32::MAX,
};
/// READ3resok.data.
pub const READ_DATA: DdpEligible = DdpEligible {
    name: "READ3resok.data",
    max_len: u32::MAX,
};
/// READLINK3resok.data (the pathname).
pub const READLINK_DATA: DdpEligible = DdpEligible {
    name: "READLINK3resok.data",
    max_len: u32::MAX,
};

const fn fixed(procedure: u32, name: &'static str, octets: u32) -> ProcInfo {
    ProcInfo::plain(procedure, name, ReplySize::fixed(octets))
}

/// Every NFSv3 procedure, indexed by number.
///
/// Not idempotent (RFC 1813 §4.5; the procedures Linux nfsd keeps in its reply cache):
/// SETATTR (a repeated size change can undo writes made in between), WRITE (a repeat
/// can overwrite a later WRITE to the same range, and its reply carries before and after
/// attributes), CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, RENAME and LINK (a repeat
/// fails where the original succeeded). COMMIT is idempotent: committing twice commits
/// the same data.
pub static PROCEDURES: [ProcInfo; 22] = [
    ProcInfo::NULL,
    // GETATTR3resok: fattr3; failure: void.
    fixed(procs::GETATTR, "GETATTR", STATUS + FATTR3_LEN).marked_idempotent(),
    // SETATTR3res: wcc_data in both arms.
    fixed(procs::SETATTR, "SETATTR", STATUS_WCC),
    // LOOKUP3resok: object handle + object and directory attributes.
    fixed(
        procs::LOOKUP,
        "LOOKUP",
        STATUS + NFS_FH3_MAX_LEN + 2 * POST_OP_ATTR_LEN,
    )
    .marked_idempotent(),
    // ACCESS3resok: attributes + access word.
    fixed(procs::ACCESS, "ACCESS", FAIL_ATTR + 4).marked_idempotent(),
    // READLINK3resok: attributes + nfspath3. NFSv3 leaves the path unbounded; the client
    // knows its length from cached attributes (RFC 8267 §3).
    ProcInfo {
        procedure: procs::READLINK,
        name: "READLINK",
        ddp_args: &[],
        ddp_results: &[READLINK_DATA],
        reply: ReplySize::with_data(FAIL_ATTR + 4, DataBound::Requested, true, FAIL_ATTR),
        short_reply_retry: false,
        idempotent: true,
        reply_usually_small: false,
    },
    // READ3resok: attributes, count, eof, data<> (at most the requested count).
    ProcInfo {
        procedure: procs::READ,
        name: "READ",
        ddp_args: &[],
        ddp_results: &[READ_DATA],
        reply: ReplySize::with_data(FAIL_ATTR + 4 + 4 + 4, DataBound::Requested, true, FAIL_ATTR),
        short_reply_retry: false,
        idempotent: true,
        reply_usually_small: false,
    },
    // WRITE3resok: wcc_data, count, committed, writeverf3.
    ProcInfo {
        procedure: procs::WRITE,
        name: "WRITE",
        ddp_args: &[WRITE_DATA],
        ddp_results: &[],
        reply: ReplySize::fixed(STATUS_WCC + 4 + 4 + 8),
        short_reply_retry: false,
        idempotent: false,
        reply_usually_small: false,
    },
    fixed(procs::CREATE, "CREATE", CREATED),
    fixed(procs::MKDIR, "MKDIR", CREATED),
    ProcInfo {
        procedure: procs::SYMLINK,
        name: "SYMLINK",
        ddp_args: &[SYMLINK_DATA],
        ddp_results: &[],
        reply: ReplySize::fixed(CREATED),
        short_reply_retry: false,
        idempotent: false,
        reply_usually_small: false,
    },
    fixed(procs::MKNOD, "MKNOD", CREATED),
    fixed(procs::REMOVE, "REMOVE", STATUS_WCC),
    fixed(procs::RMDIR, "RMDIR", STATUS_WCC),
    // RENAME3res: wcc_data of both directories.
    fixed(procs::RENAME, "RENAME", STATUS + 2 * WCC_DATA_LEN),
    // LINK3res: file attributes + directory wcc_data.
    fixed(procs::LINK, "LINK", FAIL_ATTR + WCC_DATA_LEN),
    // READDIR3args.count bounds READDIR3resok "including all XDR overhead" (RFC 1813
    // §3.3.16); the failure arm is status + attributes.
    ProcInfo::plain(
        procs::READDIR,
        "READDIR",
        ReplySize::with_data(STATUS, DataBound::Requested, false, FAIL_ATTR),
    )
    .marked_idempotent(),
    // READDIRPLUS3args.maxcount bounds READDIRPLUS3resok likewise (§3.3.17).
    ProcInfo::plain(
        procs::READDIRPLUS,
        "READDIRPLUS",
        ReplySize::with_data(STATUS, DataBound::Requested, false, FAIL_ATTR),
    )
    .marked_idempotent(),
    // FSSTAT3resok: attributes, six size3 counters, invarsec.
    fixed(procs::FSSTAT, "FSSTAT", FAIL_ATTR + 6 * 8 + 4).marked_idempotent(),
    // FSINFO3resok: attributes, seven uint32 limits, maxfilesize, time_delta, properties.
    fixed(procs::FSINFO, "FSINFO", FAIL_ATTR + 7 * 4 + 8 + 8 + 4).marked_idempotent(),
    // PATHCONF3resok: attributes, linkmax, name_max, four booleans.
    fixed(procs::PATHCONF, "PATHCONF", FAIL_ATTR + 6 * 4).marked_idempotent(),
    // COMMIT3resok: wcc_data + writeverf3.
    fixed(procs::COMMIT, "COMMIT", STATUS_WCC + 8).marked_idempotent(),
];

/// The declarations of NFSv3 procedure `procedure`.
pub fn proc_info(procedure: u32) -> Option<&'static ProcInfo> {
    PROCEDURES.get(procedure as usize)
}
