//! Errors of the fabric interface. Data-path faults are completions with a
//! [`WcStatus`](super::WcStatus); these are the errors returned synchronously: setup
//! failures ([`FabricError`]) and refused posts ([`PostError`]).

use core::fmt;
use std::io;

use super::cm::ConnId;
use super::mr::Access;
use super::types::QpState;

/// Why a setup call (registration, queue creation, connection management) failed.
#[derive(Debug)]
pub enum FabricError {
    /// The memory cannot be registered with this provider (shm: the arena is not
    /// shareable, so the peer could not map it).
    NotShareable,
    /// The range does not lie inside the arena.
    OutOfRange {
        /// Requested offset.
        offset: usize,
        /// Requested length.
        len: usize,
        /// Arena length.
        arena_len: usize,
    },
    /// A registration of zero bytes, or longer than the device allows.
    BadLength(usize),
    /// The access combination is invalid (remote write without local write).
    InvalidAccess(Access),
    /// A fixed-size device table is full.
    Exhausted {
        /// Which table.
        what: &'static str,
        /// Its capacity.
        max: usize,
    },
    /// A queue size or SGE count is zero or above the device limit.
    InvalidCaps {
        /// Which capability.
        what: &'static str,
        /// Requested value.
        requested: u32,
        /// Device limit.
        max: u32,
    },
    /// Attaching the queue pair would let its completions overrun the completion queue.
    CqTooSmall {
        /// Entries needed by every queue attached to the CQ.
        needed: u64,
        /// The CQ's depth.
        depth: u32,
    },
    /// Private data longer than the provider carries.
    PrivateDataTooLong {
        /// Bytes given.
        len: usize,
        /// Bytes allowed.
        max: usize,
    },
    /// The address cannot be used (e.g. too long for a socket address).
    BadAddress(&'static str),
    /// The objects belong to different devices.
    WrongDevice,
    /// The connection id is unknown or already closed.
    UnknownConn(ConnId),
    /// The queue pair is not in a state that allows the call.
    InvalidState(QpState),
    /// The peer sent something that does not follow the provider's protocol.
    Protocol(&'static str),
    /// A registration would pin more memory than the process may lock
    /// (`RLIMIT_MEMLOCK`, `ulimit -l`): verbs devices pin every registered page, and the
    /// kernel refuses with ENOMEM past the limit.
    LockedMemoryLimit {
        /// Bytes the registration asked to pin.
        len: usize,
        /// The soft limit in bytes.
        limit: u64,
    },
    /// An operating-system call failed.
    Os {
        /// What was being done.
        op: &'static str,
        /// The error.
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

impl fmt::Display for FabricError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FabricError::NotShareable => write!(
                f,
                "memory is not registrable with this provider (shm registers only shareable arenas)"
            ),
            FabricError::OutOfRange {
                offset,
                len,
                arena_len,
            } => write!(
                f,
                "range {offset}+{len} lies outside the {arena_len}-byte arena"
            ),
            FabricError::BadLength(l) => write!(f, "registration length {l} is not allowed"),
            FabricError::InvalidAccess(a) => {
                write!(f, "invalid access flags {a:?} (remote write needs local write)")
            }
            FabricError::Exhausted { what, max } => write!(f, "no free {what} (limit {max})"),
            FabricError::InvalidCaps {
                what,
                requested,
                max,
            } => write!(f, "{what} = {requested} is outside 1..={max}"),
            FabricError::CqTooSmall { needed, depth } => write!(
                f,
                "completion queue of depth {depth} cannot hold the {needed} entries its queues may produce"
            ),
            FabricError::PrivateDataTooLong { len, max } => {
                write!(f, "{len} bytes of private data exceed the {max}-byte limit")
            }
            FabricError::BadAddress(why) => write!(f, "bad address: {why}"),
            FabricError::WrongDevice => write!(f, "objects belong to different devices"),
            FabricError::UnknownConn(c) => write!(f, "unknown or closed connection {c}"),
            FabricError::InvalidState(s) => write!(f, "not allowed in queue-pair state {s:?}"),
            FabricError::Protocol(why) => write!(f, "peer protocol violation: {why}"),
            FabricError::LockedMemoryLimit { len, limit } => write!(
                f,
                "cannot register {len} bytes: the device pins registered memory and the \
                 locked-memory limit RLIMIT_MEMLOCK is {} KiB (`ulimit -l`), too small for \
                 this process's pools; raise it (`ulimit -l unlimited`, LimitMEMLOCK=infinity \
                 for a systemd service, or memlock in /etc/security/limits.conf) or shrink \
                 the pools",
                limit / 1024
            ),
            FabricError::Os { op, err } => write!(f, "{op} failed: {err}"),
        }
    }
}

impl std::error::Error for FabricError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FabricError::Os { err, .. } => Some(err),
            _ => None,
        }
    }
}

/// Why a work request was refused at post time (verbs' `ENOMEM`/`EINVAL` with `bad_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostErrorKind {
    /// The queue already holds its depth of outstanding requests.
    QueueFull {
        /// The queue depth.
        depth: u32,
    },
    /// More scatter-gather entries than the queue pair was created for.
    TooManySge {
        /// Entries given.
        given: usize,
        /// The queue pair's limit.
        max: u32,
    },
    /// The total length exceeds the device's message size.
    TooLong {
        /// Bytes requested.
        len: u64,
        /// The limit.
        max: u32,
    },
    /// The request is malformed (e.g. a FastReg with a scatter list).
    Malformed(&'static str),
    /// The queue pair's state does not allow this queue to be posted to.
    InvalidState(QpState),
}

/// A refused post. As with verbs' `bad_wr`, the `posted` requests before the refused
/// one were posted (and will complete); the refused one and the rest were not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostError {
    /// Requests of the chain that were posted.
    pub posted: usize,
    /// Why request number `posted` was refused.
    pub kind: PostErrorKind,
}

impl fmt::Display for PostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "work request {} refused: ", self.posted)?;
        match self.kind {
            PostErrorKind::QueueFull { depth } => {
                write!(f, "queue full ({depth} outstanding requests)")
            }
            PostErrorKind::TooManySge { given, max } => {
                write!(f, "{given} scatter-gather entries, at most {max}")
            }
            PostErrorKind::TooLong { len, max } => write!(f, "{len} bytes exceed {max}"),
            PostErrorKind::Malformed(why) => write!(f, "malformed: {why}"),
            PostErrorKind::InvalidState(s) => write!(f, "queue pair is in state {s:?}"),
        }
    }
}

impl std::error::Error for PostError {}
