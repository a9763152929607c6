//! Raw `siw` fabric performance over loopback TCP beside raw TCP driven the same way
//! (non-blocking sockets, `TCP_NODELAY`, busy-polling: spin on read), in one run:
//!
//! - ping-pong: a 32-byte Send/Recv round trip between two pinned threads, beside a
//!   32-byte raw TCP ping-pong; siw both with confirmed completions (the default: a
//!   zero-length RDMA Read rides with each signaled Send) and with completions at
//!   transmit (Linux siw semantics);
//! - bandwidth: RDMA Write of 64 KiB .. 1 MiB with 16 requests in flight (every 16th
//!   signaled), beside a raw TCP stream of the same chunk sizes.
//!
//! Every loop is bounded in time and every wait has a deadline; the run takes about
//! 15 s. On a shared two-core machine the numbers are noisy: ping-pongs run as
//! interleaved trials and report medians; compare ratios.
//!
//! `cargo bench -p rpcrdma-perf --bench fabric_siw` (`-- pingpong` skips bandwidth)

use std::hint::black_box;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rpcrdma::fabric::siw::{SiwCm, SiwConfig, SiwCq, SiwDevice, SiwMr, SiwPd, SiwProvider, SiwQp};
use rpcrdma::fabric::{
    Access, CmEvent, Completion, CompletionQueue, ConnectionManager, Device, MemoryRegion,
    ProtectionDomain, QpCaps, QpConfig, QpInit, QueuePair, RecvWr, RemoteAddr, SendFlags, SendWr,
    Sge, WcOpcode, WcStatus,
};
use rpcrdma_pools::{Arena, ArenaOptions};

const PING_TIME: Duration = Duration::from_millis(300);
const TRIALS: usize = 5;
const BW_TIME: Duration = Duration::from_millis(400);
const WAIT_LIMIT: Duration = Duration::from_secs(5);
const WINDOW: usize = 16;
const MSG: usize = 32;
const SIZES: [usize; 3] = [64 << 10, 256 << 10, 1 << 20];
const ARENA: usize = 8 << 20;

struct End {
    qp: SiwQp,
    cq: SiwCq,
    mr: SiwMr,
    arena: Arc<Arena>,
    _cm: SiwCm,
    _pd: SiwPd,
    _dev: SiwDevice,
}

impl End {
    fn sge(&self, off: usize, len: usize) -> Sge {
        Sge::new(
            self.arena.base() as u64 + off as u64,
            len as u32,
            self.mr.lkey(),
        )
    }

    fn remote(&self, off: usize) -> RemoteAddr {
        RemoteAddr {
            addr: self.arena.base() as u64 + off as u64,
            rkey: self.mr.rkey(),
        }
    }
}

struct Half {
    dev: SiwDevice,
    pd: SiwPd,
    cq: SiwCq,
    cm: SiwCm,
    arena: Arc<Arena>,
    mr: SiwMr,
}

fn half(confirm: bool) -> Half {
    let dev = SiwDevice::with_config(SiwConfig {
        confirm_completions: confirm,
        // Set to compare the confirmation Read sharing its FPDU's segment (the old way).
        confirmation_own_segment: std::env::var_os("SIW_CONFIRMATION_SHARED_SEGMENT").is_none(),
        ..SiwConfig::default()
    })
    .expect("siw device");
    let pd = dev.alloc_pd().expect("pd");
    let cq = dev.create_cq(1024).expect("cq");
    let cm = dev.create_cm().expect("cm");
    let arena = Arc::new(Arena::new(&ArenaOptions::new(ARENA)).expect("arena"));
    let mr = pd.reg_arena(&arena, Access::ALL).expect("register");
    Half {
        dev,
        pd,
        cq,
        cm,
        arena,
        mr,
    }
}

fn config() -> QpConfig {
    QpConfig {
        caps: QpCaps {
            max_send_wr: 256,
            max_recv_wr: 256,
            max_send_sge: 1,
            max_recv_sge: 1,
        },
        ..QpConfig::default()
    }
}

