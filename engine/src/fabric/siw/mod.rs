//! `siw`: software iWARP in userspace. RDMAP (RFC 5040) over DDP (RFC 5041) over MPA
//! (RFC 5044, enhanced start-up of RFC 6581) over ordinary TCP sockets, wire compatible
//! with the Linux kernel's siw, so one side of a connection can be a kernel RDMA
//! consumer (rping, NFS over RDMA) and the other this engine.
//!
//! # Progress
//!
//! There are no threads: a device's engine runs inside [`CompletionQueue::poll`] and
//! [`ConnectionManager::poll_event`] of its objects, on the caller's thread, polling a
//! mio `Poll` with a zero timeout and then every connection: reading what arrived
//! (placing payload straight from the receive buffer into registered memory),
//! writing what was posted (`sendmsg` gathering from registered memory: one per FPDU,
//! or up to eight FPDUs of one long message, [`SiwConfig::batch_message_fpdus`]; a
//! write of at most 1 KiB is copied into one buffer and goes by `send`),
//! and reporting completions. Posting only fills preallocated slots. Sockets are
//! non-blocking with `TCP_NODELAY`; a partial write resumes at the next poll; nothing
//! is allocated per operation once a connection is up.
//!
//! A device is meant for one poller thread. Its objects may move between threads, and
//! if two threads poll the same device at once, one runs the engine and the other
//! returns what is already reported (see [`claim`](self)).
//!
//! # Semantics
//!
//! As every provider's, checked by the conformance suite, with iWARP's own errors:
//! a protection or protocol error found on received data is answered with a Terminate
//! (layer, type and code of RFC 5040 §7 naming the offending segment) and both queue
//! pairs fail; the sender's request gets the status matching the Terminate (see
//! [`SiwConfig::confirm_completions`] for how the status reaches the right request).
//! iWARP has no receiver-not-ready retry: a Send that finds no receive is a DDP
//! "no buffer available" error and fails at once, reported as
//! [`WcStatus::RnrRetryExceeded`](crate::fabric::WcStatus::RnrRetryExceeded) whatever
//! `rnr_retry` says.
//!
//! # Completions and confirmation Reads
//!
//! iWARP has no acknowledgements. By default, as Linux siw, a Send or Write completes
//! once its last FPDU is written to the socket, and a remote failure only moves the
//! queue pair to the error state (the peer's Terminate is kept for
//! `QueuePair::peer_abort`). An RC consumer that needs a Send's or Write's completion
//! to carry the remote outcome asks for strict completions
//! ([`SiwConfig::confirm_completions`], [`SiwConfig::strict`]): a signaled Send or Write
//! then completes once a later RDMA Read Response proves the peer executed it: the
//! device writes a zero-length RDMA Read Request right after the request's last FPDU,
//! in the same poll (its own segment by default, see
//! [`SiwConfig::confirmation_own_segment`]). The Terminate a failing peer sends instead
//! copies the failing segment's header, which names the request that gets the error
//! status. A capture shows one FPDU per TCP segment, except that consecutive posted
//! Sends small enough to share one are coalesced into it
//! ([`SiwConfig::coalesce_sends`], on by default), and that a long message's FPDUs
//! share writes ([`SiwConfig::batch_message_fpdus`], on by default, off in
//! [`SiwConfig::strict`]), which TCP cuts at its MSS, the FPDUs' size.
//!
//! # Interoperability with Linux siw
//!
//! Checked against the kernel's siw (6.1) with rping's protocol in both roles
//! (`tools/lab/siw-interop.sh`). Two kernel behaviours are absorbed here: a kernel
//! responder leaves FPDUs that arrive right after its MPA Reply unread until more data
//! comes, so a connection that has not heard from its peer since its first FPDU sends
//! further zero-length Reads as wake-ups (10 ms, then 5 times longer each time); and it
//! answers a zero-length Read after a transmission of its own with that transmission's
//! length and octets, which are discarded, since nothing is placed for such a Read.
//!
//! [`CompletionQueue::poll`]: crate::fabric::CompletionQueue::poll
//! [`ConnectionManager::poll_event`]: crate::fabric::ConnectionManager::poll_event

