//! `rpcrdma decode`: a transport header (or RFC 8797 private data) as JSON.
//!
//! The JSON of a transport header is an object whose `"header"` member is the engine's
//! owned [`Header`] in its serde form (`xid`, `credit`, `proc`, the body's members, and
//! `payload`: every octet after the transport header as lower-case hex, omitted when
//! there are none). The other members describe the input and are ignored by `encode`:
//! `version`, `header_len`, `rpc_message` (offset and length of the inline RPC message
//! of RDMA_MSG and RDMA_MSGP, else null) and `rpc` (a summary of that message's ONC RPC
//! header, when there is one).

use rpcrdma::wire::header::{Header, HeaderView, Limits, Procedure, RPCRDMA_VERSION};
use rpcrdma::wire::private_data::{find_private_data, Extensions, InlineThresholds, PrivateData};
use rpcrdma::wire::rtr::{RtrBody, RtrMessage, RtrView, TransportChars, ROPT_XMTREQ};
use serde::Serialize;

use crate::error::CliError;
use crate::rpc_summary::{summarize, RpcSummary};

/// Where the inline RPC message sits in the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Span {
    /// Offset of its first octet.
    pub offset: usize,
    /// Octets from there to the end of the input.
    pub length: usize,
}

/// A decoded transport header and what follows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decoded {
    /// The header, exactly as `encode` takes it back.
    pub header: Header,
    /// `rdma_vers` (always 1: other versions are rejected).
    pub version: u32,
    /// Octets of the transport header.
    pub header_len: usize,
    /// The inline RPC message of RDMA_MSG and RDMA_MSGP.
    pub rpc_message: Option<Span>,
    /// Its ONC RPC header, if it has octets to look at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpc: Option<RpcSummary>,
    /// Remarks a reader should know, e.g. that RDMA_MSGP is obsolete.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// Decodes one transport header under `limits`.
pub fn decode_header(buf: &[u8], limits: &Limits) -> Result<Decoded, CliError> {
    let view = HeaderView::parse(buf, limits)?;
    let header = Header::from_view(&view);
    let rpc_message = view.rpc_msg_offset().map(|offset| Span {
        offset,
        length: buf.len().saturating_sub(offset),
    });
    let rpc = view
        .rpc_message()
        .filter(|m| !m.is_empty())
        .map(|m| summarize(m, view.header_len()));
    let mut notes = Vec::new();
    match view.procedure() {
        Procedure::Msgp => notes.push(
            "RDMA_MSGP is not used by RPC-over-RDMA version 1 (RFC 8166 §4.6.1); \
             an RFC 8166 responder answers it with ERR_CHUNK"
                .to_owned(),
        ),
        Procedure::Done => notes.push(format!(
            "RDMA_DONE: pull completion notification for XID {:#010x} \
             (draft-cel-nfsv4-rpcrdma-reliable-reply §4.1.3): the requester has pulled \
             the Read chunk the responder provided for that reply, which may now be \
             invalidated; sent only between peers that negotiated the extension \
             (RFC 8166 §4.6.2 receivers ignore it)",
            view.xid()
        )),
        Procedure::Nomsg if view.read_segment_count() > 0 => notes.push(
            "RDMA_NOMSG with a Position-Zero Read chunk: a long call, or a reply in a \
             responder-provided Read chunk (answered with RDMA_DONE)"
                .to_owned(),
        ),
        Procedure::Nomsg if !view.after_header().is_empty() => notes.push(format!(
            "{} octets follow an RDMA_NOMSG header, which carries its RPC message in a chunk",
            view.after_header().len()
        )),
        _ => {}
    }
    Ok(Decoded {
        header,
        version: RPCRDMA_VERSION,
        header_len: view.header_len(),
        rpc_message,
        rpc,
        notes,
    })
}

