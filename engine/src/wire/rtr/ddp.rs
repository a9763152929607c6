//! The direct-data-placement fields of ROPT_XMTREQ and ROPT_XMTRESP
//! (draft-dnoveck-rpcrdma-rtrext §7.3, §7.4): `xmddp_grpinfo` and `xmddp_rsdgroup`.
//!
//! They are validated structurally and kept as zero-copy views of their XDR: a decoder
//! must walk them to find the fields after them, and `rpcrdma decode` shows how many
//! items they hold. The items are typed by [`super::place`] (send-based DDP placements,
//! which the engine sends and accepts in `optxrq_ddp`); no RDMA-operation DDP goes
//! through these structures (version 1 chunks instead). What the engine does with each
//! is in `engine/DESIGN.md`, "Send-based DDP".
//!
//! ```text
//! union xmddp_loc switch (xmddp_type type) {
//!   case XMDTYPE_EXRW:  rpcrdma1_segment xmdl_ex<>;
//!   case XMDTYPE_TBSN:  xmddp_itemlen xmdl_offset; xmddp_tbsn xmdl_bsnum<>;
//!   case XMDTYPE_TOOSHORT: case XMDTYPE_NOITEM: void;
//! };
//! struct xmddp_mitem { xmddp_vsdisp xmdmi_disp; xmddp_itemlen xmdmi_length;
//!                      xmddp_loc xmdmi_where; };
//! typedef xmddp_mitem xmddp_grpinfo<>;
//!
//! union xmddp_rsdloc switch (xmddp_type type) {
//!   case XMDTYPE_EXRW: case XMDTYPE_CHOOSE: rpcrdma1_segment xmdrsdl_ex<>;
//!   case XMDTYPE_BYSIZE: xmddp_itemlen xmdrsdl_dsdov; rpcrdma1_segment xmdrsdl_bsex<>;
//!   case XMDTYPE_TBSN: void;
//! };
//! struct xmddp_rsdrange { xmddp_vsdisp xmdrsdr_begin; xmddp_vsdisp xmdrsdr_end; };
//! struct xmddp_rsditem { xmddp_itemlen xmdrsdi_minlen; xmddp_rsdloc xmdrsdi_loc; };
//! struct xmddp_rsdset { xmddp_rsdrange xmdrsds_range; xmddp_rsditem xmdrsds_items<>; };
//! typedef xmddp_rsdset xmddp_rsdgroup<>;
//! ```
//!
//! The draft's enum lists EXRW 1, TBSN 2, CHOOSE 3, BYSIZE 4 and NOITEM 6 and names
//! TOOSHORT without a value; the gap makes TOOSHORT 5 here.

use crate::wire::header::SEGMENT_LEN;
use crate::wire::xdr::XdrCursor;

use super::RtrError;

/// `xmddp_type`: explicit RDMA operations (version 1 segments).
pub const XMDTYPE_EXRW: u32 = 1;
/// `xmddp_type`: send-based DDP into target buffer segments.
pub const XMDTYPE_TBSN: u32 = 2;
/// `xmddp_type`: the responder chooses (reply directions only).
pub const XMDTYPE_CHOOSE: u32 = 3;
/// `xmddp_type`: chosen by item size (reply directions only).
pub const XMDTYPE_BYSIZE: u32 = 4;
/// `xmddp_type`: the item was shorter than asked for (results only).
pub const XMDTYPE_TOOSHORT: u32 = 5;
/// `xmddp_type`: there was no such item (results only).
pub const XMDTYPE_NOITEM: u32 = 6;

/// Most items (`xmddp_mitem`s, `xmddp_rsdset`s, `xmddp_rsditem`s per set) accepted in one
/// array, and most segments or buffer numbers in one location.
pub const MAX_DDP_ENTRIES: u32 = 64;

/// A `xmddp_grpinfo` or `xmddp_rsdgroup` as received: its entry count and its whole XDR
/// (count word included), borrowed from the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DdpArray<'a> {
    /// Entries in the array.
    pub entries: u32,
    /// The array's XDR, from its count word to its end.
    pub xdr: &'a [u8],
}

impl DdpArray<'_> {
    /// True when the array has no entry (all this engine sends).
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }
}

fn skip_segments(cur: &mut XdrCursor<'_>) -> Result<(), RtrError> {
    let n = cur.count(MAX_DDP_ENTRIES)?;
    cur.skip(n as usize * SEGMENT_LEN)?;
    Ok(())
}

/// Walks an `xmddp_grpinfo` (locations valid in requests or results).
pub(super) fn grpinfo<'a>(cur: &mut XdrCursor<'a>) -> Result<DdpArray<'a>, RtrError> {
    let start = cur.position();
    let items = cur.count(MAX_DDP_ENTRIES)?;
    for _ in 0..items {
        let _disp = cur.u32()?;
        let _len = cur.u32()?;
        match cur.u32()? {
            XMDTYPE_EXRW => skip_segments(cur)?,
            XMDTYPE_TBSN => {
                let _offset = cur.u32()?;
                let n = cur.count(MAX_DDP_ENTRIES)?;
                cur.skip(n as usize * 4)?;
            }
            XMDTYPE_TOOSHORT | XMDTYPE_NOITEM => {}
            value => return Err(RtrError::BadDdpType { value }),
        }
    }
    Ok(DdpArray {
        entries: items,
        xdr: &cur.input()[start..cur.position()],
    })
}

/// Walks an `xmddp_rsdgroup` (reply directions in a request).
pub(super) fn rsdgroup<'a>(cur: &mut XdrCursor<'a>) -> Result<DdpArray<'a>, RtrError> {
    let start = cur.position();
    let sets = cur.count(MAX_DDP_ENTRIES)?;
    for _ in 0..sets {
        let _begin = cur.u32()?;
        let _end = cur.u32()?;
        let items = cur.count(MAX_DDP_ENTRIES)?;
        for _ in 0..items {
            let _minlen = cur.u32()?;
            match cur.u32()? {
                XMDTYPE_EXRW | XMDTYPE_CHOOSE => skip_segments(cur)?,
                XMDTYPE_BYSIZE => {
                    let _dsdov = cur.u32()?;
                    skip_segments(cur)?;
                }
                XMDTYPE_TBSN => {}
                value => return Err(RtrError::BadDdpType { value }),
            }
        }
    }
    Ok(DdpArray {
        entries: sets,
        xdr: &cur.input()[start..cur.position()],
    })
}
