//! Kernel TCP baselines on loopback, for the siw rows: siw is iWARP over TCP sockets, so
//! what the kernel's TCP does between two busy-polling threads is the floor its fabric
//! rows are compared with.
//!
//! - `tcp pingpong` (lat): a request of `size` octets written on one socket, read on the
//!   other (non-blocking, busy-polled: `read` until it has them all), answered with a
//!   reply of `size` octets the same way. Two `write`s and at least two `read`s per
//!   round trip, no copies beyond the kernel's; `TCP_NODELAY` on both ends.
//! - `tcp pingpong+copy` (lat, sizes an RPC moves in chunks): the same ping-pong with one
//!   more copy of each message at the side that received it (the request into the
//!   responder's second buffer, the reply into the client's), as an RPC over TCP (ONC
//!   RPC's record marking) copies arguments and results out of its receive buffer: the
//!   floor a chunked siw RPC echo, which places both directly, has to beat.
//! - `tcp stream` (bw): one thread writes `size`-octet messages back to back, the other
//!   reads them (busy-polled); an operation is one message read whole, its time the gap
//!   since the one before (as the memcpy row's).
//!
//! Both are a physical layer: no RDMA, no framing, no CRC. Everything is allocated before
//! the measurement starts.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use crate::measure::{Measurement, Meter};
use crate::spec::{pin, BenchError, RowSpec};

fn io(what: &str, e: std::io::Error) -> BenchError {
    BenchError::Setup(format!("tcp {what}: {e}"))
}

/// A connected, non-blocking, `TCP_NODELAY` pair of loopback sockets.
pub(crate) fn socket_pair() -> Result<(TcpStream, TcpStream), BenchError> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| io("bind", e))?;
    let addr = listener.local_addr().map_err(|e| io("bind", e))?;
    let client = TcpStream::connect(addr).map_err(|e| io("connect", e))?;
    let (server, _) = listener.accept().map_err(|e| io("accept", e))?;
    for s in [&client, &server] {
        s.set_nodelay(true).map_err(|e| io("nodelay", e))?;
        s.set_nonblocking(true).map_err(|e| io("nonblocking", e))?;
    }
    Ok((client, server))
}

/// Moves `len` octets with `step` (given the octets done so far, it reads or writes
/// the rest and says how many it moved), busy-polling while the socket would block.
/// False if the peer closed (end of file, a reset or a broken pipe: how a run ends), or
/// `stop` is set or `deadline` passes first.
fn transfer(
    len: usize,
    what: &'static str,
    stop: &AtomicBool,
    deadline: Instant,
    mut step: impl FnMut(usize) -> std::io::Result<usize>,
) -> Result<bool, BenchError> {
    let mut done = 0;
    let mut spins = 0u32;
    while done < len {
        match step(done) {
            Ok(0) => return Ok(false),
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                spins = spins.wrapping_add(1);
                if spins & 1023 == 0 && (stop.load(Ordering::Relaxed) || Instant::now() >= deadline)
                {
                    return Ok(false);
                }
                std::hint::spin_loop();
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) => {
                return Ok(false)
            }
            Err(e) => return Err(io(what, e)),
        }
    }
    Ok(true)
}

/// Fills `buf` from `s` ([`transfer`]).
fn read_all(
    s: &mut TcpStream,
    buf: &mut [u8],
    stop: &AtomicBool,
    deadline: Instant,
) -> Result<bool, BenchError> {
    transfer(buf.len(), "read", stop, deadline, |at| {
        s.read(&mut buf[at..])
    })
}

/// Writes all of `buf` to `s` ([`transfer`]).
fn write_all(
    s: &mut TcpStream,
    buf: &[u8],
    stop: &AtomicBool,
    deadline: Instant,
) -> Result<bool, BenchError> {
    transfer(buf.len(), "write", stop, deadline, |at| s.write(&buf[at..]))
}

