//! The outbox: work requests a protocol core has decided to post, staged in fixed
//! storage until the driver posts them.
//!
//! The core never touches a queue pair. It stages send-queue requests (with their
//! scatter-gather entries) and receives here; once per poll the driver posts the whole
//! send chain and the whole receive chain, one doorbell each. Capacities are fixed when
//! the connection is set up (the core's admission control keeps staged plus outstanding
//! requests within the queue depths, so a full outbox is a bookkeeping bug, reported as
//! [`OutboxFull`] rather than a panic).

use core::fmt;

use crate::fabric::{PostError, RecvWr, SendFlags, SendOp, SendWr, Sge};

/// Send-queue requests handed to one `post_send` call at most. Longer chains (rare: a
/// single poll staging more than this) take more than one doorbell.
pub const POST_CHUNK: usize = 64;

/// Chains up to this long are built in a short stack array.
const SHORT_CHAIN: usize = 4;

/// The outbox had no room for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboxFull {
    /// Which part was full.
    pub what: &'static str,
    /// Its capacity.
    pub capacity: usize,
}

impl fmt::Display for OutboxFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "outbox {} full ({} entries)", self.what, self.capacity)
    }
}

impl std::error::Error for OutboxFull {}

/// A staged send-queue request; its gather list lives in the outbox's SGE array.
#[derive(Debug, Clone, Copy)]
struct StagedSend {
    wr_id: u64,
    op: SendOp,
    sge_start: u32,
    sge_len: u32,
    flags: SendFlags,
}

/// A post that the queue pair refused part of: the first `posted` staged send requests
/// went out (and will complete); the rest did not and never will.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartialPost {
    /// Staged requests that were posted.
    pub posted: usize,
    /// The provider's refusal.
    pub error: PostError,
}

/// Staged send and receive chains.
pub struct Outbox {
    sends: Vec<StagedSend>,
    sges: Vec<Sge>,
    recvs: Vec<(u64, Sge)>,
    /// First send request of the last refused post that did not go out.
    unposted_from: Option<usize>,
    /// First receive of the last refused post that did not go out.
    recv_unposted_from: Option<usize>,
}

impl fmt::Debug for Outbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Outbox")
            .field("sends", &self.sends.len())
            .field("sges", &self.sges.len())
            .field("recvs", &self.recvs.len())
            .finish()
    }
}

impl Outbox {
    /// An outbox for up to `sends` send-queue requests carrying `sges` gather entries
    /// in total, and `recvs` receives.
    pub fn with_capacity(sends: usize, sges: usize, recvs: usize) -> Outbox {
        Outbox {
            sends: Vec::with_capacity(sends),
            sges: Vec::with_capacity(sges),
            recvs: Vec::with_capacity(recvs),
            unposted_from: None,
            recv_unposted_from: None,
        }
    }

    /// Stages a send-queue request.
    pub fn push_send(
        &mut self,
        wr_id: u64,
        op: SendOp,
        sgl: &[Sge],
        flags: SendFlags,
    ) -> Result<(), OutboxFull> {
        if self.sends.len() == self.sends.capacity() {
            return Err(OutboxFull {
                what: "send chain",
                capacity: self.sends.capacity(),
            });
        }
        if self.sges.capacity() - self.sges.len() < sgl.len() {
            return Err(OutboxFull {
                what: "scatter-gather storage",
                capacity: self.sges.capacity(),
            });
        }
        let sge_start = self.sges.len() as u32;
        self.sges.extend_from_slice(sgl);
        self.sends.push(StagedSend {
            wr_id,
            op,
            sge_start,
            sge_len: sgl.len() as u32,
            flags,
        });
        Ok(())
    }

    /// Stages a receive of one buffer.
    pub fn push_recv(&mut self, wr_id: u64, sge: Sge) -> Result<(), OutboxFull> {
        if self.recvs.len() == self.recvs.capacity() {
            return Err(OutboxFull {
                what: "receive chain",
                capacity: self.recvs.capacity(),
            });
        }
        self.recvs.push((wr_id, sge));
        Ok(())
    }

    /// Staged send-queue requests.
    #[inline]
    pub fn send_len(&self) -> usize {
        self.sends.len()
    }

