//! Paired bandwidth rows: a fabric bandwidth row and the kernel `tcp stream` baseline
//! measured in alternating short slices within one run, so that whatever the machine
//! does meanwhile (other processes, frequency, the host's neighbours) weighs on both
//! sides of each pair alike.
//!
//! Measured one after the other, the `tcp stream` row and siw's `write` row move by a
//! factor of 1.5 or more between runs of one binary on a loaded 2-core VM, each on its
//! own, so their ratio says little. Here both stay connected for the whole row: the TCP
//! socket pair of the `tcp stream` row (same options) and the fabric connection of the
//! bandwidth rows (same queue depths, memory and provider settings); set-up is not
//! timed. The same two pinned threads run both sides: the measuring thread reads the
//! stream or posts the fabric operations, the server thread writes the stream or polls
//! the fabric's completion queue (where a software provider executes the peer's
//! Writes), so neither side's threads spin while the other is measured.
//!
//! Each pair is one slice of each side, taken in the order TCP first, then the fabric
//! first (A B, B A, ...) so that a drift over the run weighs on both alike. A slice's
//! bandwidth counts the operations completed from its start (the moment its side is
//! told to go) to its last completion ([`SliceClock::started_at`]). A fabric slice
//! stops posting at its end and waits for what is in flight (the wire stays busy until
//! the last completion); what those completions left in the connection's socket
//! buffers (siw completes a Write once its octets are in the socket) the server reads
//! at the start of the next fabric slice, inside that slice's time, as a continuous
//! stream would. A TCP slice pauses the stream as it stands: the reader stops
//! (mid-message if need be), the writer at its next write, and what the socket buffers hold is read
//! in the next TCP slice, in its time; both sides keep their buffers' slack across the
//! pause, as they have it in a continuous stream. (Draining the stream at each slice's
//! end instead, as tried, took that slack from TCP alone: on a loaded VM its slices ran
//! x0.7-0.9 of its separate row while siw's ran x1.05-1.2 of its own.) The result is
//! each pair's ratio (fabric over TCP) and the median, minimum and maximum of those
//! ratios ([`spread`]).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::fabric::{self, BwOp, FabricKind};
use crate::histogram::Histogram;
use crate::measure::{Budget, Measurement, GRACE, MAX_ROW_TIME};
use crate::spec::{pin, BenchError, RowSpec};
use crate::tcp::{self, SliceEnd, StreamReader, StreamWriter};
use crate::units::Amount;

/// How long one side's slice measures (when the row is measured by time).
pub const SLICE: Duration = Duration::from_millis(200);
/// Fewest pairs a row takes: a median and a spread of fewer say little.
pub const MIN_PAIRS: usize = 8;

/// One slice's tally: operations completed after the first one, and the time from the
/// first to the last.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SliceClock {
    first: Option<Instant>,
    last: Option<Instant>,
    ops: u64,
}

impl SliceClock {
    /// A clock that started at `start`: every operation ticked counts.
    pub fn started_at(start: Instant) -> SliceClock {
        SliceClock {
            first: Some(start),
            last: None,
            ops: 0,
        }
    }

    /// An operation completed at `now`. On a clock not [started](Self::started_at),
    /// the first only starts it.
    pub fn tick(&mut self, now: Instant) {
        if self.first.is_none() {
            self.first = Some(now);
        } else {
            self.ops += 1;
            self.last = Some(now);
        }
    }

    /// Operations counted (all but the first).
    pub fn ops(&self) -> u64 {
        self.ops
    }

    /// Time from the first operation to the last.
    pub fn span(&self) -> Duration {
        match (self.first, self.last) {
            (Some(a), Some(b)) => b.saturating_duration_since(a),
            _ => Duration::ZERO,
        }
    }

    /// Gigabytes (1e9 octets) per second of `size`-octet operations, if the slice
    /// counted any over a measurable time.
    pub fn gb_per_s(&self, size: usize) -> Option<f64> {
        let secs = self.span().as_secs_f64();
        (self.ops > 0 && secs > 0.0).then(|| self.ops as f64 * size as f64 / secs / 1e9)
    }
}