/// Runs `peer` on the server core with one end of a fresh socket pair, and `step` in a
/// loop on the client core with the other, one operation per `step` that returns true,
/// timed from the previous one, until the meter says enough or `step` returns false;
/// then stops the peer and reports the first error of either side.
fn measure<P, S>(
    spec: &RowSpec,
    mut meter: Meter,
    peer: P,
    mut step: S,
) -> Result<Measurement, BenchError>
where
    P: FnOnce(TcpStream, &AtomicBool, Instant) -> Result<(), BenchError> + Send + 'static,
    S: FnMut(&mut TcpStream, &AtomicBool, Instant) -> Result<bool, BenchError>,
{
    let (mut client, server) = socket_pair()?;
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = meter.deadline();
    let peer = {
        let (stop, core) = (stop.clone(), spec.server_core);
        thread::spawn(move || {
            pin(core);
            peer(server, &stop, deadline)
        })
    };
    pin(spec.client_core);
    meter.restart();
    let mut t = Instant::now();
    let result = loop {
        match step(&mut client, &stop, meter.deadline()) {
            Ok(true) => {}
            Ok(false) => {
                meter.expired(Instant::now());
                break Ok(());
            }
            Err(e) => break Err(e),
        }
        let now = Instant::now();
        let lat = (now - t).as_nanos() as u64;
        t = now;
        if !meter.tick(now, lat) {
            break Ok(());
        }
    };
    stop.store(true, Ordering::Relaxed);
    drop(client);
    let peer_result = peer
        .join()
        .unwrap_or_else(|_| Err(BenchError::Setup("tcp peer thread panicked".into())));
    result?;
    peer_result?;
    Ok(meter.finish())
}

/// Runs the `tcp pingpong` latency baseline.
pub fn pingpong(spec: &RowSpec, meter: Meter) -> Result<Measurement, BenchError> {
    let size = spec.size.max(1);
    let responder = move |mut s: TcpStream, stop: &AtomicBool, deadline: Instant| {
        let mut buf = vec![0x5au8; size];
        while read_all(&mut s, &mut buf, stop, deadline)? {
            if !write_all(&mut s, &buf, stop, deadline)? {
                break;
            }
        }
        Ok(())
    };
    let req = vec![0xa5u8; size];
    let mut resp = vec![0u8; size];
    measure(spec, meter, responder, |c, stop, deadline| {
        Ok(write_all(c, &req, stop, deadline)? && read_all(c, &mut resp, stop, deadline)?)
    })
}

/// Runs the `tcp pingpong+copy` latency baseline: [`pingpong`] with each received
/// message copied once more before it is answered (responder) or the next request goes
/// (client).
pub fn pingpong_copy(spec: &RowSpec, meter: Meter) -> Result<Measurement, BenchError> {
    let size = spec.size.max(1);
    let responder = move |mut s: TcpStream, stop: &AtomicBool, deadline: Instant| {
        let mut buf = vec![0x5au8; size];
        let mut arg = vec![0u8; size];
        while read_all(&mut s, &mut buf, stop, deadline)? {
            arg.copy_from_slice(std::hint::black_box(&buf));
            if !write_all(&mut s, std::hint::black_box(&arg), stop, deadline)? {
                break;
            }
        }
        Ok(())
    };
    let req = vec![0xa5u8; size];
    let mut resp = vec![0u8; size];
    let mut res = vec![0u8; size];
    measure(spec, meter, responder, |c, stop, deadline| {
        let ok = write_all(c, &req, stop, deadline)? && read_all(c, &mut resp, stop, deadline)?;
        res.copy_from_slice(std::hint::black_box(&resp));
        std::hint::black_box(&res);
        Ok(ok)
    })
}

/// Runs the `tcp stream` bandwidth baseline.
pub fn stream(spec: &RowSpec, meter: Meter) -> Result<Measurement, BenchError> {
    let size = spec.size.max(1);
    let writer = move |mut s: TcpStream, stop: &AtomicBool, deadline: Instant| {
        let buf = vec![0xa5u8; size];
        while write_all(&mut s, &buf, stop, deadline)? {}
        Ok(())
    };
    let mut buf = vec![0u8; size];
    measure(spec, meter, writer, |c, stop, deadline| {
        read_all(c, &mut buf, stop, deadline)
    })
}

/// The reading end of a `tcp stream` kept across the slices of a paired row
/// ([`crate::paired`]): a message cut by a slice's end is finished in the next one, so
/// the stream stays the one the `tcp stream` row measures, paused between slices.
pub(crate) struct StreamReader {
    s: TcpStream,
    buf: Vec<u8>,
    at: usize,
    /// `read` calls made (each one system call, would-block answers included).
    pub calls: u64,
    /// Of those, the ones that found nothing (would block).
    pub empty: u64,
    /// Octets read.
    pub octets: u64,
}

/// What ended a [`StreamReader::slice`] or a [`StreamWriter::run_while`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SliceEnd {
    /// The slice's end (or the caller's condition) came.
    Done,
    /// The peer closed the stream, or the hard deadline passed.
    Over,
}

