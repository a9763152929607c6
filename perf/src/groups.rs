//! `rpcrdma-perf server --cores LIST`: the responder as poll groups (one per listed
//! core, each a task on a pinned poller with one completion queue for all of its
//! connections; see `rpcrdma::PollGroup`), and what each group costs.
//!
//! Every group measures the time it spends in polls that did work (a clock read after
//! such a poll; idle polls read nothing more) and publishes it with its calls. The
//! server prints a `group` line per group every [`REPORT_EVERY`]:
//!
//! ```text
//! group 0 core 0 calls 123456 busy_ns 987654321 completions 246912 cpu_ns 990000000
//! ```
//!
//! which `rpcrdma-perf scale` reads before and after each row: busy time per call is the
//! server's measured per-core cost of a call, the figure its scaling model starts from;
//! `cpu_ns` is the group thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`, read every 5 ms
//! by the group itself), which, unlike busy time, excludes time the scheduler gave to
//! other threads in the middle of a poll but includes idle polling.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma::fabric::Provider;
use rpcrdma::{ConnConfig, GroupCounters, GroupOptions, PollGroup, ResponderLimits};
use rpcrdma_poller::{IdlePolicy, PollCtx, PollerConfig, PollerGroup, Task};
use rpcrdma_ulp::program::Dispatcher;

use crate::spec::BenchError;

/// How often the server prints its groups' counters.
pub const REPORT_EVERY: Duration = Duration::from_millis(50);

/// How often a group reads its thread's CPU clock (a system call).
const CPU_SAMPLE_EVERY: Duration = Duration::from_millis(5);

/// A poll group on its poller, timing its busy polls and its thread's CPU time.
struct TimedGroup<P: Provider, F> {
    group: PollGroup<P, Dispatcher, F>,
    busy_ns: Arc<AtomicU64>,
    busy: u64,
    /// The poller thread's CPU time, ns (sampled every [`CPU_SAMPLE_EVERY`]).
    cpu_ns: Arc<AtomicU64>,
    next_cpu_sample: Option<Instant>,
}

impl<P, F> Task<()> for TimedGroup<P, F>
where
    P: Provider,
    F: Fn() -> Option<Dispatcher>,
    PollGroup<P, Dispatcher, F>: Send,
{
    fn poll(&mut self, ctx: &mut PollCtx<'_>) -> usize {
        let start = ctx.now();
        let work = self.group.poll(start);
        if work > 0 {
            self.busy += Instant::now().saturating_duration_since(start).as_nanos() as u64;
            // One writer: a plain store.
            self.busy_ns.store(self.busy, Ordering::Relaxed);
        }
        if self.next_cpu_sample.is_none_or(|t| start >= t) {
            self.next_cpu_sample = Some(start + CPU_SAMPLE_EVERY);
            if let Some(cpu) = crate::measure::thread_cpu_time() {
                self.cpu_ns.store(cpu.as_nanos() as u64, Ordering::Relaxed);
            }
        }
        work
    }
}

/// What the printing loop reads of one group.
struct Watched {
    index: usize,
    counters: Arc<GroupCounters>,
    busy_ns: Arc<AtomicU64>,
    cpu_ns: Arc<AtomicU64>,
}

