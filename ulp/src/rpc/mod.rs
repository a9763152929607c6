//! ONC RPC version 2 message headers (RFC 5531 §9): zero-copy decoding and allocation-free
//! encoding of call and reply headers, the AUTH_NONE and AUTH_SYS credentials, and the typed
//! errors a server needs to decide how to answer a malformed call.
//!
//! Decoders borrow from the received bytes and report where the procedure arguments (for a
//! call) or results (for a reply) begin; the header codec never looks at those bytes.
//! Encoders write into caller buffers whose required size is known up front from
//! `encoded_len()`.
//!
//! ```
//! use rpcrdma_ulp::rpc::{CallHeader, OpaqueAuth, ReplyHeader};
//!
//! let call = CallHeader {
//!     xid: 7,
//!     prog: 100_003,
//!     vers: 3,
//!     procedure: 0,
//!     cred: OpaqueAuth::None,
//!     verf: OpaqueAuth::None,
//! };
//! let mut buf = [0u8; 64];
//! let n = call.encode(&mut buf)?;
//! assert_eq!(n, call.encoded_len());
//! let (decoded, args_at) = CallHeader::decode(&buf[..n])?;
//! assert_eq!((decoded, args_at), (call, n));
//!
//! // A responder answers without allocating.
//! let reply = ReplyHeader::success(decoded.xid);
//! let results_at = reply.encode(&mut buf)?;
//! assert_eq!(results_at, 24);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod auth;
mod call;
mod error;
mod message;
mod reply;
mod respond;

pub use auth::{AuthFlavor, AuthSys, Gids, OpaqueAuth};
pub use call::CallHeader;
pub use error::{AuthField, AuthSysError, EncodeError, RpcError, RpcErrorKind};
pub use message::{MsgType, RpcMessage};
pub use reply::{AcceptStatus, AuthStat, Rejection, ReplyBody, ReplyHeader};
pub use respond::ServerReply;

/// The only RPC protocol version this codec speaks (RFC 5531 §9, `rpcvers`).
pub const RPC_VERSION: u32 = 2;

/// Largest `opaque_auth` body (RFC 5531 §8.2: `opaque body<400>`).
pub const MAX_AUTH_BYTES: usize = 400;

/// Largest AUTH_SYS machine name (RFC 5531 Appendix A: `string machinename<255>`).
pub const MAX_MACHINE_NAME: usize = 255;

/// Most supplementary groups in an AUTH_SYS credential (RFC 5531 Appendix A: `gids<16>`).
pub const MAX_GIDS: usize = 16;
