//! Reception: the inbound FPDU stream, parsed by [`FpduReader`], executed against the
//! queue pair. Every placement is checked before its first byte is written: tagged
//! segments against the key table (STag, protection domain, access, bounds), untagged
//! ones against the posted receive (MSN, MO, room, local write access); a Read Request
//! is checked before its response reads a byte. A failed check sends a Terminate naming
//! the segment and fails the queue pair.

use super::engine::{Engine, InboundRead, SqState};
use super::keys::{Fault, KeyTable};
use super::term::TermOut;
use super::MAX_SGE;
use crate::fabric::mr::Access;
use crate::fabric::{Sge, WcStatus};
use crate::iwarp::ddp::{QueueNumber, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use crate::iwarp::fpdu::{pad_len, FpduError, CRC_LEN, LENGTH_FIELD_LEN};
use crate::iwarp::rdmap::{Opcode, Placement, ReadRequest, SegmentHeader, READ_REQUEST_LEN};
use crate::iwarp::reader::{FpduEvent, FpduReader};
use crate::iwarp::terminate::{
    DdpTaggedError, DdpUntaggedError, RdmapOperationError, RdmapProtectionError, Terminate,
    TerminateCode, MAX_TERMINATE_LEN,
};

/// Least payload left in a Write segment for reading it from the socket straight into
/// the target: below this, one buffered read serves several segments more cheaply.
const DIRECT_MIN: usize = 4096;

/// Least payload of a segment that makes the stream count as carrying bulk (reads
/// between segments then stop short so the next payload can be read directly). Below
/// it a segment and what follows it are read in one buffered read: a direct read
/// splits a message's read in two (header, then payload), a system call that costs
/// more than copying a few KiB (issue 14: a 4 KiB Send took seventeen reads, one for
/// the header and then 256 octets at a time, before the read limit below).
const BULK_MIN: usize = 16 * 1024;

/// FPDUs of one Send predicted after the current one for a single read
/// ([`Engine::predict`]).
pub(crate) const PREDICT_MAX: usize = 8;

/// Longest stretch between two payloads of one Send: pad (up to 3), CRC, the next
/// FPDU's length field and its untagged header.
pub(crate) const GAP_MAX: usize = 3 + CRC_LEN + LENGTH_FIELD_LEN + UNTAGGED_HEADER_LEN;

/// One FPDU of the current Send predicted to follow the current segment: `gap` octets
/// (the previous FPDU's pad and CRC, this one's length field and header) go to a
/// scratch area, then `len` octets of payload straight to `at` in the receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Predicted {
    /// Octets between the previous payload and this one.
    pub(crate) gap: usize,
    /// Where this FPDU's payload would go (inside the receive's scatter list).
    pub(crate) at: *mut u8,
    /// Payload octets read there (the predicted segment's, or less at the end of the
    /// receive's scatter entry or of the read's budget).
    pub(crate) len: usize,
}

impl Predicted {
    /// An unused slot.
    pub(crate) const EMPTY: Predicted = Predicted {
        gap: 0,
        at: core::ptr::null_mut(),
        len: 0,
    };
}

/// Largest untagged control message body we collect (Terminate; Read Requests are 28).
const SMALL: usize = MAX_TERMINATE_LEN;

/// What the current segment's payload is for.
#[derive(Debug, Clone, Copy)]
enum Dest {
    /// Nothing (errors, zero-length segments).
    Skip,
    /// RDMA Write: contiguous target memory under `stag`. The whole range passed the
    /// key check at the header; every piece is checked again as it is placed, because
    /// the payload may trickle in over many polls and the key may die in between (a
    /// requester's LocalInvalidate completes at once: a piece placed after it would land
    /// in memory the application already has back).
    Write { addr: u64, stag: u32 },
    /// Send: the receive's scatter list at this message offset.
    Recv { mo: u64 },
    /// Read Response: the Read's scatter list at this offset.
    ReadResponse { offset: u64 },
    /// Read Response to a zero-length Read: nothing to place.
    EmptyReadResponse,
    /// Read Request or Terminate body, collected whole.
    Small,
}

/// A Send being received (it may span segments). Its receive's scatter list is read
/// in place from the receive's slot ([`Engine::recv_sgl`]), not copied (issue 14: the
/// ~200-octet receive request was copied several times per message).
#[derive(Debug, Clone, Copy)]
struct InSend {
    rq_seq: u64,
    /// The receive's length (sum of its scatter entries).
    len: u64,
    msn: u32,
    next_mo: u64,
    inval: Option<u32>,
}

