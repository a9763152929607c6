//! The NFSv4.1 client's callback service (RFC 8881 §20): what answers the server's
//! calls on the backchannel of the client's own connection (RFC 8167, through
//! `rpcrdma::Requester::connect_serving`).
//!
//! - CB_NULL: an empty success (the server's probe of the callback path).
//! - CB_COMPOUND with CB_SEQUENCE (§20.9) first: the session must be ours and the slot
//!   the one slot of the backchannel this client asks for (slot 0); the sequence id must
//!   be the next one (a retry of the last one gets NFS4ERR_RETRY_UNCACHED_REP: no reply
//!   is cached, §2.10.6.1.3; anything else NFS4ERR_SEQ_MISORDERED).
//! - CB_RECALL (§20.2): of a delegation the client holds (its OPENs ask for none unless
//!   [`Nfs41Client::set_want_delegations`](super::client::Nfs41Client::set_want_delegations)):
//!   NFS4_OK, and the delegation is queued for the client to return with DELEGRETURN
//!   (§10.4.1) the next time it runs ([`CallbackService::take_recalled`]). Of one it does
//!   not hold: NFS4ERR_BADHANDLE, as the Linux client answers.
//! - Any other operation: NFS4ERR_OP_ILLEGAL (§20.13), or NFS4ERR_SEQUENCE_POS for a
//!   CB_SEQUENCE that is not first; the COMPOUND stops at the first failure.
//!
//! Malformed arguments get GARBAGE_ARGS, another program or version PROG_UNAVAIL /
//! PROG_MISMATCH via the engine's RPC errors; nothing here panics on what a server sends.

use rpcrdma::{CallView, ReplyWriter, Service, ServiceError};

use super::{Nfsstat4, SessionId, Stateid4};
use crate::rpc::CallHeader;

/// CB_SEQUENCE's operation number.
pub const OP_CB_SEQUENCE: u32 = 11;
/// CB_RECALL's operation number.
pub const OP_CB_RECALL: u32 = 4;
/// OP_CB_ILLEGAL.
pub const OP_CB_ILLEGAL: u32 = 10044;

/// What the callback service has answered, for the client's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallbackStats {
    /// CB_NULL calls answered.
    pub nulls: u64,
    /// CB_COMPOUND calls answered.
    pub compounds: u64,
    /// CB_RECALLs answered.
    pub recalls: u64,
    /// Of those, recalls of a delegation held (answered NFS4_OK).
    pub recalls_held: u64,
    /// Calls refused (wrong program or version, garbage).
    pub refused: u64,
}

/// The client's callback program (see the module documentation).
#[derive(Debug)]
pub struct CallbackService {
    program: u32,
    /// The session whose backchannel this is, once CREATE_SESSION returned it.
    session: Option<SessionId>,
    /// The sequence id last accepted on slot 0.
    slot_seq: u32,
    stats: CallbackStats,
    /// Delegations held: stateid and file handle.
    held: Vec<(Stateid4, Vec<u8>)>,
    /// Delegations recalled, for the client to return.
    recalled: Vec<(Stateid4, Vec<u8>)>,
}

impl CallbackService {
    /// Answers calls to `program` (the `csa_cb_program` the client gives).
    pub fn new(program: u32) -> Self {
        CallbackService {
            program,
            session: None,
            slot_seq: 0,
            stats: CallbackStats::default(),
            held: Vec::new(),
            recalled: Vec::new(),
        }
    }

    /// Records a delegation OPEN gave the client, so its recall is honoured.
    pub fn hold(&mut self, stateid: Stateid4, fh: &[u8]) {
        self.held.push((stateid, fh.to_vec()));
    }

    /// Forgets a delegation (returned, or given up).
    pub fn forget(&mut self, stateid: &Stateid4) {
        self.held.retain(|(s, _)| s.other != stateid.other);
        self.recalled.retain(|(s, _)| s.other != stateid.other);
    }

    /// Delegations held and not recalled.
    pub fn held(&self) -> impl Iterator<Item = &Stateid4> {
        self.held.iter().map(|(s, _)| s)
    }

    /// The delegations recalled since the last call, to be returned.
    pub fn take_recalled(&mut self) -> Vec<(Stateid4, Vec<u8>)> {
        core::mem::take(&mut self.recalled)
    }

    /// CB_RECALL of `stateid` on `fh`: NFS4_OK when held (it is then queued for
    /// return), NFS4ERR_BADHANDLE otherwise.
    fn recall(&mut self, stateid: Stateid4, fh: &[u8]) -> Nfsstat4 {
        match self
            .held
            .iter()
            .position(|(s, h)| s.other == stateid.other && h[..] == *fh)
        {
            Some(i) => {
                self.recalled.push(self.held.swap_remove(i));
                self.stats.recalls_held += 1;
                Nfsstat4::OK
            }
            None => Nfsstat4::BADHANDLE,
        }
    }

