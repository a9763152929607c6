//! The whole stack allocates nothing per RPC: application threads calling through the
//! engine's `Client` (mailbox in, tickets out) to a requester task on one poller, over
//! shm, to a responder task on another poller whose service is the ONC RPC
//! `Dispatcher` with the echo program; calls built with the ULP's client helpers
//! (`echo::call`, `encode_call` + `CallPlan`), replies read in place with
//! `OutcomeResults`. Counted by a global allocator over every thread of this binary
//! (its own, so nothing else runs), after a warm-up.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rpcrdma::fabric::shm::{ShmAddr, ShmDevice, ShmProvider};
use rpcrdma::{CallStatus, Client, ConnConfig, ConnMsg, ConnState, FixedVec, Outcome};
use rpcrdma::{Requester, RequesterTask, Responder, ResponderTask};
use rpcrdma_poller::{IdlePolicy, PollerConfig, PollerGroup};
use rpcrdma_pools::HugePages;
use rpcrdma_ulp::builtin::{echo_proc, EchoData, EchoProgram, ECHO_PROGRAM, ECHO_VERSION};
use rpcrdma_ulp::client::{CallPlan, DdpBufs, OutcomeResults};
use rpcrdma_ulp::ddp::{encode_call, XdrCodec};
use rpcrdma_ulp::echo;
use rpcrdma_ulp::program::Dispatcher;
use rpcrdma_ulp::rpc::{CallHeader, OpaqueAuth};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const DEADLINE: Duration = Duration::from_secs(20);

/// The echoed bytes of an outcome, compared in place with `data`.
fn echoed_is(o: &Outcome, data: &[u8]) -> bool {
    if o.status != CallStatus::Success {
        return false;
    }
    let r = OutcomeResults::new(o);
    let Ok((_, mut c)) = r.cursor() else {
        return false;
    };
    matches!(EchoData::decode(&mut c), Ok(e) if e.data == data) && c.finish().is_ok()
}

/// An inline ECHO of `data`.
fn inline_echo(client: &Client, data: &[u8]) -> Outcome {
    let msg = client.alloc_msg().expect("msg");
    let req = echo::call(msg, data).expect("encodes");
    client
        .call(req)
        .expect("submitted")
        .wait_until(Instant::now() + DEADLINE)
        .expect("outcome before the deadline")
}

/// An ECHO of `data` as a DDP argument (a Read chunk) with a write sink for the result.
fn ddp_echo(client: &Client, data: &[u8]) -> Outcome {
    let mut msg = client.alloc_msg().expect("msg");
    let mut arg = client.alloc_large().expect("arg");
    arg.fill(data).expect("fits");
    let mut bufs: DdpBufs = FixedVec::new();
    bufs.push(arg).map_err(|_| "room").expect("room");
    let header = CallHeader {
        xid: 0,
        prog: ECHO_PROGRAM,
        vers: ECHO_VERSION,
        procedure: echo_proc::ECHO,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    };
    let plan = {
        let data = bufs.get(0).map_or(&[][..], |b| b.as_slice());
        let call =
            encode_call(msg.storage_mut(), &header, &EchoData { data }, 1024).expect("encodes");
        CallPlan::new(&call, &bufs).expect("plan")
    };
    let mut req = plan.into_request(msg, bufs, 1024).expect("request");
    req.push_write_sink(client.alloc_large().expect("sink"))
        .map_err(|_| "room")
        .expect("room");
    client
        .call(req)
        .expect("submitted")
        .wait_until(Instant::now() + DEADLINE)
        .expect("outcome before the deadline")
}

#[test]
fn rpcs_through_client_mailbox_and_dispatcher_do_not_allocate() {
    let cfg = ConnConfig {
        credits: 8,
        large_buf_size: 64 * 1024,
        large_bufs: 32,
        hugepages: HugePages::Never,
        ..ConnConfig::default()
    };
    let addr = ShmAddr::abstract_name(format!("rpcrdma-ulp-stack-alloc-{}", std::process::id()));
    let config = PollerConfig {
        idle: IdlePolicy::parking(Duration::from_millis(1)),
        ..PollerConfig::default()
    };
    let group = PollerGroup::<ConnMsg>::start(&[0, 1], config).expect("pollers");
    let server = Responder::<ShmProvider, _, _>::bind(ShmDevice::new(), &addr, cfg.clone(), || {
        let mut d = Dispatcher::new();
        d.register(Box::new(EchoProgram::new())).ok()?;
        Some(d)
    })
    .expect("server");
    group
        .handle(0)
        .expect("poller 0")
        .add_task(Box::new(ResponderTask::new(server).allow_park(true)))
        .map_err(|_| "add server task")
        .expect("added");
    let dev = ShmDevice::new();
    let mut conn = Requester::<ShmProvider>::connect_with(&dev, &addr, &cfg).expect("connect");
    let end = Instant::now() + DEADLINE;
    while conn.state() != ConnState::Established {
        conn.poll(Instant::now());
        assert!(Instant::now() < end, "connected");
        std::thread::yield_now();
    }
    let (task, table) = RequesterTask::new(conn, 32);
    let handle = group.handle(1).expect("poller 1").clone();
    let id = handle
        .add_task(Box::new(task.park_while_busy(true)))
        .map_err(|_| "add requester task")
        .expect("added");
    let client = Client::new(handle, id, table);

    let small: Vec<u8> = (0..200u32).map(|i| i as u8).collect();
    let big: Vec<u8> = (0..20_000u32).map(|i| (i * 7) as u8).collect();
    type Shape = fn(&Client, &[u8]) -> Outcome;
    let shapes: [(&str, Shape, &[u8]); 2] = [
        ("inline ECHO", inline_echo, &small),
        ("ECHO, Read chunk in, Write chunk out", ddp_echo, &big),
    ];
    let mut report = Vec::new();
    for (name, shape, data) in shapes {
        for _ in 0..100 {
            assert!(echoed_is(&shape(&client, data), data), "{name} (warm-up)");
        }
        const N: u64 = 300;
        let mut ok = 0;
        ALLOCS.store(0, Ordering::Relaxed);
        COUNTING.store(true, Ordering::Relaxed);
        for _ in 0..N {
            ok += u64::from(echoed_is(&shape(&client, data), data));
        }
        COUNTING.store(false, Ordering::Relaxed);
        let n = ALLOCS.load(Ordering::Relaxed);
        assert_eq!(ok, N, "{name}: every call echoed its bytes");
        report.push(format!("{name}: {n} allocations in {N} RPCs"));
        assert_eq!(
            n, 0,
            "{name}: {n} heap allocations in {N} steady-state RPCs"
        );
    }
    eprintln!("{}", report.join("; "));

    // The counter is live: an allocation while counting is seen.
    COUNTING.store(true, Ordering::Relaxed);
    drop(std::hint::black_box(vec![0u8; 64]));
    COUNTING.store(false, Ordering::Relaxed);
    assert!(ALLOCS.load(Ordering::Relaxed) >= 1, "the counter counts");

    client.close().expect("close sent");
    group
        .shutdown(Instant::now() + DEADLINE)
        .expect("pollers stop in time");
}
