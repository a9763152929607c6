//! The provider traits. Everything is monomorphized: the engine and the conformance
//! suite are generic over a [`Provider`], so the data path has no dynamic dispatch.

use std::fmt::Debug;
use std::sync::Arc;

use rpcrdma_pools::{Arena, RegKeys};

use super::cm::{CmEvent, ConnId};
use super::error::{FabricError, PostError};
use super::mr::Access;
use super::types::{Completion, DeviceCaps, QpCaps, QpConfig, QpState, RecvWr, SendWr, SrqConfig};

/// A fabric provider: the family of object types one transport implements.
pub trait Provider: Sized + 'static {
    /// Short name for logs ("shm", "siw", "verbs").
    const NAME: &'static str;
    /// Whether a peer's Send is placed into a posted receive only by a poll of the
    /// receiving queue pair's own completion queue (shm: the receiver's poll executes
    /// the peer's requests), never behind the poster's back. A driver that polls and
    /// posts from one thread may then post a chain of Sends before the receives staged
    /// with them (a reply's Send first, its receive restock after: the doorbell earlier
    /// on a round trip's critical path) without a peer's Send ever finding the receive
    /// missing. False (the default) where the device places messages on its own
    /// (verbs hardware).
    const RECVS_PLACED_BY_OWN_POLL: bool = false;
    /// An opened device (verbs context).
    type Device: Device<P = Self> + Send + Sync;
    /// A protection domain.
    type Pd: ProtectionDomain<P = Self> + Send + Sync;
    /// A memory registration or fast-registration slot.
    type Mr: MemoryRegion + Send;
    /// A completion queue.
    type Cq: CompletionQueue + Send;
    /// A reliable-connected queue pair.
    type Qp: QueuePair + Send;
    /// A shared receive queue: one pool of posted receives that several queue pairs
    /// take from ([`ProtectionDomain::create_srq`]).
    type Srq: SharedReceiveQueue + Send;
    /// A connection manager (RDMA-CM event channel plus its ids).
    type Cm: ConnectionManager<P = Self> + Send;
    /// A connect request waiting for `accept` or `reject`.
    type ConnRequest: Debug + Send;
    /// Where listeners listen and connects go.
    type Addr: Clone + Debug + Send;
}

/// An opened device: the factory for everything else.
pub trait Device {
    /// The provider.
    type P: Provider;

    /// The device's limits.
    fn caps(&self) -> DeviceCaps;

    /// Allocates a protection domain.
    fn alloc_pd(&self) -> Result<<Self::P as Provider>::Pd, FabricError>;

    /// Creates a completion queue that can hold `depth` completions. Queue pairs whose
    /// queues could together produce more than `depth` outstanding completions are
    /// refused, because on hardware that overrun kills the connection.
    fn create_cq(&self, depth: u32) -> Result<<Self::P as Provider>::Cq, FabricError>;

    /// Creates a connection manager (event channel).
    fn create_cm(&self) -> Result<<Self::P as Provider>::Cm, FabricError>;

    /// The clock a driver of this device reads: the system's, unless the provider
    /// keeps its own time (the `sim` provider's virtual clock).
    fn clock(&self) -> crate::fabric::Clock {
        crate::fabric::Clock::system()
    }
}

/// A protection domain: registrations and queue pairs of one domain only work together.
pub trait ProtectionDomain {
    /// The provider.
    type P: Provider;

    /// Registers `len` bytes at `offset` in `arena` with `access`. The registration keeps
    /// the arena alive. Providers may restrict which arenas they accept (shm: only
    /// shareable ones; verbs: any).
    fn reg_mr(
        &self,
        arena: &Arc<Arena>,
        offset: usize,
        len: usize,
        access: Access,
    ) -> Result<<Self::P as Provider>::Mr, FabricError>;

    /// Registers the whole arena and stores the keys on it, so buffers carved from it
    /// can become scatter-gather entries without a lookup.
    fn reg_arena(
        &self,
        arena: &Arc<Arena>,
        access: Access,
    ) -> Result<<Self::P as Provider>::Mr, FabricError> {
        let mr = self.reg_mr(arena, 0, arena.len(), access)?;
        arena.set_keys(RegKeys {
            lkey: mr.lkey(),
            rkey: mr.rkey(),
        });
        Ok(mr)
    }

    /// Allocates a fast-registration slot able to cover up to `max_len` bytes (verbs
    /// `ib_alloc_mr`). It starts invalid; a [`SendOp::FastReg`](super::SendOp::FastReg)
    /// work request maps it.
    fn alloc_fast_mr(&self, max_len: usize) -> Result<<Self::P as Provider>::Mr, FabricError>;

