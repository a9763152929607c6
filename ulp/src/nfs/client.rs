//! A blocking NFSv3 client over the engine ([`Nfs3Client`]), with MOUNT over TCP
//! ([`mount()`]) and the portmapper lookup that finds mountd ([`getport`]).
//!
//! DDP per RFC 8267 §4: READ offers one Write chunk sized for the data, WRITE sends its
//! data in a Read chunk, and the engine offers a Reply chunk whenever a reply may exceed
//! the inline threshold (READDIRPLUS). Errors name RPC and NFS statuses
//! ([`NfsClientError`]).

use core::fmt;
use std::io::{self, Write as _};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use rpcrdma::fabric::Provider;
use rpcrdma::wire::header::RdmaError;
use rpcrdma::{CallRequest, CallStatus, Outcome, TransportError};
use rpcrdma::{ConnConfig, ConnState, Reconnect};
use rpcrdma::{Requester, ResponderRole};

use super::mount::{self, DirPath, MountRes3, MountStat3, MOUNT_PROGRAM, MOUNT_V3};
use super::server::tcp::{read_record, write_record};
use super::v3::args::WriteArgs;
use super::v3::args::{CommitArgs, CreateArgs, CreateHow3, ReadArgs, ReaddirplusArgs, StableHow};
use super::v3::res::{
    CommitRes, CreateRes, FsinfoRes, GetattrRes, LookupRes, ReadRes, ReaddirplusRes, WriteRes,
};
use super::v3::types::{DirOpArgs3, Fattr3, NfsFh3, Nfsstat3, Sattr3, Verf};
use super::v3::{self, procs};
use super::v41::Nfsstat4;
use super::NFS_PROGRAM;
use crate::client::{inline_call, CallPlan, DdpBufs, OutcomeResults};
use crate::ddp::{encode_call, reply_results, DdpCursor, DdpDecodeError, ReplyError, XdrCodec};
use crate::rpc::{AcceptStatus, AuthSys, CallHeader, Gids, OpaqueAuth, Rejection};

/// Why an NFS client operation failed.
#[derive(Debug, thiserror::Error)]
pub enum NfsClientError {
    /// The connection could not be set up.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The call failed below RPC (transport error, timeout, refused submit).
    #[error("transport: {0}")]
    Transport(String),
    /// The server answered with an RPC error.
    #[error(fmt = fmt_rpc_error)]
    Rpc(#[source] ReplyError),
    /// The server answered with an NFS error.
    #[error("{0}")]
    Nfs(Nfsstat3),
    /// An NFSv4 operation failed: the operation number and its `nfsstat4`.
    #[error(fmt = fmt_nfs4_error)]
    Nfs4 {
        /// The failing operation (e.g. LOOKUP, 15).
        op: u32,
        /// Its status.
        status: Nfsstat4,
    },
    /// MOUNT refused the export.
    #[error("MOUNT refused the export: {0}")]
    Mount(MountStat3),
    /// The reply did not decode.
    #[error("reply did not decode: {0}")]
    Decode(#[from] DdpDecodeError),
    /// A TCP or local I/O error.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// The RFC 5531 name of an `accept_stat`.
pub fn accept_stat_name(s: &AcceptStatus) -> &'static str {
    match s {
        AcceptStatus::Success => "SUCCESS",
        AcceptStatus::ProgUnavail => "PROG_UNAVAIL",
        AcceptStatus::ProgMismatch { .. } => "PROG_MISMATCH",
        AcceptStatus::ProcUnavail => "PROC_UNAVAIL",
        AcceptStatus::GarbageArgs => "GARBAGE_ARGS",
        AcceptStatus::SystemErr => "SYSTEM_ERR",
    }
}

/// [`NfsClientError::Rpc`]'s message: the RPC status by its RFC 5531 name.
fn fmt_rpc_error(e: &ReplyError, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match e {
        ReplyError::NotSuccess { status, .. } => {
            write!(f, "RPC error {}", accept_stat_name(status))?;
            if let AcceptStatus::ProgMismatch { low, high } = status {
                write!(f, " (server speaks versions {low}..={high})")?;
            }
            Ok(())
        }
        ReplyError::Denied { rejection, .. } => match rejection {
            Rejection::RpcMismatch { low, high } => {
                write!(f, "RPC_MISMATCH (server speaks RPC {low}..={high})")
            }
            Rejection::AuthError(s) => write!(f, "AUTH_ERROR {}", s.name()),
        },
        e => write!(f, "RPC reply: {e}"),
    }
}

/// [`NfsClientError::Nfs4`]'s message: the status and the operation, by name if known.
fn fmt_nfs4_error(op: &u32, status: &Nfsstat4, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match super::v4::op_name(*op) {
        Some(name) => write!(f, "{status} (from {name})"),
        None => write!(f, "{status} (from operation {op})"),
    }
}

type Result<T> = core::result::Result<T, NfsClientError>;

/// AUTH_SYS with this process's user and group: what NFS servers expect (Linux nfsd
/// maps AUTH_NONE to the anonymous user, who may not write the export).
pub(crate) fn header(prog: u32, vers: u32, procedure: u32, xid: u32) -> CallHeader<'static> {
    // SAFETY: getuid and getgid have no preconditions and cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    CallHeader {
        xid,
        prog,
        vers,
        procedure,
        cred: OpaqueAuth::Sys(AuthSys {
            stamp: 0,
            machinename: b"rpcrdma",
            uid,
            gid,
            gids: Gids::EMPTY,
        }),
        verf: OpaqueAuth::None,
    }
}

