//! [`Dispatcher`]: from a received call message to a complete reply in the caller's
//! buffer.

use core::fmt;
use std::sync::Arc;

use super::auth::AuthPolicy;
use super::drc::{ClientAddr, Drc, DrcKey, DrcLookup, DrcPending};
use super::error::ProcError;
use super::Program;
use crate::binding::ProcInfo;
use crate::ddp::{DdpCursor, DdpEncodeError, DdpEncoder, DdpList, ReadItem, WriteItem};
use crate::rpc::{CallHeader, EncodeError, ReplyHeader, RpcError, ServerReply};
use rpcrdma::{Padding, RegBuf, RegBufError};

/// A received call as the transport delivers it.
#[derive(Debug, Clone, Copy, Default)]
pub struct InboundCall<'d> {
    /// The RPC call message: inline, or reassembled from a Position-Zero Read chunk,
    /// without the data of DDP-eligible items sent in other Read chunks.
    pub msg: &'d [u8],
    /// The data of the other Read chunks, with their XDR positions.
    pub reads: &'d [ReadItem<'d>],
    /// Capacities of the Write chunks the requester offered, in Write list order (0 for
    /// an empty chunk).
    pub write_chunks: &'d [u64],
    /// RDMA_MSGP padding to skip while decoding (RFC 5666 §3.9), if the call came so.
    pub padding: Option<Padding>,
}

impl<'d> InboundCall<'d> {
    /// A call that arrived entirely inline, with no Write chunks offered.
    pub const fn inline(msg: &'d [u8]) -> Self {
        InboundCall {
            msg,
            reads: &[],
            write_chunks: &[],
            padding: None,
        }
    }
}

/// What to do with a received call.
// Returned by value: boxing the common case would put an allocation on every call.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dispatched<'d> {
    /// Send this reply.
    Reply(WrittenReply<'d>),
    /// Send nothing: the message is not a call that can be answered (no XID, a bad
    /// `msg_type`, or a reply). The decoding error says why.
    Drop(RpcError),
    /// Send nothing: the program chose not to answer this call ([`ProcError::NoReply`]).
    NoReply {
        /// Transaction id of the call.
        xid: u32,
    },
}

/// What a [`Dispatcher`] has answered, for operators (plain counters: the dispatcher
/// runs on one poller thread).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DispatchStats {
    /// NULL calls (procedure 0) answered SUCCESS: pings and keepalive probes.
    pub nulls: u64,
    /// Calls for a program that is not registered (PROG_UNAVAIL).
    pub prog_unavail: u64,
    /// Calls a program dropped without a reply ([`ProcError::NoReply`]).
    pub no_reply: u64,
}

/// A reply written into the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrittenReply<'d> {
    /// Transaction id of the call.
    pub xid: u32,
    /// The reply header at the start of the buffer (for logs and counters).
    pub header: ReplyHeader<'static>,
    /// Octets of the reply message in the buffer (header and inline results).
    pub len: usize,
    /// Results to RDMA Write into the requester's Write chunks. Chunks not named here go
    /// back empty.
    pub write_chunks: DdpList<WriteItem<'d>>,
}

/// The dispatcher could not produce a reply message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DispatchError {
    /// The reply buffer cannot hold even a header-only reply.
    #[error("xid {xid:#010x}: reply header needs {needed} octets, buffer holds {available}")]
    ReplyBufferTooSmall {
        /// Transaction id of the call.
        xid: u32,
        /// Octets the header needs.
        needed: usize,
        /// Size of the buffer.
        available: usize,
    },
    /// The results do not fit the resources the requester provided (the reply buffer,
    /// a Write chunk, or the chunk count): a reply resource overrun (RFC 8267 §3), which
    /// the transport reports with RDMA_ERROR / ERR_CHUNK rather than an RPC reply.
    #[error("xid {xid:#010x}: reply overrun: {error}")]
    ReplyOverrun {
        /// Transaction id of the call.
        xid: u32,
        /// What did not fit.
        #[source]
        error: DdpEncodeError,
    },
}

