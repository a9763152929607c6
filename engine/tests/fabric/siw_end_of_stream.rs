//! A peer's close that reaches the socket together with its last message.
//!
//! The siw driver uses edge-triggered epoll and counts a read that returns less than it
//! asked for as having emptied the socket (issue 14: no EAGAIN read per message). A TCP
//! end of stream is not data: when the last message and the FIN are both queued before
//! the driver looks, one readiness event reports both, the read returns the message
//! short, and the FIN raises no further event. Unless the driver remembers that the
//! event said "read side closed", the connection stays Running forever: its posted work
//! never completes and nobody learns the peer is gone (what the siw soak showed as
//! stalled connections and calls without an outcome).
//!
//! The test is deterministic: the raw peer writes its Send and shuts its write side
//! before the device is polled again, and waits until its own FIN is acknowledged (TCP
//! state FIN_WAIT2), so both are in the device's socket when it next asks epoll. Five
//! connections keep the driver off its speculative reads (a device with at most four
//! running connections reads every socket at every poll and would find the end anyway).

use crate::conformance::DEADLINE;
use crate::siw_support;

use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Instant;

use rpcrdma::fabric::siw::{SiwConfig, SiwConnRequest, SiwQp};
use rpcrdma::fabric::{
    CmEvent, Completion, CompletionQueue, ConnId, ConnectionManager, MemoryRegion, QpCaps,
    QpConfig, QpInit, QueuePair, RecvWr, Sge, WcOpcode, WcStatus,
};
use rpcrdma::iwarp::fpdu::{encode_fpdu, fpdu_len};
use rpcrdma::iwarp::mpa::decode_frame;
use rpcrdma::iwarp::rdmap::{Opcode, SegmentHeader};

/// More running connections than the driver reads speculatively (`DIRECT_MAX_CONNS`).
const CONNECTIONS: usize = 5;

/// The kernel's TCP state of `sock` (`tcpi_state`).
fn tcp_state(sock: &TcpStream) -> u8 {
    // SAFETY: all-zero is a valid tcp_info.
    let mut info: libc::tcp_info = unsafe { core::mem::zeroed() };
    let mut len = core::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` and `len` are valid for writes of their sizes.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    assert_eq!(r, 0, "TCP_INFO");
    info.tcpi_state
}

/// Linux's TCP_FIN_WAIT2: our FIN was acknowledged, so it is in the peer's socket.
const TCP_FIN_WAIT2: u8 = 5;

#[test]
fn a_close_arriving_with_the_last_message_ends_the_connection() {
    let mut l = siw_support::listening(SiwConfig::strict(), 1 << 20, "siw-eof");
    let mut raws = Vec::new();
    let mut qps: Vec<(ConnId, SiwQp)> = Vec::new();
    let mut done: Vec<Completion> = Vec::new();
    let mut events = Vec::new();
    let pump = |l: &mut siw_support::Listening,
                done: &mut Vec<Completion>,
                events: &mut Vec<CmEvent<SiwConnRequest>>| {
        let mut wc = [Completion::EMPTY; 16];
        let n = l.cq.poll(&mut wc);
        done.extend_from_slice(&wc[..n]);
        while let Some(e) = l.cm.poll_event().expect("poll_event") {
            events.push(e);
        }
    };
    for i in 0..CONNECTIONS {
        let mut raw = siw_support::connect_raw(l.addr);
        siw_support::mpa_request(&mut raw, b"eof");
        let end = Instant::now() + DEADLINE;
        let request = loop {
            pump(&mut l, &mut done, &mut events);
            if let Some(at) = events
                .iter()
                .position(|e| matches!(e, CmEvent::ConnectRequest { .. }))
            {
                match events.remove(at) {
                    CmEvent::ConnectRequest { request, .. } => break request,
                    _ => unreachable!(),
                }
            }
            assert!(Instant::now() < end, "no connect request");
            std::thread::yield_now();
        };
        let init = QpInit {
            pd: &l.pd,
            send_cq: &l.cq,
            recv_cq: &l.cq,
            srq: None,
            // Small queues: five connections share the 256-deep completion queue.
            config: QpConfig {
                caps: QpCaps {
                    max_send_wr: 4,
                    max_recv_wr: 4,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                },
                ..QpConfig::default()
            },
        };
        let mut qp = l.cm.accept(request, init, b"").expect("accept");
        let rb = [Sge::new(
            l.arena.base() as u64 + (i * 4096) as u64,
            4096,
            l.mr.lkey(),
        )];
        qp.post_recv(&[RecvWr {
            wr_id: i as u64,
            sgl: &rb,
        }])
        .expect("post a receive");
        let conn = qp.conn_id();
        let mut inbox = Vec::new();
        let end = Instant::now() + DEADLINE;
        loop {
            pump(&mut l, &mut done, &mut events);
            siw_support::fill(&mut raw, &mut inbox);
            let established = events
                .iter()
                .any(|e| matches!(e, CmEvent::Established { conn: c, .. } if *c == conn));
            if established && decode_frame(&inbox).is_ok() {
                break;
            }
            assert!(Instant::now() < end, "connection {i} not established");
            std::thread::yield_now();
        }
        raws.push(raw);
        qps.push((conn, qp));
    }
    // Settle: every connection running, the driver asking epoll each poll.
    for _ in 0..100 {
        pump(&mut l, &mut done, &mut events);
    }
    assert!(done.is_empty(), "nothing completes before the peer sends");

    // The peer's last Send and its FIN, both in the socket before the device looks.
    let raw = &mut raws[0];
    let h = SegmentHeader::untagged(Opcode::Send, true, 0, 1, 0);
    let mut b = vec![0u8; fpdu_len(h.encoded_len() + 5)];
    let n = encode_fpdu(&mut b, &h, b"bye!!", true).expect("fpdu");
    siw_support::write_all(raw, &b[..n]);
    raw.shutdown(Shutdown::Write).expect("shutdown");
    let end = Instant::now() + DEADLINE;
    while tcp_state(raw) != TCP_FIN_WAIT2 {
        assert!(
            Instant::now() < end,
            "the device's kernel never took our FIN"
        );
        std::thread::yield_now();
    }

    let (conn, _) = &qps[0];
    let conn = *conn;
    let end = Instant::now() + DEADLINE;
    loop {
        pump(&mut l, &mut done, &mut events);
        let received = done
            .iter()
            .any(|c| c.wr_id == 0 && c.opcode == WcOpcode::Recv && c.status == WcStatus::Success);
        let down = events
            .iter()
            .any(|e| matches!(e, CmEvent::Disconnected { conn: c } if *c == conn));
        if received && down {
            break;
        }
        assert!(
            Instant::now() < end,
            "the peer's close went unnoticed (message received: {received}, disconnected: \
             {down}): the connection would stay Running with nothing more to read"
        );
        std::thread::yield_now();
    }
    assert!(qps[0].1.state().is_error(), "the queue pair failed");
    // SAFETY: the first receive's buffer, completed, in the registered arena.
    let got = unsafe { std::slice::from_raw_parts(l.arena.base(), 5) };
    assert_eq!(got, b"bye!!", "the message before the close was placed");
    for (i, (c, qp)) in qps.iter().enumerate().skip(1) {
        assert!(
            !qp.state().is_error(),
            "connection {i} ({c:?}) is untouched"
        );
    }
}