/// Connects two fresh devices over loopback in this thread.
fn connected_pair(confirm: bool) -> (End, End) {
    let mut s = half(confirm);
    let mut c = half(confirm);
    s.cm.listen(&SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("listen");
    let addr = s.cm.listen_addr().expect("bound");
    let init = QpInit::<SiwProvider> {
        pd: &c.pd,
        send_cq: &c.cq,
        recv_cq: &c.cq,
        srq: None,
        config: config(),
    };
    let cqp = c.cm.connect(&addr, init, b"").expect("connect");
    let end = Instant::now() + WAIT_LIMIT;
    let mut sqp = None;
    let (mut s_up, mut c_up) = (false, false);
    let mut buf = [Completion::EMPTY; 4];
    while !(s_up && c_up) {
        assert!(Instant::now() < end, "connection setup timed out");
        match s.cm.poll_event().expect("server cm") {
            Some(CmEvent::ConnectRequest { request, .. }) => {
                let init = QpInit::<SiwProvider> {
                    pd: &s.pd,
                    send_cq: &s.cq,
                    recv_cq: &s.cq,
                    srq: None,
                    config: config(),
                };
                sqp = Some(s.cm.accept(request, init, b"").expect("accept"));
            }
            Some(CmEvent::Established { .. }) => s_up = true,
            Some(e) => panic!("server: unexpected {e:?}"),
            None => {}
        }
        match c.cm.poll_event().expect("client cm") {
            Some(CmEvent::Established { .. }) => c_up = true,
            Some(e) => panic!("client: unexpected {e:?}"),
            None => {}
        }
        s.cq.poll(&mut buf);
        c.cq.poll(&mut buf);
    }
    let mk = |h: Half, qp: SiwQp| End {
        qp,
        cq: h.cq,
        mr: h.mr,
        arena: h.arena,
        _cm: h.cm,
        _pd: h.pd,
        _dev: h.dev,
    };
    (mk(c, cqp), mk(s, sqp.expect("server queue pair")))
}

static CORES: OnceLock<Vec<core_affinity::CoreId>> = OnceLock::new();

fn pin(core: usize) {
    let ids = CORES.get_or_init(|| core_affinity::get_core_ids().unwrap_or_default());
    if let Some(id) = ids.get(core % ids.len().max(1)) {
        core_affinity::set_for_current(*id);
    }
}

fn flags(i: u64) -> SendFlags {
    // Signal one send in 16: slots are released by the signaled completion.
    if i % 16 == 15 {
        SendFlags::SIGNALED
    } else {
        SendFlags::NONE
    }
}

/// Polls until a receive completes; reposts it. False on timeout or error.
fn await_recv(e: &mut End, buf: &mut [Completion], rb: &[Sge; 1]) -> bool {
    let end = Instant::now() + WAIT_LIMIT;
    loop {
        let n = e.cq.poll(buf);
        for c in &buf[..n] {
            if c.status != WcStatus::Success {
                eprintln!("completion failed: {c:?}");
                return false;
            }
            if c.opcode == WcOpcode::Recv {
                return e.qp.post_recv(&[RecvWr { wr_id: 0, sgl: rb }]).is_ok();
            }
        }
        if n == 0 && Instant::now() > end {
            eprintln!("ping-pong: no reply within {WAIT_LIMIT:?}");
            return false;
        }
    }
}

/// 32-byte siw Send/Recv round trip between two threads: ns per round trip.
fn siw_pingpong(confirm: bool) -> f64 {
    let (mut a, mut b) = connected_pair(confirm);
    for e in [&mut a, &mut b] {
        let rb = [e.sge(0, MSG)];
        for _ in 0..64 {
            e.qp.post_recv(&[RecvWr { wr_id: 0, sgl: &rb }])
                .expect("recv");
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let echo = std::thread::spawn(move || {
        pin(1);
        let rb = [b.sge(0, MSG)];
        let sb = [b.sge(4096, MSG)];
        let mut buf = [Completion::EMPTY; 32];
        let mut i = 0u64;
        while !s2.load(Ordering::Relaxed) {
            let n = b.cq.poll(&mut buf);
            for c in &buf[..n] {
                if c.opcode != WcOpcode::Recv {
                    continue;
                }
                if c.status != WcStatus::Success
                    || b.qp.post_recv(&[RecvWr { wr_id: 0, sgl: &rb }]).is_err()
                    || b.qp
                        .post_send(&[SendWr::send(i, &sb).with_flags(flags(i))])
                        .is_err()
                {
                    eprintln!("echo side failed at message {i}: {c:?}");
                    return;
                }
                i += 1;
            }
        }
    });
    pin(0);
    let rb = [a.sge(0, MSG)];
    let sb = [a.sge(4096, MSG)];
    let mut buf = [Completion::EMPTY; 32];
    let mut i = 0u64;
    let mut round = |a: &mut End, i: &mut u64| -> bool {
        let ok =
            a.qp.post_send(&[SendWr::send(*i, &sb).with_flags(flags(*i))])
                .is_ok()
                && await_recv(a, &mut buf, &rb);
        *i += 1;
        ok
    };
    let mut ok = (0..500).all(|_| round(&mut a, &mut i));
    let start = Instant::now();
    let mut rounds = 0u64;
    while ok && start.elapsed() < PING_TIME {
        for _ in 0..64 {
            if !round(&mut a, &mut i) {
                ok = false;
                break;
            }
            rounds += 1;
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / rounds.max(1) as f64;
    stop.store(true, Ordering::Relaxed);
    let _ = echo.join();
    if ok {
        ns
    } else {
        f64::NAN
    }
}

/// A connected pair of non-blocking, no-delay loopback sockets.
fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let c = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
    let (s, _) = l.accept().expect("accept");
    for x in [&c, &s] {
        x.set_nodelay(true).expect("nodelay");
        x.set_nonblocking(true).expect("non-blocking");
    }
    (c, s)
}

/// Reads exactly `buf.len()` octets, spinning on `WouldBlock`. False on error or timeout.
fn spin_read(s: &mut TcpStream, buf: &mut [u8]) -> bool {
    let mut got = 0;
    let end = Instant::now() + WAIT_LIMIT;
    let mut spins = 0u32;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => return false,
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                spins = spins.wrapping_add(1);
                if spins & 1023 == 0 && Instant::now() > end {
                    return false;
                }
            }
            Err(_) => return false,
        }
    }
    true
}

/// Writes all of `buf`, spinning on `WouldBlock`. False on error or timeout.
fn spin_write(s: &mut TcpStream, buf: &[u8]) -> bool {
    let mut put = 0;
    let end = Instant::now() + WAIT_LIMIT;
    let mut spins = 0u32;
    while put < buf.len() {
        match s.write(&buf[put..]) {
            Ok(n) => put += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                spins = spins.wrapping_add(1);
                if spins & 1023 == 0 && Instant::now() > end {
                    return false;
                }
            }
            Err(_) => return false,
        }
    }
    true
}