/// Reception state of one connection.
pub(crate) struct RxState {
    reader: FpduReader,
    header: SegmentHeader,
    payload_len: usize,
    dest: Dest,
    send: Option<InSend>,
    small: [u8; SMALL],
    small_len: usize,
    /// Scatter list of the Read whose response is arriving.
    sink: [Sge; MAX_SGE],
    sink_len: usize,
    /// Stop parsing: the queue pair failed.
    dead: bool,
    /// The last segment was a Write large enough to be placed straight from the
    /// socket: expect another, and read only up to its header.
    bulk: bool,
    /// Predict a long Send's next FPDUs ([`Engine::predict`]).
    pub(crate) predict: bool,
}

impl RxState {
    pub(crate) fn new(crc: bool) -> RxState {
        RxState {
            reader: FpduReader::new(crc),
            header: SegmentHeader::tagged(Opcode::RdmaWrite, false, 0, 0),
            payload_len: 0,
            dest: Dest::Skip,
            send: None,
            small: [0; SMALL],
            small_len: 0,
            sink: [Sge::default(); MAX_SGE],
            sink_len: 0,
            dead: false,
            bulk: false,
            predict: false,
        }
    }

    /// No FPDU is half read (diagnostics).
    pub(crate) fn at_boundary(&self) -> bool {
        self.reader.at_boundary()
    }

    pub(crate) fn abandon(&mut self) {
        self.dead = true;
        self.send = None;
        self.dest = Dest::Skip;
    }
}

/// Copies `data` into the scatter list at message offset `off`.
///
/// # Safety
/// Every entry of `sgl` covering `[off, off + data.len())` must have passed a key check
/// for local write: it then lies in an arena the device keeps mapped.
unsafe fn scatter(sgl: &[Sge], mut off: u64, mut data: &[u8]) {
    for s in sgl {
        if data.is_empty() {
            return;
        }
        let len = u64::from(s.length);
        if off >= len {
            off -= len;
            continue;
        }
        let n = ((len - off) as usize).min(data.len());
        // SAFETY: the caller's contract; `off + n <= len`.
        unsafe {
            core::ptr::copy_nonoverlapping(data.as_ptr(), (s.addr + off) as *mut u8, n);
        }
        data = &data[n..];
        off = 0;
    }
}

/// The address of message offset `off` in the scatter list `sgl`, and the octets from
/// there to the end of its entry; `None` past the list's end.
fn entry_at(sgl: &[Sge], mut off: u64) -> Option<(u64, u64)> {
    for s in sgl {
        let len = u64::from(s.length);
        if off < len {
            return Some((s.addr + off, len - off));
        }
        off -= len;
    }
    None
}

/// Checks the entries of `sgl` covering `[off, off + len)` for local write.
fn check_sink(keys: &KeyTable, pd: u32, sgl: &[Sge], mut off: u64, mut len: u64) -> bool {
    for s in sgl {
        if len == 0 {
            break;
        }
        let sl = u64::from(s.length);
        if off >= sl {
            off -= sl;
            continue;
        }
        let n = (sl - off).min(len);
        if keys
            .check(s.lkey, pd, Access::LOCAL_WRITE, s.addr + off, n)
            .is_err()
        {
            return false;
        }
        len -= n;
        off = 0;
    }
    len == 0
}

impl Engine {
    /// Executes received bytes, all of them (once the stream is dead they are discarded:
    /// after a Terminate nothing more is executed).
    pub(crate) fn receive(&mut self, keys: &KeyTable, data: &[u8]) {
        self.receive_until(keys, data, false);
    }

    /// The scatter list of the receive a Send is being received into, read in place.
    #[inline]
    fn recv_sgl(&self, s: &InSend) -> &[Sge] {
        // SAFETY: a receive taken by an inbound Send stays the engine's (not retired,
        // so its slot is not reused) until `finish_receive` marks it done, and every
        // path that marks it done (`on_end`, a rejected segment, `fail` through
        // `RxState::abandon`) drops `rx.send` first or with it.
        unsafe { self.qp.rq.get(s.rq_seq) }.sgl()
    }

