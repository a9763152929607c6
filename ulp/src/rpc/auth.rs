//! Authentication data carried in RPC headers (RFC 5531 §8.2 `opaque_auth`, Appendix A
//! AUTH_SYS). AUTH_NONE and AUTH_SYS are decoded into typed values; every other flavor is
//! carried as its raw, borrowed body.

use core::fmt;

use rpcrdma::wire::xdr::{opaque_len, BufferTooSmall, XdrCursor, XdrEncoder, XdrError};

use super::error::{rebase, xdr_offset, AuthField, AuthSysError, EncodeError, Fault, RpcErrorKind};
use super::{MAX_AUTH_BYTES, MAX_GIDS, MAX_MACHINE_NAME};

/// An authentication flavor number (RFC 5531 §8.2 `auth_flavor`).
///
/// A newtype rather than an enum because flavors are an open registry: a header with a
/// flavor this codec does not know is still well-formed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct AuthFlavor(pub u32);

impl AuthFlavor {
    /// AUTH_NONE (RFC 5531 §10.1).
    pub const NONE: AuthFlavor = AuthFlavor(0);
    /// AUTH_SYS, formerly AUTH_UNIX (RFC 5531 §10.2, Appendix A).
    pub const SYS: AuthFlavor = AuthFlavor(1);
    /// AUTH_SHORT (RFC 5531 Appendix A).
    pub const SHORT: AuthFlavor = AuthFlavor(2);
    /// AUTH_DH (RFC 5531 §8.2).
    pub const DH: AuthFlavor = AuthFlavor(3);
    /// RPCSEC_GSS (RFC 2203, RFC 5531 §8.2).
    pub const RPCSEC_GSS: AuthFlavor = AuthFlavor(6);

    /// The RFC name of a well-known flavor.
    pub const fn name(self) -> Option<&'static str> {
        match self.0 {
            0 => Some("AUTH_NONE"),
            1 => Some("AUTH_SYS"),
            2 => Some("AUTH_SHORT"),
            3 => Some("AUTH_DH"),
            6 => Some("RPCSEC_GSS"),
            _ => None,
        }
    }
}

impl fmt::Display for AuthFlavor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "flavor {}", self.0),
        }
    }
}

/// The supplementary group list of an AUTH_SYS credential (`unsigned int gids<16>`).
///
/// Held inline so that decoding a credential never allocates.
#[derive(Clone, Copy, Eq, Default)]
pub struct Gids {
    len: u8,
    ids: [u32; MAX_GIDS],
}

impl Gids {
    /// An empty group list.
    pub const EMPTY: Gids = Gids {
        len: 0,
        ids: [0; MAX_GIDS],
    };

    /// Copies `ids`; fails if there are more than 16.
    pub fn new(ids: &[u32]) -> Result<Gids, AuthSysError> {
        if ids.len() > MAX_GIDS {
            return Err(AuthSysError::TooManyGids {
                count: u32::try_from(ids.len()).unwrap_or(u32::MAX),
            });
        }
        let mut g = Gids::EMPTY;
        g.ids[..ids.len()].copy_from_slice(ids);
        g.len = ids.len() as u8;
        Ok(g)
    }

    /// The groups, in wire order.
    pub fn as_slice(&self) -> &[u32] {
        &self.ids[..self.len as usize]
    }

    /// Number of groups.
    pub const fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the list is empty.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl PartialEq for Gids {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl core::hash::Hash for Gids {
    fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
        self.as_slice().hash(state);
    }
}

impl fmt::Debug for Gids {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for Gids {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.as_slice())
    }
}

/// An AUTH_SYS credential body (RFC 5531 Appendix A, `authsys_parms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct AuthSys<'a> {
    /// Arbitrary id the caller's machine may generate.
    pub stamp: u32,
    /// The caller's host name, at most 255 octets (conventionally ASCII; not checked).
    #[cfg_attr(feature = "serde", serde(serialize_with = "text_or_bytes"))]
    pub machinename: &'a [u8],
    /// Effective user id.
    pub uid: u32,
    /// Effective group id.
    pub gid: u32,
    /// Supplementary groups.
    pub gids: Gids,
}

