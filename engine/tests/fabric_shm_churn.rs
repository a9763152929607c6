//! Many sequential connections to one listening shm device: every one succeeds, and
//! what each registered, mapped and announced is gone when it ends, so the device's
//! tables and the process's resident memory stay where they were after the first few.
//! Alone in its binary: resident memory is per process, and other tests would move it.

mod shm_support;

use std::collections::VecDeque;

use rpcrdma::fabric::shm::{ShmConfig, ShmDevice};
use rpcrdma::fabric::{
    CmEvent, Completion, ConnectionManager, Device, QueuePair, SendWr, WcStatus,
};
use shm_support::{connect_one, pump_cm, unique_addr, wait_for};

const CONNECTIONS: usize = 300;
/// Arenas per connection per side, as an engine connection registers (recv, send, large).
const ARENAS: usize = 3;
const ARENA_LEN: usize = 1 << 20;

/// Resident set size of this process, in bytes.
fn rss() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .expect("statm resident field");
    pages * 4096
}

/// One connection: connect, a Write each way (so each side maps the other's arena),
/// then the client closes and the server sees it go.
fn one_connection(
    dev: &ShmDevice,
    cm: &mut rpcrdma::fabric::shm::ShmCm,
    addr: &rpcrdma::fabric::shm::ShmAddr,
) {
    let (mut c, mut s) = connect_one(dev, cm, addr, ARENAS, ARENA_LEN);
    let csrc = [c.res.sge(1, 0, 4096)];
    let ssrc = [s.res.sge(2, 0, 4096)];
    c.qp.post_send(&[SendWr::write(1, &csrc, s.res.remote(0, 0))])
        .expect("client write");
    s.qp.post_send(&[SendWr::write(2, &ssrc, c.res.remote(0, 0))])
        .expect("server write");
    let (mut cd, mut sd) = (Vec::<Completion>::new(), Vec::<Completion>::new());
    wait_for("both writes", || {
        c.res.poll(&mut cd);
        s.res.poll(&mut sd);
        (!cd.is_empty() && !sd.is_empty()).then_some(())
    });
    assert_eq!(cd[0].status, WcStatus::Success);
    assert_eq!(sd[0].status, WcStatus::Success);
    drop(c.qp);
    let mut sev = VecDeque::new();
    let mut cev = VecDeque::new();
    wait_for("the server to see the disconnect", || {
        pump_cm(&mut c.cm, &mut cev);
        pump_cm(cm, &mut sev);
        s.res.poll(&mut sd);
        sev.iter()
            .any(|e| matches!(e, CmEvent::Disconnected { .. }))
            .then_some(())
    });
}

#[test]
fn sequential_connections_return_every_resource() {
    let dev = ShmDevice::with_config(ShmConfig::default()).unwrap();
    let mut cm = dev.create_cm().unwrap();
    let addr = unique_addr("churn");
    cm.listen(&addr).unwrap();
    let baseline = (dev.live_arenas(), dev.live_registrations(), dev.live_pds());
    let mut rss_early = 0;
    for i in 0..CONNECTIONS {
        one_connection(&dev, &mut cm, &addr);
        assert_eq!(
            (dev.live_arenas(), dev.live_registrations(), dev.live_pds()),
            baseline,
            "device tables after connection {i}"
        );
        if i == 4 {
            rss_early = rss();
        }
    }
    let rss_late = rss();
    assert!(
        rss_late <= rss_early + (16 << 20),
        "resident memory grew from {rss_early} to {rss_late} bytes over {CONNECTIONS} connections"
    );
}
