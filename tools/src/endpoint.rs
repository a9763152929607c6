//! Where `serve` listens and `call` connects: a provider and its address.

use core::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::ValueEnum;
use rpcrdma::fabric::shm::ShmAddr;

use crate::error::CliError;

/// Providers `serve` and `call` can use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProviderArg {
    /// Shared memory between processes on this host; the address is a Unix socket path
    /// (or `@name` for Linux's abstract namespace).
    Shm,
    /// Userspace software iWARP over TCP; the address is `IP:PORT`.
    Siw,
    /// rdma-core verbs (feature `verbs`); the address is `IP:PORT` of an RDMA device
    /// (`RPCRDMA_VERBS_DEV` names the device, else the first one is used).
    #[cfg(feature = "verbs")]
    Verbs,
}

/// A provider and a parsed address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A shm connection-manager socket.
    Shm(ShmAddr),
    /// A TCP address for siw.
    Siw(SocketAddr),
    /// An RDMA device's IP address and port for verbs (rdma_cm).
    #[cfg(feature = "verbs")]
    Verbs(SocketAddr),
}

impl Endpoint {
    /// Parses `addr` for `provider`.
    pub fn parse(provider: ProviderArg, addr: &str) -> Result<Endpoint, CliError> {
        let bad = |reason: String| CliError::BadArgument {
            option: "--addr",
            reason,
        };
        match provider {
            ProviderArg::Shm => {
                if addr.is_empty() {
                    return Err(bad(
                        "empty; give a socket path such as /tmp/rpcrdma.sock".into()
                    ));
                }
                Ok(Endpoint::Shm(match addr.strip_prefix('@') {
                    Some(name) => ShmAddr::abstract_name(name),
                    None => ShmAddr::Path(PathBuf::from(addr)),
                }))
            }
            ProviderArg::Siw => addr.parse().map(Endpoint::Siw).map_err(|_| {
                bad(format!(
                    "{addr:?} is not IP:PORT (e.g. 127.0.0.1:20049 or 0.0.0.0:20049)"
                ))
            }),
            #[cfg(feature = "verbs")]
            ProviderArg::Verbs => addr.parse().map(Endpoint::Verbs).map_err(|_| {
                bad(format!(
                    "{addr:?} is not IP:PORT of an RDMA device (e.g. 10.0.2.15:20049)"
                ))
            }),
        }
    }

    /// The provider's name.
    pub fn provider(&self) -> &'static str {
        match self {
            Endpoint::Shm(_) => "shm",
            Endpoint::Siw(_) => "siw",
            #[cfg(feature = "verbs")]
            Endpoint::Verbs(_) => "verbs",
        }
    }
}

/// Opens the verbs device `RPCRDMA_VERBS_DEV` names, else the first one.
#[cfg(feature = "verbs")]
pub fn open_verbs() -> Result<rpcrdma::fabric::verbs::VerbsDevice, rpcrdma::fabric::FabricError> {
    use rpcrdma::fabric::verbs::VerbsDevice;
    match std::env::var("RPCRDMA_VERBS_DEV") {
        Ok(name) => VerbsDevice::open(&name),
        Err(_) => VerbsDevice::open_first(),
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Shm(ShmAddr::Path(p)) => write!(f, "{}", p.display()),
            Endpoint::Shm(ShmAddr::Abstract(n)) => write!(f, "@{n}"),
            Endpoint::Siw(a) => write!(f, "{a}"),
            #[cfg(feature = "verbs")]
            Endpoint::Verbs(a) => write!(f, "{a}"),
        }
    }
}
