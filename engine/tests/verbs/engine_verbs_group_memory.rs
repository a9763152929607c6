//! What an idle connection costs a server on a kernel verbs device (issue #13), whose
//! registrations pin their pages: two poll groups ([`GROUPS`]) with the default
//! connection settings and group options (pools per group: `conn/group_pools.rs`, no
//! shared receive queue) in this process, and N
//! clients in a second process (this binary again, `clients_child`), so the resident
//! memory read from `/proc/self/status` is the server's alone.
//!
//! 1. Every client connects and makes one NULL call: the server's growth in VmRSS per
//!    connection must be at most [`BUDGET`]; VmPin (pages the kernel pinned for
//!    registrations, counted once per registration) is printed beside it.
//! 2. [`BUSY`] clients then work on the same connections: NULL calls, and 1 MiB calls
//!    (four DDP Read chunks of 256 KiB, pulled into the group's large buffers, checked
//!    by their sums). Once idle the growth per connection must still be within the
//!    budget.
//! 3. Every client calls NULL again: all N connections still work.
//!
//! The lab runs it on rxe0 and siw0 (`tools/lab/verbs.sh`, module
//! `engine_verbs_group_memory`); `RPCRDMA_GROUP_MEMORY_COUNT` overrides the 200 clients.

use crate::engine_support::*;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use rpcrdma::fabric::verbs::{VerbsAddr, VerbsProvider};
use rpcrdma::fabric::{Provider, QueuePair};
use rpcrdma::{CallRequest, CallStatus, ConnConfig, ConnState, Requester};
use rpcrdma::{GroupOptions, PollGroup, ResponderLimits};
use rpcrdma_pools::HugePages;

/// Most resident memory one idle connection may add to the server.
const BUDGET: u64 = 256 * 1024;
/// Longest the whole exchange with the child may take (TCG is slow).
const OVERALL: Duration = Duration::from_secs(300);
/// Clients by default (the brief's "at least 200").
const CLIENTS: usize = 200;
/// Poll groups (cores) of the server: a group's one completion queue reserves every
/// connection's send and receive depth (296 with the defaults), and rxe's largest queue
/// (32767 entries) holds 110 connections, so 200 take two groups, each with its pools.
const GROUPS: usize = 2;
/// Clients that work between the measurements.
const BUSY: usize = 10;
/// DDP items of a 1 MiB call, each one large buffer of 256 KiB.
const ITEMS: usize = 4;
const ITEM: usize = 256 * 1024;

const CHILD_ADDR: &str = "RPCRDMA_GROUP_MEMORY_CHILD_ADDR";
const CHILD_COUNT: &str = "RPCRDMA_GROUP_MEMORY_CHILD_COUNT";
const COUNT: &str = "RPCRDMA_GROUP_MEMORY_COUNT";
const READY: &str = "GROUP_MEMORY_READY";
const BUSY_DONE: &str = "GROUP_MEMORY_BUSY_DONE";
const DONE: &str = "GROUP_MEMORY_DONE";
/// The child's line when a call failed: what follows says which.
const STUCK: &str = "GROUP_MEMORY_STUCK";

type Factory = fn() -> Option<TestService>;

/// The server's settings: the defaults (64 large buffers of 256 KiB, 32 credits, 4 KiB
/// inline) without hugepages.
fn server_config() -> ConnConfig {
    ConnConfig {
        hugepages: HugePages::Never,
        ..ConnConfig::default()
    }
}

/// The clients' settings: few credits and buffers (their memory is the child's, and
/// pinned: the guest has 2 GiB), large buffers of 256 KiB for the [`BUSY`] ones only.
fn client_config(busy: bool) -> ConnConfig {
    ConnConfig {
        credits: 4,
        large_buf_size: if busy { ITEM as u32 } else { 16 * 1024 },
        large_bufs: if busy { ITEMS as u32 } else { 1 },
        send_bufs: 8,
        queue_len: 4,
        mr_slots: ITEMS as u32,
        hugepages: HugePages::Never,
        ..ConnConfig::default()
    }
}

