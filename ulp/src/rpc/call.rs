//! Call headers (RFC 5531 §9 `call_body`).

use rpcrdma::wire::xdr::{XdrCursor, XdrEncoder};

use super::auth::OpaqueAuth;
use super::error::{AuthField, EncodeError, Fault, RpcError, RpcErrorKind};
use super::message::{decode_prefix, unexpected, MsgType};
use super::RPC_VERSION;

/// The header of an RPC call: everything before the procedure arguments.
///
/// `rpcvers` is not stored: a decoded call always had version 2, and encoding always
/// writes 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct CallHeader<'a> {
    /// Transaction id, echoed by the reply.
    pub xid: u32,
    /// Program number.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure number.
    pub procedure: u32,
    /// Caller's credential.
    pub cred: OpaqueAuth<'a>,
    /// Caller's verifier.
    pub verf: OpaqueAuth<'a>,
}

impl<'a> CallHeader<'a> {
    /// Decodes a call header from the start of `buf`, returning it with the offset at which
    /// the procedure arguments begin. A well-formed reply is an
    /// [`UnexpectedMsgType`](RpcErrorKind::UnexpectedMsgType) error.
    pub fn decode(buf: &'a [u8]) -> Result<(Self, usize), RpcError> {
        let (mut c, xid, msg_type) = decode_prefix(buf)?;
        if msg_type != MsgType::Call {
            return Err(unexpected(xid, msg_type));
        }
        let h = Self::decode_body(&mut c, xid)?;
        Ok((h, c.position()))
    }

    /// Decodes `call_body` after `msg_type`.
    pub(crate) fn decode_body(c: &mut XdrCursor<'a>, xid: u32) -> Result<Self, RpcError> {
        let err = |f: Fault| f.into_error(Some(xid), Some(MsgType::Call));
        let at = c.position();
        let rpcvers = c.u32().map_err(|e| err(e.into()))?;
        // Checked before anything else: other versions may lay out the rest differently,
        // and the server's answer (RPC_MISMATCH) must not depend on it.
        if rpcvers != RPC_VERSION {
            return Err(err(Fault {
                offset: at,
                kind: RpcErrorKind::RpcVersionMismatch { found: rpcvers },
            }));
        }
        let prog = c.u32().map_err(|e| err(e.into()))?;
        let vers = c.u32().map_err(|e| err(e.into()))?;
        let procedure = c.u32().map_err(|e| err(e.into()))?;
        let cred = OpaqueAuth::decode(c, AuthField::Cred).map_err(err)?;
        let verf = OpaqueAuth::decode(c, AuthField::Verf).map_err(err)?;
        Ok(CallHeader {
            xid,
            prog,
            vers,
            procedure,
            cred,
            verf,
        })
    }

    /// Exact number of octets [`encode`](Self::encode) writes.
    pub const fn encoded_len(&self) -> usize {
        6 * 4 + self.cred.encoded_len() + self.verf.encoded_len()
    }

    /// Encodes the header at the start of `buf` and returns its length, which is where the
    /// arguments go. Nothing is written on error.
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        if let (OpaqueAuth::None, OpaqueAuth::None) = (&self.cred, &self.verf) {
            // The common header (AUTH_NONE both ways): ten words, written in one go.
            let available = buf.len();
            let out = buf.get_mut(..40).ok_or(EncodeError::BufferTooSmall {
                needed: 40,
                available,
            })?;
            let words = [
                self.xid,
                MsgType::Call as u32,
                RPC_VERSION,
                self.prog,
                self.vers,
                self.procedure,
            ];
            for (w, v) in out.chunks_exact_mut(4).zip(words) {
                w.copy_from_slice(&v.to_be_bytes());
            }
            out[24..].fill(0);
            return Ok(40);
        }
        self.cred.check(AuthField::Cred)?;
        self.verf.check(AuthField::Verf)?;
        let needed = self.encoded_len();
        if buf.len() < needed {
            return Err(EncodeError::BufferTooSmall {
                needed,
                available: buf.len(),
            });
        }
        let mut e = XdrEncoder::new(buf);
        e.u32(self.xid)?;
        e.u32(MsgType::Call as u32)?;
        e.u32(RPC_VERSION)?;
        e.u32(self.prog)?;
        e.u32(self.vers)?;
        e.u32(self.procedure)?;
        self.cred.encode(&mut e)?;
        self.verf.encode(&mut e)?;
        Ok(e.finish())
    }
}
