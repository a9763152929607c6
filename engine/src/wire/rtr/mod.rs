//! Message continuation (draft-dnoveck-rpcrdma-rtrext, "RPC-over-RDMA Extensions to
//! Reduce Internode Round-trips") carried on RPC-over-RDMA version 1 between two peers
//! that negotiated it.
//!
//! The draft overlays its operations on version 2's RDMA_OPTIONAL message ("This data
//! overlays the nominally opaque field optinfo"). Version 1 has no such message, so this
//! engine gives it one, sent only after both peers advertised the extension in their CM
//! private data (see `engine/DESIGN.md`, "Message continuation"):
//!
//! ```text
//! rdma_xid, rdma_vers = 1, rdma_credit, rdma_proc = RDMA_OPTIONAL (5)
//! uint32  rdma_opttype;        ROPT_XMTREQ 5 | ROPT_XMTRESP 6 | ROPT_XMTCONT 7 | ROPT_XMTERR 8
//! opaque  rdma_optinfo<>;      the operation's structure, below
//! ... the transmission's section of the payload stream (pslen octets)
//!
//! struct optxmt_req  { xmddp_grpinfo optxrq_ddp; xmddp_rsdgroup optxrq_rsd;
//!                      xms_grpxc optxrq_count; xms_grpxc optxrq_rsbuf;
//!                      xmddp_pldisp optxrq_pslen; };
//! struct optxmt_resp { xmddp_grpinfo optxrs_ddp; xms_grpxn optxrs_count;
//!                      xmddp_pldisp optxrs_pslen; };
//! struct optxmt_cont { xms_grpxn optxc_xnum; uint32 optxc_itype; xmddp_pldisp optxc_pslen; };
//! struct optxmt_err  { ... }   (see [`XmtErr`])
//! ```
//!
//! The optinfo length makes every message self-describing (a decoder can skip an
//! operation it does not know); the payload follows the optinfo as the draft says it
//! follows "the end of the optxmt_msg".
//!
//! Decoding: [`RtrView::parse`] (zero-copy; DDP arrays are walked and kept as views,
//! [`ddp`]). Encoding: [`RtrRepr`]. Characteristics: [`chars`]. Nothing here allocates
//! or panics on received bytes.

pub mod chars;
pub mod ddp;
mod err;
pub mod place;

pub use chars::TransportChars;
pub use ddp::DdpArray;
pub use err::*;

use crate::wire::header::{FIXED_HEADER_LEN, RPCRDMA_VERSION};
use crate::wire::xdr::{BufferTooSmall, XdrCursor, XdrEncoder, XdrError};

/// `rdma_proc` of the optional-operation message on version 1 (the value is the first
/// one RFC 8166 leaves unused; it is only ever sent to a peer that negotiated it).
pub const RDMA_OPTIONAL: u32 = 5;
/// Optional type: first (or only) transmission of a request.
pub const ROPT_XMTREQ: u32 = 5;
/// Optional type: first (or only) transmission of a response.
pub const ROPT_XMTRESP: u32 = 6;
/// Optional type: a later transmission of a group.
pub const ROPT_XMTCONT: u32 = 7;
/// Optional type: a report of a broken group.
pub const ROPT_XMTERR: u32 = 8;

/// Octets from the start of a message to its optinfo: fixed header, opttype, length.
pub const OPTINFO_OFFSET: usize = FIXED_HEADER_LEN + 8;
/// Octets of an ROPT_XMTREQ header with empty DDP arrays.
pub const XMTREQ_HEADER_LEN: usize = OPTINFO_OFFSET + 20;
/// `rdma_opttype` of a transport characteristics update (this engine's number, after
/// the draft's four: see `engine/DESIGN.md`, "Characteristics updates"): the sender's
/// whole set of characteristics, as an `xcharvals` list, replacing the one it sent
/// before. No payload.
pub const ROPT_XCHUPD: u32 = 9;
/// Octets of an ROPT_XMTRESP header with an empty DDP array.
pub const XMTRESP_HEADER_LEN: usize = OPTINFO_OFFSET + 12;
/// Octets of an ROPT_XMTCONT header.
pub const XMTCONT_HEADER_LEN: usize = OPTINFO_OFFSET + 12;
/// Most octets of an optinfo accepted.
pub const MAX_OPTINFO: u32 = 16 * 1024;

