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
use crate::iwarp::ddp::{DdpControl, QueueNumber};
use crate::iwarp::fpdu::{crc_to_wire, pad_len, CRC_LEN, LENGTH_FIELD_LEN, MAX_HEAD_LEN};
use crate::iwarp::rdmap::{Opcode, RDMAP_VERSION};

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

/// The longest payload whose FPDU (length field, header, payload, pad, CRC) fits one
/// flat write of [`FLAT_MAX`] octets.
pub(crate) const ONE_MAX: usize = (FLAT_MAX - MAX_HEAD_LEN - CRC_LEN) & !3;

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
    ///
    /// The checks are inlined into `transmit` and the rest is not: a message that does
    /// not qualify (a 4 KiB Send) pays only the checks.
    #[inline]
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
        // One FPDU (the payload fits the MULPDU, as `max_payload` sizes it) in one flat
        // write; the length first, so a long Send is turned away after one compare.
        if w.len > ONE_MAX as u64 || w.len > super::max_payload(self.link.mulpdu, Opcode::Send) {
            return Ok(One::NotTaken);
        }
        let (opcode, inval_stag) = match w.op {
            SendOp::Send => (Opcode::Send, 0),
            SendOp::SendWithInvalidate { rkey } => (Opcode::SendInvalidate, rkey),
            _ => return Ok(One::NotTaken),
        };
        if w.fence && !self.orq.is_empty() {
            return Ok(One::NotTaken);
        }
        self.write_one(keys, wire, seq, opcode, inval_stag)
    }

    /// [`Engine::send_one`] past its checks: request `seq` is a lone Send of `opcode`
    /// whose FPDU fits one flat write.
    #[inline(never)]
    fn write_one(
        &mut self,
        keys: &KeyTable,
        wire: &Wire<'_>,
        seq: u64,
        opcode: Opcode,
        inval_stag: u32,
    ) -> std::io::Result<One> {
        // SAFETY: as in `send_one`.
        let w = unsafe { self.qp.sq.get(seq) };
        let len = w.len as usize;
        let ulpdu = UNTAGGED + len;
        let pad = pad_len(ulpdu);
        let total = LENGTH_FIELD_LEN + ulpdu + pad + CRC_LEN;
        debug_assert!(total <= FLAT_MAX);
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
        // The untagged header of a whole message's only FPDU, written field by field
        // (`SegmentHeader::encode` validates first, which this header needs not): DDP
        // control (untagged, Last), RDMAP control, Invalidate STag, queue 0, MSN, MO 0.
        head[2] = DdpControl::new(false, true).to_octet();
        head[3] = (RDMAP_VERSION << 6) | opcode as u8;
        head[4..8].copy_from_slice(&inval_stag.to_be_bytes());
        head[8..12].copy_from_slice(&QueueNumber::Send.qn().to_be_bytes());
        head[12..16].copy_from_slice(&msn.to_be_bytes());
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::siw::engine::Link;
    use crate::fabric::siw::qp::{QpShared, SqWqe};
    use crate::fabric::siw::MAX_SGE;
    use crate::fabric::{ConnId, QpCaps, QpState, Sge};
    use crate::iwarp::fpdu::{encode_fpdu, fpdu_len};
    use crate::iwarp::rdmap::SegmentHeader;
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::sync::Arc;

    /// A running engine (completions on transmit, the peer heard) over `keys`, with
    /// `crc` negotiated, and a registered buffer of 4 KiB of patterned octets.
    struct Rig {
        keys: KeyTable,
        engine: Engine,
        mem: Box<[u8]>,
        key: u32,
    }

    impl Rig {
        fn new(crc: bool) -> Rig {
            let keys = KeyTable::with_seed(8, Some(7));
            let mem: Box<[u8]> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
            let pd = 1;
            let (_, key) = keys
                .register(pd, Access::ALL, mem.as_ptr() as u64, mem.len() as u64)
                .expect("room");
            let caps = QpCaps {
                max_send_wr: 8,
                max_recv_wr: 4,
                max_send_sge: MAX_SGE as u32,
                max_recv_sge: MAX_SGE as u32,
            };
            let qp = Arc::new(QpShared::new(1, ConnId(1), pd, caps, QpState::ReadyToSend));
            let mut engine = Engine::new(qp, 0, 0, false, 4, 4);
            engine.establish(Link {
                crc,
                mulpdu: 1454,
                mss_checks: 0,
                ord: 4,
                ird: 4,
            });
            engine.wake.heard = true;
            Rig {
                keys,
                engine,
                mem,
                key,
            }
        }

        /// Posts a Send of `len` octets from offset 100, in two gather entries when
        /// `split` (the first of 5 octets, or all of them when shorter).
        fn post(&mut self, len: usize, split: bool, op: SendOp) -> u64 {
            let base = self.mem.as_ptr() as u64 + 100;
            let mut w = SqWqe {
                wr_id: 9,
                op,
                signaled: true,
                fence: false,
                num_sge: 1,
                sge: [Sge::new(0, 0, 0); MAX_SGE],
                len: len as u64,
            };
            if split {
                let a = len.min(5);
                w.sge[0] = Sge::new(base, a as u32, self.key);
                w.sge[1] = Sge::new(base + a as u64, (len - a) as u32, self.key);
                w.num_sge = 2;
            } else {
                w.sge[0] = Sge::new(base, len as u32, self.key);
            }
            let posted = &self.engine.qp.sq_posted;
            let seq = posted.load(std::sync::atomic::Ordering::Relaxed);
            // SAFETY: each test retires every Send before posting the next, so the slot
            // is free, and the engine (this thread) reads it only after the store below.
            unsafe { self.engine.qp.sq.write(seq, w) };
            posted.store(seq + 1, std::sync::atomic::Ordering::Release);
            seq
        }

        /// Marks everything finished as retired (what `emit` does), freeing the slots.
        fn retire(&mut self) {
            self.engine.sq.head = self.engine.sq.next;
        }

        /// The FPDU the Send posted by `post(len, ..)` must be, built independently.
        fn want(&self, len: usize, msn: u32, opcode: Opcode, inval: u32, crc: bool) -> Vec<u8> {
            let h = SegmentHeader::untagged(opcode, true, inval, msn, 0);
            let mut b = vec![0u8; fpdu_len(h.encoded_len() + len)];
            let n = encode_fpdu(&mut b, &h, &self.mem[100..100 + len], crc).expect("fits");
            b.truncate(n);
            b
        }
    }

    /// A lone Send is written in one pass (the general path's batch left untouched) for
    /// every payload up to the one-write limit, and carries exactly the FPDU the
    /// general encoder builds: both Send opcodes, one and two gather entries, CRC on and
    /// off, MSNs counting on; past the limit the general path writes it, the same way.
    #[test]
    fn a_lone_small_send_is_one_pass_and_the_same_fpdu() {
        for crc in [false, true] {
            let mut rig = Rig::new(crc);
            let (a, mut b) = UnixStream::pair().expect("socket pair");
            let wire = Wire {
                fd: a.as_raw_fd(),
                tap: None,
            };
            let mut msn = 1;
            for len in [0usize, 1, 3, 61, 64, 998, 999, ONE_MAX, ONE_MAX + 1, 1400] {
                for (split, op) in [
                    (false, SendOp::Send),
                    (true, SendOp::SendWithInvalidate { rkey: 0x1234_5678 }),
                ] {
                    let (opcode, inval) = match op {
                        SendOp::SendWithInvalidate { rkey } => (Opcode::SendInvalidate, rkey),
                        _ => (Opcode::Send, 0),
                    };
                    rig.engine.tx.batch[0].total = 0;
                    let seq = rig.post(len, split, op);
                    let full = rig.engine.transmit(&rig.keys, &wire).expect("write");
                    assert!(!full, "len {len}");
                    let what = format!("crc {crc} len {len} split {split}");
                    assert_eq!(
                        rig.engine.tx.batch[0].total == 0,
                        len <= ONE_MAX,
                        "one pass iff it fits one flat write: {what}"
                    );
                    assert_eq!(
                        rig.engine.sq.state(seq),
                        SqState::Done(WcStatus::Success),
                        "{what}"
                    );
                    rig.retire();
                    let want = rig.want(len, msn, opcode, inval, crc);
                    let mut got = vec![0u8; want.len()];
                    b.read_exact(&mut got).expect("read");
                    assert_eq!(got, want, "{what}");
                    msn += 1;
                }
            }
        }
    }

    /// A Send that meets a full socket is left as the general path's half-written
    /// batch: `transmit` reports the socket full, the request is not finished, and once
    /// the peer reads, the next `transmit` writes the whole FPDU, CRC included.
    #[test]
    fn a_one_pass_send_into_a_full_socket_resumes_whole() {
        let mut rig = Rig::new(true);
        let (a, mut b) = UnixStream::pair().expect("socket pair");
        a.set_nonblocking(true).expect("non-blocking");
        let junk = [0xA5u8; 4096];
        let mut queued = 0;
        loop {
            // SAFETY: our buffer, read only by the kernel.
            let r = unsafe {
                libc::send(
                    a.as_raw_fd(),
                    junk.as_ptr().cast(),
                    junk.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if r <= 0 {
                break;
            }
            queued += r as usize;
        }
        let wire = Wire {
            fd: a.as_raw_fd(),
            tap: None,
        };
        let seq = rig.post(61, true, SendOp::Send);
        assert!(
            rig.engine.transmit(&rig.keys, &wire).expect("write"),
            "full"
        );
        assert!(rig.engine.tx.busy);
        assert_eq!(rig.engine.sq.state(seq), SqState::Busy);
        let mut drain = vec![0u8; queued];
        b.read_exact(&mut drain).expect("read the junk");
        assert!(
            !rig.engine.transmit(&rig.keys, &wire).expect("write"),
            "all out"
        );
        assert_eq!(rig.engine.sq.state(seq), SqState::Done(WcStatus::Success));
        let want = rig.want(61, 1, Opcode::Send, 0, true);
        let mut got = vec![0u8; want.len()];
        b.read_exact(&mut got).expect("read");
        assert_eq!(got, want);
    }
}
