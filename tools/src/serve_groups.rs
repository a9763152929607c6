//! `rpcrdma serve --cores LIST`: the server as poll groups, one per listed core, each a
//! task on a pinned poller (rpcrdma-poller) with one completion queue for all of its
//! connections ([`PollGroup`]). New connections go to the least loaded group and stay
//! there.
//!
//! This thread only watches: it merges what each group publishes a few times a second
//! (its connections' counters, taken on the group's own thread) into the live
//! counters, prints the per-second line and connections as they come and go, and at the
//! end asks the groups to disconnect everything and waits, bounded, for them to drain.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use rpcrdma::fabric::Provider;
use rpcrdma::{GroupCounters, PollGroup, RequesterRole, ResponderCounters};
use rpcrdma_poller::{IdlePolicy, PollCtx, PollerConfig, PollerGroup, Task};
use rpcrdma_ulp::nfs::server::NfsShared;

use crate::endpoint::Endpoint;
use crate::error::CliError;
use crate::serve::{
    conn_sample, say, say_totals, server_snapshot, Counted, Counters, ServeOpts, Ticker, DRAIN,
    SAMPLE_EVERY,
};
use crate::stats::{Board, ConnSample, GroupStat, Snapshot};

/// What a group publishes for the watching thread.
#[derive(Default)]
struct Published {
    conns: Vec<ConnSample>,
    limits: ResponderCounters,
}

/// One group on its poller.
struct GroupTask<P: Provider, F, B: RequesterRole> {
    group: PollGroup<P, Counted, F, B>,
    published: Arc<Mutex<Published>>,
    stopping: Arc<AtomicBool>,
    disconnecting: bool,
    next_sample: Instant,
}

impl<P, F, B> Task<()> for GroupTask<P, F, B>
where
    P: Provider,
    F: Fn() -> Option<Counted>,
    B: RequesterRole,
    PollGroup<P, Counted, F, B>: Send,
{
    fn poll(&mut self, ctx: &mut PollCtx<'_>) -> usize {
        let now = ctx.now();
        let work = self.group.poll(now);
        // Bookkeeping a few times a second, never per call (building samples allocates).
        if now >= self.next_sample {
            self.next_sample = now + SAMPLE_EVERY;
            let mut p = self
                .published
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            p.conns.clear();
            p.conns
                .extend(self.group.connections().iter().map(conn_sample));
            p.limits = self.group.limit_counters();
            if !self.disconnecting && self.stopping.load(Ordering::Relaxed) {
                self.disconnecting = true;
                self.group.disconnect_all();
            }
        }
        work
    }
}

