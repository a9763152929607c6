//! A peer's Terminate reaches the application with its reason. The peer here is a raw
//! kernel-like responder: it answers the MPA Request, then refuses the first RPC call
//! with the Terminate Linux siw sent in the lab when it had no receive posted
//! (`21 02 03 00`, little-endian bitfields: DDP / untagged / no buffer available, M and
//! D set, the Send's header copied). The requester's call must fail with that reason,
//! not as a bare lost connection, and the connection must close with it. The same peer
//! as a requester terminates a server's connection, whose close reason must name it.

use crate::engine_support;
use crate::siw_support;

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Instant;

use engine_support::{test_config, write_call, TestService, DEADLINE, PROC_NULL};
use rpcrdma::fabric::siw::{SiwConfig, SiwDevice, SiwProvider};
use rpcrdma::fabric::{AbortKind, AbortSite, PeerAbort};
use rpcrdma::iwarp::ddp::{MsnCounters, QueueNumber};
use rpcrdma::iwarp::fpdu::{encode_fpdu, fpdu_len};
use rpcrdma::iwarp::mpa::{
    decode_frame, encode_frame, EnhancedData, FrameKind, FrameParams, MpaError, Revision,
};
use rpcrdma::iwarp::rdmap::{Opcode, Placement, SegmentHeader};
use rpcrdma::iwarp::terminate::{
    DdpUntaggedError, RdmapOperationError, Terminate, TerminateCode, TerminateLayout,
    TerminateReason, TerminatedSegment,
};
use rpcrdma::{CallRequest, CallStatus, Outcome, TransportError};
use rpcrdma::{CloseReason, ConnEvent, ConnState};
use rpcrdma::{Requester, Responder};

/// The raw responder's side of the stream.
struct KernelLike {
    sock: TcpStream,
    inbox: Vec<u8>,
    eof: bool,
    crc: bool,
    msn: MsnCounters,
}

impl KernelLike {
    fn fill(&mut self) {
        if siw_support::fill(&mut self.sock, &mut self.inbox) {
            self.eof = true;
        }
    }

    /// Answers a complete MPA Request with a Reply; false while it is incomplete.
    fn answer_request(&mut self) -> bool {
        let (crc, len) = match decode_frame(&self.inbox) {
            Ok(fr) => {
                assert_eq!(fr.header.kind, FrameKind::Request, "an MPA Request first");
                (fr.header.crc, fr.len)
            }
            Err(MpaError::Incomplete { .. }) => return false,
            Err(e) => panic!("bad MPA Request: {e}"),
        };
        self.inbox.drain(..len);
        self.crc = crc;
        let mut f = [0u8; 128];
        let n = encode_frame(
            &mut f,
            &FrameParams {
                kind: FrameKind::Reply,
                crc,
                reject: false,
                revision: Revision::V2,
                enhanced: Some(EnhancedData::client_server(8, 8)),
            },
            b"",
        )
        .expect("MPA Reply");
        siw_support::write_all(&mut self.sock, &f[..n]);
        true
    }

    /// Connects to `addr` as a requester and sends an MPA Request asking for CRCs.
    fn connect(addr: SocketAddr) -> KernelLike {
        let mut p = KernelLike {
            sock: siw_support::connect_raw(addr),
            inbox: Vec::new(),
            eof: false,
            crc: true,
            msn: MsnCounters::new(),
        };
        siw_support::mpa_request(&mut p.sock, b"");
        p
    }

    /// Takes a complete MPA Reply; false while it is incomplete.
    fn take_reply(&mut self) -> bool {
        match decode_frame(&self.inbox) {
            Ok(fr) => {
                assert_eq!(fr.header.kind, FrameKind::Reply, "an MPA Reply");
                assert!(!fr.header.reject, "accepted");
                let len = fr.len;
                self.inbox.drain(..len);
                true
            }
            Err(MpaError::Incomplete { .. }) => false,
            Err(e) => panic!("bad MPA Reply: {e}"),
        }
    }

