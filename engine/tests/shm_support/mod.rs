//! Helpers for the shm tests that run many connections against one listening device:
//! one connection's resources (protection domain, completion queue, registered
//! arenas), and a listener that accepts every request with fresh resources.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma::fabric::shm::{ShmAddr, ShmCm, ShmConnRequest, ShmCq, ShmDevice, ShmMr, ShmPd, ShmQp};
use rpcrdma::fabric::{
    Access, CmEvent, Completion, CompletionQueue, ConnectionManager, Device, MemoryRegion,
    ProtectionDomain, QpConfig, QpInit, RemoteAddr, Sge,
};
use rpcrdma_pools::{Arena, ArenaOptions, HugePages};

/// How long any single wait may take before the test fails.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// An abstract address unique to this process and call.
pub fn unique_addr(tag: &str) -> ShmAddr {
    static N: AtomicU64 = AtomicU64::new(0);
    ShmAddr::abstract_name(format!(
        "rpcrdma-shm-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// A shareable 4 KiB-page arena of `len` bytes.
pub fn arena(len: usize) -> Arc<Arena> {
    let opts = ArenaOptions::new(len)
        .shareable(true)
        .hugepages(HugePages::Never)
        .name("rpcrdma-shm-test");
    Arc::new(Arena::new(&opts).expect("test arena"))
}

/// One connection's resources, as the engine's `ConnResources` holds them: its own
/// protection domain and completion queue, and `n` registered arenas.
pub struct Res {
    pub arenas: Vec<Arc<Arena>>,
    pub mrs: Vec<ShmMr>,
    pub cq: ShmCq,
    pub pd: ShmPd,
}

impl Res {
    /// Resources on `dev` with `n` arenas of `len` bytes, registered with all access.
    pub fn new(dev: &ShmDevice, n: usize, len: usize) -> Res {
        let pd = dev.alloc_pd().expect("alloc_pd");
        let cq = dev.create_cq(256).expect("create_cq");
        let arenas: Vec<_> = (0..n).map(|_| arena(len)).collect();
        let mrs = arenas
            .iter()
            .map(|a| pd.reg_arena(a, Access::ALL).expect("register"))
            .collect();
        Res {
            arenas,
            mrs,
            cq,
            pd,
        }
    }

    /// A queue-pair init over these resources.
    pub fn init(&self) -> QpInit<'_, rpcrdma::fabric::shm::ShmProvider> {
        QpInit {
            pd: &self.pd,
            send_cq: &self.cq,
            recv_cq: &self.cq,
            srq: None,
            config: QpConfig::default(),
        }
    }

    /// Entry for `len` bytes at `off` of arena `i`.
    pub fn sge(&self, i: usize, off: usize, len: u32) -> Sge {
        Sge::new(
            self.arenas[i].base() as u64 + off as u64,
            len,
            self.mrs[i].lkey(),
        )
    }

    /// Remote address of byte `off` of arena `i`.
    pub fn remote(&self, i: usize, off: usize) -> RemoteAddr {
        RemoteAddr {
            addr: self.arenas[i].base() as u64 + off as u64,
            rkey: self.mrs[i].rkey(),
        }
    }

    /// Polls the completion queue once, appending to `done`.
    pub fn poll(&mut self, done: &mut Vec<Completion>) {
        let mut buf = [Completion::EMPTY; 16];
        let n = self.cq.poll(&mut buf);
        done.extend_from_slice(&buf[..n]);
    }
}

/// Collects connection-manager events.
pub fn pump_cm(cm: &mut ShmCm, events: &mut VecDeque<CmEvent<ShmConnRequest>>) {
    while let Some(e) = cm.poll_event().expect("poll_event") {
        events.push_back(e);
    }
}

/// Polls `step` until it returns `Some`, failing the test after [`DEADLINE`].
pub fn wait_for<T>(what: &str, mut step: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = step() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

/// One accepted connection: its queue pair and resources.
pub struct Accepted {
    pub qp: ShmQp,
    pub res: Res,
}

/// A connected client: its queue pair, resources, device and connection manager.
pub struct Client {
    pub qp: ShmQp,
    pub res: Res,
    pub cm: ShmCm,
    pub dev: ShmDevice,
}

/// Connects a new client (its own device, `n` arenas of `len` bytes) to the listener
/// `cm` on `dev`, which accepts with fresh resources of the same shape; both sides
/// reach Established.
pub fn connect_one(
    dev: &ShmDevice,
    cm: &mut ShmCm,
    addr: &ShmAddr,
    n: usize,
    len: usize,
) -> (Client, Accepted) {
    let cdev = ShmDevice::new();
    let cres = Res::new(&cdev, n, len);
    let mut ccm = cdev.create_cm().expect("client cm");
    let cqp = ccm.connect(addr, cres.init(), b"").expect("connect");
    let mut sev = VecDeque::new();
    let mut cev = VecDeque::new();
    let req = wait_for("a connect request", || {
        pump_cm(cm, &mut sev);
        pump_cm(&mut ccm, &mut cev);
        match sev.pop_front() {
            Some(CmEvent::ConnectRequest { request, .. }) => Some(request),
            Some(e) => panic!("unexpected server event {e:?}"),
            None => None,
        }
    });
    let sres = Res::new(dev, n, len);
    let sqp = cm.accept(req, sres.init(), b"").expect("accept");
    let (mut c_up, mut s_up) = (false, false);
    wait_for("both sides established", || {
        pump_cm(cm, &mut sev);
        pump_cm(&mut ccm, &mut cev);
        for e in sev.drain(..) {
            assert!(matches!(e, CmEvent::Established { .. }), "server: {e:?}");
            s_up = true;
        }
        for e in cev.drain(..) {
            assert!(matches!(e, CmEvent::Established { .. }), "client: {e:?}");
            c_up = true;
        }
        (c_up && s_up).then_some(())
    });
    (
        Client {
            qp: cqp,
            res: cres,
            cm: ccm,
            dev: cdev,
        },
        Accepted { qp: sqp, res: sres },
    )
}
