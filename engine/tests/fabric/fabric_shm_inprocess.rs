//! shm-specific rules, in one process: what may be registered, arenas registered after
//! connecting, completion-queue sizing, and peers that vanish.

use crate::conformance;

use std::sync::Arc;

use conformance::{connect, pattern, Fixture, Opts, Pair};
use rpcrdma::fabric::shm::{ShmAddr, ShmDevice, ShmProvider};
use rpcrdma::fabric::{
    Access, CmEvent, ConnectionManager, Device, FabricError, MemoryRegion, ProtectionDomain,
    QpCaps, QpConfig, QpInit, QueuePair, RecvWr, SendWr, Sge, WcOpcode, WcStatus,
};
use rpcrdma_pools::{Arena, ArenaOptions, HugePages};

struct Shm;

impl Fixture for Shm {
    type P = ShmProvider;

    fn open_device() -> ShmDevice {
        ShmDevice::new()
    }

    fn unique_addr() -> ShmAddr {
        ShmAddr::abstract_name(format!(
            "rpcrdma-shm-inprocess-{}-{}",
            std::process::id(),
            conformance::unique_number()
        ))
    }
}

fn shared_arena(len: usize) -> Arc<Arena> {
    Shm::arena(len)
}

#[test]
fn private_arenas_cannot_be_registered() {
    let dev = ShmDevice::new();
    let pd = dev.alloc_pd().unwrap();
    let private =
        Arc::new(Arena::new(&ArenaOptions::new(4096).hugepages(HugePages::Never)).unwrap());
    assert!(matches!(
        pd.reg_arena(&private, Access::ALL),
        Err(FabricError::NotShareable)
    ));
    assert_eq!(private.keys(), None);
    assert!(pd.reg_arena(&shared_arena(4096), Access::ALL).is_ok());
}

#[test]
fn default_hugepage_policy_arenas_work() {
    // Hugepages when the host has them, 4 KiB pages (with a one-time warning) otherwise.
    let arena =
        Arc::new(Arena::new(&ArenaOptions::new(1 << 21).shareable(true)).expect("shareable arena"));
    let dev = ShmDevice::new();
    let pd = dev.alloc_pd().unwrap();
    let mr = pd.reg_arena(&arena, Access::ALL).unwrap();
    assert_eq!(mr.len(), arena.len());
    assert!(arena.is_hugepage() || rpcrdma_pools::arena::hugepage_warning_issued());
}

/// An arena registered on the initiator after connecting is announced to the peer,
/// which maps it when a request first names it; both directions keep working.
#[test]
fn arenas_registered_after_connect_are_usable() {
    let mut p: Pair<ShmProvider> = connect::<Shm>(&Opts::default());
    let late = shared_arena(1 << 20);
    let late_mr = p.c.pd.reg_arena(&late, Access::ALL).unwrap();
    let data = pattern(7, 70_000);
    // SAFETY: the arena is 1 MiB and nothing else touches it yet.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), late.base(), data.len()) };
    p.c.fill(0, &pattern(8, 100));
    let rb = [p.s.sge(0, 80_000)];
    p.s.qp.post_recv(&[RecvWr { wr_id: 1, sgl: &rb }]).unwrap();
    let sg = [
        p.c.sge(0, 100),
        Sge::new(late.base() as u64, data.len() as u32, late_mr.lkey()),
    ];
    let remote = p.s.remote(200_000);
    p.c.qp
        .post_send(&[SendWr::send(2, &sg), SendWr::write(3, &sg[1..], remote)])
        .unwrap();
    let (s, c) = p.completions(1, 2);
    assert_eq!((s[0].status, s[0].byte_len), (WcStatus::Success, 70_100));
    assert!(c.iter().all(|c| c.status == WcStatus::Success), "{c:?}");
    let mut expect = pattern(8, 100);
    expect.extend_from_slice(&data);
    assert!(p.s.read(0, 70_100) == expect);
    assert!(p.s.read(200_000, 70_000) == data);

    // A Read whose sink is the late arena too.
    let sink = [Sge::new(late.base() as u64 + 500_000, 4096, late_mr.lkey())];
    p.s.fill(300_000, &pattern(9, 4096));
    let remote = p.s.remote(300_000);
    p.c.qp.post_send(&[SendWr::read(4, &sink, remote)]).unwrap();
    let (_, c) = p.completions(0, 1);
    assert_eq!(
        (c[0].opcode, c[0].status),
        (WcOpcode::RdmaRead, WcStatus::Success)
    );
    let mut got = vec![0u8; 4096];
    // SAFETY: in bounds of the 1 MiB arena; the read has completed.
    unsafe { std::ptr::copy_nonoverlapping(late.base().add(500_000), got.as_mut_ptr(), 4096) };
    assert_eq!(got, pattern(9, 4096));
}

