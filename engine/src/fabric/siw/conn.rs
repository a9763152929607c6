//! One TCP connection: the MPA start-up exchange, then the FPDU stream of its queue
//! pair, then the close.

use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::Weak;

use mio::net::TcpStream;

use super::cm::{CmTable, SiwConnRequest};
use super::config::SiwConfig;
use super::cq::CqTable;
use super::device::DeviceShared;
use super::engine::{Engine, Link};
use super::keys::KeyTable;
use super::rx::{Predicted, GAP_MAX, PREDICT_MAX};
use super::sock;
use super::tx::one::One;
use super::tx::{Tap, TermState, Wire};
use crate::fabric::QpState;
use crate::fabric::{CmEvent, CmPrivateData, ConnId};
use crate::iwarp::fpdu::mulpdu;
use crate::iwarp::handshake::{Established, Initiator, Responder};
use crate::iwarp::mpa::MpaError;

/// Reads per connection per poll before moving on, so one busy peer cannot starve the
/// others.
const READ_BUDGET: usize = 8;

/// Receive-buffer octets a direct read takes after the target range: room for pad,
/// CRC, the next FPDU's header and the start of its payload.
const DIRECT_TAIL: usize = 256;

/// Octets a predicted read may take after the current payload (`Engine::predict`):
/// what a misprediction may have to copy back, in `Spill`. Eight loopback FPDUs (32 KiB
/// each) and their gaps.
const SPILL: usize = 264 * 1024;

/// Anonymous memory that takes back, on a misprediction, the octets a predicted read
/// put where they did not belong, to be parsed again. Mapped once per connection that
/// predicts and never touched until a misprediction copies into it (most reads copy
/// nothing, or a few octets at a message's end), so it costs no resident memory until
/// then; an idle connection gives its pages back (`Conn::trim_rx`).
struct Spill {
    map: memmap2::MmapMut,
}

impl Spill {
    fn new(len: usize) -> Option<Spill> {
        memmap2::MmapMut::map_anon(len)
            .ok()
            .map(|map| Spill { map })
    }

    /// Gives the pages back (they read as zero again). Returns the octets released.
    fn release(&mut self) -> usize {
        // SAFETY: DontNeed on a private anonymous mapping only makes its pages read as
        // zero; the spill holds nothing that matters between reads, and no slice of it
        // is alive here (`&mut self`).
        match unsafe {
            self.map
                .unchecked_advise(memmap2::UncheckedAdvice::DontNeed)
        } {
            Ok(()) => self.map.len(),
            Err(_) => 0,
        }
    }
}

/// Smallest MULPDU we work with, whatever the MSS says.
pub(crate) const MIN_MULPDU: usize = 128;

/// Long messages that may look the MSS up again ([`Engine::refresh_mulpdu`]): enough
/// for a loopback window to open, few enough that a path whose MSS never grows pays a
/// handful of `getsockopt` calls in the connection's life.
pub(crate) const MSS_CHECKS: u16 = 64;

/// Where a connection stands.
pub(crate) enum Phase {
    /// TCP connect in progress (active side).
    Connecting(Box<Initiator>),
    /// MPA Request written or being written; waiting for the Reply.
    AwaitReply(Box<Initiator>),
    /// Passive side: reading the MPA Request.
    AwaitRequest(Box<Responder>),
    /// The Request was reported; waiting for `accept` or `reject`.
    Deciding(Box<Responder>),
    /// Writing the Reply; then running (accept) or closing (reject).
    Replying { accept: bool },
    /// FPDUs flow.
    Running,
    /// Our write side is shut; reading until the peer closes too.
    Draining,
    /// The socket is gone; the queue pair only reports completions.
    Closed,
}

/// What the driver does with a connection after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keep {
    Yes,
    /// Nothing refers to it any more.
    Remove,
}

/// The driver's tables a connection step may touch.
pub(crate) struct Ctx<'a> {
    pub(crate) keys: &'a KeyTable,
    pub(crate) cqs: &'a mut CqTable,
    pub(crate) cms: &'a mut CmTable,
    pub(crate) cfg: &'a SiwConfig,
    pub(crate) dev: &'a Weak<DeviceShared>,
    pub(crate) slot: usize,
}

