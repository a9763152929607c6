//! RPC-over-RDMA engine over shm: RPC rate and round-trip time for inline NULL calls,
//! and DDP bandwidth (a 64 KiB Read chunk in, the same 64 KiB through a Write chunk
//! out), with both sides on one thread (pure engine cost: the loop runs requester and
//! responder back to back) and on two busy-polling threads.
//!
//! `cargo bench -p rpcrdma-perf --bench engine_rpc` — about 10 s
//! (`RPCRDMA_BENCH_NO_EXTENSIONS=1`: without the engine's protocol extensions).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma::fabric::shm::{ShmAddr, ShmDevice, ShmProvider};
use rpcrdma::{CallRequest, CallStatus};
use rpcrdma::{CallView, ReplyWriter, Service, ServiceError};
use rpcrdma::{ConnConfig, ConnState, RegBuf};
use rpcrdma::{Pair, Requester, Responder};
use rpcrdma_pools::HugePages;

const DEADLINE: Duration = Duration::from_secs(20);
const DDP: usize = 64 * 1024;

/// NULL (proc 0) and DDP echo (proc 2: the argument's Read chunk back through the
/// Write chunk).
struct Bench;

impl Service for Bench {
    fn handle_call(
        &mut self,
        call: &CallView<'_>,
        w: &mut ReplyWriter<'_>,
    ) -> Result<(), ServiceError> {
        let e = |_| ServiceError::SystemErr;
        for v in [call.xid(), 1, 0, 0, 0, 0] {
            w.put_u32(v).map_err(e)?;
        }
        if let Some(item) = call.ddp_items().first() {
            w.put_u32(item.data.len() as u32).map_err(e)?;
            let mut b = w.alloc_buf().map_err(|_| ServiceError::SystemErr)?;
            b.fill(item.data).map_err(|_| ServiceError::SystemErr)?;
            w.ddp_result(b).map_err(|_| ServiceError::SystemErr)?;
        }
        Ok(())
    }
}

/// `RPCRDMA_BENCH_NO_EXTENSIONS=1` runs plain version 1 (no responder-provided Read
/// chunks, so the responder does not write every reply into a large buffer), to
/// compare.
fn config() -> ConnConfig {
    ConnConfig {
        credits: 32,
        large_buf_size: DDP as u32,
        large_bufs: 128,
        hugepages: HugePages::Auto,
        extensions: std::env::var_os("RPCRDMA_BENCH_NO_EXTENSIONS").is_none(),
        ..ConnConfig::default()
    }
}

fn header(buf: &mut RegBuf, proc: u32, extra: Option<u32>) {
    let s = buf.storage_mut();
    let mut n = 0;
    for w in [0u32, 0, 2, 0x2000_0099, 1, proc, 0, 0, 0, 0]
        .into_iter()
        .chain(extra)
    {
        s[n..n + 4].copy_from_slice(&w.to_be_bytes());
        n += 4;
    }
    buf.set_len(n).expect("fits");
}

fn null_call(r: &Requester<ShmProvider>) -> CallRequest {
    let mut m = r.alloc_msg().expect("msg");
    header(&mut m, 0, None);
    CallRequest::new(m, 256)
}

fn ddp_call(r: &Requester<ShmProvider>, data: &[u8]) -> CallRequest {
    let mut m = r.alloc_msg().expect("msg");
    header(&mut m, 2, Some(data.len() as u32));
    let mut arg = r.alloc_large().expect("arg");
    arg.fill(data).expect("fits");
    let mut req = CallRequest::new(m, 256);
    req.push_ddp_arg(44, arg).expect("room");
    req.push_write_sink(r.alloc_large().expect("sink"))
        .expect("room");
    req
}

/// Keeps `depth` calls in flight for `dur`; returns calls per second.
fn pipelined<F, G>(dur: Duration, depth: u64, mut submit: F, mut poll: G) -> f64
where
    F: FnMut(u64),
    G: FnMut() -> u64,
{
    let start = Instant::now();
    let mut sent = 0;
    let mut done = 0;
    while start.elapsed() < dur {
        while sent - done < depth {
            submit(sent);
            sent += 1;
        }
        done += poll();
    }
    let secs = start.elapsed().as_secs_f64();
    // Drain what is in flight so the next phase starts clean.
    let end = Instant::now() + DEADLINE;
    while done < sent && Instant::now() < end {
        done += poll();
    }
    done as f64 / secs
}

