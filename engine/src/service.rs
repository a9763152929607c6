//! The responder's upper-layer interface: what a [`Service`] sees of a call and how it
//! writes the reply.
//!
//! The engine works at the transport level: an RPC message is bytes plus an XID, and
//! ONC RPC program dispatch (prog/vers/proc) belongs to `rpcrdma-ulp`, which implements
//! [`Service`]. Handlers run on the poller thread, run to completion, and never copy a
//! payload they do not want to:
//!
//! - [`CallView`] borrows the received RPC call: the inline bytes (straight from the
//!   receive buffer), or, for a long call, the Position-Zero Read chunk pulled into a
//!   registered buffer; plus every DDP-eligible argument the requester moved into a Read
//!   chunk, already pulled into registered memory, with its XDR position. It also says
//!   what the requester offered for the reply: Write chunks and a Reply chunk.
//! - [`ReplyWriter`] writes the RPC reply straight into a registered send buffer. A
//!   DDP-eligible result goes to the next Write chunk instead of being inlined: from a
//!   buffer the handler filled ([`ReplyWriter::ddp_result`]), or without a copy from
//!   registered memory that already holds it ([`ReplyWriter::ddp_result_from_call`],
//!   [`ReplyWriter::ddp_result_shared`]).
//! - A handler may also answer nothing ([`ReplyWriter::no_reply`]).
//!
//! # Zero-copy results and how long their bytes must live
//!
//! An RDMA Write reads its source when the device gets to it, which is after the
//! handler returned. The engine therefore only takes result bytes whose lifetime it
//! controls until the reply's Send completes (the Writes precede the Send on the same
//! queue pair, so the Send's completion means they are done):
//!
//! - an owned [`RegBuf`] ([`ReplyWriter::ddp_result`]): the engine drops it then;
//! - a slice of the call's own pulled Read-chunk data
//!   ([`ReplyWriter::ddp_result_from_call`]): the engine holds those buffers for the
//!   call's whole life anyway, and nobody else can write them;
//! - a range of a service-owned registered buffer shared as `Arc<RegBuf>`
//!   ([`ReplyWriter::ddp_result_shared`]): the engine keeps a clone of the `Arc` until
//!   the Send completes. Shared buffers are immutable to safe code, so the bytes cannot
//!   change under the Write; a service that recycles such a buffer must wait until it
//!   holds the only reference again (`Arc::get_mut` / `Arc::try_unwrap`).
//!
//! # Dropping a call (no reply)
//!
//! RPC-over-RDMA has no message that returns a credit without a reply: the requester
//! counts a call against its credits until its reply arrives (RFC 8166 §3.3.1). A call
//! the handler drops with [`ReplyWriter::no_reply`] therefore keeps one of the
//! requester's credits. Our requester reports the call's `Timeout` after its call
//! timeout (invalidating the call's chunks itself, since no Send With Invalidate comes)
//! but, because a late reply could still arrive, keeps that credit spent until the
//! connection ends: each drop costs the connection one credit for good, and a
//! connection whose credits are all lost this way only recovers by reconnecting (which
//! is also when a client retransmits). On the responder nothing
//! leaks: the receive the call used was reposted when it arrived, so the grant in later
//! replies (computed from posted receives) is unchanged, and the call's context and
//! buffers are released at once. Drops are counted (`ResponderStats::no_reply`): a
//! duplicate-request cache that drops a retransmission of a call still in progress is
//! fine, a service that drops routinely starves its clients of credits.
//!
//! # XDR positions and roundup (RFC 8166 §3.4.5–§3.4.7)
//!
//! A DDP-eligible item moved to a chunk leaves the inline payload stream together with
//! its XDR roundup: the chunk holds exactly the item's bytes, no padding. Positions
//! count in the full XDR stream, where every earlier moved item still occupies its
//! padded length. [`DdpItem::msg_offset`] translates: it is where in
//! [`CallView::msg`] the item would be inserted to rebuild the full stream. Results
//! handed to [`ReplyWriter::ddp_result`] follow the same rule: the reply body carries
//! the length word, the Write chunk carries the bytes, and no roundup is written.

use core::fmt;
use std::sync::Arc;

use rpcrdma_pools::PoolCache;

use crate::core::fixed::FixedVec;
use crate::core::regbuf::{RegBuf, RegBufError};
use crate::fabric::Sge;

pub(crate) use crate::limits::{MAX_DDP_ITEMS, MAX_WRITE_CHUNKS};

