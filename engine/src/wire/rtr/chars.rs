//! Transport characteristics of draft-dnoveck-rpcrdma-rtrext §8, in the `xcharval` list
//! form of the transport-characteristics extension (each value an opaque overlaid by its
//! characteristic's XDR type):
//!
//! ```text
//! struct xcharval { uint32 xchv_which; opaque xchv_data<>; };
//! typedef xcharval xcharvals<>;
//!
//! XCHAR_RTRSUPP   4  uint32    RTRS_XREQ 1 | RTRS_XRESP 2 | RTRS_XCONT 4    default 0
//! XCHAR_RBSTRUCT  5  xmrbs_buf                        default: one non-DDP segment
//! XCHAR_REQRXLIM  6  xms_grpxc  longest request (transmissions) received   default 1
//! XCHAR_RESPSXLIM 7  xms_grpxc  longest response (transmissions) sent      default 1
//!
//! struct xmrbs_seg   { uint32 xmrseg_length; uint32 xmrseg_align; uint32 xmrseg_flags; };
//! struct xmrbs_group { uint32 xmrgrp_count; xmrbs_seg xmrgrp_info; };
//! struct xmrbs_buf   { uint32 xmrbuf_length; xmrbs_group xmrbuf_groups<>; };
//! ```
//!
//! Characteristics this codec does not know are skipped (their length says how far), so
//! a peer may send more than we understand.

use crate::wire::xdr::{BufferTooSmall, XdrCursor, XdrEncoder};

use super::RtrError;

/// Characteristic: which RTR operations the sender supports (`RTRS_*` bits).
pub const XCHAR_RTRSUPP: u32 = 4;
/// Characteristic: the sender's receive buffer structure.
pub const XCHAR_RBSTRUCT: u32 = 5;
/// Characteristic: the most transmissions in a request the sender accepts.
pub const XCHAR_REQRXLIM: u32 = 6;
/// Characteristic: the most transmissions in a response the sender generates.
pub const XCHAR_RESPSXLIM: u32 = 7;

/// RTR support bit: ROPT_XMTREQ.
pub const RTRS_XREQ: u32 = 1;
/// RTR support bit: ROPT_XMTRESP.
pub const RTRS_XRESP: u32 = 2;
/// RTR support bit: ROPT_XMTCONT.
pub const RTRS_XCONT: u32 = 4;
/// `xchrrtrs` bit of this engine's (the draft defines 1, 2 and 4, and §5.3 notes that
/// an implementation "may be able to send messages containing bulk data items placed
/// using send-based DDP while not being prepared to receive them", with no
/// characteristic saying so): the peer honours an `optxrq_rsd` reply direction of type
/// XMDTYPE_TBSN, i.e. sends a reply's bulk item by send-based DDP into the requester's
/// advertised receive segments (`engine/DESIGN.md`, "Send-based DDP replies").
pub const RTRS_SDDP_REPLY: u32 = 0x100;

/// `XMRSFLAG_DDP`: the segment may be targeted by send-based DDP.
pub const XMRSFLAG_DDP: u32 = 0x01;

/// Most characteristics accepted in one list.
pub const MAX_CHARS: u32 = 16;
/// Most octets in one characteristic's value.
pub const MAX_CHAR_VALUE: u32 = 256;
/// Most groups in a receive buffer structure.
pub const MAX_RBS_GROUPS: usize = 4;

/// `xmrbs_seg` and its `xmrgrp_count`: `count` segments alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RbsGroup {
    /// Segments in the group.
    pub count: u32,
    /// Octets of each.
    pub length: u32,
    /// Alignment of each.
    pub align: u32,
    /// `XMRSFLAG_*` bits.
    pub flags: u32,
}

/// `xmrbs_buf`: a receive buffer's structure, at most [`MAX_RBS_GROUPS`] groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RecvBufStructure {
    /// Octets of the whole buffer.
    pub length: u32,
    /// Groups in use.
    pub n_groups: u8,
    /// The groups (the first `n_groups`).
    pub groups: [RbsGroup; MAX_RBS_GROUPS],
}

impl RecvBufStructure {
    /// The draft's default: one segment of `len` octets, no alignment, not DDP-targetable.
    pub const fn single(len: u32) -> Self {
        let mut groups = [RbsGroup {
            count: 0,
            length: 0,
            align: 0,
            flags: 0,
        }; MAX_RBS_GROUPS];
        groups[0] = RbsGroup {
            count: 1,
            length: len,
            align: 0,
            flags: 0,
        };
        RecvBufStructure {
            length: len,
            n_groups: 1,
            groups,
        }
    }

    /// DDP-targetable segments in one buffer.
    pub fn ddp_segments(&self) -> u32 {
        self.groups[..usize::from(self.n_groups)]
            .iter()
            .filter(|g| g.flags & XMRSFLAG_DDP != 0)
            .fold(0u32, |n, g| n.saturating_add(g.count))
    }

    fn encoded_len(&self) -> usize {
        8 + 16 * usize::from(self.n_groups)
    }