/// A decoded RDMA_OPTIONAL message (message continuation between rpcrdma peers,
/// draft-dnoveck-rpcrdma-rtrext on version 1; engine/DESIGN.md "Message continuation").
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DecodedOptional {
    /// The header, the DDP arrays' entry counts and the payload section's length.
    pub optional: RtrMessage,
    /// `rdma_vers` (1).
    pub version: u32,
    /// Octets of the transport header (where the payload section starts).
    pub header_len: usize,
    /// The ONC RPC header at the start of the payload section, for the group's first
    /// transmission (ROPT_XMTREQ, ROPT_XMTRESP).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpc: Option<RpcSummary>,
    /// The bulk items of `optxrq_ddp` / `optxrs_ddp`, typed (send-based DDP and the
    /// reply's per-item results; engine/DESIGN.md "Send-based DDP").
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub send_ddp_items: Vec<DecodedDdpItem>,
    /// The reply direction of a request's `optxrq_rsd` (send-based DDP of the reply's
    /// bulk item, §7.4), when it holds the one shape this engine sends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_direction: Option<rpcrdma::wire::rtr::place::ReplyDirection>,
    /// What the message is.
    pub notes: Vec<String>,
}

/// One `xmddp_mitem` as `rpcrdma decode` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DecodedDdpItem {
    /// `xmdmi_disp`: position in the virtual XDR stream.
    pub disp: u32,
    /// `xmdmi_length`.
    pub length: u32,
    /// `XMDTYPE_TBSN`, `XMDTYPE_EXRW`, `XMDTYPE_TOOSHORT` or `XMDTYPE_NOITEM`.
    pub placement: &'static str,
    /// TBSN: `xmdl_offset` in the first target buffer segment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u32>,
    /// TBSN: the target buffer segment numbers; EXRW: the segment count.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub segments: Vec<u32>,
}

fn ddp_items(arr: &rpcrdma::wire::rtr::DdpArray<'_>) -> Vec<DecodedDdpItem> {
    use rpcrdma::wire::rtr::place::Loc;
    arr.mitems()
        .map_while(Result::ok)
        .map(|m| {
            let (placement, offset, segments) = match m.loc {
                Loc::Tbsn(t) => ("XMDTYPE_TBSN", Some(t.offset), t.segments().to_vec()),
                Loc::Exrw { count, .. } => ("XMDTYPE_EXRW", None, vec![count]),
                Loc::TooShort => ("XMDTYPE_TOOSHORT", None, Vec::new()),
                Loc::NoItem => ("XMDTYPE_NOITEM", None, Vec::new()),
            };
            DecodedDdpItem {
                disp: m.disp,
                length: m.length,
                placement,
                offset,
                segments,
            }
        })
        .collect()
}

/// Decodes an RDMA_OPTIONAL message (`rtr::is_optional` said it is one).
pub fn decode_optional(buf: &[u8]) -> Result<DecodedOptional, CliError> {
    let view = RtrView::parse(buf).map_err(|e| CliError::Call(format!("RDMA_OPTIONAL: {e}")))?;
    let m = view.to_message();
    let first = matches!(view.body, RtrBody::XmtReq(_) | RtrBody::XmtResp(_));
    let rpc = (first && !view.payload.is_empty()).then(|| summarize(view.payload, view.header_len));
    let send_ddp_items = match view.body {
        RtrBody::XmtReq(q) => ddp_items(&q.ddp),
        RtrBody::XmtResp(r) => ddp_items(&r.ddp),
        _ => Vec::new(),
    };
    let reply_direction = match view.body {
        RtrBody::XmtReq(q) => rpcrdma::wire::rtr::place::ReplyDirection::of(&q.rsd)
            .ok()
            .flatten(),
        _ => None,
    };
    let note = match view.body {
        RtrBody::XmtReq(q) => format!(
            "ROPT_XMTREQ: transmission 0 of {} of a call, {} octets of its message here;              {} receives lent for the reply's continuations",
            q.count, q.pslen, q.rsbuf
        ),
        RtrBody::XmtResp(r) => format!(
            "ROPT_XMTRESP: transmission 0 of {} of a reply, {} octets of its message here",
            r.count, r.pslen
        ),
        RtrBody::XmtCont(c) => format!(
            "ROPT_XMTCONT: transmission {} of the {} group for XID {:#010x}, {} octets",
            c.xnum,
            if c.itype == ROPT_XMTREQ { "call" } else { "reply" },
            view.xid,
            c.pslen
        ),
        RtrBody::XmtErr(e) => format!(
            "ROPT_XMTERR: {} on transmission {} of XID {:#010x}",
            e.info.name(),
            e.bad.seq,
            e.bad.xid
        ),
        RtrBody::CharsUpdate(c) => format!(
            "ROPT_XCHUPD: the sender's characteristics from now on: RTR support {:#x}, \
             requests of up to {} Sends accepted, responses of up to {} Sends sent{}",
            c.rtr_support,
            c.req_rx_limit,
            c.resp_sx_limit,
            if c.recv_buf.is_some() {
                ", with a receive buffer structure"
            } else {
                ""
            }
        ),
    };
    Ok(DecodedOptional {
        optional: m,
        version: RPCRDMA_VERSION,
        header_len: view.header_len,
        rpc,
        notes: std::iter::once(note)
            .chain(send_ddp_items.iter().map(|d| {
                format!(
                    "bulk item at {} of {} octets: {}{}",
                    d.disp,
                    d.length,
                    d.placement,
                    d.offset
                        .map(|o| format!(" from offset {o} in segments {:?}", d.segments))
                        .unwrap_or_default()
                )
            }))
            .chain(reply_direction.iter().map(|d| {
                format!(
                    "reply direction: the reply's bulk item of at least {} octets by \
                     send-based DDP into the requester's receive segments (XMDTYPE_TBSN)",
                    d.minlen
                )
            }))
            .collect(),
        send_ddp_items,
        reply_direction,
    })
}

