//! Send-based DDP, responder side (draft-dnoveck-rpcrdma-rtrext §7, §9.5): the bulk
//! items a ROPT_XMTREQ places by target buffer segment number are checked against the
//! receive buffer structure this end advertised (`core/recv_segments.rs`), and the DDP
//! segment they landed in becomes the item the service sees, without a copy. See
//! `engine/DESIGN.md`, "Send-based DDP".

use crate::core::regbuf::RegBuf;
use crate::wire::rtr::chars::RecvBufStructure;
use crate::wire::rtr::place::{DdpLayout, Loc, MAX_PLACED_ITEMS};
use crate::wire::rtr::{DdpArray, OptxInfo};

/// One bulk item a request placed: its position in the XDR stream, its length, and
/// where it starts in the DDP segment of the group's first transmission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct PlacedItem {
    pub(super) disp: u32,
    pub(super) len: u32,
    pub(super) seg_off: u32,
}

/// The items of one request, in order (at most one per DDP segment of its first
/// transmission).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Placed {
    pub(super) n: u8,
    pub(super) items: [PlacedItem; MAX_PLACED_ITEMS],
}

impl Placed {
    pub(super) fn as_slice(&self) -> &[PlacedItem] {
        &self.items[..usize::from(self.n)]
    }
}

/// A BADTBSN naming `value`, with the range `min..=max`.
fn bad_tbsn(value: u32, min: u32, max: u32) -> OptxInfo {
    OptxInfo::BadTbsn { value, min, max }
}

/// The receiver's check of a request's `optxrq_ddp` in a group of `count`
/// transmissions against `rbs` (the structure this end advertised; `None`: it
/// advertised none). Every item must be XMDTYPE_TBSN and pass
/// [`DdpLayout::check`]; items come in increasing segment order (an item's first
/// segment past the last one before it); and, a decision of this engine, every piece
/// must lie in the first transmission's DDP segments (only the first transmission's
/// landed segment is kept): a segment of a later transmission is BADTBSN with the range
/// of the first's. An item whose position is not a positive multiple of 4 is BADOFF
/// naming it (it could not sit in the XDR stream).
pub(super) fn check(
    rbs: Option<RecvBufStructure>,
    count: u32,
    ddp: &DdpArray<'_>,
) -> Result<Placed, OptxInfo> {
    let Some(layout) = rbs.as_ref().and_then(DdpLayout::of) else {
        // No DDP-targetable segment advertised: no target buffer number is valid.
        return Err(bad_tbsn(0, 0, 0));
    };
    let last_first = layout.per_buf.saturating_sub(1);
    let last = layout.total(count).saturating_sub(1);
    let mut out = Placed::default();
    let mut next_min = 0u32;
    for item in ddp.mitems() {
        let item = item.map_err(|_| bad_tbsn(0, next_min, last))?;
        let Loc::Tbsn(t) = item.loc else {
            // EXRW, and TOOSHORT / NOITEM (results only, §6.2 "Sem. Invalid").
            return Err(bad_tbsn(0, next_min, last));
        };
        if let Some(&first) = t.segments().first() {
            if first < next_min {
                return Err(bad_tbsn(first, next_min, last));
            }
        }
        if item.disp == 0 || !item.disp.is_multiple_of(4) {
            return Err(OptxInfo::BadOff {
                value: item.disp,
                min: 4,
                max: !3,
            });
        }
        let pieces = layout.check(count, item.length, &t)?;
        for (&b, &(k, _, _)) in t.segments().iter().zip(pieces.as_slice()) {
            if k != 0 {
                return Err(bad_tbsn(b, next_min, last_first));
            }
        }
        let (Some(&(_, off, _)), Some(&first)) = (pieces.as_slice().first(), t.segments().first())
        else {
            return Err(bad_tbsn(0, next_min, last));
        };
        if pieces.as_slice().len() != 1 {
            // One segment per receive here: two pieces in the first transmission
            // cannot happen; refuse rather than hand on a split item.
            let second = t.segments().get(1).copied().unwrap_or(first);
            return Err(bad_tbsn(second, next_min, last_first));
        }
        let slot = out
            .items
            .get_mut(usize::from(out.n))
            .ok_or_else(|| bad_tbsn(0, next_min, last))?;
        let seg_start = layout.locate(first).1;
        *slot = PlacedItem {
            disp: item.disp,
            len: item.length,
            seg_off: off - seg_start,
        };
        out.n += 1;
        next_min = t.segments().last().map_or(next_min, |l| l + 1);
    }
    Ok(out)
}

/// Makes the landed segment `seg` hold exactly `item`: its octets moved to the start
/// when the sender placed it at an offset (ours never does: a foreign sender's item
/// then costs one move inside the segment). `Err` with BADOFF when fewer octets
/// landed than the item needs (the Send was shorter than its placement says).
pub(super) fn fit(seg: &mut RegBuf, item: &PlacedItem) -> Result<(), OptxInfo> {
    let (off, len) = (item.seg_off as usize, item.len as usize);
    let landed = seg.len();
    if off + len > landed {
        return Err(OptxInfo::BadOff {
            value: item.len,
            min: 0,
            max: landed.saturating_sub(off) as u32,
        });
    }
    if off > 0 {
        seg.storage_mut().copy_within(off..off + len, 0);
    }
    seg.set_len(len).map_err(|_| OptxInfo::BadOff {
        value: item.len,
        min: 0,
        max: landed as u32,
    })
}
