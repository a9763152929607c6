//! The buffer handle: a move-only claim on one slot of a pool.

use std::fmt;
use std::ptr::NonNull;

use crate::arena::RegKeys;
use crate::error::PoolError;
use crate::pool::PoolShared;

/// One buffer of a pool, owned exclusively by whoever holds this handle.
///
/// Sixteen bytes: a pointer to its pool and a slot index. It knows its address,
/// length, offset in the arena and the arena's registration keys, so it can become a
/// scatter-gather entry directly. It is not `Clone`; give it back with
/// `PoolCache::put` (or `Pool::put`). Dropping it instead leaks the slot until the
/// pool is dropped, which `Pool::is_full` reveals.
#[must_use = "a Buf that is dropped instead of put back leaks its slot"]
pub struct Buf {
    pool: NonNull<PoolShared>,
    index: u32,
}

// SAFETY: a Buf is the unique owner of its slot's bytes; its pool bookkeeping is
// Sync and outlives every Buf (a pool dropped with buffers out is leaked).
unsafe impl Send for Buf {}
unsafe impl Sync for Buf {}

/// A buffer's coordinates in the form a fabric posts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SgEntry {
    /// Virtual address of the first byte.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// Local key of the arena registration.
    pub lkey: u32,
}

/// A buffer parked as a plain number (e.g. a work-request id) while a fabric owns it;
/// [`Pool::redeem`](crate::Pool::redeem) turns it back into the buffer exactly once.
///
/// Redemption is checked, so a forged, foreign or repeated token can never yield a
/// second handle to a buffer. Tokens carry no generation, though: keeping a redeemed
/// token and presenting it after the same slot was parked again by someone else takes
/// that buffer from them. That is a logic error, not a memory-safety one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BufToken(u64);

impl BufToken {
    /// The token as a number.
    pub fn to_u64(self) -> u64 {
        self.0
    }

    /// A token from a number, e.g. a work-request id coming back in a completion.
    /// Nothing is trusted until redemption checks it.
    pub fn from_u64(v: u64) -> Self {
        BufToken(v)
    }
}

impl Buf {
    /// # Safety
    ///
    /// `pool` must point to a live pool that outlives the buffer, and the caller must
    /// own slot `index` exclusively.
    #[inline]
    pub(crate) unsafe fn new(pool: NonNull<PoolShared>, index: u32) -> Buf {
        Buf { pool, index }
    }

    #[inline]
    fn shared(&self) -> &PoolShared {
        // SAFETY: the pool outlives every Buf (see Pool's Drop).
        unsafe { self.pool.as_ref() }
    }

    #[inline]
    pub(crate) fn pool_ptr(&self) -> NonNull<PoolShared> {
        self.pool
    }

    /// Slot index within the pool.
    #[inline]
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Id of the pool the buffer belongs to.
    #[inline]
    pub fn pool_id(&self) -> u32 {
        self.shared().id
    }

    /// Usable length in bytes (the pool's buffer size).
    #[inline]
    pub fn len(&self) -> usize {
        self.shared().buf_len
    }

    /// Always false: pools have no zero-length buffers.
    #[inline]
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Address of the first byte.
    #[inline]
    pub fn as_ptr(&self) -> *const u8 {
        self.shared().slot_ptr(self.index)
    }

    /// Mutable address of the first byte, for handing to a fabric that writes into it.
    #[inline]
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.shared().slot_ptr(self.index)
    }

    /// Address of the first byte as a number, as scatter-gather entries carry it.
    #[inline]
    pub fn addr(&self) -> u64 {
        self.as_ptr() as u64
    }

    /// Offset of the first byte from the start of the arena.
    #[inline]
    pub fn offset(&self) -> usize {
        self.shared().slot_offset(self.index)
    }

    /// Registration keys of the arena, if a fabric has registered it.
    #[inline]
    pub fn keys(&self) -> Option<RegKeys> {
        self.shared().keys()
    }

    /// Local key of the arena registration, if registered.
    #[inline]
    pub fn lkey(&self) -> Option<u32> {
        self.keys().map(|k| k.lkey)
    }

    /// A scatter-gather entry covering the first `len` bytes.
    #[inline]
    pub fn sge(&self, len: usize) -> Result<SgEntry, PoolError> {
        let buf_len = self.len();
        if len > buf_len {
            return Err(PoolError::TooLong {
                requested: len,
                len: buf_len,
            });
        }
        let keys = self.keys().ok_or(PoolError::NotRegistered)?;
        Ok(SgEntry {
            addr: self.addr(),
            // buf_len fits in u32 (checked when the pool was configured).
            len: len as u32,
            lkey: keys.lkey,
        })
    }

    /// The buffer's bytes.
    ///
    /// Debug builds panic if the slot is not held (a use after free through
    /// `Pool::from_raw`).
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        let shared = self.shared();
        shared.check_live(self.index);
        // SAFETY: the slot lies inside the live arena and this handle owns it.
        unsafe { std::slice::from_raw_parts(shared.slot_ptr(self.index), shared.buf_len) }
    }

    /// The buffer's bytes, writable. Same debug check as [`Buf::as_slice`].
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let shared = self.shared();
        shared.check_live(self.index);
        // SAFETY: as for as_slice, and &mut self makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(shared.slot_ptr(self.index), shared.buf_len) }
    }

    /// Parks the buffer as a token while a fabric owns it; see [`BufToken`].
    pub fn into_token(self) -> BufToken {
        let shared = self.shared();
        shared.park_as_token(self.index);
        BufToken((u64::from(shared.id) << 32) | u64::from(self.index))
    }

    /// Gives up the handle and returns its slot index, without bookkeeping. Pair with
    /// the unsafe [`Pool::from_raw`](crate::Pool::from_raw); prefer tokens.
    pub fn into_raw(self) -> u32 {
        self.index
    }
}

impl AsRef<[u8]> for Buf {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsMut<[u8]> for Buf {
    fn as_mut(&mut self) -> &mut [u8] {
        self.as_mut_slice()
    }
}

impl fmt::Debug for Buf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Buf")
            .field("pool", &self.pool_id())
            .field("index", &self.index)
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len())
            .finish()
    }
}
