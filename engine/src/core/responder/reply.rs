//! Staging a reply: DDP results into Write chunks, the body inline or into the Reply
//! chunk, and the Send — or ERR_CHUNK when nothing the requester offered can take it
//! (RFC 8166 §3.4.6, §3.5.4).

use super::context::{Context, Delivery, Step};
use super::inspect::MAX_CHUNK_SEGMENTS;
use super::{grant, ResponderHalf};
use crate::core::fixed::FixedVec;
use crate::core::transport::{Transport, COPY_BEHIND_HEADER_MAX};
use crate::core::wrid::{WrId, WrKind};
use crate::fabric::{RemoteAddr, SendOp, Sge};
use crate::service::{Service, MAX_WRITE_CHUNKS};
use crate::wire::header::{
    encode_plain_msg, BodyRepr, ChunkListsRepr, HeaderRepr, HeaderView, RdmaError, ReadSegment,
    Segment, MIN_MSG_HEADER_LEN,
};

/// Splits `len` octets over `segs` in order, filling `echo` with each segment's
/// written length (the segments after the data come back with length zero, RFC 8166
/// §3.4.6); returns the segments echoed and how many carry data. A responder never
/// writes past a segment: the caller checked `len` against the chunk's total.
fn split(
    len: u64,
    segs: impl Iterator<Item = Segment>,
    echo: &mut [Segment; MAX_CHUNK_SEGMENTS],
) -> (usize, u32) {
    let mut rem = len;
    let mut n = 0;
    let mut pieces = 0;
    for (slot, seg) in echo.iter_mut().zip(segs) {
        let piece = rem.min(u64::from(seg.length));
        *slot = Segment::new(seg.handle, piece as u32, seg.offset);
        rem -= piece;
        pieces += u32::from(piece > 0);
        n += 1;
    }
    (n, pieces)
}

impl<S: Service> ResponderHalf<S> {
    /// Stages the reply of context `i`, whose call header is `h`; false when the send
    /// queue lacks room.
    pub(super) fn stage_reply(&mut self, t: &mut Transport, i: u32, h: &HeaderView<'_>) -> bool {
        if let Some(progressed) = self.stage_ddp_reply(t, i) {
            return progressed;
        }
        if let Some(progressed) = self.stage_cont_reply(t, i) {
            return progressed;
        }
        if let Some(progressed) = self.stage_plain_reply(t, i, h) {
            return progressed;
        }
        self.stage_general_reply(t, i, h)
    }

    /// [`stage_reply`](Self::stage_reply) for the common shape: a call without chunks
    /// whose reply fits inline behind a chunkless RDMA_MSG header. The header is
    /// written directly ([`encode_plain_msg`]): right-aligned against a body in the
    /// send buffer, one gather entry; or at the start of the send buffer ahead of a
    /// body in its own buffer, two. For this shape the general path adds nothing else
    /// (no Write list to echo, no Reply chunk, no key to invalidate). `None` for any
    /// other shape.
    #[inline(always)]
    pub(super) fn stage_plain_reply(
        &mut self,
        t: &mut Transport,
        i: u32,
        h: &HeaderView<'_>,
    ) -> Option<bool> {
        if !h.chunk_lists().is_some_and(|l| l.is_empty()) {
            return None;
        }
        let len = self.plain_reply_len(t, i)?;
        Some(self.stage_plain_send(t, i, len))
    }

    /// The length of context `i`'s reply body when it goes in a plain Send (see
    /// [`stage_plain_reply`](Self::stage_plain_reply); the call's chunk lists, checked
    /// there, are the caller's to know empty).
    #[inline(always)]
    pub(super) fn plain_reply_len(&self, t: &Transport, i: u32) -> Option<usize> {
        let c = &self.ctxs[i as usize];
        let Delivery::Body { len } = c.delivery else {
            return None;
        };
        plain_send_fits(
            len,
            t.thresholds.send as usize,
            c.body.is_some(),
            c.body_off,
        )
        .then_some(len)
    }

    /// Stages context `i`'s plain reply of `len` octets (as
    /// [`plain_reply_len`](Self::plain_reply_len) found); false when the send queue
    /// lacks room.
    #[inline(always)]
    pub(super) fn stage_plain_send(&mut self, t: &mut Transport, i: u32, len: usize) -> bool {
        if !t.sq.take(1) {
            return false;
        }
        self.stage_plain_taken(t, i, len);
        true
    }

