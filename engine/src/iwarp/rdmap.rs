//! RDMAP (RFC 5040) over DDP (RFC 5041): the combined segment header and the RDMA Read
//! Request body.
//!
//! RDMAP lives in DDP's reserved-for-ULP octets. Tagged segment (RFC 5041 §4.3,
//! RFC 5040 §4.1), 14 octets:
//!
//! ```text
//!  0               1               2               3
//! +---------------+---------------+-------------------------------+
//! | DDP control   | RDMAP control |            STag ...           |
//! +---------------+---------------+-------------------------------+
//! |  ... STag     |           TO (64 bits) ...                    |
//! +-------------------------------+-------------------------------+
//! |          ... TO               |
//! +-------------------------------+
//! ```
//!
//! Untagged segment (RFC 5041 §4.4, RFC 5040 §4.2), 18 octets: DDP control, RDMAP
//! control, a 32-bit word that is the Invalidate STag for the Send-with-Invalidate
//! opcodes and reserved (zero) otherwise, then QN, MSN and MO (32 bits each).
//!
//! RDMAP control octet (RFC 5040 §4.2): `RV` (2 bits, version 1), `Rsv` (2 bits), opcode
//! (4 bits).

use core::fmt;

use super::ddp::{DdpControl, QueueNumber, DDP_VERSION, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use super::octets::{be32, be64, put32, put64};
use super::terminate::{
    DdpTaggedError, DdpUntaggedError, MpaLlpError, RdmapOperationError, TerminateCode,
};
use crate::wire::xdr::BufferTooSmall;

/// RDMAP version this implementation speaks (RFC 5040 §4.2, RV field).
pub const RDMAP_VERSION: u8 = 1;

/// Octets in an RDMA Read Request body (RFC 5040 §4.4).
pub const READ_REQUEST_LEN: usize = 28;

/// RDMAP opcodes (RFC 5040 §4.2, table in §4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Opcode {
    /// 0000b, tagged.
    RdmaWrite = 0,
    /// 0001b, untagged on QN 1.
    ReadRequest = 1,
    /// 0010b, tagged.
    ReadResponse = 2,
    /// 0011b, untagged on QN 0.
    Send = 3,
    /// 0100b, untagged on QN 0, carries an Invalidate STag.
    SendInvalidate = 4,
    /// 0101b, untagged on QN 0.
    SendSolicitedEvent = 5,
    /// 0110b, untagged on QN 0, carries an Invalidate STag.
    SendSolicitedEventInvalidate = 6,
    /// 0111b, untagged on QN 2.
    Terminate = 7,
}

impl Opcode {
    /// Every opcode, in wire order.
    pub const ALL: [Opcode; 8] = [
        Opcode::RdmaWrite,
        Opcode::ReadRequest,
        Opcode::ReadResponse,
        Opcode::Send,
        Opcode::SendInvalidate,
        Opcode::SendSolicitedEvent,
        Opcode::SendSolicitedEventInvalidate,
        Opcode::Terminate,
    ];

    /// The opcode with wire value `v` (low four bits of the RDMAP control octet).
    #[inline]
    pub const fn from_bits(v: u8) -> Option<Self> {
        match v {
            0 => Some(Opcode::RdmaWrite),
            1 => Some(Opcode::ReadRequest),
            2 => Some(Opcode::ReadResponse),
            3 => Some(Opcode::Send),
            4 => Some(Opcode::SendInvalidate),
            5 => Some(Opcode::SendSolicitedEvent),
            6 => Some(Opcode::SendSolicitedEventInvalidate),
            7 => Some(Opcode::Terminate),
            _ => None,
        }
    }

    /// Whether the opcode uses the tagged buffer model (RFC 5040 §4.3 table).
    #[inline]
    pub const fn is_tagged(self) -> bool {
        matches!(self, Opcode::RdmaWrite | Opcode::ReadResponse)
    }

    /// The untagged queue an untagged opcode travels on.
    #[inline]
    pub const fn queue(self) -> Option<QueueNumber> {
        match self {
            Opcode::RdmaWrite | Opcode::ReadResponse => None,
            Opcode::ReadRequest => Some(QueueNumber::ReadRequest),
            Opcode::Terminate => Some(QueueNumber::Terminate),
            Opcode::Send
            | Opcode::SendInvalidate
            | Opcode::SendSolicitedEvent
            | Opcode::SendSolicitedEventInvalidate => Some(QueueNumber::Send),
        }
    }

