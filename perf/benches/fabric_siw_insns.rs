//! Instruction counts of siw Send/Recv round trips over loopback TCP, for callgrind:
//! the userspace cost of siw's framing (MPA/DDP/RDMAP headers, CRC32c), placement and
//! completion handling per message, which is what separates a siw round trip from a
//! kernel TCP ping-pong's (the system calls are the same: one `sendmsg` and one `recv`
//! per message; callgrind counts only userspace instructions, not the kernel's).
//!
//! One thread drives both endpoints alternately (post a Send on one side, poll its CQ
//! so the Send is written, poll the other side's CQ until the receive completes, repost
//! it), with on-transmit completions (the default) and every Send signaled, as
//! `rpcrdma-perf lat`'s fabric row does. Every wait is bounded by a poll count.
//!
//! ```text
//! cargo bench -p rpcrdma-perf --bench fabric_siw_insns --no-run   # prints the binary
//! valgrind --tool=callgrind --toggle-collect='*measured_64*' \
//!     --callgrind-out-file=/tmp/siw.cg target/release/deps/fabric_siw_insns-<hash>
//! callgrind_annotate /tmp/siw.cg | head -30    # total Ir / ROUNDS = per round trip
//! ```
//!
//! `measured_4k` counts 4 KiB messages the same way, `measured_1m` 50 round trips of
//! 1 MiB (both ends polled in turn until each message is through, since it does not
//! fit the socket buffers). `SIW_INSNS_TIMED=1` (without
//! valgrind) then times siw and a kernel TCP ping-pong the same way, one thread driving
//! both ends (each round trip costs both ends' CPU, system calls included, with no
//! wake-up across cores), taking turns, and prints the medians and their ratio.
//! `SIW_INSNS_NO_CRC=1` runs both ends without MPA CRCs.

use std::hint::black_box;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma::fabric::siw::{SiwCm, SiwConfig, SiwCq, SiwDevice, SiwMr, SiwPd, SiwProvider, SiwQp};
use rpcrdma::fabric::{
    Access, CmEvent, Completion, CompletionQueue, ConnectionManager, Device, MemoryRegion,
    ProtectionDomain, QpCaps, QpConfig, QpInit, QueuePair, RecvWr, SendWr, Sge, WcOpcode, WcStatus,
};
use rpcrdma_pools::{Arena, ArenaOptions};

/// Round trips inside each measured function.
const ROUNDS: u64 = 2_000;
/// Timed runs of `ROUNDS` per size (`SIW_INSNS_TIMED=1`).
const TRIALS: usize = 9;
/// Round trips before them (first-touch page faults, lazy mappings).
const WARMUP: u64 = 500;
/// Polls a hop may take before the run is declared broken (loopback delivers within the
/// sender's `sendmsg`, so one or two suffice).
const MAX_POLLS: u32 = 10_000;
const ARENA: usize = 4 << 20;
/// Each receive's length: room for the largest message measured.
const RECV_LEN: usize = 1 << 20;
/// Round trips of the 1 MiB region (`measured_1m`).
const ROUNDS_1M: u64 = 50;
const SETUP_LIMIT: Duration = Duration::from_secs(5);
/// Where each side's Sends come from (receives use the front of the arena).
const SEND_OFF: usize = 2 << 20;

struct End {
    qp: SiwQp,
    cq: SiwCq,
    mr: SiwMr,
    arena: Arc<Arena>,
    _cm: SiwCm,
    _pd: SiwPd,
    _dev: SiwDevice,
    buf: [Completion; 16],
}

impl End {
    fn sge(&self, off: usize, len: usize) -> Sge {
        Sge::new(
            self.arena.base() as u64 + off as u64,
            len as u32,
            self.mr.lkey(),
        )
    }
}

fn config() -> QpConfig {
    QpConfig {
        caps: QpCaps {
            max_send_wr: 64,
            max_recv_wr: 64,
            max_send_sge: 1,
            max_recv_sge: 1,
        },
        ..QpConfig::default()
    }
}

type Half = (SiwDevice, SiwPd, SiwCq, SiwCm, Arc<Arena>, SiwMr);

fn half() -> Half {
    // `SIW_INSNS_NO_CRC=1`: neither side asks for MPA CRCs (Linux siw's default), to
    // see what the CRC costs.
    let crc = std::env::var_os("SIW_INSNS_NO_CRC").is_none();
    let dev = SiwDevice::with_config(SiwConfig {
        crc,
        ..SiwConfig::default()
    })
    .expect("siw device");
    let pd = dev.alloc_pd().expect("pd");
    let cq = dev.create_cq(256).expect("cq");
    let cm = dev.create_cm().expect("cm");
    let arena = Arc::new(Arena::new(&ArenaOptions::new(ARENA)).expect("arena"));
    let mr = pd.reg_arena(&arena, Access::ALL).expect("register");
    (dev, pd, cq, cm, arena, mr)
}

