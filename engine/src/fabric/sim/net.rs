//! The test's handle on a simulated network: devices, the virtual clock, fault
//! injection and observation.

use core::fmt::Write as _;
use core::time::Duration;
use std::sync::Arc;

use super::config::{FailPoint, SimConfig};
use super::cq::SimCq;
use super::device::SimDevice;
use super::rng::SimRng;
use super::state::ScheduledDrop;
use super::trace::{SimStats, TraceEvent};
use super::world::{dur_ns, World};
use crate::fabric::ConnId;
use crate::fabric::FabricError;

/// A simulated network ("the world"): every device opened from it shares one virtual
/// clock, one seeded random stream and one scheduler.
///
/// Runs are reproducible from the seed when everything is driven from the thread that
/// created the network ([`SimStats::foreign_thread_calls`] stays 0); objects may be
/// used from other threads (the conformance suite does), without that guarantee.
#[derive(Clone)]
pub struct SimNet {
    world: Arc<World>,
}

impl core::fmt::Debug for SimNet {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SimNet")
            .field("seed", &self.world.seed())
            .finish()
    }
}

impl SimNet {
    /// A network configured by `cfg`.
    pub fn new(cfg: SimConfig) -> SimNet {
        SimNet {
            world: World::new(cfg),
        }
    }

    /// A network with default settings and `seed`.
    pub fn seeded(seed: u64) -> SimNet {
        SimNet::new(SimConfig::seeded(seed))
    }

    /// The seed: print it with any failure, it reproduces the run.
    pub fn seed(&self) -> u64 {
        self.world.seed()
    }

    /// Runs `f` on the world (never refused: a `SimNet` is not used inside the world,
    /// except by a failure report during a panic, which then gets `default`).
    fn with<R>(&self, default: R, f: impl FnOnce(&mut super::world::WorldState) -> R) -> R {
        self.world.with(f).unwrap_or(default)
    }

    /// Opens a new device (one per simulated host or endpoint).
    pub fn open_device(&self) -> SimDevice {
        let (id, mut caps) = self.with((0, SimConfig::default().caps), |w| {
            (w.new_device_id(), w.cfg.caps)
        });
        caps.max_sge = caps.max_sge.min(super::config::SIM_MAX_SGE as u32);
        SimDevice {
            world: Arc::clone(&self.world),
            id,
            caps,
        }
    }

    /// Virtual time since creation.
    pub fn now(&self) -> Duration {
        Duration::from_nanos(self.with(0, |w| w.now))
    }

    /// Moves virtual time forward by `d`, executing everything that falls due.
    pub fn advance(&self, d: Duration) {
        self.with((), |w| w.advance(dur_ns(d)));
    }

    /// Executes pending work, jumping virtual time from event to event, until nothing
    /// is pending (true) or `limit` of virtual time has passed (false; e.g. a Send
    /// retrying RNR for ever).
    pub fn run_until_idle(&self, limit: Duration) -> bool {
        self.with(false, |w| w.run_until_idle(dur_ns(limit)))
    }

    /// The counters.
    pub fn stats(&self) -> SimStats {
        let mut s = self.with(SimStats::default(), |w| w.stats);
        s.foreign_thread_calls = self.world.foreign_thread_calls();
        s
    }

    /// The retained trace events, oldest first.
    pub fn trace(&self) -> Vec<TraceEvent> {
        self.with(Vec::new(), |w| w.trace.snapshot())
    }

    /// A hash over every event recorded so far (ring or not): equal hashes mean equal
    /// histories.
    pub fn trace_hash(&self) -> u64 {
        self.with(0, |w| w.trace.hash())
    }

    /// Seed, counters and retained trace, as text.
    pub fn report(&self) -> String {
        let mut out = String::new();
        let stats = self.stats();
        let (hash, total) = self.with((0, 0), |w| (w.trace.hash(), w.trace.events_recorded()));
        let _ = writeln!(
            out,
            "sim: seed={} (reproduce with this seed) trace_hash={hash:#018x} events={total}",
            self.seed()
        );
        let _ = writeln!(out, "sim: {stats:?}");
        let events = self.trace();
        if (events.len() as u64) < total {
            let _ = writeln!(out, "sim: last {} events:", events.len());
        }
        for e in events {
            let _ = writeln!(out, "  {e}");
        }
        out
    }

