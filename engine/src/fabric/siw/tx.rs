//! Transmission: send-queue requests, Read Responses and Terminates become FPDUs,
//! written with `sendmsg` (head, payload pieces straight from registered memory, pad
//! and CRC). A long message's FPDUs, each sized to the EMSS, go up to eight to a write
//! ([`SiwConfig::batch_message_fpdus`](super::SiwConfig::batch_message_fpdus), on by
//! default): TCP cuts the write at the MSS, so they still mostly travel one per
//! segment. Otherwise each FPDU is written with its own `sendmsg`, so a capture shows
//! one FPDU per TCP segment; a confirmation Read too, unless
//! [`SiwConfig::confirmation_own_segment`](super::SiwConfig::confirmation_own_segment) is
//! off (see there for the trade-off). The exception: consecutive posted Sends whose
//! FPDUs, whole, fit one TCP segment together go in one `sendmsg`, so in one segment
//! ([`SiwConfig::coalesce_sends`](super::SiwConfig::coalesce_sends), on by default; a
//! continuation group then costs the peer one read). Every write carries `MSG_EOR`, so
//! TCP never appends the next write to a segment still queued (under congestion or a
//! full window). A partial write resumes where it stopped at the next poll. A write of
//! at most [`FLAT_MAX`] octets (a small Send) is gathered into one buffer and goes by
//! `send`: the same octets in the same segment, for a cheaper system call.
//!
//! Between messages the order is: a queued Terminate, then Read Responses we owe (the
//! peer's Reads are answered before our own new work, as RDMAP orders them on the
//! stream), then the send queue, then a zero-length confirmation Read if a completion
//! waits for one.

use std::io;
use std::os::fd::RawFd;

use super::config::WireTap;
use super::engine::{Engine, Outstanding, SqState};
use super::keys::KeyTable;
use super::term::TermOut;
use super::MAX_SGE;
use crate::fabric::mr::Access;
use crate::fabric::{SendOp, Sge, WcStatus};
use crate::iwarp::crc32c::{crc32c, Crc32c};
use crate::iwarp::ddp::QueueNumber;
use crate::iwarp::fpdu::{
    crc_to_wire, encode_fpdu, mulpdu, pad_len, CRC_LEN, LENGTH_FIELD_LEN, MAX_HEAD_LEN,
    MAX_TRAILER_LEN,
};
use crate::iwarp::rdmap::{Opcode, ReadRequest, SegmentHeader, READ_REQUEST_LEN};
use crate::iwarp::segmenter::MessageTarget;
use crate::iwarp::terminate::{TerminateCode, MAX_TERMINATE_LEN};

pub(crate) mod one;

/// Inline payloads: Read Request and Terminate bodies.
const INLINE: usize = MAX_TERMINATE_LEN;

/// A zero-length Read Request FPDU: length field, 18-octet header, 28-octet body, CRC.
const TAIL: usize = 64;

/// Where a message's payload comes from. Small, so that a message is copied cheaply
/// (issue 14: the gather list and inline bytes once made it ~250 octets, copied by
/// `memcpy` four times per message).
#[derive(Debug, Clone, Copy)]
enum Source {
    /// The gather list of send-queue request `seq`, read in place from its slot
    /// (checked when the message started). The slot stays the engine's until the
    /// request is retired, which needs it sent (its last FPDU framed and written) or the
    /// queue pair failed (which abandons the message first).
    Gather { seq: u64 },
    /// Contiguous registered memory (a Read Response; checked at the Read Request).
    Contiguous(u64),
    /// The transmitter's own bytes (`TxState::inline`).
    Inline,
}

/// What finishing a message means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Send-queue request `seq`.
    Request(u64),
    /// A zero-length confirmation Read.
    Confirmation,
    ReadResponse,
    Terminate,
}

/// What finishing a written message needs to know of it (kept per FPDU of a batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Finish {
    kind: Kind,
    opcode: Opcode,
    /// A confirmation Read went out in the same write as the last FPDU.
    confirmed_inline: bool,
}

#[derive(Debug, Clone, Copy)]
struct Message {
    kind: Kind,
    opcode: Opcode,
    target: MessageTarget,
    source: Source,
    len: u64,
    /// Payload octets already put into FPDUs.
    framed: u64,
    /// Largest payload per FPDU.
    max_payload: u64,
    /// The FPDU with the Last flag has been framed.
    last_framed: bool,
    /// A confirmation Read went out in the same write as the last FPDU.
    confirmed_inline: bool,
}

/// One FPDU being written.
struct Fpdu {
    head: [u8; MAX_HEAD_LEN],
    head_len: usize,
    inline: [u8; INLINE],
    inline_len: usize,
    /// Payload pieces in registered memory: address and length.
    pieces: [(u64, usize); MAX_SGE],
    npieces: usize,
    trailer: [u8; MAX_TRAILER_LEN],
    trailer_len: usize,
    /// The MPA CRC is not in `trailer` yet: it is computed when the FPDU is written
    /// ([`Fpdu::finish_crc`], or over the gathered copy of a short write), so a small
    /// Send is CRC'd in one pass over contiguous octets instead of piece by piece.
    crc_pending: bool,
    /// A whole second FPDU (a confirmation Read) written right after this one, in the
    /// same poll: by the same `sendmsg`, or by its own when `own_write`.
    tail: [u8; TAIL],
    tail_len: usize,
    own_write: bool,
    /// Octets of this FPDU (and its tail).
    total: usize,
}

impl Fpdu {
    const EMPTY: Fpdu = Fpdu {
        head: [0; MAX_HEAD_LEN],
        head_len: 0,
        inline: [0; INLINE],
        inline_len: 0,
        pieces: [(0, 0); MAX_SGE],
        npieces: 0,
        trailer: [0; MAX_TRAILER_LEN],
        trailer_len: 0,
        crc_pending: false,
        tail: [0; TAIL],
        tail_len: 0,
        own_write: false,
        total: 0,
    };

    /// Puts the MPA CRC into the trailer if it was left for the write: over the
    /// length field and header, the inline bytes, the payload pieces and the pad.
    fn finish_crc(&mut self) {
        if !self.crc_pending {
            return;
        }
        let pad = self.trailer_len - CRC_LEN;
        let mut c = Crc32c::new();
        c.update(&self.head[..self.head_len]);
        c.update(&self.inline[..self.inline_len]);
        for &(addr, len) in &self.pieces[..self.npieces] {
            // SAFETY: pieces come from checked gather lists or a checked Read source.
            c.update(unsafe { registered(addr, len) });
        }
        c.update(&self.trailer[..pad]);
        self.trailer[pad..pad + CRC_LEN].copy_from_slice(&crc_to_wire(c.value()));
        self.crc_pending = false;
    }
}

/// Most FPDUs one `sendmsg` carries (consecutive Sends coalesced: see
/// [`SiwConfig::coalesce_sends`](super::SiwConfig::coalesce_sends)).
const BATCH: usize = 8;

/// Whether the Terminate went out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TermState {
    None,
    Queued,
    Sending,
    /// Written: the connection's write side can close.
    Sent,
}

