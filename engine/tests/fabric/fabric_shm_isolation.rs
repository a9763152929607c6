//! The shm trust boundary: what one local peer is told about, who may connect at all,
//! and how long a connection may sit in the handshake.

use crate::shm_support;

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use rpcrdma::fabric::shm::{PeerCheck, ShmAddr, ShmConfig, ShmDevice};
use rpcrdma::fabric::{
    CmEvent, Completion, ConnectionManager, Device, QueuePair, SendWr, WcStatus,
};
use shm_support::{connect_one, pump_cm, unique_addr, wait_for, Res, DEADLINE};

/// Two clients of one server device: each is told about its own connection's arenas
/// only, and a request naming the other connection's memory fails without touching it.
#[test]
fn a_client_reaches_only_its_own_connections_arenas() {
    let dev = ShmDevice::new();
    let mut cm = dev.create_cm().unwrap();
    let addr = unique_addr("isolation");
    cm.listen(&addr).unwrap();
    let (mut c1, mut s1) = connect_one(&dev, &mut cm, &addr, 3, 1 << 16);
    let (mut c2, mut s2) = connect_one(&dev, &mut cm, &addr, 3, 1 << 16);
    // An arena registered later on the first connection is not announced to the second.
    let late = shm_support::arena(1 << 16);
    let _late_mr = rpcrdma::fabric::ProtectionDomain::reg_arena(
        &s1.res.pd,
        &late,
        rpcrdma::fabric::Access::ALL,
    )
    .unwrap();
    assert_eq!(c1.qp.peer_arenas_announced(), 4);
    assert_eq!(c2.qp.peer_arenas_announced(), 3);

    // Client 2 writes with the first connection's key and address: refused by the
    // server's key check, and the first connection's memory keeps its bytes.
    let before = s1_snapshot(&s1.res);
    let src = [c2.res.sge(0, 0, 512)];
    c2.qp
        .post_send(&[SendWr::write(9, &src, s1.res.remote(0, 0))])
        .unwrap();
    let (mut cd, mut sd) = (Vec::<Completion>::new(), Vec::<Completion>::new());
    wait_for("the refused write", || {
        c2.res.poll(&mut cd);
        s2.res.poll(&mut sd);
        s1.res.poll(&mut sd);
        c1.res.poll(&mut sd);
        (!cd.is_empty()).then_some(())
    });
    assert_eq!(cd[0].status, WcStatus::RemoteAccessError);
    assert_eq!(s1_snapshot(&s1.res), before);
    // The first connection is unaffected.
    assert_eq!(s1.qp.state(), rpcrdma::fabric::QpState::ReadyToSend);
    let mut ev = VecDeque::new();
    pump_cm(&mut c1.cm, &mut ev);
    assert!(ev.is_empty(), "{ev:?}");
}

fn s1_snapshot(r: &Res) -> Vec<u8> {
    let a = &r.arenas[0];
    // SAFETY: the arena is live and nothing writes it while the test reads.
    unsafe { std::slice::from_raw_parts(a.base(), a.len()) }.to_vec()
}

const CHILD_ADDR: &str = "RPCRDMA_SHM_PEER_CHILD_ADDR";

/// In a child process started by `peer_credentials_are_checked` (and only there):
/// connects to the given address and exits 0 when established, 3 when refused.
#[test]
fn peer_credentials_child() {
    let Ok(name) = std::env::var(CHILD_ADDR) else {
        return;
    };
    let dev = ShmDevice::new();
    let res = Res::new(&dev, 1, 4096);
    let mut cm = dev.create_cm().unwrap();
    let _qp = cm
        .connect(&ShmAddr::abstract_name(name), res.init(), b"")
        .unwrap();
    let mut ev = VecDeque::new();
    let code = wait_for("the server's answer", || {
        pump_cm(&mut cm, &mut ev);
        ev.pop_front().map(|e| match e {
            CmEvent::Established { .. } => 0,
            _ => 3,
        })
    });
    std::process::exit(code);
}

