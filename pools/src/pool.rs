//! Fixed-size buffer pools carved from arenas, with a shared lock-free free ring.
//!
//! A [`Pool`] is a cheap handle (clone it freely); the hot path is a per-thread
//! [`PoolCache`] made with [`Pool::cache`]. Every buffer is handed out as a move-only
//! [`Buf`]; a pool is full again when every buffer is back in its shared ring.

use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::arena::{Arena, ArenaOptions, HugePages, RegKeys};
use crate::buf::{Buf, BufToken};
use crate::cache::PoolCache;
use crate::error::{ConfigFault, ForeignBuf, PoolError};
use crate::ring::{CachePadded, IndexRing, MAX_RING_CAPACITY};

/// Slots are at least cache-line aligned so two buffers never share a line (no false
/// sharing between cores writing neighbouring buffers, and DMA-friendly starts).
pub const CACHE_LINE: usize = 64;

/// Per-slot ownership state. In release builds only the token transitions are
/// tracked (they make token redemption safe); debug builds track every transition to
/// catch double frees and use after free.
pub(crate) const SLOT_FREE: u8 = 0;
pub(crate) const SLOT_HELD: u8 = 1;
pub(crate) const SLOT_TOKEN: u8 = 2;

static NEXT_POOL_ID: AtomicU32 = AtomicU32::new(1);

/// How to build a pool.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Name used in diagnostics (and as the memfd name of a shareable arena).
    pub name: &'static str,
    /// Usable bytes per buffer.
    pub buf_size: usize,
    /// Number of buffers.
    pub count: u32,
    /// Alignment of each buffer; a power of two, raised to at least [`CACHE_LINE`].
    pub align: usize,
    /// Buffers a per-thread cache keeps on hand: it refills up to this many and
    /// flushes down to this many, and holds at most twice this many.
    pub cache_size: usize,
    /// Hugepage policy for an arena the pool creates itself.
    pub hugepages: HugePages,
    /// Back an arena the pool creates itself with a memfd another process can map.
    pub shareable: bool,
    /// Pre-fault an arena the pool creates itself ([`ArenaOptions::prefault`]);
    /// `false` makes a buffer's pages resident only once it is first written or read.
    pub prefault: bool,
}

impl PoolConfig {
    /// Default per-thread cache size.
    pub const DEFAULT_CACHE_SIZE: usize = 64;

    /// A configuration for `count` buffers of `buf_size` bytes with cache-line
    /// alignment, default cache size and the default hugepage policy.
    pub fn new(name: &'static str, buf_size: usize, count: u32) -> Self {
        PoolConfig {
            name,
            buf_size,
            count,
            align: CACHE_LINE,
            cache_size: Self::DEFAULT_CACHE_SIZE,
            hugepages: HugePages::Auto,
            shareable: false,
            prefault: true,
        }
    }

    /// Pre-faults a self-created arena, or maps it lazily (see [`PoolConfig::prefault`]).
    pub fn prefault(mut self, yes: bool) -> Self {
        self.prefault = yes;
        self
    }

    /// Sets the buffer alignment.
    pub fn align(mut self, align: usize) -> Self {
        self.align = align;
        self
    }

    /// Sets the per-thread cache size.
    pub fn cache_size(mut self, n: usize) -> Self {
        self.cache_size = n;
        self
    }

    /// Sets the hugepage policy.
    pub fn hugepages(mut self, h: HugePages) -> Self {
        self.hugepages = h;
        self
    }

    /// Makes a self-created arena shareable.
    pub fn shareable(mut self, yes: bool) -> Self {
        self.shareable = yes;
        self
    }

    /// The alignment actually used.
    pub fn effective_align(&self) -> usize {
        self.align.max(CACHE_LINE)
    }

    /// Distance between consecutive buffers: the size rounded up to the alignment.
    pub fn stride(&self) -> Result<usize, PoolError> {
        self.validate()?;
        let align = self.effective_align();
        self.buf_size
            .checked_next_multiple_of(align)
            .ok_or(PoolError::InvalidConfig(ConfigFault::BufSizeOverflow))
    }

    /// Bytes of arena the pool occupies.
    pub fn footprint(&self) -> Result<usize, PoolError> {
        self.stride()?
            .checked_mul(self.count as usize)
            .ok_or(PoolError::InvalidConfig(ConfigFault::PoolSizeOverflow))
    }

