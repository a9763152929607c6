//! Instruction counts of the RPC engine's hot path, for callgrind: inline NULL and
//! ECHO-64 round trips over shm, requester and responder driven from one thread.
//!
//! A [`Pair`] serves the built-in programs (as `rpcrdma serve` does) through the ULP
//! `Dispatcher`. After a warm-up, `measured_null` makes `CALLS` NULL calls and
//! `measured_echo` `CALLS` inline ECHO calls of 64 octets, one at a time; each call is
//! built, submitted, and both ends are polled (the clock read once per turn of the
//! loop, as a driver would: the submit and the first poll share one read) until its outcome arrives. Waits are bounded by poll counts, never by
//! time, so the counted code is deterministic.
//!
//! ```text
//! cargo bench -p rpcrdma-perf --bench engine_rpc_insns --no-run   # prints the binary
//! valgrind --tool=callgrind --toggle-collect='*measured_null*' \
//!     --toggle-collect='*measured_echo*' \
//!     --callgrind-out-file=/tmp/rpc.cg target/release/deps/engine_rpc_insns-<hash>
//! callgrind_annotate --inclusive=yes /tmp/rpc.cg | grep measured   # Ir / CALLS each
//! callgrind_annotate /tmp/rpc.cg | head -40                        # top functions
//! ```
//!
//! Without valgrind it runs and prints ns per call as a sanity check.
//! `RPCRDMA_SIGNAL_EVERY=n` sets `ConnConfig::signal_every` on both ends (selective
//! signaling of the calls' Sends; unset, the default).

mod support;

use std::hint::black_box;
use std::time::Instant;

use rpcrdma::fabric::shm::ShmProvider;
use rpcrdma::ConnConfig;
use rpcrdma::Pair;
use rpcrdma::{CallStatus, Outcome};
use rpcrdma_pools::HugePages;
use rpcrdma_ulp::builtin::{echo_proc, EchoData, ECHO_PROGRAM, ECHO_VERSION};
use rpcrdma_ulp::client::{inline_call, OutcomeResults};
use rpcrdma_ulp::ddp::{Void, XdrCodec};
use rpcrdma_ulp::program::Dispatcher;
use rpcrdma_ulp::rpc::{CallHeader, OpaqueAuth};

/// Calls of each kind inside the measured functions.
const CALLS: u64 = 2_000;
/// ECHO calls inside the depth-32 rate region (`measured_rate`).
const RATE_CALLS: u64 = 20_000;
/// Calls in flight in that region: the `rpcrdma-perf rate --depth 32` row's.
const RATE_DEPTH: usize = 32;
/// Calls of each kind before them (first-touch faults, pool caches, lazy mappings).
const WARMUP: u64 = 500;
/// Polls of both ends one call may take before the run is declared broken.
const MAX_POLLS: u32 = 10_000;
const ECHO_LEN: usize = 64;

type P = Pair<ShmProvider, Dispatcher>;

fn header(procedure: u32) -> CallHeader<'static> {
    CallHeader {
        xid: 0,
        prog: ECHO_PROGRAM,
        vers: ECHO_VERSION,
        procedure,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    }
}