    /// The session the callbacks belong to (set once CREATE_SESSION succeeded).
    pub fn set_session(&mut self, session: SessionId) {
        self.session = Some(session);
        self.slot_seq = 0;
    }

    /// What was answered.
    pub fn stats(&self) -> CallbackStats {
        self.stats
    }
}

/// A bounds-checked XDR reader over a call's arguments.
struct Args<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Args<'a> {
    fn u32(&mut self) -> Result<u32, ServiceError> {
        let w = self
            .b
            .get(self.at..self.at + 4)
            .ok_or(ServiceError::GarbageArgs)?;
        self.at += 4;
        Ok(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
    }
    fn fixed(&mut self, n: usize) -> Result<&'a [u8], ServiceError> {
        let end = self.at.checked_add(n).ok_or(ServiceError::GarbageArgs)?;
        let v = self.b.get(self.at..end).ok_or(ServiceError::GarbageArgs)?;
        self.at = end.next_multiple_of(4);
        Ok(v)
    }
    fn opaque(&mut self, max: usize) -> Result<&'a [u8], ServiceError> {
        let n = self.u32()? as usize;
        if n > max {
            return Err(ServiceError::GarbageArgs);
        }
        self.fixed(n)
    }
}

/// Where a reply is written: the engine's writer (or a vector, in tests).
trait Sink {
    fn bytes(&mut self, b: &[u8]) -> Result<(), ServiceError>;
}

impl Sink for ReplyWriter<'_> {
    fn bytes(&mut self, b: &[u8]) -> Result<(), ServiceError> {
        self.put(b).map_err(|_| ServiceError::SystemErr)
    }
}

#[cfg(test)]
impl Sink for Vec<u8> {
    fn bytes(&mut self, b: &[u8]) -> Result<(), ServiceError> {
        self.extend_from_slice(b);
        Ok(())
    }
}

fn put(w: &mut impl Sink, words: &[u32]) -> Result<(), ServiceError> {
    for v in words {
        w.bytes(&v.to_be_bytes())?;
    }
    Ok(())
}

/// One operation's outcome: its status and result words (after the status).
struct OpResult {
    op: u32,
    status: Nfsstat4,
    body: [u32; 8],
    body_len: usize,
}

impl CallbackService {
    fn sequence(&mut self, a: &mut Args<'_>) -> Result<OpResult, ServiceError> {
        let sid = a.fixed(16)?;
        let (seq, slot, highest, _cachethis) = (a.u32()?, a.u32()?, a.u32()?, a.u32()?);
        // csa_referring_call_lists<>: sessionid, referring_call4<> (sequenceid, slotid).
        for _ in 0..a.u32()? {
            a.fixed(16)?;
            let n = a.u32()?;
            for _ in 0..n {
                a.u32()?;
                a.u32()?;
            }
        }
        let mut r = OpResult {
            op: OP_CB_SEQUENCE,
            status: Nfsstat4::OK,
            body: [0; 8],
            body_len: 0,
        };
        let ours = self.session.as_ref().is_some_and(|s| s[..] == *sid);
        r.status = if !ours {
            Nfsstat4::BADSESSION
        } else if slot != 0 || highest != 0 {
            Nfsstat4::BADSLOT
        } else if seq == self.slot_seq.wrapping_add(1) {
            self.slot_seq = seq;
            Nfsstat4::OK
        } else if seq == self.slot_seq && seq != 0 {
            Nfsstat4::RETRY_UNCACHED_REP
        } else {
            Nfsstat4::SEQ_MISORDERED
        };
        if r.status.is_ok() {
            // CB_SEQUENCE4resok: sessionid, sequenceid, slotid, highest_slotid,
            // target_highest_slotid.
            for (i, c) in sid.chunks_exact(4).enumerate() {
                r.body[i] = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
            }
            r.body[4] = seq;
            r.body[5] = 0;
            r.body[6] = 0;
            r.body[7] = 0;
            r.body_len = 8;
        }
        Ok(r)
    }

