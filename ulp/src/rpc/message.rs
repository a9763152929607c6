//! The `rpc_msg` envelope (RFC 5531 §9): transaction id and direction, and a decoder that
//! dispatches on the direction.

use core::fmt;

use rpcrdma::wire::xdr::XdrCursor;

use super::call::CallHeader;
use super::error::{EncodeError, Fault, RpcError, RpcErrorKind};
use super::reply::ReplyHeader;

/// Message direction (RFC 5531 §9 `msg_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[repr(u32)]
pub enum MsgType {
    /// CALL = 0.
    Call = 0,
    /// REPLY = 1.
    Reply = 1,
}

impl fmt::Display for MsgType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MsgType::Call => "CALL",
            MsgType::Reply => "REPLY",
        })
    }
}

/// Reads `xid` and `msg_type`, leaving the cursor at the call or reply body.
pub(crate) fn decode_prefix(buf: &[u8]) -> Result<(XdrCursor<'_>, u32, MsgType), RpcError> {
    let mut c = XdrCursor::new(buf);
    let xid = c.u32().map_err(|e| Fault::from(e).into_error(None, None))?;
    let at = c.position();
    let msg_type = match c
        .u32()
        .map_err(|e| Fault::from(e).into_error(Some(xid), None))?
    {
        0 => MsgType::Call,
        1 => MsgType::Reply,
        value => {
            return Err(RpcError {
                xid: Some(xid),
                msg_type: None,
                offset: at,
                kind: RpcErrorKind::BadMsgType { value },
            })
        }
    };
    Ok((c, xid, msg_type))
}

/// The error for a well-formed message travelling the other way than expected.
pub(crate) fn unexpected(xid: u32, found: MsgType) -> RpcError {
    RpcError {
        xid: Some(xid),
        msg_type: Some(found),
        offset: 4,
        kind: RpcErrorKind::UnexpectedMsgType { found },
    }
}

/// A decoded RPC header of either direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum RpcMessage<'a> {
    /// A call; the procedure arguments follow the header.
    Call(CallHeader<'a>),
    /// A reply; for an accepted SUCCESS the procedure results follow the header.
    Reply(ReplyHeader<'a>),
}

impl<'a> RpcMessage<'a> {
    /// Decodes a call or reply header from the start of `buf`, returning it with the offset
    /// where the arguments or results begin.
    pub fn decode(buf: &'a [u8]) -> Result<(Self, usize), RpcError> {
        let (mut c, xid, msg_type) = decode_prefix(buf)?;
        match msg_type {
            MsgType::Call => CallHeader::decode_body(&mut c, xid).map(RpcMessage::Call),
            MsgType::Reply => ReplyHeader::decode_body(&mut c, xid).map(RpcMessage::Reply),
        }
        .map(|m| (m, c.position()))
    }

    /// The transaction id.
    pub const fn xid(&self) -> u32 {
        match self {
            RpcMessage::Call(h) => h.xid,
            RpcMessage::Reply(h) => h.xid,
        }
    }

    /// The direction.
    pub const fn msg_type(&self) -> MsgType {
        match self {
            RpcMessage::Call(_) => MsgType::Call,
            RpcMessage::Reply(_) => MsgType::Reply,
        }
    }

    /// Exact number of octets [`encode`](Self::encode) writes.
    pub const fn encoded_len(&self) -> usize {
        match self {
            RpcMessage::Call(h) => h.encoded_len(),
            RpcMessage::Reply(h) => h.encoded_len(),
        }
    }

    /// Encodes the header at the start of `buf`, returning the octets written (where the
    /// arguments or results go).
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        match self {
            RpcMessage::Call(h) => h.encode(buf),
            RpcMessage::Reply(h) => h.encode(buf),
        }
    }
}
