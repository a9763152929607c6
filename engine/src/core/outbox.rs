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
use core::mem::MaybeUninit;
use std::time::Instant;

use crate::fabric::{PostError, RecvWr, SendFlags, SendOp, SendWr, Sge};

/// The outbox had no room for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("outbox {what} full ({capacity} entries)")]
pub struct OutboxFull {
    /// Which part was full.
    pub what: OutboxPart,
    /// Its capacity.
    pub capacity: usize,
}

/// The part of a connection's outbox that was full ([`OutboxFull::what`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OutboxPart {
    /// The chain of staged send-queue requests.
    SendChain,
    /// The scatter-gather entries of the staged sends.
    SgeStorage,
    /// The chain of staged receives.
    RecvChain,
}

impl OutboxPart {
    /// The part in words, as [`OutboxFull`]'s message names it.
    pub const fn what(self) -> &'static str {
        match self {
            OutboxPart::SendChain => "send chain",
            OutboxPart::SgeStorage => "scatter-gather storage",
            OutboxPart::RecvChain => "receive chain",
        }
    }
}

impl fmt::Display for OutboxPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.what())
    }
}

/// A staged send-queue request; its gather list lives in the outbox's SGE array.
#[derive(Debug, Clone, Copy)]
struct StagedSend {
    wr_id: u64,
    op: SendOp,
    sge_start: u32,
    sge_len: u32,
    flags: SendFlags,
}

/// Most arenas a connection draws from through another domain's keys
/// ([`LocalKeyMap`]): a poll group's receive, send and large pools, and one spare.
pub(crate) const MAX_KEY_ALIASES: usize = 4;

/// Local keys to rewrite as requests are staged: `(arena key, this connection's key)`.
///
/// A poll group whose device pins registrations keeps its pools once for all of its
/// connections, each arena registered in every connection's own protection domain (the
/// domain stays the trust boundary between peers). A buffer carries one local key, its
/// arena's canonical one (`Arena::keys`); each connection's outbox turns it into the
/// key of its own registration of the same range, so the device checks the entry
/// against that connection's domain. Empty (the usual case: a connection's own pools)
/// costs one branch per staged request.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LocalKeyMap {
    pairs: [(u32, u32); MAX_KEY_ALIASES],
    len: u8,
}

impl LocalKeyMap {
    /// Adds `from -> to`; false when the map is full (the caller refuses the set-up).
    pub(crate) fn insert(&mut self, from: u32, to: u32) -> bool {
        let n = self.len as usize;
        if n == MAX_KEY_ALIASES {
            return false;
        }
        self.pairs[n] = (from, to);
        self.len += 1;
        true
    }

    /// The key `lkey` stands for on this connection (itself when not mapped).
    #[inline]
    fn map(&self, lkey: u32) -> u32 {
        for &(from, to) in &self.pairs[..self.len as usize] {
            if from == lkey {
                return to;
            }
        }
        lkey
    }

    #[inline]
    fn apply(&self, sges: &mut [Sge]) {
        for s in sges {
            s.lkey = self.map(s.lkey);
        }
    }
}

/// Staged send and receive chains.
pub(crate) struct Outbox {
    sends: Vec<StagedSend>,
    sges: Vec<Sge>,
    /// A receive's scatter list: one buffer, or (send-based DDP) a header segment
    /// and a DDP segment; a second entry of length 0 is absent.
    recvs: Vec<(u64, [Sge; 2])>,
    /// Local keys rewritten as requests are staged (empty unless the connection draws
    /// from a poll group's pools).
    keys: LocalKeyMap,
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
    pub(crate) fn with_capacity(sends: usize, sges: usize, recvs: usize) -> Outbox {
        Outbox {
            sends: Vec::with_capacity(sends),
            sges: Vec::with_capacity(sges),
            recvs: Vec::with_capacity(recvs),
            keys: LocalKeyMap::default(),
        }
    }

    /// Rewrites the local keys of the send request staged last (out of line: only a
    /// connection on a poll group's pools has a key map).
    #[cold]
    #[inline(never)]
    fn map_last_send(&mut self) {
        let keys = self.keys;
        if let Some(s) = self.sends.last_mut() {
            let start = s.sge_start as usize;
            keys.apply(&mut self.sges[start..]);
            if let SendOp::FastReg { region, .. } = &mut s.op {
                region.lkey = keys.map(region.lkey);
            }
        }
    }

