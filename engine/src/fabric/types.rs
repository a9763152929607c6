//! Plain data crossing the fabric interface: scatter-gather entries, work requests,
//! completions, queue sizes and queue-pair states.
//!
//! The shapes follow verbs (`ibv_sge`, `ibv_send_wr`, `ibv_recv_wr`, `ibv_wc`,
//! `ibv_qp_cap`) so an rdma-core provider converts them field by field. Work requests
//! borrow their scatter-gather lists, so posting never allocates.

use core::fmt;
use core::time::Duration;

use super::cm::PrivateDataLimits;
use super::mr::Access;

/// One scatter-gather entry: `length` bytes at virtual address `addr`, inside the memory
/// registration whose local key is `lkey` (`ibv_sge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    /// Virtual address of the first byte, in the registering process.
    pub addr: u64,
    /// Number of bytes.
    pub length: u32,
    /// Local key of a registration covering `[addr, addr + length)`.
    pub lkey: u32,
}

impl Sge {
    /// An entry covering `length` bytes at `addr` under `lkey`.
    #[inline]
    pub const fn new(addr: u64, length: u32, lkey: u32) -> Self {
        Sge { addr, length, lkey }
    }
}

/// Remote memory named by a peer: a virtual address in the peer's registration and its
/// remote key, as advertised in an RPC-over-RDMA chunk (RFC 8166 §3.4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RemoteAddr {
    /// Virtual address of the first byte, in the peer's address space.
    pub addr: u64,
    /// The peer's remote key.
    pub rkey: u32,
}

/// Flags on a send-queue work request (`ibv_send_flags`).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct SendFlags(u8);

impl SendFlags {
    /// No flags: an unsignaled request.
    pub const NONE: SendFlags = SendFlags(0);
    /// Report a completion on success. Unsignaled requests are only reported if they
    /// fail; their queue slots are released when a later signaled request completes.
    pub const SIGNALED: SendFlags = SendFlags(1);
    /// Do not start this request until earlier RDMA Reads have completed. Providers that
    /// always execute in order (shm) accept it and need do nothing.
    pub const FENCE: SendFlags = SendFlags(2);

    /// True when every flag in `other` is set in `self`.
    #[inline]
    pub const fn contains(self, other: SendFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The raw bits.
    #[inline]
    pub const fn bits(self) -> u8 {
        self.0
    }
}

impl core::ops::BitOr for SendFlags {
    type Output = SendFlags;
    #[inline]
    fn bitor(self, rhs: SendFlags) -> SendFlags {
        SendFlags(self.0 | rhs.0)
    }
}

impl fmt::Debug for SendFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut l = f.debug_set();
        if self.contains(SendFlags::SIGNALED) {
            l.entry(&"SIGNALED");
        }
        if self.contains(SendFlags::FENCE) {
            l.entry(&"FENCE");
        }
        l.finish()
    }
}

/// What a send-queue work request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// Send the gathered bytes into the peer's next posted receive.
    Send,
    /// Send, and have the peer invalidate its registration `rkey` before it reports the
    /// receive (RFC 8166 §3.4.6 Remote Invalidation).
    SendWithInvalidate {
        /// The peer's key to invalidate.
        rkey: u32,
    },
    /// Write the gathered bytes to the peer's memory at `remote`.
    RdmaWrite {
        /// Where the bytes go.
        remote: RemoteAddr,
    },
    /// Read from the peer's memory at `remote` into the scatter list (which needs
    /// [`Access::LOCAL_WRITE`]).
    RdmaRead {
        /// Where the bytes come from.
        remote: RemoteAddr,
    },
    /// Fast registration (verbs `IB_WR_REG_MR`, or a type-2 memory-window bind): make the
    /// fast-registration slot named by `key` cover `region` with `access`, under `key`.
    ///
    /// `key` must carry the slot's index and a generation byte different from the slot's
    /// previous key (see [`crate::fabric::mr::next_key`]); `region` must lie inside a
    /// live registration of the same protection domain. The scatter list must be empty.
    FastReg {
        /// The new key (index of the slot, fresh generation byte).
        key: u32,
        /// The memory to cover, named through an existing local registration.
        region: Sge,
        /// Access rights the new key grants.
        access: Access,
    },
    /// Local invalidation (verbs `IB_WR_LOCAL_INV`) of fast-registration key `key`. The
    /// scatter list must be empty.
    LocalInvalidate {
        /// The key to invalidate.
        key: u32,
    },
}

