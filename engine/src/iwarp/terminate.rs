//! RDMAP Terminate messages (RFC 5040 §4.8, §5.10) and the error codes they carry
//! (RFC 5040 §7, RFC 5041 §7 via RFC 5040's table, RFC 5044 §8, RFC 6581 §8).
//!
//! The Terminate message is the payload of an untagged segment on QN 2 (opcode 7):
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! | Layer | EType |  Error Code   |M|D|R|        Reserved         |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  DDP Segment Length (if D)    |  Terminated DDP Header (if D) |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+         (14 or 18 octets)     |
//! |  ...  then Terminated RDMA Header (if R, up to 28 octets)     |
//! ```
//!
//! Header control bits: M = the DDP Segment Length is valid, D = the terminated DDP
//! header is included, R = the terminated RDMA header is included. The segment length
//! field sits in front of the DDP header, exactly where the MPA length sat in the
//! offending FPDU; Linux siw copies it from there, and Wireshark reads it only when D is
//! set. The terminated DDP header's own T bit gives its length.
//!
//! R is meant for an RDMA Read Request header (28 octets), but Linux siw also sets R when
//! it copies only a Send header; so R takes whatever follows, up to 28 octets.
//!
//! Linux siw declares the control word with little-endian bitfields, so on the wire its
//! layer sits in the LOW nibble of the first octet (etype in the high one) and M, D, R are
//! bits 0, 1, 2 of the third octet: its "DDP / untagged / no buffer, M and D" reads
//! `21 02 03 00`, which the RFC way is an unassigned LLP code with no header bits.
//! [`Terminate::decode`] accepts both ([`TerminateLayout`] says which it found); we always
//! send the RFC layout, which Wireshark decodes. Kernel siw (6.1, lab) reads ours with its
//! own layout (our `12 02 C0 00` logs as "got TERMINATE. layer 2, type 1, code 2", its
//! own `21 02 03 00` as "layer 1, type 2, code 2"), and either way only logs it, resets
//! its receive path, closes the connection and moves the queue pair to error: it sends
//! nothing back and acts on no code, so the layout we send changes nothing for it.

use core::fmt;

use super::ddp::{DdpControl, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use super::octets::{be16, put16};
use super::rdmap::{Placement, SegmentHeader};
use crate::wire::xdr::BufferTooSmall;

/// Octets of the Terminate Control word (layer, type, code, header control, reserved).
pub const TERMINATE_CONTROL_LEN: usize = 4;

/// Octets of the DDP Segment Length field.
pub const SEGMENT_LENGTH_LEN: usize = 2;

/// Largest terminated RDMA header: an RDMA Read Request body (RFC 5040 §4.8).
pub const MAX_TERMINATED_RDMA_HEADER_LEN: usize = 28;

/// Largest Terminate message body.
pub const MAX_TERMINATE_LEN: usize = TERMINATE_CONTROL_LEN
    + SEGMENT_LENGTH_LEN
    + UNTAGGED_HEADER_LEN
    + MAX_TERMINATED_RDMA_HEADER_LEN;

const HDRCT_M: u8 = 0x80;
const HDRCT_D: u8 = 0x40;
const HDRCT_R: u8 = 0x20;
const LINUX_HDRCT_M: u8 = 0x01;
const LINUX_HDRCT_D: u8 = 0x02;
const LINUX_HDRCT_R: u8 = 0x04;

/// How a Terminate's control word is laid out on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum TerminateLayout {
    /// RFC 5040 §5.3: layer in the high nibble of the first octet, M/D/R in the top bits
    /// of the third.
    Rfc5040,
    /// Linux siw (little-endian bitfields): layer in the low nibble, M/D/R in bits 0..2.
    LinuxSiw,
}

impl TerminateLayout {
    /// The first control octet for `layer` and `etype`.
    const fn pack(self, layer: u8, etype: u8) -> u8 {
        match self {
            TerminateLayout::Rfc5040 => (layer << 4) | (etype & 0x0F),
            TerminateLayout::LinuxSiw => (etype << 4) | (layer & 0x0F),
        }
    }