/// A random starting XID (from the process's hash keys, which the OS seeds).
pub(crate) fn random_xid() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.finish() as u32
}

/// Submits `req` tagged `tag` under the client's next XID (`xid` holds the latest): NFS
/// clients keep their own XIDs, which a server's duplicate request cache keys on.
pub(crate) fn submit_next<P: Provider, B: ResponderRole>(
    conn: &mut Requester<P, B>,
    xid: &mut u32,
    req: CallRequest,
    tag: u64,
) -> Result<()> {
    *xid = xid.wrapping_add(1);
    conn.submit(req.with_xid(*xid), tag)
        .map_err(|e| NfsClientError::Transport(e.to_string()))
}

/// Polls `conn` until a call's outcome comes, whatever it says, for at most `timeout`.
pub(crate) fn wait_outcome<P: Provider, B: ResponderRole>(
    conn: &mut Requester<P, B>,
    timeout: Duration,
) -> Result<Outcome> {
    let end = Instant::now() + timeout;
    loop {
        conn.poll(Instant::now());
        if let Some(o) = conn.poll_outcome() {
            return Ok(o);
        }
        if Instant::now() >= end {
            return Err(NfsClientError::Transport(format!(
                "no reply within {:.1}s",
                timeout.as_secs_f64()
            )));
        }
    }
}

/// An outcome that carries an RPC reply, or the error that ended the call.
pub(crate) fn settled(o: Outcome) -> Result<Outcome> {
    match o.status {
        CallStatus::Success | CallStatus::RpcError(_) => Ok(o),
        CallStatus::Transport(e) => Err(NfsClientError::Transport(e.to_string())),
        CallStatus::Refused(e) => Err(NfsClientError::Transport(e.to_string())),
        CallStatus::Timeout => Err(NfsClientError::Transport("call timed out".into())),
    }
}