/// One DDP-eligible call argument, pulled from its Read chunk into registered memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DdpItem<'a> {
    /// The chunk's XDR position: octet offset in the full XDR stream of the RPC message.
    pub position: u32,
    /// Offset in [`CallView::msg`] where the item belongs (the position less the padded
    /// lengths of the items before it).
    pub msg_offset: usize,
    /// The item's bytes, without XDR roundup, when they are contiguous (always, unless
    /// the service takes segmented items: [`Service::takes_segmented_ddp_items`]);
    /// empty when the item is [`segments`](Self::segments).
    pub data: &'a [u8],
    /// An item placed by send-based DDP across several receive segments
    /// (draft-dnoveck-rpcrdma-rtrext §6.2: successive target buffer segments, one per
    /// transmission of a continuation group): its bytes are these, in order, handed
    /// over without a copy. Empty when the item is contiguous in [`data`](Self::data).
    /// Only a service whose [`Service::takes_segmented_ddp_items`] is true sees one.
    pub segments: &'a [&'a [u8]],
}

impl DdpItem<'_> {
    /// Octets of the item (contiguous or segmented).
    pub fn len(&self) -> usize {
        if self.segments.is_empty() {
            self.data.len()
        } else {
            self.segments.iter().map(|s| s.len()).sum()
        }
    }

    /// The item has no octets.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The item's pieces in order: [`data`](Self::data) alone when contiguous, else its
    /// [`segments`](Self::segments).
    pub fn pieces(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let one = self.segments.is_empty().then_some(self.data);
        one.into_iter().chain(self.segments.iter().copied())
    }

    /// The gather copy: the item's octets into the start of `out`, returning how many
    /// were copied (fewer than [`len`](Self::len) when `out` is shorter). For a ULP that
    /// takes segmented items but needs one of them contiguous.
    pub fn gather_into(&self, out: &mut [u8]) -> usize {
        let mut at = 0;
        for p in self.pieces() {
            let n = p.len().min(out.len() - at);
            out[at..at + n].copy_from_slice(&p[..n]);
            at += n;
        }
        at
    }
}

/// RDMA_MSGP padding parameters (RFC 5666 §3.9): opaque items of at least `thresh`
/// octets were preceded by padding so that their data starts `align`-aligned in the
/// receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Padding {
    /// `rdma_align`: a power of two.
    pub align: u32,
    /// `rdma_thresh`: opaque data at least this long was padded.
    pub thresh: u32,
    /// Offset of the RPC message in the receive buffer: alignment is of buffer
    /// addresses, not of message offsets.
    pub base: usize,
}

impl Padding {
    /// Padding octets that precede the data of an opaque item of `opaque_len` octets
    /// whose data would start at `msg_offset` in the message (just after its length
    /// word). Zero when the item is shorter than the threshold.
    pub fn pad_before(&self, msg_offset: usize, opaque_len: u32) -> usize {
        if opaque_len < self.thresh || self.align <= 1 {
            return 0;
        }
        let align = self.align as usize;
        let at = self.base.wrapping_add(msg_offset);
        (align - at % align) % align
    }
}

/// A received RPC call, borrowed for the duration of [`Service::handle_call`].
#[derive(Debug, Clone, Copy)]
pub struct CallView<'a> {
    pub(crate) xid: u32,
    pub(crate) credit: u32,
    pub(crate) msg: &'a [u8],
    pub(crate) ddp: &'a [DdpItem<'a>],
    pub(crate) write_chunks: &'a [u64],
    pub(crate) reply_chunk: Option<u64>,
    pub(crate) padding: Option<Padding>,
    pub(crate) long: bool,
}

impl<'a> CallView<'a> {
    /// The RPC XID (also the transport header's).
    #[inline]
    pub fn xid(&self) -> u32 {
        self.xid
    }

    /// Credits the requester asked for in this call's header.
    #[inline]
    pub fn credits_requested(&self) -> u32 {
        self.credit
    }

