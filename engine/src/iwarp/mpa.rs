//! MPA Request and Reply frames (RFC 5044 §7.1) with the enhanced connection setup data
//! of RFC 6581 §7.1.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                                                               |
//! +         Key (16 octets: "MPA ID Req Frame" or                 +
//! |                          "MPA ID Rep Frame")                  |
//! +                                                               +
//! |                                                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |M|C|R|S| Res   |     Rev       |          PD_Length            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ~                Private Data (PD_Length octets, <= 512)        ~
//! ```
//!
//! M: the sender requires markers; C: the sender wants CRCs; R: (reply) connection
//! rejected; S (RFC 6581): enhanced setup, the private data starts with the IRD/ORD words:
//!
//! ```text
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |A|B|           IRD             |C|D|           ORD             |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! A: peer-to-peer mode; B, C, D: the ready-to-receive (RTR) message types the sender can
//! use (zero-length Send, RDMA Write, RDMA Read). We never set them: peer-to-peer mode is
//! off. The remaining private data belongs to the ULP (for us, the RFC 8797 message).
//!
//! Wireshark 4.0 predates RFC 6581: it shows S as `iwarp_mpa.res == 0x10`, warns that
//! Rev is not 1, and shows the IRD/ORD words as the start of the private data.

use super::octets::{be16, put16};
use super::terminate::{MpaLlpError, TerminateCode};
use crate::wire::xdr::BufferTooSmall;

/// Octets in a frame key.
pub const KEY_LEN: usize = 16;

/// Key of an MPA Request frame.
pub const REQUEST_KEY: [u8; KEY_LEN] = *b"MPA ID Req Frame";

/// Key of an MPA Reply frame.
pub const REPLY_KEY: [u8; KEY_LEN] = *b"MPA ID Rep Frame";

/// Octets before the private data: key, flags, revision, PD_Length.
pub const FRAME_HEADER_LEN: usize = 20;

/// Most private data a frame may carry (RFC 5044 §7.1, PD_Length). Linux siw accepts
/// only 256 (its `MPA_MAX_PRIVDATA`), IRD/ORD words included.
pub const MAX_PRIVATE_DATA_LEN: usize = 512;

/// Largest frame.
pub const MAX_FRAME_LEN: usize = FRAME_HEADER_LEN + MAX_PRIVATE_DATA_LEN;

/// Octets of the RFC 6581 IRD/ORD words.
pub const ENHANCED_DATA_LEN: usize = 4;

/// Largest ULP private data that fits beside the IRD/ORD words.
pub const MAX_ULP_PRIVATE_DATA_LEN: usize = MAX_PRIVATE_DATA_LEN - ENHANCED_DATA_LEN;

/// Largest IRD or ORD value (14 bits).
pub const MAX_IRD_ORD: u16 = 0x3FFF;

const FLAG_M: u8 = 0x80;
const FLAG_C: u8 = 0x40;
const FLAG_R: u8 = 0x20;
const FLAG_S: u8 = 0x10;
const MASK_RES: u8 = 0x0F;

/// Request or Reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum FrameKind {
    /// Sent by the initiator (active side).
    Request,
    /// Sent by the responder (passive side).
    Reply,
}

impl FrameKind {
    /// The frame key.
    #[inline]
    pub const fn key(self) -> &'static [u8; KEY_LEN] {
        match self {
            FrameKind::Request => &REQUEST_KEY,
            FrameKind::Reply => &REPLY_KEY,
        }
    }
}

/// MPA revisions we speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Revision {
    /// RFC 5044.
    V1 = 1,
    /// RFC 6581 (enhanced connection setup).
    V2 = 2,
}

impl Revision {
    /// The Rev field value.
    #[inline]
    pub const fn number(self) -> u8 {
        self as u8
    }

    /// The revision a Rev field names, if we speak it.
    #[inline]
    pub const fn from_number(n: u8) -> Option<Self> {
        match n {
            1 => Some(Revision::V1),
            2 => Some(Revision::V2),
            _ => None,
        }
    }
}

/// The fixed 20-octet part of a frame, as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct FrameHeader {
    /// Which key the frame carries.
    pub kind: FrameKind,
    /// M flag.
    pub markers: bool,
    /// C flag.
    pub crc: bool,
    /// R flag.
    pub reject: bool,
    /// S flag (RFC 6581 enhanced setup).
    pub enhanced: bool,
    /// The four reserved bits (zero when we send; ignored on receipt).
    pub reserved: u8,
    /// Rev field, raw: checked by [`decode_frame`], not here.
    pub revision: u8,
    /// PD_Length.
    pub private_data_len: u16,
}

