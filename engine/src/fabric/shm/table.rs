//! The device's key table: one entry per registration or fast-registration slot, indexed
//! by the key's upper 24 bits.
//!
//! Lookups happen on the data path (every scatter-gather entry, every rkey), possibly on
//! another thread than the one re-registering, so an entry is a small seqlock of atomics:
//! writers mark the control word busy, update the fields, then publish a new control
//! word; readers check that the word did not change around their field reads. A reader
//! racing a re-registration fails the lookup, as a NIC racing an invalidation would.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::fabric::error::FabricError;
use crate::fabric::mr::{key_generation, key_index, make_key, Access};

// Control word: key (bits 0..32), protection domain (32..48), access (48..56), flags.
const VALID: u64 = 1 << 56;
const FAST: u64 = 1 << 57;
const BUSY: u64 = 1 << 58;
const ALLOCATED: u64 = 1 << 59;

#[inline]
fn word(key: u32, pd: u16, access: Access, flags: u64) -> u64 {
    u64::from(key) | (u64::from(pd) << 32) | (u64::from(access.bits()) << 48) | flags
}

#[inline]
fn w_key(w: u64) -> u32 {
    w as u32
}

#[inline]
fn w_pd(w: u64) -> u16 {
    (w >> 32) as u16
}

#[inline]
fn w_access(w: u64) -> Access {
    Access::from_bits_truncate((w >> 48) as u8)
}

/// Why a key check failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// No such slot, or the key's generation is not the slot's current one.
    UnknownKey,
    /// The slot is not currently valid (invalidated or never mapped).
    Invalid,
    /// The registration belongs to another protection domain.
    WrongPd,
    /// The registration does not grant the access needed.
    Access,
    /// The range falls outside the registration.
    Bounds,
    /// The slot is not a fast-registration slot.
    NotFast,
    /// A fast registration reused the slot's current key, exceeded the slot's maximum
    /// length, or asked for an invalid access combination.
    BadFastReg,
}

/// Where a checked range lives: arena index in the device's arena list and offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Place {
    pub arena: u32,
    pub offset: u64,
}

#[derive(Default)]
struct Entry {
    word: AtomicU64,
    arena: AtomicU32,
    /// Offset of `iova` within the arena.
    offset: AtomicU64,
    /// Virtual address of the first byte covered.
    iova: AtomicU64,
    len: AtomicU64,
    /// Fast slots: most bytes a mapping may cover.
    max_len: AtomicU64,
}

/// What a new registration covers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mapping {
    pub arena: u32,
    pub offset: u64,
    pub iova: u64,
    pub len: u64,
}

/// The device's key table.
pub(crate) struct MrTable {
    entries: Box<[Entry]>,
    /// Free slot indices (setup path only).
    free: Mutex<Vec<u32>>,
}

impl MrTable {
    /// A table of `cap` slots.
    pub(crate) fn new(cap: u32) -> MrTable {
        let entries: Box<[Entry]> = (0..cap).map(|_| Entry::default()).collect();
        // Hand out low indices first: keys stay small and readable in logs.
        let free = (0..cap).rev().collect();
        MrTable {
            entries,
            free: Mutex::new(free),
        }
    }

    /// Number of slots.
    pub(crate) fn capacity(&self) -> usize {
        self.entries.len()
    }