    /// (layer, etype) from the first control octet.
    const fn unpack(self, b: u8) -> (u8, u8) {
        match self {
            TerminateLayout::Rfc5040 => (b >> 4, b & 0x0F),
            TerminateLayout::LinuxSiw => (b & 0x0F, b >> 4),
        }
    }

    /// The M, D and R bits of the third control octet.
    const fn hdrct_bits(self) -> (u8, u8, u8) {
        match self {
            TerminateLayout::Rfc5040 => (HDRCT_M, HDRCT_D, HDRCT_R),
            TerminateLayout::LinuxSiw => (LINUX_HDRCT_M, LINUX_HDRCT_D, LINUX_HDRCT_R),
        }
    }
}

/// The protocol layer that detected the error (high nibble of the first octet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Layer {
    /// 0: RDMAP.
    Rdmap = 0,
    /// 1: DDP.
    Ddp = 1,
    /// 2: the lower layer protocol, MPA.
    Llp = 2,
}

/// RDMAP Remote Protection errors (layer 0, type 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum RdmapProtectionError {
    /// 0x00 Invalid STag.
    InvalidStag,
    /// 0x01 Base or bounds violation.
    BaseOrBounds,
    /// 0x02 Access rights violation.
    AccessRights,
    /// 0x03 STag not associated with the RDMAP stream (its protection domain differs).
    StagNotAssociated,
    /// 0x04 TO wrap.
    ToWrap,
    /// 0x09 STag cannot be invalidated.
    CannotInvalidate,
    /// 0xFF unspecified.
    Unspecified,
}

/// RDMAP Remote Operation errors (layer 0, type 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum RdmapOperationError {
    /// 0x05 Invalid RDMAP version.
    InvalidRdmapVersion,
    /// 0x06 Unexpected opcode.
    UnexpectedOpcode,
    /// 0x07 Catastrophic error, localized to the RDMAP stream.
    CatastrophicStream,
    /// 0x08 Catastrophic error, global.
    CatastrophicGlobal,
    /// 0x09 STag cannot be invalidated.
    CannotInvalidate,
    /// 0xFF unspecified.
    Unspecified,
}

/// DDP Tagged Buffer errors (layer 1, type 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum DdpTaggedError {
    /// 0x00 Invalid STag.
    InvalidStag,
    /// 0x01 Base or bounds violation.
    BaseOrBounds,
    /// 0x02 STag not associated with the DDP stream.
    StagNotAssociated,
    /// 0x03 TO wrap.
    ToWrap,
    /// 0x04 Invalid DDP version.
    InvalidDdpVersion,
}

/// DDP Untagged Buffer errors (layer 1, type 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum DdpUntaggedError {
    /// 0x01 Invalid QN.
    InvalidQn,
    /// 0x02 Invalid MSN: no buffer available.
    NoBufferAvailable,
    /// 0x03 Invalid MSN: MSN range is not valid.
    MsnRange,
    /// 0x04 Invalid MO.
    InvalidMo,
    /// 0x05 DDP message too long for the available buffer.
    MessageTooLong,
    /// 0x06 Invalid DDP version.
    InvalidDdpVersion,
}

/// MPA errors (layer 2, type 0; RFC 5044 §8, codes 5..7 from RFC 6581 §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum MpaLlpError {
    /// 0x01 TCP connection closed, terminated or lost.
    ConnectionLost,
    /// 0x02 MPA CRC error.
    CrcError,
    /// 0x03 Marker and ULPDU length mismatch: also how an invalid ULPDU length is
    /// reported, since without markers that is the only way the framing can be wrong.
    MarkerOrLengthMismatch,
    /// 0x04 Invalid MPA Request or Reply frame.
    InvalidRequestOrReply,
    /// 0x05 Local catastrophic error (RFC 6581).
    LocalCatastrophic,
    /// 0x06 Insufficient IRD resources (RFC 6581).
    InsufficientIrd,
    /// 0x07 No matching RTR (RFC 6581).
    NoMatchingRtr,
}