    /// Where the rest of the current segment's payload may be read from the socket
    /// straight to: the target range of an RDMA Write, whose whole extent passed the key
    /// check when its header arrived (`on_header`). `None` for anything else, or when
    /// too little is left to be worth a read of its own.
    ///
    /// A Send's payload is read straight into its receive too, up to the end of the
    /// scatter entry the next octet falls in (send-based DDP's bulk item fills the
    /// receive's DDP segment: `engine/DESIGN.md`, "siw: a Send's bulk read straight into
    /// its receive"). Its whole scatter list passed the local-write check when the
    /// Send's first segment arrived, and a posted receive's memory is the device's until
    /// its completion, as for the buffered path's copy.
    pub(crate) fn direct_target(&self, keys: &KeyTable) -> Option<(*mut u8, usize)> {
        if self.rx.dead {
            return None;
        }
        let left = self.rx.reader.payload_remaining();
        if left < DIRECT_MIN {
            return None;
        }
        match self.rx.dest {
            Dest::Write { addr, stag } => {
                let at = addr + self.rx.reader.payload_offset() as u64;
                // The key may have died since the header (or the last piece): a dead key
                // gets no direct read; the buffered path then finds it dead and
                // terminates.
                keys.check(stag, self.qp.pd, Access::REMOTE_WRITE, at, left as u64)
                    .ok()
                    .map(|()| (at as *mut u8, left))
            }
            Dest::Recv { mo } => {
                let s = self.rx.send.as_ref()?;
                let off = mo + self.rx.reader.payload_offset() as u64;
                let (at, room) = entry_at(self.recv_sgl(s), off)?;
                let n = left.min(usize::try_from(room).unwrap_or(usize::MAX));
                (n >= DIRECT_MIN).then_some((at as *mut u8, n))
            }
            Dest::ReadResponse { offset: base } => {
                // The Read's scatter list at this offset, checked again for local
                // write now (the registration may have died since the header), as the
                // buffered path checks every piece.
                let sink = &self.rx.sink[..self.rx.sink_len];
                let off = base + self.rx.reader.payload_offset() as u64;
                let (at, room) = entry_at(sink, off)?;
                let n = left.min(usize::try_from(room).unwrap_or(usize::MAX));
                (n >= DIRECT_MIN && check_sink(keys, self.qp.pd, sink, off, n as u64))
                    .then_some((at as *mut u8, n))
            }
            _ => None,
        }
    }

    /// Whether the stream is carrying large Writes or Sends: then a read between
    /// segments should stop short, so the next payload is read straight to its target
    /// as well.
    #[inline]
    pub(crate) fn expects_bulk(&self) -> bool {
        self.rx.bulk && !self.rx.dead
    }

    /// Octets the next buffered read should take, of `cap`, `tail` being what a read
    /// between segments takes while the stream carries bulk: the next header and a
    /// little. Inside a payload that is not read directly (too little left, or a
    /// receive's scatter entry too short) the read takes the rest of it and `tail`
    /// more, in one system call, not `tail` at a time.
    #[inline]
    pub(crate) fn buffered_read_limit(&self, cap: usize, tail: usize) -> usize {
        if self.expects_bulk() {
            self.rx
                .reader
                .payload_remaining()
                .saturating_add(tail)
                .min(cap)
        } else {
            cap
        }
    }

    /// `n` octets of payload were read from the socket straight to `at`, as
    /// [`direct_target`](Self::direct_target) offered.
    ///
    /// # Safety
    /// `at` and `n` must be what `direct_target` returned (or a prefix), with no
    /// reception in between.
    pub(crate) unsafe fn placed_direct(&mut self, at: *const u8, n: usize) {
        // SAFETY: the caller's contract: checked target memory of an arena the device
        // keeps mapped, just written by the read.
        let data = unsafe { core::slice::from_raw_parts(at, n) };
        self.rx.reader.take_payload(data);
    }