/// Runs `peer_credentials_child` as `uid` against a server on a device configured with
/// `check`; returns the child's exit code.
fn child_as(uid: u32, check: PeerCheck) -> i32 {
    use std::os::unix::process::CommandExt;
    let dev = ShmDevice::with_config(ShmConfig {
        peer_check: check,
        ..ShmConfig::default()
    })
    .unwrap();
    let mut cm = dev.create_cm().unwrap();
    let addr = unique_addr("cred");
    cm.listen(&addr).unwrap();
    let ShmAddr::Abstract(name) = &addr else {
        unreachable!()
    };
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "fabric_shm_isolation::peer_credentials_child",
            "--nocapture",
        ])
        .env(CHILD_ADDR, name)
        .uid(uid)
        .spawn()
        .expect("spawn child");
    let mut keep = Vec::new();
    let mut ev = VecDeque::new();
    let end = Instant::now() + DEADLINE * 2;
    loop {
        pump_cm(&mut cm, &mut ev);
        while let Some(e) = ev.pop_front() {
            if let CmEvent::ConnectRequest { request, .. } = e {
                let res = Res::new(&dev, 1, 4096);
                let qp = cm.accept(request, res.init(), b"").unwrap();
                keep.push((qp, res));
            }
        }
        if let Some(status) = child.try_wait().unwrap() {
            return status.code().expect("child exit code");
        }
        if Instant::now() > end {
            let _ = child.kill();
            panic!("child did not finish");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A local process of another user is refused by default and admitted when the
/// device allows its uid; one of the same user is admitted.
#[test]
fn peer_credentials_are_checked() {
    // SAFETY: geteuid has no inputs and cannot fail.
    let me = unsafe { libc::geteuid() };
    assert_eq!(child_as(me, PeerCheck::SameUid), 0, "same uid refused");
    if me != 0 {
        eprintln!("not root: cannot start a child of another uid; skipping that half");
        return;
    }
    let nobody = 65534;
    assert_eq!(
        child_as(nobody, PeerCheck::SameUid),
        3,
        "other uid admitted"
    );
    assert_eq!(
        child_as(nobody, PeerCheck::Uid(nobody)),
        0,
        "allowed uid refused"
    );
    assert_eq!(child_as(nobody, PeerCheck::AnyUid), 0, "any uid refused");
}

/// A raw seqpacket connection to `addr` that never says anything.
fn silent_connect(addr: &ShmAddr) -> OwnedFd {
    let ShmAddr::Abstract(name) = addr else {
        unreachable!()
    };
    // SAFETY: plain socket(2).
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    assert!(fd >= 0);
    // SAFETY: fd is fresh and ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: all-zero is a valid sockaddr_un.
    let mut sa: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, &b) in sa.sun_path[1..].iter_mut().zip(name.as_bytes()) {
        *d = b as libc::c_char;
    }
    let len = std::mem::offset_of!(libc::sockaddr_un, sun_path) + 1 + name.len();
    // SAFETY: sa is a valid address of length len.
    let r = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_un).cast(),
            len as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "connect: {}", std::io::Error::last_os_error());
    fd
}

/// True once the server has closed `fd` (end of file), false while it is open.
fn closed_by_server(fd: &OwnedFd) -> bool {
    let mut b = [0u8; 64];
    // SAFETY: b is valid for writes of its length.
    let r = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            b.as_mut_ptr().cast(),
            b.len(),
            libc::MSG_DONTWAIT,
        )
    };
    r == 0 || (r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECONNRESET))
}

/// A local connector that never sends its connect request is dropped after the
/// handshake timeout.
#[test]
fn silent_connector_is_dropped_after_the_handshake_timeout() {
    let timeout = Duration::from_millis(200);
    let dev = ShmDevice::with_config(ShmConfig {
        handshake_timeout: timeout,
        ..ShmConfig::default()
    })
    .unwrap();
    let mut cm = dev.create_cm().unwrap();
    let addr = unique_addr("silent");
    cm.listen(&addr).unwrap();
    let start = Instant::now();
    let s = silent_connect(&addr);
    let mut ev = VecDeque::new();
    wait_for("the silent connector to be dropped", || {
        pump_cm(&mut cm, &mut ev);
        closed_by_server(&s).then_some(())
    });
    assert!(start.elapsed() >= timeout, "dropped before the timeout");
    assert!(ev.is_empty(), "{ev:?}");
}