/// A send-queue work request (`ibv_send_wr`). Chains are slices of these, posted with
/// one doorbell.
#[derive(Debug, Clone, Copy)]
pub struct SendWr<'a> {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// Gather list (Send, Write) or scatter list (Read); empty for FastReg and
    /// LocalInvalidate.
    pub sgl: &'a [Sge],
    /// Signaling and fencing.
    pub flags: SendFlags,
}

impl<'a> SendWr<'a> {
    /// A signaled Send of `sgl`.
    pub const fn send(wr_id: u64, sgl: &'a [Sge]) -> Self {
        SendWr {
            wr_id,
            op: SendOp::Send,
            sgl,
            flags: SendFlags::SIGNALED,
        }
    }

    /// A signaled RDMA Write of `sgl` to `remote`.
    pub const fn write(wr_id: u64, sgl: &'a [Sge], remote: RemoteAddr) -> Self {
        SendWr {
            wr_id,
            op: SendOp::RdmaWrite { remote },
            sgl,
            flags: SendFlags::SIGNALED,
        }
    }

    /// A signaled RDMA Read from `remote` into `sgl`.
    pub const fn read(wr_id: u64, sgl: &'a [Sge], remote: RemoteAddr) -> Self {
        SendWr {
            wr_id,
            op: SendOp::RdmaRead { remote },
            sgl,
            flags: SendFlags::SIGNALED,
        }
    }

    /// The same request with `flags` instead.
    pub const fn with_flags(mut self, flags: SendFlags) -> Self {
        self.flags = flags;
        self
    }
}

/// A receive-queue work request (`ibv_recv_wr`).
#[derive(Debug, Clone, Copy)]
pub struct RecvWr<'a> {
    /// Caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Scatter list; every entry needs [`Access::LOCAL_WRITE`].
    pub sgl: &'a [Sge],
}

/// Which operation a completion reports (`ibv_wc_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcOpcode {
    /// A Send or Send With Invalidate left this side.
    Send,
    /// An RDMA Write.
    RdmaWrite,
    /// An RDMA Read.
    RdmaRead,
    /// A fast registration.
    FastReg,
    /// A local invalidation.
    LocalInvalidate,
    /// A receive was consumed by an incoming Send.
    Recv,
}

/// Outcome of a work request (`ibv_wc_status`). Any status but `Success` moves the
/// queue pair to the error state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcStatus {
    /// The request completed.
    Success,
    /// An incoming Send was longer than the receive's scatter list (receiver side).
    LocalLengthError,
    /// An internal consistency error in the local queue pair.
    LocalQpOperationError,
    /// A local scatter-gather entry named an invalid key, lacked access rights, or fell
    /// outside its registration.
    LocalProtectionError,
    /// The queue pair was in the error state: the request was not (fully) executed.
    WrFlushed,
    /// A fast registration failed (bad slot, stale generation, bad region).
    MemoryBindError,
    /// The peer's response could not be understood.
    BadResponse,
    /// A remote request hit a local protection fault (receiver of a Send With Invalidate
    /// naming a key it cannot invalidate).
    LocalAccessError,
    /// The peer rejected the request as invalid (e.g. the Send was longer than its
    /// receive buffer).
    RemoteInvalidRequest,
    /// The peer's key check failed: unknown, invalidated, wrong protection domain,
    /// insufficient access, or out of bounds.
    RemoteAccessError,
    /// The peer could not complete the request for a reason of its own.
    RemoteOperationError,
    /// The transport gave up retrying (no response from the peer).
    RetryExceeded,
    /// The peer had no receive posted for a Send, for longer than the retry budget.
    RnrRetryExceeded,
    /// The device failed.
    FatalError,
    /// An error no other status describes.
    GeneralError,
}

