//! The network-wide registration table and the only code that touches registered
//! memory.
//!
//! Both endpoints live in this process, so data moves with plain copies between
//! arena pointers; but every byte range is first resolved against the table (key and
//! generation, protection domain, access rights, bounds, and finally the arena's own
//! extent), so a request can never read or write outside what its key grants.

use std::sync::Arc;

use rpcrdma_pools::Arena;

use super::config::SIM_MAX_SGE;
use crate::fabric::error::FabricError;
use crate::fabric::mr::{key_index, make_key, next_key, Access};
use crate::fabric::types::Sge;

/// What a table slot holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum MrKind {
    /// `reg_mr`: fixed memory, valid until deregistered.
    Plain,
    /// `alloc_fast_mr`: mapped by FastReg requests, up to `max_len` bytes.
    Fast { max_len: u64 },
}

#[derive(Debug)]
pub(super) struct MrSlot {
    /// Held by a handle (not deregistered).
    live: bool,
    /// The current key: slot index and generation.
    pub(super) key: u32,
    /// Accesses through `key` are allowed (fast slots: mapped and not invalidated).
    pub(super) valid: bool,
    pub(super) pd: u32,
    pub(super) kind: MrKind,
    arena: Option<Arc<Arena>>,
    addr: u64,
    len: u64,
    access: Access,
}

impl MrSlot {
    const fn dead(key: u32) -> Self {
        MrSlot {
            live: false,
            key,
            valid: false,
            pd: u32::MAX,
            kind: MrKind::Plain,
            arena: None,
            addr: 0,
            len: 0,
            access: Access::NONE,
        }
    }
}

/// Why a FastReg, LocalInvalidate or remote invalidation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyOpError {
    /// The key names no live slot of this kind in this protection domain.
    NoSuchKey,
    /// FastReg: the key's generation equals the slot's current one.
    StaleGeneration,
    /// FastReg: the region cannot be resolved or exceeds the slot.
    BadRegion,
    /// FastReg: the access combination is invalid.
    BadAccess,
}

/// Resolved memory: up to [`SIM_MAX_SGE`] pointer ranges, each checked.
pub(super) struct Segments {
    segs: [(*mut u8, usize); SIM_MAX_SGE],
    n: usize,
    total: u64,
}

impl Segments {
    pub(super) const fn new() -> Self {
        Segments {
            segs: [(core::ptr::null_mut(), 0); SIM_MAX_SGE],
            n: 0,
            total: 0,
        }
    }

    pub(super) fn total(&self) -> u64 {
        self.total
    }

    fn push(&mut self, ptr: *mut u8, len: usize) -> bool {
        if self.n == SIM_MAX_SGE {
            return false;
        }
        self.segs[self.n] = (ptr, len);
        self.n += 1;
        self.total += len as u64;
        true
    }
}

#[derive(Debug)]
pub(super) struct MrTable {
    /// Slot 0 is never used, so no valid key is below 256.
    slots: Vec<MrSlot>,
    free: Vec<u32>,
    max: usize,
}

impl MrTable {
    pub(super) fn new(max: usize) -> Self {
        MrTable {
            slots: vec![MrSlot::dead(0)],
            free: Vec::new(),
            max,
        }
    }

    fn take_slot(&mut self) -> Result<u32, FabricError> {
        if let Some(i) = self.free.pop() {
            return Ok(i);
        }
        let i = self.slots.len();
        if i > self.max {
            return Err(FabricError::Exhausted {
                what: "memory registrations",
                max: self.max,
            });
        }
        self.slots.push(MrSlot::dead(make_key(i as u32, 0)));
        Ok(i as u32)
    }

    /// Registers `[offset, offset + len)` of `arena`; returns the key.
    pub(super) fn register(
        &mut self,
        pd: u32,
        arena: &Arc<Arena>,
        offset: usize,
        len: usize,
        access: Access,
    ) -> Result<u32, FabricError> {
        if len == 0 {
            return Err(FabricError::BadLength(len));
        }
        if !access.is_valid() {
            return Err(FabricError::InvalidAccess(access));
        }
        if offset.checked_add(len).is_none_or(|end| end > arena.len()) {
            return Err(FabricError::OutOfRange {
                offset,
                len,
                arena_len: arena.len(),
            });
        }
        let i = self.take_slot()?;
        let s = &mut self.slots[i as usize];
        // A reused slot moves to its next generation, so keys of the old registration
        // stay dead.
        let key = next_key(s.key);
        *s = MrSlot {
            live: true,
            key,
            valid: true,
            pd,
            kind: MrKind::Plain,
            arena: Some(Arc::clone(arena)),
            addr: arena.base() as u64 + offset as u64,
            len: len as u64,
            access,
        };
        Ok(key)
    }

