//! siw-specific rules. Most talk to the provider from a raw TCP peer built from the
//! sans-IO iWARP codecs, so the exact octets it answers with (MPA Replies, Terminates,
//! Read Responses) are checked, not just the resulting states; the rest connect two siw
//! devices with settings the conformance suite does not use (small MSS, CRC on one side
//! only, revision 1, completions at transmit, no receive with infinite RNR retry).

use crate::conformance;
use crate::siw_support;

use std::collections::VecDeque;
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use conformance::{connect, connect_with, pattern, Fixture, Opts, Pair, DEADLINE};
use rpcrdma::fabric::siw::{SiwConfig, SiwConnRequest, SiwDevice, SiwProvider, WireTap};
use rpcrdma::fabric::{
    CmEvent, CmPrivateData, Completion, CompletionQueue, ConnectionManager, Device, MemoryRegion,
    QpConfig, QpInit, QpState, QueuePair, RecvWr, RemoteAddr, SendWr, Sge, WcOpcode, WcStatus,
    RNR_RETRY_INFINITE,
};
use rpcrdma::iwarp::ddp::{MsnCounters, QueueNumber};
use rpcrdma::iwarp::fpdu::{encode_fpdu, fpdu_len};
use rpcrdma::iwarp::mpa::{
    decode_frame, encode_frame, EnhancedData, FrameKind, FrameParams, MpaError, Revision,
};
use rpcrdma::iwarp::rdmap::{Opcode, Placement, ReadRequest, SegmentHeader};
use rpcrdma::iwarp::terminate::{
    DdpUntaggedError, MpaLlpError, RdmapProtectionError, Terminate, TerminateCode, TerminateLayout,
    TerminatedSegment,
};
use rpcrdma_pools::Arena;

// ---------------------------------------------------------------------------------------
// A siw server polled by the test.

struct Server {
    qp: Option<rpcrdma::fabric::siw::SiwQp>,
    mr: rpcrdma::fabric::siw::SiwMr,
    arena: Arc<Arena>,
    cq: rpcrdma::fabric::siw::SiwCq,
    cm: rpcrdma::fabric::siw::SiwCm,
    pd: rpcrdma::fabric::siw::SiwPd,
    _dev: SiwDevice,
    addr: SocketAddr,
    events: VecDeque<CmEvent<SiwConnRequest>>,
    done: Vec<Completion>,
}

impl Server {
    fn new(cfg: SiwConfig) -> Server {
        let l = siw_support::listening(cfg, 1 << 20, "siw-test");
        Server {
            qp: None,
            mr: l.mr,
            arena: l.arena,
            cq: l.cq,
            cm: l.cm,
            pd: l.pd,
            _dev: l.dev,
            addr: l.addr,
            events: VecDeque::new(),
            done: Vec::new(),
        }
    }

    fn pump(&mut self) {
        let mut buf = [Completion::EMPTY; 16];
        let n = self.cq.poll(&mut buf);
        self.done.extend_from_slice(&buf[..n]);
        if let Some(e) = self.cm.poll_event().expect("poll_event") {
            self.events.push_back(e);
        }
    }

    fn addr_of(&self, off: usize) -> u64 {
        self.arena.base() as u64 + off as u64
    }

    fn sge(&self, off: usize, len: usize) -> Sge {
        Sge::new(self.addr_of(off), len as u32, self.mr.lkey())
    }

    fn fill(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.arena.len());
        // SAFETY: in bounds; the provider touches this memory only while we poll.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.arena.base().add(off), data.len())
        }
    }

    fn read(&self, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= self.arena.len());
        let mut v = vec![0u8; len];
        // SAFETY: as in `fill`.
        unsafe { std::ptr::copy_nonoverlapping(self.arena.base().add(off), v.as_mut_ptr(), len) }
        v
    }

    /// Waits for the connect request and accepts it.
    fn accept(&mut self, raw: &mut Raw, private_data: &[u8]) -> CmPrivateData {
        let end = Instant::now() + DEADLINE;
        let (request, pd) = loop {
            self.pump();
            if let Some(e) = self.events.pop_front() {
                match e {
                    CmEvent::ConnectRequest {
                        request,
                        private_data,
                    } => break (request, private_data),
                    other => panic!("expected a connect request, got {other:?}"),
                }
            }
            assert!(Instant::now() < end, "no connect request");
            std::thread::yield_now();
        };
        let init = QpInit {
            pd: &self.pd,
            send_cq: &self.cq,
            recv_cq: &self.cq,
            srq: None,
            config: QpConfig::default(),
        };
        self.qp = Some(self.cm.accept(request, init, private_data).expect("accept"));
        self.wait(raw, "Established", |s, _| {
            s.events
                .iter()
                .any(|e| matches!(e, CmEvent::Established { .. }))
        });
        pd
    }

    /// Polls the server (and buffers what the raw peer receives) until `cond`.
    fn wait(&mut self, raw: &mut Raw, what: &str, mut cond: impl FnMut(&Server, &Raw) -> bool) {
        let end = Instant::now() + DEADLINE;
        loop {
            self.pump();
            raw.fill();
            if cond(self, raw) {
                return;
            }
            assert!(Instant::now() < end, "timed out waiting for {what}");
            std::thread::yield_now();
        }
    }

    fn qp(&mut self) -> &mut rpcrdma::fabric::siw::SiwQp {
        self.qp.as_mut().expect("accepted")
    }
}

// ---------------------------------------------------------------------------------------
// A raw iWARP peer: a TCP socket and the codecs.

struct Raw {
    sock: TcpStream,
    inbox: Vec<u8>,
    eof: bool,
    crc: bool,
    msn: MsnCounters,
}