    /// Staged receives.
    #[inline]
    pub fn recv_len(&self) -> usize {
        self.recvs.len()
    }

    /// Room left in the send chain.
    #[inline]
    pub fn send_room(&self) -> usize {
        self.sends.capacity() - self.sends.len()
    }

    /// True when nothing is staged.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.sends.is_empty() && self.recvs.is_empty()
    }

    fn wr(&self, s: &StagedSend) -> SendWr<'_> {
        let start = s.sge_start as usize;
        let sgl = self
            .sges
            .get(start..start + s.sge_len as usize)
            .unwrap_or(&[]);
        SendWr {
            wr_id: s.wr_id,
            op: s.op,
            sgl,
            flags: s.flags,
        }
    }

    /// The staged send chain, in order (for tests and tracing).
    pub fn sends(&self) -> impl Iterator<Item = SendWr<'_>> + '_ {
        self.sends.iter().map(|s| self.wr(s))
    }

    /// The staged receives, in order (for tests and tracing).
    pub fn recvs(&self) -> impl Iterator<Item = (u64, Sge)> + '_ {
        self.recvs.iter().copied()
    }

    /// Hands the staged send chain to `post` (`QueuePair::post_send`), at most
    /// [`POST_CHUNK`] requests per call, and empties it. On a refusal the requests that
    /// did not go out stay available through
    /// [`next_unposted_send`](Self::next_unposted_send).
    pub fn post_sends<F>(&mut self, mut post: F) -> Result<usize, PartialPost>
    where
        F: FnMut(&[SendWr<'_>]) -> Result<(), PostError>,
    {
        let total = self.sends.len();
        let mut done = 0;
        while done < total {
            let n = (total - done).min(POST_CHUNK);
            // The chain is built on the stack; most polls stage one or two requests,
            // so a short array spares initialising a full POST_CHUNK one each time.
            let r = if n <= SHORT_CHAIN {
                self.post_send_chunk::<SHORT_CHAIN, F>(done, n, &mut post)
            } else {
                self.post_send_chunk::<POST_CHUNK, F>(done, n, &mut post)
            };
            if let Err(error) = r {
                let posted = done + error.posted.min(n);
                self.unposted_from = Some(posted);
                return Err(PartialPost { posted, error });
            }
            done += n;
        }
        self.sends.clear();
        self.sges.clear();
        Ok(total)
    }

    /// The `wr_id` of the next send request the last refused post left behind, in
    /// order; `None` (and an empty send chain) once all are taken or when the last post
    /// succeeded.
    pub fn next_unposted_send(&mut self) -> Option<u64> {
        if let Some(i) = self.unposted_from {
            if let Some(s) = self.sends.get(i) {
                self.unposted_from = Some(i + 1);
                return Some(s.wr_id);
            }
        }
        self.unposted_from = None;
        self.sends.clear();
        self.sges.clear();
        None
    }

    /// Hands the staged receives to `post` (`QueuePair::post_recv`) as one chain and
    /// empties it. On a refusal the receives that did not go out stay available through
    /// [`next_unposted_recv`](Self::next_unposted_recv).
    pub fn post_recvs<F>(&mut self, mut post: F) -> Result<usize, PostError>
    where
        F: FnMut(&[RecvWr<'_>]) -> Result<(), PostError>,
    {
        let total = self.recvs.len();
        let mut done = 0;
        while done < total {
            let n = (total - done).min(POST_CHUNK);
            let r = if n <= SHORT_CHAIN {
                self.post_recv_chunk::<SHORT_CHAIN, F>(done, n, &mut post)
            } else {
                self.post_recv_chunk::<POST_CHUNK, F>(done, n, &mut post)
            };
            if let Err(e) = r {
                self.recv_unposted_from = Some(done + e.posted.min(n));
                return Err(e);
            }
            done += n;
        }
        self.recvs.clear();
        Ok(total)
    }

    /// Posts staged sends `from..from + n` (`n <= N`) as one chain.
    #[inline(always)]
    fn post_send_chunk<const N: usize, F>(
        &self,
        from: usize,
        n: usize,
        post: &mut F,
    ) -> Result<(), PostError>
    where
        F: FnMut(&[SendWr<'_>]) -> Result<(), PostError>,
    {
        let mut chain = [SendWr::send(0, &[]); N];
        for (slot, s) in chain.iter_mut().zip(&self.sends[from..from + n]) {
            *slot = self.wr(s);
        }
        post(&chain[..n])
    }

    /// Posts staged receives `from..from + n` (`n <= N`) as one chain.
    #[inline(always)]
    fn post_recv_chunk<const N: usize, F>(
        &self,
        from: usize,
        n: usize,
        post: &mut F,
    ) -> Result<(), PostError>
    where
        F: FnMut(&[RecvWr<'_>]) -> Result<(), PostError>,
    {
        let mut chain = [RecvWr { wr_id: 0, sgl: &[] }; N];
        for (slot, (wr_id, sge)) in chain.iter_mut().zip(&self.recvs[from..from + n]) {
            *slot = RecvWr {
                wr_id: *wr_id,
                sgl: core::slice::from_ref(sge),
            };
        }
        post(&chain[..n])
    }

    /// The `wr_id` of the next receive the last refused post left behind, in order;
    /// `None` (and an empty receive chain) once all are taken.
    pub fn next_unposted_recv(&mut self) -> Option<u64> {
        if let Some(i) = self.recv_unposted_from {
            if let Some((id, _)) = self.recvs.get(i) {
                self.recv_unposted_from = Some(i + 1);
                return Some(*id);
            }
        }
        self.recv_unposted_from = None;
        self.recvs.clear();
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::{PostErrorKind, QpState};

    #[test]
    fn posts_whole_chain_with_its_gather_lists() {
        let mut o = Outbox::with_capacity(4, 8, 2);
        let a = Sge::new(0x1000, 16, 7);
        let b = Sge::new(0x2000, 32, 7);
        o.push_send(1, SendOp::Send, &[a, b], SendFlags::SIGNALED)
            .unwrap();
        o.push_send(
            2,
            SendOp::LocalInvalidate { key: 9 },
            &[],
            SendFlags::SIGNALED,
        )
        .unwrap();
        let mut seen = Vec::new();
        let n = o
            .post_sends(|wrs| {
                for w in wrs {
                    seen.push((w.wr_id, w.sgl.to_vec()));
                }
                Ok(())
            })
            .unwrap();
        assert_eq!(n, 2);
        assert_eq!(seen, vec![(1, vec![a, b]), (2, vec![])]);
        assert!(o.is_empty());
    }

    #[test]
    fn full_outbox_is_a_typed_refusal() {
        let mut o = Outbox::with_capacity(1, 1, 1);
        let s = Sge::new(1, 1, 1);
        assert!(o
            .push_send(1, SendOp::Send, &[s, s], SendFlags::NONE)
            .is_err());
        o.push_send(1, SendOp::Send, &[s], SendFlags::NONE).unwrap();
        assert_eq!(
            o.push_send(2, SendOp::Send, &[], SendFlags::NONE),
            Err(OutboxFull {
                what: "send chain",
                capacity: 1
            })
        );
        o.push_recv(3, s).unwrap();
        assert!(o.push_recv(4, s).is_err());
    }

    #[test]
    fn refused_post_reports_the_unposted_ids() {
        let mut o = Outbox::with_capacity(3, 3, 3);
        for id in 1..=3 {
            o.push_send(id, SendOp::Send, &[], SendFlags::SIGNALED)
                .unwrap();
        }
        let err = o
            .post_sends(|_| {
                Err(PostError {
                    posted: 1,
                    kind: PostErrorKind::InvalidState(QpState::Error),
                })
            })
            .unwrap_err();
        assert_eq!(err.posted, 1);
        let left: Vec<_> = core::iter::from_fn(|| o.next_unposted_send()).collect();
        assert_eq!(left, vec![2, 3]);
        assert!(o.is_empty());

        for id in 10..=12 {
            o.push_recv(id, Sge::default()).unwrap();
        }
        let r = o.post_recvs(|_| {
            Err(PostError {
                posted: 2,
                kind: PostErrorKind::QueueFull { depth: 2 },
            })
        });
        assert!(r.is_err());
        let left: Vec<_> = core::iter::from_fn(|| o.next_unposted_recv()).collect();
        assert_eq!(left, vec![12]);
        assert!(o.is_empty());
    }
}