impl DispatchError {
    /// Transaction id of the call that could not be answered.
    pub const fn xid(&self) -> u32 {
        match *self {
            DispatchError::ReplyBufferTooSmall { xid, .. }
            | DispatchError::ReplyOverrun { xid, .. } => xid,
        }
    }
}

/// Two programs with the same number were registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("program {prog} is already registered")]
pub struct RegisterError {
    /// The program number.
    pub prog: u32,
}

/// Routes calls to a fixed set of [`Program`]s and writes complete RPC replies.
///
/// Programs are registered at setup; dispatching a call allocates nothing. Each call is
/// checked in the order RFC 5531 §9 lays out the possible answers:
///
/// 1. the header decodes (else the error's [`server_reply`](RpcError::server_reply):
///    RPC_MISMATCH, AUTH_BADCRED/AUTH_BADVERF, GARBAGE_ARGS, or nothing for non-calls);
/// 2. the credential flavor passes the [`AuthPolicy`] (else AUTH_ERROR);
/// 3. the program is registered (else PROG_UNAVAIL);
/// 4. the version is in its range (else PROG_MISMATCH with the range);
/// 5. the procedure exists (else PROC_UNAVAIL); procedure 0 is NULL for every program
///    and is answered here;
/// 6. a procedure that is not [`idempotent`](ProcInfo::idempotent), of a program with a
///    [duplicate request cache](Program::reply_cache), is looked up there by XID,
///    program, version, procedure, [client](Self::set_client) and arguments
///    ([`DrcKey`]): a retransmission of a call still running gets no reply, one of a
///    completed call gets the cached reply, and only a new call goes on (its SUCCESS
///    reply is then cached; see [`Drc`]);
/// 7. the program runs: SUCCESS with its results, or GARBAGE_ARGS, SYSTEM_ERR,
///    PROC_UNAVAIL or AUTH_ERROR as it reports.
pub struct Dispatcher {
    programs: Vec<Registered>,
    auth: AuthPolicy,
    client: ClientAddr,
    stats: DispatchStats,
    /// The programs' [registered result buffers](Program::registered_results), gathered
    /// once they were attached (None before).
    registered: Option<Vec<Arc<RegBuf>>>,
}

/// A registered program, with its number, version range and reply cache asked for once
/// at registration (the dispatcher looks them up on every call).
struct Registered {
    prog: u32,
    versions: (u32, u32),
    program: Box<dyn Program>,
    drc: Option<Arc<Drc>>,
}

impl Default for Dispatcher {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dispatcher")
            .field(
                "programs",
                &self
                    .programs
                    .iter()
                    .map(|p| p.program.prog())
                    .collect::<Vec<_>>(),
            )
            .field("auth", &self.auth)
            .field("client", &self.client)
            .finish()
    }
}

impl Dispatcher {
    /// A dispatcher with no programs and the default [`AuthPolicy`].
    pub fn new() -> Self {
        Dispatcher {
            programs: Vec::new(),
            auth: AuthPolicy::DEFAULT,
            client: ClientAddr::Unknown,
            stats: DispatchStats::default(),
            registered: None,
        }
    }

    /// True once [`attach_registered`](Self::attach_registered) ran.
    pub fn is_attached(&self) -> bool {
        self.registered.is_some()
    }

    /// Offers every registered program registered buffers from `alloc`
    /// ([`Program::attach_registered`]) and gathers the buffers their results may lie
    /// in. Runs once; later calls do nothing. A program registered afterwards is not
    /// offered any.
    pub fn attach_registered(&mut self, alloc: &mut dyn FnMut() -> Result<RegBuf, RegBufError>) {
        if self.registered.is_some() {
            return;
        }
        let mut bufs = Vec::new();
        for p in &mut self.programs {
            p.program.attach_registered(alloc);
            bufs.extend(p.program.registered_results().iter().cloned());
        }
        self.registered = Some(bufs);
    }

