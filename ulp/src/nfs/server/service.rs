//! [`NfsService`]: the engine's `Service` for an NFS server: a [`Dispatcher`] with the
//! NFSv3 program (and whatever else is registered), plus the chunk complexity limits of
//! RFC 8267 §6.4.2 and the per-procedure chunk counters only the transport view shows.

use std::sync::Arc;

use rpcrdma::{
    Backchannel, CallRequest, CallStatus, CallView, Outcome, ReplyWriter, Service, ServiceError,
};

use super::backchannel::{self, CB_NULL};
use super::counters::bump;
use super::program::{NfsProgram, NfsShared};
use crate::ddp::{DdpCursor, DdpEncoder, XdrCodec};
use crate::nfs::v3::args::ReadArgs;
use crate::nfs::v3::procs;
use crate::nfs::NFS_PROGRAM;
use crate::program::{Dispatcher, RegisterError};
use crate::rpc::{CallHeader, ReplyHeader};

/// Octets of an RPC-over-RDMA header with empty chunk lists; each Write chunk echoed
/// back adds a little more (an estimate: one segment each).
const RDMA_HEADER: usize = 28;
const PER_WRITE_CHUNK: usize = 4 + 4 + 16;

/// Most Read chunks at a non-zero position and most Write chunks one NFS call may
/// carry. RFC 8267 §6.4.2 lets a responder refuse more than one of each; NFSv3 has at
/// most one DDP-eligible item per procedure anyway (RFC 8267 §4).
pub const MAX_NFS_CHUNKS: usize = 1;

/// An NFS server connection's upcall.
pub struct NfsService {
    inner: Dispatcher,
    shared: Arc<NfsShared>,
    inline_send: usize,
    /// A CREATE_SESSION on this connection asked for a backchannel: the callback
    /// program to probe with CB_NULL (sent when the connection can call its client:
    /// `rpcrdma::Responder::bind_calling`).
    cb_probe: Option<u32>,
}

/// How long a backchannel call waits for its answer.
const CALLBACK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl core::fmt::Debug for NfsService {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("NfsService")
            .field("inner", &self.inner)
            .field("inline_send", &self.inline_send)
            .finish()
    }
}

impl NfsService {
    /// A service for one connection: NFSv3 over `shared`, registered in `dispatcher`
    /// next to what it already holds. `inline_send` is the connection's inline send
    /// size (`ConnConfig::inline_send`), used to tell which replies went through the
    /// Reply chunk.
    ///
    /// Non-idempotent calls go through the server's duplicate request cache
    /// ([`NfsShared::reply_cache`]) under `dispatcher`'s
    /// [client address](Dispatcher::set_client): the one the embedder set, else the
    /// peer the engine reports when it accepts the connection (`Service::set_peer`:
    /// the client's IP over siw and verbs, its process over shm).
    pub fn new(
        mut dispatcher: Dispatcher,
        shared: Arc<NfsShared>,
        inline_send: usize,
    ) -> Result<NfsService, RegisterError> {
        dispatcher.register(Box::new(NfsProgram::new(shared.clone())))?;
        Ok(NfsService {
            inner: dispatcher,
            shared,
            inline_send,
            cb_probe: None,
        })
    }