    /// [`stage_plain_send`](Self::stage_plain_send) once its send-queue slot is taken.
    #[inline(always)]
    pub(super) fn stage_plain_taken(&mut self, t: &mut Transport, i: u32, len: usize) {
        let credit = grant(&self.policy, t);
        let c = &mut self.ctxs[i as usize];
        // The gather list: one entry, or (a body in its own buffer) a second one, kept
        // apart so that the common one-entry Send builds no two-entry array.
        let (first, second) = match c.body.as_ref() {
            Some(b) => {
                let hlen = encode_plain_msg(c.send.storage_mut(), c.xid, credit).unwrap_or(0);
                // A short body is copied behind the header: one gather entry instead of
                // two (as a requester's short call, `COPY_BEHIND_HEADER_MAX`).
                let body = b.storage().get(..len).unwrap_or(&[]);
                match c.send.storage_mut().get_mut(hlen..hlen + len) {
                    Some(room) if len <= COPY_BEHIND_HEADER_MAX && body.len() == len => {
                        crate::wire::copy::copy_short(room, body);
                        let first = c.send.sge(0, hlen + len).unwrap_or_default();
                        // Nothing of the Send points into the body buffer: it is the
                        // next plain call's (`spare_body`), or goes back now.
                        if let Some(b) = c.body.take() {
                            match &self.spare_body {
                                None => self.spare_body = Some(b),
                                Some(_) => b.release_into(&mut self.large),
                            }
                        }
                        (first, None)
                    }
                    _ => (
                        c.send.sge(0, hlen).unwrap_or_default(),
                        Some(b.sge(0, len).unwrap_or_default()),
                    ),
                }
            }
            None => {
                let start = c.body_off - MIN_MSG_HEADER_LEN;
                let dst = c
                    .send
                    .storage_mut()
                    .get_mut(start..c.body_off)
                    .unwrap_or(&mut []);
                let hlen = encode_plain_msg(dst, c.xid, credit).unwrap_or(0);
                (c.send.sge(start, hlen + len).unwrap_or_default(), None)
            }
        };
        self.stats.inline_replies += 1;
        let wr_id = WrId::new(WrKind::ReplySend, i).encode();
        // One gather entry (nearly every reply) straight to `stage_one`, inlined here:
        // no out-of-line `stage` call and list-length dispatch per reply.
        let staged = match second {
            None => t.stage_one(wr_id, SendOp::Send, first),
            Some(second) => t.stage(wr_id, SendOp::Send, &[first, second]),
        };
        // Staged (always, but for an outbox bookkeeping bug): the slot taken is the
        // Send's; else it goes back. A branch rather than arithmetic on the flag.
        if staged {
            c.wrs += 1;
        } else {
            t.sq.give(1);
        }
        c.step = Step::Sent;
    }

