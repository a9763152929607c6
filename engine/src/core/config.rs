//! Connection configuration and the sizes derived from it. Everything a connection
//! needs is sized here once, at setup; nothing on the data path grows.

use core::time::Duration;

use rpcrdma_pools::HugePages;

use crate::wire::header::Limits;
use crate::wire::private_data::{Extensions, PrivateData, SizeError, MIN_INLINE_SIZE};

pub(crate) use crate::limits::{DEFAULT_MAX_CHUNKS, MAX_EXPOSED_REPLIES, MAX_MRS_PER_CALL};

/// Receives a requester posts for reply continuation groups when extensions are on.
pub(crate) const CONT_RECV_RESERVE: u32 = 8;

/// The keepalive probe's program and version when the ULP names none (a private
/// number from RFC 5531 §8.3's local range): the probe still proves liveness through
/// the PROG_UNAVAIL reply it gets.
pub const DEFAULT_PROBE_PROGRAM: (u32, u32) = (0x2000_0001, 1);

/// Default of [`ConnConfig::credit_reclaim`]: a call that timed out has this much longer
/// to be answered (its credit returned) before the connection is declared broken. Long
/// enough that only a responder which dropped the call, or stalled, reaches it.
pub const DEFAULT_CREDIT_RECLAIM: Duration = Duration::from_secs(30);

/// Per-thread cache size of the connection's pools: small, so buffers parked in a
/// cache are a small share of a pool.
pub(crate) const POOL_CACHE: usize = 16;

/// How a requester makes its chunk memory reachable by the responder.
///
/// The two modes trade exposure for cost:
///
/// - [`FastReg`](Registration::FastReg): every chunk gets a fresh key per RPC (a FastReg
///   work request) that dies when the call ends (the responder's Send With Invalidate,
///   or a LocalInvalidate). The peer can reach a buffer only while its call is out.
/// - [`Persistent`](Registration::Persistent): the chunk pools (send, large and
///   application pools, and arenas added with `register_arena`) are registered once
///   with remote read and write access for the connection's protection domain, and
///   segments advertise that registration's key and the buffer's address. No per-RPC
///   work requests and no device support beyond plain `reg_mr` are needed (kernel siw
///   has neither memory windows nor userspace fast registration), but **the peer can
///   read and write the whole registered chunk pool for the connection's lifetime**,
///   like Linux's old ALLPHYSICAL-style strategies: use it only with a trusted peer.
///   The requester then advertises no remote invalidation (RFC 8797 §4.1), so the
///   responder sends plain Sends. A call's buffers go back to the application only
///   once the peer is finished with them: when its reply arrived (the responder's
///   RDMA Writes precede its reply on the same queue pair), or, for a call that timed
///   out, when a late reply arrives or the connection is gone (its queue pair drained
///   in error, so no further write can land); the registration is dropped with the
///   connection. The engine never retransmits a call on a connection, so a conforming
///   responder never writes a chunk after its reply; a reply claiming chunk results for
///   no outstanding call is counted (`RequesterStats::stray_chunk_replies`) and ends
///   the connection, since its writes may have landed in a buffer another call owns.
/// - [`Auto`](Registration::Auto): `FastReg` when the device supports it
///   ([`DeviceCaps::fast_reg`](crate::fabric::DeviceCaps::fast_reg)), else `Persistent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Registration {
    /// Choose from the device's capabilities.
    #[default]
    Auto,
    /// Per-RPC keys from fast registration, invalidated when the call ends.
    FastReg,
    /// One remote-access registration of the chunk pools for the connection's life.
    Persistent,
}

/// The registration mode a connection actually uses (a resolved [`Registration`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegMode {
    /// Per-RPC fast registration.
    FastReg,
    /// Persistent remote-access registration of the chunk pools.
    Persistent,
}

impl RegMode {
    /// Short name for logs and CLI output.
    pub fn name(self) -> &'static str {
        match self {
            RegMode::FastReg => "fastreg",
            RegMode::Persistent => "persistent",
        }
    }
}

impl core::fmt::Display for RegMode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

impl Registration {
    /// The mode this choice means on a device that has fast registration or not
    /// (`DeviceCaps::fast_reg`). An explicit `FastReg` stays `FastReg` even where the
    /// device lacks it (connection setup then refuses it with
    /// [`ConfigError::FastRegUnsupported`]).
    pub fn resolve(self, device_fast_reg: bool) -> RegMode {
        match self {
            Registration::FastReg => RegMode::FastReg,
            Registration::Persistent => RegMode::Persistent,
            Registration::Auto if device_fast_reg => RegMode::FastReg,
            Registration::Auto => RegMode::Persistent,
        }
    }
}