/// 32-byte raw TCP round trip between two threads, both busy-polling: ns.
fn tcp_pingpong() -> f64 {
    let (mut a, mut b) = tcp_pair();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let echo = std::thread::spawn(move || {
        pin(1);
        let mut m = [0u8; MSG];
        while !s2.load(Ordering::Relaxed) {
            if !spin_read(&mut b, &mut m) || !spin_write(&mut b, &m) {
                return;
            }
        }
    });
    pin(0);
    let mut m = [7u8; MSG];
    let mut round = |a: &mut TcpStream| spin_write(a, &m.clone()) && spin_read(a, &mut m);
    let mut ok = (0..500).all(|_| round(&mut a));
    let start = Instant::now();
    let mut rounds = 0u64;
    while ok && start.elapsed() < PING_TIME {
        for _ in 0..64 {
            if !round(&mut a) {
                ok = false;
                break;
            }
            rounds += 1;
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / rounds.max(1) as f64;
    stop.store(true, Ordering::Relaxed);
    drop(a);
    let _ = echo.join();
    if ok {
        ns
    } else {
        f64::NAN
    }
}

/// siw RDMA Write of `size` octets, WINDOW in flight, every 16th signaled: GB/s.
fn siw_write_bw(size: usize) -> f64 {
    let (mut a, mut b) = connected_pair(true);
    let remote = b.remote(0);
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let target = std::thread::spawn(move || {
        pin(1);
        let mut buf = [Completion::EMPTY; 32];
        // The target's poll places the incoming Writes.
        while !s2.load(Ordering::Relaxed) {
            black_box(b.cq.poll(&mut buf));
        }
    });
    pin(0);
    let local = [a.sge(0, size)];
    let mut buf = [Completion::EMPTY; 32];
    let mut outstanding = 0usize;
    let mut bytes = 0u64;
    let mut id = 0u64;
    let mut start = Instant::now();
    let mut warm = true;
    let mut last_progress = Instant::now();
    loop {
        while outstanding < WINDOW {
            let wr = SendWr::write(id, &local, remote).with_flags(flags(id));
            if a.qp.post_send(&[wr]).is_err() {
                break;
            }
            outstanding += 1;
            id += 1;
        }
        let n = a.cq.poll(&mut buf);
        for c in &buf[..n] {
            if c.status != WcStatus::Success {
                eprintln!("bandwidth: {c:?}");
                stop.store(true, Ordering::Relaxed);
                let _ = target.join();
                return f64::NAN;
            }
            // A signaled completion retires itself and the 15 unsignaled before it.
            outstanding -= 16;
            bytes += 16 * size as u64;
        }
        if n > 0 {
            last_progress = Instant::now();
        } else if last_progress.elapsed() > WAIT_LIMIT {
            eprintln!("bandwidth: no completion within {WAIT_LIMIT:?}");
            break;
        }
        if warm && bytes >= (WINDOW * size) as u64 * 4 {
            warm = false;
            bytes = 0;
            start = Instant::now();
        } else if !warm && start.elapsed() >= BW_TIME {
            break;
        }
    }
    let gbs = bytes as f64 / start.elapsed().as_secs_f64() / 1e9;
    stop.store(true, Ordering::Relaxed);
    let _ = target.join();
    gbs
}

/// Raw TCP stream of `size`-octet writes, reader spinning: GB/s.
fn tcp_stream_bw(size: usize) -> f64 {
    let (mut a, mut b) = tcp_pair();
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let reader = std::thread::spawn(move || {
        pin(1);
        let mut sink = vec![0u8; 1 << 20];
        while !s2.load(Ordering::Relaxed) {
            match b.read(&mut sink) {
                Ok(0) => return,
                Ok(n) => {
                    black_box(&sink[..n]);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    });
    pin(0);
    let chunk = vec![0x5au8; size];
    let mut bytes = 0u64;
    let mut start = Instant::now();
    let mut warm = true;
    let mut ok = true;
    loop {
        if !spin_write(&mut a, &chunk) {
            ok = false;
            break;
        }
        bytes += size as u64;
        if warm && bytes >= (WINDOW * size) as u64 * 4 {
            warm = false;
            bytes = 0;
            start = Instant::now();
        } else if !warm && start.elapsed() >= BW_TIME {
            break;
        }
    }
    let gbs = bytes as f64 / start.elapsed().as_secs_f64() / 1e9;
    stop.store(true, Ordering::Relaxed);
    drop(a);
    let _ = reader.join();
    if ok {
        gbs
    } else {
        f64::NAN
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    CORES.get_or_init(|| core_affinity::get_core_ids().unwrap_or_default());
    println!(
        "fabric_siw: siw over loopback TCP vs raw busy-polled TCP (2 shared cores: expect noise)"
    );
    let (mut tcp, mut siw, mut at_tx, mut ratio, mut ratio_tx) =
        (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..TRIALS {
        let t = tcp_pingpong();
        let s = siw_pingpong(true);
        let x = siw_pingpong(false);
        tcp.push(t);
        siw.push(s);
        at_tx.push(x);
        ratio.push(s / t);
        ratio_tx.push(x / t);
    }
    let (tcp, siw, at_tx) = (median(&mut tcp), median(&mut siw), median(&mut at_tx));
    let (ratio, ratio_tx) = (median(&mut ratio), median(&mut ratio_tx));
    println!(
        "ping-pong RTT  raw TCP 32 B {tcp:8.0} ns   siw 32 B send/recv {siw:8.0} ns   ratio {ratio:5.2}   (medians of {TRIALS} trials)"
    );
    println!(
        "               raw TCP 32 B {tcp:8.0} ns   siw, completion at transmit {at_tx:8.0} ns   ratio {ratio_tx:5.2}"
    );
    if std::env::args().any(|a| a == "pingpong") {
        return;
    }
    println!(
        "{:>8}  {:>14}  {:>15} {:>7}",
        "size", "TCP GB/s", "siw write GB/s", "ratio"
    );
    for size in SIZES {
        let t = tcp_stream_bw(size);
        let w = siw_write_bw(size);
        println!("{:>7}K  {t:14.2}  {w:15.2} {:7.2}", size >> 10, w / t);
    }
}
