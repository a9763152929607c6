//! `shm`: the shared-memory provider. Two endpoints on one host (two threads, or two
//! processes) exchange work through lock-free rings in shared memory, with verbs'
//! reliable-connected semantics.
//!
//! # Design: the NIC lives at the target
//!
//! Every Send, RDMA Write and RDMA Read request goes, in posting order, through a
//! single-producer/single-consumer ring in the initiator's connection segment and is
//! executed by the *target's* completion-queue poll: it checks keys against its own
//! key table, copies out of the initiator's memory (mapped at the target) for Sends and
//! Writes (out of the request itself for small Sends, whose payload the initiator
//! copied in at post time), copies into the initiator's sink for Reads, and
//! acknowledges what it has finished by advancing the ring's tail, naming the one
//! request that failed, if any, in a NAK record (RNR exceeded, remote access error,
//! invalid request, operational error). The initiator reports send completions when it
//! polls those acks, like an RC requester. This gives posting-order placement, RNR
//! handling and both-sides-to-error without further machinery.
//!
//! Consequently a shm endpoint makes progress only while it polls: the target must poll
//! its receive CQ for its peer's Writes and Reads to execute (as with software iWARP).
//!
//! # Memory
//!
//! Registered memory must live in shareable arenas ([`rpcrdma_pools::Arena`] created
//! with `shareable(true)`; hugepage memfds when the host has them), because the peer
//! maps it: registering anything else fails with [`FabricError::NotShareable`]. The
//! arenas' descriptors travel over a per-connection announcement socket; an arena
//! registered after connecting is announced too, and the peer reads its socket only when
//! a request names an arena it has not mapped yet, after checking a counter in shared
//! memory.
//!
//! Each protection domain keeps its own list of arenas (the engine gives every
//! connection its own domain), and a connection's peer is told of exactly the arenas
//! registered in its queue pair's domain, never another connection's. The list, and
//! the provider's last reference to each arena, goes when the domain, its
//! registrations and its queue pairs are gone; the peer unmaps our arenas when its
//! queue pair goes. So a server's tables are bounded by its live connections
//! ([`ShmDevice::live_arenas`], [`ShmDevice::live_registrations`] count them).
//!
//! # Trust model
//!
//! A shm peer is a local process. What it can reach and what is checked:
//!
//! - **Who may connect**: the listener reads each accepted socket's `SO_PEERCRED` and
//!   admits the listener's own user only, unless [`ShmConfig::peer_check`] says
//!   otherwise ([`PeerCheck`]). At most [`ShmConfig::max_pending`] accepted sockets may
//!   wait for their connect request, each for at most
//!   [`ShmConfig::handshake_timeout`], which also bounds an unfinished handshake.
//! - **What it can reach**: the arenas registered in its own connection's protection
//!   domain. It maps them read-write, so it can read and write *all* of their memory
//!   directly, whatever the keys say: keys and protection domains are checked by the
//!   target for the requests it executes (as on an RDMA NIC), but they are no barrier
//!   against a peer that reads or writes the mapping itself. Register in a connection's
//!   domain only memory that connection's peer may see and change.
//! - **What it passes us**: connection segments and arenas are memfds sealed against
//!   shrinking and growing (`F_SEAL_SHRINK | F_SEAL_GROW`). Before mapping anything a
//!   peer passes, we check it is a regular file, sealed against shrinking, at least as
//!   long as announced, and that the length is bounded (a segment by the largest ring
//!   layout; arenas by [`ShmConfig::max_peer_arena_len`], [`ShmConfig::max_peer_bytes`]
//!   and [`ShmConfig::max_arenas`], in announcement order). Every index, length and
//!   key a request carries is checked against those mappings and our key table before
//!   a byte is copied. Peer arenas are mapped without pre-faulting.
//! - **What a hostile peer of an admitted user can still do**: corrupt the memory of
//!   its own connection's arenas, break its own connection (a refused announcement or
//!   request NAKs it; garbage on the CM socket ends it), and hold one connection's
//!   resources until it closes or times out in the handshake. It cannot make the
//!   other side fault (no truncation under a mapping), map another connection's
//!   arenas, or grow the other side's tables beyond its own connection's limits.
//!   Same-user processes can of course also attach to each other with `ptrace` or
//!   `/proc/PID/mem`; the uid check is the boundary that matters.
//!
//! # Cost
//!
//! Posting and polling make no system call, take no lock and allocate nothing. A
//! request is one release store of its slot's sequence word, which is also what the
//! target polls, and a Send of up to 160 bytes carries its payload in the slot, so a
//! 32-byte Send crosses between cores as one cache line. The target acknowledges
//! everything a poll executed with one store, and the initiator reads those acks only
//! while it owes a signaled completion. The connection manager (a Unix seqpacket socket
//! per connection, passing descriptors with `SCM_RIGHTS`) is used at setup and teardown
//! only.
//!
//! [`FabricError::NotShareable`]: crate::fabric::FabricError::NotShareable
//! [`ShmConfig::peer_check`]: ShmConfig::peer_check
//! [`ShmConfig::max_pending`]: ShmConfig::max_pending
//! [`ShmConfig::handshake_timeout`]: ShmConfig::handshake_timeout
//! [`ShmConfig::max_peer_arena_len`]: ShmConfig::max_peer_arena_len
//! [`ShmConfig::max_peer_bytes`]: ShmConfig::max_peer_bytes
//! [`ShmConfig::max_arenas`]: ShmConfig::max_arenas

