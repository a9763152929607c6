//! Send-based direct data placement (draft-dnoveck-rpcrdma-rtrext §3.3, §6.2, §7.2,
//! §7.3), sans-IO: the typed `xmddp_mitem` (what a request or result says about one bulk
//! item), the sender's placement of bulk items into the peer's DDP-targetable receive
//! segments (with the padding that makes them land there), and the receiver's check of
//! a placement against its own receive buffer structure, answered with OPTXERR_BADTBSN
//! or OPTXERR_BADOFF as the draft says.
//!
//! Target buffer segment numbers (§6.2): "Each DDP-targetable buffer segment is
//! assigned a number starting with zero and proceeding through all the buffer segments
//! for all the RPC-over-RDMA transmissions in the group", counting the ones a shorter
//! transmission leaves unused. So with `d` DDP-targetable segments per receive buffer,
//! TBSN `n` is the `n % d`-th DDP segment of transmission `n / d`.
//!
//! Decisions (`engine/DESIGN.md`, "Send-based DDP"): an item occupies consecutive
//! TBSNs from `xmdl_offset` in the first; its octets fill each segment to its end, then
//! continue at the start of the next one listed; the octets of a transmission between
//! its payload stream and its first bulk octet, and between segments that are not
//! adjacent in the buffer, are filler the receiver ignores. Offsets are multiples of 4.

use crate::wire::header::SEGMENT_LEN;
use crate::wire::xdr::{BufferTooSmall, XdrCursor, XdrEncoder};

use super::chars::{RecvBufStructure, XMRSFLAG_DDP};
use super::ddp::{
    DdpArray, MAX_DDP_ENTRIES, XMDTYPE_EXRW, XMDTYPE_NOITEM, XMDTYPE_TBSN, XMDTYPE_TOOSHORT,
};
use super::{OptxInfo, RtrError};

/// Most target buffer segments one item may list (a 1 MiB item in 64 KiB segments
/// takes 16).
pub const MAX_ITEM_SEGMENTS: usize = 32;
/// Most bulk items one placement holds.
pub const MAX_PLACED_ITEMS: usize = 8;

/// `xmddp_loc`: where one bulk item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loc<'a> {
    /// XMDTYPE_EXRW: version 1 segments (`rpcrdma1_segment`s, raw XDR).
    Exrw {
        /// Segments.
        count: u32,
        /// Their XDR (16 octets each).
        xdr: &'a [u8],
    },
    /// XMDTYPE_TBSN: send-based DDP into target buffer segments.
    Tbsn(TbsnLoc),
    /// XMDTYPE_TOOSHORT (results only): shorter than the direction's minimum, left in
    /// the payload stream.
    TooShort,
    /// XMDTYPE_NOITEM (results only): the reply had no such item.
    NoItem,
}

/// The XMDTYPE_TBSN case: `xmdl_offset` and `xmdl_bsnum<>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TbsnLoc {
    /// Offset of the item in its first segment.
    pub offset: u32,
    /// Segments listed.
    pub n: u8,
    /// The segment numbers (the first `n`).
    pub bsnum: [u32; MAX_ITEM_SEGMENTS],
}

impl TbsnLoc {
    /// The listed segment numbers.
    pub fn segments(&self) -> &[u32] {
        &self.bsnum[..usize::from(self.n)]
    }
}

/// `xmddp_mitem`: one bulk item excised from the payload stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MItem<'a> {
    /// `xmdmi_disp`: its position in the virtual XDR stream.
    pub disp: u32,
    /// `xmdmi_length`: its length.
    pub length: u32,
    /// `xmdmi_where`.
    pub loc: Loc<'a>,
}

impl<'a> MItem<'a> {
    /// Decodes one `xmddp_mitem`.
    pub fn decode(cur: &mut XdrCursor<'a>) -> Result<Self, RtrError> {
        let disp = cur.u32()?;
        let length = cur.u32()?;
        let loc = match cur.u32()? {
            XMDTYPE_EXRW => {
                let count = cur.count(MAX_DDP_ENTRIES)?;
                let start = cur.position();
                cur.skip(count as usize * SEGMENT_LEN)?;
                Loc::Exrw {
                    count,
                    xdr: &cur.input()[start..cur.position()],
                }
            }
            XMDTYPE_TBSN => {
                let offset = cur.u32()?;
                let n = cur.count(MAX_ITEM_SEGMENTS as u32)?;
                let mut t = TbsnLoc {
                    offset,
                    n: n as u8,
                    bsnum: [0; MAX_ITEM_SEGMENTS],
                };
                for b in t.bsnum.iter_mut().take(n as usize) {
                    *b = cur.u32()?;
                }
                Loc::Tbsn(t)
            }
            XMDTYPE_TOOSHORT => Loc::TooShort,
            XMDTYPE_NOITEM => Loc::NoItem,
            value => return Err(RtrError::BadDdpType { value }),
        };
        Ok(MItem { disp, length, loc })
    }