/// Layer, error type and error code of a Terminate message, typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum TerminateCode {
    /// RDMAP Local Catastrophic error (layer 0, type 0, code 0).
    RdmapCatastrophic,
    /// RDMAP Remote Protection error (layer 0, type 1).
    RdmapProtection(RdmapProtectionError),
    /// RDMAP Remote Operation error (layer 0, type 2).
    RdmapOperation(RdmapOperationError),
    /// DDP Local Catastrophic error (layer 1, type 0, code 0).
    DdpCatastrophic,
    /// DDP Tagged Buffer error (layer 1, type 1).
    DdpTagged(DdpTaggedError),
    /// DDP Untagged Buffer error (layer 1, type 2).
    DdpUntagged(DdpUntaggedError),
    /// MPA error (layer 2, type 0).
    Mpa(MpaLlpError),
    /// A combination none of the RFCs define. Kept so that a peer's Terminate still
    /// decodes; the nibbles are masked to four bits when encoded.
    Unknown {
        /// Layer nibble.
        layer: u8,
        /// Error type nibble.
        etype: u8,
        /// Error code.
        code: u8,
    },
}

impl TerminateCode {
    /// The (layer, error type, error code) triple on the wire.
    pub const fn to_parts(self) -> (u8, u8, u8) {
        use DdpTaggedError as T;
        use DdpUntaggedError as U;
        use MpaLlpError as M;
        use RdmapOperationError as O;
        use RdmapProtectionError as P;
        match self {
            TerminateCode::RdmapCatastrophic => (0, 0, 0x00),
            TerminateCode::RdmapProtection(p) => (
                0,
                1,
                match p {
                    P::InvalidStag => 0x00,
                    P::BaseOrBounds => 0x01,
                    P::AccessRights => 0x02,
                    P::StagNotAssociated => 0x03,
                    P::ToWrap => 0x04,
                    P::CannotInvalidate => 0x09,
                    P::Unspecified => 0xFF,
                },
            ),
            TerminateCode::RdmapOperation(o) => (
                0,
                2,
                match o {
                    O::InvalidRdmapVersion => 0x05,
                    O::UnexpectedOpcode => 0x06,
                    O::CatastrophicStream => 0x07,
                    O::CatastrophicGlobal => 0x08,
                    O::CannotInvalidate => 0x09,
                    O::Unspecified => 0xFF,
                },
            ),
            TerminateCode::DdpCatastrophic => (1, 0, 0x00),
            TerminateCode::DdpTagged(t) => (
                1,
                1,
                match t {
                    T::InvalidStag => 0x00,
                    T::BaseOrBounds => 0x01,
                    T::StagNotAssociated => 0x02,
                    T::ToWrap => 0x03,
                    T::InvalidDdpVersion => 0x04,
                },
            ),
            TerminateCode::DdpUntagged(u) => (
                1,
                2,
                match u {
                    U::InvalidQn => 0x01,
                    U::NoBufferAvailable => 0x02,
                    U::MsnRange => 0x03,
                    U::InvalidMo => 0x04,
                    U::MessageTooLong => 0x05,
                    U::InvalidDdpVersion => 0x06,
                },
            ),
            TerminateCode::Mpa(m) => (
                2,
                0,
                match m {
                    M::ConnectionLost => 0x01,
                    M::CrcError => 0x02,
                    M::MarkerOrLengthMismatch => 0x03,
                    M::InvalidRequestOrReply => 0x04,
                    M::LocalCatastrophic => 0x05,
                    M::InsufficientIrd => 0x06,
                    M::NoMatchingRtr => 0x07,
                },
            ),
            TerminateCode::Unknown { layer, etype, code } => (layer & 0x0F, etype & 0x0F, code),
        }
    }

