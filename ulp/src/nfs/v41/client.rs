//! A blocking NFSv4.1 client over the engine ([`Nfs41Client`]).
//!
//! Setup (RFC 8881 §18.35, §18.36, §18.51): EXCHANGE_ID with a client owner unique to
//! this process, CREATE_SESSION with a backchannel on the same connection
//! (CONN_BACK_CHAN; RFC 8167 carries the server's callbacks, answered by
//! [`CallbackService`]: CB_NULL, and CB_SEQUENCE + CB_RECALL with NFS4ERR_BADHANDLE since
//! OPEN asks for no delegation), then RECLAIM_COMPLETE. The connection cannot reconnect
//! (`ConnConfig::reconnect` is refused): the callback service lives in it. Every later COMPOUND starts with SEQUENCE on a slot of the session's
//! slot table, whose sequence id advances with each reply whose SEQUENCE succeeded.
//! NFS4ERR_DELAY and NFS4ERR_GRACE are retried with a bounded back-off.
//!
//! DDP per RFC 8267 §6: READ offers one Write chunk sized for the data (the only READ of
//! its COMPOUND, so it is the one the chunk pairs with, §6.4.1), WRITE sends its data in
//! a Read chunk at its XDR position, and the engine offers a Reply chunk when a reply may
//! exceed the inline threshold (READDIR).

use core::fmt;
use std::collections::HashMap;
use std::io;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rpcrdma::fabric::Provider;
use rpcrdma::wire::header::RdmaError;
use rpcrdma::ConnConfig;
use rpcrdma::{CallRequest, CallStatus, Outcome, TransportError};
use rpcrdma::{Requester, ResponderHalf};

use super::callback::{CallbackService, CallbackStats};
use super::compound::{
    ArgOp, CbSecParms, CompoundArgs, CompoundRes, CreateArgs, CreateHow, CreateSessionArgs,
    CreateType, ExchangeIdArgs, OpenArgs, OpenClaim, OpenDelegation, OpenHow, ReadArgs,
    ReaddirArgs, ResBody, ResOp, SequenceArgs, WriteArgs, OPEN4_SHARE_ACCESS_BOTH,
    OPEN4_SHARE_ACCESS_READ, OPEN4_SHARE_ACCESS_WANT_NO_DELEG, OPEN4_SHARE_DENY_NONE, UNSTABLE4,
};
use super::{attrs_request, Attrs, ChannelAttrs4, Fattr4, Nfsstat4, SessionId, Stateid4, Verifier};
use crate::client::{CallPlan, DdpBufs, OutcomeResults};
use crate::ddp::encode_call;
use crate::nfs::client::{
    establish_retrying, header, settled, submit_next, wait_outcome, NfsClientError,
};
use crate::nfs::v4::{ops, procs};
use crate::nfs::NFS_PROGRAM;

type Result<T> = core::result::Result<T, NfsClientError>;

/// The largest READ or WRITE this client issues (Linux nfsd's maximum).
pub const MAX_TRANSFER: u32 = 1 << 20;

/// Octets of a COMPOUND request or reply beyond READ or WRITE data that the fore channel
/// attributes leave room for (SEQUENCE, PUTFH, the operation and RPC headers).
pub const COMPOUND_OVERHEAD: u32 = 4096;

/// Inline reply bound of COMPOUNDs without large results.
const SMALL_REPLY: u32 = 2048;

/// READDIR page size.
const READDIR_MAXCOUNT: u32 = 32 * 1024;

/// Operations per COMPOUND this client asks for.
const MAX_OPERATIONS: u32 = 16;

/// Back-off of NFS4ERR_DELAY and NFS4ERR_GRACE retries: first wait, longest wait, and the
/// total time after which the error is returned.
const DELAY_FIRST: Duration = Duration::from_millis(50);
const DELAY_MAX: Duration = Duration::from_secs(1);
const DELAY_BUDGET: Duration = Duration::from_secs(60);

/// A file opened with OPEN: its handle and open stateid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenFile {
    /// The file handle.
    pub fh: Vec<u8>,
    /// The open stateid, for READ, WRITE and CLOSE.
    pub stateid: Stateid4,
    /// The read delegation OPEN gave with it, if any (only when the client wants them:
    /// [`Nfs41Client::set_want_delegations`]).
    pub delegation: Option<Stateid4>,
}

/// One directory entry from [`Nfs41Client::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed4 {
    /// Name.
    pub name: Vec<u8>,
    /// Attributes (those of [`attrs_request`] that the server returned).
    pub attrs: Attrs,
}

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    seqid: u32,
    busy: bool,
}

/// A started READ or WRITE ([`Nfs41Client::start`]): what it takes to send it again
/// after NFS4ERR_DELAY or NFS4ERR_GRACE.
#[derive(Debug, Clone)]
struct Pending {
    slot: usize,
    file: OpenFile,
    offset: u64,
    len: u32,
    /// WRITE data; empty for a READ.
    data: Vec<u8>,
    first: Instant,
    wait: Duration,
}

/// The callback program this client names in CREATE_SESSION (`csa_cb_program`; the
/// NFS4_CALLBACK program number of RFC 8881 §20, as the Linux client uses).
pub const CB_PROGRAM: u32 = 0x4000_0000;