    /// Plans a read that takes, after the rest of the current segment's payload
    /// (`first` octets, read straight to where [`direct_target`](Self::direct_target)
    /// said; or, `first` 0 between two FPDUs of a message, from the next header on) the
    /// next FPDUs of the same Send or Read Response too: each one's gap (pad and CRC,
    /// the next length field and header) to a scratch area and its payload straight
    /// into the destination, where the next segment would put it. A sender cuts a long
    /// message into FPDUs of one size (ours and Linux siw alike size them to the
    /// segment), so the next segment is predicted to carry as much as this one. Nothing
    /// here is trusted: [`accept_predicted`](Self::accept_predicted) checks each header
    /// after the read, and octets that turn out not to be the predicted payload are
    /// parsed again from a copy. Only within the receive's current scatter entry
    /// (checked for local write at the Send's first segment) or the Read's sink up to
    /// its size (checked here), and within `budget` octets in all (what the spill
    /// area can take back on a misprediction). Returns how many FPDUs were planned
    /// into `out`; 0 when the current segment is its message's last, or neither a Send
    /// nor a Read Response, or `first` does not finish its payload.
    pub(crate) fn predict(
        &self,
        keys: &KeyTable,
        first: usize,
        mut budget: usize,
        out: &mut [Predicted; PREDICT_MAX],
    ) -> usize {
        if !self.rx.predict || self.rx.dead || self.rx.header.last {
            return 0;
        }
        let plen = self.rx.payload_len;
        let at_boundary = self.rx.reader.at_boundary();
        if plen < DIRECT_MIN
            || (!at_boundary && (first == 0 || first != self.rx.reader.payload_remaining()))
        {
            return 0;
        }
        // Where the next segment's payload starts (message offset, or offset in the
        // Read's sink), how far predictions may go, the scatter list, the header's
        // length, and the octets before the first predicted payload: from inside a
        // payload the current FPDU's pad and CRC and the next length field and header;
        // from between FPDUs (the last read ended with an FPDU) the header alone.
        let send = self.rx.send.as_ref();
        let (next, end, sgl, hdr) = match (at_boundary, self.rx.dest, send) {
            (false, Dest::Recv { mo }, Some(s)) => (
                mo + plen as u64,
                s.len,
                self.recv_sgl(s),
                UNTAGGED_HEADER_LEN,
            ),
            (true, _, Some(s)) if self.rx.header.opcode.queue() == Some(QueueNumber::Send) => {
                (s.next_mo, s.len, self.recv_sgl(s), UNTAGGED_HEADER_LEN)
            }
            (false, Dest::ReadResponse { .. }, _) | (true, _, _)
                if self.rx.header.opcode == Opcode::ReadResponse =>
            {
                // A Read Response fills exactly the Read's size: nothing past it.
                let Some(o) = self.orq.front() else {
                    return 0;
                };
                let next = match self.rx.dest {
                    Dest::ReadResponse { offset } if !at_boundary => offset + plen as u64,
                    _ => o.placed,
                };
                (
                    next,
                    o.size,
                    &self.rx.sink[..self.rx.sink_len],
                    TAGGED_HEADER_LEN,
                )
            }
            _ => return 0,
        };
        let mut next = next;
        let mut gap = if at_boundary {
            LENGTH_FIELD_LEN + hdr
        } else {
            pad_len(self.rx.header.encoded_len() + plen) + CRC_LEN + LENGTH_FIELD_LEN + hdr
        };
        let next_gap = pad_len(hdr + plen) + CRC_LEN + LENGTH_FIELD_LEN + hdr;
        let read_response = self.rx.header.opcode == Opcode::ReadResponse;
        let mut k = 0;
        while k < PREDICT_MAX && next < end {
            let Some((at, room)) = entry_at(sgl, next) else {
                break;
            };
            let len = plen
                .min(usize::try_from(room).unwrap_or(usize::MAX))
                .min(usize::try_from(end - next).unwrap_or(usize::MAX))
                .min(budget.saturating_sub(gap));
            if len < DIRECT_MIN.min(plen) {
                break;
            }
            // A Read's sink is checked now, as `direct_target` checks it (a receive's
            // whole list was checked at the Send's first segment).
            if read_response && !check_sink(keys, self.qp.pd, sgl, next, len as u64) {
                break;
            }
            out[k] = Predicted {
                gap,
                at: at as *mut u8,
                len,
            };
            k += 1;
            budget -= gap + len;
            if len < plen {
                // The FPDU goes on past what this read places: nothing after it is
                // where a prediction would put it.
                break;
            }
            next += plen as u64;
            gap = next_gap;
        }
        k
    }

    /// Whether the current segment's payload is all taken (the reader is at its pad
    /// and CRC, or outside any payload).
    #[inline]
    pub(crate) fn payload_complete(&self) -> bool {
        self.rx.dead || self.rx.reader.payload_remaining() == 0
    }

    /// Parses `data` (a predicted gap: pad, CRC, next header) up to and including the
    /// first segment header in it, and no further: the octets after a header may be
    /// payload that goes elsewhere than predicted. Returns the octets used (all of
    /// them once the stream is dead: they are discarded).
    pub(crate) fn receive_through_header(&mut self, keys: &KeyTable, data: &[u8]) -> usize {
        self.receive_until(keys, data, true)
    }

