//! The requester's embedding API: what a call declares, and what comes back.
//!
//! A call is an RPC message the application wrote into a registered buffer obtained
//! from the engine ([`CallRequest::msg`]), plus per-procedure declarations: which XDR
//! items are DDP-eligible (moved to Read chunks at their positions instead of being
//! sent inline), which registered buffers receive DDP-eligible results (Write chunks),
//! and the largest reply the procedure can produce (which decides whether a Reply chunk
//! is offered). The engine chooses the message shape: inline RDMA_MSG, or a
//! Position-Zero Read chunk with RDMA_NOMSG when the message exceeds the responder's
//! inline threshold (RFC 8166 §3.5).
//!
//! Every call gets exactly one [`Outcome`]. It gives back every buffer the call took
//! (message, DDP arguments, write sinks) and, for a reply, a zero-copy [`Reply`]: a view
//! into the receive buffer or the Reply chunk buffer that returns to its pool when
//! dropped. Write-sink results are in place: each sink comes back with its length set
//! to the octets the responder wrote.

use core::fmt;
use core::time::Duration;

use crate::core::fixed::FixedVec;
use crate::core::regbuf::RegBuf;
use crate::service::Padding;
use crate::wire::header::RdmaError;

pub(crate) use crate::limits::{MAX_DDP_ARGS, MAX_WRITE_SINKS};

/// A DDP-eligible argument: its data in a registered buffer and its XDR position.
#[derive(Debug)]
pub struct DdpArg {
    /// Octet offset of the item in the full XDR stream of the call (a multiple of four):
    /// where its data would start had it been inlined. Earlier DDP items count with
    /// their padded length (RFC 8166 §3.4.5).
    pub position: u32,
    /// The item's bytes (the buffer's valid bytes), without roundup.
    pub data: RegBuf,
}

/// The DDP arguments of a call.
pub type DdpArgs = FixedVec<DdpArg, MAX_DDP_ARGS>;

/// The write sinks of a call.
pub type WriteSinks = FixedVec<RegBuf, MAX_WRITE_SINKS>;

/// One RPC call to send.
#[derive(Debug)]
pub struct CallRequest {
    /// The RPC call message (header and arguments, without the DDP arguments' bytes),
    /// in a registered buffer; its valid bytes are sent. The first four octets are the
    /// XID slot: the engine writes the call's XID there (see [`xid`](Self::xid)).
    pub msg: RegBuf,
    /// The XID, when the upper layer chooses it (an NFS client keeps its own, which the
    /// server's duplicate request cache keys on). `None`: the engine assigns one that
    /// also names the call's slot, the fastest path. A chosen XID must not be carried
    /// by another call in flight on the connection (one sent whose reply has not come:
    /// after a timeout, until its late reply or the connection's end), else
    /// the call is refused with [`SubmitRefusal::DuplicateXid`]; retransmitting a call
    /// belongs on a new connection (RFC 8166 §3.5.5 and RFC 8267 §6.7.2: the transport
    /// is reliable).
    pub xid: Option<u32>,
    /// DDP-eligible arguments, in position order.
    pub ddp_args: DdpArgs,
    /// Registered buffers for DDP-eligible results, in the order the results appear in
    /// the reply; each becomes one Write chunk of its whole capacity.
    pub write_sinks: WriteSinks,
    /// The largest RPC reply the procedure can produce, without the bytes that go to
    /// write sinks.
    pub max_reply_len: u32,
    /// How long to wait for the reply; `None` uses the connection's default.
    pub timeout: Option<Duration>,
    /// Running the call twice has the effect of running it once (the ULP's
    /// `ProcInfo::idempotent`). A connection that reconnects
    /// ([`ConnConfig::reconnect`](crate::ConnConfig::reconnect)) retransmits a call
    /// lost with its connection when it is idempotent or the server keeps a duplicate
    /// request cache ([`Reconnect::server_has_drc`](crate::Reconnect::server_has_drc)),
    /// and fails it with [`TransportError::NotRetransmitted`] otherwise.
    pub idempotent: bool,
    /// The reply's maximum is unknown or the reply is usually small, so under
    /// [`ReplyChunks::PerCall`](crate::ReplyChunks::PerCall) no Reply chunk is offered when
    /// the peer provides Read chunks for replies (the ULP's
    /// `ProcInfo::prefers_read_chunk_reply`; draft-cel-nfsv4-rpcrdma-reliable-reply
    /// §5.3.1). Ignored under the other policies.
    pub prefers_read_chunk_reply: bool,
    /// The DDP arguments may travel inline, padded, in RDMA_MSGP (RFC 5666 §3.9) when
    /// the peer's receive-buffer alignment is known
    /// ([`Requester::apply_peer_config`](crate::Requester::apply_peer_config)) and they
    /// fit the send threshold with their padding; a Read chunk each otherwise. The
    /// engine sets `rdma_thresh` to the shortest argument's length, so the upper layer
    /// vouches that no other opaque item in the message is that long (the peer would
    /// look for padding before it): true of an ECHO's one opaque, of NFSv3 WRITE data
    /// longer than a file handle.
    pub pad_inline_ddp: bool,
}