/// An NFSv4.1 client on one RPC-over-RDMA connection and one session.
pub struct Nfs41Client<P: Provider> {
    conn: Requester<P, ResponderHalf<CallbackService>>,
    timeout: Duration,
    clientid: u64,
    sessionid: SessionId,
    slots: Vec<Slot>,
    maxops: u32,
    rsize: u32,
    wsize: u32,
    owner: Vec<u8>,
    root: Vec<u8>,
    pending: HashMap<u64, Pending>,
    fore: ChannelAttrs4,
    session_open: bool,
    /// The XID of the latest call: the client keeps its own (a server's duplicate
    /// request cache keys on them), counted up from a random start.
    xid: u32,
    /// COMPOUNDs resent with more reply room after the server could not fit the reply.
    reply_retries: u64,
    /// `ConnConfig::large_buf_size`: the largest reply room one call can offer.
    large_buf: u32,
    /// The server granted CONN_BACK_CHAN: its callbacks come on this connection.
    backchannel_granted: bool,
    /// OPEN leaves the delegation to the server instead of asking for none.
    want_delegations: bool,
    /// Delegations returned with DELEGRETURN after a recall.
    returned: u64,
    /// A DELEGRETURN is being sent (recalls found meanwhile wait for the next turn).
    returning: bool,
}

impl<P: Provider> fmt::Debug for Nfs41Client<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Nfs41Client")
            .field("clientid", &self.clientid)
            .field("slots", &self.slots.len())
            .field("rsize", &self.rsize)
            .field("wsize", &self.wsize)
            .finish()
    }
}

fn transport(e: impl fmt::Display) -> NfsClientError {
    NfsClientError::Transport(e.to_string())
}

fn nfs4(op: u32, status: Nfsstat4) -> NfsClientError {
    NfsClientError::Nfs4 { op, status }
}

fn unexpected(what: &str) -> NfsClientError {
    NfsClientError::Transport(format!("unexpected COMPOUND result: {what}"))
}

/// The status of the last result, which a failed COMPOUND ends with.
fn failing(res: &CompoundRes<'_>) -> (u32, Nfsstat4) {
    match res.results.last() {
        Some(r) if !r.status.is_ok() => (r.op, r.status),
        Some(r) => (r.op, res.status),
        None => (ops::ILLEGAL, res.status),
    }
}

