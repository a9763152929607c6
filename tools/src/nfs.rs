//! `rpcrdma nfs`: an NFSv3 client over the engine. The export's root handle comes from
//! MOUNT over TCP (the port from `--mount-port`, else the server's portmapper); then
//! `ls`, `get` and `put` run over RPC-over-RDMA with READ data in Write chunks and WRITE
//! data in Read chunks.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use rpcrdma::core::ConnConfig;
use rpcrdma::fabric::shm::{ShmDevice, ShmProvider};
use rpcrdma::fabric::siw::{SiwDevice, SiwProvider};
use rpcrdma::fabric::Provider;
use rpcrdma_ulp::nfs::client::{getport, mount, Nfs3Client, NfsClientError};
use rpcrdma_ulp::nfs::mount::{MOUNT_PROGRAM, MOUNT_V3};
use rpcrdma_ulp::nfs::v3::types::Ftype3;

use crate::endpoint::Endpoint;
use crate::error::CliError;

/// What to do.
#[derive(Debug, Clone)]
pub enum NfsOp {
    /// List a directory.
    Ls(String),
    /// Copy a file from the server to a local file (`-`: standard output).
    Get(String, PathBuf),
    /// Copy a local file (`-`: standard input) to the server.
    Put(PathBuf, String),
}

/// `nfs` settings.
#[derive(Debug, Clone)]
pub struct NfsClientOpts {
    /// Connection configuration.
    pub conn: ConnConfig,
    /// MOUNT's TCP port; `None` asks the portmapper.
    pub mount_port: Option<u16>,
    /// The MOUNT path.
    pub export: String,
    /// Connect and per-call timeout.
    pub timeout: Duration,
    /// The operation.
    pub op: NfsOp,
}

fn nfs_err(e: NfsClientError) -> CliError {
    CliError::Nfs(e.to_string())
}

/// Runs one `nfs` operation.
pub fn run(ep: &Endpoint, o: &NfsClientOpts) -> Result<(), CliError> {
    let host = match ep {
        Endpoint::Shm(_) => IpAddr::V4(Ipv4Addr::LOCALHOST),
        Endpoint::Siw(a) => a.ip(),
        #[cfg(feature = "verbs")]
        Endpoint::Verbs(a) => a.ip(),
    };
    let port = match o.mount_port {
        Some(p) => p,
        None => getport(host, MOUNT_PROGRAM, MOUNT_V3, o.timeout).map_err(nfs_err)?,
    };
    let root = mount(SocketAddr::new(host, port), &o.export, o.timeout).map_err(nfs_err)?;
    match ep {
        Endpoint::Shm(a) => op::<ShmProvider>(&ShmDevice::new(), a, root, o),
        Endpoint::Siw(a) => {
            let dev = SiwDevice::new().map_err(|e| CliError::Serve(format!("siw: {e}")))?;
            op::<SiwProvider>(&dev, a, root, o)
        }
        #[cfg(feature = "verbs")]
        Endpoint::Verbs(a) => {
            let dev = crate::endpoint::open_verbs()
                .map_err(|e| CliError::Serve(format!("verbs: {e}")))?;
            let addr = rpcrdma::fabric::verbs::VerbsAddr(*a);
            op::<rpcrdma::fabric::verbs::VerbsProvider>(&dev, &addr, root, o)
        }
    }
}

fn type_char(t: Ftype3) -> char {
    match t {
        Ftype3::Reg => '-',
        Ftype3::Dir => 'd',
        Ftype3::Lnk => 'l',
        Ftype3::Blk => 'b',
        Ftype3::Chr => 'c',
        Ftype3::Sock => 's',
        Ftype3::Fifo => 'p',
    }
}

/// Splits `a/b/c` into (`a/b`, `c`).
fn parent_and_name(path: &str) -> Result<(&str, &str), CliError> {
    let p = path.trim_end_matches('/');
    let (dir, name) = p.rsplit_once('/').unwrap_or(("", p));
    if name.is_empty() || name == "." || name == ".." {
        return Err(CliError::BadArgument {
            option: "PATH",
            reason: format!("{path:?} does not name a file"),
        });
    }
    Ok((dir, name))
}

fn op<P: Provider>(
    dev: &P::Device,
    addr: &P::Addr,
    root: Vec<u8>,
    o: &NfsClientOpts,
) -> Result<(), CliError> {
    let mut c = Nfs3Client::<P>::connect(dev, addr, &o.conn, root, o.timeout).map_err(nfs_err)?;
    let mut out = std::io::stdout().lock();
    let io = |e: std::io::Error| CliError::Nfs(e.to_string());
    match &o.op {
        NfsOp::Ls(dir) => {
            let fh = c.lookup_path(dir).map_err(nfs_err)?;
            let mut list = c.list(&fh).map_err(nfs_err)?;
            list.sort_by(|a, b| a.name.cmp(&b.name));
            for e in list {
                let name = String::from_utf8_lossy(&e.name);
                match e.attr {
                    Some(a) => writeln!(
                        out,
                        "{}{:04o} {:>5} {:>5} {:>12} {name}",
                        type_char(a.ftype),
                        a.mode,
                        a.uid,
                        a.gid,
                        a.size
                    ),
                    None => writeln!(out, "?????? {:>5} {:>5} {:>12} {name}", "", "", ""),
                }
                .map_err(io)?;
            }
        }
        NfsOp::Get(path, file) => {
            let fh = c.lookup_path(path).map_err(nfs_err)?;
            let n = if file.as_os_str() == "-" {
                c.get(&fh, &mut out).map_err(nfs_err)?
            } else {
                let mut f = std::io::BufWriter::new(
                    std::fs::File::create(file)
                        .map_err(|e| CliError::Nfs(format!("{}: {e}", file.display())))?,
                );
                let n = c.get(&fh, &mut f).map_err(nfs_err)?;
                f.flush().map_err(io)?;
                n
            };
            eprintln!("rpcrdma nfs: got {path} ({n} octets)");
        }
        NfsOp::Put(file, path) => {
            let data = if file.as_os_str() == "-" {
                let mut v = Vec::new();
                std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut v).map_err(io)?;
                v
            } else {
                std::fs::read(file)
                    .map_err(|e| CliError::Nfs(format!("{}: {e}", file.display())))?
            };
            let (dir, name) = parent_and_name(path)?;
            let dfh = c.lookup_path(dir).map_err(nfs_err)?;
            c.put(&dfh, name.as_bytes(), &data).map_err(nfs_err)?;
            eprintln!("rpcrdma nfs: put {path} ({} octets)", data.len());
        }
    }
    out.flush().map_err(io)
}