    /// The RPC call message (header and arguments) without the DDP items' bytes. It
    /// starts with the XID.
    #[inline]
    pub fn msg(&self) -> &'a [u8] {
        self.msg
    }

    /// DDP-eligible arguments in position order.
    #[inline]
    pub fn ddp_items(&self) -> &'a [DdpItem<'a>] {
        self.ddp
    }

    /// Capacity in octets of each Write chunk the requester offered, in order.
    #[inline]
    pub fn write_chunks(&self) -> &'a [u64] {
        self.write_chunks
    }

    /// Capacity of the Reply chunk, if the requester offered one.
    #[inline]
    pub fn reply_chunk(&self) -> Option<u64> {
        self.reply_chunk
    }

    /// RDMA_MSGP padding to honour while decoding, if the call came as RDMA_MSGP.
    #[inline]
    pub fn padding(&self) -> Option<Padding> {
        self.padding
    }

    /// True when the message came in a Position-Zero Read chunk (a long call).
    #[inline]
    pub fn is_long(&self) -> bool {
        self.long
    }
}

/// How a handler declines a call. The engine answers with an accepted RPC reply
/// carrying the matching `accept_stat` (RFC 5531 §9) and an AUTH_NONE verifier, so the
/// requester gets an RPC error for exactly this XID; the connection is unaffected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    /// The arguments did not decode: GARBAGE_ARGS (4).
    #[error("garbage arguments")]
    GarbageArgs,
    /// The server failed internally: SYSTEM_ERR (5).
    #[error("system error")]
    SystemErr,
    /// No such procedure: PROC_UNAVAIL (3).
    #[error("procedure unavailable")]
    ProcUnavail,
    /// No such program: PROG_UNAVAIL (1).
    #[error("program unavailable")]
    ProgUnavail,
    /// Program version outside `low..=high`: PROG_MISMATCH (2).
    #[error("program version mismatch (supported {low}..={high})")]
    ProgMismatch {
        /// Lowest supported version.
        low: u32,
        /// Highest supported version.
        high: u32,
    },
}

impl ServiceError {
    /// The RFC 5531 `accept_stat` value.
    pub const fn accept_stat(&self) -> u32 {
        match self {
            ServiceError::ProgUnavail => 1,
            ServiceError::ProgMismatch { .. } => 2,
            ServiceError::ProcUnavail => 3,
            ServiceError::GarbageArgs => 4,
            ServiceError::SystemErr => 5,
        }
    }
}

/// The upper layer of a responder: called once per received call, on the poller thread.
pub trait Service {
    /// Handles one call: decode `call`, write the RPC reply (starting with the XID) into
    /// `reply`. Returning an error makes the engine send the matching RPC error reply
    /// instead of whatever was written. A reply that overflowed the writer (it does not
    /// fit what the requester can receive) is answered with RDMA_ERROR/ERR_CHUNK
    /// (RFC 8166 §3.5.4), whatever the handler returns.
    fn handle_call(
        &mut self,
        call: &CallView<'_>,
        reply: &mut ReplyWriter<'_>,
    ) -> Result<(), ServiceError>;

    /// Whether this service takes a bulk argument placed by send-based DDP across
    /// several receive segments as a segment list ([`DdpItem::segments`], no copy).
    /// The default is false: the engine then gathers such an item into one large buffer
    /// (one copy) so that [`DdpItem::data`] holds it whole, as every service written
    /// before segmented items expects (`engine/DESIGN.md`, "Items across segments").
    fn takes_segmented_ddp_items(&self) -> bool {
        false
    }

    /// Who the connection's peer is, as the provider knows it
    /// ([`QueuePair::peer_addr`](crate::fabric::QueuePair::peer_addr)): told once, when
    /// the connection is accepted, before any call. A service that keeps per-client
    /// state (a duplicate request cache) keys it on this; the default ignores it.
    fn set_peer(&mut self, peer: crate::fabric::PeerAddr) {
        let _ = peer;
    }

    /// An RDMA_DONE arrived for `xid` (RFC 5666 §3.8). This engine never sends Read
    /// chunks in replies, so the default ignores it.
    fn on_done(&mut self, xid: u32) {
        let _ = xid;
    }

    /// On a forward responder that can call its requester (RFC 8167; a connection made
    /// by [`Responder::bind_calling`](crate::Responder::bind_calling)): asked once per
    /// poll for backward-direction calls, made through `calls`. The default makes none.
    fn backchannel(&mut self, calls: &mut crate::core::Backchannel<'_>) {
        let _ = calls;
    }

    /// The outcome of a call made through [`Service::backchannel`].
    fn backchannel_outcome(&mut self, outcome: crate::requester::Outcome) {
        let _ = outcome;
    }
}

