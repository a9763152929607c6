//! MPA framing of DDP segments: the FPDU (RFC 5044 §4.1), without markers.
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |          ULPDU_LENGTH         |                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//! ~              ULPDU (DDP/RDMAP header + payload)               ~
//! +                               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                               |          PAD (0-3)            |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                             CRC                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! The pad makes the FPDU a multiple of four octets; it is zero when sent and ignored on
//! receipt except that the CRC covers it (RFC 5044 §4.1). The CRC covers the length
//! field, the ULPDU and the pad. When CRC is not negotiated the field is still present,
//! sent as zero and not checked.
//!
//! # CRC byte order
//!
//! The CRC32c value goes on the wire least significant octet first: the octet order
//! iSCSI uses (RFC 3720 B.4 lists the CRC of 32 zero octets, `0x8A9136AA`, as the octets
//! `aa 36 91 8a`) and the order Linux siw produces (`siw_crc_final` stores
//! `cpu_to_le32(~crc)`). Wireshark 4.0 agrees: its `iwarp_mpa` dissector reports
//! "Good CRC32" for this layout and "Bad CRC32" for the big-endian one (checked by
//! `engine/tests/iwarp/iwarp_tshark.rs`). Wireshark displays the field as the big-endian
//! reading of those four octets, i.e. `value.swap_bytes()`.

use super::crc32c::Crc32c;
use super::ddp::{TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use super::octets::{be16, put16};
use super::rdmap::{SegmentError, SegmentHeader};
use super::terminate::{MpaLlpError, TerminateCode};
use crate::wire::xdr::BufferTooSmall;

/// Octets of the ULPDU_LENGTH field.
pub const LENGTH_FIELD_LEN: usize = 2;

/// Octets of the CRC field.
pub const CRC_LEN: usize = 4;

/// Largest ULPDU the 16-bit length field can describe.
pub const MAX_ULPDU_LEN: usize = u16::MAX as usize;

/// Smallest legal ULPDU: a tagged DDP header with no payload.
pub const MIN_ULPDU_LEN: usize = TAGGED_HEADER_LEN;

/// Length field plus the largest DDP/RDMAP header: the most an FPDU carries before its
/// payload.
pub const MAX_HEAD_LEN: usize = LENGTH_FIELD_LEN + UNTAGGED_HEADER_LEN;

/// Pad plus CRC at most.
pub const MAX_TRAILER_LEN: usize = 3 + CRC_LEN;

/// Pad octets after a ULPDU of `ulpdu_len` octets (RFC 5044 §4.1: length field, ULPDU and
/// pad together are a multiple of four).
#[inline]
pub const fn pad_len(ulpdu_len: usize) -> usize {
    (4 - ((ulpdu_len + LENGTH_FIELD_LEN) & 3)) & 3
}

/// Total FPDU length for a ULPDU of `ulpdu_len` octets.
#[inline]
pub const fn fpdu_len(ulpdu_len: usize) -> usize {
    LENGTH_FIELD_LEN + ulpdu_len + pad_len(ulpdu_len) + CRC_LEN
}

/// The wire octets of a CRC value (see the module docs for why little-endian).
#[inline]
pub const fn crc_to_wire(crc: u32) -> [u8; 4] {
    crc.to_le_bytes()
}

/// The CRC value carried by four wire octets.
#[inline]
pub const fn crc_from_wire(b: [u8; 4]) -> u32 {
    u32::from_le_bytes(b)
}

/// Maximum ULPDU length (MULPDU) for an effective MSS `emss`, with markers disabled.
///
/// RFC 5044 §7.1 gives `MULPDU = EMSS - (6 + 4 * Ceiling(EMSS / 512) + EMSS mod 4)` when
/// markers are on; without markers the marker term drops out, leaving the 6 octets of
/// length field and CRC plus the rounding that keeps a full FPDU a multiple of four. An
/// FPDU built to this MULPDU therefore needs no pad and fills the segment exactly.
///
/// The result is capped at 65534, the largest MULPDU whose FPDU stays four-aligned with
/// no pad (the length field could say 65535). `None` if the MSS cannot carry even an
/// empty tagged segment.
///
/// Linux siw sizes FPDUs slightly differently: it rounds the TCP segment length (MSS, or
/// MSS times the GSO segment count) down to a multiple of eight before subtracting the
/// same overheads. Receivers must therefore accept any ULPDU up to 65535 octets, which
/// [`crate::iwarp::reader::FpduReader`] does by default.
#[inline]
pub const fn mulpdu(emss: u32) -> Option<u16> {
    // EMSS 65540 is the smallest that yields the 65534 cap.
    let emss = if emss > 65540 { 65540 } else { emss };
    let overhead = 6 + emss % 4;
    if emss < overhead + MIN_ULPDU_LEN as u32 {
        return None;
    }
    Some((emss - overhead) as u16)
}

/// One FPDU decoded from a contiguous buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fpdu<'a> {
    /// The DDP/RDMAP header.
    pub header: SegmentHeader,
    /// The segment payload (zero-copy view into the input).
    pub payload: &'a [u8],
    /// The CRC field's value (as [`crc_from_wire`] reads it); zero when CRC is off.
    pub crc: u32,
    /// Octets the FPDU occupied in the input.
    pub len: usize,
}