/// One ONC RPC call over TCP with record marking; the reply's results are handed to
/// `f`.
pub fn tcp_call<'a, A: XdrCodec<'a>, R>(
    to: SocketAddr,
    h: &CallHeader<'_>,
    args: &A,
    timeout: Duration,
    f: impl for<'r> FnOnce(&mut DdpCursor<'r>) -> core::result::Result<R, DdpDecodeError>,
) -> Result<R> {
    let mut s = TcpStream::connect_timeout(&to, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    let mut buf = vec![0u8; 4096];
    let c = encode_call(&mut buf, h, args, usize::MAX)
        .map_err(|e| NfsClientError::Transport(e.to_string()))?;
    write_record(&mut s, &buf[..c.len])?;
    s.flush()?;
    let mut reply = Vec::new();
    if !read_record(&mut s, 1 << 20, &mut reply)? {
        return Err(NfsClientError::Transport(format!(
            "{to} closed the connection"
        )));
    }
    let (_, mut cur) = reply_results(&reply, &[]).map_err(NfsClientError::Rpc)?;
    let r = f(&mut cur)?;
    cur.finish()?;
    Ok(r)
}

/// Asks the portmapper (PMAP version 2 GETPORT over TCP, port 111 of `host`) for the
/// TCP port of `prog`/`vers`.
pub fn getport(host: IpAddr, prog: u32, vers: u32, timeout: Duration) -> Result<u16> {
    struct Mapping(u32, u32);
    impl<'d> XdrCodec<'d> for Mapping {
        fn encode(
            &self,
            e: &mut crate::ddp::DdpEncoder<'_, 'd>,
        ) -> core::result::Result<(), crate::ddp::DdpEncodeError> {
            e.u32(self.0)?;
            e.u32(self.1)?;
            e.u32(6)?; // IPPROTO_TCP
            e.u32(0)
        }
        fn decode(c: &mut DdpCursor<'d>) -> core::result::Result<Self, DdpDecodeError> {
            Ok(Mapping(c.u32()?, c.u32()?))
        }
    }
    let h = header(100_000, 2, 3, 0x6765_7470);
    let pmap = SocketAddr::new(host, 111);
    let port = tcp_call(pmap, &h, &Mapping(prog, vers), timeout, |c| c.u32()).map_err(|e| {
        NfsClientError::Transport(format!(
            "asking the portmapper at {pmap} for program {prog} version {vers}: {e} (give \
             the port instead, e.g. --mount-port 20048)"
        ))
    })?;
    match u16::try_from(port) {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(NfsClientError::Transport(format!(
            "the portmapper on {host} knows no TCP port for program {prog} version {vers}"
        ))),
    }
}

/// MOUNT v3 MNT of `path` at `mountd`: the export's root handle.
pub fn mount(mountd: SocketAddr, path: &str, timeout: Duration) -> Result<Vec<u8>> {
    let h = header(MOUNT_PROGRAM, MOUNT_V3, mount::procs::MNT, 0x6d6e_7433);
    let res = tcp_call(mountd, &h, &DirPath(path.as_bytes()), timeout, |c| {
        Ok(match MountRes3::decode(c)? {
            MountRes3::Ok { fhandle, .. } => Ok(fhandle.to_vec()),
            MountRes3::Fail(s) => Err(s),
        })
    })?;
    res.map_err(NfsClientError::Mount)
}

/// Opens an RPC-over-RDMA connection to `addr` and waits, up to `timeout`, until it is
/// established, connecting again while a connect is refused ([`establish_retrying`]).
pub(crate) fn establish<P: Provider>(
    dev: &P::Device,
    addr: &P::Addr,
    cfg: &ConnConfig,
    timeout: Duration,
) -> Result<Requester<P>> {
    establish_retrying(|| Requester::<P>::connect_with(dev, addr, cfg), timeout)
}

/// The first wait before a refused connect is made again; it doubles per attempt up to
/// [`CONNECT_RETRY_MAX`].
const CONNECT_RETRY_FIRST: Duration = Duration::from_millis(50);
/// The longest wait between two connect attempts.
const CONNECT_RETRY_MAX: Duration = Duration::from_secs(1);

/// Makes a connection with `open` and polls it until it is established, for at most
/// `timeout` in all. A connection that closes before it is handed back (the peer
/// rejected the connect request, nobody answered it, or the peer closed it at once) is
/// made again after a backoff of 50 ms doubling to 1 s while time remains, as the Linux
/// client reconnects: a server still tearing down this client's previous connection may
/// refuse the next one for a moment. No call has been sent on such a connection, so
/// trying again cannot run anything twice. The error names the last close reason and
/// the attempts made.
pub(crate) fn establish_retrying<P: Provider, B: ResponderRole>(
    mut open: impl FnMut() -> core::result::Result<Requester<P, B>, rpcrdma::ConnError>,
    timeout: Duration,
) -> Result<Requester<P, B>> {
    let start = Instant::now();
    let end = start + timeout;
    let mut backoff = CONNECT_RETRY_FIRST;
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let conn = open().map_err(|e| NfsClientError::Connect(e.to_string()))?;
        let reason = match wait_established(conn, end)? {
            Ok(conn) => return Ok(conn),
            Err(reason) => reason,
        };
        if Instant::now() + backoff >= end {
            let why = reason.map_or_else(|| "closed".to_string(), |r| r.to_string());
            return Err(NfsClientError::Connect(format!(
                "{why} ({attempts} attempt(s) in {:.1}s)",
                start.elapsed().as_secs_f64()
            )));
        }
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(CONNECT_RETRY_MAX);
    }
}