impl CallRequest {
    /// A call sending `msg`, expecting a reply of at most `max_reply_len` octets.
    pub fn new(msg: RegBuf, max_reply_len: u32) -> CallRequest {
        CallRequest {
            msg,
            ddp_args: DdpArgs::new(),
            write_sinks: WriteSinks::new(),
            max_reply_len,
            timeout: None,
            xid: None,
            idempotent: false,
            prefers_read_chunk_reply: false,
            pad_inline_ddp: false,
        }
    }

    /// Lets the DDP arguments travel inline, padded (see
    /// [`pad_inline_ddp`](Self::pad_inline_ddp)).
    pub fn pad_inline_ddp(mut self, yes: bool) -> Self {
        self.pad_inline_ddp = yes;
        self
    }

    /// Marks the call as one whose reply may come in a responder-provided Read chunk
    /// instead of a Reply chunk (see
    /// [`prefers_read_chunk_reply`](Self::prefers_read_chunk_reply)).
    pub fn prefer_read_chunk_reply(mut self, yes: bool) -> Self {
        self.prefers_read_chunk_reply = yes;
        self
    }

    /// Marks the call idempotent (see [`idempotent`](Self::idempotent)).
    pub fn idempotent(mut self, yes: bool) -> Self {
        self.idempotent = yes;
        self
    }

    /// Sets the XID the call carries instead of an engine-assigned one.
    pub fn with_xid(mut self, xid: u32) -> Self {
        self.xid = Some(xid);
        self
    }

    /// Adds a DDP-eligible argument at XDR `position`; the data comes back when all
    /// [`MAX_DDP_ARGS`] places are taken.
    pub fn push_ddp_arg(&mut self, position: u32, data: RegBuf) -> Result<(), RegBuf> {
        self.ddp_args
            .push(DdpArg { position, data })
            .map_err(|a| a.data)
    }

    /// Adds a write sink; it comes back when all [`MAX_WRITE_SINKS`] places are taken.
    pub fn push_write_sink(&mut self, sink: RegBuf) -> Result<(), RegBuf> {
        self.write_sinks.push(sink)
    }

    /// Sets the timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }
}

