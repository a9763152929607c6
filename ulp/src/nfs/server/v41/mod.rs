//! NFSv4.1 (RFC 8881) over the same [`NfsBackend`](super::NfsBackend) as NFSv3: the
//! COMPOUND procedure of program 100003 version 4, served by
//! [`NfsProgram`](super::NfsProgram) beside version 3.
//!
//! - [`state`]: client records, sessions (slot tables with a reply cache per slot: the
//!   exactly-once semantics of RFC 8881 §2.10.6) and open states, all bounded.
//! - [`deleg`]: read delegations, their recall over the backchannel and revocation.
//! - [`attrs`]: `fattr4` from the backend's attributes, and the settable ones back.
//! - `compound`: the COMPOUND loop and its operations.
//!
//! DDP (RFC 8267 §6): WRITE data is taken from its Read chunk by the codec, and READ
//! data goes into the Write chunk that pairs with it: the encoder hands each READ (in
//! COMPOUND order) the next Write chunk.

pub mod attrs;
mod compound;
pub mod deleg;
pub mod state;

#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use super::backend::FileKey;
use super::counters::NfsCounters;
use crate::nfs::v41::Nfsstat4;
pub(crate) use compound::compound;
pub use compound::Nfs41Conn;
use state::{StateLimits, StateTable};

/// A clock in whole seconds, monotonic: lease expiry reads it.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// The NFSv4.1 state every connection of a server shares.
pub struct Nfs41State {
    table: Mutex<StateTable>,
    clock: Clock,
    /// `so_major_id` and `eir_server_scope`.
    owner: Vec<u8>,
    /// Counts recalls queued ([`Nfs41State::break_delegations`]): a connection carrying
    /// a backchannel looks into the table for its client's recalls only when this moved,
    /// so polling costs one atomic load, not a lock.
    recalls_queued: AtomicU64,
    /// A delegation was ever granted: until then nothing can conflict, and NFSv3 WRITEs
    /// (which also break delegations) take no lock for it.
    granted_any: AtomicBool,
}

impl core::fmt::Debug for Nfs41State {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Nfs41State").finish_non_exhaustive()
    }
}

impl Nfs41State {
    /// State under `limits`, with leases timed by `clock` (`None`: a monotonic clock
    /// started now).
    pub fn new(limits: StateLimits, clock: Option<Clock>) -> Nfs41State {
        let clock = clock.unwrap_or_else(|| {
            let t0 = Instant::now();
            Arc::new(move || t0.elapsed().as_secs())
        });
        // The boot verifier only needs to differ between instances of the server.
        let boot = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs() as u32 ^ d.subsec_nanos())
            | 1;
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        Nfs41State {
            table: Mutex::new(StateTable::new(limits, boot)),
            clock,
            owner: format!("rpcrdma:{}", host.trim()).into_bytes(),
            recalls_queued: AtomicU64::new(0),
            granted_any: AtomicBool::new(false),
        }
    }

    /// The state tables (poisoning is ignored: every update leaves them consistent).
    pub fn lock(&self) -> MutexGuard<'_, StateTable> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `so_major_id` and `eir_server_scope` of this server.
    pub(crate) fn owner(&self) -> &[u8] {
        &self.owner
    }

    /// An operation of `client` (`None`: not an NFSv4.1 client's) is about to change
    /// `file`: delegations other clients hold on it are recalled, and until they are
    /// returned (or revoked) the operation is answered NFS4ERR_DELAY ([`deleg`]).
    /// Revocations are counted in `counters`.
    pub fn break_delegations(
        &self,
        client: Option<u64>,
        file: FileKey,
        counters: &NfsCounters,
    ) -> Result<(), Nfsstat4> {
        if !self.granted_any.load(Ordering::Acquire) {
            return Ok(());
        }
        let now = self.now();
        let c = self.lock().conflict(client, file, now);
        if c.revoked > 0 {
            counters
                .delegations_revoked
                .fetch_add(c.revoked as u64, Ordering::Relaxed);
        }
        if c.queued > 0 {
            self.recalls_queued
                .fetch_add(c.queued as u64, Ordering::Release);
        }
        if c.outstanding > 0 {
            Err(Nfsstat4::DELAY)
        } else {
            Ok(())
        }
    }

    /// Records that a delegation was granted (see [`break_delegations`](Self::break_delegations)).
    pub(crate) fn note_granted(&self) {
        self.granted_any.store(true, Ordering::Release);
    }

    /// How many recalls have been queued so far (see [`break_delegations`](Self::break_delegations)).
    pub fn recalls_queued(&self) -> u64 {
        self.recalls_queued.load(Ordering::Acquire)
    }

    /// Now, in the clock's seconds.
    pub fn now(&self) -> u64 {
        (self.clock)()
    }
}