    /// [`receive`](Self::receive)'s loop; with `stop_at_header` it returns right after
    /// the first segment header. Returns the octets used (all of them once the stream is
    /// dead).
    #[inline(always)]
    fn receive_until(&mut self, keys: &KeyTable, mut data: &[u8], stop_at_header: bool) -> usize {
        let all = data.len();
        while !data.is_empty() && !self.rx.dead {
            let step = match self.rx.reader.step(data) {
                Ok(s) => s,
                Err(e) => {
                    self.stream_error(e);
                    return all;
                }
            };
            data = &data[step.consumed..];
            match step.event {
                None => {}
                Some(FpduEvent::Header {
                    header,
                    payload_len,
                }) => {
                    self.on_header(keys, header, payload_len);
                    if stop_at_header {
                        return all - data.len();
                    }
                }
                Some(FpduEvent::Payload { offset, data }) => {
                    self.on_payload(keys, offset as u64, data)
                }
                Some(FpduEvent::End) => self.on_end(keys),
            }
        }
        all
    }

    /// How many of the `n` octets a predicted read put at `at` are indeed the payload
    /// of the segment whose header was just parsed: its first octets, for a Send
    /// segment whose message offset falls at `at` in the receive (the same Send, its
    /// receive checked at the first segment), up to the segment's end and the end of
    /// the scatter entry. 0 for anything else; those octets are then parsed again.
    pub(crate) fn accept_predicted(&self, at: *const u8, n: usize) -> usize {
        if self.rx.dead || self.rx.reader.payload_offset() != 0 {
            return 0;
        }
        let left = self.rx.reader.payload_remaining();
        let found = match (self.rx.dest, self.rx.send.as_ref()) {
            (Dest::Recv { mo }, Some(s)) => entry_at(self.recv_sgl(s), mo),
            // Its sink range was checked before the read (`predict`).
            (Dest::ReadResponse { offset }, _) => {
                entry_at(&self.rx.sink[..self.rx.sink_len], offset)
            }
            _ => None,
        };
        match found {
            Some((addr, room)) if addr as *const u8 == at => {
                n.min(left).min(usize::try_from(room).unwrap_or(usize::MAX))
            }
            _ => 0,
        }
    }

    /// Ends the stream on a local failure the peer did not cause (a Terminate saying
    /// so); nothing more is executed.
    pub(crate) fn stream_lost(&mut self) {
        self.terminate(TermOut::new(
            TerminateCode::RdmapOperation(RdmapOperationError::CatastrophicStream),
            None,
            None,
        ));
    }

    fn stream_error(&mut self, e: FpduError) {
        self.terminate(TermOut::new(e.terminate_code(), None, None));
    }

    /// A Terminate about the current segment.
    fn reject_segment(&mut self, code: TerminateCode, rdma: Option<&[u8]>) {
        let len = (self.rx.header.encoded_len() + self.rx.payload_len) as u16;
        let header = self.rx.header;
        self.terminate(TermOut::new(code, Some((len, &header)), rdma));
    }

    fn on_header(&mut self, keys: &KeyTable, h: SegmentHeader, payload_len: usize) {
        self.wake.heard = true;
        self.rx.header = h;
        self.rx.payload_len = payload_len;
        self.rx.dest = Dest::Skip;
        self.rx.bulk = false;
        let plen = payload_len as u64;
        let pd = self.qp.pd;
        match (h.opcode, h.placement) {
            // A zero-length Write places nothing, so its STag is not checked (Linux siw
            // returns before any check; siw's own MPA "RTR" is one with STag 1, and the
            // verbs provider sends them to wake a kernel siw peer: DESIGN.md, "Kernel
            // siw: a first message left unread").
            (Opcode::RdmaWrite, Placement::Tagged { .. }) if plen == 0 => {
                self.rx.dest = Dest::Skip;
            }
            (Opcode::RdmaWrite, Placement::Tagged { stag, to }) => {
                if to.checked_add(plen).is_none() {
                    return self.reject_segment(
                        TerminateCode::RdmapProtection(RdmapProtectionError::ToWrap),
                        None,
                    );
                }
                match keys.check(stag, pd, Access::REMOTE_WRITE, to, plen) {
                    Ok(()) => {
                        self.rx.dest = Dest::Write { addr: to, stag };
                        self.rx.bulk = payload_len >= BULK_MIN;
                    }
                    Err(f) => self
                        .reject_segment(TerminateCode::RdmapProtection(f.protection_code()), None),
                }
            }
            (Opcode::ReadResponse, Placement::Tagged { stag, to }) => {
                self.read_response_header(keys, stag, to, plen)
            }
            (Opcode::ReadRequest, Placement::Untagged { mo, .. }) => {
                if payload_len != READ_REQUEST_LEN || !h.last || mo != 0 {
                    return self.reject_segment(
                        TerminateCode::DdpUntagged(DdpUntaggedError::MessageTooLong),
                        None,
                    );
                }
                self.rx.small_len = 0;
                self.rx.dest = Dest::Small;
            }
            (Opcode::Terminate, Placement::Untagged { mo, .. }) => {
                if payload_len > SMALL || !h.last || mo != 0 {
                    return self.reject_segment(
                        TerminateCode::DdpUntagged(DdpUntaggedError::MessageTooLong),
                        None,
                    );
                }
                self.rx.small_len = 0;
                self.rx.dest = Dest::Small;
            }
            (
                Opcode::Send
                | Opcode::SendInvalidate
                | Opcode::SendSolicitedEvent
                | Opcode::SendSolicitedEventInvalidate,
                Placement::Untagged {
                    inval_stag,
                    msn,
                    mo,
                    ..
                },
            ) => self.send_header(keys, h.opcode, inval_stag, msn, u64::from(mo), plen),
            _ => self.reject_segment(
                TerminateCode::RdmapOperation(RdmapOperationError::UnexpectedOpcode),
                None,
            ),
        }
    }

