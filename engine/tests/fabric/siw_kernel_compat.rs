//! What the interop with Linux's kernel siw (lab step verbs-interop) taught, as rules a
//! raw iWARP peer checks against our siw provider without a kernel:
//!
//! - A kernel siw requester sends its first Send the moment the MPA Reply arrives, and
//!   iWARP has no receiver-not-ready retry. A responder must have its receives posted by
//!   then: [`ConnectionManager::accept_prepared`] runs the posting before the peer is
//!   told, and the Send that follows the Reply at once lands in that receive.
//! - A Send With Invalidate carries the key to invalidate in its DDP header. libsiw reads
//!   that key from the RDMA key word of the work request; ours once left it zero there,
//!   so kernel siw sent STag 0, which we answer with an RDMAP Remote Protection "invalid
//!   STag" Terminate that copies the segment's header (exactly the octets captured).

use crate::siw_support;

use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma::fabric::siw::{SiwConfig, SiwDevice, SiwQp};
use rpcrdma::fabric::{
    CmEvent, Completion, CompletionQueue, ConnectionManager, MemoryRegion, QpConfig, QpInit,
    QueuePair, RecvWr, Sge, WcOpcode, WcStatus,
};
use rpcrdma::iwarp::ddp::{MsnCounters, QueueNumber};
use rpcrdma::iwarp::fpdu::{encode_fpdu, fpdu_len};
use rpcrdma::iwarp::mpa::{decode_frame, MpaError};
use rpcrdma::iwarp::rdmap::{Opcode, SegmentHeader};
use rpcrdma::iwarp::terminate::{RdmapProtectionError, Terminate, TerminateCode};
use rpcrdma_pools::Arena;

/// The longest any single wait may take before the test fails.
const DEADLINE: Duration = Duration::from_secs(5);

/// A raw iWARP requester: a TCP socket and the sans-IO codecs, CRCs on.
struct Peer {
    sock: TcpStream,
    inbox: Vec<u8>,
    eof: bool,
    msn: MsnCounters,
}

impl Peer {
    fn connect(addr: SocketAddr) -> Peer {
        let mut p = Peer {
            sock: siw_support::connect_raw(addr),
            inbox: Vec::new(),
            eof: false,
            msn: MsnCounters::new(),
        };
        siw_support::mpa_request(&mut p.sock, b"kernel-like");
        p
    }

    fn write_all(&mut self, b: &[u8]) {
        siw_support::write_all(&mut self.sock, b);
    }

    /// Reads what has arrived, without waiting.
    fn fill(&mut self) {
        if siw_support::fill(&mut self.sock, &mut self.inbox) {
            self.eof = true;
        }
    }

    /// Takes the MPA Reply if it is complete.
    fn take_reply(&mut self) -> bool {
        match decode_frame(&self.inbox) {
            Ok(fr) => {
                assert!(fr.header.crc, "the Reply keeps CRCs on");
                let len = fr.len;
                self.inbox.drain(..len);
                true
            }
            Err(MpaError::Incomplete { .. }) => false,
            Err(e) => panic!("bad MPA Reply: {e}"),
        }
    }

    fn fpdu(h: SegmentHeader, payload: &[u8]) -> Vec<u8> {
        let mut b = vec![0u8; fpdu_len(h.encoded_len() + payload.len())];
        let n = encode_fpdu(&mut b, &h, payload, true).expect("FPDU");
        b.truncate(n);
        b
    }

    fn take_fpdu(&mut self) -> Option<(SegmentHeader, Vec<u8>)> {
        siw_support::take_fpdu(&mut self.inbox, true)
    }
}

/// Our siw as the responder, polled by the test.
struct Responder {
    cm: rpcrdma::fabric::siw::SiwCm,
    cq: rpcrdma::fabric::siw::SiwCq,
    pd: rpcrdma::fabric::siw::SiwPd,
    mr: rpcrdma::fabric::siw::SiwMr,
    arena: Arc<Arena>,
    qp: Option<SiwQp>,
    done: Vec<Completion>,
    _dev: SiwDevice,
    addr: SocketAddr,
}

impl Responder {
    fn new() -> Responder {
        let l = siw_support::listening(SiwConfig::strict(), 1 << 16, "siw-kernel-compat");
        Responder {
            cm: l.cm,
            cq: l.cq,
            pd: l.pd,
            mr: l.mr,
            arena: l.arena,
            qp: None,
            done: Vec::new(),
            _dev: l.dev,
            addr: l.addr,
        }
    }

    fn sge(&self, off: usize, len: usize) -> Sge {
        Sge::new(
            self.arena.base() as u64 + off as u64,
            len as u32,
            self.mr.lkey(),
        )
    }