    /// The dispatcher, e.g. for its statistics.
    pub fn dispatcher(&self) -> &Dispatcher {
        &self.inner
    }
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    let w = b.get(at..at + 4)?;
    Some(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

impl Service for NfsService {
    fn set_peer(&mut self, peer: rpcrdma::fabric::PeerAddr) {
        self.inner.set_peer(peer);
    }

    fn handle_call(
        &mut self,
        call: &CallView<'_>,
        reply: &mut ReplyWriter<'_>,
    ) -> Result<(), ServiceError> {
        let msg = call.msg();
        // Call header: xid, msg_type, rpcvers, prog, vers, proc.
        let nfs = be32(msg, 12) == Some(NFS_PROGRAM) && be32(msg, 16) == Some(3);
        let procedure = be32(msg, 20).unwrap_or(u32::MAX) as usize;
        if nfs {
            if call.ddp_items().len() > MAX_NFS_CHUNKS {
                bump(&self.shared.counters.chunk_limit);
                return Err(ServiceError::GarbageArgs);
            }
            if call.write_chunks().len() > MAX_NFS_CHUNKS {
                bump(&self.shared.counters.chunk_limit);
                // Past the limit the transport answers ERR_CHUNK (RFC 8166 §4.5.2):
                // mark the writer overflowed, which is how a service asks for it.
                let past_end = reply.capacity() - reply.len() + 1;
                let _ = reply.advance(past_end);
                return Ok(());
            }
        }
        if nfs && procedure == procs::READ as usize {
            if let Some(done) = self.read_direct(call, reply) {
                return done;
            }
        }
        let nfs4 = be32(msg, 12) == Some(NFS_PROGRAM) && be32(msg, 16) == Some(4);
        if nfs4 {
            // Nothing a COMPOUND of another connection left on this thread.
            let _ = backchannel::take_request();
        }
        let r = self.inner.handle_call(call, reply);
        if nfs4 {
            if let Some(program) = backchannel::take_request() {
                self.cb_probe = Some(program);
            }
        }
        if nfs4 && r.is_ok() {
            // Per COMPOUND: operations share the chunks, so they are counted here, and
            // READ's Write chunks per operation by the program.
            let k = &self.shared.counters.compounds;
            if !call.ddp_items().is_empty() {
                bump(&k.read_chunks);
            }
            let header = RDMA_HEADER + PER_WRITE_CHUNK * call.write_chunks().len();
            if call.reply_chunk().is_some()
                && reply.overflow().is_none()
                && reply.len() + header > self.inline_send
            {
                bump(&k.reply_chunks);
            }
        }
        if nfs && r.is_ok() {
            if let Some(k) = self.shared.counters.nfs.get(procedure) {
                if !call.ddp_items().is_empty() {
                    bump(&k.read_chunks);
                }
                let header = RDMA_HEADER + PER_WRITE_CHUNK * call.write_chunks().len();
                if call.reply_chunk().is_some()
                    && reply.overflow().is_none()
                    && reply.len() + header > self.inline_send
                {
                    bump(&k.reply_chunks);
                }
            }
        }
        r
    }

    fn on_done(&mut self, xid: u32) {
        self.inner.on_done(xid);
    }

    fn backchannel(&mut self, calls: &mut Backchannel<'_>) {
        let Some(program) = self.cb_probe else {
            return;
        };
        if !calls.is_open() {
            return;
        }
        // No send buffer now: tried again at the next poll.
        let Ok(mut msg) = calls.alloc_msg() else {
            return;
        };
        self.cb_probe = None;
        let k = &self.shared.counters.callbacks[CB_NULL as usize];
        let Some(n) = backchannel::encode_cb_null(program, msg.storage_mut()) else {
            bump(&k.failed);
            return;
        };
        if msg.set_len(n).is_err() {
            bump(&k.failed);
            return;
        }
        let mut req = CallRequest::new(msg, 256);
        req.timeout = Some(CALLBACK_TIMEOUT);
        match calls.submit(req, u64::from(CB_NULL)) {
            Ok(()) => bump(&k.sent),
            Err(_) => bump(&k.failed),
        }
    }

    fn backchannel_outcome(&mut self, outcome: Outcome) {
        let Some(k) = self.shared.counters.callbacks.get(outcome.tag as usize) else {
            return;
        };
        if outcome.status == CallStatus::Success {
            bump(&k.answered);
        } else {
            bump(&k.failed);
        }
    }
}

impl NfsService {
    /// READ with a Write chunk, zero-copy from the backend: the data is read straight
    /// into a registered buffer from the engine's pool, which the engine RDMA-Writes into
    /// the requester's chunk (the general path reads into the program's buffer and the
    /// dispatcher copies it once). `None` hands the call to the dispatcher instead: no
    /// usable Write chunk, arguments or credentials it must refuse, an NFS error, an
    /// empty result, or no free buffer. Those paths answer exactly as before, so this
    /// only ever saves the copy.
    fn read_direct(
        &mut self,
        call: &CallView<'_>,
        reply: &mut ReplyWriter<'_>,
    ) -> Option<Result<(), ServiceError>> {
        let &[capacity] = call.write_chunks() else {
            return None;
        };
        if capacity == 0 || !call.ddp_items().is_empty() {
            return None;
        }
        let msg = call.msg();
        let (h, at) = CallHeader::decode(msg).ok()?;
        self.inner.auth_policy().check(&h.cred, &h.verf).ok()?;
        let mut c = DdpCursor::inline(msg, at).with_padding(call.padding());
        let a = ReadArgs::decode(&mut c).ok()?;
        c.finish().ok()?;
        let sh = &self.shared;
        let key = sh.open(a.file.0).ok()?;
        let mut buf = reply.alloc_buf().ok()?;
        let want = (a.count.min(sh.config().max_read) as u64)
            .min(capacity)
            .min(buf.capacity() as u64) as usize;
        let done = sh
            .backend()
            .read(key, a.offset, &mut buf.storage_mut()[..want])
            .ok()?;
        let (n, eof, attrs) = (done.len, done.eof, done.attr);
        if n == 0 {
            return None;
        }
        buf.set_len(n).ok()?;
        let head = ReplyHeader::success(h.xid);
        let len = {
            let spare = reply.spare_mut();
            let hlen = head.encode(spare).ok()?;
            let (_, rest) = spare.split_at_mut(hlen);
            let mut e = DdpEncoder::inline(rest, hlen);
            // READ3res: NFS3_OK, post_op_attr, count, eof, then the data's length word;
            // the data itself goes to the Write chunk, without roundup.
            e.u32(0).ok()?;
            attrs.encode(&mut e).ok()?;
            e.u32(n as u32).ok()?;
            e.bool(eof).ok()?;
            e.u32(n as u32).ok()?;
            e.finish().len
        };
        if reply.advance(len).is_err() || reply.ddp_result(buf).is_err() {
            // Cannot be sent as offered: ERR_CHUNK, like any other overrun.
            let past_end = reply.capacity() - reply.len() + 1;
            let _ = reply.advance(past_end);
            return Some(Ok(()));
        }
        if let Some(k) = sh.counters.nfs.get(procs::READ as usize) {
            bump(&k.calls);
            bump(&k.write_chunks);
        }
        bump(&sh.counters.zero_copy_reads);
        Some(Ok(()))
    }
}
