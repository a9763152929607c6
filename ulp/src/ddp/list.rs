//! The fixed-capacity list that carries DDP items alongside an RPC message.

use core::fmt;
use core::mem::MaybeUninit;

/// Most DDP items (Read chunks of a call, or Write chunks of a reply) one message may
/// carry through this crate.
///
/// Eight matches the engine's default Write chunk limit
/// (`rpcrdma::wire::header::Limits::DEFAULT`) and is well above what RFC 8267 §6.4.2 asks
/// NFSv4 clients to send (one non-zero-position Read chunk, one Write chunk).
pub const MAX_DDP_ITEMS: usize = 8;

/// A DDP-eligible argument moved out of the inline stream into a Read chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadItem<'d> {
    /// XDR position of the data: its offset in the reconstructed RPC message, counted
    /// from the first octet of the XID (RFC 8166 §3.4.5).
    pub position: u32,
    /// The data, without XDR roundup.
    pub data: &'d [u8],
}

/// A DDP-eligible result moved out of the inline stream into a Write chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriteItem<'d> {
    /// Index of the Write chunk in the requester's Write list.
    pub chunk: u32,
    /// The data, without XDR roundup; its length is what the responder reports back in
    /// that chunk.
    pub data: &'d [u8],
    /// Offset in the message where the data belongs (just after its length word): its
    /// XDR position, which a reply sent by send-based DDP names
    /// (`rpcrdma::ReplyWriter::ddp_result_position`).
    pub at: u32,
}

/// The list was full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("more than {capacity} DDP items in one message")]
pub struct ListFull {
    /// Capacity of the list.
    pub capacity: usize,
}

/// Up to [`MAX_DDP_ITEMS`] items held inline, in the order they were added, so that
/// encoding a message never allocates.
///
/// The places past the length are left uninitialised: every call and reply builds
/// lists that are mostly empty, and filling eight places with defaults each time is
/// work nothing reads.
pub struct DdpList<T> {
    /// `items[..len]` are initialised; the rest are not.
    items: [MaybeUninit<T>; MAX_DDP_ITEMS],
    len: usize,
}

// By hand rather than derived: a derived `Clone` would ask `MaybeUninit<T>: Clone`,
// which holds only for `T: Copy` (the only items a list is ever built with).
impl<T: Copy> Clone for DdpList<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: Copy> Copy for DdpList<T> {}

impl<T: Copy + Default> DdpList<T> {
    /// An empty list.
    #[inline]
    pub fn new() -> Self {
        DdpList {
            items: [const { MaybeUninit::uninit() }; MAX_DDP_ITEMS],
            len: 0,
        }
    }

    /// Builds a list from `items`; fails if there are more than [`MAX_DDP_ITEMS`].
    pub fn from_slice(items: &[T]) -> Result<Self, ListFull> {
        let mut l = Self::new();
        for &i in items {
            l.push(i)?;
        }
        Ok(l)
    }

    /// Appends an item.
    #[inline]
    pub fn push(&mut self, item: T) -> Result<(), ListFull> {
        let slot = self.items.get_mut(self.len).ok_or(ListFull {
            capacity: MAX_DDP_ITEMS,
        })?;
        slot.write(item);
        self.len += 1;
        Ok(())
    }

    /// Removes every item.
    pub fn clear(&mut self) {
        self.len = 0;
    }
}

impl<T> DdpList<T> {
    /// The items, in order.
    #[inline]
    pub fn as_slice(&self) -> &[T] {
        let init = &self.items[..self.len];
        // SAFETY: `items[..len]` are initialised (the type's invariant: `push` writes a
        // place before counting it) and `MaybeUninit<T>` has the layout of `T`.
        unsafe { core::slice::from_raw_parts(init.as_ptr().cast::<T>(), init.len()) }
    }

    /// Number of items.
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether the list is empty.
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<T: Copy + Default> Default for DdpList<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> core::ops::Deref for DdpList<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: PartialEq> PartialEq for DdpList<T> {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl<T: Eq> Eq for DdpList<T> {}

impl<T: fmt::Debug> fmt::Debug for DdpList<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}