impl core::str::FromStr for Registration {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Registration::Auto),
            "fastreg" => Ok(Registration::FastReg),
            "persistent" => Ok(Registration::Persistent),
            _ => Err(ConfigError::UnknownRegistration),
        }
    }
}

/// How one connection is set up. The defaults suit a 4 KiB-inline NFS-like workload.
#[derive(Debug, Clone)]
pub struct ConnConfig {
    /// Largest Send this side makes, advertised as the RFC 8797 Send Size (rounded down
    /// to a multiple of 1024, at least 1024).
    pub inline_send: u32,
    /// Size of each posted receive buffer, advertised as the RFC 8797 Receive Size.
    pub inline_recv: u32,
    /// Advertise (and, as a responder, use) remote invalidation (RFC 8797 §4.1).
    pub remote_invalidate: bool,
    /// Requester: call slots, the most calls ever outstanding, and the credits asked
    /// for. Responder: the most credits granted, and the receives kept posted.
    pub credits: u32,
    /// What the responder's header parser accepts.
    pub limits: Limits,
    /// Most DDP chunks in one call, counted separately for Read chunks at non-zero
    /// positions (DDP-eligible arguments) and for Write chunks (DDP-eligible results);
    /// a long call's Position-Zero Read chunk does not count. One value for both roles,
    /// default [`DEFAULT_MAX_CHUNKS`]. RPC-over-RDMA has no way to negotiate it (RFC
    /// 8166 exchanges only inline sizes and remote invalidation, RFC 8797), so both
    /// peers must be configured alike: a responder answers a call with more chunks
    /// than this with RDMA_ERROR/ERR_CHUNK (RFC 8166 §4.5.2), a requester refuses such
    /// a call at submit ([`crate::requester::SubmitRefusal::TooManyChunks`]), and it
    /// cannot offer more than its tables hold ([`crate::requester::MAX_DDP_ARGS`],
    /// [`crate::requester::MAX_WRITE_SINKS`]). At most
    /// [`crate::service::MAX_WRITE_CHUNKS`].
    pub max_chunks: u32,
    /// Size of the large buffers used for long calls, Reply chunks, and DDP data the
    /// responder pulls: the largest chunk either side handles.
    pub large_buf_size: u32,
    /// Requester: large buffers for the application (long call messages, DDP
    /// arguments, write sinks); the engine keeps one more per call slot for Reply
    /// chunks, apart, so application buffers held by waiting calls can never starve
    /// the calls ahead of them. Responder: large buffers for pulled Read chunks, Reply
    /// chunk bodies and the service's DDP results.
    pub large_bufs: u32,
    /// Number of inline-sized send buffers (call messages, headers).
    pub send_bufs: u32,
    /// Send-queue depth; 0 derives one from `credits`.
    pub sq_depth: u32,
    /// Selective signaling: at most `signal_every - 1` Sends of calls in a row go
    /// unsignaled (their slots retire with the next completion; see
    /// `core/signal.rs`). Clamped to a quarter of the send queue and to one less than the
    /// call slots (the probe's included) and the send buffers; 1 signals every request.
    pub signal_every: u32,
    /// Requester: fast-registration slots; 0 gives `credits * 4` (none are made in
    /// persistent mode).
    pub mr_slots: u32,
    /// Requester: how chunk memory is registered (see [`Registration`]).
    pub registration: Registration,
    /// Requester: calls that may wait for a credit or resources.
    pub queue_len: usize,
    /// Requester: default call timeout.
    pub call_timeout: Duration,
    /// Requester: keep one credit back for a health probe, and probe after this much
    /// silence (RFC 8267 §6.7.2). `None` disables the automatic probe (an explicit
    /// health check still works when a credit is free).
    pub keepalive: Option<Duration>,
    /// How long a probe waits for its reply before the peer is declared dead.
    pub probe_timeout: Duration,
    /// Requester: how long a call that timed out may keep its credit before the
    /// connection is declared broken (`CloseReason::CreditsLost`). RFC 8166 §3.3.1
    /// gives the requester no way to take a credit back while the responder may still
    /// hold the call, so a credit that never comes back would otherwise shrink the
    /// window for good, and once all are gone every call waits in the queue forever
    /// while the keepalive probe, on its reserved credit, keeps reporting the peer
    /// alive. Counted from the call's deadline. `None` never declares it (the old
    /// behaviour).
    pub credit_reclaim: Option<Duration>,
    /// Seed of the requester's key-tag generator (the variable bits of each
    /// fast-registration key). `None` draws one from the OS; a fixed seed makes the keys
    /// reproducible for tests, and predictable to anyone who knows it.
    pub seed: Option<u64>,
    /// Program and version the probe's NULL call names. Any RPC reply, even
    /// PROG_UNAVAIL, proves the peer alive, but like the Linux client (which sends NULL
    /// to the ULP program, e.g. NFS) set this to the program the connection serves, so
    /// the probe gets SUCCESS and the responder logs nothing unusual
    /// (`rpcrdma_ulp::binding::with_keepalive` does). The default,
    /// [`DEFAULT_PROBE_PROGRAM`], is a private number no responder is expected to serve.
    pub probe_program: (u32, u32),
    /// Hugepage policy of the pools a driver creates for the connection.
    pub hugepages: HugePages,
    /// Requester: when the connection ends, connect again (with backoff) and send every
    /// call that had no answer again, with its XID, on the new connection (RFC 8267
    /// §6.7.2: retransmission belongs on a new connection). `None`: calls in flight
    /// when a connection ends fail with `TransportError::Disconnected`.
    pub reconnect: Option<Reconnect>,
    /// Offer this engine's extensions to RPC-over-RDMA version 1 in the CM private data
    /// (today: responder-provided Read chunks with RDMA_DONE, from
    /// draft-cel-nfsv4-rpcrdma-reliable-reply). Each is used only when both peers offer
    /// it, so a version-1-only peer (the Linux kernel) sees plain version 1 either way.
    /// `false` turns every extension off.
    pub extensions: bool,
    /// Requester: when to offer a Reply chunk (the draft's §5.3.1). With
    /// [`ReplyChunks::ReadChunkWhenNegotiated`] and a peer that provides Read chunks for
    /// replies, no Reply chunk is offered and no reply size need be guessed.
    pub reply_chunks: ReplyChunks,
    /// Responder: how long a reply exposed in a responder-provided Read chunk waits for
    /// the requester's RDMA_DONE before the responder invalidates it anyway (the draft's
    /// §4.1.3); counted in `ResponderStats::done_timeouts`.
    pub done_timeout: Duration,
    /// Backward-direction credits on a connection playing both roles (RFC 8167 §4.3:
    /// each direction's credits are its own): the calls a forward responder may have
    /// outstanding to its requester, and the receives a forward requester keeps for
    /// them. Unused by a one-role connection.
    pub backchannel_credits: u32,
    /// Responder: accept bulk arguments by send-based DDP (draft-dnoveck-rpcrdma-rtrext
    /// §7): every receive is posted as a header segment of `inline_recv` octets and a
    /// DDP-targetable segment of `large_buf_size` octets from the large pool, and that
    /// structure is advertised (XCHAR_RBSTRUCT, in the accept's private data) with
    /// continuation. A requester then places a large DDP argument into the segment in
    /// one Send instead of offering a Read chunk, and the service gets the segment
    /// itself as the [`DdpItem`](crate::service::DdpItem). Needs `extensions`; ignored
    /// on shared receive queues and on a connection playing both roles.
    ///
    /// `None` decides by the device the connection is accepted on
    /// ([`ConnConfig::resolved_for_responder`]; `engine/DESIGN.md`, "Send-based DDP by
    /// default"): on where an RDMA Read costs a round trip (so requesters use the
    /// segments) and the pages of posted and free segments can be given back while the
    /// connection is idle (`DeviceCaps::rdma_round_trip` and
    /// `DeviceCaps::release_registered`: siw, sim), for a requester that offered
    /// continuation; off on shm (no requester uses them there) and on verbs (every
    /// posted segment would stay pinned: the receive depth times `large_buf_size` per
    /// connection). `None` is the default; `Some(true)` posts them on any device,
    /// `Some(false)` never.
    ///
    /// Requester: receive replies' bulk items by send-based DDP (§7.4), only with
    /// `Some(true)` (`None` is off: results never go by send-based DDP by default):
    /// receives are posted the same way and the structure is advertised in the connect
    /// request when it fits the provider's connect private data, else in a
    /// characteristics update once established. A call with one Write sink then asks,
    /// in its ROPT_XMTREQ's `optxrq_rsd`, for the reply's item to be placed into a
    /// receive segment instead of offering a Write chunk, and its outcome hands the
    /// segment back as the sink.
    pub send_ddp: Option<bool>,
    /// Requester: the largest bulk item moved by send-based DDP, a call's argument or
    /// a reply's result (by its Write sink's capacity); larger ones go by Read or Write
    /// chunk. `None` (the default) decides by what it saves (`engine/DESIGN.md`,
    /// "Shape choice"): arguments without limit where an RDMA Read costs a round trip
    /// (`DeviceCaps::rdma_round_trip`: siw, verbs, sim) and never where it does not
    /// (shm, where a Read is one copy by the target and send-based DDP measured
    /// slower); results never (a Write chunk costs no round trip either, and send-based
    /// DDP measured no faster on shm or siw).
    pub send_ddp_max: Option<u32>,
    /// Octets of each DDP-targetable receive segment when receives are posted with one
    /// ([`ConnConfig::send_ddp`]); `None` (the default): `large_buf_size`. A smaller
    /// segment lets a requester place a bulk item longer than it across the DDP
    /// segments of successive transmissions of a continuation group
    /// (draft-dnoveck-rpcrdma-rtrext §6.2's TBSN numbering), which a requester does
    /// only with its [`ConnConfig::send_ddp_max`] set (measured slower than a Read
    /// chunk on shm and siw: `engine/DESIGN.md`, "Items across segments"); by default
    /// such an item goes by Read chunk. At most `large_buf_size`; rounded down to a
    /// multiple of 64 (the advertised alignment). Segments are still drawn from the
    /// large pool, one large buffer each, so a smaller one saves no pinned memory.
    pub send_ddp_segment: Option<u32>,
}