impl FrameHeader {
    /// Writes the 20 octets to the front of `out`.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, MpaError> {
        if out.len() < FRAME_HEADER_LEN {
            return Err(MpaError::BufferTooSmall(BufferTooSmall {
                needed: FRAME_HEADER_LEN,
                available: out.len(),
            }));
        }
        out[..KEY_LEN].copy_from_slice(self.kind.key());
        out[16] = (if self.markers { FLAG_M } else { 0 })
            | (if self.crc { FLAG_C } else { 0 })
            | (if self.reject { FLAG_R } else { 0 })
            | (if self.enhanced { FLAG_S } else { 0 })
            | (self.reserved & MASK_RES);
        out[17] = self.revision;
        put16(out, 18, self.private_data_len);
        Ok(FRAME_HEADER_LEN)
    }

    /// Decodes the 20 octets at the front of `input`: key, flags, Rev and PD_Length
    /// (bounded by [`MAX_PRIVATE_DATA_LEN`]).
    pub fn decode(input: &[u8]) -> Result<Self, MpaError> {
        if input.len() < FRAME_HEADER_LEN {
            return Err(MpaError::Incomplete {
                needed: FRAME_HEADER_LEN,
                available: input.len(),
            });
        }
        let kind = if input[..KEY_LEN] == REQUEST_KEY {
            FrameKind::Request
        } else if input[..KEY_LEN] == REPLY_KEY {
            FrameKind::Reply
        } else {
            return Err(MpaError::BadKey);
        };
        let flags = input[16];
        let pd = be16(input, 18);
        if usize::from(pd) > MAX_PRIVATE_DATA_LEN {
            return Err(MpaError::PrivateDataTooLong {
                len: usize::from(pd),
                max: MAX_PRIVATE_DATA_LEN,
            });
        }
        Ok(FrameHeader {
            kind,
            markers: flags & FLAG_M != 0,
            crc: flags & FLAG_C != 0,
            reject: flags & FLAG_R != 0,
            enhanced: flags & FLAG_S != 0,
            reserved: flags & MASK_RES,
            revision: input[17],
            private_data_len: pd,
        })
    }
}

/// The RFC 6581 IRD/ORD words at the start of enhanced private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct EnhancedData {
    /// Inbound RDMA Read queue depth the sender offers (14 bits).
    pub ird: u16,
    /// Outbound RDMA Read queue depth the sender wants (14 bits).
    pub ord: u16,
    /// A: peer-to-peer mode.
    pub peer_to_peer: bool,
    /// B: zero-length Send usable as the RTR message.
    pub send_rtr: bool,
    /// C: zero-length RDMA Write usable as the RTR message.
    pub write_rtr: bool,
    /// D: zero-length RDMA Read usable as the RTR message.
    pub read_rtr: bool,
}

impl EnhancedData {
    /// IRD/ORD words for a client-server (non peer-to-peer) connection.
    #[inline]
    pub const fn client_server(ird: u16, ord: u16) -> Self {
        EnhancedData {
            ird,
            ord,
            peer_to_peer: false,
            send_rtr: false,
            write_rtr: false,
            read_rtr: false,
        }
    }

    /// The four wire octets; IRD and ORD must fit in 14 bits.
    pub fn to_bytes(&self) -> Result<[u8; ENHANCED_DATA_LEN], MpaError> {
        for v in [self.ird, self.ord] {
            if v > MAX_IRD_ORD {
                return Err(MpaError::IrdOrdOutOfRange { value: v });
            }
        }
        let ird = self.ird
            | if self.peer_to_peer { 0x8000 } else { 0 }
            | if self.send_rtr { 0x4000 } else { 0 };
        let ord = self.ord
            | if self.write_rtr { 0x8000 } else { 0 }
            | if self.read_rtr { 0x4000 } else { 0 };
        let mut b = [0u8; ENHANCED_DATA_LEN];
        put16(&mut b, 0, ird);
        put16(&mut b, 2, ord);
        Ok(b)
    }

    /// Decodes the first four octets of `pd`.
    pub fn from_bytes(pd: &[u8]) -> Result<Self, MpaError> {
        if pd.len() < ENHANCED_DATA_LEN {
            return Err(MpaError::MissingEnhancedData { len: pd.len() });
        }
        let ird = be16(pd, 0);
        let ord = be16(pd, 2);
        Ok(EnhancedData {
            ird: ird & MAX_IRD_ORD,
            ord: ord & MAX_IRD_ORD,
            peer_to_peer: ird & 0x8000 != 0,
            send_rtr: ird & 0x4000 != 0,
            write_rtr: ord & 0x8000 != 0,
            read_rtr: ord & 0x4000 != 0,
        })
    }
}

/// A decoded frame borrowing its private data from the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The fixed part.
    pub header: FrameHeader,
    /// Validated revision.
    pub revision: Revision,
    /// IRD/ORD words when the frame is revision 2 with S set.
    pub enhanced: Option<EnhancedData>,
    /// Private data after the IRD/ORD words (all of it otherwise).
    pub ulp_private_data: &'a [u8],
    /// Octets the frame occupied.
    pub len: usize,
}

/// What to put in a frame we send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameParams {
    /// Request or Reply.
    pub kind: FrameKind,
    /// C flag.
    pub crc: bool,
    /// R flag.
    pub reject: bool,
    /// Revision.
    pub revision: Revision,
    /// IRD/ORD words; only with revision 2 (sets S).
    pub enhanced: Option<EnhancedData>,
}

