//! [`NfsService`]: the engine's `Service` for an NFS server: a [`Dispatcher`] with the
//! NFSv3 program (and whatever else is registered), plus the chunk complexity limits of
//! RFC 8267 §6.4.2 and the per-procedure chunk counters only the transport view shows.

use std::sync::Arc;

use rpcrdma::{
    Backchannel, CallRequest, CallStatus, CallView, Outcome, ReplyWriter, Service, ServiceError,
};

use super::backchannel::{self, Binding, CB_COMPOUND, CB_NULL, CB_RECALL_TAG};
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
    /// The backchannel a CREATE_SESSION on this connection asked for (used when the
    /// connection can call its client: `rpcrdma::Responder::bind_calling`).
    cb: Option<Binding>,
    /// CB_NULL is still to be sent on it.
    cb_probe: bool,
    /// The last CB_SEQUENCE sequence id used on its slot 0.
    cb_seq: u32,
    /// The delegation (stateid `other`) whose CB_RECALL is out: one at a time, as the
    /// backchannel has one slot.
    recall_out: Option<[u8; 12]>,
    /// [`Nfs41State::recalls_queued`](super::v41::Nfs41State::recalls_queued) when this
    /// connection last found no recall of its client to send.
    recalls_seen: u64,
    /// Look into the table at the next poll whatever the count says.
    recall_look: bool,
    /// A file handle being encoded for CB_RECALL (kept, so it does not allocate).
    fh: Vec<u8>,
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
            cb: None,
            cb_probe: false,
            cb_seq: 0,
            recall_out: None,
            recalls_seen: 0,
            recall_look: false,
            fh: Vec::new(),
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
            if let Some(b) = backchannel::take_request() {
                self.cb = Some(b);
                self.cb_probe = true;
                self.cb_seq = 0;
                self.recall_out = None;
                self.recall_look = true;
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
        let Some(b) = self.cb else {
            return;
        };
        if !calls.is_open() {
            return;
        }
        if !self.cb_probe {
            self.recall(b, calls);
            return;
        }
        // No send buffer now: tried again at the next poll.
        let Ok(mut msg) = calls.alloc_msg() else {
            return;
        };
        self.cb_probe = false;
        let k = &self.shared.counters.callbacks[CB_NULL as usize];
        let Some(n) = backchannel::encode_cb_null(b.program, msg.storage_mut()) else {
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
        let counters = &self.shared.counters;
        let Some(k) = counters.callbacks.get(outcome.tag as usize) else {
            return;
        };
        let answered = outcome.status == CallStatus::Success;
        if outcome.tag == u64::from(CB_RECALL_TAG) {
            // Answered means the client said NFS4_OK: it will return the delegation.
            let status = outcome
                .reply
                .as_ref()
                .filter(|_| answered)
                .and_then(|r| backchannel::cb_compound_status(r.bytes()));
            let ok = status == Some(0);
            let compound = &counters.callbacks[CB_COMPOUND as usize];
            bump(if answered {
                &compound.answered
            } else {
                &compound.failed
            });
            bump(if ok { &k.answered } else { &k.failed });
            if let Some(other) = self.recall_out.take() {
                if self.shared.v41().lock().recall_answered(&other, ok) {
                    bump(&counters.delegations_revoked);
                }
            }
            self.recall_look = true;
            return;
        }
        if answered {
            bump(&k.answered);
        } else {
            bump(&k.failed);
        }
        if outcome.tag == u64::from(CB_NULL) && answered {
            // The callback path works: this client may be given delegations.
            if let Some(b) = self.cb {
                self.shared.v41().lock().callback_up(b.client);
            }
        }
    }
}

impl NfsService {
    /// Sends the next recall queued for the client of this connection's backchannel,
    /// if none is out. Looks into the shared table only when a recall was queued since
    /// it last found none (an atomic load per poll otherwise).
    fn recall(&mut self, b: Binding, calls: &mut Backchannel<'_>) {
        if self.recall_out.is_some() {
            return;
        }
        let v41 = self.shared.v41();
        let queued = v41.recalls_queued();
        if queued == self.recalls_seen && !self.recall_look {
            return;
        }
        let Ok(mut msg) = calls.alloc_msg() else {
            return;
        };
        let Some(order) = v41.lock().next_recall(b.client) else {
            self.recalls_seen = queued;
            self.recall_look = false;
            return;
        };
        let counters = &self.shared.counters;
        let k = &counters.callbacks[CB_RECALL_TAG as usize];
        let compound = &counters.callbacks[CB_COMPOUND as usize];
        self.fh.clear();
        self.fh
            .extend_from_slice(self.shared.handle(order.file).as_bytes());
        let seq = self.cb_seq.wrapping_add(1).max(1);
        let n = backchannel::encode_cb_recall(
            b.program,
            &b.session,
            seq,
            &order.stateid,
            &self.fh,
            msg.storage_mut(),
        );
        let sent = n.is_some_and(|n| msg.set_len(n).is_ok()) && {
            let mut req = CallRequest::new(msg, 512);
            req.timeout = Some(CALLBACK_TIMEOUT);
            calls.submit(req, u64::from(CB_RECALL_TAG)).is_ok()
        };
        if sent {
            self.cb_seq = seq;
            self.recall_out = Some(order.stateid.other);
            bump(&k.sent);
            bump(&compound.sent);
        } else {
            // Cannot be called back: the delegation is revoked at once.
            bump(&k.failed);
            if v41.lock().recall_answered(&order.stateid.other, false) {
                bump(&counters.delegations_revoked);
            }
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
