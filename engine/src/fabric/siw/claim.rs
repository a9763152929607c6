//! Exclusive, never-blocking access to the device's progress engine.
//!
//! Every siw object of a device (completion queues, the connection manager, queue-pair
//! teardown) drives the same engine. The intended deployment is one device per poller
//! thread, so the claim is uncontended: one compare-and-swap to take it, one store to
//! give it back. If another thread does hold it, data-path callers do not wait: they
//! return what is already there, because the holder is making progress for everyone.
//! Only setup paths (connect, accept, creating queues) wait, by yielding.

use core::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, Ordering};

/// A value that one caller at a time may use.
pub(crate) struct Claim<T> {
    busy: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through `try_with`, which hands out one `&mut T` at
// a time (the flag is taken with acquire and released with release), so sharing the
// `Claim` between threads is moving the `T` between them: `T: Send` suffices.
unsafe impl<T: Send> Sync for Claim<T> {}

/// Gives the claim back, also when the closure panics.
struct Release<'a>(&'a AtomicBool);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl<T> Claim<T> {
    pub(crate) fn new(value: T) -> Claim<T> {
        Claim {
            busy: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Runs `f` on the value if nobody else is; `None` if somebody is.
    #[inline]
    pub(crate) fn try_with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        if self
            .busy
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return None;
        }
        let _release = Release(&self.busy);
        // SAFETY: the flag was false and is now ours, so no other `&mut T` exists until
        // `_release` drops.
        Some(f(unsafe { &mut *self.value.get() }))
    }

    /// Runs `f` on the value, yielding until it is free. Setup paths only.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut f = Some(f);
        loop {
            let r = self.try_with(|v| f.take().map(|f| f(v)));
            if let Some(Some(r)) = r {
                return r;
            }
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_claimant_is_turned_away_and_flag_survives_panics() {
        let c = Claim::new(5u32);
        let inner = c.try_with(|v| {
            *v += 1;
            c.try_with(|_| ()).is_none()
        });
        assert_eq!(inner, Some(true));
        assert_eq!(c.with(|v| *v), 6);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            c.try_with(|_| panic!("boom"));
        }));
        assert!(r.is_err());
        assert_eq!(c.try_with(|v| *v), Some(6), "released after the panic");
    }
}
