//! The data path of one queue pair, owned by the device engine: where each posted
//! request stands, the RDMA Reads in flight both ways, and completion reporting.
//!
//! Transmission is in [`super::tx`], reception in [`super::rx`]. Everything here is
//! preallocated when the queue pair is created.
//!
//! # Send-queue life cycle
//!
//! A request is *started* in posting order (`next`): local operations execute there,
//! others become messages. A Send or Write whose last FPDU is written is *sent*; it is
//! done once the peer provably executed it (see [`SiwConfig::confirm_completions`]): an
//! RDMA Read Response (ours, or a zero-length one asked for that purpose) proves that
//! every message before the Read Request was executed, since the peer handles its
//! inbound stream in order and would have answered a failure with a Terminate instead.
//! Requests are *retired* in posting order (`head`), reporting a completion when
//! signaled or failed; retiring frees the slot.
//!
//! [`SiwConfig::confirm_completions`]: super::SiwConfig::confirm_completions

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::cq::CqTable;
use super::qp::QpShared;
use super::rx::RxState;
use super::term::{blames_a_message, status_for, TermOut};
use super::tx::TxState;
use crate::fabric::{Completion, SendOp, WcOpcode, WcStatus};
use crate::iwarp::ddp::MsnCounters;
use crate::iwarp::rdmap::{Opcode, Placement, SegmentHeader};
use crate::iwarp::terminate::{Terminate, TerminateCode};

/// A small fixed-capacity queue.
pub(crate) struct Fifo<T> {
    items: Box<[T]>,
    head: usize,
    len: usize,
}

