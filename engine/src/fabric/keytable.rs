//! The software memory-key table shared by the providers that check keys themselves
//! (shm, siw, sim): one slot per registration or fast-registration slot, indexed by the
//! low bits of the key's upper 24 bits, the low byte being the slot's generation (see
//! [`crate::fabric::mr::make_key`]).
//!
//! Keys are not guessable from one another: the slot count is rounded up to a power of
//! two, and every registration (and fast-registration slot) gets a fresh random
//! generation byte and random index bits above the slot bits ("tag" bits), from a keyed
//! generator per table (SipHash of a counter under a per-table secret drawn from the OS,
//! or under a fixed seed for reproducible tests, [`KeyTable::build`]). A lookup
//! compares the whole key, so a peer guessing a neighbour of a key it holds (index ±1,
//! generation ±1, other tag bits) finds nothing: at 16 K slots that is 18 random bits
//! per key. A slot's new key always differs from its previous one.
//!
//! Every byte a provider places or reads is first checked here (valid key, right
//! protection domain, access, bounds). Checks run on the data path, possibly on another
//! thread than the one registering, so a slot is read without a lock: a sequence counter
//! is odd while a writer changes the slot, and a reader that sees it odd, or changed
//! across its reads, treats the key as invalid, as a NIC racing an invalidation would.
//! Writers are short and only race each other when a caller races itself. The free list
//! is behind a mutex: registration and deregistration are setup paths.
//!
//! Providers attach what they need to find the bytes (shm: arena and offset) through
//! [`SlotExtra`], stored in the slot under the same sequence counter; each maps a
//! [`KeyFault`] to its own completion status or Terminate code.

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{fence, AtomicU16, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::fabric::mr::{key_generation, key_index, make_key, Access, MAX_KEY_INDEX};
use crate::fabric::FabricError;

const ALLOCATED: u8 = 1;
const VALID: u8 = 2;
const FAST: u8 = 4;

/// Why the table refused a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum KeyFault {
    /// No such slot, a slot not allocated, or a generation that is not the slot's current.
    #[error("unknown memory key")]
    UnknownKey,
    /// The key is current but not usable now: a fast slot never mapped or invalidated,
    /// or a slot being rewritten while it was read.
    #[error("memory key not valid")]
    Invalid,
    /// The registration belongs to another protection domain.
    #[error("memory key of another protection domain")]
    WrongPd,
    /// The registration does not grant the access needed.
    #[error("memory key lacks the access needed")]
    Access,
    /// The range falls outside the registration, or wraps.
    #[error("range outside the registration")]
    Bounds,
    /// Fast registration or invalidation of a key that is not a fast-registration key.
    #[error("not a fast-registration key")]
    NotFast,
    /// A fast registration naming the slot's current key: the generation must move on,
    /// or a peer still holding the old key could reach the new mapping.
    #[error("fast registration reuses the current key")]
    StaleKey,
    /// A fast registration longer than the slot was allocated for.
    #[error("fast registration longer than its slot")]
    TooLong,
    /// A fast registration asking for an access combination verbs refuses.
    #[error("invalid access combination")]
    BadAccess,
    /// A fast registration whose region is not covered by a valid local key.
    #[error("fast-registration region not locally registered")]
    BadRegion,
}

/// Per-slot data a provider keeps beside the key (where the bytes live), written and
/// read under the slot's sequence counter, so plain relaxed atomics suffice.
pub(crate) trait SlotExtra: Default + Send + Sync {
    /// A consistent copy of the data.
    type Value: Copy + Default;
    /// Reads the data (relaxed; the table validates the read).
    fn load(&self) -> Self::Value;
    /// Writes the data (relaxed; the table publishes it).
    fn store(&self, v: Self::Value);
}

impl SlotExtra for () {
    type Value = ();
    #[inline]
    fn load(&self) {}
    #[inline]
    fn store(&self, _: ()) {}
}

/// What a successful check grants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant<V> {
    /// The slot's index (the key's index bits below the tag bits).
    pub index: u32,
    /// Offset of the checked address from the registration's first byte.
    pub rel: u64,
    /// The provider's data for the slot.
    pub extra: V,
}

#[derive(Default)]
struct Slot<X> {
    seq: AtomicU32,
    /// Access bits, and the flags above them: one load on the data path.
    meta: AtomicU16,
    /// Key in the low half, protection domain in the high half: one load too.
    ident: AtomicU64,
    start: AtomicU64,
    len: AtomicU64,
    max_len: AtomicU64,
    extra: X,
}

