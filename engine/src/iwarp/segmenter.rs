//! Outbound message segmentation: one RDMAP message becomes a sequence of FPDUs, each
//! with a ULPDU no larger than the MULPDU (RFC 5041 §5.2, RFC 5044 §7.1).
//!
//! Untagged segments carry the same QN and MSN with MO advancing by the payload already
//! sent; tagged segments carry the same STag with TO advancing. Only the final segment has
//! the Last flag. A zero-length message is one FPDU with an empty payload.
//!
//! Each non-final segment carries a multiple of four payload octets, so it needs no pad
//! and the next segment starts four-aligned in the target buffer, as Linux siw does.
//!
//! Two ways to emit: [`Segmenter::next_parts`] gives the header and trailer in small
//! arrays plus the payload as a slice of the caller's message, ready for a vectored write
//! with no copy; [`Segmenter::next_into`] writes a whole FPDU into a caller buffer.

use super::crc32c::Crc32c;
use super::fpdu::{
    crc_to_wire, pad_len, FpduError, CRC_LEN, LENGTH_FIELD_LEN, MAX_HEAD_LEN, MAX_TRAILER_LEN,
    MAX_ULPDU_LEN,
};
use super::octets::put16;
use super::rdmap::{Opcode, Placement, SegmentHeader};
use crate::wire::xdr::BufferTooSmall;

/// Addressing for an outbound message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageTarget {
    /// Untagged message (Send family, Read Request, Terminate); QN comes from the opcode.
    Untagged {
        /// Message sequence number on the opcode's queue.
        msn: u32,
        /// Invalidate STag (Send with Invalidate opcodes), zero otherwise.
        inval_stag: u32,
    },
    /// Tagged message (RDMA Write, Read Response).
    Tagged {
        /// Data sink STag.
        stag: u32,
        /// Tagged offset of the message's first octet.
        to: u64,
    },
}

/// One FPDU as three pieces for a vectored write: head (length field and DDP/RDMAP
/// header), payload (borrowed from the message) and trailer (pad and CRC).
#[derive(Debug, Clone, Copy)]
pub struct FpduParts<'a> {
    head: [u8; MAX_HEAD_LEN],
    head_len: usize,
    payload: &'a [u8],
    trailer: [u8; MAX_TRAILER_LEN],
    trailer_len: usize,
    header: SegmentHeader,
}

impl<'a> FpduParts<'a> {
    /// ULPDU_LENGTH and the DDP/RDMAP header.
    #[inline]
    pub fn head(&self) -> &[u8] {
        &self.head[..self.head_len]
    }

    /// This segment's payload.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// Pad and CRC.
    #[inline]
    pub fn trailer(&self) -> &[u8] {
        &self.trailer[..self.trailer_len]
    }

    /// The header this FPDU carries.
    #[inline]
    pub fn header(&self) -> &SegmentHeader {
        &self.header
    }

    /// Total FPDU length.
    #[inline]
    pub fn len(&self) -> usize {
        self.head_len + self.payload.len() + self.trailer_len
    }

    /// Always false: an FPDU has at least a length field, header and CRC. (Present for
    /// the `len`/`is_empty` convention.)
    #[inline]
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Copies the FPDU into the front of `out`.
    pub fn copy_to(&self, out: &mut [u8]) -> Result<usize, BufferTooSmall> {
        let n = self.len();
        if out.len() < n {
            return Err(BufferTooSmall {
                needed: n,
                available: out.len(),
            });
        }
        let (h, rest) = out.split_at_mut(self.head_len);
        h.copy_from_slice(self.head());
        let (p, rest) = rest.split_at_mut(self.payload.len());
        p.copy_from_slice(self.payload);
        rest[..self.trailer_len].copy_from_slice(self.trailer());
        Ok(n)
    }
}

/// Iterates over the FPDUs of one outbound message.
#[derive(Debug, Clone)]
pub struct Segmenter<'a> {
    opcode: Opcode,
    target: MessageTarget,
    message: &'a [u8],
    sent: usize,
    max_payload: usize,
    crc: bool,
    done: bool,
}