/// One side's advertisement, as shown in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Advertised {
    /// Message format version.
    pub version: u8,
    /// Largest RDMA Send this side transmits, in octets.
    pub send_size: u32,
    /// Largest RDMA Receive this side accepts, in octets.
    pub recv_size: u32,
    /// The R flag: this side tolerates Send With Invalidate.
    pub remote_invalidate: bool,
}

impl From<PrivateData> for Advertised {
    fn from(p: PrivateData) -> Self {
        Advertised {
            version: p.version,
            send_size: p.send_size,
            recv_size: p.recv_size,
            remote_invalidate: p.remote_invalidate,
        }
    }
}

/// A decoded RFC 8797 message, with what it means for a connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DecodedPrivateData {
    /// Offset of the format identifier in the input.
    pub offset: usize,
    /// What the peer advertised.
    pub peer: Advertised,
    /// The advertisement assumed for this end when computing `negotiated`.
    pub local: Advertised,
    /// Inline thresholds from this end's point of view (RFC 8797 §4.2).
    pub negotiated: InlineThresholds,
    /// The rpcrdma extensions the peer offered in the word after its RFC 8797 message
    /// (none from a version-1-only peer such as Linux).
    pub extensions: Extensions,
    /// The transport characteristics the peer sent with continuation
    /// (draft-dnoveck-rpcrdma-rtrext §8), else the draft's defaults.
    pub characteristics: TransportChars,
    /// The same in words.
    pub meaning: String,
}

/// Finds and decodes an RFC 8797 message anywhere in `buf`, negotiating against `local`.
pub fn decode_private_data(buf: &[u8], local: PrivateData) -> Result<DecodedPrivateData, CliError> {
    let (offset, peer) = find_private_data(buf)
        .map_err(CliError::PrivateData)?
        .ok_or(CliError::NoPrivateData { len: buf.len() })?;
    let negotiated = InlineThresholds::negotiate(Some(&local), Some(&peer));
    let extensions = Extensions::find(buf);
    let characteristics = Extensions::find_chars(buf);
    let meaning = format!(
        "the peer sends at most {} octets per RDMA Send and receives up to {}; {}. \
         Against the local side shown, this end may send {} octets inline and must post \
         receives of {} octets; remote invalidation is {}{}",
        peer.send_size,
        peer.recv_size,
        if peer.remote_invalidate {
            "it accepts Send With Invalidate"
        } else {
            "it does not accept Send With Invalidate"
        },
        negotiated.send,
        negotiated.recv,
        if negotiated.remote_invalidate {
            "usable"
        } else {
            "not usable"
        },
        if extensions.reply_read_chunks {
            ". It offers responder-provided Read chunks for replies (rpcrdma extension)"
        } else {
            ""
        },
    ) + &if extensions.continuation {
        format!(
            ". It offers message continuation, accepting requests of up to {} Sends and \
             sending responses of up to {}",
            characteristics.req_rx_limit, characteristics.resp_sx_limit
        )
    } else {
        String::new()
    };
    Ok(DecodedPrivateData {
        offset,
        peer: peer.into(),
        local: local.into(),
        negotiated,
        extensions,
        characteristics,
        meaning,
    })
}
