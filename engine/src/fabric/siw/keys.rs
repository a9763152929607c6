//! The device's STag table: one slot per registration or fast-registration slot,
//! indexed by the key's upper 24 bits, the low byte being the slot's generation.
//!
//! Inbound RDMA Writes, Read Requests and Read Responses, and every local scatter-gather
//! entry, are checked here before a byte moves, on the poller thread; registrations and
//! deregistrations may happen on any thread. So a slot is read without a lock: a sequence
//! counter is odd while a writer changes the slot, and a reader that sees it odd, or
//! changed across its reads, treats the key as invalid, as a NIC racing an invalidation
//! would. Writers are short and only race each other when a caller races itself.
//!
//! The table checks addresses only: registered memory lives in arenas the device keeps
//! mapped for its whole life, so an address that passes a check stays mapped.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;

use crate::fabric::error::FabricError;
use crate::fabric::mr::{key_generation, key_index, make_key, Access};
use crate::iwarp::terminate::RdmapProtectionError;

const ALLOCATED: u8 = 1;
const VALID: u8 = 2;
const FAST: u8 = 4;

/// Why a key check failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// No such slot, a stale generation, or a slot that is not currently valid.
    InvalidKey,
    /// The registration belongs to another protection domain.
    WrongPd,
    /// The registration does not grant the access needed.
    Access,
    /// The range falls outside the registration (or wraps).
    Bounds,
    /// Invalidation of a key that is not a fast-registration key.
    NotFast,
    /// A fast registration that reuses the slot's key, exceeds its size, or asks for an
    /// invalid access combination.
    BadFastReg,
}

impl Fault {
    /// The RDMAP Remote Protection code a peer is told for this fault (RFC 5040 §7.2).
    pub(crate) const fn protection_code(self) -> RdmapProtectionError {
        match self {
            Fault::InvalidKey => RdmapProtectionError::InvalidStag,
            Fault::WrongPd => RdmapProtectionError::StagNotAssociated,
            Fault::Access => RdmapProtectionError::AccessRights,
            Fault::Bounds => RdmapProtectionError::BaseOrBounds,
            Fault::NotFast | Fault::BadFastReg => RdmapProtectionError::CannotInvalidate,
        }
    }
}

#[derive(Default)]
struct Slot {
    seq: AtomicU32,
    key: AtomicU32,
    pd: AtomicU32,
    access: AtomicU8,
    flags: AtomicU8,
    start: AtomicU64,
    len: AtomicU64,
    max_len: AtomicU64,
}

impl Slot {
    /// Makes the sequence odd (fields changing); returns the even value it had.
    fn begin(&self) -> u32 {
        let mut cur = self.seq.load(Ordering::Relaxed);
        loop {
            if cur & 1 == 1 {
                std::hint::spin_loop();
                cur = self.seq.load(Ordering::Relaxed);
                continue;
            }
            match self.seq.compare_exchange_weak(
                cur,
                cur.wrapping_add(1),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(s) => cur = s,
            }
        }
        // Orders the odd mark before the field stores, for readers' acquire fence.
        fence(Ordering::Release);
        cur
    }

    fn end(&self, was: u32) {
        self.seq.store(was.wrapping_add(2), Ordering::Release);
    }
}

/// A consistent copy of one slot.
#[derive(Debug, Clone, Copy)]
struct View {
    key: u32,
    pd: u32,
    access: Access,
    flags: u8,
    start: u64,
    len: u64,
}

/// The device's key table.
pub(crate) struct KeyTable {
    slots: Box<[Slot]>,
    /// Free slot indices; registration and deregistration only.
    free: Mutex<Vec<u32>>,
}

