//! [`ProcError`]: how a procedure reports that it did not succeed.

use crate::ddp::{DdpDecodeError, DdpEncodeError};
use crate::rpc::AuthStat;

/// Why a procedure did not produce results. The dispatcher turns each into the reply RFC
/// 5531 §9 prescribes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProcError {
    /// The arguments did not decode: GARBAGE_ARGS.
    #[error("garbage arguments: {0}")]
    GarbageArgs(#[from] DdpDecodeError),
    /// The results could not be encoded as the requester provisioned them (inline buffer
    /// or Write chunk too small, too many chunks): the dispatcher reports
    /// [`DispatchError::ReplyOverrun`](super::DispatchError::ReplyOverrun) so that the
    /// transport answers with RDMA_ERROR (RFC 8267 §3).
    #[error("results do not fit: {0}")]
    Results(#[from] DdpEncodeError),
    /// The procedure is not available after all (e.g. disabled at run time):
    /// PROC_UNAVAIL.
    #[error("procedure unavailable")]
    ProcUnavail,
    /// A server-side failure such as resource exhaustion: SYSTEM_ERR.
    #[error("system error")]
    SystemErr,
    /// The caller's credentials are not good enough: MSG_DENIED / AUTH_ERROR with this
    /// reason.
    #[error("authentication error: {}", AuthStat::name(*.0))]
    Auth(crate::rpc::AuthStat),
    /// Send no reply at all: e.g. a duplicate-request cache seeing a retransmission of a
    /// call still in progress. Over RPC-over-RDMA the requester's credit for the call
    /// stays spent until it gives up on the call (see `rpcrdma::service`), so use it
    /// for exceptions only.
    #[error("dropped without a reply")]
    NoReply,
}