/// When a requester offers a Reply chunk ([`ConnConfig::reply_chunks`];
/// draft-cel-nfsv4-rpcrdma-reliable-reply §5.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReplyChunks {
    /// Whenever the call's `max_reply_len` may not fit the receive threshold (RFC 8166
    /// §3.5.4): a reply never depends on the responder exposing memory.
    #[default]
    BySize,
    /// Never, when the peer negotiated responder-provided Read chunks: a reply too large
    /// for inline comes in one (a round trip more, no registration and invalidation of
    /// a Reply chunk on every call that might need one). With a peer that did not
    /// negotiate them, as [`ReplyChunks::BySize`].
    ReadChunkWhenNegotiated,
    /// Per call: as [`ReplyChunks::ReadChunkWhenNegotiated`] for calls that ask for it
    /// ([`CallRequest::prefers_read_chunk_reply`](crate::CallRequest::prefers_read_chunk_reply):
    /// the upper layer marks procedures whose reply maximum is unknown or that usually
    /// reply small, the draft's §5.3.1, through its `ProcInfo`), as
    /// [`ReplyChunks::BySize`] for the others.
    PerCall,
}

impl ReplyChunks {
    /// Whether a call leaves the Reply chunk out: the peer provides Read chunks for
    /// replies (`negotiated`) and the policy, or the call under [`ReplyChunks::PerCall`],
    /// relies on them.
    #[inline]
    pub fn omits_reply_chunk(self, negotiated: bool, call_prefers: bool) -> bool {
        negotiated
            && match self {
                ReplyChunks::BySize => false,
                ReplyChunks::ReadChunkWhenNegotiated => true,
                ReplyChunks::PerCall => call_prefers,
            }
    }
}

