//! The engine's responder upcall: [`Dispatcher`] as an `rpcrdma::Service`.

use std::sync::Arc;

use rpcrdma::{CallView, DdpRefusal, RegBuf, ReplyWriter, Service, ServiceError};

use super::dispatch::{Answered, DispatchError, Dispatched, Dispatcher, InboundCall};
use crate::ddp::{DdpList, ReadItem};
use crate::rpc::CallHeader;

impl Service for Dispatcher {
    /// Keys the duplicate request cache on the peer
    /// ([`ClientAddr::from`](super::ClientAddr)), unless the embedder already named the
    /// client with [`Dispatcher::set_client`].
    fn set_peer(&mut self, peer: rpcrdma::fabric::PeerAddr) {
        if self.client() == super::ClientAddr::Unknown {
            self.set_client(super::ClientAddr::from(peer));
        }
    }

    /// Dispatches the call and writes the complete RPC reply into the engine's send
    /// buffer.
    ///
    /// - DDP-eligible arguments are read where the engine pulled them; the dispatcher
    ///   never copies them.
    /// - DDP-eligible results go to the requester's Write chunks. A result that is a
    ///   slice of the call's own pulled Read-chunk data (ECHO returning its argument)
    ///   is written from there without a copy
    ///   ([`ReplyWriter::ddp_result_from_call`]), and so is one that lies in a
    ///   registered buffer a program keeps
    ///   ([`Program::attach_registered`](super::Program::attach_registered), offered on
    ///   the connection's first call with a Write chunk; written with
    ///   [`ReplyWriter::ddp_result_shared`]); any other result (the program's own
    ///   memory, inline call bytes) is copied once into a buffer from
    ///   [`ReplyWriter::alloc_buf`]. Write chunks before a placed result that got
    ///   nothing are skipped (returned empty).
    /// - A reply overrun (results larger than the reply buffer or a Write chunk) marks
    ///   the writer overflowed, so the engine answers RDMA_ERROR / ERR_CHUNK (RFC 8166
    ///   §3.5.4, RFC 8267 §3).
    /// - A call the program drops ([`ProcError::NoReply`](super::ProcError::NoReply))
    ///   gets no reply ([`ReplyWriter::no_reply`]).
    /// - A message that is not an answerable call (a REPLY, a bad `msg_type`) has no RPC
    ///   answer; staying silent would keep one of the requester's credits spent (RFC
    ///   8166 returns credits only with replies), so it gets GARBAGE_ARGS for its XID.
    // Inlined into the engine's dispatch: a call without DDP items or Write chunks
    // (nearly every call) is answered there, its call view read where it was built; any
    // other call goes to `handle_ddp_call`.
    #[inline(always)]
    fn handle_call(
        &mut self,
        call: &CallView<'_>,
        reply: &mut ReplyWriter<'_>,
    ) -> Result<(), ServiceError> {
        if call.ddp_items().is_empty() && call.write_chunks().is_empty() {
            let inbound = InboundCall {
                msg: call.msg(),
                reads: &[],
                write_chunks: &[],
                padding: call.padding(),
            };
            return answer_inline(self, &inbound, reply);
        }
        handle_ddp_call(self, call, reply)
    }
}

/// [`Service::handle_call`] of a call with DDP items or Write chunks.
#[inline(never)]
fn handle_ddp_call(
    d: &mut Dispatcher,
    call: &CallView<'_>,
    reply: &mut ReplyWriter<'_>,
) -> Result<(), ServiceError> {
    // A list rather than an array of defaults: most calls have no DDP items, and
    // an empty list costs nothing to make.
    let mut reads = DdpList::new();
    for i in call.ddp_items() {
        let item = ReadItem {
            position: i.position,
            data: i.data,
        };
        if reads.push(item).is_err() {
            return Err(ServiceError::GarbageArgs);
        }
    }
    let inbound = InboundCall {
        msg: call.msg(),
        reads: reads.as_slice(),
        write_chunks: call.write_chunks(),
        padding: call.padding(),
    };
    // No Write chunks offered (nearly every call): the reply has no Write list, so
    // no DDP result to place, and the dispatcher hands back only its length.
    if call.write_chunks().is_empty() {
        return answer_inline(d, &inbound, reply);
    }
    // Programs get their registered buffers on the first call that can use them.
    if !d.is_attached() {
        d.attach_registered(&mut || reply.alloc_buf());
    }
    let registered = d.take_registered();
    let done = reply_to(d, &inbound, reply, &registered);
    d.put_registered(registered);
    done
}

/// Dispatches `inbound`, a call that offered no Write chunks, into `reply`.
// The plain call header here, anything else out of line (`answer_general`): the call
// and its answer then stay in registers on the common path rather than being built
// in memory that either path could read.
#[inline(always)]
fn answer_inline(
    d: &mut Dispatcher,
    inbound: &InboundCall<'_>,
    reply: &mut ReplyWriter<'_>,
) -> Result<(), ServiceError> {
    match CallHeader::decode_plain(inbound.msg) {
        Some(header) => {
            let answer = d.answer_plain::<Answered>(&header, inbound, reply.spare_mut());
            answered(answer, reply)
        }
        None => {
            let answer = answer_general(d, *inbound, reply.spare_mut());
            answered(answer, reply)
        }
    }
}

