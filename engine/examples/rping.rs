//! An rping-compatible program on the `siw` provider, for interoperability checks with
//! the Linux kernel's siw and rdma-core's `rping`, in both roles.
//!
//! The protocol is rping's (librdmacm/examples/rping.c): the client advertises a buffer
//! with a Send carrying `struct rping_rdma_info { be64 buf; be32 rkey; be32 size; }`;
//! the server RDMA-Reads the client's source buffer and Sends a go-ahead; the client
//! advertises its sink buffer the same way; the server RDMA-Writes what it read into it
//! and Sends again; the client checks the sink against the source. One round is one
//! ping; the text in the buffer is rping's (`rdma-ping-%d: ` then a rotating alphabet).
//!
//! ```text
//! rping -s [-a ADDR] [-p PORT] [-C COUNT] [-S SIZE] [-V] [-v] [--no-crc] [-t SECS]
//! rping -c  -a ADDR  [-p PORT] [-C COUNT] [-S SIZE] [-V] [-v] [--no-crc] [-t SECS]
//! ```
//!
//! Prints `RPING_OK <pings>` and exits 0 when every ping succeeded (and, with `-V`,
//! validated); any failure or a wait beyond the timeout exits 1 with the reason.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rpcrdma::fabric::siw::{
    SiwCm, SiwConfig, SiwConnRequest, SiwCq, SiwDevice, SiwMr, SiwPd, SiwProvider, SiwQp,
};
use rpcrdma::fabric::{
    Access, CmEvent, Completion, CompletionQueue, ConnectionManager, Device, MemoryRegion,
    ProtectionDomain, QpCaps, QpConfig, QpInit, QueuePair, RecvWr, RemoteAddr, SendWr, Sge,
    WcOpcode, WcStatus,
};
use rpcrdma_pools::{Arena, ArenaOptions, HugePages};

/// `sizeof(struct rping_rdma_info)`.
const INFO_LEN: usize = 16;

/// rping's smallest buffer: the ping text must fit.
const MIN_SIZE: usize = 16;

struct Args {
    server: bool,
    addr: IpAddr,
    port: u16,
    count: u64,
    size: usize,
    validate: bool,
    verbose: bool,
    crc: bool,
    timeout: Duration,
}

fn usage() -> String {
    "usage: rping -s|-c [-a ADDR] [-p PORT] [-C COUNT] [-S SIZE] [-V] [-v] [--no-crc] [-t SECS]"
        .to_string()
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        server: false,
        addr: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        port: 7174,
        count: 10,
        size: 64,
        validate: false,
        verbose: false,
        crc: true,
        timeout: Duration::from_secs(60),
    };
    let mut role = None;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |what: &str| {
            it.next()
                .ok_or(format!("{what} needs a value; {}", usage()))
        };
        match arg.as_str() {
            "-s" => role = Some(true),
            "-c" => role = Some(false),
            "-a" => a.addr = value("-a")?.parse().map_err(|e| format!("-a: {e}"))?,
            "-p" => a.port = value("-p")?.parse().map_err(|e| format!("-p: {e}"))?,
            "-C" => a.count = value("-C")?.parse().map_err(|e| format!("-C: {e}"))?,
            "-S" => a.size = value("-S")?.parse().map_err(|e| format!("-S: {e}"))?,
            "-t" => {
                let s: u64 = value("-t")?.parse().map_err(|e| format!("-t: {e}"))?;
                a.timeout = Duration::from_secs(s);
            }
            "-V" => a.validate = true,
            "-v" => a.verbose = true,
            "--no-crc" => a.crc = false,
            other => return Err(format!("unknown argument {other:?}; {}", usage())),
        }
    }
    a.server = role.ok_or_else(usage)?;
    if a.size < MIN_SIZE || a.size > (1 << 30) {
        return Err(format!("-S {} is outside {MIN_SIZE}..=1 GiB", a.size));
    }
    if !a.server && a.addr.is_unspecified() {
        return Err(format!("the client needs -a; {}", usage()));
    }
    Ok(a)
}

/// Everything one side owns.
struct Side {
    qp: Option<SiwQp>,
    cq: SiwCq,
    cm: SiwCm,
    pd: SiwPd,
    arena: Arc<Arena>,
    /// Source (client) or RDMA buffer (server) and the client's sink, each with its key.
    mr: SiwMr,
    _dev: SiwDevice,
    deadline: Duration,
    done: Vec<Completion>,
}

