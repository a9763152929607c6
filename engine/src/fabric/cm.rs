//! Connection-manager vocabulary (shaped after RDMA-CM): connection ids, private data and
//! the events a connection manager reports when polled.

use core::fmt;

use super::error::FabricError;

/// Most private-data bytes any provider carries in a connection message.
///
/// 196 bytes is the InfiniBand CM REP limit; iWARP (MPA) allows 512, but a limit every
/// provider can honour keeps upper layers portable. RPC-over-RDMA needs 8 (RFC 8797).
/// Note for a verbs provider over IB: RDMA-CM leaves only 56 bytes in a connect request
/// and 148 in a reject, so it reports [`FabricError::PrivateDataTooLong`] earlier there.
pub const MAX_PRIVATE_DATA: usize = 196;

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
pub struct PrivateData {
    len: u8,
    bytes: [u8; MAX_PRIVATE_DATA],
}

impl PrivateData {
    /// No private data.
    pub const EMPTY: PrivateData = PrivateData {
        len: 0,
        bytes: [0; MAX_PRIVATE_DATA],
    };

    /// Copies `data`, which must not exceed [`MAX_PRIVATE_DATA`] bytes.
    pub fn new(data: &[u8]) -> Result<PrivateData, FabricError> {
        if data.len() > MAX_PRIVATE_DATA {
            return Err(FabricError::PrivateDataTooLong {
                len: data.len(),
                max: MAX_PRIVATE_DATA,
            });
        }
        let mut p = PrivateData::EMPTY;
        p.bytes[..data.len()].copy_from_slice(data);
        // MAX_PRIVATE_DATA < 256, checked just above.
        p.len = data.len() as u8;
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

impl Default for PrivateData {
    fn default() -> Self {
        PrivateData::EMPTY
    }
}

impl PartialEq for PrivateData {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for PrivateData {}

impl fmt::Debug for PrivateData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PrivateData({:02x?})", self.as_bytes())
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
        private_data: PrivateData,
    },
    /// The connection is up; both directions may be used.
    Established {
        /// Which connection.
        conn: ConnId,
        /// The accepting peer's private data (active side), or empty (passive side).
        private_data: PrivateData,
    },
    /// The peer rejected our connect request (or went away before answering).
    Rejected {
        /// Which connection.
        conn: ConnId,
        /// The peer's private data.
        private_data: PrivateData,
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
        let p = PrivateData::new(&[1, 2, 3]).unwrap();
        assert_eq!(p.as_bytes(), &[1, 2, 3]);
        assert_eq!(p.len(), 3);
        assert!(PrivateData::new(&[0; MAX_PRIVATE_DATA]).is_ok());
        assert!(matches!(
            PrivateData::new(&[0; MAX_PRIVATE_DATA + 1]),
            Err(FabricError::PrivateDataTooLong { len: 197, max: 196 })
        ));
        assert!(PrivateData::EMPTY.is_empty());
    }
}