/// Why a message is not a usable optional-operation message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RtrError {
    /// Malformed or truncated XDR.
    #[error("malformed RDMA_OPTIONAL XDR: {0}")]
    Xdr(#[from] XdrError),
    /// `rdma_vers` is not 1.
    #[error("RDMA_OPTIONAL with version {found}, not 1")]
    Version {
        /// The version found.
        found: u32,
    },
    /// `rdma_proc` is not RDMA_OPTIONAL.
    #[error("rdma_proc {found} is not RDMA_OPTIONAL")]
    NotOptional {
        /// The procedure found.
        found: u32,
    },
    /// An optional type this engine does not know.
    #[error("unknown optional type {opttype}")]
    UnknownOptType {
        /// The type found.
        opttype: u32,
    },
    /// The optinfo's length does not match the structure inside it.
    #[error("optinfo declares {declared} octets, its structure takes {used}")]
    OptInfoLength {
        /// Octets declared.
        declared: u32,
        /// Octets the structure took.
        used: u32,
    },
    /// The payload length runs past the transmission (OPTXERR_BADPL).
    #[error("payload length {pslen} exceeds the {available} octets after the header")]
    PayloadLength {
        /// `pslen` as received.
        pslen: u32,
        /// Octets present after the header.
        available: u32,
    },
    /// An `xmddp_type` not valid where it appeared.
    #[error("xmddp_type {value} not valid here")]
    BadDdpType {
        /// The value found.
        value: u32,
    },
    /// An `optx_err` value the draft does not define.
    #[error("unknown optx_err {value}")]
    BadErrorCode {
        /// The value found.
        value: u32,
    },
    /// An `xms_id` direction other than CALL or REPLY.
    #[error("xms_id direction {value} is neither CALL nor REPLY")]
    BadDirection {
        /// The value found.
        value: u32,
    },
    /// A characteristic value whose length does not fit its type.
    #[error("characteristic {id} at offset {offset} has a malformed value")]
    BadCharacteristic {
        /// The characteristic.
        id: u32,
        /// Offset of its value's length word.
        offset: usize,
    },
}

impl RtrError {
    /// The Transmit Error information to answer with, when the draft has one:
    /// OPTXERR_BADPL for a payload length that overruns, OPTXERR_BADOMT for an unknown
    /// optional type (the expected type is unknown here: the caller may refine it).
    pub fn optx(&self) -> Option<OptxInfo> {
        match *self {
            RtrError::PayloadLength { pslen, available } => Some(OptxInfo::BadPl {
                value: pslen,
                min: 0,
                max: available,
            }),
            RtrError::UnknownOptType { opttype } => Some(OptxInfo::BadOmt {
                expect: ROPT_XMTREQ,
                current: opttype,
            }),
            _ => None,
        }
    }
}

/// `optxmt_req` as received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XmtReq<'a> {
    /// `optxrq_ddp`: bulk items excised from the payload stream.
    pub ddp: DdpArray<'a>,
    /// `optxrq_rsd`: directions for DDP in the reply.
    pub rsd: DdpArray<'a>,
    /// `optxrq_count`: transmissions in this request's group (1 = no continuation).
    pub count: u32,
    /// `optxrq_rsbuf`: receives the requester made available beyond the first for the
    /// response's continuation transmissions.
    pub rsbuf: u32,
    /// `optxrq_pslen`: payload octets in this transmission.
    pub pslen: u32,
}

/// `optxmt_resp` as received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XmtResp<'a> {
    /// `optxrs_ddp`: bulk items excised from the payload stream.
    pub ddp: DdpArray<'a>,
    /// `optxrs_count`: transmissions in this response's group.
    pub count: u32,
    /// `optxrs_pslen`: payload octets in this transmission.
    pub pslen: u32,
}

/// `optxmt_cont`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct XmtCont {
    /// `optxc_xnum`: this transmission's number in its group (the first is 0, so
    /// continuations count from 1).
    pub xnum: u32,
    /// `optxc_itype`: the optional type that began the group (ROPT_XMTREQ or
    /// ROPT_XMTRESP; the draft leaves the field unexplained, this engine checks it).
    pub itype: u32,
    /// `optxc_pslen`: payload octets in this transmission (may be 0).
    pub pslen: u32,
}

/// The operation of a received optional message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtrBody<'a> {
    /// ROPT_XMTREQ.
    XmtReq(XmtReq<'a>),
    /// ROPT_XMTRESP.
    XmtResp(XmtResp<'a>),
    /// ROPT_XMTCONT.
    XmtCont(XmtCont),
    /// ROPT_XMTERR.
    XmtErr(XmtErr),
    /// ROPT_XCHUPD: the sender's characteristics from now on.
    CharsUpdate(TransportChars),
}

impl RtrBody<'_> {
    /// The optional type.
    pub const fn opttype(&self) -> u32 {
        match self {
            RtrBody::XmtReq(_) => ROPT_XMTREQ,
            RtrBody::XmtResp(_) => ROPT_XMTRESP,
            RtrBody::XmtCont(_) => ROPT_XMTCONT,
            RtrBody::XmtErr(_) => ROPT_XMTERR,
            RtrBody::CharsUpdate(_) => ROPT_XCHUPD,
        }
    }
}