impl StreamReader {
    /// The reader of messages of `size` octets on `s`.
    pub(crate) fn new(s: TcpStream, size: usize) -> StreamReader {
        StreamReader {
            s,
            buf: vec![0u8; size.max(1)],
            at: 0,
            calls: 0,
            empty: 0,
            octets: 0,
        }
    }

    /// Reads until `end` (or, with `max_msgs`, that many whole messages), calling
    /// `on_msg` with the instant each whole message was in; busy-polls while the socket
    /// would block.
    pub(crate) fn slice(
        &mut self,
        end: Instant,
        max_msgs: Option<u64>,
        deadline: Instant,
        on_msg: impl FnMut(Instant),
    ) -> Result<SliceEnd, BenchError> {
        let mut msgs = 0u64;
        self.read_until(deadline, on_msg, |now, whole| {
            if whole {
                msgs += 1;
            }
            match max_msgs {
                Some(m) => msgs >= m,
                None => now.is_some_and(|t| t >= end),
            }
        })
    }

    /// Reads, calling `on_msg` per whole message, until `stop(now, whole message?)`
    /// (asked after every read that moved data, and every 1024 that would block, with
    /// the instant when one was read).
    fn read_until(
        &mut self,
        deadline: Instant,
        mut on_msg: impl FnMut(Instant),
        mut stop: impl FnMut(Option<Instant>, bool) -> bool,
    ) -> Result<SliceEnd, BenchError> {
        let mut spins = 0u32;
        loop {
            self.calls += 1;
            match self.s.read(&mut self.buf[self.at..]) {
                Ok(0) => return Ok(SliceEnd::Over),
                Ok(n) => {
                    self.octets += n as u64;
                    self.at += n;
                    let whole = self.at == self.buf.len();
                    let mut now = None;
                    if whole {
                        self.at = 0;
                        let t = Instant::now();
                        on_msg(t);
                        if t >= deadline {
                            return Ok(SliceEnd::Over);
                        }
                        now = Some(t);
                    }
                    if stop(now, whole) {
                        return Ok(SliceEnd::Done);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.empty += 1;
                    spins = spins.wrapping_add(1);
                    if spins & 1023 == 0 {
                        let now = Instant::now();
                        if now >= deadline {
                            return Ok(SliceEnd::Over);
                        }
                        if stop(Some(now), false) {
                            return Ok(SliceEnd::Done);
                        }
                    }
                    std::hint::spin_loop();
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return Ok(SliceEnd::Over),
                Err(e) => return Err(io("read", e)),
            }
        }
    }
}

/// The writing end of a paired row's `tcp stream` ([`StreamReader`]'s peer).
pub(crate) struct StreamWriter {
    s: TcpStream,
    buf: Vec<u8>,
    at: usize,
    /// `write` calls made (each one system call, would-block answers included).
    pub calls: u64,
    /// Of those, the ones that found no room (would block).
    pub full: u64,
    /// Octets written.
    pub octets: u64,
}

impl StreamWriter {
    /// The writer of messages of `size` octets on `s`.
    pub(crate) fn new(s: TcpStream, size: usize) -> StreamWriter {
        StreamWriter {
            s,
            buf: vec![0xa5u8; size.max(1)],
            at: 0,
            calls: 0,
            full: 0,
            octets: 0,
        }
    }

    /// Writes messages back to back while `go` says so (asked after every `write` and
    /// every 64 polls that would block), resuming a message a previous call left cut.
    pub(crate) fn run_while(
        &mut self,
        deadline: Instant,
        go: impl Fn() -> bool,
    ) -> Result<SliceEnd, BenchError> {
        let mut spins = 0u32;
        loop {
            self.calls += 1;
            match self.s.write(&self.buf[self.at..]) {
                Ok(0) => return Ok(SliceEnd::Over),
                Ok(n) => {
                    self.octets += n as u64;
                    self.at = (self.at + n) % self.buf.len();
                    if !go() {
                        return Ok(SliceEnd::Done);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.full += 1;
                    spins = spins.wrapping_add(1);
                    if spins & 63 == 0 {
                        if !go() {
                            return Ok(SliceEnd::Done);
                        }
                        if spins & 1023 == 0 && Instant::now() >= deadline {
                            return Ok(SliceEnd::Over);
                        }
                    }
                    std::hint::spin_loop();
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e)
                    if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) =>
                {
                    return Ok(SliceEnd::Over)
                }
                Err(e) => return Err(io("write", e)),
            }
        }
    }
}
