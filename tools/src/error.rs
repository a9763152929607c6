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
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Reading an input file or standard input failed.
    #[error(fmt = fmt_read)]
    Read {
        /// The file, or `None` for standard input.
        path: Option<PathBuf>,
        /// Why.
        source: io::Error,
    },
    /// Writing the result failed (e.g. a closed pipe).
    #[error("cannot write the output: {0}")]
    Write(#[source] io::Error),
    /// `--hex` text that is not hex.
    #[error("{0}")]
    Hex(#[from] HexError),
    /// The transport header was rejected.
    #[error("{0}; {says}", says = responder_says(.0))]
    Header(#[from] HeaderError),
    /// `--private-data`: the format identifier does not occur in the input.
    #[error(
        "no RFC 8797 private data in {len} octets (format identifier {FORMAT_IDENTIFIER:08x} \
         not found); the peer counts as having sent none and both ends use the RFC 8166 \
         defaults: {MIN_INLINE_SIZE}-octet inline thresholds, no remote invalidation"
    )]
    NoPrivateData {
        /// Octets searched.
        len: usize,
    },
    /// `--private-data`: the identifier occurs but no occurrence is a usable message.
    #[error(
        "unusable RFC 8797 private data: {0}; per RFC 8797 §5.1 the peer counts as having \
         sent none: {MIN_INLINE_SIZE}-octet inline thresholds, no remote invalidation"
    )]
    PrivateData(#[source] PrivateDataError),
    /// `encode`: the input is not a header in the JSON form `decode` prints.
    #[error(
        "not a transport header in rpcrdma JSON form: {0} (expected what `rpcrdma decode` \
         prints, or its \"header\" object)"
    )]
    Json(#[source] serde_json::Error),
    /// `encode`: binary output would go to a terminal.
    #[error("refusing to write binary octets to a terminal; add --hex or redirect the output")]
    BinaryToTerminal,
    /// `call`: no server answered at the address.
    #[error(
        "cannot reach an rpcrdma server at {addr} over {provider}: {reason}; start one \
         with `rpcrdma serve --provider {provider} --addr {addr}`"
    )]
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
    #[error(
        "cannot set up the local {provider} endpoint (nothing was sent to the server): \
         {reason}"
    )]
    LocalSetup {
        /// Provider name.
        provider: &'static str,
        /// What happened.
        reason: String,
    },
    /// `serve`: the server could not start.
    #[error("serve: {0}")]
    Serve(String),
    /// `call`: the call could not be made, failed, or its reply did not check out.
    #[error("call failed: {0}")]
    Call(String),
    /// `nfs`: the operation failed (the message names the RPC or NFS status).
    #[error("nfs: {0}")]
    Nfs(String),
    /// A command-line value that clap could not check by itself.
    #[error("{option}: {reason}")]
    BadArgument {
        /// The option.
        option: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

/// [`CliError::Read`]'s message: the file, or standard input, and why.
fn fmt_read(path: &Option<PathBuf>, source: &io::Error, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match path {
        Some(p) => write!(f, "cannot read {}: {source}", p.display()),
        None => write!(f, "cannot read standard input: {source}"),
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
