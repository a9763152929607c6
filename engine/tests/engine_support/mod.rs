//! Shared pieces of the engine's end-to-end tests: provider fixtures (shm, sim, siw), a
//! small test service, and helpers to build RPC calls and check replies.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rpcrdma::fabric::shm::{ShmAddr, ShmDevice, ShmProvider};
use rpcrdma::fabric::sim::{Sim, SimAddr, SimConfig, SimNet};
use rpcrdma::fabric::siw::{SiwConfig, SiwDevice, SiwProvider};
use rpcrdma::fabric::{Provider, QueuePair, SendWr};
use rpcrdma::Pair;
use rpcrdma::{CallRequest, Outcome};
use rpcrdma::{CallView, ReplyWriter, Service, ServiceError};
use rpcrdma::{ConnConfig, RegBuf, Registration};
use rpcrdma_pools::HugePages;

/// Longest any single wait may take.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// Test program procedures.
pub const PROC_NULL: u32 = 0;
/// Echo the opaque argument inline.
pub const PROC_ECHO: u32 = 1;
/// Echo the opaque argument, as a DDP result when a Write chunk is offered.
pub const PROC_ECHO_DDP: u32 = 2;
/// Reply with `n` pattern bytes (argument: u32 n), inline.
pub const PROC_BIG: u32 = 3;
/// Decline with GARBAGE_ARGS.
pub const PROC_GARBAGE: u32 = 4;
/// Echo every DDP item's length and checksum (argument: item count).
pub const PROC_SUM_ITEMS: u32 = 5;
/// Return two DDP-eligible results of the given lengths (arguments: u32 a, u32 b).
pub const PROC_TWO_RESULTS: u32 = 6;
/// Answer nothing (`ReplyWriter::no_reply`): the call keeps its credit.
pub const PROC_DROP: u32 = 7;

/// Bytes of the RPC call header the helpers write (AUTH_NONE both).
pub const CALL_HDR: usize = 40;
/// Bytes of an accepted-success reply header.
pub const REPLY_HDR: usize = 24;

static UNIQUE: AtomicU64 = AtomicU64::new(1);

/// A unique number per call (tests run in parallel).
pub fn unique() -> u64 {
    UNIQUE.fetch_add(1, Ordering::Relaxed)
}

/// Something that makes devices and addresses of one provider.
pub trait Net {
    /// The provider.
    type P: Provider;
    /// A device.
    fn device(&self) -> <Self::P as Provider>::Device;
    /// A fresh address.
    fn addr(&self) -> <Self::P as Provider>::Addr;
    /// The registration mode [`pair`] gives the requester (`Auto`: the config's own).
    fn registration(&self) -> Registration {
        Registration::Auto
    }
}

/// Another fixture with the requester forced into `Registration::Persistent`: the same
/// tests, with chunks advertising the pools' persistent keys.
pub struct Persistent<N>(pub N);

impl<N: Net> Net for Persistent<N> {
    type P = N::P;
    fn device(&self) -> <Self::P as Provider>::Device {
        self.0.device()
    }
    fn addr(&self) -> <Self::P as Provider>::Addr {
        self.0.addr()
    }
    fn registration(&self) -> Registration {
        Registration::Persistent
    }
}

/// shm: real threads' worth of rings, in one process.
pub struct ShmNet;

impl Net for ShmNet {
    type P = ShmProvider;
    fn device(&self) -> ShmDevice {
        ShmDevice::new()
    }
    fn addr(&self) -> ShmAddr {
        ShmAddr::abstract_name(format!(
            "rpcrdma-engine-{}-{}",
            std::process::id(),
            unique()
        ))
    }
}

/// sim: one simulated network per test.
pub struct SimNetFixture(pub SimNet);

impl SimNetFixture {
    /// A network with `seed`.
    pub fn seeded(seed: u64) -> Self {
        SimNetFixture(SimNet::new(SimConfig::seeded(seed)))
    }
}

impl Net for SimNetFixture {
    type P = Sim;
    fn device(&self) -> <Sim as Provider>::Device {
        self.0.open_device()
    }
    fn addr(&self) -> SimAddr {
        SimAddr(unique())
    }
}

/// siw: software iWARP over loopback TCP, one device per side. Addresses are ports the
/// kernel just handed out (and that nobody listens on any more).
///
/// iWARP has no receiver-not-ready retry (a Send finding no receive fails the
/// connection at once). Every generic test runs over siw all the same: the engine's
/// credits keep a receive posted for every Send, and none of these tests injects RNR;
/// RNR faults are exercised over sim only (`engine_sim_random`).
pub struct SiwNet {
    /// `SiwConfig::confirm_completions`: `true` completes Sends and Writes only once the
    /// peer provably executed them (as RC hardware); `false` completes them when written
    /// to the socket, as Linux siw does, so the engine is also run the way it would be
    /// against a kernel peer.
    pub confirm_completions: bool,
}