impl<T: Copy> Fifo<T> {
    pub(crate) fn new(cap: usize, empty: T) -> Fifo<T> {
        Fifo {
            items: vec![empty; cap.max(1)].into_boxed_slice(),
            head: 0,
            len: 0,
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends; `false` (and nothing appended) when full.
    pub(crate) fn push(&mut self, v: T) -> bool {
        if self.len == self.items.len() {
            return false;
        }
        let at = (self.head + self.len) % self.items.len();
        self.items[at] = v;
        self.len += 1;
        true
    }

    #[inline]
    pub(crate) fn front(&self) -> Option<&T> {
        (self.len > 0).then(|| &self.items[self.head])
    }

    #[inline]
    pub(crate) fn front_mut(&mut self) -> Option<&mut T> {
        (self.len > 0).then(|| &mut self.items[self.head])
    }

    pub(crate) fn pop(&mut self) -> Option<T> {
        let v = *self.front()?;
        self.head = (self.head + 1) % self.items.len();
        self.len -= 1;
        Some(v)
    }

    pub(crate) fn clear(&mut self) {
        self.len = 0;
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        (0..self.len).map(move |i| &self.items[(self.head + i) % self.items.len()])
    }
}

/// Where a started send-queue request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SqState {
    /// Being transmitted, or (RDMA Read) waiting for its response.
    Busy,
    /// Written to the socket; waiting for proof the peer executed it.
    Sent,
    /// Finished with this status.
    Done(WcStatus),
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct SqEntry {
    pub(crate) state: SqState,
    /// MSN of the message (Send queue or Read Request queue), for matching Terminates.
    pub(crate) msn: u32,
}

/// Send-queue progress.
pub(crate) struct SqTrack {
    entries: Box<[SqEntry]>,
    mask: u64,
    /// Next request to start.
    pub(crate) next: u64,
    /// Next request to retire.
    pub(crate) head: u64,
    /// Sent requests below this sequence number are executed by the peer.
    pub(crate) confirmed: u64,
    /// The oldest sent request no outstanding Read covers (a zero-length Read would).
    pub(crate) uncovered: Option<u64>,
    /// The newest started request that wants a completion.
    pub(crate) signaled: Option<u64>,
}

impl SqTrack {
    fn new(depth: u32) -> SqTrack {
        let n = depth.next_power_of_two();
        SqTrack {
            entries: vec![
                SqEntry {
                    state: SqState::Busy,
                    msn: 0
                };
                n as usize
            ]
            .into_boxed_slice(),
            mask: u64::from(n - 1),
            next: 0,
            head: 0,
            confirmed: 0,
            uncovered: None,
            signaled: None,
        }
    }

    #[inline]
    pub(crate) fn entry(&mut self, seq: u64) -> &mut SqEntry {
        &mut self.entries[(seq & self.mask) as usize]
    }

    /// Where request `seq` stands (diagnostics).
    pub(crate) fn state(&self, seq: u64) -> SqState {
        self.entries[(seq & self.mask) as usize].state
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct RqEntry {
    pub(crate) done: bool,
    pub(crate) status: WcStatus,
    pub(crate) byte_len: u32,
    pub(crate) inval: Option<u32>,
}

/// Receive-queue progress.
pub(crate) struct RqTrack {
    entries: Box<[RqEntry]>,
    mask: u64,
    /// Next receive an inbound Send takes.
    pub(crate) next: u64,
    /// Next receive to report.
    pub(crate) head: u64,
}

impl RqTrack {
    fn new(depth: u32) -> RqTrack {
        let n = depth.next_power_of_two();
        RqTrack {
            entries: vec![
                RqEntry {
                    done: false,
                    status: WcStatus::Success,
                    byte_len: 0,
                    inval: None,
                };
                n as usize
            ]
            .into_boxed_slice(),
            mask: u64::from(n - 1),
            next: 0,
            head: 0,
        }
    }

    #[inline]
    pub(crate) fn entry(&mut self, seq: u64) -> &mut RqEntry {
        &mut self.entries[(seq & self.mask) as usize]
    }
}

/// An RDMA Read of ours waiting for its response (or a zero-length confirmation Read).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outstanding {
    /// The request, or `None` for a confirmation Read.
    pub(crate) seq: Option<u64>,
    /// Send-queue requests below this were sent before the Read Request.
    pub(crate) covers: u64,
    pub(crate) sink_stag: u32,
    pub(crate) sink_to: u64,
    pub(crate) size: u64,
    pub(crate) placed: u64,
    pub(crate) msn: u32,
}

impl Outstanding {
    pub(crate) const EMPTY: Outstanding = Outstanding {
        seq: None,
        covers: 0,
        sink_stag: 0,
        sink_to: 0,
        size: 0,
        placed: 0,
        msn: 0,
    };
}

/// A peer's RDMA Read we owe a response to (already checked against our key table).
#[derive(Debug, Clone, Copy)]
pub(crate) struct InboundRead {
    pub(crate) sink_stag: u32,
    pub(crate) sink_to: u64,
    pub(crate) size: u64,
    pub(crate) source: u64,
}

impl InboundRead {
    pub(crate) const EMPTY: InboundRead = InboundRead {
        sink_stag: 0,
        sink_to: 0,
        size: 0,
        source: 0,
    };
}

/// What the MPA exchange settled for the connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Link {
    pub(crate) crc: bool,
    /// Largest ULPDU we send.
    pub(crate) mulpdu: usize,
    /// Times a long message may still look the MSS up again before its first FPDU
    /// ([`Engine::refresh_mulpdu`]).
    pub(crate) mss_checks: u16,
    /// Outbound Reads we may have outstanding (ours, capped by the peer's IRD).
    pub(crate) ord: usize,
    /// Inbound Reads we accept outstanding.
    pub(crate) ird: usize,
}

/// One queue pair's data path.
pub(crate) struct Engine {
    pub(crate) qp: Arc<QpShared>,
    pub(crate) send_cq: usize,
    pub(crate) recv_cq: usize,
    pub(crate) confirm: bool,
    pub(crate) link: Link,
    pub(crate) sq: SqTrack,
    pub(crate) rq: RqTrack,
    pub(crate) orq: Fifo<Outstanding>,
    pub(crate) irq: Fifo<InboundRead>,
    pub(crate) msn_out: MsnCounters,
    pub(crate) msn_in: MsnCounters,
    pub(crate) rx: RxState,
    pub(crate) tx: TxState,
    /// The queue pair failed: nothing more is executed, everything is flushed.
    pub(crate) failed: bool,
    /// The Terminate the peer sent, if any.
    pub(crate) peer_terminate: Option<TerminateCode>,
    /// Waking a peer that has not answered yet (see [`Wake`]).
    pub(crate) wake: Wake,
    /// The arenas of the queue pair's protection domain: held for as long as the driver
    /// keeps this engine, so memory a transfer in progress reads or writes stays mapped
    /// even when the application drops its registrations first.
    pub(crate) memory: Option<Arc<super::mr::PdMemory>>,
}

/// Linux siw (6.1) moves a passive connection's socket from its connection manager to
/// the queue pair only after it has sent the MPA Reply, so FPDUs arriving in between
/// stay unread in its socket until more data arrives. Until the first FPDU from the
/// peer is seen, a zero-length RDMA Read (harmless, and it also confirms) is sent 10 ms,
/// 50 ms, 250 ms... after our first FPDU went out, which wakes such a peer. Only
/// connection start-up pays for the clock reads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wake {
    /// An FPDU from the peer arrived: never wake again.
    pub(crate) heard: bool,
    /// When to send the next wake-up, once our first FPDU went out.
    pub(crate) next: Option<std::time::Instant>,
    pub(crate) interval: std::time::Duration,
    pub(crate) left: u8,
}

impl Wake {
    const FIRST: std::time::Duration = std::time::Duration::from_millis(10);
    const TRIES: u8 = 6;

