//! The edges of shm's fast paths, beyond what the generic conformance suite covers.
//!
//! - Small Sends carry their payload inside the request slot: sizes around the inline
//!   limit, gathered from several entries, and Sends sourced from the sink of an RDMA
//!   Read still in flight, which must carry the Read's data as a Send by reference
//!   would.
//! - The send CQ reads the peer's acks only while a signaled request is outstanding:
//!   an unsignaled request that fails must still be reported, with its own status.

use crate::conformance;

use conformance::{connect, pattern, Fixture, Opts, Pair};
use rpcrdma::fabric::shm::{ShmAddr, ShmDevice, ShmProvider};
use rpcrdma::fabric::{
    MemoryRegion, PostErrorKind, QpCaps, QpConfig, QueuePair, RecvWr, RemoteAddr, SendFlags,
    SendWr, Sge, WcOpcode, WcStatus,
};

struct ShmFixture;

impl Fixture for ShmFixture {
    type P = ShmProvider;

    fn open_device() -> ShmDevice {
        ShmDevice::new()
    }

    fn unique_addr() -> ShmAddr {
        ShmAddr::abstract_name(format!(
            "rpcrdma-shm-fastpath-{}-{}",
            std::process::id(),
            conformance::unique_number()
        ))
    }
}

const CANARY: u8 = 0x5a;

fn pair_with_sges(n: u32) -> Pair<ShmProvider> {
    let cfg = QpConfig {
        caps: QpCaps {
            max_send_sge: n,
            max_recv_sge: n,
            ..QpCaps::default()
        },
        ..QpConfig::default()
    };
    connect::<ShmFixture>(&Opts {
        server: cfg,
        client: cfg,
        ..Opts::default()
    })
}

/// `len` bytes at `off` split into three uneven entries (some possibly empty).
fn split3(side: &conformance::Side<ShmProvider>, off: usize, len: usize) -> [Sge; 3] {
    let a = len / 5;
    let b = len / 2;
    [
        side.sge(off, a),
        side.sge(off + a, b),
        side.sge(off + a + b, len - a - b),
    ]
}

#[test]
fn sizes_around_the_inline_limit_arrive_intact() {
    let mut p = pair_with_sges(3);
    for (i, len) in [0usize, 1, 31, 32, 33, 159, 160, 161, 192, 1000]
        .into_iter()
        .enumerate()
    {
        let data = pattern(i as u64, len);
        p.c.fill(0, &data);
        p.s.fill(10_000, &vec![CANARY; len + 64]);
        let rb = split3(&p.s, 10_000, len + 32);
        p.s.qp
            .post_recv(&[RecvWr {
                wr_id: i as u64,
                sgl: &rb,
            }])
            .unwrap();
        let sb = split3(&p.c, 0, len);
        p.c.qp.post_send(&[SendWr::send(i as u64, &sb)]).unwrap();
        let (s, c) = p.completions(1, 1);
        assert_eq!(
            (s[0].opcode, s[0].status),
            (WcOpcode::Recv, WcStatus::Success)
        );
        assert_eq!(
            (c[0].opcode, c[0].status),
            (WcOpcode::Send, WcStatus::Success)
        );
        assert_eq!(s[0].byte_len as usize, len);
        assert_eq!(c[0].byte_len as usize, len);
        assert!(p.s.read(10_000, len) == data, "{len}-byte payload differs");
        assert!(
            p.s.read(10_000 + len, 64).iter().all(|&b| b == CANARY),
            "bytes past a {len}-byte payload were written"
        );
    }
}

