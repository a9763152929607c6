//! A hostile shm peer: second processes that connect as clients, then either forge
//! requests (garbled headers, entry lists, lengths, keys and offsets published with
//! correct sequence numbers, so the server's target parses them) or write random words
//! all over the connection segment the server's target reads (its request ring,
//! sequence words, flags, the ack and NAK fields) while calling, reconnecting whenever
//! their connection breaks. The
//! server (a `Responder` on its own thread) must stay up, keep serving a well-behaved
//! client in this process byte-exact, free the hostile connections' resources when
//! they go, and accept new clients afterwards. A crash (a fault on a bad index or
//! length) kills this test process, so the test fails then too. Every wait has a
//! deadline.

use crate::engine_support;

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use engine_support::*;
use rpcrdma::fabric::shm::{ShmAddr, ShmDevice, ShmProvider};
use rpcrdma::fabric::sim::SimRng;
use rpcrdma::{CallRequest, CallStatus, ConnState, Requester, Responder};

const CHILD_ADDR: &str = "RPCRDMA_HOSTILE_CHILD_ADDR";
const CHILD_SEED: &str = "RPCRDMA_HOSTILE_CHILD_SEED";
/// How long each hostile child scribbles.
const SCRIBBLE_FOR: Duration = Duration::from_millis(1500);
const HOSTILE_CHILDREN: u64 = 4;

fn nasty_word(rng: &mut SimRng) -> u64 {
    let r = rng.next_u64();
    match r % 8 {
        0 => 0,
        1 => u64::MAX,
        2 => r >> 56,
        3 => (r >> 40) & 0xffff_ffff,
        4 => 1 << (r >> 58),
        5 => u64::from(u32::MAX) << 32 | (r & 0xffff),
        _ => rng.next_u64(),
    }
}

fn echo(conn: &Requester<ShmProvider>, data: &[u8]) -> CallRequest {
    let mut b = conn.alloc_msg().expect("send buffer");
    write_call(&mut b, PROC_ECHO, &opaque(data));
    CallRequest::new(b, 4000)
}

/// In a child process started by the test below (and only there): connects, proves
/// the connection works, then attacks until its time is up, reconnecting whenever its
/// connection breaks. Even seeds forge requests (every request it publishes has its
/// header and body garbled, with the right sequence number, so the server's target
/// parses garbage); odd seeds scribble random words anywhere in the segment while
/// calling. Exits 0 having counted what it did; a panic here exits non-zero.
#[test]
fn hostile_peer_child() {
    let (Ok(name), Ok(seed)) = (std::env::var(CHILD_ADDR), std::env::var(CHILD_SEED)) else {
        return;
    };
    let seed: u64 = seed.parse().expect("seed");
    let forge = seed.is_multiple_of(2);
    let mut rng = SimRng::new(seed);
    let dev = ShmDevice::new();
    let addr = ShmAddr::abstract_name(name);
    let connect = || {
        Requester::connect(&dev, &addr)
            .config(test_config())
            .open()
            .expect("the hostile child connects")
    };
    let mut conn = connect();
    for i in 0..5u8 {
        let data = pattern(64, i);
        let o = conn.call(echo(&conn, &data), DEADLINE).expect("submits");
        assert_eq!(o.status, CallStatus::Success, "a call before the attack");
        assert_eq!(results(&o), opaque(&data), "echoed");
    }
    let end = Instant::now() + SCRIBBLE_FOR;
    let (mut words, mut connections, mut broken) = (0u64, 1u64, 0u64);
    while Instant::now() < end {
        if conn.state() != ConnState::Established {
            broken += 1;
            drop(conn);
            conn = connect();
            connections += 1;
        }
        if forge {
            conn.qp_mut().forge_requests(rng.next_u64() | 1);
        } else {
            let len = conn.qp_mut().own_segment_len();
            for _ in 0..32 {
                let off = rng.below(len as u64) as usize;
                let w = nasty_word(&mut rng);
                assert!(conn.qp_mut().scribble_own_segment(off, w), "in bounds");
                words += 1;
            }
        }
        // Keep requests flowing so the target reads what was forged or scribbled;
        // refusals (and no free buffers) are expected once the connection breaks.
        if let Ok(mut b) = conn.alloc_msg() {
            write_call(
                &mut b,
                PROC_ECHO,
                &opaque(&pattern(32, rng.next_u64() as u8)),
            );
            let _ = conn.submit(CallRequest::new(b, 4000), 0);
        }
        conn.poll(Instant::now());
        while conn.poll_outcome().is_some() {}
    }
    eprintln!(
        "hostile child {seed} ({}): {connections} connections, {broken} broken, \
         {words} words scribbled",
        if forge { "forging" } else { "scribbling" }
    );
    if forge {
        assert!(
            broken > 0,
            "forged requests were refused by the server's target"
        );
    }
    std::process::exit(0);
}