/// How a requester reconnects and retransmits ([`ConnConfig::reconnect`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reconnect {
    /// First wait before connecting again; doubled after each attempt that fails, up to
    /// `max_backoff`, and back to this once connected.
    pub backoff: Duration,
    /// Longest wait between attempts.
    pub max_backoff: Duration,
    /// Times one call may be sent, the first included; past it the call fails with the
    /// error of its last loss.
    pub max_sends: u32,
    /// How long after a call is first lost it may still be sent again (zero: never);
    /// past it the call fails with the error of its last loss. `None`: only `max_sends`
    /// bounds it.
    pub resend_for: Option<Duration>,
    /// The server keeps a duplicate request cache (Linux nfsd does): calls not marked
    /// idempotent are retransmitted too, since a retransmission of one it executed gets
    /// the cached reply instead of running again. `false`: they fail with
    /// `TransportError::NotRetransmitted`.
    pub server_has_drc: bool,
}

impl Default for Reconnect {
    fn default() -> Self {
        Reconnect {
            backoff: Duration::from_millis(10),
            max_backoff: Duration::from_secs(2),
            max_sends: 5,
            resend_for: Some(Duration::from_secs(60)),
            server_has_drc: false,
        }
    }
}

/// [`ConnConfig::signal_every`]'s default: every request signaled (see `core/signal.rs`
/// for why selective signaling is off by default).
pub const DEFAULT_SIGNAL_EVERY: u32 = 1;