/// Polls a connection being made until it is established (`Ok(Ok(conn))`) or closes
/// (`Ok(Err(reason))`, the reason if the engine gave one), or until `end` (an error
/// naming the wait).
pub(crate) fn wait_established<P: Provider, B: ResponderRole>(
    mut conn: Requester<P, B>,
    end: Instant,
) -> Result<core::result::Result<Requester<P, B>, Option<rpcrdma::CloseReason>>> {
    let start = Instant::now();
    loop {
        conn.poll(Instant::now());
        match conn.state() {
            ConnState::Established => return Ok(Ok(conn)),
            ConnState::Connecting if Instant::now() < end => std::thread::yield_now(),
            ConnState::Connecting => {
                return Err(NfsClientError::Connect(format!(
                    "no answer within {:.1}s",
                    start.elapsed().as_secs_f64()
                )))
            }
            ConnState::Draining | ConnState::Closed => return Ok(Err(conn.close_reason())),
        }
    }
}

/// One directory entry from [`Nfs3Client::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// Name.
    pub name: Vec<u8>,
    /// Attributes, if the server returned them.
    pub attr: Option<Fattr3>,
    /// Handle, if the server returned it.
    pub handle: Option<Vec<u8>>,
}

/// An NFSv3 client on one RPC-over-RDMA connection. Calls are made one at a time.
pub struct Nfs3Client<P: Provider> {
    conn: Requester<P>,
    timeout: Duration,
    root: Vec<u8>,
    rsize: u32,
    wsize: u32,
    /// The XID of the latest call. The client keeps its own XIDs (a server's duplicate
    /// request cache keys on them): counted up from a random start, so a restarted
    /// client does not collide with its predecessor's entries.
    xid: u32,
    /// Reply room offered to idempotent procedures on the first try; `None`: the RFC
    /// 8267 bound.
    reply_guess: Option<u32>,
    /// Calls resent with the full bound after the server refused the guess.
    reply_retries: u64,
}

/// Procedures whose second execution is harmless, so a call refused because its reply
/// did not fit the room offered may be resent (RFC 1813 semantics).
const IDEMPOTENT: [u32; 9] = [
    procs::GETATTR,
    procs::LOOKUP,
    procs::ACCESS,
    procs::READLINK,
    procs::READDIR,
    procs::READDIRPLUS,
    procs::FSSTAT,
    procs::FSINFO,
    procs::PATHCONF,
];

impl<P: Provider> fmt::Debug for Nfs3Client<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Nfs3Client")
            .field("rsize", &self.rsize)
            .field("wsize", &self.wsize)
            .finish()
    }
}

fn status<T>(r: super::v3::res::NfsRes<T, impl Sized>) -> Result<T> {
    r.ok().map_err(NfsClientError::Nfs)
}

impl<P: Provider> Nfs3Client<P> {
    /// Connects to the NFS server at `addr` and asks FSINFO of `root` (the handle from
    /// [`mount()`]) for its transfer sizes, which are capped at the connection's large
    /// buffer size (one chunk per READ or WRITE). The connection reconnects and sends
    /// lost calls again under their XIDs (`ConnConfig::reconnect`, with
    /// `server_has_drc`) unless `cfg` sets its own policy.
    pub fn connect(
        dev: &P::Device,
        addr: &P::Addr,
        cfg: &ConnConfig,
        root: Vec<u8>,
        timeout: Duration,
    ) -> Result<Self> {
        // Reconnect and retransmit unless the configuration says how: NFS servers keep
        // a duplicate request cache (Linux nfsd, and ours: `NfsConfig::reply_cache`), so
        // every lost call is sent again under its XID. `max_sends: 1` turns it off.
        let mut cfg = cfg.clone();
        cfg.reconnect = cfg.reconnect.or(Some(Reconnect {
            server_has_drc: true,
            ..Reconnect::default()
        }));
        let cfg = &cfg;
        let conn = establish::<P>(dev, addr, cfg, timeout)?;
        let mut c = Nfs3Client {
            conn,
            timeout,
            root,
            rsize: 4096,
            wsize: 4096,
            xid: random_xid(),
            reply_guess: None,
            reply_retries: 0,
        };
        let cap = cfg.large_buf_size & !4095;
        let root = c.root.clone();
        let o = c.plain(procs::FSINFO, &NfsFh3(&root), 0)?;
        let info = Self::results(&o, |cur| {
            FsinfoRes::decode(cur).map(|r| r.ok().map(|i| (i.rtmax, i.wtmax)))
        })?;
        let (rtmax, wtmax) = info.map_err(NfsClientError::Nfs)?;
        c.rsize = rtmax.min(cap).max(512);
        c.wsize = wtmax.min(cap).max(512);
        Ok(c)
    }

