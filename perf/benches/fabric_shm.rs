//! Raw `shm` fabric performance beside its physical baselines, in one run:
//!
//! - ping-pong: a 32-byte Send/Recv round trip between two pinned, busy-polling threads,
//!   beside a bare cache-line ping-pong between the same two cores;
//! - bandwidth: RDMA Write and RDMA Read of 4 KiB .. 1 MiB with 16 requests in flight,
//!   beside single-threaded `memcpy` of the same sizes on the target's core (shm's
//!   RDMA is a memcpy executed by the target's poll).
//!
//! Every loop is bounded in time and every wait has a deadline. The whole run takes
//! about 15 s. On a shared two-core machine the numbers are noisy: the ping-pongs run as
//! interleaved trials (baseline, shm, baseline, ...) and report medians; compare ratios.
//!
//! `cargo bench -p rpcrdma-perf --bench fabric_shm` (`-- pingpong` skips bandwidth)
//!
//! Measured on the 2-vCPU development VM, load average 4-8 from other builds (best
//! 256-round windows; the host places the two vCPUs either "near", 60 ns cache-line
//! RTT, or "far", ~280 ns):
//!
//! | 32 B Send/Recv RTT                  | near (ratio)          | far (ratio)           |
//! |-------------------------------------|-----------------------|-----------------------|
//! | before the fast-path work (75dbd7a) | 334-391 ns (5.4-6.4x) | 1007-1036 ns (3.6x)   |
//! | after                               | 170-179 ns (2.9x)     | 540-556 ns (1.9-2.0x) |
//!
//! One thread polling both ends (software only): 240-350 ns min before, 122-174 ns
//! after. Instructions per round trip (`fabric_shm_insns` under callgrind, stable under
//! load): 2557 before, 1487 after; see that file for the breakdown.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rpcrdma::fabric::shm::{ShmAddr, ShmCm, ShmCq, ShmDevice, ShmMr, ShmPd, ShmProvider, ShmQp};
use rpcrdma::fabric::{
    Access, CmEvent, Completion, CompletionQueue, ConnectionManager, Device, MemoryRegion,
    ProtectionDomain, QpCaps, QpConfig, QpInit, QueuePair, RecvWr, RemoteAddr, SendFlags, SendWr,
    Sge, WcOpcode, WcStatus,
};
use rpcrdma_pools::{Arena, ArenaOptions};

const PING_TIME: Duration = Duration::from_millis(300);
const TRIALS: usize = 7;
const BW_TIME: Duration = Duration::from_millis(300);
const MEMCPY_TIME: Duration = Duration::from_millis(200);
const WAIT_LIMIT: Duration = Duration::from_secs(5);
const WINDOW: usize = 16;
const MSG: usize = 32;
const SIZES: [usize; 5] = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20];
const ARENA: usize = 8 << 20;

struct End {
    qp: ShmQp,
    cq: ShmCq,
    mr: ShmMr,
    arena: Arc<Arena>,
    _cm: ShmCm,
    _pd: ShmPd,
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
    dev: ShmDevice,
    pd: ShmPd,
    cq: ShmCq,
    cm: ShmCm,
    arena: Arc<Arena>,
    mr: ShmMr,
}

