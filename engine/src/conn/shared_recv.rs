//! A poll group's shared receive queue: one queue of posted receives for all of the
//! group's connections (`ProtectionDomain::create_srq`), with buffers from one pool of
//! the group's, instead of a receive queue and a receive pool per connection.
//!
//! # Credits (RFC 8166 §3.3)
//!
//! A responder may grant only credits it can receive: every Send a requester makes
//! under its grant must find a posted receive. With one queue of depth `D` shared by
//! `N` connections, each connection gets a share `s` of it, and its replies grant at
//! most `s` (never 0: a requester with no credit and nothing outstanding could never
//! call again, §3.3.1). What a connection may consume at once is its share plus the
//! receives its RDMA_DONEs take beyond the credits (`done`, the responder-provided
//! Read chunks' extra receives); the share leaves one connection's worth spare:
//!
//! `s = min(credits, floor(D / (N + 1)) - done)`, at least 1,
//!
//! so that `N * (s + done) <= D - (s + done)`: a connection arriving (its first call
//! needs one receive before any grant) or a grant shrinking (a requester keeps using
//! the larger grant until it reads a reply carrying the smaller one) still finds
//! receives. A connection arriving when that would leave `s < 1` gets no share: it
//! posts receives of its own, as without a shared queue (the group's completion queue
//! has room for them). The share moves as connections come and go; every connection's
//! next reply carries it.
//!
//! The queue is refilled from the pool on every poll of the group, so between two
//! polls at most `D` Sends can arrive, which the grants bound.
//!
//! The share alone covers one arrival at a time: several connections arriving before
//! the older ones read their smaller grants could overrun the queue. So the queue keeps
//! a ledger (`core/srq_ledger.rs`) of what each connection may still take (its largest
//! grant not yet provably superseded, its request-group limit, its DONE receives): a
//! connection joins only while the sum leaves room for it, a reply never grants beyond
//! the room the others leave, and the sum never exceeds `D`.
//!
//! A connection's request-group limit (XCHAR_REQRXLIM), which lets a requester with
//! nothing in flight send a continuation group that long whatever its grant, stays in
//! the ledger for the connection's life; it is the share a connection would have with
//! the group full ([`SharedRecv::floor`]), so the first connections of a group cannot
//! hold room the later ones need.

use rpcrdma_pools::{Pool, PoolCache, PoolConfig};

use std::sync::Arc;

use super::ConnError;
use crate::core::config::{ConnConfig, POOL_CACHE};
use crate::core::{RegBuf, SrqLedger};
use crate::fabric::{
    Access, Completion, Device, FabricError, ProtectionDomain, Provider, RecvWr, Sge,
    SharedReceiveQueue, SrqConfig,
};

/// Tag of a shared receive's `wr_id` (top four bits): a kind the core never uses, so a
/// completion can be told from the connections' own requests.
pub(crate) const SHARED_RECV_TAG: u64 = 0xF << 60;

/// Most receives posted with one call.
const CHAIN: usize = 32;

/// What a connection joining a shared receive queue is told
/// (`Connection::use_shared_receives`).
pub(crate) struct ShareTerms<'a> {
    /// Its share for the connections there will be.
    pub(crate) share: u32,
    /// The queue's ledger.
    pub(crate) ledger: &'a Arc<SrqLedger>,
    /// Its request-group limit.
    pub(crate) floor: u32,
    /// Receives beyond its credits (RDMA_DONEs).
    pub(crate) done: u32,
}

