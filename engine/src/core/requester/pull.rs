//! Replies in responder-provided Read chunks (draft-cel-nfsv4-rpcrdma-reliable-reply
//! §4.1.2): the requester pulls the reply with RDMA Reads into a large buffer, delivers
//! it, and tells the responder with RDMA_DONE ("pull completion notification") that it
//! may invalidate the chunk: as Send With Invalidate naming the chunk's key when both
//! peers set R (RFC 8797 §4.1; the draft's §4.1.4), else as a plain Send.
//!
//! DONE takes no credit. Each DONE answers one reply the responder exposed, and the
//! responder keeps a receive posted beyond its grant for every reply it can expose at
//! once, so a DONE never lands on a receive a call's credit counts on (the draft's
//! §5.2.3; DESIGN.md, "Responder-provided Read chunks"). DONEs go out from a few
//! dedicated send buffers; when those or the send queue are short, they wait in a
//! queue (sized at setup) drained every poll.

use super::reply::{status_of, PullPlan};
use super::slot::SlotState;
use super::RequesterHalf;
use crate::core::fixed::{FixedQueue, IndexStack};
use crate::core::regbuf::RegBuf;
use crate::core::transport::Transport;
use crate::core::wrid::{WrId, WrKind};
use crate::fabric::{Completion, RemoteAddr, SendOp};
use crate::requester::{BadReply, CallStatus, Reply, TransportError, MAX_WRITE_SINKS};
use crate::wire::header::{BodyRepr, HeaderRepr};

/// Send buffers kept for RDMA_DONE.
pub(super) const DONE_BUFS: u32 = 4;

/// A pull in progress for one call slot.
#[derive(Debug, Clone, Copy)]
pub(super) struct PullState {
    pub(super) plan: PullPlan,
    pub(super) sink_lens: [u32; MAX_WRITE_SINKS],
    /// The key the reply's Send With Invalidate killed, for `answer`.
    pub(super) swi: Option<u32>,
    /// RDMA Reads posted and not yet completed; 0 before they are staged.
    pub(super) pending: u32,
    /// The Reads are staged.
    pub(super) started: bool,
    /// Every Read completed successfully so far.
    pub(super) ok: bool,
}

/// RDMA_DONE's buffers and the DONEs waiting for one.
pub(super) struct Dones {
    bufs: Box<[RegBuf]>,
    free: IndexStack,
    /// (XID, the chunk's first key) of DONEs not yet staged.
    waiting: FixedQueue<(u32, Option<u32>)>,
    /// Slots whose pull waits for a large buffer or send-queue room.
    pub(super) pulls_waiting: FixedQueue<u32>,
}

impl Dones {
    /// `bufs` send buffers for DONEs, room for `queue` waiting DONEs and pulls.
    pub(super) fn new(bufs: Vec<RegBuf>, queue: usize) -> Self {
        let n = bufs.len() as u32;
        Dones {
            bufs: bufs.into_boxed_slice(),
            free: IndexStack::full(n),
            waiting: FixedQueue::with_capacity(queue),
            pulls_waiting: FixedQueue::with_capacity(queue),
        }
    }

    /// Something waits for resources.
    #[inline]
    pub(super) fn busy(&self) -> bool {
        !self.waiting.is_empty() || !self.pulls_waiting.is_empty()
    }

    /// Forgets what waits (the connection failed).
    pub(super) fn clear(&mut self) {
        while self.waiting.pop_front().is_some() {}
        while self.pulls_waiting.pop_front().is_some() {}
    }
}