    /// Whether the untagged header's ULP word is an Invalidate STag (RFC 5040 §4.2).
    #[inline]
    pub const fn carries_invalidate_stag(self) -> bool {
        matches!(
            self,
            Opcode::SendInvalidate | Opcode::SendSolicitedEventInvalidate
        )
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Opcode::RdmaWrite => "RDMA Write",
            Opcode::ReadRequest => "RDMA Read Request",
            Opcode::ReadResponse => "RDMA Read Response",
            Opcode::Send => "Send",
            Opcode::SendInvalidate => "Send with Invalidate",
            Opcode::SendSolicitedEvent => "Send with Solicited Event",
            Opcode::SendSolicitedEventInvalidate => "Send with Solicited Event and Invalidate",
            Opcode::Terminate => "Terminate",
        };
        f.write_str(s)
    }
}

/// Where a segment's payload goes: the DDP buffer model and its addressing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Placement {
    /// Tagged buffer model (RFC 5041 §4.3).
    Tagged {
        /// Data sink STag.
        stag: u32,
        /// Data sink tagged offset of this segment's first payload octet.
        to: u64,
    },
    /// Untagged buffer model (RFC 5041 §4.4).
    Untagged {
        /// The RDMAP word in RsvdULP: Invalidate STag for the Send-with-Invalidate
        /// opcodes, reserved otherwise (we send zero; a received value is kept as is,
        /// RFC 5040 §4.2 says receivers ignore it).
        inval_stag: u32,
        /// Queue number.
        qn: u32,
        /// Message sequence number.
        msn: u32,
        /// Message offset of this segment's first payload octet.
        mo: u32,
    },
}

/// A DDP segment header with its RDMAP control: everything between the MPA length field
/// and the payload of an FPDU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SegmentHeader {
    /// RDMAP opcode.
    pub opcode: Opcode,
    /// DDP L flag: last segment of the message.
    pub last: bool,
    /// Buffer model and addressing; must agree with `opcode`.
    pub placement: Placement,
}

impl SegmentHeader {
    /// A tagged header (RDMA Write, RDMA Read Response).
    #[inline]
    pub const fn tagged(opcode: Opcode, last: bool, stag: u32, to: u64) -> Self {
        SegmentHeader {
            opcode,
            last,
            placement: Placement::Tagged { stag, to },
        }
    }

    /// An untagged header on the queue `opcode` belongs to. `inval_stag` must be zero
    /// unless the opcode carries an Invalidate STag. A tagged opcode gives a header that
    /// [`SegmentHeader::encode`] rejects.
    #[inline]
    pub const fn untagged(opcode: Opcode, last: bool, inval_stag: u32, msn: u32, mo: u32) -> Self {
        let qn = match opcode.queue() {
            Some(q) => q.qn(),
            None => u32::MAX,
        };
        SegmentHeader {
            opcode,
            last,
            placement: Placement::Untagged {
                inval_stag,
                qn,
                msn,
                mo,
            },
        }
    }

    /// Whether the header uses the tagged buffer model.
    #[inline]
    pub const fn is_tagged(&self) -> bool {
        matches!(self.placement, Placement::Tagged { .. })
    }

    /// Encoded length: 14 (tagged) or 18 (untagged).
    #[inline]
    pub const fn encoded_len(&self) -> usize {
        if self.is_tagged() {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        }
    }

    /// Checks the header is one RDMAP allows: buffer model and queue match the opcode and
    /// no Invalidate STag rides on an opcode that has none.
    pub fn validate(&self) -> Result<(), SegmentError> {
        match self.placement {
            Placement::Tagged { .. } => {
                if !self.opcode.is_tagged() {
                    return Err(SegmentError::WrongBufferModel {
                        opcode: self.opcode,
                        tagged: true,
                    });
                }
            }
            Placement::Untagged { qn, inval_stag, .. } => {
                let Some(queue) = self.opcode.queue() else {
                    return Err(SegmentError::WrongBufferModel {
                        opcode: self.opcode,
                        tagged: false,
                    });
                };
                if qn != queue.qn() {
                    return Err(SegmentError::WrongQueue {
                        opcode: self.opcode,
                        qn,
                    });
                }
                if inval_stag != 0 && !self.opcode.carries_invalidate_stag() {
                    return Err(SegmentError::UnexpectedInvalidateStag {
                        opcode: self.opcode,
                    });
                }
            }
        }
        Ok(())
    }

