//! One small Send, framed and written in one pass (issue 14, sixth round).
//!
//! The common message of an RPC ping-pong is a lone Send of a few hundred octets posted
//! to an idle transmitter. The general path (`fill_batch`, `next_message`,
//! `start_request`, `frame_next`, `write_batch`) builds an [`Fpdu`] description (header
//! array, piece list, trailer, pending CRC), then gathers it into a flat buffer and
//! writes that, then walks the batch's ends to finish the message: about 900
//! instructions per 64 B message, most of them moving state between those steps. Here
//! the FPDU is built straight in the buffer that `send` writes: length field and
//! header, the gather list's octets, pad and CRC, then one `send`. The octets and the
//! write are exactly those of the general path (one FPDU, one `send` with the same
//! flags), so nothing changes on the wire; a write the socket takes only in part (or
//! not at all) becomes the general path's half-written batch, which `transmit` resumes
//! as before.

use super::{gather, Finish, Fpdu, Kind, TermState, FLAT_MAX, SEND_FLAGS};
use crate::fabric::mr::Access;
use crate::fabric::siw::engine::{Engine, SqEntry, SqState};
use crate::fabric::siw::keys::KeyTable;
use crate::fabric::siw::tx::Wire;
use crate::fabric::{SendOp, WcStatus};
use crate::iwarp::crc32c::crc32c;
use crate::iwarp::ddp::QueueNumber;
use crate::iwarp::fpdu::{crc_to_wire, pad_len, CRC_LEN, LENGTH_FIELD_LEN, MAX_HEAD_LEN};
use crate::iwarp::rdmap::{Opcode, SegmentHeader};

/// What [`Engine::send_one`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum One {
    /// Not a lone small Send to an idle transmitter: the general path decides.
    NotTaken,
    /// The Send is written whole; the transmitter is idle again.
    Written,
    /// The socket took part of it (or none): the rest waits in the batch, as a
    /// general-path write that met a full socket.
    Full,
}

/// The untagged header's length (RFC 5041 §4.3 with RDMAP's octets).
const UNTAGGED: usize = MAX_HEAD_LEN - LENGTH_FIELD_LEN;