    /// Creates a shared receive queue (verbs `ibv_create_srq`) holding up to
    /// `cfg.max_wr` posted receives, whose buffers are checked against this domain's
    /// registrations (not the attached queue pairs' domains). Queue pairs attach to it
    /// at creation ([`QpInit::srq`]) and must use `recv_cq` as their receive completion
    /// queue: its poll is where the software providers take the shared receives, so one
    /// queue has one consumer, and `recv_cq` must have room for `cfg.max_wr` receive
    /// completions beside everything else attached to it.
    ///
    /// The contract, on every provider (the conformance suite checks it):
    /// - a Send arriving on any attached queue pair takes the oldest posted receive
    ///   (post order across the whole queue), and its completion goes to `recv_cq`
    ///   naming that queue pair ([`Completion::qp_num`]);
    /// - an attached queue pair that fails or is destroyed flushes only the receives it
    ///   had taken (a Send being received); the queue's other receives stay posted for
    ///   the other queue pairs; destroying the queue itself reports nothing for the
    ///   receives still posted (as verbs: the consumer gets its buffers back by
    ///   dropping its own records of them);
    /// - a Send that finds the queue empty is handled as one finding an empty receive
    ///   queue on that provider: receiver-not-ready retries within the sender's
    ///   `rnr_retry` then `RnrRetryExceeded` on both sides (shm, sim, InfiniBand and
    ///   RoCE), or at once a fatal iWARP Terminate, DDP "no buffer available" (siw,
    ///   RFC 5041 §7.2; [`DeviceCaps::rnr_retry`] false). Only that one connection
    ///   fails: the queue and its other queue pairs go on.
    ///
    /// Devices without shared receive queues (a verbs device reporting `max_srq` 0)
    /// answer [`FabricError::Unsupported`]; a consumer then posts receives per queue
    /// pair as before.
    fn create_srq(
        &self,
        recv_cq: &<Self::P as Provider>::Cq,
        cfg: SrqConfig,
    ) -> Result<<Self::P as Provider>::Srq, FabricError>;
}

/// A shared receive queue (see [`ProtectionDomain::create_srq`]). Dropping it destroys
/// the queue; queue pairs still attached keep working until a Send finds no receive.
pub trait SharedReceiveQueue {
    /// Posts a chain of receives, taken by the attached queue pairs' Sends in this
    /// order. Refused past the queue's depth (receives posted and not yet taken).
    fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError>;
    /// The depth the queue was created with: how many receives it holds at most.
    fn depth(&self) -> u32;
    /// Receives posted and not yet taken by a Send, as far as the provider can tell
    /// without polling (software providers exactly; verbs reports what was posted minus
    /// the receive completions reaped from its completion queue so far).
    fn posted(&self) -> u32;
}

/// A registration handle. Dropping it deregisters.
pub trait MemoryRegion {
    /// The local key (for scatter-gather entries).
    fn lkey(&self) -> u32;
    /// The remote key (for peers).
    fn rkey(&self) -> u32;
    /// First byte covered (0 for a fast-registration slot).
    fn addr(&self) -> u64;
    /// Bytes covered (the maximum for a fast-registration slot).
    fn len(&self) -> usize;
    /// True when [`MemoryRegion::len`] is zero.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Fast-registration slots: moves the handle to the slot's next key (same index,
    /// next generation byte, as `ib_update_fast_reg_key`) and returns it; the next
    /// FastReg work request must carry it. Other registrations keep their key.
    fn rekey(&mut self) -> u32;
    /// Like [`rekey`](Self::rekey), but to generation byte `tag` (the one after when
    /// `tag` is the current one: the key always changes), so the successor of a key
    /// the peer saw is not guessable; the same step as [`mr::retag_key`](super::mr::retag_key),
    /// which the engine's requester core applies to the keys it holds
    /// ([`FastRegSlot`](crate::core::FastRegSlot)) while the driver keeps the handle. The
    /// default ignores `tag` and steps the generation.
    fn rekey_with(&mut self, tag: u8) -> u32 {
        let _ = tag;
        self.rekey()
    }
}

/// A completion queue, polled by its owner.
pub trait CompletionQueue {
    /// Moves up to `out.len()` completions into `out` and returns how many. Never
    /// blocks. Providers without hardware (shm, siw) make progress only in here.
    fn poll(&mut self, out: &mut [Completion]) -> usize;
    /// The depth the queue was created with.
    fn depth(&self) -> u32;
}