/// Encodes a frame (never with M: we do not do markers) into the front of `out`.
pub fn encode_frame(
    out: &mut [u8],
    params: &FrameParams,
    ulp_private_data: &[u8],
) -> Result<usize, MpaError> {
    let words = match (params.enhanced, params.revision) {
        (Some(e), Revision::V2) => Some(e.to_bytes()?),
        (Some(_), Revision::V1) => return Err(MpaError::EnhancedNeedsRevision2),
        (None, _) => None,
    };
    let extra = if words.is_some() {
        ENHANCED_DATA_LEN
    } else {
        0
    };
    let pd_len = extra + ulp_private_data.len();
    if pd_len > MAX_PRIVATE_DATA_LEN {
        return Err(MpaError::PrivateDataTooLong {
            len: pd_len,
            max: MAX_PRIVATE_DATA_LEN,
        });
    }
    let total = FRAME_HEADER_LEN + pd_len;
    if out.len() < total {
        return Err(MpaError::BufferTooSmall(BufferTooSmall {
            needed: total,
            available: out.len(),
        }));
    }
    FrameHeader {
        kind: params.kind,
        markers: false,
        crc: params.crc,
        reject: params.reject,
        enhanced: words.is_some(),
        reserved: 0,
        revision: params.revision.number(),
        private_data_len: pd_len as u16,
    }
    .encode(out)?;
    if let Some(w) = words {
        out[FRAME_HEADER_LEN..FRAME_HEADER_LEN + ENHANCED_DATA_LEN].copy_from_slice(&w);
    }
    out[FRAME_HEADER_LEN + extra..total].copy_from_slice(ulp_private_data);
    Ok(total)
}

/// Decodes a whole frame at the front of `input`. Checks key, Rev (1 or 2), PD_Length
/// and, for revision 2 with S, the presence of the IRD/ORD words. Flags are reported, not
/// judged: the handshake decides what M, C and R mean for it. In revision 1 the S bit
/// has no meaning and is ignored.
pub fn decode_frame(input: &[u8]) -> Result<Frame<'_>, MpaError> {
    let header = FrameHeader::decode(input)?;
    let revision = Revision::from_number(header.revision).ok_or(MpaError::BadRevision {
        revision: header.revision,
    })?;
    let total = FRAME_HEADER_LEN + usize::from(header.private_data_len);
    if input.len() < total {
        return Err(MpaError::Incomplete {
            needed: total,
            available: input.len(),
        });
    }
    let pd = &input[FRAME_HEADER_LEN..total];
    let (enhanced, ulp) = if revision == Revision::V2 && header.enhanced {
        (
            Some(EnhancedData::from_bytes(pd)?),
            &pd[ENHANCED_DATA_LEN..],
        )
    } else {
        (None, pd)
    };
    Ok(Frame {
        header,
        revision,
        enhanced,
        ulp_private_data: ulp,
        len: total,
    })
}

/// What went wrong with an MPA frame or the start-up exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MpaError {
    /// (Contiguous decode only) the input ends inside the frame.
    #[error("incomplete MPA frame: needed {needed} octets, have {available}")]
    Incomplete {
        /// Octets the frame needs.
        needed: usize,
        /// Octets present.
        available: usize,
    },
    /// The first 16 octets are not an MPA key, or not the one expected: the peer does
    /// not speak MPA (or sent the wrong frame).
    #[error("not the expected MPA Request/Reply frame key")]
    BadKey,
    /// A Rev other than 1 or 2, or a reply revision the request did not allow.
    #[error("unsupported MPA revision {revision}")]
    BadRevision {
        /// Rev found.
        revision: u8,
    },
    /// PD_Length (or the private data we were asked to send) exceeds 512.
    #[error("MPA private data of {len} octets exceeds the maximum of {max}")]
    PrivateDataTooLong {
        /// Length.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// Revision 2 with S set but fewer than four octets of private data; or a revision 2
    /// reply to our enhanced request without S.
    #[error(
        "MPA revision 2 enhanced frame lacks the IRD/ORD words ({len} octets of private data)"
    )]
    MissingEnhancedData {
        /// Private data length found.
        len: usize,
    },
    /// IRD or ORD above 14 bits.
    #[error("IRD/ORD value {value} exceeds the 14-bit maximum {MAX_IRD_ORD}")]
    IrdOrdOutOfRange {
        /// The value.
        value: u16,
    },
    /// IRD/ORD words asked for in a revision 1 frame.
    #[error("IRD/ORD words require MPA revision 2")]
    EnhancedNeedsRevision2,
    /// The peer requires markers, which we do not implement (Linux siw does not either).
    #[error("peer requires MPA markers, which are not supported")]
    MarkersRequired,
    /// The peer's reply has R set: it refused the connection.
    #[error("peer rejected the MPA connection")]
    Rejected,
    /// A call that does not fit the handshake's state (e.g. accepting twice).
    #[error("operation not valid in this handshake state")]
    InvalidState,
    /// (Encoding only) the output buffer is too small.
    #[error(transparent)]
    BufferTooSmall(BufferTooSmall),
}

impl MpaError {
    /// The Terminate error code (layer MPA) for this failure.
    pub const fn terminate_code(&self) -> TerminateCode {
        TerminateCode::Mpa(MpaLlpError::InvalidRequestOrReply)
    }
}