/// The reply body did not fit the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("reply needs {needed} octets, the requester can take {capacity}")]
pub struct ReplyOverflow {
    /// Octets the body would need.
    pub needed: usize,
    /// Octets the buffer holds.
    pub capacity: usize,
}

/// Why [`ReplyWriter::ddp_result`] did not take a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DdpRefusal {
    /// The requester offered no (further) Write chunk: inline the data instead.
    #[error("no Write chunk left for the result")]
    NoWriteChunk,
    /// The next Write chunk is smaller than the data.
    #[error("result exceeds the {capacity}-octet Write chunk")]
    TooLarge {
        /// The chunk's capacity.
        capacity: u64,
    },
    /// The buffer's arena is not registered, so the data cannot be RDMA-written.
    #[error("result buffer is not registered")]
    NotRegistered,
    /// The bytes are not inside memory the engine can keep valid until the Write
    /// completes (not within the call's pulled Read chunks, or outside the shared
    /// buffer's valid bytes): copy them into [`ReplyWriter::alloc_buf`] instead.
    #[error("result bytes are not in memory the engine holds")]
    NotHeld,
}

/// A refused DDP result, with the data handed back so the handler can inline it.
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct DdpRefused {
    /// Why.
    pub reason: DdpRefusal,
    /// The data, untouched.
    pub data: RegBuf,
}

/// A call's pulled Read chunks, in Read list order (a long call's message first).
pub(crate) type Sinks = FixedVec<RegBuf, { 1 + MAX_DDP_ITEMS }>;

/// Where a DDP result's bytes are, held by the engine until the reply's Send completes.
#[derive(Debug)]
pub(crate) enum DdpData {
    /// A buffer the handler filled; dropped (back to its pool) when the reply is done.
    Owned(RegBuf),
    /// Bytes of the call's own pulled Read chunk `sink` (an index into the context's
    /// sinks, which live as long as the context).
    Pulled { sink: u8, offset: u32, len: u32 },
    /// Bytes of a service-owned registered buffer; the clone keeps it alive.
    Shared {
        buf: Arc<RegBuf>,
        offset: u32,
        len: u32,
    },
}

impl DdpData {
    /// Octets to write.
    pub(crate) fn len(&self) -> usize {
        match self {
            DdpData::Owned(b) => b.len(),
            DdpData::Pulled { len, .. } | DdpData::Shared { len, .. } => *len as usize,
        }
    }

    /// A gather entry for `len` octets from `off` into the data; `sinks` are the
    /// context's pulled Read chunks.
    pub(crate) fn sge(&self, sinks: &Sinks, off: usize, len: usize) -> Option<Sge> {
        match self {
            DdpData::Owned(b) => b.sge(off, len).ok(),
            DdpData::Pulled { sink, offset, .. } => sinks
                .get(usize::from(*sink))?
                .sge((*offset as usize).checked_add(off)?, len)
                .ok(),
            DdpData::Shared { buf, offset, .. } => {
                buf.sge((*offset as usize).checked_add(off)?, len).ok()
            }
        }
    }

    /// The data's octets; `sinks` are the context's pulled Read chunks.
    pub(crate) fn bytes<'s>(&'s self, sinks: &'s Sinks) -> Option<&'s [u8]> {
        match self {
            DdpData::Owned(b) => Some(b.as_slice()),
            DdpData::Pulled { sink, offset, len } => {
                let at = *offset as usize;
                sinks
                    .get(usize::from(*sink))?
                    .as_slice()
                    .get(at..at.checked_add(*len as usize)?)
            }
            DdpData::Shared { buf, offset, len } => {
                let at = *offset as usize;
                buf.as_slice().get(at..at.checked_add(*len as usize)?)
            }
        }
    }

    /// True when no copy was made for this result.
    pub(crate) fn is_zero_copy(&self) -> bool {
        !matches!(self, DdpData::Owned(_))
    }
}

/// Results a reply sends through Write chunks: `None` for a chunk left empty.
pub(crate) type DdpResults = FixedVec<Option<DdpData>, MAX_WRITE_CHUNKS>;