fn connected_pair() -> (End, End) {
    let mut s = half();
    let mut c = half();
    s.3.listen(&SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("listen");
    let addr = s.3.listen_addr().expect("bound");
    let init = QpInit::<SiwProvider> {
        pd: &c.1,
        send_cq: &c.2,
        recv_cq: &c.2,
        srq: None,
        config: config(),
    };
    let cqp = c.3.connect(&addr, init, b"").expect("connect");
    let end = Instant::now() + SETUP_LIMIT;
    let mut sqp = None;
    let (mut s_up, mut c_up) = (false, false);
    let mut buf = [Completion::EMPTY; 4];
    while !(s_up && c_up) {
        assert!(Instant::now() < end, "connection setup timed out");
        match s.3.poll_event().expect("server cm") {
            Some(CmEvent::ConnectRequest { request, .. }) => {
                let init = QpInit::<SiwProvider> {
                    pd: &s.1,
                    send_cq: &s.2,
                    recv_cq: &s.2,
                    srq: None,
                    config: config(),
                };
                sqp = Some(s.3.accept(request, init, b"").expect("accept"));
            }
            Some(CmEvent::Established { .. }) => s_up = true,
            Some(e) => panic!("server: unexpected {e:?}"),
            None => {}
        }
        match c.3.poll_event().expect("client cm") {
            Some(CmEvent::Established { .. }) => c_up = true,
            Some(e) => panic!("client: unexpected {e:?}"),
            None => {}
        }
        s.2.poll(&mut buf);
        c.2.poll(&mut buf);
    }
    let mk = |h: Half, qp: SiwQp| End {
        qp,
        cq: h.2,
        mr: h.5,
        arena: h.4,
        _cm: h.3,
        _pd: h.1,
        _dev: h.0,
        buf: [Completion::EMPTY; 16],
    };
    (mk(c, cqp), mk(s, sqp.expect("server queue pair")))
}

/// One message of `len` octets from `from` to `to`: false if anything failed or never
/// arrived. The sender's poll writes it (and reaps its completion), the receiver's
/// polls read it.
#[inline(always)]
fn hop(from: &mut End, to: &mut End, i: u64, len: usize) -> bool {
    let sb = [from.sge(SEND_OFF, len)];
    if from.qp.post_send(&[SendWr::send(i, &sb)]).is_err() {
        return false;
    }
    let mut sent = false;
    let mut polls = 0;
    loop {
        let n = from.cq.poll(&mut from.buf);
        for c in &from.buf[..n] {
            if c.status != WcStatus::Success {
                return false;
            }
            sent |= c.opcode == WcOpcode::Send;
        }
        if sent {
            break;
        }
        polls += 1;
        if polls == MAX_POLLS {
            return false;
        }
    }
    loop {
        let n = to.cq.poll(&mut to.buf);
        if let Some(c) = to.buf[..n].first() {
            if c.status != WcStatus::Success || c.opcode != WcOpcode::Recv {
                return false;
            }
            let rb = [to.sge(0, RECV_LEN)];
            return to.qp.post_recv(&[RecvWr { wr_id: i, sgl: &rb }]).is_ok();
        }
        polls += 1;
        if polls == MAX_POLLS {
            return false;
        }
    }
}

/// One message too large for the socket buffers: the sender cannot write it all
/// before the receiver reads, so both ends are polled in turn until the Send completed
/// and the receive arrived.
#[inline(always)]
fn hop_bulk(from: &mut End, to: &mut End, i: u64, len: usize) -> bool {
    let sb = [from.sge(SEND_OFF, len)];
    if from.qp.post_send(&[SendWr::send(i, &sb)]).is_err() {
        return false;
    }
    let (mut sent, mut got) = (false, false);
    let mut polls = 0;
    while !(sent && got) {
        let n = from.cq.poll(&mut from.buf);
        for c in &from.buf[..n] {
            if c.status != WcStatus::Success {
                return false;
            }
            sent |= c.opcode == WcOpcode::Send;
        }
        let n = to.cq.poll(&mut to.buf);
        for c in &to.buf[..n] {
            if c.status != WcStatus::Success
                || c.opcode != WcOpcode::Recv
                || c.byte_len as usize != len
            {
                return false;
            }
            let rb = [to.sge(0, RECV_LEN)];
            if to.qp.post_recv(&[RecvWr { wr_id: i, sgl: &rb }]).is_err() {
                return false;
            }
            got = true;
        }
        polls += 1;
        if polls == MAX_POLLS {
            return false;
        }
    }
    true
}

/// A plain loop (no iterator adapter the compiler would outline and tail-call: a tail
/// call out of a measured function hides its exit from callgrind's toggle).
#[inline(always)]
fn round_trips(a: &mut End, b: &mut End, first: u64, n: u64, len: usize) -> bool {
    let mut ok = true;
    for i in first..first + n {
        ok &= hop(a, b, i, len) && hop(b, a, i, len);
        if !ok {
            break;
        }
    }
    black_box(ok)
}

/// The 64-octet region (`--toggle-collect='*measured_64*'`).
#[inline(never)]
fn measured_64(a: &mut End, b: &mut End, first: u64) -> bool {
    round_trips(a, b, first, ROUNDS, 64)
}

/// The 4 KiB region (`--toggle-collect='*measured_4k*'`).
#[inline(never)]
fn measured_4k(a: &mut End, b: &mut End, first: u64) -> bool {
    round_trips(a, b, first, ROUNDS, 4096)
}

/// The 1 MiB region (`--toggle-collect='*measured_1m*'`): `ROUNDS_1M` round trips.
#[inline(never)]
fn measured_1m(a: &mut End, b: &mut End, first: u64) -> bool {
    let mut ok = true;
    for i in first..first + ROUNDS_1M {
        ok &= hop_bulk(a, b, i, 1 << 20) && hop_bulk(b, a, i, 1 << 20);
        if !ok {
            break;
        }
    }
    black_box(ok)
}

/// One 1 MiB round trip outside the measured region.
#[inline(never)]
fn warm_up_1m(a: &mut End, b: &mut End, i: u64) -> bool {
    hop_bulk(a, b, i, 1 << 20) && hop_bulk(b, a, i, 1 << 20)
}

/// Warm-up through a separate copy of the loop, so callgrind's toggle sees only the
/// measured calls.
#[inline(never)]
fn warm_up(a: &mut End, b: &mut End) -> bool {
    round_trips(a, b, 0, WARMUP, 64) && round_trips(a, b, WARMUP, WARMUP, 4096)
}

/// A connected, non-blocking, `TCP_NODELAY` loopback pair: the kernel TCP ping-pong
/// the siw round trips are compared with (as `rpcrdma-perf lat`'s `tcp pingpong` row).
fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let a = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
    let (b, _) = l.accept().expect("accept");
    for s in [&a, &b] {
        s.set_nodelay(true).expect("nodelay");
        s.set_nonblocking(true).expect("nonblocking");
    }
    (a, b)
}

