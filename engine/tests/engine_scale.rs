//! What an idle connection costs a server (issue #13): one `Responder` with the default
//! connection settings in this process, and N clients in a second process (this binary
//! again, `scale_clients_child`), so the resident memory read from `/proc/self/status`
//! is the server's alone.
//!
//! 1. Every client connects and makes one NULL call: the server's growth in resident
//!    memory (VmRSS: heap and shared pages alike) per connection must be at most
//!    [`BUDGET`], measured at once and again after the server released the idle
//!    connections' free buffers.
//! 2. [`BUSY`] clients then work: 300 NULL calls (every posted receive and ring slot
//!    used), long ECHO calls of 200 KiB each way (a Read chunk pulled into a large
//!    buffer, the reply through a Reply chunk from another) and a WRITE-like call with
//!    a 200 KiB DDP argument (into a receive segment by send-based DDP on siw, where a
//!    default server posts them; a Read chunk on shm). Once they are idle again
//!    the server releases their free buffers, and the average growth per connection
//!    must still be within the budget; what a busy-then-idle connection keeps is
//!    printed (the README's table).
//! 3. Every client calls NULL again: all N connections still work.
//!
//! A binary of its own: tests running beside it in one process would move VmRSS. Every
//! wait has a deadline; the child is killed if the test fails.
//!
//! shm runs 1000 clients (the count), siw 200 (each siw connection is a TCP
//! socket served by the device's one driver thread on each side; 1000 take too long in
//! a debug build on two cores).

#[path = "engine_support/mod.rs"]
mod engine_support;

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use engine_support::*;
use rpcrdma::fabric::shm::{ShmAddr, ShmDevice, ShmProvider};
use rpcrdma::fabric::siw::{SiwDevice, SiwProvider};
use rpcrdma::fabric::{Device, Provider};
use rpcrdma::{CallRequest, CallStatus, ConnConfig, ConnState, Requester, Responder};
use rpcrdma::{PollGroup, PollGroupTask, ResponderLimits, Serving};
use rpcrdma_poller::{IdlePolicy, PollerConfig, PollerGroup};
use rpcrdma_pools::HugePages;

/// Most resident memory one idle connection may add to the server.
const BUDGET: u64 = 256 * 1024;
/// Longest the whole exchange with the child may take.
const OVERALL: Duration = Duration::from_secs(120);

const CHILD_PROVIDER: &str = "RPCRDMA_SCALE_CHILD_PROVIDER";
const CHILD_ADDR: &str = "RPCRDMA_SCALE_CHILD_ADDR";
const CHILD_COUNT: &str = "RPCRDMA_SCALE_CHILD_COUNT";
const READY: &str = "RPCRDMA_SCALE_READY";
const DONE: &str = "RPCRDMA_SCALE_DONE";
const BUSY_DONE: &str = "RPCRDMA_SCALE_BUSY_DONE";
/// Clients that work between the measurements.
const BUSY: usize = 20;
/// NULL calls a busy client keeps in flight.
const PIPELINE: usize = 8;
/// Payload of the long ECHO calls.
const LONG: usize = 200 * 1024;
/// Overrides the number of clients (to measure other counts by hand).
const COUNT: &str = "RPCRDMA_SCALE_COUNT";

/// One measurement at a time: two servers in one process would share VmRSS.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// `default` clients, or what [`COUNT`] says.
fn count(default: usize) -> usize {
    std::env::var(COUNT)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The server's settings: the defaults (64 large buffers of 256 KiB, 32 credits, 4 KiB
/// inline), without hugepages: a hugepage arena is resident whole, so a host with
/// hugepages reserved pays at least 2 MiB per pool.
fn server_config() -> ConnConfig {
    ConnConfig {
        hugepages: HugePages::Never,
        ..ConnConfig::default()
    }
}

/// The clients' settings: few credits and buffers (their memory is the child's, not
/// measured), large buffers big enough for the long ECHO calls.
fn client_config() -> ConnConfig {
    ConnConfig {
        credits: PIPELINE as u32,
        large_buf_size: 256 * 1024,
        large_bufs: 1,
        send_bufs: 2 * PIPELINE as u32,
        queue_len: PIPELINE,
        // The fewest fast-registration slots (a call's worth): a thousand clients
        // share one device's key table.
        mr_slots: 1,
        hugepages: HugePages::Never,
        ..ConnConfig::default()
    }
}

/// Raises this process's open-file limit to its hard limit: every connection holds a
/// few descriptors (its CM socket, memfds of its segment and pools, the peer's).
fn raise_nofile() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        r.rlim_cur = r.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
    }
    r.rlim_cur
}