/// The group's shared receive queue and its buffers.
pub(crate) struct SharedRecv<P: Provider> {
    /// Declared first: dropped before the buffers' registration and domain.
    srq: P::Srq,
    bufs: Box<[Option<RegBuf>]>,
    free: Vec<u32>,
    cache: PoolCache,
    pool: Pool,
    _mr: P::Mr,
    _pd: P::Pd,
    depth: u32,
    posted: u32,
    /// Receives beyond the credits each connection may consume (RDMA_DONEs).
    done_extra: u32,
    credits: u32,
    /// What the connections on the queue may take, summed.
    ledger: Arc<SrqLedger>,
    /// The request-group limit its connections are advertised.
    floor: u32,
    /// Refills that found the pool empty.
    pub(crate) starved: u64,
    /// The device lets free registered pages go (`DeviceCaps::release_registered`).
    may_release: bool,
    chain: Vec<(u64, Sge)>,
}

impl<P: Provider> SharedRecv<P> {
    /// The depth a group's queue gets for `conns` connections of `cfg`: a full share
    /// for each (credits plus the RDMA_DONE receives), one spare, within the device's
    /// limit. `None` where the device has no shared receive queues.
    pub(crate) fn depth_for(
        dev: &P::Device,
        cfg: &ConnConfig,
        done_extra: u32,
        conns: u32,
    ) -> Option<u32> {
        let max = dev.caps().max_srq_wr;
        if max == 0 {
            return None;
        }
        // Enough for `conns` connections at one credit each, and for a few at full
        // credit (a group serving a handful of clients keeps their windows).
        let per = 1 + done_extra;
        let want = (conns + 1)
            .saturating_mul(per)
            .max(4 * (cfg.credits + done_extra));
        Some(want.min(max))
    }

    /// Creates the queue (on `cq`, the group's one queue), its pool and registration,
    /// and posts every receive. `Ok(None)` where the device has none.
    pub(crate) fn create(
        dev: &P::Device,
        cq: &P::Cq,
        cfg: &ConnConfig,
        done_extra: u32,
        depth: u32,
        max_conns: u32,
    ) -> Result<Option<Self>, ConnError> {
        let pd = dev.alloc_pd().map_err(ConnError::Fabric)?;
        let srq = match pd.create_srq(
            cq,
            SrqConfig {
                max_wr: depth,
                max_sge: 1,
            },
        ) {
            Ok(q) => q,
            Err(FabricError::Unsupported(_)) => return Ok(None),
            Err(e) => return Err(ConnError::Fabric(e)),
        };
        // Twice the depth: a receive's buffer stays with its call until the reply is
        // sent, while the queue is refilled behind it.
        let pc = PoolConfig::new("rpcrdma-srq", cfg.inline_recv as usize, 2 * depth)
            .cache_size(POOL_CACHE)
            .shareable(true)
            .prefault(false)
            .hugepages(cfg.hugepages);
        let pool = Pool::new(&pc).map_err(ConnError::Pool)?;
        let mr = pd
            .reg_arena(pool.arena(), Access::LOCAL_WRITE)
            .map_err(ConnError::Fabric)?;
        let mut s = SharedRecv {
            srq,
            bufs: (0..depth).map(|_| None).collect(),
            free: (0..depth).rev().collect(),
            cache: pool.cache(),
            pool,
            _mr: mr,
            _pd: pd,
            depth,
            posted: 0,
            done_extra,
            credits: cfg.credits.max(1),
            ledger: SrqLedger::new(depth),
            floor: 1,
            starved: 0,
            may_release: dev.caps().release_registered,
            chain: Vec::with_capacity(CHAIN),
        };
        s.floor = s.share(max_conns).unwrap_or(1);
        s.refill();
        Ok(Some(s))
    }

