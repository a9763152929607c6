//! Direct Data Placement protocol pieces (RFC 5041): the control octet, header sizes,
//! the untagged queues RDMAP uses and per-queue message sequence numbers.
//!
//! The full segment header, whose reserved-for-ULP octets RDMAP fills in, is decoded in
//! [`crate::iwarp::rdmap`]; DDP alone never travels without RDMAP in this engine.
//!
//! DDP control octet (RFC 5041 §4.2), first octet of every DDP segment:
//!
//! ```text
//!  0 1 2 3 4 5 6 7
//! +-+-+-+-+-+-+-+-+
//! |T|L| Resrv | DV|
//! +-+-+-+-+-+-+-+-+
//! ```

use core::fmt;

/// DDP version this implementation speaks (RFC 5041 §4.2, DV field).
pub const DDP_VERSION: u8 = 1;

/// Octets in a tagged DDP header: control, RsvdULP (1), STag (4), TO (8) (RFC 5041 §4.3).
pub const TAGGED_HEADER_LEN: usize = 14;

/// Octets in an untagged DDP header: control, RsvdULP (5), QN, MSN, MO (RFC 5041 §4.4).
pub const UNTAGGED_HEADER_LEN: usize = 18;

/// Largest DDP header.
pub const MAX_HEADER_LEN: usize = UNTAGGED_HEADER_LEN;

const FLAG_TAGGED: u8 = 0x80;
const FLAG_LAST: u8 = 0x40;
const MASK_RESERVED: u8 = 0x3C;
const MASK_VERSION: u8 = 0x03;

/// The DDP control octet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DdpControl {
    /// T: tagged buffer model.
    pub tagged: bool,
    /// L: last segment of the DDP message.
    pub last: bool,
    /// The four reserved bits (zero when we send; ignored on receipt, RFC 5041 §4.2).
    pub reserved: u8,
    /// DV: DDP version (two bits).
    pub version: u8,
}

impl DdpControl {
    /// Control octet for a segment we send: reserved zero, version 1.
    #[inline]
    pub const fn new(tagged: bool, last: bool) -> Self {
        DdpControl {
            tagged,
            last,
            reserved: 0,
            version: DDP_VERSION,
        }
    }

    /// Packs into the wire octet. Out-of-range `reserved`/`version` bits are masked off.
    #[inline]
    pub const fn to_octet(self) -> u8 {
        (if self.tagged { FLAG_TAGGED } else { 0 })
            | (if self.last { FLAG_LAST } else { 0 })
            | ((self.reserved << 2) & MASK_RESERVED)
            | (self.version & MASK_VERSION)
    }

    /// Unpacks a wire octet (every octet is a valid control field; the version is checked
    /// by the segment decoder).
    #[inline]
    pub const fn from_octet(b: u8) -> Self {
        DdpControl {
            tagged: b & FLAG_TAGGED != 0,
            last: b & FLAG_LAST != 0,
            reserved: (b & MASK_RESERVED) >> 2,
            version: b & MASK_VERSION,
        }
    }

    /// Length of the DDP header this control octet starts.
    #[inline]
    pub const fn header_len(self) -> usize {
        if self.tagged {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        }
    }
}

/// The untagged queues RDMAP defines (RFC 5040 §5.1; Linux siw `rdmap_untagged_qn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum QueueNumber {
    /// QN 0: Send, Send with Invalidate, Send with SE, Send with SE and Invalidate.
    Send = 0,
    /// QN 1: RDMA Read Request.
    ReadRequest = 1,
    /// QN 2: Terminate.
    Terminate = 2,
}

impl QueueNumber {
    /// Number of queues, for per-queue arrays.
    pub const COUNT: usize = 3;

    /// The QN field value.
    #[inline]
    pub const fn qn(self) -> u32 {
        self as u32
    }

    /// The queue a QN field names, if RDMAP defines it.
    #[inline]
    pub const fn from_qn(qn: u32) -> Option<Self> {
        match qn {
            0 => Some(QueueNumber::Send),
            1 => Some(QueueNumber::ReadRequest),
            2 => Some(QueueNumber::Terminate),
            _ => None,
        }
    }
}

impl fmt::Display for QueueNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            QueueNumber::Send => "send",
            QueueNumber::ReadRequest => "read-request",
            QueueNumber::Terminate => "terminate",
        };
        write!(f, "QN {} ({name})", self.qn())
    }
}

/// Per-queue Message Sequence Numbers for one direction of a stream.
///
/// RFC 5041 §5.1: the MSN of the first message on each untagged queue is 1 and it
/// increments by one per message, wrapping modulo 2^32. Used both to stamp outbound
/// messages and to check inbound ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsnCounters {
    next: [u32; QueueNumber::COUNT],
}

impl Default for MsnCounters {
    fn default() -> Self {
        Self::new()
    }
}

impl MsnCounters {
    /// Every queue starts at MSN 1.
    #[inline]
    pub const fn new() -> Self {
        MsnCounters {
            next: [1; QueueNumber::COUNT],
        }
    }

    /// The MSN the next message on `queue` carries (or is expected to carry).
    #[inline]
    pub const fn peek(&self, queue: QueueNumber) -> u32 {
        self.next[queue as usize]
    }

    /// Takes the next MSN for `queue` and advances the counter.
    #[inline]
    pub fn take(&mut self, queue: QueueNumber) -> u32 {
        let slot = &mut self.next[queue as usize];
        let msn = *slot;
        *slot = slot.wrapping_add(1);
        msn
    }
}