    fn new() -> Wake {
        Wake {
            heard: false,
            next: None,
            interval: Wake::FIRST,
            left: Wake::TRIES,
        }
    }

    /// Our first FPDU was written now.
    #[inline]
    pub(crate) fn sent(&mut self) {
        if !self.heard && self.next.is_none() {
            self.next = Some(std::time::Instant::now() + self.interval);
        }
    }

    /// Whether a wake-up is due (reads the clock only during start-up).
    #[inline]
    pub(crate) fn due(&self) -> bool {
        !self.heard && self.left > 0 && self.next.is_some_and(|t| std::time::Instant::now() >= t)
    }

    pub(crate) fn fired(&mut self) {
        self.left -= 1;
        self.interval *= 5;
        self.next = Some(std::time::Instant::now() + self.interval);
    }
}

impl Engine {
    pub(crate) fn new(
        qp: Arc<QpShared>,
        send_cq: usize,
        recv_cq: usize,
        confirm: bool,
        max_ord: u16,
        max_ird: u16,
    ) -> Engine {
        let caps = qp.caps;
        Engine {
            send_cq,
            recv_cq,
            confirm,
            link: Link {
                crc: false,
                mulpdu: 1024,
                mss_checks: 0,
                ord: usize::from(max_ord),
                ird: usize::from(max_ird),
            },
            sq: SqTrack::new(caps.max_send_wr),
            rq: RqTrack::new(caps.max_recv_wr),
            orq: Fifo::new(usize::from(max_ord), Outstanding::EMPTY),
            irq: Fifo::new(usize::from(max_ird), InboundRead::EMPTY),
            msn_out: MsnCounters::new(),
            msn_in: MsnCounters::new(),
            rx: RxState::new(false),
            tx: TxState::new(),
            failed: false,
            peer_terminate: None,
            wake: Wake::new(),
            qp,
            memory: None,
        }
    }

    /// Sets what the MPA exchange negotiated; the stream starts here.
    pub(crate) fn establish(&mut self, link: Link) {
        self.link = Link {
            ord: link.ord.min(self.orq_capacity()),
            ird: link.ird.min(self.irq_capacity()),
            ..link
        };
        let predict = self.rx.predict;
        self.rx = RxState::new(link.crc);
        self.rx.predict = predict;
    }

    fn orq_capacity(&self) -> usize {
        self.orq.items.len()
    }

    fn irq_capacity(&self) -> usize {
        self.irq.items.len()
    }

    /// The receive an inbound Send may take, if one is posted: its sequence number (its
    /// slot is read in place, and stays the engine's until the receive is retired).
    pub(crate) fn take_receive(&mut self) -> Option<u64> {
        if let Some(srq) = &self.qp.srq {
            // Taken receives wait in our own ring until reported; a full ring (its
            // completion queue not polled) is as good as no receive.
            let held = self.rq.next - self.rq.head;
            if held >= u64::from(self.qp.caps.max_recv_wr) {
                return None;
            }
            let w = srq.take()?;
            let seq = self.rq.next;
            // SAFETY: the queue pair's handle posts nothing to `rq` while attached to a
            // shared queue (refused), so the engine is this ring's only user; `seq` is
            // below `head + depth`, so not a slot awaiting its report.
            unsafe { self.qp.rq.write(seq, w) };
            self.rq.next += 1;
            *self.rq.entry(seq) = RqEntry {
                done: false,
                status: WcStatus::Success,
                byte_len: 0,
                inval: None,
            };
            return Some(seq);
        }
        let posted = self.qp.rq_posted.load(Ordering::Acquire);
        if self.rq.next >= posted {
            return None;
        }
        let seq = self.rq.next;
        self.rq.next += 1;
        *self.rq.entry(seq) = RqEntry {
            done: false,
            status: WcStatus::Success,
            byte_len: 0,
            inval: None,
        };
        Some(seq)
    }

