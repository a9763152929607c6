//! Everything that can make a subcommand fail, each printed as one plain line that says
//! what went wrong and, where there is one, what to do about it.

use core::fmt;
use std::io;
use std::path::PathBuf;

use rpcrdma::fabric::FabricError;
use rpcrdma::wire::header::{HeaderError, ResponderAction, RPCRDMA_VERSION};
use rpcrdma::wire::private_data::{PrivateDataError, FORMAT_IDENTIFIER, MIN_INLINE_SIZE};
use rpcrdma::ConnError;

use crate::hex::HexError;

/// A failed subcommand. `main` prints it on one line and exits with status 1.
#[derive(Debug)]
pub enum CliError {
    /// Reading an input file or standard input failed.
    Read {
        /// The file, or `None` for standard input.
        path: Option<PathBuf>,
        /// Why.
        source: io::Error,
    },
    /// Writing the result failed (e.g. a closed pipe).
    Write(io::Error),
    /// `--hex` text that is not hex.
    Hex(HexError),
    /// The transport header was rejected.
    Header(HeaderError),
    /// `--private-data`: the format identifier does not occur in the input.
    NoPrivateData {
        /// Octets searched.
        len: usize,
    },
    /// `--private-data`: the identifier occurs but no occurrence is a usable message.
    PrivateData(PrivateDataError),
    /// `encode`: the input is not a header in the JSON form `decode` prints.
    Json(serde_json::Error),
    /// `encode`: binary output would go to a terminal.
    BinaryToTerminal,
    /// `call`: no server answered at the address.
    Unreachable {
        /// Provider name.
        provider: &'static str,
        /// The address as given.
        addr: String,
        /// What happened.
        reason: String,
    },
    /// `call`: the local end could not be set up, so nothing was sent (e.g. memory
    /// registration refused by the locked-memory limit).
    LocalSetup {
        /// Provider name.
        provider: &'static str,
        /// What happened.
        reason: String,
    },
    /// `serve`: the server could not start.
    Serve(String),
    /// `call`: the call could not be made, failed, or its reply did not check out.
    Call(String),
    /// `nfs`: the operation failed (the message names the RPC or NFS status).
    Nfs(String),
    /// A command-line value that clap could not check by itself.
    BadArgument {
        /// The option.
        option: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Read { path: Some(p), source } => {
                write!(f, "cannot read {}: {source}", p.display())
            }
            CliError::Read { path: None, source } => {
                write!(f, "cannot read standard input: {source}")
            }
            CliError::Write(e) => write!(f, "cannot write the output: {e}"),
            CliError::Hex(e) => e.fmt(f),
            CliError::Header(e) => write!(f, "{e}; {}", responder_says(e)),
            CliError::NoPrivateData { len } => write!(
                f,
                "no RFC 8797 private data in {len} octets (format identifier {FORMAT_IDENTIFIER:08x} \
                 not found); the peer counts as having sent none and both ends use the RFC 8166 \
                 defaults: {MIN_INLINE_SIZE}-octet inline thresholds, no remote invalidation"
            ),
            CliError::PrivateData(e) => write!(
                f,
                "unusable RFC 8797 private data: {e}; per RFC 8797 §5.1 the peer counts as having \
                 sent none: {MIN_INLINE_SIZE}-octet inline thresholds, no remote invalidation"
            ),
            CliError::Json(e) => write!(
                f,
                "not a transport header in rpcrdma JSON form: {e} (expected what `rpcrdma decode` \
                 prints, or its \"header\" object)"
            ),
            CliError::BinaryToTerminal => f.write_str(
                "refusing to write binary octets to a terminal; add --hex or redirect the output",
            ),
            CliError::BadArgument { option, reason } => write!(f, "{option}: {reason}"),
            CliError::Unreachable {
                provider,
                addr,
                reason,
            } => write!(
                f,
                "cannot reach an rpcrdma server at {addr} over {provider}: {reason}; start one \
                 with `rpcrdma serve --provider {provider} --addr {addr}`"
            ),
            CliError::LocalSetup { provider, reason } => write!(
                f,
                "cannot set up the local {provider} endpoint (nothing was sent to the server): \
                 {reason}"
            ),
            CliError::Serve(e) => write!(f, "serve: {e}"),
            CliError::Call(e) => write!(f, "call failed: {e}"),
            CliError::Nfs(e) => write!(f, "nfs: {e}"),
        }
    }
}