/// A reliable-connected queue pair.
pub trait QueuePair {
    /// Posts a chain of send-queue requests with one doorbell.
    fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<(), PostError>;
    /// Posts a chain of receives.
    fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError>;
    /// The queue-pair number reported in completions.
    fn qp_num(&self) -> u32;
    /// The connection the queue pair was created for.
    fn conn_id(&self) -> ConnId;
    /// The current state.
    fn state(&self) -> QpState;
    /// The queue sizes.
    fn caps(&self) -> QpCaps;
    /// Who the peer is (known from connect or accept on): what a responder's upper
    /// layer keys per-client state on. Providers that cannot tell report `Unknown`.
    fn peer_addr(&self) -> super::PeerAddr {
        super::PeerAddr::Unknown
    }
    /// The connection is idle: the provider may give back memory it keeps for it and
    /// refills on demand (siw: the pages of its socket receive buffer and of the
    /// receives posted and not yet used). A cold path
    /// (system calls); the default does nothing.
    fn release_idle_memory(&mut self) {}
    /// Why the peer aborted the connection, once its abort (an iWARP peer's Terminate)
    /// put the queue pair in error; providers that cannot see one report `None`. Read
    /// it when a completion fails: the abort is recorded before anything it flushes.
    fn peer_abort(&self) -> Option<crate::fabric::PeerAbort> {
        None
    }
}

/// What a queue pair is created with: the objects it uses and its configuration.
pub struct QpInit<'a, P: Provider> {
    /// Protection domain of the queue pair.
    pub pd: &'a P::Pd,
    /// Completion queue for send-queue completions.
    pub send_cq: &'a P::Cq,
    /// Completion queue for receive completions (may be the same as `send_cq`).
    pub recv_cq: &'a P::Cq,
    /// The shared receive queue this queue pair takes its receives from, if any: then
    /// [`QueuePair::post_recv`] is refused, and `config.caps.max_recv_wr` bounds how
    /// many of the shared receives it may hold taken but not yet reported (at least 1).
    pub srq: Option<&'a P::Srq>,
    /// Sizes and retry behaviour.
    pub config: QpConfig,
}

/// A connection manager: listens, connects, accepts, and reports events when polled.
///
/// As in RDMA-CM, the queue pair is created together with the connection (on `connect`
/// for the active side, on `accept` for the passive side), so receives can be posted
/// before the connection is established.
pub trait ConnectionManager {
    /// The provider.
    type P: Provider;

    /// Starts listening on `addr`; connect requests arrive as
    /// [`CmEvent::ConnectRequest`].
    fn listen(&mut self, addr: &<Self::P as Provider>::Addr) -> Result<(), FabricError>;

    /// Starts connecting to `addr` with a new queue pair (state `Init`), offering
    /// `private_data`. The outcome arrives as `Established`, `Rejected` or `Unreachable`.
    fn connect(
        &mut self,
        addr: &<Self::P as Provider>::Addr,
        init: QpInit<'_, Self::P>,
        private_data: &[u8],
    ) -> Result<<Self::P as Provider>::Qp, FabricError>;

    /// Accepts a connect request with a new queue pair (state `ReadyToReceive`; it may
    /// send once `Established` is reported).
    fn accept(
        &mut self,
        request: <Self::P as Provider>::ConnRequest,
        init: QpInit<'_, Self::P>,
        private_data: &[u8],
    ) -> Result<<Self::P as Provider>::Qp, FabricError>;

    /// [`accept`](Self::accept), running `before_reply` on the new queue pair before the
    /// peer learns of the acceptance. Receives posted there are in place for the peer's
    /// first Send: an iWARP peer may send right after the MPA Reply, and iWARP has no
    /// receiver-not-ready retry, so a Send that beats the receives is a fatal Terminate.
    /// The default suits providers whose accept reports nothing to the peer before the
    /// next poll.
    fn accept_prepared(
        &mut self,
        request: <Self::P as Provider>::ConnRequest,
        init: QpInit<'_, Self::P>,
        private_data: &[u8],
        before_reply: &mut dyn FnMut(&mut <Self::P as Provider>::Qp),
    ) -> Result<<Self::P as Provider>::Qp, FabricError> {
        let mut qp = self.accept(request, init, private_data)?;
        before_reply(&mut qp);
        Ok(qp)
    }

    /// Rejects a connect request, telling the peer `private_data`.
    fn reject(
        &mut self,
        request: <Self::P as Provider>::ConnRequest,
        private_data: &[u8],
    ) -> Result<(), FabricError>;

    /// Disconnects: the queue pair flushes, and both sides get
    /// [`CmEvent::Disconnected`].
    fn disconnect(&mut self, conn: ConnId) -> Result<(), FabricError>;

    /// Returns the next event, if any. Never blocks.
    fn poll_event(
        &mut self,
    ) -> Result<Option<CmEvent<<Self::P as Provider>::ConnRequest>>, FabricError>;
}
