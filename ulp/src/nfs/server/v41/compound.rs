//! The COMPOUND procedure (RFC 8881 §16.2, §18): operations run in order until the
//! first one fails; SEQUENCE comes first in a session and its slot's reply cache answers
//! retries; every result is encoded as it is produced.

use super::attrs::{self, AttrCtx, Mask};
use super::deleg;
use super::state::{SlotReply, StateidUse, ACCESS_WRITE};
use crate::ddp::{DdpCursor, DdpEncoder, XdrCodec};
use crate::nfs::server::backend::{CreateMode, DirEntry, FileKey};
use crate::nfs::server::counters::bump;
use crate::nfs::server::handle::Handle;
use crate::nfs::server::program::NfsShared;
use crate::nfs::v3::args::StableHow;
use crate::nfs::v3::types::{Ftype3, Nfsstat3, Sattr3, Verf};
use crate::nfs::v4::ops;
use crate::nfs::v41::compound::{
    ArgOp, CreateArgs, CreateHow, CreateType, Nfsace4, OpenArgs, OpenClaim, OpenDelegation,
    OpenHow, OpenRes, ResBody, ResOp, SequenceArgs, EXCHGID4_FLAG_CONFIRMED_R,
};
use crate::nfs::v41::{ChangeInfo4, ChannelAttrs4, Nfsstat4, SessionId, Stateid4, NAME_LIMIT};
use crate::program::ProcError;

/// `eir_flags`: this server is not a pNFS server (RFC 8881 §18.35.3).
const EXCHGID4_FLAG_USE_NON_PNFS: u32 = 0x0001_0000;
/// OPEN4_RESULT_LOCKTYPE_POSIX.
const OPEN4_RESULT_LOCKTYPE_POSIX: u32 = 4;
/// The most operations of a COMPOUND outside a session, and the absolute bound.
const MAX_OPS: u32 = 128;
/// READDIR4resok without entries: verifier, end of list, eof.
const READDIR_FIXED: usize = 8 + 4 + 4;

/// Per-connection buffers of the NFSv4.1 program, so results can borrow them for the
/// reply without allocating per operation.
#[derive(Debug, Default)]
pub struct Nfs41Conn {
    /// READ data; split among the READs of one COMPOUND.
    data: Vec<u8>,
    /// One `attrlist4` being built.
    attrs: Vec<u8>,
    /// READDIR entries from the backend.
    dir: Vec<DirEntry>,
    /// READDIR entries encoded.
    dirbuf: Vec<u8>,
    /// READLINK target.
    link: Vec<u8>,
}

/// What a COMPOUND's operations share.
struct Ctx<'s> {
    sh: &'s NfsShared,
    cur: Option<FileKey>,
    saved: Option<FileKey>,
    /// Session, slot and client of a COMPOUND that began with SEQUENCE.
    session: Option<(SessionId, usize, u64)>,
    fore: ChannelAttrs4,
    /// The current stateid (RFC 8881 §16.2.3.1.2), set by OPEN and OPEN_DOWNGRADE.
    cur_stateid: Option<Stateid4>,
}

type Op = Result<Nfsstat4, ProcError>;

fn st(s: Nfsstat3) -> Nfsstat4 {
    match s {
        Nfsstat3::NOT_SYNC => Nfsstat4::INVAL,
        Nfsstat3::NODEV => Nfsstat4::NXIO,
        Nfsstat3::REMOTE => Nfsstat4::NOENT,
        // The same numbers otherwise (NFS3ERR_JUKEBOX is NFS4ERR_DELAY).
        Nfsstat3(n) => Nfsstat4(n),
    }
}

fn plain(e: &mut DdpEncoder<'_, '_>, op: u32, r: Result<ResBody<'_>, Nfsstat4>) -> Op {
    let (status, body) = match r {
        Ok(b) => (Nfsstat4::OK, b),
        Err(s) => (s, ResBody::None),
    };
    ResOp { op, status, body }
        .encode_plain(e)
        .map_err(ProcError::Results)?;
    Ok(status)
}

fn sessionless(op: u32) -> bool {
    matches!(
        op,
        ops::EXCHANGE_ID
            | ops::CREATE_SESSION
            | ops::DESTROY_SESSION
            | ops::DESTROY_CLIENTID
            | ops::BIND_CONN_TO_SESSION
    )
}

/// The status of an operation whose arguments did not decode: an operation number
/// outside NFSv4.0-4.2 is OP_ILLEGAL (answered as ILLEGAL), a defined one this server
/// does not decode is NOTSUPP, and a known one with bad arguments is BADXDR.
fn undecodable(op: u32) -> (u32, Nfsstat4) {
    let known = matches!(
        op,
        ops::ACCESS
            | ops::CLOSE
            | ops::COMMIT
            | ops::CREATE
            | ops::DELEGRETURN
            | ops::GETATTR
            | ops::GETFH
            | ops::LINK
            | ops::LOOKUP
            | ops::LOOKUPP
            | ops::OPEN
            | ops::OPEN_DOWNGRADE
            | ops::PUTFH
            | ops::PUTROOTFH
            | ops::READ
            | ops::READDIR
            | ops::READLINK
            | ops::REMOVE
            | ops::RENAME
            | ops::RESTOREFH
            | ops::SAVEFH
            | ops::SETATTR
            | ops::WRITE
            | ops::EXCHANGE_ID
            | ops::CREATE_SESSION
            | ops::DESTROY_SESSION
            | ops::FREE_STATEID
            | ops::SECINFO_NO_NAME
            | ops::SEQUENCE
            | ops::TEST_STATEID
            | ops::DESTROY_CLIENTID
            | ops::RECLAIM_COMPLETE
    );
    if known {
        (op, Nfsstat4::BADXDR)
    } else if (3..=75).contains(&op) {
        (op, Nfsstat4::NOTSUPP)
    } else {
        (ops::ILLEGAL, Nfsstat4::OP_ILLEGAL)
    }
}