    fn alloc(&self) -> Result<(u32, &Entry), FabricError> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        let idx = free.pop().ok_or(FabricError::Exhausted {
            what: "memory registration slots",
            max: self.entries.len(),
        })?;
        Ok((idx, &self.entries[idx as usize]))
    }

    /// Marks `e` busy so readers fail while its fields change, provided `check` accepts
    /// the current word. Returns the old word.
    fn begin_write_if<E>(e: &Entry, check: impl Fn(u64) -> Result<(), E>) -> Result<u64, E> {
        let mut cur = e.word.load(Ordering::Relaxed);
        loop {
            if cur & BUSY != 0 {
                // Another writer of this slot is mid-update (only a caller racing itself
                // gets here); it finishes within a few stores.
                std::hint::spin_loop();
                cur = e.word.load(Ordering::Relaxed);
                continue;
            }
            check(cur)?;
            match e.word.compare_exchange_weak(
                cur,
                cur | BUSY,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(w) => cur = w,
            }
        }
        // Orders the busy mark before the field stores, for readers' acquire fence.
        fence(Ordering::Release);
        Ok(cur)
    }

    fn begin_write(e: &Entry) -> u64 {
        match Self::begin_write_if::<core::convert::Infallible>(e, |_| Ok(())) {
            Ok(w) => w,
            Err(never) => match never {},
        }
    }

    fn set_fields(e: &Entry, m: &Mapping) {
        e.arena.store(m.arena, Ordering::Relaxed);
        e.offset.store(m.offset, Ordering::Relaxed);
        e.iova.store(m.iova, Ordering::Relaxed);
        e.len.store(m.len, Ordering::Relaxed);
    }

    /// Registers `m` for protection domain `pd` with `access`; returns slot and key.
    pub(crate) fn register(
        &self,
        pd: u16,
        access: Access,
        m: &Mapping,
    ) -> Result<(u32, u32), FabricError> {
        let (idx, e) = self.alloc()?;
        let old = Self::begin_write(e);
        let key = make_key(idx, key_generation(w_key(old)).wrapping_add(1));
        Self::set_fields(e, m);
        e.word
            .store(word(key, pd, access, VALID | ALLOCATED), Ordering::Release);
        Ok((idx, key))
    }

    /// Allocates a fast-registration slot (initially invalid); returns slot and key.
    pub(crate) fn alloc_fast(&self, pd: u16, max_len: u64) -> Result<(u32, u32), FabricError> {
        let (idx, e) = self.alloc()?;
        let old = Self::begin_write(e);
        let key = make_key(idx, key_generation(w_key(old)).wrapping_add(1));
        Self::set_fields(
            e,
            &Mapping {
                arena: 0,
                offset: 0,
                iova: 0,
                len: 0,
            },
        );
        e.max_len.store(max_len, Ordering::Relaxed);
        e.word.store(
            word(key, pd, Access::NONE, FAST | ALLOCATED),
            Ordering::Release,
        );
        Ok((idx, key))
    }

    /// Deregisters slot `idx`: its key dies at once and the slot becomes reusable.
    pub(crate) fn release(&self, idx: u32) {
        let Some(e) = self.entries.get(idx as usize) else {
            return;
        };
        let old = Self::begin_write(e);
        // Bump the generation so that no key issued before can match a later use.
        let key = make_key(idx, key_generation(w_key(old)).wrapping_add(1));
        e.word.store(u64::from(key), Ordering::Release);
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        free.push(idx);
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
        let e = self
            .entries
            .get(key_index(key) as usize)
            .ok_or(Fault::UnknownKey)?;
        let w1 = e.word.load(Ordering::Acquire);
        if w1 & BUSY != 0 || w_key(w1) != key {
            return Err(Fault::UnknownKey);
        }
        if w1 & VALID == 0 {
            return Err(Fault::Invalid);
        }
        if w_pd(w1) != pd {
            return Err(Fault::WrongPd);
        }
        if !w_access(w1).contains(need) {
            return Err(Fault::Access);
        }
        let arena = e.arena.load(Ordering::Relaxed);
        let offset = e.offset.load(Ordering::Relaxed);
        let iova = e.iova.load(Ordering::Relaxed);
        let rlen = e.len.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        if e.word.load(Ordering::Relaxed) != w1 {
            return Err(Fault::Invalid);
        }
        let rel = addr.checked_sub(iova).ok_or(Fault::Bounds)?;
        let end = rel.checked_add(len).ok_or(Fault::Bounds)?;
        if end > rlen {
            return Err(Fault::Bounds);
        }
        Ok(Place {
            arena,
            offset: offset + rel,
        })
    }

    /// Executes a fast registration: slot `key_index(key)` of protection domain `pd`
    /// now covers `m` with `access` under `key`.
    pub(crate) fn fast_reg(
        &self,
        key: u32,
        pd: u16,
        access: Access,
        m: &Mapping,
    ) -> Result<(), Fault> {
        let e = self
            .entries
            .get(key_index(key) as usize)
            .ok_or(Fault::UnknownKey)?;
        Self::begin_write_if(e, |old| {
            if old & ALLOCATED == 0 {
                Err(Fault::UnknownKey)
            } else if old & FAST == 0 {
                Err(Fault::NotFast)
            } else if w_pd(old) != pd {
                Err(Fault::WrongPd)
            } else if key_generation(w_key(old)) == key_generation(key)
                || !access.is_valid()
                || m.len > e.max_len.load(Ordering::Relaxed)
            {
                Err(Fault::BadFastReg)
            } else {
                Ok(())
            }
        })?;
        Self::set_fields(e, m);
        e.word.store(
            word(key, pd, access, VALID | FAST | ALLOCATED),
            Ordering::Release,
        );
        Ok(())
    }

    /// Invalidates fast-registration key `key` of protection domain `pd` (local
    /// invalidation, or a peer's Send With Invalidate).
    pub(crate) fn invalidate(&self, key: u32, pd: u16) -> Result<(), Fault> {
        let e = self
            .entries
            .get(key_index(key) as usize)
            .ok_or(Fault::UnknownKey)?;
        let mut cur = e.word.load(Ordering::Relaxed);
        loop {
            if cur & BUSY != 0 {
                std::hint::spin_loop();
                cur = e.word.load(Ordering::Relaxed);
                continue;
            }
            if w_key(cur) != key || cur & ALLOCATED == 0 {
                return Err(Fault::UnknownKey);
            }
            if cur & FAST == 0 {
                return Err(Fault::NotFast);
            }
            if w_pd(cur) != pd {
                return Err(Fault::WrongPd);
            }
            if cur & VALID == 0 {
                return Err(Fault::Invalid);
            }
            match e.word.compare_exchange_weak(
                cur,
                cur & !VALID,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Ok(()),
                Err(w) => cur = w,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::mr::next_key;

    fn m(len: u64) -> Mapping {
        Mapping {
            arena: 3,
            offset: 100,
            iova: 0x1000,
            len,
        }
    }

    #[test]
    fn lookup_checks_key_pd_access_and_bounds() {
        let t = MrTable::new(4);
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
        assert_eq!(
            t.lookup(key, 1, Access::REMOTE_READ, 0x1000 + 10, 41),
            Err(Fault::Bounds)
        );
        assert_eq!(
            t.lookup(key, 1, Access::REMOTE_READ, 0xfff, 1),
            Err(Fault::Bounds)
        );
        assert_eq!(
            t.lookup(key, 1, Access::REMOTE_READ, u64::MAX, 2),
            Err(Fault::Bounds)
        );
        assert_eq!(
            t.lookup(key, 2, Access::REMOTE_READ, 0x1000, 1),
            Err(Fault::WrongPd)
        );
        assert_eq!(
            t.lookup(key, 1, Access::REMOTE_WRITE, 0x1000, 1),
            Err(Fault::Access)
        );
        assert_eq!(
            t.lookup(next_key(key), 1, Access::NONE, 0x1000, 1),
            Err(Fault::UnknownKey)
        );
        assert_eq!(
            t.lookup(make_key(99, 0), 1, Access::NONE, 0x1000, 1),
            Err(Fault::UnknownKey)
        );
    }

    #[test]
    fn released_keys_die_and_slots_get_new_generations() {
        let t = MrTable::new(1);
        let (idx, k1) = t.register(1, Access::NONE, &m(10)).unwrap();
        assert!(matches!(
            t.register(1, Access::NONE, &m(10)),
            Err(FabricError::Exhausted { .. })
        ));
        t.release(idx);
        assert_eq!(
            t.lookup(k1, 1, Access::NONE, 0x1000, 1),
            Err(Fault::UnknownKey)
        );
        let (idx2, k2) = t.register(1, Access::NONE, &m(10)).unwrap();
        assert_eq!(idx, idx2);
        assert_ne!(k1, k2);
        assert_eq!(key_index(k1), key_index(k2));
    }

    #[test]
    fn fast_slots_rekey_and_invalidate() {
        let t = MrTable::new(2);
        let (_, plain) = t.register(1, Access::ALL, &m(10)).unwrap();
        let (_, k0) = t.alloc_fast(1, 64).unwrap();
        assert_eq!(t.lookup(k0, 1, Access::NONE, 0, 0), Err(Fault::Invalid));
        // The current key cannot be reused: the generation must move on.
        assert_eq!(
            t.fast_reg(k0, 1, Access::ALL, &m(8)),
            Err(Fault::BadFastReg)
        );
        let k1 = next_key(k0);
        assert_eq!(t.fast_reg(k1, 2, Access::ALL, &m(8)), Err(Fault::WrongPd));
        assert_eq!(
            t.fast_reg(k1, 1, Access::ALL, &m(65)),
            Err(Fault::BadFastReg)
        );
        assert_eq!(
            t.fast_reg(k1, 1, Access::REMOTE_WRITE, &m(8)),
            Err(Fault::BadFastReg)
        );
        t.fast_reg(k1, 1, Access::ALL, &m(8)).unwrap();
        assert!(t.lookup(k1, 1, Access::REMOTE_WRITE, 0x1000, 8).is_ok());
        assert_eq!(
            t.lookup(k0, 1, Access::NONE, 0x1000, 1),
            Err(Fault::UnknownKey)
        );
        assert_eq!(t.invalidate(k1, 2), Err(Fault::WrongPd));
        assert_eq!(t.invalidate(plain, 1), Err(Fault::NotFast));
        t.invalidate(k1, 1).unwrap();
        assert_eq!(t.invalidate(k1, 1), Err(Fault::Invalid));
        assert_eq!(
            t.lookup(k1, 1, Access::NONE, 0x1000, 1),
            Err(Fault::Invalid)
        );
        let k2 = next_key(k1);
        t.fast_reg(k2, 1, Access::REMOTE_READ, &m(4)).unwrap();
        assert!(t.lookup(k2, 1, Access::REMOTE_READ, 0x1003, 1).is_ok());
        assert_eq!(
            t.fast_reg(k2, 1, Access::NONE, &m(4)),
            Err(Fault::BadFastReg)
        );
        assert_eq!(
            t.fast_reg(next_key(plain), 1, Access::NONE, &m(4)),
            Err(Fault::NotFast)
        );
    }
}
