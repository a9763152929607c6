//! The Transmit Error operation's body (draft-dnoveck-rpcrdma-rtrext §9.5): which
//! transmission went wrong (`xms_id`), optionally the earlier one that led to it, and
//! what was wrong (`optx_info`).
//!
//! ```text
//! struct xms_id { uint32 xmsi_xid; msg_type xmsi_dir; xms_grpxn xmsi_seq; };
//! union optx_info switch (optx_err optxe_which) {
//!   case OPTXERR_BADHMT: case OPTXERR_BADOMT: case OPTXERR_BADSEQ: case OPTXERR_BADXID:
//!           uint32 optxi_expect; uint32 optxi_current;
//!   case OPTXERR_BADCONT: void;
//!   case OPTXERR_BADOFF: case OPTXERR_BADTBSN: case OPTXERR_BADPL:
//!           uint32 optxi_value; uint32 optxi_min; uint32 optxi_max;
//! };
//! struct optxmt_err { xms_id optxe_bad; xms_id *optxe_lead; optx_info optxe_info; };
//! ```

use crate::wire::xdr::{BufferTooSmall, XdrCursor, XdrEncoder, XdrError};

use super::RtrError;

/// `optx_err` value: a header message type other than the one expected.
pub const OPTXERR_BADHMT: u32 = 1;
/// `optx_err` value: an optional message type other than the one expected.
pub const OPTXERR_BADOMT: u32 = 2;
/// `optx_err` value: a continuation nobody expected.
pub const OPTXERR_BADCONT: u32 = 3;
/// `optx_err` value: a transmission number other than the one expected.
pub const OPTXERR_BADSEQ: u32 = 4;
/// `optx_err` value: an XID other than the group's in a continuation context.
pub const OPTXERR_BADXID: u32 = 5;
/// `optx_err` value: a bad offset in an `xmddp_loc`.
pub const OPTXERR_BADOFF: u32 = 6;
/// `optx_err` value: an invalid target buffer sequence number.
pub const OPTXERR_BADTBSN: u32 = 7;
/// `optx_err` value: a payload length that is not a subset of the transmission.
pub const OPTXERR_BADPL: u32 = 8;

/// `msg_type` of an `xms_id`: which direction the transmission went (ONC RPC's CALL 0,
/// REPLY 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum MsgDir {
    /// A transmission of an RPC call (requester to responder).
    Call,
    /// A transmission of an RPC reply.
    Reply,
}

impl MsgDir {
    /// The wire value.
    pub const fn as_u32(self) -> u32 {
        match self {
            MsgDir::Call => 0,
            MsgDir::Reply => 1,
        }
    }
}

/// `xms_id`: one transmission of one transmission group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct XmsId {
    /// The RPC XID of the group.
    pub xid: u32,
    /// Call or reply.
    pub dir: MsgDir,
    /// Transmission number within the group (0 is the ROPT_XMTREQ/ROPT_XMTRESP).
    pub seq: u32,
}

impl XmsId {
    const LEN: usize = 12;

    fn decode(cur: &mut XdrCursor<'_>) -> Result<Self, RtrError> {
        let xid = cur.u32()?;
        let dir = match cur.u32()? {
            0 => MsgDir::Call,
            1 => MsgDir::Reply,
            value => return Err(RtrError::BadDirection { value }),
        };
        let seq = cur.u32()?;
        Ok(XmsId { xid, dir, seq })
    }

    fn encode(&self, enc: &mut XdrEncoder<'_>) -> Result<(), BufferTooSmall> {
        enc.u32(self.xid)?;
        enc.u32(self.dir.as_u32())?;
        enc.u32(self.seq)
    }
}

/// `optx_info`: the error and what the draft reports with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum OptxInfo {
    /// OPTXERR_BADHMT: the header type (`rdma_proc`) expected and the one received.
    BadHmt {
        /// Expected value.
        expect: u32,
        /// Received value.
        current: u32,
    },
    /// OPTXERR_BADOMT: the optional type expected and the one received.
    BadOmt {
        /// Expected value.
        expect: u32,
        /// Received value.
        current: u32,
    },
    /// OPTXERR_BADCONT: a continuation with no group in progress.
    BadCont,
    /// OPTXERR_BADSEQ: the transmission number expected and the one received.
    BadSeq {
        /// Expected value.
        expect: u32,
        /// Received value.
        current: u32,
    },
    /// OPTXERR_BADXID: the group's XID and the one received.
    BadXid {
        /// Expected value.
        expect: u32,
        /// Received value.
        current: u32,
    },
    /// OPTXERR_BADOFF: an offset and the valid range.
    BadOff {
        /// The value received.
        value: u32,
        /// Smallest valid value.
        min: u32,
        /// Largest valid value.
        max: u32,
    },
    /// OPTXERR_BADTBSN: a target buffer segment number and the valid range.
    BadTbsn {
        /// The value received.
        value: u32,
        /// Smallest valid value.
        min: u32,
        /// Largest valid value.
        max: u32,
    },
    /// OPTXERR_BADPL: a payload length and the valid range.
    BadPl {
        /// The value received.
        value: u32,
        /// Smallest valid value.
        min: u32,
        /// Largest valid value.
        max: u32,
    },
}