    /// The next whole FPDU: its header and its ULPDU length.
    fn take_fpdu(&mut self) -> Option<(SegmentHeader, u16)> {
        let (h, payload) = siw_support::take_fpdu(&mut self.inbox, self.crc)?;
        let ulpdu = h.encoded_len() + payload.len();
        Some((h, u16::try_from(ulpdu).expect("ULPDU fits 16 bits")))
    }

    /// Sends the Terminate kernel siw sends for a Send that found no receive, in its
    /// own layout.
    fn terminate_no_buffer(&mut self, send: &SegmentHeader, ulpdu_len: u16) {
        let mut copied = [0u8; 18];
        let n = send.encode(&mut copied).expect("header encodes");
        let t = Terminate {
            code: TerminateCode::DdpUntagged(DdpUntaggedError::NoBufferAvailable),
            segment_length: Some(ulpdu_len),
            ddp_header: Some(&copied[..n]),
            rdma_header: None,
            layout: TerminateLayout::LinuxSiw,
        };
        let mut body = [0u8; 64];
        let blen = t.encode(&mut body).expect("Terminate encodes");
        assert_eq!(&body[..4], &[0x21, 0x02, 0x03, 0x00], "the lab's octets");
        self.send_terminate(&body[..blen]);
    }

    /// Sends a Terminate message with `body`.
    fn send_terminate(&mut self, body: &[u8]) {
        let blen = body.len();
        let h = SegmentHeader::untagged(
            Opcode::Terminate,
            true,
            0,
            self.msn.take(QueueNumber::Terminate),
            0,
        );
        let mut f = vec![0u8; fpdu_len(h.encoded_len() + blen)];
        let n = encode_fpdu(&mut f, &h, body, self.crc).expect("FPDU");
        siw_support::write_all(&mut self.sock, &f[..n]);
    }
}

fn call(conn: &Requester<SiwProvider>) -> CallRequest {
    let mut msg = conn.alloc_msg().expect("send buffer");
    write_call(&mut msg, PROC_NULL, &[]);
    CallRequest::new(msg, 1024)
}