/// Why a call failed below the RPC layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// The connection ended before the reply arrived. The responder may or may not have
    /// executed the call.
    #[error("connection lost before the reply")]
    Disconnected,
    /// The responder answered this XID with RDMA_ERROR (ERR_VERS or ERR_CHUNK).
    #[error(fmt = fmt_rdma_error)]
    Rdma(RdmaError),
    /// The reply for this XID broke the protocol (e.g. it claims more bytes in a chunk
    /// than the chunk holds, or came in a Reply chunk we never offered).
    #[error("malformed reply: {0}")]
    BadReply(#[source] BadReply),
    /// The peer aborted the connection before the reply (an iWARP Terminate); this is
    /// what it said, in provider-neutral terms. As with [`Disconnected`](Self::Disconnected), the call may or may
    /// not have been executed.
    #[error("peer terminated the connection: {0}")]
    PeerAborted(crate::fabric::PeerAbort),
    /// The connection ended before the reply and the call was not sent again on the
    /// next one: it is not idempotent and the server keeps no duplicate request cache
    /// (`Reconnect::server_has_drc`), so a second execution could not be ruled out. It
    /// may or may not have been executed once.
    #[error("connection lost before the reply; not retransmitted (not idempotent, no server reply cache)")]
    NotRetransmitted,
    /// The responder found this call's continuation group broken and said so with
    /// ROPT_XMTERR (draft-dnoveck-rpcrdma-rtrext §9.5); the call was not executed.
    #[error("responder reported a broken transmission group: {}", .0.name())]
    TransmitError(crate::wire::rtr::OptxInfo),
}

/// [`TransportError::Rdma`]'s message.
fn fmt_rdma_error(e: &RdmaError, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match e {
        RdmaError::Vers { low, high } => write!(
            f,
            "responder refused the transport version (supports {low}..={high})"
        ),
        RdmaError::Chunk => {
            f.write_str("responder could not process the call's chunks (ERR_CHUNK)")
        }
    }
}

/// How a reply's transport header broke the protocol for its call (RFC 8166 §3.4,
/// §3.5): the call fails with [`TransportError::BadReply`], the connection lives on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum BadReply {
    /// The reply's continuation group broke a rule of draft-dnoveck-rpcrdma-rtrext §4
    /// (the error the requester detected, as the draft names it).
    #[error("broken reply continuation group: {}", .0.name())]
    Continuation(crate::wire::rtr::OptxInfo),
    /// RDMA_MSGP with an alignment that is not a power of two (RFC 5666 §3.9).
    #[error("RDMA_MSGP alignment is not a power of two")]
    MsgpAlignment,
    /// A Read list in a reply that is not a responder-provided Position-Zero Read chunk
    /// this requester can pull: the extension was not negotiated (the draft's §4.1.3:
    /// RDMA_DONE is sent and the call ends), or the list is not one RDMA_NOMSG chunk at
    /// position zero of at most eight segments without a Reply chunk beside it.
    #[error("reply carries Read chunks")]
    ReadChunks,
    /// A responder-provided Read chunk larger than the requester's large buffers.
    #[error("reply's Read chunk exceeds the largest reply buffer")]
    ReadChunkTooLarge,
    /// More Write chunks than the call offered.
    #[error("reply returns more Write chunks than the call offered")]
    TooManyWriteChunks,
    /// A Write chunk with more segments than the one offered.
    #[error("reply returns a Write chunk with more segments than offered")]
    WriteChunkSegments,
    /// A Write chunk claiming more octets than it holds.
    #[error("reply claims more bytes in a Write chunk than it holds")]
    WriteChunkOverrun,
    /// RDMA_NOMSG without a Reply chunk to carry the message.
    #[error("RDMA_NOMSG reply without a Reply chunk")]
    NomsgWithoutReplyChunk,
    /// A Reply chunk the call did not offer.
    #[error("reply uses a Reply chunk the call did not offer")]
    UnofferedReplyChunk,
    /// A Reply chunk with more segments than the one offered.
    #[error("reply returns a Reply chunk with more segments than offered")]
    ReplyChunkSegments,
    /// A Reply chunk claiming more octets than it holds.
    #[error("reply claims more bytes in the Reply chunk than it holds")]
    ReplyChunkOverrun,
}

/// What an RPC reply that is not a success says (RFC 5531 §9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RpcReplyError {
    /// MSG_ACCEPTED with this `accept_stat` (not SUCCESS).
    Accepted(u32),
    /// MSG_DENIED (RPC_MISMATCH or AUTH_ERROR; the reply bytes tell which).
    Denied,
    /// The reply header does not decode as an RPC reply.
    Malformed,
}

