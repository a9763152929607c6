//! The arenas one protection domain has registered, and the announcement channels that
//! tell its connected peers about them.
//!
//! A peer maps every arena announced to it, read-write, so what it is told is what it can
//! reach: the list is per protection domain (the engine gives each connection its own),
//! never the device's. Indices are never reused within a domain, and announcement
//! channels are per queue pair, so a peer cannot confuse an old arena with a new one; the
//! whole list (and with it the last reference the provider holds to each arena) goes when
//! the domain, its registrations and its queue pairs are gone.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use rpcrdma_pools::Arena;

use super::segment::Segment;
use super::sock;
use super::table::Place;
use crate::fabric::FabricError;

/// A channel that tells one connected peer about its protection domain's arenas: the
/// sending end of a socket pair whose other end the peer holds, and the counter in our
/// connection segment the peer checks before it reads from its end.
pub(crate) struct Announcer {
    pub(crate) tx: OwnedFd,
    pub(crate) seg: Segment,
}

/// Wire form of an arena announcement: index, reserved, length.
pub(crate) const ANNOUNCE_LEN: usize = 16;

/// One announcement as the peer reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Announcement {
    /// The arena's index in the announcing protection domain.
    pub index: u32,
    /// Its length in bytes, as the announcer claims.
    pub len: u64,
}

impl Announcement {
    /// Encodes for the wire.
    pub(crate) fn encode(&self) -> [u8; ANNOUNCE_LEN] {
        let mut msg = [0u8; ANNOUNCE_LEN];
        msg[..4].copy_from_slice(&self.index.to_le_bytes());
        msg[8..].copy_from_slice(&self.len.to_le_bytes());
        msg
    }

    /// Decodes a received message; anything but exactly [`ANNOUNCE_LEN`] bytes with
    /// zero reserved bytes is refused.
    pub(crate) fn decode(b: &[u8]) -> Result<Announcement, FabricError> {
        if b.len() != ANNOUNCE_LEN {
            return Err(FabricError::Protocol(
                "arena announcement of the wrong size",
            ));
        }
        if b[4..8] != [0; 4] {
            return Err(FabricError::Protocol(
                "arena announcement reserved bytes set",
            ));
        }
        let mut len = [0u8; 8];
        len.copy_from_slice(&b[8..16]);
        Ok(Announcement {
            index: u32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            len: u64::from_le_bytes(len),
        })
    }
}

fn announce(a: &Announcer, index: u32, arena: &Arena) -> Result<(), FabricError> {
    let fd = arena.fd().ok_or(FabricError::NotShareable)?;
    let msg = Announcement {
        index,
        len: arena.len() as u64,
    }
    .encode();
    sock::send(&a.tx, &msg, &[fd]).map_err(|err| FabricError::Os {
        op: "announce arena",
        err,
    })?;
    // The peer reads its socket only for arenas below this count, so the descriptor
    // is already queued when it looks.
    a.seg.arenas_announced().store(index + 1, Ordering::Release);
    Ok(())
}

/// The arenas of one protection domain (append-only while the domain lives).
pub(crate) struct PdArenas {
    slots: Box<[OnceLock<Arc<Arena>>]>,
    count: AtomicU32,
    /// Announcement channels of the domain's queue pairs (setup paths only).
    announcers: Mutex<Vec<Weak<Announcer>>>,
}

impl PdArenas {
    /// Room for `max` arenas.
    pub(crate) fn new(max: u32) -> PdArenas {
        PdArenas {
            slots: (0..max).map(|_| OnceLock::new()).collect(),
            count: AtomicU32::new(0),
            announcers: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Weak<Announcer>>> {
        self.announcers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Arenas in the list.
    pub(crate) fn count(&self) -> u32 {
        self.count.load(Ordering::Acquire)
    }

    /// Index of `arena` in the list, adding it (and announcing it to the domain's
    /// connected peers) first if needed; `added` is told when it was new. Only
    /// shareable arenas qualify: the peer must be able to map them.
    pub(crate) fn index_of(
        &self,
        arena: &Arc<Arena>,
        added: impl FnOnce(),
    ) -> Result<u32, FabricError> {
        if arena.fd().is_none() {
            return Err(FabricError::NotShareable);
        }
        let mut announcers = self.lock();
        let count = self.count.load(Ordering::Relaxed);
        for i in 0..count {
            if let Some(a) = self.slots[i as usize].get() {
                if Arc::ptr_eq(a, arena) {
                    return Ok(i);
                }
            }
        }
        let slot = self
            .slots
            .get(count as usize)
            .ok_or(FabricError::Exhausted {
                what: "registered arenas of a protection domain",
                max: self.slots.len(),
            })?;
        // The slot is past `count`, so nobody has set or read it yet.
        let _ = slot.set(arena.clone());
        self.count.store(count + 1, Ordering::Release);
        added();
        announcers.retain(|w| w.strong_count() > 0);
        for a in announcers.iter().filter_map(Weak::upgrade) {
            // A peer that cannot be told (gone, or its socket full) fails its queue pair
            // when it meets the arena; other connections are unaffected.
            let _ = announce(&a, count, arena);
        }
        Ok(count)
    }

    /// Registers a new connection's announcement channel and tells it about every
    /// arena of the domain so far.
    pub(crate) fn add_announcer(&self, a: &Arc<Announcer>) -> Result<(), FabricError> {
        let mut announcers = self.lock();
        let count = self.count.load(Ordering::Relaxed);
        for i in 0..count {
            if let Some(arena) = self.slots[i as usize].get() {
                announce(a, i, arena)?;
            }
        }
        announcers.retain(|w| w.strong_count() > 0);
        announcers.push(Arc::downgrade(a));
        Ok(())
    }

    /// Local address of `len` bytes at `place`, checked against the arena's bounds.
    #[inline]
    pub(crate) fn local_ptr(&self, place: Place, len: u64) -> Option<*mut u8> {
        let arena = self.slots.get(place.arena as usize)?.get()?;
        let end = place.offset.checked_add(len)?;
        if end > arena.len() as u64 {
            return None;
        }
        Some(arena.base().wrapping_add(place.offset as usize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_round_trip_and_garbage_is_refused() {
        let a = Announcement {
            index: 7,
            len: 1 << 33,
        };
        assert_eq!(Announcement::decode(&a.encode()).unwrap(), a);
        assert!(Announcement::decode(&a.encode()[..15]).is_err());
        let mut bad = a.encode();
        bad[5] = 1;
        assert!(Announcement::decode(&bad).is_err());
    }
}
