//! `rpcrdma-perf server --cores LIST`: the responder as poll groups (one per listed
//! core, each a task on a pinned poller with one completion queue for all of its
//! connections; see `rpcrdma::PollGroup`), and what each group costs.
//!
//! Every group measures the time it spends in polls that did work (a clock read after
//! such a poll; idle polls read nothing more) and publishes it with its calls. The
//! server prints a `group` line per group every [`REPORT_EVERY`]:
//!
//! ```text
//! group 0 core 0 calls 123456 busy_ns 987654321 completions 246912
//! ```
//!
//! which `rpcrdma-perf scale` reads before and after each row: busy time per call is the
//! server's measured per-core cost of a call, the figure its scaling model starts from.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma::fabric::Provider;
use rpcrdma::{ConnConfig, GroupCounters, PollGroup, ResponderLimits};
use rpcrdma_poller::{IdlePolicy, PollCtx, PollerConfig, PollerGroup, Task};
use rpcrdma_ulp::program::Dispatcher;

use crate::spec::BenchError;

/// How often the server prints its groups' counters.
pub const REPORT_EVERY: Duration = Duration::from_millis(50);

/// A poll group on its poller, timing its busy polls.
struct TimedGroup<P: Provider, F> {
    group: PollGroup<P, Dispatcher, F>,
    busy_ns: Arc<AtomicU64>,
    busy: u64,
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
        work
    }
}

/// Serves at `addr` with one group per entry of `cores` until `end` (or forever),
/// printing the groups' counters.
pub fn serve<P, F>(
    dev: P::Device,
    addr: &P::Addr,
    cfg: ConnConfig,
    factory: F,
    cores: &[usize],
    end: Option<Instant>,
) -> Result<(), BenchError>
where
    P: Provider,
    F: Fn() -> Option<Dispatcher> + 'static,
    PollGroup<P, Dispatcher, F>: Send,
{
    let limits = ResponderLimits::default();
    let groups = PollGroup::<P, Dispatcher, F>::bind(dev, addr, cfg, factory, cores.len(), limits)
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
    let mut watched: Vec<(usize, Arc<GroupCounters>, Arc<AtomicU64>)> = Vec::new();
    for g in groups {
        let index = g.index();
        let busy_ns = Arc::new(AtomicU64::new(0));
        watched.push((index, g.counters().clone(), busy_ns.clone()));
        let task = TimedGroup {
            group: g,
            busy_ns,
            busy: 0,
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
        for (i, c, busy) in &watched {
            let s = c.sample();
            lines.push_str(&format!(
                "group {i} core {} calls {} busy_ns {} completions {}\n",
                cores.get(*i).copied().unwrap_or(0),
                s.calls,
                busy.load(Ordering::Relaxed),
                s.completions
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

/// One `group` line: (group, calls, busy_ns).
pub fn parse_line(line: &str) -> Option<(usize, u64, u64)> {
    let mut w = line.split_whitespace();
    if w.next()? != "group" {
        return None;
    }
    let group = w.next()?.parse().ok()?;
    let mut calls = None;
    let mut busy = None;
    while let (Some(k), Some(v)) = (w.next(), w.next()) {
        match k {
            "calls" => calls = v.parse().ok(),
            "busy_ns" => busy = v.parse().ok(),
            _ => {}
        }
    }
    Some((group, calls?, busy?))
}

#[cfg(test)]
mod tests {
    use super::parse_line;

    #[test]
    fn group_lines_parse() {
        assert_eq!(
            parse_line("group 1 core 1 calls 42 busy_ns 99 completions 84"),
            Some((1, 42, 99))
        );
        assert_eq!(parse_line("rpcrdma-perf server: listening"), None);
        assert_eq!(parse_line("group x core 1 calls 1 busy_ns 2"), None);
        assert_eq!(parse_line("group 1 core 1 calls 1"), None);
    }
}
