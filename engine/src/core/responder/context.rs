//! A reply context: what one call holds at the responder, from its arrival to the
//! completion of its reply's Send. Preallocated; two per credit.

use crate::core::fixed::FixedVec;
use crate::core::regbuf::RegBuf;
use crate::service::{DdpResults, Sinks};
use crate::wire::header::RdmaError;

/// The further segments of a context's send-based DDP items (`Context::ddp_more`).
pub(super) type DdpMore =
    FixedVec<RegBuf, { crate::wire::private_data::CONTINUATION_GROUP_MAX as usize }>;

/// What a context waits for or does next.
// A tag byte of its own rather than a niche in `RdmaError`'s: the completion loop and
// the plain path test the step per call, a byte compare each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Step {
    /// Unused.
    Free,
    /// Needs large buffers and send-queue room to pull its Read chunks.
    StartReads,
    /// RDMA Reads are outstanding.
    Reading,
    /// Ready for the service (needs a large buffer first when a Reply chunk is offered).
    Dispatch,
    /// The service has answered; the reply needs send-queue room.
    Reply,
    /// An RDMA_ERROR needs send-queue room.
    Error(RdmaError),
    /// The reply (or error) is posted; waiting for its completions.
    Sent,
}

/// How the reply body is to be delivered, decided after the service ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Delivery {
    /// An RPC reply of `len` octets (inline or through the Reply chunk, whichever fits).
    Body { len: usize },
    /// The reply fits nothing the requester offered: RDMA_ERROR/ERR_CHUNK.
    TooLarge,
}

pub(super) struct Context {
    pub(super) step: Step,
    pub(super) xid: u32,
    /// The call's receive buffer: its transport header (re-parsed when needed: it was
    /// validated on arrival) and, for RDMA_MSG, the message.
    pub(super) recv: Option<RegBuf>,
    /// The reply's transport header, and the inline body after it: owned for the
    /// connection's life, or (`CorePools::headers`) drawn while the context is in use.
    pub(super) send: RegBuf,
    /// With drawn header buffers: the unregistered buffer `send` held while the
    /// context was free, given back to it when the context is freed again.
    pub(super) parked: Option<RegBuf>,
    /// Where the inline body starts in `send`: the largest header the reply can have.
    pub(super) body_off: usize,
    /// Pulled Read chunks, in Read list order.
    pub(super) sinks: Sinks,
    /// An item placed by send-based DDP across several receive segments keeps its
    /// first in `sinks` and the others here, items in order
    /// (`responder/send_ddp.rs`); `ddp_spans[k]` is how many of them follow sink `k`.
    /// Made the first time this context takes such an item and kept (cleared) for the
    /// next: inline, its sixteen buffer handles cost every context some 600 octets,
    /// written when the contexts are built, for a shape only a requester asking for
    /// segment groups uses (measured as about 20-30 KiB per idle verbs connection).
    pub(super) ddp_more: Option<Box<DdpMore>>,
    pub(super) ddp_spans: [u8; 1 + crate::service::MAX_DDP_ITEMS],
    /// The body, when the requester offered a Reply chunk.
    pub(super) body: Option<RegBuf>,
    /// DDP results for the Write chunks.
    pub(super) results: DdpResults,
    pub(super) delivery: Delivery,
    /// Work requests posted and not yet completed.
    pub(super) wrs: u32,
    /// Receives the requester lent for a continuation reply (`optxrq_rsbuf`).
    pub(super) rsbuf: u32,
    /// The call came as a continuation group (its header is synthesized: no Read
    /// segment of it may be invalidated).
    pub(super) assembled: bool,
    /// The call asked for its reply's bulk item by send-based DDP
    /// (`optxrq_rsd`, `responder/send_ddp.rs`).
    pub(super) reply_ddp: Option<crate::wire::rtr::place::ReplyDirection>,
    /// Where each DDP result belongs in the reply body
    /// (`ReplyWriter::ddp_result_position`), for a reply by send-based DDP.
    pub(super) result_at: [u32; crate::wire::rtr::place::MAX_REPLY_ITEMS as usize],
}

impl Context {
    pub(super) fn new(send: RegBuf) -> Self {
        Context {
            step: Step::Free,
            xid: 0,
            recv: None,
            send,
            parked: None,
            body_off: 0,
            sinks: Sinks::new(),
            ddp_more: None,
            ddp_spans: [0; 1 + crate::service::MAX_DDP_ITEMS],
            body: None,
            results: DdpResults::new(),
            delivery: Delivery::TooLarge,
            wrs: 0,
            rsbuf: 0,
            assembled: false,
            reply_ddp: None,
            result_at: [0; crate::wire::rtr::place::MAX_REPLY_ITEMS as usize],
        }
    }
}