impl<X> Slot<X> {
    // Field accessors for writers, which hold the sequence odd.
    fn key(&self) -> u32 {
        self.ident.load(Ordering::Relaxed) as u32
    }

    fn pd(&self) -> u32 {
        (self.ident.load(Ordering::Relaxed) >> 32) as u32
    }

    fn set_ident(&self, key: u32, pd: u32) {
        self.ident
            .store(u64::from(key) | (u64::from(pd) << 32), Ordering::Relaxed);
    }

    fn flags(&self) -> u8 {
        (self.meta.load(Ordering::Relaxed) >> 8) as u8
    }

    fn set_meta(&self, access: Access, flags: u8) {
        self.meta.store(
            u16::from(access.bits()) | (u16::from(flags) << 8),
            Ordering::Relaxed,
        );
    }

    /// Makes the sequence odd (fields changing); returns the even value it had.
    fn begin(&self) -> u32 {
        let mut cur = self.seq.load(Ordering::Relaxed);
        loop {
            if cur & 1 == 1 {
                // Another writer of this slot is mid-update (only a caller racing
                // itself gets here); it finishes within a few stores.
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
#[derive(Clone, Copy)]
struct View<V> {
    key: u32,
    pd: u32,
    access: Access,
    flags: u8,
    start: u64,
    len: u64,
    extra: V,
}

impl<V> View<V> {
    /// The key names this slot's current, usable registration.
    fn usable(&self, key: u32) -> Result<(), KeyFault> {
        if self.key != key || self.flags & ALLOCATED == 0 {
            return Err(KeyFault::UnknownKey);
        }
        if self.flags & VALID == 0 {
            return Err(KeyFault::Invalid);
        }
        Ok(())
    }
}

/// Checks a fast registration of slot state (`flags`, `cur` key, `pd`, `max_len`)
/// against the request.
fn fast_reg_verdict(
    flags: u8,
    cur: u32,
    slot_pd: u32,
    max_len: u64,
    req: (u32, u32, Access, u64),
) -> Result<(), KeyFault> {
    let (key, pd, access, len) = req;
    // Only the generation byte may move: the index and tag bits are the slot's.
    if flags & ALLOCATED == 0 || key_index(key) != key_index(cur) {
        Err(KeyFault::UnknownKey)
    } else if flags & FAST == 0 {
        Err(KeyFault::NotFast)
    } else if slot_pd != pd {
        Err(KeyFault::WrongPd)
    } else if key_generation(cur) == key_generation(key) {
        Err(KeyFault::StaleKey)
    } else if !access.is_valid() {
        Err(KeyFault::BadAccess)
    } else if len > max_len {
        Err(KeyFault::TooLong)
    } else {
        Ok(())
    }
}

/// Where a table's random key bits come from: a keyed PRF (SipHash) of a counter, so
/// keys already seen say nothing about the next (unlike a plain xorshift, whose state a
/// few outputs give away). Used on the registration path only.
enum KeySource {
    /// Keyed by the process's random hash keys (drawn from the OS).
    Os(std::collections::hash_map::RandomState),
    /// Keyed by a fixed seed: reproducible keys for tests.
    Seeded(u64),
}

struct KeyRng {
    source: KeySource,
    counter: u64,
}

impl KeyRng {
    fn next(&mut self) -> u64 {
        self.counter = self.counter.wrapping_add(1);
        match &self.source {
            KeySource::Os(rs) => rs.hash_one(self.counter),
            KeySource::Seeded(seed) => {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                (*seed, self.counter).hash(&mut h);
                h.finish()
            }
        }
    }
}

/// The free list and the key generator, behind one mutex (setup paths only).
struct Alloc {
    free: Vec<u32>,
    rng: KeyRng,
}

/// A software memory-key table; `X` is the provider's per-slot data.
pub(crate) struct KeyTable<X: SlotExtra = ()> {
    slots: Box<[Slot<X>]>,
    /// Free slot indices and the key generator; registration and deregistration only.
    alloc: Mutex<Alloc>,
    /// Indices below this are never issued.
    first: u32,
    /// Slot bits of a key index (slot count rounded up to a power of two, minus one);
    /// the index bits above are random tag bits.
    mask: u32,
}

impl<X: SlotExtra> KeyTable<X> {
    /// A table of `cap` slots, indices from 0, keys drawn under a secret from the OS.
    #[cfg(test)]
    pub(crate) fn new(cap: u32) -> Self {
        Self::with_first_index(cap, 0)
    }

    /// A table of `cap` slots whose keys come from `seed`: the same sequence of
    /// registrations gets the same keys (tests, simulation). `None`: a secret from the OS.
    #[cfg(test)]
    pub(crate) fn with_seed(cap: u32, seed: Option<u64>) -> Self {
        Self::build(cap, 0, seed)
    }

    /// A table of `cap` slots whose indices start at `first` (sim keeps slot 0 unused so
    /// no valid key is below 256).
    #[cfg(test)]
    pub(crate) fn with_first_index(cap: u32, first: u32) -> Self {
        Self::build(cap, first, None)
    }

    /// A table of `cap` slots whose indices start at `first` (sim keeps slot 0 unused so
    /// no valid key is below 256), keys from `seed`: the same sequence of registrations
    /// gets the same keys (tests, simulation); `None` draws them under a secret from the
    /// OS.
    pub(crate) fn build(cap: u32, first: u32, seed: Option<u64>) -> Self {
        let end = first.saturating_add(cap).min(MAX_KEY_INDEX + 1);
        let mask = end.max(1).next_power_of_two().min(MAX_KEY_INDEX + 1) - 1;
        let source = match seed {
            Some(s) => KeySource::Seeded(s),
            None => KeySource::Os(std::collections::hash_map::RandomState::new()),
        };
        KeyTable {
            slots: (0..end).map(|_| Slot::default()).collect(),
            alloc: Mutex::new(Alloc {
                // Low indices first, so slot numbers stay small in captures (the tag
                // and generation bits are what make keys unguessable).
                free: (first..end).rev().collect(),
                rng: KeyRng { source, counter: 0 },
            }),
            first,
            mask,
        }
    }

    /// Number of slots that can be issued.
    pub(crate) fn capacity(&self) -> usize {
        self.slots.len() - self.first as usize
    }

    /// Slots issued and not released (registrations and fast-registration slots in use).
    /// Takes the allocation lock: for counters and tests, not the data path.
    pub(crate) fn in_use(&self) -> usize {
        let alloc = self.alloc.lock().unwrap_or_else(|e| e.into_inner());
        self.capacity() - alloc.free.len()
    }

    /// True when `key` is the current key of an allocated slot and usable now (a plain
    /// registration, or a fast-registration slot mapped under it): what a peer holding
    /// it could reach. For tests asserting that keys die; not the data path.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn is_live(&self, key: u32) -> bool {
        self.view(key).and_then(|v| v.usable(key)).is_ok()
    }

    #[inline]
    fn slot(&self, key: u32) -> Result<&Slot<X>, KeyFault> {
        // Slots below `first` exist but are never allocated, so every check of them
        // fails as an unknown key without a test here on the data path.
        // The tag bits above the mask pick no slot; the whole key is compared against
        // the slot's current one afterwards.
        self.slots
            .get((key_index(key) & self.mask) as usize)
            .ok_or(KeyFault::UnknownKey)
    }

    /// The slot index a key names (its index bits below the random tag bits).
    #[inline]
    pub(crate) fn slot_index(&self, key: u32) -> u32 {
        key_index(key) & self.mask
    }

    /// Takes a free slot; returns its index and random bits for its next key.
    fn take_free(&self) -> Result<(u32, u64), FabricError> {
        let mut a = self.alloc.lock().unwrap_or_else(|e| e.into_inner());
        let idx = a.free.pop().ok_or(FabricError::Exhausted {
            what: "memory registration slots",
            max: self.capacity(),
        })?;
        Ok((idx, a.rng.next()))
    }

    /// Slot `idx`'s next key from random bits `r`: random tag bits above the slot bits,
    /// a random generation byte, never the slot's previous key.
    fn fresh_key(&self, idx: u32, prev: u32, r: u64) -> u32 {
        let tag = (r as u32 >> 8) & MAX_KEY_INDEX & !self.mask;
        let key = make_key(tag | idx, r as u8);
        if key == prev {
            // One chance in 2^(8 + tag bits): step the generation instead.
            make_key(tag | idx, (r as u8).wrapping_add(1))
        } else {
            key
        }
    }

    /// Fills free slot `idx` under a fresh key from random bits `r`; returns the key.
    #[allow(clippy::too_many_arguments)]
    fn fill(
        &self,
        idx: u32,
        r: u64,
        pd: u32,
        access: Access,
        flags: u8,
        range: (u64, u64, u64),
        extra: X::Value,
    ) -> u32 {
        let (start, len, max_len) = range;
        let s = &self.slots[idx as usize];
        let was = s.begin();
        // The slot's previous keys stay dead: the new key differs from the last.
        let key = self.fresh_key(idx, s.key(), r);
        s.set_ident(key, pd);
        s.start.store(start, Ordering::Relaxed);
        s.len.store(len, Ordering::Relaxed);
        s.max_len.store(max_len, Ordering::Relaxed);
        s.extra.store(extra);
        s.set_meta(access, flags);
        s.end(was);
        key
    }

    /// Registers `[start, start + len)` for protection domain `pd` with `access`, `extra`
    /// saying where the bytes live; returns slot index and key.
    pub(crate) fn register(
        &self,
        pd: u32,
        access: Access,
        start: u64,
        len: u64,
        extra: X::Value,
    ) -> Result<(u32, u32), FabricError> {
        let (idx, r) = self.take_free()?;
        let key = self.fill(
            idx,
            r,
            pd,
            access,
            ALLOCATED | VALID,
            (start, len, len),
            extra,
        );
        Ok((idx, key))
    }

    /// Allocates a fast-registration slot covering up to `max_len` bytes, initially
    /// unmapped (its key is [`KeyFault::Invalid`] until a fast registration); returns
    /// slot index and key.
    pub(crate) fn alloc_fast(&self, pd: u32, max_len: u64) -> Result<(u32, u32), FabricError> {
        let (idx, r) = self.take_free()?;
        let key = self.fill(
            idx,
            r,
            pd,
            Access::NONE,
            ALLOCATED | FAST,
            (0, 0, max_len),
            X::Value::default(),
        );
        Ok((idx, key))
    }

    /// Deregisters slot `idx`: every key it issued dies and the slot is reusable.
    /// Unknown or already free indices are ignored (a handle is dropped once).
    pub(crate) fn release(&self, idx: u32) {
        if idx < self.first {
            return;
        }
        let Some(s) = self.slots.get(idx as usize) else {
            return;
        };
        let was = s.begin();
        let allocated = s.flags() & ALLOCATED != 0;
        if allocated {
            // Not allocated: every key of the slot is unknown until it is filled again
            // under a fresh key (which differs from the one kept here).
            s.set_meta(Access::NONE, 0);
        }
        s.end(was);
        if allocated {
            let mut a = self.alloc.lock().unwrap_or_else(|e| e.into_inner());
            a.free.push(idx);
        }
    }

    #[inline]
    fn view(&self, key: u32) -> Result<View<X::Value>, KeyFault> {
        let s = self.slot(key)?;
        let s1 = s.seq.load(Ordering::Acquire);
        if s1 & 1 == 1 {
            return Err(KeyFault::Invalid);
        }
        let ident = s.ident.load(Ordering::Relaxed);
        let meta = s.meta.load(Ordering::Relaxed);
        let v = View {
            key: ident as u32,
            pd: (ident >> 32) as u32,
            access: Access::from_bits_truncate(meta as u8),
            flags: (meta >> 8) as u8,
            start: s.start.load(Ordering::Relaxed),
            len: s.len.load(Ordering::Relaxed),
            extra: s.extra.load(),
        };
        fence(Ordering::Acquire);
        if s.seq.load(Ordering::Relaxed) != s1 {
            return Err(KeyFault::Invalid);
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
    ) -> Result<Grant<X::Value>, KeyFault> {
        let v = self.view(key)?;
        v.usable(key)?;
        if v.pd != pd {
            return Err(KeyFault::WrongPd);
        }
        if !v.access.contains(need) {
            return Err(KeyFault::Access);
        }
        let rel = addr.checked_sub(v.start).ok_or(KeyFault::Bounds)?;
        let end = rel.checked_add(len).ok_or(KeyFault::Bounds)?;
        if end > v.len {
            return Err(KeyFault::Bounds);
        }
        Ok(Grant {
            index: self.slot_index(key),
            rel,
            extra: v.extra,
        })
    }

    /// Executes a fast registration: the slot of `key` (protection domain `pd`) now
    /// covers `[start, start + len)` with `access` under `key`, `extra` saying where.
    pub(crate) fn fast_reg(
        &self,
        key: u32,
        pd: u32,
        access: Access,
        start: u64,
        len: u64,
        extra: X::Value,
    ) -> Result<(), KeyFault> {
        let s = self.slot(key)?;
        let was = s.begin();
        let verdict = fast_reg_verdict(
            s.flags(),
            s.key(),
            s.pd(),
            s.max_len.load(Ordering::Relaxed),
            (key, pd, access, len),
        );
        if verdict.is_ok() {
            s.set_ident(key, pd);
            s.start.store(start, Ordering::Relaxed);
            s.len.store(len, Ordering::Relaxed);
            s.extra.store(extra);
            s.set_meta(access, ALLOCATED | FAST | VALID);
        }
        s.end(was);
        verdict
    }

    /// A fast registration over memory a local key already covers (the FastReg work
    /// request): the region `[addr, addr + len)` must be registered under `lkey` in
    /// `pd`; `place` derives the new slot's data from the covering registration's grant.
    /// Faults of the fast slot come first, then [`KeyFault::BadRegion`].
    pub(crate) fn fast_reg_over(
        &self,
        key: u32,
        pd: u32,
        access: Access,
        region: (u32, u64, u64),
        place: impl FnOnce(Grant<X::Value>) -> X::Value,
    ) -> Result<Grant<X::Value>, KeyFault> {
        let (lkey, addr, len) = region;
        // A read-only pre-check so the slot's own faults win over the region's; the
        // write below checks again under the sequence counter.
        let s = self.slot(key)?;
        let v = self.view(key)?;
        fast_reg_verdict(
            v.flags,
            v.key,
            v.pd,
            s.max_len.load(Ordering::Relaxed),
            (key, pd, access, len),
        )?;
        let under = self
            .check(lkey, pd, Access::NONE, addr, len)
            .map_err(|_| KeyFault::BadRegion)?;
        self.fast_reg(key, pd, access, addr, len, place(under))?;
        Ok(under)
    }

    /// Whether `key` could be invalidated now by protection domain `pd`.
    pub(crate) fn can_invalidate(&self, key: u32, pd: u32) -> Result<(), KeyFault> {
        let v = self.view(key)?;
        Self::invalidate_verdict(v.key, v.flags, v.pd, key, pd)
    }

    fn invalidate_verdict(
        cur: u32,
        flags: u8,
        slot_pd: u32,
        key: u32,
        pd: u32,
    ) -> Result<(), KeyFault> {
        if cur != key || flags & ALLOCATED == 0 {
            Err(KeyFault::UnknownKey)
        } else if flags & FAST == 0 {
            Err(KeyFault::NotFast)
        } else if slot_pd != pd {
            Err(KeyFault::WrongPd)
        } else {
            // Already invalid is fine, as in verbs (and kernel siw): a requester that
            // got no report of a peer's invalidation invalidates locally to be sure.
            Ok(())
        }
    }

    /// Invalidates fast-registration key `key` of protection domain `pd` (local
    /// invalidation, or a peer's Send With Invalidate). The key must be the slot's
    /// current one; invalidating it again, or before it was ever mapped, succeeds and
    /// leaves it invalid.
    pub(crate) fn invalidate(&self, key: u32, pd: u32) -> Result<(), KeyFault> {
        let s = self.slot(key)?;
        let was = s.begin();
        let flags = s.flags();
        let verdict = Self::invalidate_verdict(s.key(), flags, s.pd(), key, pd);
        if verdict.is_ok() {
            let access = Access::from_bits_truncate(s.meta.load(Ordering::Relaxed) as u8);
            s.set_meta(access, flags & !VALID);
        }
        s.end(was);
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::mr::next_key;

    /// Data like shm's: which arena, and where in it.
    #[derive(Default)]
    struct Where(AtomicU64);

    impl SlotExtra for Where {
        type Value = u64;
        fn load(&self) -> u64 {
            self.0.load(Ordering::Relaxed)
        }
        fn store(&self, v: u64) {
            self.0.store(v, Ordering::Relaxed)
        }
    }

    const RW: Access = Access::ALL;

    #[test]
    fn check_grants_only_key_pd_access_and_bounds() {
        let t: KeyTable<Where> = KeyTable::new(4);
        let (idx, key) = t
            .register(1, Access::LOCAL_WRITE | Access::REMOTE_READ, 0x1000, 50, 77)
            .unwrap();
        assert_eq!(
            t.check(key, 1, Access::REMOTE_READ, 0x1000 + 10, 40),
            Ok(Grant {
                index: idx,
                rel: 10,
                extra: 77
            })
        );
        assert_eq!(
            t.check(key, 1, Access::NONE, 0x1000 + 50, 0).map(|g| g.rel),
            Ok(50)
        );
        let refused = [
            (
                key,
                1,
                Access::REMOTE_READ,
                0x1000 + 10,
                41,
                KeyFault::Bounds,
            ),
            (key, 1, Access::NONE, 0x1000 + 51, 0, KeyFault::Bounds),
            (key, 1, Access::REMOTE_READ, 0xfff, 1, KeyFault::Bounds),
            (key, 1, Access::REMOTE_READ, u64::MAX, 2, KeyFault::Bounds),
            (key, 2, Access::REMOTE_READ, 0x1000, 1, KeyFault::WrongPd),
            (key, 1, Access::REMOTE_WRITE, 0x1000, 1, KeyFault::Access),
            (
                next_key(key),
                1,
                Access::NONE,
                0x1000,
                1,
                KeyFault::UnknownKey,
            ),
            (
                make_key(3, 1),
                1,
                Access::NONE,
                0x1000,
                1,
                KeyFault::UnknownKey,
            ),
            (
                make_key(99, 0),
                1,
                Access::NONE,
                0x1000,
                1,
                KeyFault::UnknownKey,
            ),
        ];
        for (k, pd, need, addr, len, fault) in refused {
            assert_eq!(
                t.check(k, pd, need, addr, len),
                Err(fault),
                "key {k:#x} pd {pd} {need:?} {addr:#x}+{len}"
            );
        }
    }

    #[test]
    fn released_keys_die_and_slots_move_to_new_generations() {
        let t: KeyTable = KeyTable::new(1);
        let (idx, k1) = t.register(1, Access::NONE, 0x1000, 10, ()).unwrap();
        assert!(matches!(
            t.register(1, Access::NONE, 0, 1, ()),
            Err(FabricError::Exhausted { max: 1, .. })
        ));
        t.release(idx);
        // A second release of the same slot must not put it on the free list twice.
        t.release(idx);
        t.release(7);
        assert_eq!(
            t.check(k1, 1, Access::NONE, 0x1000, 1),
            Err(KeyFault::UnknownKey)
        );
        let (idx2, k2) = t.register(1, Access::NONE, 0x1000, 10, ()).unwrap();
        assert_eq!(idx, idx2);
        assert_ne!(k1, k2);
        assert_eq!(t.slot_index(k1), t.slot_index(k2));
        assert!(t.check(k2, 1, Access::NONE, 0x1000, 10).is_ok());
        assert!(t.register(1, Access::NONE, 0, 1, ()).is_err(), "freed once");
    }

    #[test]
    fn a_first_index_keeps_low_slots_unissued() {
        let t: KeyTable = KeyTable::with_first_index(2, 1);
        assert_eq!(t.capacity(), 2);
        let (a, ka) = t.register(1, RW, 0, 8, ()).unwrap();
        let (b, _) = t.alloc_fast(1, 8).unwrap();
        assert_eq!((a, b), (1, 2));
        assert!(ka >= 256, "no valid key below 256");
        assert_eq!(
            t.check(make_key(0, 1), 1, Access::NONE, 0, 0),
            Err(KeyFault::UnknownKey)
        );
        assert_eq!(t.invalidate(make_key(0, 1), 1), Err(KeyFault::UnknownKey));
        t.release(0);
        assert!(t.register(1, RW, 0, 8, ()).is_err());
    }

    #[test]
    fn fast_reg_refuses_every_bad_request() {
        let t: KeyTable = KeyTable::new(2);
        let (_, plain) = t.register(1, RW, 0x1000, 10, ()).unwrap();
        let (_, k0) = t.alloc_fast(1, 64).unwrap();
        assert_eq!(t.check(k0, 1, Access::NONE, 0, 0), Err(KeyFault::Invalid));
        let k1 = next_key(k0);
        let cases = [
            (k0, 1, RW, 8, KeyFault::StaleKey),
            (k1, 2, RW, 8, KeyFault::WrongPd),
            (k1, 1, RW, 65, KeyFault::TooLong),
            (k1, 1, Access::REMOTE_WRITE, 8, KeyFault::BadAccess),
            (next_key(plain), 1, RW, 8, KeyFault::NotFast),
            (make_key(5, 1), 1, RW, 8, KeyFault::UnknownKey),
        ];
        for (k, pd, access, len, fault) in cases {
            assert_eq!(
                t.fast_reg(k, pd, access, 0x1000, len, ()),
                Err(fault),
                "{fault}"
            );
        }
        assert_eq!(
            t.check(k1, 1, Access::NONE, 0x1000, 0),
            Err(KeyFault::UnknownKey)
        );
        t.fast_reg(k1, 1, RW, 0x1000, 64, ()).unwrap();
        assert!(t.check(k1, 1, Access::REMOTE_WRITE, 0x1000, 64).is_ok());
        assert_eq!(
            t.check(k0, 1, Access::NONE, 0x1000, 1),
            Err(KeyFault::UnknownKey)
        );
        // Re-registration while valid also needs the next generation.
        assert_eq!(
            t.fast_reg(k1, 1, RW, 0x1000, 8, ()),
            Err(KeyFault::StaleKey)
        );
    }

    #[test]
    fn fast_reg_over_needs_a_covering_local_key_and_derives_the_place() {
        let t: KeyTable<Where> = KeyTable::new(3);
        let (_, plain) = t
            .register(1, Access::LOCAL_WRITE, 0x1000, 100, 500)
            .unwrap();
        let (_, k0) = t.alloc_fast(1, 64).unwrap();
        let k1 = next_key(k0);
        let at = |g: Grant<u64>| g.extra + g.rel;
        let bad = [
            ((plain, 0x1000 + 50, 51), KeyFault::BadRegion),
            ((plain, 0xfff, 8), KeyFault::BadRegion),
            ((next_key(plain), 0x1000, 8), KeyFault::BadRegion),
            ((k0, 0x1000, 8), KeyFault::BadRegion),
        ];
        for (region, fault) in bad {
            assert_eq!(
                t.fast_reg_over(k1, 1, RW, region, at).map(|_| ()),
                Err(fault)
            );
        }
        // The slot's own faults are reported before the region's.
        assert_eq!(
            t.fast_reg_over(k0, 1, RW, (plain, 0, 8), at).map(|_| ()),
            Err(KeyFault::StaleKey)
        );
        assert_eq!(
            t.fast_reg_over(k1, 2, RW, (plain, 0x1000, 8), at)
                .map(|_| ()),
            Err(KeyFault::WrongPd)
        );
        let g = t
            .fast_reg_over(k1, 1, RW, (plain, 0x1000 + 20, 30), at)
            .unwrap();
        assert_eq!(g.rel, 20);
        let mine = t
            .check(k1, 1, Access::REMOTE_WRITE, 0x1000 + 25, 5)
            .unwrap();
        assert_eq!((mine.rel, mine.extra), (5, 520));
    }

    #[test]
    fn invalidation_refuses_every_bad_key_and_is_idempotent() {
        let t: KeyTable = KeyTable::new(3);
        let (_, plain) = t.register(1, RW, 0x1000, 10, ()).unwrap();
        let (_, k0) = t.alloc_fast(1, 64).unwrap();
        assert_eq!(
            t.can_invalidate(k0, 1),
            Ok(()),
            "never mapped: may be invalidated, and stays invalid"
        );
        let k1 = next_key(k0);
        t.fast_reg(k1, 1, RW, 0x1000, 8, ()).unwrap();
        let cases = [
            (plain, 1, KeyFault::NotFast),
            (k1, 2, KeyFault::WrongPd),
            (k0, 1, KeyFault::UnknownKey),
            (make_key(2, 1), 1, KeyFault::UnknownKey),
            (make_key(40, 1), 1, KeyFault::UnknownKey),
        ];
        for (k, pd, fault) in cases {
            assert_eq!(t.can_invalidate(k, pd), Err(fault), "{k:#x}");
            assert_eq!(t.invalidate(k, pd), Err(fault), "{k:#x}");
        }
        assert_eq!(t.can_invalidate(k1, 1), Ok(()));
        t.invalidate(k1, 1).unwrap();
        assert_eq!(
            t.check(k1, 1, Access::NONE, 0x1000, 1),
            Err(KeyFault::Invalid)
        );
        // Again (a report of the peer's invalidation went missing): still invalid.
        assert_eq!(t.invalidate(k1, 1), Ok(()));
        assert_eq!(
            t.check(k1, 1, Access::NONE, 0x1000, 1),
            Err(KeyFault::Invalid)
        );
        // The slot maps again under the next generation.
        let k2 = next_key(k1);
        t.fast_reg(k2, 1, Access::REMOTE_READ, 0x2000, 4, ())
            .unwrap();
        assert!(t.check(k2, 1, Access::REMOTE_READ, 0x2003, 1).is_ok());
        assert_eq!(
            t.check(k2, 1, Access::NONE, 0x1000, 1),
            Err(KeyFault::Bounds)
        );
    }

    fn keys_of(t: &KeyTable, n: usize) -> Vec<u32> {
        (0..n)
            .map(|_| t.register(1, RW, 0, 8, ()).unwrap().1)
            .collect()
    }

    #[test]
    fn tables_with_different_seeds_issue_different_keys_and_a_seed_repeats() {
        let a = keys_of(&KeyTable::with_seed(64, Some(1)), 16);
        let b = keys_of(&KeyTable::with_seed(64, Some(2)), 16);
        let a2 = keys_of(&KeyTable::with_seed(64, Some(1)), 16);
        let os = keys_of(&KeyTable::new(64), 16);
        assert_eq!(a, a2, "same seed, same keys");
        assert!(a.iter().zip(&b).all(|(x, y)| x != y), "{a:x?} {b:x?}");
        assert!(a.iter().zip(&os).any(|(x, y)| x != y));
        // Not `index << 8 | 0`: generation and tag bits vary.
        let t = KeyTable::with_seed(64, Some(1));
        let gens: std::collections::HashSet<u8> =
            keys_of(&t, 64).iter().map(|&k| key_generation(k)).collect();
        assert!(gens.len() > 16, "{gens:?}");
        let tags: std::collections::HashSet<u32> =
            a.iter().map(|&k| key_index(k) & !t.mask).collect();
        assert!(tags.len() > 8, "tag bits vary: {tags:x?}");
    }

    #[test]
    fn reusing_a_slot_rotates_its_key_unpredictably() {
        let t: KeyTable = KeyTable::with_seed(1, Some(7));
        let mut seen = std::collections::HashSet::new();
        let mut prev = None;
        for _ in 0..256 {
            let (idx, k) = t.register(1, RW, 0, 8, ()).unwrap();
            assert_ne!(Some(k), prev, "a reused slot never gets its previous key");
            assert!(t.check(k, 1, Access::NONE, 0, 8).is_ok());
            if let Some(p) = prev {
                assert_eq!(t.check(p, 1, Access::NONE, 0, 8), Err(KeyFault::UnknownKey));
                assert_ne!(k, make_key(key_index(p), key_generation(p).wrapping_add(1)));
            }
            seen.insert(k);
            prev = Some(k);
            t.release(idx);
        }
        // 32 random bits per key at one slot: no repeats in 256 reuses.
        assert_eq!(seen.len(), 256);
        // Fast-registration slots too.
        let (idx, f1) = t.alloc_fast(1, 8).unwrap();
        t.release(idx);
        let (_, f2) = t.alloc_fast(1, 8).unwrap();
        assert_ne!(f1, f2);
    }

    #[test]
    fn neighbours_of_a_key_are_unknown() {
        let t: KeyTable = KeyTable::with_seed(16, Some(3));
        let keys = keys_of(&t, 16);
        let live: std::collections::HashSet<u32> = keys.iter().copied().collect();
        for &k in &keys {
            let (i, g) = (key_index(k), key_generation(k));
            let guesses = [
                make_key(i.wrapping_add(1) & MAX_KEY_INDEX, g),
                make_key(i.wrapping_sub(1) & MAX_KEY_INDEX, g),
                make_key(i, g.wrapping_add(1)),
                make_key(i, g.wrapping_sub(1)),
                make_key(i ^ (t.mask + 1), g),
                make_key(i & t.mask, g),
            ];
            for guess in guesses {
                if live.contains(&guess) {
                    continue;
                }
                assert_eq!(
                    t.check(guess, 1, Access::NONE, 0, 1),
                    Err(KeyFault::UnknownKey),
                    "guess {guess:#x} next to {k:#x}"
                );
            }
        }
    }

    #[test]
    fn a_slot_being_rewritten_reads_as_invalid() {
        let t: KeyTable = KeyTable::new(1);
        let (idx, key) = t.register(1, RW, 0, 8, ()).unwrap();
        let s = &t.slots[idx as usize];
        let was = s.begin();
        assert_eq!(t.check(key, 1, Access::NONE, 0, 1), Err(KeyFault::Invalid));
        s.end(was);
        assert!(t.check(key, 1, Access::NONE, 0, 1).is_ok());
    }

    #[test]
    fn faults_say_what_went_wrong() {
        assert_eq!(
            KeyFault::WrongPd.to_string(),
            "memory key of another protection domain"
        );
        let e: &dyn std::error::Error = &KeyFault::Bounds;
        assert!(e.to_string().contains("outside"));
    }
}
