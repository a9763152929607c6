//! The NFSv4.1 server's side of the backchannel (RFC 8881 §2.10.3.1, §18.36, §20): after
//! a CREATE_SESSION that asked for a backchannel on its connection
//! (`CREATE_SESSION4_FLAG_CONN_BACK_CHAN`), the server probes it with CB_NULL, the way
//! it learns the callback path works before it would rely on it (delegations). The call
//! names the program the client gave in `csa_cb_program`, version 1 (the NFS4_CALLBACK
//! program's only version), AUTH_NONE (a client's callback service accepts AUTH_NONE
//! for CB_NULL), and goes out on the connection the CREATE_SESSION came in on, through
//! the engine's backward direction (RFC 8167).
//!
//! The COMPOUND that carries CREATE_SESSION is run by the shared program, which knows no
//! connection; it leaves the request in a per-thread mailbox that the connection's
//! [`NfsService`](super::NfsService), which called the program on this same thread,
//! empties right after (`take_request`). Nothing else runs on the thread in between.
//!
//! Once CB_NULL was answered the client may hold read delegations
//! ([`v41::deleg`](super::v41::deleg)); their recall goes out on the same connection as
//! CB_COMPOUND with CB_SEQUENCE (§20.9, on the one backchannel slot, 0) and CB_RECALL
//! (§20.2), with AUTH_SYS credentials: the Linux client's callback service accepts
//! AUTH_NONE for CB_NULL only.

use std::cell::Cell;

use crate::nfs::v41::{SessionId, Stateid4};

/// CB_NULL: the callback program's NULL procedure.
pub const CB_NULL: u32 = 0;
/// CB_COMPOUND.
pub const CB_COMPOUND: u32 = 1;
/// The callback program's version for NFSv4.1 (RFC 8881 §20).
pub const CB_VERSION: u32 = 1;
/// The tag (and counter index) of CB_COMPOUNDs carrying CB_RECALL.
pub const CB_RECALL_TAG: u32 = 2;
/// CB_SEQUENCE's operation number.
pub const OP_CB_SEQUENCE: u32 = 11;
/// CB_RECALL's operation number.
pub const OP_CB_RECALL: u32 = 4;

/// A backchannel a CREATE_SESSION granted: whose, which session, which program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding {
    /// The client id.
    pub client: u64,
    /// The session whose backchannel it is (CB_SEQUENCE names it).
    pub session: SessionId,
    /// `csa_cb_program`.
    pub program: u32,
}

thread_local! {
    /// A CREATE_SESSION run on this thread asked for a backchannel.
    static REQUESTED: Cell<Option<Binding>> = const { Cell::new(None) };
}

/// Called by CREATE_SESSION when it granted `CONN_BACK_CHAN`.
pub(crate) fn request(b: Binding) {
    REQUESTED.with(|r| r.set(Some(b)));
}

/// The backchannel request left by the COMPOUND just run on this thread, if any.
pub(crate) fn take_request() -> Option<Binding> {
    REQUESTED.with(Cell::take)
}

/// Octets of the AUTH_SYS credential body sent with CB_COMPOUND: stamp, an empty
/// machine name, uid 0, gid 0, no groups.
const AUTH_SYS_BODY: u32 = 20;

/// Writes a CB_COMPOUND call to `program` (XID left zero) carrying CB_SEQUENCE on slot 0
/// of `session` with `seq`, then CB_RECALL of `stateid` on file handle `fh` (truncate
/// false). Returns its length, or `None` when `out` is too short or `fh` too long.
pub fn encode_cb_recall(
    program: u32,
    session: &SessionId,
    seq: u32,
    stateid: &Stateid4,
    fh: &[u8],
    out: &mut [u8],
) -> Option<usize> {
    if fh.len() > 128 {
        return None;
    }
    let mut at = 0usize;
    let mut put = |b: &[u8]| -> Option<()> {
        out.get_mut(at..at + b.len())?.copy_from_slice(b);
        at += b.len();
        Some(())
    };
    let w = |v: u32| v.to_be_bytes();
    // RPC call header: xid, CALL, rpcvers 2, program, version, CB_COMPOUND; cred
    // AUTH_SYS; verf AUTH_NONE.
    for v in [0, 0, 2, program, CB_VERSION, CB_COMPOUND, 1, AUTH_SYS_BODY] {
        put(&w(v))?;
    }
    for v in [0, 0, 0, 0, 0, 0, 0] {
        // stamp, machinename (empty), uid, gid, gids (none); verifier flavor, length.
        put(&w(v))?;
    }
    // CB_COMPOUND4args: tag (empty), minorversion 1, callback_ident 0, two operations.
    for v in [0, 1, 0, 2, OP_CB_SEQUENCE] {
        put(&w(v))?;
    }
    put(session)?;
    // sequenceid, slotid 0, highest_slotid 0, cachethis false, no referring calls.
    for v in [seq, 0, 0, 0, 0, OP_CB_RECALL, stateid.seqid] {
        put(&w(v))?;
    }
    put(&stateid.other)?;
    for v in [0, fh.len() as u32] {
        put(&w(v))?;
    }
    put(fh)?;
    put(&[0; 3][..fh.len().next_multiple_of(4) - fh.len()])?;
    Some(at)
}

