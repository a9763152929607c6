//! Instruction counts of a DDP ECHO round trip, for callgrind: the payload goes to the
//! responder in a Read chunk and comes back through a Write chunk, over shm with both
//! ends driven from one thread. It shows what the responder's handler costs per call,
//! which is where the result used to be copied into a fresh registered buffer (now it
//! is written from the pulled Read chunk in place).
//!
//! ```text
//! cargo bench -p rpcrdma-perf --bench echo_ddp_insns --no-run   # prints the binary
//! valgrind --tool=callgrind --toggle-collect='*measured_echo_ddp*' \
//!     --callgrind-out-file=/tmp/ddp.cg target/release/deps/echo_ddp_insns-<hash>
//! callgrind_annotate --inclusive=yes /tmp/ddp.cg | grep -E 'measured|handle_call|memcpy'
//! ```
//!
//! Measured when the zero-copy path landed (32 KiB payload, 300 calls, same bench built
//! at the commit before it): `handle_call` 34,141 -> 1,356 instructions per call, the
//! whole round trip 154,443 -> 121,569 (0.79x); memcpy 132,169 -> 99,428 per call, the
//! 32 KiB copy gone (what remains is the requester filling its argument and shm
//! emulating the RDMA Read and Write).
//!
//! Without valgrind it runs and prints ns per call as a sanity check.

mod support;

use std::hint::black_box;
use std::time::Instant;

use rpcrdma::fabric::shm::ShmProvider;
use rpcrdma::ConnConfig;
use rpcrdma::Pair;
use rpcrdma::{CallRequest, CallStatus};
use rpcrdma_pools::HugePages;
use rpcrdma_ulp::builtin::{echo_proc, EchoData, ECHO_PROGRAM, ECHO_VERSION};
use rpcrdma_ulp::client::{CallPlan, DdpBufs};
use rpcrdma_ulp::ddp::encode_call;
use rpcrdma_ulp::program::Dispatcher;
use rpcrdma_ulp::rpc::{CallHeader, OpaqueAuth};

/// Calls inside the measured function.
const CALLS: u64 = 300;
/// Calls before it (first-touch faults, pool caches).
const WARMUP: u64 = 100;
/// Polls of both ends one call may take before the run is declared broken.
const MAX_POLLS: u32 = 100_000;
/// Payload octets: well above the inline threshold, so it travels in chunks.
const ECHO_LEN: usize = 32 * 1024;

type P = Pair<ShmProvider, Dispatcher>;

fn connect() -> P {
    let cfg = ConnConfig {
        credits: 8,
        large_bufs: 32,
        large_buf_size: 64 * 1024,
        hugepages: HugePages::Never,
        ..ConnConfig::default()
    };
    support::echo_pair("rpcrdma-ddp-insns", &cfg)
}

/// One ECHO with its payload in a Read chunk and a Write chunk for the result.
#[inline(always)]
fn call(p: &mut P, data: &[u8], tag: u64) -> bool {
    let header = CallHeader {
        xid: 0,
        prog: ECHO_PROGRAM,
        vers: ECHO_VERSION,
        procedure: echo_proc::ECHO,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    };
    let (Ok(mut arg), Ok(sink), Ok(mut msg)) = (
        p.requester.alloc_large(),
        p.requester.alloc_large(),
        p.requester.alloc_msg(),
    ) else {
        return false;
    };
    if arg.fill(data).is_err() {
        return false;
    }
    let mut bufs = DdpBufs::new();
    if bufs.push(arg).is_err() {
        return false;
    }
    let Some(a) = bufs.get(0) else {
        return false;
    };
    let args = EchoData { data: a.as_slice() };
    let Ok(encoded) = encode_call(msg.storage_mut(), &header, &args, 1) else {
        return false;
    };
    let Ok(plan) = CallPlan::new(&encoded, &bufs) else {
        return false;
    };
    let Ok(mut req): Result<CallRequest, _> = plan.into_request(msg, bufs, 64) else {
        return false;
    };
    if req.push_write_sink(sink).is_err() || p.requester.submit(req, tag).is_err() {
        return false;
    }
    for _ in 0..MAX_POLLS {
        p.poll(Instant::now());
        if let Some(o) = p.requester.poll_outcome() {
            return o.tag == tag
                && o.status == CallStatus::Success
                && o.write_result(0).is_some_and(|r| r == data);
        }
    }
    false
}

/// The region callgrind counts (`--toggle-collect='*measured_echo_ddp*'`).
#[inline(never)]
fn measured_echo_ddp(p: &mut P, data: &[u8], first: u64, n: u64) -> bool {
    (first..first + n).all(|t| call(p, data, t))
}

#[inline(never)]
fn warm_up(p: &mut P, data: &[u8]) -> bool {
    (0..WARMUP).all(|t| call(p, data, t))
}

fn main() {
    let mut p = connect();
    let data: Vec<u8> = (0..ECHO_LEN).map(|i| (i as u8).wrapping_mul(31)).collect();
    assert!(warm_up(&mut p, &data), "warm-up calls failed");
    let start = Instant::now();
    let ok = measured_echo_ddp(black_box(&mut p), black_box(&data), 1 << 20, CALLS);
    let ns = start.elapsed().as_nanos() as f64 / CALLS as f64;
    assert!(ok, "measured calls failed");
    println!(
        "echo_ddp_insns: {CALLS} ECHO calls of {ECHO_LEN} octets (Read chunk in, Write \
         chunk out) {ns:.0} ns each (one thread)"
    );
}
