//! Typed decode and encode errors for RPC headers.

use core::fmt;

use rpcrdma::wire::xdr::{BufferTooSmall, XdrError};

use super::message::MsgType;

/// Which `opaque_auth` of a header an authentication error concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum AuthField {
    /// The call's credential.
    Cred,
    /// The verifier of a call or of an accepted reply.
    Verf,
}

impl fmt::Display for AuthField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AuthField::Cred => "credential",
            AuthField::Verf => "verifier",
        })
    }
}

/// Why an AUTH_SYS body (RFC 5531 Appendix A, `authsys_parms`) was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthSysError {
    /// `machinename` announced more than 255 octets.
    #[error("machinename of {len} octets exceeds 255")]
    MachineNameTooLong {
        /// Announced length.
        len: u32,
    },
    /// `gids` announced more than 16 entries.
    #[error("{count} gids exceed 16")]
    TooManyGids {
        /// Announced count.
        count: u32,
    },
    /// Octets were left in the body after `authsys_parms`.
    #[error("{extra} octets follow authsys_parms inside the body")]
    TrailingBytes {
        /// How many octets were left over.
        extra: usize,
    },
    /// The body ended inside `authsys_parms`, or the name's padding was not zero. Offsets
    /// count from the start of the message.
    #[error(transparent)]
    Xdr(XdrError),
}

/// What was wrong with an RPC header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RpcErrorKind {
    /// The input ended before the header was complete, or padding after an `opaque_auth`
    /// body was not zero (RFC 4506 §4.10).
    #[error(transparent)]
    Xdr(XdrError),
    /// `msg_type` was neither CALL (0) nor REPLY (1).
    #[error("msg_type {value} is not 0 or 1")]
    BadMsgType {
        /// The value found.
        value: u32,
    },
    /// The message was a well-formed CALL where a REPLY was expected, or the reverse.
    #[error("unexpected {found} message")]
    UnexpectedMsgType {
        /// The direction that was found.
        found: MsgType,
    },
    /// `rpcvers` was not 2; a server answers RPC_MISMATCH (RFC 5531 §9).
    #[error("rpcvers {found} is not 2")]
    RpcVersionMismatch {
        /// The version the caller asked for.
        found: u32,
    },
    /// An `opaque_auth` body announced more than 400 octets (RFC 5531 §8.2).
    #[error("{field} body of {len} octets exceeds 400")]
    AuthBodyTooLong {
        /// Credential or verifier.
        field: AuthField,
        /// Announced length.
        len: u32,
    },
    /// An AUTH_NONE credential or verifier carried a non-empty body.
    #[error("AUTH_NONE {field} has a {len}-octet body")]
    AuthNoneBody {
        /// Credential or verifier.
        field: AuthField,
        /// Length of the body.
        len: u32,
    },
    /// An AUTH_SYS body did not hold exactly one valid `authsys_parms`.
    #[error("bad AUTH_SYS {field}: {reason}")]
    BadAuthSys {
        /// Credential or verifier.
        field: AuthField,
        /// What was wrong with it.
        reason: AuthSysError,
    },
    /// `reply_stat` was neither MSG_ACCEPTED (0) nor MSG_DENIED (1).
    #[error("unknown reply_stat {value}")]
    UnknownReplyStat {
        /// The value found.
        value: u32,
    },
    /// `accept_stat` was outside SUCCESS..=SYSTEM_ERR (0..=5).
    #[error("unknown accept_stat {value}")]
    UnknownAcceptStat {
        /// The value found.
        value: u32,
    },
    /// `reject_stat` was neither RPC_MISMATCH (0) nor AUTH_ERROR (1).
    #[error("unknown reject_stat {value}")]
    UnknownRejectStat {
        /// The value found.
        value: u32,
    },
    /// `auth_stat` was outside AUTH_OK..=RPCSEC_GSS_CTXPROBLEM (0..=14).
    #[error("unknown auth_stat {value}")]
    UnknownAuthStat {
        /// The value found.
        value: u32,
    },
}