impl std::error::Error for CliError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CliError::Read { source, .. } => Some(source),
            CliError::Write(e) => Some(e),
            CliError::Hex(e) => Some(e),
            CliError::Header(e) => Some(e),
            CliError::PrivateData(e) => Some(e),
            CliError::Json(e) => Some(e),
            CliError::NoPrivateData { .. }
            | CliError::BinaryToTerminal
            | CliError::BadArgument { .. }
            | CliError::Unreachable { .. }
            | CliError::LocalSetup { .. }
            | CliError::Serve(_)
            | CliError::Call(_)
            | CliError::Nfs(_) => None,
        }
    }
}

impl From<HexError> for CliError {
    fn from(e: HexError) -> Self {
        CliError::Hex(e)
    }
}

impl From<HeaderError> for CliError {
    fn from(e: HeaderError) -> Self {
        CliError::Header(e)
    }
}

/// The error for a failed `connect` to `addr`: failures of the local end (its
/// configuration, pools, or a registration the locked-memory limit refuses) say so;
/// the rest (address resolution, rejection, no listener) mean the server was not reached.
pub fn connect_error(provider: &'static str, addr: String, e: ConnError) -> CliError {
    match e {
        ConnError::Fabric(FabricError::LockedMemoryLimit { .. })
        | ConnError::Config(_)
        | ConnError::Pool(_)
        | ConnError::Core(_) => CliError::LocalSetup {
            provider,
            reason: e.to_string(),
        },
        ConnError::Fabric(_) | ConnError::NotEstablished | ConnError::ConnectTimeout(_) => {
            CliError::Unreachable {
                provider,
                addr,
                reason: e.to_string(),
            }
        }
    }
}

/// The responder's side of a rejected header (RFC 8166 §4.5), in words.
pub fn responder_says(e: &HeaderError) -> String {
    match e.responder_reply() {
        ResponderAction::ErrVers { xid } => format!(
            "a responder would answer RDMA_ERROR ERR_VERS (versions {RPCRDMA_VERSION} to \
             {RPCRDMA_VERSION}) for xid {xid:#010x}"
        ),
        ResponderAction::ErrChunk { xid } => {
            format!("a responder would answer RDMA_ERROR ERR_CHUNK for xid {xid:#010x}")
        }
        ResponderAction::Drop if e.xid().is_none() => {
            "no reply possible: the xid is unreadable, so a responder drops it".to_owned()
        }
        ResponderAction::Drop => {
            "no reply possible: the version is unreadable, so a responder drops it".to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A registration refused by RLIMIT_MEMLOCK is reported as a local limit with the
    /// way to raise it, never as an unreachable server.
    #[test]
    fn memlock_refusal_is_a_local_error_naming_the_limit() {
        let e = connect_error(
            "verbs",
            "10.0.2.15:20049".into(),
            ConnError::Fabric(FabricError::LockedMemoryLimit {
                len: 2 << 20,
                limit: 64 << 10,
            }),
        );
        assert!(matches!(e, CliError::LocalSetup { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(!msg.contains("cannot reach"), "{msg}");
        for want in ["RLIMIT_MEMLOCK", "ulimit -l", "64 KiB", "nothing was sent"] {
            assert!(msg.contains(want), "{want:?} missing from: {msg}");
        }
    }

    /// Connection-manager failures still mean the server was not reached.
    #[test]
    fn cm_failures_stay_unreachable() {
        let e = connect_error(
            "verbs",
            "10.0.2.15:20049".into(),
            ConnError::Fabric(FabricError::Os {
                op: "rdma_resolve_addr",
                err: io::Error::from_raw_os_error(110),
            }),
        );
        assert!(matches!(e, CliError::Unreachable { .. }), "{e:?}");
        assert!(e
            .to_string()
            .starts_with("cannot reach an rpcrdma server at 10.0.2.15:20049"));
    }
}