    /// Octets [`encode`](Self::encode) writes.
    pub fn encoded_len(&self) -> usize {
        12 + match &self.loc {
            Loc::Exrw { xdr, .. } => 4 + xdr.len(),
            Loc::Tbsn(t) => 8 + 4 * usize::from(t.n),
            Loc::TooShort | Loc::NoItem => 0,
        }
    }

    /// Encodes this item.
    pub fn encode(&self, enc: &mut XdrEncoder<'_>) -> Result<(), BufferTooSmall> {
        enc.u32(self.disp)?;
        enc.u32(self.length)?;
        match &self.loc {
            Loc::Exrw { count, xdr } => {
                enc.u32(XMDTYPE_EXRW)?;
                enc.u32(*count)?;
                enc.opaque_fixed(xdr)?;
            }
            Loc::Tbsn(t) => {
                enc.u32(XMDTYPE_TBSN)?;
                enc.u32(t.offset)?;
                enc.u32(u32::from(t.n))?;
                for &b in t.segments() {
                    enc.u32(b)?;
                }
            }
            Loc::TooShort => enc.u32(XMDTYPE_TOOSHORT)?,
            Loc::NoItem => enc.u32(XMDTYPE_NOITEM)?,
        }
        Ok(())
    }
}

impl<'a> DdpArray<'a> {
    /// The items of an `xmddp_grpinfo`, typed (the array was walked when the message
    /// was parsed, so each decodes; an error would mean it was not a grpinfo).
    pub fn mitems(&self) -> impl Iterator<Item = Result<MItem<'a>, RtrError>> + 'a {
        let mut cur = XdrCursor::new(self.xdr);
        let n = cur.u32().unwrap_or(0).min(MAX_DDP_ENTRIES);
        (0..n).map(move |_| MItem::decode(&mut cur))
    }
}

/// Where DDP-targetable segments sit in one receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DdpLayout {
    /// Octets of the whole buffer.
    pub buf_len: u32,
    /// DDP-targetable segments per buffer.
    pub per_buf: u32,
    /// Their (offset in the buffer, length), the first `per_buf`.
    segs: [(u32, u32); MAX_ITEM_SEGMENTS],
}

/// Why bulk items cannot be placed by send-based DDP into the peer's receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PlaceError {
    /// The peer's receive buffers have no DDP-targetable segment (the draft's default).
    #[error("the peer's receive buffers have no DDP-targetable segment")]
    NoDdpSegments,
    /// More segments per buffer, items, or segments per item than this engine handles.
    #[error("placement exceeds a fixed limit")]
    TooMany,
    /// The group would need more transmissions than allowed.
    #[error("placement needs {needed} transmissions, at most {max}")]
    TooManyTransmissions {
        /// Transmissions needed.
        needed: u32,
        /// The limit.
        max: u32,
    },
    /// An item of no octets (it stays in the payload stream).
    #[error("an empty item is not placed")]
    EmptyItem,
    /// The header and payload stream do not fit the first buffer.
    #[error("header and payload stream do not fit a receive buffer")]
    PayloadTooLong,
}

impl DdpLayout {
    /// The layout of `rbs`; `None` when it has no DDP-targetable segment or more than
    /// [`MAX_ITEM_SEGMENTS`] of them.
    pub fn of(rbs: &RecvBufStructure) -> Option<Self> {
        let mut l = DdpLayout {
            buf_len: 0,
            per_buf: 0,
            segs: [(0, 0); MAX_ITEM_SEGMENTS],
        };
        let mut at = 0u32;
        for g in rbs.groups.iter().take(usize::from(rbs.n_groups)) {
            if g.flags & XMRSFLAG_DDP == 0 || g.length == 0 {
                at = at.checked_add(g.count.checked_mul(g.length)?)?;
                continue;
            }
            // A peer's count is bounded before it is walked.
            if g.count as usize > MAX_ITEM_SEGMENTS - l.per_buf as usize {
                return None;
            }
            for _ in 0..g.count {
                l.segs[l.per_buf as usize] = (at, g.length);
                l.per_buf += 1;
                at = at.checked_add(g.length)?;
            }
        }
        l.buf_len = at;
        (l.per_buf > 0).then_some(l)
    }

    /// (transmission, offset in its buffer, length) of segment `tbsn`.
    pub fn locate(&self, tbsn: u32) -> (u32, u32, u32) {
        let (k, j) = (tbsn / self.per_buf, tbsn % self.per_buf);
        let (off, len) = self.segs[j as usize];
        (k, off, len)
    }

    /// Segments of a group of `count` transmissions.
    pub fn total(&self, count: u32) -> u32 {
        self.per_buf.saturating_mul(count)
    }