/// One pair: each side's bandwidth in its slice and their ratio.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PairFigures {
    /// The baseline's (TCP stream's) GB/s in its slice.
    pub base_gb_per_s: f64,
    /// The measured side's GB/s in its slice.
    pub gb_per_s: f64,
    /// `gb_per_s / base_gb_per_s`: this pair's ratio.
    pub ratio: f64,
    /// Whether the baseline's slice came first.
    pub base_first: bool,
}

/// A pair of two measured slices, or `None` if either counted nothing.
pub fn pair(base: Option<f64>, side: Option<f64>, base_first: bool) -> Option<PairFigures> {
    let (b, s) = (base?, side?);
    (b > 0.0 && s > 0.0 && b.is_finite() && s.is_finite()).then(|| PairFigures {
        base_gb_per_s: b,
        gb_per_s: s,
        ratio: s / b,
        base_first,
    })
}

/// The median, minimum and maximum of the per-pair ratios.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RatioSpread {
    /// Pairs counted.
    pub pairs: usize,
    /// Median ratio (the mean of the middle two of an even count).
    pub median: f64,
    /// Smallest ratio.
    pub min: f64,
    /// Largest ratio.
    pub max: f64,
}

impl RatioSpread {
    /// `(max - min) / median`: how far apart the pairs' ratios lie, relative to their
    /// median.
    pub fn relative_spread(&self) -> f64 {
        if self.median > 0.0 {
            (self.max - self.min) / self.median
        } else {
            f64::NAN
        }
    }
}

/// The median of `v` after sorting it (NaN-free input; `None` if empty).
fn median_of(v: &mut [f64]) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// The spread of the ratios of `pairs`, each taken within its own pair (never the
/// ratio of two medians: a slow stretch of the machine moves both sides of a pair).
pub fn spread(pairs: &[PairFigures]) -> Option<RatioSpread> {
    let mut r: Vec<f64> = pairs.iter().map(|p| p.ratio).collect();
    let median = median_of(&mut r)?;
    Some(RatioSpread {
        pairs: r.len(),
        median,
        min: r[0],
        max: r[r.len() - 1],
    })
}

/// A paired row's comparison with its baseline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Paired {
    /// The baseline, e.g. "physical tcp stream".
    pub against: String,
    /// Milliseconds of each timed slice (0 when slices are counted in operations).
    pub slice_ms: f64,
    /// Operations per slice when counted so (`--iters`).
    pub slice_ops: Option<u64>,
    /// Every pair, in run order.
    pub pairs: Vec<PairFigures>,
    /// The ratios' median and range.
    pub ratio: Option<RatioSpread>,
    /// The mean of the measured side's slices over the mean of the baseline's: with
    /// slices of one length, the ratio of the octets each side moved in its slices.
    /// Steadier than the median of the ratios where the baseline's slices scatter
    /// widely (a ratio divides by each one), but the pairing does less for it.
    pub ratio_of_means: Option<f64>,
    /// Median of the baseline's slices, GB/s.
    pub base_median_gb_per_s: f64,
    /// Median of the measured side's slices, GB/s.
    pub median_gb_per_s: f64,
    /// The TCP stream's system calls per MiB it moved: its `read` and `write` calls,
    /// counted as made (each is one system call), and of those the ones that would
    /// have blocked (the busy-polling's share).
    pub base_syscalls_per_mib: Option<(f64, f64)>,
}

