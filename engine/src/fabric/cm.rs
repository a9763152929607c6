//! Connection-manager vocabulary (shaped after RDMA-CM): connection ids, private data and
//! the events a connection manager reports when polled.

use core::fmt;

use super::error::FabricError;

/// Capacity of [`CmPrivateData`]: the most private-data bytes any provider carries in a
/// connection message (512, the MPA field of RFC 5044 §7.1).
///
/// A device's own, usually smaller, limits per message are in
/// [`DeviceCaps::private_data`](super::DeviceCaps::private_data); portable upper layers
/// stay within the smallest of them (RPC-over-RDMA needs 8, RFC 8797).
pub const MAX_PRIVATE_DATA: usize = 512;

/// Which connection-manager message private data rides in; limits differ per message
/// on InfiniBand (the CM REQ, REP and REJ fields have different sizes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmMessage {
    /// `connect` (RDMA-CM connect request, MPA Request).
    Connect,
    /// `accept` (CM REP, MPA Reply).
    Accept,
    /// `reject` (CM REJ, MPA Reply with the R flag).
    Reject,
}

/// How much private data a device carries in each connection message.
///
/// Sending more than a limit is refused with [`FabricError::PrivateDataTooLong`] before
/// anything goes on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrivateDataLimits {
    /// Most bytes in a connect request.
    pub connect: usize,
    /// Most bytes in an acceptance.
    pub accept: usize,
    /// Most bytes in a rejection.
    pub reject: usize,
    /// Whether a rejection's private data reaches the peer as the whole `reject`-byte
    /// field, zero padded after what the rejecter sent. InfiniBand's CM REJ carries no
    /// length, so the receiver cannot tell the sent bytes from the padding.
    pub reject_padded: bool,
}

impl PrivateDataLimits {
    /// The same limit for every message, delivered with its exact length.
    pub const fn uniform(max: usize) -> PrivateDataLimits {
        PrivateDataLimits {
            connect: max,
            accept: max,
            reject: max,
            reject_padded: false,
        }
    }

    /// The limit for `message`.
    pub const fn of(&self, message: CmMessage) -> usize {
        match message {
            CmMessage::Connect => self.connect,
            CmMessage::Accept => self.accept,
            CmMessage::Reject => self.reject,
        }
    }

    /// Refuses `data` when it exceeds the limit for `message`.
    pub fn check(&self, message: CmMessage, data: &[u8]) -> Result<(), FabricError> {
        let max = self.of(message).min(MAX_PRIVATE_DATA);
        if data.len() > max {
            return Err(FabricError::PrivateDataTooLong {
                len: data.len(),
                max,
            });
        }
        Ok(())
    }
}

/// Identifies one connection within a process. Carried by connection events and by the
/// queue pair the connection was made for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conn#{}", self.0)
    }
}

/// Up to [`MAX_PRIVATE_DATA`] bytes exchanged with connect, accept and reject; stored
/// inline so events do not allocate.
#[derive(Clone, Copy)]
pub struct CmPrivateData {
    len: u16,
    bytes: [u8; MAX_PRIVATE_DATA],
}

impl CmPrivateData {
    /// No private data.
    pub const EMPTY: CmPrivateData = CmPrivateData {
        len: 0,
        bytes: [0; MAX_PRIVATE_DATA],
    };

    /// Copies `data`, which must not exceed [`MAX_PRIVATE_DATA`] bytes.
    pub fn new(data: &[u8]) -> Result<CmPrivateData, FabricError> {
        if data.len() > MAX_PRIVATE_DATA {
            return Err(FabricError::PrivateDataTooLong {
                len: data.len(),
                max: MAX_PRIVATE_DATA,
            });
        }
        let mut p = CmPrivateData::EMPTY;
        p.bytes[..data.len()].copy_from_slice(data);
        // MAX_PRIVATE_DATA fits in u16, checked just above.
        p.len = data.len() as u16;
        Ok(p)
    }

    /// The bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// Number of bytes.
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// True when there are none.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Default for CmPrivateData {
    fn default() -> Self {
        CmPrivateData::EMPTY
    }
}

impl PartialEq for CmPrivateData {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for CmPrivateData {}

impl fmt::Debug for CmPrivateData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CmPrivateData({:02x?})", self.as_bytes())
    }
}

/// A connection-manager event (RDMA-CM `rdma_cm_event`), polled, never called back.
///
/// `R` is the provider's pending-request type, handed to `accept` or `reject`.
#[derive(Debug)]
pub enum CmEvent<R> {
    /// A peer wants to connect to one of our listeners.
    ConnectRequest {
        /// Answer with `accept` or `reject`; dropping it rejects without private data.
        request: R,
        /// The peer's private data.
        private_data: CmPrivateData,
    },
    /// The connection is up; both directions may be used.
    Established {
        /// Which connection.
        conn: ConnId,
        /// The accepting peer's private data (active side), or empty (passive side).
        private_data: CmPrivateData,
    },
    /// The peer rejected our connect request (or went away before answering).
    Rejected {
        /// Which connection.
        conn: ConnId,
        /// The peer's private data.
        private_data: CmPrivateData,
    },
    /// No listener answered at the address.
    Unreachable {
        /// Which connection.
        conn: ConnId,
    },
    /// The connection ended (either side disconnected, or the peer vanished); its queue
    /// pair is in the disconnected state and flushes everything.
    Disconnected {
        /// Which connection.
        conn: ConnId,
    },
}

impl<R> CmEvent<R> {
    /// The connection the event is about (none for connect requests).
    pub fn conn(&self) -> Option<ConnId> {
        match self {
            CmEvent::ConnectRequest { .. } => None,
            CmEvent::Established { conn, .. }
            | CmEvent::Rejected { conn, .. }
            | CmEvent::Unreachable { conn }
            | CmEvent::Disconnected { conn } => Some(*conn),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_data_bounds() {
        let p = CmPrivateData::new(&[1, 2, 3]).unwrap();
        assert_eq!(p.as_bytes(), &[1, 2, 3]);
        assert_eq!(p.len(), 3);
        assert!(CmPrivateData::new(&[0; MAX_PRIVATE_DATA]).is_ok());
        assert!(matches!(
            CmPrivateData::new(&[0; MAX_PRIVATE_DATA + 1]),
            Err(FabricError::PrivateDataTooLong { len: 513, max: 512 })
        ));
        assert!(CmPrivateData::EMPTY.is_empty());
    }

    #[test]
    fn limits_per_message() {
        let l = PrivateDataLimits {
            connect: 56,
            accept: 196,
            reject: 148,
            reject_padded: true,
        };
        assert!(l.check(CmMessage::Connect, &[0; 56]).is_ok());
        assert!(matches!(
            l.check(CmMessage::Connect, &[0; 57]),
            Err(FabricError::PrivateDataTooLong { len: 57, max: 56 })
        ));
        assert!(l.check(CmMessage::Accept, &[0; 196]).is_ok());
        assert!(l.check(CmMessage::Reject, &[0; 149]).is_err());
        // A limit above the buffer capacity is clamped to it.
        let u = PrivateDataLimits::uniform(4096);
        assert!(matches!(
            u.check(CmMessage::Reject, &[0; 513]),
            Err(FabricError::PrivateDataTooLong { len: 513, max: 512 })
        ));
    }
}
