//! The RFC 5666 §6 Connection Configuration Protocol: the argument and result of its one
//! procedure.
//!
//! ```text
//! struct config_rdma_req {              struct config_rdma_reply {
//!      uint32  maxcall_sendsize;             uint32  maxcall_sendsize;
//!      uint32  maxreply_sendsize;            uint32  align;
//!      uint32  maxrdmaread;                  uint32  maxrdmaread;
//! };                                    };
//!
//! program CONFIG_RDMA_PROG { version VERS1 {
//!     config_rdma_reply CONF_RDMA(config_rdma_req) = 1;
//! } = 1; } = 100417;
//! ```
//!
//! These are the RPC call *arguments* and reply *results*, which follow the ONC RPC call
//! and accepted-reply headers; the headers themselves are the RPC layer's business.
//! RFC 8166 dropped this protocol in favour of RFC 8797 private data
//! ([`super::private_data`]); it is kept for talking to RFC 5666-era peers.
//!
//! The codec checks XDR well-formedness only. What the values mean for a connection —
//! e.g. that a `maxrdmaread` of zero forbids the peer from relying on RDMA Read
//! (RFC 5666 §6.2) — is for the caller to apply.

use super::xdr::{BufferTooSmall, XdrCursor, XdrEncoder, XdrError};

/// RPC program number of the Connection Configuration Protocol (RFC 5666 §6.2, §10:
/// "rdmaconfig").
pub const CONFIG_RDMA_PROG: u32 = 100_417;

/// The protocol's only version.
pub const CONFIG_RDMA_VERS: u32 = 1;

/// Procedure number of `CONF_RDMA`.
pub const CONF_RDMA: u32 = 1;

/// Why CCP arguments or results could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CcpError {
    /// The XDR was malformed (here that can only mean truncated).
    #[error("malformed CONF_RDMA XDR: {0}")]
    Xdr(#[from] XdrError),
    /// Octets were left over after the structure. Both structures have a fixed size, so
    /// extra octets mean the RPC framing around them is wrong.
    #[error("{extra} unexpected octets after CONF_RDMA data at offset {offset}")]
    TrailingBytes {
        /// Offset of the first extra octet.
        offset: usize,
        /// Number of extra octets.
        extra: usize,
    },
}

/// Decodes exactly one fixed-size value from `buf`, rejecting leftovers.
fn decode_exact<T>(
    buf: &[u8],
    decode_from: impl FnOnce(&mut XdrCursor<'_>) -> Result<T, XdrError>,
) -> Result<T, CcpError> {
    let mut cur = XdrCursor::new(buf);
    let value = decode_from(&mut cur)?;
    match cur.remaining() {
        0 => Ok(value),
        extra => Err(CcpError::TrailingBytes {
            offset: cur.position(),
            extra,
        }),
    }
}

/// `config_rdma_req`: the client's connection requirements, the argument of `CONF_RDMA`
/// (RFC 5666 §6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ConfigRdmaReq {
    /// Largest RPC call, in octets, the client would like to send inline in one RDMA Send.
    pub maxcall_sendsize: u32,
    /// Largest inline RPC reply, in octets, the client will accept from the server.
    pub maxreply_sendsize: u32,
    /// Most RDMA Reads the client lets be active against it at once (its IRD).
    pub maxrdmaread: u32,
}

/// `config_rdma_reply`: the server's connection limits, the result of `CONF_RDMA`
/// (RFC 5666 §6.2).
///
/// Note the middle field: the reply carries `align`, not a reply size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ConfigRdmaReply {
    /// Largest inline RPC call, in octets, the server accepts; may be smaller or larger
    /// than requested, and the client must not send a larger inline call.
    pub maxcall_sendsize: u32,
    /// The server's receive buffer alignment, recommended for padding opaque data.
    pub align: u32,
    /// Most RDMA Reads the server lets be active against it at once (its IRD).
    pub maxrdmaread: u32,
}

/// The codec of one CCP structure. Both are three XDR unsigned integers and differ only
/// in what the middle word means, so one definition serves both (`$a, $b, $c` are the
/// fields in wire order; `$follows` names the RPC header the structure comes after).
macro_rules! three_word_codec {
    ($ty:ident { $a:ident, $b:ident, $c:ident }, $follows:literal, $what:literal) => {
        impl $ty {
            /// Encoded size: three XDR unsigned integers.
            pub const ENCODED_LEN: usize = 12;

            /// Encoded size of this value (always [`Self::ENCODED_LEN`]).
            #[inline]
            pub const fn encoded_len(&self) -> usize {
                Self::ENCODED_LEN
            }

            /// Encodes into the start of `out`, returning the number of octets written.
            ///
            /// # Errors
            /// [`BufferTooSmall`] if `out` is shorter than [`Self::ENCODED_LEN`]; nothing
            /// is written then.
            pub fn encode(&self, out: &mut [u8]) -> Result<usize, BufferTooSmall> {
                if out.len() < Self::ENCODED_LEN {
                    return Err(BufferTooSmall {
                        needed: Self::ENCODED_LEN,
                        available: out.len(),
                    });
                }
                let mut enc = XdrEncoder::new(out);
                self.encode_to(&mut enc)?;
                Ok(enc.finish())
            }

            #[doc = concat!("Appends the encoding to an encoder that is building a larger message (e.g. after ", $follows, ").")]
            ///
            /// # Errors
            /// [`BufferTooSmall`] if the encoder's buffer runs out; a prefix may have been
            /// written.
            pub fn encode_to(&self, enc: &mut XdrEncoder<'_>) -> Result<(), BufferTooSmall> {
                enc.u32(self.$a)?;
                enc.u32(self.$b)?;
                enc.u32(self.$c)
            }

            #[doc = concat!("Decodes from a cursor positioned at the ", $what, ", leaving it after them.")]
            ///
            /// # Errors
            /// [`XdrError::Truncated`] if fewer than 12 octets remain; the cursor is then
            /// left where it was.
            pub fn decode_from(cur: &mut XdrCursor<'_>) -> Result<Self, XdrError> {
                // Work on a copy so that a truncated input does not leave `cur`
                // mid-structure.
                let mut c = cur.clone();
                let value = $ty {
                    $a: c.u32()?,
                    $b: c.u32()?,
                    $c: c.u32()?,
                };
                *cur = c;
                Ok(value)
            }

            #[doc = concat!("Decodes ", $what, " that occupy all of `buf`.")]
            ///
            /// # Errors
            /// [`CcpError::Xdr`] if `buf` is too short, [`CcpError::TrailingBytes`] if too
            /// long.
            pub fn decode(buf: &[u8]) -> Result<Self, CcpError> {
                decode_exact(buf, Self::decode_from)
            }
        }
    };
}

three_word_codec!(
    ConfigRdmaReq {
        maxcall_sendsize,
        maxreply_sendsize,
        maxrdmaread
    },
    "an RPC call header",
    "arguments"
);

three_word_codec!(
    ConfigRdmaReply {
        maxcall_sendsize,
        align,
        maxrdmaread
    },
    "an RPC accepted-reply header",
    "results"
);
