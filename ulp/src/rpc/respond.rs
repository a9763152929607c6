//! What a server answers when a call header does not decode.

use super::error::{AuthField, RpcError, RpcErrorKind};
use super::message::MsgType;
use super::reply::{AuthStat, ReplyHeader};

/// A server's response to an undecodable call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum ServerReply {
    /// Send nothing: there is no xid to answer, the message is not a call, or it is a
    /// reply (a server never answers replies).
    Drop,
    /// Send this header (it has no results).
    Send(ReplyHeader<'static>),
}

impl RpcError {
    /// How a server should answer the call whose decoding produced this error.
    ///
    /// - no xid, a bad `msg_type`, or a REPLY: [`ServerReply::Drop`];
    /// - `rpcvers` other than 2: MSG_DENIED / RPC_MISMATCH(2, 2) (RFC 5531 §9);
    /// - an oversized, non-empty AUTH_NONE or malformed AUTH_SYS credential:
    ///   AUTH_ERROR(AUTH_BADCRED); the same faults in the verifier: AUTH_ERROR(AUTH_BADVERF);
    /// - a header cut short or with non-zero padding: GARBAGE_ARGS. Over RPC-over-RDMA the
    ///   message length is exact, so a short header is malformed rather than incomplete,
    ///   and answering spares the client a retransmission timeout.
    pub fn server_reply(&self) -> ServerReply {
        let (Some(xid), Some(MsgType::Call)) = (self.xid, self.msg_type) else {
            return ServerReply::Drop;
        };
        let auth = |field| match field {
            AuthField::Cred => ReplyHeader::auth_error(xid, AuthStat::BadCred),
            AuthField::Verf => ReplyHeader::auth_error(xid, AuthStat::BadVerf),
        };
        ServerReply::Send(match self.kind {
            RpcErrorKind::RpcVersionMismatch { .. } => ReplyHeader::rpc_mismatch(xid),
            RpcErrorKind::AuthBodyTooLong { field, .. }
            | RpcErrorKind::AuthNoneBody { field, .. }
            | RpcErrorKind::BadAuthSys { field, .. } => auth(field),
            RpcErrorKind::Xdr(_) => ReplyHeader::garbage_args(xid),
            // None of these describes a malformed call: a well-formed call handed to the
            // reply decoder, or faults only reply decoding finds.
            RpcErrorKind::BadMsgType { .. }
            | RpcErrorKind::UnexpectedMsgType { .. }
            | RpcErrorKind::UnknownReplyStat { .. }
            | RpcErrorKind::UnknownAcceptStat { .. }
            | RpcErrorKind::UnknownRejectStat { .. }
            | RpcErrorKind::UnknownAuthStat { .. } => return ServerReply::Drop,
        })
    }
}