    fn validate(&self) -> Result<(), PoolError> {
        if self.buf_size == 0 {
            return Err(PoolError::InvalidConfig(ConfigFault::ZeroBufSize));
        }
        if self.buf_size > u32::MAX as usize {
            return Err(PoolError::InvalidConfig(ConfigFault::BufSizeTooLarge));
        }
        if self.count == 0 {
            return Err(PoolError::InvalidConfig(ConfigFault::ZeroCount));
        }
        if self.count as usize > MAX_RING_CAPACITY {
            return Err(PoolError::InvalidConfig(ConfigFault::TooManyBufs));
        }
        if !self.align.is_power_of_two() {
            return Err(PoolError::InvalidConfig(ConfigFault::AlignNotPowerOfTwo));
        }
        if self.cache_size == 0 {
            return Err(PoolError::InvalidConfig(ConfigFault::ZeroCacheSize));
        }
        if self.cache_size > MAX_RING_CAPACITY / 2 {
            return Err(PoolError::InvalidConfig(ConfigFault::CacheSizeTooLarge));
        }
        Ok(())
    }
}

/// A snapshot of a pool's counters. Under concurrent use the fields are each
/// momentarily right but need not add up exactly. Reading it takes a lock (cold path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Buffers in the pool.
    pub count: usize,
    /// Buffers in the shared ring, available to any cache.
    pub available: usize,
    /// Buffers parked in per-thread caches (free, but only to their cache's thread).
    pub cached: usize,
    /// Buffers held by users: `count - available - cached`.
    pub in_use: usize,
    /// Most buffers ever out of the shared ring at once (in caches or in use),
    /// sampled whenever buffers leave the ring.
    pub high_water: usize,
}

/// How many buffers one cache holds, written only by the cache's own thread (a plain
/// store to a line no other core writes) and summed by [`Pool::stats`].
pub(crate) type CacheCount = Arc<CachePadded<AtomicUsize>>;

/// State shared by every handle, cache and buffer of one pool.
pub(crate) struct PoolShared {
    pub(crate) id: u32,
    pub(crate) name: &'static str,
    arena: Arc<Arena>,
    offset: usize,
    /// First byte of slot 0 (arena base + offset), kept here to save a pointer chase.
    slots: NonNull<u8>,
    pub(crate) stride: usize,
    pub(crate) buf_len: usize,
    pub(crate) count: u32,
    pub(crate) cache_size: usize,
    pub(crate) ring: IndexRing,
    states: Box<[AtomicU8]>,
    /// Updated only when buffers leave the ring in bulk, never per buffer.
    high_water: CachePadded<AtomicUsize>,
    /// One counter per live cache; locked only to add or remove a cache and to read
    /// stats, never on get/put.
    caches: Mutex<Vec<CacheCount>>,
    /// Live `Pool` handles (caches hold one each). Tracked separately from the `Arc`
    /// count so exactly one dropper learns it was last and can decide to leak.
    handles: AtomicUsize,
    /// Once the last handle went while buffers were out: buffers given back since
    /// ([`Pool::put_home`] without a handle), less the number that were out, wrapping.
    /// Whoever brings it to zero after the last handle subtracted gives the pool's
    /// memory back (see `Drop for Pool`).
    orphan_returns: AtomicUsize,
}

// SAFETY: `slots` points into the arena, which is Send + Sync; each slot is owned by
// at most one `Buf` at a time and all shared bookkeeping is atomic.
unsafe impl Send for PoolShared {}
unsafe impl Sync for PoolShared {}

impl PoolShared {
    #[inline]
    pub(crate) fn slot_ptr(&self, index: u32) -> *mut u8 {
        // index < count and count * stride lies inside the arena (checked at creation).
        self.slots
            .as_ptr()
            .wrapping_add(index as usize * self.stride)
    }

    #[inline]
    pub(crate) fn slot_offset(&self, index: u32) -> usize {
        self.offset + index as usize * self.stride
    }

    #[inline]
    pub(crate) fn keys(&self) -> Option<RegKeys> {
        self.arena.keys()
    }

    /// Wraps a slot index just taken from the ring into its buffer handle.
    #[inline]
    pub(crate) fn hand_out(&self, index: u32) -> Buf {
        #[cfg(debug_assertions)]
        {
            let was = self.states[index as usize].swap(SLOT_HELD, Ordering::AcqRel);
            assert!(
                was == SLOT_FREE,
                "rpcrdma-pools: pool '{}' handed out buffer {index} that was not free \
                 (state {was}): free-list corruption, likely a double free via from_raw",
                self.name
            );
        }
        // SAFETY: self lives in an Arc kept alive (or leaked) for as long as buffers
        // are out; see Pool's Drop.
        unsafe { Buf::new(NonNull::from(self), index) }
    }