fn peek_u32(c: &DdpCursor<'_>) -> u32 {
    let at = c.position();
    c.input()
        .get(at..at + 4)
        .map_or(u32::MAX, |w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

/// What SEQUENCE decided.
enum Seq {
    /// A new request: go on.
    New(Nfsstat4),
    /// A retry whose reply is cached: these octets are the whole COMPOUND4res.
    Replay,
}

/// Runs one COMPOUND: decodes `c`, encodes the COMPOUND4res into `e`.
pub(crate) fn compound<'d>(
    sh: &'d NfsShared,
    conn: &'d mut Nfs41Conn,
    c: &mut DdpCursor<'d>,
    e: &mut DdpEncoder<'_, 'd>,
) -> Result<(), ProcError> {
    let tag = c.string(NAME_LIMIT)?;
    let minor = c.u32()?;
    let count = c.u32()?;
    let start = e.written().len();
    if minor != crate::nfs::v41::MINOR_VERSION {
        // RFC 8881 §16.2.3: an empty result array.
        c.skip_rest();
        e.u32(Nfsstat4::MINOR_VERS_MISMATCH.0)
            .and_then(|()| e.string(tag))
            .and_then(|()| e.u32(0))
            .map_err(ProcError::Results)?;
        return Ok(());
    }
    let mut ctx = Ctx {
        sh,
        cur: None,
        saved: None,
        session: None,
        fore: ChannelAttrs4 {
            maxoperations: MAX_OPS,
            maxresponsesize: u32::MAX,
            ..ChannelAttrs4::default()
        },
        cur_stateid: None,
    };
    // The first operation is decoded before anything is written: a SEQUENCE retry is
    // answered with the cached reply in its place.
    let first = if count > 0 {
        let n = peek_u32(c);
        Some(ArgOp::decode(c).map_err(|_| n))
    } else {
        None
    };
    let mut seq_status = None;
    if let Some(Ok(ArgOp::Sequence(a))) = &first {
        match sequence(&mut ctx, a, e) {
            Seq::Replay => {
                c.skip_rest();
                return Ok(());
            }
            Seq::New(s) => seq_status = Some(s),
        }
    }
    let r = run(&mut ctx, conn, c, e, tag, count, first, seq_status);
    // The slot (if SEQUENCE took one) keeps this reply for a retry, however it ended.
    if let Some((sid, slot, _)) = ctx.session {
        let cacheable = r.is_ok()
            && e.write_items().is_empty()
            && e.written().len() - start <= ctx.fore.maxresponsesize_cached.max(1024) as usize;
        let mut t = sh.v41().lock();
        if let Some(s) = t.sessions.get_mut(&sid).and_then(|s| s.slots.get_mut(slot)) {
            s.reply = if cacheable {
                // The slot's buffer is reused: no allocation once it has grown.
                s.cache.clear();
                s.cache.extend_from_slice(&e.written()[start..]);
                SlotReply::Cached
            } else {
                SlotReply::Uncached
            };
        }
    }
    r
}

/// SEQUENCE (RFC 8881 §18.46): checks the slot and answers a retry from its cache.
fn sequence(ctx: &mut Ctx<'_>, a: &SequenceArgs, e: &mut DdpEncoder<'_, '_>) -> Seq {
    let now = ctx.sh.v41().now();
    let mut t = ctx.sh.v41().lock();
    let lease = u64::from(t.limits.lease_secs);
    let Some(s) = t.sessions.get(&a.sessionid) else {
        return Seq::New(Nfsstat4::BADSESSION);
    };
    let client = s.client;
    let fore = s.fore;
    let expired = t
        .clients
        .get(&client)
        .is_none_or(|c| now.saturating_sub(c.renewed) > lease);
    if expired {
        t.drop_client(client);
        return Seq::New(Nfsstat4::BADSESSION);
    }
    let Some(s) = t.sessions.get_mut(&a.sessionid) else {
        return Seq::New(Nfsstat4::BADSESSION);
    };
    let Some(slot) = s.slots.get_mut(a.slotid as usize) else {
        return Seq::New(Nfsstat4::BADSLOT);
    };
    if a.sequenceid == slot.seqid && slot.seqid != 0 {
        return match slot.reply {
            SlotReply::Cached => {
                // The cached octets are whole words; a reply buffer too small for them
                // is an overrun the transport reports, as for the original.
                if e.opaque_fixed(&slot.cache).is_err() {
                    return Seq::New(Nfsstat4::REP_TOO_BIG);
                }
                Seq::Replay
            }
            SlotReply::InProgress => Seq::New(Nfsstat4::DELAY),
            SlotReply::Uncached | SlotReply::Unused => Seq::New(Nfsstat4::RETRY_UNCACHED_REP),
        };
    }
    if a.sequenceid != slot.seqid.wrapping_add(1) {
        return Seq::New(Nfsstat4::SEQ_MISORDERED);
    }
    slot.seqid = a.sequenceid;
    slot.reply = SlotReply::InProgress;
    ctx.session = Some((a.sessionid, a.slotid as usize, client));
    ctx.fore = fore;
    if let Some(c) = t.clients.get_mut(&client) {
        c.renewed = now;
    }
    Seq::New(Nfsstat4::OK)
}

#[allow(clippy::too_many_arguments)]
fn run<'d>(
    ctx: &mut Ctx<'d>,
    conn: &'d mut Nfs41Conn,
    c: &mut DdpCursor<'d>,
    e: &mut DdpEncoder<'_, 'd>,
    tag: &[u8],
    count: u32,
    first: Option<Result<ArgOp<'d>, u32>>,
    seq_status: Option<Nfsstat4>,
) -> Result<(), ProcError> {
    let sh = ctx.sh;
    let status_at = e.written().len();
    let r = e.u32(0).and_then(|()| e.string(tag));
    r.map_err(ProcError::Results)?;
    let count_at = e.written().len();
    e.u32(0).map_err(ProcError::Results)?;
    let Nfs41Conn {
        data,
        attrs: abuf,
        dir,
        dirbuf,
        link,
    } = conn;
    let max_read = sh.config().max_read as usize;
    if data.len() < max_read {
        data.resize(max_read, 0);
    }
    // Each READ takes its data from the front of what is left of this buffer, so the
    // data of every READ of the COMPOUND lives until the reply is sent.
    let mut rbuf: &'d mut [u8] = &mut data[..];
    let link: &'d mut Vec<u8> = link;
    let mut link = Some(link);
    let mut done = 0u32;
    let mut status = Nfsstat4::OK;
    let mut next = first;
    for i in 0..count {
        let op = match next.take() {
            Some(op) => op,
            None => {
                let n = peek_u32(c);
                ArgOp::decode(c).map_err(|_| n)
            }
        };
        done += 1;
        let op = match op {
            Ok(op) => op,
            Err(n) => {
                // Where its arguments end is unknown: the rest goes undecoded.
                c.skip_rest();
                let (opnum, s) = undecodable(n);
                status = plain(e, opnum, Err(s))?;
                break;
            }
        };
        let num = op.op();
        let limit = ctx.fore.maxoperations.clamp(1, MAX_OPS);
        // Where the operation may appear (RFC 8881 §2.6.3.1.1.8, §18.46.3).
        let placement = if i == 0 {
            match num {
                ops::SEQUENCE => None,
                n if sessionless(n) && count > 1 => Some(Nfsstat4::NOT_ONLY_OP),
                n if sessionless(n) => None,
                _ => Some(Nfsstat4::OP_NOT_IN_SESSION),
            }
        } else if num == ops::SEQUENCE {
            Some(Nfsstat4::SEQUENCE_POS)
        } else if i >= limit {
            Some(Nfsstat4::TOO_MANY_OPS)
        } else {
            None
        };
        let s = match placement {
            Some(s) => plain(e, num, Err(s))?,
            None => match op {
                ArgOp::Sequence(a) => {
                    let s = seq_status.unwrap_or(Nfsstat4::SERVERFAULT);
                    let t = sh.v41().lock();
                    let slots = t
                        .sessions
                        .get(&a.sessionid)
                        .map_or(1, |s| s.slots.len() as u32);
                    let status_flags = ctx.session.map_or(0, |(_, _, c)| t.status_flags(c));
                    drop(t);
                    let body = crate::nfs::v41::compound::SequenceRes {
                        sessionid: a.sessionid,
                        sequenceid: a.sequenceid,
                        slotid: a.slotid,
                        highest_slotid: slots - 1,
                        target_highest_slotid: slots - 1,
                        status_flags,
                    };
                    let r = if s.is_ok() {
                        Ok(ResBody::Sequence(body))
                    } else {
                        Err(s)
                    };
                    plain(e, num, r)?
                }
                ArgOp::Read(a) => {
                    let r = read(ctx, &a, &mut rbuf);
                    match r {
                        Ok((eof, got)) => {
                            let r = ResOp {
                                op: num,
                                status: Nfsstat4::OK,
                                body: ResBody::Read(eof, got),
                            };
                            r.encode(e).map_err(ProcError::Results)?;
                            if !e.write_items().is_empty() {
                                bump(&sh.counters.nfs4[ops::READ as usize].write_chunks);
                            }
                            Nfsstat4::OK
                        }
                        Err(s) => plain(e, num, Err(s))?,
                    }
                }
                ArgOp::Readlink => {
                    let r = match (ctx.cur, link.take()) {
                        (None, _) => Err(Nfsstat4::NOFILEHANDLE),
                        (Some(_), None) => Err(Nfsstat4::SERVERFAULT),
                        (Some(k), Some(buf)) => {
                            buf.clear();
                            match sh.backend().readlink(k, buf) {
                                Ok(()) => Ok(&buf[..]),
                                Err(s) => Err(st(s)),
                            }
                        }
                    };
                    match r {
                        Ok(target) => {
                            let r = ResOp {
                                op: num,
                                status: Nfsstat4::OK,
                                body: ResBody::Readlink(target),
                            };
                            r.encode(e).map_err(ProcError::Results)?;
                            Nfsstat4::OK
                        }
                        Err(s) => plain(e, num, Err(s))?,
                    }
                }
                ArgOp::Getattr(mask) => getattr(ctx, &mask.0, abuf, e)?,
                ArgOp::Readdir(a) => readdir(ctx, &a, abuf, dir, dirbuf, e)?,
                other => {
                    let mut fh = None;
                    let r = op_plain(ctx, other, &mut fh);
                    plain(e, num, r)?
                }
            },
        };
        if let Some(k) = sh.counters.nfs4.get(num as usize) {
            bump(&k.calls);
            if !s.is_ok() {
                bump(&k.errors);
            }
        }
        status = s;
        if !s.is_ok() {
            break;
        }
    }
    if done < count {
        // Operations after the first failure are neither decoded nor run.
        c.skip_rest();
    }
    e.patch_u32(status_at, status.0);
    e.patch_u32(count_at, done);
    Ok(())
}