    /// The export's root handle.
    pub fn root(&self) -> &[u8] {
        &self.root
    }

    /// READ and WRITE transfer sizes in use.
    pub fn transfer_sizes(&self) -> (u32, u32) {
        (self.rsize, self.wsize)
    }

    /// The XID of the latest call.
    pub fn last_xid(&self) -> u32 {
        self.xid
    }

    /// What reconnection did so far: connections remade, calls sent again.
    pub fn reconnect_stats(&self) -> Option<rpcrdma::ReconnectStats> {
        self.conn.reconnect_stats()
    }

    /// Offers idempotent calls (GETATTR, LOOKUP, READDIR, READDIRPLUS, ...) at most
    /// `octets` of reply room on the first try, instead of the RFC 8267 bound for their
    /// arguments: a READDIRPLUS of a small directory then needs no Reply chunk, so
    /// nothing is registered for it. A reply that does not fit is answered by the
    /// server with ERR_CHUNK (RFC 8166 §3.5.4: it ran the procedure but cannot return
    /// the result) and the call goes again once, with the full bound and a new XID;
    /// running an idempotent procedure twice is harmless. `None` (the default) always
    /// offers the bound.
    pub fn set_reply_guess(&mut self, octets: Option<u32>) {
        self.reply_guess = octets;
    }

    /// Calls resent with a larger reply room after the server refused the first.
    pub fn reply_retries(&self) -> u64 {
        self.reply_retries
    }

    fn run(&mut self, req: CallRequest) -> Result<Outcome> {
        settled(self.run_any(req)?)
    }

    /// Runs one call to its outcome, whatever the outcome says.
    fn run_any(&mut self, mut req: CallRequest) -> Result<Outcome> {
        // Whether the call may run twice (it is sent again after a reconnect only then,
        // unless the server keeps a reply cache): the procedure's declaration, read
        // from the call header's procedure word.
        let procedure = req
            .msg
            .as_slice()
            .get(20..24)
            .map_or(u32::MAX, |w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
        let info = v3::proc_info(procedure);
        req.idempotent = info.is_some_and(|i| i.idempotent);
        req.prefers_read_chunk_reply = info.is_some_and(|i| i.prefers_read_chunk_reply());
        submit_next(&mut self.conn, &mut self.xid, req, 0)?;
        wait_outcome(&mut self.conn, self.timeout)
    }

    fn max_reply(procedure: u32, requested: u32, write_chunk: bool) -> u32 {
        v3::proc_info(procedure).map_or(0, |i| {
            i.max_reply_len(requested, write_chunk, 0)
                .min(u64::from(u32::MAX)) as u32
        })
    }

    /// A call with inline arguments and no Write chunk.
    fn plain<'a, A: XdrCodec<'a>>(
        &mut self,
        procedure: u32,
        args: &A,
        requested: u32,
    ) -> Result<Outcome> {
        let bound = Self::max_reply(procedure, requested, false);
        let first = match self.reply_guess {
            Some(g) if IDEMPOTENT.contains(&procedure) => bound.min(g),
            _ => bound,
        };
        let req = self.inline_request(procedure, args, first)?;
        let o = self.run_any(req)?;
        let refused = o.status == CallStatus::Transport(TransportError::Rdma(RdmaError::Chunk));
        if first < bound && refused {
            // The reply did not fit the guess: once more with room for the largest
            // reply the arguments allow, under a new XID (the refused one is answered).
            drop(o);
            self.reply_retries += 1;
            let req = self.inline_request(procedure, args, bound)?;
            return self.run(req);
        }
        settled(o)
    }

    fn inline_request<'a, A: XdrCodec<'a>>(
        &mut self,
        procedure: u32,
        args: &A,
        max_reply: u32,
    ) -> Result<CallRequest> {
        let msg = self
            .conn
            .alloc_msg()
            .map_err(|e| NfsClientError::Transport(e.to_string()))?;
        inline_call(msg, &header(NFS_PROGRAM, 3, procedure, 0), args, max_reply)
            .map_err(|e| NfsClientError::Transport(e.to_string()))
    }

    fn results<R>(
        o: &Outcome,
        f: impl for<'r> FnOnce(&mut DdpCursor<'r>) -> core::result::Result<R, DdpDecodeError>,
    ) -> Result<R> {
        let r = OutcomeResults::new(o);
        let (_, mut c) = r.cursor().map_err(NfsClientError::Rpc)?;
        let v = f(&mut c)?;
        c.finish()?;
        Ok(v)
    }