impl Raw {
    fn connect(addr: SocketAddr) -> Raw {
        let sock = TcpStream::connect(addr).expect("connect");
        sock.set_nodelay(true).expect("nodelay");
        sock.set_nonblocking(true).expect("non-blocking");
        Raw {
            sock,
            inbox: Vec::new(),
            eof: false,
            crc: false,
            msn: MsnCounters::new(),
        }
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

    /// Sends an MPA Request.
    fn request(&mut self, rev: Revision, crc: bool, markers: bool, pd: &[u8]) {
        let mut f = vec![0u8; 600];
        let enhanced = (rev == Revision::V2).then(|| EnhancedData::client_server(8, 8));
        let n = encode_frame(
            &mut f,
            &FrameParams {
                kind: FrameKind::Request,
                crc,
                reject: false,
                revision: rev,
                enhanced,
            },
            pd,
        )
        .expect("frame");
        if markers {
            f[16] |= 0x80;
        }
        self.write_all(&f[..n]);
    }

    /// Takes the MPA Reply once it is complete.
    fn take_reply(&mut self) -> Option<Vec<u8>> {
        match decode_frame(&self.inbox) {
            Ok(fr) => {
                let v = self.inbox[..fr.len].to_vec();
                self.crc = fr.header.crc;
                self.inbox.drain(..fr.len);
                Some(v)
            }
            Err(MpaError::Incomplete { .. }) => None,
            Err(e) => panic!("bad MPA reply: {e}"),
        }
    }

    fn send(&mut self, h: SegmentHeader, payload: &[u8]) {
        let mut b = vec![0u8; fpdu_len(h.encoded_len() + payload.len())];
        let n = encode_fpdu(&mut b, &h, payload, self.crc).expect("fpdu");
        self.write_all(&b[..n]);
    }

    /// Takes the next complete FPDU.
    fn take_fpdu(&mut self) -> Option<(SegmentHeader, Vec<u8>)> {
        siw_support::take_fpdu(&mut self.inbox, self.crc)
    }
}

/// A connected raw client and siw server (revision 2, CRCs as `crc`).
fn raw_pair(cfg: SiwConfig, crc: bool) -> (Server, Raw) {
    let mut s = Server::new(cfg);
    let mut raw = Raw::connect(s.addr);
    raw.request(Revision::V2, crc, false, b"raw");
    let pd = s.accept(&mut raw, b"ok");
    assert_eq!(pd.as_bytes(), b"raw");
    s.wait(&mut raw, "the MPA Reply", |_, r| {
        decode_frame(&r.inbox).is_ok()
    });
    let reply = raw.take_reply().expect("reply");
    let fr = decode_frame(&reply).expect("reply decodes");
    assert_eq!(fr.ulp_private_data, b"ok");
    (s, raw)
}

/// Waits for the next FPDU the raw peer gets.
/// The next FPDU `s` sends is a Terminate with `code` (its other fields unchecked; see
/// [`expect_terminate`] for the whole Terminate).
fn expect_terminate_code(s: &mut Server, raw: &mut Raw, code: TerminateCode) {
    let (th, body) = next_fpdu(s, raw);
    assert_eq!(th.opcode, Opcode::Terminate);
    let t = Terminate::decode(&body).expect("decodes");
    assert_eq!(t.code, code);
}

/// After `polls` more polls of `s`, it has sent nothing back (no Terminate) for `what`.
fn expect_no_answer(s: &mut Server, raw: &mut Raw, polls: usize, what: &str) {
    for _ in 0..polls {
        s.pump();
    }
    raw.fill();
    assert!(raw.inbox.is_empty(), "no Terminate for {what}");
}

fn next_fpdu(s: &mut Server, raw: &mut Raw) -> (SegmentHeader, Vec<u8>) {
    let end = Instant::now() + DEADLINE;
    loop {
        if let Some(f) = raw.take_fpdu() {
            return f;
        }
        assert!(!raw.eof, "connection closed before the expected FPDU");
        assert!(Instant::now() < end, "no FPDU from siw");
        s.pump();
        raw.fill();
        std::thread::yield_now();
    }
}

/// Waits for a Terminate and checks it names `sent` (header and ULPDU length).
fn expect_terminate(
    s: &mut Server,
    raw: &mut Raw,
    code: TerminateCode,
    sent: &SegmentHeader,
    sent_payload_len: usize,
    rdma_header: Option<&[u8]>,
) {
    let (h, body) = next_fpdu(s, raw);
    assert_eq!(h.opcode, Opcode::Terminate);
    assert!(h.last);
    match h.placement {
        Placement::Untagged { qn, msn, mo, .. } => {
            assert_eq!((qn, msn, mo), (QueueNumber::Terminate.qn(), 1, 0))
        }
        Placement::Tagged { .. } => panic!("a tagged Terminate"),
    }
    let t = Terminate::decode(&body).expect("Terminate decodes");
    assert_eq!(t.code, code);
    let mut copied = [0u8; 18];
    let n = sent.encode(&mut copied).expect("encodes");
    assert_eq!(
        t.ddp_header,
        Some(&copied[..n]),
        "the offending header is copied"
    );
    assert_eq!(
        t.segment_length,
        Some((n + sent_payload_len) as u16),
        "segment length is the offending ULPDU length"
    );
    assert_eq!(t.rdma_header, rdma_header);
    s.wait(
        raw,
        "the queue pair to fail and the stream to close",
        |s, r| s.qp.as_ref().is_some_and(|q| q.state().is_error()) && r.eof,
    );
}

// ---------------------------------------------------------------------------------------
// Raw peer tests.

#[test]
fn write_to_an_unknown_stag_is_terminated_with_the_segment_copied() {
    let (mut s, mut raw) = raw_pair(SiwConfig::strict(), true);
    s.fill(0, &[0xAA; 64]);
    let h = SegmentHeader::tagged(Opcode::RdmaWrite, true, s.mr.rkey() ^ 0x100, s.addr_of(0));
    raw.send(h, &[1, 2, 3, 4, 5, 6, 7, 8]);
    expect_terminate(
        &mut s,
        &mut raw,
        TerminateCode::RdmapProtection(RdmapProtectionError::InvalidStag),
        &h,
        8,
        None,
    );
    assert_eq!(s.read(0, 64), vec![0xAA; 64], "nothing was placed");
}

#[test]
fn write_past_the_registration_is_a_bounds_violation() {
    let (mut s, mut raw) = raw_pair(SiwConfig::strict(), false);
    let end = s.addr_of(s.arena.len() - 4);
    let h = SegmentHeader::tagged(Opcode::RdmaWrite, true, s.mr.rkey(), end);
    raw.send(h, &[9; 8]);
    expect_terminate(
        &mut s,
        &mut raw,
        TerminateCode::RdmapProtection(RdmapProtectionError::BaseOrBounds),
        &h,
        8,
        None,
    );
    assert_eq!(s.read(s.arena.len() - 4, 4), vec![0; 4]);
}

#[test]
fn send_without_a_receive_is_a_no_buffer_terminate() {
    let (mut s, mut raw) = raw_pair(SiwConfig::strict(), true);
    let h = SegmentHeader::untagged(Opcode::Send, true, 0, raw.msn.take(QueueNumber::Send), 0);
    raw.send(h, b"nobody listens");
    expect_terminate(
        &mut s,
        &mut raw,
        TerminateCode::DdpUntagged(DdpUntaggedError::NoBufferAvailable),
        &h,
        14,
        None,
    );
}

#[test]
fn read_request_out_of_bounds_copies_the_request() {
    let (mut s, mut raw) = raw_pair(SiwConfig::strict(), true);
    let rr = ReadRequest {
        sink_stag: 0x4242,
        sink_to: 0x1000,
        size: 64,
        source_stag: s.mr.rkey(),
        source_to: s.addr_of(s.arena.len() - 32),
    };
    let h = SegmentHeader::untagged(
        Opcode::ReadRequest,
        true,
        0,
        raw.msn.take(QueueNumber::ReadRequest),
        0,
    );
    raw.send(h, &rr.to_bytes());
    expect_terminate(
        &mut s,
        &mut raw,
        TerminateCode::RdmapProtection(RdmapProtectionError::BaseOrBounds),
        &h,
        28,
        Some(&rr.to_bytes()),
    );
}

#[test]
fn read_requests_are_answered_in_fpdus_of_the_mulpdu() {
    let cfg = SiwConfig {
        mss: Some(536),
        ..SiwConfig::strict()
    };
    let (mut s, mut raw) = raw_pair(cfg, true);
    let data = pattern(7, 5000);
    s.fill(4096, &data);
    // A zero-length Read is answered without looking at its STags.
    let zero = ReadRequest {
        sink_stag: 0x77,
        sink_to: 0x5000,
        size: 0,
        source_stag: 0xdead_beef,
        source_to: 0,
    };
    let rr = ReadRequest {
        sink_stag: 0x99,
        sink_to: 0x1_0000,
        size: data.len() as u32,
        source_stag: s.mr.rkey(),
        source_to: s.addr_of(4096),
    };
    for r in [zero, rr] {
        let h = SegmentHeader::untagged(
            Opcode::ReadRequest,
            true,
            0,
            raw.msn.take(QueueNumber::ReadRequest),
            0,
        );
        raw.send(h, &r.to_bytes());
    }
    let (h, p) = next_fpdu(&mut s, &mut raw);
    assert_eq!(
        h,
        SegmentHeader::tagged(Opcode::ReadResponse, true, 0x77, 0x5000)
    );
    assert!(p.is_empty());
    let mut got = Vec::new();
    let mut fpdus = 0;
    loop {
        let (h, p) = next_fpdu(&mut s, &mut raw);
        fpdus += 1;
        assert_eq!(h.opcode, Opcode::ReadResponse);
        assert_eq!(
            h.placement,
            Placement::Tagged {
                stag: 0x99,
                to: 0x1_0000 + got.len() as u64
            }
        );
        // Every FPDU fits a 536-octet segment (MSS 536 less TCP options).
        assert!(p.len() + 14 + 6 <= 536, "{} octets", p.len());
        got.extend_from_slice(&p);
        if h.last {
            break;
        }
    }
    assert_eq!(got, data);
    assert!(fpdus >= 10, "5000 octets took only {fpdus} FPDUs");
}

/// A large Write arriving after its header is read from the socket straight into the
/// target; the octets placed that way still count for the CRC, so one flipped octet in
/// them is an MPA CRC Terminate.
#[test]
fn large_writes_placed_from_the_socket_are_whole_and_crc_checked() {
    let (mut s, mut raw) = raw_pair(SiwConfig::strict(), true);
    let data: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
    for corrupt in [false, true] {
        let off = if corrupt { 100_000 } else { 0 };
        let h = SegmentHeader::tagged(Opcode::RdmaWrite, true, s.mr.rkey(), s.addr_of(off));
        let mut b = vec![0u8; fpdu_len(h.encoded_len() + data.len())];
        let n = encode_fpdu(&mut b, &h, &data, true).expect("fpdu");
        let head = 2 + h.encoded_len() + 100;
        if corrupt {
            b[head + 30_000] ^= 0x01;
        }
        // The header and a little payload first: the rest arrives once the header was
        // checked, and is read into the target directly.
        raw.write_all(&b[..head]);
        s.wait(&mut raw, "the first octets placed", |s, _| {
            s.read(off, 100) == data[..100]
        });
        raw.write_all(&b[head..n]);
        if corrupt {
            expect_terminate_code(&mut s, &mut raw, TerminateCode::Mpa(MpaLlpError::CrcError));
        } else {
            s.wait(&mut raw, "the whole Write placed", |s, _| {
                s.read(off, data.len()) == data
            });
            expect_no_answer(&mut s, &mut raw, 100, "a good Write");
            assert!(s.qp.as_ref().is_some_and(|q| !q.state().is_error()));
        }
    }
}

#[test]
fn a_bad_crc_is_an_mpa_terminate() {
    let (mut s, mut raw) = raw_pair(SiwConfig::strict(), true);
    // A receive is posted, so the header passes and only the CRC is wrong (payload is
    // placed as it arrives; the CRC is checked at the end of the FPDU).
    let rb = [s.sge(0, 64)];
    s.qp()
        .post_recv(&[RecvWr { wr_id: 1, sgl: &rb }])
        .expect("post");
    let h = SegmentHeader::untagged(Opcode::Send, true, 0, 1, 0);
    let mut b = vec![0u8; fpdu_len(18 + 4)];
    let n = encode_fpdu(&mut b, &h, b"oops", true).expect("fpdu");
    b[n - 1] ^= 0xff;
    raw.write_all(&b[..n]);
    expect_terminate_code(&mut s, &mut raw, TerminateCode::Mpa(MpaLlpError::CrcError));
    s.wait(&mut raw, "error and close", |s, r| {
        s.qp.as_ref().is_some_and(|q| q.state().is_error()) && r.eof
    });
    s.wait(&mut raw, "the receive flushed", |s, _| !s.done.is_empty());
    assert_eq!(
        s.done[0].status,
        WcStatus::WrFlushed,
        "a corrupt Send is not delivered"
    );
}

#[test]
fn crcs_are_used_when_only_the_peer_asks() {
    let cfg = SiwConfig {
        crc: false,
        ..SiwConfig::strict()
    };
    let (mut s, mut raw) = raw_pair(cfg, true);
    assert!(raw.crc, "the reply sets C because the initiator asked");
    s.fill(0, b"checked");
    let b = [s.sge(0, 7)];
    s.qp()
        .post_send(&[SendWr::write(
            1,
            &b,
            RemoteAddr {
                addr: 0x10,
                rkey: 5,
            },
        )])
        .expect("post");
    // `decode_fpdu` verifies the CRC.
    let (h, p) = next_fpdu(&mut s, &mut raw);
    assert_eq!(
        (h.opcode, p.as_slice()),
        (Opcode::RdmaWrite, &b"checked"[..])
    );
}

#[test]
fn revision_1_initiators_are_answered_in_revision_1() {
    let mut s = Server::new(SiwConfig::strict());
    let mut raw = Raw::connect(s.addr);
    raw.request(Revision::V1, false, false, b"v1 peer");
    let pd = s.accept(&mut raw, b"v1 ok");
    assert_eq!(
        pd.as_bytes(),
        b"v1 peer",
        "all private data is the ULP's in revision 1"
    );
    s.wait(&mut raw, "reply", |_, r| decode_frame(&r.inbox).is_ok());
    let reply = raw.take_reply().expect("reply");
    let fr = decode_frame(&reply).expect("decodes");
    assert_eq!(fr.revision, Revision::V1);
    assert_eq!(fr.enhanced, None);
    assert_eq!(fr.ulp_private_data, b"v1 ok");
    assert!(raw.crc, "our side asks for CRCs");
    let rb = [s.sge(0, 64)];
    s.qp()
        .post_recv(&[RecvWr { wr_id: 3, sgl: &rb }])
        .expect("post");
    let h = SegmentHeader::untagged(Opcode::Send, true, 0, 1, 0);
    raw.send(h, b"hello");
    s.wait(&mut raw, "the receive", |s, _| !s.done.is_empty());
    assert_eq!(
        (s.done[0].wr_id, s.done[0].status, s.done[0].byte_len),
        (3, WcStatus::Success, 5)
    );
    assert_eq!(s.read(0, 5), b"hello");
}

#[test]
fn the_rfc8797_message_follows_the_ird_ord_words() {
    let mut s = Server::new(SiwConfig::strict());
    let mut raw = Raw::connect(s.addr);
    let rfc8797 = [0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x03];
    raw.request(Revision::V2, false, false, &rfc8797);
    let pd = s.accept(&mut raw, &rfc8797);
    assert_eq!(pd.as_bytes(), &rfc8797);
    s.wait(&mut raw, "reply", |_, r| decode_frame(&r.inbox).is_ok());
    let reply = raw.take_reply().expect("reply");
    // Key, flags (C and S), revision 2, PD_Length 12, IRD 16, ORD 16, then the message.
    assert_eq!(&reply[..16], b"MPA ID Rep Frame");
    assert_eq!(&reply[16..20], &[0x50, 2, 0, 12]);
    assert_eq!(&reply[20..24], &[0, 16, 0, 16]);
    assert_eq!(&reply[24..], &rfc8797);
}

#[test]
fn peers_requiring_markers_are_rejected() {
    let mut s = Server::new(SiwConfig::strict());
    let mut raw = Raw::connect(s.addr);
    raw.request(Revision::V2, false, true, b"markers please");
    s.wait(&mut raw, "a rejecting reply and close", |_, r| r.eof);
    let fr = decode_frame(&raw.inbox).expect("a reply");
    assert!(fr.header.reject, "R is set");
    assert!(!fr.header.markers);
    for _ in 0..50 {
        s.pump();
    }
    assert!(
        s.events.is_empty(),
        "no connect request reached the application"
    );
}

/// A peer's request that fills the MPA field (IRD/ORD words and 508 octets) reaches the
/// application whole: the fabric buffers hold 512 octets.
#[test]
fn a_request_filling_the_mpa_field_reaches_the_application() {
    let mut s = Server::new(SiwConfig::strict());
    let mut raw = Raw::connect(s.addr);
    let pd = pattern(13, 508);
    raw.request(Revision::V2, false, false, &pd);
    s.wait(&mut raw, "the request", |s, _| !s.events.is_empty());
    match s.events.pop_front() {
        Some(CmEvent::ConnectRequest { private_data, .. }) => {
            assert_eq!(private_data.as_bytes(), &pd[..])
        }
        e => panic!("expected a connect request, got {e:?}"),
    }
}

#[test]
fn dropping_a_connect_request_rejects_it() {
    let mut s = Server::new(SiwConfig::strict());
    let mut raw = Raw::connect(s.addr);
    raw.request(Revision::V2, false, false, b"hi");
    s.wait(&mut raw, "the request", |s, _| !s.events.is_empty());
    s.events.clear();
    s.wait(&mut raw, "a rejecting reply and close", |_, r| r.eof);
    let fr = decode_frame(&raw.inbox).expect("a reply");
    assert!(fr.header.reject);
    assert!(fr.ulp_private_data.is_empty());
}

// ---------------------------------------------------------------------------------------
// siw to siw, with settings of our own.

thread_local! {
    /// Settings for devices `Custom` opens on this thread (each test has its own).
    static CUSTOM_CFG: std::cell::RefCell<SiwConfig> =
        std::cell::RefCell::new(SiwConfig::strict());
}

/// Devices take the settings the test put in `CUSTOM_CFG`.
struct Custom;

impl Fixture for Custom {
    type P = SiwProvider;

