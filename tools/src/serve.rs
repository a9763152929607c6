//! `rpcrdma serve`: the built-in programs (NULL, and echo/sink/source/echo2 with
//! DDP-eligible payloads) on one provider and address, busy-polled on this thread.
//!
//! Prints each connection as it comes and goes and, once a second, calls and payload
//! octets per second. Stops on Ctrl-C (SIGINT), SIGTERM or after `--duration`:
//! connections are disconnected and given a bounded time to drain, then the process
//! exits 0.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rpcrdma::conn::{Server, ServerLimits};
use rpcrdma::core::{ConnConfig, ConnState};
use rpcrdma::fabric::shm::{ShmConfig, ShmDevice, ShmProvider};
use rpcrdma::fabric::siw::{SiwConfig, SiwDevice, SiwProvider};
use rpcrdma::fabric::{ConnId, Provider};
use rpcrdma::service::{CallView, ReplyWriter, Service, ServiceError};
use rpcrdma_ulp::builtin::{
    echo_proc, EchoProgram, NullProgram, ECHO_MAX_DATA, ECHO_PROGRAM, NULL_PROGRAM,
};
use rpcrdma_ulp::program::Dispatcher;

use crate::endpoint::Endpoint;
use crate::error::CliError;
use crate::signal;

/// How long connections may take to drain at shutdown.
const DRAIN: Duration = Duration::from_secs(3);
/// Idle polls after which the loop yields its core once (a shared machine should not
/// lose a whole core to an idle server; a busy one never yields).
const IDLE_YIELD: u32 = 1024;

/// `serve` settings.
#[derive(Debug, Clone)]
pub struct ServeOpts {
    /// Stop after this long (tests); `None` runs until a signal.
    pub duration: Option<Duration>,
    /// Connection configuration of accepted connections.
    pub conn: ConnConfig,
    /// Largest SOURCE reply.
    pub source_max: usize,
    /// Connection cap, handshake and idle timeouts.
    pub limits: ServerLimits,
}

/// Counters the services of every connection add to.
#[derive(Debug, Default)]
struct Counters {
    calls: AtomicU64,
    /// NULL calls answered (pings and keepalive probes).
    nulls: AtomicU64,
    /// Calls for a program not served here.
    prog_unavail: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
}

