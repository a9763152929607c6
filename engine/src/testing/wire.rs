//! A test wire: takes a core's [`Transmit`](crate::core::Transmit) the way a driver would, records every work
//! request (with the bytes its gather list names), and delivers messages into posted
//! receives, all inside the pool memory it was told about.
//!
//! Core tests drive a core through this instead of a queue pair: they assert on the
//! staged chains directly and synthesise the completions a fabric would report. Every
//! access is bounds-checked against the arenas of the pools the wire was given, so a core
//! that stages an entry outside its own buffers fails the test with a typed
//! [`WireError`] instead of reading or writing stray memory.

use std::collections::VecDeque;
use std::time::Instant;

use rpcrdma_pools::Pool;

use crate::conn::post_transmit;
use crate::core::{PostFailure, Transmitter};
use crate::fabric::{
    Completion, PostError, PostErrorKind, RecvWr, SendOp, SendWr, Sge, WcOpcode, WcStatus,
};

/// A scatter-gather entry that lies in no pool the wire knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{len} octets at {addr:#x} lie in no pool the wire was given")]
pub struct WireError {
    /// Where the entry starts.
    pub addr: u64,
    /// Its length.
    pub len: u64,
}

/// A send-queue request the wire saw posted.
#[derive(Debug, Clone)]
pub struct Posted {
    /// Its identifier.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// Its scatter-gather list.
    pub sgl: Vec<Sge>,
    /// The gathered bytes of a Send or RDMA Write (empty for other operations).
    pub bytes: Vec<u8>,
}

/// A receive the wire saw posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostedRecv {
    /// Its identifier.
    pub wr_id: u64,
    /// Its buffer.
    pub sge: Sge,
}

/// The test wire. See the module documentation.
#[derive(Debug, Default)]
pub struct Wire {
    pools: Vec<Pool>,
    /// Send-queue requests posted and not yet completed, oldest first.
    pub sends: VecDeque<Posted>,
    /// Receives posted and not yet used, oldest first.
    pub recvs: VecDeque<PostedRecv>,
    /// Refuse every send-queue post, as a device does with EINVAL for a request it
    /// rejects (the queue pair stays as it was: nothing flushes by itself).
    pub refuse_sends: bool,
    /// Entries outside every known pool, in the order seen (a test asserts it stays
    /// empty; the wire records instead of panicking so the core's handling can finish).
    pub faults: Vec<WireError>,
}