#[test]
fn a_kernel_terminate_is_the_calls_error_and_the_close_reason() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("non-blocking");
    let addr: SocketAddr = listener.local_addr().expect("address");
    let dev = SiwDevice::with_config(SiwConfig::strict()).expect("siw device");
    let mut conn =
        Requester::<SiwProvider>::connect_with(&dev, &addr, &test_config()).expect("connect");
    let end = Instant::now() + DEADLINE;
    let mut peer = loop {
        conn.poll(Instant::now());
        if let Ok((sock, _)) = listener.accept() {
            sock.set_nonblocking(true).expect("non-blocking");
            sock.set_nodelay(true).expect("nodelay");
            break KernelLike {
                sock,
                inbox: Vec::new(),
                eof: false,
                crc: false,
                msn: MsnCounters::new(),
            };
        }
        assert!(Instant::now() < end, "the requester never connected");
        std::thread::yield_now();
    };

    let mut replied = false;
    let mut submitted = false;
    let mut terminated: Option<SegmentHeader> = None;
    let mut outcome: Option<Outcome> = None;
    let mut closed: Option<CloseReason> = None;
    while outcome.is_none() || closed.is_none() {
        assert!(
            Instant::now() < end,
            "no outcome and close after the Terminate: replied {replied}, submitted \
             {submitted}, terminated {terminated:?}, outcome {:?}, closed {closed:?}, {:?}",
            outcome.as_ref().map(|o| o.status),
            conn.state()
        );
        conn.poll(Instant::now());
        peer.fill();
        if !replied {
            replied = peer.answer_request();
        } else if terminated.is_none() {
            while let Some((h, ulpdu_len)) = peer.take_fpdu() {
                // Wake-up and confirmation Reads go unanswered: this peer is about to
                // end the stream anyway.
                if h.opcode == Opcode::Send {
                    peer.terminate_no_buffer(&h, ulpdu_len);
                    terminated = Some(h);
                    break;
                }
            }
        }
        if !submitted && conn.state() == ConnState::Established {
            conn.submit(call(&conn), 7).expect("submit");
            submitted = true;
        }
        if let Some(o) = conn.poll_outcome() {
            outcome = Some(o);
        }
        while let Some(ev) = conn.poll_event() {
            if let ConnEvent::Closed(r) = ev {
                closed = Some(r);
            }
        }
        std::thread::yield_now();
    }

    let send = terminated.expect("the call reached the peer as a Send");
    let Placement::Untagged { qn, msn, .. } = send.placement else {
        panic!("a Send is untagged");
    };
    assert_eq!((qn, msn), (0, 1), "the first Send on the stream");
    let o = outcome.expect("outcome");
    assert_eq!(o.tag, 7);
    let CallStatus::Transport(TransportError::PeerAborted(why)) = o.status else {
        panic!("the call failed with {:?}, not the peer's reason", o.status);
    };
    // The provider-neutral form of what Linux siw sent (read in its layout).
    assert_eq!(
        why,
        PeerAbort::from(TerminateReason {
            code: TerminateCode::DdpUntagged(DdpUntaggedError::NoBufferAvailable),
            layout: TerminateLayout::LinuxSiw,
            segment: Some(TerminatedSegment::Untagged { qn: 0, msn: 1 }),
        })
    );
    assert_eq!(
        (why.kind, why.site, why.code),
        (
            AbortKind::Operation,
            Some(AbortSite::Message { queue: 0, msn: 1 }),
            0x1202
        ),
        "DDP (1), untagged buffer (2), MSN with no buffer available (2)"
    );
    assert_eq!(
        TransportError::PeerAborted(why).to_string(),
        "peer terminated the connection: DDP untagged buffer error: no buffer available (MSN 1, queue 0)"
    );
    assert_eq!(closed, Some(CloseReason::PeerAborted(why)));
    assert!(o.msg.is_some(), "the call's buffer comes back");
}

#[test]
fn a_requesters_terminate_is_the_servers_close_reason() {
    let dev = SiwDevice::with_config(SiwConfig::strict()).expect("siw device");
    let addr: SocketAddr = {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("address")
    };
    let mut server =
        Responder::<SiwProvider, TestService, _>::bind(dev, &addr, test_config(), || {
            Some(TestService::default())
        })
        .expect("server");
    server.keep_closed(true);
    let mut peer = KernelLike::connect(addr);
    let end = Instant::now() + DEADLINE;
    while !peer.take_reply() {
        assert!(Instant::now() < end, "no MPA Reply");
        server.poll(Instant::now());
        peer.fill();
        std::thread::yield_now();
    }
    // Kernel siw's "RDMAP remote operation / unexpected opcode", bare: 0x20 0x06 would
    // read the RFC way as a valid MPA code, so use "STag cannot be invalidated" (0x09),
    // which only the Linux reading makes sense of.
    peer.send_terminate(&[0x20, 0x09, 0x00, 0x00]);
    let closed = loop {
        assert!(
            Instant::now() < end,
            "the server never closed the connection"
        );
        server.poll(Instant::now());
        peer.fill();
        let mut closed = None;
        for c in server.connections_mut() {
            while let Some(ev) = c.poll_event() {
                if let ConnEvent::Closed(r) = ev {
                    closed = Some(r);
                }
            }
        }
        if let Some(r) = closed {
            break r;
        }
        std::thread::yield_now();
    };
    let CloseReason::PeerAborted(why) = closed else {
        panic!("closed for {closed:?}, not the peer's Terminate");
    };
    assert_eq!(
        why,
        PeerAbort::from(TerminateReason::bare(TerminateCode::RdmapOperation(
            RdmapOperationError::CannotInvalidate
        )))
    );
    assert_eq!((why.kind, why.site), (AbortKind::Operation, None));
    assert_eq!(
        closed.to_string(),
        "peer terminated the connection: RDMAP remote operation error: STag cannot be invalidated"
    );
}