fn one_thread() {
    let cfg = config();
    let addr = ShmAddr::abstract_name(format!("rpcrdma-bench-1t-{}", std::process::id()));
    let mut p: Pair<ShmProvider, Bench> = Pair::connect(
        &ShmDevice::new(),
        ShmDevice::new(),
        &addr,
        &cfg,
        &cfg,
        Bench,
        DEADLINE,
    )
    .expect("pair");
    // Round trip, one call at a time.
    let n = 20_000;
    let start = Instant::now();
    for _ in 0..n {
        let req = null_call(&p.requester);
        let o = p.call(req, DEADLINE).expect("reply");
        assert_eq!(o.status, CallStatus::Success);
    }
    let rtt = start.elapsed() / n;
    let count = |p: &mut Pair<ShmProvider, Bench>| {
        p.poll(Instant::now());
        let mut k = 0;
        while let Some(o) = p.next_outcome() {
            assert_eq!(o.status, CallStatus::Success);
            k += 1;
        }
        k
    };
    let p = std::cell::RefCell::new(p);
    let rate = pipelined(
        Duration::from_secs(2),
        32,
        |t| {
            let mut p = p.borrow_mut();
            let req = null_call(&p.requester);
            p.requester.submit(req, t).expect("submit");
        },
        || count(&mut p.borrow_mut()),
    );
    let data = vec![0x5au8; DDP];
    let ddp = pipelined(
        Duration::from_secs(2),
        8,
        |t| {
            let mut p = p.borrow_mut();
            let req = ddp_call(&p.requester, &data);
            p.requester.submit(req, t).expect("submit");
        },
        || count(&mut p.borrow_mut()),
    );
    println!("one thread (requester and responder share a core):");
    println!(
        "  inline NULL round trip        {:>10.2} us",
        rtt.as_secs_f64() * 1e6
    );
    println!("  inline NULL rate (32 deep)    {:>10.0} calls/s", rate);
    println!(
        "  64 KiB DDP in + out (8 deep)  {:>10.0} calls/s = {:.2} GB/s each way",
        ddp,
        ddp * DDP as f64 / 1e9
    );
}

fn two_threads() {
    let cfg = config();
    let addr = ShmAddr::abstract_name(format!("rpcrdma-bench-2t-{}", std::process::id()));
    let stop = Arc::new(AtomicBool::new(false));
    let server = {
        let (cfg, addr, stop) = (cfg.clone(), addr.clone(), stop.clone());
        let mut srv =
            Responder::<ShmProvider, _, _>::bind(ShmDevice::new(), &addr, cfg, || Some(Bench))
                .expect("server");
        std::thread::spawn(move || {
            let _ = core_affinity::set_for_current(core_affinity::CoreId { id: 1 });
            while !stop.load(Ordering::Relaxed) {
                srv.poll(Instant::now());
            }
        })
    };
    let _ = core_affinity::set_for_current(core_affinity::CoreId { id: 0 });
    let mut r =
        Requester::<ShmProvider>::connect_with(&ShmDevice::new(), &addr, &cfg).expect("connect");
    let end = Instant::now() + DEADLINE;
    while r.state() != ConnState::Established {
        r.poll(Instant::now());
        assert!(Instant::now() < end, "connected");
    }
    let n = 20_000;
    let start = Instant::now();
    for t in 0..n {
        r.submit(null_call(&r), t).expect("submit");
        loop {
            r.poll(Instant::now());
            if r.poll_outcome().is_some() {
                break;
            }
        }
    }
    let rtt = start.elapsed() / n as u32;
    let r = std::cell::RefCell::new(r);
    let count = || {
        let mut r = r.borrow_mut();
        r.poll(Instant::now());
        let mut k = 0;
        while let Some(o) = r.poll_outcome() {
            assert_eq!(o.status, CallStatus::Success);
            k += 1;
        }
        k
    };
    let rate = pipelined(
        Duration::from_secs(2),
        32,
        |t| {
            let mut rr = r.borrow_mut();
            let req = null_call(&rr);
            rr.submit(req, t).expect("submit");
        },
        count,
    );
    let data = vec![0x5au8; DDP];
    let count = || {
        let mut r = r.borrow_mut();
        r.poll(Instant::now());
        let mut k = 0;
        while r.poll_outcome().is_some() {
            k += 1;
        }
        k
    };
    let ddp = pipelined(
        Duration::from_secs(2),
        8,
        |t| {
            let mut rr = r.borrow_mut();
            let req = ddp_call(&rr, &data);
            rr.submit(req, t).expect("submit");
        },
        count,
    );
    stop.store(true, Ordering::Relaxed);
    server.join().expect("server thread");
    println!("two threads (requester and responder each busy-poll a core):");
    println!(
        "  inline NULL round trip        {:>10.2} us",
        rtt.as_secs_f64() * 1e6
    );
    println!("  inline NULL rate (32 deep)    {:>10.0} calls/s", rate);
    println!(
        "  64 KiB DDP in + out (8 deep)  {:>10.0} calls/s = {:.2} GB/s each way",
        ddp,
        ddp * DDP as f64 / 1e9
    );
}

fn main() {
    one_thread();
    two_threads();
}