/// Reads `remote` into the client's `sink`, then Sends from the sink; checks the
/// server received the Read's data. `split` posts the two in separate calls.
fn read_then_send(p: &mut Pair<ShmProvider>, round: u64, len: usize, split: bool) {
    let data = pattern(100 + round, len);
    p.s.fill(50_000, &data);
    p.c.fill(20_000, &vec![CANARY; len]);
    p.s.fill(30_000, &vec![0; len]);
    let rb = [p.s.sge(30_000, len)];
    p.s.qp
        .post_recv(&[RecvWr {
            wr_id: round,
            sgl: &rb,
        }])
        .unwrap();
    let sink = [p.c.sge(20_000, len)];
    let read = SendWr::read(round, &sink, p.s.remote(50_000));
    let send = SendWr::send(round + 1000, &sink);
    if split {
        p.c.qp.post_send(&[read]).unwrap();
        p.c.qp.post_send(&[send]).unwrap();
    } else {
        p.c.qp.post_send(&[read, send]).unwrap();
    }
    let (s, c) = p.completions(1, 2);
    assert_eq!(s[0].status, WcStatus::Success);
    assert!(c.iter().all(|c| c.status == WcStatus::Success), "{c:?}");
    assert!(
        p.s.read(30_000, len) == data,
        "round {round}: the Send did not carry the Read's data"
    );
}

#[test]
fn a_send_from_a_read_sink_carries_the_read_data() {
    let mut p = pair_with_sges(1);
    for round in 0..8 {
        read_then_send(&mut p, round, 48, round % 2 == 1);
    }
    // Once the Reads have finished, small Sends go inline again and still arrive.
    read_then_send(&mut p, 99, 4000, false);
    let data = pattern(7, 16);
    p.c.fill(0, &data);
    let rb = [p.s.sge(30_000, 16)];
    p.s.qp.post_recv(&[RecvWr { wr_id: 1, sgl: &rb }]).unwrap();
    let sb = [p.c.sge(0, 16)];
    p.c.qp.post_send(&[SendWr::send(1, &sb)]).unwrap();
    let (s, _) = p.completions(1, 1);
    assert_eq!(s[0].status, WcStatus::Success);
    assert!(p.s.read(30_000, 16) == data);
}

#[test]
fn an_unsignaled_request_that_fails_is_reported() {
    let mut p = pair_with_sges(1);
    let local = [p.c.sge(0, 64)];
    let mut bad = p.s.remote(4096);
    bad.rkey = rpcrdma::fabric::mr::next_key(p.s.mr.rkey());
    let ok = RemoteAddr {
        addr: p.s.addr(8192),
        rkey: p.s.mr.rkey(),
    };
    p.c.qp
        .post_send(&[
            SendWr::write(1, &local, ok).with_flags(SendFlags::NONE),
            SendWr::write(2, &local, bad).with_flags(SendFlags::NONE),
            SendWr::write(3, &local, ok).with_flags(SendFlags::NONE),
        ])
        .unwrap();
    // The first succeeded silently; the second is reported with the NAK's status even
    // though unsignaled; the third never ran.
    let (_, c) = p.completions(0, 2);
    assert_eq!((c[0].wr_id, c[0].status), (2, WcStatus::RemoteAccessError));
    assert_eq!((c[1].wr_id, c[1].status), (3, WcStatus::WrFlushed));
    p.wait_both_failed();
}

#[test]
fn an_unsignaled_inline_send_without_a_receive_is_reported() {
    let mut p = pair_with_sges(1);
    let b = [p.c.sge(0, 16)];
    p.c.qp
        .post_send(&[SendWr::send(5, &b).with_flags(SendFlags::NONE)])
        .unwrap();
    let (_, c) = p.completions(0, 1);
    assert_eq!((c[0].wr_id, c[0].status), (5, WcStatus::RnrRetryExceeded));
    p.wait_both_failed();
}

#[test]
fn unsignaled_successes_stay_silent_until_a_signaled_one() {
    let mut p = pair_with_sges(1);
    let local = [p.c.sge(0, 64)];
    let ok = p.s.remote(8192);
    for i in 0..5 {
        p.c.qp
            .post_send(&[SendWr::write(i, &local, ok).with_flags(SendFlags::NONE)])
            .unwrap();
    }
    // Let the target execute them all; nothing is reported on either side.
    for _ in 0..50 {
        p.pump();
    }
    assert!(p.c.done.is_empty(), "{:?}", p.c.done);
    assert!(p.s.done.is_empty(), "{:?}", p.s.done);
    p.c.qp.post_send(&[SendWr::write(9, &local, ok)]).unwrap();
    let (_, c) = p.completions(0, 1);
    assert_eq!((c[0].wr_id, c[0].status), (9, WcStatus::Success));
}