/// Transmission state of one connection.
pub(crate) struct TxState {
    /// The FPDUs of the next write, in stream order.
    batch: [Fpdu; BATCH],
    /// FPDUs framed in `batch`.
    nbatch: usize,
    /// Per FPDU of `batch`: the message whose Last FPDU it is (finished once written).
    ends: [Option<Finish>; BATCH],
    /// Octets of `batch` already written, of `total`.
    written: usize,
    total: usize,
    /// `batch` holds octets not yet written.
    busy: bool,
    /// The message being framed (not all its FPDUs are in a batch yet).
    msg: Option<Message>,
    /// The payload of the message being framed when it is [`Source::Inline`] (a Read
    /// Request or Terminate body): one message is framed at a time.
    inline: [u8; INLINE],
    term: Option<TermOut>,
    pub(crate) term_state: TermState,
    /// [`SiwConfig::confirmation_own_segment`](super::SiwConfig::confirmation_own_segment).
    pub(crate) confirmation_own_write: bool,
    /// [`SiwConfig::coalesce_sends`](super::SiwConfig::coalesce_sends).
    pub(crate) coalesce: bool,
    /// [`SiwConfig::batch_message_fpdus`](super::SiwConfig::batch_message_fpdus).
    pub(crate) batch_message: bool,
}

impl TxState {
    pub(crate) fn new() -> TxState {
        TxState {
            batch: [Fpdu::EMPTY; BATCH],
            nbatch: 0,
            ends: [None; BATCH],
            written: 0,
            total: 0,
            busy: false,
            msg: None,
            inline: [0; INLINE],
            term: None,
            term_state: TermState::None,
            confirmation_own_write: false,
            coalesce: true,
            batch_message: true,
        }
    }

    /// Stops the current message (unless it is the Terminate); an FPDU half written is
    /// still completed, since the stream cannot end inside one.
    pub(crate) fn abandon(&mut self) {
        if self.msg.is_some_and(|m| m.kind != Kind::Terminate) {
            self.msg = None;
        }
        for e in &mut self.ends {
            if e.is_some_and(|m| m.kind != Kind::Terminate) {
                *e = None;
            }
        }
    }

    /// A number that moves whenever the transmitter writes or frames (diagnostics).
    pub(crate) fn progress(&self) -> u64 {
        (self.written as u64) << 32 | (self.total as u64) << 8 | self.nbatch as u64
    }

    /// The transmitter's state in one line (diagnostics).
    pub(crate) fn describe(&self) -> String {
        format!(
            "busy {} nbatch {} written {}/{} msg {:?} ends {:?} term {:?}",
            self.busy,
            self.nbatch,
            self.written,
            self.total,
            self.msg.map(|m| (m.kind, m.len, m.framed, m.last_framed)),
            self.ends[..self.nbatch]
                .iter()
                .map(|e| e.map(|m| (m.kind, m.opcode)))
                .collect::<Vec<_>>(),
            self.term_state,
        )
    }

    pub(crate) fn queue_terminate(&mut self, t: TermOut) {
        if self.term_state == TermState::None {
            self.term = Some(t);
            self.term_state = TermState::Queued;
        }
    }
}

/// Where FPDUs go.
pub(crate) struct Wire<'a> {
    pub(crate) fd: RawFd,
    /// The tap that sees every FPDU, with the connection's local and peer addresses
    /// (copied only when there is a tap: a `Wire` is built on every poll).
    pub(crate) tap: Option<Tap<'a>>,
}

/// A [`WireTap`] and the addresses it is told.
#[derive(Clone, Copy)]
pub(crate) struct Tap<'a> {
    pub(crate) tap: &'a dyn WireTap,
    pub(crate) local: std::net::SocketAddr,
    pub(crate) peer: std::net::SocketAddr,
}

/// Appends `len` octets of `sgl` starting at message offset `off` to `pieces`.
fn gather(sgl: &[Sge], mut off: u64, mut len: u64, pieces: &mut [(u64, usize); MAX_SGE]) -> usize {
    let mut n = 0;
    for s in sgl {
        if len == 0 || n == MAX_SGE {
            break;
        }
        let sl = u64::from(s.length);
        if off >= sl {
            off -= sl;
            continue;
        }
        let take = (sl - off).min(len);
        pieces[n] = (s.addr + off, take as usize);
        n += 1;
        len -= take;
        off = 0;
    }
    n
}

/// The octets at `addr`.
///
/// # Safety
/// `[addr, addr + len)` passed a key check: it lies in an arena the device keeps
/// mapped. Its content may be changed by the application only if it breaks the verbs
/// rule that posted memory is left alone until the completion; then the wire carries
/// whatever was there.
unsafe fn registered<'a>(addr: u64, len: usize) -> &'a [u8] {
    // SAFETY: the caller's contract.
    unsafe { core::slice::from_raw_parts(addr as *const u8, len) }
}

impl Engine {
    /// Writes as much as the socket takes: `Ok(true)` when it is full (an FPDU waits
    /// for room), `Ok(false)` when everything is out. `Err` means the connection is lost.
    pub(crate) fn transmit(&mut self, keys: &KeyTable, wire: &Wire<'_>) -> io::Result<bool> {
        if self.tx_idle() {
            return Ok(false);
        }
        // A lone small Send to an idle transmitter: framed and written in one pass.
        match self.send_one(keys, wire)? {
            one::One::Written if self.tx_idle() => return Ok(false),
            one::One::Full => return Ok(true),
            _ => {}
        }
        loop {
            if self.tx.busy {
                if !write_batch(&mut self.tx, wire.fd)? {
                    return Ok(true);
                }
                self.tx.busy = false;
                if !self.wake.heard {
                    self.wake.sent();
                }
                let n = core::mem::take(&mut self.tx.nbatch);
                for i in 0..n {
                    if let Some(m) = self.tx.ends[i].take() {
                        self.message_written(m);
                    }
                }
                // The common end of a message's poll: nothing more posted, so the walk
                // of `fill_batch` to that answer is skipped, as at entry.
                if self.tx_idle() {
                    return Ok(false);
                }
                continue;
            }
            self.fill_batch(keys, wire);
            if self.tx.nbatch == 0 {
                return Ok(false);
            }
            self.tx.busy = true;
        }
    }

    /// Frames the next write: the current message's next FPDU, or the next message's
    /// first; then that message's further FPDUs, up to [`BATCH`], when
    /// `batch_message` (one system call per FPDU was most of a long message's cost:
    /// 33 `sendmsg` per MiB on loopback); then, while the write stays within one TCP
    /// segment, further FPDUs of
    /// Sends already posted, so that a group of Sends posted together (a continuation
    /// group, a call and its continuations) leaves in one `sendmsg` and reaches the
    /// peer in one read (the receiver's cost per system call and per wake-up is what
    /// makes a many-Send message slower than one Send plus an RDMA Read).
    fn fill_batch(&mut self, keys: &KeyTable, wire: &Wire<'_>) {
        self.tx.written = 0;
        self.tx.total = 0;
        let mut burst = BATCH;
        loop {
            let framing = self.tx.msg.as_ref().is_some_and(|m| !m.last_framed);
            let more = if self.tx.nbatch > 0 {
                // A long message's next FPDUs join its write (`batch_message`); else
                // only whole one-FPDU Sends join one.
                if framing {
                    self.tx.batch_message
                } else {
                    self.next_send_fits(keys)
                }
            } else {
                framing || self.next_message(keys)
            };
            if !more {
                return;
            }
            self.frame_next(wire);
            let i = self.tx.nbatch - 1;
            let framing = self.tx.msg.as_ref().is_some_and(|m| !m.last_framed);
            let go_on = if framing {
                self.tx.batch_message
            } else {
                self.tx.coalesce
            };
            if !go_on || self.tx.nbatch == BATCH || self.tx.batch[i].tail_len > 0 {
                return;
            }
            if framing {
                if i == 0 {
                    burst = self.even_burst();
                }
                if self.tx.nbatch >= burst {
                    return;
                }
            }
        }
    }

