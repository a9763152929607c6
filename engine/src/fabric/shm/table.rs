//! The device's key table: the shared software key table
//! ([`crate::fabric::keytable`]) with, beside each key, where its bytes live (arena index
//! in the device's arena list and offset), so a checked range resolves to a local
//! pointer without another lookup.
//!
//! Lookups happen on the data path (every scatter-gather entry, every rkey), possibly on
//! another thread than the one re-registering; the shared table reads a slot without a
//! lock and fails a lookup racing a re-registration, as a NIC racing an invalidation
//! would. The table lives in this process only: the peer never reads it, it asks us.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::fabric::keytable::{KeyFault, KeyTable, SlotExtra};
use crate::fabric::mr::Access;
use crate::fabric::FabricError;
use crate::fabric::Sge;

/// Why a key check failed.
pub(crate) type Fault = KeyFault;

/// Where a checked range lives: arena index in the device's arena list and offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Place {
    pub arena: u32,
    pub offset: u64,
}

/// A slot's [`Place`] of its first byte, kept beside the key.
#[derive(Default)]
pub(crate) struct Where {
    arena: AtomicU32,
    offset: AtomicU64,
}

impl SlotExtra for Where {
    type Value = Place;

    #[inline]
    fn load(&self) -> Place {
        Place {
            arena: self.arena.load(Ordering::Relaxed),
            offset: self.offset.load(Ordering::Relaxed),
        }
    }

    #[inline]
    fn store(&self, v: Place) {
        self.arena.store(v.arena, Ordering::Relaxed);
        self.offset.store(v.offset, Ordering::Relaxed);
    }
}

/// What a new registration covers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mapping {
    pub arena: u32,
    pub offset: u64,
    pub iova: u64,
    pub len: u64,
}

impl Mapping {
    fn place(&self) -> Place {
        Place {
            arena: self.arena,
            offset: self.offset,
        }
    }
}

/// The device's key table.
pub(crate) struct MrTable(KeyTable<Where>);

impl MrTable {
    /// A table of `cap` slots whose keys come from `seed` (`None`: a secret from the OS).
    pub(crate) fn new(cap: u32, seed: Option<u64>) -> MrTable {
        MrTable(KeyTable::build(cap, 0, seed))
    }

    /// Number of slots.
    pub(crate) fn capacity(&self) -> usize {
        self.0.capacity()
    }

    /// Registers `m` for protection domain `pd` with `access`; returns slot and key.
    pub(crate) fn register(
        &self,
        pd: u16,
        access: Access,
        m: &Mapping,
    ) -> Result<(u32, u32), FabricError> {
        self.0
            .register(u32::from(pd), access, m.iova, m.len, m.place())
    }

    /// Allocates a fast-registration slot (initially invalid); returns slot and key.
    pub(crate) fn alloc_fast(&self, pd: u16, max_len: u64) -> Result<(u32, u32), FabricError> {
        self.0.alloc_fast(u32::from(pd), max_len)
    }

    /// Deregisters slot `idx`: its key dies at once and the slot becomes reusable.
    pub(crate) fn release(&self, idx: u32) {
        self.0.release(idx)
    }

    /// Checks that `key` grants `need` on `[addr, addr + len)` in protection domain `pd`
    /// and says where those bytes live.
    #[inline]
    pub(crate) fn lookup(
        &self,
        key: u32,
        pd: u16,
        need: Access,
        addr: u64,
        len: u64,
    ) -> Result<Place, Fault> {
        let g = self.0.check(key, u32::from(pd), need, addr, len)?;
        Ok(Place {
            arena: g.extra.arena,
            // Cannot wrap for a registration the device accepted (offset + len within
            // its arena), but a wrapped offset must fail the arena bounds check, not
            // panic.
            offset: g.extra.offset.wrapping_add(g.rel),
        })
    }

    /// Executes a FastReg work request: slot `key_index(key)` of protection domain `pd`
    /// now covers `region` (which a valid local key of `pd` must cover) with `access`
    /// under `key`.
    pub(crate) fn fast_reg_over(
        &self,
        key: u32,
        pd: u16,
        access: Access,
        region: &Sge,
    ) -> Result<(), Fault> {
        let r = (region.lkey, region.addr, u64::from(region.length));
        self.0
            .fast_reg_over(key, u32::from(pd), access, r, |g| Place {
                arena: g.extra.arena,
                offset: g.extra.offset.wrapping_add(g.rel),
            })
            .map(|_| ())
    }

    /// Invalidates fast-registration key `key` of protection domain `pd` (local
    /// invalidation, or a peer's Send With Invalidate).
    pub(crate) fn invalidate(&self, key: u32, pd: u16) -> Result<(), Fault> {
        self.0.invalidate(key, u32::from(pd))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::mr::{make_key, next_key};

    fn m(len: u64) -> Mapping {
        Mapping {
            arena: 3,
            offset: 100,
            iova: 0x1000,
            len,
        }
    }

    #[test]
    fn lookup_says_where_the_bytes_live_and_refuses_like_the_shared_table() {
        let t = MrTable::new(4, None);
        let (_, key) = t
            .register(1, Access::LOCAL_WRITE | Access::REMOTE_READ, &m(50))
            .unwrap();
        assert_eq!(
            t.lookup(key, 1, Access::REMOTE_READ, 0x1000 + 10, 40),
            Ok(Place {
                arena: 3,
                offset: 110
            })
        );
        let bad = [
            (key, 1, Access::REMOTE_READ, 0x1000 + 10, 41, Fault::Bounds),
            (key, 2, Access::REMOTE_READ, 0x1000, 1, Fault::WrongPd),
            (key, 1, Access::REMOTE_WRITE, 0x1000, 1, Fault::Access),
            (next_key(key), 1, Access::NONE, 0x1000, 1, Fault::UnknownKey),
            (
                make_key(99, 0),
                1,
                Access::NONE,
                0x1000,
                1,
                Fault::UnknownKey,
            ),
        ];
        for (k, pd, need, addr, len, fault) in bad {
            assert_eq!(t.lookup(k, pd, need, addr, len), Err(fault));
        }
    }

    #[test]
    fn fast_slots_take_the_mapping_place_and_invalidate() {
        let t = MrTable::new(2, None);
        let (idx, plain) = t.register(1, Access::ALL, &m(10)).unwrap();
        let (_, k0) = t.alloc_fast(1, 64).unwrap();
        let k1 = next_key(k0);
        let region = Sge::new(0x1002, 8, plain);
        assert_eq!(
            t.fast_reg_over(k0, 1, Access::ALL, &region),
            Err(Fault::StaleKey)
        );
        assert_eq!(
            t.fast_reg_over(k1, 1, Access::ALL, &Sge::new(0x1004, 8, plain)),
            Err(Fault::BadRegion)
        );
        t.fast_reg_over(k1, 1, Access::ALL, &region).unwrap();
        assert_eq!(
            t.lookup(k1, 1, Access::REMOTE_WRITE, 0x1003, 6),
            Ok(Place {
                arena: 3,
                offset: 103
            })
        );
        assert_eq!(t.invalidate(plain, 1), Err(Fault::NotFast));
        t.invalidate(k1, 1).unwrap();
        assert_eq!(
            t.lookup(k1, 1, Access::NONE, 0x1002, 1),
            Err(Fault::Invalid)
        );
        t.release(idx);
        let (idx2, k2) = t.register(1, Access::NONE, &m(10)).unwrap();
        assert_eq!((idx2, t.0.slot_index(k2)), (idx, t.0.slot_index(plain)));
        assert_ne!(k2, plain);
    }
}