    /// Writes the header to the front of `out`, returning its length.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, SegmentError> {
        self.validate()?;
        let len = self.encoded_len();
        if out.len() < len {
            return Err(SegmentError::BufferTooSmall(BufferTooSmall {
                needed: len,
                available: out.len(),
            }));
        }
        out[0] = DdpControl::new(self.is_tagged(), self.last).to_octet();
        out[1] = (RDMAP_VERSION << 6) | self.opcode as u8;
        match self.placement {
            Placement::Tagged { stag, to } => {
                put32(out, 2, stag);
                put64(out, 6, to);
            }
            Placement::Untagged {
                inval_stag,
                qn,
                msn,
                mo,
            } => {
                put32(out, 2, inval_stag);
                put32(out, 6, qn);
                put32(out, 10, msn);
                put32(out, 14, mo);
            }
        }
        Ok(len)
    }

    /// Decodes the header at the front of a ULPDU (DDP segment), returning it and its
    /// length. Versions, opcode, buffer model and queue are checked; reserved bits are
    /// ignored as RFC 5040 §4.2 and RFC 5041 §4.2 require of receivers.
    pub fn decode(ulpdu: &[u8]) -> Result<(SegmentHeader, usize), SegmentError> {
        let Some(&first) = ulpdu.first() else {
            return Err(SegmentError::Truncated {
                needed: 1,
                available: 0,
            });
        };
        let ctrl = DdpControl::from_octet(first);
        let len = ctrl.header_len();
        if ulpdu.len() < len {
            return Err(SegmentError::Truncated {
                needed: len,
                available: ulpdu.len(),
            });
        }
        if ctrl.version != DDP_VERSION {
            return Err(SegmentError::DdpVersion {
                version: ctrl.version,
                tagged: ctrl.tagged,
            });
        }
        let rdmap = ulpdu[1];
        let rv = rdmap >> 6;
        if rv != RDMAP_VERSION {
            return Err(SegmentError::RdmapVersion { version: rv });
        }
        let op_bits = rdmap & 0x0F;
        let opcode =
            Opcode::from_bits(op_bits).ok_or(SegmentError::UnknownOpcode { opcode: op_bits })?;
        let placement = if ctrl.tagged {
            Placement::Tagged {
                stag: be32(ulpdu, 2),
                to: be64(ulpdu, 6),
            }
        } else {
            Placement::Untagged {
                inval_stag: be32(ulpdu, 2),
                qn: be32(ulpdu, 6),
                msn: be32(ulpdu, 10),
                mo: be32(ulpdu, 14),
            }
        };
        let header = SegmentHeader {
            opcode,
            last: ctrl.last,
            placement,
        };
        match header.validate() {
            // A reserved word on a plain Send is ignored on receipt, not an error.
            Ok(()) | Err(SegmentError::UnexpectedInvalidateStag { .. }) => Ok((header, len)),
            Err(e) => Err(e),
        }
    }
}

/// What was wrong with a DDP/RDMAP segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SegmentError {
    /// Fewer octets than the header needs.
    #[error("DDP segment too short for its header: needed {needed} octets, have {available}")]
    Truncated {
        /// Octets the header needs.
        needed: usize,
        /// Octets present.
        available: usize,
    },
    /// DDP version other than 1.
    #[error("unsupported DDP version {version} (expected {DDP_VERSION})")]
    DdpVersion {
        /// Version found.
        version: u8,
        /// Whether the segment claimed the tagged model (selects the Terminate code).
        tagged: bool,
    },
    /// RDMAP version other than 1.
    #[error("unsupported RDMAP version {version} (expected {RDMAP_VERSION})")]
    RdmapVersion {
        /// Version found.
        version: u8,
    },
    /// Opcode 8..=15: reserved in RFC 5040 (atomics of RFC 7306 are not supported).
    #[error("reserved RDMAP opcode {opcode:#x}")]
    UnknownOpcode {
        /// Opcode found.
        opcode: u8,
    },
    /// The opcode is not defined for the buffer model the T flag selects.
    #[error("{opcode} is not defined for the {} buffer model", if *tagged { "tagged" } else { "untagged" })]
    WrongBufferModel {
        /// Opcode found.
        opcode: Opcode,
        /// The T flag.
        tagged: bool,
    },
    /// An untagged opcode arrived on a queue RDMAP does not use for it.
    #[error("{opcode} on queue number {qn}")]
    WrongQueue {
        /// Opcode found.
        opcode: Opcode,
        /// QN found.
        qn: u32,
    },
    /// (Encoding only) a non-zero Invalidate STag on an opcode that has none.
    #[error("{opcode} carries no Invalidate STag but one was given")]
    UnexpectedInvalidateStag {
        /// The opcode.
        opcode: Opcode,
    },
    /// (Encoding only) the output buffer is too small.
    #[error(transparent)]
    BufferTooSmall(BufferTooSmall),
}