/// Encodes one FPDU carrying `header` and `payload` into the front of `out`.
///
/// With `crc` the CRC32c is computed; otherwise the field is zero. Returns the FPDU length.
pub fn encode_fpdu(
    out: &mut [u8],
    header: &SegmentHeader,
    payload: &[u8],
    crc: bool,
) -> Result<usize, FpduError> {
    let hlen = header.encoded_len();
    let ulpdu = hlen + payload.len();
    if ulpdu > MAX_ULPDU_LEN {
        return Err(FpduError::UlpduTooLong {
            len: ulpdu,
            max: MAX_ULPDU_LEN,
        });
    }
    let total = fpdu_len(ulpdu);
    if out.len() < total {
        return Err(FpduError::BufferTooSmall(BufferTooSmall {
            needed: total,
            available: out.len(),
        }));
    }
    put16(out, 0, ulpdu as u16);
    header
        .encode(&mut out[LENGTH_FIELD_LEN..])
        .map_err(FpduError::Segment)?;
    let p0 = LENGTH_FIELD_LEN + hlen;
    out[p0..p0 + payload.len()].copy_from_slice(payload);
    let pad_end = p0 + payload.len() + pad_len(ulpdu);
    out[p0 + payload.len()..pad_end].fill(0);
    let value = if crc {
        let mut c = Crc32c::new();
        c.update(&out[..pad_end]);
        c.value()
    } else {
        0
    };
    out[pad_end..pad_end + CRC_LEN].copy_from_slice(&crc_to_wire(value));
    Ok(total)
}

/// Decodes the FPDU at the front of `input`.
///
/// `max_ulpdu` bounds the length field (pass [`MAX_ULPDU_LEN`] to accept anything the
/// field can say). With `crc` the CRC is verified. An input that ends inside the FPDU is
/// [`FpduError::Incomplete`]; more input may complete it.
pub fn decode_fpdu(input: &[u8], crc: bool, max_ulpdu: usize) -> Result<Fpdu<'_>, FpduError> {
    if input.len() < LENGTH_FIELD_LEN {
        return Err(FpduError::Incomplete {
            needed: LENGTH_FIELD_LEN,
            available: input.len(),
        });
    }
    let ulpdu = usize::from(be16(input, 0));
    check_ulpdu_len(ulpdu, max_ulpdu)?;
    let total = fpdu_len(ulpdu);
    if input.len() < total {
        return Err(FpduError::Incomplete {
            needed: total,
            available: input.len(),
        });
    }
    let body = &input[LENGTH_FIELD_LEN..LENGTH_FIELD_LEN + ulpdu];
    let (header, hlen) = SegmentHeader::decode(body).map_err(|e| match e {
        SegmentError::Truncated { .. } => FpduError::UlpduTooShort {
            len: ulpdu,
            min: UNTAGGED_HEADER_LEN,
        },
        other => FpduError::Segment(other),
    })?;
    let pad_end = total - CRC_LEN;
    let received = crc_from_wire([
        input[pad_end],
        input[pad_end + 1],
        input[pad_end + 2],
        input[pad_end + 3],
    ]);
    if crc {
        let mut c = Crc32c::new();
        c.update(&input[..pad_end]);
        if c.value() != received {
            return Err(FpduError::CrcMismatch {
                computed: c.value(),
                received,
            });
        }
    }
    Ok(Fpdu {
        header,
        payload: &body[hlen..],
        crc: received,
        len: total,
    })
}