impl Net for SiwNet {
    type P = SiwProvider;
    fn device(&self) -> SiwDevice {
        SiwDevice::with_config(SiwConfig {
            confirm_completions: self.confirm_completions,
            ..SiwConfig::default()
        })
        .expect("open siw device")
    }
    fn addr(&self) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        l.local_addr().expect("local address")
    }
}

/// verbs: a real RDMA device inside the qemu lab, named by `RPCRDMA_VERBS_DEV` and
/// reached at `RPCRDMA_VERBS_IP` (set by tools/lab/guest/verbs-engine.sh). Both ends open
/// the same device; addresses differ by port. Only the `engine_verbs_*` test binaries
/// (not part of plain `cargo test`) use it.
#[cfg(feature = "verbs")]
pub struct VerbsNet {
    /// Device name (`rxe0`, `siw0`).
    pub dev: String,
    /// An address the device owns.
    pub ip: std::net::IpAddr,
}

#[cfg(feature = "verbs")]
impl VerbsNet {
    /// The device and address the lab names in the environment.
    pub fn from_env() -> Self {
        let var = |name: &str| {
            std::env::var(name).unwrap_or_else(|_| {
                panic!("{name} is not set: run this inside the qemu lab (tools/lab/verbs.sh)")
            })
        };
        let ip = var("RPCRDMA_VERBS_IP");
        VerbsNet {
            dev: var("RPCRDMA_VERBS_DEV"),
            ip: ip
                .parse()
                .unwrap_or_else(|e| panic!("RPCRDMA_VERBS_IP={ip}: {e}")),
        }
    }
}

#[cfg(feature = "verbs")]
impl Net for VerbsNet {
    type P = rpcrdma::fabric::verbs::VerbsProvider;
    fn device(&self) -> rpcrdma::fabric::verbs::VerbsDevice {
        rpcrdma::fabric::verbs::VerbsDevice::open(&self.dev)
            .unwrap_or_else(|e| panic!("open {}: {e}", self.dev))
    }
    fn addr(&self) -> rpcrdma::fabric::verbs::VerbsAddr {
        // rdma_cm ports are per node: keep concurrent test processes apart and give
        // every connection its own port (a closed listener's port may linger).
        let base = 20_000 + (std::process::id() % 40) * 1000;
        let port = base + (unique() % 1000) as u32;
        rpcrdma::fabric::verbs::VerbsAddr(SocketAddr::new(self.ip, port as u16))
    }
}

/// A small configuration for tests: 8 credits, 64 KiB large buffers, no hugepages.
pub fn test_config() -> ConnConfig {
    ConnConfig {
        credits: 8,
        large_buf_size: 64 * 1024,
        large_bufs: 32,
        send_bufs: 64,
        queue_len: 64,
        hugepages: HugePages::Never,
        ..ConnConfig::default()
    }
}

/// Connects a pair over `net` with the given configurations.
pub fn pair<N: Net>(net: &N, client: &ConnConfig, server: &ConnConfig) -> Pair<N::P, TestService> {
    let cdev = net.device();
    let sdev = net.device();
    let addr = net.addr();
    let mut client = client.clone();
    if net.registration() != Registration::Auto {
        client.registration = net.registration();
    }
    Pair::connect(
        &cdev,
        sdev,
        &addr,
        &client,
        server,
        TestService::default(),
        DEADLINE,
    )
    .expect("pair connects")
}

/// Writes an RPC call header (program 0x20000099 version 1, AUTH_NONE) for `proc`
/// followed by `args` into `buf`. The XID is left zero: the engine assigns it.
pub fn write_call(buf: &mut RegBuf, proc: u32, args: &[u8]) {
    let mut v = Vec::with_capacity(CALL_HDR + args.len());
    for w in [0u32, 0, 2, 0x2000_0099, 1, proc, 0, 0, 0, 0] {
        v.extend_from_slice(&w.to_be_bytes());
    }
    v.extend_from_slice(args);
    buf.fill(&v).expect("call fits its buffer");
}

