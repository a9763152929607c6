//! Sleeping and waking a parked poller: an eventfd plus a "parked" flag.
//!
//! Senders only touch the eventfd when the flag says the poller is (about to be) asleep, so
//! waking a running poller costs one fence and one load of a read-mostly cache line. The
//! flag/queue handshake is Dekker-style with a SeqCst fence on both sides: the poller sets
//! `parked` then re-checks its queue; a sender publishes its item then checks `parked`.
//! At least one of them sees the other's write, so an item is never left behind a sleeping
//! poller.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::time::Duration;

/// Non-blocking, close-on-exec eventfd used as a doorbell.
pub(crate) struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: plain syscall; the result is checked before use.
        let raw = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor we own exclusively.
        Ok(EventFd {
            fd: unsafe { OwnedFd::from_raw_fd(raw) },
        })
    }

    /// Rings the doorbell. The only failure a non-blocking eventfd write can have here is a
    /// saturated counter, which already means "readable", so errors are ignored.
    pub(crate) fn ring(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to a descriptor we own.
        let _ = unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Resets the counter so the next wait blocks again. EAGAIN (nothing pending) is fine.
    pub(crate) fn drain(&self) {
        let mut value: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from a descriptor we own.
        let _ = unsafe { libc::read(self.fd.as_raw_fd(), (&mut value as *mut u64).cast(), 8) };
    }

    pub(crate) fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// The doorbell shared between a poller and everyone who sends to it.
pub(crate) struct Doorbell {
    parked: AtomicBool,
    eventfd: EventFd,
}

impl Doorbell {
    pub(crate) fn new() -> io::Result<Self> {
        Ok(Doorbell {
            parked: AtomicBool::new(false),
            eventfd: EventFd::new()?,
        })
    }

    /// Sender side, after publishing work: wake the poller only if it is parked. The swap
    /// means a burst of senders makes one syscall, not one each.
    #[inline]
    pub(crate) fn notify(&self) {
        fence(Ordering::SeqCst);
        if self.parked.load(Ordering::Relaxed) && self.parked.swap(false, Ordering::Relaxed) {
            self.eventfd.ring();
        }
    }

    /// Unconditional wake (shutdown): rare, so no need to be clever.
    pub(crate) fn ring(&self) {
        self.parked.store(false, Ordering::Relaxed);
        self.eventfd.ring();
    }

    /// Poller side, step 1: announce the intent to sleep. The caller must re-check every
    /// wake condition after this returns and call [`cancel_park`](Self::cancel_park) if any
    /// holds.
    pub(crate) fn prepare_park(&self) {
        self.parked.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
    }

    pub(crate) fn cancel_park(&self) {
        self.parked.store(false, Ordering::Relaxed);
    }

    /// Poller side, step 2: sleep on `fds` (whose first entry must be this doorbell's
    /// eventfd) for at most `timeout`. Returns how many descriptors were ready (0 on timeout
    /// or signal).
    pub(crate) fn park(&self, fds: &mut [libc::pollfd], timeout: Duration) -> usize {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `fds` is a valid, exclusively borrowed pollfd array of the given length;
        // `ts` outlives the call; a null sigmask means "leave the mask alone".
        let ready = unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            )
        };
        self.parked.store(false, Ordering::Relaxed);
        // EINTR and friends: treat as a spurious wake; the loop re-checks everything.
        let ready = usize::try_from(ready).unwrap_or(0);
        if fds.first().is_some_and(|p| p.revents != 0) {
            self.eventfd.drain();
        }
        ready
    }

    pub(crate) fn eventfd_raw(&self) -> RawFd {
        self.eventfd.raw()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pollfd(fd: RawFd) -> libc::pollfd {
        libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        }
    }

    #[test]
    fn notify_without_parked_poller_does_not_ring() {
        let bell = Doorbell::new().unwrap();
        bell.notify();
        let mut fds = [pollfd(bell.eventfd_raw())];
        // Nothing rang, so this times out (after 1 ms) with nothing ready.
        assert_eq!(bell.park(&mut fds, Duration::from_millis(1)), 0);
    }

    #[test]
    fn notify_while_parked_rings_once_and_park_drains_it() {
        let bell = Doorbell::new().unwrap();
        bell.prepare_park();
        bell.notify();
        bell.notify(); // the flag was already cleared: no second write
        let mut fds = [pollfd(bell.eventfd_raw())];
        assert_eq!(bell.park(&mut fds, Duration::from_secs(30)), 1);
        fds[0].revents = 0;
        // Drained: the next park times out instead of returning at once.
        assert_eq!(bell.park(&mut fds, Duration::from_millis(1)), 0);
    }

    #[test]
    fn ring_wakes_unconditionally() {
        let bell = Doorbell::new().unwrap();
        bell.ring();
        let mut fds = [pollfd(bell.eventfd_raw())];
        assert_eq!(bell.park(&mut fds, Duration::from_secs(30)), 1);
    }
}
