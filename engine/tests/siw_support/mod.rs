//! What the raw iWARP peers of the siw tests share: non-blocking socket I/O with a
//! deadline, so a peer that stops reading fails the test instead of hanging it.
#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The longest a raw peer waits for its socket to take a write.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(5);

/// Writes all of `b` to the non-blocking `sock`, yielding while it is full.
pub fn write_all(sock: &mut TcpStream, mut b: &[u8]) {
    let end = Instant::now() + WRITE_DEADLINE;
    while !b.is_empty() {
        match sock.write(b) {
            Ok(n) => b = &b[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                assert!(Instant::now() < end, "raw peer cannot write");
                std::thread::yield_now();
            }
            Err(e) => panic!("raw peer write: {e}"),
        }
    }
}

/// Appends whatever has arrived on the non-blocking `sock` to `inbox`, without waiting.
/// Returns true once the stream has ended (closed, reset or failed).
pub fn fill(sock: &mut TcpStream, inbox: &mut Vec<u8>) -> bool {
    let mut buf = [0u8; 65536];
    loop {
        match sock.read(&mut buf) {
            Ok(0) => return true,
            Ok(n) => inbox.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return false,
            Err(_) => return true,
        }
    }
}

/// A siw device listening on an ephemeral loopback port, with one arena registered for
/// every access: the local side the raw-peer tests talk to.
pub struct Listening {
    /// The device.
    pub dev: rpcrdma::fabric::siw::SiwDevice,
    /// Its protection domain.
    pub pd: rpcrdma::fabric::siw::SiwPd,
    /// One completion queue for everything (256 deep).
    pub cq: rpcrdma::fabric::siw::SiwCq,
    /// The connection manager, listening.
    pub cm: rpcrdma::fabric::siw::SiwCm,
    /// The arena (no hugepages).
    pub arena: std::sync::Arc<rpcrdma_pools::Arena>,
    /// The arena's registration.
    pub mr: rpcrdma::fabric::siw::SiwMr,
    /// Where the connection manager listens.
    pub addr: std::net::SocketAddr,
}

/// Opens a device with `cfg`, listens, and registers an arena of `arena_len` octets.
pub fn listening(
    cfg: rpcrdma::fabric::siw::SiwConfig,
    arena_len: usize,
    name: &'static str,
) -> Listening {
    use rpcrdma::fabric::{Access, ConnectionManager, Device, ProtectionDomain};
    let dev = rpcrdma::fabric::siw::SiwDevice::with_config(cfg).expect("device");
    let pd = dev.alloc_pd().expect("pd");
    let cq = dev.create_cq(256).expect("cq");
    let mut cm = dev.create_cm().expect("cm");
    cm.listen(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("listen");
    let addr = cm.listen_addr().expect("bound address");
    let arena = std::sync::Arc::new(
        rpcrdma_pools::Arena::new(
            &rpcrdma_pools::ArenaOptions::new(arena_len)
                .hugepages(rpcrdma_pools::HugePages::Never)
                .name(name),
        )
        .expect("arena"),
    );
    let mr = pd.reg_arena(&arena, Access::ALL).expect("register");
    Listening {
        dev,
        pd,
        cq,
        cm,
        arena,
        mr,
        addr,
    }
}

/// A non-blocking, no-delay TCP connection to `addr`.
pub fn connect_raw(addr: std::net::SocketAddr) -> TcpStream {
    let sock = TcpStream::connect(addr).expect("connect");
    sock.set_nodelay(true).expect("nodelay");
    sock.set_nonblocking(true).expect("non-blocking");
    sock
}

/// Sends a revision 2 MPA Request (CRCs asked for, IRD/ORD 8/8, client-server) with
/// `private_data`, as kernel siw's active side does.
pub fn mpa_request(sock: &mut TcpStream, private_data: &[u8]) {
    use rpcrdma::iwarp::mpa::{encode_frame, EnhancedData, FrameKind, FrameParams, Revision};
    let mut f = [0u8; 600];
    let n = encode_frame(
        &mut f,
        &FrameParams {
            kind: FrameKind::Request,
            crc: true,
            reject: false,
            revision: Revision::V2,
            enhanced: Some(EnhancedData::client_server(8, 8)),
        },
        private_data,
    )
    .expect("MPA Request");
    write_all(sock, &f[..n]);
}

/// Takes the next whole FPDU off the front of `inbox` (CRCs as `crc`): its header and
/// payload; `None` while it is incomplete.
pub fn take_fpdu(
    inbox: &mut Vec<u8>,
    crc: bool,
) -> Option<(rpcrdma::iwarp::rdmap::SegmentHeader, Vec<u8>)> {
    use rpcrdma::iwarp::fpdu::{decode_fpdu, FpduError, MAX_ULPDU_LEN};
    match decode_fpdu(inbox, crc, MAX_ULPDU_LEN) {
        Ok(f) => {
            let out = (f.header, f.payload.to_vec());
            let len = f.len;
            inbox.drain(..len);
            Some(out)
        }
        Err(FpduError::Incomplete { .. }) => None,
        Err(e) => panic!("bad FPDU from siw: {e}"),
    }
}