    /// How many FPDUs the write being filled takes of the long message whose FPDU it
    /// starts with (just framed): its FPDUs from that one on, spread evenly over the
    /// fewest writes of at most [`BATCH`]. A 1 MiB message in 17 FPDUs (64 KiB
    /// segments) goes as 6, 6 and 5 rather than 8, 8 and 1: as many `sendmsg`, but the
    /// largest write is smaller. Each write's CRCs are made before it, and its peer,
    /// reading as the write arrives, falls behind by about the CRC of what that write
    /// carries (it copies and CRCs where the sender only copies); what it has left when
    /// the last write is out is the tail of the message's time, set by the largest write.
    fn even_burst(&self) -> usize {
        let Some(m) = self.tx.msg.as_ref() else {
            return BATCH;
        };
        let per = m.max_payload.max(1);
        let rest = (m.len - m.framed).div_ceil(per);
        let fpdus = usize::try_from(rest)
            .unwrap_or(usize::MAX)
            .saturating_add(1);
        let writes = fpdus.div_ceil(BATCH);
        fpdus.div_ceil(writes.max(1)).min(BATCH)
    }

    /// Starts the next posted request if it is a Send whose (single) FPDU still fits,
    /// with the FPDUs already framed, in one TCP segment (the MULPDU's worth). Only
    /// Sends join Sends: a Write, Read Request or Read Response keeps its segment to
    /// itself, as does the Send after it (so captures of chunked RPCs keep one FPDU per
    /// segment).
    fn next_send_fits(&mut self, keys: &KeyTable) -> bool {
        if self.failed || self.tx.term_state == TermState::Queued || !self.irq.is_empty() {
            return false;
        }
        let sends_only = self.tx.ends[..self.tx.nbatch].iter().all(|e| {
            e.as_ref()
                .is_some_and(|m| matches!(m.opcode, Opcode::Send | Opcode::SendInvalidate))
        });
        if !sends_only {
            return false;
        }
        let posted = self.qp.sq_posted.load(std::sync::atomic::Ordering::Acquire);
        if self.sq.next >= posted {
            return false;
        }
        // SAFETY: published (below `posted`) and not retired (at or past `head`).
        let w = unsafe { self.qp.sq.get(self.sq.next) };
        if !matches!(w.op, SendOp::Send | SendOp::SendWithInvalidate { .. }) || w.fence {
            return false;
        }
        let max_payload = ((self.link.mulpdu - 18) & !3) as u64;
        if w.len > max_payload {
            return false;
        }
        let fpdu = LENGTH_FIELD_LEN + 18 + w.len as usize + pad_len(18 + w.len as usize) + CRC_LEN;
        let segment = self.link.mulpdu + LENGTH_FIELD_LEN + CRC_LEN;
        if self.tx.total + fpdu > segment {
            return false;
        }
        matches!(self.start_request(keys), Started::Message)
    }