/// `post_send` takes leading inline one-entry Sends by a fast path and hands the rest
/// of the chain to the general path: a refusal there counts the fast-path Sends as
/// posted, and they arrive, in order, with their data; a Send the fast path declines
/// (its key is bad) completes in error as before.
#[test]
fn a_refusal_after_inline_sends_counts_them_as_posted() {
    let cfg = QpConfig {
        caps: QpCaps {
            max_send_wr: 4,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
        },
        ..QpConfig::default()
    };
    let mut p = connect::<ShmFixture>(&Opts {
        server: cfg,
        client: cfg,
        ..Opts::default()
    });
    // Exactly the receives the Sends below consume: none is left to flush (at a
    // moment of the server's choosing) when the last one fails the queue pairs.
    let rb: Vec<[Sge; 1]> = (0..6).map(|i| [p.s.sge(40_000 + 64 * i, 64)]).collect();
    let recvs: Vec<RecvWr<'_>> = rb
        .iter()
        .enumerate()
        .map(|(i, sgl)| RecvWr {
            wr_id: i as u64,
            sgl,
        })
        .collect();
    p.s.qp.post_recv(&recvs).unwrap();
    for i in 0..6 {
        p.c.fill(64 * i, &pattern(300 + i as u64, 24));
    }
    let sb: Vec<[Sge; 1]> = (0..6).map(|i| [p.c.sge(64 * i, 24)]).collect();
    let two = [p.c.sge(0, 8), p.c.sge(8, 8)];

    // Two inline Sends, then one with more entries than allowed.
    let chain = [
        SendWr::send(10, &sb[0]),
        SendWr::send(11, &sb[1]),
        SendWr::send(12, &two),
    ];
    let err = p.c.qp.post_send(&chain).unwrap_err();
    assert_eq!(
        (err.posted, err.kind),
        (2, PostErrorKind::TooManySge { given: 2, max: 1 })
    );
    let (s, c) = p.completions(2, 2);
    assert_eq!(c.iter().map(|c| c.wr_id).collect::<Vec<_>>(), vec![10, 11]);
    assert!(s.iter().chain(&c).all(|w| w.status == WcStatus::Success));
    assert!(p.s.read(40_000, 24) == pattern(300, 24));
    assert!(p.s.read(40_064, 24) == pattern(301, 24));

    // Six inline Sends on a send queue of four: four go, the refusal says so.
    let chain: Vec<SendWr<'_>> = (0..6)
        .map(|i| SendWr::send(20 + i, &sb[i as usize]))
        .collect();
    let err = p.c.qp.post_send(&chain).unwrap_err();
    assert_eq!(
        (err.posted, err.kind),
        (4, PostErrorKind::QueueFull { depth: 4 })
    );
    let (s, c) = p.completions(4, 4);
    assert_eq!(
        c.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        vec![20, 21, 22, 23]
    );
    assert_eq!(
        s.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        vec![2, 3, 4, 5]
    );
    for i in 0..4 {
        assert!(
            p.s.read(40_000 + 64 * (2 + i), 24) == pattern(300 + i as u64, 24),
            "Send {i} of the second chain"
        );
    }

    // A Send whose key is wrong completes in error, with nothing sent.
    let mut bad = sb[4];
    bad[0].lkey = rpcrdma::fabric::mr::next_key(p.c.mr.lkey());
    p.c.qp.post_send(&[SendWr::send(30, &bad)]).unwrap();
    let (_, c) = p.completions(0, 1);
    assert_eq!(
        (c[0].wr_id, c[0].status),
        (30, WcStatus::LocalProtectionError)
    );
}
