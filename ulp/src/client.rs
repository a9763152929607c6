//! Requester-side glue between the ULP codecs and the engine's requester API: turn an
//! encoded call into a `CallRequest` ([`CallPlan`], [`inline_call`]) and open an
//! `Outcome`'s results ([`OutcomeResults`]). Nothing here allocates.

use rpcrdma::limits::{MAX_DDP_ARGS, MAX_WRITE_SINKS};
use rpcrdma::FixedVec;
use rpcrdma::{CallRequest, Outcome};
use rpcrdma::{RegBuf, RegBufError};

use crate::ddp::{
    reply_results, CallEncoder, DdpCursor, DdpEncodeError, EncodedCall, ReplyError, XdrCodec,
};
use crate::rpc::CallHeader;

/// Registered buffers holding a call's DDP-eligible arguments.
pub type DdpBufs = FixedVec<RegBuf, MAX_DDP_ARGS>;

/// Why a call could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// The header or arguments did not encode into the message buffer.
    #[error(transparent)]
    Encode(#[from] DdpEncodeError),
    /// The message buffer could not take the encoded length.
    #[error("message buffer: {0}")]
    Msg(#[source] RegBufError),
    /// A DDP-eligible argument was not the whole of one of the given buffers: the engine
    /// sends a buffer's valid bytes as one Read chunk, so an item must be exactly that.
    #[error("DDP argument at position {position} is not the whole of a registered buffer")]
    NotWholeBuffer {
        /// The item's XDR position.
        position: u32,
    },
    /// More Read chunks than the engine takes per call.
    #[error("more than {MAX_DDP_ARGS} DDP arguments in one call")]
    TooManyDdpArgs,
}

/// How an encoded call maps onto the engine's `CallRequest`: its inline length and,
/// for each Read chunk, its XDR position and which of the caller's registered buffers it
/// is. Holds no borrows, so the buffers can move into the request once the arguments
/// that borrowed them are gone:
///
/// ```text
/// let plan = {
///     let data = bufs.get(0).map_or(&[][..], |b| b.as_slice());
///     let call = encode_call(msg.storage_mut(), &header, &EchoData { data }, 1024)?;
///     CallPlan::new(&call, &bufs)?
/// };
/// let request = plan.into_request(msg, bufs, max_reply_len)?;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallPlan {
    len: usize,
    chunks: [(u32, usize); MAX_DDP_ARGS],
    n: usize,
}

impl CallPlan {
    /// Matches each Read chunk of `call` with the buffer of `bufs` whose valid bytes it
    /// is: the engine sends a buffer's valid bytes as one Read chunk.
    pub fn new(call: &EncodedCall<'_>, bufs: &DdpBufs) -> Result<Self, BuildError> {
        if call.read_chunks.len() > MAX_DDP_ARGS {
            return Err(BuildError::TooManyDdpArgs);
        }
        let mut plan = CallPlan {
            len: call.len,
            chunks: [(0, 0); MAX_DDP_ARGS],
            n: 0,
        };
        for item in call.read_chunks.iter() {
            let index = bufs
                .iter()
                .position(|b| {
                    let s = b.as_slice();
                    s.as_ptr() == item.data.as_ptr() && s.len() == item.data.len()
                })
                .ok_or(BuildError::NotWholeBuffer {
                    position: item.position,
                })?;
            if plan.chunks[..plan.n].iter().any(|&(_, i)| i == index) {
                return Err(BuildError::NotWholeBuffer {
                    position: item.position,
                });
            }
            plan.chunks[plan.n] = (item.position, index);
            plan.n += 1;
        }
        Ok(plan)
    }

