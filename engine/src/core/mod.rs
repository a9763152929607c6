//! The RPC-over-RDMA Version 1 protocol core (RFC 8166, with RFC 5666's optional parts):
//! sans-IO state machines for the requester and the responder.
//!
//! A core never calls the fabric. Its inputs are completions ([`Completion`]), CM
//! outcomes (established with the peer's private data, disconnected), submitted calls
//! and the clock; its outputs are work requests staged in its [`Outbox`] (one send
//! chain and one receive chain per poll), outcomes for the requester's application and
//! upcalls to the responder's [`Service`](crate::service::Service). Everything a
//! connection uses — call slots, reply contexts, registration slots, the outbox,
//! receive buffers — is allocated when the core is built; the steady state allocates
//! nothing. See `engine/DESIGN.md` for the state machines and buffer ownership.
//!
//! [`Completion`]: crate::fabric::Completion

pub(crate) mod config;
mod connection;
pub(crate) mod cont_split;
mod demux;
pub(crate) mod event;
pub(crate) mod fixed;
pub(crate) mod mrs;
pub(crate) mod outbox;
mod recv_segments;
pub(crate) mod regbuf;
pub(crate) mod requester;
pub(crate) mod responder;
pub(crate) mod rpcmsg;
mod signal;
pub(crate) mod srq_ledger;
pub(crate) mod transport;
pub(crate) mod wrid;

use rpcrdma_pools::Pool;

pub use config::{ConfigError, ConnConfig, CountField, RegMode, Registration, Role, Sizes};
pub use connection::{
    Backchannel, BidiCore, CharsUpdateError, Connection, NoRequester, NoResponder, PeerConfig,
    RequesterCore, RequesterRole, ResponderCore, ResponderRole,
};
pub use event::ConnEvent;
pub use mrs::FastRegSlot;
pub use outbox::{OutboxFull, OutboxPart, PostFailure, Transmit, Transmitter};
pub use regbuf::{RegBuf, RegBufError};
pub use requester::RequesterHalf;
pub use requester::{ProbeError, RequesterStats};
pub use responder::ResponderHalf;
pub use responder::ResponderStats;
pub use srq_ledger::SrqLedger;
pub use transport::{CloseReason, ConnState, Outstanding, Violation};
pub use wrid::{WrId, WrKind};

/// The registered pools a core draws from. All three must live in arenas registered
/// with the connection's protection domain (except `send` when `headers` is set).
#[derive(Debug, Clone)]
pub struct CorePools {
    /// Receive buffers, each at least the advertised receive size.
    pub recv: Pool,
    /// Inline-sized send buffers: transport headers, inline replies, call messages.
    pub send: Pool,
    /// Large buffers: long calls, Reply chunks, DDP data pulled by the responder.
    pub large: Pool,
    /// Responder only: where a reply context draws its registered header buffer when
    /// a call arrives, and returns it when the reply is done (a poll group's pool on a
    /// device whose registrations pin: DESIGN.md, "Pools per poll group"). `send` then
    /// only parks a buffer in each free context, never registered nor touched, so an
    /// idle connection pins no header buffers. `None`: each context keeps its `send`
    /// buffer, registered, for the connection's life.
    pub headers: Option<Pool>,
}

/// Why a core could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    /// The configuration is unusable.
    #[error("configuration: {0}")]
    Config(#[source] ConfigError),
    /// A pool could not supply the buffers every slot keeps, or is not registered.
    #[error("connection buffers: {0}")]
    Buffers(#[source] RegBufError),
    /// A requester needs fast-registration slots.
    #[error("no fast-registration slots")]
    NoMemoryRegions,
}