pub(crate) struct Conn {
    pub(crate) id: ConnId,
    pub(crate) cm: usize,
    pub(crate) sock: Option<TcpStream>,
    pub(crate) local: SocketAddr,
    pub(crate) peer: SocketAddr,
    pub(crate) phase: Phase,
    pub(crate) readable: bool,
    /// `readable` was set by the driver's speculative round only (no readiness event,
    /// no earlier read left it set): a read now is a guess (see `step_running`).
    pub(crate) speculative: bool,
    pub(crate) writable: bool,
    /// epoll reported the read side closed (the peer's FIN) or an error: the stream's
    /// end is coming, and no further readiness event will announce it, so a short read
    /// no longer proves the socket empty (see [`Conn::drained_if_short`]).
    pub(crate) read_closed: bool,
    /// MPA frame being written.
    pub(crate) out: Vec<u8>,
    out_at: usize,
    rxbuf: Box<[u8]>,
    /// Where a predicted read puts the octets between payloads (pad, CRC, the next
    /// header), one `GAP_MAX` slot per predicted FPDU.
    gaps: [u8; GAP_MAX * PREDICT_MAX],
    /// Where mispredicted octets are copied back to (`None`: no predictions).
    spill: Option<Spill>,
    rx_start: usize,
    rx_end: usize,
    pub(crate) engine: Option<Engine>,
    /// `disconnect` still applies and Disconnected is not yet reported.
    pub(crate) cm_open: bool,
    /// When the TCP connection was accepted or started: the handshake deadline counts
    /// from here.
    pub(crate) started: std::time::Instant,
    /// `post_send` wrote a Send since the last step ([`Conn::send_now`]): the step
    /// counts as having sent (its guessed read is skipped, as after its own write).
    sent_early: bool,
    /// `post_send`'s write failed: the next step handles the loss, as if its own write
    /// had failed.
    broken: bool,
}

fn unspecified() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 0))
}

impl Conn {
    /// Gives the whole pages inside the receive buffer back to the operating system
    /// when it holds no unread bytes (an idle connection): they read as zero and are
    /// faulted in again by the next read. Returns the octets released.
    pub(crate) fn trim_rx(&mut self) -> usize {
        if self.rx_start < self.rx_end {
            return 0;
        }
        self.rx_start = 0;
        self.rx_end = 0;
        let spilled = self.spill.as_mut().map_or(0, Spill::release);
        let page = 4096usize;
        let base = self.rxbuf.as_mut_ptr() as usize;
        let start = base.next_multiple_of(page);
        let end = (base + self.rxbuf.len()) & !(page - 1);
        if end <= start {
            return spilled;
        }
        // SAFETY: [start, end) lies inside `rxbuf`, which this connection owns and
        // nothing reads until the next socket read fills it again; MADV_DONTNEED on
        // private anonymous memory only makes those pages read as zero.
        let rc =
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        if rc == 0 {
            end - start + spilled
        } else {
            spilled
        }
    }

    pub(crate) fn new(
        id: ConnId,
        cm: usize,
        sock: Option<TcpStream>,
        phase: Phase,
        cfg: &SiwConfig,
    ) -> Conn {
        let (local, peer) = sock.as_ref().map_or((unspecified(), unspecified()), |s| {
            (
                s.local_addr().unwrap_or_else(|_| unspecified()),
                s.peer_addr().unwrap_or_else(|_| unspecified()),
            )
        });
        Conn {
            id,
            cm,
            sock,
            local,
            peer,
            phase,
            readable: false,
            speculative: false,
            writable: false,
            read_closed: false,
            out: Vec::new(),
            out_at: 0,
            rxbuf: vec![0u8; cfg.rx_buffer].into_boxed_slice(),
            gaps: [0; GAP_MAX * PREDICT_MAX],
            spill: if cfg.predict_fpdus {
                Spill::new(SPILL)
            } else {
                None
            },
            rx_start: 0,
            rx_end: 0,
            engine: None,
            cm_open: true,
            started: std::time::Instant::now(),
            sent_early: false,
            broken: false,
        }
    }

    /// Whether the connection is still in its TCP or MPA handshake (not waiting for the
    /// application's accept or reject, which the upper layer bounds itself).
    pub(crate) fn in_handshake(&self) -> bool {
        matches!(
            self.phase,
            Phase::Connecting(_)
                | Phase::AwaitReply(_)
                | Phase::AwaitRequest(_)
                | Phase::Replying { .. }
        )
    }