    /// [`stage_reply`](Self::stage_reply) for every shape: Write chunks, a Reply
    /// chunk, a responder-provided Read chunk, an inline body in its own buffer.
    #[inline(never)]
    fn stage_general_reply(&mut self, t: &mut Transport, i: u32, h: &HeaderView<'_>) -> bool {
        let th = t.thresholds;
        let th_ext = t.extensions;
        let credit = grant(&self.policy, t);
        let c = &mut self.ctxs[i as usize];
        let Context {
            send,
            body_off,
            body,
            sinks,
            results,
            delivery,
            wrs,
            step,
            xid,
            ..
        } = c;
        let Some(lists) = h.chunk_lists() else {
            *step = Step::Error(RdmaError::Chunk);
            return true;
        };
        let Delivery::Body { len } = *delivery else {
            results.clear();
            *step = Step::Error(RdmaError::Chunk);
            return true;
        };

        // The Write list comes back with the octets written; unused chunks come back
        // empty (RFC 8166 §3.4.6).
        // The echo table is 2 KiB: only calls with a Write list pay for clearing it.
        let mut echo_store;
        let echo: &mut [[Segment; MAX_CHUNK_SEGMENTS]] = if lists.write_list().next().is_some() {
            echo_store = [[Segment::default(); MAX_CHUNK_SEGMENTS]; MAX_WRITE_CHUNKS];
            &mut echo_store
        } else {
            &mut []
        };
        let mut echo_n = [0usize; MAX_WRITE_CHUNKS];
        let mut n_chunks = 0;
        let mut ddp_writes = 0u32;
        for (k, chunk) in lists.write_list().enumerate().take(echo.len()) {
            n_chunks = k + 1;
            if let (Some(Some(data)), Some(e)) = (results.get(k), echo.get_mut(k)) {
                let (n, pieces) = split(data.len() as u64, chunk, e);
                echo_n[k] = n;
                ddp_writes += pieces;
            }
        }
        let echo: &[[Segment; MAX_CHUNK_SEGMENTS]] = echo;
        // Only the chunks there are (none, for most replies), rather than all
        // `MAX_WRITE_CHUNKS` places of an array.
        let mut refs: FixedVec<&[Segment], MAX_WRITE_CHUNKS> = FixedVec::new();
        for k in 0..n_chunks {
            let _ = refs.push(echo.get(k).map_or(&[][..], |e| &e[..echo_n[k]]));
        }
        let writes = refs.as_slice();
        let inline_repr = HeaderRepr {
            xid: *xid,
            credit,
            body: BodyRepr::Msg(ChunkListsRepr {
                reads: &[],
                writes,
                reply: None,
            }),
        };
        let inline_hlen = inline_repr.encoded_len();
        let reply_chunk = lists.reply_chunk();
        // A usable Reply chunk is used whatever the reply's size, then inline, then a
        // responder-provided Read chunk (draft-cel-nfsv4-rpcrdma-reliable-reply §5.3.2;
        // Linux nfsd does the same): the requester registered it and invalidates it
        // either way, and a reply that fills it needs no receive of the inline size.
        let chunk_fits = body.is_some()
            && reply_chunk
                .as_ref()
                .is_some_and(|r| len as u64 <= r.total_length());
        let inline = !chunk_fits
            && inline_hlen + len <= th.send as usize
            && (body.is_some() || inline_hlen <= *body_off);
        let mut reply_echo = [Segment::default(); MAX_CHUNK_SEGMENTS];
        let mut reply_n = 0;
        let mut reply_writes = 0;
        // A reply that fits neither inline nor the Reply chunk goes in a
        // responder-provided Read chunk when both peers support them (draft §4.1.1):
        // a FastReg now and a LocalInvalidate later, on room held from now.
        let mut expose = false;
        if !inline {
            match (&reply_chunk, body.as_ref()) {
                (Some(r), Some(_)) if len as u64 <= r.total_length() => {
                    let (n, pieces) = split(len as u64, r.clone(), &mut reply_echo);
                    reply_n = n;
                    reply_writes = pieces;
                }
                (_, Some(_))
                    if th_ext.reply_read_chunks
                        && self.exposed.enabled()
                        && len <= self.exposed.max_len() =>
                {
                    expose = true;
                }
                _ => {
                    results.clear();
                    *step = Step::Error(RdmaError::Chunk);
                    return true;
                }
            }
        }
        let need = ddp_writes + reply_writes + 1 + 2 * u32::from(expose);
        if !t.sq.take(need) {
            return false;
        }
        // Registered first, so the key is valid before the Send advertises it.
        let mut read_seg = [ReadSegment::default(); 1];
        if expose {
            let Some(b) = body.take() else {
                t.sq.give(need);
                *step = Step::Error(RdmaError::Chunk);
                return true;
            };
            let deadline = self.now.map(|n| n + self.done_timeout);
            match self.exposed.expose(t, *xid, b, len, deadline) {
                Ok(seg) => {
                    read_seg[0] = ReadSegment {
                        position: 0,
                        segment: seg,
                    };
                    self.stats.read_chunk_replies += 1;
                }
                Err(b) => {
                    // Every slot holds a reply whose DONE has not come: wait for one
                    // (or for its timeout).
                    *body = Some(b);
                    t.sq.give(need);
                    return false;
                }
            }
        }
        // The FastReg is the exposed entry's; the LocalInvalidate's room stays held.
        let need = need - 2 * u32::from(expose);

        let mut staged = 0u32;
        let mut seq = 0u32;
        let mut write = |t: &mut crate::core::transport::Transport, sge: Sge, seg: &Segment| {
            let wr_id = WrId::new(WrKind::ChunkWrite, i).with_aux(seq).encode();
            seq += 1;
            let op = SendOp::RdmaWrite {
                remote: RemoteAddr {
                    addr: seg.offset,
                    rkey: seg.handle,
                },
            };
            staged += u32::from(t.stage(wr_id, op, &[sge]));
        };
        for k in 0..n_chunks {
            let Some(Some(data)) = results.get(k) else {
                continue;
            };
            let mut off = 0usize;
            for seg in echo[k][..echo_n[k]].iter().filter(|s| s.length > 0) {
                if let Some(sge) = data.sge(sinks, off, seg.length as usize) {
                    write(t, sge, seg);
                }
                off += seg.length as usize;
            }
            self.stats.ddp_results += 1;
            self.stats.ddp_zero_copy += u64::from(data.is_zero_copy());
        }
        if let (false, Some(b)) = (inline, body.as_ref()) {
            let mut off = 0usize;
            for seg in reply_echo[..reply_n].iter().filter(|s| s.length > 0) {
                if let Ok(sge) = b.sge(off, seg.length as usize) {
                    write(t, sge, seg);
                }
                off += seg.length as usize;
            }
        }

        // The Send: header (and inline body) last, so the writes are placed first.
        let mut sgl = [Sge::default(); 2];
        let n_sge;
        if inline {
            match body.as_ref() {
                Some(b) => {
                    let hlen = inline_repr.encode(send.storage_mut()).unwrap_or(0);
                    sgl[0] = send.sge(0, hlen).unwrap_or_default();
                    sgl[1] = b.sge(0, len).unwrap_or_default();
                    n_sge = 2;
                }
                None => {
                    // Right-aligned against the body, so header and body are one
                    // contiguous gather entry.
                    let start = *body_off - inline_hlen;
                    let dst = send
                        .storage_mut()
                        .get_mut(start..*body_off)
                        .unwrap_or(&mut []);
                    let hlen = inline_repr.encode(dst).unwrap_or(0);
                    sgl[0] = send.sge(start, hlen + len).unwrap_or_default();
                    n_sge = 1;
                }
            }
            self.stats.inline_replies += 1;
        } else if expose {
            let repr = HeaderRepr {
                xid: *xid,
                credit,
                body: BodyRepr::Nomsg(ChunkListsRepr {
                    reads: &read_seg,
                    writes,
                    reply: None,
                }),
            };
            let hlen = repr.encode(send.storage_mut()).unwrap_or(0);
            sgl[0] = send.sge(0, hlen).unwrap_or_default();
            n_sge = 1;
        } else {
            let repr = HeaderRepr {
                xid: *xid,
                credit,
                body: BodyRepr::Nomsg(ChunkListsRepr {
                    reads: &[],
                    writes,
                    reply: Some(&reply_echo[..reply_n]),
                }),
            };
            let hlen = repr.encode(send.storage_mut()).unwrap_or(0);
            sgl[0] = send.sge(0, hlen).unwrap_or_default();
            n_sge = 1;
            self.stats.chunk_replies += 1;
        }
        // A reassembled call's header names no key of the requester's.
        let swi = if th.remote_invalidate && !c.assembled {
            reply_chunk
                .and_then(|mut r| r.next())
                .or_else(|| lists.write_list().find_map(|mut w| w.next()))
                .map(|s| s.handle)
                .or_else(|| lists.read_list().next().map(|r| r.segment.handle))
        } else {
            None
        };
        let op = match swi {
            Some(rkey) => {
                self.stats.remote_invalidations += 1;
                SendOp::SendWithInvalidate { rkey }
            }
            None => SendOp::Send,
        };
        let wr_id = WrId::new(WrKind::ReplySend, i).encode();
        staged += u32::from(t.stage(wr_id, op, &sgl[..n_sge]));
        t.sq.give(need - staged);
        *wrs += staged;
        *step = Step::Sent;
        true
    }
}

/// Whether a reply body of `len` octets goes in one plain Send under a send threshold of
/// `send_th`: within the threshold with its header, and either in a body buffer of its
/// own (`has_body`) or written at `body_off` behind the room for its header in the send
/// buffer. What [`plain_reply_len`](ResponderHalf::plain_reply_len) asks of a context,
/// and `dispatch_plain` of an answer it has at hand.
#[inline(always)]
pub(super) fn plain_send_fits(len: usize, send_th: usize, has_body: bool, body_off: usize) -> bool {
    MIN_MSG_HEADER_LEN + len <= send_th && (has_body || body_off >= MIN_MSG_HEADER_LEN)
}