    /// Rewrites the local keys of the receive staged last.
    #[cold]
    #[inline(never)]
    fn map_last_recv(&mut self) {
        let keys = self.keys;
        if let Some((_, sgl)) = self.recvs.last_mut() {
            keys.apply(sgl);
        }
    }

    /// Rewrites local keys by `keys` in every request staged, now and from now on (a
    /// core stages its first receives before its driver has registered anything).
    pub(crate) fn set_key_map(&mut self, keys: LocalKeyMap) {
        self.keys = keys;
        keys.apply(&mut self.sges);
        for (_, sgl) in &mut self.recvs {
            keys.apply(sgl);
        }
        for s in &mut self.sends {
            if let SendOp::FastReg { region, .. } = &mut s.op {
                region.lkey = keys.map(region.lkey);
            }
        }
    }

    /// Stages a send-queue request.
    pub(crate) fn push_send(
        &mut self,
        wr_id: u64,
        op: SendOp,
        sgl: &[Sge],
        flags: SendFlags,
    ) -> Result<(), OutboxFull> {
        if self.sends.len() == self.sends.capacity() {
            return Err(OutboxFull {
                what: OutboxPart::SendChain,
                capacity: self.sends.capacity(),
            });
        }
        if self.sges.capacity() - self.sges.len() < sgl.len() {
            return Err(OutboxFull {
                what: OutboxPart::SgeStorage,
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
        if self.keys.len != 0 {
            self.map_last_send();
        }
        Ok(())
    }

    /// Stages a send-queue request gathering the one entry `sge`: what
    /// [`push_send`](Self::push_send) does for a one-entry list, without the slice
    /// copy (a call to `memcpy` of run-time length) and its length bookkeeping. The
    /// common Send (a call's or a reply's, header and message in one buffer) takes
    /// this way.
    #[inline(always)]
    pub(crate) fn push_send_one(
        &mut self,
        wr_id: u64,
        op: SendOp,
        sge: Sge,
        flags: SendFlags,
    ) -> Result<(), OutboxFull> {
        if self.sends.len() == self.sends.capacity() || self.sges.len() == self.sges.capacity() {
            return Err(self.full_for_one());
        }
        let sge_start = self.sges.len() as u32;
        self.sges.push(sge);
        self.sends.push(StagedSend {
            wr_id,
            op,
            sge_start,
            sge_len: 1,
            flags,
        });
        if self.keys.len != 0 {
            self.map_last_send();
        }
        Ok(())
    }

    /// Which part [`push_send_one`](Self::push_send_one) found full.
    #[cold]
    fn full_for_one(&self) -> OutboxFull {
        if self.sends.len() == self.sends.capacity() {
            OutboxFull {
                what: OutboxPart::SendChain,
                capacity: self.sends.capacity(),
            }
        } else {
            OutboxFull {
                what: OutboxPart::SgeStorage,
                capacity: self.sges.capacity(),
            }
        }
    }

    /// Stages a receive of one buffer.
    // Inlined: a served call's receive is staged again through here (a call of its own
    // cost about as much as the push). Its key is mapped once, by `map_last_recv`.
    #[inline(always)]
    pub(crate) fn push_recv(&mut self, wr_id: u64, sge: Sge) -> Result<(), OutboxFull> {
        if self.recvs.len() == self.recvs.capacity() {
            return Err(self.recv_chain_full());
        }
        self.recvs.push((wr_id, [sge, Sge::default()]));
        if self.keys.len != 0 {
            self.map_last_recv();
        }
        Ok(())
    }

    /// [`push_recv`](Self::push_recv)'s error.
    #[cold]
    fn recv_chain_full(&self) -> OutboxFull {
        OutboxFull {
            what: OutboxPart::RecvChain,
            capacity: self.recvs.capacity(),
        }
    }

    /// Stages a receive scattered over two buffers (`core/recv_segments.rs`).
    pub(crate) fn push_recv2(&mut self, wr_id: u64, sgl: [Sge; 2]) -> Result<(), OutboxFull> {
        if self.recvs.len() == self.recvs.capacity() {
            return Err(OutboxFull {
                what: OutboxPart::RecvChain,
                capacity: self.recvs.capacity(),
            });
        }
        self.recvs.push((wr_id, sgl));
        if self.keys.len != 0 {
            self.map_last_recv();
        }
        Ok(())
    }

    /// Staged send-queue requests.
    #[inline]
    pub(crate) fn send_len(&self) -> usize {
        self.sends.len()
    }

    /// Staged receives.
    #[inline]
    pub(crate) fn recv_len(&self) -> usize {
        self.recvs.len()
    }

    /// True when nothing is staged.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.sends.is_empty() && self.recvs.is_empty()
    }

    /// Requests staged, sends and receives.
    pub(crate) fn len(&self) -> usize {
        self.sends.len() + self.recvs.len()
    }

    #[inline]
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

    /// The `wr_id` of staged send request `i`.
    #[inline]
    pub(crate) fn send_id(&self, i: usize) -> Option<u64> {
        self.sends.get(i).map(|s| s.wr_id)
    }

    /// The `wr_id` of staged receive `i`.
    #[inline]
    pub(crate) fn recv_id(&self, i: usize) -> Option<u64> {
        self.recvs.get(i).map(|r| r.0)
    }

    /// Forgets the receives staged (a connection switching to a shared receive queue
    /// before its first post).
    pub(crate) fn clear_recvs(&mut self) {
        self.recvs.clear();
    }

    /// Forgets everything staged (the driver posted it, or it was accounted as flushed).
    #[inline]
    pub(crate) fn clear(&mut self) {
        self.sends.clear();
        self.sges.clear();
        self.recvs.clear();
    }
}

/// The work requests a core staged, borrowed for the driver to post: the receive chain
/// first (so replies to what is about to be sent find buffers), then the send chain, each
/// with as few doorbells as the provider allows. The driver reports back with
/// [`on_posted`](crate::core::RequesterCore::on_posted) or
/// [`on_post_failed`](crate::core::RequesterCore::on_post_failed) before the core is
/// used again.
#[derive(Clone, Copy)]
pub struct Transmit<'a> {
    outbox: &'a Outbox,
}

impl fmt::Debug for Transmit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transmit")
            .field("recvs", &self.outbox.recvs.len())
            .field("sends", &self.outbox.sends.len())
            .finish()
    }
}

