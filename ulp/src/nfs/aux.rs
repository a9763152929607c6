//! The NFSv2/v3 auxiliary protocols (RFC 8267 §5).
//!
//! MOUNT, NLM and NSM have traditionally run over TCP even with NFS/RDMA, and a Legacy
//! NFS server MUST offer them over TCP (§5.1). NFSACL usually shares the NFS connection;
//! none of its items are DDP-eligible, and since nothing bounds an ACL's size, GETACL may
//! use short Reply chunk retry (§5.2).

use crate::binding::{DataBound, ProcInfo, ReplySize};

/// How an auxiliary program is carried next to NFS/RDMA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carriage {
    /// The server MUST offer it over TCP (MOUNT, NLM, NSM).
    Tcp,
    /// Usually on the same RPC-over-RDMA connection as NFS (NFSACL).
    NfsConnection,
}

/// An auxiliary program and the versions RFC 8267 §5 covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuxProgram {
    /// Name.
    pub name: &'static str,
    /// Program number.
    pub prog: u32,
    /// Versions covered.
    pub versions: &'static [u32],
    /// How it travels.
    pub carriage: Carriage,
}

/// MOUNT.
pub const MOUNT: AuxProgram = AuxProgram {
    name: "MOUNT",
    prog: 100_005,
    versions: &[2, 3],
    carriage: Carriage::Tcp,
};

/// NLM (Network Lock Manager).
pub const NLM: AuxProgram = AuxProgram {
    name: "NLM",
    prog: 100_021,
    versions: &[1, 3, 4],
    carriage: Carriage::Tcp,
};

/// NSM (Network Status Monitor).
pub const NSM: AuxProgram = AuxProgram {
    name: "NSM",
    prog: 100_024,
    versions: &[1],
    carriage: Carriage::Tcp,
};

/// NFSACL.
pub const NFSACL: AuxProgram = AuxProgram {
    name: "NFSACL",
    prog: 100_227,
    versions: &[1],
    carriage: Carriage::NfsConnection,
};

/// All four.
pub const ALL: [AuxProgram; 4] = [MOUNT, NLM, NSM, NFSACL];

/// NFSACL GETACL: the ACL is unbounded, so the caller supplies its own limit, and a
/// transport error allows short Reply chunk retry.
pub static NFSACL_GETACL: ProcInfo = ProcInfo {
    procedure: 1,
    name: "GETACL",
    ddp_args: &[],
    ddp_results: &[],
    reply: ReplySize::with_data(0, DataBound::Unbounded, false, 0),
    short_reply_retry: true,
    idempotent: true,
    reply_usually_small: false,
};

/// The declarations of an NFSACL procedure: NULL and GETACL. Procedures whose replies
/// carry no ACL are sized from NFSACL's XDR, which has no public definition (§5.2), so
/// they are not listed.
pub fn nfsacl_proc_info(procedure: u32) -> Option<&'static ProcInfo> {
    match procedure {
        0 => Some(&ProcInfo::NULL),
        1 => Some(&NFSACL_GETACL),
        _ => None,
    }
}
