//! The measured loop's bookkeeping: warm-up, stop condition, hard deadline, latency
//! recording and the progress counter, all without allocating.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::histogram::Histogram;
use crate::units::Amount;

/// Extra time a row may take beyond its warm-up and measurement before it is cut short:
/// covers set-up and a measuring thread that the scheduler parks for a while.
pub const GRACE: Duration = Duration::from_secs(10);
/// Longest any row may run when it is bounded by iterations rather than time.
pub const MAX_ROW_TIME: Duration = Duration::from_secs(120);

/// How long one row warms up and measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Warm-up, not recorded.
    pub warmup: Amount,
    /// Measurement.
    pub stop: Amount,
}

impl Budget {
    /// When the row is abandoned even if it has not finished.
    pub fn hard_limit(&self) -> Duration {
        let part = |a: Amount| match a {
            Amount::Time(d) => d,
            Amount::Iters(_) => MAX_ROW_TIME,
        };
        (part(self.warmup) + part(self.stop) + GRACE).min(MAX_ROW_TIME * 2 + GRACE)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Warmup,
    Measure,
    Done,
}

/// Tracks one row's run. The benchmark loop calls [`Meter::tick`] once per completed
/// operation and stops when it returns `false`; loops that wait for something call
/// [`Meter::expired`] so that they give up at the deadline.
pub struct Meter {
    hist: Histogram,
    budget: Budget,
    phase: Phase,
    phase_start: Instant,
    phase_ops: u64,
    last: Instant,
    deadline: Instant,
    truncated: bool,
    progress: Arc<AtomicU64>,
    /// The ticking thread's CPU time when measurement began.
    cpu_start: Option<Duration>,
    /// Its CPU time over the measurement, once ended.
    cpu_used: Option<Duration>,
}

/// What one row measured.
#[derive(Debug, Clone)]
pub struct Measurement {
    /// Per-operation latency in nanoseconds.
    pub hist: Histogram,
    /// Operations measured (after warm-up).
    pub ops: u64,
    /// Time from the end of warm-up to the last operation.
    pub elapsed: Duration,
    /// The hard deadline cut the row short (or warm-up never finished).
    pub truncated: bool,
    /// CPU time of the thread that measured (the one calling [`Meter::tick`]) over the
    /// measured stretch, when the system reports it: the client's own cost.
    pub cpu: Option<Duration>,
    /// When the measured stretch began (`elapsed` runs from here).
    pub started: Instant,
}

/// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`: one system call, read
/// twice a row).
pub fn thread_cpu_time() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return None;
    }
    Some(Duration::new(
        u64::try_from(ts.tv_sec).ok()?,
        u32::try_from(ts.tv_nsec).ok()?,
    ))
}

impl Meter {
    /// A meter whose clock starts now.
    pub fn new(budget: Budget, progress: Arc<AtomicU64>) -> Meter {
        let now = Instant::now();
        let phase = match budget.warmup {
            Amount::Iters(0) => Phase::Measure,
            Amount::Time(d) if d.is_zero() => Phase::Measure,
            _ => Phase::Warmup,
        };
        Meter {
            hist: Histogram::new(),
            budget,
            phase,
            phase_start: now,
            phase_ops: 0,
            last: now,
            deadline: now + budget.hard_limit(),
            truncated: false,
            progress,
            cpu_start: None,
            cpu_used: None,
        }
    }

    /// Marks the start of measurement for the CPU clock.
    fn begin_measure(&mut self) {
        self.cpu_start = thread_cpu_time();
        self.cpu_used = None;
    }

    /// Measurement is over: the CPU it took.
    fn end_measure(&mut self) {
        if self.cpu_used.is_none() {
            self.cpu_used = self
                .cpu_start
                .zip(thread_cpu_time())
                .map(|(a, b)| b.saturating_sub(a));
        }
    }

    /// Restarts the clocks, e.g. after connection set-up.
    pub fn restart(&mut self) {
        let now = Instant::now();
        self.phase_start = now;
        self.last = now;
        self.deadline = now + self.budget.hard_limit();
        if self.phase == Phase::Measure {
            self.begin_measure();
        }
    }

    fn reached(amount: Amount, ops: u64, since: Duration) -> bool {
        match amount {
            Amount::Iters(n) => ops >= n,
            Amount::Time(d) => since >= d,
        }
    }