    /// The receiver's check of one item's TBSN placement in a group of `count`
    /// transmissions (§9.5): every segment number in range (else OPTXERR_BADTBSN with
    /// the valid range), listed in increasing order (BADTBSN with the smallest valid
    /// next value), the offset inside the first segment and a multiple of 4 (else
    /// OPTXERR_BADOFF: "When the actual value is with the valid range, it can be
    /// inferred that the actual value is not properly aligned"), and the segments long
    /// enough for the item (BADOFF naming the length). On success, the item's pieces in
    /// order: (transmission, offset in its buffer, length).
    pub fn check(&self, count: u32, length: u32, t: &TbsnLoc) -> Result<Pieces, OptxInfo> {
        let total = self.total(count);
        let segs = t.segments();
        let Some(&first) = segs.first() else {
            return Err(OptxInfo::BadTbsn {
                value: 0,
                min: 0,
                max: total.saturating_sub(1),
            });
        };
        let mut prev: Option<u32> = None;
        for &b in segs {
            let min = prev.map_or(0, |p| p + 1);
            if b >= total || b < min {
                return Err(OptxInfo::BadTbsn {
                    value: b,
                    min,
                    max: total.saturating_sub(1),
                });
            }
            prev = Some(b);
        }
        let (_, _, first_len) = self.locate(first);
        if t.offset >= first_len || !t.offset.is_multiple_of(4) {
            return Err(OptxInfo::BadOff {
                value: t.offset,
                min: 0,
                max: first_len.saturating_sub(1),
            });
        }
        let mut out = Pieces::EMPTY;
        let mut left = length;
        let mut skip = t.offset;
        for &b in segs {
            if left == 0 {
                break;
            }
            let (k, off, len) = self.locate(b);
            let take = (len - skip).min(left);
            out.push((k, off + skip, take));
            left -= take;
            skip = 0;
        }
        if left > 0 {
            return Err(OptxInfo::BadOff {
                value: length,
                min: 0,
                max: length - left,
            });
        }
        Ok(out)
    }
}

/// An item's pieces, in order: (transmission, offset in its receive buffer, length).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pieces {
    n: u8,
    at: [(u32, u32, u32); MAX_ITEM_SEGMENTS],
}

impl Pieces {
    const EMPTY: Pieces = Pieces {
        n: 0,
        at: [(0, 0, 0); MAX_ITEM_SEGMENTS],
    };

    fn push(&mut self, p: (u32, u32, u32)) {
        if let Some(s) = self.at.get_mut(usize::from(self.n)) {
            *s = p;
            self.n += 1;
        }
    }

    /// The pieces.
    pub fn as_slice(&self) -> &[(u32, u32, u32)] {
        &self.at[..usize::from(self.n)]
    }
}

/// What one transmission of a send-based DDP group carries, in order: its header (of
/// `header_len` octets), `payload` octets of the payload stream, then filler and bulk
/// octets as `spans` say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxPlan {
    /// Payload stream octets in this transmission (its `pslen`).
    pub payload: u32,
    /// Octets of the whole transmission.
    pub len: u32,
}

/// A sender's placement of bulk items into the peer's receive buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// Transmissions in the group.
    pub count: u32,
    /// Per transmission (the first `count`).
    pub tx: [TxPlan; 16],
    /// Per item (the first `items`), its location to announce.
    pub locs: [TbsnLoc; MAX_PLACED_ITEMS],
    /// Items placed.
    pub items: u8,
}

