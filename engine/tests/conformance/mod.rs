//! The fabric conformance suite, written once and generic over the provider.
//!
//! A provider's test file implements [`Fixture`] and invokes
//! `conformance_tests!(ItsFixture);`, which expands to one `#[test]` per rule. Every
//! wait polls with a deadline and fails the test when it passes; nothing depends on
//! timing luck (RNR windows are either infinite or expected to expire).
#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma::fabric::mr::{key_generation, key_index, make_key, next_key, MAX_KEY_INDEX};
use rpcrdma::fabric::{
    Access, CmEvent, CmPrivateData, Completion, CompletionQueue, ConnectionManager, Device,
    DeviceCaps, FabricError, MemoryRegion, PeerAddr, PostErrorKind, PrivateDataLimits,
    ProtectionDomain, Provider, QpCaps, QpConfig, QpInit, QpState, QueuePair, RecvWr, RemoteAddr,
    SendFlags, SendOp, SendWr, Sge, WcOpcode, WcStatus, RNR_RETRY_INFINITE,
};
use rpcrdma_pools::{Arena, ArenaOptions, HugePages};

mod srq;
#[allow(unused_imports)] // used by the test crates that expand `conformance_tests!`
pub use srq::*;

/// How long any single wait may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(5);

/// What a provider supplies to run the suite.
pub trait Fixture: 'static {
    /// The provider under test.
    type P: Provider;
    /// Opens a fresh device (one per simulated host).
    fn open_device() -> <Self::P as Provider>::Device;
    /// An address nobody listens on yet; distinct on every call (tests run in parallel).
    fn unique_addr() -> <Self::P as Provider>::Addr;
    /// Whether the provider knows who the peer is (`QueuePair::peer_addr`); the
    /// simulated network does not.
    const REPORTS_PEER: bool = true;
    /// Whether the device has shared receive queues (`DeviceCaps::max_srq_wr` > 0):
    /// every software provider, and the lab's rxe and siw devices. Where it is false
    /// the shared-receive-queue rules check that the device says so and refuses.
    const HAS_SRQ: bool = true;
    /// Memory the provider can register.
    fn arena(len: usize) -> Arc<Arena> {
        let opts = ArenaOptions::new(len)
            .shareable(true)
            .hugepages(HugePages::Never)
            .name("rpcrdma-conformance");
        Arc::new(Arena::new(&opts).expect("test arena"))
    }
}

type Ev<P> = CmEvent<<P as Provider>::ConnRequest>;

/// How a pair is built.
#[derive(Clone, Copy)]
pub struct Opts {
    pub server: QpConfig,
    pub client: QpConfig,
    pub separate_cqs: bool,
    pub arena_len: usize,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            server: QpConfig::default(),
            client: QpConfig::default(),
            separate_cqs: false,
            arena_len: 1 << 20,
        }
    }
}

/// Everything one side owns except its queue pair.
pub struct Host<P: Provider> {
    pub arena: Arc<Arena>,
    pub mr: P::Mr,
    pub cq: P::Cq,
    pub rcq: Option<P::Cq>,
    pub cm: P::Cm,
    pub pd: P::Pd,
    pub dev: P::Device,
    pub events: VecDeque<Ev<P>>,
    pub done: Vec<Completion>,
}

impl<P: Provider> Host<P> {
    fn new<F: Fixture<P = P>>(o: &Opts, cfg: &QpConfig) -> Host<P> {
        let dev = F::open_device();
        let pd = dev.alloc_pd().expect("alloc_pd");
        let depth = cfg.caps.max_send_wr + cfg.caps.max_recv_wr;
        let cq = dev.create_cq(depth).expect("create_cq");
        let rcq = o
            .separate_cqs
            .then(|| dev.create_cq(cfg.caps.max_recv_wr).expect("create recv cq"));
        let cm = dev.create_cm().expect("create_cm");
        let arena = F::arena(o.arena_len);
        let mr = pd.reg_arena(&arena, Access::ALL).expect("register arena");
        Host {
            arena,
            mr,
            cq,
            rcq,
            cm,
            pd,
            dev,
            events: VecDeque::new(),
            done: Vec::new(),
        }
    }

    /// Connects to `addr` with a new queue pair configured by `config`.
    pub fn connect(
        &mut self,
        addr: &P::Addr,
        config: QpConfig,
        private_data: &[u8],
    ) -> Result<P::Qp, FabricError> {
        let init = QpInit {
            pd: &self.pd,
            send_cq: &self.cq,
            recv_cq: self.rcq.as_ref().unwrap_or(&self.cq),
            srq: None,
            config,
        };
        self.cm.connect(addr, init, private_data)
    }

    /// Accepts `request` with a new queue pair configured by `config`.
    pub fn accept(
        &mut self,
        request: P::ConnRequest,
        config: QpConfig,
        private_data: &[u8],
    ) -> Result<P::Qp, FabricError> {
        let init = QpInit {
            pd: &self.pd,
            send_cq: &self.cq,
            recv_cq: self.rcq.as_ref().unwrap_or(&self.cq),
            srq: None,
            config,
        };
        self.cm.accept(request, init, private_data)
    }

    /// Polls the CQs and the CM once, collecting what they report.
    pub fn pump(&mut self) {
        let mut buf = [Completion::EMPTY; 16];
        let n = self.cq.poll(&mut buf);
        self.done.extend_from_slice(&buf[..n]);
        if let Some(r) = self.rcq.as_mut() {
            let n = r.poll(&mut buf);
            self.done.extend_from_slice(&buf[..n]);
        }
        if let Some(e) = self.cm.poll_event().expect("poll_event") {
            self.events.push_back(e);
        }
    }

    /// Address of byte `off` of the arena.
    pub fn addr(&self, off: usize) -> u64 {
        self.arena.base() as u64 + off as u64
    }

    /// A scatter-gather entry for `len` bytes at `off` under the arena registration.
    pub fn sge(&self, off: usize, len: usize) -> Sge {
        Sge::new(self.addr(off), len as u32, self.mr.lkey())
    }

    /// A remote address for byte `off` under the arena registration.
    pub fn remote(&self, off: usize) -> RemoteAddr {
        RemoteAddr {
            addr: self.addr(off),
            rkey: self.mr.rkey(),
        }
    }

    /// Writes `data` at `off`.
    pub fn fill(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.arena.len());
        // SAFETY: in bounds (checked above); test memory is only read/written by the
        // provider while the test waits for it.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.arena.base().add(off), data.len())
        }
    }

    /// Reads `len` bytes at `off`.
    pub fn read(&self, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= self.arena.len());
        let mut v = vec![0u8; len];
        // SAFETY: as in `fill`.
        unsafe { std::ptr::copy_nonoverlapping(self.arena.base().add(off), v.as_mut_ptr(), len) }
        v
    }

    /// A copy of the whole arena.
    pub fn snapshot(&self) -> Vec<u8> {
        self.read(0, self.arena.len())
    }
}

/// One connected side.
pub struct Side<P: Provider> {
    pub qp: P::Qp,
    pub h: Host<P>,
}

impl<P: Provider> std::ops::Deref for Side<P> {
    type Target = Host<P>;
    fn deref(&self) -> &Host<P> {
        &self.h
    }
}

impl<P: Provider> std::ops::DerefMut for Side<P> {
    fn deref_mut(&mut self) -> &mut Host<P> {
        &mut self.h
    }
}

/// A connected pair: `s` accepted (server), `c` connected (client).
pub struct Pair<P: Provider> {
    pub s: Side<P>,
    pub c: Side<P>,
}

