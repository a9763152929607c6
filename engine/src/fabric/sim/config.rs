//! How a simulated network behaves: seed, virtual-time scale, latencies, limits, and
//! the randomized faults it injects.

use core::time::Duration;

use crate::fabric::{DeviceCaps, WcOpcode, WcStatus};
use crate::fabric::{PrivateDataLimits, MAX_PRIVATE_DATA};

/// Most scatter-gather entries per work request on `sim` (entries are stored inline in
/// the queues, so this bounds the queue slots' size).
pub const SIM_MAX_SGE: usize = 16;

/// Everything a [`SimNet`](super::SimNet) is created with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimConfig {
    /// Seeds every random draw (delays, tie-breaks between queue pairs, faults).
    pub seed: u64,
    /// Virtual time that passes on each `poll` of a completion queue and each
    /// `poll_event` of a connection manager. This is what lets an engine written as
    /// ordinary poll loops make progress without knowing it runs in a simulation.
    pub tick: Duration,
    /// Shortest delay between posting a request and its execution at the peer.
    pub min_latency: Duration,
    /// Longest such delay. Each request draws its own, except that a queue pair never
    /// lets a later request overtake an earlier one (RC ordering).
    pub max_latency: Duration,
    /// Longest extra delay before the initiator sees a completion (the ACK's flight).
    pub max_ack_latency: Duration,
    /// Events kept in the trace ring for failure reports (0 disables the ring; the
    /// trace hash and the counters are always kept).
    pub trace_capacity: usize,
    /// Device limits reported by, and enforced on, every device of the network.
    pub caps: DeviceCaps,
    /// Randomized faults.
    pub faults: FaultConfig,
}

impl SimConfig {
    /// Defaults with `seed`: 1 µs ticks, 1–20 µs latency, up to 5 µs ACK latency, a
    /// 4096-event trace, no faults.
    pub fn seeded(seed: u64) -> Self {
        SimConfig {
            seed,
            tick: Duration::from_micros(1),
            min_latency: Duration::from_micros(1),
            max_latency: Duration::from_micros(20),
            max_ack_latency: Duration::from_micros(5),
            trace_capacity: 4096,
            caps: DeviceCaps::strict_software(
                4096,
                SIM_MAX_SGE as u32,
                1 << 16,
                1 << 17,
                1 << 30,
                PrivateDataLimits::uniform(MAX_PRIVATE_DATA),
            ),
            faults: FaultConfig::NONE,
        }
    }

    /// The same configuration with `faults`.
    pub fn with_faults(mut self, faults: FaultConfig) -> Self {
        self.faults = faults;
        self
    }

    /// The same configuration with latencies drawn from `min..=max`.
    pub fn with_latency(mut self, min: Duration, max: Duration) -> Self {
        self.min_latency = min;
        self.max_latency = max.max(min);
        self
    }

    /// The same configuration with a trace ring of `events` entries.
    pub fn with_trace_capacity(mut self, events: usize) -> Self {
        self.trace_capacity = events;
        self
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig::seeded(0)
    }
}

/// Randomized faults, drawn from their own seeded stream so that turning one on does
/// not change the delays of an otherwise identical run.
///
/// Faults are connection-level, as on a real RC fabric: data is never silently
/// corrupted, reordered within a queue pair, or lost without an error completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultConfig {
    /// Chance (per mille) that executing a data request (Send, Write, Read) first kills
    /// its connection: both queue pairs go to the error state, everything outstanding
    /// is flushed, and both connection managers report `Disconnected`.
    pub drop_per_mille: u16,
    /// Chance (per mille) that a Send finds the receiver "not ready" although a receive
    /// is posted (a slow responder). It is retried after the receiver's RNR timer and
    /// counts against the sender's RNR retry budget.
    pub rnr_per_mille: u16,
    /// Longest extra delay before a posted receive can be used (slow receiver; each
    /// receive draws its own delay in `0..=max`). A Send arriving earlier gets RNR.
    pub max_recv_delay: Duration,
    /// Chance (per mille), per completion, that its completion queue stalls: nothing
    /// new is returned by `poll` for up to [`FaultConfig::max_cq_stall`].
    pub cq_stall_per_mille: u16,
    /// Longest completion-queue stall.
    pub max_cq_stall: Duration,
}

impl FaultConfig {
    /// No faults.
    pub const NONE: FaultConfig = FaultConfig {
        drop_per_mille: 0,
        rnr_per_mille: 0,
        max_recv_delay: Duration::ZERO,
        cq_stall_per_mille: 0,
        max_cq_stall: Duration::ZERO,
    };
}

impl Default for FaultConfig {
    fn default() -> Self {
        FaultConfig::NONE
    }
}

/// A targeted fault: the `nth` (1-based, counted over the whole network) request of
/// kind `opcode` that executes fails with `status`.
///
/// For send-queue opcodes the initiator's completion carries `status`. For
/// [`WcOpcode::Recv`] the `nth` Send to arrive at a posted receive fails at the receiver
/// with `status`, and the sender gets the matching remote status. Either way both queue
/// pairs of the connection go to the error state, as after any failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailPoint {
    /// Which kind of request.
    pub opcode: WcOpcode,
    /// Which occurrence, from 1.
    pub nth: u64,
    /// The status it completes with (`Success` makes the fail point inert).
    pub status: WcStatus,
}
