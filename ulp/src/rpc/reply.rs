//! Reply headers (RFC 5531 §9 `reply_body`, `accepted_reply`, `rejected_reply`) and the
//! constructors a responder uses to answer without allocating.

use core::fmt;

use rpcrdma::wire::xdr::{XdrCursor, XdrEncoder};

use super::auth::OpaqueAuth;
use super::error::{AuthField, EncodeError, Fault, RpcError, RpcErrorKind};
use super::message::{decode_prefix, unexpected, MsgType};
use super::RPC_VERSION;

/// Why authentication failed (RFC 5531 §9 `auth_stat`, including the RPCSEC_GSS values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[repr(u32)]
pub enum AuthStat {
    /// AUTH_OK: success.
    Ok = 0,
    /// AUTH_BADCRED: bad credential (seal broken).
    BadCred = 1,
    /// AUTH_REJECTEDCRED: client must begin a new session.
    RejectedCred = 2,
    /// AUTH_BADVERF: bad verifier (seal broken).
    BadVerf = 3,
    /// AUTH_REJECTEDVERF: verifier expired or replayed.
    RejectedVerf = 4,
    /// AUTH_TOOWEAK: rejected for security reasons.
    TooWeak = 5,
    /// AUTH_INVALIDRESP: bogus response verifier.
    InvalidResp = 6,
    /// AUTH_FAILED: reason unknown.
    Failed = 7,
    /// AUTH_KERB_GENERIC: Kerberos generic error.
    KerbGeneric = 8,
    /// AUTH_TIMEEXPIRE: time of credential expired.
    TimeExpire = 9,
    /// AUTH_TKT_FILE: problem with ticket file.
    TktFile = 10,
    /// AUTH_DECODE: can't decode authenticator.
    Decode = 11,
    /// AUTH_NET_ADDR: wrong network address in ticket.
    NetAddr = 12,
    /// RPCSEC_GSS_CREDPROBLEM: no credentials for user.
    RpcsecGssCredProblem = 13,
    /// RPCSEC_GSS_CTXPROBLEM: problem with context.
    RpcsecGssCtxProblem = 14,
}

impl AuthStat {
    /// Every value, in numeric order.
    pub const ALL: [AuthStat; 15] = [
        AuthStat::Ok,
        AuthStat::BadCred,
        AuthStat::RejectedCred,
        AuthStat::BadVerf,
        AuthStat::RejectedVerf,
        AuthStat::TooWeak,
        AuthStat::InvalidResp,
        AuthStat::Failed,
        AuthStat::KerbGeneric,
        AuthStat::TimeExpire,
        AuthStat::TktFile,
        AuthStat::Decode,
        AuthStat::NetAddr,
        AuthStat::RpcsecGssCredProblem,
        AuthStat::RpcsecGssCtxProblem,
    ];

    /// The value with wire number `v`, if there is one.
    pub const fn from_u32(v: u32) -> Option<AuthStat> {
        if (v as usize) < Self::ALL.len() {
            Some(Self::ALL[v as usize])
        } else {
            None
        }
    }

    /// The RFC name.
    pub const fn name(self) -> &'static str {
        match self {
            AuthStat::Ok => "AUTH_OK",
            AuthStat::BadCred => "AUTH_BADCRED",
            AuthStat::RejectedCred => "AUTH_REJECTEDCRED",
            AuthStat::BadVerf => "AUTH_BADVERF",
            AuthStat::RejectedVerf => "AUTH_REJECTEDVERF",
            AuthStat::TooWeak => "AUTH_TOOWEAK",
            AuthStat::InvalidResp => "AUTH_INVALIDRESP",
            AuthStat::Failed => "AUTH_FAILED",
            AuthStat::KerbGeneric => "AUTH_KERB_GENERIC",
            AuthStat::TimeExpire => "AUTH_TIMEEXPIRE",
            AuthStat::TktFile => "AUTH_TKT_FILE",
            AuthStat::Decode => "AUTH_DECODE",
            AuthStat::NetAddr => "AUTH_NET_ADDR",
            AuthStat::RpcsecGssCredProblem => "RPCSEC_GSS_CREDPROBLEM",
            AuthStat::RpcsecGssCtxProblem => "RPCSEC_GSS_CTXPROBLEM",
        }
    }
}

impl fmt::Display for AuthStat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Outcome of a call the server accepted (RFC 5531 §9 `accept_stat` with its data).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum AcceptStatus {
    /// SUCCESS (0): the procedure results follow the header.
    Success,
    /// PROG_UNAVAIL (1): the program is not exported.
    ProgUnavail,
    /// PROG_MISMATCH (2): the program version is not supported.
    ProgMismatch {
        /// Lowest version supported.
        low: u32,
        /// Highest version supported.
        high: u32,
    },
    /// PROC_UNAVAIL (3): the procedure is not supported.
    ProcUnavail,
    /// GARBAGE_ARGS (4): the procedure could not decode its arguments.
    GarbageArgs,
    /// SYSTEM_ERR (5): a server-side error such as memory exhaustion.
    SystemErr,
}