    fn compound(
        &mut self,
        a: &mut Args<'_>,
        w: &mut impl Sink,
        xid: u32,
    ) -> Result<(), ServiceError> {
        let tag = a.opaque(1024)?;
        let _minor = a.u32()?;
        let _ident = a.u32()?;
        let n = a.u32()?;
        if n > 64 {
            return Err(ServiceError::GarbageArgs);
        }
        let mut results: Vec<OpResult> = Vec::with_capacity(n as usize);
        for i in 0..n {
            let op = a.u32()?;
            let r = match op {
                OP_CB_SEQUENCE if i == 0 => self.sequence(a)?,
                OP_CB_SEQUENCE => OpResult {
                    op,
                    status: Nfsstat4::SEQUENCE_POS,
                    body: [0; 8],
                    body_len: 0,
                },
                OP_CB_RECALL => {
                    // stateid4 (seqid, other[12]), truncate, nfs_fh4.
                    let seqid = a.u32()?;
                    let mut other = [0u8; 12];
                    other.copy_from_slice(a.fixed(12)?);
                    a.u32()?;
                    let fh = a.opaque(128)?;
                    self.stats.recalls += 1;
                    let status = if results.first().is_some_and(|r| r.op == OP_CB_SEQUENCE) {
                        self.recall(Stateid4 { seqid, other }, fh)
                    } else {
                        Nfsstat4::OP_NOT_IN_SESSION
                    };
                    OpResult {
                        op,
                        status,
                        body: [0; 8],
                        body_len: 0,
                    }
                }
                _ => OpResult {
                    op: OP_CB_ILLEGAL,
                    status: Nfsstat4::OP_ILLEGAL,
                    body: [0; 8],
                    body_len: 0,
                },
            };
            let failed = !r.status.is_ok();
            results.push(r);
            if failed {
                break;
            }
        }
        self.stats.compounds += 1;
        let status = results.last().map_or(Nfsstat4::OK, |r| r.status);
        put(w, &[xid, 1, 0, 0, 0, 0])?;
        put(w, &[status.0])?;
        put(w, &[tag.len() as u32])?;
        w.bytes(tag)?;
        w.bytes(&[0; 3][..tag.len().next_multiple_of(4) - tag.len()])?;
        put(w, &[results.len() as u32])?;
        for r in &results {
            put(w, &[r.op, r.status.0])?;
            put(w, &r.body[..r.body_len])?;
        }
        Ok(())
    }
}