impl<'a> Transmit<'a> {
    /// The staged chains of `outbox`, or `None` when nothing is staged.
    #[inline]
    pub(crate) fn of(outbox: &'a Outbox) -> Option<Transmit<'a>> {
        (!outbox.is_empty()).then_some(Transmit { outbox })
    }

    /// Receives to post, in order.
    #[inline]
    pub fn recvs(&self) -> impl ExactSizeIterator<Item = RecvWr<'a>> + 'a {
        self.outbox.recvs.iter().map(|(wr_id, sgl)| RecvWr {
            wr_id: *wr_id,
            sgl: &sgl[..1 + usize::from(sgl[1].length > 0)],
        })
    }

    /// Send-queue requests to post, in order, with their gather lists.
    #[inline]
    pub fn sends(&self) -> impl ExactSizeIterator<Item = SendWr<'a>> + 'a {
        let o = self.outbox;
        o.sends.iter().map(move |s| o.wr(s))
    }

    /// Receives staged.
    #[inline]
    pub fn recv_count(&self) -> usize {
        self.outbox.recvs.len()
    }

    /// Send-queue requests staged.
    #[inline]
    pub fn send_count(&self) -> usize {
        self.outbox.sends.len()
    }

    /// Writes the staged receives from the `from`-th on into `chain`, as many as fit,
    /// and returns them: a chain of work requests as a provider takes it, built by one
    /// loop over the staged entries (no iterator adapters, no blank request for places
    /// an iterator might leave unfilled).
    #[inline(always)]
    pub(crate) fn fill_recvs<'c>(
        &self,
        from: usize,
        chain: &'c mut [MaybeUninit<RecvWr<'a>>],
    ) -> &'c [RecvWr<'a>] {
        let staged: &'a [(u64, [Sge; 2])] = self.outbox.recvs.get(from..).unwrap_or(&[]);
        let n = staged.len().min(chain.len());
        for (slot, (wr_id, sgl)) in chain.iter_mut().zip(staged) {
            slot.write(RecvWr {
                wr_id: *wr_id,
                sgl: &sgl[..1 + usize::from(sgl[1].length > 0)],
            });
        }
        // SAFETY: the loop wrote the first `n` places (the shorter of the two lengths),
        // and `MaybeUninit<RecvWr>` has the layout of `RecvWr`.
        unsafe { core::slice::from_raw_parts(chain.as_ptr().cast::<RecvWr<'a>>(), n) }
    }

    /// [`fill_recvs`](Self::fill_recvs) for the staged send-queue requests.
    #[inline(always)]
    pub(crate) fn fill_sends<'c>(
        &self,
        from: usize,
        chain: &'c mut [MaybeUninit<SendWr<'a>>],
    ) -> &'c [SendWr<'a>] {
        let o: &'a Outbox = self.outbox;
        let staged = o.sends.get(from..).unwrap_or(&[]);
        let n = staged.len().min(chain.len());
        for (slot, s) in chain.iter_mut().zip(staged) {
            slot.write(o.wr(s));
        }
        // SAFETY: as in `fill_recvs`.
        unsafe { core::slice::from_raw_parts(chain.as_ptr().cast::<SendWr<'a>>(), n) }
    }
}

/// A protocol core as a driver posts for it: both cores implement it, so one posting
/// routine (`conn::transmit`, or a test's wire) serves either.
pub trait Transmitter {
    /// Runs the poll's own work and hands out what is staged (`None`: nothing).
    fn poll_transmit(&mut self, now: Instant) -> Option<Transmit<'_>>;
    /// Everything in the last [`Transmit`] was posted.
    fn on_posted(&mut self);
    /// Part of the last [`Transmit`] was refused.
    fn on_post_failed(&mut self, failure: PostFailure, now: Instant);
}

/// How far a refused post got: each chain went out up to its count, the rest never
/// reached the queue pair. A chain the provider took whole has its full length here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostFailure {
    /// Receives of the [`Transmit`] that were posted.
    pub recvs_posted: usize,
    /// Send-queue requests of the [`Transmit`] that were posted.
    pub sends_posted: usize,
    /// The provider's refusal.
    pub error: PostError,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::Access;

    #[test]
    fn a_key_map_rewrites_mapped_local_keys_and_leaves_the_rest() {
        let mut o = Outbox::with_capacity(4, 8, 4);
        let mut keys = LocalKeyMap::default();
        assert!(keys.insert(7, 70));
        assert!(keys.insert(8, 80));
        o.set_key_map(keys);
        let a = Sge::new(0x1000, 16, 7);
        let b = Sge::new(0x2000, 32, 9);
        o.push_send(1, SendOp::Send, &[a, b], SendFlags::SIGNALED)
            .unwrap();
        let reg = SendOp::FastReg {
            key: 0x100,
            region: Sge::new(0x3000, 64, 8),
            access: Access::REMOTE_READ,
        };
        o.push_send(2, reg, &[], SendFlags::SIGNALED).unwrap();
        o.push_recv(3, Sge::new(0x4000, 64, 8)).unwrap();
        o.push_recv2(4, [Sge::new(0x5000, 8, 7), Sge::new(0x6000, 8, 9)])
            .unwrap();
        let t = Transmit::of(&o).unwrap();
        let sends: Vec<_> = t.sends().collect();
        let lkeys: Vec<u32> = sends[0].sgl.iter().map(|s| s.lkey).collect();
        assert_eq!(lkeys, vec![70, 9]);
        match sends[1].op {
            SendOp::FastReg { region, key, .. } => assert_eq!((region.lkey, key), (80, 0x100)),
            other => panic!("{other:?}"),
        }
        let recvs: Vec<Vec<u32>> = t
            .recvs()
            .map(|r| r.sgl.iter().map(|s| s.lkey).collect())
            .collect();
        assert_eq!(recvs, vec![vec![80], vec![70, 9]]);
    }

    #[test]
    fn a_receive_key_is_mapped_once() {
        // A connection key that is also another arena's key must not be mapped again.
        let mut o = Outbox::with_capacity(1, 1, 2);
        let mut keys = LocalKeyMap::default();
        assert!(keys.insert(7, 8));
        assert!(keys.insert(8, 80));
        o.set_key_map(keys);
        o.push_recv(1, Sge::new(0x4000, 64, 7)).unwrap();
        o.push_recv(2, Sge::new(0x5000, 64, 8)).unwrap();
        let t = Transmit::of(&o).unwrap();
        let recvs: Vec<Vec<u32>> = t
            .recvs()
            .map(|r| r.sgl.iter().map(|s| s.lkey).collect())
            .collect();
        assert_eq!(recvs, vec![vec![8], vec![80]]);
        assert!(o.push_recv(3, Sge::new(0x6000, 64, 7)).is_err());
    }

    #[test]
    fn a_key_map_holds_at_most_its_capacity() {
        let mut keys = LocalKeyMap::default();
        for i in 0..MAX_KEY_ALIASES as u32 {
            assert!(keys.insert(i, i + 100));
        }
        assert!(!keys.insert(99, 199));
        assert_eq!(keys.map(99), 99);
        assert_eq!(keys.map(2), 102);
    }

    #[test]
    fn transmit_shows_the_chains_with_their_gather_lists() {
        let mut o = Outbox::with_capacity(4, 8, 2);
        assert!(Transmit::of(&o).is_none());
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
        o.push_recv(5, a).unwrap();
        let t = Transmit::of(&o).expect("staged");
        assert_eq!((t.recv_count(), t.send_count()), (1, 2));
        let sends: Vec<_> = t.sends().map(|w| (w.wr_id, w.sgl.to_vec())).collect();
        assert_eq!(sends, vec![(1, vec![a, b]), (2, vec![])]);
        let recvs: Vec<_> = t.recvs().map(|r| (r.wr_id, r.sgl.to_vec())).collect();
        assert_eq!(recvs, vec![(5, vec![a])]);
        assert_eq!(
            (o.send_id(1), o.recv_id(0), o.recv_id(1)),
            (Some(2), Some(5), None)
        );
        o.clear();
        assert!(o.is_empty() && Transmit::of(&o).is_none());
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
                what: OutboxPart::SendChain,
                capacity: 1
            })
        );
        o.push_recv(3, s).unwrap();
        assert!(o.push_recv(4, s).is_err());
    }

    #[test]
    fn chains_are_filled_from_any_place_as_the_iterators_show_them() {
        let mut o = Outbox::with_capacity(8, 16, 8);
        let a = Sge::new(0x1000, 16, 7);
        let b = Sge::new(0x2000, 32, 9);
        o.push_send(1, SendOp::Send, &[a], SendFlags::SIGNALED)
            .unwrap();
        o.push_send(2, SendOp::Send, &[a, b], SendFlags::NONE)
            .unwrap();
        o.push_send_one(
            3,
            SendOp::SendWithInvalidate { rkey: 5 },
            b,
            SendFlags::SIGNALED,
        )
        .unwrap();
        o.push_send(4, SendOp::LocalInvalidate { key: 6 }, &[], SendFlags::NONE)
            .unwrap();
        o.push_recv(10, a).unwrap();
        o.push_recv2(11, [a, b]).unwrap();
        o.push_recv(12, b).unwrap();
        let t = Transmit::of(&o).expect("staged");
        let sends: Vec<SendWr<'_>> = t.sends().collect();
        let recvs: Vec<RecvWr<'_>> = t.recvs().collect();
        let same_send = |x: &SendWr<'_>, y: &SendWr<'_>| {
            x.wr_id == y.wr_id && x.op == y.op && x.sgl == y.sgl && x.flags == y.flags
        };
        for from in 0..=5 {
            for places in 0..=5 {
                let mut chain = vec![MaybeUninit::<SendWr<'_>>::uninit(); places];
                let got = t.fill_sends(from, &mut chain);
                let want = sends.get(from..).unwrap_or(&[]);
                let want = &want[..want.len().min(places)];
                assert_eq!(got.len(), want.len(), "sends from {from}, {places} places");
                assert!(got.iter().zip(want).all(|(x, y)| same_send(x, y)));
                let mut chain = vec![MaybeUninit::<RecvWr<'_>>::uninit(); places];
                let got = t.fill_recvs(from, &mut chain);
                let want = recvs.get(from..).unwrap_or(&[]);
                let want = &want[..want.len().min(places)];
                assert_eq!(got.len(), want.len(), "recvs from {from}, {places} places");
                assert!(got
                    .iter()
                    .zip(want)
                    .all(|(x, y)| x.wr_id == y.wr_id && x.sgl == y.sgl));
            }
        }
        // What the chains hold, spelled out: the two-entry receive keeps both entries.
        let mut chain = [MaybeUninit::<RecvWr<'_>>::uninit(); 4];
        let got = t.fill_recvs(1, &mut chain);
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].wr_id, got[0].sgl), (11, &[a, b][..]));
        assert_eq!((got[1].wr_id, got[1].sgl), (12, &[b][..]));
        let mut chain = [MaybeUninit::<SendWr<'_>>::uninit(); 2];
        let got = t.fill_sends(1, &mut chain);
        assert_eq!((got[0].wr_id, got[0].sgl), (2, &[a, b][..]));
        assert_eq!(
            (got[1].wr_id, got[1].op),
            (3, SendOp::SendWithInvalidate { rkey: 5 })
        );
    }
}
