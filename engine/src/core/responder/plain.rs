//! The chunkless fast path: an inline RDMA_MSG call with empty chunk lists, on an
//! established connection, in a context that needs nothing of message continuation or
//! send-based DDP. Nearly every call has this shape. It is served in one pass with the
//! header parsed on arrival: the service runs on a call view with nothing to fill in
//! (no DDP items, no Write chunks, no Reply chunk, no padding), and the reply's Send is
//! staged right after ([`stage_plain_reply`](ResponderHalf::stage_plain_reply)), without
//! the step loop of `advance_with` and the chunk walks of the general `dispatch`. Any
//! other outcome (no large buffer, a reply too large, no send-queue room) leaves the
//! context where the general path picks it up.

use super::context::{Context, Delivery, Step};
use super::ResponderHalf;
use crate::core::regbuf::RegBuf;
use crate::core::transport::{ConnState, Transport, COPY_BEHIND_HEADER_MAX};
use crate::service::{CallView, ReplyWriter, Service};
use crate::wire::header::{BodyView, HeaderView, MIN_MSG_HEADER_LEN};

impl<S: Service> ResponderHalf<S> {
    /// Whether context `i`, just taken for the call with header `h` (parsed and
    /// inspected), can be served by [`serve_plain`](Self::serve_plain).
    #[inline(always)]
    pub(super) fn is_plain(&self, t: &Transport, i: u32, h: &HeaderView<'_>) -> bool {
        let c = &self.ctxs[i as usize];
        t.state == ConnState::Established
            && self.header_waits == 0
            && c.rsbuf == 0
            && c.reply_ddp.is_none()
            && matches!(h.body(), BodyView::Msg(l) if l.is_empty())
    }

    /// Serves context `i`'s chunkless call (see [`is_plain`](Self::is_plain)): the
    /// service, then the reply's Send. False when the context must wait for resources
    /// (its step says for what; the general path resumes it).
    #[inline(always)]
    pub(super) fn serve_plain(&mut self, t: &mut Transport, i: u32, h: &HeaderView<'_>) -> bool {
        match self.dispatch_plain(t, i, h) {
            PlainAnswer::Waits => false,
            PlainAnswer::Inline(_) | PlainAnswer::Other => self.reply_plain(t, i, h),
        }
    }

    /// [`serve_plain`](Self::serve_plain) after the service ran: the reply's Send, or
    /// whatever the general path makes of the context.
    #[inline(always)]
    pub(super) fn reply_plain(&mut self, t: &mut Transport, i: u32, h: &HeaderView<'_>) -> bool {
        match self.ctxs[i as usize].step {
            Step::Reply => match self.stage_plain_reply(t, i, h) {
                Some(progressed) => progressed,
                // A reply that is not plain (too large to go inline, or none: ERR_CHUNK).
                None => self.advance_with(t, i, Some(h)),
            },
            Step::Free | Step::Sent => true,
            _ => self.advance_with(t, i, Some(h)),
        }
    }

