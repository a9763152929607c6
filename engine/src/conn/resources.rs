//! Per-connection fabric resources: protection domain, completion queue, and the three
//! registered pools a core draws from, all created (and registered) up front, and
//! mapped lazily (resident only where used).
//!
//! A requester in [`RegMode::Persistent`] registers its chunk pools (send, large,
//! application) with remote read and write access, once: that registration is what
//! its chunks advertise, and it ends when these resources drop with the connection.
//! Receive buffers stay local-only in every mode (the peer never needs them).

use std::sync::Arc;

use rpcrdma_pools::{Arena, Pool, PoolConfig};

use super::group_pools::GroupPools;
use super::ConnError;
use crate::core::config::{ConnConfig, RegMode, Role, Sizes, POOL_CACHE};
use crate::core::outbox::LocalKeyMap;
use crate::core::CorePools;
use crate::core::FastRegSlot;
use crate::fabric::{
    Access, Device, MemoryRegion, ProtectionDomain, Provider, QpCaps, QpConfig, QpInit,
    RNR_RETRY_INFINITE,
};

/// What one connection allocates from its device.
pub struct ConnResources<P: Provider> {
    pub(crate) pools: CorePools,
    /// The application's large buffers (requester), registered like the others.
    pub(crate) app: Option<Pool>,
    /// Arena registrations, kept for the connection's life.
    regs: Vec<P::Mr>,
    /// The connection's own completion queue; `None` for a connection of a poll group,
    /// whose queue pair completes into the group's one queue ([`super::group`]).
    pub(crate) cq: Option<P::Cq>,
    pub(crate) pd: P::Pd,
    pub(crate) sizes: Sizes,
    mode: RegMode,
    /// Most octets of private data a connect request carries on this device.
    pub(crate) connect_pd_max: usize,
    /// `DeviceCaps::rdma_round_trip` of this device.
    pub(crate) rdma_round_trip: bool,
    /// Canonical local keys of a poll group's arenas and this connection's own keys
    /// for them (empty for pools of the connection's own).
    keys: LocalKeyMap,
    /// The pools are a poll group's ([`in_group`](Self::in_group)).
    group_pools: bool,
}

impl<P: Provider> ConnResources<P> {
    /// Creates the protection domain, the completion queue (sized for both queues) and
    /// the pools of `cfg` for `role`, and registers the pools. Pools live in shareable
    /// arenas, which every provider accepts.
    pub fn new(dev: &P::Device, cfg: &ConnConfig, role: Role) -> Result<Self, ConnError> {
        Self::build(dev, cfg, role, cfg.sizes(role), true)
    }

    /// As [`new`](Self::new), with queues and pools of `sizes` (a connection playing
    /// both roles: [`ConnConfig::sizes_with_backchannel`]); `role` is the forward one.
    pub fn with_sizes(
        dev: &P::Device,
        cfg: &ConnConfig,
        role: Role,
        sizes: Sizes,
    ) -> Result<Self, ConnError> {
        Self::build(dev, cfg, role, sizes, true)
    }

    /// [`new`](Self::new) without a completion queue: for a connection of a poll group,
    /// whose queue pair is created on the group's queue ([`qp_init_on`](Self::qp_init_on)).
    pub(crate) fn without_cq(
        dev: &P::Device,
        cfg: &ConnConfig,
        role: Role,
        sizes: Sizes,
    ) -> Result<Self, ConnError> {
        Self::build(dev, cfg, role, sizes, false)
    }