    /// A guard that prints [`SimNet::report`] to stderr if the thread panics while it
    /// is alive (e.g. a failed assertion), so a failing seed can be replayed.
    pub fn report_on_panic(&self) -> FailureReport {
        FailureReport { net: self.clone() }
    }

    /// A random stream for the test's own workload, derived from the seed and
    /// independent of the network's draws.
    pub fn workload_rng(&self, stream: u64) -> SimRng {
        SimRng::stream(self.seed(), stream.wrapping_add(1 << 32))
    }

    /// Registrations (and fast-registration slots) of every device of this network
    /// that are allocated and not yet released: 0 once every handle is dropped, so a
    /// test can assert that nothing a connection registered outlives it. Test hook
    /// (feature `testing`).
    #[cfg(any(test, feature = "testing"))]
    pub fn registrations_in_use(&self) -> usize {
        self.with(0, |w| w.mrs.in_use())
    }

    /// True when `key` currently grants access (a live registration, or a fast slot
    /// mapped under this very key): what a peer that learnt it could still reach. Test
    /// hook (feature `testing`).
    #[cfg(any(test, feature = "testing"))]
    pub fn key_is_live(&self, key: u32) -> bool {
        self.with(false, |w| w.mrs.is_live(key))
    }

    /// Kills connection `conn` (either side's id) now: both queue pairs fail and flush,
    /// both connection managers report `Disconnected`. False if it was not connected.
    pub fn drop_connection(&self, conn: ConnId) -> bool {
        self.with(false, |w| {
            let killed = w.kill_connection(conn);
            w.run_due(super::world::Scope::All);
            killed
        })
    }

    /// Kills connection `conn` after `after` of virtual time.
    pub fn schedule_drop(&self, conn: ConnId, after: Duration) -> Result<(), FabricError> {
        self.with(Err(FabricError::UnknownConn(conn)), |w| {
            if !w.conn_exists(conn) {
                return Err(FabricError::UnknownConn(conn));
            }
            let at = w.now.saturating_add(dur_ns(after));
            let tiebreak = w.rng.next_u64();
            w.drops.push(ScheduledDrop { at, tiebreak, conn });
            Ok(())
        })
    }

    /// Kills connection `conn` at a random point within `within` of virtual time
    /// (drawn from the fault stream); returns the delay chosen.
    pub fn schedule_random_drop(
        &self,
        conn: ConnId,
        within: Duration,
    ) -> Result<Duration, FabricError> {
        let after = self.with(0, |w| w.fault_rng.range_inclusive(0, dur_ns(within)));
        let after = Duration::from_nanos(after);
        self.schedule_drop(conn, after).map(|()| after)
    }

    /// Arms a targeted failure.
    pub fn fail_op(&self, point: FailPoint) {
        self.with((), |w| w.fail_points.push(point));
    }

    /// Makes `cq` return nothing for `d` of virtual time (a delayed completion queue).
    pub fn stall_cq(&self, cq: &SimCq, d: Duration) -> Result<(), FabricError> {
        if !Arc::ptr_eq(&cq.world, &self.world) {
            return Err(FabricError::WrongDevice);
        }
        let idx = cq.idx;
        self.with(Err(FabricError::WrongDevice), |w| {
            let until = w.now.saturating_add(dur_ns(d));
            let c = w.cqs.get_mut(idx).ok_or(FabricError::WrongDevice)?;
            c.stalled_until = c.stalled_until.max(until);
            Ok(())
        })
    }
}

/// Prints the network's report if dropped during a panic; see
/// [`SimNet::report_on_panic`].
#[derive(Debug)]
pub struct FailureReport {
    net: SimNet,
}

impl Drop for FailureReport {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.net.report());
        }
    }
}