    /// The terms for a connection joining as the `conns`-th, if its share is not 0 (it
    /// may still not fit the ledger: `Connection::use_shared_receives` says).
    pub(crate) fn terms(&self, conns: u32) -> Option<ShareTerms<'_>> {
        let share = self.share(conns)?;
        Some(ShareTerms {
            share,
            ledger: &self.ledger,
            floor: self.floor.min(share),
            done: self.done_extra,
        })
    }

    /// The request-group limit (XCHAR_REQRXLIM) a connection on the queue is
    /// advertised: the share it would have with the group full, so that limits the
    /// first connections are told (they hold them for life) leave room for the last.
    pub(crate) fn floor(&self) -> u32 {
        self.floor
    }

    /// Receives the connections on the queue may take now, summed (at most the depth).
    pub(crate) fn promised(&self) -> u32 {
        self.ledger.exposed()
    }

    /// The queue, for queue pairs to attach to.
    pub(crate) fn srq(&self) -> &P::Srq {
        &self.srq
    }

    /// The queue's depth.
    pub(crate) fn depth(&self) -> u32 {
        self.depth
    }

    /// Receives posted now.
    pub(crate) fn posted(&self) -> u32 {
        self.posted
    }

    /// Receives the provider still holds posted, as far as it can tell without a poll.
    pub(crate) fn untaken(&self) -> u32 {
        self.srq.posted()
    }

    /// The share of each of `conns` connections (see the module documentation), or
    /// `None` when that many do not fit.
    pub(crate) fn share(&self, conns: u32) -> Option<u32> {
        let per = self.depth / (conns.saturating_add(1));
        let s = per.checked_sub(self.done_extra)?;
        (s >= 1).then_some(s.min(self.credits))
    }

    /// Posts a receive for every free slot the pool has a buffer for. The check is
    /// inline, the loop not: most polls find the queue full.
    #[inline(always)]
    pub(crate) fn refill(&mut self) {
        if self.posted < self.depth {
            self.post_free();
        }
    }

    fn post_free(&mut self) {
        while !self.free.is_empty() {
            self.chain.clear();
            while self.chain.len() < CHAIN {
                let Some(&slot) = self.free.last() else {
                    break;
                };
                let buf = match RegBuf::from_cache(&mut self.cache) {
                    Ok(b) => b,
                    Err(_) => {
                        self.starved += 1;
                        break;
                    }
                };
                let Ok(sge) = buf.sge(0, buf.capacity()) else {
                    self.starved += 1;
                    break;
                };
                self.free.pop();
                self.chain.push((SHARED_RECV_TAG | u64::from(slot), sge));
                self.bufs[slot as usize] = Some(buf);
            }
            if self.chain.is_empty() {
                return;
            }
            let mut wrs = [RecvWr { wr_id: 0, sgl: &[] }; CHAIN];
            for (w, (id, sge)) in wrs.iter_mut().zip(self.chain.iter()) {
                *w = RecvWr {
                    wr_id: *id,
                    sgl: core::slice::from_ref(sge),
                };
            }
            let n = self.chain.len();
            let posted = match self.srq.post_recv(&wrs[..n]) {
                Ok(()) => n,
                Err(e) => e.posted,
            };
            self.posted += posted as u32;
            // What the queue refused goes back (a full queue: posted later).
            for (id, _) in &self.chain[posted..] {
                let slot = (*id & 0xffff_ffff) as u32;
                if let Some(b) = self.bufs[slot as usize].take() {
                    b.release_into(&mut self.cache);
                }
                self.free.push(slot);
            }
            if posted < n {
                return;
            }
        }
    }

    /// Takes the buffer of completed shared receive `wc` (a `wr_id` with
    /// [`SHARED_RECV_TAG`]), `None` if it names no posted one.
    #[inline]
    pub(crate) fn complete(&mut self, wc: &Completion) -> Option<RegBuf> {
        let slot = (wc.wr_id & 0xffff_ffff) as u32;
        let buf = self.bufs.get_mut(slot as usize)?.take()?;
        self.free.push(slot);
        self.posted = self.posted.saturating_sub(1);
        Some(buf)
    }

    /// Gives the pool's free buffers' memory back (an idle group).
    pub(crate) fn release_free(&mut self) -> usize {
        if !self.may_release {
            return 0;
        }
        self.cache.flush();
        self.pool.release_free().unwrap_or(0)
    }
}
