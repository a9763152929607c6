//! Errors of the fabric interface. Data-path faults are completions with a
//! [`WcStatus`](super::WcStatus); these are the errors returned synchronously: setup
//! failures ([`FabricError`]) and refused posts ([`PostError`]).

use std::io;

use super::cm::ConnId;
use super::mr::Access;
use super::types::QpState;

/// Why a setup call (registration, queue creation, connection management) failed.
#[derive(Debug, thiserror::Error)]
pub enum FabricError {
    /// The memory cannot be registered with this provider (shm: the arena is not
    /// shareable, so the peer could not map it).
    #[error("memory is not registrable with this provider (shm registers only shareable arenas)")]
    NotShareable,
    /// The range does not lie inside the arena.
    #[error("range {offset}+{len} lies outside the {arena_len}-byte arena")]
    OutOfRange {
        /// Requested offset.
        offset: usize,
        /// Requested length.
        len: usize,
        /// Arena length.
        arena_len: usize,
    },
    /// A registration of zero bytes, or longer than the device allows.
    #[error("registration length {0} is not allowed")]
    BadLength(usize),
    /// The access combination is invalid (remote write without local write).
    #[error("invalid access flags {0:?} (remote write needs local write)")]
    InvalidAccess(Access),
    /// A fixed-size device table is full.
    #[error("no free {what} (limit {max})")]
    Exhausted {
        /// Which table.
        what: &'static str,
        /// Its capacity.
        max: usize,
    },
    /// A queue size or SGE count is zero or above the device limit.
    #[error("{what} = {requested} is outside 1..={max}")]
    InvalidCaps {
        /// Which capability.
        what: &'static str,
        /// Requested value.
        requested: u32,
        /// Device limit.
        max: u32,
    },
    /// Attaching the queue pair would let its completions overrun the completion queue.
    #[error(
        "completion queue of depth {depth} cannot hold the {needed} entries its queues may produce"
    )]
    CqTooSmall {
        /// Entries needed by every queue attached to the CQ.
        needed: u64,
        /// The CQ's depth.
        depth: u32,
    },
    /// Private data longer than the provider carries.
    #[error("{len} bytes of private data exceed the {max}-byte limit")]
    PrivateDataTooLong {
        /// Bytes given.
        len: usize,
        /// Bytes allowed.
        max: usize,
    },
    /// The address cannot be used (e.g. too long for a socket address).
    #[error("bad address: {0}")]
    BadAddress(&'static str),
    /// The objects belong to different devices.
    #[error("objects belong to different devices")]
    WrongDevice,
    /// The connection id is unknown or already closed.
    #[error("unknown or closed connection {0}")]
    UnknownConn(ConnId),
    /// The queue pair is not in a state that allows the call.
    #[error("not allowed in queue-pair state {0:?}")]
    InvalidState(QpState),
    /// The device lacks the feature (a verbs device reporting `max_srq` 0 has no
    /// shared receive queues).
    #[error("not supported by this device: {0}")]
    Unsupported(&'static str),
    /// A queue pair names a shared receive queue of another protection domain's device,
    /// or a receive completion queue other than the one the shared queue was created
    /// for.
    #[error("shared receive queue mismatch: {0}")]
    SrqMismatch(&'static str),
    /// The peer sent something that does not follow the provider's protocol.
    #[error("peer protocol violation: {0}")]
    Protocol(&'static str),
    /// A registration would pin more memory than the process may lock
    /// (`RLIMIT_MEMLOCK`, `ulimit -l`): verbs devices pin every registered page, and the
    /// kernel refuses with ENOMEM past the limit.
    #[error(
        "cannot register {len} bytes: the device pins registered memory and the \
         locked-memory limit RLIMIT_MEMLOCK is {} KiB (`ulimit -l`), too small for \
         this process's pools; raise it (`ulimit -l unlimited`, LimitMEMLOCK=infinity \
         for a systemd service, or memlock in /etc/security/limits.conf) or shrink \
         the pools",
        .limit / 1024
    )]
    LockedMemoryLimit {
        /// Bytes the registration asked to pin.
        len: usize,
        /// The soft limit in bytes.
        limit: u64,
    },
    /// An operating-system call failed.
    #[error("{op} failed: {err}")]
    Os {
        /// What was being done.
        op: &'static str,
        /// The error.
        #[source]
        err: io::Error,
    },
}

impl FabricError {
    /// An [`FabricError::Os`] from the current `errno`.
    pub fn last_os(op: &'static str) -> FabricError {
        FabricError::Os {
            op,
            err: io::Error::last_os_error(),
        }
    }
}

/// Why a work request was refused at post time (verbs' `ENOMEM`/`EINVAL` with `bad_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PostErrorKind {
    /// The queue already holds its depth of outstanding requests.
    #[error("queue full ({depth} outstanding requests)")]
    QueueFull {
        /// The queue depth.
        depth: u32,
    },
    /// More scatter-gather entries than the queue pair was created for.
    #[error("{given} scatter-gather entries, at most {max}")]
    TooManySge {
        /// Entries given.
        given: usize,
        /// The queue pair's limit.
        max: u32,
    },
    /// The total length exceeds the device's message size.
    #[error("{len} bytes exceed {max}")]
    TooLong {
        /// Bytes requested.
        len: u64,
        /// The limit.
        max: u32,
    },
    /// The request is malformed (e.g. a FastReg with a scatter list).
    #[error("malformed: {0}")]
    Malformed(&'static str),
    /// The queue pair's state does not allow this queue to be posted to.
    #[error("queue pair is in state {0:?}")]
    InvalidState(QpState),
}

/// A refused post. As with verbs' `bad_wr`, the `posted` requests before the refused
/// one were posted (and will complete); the refused one and the rest were not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("work request {posted} refused: {kind}")]
pub struct PostError {
    /// Requests of the chain that were posted.
    pub posted: usize,
    /// Why request number `posted` was refused.
    pub kind: PostErrorKind,
}
