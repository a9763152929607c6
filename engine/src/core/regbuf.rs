//! [`RegBuf`]: an owned buffer of a registered pool that goes back to its pool when
//! dropped, on whatever thread drops it.
//!
//! It is the one currency of the engine's data path: call messages, DDP arguments,
//! write sinks, replies handed to the application, DDP results handed to the engine.
//! A pool [`Buf`] leaks its slot if dropped, so everything that can outlive a code path
//! (an outcome the application drops, a reply a handler returns early from) holds a
//! `RegBuf` instead.

use core::fmt;
use core::mem::ManuallyDrop;

use rpcrdma_pools::{Buf, Pool, PoolCache, PoolError};

use crate::fabric::Sge;

/// Why a [`RegBuf`] could not be made or used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RegBufError {
    /// The pool had no free buffer.
    #[error("buffer pool exhausted")]
    Exhausted,
    /// The buffer's arena has not been registered with a fabric, so it has no keys.
    #[error("buffer's arena is not registered with the fabric")]
    NotRegistered,
    /// The buffer does not belong to the pool it was paired with.
    #[error("buffer does not belong to the given pool")]
    ForeignBuf,
    /// A length beyond the buffer's capacity.
    #[error("length {len} exceeds the buffer capacity {capacity}")]
    TooLong {
        /// Length asked for.
        len: usize,
        /// Capacity of the buffer.
        capacity: usize,
    },
}

fn from_pool_error(e: PoolError) -> RegBufError {
    match e {
        PoolError::NotRegistered => RegBufError::NotRegistered,
        _ => RegBufError::Exhausted,
    }
}

/// A pool buffer with a length: `len` valid bytes out of `capacity`. Returns itself to
/// its pool on drop (one lock-free ring operation, no allocation).
pub struct RegBuf {
    buf: ManuallyDrop<Buf>,
    // No pool handle: the buffer knows its pool, and a handle per buffer cost two
    // shared reference counts bumped when it was taken and two dropped when it went
    // back (four locked instructions per buffer, several buffers per RPC). A handle is
    // made only to give a buffer back outside a cache (`Pool::put_home`).
    len: u32,
}

impl RegBuf {
    /// Pairs `buf` with the pool it came from. The length starts at zero.
    pub fn new(buf: Buf, pool: &Pool) -> Result<RegBuf, (RegBufError, Buf)> {
        if !pool.owns(&buf) {
            return Err((RegBufError::ForeignBuf, buf));
        }
        Ok(RegBuf {
            buf: ManuallyDrop::new(buf),
            len: 0,
        })
    }

    /// Takes a buffer straight from `pool` (cold paths; pollers use
    /// [`from_cache`](Self::from_cache)).
    pub fn from_pool(pool: &Pool) -> Result<RegBuf, RegBufError> {
        let buf = pool.get().map_err(from_pool_error)?;
        Ok(RegBuf {
            buf: ManuallyDrop::new(buf),
            len: 0,
        })
    }

    /// Takes a buffer from a per-thread cache.
    #[inline]
    pub fn from_cache(cache: &mut PoolCache) -> Result<RegBuf, RegBufError> {
        let buf = cache.get().map_err(from_pool_error)?;
        Ok(RegBuf {
            buf: ManuallyDrop::new(buf),
            len: 0,
        })
    }

    /// Valid bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True when no byte is valid.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes the buffer can hold.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Sets the number of valid bytes.
    pub fn set_len(&mut self, len: usize) -> Result<(), RegBufError> {
        if len > self.capacity() {
            return Err(RegBufError::TooLong {
                len,
                capacity: self.capacity(),
            });
        }
        // Pool buffers are at most 4 GiB (the pool checks), so this fits.
        self.len = len as u32;
        Ok(())
    }

    /// Copies `data` to the start of the buffer and makes it the valid bytes.
    pub fn fill(&mut self, data: &[u8]) -> Result<(), RegBufError> {
        let capacity = self.buf.len();
        let dst = self
            .buf
            .as_mut_slice()
            .get_mut(..data.len())
            .ok_or(RegBufError::TooLong {
                len: data.len(),
                capacity,
            })?;
        dst.copy_from_slice(data);
        self.len = data.len() as u32;
        Ok(())
    }

    /// The valid bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        self.buf.as_slice().get(..self.len()).unwrap_or(&[])
    }

    /// The valid bytes, writable.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let len = self.len();
        let all = self.buf.as_mut_slice();
        let n = len.min(all.len());
        &mut all[..n]
    }

    /// The whole buffer, writable, whatever the length (to write a message, then
    /// [`set_len`](Self::set_len)).
    #[inline]
    pub fn storage_mut(&mut self) -> &mut [u8] {
        self.buf.as_mut_slice()
    }

    /// The whole buffer, whatever the length.
    #[inline]
    pub fn storage(&self) -> &[u8] {
        self.buf.as_slice()
    }

    /// Address of the first byte.
    #[inline]
    pub fn addr(&self) -> u64 {
        self.buf.addr()
    }

    /// Local key of the buffer's registration.
    #[inline]
    pub fn lkey(&self) -> Result<u32, RegBufError> {
        self.buf.lkey().ok_or(RegBufError::NotRegistered)
    }

    /// Remote key of the buffer's arena registration: what a persistent-mode chunk
    /// advertises (it grants access only if the arena was registered with remote access).
    #[inline]
    pub fn rkey(&self) -> Result<u32, RegBufError> {
        self.buf
            .keys()
            .map(|k| k.rkey)
            .ok_or(RegBufError::NotRegistered)
    }

    /// A gather or scatter entry for `len` bytes from `offset`.
    pub fn sge(&self, offset: usize, len: usize) -> Result<Sge, RegBufError> {
        let end = offset.checked_add(len).ok_or(RegBufError::TooLong {
            len: usize::MAX,
            capacity: self.capacity(),
        })?;
        if end > self.capacity() {
            return Err(RegBufError::TooLong {
                len: end,
                capacity: self.capacity(),
            });
        }
        Ok(Sge::new(
            self.addr() + offset as u64,
            len as u32,
            self.lkey()?,
        ))
    }

    /// A handle to the pool the buffer returns to; `None` once every other handle to
    /// it is gone (the pool then stays, leaked, for the buffers still out).
    pub fn pool(&self) -> Option<Pool> {
        Pool::of_buf(&self.buf)
    }

    /// True when the buffer belongs to the pool `cache` serves.
    #[inline(always)]
    pub(crate) fn is_from(&self, cache: &PoolCache) -> bool {
        cache.pool().owns(&self.buf)
    }

    /// Gives the buffer back through `cache` when it serves the same pool (cheaper than
    /// the shared ring); otherwise it goes to its own pool as on drop.
    #[inline(always)]
    pub fn release_into(self, cache: &mut PoolCache) {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never used again and its destructor does not run, so the
        // buffer is moved out exactly once.
        let buf = unsafe { ManuallyDrop::take(&mut this.buf) };
        if let Err(foreign) = cache.put(buf) {
            Pool::put_home(foreign.0);
        }
    }
}

impl Drop for RegBuf {
    fn drop(&mut self) {
        // SAFETY: drop runs once; the field is not touched afterwards.
        let buf = unsafe { ManuallyDrop::take(&mut self.buf) };
        Pool::put_home(buf);
    }
}

impl fmt::Debug for RegBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegBuf")
            .field("pool", &self.buf.pool_id())
            .field("index", &self.buf.index())
            .field("len", &self.len)
            .field("capacity", &self.capacity())
            .finish()
    }
}