/// The status of a CB_COMPOUND reply (`CB_COMPOUND4res.status`, after an accepted RPC
/// reply header), or `None` when the reply is not an accepted success or is cut short.
pub fn cb_compound_status(reply: &[u8]) -> Option<u32> {
    let (h, at) = crate::rpc::ReplyHeader::decode(reply).ok()?;
    match h.body {
        crate::rpc::ReplyBody::Accepted {
            status: crate::rpc::AcceptStatus::Success,
            ..
        } => {}
        _ => return None,
    }
    let w = reply.get(at..at + 4)?;
    Some(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
}

/// Octets of a CB_NULL call.
pub const CB_NULL_LEN: usize = 40;

/// Writes a CB_NULL call to `cb_program` into `out` (the XID is left zero: the engine
/// assigns it). Returns its length, or `None` when `out` is too short.
pub fn encode_cb_null(cb_program: u32, out: &mut [u8]) -> Option<usize> {
    // xid, CALL, rpcvers 2, program, version, procedure, cred AUTH_NONE (flavor,
    // length), verf AUTH_NONE.
    let words = [0, 0, 2, cb_program, CB_VERSION, CB_NULL, 0, 0, 0, 0];
    let out = out.get_mut(..CB_NULL_LEN)?;
    for (w, o) in words.iter().zip(out.chunks_exact_mut(4)) {
        o.copy_from_slice(&u32::to_be_bytes(*w));
    }
    Some(CB_NULL_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cb_null_names_the_clients_program() {
        let mut b = [0xffu8; 64];
        assert_eq!(encode_cb_null(0x4000_0001, &mut b), Some(40));
        let w = |i: usize| u32::from_be_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
        assert_eq!((w(1), w(2), w(3), w(4), w(5)), (0, 2, 0x4000_0001, 1, 0));
        assert_eq!((w(6), w(7), w(8), w(9)), (0, 0, 0, 0));
        assert_eq!(encode_cb_null(1, &mut [0u8; 39]), None);
    }

    #[test]
    fn the_mailbox_is_taken_once() {
        assert_eq!(take_request(), None);
        let b = Binding {
            client: 3,
            session: [5; 16],
            program: 7,
        };
        request(b);
        assert_eq!(take_request(), Some(b));
        assert_eq!(take_request(), None);
    }

    #[test]
    fn cb_recall_carries_sequence_then_recall() {
        let mut b = [0u8; 256];
        let sid = Stateid4 {
            seqid: 1,
            other: [9; 12],
        };
        let n = encode_cb_recall(0x4000_0000, &[4; 16], 3, &sid, b"fh5", &mut b).unwrap();
        let w = |i: usize| u32::from_be_bytes([b[4 * i], b[4 * i + 1], b[4 * i + 2], b[4 * i + 3]]);
        assert_eq!((w(3), w(4), w(5), w(6), w(7)), (0x4000_0000, 1, 1, 1, 20));
        // After 15 header words: tag, minor, ident, count, CB_SEQUENCE.
        assert_eq!((w(15), w(16), w(17), w(18), w(19)), (0, 1, 0, 2, 11));
        assert_eq!(&b[80..96], &[4; 16]);
        assert_eq!((w(24), w(25), w(26), w(27), w(28)), (3, 0, 0, 0, 0));
        assert_eq!((w(29), w(30)), (OP_CB_RECALL, 1));
        assert_eq!(&b[124..136], &[9; 12]);
        assert_eq!((w(34), w(35), &b[144..147]), (0, 3, &b"fh5"[..]));
        assert_eq!(n, 148);
        // Too small a buffer, too long a handle: refused, not a panic.
        assert_eq!(
            encode_cb_recall(1, &[0; 16], 1, &sid, b"fh", &mut b[..100]),
            None
        );
        assert_eq!(
            encode_cb_recall(1, &[0; 16], 1, &sid, &[0; 129], &mut b),
            None
        );
    }

    #[test]
    fn cb_compound_status_reads_an_accepted_reply() {
        let words = |ws: &[u32]| ws.iter().flat_map(|w| w.to_be_bytes()).collect::<Vec<u8>>();
        // xid, REPLY, MSG_ACCEPTED, verf AUTH_NONE, SUCCESS, status BADHANDLE, tag.
        let ok = words(&[5, 1, 0, 0, 0, 0, 10001, 0, 0]);
        assert_eq!(cb_compound_status(&ok), Some(10001));
        // GARBAGE_ARGS, and a reply cut before the status.
        assert_eq!(cb_compound_status(&words(&[5, 1, 0, 0, 0, 4])), None);
        assert_eq!(cb_compound_status(&words(&[5, 1, 0, 0, 0, 0])), None);
    }
}