impl KeyTable {
    pub(crate) fn new(cap: u32) -> KeyTable {
        KeyTable {
            slots: (0..cap).map(|_| Slot::default()).collect(),
            // Low indices first, so keys stay small and readable in captures.
            free: Mutex::new((0..cap).rev().collect()),
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.slots.len()
    }

    fn take_free(&self) -> Result<u32, FabricError> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        free.pop().ok_or(FabricError::Exhausted {
            what: "memory registration slots",
            max: self.slots.len(),
        })
    }

    fn fill(&self, idx: u32, pd: u32, access: Access, flags: u8, range: (u64, u64, u64)) -> u32 {
        let (start, len, max_len) = range;
        let s = &self.slots[idx as usize];
        let was = s.begin();
        let key = make_key(
            idx,
            key_generation(s.key.load(Ordering::Relaxed)).wrapping_add(1),
        );
        s.key.store(key, Ordering::Relaxed);
        s.pd.store(pd, Ordering::Relaxed);
        s.access.store(access.bits(), Ordering::Relaxed);
        s.start.store(start, Ordering::Relaxed);
        s.len.store(len, Ordering::Relaxed);
        s.max_len.store(max_len, Ordering::Relaxed);
        s.flags.store(flags, Ordering::Relaxed);
        s.end(was);
        key
    }

    /// Registers `[start, start + len)` for protection domain `pd`; returns slot and key.
    pub(crate) fn register(
        &self,
        pd: u32,
        access: Access,
        start: u64,
        len: u64,
    ) -> Result<(u32, u32), FabricError> {
        let idx = self.take_free()?;
        let key = self.fill(idx, pd, access, ALLOCATED | VALID, (start, len, len));
        Ok((idx, key))
    }

    /// Allocates a fast-registration slot covering up to `max_len` bytes, initially
    /// invalid; returns slot and key.
    pub(crate) fn alloc_fast(&self, pd: u32, max_len: u64) -> Result<(u32, u32), FabricError> {
        let idx = self.take_free()?;
        let key = self.fill(idx, pd, Access::NONE, ALLOCATED | FAST, (0, 0, max_len));
        Ok((idx, key))
    }

    /// Deregisters slot `idx`: every key it issued dies and the slot is reusable.
    pub(crate) fn release(&self, idx: u32) {
        let Some(s) = self.slots.get(idx as usize) else {
            return;
        };
        let was = s.begin();
        let key = s.key.load(Ordering::Relaxed);
        s.key.store(
            make_key(idx, key_generation(key).wrapping_add(1)),
            Ordering::Relaxed,
        );
        s.flags.store(0, Ordering::Relaxed);
        s.end(was);
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        free.push(idx);
    }

    fn view(&self, key: u32) -> Result<View, Fault> {
        let s = self
            .slots
            .get(key_index(key) as usize)
            .ok_or(Fault::InvalidKey)?;
        let s1 = s.seq.load(Ordering::Acquire);
        if s1 & 1 == 1 {
            return Err(Fault::InvalidKey);
        }
        let v = View {
            key: s.key.load(Ordering::Relaxed),
            pd: s.pd.load(Ordering::Relaxed),
            access: Access::from_bits_truncate(s.access.load(Ordering::Relaxed)),
            flags: s.flags.load(Ordering::Relaxed),
            start: s.start.load(Ordering::Relaxed),
            len: s.len.load(Ordering::Relaxed),
        };
        fence(Ordering::Acquire);
        if s.seq.load(Ordering::Relaxed) != s1 {
            return Err(Fault::InvalidKey);
        }
        Ok(v)
    }

    /// Checks that `key` grants `need` on `[addr, addr + len)` in protection domain
    /// `pd`. Zero-length ranges still need a valid key in the right domain.
    #[inline]
    pub(crate) fn check(
        &self,
        key: u32,
        pd: u32,
        need: Access,
        addr: u64,
        len: u64,
    ) -> Result<(), Fault> {
        let v = self.view(key)?;
        if v.key != key || v.flags & (ALLOCATED | VALID) != ALLOCATED | VALID {
            return Err(Fault::InvalidKey);
        }
        if v.pd != pd {
            return Err(Fault::WrongPd);
        }
        if !v.access.contains(need) {
            return Err(Fault::Access);
        }
        let rel = addr.checked_sub(v.start).ok_or(Fault::Bounds)?;
        let end = rel.checked_add(len).ok_or(Fault::Bounds)?;
        if end > v.len {
            return Err(Fault::Bounds);
        }
        Ok(())
    }