    fn open_device() -> SiwDevice {
        CUSTOM_CFG.with(|c| SiwDevice::with_config(c.borrow().clone()).expect("device"))
    }

    fn unique_addr() -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    }
}

fn custom_pair(cfg: SiwConfig, o: &Opts) -> Pair<SiwProvider> {
    CUSTOM_CFG.with(|c| *c.borrow_mut() = cfg);
    connect::<Custom>(o)
}

/// The MPA private-data field holds 512 octets: revision 2 spends 4 on the IRD/ORD words,
/// so a connect request carries 508 there and 512 in revision 1; accept and reject are
/// held to 508 whatever the revision (they answer in the peer's). Each limit travels
/// whole, and one octet more is refused before anything is sent.
#[test]
fn private_data_fills_the_mpa_field_in_both_revisions() {
    for (revision, connect_max) in [(Revision::V2, 508), (Revision::V1, 512)] {
        CUSTOM_CFG.with(|c| {
            *c.borrow_mut() = SiwConfig {
                revision,
                ..SiwConfig::strict()
            }
        });
        let limits = Custom::open_device().caps().private_data;
        assert_eq!(
            (
                limits.connect,
                limits.accept,
                limits.reject,
                limits.reject_padded
            ),
            (connect_max, 508, 508, false),
            "{revision:?}"
        );
        let client = pattern(10, connect_max);
        let server = pattern(11, 508);
        let (p, at_server, at_client) = connect_with::<Custom>(&Opts::default(), &client, &server);
        assert_eq!(at_server.as_bytes(), &client[..], "{revision:?}");
        assert_eq!(at_client.as_bytes(), &server[..], "{revision:?}");
        drop(p);
        let mut dev_cm = Custom::open_device().create_cm().expect("cm");
        let dev = Custom::open_device();
        let pd = dev.alloc_pd().expect("pd");
        let cq = dev.create_cq(256).expect("cq");
        let init = QpInit {
            pd: &pd,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            config: QpConfig::default(),
        };
        let addr = Custom::unique_addr();
        match dev_cm.connect(&addr, init, &pattern(12, connect_max + 1)) {
            Err(rpcrdma::fabric::FabricError::PrivateDataTooLong { len, max }) => {
                assert_eq!((len, max), (connect_max + 1, connect_max), "{revision:?}")
            }
            Err(e) => panic!("{revision:?}: unexpected error {e}"),
            Ok(_) => panic!("{revision:?}: {} octets were accepted", connect_max + 1),
        }
    }
}

/// A Write through an unknown STag between two siw devices: the target answers with a
/// Terminate, and the initiator's queue pair says what it said, down to the STag and
/// offset of the segment it refused.
#[test]
fn the_initiator_learns_why_the_target_terminated() {
    let mut p = custom_pair(SiwConfig::strict(), &Opts::default());
    let remote = RemoteAddr {
        rkey: p.s.mr.rkey() ^ 0x100,
        ..p.s.remote(64)
    };
    let b = [p.c.sge(0, 32)];
    assert_eq!(p.c.qp.peer_terminate(), None, "no Terminate yet");
    p.c.qp
        .post_send(&[SendWr::write(1, &b, remote)])
        .expect("post");
    let (_, c) = p.completions(0, 1);
    assert_eq!((c[0].wr_id, c[0].status), (1, WcStatus::RemoteAccessError));
    let why =
        p.c.qp
            .peer_terminate()
            .expect("the initiator keeps the reason");
    assert_eq!(
        why.code,
        TerminateCode::RdmapProtection(RdmapProtectionError::InvalidStag)
    );
    assert_eq!(
        why.layout,
        TerminateLayout::Rfc5040,
        "we send the RFC layout"
    );
    assert_eq!(
        why.segment,
        Some(TerminatedSegment::Tagged {
            stag: remote.rkey,
            to: remote.addr
        })
    );
    assert_eq!(
        why.to_string(),
        format!(
            "RDMAP remote protection error: invalid STag (STag {:#010x}, TO {:#x})",
            remote.rkey, remote.addr
        )
    );
    p.wait_both_failed();
    assert_eq!(
        p.s.qp.peer_terminate(),
        None,
        "the target sent the Terminate and received none"
    );
}

#[test]
fn send_without_receive_fails_at_once_even_with_infinite_rnr_retry() {
    let o = Opts {
        client: QpConfig {
            rnr_retry: RNR_RETRY_INFINITE,
            ..QpConfig::default()
        },
        ..Opts::default()
    };
    let mut p = custom_pair(SiwConfig::strict(), &o);
    let b = [p.c.sge(0, 100)];
    p.c.qp.post_send(&[SendWr::send(1, &b)]).expect("post");
    let (_, c) = p.completions(0, 1);
    assert_eq!(
        (c[0].wr_id, c[0].opcode, c[0].status),
        (1, WcOpcode::Send, WcStatus::RnrRetryExceeded),
        "iWARP has no RNR retry: no receive is fatal at once"
    );
    p.wait_both_failed();
}

#[test]
fn small_mss_segments_large_messages_without_losing_a_byte() {
    let cfg = SiwConfig {
        mss: Some(600),
        ..SiwConfig::strict()
    };
    let mut p = custom_pair(
        cfg,
        &Opts {
            arena_len: 4 << 20,
            ..Opts::default()
        },
    );
    let len = 1 << 20;
    // Write 1 MiB.
    let data = pattern(90, len);
    p.c.fill(0, &data);
    let w = [p.c.sge(0, len / 3), p.c.sge(len / 3, len - len / 3)];
    p.c.qp
        .post_send(&[SendWr::write(1, &w, p.s.remote(2 << 20))])
        .expect("post");
    let (_, c) = p.completions(0, 1);
    assert_eq!(c[0].status, WcStatus::Success);
    assert!(p.s.read(2 << 20, len) == data, "1 MiB write differs");
    // Read it back into the client.
    let r = [p.c.sge(1 << 20, len)];
    p.c.qp
        .post_send(&[SendWr::read(2, &r, p.s.remote(2 << 20))])
        .expect("post");
    let (_, c) = p.completions(0, 1);
    assert_eq!(
        (c[0].status, c[0].byte_len as usize),
        (WcStatus::Success, len)
    );
    assert!(p.c.read(1 << 20, len) == data, "1 MiB read differs");
    // A 200 KiB Send into three entries.
    let n = 200 << 10;
    let sdata = pattern(91, n);
    p.c.fill(3 << 20, &sdata);
    let rb = [
        p.s.sge(0, 1000),
        p.s.sge(10_000, 100_000),
        p.s.sge(200_000, 200_000),
    ];
    p.s.qp
        .post_recv(&[RecvWr { wr_id: 3, sgl: &rb }])
        .expect("post");
    let sb = [p.c.sge(3 << 20, n)];
    p.c.qp.post_send(&[SendWr::send(4, &sb)]).expect("post");
    let (s, c) = p.completions(1, 1);
    assert_eq!(
        (s[0].status, s[0].byte_len as usize),
        (WcStatus::Success, n)
    );
    assert_eq!(c[0].status, WcStatus::Success);
    let mut got = p.s.read(0, 1000);
    got.extend(p.s.read(10_000, 100_000));
    got.extend(p.s.read(200_000, n - 101_000));
    assert!(got == sdata, "scattered Send differs");
}

#[test]
fn crc_off_on_both_sides_still_works_and_revision_1_initiators_connect() {
    for (crc, revision) in [
        (false, Revision::V2),
        (true, Revision::V1),
        (false, Revision::V1),
    ] {
        let cfg = SiwConfig {
            crc,
            revision,
            ..SiwConfig::strict()
        };
        let mut p = custom_pair(cfg, &Opts::default());
        // Reads need IRD/ORD: revision 1 falls back to our own ORD.
        send_then_read_back(
            &mut p,
            b"either way",
            b"readback",
            &format!("crc {crc} rev {revision:?}"),
        );
    }
}

/// Counts what a device wrote.
#[derive(Default)]
struct CountTap {
    read_requests: Mutex<usize>,
}

impl WireTap for CountTap {
    fn mpa_frame(&self, _: SocketAddr, _: SocketAddr, _: &[u8]) {}
    fn fpdu(&self, _: SocketAddr, _: SocketAddr, head: &[u8], _: &[&[u8]], _: &[u8]) {
        if let Ok((h, _)) = SegmentHeader::decode(&head[2..]) {
            if h.opcode == Opcode::ReadRequest {
                *self.read_requests.lock().unwrap() += 1;
            }
        }
    }
}