impl WcStatus {
    /// True for [`WcStatus::Success`].
    #[inline]
    pub const fn is_success(self) -> bool {
        matches!(self, WcStatus::Success)
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            WcStatus::Success => "success",
            WcStatus::LocalLengthError => "local length error",
            WcStatus::LocalQpOperationError => "local QP operation error",
            WcStatus::LocalProtectionError => "local protection error",
            WcStatus::WrFlushed => "work request flushed",
            WcStatus::MemoryBindError => "memory bind error",
            WcStatus::BadResponse => "bad response",
            WcStatus::LocalAccessError => "local access error",
            WcStatus::RemoteInvalidRequest => "remote invalid request",
            WcStatus::RemoteAccessError => "remote access error",
            WcStatus::RemoteOperationError => "remote operation error",
            WcStatus::RetryExceeded => "transport retry counter exceeded",
            WcStatus::RnrRetryExceeded => "RNR retry counter exceeded",
            WcStatus::FatalError => "fatal error",
            WcStatus::GeneralError => "general error",
        };
        f.write_str(s)
    }
}

/// One completion (`ibv_wc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The work request's `wr_id`.
    pub wr_id: u64,
    /// What completed.
    pub opcode: WcOpcode,
    /// How it ended.
    pub status: WcStatus,
    /// Bytes received (receives), or the request's total length (send queue).
    pub byte_len: u32,
    /// The queue pair the request belonged to (CQs may be shared).
    pub qp_num: u32,
    /// The local key the peer invalidated with Send With Invalidate (receives only).
    pub invalidated_rkey: Option<u32>,
}

impl Completion {
    /// A placeholder for initialising completion arrays.
    pub const EMPTY: Completion = Completion {
        wr_id: 0,
        opcode: WcOpcode::Send,
        status: WcStatus::GeneralError,
        byte_len: 0,
        qp_num: 0,
        invalidated_rkey: None,
    };
}

impl Default for Completion {
    fn default() -> Self {
        Completion::EMPTY
    }
}

/// Queue-pair states (verbs `ibv_qp_state`, plus the connection manager's end state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum QpState {
    /// Created; receives may be posted, sends may not.
    Init,
    /// Accepted: the peer's requests are executed, but this side may not send until the
    /// connection is established.
    ReadyToReceive,
    /// Connected: both directions work.
    ReadyToSend,
    /// A fatal error happened: every outstanding and every newly posted request
    /// completes as [`WcStatus::WrFlushed`].
    Error,
    /// The connection is gone; as `Error`, for good.
    Disconnected,
}

impl QpState {
    /// True in `Error` and `Disconnected`.
    #[inline]
    pub const fn is_error(self) -> bool {
        matches!(self, QpState::Error | QpState::Disconnected)
    }
}

/// Who is at the other end of a connection, as the provider knows it: what an upper layer
/// keys per-client state on (a duplicate request cache keys on the client's address, as
/// Linux nfsd does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum PeerAddr {
    /// Not known: not connected yet, or a provider that cannot tell (sim).
    #[default]
    Unknown,
    /// An IP endpoint: the TCP peer (siw) or the RDMA CM's destination address (verbs).
    Ip(std::net::SocketAddr),
    /// A local process, from the connection socket's `SO_PEERCRED` (shm).
    Local {
        /// The peer's process id (as seen from this process's pid namespace).
        pid: u32,
        /// The peer's user id.
        uid: u32,
    },
}