impl Engine {
    /// Writes the next posted request in one pass if it is a lone small Send and the
    /// transmitter has nothing else to do; see the module documentation. The conditions
    /// are those under which the general path would frame exactly this request, alone,
    /// as one FPDU in one flat `send`:
    ///
    /// - nothing framed, half-written or queued ahead of it (no batch, no message, no
    ///   Terminate, no Read Response owed), the queue pair not failed;
    /// - completions on transmit and the peer heard, so no confirmation or wake-up Read
    ///   follows it (those go through the general path, which attaches them);
    /// - no wire tap (the tap is fed from the general path's framing);
    /// - exactly one request posted and not started (two Sends would be coalesced into
    ///   one write by the general path), a Send or Send with Invalidate, not held by a
    ///   fence, its whole payload one FPDU and the FPDU at most [`FLAT_MAX`] octets;
    /// - its gather list passes the key checks (a bad key is the general path's local
    ///   failure, with its Terminate).
    pub(crate) fn send_one(&mut self, keys: &KeyTable, wire: &Wire<'_>) -> std::io::Result<One> {
        if self.tx.busy
            || self.tx.msg.is_some()
            || self.tx.term_state == TermState::Queued
            || !self.irq.is_empty()
            || self.failed
            || self.confirm
            || !self.wake.heard
            || wire.tap.is_some()
        {
            return Ok(One::NotTaken);
        }
        let posted = self.qp.sq_posted.load(std::sync::atomic::Ordering::Acquire);
        let seq = self.sq.next;
        if seq + 1 != posted {
            return Ok(One::NotTaken);
        }
        // SAFETY: published (below `posted`) and not retired (at or past `head`); only
        // the engine reads it until it is retired, which needs it finished below.
        let w = unsafe { self.qp.sq.get(seq) };
        let (opcode, inval_stag) = match w.op {
            SendOp::Send => (Opcode::Send, 0),
            SendOp::SendWithInvalidate { rkey } => (Opcode::SendInvalidate, rkey),
            _ => return Ok(One::NotTaken),
        };
        if w.fence && !self.orq.is_empty() {
            return Ok(One::NotTaken);
        }
        let len = w.len as usize;
        let ulpdu = UNTAGGED + len;
        let pad = pad_len(ulpdu);
        let total = LENGTH_FIELD_LEN + ulpdu + pad + CRC_LEN;
        // One FPDU (the payload fits the MULPDU, as `max_payload` sizes it) in one flat
        // write.
        if len as u64 > super::max_payload(self.link.mulpdu, opcode) || total > FLAT_MAX {
            return Ok(One::NotTaken);
        }
        let pd = self.qp.pd;
        let sgl = w.sgl();
        let bad = sgl.iter().any(|s| {
            s.length > 0
                && keys
                    .check(s.lkey, pd, Access::NONE, s.addr, u64::from(s.length))
                    .is_err()
        });
        if bad {
            return Ok(One::NotTaken);
        }
        // Started: as `start_request` does for a Send.
        let msn = self.msn_out.take(QueueNumber::Send);
        *self.sq.entry(seq) = SqEntry {
            state: SqState::Busy,
            msn,
        };
        if w.signaled {
            self.sq.signaled = Some(seq);
        }
        self.sq.next = seq + 1;
        let mut flat = [core::mem::MaybeUninit::<u8>::uninit(); FLAT_MAX];
        let base = flat.as_mut_ptr().cast::<u8>();
        let mut head = [0u8; MAX_HEAD_LEN];
        head[..LENGTH_FIELD_LEN].copy_from_slice(&(ulpdu as u16).to_be_bytes());
        // Valid by construction: an untagged Send opcode with its own queue.
        let _ = SegmentHeader::untagged(opcode, true, inval_stag, msn, 0)
            .encode(&mut head[LENGTH_FIELD_LEN..]);
        let body = LENGTH_FIELD_LEN + ulpdu;
        // SAFETY: `total <= FLAT_MAX`; the header is our array and every entry passed
        // its key check above (registered memory the device keeps mapped) for its
        // length, and the lengths sum to `len` (checked at posting), so every copy
        // stays inside `flat`; the pad and CRC fill the last `pad + CRC_LEN` octets.
        let wire_crc = unsafe {
            core::ptr::copy_nonoverlapping(head.as_ptr(), base, MAX_HEAD_LEN);
            let mut at = MAX_HEAD_LEN;
            for s in sgl {
                let n = s.length as usize;
                core::ptr::copy_nonoverlapping(s.addr as *const u8, base.add(at), n);
                at += n;
            }
            debug_assert_eq!(at, body);
            core::ptr::write_bytes(base.add(body), 0, pad + CRC_LEN);
            let crc = if self.link.crc {
                crc_to_wire(crc32c(core::slice::from_raw_parts(base, body + pad)))
            } else {
                [0; CRC_LEN]
            };
            core::ptr::copy_nonoverlapping(crc.as_ptr(), base.add(body + pad), CRC_LEN);
            crc
        };
        let written = loop {
            // SAFETY: `flat` holds `total` initialised octets; the kernel only reads.
            let r = unsafe { libc::send(wire.fd, flat.as_ptr().cast(), total, SEND_FLAGS) };
            if r >= 0 {
                break r as usize;
            }
            let e = std::io::Error::last_os_error();
            match e.kind() {
                std::io::ErrorKind::Interrupted => {}
                std::io::ErrorKind::WouldBlock => break 0,
                _ => return Err(e),
            }
        };
        if written == total {
            // As `message_written` on transmit completions: done.
            self.sq.entry(seq).state = SqState::Done(WcStatus::Success);
            return Ok(One::Written);
        }
        // The socket is full: the FPDU becomes the general path's one-FPDU batch, its
        // CRC already in the trailer, resumed from `written` by `write_batch`.
        let f: &mut Fpdu = &mut self.tx.batch[0];
        f.head = head;
        f.head_len = MAX_HEAD_LEN;
        f.inline_len = 0;
        f.npieces = gather(sgl, 0, len as u64, &mut f.pieces);
        f.trailer = [0; super::MAX_TRAILER_LEN];
        f.trailer[pad..pad + CRC_LEN].copy_from_slice(&wire_crc);
        f.trailer_len = pad + CRC_LEN;
        f.crc_pending = false;
        f.tail_len = 0;
        f.own_write = false;
        f.total = total;
        self.tx.nbatch = 1;
        self.tx.ends[0] = Some(Finish {
            kind: Kind::Request(seq),
            opcode,
            confirmed_inline: false,
        });
        self.tx.written = written;
        self.tx.total = total;
        self.tx.busy = true;
        Ok(One::Full)
    }
}