    fn read(&self, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= self.arena.len());
        let mut v = vec![0u8; len];
        // SAFETY: in bounds; the provider writes this memory only while we poll.
        unsafe { std::ptr::copy_nonoverlapping(self.arena.base().add(off), v.as_mut_ptr(), len) }
        v
    }

    fn poll(&mut self) -> Option<CmEvent<rpcrdma::fabric::siw::SiwConnRequest>> {
        let mut buf = [Completion::EMPTY; 8];
        let n = self.cq.poll(&mut buf);
        self.done.extend_from_slice(&buf[..n]);
        self.cm.poll_event().expect("poll_event")
    }

    /// Accepts the next connect request with `accept_prepared`, posting one receive of
    /// 256 octets at offset 0 in the hook; returns how often the hook ran.
    fn accept_with_receive(&mut self, peer: &mut Peer) -> u32 {
        let end = Instant::now() + DEADLINE;
        let request = loop {
            if let Some(CmEvent::ConnectRequest { request, .. }) = self.poll() {
                break request;
            }
            peer.fill();
            assert!(Instant::now() < end, "no connect request");
            std::thread::yield_now();
        };
        let sge = [self.sge(0, 256)];
        let init = QpInit {
            pd: &self.pd,
            send_cq: &self.cq,
            recv_cq: &self.cq,
            srq: None,
            config: QpConfig::default(),
        };
        let mut runs = 0u32;
        let qp = self
            .cm
            .accept_prepared(request, init, b"ok", &mut |qp: &mut SiwQp| {
                runs += 1;
                qp.post_recv(&[RecvWr {
                    wr_id: 77,
                    sgl: &sge,
                }])
                .expect("a receive posts before the reply");
            })
            .expect("accept_prepared");
        self.qp = Some(qp);
        runs
    }

    /// Polls until `cond` holds for the responder and the peer.
    fn wait(&mut self, peer: &mut Peer, what: &str, mut cond: impl FnMut(&Self, &Peer) -> bool) {
        let end = Instant::now() + DEADLINE;
        loop {
            let _ = self.poll();
            peer.fill();
            if cond(self, peer) {
                return;
            }
            assert!(Instant::now() < end, "timed out waiting for {what}");
            std::thread::yield_now();
        }
    }
}

/// Connects `peer` to `r` (receive posted in the hook) and consumes the MPA Reply.
fn connected() -> (Responder, Peer, u32) {
    let mut r = Responder::new();
    let mut peer = Peer::connect(r.addr);
    let runs = r.accept_with_receive(&mut peer);
    r.wait(&mut peer, "the MPA Reply", |_, p| {
        decode_frame(&p.inbox).is_ok()
    });
    assert!(peer.take_reply());
    (r, peer, runs)
}

#[test]
fn a_send_right_behind_the_mpa_reply_lands_in_the_receive_posted_before_it() {
    let (mut r, mut peer, runs) = connected();
    assert_eq!(runs, 1, "the hook runs exactly once");
    // As kernel siw does: the first Send goes out as soon as the Reply is read, with no
    // wait for anything from the responder.
    let call = b"RPC NULL call, sent the moment the MPA Reply arrived";
    let h = SegmentHeader::untagged(Opcode::Send, true, 0, peer.msn.take(QueueNumber::Send), 0);
    peer.write_all(&Peer::fpdu(h, call));
    r.wait(&mut peer, "the receive completion", |r, p| {
        !r.done.is_empty() || p.eof
    });
    let wc = *r
        .done
        .first()
        .expect("a receive completion, not a no-buffer Terminate");
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.status, wc.byte_len),
        (77, WcOpcode::Recv, WcStatus::Success, call.len() as u32)
    );
    assert_eq!(r.read(0, call.len()), call.to_vec());
    assert!(!peer.eof, "the stream stays up");
    assert!(
        peer.take_fpdu().is_none(),
        "no Terminate (or anything else) came back"
    );
    assert!(r.qp.as_ref().is_some_and(|q| !q.state().is_error()));
}

#[test]
fn a_send_with_invalidate_naming_stag_zero_is_an_invalid_stag_terminate() {
    let (mut r, mut peer, _) = connected();
    // The reply kernel siw sent when libsiw found no key in the RDMA key word.
    let reply = [0x5Au8; 48];
    let h = SegmentHeader::untagged(
        Opcode::SendInvalidate,
        true,
        0,
        peer.msn.take(QueueNumber::Send),
        0,
    );
    peer.write_all(&Peer::fpdu(h, &reply));
    let end = Instant::now() + DEADLINE;
    let (th, body) = loop {
        if let Some(f) = peer.take_fpdu() {
            break f;
        }
        assert!(!peer.eof, "closed before the Terminate");
        assert!(Instant::now() < end, "no Terminate");
        let _ = r.poll();
        peer.fill();
        std::thread::yield_now();
    };
    assert_eq!(th.opcode, Opcode::Terminate);
    let t = Terminate::decode(&body).expect("Terminate decodes");
    assert_eq!(
        t.code,
        TerminateCode::RdmapProtection(RdmapProtectionError::InvalidStag)
    );
    // Layer 0, type 1, code 0, M and D set: the first octets the capture showed.
    assert_eq!(&body[..3], &[0x01, 0x00, 0xC0]);
    let mut copied = [0u8; 18];
    let n = h.encode(&mut copied).expect("encodes");
    assert_eq!(t.ddp_header, Some(&copied[..n]), "the offending header");
    r.wait(&mut peer, "the queue pair to fail", |r, _| {
        r.qp.as_ref().is_some_and(|q| q.state().is_error())
    });
    let wc = r
        .done
        .iter()
        .find(|c| c.wr_id == 77)
        .copied()
        .expect("the receive completes");
    assert_ne!(wc.status, WcStatus::Success, "nothing was delivered");
}
