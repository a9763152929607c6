//! NFS version 4.0, 4.1 and 4.2 (RFC 7530, RFC 5661, RFC 7862) under RFC 8267 §6.
//!
//! NFSv4 has one real procedure, COMPOUND, whose arguments and results are sequences of
//! operations. Only these items are DDP-eligible (§6.1):
//!
//! - the opaque `data` of WRITE4args (operation WRITE);
//! - the `linkdata` of the NF4LNK arm of `createtype4` (operation CREATE);
//! - the opaque `data` of READ4resok (operation READ);
//! - the `linkdata` of READLINK4resok (operation READLINK).
//!
//! Read chunks find their items by XDR position. Write chunks pair with "READ
//! operations" — operations with a DDP-eligible result — in COMPOUND order (§6.4.1):
//! see [`WriteChunkPairing`].

use crate::binding::{DataBound, DdpEligible, ProcInfo, ReplySize};

/// Procedure numbers.
pub mod procs {
    /// NULL.
    pub const NULL: u32 = 0;
    /// COMPOUND.
    pub const COMPOUND: u32 = 1;
}

/// Operation numbers (RFC 7530 §16, RFC 5661 §18, RFC 7862 §15).
pub mod ops {
    /// ACCESS.
    pub const ACCESS: u32 = 3;
    /// CLOSE.
    pub const CLOSE: u32 = 4;
    /// COMMIT.
    pub const COMMIT: u32 = 5;
    /// CREATE.
    pub const CREATE: u32 = 6;
    /// DELEGRETURN.
    pub const DELEGRETURN: u32 = 8;
    /// GETATTR.
    pub const GETATTR: u32 = 9;
    /// GETFH.
    pub const GETFH: u32 = 10;
    /// LINK.
    pub const LINK: u32 = 11;
    /// LOOKUP.
    pub const LOOKUP: u32 = 15;
    /// LOOKUPP.
    pub const LOOKUPP: u32 = 16;
    /// OPEN.
    pub const OPEN: u32 = 18;
    /// OPEN_DOWNGRADE.
    pub const OPEN_DOWNGRADE: u32 = 21;
    /// PUTFH.
    pub const PUTFH: u32 = 22;
    /// PUTROOTFH.
    pub const PUTROOTFH: u32 = 24;
    /// READ.
    pub const READ: u32 = 25;
    /// READDIR.
    pub const READDIR: u32 = 26;
    /// READLINK.
    pub const READLINK: u32 = 27;
    /// REMOVE.
    pub const REMOVE: u32 = 28;
    /// RENAME.
    pub const RENAME: u32 = 29;
    /// RESTOREFH.
    pub const RESTOREFH: u32 = 31;
    /// SAVEFH.
    pub const SAVEFH: u32 = 32;
    /// SETATTR.
    pub const SETATTR: u32 = 34;
    /// WRITE.
    pub const WRITE: u32 = 38;
    /// BIND_CONN_TO_SESSION (4.1).
    pub const BIND_CONN_TO_SESSION: u32 = 41;
    /// EXCHANGE_ID (4.1).
    pub const EXCHANGE_ID: u32 = 42;
    /// CREATE_SESSION (4.1).
    pub const CREATE_SESSION: u32 = 43;
    /// DESTROY_SESSION (4.1).
    pub const DESTROY_SESSION: u32 = 44;
    /// FREE_STATEID (4.1).
    pub const FREE_STATEID: u32 = 45;
    /// SECINFO_NO_NAME (4.1).
    pub const SECINFO_NO_NAME: u32 = 52;
    /// SEQUENCE (4.1).
    pub const SEQUENCE: u32 = 53;
    /// TEST_STATEID (4.1).
    pub const TEST_STATEID: u32 = 55;
    /// DESTROY_CLIENTID (4.1).
    pub const DESTROY_CLIENTID: u32 = 57;
    /// RECLAIM_COMPLETE (4.1).
    pub const RECLAIM_COMPLETE: u32 = 58;
    /// READ_PLUS (4.2): not DDP-eligible under RFC 8267.
    pub const READ_PLUS: u32 = 68;
    /// WRITE_SAME (4.2): not DDP-eligible under RFC 8267.
    pub const WRITE_SAME: u32 = 70;
    /// ILLEGAL.
    pub const ILLEGAL: u32 = 10044;
}