impl RequesterHalf {
    /// Starts pulling the reply of call `slot` (its `pull` is set): a large buffer and
    /// send-queue room for every segment, then one RDMA Read per segment. False when
    /// resources are short; the caller queues the slot.
    pub(super) fn start_pull(&mut self, t: &mut Transport, slot: u32) -> bool {
        let s = &mut self.slots[slot as usize];
        let Some(p) = s.pull.as_mut() else {
            return true;
        };
        if p.started {
            return true;
        }
        let n = u32::from(p.plan.n);
        if t.sq.free() < n {
            return false;
        }
        if s.pull_buf.is_none() {
            // A Reply chunk buffer the call offered (and the responder did not use)
            // serves as well as a fresh one.
            s.pull_buf = match s.reply_buf.take() {
                Some(b) => Some(b),
                None => match RegBuf::from_cache(&mut self.large) {
                    Ok(b) => Some(b),
                    Err(_) => return false,
                },
            };
        }
        let Some(sink) = s.pull_buf.as_mut() else {
            return false;
        };
        t.sq.take(n);
        let mut off = 0usize;
        let mut staged = 0u32;
        for (k, seg) in p.plan.segs[..usize::from(p.plan.n)].iter().enumerate() {
            let Ok(sge) = sink.sge(off, seg.length as usize) else {
                break;
            };
            let wr_id = WrId::new(WrKind::ReplyPull, slot)
                .with_aux(k as u32)
                .encode();
            let op = SendOp::RdmaRead {
                remote: RemoteAddr {
                    addr: seg.offset,
                    rkey: seg.handle,
                },
            };
            staged += u32::from(t.stage(wr_id, op, &[sge]));
            off += seg.length as usize;
        }
        let _ = sink.set_len(off);
        t.sq.give(n - staged);
        p.started = true;
        p.pending = staged;
        p.ok = staged == n;
        s.wrs += staged;
        if staged == 0 {
            self.finish_pull(t, slot);
        }
        true
    }

    /// An RDMA Read of a pull completed (or was flushed).
    pub(super) fn on_pull_completion(&mut self, t: &mut Transport, id: WrId, wc: &Completion) {
        let Some(s) = self.slots.get_mut(id.slot as usize) else {
            self.stats.stray_completions += 1;
            return;
        };
        let Some(p) = s.pull.as_mut().filter(|p| p.pending > 0 && s.wrs > 0) else {
            self.stats.stray_completions += 1;
            return;
        };
        s.wrs -= 1;
        t.sq.give(1);
        p.pending -= 1;
        p.ok &= wc.status.is_success();
        if p.pending == 0 {
            self.finish_pull(t, id.slot);
        }
    }

    /// Every Read of call `slot`'s pull is back: deliver the reply (unless the call
    /// ended meanwhile) and send RDMA_DONE, pulled successfully or not (§4.1.2).
    fn finish_pull(&mut self, t: &mut Transport, slot: u32) {
        let s = &mut self.slots[slot as usize];
        let Some(p) = s.pull.take() else {
            return;
        };
        let xid = s.xid;
        let key = p.plan.segs.first().map(|g| g.handle);
        self.last_pull = p.plan.segs.first().copied();
        let buf = s.pull_buf.take();
        let waiting = matches!(s.state, SlotState::Sent) && t.is_open();
        match buf {
            Some(buf) if waiting && p.ok => {
                self.stats.read_chunk_replies += 1;
                let reply = Reply {
                    buf,
                    start: 0,
                    len: p.plan.total,
                    padding: None,
                };
                let status = status_of(reply.bytes());
                self.answer(t, slot, status, Some(reply), p.sink_lens, p.swi);
            }
            // Not every segment could be read into the buffer (never: `interpret` bounds
            // the chunk by the buffer's size): the call fails now rather than time out.
            Some(buf) if waiting => {
                buf.release_into(&mut self.large);
                let st =
                    CallStatus::Transport(TransportError::BadReply(BadReply::ReadChunkTooLarge));
                self.answer(t, slot, st, None, [0; MAX_WRITE_SINKS], p.swi);
            }
            Some(buf) => {
                buf.release_into(&mut self.large);
                self.progress(slot);
            }
            None => self.progress(slot),
        }
        self.send_done(t, xid, key);
    }