    /// Accounts one finished operation that took `latency_ns`, observed at `now`.
    /// Returns whether the loop should go on.
    #[inline]
    pub fn tick(&mut self, now: Instant, latency_ns: u64) -> bool {
        match self.phase {
            Phase::Measure => {
                self.hist.record(latency_ns);
                self.phase_ops += 1;
                self.last = now;
                if self.phase_ops & 255 == 0 {
                    self.progress.store(self.phase_ops, Ordering::Relaxed);
                }
                if Self::reached(self.budget.stop, self.phase_ops, now - self.phase_start) {
                    self.phase = Phase::Done;
                    self.end_measure();
                    return false;
                }
            }
            Phase::Warmup => {
                self.phase_ops += 1;
                if Self::reached(self.budget.warmup, self.phase_ops, now - self.phase_start) {
                    self.phase = Phase::Measure;
                    self.phase_ops = 0;
                    self.phase_start = now;
                    self.last = now;
                    self.begin_measure();
                }
            }
            Phase::Done => return false,
        }
        if now >= self.deadline {
            self.truncated = true;
            self.phase = Phase::Done;
            self.end_measure();
            return false;
        }
        true
    }

    /// Whether the hard deadline has passed (marks the row truncated if so).
    #[inline]
    pub fn expired(&mut self, now: Instant) -> bool {
        if now >= self.deadline {
            self.truncated = true;
            if self.phase == Phase::Measure {
                self.end_measure();
            }
            self.phase = Phase::Done;
        }
        self.phase == Phase::Done
    }

    /// The hard deadline, for helper threads that must stop by themselves.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Ends the row.
    pub fn finish(mut self) -> Measurement {
        let measured = self.phase != Phase::Warmup;
        if self.phase == Phase::Measure {
            self.end_measure();
        }
        Measurement {
            ops: if measured { self.phase_ops } else { 0 },
            elapsed: if measured {
                self.last.saturating_duration_since(self.phase_start)
            } else {
                Duration::ZERO
            },
            truncated: self.truncated || !measured,
            cpu: if measured { self.cpu_used } else { None },
            started: self.phase_start,
            hist: self.hist,
        }
    }
}

/// A progress line on standard error, redrawn a few times a second by its own (mostly
/// sleeping) thread so the measured loop only stores a counter.
pub struct Progress {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// Starts drawing `label` and the counter's value, unless `enabled` is false.
    pub fn start(enabled: bool, label: String, counter: Arc<AtomicU64>) -> Progress {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = enabled.then(|| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let t0 = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                    let mut err = std::io::stderr().lock();
                    let _ = write!(
                        err,
                        "\r\x1b[K{label}: {} ops, {:.1}s",
                        counter.load(Ordering::Relaxed),
                        t0.elapsed().as_secs_f64()
                    );
                    let _ = err.flush();
                }
                let _ = write!(std::io::stderr(), "\r\x1b[K");
            })
        });
        Progress { stop, thread }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iterations_after_warmup_are_recorded_and_counted() {
        let budget = Budget {
            warmup: Amount::Iters(5),
            stop: Amount::Iters(10),
        };
        let mut m = Meter::new(budget, Arc::new(AtomicU64::new(0)));
        let mut calls = 0;
        while m.tick(Instant::now(), 1000 + calls) {
            calls += 1;
        }
        let r = m.finish();
        assert_eq!(calls + 1, 15);
        assert_eq!(r.ops, 10);
        assert_eq!(r.hist.count(), 10);
        // Warm-up values (1000..1004) were not recorded.
        assert_eq!(r.hist.min(), 1005);
        assert!(!r.truncated);
    }

    #[test]
    fn the_deadline_cuts_a_row_short() {
        let budget = Budget {
            warmup: Amount::Iters(0),
            stop: Amount::Iters(u64::MAX),
        };
        let mut m = Meter::new(budget, Arc::new(AtomicU64::new(0)));
        let late = m.deadline() + Duration::from_millis(1);
        assert!(m.tick(Instant::now(), 1));
        assert!(!m.tick(late, 1));
        assert!(m.expired(late));
        let r = m.finish();
        assert!(r.truncated);
        assert_eq!(r.ops, 2);
    }
}