/// Queue sizes of a queue pair (`ibv_qp_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send-queue depth: work requests outstanding (posted, completion not yet reported
    /// or slot not yet released by a later signaled completion).
    pub max_send_wr: u32,
    /// Receive-queue depth.
    pub max_recv_wr: u32,
    /// Most scatter-gather entries in one send-queue request.
    pub max_send_sge: u32,
    /// Most scatter-gather entries in one receive.
    pub max_recv_sge: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 4,
            max_recv_sge: 4,
        }
    }
}

/// Most receives a software provider's shared receive queue holds (shm, siw, sim):
/// beyond a queue pair's depth, since one queue serves many connections.
pub const SOFTWARE_MAX_SRQ_WR: u32 = 1 << 16;

/// What a shared receive queue is created with (`ibv_srq_init_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqConfig {
    /// Most receives posted and not yet taken.
    pub max_wr: u32,
    /// Most scatter-gather entries in one receive.
    pub max_sge: u32,
}

impl Default for SrqConfig {
    fn default() -> Self {
        SrqConfig {
            max_wr: 256,
            max_sge: 1,
        }
    }
}

/// RNR retry count meaning "retry for ever" (as in verbs).
pub const RNR_RETRY_INFINITE: u8 = 7;

/// Everything a queue pair is created with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpConfig {
    /// Queue sizes.
    pub caps: QpCaps,
    /// How many times a Send from this side is retried after the peer answered
    /// "receiver not ready" (0..=7; [`RNR_RETRY_INFINITE`] retries for ever). RPC-over-RDMA
    /// uses credits so that an RNR never happens; the default is 0, so one is fatal.
    pub rnr_retry: u8,
    /// How long this side tells a sender to wait before retrying a Send that found no
    /// receive posted (verbs `min_rnr_timer`; providers round to what they support).
    pub min_rnr_timer: Duration,
}

impl Default for QpConfig {
    fn default() -> Self {
        QpConfig {
            caps: QpCaps::default(),
            rnr_retry: 0,
            min_rnr_timer: Duration::from_millis(1),
        }
    }
}

