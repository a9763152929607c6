//! Poller benchmark: `cargo bench -p rpcrdma-perf --bench poller`.
//!
//! 1. Bare baseline: a cache-line ping-pong between two pinned threads through one atomic,
//!    the floor for any cross-core hand-off on this machine.
//! 2. Mailbox hop: a ping-pong between tasks on two pinned busy-polling pollers, each hop a
//!    mailbox send plus the receiving poller's loop picking it up; printed beside (1) as a
//!    ratio.
//! 3. The same ping-pong with pollers that park whenever idle: each hop pays an eventfd
//!    wake-up.
//! 4. Per-iteration cost of an empty poller loop (no task, no-op tasks, an armed timer).
//!
//! Each measurement is repeated and reported as min / median; every sample is capped in
//! time so a descheduled thread (the machine is shared) cannot stall the run. Whole run:
//! a few seconds, ~20 s worst case.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rpcrdma_poller::{IdlePolicy, PollCtx, PollerConfig, PollerGroup, PollerHandle, Task, TaskId};

const SAMPLES: usize = 5;
const ROUNDS: u64 = 100_000;
const SAMPLE_CAP: Duration = Duration::from_secs(1);
const LOOP_WINDOW: Duration = Duration::from_millis(300);

/// Median and min of per-round-trip nanoseconds over the samples that completed any rounds.
struct Summary {
    min: f64,
    median: f64,
    samples: usize,
}

fn summarize(mut ns: Vec<f64>) -> Option<Summary> {
    ns.retain(|v| v.is_finite());
    if ns.is_empty() {
        return None;
    }
    ns.sort_by(f64::total_cmp);
    Some(Summary {
        min: ns[0],
        median: ns[ns.len() / 2],
        samples: ns.len(),
    })
}

fn pin(core: usize) -> bool {
    core < libc::CPU_SETSIZE as usize
        && core_affinity::set_for_current(core_affinity::CoreId { id: core })
}

#[repr(align(128))]
struct Line(AtomicU64);

const STOP: u64 = u64::MAX;

/// One sample of the bare ping-pong: ns per round trip, or NaN if nothing completed.
fn baseline_sample(cores: (usize, usize)) -> f64 {
    let line = Arc::new(Line(AtomicU64::new(0)));
    let responder = {
        let line = line.clone();
        thread::spawn(move || {
            pin(cores.1);
            loop {
                let v = line.0.load(Ordering::Acquire);
                if v == STOP {
                    return;
                }
                if v % 2 == 1 {
                    line.0.store(v + 1, Ordering::Release);
                }
            }
        })
    };
    pin(cores.0);
    let start = Instant::now();
    let cap = start + SAMPLE_CAP;
    let mut done = 0;
    'rounds: for i in 0..ROUNDS {
        line.0.store(2 * i + 1, Ordering::Release);
        let mut spins = 0u32;
        while line.0.load(Ordering::Acquire) != 2 * i + 2 {
            spins = spins.wrapping_add(1);
            if spins & 0xffff == 0 && Instant::now() > cap {
                break 'rounds;
            }
        }
        done = i + 1;
        if done & 4095 == 0 && Instant::now() > cap {
            break;
        }
    }
    let elapsed = start.elapsed();
    line.0.store(STOP, Ordering::Release);
    let _ = responder.join();
    if done == 0 {
        f64::NAN
    } else {
        elapsed.as_nanos() as f64 / done as f64
    }
}

enum Msg {
    /// To the pinger: run `rounds` round trips against `pong`.
    Start {
        rounds: u64,
        pong: TaskId,
    },
    Ping {
        from: TaskId,
    },
    Pong,
}

struct PingResult {
    done: AtomicBool,
    rounds: AtomicU64,
    nanos: AtomicU64,
}

struct Pinger {
    to_pong: PollerHandle<Msg>,
    pong: Option<TaskId>,
    target: u64,
    count: u64,
    start: Option<Instant>,
    result: Arc<PingResult>,
}

impl Pinger {
    fn finish(&mut self) {
        let elapsed = self.start.map(|s| s.elapsed()).unwrap_or_default();
        self.result.rounds.store(self.count, Ordering::Relaxed);
        self.result
            .nanos
            .store(elapsed.as_nanos() as u64, Ordering::Relaxed);
        self.result.done.store(true, Ordering::Release);
        self.pong = None;
    }

    fn ping(&mut self, ctx: &mut PollCtx<'_>) {
        let Some(pong) = self.pong else { return };
        if self
            .to_pong
            .send(
                pong,
                Msg::Ping {
                    from: ctx.task_id(),
                },
            )
            .is_err()
        {
            self.finish();
        }
    }
}