#[test]
fn without_confirmation_sends_complete_at_transmit_like_linux_siw() {
    let tap = Arc::new(CountTap::default());
    let dyn_tap: Arc<dyn WireTap> = tap.clone();
    let cfg = SiwConfig {
        confirm_completions: false,
        tap: Some(dyn_tap),
        ..SiwConfig::strict()
    };
    let mut p = custom_pair(cfg, &Opts::default());
    // Each side hears the other first. Until a side has received an FPDU from its peer
    // it sends zero-length wake-up Reads (for Linux siw's unread first message) 10 ms,
    // 50 ms, ... after its own first FPDU: those look exactly like confirmation Reads,
    // and a loaded machine can take 10 ms between the Send and its receive. Once each
    // side has heard the other none can follow, so the count is taken from there on.
    let crb = [p.c.sge(100, 64)];
    p.c.qp
        .post_recv(&[RecvWr {
            wr_id: 10,
            sgl: &crb,
        }])
        .expect("post");
    let rb = [p.s.sge(0, 64)];
    p.s.qp
        .post_recv(&[RecvWr { wr_id: 1, sgl: &rb }])
        .expect("post");
    let sb = [p.c.sge(0, 8)];
    p.c.qp.post_send(&[SendWr::send(2, &sb)]).expect("post");
    let (s, c) = p.completions(1, 1);
    assert_eq!(
        (s[0].status, c[0].status),
        (WcStatus::Success, WcStatus::Success)
    );
    let ssb = [p.s.sge(200, 8)];
    p.s.qp.post_send(&[SendWr::send(11, &ssb)]).expect("post");
    let (s, c) = p.completions(1, 1);
    assert_eq!(
        (s[0].status, c[0].status),
        (WcStatus::Success, WcStatus::Success)
    );
    let heard = *tap.read_requests.lock().unwrap();
    // Both sides have heard each other: a signaled Send each way.
    p.s.qp
        .post_recv(&[RecvWr { wr_id: 4, sgl: &rb }])
        .expect("post");
    p.c.qp
        .post_recv(&[RecvWr {
            wr_id: 12,
            sgl: &crb,
        }])
        .expect("post");
    p.c.qp.post_send(&[SendWr::send(5, &sb)]).expect("post");
    p.s.qp.post_send(&[SendWr::send(13, &ssb)]).expect("post");
    let (s, c) = p.completions(2, 2);
    assert!(
        s.iter().chain(&c).all(|w| w.status == WcStatus::Success),
        "{s:?} {c:?}"
    );
    assert_eq!(
        *tap.read_requests.lock().unwrap(),
        heard,
        "no confirmation Reads"
    );
    // A Write through a dead key completes at transmit; the Terminate then fails both
    // queue pairs.
    let bad = RemoteAddr {
        addr: p.s.addr(0),
        rkey: p.s.mr.rkey() ^ 0x100,
    };
    p.c.qp
        .post_send(&[SendWr::write(3, &sb, bad)])
        .expect("post");
    p.wait_both_failed();
    assert!(
        p.c.done
            .iter()
            .all(|c| c.wr_id != 3 || c.status == WcStatus::Success),
        "{:?}",
        p.c.done
    );
    assert_eq!(p.c.qp.state(), QpState::Error);
}

#[test]
fn a_send_confirmed_in_the_poll_that_sees_the_close_still_succeeds() {
    let mut p = custom_pair(SiwConfig::strict(), &Opts::default());
    let rb = [p.s.sge(0, 64)];
    p.s.qp
        .post_recv(&[RecvWr { wr_id: 1, sgl: &rb }])
        .expect("post");
    let sb = [p.c.sge(0, 8)];
    p.c.qp.post_send(&[SendWr::send(2, &sb)]).expect("post");
    // The client's poll writes the Send and its confirmation Read.
    let mut buf = [Completion::EMPTY; 4];
    assert_eq!(p.c.h.cq.poll(&mut buf), 0);
    // The server receives both, answers the Read, and closes right after.
    let end = Instant::now() + DEADLINE;
    while p.s.h.cq.poll(&mut buf) == 0 {
        assert!(Instant::now() < end, "no receive");
    }
    assert_eq!(buf[0].status, WcStatus::Success);
    let conn = p.s.qp.conn_id();
    p.s.h.cm.disconnect(conn).expect("disconnect");
    // The client's next poll reads the Read Response and the end of the stream at once:
    // the Send was executed, so it succeeded; only what follows is flushed.
    let (_, c) = p.completions(0, 1);
    assert_eq!((c[0].wr_id, c[0].status), (2, WcStatus::Success));
    p.wait_both_failed();
}

/// A Write confirmed by a zero-length Read (CRCs as `crc`); returns the raw peer with
/// the Read Request it must answer.
fn write_awaiting_confirmation(crc: bool) -> (Server, Raw, ReadRequest) {
    let (mut s, mut raw) = raw_pair(SiwConfig::strict(), crc);
    s.fill(0, b"confirm me");
    let b = [s.sge(0, 10)];
    let remote = RemoteAddr {
        addr: 0x1000,
        rkey: 0x77,
    };
    s.qp()
        .post_send(&[SendWr::write(1, &b, remote)])
        .expect("post");
    let (h, p) = next_fpdu(&mut s, &mut raw);
    assert_eq!(
        (h.opcode, p.as_slice()),
        (Opcode::RdmaWrite, &b"confirm me"[..])
    );
    // The confirmation Read follows the Write.
    let (h, p) = next_fpdu(&mut s, &mut raw);
    assert_eq!(h.opcode, Opcode::ReadRequest);
    let rr = ReadRequest::decode(&p).expect("a Read Request");
    assert_eq!(rr.size, 0);
    (s, raw, rr)
}

#[test]
fn stale_octets_in_the_response_to_a_zero_length_read_are_ignored() {
    // Answer as Linux siw 6.1 does after a transmission of its own: with that
    // transmission's length and octets; and, as it does now and then, with a CRC
    // computed before those octets changed under it.
    for (crc, corrupt) in [(false, false), (true, false), (true, true)] {
        let (mut s, mut raw, rr) = write_awaiting_confirmation(crc);
        let resp = SegmentHeader::tagged(Opcode::ReadResponse, true, rr.sink_stag, rr.sink_to);
        let mut b = vec![0u8; fpdu_len(resp.encoded_len() + 16)];
        let n = encode_fpdu(&mut b, &resp, &[0xEE; 16], crc).expect("fpdu");
        if corrupt {
            b[n - 8] ^= 0x01;
        }
        raw.write_all(&b[..n]);
        s.wait(&mut raw, "the Write's completion", |s, _| {
            !s.done.is_empty()
        });
        let case = format!("crc {crc}, corrupt {corrupt}");
        assert_eq!(
            (s.done[0].wr_id, s.done[0].status),
            (1, WcStatus::Success),
            "{case}"
        );
        assert_eq!(
            s.qp.as_ref().map(|q| q.state()),
            Some(QpState::ReadyToSend),
            "{case}"
        );
        assert_eq!(s.read(0, 10), b"confirm me", "nothing was placed: {case}");
        for _ in 0..100 {
            s.pump();
        }
        raw.fill();
        assert!(raw.inbox.is_empty(), "no Terminate: {case}");
    }
}

#[test]
fn an_empty_response_to_a_zero_length_read_is_held_to_its_crc() {
    // Only the stale octets of the Linux quirk excuse a CRC: an empty response, what a
    // correct peer sends, with a wrong CRC is an MPA CRC Terminate.
    let (mut s, mut raw, rr) = write_awaiting_confirmation(true);
    let resp = SegmentHeader::tagged(Opcode::ReadResponse, true, rr.sink_stag, rr.sink_to);
    let mut b = vec![0u8; fpdu_len(resp.encoded_len())];
    let n = encode_fpdu(&mut b, &resp, &[], true).expect("fpdu");
    b[n - 1] ^= 0xff;
    raw.write_all(&b[..n]);
    expect_terminate_code(&mut s, &mut raw, TerminateCode::Mpa(MpaLlpError::CrcError));
    s.wait(&mut raw, "the Write failed", |s, _| !s.done.is_empty());
    assert_ne!(s.done[0].status, WcStatus::Success);
}

#[test]
fn a_peer_silent_since_the_reply_is_woken_by_another_zero_length_read() {
    let (mut s, mut raw) = raw_pair(SiwConfig::strict(), false);
    s.fill(0, b"hello?");
    let b = [s.sge(0, 6)];
    s.qp().post_send(&[SendWr::send(1, &b)]).expect("post");
    let (h, _) = next_fpdu(&mut s, &mut raw);
    assert_eq!(h.opcode, Opcode::Send);
    let (h, p) = next_fpdu(&mut s, &mut raw);
    assert_eq!(h.opcode, Opcode::ReadRequest);
    let first = ReadRequest::decode(&p).expect("a Read Request");
    // Say nothing, as a Linux siw responder whose socket is not yet under its queue pair;
    // the provider sends another zero-length Read (the wake-up).
    let (h, p) = next_fpdu(&mut s, &mut raw);
    assert_eq!(h.opcode, Opcode::ReadRequest);
    assert_eq!(ReadRequest::decode(&p).expect("decodes").size, 0);
    for rr in [first, ReadRequest::decode(&p).expect("decodes")] {
        let resp = SegmentHeader::tagged(Opcode::ReadResponse, true, rr.sink_stag, rr.sink_to);
        raw.send(resp, &[]);
    }
    s.wait(&mut raw, "the Send's completion", |s, _| !s.done.is_empty());
    assert_eq!((s.done[0].wr_id, s.done[0].status), (1, WcStatus::Success));
}

/// Default devices on IPv6 loopback addresses.
struct V6;

impl Fixture for V6 {
    type P = SiwProvider;

    fn open_device() -> SiwDevice {
        SiwDevice::new().expect("device")
    }

    fn unique_addr() -> SocketAddr {
        let l = std::net::TcpListener::bind("[::1]:0").expect("bind [::1]");
        l.local_addr().expect("addr")
    }
}

#[test]
fn ipv6_addresses_work_end_to_end() {
    let mut p = conformance::pair::<V6>();
    send_then_read_back(&mut p, b"over IPv6", b"read me", "IPv6");
}

/// One Send of `msg` (client to server), then one RDMA Read of `data` placed on the
/// server: both must complete Success with the bytes intact. `ctx` names the case.
fn send_then_read_back(p: &mut Pair<SiwProvider>, msg: &[u8], data: &[u8], ctx: &str) {
    let rb = [p.s.sge(0, 64)];
    p.s.qp
        .post_recv(&[RecvWr { wr_id: 1, sgl: &rb }])
        .expect("post");
    p.c.fill(0, msg);
    let sb = [p.c.sge(0, msg.len())];
    p.c.qp.post_send(&[SendWr::send(2, &sb)]).expect("post");
    let (s, c) = p.completions(1, 1);
    assert_eq!(
        (s[0].status, c[0].status),
        (WcStatus::Success, WcStatus::Success),
        "{ctx}"
    );
    assert_eq!(p.s.read(0, msg.len()), msg, "{ctx}");
    p.s.fill(500, data);
    let r = [p.c.sge(200, data.len())];
    p.c.qp
        .post_send(&[SendWr::read(3, &r, p.s.remote(500))])
        .expect("post");
    let (_, c) = p.completions(0, 1);
    assert_eq!(c[0].status, WcStatus::Success, "{ctx}");
    assert_eq!(p.c.read(200, data.len()), data, "{ctx}");
}