/// How a queue pair comes to be.
enum Open {
    Connect(SocketAddr),
    Accept(SiwConnRequest),
}

/// Arena layout: control messages first, then two data buffers.
const RECV_AT: usize = 0;
const SEND_AT: usize = 64;
const START_AT: usize = 4096;

impl Side {
    fn new(a: &Args) -> Result<Side, String> {
        let dev = SiwDevice::with_config(SiwConfig {
            crc: a.crc,
            // rping's protocol as first checked against kernel siw: strict completions.
            ..SiwConfig::strict()
        })
        .map_err(|e| format!("open siw: {e}"))?;
        let pd = dev.alloc_pd().map_err(|e| format!("pd: {e}"))?;
        let cq = dev.create_cq(64).map_err(|e| format!("cq: {e}"))?;
        let cm = dev.create_cm().map_err(|e| format!("cm: {e}"))?;
        let len = START_AT + 2 * a.size.next_multiple_of(4096);
        let arena = Arc::new(
            Arena::new(
                &ArenaOptions::new(len)
                    .hugepages(HugePages::Never)
                    .name("rping"),
            )
            .map_err(|e| format!("arena: {e}"))?,
        );
        // rping registers its buffers for local write and remote read and write.
        let mr = pd
            .reg_arena(&arena, Access::ALL)
            .map_err(|e| format!("register: {e}"))?;
        Ok(Side {
            qp: None,
            cq,
            cm,
            pd,
            arena,
            mr,
            _dev: dev,
            deadline: a.timeout,
            done: Vec::new(),
        })
    }

    /// Connects or accepts with rping's queue sizes.
    fn open(&mut self, how: Open) -> Result<(), String> {
        let init = QpInit::<SiwProvider> {
            pd: &self.pd,
            send_cq: &self.cq,
            recv_cq: &self.cq,
            srq: None,
            config: QpConfig {
                caps: QpCaps {
                    max_send_wr: 16,
                    max_recv_wr: 16,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                },
                ..QpConfig::default()
            },
        };
        let qp = match how {
            Open::Connect(peer) => self.cm.connect(&peer, init, &[]),
            Open::Accept(request) => self.cm.accept(request, init, &[]),
        }
        .map_err(|e| format!("connect/accept: {e}"))?;
        self.qp = Some(qp);
        Ok(())
    }

    fn addr(&self, off: usize) -> u64 {
        self.arena.base() as u64 + off as u64
    }

    fn sge(&self, off: usize, len: usize) -> Sge {
        Sge::new(self.addr(off), len as u32, self.mr.lkey())
    }

