//! ONC RPC over TCP with record marking (RFC 5531 §11): a small threaded server for
//! MOUNT (Linux `mount.nfs` asks mountd over TCP even with `proto=rdma`) and NFS over
//! TCP, driving the same [`Dispatcher`] as the RDMA side.
//!
//! One thread accepts; each connection gets a thread and its own dispatcher from the
//! factory, with the peer's IP address as its
//! [client](crate::program::Dispatcher::set_client) (for a duplicate request cache).
//! Records are bounded ([`TcpConfig::max_record`]); a peer that sends a larger
//! one, or breaks the framing, is disconnected.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::program::{ClientAddr, DispatchError, Dispatched, Dispatcher, InboundCall};
use crate::rpc::ReplyHeader;

/// Builds the dispatcher for a new connection from the peer's address.
pub type DispatcherFactory = dyn Fn(SocketAddr) -> Dispatcher + Send + Sync;

/// TCP server settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpConfig {
    /// Largest call record (all fragments together).
    pub max_record: usize,
    /// Size of each connection's reply buffer: the largest reply.
    pub reply_buf: usize,
    /// Most connections served at once (each holds a thread and its buffers); more are
    /// closed as soon as they are accepted.
    pub max_connections: usize,
    /// Close a connection that sends nothing for this long, so idle peers cannot hold
    /// all [`max_connections`](Self::max_connections) slots. `None`: never.
    pub idle_timeout: Option<Duration>,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            max_record: 2 * 1024 * 1024,
            reply_buf: 1024 * 1024 + 64 * 1024,
            max_connections: 64,
            idle_timeout: Some(Duration::from_secs(300)),
        }
    }
}

/// Counters of a [`TcpServer`].
#[derive(Debug, Default)]
pub struct TcpCounters {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Calls answered.
    pub calls: AtomicU64,
    /// Connections closed for a framing error or an oversized record.
    pub bad_records: AtomicU64,
    /// Connections closed at once for exceeding [`TcpConfig::max_connections`].
    pub refused: AtomicU64,
    /// Connections open now.
    pub active: AtomicUsize,
}

/// A running TCP RPC server; dropping it stops accepting (open connections finish on
/// their own when the peer closes).
#[derive(Debug)]
pub struct TcpServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    counters: Arc<TcpCounters>,
    accept: Option<JoinHandle<()>>,
}

impl TcpServer {
    /// Serves on `listener` with dispatchers from `factory`.
    pub fn spawn(
        listener: TcpListener,
        config: TcpConfig,
        factory: Arc<DispatcherFactory>,
    ) -> io::Result<TcpServer> {
        let addr = listener.local_addr()?;
        // Non-blocking accept, polled, so that the thread notices `stop`.
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(TcpCounters::default());
        let accept = {
            let (stop, counters) = (stop.clone(), counters.clone());
            thread::Builder::new()
                .name(format!("rpc-tcp-{}", addr.port()))
                .spawn(move || accept_loop(listener, config, factory, stop, counters))?
        };
        Ok(TcpServer {
            addr,
            stop,
            counters,
            accept: Some(accept),
        })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its counters.
    pub fn counters(&self) -> &TcpCounters {
        &self.counters
    }
}

impl Drop for TcpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(
    listener: TcpListener,
    config: TcpConfig,
    factory: Arc<DispatcherFactory>,
    stop: Arc<AtomicBool>,
    counters: Arc<TcpCounters>,
) {
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, peer)) => {
                if counters.active.load(Ordering::Relaxed) >= config.max_connections {
                    counters.refused.fetch_add(1, Ordering::Relaxed);
                    drop(stream);
                    continue;
                }
                counters.connections.fetch_add(1, Ordering::Relaxed);
                counters.active.fetch_add(1, Ordering::Relaxed);
                let mut d = factory(peer);
                d.set_client(ClientAddr::Ip(peer.ip()));
                let c = counters.clone();
                let spawned = thread::Builder::new()
                    .name(format!("rpc-tcp-conn-{peer}"))
                    .spawn(move || {
                        let _ = serve_conn(stream, d, config, &c);
                        c.active.fetch_sub(1, Ordering::Relaxed);
                    });
                if spawned.is_err() {
                    counters.active.fetch_sub(1, Ordering::Relaxed);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(Duration::from_millis(20));
            }
            Err(_) => thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Reads one record (RFC 5531 §11): fragments, each with a 4-octet marker whose top bit
/// flags the last. `Ok(false)` at a clean end of stream.
pub fn read_record(s: &mut impl Read, max: usize, out: &mut Vec<u8>) -> io::Result<bool> {
    out.clear();
    loop {
        let mut m = [0u8; 4];
        match s.read_exact(&mut m) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && out.is_empty() => {
                return Ok(false)
            }
            Err(e) => return Err(e),
        }
        let m = u32::from_be_bytes(m);
        let len = (m & 0x7fff_ffff) as usize;
        if out.len() + len > max {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "record too large",
            ));
        }
        let at = out.len();
        out.resize(at + len, 0);
        s.read_exact(&mut out[at..])?;
        if m & 0x8000_0000 != 0 {
            return Ok(true);
        }
    }
}

/// Writes `msg` as one record of one fragment.
pub fn write_record(s: &mut impl Write, msg: &[u8]) -> io::Result<()> {
    let m = 0x8000_0000u32 | msg.len() as u32;
    s.write_all(&m.to_be_bytes())?;
    s.write_all(msg)?;
    s.flush()
}

fn serve_conn(
    mut stream: TcpStream,
    mut d: Dispatcher,
    config: TcpConfig,
    counters: &TcpCounters,
) -> io::Result<()> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(config.idle_timeout)?;
    let mut msg = Vec::new();
    let mut reply = vec![0u8; config.reply_buf];
    loop {
        match read_record(&mut stream, config.max_record, &mut msg) {
            Ok(true) => {}
            Ok(false) => return Ok(()),
            Err(e) => {
                if e.kind() == io::ErrorKind::InvalidData {
                    counters.bad_records.fetch_add(1, Ordering::Relaxed);
                }
                return Err(e);
            }
        }
        let len = match d.dispatch(&InboundCall::inline(&msg), &mut reply) {
            Ok(Dispatched::Reply(r)) => r.len,
            Ok(Dispatched::Drop(_) | Dispatched::NoReply { .. }) => continue,
            // No Write or Reply chunks over TCP: results that do not fit the buffer are
            // a server limit, answered SYSTEM_ERR.
            Err(DispatchError::ReplyOverrun { xid, .. })
            | Err(DispatchError::ReplyBufferTooSmall { xid, .. }) => {
                match ReplyHeader::system_err(xid).encode(&mut reply) {
                    Ok(n) => n,
                    Err(_) => return Ok(()),
                }
            }
        };
        counters.calls.fetch_add(1, Ordering::Relaxed);
        write_record(&mut stream, &reply[..len])?;
    }
}