/// [`answer_inline`] of a call whose header is not the plain one (the writer's spare
/// room only: the writer itself stays out of memory the call could reach).
#[inline(never)]
fn answer_general(
    d: &mut Dispatcher,
    inbound: InboundCall<'_>,
    spare: &mut [u8],
) -> Result<Answered, DispatchError> {
    d.answer::<Answered>(&inbound, spare)
}

/// Records the dispatcher's `answer` in `reply`.
#[inline(always)]
fn answered(
    answer: Result<Answered, DispatchError>,
    reply: &mut ReplyWriter<'_>,
) -> Result<(), ServiceError> {
    match answer {
        Ok(Answered::Reply { len }) => reply.advance(len).map_err(|_| ServiceError::SystemErr),
        Ok(Answered::Drop) => Err(ServiceError::GarbageArgs),
        Ok(Answered::NoReply) => {
            reply.no_reply();
            Ok(())
        }
        Err(DispatchError::ReplyOverrun { .. } | DispatchError::ReplyBufferTooSmall { .. }) => {
            overflow(reply);
            Ok(())
        }
    }
}

/// Where `data` lies in one of `registered`: the buffer and the offset there.
fn within<'r>(registered: &'r [Arc<RegBuf>], data: &[u8]) -> Option<(&'r Arc<RegBuf>, usize)> {
    let start = data.as_ptr() as usize;
    let end = start.wrapping_add(data.len());
    registered.iter().find_map(|b| {
        let s = b.as_slice();
        let base = s.as_ptr() as usize;
        (start >= base && end <= base + s.len()).then(|| (b, start - base))
    })
}

/// Dispatches `inbound` into `reply` and hands its DDP results to the engine: without
/// a copy when they lie in the call's pulled Read chunks or in `registered`, else
/// copied once into a large buffer.
fn reply_to(
    d: &mut Dispatcher,
    inbound: &InboundCall<'_>,
    reply: &mut ReplyWriter<'_>,
    registered: &[Arc<RegBuf>],
) -> Result<(), ServiceError> {
    // Matched where it lies, not moved out: a written reply carries its Write list
    // (a few hundred octets).
    let dispatched = d.dispatch(inbound, reply.spare_mut());
    let done = match &dispatched {
        Ok(Dispatched::Reply(r)) => r,
        Ok(Dispatched::Drop(_)) => return Err(ServiceError::GarbageArgs),
        Ok(Dispatched::NoReply { .. }) => {
            reply.no_reply();
            return Ok(());
        }
        Err(DispatchError::ReplyOverrun { .. } | DispatchError::ReplyBufferTooSmall { .. }) => {
            overflow(reply);
            return Ok(());
        }
    };
    reply
        .advance(done.len)
        .map_err(|_| ServiceError::SystemErr)?;
    let mut next = 0;
    for item in done.write_chunks.iter() {
        while next < item.chunk {
            reply.skip_write_chunk();
            next += 1;
        }
        if let Some((buf, at)) = within(registered, item.data) {
            match reply.ddp_result_shared(buf, at, item.data.len()) {
                Ok(()) => {
                    reply.ddp_result_position(item.at as usize);
                    next += 1;
                    continue;
                }
                Err(DdpRefusal::TooLarge { .. }) => {
                    overflow(reply);
                    return Ok(());
                }
                // Not usable as is (not registered): copied below like any other.
                Err(_) => {}
            }
        }
        match reply.ddp_result_from_call(item.data) {
            Ok(()) => {
                reply.ddp_result_position(item.at as usize);
                next += 1;
                continue;
            }
            Err(DdpRefusal::NotHeld) => {}
            Err(DdpRefusal::TooLarge { .. }) => {
                overflow(reply);
                return Ok(());
            }
            Err(_) => return Err(ServiceError::SystemErr),
        }
        let mut buf = reply.alloc_buf().map_err(|_| ServiceError::SystemErr)?;
        if buf.fill(item.data).is_err() {
            // Larger than the engine's DDP buffers: the result cannot be sent as the
            // requester asked, which is an overrun like any other.
            overflow(reply);
            return Ok(());
        }
        reply.ddp_result(buf).map_err(|_| ServiceError::SystemErr)?;
        reply.ddp_result_position(item.at as usize);
        next += 1;
    }
    Ok(())
}

/// Marks the writer overflowed: the engine then answers with ERR_CHUNK.
fn overflow(reply: &mut ReplyWriter<'_>) {
    let past_end = reply.capacity() - reply.len() + 1;
    // The error is the point: it records the overflow in the writer.
    let _ = reply.advance(past_end);
}