    /// Types a (layer, error type, error code) triple; unassigned ones become
    /// [`TerminateCode::Unknown`].
    pub const fn from_parts(layer: u8, etype: u8, code: u8) -> Self {
        use DdpTaggedError as T;
        use DdpUntaggedError as U;
        use MpaLlpError as M;
        use RdmapOperationError as O;
        use RdmapProtectionError as P;
        let known = match (layer, etype, code) {
            (0, 0, 0x00) => Some(TerminateCode::RdmapCatastrophic),
            (0, 1, 0x00) => Some(TerminateCode::RdmapProtection(P::InvalidStag)),
            (0, 1, 0x01) => Some(TerminateCode::RdmapProtection(P::BaseOrBounds)),
            (0, 1, 0x02) => Some(TerminateCode::RdmapProtection(P::AccessRights)),
            (0, 1, 0x03) => Some(TerminateCode::RdmapProtection(P::StagNotAssociated)),
            (0, 1, 0x04) => Some(TerminateCode::RdmapProtection(P::ToWrap)),
            (0, 1, 0x09) => Some(TerminateCode::RdmapProtection(P::CannotInvalidate)),
            (0, 1, 0xFF) => Some(TerminateCode::RdmapProtection(P::Unspecified)),
            (0, 2, 0x05) => Some(TerminateCode::RdmapOperation(O::InvalidRdmapVersion)),
            (0, 2, 0x06) => Some(TerminateCode::RdmapOperation(O::UnexpectedOpcode)),
            (0, 2, 0x07) => Some(TerminateCode::RdmapOperation(O::CatastrophicStream)),
            (0, 2, 0x08) => Some(TerminateCode::RdmapOperation(O::CatastrophicGlobal)),
            (0, 2, 0x09) => Some(TerminateCode::RdmapOperation(O::CannotInvalidate)),
            (0, 2, 0xFF) => Some(TerminateCode::RdmapOperation(O::Unspecified)),
            (1, 0, 0x00) => Some(TerminateCode::DdpCatastrophic),
            (1, 1, 0x00) => Some(TerminateCode::DdpTagged(T::InvalidStag)),
            (1, 1, 0x01) => Some(TerminateCode::DdpTagged(T::BaseOrBounds)),
            (1, 1, 0x02) => Some(TerminateCode::DdpTagged(T::StagNotAssociated)),
            (1, 1, 0x03) => Some(TerminateCode::DdpTagged(T::ToWrap)),
            (1, 1, 0x04) => Some(TerminateCode::DdpTagged(T::InvalidDdpVersion)),
            (1, 2, 0x01) => Some(TerminateCode::DdpUntagged(U::InvalidQn)),
            (1, 2, 0x02) => Some(TerminateCode::DdpUntagged(U::NoBufferAvailable)),
            (1, 2, 0x03) => Some(TerminateCode::DdpUntagged(U::MsnRange)),
            (1, 2, 0x04) => Some(TerminateCode::DdpUntagged(U::InvalidMo)),
            (1, 2, 0x05) => Some(TerminateCode::DdpUntagged(U::MessageTooLong)),
            (1, 2, 0x06) => Some(TerminateCode::DdpUntagged(U::InvalidDdpVersion)),
            (2, 0, 0x01) => Some(TerminateCode::Mpa(M::ConnectionLost)),
            (2, 0, 0x02) => Some(TerminateCode::Mpa(M::CrcError)),
            (2, 0, 0x03) => Some(TerminateCode::Mpa(M::MarkerOrLengthMismatch)),
            (2, 0, 0x04) => Some(TerminateCode::Mpa(M::InvalidRequestOrReply)),
            (2, 0, 0x05) => Some(TerminateCode::Mpa(M::LocalCatastrophic)),
            (2, 0, 0x06) => Some(TerminateCode::Mpa(M::InsufficientIrd)),
            (2, 0, 0x07) => Some(TerminateCode::Mpa(M::NoMatchingRtr)),
            _ => None,
        };
        match known {
            Some(c) => c,
            None => TerminateCode::Unknown { layer, etype, code },
        }
    }

