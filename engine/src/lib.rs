//! rpcrdma: a userspace, polled-mode RPC-over-RDMA engine.
//!
//! The engine's own types are at the root (its modules are private, so every name has
//! one path): the embedding API ([`Requester`], [`Responder`], [`ConnConfig`],
//! [`CallRequest`], [`Outcome`], and poller tasks with an application-thread
//! [`Client`]), the ULP's interface ([`Service`], [`CallView`], [`ReplyWriter`]), credit
//! tables, and the sans-IO protocol core ([`Connection`] with its requester and
//! responder halves: completions, CM events and the clock in, [`Transmit`]s out) for
//! drivers of one's own. Five namespaces stay:
//!
//! - [`wire`]: XDR codecs for RPC-over-RDMA v1 (RFC 8166, RFC 5666), RFC 8797 private
//!   data and the RFC 5666 Connection Configuration Protocol.
//! - [`fabric`]: the verbs-shaped fabric interface and its providers (`shm`, `siw`,
//!   `verbs`, and the simulated `sim`).
//! - [`iwarp`]: sans-IO iWARP codecs (MPA, DDP, RDMAP, CRC32c, Terminate) for the `siw`
//!   provider.
//! - [`limits`]: the protocol and table limits, in one place.
//! - [`shm`]: the default provider under short names.
//!
//! An embedding application starts from `Requester::connect(&dev, &addr).credits(32)
//! .open()?`, then `call` or `submit`/`poll`/`poll_outcome`, and
//! `Responder::listen(dev, &addr).serve(factory)?`, then `poll` or `run` on a thread of
//! its own.
#![warn(missing_docs)]
#![warn(unreachable_pub)]

mod conn;
mod core;
mod credits;
pub mod fabric;
pub mod iwarp;
pub mod limits;
mod requester;
mod service;
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
pub mod testing;
pub mod wire;

// The embedding API: connections and their drivers.
pub use conn::task::{Client, ClientError, ConnMsg, PendingCall, RequesterTask, ResponderTask};
pub use conn::{
    ConnError, ConnResources, GroupCounters, GroupOptions, GroupSample, Listener, Pair, PairError,
    PairWait, PollGroup, PollGroupTask, ReconnectStats, Requester, RequesterBuilder, Responder,
    ResponderBuilder, ResponderConn, ResponderCounters, ResponderLimits, Serving, StopHandle,
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_GROUP_POOL_CONNS, DEFAULT_RELEASE_IDLE,
};
// Configuration, events and buffers every connection shares.
pub use core::config::{
    Reconnect, ReplyChunks, DEFAULT_BACKCHANNEL_CREDITS, DEFAULT_CREDIT_RECLAIM,
    DEFAULT_PROBE_PROGRAM, DEFAULT_SIGNAL_EVERY,
};
pub use core::{
    CharsUpdateError, CloseReason, ConfigError, ConnConfig, ConnEvent, ConnState, CountField,
    Outstanding, PeerConfig, ProbeError, RegBuf, RegBufError, RegMode, Registration,
    RequesterStats, ResponderStats, Role, Sizes, Violation,
};
// The sans-IO protocol core, for drivers of one's own.
pub use core::fixed::FixedVec;
#[doc(hidden)]
pub use core::transport::Transport;
pub use core::{
    Backchannel, BidiCore, Connection, CoreError, CorePools, FastRegSlot, NoRequester, NoResponder,
    OutboxFull, OutboxPart, PostFailure, RequesterCore, RequesterHalf, RequesterRole,
    ResponderCore, ResponderHalf, ResponderRole, SrqLedger, Transmit, Transmitter, WrId, WrKind,
};
// Credits.
pub use credits::{CreditSnapshot, CreditTable, GrantPolicy};
// Calls and their outcomes (requester).
pub use requester::{
    BadReply, CallRequest, CallStatus, DdpArg, DdpArgs, Outcome, Reply, Resend, RpcReplyError,
    SubmitError, SubmitRefusal, TransportError, WriteSinks,
};
// The ULP's side of a responder.
pub use service::{
    CallView, DdpItem, DdpRefusal, DdpRefused, Padding, ReplyOverflow, ReplyWriter, Service,
    ServiceError,
};

/// The shared-memory provider, the embedded default, under short names.
pub mod shm {
    pub use crate::fabric::shm::{
        ShmAddr as Addr, ShmConfig as Config, ShmDevice as Device, ShmProvider as Provider,
    };
}