impl AcceptStatus {
    /// The `accept_stat` wire value.
    pub const fn code(&self) -> u32 {
        match self {
            AcceptStatus::Success => 0,
            AcceptStatus::ProgUnavail => 1,
            AcceptStatus::ProgMismatch { .. } => 2,
            AcceptStatus::ProcUnavail => 3,
            AcceptStatus::GarbageArgs => 4,
            AcceptStatus::SystemErr => 5,
        }
    }
}

/// Why the server refused a call (RFC 5531 §9 `rejected_reply`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum Rejection {
    /// RPC_MISMATCH (0): the RPC version is not supported.
    RpcMismatch {
        /// Lowest RPC version supported.
        low: u32,
        /// Highest RPC version supported.
        high: u32,
    },
    /// AUTH_ERROR (1): authentication failed.
    AuthError(AuthStat),
}

impl Rejection {
    /// The `reject_stat` wire value.
    pub const fn code(&self) -> u32 {
        match self {
            Rejection::RpcMismatch { .. } => 0,
            Rejection::AuthError(_) => 1,
        }
    }
}

/// Accepted or denied (RFC 5531 §9 `reply_body`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum ReplyBody<'a> {
    /// MSG_ACCEPTED (0).
    Accepted {
        /// The server's verifier.
        verf: OpaqueAuth<'a>,
        /// What happened to the call.
        status: AcceptStatus,
    },
    /// MSG_DENIED (1).
    Denied(Rejection),
}

/// The header of an RPC reply: everything before the procedure results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ReplyHeader<'a> {
    /// Transaction id of the call being answered.
    pub xid: u32,
    /// Accepted or denied, with details.
    pub body: ReplyBody<'a>,
}

impl ReplyHeader<'static> {
    /// An accepted reply with an AUTH_NONE verifier.
    pub const fn accepted(xid: u32, status: AcceptStatus) -> Self {
        ReplyHeader {
            xid,
            body: ReplyBody::Accepted {
                verf: OpaqueAuth::None,
                status,
            },
        }
    }

    /// SUCCESS with an AUTH_NONE verifier; the results are written after it.
    pub const fn success(xid: u32) -> Self {
        Self::accepted(xid, AcceptStatus::Success)
    }

    /// PROG_UNAVAIL with an AUTH_NONE verifier.
    pub const fn prog_unavail(xid: u32) -> Self {
        Self::accepted(xid, AcceptStatus::ProgUnavail)
    }

    /// PROG_MISMATCH with an AUTH_NONE verifier and the supported version range.
    pub const fn prog_mismatch(xid: u32, low: u32, high: u32) -> Self {
        Self::accepted(xid, AcceptStatus::ProgMismatch { low, high })
    }

    /// PROC_UNAVAIL with an AUTH_NONE verifier.
    pub const fn proc_unavail(xid: u32) -> Self {
        Self::accepted(xid, AcceptStatus::ProcUnavail)
    }

    /// GARBAGE_ARGS with an AUTH_NONE verifier.
    pub const fn garbage_args(xid: u32) -> Self {
        Self::accepted(xid, AcceptStatus::GarbageArgs)
    }

    /// SYSTEM_ERR with an AUTH_NONE verifier.
    pub const fn system_err(xid: u32) -> Self {
        Self::accepted(xid, AcceptStatus::SystemErr)
    }

    /// MSG_DENIED / RPC_MISMATCH announcing that only version 2 is supported.
    pub const fn rpc_mismatch(xid: u32) -> Self {
        ReplyHeader {
            xid,
            body: ReplyBody::Denied(Rejection::RpcMismatch {
                low: RPC_VERSION,
                high: RPC_VERSION,
            }),
        }
    }

    /// MSG_DENIED / AUTH_ERROR with the given reason.
    pub const fn auth_error(xid: u32, stat: AuthStat) -> Self {
        ReplyHeader {
            xid,
            body: ReplyBody::Denied(Rejection::AuthError(stat)),
        }
    }
}

/// Octets of [`ReplyHeader::success`]'s header: six words.
const SUCCESS_LEN: usize = 24;

impl<'a> ReplyHeader<'a> {
    /// Decodes a reply header from the start of `buf`, returning it with the offset at
    /// which the results begin (the end of the header; only SUCCESS has results). A
    /// well-formed call is an [`UnexpectedMsgType`](RpcErrorKind::UnexpectedMsgType) error.
    pub fn decode(buf: &'a [u8]) -> Result<(Self, usize), RpcError> {
        let (mut c, xid, msg_type) = decode_prefix(buf)?;
        if msg_type != MsgType::Reply {
            return Err(unexpected(xid, msg_type));
        }
        let h = Self::decode_body(&mut c, xid)?;
        Ok((h, c.position()))
    }