/// Plans a group that carries a payload stream of `payload` octets (all in the first
/// transmission, after its header of `head` octets) and bulk items of `lens` octets by
/// send-based DDP into receives laid out as `l`; continuations have headers of
/// `cont_head` octets and no payload. Each item starts at the start of the first
/// DDP-targetable segment past what precedes it (offset 0: the receiver hands the
/// segment on as the item, page-aligned when the segment is), and fills consecutive
/// segments. At most `max_count` transmissions.
pub fn plan(
    l: &DdpLayout,
    head: u32,
    payload: u32,
    cont_head: u32,
    lens: &[u32],
    max_count: u32,
) -> Result<Placement, PlaceError> {
    if lens.len() > MAX_PLACED_ITEMS {
        return Err(PlaceError::TooMany);
    }
    let max_count = max_count.min(16);
    let first_end = head
        .checked_add(payload)
        .ok_or(PlaceError::PayloadTooLong)?;
    if first_end > l.buf_len {
        return Err(PlaceError::PayloadTooLong);
    }
    let mut p = Placement {
        count: 1,
        tx: [TxPlan { payload: 0, len: 0 }; 16],
        locs: [TbsnLoc {
            offset: 0,
            n: 0,
            bsnum: [0; MAX_ITEM_SEGMENTS],
        }; MAX_PLACED_ITEMS],
        items: 0,
    };
    p.tx[0] = TxPlan {
        payload,
        len: first_end,
    };
    // The next free segment: in transmission `k`, index `j` of its DDP segments.
    let (mut k, mut j) = (0u32, 0u32);
    // Skip the segments a header or the payload stream reaches into.
    let skip_used = |j: &mut u32, used: u32| {
        while *j < l.per_buf && l.segs[*j as usize].0 < used {
            *j += 1;
        }
    };
    skip_used(&mut j, first_end);
    for (i, &len) in lens.iter().enumerate() {
        if len == 0 {
            return Err(PlaceError::EmptyItem);
        }
        let loc = &mut p.locs[i];
        let mut left = len;
        while left > 0 {
            if j == l.per_buf {
                k += 1;
                j = 0;
                if k >= max_count {
                    let per = l.segs[..l.per_buf as usize]
                        .iter()
                        .map(|s| s.1)
                        .sum::<u32>();
                    let more = left.div_ceil(per.max(1));
                    return Err(PlaceError::TooManyTransmissions {
                        needed: k + more,
                        max: max_count,
                    });
                }
                p.count = k + 1;
                p.tx[k as usize] = TxPlan {
                    payload: 0,
                    len: cont_head,
                };
                skip_used(&mut j, cont_head);
                continue;
            }
            let (off, seg_len) = l.segs[j as usize];
            if usize::from(loc.n) == MAX_ITEM_SEGMENTS {
                return Err(PlaceError::TooMany);
            }
            loc.bsnum[usize::from(loc.n)] = k * l.per_buf + j;
            loc.n += 1;
            let take = seg_len.min(left);
            left -= take;
            p.tx[k as usize].len = off + take;
            j += 1;
        }
        p.items += 1;
    }
    Ok(p)
}

/// Octets of an ROPT_XMTREQ header whose `optxrq_ddp` holds `items` and whose
/// `optxrq_rsd` is empty.
pub fn xmtreq_header_len(items: &[MItem<'_>]) -> usize {
    super::XMTREQ_HEADER_LEN + items.iter().map(MItem::encoded_len).sum::<usize>()
}

/// Octets one [`ReplyDirection`] of one item adds to an `optxrq_rsd` (an
/// `xmddp_rsdset` of one XMDTYPE_TBSN `xmddp_rsditem`: range, item count, `minlen`,
/// type); each further item adds 8 ([`ReplyDirection::encoded_len`]).
pub const REPLY_DIRECTION_LEN: usize = 20;

/// Most `xmddp_rsditem`s one [`ReplyDirection`] holds: one per Write sink a call may
/// offer (`MAX_WRITE_SINKS`).
pub const MAX_REPLY_ITEMS: u32 = crate::limits::MAX_WRITE_SINKS as u32;

/// The one shape of `optxrq_rsd` this engine sends and takes (draft §7.4): one
/// `xmddp_rsdset` whose range covers the request, holding `items` `xmddp_rsditem`s of
/// type XMDTYPE_TBSN with the same `minlen`: "place each of the reply's first `items`
/// DDP-eligible items of at least `minlen` octets by send-based DDP into my receive
/// segments", in order (one per Write sink of the call).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ReplyDirection {
    /// `xmdrsdr_begin`: first request XDR position the direction applies to.
    pub begin: u32,
    /// `xmdrsdr_end`: the range's end.
    pub end: u32,
    /// `xmdrsdi_minlen`: an item shorter than this stays in the payload stream
    /// (answered XMDTYPE_TOOSHORT).
    pub minlen: u32,
    /// `xmddp_rsditem`s in the set (1..=[`MAX_REPLY_ITEMS`]), each answered by one
    /// `xmddp_mitem` of the reply, in order.
    #[cfg_attr(feature = "serde", serde(default = "one_item"))]
    pub items: u32,
}

#[cfg(feature = "serde")]
fn one_item() -> u32 {
    1
}