/// `ConnConfig::signal_every` for both ends: the default, or `RPCRDMA_SIGNAL_EVERY`
/// when set (to compare selective signaling's intervals under callgrind).
fn signal_every() -> u32 {
    std::env::var("RPCRDMA_SIGNAL_EVERY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(ConnConfig::default().signal_every)
}

fn connect() -> P {
    let cfg = ConnConfig {
        credits: 32,
        large_bufs: 16,
        hugepages: HugePages::Never,
        signal_every: signal_every(),
        ..ConnConfig::default()
    };
    support::echo_pair("rpcrdma-rpc-insns", &cfg)
}

/// One call: built (its message buffer from the connection's cache), submitted, both
/// ends polled until its outcome arrives; true when it is this call's and a success and
/// `check` accepts it. The outcome is inspected where it lands and its buffers go back
/// to the connection's caches (`Requester::poll_outcome_with`), as a driver loop would.
#[inline(always)]
fn call<'d, A: XdrCodec<'d>>(
    p: &mut P,
    proc_: u32,
    args: &A,
    tag: u64,
    check: impl Fn(&Outcome) -> bool,
) -> bool {
    // One clock read per turn of the loop, as a driver's: the call is submitted at the
    // time the turn's poll gets.
    let mut now = Instant::now();
    let Ok(msg) = p.requester.take_msg() else {
        return false;
    };
    let Ok(req) = inline_call(msg, &header(proc_), args, 256) else {
        return false;
    };
    if p.requester.submit_at(req, tag, now).is_err() {
        return false;
    }
    for i in 0..MAX_POLLS {
        if i > 0 {
            now = Instant::now();
        }
        p.poll(now);
        // Read where it lies, its buffers back to the connection's caches after, as a
        // driver loop does.
        if let Some(ok) = p
            .requester
            .poll_outcome_with(|o| o.tag == tag && o.status == CallStatus::Success && check(&*o))
        {
            return ok;
        }
    }
    false
}

/// The NULL region callgrind counts (`--toggle-collect='*measured_null*'`).
#[inline(never)]
fn measured_null(p: &mut P, first: u64, n: u64) -> bool {
    (first..first + n).all(|t| call(p, echo_proc::NULL, &Void, t, |_| true))
}

/// The ECHO region callgrind counts (`--toggle-collect='*measured_echo*'`).
#[inline(never)]
fn measured_echo(p: &mut P, data: &[u8], first: u64, n: u64) -> bool {
    (first..first + n).all(|t| call(p, echo_proc::ECHO, &EchoData { data }, t, |_| true))
}

/// The configuration `rpcrdma-perf rate --size 64 --depth 32` gives both ends (its
/// `conn_config`: credits one above the depth, four large buffers per call in flight
/// and eight spare), pages never huge so the count does not depend on the host.
fn rate_config() -> ConnConfig {
    let credits = RATE_DEPTH as u32 + 1;
    ConnConfig {
        credits,
        large_buf_size: 64 << 10,
        large_bufs: 4 * credits + 8,
        hugepages: HugePages::Never,
        signal_every: signal_every(),
        ..ConnConfig::default()
    }
}

/// Calls in flight, carried from the warm-up into the measured region so that it runs
/// in steady state (`RATE_DEPTH` in flight when it starts and when it ends).
struct InFlight {
    calls: usize,
    next_tag: u64,
}

/// One turn of the rate loop, as `rpcrdma-perf rate`'s measuring thread makes it with
/// the server's poll beside it: one clock read; ECHO calls built and submitted until
/// `RATE_DEPTH` are in flight (while `refill`); both ends polled; every outcome read
/// where it lies (a failed call fails the run) and its buffers given back. Returns the
/// calls that finished, None on a failure.
#[inline(always)]
fn rate_turn(p: &mut P, data: &[u8], st: &mut InFlight, refill: bool) -> Option<u64> {
    let now = Instant::now();
    while refill && st.calls < RATE_DEPTH {
        let msg = p.requester.take_msg().ok()?;
        let req = inline_call(msg, &header(echo_proc::ECHO), &EchoData { data }, 256).ok()?;
        p.requester.submit_at(req, st.next_tag, now).ok()?;
        st.next_tag += 1;
        st.calls += 1;
    }
    p.poll(now);
    let mut done = 0;
    while let Some(ok) = p
        .requester
        .poll_outcome_with(|o| o.status == CallStatus::Success)
    {
        if !ok {
            return None;
        }
        done += 1;
    }
    st.calls = st.calls.checked_sub(done as usize)?;
    Some(done)
}

/// Rate turns until `n` calls finished; false on a failure or `MAX_POLLS` turns in a
/// row with none.
#[inline(always)]
fn rate_until(p: &mut P, data: &[u8], st: &mut InFlight, n: u64, refill: bool) -> bool {
    let (mut done, mut idle) = (0, 0);
    while done < n {
        let Some(got) = rate_turn(p, data, st, refill) else {
            return false;
        };
        done += got;
        idle = if got == 0 { idle + 1 } else { 0 };
        if idle == MAX_POLLS {
            return false;
        }
    }
    true
}

/// The depth-32 rate region (`--toggle-collect='*measured_rate*'`): `n` inline ECHO
/// calls of 64 octets finished with `RATE_DEPTH` in flight throughout.
#[inline(never)]
fn measured_rate(p: &mut P, data: &[u8], st: &mut InFlight, n: u64) -> bool {
    rate_until(p, data, st, n, true)
}

/// Warm-up of the rate region through a separate copy of the loop: one checked call
/// (the echo comes back intact), then `WARMUP` calls; leaves `RATE_DEPTH` in flight.
#[inline(never)]
fn warm_up_rate(p: &mut P, data: &[u8], st: &mut InFlight) -> bool {
    call(p, echo_proc::ECHO, &EchoData { data }, 0, |o| {
        echoed(o, data)
    }) && rate_until(p, data, st, WARMUP, true)
}

/// Warm-up through separate copies of the loops, so callgrind's toggles see only the
/// measured calls.
#[inline(never)]
fn warm_up(p: &mut P, data: &[u8]) -> bool {
    (0..WARMUP).all(|t| call(p, echo_proc::NULL, &Void, t, |_| true))
        && (0..WARMUP).all(|t| {
            call(p, echo_proc::ECHO, &EchoData { data }, t, |o| {
                echoed(o, data)
            })
        })
}

/// Whether an ECHO outcome carries `data` back.
fn echoed(o: &Outcome, data: &[u8]) -> bool {
    let r = OutcomeResults::new(o);
    let Ok((_, mut cur)) = r.cursor() else {
        return false;
    };
    EchoData::decode(&mut cur).is_ok_and(|d| d.data == data)
}

fn main() {
    let mut p = connect();
    let data: Vec<u8> = (0..ECHO_LEN as u8).map(|i| i.wrapping_mul(31)).collect();
    assert!(warm_up(&mut p, &data), "warm-up calls failed");
    let start = Instant::now();
    let ok = measured_null(black_box(&mut p), 1 << 20, CALLS);
    let null_ns = start.elapsed().as_nanos() as f64 / CALLS as f64;
    assert!(ok, "measured NULL calls failed");
    let start = Instant::now();
    let ok = measured_echo(black_box(&mut p), black_box(&data), 2 << 20, CALLS);
    let echo_ns = start.elapsed().as_nanos() as f64 / CALLS as f64;
    assert!(ok, "measured ECHO calls failed");
    drop(p);
    let mut p = support::echo_pair("rpcrdma-rate-insns", &rate_config());
    let mut st = InFlight {
        calls: 0,
        next_tag: 1,
    };
    assert!(warm_up_rate(&mut p, &data, &mut st), "rate warm-up failed");
    let start = Instant::now();
    let ok = measured_rate(black_box(&mut p), black_box(&data), &mut st, RATE_CALLS);
    let rate_ns = start.elapsed().as_nanos() as f64 / RATE_CALLS as f64;
    assert!(ok, "measured rate calls failed");
    let left = st.calls as u64;
    assert!(
        rate_until(&mut p, &data, &mut st, left, false),
        "draining the rate calls failed"
    );
    println!(
        "engine_rpc_insns: {CALLS} NULL calls {null_ns:.0} ns each, {CALLS} ECHO-{ECHO_LEN} \
         calls {echo_ns:.0} ns each, {RATE_CALLS} ECHO-{ECHO_LEN} calls at depth \
         {RATE_DEPTH} {rate_ns:.0} ns each (one thread)"
    );
}