fn cur(ctx: &Ctx<'_>) -> Result<FileKey, Nfsstat4> {
    ctx.cur.ok_or(Nfsstat4::NOFILEHANDLE)
}

/// The client of the COMPOUND's session; operations on state need one.
fn client(ctx: &Ctx<'_>) -> Result<u64, Nfsstat4> {
    ctx.session
        .map(|(_, _, c)| c)
        .ok_or(Nfsstat4::OP_NOT_IN_SESSION)
}

/// Resolves the special "current stateid" (seqid 1, other all zero).
fn resolve(ctx: &Ctx<'_>, s: &Stateid4) -> Result<Stateid4, Nfsstat4> {
    if s.seqid == 1 && s.other == [0; 12] {
        return ctx.cur_stateid.ok_or(Nfsstat4::BAD_STATEID);
    }
    Ok(*s)
}

fn ftype(ctx: &Ctx<'_>, k: FileKey) -> Result<Ftype3, Nfsstat4> {
    ctx.sh.backend().getattr(k).map(|a| a.ftype).map_err(st)
}

fn dir_of(ctx: &Ctx<'_>) -> Result<FileKey, Nfsstat4> {
    let k = cur(ctx)?;
    match ftype(ctx, k)? {
        Ftype3::Dir => Ok(k),
        Ftype3::Lnk => Err(Nfsstat4::SYMLINK),
        _ => Err(Nfsstat4::NOTDIR),
    }
}