impl ReplyDirection {
    /// The direction in a received `optxrq_rsd`: `Ok(None)` when it is empty, `Ok(Some)`
    /// for exactly one set of 1..=[`MAX_REPLY_ITEMS`] XMDTYPE_TBSN items with one
    /// `minlen`, whose range is not reversed. Anything else (explicit-RDMA, CHOOSE or
    /// BYSIZE directions, several sets, items of different minimums) is not taken by
    /// this engine and is answered OPTXERR_BADTBSN with the empty range 0..0, as a
    /// receiver without DDP segments answers any placement (`engine/DESIGN.md`,
    /// "Send-based DDP replies").
    ///
    /// # Errors
    /// The BADTBSN to answer with.
    pub fn of(rsd: &DdpArray<'_>) -> Result<Option<Self>, OptxInfo> {
        if rsd.is_empty() {
            return Ok(None);
        }
        let refuse = OptxInfo::BadTbsn {
            value: 0,
            min: 0,
            max: 0,
        };
        let mut cur = XdrCursor::new(rsd.xdr);
        let mut word = || cur.u32().map_err(|_| refuse);
        // sets, begin, end, items, then (minlen, type) per item
        let (sets, begin, end, items) = (word()?, word()?, word()?, word()?);
        if sets != 1 || items == 0 || items > MAX_REPLY_ITEMS || end < begin {
            return Err(refuse);
        }
        let mut minlen = None;
        for _ in 0..items {
            let (m, kind) = (word()?, word()?);
            if kind != XMDTYPE_TBSN || minlen.is_some_and(|x| x != m) {
                return Err(refuse);
            }
            minlen = Some(m);
        }
        if cur.remaining() != 0 {
            return Err(refuse);
        }
        Ok(Some(ReplyDirection {
            begin,
            end,
            minlen: minlen.unwrap_or(0),
            items,
        }))
    }

    /// Octets this direction adds to an `optxrq_rsd` beyond its empty count word.
    pub fn encoded_len(&self) -> usize {
        REPLY_DIRECTION_LEN + 8 * (self.items.clamp(1, MAX_REPLY_ITEMS) as usize - 1)
    }

    fn encode(&self, enc: &mut XdrEncoder<'_>) -> Result<(), BufferTooSmall> {
        let items = self.items.clamp(1, MAX_REPLY_ITEMS);
        enc.u32(1)?;
        enc.u32(self.begin)?;
        enc.u32(self.end)?;
        enc.u32(items)?;
        for _ in 0..items {
            enc.u32(self.minlen)?;
            enc.u32(XMDTYPE_TBSN)?;
        }
        Ok(())
    }
}