    /// The buffers gathered by [`attach_registered`](Self::attach_registered), taken out
    /// (to look results up in while a dispatch borrows the dispatcher) and put back with
    /// [`put_registered`](Self::put_registered). Moving a `Vec` allocates nothing.
    pub(super) fn take_registered(&mut self) -> Vec<Arc<RegBuf>> {
        self.registered
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Puts back what [`take_registered`](Self::take_registered) took.
    pub(super) fn put_registered(&mut self, bufs: Vec<Arc<RegBuf>>) {
        if let Some(r) = self.registered.as_mut() {
            *r = bufs;
        }
    }

    /// Who the calls come from (one dispatcher serves one connection): part of the
    /// duplicate request cache's key. [`ClientAddr::Unknown`] until set.
    pub fn client(&self) -> ClientAddr {
        self.client
    }

    /// Sets who the calls come from, e.g. the peer's address when the connection is
    /// accepted ([`tcp`](crate::nfs::server::tcp) does so).
    pub fn set_client(&mut self, client: ClientAddr) {
        self.client = client;
    }

    /// Counters of what was answered.
    pub fn stats(&self) -> DispatchStats {
        self.stats
    }

    /// The credential policy.
    pub fn auth_policy(&self) -> AuthPolicy {
        self.auth
    }

    /// Replaces the credential policy.
    pub fn set_auth_policy(&mut self, policy: AuthPolicy) {
        self.auth = policy;
    }

    /// Adds a program, with its [reply cache](Program::reply_cache) if it has one; its
    /// number must not be registered yet.
    pub fn register(&mut self, program: Box<dyn Program>) -> Result<(), RegisterError> {
        let prog = program.prog();
        if self.find(prog).is_some() {
            return Err(RegisterError { prog });
        }
        let drc = program.reply_cache();
        let versions = program.versions();
        self.programs.push(Registered {
            prog,
            versions,
            program,
            drc,
        });
        Ok(())
    }

    /// The registered programs' numbers and version ranges, in registration order.
    pub fn programs(&self) -> impl Iterator<Item = (u32, (u32, u32))> + '_ {
        self.programs.iter().map(|p| (p.prog, p.versions))
    }

    /// The duplicate request cache of registered program `prog`, if it has one.
    pub fn reply_cache(&self, prog: u32) -> Option<&Arc<Drc>> {
        self.programs[self.find(prog)?].drc.as_ref()
    }