/// A queue pair whose queues could overrun its completion queue is refused.
#[test]
fn completion_queues_must_hold_every_queue() {
    let dev = ShmDevice::new();
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(100).unwrap();
    let mut cm = dev.create_cm().unwrap();
    let cfg = QpConfig {
        caps: QpCaps {
            max_send_wr: 64,
            max_recv_wr: 64,
            ..QpCaps::default()
        },
        ..QpConfig::default()
    };
    let init = QpInit {
        pd: &pd,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        config: cfg,
    };
    match cm.connect(&Shm::unique_addr(), init, b"") {
        Err(FabricError::CqTooSmall { needed, depth }) => assert_eq!((needed, depth), (128, 100)),
        other => panic!("expected CqTooSmall, got {other:?}"),
    }
    let small = QpConfig {
        caps: QpCaps {
            max_send_wr: 50,
            max_recv_wr: 50,
            ..QpCaps::default()
        },
        ..QpConfig::default()
    };
    let init = QpInit {
        pd: &pd,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        config: small,
    };
    let qp = cm
        .connect(&Shm::unique_addr(), init, b"")
        .expect("fits exactly");
    let init = QpInit {
        pd: &pd,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        config: small,
    };
    assert!(matches!(
        cm.connect(&Shm::unique_addr(), init, b""),
        Err(FabricError::CqTooSmall { .. })
    ));
    drop(qp);
    let init = QpInit {
        pd: &pd,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        config: small,
    };
    assert!(
        cm.connect(&Shm::unique_addr(), init, b"").is_ok(),
        "destroying a queue pair gives its room back"
    );
}

/// Objects of one device cannot be used with another's connection manager.
#[test]
fn objects_of_another_device_are_refused() {
    let a = ShmDevice::new();
    let b = ShmDevice::new();
    let pd = a.alloc_pd().unwrap();
    let cq = b.create_cq(1000).unwrap();
    let mut cm = b.create_cm().unwrap();
    let init = QpInit {
        pd: &pd,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        config: QpConfig::default(),
    };
    assert!(matches!(
        cm.connect(&Shm::unique_addr(), init, b""),
        Err(FabricError::WrongDevice)
    ));
}

/// Dropping a queue pair disconnects its peer, which flushes.
#[test]
fn dropping_a_queue_pair_disconnects_the_peer() {
    let p: Pair<ShmProvider> = connect::<Shm>(&Opts::default());
    let Pair { s, c } = p;
    let conformance::Side { qp: cqp, h: mut ch } = c;
    let mut s = s;
    let rb = [s.sge(0, 8)];
    s.qp.post_recv(&[RecvWr { wr_id: 5, sgl: &rb }]).unwrap();
    drop(cqp);
    conformance::wait_hosts(&mut s.h, &mut ch, "peer disconnect", |s, _| {
        s.events
            .iter()
            .any(|e| matches!(e, CmEvent::Disconnected { .. }))
            && !s.done.is_empty()
    });
    assert_eq!(s.done[0].status, WcStatus::WrFlushed);
    assert!(s.qp.state().is_error());
}

/// A peer whose connection manager goes away (as when its process dies) is reported
/// as disconnected.
#[test]
fn vanished_peer_is_reported() {
    let p: Pair<ShmProvider> = connect::<Shm>(&Opts::default());
    let Pair { mut s, c } = p;
    let conformance::Side { qp: cqp, h: ch } = c;
    drop(ch);
    let end = std::time::Instant::now() + conformance::DEADLINE;
    loop {
        s.pump();
        if s.events
            .iter()
            .any(|e| matches!(e, CmEvent::Disconnected { .. }))
        {
            break;
        }
        assert!(std::time::Instant::now() < end, "no Disconnected event");
        std::thread::yield_now();
    }
    assert!(s.qp.state().is_error());
    assert!(cqp.state().is_error());
}