/// A field of `/proc/self/status`, in bytes.
fn status_bytes(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
        * 1024
}

/// Open descriptors and memory mappings of this process.
fn kernel_handles() -> (usize, usize) {
    let fds = std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count();
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    (fds, maps.lines().count())
}

/// Resident memory now: total, anonymous (heap), shared (pools, segments).
fn rss() -> [u64; 3] {
    ["VmRSS", "RssAnon", "RssShmem"].map(status_bytes)
}

fn null_call<P: Provider>(conn: &mut Requester<P>, i: usize) {
    let mut b = conn.alloc_msg().expect("a send buffer");
    write_call(&mut b, PROC_NULL, &[]);
    let o = conn
        .call(CallRequest::new(b, 256), DEADLINE)
        .expect("submits");
    assert_eq!(o.status, CallStatus::Success, "NULL on connection {i}");
}

/// `k` NULL calls, [`PIPELINE`] at a time.
fn null_calls<P: Provider>(conn: &mut Requester<P>, i: usize, k: usize) {
    let end = Instant::now() + DEADLINE;
    let (mut sent, mut done) = (0, 0);
    while done < k {
        assert!(Instant::now() < end, "{done} of {k} NULL calls on {i}");
        while sent < k && sent - done < PIPELINE {
            let mut b = conn.alloc_msg().expect("a send buffer");
            write_call(&mut b, PROC_NULL, &[]);
            let mut req = CallRequest::new(b, 256);
            req.timeout = Some(DEADLINE);
            conn.submit(req, sent as u64).expect("submits");
            sent += 1;
        }
        conn.poll(conn.clock().now());
        while let Some(o) = conn.poll_outcome() {
            assert_eq!(o.status, CallStatus::Success, "NULL on connection {i}");
            done += 1;
        }
    }
}

/// A long ECHO: `LONG` octets out in a Read chunk, back through a Reply chunk.
fn long_echo<P: Provider>(conn: &mut Requester<P>, i: usize, seed: u8) {
    let data = pattern(LONG, seed);
    let mut b = conn.alloc_large().expect("a large buffer");
    write_call(&mut b, PROC_ECHO, &opaque(&data));
    let o = conn
        .call(CallRequest::new(b, LONG as u32 + 1024), DEADLINE)
        .expect("submits");
    assert_eq!(o.status, CallStatus::Success, "ECHO on connection {i}");
    assert!(results(&o) == opaque(&data), "echoed exactly on {i}");
}

/// A WRITE-like call: `LONG` octets as one DDP argument (PROC_SUM_ITEMS). A server that
/// posts DDP segments behind its receives (`ConnConfig::send_ddp`) takes it by
/// send-based DDP into one, whose pages must be given back too once idle; otherwise
/// (the default, shm, a shared receive queue) it goes by Read chunk.
fn write_like<P: Provider>(conn: &mut Requester<P>, i: usize) {
    let data = pattern(LONG, 9);
    let mut b = conn.alloc_msg().expect("a send buffer");
    write_call(&mut b, PROC_SUM_ITEMS, &(LONG as u32).to_be_bytes());
    let mut arg = conn.alloc_large().expect("a large buffer");
    arg.fill(&data).expect("fits");
    let mut req = CallRequest::new(b, 512);
    req.push_ddp_arg(CALL_HDR as u32 + 4, arg).expect("room");
    let o = conn.call(req, DEADLINE).expect("submits");
    assert_eq!(
        o.status,
        CallStatus::Success,
        "WRITE-like on connection {i}"
    );
    assert_eq!(word(results(&o), 4) as usize, LONG, "whole on {i}");
}

/// The next line from the parent.
fn order() -> String {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("stdin");
    line.trim().to_owned()
}