    /// The layer, when it is one of the three defined.
    pub const fn layer(self) -> Option<Layer> {
        match self.to_parts().0 {
            0 => Some(Layer::Rdmap),
            1 => Some(Layer::Ddp),
            2 => Some(Layer::Llp),
            _ => None,
        }
    }
}

impl TerminateCode {
    /// What the layer and error type mean, in words.
    pub(crate) const fn kind_text(self) -> &'static str {
        match self {
            TerminateCode::RdmapCatastrophic => "RDMAP local catastrophic error",
            TerminateCode::RdmapProtection(_) => "RDMAP remote protection error",
            TerminateCode::RdmapOperation(_) => "RDMAP remote operation error",
            TerminateCode::DdpCatastrophic => "DDP local catastrophic error",
            TerminateCode::DdpTagged(_) => "DDP tagged buffer error",
            TerminateCode::DdpUntagged(_) => "DDP untagged buffer error",
            TerminateCode::Mpa(_) => "MPA error",
            TerminateCode::Unknown { .. } => "unassigned Terminate error",
        }
    }

    /// What the error code means, in words (empty for the catastrophic errors, whose
    /// only code is 0).
    pub(crate) const fn code_text(self) -> &'static str {
        use DdpTaggedError as T;
        use DdpUntaggedError as U;
        use MpaLlpError as M;
        use RdmapOperationError as O;
        use RdmapProtectionError as P;
        match self {
            TerminateCode::RdmapCatastrophic
            | TerminateCode::DdpCatastrophic
            | TerminateCode::Unknown { .. } => "",
            TerminateCode::RdmapProtection(p) => match p {
                P::InvalidStag => "invalid STag",
                P::BaseOrBounds => "base or bounds violation",
                P::AccessRights => "access rights violation",
                P::StagNotAssociated => "STag not associated with the RDMAP stream",
                P::ToWrap => "TO wrap",
                P::CannotInvalidate => "STag cannot be invalidated",
                P::Unspecified => "unspecified",
            },
            TerminateCode::RdmapOperation(o) => match o {
                O::InvalidRdmapVersion => "invalid RDMAP version",
                O::UnexpectedOpcode => "unexpected opcode",
                O::CatastrophicStream => "catastrophic error, localized to the stream",
                O::CatastrophicGlobal => "catastrophic error, global",
                O::CannotInvalidate => "STag cannot be invalidated",
                O::Unspecified => "unspecified",
            },
            TerminateCode::DdpTagged(t) => match t {
                T::InvalidStag => "invalid STag",
                T::BaseOrBounds => "base or bounds violation",
                T::StagNotAssociated => "STag not associated with the DDP stream",
                T::ToWrap => "TO wrap",
                T::InvalidDdpVersion => "invalid DDP version",
            },
            TerminateCode::DdpUntagged(u) => match u {
                U::InvalidQn => "invalid QN",
                U::NoBufferAvailable => "no buffer available",
                U::MsnRange => "MSN out of range",
                U::InvalidMo => "invalid MO",
                U::MessageTooLong => "message too long for the buffer",
                U::InvalidDdpVersion => "invalid DDP version",
            },
            TerminateCode::Mpa(m) => match m {
                M::ConnectionLost => "TCP connection closed, terminated or lost",
                M::CrcError => "CRC error",
                M::MarkerOrLengthMismatch => "marker or ULPDU length mismatch",
                M::InvalidRequestOrReply => "invalid MPA Request or Reply",
                M::LocalCatastrophic => "local catastrophic error",
                M::InsufficientIrd => "insufficient IRD resources",
                M::NoMatchingRtr => "no matching RTR",
            },
        }
    }
}

