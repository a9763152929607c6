//! [`ProcError`]: how a procedure reports that it did not succeed.

use core::fmt;

use crate::ddp::{DdpDecodeError, DdpEncodeError};
use crate::rpc::AuthStat;

/// Why a procedure did not produce results. The dispatcher turns each into the reply RFC
/// 5531 §9 prescribes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcError {
    /// The arguments did not decode: GARBAGE_ARGS.
    GarbageArgs(DdpDecodeError),
    /// The results could not be encoded as the requester provisioned them (inline buffer
    /// or Write chunk too small, too many chunks): the dispatcher reports
    /// [`DispatchError::ReplyOverrun`](super::DispatchError::ReplyOverrun) so that the
    /// transport answers with RDMA_ERROR (RFC 8267 §3).
    Results(DdpEncodeError),
    /// The procedure is not available after all (e.g. disabled at run time):
    /// PROC_UNAVAIL.
    ProcUnavail,
    /// A server-side failure such as resource exhaustion: SYSTEM_ERR.
    SystemErr,
    /// The caller's credentials are not good enough: MSG_DENIED / AUTH_ERROR with this
    /// reason.
    Auth(crate::rpc::AuthStat),
    /// Send no reply at all: e.g. a duplicate-request cache seeing a retransmission of a
    /// call still in progress. Over RPC-over-RDMA the requester's credit for the call
    /// stays spent until it gives up on the call (see `rpcrdma::service`), so use it
    /// for exceptions only.
    NoReply,
}

impl fmt::Display for ProcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProcError::GarbageArgs(e) => write!(f, "garbage arguments: {e}"),
            ProcError::Results(e) => write!(f, "results do not fit: {e}"),
            ProcError::ProcUnavail => f.write_str("procedure unavailable"),
            ProcError::SystemErr => f.write_str("system error"),
            ProcError::Auth(s) => write!(f, "authentication error: {}", AuthStat::name(*s)),
            ProcError::NoReply => f.write_str("dropped without a reply"),
        }
    }
}

impl std::error::Error for ProcError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ProcError::GarbageArgs(e) => Some(e),
            ProcError::Results(e) => Some(e),
            _ => None,
        }
    }
}

impl From<DdpDecodeError> for ProcError {
    fn from(e: DdpDecodeError) -> Self {
        ProcError::GarbageArgs(e)
    }
}

impl From<DdpEncodeError> for ProcError {
    fn from(e: DdpEncodeError) -> Self {
        ProcError::Results(e)
    }
}