/// Prints names as text when they are UTF-8, as they nearly always are, without allocating.
#[cfg(feature = "serde")]
fn text_or_bytes<S: serde::Serializer>(b: &&[u8], s: S) -> Result<S::Ok, S::Error> {
    match core::str::from_utf8(b) {
        Ok(t) => s.serialize_str(t),
        Err(_) => s.serialize_bytes(b),
    }
}

impl<'a> AuthSys<'a> {
    /// Length of the encoded `authsys_parms`, i.e. of the `opaque_auth` body.
    pub const fn body_len(&self) -> usize {
        4 + opaque_len(self.machinename.len()) + 4 + 4 + 4 + 4 * self.gids.len()
    }

    /// Decodes `body`, which must hold exactly one `authsys_parms`; `base` is the body's
    /// offset in the message, used only to report offsets.
    fn decode_body(body: &'a [u8], base: usize) -> Result<Self, (usize, AuthSysError)> {
        let xdr = |e: XdrError| {
            let e = rebase(e, base);
            (xdr_offset(&e), AuthSysError::Xdr(e))
        };
        let mut c = XdrCursor::new(body);
        let stamp = c.u32().map_err(xdr)?;
        let machinename = c.string(MAX_MACHINE_NAME as u32).map_err(|e| match e {
            XdrError::TooLong { offset, len, .. } => {
                (base + offset, AuthSysError::MachineNameTooLong { len })
            }
            e => xdr(e),
        })?;
        let uid = c.u32().map_err(xdr)?;
        let gid = c.u32().map_err(xdr)?;
        let count = c.count(MAX_GIDS as u32).map_err(|e| match e {
            XdrError::TooLong { offset, len, .. } => {
                (base + offset, AuthSysError::TooManyGids { count: len })
            }
            e => xdr(e),
        })?;
        let mut gids = Gids::EMPTY;
        for slot in gids.ids.iter_mut().take(count as usize) {
            *slot = c.u32().map_err(xdr)?;
        }
        gids.len = count as u8;
        if c.remaining() != 0 {
            return Err((
                base + c.position(),
                AuthSysError::TrailingBytes {
                    extra: c.remaining(),
                },
            ));
        }
        Ok(AuthSys {
            stamp,
            machinename,
            uid,
            gid,
            gids,
        })
    }

    fn encode_body(&self, e: &mut XdrEncoder<'_>) -> Result<(), BufferTooSmall> {
        e.u32(self.stamp)?;
        e.string(self.machinename)?;
        e.u32(self.uid)?;
        e.u32(self.gid)?;
        e.u32(self.gids.len() as u32)?;
        for &g in self.gids.as_slice() {
            e.u32(g)?;
        }
        Ok(())
    }
}

/// A credential or verifier (RFC 5531 §8.2 `opaque_auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum OpaqueAuth<'a> {
    /// AUTH_NONE with the empty body RFC 5531 §10.1 prescribes.
    None,
    /// AUTH_SYS with its decoded body.
    Sys(AuthSys<'a>),
    /// Any other flavor (AUTH_SHORT, AUTH_DH, RPCSEC_GSS, unregistered), body uninterpreted.
    Raw {
        /// The flavor; never AUTH_NONE or AUTH_SYS.
        flavor: AuthFlavor,
        /// The body, at most 400 octets, borrowed from the message.
        body: &'a [u8],
    },
}

impl<'a> OpaqueAuth<'a> {
    /// The flavor number on the wire.
    pub const fn flavor(&self) -> AuthFlavor {
        match self {
            OpaqueAuth::None => AuthFlavor::NONE,
            OpaqueAuth::Sys(_) => AuthFlavor::SYS,
            OpaqueAuth::Raw { flavor, .. } => *flavor,
        }
    }