/// One TCP message of `buf.len()` octets from `from` to `to`, read whole (busy-polled).
#[inline(always)]
fn tcp_hop(from: &mut TcpStream, to: &mut TcpStream, buf: &mut [u8]) -> bool {
    let len = buf.len();
    let mut done = 0;
    while done < len {
        match from.write(&buf[done..]) {
            Ok(n) if n > 0 => done += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            _ => return false,
        }
    }
    let mut got = 0;
    let mut polls = 0;
    while got < len {
        match hop_read(to, &mut buf[got..], &mut polls) {
            Some(n) => got += n,
            None => return false,
        }
    }
    true
}

/// One read of a hop: `Some(n)` octets (0 when nothing had arrived yet, an empty poll
/// counted in `polls`), `None` on an error, the peer's close or `MAX_POLLS` empty polls.
#[inline(always)]
fn hop_read(to: &mut TcpStream, buf: &mut [u8], polls: &mut u32) -> Option<usize> {
    match to.read(buf) {
        Ok(n) if n > 0 => Some(n),
        Err(e) if e.kind() == ErrorKind::WouldBlock => {
            *polls += 1;
            (*polls < MAX_POLLS).then_some(0)
        }
        _ => None,
    }
}

/// One TCP message of `buf.len()` octets, written and read in turns (a message larger
/// than the socket buffers cannot be written whole before the other end reads).
#[inline(always)]
fn tcp_hop_bulk(from: &mut TcpStream, to: &mut TcpStream, buf: &mut [u8], tmp: &mut [u8]) -> bool {
    let len = buf.len();
    let (mut done, mut got, mut polls) = (0, 0, 0);
    while got < len {
        if done < len {
            match from.write(&buf[done..]) {
                Ok(n) if n > 0 => done += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                _ => return false,
            }
        }
        match hop_read(to, &mut tmp[got..], &mut polls) {
            Some(n) => got += n,
            None => return false,
        }
    }
    true
}