// ---------------------------------------------------------------------------------------
// Placement after invalidation, and the handshake and keepalive limits.

/// A peer drips an RDMA Write into a fast-registered sink: its header and first octets
/// arrive, the sink's key is invalidated locally (the LocalInvalidate completes, so the
/// application has the memory back), then the rest arrives. Not one octet of the rest
/// may land: the peer gets an invalid-STag Terminate and the sink keeps its bytes.
#[test]
fn a_write_dripped_across_a_local_invalidation_places_nothing_after_it() {
    use rpcrdma::fabric::{Access, ProtectionDomain, SendFlags, SendOp};
    let (mut s, mut raw) = raw_pair(SiwConfig::strict(), true);
    let (off, len) = (200_000usize, 40_000usize);
    s.fill(off, &vec![0xAA; len]);
    let mut fast = s.pd.alloc_fast_mr(len).expect("fast slot");
    let key = fast.rekey();
    let region = s.sge(off, len);
    let fastreg = [SendWr {
        wr_id: 70,
        op: SendOp::FastReg {
            key,
            region,
            access: Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        },
        sgl: &[],
        flags: SendFlags::SIGNALED,
    }];
    s.qp().post_send(&fastreg).expect("post FastReg");
    s.wait(&mut raw, "the FastReg", |s, _| {
        s.done.iter().any(|c| c.wr_id == 70)
    });
    let data: Vec<u8> = (0..len as u32).map(|i| (i % 251) as u8).collect();
    let h = SegmentHeader::tagged(Opcode::RdmaWrite, true, key, s.addr_of(off));
    let mut b = vec![0u8; fpdu_len(h.encoded_len() + data.len())];
    let n = encode_fpdu(&mut b, &h, &data, true).expect("fpdu");
    let head = 2 + h.encoded_len() + 100;
    raw.write_all(&b[..head]);
    s.wait(&mut raw, "the first octets placed", |s, _| {
        s.read(off, 100) == data[..100]
    });
    let inval = [SendWr {
        wr_id: 71,
        op: SendOp::LocalInvalidate { key },
        sgl: &[],
        flags: SendFlags::SIGNALED,
    }];
    s.qp().post_send(&inval).expect("post LocalInvalidate");
    s.wait(&mut raw, "the LocalInvalidate", |s, _| {
        s.done.iter().any(|c| c.wr_id == 71)
    });
    assert!(
        s.done
            .iter()
            .any(|c| c.wr_id == 71 && c.status == WcStatus::Success),
        "{:?}",
        s.done
    );
    // The application has the sink back: the rest of the Write arrives now.
    raw.write_all(&b[head..n]);
    let (th, body) = next_fpdu(&mut s, &mut raw);
    assert_eq!(th.opcode, Opcode::Terminate);
    let t = Terminate::decode(&body).expect("decodes");
    assert_eq!(
        t.code,
        TerminateCode::RdmapProtection(RdmapProtectionError::InvalidStag)
    );
    for _ in 0..100 {
        s.pump();
    }
    assert_eq!(s.read(off, 100), data[..100], "what came before stays");
    assert!(
        s.read(off + 100, len - 100).iter().all(|&b| b == 0xAA),
        "octets placed after the invalidation completed"
    );
}

