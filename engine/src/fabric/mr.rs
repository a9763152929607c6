//! Memory-registration vocabulary shared by every provider: access rights and the key
//! format.
//!
//! Keys are `index << 8 | generation`, as in verbs fast registration: the index names a
//! slot in the device's registration table and the low byte changes every time the slot
//! is re-registered, so a key handed out for one RPC is dead once the slot moves on.
//!
//! Neither part is predictable: the software key table (`fabric::keytable`) draws the
//! generation byte, and the index bits above its slot count, from a keyed random source
//! at every registration, and a requester's core moves each fast-registration key to a
//! random generation byte ([`retag_key`]) rather than the next one, so a peer holding
//! one key learns nothing about its neighbours or its successor.

use core::fmt;

/// Access rights of a registration (`ibv_access_flags`, the subset RPC-over-RDMA uses).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u8);

impl Access {
    /// Local read only (always granted).
    pub const NONE: Access = Access(0);
    /// The local device may write (receives, RDMA Read sinks).
    pub const LOCAL_WRITE: Access = Access(1);
    /// Peers may RDMA Write. Requires `LOCAL_WRITE`, as in verbs.
    pub const REMOTE_WRITE: Access = Access(2);
    /// Peers may RDMA Read.
    pub const REMOTE_READ: Access = Access(4);
    /// Every right.
    pub const ALL: Access = Access(7);

    /// True when every right in `other` is granted by `self`.
    #[inline]
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// The raw bits (bit 0 local write, bit 1 remote write, bit 2 remote read).
    #[inline]
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Rights from raw bits; unknown bits are dropped.
    #[inline]
    pub const fn from_bits_truncate(bits: u8) -> Access {
        Access(bits & Access::ALL.0)
    }

    /// True when the combination is one verbs accepts (remote write needs local write).
    #[inline]
    pub const fn is_valid(self) -> bool {
        !self.contains(Access::REMOTE_WRITE) || self.contains(Access::LOCAL_WRITE)
    }
}

impl core::ops::BitOr for Access {
    type Output = Access;
    #[inline]
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut l = f.debug_set();
        if self.contains(Access::LOCAL_WRITE) {
            l.entry(&"LOCAL_WRITE");
        }
        if self.contains(Access::REMOTE_WRITE) {
            l.entry(&"REMOTE_WRITE");
        }
        if self.contains(Access::REMOTE_READ) {
            l.entry(&"REMOTE_READ");
        }
        l.finish()
    }
}

/// Largest slot index a key can carry (24 bits).
pub const MAX_KEY_INDEX: u32 = (1 << 24) - 1;

/// Builds a key from a slot index and a generation byte.
#[inline]
pub const fn make_key(index: u32, generation: u8) -> u32 {
    (index << 8) | generation as u32
}

/// The slot index of a key.
#[inline]
pub const fn key_index(key: u32) -> u32 {
    key >> 8
}

/// The generation byte of a key.
#[inline]
pub const fn key_generation(key: u32) -> u8 {
    key as u8
}

/// The key the next re-registration of `key`'s slot carries: same index, next
/// generation byte (verbs `ibv_inc_rkey`).
#[inline]
pub const fn next_key(key: u32) -> u32 {
    make_key(key_index(key), key_generation(key).wrapping_add(1))
}

/// The key a fast-registration slot moves to when re-keyed with random byte `tag`: same
/// index, generation `tag`, or the one after when `tag` is the current generation (the
/// key must change, or a peer holding the old key could reach the new mapping).
#[inline]
pub const fn retag_key(key: u32, tag: u8) -> u32 {
    let generation = if tag == key_generation(key) {
        tag.wrapping_add(1)
    } else {
        tag
    };
    make_key(key_index(key), generation)
}

/// Implements [`MemoryRegion`](super::MemoryRegion) for a software provider's
/// registration handle (shm, siw, sim) with fields `key: u32`, `addr: u64`, `len: usize`
/// and `fast: bool`: one key serves as both local and remote key, and a fast-registration
/// slot moves to its key's next generation on `rekey` (like `ib_update_fast_reg_key`).
macro_rules! soft_memory_region {
    ($t:ty) => {
        impl $crate::fabric::MemoryRegion for $t {
            fn lkey(&self) -> u32 {
                self.key
            }

            fn rkey(&self) -> u32 {
                self.key
            }

            fn addr(&self) -> u64 {
                self.addr
            }

            fn len(&self) -> usize {
                self.len
            }

            fn rekey(&mut self) -> u32 {
                if self.fast {
                    self.key = $crate::fabric::mr::next_key(self.key);
                }
                self.key
            }

            fn rekey_with(&mut self, tag: u8) -> u32 {
                if self.fast {
                    self.key = $crate::fabric::mr::retag_key(self.key, tag);
                }
                self.key
            }
        }
    };
}
pub(crate) use soft_memory_region;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_parts_round_trip_and_generation_wraps() {
        let k = make_key(0x12_3456, 0xff);
        assert_eq!(key_index(k), 0x12_3456);
        assert_eq!(key_generation(k), 0xff);
        let n = next_key(k);
        assert_eq!(key_index(n), 0x12_3456);
        assert_eq!(key_generation(n), 0);
        assert_ne!(n, k);
    }

    #[test]
    fn retagging_keeps_the_index_and_always_changes_the_key() {
        let k = make_key(0x42, 7);
        assert_eq!(retag_key(k, 0x99), make_key(0x42, 0x99));
        assert_eq!(retag_key(k, 7), make_key(0x42, 8), "same tag: moved on");
        assert_eq!(retag_key(make_key(1, 0xff), 0xff), make_key(1, 0));
    }

    #[test]
    fn remote_write_requires_local_write() {
        assert!(!Access::REMOTE_WRITE.is_valid());
        assert!((Access::REMOTE_WRITE | Access::LOCAL_WRITE).is_valid());
        assert!(Access::REMOTE_READ.is_valid());
        assert!(Access::ALL.contains(Access::REMOTE_READ | Access::LOCAL_WRITE));
        assert!(!Access::LOCAL_WRITE.contains(Access::REMOTE_READ));
        assert_eq!(Access::from_bits_truncate(0xff), Access::ALL);
    }
}