    /// Executes a fast registration: the slot of `key` (protection domain `pd`) now
    /// covers `[start, start + len)` with `access`, under `key`.
    pub(crate) fn fast_reg(
        &self,
        key: u32,
        pd: u32,
        access: Access,
        start: u64,
        len: u64,
    ) -> Result<(), Fault> {
        let s = self
            .slots
            .get(key_index(key) as usize)
            .ok_or(Fault::InvalidKey)?;
        let was = s.begin();
        let flags = s.flags.load(Ordering::Relaxed);
        let cur = s.key.load(Ordering::Relaxed);
        let verdict = if flags & ALLOCATED == 0 {
            Err(Fault::InvalidKey)
        } else if flags & FAST == 0 {
            Err(Fault::NotFast)
        } else if s.pd.load(Ordering::Relaxed) != pd {
            Err(Fault::WrongPd)
        } else if key_generation(cur) == key_generation(key)
            || !access.is_valid()
            || len > s.max_len.load(Ordering::Relaxed)
        {
            Err(Fault::BadFastReg)
        } else {
            Ok(())
        };
        if verdict.is_ok() {
            s.key.store(key, Ordering::Relaxed);
            s.access.store(access.bits(), Ordering::Relaxed);
            s.start.store(start, Ordering::Relaxed);
            s.len.store(len, Ordering::Relaxed);
            s.flags.store(ALLOCATED | FAST | VALID, Ordering::Relaxed);
        }
        s.end(was);
        verdict
    }

    /// Whether `key` could be invalidated now by protection domain `pd`.
    pub(crate) fn can_invalidate(&self, key: u32, pd: u32) -> Result<(), Fault> {
        let v = self.view(key)?;
        if v.key != key || v.flags & (ALLOCATED | VALID) != ALLOCATED | VALID {
            return Err(Fault::InvalidKey);
        }
        if v.flags & FAST == 0 {
            return Err(Fault::NotFast);
        }
        if v.pd != pd {
            return Err(Fault::WrongPd);
        }
        Ok(())
    }