    /// GETATTR.
    // The closure is needed: `decode` alone is not general over the cursor's lifetime.
    #[allow(clippy::redundant_closure)]
    pub fn getattr(&mut self, fh: &[u8]) -> Result<Fattr3> {
        let o = self.plain(procs::GETATTR, &NfsFh3(fh), 0)?;
        status(Self::results(&o, |c| GetattrRes::decode(c))?)
    }

    /// LOOKUP of one name.
    pub fn lookup(&mut self, dir: &[u8], name: &[u8]) -> Result<Vec<u8>> {
        let o = self.plain(
            procs::LOOKUP,
            &DirOpArgs3 {
                dir: NfsFh3(dir),
                name,
            },
            0,
        )?;
        let r = Self::results(&o, |c| {
            LookupRes::decode(c).map(|r| r.ok().map(|ok| ok.object.0.to_vec()))
        })?;
        r.map_err(NfsClientError::Nfs)
    }

    /// The handle of `path`, relative to the export root (`/` or empty: the root).
    pub fn lookup_path(&mut self, path: &str) -> Result<Vec<u8>> {
        let mut fh = self.root.clone();
        for comp in path.split('/').filter(|c| !c.is_empty() && *c != ".") {
            fh = self.lookup(&fh, comp.as_bytes())?;
        }
        Ok(fh)
    }

    /// The whole listing of a directory, through READDIRPLUS pages.
    pub fn list(&mut self, dir: &[u8]) -> Result<Vec<Listed>> {
        let mut out = Vec::new();
        let (mut cookie, mut verf) = (0u64, Verf::default());
        // Pages of at most 32 KiB, which a Reply chunk carries.
        let maxcount = 32 * 1024;
        loop {
            let o = self.plain(
                procs::READDIRPLUS,
                &ReaddirplusArgs {
                    dir: NfsFh3(dir),
                    cookie,
                    cookieverf: verf,
                    dircount: maxcount / 4,
                    maxcount,
                },
                maxcount,
            )?;
            let page = Self::results(&o, |c| {
                ReaddirplusRes::decode(c).map(|r| {
                    r.ok().map(|ok| {
                        let last = ok.entries.last().map(|e| e.cookie);
                        let items: Vec<Listed> = ok
                            .entries
                            .iter()
                            .map(|e| Listed {
                                name: e.name.to_vec(),
                                attr: e.name_attributes,
                                handle: e.name_handle.map(|h| h.0.to_vec()),
                            })
                            .collect();
                        (items, last, ok.cookieverf, ok.eof)
                    })
                })
            })?;
            let (items, last, v, eof) = page.map_err(NfsClientError::Nfs)?;
            let empty = items.is_empty();
            out.extend(items);
            if eof {
                return Ok(out);
            }
            if empty {
                return Err(NfsClientError::Transport(
                    "the server returned an empty READDIRPLUS page before the end".into(),
                ));
            }
            cookie = last.unwrap_or(cookie);
            verf = v;
        }
    }