/// [`order`] while the clients keep polling (parked 1 ms between rounds): over siw a
/// reply's Send completes only once the client answers its confirmation Read, which
/// a client blocked on its parent's next order never does, and the server's context
/// (and so its idle release) would wait for it.
fn order_polling<P: Provider>(conns: &mut [Requester<P>]) -> String {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(order());
    });
    loop {
        for (i, c) in conns.iter_mut().enumerate() {
            c.poll(c.clock().now());
            assert!(c.poll_outcome().is_none(), "client {i}: no call was left");
        }
        match rx.recv_timeout(Duration::from_millis(1)) {
            Ok(line) => return line,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the order reader ended"),
        }
    }
}

/// The child's part: `n` clients of `dev`, one NULL call each, then `READY`; on
/// `busy`, the first [`BUSY`] work, then `BUSY_DONE`; on `go`, a NULL call on every
/// one, then `DONE`. Anything else (EOF: the parent gave up) fails.
fn clients<P: Provider>(dev: &P::Device, addr: &P::Addr, n: usize)
where
    P::Device: Device<P = P>,
{
    raise_nofile();
    let start = Instant::now();
    let mut conns = Vec::with_capacity(n);
    for i in 0..n {
        let mut c = Requester::connect(dev, addr)
            .config(client_config())
            .timeout(DEADLINE)
            .open()
            .unwrap_or_else(|e| panic!("client {i} connects: {e}"));
        null_call(&mut c, i);
        conns.push(c);
    }
    eprintln!(
        "scale child: {n} clients connected and called in {:.1?}",
        start.elapsed()
    );
    println!("{READY}");
    assert_eq!(order(), "busy", "the parent says busy");
    let start = Instant::now();
    for (i, c) in conns.iter_mut().take(BUSY).enumerate() {
        null_calls(c, i, 300);
        for seed in 0..4 {
            long_echo(c, i, seed);
        }
        // Last, as the order that showed a reply context held past the deadline when
        // the clients stopped polling (DESIGN.md, "Send-based DDP by default").
        write_like(c, i);
    }
    eprintln!(
        "scale child: {BUSY} clients worked in {:.1?}",
        start.elapsed()
    );
    println!("{BUSY_DONE}");
    assert_eq!(order_polling(&mut conns), "go", "the parent says go");
    for (i, c) in conns.iter_mut().enumerate() {
        assert_eq!(c.state(), ConnState::Established, "client {i} still up");
        null_call(c, i);
    }
    println!("{DONE}");
}

/// In the child process started by [`measure`] (and only there).
#[test]
fn scale_clients_child() {
    let (Ok(provider), Ok(addr), Ok(n)) = (
        std::env::var(CHILD_PROVIDER),
        std::env::var(CHILD_ADDR),
        std::env::var(CHILD_COUNT),
    ) else {
        return;
    };
    let n: usize = n.parse().expect("count");
    match provider.as_str() {
        "shm" => clients::<ShmProvider>(&ShmDevice::new(), &ShmAddr::abstract_name(addr), n),
        "siw" => {
            let addr: SocketAddr = addr.parse().expect("siw address");
            clients::<SiwProvider>(&SiwDevice::new().expect("siw device"), &addr, n)
        }
        other => panic!("unknown provider {other}"),
    }
    std::process::exit(0);
}

/// Kills the child when the test fails before it exits.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Lines of the child's stdout, through a channel (so each wait has a deadline).
fn lines(child: &mut Child) -> mpsc::Receiver<String> {
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

fn wait_for(rx: &mpsc::Receiver<String>, what: &str, end: Instant) {
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.trim() == what => return,
            Ok(_) => {}
            Err(e) => panic!("the child never said {what}: {e}"),
        }
    }
}

