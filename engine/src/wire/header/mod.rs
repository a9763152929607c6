//! The RPC-over-RDMA Version 1 transport header (RFC 8166 §4, RFC 5666 §4).
//!
//! Every RPC-over-RDMA message starts with `rdma_xid`, `rdma_vers`, `rdma_credit` and
//! `rdma_proc`. RDMA_MSG, RDMA_NOMSG and RDMA_MSGP then carry the Read list, the Write
//! list and the Reply chunk (RDMA_MSGP first carries `rdma_align` and `rdma_thresh`);
//! RDMA_MSG and RDMA_MSGP are followed by the RPC message itself. RDMA_DONE has no body
//! and RDMA_ERROR carries an error code (and, for ERR_VERS, a version range).
//!
//! - Receiving: [`HeaderView::parse`] validates a header against [`Limits`] in one pass
//!   without allocating and returns a view whose iterators ([`ReadList`], [`ReadChunks`],
//!   [`WriteList`], [`Segments`]) read the received bytes directly. A rejected header
//!   yields a [`HeaderError`] whose [`responder_reply`](HeaderError::responder_reply)
//!   says what to answer (RFC 8166 §4.5).
//! - Sending: [`HeaderRepr`] borrows the caller's segment arrays; its
//!   [`encoded_len`](HeaderRepr::encoded_len) is exact and [`encode`](HeaderRepr::encode)
//!   writes into the send buffer. [`encode_err_vers`], [`encode_err_chunk`] and
//!   [`encode_done`] cover the fixed-shape messages.
//! - Tools: [`Header`] owns everything (and serializes to readable JSON with the `serde`
//!   feature); `bytes -> Header -> bytes` is exact.

mod consts;
mod error;
mod iter;
mod limits;
mod owned;
mod parse;
mod replies;
mod repr;
mod segment;
mod view;

pub use consts::*;
pub use error::{Field, HeaderError, HeaderErrorKind, ResponderAction};
pub use iter::{ReadChunk, ReadChunks, ReadList, Segments, WriteList};
pub use limits::Limits;
pub use owned::{ChunkLists, Header, HeaderBody};
pub use replies::{encode_done, encode_err_chunk, encode_err_vers};
pub(crate) use repr::encode_plain_msg;
pub use repr::{BodyRepr, ChunkListsRepr, HeaderRepr, RdmaError};
pub use segment::{ReadSegment, Segment};
pub use view::{BodyView, ChunkListsView, HeaderView};