    /// Allocates an unmapped fast-registration slot; returns its initial key.
    pub(super) fn alloc_fast(&mut self, pd: u32, max_len: u64) -> Result<u32, FabricError> {
        let i = self.take_slot()?;
        let s = &mut self.slots[i as usize];
        let key = next_key(s.key);
        *s = MrSlot {
            live: true,
            key,
            valid: false,
            pd,
            kind: MrKind::Fast { max_len },
            arena: None,
            addr: 0,
            len: 0,
            access: Access::NONE,
        };
        Ok(key)
    }

    /// Deregisters the slot of `key` (its handle was dropped).
    pub(super) fn release(&mut self, key: u32) {
        let i = key_index(key);
        let Some(s) = self.slots.get_mut(i as usize) else {
            return;
        };
        if !s.live || i == 0 {
            return;
        }
        *s = MrSlot::dead(s.key);
        self.free.push(i);
    }

    fn live_slot(&self, key: u32, pd: u32) -> Option<&MrSlot> {
        let s = self.slots.get(key_index(key) as usize)?;
        (s.live && s.key == key && s.pd == pd).then_some(s)
    }

    /// Checks that `key` grants `need` over `[addr, addr + len)` in protection domain
    /// `pd`, and returns the first byte.
    pub(super) fn resolve(
        &self,
        key: u32,
        pd: u32,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Option<*mut u8> {
        let s = self.live_slot(key, pd)?;
        if !s.valid || !s.access.contains(need) {
            return None;
        }
        let end = addr.checked_add(len)?;
        if addr < s.addr || end > s.addr + s.len {
            return None;
        }
        let arena = s.arena.as_ref()?;
        // Derive the pointer from the arena's, not from the integer, so it keeps the
        // mapping's provenance.
        let off = usize::try_from(addr.checked_sub(arena.base() as u64)?).ok()?;
        let len = usize::try_from(len).ok()?;
        if off.checked_add(len)? > arena.len() {
            return None;
        }
        // SAFETY: `off + len` lies within the arena (checked just above).
        Some(unsafe { arena.base().add(off) })
    }

    /// Resolves a scatter-gather list.
    pub(super) fn resolve_sgl(&self, sgl: &[Sge], pd: u32, need: Access) -> Option<Segments> {
        let mut out = Segments::new();
        for sge in sgl {
            let p = self.resolve(sge.lkey, pd, sge.addr, u64::from(sge.length), need)?;
            if !out.push(p, sge.length as usize) {
                return None;
            }
        }
        Some(out)
    }

    /// Resolves one contiguous remote range.
    pub(super) fn resolve_remote(
        &self,
        rkey: u32,
        pd: u32,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Option<Segments> {
        let p = self.resolve(rkey, pd, addr, len, need)?;
        let mut out = Segments::new();
        out.push(p, usize::try_from(len).ok()?);
        Some(out)
    }

    /// Executes a FastReg: maps the fast slot of `key` over `region` with `access`.
    pub(super) fn fast_reg(
        &mut self,
        pd: u32,
        key: u32,
        region: Sge,
        access: Access,
    ) -> Result<(), KeyOpError> {
        let i = key_index(key) as usize;
        let slot = self.slots.get(i).ok_or(KeyOpError::NoSuchKey)?;
        let MrKind::Fast { max_len } = slot.kind else {
            return Err(KeyOpError::NoSuchKey);
        };
        if !slot.live || slot.pd != pd || i == 0 {
            return Err(KeyOpError::NoSuchKey);
        }
        if slot.key == key {
            return Err(KeyOpError::StaleGeneration);
        }
        if !access.is_valid() {
            return Err(KeyOpError::BadAccess);
        }
        let len = u64::from(region.length);
        if len == 0 || len > max_len {
            return Err(KeyOpError::BadRegion);
        }
        let under = self
            .live_slot(region.lkey, pd)
            .filter(|s| s.valid)
            .ok_or(KeyOpError::BadRegion)?;
        let end = region.addr.checked_add(len).ok_or(KeyOpError::BadRegion)?;
        if region.addr < under.addr || end > under.addr + under.len {
            return Err(KeyOpError::BadRegion);
        }
        let arena = under.arena.clone().ok_or(KeyOpError::BadRegion)?;
        let s = &mut self.slots[i];
        s.key = key;
        s.valid = true;
        s.arena = Some(arena);
        s.addr = region.addr;
        s.len = len;
        s.access = access;
        Ok(())
    }

    /// Invalidates fast-registration key `key` (local or remote invalidation).
    pub(super) fn invalidate(&mut self, pd: u32, key: u32) -> Result<(), KeyOpError> {
        let i = key_index(key) as usize;
        let s = self.slots.get_mut(i).ok_or(KeyOpError::NoSuchKey)?;
        if i == 0 || !s.live || s.key != key || s.pd != pd || !matches!(s.kind, MrKind::Fast { .. })
        {
            return Err(KeyOpError::NoSuchKey);
        }
        s.valid = false;
        // The mapping's memory is no longer reachable through this slot; let it go.
        s.arena = None;
        Ok(())
    }
}

/// Copies `src` into `dst`, segment by segment, `src.total()` bytes (the caller checked
/// that `dst` is large enough).
pub(super) fn copy_segments(src: &Segments, dst: &Segments) {
    let (mut i, mut j) = (0usize, 0usize);
    let (mut si, mut dj) = (0usize, 0usize);
    while i < src.n && j < dst.n {
        let (sp, sl) = src.segs[i];
        let (dp, dl) = dst.segs[j];
        let n = (sl - si).min(dl - dj);
        if n > 0 {
            // SAFETY: both ranges were resolved against live registrations whose arenas
            // are kept mapped by the table for the duration of this call, and lie inside
            // those arenas. `copy` tolerates overlap (a queue pair may read or write the
            // very buffer it sends from).
            unsafe { core::ptr::copy(sp.add(si), dp.add(dj), n) };
        }
        si += n;
        dj += n;
        if si == sl {
            i += 1;
            si = 0;
        }
        if dj == dl {
            j += 1;
            dj = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::mr::key_index;
    use rpcrdma_pools::{ArenaOptions, HugePages};

    fn arena() -> Arc<Arena> {
        let opts = ArenaOptions::new(8192).hugepages(HugePages::Never);
        Arc::new(Arena::new(&opts).unwrap())
    }

    #[test]
    fn keys_resolve_only_within_bounds_domain_and_rights() {
        let a = arena();
        let base = a.base() as u64;
        let mut t = MrTable::new(16);
        let k = t.register(1, &a, 100, 200, Access::LOCAL_WRITE).unwrap();
        let ok =
            |t: &MrTable, key, pd, addr, len, need| t.resolve(key, pd, addr, len, need).is_some();
        assert!(ok(&t, k, 1, base + 100, 200, Access::LOCAL_WRITE));
        assert!(
            !ok(&t, k, 1, base + 99, 1, Access::NONE),
            "before the start"
        );
        assert!(!ok(&t, k, 1, base + 300, 1, Access::NONE), "past the end");
        assert!(!ok(&t, k, 1, base + 100, 201, Access::NONE), "too long");
        assert!(!ok(&t, k, 2, base + 100, 1, Access::NONE), "other domain");
        assert!(
            !ok(&t, k, 1, base + 100, 1, Access::REMOTE_READ),
            "no right"
        );
        assert!(
            !ok(&t, next_key(k), 1, base + 100, 1, Access::NONE),
            "other generation"
        );
        assert!(!ok(&t, k, 1, u64::MAX, 2, Access::NONE), "wrapping range");
        assert!(
            !ok(&t, 0, 1, base, 1, Access::NONE),
            "slot 0 is never valid"
        );
    }

    #[test]
    fn a_reused_slot_moves_to_a_new_generation() {
        let a = arena();
        let base = a.base() as u64;
        let mut t = MrTable::new(1);
        let k1 = t.register(1, &a, 0, 64, Access::ALL).unwrap();
        assert!(matches!(
            t.register(1, &a, 0, 64, Access::ALL),
            Err(FabricError::Exhausted { max: 1, .. })
        ));
        t.release(k1);
        let k2 = t.register(1, &a, 0, 64, Access::ALL).unwrap();
        assert_eq!(key_index(k1), key_index(k2));
        assert_ne!(k1, k2);
        assert!(t.resolve(k1, 1, base, 1, Access::NONE).is_none());
        assert!(t.resolve(k2, 1, base, 1, Access::NONE).is_some());
        assert!(matches!(
            t.register(1, &a, 0, 0, Access::ALL),
            Err(FabricError::BadLength(0))
        ));
    }

    #[test]
    fn fast_slot_maps_invalidates_and_needs_fresh_keys() {
        let a = arena();
        let base = a.base() as u64;
        let mut t = MrTable::new(16);
        let plain = t.register(1, &a, 0, 4096, Access::LOCAL_WRITE).unwrap();
        let k0 = t.alloc_fast(1, 1024).unwrap();
        assert!(
            t.resolve(k0, 1, base, 1, Access::NONE).is_none(),
            "starts unmapped"
        );
        let region = Sge::new(base + 512, 1024, plain);
        assert_eq!(
            t.fast_reg(1, k0, region, Access::REMOTE_READ),
            Err(KeyOpError::StaleGeneration)
        );
        let k1 = next_key(k0);
        let too_long = Sge::new(base + 512, 1025, plain);
        assert_eq!(
            t.fast_reg(1, k1, too_long, Access::REMOTE_READ),
            Err(KeyOpError::BadRegion)
        );
        let outside = Sge::new(base + 4000, 200, plain);
        assert_eq!(
            t.fast_reg(1, k1, outside, Access::REMOTE_READ),
            Err(KeyOpError::BadRegion)
        );
        assert_eq!(
            t.fast_reg(2, k1, region, Access::REMOTE_READ),
            Err(KeyOpError::NoSuchKey)
        );
        assert_eq!(
            t.fast_reg(1, k1, region, Access::REMOTE_WRITE),
            Err(KeyOpError::BadAccess)
        );
        assert_eq!(
            t.fast_reg(1, next_key(plain), region, Access::NONE),
            Err(KeyOpError::NoSuchKey)
        );
        t.fast_reg(1, k1, region, Access::REMOTE_READ).unwrap();
        assert!(t
            .resolve(k1, 1, base + 512, 1024, Access::REMOTE_READ)
            .is_some());
        assert!(t
            .resolve(k1, 1, base + 511, 2, Access::REMOTE_READ)
            .is_none());
        assert!(t
            .resolve(k1, 1, base + 512, 1, Access::REMOTE_WRITE)
            .is_none());
        assert_eq!(
            t.invalidate(1, plain),
            Err(KeyOpError::NoSuchKey),
            "plain keys stay"
        );
        assert_eq!(
            t.invalidate(1, k0),
            Err(KeyOpError::NoSuchKey),
            "old generation"
        );
        t.invalidate(1, k1).unwrap();
        assert!(t
            .resolve(k1, 1, base + 512, 1, Access::REMOTE_READ)
            .is_none());
    }

    #[test]
    fn copies_cross_uneven_segment_boundaries() {
        let a = arena();
        let base = a.base() as u64;
        let mut t = MrTable::new(4);
        let k = t.register(1, &a, 0, 8192, Access::LOCAL_WRITE).unwrap();
        for i in 0..100u8 {
            // SAFETY: inside the 8 KiB arena.
            unsafe { *a.base().add(usize::from(i)) = i };
        }
        let src = [
            Sge::new(base, 7, k),
            Sge::new(base + 7, 0, k),
            Sge::new(base + 7, 93, k),
        ];
        let dst = [Sge::new(base + 4096, 50, k), Sge::new(base + 5000, 60, k)];
        let s = t.resolve_sgl(&src, 1, Access::NONE).unwrap();
        let d = t.resolve_sgl(&dst, 1, Access::LOCAL_WRITE).unwrap();
        assert_eq!((s.total(), d.total()), (100, 110));
        copy_segments(&s, &d);
        // SAFETY: inside the arena; nothing else touches it.
        let got = |off: usize, n: usize| unsafe {
            std::slice::from_raw_parts(a.base().add(off), n).to_vec()
        };
        assert_eq!(got(4096, 50), (0..50).collect::<Vec<u8>>());
        assert_eq!(got(5000, 50), (50..100).collect::<Vec<u8>>());
        assert_eq!(got(5050, 10), vec![0; 10], "nothing past the message");
    }
}