    /// Checks a returning buffer and yields its slot index.
    #[inline]
    pub(crate) fn take_back(&self, buf: Buf) -> u32 {
        let index = buf.index();
        #[cfg(debug_assertions)]
        {
            let was = self.states[index as usize].swap(SLOT_FREE, Ordering::AcqRel);
            assert!(
                was == SLOT_HELD,
                "rpcrdma-pools: double free of buffer {index} in pool '{}' (state {was})",
                self.name
            );
        }
        index
    }

    /// Debug builds: panics when `index` is not currently held (use after free).
    #[inline]
    pub(crate) fn check_live(&self, index: u32) {
        #[cfg(debug_assertions)]
        {
            let s = self.states[index as usize].load(Ordering::Acquire);
            assert!(
                s == SLOT_HELD,
                "rpcrdma-pools: use after free of buffer {index} in pool '{}' (state {s})",
                self.name
            );
        }
        #[cfg(not(debug_assertions))]
        let _ = index;
    }

    pub(crate) fn park_as_token(&self, index: u32) {
        #[cfg(debug_assertions)]
        {
            let was = self.states[index as usize].swap(SLOT_TOKEN, Ordering::AcqRel);
            assert!(
                was == SLOT_HELD,
                "rpcrdma-pools: token made from buffer {index} of pool '{}' that is not held",
                self.name
            );
        }
        #[cfg(not(debug_assertions))]
        self.states[index as usize].store(SLOT_TOKEN, Ordering::Release);
    }

    fn cache_list(&self) -> MutexGuard<'_, Vec<CacheCount>> {
        // A panic elsewhere while holding this lock leaves the list itself intact.
        self.caches.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn register_cache(&self) -> CacheCount {
        let c: CacheCount = Arc::new(CachePadded(AtomicUsize::new(0)));
        self.cache_list().push(Arc::clone(&c));
        c
    }

    pub(crate) fn unregister_cache(&self, c: &CacheCount) {
        self.cache_list().retain(|x| !Arc::ptr_eq(x, c));
    }

