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
//! writing what was posted (one `sendmsg` per FPDU, gathering from registered memory),
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
//! iWARP has no acknowledgements, yet an RC consumer expects a Send's or Write's
//! completion to carry the remote outcome. With [`SiwConfig::confirm_completions`] (the
//! default) a signaled Send or Write completes once a later RDMA Read Response proves
//! the peer executed it: the device writes a zero-length RDMA Read Request right after
//! the request's last FPDU, in the same poll (its own segment by default, see
//! [`SiwConfig::confirmation_own_segment`]). The Terminate a failing peer sends instead
//! copies the failing segment's header, which names the request that gets the error
//! status. A capture shows one FPDU per TCP segment.
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
mod term;
mod tx;

pub use cm::{SiwCm, SiwConnRequest};
pub use config::{SiwConfig, TcpKeepalive, WireTap};
pub use cq::SiwCq;
pub use device::SiwDevice;
pub use mr::{SiwMr, SiwPd};
pub use qp::SiwQp;

use std::net::SocketAddr;

use crate::fabric::provider::Provider;

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
    type Cm = SiwCm;
    type ConnRequest = SiwConnRequest;
    type Addr = SocketAddr;
}