impl Paired {
    /// The per-pair figures summarised.
    pub fn of(
        against: String,
        slice: Option<Duration>,
        slice_ops: Option<u64>,
        pairs: Vec<PairFigures>,
        base_syscalls_per_mib: Option<(f64, f64)>,
    ) -> Paired {
        let mut b: Vec<f64> = pairs.iter().map(|p| p.base_gb_per_s).collect();
        let mut s: Vec<f64> = pairs.iter().map(|p| p.gb_per_s).collect();
        let (sb, ss) = (b.iter().sum::<f64>(), s.iter().sum::<f64>());
        Paired {
            ratio_of_means: (sb > 0.0).then(|| ss / sb),
            against,
            slice_ms: slice.map_or(0.0, |d| d.as_secs_f64() * 1e3),
            slice_ops,
            ratio: spread(&pairs),
            base_median_gb_per_s: median_of(&mut b).unwrap_or(f64::NAN),
            median_gb_per_s: median_of(&mut s).unwrap_or(f64::NAN),
            pairs,
            base_syscalls_per_mib,
        }
    }
}

/// What the server thread is doing.
const IDLE: u8 = 0;
const TCP: u8 = 1;
const FABRIC: u8 = 2;
const STOP: u8 = 3;

/// How a row's budget becomes slices: (warm-up per side, pairs, slice length or
/// operations per slice, hard limit).
struct Plan {
    warm_time: Option<Duration>,
    warm_ops: Option<u64>,
    pairs: usize,
    slice: Option<Duration>,
    slice_ops: Option<u64>,
    limit: Duration,
}

fn plan(budget: Budget) -> Plan {
    let (warm_time, warm_ops) = match budget.warmup {
        Amount::Time(d) => ((!d.is_zero()).then_some(d), None),
        Amount::Iters(n) => (None, (n > 0).then_some(n)),
    };
    let (pairs, slice, slice_ops) = match budget.stop {
        Amount::Time(d) => {
            let per_pair = SLICE.as_secs_f64() * 2.0;
            let n = (d.as_secs_f64() / per_pair).ceil() as usize;
            (n.max(MIN_PAIRS), Some(SLICE), None)
        }
        Amount::Iters(n) => (MIN_PAIRS, None, Some(n.max(1))),
    };
    let limit = match slice {
        Some(s) => warm_time.unwrap_or_default() * 2 + s * (2 * pairs as u32) + GRACE,
        None => MAX_ROW_TIME * 2 + GRACE,
    };
    Plan {
        warm_time,
        warm_ops,
        pairs,
        slice,
        slice_ops,
        limit,
    }
}