impl OptxInfo {
    /// The `optx_err` discriminant.
    pub const fn code(&self) -> u32 {
        match self {
            OptxInfo::BadHmt { .. } => OPTXERR_BADHMT,
            OptxInfo::BadOmt { .. } => OPTXERR_BADOMT,
            OptxInfo::BadCont => OPTXERR_BADCONT,
            OptxInfo::BadSeq { .. } => OPTXERR_BADSEQ,
            OptxInfo::BadXid { .. } => OPTXERR_BADXID,
            OptxInfo::BadOff { .. } => OPTXERR_BADOFF,
            OptxInfo::BadTbsn { .. } => OPTXERR_BADTBSN,
            OptxInfo::BadPl { .. } => OPTXERR_BADPL,
        }
    }

    /// The draft's name, e.g. `"OPTXERR_BADSEQ"`.
    pub const fn name(&self) -> &'static str {
        match self {
            OptxInfo::BadHmt { .. } => "OPTXERR_BADHMT",
            OptxInfo::BadOmt { .. } => "OPTXERR_BADOMT",
            OptxInfo::BadCont => "OPTXERR_BADCONT",
            OptxInfo::BadSeq { .. } => "OPTXERR_BADSEQ",
            OptxInfo::BadXid { .. } => "OPTXERR_BADXID",
            OptxInfo::BadOff { .. } => "OPTXERR_BADOFF",
            OptxInfo::BadTbsn { .. } => "OPTXERR_BADTBSN",
            OptxInfo::BadPl { .. } => "OPTXERR_BADPL",
        }
    }

    fn encoded_len(&self) -> usize {
        4 + match self {
            OptxInfo::BadCont => 0,
            OptxInfo::BadHmt { .. }
            | OptxInfo::BadOmt { .. }
            | OptxInfo::BadSeq { .. }
            | OptxInfo::BadXid { .. } => 8,
            _ => 12,
        }
    }

    fn decode(cur: &mut XdrCursor<'_>) -> Result<Self, RtrError> {
        let which = cur.u32()?;
        let pair = |cur: &mut XdrCursor<'_>| -> Result<(u32, u32), XdrError> {
            Ok((cur.u32()?, cur.u32()?))
        };
        let triple = |cur: &mut XdrCursor<'_>| -> Result<(u32, u32, u32), XdrError> {
            Ok((cur.u32()?, cur.u32()?, cur.u32()?))
        };
        Ok(match which {
            OPTXERR_BADHMT => {
                let (expect, current) = pair(cur)?;
                OptxInfo::BadHmt { expect, current }
            }
            OPTXERR_BADOMT => {
                let (expect, current) = pair(cur)?;
                OptxInfo::BadOmt { expect, current }
            }
            OPTXERR_BADCONT => OptxInfo::BadCont,
            OPTXERR_BADSEQ => {
                let (expect, current) = pair(cur)?;
                OptxInfo::BadSeq { expect, current }
            }
            OPTXERR_BADXID => {
                let (expect, current) = pair(cur)?;
                OptxInfo::BadXid { expect, current }
            }
            OPTXERR_BADOFF => {
                let (value, min, max) = triple(cur)?;
                OptxInfo::BadOff { value, min, max }
            }
            OPTXERR_BADTBSN => {
                let (value, min, max) = triple(cur)?;
                OptxInfo::BadTbsn { value, min, max }
            }
            OPTXERR_BADPL => {
                let (value, min, max) = triple(cur)?;
                OptxInfo::BadPl { value, min, max }
            }
            value => return Err(RtrError::BadErrorCode { value }),
        })
    }

    fn encode(&self, enc: &mut XdrEncoder<'_>) -> Result<(), BufferTooSmall> {
        enc.u32(self.code())?;
        match *self {
            OptxInfo::BadCont => Ok(()),
            OptxInfo::BadHmt { expect, current }
            | OptxInfo::BadOmt { expect, current }
            | OptxInfo::BadSeq { expect, current }
            | OptxInfo::BadXid { expect, current } => {
                enc.u32(expect)?;
                enc.u32(current)
            }
            OptxInfo::BadOff { value, min, max }
            | OptxInfo::BadTbsn { value, min, max }
            | OptxInfo::BadPl { value, min, max } => {
                enc.u32(value)?;
                enc.u32(min)?;
                enc.u32(max)
            }
        }
    }
}

/// `optxmt_err`: the body of ROPT_XMTERR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct XmtErr {
    /// The transmission on which the error was detected.
    pub bad: XmsId,
    /// An earlier transmission that may have led to it (e.g. the group's first).
    pub lead: Option<XmsId>,
    /// What was wrong.
    pub info: OptxInfo,
}

impl XmtErr {
    /// Octets of the encoded body.
    pub fn encoded_len(&self) -> usize {
        XmsId::LEN + 4 + if self.lead.is_some() { XmsId::LEN } else { 0 } + self.info.encoded_len()
    }

    pub(super) fn decode(cur: &mut XdrCursor<'_>) -> Result<Self, RtrError> {
        let bad = XmsId::decode(cur)?;
        let lead = if cur.optional()? {
            Some(XmsId::decode(cur)?)
        } else {
            None
        };
        let info = OptxInfo::decode(cur)?;
        Ok(XmtErr { bad, lead, info })
    }

    pub(super) fn encode(&self, enc: &mut XdrEncoder<'_>) -> Result<(), BufferTooSmall> {
        self.bad.encode(enc)?;
        enc.optional(self.lead.is_some())?;
        if let Some(l) = &self.lead {
            l.encode(enc)?;
        }
        self.info.encode(enc)
    }
}
