//! Encoders for the fixed-shape messages the engine sends on its own: RDMA_ERROR replies
//! (RFC 8166 §4.5) and RDMA_DONE.

use super::consts::RPCRDMA_VERSION;
use super::repr::{BodyRepr, HeaderRepr, RdmaError};
use crate::wire::xdr::BufferTooSmall;

/// Writes RDMA_ERROR / ERR_VERS for `xid`, advertising versions 1 through 1
/// (RFC 8166 §4.5.1), and returns the octets written ([`ERR_VERS_HEADER_LEN`]).
///
/// [`ERR_VERS_HEADER_LEN`]: super::ERR_VERS_HEADER_LEN
pub fn encode_err_vers(xid: u32, credit: u32, buf: &mut [u8]) -> Result<usize, BufferTooSmall> {
    HeaderRepr {
        xid,
        credit,
        body: BodyRepr::Error(RdmaError::Vers {
            low: RPCRDMA_VERSION,
            high: RPCRDMA_VERSION,
        }),
    }
    .encode(buf)
}

/// Writes RDMA_ERROR / ERR_CHUNK for `xid` (RFC 8166 §4.5.2) and returns the octets
/// written ([`ERR_CHUNK_HEADER_LEN`]).
///
/// [`ERR_CHUNK_HEADER_LEN`]: super::ERR_CHUNK_HEADER_LEN
pub fn encode_err_chunk(xid: u32, credit: u32, buf: &mut [u8]) -> Result<usize, BufferTooSmall> {
    HeaderRepr {
        xid,
        credit,
        body: BodyRepr::Error(RdmaError::Chunk),
    }
    .encode(buf)
}

/// Writes RDMA_DONE for `xid` and returns the octets written ([`DONE_HEADER_LEN`]).
///
/// [`DONE_HEADER_LEN`]: super::DONE_HEADER_LEN
pub fn encode_done(xid: u32, credit: u32, buf: &mut [u8]) -> Result<usize, BufferTooSmall> {
    HeaderRepr {
        xid,
        credit,
        body: BodyRepr::Done,
    }
    .encode(buf)
}