/// Limits of a device (`ibv_device_attr`, abridged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Largest queue depth.
    pub max_qp_wr: u32,
    /// Most scatter-gather entries per request.
    pub max_sge: u32,
    /// Most memory registrations (including fast-registration slots).
    pub max_mr: u32,
    /// Largest completion-queue depth.
    pub max_cq_depth: u32,
    /// Largest single message or RDMA transfer in bytes.
    pub max_msg_size: u32,
    /// Most private-data bytes in each connection message, and how a rejection's
    /// private data arrives.
    pub private_data: PrivateDataLimits,
    /// Whether a Send that finds no posted receive is retried (InfiniBand and RoCE:
    /// receiver-not-ready NAKs, `QpConfig::rnr_retry` times). iWARP has no such retry:
    /// the Send fails at once with [`WcStatus::RnrRetryExceeded`] and the connection ends.
    pub rnr_retry: bool,
    /// Whether `alloc_fast_mr` and FastReg/LocalInvalidate work requests are available
    /// (verbs: type-2 memory windows). Without them the engine registers chunk memory
    /// persistently (`Registration::Persistent`).
    pub fast_reg: bool,
    /// Whether a Send or RDMA Write completes as soon as it has been transmitted, before
    /// the peer has placed it (kernel iWARP devices: RFC 5040 has no acknowledgement a
    /// requester could wait for). Then a fault at the peer (no receive posted, a Send
    /// longer than the receive, a bad remote key, a key it cannot invalidate) does not
    /// show on the request's completion, which may be [`WcStatus::Success`], or
    /// [`WcStatus::WrFlushed`] when the peer's Terminate overtakes it. A Read faulting
    /// at the peer completes with [`WcStatus::RemoteAccessError`] or `WrFlushed`, and
    /// since the peer answers a Read only when it gets to it, a Send posted behind that
    /// Read may still be delivered. An unsignaled request that fails at the peer may not
    /// be reported at all (kernel siw flushes outstanding Reads without completions):
    /// signal the requests whose outcome matters. The peer reports the fault and
    /// terminates the connection; both queue pairs go to error and later requests flush.
    ///
    /// What a user can rely on either way: a fault ends the connection on both sides,
    /// and no byte is placed outside the rights a key grants. When false (shm, sim, the
    /// userspace siw provider, which waits for a confirmation Read, and InfiniBand or
    /// RoCE), the requester's completion carries the peer's verdict.
    pub send_completes_on_transmit: bool,
    /// Whether faults are reported with exactly the status documented for them on
    /// [`WcStatus`] (shm, sim, userspace siw). Kernel verbs devices report some faults
    /// with another status; when this is false, a user must accept, for each fault:
    ///
    /// | documented status                   | also reported as                                  |
    /// |-------------------------------------|---------------------------------------------------|
    /// | `LocalProtectionError` (bad lkey)   | `LocalQpOperationError` (rxe, siw); `GeneralError` (siw: a receive into memory without local write) |
    /// | `LocalLengthError` (Send too long)  | `LocalQpOperationError` (rxe)                     |
    /// | `RemoteInvalidRequest` (at sender)  | `RemoteOperationError` (rxe)                      |
    /// | `LocalAccessError` (receiver of a Send With Invalidate it cannot honour) | `RemoteInvalidRequest`, `LocalQpOperationError` |
    /// | `RemoteAccessError` (sender of that Send With Invalidate) | `Success`: the device acknowledges the Send before the receiver checks the key (rxe) |
    /// | `RemoteAccessError` (RDMA Write or Read the peer refuses) | `LocalQpOperationError`: the request was still being transmitted when the peer's Terminate arrived (siw) |
    ///
    /// Every one of these is still an error at the side that detected the fault (except
    /// the last row, whose receiver fails), and the connection still ends on both sides.
    pub exact_error_statuses: bool,
    /// Whether remote invalidation (Send With Invalidate) checks the named key whole: a
    /// key naming a live registration's index with another generation byte (the low 8
    /// bits, see [`crate::fabric::mr::next_key`]) is refused like an unknown key. Kernel
    /// siw (Linux 6.1) looks it up by index alone and invalidates that registration.
    /// Where this is false, a consumer must not let a peer hold a stale key to a reused
    /// registration index: the peer could invalidate the new registration.
    pub invalidate_checks_generation: bool,
    /// Whether an RDMA Read is refused when the target registration lacks remote-read
    /// access. Kernel siw (Linux 6.1) serves it from any registration of the queue
    /// pair's protection domain the key names. Where this is false, withholding
    /// [`crate::fabric::Access::REMOTE_READ`] does not protect memory: keep memory a
    /// peer must not read out of every registration whose key it holds.
    pub read_checks_access: bool,
    /// Whether a receive completing a peer's Send With Invalidate names the key it
    /// invalidated ([`Completion::invalidated_rkey`]). Kernel siw (Linux 6.1) invalidates
    /// the key but tells only kernel consumers: the completion it writes to a userspace
    /// completion queue carries neither `IBV_WC_WITH_INV` nor the key, so there the
    /// receive completes [`WcStatus::Success`] with `invalidated_rkey: None`. Where this
    /// is false, a consumer must not treat a missing report as "the peer invalidated
    /// nothing": it invalidates its keys locally (invalidating an already invalid key
    /// succeeds) before reusing their memory.
    pub reports_remote_invalidation: bool,
    /// Whether the pages of registered memory may be given back to the operating
    /// system while registered (`rpcrdma_pools::Pool::release_free`), as a server does
    /// for its idle connections' free buffers. True where the provider moves data
    /// through the process's own mapping (shm, siw, sim): a released page reads as zero
    /// and is faulted in again when next used. False on verbs: a registration pins the
    /// pages the device writes to, and a released page would leave the device writing
    /// to memory the process no longer sees.
    pub release_registered: bool,
    /// Whether the peer of a connection can map the whole of every registration in its
    /// connection's protection domain, whatever keys it was given (shm: the peer
    /// process maps the registered arenas and its requests run in this process's
    /// poll against them). Where true, memory shared by several connections must never
    /// be registered in their domains: a poll group keeps each connection's pools its
    /// own there (`GroupOptions::group_pools`).
    pub peer_maps_registrations: bool,
    /// Whether the peer's Sends and RDMA Writes are placed into this side's memory only
    /// while this side polls its completion queue, and that poll (or, past a full
    /// batch, the next ones) reports them (shm: the target executes its peer's requests
    /// in its own poll). Then memory a request could land in, such as a posted receive,
    /// is untouched between polls of a connection that reported nothing, and a server
    /// may release the pages of an idle connection's posted receives too. False where
    /// placement runs elsewhere (siw's driver thread, a verbs device, sim: either
    /// side's poll) or completions can be held back (`Faulty`).
    pub places_in_poll: bool,
    /// Most receives one shared receive queue holds
    /// ([`ProtectionDomain::create_srq`](crate::fabric::ProtectionDomain::create_srq)); 0
    /// where the device has none (a verbs device reporting `max_srq` 0), and then a
    /// consumer posts receives per queue pair.
    pub max_srq_wr: u32,
    /// Whether the device checks a shared receive queue's buffers against the
    /// protection domain of the queue pair a message arrived on rather than the queue's
    /// own (kernel rxe and siw: the lab saw the first call on such a queue end its
    /// connection, which is what a verbs consumer must assume of any device). Then
    /// queue pairs of different domains cannot share a queue, and a poll group, whose
    /// connections each have their own domain, posts receives per connection instead
    /// (`engine/DESIGN.md`, "Pools per poll group"). False on the software providers,
    /// which check against the queue's domain.
    pub srq_checks_qp_domain: bool,
    /// Whether an RDMA Read costs a round trip to the peer (and a Write a trip the
    /// Send after it waits behind). False on shm, where the target's poller does a Read
    /// as one copy in its own poll, with no message back and forth. Send-based DDP
    /// (draft-dnoveck-rpcrdma-rtrext §7) saves exactly that round trip and moves the
    /// bulk through the Send path instead, so where this is false a requester moves
    /// bulk by RDMA unless `ConnConfig::send_ddp_max` says otherwise
    /// (`engine/DESIGN.md`, "Shape choice").
    pub rdma_round_trip: bool,
}