    fn read_response_header(&mut self, keys: &KeyTable, stag: u32, to: u64, plen: u64) {
        let Some(o) = self.orq.front().copied() else {
            return self.reject_segment(
                TerminateCode::RdmapOperation(RdmapOperationError::UnexpectedOpcode),
                None,
            );
        };
        if stag != o.sink_stag {
            return self
                .reject_segment(TerminateCode::DdpTagged(DdpTaggedError::InvalidStag), None);
        }
        if o.size == 0 {
            // Nothing is placed for a zero-length Read. Linux siw (6.1) answers one that
            // follows another of its transmissions with that transmission's length and
            // stale octets; they are discarded rather than treated as an overrun. Those
            // octets are sent from pages its user may already be reusing, after the CRC
            // was computed over them, so now and then the CRC does not match (a lab
            // capture, 2026-11-26: one in ~40 such responses under pipelined load). The
            // header matched the Read at the front of our queue and nothing is placed,
            // so that mismatch is excused; a zero-length response (what a correct peer
            // sends) is still held to its CRC.
            if plen > 0 {
                self.rx.reader.waive_crc();
            }
            self.rx.dest = Dest::EmptyReadResponse;
            return;
        }
        let offset = to.wrapping_sub(o.sink_to);
        if to < o.sink_to || offset != o.placed || offset + plen > o.size {
            return self
                .reject_segment(TerminateCode::DdpTagged(DdpTaggedError::BaseOrBounds), None);
        }
        if let Some(seq) = o.seq {
            // SAFETY: an outstanding Read is started and not retired.
            let sgl = unsafe { self.qp.sq.get(seq) }.sgl();
            let n = sgl.len();
            self.rx.sink[..n].copy_from_slice(sgl);
            self.rx.sink_len = n;
            // Checked when the Read was started; checked again because a registration
            // may have died since.
            if !check_sink(keys, self.qp.pd, sgl, offset, plen) {
                self.sq.entry(seq).state = SqState::Done(WcStatus::LocalProtectionError);
                return self.reject_segment(
                    TerminateCode::RdmapOperation(RdmapOperationError::CatastrophicStream),
                    None,
                );
            }
        } else {
            self.rx.sink_len = 0;
        }
        self.rx.dest = Dest::ReadResponse { offset };
        // A large response: stop buffered reads short so the rest, and the next
        // segment's payload, are read straight into the sink.
        self.rx.bulk = plen >= BULK_MIN as u64;
    }