impl SegmentError {
    /// The Terminate error code RFC 5040 §7 / RFC 5041 §7 assign to this failure, for
    /// reporting it to the peer.
    pub const fn terminate_code(&self) -> TerminateCode {
        match *self {
            SegmentError::Truncated { .. } | SegmentError::BufferTooSmall(_) => {
                TerminateCode::Mpa(MpaLlpError::MarkerOrLengthMismatch)
            }
            SegmentError::DdpVersion { tagged: true, .. } => {
                TerminateCode::DdpTagged(DdpTaggedError::InvalidDdpVersion)
            }
            SegmentError::DdpVersion { tagged: false, .. } => {
                TerminateCode::DdpUntagged(DdpUntaggedError::InvalidDdpVersion)
            }
            SegmentError::RdmapVersion { .. } => {
                TerminateCode::RdmapOperation(RdmapOperationError::InvalidRdmapVersion)
            }
            SegmentError::UnknownOpcode { .. }
            | SegmentError::WrongBufferModel { .. }
            | SegmentError::UnexpectedInvalidateStag { .. } => {
                TerminateCode::RdmapOperation(RdmapOperationError::UnexpectedOpcode)
            }
            SegmentError::WrongQueue { .. } => {
                TerminateCode::DdpUntagged(DdpUntaggedError::InvalidQn)
            }
        }
    }
}

/// The body of an RDMA Read Request message (RFC 5040 §4.4), the whole payload of the
/// untagged message on QN 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ReadRequest {
    /// Data Sink STag: where the Read Response will be placed (requester's buffer).
    pub sink_stag: u32,
    /// Data Sink Tagged Offset.
    pub sink_to: u64,
    /// RDMA Read Message Size in octets.
    pub size: u32,
    /// Data Source STag: the responder's buffer to read.
    pub source_stag: u32,
    /// Data Source Tagged Offset.
    pub source_to: u64,
}

impl ReadRequest {
    /// Writes the 28-octet body to the front of `out`.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, BufferTooSmall> {
        if out.len() < READ_REQUEST_LEN {
            return Err(BufferTooSmall {
                needed: READ_REQUEST_LEN,
                available: out.len(),
            });
        }
        put32(out, 0, self.sink_stag);
        put64(out, 4, self.sink_to);
        put32(out, 12, self.size);
        put32(out, 16, self.source_stag);
        put64(out, 20, self.source_to);
        Ok(READ_REQUEST_LEN)
    }

    /// The body as a fixed array, for use as an FPDU payload.
    pub fn to_bytes(&self) -> [u8; READ_REQUEST_LEN] {
        let mut b = [0u8; READ_REQUEST_LEN];
        put32(&mut b, 0, self.sink_stag);
        put64(&mut b, 4, self.sink_to);
        put32(&mut b, 12, self.size);
        put32(&mut b, 16, self.source_stag);
        put64(&mut b, 20, self.source_to);
        b
    }

    /// Decodes a Read Request message payload, which must be exactly 28 octets.
    pub fn decode(body: &[u8]) -> Result<Self, ReadRequestLengthError> {
        if body.len() != READ_REQUEST_LEN {
            return Err(ReadRequestLengthError { len: body.len() });
        }
        Ok(ReadRequest {
            sink_stag: be32(body, 0),
            sink_to: be64(body, 4),
            size: be32(body, 12),
            source_stag: be32(body, 16),
            source_to: be64(body, 20),
        })
    }
}

/// An RDMA Read Request message whose payload is not 28 octets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("RDMA Read Request payload is {len} octets, expected {READ_REQUEST_LEN}")]
pub struct ReadRequestLengthError {
    /// Payload length found.
    pub len: usize,
}

impl ReadRequestLengthError {
    /// Terminate code for this error: the message is too long (or short) for the Read
    /// Request queue's 28-octet buffer.
    pub const fn terminate_code(&self) -> TerminateCode {
        TerminateCode::DdpUntagged(DdpUntaggedError::MessageTooLong)
    }
}