/// True for COMPOUNDs that only look things up and read attributes or directories,
/// which a server may run twice without harm.
fn read_only(ops: &[ArgOp<'_>]) -> bool {
    ops.iter().all(|op| {
        matches!(
            op,
            ArgOp::PutFh(_)
                | ArgOp::PutRootFh
                | ArgOp::Lookup(_)
                | ArgOp::GetFh
                | ArgOp::Getattr(_)
                | ArgOp::Readdir(_)
        )
    })
}

fn retryable(s: Nfsstat4) -> bool {
    s == Nfsstat4::DELAY || s == Nfsstat4::GRACE
}

impl<P: Provider> Nfs41Client<P> {
    /// Connects to the NFSv4.1 server at `addr` and sets up a client id and a session.
    /// The fore channel asks for `cfg.credits` slots and room for READs and WRITEs of
    /// the connection's large buffers (at most [`MAX_TRANSFER`]) plus headers, and for
    /// cached replies that fit the connection's inline receive threshold; the server's
    /// answer bounds both transfer sizes.
    pub fn connect(
        dev: &P::Device,
        addr: &P::Addr,
        cfg: &ConnConfig,
        timeout: Duration,
    ) -> Result<Self> {
        let conn = establish_retrying(
            || Requester::connect_serving(dev, addr, cfg, CallbackService::new(CB_PROGRAM)),
            timeout,
        )?;
        let thresholds = conn.thresholds();
        let transfer = (cfg.large_buf_size & !4095).clamp(4096, MAX_TRANSFER);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let owner = format!(
            "rpcrdma/{}/{}/{}",
            host.trim(),
            std::process::id(),
            now.as_nanos()
        )
        .into_bytes();
        let mut c = Nfs41Client {
            conn,
            timeout,
            clientid: 0,
            sessionid: [0; 16],
            slots: Vec::new(),
            maxops: MAX_OPERATIONS,
            rsize: transfer,
            wsize: transfer,
            owner,
            root: Vec::new(),
            pending: HashMap::new(),
            fore: ChannelAttrs4::default(),
            session_open: false,
            xid: crate::nfs::client::random_xid(),
            reply_retries: 0,
            large_buf: cfg.large_buf_size,
            backchannel_granted: false,
            want_delegations: false,
            returned: 0,
            returning: false,
        };
        let verifier = (now.as_nanos() as u64).to_be_bytes();
        let owner = c.owner.clone();
        let (clientid, sequence) = c.unsequenced(
            &[ArgOp::ExchangeId(ExchangeIdArgs {
                verifier,
                owner: &owner,
                flags: 0,
                impl_id: None,
            })],
            4096,
            |r| match r.first().map(|r| &r.body) {
                Some(ResBody::ExchangeId(x)) => Ok((x.clientid, x.sequenceid)),
                _ => Err(unexpected("no EXCHANGE_ID result")),
            },
        )?;
        c.clientid = clientid;
        let fore = ChannelAttrs4 {
            headerpadsize: 0,
            maxrequestsize: (transfer + COMPOUND_OVERHEAD).max(thresholds.send),
            maxresponsesize: (transfer + COMPOUND_OVERHEAD).max(thresholds.recv),
            maxresponsesize_cached: thresholds.recv,
            maxoperations: MAX_OPERATIONS,
            maxrequests: cfg.credits.max(1),
            rdma_ird: None,
        };
        // One backchannel slot (the callback service checks slot 0's sequence ids);
        // Linux nfsd checks the sizes against its CB_RECALL and two operations.
        let back = ChannelAttrs4 {
            headerpadsize: 0,
            maxrequestsize: 4096,
            maxresponsesize: 4096,
            maxresponsesize_cached: 0,
            maxoperations: 2,
            maxrequests: 1,
            rdma_ird: None,
        };
        let session = c
            .unsequenced(
                &[ArgOp::CreateSession(CreateSessionArgs {
                    clientid,
                    sequence,
                    // CREATE_SESSION4_FLAG_CONN_BACK_CHAN: callbacks come on this
                    // connection (RFC 8881 §18.36.3).
                    flags: 0x2,
                    fore,
                    back,
                    cb_program: CB_PROGRAM,
                    cb_sec: CbSecParms::AUTH_NONE,
                })],
                SMALL_REPLY,
                |r| match r.first().map(|r| &r.body) {
                    Some(ResBody::CreateSession(s)) => Ok(*s),
                    _ => Err(unexpected("no CREATE_SESSION result")),
                },
            )
            .inspect_err(|_| {
                // Best effort: the client id would otherwise live until its lease ends.
                let _ = c.unsequenced(&[ArgOp::DestroyClientid(clientid)], SMALL_REPLY, |_| Ok(()));
            })?;
        c.sessionid = session.sessionid;
        c.conn.service_mut().set_session(session.sessionid);
        c.backchannel_granted = session.flags & 0x2 != 0;
        c.session_open = true;
        c.fore = session.fore;
        let slots = session.fore.maxrequests.clamp(1, fore.maxrequests);
        c.slots = vec![
            Slot {
                seqid: 1,
                busy: false
            };
            slots as usize
        ];
        c.maxops = session.fore.maxoperations.clamp(2, MAX_OPERATIONS);
        let room = |max: u32| (max.saturating_sub(COMPOUND_OVERHEAD) & !4095).max(512);
        c.rsize = transfer.min(room(session.fore.maxresponsesize));
        c.wsize = transfer.min(room(session.fore.maxrequestsize));
        match c.compound(&[ArgOp::ReclaimComplete(false)], SMALL_REPLY, false, |_| {
            Ok(())
        }) {
            Ok(()) => {}
            Err(NfsClientError::Nfs4 { status, .. }) if status == Nfsstat4::COMPLETE_ALREADY => {}
            Err(e) => {
                // Best effort, as above: end the session and the client id.
                let _ = c.destroy();
                return Err(e);
            }
        }
        Ok(c)
    }

    /// What the callback service answered on the backchannel.
    pub fn callbacks(&self) -> CallbackStats {
        self.conn.service().stats()
    }

    /// Whether the server granted the backchannel on this connection (CREATE_SESSION's
    /// `csr_flags` has CONN_BACK_CHAN).
    pub fn backchannel_granted(&self) -> bool {
        self.backchannel_granted
    }

    /// The connection's backward direction as the transport saw it: calls received,
    /// answered inline, refused (ERR_VERS, ERR_CHUNK) or dropped.
    pub fn backchannel_transport(&self) -> rpcrdma::ResponderStats {
        self.conn.backchannel_stats()
    }

    /// Polls the connection for `how_long` without a call of its own: the backchannel
    /// is answered only while the connection is polled (during calls, or here).
    /// Delegations recalled meanwhile are returned.
    pub fn serve_callbacks(&mut self, how_long: Duration) {
        let end = Instant::now() + how_long;
        while Instant::now() < end {
            if self.conn.poll(Instant::now()) == 0 {
                std::thread::yield_now();
            }
            self.return_recalled();
        }
    }

    /// Whether OPEN for reading lets the server give a read delegation (RFC 8881
    /// §10.4: the client then answers its recall with NFS4_OK and returns it with
    /// DELEGRETURN). Off by default: OPEN asks for none (OPEN4_SHARE_ACCESS_WANT_NO_DELEG).
    pub fn set_want_delegations(&mut self, want: bool) {
        self.want_delegations = want;
    }

    /// Delegations returned after a recall so far.
    pub fn delegations_returned(&self) -> u64 {
        self.returned
    }

    /// Delegations held now (granted, not yet recalled or returned).
    pub fn delegations_held(&self) -> usize {
        self.conn.service().held().count()
    }

    /// DELEGRETURN (RFC 8881 §18.6) of `stateid` on file `fh`.
    pub fn delegreturn(&mut self, fh: &[u8], stateid: Stateid4) -> Result<()> {
        let r = self.ops(&[ArgOp::PutFh(fh), ArgOp::Delegreturn(stateid)]);
        // Returned, or no longer the server's to take back: either way not held.
        self.conn.service_mut().forget(&stateid);
        r
    }

    /// Returns what the server recalled (called after every poll of the connection).
    fn return_recalled(&mut self) {
        if self.returning || !self.session_open {
            return;
        }
        let recalled = self.conn.service_mut().take_recalled();
        if recalled.is_empty() {
            return;
        }
        self.returning = true;
        for (stateid, fh) in recalled {
            if self.delegreturn(&fh, stateid).is_ok() {
                self.returned += 1;
            }
        }
        self.returning = false;
    }

    /// The client id from EXCHANGE_ID.
    pub fn clientid(&self) -> u64 {
        self.clientid
    }

    /// The fore channel attributes the server granted.
    pub fn fore_channel(&self) -> ChannelAttrs4 {
        self.fore
    }

    /// Slots in the session's slot table: the most calls in flight.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// READ and WRITE transfer sizes in use.
    pub fn transfer_sizes(&self) -> (u32, u32) {
        (self.rsize, self.wsize)
    }

    /// Looks `export` up from the server's pseudo-root, component by component, and makes
    /// it the root of later relative paths.
    pub fn set_export(&mut self, export: &str) -> Result<Vec<u8>> {
        self.root.clear();
        self.root = self.lookup_path(export)?;
        Ok(self.root.clone())
    }

    /// The handle of the export root (the pseudo-root until [`set_export`](Self::set_export)).
    pub fn root(&self) -> &[u8] {
        &self.root
    }

    /// The XID of the latest call.
    pub fn last_xid(&self) -> u32 {
        self.xid
    }

    /// Submits `req` under the client's next XID.
    fn submit(&mut self, req: CallRequest, tag: u64) -> Result<()> {
        submit_next(&mut self.conn, &mut self.xid, req, tag)
    }

    /// COMPOUNDs resent with more reply room after the server answered ERR_CHUNK
    /// because the reply did not fit the room first offered.
    pub fn reply_retries(&self) -> u64 {
        self.reply_retries
    }

    /// The most reply room a COMPOUND can be offered: what the session's fore channel
    /// allows, within one large buffer.
    fn reply_cap(&self) -> u32 {
        self.fore.maxresponsesize.min(self.large_buf)
    }

    fn run(&mut self, req: CallRequest, tag: u64) -> Result<Outcome> {
        settled(self.run_any(req, tag)?)
    }

    /// Runs one call to its outcome, whatever the outcome says.
    fn run_any(&mut self, req: CallRequest, tag: u64) -> Result<Outcome> {
        self.submit(req, tag)?;
        wait_outcome(&mut self.conn, self.timeout)
    }

    /// Builds a COMPOUND request. A WRITE's data is copied into a registered buffer and
    /// sent in a Read chunk when it is 1 KiB or more; `read_sink` offers one Write chunk.
    fn build(&mut self, ops: &[ArgOp<'_>], read_sink: bool, max_reply: u32) -> Result<CallRequest> {
        let mut bufs = DdpBufs::new();
        if let Some(data) = ops.iter().find_map(|o| match o {
            ArgOp::Write(w) => Some(w.data),
            _ => None,
        }) {
            let mut b = self.conn.alloc_large().map_err(transport)?;
            b.fill(data).map_err(transport)?;
            bufs.push(b)
                .map_err(|_| NfsClientError::Transport("DDP buffer list full".into()))?;
        }
        let mut msg = self.conn.alloc_msg().map_err(transport)?;
        let h = header(NFS_PROGRAM, 4, procs::COMPOUND, 0);
        let plan = {
            let chunk = bufs.get(0).map(|b| b.as_slice()).unwrap_or(&[]);
            let args = CompoundArgs {
                tag: b"",
                minorversion: super::MINOR_VERSION,
                ops: ops
                    .iter()
                    .map(|o| match o {
                        ArgOp::Write(w) => ArgOp::Write(WriteArgs { data: chunk, ..*w }),
                        o => o.clone(),
                    })
                    .collect(),
            };
            let call = encode_call(msg.storage_mut(), &h, &args, 1024).map_err(transport)?;
            CallPlan::new(&call, &bufs).map_err(transport)?
        };
        let mut req = plan
            .into_request(msg, bufs, max_reply)
            .map_err(transport)?
            .prefer_read_chunk_reply(crate::nfs::v4::COMPOUND.prefers_read_chunk_reply());
        if read_sink {
            let sink = self.conn.alloc_large().map_err(transport)?;
            req.push_write_sink(sink)
                .map_err(|_| NfsClientError::Transport("write sink list full".into()))?;
        }
        Ok(req)
    }

    fn decode<R>(o: &Outcome, f: impl FnOnce(&CompoundRes<'_>) -> Result<R>) -> Result<R> {
        let r = OutcomeResults::new(o);
        let (_, mut c) = r.cursor().map_err(NfsClientError::Rpc)?;
        let res = <CompoundRes<'_> as crate::ddp::XdrCodec<'_>>::decode(&mut c)?;
        c.finish()?;
        f(&res)
    }

    /// A COMPOUND without SEQUENCE (EXCHANGE_ID, CREATE_SESSION, DESTROY_*), retried on
    /// NFS4ERR_DELAY; `f` gets the results when all succeeded.
    fn unsequenced<R>(
        &mut self,
        ops: &[ArgOp<'_>],
        max_reply: u32,
        f: impl FnOnce(&[ResOp<'_>]) -> Result<R>,
    ) -> Result<R> {
        let start = Instant::now();
        let mut wait = DELAY_FIRST;
        loop {
            let req = self.build(ops, false, max_reply)?;
            let o = self.run(req, 0)?;
            let r = Self::decode(&o, |res| {
                if res.status.is_ok() {
                    return Ok(Ok(()));
                }
                Ok(Err(failing(res)))
            })?;
            match r {
                Ok(()) => return Self::decode(&o, |res| f(&res.results)),
                Err((_, s)) if retryable(s) && start.elapsed() < DELAY_BUDGET => {
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(DELAY_MAX);
                }
                Err((op, s)) => return Err(nfs4(op, s)),
            }
        }
    }

    fn free_slot(&self) -> Option<usize> {
        self.slots.iter().position(|s| !s.busy)
    }

    fn sequence(&self, slot: usize) -> ArgOp<'static> {
        ArgOp::Sequence(SequenceArgs {
            sessionid: self.sessionid,
            sequenceid: self.slots[slot].seqid,
            slotid: slot as u32,
            highest_slotid: self.slots.len() as u32 - 1,
            cachethis: false,
        })
    }

    /// Applies a reply's SEQUENCE result to `slot`: the sequence id advances when
    /// SEQUENCE succeeded. Returns the COMPOUND's failure, if any.
    fn settle(&mut self, slot: usize, res: &CompoundRes<'_>) -> Result<Option<(u32, Nfsstat4)>> {
        let first = res
            .results
            .first()
            .ok_or_else(|| unexpected("no SEQUENCE result"))?;
        if first.op != ops::SEQUENCE {
            return Err(unexpected("first result is not SEQUENCE"));
        }
        if first.status.is_ok() {
            self.slots[slot].seqid = self.slots[slot].seqid.wrapping_add(1);
        }
        Ok((!res.status.is_ok()).then(|| failing(res)))
    }

    /// A COMPOUND of SEQUENCE then `ops` on a free slot, retried on NFS4ERR_DELAY and
    /// NFS4ERR_GRACE within a bounded time; `f` gets the results after SEQUENCE when all
    /// succeeded.
    fn compound<R>(
        &mut self,
        ops: &[ArgOp<'_>],
        max_reply: u32,
        read_sink: bool,
        f: impl FnOnce(&[ResOp<'_>]) -> Result<R>,
    ) -> Result<R> {
        let r = self.compound_once(ops, max_reply, read_sink, f);
        // Recalls answered while this COMPOUND was polled are returned now.
        self.return_recalled();
        r
    }

    fn compound_once<R>(
        &mut self,
        ops: &[ArgOp<'_>],
        max_reply: u32,
        read_sink: bool,
        f: impl FnOnce(&[ResOp<'_>]) -> Result<R>,
    ) -> Result<R> {
        let start = Instant::now();
        let mut wait = DELAY_FIRST;
        let mut room = max_reply;
        // After a resend with more room: the slot whose sequence id was advanced for it.
        let mut resent_on: Option<usize> = None;
        loop {
            let slot = match resent_on {
                Some(s) => s,
                None => self
                    .free_slot()
                    .ok_or_else(|| NfsClientError::Transport("no free session slot".into()))?,
            };
            let mut all = Vec::with_capacity(ops.len() + 1);
            all.push(self.sequence(slot));
            all.extend(ops.iter().cloned());
            let req = self.build(&all, read_sink, room)?;
            self.slots[slot].busy = true;
            let o = self.run_any(req, 0);
            self.slots[slot].busy = false;
            let o = o?;
            let chunk_refused =
                o.status == CallStatus::Transport(TransportError::Rdma(RdmaError::Chunk));
            if chunk_refused && resent_on.is_none() && read_only(ops) && room < self.reply_cap() {
                // The reply did not fit the room offered (RFC 8166 §3.5.4). The server
                // ran the COMPOUND, so its slot moved on: resend it, harmless as it only
                // reads, as the slot's next request with room for the largest reply the
                // session allows (a new XID, as every call gets).
                drop(o);
                self.reply_retries += 1;
                self.slots[slot].seqid = self.slots[slot].seqid.wrapping_add(1);
                room = self.reply_cap();
                resent_on = Some(slot);
                continue;
            }
            let o = settled(o)?;
            let failed = Self::decode(&o, |res| self.settle(slot, res))?;
            if let (Some(s), Some((_, Nfsstat4::SEQ_MISORDERED))) = (resent_on, failed) {
                // The refused COMPOUND never ran after all (the chunk error came before
                // it): its sequence id is still the slot's next.
                self.slots[s].seqid = self.slots[s].seqid.wrapping_sub(1);
                resent_on = None;
                continue;
            }
            resent_on = None;
            match failed {
                None => return Self::decode(&o, |res| f(&res.results[1..])),
                Some((_, s)) if retryable(s) && start.elapsed() < DELAY_BUDGET => {
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(DELAY_MAX);
                }
                Some((op, s)) => return Err(nfs4(op, s)),
            }
        }
    }

    /// The handle of `path` (`/` or empty: the root), relative to the export root, or to
    /// the pseudo-root while no export is set; one LOOKUP per component.
    pub fn lookup_path(&mut self, path: &str) -> Result<Vec<u8>> {
        let comps: Vec<&str> = path
            .split('/')
            .filter(|c| !c.is_empty() && *c != ".")
            .collect();
        let mut fh = (!self.root.is_empty()).then(|| self.root.clone());
        let per = (self.maxops as usize).saturating_sub(3).max(1);
        let mut rest = &comps[..];
        loop {
            let (now, later) = rest.split_at(rest.len().min(per));
            let mut list = Vec::with_capacity(now.len() + 2);
            list.push(match &fh {
                Some(h) => ArgOp::PutFh(h),
                None => ArgOp::PutRootFh,
            });
            list.extend(now.iter().map(|c| ArgOp::Lookup(c.as_bytes())));
            list.push(ArgOp::GetFh);
            let got = self.compound(&list, SMALL_REPLY, false, |r| match r.last() {
                Some(ResOp {
                    body: ResBody::GetFh(h),
                    ..
                }) => Ok(h.to_vec()),
                _ => Err(unexpected("no GETFH result")),
            })?;
            fh = Some(got);
            rest = later;
            if rest.is_empty() {
                return Ok(fh.unwrap_or_default());
            }
        }
    }

    /// GETATTR of [`attrs_request`]'s attributes.
    pub fn getattr(&mut self, fh: &[u8]) -> Result<Attrs> {
        self.compound(
            &[ArgOp::PutFh(fh), ArgOp::Getattr(attrs_request())],
            SMALL_REPLY,
            false,
            |r| match r.last().map(|r| &r.body) {
                Some(ResBody::Getattr(f)) => Ok(Attrs::decode(f)?),
                _ => Err(unexpected("no GETATTR result")),
            },
        )
    }

    /// The whole listing of a directory, through READDIR pages.
    pub fn list(&mut self, dir: &[u8]) -> Result<Vec<Listed4>> {
        let mut out = Vec::new();
        let (mut cookie, mut verf) = (0u64, Verifier::default());
        loop {
            let args = ReaddirArgs {
                cookie,
                cookieverf: verf,
                dircount: READDIR_MAXCOUNT / 4,
                maxcount: READDIR_MAXCOUNT,
                attr_request: attrs_request(),
            };
            let (items, last, v, eof) = self.compound(
                &[ArgOp::PutFh(dir), ArgOp::Readdir(args)],
                READDIR_MAXCOUNT + 1024,
                false,
                |r| match r.last().map(|r| &r.body) {
                    Some(ResBody::Readdir(d)) => {
                        let mut items = Vec::with_capacity(d.entries.len());
                        for e in &d.entries {
                            items.push(Listed4 {
                                name: e.name.to_vec(),
                                attrs: Attrs::decode(&e.attrs)?,
                            });
                        }
                        Ok((
                            items,
                            d.entries.last().map(|e| e.cookie),
                            d.cookieverf,
                            d.eof,
                        ))
                    }
                    _ => Err(unexpected("no READDIR result")),
                },
            )?;
            let empty = items.is_empty();
            out.extend(items);
            if eof {
                return Ok(out);
            }
            if empty {
                return Err(NfsClientError::Transport(
                    "the server returned an empty READDIR page before the end".into(),
                ));
            }
            cookie = last.unwrap_or(cookie);
            verf = v;
        }
    }

    /// OPEN of `name` in `dir` with claim CLAIM_NULL: for reading, or for reading and
    /// writing with `create` (OPEN4_CREATE UNCHECKED4, truncated to 0 with mode `mode`).
    pub fn open(
        &mut self,
        dir: &[u8],
        name: &[u8],
        create: Option<u32>,
        write: bool,
    ) -> Result<OpenFile> {
        let (mask, vals) = Attrs {
            size: Some(0),
            mode: create,
            ..Attrs::default()
        }
        .encode_settable();
        let how = match create {
            Some(_) => OpenHow::Create(CreateHow::Unchecked(Fattr4 { mask, vals: &vals })),
            None => OpenHow::NoCreate,
        };
        let access = if write || create.is_some() {
            OPEN4_SHARE_ACCESS_BOTH
        } else {
            OPEN4_SHARE_ACCESS_READ
        };
        let owner = self.owner.clone();
        let clientid = self.clientid;
        let want = if self.want_delegations {
            0
        } else {
            OPEN4_SHARE_ACCESS_WANT_NO_DELEG
        };
        let f = self.compound(
            &[
                ArgOp::PutFh(dir),
                ArgOp::Open(OpenArgs {
                    seqid: 0,
                    share_access: access | want,
                    share_deny: OPEN4_SHARE_DENY_NONE,
                    owner_clientid: clientid,
                    owner: &owner,
                    how,
                    claim: OpenClaim::Null(name),
                }),
                ArgOp::GetFh,
            ],
            SMALL_REPLY,
            false,
            |r| match (r.get(1).map(|r| &r.body), r.get(2).map(|r| &r.body)) {
                (Some(ResBody::Open(o)), Some(ResBody::GetFh(fh))) => Ok(OpenFile {
                    fh: fh.to_vec(),
                    stateid: o.stateid,
                    delegation: match o.delegation {
                        OpenDelegation::Read(s, ..) | OpenDelegation::Write(s, ..) => Some(s),
                        _ => None,
                    },
                }),
                _ => Err(unexpected("no OPEN and GETFH results")),
            },
        )?;
        if let Some(s) = f.delegation {
            self.conn.service_mut().hold(s, &f.fh);
        }
        Ok(f)
    }

    /// Runs `ops` after SEQUENCE on a free slot (retrying NFS4ERR_DELAY); the first
    /// failure is the error. For operations without a method of their own.
    pub fn ops(&mut self, ops: &[ArgOp<'_>]) -> Result<()> {
        self.compound(ops, SMALL_REPLY, false, |_| Ok(()))
    }

    /// RENAME of `from` in directory `from_dir` to `to` in `to_dir` (SAVEFH carries the
    /// source directory).
    pub fn rename(&mut self, from_dir: &[u8], from: &[u8], to_dir: &[u8], to: &[u8]) -> Result<()> {
        self.ops(&[
            ArgOp::PutFh(from_dir),
            ArgOp::SaveFh,
            ArgOp::PutFh(to_dir),
            ArgOp::Rename(from, to),
        ])
    }

    /// SETATTR of the size of an open file (truncate or extend).
    pub fn set_size(&mut self, f: &OpenFile, size: u64) -> Result<()> {
        let (mask, vals) = Attrs {
            size: Some(size),
            ..Attrs::default()
        }
        .encode_settable();
        self.ops(&[
            ArgOp::PutFh(&f.fh),
            ArgOp::Setattr(f.stateid, Fattr4 { mask, vals: &vals }),
        ])
    }

    /// CREATE of directory `name` in `dir`; returns its handle.
    pub fn mkdir(&mut self, dir: &[u8], name: &[u8]) -> Result<Vec<u8>> {
        self.compound(
            &[
                ArgOp::PutFh(dir),
                ArgOp::Create(CreateArgs {
                    objtype: CreateType::Plain(super::ftype::NF4DIR),
                    name,
                    attrs: Fattr4::default(),
                }),
                ArgOp::GetFh,
            ],
            SMALL_REPLY,
            false,
            |r| match r.last().map(|r| &r.body) {
                Some(ResBody::GetFh(h)) => Ok(h.to_vec()),
                _ => Err(unexpected("no GETFH result")),
            },
        )
    }

    /// The session id.
    pub fn session_id(&self) -> SessionId {
        self.sessionid
    }

    /// The sequence id the next request on `slot` carries.
    pub fn slot_seqid(&self, slot: usize) -> u32 {
        self.slots.get(slot).map_or(0, |s| s.seqid)
    }

    /// Sets the sequence id the next request on `slot` carries (after
    /// [`raw_sequenced`](Self::raw_sequenced) calls).
    pub fn set_slot_seqid(&mut self, slot: usize, seqid: u32) {
        if let Some(s) = self.slots.get_mut(slot) {
            s.seqid = seqid;
        }
    }

    /// Sends SEQUENCE (`slotid`, `seqid` exactly as given, nothing checked or advanced)
    /// and `ops` once; returns the COMPOUND4res octets as received. For tests of a
    /// server's slot handling (retries, misordered sequence ids, bad slots).
    pub fn raw_sequenced(&mut self, slotid: u32, seqid: u32, ops: &[ArgOp<'_>]) -> Result<Vec<u8>> {
        let mut all = Vec::with_capacity(ops.len() + 1);
        all.push(ArgOp::Sequence(SequenceArgs {
            sessionid: self.sessionid,
            sequenceid: seqid,
            slotid,
            highest_slotid: self.slots.len() as u32 - 1,
            cachethis: true,
        }));
        all.extend(ops.iter().cloned());
        let req = self.build(&all, false, SMALL_REPLY)?;
        let o = self.run(req, 0)?;
        let r = OutcomeResults::new(&o);
        let (_, c) = r.cursor().map_err(NfsClientError::Rpc)?;
        Ok(c.input()[c.position()..].to_vec())
    }

    /// CLOSE.
    pub fn close_file(&mut self, f: &OpenFile) -> Result<()> {
        self.compound(
            &[ArgOp::PutFh(&f.fh), ArgOp::Close(0, f.stateid)],
            SMALL_REPLY,
            false,
            |_| Ok(()),
        )
    }

    /// READ of up to `count` octets (at most the read size) into a Write chunk; returns
    /// the data and whether it reached the end of the file.
    pub fn read(&mut self, f: &OpenFile, offset: u64, count: u32) -> Result<(Vec<u8>, bool)> {
        let count = count.min(self.rsize);
        self.compound(
            &[
                ArgOp::PutFh(&f.fh),
                ArgOp::Read(ReadArgs {
                    stateid: f.stateid,
                    offset,
                    count,
                }),
            ],
            SMALL_REPLY,
            true,
            |r| match r.last().map(|r| &r.body) {
                Some(ResBody::Read(eof, data)) => Ok((data.to_vec(), *eof)),
                _ => Err(unexpected("no READ result")),
            },
        )
    }

    /// WRITE of `data` (at most the write size) from a Read chunk; returns the octets
    /// the server took and its write verifier.
    pub fn write(
        &mut self,
        f: &OpenFile,
        offset: u64,
        data: &[u8],
        stable: u32,
    ) -> Result<(u32, Verifier)> {
        let data = &data[..data.len().min(self.wsize as usize)];
        self.compound(
            &[
                ArgOp::PutFh(&f.fh),
                ArgOp::Write(WriteArgs {
                    stateid: f.stateid,
                    offset,
                    stable,
                    data,
                }),
            ],
            SMALL_REPLY,
            false,
            |r| match r.last().map(|r| &r.body) {
                Some(ResBody::Write(n, _, verf)) => Ok((*n, *verf)),
                _ => Err(unexpected("no WRITE result")),
            },
        )
    }

    /// COMMIT of the whole file; returns the write verifier.
    pub fn commit(&mut self, fh: &[u8]) -> Result<Verifier> {
        self.compound(
            &[ArgOp::PutFh(fh), ArgOp::Commit(0, 0)],
            SMALL_REPLY,
            false,
            |r| match r.last().map(|r| &r.body) {
                Some(ResBody::Commit(v)) => Ok(*v),
                _ => Err(unexpected("no COMMIT result")),
            },
        )
    }

    /// REMOVE of `name` in `dir`.
    pub fn remove(&mut self, dir: &[u8], name: &[u8]) -> Result<()> {
        self.compound(
            &[ArgOp::PutFh(dir), ArgOp::Remove(name)],
            SMALL_REPLY,
            false,
            |_| Ok(()),
        )
    }

    /// Reads the whole of `name` in `dir` into `out` (OPEN for reading, READs, CLOSE);
    /// returns its length.
    pub fn get(&mut self, dir: &[u8], name: &[u8], out: &mut impl io::Write) -> Result<u64> {
        let f = self.open(dir, name, None, false)?;
        let r = self.read_all(&f, out);
        let c = self.close_file(&f);
        let n = r?;
        c?;
        Ok(n)
    }

    fn read_all(&mut self, f: &OpenFile, out: &mut impl io::Write) -> Result<u64> {
        let mut offset = 0u64;
        loop {
            let (data, eof) = self.read(f, offset, self.rsize)?;
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
    /// UNSTABLE WRITEs, COMMIT, CLOSE. A write verifier that changes on the way means the
    /// server lost unstable data, and the file is written again, once. Returns the handle.
    pub fn put(&mut self, dir: &[u8], name: &[u8], data: &[u8]) -> Result<Vec<u8>> {
        let f = self.open(dir, name, Some(0o644), true)?;
        let r = self.write_all(&f, data);
        let c = self.close_file(&f);
        r?;
        c?;
        Ok(f.fh)
    }

    fn write_all(&mut self, f: &OpenFile, data: &[u8]) -> Result<()> {
        for _attempt in 0..2 {
            let mut verf = None;
            let mut changed = false;
            let mut offset = 0usize;
            while offset < data.len() {
                let (n, v) = self.write(f, offset as u64, &data[offset..], UNSTABLE4)?;
                if n == 0 {
                    return Err(NfsClientError::Transport("the server wrote nothing".into()));
                }
                changed |= verf.is_some_and(|w| w != v);
                verf = Some(v);
                offset += n as usize;
            }
            let c = self.commit(&f.fh)?;
            if !changed && verf.is_none_or(|v| v == c) {
                return Ok(());
            }
        }
        Err(NfsClientError::Transport(
            "the server's write verifier kept changing (it restarts?)".into(),
        ))
    }

    /// Starts a READ (`data` empty) or an UNSTABLE WRITE of `data` of the open file `f`
    /// on a free session slot, without waiting; [`poll_done`](Self::poll_done) reports
    /// it by `tag`. At most [`slots`](Self::slots) at once.
    pub fn start(
        &mut self,
        f: &OpenFile,
        offset: u64,
        len: u32,
        data: &[u8],
        tag: u64,
    ) -> Result<()> {
        let slot = self.free_slot().ok_or_else(|| {
            NfsClientError::Transport(format!("all {} session slots are in use", self.slots.len()))
        })?;
        let data = &data[..data.len().min(self.wsize as usize)];
        self.submit_io(
            Pending {
                slot,
                file: f.clone(),
                offset,
                len: len.min(self.rsize),
                data: data.to_vec(),
                first: Instant::now(),
                wait: DELAY_FIRST,
            },
            tag,
        )
    }

    fn submit_io(&mut self, p: Pending, tag: u64) -> Result<()> {
        let read = p.data.is_empty();
        let op = if read {
            ArgOp::Read(ReadArgs {
                stateid: p.file.stateid,
                offset: p.offset,
                count: p.len,
            })
        } else {
            ArgOp::Write(WriteArgs {
                stateid: p.file.stateid,
                offset: p.offset,
                stable: UNSTABLE4,
                data: &p.data,
            })
        };
        let all = [self.sequence(p.slot), ArgOp::PutFh(&p.file.fh), op];
        let req = self.build(&all, read, SMALL_REPLY)?;
        self.submit(req, tag)?;
        self.slots[p.slot].busy = true;
        self.pending.insert(tag, p);
        Ok(())
    }

    /// Polls the connection once; a finished [`start`](Self::start)ed call comes back
    /// with its tag and the octets read or written. A call answered NFS4ERR_DELAY or
    /// NFS4ERR_GRACE is sent again on its slot after a back-off (this waits), within the
    /// same bound as blocking calls.
    pub fn poll_done(&mut self) -> Option<(u64, Result<u32>)> {
        self.conn.poll(Instant::now());
        let o = self.conn.poll_outcome()?;
        let Some(mut p) = self.pending.remove(&o.tag) else {
            return Some((
                o.tag,
                Err(NfsClientError::Transport("reply to an unknown call".into())),
            ));
        };
        self.slots[p.slot].busy = false;
        let read = p.data.is_empty();
        let r = match o.status {
            CallStatus::Success | CallStatus::RpcError(_) => {
                Self::decode(&o, |res| match self.settle(p.slot, res)? {
                    Some((op, s)) => Err(nfs4(op, s)),
                    None => match (read, res.results.last().map(|r| &r.body)) {
                        (true, Some(ResBody::Read(_, d))) => Ok(d.len() as u32),
                        (false, Some(ResBody::Write(n, _, _))) => Ok(*n),
                        _ => Err(unexpected("no READ or WRITE result")),
                    },
                })
            }
            other => Err(NfsClientError::Transport(format!("{other:?}"))),
        };
        if let Err(NfsClientError::Nfs4 { status, .. }) = &r {
            if retryable(*status) && p.first.elapsed() < DELAY_BUDGET {
                std::thread::sleep(p.wait);
                p.wait = (p.wait * 2).min(DELAY_MAX);
                let tag = o.tag;
                drop(o);
                return match self.submit_io(p, tag) {
                    Ok(()) => None,
                    Err(e) => Some((tag, Err(e))),
                };
            }
        }
        Some((o.tag, r))
    }

    /// Ends the session and the client id (DESTROY_SESSION, DESTROY_CLIENTID) and closes
    /// the connection. Calls started and not yet reported are abandoned.
    pub fn shutdown(mut self) -> Result<()> {
        let r = self.destroy();
        self.conn.close();
        r
    }

    fn destroy(&mut self) -> Result<()> {
        if self.session_open {
            self.session_open = false;
            let sid = self.sessionid;
            self.unsequenced(&[ArgOp::DestroySession(sid)], SMALL_REPLY, |_| Ok(()))?;
        }
        let id = self.clientid;
        self.unsequenced(&[ArgOp::DestroyClientid(id)], SMALL_REPLY, |_| Ok(()))
    }
}