/// Checks a component name (RFC 8881 §1.8.2.1 and §18.x): never empty, never "." or
/// "..", no "/" or NUL, valid UTF-8, within the backend's length.
fn name(ctx: &Ctx<'_>, n: &[u8]) -> Result<(), Nfsstat4> {
    if n.is_empty() {
        return Err(Nfsstat4::INVAL);
    }
    if n == b"." || n == b".." || n.contains(&b'/') {
        return Err(Nfsstat4::BADNAME);
    }
    if n.contains(&0) || core::str::from_utf8(n).is_err() {
        return Err(Nfsstat4::BADCHAR);
    }
    if n.len() > ctx.sh.backend().limits().name_max as usize {
        return Err(Nfsstat4::NAMETOOLONG);
    }
    Ok(())
}

fn change_of(ctx: &Ctx<'_>, k: FileKey) -> u64 {
    ctx.sh.backend().getattr(k).map_or(0, |a| attrs::change(&a))
}

fn cinfo(before: u64, after: u64) -> ChangeInfo4 {
    ChangeInfo4 {
        atomic: false,
        before,
        after,
    }
}

/// READ (RFC 8881 §18.22): the data is read into the front of `rbuf`, which then keeps
/// only the rest.
fn read<'d>(
    ctx: &mut Ctx<'_>,
    a: &crate::nfs::v41::compound::ReadArgs,
    rbuf: &mut &'d mut [u8],
) -> Result<(bool, &'d [u8]), Nfsstat4> {
    let k = cur(ctx)?;
    let client = client(ctx)?;
    let sid = resolve(ctx, &a.stateid)?;
    ctx.sh
        .v41()
        .lock()
        .check_stateid(client, &sid, k, StateidUse::Read)?;
    // The reply must fit the session's fore channel: leave room for the other results.
    let room = ctx.fore.maxresponsesize.saturating_sub(1024) as usize;
    let want = (a.count as usize).min(rbuf.len()).min(room);
    let buf = core::mem::take(rbuf);
    let (mine, rest) = buf.split_at_mut(want);
    let r = ctx.sh.backend().read(k, a.offset, mine);
    let r = match r {
        Ok(r) => r,
        Err(s) => {
            // Give the buffer back for later READs.
            *rbuf = rest;
            let _ = mine;
            return Err(if s == Nfsstat3::ISDIR {
                Nfsstat4::ISDIR
            } else {
                st(s)
            });
        }
    };
    *rbuf = rest;
    let n = r.len.min(mine.len());
    let data: &'d [u8] = &mine[..n];
    Ok((r.eof, data))
}

fn getattr<'d>(ctx: &Ctx<'_>, words: &[u32], abuf: &mut Vec<u8>, e: &mut DdpEncoder<'_, 'd>) -> Op {
    let r = cur(ctx).and_then(|k| {
        let f = ctx.sh.backend().getattr(k).map_err(st)?;
        let req = attrs::read_mask(words);
        abuf.clear();
        Ok(fattr(ctx, k, &f, &req, abuf))
    });
    match r {
        Ok(mask) => {
            let w = (|| {
                e.u32(ops::GETATTR)?;
                e.u32(0)?;
                put_mask(e, &mask)?;
                e.opaque(abuf)
            })();
            w.map_err(ProcError::Results)?;
            Ok(Nfsstat4::OK)
        }
        Err(s) => plain(e, ops::GETATTR, Err(s)),
    }
}

fn put_mask(e: &mut DdpEncoder<'_, '_>, m: &Mask) -> Result<(), crate::ddp::DdpEncodeError> {
    let n = m.iter().rposition(|&w| w != 0).map_or(0, |i| i + 1);
    e.u32(n as u32)?;
    m[..n].iter().try_for_each(|&w| e.u32(w))
}

/// Appends the `attrlist4` of `f` for `req` to `out`; returns the mask written.
fn fattr(
    ctx: &Ctx<'_>,
    k: FileKey,
    f: &crate::nfs::v3::types::Fattr3,
    req: &Mask,
    out: &mut Vec<u8>,
) -> Mask {
    let sh = ctx.sh;
    let fh = sh.handle(k);
    let space = if attrs::wants_space(req) {
        sh.backend().fsstat(k).ok()
    } else {
        None
    };
    let lease = sh.v41().lock().limits.lease_secs;
    let cfg = sh.config();
    let actx = AttrCtx {
        fh: fh.as_bytes(),
        limits: sh.backend().limits(),
        max_read: cfg.max_read,
        max_write: cfg.max_write,
        lease,
        space,
    };
    attrs::encode(out, req, f, &actx)
}