/// A received RDMA_OPTIONAL message, borrowed from its receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtrView<'a> {
    /// `rdma_xid`.
    pub xid: u32,
    /// `rdma_credit`.
    pub credit: u32,
    /// The operation.
    pub body: RtrBody<'a>,
    /// This transmission's section of the payload stream (empty for ROPT_XMTERR).
    pub payload: &'a [u8],
    /// Octets of the transport header (payload offset).
    pub header_len: usize,
}

/// The name of an optional type, e.g. `"ROPT_XMTCONT"`.
pub const fn opttype_name(opttype: u32) -> &'static str {
    match opttype {
        ROPT_XMTREQ => "ROPT_XMTREQ",
        ROPT_XMTRESP => "ROPT_XMTRESP",
        ROPT_XMTCONT => "ROPT_XMTCONT",
        ROPT_XMTERR => "ROPT_XMTERR",
        ROPT_XCHUPD => "ROPT_XCHUPD",
        _ => "ROPT_UNKNOWN",
    }
}

/// True when `buf` starts with a version 1 header whose `rdma_proc` is RDMA_OPTIONAL:
/// the one check a receiver makes before choosing this codec over the version 1
/// header's.
pub fn is_optional(buf: &[u8]) -> bool {
    match buf.get(4..16) {
        Some(w) => {
            w[0..4] == RPCRDMA_VERSION.to_be_bytes() && w[8..12] == RDMA_OPTIONAL.to_be_bytes()
        }
        None => false,
    }
}

impl<'a> RtrView<'a> {
    /// Parses a whole received message (`buf` is exactly what the Receive delivered).
    ///
    /// # Errors
    /// See [`RtrError`]; [`RtrError::optx`] says which Transmit Error answers it.
    pub fn parse(buf: &'a [u8]) -> Result<Self, RtrError> {
        let mut cur = XdrCursor::new(buf);
        let xid = cur.u32()?;
        let vers = cur.u32()?;
        let credit = cur.u32()?;
        let proc_ = cur.u32()?;
        if vers != RPCRDMA_VERSION {
            return Err(RtrError::Version { found: vers });
        }
        if proc_ != RDMA_OPTIONAL {
            return Err(RtrError::NotOptional { found: proc_ });
        }
        let opttype = cur.u32()?;
        let info = cur.opaque(MAX_OPTINFO)?;
        let header_len = cur.position();
        let mut ic = XdrCursor::new(info);
        let body = match opttype {
            ROPT_XMTREQ => {
                let ddp = ddp::grpinfo(&mut ic)?;
                let rsd = ddp::rsdgroup(&mut ic)?;
                RtrBody::XmtReq(XmtReq {
                    ddp,
                    rsd,
                    count: ic.u32()?,
                    rsbuf: ic.u32()?,
                    pslen: ic.u32()?,
                })
            }
            ROPT_XMTRESP => {
                let ddp = ddp::grpinfo(&mut ic)?;
                RtrBody::XmtResp(XmtResp {
                    ddp,
                    count: ic.u32()?,
                    pslen: ic.u32()?,
                })
            }
            ROPT_XMTCONT => RtrBody::XmtCont(XmtCont {
                xnum: ic.u32()?,
                itype: ic.u32()?,
                pslen: ic.u32()?,
            }),
            ROPT_XMTERR => RtrBody::XmtErr(XmtErr::decode(&mut ic)?),
            ROPT_XCHUPD => RtrBody::CharsUpdate(TransportChars::decode(&mut ic)?),
            opttype => return Err(RtrError::UnknownOptType { opttype }),
        };
        if ic.remaining() != 0 {
            return Err(RtrError::OptInfoLength {
                declared: info.len() as u32,
                used: ic.position() as u32,
            });
        }
        let rest = cur.rest();
        let pslen = match body {
            RtrBody::XmtReq(r) => r.pslen,
            RtrBody::XmtResp(r) => r.pslen,
            RtrBody::XmtCont(c) => c.pslen,
            RtrBody::XmtErr(_) | RtrBody::CharsUpdate(_) => 0,
        };
        let payload = rest.get(..pslen as usize).ok_or(RtrError::PayloadLength {
            pslen,
            available: rest.len() as u32,
        })?;
        Ok(RtrView {
            xid,
            credit,
            body,
            payload,
            header_len,
        })
    }
}

/// The operation of an optional message to send. DDP arrays go out empty; a request
/// that places bulk items by send-based DDP is encoded by
/// [`place::encode_xmtreq`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum RtrOp {
    /// ROPT_XMTREQ.
    XmtReq {
        /// `optxrq_count`.
        count: u32,
        /// `optxrq_rsbuf`.
        rsbuf: u32,
        /// `optxrq_pslen`.
        pslen: u32,
    },
    /// ROPT_XMTRESP.
    XmtResp {
        /// `optxrs_count`.
        count: u32,
        /// `optxrs_pslen`.
        pslen: u32,
    },
    /// ROPT_XMTCONT.
    XmtCont(XmtCont),
    /// ROPT_XMTERR.
    XmtErr(XmtErr),
    /// ROPT_XCHUPD.
    CharsUpdate(TransportChars),
}

