//! The network-wide registration table and the only code that touches registered
//! memory.
//!
//! Both endpoints live in this process, so data moves with plain copies between
//! arena pointers; but every byte range is first resolved against the table (key and
//! generation, protection domain, access rights, bounds, and finally the arena's own
//! extent), so a request can never read or write outside what its key grants.

use std::fmt;
use std::sync::Arc;

use rpcrdma_pools::Arena;

use super::config::SIM_MAX_SGE;
use crate::fabric::keytable::{KeyFault, KeyTable};
use crate::fabric::mr::{Access, MAX_KEY_INDEX};
use crate::fabric::FabricError;
use crate::fabric::Sge;

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

/// The network-wide key table: the shared software key table (slot 0 never issued, so
/// no valid key is below 256) and, beside it, the arena each live mapping lies in,
/// which the table keeps mapped while a key can reach it.
pub(super) struct MrTable {
    keys: KeyTable,
    /// By slot index; `None` while the slot maps nothing.
    arenas: Vec<Option<Arc<Arena>>>,
}

impl fmt::Debug for MrTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MrTable")
            .field("capacity", &self.keys.capacity())
            .field("mapped", &self.arenas.iter().flatten().count())
            .finish()
    }
}

impl MrTable {
    pub(super) fn new(max: usize, seed: Option<u64>) -> Self {
        let max = u32::try_from(max)
            .unwrap_or(MAX_KEY_INDEX)
            .min(MAX_KEY_INDEX);
        MrTable {
            keys: KeyTable::build(max, 1, seed),
            arenas: Vec::new(),
        }
    }

    fn set_arena(&mut self, index: u32, arena: Option<Arc<Arena>>) {
        let i = index as usize;
        if self.arenas.len() <= i {
            if arena.is_none() {
                return;
            }
            self.arenas.resize(i + 1, None);
        }
        self.arenas[i] = arena;
    }

    /// Registrations and fast-registration slots allocated and not released.
    #[cfg(any(test, feature = "testing"))]
    pub(super) fn in_use(&self) -> usize {
        self.keys.in_use()
    }

    /// True when `key` currently grants access to something (see `KeyTable::is_live`).
    #[cfg(any(test, feature = "testing"))]
    pub(super) fn is_live(&self, key: u32) -> bool {
        self.keys.is_live(key)
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
        let addr = arena.base() as u64 + offset as u64;
        let (index, key) = self.keys.register(pd, access, addr, len as u64, ())?;
        self.set_arena(index, Some(Arc::clone(arena)));
        Ok(key)
    }

    /// Allocates an unmapped fast-registration slot; returns its initial key.
    pub(super) fn alloc_fast(&mut self, pd: u32, max_len: u64) -> Result<u32, FabricError> {
        let (index, key) = self.keys.alloc_fast(pd, max_len)?;
        self.set_arena(index, None);
        Ok(key)
    }

    /// Deregisters the slot of `key` (its handle was dropped).
    pub(super) fn release(&mut self, key: u32) {
        let index = self.keys.slot_index(key);
        self.keys.release(index);
        self.set_arena(index, None);
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
        let g = self.keys.check(key, pd, need, addr, len).ok()?;
        let arena = self.arenas.get(g.index as usize)?.as_ref()?;
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
    ) -> Result<(), KeyFault> {
        if region.length == 0 {
            return Err(KeyFault::BadRegion);
        }
        let under = self.keys.fast_reg_over(
            key,
            pd,
            access,
            (region.lkey, region.addr, u64::from(region.length)),
            |_| (),
        )?;
        let arena = self.arenas.get(under.index as usize).cloned().flatten();
        self.set_arena(self.keys.slot_index(key), arena);
        Ok(())
    }