/// Writes one RPC reply into a registered buffer.
///
/// The body is what goes inline or into the Reply chunk: it starts with the XID. The
/// capacity already accounts for the transport header and for what the requester can
/// receive, so a body that fits here can be delivered; writing past it fails with
/// [`ReplyOverflow`], and a call whose writer overflowed is answered with
/// RDMA_ERROR/ERR_CHUNK.
pub struct ReplyWriter<'a> {
    body: &'a mut [u8],
    len: usize,
    overflow: Option<ReplyOverflow>,
    write_chunks: &'a [u64],
    results: &'a mut DdpResults,
    large: Option<&'a mut PoolCache>,
    pulled: Option<&'a Sinks>,
    no_reply: bool,
    /// Per result, the body offset its item belongs at (see
    /// [`ReplyWriter::ddp_result_position`]).
    result_at: [u32; MAX_WRITE_CHUNKS],
}

impl fmt::Debug for ReplyWriter<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplyWriter")
            .field("len", &self.len)
            .field("capacity", &self.body.len())
            .field("overflow", &self.overflow)
            .field("write_chunks", &self.write_chunks)
            .field("results", &self.results.len())
            .field("no_reply", &self.no_reply)
            .finish()
    }
}

impl<'a> ReplyWriter<'a> {
    // Always inlined: its two callers (the general and the chunkless dispatch) each
    // build the writer once per call, and a call of its own costs about as much as
    // filling it.
    #[inline(always)]
    pub(crate) fn new(
        body: &'a mut [u8],
        write_chunks: &'a [u64],
        results: &'a mut DdpResults,
        large: Option<&'a mut PoolCache>,
        pulled: Option<&'a Sinks>,
    ) -> Self {
        results.clear();
        ReplyWriter {
            body,
            len: 0,
            overflow: None,
            write_chunks,
            results,
            large,
            pulled,
            no_reply: false,
            result_at: [0; MAX_WRITE_CHUNKS],
        }
    }

    /// Records where the result just pushed belongs: the body as written so far.
    fn mark_result(&mut self) {
        if let Some(k) = self.results.len().checked_sub(1) {
            if let Some(at) = self.result_at.get_mut(k) {
                *at = self.len.min(u32::MAX as usize) as u32;
            }
        }
    }

    /// Says where in the body the last DDP result handed over belongs: the offset of
    /// its data, just after its length word (the item's XDR position in the reply).
    /// By default it is the body's length when the result was handed over, which is
    /// right for a handler that writes the length word and then the result; a handler
    /// that writes the whole body first says so here. Write chunks do not need it (the
    /// requester's ULP knows where its items go); a reply sent by send-based DDP does
    /// (draft-dnoveck-rpcrdma-rtrext §7.3, `xmdmi_disp`, and an item too short to place
    /// goes back into the payload stream there). False when no result was handed over
    /// or `at` lies past the body.
    pub fn ddp_result_position(&mut self, at: usize) -> bool {
        let Some(k) = self.results.len().checked_sub(1) else {
            return false;
        };
        if at > self.len || !at.is_multiple_of(4) {
            return false;
        }
        match self.result_at.get_mut(k) {
            Some(slot) => {
                *slot = at as u32;
                true
            }
            None => false,
        }
    }

    /// The body offset result `k` belongs at ([`ddp_result_position`](Self::ddp_result_position)).
    pub(crate) fn result_position(&self, k: usize) -> Option<u32> {
        (k < self.results.len())
            .then(|| self.result_at.get(k).copied())
            .flatten()
    }

    /// Answers nothing: the engine sends no reply, releases the call's buffers at once,
    /// and counts the drop (`ResponderStats::no_reply`). Whatever was written, any DDP
    /// result, and the handler's return value are discarded. For a duplicate-request
    /// cache seeing a call that is still in progress, for example. The requester's
    /// credit stays spent until it gives up on the call: see the module documentation.
    pub fn no_reply(&mut self) {
        self.no_reply = true;
    }

    /// True once [`no_reply`](Self::no_reply) was called.
    #[inline]
    pub fn is_no_reply(&self) -> bool {
        self.no_reply
    }

    /// A registered buffer from the connection's large pool, to fill with result data
    /// and hand to [`ddp_result`](Self::ddp_result) (for results that do not already
    /// live in registered memory of the service's own).
    pub fn alloc_buf(&mut self) -> Result<RegBuf, RegBufError> {
        match self.large.as_deref_mut() {
            Some(cache) => RegBuf::from_cache(cache),
            None => Err(RegBufError::Exhausted),
        }
    }