impl RtrOp {
    /// The optional type.
    pub const fn opttype(&self) -> u32 {
        match self {
            RtrOp::XmtReq { .. } => ROPT_XMTREQ,
            RtrOp::XmtResp { .. } => ROPT_XMTRESP,
            RtrOp::XmtCont(_) => ROPT_XMTCONT,
            RtrOp::XmtErr(_) => ROPT_XMTERR,
            RtrOp::CharsUpdate(_) => ROPT_XCHUPD,
        }
    }

    fn info_len(&self) -> usize {
        match self {
            RtrOp::XmtReq { .. } => 20,
            RtrOp::XmtResp { .. } | RtrOp::XmtCont(_) => 12,
            RtrOp::XmtErr(e) => e.encoded_len(),
            RtrOp::CharsUpdate(c) => c.encoded_len(),
        }
    }
}

/// A transport header of an optional message, to encode. Also the owned form tools
/// print (received DDP arrays reduce to their entry counts there: see [`RtrMessage`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RtrRepr {
    /// `rdma_xid`.
    pub xid: u32,
    /// `rdma_credit`.
    pub credit: u32,
    /// The operation.
    pub op: RtrOp,
}

impl RtrRepr {
    /// Exact octets [`encode`](Self::encode) writes (the header; payload not included).
    pub fn encoded_len(&self) -> usize {
        OPTINFO_OFFSET + self.op.info_len()
    }

    /// Writes the header into `buf`; returns its length. The payload goes after it (in
    /// the same buffer or as another gather entry).
    ///
    /// # Errors
    /// A short buffer.
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, BufferTooSmall> {
        let mut enc = XdrEncoder::new(buf);
        enc.u32(self.xid)?;
        enc.u32(RPCRDMA_VERSION)?;
        enc.u32(self.credit)?;
        enc.u32(RDMA_OPTIONAL)?;
        enc.u32(self.op.opttype())?;
        enc.u32(self.op.info_len() as u32)?;
        match self.op {
            RtrOp::XmtReq {
                count,
                rsbuf,
                pslen,
            } => {
                enc.u32(0)?;
                enc.u32(0)?;
                enc.u32(count)?;
                enc.u32(rsbuf)?;
                enc.u32(pslen)?;
            }
            RtrOp::XmtResp { count, pslen } => {
                enc.u32(0)?;
                enc.u32(count)?;
                enc.u32(pslen)?;
            }
            RtrOp::XmtCont(c) => {
                enc.u32(c.xnum)?;
                enc.u32(c.itype)?;
                enc.u32(c.pslen)?;
            }
            RtrOp::XmtErr(e) => e.encode(&mut enc)?,
            RtrOp::CharsUpdate(c) => c.encode(&mut enc)?,
        }
        Ok(enc.finish())
    }
}

/// An optional message as tools show it: the header, the DDP arrays' entry counts, and
/// the payload's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct RtrMessage {
    /// The header (DDP arrays shown as counts below).
    pub header: RtrRepr,
    /// The optional type's name.
    pub opttype: &'static str,
    /// Entries of `optxrq_ddp` / `optxrs_ddp`.
    pub ddp_items: u32,
    /// Entries of `optxrq_rsd`.
    pub rsd_sets: u32,
    /// Octets of payload in this transmission.
    pub payload_len: usize,
}

impl RtrView<'_> {
    /// The owned form (see [`RtrMessage`]).
    pub fn to_message(&self) -> RtrMessage {
        let (op, ddp_items, rsd_sets) = match self.body {
            RtrBody::XmtReq(r) => (
                RtrOp::XmtReq {
                    count: r.count,
                    rsbuf: r.rsbuf,
                    pslen: r.pslen,
                },
                r.ddp.entries,
                r.rsd.entries,
            ),
            RtrBody::XmtResp(r) => (
                RtrOp::XmtResp {
                    count: r.count,
                    pslen: r.pslen,
                },
                r.ddp.entries,
                0,
            ),
            RtrBody::XmtCont(c) => (RtrOp::XmtCont(c), 0, 0),
            RtrBody::XmtErr(e) => (RtrOp::XmtErr(e), 0, 0),
            RtrBody::CharsUpdate(c) => (RtrOp::CharsUpdate(c), 0, 0),
        };
        RtrMessage {
            header: RtrRepr {
                xid: self.xid,
                credit: self.credit,
                op,
            },
            opttype: opttype_name(self.body.opttype()),
            ddp_items,
            rsd_sets,
            payload_len: self.payload.len(),
        }
    }
}

#[cfg(test)]
mod tests;