/// Serves `n` clients of a child process on `dev` at `addr` (`addr_arg` as the child
/// parses it) and checks the server's resident memory per connection.
fn measure<P>(dev: P::Device, addr: &P::Addr, provider: &str, addr_arg: &str, n: usize)
where
    P: Provider,
    P::Device: Device<P = P>,
    Responder<P, TestService, fn() -> Option<TestService>>: Send + 'static,
{
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let end = Instant::now() + OVERALL;
    let limit = raise_nofile();
    assert!(
        limit >= 8 * n as u64,
        "{n} connections need more descriptors than RLIMIT_NOFILE's hard limit {limit}"
    );
    let factory: fn() -> Option<TestService> = || Some(TestService::default());
    let server = Responder::listen(dev, addr)
        .config(server_config())
        .limits(ResponderLimits {
            max_connections: n + 16,
            ..ResponderLimits::default()
        })
        .serve(factory)
        .expect("server listens");
    let before = rss();
    let handles = kernel_handles();
    let serving: Serving<P, _, _> = server.spawn();

    let mut child = ChildGuard(
        Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", "scale_clients_child", "--nocapture"])
            .env(CHILD_PROVIDER, provider)
            .env(CHILD_ADDR, addr_arg)
            .env(CHILD_COUNT, n.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the clients"),
    );
    let rx = lines(&mut child.0);
    let mut stdin: ChildStdin = child.0.stdin.take().expect("piped stdin");
    wait_for(&rx, READY, end);

    // Every client has connected and been answered once: stop the server to look.
    let server = serving.stop().expect("the server thread ran");
    let conns = server.connections();
    assert_eq!(conns.len(), n, "one server connection per client");
    assert!(conns.iter().all(|c| c.state() == ConnState::Established));
    assert!(conns.iter().all(|c| c.stats().calls == 1), "one call each");
    let fresh = rss();
    report(provider, "idle, one call each", n, before, fresh);
    let now = kernel_handles();
    eprintln!(
        "{provider}: per connection {:.1} descriptors, {:.1} mappings",
        (now.0 - handles.0) as f64 / n as f64,
        (now.1 - handles.1) as f64 / n as f64
    );

    // Idle for DEFAULT_RELEASE_IDLE: the server gives their free buffers' memory back.
    let server = released(server, n as u64, end);
    let idle = rss();
    report(provider, "idle, free buffers released", n, before, idle);

    // Some work, then idle again.
    let serving = server.spawn();
    writeln!(stdin, "busy").expect("tell the child to work");
    wait_for(&rx, BUSY_DONE, end);
    let server = released(
        serving.stop().expect("the server ran"),
        (n + BUSY) as u64,
        end,
    );
    let busy: u64 = server.connections()[..BUSY]
        .iter()
        .map(|c| c.stats().calls)
        .sum();
    assert_eq!(
        busy,
        BUSY as u64 * 306,
        "the busy clients' calls were served"
    );
    // Where the server posts DDP segments (by device, the default: siw, not shm;
    // DESIGN.md "Send-based DDP by default") the WRITE-like arguments landed in receive
    // segments, whose pages the idle release must give back like the rest.
    let placed: u64 = server.connections()[..BUSY]
        .iter()
        .map(|c| c.stats().send_ddp_items)
        .sum();
    let posts = match server_config().send_ddp {
        Some(on) => on,
        None => provider == "siw",
    };
    assert_eq!(placed, if posts { BUSY as u64 } else { 0 }, "{provider}");
    let worked = rss();
    report(provider, "after some worked, released", n, before, worked);
    // What a connection that worked keeps beyond an idle one. Its large buffers alone
    // (a Read sink and a Reply chunk body, 256 KiB each) would be twice the budget had
    // they not been given back.
    let extra = worked[0].saturating_sub(idle[0]) / BUSY as u64;
    let idle_per = idle[0].saturating_sub(before[0]) / n as u64;
    let counters = server.counters();
    eprintln!(
        "{provider}: a connection that worked keeps {:.1} KiB more once idle, {:.1} KiB \
         in all; {} idle releases",
        extra as f64 / 1024.0,
        (idle_per + extra) as f64 / 1024.0,
        counters.idle_releases,
    );
    // Everything a worked connection keeps, idle, within the budget: its large buffers
    // given back by the server, its posted receives by the provider (shm's in the
    // server's poll; siw's driver drops the pages of the receives it has not yet used
    // when the server calls the connection idle, `QueuePair::release_idle_memory`).
    assert!(
        extra <= BUDGET,
        "{provider}: a connection that worked keeps {extra} octets more once idle"
    );
    assert!(
        idle_per + extra <= BUDGET,
        "{provider}: a connection that worked keeps {} octets once idle",
        idle_per + extra
    );

    // Serve again: every connection still works.
    let serving = server.spawn();
    writeln!(stdin, "go").expect("tell the child to go on");
    wait_for(&rx, DONE, end);
    loop {
        if let Some(status) = child.0.try_wait().expect("child status") {
            assert!(status.success(), "the clients exited with {status}");
            break;
        }
        assert!(Instant::now() < end, "the clients did not exit");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Each client checked its second answer; the connections go with the child.
    drop(serving.stop().expect("the server thread ran"));
}

/// Prints the growth from `before` to `after` per connection, and checks it is within
/// [`BUDGET`].
fn report(provider: &str, what: &str, n: usize, before: [u64; 3], after: [u64; 3]) {
    let per = after[0].saturating_sub(before[0]) / n as u64;
    let kib = |b: u64| b as f64 / 1024.0;
    eprintln!(
        "{provider}: {n} connections, {what}: server VmRSS {:.0} -> {:.0} KiB (heap {:.0} -> \
         {:.0}, shared {:.0} -> {:.0}): {:.1} KiB per connection",
        kib(before[0]),
        kib(after[0]),
        kib(before[1]),
        kib(after[1]),
        kib(before[2]),
        kib(after[2]),
        kib(per)
    );
    assert!(
        per <= BUDGET,
        "{provider}, {what}: {:.1} KiB resident per connection, budget {} KiB",
        kib(per),
        BUDGET / 1024
    );
}

/// Runs `server` until it has released idle connections' free buffers `releases`
/// times in all, and returns it stopped.
fn released<P, F>(
    mut server: Responder<P, TestService, F>,
    releases: u64,
    end: Instant,
) -> Responder<P, TestService, F>
where
    P: Provider,
    F: FnMut() -> Option<TestService>,
    Responder<P, TestService, F>: Send + 'static,
{
    while server.counters().idle_releases < releases {
        if Instant::now() >= end {
            // Which connections hold a call, and what they did.
            for (i, c) in server.connections().iter().enumerate() {
                if c.active() > 0 {
                    eprintln!("connection {i}: {} active, {:?}", c.active(), c.stats());
                }
            }
        }
        assert!(
            Instant::now() < end,
            "idle connections were not released ({} of {releases})",
            server.counters().idle_releases
        );
        let serving = server.spawn();
        std::thread::sleep(Duration::from_millis(100));
        server = serving.stop().expect("the server thread ran");
    }
    // A connection that paused for the idle interval mid-work (a loaded machine) was
    // released twice, so the count can be reached before the last one's release: serve
    // on until none is left to come.
    let serving = server.spawn();
    std::thread::sleep(2 * rpcrdma::DEFAULT_RELEASE_IDLE);
    serving.stop().expect("the server thread ran")
}

#[test]
fn shm_a_thousand_idle_connections_cost_at_most_256_kib_each() {
    let name = format!("rpcrdma-scale-{}-{}", std::process::id(), unique());
    let addr = ShmAddr::abstract_name(name.clone());
    measure::<ShmProvider>(ShmDevice::new(), &addr, "shm", &name, count(1000));
}

#[test]
fn siw_idle_connections_cost_at_most_256_kib_each() {
    let net = SiwNet {
        confirm_completions: true,
    };
    let addr = net.addr();
    measure::<SiwProvider>(net.device(), &addr, "siw", &addr.to_string(), count(200));
}

/// One poll group with its shared receive queue (the default of `rpcrdma serve
/// --cores`) serving `n` clients of the child: what a connection costs when its
/// receives come from the group's queue and pool. On siw, whose driver places into
/// posted receives outside our polls, a connection no longer keeps 32 posted receives
/// of its own once written (128 KiB); the group's queue holds its share instead.
fn measure_group<P>(dev: P::Device, addr: &P::Addr, provider: &str, addr_arg: &str, n: usize)
where
    P: Provider,
    P::Device: Device<P = P>,
    PollGroup<P, TestService, fn() -> Option<TestService>>: Send,
{
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let end = Instant::now() + OVERALL;
    raise_nofile();
    let factory: fn() -> Option<TestService> = || Some(TestService::default());
    let mut groups = PollGroup::<P, TestService, _>::bind(
        dev,
        addr,
        server_config(),
        factory,
        1,
        ResponderLimits {
            max_connections: n + 16,
            ..ResponderLimits::default()
        },
    )
    .expect("the group listens");
    let group = groups.pop().expect("one group");
    let (depth, posted) = group.shared_receives().expect("a shared receive queue");
    assert_eq!(posted, depth);
    let counters = group.counters().clone();
    let before = rss();
    let pollers = PollerGroup::<()>::start(
        &[0],
        PollerConfig {
            idle: IdlePolicy::parking(Duration::from_millis(1)),
            ..PollerConfig::default()
        },
    )
    .expect("poller");
    pollers
        .add_task(0, Box::new(PollGroupTask::new(group).allow_park(true)))
        .map_err(|_| "add the group")
        .expect("added");
    let mut child = ChildGuard(
        Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", "scale_clients_child", "--nocapture"])
            .env(CHILD_PROVIDER, provider)
            .env(CHILD_ADDR, addr_arg)
            .env(CHILD_COUNT, n.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the clients"),
    );
    let rx = lines(&mut child.0);
    let mut stdin: ChildStdin = child.0.stdin.take().expect("piped stdin");
    wait_for(&rx, READY, end);
    let wait = |what: &str, ok: &dyn Fn(&rpcrdma::GroupSample) -> bool| loop {
        let s = counters.sample();
        if ok(&s) {
            return s;
        }
        assert!(Instant::now() < end, "{what}: {s:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let s = wait(
        "every connection on the shared queue, idle and released",
        &|s| s.srq_connections == n as u64 && s.idle_releases >= n as u64,
    );
    assert!(s.receive_share >= 1);
    let idle = rss();
    report(
        provider,
        "group + shared queue, idle, released",
        n,
        before,
        idle,
    );
    writeln!(stdin, "busy").expect("tell the child to work");
    wait_for(&rx, BUSY_DONE, end);
    // Released again: at least once each, and quiet since. (A busy connection that
    // paused for the idle interval mid-work, as under a loaded machine, is released
    // twice, so the count alone can be reached before the last busy one's release.)
    let mut last = (counters.sample(), Instant::now());
    loop {
        std::thread::sleep(Duration::from_millis(50));
        let s = counters.sample();
        if (s.completions, s.idle_releases) != (last.0.completions, last.0.idle_releases) {
            last = (s, Instant::now());
        } else if s.idle_releases >= (n + BUSY) as u64
            && last.1.elapsed() >= 2 * rpcrdma::DEFAULT_RELEASE_IDLE
        {
            break;
        }
        assert!(Instant::now() < end, "the busy ones released again: {s:?}");
    }
    let worked = rss();
    report(
        provider,
        "group + shared queue, after some worked, released",
        n,
        before,
        worked,
    );
    // The shared queue's buffers are the group's: once Sends have cycled through its
    // posted receives (taken oldest first), siw has written every one, so the queue
    // holds at most its depth in receive buffers resident, whoever sent. That part is
    // the group's, shared by all; the rest of the growth is the busy connections' own.
    let queue = u64::from(depth) * u64::from(server_config().inline_recv);
    let grown = worked[0].saturating_sub(idle[0]);
    let extra = grown.saturating_sub(queue) / BUSY as u64;
    let idle_per = idle[0].saturating_sub(before[0]) / n as u64;
    eprintln!(
        "{provider} group: shared queue of {depth} ({:.0} KiB of receive buffers at most, \
         {:.1} KiB per connection), share {} credits; a connection that worked keeps \
         {:.1} KiB more of its own once idle: {:.1} KiB in all, {:.1} KiB with its part \
         of the queue",
        queue as f64 / 1024.0,
        (queue / n as u64) as f64 / 1024.0,
        counters.sample().receive_share,
        extra as f64 / 1024.0,
        (idle_per + extra) as f64 / 1024.0,
        (idle_per + extra + queue / n as u64) as f64 / 1024.0,
    );
    assert!(
        extra <= BUDGET,
        "{provider} group: a connection that worked keeps {extra} octets more once idle"
    );
    writeln!(stdin, "go").expect("tell the child to go on");
    wait_for(&rx, DONE, end);
    loop {
        if let Some(status) = child.0.try_wait().expect("child status") {
            assert!(status.success(), "the clients exited with {status}");
            break;
        }
        assert!(Instant::now() < end, "the clients did not exit");
        std::thread::sleep(Duration::from_millis(5));
    }
    pollers
        .shutdown(Instant::now() + DEADLINE)
        .expect("the poller stops");
}

#[test]
fn siw_group_with_a_shared_queue_costs_at_most_256_kib_a_connection() {
    let net = SiwNet {
        confirm_completions: true,
    };
    let addr = net.addr();
    measure_group::<SiwProvider>(net.device(), &addr, "siw", &addr.to_string(), count(200));
}
