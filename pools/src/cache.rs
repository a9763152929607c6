//! Per-thread caches in front of a pool's shared ring.
//!
//! A cache is a small stack of slot indices owned by one thread. Gets and puts touch
//! only that stack; the shared ring is visited in bulk, to refill when the stack runs
//! dry and to flush when it overflows, so the common case performs no shared atomic
//! operation at all.

use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;

use crate::buf::Buf;
use crate::error::{ForeignBuf, PoolError};
use crate::pool::{CacheCount, Pool, PoolShared};

/// A per-thread (per-poller) cache of free buffers of one [`Pool`].
///
/// It refills to the pool's cache size when empty and, once it holds twice that,
/// flushes the oldest half back to the shared ring. Dropping it flushes everything.
/// It is `Send` (build it, then move it to its thread) but not `Sync`.
///
/// Free buffers parked in one thread's cache are invisible to the others, so a pool
/// can report [`PoolError::Exhausted`] while caches elsewhere still hold some. Size
/// pools for peak demand plus `2 * cache_size` per cache, or call
/// [`PoolCache::flush`] on threads that go idle.
///
/// Bulk operations take slices of `Option<Buf>`: a `Buf` is move-only, so an empty
/// entry is `None` rather than an uninitialised handle. `Option<Buf>` is the same size
/// as `Buf`.
pub struct PoolCache {
    pool: Pool,
    /// Cached here so ownership checks and handle creation skip the Arc indirection.
    me: NonNull<PoolShared>,
    stack: Box<[u32]>,
    len: usize,
    size: usize,
    /// This cache's `len`, published for `Pool::stats`.
    published: CacheCount,
    _not_sync: PhantomData<Cell<()>>,
}

// SAFETY: `me` points into the pool kept alive by `pool`; the cache has no
// thread-affine state, it merely must not be shared (hence !Sync via the marker).
unsafe impl Send for PoolCache {}

impl std::fmt::Debug for PoolCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolCache")
            .field("pool", &self.pool.id())
            .field("len", &self.len)
            .field("capacity", &self.stack.len())
            .finish()
    }
}

impl PoolCache {
    pub(crate) fn new(pool: Pool) -> PoolCache {
        let size = pool.cache_size();
        let me = NonNull::from(pool.shared());
        let published = pool.shared().register_cache();
        PoolCache {
            published,
            pool,
            me,
            stack: vec![0u32; size * 2].into_boxed_slice(),
            len: 0,
            size,
            _not_sync: PhantomData,
        }
    }

    /// A Relaxed store to a line only this thread writes: no RMW, no contention.
    #[inline]
    fn publish(&self) {
        self.published.store(self.len, Ordering::Relaxed);
    }

    #[inline]
    fn shared(&self) -> &PoolShared {
        self.pool.shared()
    }

    /// The pool this cache serves.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Free buffers parked in this cache.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no free buffer is parked here.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Most buffers the cache holds, and so the largest bulk get.
    pub fn capacity(&self) -> usize {
        self.stack.len()
    }

    /// Takes one buffer, refilling from the shared ring in bulk when empty.
    #[inline]
    pub fn get(&mut self) -> Result<Buf, PoolError> {
        if self.len == 0 {
            self.refill(1)?;
        }
        self.len -= 1;
        self.publish();
        let index = self.stack[self.len];
        Ok(self.shared().hand_out(index))
    }

    /// Fills every `None` entry of `out` with a buffer, all or nothing: on error
    /// `out` is unchanged. At most [`PoolCache::capacity`] entries can be filled at once.
    #[inline]
    pub fn get_bulk(&mut self, out: &mut [Option<Buf>]) -> Result<(), PoolError> {
        // Common case: enough cached for every entry, no need to count the holes.
        if self.len < out.len() {
            let need = out.iter().filter(|b| b.is_none()).count();
            if need > self.stack.len() {
                return Err(PoolError::BulkTooLarge {
                    requested: need,
                    max: self.stack.len(),
                });
            }
            if self.len < need {
                self.refill(need)?;
            }
        }
        let shared = self.pool.shared();
        for slot in out.iter_mut() {
            if slot.is_none() {
                self.len -= 1;
                *slot = Some(shared.hand_out(self.stack[self.len]));
            }
        }
        self.publish();
        Ok(())
    }

    /// Returns one buffer, flushing half the cache to the shared ring when full.
    /// A buffer of another pool is handed back untouched.
    #[inline]
    pub fn put(&mut self, buf: Buf) -> Result<(), ForeignBuf> {
        if buf.pool_ptr() != self.me {
            return Err(ForeignBuf(buf));
        }
        self.push(buf);
        self.publish();
        Ok(())
    }

    /// Takes every buffer out of `bufs`, leaving `None`s. Buffers of another pool are
    /// left in place and reported as [`PoolError::ForeignBuffers`]; the rest are
    /// returned regardless.
    #[inline]
    pub fn put_bulk(&mut self, bufs: &mut [Option<Buf>]) -> Result<(), PoolError> {
        let mut foreign = 0;
        for slot in bufs.iter_mut() {
            match slot {
                Some(b) if b.pool_ptr() == self.me => {
                    if let Some(b) = slot.take() {
                        self.push(b);
                    }
                }
                Some(_) => foreign += 1,
                None => {}
            }
        }
        self.publish();
        if foreign > 0 {
            return Err(PoolError::ForeignBuffers { count: foreign });
        }
        Ok(())
    }

    /// Returns every cached buffer to the shared ring, so other threads can have them
    /// and [`Pool::is_full`] counts them.
    pub fn flush(&mut self) {
        let n = self.len;
        self.flush_oldest(n);
    }

    #[inline]
    fn push(&mut self, buf: Buf) {
        let index = self.shared().take_back(buf);
        if self.len == self.stack.len() {
            // Keep the most recently freed (cache-warm) half, return the oldest.
            self.flush_oldest(self.len - self.size);
        }
        self.stack[self.len] = index;
        self.len += 1;
    }

    #[cold]
    fn flush_oldest(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        let shared = self.pool.shared();
        shared.ring.enqueue_all(&self.stack[..n]);
        self.stack.copy_within(n..self.len, 0);
        self.len -= n;
        self.publish();
    }

    /// Brings the cache to at least `need` buffers (need <= capacity), topping up to
    /// `need + size` so the next gets stay local.
    #[cold]
    fn refill(&mut self, need: usize) -> Result<(), PoolError> {
        let target = (need + self.size).min(self.stack.len());
        let before = self.len;
        let shared = self.pool.shared();
        while self.len < need {
            let n = shared.ring.dequeue(&mut self.stack[self.len..target]);
            if n == 0 {
                break;
            }
            self.len += n;
        }
        let got = self.len - before;
        if got > 0 {
            shared.note_drained();
            self.publish();
        }
        if self.len < need {
            return Err(PoolError::Exhausted);
        }
        Ok(())
    }
}

impl Drop for PoolCache {
    fn drop(&mut self) {
        self.flush();
        self.pool.shared().unregister_cache(&self.published);
    }
}