/// Octets of an ROPT_XMTREQ header whose `optxrq_ddp` holds `items` and whose
/// `optxrq_rsd` holds `rsd`.
pub fn xmtreq_rsd_header_len(items: &[MItem<'_>], rsd: Option<&ReplyDirection>) -> usize {
    xmtreq_header_len(items) + rsd.map_or(0, ReplyDirection::encoded_len)
}

/// [`encode_xmtreq`] with a reply direction in `optxrq_rsd` (send-based DDP of the
/// reply's bulk item). Returns the header's length ([`xmtreq_rsd_header_len`]).
///
/// # Errors
/// A short buffer.
#[allow(clippy::too_many_arguments)]
pub fn encode_xmtreq_rsd(
    buf: &mut [u8],
    xid: u32,
    credit: u32,
    count: u32,
    rsbuf: u32,
    pslen: u32,
    items: &[MItem<'_>],
    rsd: Option<&ReplyDirection>,
) -> Result<usize, BufferTooSmall> {
    let info = xmtreq_rsd_header_len(items, rsd) - super::OPTINFO_OFFSET;
    let mut enc = XdrEncoder::new(buf);
    enc.u32(xid)?;
    enc.u32(crate::wire::header::RPCRDMA_VERSION)?;
    enc.u32(credit)?;
    enc.u32(super::RDMA_OPTIONAL)?;
    enc.u32(super::ROPT_XMTREQ)?;
    enc.u32(info as u32)?;
    enc.u32(items.len() as u32)?;
    for m in items {
        m.encode(&mut enc)?;
    }
    match rsd {
        Some(d) => d.encode(&mut enc)?,
        None => enc.u32(0)?,
    }
    enc.u32(count)?;
    enc.u32(rsbuf)?;
    enc.u32(pslen)?;
    Ok(enc.finish())
}

/// Octets of an ROPT_XMTRESP header whose `optxrs_ddp` holds `items`.
pub fn xmtresp_header_len(items: &[MItem<'_>]) -> usize {
    super::XMTRESP_HEADER_LEN + items.iter().map(MItem::encoded_len).sum::<usize>()
}

/// Encodes an ROPT_XMTRESP header whose `optxrs_ddp` holds `items` (the per-item
/// results of the request's reply directions, §7.4: "For each xmddp_rsditem, there will
/// be a corresponding xmddp_mitem"). Returns its length ([`xmtresp_header_len`]); the
/// payload stream follows it.
///
/// # Errors
/// A short buffer.
pub fn encode_xmtresp(
    buf: &mut [u8],
    xid: u32,
    credit: u32,
    count: u32,
    pslen: u32,
    items: &[MItem<'_>],
) -> Result<usize, BufferTooSmall> {
    let info = xmtresp_header_len(items) - super::OPTINFO_OFFSET;
    let mut enc = XdrEncoder::new(buf);
    enc.u32(xid)?;
    enc.u32(crate::wire::header::RPCRDMA_VERSION)?;
    enc.u32(credit)?;
    enc.u32(super::RDMA_OPTIONAL)?;
    enc.u32(super::ROPT_XMTRESP)?;
    enc.u32(info as u32)?;
    enc.u32(items.len() as u32)?;
    for m in items {
        m.encode(&mut enc)?;
    }
    enc.u32(count)?;
    enc.u32(pslen)?;
    Ok(enc.finish())
}

/// Encodes an ROPT_XMTREQ header whose `optxrq_ddp` holds `items` (send-based DDP) into
/// `buf`; `optxrq_rsd` goes out empty. Returns its length
/// ([`xmtreq_header_len`]); the payload stream follows it.
///
/// # Errors
/// A short buffer.
#[allow(clippy::too_many_arguments)]
pub fn encode_xmtreq(
    buf: &mut [u8],
    xid: u32,
    credit: u32,
    count: u32,
    rsbuf: u32,
    pslen: u32,
    items: &[MItem<'_>],
) -> Result<usize, BufferTooSmall> {
    encode_xmtreq_rsd(buf, xid, credit, count, rsbuf, pslen, items, None)
}

#[cfg(test)]
mod tests {
    use super::super::chars::{RbsGroup, MAX_RBS_GROUPS};
    use super::*;
    use proptest::prelude::*;

    /// A header segment of `head` octets, then `n` DDP-targetable segments of `seg`.
    fn rbs(head: u32, n: u32, seg: u32) -> RecvBufStructure {
        let mut groups = [RbsGroup::default(); MAX_RBS_GROUPS];
        groups[0] = RbsGroup {
            count: 1,
            length: head,
            align: 0,
            flags: 0,
        };
        groups[1] = RbsGroup {
            count: n,
            length: seg,
            align: 4096,
            flags: XMRSFLAG_DDP,
        };
        RecvBufStructure {
            length: head.wrapping_add(n.wrapping_mul(seg)),
            n_groups: 2,
            groups,
        }
    }

    #[test]
    fn the_default_structure_has_no_ddp_segment() {
        assert_eq!(DdpLayout::of(&RecvBufStructure::single(4096)), None);
        let huge = rbs(1024, u32::MAX, 4096);
        assert_eq!(DdpLayout::of(&huge), None, "bounded, not walked");
    }

    #[test]
    fn a_mebibyte_lands_in_sixteen_segments_of_eight_receives() {
        let l = DdpLayout::of(&rbs(4096, 2, 65536)).expect("ddp");
        assert_eq!((l.per_buf, l.buf_len), (2, 4096 + 131072));
        let p = plan(&l, 64, 300, 36, &[1 << 20], 16).expect("placed");
        assert_eq!(p.count, 8);
        let loc = p.locs[0];
        assert_eq!(loc.offset, 0);
        assert_eq!(loc.segments(), (0..16).collect::<Vec<u32>>().as_slice());
        assert_eq!(p.tx[0].payload, 300);
        assert!(p.tx[..8].iter().all(|t| t.len == 4096 + 131072));
        // The receiver finds the item where the sender put it.
        let pieces = l.check(p.count, 1 << 20, &loc).expect("valid");
        assert_eq!(pieces.as_slice().len(), 16);
        assert_eq!(pieces.as_slice()[0], (0, 4096, 65536));
        assert_eq!(pieces.as_slice()[15], (7, 4096 + 65536, 65536));
        // Too long for the limit.
        assert_eq!(
            plan(&l, 64, 300, 36, &[1 << 20], 4),
            Err(PlaceError::TooManyTransmissions { needed: 8, max: 4 })
        );
    }

    #[test]
    fn a_payload_reaching_into_a_segment_skips_it() {
        let l = DdpLayout::of(&rbs(1024, 4, 4096)).expect("ddp");
        let p = plan(&l, 44, 2000, 36, &[4096, 100], 16).expect("placed");
        assert_eq!(p.count, 1);
        assert_eq!(p.locs[0].segments(), &[1]);
        assert_eq!(p.locs[1].segments(), &[2]);
        assert_eq!(p.tx[0].len, 1024 + 2 * 4096 + 100);
    }

    #[test]
    fn bad_placements_are_answered_as_the_draft_says() {
        let l = DdpLayout::of(&rbs(1024, 2, 4096)).expect("ddp");
        let loc = |offset, segs: &[u32]| {
            let mut t = TbsnLoc {
                offset,
                n: segs.len() as u8,
                bsnum: [0; MAX_ITEM_SEGMENTS],
            };
            t.bsnum[..segs.len()].copy_from_slice(segs);
            t
        };
        // Two transmissions: segments 0..=3.
        assert_eq!(
            l.check(2, 100, &loc(0, &[4])),
            Err(OptxInfo::BadTbsn {
                value: 4,
                min: 0,
                max: 3
            })
        );
        assert_eq!(
            l.check(2, 5000, &loc(0, &[2, 1])),
            Err(OptxInfo::BadTbsn {
                value: 1,
                min: 3,
                max: 3
            })
        );
        assert_eq!(
            l.check(2, 100, &loc(4096, &[0])),
            Err(OptxInfo::BadOff {
                value: 4096,
                min: 0,
                max: 4095
            })
        );
        // In range but not aligned.
        assert_eq!(
            l.check(2, 100, &loc(6, &[0])),
            Err(OptxInfo::BadOff {
                value: 6,
                min: 0,
                max: 4095
            })
        );
        // The segments listed cannot hold the item.
        assert_eq!(
            l.check(2, 9000, &loc(0, &[0, 1])),
            Err(OptxInfo::BadOff {
                value: 9000,
                min: 0,
                max: 8192
            })
        );
        assert_eq!(
            l.check(2, 100, &loc(0, &[])),
            Err(OptxInfo::BadTbsn {
                value: 0,
                min: 0,
                max: 3
            })
        );
        assert!(l.check(2, 4000, &loc(96, &[3])).is_ok());
    }

    #[test]
    fn mitems_round_trip_every_location() {
        let mut t = TbsnLoc {
            offset: 8,
            n: 2,
            bsnum: [0; MAX_ITEM_SEGMENTS],
        };
        t.bsnum[..2].copy_from_slice(&[3, 4]);
        let seg = [0u8; 16];
        let items = [
            MItem {
                disp: 40,
                length: 8192,
                loc: Loc::Tbsn(t),
            },
            MItem {
                disp: 80,
                length: 12,
                loc: Loc::TooShort,
            },
            MItem {
                disp: 96,
                length: 0,
                loc: Loc::NoItem,
            },
            MItem {
                disp: 100,
                length: 16,
                loc: Loc::Exrw {
                    count: 1,
                    xdr: &seg,
                },
            },
        ];
        let mut buf = vec![0u8; 4 + items.iter().map(MItem::encoded_len).sum::<usize>()];
        let mut enc = XdrEncoder::new(&mut buf);
        enc.u32(items.len() as u32).expect("fits");
        for m in &items {
            m.encode(&mut enc).expect("fits");
        }
        let arr = DdpArray {
            entries: items.len() as u32,
            xdr: &buf,
        };
        let back: Vec<MItem<'_>> = arr.mitems().map(|m| m.expect("decodes")).collect();
        assert_eq!(back, items);
    }

    proptest! {
        /// Whatever the sender plans, the receiver's check accepts, and the pieces lie
        /// past the header and payload stream, inside their transmission, in order.
        #[test]
        fn planned_placements_pass_the_receivers_check(
            head_seg in 256u32..8192,
            n in 1u32..8,
            seg in 1u32..16,
            payload in 0u32..256,
            lens in proptest::collection::vec(1u32..200_000, 1..4),
        ) {
            let seg = seg * 4096;
            let l = DdpLayout::of(&rbs(head_seg, n, seg)).expect("ddp");
            let Ok(p) = plan(&l, 64, payload, 36, &lens, 16) else {
                return Ok(());
            };
            let mut last = (0u32, 0u32);
            for (i, &len) in lens.iter().enumerate() {
                let pieces = l.check(p.count, len, &p.locs[i]).expect("valid");
                let sum: u32 = pieces.as_slice().iter().map(|x| x.2).sum();
                prop_assert_eq!(sum, len);
                for &(k, off, plen) in pieces.as_slice() {
                    prop_assert!(k < p.count);
                    let floor = if k == 0 { 64 + payload } else { 36 };
                    prop_assert!(off >= floor);
                    prop_assert!(off + plen <= p.tx[k as usize].len);
                    prop_assert!((k, off) >= last);
                    last = (k, off + plen);
                }
            }
        }
    }

    #[test]
    fn a_reply_direction_and_its_result_parse_back() {
        let dir = ReplyDirection {
            begin: 0,
            end: 96,
            minlen: 1024,
            items: 1,
        };
        let mut buf = [0u8; 256];
        let n = encode_xmtreq_rsd(&mut buf, 9, 4, 1, 0, 96, &[], Some(&dir)).expect("fits");
        assert_eq!(n, xmtreq_rsd_header_len(&[], Some(&dir)));
        let mut msg = buf[..n].to_vec();
        msg.extend_from_slice(&[0u8; 96]);
        let v = crate::wire::rtr::RtrView::parse(&msg).expect("parses");
        let crate::wire::rtr::RtrBody::XmtReq(q) = v.body else {
            panic!("not a request");
        };
        assert_eq!((q.rsd.entries, q.pslen), (1, 96));
        assert_eq!(ReplyDirection::of(&q.rsd), Ok(Some(dir)));
        assert_eq!(ReplyDirection::of(&DdpArray::default()), Ok(None));
        // Other shapes are not taken: BADTBSN 0..0.
        let mut other = q.rsd.xdr.to_vec();
        other[20..24].copy_from_slice(&XMDTYPE_EXRW.to_be_bytes());
        other.extend_from_slice(&0u32.to_be_bytes());
        let arr = DdpArray {
            entries: 1,
            xdr: &other,
        };
        assert_eq!(
            ReplyDirection::of(&arr),
            Err(OptxInfo::BadTbsn {
                value: 0,
                min: 0,
                max: 0
            })
        );
        // The result: one item per direction.
        let items = [MItem {
            disp: 28,
            length: 100,
            loc: Loc::TooShort,
        }];
        let n = encode_xmtresp(&mut buf, 9, 4, 1, 132, &items).expect("fits");
        assert_eq!(n, xmtresp_header_len(&items));
        let mut msg = buf[..n].to_vec();
        msg.extend_from_slice(&[0u8; 132]);
        let v = crate::wire::rtr::RtrView::parse(&msg).expect("parses");
        let crate::wire::rtr::RtrBody::XmtResp(r) = v.body else {
            panic!("not a response");
        };
        assert_eq!((r.count, r.pslen), (1, 132));
        let got: Vec<_> = r.ddp.mitems().map(|m| m.expect("decodes")).collect();
        assert_eq!(got, items.to_vec());
    }

    #[test]
    fn a_direction_of_several_items_parses_back() {
        let dir = ReplyDirection {
            begin: 0,
            end: 64,
            minlen: 512,
            items: 3,
        };
        let mut buf = [0u8; 256];
        let n = encode_xmtreq_rsd(&mut buf, 9, 4, 1, 7, 64, &[], Some(&dir)).expect("fits");
        assert_eq!(n, xmtreq_rsd_header_len(&[], Some(&dir)));
        assert_eq!(dir.encoded_len(), REPLY_DIRECTION_LEN + 16);
        let mut msg = buf[..n].to_vec();
        msg.extend_from_slice(&[0u8; 64]);
        let v = crate::wire::rtr::RtrView::parse(&msg).expect("parses");
        let crate::wire::rtr::RtrBody::XmtReq(q) = v.body else {
            panic!("not a request");
        };
        assert_eq!((q.rsbuf, q.pslen), (7, 64));
        assert_eq!(ReplyDirection::of(&q.rsd), Ok(Some(dir)));
        let refuse = Err(OptxInfo::BadTbsn {
            value: 0,
            min: 0,
            max: 0,
        });
        // Items of different minimums are not taken.
        let mut other = q.rsd.xdr.to_vec();
        other[28..32].copy_from_slice(&100u32.to_be_bytes());
        let arr = DdpArray {
            entries: 1,
            xdr: &other,
        };
        assert_eq!(ReplyDirection::of(&arr), refuse);
        // Nor more items than a call has Write sinks, nor none.
        for items in [0, MAX_REPLY_ITEMS + 1] {
            let mut other = q.rsd.xdr[..16].to_vec();
            other[12..16].copy_from_slice(&items.to_be_bytes());
            for _ in 0..items {
                other.extend_from_slice(&512u32.to_be_bytes());
                other.extend_from_slice(&XMDTYPE_TBSN.to_be_bytes());
            }
            let arr = DdpArray {
                entries: 1,
                xdr: &other,
            };
            assert_eq!(ReplyDirection::of(&arr), refuse, "{items} items");
        }
    }

    #[test]
    fn an_encoded_request_with_items_parses_back() {
        let mut loc = TbsnLoc {
            offset: 0,
            n: 1,
            bsnum: [0; MAX_ITEM_SEGMENTS],
        };
        loc.bsnum[0] = 0;
        let items = [MItem {
            disp: 120,
            length: 1 << 20,
            loc: Loc::Tbsn(loc),
        }];
        let mut buf = [0u8; 256];
        let n = encode_xmtreq(&mut buf, 7, 32, 1, 0, 100, &items).expect("fits");
        assert_eq!(n, xmtreq_header_len(&items));
        let mut msg = buf[..n].to_vec();
        msg.extend_from_slice(&[0u8; 100]);
        let v = crate::wire::rtr::RtrView::parse(&msg).expect("parses");
        assert_eq!(v.header_len, n);
        assert_eq!(v.payload.len(), 100);
        let crate::wire::rtr::RtrBody::XmtReq(q) = v.body else {
            panic!("not a request");
        };
        assert_eq!((q.count, q.rsbuf, q.pslen, q.ddp.entries), (1, 0, 100, 1));
        let got: Vec<_> = q.ddp.mitems().map(|m| m.expect("decodes")).collect();
        assert_eq!(got, items.to_vec());
    }
}