/// The dispatcher with counting around it.
struct Counted {
    inner: Dispatcher,
    counters: Arc<Counters>,
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    let w = b.get(at..at + 4)?;
    Some(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

impl Service for Counted {
    fn handle_call(
        &mut self,
        call: &CallView<'_>,
        reply: &mut ReplyWriter<'_>,
    ) -> Result<(), ServiceError> {
        let chunks_before = reply.write_chunks_left();
        let seen = self.inner.stats();
        let r = self.inner.handle_call(call, reply);
        let now = self.inner.stats();
        let c = &self.counters;
        c.calls.fetch_add(1, Ordering::Relaxed);
        c.nulls
            .fetch_add(now.nulls.wrapping_sub(seen.nulls), Ordering::Relaxed);
        c.prog_unavail.fetch_add(
            now.prog_unavail.wrapping_sub(seen.prog_unavail),
            Ordering::Relaxed,
        );
        let ddp_in: usize = call.ddp_items().iter().map(|d| d.data.len()).sum();
        c.bytes_in
            .fetch_add((call.msg().len() + ddp_in) as u64, Ordering::Relaxed);
        let mut out = reply.len() as u64;
        // A result sent through a Write chunk is not in the body; for ECHO and SOURCE
        // (one result) the body's last word is its length.
        let msg = call.msg();
        let echo_like = be32(msg, 12) == Some(ECHO_PROGRAM)
            && matches!(be32(msg, 20), Some(echo_proc::ECHO | echo_proc::SOURCE));
        if echo_like && reply.write_chunks_left() < chunks_before && reply.len() >= 4 {
            out += u64::from(be32(reply.as_slice(), reply.len() - 4).unwrap_or(0));
        }
        c.bytes_out.fetch_add(out, Ordering::Relaxed);
        r
    }

    fn on_done(&mut self, xid: u32) {
        self.inner.on_done(xid);
    }
}

/// The built-in programs.
pub fn dispatcher(source_max: usize) -> Result<Dispatcher, CliError> {
    let mut d = Dispatcher::new();
    let err = |e: rpcrdma_ulp::program::RegisterError| CliError::Serve(format!("{e}"));
    d.register(Box::new(EchoProgram::with_source_max(
        source_max.min(ECHO_MAX_DATA as usize),
    )))
    .map_err(err)?;
    d.register(Box::new(NullProgram::default())).map_err(err)?;
    Ok(d)
}

/// Runs the server until a signal or the duration ends.
pub fn run(ep: &Endpoint, opts: &ServeOpts) -> Result<(), CliError> {
    opts.conn
        .validate()
        .map_err(|e| CliError::Serve(format!("connection settings: {e}")))?;
    signal::install().map_err(|e| CliError::Serve(format!("cannot catch Ctrl-C: {e}")))?;
    match ep {
        Endpoint::Shm(a) => {
            // The provider's own handshake (connect request, RTU) is bounded alike.
            let cfg = ShmConfig {
                handshake_timeout: opts.limits.handshake_timeout,
                ..ShmConfig::default()
            };
            let dev =
                ShmDevice::with_config(cfg).map_err(|e| CliError::Serve(format!("shm: {e}")))?;
            serve::<ShmProvider>(dev, a, ep, opts)
        }
        Endpoint::Siw(a) => {
            // TCP accept to the end of MPA is bounded alike.
            let cfg = SiwConfig {
                handshake_timeout: opts.limits.handshake_timeout,
                ..SiwConfig::default()
            };
            let dev =
                SiwDevice::with_config(cfg).map_err(|e| CliError::Serve(format!("siw: {e}")))?;
            serve::<SiwProvider>(dev, a, ep, opts)
        }
        #[cfg(feature = "verbs")]
        Endpoint::Verbs(a) => {
            let dev = crate::endpoint::open_verbs()
                .map_err(|e| CliError::Serve(format!("verbs: {e}")))?;
            let addr = rpcrdma::fabric::verbs::VerbsAddr(*a);
            serve::<rpcrdma::fabric::verbs::VerbsProvider>(dev, &addr, ep, opts)
        }
    }
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    // A closed stdout must not stop the server; the line is only informational.
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn rate(octets: u64, secs: f64) -> String {
    let v = octets as f64 / secs.max(1e-9);
    if v >= 1e9 {
        format!("{:.2} GB/s", v / 1e9)
    } else if v >= 1e6 {
        format!("{:.2} MB/s", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.2} kB/s", v / 1e3)
    } else {
        format!("{v:.0} B/s")
    }
}

fn serve<P: Provider>(
    dev: P::Device,
    addr: &P::Addr,
    ep: &Endpoint,
    opts: &ServeOpts,
) -> Result<(), CliError> {
    let counters = Arc::new(Counters::default());
    // Build one dispatcher up front so a registration problem is reported before
    // listening; each connection gets its own.
    dispatcher(opts.source_max)?;
    let factory = {
        let counters = counters.clone();
        let source_max = opts.source_max;
        move || {
            dispatcher(source_max).ok().map(|inner| Counted {
                inner,
                counters: counters.clone(),
            })
        }
    };
    let mut server = Server::<P, Counted, _>::bind(dev, addr, opts.conn.clone(), factory)
        .map_err(|e| CliError::Serve(format!("cannot listen on {ep} ({}): {e}", ep.provider())))?;
    server.set_limits(opts.limits);
    say(&format!(
        "rpcrdma serve: listening on {} {ep}; programs NULL {NULL_PROGRAM:#010x} v1, ECHO \
         {ECHO_PROGRAM:#010x} v1 (NULL, ECHO, SINK, SOURCE, ECHO2); inline {} octets, {} \
         credits; Ctrl-C stops",
        ep.provider(),
        opts.conn.inline_recv,
        opts.conn.credits
    ));
    let start = Instant::now();
    let end = opts.duration.map(|d| start + d);
    let mut known: Vec<(ConnId, bool)> = Vec::new();
    let mut last = (start, 0u64, 0u64, 0u64);
    let mut idle = 0u32;
    let reason = loop {
        let now = Instant::now();
        if server.poll(now) == 0 {
            idle = idle.wrapping_add(1);
            if !idle.is_multiple_of(IDLE_YIELD) {
                continue;
            }
            thread::yield_now();
        } else {
            idle = 0;
        }
        // Everything below is bookkeeping, done between bursts of polls.
        let now = Instant::now();
        track(&server, &mut known);
        if now.duration_since(last.0) >= Duration::from_secs(1) {
            let secs = now.duration_since(last.0).as_secs_f64();
            let calls = counters.calls.load(Ordering::Relaxed);
            let rx = counters.bytes_in.load(Ordering::Relaxed);
            let tx = counters.bytes_out.load(Ordering::Relaxed);
            say(&format!(
                "{:>6.1}s  connections {}  calls/s {:.0}  in {}  out {}",
                now.duration_since(start).as_secs_f64(),
                server.connections().len(),
                (calls - last.1) as f64 / secs,
                rate(rx - last.2, secs),
                rate(tx - last.3, secs),
            ));
            last = (now, calls, rx, tx);
        }
        if signal::requested() {
            break "signal";
        }
        if end.is_some_and(|e| now >= e) {
            break "--duration elapsed";
        }
    };
    say(&format!(
        "rpcrdma serve: stopping ({reason}); disconnecting"
    ));
    let ids: Vec<ConnId> = server.connections().iter().map(|c| c.conn_id()).collect();
    for id in ids {
        // A connection already going away refuses the disconnect; that is fine.
        let _ = server.disconnect(id);
    }
    let drain_end = Instant::now() + DRAIN;
    while !server.connections().is_empty() && Instant::now() < drain_end {
        server.poll(Instant::now());
        track(&server, &mut known);
    }
    let left = server.connections().len();
    let cc = server.counters();
    say(&format!(
        "rpcrdma serve: connections: {} accepted, {} refused over --max-connections, {} \
         refused by setup, {} closed at the handshake timeout, {} closed idle",
        cc.accepted, cc.over_limit, cc.refused, cc.handshake_timeouts, cc.idle_closed
    ));
    say(&format!(
        "rpcrdma serve: stopped after {:.1}s: {} calls ({} NULL, {} PROG_UNAVAIL), {} octets \
         in, {} octets out{}",
        start.elapsed().as_secs_f64(),
        counters.calls.load(Ordering::Relaxed),
        counters.nulls.load(Ordering::Relaxed),
        counters.prog_unavail.load(Ordering::Relaxed),
        counters.bytes_in.load(Ordering::Relaxed),
        counters.bytes_out.load(Ordering::Relaxed),
        if left == 0 {
            String::new()
        } else {
            format!("; {left} connection(s) still draining were dropped")
        }
    ));
    Ok(())
}

/// Prints connections that came up or went away since the last look.
fn track<P: Provider, F>(server: &Server<P, Counted, F>, known: &mut Vec<(ConnId, bool)>)
where
    F: FnMut() -> Option<Counted>,
{
    for c in server.connections() {
        let id = c.conn_id();
        let up = c.state() == ConnState::Established;
        match known.iter_mut().find(|(k, _)| *k == id) {
            Some((_, announced)) => {
                if up && !*announced {
                    *announced = true;
                    say(&format!("connection {id} established"));
                }
            }
            None => {
                known.push((id, up));
                if up {
                    say(&format!("connection {id} established"));
                }
            }
        }
    }
    known.retain(|(id, announced)| {
        let live = server.connections().iter().any(|c| c.conn_id() == *id);
        if !live && *announced {
            say(&format!("connection {id} closed"));
        }
        live
    });
}