/// XDR opaque<>: length, bytes, zero roundup.
pub fn opaque(data: &[u8]) -> Vec<u8> {
    let mut v = (data.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(data);
    v.resize(v.len().next_multiple_of(4), 0);
    v
}

/// `n` bytes of a pattern seeded by `seed`.
pub fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A registered buffer holding `data`, from the requester's large pool.
pub fn large_with<P: Provider>(pair: &Pair<P, TestService>, data: &[u8]) -> RegBuf {
    let mut b = pair.requester.alloc_large().expect("large buffer");
    b.fill(data).expect("fits");
    b
}

/// An inline-sized message buffer holding a call of `proc` with `args`.
pub fn msg<P: Provider>(pair: &Pair<P, TestService>, proc: u32, args: &[u8]) -> RegBuf {
    let mut b = if CALL_HDR + args.len() <= 4096 {
        pair.requester.alloc_msg().expect("send buffer")
    } else {
        pair.requester.alloc_large().expect("large buffer")
    };
    write_call(&mut b, proc, args);
    b
}

/// The results of a successful reply (after the 24-byte header).
pub fn results(o: &Outcome) -> &[u8] {
    let r = o.reply.as_ref().expect("reply present");
    &r.bytes()[REPLY_HDR..]
}

/// Reads the big-endian word at `off`.
pub fn word(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

/// Sends `req` and waits for its outcome.
pub fn call<P: Provider>(pair: &mut Pair<P, TestService>, req: CallRequest) -> Outcome {
    pair.call(req, DEADLINE)
        .expect("outcome before the deadline")
}

/// A clock the test moves by hand, for tests about the engine's own timers (a DONE or
/// reply timeout of a few milliseconds). The cores read no clock: every poll carries its
/// `now`. Polled with this clock's `now`, a timer fires only when the test advances it,
/// never because the machine descheduled the test thread between two steps (under
/// load a 30 ms timer on the real clock could revoke a reply before the requester read
/// it). Real time still bounds every wait ([`DEADLINE`]).
#[derive(Debug, Clone, Copy)]
pub struct HandClock {
    now: Instant,
}

impl HandClock {
    /// Stands at the requester's clock's present time (so the instants compare with
    /// those the pair was set up with, the sim's virtual ones included).
    pub fn at_pair<P: Provider, S: Service + Send + 'static>(p: &Pair<P, S>) -> Self {
        HandClock {
            now: p.requester.clock().now(),
        }
    }

    /// The time it shows.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Moves it forward by `d`.
    pub fn advance(&mut self, d: Duration) {
        self.now += d;
    }

    /// Polls both sides of `p` at this clock's `now` until `done` holds; false if
    /// [`DEADLINE`] of real time passes first.
    pub fn run_until<P: Provider, S: Service + Send + 'static>(
        &self,
        p: &mut Pair<P, S>,
        mut done: impl FnMut(&mut Pair<P, S>) -> bool,
    ) -> bool {
        let end = Instant::now() + DEADLINE;
        loop {
            p.poll(self.now);
            if done(p) {
                return true;
            }
            if Instant::now() > end {
                return false;
            }
        }
    }

    /// Submits `req` at this clock's `now` and polls (at that `now`) until its outcome
    /// comes; `between` runs after every poll and may advance the clock (it gets the
    /// pair and the clock), e.g. once the responder has shown it waits for a timer.
    pub fn call<P: Provider, S: Service + Send + 'static>(
        &mut self,
        p: &mut Pair<P, S>,
        req: CallRequest,
        mut between: impl FnMut(&mut Pair<P, S>, &mut HandClock),
    ) -> Outcome {
        let tag = unique();
        p.requester
            .submit_at(req, tag, self.now)
            .expect("call submitted");
        let end = Instant::now() + DEADLINE;
        loop {
            p.poll(self.now);
            if let Some(o) = p.requester.poll_outcome() {
                assert_eq!(o.tag, tag, "one call at a time");
                return o;
            }
            between(p, self);
            assert!(Instant::now() <= end, "outcome before the deadline");
        }
    }
}

/// What the test service saw, for assertions.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// Calls handled.
    pub calls: u64,
    /// Long calls handled.
    pub long_calls: u64,
    /// DDP items seen: (position, msg_offset, len).
    pub items: Vec<(u32, usize, usize)>,
    /// Write chunk capacities offered in the last call.
    pub write_chunks: Vec<u64>,
    /// Reply chunk capacity offered in the last call.
    pub reply_chunk: Option<u64>,
    /// RDMA_DONE messages.
    pub done: u64,
    /// DDP items handed over as segment lists (`DdpItem::segments`).
    pub segmented_items: u64,
}