/// READDIR (RFC 8881 §18.23). Cookies 0-2 are reserved, so the backend's cookies are
/// shifted by 2; entries are encoded into a scratch buffer first, so that the status is
/// known (TOOSMALL when not even one fits) before anything is written.
fn readdir<'d>(
    ctx: &Ctx<'_>,
    a: &crate::nfs::v41::compound::ReaddirArgs,
    abuf: &mut Vec<u8>,
    dir: &mut Vec<DirEntry>,
    out: &mut Vec<u8>,
    e: &mut DdpEncoder<'_, 'd>,
) -> Op {
    let sh = ctx.sh;
    let r = (|| {
        let d = dir_of(ctx)?;
        let verf = sh.backend().cookieverf(d).map_err(st)?.0;
        let cookie = match a.cookie {
            0 => 0,
            1 | 2 => return Err(Nfsstat4::BAD_COOKIE),
            c => {
                if a.cookieverf != [0; 8] && a.cookieverf != verf {
                    return Err(Nfsstat4::NOT_SAME);
                }
                c - 2
            }
        };
        let budget = (a.maxcount as usize)
            .min(sh.config().max_readdir as usize)
            .min(ctx.fore.maxresponsesize.saturating_sub(512) as usize);
        let dircount = a.dircount as usize;
        let req = attrs::read_mask(&a.attr_request.0);
        dir.clear();
        out.clear();
        // Each entry takes at least 24 octets (more with attributes).
        let max = budget.saturating_sub(READDIR_FIXED) / 24 + 1;
        let eof = sh
            .backend()
            .readdir(d, cookie, max.min(4096), dir)
            .map_err(st)?;
        let mut used = READDIR_FIXED;
        let mut names = 0usize;
        let mut taken = 0usize;
        for ent in dir.iter() {
            abuf.clear();
            let mask = match sh.backend().getattr(ent.key) {
                Ok(f) => fattr(ctx, ent.key, &f, &req, abuf),
                Err(s) if attrs::has(&req, attrs::a::RDATTR_ERROR) => {
                    abuf.extend_from_slice(&st(s).0.to_be_bytes());
                    let mut m = [0; attrs::WORDS];
                    attrs::set(&mut m, attrs::a::RDATTR_ERROR);
                    m
                }
                // Gone between the listing and now: leave it out.
                Err(_) => continue,
            };
            let nlen = 4 + ent.name.len().div_ceil(4) * 4;
            let words = mask.iter().rposition(|&w| w != 0).map_or(0, |i| i + 1);
            let size = 4 + 8 + nlen + 4 + 4 * words + 4 + abuf.len();
            let dsize = 8 + nlen;
            if used + size > budget || (dircount > 0 && taken > 0 && names + dsize > dircount) {
                break;
            }
            used += size;
            names += dsize;
            taken += 1;
            out.extend_from_slice(&1u32.to_be_bytes());
            out.extend_from_slice(&(ent.cookie + 2).to_be_bytes());
            attrs_opaque(out, &ent.name);
            attrs::put_mask(out, &mask);
            attrs_opaque(out, abuf);
        }
        if taken == 0 && !dir.is_empty() {
            return Err(Nfsstat4::TOOSMALL);
        }
        Ok((verf, eof && taken == dir.len()))
    })();
    match r {
        Ok((verf, eof)) => {
            let w = (|| {
                e.u32(ops::READDIR)?;
                e.u32(0)?;
                e.opaque_fixed(&verf)?;
                e.opaque_fixed(out)?;
                e.optional(false)?;
                e.bool(eof)
            })();
            w.map_err(ProcError::Results)?;
            Ok(Nfsstat4::OK)
        }
        Err(s) => plain(e, ops::READDIR, Err(s)),
    }
}

fn attrs_opaque(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_be_bytes());
    out.extend_from_slice(b);
    out.resize(out.len() + (4 - b.len() % 4) % 4, 0);
}