fn spawn_child(name: &str, seed: u64) -> Child {
    Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "engine_shm_hostile::hostile_peer_child",
            "--nocapture",
        ])
        .env(CHILD_ADDR, name)
        .env(CHILD_SEED, seed.to_string())
        .spawn()
        .expect("spawn the hostile child")
}

/// One echo round trip on the good connection, checked byte for byte.
fn good_call(conn: &mut Requester<ShmProvider>, n: u64) {
    let data = pattern(48 + (n % 200) as usize, n as u8);
    let o = conn.call(echo(conn, &data), DEADLINE).expect("submits");
    assert_eq!(o.status, CallStatus::Success, "good call {n}");
    assert_eq!(results(&o), opaque(&data), "good call {n} echoed exactly");
}

#[test]
fn a_peer_scribbling_over_its_ring_hurts_only_its_own_connection() {
    let sdev = ShmDevice::new();
    let name = format!("rpcrdma-hostile-{}-{}", std::process::id(), unique());
    let addr = ShmAddr::abstract_name(name.clone());
    let factory: fn() -> Option<TestService> = || Some(TestService::default());
    let server = Responder::listen(sdev.clone(), &addr)
        .config(test_config())
        .serve(factory)
        .expect("server listens");
    let serving = server.spawn();

    let cdev = ShmDevice::new();
    let mut good = Requester::connect(&cdev, &addr)
        .config(test_config())
        .open()
        .expect("good client connects");
    good_call(&mut good, 0);
    let baseline = (
        sdev.live_pds(),
        sdev.live_arenas(),
        sdev.live_registrations(),
    );

    let mut children: Vec<Child> = (0..HOSTILE_CHILDREN)
        .map(|i| spawn_child(&name, 0x5eed_0000 + i))
        .collect();
    let end = Instant::now() + SCRIBBLE_FOR + DEADLINE * 2;
    let mut n = 1;
    let mut codes = Vec::new();
    while !children.is_empty() {
        assert!(Instant::now() < end, "hostile children did not finish");
        good_call(&mut good, n);
        n += 1;
        children.retain_mut(|c| match c.try_wait().expect("child status") {
            Some(status) => {
                codes.push(status.code());
                false
            }
            None => true,
        });
    }
    assert!(
        codes.iter().all(|c| *c == Some(0)),
        "every hostile child ran to its end: {codes:?}"
    );
    assert!(n > 10, "the good client kept calling meanwhile ({n} calls)");

    // The hostile connections end with their processes; the server frees them.
    let end = Instant::now() + DEADLINE;
    loop {
        good_call(&mut good, n);
        n += 1;
        let now = (
            sdev.live_pds(),
            sdev.live_arenas(),
            sdev.live_registrations(),
        );
        if now == baseline {
            break;
        }
        assert!(
            Instant::now() < end,
            "server resources back to one connection's: {now:?} vs {baseline:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }

    // And it still takes new clients.
    let mut late = Requester::connect(&cdev, &addr)
        .config(test_config())
        .open()
        .expect("a new client connects after the attack");
    good_call(&mut late, n);
    good_call(&mut good, n + 1);
    let server = serving.stop().expect("the server thread did not panic");
    let c = server.counters();
    // Each hostile child reconnects after every break, so at least one connection each.
    assert!(
        c.accepted >= HOSTILE_CHILDREN + 2,
        "every client was accepted: {c:?}"
    );
}
