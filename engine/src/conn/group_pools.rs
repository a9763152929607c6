//! A poll group's pools, for a device whose registrations pin their pages
//! (`DeviceCaps::release_registered` false: kernel verbs). DESIGN.md, "Pools per poll
//! group".
//!
//! Registering a connection's own pools pins every page of them at once (a server's
//! large pool alone is 64 x 256 KiB), and pinned pages cannot be given back while the
//! connection idles. So on such a device the connections of a group draw receive,
//! reply-header and large buffers from the group's pools, one set per core, on demand,
//! and return them: the group's pages are pinned once, whatever the connections.
//!
//! The protection domain stays per connection (a peer's keys reach only its own
//! connection's registrations): each connection registers the group's arenas in its
//! own domain, which pins nothing more, and its outbox turns the arenas' canonical
//! local keys (the group's own registration, below) into its own
//! (`core/outbox.rs`, `LocalKeyMap`).

use rpcrdma_pools::{Pool, PoolConfig};

use super::ConnError;
use crate::core::config::{ConnConfig, Sizes};
use crate::fabric::{Access, Device, ProtectionDomain, Provider};

/// Buffers each group pool keeps in a connection's cache at most: a connection holds
/// few between idle spells, and what it holds the others cannot use.
const GROUP_POOL_CACHE: usize = 4;

/// The send-queue depth of a connection drawing from a group's pools, when the
/// configuration leaves it to be derived (`ConnConfig::sq_depth` 0):
///
/// `max(2 * credits + 2, (1 + min(max_chunks, 8)) * 16 + 3)`
///
/// The first term is what the credits need: a reply's Send stays in the queue until its
/// completion, and a context (two per credit) lives that long, so up to two Sends per
/// credit, and a barrier and a spare. The second is the largest single call the
/// responder accepts without waiting for others: up to 16 segments in each of its
/// chunks (the Read chunks' Reads; or the Write chunks' and the Reply chunk's Writes,
/// `MAX_CHUNK_SEGMENTS`), its Send, and the two of an exposed reply. A call needing
/// more than the queue holds is refused with ERR_CHUNK, as before; one needing more than
/// is free waits for room. The default otherwise (`8 * credits`, at least 256) reserves
/// a queue for chunk-heavy traffic on every connection; in a group the connections are
/// mostly idle, and on rxe a queue pair's rings are mapped and touched whole (rxe rounds
/// `depth + 1` up to a power of two: 256 gave 512 slots, 83 gives 128).
pub(crate) fn group_sq_depth(cfg: &ConnConfig) -> u32 {
    let per_call = (1 + cfg.max_chunks.min(crate::limits::MAX_DDP_ITEMS as u32))
        * crate::core::responder::MAX_CHUNK_SEGMENTS as u32
        + 3;
    (2 * cfg.credits + 2).max(per_call)
}

/// The pools of one poll group and their canonical registration.
pub(crate) struct GroupPools<P: Provider> {
    pub(crate) recv: Pool,
    pub(crate) send: Pool,
    pub(crate) large: Pool,
    /// The registration whose keys the arenas carry (`Arena::keys`). Declared before
    /// the domain, so they go first.
    _mrs: Vec<P::Mr>,
    _pd: P::Pd,
}

impl<P: Provider> GroupPools<P> {
    /// Pools for connections of `sizes` (one connection's responder sizes): header
    /// buffers for `busy` connections' replies at once, the receives `posting`
    /// connections keep posted of their own (those not on a shared receive queue)
    /// and one connection's spare, and one connection's large buffers (a chunked call
    /// holds its large buffers only while it runs).
    pub(crate) fn create(
        dev: &P::Device,
        cfg: &ConnConfig,
        sizes: &Sizes,
        busy: u32,
        posting: u32,
    ) -> Result<Self, ConnError> {
        let busy = busy.max(1);
        let mk = |name: &'static str, size: u32, count: u32| {
            let pc = PoolConfig::new(name, size as usize, count)
                .cache_size(GROUP_POOL_CACHE)
                .shareable(true)
                .prefault(false)
                .hugepages(cfg.hugepages);
            Pool::new(&pc).map_err(ConnError::Pool)
        };
        let recv = mk(
            "rpcrdma-group-recv",
            cfg.inline_recv,
            sizes
                .rq_depth
                .saturating_mul(posting)
                .saturating_add(sizes.recv_bufs),
        )?;
        let send = mk(
            "rpcrdma-group-send",
            cfg.inline_send,
            sizes.send_bufs.saturating_mul(busy),
        )?;
        let large = mk("rpcrdma-group-large", cfg.large_buf_size, sizes.large_bufs)?;
        let pd = dev.alloc_pd().map_err(ConnError::Fabric)?;
        let mut mrs = Vec::with_capacity(3);
        for pool in [&recv, &send, &large] {
            mrs.push(
                pd.reg_arena(pool.arena(), Access::LOCAL_WRITE)
                    .map_err(ConnError::Fabric)?,
            );
        }
        Ok(GroupPools {
            recv,
            send,
            large,
            _mrs: mrs,
            _pd: pd,
        })
    }

    /// The three pools, as the arenas a connection registers in its domain.
    pub(crate) fn pools(&self) -> [&Pool; 3] {
        [&self.recv, &self.send, &self.large]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::Role;

    #[test]
    fn send_queue_by_what_the_credits_need() {
        let cfg = ConnConfig::default();
        assert_eq!(cfg.credits, 32);
        assert_eq!(cfg.max_chunks, 4);
        // The largest call (5 chunks of 16 segments, its Send, an exposed reply's two)
        // outweighs two Sends per credit with the defaults.
        assert_eq!(group_sq_depth(&cfg), 83);
        assert!(group_sq_depth(&cfg) < cfg.sizes(Role::Responder).sq_depth);
        let many = ConnConfig {
            credits: 128,
            ..ConnConfig::default()
        };
        assert_eq!(group_sq_depth(&many), 258, "two Sends per credit, and two");
        // Every call the responder accepts fits the queue (`inspect` refuses more).
        let chunks = ConnConfig {
            max_chunks: 8,
            credits: 4,
            ..ConnConfig::default()
        };
        assert_eq!(group_sq_depth(&chunks), 9 * 16 + 3);
    }
}