    /// [`dispatch`](Self::dispatch) of a chunkless call (the context's XID and step,
    /// `Dispatch`, recorded first): the reply is written behind the
    /// room for its fixed header in the context's send buffer or, when replies may be
    /// exposed in responder-provided Read chunks, in a large buffer (as the general path
    /// does: its size is not known before the service runs).
    #[inline(always)]
    pub(super) fn dispatch_plain(
        &mut self,
        t: &mut Transport,
        i: u32,
        h: &HeaderView<'_>,
    ) -> PlainAnswer {
        let send_th = t.thresholds.send as usize;
        let expose = t.extensions.reply_read_chunks && self.exposed.enabled();
        let Context {
            send,
            body_off,
            sinks,
            body,
            results,
            delivery,
            step,
            xid,
            ..
        } = &mut self.ctxs[i as usize];
        *xid = h.xid();
        *step = Step::Dispatch;
        let send_limit = send_th.min(send.capacity());
        // With replies exposable, the service writes in the responder's spare large buffer
        // where it lies (not moved into the context and back): a short reply is copied
        // behind its header's room in the send buffer below and the spare stays for the
        // next call; only a reply that needs its own buffer takes it.
        let in_spare = expose && body.is_none();
        let body_slice: &mut [u8] = if expose {
            let b = match body {
                Some(b) => b,
                None => match &mut self.spare_body {
                    Some(b) => b,
                    None => match RegBuf::from_cache(&mut self.large) {
                        Ok(b) => self.spare_body.insert(b),
                        Err(_) => return PlainAnswer::Waits,
                    },
                },
            };
            let all = b.storage_mut();
            let n = self.exposed.max_len().min(all.len());
            &mut all[..n]
        } else {
            *body_off = MIN_MSG_HEADER_LEN;
            send.storage_mut()
                .get_mut(MIN_MSG_HEADER_LEN..send_limit)
                .unwrap_or(&mut [])
        };
        let view = CallView {
            xid: h.xid(),
            credit: h.credit(),
            msg: h.after_header(),
            ddp: &[],
            write_chunks: &[],
            reply_chunk: None,
            padding: None,
            long: false,
        };
        let mut writer =
            ReplyWriter::new(body_slice, &[], results, Some(&mut self.large), Some(sinks));
        let result = self.service.handle_call(&view, &mut writer);
        // No reply direction on a plain call: no result positions to note
        // (`Context::result_at` is read only for send-based DDP replies).
        let (len, overflow, no_reply) = (writer.len(), writer.overflow(), writer.is_no_reply());
        let answered = result.is_ok() && overflow.is_none() && !no_reply;
        if in_spare {
            // An error's reply is written in the send buffer's inline area, as without
            // exposure; a reply too long to copy, or not fitting inline, keeps the spare.
            *body_off = MIN_MSG_HEADER_LEN;
            if answered {
                let copied = len <= COPY_BEHIND_HEADER_MAX
                    && match (
                        self.spare_body
                            .as_ref()
                            .and_then(|b| b.storage().get(..len)),
                        send.storage_mut()
                            .get_mut(MIN_MSG_HEADER_LEN..send_limit)
                            .and_then(|room| room.get_mut(..len)),
                    ) {
                        (Some(src), Some(dst)) => {
                            crate::wire::copy::copy_short(dst, src);
                            true
                        }
                        _ => false,
                    };
                if !copied {
                    *body = self.spare_body.take();
                }
            }
        }
        // The common answer: what `dispatched` would record, without looking the
        // context up again, and the length `plain_reply_len` would find (within the
        // inline threshold, behind its header's room or in a buffer of its own).
        if answered && super::reply::plain_send_fits(len, send_th, body.is_some(), *body_off) {
            self.stats.calls += 1;
            *delivery = Delivery::Body { len };
            *step = Step::Reply;
            return PlainAnswer::Inline(len);
        }
        self.dispatched(
            t,
            i,
            result,
            len,
            overflow.is_some(),
            no_reply,
            (MIN_MSG_HEADER_LEN, send_limit),
        );
        PlainAnswer::Other
    }
}

/// What [`dispatch_plain`](ResponderHalf::dispatch_plain) made of a call.
pub(super) enum PlainAnswer {
    /// No large buffer for the body: the context waits in `Step::Dispatch`.
    Waits,
    /// The service answered with a body of this many octets that goes inline (what
    /// [`plain_reply_len`](ResponderHalf::plain_reply_len) would find): the context is
    /// in `Step::Reply` with that delivery, its reply ready for
    /// [`stage_plain_taken`](ResponderHalf::stage_plain_taken).
    Inline(usize),
    /// Anything else (an error, an overflow, no reply, a body in its own buffer): the
    /// context's step says what follows, as after the general dispatch.
    Other,
}