    /// Invalidates fast-registration key `key` of protection domain `pd` (local
    /// invalidation, or a peer's Send with Invalidate).
    pub(crate) fn invalidate(&self, key: u32, pd: u32) -> Result<(), Fault> {
        let s = self
            .slots
            .get(key_index(key) as usize)
            .ok_or(Fault::InvalidKey)?;
        let was = s.begin();
        let flags = s.flags.load(Ordering::Relaxed);
        let verdict = if s.key.load(Ordering::Relaxed) != key
            || flags & (ALLOCATED | VALID) != ALLOCATED | VALID
        {
            Err(Fault::InvalidKey)
        } else if flags & FAST == 0 {
            Err(Fault::NotFast)
        } else if s.pd.load(Ordering::Relaxed) != pd {
            Err(Fault::WrongPd)
        } else {
            Ok(())
        };
        if verdict.is_ok() {
            s.flags.store(ALLOCATED | FAST, Ordering::Relaxed);
        }
        s.end(was);
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::mr::next_key;

    #[test]
    fn check_covers_key_pd_access_and_bounds() {
        let t = KeyTable::new(4);
        let (_, key) = t
            .register(1, Access::LOCAL_WRITE | Access::REMOTE_READ, 0x1000, 50)
            .unwrap();
        assert_eq!(
            t.check(key, 1, Access::REMOTE_READ, 0x1000 + 10, 40),
            Ok(())
        );
        let bad = [
            (key, 1, Access::REMOTE_READ, 0x1000 + 10, 41, Fault::Bounds),
            (key, 1, Access::REMOTE_READ, 0xfff, 1, Fault::Bounds),
            (key, 1, Access::REMOTE_READ, u64::MAX, 2, Fault::Bounds),
            (key, 2, Access::REMOTE_READ, 0x1000, 1, Fault::WrongPd),
            (key, 1, Access::REMOTE_WRITE, 0x1000, 1, Fault::Access),
            (next_key(key), 1, Access::NONE, 0x1000, 1, Fault::InvalidKey),
            (
                make_key(99, 0),
                1,
                Access::NONE,
                0x1000,
                1,
                Fault::InvalidKey,
            ),
        ];
        for (k, pd, need, addr, len, fault) in bad {
            assert_eq!(t.check(k, pd, need, addr, len), Err(fault));
        }
    }

    #[test]
    fn released_keys_die_and_slots_move_to_new_generations() {
        let t = KeyTable::new(1);
        let (idx, k1) = t.register(1, Access::NONE, 0x1000, 10).unwrap();
        assert!(matches!(
            t.register(1, Access::NONE, 0, 1),
            Err(FabricError::Exhausted { .. })
        ));
        t.release(idx);
        assert_eq!(
            t.check(k1, 1, Access::NONE, 0x1000, 1),
            Err(Fault::InvalidKey)
        );
        let (idx2, k2) = t.register(1, Access::NONE, 0x1000, 10).unwrap();
        assert_eq!(idx, idx2);
        assert_ne!(k1, k2);
        assert_eq!(t.check(k2, 1, Access::NONE, 0x1000, 10), Ok(()));
    }

    #[test]
    fn fast_slots_need_fresh_keys_and_invalidate_once() {
        let t = KeyTable::new(2);
        let (_, plain) = t.register(1, Access::ALL, 0x1000, 10).unwrap();
        let (_, k0) = t.alloc_fast(1, 64).unwrap();
        assert_eq!(t.check(k0, 1, Access::NONE, 0, 0), Err(Fault::InvalidKey));
        assert_eq!(
            t.fast_reg(k0, 1, Access::ALL, 0x1000, 8),
            Err(Fault::BadFastReg)
        );
        let k1 = next_key(k0);
        assert_eq!(
            t.fast_reg(k1, 2, Access::ALL, 0x1000, 8),
            Err(Fault::WrongPd)
        );
        assert_eq!(
            t.fast_reg(k1, 1, Access::ALL, 0x1000, 65),
            Err(Fault::BadFastReg)
        );
        assert_eq!(
            t.fast_reg(k1, 1, Access::REMOTE_WRITE, 0x1000, 8),
            Err(Fault::BadFastReg)
        );
        t.fast_reg(k1, 1, Access::ALL, 0x1000, 8).unwrap();
        assert_eq!(t.check(k1, 1, Access::REMOTE_WRITE, 0x1000, 8), Ok(()));
        assert_eq!(
            t.check(k0, 1, Access::NONE, 0x1000, 1),
            Err(Fault::InvalidKey)
        );
        assert_eq!(t.can_invalidate(plain, 1), Err(Fault::NotFast));
        assert_eq!(t.invalidate(plain, 1), Err(Fault::NotFast));
        assert_eq!(t.invalidate(k1, 2), Err(Fault::WrongPd));
        assert_eq!(t.can_invalidate(k1, 1), Ok(()));
        t.invalidate(k1, 1).unwrap();
        assert_eq!(t.invalidate(k1, 1), Err(Fault::InvalidKey));
        assert_eq!(
            t.check(k1, 1, Access::NONE, 0x1000, 1),
            Err(Fault::InvalidKey)
        );
        assert_eq!(
            t.fast_reg(next_key(plain), 1, Access::NONE, 0, 4),
            Err(Fault::NotFast)
        );
    }
}