    fn send_header(
        &mut self,
        keys: &KeyTable,
        opcode: Opcode,
        inval_stag: u32,
        msn: u32,
        mo: u64,
        plen: u64,
    ) {
        let s = match self.rx.send {
            Some(s) => {
                if msn != s.msn {
                    return self.reject_segment(
                        TerminateCode::DdpUntagged(DdpUntaggedError::MsnRange),
                        None,
                    );
                }
                if mo != s.next_mo {
                    return self.reject_segment(
                        TerminateCode::DdpUntagged(DdpUntaggedError::InvalidMo),
                        None,
                    );
                }
                s
            }
            None => {
                if msn != self.msn_in.peek(QueueNumber::Send) {
                    return self.reject_segment(
                        TerminateCode::DdpUntagged(DdpUntaggedError::MsnRange),
                        None,
                    );
                }
                if mo != 0 {
                    return self.reject_segment(
                        TerminateCode::DdpUntagged(DdpUntaggedError::InvalidMo),
                        None,
                    );
                }
                // iWARP has no receiver-not-ready retry: no receive is fatal.
                let Some(rq_seq) = self.take_receive() else {
                    return self.reject_segment(
                        TerminateCode::DdpUntagged(DdpUntaggedError::NoBufferAvailable),
                        None,
                    );
                };
                // SAFETY: just taken, so published and the engine's until retired.
                let wqe = unsafe { self.qp.rq.get(rq_seq) };
                let len = wqe.len;
                let recv_pd = self.qp.srq.as_ref().map_or(self.qp.pd, |q| q.pd);
                if !check_sink(keys, recv_pd, wqe.sgl(), 0, len) {
                    self.finish_receive(rq_seq, WcStatus::LocalProtectionError, 0, None);
                    return self.reject_segment(
                        TerminateCode::RdmapOperation(RdmapOperationError::CatastrophicStream),
                        None,
                    );
                }
                let inval = if opcode.carries_invalidate_stag() {
                    if let Err(f) = keys.can_invalidate(inval_stag, self.qp.pd) {
                        return self.invalidate_failed(rq_seq, f);
                    }
                    Some(inval_stag)
                } else {
                    None
                };
                let s = InSend {
                    rq_seq,
                    len,
                    msn,
                    next_mo: 0,
                    inval,
                };
                self.rx.send = Some(s);
                s
            }
        };
        if mo + plen > s.len {
            self.rx.send = None;
            self.finish_receive(s.rq_seq, WcStatus::LocalLengthError, 0, None);
            return self.reject_segment(
                TerminateCode::DdpUntagged(DdpUntaggedError::MessageTooLong),
                None,
            );
        }
        self.rx.dest = Dest::Recv { mo };
        // A large Send (a send-based DDP item): stop buffered reads short so the next
        // segment's payload is read straight into the receive as well.
        self.rx.bulk = plen >= BULK_MIN as u64;
    }

    fn invalidate_failed(&mut self, rq_seq: u64, f: Fault) {
        self.rx.send = None;
        self.finish_receive(rq_seq, WcStatus::LocalAccessError, 0, None);
        let code = match f {
            Fault::NotFast => RdmapProtectionError::CannotInvalidate,
            other => other.protection_code(),
        };
        self.reject_segment(TerminateCode::RdmapProtection(code), None);
    }

