//! Call headers (RFC 5531 §9 `call_body`).

use rpcrdma::wire::xdr::{XdrCursor, XdrEncoder};

use super::auth::OpaqueAuth;
use super::error::{AuthField, EncodeError, Fault, RpcError, RpcErrorKind};
use super::message::{decode_prefix, unexpected, MsgType};
use super::RPC_VERSION;

/// Octets of a call header with AUTH_NONE credential and verifier.
const PLAIN_CALL_LEN: usize = 40;

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
    /// Octets of the plain call header ([`decode_plain`](Self::decode_plain)): ten words.
    pub(crate) const PLAIN_LEN: usize = PLAIN_CALL_LEN;

    /// Decodes a call header from the start of `buf`, returning it with the offset at which
    /// the procedure arguments begin. A well-formed reply is an
    /// [`UnexpectedMsgType`](RpcErrorKind::UnexpectedMsgType) error.
    #[inline]
    pub fn decode(buf: &'a [u8]) -> Result<(Self, usize), RpcError> {
        if let Some(h) = Self::decode_plain(buf) {
            return Ok((h, PLAIN_CALL_LEN));
        }
        Self::decode_general(buf)
    }

    /// The header of nearly every call, RPC version 2 with AUTH_NONE credential and
    /// verifier (ten words), taken in one look; `None` for anything else, which
    /// [`decode_general`](Self::decode_general) takes. Yields what the general decode
    /// yields for the same octets.
    #[inline(always)]
    pub(crate) fn decode_plain(buf: &'a [u8]) -> Option<Self> {
        let w = buf.first_chunk::<PLAIN_CALL_LEN>()?;
        let word =
            |i: usize| u32::from_be_bytes([w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]]);
        // msg_type CALL (0), rpcvers, then four zero words: AUTH_NONE and an empty
        // body, twice.
        let plain =
            word(1) == 0 && word(2) == RPC_VERSION && (word(6) | word(7) | word(8) | word(9)) == 0;
        plain.then(|| CallHeader {
            xid: word(0),
            prog: word(3),
            vers: word(4),
            procedure: word(5),
            cred: OpaqueAuth::None,
            verf: OpaqueAuth::None,
        })
    }

    /// [`decode`](Self::decode) of any call header.
    #[inline(never)]
    fn decode_general(buf: &'a [u8]) -> Result<(Self, usize), RpcError> {
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
    // Inlined: the common header (AUTH_NONE both ways) is ten words at fixed offsets,
    // stored where the call is built; any other goes to `encode_general`.
    #[inline]
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        if let (OpaqueAuth::None, OpaqueAuth::None) = (&self.cred, &self.verf) {
            let available = buf.len();
            let Some(out) = buf.first_chunk_mut::<PLAIN_CALL_LEN>() else {
                return Err(EncodeError::BufferTooSmall {
                    needed: PLAIN_CALL_LEN,
                    available,
                });
            };
            let words = [
                self.xid,
                MsgType::Call as u32,
                RPC_VERSION,
                self.prog,
                self.vers,
                self.procedure,
            ];
            let mut h = [0u8; PLAIN_CALL_LEN];
            for (i, v) in words.into_iter().enumerate() {
                h[4 * i..4 * i + 4].copy_from_slice(&v.to_be_bytes());
            }
            *out = h;
            return Ok(PLAIN_CALL_LEN);
        }
        self.encode_general(buf)
    }

    /// [`encode`](Self::encode) of any header.
    #[inline(never)]
    fn encode_general(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
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

#[cfg(test)]
mod plain_tests {
    use super::*;

    fn words(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    /// The fixed-offset AUTH_NONE encode writes what the general encoder writes, into
    /// buffers of every size around its length, and fails as it does (nothing written).
    #[test]
    fn the_fixed_encode_matches_the_general_one() {
        let h = CallHeader {
            xid: 0x0102_0304,
            prog: 100_003,
            vers: 3,
            procedure: 0xfedc_ba98,
            cred: OpaqueAuth::None,
            verf: OpaqueAuth::None,
        };
        for size in 0..=48 {
            let (mut a, mut b) = (vec![0xEEu8; size], vec![0xEEu8; size]);
            let (fa, gb) = (h.encode(&mut a), h.encode_general(&mut b));
            assert_eq!(fa, gb, "buffer of {size}");
            assert_eq!(a, b, "buffer of {size}");
            if size >= PLAIN_CALL_LEN {
                assert_eq!(fa, Ok(PLAIN_CALL_LEN));
                assert_eq!(
                    a[..PLAIN_CALL_LEN],
                    words(&[0x0102_0304, 0, 2, 100_003, 3, 0xfedc_ba98, 0, 0, 0, 0])[..]
                );
                assert_eq!(CallHeader::decode(&a), Ok((h, PLAIN_CALL_LEN)));
            } else {
                assert!(a.iter().all(|&o| o == 0xEE), "wrote into {size}");
            }
        }
    }

    /// The one-look decode and the general one agree on every header the former takes,
    /// and it declines everything else.
    #[test]
    fn the_one_look_decode_matches_the_general_one() {
        let cases: [(Vec<u8>, bool); 8] = [
            (words(&[9, 0, 2, 100_003, 3, 1, 0, 0, 0, 0, 42]), true),
            (words(&[9, 0, 2, 7, 1, 0, 0, 0, 0, 0]), true),
            (words(&[9, 0, 2, 7, 1, 0, 0, 0, 0]), false),
            // A reply, RPC version 3, AUTH_SYS, a non-empty AUTH_NONE body.
            (words(&[9, 1, 2, 7, 1, 0, 0, 0, 0, 0]), false),
            (words(&[9, 0, 3, 7, 1, 0, 0, 0, 0, 0]), false),
            (words(&[9, 0, 2, 7, 1, 0, 1, 0, 0, 0]), false),
            (words(&[9, 0, 2, 7, 1, 0, 0, 4, 0, 0]), false),
            (words(&[9, 0, 2, 7, 1, 0, 0, 0, 5, 0]), false),
        ];
        for (buf, plain) in &cases {
            let fast = CallHeader::decode_plain(buf);
            assert_eq!(fast.is_some(), *plain, "{buf:?}");
            let general = CallHeader::decode_general(buf);
            if let Some(h) = fast {
                assert_eq!(Ok((h, PLAIN_CALL_LEN)), general, "{buf:?}");
            }
            assert_eq!(CallHeader::decode(buf), general, "{buf:?}");
        }
    }
}