    /// Gives back the pages of the receives posted and not yet taken: an idle
    /// connection's 32 posted 4 KiB receives otherwise stay resident once a message has
    /// landed in each. Only this engine (the driver thread, like this call) writes into
    /// a posted receive, and only after taking it, so nothing is writing these pages;
    /// their contents do not matter (a receive's buffer belongs to the device until its
    /// completion) and they fault back in, zeroed, when the next message lands. Only
    /// ranges that pass the local-write key check of the queue pair's domain are
    /// touched, so a receive posted with a bad address releases nothing (its message
    /// fails the same check later). Receives of a shared queue are the group's to
    /// manage. Returns the octets released.
    pub(crate) fn release_posted_receives(&self, keys: &super::keys::KeyTable) -> usize {
        let Some(memory) = self.memory.as_ref() else {
            return 0;
        };
        if self.qp.srq.is_some() {
            return 0;
        }
        let posted = self.qp.rq_posted.load(Ordering::Acquire);
        let mut released = 0;
        for seq in self.rq.next..posted {
            // SAFETY: `seq` is published (below `posted`) and not taken (at or past
            // `next`), and only the engine reads receive slots.
            let w = unsafe { self.qp.rq.read(seq) };
            for s in w.sgl() {
                let len = u64::from(s.length);
                if keys
                    .check(
                        s.lkey,
                        self.qp.pd,
                        crate::fabric::Access::LOCAL_WRITE,
                        s.addr,
                        len,
                    )
                    .is_ok()
                {
                    released += memory.release(s.addr, len);
                }
            }
        }
        released
    }

    /// Finishes receive `seq`.
    pub(crate) fn finish_receive(
        &mut self,
        seq: u64,
        status: WcStatus,
        byte_len: u32,
        inval: Option<u32>,
    ) {
        *self.rq.entry(seq) = RqEntry {
            done: true,
            status,
            byte_len,
            inval,
        };
    }

    /// Moves to the error state: nothing more is executed; everything not finished
    /// completes as flushed. A Terminate already queued still goes out.
    pub(crate) fn fail(&mut self) {
        if self.failed {
            return;
        }
        self.failed = true;
        self.qp.set_error();
        let confirmed = self.sq.confirmed;
        let confirm = self.confirm;
        for seq in self.sq.head..self.sq.next {
            let e = self.sq.entry(seq);
            e.state = match e.state {
                SqState::Done(s) => SqState::Done(s),
                // Proven executed before the failure: it succeeded.
                SqState::Sent if !confirm || seq < confirmed => SqState::Done(WcStatus::Success),
                _ => SqState::Done(WcStatus::WrFlushed),
            };
        }
        for seq in self.rq.head..self.rq.next {
            let e = self.rq.entry(seq);
            if !e.done {
                *e = RqEntry {
                    done: true,
                    status: WcStatus::WrFlushed,
                    byte_len: 0,
                    inval: None,
                };
            }
        }
        self.orq.clear();
        self.irq.clear();
        self.rx.abandon();
        self.tx.abandon();
    }

    /// Fails the queue pair after telling the peer why with a Terminate.
    pub(crate) fn terminate(&mut self, t: TermOut) {
        if self.failed {
            return;
        }
        self.tx.queue_terminate(t);
        self.fail();
    }

    /// The peer sent a Terminate: the request it names fails with the matching status,
    /// the ones before it were executed, everything else is flushed.
    pub(crate) fn on_peer_terminate(&mut self, t: &Terminate<'_>) {
        self.peer_terminate = Some(t.code);
        // Before `fail`, so whoever sees a flushed completion can read why.
        let _ = self.qp.peer_terminate.set(t.reason());
        if self.failed {
            return;
        }
        let target = self.terminated_request(t).or_else(|| {
            if blames_a_message(t.code) {
                (self.sq.head..self.sq.next)
                    .find(|&s| matches!(self.sq.entry(s).state, SqState::Sent | SqState::Busy))
            } else {
                None
            }
        });
        if let Some(seq) = target {
            for s in self.sq.head..seq {
                let e = self.sq.entry(s);
                // Messages before the failed one were executed; Reads still waiting
                // will never be answered and are flushed below.
                if e.state == SqState::Sent {
                    e.state = SqState::Done(WcStatus::Success);
                }
            }
            self.sq.entry(seq).state = SqState::Done(status_for(t.code));
        }
        self.fail();
    }