/// Checks a ULPDU_LENGTH value against the smallest header and the receiver's limit.
#[inline]
pub(crate) fn check_ulpdu_len(ulpdu: usize, max_ulpdu: usize) -> Result<(), FpduError> {
    if ulpdu < MIN_ULPDU_LEN {
        return Err(FpduError::UlpduTooShort {
            len: ulpdu,
            min: MIN_ULPDU_LEN,
        });
    }
    if ulpdu > max_ulpdu {
        return Err(FpduError::UlpduTooLong {
            len: ulpdu,
            max: max_ulpdu,
        });
    }
    Ok(())
}

/// What went wrong framing or parsing an FPDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FpduError {
    /// (Contiguous decode only) the input ends inside the FPDU.
    #[error("incomplete FPDU: needed {needed} octets, have {available}")]
    Incomplete {
        /// Octets the FPDU needs.
        needed: usize,
        /// Octets present.
        available: usize,
    },
    /// ULPDU_LENGTH smaller than the DDP header it must hold.
    #[error("MPA ULPDU length {len} is shorter than the {min}-octet DDP header")]
    UlpduTooShort {
        /// Length found.
        len: usize,
        /// Least acceptable for this segment.
        min: usize,
    },
    /// ULPDU_LENGTH above the receiver's limit, or a segment too big to frame.
    #[error("MPA ULPDU length {len} exceeds the limit of {max}")]
    UlpduTooLong {
        /// Length found or needed.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// The CRC field does not match the data.
    #[error("MPA CRC mismatch: computed {computed:#010x}, received {received:#010x}")]
    CrcMismatch {
        /// CRC of the received octets.
        computed: u32,
        /// CRC the sender put in the field.
        received: u32,
    },
    /// The DDP/RDMAP header is invalid.
    #[error("bad DDP/RDMAP header: {0}")]
    Segment(#[source] SegmentError),
    /// A MULPDU too small to carry a header and four payload octets.
    #[error("MULPDU {mulpdu} is below the usable minimum of {min}")]
    MulpduTooSmall {
        /// MULPDU given.
        mulpdu: usize,
        /// Smallest usable for this message's header.
        min: usize,
    },
    /// A message whose offsets cannot be represented: an untagged message over 4 GiB
    /// (MO is 32 bits) or a tagged one running past TO 2^64.
    #[error("message of {len} octets does not fit the DDP offset fields")]
    MessageTooLong {
        /// Message length.
        len: usize,
    },
    /// (Encoding only) the output buffer is too small.
    #[error(transparent)]
    BufferTooSmall(BufferTooSmall),
}

impl FpduError {
    /// The Terminate error code for reporting this failure to the peer.
    pub const fn terminate_code(&self) -> TerminateCode {
        match self {
            FpduError::CrcMismatch { .. } => TerminateCode::Mpa(MpaLlpError::CrcError),
            FpduError::Segment(e) => e.terminate_code(),
            FpduError::Incomplete { .. }
            | FpduError::UlpduTooShort { .. }
            | FpduError::UlpduTooLong { .. }
            | FpduError::MulpduTooSmall { .. }
            | FpduError::MessageTooLong { .. }
            | FpduError::BufferTooSmall(_) => {
                TerminateCode::Mpa(MpaLlpError::MarkerOrLengthMismatch)
            }
        }
    }
}