    fn cached_total(&self) -> usize {
        self.cache_list()
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// Samples how many buffers are out of the ring after some left it.
    #[inline]
    pub(crate) fn note_drained(&self) {
        let out = (self.count as usize).saturating_sub(self.ring.len());
        let hw = &self.high_water;
        if out > hw.load(Ordering::Relaxed) {
            hw.fetch_max(out, Ordering::Relaxed);
        }
    }
}

/// A pool of fixed-size buffers. Cloning makes another handle to the same pool.
///
/// Dropping the last handle while buffers are still out keeps the pool's memory rather
/// than unmapping memory that live [`Buf`]s point into: the last of them given back
/// with [`Pool::put_home`] releases it (a `Buf` dropped instead leaks it for good).
pub struct Pool {
    shared: Arc<PoolShared>,
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("id", &self.shared.id)
            .field("name", &self.shared.name)
            .field("buf_size", &self.shared.buf_len)
            .field("stride", &self.shared.stride)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Clone for Pool {
    fn clone(&self) -> Self {
        self.shared.handles.fetch_add(1, Ordering::Relaxed);
        Pool {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl Pool {
    /// A new handle to the pool `buf` came from, made from the buffer alone; `None`
    /// once every handle is gone (the last one then kept the pool's memory for the
    /// buffers out, `buf` among them, so the buffer stays valid).
    ///
    /// This is how a holder of buffers can do without a handle of its own per buffer
    /// (two reference counts bumped and dropped per buffer): it asks for one only
    /// when it has to give a buffer back outside a [`PoolCache`].
    pub fn of_buf(buf: &Buf) -> Option<Pool> {
        let ptr = buf.pool_ptr();
        // SAFETY: a pool's shared part outlives its buffers (see `Drop`): either a
        // handle still holds its `Arc`, or the last handle leaked it.
        let shared = unsafe { ptr.as_ref() };
        let mut h = shared.handles.load(Ordering::Relaxed);
        loop {
            if h == 0 {
                // The last handle is gone and saw this buffer out: the pool leaked.
                return None;
            }
            // Acquire: pairs with the releasing decrement of a handle's drop, as
            // `Arc`'s upgrade does.
            match shared.handles.compare_exchange_weak(
                h,
                h + 1,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => h = now,
            }
        }
        // SAFETY: `handles` was nonzero, so some handle has not yet run its drop and
        // still owns an `Arc` of this allocation (a handle decrements `handles` before
        // its `Arc`): the strong count is at least one. `ptr` is that `Arc`'s data
        // pointer (`Arc::as_ptr`, which is what `Arc::into_raw` returns).
        let shared = unsafe {
            Arc::increment_strong_count(ptr.as_ptr().cast_const());
            Arc::from_raw(ptr.as_ptr().cast_const())
        };
        Some(Pool { shared })
    }

    /// Gives `buf` back to the pool it came from, without a handle: what
    /// [`Pool::put`] does, through a handle made for it ([`Pool::of_buf`]). When every
    /// handle is gone it is counted back instead, and the last buffer out to come back
    /// releases the pool's memory.
    pub fn put_home(buf: Buf) {
        match Pool::of_buf(&buf) {
            Some(pool) => {
                let index = pool.shared.take_back(buf);
                pool.shared.ring.enqueue_all(&[index]);
            }
            None => {
                let ptr = buf.pool_ptr();
                // The slot is not given back: its pool is going away.
                let _ = buf;
                // SAFETY: the pool's memory is kept by the reference the last handle
                // forgot until every buffer out then came back, this one included.
                let shared = unsafe { ptr.as_ref() };
                let before = shared.orphan_returns.fetch_add(1, Ordering::AcqRel);
                if before == usize::MAX {
                    // The last buffer out: the last handle had subtracted how many
                    // were out, and all are back. SAFETY: releases the reference that
                    // handle forgot; nothing touches the pool after.
                    unsafe { Arc::decrement_strong_count(ptr.as_ptr().cast_const()) };
                }
            }
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // AcqRel: the last dropper must see every other handle's returns to the ring.
        if self.shared.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
            // Exact: no handle is left to return a buffer to the ring or to hold a
            // cache, and one that returned a buffer did so before its own decrement.
            let out = (self.shared.count as usize).saturating_sub(self.shared.ring.len());
            if out > 0 {
                // The memory stays while buffers are out: the last of them to come
                // back (`Pool::put_home`) releases this reference. A `Buf` dropped
                // instead of put back never comes back, so its pool stays leaked.
                std::mem::forget(Arc::clone(&self.shared));
                let before = self.shared.orphan_returns.fetch_sub(out, Ordering::AcqRel);
                if before == out {
                    // Every one came back between the decrement and here.
                    // SAFETY: releases the reference forgotten just above.
                    unsafe { Arc::decrement_strong_count(Arc::as_ptr(&self.shared)) };
                }
            }
        }
    }
}

impl Pool {
    /// Creates a pool in a new arena of its own.
    pub fn new(cfg: &PoolConfig) -> Result<Pool, PoolError> {
        let footprint = cfg.footprint()?;
        let opts = ArenaOptions::new(footprint)
            .hugepages(cfg.hugepages)
            .shareable(cfg.shareable)
            .prefault(cfg.prefault)
            .name(cfg.name);
        let arena = Arena::new(&opts)?;
        Pool::in_arena(cfg, Arc::new(arena), 0)
    }

    /// Creates a pool occupying [`PoolConfig::footprint`] bytes of `arena` from
    /// `offset`, so several pools can share one registration. Pools placed in the same
    /// arena must not overlap; that is the caller's layout to get right.
    pub fn in_arena(cfg: &PoolConfig, arena: Arc<Arena>, offset: usize) -> Result<Pool, PoolError> {
        let stride = cfg.stride()?;
        let needed = cfg.footprint()?;
        let fits = offset
            .checked_add(needed)
            .is_some_and(|end| end <= arena.len());
        if !fits {
            return Err(PoolError::OutOfArena {
                offset,
                needed,
                arena_len: arena.len(),
            });
        }
        let first = arena.base().wrapping_add(offset);
        if (first as usize) & (cfg.effective_align() - 1) != 0 {
            return Err(PoolError::InvalidConfig(ConfigFault::MisalignedOffset));
        }
        let slots = NonNull::new(first).ok_or(PoolError::InvalidConfig(ConfigFault::NullArena))?;
        let ring = IndexRing::with_capacity(cfg.count as usize)
            .ok_or(PoolError::InvalidConfig(ConfigFault::TooManyBufs))?;
        // Ascending order, so a fresh pool hands out low addresses first.
        let all: Vec<u32> = (0..cfg.count).collect();
        ring.enqueue_all(&all);
        let states = (0..cfg.count)
            .map(|_| AtomicU8::new(SLOT_FREE))
            .collect::<Vec<_>>()
            .into_boxed_slice();
        let shared = PoolShared {
            id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
            name: cfg.name,
            arena,
            offset,
            slots,
            stride,
            buf_len: cfg.buf_size,
            count: cfg.count,
            cache_size: cfg.cache_size,
            ring,
            states,
            high_water: CachePadded(AtomicUsize::new(0)),
            caches: Mutex::new(Vec::new()),
            handles: AtomicUsize::new(1),
            orphan_returns: AtomicUsize::new(0),
        };
        Ok(Pool {
            shared: Arc::new(shared),
        })
    }

    pub(crate) fn shared(&self) -> &PoolShared {
        &self.shared
    }

    /// A new per-thread cache in front of this pool, with the configured size.
    pub fn cache(&self) -> PoolCache {
        PoolCache::new(self.clone())
    }

    /// Process-unique id of this pool (also carried by its buffers and tokens).
    pub fn id(&self) -> u32 {
        self.shared.id
    }

    /// The name given in the configuration.
    pub fn name(&self) -> &'static str {
        self.shared.name
    }

    /// Usable bytes per buffer.
    pub fn buf_size(&self) -> usize {
        self.shared.buf_len
    }

    /// Distance in bytes between consecutive buffers.
    pub fn stride(&self) -> usize {
        self.shared.stride
    }

    /// Number of buffers.
    pub fn count(&self) -> usize {
        self.shared.count as usize
    }

    /// Per-thread cache size.
    pub fn cache_size(&self) -> usize {
        self.shared.cache_size
    }

    /// The arena the buffers live in (register it once with a fabric, up front).
    pub fn arena(&self) -> &Arc<Arena> {
        &self.shared.arena
    }

    /// Offset of the first buffer within the arena.
    pub fn arena_offset(&self) -> usize {
        self.shared.offset
    }

    /// Registration keys stored on the arena, if registered.
    pub fn keys(&self) -> Option<RegKeys> {
        self.shared.keys()
    }

    /// True when `buf` belongs to this pool.
    pub fn owns(&self, buf: &Buf) -> bool {
        buf.pool_ptr() == NonNull::from(&*self.shared)
    }

    /// Takes one buffer straight from the shared ring, bypassing any cache. Meant for
    /// setup and cold paths; pollers should use a [`PoolCache`].
    pub fn get(&self) -> Result<Buf, PoolError> {
        let mut one = [0u32; 1];
        if self.shared.ring.dequeue(&mut one) == 0 {
            return Err(PoolError::Exhausted);
        }
        self.shared.note_drained();
        Ok(self.shared.hand_out(one[0]))
    }

    /// Returns one buffer straight to the shared ring, bypassing any cache.
    pub fn put(&self, buf: Buf) -> Result<(), ForeignBuf> {
        if !self.owns(&buf) {
            return Err(ForeignBuf(buf));
        }
        let index = self.shared.take_back(buf);
        self.shared.ring.enqueue_all(&[index]);
        Ok(())
    }

    /// Turns a token from [`Buf::into_token`] back into its buffer. Each token is
    /// redeemable once; anything else (another pool's token, a forged or repeated one)
    /// is refused with [`PoolError::BadToken`].
    pub fn redeem(&self, token: BufToken) -> Result<Buf, PoolError> {
        let raw = token.to_u64();
        let (id, index) = ((raw >> 32) as u32, raw as u32);
        if id != self.shared.id || index >= self.shared.count {
            return Err(PoolError::BadToken(raw));
        }
        self.shared.states[index as usize]
            .compare_exchange(SLOT_TOKEN, SLOT_HELD, Ordering::AcqRel, Ordering::Acquire)
            .map_err(|_| PoolError::BadToken(raw))?;
        // SAFETY: the state transition above succeeded for exactly one caller, so this
        // is the only handle to the slot.
        Ok(unsafe { Buf::new(NonNull::from(&*self.shared), index) })
    }

    /// Rebuilds a buffer from [`Buf::into_raw`] without any check in release builds.
    ///
    /// Debug builds panic if the slot is not currently held (use after free), and a
    /// later second `put` of a duplicated buffer panics as a double free.
    ///
    /// # Safety
    ///
    /// `index` must come from `into_raw` on a buffer of this pool, and be turned back
    /// into a buffer at most once; otherwise two handles alias one buffer.
    pub unsafe fn from_raw(&self, index: u32) -> Buf {
        self.shared.check_live(index);
        // SAFETY: the caller guarantees exclusive ownership of the slot.
        unsafe { Buf::new(NonNull::from(&*self.shared), index) }
    }

    /// Gives the memory of every buffer now in the shared ring back to the operating
    /// system ([`Arena::release`]): such a buffer reads as zero afterwards and is
    /// resident again only once used. Buffers in use or parked in a cache keep theirs
    /// (flush a cache first to include its buffers). Returns the bytes released.
    ///
    /// The free buffers are taken out of the ring while their pages go (a concurrent
    /// [`get`](Self::get) may find the pool exhausted meanwhile), so no buffer handed
    /// out can lose its contents; adjacent buffers are released together, and they go
    /// back in address order. A cold path: it allocates, and makes a system call per
    /// run of adjacent free buffers. Nothing is released on hugepages or for an arena
    /// mapped from another process, and it must not be used on memory an RDMA device
    /// has pinned (see [`Arena::release`]).
    pub fn release_free(&self) -> Result<usize, PoolError> {
        let sh = &self.shared;
        let mut free = vec![0u32; sh.count as usize];
        let mut n = 0;
        while n < free.len() {
            let got = sh.ring.dequeue(&mut free[n..]);
            if got == 0 {
                break;
            }
            n += got;
        }
        let free = &mut free[..n];
        free.sort_unstable();
        let mut released = 0;
        let mut result = Ok(());
        let mut i = 0;
        while i < free.len() && result.is_ok() {
            // A run of adjacent buffers: one range of the arena.
            let mut j = i + 1;
            while j < free.len() && free[j] == free[j - 1] + 1 {
                j += 1;
            }
            let start = sh.offset + free[i] as usize * sh.stride;
            let len = (j - i) * sh.stride;
            match sh.arena.release(start, len) {
                Ok(b) => released += b,
                Err(e) => result = Err(PoolError::Arena(e)),
            }
            i = j;
        }
        sh.ring.enqueue_all(free);
        result.map(|()| released)
    }

    /// Buffers in the shared ring.
    pub fn available(&self) -> usize {
        self.shared.ring.len()
    }

    /// True when every buffer is back in the shared ring. Buffers parked in a cache
    /// count as back only once the cache flushes (see [`PoolCache::flush`]).
    pub fn is_full(&self) -> bool {
        self.shared.ring.len() == self.shared.count as usize
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> PoolStats {
        let count = self.shared.count as usize;
        let available = self.shared.ring.len().min(count);
        let cached = self.shared.cached_total();
        PoolStats {
            count,
            available,
            cached,
            in_use: count.saturating_sub(available).saturating_sub(cached),
            high_water: self.shared.high_water.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod orphan_tests {
    use super::*;

    fn small() -> Pool {
        Pool::new(&PoolConfig::new("orphan", 256, 4).hugepages(HugePages::Never)).expect("pool")
    }

    #[test]
    fn the_last_buffer_back_after_the_last_handle_frees_the_pool() {
        let pool = small();
        let mem = Arc::downgrade(&pool.shared);
        let (a, b) = (pool.get().expect("a"), pool.get().expect("b"));
        let again = Pool::of_buf(&a).expect("a handle while the pool has one");
        assert_eq!(again.id(), pool.id());
        drop(again);
        drop(pool);
        // Both buffers out: the memory stays, and no new handle can be made.
        assert!(mem.upgrade().is_some());
        assert!(Pool::of_buf(&a).is_none());
        Pool::put_home(a);
        assert!(mem.upgrade().is_some(), "one buffer is still out");
        Pool::put_home(b);
        assert!(
            mem.upgrade().is_none(),
            "the last buffer back freed the pool"
        );
    }

    #[test]
    fn put_home_with_a_handle_returns_to_the_ring() {
        let pool = small();
        let mem = Arc::downgrade(&pool.shared);
        let a = pool.get().expect("a");
        assert_eq!(pool.available(), 3);
        Pool::put_home(a);
        assert_eq!(pool.available(), 4);
        drop(pool);
        assert!(
            mem.upgrade().is_none(),
            "nothing out: freed with the last handle"
        );
    }
}