/// Accepted TCP connections that never send an MPA Request are closed after
/// `handshake_timeout`; beyond `max_pending_handshakes` they are closed at once.
#[test]
fn silent_tcp_connectors_are_dropped_at_the_handshake_timeout_and_past_the_cap() {
    use std::io::Read;
    use std::time::Duration;
    let timeout = Duration::from_millis(300);
    let cfg = SiwConfig {
        handshake_timeout: timeout,
        max_pending_handshakes: 2,
        ..SiwConfig::strict()
    };
    let mut l = siw_support::listening(cfg, 1 << 16, "siw-handshake");
    let start = Instant::now();
    let mut socks: Vec<TcpStream> = (0..5)
        .map(|_| {
            let s = TcpStream::connect(l.addr).expect("connect");
            s.set_nonblocking(true).expect("nonblocking");
            s
        })
        .collect();
    let mut closed_at: Vec<Option<Instant>> = vec![None; socks.len()];
    let end = Instant::now() + DEADLINE;
    while closed_at.iter().any(Option::is_none) {
        assert!(Instant::now() < end, "connectors still open: {closed_at:?}");
        while let Ok(Some(_)) = l.cm.poll_event() {}
        for (i, s) in socks.iter_mut().enumerate() {
            if closed_at[i].is_some() {
                continue;
            }
            let mut b = [0u8; 16];
            match s.read(&mut b) {
                Ok(0) => closed_at[i] = Some(Instant::now()),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => closed_at[i] = Some(Instant::now()),
                Ok(_) => panic!("the listener said something to a silent connector"),
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let early = closed_at
        .iter()
        .filter(|t| t.is_some_and(|t| t.duration_since(start) < timeout))
        .count();
    let late = closed_at.len() - early;
    assert_eq!(
        (early, late),
        (3, 2),
        "three closed at once past the cap, two at the timeout"
    );
}

/// Every siw socket, accepted or connected, carries the configured keepalive and a
/// matching `TCP_USER_TIMEOUT`: read back from the kernel for each TCP socket of this
/// process.
#[test]
fn siw_sockets_carry_the_configured_keepalive() {
    use rpcrdma::fabric::siw::TcpKeepalive;
    use std::os::fd::RawFd;
    use std::time::Duration;
    let k = TcpKeepalive {
        idle: Duration::from_secs(7),
        interval: Duration::from_secs(3),
        count: 5,
    };
    let cfg = SiwConfig {
        keepalive: Some(k),
        ..SiwConfig::strict()
    };
    let p = custom_pair(cfg, &Opts::default());
    let get = |fd: RawFd, level: libc::c_int, name: libc::c_int| -> Option<libc::c_int> {
        let mut v: libc::c_int = 0;
        let mut len = core::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: `v` and `len` are valid for writes of their sizes.
        let r = unsafe {
            libc::getsockopt(
                fd,
                level,
                name,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        (r == 0).then_some(v)
    };
    let mut with_ours = 0;
    for e in std::fs::read_dir("/proc/self/fd")
        .expect("fd list")
        .flatten()
    {
        let Ok(fd) = e.file_name().to_string_lossy().parse::<RawFd>() else {
            continue;
        };
        let opts = (
            get(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE),
            get(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE),
            get(fd, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL),
            get(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT),
            get(fd, libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT),
        );
        if opts == (Some(1), Some(7), Some(3), Some(5), Some(22_000)) {
            with_ours += 1;
        }
    }
    assert!(
        with_ours >= 2,
        "both ends' sockets carry the keepalive ({with_ours} found)"
    );
    drop(p);
}

/// A hostile peer's endless message: Send segments that never say "last", each further
/// into the message, are placed into the one posted receive until the next would pass
/// its end; that one is terminated as too long (RFC 5041 §7.2), nothing is buffered on
/// the peer's behalf, and the receive completes in error (local length error, as verbs
/// reports a message longer than its receive), never as a delivered message.
#[test]
fn an_endless_message_is_terminated_at_the_receive_buffers_end() {
    let (mut s, mut raw) = raw_pair(SiwConfig::strict(), true);
    let rb = [s.sge(0, 4096)];
    s.qp()
        .post_recv(&[RecvWr { wr_id: 1, sgl: &rb }])
        .expect("post");
    let msn = raw.msn.take(QueueNumber::Send);
    let chunk = [0x5a_u8; 1024];
    let mut last_h = None;
    for i in 0..8u32 {
        // Four segments fill the 4 KiB receive; the fifth runs past it.
        let h = SegmentHeader::untagged(Opcode::Send, false, 0, msn, i * 1024);
        raw.send(h, &chunk);
        last_h = Some(h);
        s.pump();
        raw.fill();
        if !raw.inbox.is_empty() || raw.eof {
            // The Terminate is on its way: nothing more is taken in after it.
            break;
        }
    }
    let (th, body) = next_fpdu(&mut s, &mut raw);
    assert_eq!(th.opcode, Opcode::Terminate);
    let t = Terminate::decode(&body).expect("decodes");
    assert_eq!(
        t.code,
        TerminateCode::DdpUntagged(DdpUntaggedError::MessageTooLong),
        "after {last_h:?}"
    );
    s.wait(&mut raw, "error and close", |s, r| {
        s.qp.as_ref().is_some_and(|q| q.state().is_error()) && r.eof
    });
    s.wait(&mut raw, "the receive completes", |s, _| !s.done.is_empty());
    assert_eq!(s.done[0].status, WcStatus::LocalLengthError);
    // Exactly the receive's 4 KiB were placed; nothing past it.
    assert_eq!(s.read(0, 4096), vec![0x5a; 4096]);
    assert_eq!(
        s.read(4096, 64),
        vec![0; 64],
        "nothing placed past the receive"
    );
}

/// TCP segments the socket has received so far (`tcpi_segs_in`, Linux 4.2+).
fn segments_in(sock: &TcpStream) -> u32 {
    use std::os::fd::AsRawFd;
    let mut info = [0u8; 256];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: a buffer of `len` octets the kernel fills with `struct tcp_info`.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    assert_eq!(r, 0, "TCP_INFO");
    assert!(len >= 144, "tcp_info without tcpi_segs_in ({len} octets)");
    u32::from_ne_bytes(info[140..144].try_into().expect("4 octets"))
}

#[test]
fn consecutive_sends_leave_in_one_segment_only_when_coalescing() {
    for coalesce in [true, false] {
        let cfg = SiwConfig {
            confirm_completions: false,
            coalesce_sends: coalesce,
            ..SiwConfig::strict()
        };
        let (mut s, mut raw) = raw_pair(cfg, true);
        let msgs: Vec<Vec<u8>> = (0..5).map(|i| pattern(i, 3000)).collect();
        for (i, m) in msgs.iter().enumerate() {
            s.fill(i * 4096, m);
        }
        let sgls: Vec<[Sge; 1]> = (0..5).map(|i| [s.sge(i * 4096, 3000)]).collect();
        let wrs: Vec<SendWr<'_>> = sgls
            .iter()
            .enumerate()
            .map(|(i, g)| SendWr::send(i as u64, g))
            .collect();
        let before = segments_in(&raw.sock);
        s.qp().post_send(&wrs).expect("one post_send");
        let mut got = Vec::new();
        while got.len() < 5 {
            let (h, payload) = next_fpdu(&mut s, &mut raw);
            assert_eq!(h.opcode, Opcode::Send);
            got.push(payload);
        }
        assert_eq!(got, msgs, "whole, in order (coalesce {coalesce})");
        let segments = segments_in(&raw.sock) - before;
        if coalesce {
            assert_eq!(segments, 1, "five FPDUs, one write, one segment");
        } else {
            assert_eq!(segments, 5, "one segment per FPDU");
        }
    }
}

#[test]
fn a_zero_length_write_is_taken_without_checking_its_stag() {
    // What the verbs provider sends a kernel siw peer that has not answered its first
    // call (DESIGN.md, "Kernel siw: a first message left unread"), and siw's own RTR:
    // a zero-length RDMA Write under STag 1, which names nothing here. It places
    // nothing and ends nothing; a Send after it is received as usual.
    let (mut s, mut raw) = raw_pair(SiwConfig::strict(), false);
    let rb = [s.sge(0, 64)];
    s.qp()
        .post_recv(&[RecvWr { wr_id: 3, sgl: &rb }])
        .expect("post");
    raw.send(SegmentHeader::tagged(Opcode::RdmaWrite, true, 1, 0), &[]);
    raw.send(
        SegmentHeader::untagged(Opcode::Send, true, 0, 1, 0),
        b"after",
    );
    s.wait(&mut raw, "the receive", |s, _| !s.done.is_empty());
    assert_eq!(
        (s.done[0].wr_id, s.done[0].status, s.done[0].byte_len),
        (3, WcStatus::Success, 5)
    );
    assert_eq!(s.read(0, 5), b"after");
    assert_eq!(s.qp.as_ref().map(|q| q.state()), Some(QpState::ReadyToSend));
    for _ in 0..100 {
        s.pump();
    }
    raw.fill();
    assert!(raw.inbox.is_empty(), "no Terminate");
}

/// Reads at most `max` octets of what has arrived into the raw peer's inbox.
fn sip(raw: &mut Raw, max: usize) {
    use std::io::Read;
    let mut buf = vec![0u8; max];
    match raw.sock.read(&mut buf) {
        Ok(0) => raw.eof = true,
        Ok(n) => raw.inbox.extend_from_slice(&buf[..n]),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        Err(e) => panic!("raw read: {e}"),
    }
}

/// Collects one whole message of `opcode` from siw, the raw peer reading 4 KiB at a
/// time (so siw's writes of several FPDUs keep finding the socket full and resume where
/// they stopped): its payload, the largest FPDU payload and the number of FPDUs.
fn slow_message(s: &mut Server, raw: &mut Raw, opcode: Opcode) -> (Vec<u8>, usize, usize) {
    let end = Instant::now() + DEADLINE;
    let (mut got, mut largest, mut fpdus) = (Vec::new(), 0, 0);
    loop {
        while let Some((h, p)) = raw.take_fpdu() {
            if h.opcode == Opcode::ReadRequest && opcode != Opcode::ReadRequest {
                // A wake-up Read: this peer has been silent since the Reply.
                continue;
            }
            assert_eq!(h.opcode, opcode);
            let at = match h.placement {
                Placement::Untagged { mo, .. } => u64::from(mo),
                Placement::Tagged { to, .. } => to - 0x10_0000,
            };
            assert_eq!(at, got.len() as u64, "FPDUs in order, none lost");
            largest = largest.max(p.len());
            fpdus += 1;
            got.extend_from_slice(&p);
            if h.last {
                return (got, largest, fpdus);
            }
        }
        assert!(!raw.eof, "connection closed mid-message");
        assert!(
            Instant::now() < end,
            "message incomplete: {} octets",
            got.len()
        );
        s.pump();
        sip(raw, 4096);
    }
}

/// Long Sends, Writes and Read Responses leave several FPDUs to a write
/// (`batch_message_fpdus`, the default) or one per write, and either way reach a peer
/// that reads slowly whole, in order, in FPDUs no larger than the MSS allows.
#[test]
fn long_messages_arrive_whole_across_partial_writes_batched_or_not() {
    for batch in [true, false] {
        let cfg = SiwConfig {
            mss: Some(1460),
            batch_message_fpdus: batch,
            ..SiwConfig::default()
        };
        let (mut s, mut raw) = raw_pair(cfg, true);
        let rcvbuf: libc::c_int = 8192;
        // SAFETY: a valid c_int option value for the duration of the call.
        let r = unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&raw.sock),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&rcvbuf as *const libc::c_int).cast(),
                core::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(r, 0, "SO_RCVBUF");
        let data = pattern(11, 600 * 1024);
        s.fill(0, &data);
        let max_payload = 1460 - 6 - 14;

        // A Send.
        let sgl = [s.sge(0, data.len())];
        s.qp().post_send(&[SendWr::send(1, &sgl)]).expect("send");
        let (got, largest, fpdus) = slow_message(&mut s, &mut raw, Opcode::Send);
        assert!(got == data, "the Send arrives whole (batch {batch})");
        assert!(largest <= max_payload, "{largest} octets in one FPDU");
        assert!(fpdus >= data.len() / max_payload, "{fpdus} FPDUs");

        // A Write.
        let remote = RemoteAddr {
            addr: 0x10_0000,
            rkey: 0x55,
        };
        s.qp()
            .post_send(&[SendWr::write(2, &sgl, remote)])
            .expect("write");
        let (got, largest, _) = slow_message(&mut s, &mut raw, Opcode::RdmaWrite);
        assert!(got == data, "the Write arrives whole (batch {batch})");
        assert!(largest <= max_payload + 4, "{largest} octets in one FPDU");

        // A Read Response.
        let rr = ReadRequest {
            sink_stag: 0x66,
            sink_to: 0x10_0000,
            size: data.len() as u32,
            source_stag: s.mr.rkey(),
            source_to: s.addr_of(0),
        };
        let h = SegmentHeader::untagged(
            Opcode::ReadRequest,
            true,
            0,
            raw.msn.take(QueueNumber::ReadRequest),
            0,
        );
        raw.send(h, &rr.to_bytes());
        let (got, largest, _) = slow_message(&mut s, &mut raw, Opcode::ReadResponse);
        assert!(
            got == data,
            "the Read Response arrives whole (batch {batch})"
        );
        assert!(largest <= max_payload + 4, "{largest} octets in one FPDU");

        s.wait(&mut raw, "both completions", |s, _| {
            s.done
                .iter()
                .filter(|c| c.status == WcStatus::Success)
                .count()
                >= 2
        });
    }
}

// ---------------------------------------------------------------------------------------
// Reading several FPDUs of a long Send at once (`SiwConfig::predict_fpdus`): a raw peer
// writes a long Send in awkward pieces, in FPDUs of changing sizes, with another
// message right behind it; siw must place it whole wherever its reads fall, and a
// broken FPDU in the middle must end the stream with a Terminate, nothing written
// outside the receive.

/// Where the long Send's receive starts, its length, and the guard octets after it.
const PRED_RECV: usize = 0;
const PRED_RECV_LEN: usize = 300 * 1024;
const PRED_GUARD: usize = 64 * 1024;
/// Where the short Send behind it lands.
const PRED_SMALL: usize = 512 * 1024;

/// The FPDUs (wire octets, each whole) of a Send of `data` with MSN `msn`, cut into
/// payloads of the sizes `cuts` cycles through: around the size siw predicts from, and
/// shorter and longer ones, so its predictions miss both ways.
fn send_fpdus(data: &[u8], msn: u32, cuts: &[usize], crc: bool) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut mo = 0;
    let mut i = 0;
    while mo < data.len() {
        let n = cuts[i % cuts.len()].min(data.len() - mo);
        i += 1;
        let last = mo + n == data.len();
        let h = SegmentHeader::untagged(Opcode::Send, last, 0, msn, mo as u32);
        let mut b = vec![0u8; fpdu_len(h.encoded_len() + n)];
        let len = encode_fpdu(&mut b, &h, &data[mo..mo + n], crc).expect("fpdu");
        b.truncate(len);
        out.push(b);
        mo += n;
    }
    out
}

/// A raw peer and a siw server with the two receives posted and the guard written.
fn predicted_pair(crc: bool) -> (Server, Raw, Vec<u8>) {
    let (mut s, raw) = raw_pair(
        SiwConfig {
            crc,
            ..SiwConfig::default()
        },
        crc,
    );
    assert_eq!(raw.crc, crc, "CRCs as asked");
    let guard = pattern(99, PRED_GUARD);
    s.fill(PRED_RECV + PRED_RECV_LEN, &guard);
    let big = [s.sge(PRED_RECV, PRED_RECV_LEN)];
    let small = [s.sge(PRED_SMALL, 4096)];
    s.qp()
        .post_recv(&[
            RecvWr {
                wr_id: 1,
                sgl: &big,
            },
            RecvWr {
                wr_id: 2,
                sgl: &small,
            },
        ])
        .expect("post_recv");
    (s, raw, guard)
}

/// Writes `wire` to siw in the pieces `cuts` says (offsets into it), polling siw
/// between pieces so its reads meet each split (what a read then sees is up to the
/// scheduler; the outcome must not depend on it).
fn write_in_pieces(s: &mut Server, raw: &mut Raw, wire: &[u8], cuts: &[usize]) {
    let mut at = 0;
    for &c in cuts.iter().chain(std::iter::once(&wire.len())) {
        let c = c.min(wire.len());
        if c <= at {
            continue;
        }
        raw.write_all(&wire[at..c]);
        at = c;
        for _ in 0..20 {
            s.pump();
            std::thread::yield_now();
        }
    }
}

#[test]
fn a_long_send_in_awkward_pieces_is_placed_whole_with_the_next_message_behind_it() {
    // (FPDU payload sizes, message length, how the stream is cut): one size
    // throughout, cut in the headers; a shorter and a longer FPDU mid-message (the
    // prediction misses both ways), cut in the CRCs; sizes changing every FPDU, and
    // growing after a small one, written whole; several FPDUs per piece; and a message
    // of whole FPDUs, so the next message's header sits where the next FPDU's was
    // predicted.
    type Cutter = fn(&[usize]) -> Vec<usize>;
    let cases: [(&[usize], usize, Cutter); 6] = [
        (&[20_000], 250 * 1024 + 3, |starts| {
            starts.iter().map(|s| s + 7).collect()
        }),
        (
            &[20_000, 20_000, 9_000, 20_000, 31_000],
            250 * 1024 + 3,
            |starts| starts.iter().filter(|&&s| s >= 2).map(|s| s - 2).collect(),
        ),
        (&[16_384, 5_000, 24_000, 16_400], 250 * 1024 + 3, |_| {
            Vec::new()
        }),
        (&[8_192, 30_000, 12_000], 250 * 1024 + 1, |_| Vec::new()),
        (&[20_000], 250 * 1024 + 3, |starts| {
            starts.iter().step_by(3).map(|s| s + 1).collect()
        }),
        (&[20_000], 200_000, |_| Vec::new()),
    ];
    for crc in [true, false] {
        for (case, (sizes, len, cutter)) in cases.iter().enumerate() {
            let (mut s, mut raw, guard) = predicted_pair(crc);
            let data = pattern(case as u64 + 3, *len);
            let msg = pattern(7, 100);
            let mut fpdus = send_fpdus(&data, 1, sizes, crc);
            // The next message right behind the last FPDU, in the same stream.
            fpdus.extend(send_fpdus(&msg, 2, &[4096], crc));
            let mut wire = Vec::new();
            let mut starts = Vec::new();
            for f in &fpdus {
                starts.push(wire.len());
                wire.extend_from_slice(f);
            }
            write_in_pieces(&mut s, &mut raw, &wire, &cutter(&starts));
            s.wait(&mut raw, "both receives", |s, _| s.done.len() >= 2);
            let ctx = format!("case {case}, crc {crc}");
            assert_eq!(s.done[0].wr_id, 1, "{ctx}");
            assert_eq!(s.done[0].status, WcStatus::Success, "{ctx}");
            assert_eq!(s.done[0].byte_len as usize, data.len(), "{ctx}");
            assert!(s.read(PRED_RECV, data.len()) == data, "{ctx}: Send whole");
            assert_eq!(s.done[1].wr_id, 2, "{ctx}");
            assert_eq!(s.done[1].status, WcStatus::Success, "{ctx}");
            assert_eq!(s.done[1].byte_len as usize, msg.len(), "{ctx}");
            assert!(s.read(PRED_SMALL, msg.len()) == msg, "{ctx}: next Send");
            assert!(
                s.read(PRED_RECV + PRED_RECV_LEN, PRED_GUARD) == guard,
                "{ctx}: nothing written past the receive"
            );
            for _ in 0..50 {
                s.pump();
            }
            raw.fill();
            assert!(raw.inbox.is_empty(), "{ctx}: no Terminate");
            assert!(s.qp.as_ref().is_some_and(|q| !q.state().is_error()));
        }
    }
}

/// A long Send with one FPDU broken in its middle (`spoil` changes that FPDU's
/// octets), written at once so siw's reads run across it: siw must answer with the
/// Terminate `code`, flush the receive and write nothing past it.
fn broken_mid_send(spoil: fn(&mut Vec<u8>), code: TerminateCode) {
    let (mut s, mut raw, guard) = predicted_pair(true);
    let data = pattern(5, 250 * 1024);
    let mut fpdus = send_fpdus(&data, 1, &[20_000], true);
    spoil(&mut fpdus[5]);
    let wire: Vec<u8> = fpdus.concat();
    raw.write_all(&wire);
    let (th, body) = next_fpdu(&mut s, &mut raw);
    assert_eq!(th.opcode, Opcode::Terminate);
    let t = Terminate::decode(&body).expect("decodes");
    assert_eq!(t.code, code);
    s.wait(&mut raw, "error and close", |s, r| {
        s.qp.as_ref().is_some_and(|q| q.state().is_error()) && r.eof
    });
    s.wait(&mut raw, "the receives flushed", |s, _| s.done.len() >= 2);
    assert_eq!(s.done[0].wr_id, 1);
    assert_eq!(
        s.done[0].status,
        WcStatus::WrFlushed,
        "a broken Send is not delivered"
    );
    assert!(
        s.read(PRED_RECV + PRED_RECV_LEN, PRED_GUARD) == guard,
        "nothing written past the receive"
    );
}

#[test]
fn a_corrupt_crc_in_the_middle_of_a_long_send_is_an_mpa_terminate() {
    broken_mid_send(
        |f| {
            let n = f.len();
            f[n - 3] ^= 0x40;
        },
        TerminateCode::Mpa(MpaLlpError::CrcError),
    );
    // A payload octet instead of the CRC: the same.
    broken_mid_send(
        |f| f[1000] ^= 0x01,
        TerminateCode::Mpa(MpaLlpError::CrcError),
    );
}

#[test]
fn a_wrong_message_offset_in_the_middle_of_a_long_send_is_terminated() {
    broken_mid_send(
        |f| {
            // MO is the header's last four octets (after the length field); the CRC is
            // recomputed so only the offset is wrong.
            f[2 + 14 + 3] ^= 0x10;
            let n = f.len();
            let crc = rpcrdma::iwarp::crc32c::crc32c(&f[..n - 4]);
            f[n - 4..].copy_from_slice(&rpcrdma::iwarp::fpdu::crc_to_wire(crc));
        },
        TerminateCode::DdpUntagged(DdpUntaggedError::InvalidMo),
    );
}

/// The FPDUs of a Read Response of `data` to sink `stag`/`to`, cut as `send_fpdus` cuts.
fn read_response_fpdus(data: &[u8], stag: u32, to: u64, cuts: &[usize], crc: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let mut off = 0;
    let mut i = 0;
    while off < data.len() {
        let n = cuts[i % cuts.len()].min(data.len() - off);
        i += 1;
        let last = off + n == data.len();
        let h = SegmentHeader::tagged(Opcode::ReadResponse, last, stag, to + off as u64);
        let mut b = vec![0u8; fpdu_len(h.encoded_len() + n)];
        let len = encode_fpdu(&mut b, &h, &data[off..off + n], crc).expect("fpdu");
        out.extend_from_slice(&b[..len]);
        off += n;
    }
    out
}

#[test]
fn a_long_read_response_in_awkward_pieces_is_placed_whole() {
    // (FPDU payload sizes, split every this many octets of the stream, or 0 for none).
    let cases: [(&[usize], usize); 4] = [
        (&[20_000], 20_037),
        (&[16_384, 5_000, 24_000, 16_400], 0),
        (&[8_192, 30_000, 12_000], 7_777),
        (&[32_000], 0),
    ];
    for crc in [true, false] {
        for (case, (sizes, step)) in cases.iter().enumerate() {
            let (mut s, mut raw, guard) = predicted_pair(crc);
            let data = pattern(case as u64 + 40, 250 * 1024 + 2);
            // Two entries, so the response also crosses an entry boundary.
            let sgl = [
                s.sge(PRED_RECV, 100_000),
                s.sge(PRED_RECV + 100_000, data.len() - 100_000),
            ];
            let remote = RemoteAddr {
                addr: 0x4000,
                rkey: 0x77,
            };
            s.qp()
                .post_send(&[SendWr::read(7, &sgl, remote)])
                .expect("read");
            let (h, body) = next_fpdu(&mut s, &mut raw);
            assert_eq!(h.opcode, Opcode::ReadRequest);
            let rr = ReadRequest::decode(&body).expect("read request");
            assert_eq!(rr.size as usize, data.len());
            let wire = read_response_fpdus(&data, rr.sink_stag, rr.sink_to, sizes, raw.crc);
            let cuts: Vec<usize> = if *step == 0 {
                Vec::new()
            } else {
                (1..wire.len() / step + 1).map(|i| i * step).collect()
            };
            write_in_pieces(&mut s, &mut raw, &wire, &cuts);
            let ctx = format!("case {case}, crc {crc}");
            s.wait(&mut raw, "the Read's completion", |s, _| {
                s.done.iter().any(|c| c.wr_id == 7)
            });
            let c = s.done.iter().find(|c| c.wr_id == 7).copied().expect("done");
            assert_eq!(c.status, WcStatus::Success, "{ctx}");
            assert!(
                s.read(PRED_RECV, data.len()) == data,
                "{ctx}: response whole"
            );
            assert!(
                s.read(PRED_RECV + PRED_RECV_LEN, PRED_GUARD) == guard,
                "{ctx}: nothing written past the sink"
            );
            for _ in 0..50 {
                s.pump();
            }
            raw.fill();
            while let Some((h, _)) = raw.take_fpdu() {
                assert_ne!(h.opcode, Opcode::Terminate, "{ctx}: no Terminate");
            }
            assert!(s.qp.as_ref().is_some_and(|q| !q.state().is_error()));
        }
    }
}

/// Records the longest ULPDU a device wrote (the MPA length field).
#[derive(Default)]
struct LongestTap {
    ulpdu: Mutex<usize>,
}

impl WireTap for LongestTap {
    fn mpa_frame(&self, _: SocketAddr, _: SocketAddr, _: &[u8]) {}
    fn fpdu(&self, _: SocketAddr, _: SocketAddr, head: &[u8], _: &[&[u8]], _: &[u8]) {
        let n = usize::from(u16::from_be_bytes([head[0], head[1]]));
        let mut m = self.ulpdu.lock().unwrap();
        *m = (*m).max(n);
    }
}

/// Writes 1 MiB `rounds` times from the client to the server, each checked whole, and
/// returns the longest ULPDU the client wrote.
fn longest_ulpdu_over_writes(cfg: SiwConfig, rounds: usize) -> usize {
    let tap = Arc::new(LongestTap::default());
    let dyn_tap: Arc<dyn WireTap> = tap.clone();
    let cfg = SiwConfig {
        tap: Some(dyn_tap),
        ..cfg
    };
    let mut p = custom_pair(
        cfg,
        &Opts {
            arena_len: 4 << 20,
            ..Opts::default()
        },
    );
    let len = 1 << 20;
    for round in 0..rounds {
        let data = pattern(200 + round as u64, len);
        p.c.fill(0, &data);
        let w = [p.c.sge(0, len)];
        p.c.qp
            .post_send(&[SendWr::write(round as u64, &w, p.s.remote(2 << 20))])
            .expect("post");
        let (_, c) = p.completions(0, 1);
        assert_eq!(c[0].status, WcStatus::Success, "round {round}");
        // On-transmit completions: the last octets may still be on their way.
        let end = Instant::now() + DEADLINE;
        while p.s.read(2 << 20, len) != data {
            assert!(Instant::now() < end, "round {round}: 1 MiB write differs");
            let mut buf = [Completion::EMPTY; 4];
            p.s.h.cq.poll(&mut buf);
        }
    }
    let n = *tap.ulpdu.lock().unwrap();
    n
}

/// Linux bounds a connection's MSS by half the largest window the peer has offered, so
/// on loopback (MTU 65536) it reads 32741 when the connection is set up and 65483 once
/// the receive window has opened; a long message looks the MSS up again, so FPDUs grow
/// with it (half as many per MiB). A configured MSS clamp (`TCP_MAXSEG`) still bounds
/// them however often it is looked up.
#[test]
fn fpdus_follow_the_mss_as_the_window_opens_and_stay_within_a_clamp() {
    let lo_mtu: usize = std::fs::read_to_string("/sys/class/net/lo/mtu")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let longest = longest_ulpdu_over_writes(SiwConfig::default(), 8);
    if lo_mtu >= 65536 {
        assert!(
            longest > 40_000,
            "FPDUs stayed at {longest} octets, the MSS of an unopened window"
        );
    }
    assert!(longest <= 65535);
    let clamped = longest_ulpdu_over_writes(
        SiwConfig {
            mss: Some(1460),
            ..SiwConfig::default()
        },
        4,
    );
    assert!(
        clamped <= 1460 - 6,
        "a {clamped}-octet ULPDU with the MSS clamped to 1460"
    );
}

/// FPDUs of the largest size the length field allows (65535 octets of ULPDU, as a peer
/// sizing them to a 64 KiB loopback segment or to GSO sends), as a Send and as a Write,
/// cut in awkward places: placed whole; and one flipped payload octet in the middle of
/// the Write is an MPA CRC Terminate.
#[test]
fn largest_fpdus_in_awkward_pieces_are_placed_whole_and_crc_checked() {
    // A Send of 65517-octet FPDUs (18-octet untagged header), cut 5 octets into each.
    let (mut s, mut raw, guard) = predicted_pair(true);
    let data = pattern(31, 250 * 1024 + 3);
    let msg = pattern(32, 100);
    let mut fpdus = send_fpdus(&data, 1, &[65_517], true);
    assert!(fpdus.iter().any(|f| f.len() == fpdu_len(65_535)));
    fpdus.extend(send_fpdus(&msg, 2, &[4096], true));
    let mut wire = Vec::new();
    let mut cuts = Vec::new();
    for f in &fpdus {
        cuts.push(wire.len() + 5);
        wire.extend_from_slice(f);
    }
    write_in_pieces(&mut s, &mut raw, &wire, &cuts);
    s.wait(&mut raw, "both receives", |s, _| s.done.len() >= 2);
    assert_eq!(
        (s.done[0].status, s.done[0].byte_len as usize),
        (WcStatus::Success, data.len())
    );
    assert!(s.read(PRED_RECV, data.len()) == data, "Send whole");
    assert_eq!(
        (s.done[1].status, s.done[1].byte_len as usize),
        (WcStatus::Success, msg.len())
    );
    assert!(s.read(PRED_SMALL, msg.len()) == msg, "next Send");
    assert!(s.read(PRED_RECV + PRED_RECV_LEN, PRED_GUARD) == guard);
    // A Write of 65521-octet FPDUs (14-octet tagged header) into the same registration,
    // cut in the middle of each CRC; then the same with one payload octet flipped.
    let wdata = pattern(33, 200_000);
    let at = PRED_SMALL + 8192;
    for corrupt in [false, true] {
        let mut wire = Vec::new();
        let mut cuts = Vec::new();
        let mut off = 0;
        while off < wdata.len() {
            let n = 65_521.min(wdata.len() - off);
            let last = off + n == wdata.len();
            let h =
                SegmentHeader::tagged(Opcode::RdmaWrite, last, s.mr.rkey(), s.addr_of(at + off));
            let mut b = vec![0u8; fpdu_len(h.encoded_len() + n)];
            let len = encode_fpdu(&mut b, &h, &wdata[off..off + n], true).expect("fpdu");
            assert!(n < 65_521 || len == fpdu_len(65_535));
            if corrupt && off == 65_521 {
                b[40_000] ^= 0x01;
            }
            wire.extend_from_slice(&b[..len]);
            cuts.push(wire.len() - 2);
            off += n;
        }
        write_in_pieces(&mut s, &mut raw, &wire, &cuts);
        if corrupt {
            expect_terminate_code(&mut s, &mut raw, TerminateCode::Mpa(MpaLlpError::CrcError));
            s.wait(&mut raw, "error and close", |s, r| {
                s.qp.as_ref().is_some_and(|q| q.state().is_error()) && r.eof
            });
        } else {
            s.wait(&mut raw, "the whole Write placed", |s, _| {
                s.read(at, wdata.len()) == wdata
            });
            expect_no_answer(&mut s, &mut raw, 50, "a good Write");
        }
    }
}

/// siw reads work requests in place from their slots (issue 14: a message names its
/// send-queue slot, a Send its receive's slot; posting fills only the entries given). A
/// slot reused by a request with fewer gather or scatter entries than the one before
/// must carry exactly its own: Sends alternate three gather entries and one, receives
/// three scatter entries and one, through queues of four slots, with an RDMA Read (whose
/// body is the transmitter's own bytes) and a Write between them; every octet, length
/// and completion is checked. The second and third entries of each three-entry list
/// are under a registration dropped after its round, so an entry left over in a reused
/// slot fails a later request's key check.
#[test]
fn reused_slots_carry_only_their_own_entries() {
    use rpcrdma::fabric::{Access, ProtectionDomain};
    let small = QpConfig {
        caps: rpcrdma::fabric::QpCaps {
            max_send_wr: 4,
            max_recv_wr: 4,
            ..rpcrdma::fabric::QpCaps::default()
        },
        ..QpConfig::default()
    };
    for cfg in [SiwConfig::default(), SiwConfig::strict()] {
        let mut p = custom_pair(
            cfg,
            &Opts {
                server: small,
                client: small,
                ..Opts::default()
            },
        );
        for round in 0..12u64 {
            let wide = round % 2 == 0;
            let len = if wide { 300 } else { 100 + round as usize };
            let data = pattern(round, len);
            p.c.fill(0x1000, &data);
            let s_mr =
                p.s.pd
                    .reg_arena(&p.s.arena, Access::ALL)
                    .expect("server mr");
            let c_mr =
                p.c.pd
                    .reg_arena(&p.c.arena, Access::ALL)
                    .expect("client mr");
            let other = |sge: Sge, mr: &<SiwProvider as rpcrdma::fabric::Provider>::Mr| {
                Sge::new(sge.addr, sge.length, mr.lkey())
            };
            // The receive: three entries of 120 octets or one of 512.
            let rb3 = [
                p.s.sge(0, 120),
                other(p.s.sge(4096, 120), &s_mr),
                other(p.s.sge(8192, 120), &s_mr),
            ];
            let rb1 = [p.s.sge(16384, 512)];
            let rb: &[Sge] = if round % 3 == 0 { &rb3 } else { &rb1 };
            p.s.qp
                .post_recv(&[RecvWr {
                    wr_id: 100 + round,
                    sgl: rb,
                }])
                .expect("post recv");
            // The Send: three pieces, or one.
            let sb3 = [
                p.c.sge(0x1000, len / 3),
                other(p.c.sge(0x1000 + len / 3, len / 3), &c_mr),
                other(p.c.sge(0x1000 + 2 * (len / 3), len - 2 * (len / 3)), &c_mr),
            ];
            let sb1 = [p.c.sge(0x1000, len)];
            let sb: &[Sge] = if wide { &sb3 } else { &sb1 };
            p.c.qp
                .post_send(&[SendWr::send(200 + round, sb)])
                .expect("post send");
            let (s, c) = p.completions(1, 1);
            assert_eq!(
                (s[0].wr_id, s[0].status, s[0].byte_len as usize),
                (100 + round, WcStatus::Success, len),
                "round {round}: receive"
            );
            assert_eq!(
                (c[0].wr_id, c[0].status, c[0].byte_len as usize),
                (200 + round, WcStatus::Success, len),
                "round {round}: send"
            );
            let got = if rb.len() == 3 {
                let mut g = p.s.read(0, 120.min(len));
                g.extend(p.s.read(4096, 120.min(len.saturating_sub(120))));
                g.extend(p.s.read(8192, len.saturating_sub(240)));
                g
            } else {
                p.s.read(16384, len)
            };
            assert!(got == data, "round {round}: received octets differ");
            // A Read back into the client (inline Read Request body) and a Write to the
            // server, through the same small send queue.
            let rd = [p.c.sge(0x8000, 64), p.c.sge(0x9000, 36)];
            p.c.qp
                .post_send(&[SendWr::read(
                    300 + round,
                    &rd[..if wide { 2 } else { 1 }],
                    p.s.remote(16384),
                )])
                .expect("post read");
            let (_, c) = p.completions(0, 1);
            let want = if wide { 100 } else { 64 };
            assert_eq!(
                (c[0].wr_id, c[0].status, c[0].byte_len as usize),
                (300 + round, WcStatus::Success, want),
                "round {round}: read"
            );
            let mut back = p.c.read(0x8000, 64);
            if wide {
                back.extend(p.c.read(0x9000, 36));
            }
            assert!(
                back == p.s.read(16384, want),
                "round {round}: read octets differ"
            );
            let wb = [p.c.sge(0x1000, 40)];
            p.c.qp
                .post_send(&[SendWr::write(400 + round, &wb, p.s.remote(0x20000))])
                .expect("post write");
            let (_, c) = p.completions(0, 1);
            assert_eq!(
                (c[0].wr_id, c[0].status),
                (400 + round, WcStatus::Success),
                "round {round}: write"
            );
            drop((s_mr, c_mr));
        }
        // On-transmit completions say nothing of the peer: wait for the octets there.
        let want = p.c.read(0x1000, 40);
        p.wait("the last Write placed", |p| p.s.read(0x20000, 40) == want);
    }
}

/// A lone small Send posted to an idle transmitter is written by `post_send` itself
/// (issue 14, sixth round: one poll earlier), so the peer reads it while the server is
/// not polled at all, and the completion is still the next poll's. A Send too long for
/// one flat write is left for the poll, as before: nothing leaves until the server is
/// polled (no thread of the device polls on its own, so the wait below is not a race).
#[test]
fn a_lone_small_send_leaves_at_post_and_a_long_one_at_the_next_poll() {
    let (mut s, mut raw) = raw_pair(SiwConfig::default(), true);
    // The server hears its peer first: until then it may follow its own first FPDUs
    // with wake-up Reads (for Linux siw's unread first message), and the early write
    // is only for a transmitter with nothing of the kind owed.
    let rb = [s.sge(0, 64)];
    s.qp()
        .post_recv(&[RecvWr { wr_id: 1, sgl: &rb }])
        .expect("post");
    let h = SegmentHeader::untagged(Opcode::Send, true, 0, raw.msn.take(QueueNumber::Send), 0);
    raw.send(h, b"hello");
    s.wait(&mut raw, "the peer's Send", |s, _| {
        s.done.iter().any(|c| c.wr_id == 1)
    });

    let small = pattern(7, 40);
    s.fill(100, &small);
    let sb = [s.sge(100, small.len())];
    s.qp().post_send(&[SendWr::send(2, &sb)]).expect("post");
    let end = Instant::now() + DEADLINE;
    let (h, body) = loop {
        raw.fill();
        if let Some(f) = raw.take_fpdu() {
            break f;
        }
        assert!(!raw.eof, "connection closed");
        assert!(
            Instant::now() < end,
            "post_send wrote nothing: no FPDU without a poll"
        );
        std::thread::yield_now();
    };
    assert_eq!(h.opcode, Opcode::Send);
    assert!(h.last);
    assert_eq!(body, small, "the early write carries the Send's octets");
    assert!(
        s.done.iter().all(|c| c.wr_id != 2),
        "the completion waits for a poll"
    );
    s.wait(&mut raw, "the small Send's completion", |s, _| {
        s.done
            .iter()
            .any(|c| c.wr_id == 2 && c.status == WcStatus::Success)
    });

    let long = pattern(8, 1400);
    s.fill(1000, &long);
    let lb = [s.sge(1000, long.len())];
    s.qp().post_send(&[SendWr::send(3, &lb)]).expect("post");
    std::thread::sleep(std::time::Duration::from_millis(20));
    raw.fill();
    assert!(raw.inbox.is_empty(), "a long Send waits for the poll");
    let (h, body) = next_fpdu(&mut s, &mut raw);
    assert_eq!(h.opcode, Opcode::Send);
    assert!(h.last);
    assert_eq!(body, long);
}