impl<'a> Segmenter<'a> {
    /// Prepares to send `message` as `opcode` to `target`, in FPDUs whose ULPDU is at
    /// most `mulpdu` octets (see [`crate::iwarp::fpdu::mulpdu`]), with CRCs if `crc`.
    ///
    /// Checks up front everything that could fail later: the opcode/target pairing, a
    /// MULPDU that leaves room for payload, and offsets that do not overflow.
    pub fn new(
        opcode: Opcode,
        target: MessageTarget,
        message: &'a [u8],
        mulpdu: usize,
        crc: bool,
    ) -> Result<Self, FpduError> {
        let probe = header_for(opcode, target, 0, false);
        probe.validate().map_err(FpduError::Segment)?;
        let hlen = probe.encoded_len();
        let mulpdu = mulpdu.min(MAX_ULPDU_LEN);
        if mulpdu < hlen + 4 {
            return Err(FpduError::MulpduTooSmall {
                mulpdu,
                min: hlen + 4,
            });
        }
        let too_long = match target {
            MessageTarget::Untagged { .. } => u32::try_from(message.len()).is_err(),
            MessageTarget::Tagged { to, .. } => to.checked_add(message.len() as u64).is_none(),
        };
        if too_long {
            return Err(FpduError::MessageTooLong { len: message.len() });
        }
        Ok(Segmenter {
            opcode,
            target,
            message,
            sent: 0,
            max_payload: (mulpdu - hlen) & !3,
            crc,
            done: false,
        })
    }

    /// Payload octets not yet emitted.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.message.len() - self.sent
    }

    /// Whether every FPDU has been emitted.
    #[inline]
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Largest payload one FPDU of this message carries.
    #[inline]
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// Number of FPDUs the whole message takes.
    pub fn fpdu_count(&self) -> usize {
        self.message.len().div_ceil(self.max_payload).max(1)
    }

    /// The next FPDU as pieces, or `None` after the last one.
    pub fn next_parts(&mut self) -> Option<FpduParts<'a>> {
        if self.done {
            return None;
        }
        let take = self.remaining().min(self.max_payload);
        let last = self.sent + take == self.message.len();
        let header = header_for(self.opcode, self.target, self.sent, last);
        let payload = &self.message[self.sent..self.sent + take];

        let mut head = [0u8; MAX_HEAD_LEN];
        // Validated in `new`; the buffer is the maximum header size.
        let hlen = match header.encode(&mut head[LENGTH_FIELD_LEN..]) {
            Ok(n) => n,
            Err(_) => return None,
        };
        let ulpdu = hlen + take;
        put16(&mut head, 0, ulpdu as u16);
        let head_len = LENGTH_FIELD_LEN + hlen;

        let pad = pad_len(ulpdu);
        let mut trailer = [0u8; MAX_TRAILER_LEN];
        if self.crc {
            let mut c = Crc32c::new();
            c.update(&head[..head_len]);
            c.update(payload);
            c.update(&trailer[..pad]);
            trailer[pad..pad + CRC_LEN].copy_from_slice(&crc_to_wire(c.value()));
        }

        self.sent += take;
        self.done = last;
        Some(FpduParts {
            head,
            head_len,
            payload,
            trailer,
            trailer_len: pad + CRC_LEN,
            header,
        })
    }

    /// Writes the next FPDU into the front of `out`: `None` after the last one, else its
    /// length. On a too-small buffer nothing is consumed, so a retry with a bigger buffer
    /// emits the same FPDU.
    pub fn next_into(&mut self, out: &mut [u8]) -> Option<Result<usize, FpduError>> {
        let saved = (self.sent, self.done);
        let parts = self.next_parts()?;
        match parts.copy_to(out) {
            Ok(n) => Some(Ok(n)),
            Err(e) => {
                (self.sent, self.done) = saved;
                Some(Err(FpduError::BufferTooSmall(e)))
            }
        }
    }
}

fn header_for(opcode: Opcode, target: MessageTarget, offset: usize, last: bool) -> SegmentHeader {
    match target {
        MessageTarget::Untagged { msn, inval_stag } => {
            // `new` checked the message fits MO's 32 bits.
            SegmentHeader::untagged(opcode, last, inval_stag, msn, offset as u32)
        }
        MessageTarget::Tagged { stag, to } => SegmentHeader {
            opcode,
            last,
            placement: Placement::Tagged {
                stag,
                // `new` checked `to + len` does not overflow.
                to: to.wrapping_add(offset as u64),
            },
        },
    }
}