    /// Sends RDMA_DONE for `xid` (its chunk's first key `key`), now or, when a DONE
    /// buffer or send-queue room is short, from the next poll on.
    pub(super) fn send_done(&mut self, t: &mut Transport, xid: u32, key: Option<u32>) {
        if !t.is_open() || self.drop_dones {
            // The connection is ending: the responder's keys die with it.
            return;
        }
        // In order behind DONEs already waiting. The queue has room for a DONE per call
        // slot and more, so it is never full; if it were, the responder's timeout would
        // invalidate the chunk all the same.
        if (!self.dones.waiting.is_empty() || !self.stage_done(t, xid, key))
            && self.dones.waiting.push_back((xid, key)).is_err()
        {
            self.stats.dones_dropped += 1;
        }
    }

    /// Stages one DONE; false when a buffer or send-queue room is short.
    fn stage_done(&mut self, t: &mut Transport, xid: u32, key: Option<u32>) -> bool {
        if t.sq.free() < 1 {
            return false;
        }
        let Some(i) = self.dones.free.pop() else {
            return false;
        };
        let repr = HeaderRepr {
            xid,
            credit: self.params.credits_requested,
            body: BodyRepr::Done,
        };
        let b = &mut self.dones.bufs[i as usize];
        let sge = repr
            .encode(b.storage_mut())
            .ok()
            .and_then(|n| b.sge(0, n).ok());
        let Some(sge) = sge else {
            let _ = self.dones.free.push(i);
            return true;
        };
        // Only the responder's key of this reply may be named (draft §4.1.4).
        let op = match key {
            Some(rkey) if t.thresholds.remote_invalidate => SendOp::SendWithInvalidate { rkey },
            _ => SendOp::Send,
        };
        t.sq.take(1);
        if t.stage(WrId::new(WrKind::DoneSend, i).encode(), op, &[sge]) {
            self.stats.dones_sent += 1;
        } else {
            t.sq.give(1);
            let _ = self.dones.free.push(i);
        }
        true
    }

    /// Stages a Send of `encode`'s making from a DONE buffer, outside the credit
    /// window like DONE (the requester's ROPT_XMTERR about a reply group: see
    /// `cont.rs`). False, with nothing staged, when no buffer or send-queue entry is
    /// free or `encode` fails.
    pub(super) fn stage_from_done_buf(
        &mut self,
        t: &mut Transport,
        encode: impl FnOnce(&mut [u8]) -> Option<usize>,
    ) -> bool {
        if t.sq.free() < 1 {
            return false;
        }
        let Some(i) = self.dones.free.pop() else {
            return false;
        };
        let b = &mut self.dones.bufs[i as usize];
        let sge = encode(b.storage_mut()).and_then(|n| b.sge(0, n).ok());
        let Some(sge) = sge else {
            let _ = self.dones.free.push(i);
            return false;
        };
        t.sq.take(1);
        if t.stage(
            WrId::new(WrKind::DoneSend, i).encode(),
            SendOp::Send,
            &[sge],
        ) {
            true
        } else {
            t.sq.give(1);
            let _ = self.dones.free.push(i);
            false
        }
    }

    /// A DONE's Send completed (or was flushed): its buffer is free.
    pub(super) fn on_done_completion(&mut self, t: &mut Transport, id: WrId) {
        if id.slot as usize >= self.dones.bufs.len() || self.dones.free.push(id.slot).is_err() {
            self.stats.stray_completions += 1;
            return;
        }
        t.sq.give(1);
    }

    /// Per poll: DONEs and pulls that waited for resources.
    pub(super) fn resume_pulls(&mut self, t: &mut Transport) {
        while let Some(&(xid, key)) = self.dones.waiting.front() {
            if !self.stage_done(t, xid, key) {
                break;
            }
            let _ = self.dones.waiting.pop_front();
        }
        while let Some(&slot) = self.dones.pulls_waiting.front() {
            if !self.start_pull(t, slot) {
                break;
            }
            let _ = self.dones.pulls_waiting.pop_front();
        }
    }
}