mod claim;
mod cm;
mod config;
mod conn;
mod cq;
mod device;
mod driver;
mod engine;
mod keys;
mod mr;
mod qp;
mod rx;
mod sock;
mod srq;
mod term;
mod tx;
mod watch;

pub use cm::{SiwCm, SiwConnRequest};
pub use config::{SiwConfig, TcpKeepalive, WireTap, SOCKET_BUFFERS};
pub use cq::SiwCq;
pub use device::SiwDevice;
pub use mr::{SiwMr, SiwPd};
pub use qp::SiwQp;
pub use srq::SiwSrq;

use std::net::SocketAddr;

use crate::fabric::Provider;

/// Most scatter-gather entries per work request.
pub const MAX_SGE: usize = 8;

/// The siw provider's type family.
#[derive(Debug, Clone, Copy, Default)]
pub struct SiwProvider;

impl Provider for SiwProvider {
    const NAME: &'static str = "siw";
    type Device = SiwDevice;
    type Pd = SiwPd;
    type Mr = SiwMr;
    type Cq = SiwCq;
    type Qp = SiwQp;
    type Srq = SiwSrq;
    type Cm = SiwCm;
    type ConnRequest = SiwConnRequest;
    type Addr = SocketAddr;
}

/// Entry points for the fuzz targets (`engine/fuzz`): not part of the API.
#[doc(hidden)]
pub mod fuzzing {
    use std::sync::Arc;

    use super::engine::Engine;
    use super::keys::KeyTable;
    use super::qp::{QpShared, RqWqe};
    use super::MAX_SGE;
    use crate::fabric::mr::Access;
    use crate::fabric::ConnId;
    use crate::fabric::{QpCaps, QpState, Sge};

    /// Octets of registered memory the engine may place into.
    const REGION: usize = 16 * 1024;
    /// Octets of canary on each side of it.
    const GUARD: usize = 4096;
    const CANARY: u8 = 0x5c;

    /// Feeds `stream` to the receive engine of one running siw connection, in pieces of
    /// `piece` octets, with CRCs if `crc`. The connection's protection domain has one
    /// registration covering 16 KiB (all access; its key comes from a fixed
    /// seed, so a fuzzer can find it), a fast-registration key over its first half, and
    /// four posted receives in it. Whatever the stream says, no octet outside the
    /// region may change: asserted here. Returns the keys, for seeds.
    pub fn rx_stream(stream: &[u8], piece: usize, crc: bool) -> (u32, u32) {
        let mem_base = memory();
        // SAFETY: `memory` mapped GUARD + REGION + GUARD octets there for the process's
        // life; fuzz runs are single-threaded, and so is each test using this.
        let mem =
            unsafe { core::slice::from_raw_parts_mut(mem_base as *mut u8, 2 * GUARD + REGION) };
        mem.fill(CANARY);
        let base = mem_base as u64 + GUARD as u64;
        let keys = KeyTable::with_seed(8, Some(0x5eed));
        let pd = 1;
        let (_, key) = keys
            .register(pd, Access::ALL, base, REGION as u64)
            .expect("a fresh table has room");
        let (_, fast) = keys.alloc_fast(pd, REGION as u64).expect("room");
        let fast = crate::fabric::mr::retag_key(fast, 0x42);
        let region = Sge::new(base, (REGION / 2) as u32, key);
        let _ = keys.fast_reg_over(fast, pd, Access::ALL, &region);
        let caps = QpCaps {
            max_send_wr: 16,
            max_recv_wr: 4,
            max_send_sge: MAX_SGE as u32,
            max_recv_sge: MAX_SGE as u32,
        };
        let qp = Arc::new(QpShared::new(1, ConnId(1), pd, caps, QpState::ReadyToSend));
        for i in 0..4u64 {
            let mut w = RqWqe::EMPTY;
            w.wr_id = i;
            w.num_sge = 1;
            w.sge[0] = Sge::new(base + i * 4096, 4096, key);
            w.len = 4096;
            // SAFETY: four receives fit the queue's depth of four, written before the
            // engine (this thread, below) reads them.
            unsafe { qp.rq.write(i, w) };
        }
        qp.rq_posted.store(4, std::sync::atomic::Ordering::Release);
        let mut engine = Engine::new(qp, 0, 0, true, 4, 4);
        engine.rx = super::rx::RxState::new(crc);
        for chunk in stream.chunks(piece.max(1)) {
            engine.receive(&keys, chunk);
        }
        // SAFETY: as above; the engine is done with the memory.
        let mem = unsafe { core::slice::from_raw_parts(mem_base as *const u8, 2 * GUARD + REGION) };
        assert!(
            mem[..GUARD].iter().all(|&b| b == CANARY)
                && mem[GUARD + REGION..].iter().all(|&b| b == CANARY),
            "the receive engine wrote outside its registered memory"
        );
        (key, fast)
    }