impl Default for ConnConfig {
    fn default() -> Self {
        ConnConfig {
            inline_send: 4096,
            inline_recv: 4096,
            remote_invalidate: true,
            credits: 32,
            limits: Limits::DEFAULT,
            max_chunks: DEFAULT_MAX_CHUNKS,
            large_buf_size: 256 * 1024,
            large_bufs: 64,
            send_bufs: 256,
            sq_depth: 0,
            signal_every: DEFAULT_SIGNAL_EVERY,
            mr_slots: 0,
            registration: Registration::Auto,
            queue_len: 1024,
            call_timeout: Duration::from_secs(30),
            keepalive: None,
            probe_timeout: Duration::from_secs(5),
            credit_reclaim: Some(DEFAULT_CREDIT_RECLAIM),
            seed: None,
            probe_program: DEFAULT_PROBE_PROGRAM,
            hugepages: HugePages::Auto,
            reconnect: None,
            extensions: true,
            done_timeout: Duration::from_secs(10),
            reply_chunks: ReplyChunks::BySize,
            backchannel_credits: DEFAULT_BACKCHANNEL_CREDITS,
            send_ddp: None,
            send_ddp_max: None,
            send_ddp_segment: None,
        }
    }
}

/// Default of [`ConnConfig::backchannel_credits`]: an NFSv4.1 backchannel has one or two
/// slots (Linux nfsd and its client use one), so two calls at once is already ample.
pub const DEFAULT_BACKCHANNEL_CREDITS: u32 = 2;

/// A configuration that cannot work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// An inline size below the RFC 8166 minimum of 1024.
    #[error("inline size: {0}")]
    InlineSize(SizeError),
    /// `credits` is zero or above 65535.
    #[error("credits = {0} is outside 1..=65535")]
    Credits(u32),
    /// The large buffers are smaller than the inline buffers.
    #[error("large buffers must be at least as large as inline buffers")]
    LargeBufTooSmall,
    /// A count that must be positive is zero.
    #[error("{0} must be positive")]
    Zero(CountField),
    /// A registration mode name other than `auto`, `fastreg` or `persistent`.
    #[error("registration must be auto, fastreg or persistent")]
    UnknownRegistration,
    /// `max_chunks` above what the responder's tables hold.
    #[error("max_chunks = {0} exceeds {max}", max = crate::service::MAX_WRITE_CHUNKS)]
    MaxChunks(u32),
    /// `registration` is `FastReg` but the device has no fast registration
    /// (`DeviceCaps::fast_reg`): choose `Auto` or `Persistent` (and accept that the
    /// chunk pools are then exposed to the peer for the connection's life).
    #[error(
        "registration = fastreg, but the device has no fast registration (use auto or persistent)"
    )]
    FastRegUnsupported,
    /// A connection playing both roles with `reconnect` set: the backchannel's service
    /// lives in one connection's core and is not carried over to the next.
    #[error("reconnect is not supported on a connection that serves a backchannel")]
    ReconnectWithBackchannel,
}

/// A [`ConnConfig`] count that must be positive ([`ConfigError::Zero`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum CountField {
    /// `ConnConfig::large_bufs`.
    #[error("large_bufs")]
    LargeBufs,
    /// `ConnConfig::send_bufs`.
    #[error("send_bufs")]
    SendBufs,
}

/// Which end of the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Sends calls, receives replies.
    Requester,
    /// Receives calls, sends replies.
    Responder,
}

/// Queue and pool sizes derived from a [`ConnConfig`] for one role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    /// Send-queue depth.
    pub sq_depth: u32,
    /// Receives kept posted.
    pub rq_depth: u32,
    /// Completion-queue depth (send and receive share one CQ).
    pub cq_depth: u32,
    /// Requester: call slots (plus one for the probe). Responder: reply contexts.
    pub slots: u32,
    /// Receive-pool buffers.
    pub recv_bufs: u32,
    /// Send-pool buffers.
    pub send_bufs: u32,
    /// Large-pool buffers (the engine's own).
    pub large_bufs: u32,
    /// Large buffers for the application (requester only; 0 for a responder).
    pub app_bufs: u32,
    /// Fast-registration slots (requester).
    pub mr_slots: u32,
    /// Most gather entries in one send-queue request.
    pub max_send_sge: u32,
}

impl Sizes {
    /// The sizes of a connection playing both roles (RFC 8167): queues and pools for
    /// each direction side by side.
    pub fn both(requester: &Sizes, responder: &Sizes) -> Sizes {
        let sq_depth = requester.sq_depth + responder.sq_depth;
        let rq_depth = requester.rq_depth + responder.rq_depth;
        Sizes {
            sq_depth,
            rq_depth,
            cq_depth: sq_depth + rq_depth,
            slots: requester.slots + responder.slots,
            recv_bufs: requester.recv_bufs + responder.recv_bufs,
            send_bufs: requester.send_bufs + responder.send_bufs,
            large_bufs: requester.large_bufs + responder.large_bufs,
            app_bufs: requester.app_bufs,
            mr_slots: requester.mr_slots,
            max_send_sge: requester.max_send_sge.max(responder.max_send_sge),
        }
    }
}

