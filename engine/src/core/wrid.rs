//! Work-request identifiers: what a completion is about, packed into the 64-bit `wr_id`.
//!
//! ```text
//!  63    60 59                        32 31                          0
//! +--------+----------------------------+-----------------------------+
//! |  kind  |            aux             |            slot             |
//! +--------+----------------------------+-----------------------------+
//! ```
//!
//! - `kind` says which table `slot` indexes: the receive table for [`WrKind::Recv`], the
//!   requester's call slots for the call-side kinds, the responder's reply contexts for
//!   the reply-side kinds.
//! - `aux` refines it: the MR slot of a FastReg or LocalInvalidate, the segment number of
//!   an RDMA Read or Write.
//!
//! Nothing is looked up by address and no generation is needed: a slot is only reused
//! after every work request naming it has completed (each is signaled and counted), so
//! a completion always finds the use it was posted for. Completions that decode to a
//! free slot or an unknown kind (a provider bug, never peer input) are counted and
//! dropped, never trusted.

/// What a work request was posted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum WrKind {
    /// A posted receive; `slot` indexes the receive table.
    Recv = 1,
    /// The Send carrying a call; `slot` is the call slot.
    CallSend = 2,
    /// A fast registration for a call's chunk; `slot` is the call slot, `aux` the MR slot.
    FastReg = 3,
    /// A local invalidation of a call's chunk; `slot` is the call slot, `aux` the MR slot.
    LocalInv = 4,
    /// The Send carrying a reply or an RDMA_ERROR; `slot` is the reply context.
    ReplySend = 5,
    /// An RDMA Read pulling a call's Read chunk; `slot` is the reply context, `aux` the
    /// segment number.
    ChunkRead = 6,
    /// An RDMA Write pushing results into a Write or Reply chunk; `slot` is the reply
    /// context, `aux` the segment number.
    ChunkWrite = 7,
    /// The read-only FastReg exposing a reply in a responder-provided Read chunk; `slot`
    /// is the exposed reply (its MR slot).
    ReplyReg = 8,
    /// The LocalInvalidate ending an exposed reply; `slot` is the exposed reply.
    ReplyInv = 9,
    /// An RDMA Read pulling a reply's responder-provided Read chunk; `slot` is the call
    /// slot, `aux` the segment number.
    ReplyPull = 10,
    /// The Send of an RDMA_DONE; `slot` is the DONE buffer.
    DoneSend = 11,
    /// A zero-length RDMA Read posted only to retire unsignaled Sends before it
    /// (`core/signal.rs`); `slot` is 0.
    Barrier = 12,
}

impl WrKind {
    const fn from_bits(v: u8) -> Option<WrKind> {
        Some(match v {
            1 => WrKind::Recv,
            2 => WrKind::CallSend,
            3 => WrKind::FastReg,
            4 => WrKind::LocalInv,
            5 => WrKind::ReplySend,
            6 => WrKind::ChunkRead,
            7 => WrKind::ChunkWrite,
            8 => WrKind::ReplyReg,
            9 => WrKind::ReplyInv,
            10 => WrKind::ReplyPull,
            11 => WrKind::DoneSend,
            12 => WrKind::Barrier,
            _ => return None,
        })
    }
}

/// Largest `aux` value (28 bits).
pub(crate) const MAX_AUX: u32 = (1 << 28) - 1;

/// A decoded `wr_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WrId {
    /// What the request was for.
    pub kind: WrKind,
    /// Index into the table `kind` names.
    pub slot: u32,
    /// Kind-specific refinement (at most 2^28 - 1).
    pub aux: u32,
}

/// A `wr_id` that does not decode: its kind bits name no [`WrKind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("work request id {0:#018x} names no known kind")]
pub struct BadWrId(pub u64);

impl WrId {
    /// An id for `kind` on `slot` with no refinement.
    #[inline]
    pub const fn new(kind: WrKind, slot: u32) -> WrId {
        WrId { kind, slot, aux: 0 }
    }

    /// The same id with `aux` set (truncated to 28 bits).
    #[inline]
    pub const fn with_aux(mut self, aux: u32) -> WrId {
        self.aux = aux & MAX_AUX;
        self
    }

    /// Packs the id into a `wr_id`.
    #[inline]
    pub const fn encode(self) -> u64 {
        ((self.kind as u64) << 60) | (((self.aux & MAX_AUX) as u64) << 32) | self.slot as u64
    }

    /// The id `raw` encodes, whose kind bits the caller found to be `kind`'s: what
    /// [`decode`](Self::decode) returns for it, without checking the kind again.
    #[inline(always)]
    pub(crate) const fn of_raw(kind: WrKind, raw: u64) -> WrId {
        debug_assert!(raw >> 60 == kind as u64);
        WrId {
            kind,
            slot: raw as u32,
            aux: ((raw >> 32) as u32) & MAX_AUX,
        }
    }

    /// Unpacks a `wr_id` from a completion.
    #[inline]
    pub const fn decode(raw: u64) -> Result<WrId, BadWrId> {
        match WrKind::from_bits((raw >> 60) as u8) {
            Some(kind) => Ok(WrId {
                kind,
                slot: raw as u32,
                aux: ((raw >> 32) as u32) & MAX_AUX,
            }),
            None => Err(BadWrId(raw)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_kind_and_extreme_fields() {
        for kind in [
            WrKind::Recv,
            WrKind::CallSend,
            WrKind::FastReg,
            WrKind::LocalInv,
            WrKind::ReplySend,
            WrKind::ChunkRead,
            WrKind::ChunkWrite,
            WrKind::Barrier,
        ] {
            for (slot, aux) in [(0, 0), (u32::MAX, MAX_AUX), (7, 3)] {
                let id = WrId::new(kind, slot).with_aux(aux);
                assert_eq!(WrId::decode(id.encode()), Ok(id));
            }
        }
    }

    #[test]
    fn of_raw_reads_what_decode_reads() {
        for kind in [
            WrKind::Recv,
            WrKind::CallSend,
            WrKind::ReplySend,
            WrKind::Barrier,
        ] {
            for (slot, aux) in [(0, 0), (u32::MAX, MAX_AUX), (7, 3)] {
                let raw = WrId::new(kind, slot).with_aux(aux).encode();
                assert_eq!(Ok(WrId::of_raw(kind, raw)), WrId::decode(raw));
            }
        }
    }

    #[test]
    fn unknown_kinds_are_refused() {
        assert_eq!(WrId::decode(0), Err(BadWrId(0)));
        assert_eq!(WrId::decode(0xf << 60), Err(BadWrId(0xf << 60)));
    }
}