    fn write(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.arena.len(), "inside the arena");
        // SAFETY: in bounds (checked above); the provider does not use this range now.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.arena.base().add(off), data.len())
        }
    }

    fn read(&self, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= self.arena.len(), "inside the arena");
        let mut v = vec![0u8; len];
        // SAFETY: as in `write`.
        unsafe { std::ptr::copy_nonoverlapping(self.arena.base().add(off), v.as_mut_ptr(), len) }
        v
    }

    fn qp(&mut self) -> Result<&mut SiwQp, String> {
        self.qp.as_mut().ok_or_else(|| "not connected".to_string())
    }

    /// Polls until a completion with `opcode` arrives; fails on any error completion.
    fn wait(&mut self, opcode: WcOpcode, what: &str) -> Result<Completion, String> {
        let end = Instant::now() + self.deadline;
        let mut buf = [Completion::EMPTY; 8];
        loop {
            if let Some(i) = self.done.iter().position(|c| c.opcode == opcode) {
                return Ok(self.done.remove(i));
            }
            let n = self.cq.poll(&mut buf);
            for c in &buf[..n] {
                // A peer that disconnects right after our last exchange flushes the
                // receive we had reposted; that only matters when we wait for a receive.
                let flushed_recv = c.opcode == WcOpcode::Recv && c.status == WcStatus::WrFlushed;
                if c.status != WcStatus::Success && !(flushed_recv && opcode != WcOpcode::Recv) {
                    return Err(format!("{what}: completion failed: {c:?}"));
                }
                if c.status == WcStatus::Success {
                    self.done.push(*c);
                }
            }
            if let Some(i) = self.done.iter().position(|c| c.opcode == opcode) {
                return Ok(self.done.remove(i));
            }
            if let Some(CmEvent::Disconnected { .. }) =
                self.cm.poll_event().map_err(|e| e.to_string())?
            {
                return Err(format!("{what}: the peer disconnected"));
            }
            if Instant::now() > end {
                return Err(format!("{what}: nothing within {:?}", self.deadline));
            }
            if n == 0 {
                std::thread::yield_now();
            }
        }
    }

    fn post_recv(&mut self) -> Result<(), String> {
        let rb = [self.sge(RECV_AT, INFO_LEN)];
        self.qp()?
            .post_recv(&[RecvWr { wr_id: 1, sgl: &rb }])
            .map_err(|e| e.to_string())
    }

    fn send_info(&mut self, buf: u64, rkey: u32, size: u32) -> Result<(), String> {
        self.post_info(buf, rkey, size)?;
        self.wait(WcOpcode::Send, "send")?;
        Ok(())
    }

    /// Posts the advertisement without waiting for its completion.
    fn post_info(&mut self, buf: u64, rkey: u32, size: u32) -> Result<(), String> {
        let mut info = [0u8; INFO_LEN];
        info[..8].copy_from_slice(&buf.to_be_bytes());
        info[8..12].copy_from_slice(&rkey.to_be_bytes());
        info[12..].copy_from_slice(&size.to_be_bytes());
        self.write(SEND_AT, &info);
        let sb = [self.sge(SEND_AT, INFO_LEN)];
        self.qp()?
            .post_send(&[SendWr::send(2, &sb)])
            .map_err(|e| e.to_string())
    }

    /// The peer's advertisement in the last receive.
    fn info(&self) -> RemoteAddr {
        let b = self.read(RECV_AT, INFO_LEN);
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        let mut k = [0u8; 4];
        k.copy_from_slice(&b[8..12]);
        RemoteAddr {
            addr: u64::from_be_bytes(a),
            rkey: u32::from_be_bytes(k),
        }
    }

    fn info_size(&self) -> usize {
        let b = self.read(RECV_AT + 12, 4);
        u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize
    }

    fn wait_event(&mut self, what: &str) -> Result<CmEvent<SiwConnRequest>, String> {
        let end = Instant::now() + self.deadline;
        let mut buf = [Completion::EMPTY; 8];
        loop {
            if let Some(e) = self.cm.poll_event().map_err(|e| e.to_string())? {
                return Ok(e);
            }
            let n = self.cq.poll(&mut buf);
            self.done.extend_from_slice(&buf[..n]);
            if Instant::now() > end {
                return Err(format!("{what}: no event within {:?}", self.deadline));
            }
            std::thread::yield_now();
        }
    }
}

/// rping's text: `rdma-ping-%d: ` then letters from `start`, NUL-terminated.
fn ping_text(ping: u64, start: u8, size: usize) -> Vec<u8> {
    let mut v = format!("rdma-ping-{ping}: ").into_bytes();
    v.truncate(size);
    let mut c = start;
    while v.len() < size {
        v.push(c);
        c = if c >= 122 { 65 } else { c + 1 };
    }
    v[size - 1] = 0;
    v
}

fn client(a: &Args) -> Result<u64, String> {
    let mut s = Side::new(a)?;
    let peer = SocketAddr::new(a.addr, a.port);
    s.open(Open::Connect(peer))?;
    s.post_recv()?;
    match s.wait_event("connect")? {
        CmEvent::Established { .. } => {}
        e => return Err(format!("connect: {e:?}")),
    }
    let size = a.size;
    let sink_at = START_AT + size.next_multiple_of(4096);
    let mut start = 65u8;
    for ping in 0..a.count {
        let text = ping_text(ping, start, size);
        start = if start >= 122 { 65 } else { start + 1 };
        s.write(START_AT, &text);
        s.write(sink_at, &vec![0u8; size]);
        // Advertise the source; the server reads it and tells us to go on.
        s.send_info(s.addr(START_AT), s.mr.rkey(), size as u32)?;
        s.wait(WcOpcode::Recv, "the server's go-ahead")?;
        s.post_recv()?;
        // Advertise the sink; the server writes the data back and tells us.
        s.send_info(s.addr(sink_at), s.mr.rkey(), size as u32)?;
        s.wait(WcOpcode::Recv, "the server's write-complete")?;
        s.post_recv()?;
        let got = s.read(sink_at, size);
        if a.validate && got != text {
            return Err(format!("ping {ping}: data mismatch"));
        }
        if a.verbose {
            let n = got.iter().position(|&b| b == 0).unwrap_or(got.len());
            println!("ping data: {}", String::from_utf8_lossy(&got[..n]));
        }
    }
    if let Some(qp) = s.qp.as_ref() {
        let conn = qp.conn_id();
        s.cm.disconnect(conn).map_err(|e| e.to_string())?;
    }
    Ok(a.count)
}

