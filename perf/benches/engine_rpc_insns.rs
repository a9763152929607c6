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

fn connect() -> P {
    let cfg = ConnConfig {
        credits: 32,
        large_bufs: 16,
        hugepages: HugePages::Never,
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
    println!(
        "engine_rpc_insns: {CALLS} NULL calls {null_ns:.0} ns each, {CALLS} ECHO-{ECHO_LEN} \
         calls {echo_ns:.0} ns each (one thread)"
    );
}