/// Every operation whose result is encoded at once (nothing in it is borrowed for the
/// reply): what it borrows lives in the server state or in `fh_slot`.
fn op_plain<'s: 'r, 'r>(
    ctx: &mut Ctx<'s>,
    op: ArgOp<'_>,
    fh_slot: &'r mut Option<Handle>,
) -> Result<ResBody<'r>, Nfsstat4> {
    let sh: &'s NfsShared = ctx.sh;
    let b = sh.backend();
    let v41 = sh.v41();
    match op {
        ArgOp::ExchangeId(a) => {
            let now = v41.now();
            let (clientid, sequenceid, confirmed) =
                v41.lock().exchange_id(a.owner, a.verifier, now)?;
            let mut flags = EXCHGID4_FLAG_USE_NON_PNFS;
            if confirmed {
                flags |= EXCHGID4_FLAG_CONFIRMED_R;
            }
            Ok(ResBody::ExchangeId(
                crate::nfs::v41::compound::ExchangeIdRes {
                    clientid,
                    sequenceid,
                    flags,
                    server_minor_id: 0,
                    server_major_id: v41.owner(),
                    server_scope: v41.owner(),
                    impl_id: None,
                },
            ))
        }
        ArgOp::CreateSession(a) => {
            let now = v41.now();
            let (sessionid, fore, flags) = v41.lock().create_session(
                a.clientid,
                a.sequence,
                a.flags,
                &a.fore,
                &a.back,
                a.cb_program,
                now,
            )?;
            // CREATE_SESSION4_FLAG_CONN_BACK_CHAN (RFC 8881 §18.36.3).
            if flags & 0x2 != 0 {
                // Probed by the connection's service once this COMPOUND is answered.
                crate::nfs::server::backchannel::request(
                    crate::nfs::server::backchannel::Binding {
                        client: a.clientid,
                        session: sessionid,
                        program: a.cb_program,
                    },
                );
            }
            Ok(ResBody::CreateSession(
                crate::nfs::v41::compound::CreateSessionRes {
                    sessionid,
                    sequence: a.sequence,
                    flags,
                    fore,
                    back: ChannelAttrs4 {
                        maxrequests: a.back.maxrequests.clamp(1, 16),
                        rdma_ird: None,
                        ..a.back
                    },
                },
            ))
        }
        ArgOp::DestroySession(sid) => {
            let mut t = v41.lock();
            t.sessions.remove(&sid).ok_or(Nfsstat4::BADSESSION)?;
            if ctx.session.is_some_and(|(s, _, _)| s == sid) {
                // Its slot goes with it: nothing left to cache into.
                ctx.session = None;
            }
            Ok(ResBody::None)
        }
        ArgOp::DestroyClientid(id) => {
            v41.lock().destroy_clientid(id)?;
            Ok(ResBody::None)
        }
        ArgOp::ReclaimComplete(one_fs) => {
            let client = client(ctx)?;
            if one_fs {
                return Ok(ResBody::None);
            }
            let mut t = v41.lock();
            let c = t.clients.get_mut(&client).ok_or(Nfsstat4::STALE_CLIENTID)?;
            if c.reclaim_complete {
                return Err(Nfsstat4::COMPLETE_ALREADY);
            }
            c.reclaim_complete = true;
            Ok(ResBody::None)
        }
        ArgOp::SecinfoNoName(_) => {
            cur(ctx)?;
            // The current file handle is consumed (RFC 8881 §18.45.3).
            ctx.cur = None;
            Ok(ResBody::SecinfoNoName(vec![1, 0]))
        }
        ArgOp::PutRootFh => {
            ctx.cur = Some(b.root());
            Ok(ResBody::None)
        }
        ArgOp::PutFh(fh) => {
            // Forged, foreign or malformed handles stop here (the keyed-hash check).
            let k = sh.open(fh).map_err(|_| Nfsstat4::BADHANDLE)?;
            b.getattr(k).map_err(st)?;
            ctx.cur = Some(k);
            Ok(ResBody::None)
        }
        ArgOp::GetFh => {
            let k = cur(ctx)?;
            Ok(ResBody::GetFh(fh_slot.insert(sh.handle(k)).as_bytes()))
        }
        ArgOp::SaveFh => {
            ctx.saved = Some(cur(ctx)?);
            Ok(ResBody::None)
        }
        ArgOp::RestoreFh => {
            ctx.cur = Some(ctx.saved.ok_or(Nfsstat4::RESTOREFH)?);
            Ok(ResBody::None)
        }
        ArgOp::Lookup(n) => {
            let d = dir_of(ctx)?;
            name(ctx, n)?;
            ctx.cur = Some(b.lookup(d, n).map_err(st)?);
            Ok(ResBody::None)
        }
        ArgOp::Lookupp => {
            let d = dir_of(ctx)?;
            // The export root has no parent here: the export is the whole namespace.
            if d == b.root() {
                return Err(Nfsstat4::NOENT);
            }
            ctx.cur = Some(b.lookup(d, b"..").map_err(st)?);
            Ok(ResBody::None)
        }
        ArgOp::Access(want) => {
            let k = cur(ctx)?;
            let t = ftype(ctx, k)?;
            // READ 1, LOOKUP 2, MODIFY 4, EXTEND 8, DELETE 0x10, EXECUTE 0x20. The
            // backend does not check per user (as for NFSv3): grant what the type
            // allows; the client applies the mode bits.
            let allowed = match t {
                Ftype3::Dir => 0x1f,
                _ => 0x2d,
            };
            Ok(ResBody::Access(want & 0x3f, want & allowed))
        }
        ArgOp::Setattr(sid, f) => {
            let k = cur(ctx)?;
            let (s, mask) = attrs::decode_settable(&f.mask.0, f.vals)?;
            // Any attribute change conflicts with others' read delegations (their
            // cached attributes would go stale).
            v41.break_delegations(ctx.session.map(|(_, _, c)| c), k, &sh.counters)?;
            if s.size.is_some() {
                let sid = resolve(ctx, &sid)?;
                let client = client(ctx)?;
                v41.lock()
                    .check_stateid(client, &sid, k, StateidUse::Write)?;
                if ftype(ctx, k)? == Ftype3::Dir {
                    return Err(Nfsstat4::ISDIR);
                }
            }
            b.setattr(k, &s).map_err(st)?;
            Ok(ResBody::Setattr(bitmap(&mask)))
        }
        ArgOp::Open(a) => open(ctx, &a),
        ArgOp::OpenDowngrade(a) => {
            let k = cur(ctx)?;
            let client = client(ctx)?;
            let sid = resolve(ctx, &a.stateid)?;
            let s = v41
                .lock()
                .downgrade(client, &sid, k, a.share_access & 3, a.share_deny & 3)?;
            ctx.cur_stateid = Some(s);
            Ok(ResBody::OpenDowngrade(s))
        }
        ArgOp::Close(_, sid) => {
            let k = cur(ctx)?;
            let client = client(ctx)?;
            let sid = resolve(ctx, &sid)?;
            v41.lock().close(client, &sid, k)?;
            ctx.cur_stateid = None;
            // RFC 8881 §18.2.4: the stateid returned is the invalid special stateid.
            Ok(ResBody::Close(Stateid4 {
                seqid: u32::MAX,
                other: [0; 12],
            }))
        }
        ArgOp::Write(a) => {
            let k = cur(ctx)?;
            let client = client(ctx)?;
            let sid = resolve(ctx, &a.stateid)?;
            v41.lock()
                .check_stateid(client, &sid, k, StateidUse::Write)?;
            v41.break_delegations(Some(client), k, &sh.counters)?;
            let stable = match a.stable {
                0 => StableHow::Unstable,
                1 => StableHow::DataSync,
                2 => StableHow::FileSync,
                _ => return Err(Nfsstat4::BADXDR),
            };
            let n = a.data.len().min(sh.config().max_write as usize);
            let w = b.write(k, a.offset, &a.data[..n], stable).map_err(st)?;
            Ok(ResBody::Write(
                n as u32,
                w.committed as u32,
                b.write_verifier().0,
            ))
        }
        ArgOp::Commit(..) => {
            let k = cur(ctx)?;
            b.commit(k).map_err(st)?;
            Ok(ResBody::Commit(b.write_verifier().0))
        }
        ArgOp::Create(a) => create(ctx, &a),
        ArgOp::Remove(n) => {
            let d = dir_of(ctx)?;
            name(ctx, n)?;
            let before = change_of(ctx, d);
            let k = b.lookup(d, n).map_err(st)?;
            v41.break_delegations(ctx.session.map(|(_, _, c)| c), k, &sh.counters)?;
            let r = if ftype(ctx, k)? == Ftype3::Dir {
                b.rmdir(d, n)
            } else {
                b.remove(d, n)
            };
            r.map_err(st)?;
            Ok(ResBody::Remove(cinfo(before, change_of(ctx, d))))
        }
        ArgOp::Rename(from, to) => {
            let src = ctx.saved.ok_or(Nfsstat4::NOFILEHANDLE)?;
            let dst = dir_of(ctx)?;
            if ftype(ctx, src)? != Ftype3::Dir {
                return Err(Nfsstat4::NOTDIR);
            }
            name(ctx, from)?;
            name(ctx, to)?;
            // The file renamed, and the one the new name replaces.
            let me = ctx.session.map(|(_, _, c)| c);
            for (dir, n) in [(src, from), (dst, to)] {
                if let Ok(k) = b.lookup(dir, n) {
                    v41.break_delegations(me, k, &sh.counters)?;
                }
            }
            let (b1, b2) = (change_of(ctx, src), change_of(ctx, dst));
            b.rename(src, from, dst, to).map_err(st)?;
            Ok(ResBody::Rename(
                cinfo(b1, change_of(ctx, src)),
                cinfo(b2, change_of(ctx, dst)),
            ))
        }
        ArgOp::Link(n) => {
            let file = ctx.saved.ok_or(Nfsstat4::NOFILEHANDLE)?;
            let d = dir_of(ctx)?;
            name(ctx, n)?;
            if ftype(ctx, file)? == Ftype3::Dir {
                return Err(Nfsstat4::ISDIR);
            }
            let before = change_of(ctx, d);
            b.link(file, d, n).map_err(st)?;
            Ok(ResBody::Link(cinfo(before, change_of(ctx, d))))
        }
        ArgOp::TestStateid(ids) => {
            let client = client(ctx)?;
            let t = v41.lock();
            let codes = ids
                .iter()
                .map(|s| match t.find_delegation(client, s) {
                    Some(Ok(_)) => Nfsstat4::OK,
                    Some(Err(e)) => e,
                    None => match t.find_open(client, s) {
                        Ok(_) => Nfsstat4::OK,
                        Err(e) => e,
                    },
                })
                .collect();
            Ok(ResBody::TestStateid(codes))
        }
        ArgOp::FreeStateid(s) => {
            let client = client(ctx)?;
            let mut t = v41.lock();
            if let Some(r) = t.free_delegation(client, &s) {
                return r.map(|()| ResBody::None);
            }
            // An open stateid is freed by CLOSE; while open it holds state.
            t.find_open(client, &s)?;
            Err(Nfsstat4::LOCKS_HELD)
        }
        ArgOp::Delegreturn(s) => {
            let k = cur(ctx)?;
            let client = client(ctx)?;
            let s = resolve(ctx, &s)?;
            v41.lock().delegreturn(client, &s, k)?;
            bump(&sh.counters.delegations_returned);
            Ok(ResBody::None)
        }
        // Answered by the COMPOUND loop itself.
        ArgOp::Sequence(_)
        | ArgOp::Read(_)
        | ArgOp::Readlink
        | ArgOp::Getattr(_)
        | ArgOp::Readdir(_) => Err(Nfsstat4::SERVERFAULT),
    }
}