    /// The request a Terminate's copied header names, if it names one of ours.
    fn terminated_request(&mut self, t: &Terminate<'_>) -> Option<u64> {
        let (h, _) = SegmentHeader::decode(t.ddp_header?).ok()?;
        let qp = self.qp.clone();
        match (h.opcode, h.placement) {
            (Opcode::ReadRequest, Placement::Untagged { msn, .. }) => {
                self.orq.iter().find(|o| o.msn == msn).and_then(|o| o.seq)
            }
            (_, Placement::Untagged { qn: 0, msn, .. }) => {
                (self.sq.head..self.sq.next).find(|&s| {
                    // SAFETY: started and not retired, so published and ours to read.
                    let w = unsafe { qp.sq.read(s) };
                    let e = *self.sq.entry(s);
                    matches!(w.op, SendOp::Send | SendOp::SendWithInvalidate { .. })
                        && e.msn == msn
                        && matches!(e.state, SqState::Sent | SqState::Busy)
                })
            }
            (Opcode::RdmaWrite, Placement::Tagged { stag, to }) => {
                (self.sq.head..self.sq.next).find(|&s| {
                    // SAFETY: as above.
                    let w = unsafe { qp.sq.read(s) };
                    let e = *self.sq.entry(s);
                    match w.op {
                        SendOp::RdmaWrite { remote } => {
                            remote.rkey == stag
                                && to >= remote.addr
                                && to <= remote.addr.saturating_add(w.len)
                                && matches!(e.state, SqState::Sent | SqState::Busy)
                        }
                        _ => false,
                    }
                })
            }
            _ => None,
        }
    }

    /// A Read of ours was answered in full.
    pub(crate) fn read_answered(&mut self, o: Outstanding) {
        self.sq.confirmed = self.sq.confirmed.max(o.covers);
        if let Some(seq) = o.seq {
            self.sq.entry(seq).state = SqState::Done(WcStatus::Success);
        }
    }

    /// Reports what has finished, in posting order, as far as the completion queues
    /// have room; retiring frees the slots.
    pub(crate) fn emit(&mut self, cqs: &mut CqTable) {
        let sq_posted = self.qp.sq_posted.load(Ordering::Acquire);
        if self.failed {
            // Requests posted after the failure are flushed without being started.
            while self.sq.next < sq_posted {
                let seq = self.sq.next;
                self.sq.entry(seq).state = SqState::Done(WcStatus::WrFlushed);
                self.sq.next += 1;
            }
            let rq_posted = self.qp.rq_posted.load(Ordering::Acquire);
            while self.rq.next < rq_posted {
                let seq = self.rq.next;
                self.finish_receive(seq, WcStatus::WrFlushed, 0, None);
                self.rq.next += 1;
            }
        }
        let qp_num = self.qp.qp_num;
        let start = self.sq.head;
        while self.sq.head < self.sq.next {
            let seq = self.sq.head;
            let confirmed = !self.confirm || seq < self.sq.confirmed;
            let status = match self.sq.entry(seq).state {
                SqState::Done(s) => s,
                SqState::Sent if confirmed => WcStatus::Success,
                _ => break,
            };
            // SAFETY: started and not yet retired. Read in place: only the fields of the
            // completion, not the whole request (issue 14).
            let w = unsafe { self.qp.sq.get(seq) };
            if w.signaled || status != WcStatus::Success {
                if let Some(cq) = cqs.get(self.send_cq) {
                    if !cq.has_room() {
                        break;
                    }
                    cq.push(Completion {
                        wr_id: w.wr_id,
                        opcode: w.wc_opcode(),
                        status,
                        byte_len: u32::try_from(w.len).unwrap_or(u32::MAX),
                        qp_num,
                        invalidated_rkey: None,
                    });
                }
            }
            self.sq.head += 1;
        }
        if self.sq.head != start {
            self.qp.sq_retired.store(self.sq.head, Ordering::Release);
        }
        let start = self.rq.head;
        while self.rq.head < self.rq.next {
            let seq = self.rq.head;
            let e = *self.rq.entry(seq);
            if !e.done {
                break;
            }
            if let Some(cq) = cqs.get(self.recv_cq) {
                if !cq.has_room() {
                    break;
                }
                // SAFETY: taken by an inbound Send (or flushed) and not yet retired.
                let w = unsafe { self.qp.rq.get(seq) };
                cq.push(Completion {
                    wr_id: w.wr_id,
                    opcode: WcOpcode::Recv,
                    status: e.status,
                    byte_len: e.byte_len,
                    qp_num,
                    invalidated_rkey: e.inval,
                });
            }
            self.rq.head += 1;
        }
        if self.rq.head != start {
            self.qp.rq_retired.store(self.rq.head, Ordering::Release);
        }
    }

    /// Whether a completion is waiting for proof of execution that only a zero-length
    /// Read would bring: a signaled request at or after the oldest uncovered sent one,
    /// and every posted request started.
    pub(crate) fn needs_confirmation(&self) -> bool {
        if !self.confirm || self.failed || self.orq.len() >= self.link.ord {
            return false;
        }
        let posted = self.qp.sq_posted.load(Ordering::Acquire);
        match (self.sq.uncovered, self.sq.signaled) {
            (Some(u), Some(s)) => s >= u && self.sq.next == posted,
            _ => false,
        }
    }
}
