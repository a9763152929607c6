//! Physical baselines: what two pinned threads sharing memory can do with no fabric and
//! no RPC layer in between. They are the floor every fabric figure is compared with.
//!
//! Each moves the payload across cores with exactly one copy per message, made by the
//! receiving side out of the sender's buffer, as the shm provider's target-side executor
//! does for a Send; so a fabric row's ratio to its physical row is the provider's own
//! overhead.
//!
//! - `pingpong` (lat): the client bumps a sequence word; the responder sees it, copies
//!   the client's `size`-octet request into its own buffer and bumps its word; the client
//!   copies the `size`-octet reply out of the responder's buffer. One cache-line hand-off
//!   and one copy each way: what a shared-memory transport cannot beat.
//! - `ring` (bw, rate): a single-producer/single-consumer ring of `depth` slots of `size`
//!   octets per connection; the producer publishes slots, the consumer copies each out
//!   and releases it. Latency is post-to-release, like a fabric completion.
//! - `memcpy` (bw): one thread copying `size` octets between two buffers: the memory
//!   system's copy bandwidth at that size, the floor of an RDMA Write on shm.
//! - `memcpy+crc` (bw): the same copy, then a CRC32c over it: the floor of a sink that
//!   checks what it pulled.

use std::hint::spin_loop;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use crate::measure::{Measurement, Meter};
use crate::spec::{pin, BenchError, RowSpec};

/// Spins before a waiting thread starts yielding: on a machine with fewer free cores than
/// busy threads, yielding lets the peer run instead of burning its time slice.
const SPINS_BEFORE_YIELD: u32 = 1 << 14;

#[repr(align(128))]
struct Padded(AtomicU64);

/// Waits with spinning, then yielding, until `done` or the stop flag or `deadline`.
/// Returns whether `done` became true.
#[inline]
fn wait_until(mut done: impl FnMut() -> bool, stop: &AtomicBool, deadline: Instant) -> bool {
    let mut spins = 0u32;
    loop {
        if done() {
            return true;
        }
        spins = spins.wrapping_add(1);
        if spins & 1023 == 0 {
            if stop.load(Ordering::Relaxed) || Instant::now() >= deadline {
                return false;
            }
            if spins >= SPINS_BEFORE_YIELD {
                thread::yield_now();
            }
        }
        spin_loop();
    }
}

struct PingSlot {
    req_seq: Padded,
    resp_seq: Padded,
    /// The client's request, written once before the responder starts.
    req: Box<[u8]>,
    /// The responder's reply, written once before the responder starts.
    resp: Box<[u8]>,
}

/// Runs the `pingpong` latency baseline.
pub fn pingpong(spec: &RowSpec, mut meter: Meter) -> Result<Measurement, BenchError> {
    let size = spec.size;
    let conns = spec.connections.max(1) as usize;
    let slots: Arc<Vec<PingSlot>> = Arc::new(
        (0..conns)
            .map(|_| PingSlot {
                req_seq: Padded(AtomicU64::new(0)),
                resp_seq: Padded(AtomicU64::new(0)),
                req: vec![0xa5u8; size].into_boxed_slice(),
                resp: vec![0x5au8; size].into_boxed_slice(),
            })
            .collect(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = meter.deadline();
    let responder = {
        let (slots, stop, core) = (slots.clone(), stop.clone(), spec.server_core);
        thread::spawn(move || {
            pin(core);
            let mut scratch = vec![0u8; size];
            let mut seen = vec![0u64; slots.len()];
            let mut idle = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let mut worked = false;
                for (i, s) in slots.iter().enumerate() {
                    let seq = s.req_seq.0.load(Ordering::Acquire);
                    if seq != seen[i] {
                        seen[i] = seq;
                        scratch.copy_from_slice(&s.req);
                        s.resp_seq.0.store(seq, Ordering::Release);
                        worked = true;
                    }
                }
                if worked {
                    idle = 0;
                    continue;
                }
                idle = idle.wrapping_add(1);
                if idle & 1023 == 0 {
                    if Instant::now() >= deadline {
                        return;
                    }
                    if idle >= SPINS_BEFORE_YIELD {
                        thread::yield_now();
                    }
                }
                spin_loop();
            }
        })
    };
    pin(spec.client_core);
    let mut sink = vec![0u8; size];
    let mut seq = 0u64;
    meter.restart();
    let mut t = Instant::now();
    'run: loop {
        seq += 1;
        for s in slots.iter() {
            s.req_seq.0.store(seq, Ordering::Release);
            let answered = wait_until(
                || s.resp_seq.0.load(Ordering::Acquire) == seq,
                &stop,
                meter.deadline(),
            );
            if !answered {
                meter.expired(Instant::now());
                break 'run;
            }
            sink.copy_from_slice(&s.resp);
            let now = Instant::now();
            let lat = (now - t).as_nanos() as u64;
            t = now;
            if !meter.tick(now, lat) {
                break 'run;
            }
        }
    }
    std::hint::black_box(&sink);
    stop.store(true, Ordering::Relaxed);
    let _ = responder.join();
    Ok(meter.finish())
}

