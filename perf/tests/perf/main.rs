//! The `rpcrdma-perf` command line and its latency histogram. One test binary, one module
//! per former file. The allocation counter (`no_alloc`) is a binary of its own.

mod cli;
mod histogram;
mod remote;
mod scale;
mod soak;

/// Tests that run busy-polling processes (soaks, the two-process split, the scaling
/// rows) take turns: two at once on a 2-core machine starve each other, and a soak's
/// calls then time out (seen in CI once the scaling rows joined this binary).
pub(crate) static BUSY_PROCESSES: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Takes [`BUSY_PROCESSES`] (a test that panicked while holding it leaves it usable).
pub(crate) fn one_busy_test_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    BUSY_PROCESSES.lock().unwrap_or_else(|e| e.into_inner())
}