impl Task<Msg> for Pinger {
    fn poll(&mut self, _: &mut PollCtx<'_>) -> usize {
        0
    }

    fn on_message(&mut self, msg: Msg, ctx: &mut PollCtx<'_>) {
        match msg {
            Msg::Start { rounds, pong } => {
                self.pong = Some(pong);
                self.target = rounds;
                self.count = 0;
                self.start = Some(Instant::now());
                self.ping(ctx);
            }
            Msg::Pong => {
                self.count += 1;
                let over_time =
                    self.count & 4095 == 0 && self.start.is_some_and(|s| s.elapsed() > SAMPLE_CAP);
                if self.count >= self.target || over_time {
                    self.finish();
                } else {
                    self.ping(ctx);
                }
            }
            Msg::Ping { .. } => {}
        }
    }
}

struct Ponger {
    to_ping: PollerHandle<Msg>,
}

impl Task<Msg> for Ponger {
    fn poll(&mut self, _: &mut PollCtx<'_>) -> usize {
        0
    }

    fn on_message(&mut self, msg: Msg, _: &mut PollCtx<'_>) {
        if let Msg::Ping { from } = msg {
            // Only one message is ever in flight, so the mailbox cannot be full.
            let _ = self.to_ping.send(from, Msg::Pong);
        }
    }
}

fn busy_config() -> PollerConfig {
    PollerConfig {
        idle: IdlePolicy::busy_poll(),
        thread_name: "bench-poll".into(),
        ..PollerConfig::default()
    }
}

/// Mailbox ping-pong samples (ns per round trip) and the pollers' busy fractions.
fn mailbox_samples(
    cores: (usize, usize),
    config: PollerConfig,
) -> Result<(Vec<f64>, Vec<f64>), String> {
    let group =
        PollerGroup::<Msg>::start(&[cores.0, cores.1], config).map_err(|e| e.to_string())?;
    for r in group.pin_reports() {
        if !r.pinned {
            println!("  note: poller {} not pinned to core {}", r.index, r.core);
        }
    }
    let h0 = group.handle(0).ok_or("no poller 0")?.clone();
    let h1 = group.handle(1).ok_or("no poller 1")?.clone();
    let result = Arc::new(PingResult {
        done: AtomicBool::new(false),
        rounds: AtomicU64::new(0),
        nanos: AtomicU64::new(0),
    });
    let pinger = h0
        .add_task(Box::new(Pinger {
            to_pong: h1.clone(),
            pong: None,
            target: 0,
            count: 0,
            start: None,
            result: result.clone(),
        }))
        .map_err(|e| e.to_string())?;
    let ponger = h1
        .add_task(Box::new(Ponger {
            to_ping: h0.clone(),
        }))
        .map_err(|e| e.to_string())?;

    let mut samples = Vec::new();
    for _ in 0..SAMPLES {
        result.done.store(false, Ordering::Relaxed);
        let start = Msg::Start {
            rounds: ROUNDS,
            pong: ponger,
        };
        h0.send(pinger, start).map_err(|e| e.to_string())?;
        let deadline = Instant::now() + SAMPLE_CAP * 3;
        while !result.done.load(Ordering::Acquire) {
            if Instant::now() > deadline {
                return Err("mailbox ping-pong sample never finished".into());
            }
            thread::sleep(Duration::from_millis(2));
        }
        let rounds = result.rounds.load(Ordering::Relaxed);
        let nanos = result.nanos.load(Ordering::Relaxed);
        samples.push(if rounds == 0 {
            f64::NAN
        } else {
            nanos as f64 / rounds as f64
        });
    }
    let busy = group
        .stats()
        .pollers
        .iter()
        .map(|s| s.busy_fraction())
        .collect();
    group
        .shutdown(Instant::now() + Duration::from_secs(5))
        .map_err(|e| e.to_string())?;
    Ok((samples, busy))
}

struct Nop;

impl Task<()> for Nop {
    fn poll(&mut self, _: &mut PollCtx<'_>) -> usize {
        0
    }
}

/// Arms one timer an hour out on its first poll: the loop then reads the clock every
/// iteration to compare against it, which is what this variant measures.
struct FarTimer {
    armed: bool,
}

impl Task<()> for FarTimer {
    fn poll(&mut self, ctx: &mut PollCtx<'_>) -> usize {
        if !self.armed {
            self.armed = ctx.arm_timer_after(Duration::from_secs(3600), 0).is_ok();
        }
        0
    }
}

type TaskList = Vec<Box<dyn Task<()>>>;