    /// The application posted send-queue requests not started yet, or an FPDU waits
    /// to be written.
    #[inline]
    pub(crate) fn has_posted(&self) -> bool {
        self.tx.busy
            || self.tx.msg.is_some()
            || self.sq.next < self.qp.sq_posted.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Nothing to transmit, proven cheaply: no request posted or under way, no Read
    /// Response or Terminate owed, no confirmation Read (on-transmit completions) and no
    /// wake-up Read (the peer was heard). `transmit` then returns at once instead of
    /// walking `fill_batch` and `next_message` to the same answer: a poll calls it after
    /// every read, so an idle or receiving poll paid that walk (issue 14,
    /// `perf/benches/fabric_siw_insns.rs`).
    #[inline]
    fn tx_idle(&self) -> bool {
        !self.confirm
            && self.wake.heard
            && !self.failed
            && self.tx.term_state != TermState::Queued
            && self.irq.is_empty()
            && !self.has_posted()
    }

    /// An FPDU is waiting for room in the socket.
    #[inline]
    pub(crate) fn tx_waiting(&self) -> bool {
        self.tx.busy
    }

    /// Builds the current message's next FPDU.
    fn frame_next(&mut self, wire: &Wire<'_>) {
        let Some(mut m) = self.tx.msg else {
            return;
        };
        if m.framed == 0 && m.len > m.max_payload && self.refresh_mulpdu(wire.fd) {
            m.max_payload = max_payload(self.link.mulpdu, m.opcode);
        }
        let chunk = (m.len - m.framed).min(m.max_payload);
        let last = m.framed + chunk == m.len;
        let header = match m.target {
            MessageTarget::Untagged { msn, inval_stag } => {
                SegmentHeader::untagged(m.opcode, last, inval_stag, msn, m.framed as u32)
            }
            MessageTarget::Tagged { stag, to } => {
                SegmentHeader::tagged(m.opcode, last, stag, to.wrapping_add(m.framed))
            }
        };
        let idx = self.tx.nbatch;
        let f = &mut self.tx.batch[idx];
        let hlen = header.encoded_len();
        // The header is valid by construction (opcode and target agree).
        let _ = header.encode(&mut f.head[LENGTH_FIELD_LEN..]);
        let ulpdu = hlen + chunk as usize;
        f.head[..LENGTH_FIELD_LEN].copy_from_slice(&(ulpdu as u16).to_be_bytes());
        f.head_len = LENGTH_FIELD_LEN + hlen;
        f.inline_len = 0;
        f.npieces = 0;
        match m.source {
            Source::Gather { seq } => {
                // SAFETY: request `seq` is started and not retired (see `Source::Gather`),
                // so its slot is published and the engine's to read.
                let w = unsafe { self.qp.sq.get(seq) };
                f.npieces = gather(w.sgl(), m.framed, chunk, &mut f.pieces);
            }
            Source::Contiguous(addr) => {
                if chunk > 0 {
                    f.pieces[0] = (addr + m.framed, chunk as usize);
                    f.npieces = 1;
                }
            }
            Source::Inline => {
                let from = m.framed as usize;
                let n = chunk as usize;
                f.inline[..n].copy_from_slice(&self.tx.inline[from..from + n]);
                f.inline_len = n;
            }
        }
        let pad = pad_len(ulpdu);
        f.trailer = [0; MAX_TRAILER_LEN];
        f.trailer_len = pad + CRC_LEN;
        // The CRC waits for the write (`write_batch`), where a short write computes it
        // in one pass over the gathered octets; a tap sees every FPDU whole here.
        f.crc_pending = self.link.crc;
        if wire.tap.is_some() {
            f.finish_crc();
        }
        f.tail_len = 0;
        // The payload octets are `chunk` whatever their source: a gather list covers
        // the message's length (checked at posting), so its pieces sum to `chunk`.
        debug_assert_eq!(
            f.inline_len + f.pieces[..f.npieces].iter().map(|p| p.1).sum::<usize>(),
            chunk as usize
        );
        f.total = f.head_len + chunk as usize + f.trailer_len;
        if let Some(Tap { tap, local, peer }) = wire.tap {
            let mut parts: [&[u8]; MAX_SGE + 1] = [&[]; MAX_SGE + 1];
            parts[0] = &f.inline[..f.inline_len];
            for (i, &(addr, len)) in f.pieces[..f.npieces].iter().enumerate() {
                // SAFETY: as above.
                parts[i + 1] = unsafe { registered(addr, len) };
            }
            tap.fpdu(
                local,
                peer,
                &f.head[..f.head_len],
                &parts[..=f.npieces],
                &f.trailer[..f.trailer_len],
            );
        }
        m.framed += chunk;
        m.last_framed = last;
        if last && self.confirmation_follows(m.kind, m.opcode) {
            self.attach_confirmation(idx, wire);
            m.confirmed_inline = true;
        }
        self.tx.total += self.tx.batch[idx].total;
        self.tx.nbatch = idx + 1;
        self.tx.ends[idx] = last.then_some(Finish {
            kind: m.kind,
            opcode: m.opcode,
            confirmed_inline: m.confirmed_inline,
        });
        // Only what framing moved is written back (the message is not stored whole
        // again: issue 14).
        if last {
            self.tx.msg = None;
        } else if let Some(cur) = self.tx.msg.as_mut() {
            cur.framed = m.framed;
            cur.max_payload = m.max_payload;
        }
    }

    /// Looks the connection's MSS up again before the first FPDU of a long message, and
    /// sizes FPDUs to it; true if the MULPDU changed. The MSS read when the connection
    /// was established can be far below what the path carries: Linux bounds it by half
    /// the largest window the peer has offered so far, so on loopback it starts at 32741
    /// and grows to 65483 as soon as the receive window opens. FPDUs of half the segment
    /// size doubled the FPDUs (and the receiver's reads) per MiB (issue 14). Linux siw
    /// reads the MSS before every message for the same reason. A `getsockopt` is a
    /// system call, so only long messages look, each connection at most
    /// [`MSS_CHECKS`](super::conn::MSS_CHECKS) times, and none once FPDUs reach the
    /// largest size MPA's length field allows.
    fn refresh_mulpdu(&mut self, fd: RawFd) -> bool {
        const CAP: usize = match mulpdu(u32::MAX) {
            Some(m) => m as usize,
            None => 0,
        };
        if self.link.mss_checks == 0 || self.link.mulpdu >= CAP {
            return false;
        }
        self.link.mss_checks -= 1;
        let Some(m) = super::sock::mss(fd).and_then(mulpdu) else {
            return false;
        };
        let m = usize::from(m).max(super::conn::MIN_MULPDU);
        let changed = m != self.link.mulpdu;
        self.link.mulpdu = m;
        changed
    }

    /// Whether the message about to be finished (`kind`, `opcode`) will need a
    /// confirmation Read right after it (see [`Engine::needs_confirmation`]).
    fn confirmation_follows(&self, kind: Kind, opcode: Opcode) -> bool {
        let Kind::Request(seq) = kind else {
            return false;
        };
        if !self.confirm
            || self.failed
            || opcode == Opcode::ReadRequest
            || self.orq.len() >= self.link.ord
        {
            return false;
        }
        let posted = self.qp.sq_posted.load(std::sync::atomic::Ordering::Acquire);
        let oldest = self.sq.uncovered.unwrap_or(seq);
        self.sq.signaled.is_some_and(|s| s >= oldest) && self.sq.next == posted
    }

    /// Builds the zero-length Read Request that confirms the FPDU being written and
    /// commits to writing it right after that FPDU, in the same poll (see
    /// [`write_fpdu`]). Deciding here, not when the next message is picked, keeps the
    /// two together: a peer that stops polling as soon as it has seen the message must
    /// find the Read already in its socket in that same poll, or the confirmation is
    /// never answered.
    fn attach_confirmation(&mut self, idx: usize, wire: &Wire<'_>) {
        let msn = self.msn_out.take(QueueNumber::ReadRequest);
        let header = SegmentHeader::untagged(Opcode::ReadRequest, true, 0, msn, 0);
        let body = ReadRequest {
            sink_stag: 0,
            sink_to: 0,
            size: 0,
            source_stag: 0,
            source_to: 0,
        }
        .to_bytes();
        let f = &mut self.tx.batch[idx];
        let Ok(n) = encode_fpdu(&mut f.tail, &header, &body, self.link.crc) else {
            return;
        };
        f.tail_len = n;
        f.own_write = self.tx.confirmation_own_write;
        f.total += n;
        self.orq.push(Outstanding {
            seq: None,
            covers: self.sq.next,
            msn,
            ..Outstanding::EMPTY
        });
        if let Some(Tap { tap, local, peer }) = wire.tap {
            let hl = LENGTH_FIELD_LEN + header.encoded_len();
            let tl = n - hl - READ_REQUEST_LEN;
            tap.fpdu(
                local,
                peer,
                &f.tail[..hl],
                &[&f.tail[hl..hl + READ_REQUEST_LEN]],
                &f.tail[n - tl..n],
            );
        }
    }

    /// The Last FPDU of `m` is fully written: the message is finished.
    fn message_written(&mut self, m: Finish) {
        match m.kind {
            Kind::Request(seq) => {
                if m.opcode != Opcode::ReadRequest {
                    if self.confirm {
                        self.sq.entry(seq).state = SqState::Sent;
                        if m.confirmed_inline {
                            self.sq.uncovered = None;
                        } else if self.sq.uncovered.is_none() {
                            self.sq.uncovered = Some(seq);
                        }
                    } else {
                        self.sq.entry(seq).state = SqState::Done(WcStatus::Success);
                    }
                }
            }
            Kind::Confirmation => {}
            Kind::ReadResponse => {
                self.irq.pop();
            }
            Kind::Terminate => self.tx.term_state = TermState::Sent,
        }
    }

    fn start(
        &mut self,
        kind: Kind,
        opcode: Opcode,
        target: MessageTarget,
        source: Source,
        len: u64,
    ) {
        let max_payload = max_payload(self.link.mulpdu, opcode);
        self.tx.msg = Some(Message {
            kind,
            opcode,
            target,
            source,
            len,
            framed: 0,
            max_payload,
            last_framed: false,
            confirmed_inline: false,
        });
    }

    /// Makes `bytes` the payload of the next message (`Source::Inline`).
    fn inline(&mut self, bytes: &[u8]) -> Source {
        let n = bytes.len().min(INLINE);
        self.tx.inline[..n].copy_from_slice(&bytes[..n]);
        Source::Inline
    }

    /// Picks the next message; `false` when there is nothing to send now.
    fn next_message(&mut self, keys: &KeyTable) -> bool {
        if self.tx.term_state == TermState::Queued {
            if let Some(t) = self.tx.term {
                self.tx.term_state = TermState::Sending;
                let msn = self.msn_out.take(QueueNumber::Terminate);
                let source = self.inline(t.bytes());
                self.start(
                    Kind::Terminate,
                    Opcode::Terminate,
                    MessageTarget::Untagged { msn, inval_stag: 0 },
                    source,
                    t.len as u64,
                );
                return true;
            }
        }
        if self.failed {
            return false;
        }
        if let Some(r) = self.irq.front().copied() {
            self.start(
                Kind::ReadResponse,
                Opcode::ReadResponse,
                MessageTarget::Tagged {
                    stag: r.sink_stag,
                    to: r.sink_to,
                },
                Source::Contiguous(r.source),
                r.size,
            );
            return true;
        }
        loop {
            match self.start_request(keys) {
                Started::Message => return true,
                Started::Local => continue,
                Started::Nothing => break,
            }
        }
        if self.needs_confirmation() || self.wake_due() {
            let msn = self.msn_out.take(QueueNumber::ReadRequest);
            let body = ReadRequest {
                sink_stag: 0,
                sink_to: 0,
                size: 0,
                source_stag: 0,
                source_to: 0,
            }
            .to_bytes();
            self.orq.push(Outstanding {
                seq: None,
                covers: self.sq.next,
                msn,
                ..Outstanding::EMPTY
            });
            self.sq.uncovered = None;
            let source = self.inline(&body);
            self.start(
                Kind::Confirmation,
                Opcode::ReadRequest,
                MessageTarget::Untagged { msn, inval_stag: 0 },
                source,
                READ_REQUEST_LEN as u64,
            );
            return true;
        }
        false
    }

    /// Whether to send a zero-length Read to wake a peer that has not answered yet.
    fn wake_due(&mut self) -> bool {
        if self.failed || self.orq.len() >= self.link.ord || !self.wake.due() {
            return false;
        }
        self.wake.fired();
        true
    }

    /// A local failure of request `seq`: it completes with `status`, the peer is told
    /// (a catastrophic error local to this stream), and the queue pair fails.
    fn local_failure(&mut self, seq: u64, status: WcStatus) {
        self.sq.entry(seq).state = SqState::Done(status);
        self.sq.next = seq + 1;
        self.terminate(TermOut::new(TerminateCode::RdmapCatastrophic, None, None));
    }

    /// Starts the next posted request.
    ///
    /// The request is read in place from its slot, field by field, not copied whole
    /// (a ~200-octet `memcpy` per message, issue 14): the slot stays the engine's from
    /// the moment it is published until it is retired.
    fn start_request(&mut self, keys: &KeyTable) -> Started {
        let posted = self.qp.sq_posted.load(std::sync::atomic::Ordering::Acquire);
        if self.failed || self.sq.next >= posted {
            return Started::Nothing;
        }
        let seq = self.sq.next;
        // SAFETY: published (below `posted`) and not retired (at or past `head`); only
        // the engine reads it until it is retired.
        let w = unsafe { self.qp.sq.get(seq) };
        let (op, signaled, len) = (w.op, w.signaled, w.len);
        if w.fence && !self.orq.is_empty() {
            return Started::Nothing;
        }
        if matches!(op, SendOp::RdmaRead { .. }) && self.orq.len() >= self.link.ord {
            return Started::Nothing;
        }
        let pd = self.qp.pd;
        *self.sq.entry(seq) = super::engine::SqEntry {
            state: SqState::Busy,
            msn: 0,
        };
        if signaled {
            self.sq.signaled = Some(seq);
        }
        match op {
            SendOp::FastReg {
                key,
                region,
                access,
            } => {
                let ok = keys.fast_reg_over(key, pd, access, &region);
                self.sq.next = seq + 1;
                match ok {
                    Ok(()) => self.sq.entry(seq).state = SqState::Done(WcStatus::Success),
                    Err(_) => self.local_failure(seq, WcStatus::MemoryBindError),
                }
                return Started::Local;
            }
            SendOp::LocalInvalidate { key } => {
                self.sq.next = seq + 1;
                match keys.invalidate(key, pd) {
                    Ok(()) => self.sq.entry(seq).state = SqState::Done(WcStatus::Success),
                    Err(_) => self.local_failure(seq, WcStatus::LocalProtectionError),
                }
                return Started::Local;
            }
            _ => {}
        }
        let need = if matches!(op, SendOp::RdmaRead { .. }) {
            Access::LOCAL_WRITE
        } else {
            Access::NONE
        };
        // SAFETY: as above.
        let sgl = unsafe { self.qp.sq.get(seq) }.sgl();
        let bad = sgl.iter().any(|s| {
            s.length > 0
                && keys
                    .check(s.lkey, pd, need, s.addr, u64::from(s.length))
                    .is_err()
        });
        let sink = sgl.first().map_or((0, 0), |s| (s.lkey, s.addr));
        if bad {
            self.local_failure(seq, WcStatus::LocalProtectionError);
            return Started::Local;
        }
        self.sq.next = seq + 1;
        let gather = Source::Gather { seq };
        match op {
            SendOp::Send | SendOp::SendWithInvalidate { .. } => {
                let (opcode, inval_stag) = match op {
                    SendOp::SendWithInvalidate { rkey } => (Opcode::SendInvalidate, rkey),
                    _ => (Opcode::Send, 0),
                };
                let msn = self.msn_out.take(QueueNumber::Send);
                self.sq.entry(seq).msn = msn;
                self.start(
                    Kind::Request(seq),
                    opcode,
                    MessageTarget::Untagged { msn, inval_stag },
                    gather,
                    len,
                );
            }
            SendOp::RdmaWrite { remote } => self.start(
                Kind::Request(seq),
                Opcode::RdmaWrite,
                MessageTarget::Tagged {
                    stag: remote.rkey,
                    to: remote.addr,
                },
                gather,
                len,
            ),
            SendOp::RdmaRead { remote } => {
                let msn = self.msn_out.take(QueueNumber::ReadRequest);
                self.sq.entry(seq).msn = msn;
                let (sink_stag, sink_to) = sink;
                let body = ReadRequest {
                    sink_stag,
                    sink_to,
                    size: len as u32,
                    source_stag: remote.rkey,
                    source_to: remote.addr,
                }
                .to_bytes();
                self.orq.push(Outstanding {
                    seq: Some(seq),
                    covers: seq,
                    sink_stag,
                    sink_to,
                    size: len,
                    placed: 0,
                    msn,
                });
                // The Read confirms everything sent before it.
                self.sq.uncovered = None;
                let source = self.inline(&body);
                self.start(
                    Kind::Request(seq),
                    Opcode::ReadRequest,
                    MessageTarget::Untagged { msn, inval_stag: 0 },
                    source,
                    READ_REQUEST_LEN as u64,
                );
            }
            SendOp::FastReg { .. } | SendOp::LocalInvalidate { .. } => {}
        }
        Started::Message
    }
}

enum Started {
    Message,
    Local,
    Nothing,
}

/// Writes (the rest of) a batch of FPDUs, the last with its confirmation Read (the
/// tail) if it has one. `Ok(true)` when everything is out, `Ok(false)` when the socket
/// is full.
///
/// Without `own_write` the tail goes in the FPDUs' `sendmsg`, so they share a segment.
/// With it, the FPDUs go with `MSG_MORE`, so TCP holds them until the tail's own write
/// pushes both in one transmission, back to back; both writes end with `MSG_EOR`, so
/// they stay two segments. Should the tail's write find the socket full, TCP sends the
/// held FPDUs when the peer's acknowledgements make room (a held segment is then pushed
/// under the socket's own `TCP_NODELAY`).
fn write_batch(tx: &mut TxState, fd: RawFd) -> io::Result<bool> {
    let Some(last) = tx.batch[..tx.nbatch].last() else {
        return Ok(true);
    };
    let split = last.tail_len > 0 && last.own_write;
    let first = if split {
        tx.total - last.tail_len
    } else {
        tx.total
    };
    let more = if split { libc::MSG_MORE } else { 0 };
    let flat_write = tx.written == 0 && first <= FLAT_MAX;
    if !flat_write {
        // Written from the pieces themselves: every CRC goes into its trailer first.
        for f in &mut tx.batch[..tx.nbatch] {
            f.finish_crc();
        }
    }
    if flat_write {
        // A short write from the start (a small Send, its header, pad and CRC, issue
        // 14): gathered straight into one buffer and written with `send` (the kernel's
        // `sendmsg` path, the message header and the iovec array copied in, a
        // multi-segment iterator, cost more than the copy: about 0.2 us per write on
        // loopback). The header and trailer arrays are copied whole (fixed sizes, a few
        // moves instead of a `memcpy` call each); what lands past a piece's length is
        // overwritten by the next piece or not sent.
        let mut flat = [core::mem::MaybeUninit::<u8>::uninit(); FLAT_MAX + FLAT_SLACK];
        let base = flat.as_mut_ptr().cast::<u8>();
        let mut at = 0;
        for f in &mut tx.batch[..tx.nbatch] {
            let start = at;
            // SAFETY: `at` never exceeds the octets of the FPDUs before this one, which
            // with this one's are at most `first <= FLAT_MAX`, and a whole-array copy
            // overruns a piece by less than `FLAT_SLACK`; every source is our own
            // buffer or registered memory (checked, kept mapped by the device) for the
            // length copied.
            unsafe {
                core::ptr::copy_nonoverlapping(f.head.as_ptr(), base.add(at), MAX_HEAD_LEN);
                at += f.head_len;
                if f.inline_len > 0 {
                    core::ptr::copy_nonoverlapping(f.inline.as_ptr(), base.add(at), f.inline_len);
                    at += f.inline_len;
                }
                for &(addr, len) in &f.pieces[..f.npieces] {
                    core::ptr::copy_nonoverlapping(addr as *const u8, base.add(at), len);
                    at += len;
                }
                core::ptr::copy_nonoverlapping(f.trailer.as_ptr(), base.add(at), MAX_TRAILER_LEN);
                if f.crc_pending {
                    // One pass over the FPDU's octets up to its CRC field (length
                    // field, header, payload, pad), gathered contiguously just above;
                    // kept in the trailer too, for a write the socket takes only part
                    // of (resumed from the pieces).
                    let pad = f.trailer_len - CRC_LEN;
                    let covered = at - start + pad;
                    let wire = crc_to_wire(crc32c(core::slice::from_raw_parts(
                        base.add(start),
                        covered,
                    )));
                    f.trailer[pad..pad + CRC_LEN].copy_from_slice(&wire);
                    core::ptr::copy_nonoverlapping(wire.as_ptr(), base.add(at + pad), CRC_LEN);
                    f.crc_pending = false;
                }
                at += f.trailer_len;
                if !split && f.tail_len > 0 {
                    core::ptr::copy_nonoverlapping(f.tail.as_ptr(), base.add(at), f.tail_len);
                    at += f.tail_len;
                }
            }
        }
        debug_assert_eq!(at, first);
        // SAFETY: `flat` holds `at` initialised octets; the kernel only reads them.
        let r = unsafe { libc::send(fd, flat.as_ptr().cast(), at, SEND_FLAGS | more) };
        if !advance(&mut tx.written, r)? {
            return Ok(false);
        }
    }
    let fpdus = &tx.batch[..tx.nbatch];
    while tx.written < first {
        // Filled entry by entry below (at most BATCH * (MAX_SGE + 4) of them), not
        // zeroed first: 1.5 KiB of stores per write otherwise.
        let mut iov = [core::mem::MaybeUninit::<libc::iovec>::uninit(); BATCH * (MAX_SGE + 4)];
        let mut n = 0;
        let mut skip = tx.written;
        let mut add = |base: *const u8, len: usize| {
            if skip >= len {
                skip -= len;
                return;
            }
            iov[n].write(libc::iovec {
                iov_base: base.wrapping_add(skip) as *mut libc::c_void,
                iov_len: len - skip,
            });
            skip = 0;
            n += 1;
        };
        for f in fpdus {
            add(f.head.as_ptr(), f.head_len);
            add(f.inline.as_ptr(), f.inline_len);
            for &(addr, len) in &f.pieces[..f.npieces] {
                add(addr as *const u8, len);
            }
            add(f.trailer.as_ptr(), f.trailer_len);
            if !split {
                add(f.tail.as_ptr(), f.tail_len);
            }
        }
        let want = first - tx.written;
        if n > 1 && want <= FLAT_MAX {
            // The rest of a short write the socket took only part of: copied into one
            // buffer from where it stopped, as above.
            let mut flat = [core::mem::MaybeUninit::<u8>::uninit(); FLAT_MAX];
            let mut at = 0;
            for v in &iov[..n] {
                // SAFETY: the first `n` entries were initialised above.
                let v = unsafe { v.assume_init_ref() };
                // SAFETY: each entry points into our buffers or registered memory (as
                // for `sendmsg` below) for `iov_len` octets, and their sum is `want`,
                // which fits `flat`.
                unsafe {
                    core::ptr::copy_nonoverlapping(
                        v.iov_base as *const u8,
                        flat.as_mut_ptr().add(at).cast::<u8>(),
                        v.iov_len,
                    );
                }
                at += v.iov_len;
            }
            debug_assert_eq!(at, want);
            // SAFETY: `flat` holds `at` initialised octets; the kernel only reads them.
            let r = unsafe { libc::send(fd, flat.as_ptr().cast(), at, SEND_FLAGS | more) };
            if !advance(&mut tx.written, r)? {
                return Ok(false);
            }
            continue;
        }
        // SAFETY: a zeroed msghdr is valid; we set the iovec array only.
        let mut mh: libc::msghdr = unsafe { core::mem::zeroed() };
        // The first `n` entries are initialised, and only those are passed.
        mh.msg_iov = iov.as_mut_ptr().cast::<libc::iovec>();
        mh.msg_iovlen = n as _;
        // SAFETY: every iovec points into our buffers or registered memory (checked,
        // kept mapped by the device) for its length; the kernel only reads them.
        let r = unsafe { libc::sendmsg(fd, &mh, SEND_FLAGS | more) };
        if !advance(&mut tx.written, r)? {
            return Ok(false);
        }
    }
    let Some(last) = fpdus.last() else {
        return Ok(true);
    };
    while tx.written < tx.total {
        let from = tx.written - first;
        let rest = &last.tail[from..last.tail_len];
        // SAFETY: `rest` is our own buffer, valid for its length; the kernel only reads.
        let r = unsafe { libc::send(fd, rest.as_ptr().cast(), rest.len(), SEND_FLAGS) };
        if !advance(&mut tx.written, r)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Writes of at most this many octets gather their pieces into one buffer and go by
/// `send` instead of `sendmsg` (see [`write_batch`]).
const FLAT_MAX: usize = 1024;

/// Room past [`FLAT_MAX`] for the whole-array copies of a header or trailer.
const FLAT_SLACK: usize = if MAX_HEAD_LEN > MAX_TRAILER_LEN {
    MAX_HEAD_LEN
} else {
    MAX_TRAILER_LEN
};

/// Flags of every FPDU write: non-blocking, no SIGPIPE, and end of record so that TCP
/// starts the next FPDU in a new segment.
const SEND_FLAGS: libc::c_int = libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT | libc::MSG_EOR;

/// Accounts for one write's result: `Ok(true)` to go on, `Ok(false)` when the socket is
/// full; an interrupted write is simply retried by the caller's loop.
fn advance(written: &mut usize, r: isize) -> io::Result<bool> {
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::Interrupted => Ok(true),
            io::ErrorKind::WouldBlock => Ok(false),
            _ => Err(e),
        };
    }
    *written += r as usize;
    Ok(true)
}

/// The payload octets an FPDU of a message with `opcode` carries when ULPDUs are at most
/// `mulpdu` octets: what is left after its DDP/RDMAP header (14 octets tagged, 18
/// untagged), rounded down to whole words.
fn max_payload(mulpdu: usize, opcode: Opcode) -> u64 {
    let hlen = if opcode.is_tagged() { 14 } else { 18 };
    ((mulpdu - hlen) & !3) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    /// Frames one FPDU by hand: `head`, then `payload` as a registered piece, then a
    /// 4-octet trailer.
    fn fpdu(tx: &mut TxState, head: &[u8], payload: &[u8], trailer: [u8; 4]) {
        let f = &mut tx.batch[tx.nbatch];
        f.head[..head.len()].copy_from_slice(head);
        f.head_len = head.len();
        f.inline_len = 0;
        f.pieces[0] = (payload.as_ptr() as u64, payload.len());
        f.npieces = 1;
        f.trailer[..4].copy_from_slice(&trailer);
        f.trailer_len = 4;
        f.tail_len = 0;
        f.total = head.len() + payload.len() + 4;
        tx.total += f.total;
        tx.nbatch += 1;
    }

    /// Short writes gathered straight into one buffer (header and trailer arrays copied
    /// whole) carry exactly each FPDU's octets: a tagged-length header (shorter than the
    /// array), inline bytes, a piece, a 7-octet trailer, and a confirmation Read's tail
    /// in the same write or (`own_write`) in its own.
    #[test]
    fn short_writes_carry_inline_bytes_pieces_and_the_tail() {
        for own_write in [false, true] {
            let (a, mut b) = UnixStream::pair().expect("socket pair");
            let mut tx = TxState::new();
            let payload: Vec<u8> = (0..61u8).collect();
            // FPDU 1: a 16-octet head, 28 inline octets, a 4-octet trailer.
            {
                let f = &mut tx.batch[0];
                f.head = [0xEE; MAX_HEAD_LEN];
                f.head[..16].copy_from_slice(&[1; 16]);
                f.head_len = 16;
                f.inline[..28].copy_from_slice(&[2; 28]);
                f.inline_len = 28;
                f.npieces = 0;
                f.trailer = [0xEE; MAX_TRAILER_LEN];
                f.trailer[..4].copy_from_slice(&[3; 4]);
                f.trailer_len = 4;
                f.tail_len = 0;
                f.total = 16 + 28 + 4;
            }
            // FPDU 2: a 20-octet head, a 61-octet piece, pad and CRC (7), a 20-octet tail.
            {
                let f = &mut tx.batch[1];
                f.head = [4; MAX_HEAD_LEN];
                f.head_len = MAX_HEAD_LEN;
                f.inline_len = 0;
                f.pieces[0] = (payload.as_ptr() as u64, payload.len());
                f.npieces = 1;
                f.trailer = [5; MAX_TRAILER_LEN];
                f.trailer_len = MAX_TRAILER_LEN;
                f.tail = [0xEE; TAIL];
                f.tail[..20].copy_from_slice(&[6; 20]);
                f.tail_len = 20;
                f.own_write = own_write;
                f.total = MAX_HEAD_LEN + 61 + MAX_TRAILER_LEN + 20;
            }
            tx.nbatch = 2;
            tx.total = tx.batch[0].total + tx.batch[1].total;
            let mut want = vec![1; 16];
            want.extend_from_slice(&[2; 28]);
            want.extend_from_slice(&[3; 4]);
            want.extend_from_slice(&[4; MAX_HEAD_LEN]);
            want.extend_from_slice(&payload);
            want.extend_from_slice(&[5; MAX_TRAILER_LEN]);
            want.extend_from_slice(&[6; 20]);
            write_all_and_compare(
                &mut tx,
                &a,
                &mut b,
                &want,
                &format!("own_write {own_write}"),
            );
        }
    }

    /// Writes `tx`'s batch in one `write_batch` on `a` and checks that `b` reads exactly
    /// `want`.
    fn write_all_and_compare(
        tx: &mut TxState,
        a: &UnixStream,
        b: &mut UnixStream,
        want: &[u8],
        what: &str,
    ) {
        assert!(
            write_batch(tx, a.as_raw_fd()).expect("write"),
            "all written: {what}"
        );
        assert_eq!(tx.written, want.len(), "{what}");
        let mut got = vec![0u8; want.len()];
        b.read_exact(&mut got).expect("read");
        assert_eq!(got, want, "{what}");
    }

    /// CRCs left for the write (`crc_pending`) are the CRC32c of each FPDU's octets up
    /// to its CRC field, whichever way the batch goes: gathered into one buffer (a short
    /// write, CRC'd over the copy, and kept in the trailer for a resumed write) or from
    /// the pieces (`sendmsg`, `finish_crc`); inline bytes, a piece and pad included.
    #[test]
    fn pending_crcs_cover_each_fpdus_octets_short_and_long() {
        for payload_len in [61usize, 64, 4001] {
            let (a, mut b) = UnixStream::pair().expect("socket pair");
            let payload: Vec<u8> = (0..payload_len).map(|i| (i * 13 + 1) as u8).collect();
            let mut tx = TxState::new();
            let mut want = Vec::new();
            for (k, inline) in [(0u8, 0usize), (1, 7)] {
                let pad = pad_len(20 + inline + payload_len);
                let f = &mut tx.batch[tx.nbatch];
                f.head = [0x40 + k; MAX_HEAD_LEN];
                f.head_len = MAX_HEAD_LEN;
                f.inline[..inline].fill(0x70 + k);
                f.inline_len = inline;
                f.pieces[0] = (payload.as_ptr() as u64, payload_len);
                f.npieces = 1;
                f.trailer = [0; MAX_TRAILER_LEN];
                f.trailer_len = pad + CRC_LEN;
                f.crc_pending = true;
                f.tail_len = 0;
                f.total = MAX_HEAD_LEN + inline + payload_len + pad + CRC_LEN;
                tx.total += f.total;
                tx.nbatch += 1;
                let start = want.len();
                want.extend_from_slice(&[0x40 + k; MAX_HEAD_LEN]);
                want.extend(std::iter::repeat_n(0x70 + k, inline));
                want.extend_from_slice(&payload);
                want.extend(std::iter::repeat_n(0, pad));
                let crc = crc_to_wire(crc32c(&want[start..]));
                want.extend_from_slice(&crc);
            }
            write_all_and_compare(&mut tx, &a, &mut b, &want, &format!("{payload_len}"));
            let mut at = 0;
            for f in &tx.batch[..2] {
                at += f.total;
                assert!(!f.crc_pending, "{payload_len}: CRC left pending");
                let pad = f.trailer_len - CRC_LEN;
                assert_eq!(
                    f.trailer[pad..pad + CRC_LEN],
                    want[at - CRC_LEN..at],
                    "{payload_len}: the trailer keeps the CRC sent"
                );
            }
        }
    }

    /// A long message's FPDUs are spread evenly over the fewest writes of at most
    /// `BATCH` (17 FPDUs as 6, 6, 5, not 8, 8, 1), and every FPDU carries the same
    /// octets (header, payload, CRC) whatever write it went in. A `SOCK_SEQPACKET` pair
    /// keeps each write one record, so the reader sees where the writes were cut.
    #[test]
    fn a_long_messages_fpdus_are_spread_evenly_over_its_writes() {
        use crate::iwarp::fpdu::fpdu_len;
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors socketpair writes.
        let r =
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0, fds.as_mut_ptr()) };
        assert_eq!(r, 0, "socketpair");
        // SAFETY: both descriptors were just created and are owned only here.
        let (a, b) = unsafe {
            use std::os::fd::FromRawFd;
            (
                std::os::fd::OwnedFd::from_raw_fd(fds[0]),
                std::os::fd::OwnedFd::from_raw_fd(fds[1]),
            )
        };
        for fd in [a.as_raw_fd(), b.as_raw_fd()] {
            let size: libc::c_int = 4 << 20;
            for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
                // SAFETY: a valid c_int option value for the duration of the call.
                unsafe {
                    libc::setsockopt(
                        fd,
                        libc::SOL_SOCKET,
                        opt,
                        (&size as *const libc::c_int).cast(),
                        core::mem::size_of::<libc::c_int>() as libc::socklen_t,
                    )
                };
            }
        }
        let caps = crate::fabric::QpCaps {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: MAX_SGE as u32,
            max_recv_sge: MAX_SGE as u32,
        };
        let qp = std::sync::Arc::new(super::super::qp::QpShared::new(
            1,
            crate::fabric::ConnId(1),
            1,
            caps,
            crate::fabric::QpState::ReadyToSend,
        ));
        let mut e = Engine::new(qp, 0, 0, false, 4, 4);
        e.link.crc = true;
        e.link.mulpdu = 1024;
        e.wake.heard = true;
        let keys = KeyTable::new(4);
        let wire = Wire {
            fd: a.as_raw_fd(),
            tap: None,
        };
        let per = max_payload(1024, Opcode::RdmaWrite) as usize;
        for (fpdus, want) in [
            (17usize, &[6usize, 6, 5][..]),
            (20, &[7, 7, 6][..]),
            (9, &[5, 4][..]),
            (8, &[8][..]),
            (3, &[3][..]),
            (25, &[7, 6, 6, 6][..]),
        ] {
            let data: Vec<u8> = (0..per * fpdus - 100)
                .map(|i| (i * 31 + fpdus) as u8)
                .collect();
            e.start(
                Kind::Confirmation,
                Opcode::RdmaWrite,
                MessageTarget::Tagged {
                    stag: 0x77,
                    to: 0x1000,
                },
                Source::Contiguous(data.as_ptr() as u64),
                data.len() as u64,
            );
            assert!(!e.transmit(&keys, &wire).expect("transmit"), "all written");
            let mut got = Vec::new();
            let mut stream = Vec::new();
            let mut rec = vec![0u8; 16 * 1024];
            loop {
                // SAFETY: `rec` is writable for its length.
                let n = unsafe {
                    libc::recv(
                        b.as_raw_fd(),
                        rec.as_mut_ptr().cast(),
                        rec.len(),
                        libc::MSG_DONTWAIT,
                    )
                };
                if n <= 0 {
                    break;
                }
                let rec = &rec[..n as usize];
                let mut k = 0;
                let mut at = 0;
                while at < rec.len() {
                    let len = usize::from(u16::from_be_bytes([rec[at], rec[at + 1]]));
                    at += fpdu_len(len);
                    k += 1;
                }
                assert_eq!(at, rec.len(), "whole FPDUs per write");
                got.push(k);
                stream.extend_from_slice(rec);
            }
            assert_eq!(got, want, "FPDUs per write for {fpdus}");
            let mut expect = Vec::new();
            let mut off = 0;
            while off < data.len() {
                let n = per.min(data.len() - off);
                let last = off + n == data.len();
                let h = SegmentHeader::tagged(Opcode::RdmaWrite, last, 0x77, 0x1000 + off as u64);
                let mut buf = vec![0u8; fpdu_len(h.encoded_len() + n)];
                let w = encode_fpdu(&mut buf, &h, &data[off..off + n], true).expect("fpdu");
                expect.extend_from_slice(&buf[..w]);
                off += n;
            }
            assert!(stream == expect, "the same octets for {fpdus}");
        }
    }

    /// A batch of small FPDUs (gathered into one buffer, `send`) and one of large ones
    /// (`sendmsg` from the pieces) put the same octets on the stream, in order.
    #[test]
    fn short_and_long_writes_carry_the_same_octets() {
        for payload_len in [64usize, 600, 4000] {
            let (a, mut b) = UnixStream::pair().expect("socket pair");
            let p1: Vec<u8> = (0..payload_len).map(|i| i as u8).collect();
            let p2: Vec<u8> = (0..payload_len).map(|i| (i * 7 + 3) as u8).collect();
            let mut tx = TxState::new();
            fpdu(&mut tx, &[1, 2, 3, 4, 5, 6], &p1, [9, 9, 9, 9]);
            fpdu(&mut tx, &[7, 8], &p2, [5, 6, 7, 8]);
            let mut want = vec![1, 2, 3, 4, 5, 6];
            want.extend_from_slice(&p1);
            want.extend_from_slice(&[9, 9, 9, 9, 7, 8]);
            want.extend_from_slice(&p2);
            want.extend_from_slice(&[5, 6, 7, 8]);
            write_all_and_compare(
                &mut tx,
                &a,
                &mut b,
                &want,
                &format!("payload {payload_len}"),
            );
        }
    }
}