/// Names of operations 3 (ACCESS) to 71 (CLONE), indexed by `op - 3`.
const OP_NAMES: [&str; 69] = [
    "ACCESS",
    "CLOSE",
    "COMMIT",
    "CREATE",
    "DELEGPURGE",
    "DELEGRETURN",
    "GETATTR",
    "GETFH",
    "LINK",
    "LOCK",
    "LOCKT",
    "LOCKU",
    "LOOKUP",
    "LOOKUPP",
    "NVERIFY",
    "OPEN",
    "OPENATTR",
    "OPEN_CONFIRM",
    "OPEN_DOWNGRADE",
    "PUTFH",
    "PUTPUBFH",
    "PUTROOTFH",
    "READ",
    "READDIR",
    "READLINK",
    "REMOVE",
    "RENAME",
    "RENEW",
    "RESTOREFH",
    "SAVEFH",
    "SECINFO",
    "SETATTR",
    "SETCLIENTID",
    "SETCLIENTID_CONFIRM",
    "VERIFY",
    "WRITE",
    "RELEASE_LOCKOWNER",
    "BACKCHANNEL_CTL",
    "BIND_CONN_TO_SESSION",
    "EXCHANGE_ID",
    "CREATE_SESSION",
    "DESTROY_SESSION",
    "FREE_STATEID",
    "GET_DIR_DELEGATION",
    "GETDEVICEINFO",
    "GETDEVICELIST",
    "LAYOUTCOMMIT",
    "LAYOUTGET",
    "LAYOUTRETURN",
    "SECINFO_NO_NAME",
    "SEQUENCE",
    "SET_SSV",
    "TEST_STATEID",
    "WANT_DELEGATION",
    "DESTROY_CLIENTID",
    "RECLAIM_COMPLETE",
    "ALLOCATE",
    "COPY",
    "COPY_NOTIFY",
    "DEALLOCATE",
    "IO_ADVISE",
    "LAYOUTERROR",
    "LAYOUTSTATS",
    "OFFLOAD_CANCEL",
    "OFFLOAD_STATUS",
    "READ_PLUS",
    "SEEK",
    "WRITE_SAME",
    "CLONE",
];

/// The name of operation `op`, if it is defined by NFSv4.0–4.2.
pub fn op_name(op: u32) -> Option<&'static str> {
    if op == ops::ILLEGAL {
        return Some("ILLEGAL");
    }
    op.checked_sub(3)
        .and_then(|i| OP_NAMES.get(i as usize))
        .copied()
}

/// WRITE4args.data.
pub const WRITE_DATA: DdpEligible = DdpEligible {
    name: "WRITE4args.data",
    max_len: u32::MAX,
};
/// createtype4 NF4LNK linkdata (CREATE of a symbolic link).
pub const CREATE_LINKDATA: DdpEligible = DdpEligible {
    name: "createtype4.linkdata",
    max_len: u32::MAX,
};
/// READ4resok.data.
pub const READ_DATA: DdpEligible = DdpEligible {
    name: "READ4resok.data",
    max_len: u32::MAX,
};
/// READLINK4resok linkdata.
pub const READLINK_LINKDATA: DdpEligible = DdpEligible {
    name: "READLINK4resok.linkdata",
    max_len: u32::MAX,
};

/// The DDP-eligible items of one COMPOUND operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OpDdp {
    /// Its DDP-eligible argument, if any.
    pub arg: Option<DdpEligible>,
    /// Its DDP-eligible result, if any: such an operation is a "READ operation" for
    /// Write chunk pairing.
    pub result: Option<DdpEligible>,
}

/// The DDP-eligible items of operation `op` (RFC 8267 §6.1). For CREATE the argument is
/// eligible only in the NF4LNK arm.
pub const fn op_ddp(op: u32) -> OpDdp {
    match op {
        ops::WRITE => OpDdp {
            arg: Some(WRITE_DATA),
            result: None,
        },
        ops::CREATE => OpDdp {
            arg: Some(CREATE_LINKDATA),
            result: None,
        },
        ops::READ => OpDdp {
            arg: None,
            result: Some(READ_DATA),
        },
        ops::READLINK => OpDdp {
            arg: None,
            result: Some(READLINK_LINKDATA),
        },
        _ => OpDdp {
            arg: None,
            result: None,
        },
    }
}

/// Whether `op` is a "READ operation" in the sense of RFC 8267 §6.4.1: it has a
/// DDP-eligible result and consumes a Write chunk.
pub const fn is_read_operation(op: u32) -> bool {
    op_ddp(op).result.is_some()
}

/// COMPOUND: every DDP-eligible item of every operation; no protocol bound on the reply
/// (RFC 8267 §6.2), so the caller supplies `ca_maxresponsesize` (4.1 and later,
/// §6.2.2) or its own limit (4.0, §6.2.1) as the requested size.
pub static COMPOUND: ProcInfo = ProcInfo {
    procedure: procs::COMPOUND,
    name: "COMPOUND",
    ddp_args: &[WRITE_DATA, CREATE_LINKDATA],
    ddp_results: &[READ_DATA, READLINK_LINKDATA],
    reply: ReplySize::with_data(0, DataBound::Unbounded, false, 0),
    // Only for minor version 0 with GETATTR: see `short_reply_retry`.
    short_reply_retry: true,
    // A COMPOUND may hold any operation. NFSv4.1 sessions make retransmission safe with
    // their own reply cache (RFC 8881 §2.10.6), which is the session's business, not
    // this flag's.
    idempotent: false,
    reply_usually_small: false,
};

/// The declarations of NFSv4 procedure `procedure`.
pub fn proc_info(procedure: u32) -> Option<&'static ProcInfo> {
    match procedure {
        procs::NULL => Some(&ProcInfo::NULL),
        procs::COMPOUND => Some(&COMPOUND),
        _ => None,
    }
}