    /// Octets written so far.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing has been written.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Most octets the body can hold.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.body.len()
    }

    /// The body written so far.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        &self.body[..self.len]
    }

    /// The first overflow, if the handler wrote past the capacity.
    #[inline]
    pub fn overflow(&self) -> Option<ReplyOverflow> {
        self.overflow
    }

    fn overflowed(&mut self, extra: usize) -> ReplyOverflow {
        let o = ReplyOverflow {
            needed: self.len.saturating_add(extra),
            capacity: self.body.len(),
        };
        self.overflow.get_or_insert(o);
        o
    }

    /// Appends `bytes`.
    pub fn put(&mut self, bytes: &[u8]) -> Result<(), ReplyOverflow> {
        let end = self.len.saturating_add(bytes.len());
        match self.body.get_mut(self.len..end) {
            Some(dst) => {
                dst.copy_from_slice(bytes);
                self.len = end;
                Ok(())
            }
            None => Err(self.overflowed(bytes.len())),
        }
    }

    /// Appends a big-endian XDR unsigned int.
    pub fn put_u32(&mut self, v: u32) -> Result<(), ReplyOverflow> {
        self.put(&v.to_be_bytes())
    }

    /// Appends `n` zero octets (XDR roundup).
    pub fn put_zeros(&mut self, n: usize) -> Result<(), ReplyOverflow> {
        let end = self.len.saturating_add(n);
        match self.body.get_mut(self.len..end) {
            Some(dst) => {
                dst.fill(0);
                self.len = end;
                Ok(())
            }
            None => Err(self.overflowed(n)),
        }
    }

    /// The unwritten rest of the buffer, to encode into directly; follow with
    /// [`advance`](Self::advance).
    #[inline]
    pub fn spare_mut(&mut self) -> &mut [u8] {
        &mut self.body[self.len..]
    }

    /// Marks `n` more octets of [`spare_mut`](Self::spare_mut) as written.
    pub fn advance(&mut self, n: usize) -> Result<(), ReplyOverflow> {
        if n > self.body.len() - self.len {
            return Err(self.overflowed(n));
        }
        self.len += n;
        Ok(())
    }

    /// Discards everything written after the first `len` octets.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Write chunks not yet used or skipped.
    pub fn write_chunks_left(&self) -> usize {
        self.write_chunks.len().saturating_sub(self.results.len())
    }

    /// Capacity of the Write chunk the next DDP result would go to.
    pub fn next_write_chunk(&self) -> Option<u64> {
        self.write_chunks.get(self.results.len()).copied()
    }

    /// Sends `data` (its valid bytes) through the next Write chunk instead of inlining
    /// it. The handler writes the item's length word into the body itself and neither
    /// the bytes nor their roundup (RFC 8166 §3.4.6). The engine RDMA-Writes the data
    /// before the reply and drops the buffer (returning it to its pool) once the write
    /// completes. Refused data comes back in [`DdpRefused`].
    pub fn ddp_result(&mut self, data: RegBuf) -> Result<(), DdpRefused> {
        let Some(capacity) = self.next_write_chunk() else {
            return Err(DdpRefused {
                reason: DdpRefusal::NoWriteChunk,
                data,
            });
        };
        if data.len() as u64 > capacity {
            return Err(DdpRefused {
                reason: DdpRefusal::TooLarge { capacity },
                data,
            });
        }
        if data.lkey().is_err() {
            return Err(DdpRefused {
                reason: DdpRefusal::NotRegistered,
                data,
            });
        }
        match self.results.push(Some(DdpData::Owned(data))) {
            Ok(()) => {
                self.mark_result();
                Ok(())
            }
            Err(Some(DdpData::Owned(data))) => Err(DdpRefused {
                reason: DdpRefusal::NoWriteChunk,
                data,
            }),
            // Unreachable: we pushed an owned buffer, and nothing else can come back.
            Err(_) => Ok(()),
        }
    }

    /// Checks that the next Write chunk can take `len` octets.
    fn check_chunk(&self, len: usize) -> Result<(), DdpRefusal> {
        let capacity = self.next_write_chunk().ok_or(DdpRefusal::NoWriteChunk)?;
        if len as u64 > capacity {
            return Err(DdpRefusal::TooLarge { capacity });
        }
        Ok(())
    }

    /// Sends `data`, a slice of one of the call's DDP items or of a long call's message
    /// (bytes the engine pulled from the call's Read chunks), through the next Write
    /// chunk without copying it. Those buffers stay with the call until its reply's Send
    /// completes, so the bytes are valid for the Write. The body rules are those of
    /// [`ddp_result`](Self::ddp_result). Any other slice (inline call bytes, the
    /// service's own memory) is refused with [`DdpRefusal::NotHeld`].
    pub fn ddp_result_from_call(&mut self, data: &[u8]) -> Result<(), DdpRefusal> {
        let start = data.as_ptr() as usize;
        let end = start.wrapping_add(data.len());
        let Some(pulled) = self.pulled else {
            return Err(DdpRefusal::NotHeld);
        };
        let found = pulled.iter().enumerate().find_map(|(k, b)| {
            let s = b.as_slice();
            let base = s.as_ptr() as usize;
            (start >= base && end <= base + s.len()).then(|| (k, start - base))
        });
        let Some((sink, offset)) = found else {
            return Err(DdpRefusal::NotHeld);
        };
        self.check_chunk(data.len())?;
        if pulled.get(sink).is_none_or(|b| b.lkey().is_err()) {
            return Err(DdpRefusal::NotRegistered);
        }
        // Pulled buffers are at most 4 GiB and there are at most 1 + MAX_DDP_ITEMS.
        let d = DdpData::Pulled {
            sink: sink as u8,
            offset: offset as u32,
            len: data.len() as u32,
        };
        self.results
            .push(Some(d))
            .map_err(|_| DdpRefusal::NoWriteChunk)?;
        self.mark_result();
        Ok(())
    }

    /// Sends `len` octets from `offset` of a registered buffer the service owns and
    /// shares (a file cache page, a preformatted result) through the next Write chunk
    /// without copying. The engine keeps a clone of `buf` until the reply's Send
    /// completes; the range must lie within the buffer's valid bytes.
    pub fn ddp_result_shared(
        &mut self,
        buf: &Arc<RegBuf>,
        offset: usize,
        len: usize,
    ) -> Result<(), DdpRefusal> {
        match offset.checked_add(len) {
            Some(end) if end <= buf.len() => {}
            _ => return Err(DdpRefusal::NotHeld),
        }
        self.check_chunk(len)?;
        if buf.lkey().is_err() {
            return Err(DdpRefusal::NotRegistered);
        }
        // Within a pool buffer, so both fit in 32 bits.
        let d = DdpData::Shared {
            buf: Arc::clone(buf),
            offset: offset as u32,
            len: len as u32,
        };
        self.results
            .push(Some(d))
            .map_err(|_| DdpRefusal::NoWriteChunk)?;
        self.mark_result();
        Ok(())
    }

    /// Leaves the next Write chunk empty (its result was not DDP-eligible this time, or
    /// was inlined), so a later result goes to the chunk after it. False when no chunk
    /// is left.
    pub fn skip_write_chunk(&mut self) -> bool {
        if self.write_chunks_left() == 0 {
            return false;
        }
        self.results.push(None).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_refuses_overflow_and_remembers_it() {
        let mut buf = [0u8; 8];
        let mut results = DdpResults::new();
        let mut w = ReplyWriter::new(&mut buf, &[], &mut results, None, None);
        w.put_u32(7).unwrap();
        assert!(w.put(&[1, 2, 3, 4, 5]).is_err());
        assert_eq!(
            w.overflow(),
            Some(ReplyOverflow {
                needed: 9,
                capacity: 8
            })
        );
        w.put_zeros(4).unwrap();
        assert_eq!(w.as_slice(), &[0, 0, 0, 7, 0, 0, 0, 0]);
        assert!(w.advance(1).is_err());
        assert!(!w.skip_write_chunk());
    }

    #[test]
    fn msgp_padding_aligns_buffer_addresses() {
        let p = Padding {
            align: 64,
            thresh: 100,
            base: 36,
        };
        assert_eq!(p.pad_before(8, 99), 0);
        // 36 + 8 = 44: 20 octets to the next 64-octet boundary.
        assert_eq!(p.pad_before(8, 100), 20);
        assert_eq!(p.pad_before(28, 4096), 0);
    }

    #[test]
    fn service_errors_map_to_rfc5531_accept_stat() {
        assert_eq!(ServiceError::GarbageArgs.accept_stat(), 4);
        assert_eq!(ServiceError::SystemErr.accept_stat(), 5);
        assert_eq!(ServiceError::ProcUnavail.accept_stat(), 3);
        assert_eq!(ServiceError::ProgUnavail.accept_stat(), 1);
        assert_eq!(
            ServiceError::ProgMismatch { low: 1, high: 2 }.accept_stat(),
            2
        );
    }
}