fn half() -> Half {
    let dev = ShmDevice::new();
    let pd = dev.alloc_pd().expect("pd");
    let cq = dev.create_cq(1024).expect("cq");
    let cm = dev.create_cm().expect("cm");
    // Hugepages when the host has them (4 KiB pages and a one-time warning otherwise).
    let arena =
        Arc::new(Arena::new(&ArenaOptions::new(ARENA).shareable(true)).expect("shareable arena"));
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

/// Connects two fresh devices in this thread (pumping both connection managers).
fn connected_pair() -> (End, End) {
    let addr = ShmAddr::abstract_name(format!("rpcrdma-bench-{}", std::process::id()));
    let mut s = half();
    let mut c = half();
    s.cm.listen(&addr).expect("listen");
    let init = QpInit::<ShmProvider> {
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
    while !(s_up && c_up) {
        assert!(Instant::now() < end, "connection setup timed out");
        match s.cm.poll_event().expect("server cm") {
            Some(CmEvent::ConnectRequest { request, .. }) => {
                let init = QpInit::<ShmProvider> {
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
    }
    let mk = |h: Half, qp: ShmQp| {
        drop(h.dev);
        End {
            qp,
            cq: h.cq,
            mr: h.mr,
            arena: h.arena,
            _cm: h.cm,
            _pd: h.pd,
        }
    };
    (mk(c, cqp), mk(s, sqp.expect("server queue pair")))
}

/// The cores this process may use, read once before any thread pins itself: the list
/// comes from the calling thread's affinity mask, which spawned threads inherit.
static CORES: OnceLock<Vec<core_affinity::CoreId>> = OnceLock::new();

fn pin(core: usize) {
    let ids = CORES.get_or_init(|| core_affinity::get_core_ids().unwrap_or_default());
    if let Some(id) = ids.get(core % ids.len().max(1)) {
        core_affinity::set_for_current(*id);
    }
}

/// A cache line of its own.
#[repr(align(128))]
struct Line(AtomicU64);

/// Round trips per timed window.
const WINDOW_ROUNDS: u64 = 256;

/// A ping-pong's result in ns per round trip: the mean over the run, and the best
/// window of [`WINDOW_ROUNDS`]. On a loaded machine the mean includes the times a
/// thread was descheduled; the best window is the cost when both ran undisturbed.
#[derive(Clone, Copy)]
struct Rtt {
    mean: f64,
    best: f64,
}

impl Rtt {
    const FAILED: Rtt = Rtt {
        mean: f64::NAN,
        best: f64::NAN,
    };
}

/// Runs `round` in timed windows for `PING_TIME`; `None` if a round failed.
fn timed_rounds(mut round: impl FnMut() -> bool) -> Option<Rtt> {
    let start = Instant::now();
    let mut rounds = 0u64;
    let mut best = f64::INFINITY;
    while start.elapsed() < PING_TIME {
        let w = Instant::now();
        for _ in 0..WINDOW_ROUNDS {
            if !round() {
                return None;
            }
        }
        best = best.min(w.elapsed().as_nanos() as f64 / WINDOW_ROUNDS as f64);
        rounds += WINDOW_ROUNDS;
    }
    Some(Rtt {
        mean: start.elapsed().as_nanos() as f64 / rounds.max(1) as f64,
        best,
    })
}

/// Bare cache-line ping-pong between cores 0 and 1.
fn baseline_pingpong() -> Rtt {
    let line = Arc::new(Line(AtomicU64::new(0)));
    let stop = Arc::new(AtomicBool::new(false));
    let (l2, s2) = (line.clone(), stop.clone());
    let echo = std::thread::spawn(move || {
        pin(1);
        let mut want = 1u64;
        let end = Instant::now() + PING_TIME + WAIT_LIMIT;
        let mut spins = 0u32;
        while !s2.load(Ordering::Relaxed) {
            if l2.0.load(Ordering::Acquire) == want {
                l2.0.store(want + 1, Ordering::Release);
                want += 2;
            } else {
                spins = spins.wrapping_add(1);
                if spins & 4095 == 0 && Instant::now() > end {
                    break;
                }
                std::hint::spin_loop();
            }
        }
    });
    pin(0);
    let mut v = 1u64;
    let give_up = Instant::now() + PING_TIME + WAIT_LIMIT;
    let rtt = timed_rounds(|| {
        line.0.store(v, Ordering::Release);
        let mut spins = 0u32;
        while line.0.load(Ordering::Acquire) != v + 1 {
            spins = spins.wrapping_add(1);
            if spins & 4095 == 0 && Instant::now() > give_up {
                eprintln!("baseline ping-pong: partner stopped answering");
                return false;
            }
            std::hint::spin_loop();
        }
        v += 2;
        true
    });
    stop.store(true, Ordering::Relaxed);
    let _ = echo.join();
    rtt.unwrap_or(Rtt::FAILED)
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
                if e.qp.post_recv(&[RecvWr { wr_id: 0, sgl: rb }]).is_err() {
                    return false;
                }
                return true;
            }
        }
        if n == 0 && Instant::now() > end {
            eprintln!("ping-pong: no reply within {WAIT_LIMIT:?}");
            return false;
        }
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

/// 32-byte Send/Recv round trip between cores 0 and 1.
fn shm_pingpong() -> Rtt {
    let (mut a, mut b) = connected_pair();
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
    let warm = (0..2000).all(|_| round(&mut a, &mut i));
    let rtt = if warm {
        timed_rounds(|| round(&mut a, &mut i))
    } else {
        None
    };
    stop.store(true, Ordering::Relaxed);
    let _ = echo.join();
    rtt.unwrap_or(Rtt::FAILED)
}

/// memcpy of `size` bytes between two buffers of one arena, on core 1: GB/s.
fn memcpy_bw(size: usize) -> f64 {
    let arena = Arena::new(&ArenaOptions::new(ARENA)).expect("arena");
    let src = arena.base();
    let dst = arena.base().wrapping_add(ARENA / 2);
    pin(1);
    let start = Instant::now();
    let mut bytes = 0u64;
    while start.elapsed() < MEMCPY_TIME {
        for _ in 0..8 {
            // SAFETY: both ranges are inside the arena (size <= ARENA / 2) and disjoint.
            unsafe { std::ptr::copy_nonoverlapping(black_box(src), black_box(dst), size) };
            bytes += size as u64;
        }
    }
    black_box(dst);
    bytes as f64 / start.elapsed().as_secs_f64() / 1e9
}

/// RDMA Write (or Read) of `size` bytes with WINDOW in flight: GB/s.
fn shm_bw(size: usize, read: bool) -> f64 {
    let (mut a, mut b) = connected_pair();
    let remote = b.remote(0);
    let stop = Arc::new(AtomicBool::new(false));
    let s2 = stop.clone();
    let target = std::thread::spawn(move || {
        pin(1);
        let mut buf = [Completion::EMPTY; 32];
        // The target's poll is the NIC: it executes the initiator's requests.
        while !s2.load(Ordering::Relaxed) {
            black_box(b.cq.poll(&mut buf));
        }
    });
    pin(0);
    let local = [a.sge(0, size)];
    let mut buf = [Completion::EMPTY; 32];
    let mut inflight = 0usize;
    let mut bytes = 0u64;
    let mut id = 0u64;
    let mut start = Instant::now();
    let mut warm = true;
    let mut last_progress = Instant::now();
    loop {
        while inflight < WINDOW {
            let wr = if read {
                SendWr::read(id, &local, remote)
            } else {
                SendWr::write(id, &local, remote)
            };
            if a.qp.post_send(&[wr]).is_err() {
                break;
            }
            inflight += 1;
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
            inflight -= 1;
            bytes += size as u64;
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

/// The same 32-byte round trip driven by one thread polling both ends: the software
/// cost of the path, free of cross-core traffic and scheduling.
fn shm_pingpong_one_thread() -> f64 {
    let (mut a, mut b) = connected_pair();
    for e in [&mut a, &mut b] {
        let rb = [e.sge(0, MSG)];
        for _ in 0..64 {
            e.qp.post_recv(&[RecvWr { wr_id: 0, sgl: &rb }])
                .expect("recv");
        }
    }
    let mut buf = [Completion::EMPTY; 32];
    let mut hop = |from: &mut End, to: &mut End, i: u64| -> bool {
        let sb = [from.sge(4096, MSG)];
        let rb = [to.sge(0, MSG)];
        if from
            .qp
            .post_send(&[SendWr::send(i, &sb).with_flags(flags(i))])
            .is_err()
        {
            return false;
        }
        let end = Instant::now() + WAIT_LIMIT;
        loop {
            let n = to.cq.poll(&mut buf);
            if buf[..n].iter().any(|c| c.opcode == WcOpcode::Recv) {
                break;
            }
            // The sender's poll retires its send queue.
            from.cq.poll(&mut buf);
            if Instant::now() > end {
                return false;
            }
        }
        to.qp.post_recv(&[RecvWr { wr_id: 0, sgl: &rb }]).is_ok()
    };
    pin(0);
    let start = Instant::now();
    let mut rounds = 0u64;
    while start.elapsed() < PING_TIME {
        for _ in 0..256 {
            if !hop(&mut a, &mut b, rounds) || !hop(&mut b, &mut a, rounds) {
                return f64::NAN;
            }
            rounds += 1;
        }
    }
    start.elapsed().as_nanos() as f64 / rounds as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn main() {
    CORES.get_or_init(|| core_affinity::get_core_ids().unwrap_or_default());
    println!("fabric_shm: raw shm fabric vs physical baselines (2 shared cores: expect noise)");
    let (mut base, mut one, mut shm, mut ratio) = (vec![], vec![], vec![], vec![]);
    let (mut base_best, mut shm_best) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..TRIALS {
        let b = baseline_pingpong();
        let s = shm_pingpong();
        one.push(shm_pingpong_one_thread());
        base.push(b.mean);
        shm.push(s.mean);
        ratio.push(s.mean / b.mean);
        base_best = base_best.min(b.best);
        shm_best = shm_best.min(s.best);
    }
    let one_min = one.iter().copied().fold(f64::INFINITY, f64::min);
    let one = median(&mut one);
    println!(
        "shm 32 B round trip, one thread polling both ends: {one:8.0} ns median, {one_min:.0} min (software cost)"
    );
    let (base, shm, ratio) = (median(&mut base), median(&mut shm), median(&mut ratio));
    println!(
        "ping-pong RTT  cache line {base:8.0} ns   shm 32 B send/recv {shm:8.0} ns   ratio {ratio:5.2}   (medians of {TRIALS} trials)"
    );
    println!(
        "               cache line {base_best:8.0} ns   shm 32 B send/recv {shm_best:8.0} ns   ratio {:5.2}   (best {WINDOW_ROUNDS}-round window)",
        shm_best / base_best
    );
    if std::env::args().any(|a| a == "pingpong") {
        return;
    }
    println!(
        "{:>8}  {:>12}  {:>12} {:>7}  {:>12} {:>7}",
        "size", "memcpy GB/s", "write GB/s", "ratio", "read GB/s", "ratio"
    );
    for size in SIZES {
        let m = memcpy_bw(size);
        let w = shm_bw(size, false);
        let r = shm_bw(size, true);
        println!(
            "{:>7}K  {m:12.2}  {w:12.2} {:7.2}  {r:12.2} {:7.2}",
            size >> 10,
            w / m,
            r / m
        );
    }
}