    fn decode(cur: &mut XdrCursor<'_>) -> Result<Self, RtrError> {
        let length = cur.u32()?;
        let n = cur.count(MAX_RBS_GROUPS as u32)?;
        let mut s = RecvBufStructure {
            length,
            n_groups: n as u8,
            ..RecvBufStructure::default()
        };
        for g in s.groups.iter_mut().take(n as usize) {
            *g = RbsGroup {
                count: cur.u32()?,
                length: cur.u32()?,
                align: cur.u32()?,
                flags: cur.u32()?,
            };
        }
        Ok(s)
    }

    fn encode(&self, enc: &mut XdrEncoder<'_>) -> Result<(), BufferTooSmall> {
        enc.u32(self.length)?;
        let n = usize::from(self.n_groups).min(MAX_RBS_GROUPS);
        enc.u32(n as u32)?;
        for g in &self.groups[..n] {
            enc.u32(g.count)?;
            enc.u32(g.length)?;
            enc.u32(g.align)?;
            enc.u32(g.flags)?;
        }
        Ok(())
    }
}

/// One peer's round-trip-reduction characteristics; absent ones at their defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct TransportChars {
    /// `XCHAR_RTRSUPP`: `RTRS_*` bits.
    pub rtr_support: u32,
    /// `XCHAR_RBSTRUCT`; `None`: one non-DDP segment of the receive buffer size.
    pub recv_buf: Option<RecvBufStructure>,
    /// `XCHAR_REQRXLIM`: most transmissions in a request this peer accepts.
    pub req_rx_limit: u32,
    /// `XCHAR_RESPSXLIM`: most transmissions in a response this peer generates.
    pub resp_sx_limit: u32,
}

impl Default for TransportChars {
    fn default() -> Self {
        TransportChars::DEFAULT
    }
}

impl TransportChars {
    /// The draft's defaults (§8.1): no RTR support, one transmission each way.
    pub const DEFAULT: TransportChars = TransportChars {
        rtr_support: 0,
        recv_buf: None,
        req_rx_limit: 1,
        resp_sx_limit: 1,
    };

    /// All three continuation operations (`RTRS_XREQ | RTRS_XRESP | RTRS_XCONT`).
    pub const fn continuation(&self) -> bool {
        let all = RTRS_XREQ | RTRS_XRESP | RTRS_XCONT;
        self.rtr_support & all == all
    }

    /// The peer sends replies by send-based DDP when asked ([`RTRS_SDDP_REPLY`]).
    pub const fn sends_ddp_replies(&self) -> bool {
        self.continuation() && self.rtr_support & RTRS_SDDP_REPLY != 0
    }

    /// Octets of the encoded `xcharvals` list (the receive buffer structure only when
    /// set).
    pub fn encoded_len(&self) -> usize {
        4 + 3 * 12 + self.recv_buf.map_or(0, |r| 8 + r.encoded_len())
    }

    /// Encodes the list: RTR support, the two limits, then the receive buffer
    /// structure if set.
    ///
    /// # Errors
    /// A short buffer.
    pub fn encode(&self, enc: &mut XdrEncoder<'_>) -> Result<(), BufferTooSmall> {
        enc.u32(3 + u32::from(self.recv_buf.is_some()))?;
        for (id, v) in [
            (XCHAR_RTRSUPP, self.rtr_support),
            (XCHAR_REQRXLIM, self.req_rx_limit),
            (XCHAR_RESPSXLIM, self.resp_sx_limit),
        ] {
            enc.u32(id)?;
            enc.u32(4)?;
            enc.u32(v)?;
        }
        if let Some(r) = &self.recv_buf {
            enc.u32(XCHAR_RBSTRUCT)?;
            enc.u32(r.encoded_len() as u32)?;
            r.encode(enc)?;
        }
        Ok(())
    }

    /// Decodes an `xcharvals` list; characteristics not listed keep their defaults,
    /// unknown ones are skipped.
    ///
    /// # Errors
    /// Malformed XDR, a value whose length does not match its type, too many entries.
    pub fn decode(cur: &mut XdrCursor<'_>) -> Result<Self, RtrError> {
        let n = cur.count(MAX_CHARS)?;
        let mut c = TransportChars::DEFAULT;
        for _ in 0..n {
            let id = cur.u32()?;
            let at = cur.position();
            let value = cur.opaque(MAX_CHAR_VALUE)?;
            let word = || -> Result<u32, RtrError> {
                match value {
                    [a, b, c, d] => Ok(u32::from_be_bytes([*a, *b, *c, *d])),
                    _ => Err(RtrError::BadCharacteristic { id, offset: at }),
                }
            };
            match id {
                XCHAR_RTRSUPP => c.rtr_support = word()?,
                XCHAR_REQRXLIM => c.req_rx_limit = word()?,
                XCHAR_RESPSXLIM => c.resp_sx_limit = word()?,
                XCHAR_RBSTRUCT => {
                    let mut inner = XdrCursor::new(value);
                    let r = RecvBufStructure::decode(&mut inner)?;
                    if inner.remaining() != 0 {
                        return Err(RtrError::BadCharacteristic { id, offset: at });
                    }
                    c.recv_buf = Some(r);
                }
                _ => {}
            }
        }
        Ok(c)
    }
}