/// ns per loop iteration of a busy-polling poller running `tasks`.
fn loop_cost(core: usize, tasks: TaskList) -> Result<f64, String> {
    let group = PollerGroup::<()>::start(&[core], busy_config()).map_err(|e| e.to_string())?;
    let h = group.handle(0).ok_or("no poller")?.clone();
    for task in tasks {
        h.add_task(task).map_err(|e| e.to_string())?;
    }
    thread::sleep(Duration::from_millis(50));
    let (i0, t0) = (h.stats().iterations, Instant::now());
    thread::sleep(LOOP_WINDOW);
    let (i1, t1) = (h.stats().iterations, Instant::now());
    group
        .shutdown(Instant::now() + Duration::from_secs(5))
        .map_err(|e| e.to_string())?;
    if i1 <= i0 {
        return Err("poller made no progress".into());
    }
    Ok((t1 - t0).as_nanos() as f64 / (i1 - i0) as f64)
}

fn main() {
    let run_start = Instant::now();
    let available: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .iter()
        .map(|c| c.id)
        .collect();
    let cores = match available.as_slice() {
        [a, b, ..] => (*a, *b),
        [a] => (*a, *a),
        [] => (0, 0),
    };
    println!(
        "poller bench: cores {cores:?} of {available:?}, {SAMPLES} samples x {ROUNDS} round trips \
         (each capped at {SAMPLE_CAP:?})"
    );
    if cores.0 == cores.1 {
        println!("  warning: only one core; ping-pong numbers measure the scheduler");
    }

    // Each measurement runs on fresh threads so earlier pinning does not leak into it.
    let baseline: Vec<f64> =
        thread::spawn(move || (0..SAMPLES).map(|_| baseline_sample(cores)).collect())
            .join()
            .unwrap_or_default();
    let base = summarize(baseline);
    match &base {
        Some(s) => println!(
            "baseline  cache-line ping-pong   RTT  min {:8.1} ns  median {:8.1} ns  ({} samples)",
            s.min, s.median, s.samples
        ),
        None => println!("baseline  cache-line ping-pong: no completed samples"),
    }

    match mailbox_samples(cores, busy_config()) {
        Ok((samples, busy)) => match summarize(samples) {
            Some(s) => {
                println!(
                    "mailbox   poller ping-pong       RTT  min {:8.1} ns  median {:8.1} ns  ({} samples, 2 hops/RTT)",
                    s.min, s.median, s.samples
                );
                if let Some(b) = &base {
                    println!(
                        "ratio     mailbox / baseline          min {:8.2} x   median {:8.2} x",
                        s.min / b.min,
                        s.median / b.median
                    );
                }
                println!("          poller busy fractions: {busy:.3?}");
            }
            None => println!("mailbox   poller ping-pong: no completed samples"),
        },
        Err(e) => println!("mailbox   poller ping-pong failed: {e}"),
    }

    // Same ping-pong, but every poller parks as soon as it is idle, so each hop pays an
    // eventfd write and a wake-up: the price of an idle policy that parks eagerly.
    let parked = PollerConfig {
        idle: IdlePolicy {
            spin_iters: 0,
            pause_iters: 0,
            yield_iters: 0,
            park: Some(Duration::from_secs(1)),
        },
        ..busy_config()
    };
    match mailbox_samples(cores, parked) {
        Ok((samples, _)) => match (summarize(samples), &base) {
            (Some(s), Some(b)) => println!(
                "parked    poller ping-pong       RTT  min {:8.1} ns  median {:8.1} ns  ({:.0} x baseline median)",
                s.min,
                s.median,
                s.median / b.median
            ),
            (Some(s), None) => println!(
                "parked    poller ping-pong       RTT  min {:8.1} ns  median {:8.1} ns",
                s.min, s.median
            ),
            (None, _) => println!("parked    poller ping-pong: no completed samples"),
        },
        Err(e) => println!("parked    poller ping-pong failed: {e}"),
    }

    let nops =
        |n: usize| -> TaskList { (0..n).map(|_| Box::new(Nop) as Box<dyn Task<()>>).collect() };
    let variants: [(&str, TaskList); 4] = [
        ("no task", nops(0)),
        ("1 no-op task", nops(1)),
        ("8 no-op tasks", nops(8)),
        (
            "1 task + 1 armed timer",
            vec![Box::new(FarTimer { armed: false })],
        ),
    ];
    for (label, tasks) in variants {
        match loop_cost(cores.0, tasks) {
            Ok(ns) => println!("loop      empty iteration, {label:<24} {ns:7.1} ns/iteration"),
            Err(e) => println!("loop      {label} failed: {e}"),
        }
    }
    println!("total bench time {:.1?}", run_start.elapsed());
}