    fn on_payload(&mut self, keys: &KeyTable, offset: u64, data: &[u8]) {
        match self.rx.dest {
            Dest::Skip | Dest::EmptyReadResponse => {}
            Dest::Write { addr, stag } => {
                let to = addr + offset;
                if let Err(f) = keys.check(
                    stag,
                    self.qp.pd,
                    Access::REMOTE_WRITE,
                    to,
                    data.len() as u64,
                ) {
                    self.rx.dest = Dest::Skip;
                    return self
                        .reject_segment(TerminateCode::RdmapProtection(f.protection_code()), None);
                }
                // SAFETY: this piece's range just passed the key check, so it lies in an
                // arena its registration's protection domain keeps mapped.
                unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), to as *mut u8, data.len()) };
            }
            Dest::Recv { mo } => {
                if let Some(s) = &self.rx.send {
                    // SAFETY: the receive's scatter list passed the local-write check
                    // and `mo + payload` fits in it (`send_header`).
                    unsafe { scatter(self.recv_sgl(s), mo + offset, data) };
                }
            }
            Dest::ReadResponse { offset: base } => {
                let sink = &self.rx.sink[..self.rx.sink_len];
                // Checked again for every piece, as Writes are: the sink's registration
                // may have died since the segment's header.
                if !check_sink(keys, self.qp.pd, sink, base + offset, data.len() as u64) {
                    self.rx.dest = Dest::Skip;
                    if let Some(seq) = self.orq.front().and_then(|o| o.seq) {
                        self.sq.entry(seq).state = SqState::Done(WcStatus::LocalProtectionError);
                    }
                    return self.reject_segment(
                        TerminateCode::RdmapOperation(RdmapOperationError::CatastrophicStream),
                        None,
                    );
                }
                // SAFETY: the part of the scatter list this piece covers just passed the
                // local-write check.
                unsafe { scatter(sink, base + offset, data) };
            }
            Dest::Small => {
                let at = self.rx.small_len;
                let n = data.len().min(SMALL - at);
                self.rx.small[at..at + n].copy_from_slice(&data[..n]);
                self.rx.small_len += n;
            }
        }
    }

    fn on_end(&mut self, keys: &KeyTable) {
        let h = self.rx.header;
        let plen = self.rx.payload_len as u64;
        let dest = self.rx.dest;
        self.rx.dest = Dest::Skip;
        match (h.opcode, dest) {
            (_, Dest::Recv { .. }) => {
                let Some(mut s) = self.rx.send else {
                    return;
                };
                s.next_mo += plen;
                self.rx.send = Some(s);
                if h.last {
                    self.rx.send = None;
                    self.msn_in.take(QueueNumber::Send);
                    if let Some(stag) = s.inval {
                        if let Err(f) = keys.invalidate(stag, self.qp.pd) {
                            return self.invalidate_failed(s.rq_seq, f);
                        }
                    }
                    let len = u32::try_from(s.next_mo).unwrap_or(u32::MAX);
                    self.finish_receive(s.rq_seq, WcStatus::Success, len, s.inval);
                }
            }
            (Opcode::ReadResponse, Dest::ReadResponse { .. } | Dest::EmptyReadResponse) => {
                let Some(o) = self.orq.front_mut() else {
                    return;
                };
                o.placed += plen;
                let o = *o;
                if h.last {
                    if o.size != 0 && o.placed != o.size {
                        return self.reject_segment(
                            TerminateCode::DdpTagged(DdpTaggedError::BaseOrBounds),
                            None,
                        );
                    }
                    self.orq.pop();
                    self.read_answered(o);
                }
            }
            (Opcode::ReadRequest, Dest::Small) => self.read_request(keys),
            (Opcode::Terminate, Dest::Small) => {
                let mut body = [0u8; SMALL];
                let n = self.rx.small_len;
                body[..n].copy_from_slice(&self.rx.small[..n]);
                match Terminate::decode(&body[..n]) {
                    Ok(t) => self.on_peer_terminate(&t),
                    // An undecodable Terminate still ends the stream.
                    Err(_) => self.on_peer_terminate(&Terminate::bare(TerminateCode::Unknown {
                        layer: 0x0F,
                        etype: 0x0F,
                        code: 0xFF,
                    })),
                }
            }
            _ => {}
        }
    }

    fn read_request(&mut self, keys: &KeyTable) {
        let mut body = [0u8; READ_REQUEST_LEN];
        body.copy_from_slice(&self.rx.small[..READ_REQUEST_LEN]);
        let msn = match self.rx.header.placement {
            Placement::Untagged { msn, .. } => msn,
            Placement::Tagged { .. } => 0,
        };
        if msn != self.msn_in.peek(QueueNumber::ReadRequest) {
            return self.reject_segment(
                TerminateCode::DdpUntagged(DdpUntaggedError::MsnRange),
                Some(&body),
            );
        }
        self.msn_in.take(QueueNumber::ReadRequest);
        let rr = match ReadRequest::decode(&body) {
            Ok(rr) => rr,
            Err(e) => return self.reject_segment(e.terminate_code(), Some(&body)),
        };
        if self.irq.len() >= self.link.ird {
            return self.reject_segment(
                TerminateCode::DdpUntagged(DdpUntaggedError::NoBufferAvailable),
                Some(&body),
            );
        }
        let size = u64::from(rr.size);
        // A zero-length Read reads nothing, so its source is not checked (verbs does
        // not check zero-length entries either): it serves as a barrier.
        if size > 0 {
            if rr.source_to.checked_add(size).is_none() {
                return self.reject_segment(
                    TerminateCode::RdmapProtection(RdmapProtectionError::ToWrap),
                    Some(&body),
                );
            }
            if let Err(f) = keys.check(
                rr.source_stag,
                self.qp.pd,
                Access::REMOTE_READ,
                rr.source_to,
                size,
            ) {
                return self.reject_segment(
                    TerminateCode::RdmapProtection(f.protection_code()),
                    Some(&body),
                );
            }
        }
        self.irq.push(InboundRead {
            sink_stag: rr.sink_stag,
            sink_to: rr.sink_to,
            size,
            source: rr.source_to,
        });
    }
}