impl Service for CallbackService {
    fn handle_call(
        &mut self,
        call: &CallView<'_>,
        reply: &mut ReplyWriter<'_>,
    ) -> Result<(), ServiceError> {
        let msg = call.msg();
        let Ok((h, at)) = CallHeader::decode(msg) else {
            self.stats.refused += 1;
            return Err(ServiceError::GarbageArgs);
        };
        if h.prog != self.program {
            self.stats.refused += 1;
            return Err(ServiceError::ProgUnavail);
        }
        if h.vers != super::super::server::backchannel::CB_VERSION {
            self.stats.refused += 1;
            return Err(ServiceError::ProgMismatch { low: 1, high: 1 });
        }
        let mut a = Args { b: msg, at };
        match h.procedure {
            0 => {
                self.stats.nulls += 1;
                put(reply, &[h.xid, 1, 0, 0, 0, 0])
            }
            1 => self.compound(&mut a, reply, h.xid).inspect_err(|_| {
                self.stats.refused += 1;
            }),
            _ => {
                self.stats.refused += 1;
                Err(ServiceError::ProcUnavail)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SID: SessionId = *b"0123456789abcdef";

    fn words(ws: &[u32]) -> Vec<u8> {
        ws.iter().flat_map(|w| w.to_be_bytes()).collect()
    }

    /// CB_COMPOUND arguments: tag "cb", minor 1, ident 0, then `ops` (already encoded).
    fn args(n: u32, ops: &[u8]) -> Vec<u8> {
        let mut v = words(&[2]);
        v.extend_from_slice(b"cb\0\0");
        v.extend(words(&[1, 0, n]));
        v.extend_from_slice(ops);
        v
    }

    fn sequence(sid: &[u8; 16], seq: u32, slot: u32) -> Vec<u8> {
        let mut v = words(&[OP_CB_SEQUENCE]);
        v.extend_from_slice(sid);
        v.extend(words(&[seq, slot, slot, 0, 0]));
        v
    }

    fn recall() -> Vec<u8> {
        let mut v = words(&[OP_CB_RECALL, 1]);
        v.extend_from_slice(&[7; 12]);
        v.extend(words(&[0, 8]));
        v.extend_from_slice(b"filehndl");
        v
    }

    /// Runs one CB_COMPOUND; returns (status, [(op, status)]).
    fn run(s: &mut CallbackService, n: u32, ops: &[u8]) -> (u32, Vec<(u32, u32)>) {
        let a = args(n, ops);
        let mut out = Vec::new();
        s.compound(&mut Args { b: &a, at: 0 }, &mut out, 9)
            .expect("answered");
        let w = |i: usize| u32::from_be_bytes(out[4 * i..4 * i + 4].try_into().unwrap());
        assert_eq!((w(0), w(1), w(2)), (9, 1, 0), "accepted reply");
        let status = w(6);
        assert_eq!((w(7), &out[32..34]), (2, &b"cb"[..]), "tag echoed");
        let n = w(9) as usize;
        let mut at = 10;
        let mut res = Vec::new();
        for _ in 0..n {
            let (op, st) = (w(at), w(at + 1));
            at += 2;
            if op == OP_CB_SEQUENCE && st == 0 {
                assert_eq!(&out[4 * at..4 * at + 16], &SID[..]);
                at += 8;
            }
            res.push((op, st));
        }
        assert_eq!(at * 4, out.len(), "nothing after the results");
        (status, res)
    }

    #[test]
    fn cb_sequence_then_cb_recall_of_a_delegation_not_held() {
        let mut s = CallbackService::new(0x4000_0000);
        s.set_session(SID);
        let mut ops = sequence(&SID, 1, 0);
        ops.extend(recall());
        let (st, res) = run(&mut s, 2, &ops);
        assert_eq!(st, Nfsstat4::BADHANDLE.0);
        assert_eq!(
            res,
            vec![(OP_CB_SEQUENCE, 0), (OP_CB_RECALL, Nfsstat4::BADHANDLE.0)]
        );
        // The next sequence id is accepted; the same one again is a retry with no
        // cached reply; a jump is misordered; another slot or session is refused.
        assert_eq!(run(&mut s, 1, &sequence(&SID, 2, 0)).0, 0);
        assert_eq!(
            run(&mut s, 1, &sequence(&SID, 2, 0)).0,
            Nfsstat4::RETRY_UNCACHED_REP.0
        );
        assert_eq!(
            run(&mut s, 1, &sequence(&SID, 5, 0)).0,
            Nfsstat4::SEQ_MISORDERED.0
        );
        assert_eq!(run(&mut s, 1, &sequence(&SID, 3, 1)).0, Nfsstat4::BADSLOT.0);
        assert_eq!(
            run(&mut s, 1, &sequence(b"another-session!", 3, 0)).0,
            Nfsstat4::BADSESSION.0
        );
        assert_eq!(run(&mut s, 1, &sequence(&SID, 3, 0)).0, 0);
        assert_eq!(s.stats().recalls, 1);
    }

    #[test]
    fn cb_recall_of_a_delegation_held_is_answered_ok_and_queued_for_return() {
        let mut s = CallbackService::new(0x4000_0000);
        s.set_session(SID);
        let held = Stateid4 {
            seqid: 1,
            other: [7; 12],
        };
        s.hold(held, b"otherfh!");
        // The stateid matches but the handle does not: not this delegation.
        let mut ops = sequence(&SID, 1, 0);
        ops.extend(recall());
        assert_eq!(run(&mut s, 2, &ops).0, Nfsstat4::BADHANDLE.0);
        assert!(s.take_recalled().is_empty());
        s.forget(&held);
        s.hold(held, b"filehndl");
        let mut ops = sequence(&SID, 2, 0);
        ops.extend(recall());
        assert_eq!(
            run(&mut s, 2, &ops).1,
            vec![(OP_CB_SEQUENCE, 0), (OP_CB_RECALL, 0)]
        );
        assert_eq!(s.take_recalled(), vec![(held, b"filehndl".to_vec())]);
        assert_eq!(s.held().count(), 0);
        assert_eq!((s.stats().recalls, s.stats().recalls_held), (2, 1));
    }

    #[test]
    fn operations_out_of_place_stop_the_compound() {
        let mut s = CallbackService::new(0x4000_0000);
        s.set_session(SID);
        // CB_RECALL without CB_SEQUENCE first: not in a session.
        assert_eq!(
            run(&mut s, 1, &recall()).1,
            vec![(OP_CB_RECALL, Nfsstat4::OP_NOT_IN_SESSION.0)]
        );
        // An unknown operation: OP_CB_ILLEGAL; nothing after it runs.
        let mut ops = sequence(&SID, 1, 0);
        ops.extend(words(&[77]));
        ops.extend(recall());
        assert_eq!(
            run(&mut s, 3, &ops).1,
            vec![(OP_CB_SEQUENCE, 0), (OP_CB_ILLEGAL, Nfsstat4::OP_ILLEGAL.0)]
        );
        // Truncated arguments are garbage, not a panic.
        let a = args(2, &sequence(&SID, 2, 0)[..20]);
        let mut out = Vec::new();
        assert_eq!(
            s.compound(&mut Args { b: &a, at: 0 }, &mut out, 1),
            Err(ServiceError::GarbageArgs)
        );
    }
}