fn server(a: &Args) -> Result<u64, String> {
    let mut s = Side::new(a)?;
    s.cm.listen(&SocketAddr::new(a.addr, a.port))
        .map_err(|e| format!("listen: {e}"))?;
    println!(
        "RPING_LISTENING {}",
        s.cm.listen_addr().map_or(String::new(), |x| x.to_string())
    );
    let request = match s.wait_event("a connect request")? {
        CmEvent::ConnectRequest { request, .. } => request,
        e => return Err(format!("listen: {e:?}")),
    };
    s.open(Open::Accept(request))?;
    s.post_recv()?;
    match s.wait_event("established")? {
        CmEvent::Established { .. } => {}
        e => return Err(format!("accept: {e:?}")),
    }
    let buf_at = START_AT;
    let mut pings = 0;
    while pings < a.count {
        // The client's source advertisement.
        s.wait(WcOpcode::Recv, "the client's source advertisement")?;
        let src = s.info();
        let len = s.info_size();
        s.post_recv()?;
        if len == 0 || len > a.size {
            return Err(format!(
                "ping {pings}: advertised size {len} exceeds -S {}",
                a.size
            ));
        }
        let sink = [s.sge(buf_at, len)];
        s.qp()?
            .post_send(&[SendWr::read(3, &sink, src)])
            .map_err(|e| e.to_string())?;
        s.wait(WcOpcode::RdmaRead, "RDMA Read")?;
        let data = s.read(buf_at, len);
        if a.verbose {
            let n = data.iter().position(|&b| b == 0).unwrap_or(data.len());
            println!("server ping data: {}", String::from_utf8_lossy(&data[..n]));
        }
        // Go ahead.
        s.send_info(s.addr(buf_at), s.mr.rkey(), len as u32)?;
        // The client's sink advertisement.
        s.wait(WcOpcode::Recv, "the client's sink advertisement")?;
        let dst = s.info();
        s.post_recv()?;
        // rping writes strlen + 1 octets.
        let wlen = data.iter().position(|&b| b == 0).map_or(len, |n| n + 1);
        let src_sge = [s.sge(buf_at, wlen)];
        s.qp()?
            .post_send(&[SendWr::write(4, &src_sge, dst)])
            .map_err(|e| e.to_string())?;
        s.wait(WcOpcode::RdmaWrite, "RDMA Write")?;
        pings += 1;
        // Tell the client to begin again. After the last ping the client disconnects as
        // soon as it has this Send, so (as rping) its completion may be a flush: the
        // peer's close can overtake the proof that it executed the Send.
        if pings < a.count {
            s.send_info(s.addr(buf_at), s.mr.rkey(), len as u32)?;
        } else {
            s.post_info(s.addr(buf_at), s.mr.rkey(), len as u32)?;
        }
    }
    // The client disconnects after its last ping.
    let end = Instant::now() + s.deadline;
    loop {
        if let CmEvent::Disconnected { .. } = s.wait_event("the client's disconnect")? {
            break;
        }
        if Instant::now() > end {
            break;
        }
    }
    Ok(pings)
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("rping: {e}");
            return ExitCode::from(2);
        }
    };
    let r = if args.server {
        server(&args)
    } else {
        client(&args)
    };
    match r {
        Ok(n) => {
            println!("RPING_OK {n}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rping: {e}");
            ExitCode::FAILURE
        }
    }
}