    fn read_request(&mut self, fh: &[u8], offset: u64, count: u32) -> Result<CallRequest> {
        let count = count.min(self.rsize);
        let msg = self
            .conn
            .alloc_msg()
            .map_err(|e| NfsClientError::Transport(e.to_string()))?;
        let mut req = inline_call(
            msg,
            &header(NFS_PROGRAM, 3, procs::READ, 0),
            &ReadArgs {
                file: NfsFh3(fh),
                offset,
                count,
            },
            Self::max_reply(procs::READ, count, true),
        )
        .map_err(|e| NfsClientError::Transport(e.to_string()))?;
        let sink = self
            .conn
            .alloc_large()
            .map_err(|e| NfsClientError::Transport(e.to_string()))?;
        req.push_write_sink(sink)
            .map_err(|_| NfsClientError::Transport("write sink list full".into()))?;
        Ok(req)
    }

    /// READ of up to `count` octets (at most the read size) into a Write chunk; returns
    /// the data and whether it reached the end of the file.
    pub fn read(&mut self, fh: &[u8], offset: u64, count: u32) -> Result<(Vec<u8>, bool)> {
        let req = self.read_request(fh, offset, count)?;
        let o = self.run(req)?;
        let r = Self::results(&o, |c| {
            ReadRes::decode(c).map(|r| r.ok().map(|ok| (ok.data.to_vec(), ok.eof)))
        })?;
        r.map_err(NfsClientError::Nfs)
    }

    fn write_request(
        &mut self,
        fh: &[u8],
        offset: u64,
        data: &[u8],
        stable: StableHow,
    ) -> Result<CallRequest> {
        let data = &data[..data.len().min(self.wsize as usize)];
        let mut bufs = DdpBufs::new();
        let mut b = self
            .conn
            .alloc_large()
            .map_err(|e| NfsClientError::Transport(e.to_string()))?;
        b.fill(data)
            .map_err(|e| NfsClientError::Transport(e.to_string()))?;
        bufs.push(b)
            .map_err(|_| NfsClientError::Transport("DDP buffer list full".into()))?;
        let mut msg = self
            .conn
            .alloc_msg()
            .map_err(|e| NfsClientError::Transport(e.to_string()))?;
        let h = header(NFS_PROGRAM, 3, procs::WRITE, 0);
        let plan = {
            let chunk = bufs.get(0).map(|b| b.as_slice()).unwrap_or(&[]);
            let args = WriteArgs {
                file: NfsFh3(fh),
                offset,
                count: chunk.len() as u32,
                stable,
                data: chunk,
            };
            // Small writes stay inline; anything over 1 KiB goes in a Read chunk.
            let call = encode_call(msg.storage_mut(), &h, &args, 1024)
                .map_err(|e| NfsClientError::Transport(e.to_string()))?;
            CallPlan::new(&call, &bufs).map_err(|e| NfsClientError::Transport(e.to_string()))?
        };
        plan.into_request(msg, bufs, Self::max_reply(procs::WRITE, 0, false))
            .map_err(|e| NfsClientError::Transport(e.to_string()))
    }

    /// WRITE of `data` (at most the write size) from a Read chunk; returns the octets
    /// the server took and its write verifier.
    pub fn write(
        &mut self,
        fh: &[u8],
        offset: u64,
        data: &[u8],
        stable: StableHow,
    ) -> Result<(u32, Verf)> {
        let req = self.write_request(fh, offset, data, stable)?;
        let o = self.run(req)?;
        let r = Self::results(&o, |c| {
            WriteRes::decode(c).map(|r| r.ok().map(|ok| (ok.count, ok.verf)))
        })?;
        r.map_err(NfsClientError::Nfs)
    }

    /// Starts a READ (`data` empty) or an UNSTABLE WRITE of `data` without waiting for
    /// it, tagged `tag`; [`poll_done`](Self::poll_done) reports it. For pipelined
    /// workloads (up to the connection's credits at once).
    pub fn start(&mut self, fh: &[u8], offset: u64, len: u32, data: &[u8], tag: u64) -> Result<()> {
        let req = if data.is_empty() {
            self.read_request(fh, offset, len)?
        } else {
            self.write_request(fh, offset, data, StableHow::Unstable)?
        };
        submit_next(&mut self.conn, &mut self.xid, req, tag)
    }