    /// The declarations of a procedure of a registered program, for requesters that
    /// share the table (procedure 0 is always [`ProcInfo::NULL`]).
    pub fn proc_info(&self, prog: u32, vers: u32, procedure: u32) -> Option<&'static ProcInfo> {
        let p = &self.programs[self.find(prog)?].program;
        let (low, high) = p.versions();
        if vers < low || vers > high {
            return None;
        }
        if procedure == 0 {
            return Some(&ProcInfo::NULL);
        }
        p.proc_info(vers, procedure)
    }

    fn find(&self, prog: u32) -> Option<usize> {
        self.programs.iter().position(|p| p.prog == prog)
    }

    /// Answers one call.
    ///
    /// The reply is written at the start of `reply`; DDP-eligible results the requester
    /// offered Write chunks for are returned by reference in [`WrittenReply::write_chunks`], for
    /// the transport to RDMA Write.
    pub fn dispatch<'d>(
        &'d mut self,
        call: &InboundCall<'d>,
        reply: &mut [u8],
    ) -> Result<Dispatched<'d>, DispatchError> {
        self.answer(call, reply)
    }

    /// [`dispatch`](Self::dispatch), its answer handed back as `A`: a [`Dispatched`], or
    /// for a call that offered no Write chunks (whose reply has no Write list to carry)
    /// an [`Answered`] of two words.
    #[inline(always)]
    pub(super) fn answer<'d, A: Answer<'d>>(
        &'d mut self,
        call: &InboundCall<'d>,
        reply: &mut [u8],
    ) -> Result<A, DispatchError> {
        // Nearly every call has the plain header (RPC version 2, AUTH_NONE twice):
        // decoded where it is used, not returned through a `Result` and moved out of
        // it (a call header is some two hundred octets, for AUTH_SYS's groups).
        if let Some(header) = CallHeader::decode_plain(call.msg) {
            return self.dispatch_decoded(&header, CallHeader::PLAIN_LEN, call, reply);
        }
        self.dispatch_general(call, reply)
    }

    /// [`answer`](Self::answer) of a call whose plain header (RPC version 2, AUTH_NONE
    /// twice) the caller decoded: `header`, the arguments right after it.
    #[inline(always)]
    pub(super) fn answer_plain<'d, A: Answer<'d>>(
        &'d mut self,
        header: &CallHeader<'d>,
        call: &InboundCall<'d>,
        reply: &mut [u8],
    ) -> Result<A, DispatchError> {
        self.dispatch_decoded(header, CallHeader::PLAIN_LEN, call, reply)
    }

    /// [`answer`](Self::answer) of a call whose header is not the plain one.
    #[inline(never)]
    fn dispatch_general<'d, A: Answer<'d>>(
        &'d mut self,
        call: &InboundCall<'d>,
        reply: &mut [u8],
    ) -> Result<A, DispatchError> {
        let (header, args_at) = match CallHeader::decode(call.msg) {
            Ok(decoded) => decoded,
            Err(e) => {
                return match e.server_reply() {
                    ServerReply::Drop => Ok(A::drop(e)),
                    ServerReply::Send(h) => header_only(h, reply),
                }
            }
        };
        self.dispatch_decoded(&header, args_at, call, reply)
    }

    /// [`dispatch`](Self::dispatch) of a call whose header `call` decoded, its
    /// arguments starting `args_at` octets into `inbound`'s message.
    #[inline(always)]
    fn dispatch_decoded<'d, A: Answer<'d>>(
        &'d mut self,
        call: &CallHeader<'d>,
        args_at: usize,
        inbound: &InboundCall<'d>,
        reply: &mut [u8],
    ) -> Result<A, DispatchError> {
        let InboundCall {
            msg,
            reads,
            write_chunks,
            padding,
        } = *inbound;
        let xid = call.xid;
        if let Err(stat) = self.auth.check(&call.cred, &call.verf) {
            return header_only(ReplyHeader::auth_error(xid, stat), reply);
        }
        let Some(index) = self.find(call.prog) else {
            self.stats.prog_unavail += 1;
            return header_only(ReplyHeader::prog_unavail(xid), reply);
        };
        let Registered {
            program,
            drc,
            versions: (low, high),
            ..
        } = &mut self.programs[index];
        let (low, high) = (*low, *high);
        if call.vers < low || call.vers > high {
            return header_only(ReplyHeader::prog_mismatch(xid, low, high), reply);
        }
        // NULL with nothing after its header and no Read chunks (nearly every NULL): what
        // the cursor's `finish` below finds, without building the cursor.
        if call.procedure == 0 && reads.is_empty() && msg.len() <= args_at {
            self.stats.nulls += 1;
            return success_only(xid, reply);
        }
        let mut args = match DdpCursor::call_args(msg, args_at, reads, padding) {
            Ok(args) => args,
            Err(_) => return header_only(ReplyHeader::garbage_args(xid), reply),
        };
        if call.procedure == 0 {
            // NULL takes no arguments; anything else is garbage.
            return match args.finish() {
                Ok(()) => {
                    self.stats.nulls += 1;
                    success_only(xid, reply)
                }
                Err(_) => header_only(ReplyHeader::garbage_args(xid), reply),
            };
        }
        let Some(info) = program.proc_info(call.vers, call.procedure) else {
            return header_only(ReplyHeader::proc_unavail(xid), reply);
        };
        let Some(drc) = drc.as_deref().filter(|_| !info.idempotent) else {
            // No reply cache to consult (none, or the procedure is idempotent), which is
            // the common case: the reply is built and returned in place.
            let results_at =
                ReplyHeader::encode_success(xid, reply).map_err(|e| too_small(xid, e))?;
            let (_, rest) = reply.split_at_mut(results_at);
            let mut results = DdpEncoder::write_chunks(rest, results_at, write_chunks)
                .map_err(|error| DispatchError::ReplyOverrun { xid, error })?;
            let ran = program
                .call(call, &mut args, &mut results)
                .and_then(|()| args.finish().map_err(ProcError::GarbageArgs));
            return match ran {
                Ok(()) => {
                    let len = results.position();
                    Ok(A::reply(xid, ReplyHeader::success(xid), len, || {
                        results.into_writes()
                    }))
                }
                Err(e) => failed(e, xid, reply, &mut self.stats),
            };
        };
        // Dropped on every path that does not complete it: a call that got no cacheable
        // reply is forgotten, so that its retransmission runs again.
        let mut pending: Option<DrcPending<'_>> = None;
        let inline_args = msg.get(args_at..).unwrap_or(&[]);
        let key = DrcKey::of_call(call, self.client, inline_args, reads);
        match drc.lookup(&key, reply) {
            DrcLookup::New(p) => pending = Some(p),
            DrcLookup::InProgress => return Ok(A::no_reply(xid)),
            DrcLookup::Replayed { len } => {
                return Ok(A::reply(xid, ReplyHeader::success(xid), len, DdpList::new))
            }
            // As the original reply would have overrun this call's buffer.
            DrcLookup::ReplayOverrun { len } => {
                return Err(DispatchError::ReplyOverrun {
                    xid,
                    error: DdpEncodeError::BufferTooSmall {
                        needed: len,
                        available: reply.len(),
                    },
                })
            }
            DrcLookup::Full => {}
        }
        let success = ReplyHeader::success(xid);
        let results_at = success.encode(reply).map_err(|e| too_small(xid, e))?;
        let outcome = {
            let (_, rest) = reply.split_at_mut(results_at);
            let mut results = DdpEncoder::write_chunks(rest, results_at, write_chunks)
                .map_err(|error| DispatchError::ReplyOverrun { xid, error })?;
            program
                .call(call, &mut args, &mut results)
                .and_then(|()| args.finish().map_err(ProcError::GarbageArgs))
                .map(|()| results.finish())
        };
        match outcome {
            Ok(done) => {
                // Results in Write chunks are not in the reply bytes, so such a reply
                // cannot be replayed from them (no non-idempotent NFS procedure has any).
                if let Some(p) = pending.filter(|_| done.writes.is_empty()) {
                    p.complete(reply.get(..done.len).unwrap_or(&[]));
                }
                Ok(A::reply(xid, success, done.len, || done.writes))
            }
            Err(e) => failed(e, xid, reply, &mut self.stats),
        }
    }
}