impl fmt::Display for TerminateCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind_text())?;
        match (self, self.code_text()) {
            (TerminateCode::Unknown { layer, etype, code }, _) => {
                write!(f, " (layer {layer}, type {etype}, code {code:#04x})")
            }
            (_, "") => Ok(()),
            (_, text) => write!(f, ": {text}"),
        }
    }
}

/// A Terminate message body, borrowing the copied headers from the buffer it was decoded
/// from (or will be encoded from).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terminate<'a> {
    /// What went wrong.
    pub code: TerminateCode,
    /// M bit and the DDP Segment Length: `Some` when the length is valid. Needs
    /// `ddp_header`, since the field only exists in front of it.
    pub segment_length: Option<u16>,
    /// D bit: the terminated DDP header (14 octets if its T bit is set, else 18).
    pub ddp_header: Option<&'a [u8]>,
    /// R bit: the terminated RDMA header (at most 28 octets).
    pub rdma_header: Option<&'a [u8]>,
    /// How the control word is (or was) laid out; we send [`TerminateLayout::Rfc5040`].
    pub layout: TerminateLayout,
}

impl<'a> Terminate<'a> {
    /// A Terminate that copies no headers (e.g. a catastrophic error).
    pub const fn bare(code: TerminateCode) -> Self {
        Terminate {
            code,
            segment_length: None,
            ddp_header: None,
            rdma_header: None,
            layout: TerminateLayout::Rfc5040,
        }
    }

    /// Encoded length of this body.
    pub fn encoded_len(&self) -> usize {
        TERMINATE_CONTROL_LEN
            + self.ddp_header.map_or(0, |h| SEGMENT_LENGTH_LEN + h.len())
            + self.rdma_header.map_or(0, <[u8]>::len)
    }