impl DeviceCaps {
    /// The capabilities of a software provider that holds every guarantee strictly, with
    /// the limits given: fast registration, completions that carry the peer's verdict,
    /// exact error statuses, whole-key remote invalidation, access-checked RDMA Reads and
    /// reported remote invalidation, and registered memory whose free pages may be
    /// released. A Send without a posted receive is retried, as on InfiniBand; an iWARP
    /// provider overrides `rnr_retry`.
    pub const fn strict_software(
        max_qp_wr: u32,
        max_sge: u32,
        max_mr: u32,
        max_cq_depth: u32,
        max_msg_size: u32,
        private_data: PrivateDataLimits,
    ) -> DeviceCaps {
        DeviceCaps {
            max_qp_wr,
            max_sge,
            max_mr,
            max_cq_depth,
            max_msg_size,
            private_data,
            rnr_retry: true,
            fast_reg: true,
            send_completes_on_transmit: false,
            exact_error_statuses: true,
            invalidate_checks_generation: true,
            read_checks_access: true,
            reports_remote_invalidation: true,
            release_registered: true,
            peer_maps_registrations: false,
            places_in_poll: false,
            max_srq_wr: SOFTWARE_MAX_SRQ_WR,
            srq_checks_qp_domain: false,
            rdma_round_trip: true,
        }
    }
}
