//! The built-in echo program (`0x2f000001` v1) in one place, with the two helpers an
//! embedding example needs: build an ECHO call, read the echoed bytes back.
//!
//! The program itself is [`EchoProgram`] (serve it with a
//! [`Dispatcher`](crate::program::Dispatcher)); its procedures are in [`echo_proc`].

use rpcrdma::RegBuf;
use rpcrdma::{CallRequest, CallStatus, Outcome};

pub use crate::builtin::{echo_proc, EchoData, EchoProgram, ECHO_PROGRAM, ECHO_VERSION};
use crate::client::{inline_call, BuildError, OutcomeResults};
use crate::ddp::{DdpDecodeError, ReplyError, XdrCodec};
use crate::rpc::{CallHeader, OpaqueAuth};

/// Why [`reply_data`] found no echoed bytes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EchoError {
    /// The call did not succeed.
    #[error("call failed: {0:?}")]
    Failed(CallStatus),
    /// The reply was not an accepted RPC reply.
    #[error("reply: {0}")]
    Reply(#[source] ReplyError),
    /// The results did not decode as echo data.
    #[error("results: {0}")]
    Decode(#[source] DdpDecodeError),
}

/// An ECHO call of `data`, encoded into `msg` (a registered send buffer, e.g.
/// `Requester::alloc_msg`), with reply room for the echo. The engine assigns the
/// XID and picks the message's shape.
pub fn call(msg: RegBuf, data: &[u8]) -> Result<CallRequest, BuildError> {
    let header = CallHeader {
        xid: 0,
        prog: ECHO_PROGRAM,
        vers: ECHO_VERSION,
        procedure: echo_proc::ECHO,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    };
    let max_reply = EchoProgram::info(echo_proc::ECHO).map_or(data.len() as u32 + 128, |i| {
        i.max_reply_len(data.len() as u32, false, 0) as u32
    });
    inline_call(msg, &header, &EchoData { data }, max_reply)
}

/// The bytes an ECHO call's outcome carries back (copied out of the receive buffer;
/// [`OutcomeResults`] reads them in place).
pub fn reply_data(outcome: &Outcome) -> Result<Vec<u8>, EchoError> {
    if outcome.status != CallStatus::Success {
        return Err(EchoError::Failed(outcome.status));
    }
    let results = OutcomeResults::new(outcome);
    let (_, mut cursor) = results.cursor().map_err(EchoError::Reply)?;
    let echoed = EchoData::decode(&mut cursor).map_err(EchoError::Decode)?;
    cursor.finish().map_err(EchoError::Decode)?;
    Ok(echoed.data.to_vec())
}