    /// Invalidates fast-registration key `key` (local or remote invalidation).
    pub(super) fn invalidate(&mut self, pd: u32, key: u32) -> Result<(), KeyFault> {
        self.keys.invalidate(key, pd)?;
        // The mapping's memory is no longer reachable through this slot; let it go.
        self.set_arena(self.keys.slot_index(key), None);
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
    use crate::fabric::mr::next_key;
    use rpcrdma_pools::{ArenaOptions, HugePages};

    fn arena() -> Arc<Arena> {
        let opts = ArenaOptions::new(8192).hugepages(HugePages::Never);
        Arc::new(Arena::new(&opts).unwrap())
    }

    #[test]
    fn keys_resolve_only_within_bounds_domain_and_rights() {
        let a = arena();
        let base = a.base() as u64;
        let mut t = MrTable::new(16, None);
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
        let mut t = MrTable::new(1, None);
        let k1 = t.register(1, &a, 0, 64, Access::ALL).unwrap();
        assert!(matches!(
            t.register(1, &a, 0, 64, Access::ALL),
            Err(FabricError::Exhausted { max: 1, .. })
        ));
        t.release(k1);
        let k2 = t.register(1, &a, 0, 64, Access::ALL).unwrap();
        assert_eq!(t.keys.slot_index(k1), t.keys.slot_index(k2));
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
        let mut t = MrTable::new(16, None);
        let plain = t.register(1, &a, 0, 4096, Access::LOCAL_WRITE).unwrap();
        let k0 = t.alloc_fast(1, 1024).unwrap();
        assert!(
            t.resolve(k0, 1, base, 1, Access::NONE).is_none(),
            "starts unmapped"
        );
        let region = Sge::new(base + 512, 1024, plain);
        assert_eq!(
            t.fast_reg(1, k0, region, Access::REMOTE_READ),
            Err(KeyFault::StaleKey)
        );
        let k1 = next_key(k0);
        let too_long = Sge::new(base + 512, 1025, plain);
        assert_eq!(
            t.fast_reg(1, k1, too_long, Access::REMOTE_READ),
            Err(KeyFault::TooLong)
        );
        let outside = Sge::new(base + 4000, 200, plain);
        assert_eq!(
            t.fast_reg(1, k1, outside, Access::REMOTE_READ),
            Err(KeyFault::BadRegion)
        );
        assert_eq!(
            t.fast_reg(2, k1, region, Access::REMOTE_READ),
            Err(KeyFault::WrongPd)
        );
        assert_eq!(
            t.fast_reg(1, k1, region, Access::REMOTE_WRITE),
            Err(KeyFault::BadAccess)
        );
        assert_eq!(
            t.fast_reg(1, next_key(plain), region, Access::NONE),
            Err(KeyFault::NotFast)
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
            Err(KeyFault::NotFast),
            "plain keys stay"
        );
        assert_eq!(
            t.invalidate(1, k0),
            Err(KeyFault::UnknownKey),
            "old generation"
        );
        t.invalidate(1, k1).unwrap();
        assert!(t
            .resolve(k1, 1, base + 512, 1, Access::REMOTE_READ)
            .is_none());
        assert_eq!(t.invalidate(1, k1), Ok(()), "already invalid stays invalid");
        assert!(t
            .resolve(k1, 1, base + 512, 1, Access::REMOTE_READ)
            .is_none());
        assert_eq!(
            t.fast_reg(1, next_key(k1), Sge::new(base, 0, plain), Access::NONE),
            Err(KeyFault::BadRegion),
            "empty region"
        );
        let k2 = next_key(k1);
        t.fast_reg(1, k2, Sge::new(base + 8, 16, plain), Access::REMOTE_READ)
            .unwrap();
        assert!(t
            .resolve(k2, 1, base + 8, 16, Access::REMOTE_READ)
            .is_some());
        t.release(k2);
        assert!(t.resolve(k2, 1, base + 8, 1, Access::NONE).is_none());
    }

    #[test]
    fn copies_cross_uneven_segment_boundaries() {
        let a = arena();
        let base = a.base() as u64;
        let mut t = MrTable::new(4, None);
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