/// The test program.
#[derive(Debug, Default)]
pub struct TestService {
    /// What it saw.
    pub seen: Seen,
    /// Takes send-based DDP items across several segments as segment lists
    /// (`Service::takes_segmented_ddp_items`); otherwise the engine gathers them.
    pub segmented: bool,
}

fn reply_header(w: &mut ReplyWriter<'_>, xid: u32) -> Result<(), ServiceError> {
    for v in [xid, 1, 0, 0, 0, 0] {
        w.put_u32(v).map_err(|_| ServiceError::SystemErr)?;
    }
    Ok(())
}

/// The opaque argument at payload offset `at`: inline, or the DDP item placed there.
fn opaque_arg<'a>(call: &CallView<'a>, at: usize) -> Result<&'a [u8], ServiceError> {
    let msg = call.msg();
    let len = msg
        .get(at..at + 4)
        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .ok_or(ServiceError::GarbageArgs)?;
    if let Some(item) = call.ddp_items().iter().find(|i| i.msg_offset == at + 4) {
        if item.data.len() != len {
            return Err(ServiceError::GarbageArgs);
        }
        return Ok(item.data);
    }
    msg.get(at + 4..at + 4 + len)
        .ok_or(ServiceError::GarbageArgs)
}

impl Service for TestService {
    fn takes_segmented_ddp_items(&self) -> bool {
        self.segmented
    }

    fn handle_call(
        &mut self,
        call: &CallView<'_>,
        w: &mut ReplyWriter<'_>,
    ) -> Result<(), ServiceError> {
        self.seen.calls += 1;
        self.seen.long_calls += u64::from(call.is_long());
        self.seen.write_chunks = call.write_chunks().to_vec();
        self.seen.reply_chunk = call.reply_chunk();
        for i in call.ddp_items() {
            self.seen.items.push((i.position, i.msg_offset, i.len()));
            self.seen.segmented_items += u64::from(!i.segments.is_empty());
        }
        let msg = call.msg();
        if msg.len() < CALL_HDR {
            return Err(ServiceError::GarbageArgs);
        }
        let proc = u32::from_be_bytes([msg[20], msg[21], msg[22], msg[23]]);
        let xid = call.xid();
        let over = |_| ServiceError::SystemErr;
        match proc {
            PROC_NULL => reply_header(w, xid),
            PROC_ECHO => {
                let data = opaque_arg(call, CALL_HDR)?;
                reply_header(w, xid)?;
                w.put(&opaque(data)).map_err(over)
            }
            PROC_ECHO_DDP => {
                let data = opaque_arg(call, CALL_HDR)?;
                reply_header(w, xid)?;
                w.put_u32(data.len() as u32).map_err(over)?;
                if w.next_write_chunk().is_some() {
                    let mut b = w.alloc_buf().map_err(|_| ServiceError::SystemErr)?;
                    b.fill(data).map_err(|_| ServiceError::SystemErr)?;
                    match w.ddp_result(b) {
                        Ok(()) => return Ok(()),
                        Err(refused) => drop(refused),
                    }
                }
                w.put(data).map_err(over)?;
                w.put_zeros(data.len().next_multiple_of(4) - data.len())
                    .map_err(over)
            }
            PROC_BIG => {
                let n = msg
                    .get(CALL_HDR..CALL_HDR + 4)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
                    .ok_or(ServiceError::GarbageArgs)?;
                reply_header(w, xid)?;
                w.put(&opaque(&pattern(n, 7))).map_err(over)
            }
            PROC_GARBAGE => Err(ServiceError::GarbageArgs),
            PROC_DROP => {
                w.no_reply();
                Ok(())
            }
            PROC_SUM_ITEMS => {
                reply_header(w, xid)?;
                w.put_u32(call.ddp_items().len() as u32).map_err(over)?;
                for i in call.ddp_items() {
                    w.put_u32(i.len() as u32).map_err(over)?;
                    let sum = i.pieces().fold(0u32, |a, p| {
                        p.iter()
                            .fold(a, |a, &b| a.wrapping_mul(31).wrapping_add(u32::from(b)))
                    });
                    w.put_u32(sum).map_err(over)?;
                }
                Ok(())
            }
            PROC_TWO_RESULTS => {
                let a = msg
                    .get(40..44)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                let b = msg
                    .get(44..48)
                    .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
                let (Some(a), Some(b)) = (a, b) else {
                    return Err(ServiceError::GarbageArgs);
                };
                reply_header(w, xid)?;
                for (n, seed) in [(a as usize, 1u8), (b as usize, 2u8)] {
                    let data = pattern(n, seed);
                    w.put_u32(n as u32).map_err(over)?;
                    if n == 0 {
                        // An empty result: nothing to place; its chunk goes back empty.
                        w.skip_write_chunk();
                        continue;
                    }
                    let mut buf = w.alloc_buf().map_err(|_| ServiceError::SystemErr)?;
                    buf.fill(&data).map_err(|_| ServiceError::SystemErr)?;
                    if let Err(refused) = w.ddp_result(buf) {
                        drop(refused);
                        w.put(&data).map_err(over)?;
                        w.put_zeros(n.next_multiple_of(4) - n).map_err(over)?;
                    }
                }
                Ok(())
            }
            _ => Err(ServiceError::ProcUnavail),
        }
    }