fn bitmap(m: &Mask) -> crate::nfs::v41::Bitmap4 {
    let n = m.iter().rposition(|&w| w != 0).map_or(0, |i| i + 1);
    crate::nfs::v41::Bitmap4(m[..n].to_vec())
}

/// OPEN (RFC 8881 §18.16) with CLAIM_NULL or CLAIM_FH.
fn open<'r>(ctx: &mut Ctx<'_>, a: &OpenArgs<'_>) -> Result<ResBody<'r>, Nfsstat4> {
    let sh = ctx.sh;
    let b = sh.backend();
    let client = client(ctx)?;
    let access = a.share_access & 3;
    let deny = a.share_deny & 3;
    // The bits above the access mode are delegation wishes (OPEN4_SHARE_ACCESS_WANT_*).
    let want = a.share_access & deleg::WANT_DELEG_MASK;
    if access == 0 || a.share_deny & !3 != 0 {
        return Err(Nfsstat4::INVAL);
    }
    // Opening for writing (or creating, which may truncate) conflicts with the read
    // delegations of other clients.
    let writes = access & ACCESS_WRITE != 0 || matches!(a.how, OpenHow::Create(_));
    let breaks = |k: FileKey| -> Result<(), Nfsstat4> {
        if writes {
            sh.v41().break_delegations(Some(client), k, &sh.counters)?;
        }
        Ok(())
    };
    let mut attrset = [0u32; attrs::WORDS];
    let mut claimed = false;
    let (file, ci) = match a.claim {
        // This server keeps no state across restarts, so there is no grace period in
        // which to reclaim (RFC 8881 §8.4.2.1).
        OpenClaim::Previous(_) => return Err(Nfsstat4::NO_GRACE),
        OpenClaim::Fh => {
            if !matches!(a.how, OpenHow::NoCreate) {
                return Err(Nfsstat4::INVAL);
            }
            let k = cur(ctx)?;
            breaks(k)?;
            (k, cinfo(0, 0))
        }
        // An open the client did under its delegation, told to the server while it
        // returns the delegation (RFC 8881 §10.4.4): the delegation is the client's own,
        // so it conflicts with nothing; it must still be held (a recall in progress is
        // the usual case).
        OpenClaim::DelegCur(..) | OpenClaim::DelegCurFh(_) => {
            if !matches!(a.how, OpenHow::NoCreate) {
                return Err(Nfsstat4::INVAL);
            }
            let (sid, k) = match a.claim {
                OpenClaim::DelegCur(sid, n) => {
                    let d = dir_of(ctx)?;
                    name(ctx, n)?;
                    (sid, b.lookup(d, n).map_err(st)?)
                }
                OpenClaim::DelegCurFh(sid) => (sid, cur(ctx)?),
                _ => return Err(Nfsstat4::SERVERFAULT),
            };
            let t = sh.v41().lock();
            match t.find_delegation(client, &sid) {
                Some(Ok(d)) if d.file == k => {}
                Some(Err(e)) => return Err(e),
                _ => return Err(Nfsstat4::BAD_STATEID),
            }
            claimed = true;
            (k, cinfo(0, 0))
        }
        OpenClaim::Null(n) => {
            let d = dir_of(ctx)?;
            name(ctx, n)?;
            let before = change_of(ctx, d);
            if writes {
                if let Ok(k) = b.lookup(d, n) {
                    breaks(k)?;
                }
            }
            let k = match &a.how {
                OpenHow::NoCreate => b.lookup(d, n).map_err(st)?,
                OpenHow::Create(how) => {
                    let (mode, fa) = match how {
                        CreateHow::Unchecked(f) => (CreateMode::Unchecked, Some(f)),
                        CreateHow::Guarded(f) => (CreateMode::Guarded, Some(f)),
                        CreateHow::Exclusive(v) => (CreateMode::Exclusive(Verf(*v)), None),
                        CreateHow::Exclusive41(v, f) => (CreateMode::Exclusive(Verf(*v)), Some(f)),
                    };
                    let (s, m) = match fa {
                        Some(f) => attrs::decode_settable(&f.mask.0, f.vals)?,
                        None => (Sattr3::default(), [0; attrs::WORDS]),
                    };
                    let k = b.create(d, n, mode, &s).map_err(st)?;
                    if let CreateMode::Exclusive(_) = mode {
                        if fa.is_some() && s != Sattr3::default() {
                            b.setattr(k, &s).map_err(st)?;
                        }
                    }
                    attrset = m;
                    k
                }
            };
            (k, cinfo(before, change_of(ctx, d)))
        }
    };
    match ftype(ctx, file)? {
        Ftype3::Reg => {}
        Ftype3::Dir => return Err(Nfsstat4::ISDIR),
        Ftype3::Lnk => return Err(Nfsstat4::SYMLINK),
        _ => return Err(Nfsstat4::WRONG_TYPE),
    }
    let (stateid, delegation) = {
        let mut t = sh.v41().lock();
        let stateid = t.open(client, a.owner, file, access, deny)?;
        let granted = if claimed {
            None
        } else {
            t.grant_read_delegation(client, file, access, want)
        };
        (stateid, granted)
    };
    ctx.cur = Some(file);
    ctx.cur_stateid = Some(stateid);
    let delegation = match delegation {
        Some(s) => {
            sh.v41().note_granted();
            bump(&sh.counters.delegations_granted);
            // Who may read without asking the server: the client checks ACCESS
            // itself (as Linux nfsd, an empty ACE that grants nothing extra).
            OpenDelegation::Read(
                s,
                false,
                Nfsace4 {
                    acetype: 0,
                    flag: 0,
                    access_mask: 0,
                    who: b"",
                },
            )
        }
        None => OpenDelegation::None,
    };
    Ok(ResBody::Open(OpenRes {
        stateid,
        cinfo: ci,
        rflags: OPEN4_RESULT_LOCKTYPE_POSIX,
        attrset: bitmap(&attrset),
        delegation,
    }))
}

/// CREATE (RFC 8881 §18.4): directories and symbolic links.
fn create<'r>(ctx: &mut Ctx<'_>, a: &CreateArgs<'_>) -> Result<ResBody<'r>, Nfsstat4> {
    let b = ctx.sh.backend();
    let d = dir_of(ctx)?;
    name(ctx, a.name)?;
    let (s, m) = attrs::decode_settable(&a.attrs.mask.0, a.attrs.vals)?;
    let before = change_of(ctx, d);
    let k = match a.objtype {
        CreateType::Plain(crate::nfs::v41::ftype::NF4DIR) => b.mkdir(d, a.name, &s),
        CreateType::Link(target) => {
            if target.contains(&0) {
                return Err(Nfsstat4::INVAL);
            }
            b.symlink(d, a.name, target, &s)
        }
        _ => return Err(Nfsstat4::NOTSUPP),
    }
    .map_err(st)?;
    ctx.cur = Some(k);
    Ok(ResBody::Create(
        cinfo(before, change_of(ctx, d)),
        bitmap(&m),
    ))
}
