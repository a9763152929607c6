//! Heap allocations per RPC in steady state, counted by a global allocator in this
//! binary of its own: an inline call, a long call with a Reply chunk, and a call with
//! a DDP argument and a write sink, over shm. The goal (and the assertion) is zero.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rpcrdma::fabric::shm::{ShmAddr, ShmDevice, ShmProvider};
use rpcrdma::Pair;
use rpcrdma::{CallRequest, CallStatus};
use rpcrdma::{CallView, ReplyWriter, Service, ServiceError};
use rpcrdma::{ConnConfig, RegBuf};
use rpcrdma_pools::HugePages;

struct Counting;

thread_local! {
    /// Counting is per thread: the test harness's own threads (its main thread records
    /// the running test after spawning it) allocate whenever they please, and the
    /// connection under test runs entirely on the test's thread (shm makes progress
    /// only in its polls).
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}

fn counting() -> bool {
    // try_with: a thread being torn down has no value, and counts nothing.
    COUNTING.try_with(Cell::get).unwrap_or(false)
}
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if counting() {
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
        if counting() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const DEADLINE: Duration = Duration::from_secs(10);

/// Echoes its opaque argument (inline, or from its Read chunk), through the Write chunk
/// when one is offered. Allocates nothing.
struct Echo;

impl Service for Echo {
    fn handle_call(
        &mut self,
        call: &CallView<'_>,
        w: &mut ReplyWriter<'_>,
    ) -> Result<(), ServiceError> {
        let msg = call.msg();
        let len = msg
            .get(40..44)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or(ServiceError::GarbageArgs)?;
        let data = match call.ddp_items().first() {
            Some(item) => item.data,
            None => msg.get(44..44 + len).ok_or(ServiceError::GarbageArgs)?,
        };
        let e = |_| ServiceError::SystemErr;
        for v in [call.xid(), 1, 0, 0, 0, 0, len as u32] {
            w.put_u32(v).map_err(e)?;
        }
        if w.next_write_chunk().is_some() {
            let mut b = w.alloc_buf().map_err(|_| ServiceError::SystemErr)?;
            b.fill(data).map_err(|_| ServiceError::SystemErr)?;
            if w.ddp_result(b).is_ok() {
                return Ok(());
            }
        }
        w.put(data).map_err(e)?;
        w.put_zeros(len.next_multiple_of(4) - len).map_err(e)
    }
}

/// Writes a call header and an opaque length (and, if `inline`, the data) into `buf`
/// without allocating.
fn write_call(buf: &mut RegBuf, data: &[u8], inline: bool) {
    let s = buf.storage_mut();
    for (i, w) in [0u32, 0, 2, 0x2000_0099, 1, 2, 0, 0, 0, 0, data.len() as u32]
        .iter()
        .enumerate()
    {
        s[4 * i..4 * i + 4].copy_from_slice(&w.to_be_bytes());
    }
    let mut len = 44;
    if inline {
        s[44..44 + data.len()].copy_from_slice(data);
        len += data.len().next_multiple_of(4);
    }
    buf.set_len(len).expect("fits");
}

#[derive(Clone, Copy)]
enum Shape {
    Inline,
    LongWithReplyChunk,
    DdpReadAndWrite,
    /// A DDP argument placed by send-based DDP (the responder advertises a segment).
    SendDdp,
    /// An inline call whose reply's item is placed by send-based DDP (the requester
    /// advertises a segment and asks in `optxrq_rsd`).
    ReplyDdp,
    /// As `ReplyDdp`, with a sink of four of the requester's segments: the reply comes
    /// as a group, the result across segments, gathered into the sink.
    ReplyDdpSegments,
}

fn one_call(p: &mut Pair<ShmProvider, Echo>, shape: Shape, data: &[u8]) {
    let req = match shape {
        Shape::Inline => {
            let mut m = p.requester.alloc_msg().expect("msg");
            write_call(&mut m, data, true);
            CallRequest::new(m, 1024)
        }
        Shape::LongWithReplyChunk => {
            let mut m = p.requester.alloc_large().expect("msg");
            write_call(&mut m, data, true);
            CallRequest::new(m, 16 * 1024)
        }
        Shape::DdpReadAndWrite => {
            let mut m = p.requester.alloc_msg().expect("msg");
            write_call(&mut m, data, false);
            let mut arg = p.requester.alloc_large().expect("arg");
            arg.fill(data).expect("fits");
            let mut r = CallRequest::new(m, 1024);
            r.push_ddp_arg(44, arg).expect("room");
            r.push_write_sink(p.requester.alloc_large().expect("sink"))
                .expect("room");
            r
        }
        Shape::SendDdp => {
            let mut m = p.requester.alloc_msg().expect("msg");
            write_call(&mut m, data, false);
            let mut arg = p.requester.alloc_large().expect("arg");
            arg.fill(data).expect("fits");
            let mut r = CallRequest::new(m, 1024);
            r.push_ddp_arg(44, arg).expect("room");
            r
        }
        Shape::ReplyDdp => {
            let mut m = p.requester.alloc_msg().expect("msg");
            write_call(&mut m, data, true);
            let mut r = CallRequest::new(m, 1024);
            r.push_write_sink(p.requester.alloc_large().expect("sink"))
                .expect("room");
            r
        }
        Shape::ReplyDdpSegments => {
            let mut m = p.requester.alloc_msg().expect("msg");
            write_call(&mut m, data, true);
            let mut r = CallRequest::new(m, 1024);
            r.push_write_sink(p.requester.alloc_msg().expect("sink"))
                .expect("room");
            r
        }
    };
    let o = p.call(req, DEADLINE).expect("outcome");
    assert_eq!(o.status, CallStatus::Success);
    match shape {
        Shape::DdpReadAndWrite | Shape::ReplyDdp | Shape::ReplyDdpSegments => {
            assert_eq!(o.write_result(0), Some(data))
        }
        _ => {
            let r = o.reply.as_ref().expect("reply");
            assert_eq!(&r.bytes()[28..28 + data.len()], data);
        }
    }
}

#[test]
fn steady_state_rpcs_do_not_allocate() {
    let cfg = ConnConfig {
        credits: 8,
        large_buf_size: 64 * 1024,
        large_bufs: 32,
        send_bufs: 64,
        queue_len: 64,
        hugepages: HugePages::Never,
        ..ConnConfig::default()
    };
    let addr = ShmAddr::abstract_name(format!("rpcrdma-engine-alloc-{}", std::process::id()));
    let cdev = ShmDevice::new();
    let mut p =
        Pair::connect(&cdev, ShmDevice::new(), &addr, &cfg, &cfg, Echo, DEADLINE).expect("pair");
    let small = [7u8; 100];
    let big: Vec<u8> = (0..10_000).map(|i| i as u8).collect();
    let cases = [
        (Shape::Inline, &small[..], "inline"),
        (
            Shape::LongWithReplyChunk,
            &big[..],
            "long call + reply chunk",
        ),
        (Shape::DdpReadAndWrite, &big[..], "DDP read + write chunk"),
    ];
    let mut report = Vec::new();
    for (shape, data, name) in cases {
        for _ in 0..200 {
            one_call(&mut p, shape, data);
        }
        const N: u64 = 500;
        ALLOCS.store(0, Ordering::Relaxed);
        COUNTING.with(|c| c.set(true));
        for _ in 0..N {
            one_call(&mut p, shape, data);
        }
        COUNTING.with(|c| c.set(false));
        let n = ALLOCS.load(Ordering::Relaxed);
        report.push(format!("{name}: {n} allocations in {N} RPCs"));
        assert_eq!(
            n, 0,
            "{name}: {n} heap allocations in {N} steady-state RPCs"
        );
    }
    eprintln!("{}", report.join("; "));
}

/// A shm pair with send-based DDP on both ends, chosen for every size (on shm the
/// device default is never: DESIGN.md, "Shape choice"), DDP segments of `segment`
/// octets (the default when `None`).
fn send_ddp_pair(name: &str, segment: Option<u32>) -> Pair<ShmProvider, Echo> {
    let cfg = ConnConfig {
        credits: 8,
        large_buf_size: 64 * 1024,
        large_bufs: 32,
        send_bufs: 64,
        queue_len: 64,
        hugepages: HugePages::Never,
        send_ddp: Some(true),
        send_ddp_max: Some(u32::MAX),
        send_ddp_segment: segment,
        ..ConnConfig::default()
    };
    let addr = ShmAddr::abstract_name(format!(
        "rpcrdma-engine-alloc-{name}-{}",
        std::process::id()
    ));
    let cdev = ShmDevice::new();
    Pair::connect(&cdev, ShmDevice::new(), &addr, &cfg, &cfg, Echo, DEADLINE).expect("pair")
}

/// Calls of a send-based DDP shape counted: 200 to warm up, then [`COUNTED`].
const COUNTED: u64 = 500;

/// Runs `shape` calls of `data` on `p` (see [`COUNTED`]) and returns the heap
/// allocations of the counted ones and `stat`'s growth over them.
fn allocs_in(
    p: &mut Pair<ShmProvider, Echo>,
    shape: Shape,
    data: &[u8],
    stat: impl Fn(&Pair<ShmProvider, Echo>) -> u64,
) -> (u64, u64) {
    for _ in 0..200 {
        one_call(p, shape, data);
    }
    let before = stat(p);
    ALLOCS.store(0, Ordering::Relaxed);
    COUNTING.with(|c| c.set(true));
    for _ in 0..COUNTED {
        one_call(p, shape, data);
    }
    COUNTING.with(|c| c.set(false));
    (ALLOCS.load(Ordering::Relaxed), stat(p) - before)
}

/// Calls whose DDP argument goes by send-based DDP into the responder's scatter
/// receives: the requester's placement, the responder's check and the segment's trip
/// through the service and back to the pool allocate nothing either.
#[test]
fn send_ddp_rpcs_do_not_allocate() {
    let mut p = send_ddp_pair("sddp", None);
    let (n, items) = allocs_in(&mut p, Shape::SendDdp, &[9u8; 900], |p| {
        p.requester.stats().send_ddp_items
    });
    assert_eq!(items, COUNTED, "all by send-based DDP");
    assert_eq!(
        n, 0,
        "{n} heap allocations in {COUNTED} send-based DDP RPCs"
    );
}

/// Calls whose argument spans four DDP segments (512 octets each) go as a group of four
/// Sends, the responder keeps each transmission's landed segment and gathers them for a
/// service that takes contiguous items: no heap allocation either.
#[test]
fn multi_segment_send_ddp_rpcs_do_not_allocate() {
    let mut p = send_ddp_pair("msddp", Some(512));
    let (n, msgs) = allocs_in(&mut p, Shape::SendDdp, &[5u8; 2000], |p| {
        p.requester.stats().call_messages
    });
    assert_eq!(msgs, 4 * COUNTED, "four Sends each");
    assert_eq!(
        p.requester.stats().send_ddp_items,
        200 + COUNTED,
        "all by send-based DDP"
    );
    assert_eq!(
        n, 0,
        "{n} heap allocations in {COUNTED} multi-segment send-based DDP RPCs"
    );
}

/// Calls whose reply's bulk item comes by send-based DDP (into the requester's receive
/// segment, handed back as the outcome's sink) allocate nothing either.
#[test]
fn send_ddp_replies_do_not_allocate() {
    let mut p = send_ddp_pair("rddp", None);
    let (n, items) = allocs_in(&mut p, Shape::ReplyDdp, &[7u8; 2000], |p| {
        p.requester.stats().send_ddp_reply_items
    });
    assert_eq!(items, COUNTED, "all by send-based DDP");
    assert_eq!(
        n, 0,
        "{n} heap allocations in {COUNTED} RPCs with send-based DDP replies"
    );
}

/// Send-based DDP replies across segments (draft §7.4, §6.2): a 4 KiB sink over the
/// requester's 1 KiB segments lends three receives, and the 2000-octet result comes as
/// a group of two transmissions, checked, kept per transmission and gathered into the
/// sink: no heap allocation either.
#[test]
fn multi_segment_send_ddp_replies_do_not_allocate() {
    let mut p = send_ddp_pair("mrddp", Some(1024));
    let (n, msgs) = allocs_in(&mut p, Shape::ReplyDdpSegments, &[9u8; 2000], |p| {
        p.requester.stats().reply_messages
    });
    assert_eq!(msgs, 2 * COUNTED, "two transmissions each");
    assert_eq!(
        p.requester.stats().send_ddp_reply_items,
        200 + COUNTED,
        "all by send-based DDP"
    );
    assert_eq!(
        n, 0,
        "{n} heap allocations in {COUNTED} RPCs with multi-segment send-based DDP replies"
    );
}

/// The same inline RPCs served by a poll group (one completion queue shared by its
/// connections, completions routed by queue-pair number), driven on this thread with
/// the requester: nothing on the group's path allocates per call either.
#[test]
fn poll_group_rpcs_do_not_allocate() {
    use rpcrdma::{ConnState, PollGroup, Requester, ResponderLimits};
    use std::time::Instant;
    let cfg = ConnConfig {
        credits: 8,
        large_buf_size: 64 * 1024,
        large_bufs: 32,
        send_bufs: 64,
        queue_len: 64,
        hugepages: HugePages::Never,
        ..ConnConfig::default()
    };
    let addr = ShmAddr::abstract_name(format!("rpcrdma-group-alloc-{}", std::process::id()));
    let factory: fn() -> Option<Echo> = || Some(Echo);
    let mut groups = PollGroup::<ShmProvider, Echo, _>::bind(
        ShmDevice::new(),
        &addr,
        cfg.clone(),
        factory,
        1,
        ResponderLimits::default(),
    )
    .expect("group");
    let mut g = groups.pop().expect("one group");
    let dev = ShmDevice::new();
    let mut c = Requester::<ShmProvider>::connect_with(&dev, &addr, &cfg).expect("connect");
    let end = Instant::now() + DEADLINE;
    while c.state() != ConnState::Established || g.connections().len() != 1 {
        let now = Instant::now();
        c.poll(now);
        g.poll(now);
        assert!(now < end, "connected");
    }
    let data = [7u8; 100];
    let call = |c: &mut Requester<ShmProvider>, g: &mut PollGroup<ShmProvider, Echo, _>| {
        let mut m = c.alloc_msg().expect("msg");
        write_call(&mut m, &data, true);
        c.submit(CallRequest::new(m, 1024), 1).expect("submits");
        loop {
            let now = Instant::now();
            c.poll(now);
            g.poll(now);
            if let Some(o) = c.poll_outcome() {
                assert_eq!(o.status, CallStatus::Success);
                return;
            }
            assert!(now < end, "answered");
        }
    };
    for _ in 0..200 {
        call(&mut c, &mut g);
    }
    const N: u64 = 500;
    ALLOCS.store(0, Ordering::Relaxed);
    COUNTING.with(|x| x.set(true));
    for _ in 0..N {
        call(&mut c, &mut g);
    }
    COUNTING.with(|x| x.set(false));
    let n = ALLOCS.load(Ordering::Relaxed);
    assert_eq!(
        n, 0,
        "poll group: {n} heap allocations in {N} steady-state RPCs"
    );
    assert_eq!(g.counters().sample().accepted, 1);
}