    /// Polls the connection once; a finished [`start`](Self::start)ed call comes back
    /// with its tag and the octets read or written.
    pub fn poll_done(&mut self) -> Option<(u64, Result<u32>)> {
        self.conn.poll(Instant::now());
        let o = self.conn.poll_outcome()?;
        let r = match o.status {
            CallStatus::Success | CallStatus::RpcError(_) => Self::results(&o, |c| {
                // READ3res and WRITE3res both start with the status; tell them apart by
                // whether a Write chunk was offered.
                if o.write_sinks.is_empty() {
                    WriteRes::decode(c).map(|r| r.ok().map(|ok| ok.count))
                } else {
                    ReadRes::decode(c).map(|r| r.ok().map(|ok| ok.count))
                }
            })
            .and_then(|r| r.map_err(NfsClientError::Nfs)),
            other => Err(NfsClientError::Transport(format!("{other:?}"))),
        };
        Some((o.tag, r))
    }

    /// CREATE (UNCHECKED, truncating an existing file) of `name` in `dir`.
    pub fn create(&mut self, dir: &[u8], name: &[u8], mode: u32) -> Result<Vec<u8>> {
        let o = self.plain(
            procs::CREATE,
            &CreateArgs {
                place: DirOpArgs3 {
                    dir: NfsFh3(dir),
                    name,
                },
                how: CreateHow3::Unchecked(Sattr3 {
                    mode: Some(mode),
                    size: Some(0),
                    ..Sattr3::default()
                }),
            },
            0,
        )?;
        let r = Self::results(&o, |c| {
            CreateRes::decode(c).map(|r| r.ok().map(|ok| ok.obj.map(|h| h.0.to_vec())))
        })?;
        match r.map_err(NfsClientError::Nfs)? {
            Some(fh) => Ok(fh),
            // The server may leave the handle out; LOOKUP finds it.
            None => self.lookup(dir, name),
        }
    }

    /// COMMIT of the whole file; returns the write verifier.
    pub fn commit(&mut self, fh: &[u8]) -> Result<Verf> {
        let o = self.plain(
            procs::COMMIT,
            &CommitArgs {
                file: NfsFh3(fh),
                offset: 0,
                count: 0,
            },
            0,
        )?;
        let r = Self::results(&o, |c| {
            CommitRes::decode(c).map(|r| r.ok().map(|ok| ok.verf))
        })?;
        r.map_err(NfsClientError::Nfs)
    }

    /// Reads a whole file into `out`; returns its length.
    pub fn get(&mut self, fh: &[u8], out: &mut impl io::Write) -> Result<u64> {
        let mut offset = 0u64;
        loop {
            let (data, eof) = self.read(fh, offset, self.rsize)?;
            out.write_all(&data)?;
            offset += data.len() as u64;
            if eof {
                return Ok(offset);
            }
            if data.is_empty() {
                return Err(NfsClientError::Transport(
                    "the server returned no data before the end of the file".into(),
                ));
            }
        }
    }

    /// Writes `data` as the whole content of `name` in `dir` (created or truncated):
    /// UNSTABLE WRITEs, then COMMIT. A write verifier that changes on the way means the
    /// server lost unstable data (it restarted), and the file is written again, once.
    pub fn put(&mut self, dir: &[u8], name: &[u8], data: &[u8]) -> Result<Vec<u8>> {
        let fh = self.create(dir, name, 0o644)?;
        for _attempt in 0..2 {
            let mut verf = None;
            let mut changed = false;
            let mut offset = 0usize;
            while offset < data.len() {
                let (n, v) =
                    self.write(&fh, offset as u64, &data[offset..], StableHow::Unstable)?;
                if n == 0 {
                    return Err(NfsClientError::Transport("the server wrote nothing".into()));
                }
                changed |= verf.is_some_and(|w| w != v);
                verf = Some(v);
                offset += n as usize;
            }
            let c = self.commit(&fh)?;
            if !changed && verf.is_none_or(|v| v == c) {
                return Ok(fh);
            }
        }
        Err(NfsClientError::Transport(
            "the server's write verifier kept changing (it restarts?)".into(),
        ))
    }
}
