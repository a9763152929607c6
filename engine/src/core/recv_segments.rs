//! Scatter receives for send-based DDP (draft-dnoveck-rpcrdma-rtrext §7.2): every
//! receive of a connection that advertises a receive buffer structure is posted as two
//! scatter-gather entries, a header segment of the inline receive size (from the
//! receive pool) and one DDP-targetable segment from the large pool. A Send longer than
//! the header segment leaves its tail in the DDP segment, which is then detached from
//! the receive ("landed") so the responder can hand it to the service without a copy;
//! the receive gets a fresh segment when it is posted again. See `engine/DESIGN.md`,
//! "Send-based DDP".

use rpcrdma_pools::Pool;

use super::regbuf::RegBuf;
use crate::fabric::Sge;
use crate::wire::rtr::chars::{RbsGroup, RecvBufStructure, MAX_RBS_GROUPS, XMRSFLAG_DDP};

/// Alignment advertised for the DDP segment: the pools' buffers are cache-line aligned.
const SEGMENT_ALIGN: u32 = 64;

/// The DDP segments of a receive table, one per receive slot.
pub(crate) struct RecvSegments {
    /// The segment each receive slot is posted with (taken at staging, kept while the
    /// slot's Sends stay inside the header segment).
    segs: Box<[Option<RegBuf>]>,
    /// The large pool, used without a cache of its own: a cache in front of it would
    /// hoard buffers the responder's cache needs, and a segment is taken once per
    /// DDP call, not per message.
    pool: Pool,
    /// Octets of the header segment (the inline receive size).
    head_len: u32,
    /// Octets of the DDP segment (`ConnConfig::ddp_segment_len`: at most the large
    /// buffer size; the rest of a smaller segment's buffer is never posted).
    seg_len: u32,
    /// The segment of the last receive whose Send reached into it, `len` set to the
    /// octets that landed there; not taken by the next completion, it goes back.
    landed: Option<RegBuf>,
    /// Stagings that found the large pool empty.
    pub(crate) starved: u64,
}

impl RecvSegments {
    /// Segments of `seg_len` octets (at most a large buffer) for `depth` receive slots
    /// from `large`, behind header segments of `head_len` octets.
    pub(crate) fn new(depth: u32, large: &Pool, head_len: u32, seg_len: u32) -> Self {
        let whole = large.buf_size().min(u32::MAX as usize) as u32;
        RecvSegments {
            segs: (0..depth).map(|_| None).collect(),
            pool: large.clone(),
            head_len,
            seg_len: seg_len.min(whole),
            landed: None,
            starved: 0,
        }
    }

    /// Octets of the header segment.
    #[inline]
    pub(crate) fn head_len(&self) -> u32 {
        self.head_len
    }

    /// Octets of the DDP segment.
    #[inline]
    pub(crate) fn seg_len(&self) -> u32 {
        self.seg_len
    }

    /// The structure to advertise as XCHAR_RBSTRUCT: the header segment, not
    /// DDP-targetable, then one DDP-targetable segment.
    pub(crate) fn structure(&self) -> RecvBufStructure {
        let mut groups = [RbsGroup::default(); MAX_RBS_GROUPS];
        groups[0] = RbsGroup {
            count: 1,
            length: self.head_len,
            align: 0,
            flags: 0,
        };
        groups[1] = RbsGroup {
            count: 1,
            length: self.seg_len,
            align: SEGMENT_ALIGN,
            flags: XMRSFLAG_DDP,
        };
        RecvBufStructure {
            length: self.head_len.saturating_add(self.seg_len),
            n_groups: 2,
            groups,
        }
    }

    /// The scatter entry of slot `slot`'s DDP segment, taking a segment from the pool
    /// when the slot has none; `None` when the pool is empty (the receive is not
    /// posted: one without its segment would not match the advertised structure).
    pub(crate) fn sge_for(&mut self, slot: u32) -> Option<Sge> {
        let entry = self.segs.get_mut(slot as usize)?;
        if entry.is_none() {
            match RegBuf::from_pool(&self.pool) {
                Ok(b) => *entry = Some(b),
                Err(_) => {
                    self.starved += 1;
                    return None;
                }
            }
        }
        let seg = entry.as_ref()?;
        let len = (self.seg_len as usize).min(seg.capacity());
        seg.sge(0, len).ok()
    }

    /// A receive of slot `slot` completed with `byte_len` octets: when they run past
    /// the header segment, its segment is detached as the landed one (the previous
    /// landed segment, never taken, goes back to the pool).
    pub(crate) fn complete(&mut self, slot: u32, byte_len: u32) {
        // Dropped: back to the pool.
        self.landed = None;
        if byte_len <= self.head_len {
            return;
        }
        let Some(mut seg) = self.segs.get_mut(slot as usize).and_then(Option::take) else {
            return;
        };
        let n = ((byte_len - self.head_len) as usize).min(seg.capacity());
        let _ = seg.set_len(n);
        self.landed = Some(seg);
    }

    /// The segment the last completed receive filled (see [`complete`](Self::complete)).
    pub(crate) fn take_landed(&mut self) -> Option<RegBuf> {
        self.landed.take()
    }

    /// A segment landed and was not taken yet.
    pub(crate) fn landed_pending(&self) -> bool {
        self.landed.is_some()
    }

    /// Gives every segment back (connection end, or a switch to shared receives).
    pub(crate) fn release_all(&mut self) {
        // Dropped: back to the pool.
        self.segs.iter_mut().for_each(|s| *s = None);
        self.landed = None;
    }
}