    /// Decodes `reply_body` after `msg_type`.
    pub(crate) fn decode_body(c: &mut XdrCursor<'a>, xid: u32) -> Result<Self, RpcError> {
        let err = |f: Fault| f.into_error(Some(xid), Some(MsgType::Reply));
        let bad = |offset, kind| err(Fault { offset, kind });
        let word = |c: &mut XdrCursor<'a>| {
            let at = c.position();
            c.u32().map(|v| (at, v)).map_err(|e| err(e.into()))
        };
        let body = match word(c)? {
            (_, 0) => {
                let verf = OpaqueAuth::decode(c, AuthField::Verf).map_err(err)?;
                let status = match word(c)? {
                    (_, 0) => AcceptStatus::Success,
                    (_, 1) => AcceptStatus::ProgUnavail,
                    (_, 2) => AcceptStatus::ProgMismatch {
                        low: word(c)?.1,
                        high: word(c)?.1,
                    },
                    (_, 3) => AcceptStatus::ProcUnavail,
                    (_, 4) => AcceptStatus::GarbageArgs,
                    (_, 5) => AcceptStatus::SystemErr,
                    (at, value) => return Err(bad(at, RpcErrorKind::UnknownAcceptStat { value })),
                };
                ReplyBody::Accepted { verf, status }
            }
            (_, 1) => ReplyBody::Denied(match word(c)? {
                (_, 0) => Rejection::RpcMismatch {
                    low: word(c)?.1,
                    high: word(c)?.1,
                },
                (_, 1) => {
                    let (at, value) = word(c)?;
                    match AuthStat::from_u32(value) {
                        Some(stat) => Rejection::AuthError(stat),
                        None => return Err(bad(at, RpcErrorKind::UnknownAuthStat { value })),
                    }
                }
                (at, value) => return Err(bad(at, RpcErrorKind::UnknownRejectStat { value })),
            }),
            (at, value) => return Err(bad(at, RpcErrorKind::UnknownReplyStat { value })),
        };
        Ok(ReplyHeader { xid, body })
    }

    /// Exact number of octets [`encode`](Self::encode) writes.
    pub const fn encoded_len(&self) -> usize {
        // xid, msg_type, reply_stat
        3 * 4
            + match &self.body {
                ReplyBody::Accepted { verf, status } => {
                    verf.encoded_len()
                        + 4
                        + match status {
                            AcceptStatus::ProgMismatch { .. } => 8,
                            _ => 0,
                        }
                }
                ReplyBody::Denied(Rejection::RpcMismatch { .. }) => 4 + 8,
                ReplyBody::Denied(Rejection::AuthError(_)) => 4 + 4,
            }
    }

    /// [`encode`](Self::encode) of [`success`](Self::success)`(xid)`, the reply to
    /// nearly every call: xid, REPLY, then MSG_ACCEPTED, the empty AUTH_NONE verifier
    /// and SUCCESS, all zero. Inlined where a dispatcher answers (the general encode's
    /// call and its match on the body cost more than the six stores).
    #[inline(always)]
    pub(crate) fn encode_success(xid: u32, buf: &mut [u8]) -> Result<usize, EncodeError> {
        let available = buf.len();
        let out = buf
            .first_chunk_mut::<{ SUCCESS_LEN }>()
            .ok_or(EncodeError::BufferTooSmall {
                needed: SUCCESS_LEN,
                available,
            })?;
        out[..4].copy_from_slice(&xid.to_be_bytes());
        out[4..8].copy_from_slice(&(MsgType::Reply as u32).to_be_bytes());
        out[8..].fill(0);
        Ok(SUCCESS_LEN)
    }

    /// Encodes the header at the start of `buf` and returns its length, which is where
    /// SUCCESS results go. Nothing is written on error.
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        if let ReplyBody::Accepted {
            verf: OpaqueAuth::None,
            status: AcceptStatus::Success,
        } = &self.body
        {
            return Self::encode_success(self.xid, buf);
        }
        if let ReplyBody::Accepted { verf, .. } = &self.body {
            verf.check(AuthField::Verf)?;
        }
        let needed = self.encoded_len();
        if buf.len() < needed {
            return Err(EncodeError::BufferTooSmall {
                needed,
                available: buf.len(),
            });
        }
        let mut e = XdrEncoder::new(buf);
        e.u32(self.xid)?;
        e.u32(MsgType::Reply as u32)?;
        match &self.body {
            ReplyBody::Accepted { verf, status } => {
                e.u32(0)?;
                verf.encode(&mut e)?;
                e.u32(status.code())?;
                if let AcceptStatus::ProgMismatch { low, high } = *status {
                    e.u32(low)?;
                    e.u32(high)?;
                }
            }
            ReplyBody::Denied(r) => {
                e.u32(1)?;
                e.u32(r.code())?;
                match *r {
                    Rejection::RpcMismatch { low, high } => {
                        e.u32(low)?;
                        e.u32(high)?;
                    }
                    Rejection::AuthError(stat) => e.u32(stat as u32)?,
                }
            }
        }
        Ok(e.finish())
    }
}