/// The reply to a call whose procedure failed with `e`: a header-only RPC error, a reply
/// overrun for the transport to report, or no reply at all.
fn failed<'d, A: Answer<'d>>(
    e: ProcError,
    xid: u32,
    reply: &mut [u8],
    stats: &mut DispatchStats,
) -> Result<A, DispatchError> {
    match e {
        ProcError::GarbageArgs(_) => header_only(ReplyHeader::garbage_args(xid), reply),
        ProcError::ProcUnavail => header_only(ReplyHeader::proc_unavail(xid), reply),
        ProcError::SystemErr => header_only(ReplyHeader::system_err(xid), reply),
        ProcError::Auth(stat) => header_only(ReplyHeader::auth_error(xid, stat), reply),
        ProcError::Results(error) => Err(DispatchError::ReplyOverrun { xid, error }),
        ProcError::NoReply => {
            stats.no_reply += 1;
            Ok(A::no_reply(xid))
        }
    }
}

fn too_small(xid: u32, e: EncodeError) -> DispatchError {
    match e {
        EncodeError::BufferTooSmall { needed, available } => DispatchError::ReplyBufferTooSmall {
            xid,
            needed,
            available,
        },
        // Dispatcher headers carry AUTH_NONE verifiers, which always encode.
        _ => DispatchError::ReplyBufferTooSmall {
            xid,
            needed: 0,
            available: 0,
        },
    }
}