/// A line for the lab's log whether the test passes or fails: written to stderr
/// directly, past libtest's capture of `println!`/`eprintln!` (which shows a passing
/// test's output to nobody).
macro_rules! report {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

fn raise_limits() {
    for res in [libc::RLIMIT_NOFILE, libc::RLIMIT_MEMLOCK] {
        let mut r = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
        unsafe {
            assert_eq!(libc::getrlimit(res, &mut r), 0);
            r.rlim_cur = r.rlim_max;
            assert_eq!(libc::setrlimit(res, &r), 0);
        }
    }
}

/// A field of `/proc/self/status` in bytes (0 when the kernel has no such field).
fn status_bytes(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").expect("read /proc/self/status");
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// What may bound a process's verbs objects, for a failure's message: its locked-memory
/// limit, mappings and open files.
fn process_limits() -> String {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let memlock = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .map(|l| l.split_whitespace().skip(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default();
    let maps = std::fs::read_to_string("/proc/self/maps").map_or(0, |m| m.lines().count());
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    let max_maps = std::fs::read_to_string("/proc/sys/vm/max_map_count").unwrap_or_default();
    format!(
        "memlock limit {memlock}, {maps} mappings (max {}), {fds} open files",
        max_maps.trim()
    )
}

/// A field of `/proc/meminfo` in bytes (the whole guest: server, clients, kernel).
fn meminfo_bytes(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/meminfo").expect("read /proc/meminfo");
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// VmRSS, VmPin of this process; Slab and memory in use of the guest (MemTotal less
/// MemAvailable: the clients' process and the kernel too).
fn sample() -> [u64; 4] {
    [
        status_bytes("VmRSS"),
        status_bytes("VmPin"),
        meminfo_bytes("Slab"),
        meminfo_bytes("MemTotal").saturating_sub(meminfo_bytes("MemAvailable")),
    ]
}

/// Resident octets of this process by mapping name (`/proc/self/smaps`: the path, or
/// `[heap]`, or `anon` for nameless mappings).
fn rss_by_mapping() -> std::collections::HashMap<String, u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
    let mut by = std::collections::HashMap::new();
    let mut name = String::from("anon");
    for line in smaps.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            // A mapping's header: range, perms, offset, dev, inode, [path].
            name = words.nth(4).unwrap_or("anon").to_owned();
        } else if first == "Rss:" {
            let kib: u64 = words.next().and_then(|v| v.parse().ok()).unwrap_or(0);
            *by.entry(name.clone()).or_insert(0) += kib * 1024;
        }
    }
    by
}

/// Prints the mappings whose resident memory grew most from `before`, per connection.
fn print_growth(dev: &str, n: usize, before: &std::collections::HashMap<String, u64>) {
    let after = rss_by_mapping();
    let mut grew: Vec<(i64, &String)> = after
        .iter()
        .map(|(k, v)| (*v as i64 - *before.get(k).unwrap_or(&0) as i64, k))
        .collect();
    grew.sort_by_key(|g| std::cmp::Reverse(g.0));
    for (d, k) in grew.iter().take(6) {
        report!(
            "{dev}: VmRSS growth in {k}: {:.1} KiB per connection",
            *d as f64 / n as f64 / 1024.0
        );
        report!(
            "LAB_METRIC verbs_group_memory_map dev={dev} map={k} kib_per_conn={:.1}",
            *d as f64 / n as f64 / 1024.0
        );
    }
}

fn null_call<P: Provider>(conn: &mut Requester<P>, i: usize) {
    let mut b = conn.alloc_msg().expect("a send buffer");
    write_call(&mut b, PROC_NULL, &[]);
    let o = conn
        .call(CallRequest::new(b, 256), DEADLINE)
        .expect("submits");
    if o.status != CallStatus::Success {
        // The parent looks at its server while this connection is still up (once the
        // process ends, its connections are gone), then ends this process.
        println!(
            "{STUCK} NULL on connection {i}: {:?}; the client: {:?}, {:?}",
            o.status,
            conn.state(),
            conn.stats()
        );
        let _ = order();
    }
    assert_eq!(o.status, CallStatus::Success, "NULL on connection {i}");
}

/// A 1 MiB call: [`ITEMS`] DDP Read chunks of [`ITEM`] octets; the reply's sums say
/// every octet arrived.
fn mib_call<P: Provider>(conn: &mut Requester<P>, i: usize, seed: u8) {
    let mut args = Vec::new();
    for _ in 0..ITEMS {
        args.extend_from_slice(&(ITEM as u32).to_be_bytes());
    }
    let mut b = conn.alloc_msg().expect("a send buffer");
    write_call(&mut b, PROC_SUM_ITEMS, &args);
    let mut req = CallRequest::new(b, 512);
    let mut position = CALL_HDR as u32;
    let datas: Vec<Vec<u8>> = (0..ITEMS)
        .map(|k| pattern(ITEM, seed.wrapping_add(k as u8)))
        .collect();
    for d in &datas {
        position += 4;
        let mut item = conn.alloc_large().expect("a large buffer");
        item.fill(d).expect("fits");
        req.push_ddp_arg(position, item).expect("room");
        position += d.len().next_multiple_of(4) as u32;
    }
    let o = conn.call(req, DEADLINE).expect("submits");
    assert_eq!(
        o.status,
        CallStatus::Success,
        "1 MiB call on connection {i}"
    );
    let res = results(&o);
    assert_eq!(word(res, 0) as usize, ITEMS);
    for (k, d) in datas.iter().enumerate() {
        let sum = d
            .iter()
            .fold(0u32, |a, &b| a.wrapping_mul(31).wrapping_add(u32::from(b)));
        assert_eq!(word(res, 4 + 8 * k) as usize, ITEM, "item {k} on {i}");
        assert_eq!(word(res, 8 + 8 * k), sum, "item {k} on {i} arrived intact");
    }
}

fn order() -> String {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("stdin");
    line.trim().to_owned()
}

/// In the child process started by the test (and only there): `n` clients, one NULL
/// each, `READY`; on `busy` the first [`BUSY`] work, `BUSY_DONE`; on `go` a NULL on
/// every one, `DONE`.
#[test]
fn clients_child() {
    let (Ok(addr), Ok(n)) = (std::env::var(CHILD_ADDR), std::env::var(CHILD_COUNT)) else {
        return;
    };
    raise_limits();
    let n: usize = n.parse().expect("count");
    let addr = VerbsAddr(addr.parse().expect("address"));
    let net = VerbsNet::from_env();
    let dev = net.device();
    let start = Instant::now();
    let mut conns = Vec::with_capacity(n);
    for i in 0..n {
        let mut c = Requester::connect(&dev, &addr)
            .config(client_config(i < BUSY))
            .timeout(DEADLINE)
            .open()
            .unwrap_or_else(|e| {
                panic!(
                    "client {i} connects: {e} (guest MemAvailable {} KiB, client VmPin {} \
                     KiB, VmLck {} KiB; {})",
                    meminfo_bytes("MemAvailable") / 1024,
                    status_bytes("VmPin") / 1024,
                    status_bytes("VmLck") / 1024,
                    process_limits()
                )
            });
        null_call(&mut c, i);
        conns.push(c);
    }
    eprintln!("group memory child: {n} clients in {:.1?}", start.elapsed());
    println!("{READY}");
    assert_eq!(order(), "busy");
    for (i, c) in conns.iter_mut().take(BUSY).enumerate() {
        for _ in 0..20 {
            null_call(c, i);
        }
        for seed in 0..2 {
            mib_call(c, i, seed);
        }
    }
    println!("{BUSY_DONE}");
    assert_eq!(order(), "go");
    for (i, c) in conns.iter_mut().enumerate() {
        assert_eq!(c.state(), ConnState::Established, "client {i} still up");
        null_call(c, i);
    }
    println!("{DONE}");
    std::process::exit(0);
}

struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for(rx: &mpsc::Receiver<String>, what: &str, end: Instant) {
    if let Err(e) = try_wait_for(rx, what, end) {
        panic!("the child never said {what}: {e}");
    }
}

/// Waits for the child's line `what`; the child's failure (its [`STUCK`] line, or its
/// end) as an error.
fn try_wait_for(rx: &mpsc::Receiver<String>, what: &str, end: Instant) -> Result<(), String> {
    loop {
        match rx.recv_timeout(end.saturating_duration_since(Instant::now())) {
            Ok(line) if line.trim() == what => return Ok(()),
            Ok(line) if line.starts_with(STUCK) => return Err(line),
            Ok(_) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Prints the growth per connection and checks VmRSS's against [`BUDGET`].
fn report(dev: &str, what: &str, n: usize, before: [u64; 4], after: [u64; 4]) -> u64 {
    let per = |k: usize| after[k].saturating_sub(before[k]) as f64 / n as f64 / 1024.0;
    let rss = after[0].saturating_sub(before[0]) / n as u64;
    report!(
        "{dev}: {n} connections, {what}: server VmRSS {} -> {} KiB ({:.1} KiB per \
         connection), VmPin {} -> {} KiB ({:.1} KiB per connection), guest Slab {:.1} KiB \
         and memory in use {:.1} KiB per connection (clients and kernel included)",
        before[0] / 1024,
        after[0] / 1024,
        per(0),
        before[1] / 1024,
        after[1] / 1024,
        per(1),
        per(2),
        per(3)
    );
    report!(
        "LAB_METRIC verbs_group_memory dev={dev} phase={} conns={n} rss_kib_per_conn={:.1} \
         vmpin_kib_per_conn={:.1} slab_kib_per_conn={:.1} guest_used_kib_per_conn={:.1}",
        what.replace(' ', "_"),
        per(0),
        per(1),
        per(2),
        per(3)
    );
    assert!(
        rss <= BUDGET,
        "{dev}, {what}: {:.1} KiB resident per connection, budget {} KiB",
        per(0),
        BUDGET / 1024
    );
    rss
}

#[test]
fn two_hundred_idle_connections_cost_at_most_256_kib_each() {
    let net = VerbsNet::from_env();
    raise_limits();
    let n = std::env::var(COUNT)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CLIENTS);
    let end = Instant::now() + OVERALL;
    let start = sample();
    let addr = net.addr();
    let factory: Factory = || Some(TestService::default());
    let groups = PollGroup::<VerbsProvider, TestService, Factory>::bind_with(
        net.device(),
        &addr,
        server_config(),
        factory,
        GROUPS,
        ResponderLimits {
            max_connections: n + 16,
            ..ResponderLimits::default()
        },
        // The defaults: shared receives asked for. Kernel rxe and siw check a shared
        // receive queue's buffers against the domain of the queue pair a Send arrived
        // on, not the queue's own, so with a domain per connection the group has none
        // (`DeviceCaps::srq_checks_qp_domain`, checked below) and each connection posts
        // its receives, from the group's receive pool, sized for every connection the
        // group may hold (DESIGN.md, "Pools per poll group").
        GroupOptions::default(),
    )
    .expect("group listens");
    let group = Arc::new(Mutex::new(groups));
    let before = sample();
    let maps_before = rss_by_mapping();
    let fixed = before;
    report!(
        "{}: the group itself (queues, pools pinned once): VmRSS {} -> {} KiB, VmPin {} -> {} KiB",
        net.dev,
        start[0] / 1024,
        before[0] / 1024,
        start[1] / 1024,
        before[1] / 1024
    );
    let stop = Arc::new(AtomicBool::new(false));
    let driver = {
        let (group, stop) = (group.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                let did: usize = group
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter_mut()
                    .map(|g| g.poll(Instant::now()))
                    .sum();
                if did == 0 {
                    std::thread::yield_now();
                }
            }
        })
    };
    let mut child = ChildGuard(
        Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "engine_verbs_group_memory::clients_child",
                "--nocapture",
            ])
            .env(CHILD_ADDR, addr.0.to_string())
            .env(CHILD_COUNT, n.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the clients"),
    );
    let rx = {
        let out = child.0.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        rx
    };
    let mut stdin: ChildStdin = child.0.stdin.take().expect("piped stdin");
    if let Err(e) = try_wait_for(&rx, READY, end) {
        // What the server saw, for the failure's message: per connection that is not
        // idle and established, and in total.
        let g = group.lock().unwrap_or_else(|e| e.into_inner());
        let cs: Vec<_> = g.iter().flat_map(|g| g.connections()).collect();
        // A connection is odd when it holds a call, is not established, has answered
        // nothing or has fewer receives posted than its depth.
        let depth = server_config().sizes(rpcrdma::Role::Responder).rq_depth;
        let odd: Vec<String> = cs
            .iter()
            .enumerate()
            .filter(|(_, c)| {
                c.active() != 0
                    || c.state() != ConnState::Established
                    || c.stats().calls == 0
                    || c.recvs_posted() < depth
            })
            .map(|(i, c)| {
                let s = c.stats();
                format!(
                    "#{i} qp {} {:?} active {} calls {} receives posted {} of {depth}, \
                     recv-starved {} stalls {} header waits {} stray {}",
                    c.qp().qp_num(),
                    c.state(),
                    c.active(),
                    s.calls,
                    c.recvs_posted(),
                    s.recv_starved,
                    s.stalls,
                    s.header_starved,
                    s.stray_completions
                )
            })
            .collect();
        let groups: Vec<String> = g
            .iter()
            .map(|g| format!("{:?}", g.counters().sample()))
            .collect();
        // The kernel's view of the connections' TCP streams (siw): octets received and
        // not read by the device (Recv-Q) are a message it has not processed.
        if let Ok(out) = Command::new("ss")
            .args(["-tnH", "state", "established"])
            .output()
        {
            let text = String::from_utf8_lossy(&out.stdout);
            let unread: Vec<&str> = text
                .lines()
                .filter(|l| l.split_whitespace().next().is_some_and(|q| q != "0"))
                .collect();
            report!(
                "TCP streams with unread octets (ss -tn: Recv-Q Send-Q local peer): {unread:#?}"
            );
        }
        let sum = |f: fn(&rpcrdma::ResponderStats) -> u64| -> u64 {
            cs.iter().map(|c| f(&c.stats())).sum()
        };
        panic!(
            "the child never said {READY}: {e}; the server has {} connections, calls {}, \
             overruns {}, header waits {}, stalls {}, receive-starved {}, dropped {}; \
             not idle: {odd:?}; groups {groups:?}",
            cs.len(),
            sum(|s| s.calls),
            sum(|s| s.overruns),
            sum(|s| s.header_starved),
            sum(|s| s.stalls),
            sum(|s| s.recv_starved),
            sum(|s| s.dropped),
        );
    }
    {
        let g = group.lock().unwrap_or_else(|e| e.into_inner());
        let cs: Vec<_> = g.iter().flat_map(|g| g.connections()).collect();
        assert_eq!(cs.len(), n, "one server connection per client");
        assert!(cs.iter().all(|c| c.state() == ConnState::Established));
        assert!(
            cs.iter().all(|c| c.resources().pools().headers.is_some()),
            "verbs connections draw from the group's pools"
        );
        for g in g.iter() {
            let s = g.counters().sample();
            assert!(
                s.srq_unusable && s.srq_depth == 0 && g.shared_receives().is_none(),
                "the group says its shared receive queue is off: {s:?}"
            );
        }
        assert!(cs.iter().all(|c| !c.on_shared_receives()));
    }
    let idle = sample();
    print_growth(&net.dev, n, &maps_before);
    report(&net.dev, "idle one call each", n, before, idle);

    writeln!(stdin, "busy").expect("tell the child to work");
    wait_for(&rx, BUSY_DONE, end);
    // Idle again for the release interval: caches back to the group's pools.
    std::thread::sleep(2 * rpcrdma::DEFAULT_RELEASE_IDLE);
    {
        let g = group.lock().unwrap_or_else(|e| e.into_inner());
        let cs: Vec<_> = g.iter().flat_map(|g| g.connections()).collect();
        let calls: u64 = cs.iter().map(|c| c.stats().calls).sum();
        assert_eq!(calls, (n + BUSY * 22) as u64, "every call served");
        let starved: u64 = cs.iter().map(|c| c.stats().header_starved).sum();
        assert_eq!(starved, 0, "no call found the header pool empty");
    }
    let worked = sample();
    report(&net.dev, "after some worked idle", n, before, worked);
    // The group's own memory (its pools, pinned once at bind) spread over the
    // connections: what a server sized for n connections costs per connection in all.
    report!(
        "{}: in all, with the group's pools spread over {n} connections: {:.1} KiB          VmRSS per connection",
        net.dev,
        worked[0].saturating_sub(start[0]) as f64 / n as f64 / 1024.0
    );
    report!(
        "LAB_METRIC verbs_group_memory dev={} phase=amortized conns={n} rss_kib_per_conn={:.1}          group_rss_kib={}",
        net.dev,
        worked[0].saturating_sub(start[0]) as f64 / n as f64 / 1024.0,
        fixed[0].saturating_sub(start[0]) / 1024
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
    stop.store(true, Ordering::Release);
    driver.join().expect("the driver thread");
}