impl Wire {
    /// A wire that may touch the memory of `pools`.
    pub fn new<'a>(pools: impl IntoIterator<Item = &'a Pool>) -> Wire {
        let mut w = Wire::default();
        w.pools = pools.into_iter().cloned().collect();
        w
    }

    /// Lets the wire touch `pool`'s memory too.
    pub fn allow(&mut self, pool: &Pool) {
        self.pools.push(pool.clone());
    }

    /// The core's transmit of this poll (if any), posted here, and the report back to
    /// the core: what a driver does once per poll.
    pub fn pump<C: Transmitter>(&mut self, core: &mut C, now: Instant) {
        let Some(t) = core.poll_transmit(now) else {
            return;
        };
        match post_transmit(&t, self, Wire::take_recvs, Wire::take_sends) {
            Ok(()) => core.on_posted(),
            Err(f) => core.on_post_failed(f, now),
        }
    }

    /// Like [`pump`](Self::pump), but returns the refusal a core was told about.
    pub fn pump_report<C: Transmitter>(
        &mut self,
        core: &mut C,
        now: Instant,
    ) -> Option<PostFailure> {
        let t = core.poll_transmit(now)?;
        match post_transmit(&t, self, Wire::take_recvs, Wire::take_sends) {
            Ok(()) => {
                core.on_posted();
                None
            }
            Err(f) => {
                core.on_post_failed(f, now);
                Some(f)
            }
        }
    }

    fn take_recvs(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        for w in wrs {
            if let Some(sge) = w.sgl.first() {
                self.recvs.push_back(PostedRecv {
                    wr_id: w.wr_id,
                    sge: *sge,
                });
            }
        }
        Ok(())
    }

    fn take_sends(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        if self.refuse_sends && !wrs.is_empty() {
            return Err(PostError {
                posted: 0,
                kind: PostErrorKind::Malformed("refused by the test wire"),
            });
        }
        for w in wrs {
            let mut bytes = Vec::new();
            if matches!(
                w.op,
                SendOp::Send | SendOp::SendWithInvalidate { .. } | SendOp::RdmaWrite { .. }
            ) {
                for s in w.sgl {
                    let mut b = vec![0; s.length as usize];
                    match self.read(s.addr, &mut b) {
                        Ok(()) => bytes.extend_from_slice(&b),
                        Err(e) => self.faults.push(e),
                    }
                }
            }
            self.sends.push_back(Posted {
                wr_id: w.wr_id,
                op: w.op,
                sgl: w.sgl.to_vec(),
                bytes,
            });
        }
        Ok(())
    }

    /// The pool whose arena holds `[addr, addr + len)`, as a pointer to `addr`.
    fn locate(&self, addr: u64, len: usize) -> Result<*mut u8, WireError> {
        let fault = WireError {
            addr,
            len: len as u64,
        };
        let ptr = usize::try_from(addr).map_err(|_| fault)? as *mut u8;
        self.pools
            .iter()
            .any(|p| p.arena().contains(ptr, len))
            .then_some(ptr)
            .ok_or(fault)
    }

    /// Copies `out.len()` octets at `addr` out of pool memory, as a device would.
    pub fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), WireError> {
        let src = self.locate(addr, out.len())?;
        // SAFETY: `locate` checked the range lies inside a live arena (the wire holds
        // its pool); like a device, the copy sees whatever the owner last wrote.
        unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Copies `data` into pool memory at `addr`, as a device would.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), WireError> {
        let dst = self.locate(addr, data.len())?;
        // SAFETY: as in `read`; the cores hand the wire only buffers they do not touch
        // until the matching completion (posted receives, registered chunks).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        Ok(())
    }

    /// Places `msg` in the oldest posted receive (cut to its length) and returns the
    /// receive's completion, marked as having invalidated `invalidated`; `None` when no
    /// receive is posted.
    pub fn deliver_invalidating(
        &mut self,
        msg: &[u8],
        invalidated: Option<u32>,
    ) -> Option<Completion> {
        let r = self.recvs.pop_front()?;
        let n = msg.len().min(r.sge.length as usize);
        if let Err(e) = self.write(r.sge.addr, &msg[..n]) {
            self.faults.push(e);
        }
        Some(Completion {
            wr_id: r.wr_id,
            opcode: WcOpcode::Recv,
            status: WcStatus::Success,
            byte_len: n as u32,
            qp_num: 1,
            invalidated_rkey: invalidated,
        })
    }

    /// Places `msg` in the oldest posted receive, which must be long enough, and returns
    /// its completion.
    ///
    /// # Panics
    /// When no receive is posted or `msg` is longer than it: a test's own mistake.
    pub fn deliver(&mut self, msg: &[u8]) -> Completion {
        let len = self.recvs.front().expect("a posted receive").sge.length;
        assert!(msg.len() <= len as usize, "message longer than the receive");
        self.deliver_invalidating(msg, None)
            .expect("a posted receive")
    }

    /// Successful completions for every send-queue request posted so far.
    pub fn complete_sends(&mut self) -> Vec<Completion> {
        self.sends
            .drain(..)
            .map(|p| completion_of(&p, WcStatus::Success))
            .collect()
    }

    /// Flushes everything posted (the queue pair went to error): send-queue requests
    /// first, then receives.
    pub fn flush(&mut self) -> Vec<Completion> {
        let mut out: Vec<Completion> = self
            .sends
            .drain(..)
            .map(|p| completion_of(&p, WcStatus::WrFlushed))
            .collect();
        out.extend(self.recvs.drain(..).map(|r| Completion {
            wr_id: r.wr_id,
            opcode: WcOpcode::Recv,
            status: WcStatus::WrFlushed,
            byte_len: 0,
            qp_num: 1,
            invalidated_rkey: None,
        }));
        out
    }

    /// The completion of the oldest posted send-queue request, with `status`.
    pub fn complete_send(&mut self, status: WcStatus) -> Option<Completion> {
        let p = self.sends.pop_front()?;
        Some(completion_of(&p, status))
    }
}

/// The completion a send-queue request ends with.
pub fn completion_of(p: &Posted, status: WcStatus) -> Completion {
    Completion {
        wr_id: p.wr_id,
        opcode: match p.op {
            SendOp::Send | SendOp::SendWithInvalidate { .. } => WcOpcode::Send,
            SendOp::RdmaWrite { .. } => WcOpcode::RdmaWrite,
            SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
            SendOp::FastReg { .. } => WcOpcode::FastReg,
            SendOp::LocalInvalidate { .. } => WcOpcode::LocalInvalidate,
        },
        status,
        byte_len: p.bytes.len() as u32,
        qp_num: 1,
        invalidated_rkey: None,
    }
}

impl Drop for Wire {
    /// A core that staged memory outside its pools fails the test that drove it, even
    /// when the test did not look at [`Wire::faults`].
    fn drop(&mut self) {
        if !std::thread::panicking() {
            assert_eq!(
                self.faults,
                [],
                "work requests named memory outside the pools"
            );
        }
    }
}