    fn on_done(&mut self, _xid: u32) {
        self.seen.done += 1;
    }
}

/// Instantiates a test body once per provider (siw twice: with and without confirmed
/// completions), and again over shm and siw with the requester in persistent
/// registration mode: `fn $name<N: Net>(net: N)`.
#[macro_export]
macro_rules! per_provider {
    ($($name:ident),* $(,)?) => {
        mod shm {
            $(
                #[test]
                fn $name() {
                    super::$name(super::engine_support::ShmNet);
                }
            )*
        }
        mod sim {
            $(
                #[test]
                fn $name() {
                    super::$name(super::engine_support::SimNetFixture::seeded(0x5eed));
                }
            )*
        }
        mod siw {
            $(
                #[test]
                fn $name() {
                    super::$name(super::engine_support::SiwNet {
                        confirm_completions: true,
                    });
                }
            )*
        }
        mod siw_unconfirmed {
            $(
                #[test]
                fn $name() {
                    super::$name(super::engine_support::SiwNet {
                        confirm_completions: false,
                    });
                }
            )*
        }
        mod shm_persistent {
            $(
                #[test]
                fn $name() {
                    super::$name(super::engine_support::Persistent(
                        super::engine_support::ShmNet,
                    ));
                }
            )*
        }
        mod siw_persistent {
            $(
                #[test]
                fn $name() {
                    super::$name(super::engine_support::Persistent(
                        super::engine_support::SiwNet {
                            confirm_completions: false,
                        },
                    ));
                }
            )*
        }
    };
}

/// Posts `msgs` from the requester's queue pair in one chain, as a broken peer would,
/// and waits for the responder to take them all (as RDMA_OPTIONAL messages).
pub fn inject<P: Provider>(p: &mut Pair<P, TestService>, msgs: &[Vec<u8>]) {
    let bufs: Vec<_> = msgs
        .iter()
        .map(|m| {
            let mut b = p.requester.alloc_large().expect("buffer");
            b.fill(m).expect("fits");
            b
        })
        .collect();
    let sges: Vec<_> = bufs
        .iter()
        .zip(msgs)
        .map(|(b, m)| b.sge(0, m.len()).expect("registered"))
        .collect();
    let wrs: Vec<_> = sges
        .iter()
        .map(|s| SendWr::send(0, std::slice::from_ref(s)))
        .collect();
    let want = p.responder().map_or(0, |r| r.stats().optional_messages) + msgs.len() as u64;
    p.requester.qp_mut().post_send(&wrs).expect("posted");
    let ok = p.run_until(DEADLINE, |p| {
        p.responder()
            .is_some_and(|r| r.stats().optional_messages >= want)
    });
    assert!(ok, "the responder received them");
    drop(bufs);
}

/// Core pools for tests that drive a protocol core by hand (no provider): 4 KiB
/// receive and send buffers, 64 KiB large ones (`counts` of each), never on hugepages,
/// each arena given a fixed key of `keys` as both its lkey and rkey (what the core puts
/// in chunks and gather lists, which those tests check). `names` name the three pools.
pub fn hand_pools(
    names: [&'static str; 3],
    counts: [u32; 3],
    keys: [u32; 3],
) -> rpcrdma::CorePools {
    use rpcrdma_pools::{Pool, PoolConfig, RegKeys};
    let mk = |name, size, count, key| {
        let p = Pool::new(
            &PoolConfig::new(name, size, count)
                .cache_size(4)
                .hugepages(HugePages::Never),
        )
        .expect("pool");
        p.arena().set_keys(RegKeys {
            lkey: key,
            rkey: key,
        });
        p
    };
    rpcrdma::CorePools {
        recv: mk(names[0], 4096, counts[0], keys[0]),
        send: mk(names[1], 4096, counts[1], keys[1]),
        large: mk(names[2], 65536, counts[2], keys[2]),
        headers: None,
    }
}