/// The result of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallStatus {
    /// An accepted RPC reply with SUCCESS; [`Outcome::reply`] holds it.
    Success,
    /// An RPC reply that is not a success; [`Outcome::reply`] holds its bytes.
    RpcError(RpcReplyError),
    /// The call failed in the transport.
    Transport(TransportError),
    /// The call was never sent: the requester refused it (see [`SubmitRefusal`]). Only
    /// calls submitted through a mailbox, whose refusal cannot be returned directly,
    /// end this way.
    Refused(SubmitRefusal),
    /// No reply within the timeout. The call's memory registrations were invalidated
    /// before this was reported, so a late reply cannot touch the returned buffers; the
    /// call's credit stays consumed until a late reply or the connection's end.
    Timeout,
}

/// A received RPC reply: a zero-copy view into a registered buffer (the receive buffer,
/// or the Reply chunk buffer), returned to its pool when dropped.
pub struct Reply {
    pub(crate) buf: RegBuf,
    pub(crate) start: u32,
    pub(crate) len: u32,
    pub(crate) padding: Option<Padding>,
}

impl Reply {
    /// The RPC reply message (starting with the XID), without the bytes that went to
    /// write sinks.
    #[inline]
    pub fn bytes(&self) -> &[u8] {
        let start = self.start as usize;
        self.buf
            .storage()
            .get(start..start + self.len as usize)
            .unwrap_or(&[])
    }

    /// RDMA_MSGP padding the responder applied, if it sent RDMA_MSGP.
    #[inline]
    pub fn padding(&self) -> Option<Padding> {
        self.padding
    }

    /// Length of the reply message.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// True for an empty message (never for a valid reply).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reply")
            .field("len", &self.len)
            .field("padding", &self.padding)
            .finish()
    }
}

/// Everything a finished call hands back.
#[derive(Debug)]
pub struct Outcome {
    /// The tag the call was submitted with.
    pub tag: u64,
    /// The call's XID: the caller's ([`CallRequest::xid`]) or the one the engine
    /// assigned; 0 for a call that never started.
    pub xid: u32,
    /// How the call ended.
    pub status: CallStatus,
    /// The reply, for [`CallStatus::Success`] and [`CallStatus::RpcError`].
    pub reply: Option<Reply>,
    /// The call message buffer.
    pub msg: Option<RegBuf>,
    /// The DDP arguments, as submitted.
    pub ddp_args: DdpArgs,
    /// The write sinks, each with its length set to the octets the responder wrote
    /// (zero when it left the chunk empty or the call failed).
    pub write_sinks: WriteSinks,
    /// Set on a call lost with its connection before any answer when the connection
    /// retransmits (`ConnConfig::reconnect`): what sending it again needs besides the
    /// buffers above. The driver takes such outcomes back; applications see it only on
    /// outcomes a sans-IO core hands them directly.
    pub resend: Option<Resend>,
}

/// What a call lost with its connection needs to be sent again on the next one, besides
/// its buffers and XID (which its [`Outcome`] carries).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Resend {
    /// The XID to send it with: the one it went out with, or the caller's choice for a
    /// call that never went out (`None`: the engine assigns one).
    pub xid: Option<u32>,
    /// [`CallRequest::max_reply_len`].
    pub max_reply_len: u32,
    /// [`CallRequest::timeout`].
    pub timeout: Option<Duration>,
    /// [`CallRequest::idempotent`].
    pub idempotent: bool,
    /// [`CallRequest::prefers_read_chunk_reply`].
    pub prefers_read_chunk_reply: bool,
    /// [`CallRequest::pad_inline_ddp`].
    pub pad_inline_ddp: bool,
}

impl Resend {
    /// What `req` needs to be sent again (no XID yet: the engine writes the one it
    /// carried when the call is lost).
    #[inline]
    pub(crate) fn of(req: &CallRequest) -> Resend {
        Resend {
            xid: None,
            max_reply_len: req.max_reply_len,
            timeout: req.timeout,
            idempotent: req.idempotent,
            prefers_read_chunk_reply: req.prefers_read_chunk_reply,
            pad_inline_ddp: req.pad_inline_ddp,
        }
    }
}