/// Whether a client may use short Reply chunk retry for a COMPOUND of minor version
/// `minor` with operations `ops`: only minor version 0, and only when the COMPOUND holds
/// a GETATTR (RFC 8267 §6.2.1). Later minor versions bound replies with
/// `ca_maxresponsesize` instead (§6.2.2).
pub fn short_reply_retry(minor: u32, ops: &[u32]) -> bool {
    minor == 0 && ops.contains(&ops::GETATTR)
}

/// Where a READ operation's DDP-eligible result goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultPlacement {
    /// Into this Write chunk (index in the Write list). If the chunk is non-empty the
    /// server MUST use it; if the operation returns an arm without the item, the server
    /// returns the chunk empty; if the client offered the chunk empty, the result is
    /// inline (RFC 8267 §6.4.1).
    WriteChunk(usize),
    /// Inline: there are more READ operations than Write chunks.
    Inline,
}

/// Pairs the READ operations of a COMPOUND with the Write chunks a client offered, in
/// order (RFC 8267 §6.4.1): yields `(operation index, placement)` for each READ
/// operation. Allocation-free.
#[derive(Debug, Clone)]
pub struct WriteChunkPairing<'a> {
    ops: core::iter::Enumerate<core::slice::Iter<'a, u32>>,
    write_chunks: usize,
    next: usize,
}

impl<'a> WriteChunkPairing<'a> {
    /// Pairs `ops` (operation numbers in COMPOUND order) with `write_chunks` chunks.
    pub fn new(ops: &'a [u32], write_chunks: usize) -> Self {
        WriteChunkPairing {
            ops: ops.iter().enumerate(),
            write_chunks,
            next: 0,
        }
    }
}

impl Iterator for WriteChunkPairing<'_> {
    type Item = (usize, ResultPlacement);

    fn next(&mut self) -> Option<Self::Item> {
        let (i, _) = self.ops.find(|(_, &op)| is_read_operation(op))?;
        let placement = if self.next < self.write_chunks {
            ResultPlacement::WriteChunk(self.next)
        } else {
            ResultPlacement::Inline
        };
        self.next += 1;
        Some((i, placement))
    }
}

/// Chunk-list complexity an NFSv4 client stays within unless it knows the server's
/// limits, and that every NFSv4 server MUST accept (RFC 8267 §6.4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkComplexity {
    /// A Position-Zero Read chunk is allowed.
    pub position_zero_read_chunk: bool,
    /// Read chunks at non-zero positions.
    pub other_read_chunks: u32,
    /// Write chunks.
    pub write_chunks: u32,
    /// Segments in any one chunk.
    pub segments_per_chunk: u32,
}

impl ChunkComplexity {
    /// The RFC 8267 §6.4.2 defaults: a Position-Zero Read chunk and one other Read chunk,
    /// one Write chunk, up to sixteen segments per chunk.
    pub const DEFAULT: ChunkComplexity = ChunkComplexity {
        position_zero_read_chunk: true,
        other_read_chunks: 1,
        write_chunks: 1,
        segments_per_chunk: 16,
    };

    /// Whether a message with this many chunks and at most `max_segments` segments in
    /// any chunk stays within the limits.
    pub const fn admits(
        &self,
        position_zero: bool,
        other_read_chunks: u32,
        write_chunks: u32,
        max_segments: u32,
    ) -> bool {
        (!position_zero || self.position_zero_read_chunk)
            && other_read_chunks <= self.other_read_chunks
            && write_chunks <= self.write_chunks
            && max_segments <= self.segments_per_chunk
    }
}

/// Whether a client should retransmit a request that a server refused for chunk-list
/// complexity (ERR_CHUNK from the transport, or GARBAGE_ARGS from XDR decoding): no, the
/// result would be the same error; it terminates the RPC transaction instead
/// (RFC 8267 §6.4.2, "SHOULD NOT retransmit").
pub const RETRANSMIT_AFTER_COMPLEXITY_ERROR: bool = false;

/// Credits an NFSv4 client SHOULD hold back for a periodic health check of an otherwise
/// idle connection (RFC 8267 §6.7.2): RDMA Reliable Connections may have no keepalive.
pub const RESERVED_KEEPALIVE_CREDITS: u32 = 1;

/// Result items whose size clients cannot reliably estimate because nothing bounds them
/// (RFC 8267 §6.2): COMPOUNDs that return them may need a Reply chunk, sized from
/// `ca_maxresponsesize` or an implementation limit.
pub const UNBOUNDED_RESULT_ITEMS: &[&str] = &[
    "attrlist4",
    "fattr4_acl",
    "fattr4_dacl",
    "fattr4_sacl",
    "fs_locations4",
    "fs_locations_info4",
    "loc_body",
    "loh_body",
    "da_addr_body",
    "lou_body",
    "lrf_body",
    "fattr_layout_types",
    "mdsthreshold4",
];
