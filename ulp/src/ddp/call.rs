//! Requester side: [`CallEncoder`] writes an RPC call (header and arguments) and collects
//! its Read chunks; [`reply_results`] opens a reply's results for decoding.

use core::ops::{Deref, DerefMut};

use crate::rpc::{AcceptStatus, CallHeader, Rejection, ReplyBody, ReplyHeader, RpcError};

use super::decode::{DdpCursor, DdpDecodeError};
use super::encode::{DdpEncodeError, DdpEncoder, Encoded};
use super::list::{DdpList, ReadItem};
use super::XdrCodec;

/// Writes an RPC call message into a caller buffer: the call header, then the arguments
/// through the [`DdpEncoder`] it dereferences to. DDP-eligible arguments become Read
/// chunks at their XDR positions (RFC 8166 §3.4.5) and are never copied.
///
/// ```
/// use rpcrdma_ulp::ddp::CallEncoder;
/// use rpcrdma_ulp::rpc::{CallHeader, OpaqueAuth};
///
/// let header = CallHeader {
///     xid: 1, prog: 0x2f00_0001, vers: 1, procedure: 1,
///     cred: OpaqueAuth::None, verf: OpaqueAuth::None,
/// };
/// let payload = [7u8; 4096];
/// let mut buf = [0u8; 128];
/// let mut enc = CallEncoder::new(&mut buf, &header)?;
/// enc.opaque_ddp(&payload)?;
/// let call = enc.finish();
/// // 40-octet header, then the length word; the payload is a Read chunk just after it.
/// assert_eq!(call.len, 44);
/// assert_eq!(call.read_chunks[0].position, 44);
/// assert_eq!(call.read_chunks[0].data.len(), 4096);
/// # Ok::<(), rpcrdma_ulp::ddp::DdpEncodeError>(())
/// ```
#[derive(Debug)]
pub struct CallEncoder<'b, 'd> {
    xid: u32,
    enc: DdpEncoder<'b, 'd>,
}

impl<'b, 'd> CallEncoder<'b, 'd> {
    /// Starts a call; every non-empty DDP-eligible argument becomes a Read chunk.
    pub fn new(buf: &'b mut [u8], header: &CallHeader<'_>) -> Result<Self, DdpEncodeError> {
        Self::with_ddp_threshold(buf, header, 1)
    }

    /// Starts a call; DDP-eligible arguments shorter than `min_len` octets stay inline.
    // Inlined: the encoder (a few hundred octets with its chunk lists) is built where
    // the caller keeps it, not returned and copied.
    #[inline(always)]
    pub fn with_ddp_threshold(
        buf: &'b mut [u8],
        header: &CallHeader<'_>,
        min_len: usize,
    ) -> Result<Self, DdpEncodeError> {
        let n = header.encode(buf)?;
        let (_, rest) = buf.split_at_mut(n);
        Ok(CallEncoder {
            xid: header.xid,
            enc: DdpEncoder::read_chunks(rest, n, min_len),
        })
    }

    /// Ends the call.
    pub fn finish(self) -> EncodedCall<'d> {
        let Encoded {
            len,
            xdr_len,
            reads,
            ..
        } = self.enc.finish();
        EncodedCall {
            xid: self.xid,
            len,
            xdr_len,
            read_chunks: reads,
        }
    }
}

impl<'b, 'd> Deref for CallEncoder<'b, 'd> {
    type Target = DdpEncoder<'b, 'd>;
    fn deref(&self) -> &Self::Target {
        &self.enc
    }
}

impl DerefMut for CallEncoder<'_, '_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.enc
    }
}

/// An encoded call: what the engine needs to send it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodedCall<'d> {
    /// Transaction id.
    pub xid: u32,
    /// Octets of the message in the caller's buffer (header and inline arguments).
    pub len: usize,
    /// Length of the call as the responder reconstructs it (inline octets plus Read chunk
    /// data with XDR roundup).
    pub xdr_len: usize,
    /// The Read chunks to advertise, in XDR order.
    pub read_chunks: DdpList<ReadItem<'d>>,
}

/// Encodes a whole call: `header`, then `args`, with DDP-eligible arguments of at least
/// `min_len` octets as Read chunks.
pub fn encode_call<'d, A: XdrCodec<'d>>(
    buf: &mut [u8],
    header: &CallHeader<'_>,
    args: &A,
    min_len: usize,
) -> Result<EncodedCall<'d>, DdpEncodeError> {
    let mut enc = CallEncoder::with_ddp_threshold(buf, header, min_len)?;
    args.encode(&mut enc)?;
    Ok(enc.finish())
}

/// Why a reply's results could not be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    /// The reply header did not decode.
    #[error("{0}")]
    Header(#[source] RpcError),
    /// The call was accepted but did not succeed (anything but SUCCESS).
    #[error("xid {xid:#010x}: call accepted with accept_stat {}", .status.code())]
    NotSuccess {
        /// Transaction id.
        xid: u32,
        /// What the server answered.
        status: AcceptStatus,
    },
    /// The call was denied.
    #[error(fmt = fmt_denied)]
    Denied {
        /// Transaction id.
        xid: u32,
        /// Why.
        rejection: Rejection,
    },
    /// The caller passed more Write chunks than a cursor takes.
    #[error("{0}")]
    Results(#[source] DdpDecodeError),
}

/// [`ReplyError::Denied`]'s message.
fn fmt_denied(
    xid: &u32,
    rejection: &Rejection,
    f: &mut core::fmt::Formatter<'_>,
) -> core::fmt::Result {
    match rejection {
        Rejection::RpcMismatch { low, high } => {
            write!(
                f,
                "xid {xid:#010x}: RPC_MISMATCH, server speaks {low}..={high}"
            )
        }
        Rejection::AuthError(stat) => write!(f, "xid {xid:#010x}: AUTH_ERROR {stat}"),
    }
}

/// Decodes a reply header and, when the call succeeded, returns the XID and a cursor
/// over the results. `written` is the data the responder placed in each Write chunk the
/// call offered, in Write list order, cut to the lengths the reply's Write list reports.
pub fn reply_results<'a>(
    msg: &'a [u8],
    written: &'a [&'a [u8]],
) -> Result<(u32, DdpCursor<'a>), ReplyError> {
    let (h, at) = ReplyHeader::decode(msg).map_err(ReplyError::Header)?;
    let xid = h.xid;
    match h.body {
        ReplyBody::Accepted {
            status: AcceptStatus::Success,
            ..
        } => DdpCursor::with_write_chunks(msg, at, written)
            .map(|c| (xid, c))
            .map_err(ReplyError::Results),
        ReplyBody::Accepted { status, .. } => Err(ReplyError::NotSuccess { xid, status }),
        ReplyBody::Denied(rejection) => Err(ReplyError::Denied { xid, rejection }),
    }
}