    fn build(
        dev: &P::Device,
        cfg: &ConnConfig,
        role: Role,
        sizes: Sizes,
        own_cq: bool,
    ) -> Result<Self, ConnError> {
        cfg.validate().map_err(ConnError::Config)?;
        // Only a requester advertises chunks; a responder's memory stays local.
        let mode = match role {
            Role::Requester => cfg.registration.resolve(dev.caps().fast_reg),
            Role::Responder => RegMode::FastReg,
        };
        // Asked for per-RPC keys on a device that has none: refuse by name rather than
        // fail later allocating fast-registration slots (or fall back silently).
        if role == Role::Requester && mode == RegMode::FastReg && !dev.caps().fast_reg {
            return Err(ConnError::Config(
                crate::core::config::ConfigError::FastRegUnsupported,
            ));
        }
        let pd = dev.alloc_pd().map_err(ConnError::Fabric)?;
        // A requester that reconnects builds its next core and queue pair while the old
        // ones still hold their receive buffers, slot headers and completion-queue
        // room (they go once the new ones are in place): room for both, so a reconnect
        // never fails for want of what the old connection is about to give back.
        let overlap = u32::from(cfg.reconnect.is_some() && role == Role::Requester);
        let cq = if own_cq {
            Some(
                dev.create_cq(sizes.cq_depth * (1 + overlap))
                    .map_err(ConnError::Fabric)?,
            )
        } else {
            None
        };
        // Mapped lazily: a buffer's pages become resident when it is first used, so
        // an idle connection costs the buffers it has touched, not its pools' size
        // (a server's large pool alone is 64 x 256 KiB by default).
        let mk = |name: &'static str, size: u32, count: u32| {
            let pc = PoolConfig::new(name, size as usize, count)
                .cache_size(POOL_CACHE)
                .shareable(true)
                .prefault(false)
                .hugepages(cfg.hugepages);
            Pool::new(&pc).map_err(ConnError::Pool)
        };
        let pools = CorePools {
            recv: mk(
                "rpcrdma-recv",
                cfg.inline_recv,
                sizes.recv_bufs * (1 + overlap),
            )?,
            send: mk(
                "rpcrdma-send",
                cfg.inline_send,
                sizes.send_bufs + overlap * sizes.slots,
            )?,
            large: mk("rpcrdma-large", cfg.large_buf_size, sizes.large_bufs)?,
            headers: None,
        };
        let app = if sizes.app_bufs > 0 {
            Some(mk("rpcrdma-app", cfg.large_buf_size, sizes.app_bufs)?)
        } else {
            None
        };
        let mut res: ConnResources<P> = ConnResources {
            pools,
            app,
            regs: Vec::with_capacity(4),
            cq,
            pd,
            sizes,
            mode,
            connect_pd_max: dev.caps().private_data.connect,
            rdma_round_trip: dev.caps().rdma_round_trip,
            keys: LocalKeyMap::default(),
            group_pools: false,
        };
        let recv = res.pools.recv.arena().clone();
        let mr: P::Mr = res
            .pd
            .reg_arena(&recv, Access::LOCAL_WRITE)
            .map_err(ConnError::Fabric)?;
        res.regs.push(mr);
        let mut arenas = vec![
            res.pools.send.arena().clone(),
            res.pools.large.arena().clone(),
        ];
        if let Some(app) = &res.app {
            arenas.push(app.arena().clone());
        }
        for arena in arenas {
            res.register_arena(&arena)?;
        }
        Ok(res)
    }

    /// A responder connection of a poll group drawing from the group's pools
    /// (`conn/group_pools.rs`): its own protection domain, in which it registers the
    /// group's arenas (local access only: a responder exposes replies through
    /// fast-registration slots of its own domain), and its own unregistered, never
    /// touched pool to park a buffer in each free reply context
    /// (`CorePools::headers`). No completion queue (the group's).
    pub(crate) fn in_group(
        dev: &P::Device,
        cfg: &ConnConfig,
        sizes: Sizes,
        group: &GroupPools<P>,
    ) -> Result<Self, ConnError> {
        cfg.validate().map_err(ConnError::Config)?;
        let pd = dev.alloc_pd().map_err(ConnError::Fabric)?;
        let mut regs = Vec::with_capacity(3);
        let mut keys = LocalKeyMap::default();
        for pool in group.pools() {
            let arena = pool.arena();
            let canonical =
                arena
                    .keys()
                    .ok_or(ConnError::Fabric(crate::fabric::FabricError::Unsupported(
                        "a group pool without a registration",
                    )))?;
            // `reg_mr`, not `reg_arena`: the arena keeps the group's keys.
            let mr: P::Mr = pd
                .reg_mr(arena, 0, arena.len(), Access::LOCAL_WRITE)
                .map_err(ConnError::Fabric)?;
            if !keys.insert(canonical.lkey, mr.lkey()) {
                return Err(ConnError::Fabric(crate::fabric::FabricError::Unsupported(
                    "more group arenas than a key map holds",
                )));
            }
            regs.push(mr);
        }
        let park = PoolConfig::new("rpcrdma-park", cfg.inline_send as usize, sizes.slots)
            .cache_size(1)
            .prefault(false);
        let pools = CorePools {
            recv: group.recv.clone(),
            send: Pool::new(&park).map_err(ConnError::Pool)?,
            large: group.large.clone(),
            headers: Some(group.send.clone()),
        };
        Ok(ConnResources {
            pools,
            app: None,
            regs,
            cq: None,
            pd,
            sizes,
            mode: RegMode::FastReg,
            connect_pd_max: dev.caps().private_data.connect,
            rdma_round_trip: dev.caps().rdma_round_trip,
            keys,
            group_pools: true,
        })
    }

    /// The local keys this connection's requests are rewritten with (a poll group's
    /// pools: [`in_group`](Self::in_group); empty otherwise).
    pub(crate) fn key_map(&self) -> LocalKeyMap {
        self.keys
    }

    /// Whether the pools are a poll group's.
    pub(crate) fn group_pools(&self) -> bool {
        self.group_pools
    }

    /// Registers another arena (e.g. an application pool holding DDP data) with this
    /// connection's protection domain. In [`RegMode::FastReg`] the registration is
    /// local-only and chunks over it get their remote keys per RPC; in
    /// [`RegMode::Persistent`] it grants the peer remote read and write access for the
    /// connection's lifetime, since chunks advertise its key directly.
    pub fn register_arena(&mut self, arena: &Arc<Arena>) -> Result<(), ConnError> {
        let access = match self.mode {
            RegMode::FastReg => Access::LOCAL_WRITE,
            RegMode::Persistent => Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
        };
        let mr = self
            .pd
            .reg_arena(arena, access)
            .map_err(ConnError::Fabric)?;
        self.regs.push(mr);
        Ok(())
    }

    /// How chunk memory is registered on this connection (requester: resolved from
    /// [`ConnConfig::registration`] and the device; responder: always `FastReg`, as it
    /// registers nothing for the peer).
    pub fn registration(&self) -> RegMode {
        self.mode
    }

    /// Allocates `n` fast-registration slots of `max_len` bytes each: the handles (the
    /// driver keeps them until the connection has closed) and their keys (for the core).
    pub fn fast_mrs(
        &self,
        n: u32,
        max_len: usize,
    ) -> Result<(Vec<P::Mr>, Vec<FastRegSlot>), ConnError> {
        let mrs = (0..n)
            .map(|_| self.pd.alloc_fast_mr(max_len).map_err(ConnError::Fabric))
            .collect::<Result<Vec<_>, _>>()?;
        let slots = mrs
            .iter()
            .map(|m| FastRegSlot {
                key: m.rkey(),
                max_len: m.len(),
            })
            .collect();
        Ok((mrs, slots))
    }

    /// The queue pair's set-up: this connection's domain, completion queue and sizes,
    /// with infinite RNR retry (credits make RNR impossible once both sides run;
    /// retrying covers a peer whose receives are posted a moment after it connects).
    /// A connection without a queue of its own (a poll group's: see
    /// [`qp_init_on`](Self::qp_init_on)) has a queue of depth 0: `CqTooSmall`.
    pub fn qp_init(&self) -> Result<QpInit<'_, P>, ConnError> {
        match &self.cq {
            Some(cq) => Ok(self.qp_init_on(cq)),
            None => Err(ConnError::Fabric(crate::fabric::FabricError::CqTooSmall {
                needed: u64::from(self.sizes.cq_depth),
                depth: 0,
            })),
        }
    }

    /// [`qp_init`](Self::qp_init) with both queues completing into `cq` (a poll
    /// group's, shared by its connections).
    pub fn qp_init_on<'a>(&'a self, cq: &'a P::Cq) -> QpInit<'a, P> {
        let mut config = self.qp_config();
        config.rnr_retry = RNR_RETRY_INFINITE;
        QpInit {
            pd: &self.pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            config,
        }
    }

    /// Reaps one batch of completions from the connection's own CQ into `wcs` and
    /// returns them (none for a connection on a shared queue), for a core that takes
    /// the whole batch in one call.
    #[inline]
    pub(crate) fn reap_own_cq<'w>(
        &mut self,
        wcs: &'w mut [crate::fabric::Completion; super::CQ_BATCH],
    ) -> &'w [crate::fabric::Completion] {
        match self.cq.as_mut() {
            Some(cq) => {
                let n = crate::fabric::CompletionQueue::poll(cq, wcs).min(super::CQ_BATCH);
                &wcs[..n]
            }
            None => &[],
        }
    }

    /// The queue-pair configuration this connection's sizes need.
    pub fn qp_config(&self) -> QpConfig {
        QpConfig {
            caps: QpCaps {
                max_send_wr: self.sizes.sq_depth,
                max_recv_wr: self.sizes.rq_depth,
                max_send_sge: self.sizes.max_send_sge,
                // Two: send-based DDP posts a header and a DDP segment (`core/recv_segments.rs`).
                max_recv_sge: 2,
            },
            ..QpConfig::default()
        }
    }

    /// Most octets of private data a connect request carries on this device
    /// (`DeviceCaps::private_data`).
    pub fn connect_private_data_max(&self) -> usize {
        self.connect_pd_max
    }

    /// The pools the core draws from.
    pub fn pools(&self) -> &CorePools {
        &self.pools
    }

    /// The application's large-buffer pool (requester connections only).
    pub fn app_pool(&self) -> Option<&Pool> {
        self.app.as_ref()
    }

    /// The derived sizes.
    pub fn sizes(&self) -> &Sizes {
        &self.sizes
    }

    /// The protection domain.
    pub fn pd(&self) -> &P::Pd {
        &self.pd
    }
}