impl ConnConfig {
    /// The sizes of a connection playing both roles (RFC 8167) whose forward role is
    /// `forward`: that role's sizes beside the backward direction's other role's
    /// ([`Self::backchannel`]).
    pub fn sizes_with_backchannel(&self, forward: Role) -> Sizes {
        let bc = self.backchannel();
        match forward {
            Role::Requester => {
                Sizes::both(&self.sizes(Role::Requester), &bc.sizes(Role::Responder))
            }
            Role::Responder => {
                Sizes::both(&bc.sizes(Role::Requester), &self.sizes(Role::Responder))
            }
        }
    }

    /// The configuration of the backward direction of a two-role connection (RFC
    /// 8167): this one with [`backchannel_credits`](Self::backchannel_credits) as its
    /// credits, a short queue, and nothing that belongs to the forward direction alone
    /// (keepalive, reconnect).
    pub fn backchannel(&self) -> ConnConfig {
        ConnConfig {
            credits: self.backchannel_credits.clamp(1, 65535),
            queue_len: (4 * self.backchannel_credits as usize).max(8),
            keepalive: None,
            reconnect: None,
            mr_slots: 0,
            large_bufs: 1,
            send_bufs: 1,
            ..self.clone()
        }
    }

    /// Checks the configuration.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.private_data().map_err(ConfigError::InlineSize)?;
        if self.credits == 0 || self.credits > 65535 {
            return Err(ConfigError::Credits(self.credits));
        }
        if self.large_buf_size < self.inline_send.max(self.inline_recv) {
            return Err(ConfigError::LargeBufTooSmall);
        }
        if self.large_bufs == 0 {
            return Err(ConfigError::Zero(CountField::LargeBufs));
        }
        if self.send_bufs == 0 {
            return Err(ConfigError::Zero(CountField::SendBufs));
        }
        if self.max_chunks as usize > crate::service::MAX_WRITE_CHUNKS {
            return Err(ConfigError::MaxChunks(self.max_chunks));
        }
        Ok(())
    }

    /// The RFC 8797 private data this side advertises.
    pub fn private_data(&self) -> Result<PrivateData, SizeError> {
        PrivateData::from_buffer_sizes(self.inline_send, self.inline_recv, self.remote_invalidate)
    }

    /// The transport characteristics this side offers with continuation
    /// (draft-dnoveck-rpcrdma-rtrext §8): as a responder it posts at least `credits`
    /// receives, so it accepts a request group of that many transmissions even before
    /// its first grant (DESIGN.md, "Message continuation").
    pub fn local_chars(&self) -> crate::wire::rtr::TransportChars {
        use crate::wire::private_data::{CONTINUATION_GROUP_MAX, LOCAL_CHARS};
        crate::wire::rtr::TransportChars {
            req_rx_limit: CONTINUATION_GROUP_MAX.min(self.credits.max(1)),
            ..LOCAL_CHARS
        }
    }

    /// Receives are posted with a DDP segment ([`ConnConfig::send_ddp`] on, with
    /// extensions on). `None` counts as off here: a responder's is resolved for its
    /// device first ([`resolved_for_responder`](Self::resolved_for_responder)).
    pub fn scatter_receives(&self) -> bool {
        self.send_ddp == Some(true) && self.extensions
    }

    /// Octets of the DDP segment receives are posted with
    /// ([`ConnConfig::send_ddp_segment`], at most `large_buf_size`, a multiple of 64,
    /// at least 64).
    pub fn ddp_segment_len(&self) -> u32 {
        let large = self.large_buf_size;
        let want = self.send_ddp_segment.unwrap_or(large).min(large);
        (want & !63).max(64).min(large)
    }

    /// Whether a responder posts DDP segments when [`ConnConfig::send_ddp`] is `None`,
    /// on a device with these `DeviceCaps` (`rdma_round_trip`, `release_registered`):
    /// where requesters place arguments by send-based DDP (an RDMA Read costs a round
    /// trip) and an idle connection's segments, posted or free, give their pages back
    /// (`engine/DESIGN.md`, "Send-based DDP by default").
    pub fn send_ddp_by_device(rdma_round_trip: bool, release_registered: bool) -> bool {
        rdma_round_trip && release_registered
    }

    /// This configuration as a responder uses it on a device with these `DeviceCaps`,
    /// for a requester that offered continuation (`peer_continuation`) or not:
    /// [`ConnConfig::send_ddp`] `None` becomes what the device calls for
    /// ([`send_ddp_by_device`](Self::send_ddp_by_device)) when the requester could use
    /// the segments, off for a version-1-only requester (nothing would be advertised to
    /// it, so its receives stay exactly as before). `None` when nothing changes.
    pub fn resolved_for_responder(
        &self,
        rdma_round_trip: bool,
        release_registered: bool,
        peer_continuation: bool,
    ) -> Option<ConnConfig> {
        if self.send_ddp.is_some() {
            return None;
        }
        let on = peer_continuation && Self::send_ddp_by_device(rdma_round_trip, release_registered);
        Some(ConnConfig {
            send_ddp: Some(on),
            ..self.clone()
        })
    }

    /// The extensions this side offers ([`ConnConfig::extensions`]).
    pub fn offered_extensions(&self) -> Extensions {
        if self.extensions {
            Extensions::ALL
        } else {
            Extensions::NONE
        }
    }

    /// The RFC 8797 private data a requester in `mode` advertises: persistent keys
    /// must never be invalidated by the peer, so remote invalidation is not offered.
    pub fn private_data_for(&self, mode: RegMode) -> Result<PrivateData, SizeError> {
        let mut pd = self.private_data()?;
        if mode == RegMode::Persistent {
            pd.remote_invalidate = false;
        }
        Ok(pd)
    }

    /// The inline send size actually advertised (rounded down to 1 KiB).
    pub fn advertised_send(&self) -> u32 {
        self.private_data().map_or(MIN_INLINE_SIZE, |p| p.send_size)
    }

    /// The receive size actually advertised (rounded down to 1 KiB).
    pub fn advertised_recv(&self) -> u32 {
        self.private_data().map_or(MIN_INLINE_SIZE, |p| p.recv_size)
    }

    /// Sizes for `role`.
    pub fn sizes(&self, role: Role) -> Sizes {
        let c = self.credits.max(1);
        let slack = 2 * POOL_CACHE as u32;
        match role {
            Role::Requester => {
                let slots = c + 1;
                // Room for replies to every slot, plus strays (RDMA_ERROR for a garbled
                // call, duplicates) that must not find the queue empty.
                // Plus, with extensions, the receives lent to reply continuation groups
                // (`optxrq_rsbuf`; DESIGN.md, "Message continuation").
                let rq = c
                    + 4
                    + if self.extensions {
                        CONT_RECV_RESERVE
                    } else {
                        0
                    };
                let mrs = if self.mr_slots == 0 {
                    c * 4
                } else {
                    self.mr_slots
                }
                .max(MAX_MRS_PER_CALL as u32);
                let sq = if self.sq_depth == 0 {
                    (c * 8).max(2 * MAX_MRS_PER_CALL as u32 + 2)
                } else {
                    self.sq_depth
                };
                Sizes {
                    sq_depth: sq,
                    rq_depth: rq,
                    cq_depth: sq + rq,
                    slots,
                    // Posted, plus replies the application holds, plus caches.
                    recv_bufs: rq + slots + slack,
                    // Headers, and RDMA_DONE's few when extensions are offered.
                    send_bufs: self.send_bufs.max(slots + slack + 4),
                    // Reply chunk buffers: one per slot, and as many again for replies
                    // the application still holds; with send-based DDP of replies, a
                    // segment behind every posted receive and a cache's worth more.
                    large_bufs: 2 * slots
                        + if self.scatter_receives() {
                            rq + POOL_CACHE as u32
                        } else {
                            0
                        },
                    app_bufs: self.large_bufs,
                    mr_slots: mrs,
                    // A send-based DDP call: header, payload, filler, bulk item.
                    max_send_sge: if self.extensions { 4 } else { 2 },
                }
            }
            Role::Responder => {
                // A context lives from the call's arrival to its reply's Send completion,
                // which can trail the requester's next call: two per credit.
                let contexts = 2 * c;
                let sq = if self.sq_depth == 0 {
                    (c * 8).max(256)
                } else {
                    self.sq_depth
                };
                // Responder-provided Read chunks: a few fast-registration slots expose
                // replies (one each; such replies are the rare ones, and a device's
                // keys are shared by all its connections), and as many receives again
                // are posted beyond the credits granted, for the RDMA_DONEs that answer
                // them (a DONE consumes a receive no credit accounts for: the draft's
                // §5.2.3; DESIGN.md, "Responder-provided Read chunks").
                let exposed = if self.extensions {
                    c.min(MAX_EXPOSED_REPLIES)
                } else {
                    0
                };
                let rq = c + exposed;
                Sizes {
                    sq_depth: sq,
                    rq_depth: rq,
                    cq_depth: sq + rq,
                    slots: contexts,
                    recv_bufs: rq + contexts + slack,
                    send_bufs: self.send_bufs.max(contexts + slack),
                    // Send-based DDP: a segment behind every posted receive, and room
                    // for the ones the service holds to sit in the responder's cache.
                    large_bufs: self.large_bufs
                        + if self.scatter_receives() {
                            rq + POOL_CACHE as u32
                        } else {
                            0
                        },
                    app_bufs: 0,
                    mr_slots: exposed,
                    // A send-based DDP reply: header, payload, filler, bulk item.
                    max_send_sge: if self.extensions { 4 } else { 2 },
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_advertise_4k() {
        let c = ConnConfig::default();
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.advertised_send(), 4096);
        let s = c.sizes(Role::Requester);
        assert_eq!(s.slots, 33);
        assert!(s.sq_depth >= 2 * MAX_MRS_PER_CALL as u32 + 2);
        assert_eq!(s.cq_depth, s.sq_depth + s.rq_depth);
        let r = c.sizes(Role::Responder);
        // 32 receives for the credits, 8 more for RDMA_DONE (one per reply MR slot).
        assert_eq!((r.rq_depth, r.mr_slots), (40, MAX_EXPOSED_REPLIES));
        assert_eq!(r.slots, 64);
        let plain = ConnConfig {
            extensions: false,
            ..ConnConfig::default()
        }
        .sizes(Role::Responder);
        assert_eq!((plain.rq_depth, plain.mr_slots), (32, 0));
    }

    #[test]
    fn auto_registration_follows_the_device() {
        assert_eq!(Registration::default(), Registration::Auto);
        assert_eq!(Registration::Auto.resolve(true), RegMode::FastReg);
        assert_eq!(Registration::Auto.resolve(false), RegMode::Persistent);
        // Explicit choices are kept, even one the device cannot honour.
        assert_eq!(Registration::FastReg.resolve(false), RegMode::FastReg);
        assert_eq!(Registration::Persistent.resolve(true), RegMode::Persistent);
        assert_eq!("persistent".parse(), Ok(Registration::Persistent));
        assert_eq!("fastreg".parse(), Ok(Registration::FastReg));
        assert_eq!(
            "allphysical".parse::<Registration>(),
            Err(ConfigError::UnknownRegistration)
        );
        assert_eq!(RegMode::Persistent.to_string(), "persistent");
    }

    #[test]
    fn persistent_mode_never_offers_remote_invalidation() {
        let c = ConnConfig::default();
        assert!(c.remote_invalidate);
        let fast = c.private_data_for(RegMode::FastReg).expect("valid");
        let pers = c.private_data_for(RegMode::Persistent).expect("valid");
        assert!(fast.remote_invalidate);
        assert!(!pers.remote_invalidate);
        assert_eq!(
            (pers.send_size, pers.recv_size),
            (fast.send_size, fast.recv_size)
        );
    }

    #[test]
    fn bad_configs_are_refused() {
        let c = ConnConfig {
            inline_recv: 512,
            ..ConnConfig::default()
        };
        assert!(matches!(c.validate(), Err(ConfigError::InlineSize(_))));
        let c = ConnConfig {
            credits: 0,
            ..ConnConfig::default()
        };
        assert_eq!(c.validate(), Err(ConfigError::Credits(0)));
        let c = ConnConfig {
            large_buf_size: 1024,
            ..ConnConfig::default()
        };
        assert_eq!(c.validate(), Err(ConfigError::LargeBufTooSmall));
        let c = ConnConfig {
            max_chunks: 9,
            ..ConnConfig::default()
        };
        assert_eq!(c.validate(), Err(ConfigError::MaxChunks(9)));
    }

    #[test]
    fn chunk_limit_default_is_the_same_for_both_roles() {
        let c = ConnConfig::default();
        assert_eq!(c.max_chunks, DEFAULT_MAX_CHUNKS);
        assert_eq!(c.max_chunks as usize, crate::limits::MAX_DDP_ARGS);
        assert_eq!(c.max_chunks as usize, crate::limits::MAX_WRITE_SINKS);
        let r = ConnConfig {
            max_chunks: crate::service::MAX_WRITE_CHUNKS as u32,
            ..ConnConfig::default()
        };
        assert_eq!(r.validate(), Ok(()));
    }
}