    /// Writes the body to the front of `out`, returning its length.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, TerminateError> {
        if self.segment_length.is_some() && self.ddp_header.is_none() {
            return Err(TerminateError::SegmentLengthWithoutDdpHeader);
        }
        if let Some(h) = self.ddp_header {
            let expected = expected_ddp_header_len(h);
            if Some(h.len()) != expected {
                return Err(TerminateError::DdpHeaderLength {
                    len: h.len(),
                    expected: expected.unwrap_or(TAGGED_HEADER_LEN),
                });
            }
        }
        if let Some(r) = self.rdma_header {
            if r.len() > MAX_TERMINATED_RDMA_HEADER_LEN {
                return Err(TerminateError::RdmaHeaderTooLong { len: r.len() });
            }
        }
        let len = self.encoded_len();
        if out.len() < len {
            return Err(TerminateError::BufferTooSmall(BufferTooSmall {
                needed: len,
                available: out.len(),
            }));
        }
        let (layer, etype, code) = self.code.to_parts();
        let (bit_m, bit_d, bit_r) = self.layout.hdrct_bits();
        out[0] = self.layout.pack(layer, etype);
        out[1] = code;
        let flag = |present: bool, bit: u8| if present { bit } else { 0 };
        out[2] = flag(self.segment_length.is_some(), bit_m)
            | flag(self.ddp_header.is_some(), bit_d)
            | flag(self.rdma_header.is_some(), bit_r);
        out[3] = 0;
        let mut at = TERMINATE_CONTROL_LEN;
        if let Some(h) = self.ddp_header {
            put16(out, at, self.segment_length.unwrap_or(0));
            at += SEGMENT_LENGTH_LEN;
            out[at..at + h.len()].copy_from_slice(h);
            at += h.len();
        }
        if let Some(r) = self.rdma_header {
            out[at..at + r.len()].copy_from_slice(r);
            at += r.len();
        }
        Ok(at)
    }

    /// Decodes a Terminate message body (the whole payload of the QN 2 message).
    ///
    /// The RFC 5040 reading wins whenever it gives an assigned code and a consistent
    /// body. Otherwise, if the Linux siw reading does (see the module docs), that is
    /// taken, with [`layout`](Self::layout) saying so; failing both, the RFC reading is
    /// returned as it is (an unassigned code, or its error).
    pub fn decode(body: &'a [u8]) -> Result<Self, TerminateError> {
        let rfc = Self::decode_as(body, TerminateLayout::Rfc5040);
        if matches!(&rfc, Ok(t) if !matches!(t.code, TerminateCode::Unknown { .. })) {
            return rfc;
        }
        match Self::decode_as(body, TerminateLayout::LinuxSiw) {
            Ok(t) if !matches!(t.code, TerminateCode::Unknown { .. }) => Ok(t),
            _ => rfc,
        }
    }

    /// Decodes a Terminate message body read with one `layout`, whatever its code says.
    pub fn decode_as(body: &'a [u8], layout: TerminateLayout) -> Result<Self, TerminateError> {
        if body.len() < TERMINATE_CONTROL_LEN {
            return Err(TerminateError::Truncated {
                needed: TERMINATE_CONTROL_LEN,
                available: body.len(),
            });
        }
        let (layer, etype) = layout.unpack(body[0]);
        let code = TerminateCode::from_parts(layer, etype, body[1]);
        let hdrct = body[2];
        let (bit_m, bit_d, bit_r) = layout.hdrct_bits();
        let (m, d, r) = (hdrct & bit_m != 0, hdrct & bit_d != 0, hdrct & bit_r != 0);
        if m && !d {
            return Err(TerminateError::SegmentLengthWithoutDdpHeader);
        }
        let mut at = TERMINATE_CONTROL_LEN;
        let mut segment_length = None;
        let mut ddp_header = None;
        if d {
            // Segment length plus at least the copied DDP control octet.
            let need = at + SEGMENT_LENGTH_LEN + 1;
            if body.len() < need {
                return Err(TerminateError::Truncated {
                    needed: need,
                    available: body.len(),
                });
            }
            let seg_len = be16(body, at);
            at += SEGMENT_LENGTH_LEN;
            let hlen = DdpControl::from_octet(body[at]).header_len();
            if body.len() < at + hlen {
                return Err(TerminateError::Truncated {
                    needed: at + hlen,
                    available: body.len(),
                });
            }
            ddp_header = Some(&body[at..at + hlen]);
            at += hlen;
            if m {
                segment_length = Some(seg_len);
            }
        }
        let rest = &body[at..];
        let rdma_header = if r {
            if rest.len() > MAX_TERMINATED_RDMA_HEADER_LEN {
                return Err(TerminateError::RdmaHeaderTooLong { len: rest.len() });
            }
            Some(rest)
        } else if !rest.is_empty() {
            return Err(TerminateError::TrailingOctets { len: rest.len() });
        } else {
            None
        };
        Ok(Terminate {
            code,
            segment_length,
            ddp_header,
            rdma_header,
            layout,
        })
    }

    /// The owned summary of this Terminate: its code and what its copied DDP header
    /// says about the message it ended.
    pub fn reason(&self) -> TerminateReason {
        let segment = self
            .ddp_header
            .and_then(|h| SegmentHeader::decode(h).ok())
            .map(|(h, _)| match h.placement {
                Placement::Tagged { stag, to } => TerminatedSegment::Tagged { stag, to },
                Placement::Untagged { qn, msn, .. } => TerminatedSegment::Untagged { qn, msn },
            });
        TerminateReason {
            code: self.code,
            layout: self.layout,
            segment,
        }
    }
}

/// Which message a peer's Terminate says it stopped at, from its copied DDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum TerminatedSegment {
    /// An untagged message (Send family, Read Request).
    Untagged {
        /// Queue number.
        qn: u32,
        /// Message sequence number.
        msn: u32,
    },
    /// A tagged segment (RDMA Write, Read Response).
    Tagged {
        /// The STag it targeted.
        stag: u32,
        /// The tagged offset.
        to: u64,
    },
}