/// A malformed RPC header, with whatever the decoder had learned before the fault so that
/// a server can still answer (see [`RpcError::server_reply`](crate::rpc::RpcError::server_reply)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RpcError {
    /// The transaction id, if the input was long enough to hold one.
    pub xid: Option<u32>,
    /// The message direction, if it had been read and was valid.
    pub msg_type: Option<MsgType>,
    /// Offset of the offending item from the start of the message.
    pub offset: usize,
    /// What was wrong.
    pub kind: RpcErrorKind,
}

impl fmt::Display for RpcError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("malformed RPC header")?;
        if let Some(xid) = self.xid {
            write!(f, " (xid {xid:#010x})")?;
        }
        // XDR errors print their own offset.
        if !matches!(self.kind, RpcErrorKind::Xdr(_)) {
            write!(f, " at offset {}", self.offset)?;
        }
        write!(f, ": {}", self.kind)
    }
}

impl std::error::Error for RpcError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            RpcErrorKind::Xdr(e) => Some(e),
            RpcErrorKind::BadAuthSys {
                reason: AuthSysError::Xdr(e),
                ..
            } => Some(e),
            _ => None,
        }
    }
}

/// Why a header could not be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum EncodeError {
    /// The caller's buffer is shorter than `encoded_len()`; nothing was written.
    #[error("RPC header needs {needed} octets, buffer holds {available}")]
    BufferTooSmall {
        /// Octets the header needs.
        needed: usize,
        /// Size of the caller's buffer.
        available: usize,
    },
    /// A raw `opaque_auth` body is longer than 400 octets.
    #[error("{field} body of {len} octets exceeds 400")]
    AuthBodyTooLong {
        /// Credential or verifier.
        field: AuthField,
        /// Length of the body.
        len: usize,
    },
    /// An AUTH_SYS machine name is longer than 255 octets.
    #[error("AUTH_SYS {field} machinename of {len} octets exceeds 255")]
    MachineNameTooLong {
        /// Credential or verifier.
        field: AuthField,
        /// Length of the name.
        len: usize,
    },
    /// A raw `opaque_auth` used flavor AUTH_NONE or AUTH_SYS, whose bodies must be given as
    /// typed values so that what is sent is guaranteed to decode.
    #[error("{field} flavor {flavor} must be encoded from its typed form, not raw bytes")]
    TypedFlavorAsRaw {
        /// Credential or verifier.
        field: AuthField,
        /// The flavor number.
        flavor: u32,
    },
}

impl From<BufferTooSmall> for EncodeError {
    fn from(e: BufferTooSmall) -> Self {
        EncodeError::BufferTooSmall {
            needed: e.needed,
            available: e.available,
        }
    }
}

/// A decoding fault before it is tagged with the xid and direction known to the caller.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fault {
    pub(crate) offset: usize,
    pub(crate) kind: RpcErrorKind,
}

impl Fault {
    pub(crate) fn into_error(self, xid: Option<u32>, msg_type: Option<MsgType>) -> RpcError {
        RpcError {
            xid,
            msg_type,
            offset: self.offset,
            kind: self.kind,
        }
    }
}

impl From<XdrError> for Fault {
    fn from(e: XdrError) -> Self {
        Fault {
            offset: xdr_offset(&e),
            kind: RpcErrorKind::Xdr(e),
        }
    }
}

/// Where an XDR primitive failure happened.
pub(crate) fn xdr_offset(e: &XdrError) -> usize {
    match *e {
        XdrError::Truncated { offset, .. }
        | XdrError::TooLong { offset, .. }
        | XdrError::BadDiscriminant { offset, .. }
        | XdrError::NonZeroPadding { offset } => offset,
    }
}

/// Moves an XDR failure found in a sub-slice to message-relative offsets.
pub(crate) fn rebase(e: XdrError, base: usize) -> XdrError {
    match e {
        XdrError::Truncated {
            offset,
            needed,
            available,
        } => XdrError::Truncated {
            offset: base + offset,
            needed,
            available,
        },
        XdrError::TooLong { offset, len, max } => XdrError::TooLong {
            offset: base + offset,
            len,
            max,
        },
        XdrError::BadDiscriminant { offset, value } => XdrError::BadDiscriminant {
            offset: base + offset,
            value,
        },
        XdrError::NonZeroPadding { offset } => XdrError::NonZeroPadding {
            offset: base + offset,
        },
    }
}
