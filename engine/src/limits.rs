//! Every fixed bound of the engine in one place: how many chunks a call can carry in
//! each role's tables, how many registrations a call needs, the inline sizes RFC 8166
//! allows, and the header parser's limits. Configuration picks values within these
//! (`ConnConfig::max_chunks`, `ConnConfig::limits`, the inline sizes); the tables are
//! sized by them once, at connection setup, so nothing grows on the hot path.

/// Most DDP-eligible arguments (Read chunks at non-zero positions) one call can move:
/// the requester's table per call.
pub const MAX_DDP_ARGS: usize = 4;

/// Most Write chunks one call can offer: the requester's table per call.
pub const MAX_WRITE_SINKS: usize = 4;

/// Most Write chunks a responder handles in one call: its table per call. The limit
/// it enforces is `ConnConfig::max_chunks` (at most this).
pub const MAX_WRITE_CHUNKS: usize = 8;

/// Most Read chunks at non-zero positions a responder handles in one call: its table
/// per call. The limit it enforces is `ConnConfig::max_chunks`.
pub const MAX_DDP_ITEMS: usize = 8;

/// Memory registrations one call may need: a Position-Zero Read chunk, its DDP
/// arguments, its write sinks and a Reply chunk.
pub const MAX_MRS_PER_CALL: usize = 1 + MAX_DDP_ARGS + MAX_WRITE_SINKS + 1;

/// Default of `ConnConfig::max_chunks`, the same for both roles: the requester's
/// tables hold this many DDP arguments and write sinks per call.
pub const DEFAULT_MAX_CHUNKS: u32 = 4;

// The requester cannot offer more than its tables hold, so the shared default is
// exactly their size; the responder's tables are larger and hold any valid setting.
const _: () = assert!(DEFAULT_MAX_CHUNKS as usize == MAX_DDP_ARGS);
const _: () = assert!(DEFAULT_MAX_CHUNKS as usize == MAX_WRITE_SINKS);
const _: () = assert!(MAX_WRITE_CHUNKS >= MAX_WRITE_SINKS && MAX_DDP_ITEMS >= MAX_DDP_ARGS);

pub use crate::wire::header::Limits as HeaderLimits;
pub use crate::wire::private_data::{MAX_INLINE_SIZE, MIN_INLINE_SIZE};

/// Most replies one responder connection exposes in responder-provided Read chunks at
/// once (draft-cel-nfsv4-rpcrdma-reliable-reply): its reply fast-registration slots, and
/// the receives it keeps beyond the credits for their RDMA_DONEs. Such replies are the
/// rare ones and a device's keys are shared by all its connections, so a few suffice;
/// more wait for a DONE or a timeout.
pub const MAX_EXPOSED_REPLIES: u32 = 8;
