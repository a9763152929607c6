//! The NFS Upper-Layer Binding to RPC-over-RDMA Version 1 (RFC 8267) as declaration
//! tables: which XDR items of each NFS procedure are DDP-eligible, how large each reply
//! can be, and the binding's transport rules. This is not an NFS server; it is what an
//! NFS client or server on this engine consults to build and parse chunk lists, plus the
//! NFSv3 and MOUNT codecs ([`v3::args`], [`v3::res`], [`mount`]) and an embeddable NFSv3/NFSv4.1
//! server ([`server`]).
//!
//! - [`v2`] and [`v3`]: the Legacy NFS binding (RFC 8267 §4): only WRITE data, the
//!   SYMLINK pathname, READ data and the READLINK pathname are DDP-eligible.
//! - [`v4`]: NFS version 4.0, 4.1 and 4.2 (RFC 8267 §6): only WRITE4args data, the NF4LNK
//!   linkdata of CREATE, READ4resok data and READLINK4resok linkdata; Write chunks pair
//!   with "READ operations" in COMPOUND order (§6.4.1); default chunk-list complexity
//!   limits (§6.4.2); reply size rules (§6.2).
//! - [`aux`]: MOUNT, NLM, NSM and NFSACL (RFC 8267 §5).
//! - [`mount`]: MOUNT v3 procedures and codecs; [`server`]: an embeddable NFSv3 and NFSv4.1 server
//!   (backends, programs, the engine service, RPC over TCP); [`client`]: a blocking NFSv3
//!   client over the engine; [`v41`]: NFSv4.1 COMPOUND codecs and a session client.
//!
//! Reply sizes are worked out from the XDR of RFC 1094 (NFSv2) and RFC 1813 (NFSv3) for
//! the largest arm of each result union, AUTH_NONE verifier excluded (see
//! [`ReplySize`](crate::binding::ReplySize)).

pub mod aux;
pub mod client;
pub mod mount;
pub mod server;
pub mod v2;
pub mod v3;
pub mod v4;
pub mod v41;

use crate::binding::ProcInfo;

/// The NFS RPC program number (RFC 1094, RFC 1813, RFC 7530).
pub const NFS_PROGRAM: u32 = 100_003;

/// The traditional NFS port for UDP and TCP (RFC 8267 §4.2, §6.3).
pub const NFS_PORT: u16 = 2049;

/// The IANA port for NFS over RDMA, "nfsrdma" (RFC 8267 §9): NFSv4 servers MUST listen
/// on it and clients SHOULD connect to it without consulting the portmapper (§6.3);
/// Legacy NFS servers MAY use it or an arbitrary port registered with the portmapper
/// (§4.2).
pub const NFS_RDMA_PORT: u16 = 20049;

/// Netid for RPC-over-RDMA on IPv4 networks, used when registering with rpcbind
/// (RFC 5666 §10, §12; RFC 8166 keeps them).
pub const NETID_RDMA: &str = "rdma";

/// Netid for RPC-over-RDMA on IPv6 networks.
pub const NETID_RDMA6: &str = "rdma6";

/// The declarations of NFS procedure `procedure` of version `vers` (2, 3 or 4), or
/// `None` for an unknown version or procedure.
pub fn proc_info(vers: u32, procedure: u32) -> Option<&'static ProcInfo> {
    match vers {
        2 => v2::proc_info(procedure),
        3 => v3::proc_info(procedure),
        4 => v4::proc_info(procedure),
        _ => None,
    }
}