/// Serves with `groups` (one per entry of `cores`, in order) until a signal or the
/// duration ends. With `nfs`, the groups' connections call their NFSv4.1 clients back
/// (`B` is `RequesterHalf`), and the backchannel counters are reported.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<P, F, B>(
    groups: Vec<PollGroup<P, Counted, F, B>>,
    cores: &[usize],
    ep: &Endpoint,
    opts: &ServeOpts,
    counters: &Arc<Counters>,
    nfs: Option<&NfsShared>,
    board: &Board,
) -> Result<(), CliError>
where
    P: Provider,
    F: Fn() -> Option<Counted> + 'static,
    B: RequesterRole + 'static,
    PollGroup<P, Counted, F, B>: Send,
{
    let config = PollerConfig {
        // A busy group never yields; an idle one gives its core away between looks (a
        // shared machine should not lose whole cores to an idle server).
        idle: IdlePolicy {
            spin_iters: 1024,
            pause_iters: 0,
            yield_iters: u32::MAX,
            park: None,
        },
        thread_name: "rpcrdma-group".to_string(),
        ..PollerConfig::default()
    };
    let pollers = PollerGroup::<()>::start(cores, config)
        .map_err(|e| CliError::Serve(format!("--cores: {e}")))?;
    let stopping = Arc::new(AtomicBool::new(false));
    let mut watched: Vec<(Arc<GroupCounters>, Arc<Mutex<Published>>)> = Vec::new();
    let start = Instant::now();
    for group in groups {
        let index = group.index();
        let published = Arc::new(Mutex::new(Published::default()));
        watched.push((group.counters().clone(), published.clone()));
        let task = GroupTask {
            group,
            published,
            stopping: stopping.clone(),
            disconnecting: false,
            next_sample: start,
        };
        pollers
            .add_task(index, Box::new(task))
            .map_err(|e| CliError::Serve(format!("starting poll group {index}: {:?}", e.kind())))?;
    }
    let pins = pollers.pin_reports().to_vec();
    say(&format!(
        "rpcrdma serve: {} poll group(s) on cores {}",
        pins.len(),
        pins.iter()
            .map(|p| format!("{}{}", p.core, if p.pinned { "" } else { " (not pinned)" }))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let mut ticker = Ticker::new(start, opts.duration);
    let snap = |start: Instant| -> (Snapshot, ResponderCounters) {
        let mut cc = ResponderCounters::default();
        let mut conns = Vec::new();
        let mut stats = Vec::new();
        for (i, (c, p)) in watched.iter().enumerate() {
            let s = c.sample();
            let p = p.lock().unwrap_or_else(PoisonError::into_inner);
            cc.accepted += s.accepted;
            cc.over_limit += s.over_limit;
            cc.refused += s.refused;
            cc.handshake_timeouts += p.limits.handshake_timeouts;
            cc.idle_closed += p.limits.idle_closed;
            conns.extend(p.conns.iter().cloned());
            stats.push(GroupStat {
                group: i,
                core: pins.get(i).map_or(0, |p| p.core),
                pinned: pins.get(i).is_some_and(|p| p.pinned),
                connections: s.connections,
                accepted: s.accepted,
                closed: s.closed,
                completions: s.completions,
                calls: s.calls,
                held: s.held,
                overruns: s.overruns,
                srq_depth: s.srq_depth,
                srq_low: s.srq_low,
                receive_share: s.receive_share,
                srq_connections: s.srq_connections,
                srq_promised: s.srq_promised,
                srq_unusable: s.srq_unusable,
            });
        }
        let snapshot = server_snapshot(&cc, nfs, counters, ep, start, conns, stats);
        (snapshot, cc)
    };
    let live = || -> u64 { watched.iter().map(|(c, _)| c.sample().connections).sum() };
    let mut known: Vec<(String, bool)> = Vec::new();
    let reason = loop {
        thread::sleep(SAMPLE_EVERY);
        let now = Instant::now();
        let (s, _) = snap(start);
        track(&s.connections, &mut known);
        board.publish(s);
        ticker.tick(now, counters, || {
            let per_group: Vec<String> = watched
                .iter()
                .map(|(c, _)| c.sample().connections.to_string())
                .collect();
            format!("{} ({} per group)", live(), per_group.join("+"))
        });
        if let Some(reason) = ticker.stop_reason(now) {
            break reason;
        }
    };
    say(&format!(
        "rpcrdma serve: stopping ({reason}); disconnecting"
    ));
    stopping.store(true, Ordering::Relaxed);
    let drain_end = Instant::now() + DRAIN;
    while live() > 0 && Instant::now() < drain_end {
        thread::sleep(Duration::from_millis(10));
    }
    let left = live() as usize;
    let (s, cc) = snap(start);
    track(&s.connections, &mut known);
    board.publish(s);
    for g in &s_groups(&watched) {
        say(&format!(
            "rpcrdma serve: poll group {}: {} accepted, {} closed, {} calls, {} completions",
            g.0, g.1.accepted, g.1.closed, g.1.calls, g.1.completions
        ));
    }
    // A poller stuck past the deadline is detached; the process is about to exit.
    let _ = pollers.shutdown(Instant::now() + DRAIN);
    say_totals(&cc, counters, nfs, start, left);
    Ok(())
}

/// Each group's counters now, by index.
fn s_groups(
    watched: &[(Arc<GroupCounters>, Arc<Mutex<Published>>)],
) -> Vec<(usize, rpcrdma::GroupSample)> {
    watched
        .iter()
        .enumerate()
        .map(|(i, (c, _))| (i, c.sample()))
        .collect()
}

/// Prints connections that came up or went away since the last look.
fn track(conns: &[ConnSample], known: &mut Vec<(String, bool)>) {
    for c in conns {
        let up = c.state == "Established";
        match known.iter_mut().find(|(k, _)| *k == c.id) {
            Some((_, announced)) => {
                if up && !*announced {
                    *announced = true;
                    say(&format!("connection {} established", c.id));
                }
            }
            None => {
                known.push((c.id.clone(), up));
                if up {
                    say(&format!("connection {} established", c.id));
                }
            }
        }
    }
    known.retain(|(id, announced)| {
        let live = conns.iter().any(|c| c.id == *id);
        if !live && *announced {
            say(&format!("connection {id} closed"));
        }
        live
    });
}