/// Accepted connections beyond `max_pending` are closed at once; those within stay.
#[test]
fn pending_accepts_are_bounded() {
    let dev = ShmDevice::with_config(ShmConfig {
        max_pending: 2,
        handshake_timeout: Duration::from_secs(60),
        ..ShmConfig::default()
    })
    .unwrap();
    let mut cm = dev.create_cm().unwrap();
    let addr = unique_addr("pending");
    cm.listen(&addr).unwrap();
    let socks: Vec<OwnedFd> = (0..5).map(|_| silent_connect(&addr)).collect();
    let mut ev = VecDeque::new();
    wait_for("three connectors refused", || {
        pump_cm(&mut cm, &mut ev);
        (socks.iter().filter(|s| closed_by_server(s)).count() == 3).then_some(())
    });
    assert!(!closed_by_server(&socks[0]) && !closed_by_server(&socks[1]));
}

/// An outgoing connection whose listener never answers its connect request ends after
/// the handshake timeout, as a rejection, instead of waiting for ever.
#[test]
fn unanswered_connect_times_out() {
    let timeout = Duration::from_millis(200);
    let server = ShmDevice::new();
    let mut scm = server.create_cm().unwrap();
    let addr = unique_addr("unanswered");
    scm.listen(&addr).unwrap();
    let dev = ShmDevice::with_config(ShmConfig {
        handshake_timeout: timeout,
        ..ShmConfig::default()
    })
    .unwrap();
    let res = Res::new(&dev, 1, 4096);
    let mut cm = dev.create_cm().unwrap();
    let start = Instant::now();
    let qp = cm.connect(&addr, res.init(), b"").unwrap();
    let (mut sev, mut cev) = (VecDeque::new(), VecDeque::new());
    let e = wait_for("the connect to time out", || {
        // The server sees the request but never accepts or rejects it.
        pump_cm(&mut scm, &mut sev);
        pump_cm(&mut cm, &mut cev);
        cev.pop_front()
    });
    assert!(matches!(e, CmEvent::Rejected { .. }), "{e:?}");
    assert!(start.elapsed() >= timeout);
    assert!(qp.state().is_error());
    assert!(matches!(
        sev.pop_front(),
        Some(CmEvent::ConnectRequest { .. })
    ));
}

/// Protection-domain ids are reused: far more domains than ids can come and go.
#[test]
fn protection_domain_ids_are_reused() {
    let dev = ShmDevice::new();
    let keep = dev.alloc_pd().unwrap();
    for _ in 0..70_000 {
        let pd = dev.alloc_pd().expect("alloc_pd");
        assert_ne!(pd.id(), keep.id());
    }
    assert_eq!(dev.live_pds(), 1);
}

/// Memory keys come from the device's `key_seed` when one is given (reproducible runs),
/// and from an OS secret otherwise: two devices without a seed do not hand out the same
/// key sequence, two with one seed do.
#[test]
fn memory_keys_follow_the_key_seed() {
    use rpcrdma::fabric::{Access, MemoryRegion, ProtectionDomain};
    let keys = |seed: Option<u64>| -> Vec<u32> {
        let dev = ShmDevice::with_config(ShmConfig {
            key_seed: seed,
            ..ShmConfig::default()
        })
        .unwrap();
        let pd = dev.alloc_pd().unwrap();
        let arena = shm_support::arena(1 << 16);
        (0..8)
            .map(|_| pd.reg_arena(&arena, Access::ALL).unwrap().rkey())
            .collect()
    };
    assert_eq!(keys(Some(7)), keys(Some(7)));
    assert_ne!(keys(Some(7)), keys(Some(8)));
    assert_ne!(keys(None), keys(None));
}