/// Polls both hosts until `cond` holds, failing the test after [`DEADLINE`].
pub fn wait_hosts<P: Provider>(
    a: &mut Host<P>,
    b: &mut Host<P>,
    what: &str,
    mut cond: impl FnMut(&Host<P>, &Host<P>) -> bool,
) {
    let end = Instant::now() + DEADLINE;
    loop {
        a.pump();
        b.pump();
        if cond(a, b) {
            return;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

impl<P: Provider> Pair<P> {
    /// Polls both sides once.
    pub fn pump(&mut self) {
        self.s.h.pump();
        self.c.h.pump();
    }

    /// Polls until `cond` holds (or fails the test after the deadline).
    pub fn wait(&mut self, what: &str, mut cond: impl FnMut(&Pair<P>) -> bool) {
        let end = Instant::now() + DEADLINE;
        loop {
            self.pump();
            if cond(self) {
                return;
            }
            assert!(
                Instant::now() < end,
                "timed out waiting for {what}: server {:?} {:?}, client {:?} {:?}",
                self.s.qp.state(),
                self.s.done,
                self.c.qp.state(),
                self.c.done
            );
            std::thread::yield_now();
        }
    }

    /// Waits for `n` completions on the server and `m` on the client, and takes them.
    pub fn completions(&mut self, n: usize, m: usize) -> (Vec<Completion>, Vec<Completion>) {
        self.wait("completions", |p| {
            p.s.done.len() >= n && p.c.done.len() >= m
        });
        let s: Vec<_> = self.s.done.drain(..).collect();
        let c: Vec<_> = self.c.done.drain(..).collect();
        assert_eq!(s.len(), n, "server completions: {s:?}");
        assert_eq!(c.len(), m, "client completions: {c:?}");
        (s, c)
    }

    /// Waits until both queue pairs are in the error state.
    pub fn wait_both_failed(&mut self) {
        self.wait("both queue pairs in error", |p| {
            p.s.qp.state().is_error() && p.c.qp.state().is_error()
        });
    }
}

/// Polls the two hosts until `which` (0 = a, 1 = b) has an event, and returns it.
fn next_event<P: Provider>(a: &mut Host<P>, b: &mut Host<P>, which: usize) -> Ev<P> {
    wait_hosts(a, b, "a connection event", |a, b| {
        [a, b][which].events.front().is_some()
    });
    [a, b][which].events.pop_front().expect("event present")
}

/// Builds two hosts, connects them with the given private data, and checks the CM
/// reports along the way. Returns the pair and the private data each side received.
pub fn connect_with<F: Fixture>(
    o: &Opts,
    client_pd: &[u8],
    server_pd: &[u8],
) -> (Pair<F::P>, CmPrivateData, CmPrivateData) {
    let addr = F::unique_addr();
    let mut s = Host::<F::P>::new::<F>(o, &o.server);
    let mut c = Host::<F::P>::new::<F>(o, &o.client);
    s.cm.listen(&addr).expect("listen");
    let cqp = c.connect(&addr, o.client, client_pd).expect("connect");
    assert_eq!(cqp.state(), QpState::Init);
    let (request, seen_by_server) = match next_event(&mut s, &mut c, 0) {
        CmEvent::ConnectRequest {
            request,
            private_data,
        } => (request, private_data),
        e => panic!("expected a connect request, got {e:?}"),
    };
    let sqp = s.accept(request, o.server, server_pd).expect("accept");
    let seen_by_client = match next_event(&mut s, &mut c, 1) {
        CmEvent::Established { conn, private_data } => {
            assert_eq!(conn, cqp.conn_id());
            private_data
        }
        e => panic!("expected Established at the client, got {e:?}"),
    };
    match next_event(&mut s, &mut c, 0) {
        CmEvent::Established { conn, .. } => assert_eq!(conn, sqp.conn_id()),
        e => panic!("expected Established at the server, got {e:?}"),
    }
    assert_eq!(cqp.state(), QpState::ReadyToSend);
    assert_eq!(sqp.state(), QpState::ReadyToSend);
    let pair = Pair {
        s: Side { qp: sqp, h: s },
        c: Side { qp: cqp, h: c },
    };
    (pair, seen_by_server, seen_by_client)
}

/// A connected pair built with `o`.
pub fn connect<F: Fixture>(o: &Opts) -> Pair<F::P> {
    connect_with::<F>(o, b"client", b"server").0
}

/// A connected pair with default options.
pub fn pair<F: Fixture>() -> Pair<F::P> {
    connect::<F>(&Opts::default())
}

/// Deterministic test bytes.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Splits `[off, off+len)` into three entries at uneven places (some may be empty).
fn three_sges<P: Provider>(h: &Host<P>, off: usize, len: usize) -> Vec<Sge> {
    let a = len / 3;
    let b = (len - a) / 2 + 1;
    let b = b.min(len - a);
    vec![
        h.sge(off, a),
        h.sge(off + a, b),
        h.sge(off + a + b, len - a - b),
    ]
}

const ODD_SIZES: [usize; 6] = [1, 3, 64, 4095, 4097, 65537];
const CANARY: u8 = 0xc5;

fn expect(c: &Completion, wr_id: u64, opcode: WcOpcode, status: WcStatus) {
    assert_eq!(
        (c.wr_id, c.opcode, c.status),
        (wr_id, opcode, status),
        "completion {c:?}"
    );
}

/// Checks a completion whose status may be any of `allowed` (a device capability
/// widened the documented status into a set).
fn expect_any(c: &Completion, wr_id: u64, opcode: WcOpcode, allowed: &[WcStatus]) {
    assert_eq!((c.wr_id, c.opcode), (wr_id, opcode), "completion {c:?}");
    assert!(
        allowed.contains(&c.status),
        "completion {c:?}: status not in {allowed:?}"
    );
}

/// The transport's capabilities, which both ends of a pair share.
fn caps<P: Provider>(p: &Pair<P>) -> DeviceCaps {
    let (s, c) = (p.s.dev.caps(), p.c.dev.caps());
    assert_eq!(
        (
            s.send_completes_on_transmit,
            s.exact_error_statuses,
            s.fast_reg,
            s.rnr_retry
        ),
        (
            c.send_completes_on_transmit,
            c.exact_error_statuses,
            c.fast_reg,
            c.rnr_retry
        ),
        "both ends share a transport"
    );
    c
}

/// What the side detecting a fault may report for it: exactly `exact`, or the set
/// documented on `DeviceCaps::exact_error_statuses`.
fn fault_statuses(caps: &DeviceCaps, exact: WcStatus) -> Vec<WcStatus> {
    use WcStatus::*;
    let mut v = vec![exact];
    if !caps.exact_error_statuses {
        v.extend_from_slice(match exact {
            LocalProtectionError => &[LocalQpOperationError, GeneralError][..],
            LocalLengthError => &[LocalQpOperationError][..],
            RemoteInvalidRequest => &[RemoteOperationError][..],
            LocalAccessError => &[RemoteInvalidRequest, LocalQpOperationError][..],
            _ => &[][..],
        });
    }
    v
}

/// What a requester may see for a fault its peer detects: the fault's statuses, plus,
/// where requests complete on transmit (`DeviceCaps::send_completes_on_transmit`),
/// Success or a flush.
fn requester_statuses(caps: &DeviceCaps, exact: WcStatus) -> Vec<WcStatus> {
    let mut v = fault_statuses(caps, exact);
    if caps.send_completes_on_transmit {
        v.extend_from_slice(&[WcStatus::Success, WcStatus::WrFlushed]);
    }
    v
}

/// Once the connection has failed, proves everything earlier was reported: a receive
/// on the server and a Send on the client posted now must flush, and they complete
/// after whatever their queues held. Returns everything each side reported, in order.
fn drain_after_failure<P: Provider>(p: &mut Pair<P>) -> (Vec<Completion>, Vec<Completion>) {
    p.wait_both_failed();
    let rb = [p.s.sge(0, 8)];
    p.s.qp
        .post_recv(&[RecvWr {
            wr_id: 0xdead,
            sgl: &rb,
        }])
        .unwrap();
    let sb = [p.c.sge(0, 8)];
    p.c.qp.post_send(&[SendWr::send(0xdead, &sb)]).unwrap();
    p.wait("the marker flushes", |p| {
        p.s.done.iter().any(|c| c.wr_id == 0xdead) && p.c.done.iter().any(|c| c.wr_id == 0xdead)
    });
    let mut s: Vec<_> = p.s.done.drain(..).collect();
    let mut c: Vec<_> = p.c.done.drain(..).collect();
    for (side, v) in [("server", &mut s), ("client", &mut c)] {
        let m = v.pop().expect("marker present");
        assert_eq!((m.wr_id, m.status), (0xdead, WcStatus::WrFlushed), "{side}");
        assert!(v.iter().all(|c| c.wr_id != 0xdead), "{side}: marker last");
    }
    (s, c)
}

/// A key the device never issued, for remote invalidation: `key`'s next generation where
/// the device checks keys whole (`DeviceCaps::invalidate_checks_generation`), else an
/// index no test reaches.
fn never_issued(caps: &DeviceCaps, key: u32) -> u32 {
    if caps.invalidate_checks_generation {
        next_key(key)
    } else {
        make_key(MAX_KEY_INDEX, key_generation(key))
    }
}

/// Where the device has no fast registration (`DeviceCaps::fast_reg` false), checks
/// that allocating a slot is refused with a typed error, and returns true: the rule
/// has nothing more to check there.
fn fast_reg_refused<F: Fixture>() -> bool {
    let dev = F::open_device();
    if dev.caps().fast_reg {
        return false;
    }
    let pd = dev.alloc_pd().expect("pd");
    match pd.alloc_fast_mr(REGION) {
        Err(FabricError::Exhausted { max: 0, .. }) => true,
        Err(e) => panic!("fast registration refused with {e}, want Exhausted {{ max: 0 }}"),
        Ok(_) => panic!("caps say no fast registration, yet alloc_fast_mr granted a slot"),
    }
}

static ADDR_SEQ: AtomicU64 = AtomicU64::new(0);

/// A process-unique number for fixtures building addresses.
pub fn unique_number() -> u64 {
    ADDR_SEQ.fetch_add(1, Ordering::Relaxed)
}

// ---------------------------------------------------------------------------------
// Connection management
// ---------------------------------------------------------------------------------

/// Private data travels with the request and the acceptance, each exactly up to the
/// device's limit for that message; one byte more is refused with a typed error before
/// anything is sent; sends are refused before the connection is established.
pub fn cm_exchanges_private_data<F: Fixture>() {
    let o = Opts::default();
    let limits = F::open_device().caps().private_data;
    let big_c = pattern(1, limits.connect);
    let big_s = pattern(2, limits.accept);
    let (p, at_server, at_client) = connect_with::<F>(&o, &big_c, &big_s);
    assert_eq!(at_server.as_bytes(), &big_c[..]);
    assert_eq!(at_client.as_bytes(), &big_s[..]);
    drop(p);

    let mut c = Host::<F::P>::new::<F>(&o, &o.client);
    let mut s = Host::<F::P>::new::<F>(&o, &o.server);
    let addr = F::unique_addr();
    s.cm.listen(&addr).expect("listen");
    let too_long = pattern(3, limits.connect + 1);
    match c.connect(&addr, o.client, &too_long) {
        Err(FabricError::PrivateDataTooLong { len, max }) => {
            assert_eq!((len, max), (limits.connect + 1, limits.connect))
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("{} bytes of private data were accepted", too_long.len()),
    }

    // A queue pair that is not connected yet cannot send.
    let mut qp = c.connect(&addr, o.client, b"").expect("connect");
    let buf = [c.sge(0, 8)];
    let err = qp.post_send(&[SendWr::send(1, &buf)]).unwrap_err();
    assert_eq!(err.posted, 0);
    assert_eq!(err.kind, PostErrorKind::InvalidState(QpState::Init));

    // An acceptance one byte over the limit is refused; the request it consumed is
    // then rejected (dropped), so the client hears of it.
    let request = match next_event(&mut s, &mut c, 0) {
        CmEvent::ConnectRequest { request, .. } => request,
        e => panic!("expected a connect request, got {e:?}"),
    };
    let too_long = pattern(4, limits.accept + 1);
    match s.accept(request, o.server, &too_long) {
        Err(FabricError::PrivateDataTooLong { len, max }) => {
            assert_eq!((len, max), (limits.accept + 1, limits.accept))
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("{} bytes of accept private data were taken", too_long.len()),
    }
    match next_event(&mut s, &mut c, 1) {
        CmEvent::Rejected { conn, .. } => assert_eq!(conn, qp.conn_id()),
        e => panic!("expected Rejected after the refused accept, got {e:?}"),
    }
}

/// Checks a rejection's private data as the device delivers it: exactly what was sent,
/// or (IB CM REJ, no length on the wire) that followed by zeros up to the field size.
fn assert_reject_data(limits: PrivateDataLimits, got: &CmPrivateData, sent: &[u8]) {
    if limits.reject_padded {
        assert_eq!(got.len(), limits.reject, "the whole REJ field arrives");
        assert_eq!(&got.as_bytes()[..sent.len()], sent);
        assert!(
            got.as_bytes()[sent.len()..].iter().all(|&b| b == 0),
            "padding after the sent bytes is zero: {got:?}"
        );
    } else {
        assert_eq!(got.as_bytes(), sent);
    }
}

/// A rejection carries the server's private data, up to the device's reject limit; one
/// byte more is refused with a typed error; the client's queue pair fails and flushes
/// its receives.
pub fn cm_reject_delivers_private_data<F: Fixture>() {
    let o = Opts::default();
    let addr = F::unique_addr();
    let mut s = Host::<F::P>::new::<F>(&o, &o.server);
    let mut c = Host::<F::P>::new::<F>(&o, &o.client);
    let limits = s.dev.caps().private_data;
    s.cm.listen(&addr).expect("listen");

    // Short private data (padded where the transport pads).
    let mut qp = c.connect(&addr, o.client, b"hi").expect("connect");
    let rb = [c.sge(0, 64)];
    qp.post_recv(&[RecvWr { wr_id: 9, sgl: &rb }])
        .expect("post_recv before the connection is up");
    let request = match next_event(&mut s, &mut c, 0) {
        CmEvent::ConnectRequest { request, .. } => request,
        e => panic!("expected a connect request, got {e:?}"),
    };
    s.cm.reject(request, b"go away").expect("reject");
    match next_event(&mut s, &mut c, 1) {
        CmEvent::Rejected { conn, private_data } => {
            assert_eq!(conn, qp.conn_id());
            assert_reject_data(limits, &private_data, b"go away");
        }
        e => panic!("expected Rejected, got {e:?}"),
    }
    assert!(qp.state().is_error());
    wait_hosts(&mut s, &mut c, "flushed receive", |_, c| !c.done.is_empty());
    expect(&c.done[0], 9, WcOpcode::Recv, WcStatus::WrFlushed);

    // Exactly the limit arrives whole; one byte more is refused before it is sent. Each
    // attempt uses a fresh client, so no completion-queue share is still held.
    let mut c = Host::<F::P>::new::<F>(&o, &o.client);
    let qp = c.connect(&addr, o.client, b"again").expect("connect");
    let request = match next_event(&mut s, &mut c, 0) {
        CmEvent::ConnectRequest { request, .. } => request,
        e => panic!("expected a connect request, got {e:?}"),
    };
    let full = pattern(5, limits.reject);
    let too_long = pattern(6, limits.reject + 1);
    match s.cm.reject(request, &too_long) {
        Err(FabricError::PrivateDataTooLong { len, max }) => {
            assert_eq!((len, max), (limits.reject + 1, limits.reject))
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(()) => panic!("{} bytes of reject private data were taken", too_long.len()),
    }
    // The refused request was dropped, which rejects it without private data.
    match next_event(&mut s, &mut c, 1) {
        CmEvent::Rejected { conn, private_data } => {
            assert_eq!(conn, qp.conn_id());
            assert_reject_data(limits, &private_data, b"");
        }
        e => panic!("expected Rejected, got {e:?}"),
    }
    let mut c = Host::<F::P>::new::<F>(&o, &o.client);
    let qp = c.connect(&addr, o.client, b"third").expect("connect");
    let request = match next_event(&mut s, &mut c, 0) {
        CmEvent::ConnectRequest { request, .. } => request,
        e => panic!("expected a connect request, got {e:?}"),
    };
    s.cm.reject(request, &full).expect("reject at the limit");
    match next_event(&mut s, &mut c, 1) {
        CmEvent::Rejected { conn, private_data } => {
            assert_eq!(conn, qp.conn_id());
            assert_eq!(private_data.as_bytes(), &full[..]);
        }
        e => panic!("expected Rejected, got {e:?}"),
    }
}

/// Both sides of a connection know who the other is: the same local process (shm,
/// both ends here) or the same host's IP (siw, verbs: both ends on this host), or,
/// where the provider cannot tell, neither does.
pub fn cm_reports_the_peer<F: Fixture>() {
    let p = pair::<F>();
    let (c, s) = (p.c.qp.peer_addr(), p.s.qp.peer_addr());
    if !F::REPORTS_PEER {
        assert_eq!((c, s), (PeerAddr::Unknown, PeerAddr::Unknown));
        return;
    }
    match (c, s) {
        (PeerAddr::Local { pid, uid }, PeerAddr::Local { pid: p2, uid: u2 }) => {
            assert_eq!((pid, p2), (std::process::id(), std::process::id()));
            // SAFETY: geteuid has no inputs and cannot fail.
            let me = unsafe { libc::geteuid() };
            assert_eq!((uid, u2), (me, me));
        }
        (PeerAddr::Ip(to_server), PeerAddr::Ip(from_client)) => {
            assert_eq!(to_server.ip(), from_client.ip(), "one host, one address");
            assert_ne!(from_client.port(), 0, "the client's own port");
        }
        other => panic!("both sides name their peer alike: {other:?}"),
    }
}

/// Connecting where nobody listens is reported as Unreachable.
pub fn cm_unreachable<F: Fixture>() {
    let o = Opts::default();
    let mut s = Host::<F::P>::new::<F>(&o, &o.server);
    let mut c = Host::<F::P>::new::<F>(&o, &o.client);
    let qp = c
        .connect(&F::unique_addr(), o.client, b"")
        .expect("connect starts");
    match next_event(&mut s, &mut c, 1) {
        CmEvent::Unreachable { conn } => assert_eq!(conn, qp.conn_id()),
        CmEvent::Rejected { conn, .. } => assert_eq!(conn, qp.conn_id()),
        e => panic!("expected Unreachable, got {e:?}"),
    }
    assert!(qp.state().is_error());
}

/// Disconnecting reports Disconnected on both sides and flushes both queue pairs,
/// including requests posted afterwards.
pub fn cm_disconnect_flushes_both_sides<F: Fixture>() {
    let mut p = pair::<F>();
    let sb = [p.s.sge(0, 64)];
    let cb = [p.c.sge(0, 64)];
    p.s.qp.post_recv(&[RecvWr { wr_id: 1, sgl: &sb }]).unwrap();
    p.c.qp.post_recv(&[RecvWr { wr_id: 2, sgl: &cb }]).unwrap();
    let conn = p.c.qp.conn_id();
    p.c.cm.disconnect(conn).expect("disconnect");
    p.wait("Disconnected on both sides", |p| {
        let has = |h: &Host<F::P>| {
            h.events
                .iter()
                .any(|e| matches!(e, CmEvent::Disconnected { .. }))
        };
        has(&p.s) && has(&p.c)
    });
    assert!(p.s.qp.state().is_error() && p.c.qp.state().is_error());
    assert!(matches!(
        p.c.cm.disconnect(conn),
        Err(FabricError::UnknownConn(_))
    ));
    p.c.qp.post_send(&[SendWr::send(3, &cb)]).unwrap();
    let (s, mut c) = p.completions(1, 2);
    // Send-queue and receive-queue completions on one CQ are not ordered between them.
    c.sort_by_key(|c| c.wr_id);
    expect(&s[0], 1, WcOpcode::Recv, WcStatus::WrFlushed);
    expect(&c[0], 2, WcOpcode::Recv, WcStatus::WrFlushed);
    expect(&c[1], 3, WcOpcode::Send, WcStatus::WrFlushed);
}

/// Requests posted after the peer closed, but before this side has polled anything
/// that says so (its queue pair still looks ready), complete exactly once each, as
/// flushed. Kernel siw and rxe flush a userspace queue pair's queues when it enters the
/// error state and never see a request written into them afterwards; the verbs
/// provider completes those itself after a grace (`fabric/verbs/cq.rs`, FLUSH_GRACE),
/// or a connection draining after its peer's close waits for them for ever.
pub fn posts_racing_the_peers_close_complete_once<F: Fixture>() {
    let mut p = pair::<F>();
    let early = [p.s.sge(0, 64)];
    let late_send = [p.s.sge(64, 64)];
    let late_recv = [p.s.sge(128, 64)];
    p.s.qp
        .post_recv(&[RecvWr {
            wr_id: 1,
            sgl: &early,
        }])
        .unwrap();
    let conn = p.c.qp.conn_id();
    p.c.cm.disconnect(conn).expect("disconnect");
    // Only the client is polled, for a while: the server's side learns nothing until
    // it polls. A kernel device takes the close in meanwhile without being polled (the
    // client's Disconnected may wait for the server's side on iWARP); a userspace one
    // only when polled, so there the requests below are simply flushed later.
    let end = Instant::now() + Duration::from_millis(300);
    while Instant::now() < end {
        p.c.h.pump();
        std::thread::yield_now();
    }
    let mut expected = vec![1];
    if p.s.qp.post_send(&[SendWr::send(2, &late_send)]).is_ok() {
        expected.push(2);
    }
    if p.s
        .qp
        .post_recv(&[RecvWr {
            wr_id: 3,
            sgl: &late_recv,
        }])
        .is_ok()
    {
        expected.push(3);
    }
    p.wait("a completion for every request posted", |p| {
        p.s.done.len() >= expected.len()
    });
    // Anything reported twice would arrive by now.
    let settle = Instant::now() + Duration::from_millis(300);
    while Instant::now() < settle {
        p.pump();
        std::thread::yield_now();
    }
    let mut got: Vec<u64> = p.s.done.iter().map(|c| c.wr_id).collect();
    got.sort_unstable();
    assert_eq!(got, expected, "one completion per request: {:?}", p.s.done);
    for c in &p.s.done {
        assert_eq!(c.status, WcStatus::WrFlushed, "{c:?}");
    }
    assert!(p.c.done.is_empty(), "{:?}", p.c.done);
}

// ---------------------------------------------------------------------------------
// Data integrity
// ---------------------------------------------------------------------------------

/// Sends of odd sizes, gathered from three entries and scattered into three, arrive
/// byte for byte, and nothing past the message is touched.
pub fn send_recv_integrity<F: Fixture>() {
    let o = Opts {
        client: QpConfig {
            caps: QpCaps {
                max_send_sge: 3,
                max_recv_sge: 3,
                ..QpCaps::default()
            },
            ..QpConfig::default()
        },
        server: QpConfig {
            caps: QpCaps {
                max_send_sge: 3,
                max_recv_sge: 3,
                ..QpCaps::default()
            },
            ..QpConfig::default()
        },
        ..Opts::default()
    };
    let mut p = connect::<F>(&o);
    for (i, &len) in ODD_SIZES.iter().enumerate() {
        for dir in 0..2 {
            let (tx, rx) = if dir == 0 {
                (&mut p.c, &mut p.s)
            } else {
                (&mut p.s, &mut p.c)
            };
            let data = pattern(i as u64 * 2 + dir, len);
            tx.fill(0, &data);
            let room = len + 100;
            rx.fill(200_000, &vec![CANARY; room + 64]);
            let rsg = three_sges(rx, 200_000, room);
            rx.qp
                .post_recv(&[RecvWr {
                    wr_id: 100 + i as u64,
                    sgl: &rsg,
                }])
                .unwrap();
            let ssg = three_sges(tx, 0, len);
            tx.qp.post_send(&[SendWr::send(i as u64, &ssg)]).unwrap();
            let (s, c) = p.completions(1, 1);
            let (rxc, txc) = if dir == 0 {
                (&s[0], &c[0])
            } else {
                (&c[0], &s[0])
            };
            expect(txc, i as u64, WcOpcode::Send, WcStatus::Success);
            expect(rxc, 100 + i as u64, WcOpcode::Recv, WcStatus::Success);
            assert_eq!(rxc.byte_len as usize, len);
            assert_eq!(rxc.invalidated_rkey, None);
            let rx = if dir == 0 { &p.s } else { &p.c };
            assert!(
                rx.read(200_000, len) == data,
                "payload of {len} bytes differs"
            );
            assert!(
                rx.read(200_000 + len, room + 64 - len)
                    .iter()
                    .all(|&b| b == CANARY),
                "bytes past a {len}-byte message were written"
            );
        }
    }
}

/// A receive scattered over two entries far apart in the registration (the shape of
/// a send-based DDP receive: a header segment, then a DDP segment elsewhere) splits the
/// message at the first entry's end: its first octets fill the first entry, the rest
/// starts at the second's start, and nothing between or past them is written. A
/// message that fits the first entry leaves the second untouched.
pub fn scattered_receive_splits_at_entry_boundaries<F: Fixture>() {
    let caps = QpCaps {
        max_send_sge: 2,
        max_recv_sge: 2,
        ..QpCaps::default()
    };
    let cfg = QpConfig {
        caps,
        ..QpConfig::default()
    };
    let o = Opts {
        client: cfg,
        server: cfg,
        ..Opts::default()
    };
    let mut p = connect::<F>(&o);
    // Header entry at 100 000 (1024 octets), DDP entry at 300 000 (70 000 octets).
    let (head_at, head_len, seg_at, seg_len) = (100_000, 1024, 300_000, 70_000);
    for (i, &len) in [1000usize, 1024, 1025, 1024 + 65_537, head_len + seg_len]
        .iter()
        .enumerate()
    {
        let data = pattern(40 + i as u64, len);
        p.c.fill(0, &data);
        p.s.fill(
            head_at - 64,
            &vec![CANARY; seg_at + seg_len + 64 - (head_at - 64)],
        );
        let rsg = [p.s.sge(head_at, head_len), p.s.sge(seg_at, seg_len)];
        p.s.qp
            .post_recv(&[RecvWr {
                wr_id: 7,
                sgl: &rsg,
            }])
            .unwrap();
        let ssg = [p.c.sge(0, len)];
        p.c.qp.post_send(&[SendWr::send(8, &ssg)]).unwrap();
        let (s, c) = p.completions(1, 1);
        expect(&c[0], 8, WcOpcode::Send, WcStatus::Success);
        expect(&s[0], 7, WcOpcode::Recv, WcStatus::Success);
        assert_eq!(s[0].byte_len as usize, len);
        let first = len.min(head_len);
        assert!(
            p.s.read(head_at, first) == data[..first],
            "{len}: header entry"
        );
        let rest = len - first;
        assert!(p.s.read(seg_at, rest) == data[first..], "{len}: DDP entry");
        let untouched = |at: usize, n: usize| p.s.read(at, n).iter().all(|&b| b == CANARY);
        assert!(
            untouched(head_at - 64, 64),
            "{len}: before the header entry"
        );
        assert!(
            untouched(head_at + head_len, seg_at - head_at - head_len),
            "{len}: between the entries"
        );
        assert!(
            untouched(seg_at + rest, seg_len - rest + 64),
            "{len}: past the message in the DDP entry"
        );
    }
}

/// RDMA Writes gathered from three entries land exactly at the target address.
pub fn rdma_write_integrity<F: Fixture>() {
    let mut p = pair::<F>();
    for (i, &len) in ODD_SIZES.iter().enumerate() {
        let data = pattern(10 + i as u64, len);
        p.c.fill(0, &data);
        let at = 300_000 + i;
        p.s.fill(at - 16, &vec![CANARY; len + 32]);
        let sg = three_sges(&p.c, 0, len);
        let remote = p.s.remote(at);
        p.c.qp
            .post_send(&[SendWr::write(i as u64, &sg, remote)])
            .unwrap();
        let (_, c) = p.completions(0, 1);
        expect(&c[0], i as u64, WcOpcode::RdmaWrite, WcStatus::Success);
        assert!(p.s.read(at, len) == data, "{len}-byte write differs");
        assert!(p.s.read(at - 16, 16).iter().all(|&b| b == CANARY));
        assert!(p.s.read(at + len, 16).iter().all(|&b| b == CANARY));
    }
}

/// RDMA Reads scattered into three entries bring back exactly the remote bytes.
pub fn rdma_read_integrity<F: Fixture>() {
    let mut p = pair::<F>();
    for (i, &len) in ODD_SIZES.iter().enumerate() {
        let data = pattern(20 + i as u64, len);
        let at = 400_000 + 3 * i;
        p.s.fill(at, &data);
        p.c.fill(100_000 - 16, &vec![CANARY; len + 32]);
        let sg = three_sges(&p.c, 100_000, len);
        let remote = p.s.remote(at);
        p.c.qp
            .post_send(&[SendWr::read(i as u64, &sg, remote)])
            .unwrap();
        let (_, c) = p.completions(0, 1);
        expect(&c[0], i as u64, WcOpcode::RdmaRead, WcStatus::Success);
        assert_eq!(c[0].byte_len as usize, len);
        assert!(p.c.read(100_000, len) == data, "{len}-byte read differs");
        assert!(p.c.read(100_000 - 16, 16).iter().all(|&b| b == CANARY));
        assert!(p.c.read(100_000 + len, 16).iter().all(|&b| b == CANARY));
    }
}

/// A chain posted with one call completes in posting order.
pub fn chain_completes_in_order<F: Fixture>() {
    let mut p = pair::<F>();
    p.c.fill(0, &pattern(30, 300));
    p.s.fill(500_000, &pattern(31, 100));
    let rb = [p.s.sge(600_000, 100)];
    p.s.qp
        .post_recv(&[RecvWr {
            wr_id: 50,
            sgl: &rb,
        }])
        .unwrap();
    let w1 = [p.c.sge(0, 100)];
    let w2 = [p.c.sge(100, 100)];
    let rd = [p.c.sge(1000, 100)];
    let sd = [p.c.sge(200, 100)];
    let chain = [
        SendWr::write(1, &w1, p.s.remote(700_000)),
        SendWr::write(2, &w2, p.s.remote(700_100)),
        SendWr::read(3, &rd, p.s.remote(500_000)),
        SendWr::send(4, &sd),
    ];
    p.c.qp.post_send(&chain).unwrap();
    let (s, c) = p.completions(1, 4);
    let ids: Vec<u64> = c.iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, vec![1, 2, 3, 4]);
    assert!(c.iter().all(|c| c.status == WcStatus::Success));
    expect(&s[0], 50, WcOpcode::Recv, WcStatus::Success);
    assert_eq!(p.s.read(700_000, 200), p.c.read(0, 200));
    assert_eq!(p.c.read(1000, 100), p.s.read(500_000, 100));
    assert_eq!(p.s.read(600_000, 100), p.c.read(200, 100));
}

/// Data written before a Send is visible when the receiver sees the Send's completion
/// (checked with each side on its own thread, many times over). Every round has its
/// own receive buffer and its own target, and every receive is posted before the
/// client starts, so no device can race: neither receiver-not-ready nor a later round
/// overwriting an earlier one's bytes.
pub fn writes_are_visible_before_the_following_send<F: Fixture>() {
    const LEN: usize = 4096;
    const TARGET: usize = 65536;
    const SOURCE: usize = 8192;
    let Pair {
        s: mut srv,
        c: mut cli,
    } = pair::<F>();
    let rounds = u64::from(QpCaps::default().max_recv_wr);
    assert!(
        TARGET + rounds as usize * LEN <= srv.arena.len()
            && SOURCE + rounds as usize * LEN <= cli.arena.len()
    );
    let RemoteAddr {
        addr: cli_target_base,
        rkey: cli_target_rkey,
    } = srv.remote(TARGET);
    for round in 0..rounds {
        let rb = [srv.sge(8 * round as usize, 8)];
        srv.qp
            .post_recv(&[RecvWr {
                wr_id: round,
                sgl: &rb,
            }])
            .unwrap();
    }
    // Software providers make progress only while polled: the server keeps polling
    // until the client has its last completion (it may still need the server's answer).
    let client_done = std::sync::atomic::AtomicBool::new(false);
    let client_done = &client_done;
    let server = move || {
        let end = Instant::now() + DEADLINE * 2;
        let (mut seen, mut stale) = (0, 0);
        while seen < rounds || !client_done.load(Ordering::Acquire) {
            assert!(Instant::now() < end, "server timed out at round {seen}");
            srv.pump();
            for c in std::mem::take(&mut srv.h.done) {
                expect(&c, seen, WcOpcode::Recv, WcStatus::Success);
                let at = 8 * seen as usize;
                let round = u64::from_le_bytes(srv.read(at, 8).try_into().unwrap());
                assert_eq!(round, seen, "Sends arrive in order");
                let target = TARGET + round as usize * LEN;
                if srv.read(target, LEN) != pattern(1000 + round, LEN) {
                    stale += 1;
                }
                seen += 1;
            }
            std::thread::yield_now();
        }
        (stale, srv)
    };
    let client = move || {
        let end = Instant::now() + DEADLINE * 2;
        for round in 0..rounds {
            let src = SOURCE + round as usize * LEN;
            let tag = 4096 + 8 * round as usize;
            cli.fill(src, &pattern(1000 + round, LEN));
            cli.fill(tag, &round.to_le_bytes());
            let w = [cli.sge(src, LEN)];
            let s = [cli.sge(tag, 8)];
            let target = RemoteAddr {
                addr: cli_target_base + (round as usize * LEN) as u64,
                rkey: cli_target_rkey,
            };
            let chain = [
                SendWr::write(round, &w, target).with_flags(SendFlags::NONE),
                SendWr::send(round, &s),
            ];
            cli.qp.post_send(&chain).unwrap();
            loop {
                assert!(Instant::now() < end, "client timed out at round {round}");
                cli.pump();
                if let Some(c) = cli.h.done.pop() {
                    assert_eq!((c.wr_id, c.status), (round, WcStatus::Success));
                    break;
                }
                std::thread::yield_now();
            }
        }
        client_done.store(true, Ordering::Release);
        cli
    };
    let (stale, _srv, _cli) = std::thread::scope(|sc| {
        let s = sc.spawn(server);
        let c = sc.spawn(client);
        let cli = c.join().expect("client thread");
        let (stale, srv) = s.join().expect("server thread");
        (stale, srv, cli)
    });
    assert_eq!(stale, 0, "Sends overtook the Writes posted before them");
}

// ---------------------------------------------------------------------------------
// Queues
// ---------------------------------------------------------------------------------

fn small_queues(depth: u32) -> Opts {
    let cfg = QpConfig {
        caps: QpCaps {
            max_send_wr: depth,
            max_recv_wr: depth,
            max_send_sge: 2,
            max_recv_sge: 2,
        },
        ..QpConfig::default()
    };
    Opts {
        server: cfg,
        client: cfg,
        ..Opts::default()
    }
}

/// Posting past the queue depth is refused with the count of what was posted; the
/// posted part still completes.
pub fn post_beyond_depth_is_refused<F: Fixture>() {
    let mut p = connect::<F>(&small_queues(4));
    let b = [p.c.sge(0, 8)];
    let remote = p.s.remote(0);
    let chain: Vec<SendWr<'_>> = (0..6).map(|i| SendWr::write(i, &b, remote)).collect();
    let err = p.c.qp.post_send(&chain).unwrap_err();
    assert_eq!(err.posted, 4);
    assert_eq!(err.kind, PostErrorKind::QueueFull { depth: 4 });
    let (_, c) = p.completions(0, 4);
    assert_eq!(
        c.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    p.c.qp.post_send(&chain[..4]).expect("slots are free again");
    p.completions(0, 4);

    let three = [p.c.sge(0, 1), p.c.sge(1, 1), p.c.sge(2, 1)];
    let err = p.c.qp.post_send(&[SendWr::send(9, &three)]).unwrap_err();
    assert_eq!(
        (err.posted, err.kind),
        (0, PostErrorKind::TooManySge { given: 3, max: 2 })
    );
    let err =
        p.s.qp
            .post_recv(&[RecvWr {
                wr_id: 9,
                sgl: &three,
            }])
            .unwrap_err();
    assert_eq!(err.kind, PostErrorKind::TooManySge { given: 3, max: 2 });

    let rb = [p.s.sge(0, 8)];
    let recvs: Vec<RecvWr<'_>> = (0..5).map(|i| RecvWr { wr_id: i, sgl: &rb }).collect();
    let err = p.s.qp.post_recv(&recvs).unwrap_err();
    assert_eq!(
        (err.posted, err.kind),
        (4, PostErrorKind::QueueFull { depth: 4 })
    );
    let fr = SendWr {
        wr_id: 9,
        op: SendOp::LocalInvalidate { key: 0 },
        sgl: &b,
        flags: SendFlags::SIGNALED,
    };
    assert!(matches!(
        p.c.qp.post_send(&[fr]).unwrap_err().kind,
        PostErrorKind::Malformed(_)
    ));
    assert_eq!(
        p.c.qp.state(),
        QpState::ReadyToSend,
        "refused posts do no harm"
    );
}

/// Unsignaled requests report nothing and keep their slots until a later signaled
/// request completes; a queue of only unsignaled requests stays full, as on a NIC.
pub fn unsignaled_requests_hold_their_slots<F: Fixture>() {
    let mut p = connect::<F>(&small_queues(4));
    let b = [p.c.sge(0, 8)];
    p.c.fill(0, &[1, 2, 3, 4, 5, 6, 7, 8]);
    let chain: Vec<SendWr<'_>> = (0..4)
        .map(|i| {
            let w = SendWr::write(i, &b, p.s.remote(64 * i as usize));
            if i == 3 {
                w
            } else {
                w.with_flags(SendFlags::NONE)
            }
        })
        .collect();
    p.c.qp.post_send(&chain).unwrap();
    let (_, c) = p.completions(0, 1);
    expect(&c[0], 3, WcOpcode::RdmaWrite, WcStatus::Success);
    for i in 0..4 {
        assert_eq!(p.s.read(64 * i, 8), vec![1, 2, 3, 4, 5, 6, 7, 8]);
    }

    // Four unsignaled writes, each from its own source to its own destination, so the
    // last destination changing proves all four executed (they execute in order).
    let srcs: Vec<[Sge; 1]> = (0..4).map(|i| [p.c.sge(4096 + 64 * i, 8)]).collect();
    for i in 0..4 {
        p.c.fill(4096 + 64 * i, &[20 + i as u8; 8]);
    }
    let unsignaled: Vec<SendWr<'_>> = (0..4)
        .map(|i| {
            SendWr::write(10 + i as u64, &srcs[i], p.s.remote(8192 + 64 * i))
                .with_flags(SendFlags::NONE)
        })
        .collect();
    p.c.qp
        .post_send(&unsignaled)
        .expect("the signaled completion freed all four");
    p.wait("unsignaled writes executed", |p| {
        p.s.read(8192 + 64 * 3, 8) == vec![23; 8]
    });
    for _ in 0..100 {
        p.pump();
    }
    assert!(p.c.done.is_empty(), "unsignaled successes are not reported");
    let err = p.c.qp.post_send(&unsignaled[..1]).unwrap_err();
    assert_eq!(
        (err.posted, err.kind),
        (0, PostErrorKind::QueueFull { depth: 4 })
    );
}

// ---------------------------------------------------------------------------------
// Receiver not ready, length errors, error state
// ---------------------------------------------------------------------------------

/// A Send finding no receive is retried `rnr_retry` times, then fails with
/// RnrRetryExceeded at the sender (or, where requests complete on transmit, succeeds
/// there while the receiver terminates), and both queue pairs go to error; a receive
/// posted afterwards is flushed and nothing is placed.
pub fn send_without_receive_exceeds_rnr_retries<F: Fixture>() {
    let o = Opts {
        client: QpConfig {
            rnr_retry: 2,
            ..QpConfig::default()
        },
        server: QpConfig {
            min_rnr_timer: Duration::from_millis(1),
            ..QpConfig::default()
        },
        ..Opts::default()
    };
    let mut p = connect::<F>(&o);
    let caps = caps(&p);
    p.c.fill(0, &pattern(41, 16));
    let b = [p.c.sge(0, 16)];
    p.c.qp.post_send(&[SendWr::send(7, &b)]).unwrap();
    let (_, c) = p.completions(0, 1);
    let allowed = requester_statuses(&caps, WcStatus::RnrRetryExceeded);
    expect_any(&c[0], 7, WcOpcode::Send, &allowed);
    p.wait_both_failed();
    let rb = [p.s.sge(0, 16)];
    p.s.qp.post_recv(&[RecvWr { wr_id: 8, sgl: &rb }]).unwrap();
    p.c.qp.post_send(&[SendWr::send(9, &b)]).unwrap();
    let (s, c) = p.completions(1, 1);
    expect(&s[0], 8, WcOpcode::Recv, WcStatus::WrFlushed);
    expect(&c[0], 9, WcOpcode::Send, WcStatus::WrFlushed);
    assert_ne!(p.s.read(0, 16), pattern(41, 16), "nothing was placed");
}

/// With retries left (here: infinite), a Send waits for the receive and then succeeds
/// on transports that retry (`DeviceCaps::rnr_retry`: InfiniBand, RoCE, shm, sim). On
/// iWARP, which has no receiver-not-ready retry (RFC 5041 §7: an untagged message with no
/// buffer is a DDP error), the same Send fails at once with RnrRetryExceeded even with
/// infinite retries (or, where requests complete on transmit, succeeds at the sender
/// while the receiver terminates), both queue pairs go to error, and the late receive
/// is flushed.
pub fn send_waits_for_a_late_receive<F: Fixture>() {
    let o = Opts {
        client: QpConfig {
            rnr_retry: RNR_RETRY_INFINITE,
            ..QpConfig::default()
        },
        ..Opts::default()
    };
    let mut p = connect::<F>(&o);
    let retries = p.s.dev.caps().rnr_retry;
    assert_eq!(
        retries,
        p.c.dev.caps().rnr_retry,
        "both ends share a transport"
    );
    p.c.fill(0, &pattern(40, 100));
    let b = [p.c.sge(0, 100)];
    p.c.qp.post_send(&[SendWr::send(1, &b)]).unwrap();
    if !retries {
        let (_, c) = p.completions(0, 1);
        let allowed = requester_statuses(&caps(&p), WcStatus::RnrRetryExceeded);
        expect_any(&c[0], 1, WcOpcode::Send, &allowed);
        p.wait_both_failed();
        let rb = [p.s.sge(0, 100)];
        p.s.qp.post_recv(&[RecvWr { wr_id: 2, sgl: &rb }]).unwrap();
        let (s, _) = p.completions(1, 0);
        expect(&s[0], 2, WcOpcode::Recv, WcStatus::WrFlushed);
        assert_ne!(p.s.read(0, 100), pattern(40, 100), "nothing was placed");
        return;
    }
    for _ in 0..200 {
        p.pump();
    }
    assert!(
        p.c.done.is_empty() && p.s.done.is_empty(),
        "nothing can complete yet"
    );
    assert_eq!(p.c.qp.state(), QpState::ReadyToSend);
    let rb = [p.s.sge(0, 100)];
    p.s.qp.post_recv(&[RecvWr { wr_id: 2, sgl: &rb }]).unwrap();
    let (s, c) = p.completions(1, 1);
    expect(&s[0], 2, WcOpcode::Recv, WcStatus::Success);
    expect(&c[0], 1, WcOpcode::Send, WcStatus::Success);
    assert_eq!(p.s.read(0, 100), pattern(40, 100));
}

/// A Send longer than the receive fails at the receiver with LocalLengthError and at
/// the sender with RemoteInvalidRequest (statuses per `DeviceCaps`); both queue pairs
/// go to error and flush, and nothing lands past the receive buffer.
pub fn send_longer_than_receive_fails_both_sides<F: Fixture>() {
    let mut p = pair::<F>();
    let caps = caps(&p);
    p.s.fill(100, &[CANARY; 64]);
    let rb = [p.s.sge(0, 100)];
    p.s.qp
        .post_recv(&[RecvWr { wr_id: 1, sgl: &rb }, RecvWr { wr_id: 2, sgl: &rb }])
        .unwrap();
    let b = [p.c.sge(0, 101)];
    let ok = [p.c.sge(0, 10)];
    p.c.qp
        .post_send(&[SendWr::send(3, &b), SendWr::send(4, &ok)])
        .unwrap();
    let (s, c) = p.completions(2, 2);
    let receiver = fault_statuses(&caps, WcStatus::LocalLengthError);
    expect_any(&s[0], 1, WcOpcode::Recv, &receiver);
    expect(&s[1], 2, WcOpcode::Recv, WcStatus::WrFlushed);
    let sender = requester_statuses(&caps, WcStatus::RemoteInvalidRequest);
    expect_any(&c[0], 3, WcOpcode::Send, &sender);
    let after: &[WcStatus] = if caps.send_completes_on_transmit {
        &[WcStatus::Success, WcStatus::WrFlushed]
    } else {
        &[WcStatus::WrFlushed]
    };
    expect_any(&c[1], 4, WcOpcode::Send, after);
    p.wait_both_failed();
    assert_eq!(
        p.s.read(100, 64),
        vec![CANARY; 64],
        "written past the receive"
    );
}

// ---------------------------------------------------------------------------------
// Remote access
// ---------------------------------------------------------------------------------

/// The ways a remote key can be wrong.
#[derive(Debug, Clone, Copy)]
pub enum BadKey {
    /// A key that was never issued (the arena's key with another generation).
    Unknown,
    /// A fast-registration key after local invalidation.
    Invalidated,
    /// A key registered in another protection domain of the target.
    WrongPd,
    /// A key without the access right the operation needs.
    NoAccess,
    /// Runs past the end of the registration.
    PastEnd,
    /// Starts before the registration.
    BeforeStart,
    /// Longer than the registration.
    TooLong,
    /// A guess next to a real key: the slot index below, same generation (where the
    /// target's own whole-arena registration lives, when keys are predictable).
    IndexBelow,
    /// A guess next to a real key: the slot index above, same generation.
    IndexAbove,
    /// A guess next to a real key: the previous generation of the same slot.
    GenerationBelow,
    /// A guess next to a real key: the top index bit flipped (a tag bit, where the
    /// table has fewer slots than the index can name).
    TagFlipped,
    /// A guess next to a real key: the index bits above the lowest 8 cleared (the key
    /// the slot would have without random tag bits).
    TagCleared,
}

/// Guesses a peer holding one key can make about its neighbours.
const GUESSES: [BadKey; 5] = [
    BadKey::IndexBelow,
    BadKey::IndexAbove,
    BadKey::GenerationBelow,
    BadKey::TagFlipped,
    BadKey::TagCleared,
];

const REGION: usize = 4096;
const REGION_AT: usize = 65536;

/// Sets up the bad remote range on the server and returns it with its length.
fn bad_remote<F: Fixture>(
    p: &mut Pair<F::P>,
    bad: BadKey,
    write: bool,
    keep: &mut Vec<<F::P as Provider>::Mr>,
) -> (RemoteAddr, usize) {
    let right = if write {
        Access::LOCAL_WRITE | Access::REMOTE_WRITE
    } else {
        Access::REMOTE_READ
    };
    let wrong = if write {
        Access::REMOTE_READ
    } else {
        Access::LOCAL_WRITE | Access::REMOTE_WRITE
    };
    let reg = |p: &Pair<F::P>, access| {
        p.s.pd
            .reg_mr(&p.s.arena, REGION_AT, REGION, access)
            .expect("reg_mr")
    };
    let at = |mr: &<F::P as Provider>::Mr, off: i64| RemoteAddr {
        addr: (mr.addr() as i64 + off) as u64,
        rkey: mr.rkey(),
    };
    match bad {
        BadKey::Unknown => {
            let mr = reg(p, right);
            let mut r = at(&mr, 0);
            r.rkey = next_key(r.rkey);
            keep.push(mr);
            (r, 8)
        }
        BadKey::Invalidated => {
            let mut fmr = p.s.pd.alloc_fast_mr(REGION).expect("alloc_fast_mr");
            let key = fmr.rekey();
            let region = p.s.sge(REGION_AT, REGION);
            let wrs = [
                SendWr {
                    wr_id: 90,
                    op: SendOp::FastReg {
                        key,
                        region,
                        access: right,
                    },
                    sgl: &[],
                    flags: SendFlags::SIGNALED,
                },
                SendWr {
                    wr_id: 91,
                    op: SendOp::LocalInvalidate { key },
                    sgl: &[],
                    flags: SendFlags::SIGNALED,
                },
            ];
            p.s.qp.post_send(&wrs).unwrap();
            let (s, _) = p.completions(2, 0);
            expect(&s[0], 90, WcOpcode::FastReg, WcStatus::Success);
            expect(&s[1], 91, WcOpcode::LocalInvalidate, WcStatus::Success);
            keep.push(fmr);
            (
                RemoteAddr {
                    addr: p.s.addr(REGION_AT),
                    rkey: key,
                },
                8,
            )
        }
        BadKey::WrongPd => {
            let pd2 = p.s.dev.alloc_pd().expect("second pd");
            let mr = pd2
                .reg_mr(&p.s.arena, REGION_AT, REGION, Access::ALL)
                .expect("reg_mr in the second pd");
            let r = at(&mr, 0);
            keep.push(mr);
            (r, 8)
        }
        BadKey::NoAccess => {
            let mr = reg(p, wrong);
            let r = at(&mr, 0);
            keep.push(mr);
            (r, 8)
        }
        BadKey::PastEnd => {
            let mr = reg(p, right);
            let r = at(&mr, REGION as i64 - 4);
            keep.push(mr);
            (r, 8)
        }
        BadKey::BeforeStart => {
            let mr = reg(p, right);
            let r = at(&mr, -1);
            keep.push(mr);
            (r, 8)
        }
        BadKey::TooLong => {
            let mr = reg(p, right);
            let r = at(&mr, 0);
            keep.push(mr);
            (r, REGION + 1)
        }
        guess => {
            let mr = reg(p, right);
            let mut r = at(&mr, 0);
            let (i, g) = (key_index(r.rkey), key_generation(r.rkey));
            r.rkey = match guess {
                BadKey::IndexBelow => make_key(i.wrapping_sub(1) & MAX_KEY_INDEX, g),
                BadKey::IndexAbove => make_key((i + 1) & MAX_KEY_INDEX, g),
                BadKey::GenerationBelow => make_key(i, g.wrapping_sub(1)),
                BadKey::TagFlipped => r.rkey ^ 0x8000_0000,
                _ => make_key(i & 0xff, g),
            };
            keep.push(mr);
            (r, 8)
        }
    }
}

const BAD_KEYS: [BadKey; 7] = [
    BadKey::Unknown,
    BadKey::Invalidated,
    BadKey::WrongPd,
    BadKey::NoAccess,
    BadKey::PastEnd,
    BadKey::BeforeStart,
    BadKey::TooLong,
];

/// Runs one bad RDMA operation and checks: RemoteAccessError, not a byte touched on
/// either side, both queue pairs in error, everything else flushed. Where requests
/// complete on transmit (`DeviceCaps::send_completes_on_transmit`) the operation may
/// complete before the target objects; the rest still holds.
fn remote_access_fails<F: Fixture>(bad: BadKey, write: bool) {
    // Names the case in a failing test's output (libtest shows it only then).
    eprintln!("bad key {bad:?}, {}", if write { "Write" } else { "Read" });
    let mut p = pair::<F>();
    p.s.fill(0, &pattern(50, p.s.arena.len()));
    p.c.fill(0, &pattern(51, p.c.arena.len()));
    let mut keep = Vec::new();
    let (remote, len) = bad_remote::<F>(&mut p, bad, write, &mut keep);
    let before_s = p.s.snapshot();
    let before_c = p.c.snapshot();
    let mut expected_s = before_s.clone();
    let rb = [p.s.sge(0, 64)];
    p.s.qp.post_recv(&[RecvWr { wr_id: 1, sgl: &rb }]).unwrap();
    let b = [p.c.sge(1000, len)];
    let wr = if write {
        SendWr::write(2, &b, remote)
    } else {
        SendWr::read(2, &b, remote)
    };
    let after = [p.c.sge(0, 8)];
    p.c.qp
        .post_send(&[wr.with_flags(SendFlags::NONE), SendWr::send(3, &after)])
        .unwrap();
    let op = if write {
        WcOpcode::RdmaWrite
    } else {
        WcOpcode::RdmaRead
    };
    if caps(&p).send_completes_on_transmit {
        // The Write may complete (unsignaled: unreported) before the target objects,
        // and the Send may leave before the Terminate comes back: only the order and
        // the end of the connection are fixed.
        let (s, c) = drain_after_failure(&mut p);
        assert_eq!(s.len(), 1, "{bad:?}: server {s:?}");
        // The target answers a Read when it gets to it, so a Send behind a faulting
        // Read may still be delivered; a Send behind a faulting Write may not.
        let delivered = if write {
            &[WcStatus::WrFlushed][..]
        } else {
            &[WcStatus::WrFlushed, WcStatus::Success][..]
        };
        expect_any(&s[0], 1, WcOpcode::Recv, delivered);
        // The only bytes allowed to change at the target: the Send's, in its receive.
        // A flushed receive's buffer is undefined in verbs, and kernel siw places a Send
        // that follows a faulting Read before its Read Response fails (the Terminate
        // comes from the transmit side) and may flush the receive afterwards: its
        // buffer may then hold the Send too, but nothing else.
        let landed = p.s.snapshot()[..8] == before_c[..8];
        if s[0].status.is_success() || (!write && landed) {
            expected_s[..8].copy_from_slice(&before_c[..8]);
        }
        let (first, rest) = match c.first() {
            Some(c0) if c0.wr_id == 2 => (Some(c0), &c[1..]),
            _ => (None, &c[..]),
        };
        // An unsignaled request failing at the peer may go unreported there (kernel siw
        // flushes its outstanding Reads without completions): the connection's end and
        // the untouched memory are what a consumer can rely on.
        if let Some(c0) = first {
            let mut failed = vec![WcStatus::RemoteAccessError, WcStatus::WrFlushed];
            if !caps(&p).exact_error_statuses {
                // Still being transmitted when the peer's Terminate arrived (a Write of
                // several FPDUs on kernel siw): the device fails it locally.
                failed.push(WcStatus::LocalQpOperationError);
            }
            expect_any(c0, 2, op, &failed);
        }
        assert_eq!(rest.len(), 1, "{bad:?}: client {c:?}");
        expect_any(
            &rest[0],
            3,
            WcOpcode::Send,
            &[WcStatus::Success, WcStatus::WrFlushed],
        );
    } else {
        let (s, c) = p.completions(1, 2);
        expect(&c[0], 2, op, WcStatus::RemoteAccessError);
        expect(&c[1], 3, WcOpcode::Send, WcStatus::WrFlushed);
        expect(&s[0], 1, WcOpcode::Recv, WcStatus::WrFlushed);
        p.wait_both_failed();
    }
    let after_s = p.s.snapshot();
    assert!(
        after_s == expected_s,
        "{bad:?}: target memory changed at {:?}",
        changed_range(&expected_s, &after_s)
    );
    assert!(
        p.c.snapshot() == before_c,
        "{bad:?}: initiator memory changed"
    );
}

/// The first and last offsets where `a` and `b` differ, for a failing rule's message.
fn changed_range(a: &[u8], b: &[u8]) -> Option<(usize, usize)> {
    let first = a.iter().zip(b).position(|(x, y)| x != y)?;
    let last = a.iter().zip(b).rposition(|(x, y)| x != y)?;
    Some((first, last))
}

/// The bad keys a device can express and refuses: an invalidated fast-registration key
/// needs fast registration; a Read through a key without remote-read access is refused
/// only where `DeviceCaps::read_checks_access` says so.
fn bad_keys<F: Fixture>(write: bool) -> impl Iterator<Item = BadKey> {
    let caps = F::open_device().caps();
    BAD_KEYS.into_iter().filter(move |b| match b {
        BadKey::Invalidated => caps.fast_reg,
        BadKey::NoAccess => write || caps.read_checks_access,
        _ => true,
    })
}

/// Keys next to a real one (index ±1, the previous generation, other tag bits) fail RDMA
/// Writes and Reads without touching a byte: keys are not guessable from one another.
/// For the software providers (shm, siw, sim), whose key tables draw the generation and
/// tag bits at random; not part of `conformance_tests!`, as hardware keys need not be.
pub fn rdma_with_neighbouring_keys_fails<F: Fixture>() {
    for write in [true, false] {
        for guess in GUESSES {
            remote_access_fails::<F>(guess, write);
        }
    }
}

/// Every kind of bad key fails an RDMA Write without writing a byte.
pub fn rdma_write_with_bad_key_fails<F: Fixture>() {
    for bad in bad_keys::<F>(true) {
        remote_access_fails::<F>(bad, true);
    }
}

/// Every kind of bad key fails an RDMA Read without reading a byte into the sink.
pub fn rdma_read_with_bad_key_fails<F: Fixture>() {
    for bad in bad_keys::<F>(false) {
        remote_access_fails::<F>(bad, false);
    }
}

// ---------------------------------------------------------------------------------
// Fast registration and invalidation
// ---------------------------------------------------------------------------------

fn fast_reg(wr_id: u64, key: u32, region: Sge, access: Access) -> SendWr<'static> {
    SendWr {
        wr_id,
        op: SendOp::FastReg {
            key,
            region,
            access,
        },
        sgl: &[],
        flags: SendFlags::SIGNALED,
    }
}

/// The client registers a buffer per "RPC" with a fresh key (new low byte, same index)
/// in the same chain as the Send advertising it; the server writes through it and
/// answers with Send With Invalidate; the client's receive names the key, and the key is
/// dead afterwards. Without fast registration (`DeviceCaps::fast_reg`), the slot is
/// refused with a typed error.
pub fn send_with_invalidate_kills_the_key<F: Fixture>() {
    if fast_reg_refused::<F>() {
        return;
    }
    let mut p = pair::<F>();
    let mut fmr = p.c.pd.alloc_fast_mr(REGION).expect("alloc_fast_mr");
    let mut prev = fmr.rkey();
    let rb = [p.c.sge(0, 64)];
    let srb = [p.s.sge(0, 64)];
    for round in 0..5u64 {
        let key = fmr.rekey();
        assert_eq!(key_index(key), key_index(prev));
        assert_ne!(key_generation(key), key_generation(prev));
        prev = key;
        let at = REGION_AT + round as usize * REGION;
        // The advertisement: the key and address, as a chunk list would carry them.
        p.c.fill(100, &key.to_le_bytes());
        p.c.fill(104, &p.c.addr(at).to_le_bytes());
        let adv = [p.c.sge(100, 12)];
        p.c.qp
            .post_recv(&[RecvWr {
                wr_id: 10,
                sgl: &rb,
            }])
            .unwrap();
        p.s.qp
            .post_recv(&[RecvWr {
                wr_id: 20,
                sgl: &srb,
            }])
            .unwrap();
        let chain = [
            fast_reg(
                1,
                key,
                p.c.sge(at, REGION),
                Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            )
            .with_flags(SendFlags::NONE),
            SendWr::send(2, &adv),
        ];
        p.c.qp.post_send(&chain).unwrap();
        let (s, c) = p.completions(1, 1);
        expect(&s[0], 20, WcOpcode::Recv, WcStatus::Success);
        expect(&c[0], 2, WcOpcode::Send, WcStatus::Success);
        let rkey = u32::from_le_bytes(p.s.read(0, 4).try_into().unwrap());
        let addr = u64::from_le_bytes(p.s.read(4, 8).try_into().unwrap());
        let data = pattern(60 + round, REGION);
        p.s.fill(200_000, &data);
        let w = [p.s.sge(200_000, REGION)];
        let reply = [p.s.sge(0, 4)];
        let answer = [
            SendWr::write(3, &w, RemoteAddr { addr, rkey }).with_flags(SendFlags::NONE),
            SendWr {
                wr_id: 4,
                op: SendOp::SendWithInvalidate { rkey },
                sgl: &reply,
                flags: SendFlags::SIGNALED,
            },
        ];
        p.s.qp.post_send(&answer).unwrap();
        let (s, c) = p.completions(1, 1);
        expect(&s[0], 4, WcOpcode::Send, WcStatus::Success);
        expect(&c[0], 10, WcOpcode::Recv, WcStatus::Success);
        assert_eq!(c[0].invalidated_rkey, Some(key));
        assert!(p.c.read(at, REGION) == data, "write through the fast key");
    }
    // The last key is dead: a write with it fails and touches nothing.
    let before = p.c.snapshot();
    let w = [p.s.sge(200_000, 8)];
    let remote = RemoteAddr {
        addr: p.c.addr(REGION_AT + 4 * REGION),
        rkey: prev,
    };
    p.s.qp.post_send(&[SendWr::write(5, &w, remote)]).unwrap();
    let (s, _) = p.completions(1, 0);
    expect(&s[0], 5, WcOpcode::RdmaWrite, WcStatus::RemoteAccessError);
    assert!(p.c.snapshot() == before);
    p.wait_both_failed();
}

/// A Send With Invalidate naming a valid key kills it, and the receive names the key
/// exactly where `DeviceCaps::reports_remote_invalidation` says it does (kernel siw
/// invalidates without telling a userspace consumer). The key is a fast-registration
/// key where the device has them, else a plain registration of its own, which iWARP
/// (no RNR retry) lets a peer invalidate; elsewhere there is nothing to check.
pub fn send_with_invalidate_reports_the_key_per_caps<F: Fixture>() {
    let mut p = pair::<F>();
    let caps = caps(&p);
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mut mr = if caps.fast_reg {
        p.c.pd.alloc_fast_mr(REGION).expect("alloc_fast_mr")
    } else if !caps.rnr_retry {
        p.c.pd
            .reg_mr(&p.c.arena, REGION_AT, REGION, access)
            .expect("reg_mr")
    } else {
        return;
    };
    let key = if caps.fast_reg {
        let key = mr.rekey();
        p.c.qp
            .post_send(&[fast_reg(1, key, p.c.sge(REGION_AT, REGION), access)])
            .unwrap();
        let (_, c) = p.completions(0, 1);
        expect(&c[0], 1, WcOpcode::FastReg, WcStatus::Success);
        key
    } else {
        mr.rkey()
    };
    let rb = [p.c.sge(0, 64)];
    p.c.qp.post_recv(&[RecvWr { wr_id: 2, sgl: &rb }]).unwrap();
    let b = [p.s.sge(0, 4)];
    p.s.qp
        .post_send(&[SendWr {
            wr_id: 3,
            op: SendOp::SendWithInvalidate { rkey: key },
            sgl: &b,
            flags: SendFlags::SIGNALED,
        }])
        .unwrap();
    let (s, c) = p.completions(1, 1);
    expect(&s[0], 3, WcOpcode::Send, WcStatus::Success);
    expect(&c[0], 2, WcOpcode::Recv, WcStatus::Success);
    let reported = caps.reports_remote_invalidation.then_some(key);
    assert_eq!(
        c[0].invalidated_rkey, reported,
        "key {key:#x}; reports_remote_invalidation {}",
        caps.reports_remote_invalidation
    );
    // Reported or not, the key is dead: a Read through it fails and the connection ends.
    let sink = [p.s.sge(200_000, 8)];
    let remote = RemoteAddr {
        addr: p.c.addr(REGION_AT),
        rkey: key,
    };
    p.s.qp.post_send(&[SendWr::read(4, &sink, remote)]).unwrap();
    let (s, _) = p.completions(1, 0);
    let want = requester_statuses(&caps, WcStatus::RemoteAccessError);
    expect_any(&s[0], 4, WcOpcode::RdmaRead, &want);
    p.wait_both_failed();
    drop(mr);
}

/// A Send With Invalidate naming a key the receiver never issued fails at the
/// receiver (LocalAccessError) and the sender (RemoteAccessError), statuses per
/// `DeviceCaps`; the connection ends on both sides.
pub fn send_with_invalidate_of_a_bad_key_fails<F: Fixture>() {
    let mut p = pair::<F>();
    let caps = caps(&p);
    let rb = [p.c.sge(0, 64)];
    p.c.qp.post_recv(&[RecvWr { wr_id: 1, sgl: &rb }]).unwrap();
    let b = [p.s.sge(0, 4)];
    // A key the receiver never issued: no device can invalidate it. (Whether a plain
    // registration may be invalidated remotely differs: iWARP allows it, IB does not.)
    let rkey = never_issued(&caps, p.c.mr.rkey());
    p.s.qp
        .post_send(&[SendWr {
            wr_id: 2,
            op: SendOp::SendWithInvalidate { rkey },
            sgl: &b,
            flags: SendFlags::SIGNALED,
        }])
        .unwrap();
    let (s, c) = p.completions(1, 1);
    let mut sender = requester_statuses(&caps, WcStatus::RemoteAccessError);
    if !caps.exact_error_statuses {
        sender.push(WcStatus::Success);
    }
    expect_any(&s[0], 2, WcOpcode::Send, &sender);
    let receiver = fault_statuses(&caps, WcStatus::LocalAccessError);
    expect_any(&c[0], 1, WcOpcode::Recv, &receiver);
    assert_eq!(c[0].invalidated_rkey, None, "nothing was invalidated");
    p.wait_both_failed();
}

/// Re-registering a slot with its current key (generation not advanced) fails with
/// MemoryBindError; so does a region outside any registration. Without fast
/// registration (`DeviceCaps::fast_reg`), the slot is refused with a typed error.
pub fn fast_reg_requires_a_fresh_key<F: Fixture>() {
    if fast_reg_refused::<F>() {
        return;
    }
    let mut p = pair::<F>();
    let mut fmr = p.c.pd.alloc_fast_mr(REGION).expect("alloc_fast_mr");
    let key = fmr.rekey();
    let region = p.c.sge(0, REGION);
    p.c.qp
        .post_send(&[fast_reg(1, key, region, Access::REMOTE_READ)])
        .unwrap();
    let (_, c) = p.completions(0, 1);
    expect(&c[0], 1, WcOpcode::FastReg, WcStatus::Success);
    p.c.qp
        .post_send(&[fast_reg(2, key, region, Access::REMOTE_READ)])
        .unwrap();
    let (_, c) = p.completions(0, 1);
    expect(&c[0], 2, WcOpcode::FastReg, WcStatus::MemoryBindError);
    p.wait_both_failed();

    let mut p = pair::<F>();
    let mut fmr = p.c.pd.alloc_fast_mr(REGION).expect("alloc_fast_mr");
    let key = fmr.rekey();
    let region = p.c.sge(p.c.arena.len() - 8, 16);
    p.c.qp
        .post_send(&[fast_reg(3, key, region, Access::REMOTE_READ)])
        .unwrap();
    let (_, c) = p.completions(0, 1);
    expect(&c[0], 3, WcOpcode::FastReg, WcStatus::MemoryBindError);
    p.wait_both_failed();
}

// ---------------------------------------------------------------------------------
// Local protection, completion queues, registration
// ---------------------------------------------------------------------------------

/// A Send gathering from an unregistered key fails locally with LocalProtectionError;
/// a receive into memory without local write fails at the receiver, which writes
/// nothing (statuses per `DeviceCaps`). Both connections end.
pub fn local_protection_errors<F: Fixture>() {
    let mut p = pair::<F>();
    let caps = caps(&p);
    let local = fault_statuses(&caps, WcStatus::LocalProtectionError);
    let mut b = p.c.sge(0, 8);
    b.lkey = next_key(b.lkey);
    p.c.qp.post_send(&[SendWr::send(1, &[b])]).unwrap();
    let (_, c) = p.completions(0, 1);
    expect_any(&c[0], 1, WcOpcode::Send, &local);
    p.wait_both_failed();

    let mut p = pair::<F>();
    let ro =
        p.s.pd
            .reg_mr(&p.s.arena, 0, 4096, Access::REMOTE_READ)
            .expect("read-only registration");
    let rb = [Sge::new(p.s.addr(0), 64, ro.lkey())];
    p.s.qp.post_recv(&[RecvWr { wr_id: 2, sgl: &rb }]).unwrap();
    let before = p.s.snapshot();
    let sb = [p.c.sge(0, 8)];
    p.c.qp.post_send(&[SendWr::send(3, &sb)]).unwrap();
    let (s, c) = p.completions(1, 1);
    expect_any(&s[0], 2, WcOpcode::Recv, &local);
    if !caps.send_completes_on_transmit {
        assert_ne!(c[0].status, WcStatus::Success);
    }
    assert!(p.s.snapshot() == before);
    p.wait_both_failed();
}

/// With separate send and receive CQs, each completion lands in its own CQ and names
/// the queue pair.
pub fn separate_send_and_recv_cqs<F: Fixture>() {
    let o = Opts {
        separate_cqs: true,
        ..Opts::default()
    };
    let mut p = connect::<F>(&o);
    let rb = [p.s.sge(0, 8)];
    p.s.qp.post_recv(&[RecvWr { wr_id: 1, sgl: &rb }]).unwrap();
    let sb = [p.c.sge(0, 8)];
    p.c.qp.post_send(&[SendWr::send(2, &sb)]).unwrap();
    let mut sbuf = [Completion::EMPTY; 4];
    let mut rbuf = [Completion::EMPTY; 4];
    let (mut got_s, mut got_r) = (Vec::new(), Vec::new());
    let end = Instant::now() + DEADLINE;
    while got_s.is_empty() || got_r.is_empty() {
        assert!(Instant::now() < end, "timed out");
        let n = p.c.h.cq.poll(&mut sbuf);
        got_s.extend_from_slice(&sbuf[..n]);
        let r = p.c.h.rcq.as_mut().expect("recv cq");
        assert_eq!(r.poll(&mut rbuf), 0, "nothing arrives at the client");
        let n = p.s.h.rcq.as_mut().expect("recv cq").poll(&mut rbuf);
        got_r.extend_from_slice(&rbuf[..n]);
        assert_eq!(p.s.h.cq.poll(&mut sbuf), 0, "the server sent nothing");
        std::thread::yield_now();
    }
    expect(&got_s[0], 2, WcOpcode::Send, WcStatus::Success);
    assert_eq!(got_s[0].qp_num, p.c.qp.qp_num());
    expect(&got_r[0], 1, WcOpcode::Recv, WcStatus::Success);
    assert_eq!(got_r[0].qp_num, p.s.qp.qp_num());
}

/// Registration refuses invalid access combinations and ranges.
pub fn registration_checks<F: Fixture>() {
    let dev = F::open_device();
    let pd = dev.alloc_pd().expect("pd");
    let arena = F::arena(8192);
    assert!(matches!(
        pd.reg_mr(&arena, 0, 4096, Access::REMOTE_WRITE),
        Err(FabricError::InvalidAccess(_))
    ));
    assert!(matches!(
        pd.reg_mr(&arena, 4096, arena.len(), Access::ALL),
        Err(FabricError::OutOfRange { .. })
    ));
    assert!(matches!(
        pd.reg_mr(&arena, usize::MAX, 2, Access::ALL),
        Err(FabricError::OutOfRange { .. })
    ));
    assert!(pd.reg_mr(&arena, 0, 0, Access::ALL).is_err());
    let mr = pd.reg_arena(&arena, Access::ALL).expect("reg_arena");
    let keys = arena.keys().expect("keys stored on the arena");
    assert_eq!((keys.lkey, keys.rkey), (mr.lkey(), mr.rkey()));
    assert_eq!(mr.addr(), arena.base() as u64);
    assert_eq!(mr.len(), arena.len());
    let mr2 = pd
        .reg_mr(&arena, 0, 4096, Access::NONE)
        .expect("second registration");
    assert_ne!(mr2.lkey(), mr.lkey(), "each registration has its own key");
}

/// Expands to one `#[test]` per conformance rule for `$fixture`. The invoking test crate
/// must declare `mod conformance;` at its root.
#[macro_export]
macro_rules! conformance_tests {
    ($fixture:ty) => {
        $crate::conformance_tests!(@each $fixture;
            cm_exchanges_private_data,
            cm_reject_delivers_private_data,
            cm_unreachable,
            cm_reports_the_peer,
            cm_disconnect_flushes_both_sides,
            posts_racing_the_peers_close_complete_once,
            send_recv_integrity,
            scattered_receive_splits_at_entry_boundaries,
            rdma_write_integrity,
            rdma_read_integrity,
            chain_completes_in_order,
            writes_are_visible_before_the_following_send,
            post_beyond_depth_is_refused,
            unsignaled_requests_hold_their_slots,
            send_without_receive_exceeds_rnr_retries,
            send_waits_for_a_late_receive,
            send_longer_than_receive_fails_both_sides,
            rdma_write_with_bad_key_fails,
            rdma_read_with_bad_key_fails,
            send_with_invalidate_kills_the_key,
            send_with_invalidate_of_a_bad_key_fails,
            send_with_invalidate_reports_the_key_per_caps,
            fast_reg_requires_a_fresh_key,
            local_protection_errors,
            separate_send_and_recv_cqs,
            registration_checks,
            srq_serves_several_queue_pairs,
            srq_empty_fails_only_that_connection,
            srq_survives_a_destroyed_queue_pair,
        );
    };
    (@each $fixture:ty; $($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                $crate::conformance::$name::<$fixture>();
            }
        )*
    };
}