    /// The handshake outlived [`SiwConfig::handshake_timeout`]: the socket is closed, and
    /// the side that asked learns why (an active connect fails as unreachable before MPA
    /// or rejected during it; a passive one never reached the application, or fails its
    /// queue pair while the Reply is stuck).
    pub(crate) fn expire_handshake(&mut self, ctx: &mut Ctx<'_>) -> Keep {
        match self.phase {
            Phase::Connecting(_) => self.unreachable(ctx),
            Phase::AwaitReply(_) => self.rejected(ctx, CmPrivateData::EMPTY),
            Phase::AwaitRequest(_) => {
                self.close();
                return Keep::Remove;
            }
            Phase::Replying { accept: true } => self.lost(ctx),
            Phase::Replying { accept: false } => {
                self.close();
                return Keep::Remove;
            }
            _ => {}
        }
        Keep::Yes
    }

    /// The negotiated link for this socket.
    pub(crate) fn link(&self, est: &Established, cfg: &SiwConfig) -> Link {
        let mss = self
            .sock
            .as_ref()
            .and_then(|s| sock::mss(s.as_raw_fd()))
            .unwrap_or(1460);
        let m = mulpdu(mss).map_or(MIN_MULPDU, usize::from).max(MIN_MULPDU);
        let peer_ird = est.peer.map_or(cfg.ord, |p| p.ird);
        Link {
            crc: est.crc,
            mulpdu: m,
            mss_checks: MSS_CHECKS,
            ord: usize::from(cfg.ord.min(peer_ird)),
            ird: usize::from(cfg.ird),
        }
    }

    /// Queues an MPA frame for writing.
    pub(crate) fn send_frame(&mut self, frame: &[u8], cfg: &SiwConfig) {
        self.out.clear();
        self.out.extend_from_slice(frame);
        self.out_at = 0;
        if let Some(tap) = &cfg.tap {
            tap.mpa_frame(self.local, self.peer, frame);
        }
    }

