//! `serve --rpcbind`: registering MOUNT and NFS with the local rpcbind (RPCBIND version
//! 4, RFC 1833 §2.2: RPCBPROC_SET / RPCBPROC_UNSET over TCP to port 111), so that clients
//! that look services up (Linux `mount.nfs` without `mountport=`) find them.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use rpcrdma_ulp::ddp::{encode_call, reply_results, DdpCursor, DdpDecodeError, DdpEncodeError};
use rpcrdma_ulp::ddp::{DdpEncoder, XdrCodec};
use rpcrdma_ulp::nfs::server::tcp::{read_record, write_record};
use rpcrdma_ulp::rpc::{CallHeader, OpaqueAuth};

const RPCBIND_PROGRAM: u32 = 100_000;
const RPCBIND_V4: u32 = 4;
const RPCBPROC_SET: u32 = 1;
const RPCBPROC_UNSET: u32 = 2;

/// One registration: a program version at a network id and universal address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    prog: u32,
    vers: u32,
    netid: &'static str,
    uaddr: String,
}

/// The universal address of `a` (RFC 5665 §5.2.3.3): the IP, then the port's two
/// octets, dot-separated.
fn uaddr(a: SocketAddr) -> String {
    format!("{}.{}.{}", a.ip(), a.port() >> 8, a.port() & 0xff)
}

impl Registration {
    /// A TCP service.
    pub fn tcp(prog: u32, vers: u32, at: SocketAddr) -> Registration {
        Registration {
            prog,
            vers,
            netid: if at.is_ipv4() { "tcp" } else { "tcp6" },
            uaddr: uaddr(at),
        }
    }

    /// An RPC-over-RDMA service (netids "rdma" and "rdma6", RFC 8166 §9.2).
    pub fn rdma(prog: u32, vers: u32, at: SocketAddr) -> Registration {
        Registration {
            prog,
            vers,
            netid: if at.is_ipv4() {
                rpcrdma_ulp::nfs::NETID_RDMA
            } else {
                rpcrdma_ulp::nfs::NETID_RDMA6
            },
            uaddr: uaddr(at),
        }
    }
}

/// `rpcb`: the SET/UNSET argument.
struct Rpcb<'a>(&'a Registration, &'a str);

impl<'d> XdrCodec<'d> for Rpcb<'_> {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        e.u32(self.0.prog)?;
        e.u32(self.0.vers)?;
        e.string(self.0.netid.as_bytes())?;
        e.string(self.0.uaddr.as_bytes())?;
        e.string(self.1.as_bytes())
    }
    fn decode(_: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        Err(DdpDecodeError::Invalid {
            offset: 0,
            what: "rpcb is only encoded here",
        })
    }
}

/// Registers (`on`) or unregisters `r` with rpcbind on 127.0.0.1:111.
pub fn set(r: &Registration, on: bool) -> io::Result<()> {
    let addr: SocketAddr = ([127, 0, 0, 1], 111).into();
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| io::Error::new(e.kind(), format!("rpcbind at {addr}: {e}")))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let h = CallHeader {
        xid: std::process::id() ^ r.prog ^ (u32::from(on) << 31),
        prog: RPCBIND_PROGRAM,
        vers: RPCBIND_V4,
        procedure: if on { RPCBPROC_SET } else { RPCBPROC_UNSET },
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    };
    // SAFETY: getuid has no preconditions.
    let owner = unsafe { libc::getuid() }.to_string();
    let mut buf = vec![0u8; 512];
    let call = encode_call(&mut buf, &h, &Rpcb(r, &owner), usize::MAX)
        .map_err(|e| io::Error::other(e.to_string()))?;
    write_record(&mut s, &buf[..call.len])?;
    let mut reply = Vec::new();
    if !read_record(&mut s, 4096, &mut reply)? {
        return Err(io::Error::other("rpcbind closed the connection"));
    }
    let (_, mut c) = reply_results(&reply, &[]).map_err(|e| io::Error::other(e.to_string()))?;
    let ok = c.bool().map_err(|e| io::Error::other(e.to_string()))?;
    if on && !ok {
        return Err(io::Error::other(format!(
            "rpcbind refused program {} version {} on {} {} (registered already, or not \
             allowed for this user)",
            r.prog, r.vers, r.netid, r.uaddr
        )));
    }
    Ok(())
}