    /// Address of the fuzzed region's first octet (the registration's start).
    pub fn region_addr() -> u64 {
        memory() as u64 + GUARD as u64
    }

    /// Octets of the region that no longer hold the canary after the last run.
    pub fn region_written() -> usize {
        // SAFETY: as in `rx_stream`.
        let mem = unsafe { core::slice::from_raw_parts((memory() + GUARD) as *const u8, REGION) };
        mem.iter().filter(|&&b| b != CANARY).count()
    }

    /// The fuzzed memory: mapped once, at a fixed address when it is free, so the
    /// addresses a stream must name to reach placement are the same in every run and a
    /// fuzzer can find them.
    fn memory() -> usize {
        static MEM: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        *MEM.get_or_init(|| {
            const FIXED: usize = 0x5100_0000_0000;
            let len = 2 * GUARD + REGION;
            let prot = libc::PROT_READ | libc::PROT_WRITE;
            let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
            // SAFETY: anonymous mappings; NOREPLACE never clobbers an existing one.
            let p = unsafe {
                libc::mmap(
                    FIXED as *mut _,
                    len,
                    prot,
                    flags | libc::MAP_FIXED_NOREPLACE,
                    -1,
                    0,
                )
            };
            let p = if p == libc::MAP_FAILED {
                // SAFETY: as above, anywhere.
                unsafe { libc::mmap(core::ptr::null_mut(), len, prot, flags, -1, 0) }
            } else {
                p
            };
            assert!(p != libc::MAP_FAILED, "cannot map the fuzzed memory");
            p as usize
        })
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use crate::iwarp::fpdu::{encode_fpdu, fpdu_len};
        use crate::iwarp::rdmap::{Opcode, SegmentHeader};

        #[test]
        fn writes_and_sends_are_placed_and_junk_is_survived() {
            let (key, fast) = rx_stream(&[], 1, false);
            let at = region_addr();
            let mut good = Vec::new();
            for (stag, to) in [(key, at + 8192), (fast, at + 100)] {
                let h = SegmentHeader::tagged(Opcode::RdmaWrite, true, stag, to);
                let mut b = vec![0u8; fpdu_len(h.encoded_len() + 64)];
                let n = encode_fpdu(&mut b, &h, &[7; 64], true).unwrap();
                good.extend_from_slice(&b[..n]);
            }
            assert_eq!(rx_stream(&good, 3, true), (key, fast));
            assert_eq!(region_written(), 128, "both Writes were placed");
            let mut stream = Vec::new();
            for (stag, to) in [(key, at), (fast, at + 100), (key ^ 1, at), (key, 1 << 40)] {
                let h = SegmentHeader::tagged(Opcode::RdmaWrite, true, stag, to);
                let mut b = vec![0u8; fpdu_len(h.encoded_len() + 64)];
                let n = encode_fpdu(&mut b, &h, &[7; 64], true).unwrap();
                stream.extend_from_slice(&b[..n]);
            }
            let h = SegmentHeader::untagged(Opcode::Send, true, 0, 1, 0);
            let mut b = vec![0u8; fpdu_len(h.encoded_len() + 5000)];
            let n = encode_fpdu(&mut b, &h, &[9; 5000], true).unwrap();
            stream.extend_from_slice(&b[..n]);
            for piece in [1, 7, 4096, usize::MAX] {
                for crc in [false, true] {
                    assert_eq!(rx_stream(&stream, piece, crc), (key, fast));
                }
            }
            // Deterministic junk, as a fuzzer's first minutes would send.
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
            for len in (0..2000).step_by(37) {
                let junk = crate::fabric::junk(&mut x, len);
                rx_stream(&junk, 1 + len % 13, len % 2 == 0);
            }
        }
    }
}