    /// Writes the pending MPA frame. `Ok(true)` when all of it is out.
    fn flush_frame(&mut self) -> io::Result<bool> {
        let Some(s) = self.sock.as_mut() else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        while self.out_at < self.out.len() {
            match s.write(&self.out[self.out_at..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.out_at += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.writable = false;
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Reads more into the receive buffer (when it is used up). `Ok(0)` is end of
    /// stream; `WouldBlock` clears the readable flag.
    fn fill(&mut self) -> io::Result<usize> {
        self.fill_upto(self.rxbuf.len())
    }

    /// As [`fill`](Self::fill), reading at most `limit` octets.
    fn fill_upto(&mut self, limit: usize) -> io::Result<usize> {
        if self.rx_start < self.rx_end {
            return Ok(self.rx_end - self.rx_start);
        }
        self.rx_start = 0;
        self.rx_end = 0;
        let Some(fd) = self.sock.as_ref().map(AsRawFd::as_raw_fd) else {
            return Ok(0);
        };
        let end = limit.min(self.rxbuf.len());
        loop {
            // `recv` directly, not through `Read`: an empty poll's EAGAIN is checked as
            // an errno, without building an `io::Error` and decoding its kind (every
            // idle poll of a running connection takes this path).
            // SAFETY: the buffer is ours and `end` is within it; recv writes at most
            // `end` octets.
            let r = unsafe { libc::recv(fd, self.rxbuf.as_mut_ptr().cast(), end, 0) };
            if r >= 0 {
                let n = r as usize;
                self.rx_end = n;
                self.drained_if_short(n, end);
                return Ok(n);
            }
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => {}
                Some(e) if e == libc::EAGAIN || e == libc::EWOULDBLOCK => {
                    self.readable = false;
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Some(e) => return Err(io::Error::from_raw_os_error(e)),
                None => return Err(io::ErrorKind::Other.into()),
            }
        }
    }

    /// A read that returned less than it asked for (and not the end of the stream)
    /// emptied the socket's receive queue, so the socket counts as not readable without
    /// the read that would fail with EAGAIN: one `recv` per message, not two. Data that
    /// arrives later raises a new edge-triggered readiness event (Linux reports every
    /// arrival), and speculative rounds read anyway.
    ///
    /// Except at the end of the stream: the peer's FIN is not data, and a `recv` that
    /// meets it after data returns the data short and leaves the end for the next call.
    /// If the FIN was already queued when epoll reported the data, that one event was
    /// the last: nothing will ever make the socket readable again, and a connection whose
    /// peer closed right after its last message would stay Running for good, its posted
    /// work never completing (the siw soak's stalled connections). So once epoll has said
    /// the read side closed (or failed), reads go on until one returns the end or an
    /// error.
    #[inline]
    fn drained_if_short(&mut self, got: usize, asked: usize) {
        if got > 0 && got < asked && !self.read_closed {
            self.readable = false;
        }
    }

    /// Reads the rest of a segment's payload straight into its target (`at`, `len`
    /// octets, from `Engine::direct_target`) and what follows into the receive buffer,
    /// with one `readv`. Without predictions only the trailer, the next header and a
    /// little of the next payload go to the front of the buffer, so that the next
    /// segment's payload is placed directly too. With predictions (`Engine::predict`)
    /// each predicted FPDU's gap goes to its `gaps` slot and its payload to where it
    /// was predicted, before that tail (see `deliver_direct`). Returns the
    /// octets read in all; 0 is the end of the stream. Only called with every buffered
    /// octet parsed (`step_running` parses each read before the next).
    fn fill_direct(&mut self, at: *mut u8, len: usize, chain: &[Predicted]) -> io::Result<usize> {
        debug_assert!(
            self.rx_start >= self.rx_end,
            "buffered octets left unparsed"
        );
        self.rx_start = 0;
        self.rx_end = 0;
        let Some(s) = self.sock.as_ref() else {
            return Ok(0);
        };
        let tail_len = self.rxbuf.len().min(DIRECT_TAIL);
        let mut iov = [libc::iovec {
            iov_base: core::ptr::null_mut(),
            iov_len: 0,
        }; 2 + 2 * PREDICT_MAX];
        iov[0] = libc::iovec {
            iov_base: at.cast(),
            iov_len: len,
        };
        let mut cnt = 1;
        for (i, p) in chain.iter().enumerate() {
            iov[cnt] = libc::iovec {
                iov_base: self.gaps[i * GAP_MAX..].as_mut_ptr().cast(),
                iov_len: p.gap.min(GAP_MAX),
            };
            iov[cnt + 1] = libc::iovec {
                iov_base: p.at.cast(),
                iov_len: p.len,
            };
            cnt += 2;
        }
        iov[cnt] = libc::iovec {
            iov_base: self.rxbuf.as_mut_ptr().cast(),
            iov_len: tail_len,
        };
        cnt += 1;
        let asked: usize = iov[..cnt].iter().map(|v| v.iov_len).sum();
        loop {
            // SAFETY: the first entry is checked target memory the engine offered (kept
            // mapped by its registration), the predicted payloads lie in the receive's
            // checked scatter entries (`Engine::predict`), the rest are our own buffers;
            // readv writes at most their lengths.
            let n = unsafe { libc::readv(s.as_raw_fd(), iov.as_ptr(), cnt as libc::c_int) };
            if n >= 0 {
                let n = n as usize;
                self.drained_if_short(n, asked);
                return Ok(n);
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => {}
                io::ErrorKind::WouldBlock => {
                    self.readable = false;
                    return Err(e);
                }
                _ => return Err(e),
            }
        }
    }

    /// Hands `n` octets a `fill_direct` read to the engine: the first `len` were placed
    /// at `at` as `direct_target` offered; then, for each predicted FPDU in turn, its
    /// gap is parsed up to the next header and the octets read to its predicted place
    /// count as payload only as far as `Engine::accept_predicted` confirms them. At the
    /// first octet that was not what was predicted (a shorter or longer segment, another
    /// message, a failed check), that octet and everything read after it are copied, in
    /// stream order, to the spill area and parsed from there like any buffered read
    /// (nothing has written to the receive since the read, so the copy sees exactly
    /// what arrived). Leaves the octets still to parse (the read's tail) in
    /// `rxbuf[rx_start..rx_end]`.
    fn deliver_direct(
        &mut self,
        keys: &KeyTable,
        at: *mut u8,
        len: usize,
        chain: &[Predicted],
        n: usize,
    ) {
        let Some(e) = self.engine.as_mut() else {
            return;
        };
        let placed = n.min(len);
        if placed > 0 {
            // SAFETY: `fill_direct` read `placed` octets to `at`, within what
            // `direct_target` offered, with nothing received since.
            unsafe { e.placed_direct(at, placed) };
        }
        let mut left = n - placed;
        if chain.is_empty() {
            self.rx_end = left;
            return;
        }
        let tail_len = self.rxbuf.len().min(DIRECT_TAIL);
        // Octets read into each piece, in stream order: gap i, payload i, ..., tail.
        let mut got = [0usize; 2 * PREDICT_MAX];
        for (i, p) in chain.iter().enumerate() {
            // The gap's iovec length, as `fill_direct` gave it.
            got[2 * i] = left.min(p.gap.min(GAP_MAX));
            left -= got[2 * i];
            got[2 * i + 1] = left.min(p.len);
            left -= got[2 * i + 1];
        }
        self.rx_end = left.min(tail_len);
        // The first piece (and the octet in it) not taken as predicted.
        let mut miss: Option<(usize, usize)> = None;
        for (i, p) in chain.iter().enumerate() {
            let g = got[2 * i];
            if g == 0 {
                break;
            }
            if !e.payload_complete() {
                // The segment is longer than predicted: the gap is its payload.
                miss = Some((2 * i, 0));
                break;
            }
            let used = e.receive_through_header(keys, &self.gaps[i * GAP_MAX..i * GAP_MAX + g]);
            if used < g {
                miss = Some((2 * i, used));
                break;
            }
            let r = got[2 * i + 1];
            if r == 0 {
                break;
            }
            let ok = e.accept_predicted(p.at, r);
            if ok > 0 {
                // SAFETY: the read put `r >= ok` octets at `p.at`, inside the checked
                // destination, and they are this segment's next payload.
                unsafe { e.placed_direct(p.at, ok) };
            }
            if ok < r {
                miss = Some((2 * i + 1, ok));
                break;
            }
        }
        let Some((first, skip)) = miss else {
            return;
        };
        let Some(spill) = self.spill.as_mut() else {
            // Predictions are planned only with a spill area (`predict_budget`).
            e.stream_lost();
            return;
        };
        // Copy back, in stream order, what was read from the missed octet on, and
        // parse it; the tail (still in the receive buffer) follows it.
        let mut m = 0;
        for (piece, &have) in got.iter().enumerate().take(2 * chain.len()).skip(first) {
            let from = if piece == first { skip } else { 0 };
            if have <= from {
                continue;
            }
            let c = have - from;
            let i = piece / 2;
            let src = if piece % 2 == 0 {
                self.gaps[i * GAP_MAX + from..].as_ptr()
            } else {
                // SAFETY: `from < have <= chain[i].len`: inside the predicted range.
                unsafe { chain[i].at.add(from) }.cast_const()
            };
            let Some(dst) = spill.map.get_mut(m..m + c) else {
                // Cannot happen: `predict` kept the read within the spill's length.
                e.stream_lost();
                return;
            };
            // SAFETY: `src` holds `c` octets just read (our gap slot, or the checked
            // destination, which nothing has written since the read); the spill is our
            // own mapping, disjoint from both.
            dst.copy_from_slice(unsafe { core::slice::from_raw_parts(src, c) });
            m += c;
        }
        let spilled = &spill.map[..m];
        e.receive(keys, spilled);
    }

    /// The budget of a predicted read: what the spill area can take back.
    fn predict_budget(&self) -> usize {
        self.spill.as_ref().map_or(0, |s| s.map.len())
    }

    fn report(&mut self, ctx: &mut Ctx<'_>, e: CmEvent<SiwConnRequest>) {
        ctx.cms.push(self.cm, e);
    }

    /// Reports Disconnected once, and ends `disconnect`'s claim on the id.
    pub(crate) fn report_down(&mut self, cms: &mut CmTable) {
        if self.cm_open {
            self.cm_open = false;
            cms.push(self.cm, CmEvent::Disconnected { conn: self.id });
        }
    }

    /// Drops the socket.
    pub(crate) fn close(&mut self) {
        super::watch::event(self, "close");
        self.sock = None;
        self.phase = Phase::Closed;
        self.readable = false;
        self.writable = false;
        self.read_closed = false;
    }

    /// Shuts our write side and waits for the peer to close.
    pub(crate) fn shut_write(&mut self) {
        super::watch::event(self, "shut write");
        if let Some(s) = &self.sock {
            let _ = s.shutdown(Shutdown::Write);
            self.phase = Phase::Draining;
        } else {
            self.phase = Phase::Closed;
        }
    }

    /// The connection attempt failed before MPA started.
    fn unreachable(&mut self, ctx: &mut Ctx<'_>) {
        if let Some(e) = self.engine.as_mut() {
            e.fail();
        }
        self.close();
        self.cm_open = false;
        let conn = self.id;
        self.report(ctx, CmEvent::Unreachable { conn });
    }

    /// The active side's attempt ended without a connection.
    fn rejected(&mut self, ctx: &mut Ctx<'_>, private_data: CmPrivateData) {
        if let Some(e) = self.engine.as_mut() {
            e.fail();
        }
        self.close();
        self.cm_open = false;
        let conn = self.id;
        self.report(ctx, CmEvent::Rejected { conn, private_data });
    }

    /// The stream ended (end of file, reset, or a write error).
    fn lost(&mut self, ctx: &mut Ctx<'_>) {
        super::watch::event(self, "lost");
        if let Some(e) = self.engine.as_mut() {
            e.qp.set_disconnected();
            e.fail();
        }
        self.close();
        self.report_down(ctx.cms);
    }

    /// Advances the connection as far as it goes without waiting.
    pub(crate) fn step(&mut self, ctx: &mut Ctx<'_>) -> Keep {
        match &self.phase {
            Phase::Connecting(_) => self.step_connecting(ctx),
            Phase::AwaitReply(_) => self.step_await_reply(ctx),
            Phase::AwaitRequest(_) => {
                if self.step_await_request(ctx) == Keep::Remove {
                    return Keep::Remove;
                }
            }
            Phase::Deciding(_) => {}
            Phase::Replying { .. } => {
                if self.step_replying(ctx) == Keep::Remove {
                    return Keep::Remove;
                }
            }
            Phase::Running => self.step_running(ctx),
            Phase::Draining => self.step_draining(ctx),
            Phase::Closed => {}
        }
        match self.engine.as_mut() {
            Some(e) => {
                e.emit(ctx.cqs);
                Keep::Yes
            }
            None if matches!(self.phase, Phase::Closed) => Keep::Remove,
            None => Keep::Yes,
        }
    }

    fn step_connecting(&mut self, ctx: &mut Ctx<'_>) {
        if !(self.readable || self.writable) {
            return;
        }
        let Some(s) = self.sock.as_ref() else {
            return self.unreachable(ctx);
        };
        match s.take_error() {
            Ok(None) => {}
            Ok(Some(_)) | Err(_) => return self.unreachable(ctx),
        }
        match s.peer_addr() {
            Ok(peer) => {
                self.peer = peer;
                self.local = s.local_addr().unwrap_or_else(|_| unspecified());
            }
            Err(e) if e.kind() == io::ErrorKind::NotConnected => {
                // Not yet: the next readiness event tells.
                self.readable = false;
                self.writable = false;
                return;
            }
            Err(_) => return self.unreachable(ctx),
        }
        let _ = s.set_nodelay(true);
        let Phase::Connecting(ini) = std::mem::replace(&mut self.phase, Phase::Closed) else {
            return;
        };
        let request = ini.request().to_vec();
        self.send_frame(&request, ctx.cfg);
        self.phase = Phase::AwaitReply(ini);
        self.step_await_reply(ctx);
    }

    fn step_await_reply(&mut self, ctx: &mut Ctx<'_>) {
        match self.flush_frame() {
            Ok(_) => {}
            Err(_) => return self.rejected(ctx, CmPrivateData::EMPTY),
        }
        while self.readable || self.rx_start < self.rx_end {
            match self.fill() {
                Ok(0) => return self.rejected(ctx, CmPrivateData::EMPTY),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => return self.rejected(ctx, CmPrivateData::EMPTY),
            }
            let Phase::AwaitReply(ini) = &mut self.phase else {
                return;
            };
            let r = ini.feed(&self.rxbuf[self.rx_start..self.rx_end]);
            match r {
                Ok(p) => {
                    self.rx_start += p.consumed;
                    if let Some(est) = p.done {
                        let pd = CmPrivateData::new(ini.peer_private_data());
                        return self.active_established(ctx, est, pd.ok());
                    }
                }
                Err(MpaError::Rejected) => {
                    let pd = CmPrivateData::new(ini.peer_private_data()).unwrap_or_default();
                    return self.rejected(ctx, pd);
                }
                Err(_) => return self.rejected(ctx, CmPrivateData::EMPTY),
            }
        }
    }

    fn active_established(
        &mut self,
        ctx: &mut Ctx<'_>,
        est: Established,
        private_data: Option<CmPrivateData>,
    ) {
        // A reply whose private data we cannot hand over is treated as a refusal.
        let Some(private_data) = private_data else {
            return self.rejected(ctx, CmPrivateData::EMPTY);
        };
        let link = self.link(&est, ctx.cfg);
        let Some(e) = self.engine.as_mut() else {
            return self.rejected(ctx, CmPrivateData::EMPTY);
        };
        e.establish(link);
        e.qp.advance(QpState::ReadyToSend);
        self.phase = Phase::Running;
        super::watch::event(self, "established (active)");
        let conn = self.id;
        self.report(ctx, CmEvent::Established { conn, private_data });
        self.step_running(ctx);
    }

    fn step_await_request(&mut self, ctx: &mut Ctx<'_>) -> Keep {
        while self.readable || self.rx_start < self.rx_end {
            match self.fill() {
                Ok(0) => {
                    self.close();
                    return Keep::Remove;
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Keep::Yes,
                Err(_) => {
                    self.close();
                    return Keep::Remove;
                }
            }
            let Phase::AwaitRequest(resp) = &mut self.phase else {
                return Keep::Yes;
            };
            match resp.feed(&self.rxbuf[self.rx_start..self.rx_end]) {
                Ok(p) => {
                    self.rx_start += p.consumed;
                    if p.done.is_none() {
                        continue;
                    }
                    match CmPrivateData::new(resp.peer_private_data()) {
                        Ok(private_data) => {
                            let Phase::AwaitRequest(resp) =
                                std::mem::replace(&mut self.phase, Phase::Closed)
                            else {
                                return Keep::Yes;
                            };
                            self.phase = Phase::Deciding(resp);
                            let request =
                                SiwConnRequest::new(ctx.dev.clone(), ctx.slot, self.id, self.peer);
                            self.report(
                                ctx,
                                CmEvent::ConnectRequest {
                                    request,
                                    private_data,
                                },
                            );
                        }
                        // More than the fabric interface carries: refuse.
                        Err(_) => self.reject_now(ctx.cfg, &[]),
                    }
                    return Keep::Yes;
                }
                Err(MpaError::MarkersRequired) => {
                    self.reject_now(ctx.cfg, &[]);
                    return self.step_replying(ctx);
                }
                Err(_) => {
                    self.close();
                    return Keep::Remove;
                }
            }
        }
        Keep::Yes
    }

    /// Answers the pending Request with a rejecting Reply, then closes.
    pub(crate) fn reject_now(&mut self, cfg: &SiwConfig, private_data: &[u8]) {
        let resp = match std::mem::replace(&mut self.phase, Phase::Closed) {
            Phase::AwaitRequest(r) | Phase::Deciding(r) => r,
            other => {
                self.phase = other;
                return;
            }
        };
        let mut resp = resp;
        match resp.reject(private_data) {
            Ok(reply) => {
                let reply = reply.to_vec();
                self.send_frame(&reply, cfg);
                self.phase = Phase::Replying { accept: false };
            }
            Err(_) => self.close(),
        }
    }

    fn step_replying(&mut self, ctx: &mut Ctx<'_>) -> Keep {
        let Phase::Replying { accept } = self.phase else {
            return Keep::Yes;
        };
        match self.flush_frame() {
            Ok(true) => {}
            Ok(false) => return Keep::Yes,
            Err(_) => {
                if accept {
                    self.lost(ctx);
                    return Keep::Yes;
                }
                self.close();
                return Keep::Remove;
            }
        }
        if !accept {
            if let Some(s) = &self.sock {
                let _ = s.shutdown(Shutdown::Write);
            }
            self.close();
            return if self.engine.is_some() {
                Keep::Yes
            } else {
                Keep::Remove
            };
        }
        let Some(e) = self.engine.as_mut() else {
            self.close();
            return Keep::Remove;
        };
        e.qp.advance(QpState::ReadyToSend);
        self.phase = Phase::Running;
        super::watch::event(self, "established (passive)");
        let conn = self.id;
        self.report(
            ctx,
            CmEvent::Established {
                conn,
                private_data: CmPrivateData::EMPTY,
            },
        );
        self.step_running(ctx);
        Keep::Yes
    }

    /// Writes a lone small Send just posted to an idle transmitter, for `post_send`
    /// (issue 14, sixth round): what this connection's next step would write first, the
    /// same way (`Engine::send_one`), one poll earlier. Anything else (a running
    /// transmitter, several requests, Reads owed, strict completions, a tap) is left
    /// for the step. A failed write is left for the step too, which handles the loss
    /// with the driver's tables at hand.
    pub(crate) fn send_now(&mut self, keys: &KeyTable) {
        if !matches!(self.phase, Phase::Running) || self.broken {
            return;
        }
        let Some(sock) = self.sock.as_ref() else {
            return;
        };
        let Some(e) = self.engine.as_mut() else {
            return;
        };
        let wire = Wire {
            fd: sock.as_raw_fd(),
            tap: None,
        };
        match e.send_one(keys, &wire) {
            Ok(One::NotTaken) => {}
            Ok(One::Written) => self.sent_early = true,
            Ok(One::Full) => {
                self.sent_early = true;
                self.writable = false;
            }
            Err(_) => self.broken = true,
        }
    }

    fn step_running(&mut self, ctx: &mut Ctx<'_>) {
        if self.broken {
            return self.lost(ctx);
        }
        let Some(sock) = self.sock.as_ref() else {
            return;
        };
        let wire = Wire {
            fd: sock.as_raw_fd(),
            tap: ctx.cfg.tap.as_deref().map(|tap| Tap {
                tap,
                local: self.local,
                peer: self.peer,
            }),
        };
        let Some(e) = self.engine.as_mut() else {
            return;
        };
        // What was posted since the last poll goes out before the socket is read
        // (issue 14): an application posts a Send and then polls, and a read first
        // (most often an empty one, EAGAIN) would hold the message back by a system
        // call on each side of every round trip. What the read brings (Read Requests to
        // answer, a Terminate, a Read Response that lets a fenced request start) is
        // transmitted below, in the same poll.
        let mut sent = core::mem::take(&mut self.sent_early);
        if e.has_posted() && (self.writable || !e.tx_waiting()) {
            match e.transmit(ctx.keys, &wire) {
                Ok(full) => self.writable = !full,
                Err(_) => return self.lost(ctx),
            }
            sent = true;
        }
        // Bytes that followed the MPA frame in the same read.
        if self.rx_start < self.rx_end {
            e.receive(ctx.keys, &self.rxbuf[self.rx_start..self.rx_end]);
            self.rx_start = self.rx_end;
        }
        // A guessed read right after this poll sent a message is skipped, once: what
        // the message asked for cannot be back yet (the peer has to read it first), so
        // on a ping-pong that `recv` is EAGAIN on every message, a third system call per
        // message where one `sendmsg` and one `recv` move it. `readable` stays set, so
        // the next poll reads whatever there is; a readiness event or data a read left
        // behind is no guess and is read now.
        let mut reads = if sent && self.speculative {
            READ_BUDGET
        } else {
            0
        };
        while self.readable && reads < READ_BUDGET {
            reads += 1;
            let direct = self.engine.as_ref().and_then(|e| e.direct_target(ctx.keys));
            let limit = self.engine.as_ref().map_or(self.rxbuf.len(), |e| {
                e.buffered_read_limit(self.rxbuf.len(), DIRECT_TAIL)
            });
            let mut chain = [Predicted::EMPTY; PREDICT_MAX];
            let budget = self.predict_budget();
            let k = self.engine.as_ref().map_or(0, |e| {
                e.predict(ctx.keys, direct.map_or(0, |d| d.1), budget, &mut chain)
            });
            // Between FPDUs of a long message (the last read ended with one) a
            // predicted read starts at the next header: no payload before it.
            let direct = direct.or_else(|| (k > 0).then_some((self.rxbuf.as_mut_ptr(), 0)));
            let got = match direct {
                Some((at, len)) => self.fill_direct(at, len, &chain[..k]).inspect(|&n| {
                    if n > 0 {
                        self.deliver_direct(ctx.keys, at, len, &chain[..k], n);
                    }
                }),
                None => self.fill_upto(limit),
            };
            match got {
                Ok(0) => return self.lost(ctx),
                Ok(_) => {
                    let Some(e) = self.engine.as_mut() else {
                        return;
                    };
                    e.receive(ctx.keys, &self.rxbuf[self.rx_start..self.rx_end]);
                    self.rx_start = self.rx_end;
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => break,
                Err(_) => return self.lost(ctx),
            }
        }
        let Some(e) = self.engine.as_mut() else {
            return;
        };
        // A full socket is retried once it reports room again (edge-triggered writable),
        // not on every poll.
        if self.writable || !e.tx_waiting() {
            match e.transmit(ctx.keys, &wire) {
                Ok(full) => self.writable = !full,
                Err(_) => return self.lost(ctx),
            }
        }
        if e.failed && matches!(e.tx.term_state, TermState::None | TermState::Sent) {
            // Terminate out (or none to send): close our half; the peer closes its.
            self.shut_write();
        }
    }

    fn step_draining(&mut self, ctx: &mut Ctx<'_>) {
        let mut reads = 0;
        while self.readable && reads < READ_BUDGET {
            reads += 1;
            match self.fill() {
                Ok(0) => return self.lost(ctx),
                // Whatever the peer still sends is discarded.
                Ok(_) => self.rx_start = self.rx_end,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(_) => return self.lost(ctx),
            }
        }
    }
}