/// Median ns per 1 MiB round trip over `TRIALS` runs of `ROUNDS_1M`, siw and TCP
/// taking turns.
fn timed_1m(a: &mut End, b: &mut End, first: &mut u64) -> (f64, f64) {
    let (mut ta, mut tb) = tcp_pair();
    let mut buf = vec![0x5au8; 1 << 20];
    let mut tmp = vec![0u8; 1 << 20];
    let (mut siw, mut tcp) = (Vec::new(), Vec::new());
    for _ in 0..TRIALS {
        let t = Instant::now();
        assert!(measured_1m(a, b, *first), "siw 1 MiB round trips failed");
        siw.push(t.elapsed().as_nanos() as f64 / ROUNDS_1M as f64);
        *first += ROUNDS_1M;
        let t = Instant::now();
        for _ in 0..ROUNDS_1M {
            assert!(
                tcp_hop_bulk(&mut ta, &mut tb, &mut buf, &mut tmp)
                    && tcp_hop_bulk(&mut tb, &mut ta, &mut buf, &mut tmp),
                "tcp 1 MiB round trips failed"
            );
        }
        tcp.push(t.elapsed().as_nanos() as f64 / ROUNDS_1M as f64);
    }
    (median(&mut siw), median(&mut tcp))
}

/// The median of `v` (sorted in place; `v` is never empty: `TRIALS` entries).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median ns per round trip over `TRIALS` runs of `ROUNDS`, siw and TCP taking turns.
fn timed(a: &mut End, b: &mut End, first: &mut u64, len: usize) -> (f64, f64) {
    let (mut ta, mut tb) = tcp_pair();
    let mut buf = vec![0x5au8; len];
    let mut siw = Vec::new();
    let mut tcp = Vec::new();
    for _ in 0..TRIALS {
        let t = Instant::now();
        assert!(
            round_trips(a, b, *first, ROUNDS, len),
            "siw round trips failed"
        );
        siw.push(t.elapsed().as_nanos() as f64 / ROUNDS as f64);
        *first += ROUNDS;
        let t = Instant::now();
        for _ in 0..ROUNDS {
            assert!(
                tcp_hop(&mut ta, &mut tb, &mut buf) && tcp_hop(&mut tb, &mut ta, &mut buf),
                "tcp round trips failed"
            );
        }
        tcp.push(t.elapsed().as_nanos() as f64 / ROUNDS as f64);
    }
    (median(&mut siw), median(&mut tcp))
}

fn main() {
    let (mut a, mut b) = connected_pair();
    for e in [&mut a, &mut b] {
        let rb = [e.sge(0, RECV_LEN)];
        for _ in 0..8 {
            e.qp.post_recv(&[RecvWr { wr_id: 0, sgl: &rb }])
                .expect("recv");
        }
    }
    assert!(warm_up(&mut a, &mut b), "warm-up round trips failed");
    assert!(
        measured_64(black_box(&mut a), black_box(&mut b), 2 * WARMUP),
        "64-octet round trips failed"
    );
    assert!(
        measured_4k(black_box(&mut a), black_box(&mut b), 2 * WARMUP + ROUNDS),
        "4 KiB round trips failed"
    );
    let mut next = 2 * WARMUP + 2 * ROUNDS;
    // One 1 MiB round trip first: the receives' pages are touched once, outside the
    // measured region.
    assert!(warm_up_1m(&mut a, &mut b, next), "1 MiB warm-up failed");
    next += 1;
    assert!(
        measured_1m(black_box(&mut a), black_box(&mut b), next),
        "1 MiB round trips failed"
    );
    next += ROUNDS_1M;
    if std::env::var_os("SIW_INSNS_TIMED").is_none() {
        println!(
            "fabric_siw_insns: {ROUNDS} round trips each of 64 B and 4 KiB, {ROUNDS_1M} of 1 MiB"
        );
        return;
    }
    // Both ends in this thread, so a round trip costs what both ends' CPU does (system
    // calls included) and no wake-up across cores: the per-message cost the two-thread
    // `rpcrdma-perf lat` rows add up, measured where a loaded machine blurs them least.
    let mut first = next;
    for len in [64, 4096] {
        let (siw, tcp) = timed(&mut a, &mut b, &mut first, len);
        println!(
            "fabric_siw_insns: {len} B round trip, one thread: siw {siw:.0} ns, tcp {tcp:.0} \
             ns, x{:.2} (median of {TRIALS})",
            siw / tcp
        );
    }
    let (siw, tcp) = timed_1m(&mut a, &mut b, &mut first);
    println!(
        "fabric_siw_insns: 1 MiB round trip, one thread: siw {:.0} us, tcp {:.0} us, x{:.2} \
         (median of {TRIALS})",
        siw / 1e3,
        tcp / 1e3,
        siw / tcp
    );
}