/// Why a peer terminated the stream: what its Terminate said, owned and `Copy`, so it
/// can travel in close reasons and transport errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TerminateReason {
    /// Layer, error type and code.
    pub code: TerminateCode,
    /// How the peer laid the control word out (Linux siw's is not RFC 5040's).
    pub layout: TerminateLayout,
    /// The message the peer stopped at, when it copied its DDP header.
    pub segment: Option<TerminatedSegment>,
}

impl TerminateReason {
    /// A reason with only a code (no copied header), in the RFC layout.
    pub const fn bare(code: TerminateCode) -> Self {
        TerminateReason {
            code,
            layout: TerminateLayout::Rfc5040,
            segment: None,
        }
    }
}

impl fmt::Display for TerminateReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.code.fmt(f)?;
        match self.segment {
            Some(TerminatedSegment::Untagged { qn, msn }) => {
                write!(f, " (MSN {msn}, queue {qn})")
            }
            Some(TerminatedSegment::Tagged { stag, to }) => {
                write!(f, " (STag {stag:#010x}, TO {to:#x})")
            }
            None => Ok(()),
        }
    }
}

fn expected_ddp_header_len(h: &[u8]) -> Option<usize> {
    h.first().map(|&b| DdpControl::from_octet(b).header_len())
}

/// What was wrong with a Terminate body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TerminateError {
    /// The body ended early.
    #[error("Terminate message truncated: needed {needed} octets, have {available}")]
    Truncated {
        /// Octets needed.
        needed: usize,
        /// Octets present.
        available: usize,
    },
    /// M (segment length valid) without D (DDP header included).
    #[error("Terminate has the segment-length-valid bit (M) without a DDP header (D)")]
    SegmentLengthWithoutDdpHeader,
    /// A copied DDP header whose length disagrees with its own T bit.
    #[error("terminated DDP header is {len} octets but its control octet implies {expected}")]
    DdpHeaderLength {
        /// Length given.
        len: usize,
        /// Length its control octet implies.
        expected: usize,
    },
    /// More than 28 octets of terminated RDMA header.
    #[error("terminated RDMA header is {len} octets, more than {MAX_TERMINATED_RDMA_HEADER_LEN}")]
    RdmaHeaderTooLong {
        /// Length found.
        len: usize,
    },
    /// Octets after the last part the header control bits announce.
    #[error("{len} unexpected octets after the Terminate header")]
    TrailingOctets {
        /// How many.
        len: usize,
    },
    /// (Encoding only) the output buffer is too small.
    #[error(transparent)]
    BufferTooSmall(BufferTooSmall),
}

impl From<TerminateReason> for crate::fabric::PeerAbort {
    fn from(r: TerminateReason) -> Self {
        use crate::fabric::{AbortKind, AbortSite};
        let kind = match r.code {
            TerminateCode::RdmapCatastrophic | TerminateCode::DdpCatastrophic => {
                AbortKind::Catastrophic
            }
            TerminateCode::RdmapProtection(_) | TerminateCode::DdpTagged(_) => {
                AbortKind::Protection
            }
            TerminateCode::RdmapOperation(_) | TerminateCode::DdpUntagged(_) => {
                AbortKind::Operation
            }
            TerminateCode::Mpa(_) => AbortKind::Transport,
            TerminateCode::Unknown { .. } => AbortKind::Other,
        };
        let (layer, etype, code) = r.code.to_parts();
        crate::fabric::PeerAbort {
            kind,
            site: r.segment.map(|s| match s {
                TerminatedSegment::Untagged { qn, msn } => AbortSite::Message { queue: qn, msn },
                TerminatedSegment::Tagged { stag, to } => AbortSite::Memory {
                    key: stag,
                    offset: to,
                },
            }),
            code: u32::from(layer & 0xf) << 12 | u32::from(etype & 0xf) << 8 | u32::from(code),
            source: crate::fabric::AbortSource::Iwarp,
        }
    }
}