impl Outcome {
    /// The request again, for a call lost with its connection ([`Outcome::resend`]):
    /// the same buffers and XID. Any other outcome comes back as it is.
    // The outcome comes back whole, by value, on a path taken only after a connection
    // ended; boxing it would allocate there for nothing.
    #[allow(clippy::result_large_err)]
    pub fn into_resend(mut self) -> Result<CallRequest, Outcome> {
        match (self.resend, self.msg.take()) {
            (Some(r), Some(msg)) => Ok(CallRequest {
                msg,
                xid: r.xid,
                ddp_args: self.ddp_args,
                write_sinks: self.write_sinks,
                max_reply_len: r.max_reply_len,
                timeout: r.timeout,
                idempotent: r.idempotent,
                prefers_read_chunk_reply: r.prefers_read_chunk_reply,
                pad_inline_ddp: r.pad_inline_ddp,
            }),
            (_, msg) => {
                self.msg = msg;
                Err(self)
            }
        }
    }

    /// The outcome of a call that never went out on the wire (refused, timed out while
    /// queued, or lost with its connection before it was sent): `status`, no reply, and
    /// the request's buffers back.
    pub(crate) fn unsent(tag: u64, xid: u32, req: CallRequest, status: CallStatus) -> Outcome {
        Outcome {
            tag,
            xid,
            status,
            reply: None,
            msg: Some(req.msg),
            ddp_args: req.ddp_args,
            write_sinks: req.write_sinks,
            resend: None,
        }
    }
}

impl Outcome {
    /// The result bytes the responder wrote into write sink `index`.
    pub fn write_result(&self, index: usize) -> Option<&[u8]> {
        self.write_sinks.get(index).map(RegBuf::as_slice)
    }

    /// True for [`CallStatus::Success`].
    pub fn is_success(&self) -> bool {
        self.status == CallStatus::Success
    }
}

/// Why a call was not accepted for sending. The request comes back whole.
#[derive(Debug, thiserror::Error)]
#[error("call not submitted: {reason}")]
pub struct SubmitError {
    /// Why.
    pub reason: SubmitRefusal,
    /// The request, untouched (except for the XID slot).
    pub request: Box<CallRequest>,
}

/// Reasons for [`SubmitError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SubmitRefusal {
    /// The connection is not established, or is closing.
    #[error("connection is not established")]
    NotConnected,
    /// The queue of calls waiting for a credit is full.
    #[error("call queue is full")]
    QueueFull,
    /// The message is shorter than an XID.
    #[error("RPC message shorter than an XID")]
    MessageTooShort,
    /// A buffer is not in a registered arena.
    #[error("buffer is not registered")]
    NotRegistered,
    /// DDP positions are not multiples of four in increasing order inside the message.
    #[error("DDP positions are not aligned, ordered and in range")]
    BadPosition,
    /// The transport header alone exceeds the inline threshold (too many chunks).
    #[error("transport header exceeds the inline threshold")]
    HeaderTooLarge,
    /// The message or a chunk exceeds what one memory registration covers.
    #[error("chunk exceeds the largest registration")]
    ChunkTooLarge,
    /// `max_reply_len` exceeds the largest Reply chunk buffer.
    #[error("maximum reply exceeds the largest reply buffer")]
    ReplyTooLarge,
    /// More DDP arguments (Read chunks) or write sinks (Write chunks) than the
    /// connection's `ConnConfig::max_chunks`: a responder with the same setting would
    /// refuse the call with ERR_CHUNK, so it is not sent.
    #[error("more Read or Write chunks than max_chunks allows")]
    TooManyChunks,
    /// [`CallRequest::xid`] names an XID another call in flight on this connection
    /// carries.
    #[error("another call in flight carries this XID")]
    DuplicateXid,
    /// A backward-direction call (RFC 8167) that would need a chunk: DDP arguments,
    /// write sinks, a message too long for the inline threshold, or a reply that may not
    /// fit inline. The backward direction carries inline messages only (RFC 8167 §5),
    /// so such a call is refused rather than sent.
    #[error("backchannel calls are inline only; this one needs a chunk")]
    NeedsChunks,
}