/// Serves at `addr` with one group per entry of `cores` (set up as `opts` says) until
/// `end` (or forever), printing the groups' counters.
pub fn serve<P, F>(
    dev: P::Device,
    addr: &P::Addr,
    cfg: ConnConfig,
    factory: F,
    cores: &[usize],
    opts: GroupOptions,
    end: Option<Instant>,
) -> Result<(), BenchError>
where
    P: Provider,
    F: Fn() -> Option<Dispatcher> + 'static,
    PollGroup<P, Dispatcher, F>: Send,
{
    let limits = ResponderLimits::default();
    let groups = PollGroup::<P, Dispatcher, F>::bind_with(
        dev,
        addr,
        cfg,
        factory,
        cores.len(),
        limits,
        opts,
    )
    .map_err(|e| BenchError::Setup(format!("listen: {e}")))?;
    let config = PollerConfig {
        // Busy while there is work; an idle group yields its core (the clients of a
        // one-machine run need it).
        idle: IdlePolicy {
            spin_iters: 256,
            pause_iters: 0,
            yield_iters: u32::MAX,
            park: None,
        },
        thread_name: "rpcrdma-perf-group".to_string(),
        ..PollerConfig::default()
    };
    let pollers = PollerGroup::<()>::start(cores, config)
        .map_err(|e| BenchError::Setup(format!("--cores: {e}")))?;
    let mut watched: Vec<Watched> = Vec::new();
    for g in groups {
        let index = g.index();
        let busy_ns = Arc::new(AtomicU64::new(0));
        let cpu_ns = Arc::new(AtomicU64::new(0));
        watched.push(Watched {
            index,
            counters: g.counters().clone(),
            busy_ns: busy_ns.clone(),
            cpu_ns: cpu_ns.clone(),
        });
        let task = TimedGroup {
            group: g,
            busy_ns,
            busy: 0,
            cpu_ns,
            next_cpu_sample: None,
        };
        pollers
            .add_task(index, Box::new(task))
            .map_err(|e| BenchError::Setup(format!("poll group {index}: {:?}", e.kind())))?;
    }
    let pins: Vec<String> = pollers
        .pin_reports()
        .iter()
        .map(|p| format!("{}{}", p.core, if p.pinned { "" } else { "?" }))
        .collect();
    println!(
        "rpcrdma-perf server: {} poll group(s) on cores {}",
        pins.len(),
        pins.join(",")
    );
    let mut out = std::io::stdout();
    loop {
        std::thread::sleep(REPORT_EVERY);
        let mut lines = String::new();
        for w in &watched {
            let s = w.counters.sample();
            lines.push_str(&format!(
                "group {} core {} calls {} busy_ns {} completions {} cpu_ns {} connections {} \
                 srq_depth {} srq_low {} receive_share {} held {} overruns {}\n",
                w.index,
                cores.get(w.index).copied().unwrap_or(0),
                s.calls,
                w.busy_ns.load(Ordering::Relaxed),
                s.completions,
                w.cpu_ns.load(Ordering::Relaxed),
                s.connections,
                s.srq_depth,
                s.srq_low,
                s.receive_share,
                s.held,
                s.overruns
            ));
        }
        // A reader gone (the runner ended) is no reason to stop serving.
        let _ = out.write_all(lines.as_bytes());
        let _ = out.flush();
        if end.is_some_and(|e| Instant::now() >= e) {
            break;
        }
    }
    let _ = pollers.shutdown(Instant::now() + Duration::from_secs(3));
    Ok(())
}

/// One group's counters as a `group` line carries them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupSample {
    /// Calls served.
    pub calls: u64,
    /// Time in polls that did work, ns.
    pub busy_ns: u64,
    /// The group's thread's CPU time, ns (0 from a server that does not print it).
    pub cpu_ns: u64,
    /// Calls held for a free reply context (0 from a server that does not print it).
    pub held: u64,
    /// Calls dropped beyond the credits granted (0 from a server that does not print
    /// it).
    pub overruns: u64,
}

/// One `group` line: the group's index and counters.
pub fn parse_line(line: &str) -> Option<(usize, GroupSample)> {
    let mut w = line.split_whitespace();
    if w.next()? != "group" {
        return None;
    }
    let group = w.next()?.parse().ok()?;
    let mut calls = None;
    let mut busy = None;
    let mut cpu = 0;
    let (mut held, mut overruns) = (0, 0);
    while let (Some(k), Some(v)) = (w.next(), w.next()) {
        match k {
            "calls" => calls = v.parse().ok(),
            "busy_ns" => busy = v.parse().ok(),
            "cpu_ns" => cpu = v.parse().ok()?,
            "held" => held = v.parse().ok()?,
            "overruns" => overruns = v.parse().ok()?,
            _ => {}
        }
    }
    Some((
        group,
        GroupSample {
            calls: calls?,
            busy_ns: busy?,
            cpu_ns: cpu,
            held,
            overruns,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::{parse_line, GroupSample};

    #[test]
    fn group_lines_parse() {
        let s = |calls, busy_ns, cpu_ns| GroupSample {
            calls,
            busy_ns,
            cpu_ns,
            ..GroupSample::default()
        };
        assert_eq!(
            parse_line("group 1 core 1 calls 42 busy_ns 99 completions 84"),
            Some((1, s(42, 99, 0)))
        );
        assert_eq!(
            parse_line("group 0 core 0 calls 42 busy_ns 99 completions 84 cpu_ns 7"),
            Some((0, s(42, 99, 7)))
        );
        assert_eq!(
            parse_line("group 0 core 0 calls 1 busy_ns 2 cpu_ns x"),
            None
        );
        assert_eq!(
            parse_line(
                "group 1 core 1 calls 5 busy_ns 6 completions 10 cpu_ns 7 connections 2 \
                 srq_depth 64 srq_low 60 receive_share 16 held 3 overruns 1"
            ),
            Some((
                1,
                GroupSample {
                    held: 3,
                    overruns: 1,
                    ..s(5, 6, 7)
                }
            ))
        );
        assert_eq!(parse_line("group 0 core 0 calls 1 busy_ns 2 held x"), None);
        assert_eq!(parse_line("rpcrdma-perf server: listening"), None);
        assert_eq!(parse_line("group x core 1 calls 1 busy_ns 2"), None);
        assert_eq!(parse_line("group 1 core 1 calls 1"), None);
    }
}