/// Runs the paired row: fabric `op` on provider `F` against the TCP stream, both of
/// `spec.size` octets per operation. Returns the fabric side's measurement (its
/// slices' operations and times summed, its per-operation latencies) and the pairs.
pub fn run<F: FabricKind>(
    spec: &RowSpec,
    op: BwOp,
    budget: Budget,
    progress: Arc<AtomicU64>,
) -> Result<(Measurement, Paired), BenchError> {
    let size = spec.size.max(1);
    let (mut fc, mut fs) = fabric::pair_connect::<F>(spec, op)?;
    let (client_sock, server_sock) = tcp::socket_pair()?;
    let mut reader = StreamReader::new(client_sock, size);
    let mut writer = StreamWriter::new(server_sock, size);
    let p = plan(budget);
    let deadline = Instant::now() + p.limit;
    let phase = Arc::new(AtomicU8::new(IDLE));
    let server = {
        let (phase, core) = (phase.clone(), spec.server_core);
        thread::spawn(move || -> Result<(u64, u64), BenchError> {
            pin(core);
            let mut spins = 0u32;
            loop {
                match phase.load(Ordering::Acquire) {
                    TCP => {
                        let go = || phase.load(Ordering::Relaxed) == TCP;
                        if writer.run_while(deadline, go)? == SliceEnd::Over {
                            break;
                        }
                    }
                    FABRIC => {
                        let go = || phase.load(Ordering::Relaxed) == FABRIC;
                        if !fs.serve_while(deadline, go)? {
                            break;
                        }
                    }
                    STOP => break,
                    _ => {
                        spins = spins.wrapping_add(1);
                        if spins & 1023 == 0 && Instant::now() >= deadline {
                            break;
                        }
                        std::hint::spin_loop();
                    }
                }
            }
            Ok((writer.calls, writer.full))
        })
    };
    pin(spec.client_core);
    let mut hist = Histogram::new();
    let mut pairs = Vec::with_capacity(p.pairs);
    let (mut ops, mut elapsed, mut truncated) = (0u64, Duration::ZERO, false);
    let mut started = None;
    // One slice of `side`: its clock, or None if the run is over (deadline, a closed
    // stream, or the server thread gone).
    let mut slice = |side: u8,
                     time: Option<Duration>,
                     count: Option<u64>,
                     hist: Option<&mut Histogram>|
     -> Result<Option<SliceClock>, BenchError> {
        if server.is_finished() {
            return Ok(None);
        }
        let start = Instant::now();
        let mut clock = SliceClock::started_at(start);
        let end = start + time.unwrap_or_default();
        let went_on = if side == TCP {
            phase.store(TCP, Ordering::Release);
            reader.slice(end, count, deadline, |t| clock.tick(t))? == SliceEnd::Done
        } else {
            phase.store(side, Ordering::Release);
            match hist {
                Some(h) => fc.slice(end, count, deadline, |t, lat| {
                    clock.tick(t);
                    h.record(lat);
                })?,
                None => fc.slice(end, count, deadline, |t, _| clock.tick(t))?,
            }
        };
        Ok(went_on.then_some(clock))
    };
    let result = (|| -> Result<(), BenchError> {
        if p.warm_time.is_some() || p.warm_ops.is_some() {
            for side in [TCP, FABRIC] {
                if slice(side, p.warm_time, p.warm_ops, None)?.is_none() {
                    truncated = true;
                    return Ok(());
                }
            }
        }
        for i in 0..p.pairs {
            let base_first = i % 2 == 0;
            let order = if base_first {
                [TCP, FABRIC]
            } else {
                [FABRIC, TCP]
            };
            let (mut base, mut side) = (None, None);
            for s in order {
                let h = (s == FABRIC).then_some(&mut hist);
                started.get_or_insert_with(Instant::now);
                let Some(clock) = slice(s, p.slice, p.slice_ops, h)? else {
                    truncated = true;
                    return Ok(());
                };
                if s == TCP {
                    base = clock.gb_per_s(size);
                } else {
                    side = clock.gb_per_s(size);
                    ops += clock.ops();
                    elapsed += clock.span();
                    progress.store(ops, Ordering::Relaxed);
                }
            }
            if let Some(pf) = pair(base, side, base_first) {
                pairs.push(pf);
            }
        }
        Ok(())
    })();
    phase.store(STOP, Ordering::Release);
    let served = server
        .join()
        .unwrap_or_else(|_| Err(BenchError::Setup("paired server thread panicked".into())));
    result?;
    let (w_calls, w_full) = served?;
    let mib = reader.octets as f64 / f64::from(1u32 << 20);
    let per_mib = |n: u64| (mib > 0.0).then(|| n as f64 / mib);
    let syscalls = per_mib(reader.calls + w_calls).zip(per_mib(reader.empty + w_full));
    let paired = Paired::of(
        "physical tcp stream".to_owned(),
        p.slice,
        p.slice_ops,
        pairs,
        syscalls,
    );
    if paired.ratio.is_none() {
        return Err(BenchError::Setup(
            "no pair had both slices measured".to_owned(),
        ));
    }
    let m = Measurement {
        hist,
        ops,
        elapsed,
        truncated,
        cpu: None,
        started: started.unwrap_or_else(Instant::now),
    };
    Ok((m, paired))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pf(base: f64, side: f64) -> PairFigures {
        pair(Some(base), Some(side), true).unwrap()
    }

    /// The ratio is taken within each pair: here the TCP side swings 2.0-5.0 GB/s and
    /// the fabric side with it, and the median of the per-pair ratios (0.9, 0.4, 0.6)
    /// is 0.6, where the ratio of the sides' medians would be 2.0 / 4.0 = 0.5, and a
    /// pairing shifted by one slice (1.8/5.0, 2.0/4.0, 2.4/2.0) would give 0.5 too.
    #[test]
    fn the_ratio_is_the_median_of_per_pair_ratios() {
        let pairs = [pf(2.0, 1.8), pf(5.0, 2.0), pf(4.0, 2.4)];
        let s = spread(&pairs).unwrap();
        assert_eq!(s.pairs, 3);
        assert!((s.median - 0.6).abs() < 1e-12, "{s:?}");
        assert!((s.min - 0.4).abs() < 1e-12, "{s:?}");
        assert!((s.max - 0.9).abs() < 1e-12, "{s:?}");
        assert!((s.relative_spread() - 0.5 / 0.6).abs() < 1e-12);
        let p = Paired::of("b".into(), Some(SLICE), None, pairs.to_vec(), None);
        assert!((p.base_median_gb_per_s - 4.0).abs() < 1e-12);
        assert!((p.median_gb_per_s - 2.0).abs() < 1e-12);
        assert_eq!(p.ratio, Some(s));
        assert!((p.ratio_of_means.unwrap() - 6.2 / 11.0).abs() < 1e-12);
        // A machine that halves both sides in some pairs leaves every ratio alone.
        let swinging = [pf(3.0, 1.5), pf(6.0, 3.0), pf(3.0, 1.5), pf(6.0, 3.0)];
        let s = spread(&swinging).unwrap();
        assert_eq!((s.median, s.min, s.max), (0.5, 0.5, 0.5));
    }

    /// An even count takes the mean of the middle two; a pair missing a side is none.
    #[test]
    fn even_counts_and_empty_slices() {
        let s = spread(&[pf(1.0, 0.5), pf(1.0, 0.7), pf(1.0, 0.6), pf(1.0, 0.9)]).unwrap();
        assert!((s.median - 0.65).abs() < 1e-12, "{s:?}");
        assert!(pair(None, Some(1.0), true).is_none());
        assert!(pair(Some(1.0), Some(0.0), false).is_none());
        assert!(spread(&[]).is_none());
    }

    /// A clock not started beforehand starts at its first operation: four operations
    /// 10 ms apart count three over 30 ms; one started beforehand counts them all.
    #[test]
    fn a_slice_times_from_its_first_operation() {
        let t0 = Instant::now();
        let mut c = SliceClock::default();
        assert_eq!(c.gb_per_s(1), None);
        for i in 0..4u64 {
            c.tick(t0 + Duration::from_millis(100 + 10 * i));
        }
        assert_eq!(c.ops(), 3);
        assert_eq!(c.span(), Duration::from_millis(30));
        let gb = c.gb_per_s(1_000_000).unwrap();
        assert!((gb - 0.1).abs() < 1e-9, "{gb}");
        // Started 10 ms before the first of four, they count four over 40 ms.
        let mut c = SliceClock::started_at(t0 + Duration::from_millis(100));
        for i in 0..4u64 {
            c.tick(t0 + Duration::from_millis(100 + 10 * i + 10));
        }
        assert_eq!((c.ops(), c.span()), (4, Duration::from_millis(40)));
    }

    /// A timed budget gives 200 ms slices and at least [`MIN_PAIRS`] pairs; a longer
    /// one more pairs.
    #[test]
    fn budgets_become_slices() {
        let b = |s| Budget {
            warmup: Amount::Time(Duration::from_millis(100)),
            stop: Amount::Time(Duration::from_secs(s)),
        };
        assert_eq!(plan(b(1)).pairs, MIN_PAIRS);
        assert_eq!(plan(b(6)).pairs, 15);
        assert_eq!(plan(b(1)).slice, Some(SLICE));
        let it = plan(Budget {
            warmup: Amount::Iters(0),
            stop: Amount::Iters(50),
        });
        assert_eq!(
            (it.pairs, it.slice_ops, it.warm_ops),
            (MIN_PAIRS, Some(50), None)
        );
    }
}
