//! The completer: the send CQ's poll retires send-queue requests in posting order, each
//! with the status of its ack (remote requests) or the status it got at post time
//! (local operations, local errors), like an RC requester consuming ACKs.
//!
//! Slots are released only when a completion is reported: an unsignaled request keeps
//! its slot until a later signaled one completes, exactly as verbs send queues behave,
//! so an engine that never signals runs out of send queue here as it would on a NIC.

use std::sync::atomic::Ordering;

use super::qp::QpShared;
use super::ring::Consumer;
use super::segment::{ack, AckSlot};
use crate::fabric::types::{Completion, WcOpcode, WcStatus};

/// Retires one queue pair's send queue.
pub(crate) struct Completer {
    acks: Consumer<AckSlot>,
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
    /// A completer reading acks from `acks`.
    pub(crate) fn new(acks: Consumer<AckSlot>) -> Completer {
        Completer {
            acks,
            retired: 0,
            abandoned: false,
        }
    }

    /// Reports up to `out.len()` send-queue completions.
    pub(crate) fn step(&mut self, qp: &QpShared, out: &mut [Completion]) -> usize {
        if !qp.is_error() && qp.peer.get().is_some_and(|p| p.has_failed()) {
            qp.set_error();
        }
        let posted = qp.sq_posted.load(Ordering::Acquire);
        let mut failed = qp.is_error();
        let mut n = 0;
        while n < out.len() && self.retired < posted {
            // SAFETY: retired < posted: published by the poster; we are the consumer.
            let e = unsafe { qp.sq.read(self.retired) };
            let (status, byte_len) = if !e.remote {
                (e.local, e.byte_len)
            } else if self.abandoned {
                (WcStatus::WrFlushed, e.byte_len)
            } else {
                match self.acks.peek() {
                    Ok(Some(a)) if a.ssn == e.ssn => {
                        self.acks.advance();
                        let st = status_of(a.status);
                        let len = if e.opcode == WcOpcode::RdmaRead && st.is_success() {
                            a.byte_len
                        } else {
                            e.byte_len
                        };
                        (st, len)
                    }
                    Ok(None) if !failed => break,
                    Ok(None) => {
                        // In error, and the peer will not answer: flush the rest.
                        self.abandoned = true;
                        (WcStatus::WrFlushed, e.byte_len)
                    }
                    Ok(Some(_)) | Err(_) => {
                        self.abandoned = true;
                        (WcStatus::BadResponse, e.byte_len)
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
                    byte_len,
                    qp_num: qp.qp_num,
                    invalidated_rkey: None,
                };
                n += 1;
                qp.sq_freed.store(self.retired, Ordering::Release);
            }
        }
        self.acks.release();
        n
    }
}