struct Ring {
    head: Padded,
    tail: Padded,
    /// Slot payloads, written once before the consumer starts.
    slots: Vec<Box<[u8]>>,
}

/// Runs the `ring` bandwidth / message-rate baseline.
pub fn ring(spec: &RowSpec, mut meter: Meter) -> Result<Measurement, BenchError> {
    let size = spec.size;
    let depth = spec.depth.max(1) as usize;
    let conns = spec.connections.max(1) as usize;
    let rings: Arc<Vec<Ring>> = Arc::new(
        (0..conns)
            .map(|_| Ring {
                head: Padded(AtomicU64::new(0)),
                tail: Padded(AtomicU64::new(0)),
                slots: (0..depth)
                    .map(|_| vec![0xa5u8; size].into_boxed_slice())
                    .collect(),
            })
            .collect(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = meter.deadline();
    let consumer = {
        let (rings, stop, core) = (rings.clone(), stop.clone(), spec.server_core);
        thread::spawn(move || {
            pin(core);
            let mut sink = vec![0u8; size];
            let mut idle = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let mut worked = false;
                for r in rings.iter() {
                    let tail = r.tail.0.load(Ordering::Relaxed);
                    let head = r.head.0.load(Ordering::Acquire);
                    let mut t = tail;
                    while t < head {
                        sink.copy_from_slice(&r.slots[(t % depth as u64) as usize]);
                        t += 1;
                    }
                    if t != tail {
                        r.tail.0.store(t, Ordering::Release);
                        worked = true;
                    }
                }
                if worked {
                    idle = 0;
                    continue;
                }
                idle = idle.wrapping_add(1);
                if idle & 1023 == 0 {
                    if Instant::now() >= deadline {
                        return;
                    }
                    if idle >= SPINS_BEFORE_YIELD {
                        thread::yield_now();
                    }
                }
                spin_loop();
            }
        })
    };
    pin(spec.client_core);
    // Post times per connection and slot, preallocated.
    let mut posted_at = vec![Instant::now(); conns * depth];
    let mut heads = vec![0u64; conns];
    let mut tails = vec![0u64; conns];
    meter.restart();
    let mut idle = 0u32;
    'run: loop {
        let now = Instant::now();
        let mut progressed = false;
        for (c, r) in rings.iter().enumerate() {
            while heads[c] - tails[c] < depth as u64 {
                let slot = (heads[c] % depth as u64) as usize;
                posted_at[c * depth + slot] = now;
                heads[c] += 1;
                r.head.0.store(heads[c], Ordering::Release);
            }
            let tail = r.tail.0.load(Ordering::Acquire);
            if tail != tails[c] {
                let done_at = Instant::now();
                while tails[c] < tail {
                    let slot = (tails[c] % depth as u64) as usize;
                    let lat = (done_at - posted_at[c * depth + slot]).as_nanos() as u64;
                    tails[c] += 1;
                    if !meter.tick(done_at, lat) {
                        break 'run;
                    }
                }
                progressed = true;
            }
        }
        if progressed {
            idle = 0;
        } else {
            idle = idle.wrapping_add(1);
            if idle & 1023 == 0 {
                if meter.expired(Instant::now()) {
                    break;
                }
                if idle >= SPINS_BEFORE_YIELD {
                    thread::yield_now();
                }
            }
            spin_loop();
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = consumer.join();
    Ok(meter.finish())
}

/// Runs the single-thread `memcpy+crc` baseline: a copy, then a CRC32c of the copy (the
/// engine's CRC), what a sink that checks every octet it pulled costs at the least.
pub fn memcpy_crc(spec: &RowSpec, meter: Meter) -> Result<Measurement, BenchError> {
    copy_loop(spec, meter, true)
}

/// Runs the single-thread `memcpy` baseline.
pub fn memcpy(spec: &RowSpec, meter: Meter) -> Result<Measurement, BenchError> {
    copy_loop(spec, meter, false)
}

/// Copies `size` octets between two buffers per operation, and CRCs the copy if `crc`.
fn copy_loop(spec: &RowSpec, mut meter: Meter, crc: bool) -> Result<Measurement, BenchError> {
    pin(spec.client_core);
    let src = vec![0xa5u8; spec.size];
    let mut dst = vec![0u8; spec.size];
    meter.restart();
    let mut t = Instant::now();
    loop {
        dst.copy_from_slice(std::hint::black_box(&src));
        if crc {
            std::hint::black_box(rpcrdma::iwarp::crc32c::crc32c(&dst));
        }
        std::hint::black_box(&mut dst);
        let now = Instant::now();
        let lat = (now - t).as_nanos() as u64;
        t = now;
        if !meter.tick(now, lat) {
            break;
        }
    }
    Ok(meter.finish())
}