mod arenas;
mod cm;
mod completer;
mod cq;
mod cred;
mod device;
mod exec;
mod msg;
mod pd;
mod qp;
mod ring;
mod segment;
mod sock;
mod srq;
mod table;

/// Test helpers shared by the shm modules' unit tests.
#[cfg(test)]
mod testutil {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    /// A memfd of `len` bytes, sealed against resizing when `seal`.
    pub(crate) fn memfd(len: i64, seal: bool) -> OwnedFd {
        let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        // SAFETY: a valid NUL-terminated name.
        let fd = unsafe { libc::memfd_create(c"shm-test".as_ptr(), flags) };
        assert!(fd >= 0);
        // SAFETY: fresh and ours.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: a memfd we own.
        assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), len) }, 0);
        if seal {
            let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW;
            // SAFETY: as above.
            assert_eq!(
                unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) },
                0
            );
        }
        fd
    }
}

pub use cm::{ShmCm, ShmConnRequest};
pub use cq::ShmCq;
pub use cred::PeerCheck;
pub use device::{ShmConfig, ShmDevice};
pub use pd::{ShmMr, ShmPd};
pub use qp::ShmQp;
pub use sock::ShmAddr;
pub use srq::ShmSrq;

use crate::fabric::Provider;

/// Entry points for the fuzz targets (`engine/fuzz`): the decoders of what a local
/// peer sends over the connection manager's sockets. Not a stable interface.
#[doc(hidden)]
pub mod fuzzing {
    use super::arenas::Announcement;
    use super::msg::{Msg, MSG_MAX};

    /// Decodes `b` as a connection-manager message; what decodes must re-encode to a
    /// message that decodes the same. Returns whether `b` decoded.
    pub fn cm_message(b: &[u8]) -> bool {
        let Ok(m) = Msg::decode(b) else {
            return false;
        };
        let mut buf = [0u8; MSG_MAX];
        let n = m.encode(&mut buf);
        assert_eq!(
            Msg::decode(&buf[..n]).ok(),
            Some(m),
            "re-encoding changed {m:?}"
        );
        true
    }

    /// Decodes `b` as an arena announcement; what decodes must round-trip exactly.
    /// Returns whether `b` decoded.
    pub fn announcement(b: &[u8]) -> bool {
        let Ok(a) = Announcement::decode(b) else {
            return false;
        };
        assert_eq!(&a.encode()[..], b, "announcement did not round-trip");
        true
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn the_fuzz_entry_points_take_any_bytes() {
            let mut buf = [0u8; MSG_MAX];
            let n = Msg::Rtu.encode(&mut buf);
            assert!(cm_message(&buf[..n]));
            assert!(!cm_message(b"RSCM"));
            assert!(!announcement(&[0; 15]));
            assert!(announcement(
                &[1; 4].iter().chain(&[0; 12]).copied().collect::<Vec<_>>()
            ));
            // A cheap deterministic sweep of short inputs, like a fuzzer's first minutes.
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
            for len in 0..300 {
                let bytes = crate::fabric::junk(&mut x, len);
                let mut framed = b"RSCM\x01\x00".to_vec();
                framed.extend_from_slice(&bytes);
                cm_message(&bytes);
                cm_message(&framed);
                announcement(&bytes);
            }
        }
    }
}

/// Most scatter-gather entries per work request on shm.
pub const SHM_MAX_SGE: u32 = segment::MAX_SGE as u32;

/// The shm provider's type family.
#[derive(Debug, Clone, Copy, Default)]
pub struct ShmProvider;

impl Provider for ShmProvider {
    const NAME: &'static str = "shm";
    // The receiver's CQ poll executes the peer's requests (`QpShared::recv_step`).
    const RECVS_PLACED_BY_OWN_POLL: bool = true;
    type Device = ShmDevice;
    type Pd = ShmPd;
    type Mr = ShmMr;
    type Cq = ShmCq;
    type Qp = ShmQp;
    type Srq = ShmSrq;
    type Cm = ShmCm;
    type ConnRequest = ShmConnRequest;
    type Addr = ShmAddr;
}