/// [`header_only`] of the SUCCESS header (a NULL call's whole reply), its encoding
/// inlined.
#[inline(always)]
fn success_only<'d, A: Answer<'d>>(xid: u32, reply: &mut [u8]) -> Result<A, DispatchError> {
    let len = ReplyHeader::encode_success(xid, reply).map_err(|e| too_small(xid, e))?;
    Ok(A::reply(xid, ReplyHeader::success(xid), len, DdpList::new))
}

fn header_only<'d, A: Answer<'d>>(
    h: ReplyHeader<'static>,
    reply: &mut [u8],
) -> Result<A, DispatchError> {
    let len = h.encode(reply).map_err(|e| too_small(h.xid, e))?;
    Ok(A::reply(h.xid, h, len, DdpList::new))
}

/// How [`Dispatcher::answer`] hands its answer back (sealed: the dispatcher's own two).
pub(super) trait Answer<'d>: Sized {
    /// A reply of `len` octets with header `header`; `writes` yields its Write list
    /// (called only by an answer that carries one).
    fn reply(
        xid: u32,
        header: ReplyHeader<'static>,
        len: usize,
        writes: impl FnOnce() -> DdpList<WriteItem<'d>>,
    ) -> Self;
    /// No reply: the message is not an answerable call.
    fn drop(e: RpcError) -> Self;
    /// No reply: the program chose not to answer.
    fn no_reply(xid: u32) -> Self;
}

impl<'d> Answer<'d> for Dispatched<'d> {
    #[inline(always)]
    fn reply(
        xid: u32,
        header: ReplyHeader<'static>,
        len: usize,
        writes: impl FnOnce() -> DdpList<WriteItem<'d>>,
    ) -> Self {
        Dispatched::Reply(WrittenReply {
            xid,
            header,
            len,
            write_chunks: writes(),
        })
    }

    #[inline(always)]
    fn drop(e: RpcError) -> Self {
        Dispatched::Drop(e)
    }

    #[inline(always)]
    fn no_reply(xid: u32) -> Self {
        Dispatched::NoReply { xid }
    }
}

/// [`Dispatched`] without the reply's header and Write list: what the engine's
/// responder upcall needs of a call that offered no Write chunks (so that the reply
/// has no Write list), handed back in two words instead of some three hundred octets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Answered {
    /// Send the reply of `len` octets written at the start of the buffer.
    Reply {
        /// Octets of the reply message.
        len: usize,
    },
    /// Send nothing: not an answerable call ([`Dispatched::Drop`]).
    Drop,
    /// Send nothing: the program chose not to answer ([`Dispatched::NoReply`]).
    NoReply,
}

impl<'d> Answer<'d> for Answered {
    #[inline(always)]
    fn reply(
        _xid: u32,
        _header: ReplyHeader<'static>,
        len: usize,
        writes: impl FnOnce() -> DdpList<WriteItem<'d>>,
    ) -> Self {
        // Used only for calls without Write chunks, whose results all go inline.
        debug_assert!(writes().is_empty(), "a Write list dropped");
        #[cfg(not(debug_assertions))]
        let _ = writes;
        Answered::Reply { len }
    }

    #[inline(always)]
    fn drop(_e: RpcError) -> Self {
        Answered::Drop
    }

    #[inline(always)]
    fn no_reply(_xid: u32) -> Self {
        Answered::NoReply
    }
}