    /// Octets this `opaque_auth` occupies on the wire: flavor, length, body, padding.
    pub const fn encoded_len(&self) -> usize {
        4 + match self {
            OpaqueAuth::None => opaque_len(0),
            OpaqueAuth::Sys(s) => opaque_len(s.body_len()),
            OpaqueAuth::Raw { body, .. } => opaque_len(body.len()),
        }
    }

    // Inlined into the call header's decode, with the rest out of line: the common case
    // is a compare and a skip, cheaper than the register saves of a call to the whole.
    #[inline(always)]
    pub(crate) fn decode(c: &mut XdrCursor<'a>, field: AuthField) -> Result<Self, Fault> {
        // AUTH_NONE with an empty body, nearly every call's verifier and most calls'
        // credential: eight zero octets, taken in one look.
        if c.rest().get(..8) == Some(&[0u8; 8][..]) {
            c.skip(8)?;
            return Ok(OpaqueAuth::None);
        }
        Self::decode_other(c, field)
    }

    /// [`decode`](Self::decode) of anything but an empty AUTH_NONE.
    #[inline(never)]
    fn decode_other(c: &mut XdrCursor<'a>, field: AuthField) -> Result<Self, Fault> {
        let flavor = c.u32()?;
        let len_at = c.position();
        let body = c.opaque(MAX_AUTH_BYTES as u32).map_err(|e| match e {
            XdrError::TooLong { offset, len, .. } => Fault {
                offset,
                kind: RpcErrorKind::AuthBodyTooLong { field, len },
            },
            e => Fault::from(e),
        })?;
        match AuthFlavor(flavor) {
            AuthFlavor::NONE if body.is_empty() => Ok(OpaqueAuth::None),
            AuthFlavor::NONE => Err(Fault {
                offset: len_at,
                kind: RpcErrorKind::AuthNoneBody {
                    field,
                    len: body.len() as u32,
                },
            }),
            AuthFlavor::SYS => AuthSys::decode_body(body, len_at + 4)
                .map(OpaqueAuth::Sys)
                .map_err(|(offset, reason)| Fault {
                    offset,
                    kind: RpcErrorKind::BadAuthSys { field, reason },
                }),
            flavor => Ok(OpaqueAuth::Raw { flavor, body }),
        }
    }

    /// Rejects values that would encode to something this codec cannot decode back.
    pub(crate) fn check(&self, field: AuthField) -> Result<(), EncodeError> {
        match self {
            OpaqueAuth::None => Ok(()),
            OpaqueAuth::Sys(s) if s.machinename.len() > MAX_MACHINE_NAME => {
                Err(EncodeError::MachineNameTooLong {
                    field,
                    len: s.machinename.len(),
                })
            }
            OpaqueAuth::Sys(_) => Ok(()),
            OpaqueAuth::Raw { flavor, .. }
                if *flavor == AuthFlavor::NONE || *flavor == AuthFlavor::SYS =>
            {
                Err(EncodeError::TypedFlavorAsRaw {
                    field,
                    flavor: flavor.0,
                })
            }
            OpaqueAuth::Raw { body, .. } if body.len() > MAX_AUTH_BYTES => {
                Err(EncodeError::AuthBodyTooLong {
                    field,
                    len: body.len(),
                })
            }
            OpaqueAuth::Raw { .. } => Ok(()),
        }
    }

    /// Writes the value; callers have run [`check`](Self::check) and sized the buffer.
    pub(crate) fn encode(&self, e: &mut XdrEncoder<'_>) -> Result<(), BufferTooSmall> {
        e.u32(self.flavor().0)?;
        match self {
            OpaqueAuth::None => e.u32(0),
            OpaqueAuth::Sys(s) => {
                // AUTH_SYS bodies are whole XDR units, so no padding follows.
                e.u32(s.body_len() as u32)?;
                s.encode_body(e)
            }
            OpaqueAuth::Raw { body, .. } => e.opaque(body),
        }
    }
}
