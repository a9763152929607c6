//! The completer: the send CQ's poll retires send-queue requests in posting order, each
//! with the status of its ack (remote requests) or the status it got at post time
//! (local operations, local errors), like an RC requester consuming ACKs.
//!
//! Slots are released only when a completion is reported: an unsignaled request keeps
//! its slot until a later signaled one completes, exactly as verbs send queues behave,
//! so an engine that never signals runs out of send queue here as it would on a NIC.

use std::sync::atomic::Ordering;

use super::qp::QpShared;
use super::segment::{ack, AckState, Acks};
use crate::fabric::{Completion, WcStatus};

/// Retires one queue pair's send queue.
pub(crate) struct Completer {
    acks: Acks,
    /// What the target had acknowledged when last read; reread only when the oldest
    /// outstanding request is not covered yet.
    seen: AckState,
    /// Requests retired so far.
    retired: u64,
    /// After an error, acks still missing are never waited for again.
    abandoned: bool,
}

fn status_of(code: u32) -> WcStatus {
    match code {
        ack::OK => WcStatus::Success,
        ack::RNR_EXCEEDED => WcStatus::RnrRetryExceeded,
        ack::REMOTE_ACCESS => WcStatus::RemoteAccessError,
        ack::REMOTE_INVALID => WcStatus::RemoteInvalidRequest,
        ack::REMOTE_OP => WcStatus::RemoteOperationError,
        _ => WcStatus::BadResponse,
    }
}

impl Completer {
    /// A completer reading the coalesced acks `acks`.
    pub(crate) fn new(acks: Acks) -> Completer {
        Completer {
            acks,
            seen: AckState {
                done: 0,
                nak_ssn1: 0,
                nak_status: 0,
            },
            retired: 0,
            abandoned: false,
        }
    }

    /// The status the target gave request `ssn`: `Ok(None)` while it is not finished,
    /// `Err` if the target's counters make no sense.
    #[inline]
    fn acked(&mut self, qp: &QpShared, ssn: u64) -> Result<Option<WcStatus>, ()> {
        if ssn >= self.seen.done {
            let now = self.acks.read();
            // Loaded after the tail, so it covers every request the target can have
            // seen: the poster stores it before publishing each slot.
            let pushed = qp.posted.req_pushed.load(Ordering::Relaxed);
            if now.done < self.seen.done || now.done > pushed {
                return Err(());
            }
            self.seen = now;
            if ssn >= now.done {
                return Ok(None);
            }
        }
        if ssn + 1 == self.seen.nak_ssn1 {
            Ok(Some(status_of(self.seen.nak_status)))
        } else {
            Ok(Some(WcStatus::Success))
        }
    }

    /// Reports up to `out.len()` send-queue completions.
    pub(crate) fn step(&mut self, qp: &QpShared, out: &mut [Completion]) -> usize {
        // The state is read once per poll: a failure set after this read is seen by
        // the next poll.
        let mut failed = qp.is_error();
        if !failed && qp.peer.get().is_some_and(|p| p.has_failed()) {
            qp.set_error();
            failed = true;
        }
        let posted = qp.posted.sq_posted.load(Ordering::Acquire);
        if self.retired == posted {
            return 0;
        }
        // Acked unsignaled requests report nothing, and a NAK always brings the peer's
        // failed flag (checked above): until a signaled request is outstanding, the
        // acks need not be read at all. Retiring later frees no slot later either:
        // slots come back only with a reported completion.
        if !failed && qp.posted.sq_signaled.load(Ordering::Relaxed) <= self.retired {
            return 0;
        }
        let mut n = 0;
        while n < out.len() && self.retired < posted {
            // SAFETY: retired < posted: published by the poster; we are the consumer.
            let e = unsafe { qp.sq.read(self.retired) };
            let status = if !e.remote {
                e.local
            } else if self.abandoned {
                WcStatus::WrFlushed
            } else {
                match self.acked(qp, e.ssn) {
                    Ok(Some(st)) => st,
                    Ok(None) if !failed => break,
                    Ok(None) => {
                        // In error, and the peer will not answer: flush the rest.
                        self.abandoned = true;
                        WcStatus::WrFlushed
                    }
                    Err(()) => {
                        self.abandoned = true;
                        WcStatus::BadResponse
                    }
                }
            };
            self.retired += 1;
            if !status.is_success() && !failed {
                qp.set_error();
                failed = true;
            }
            if e.signaled || !status.is_success() {
                out[n] = Completion {
                    wr_id: e.wr_id,
                    opcode: e.opcode,
                    status,
                    byte_len: e.byte_len,
                    qp_num: qp.qp_num,
                    invalidated_rkey: None,
                };
                n += 1;
                qp.polled.sq_freed.store(self.retired, Ordering::Release);
            }
        }
        n
    }
}