    /// The Read chunk positions, in XDR order.
    pub fn positions(&self) -> impl Iterator<Item = u32> + '_ {
        self.chunks[..self.n].iter().map(|&(p, _)| p)
    }

    /// Builds the request: `msg` (into which the call was encoded) gets the encoded
    /// length, the buffers the Read chunks name are attached at their positions, and
    /// the other buffers are released to their pools.
    pub fn into_request(
        self,
        mut msg: RegBuf,
        mut bufs: DdpBufs,
        max_reply_len: u32,
    ) -> Result<CallRequest, BuildError> {
        msg.set_len(self.len).map_err(BuildError::Msg)?;
        let mut slots: [Option<RegBuf>; MAX_DDP_ARGS] = Default::default();
        for (slot, buf) in slots.iter_mut().zip(bufs.drain()) {
            *slot = Some(buf);
        }
        let mut req = CallRequest::new(msg, max_reply_len);
        for &(position, index) in &self.chunks[..self.n] {
            let buf = slots
                .get_mut(index)
                .and_then(Option::take)
                .ok_or(BuildError::NotWholeBuffer { position })?;
            req.push_ddp_arg(position, buf)
                .map_err(|_| BuildError::TooManyDdpArgs)?;
        }
        Ok(req)
    }
}

/// Builds a `CallRequest` for a call whose arguments have no DDP-eligible data in
/// registered buffers (everything inline): encodes `header` and `args` into `msg`.
// Always inlined: the function is small (encoding is calls out of it), and inlined the
// request is built where the caller keeps it instead of in a returned `Result` that the
// caller then copies it out of (a few hundred octets).
#[inline(always)]
pub fn inline_call<'d, A: XdrCodec<'d>>(
    mut msg: RegBuf,
    header: &CallHeader<'_>,
    args: &A,
    max_reply_len: u32,
) -> Result<CallRequest, BuildError> {
    // `encode_call` unrolled: the usual call has no Read chunk, and reading its length
    // off the encoder saves copying the (empty) chunk list out into an `EncodedCall`.
    let mut enc = CallEncoder::with_ddp_threshold(msg.storage_mut(), header, usize::MAX)?;
    args.encode(&mut enc)?;
    if enc.read_items().is_empty() {
        // The usual case, built directly: no chunk to match, and the request is
        // returned without passing through a plan.
        let len = enc.position();
        msg.set_len(len).map_err(BuildError::Msg)?;
        return Ok(CallRequest::new(msg, max_reply_len));
    }
    // Read chunks need registered buffers, and an inline call has none. Refused without
    // building a request on this path too: two paths that each build one would make the
    // caller copy the one it got (a few hundred octets) on the common path as well.
    Err(unplaceable(&enc.finish()))
}

/// Why [`inline_call`] refuses a call whose arguments became Read chunks: with no
/// registered buffers to carry them, it fails as [`CallPlan::new`] fails for them.
#[cold]
#[inline(never)]
fn unplaceable(call: &EncodedCall<'_>) -> BuildError {
    match CallPlan::new(call, &DdpBufs::new()) {
        Err(e) => e,
        // With no buffers no chunk matches one, so `new` fails on the first chunk.
        Ok(_) => BuildError::NotWholeBuffer {
            position: call.read_chunks.first().map_or(0, |c| c.position),
        },
    }
}

/// An outcome's reply and Write chunk data, ready to decode.
#[derive(Debug)]
pub struct OutcomeResults<'o> {
    outcome: &'o Outcome,
    written: [&'o [u8]; MAX_WRITE_SINKS],
    sinks: usize,
}

impl<'o> OutcomeResults<'o> {
    /// Collects what `outcome` carries: its reply and the bytes written into each sink.
    pub fn new(outcome: &'o Outcome) -> Self {
        let mut written = [&[][..]; MAX_WRITE_SINKS];
        let mut sinks = 0;
        for (w, sink) in written.iter_mut().zip(outcome.write_sinks.iter()) {
            *w = sink.as_slice();
            sinks += 1;
        }
        OutcomeResults {
            outcome,
            written,
            sinks,
        }
    }

    /// Decodes the reply header; on SUCCESS returns the XID and a cursor over the
    /// results, with DDP-eligible results read from the write sinks. An outcome without
    /// a reply (transport error, timeout) is reported as an undecodable header.
    pub fn cursor(&self) -> Result<(u32, DdpCursor<'_>), ReplyError> {
        let msg = self.outcome.reply.as_ref().map_or(&[][..], |r| r.bytes());
        let padding = self.outcome.reply.as_ref().and_then(|r| r.padding());
        reply_results(msg, &self.written[..self.sinks])
            .map(|(xid, c)| (xid, c.with_padding(padding)))
    }
}
