//! Ctrl-C (SIGINT) and SIGTERM as a flag the serve loop checks: the handler only stores
//! to an atomic, which is async-signal-safe.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Installs the handler for SIGINT and SIGTERM.
pub fn install() -> io::Result<()> {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler has the signature signal(2) expects and only touches an
        // atomic; replacing the default disposition affects nothing else in the process.
        let old = unsafe {
            libc::signal(
                sig,
                on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        };
        if old == libc::SIG_ERR {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Whether a stop signal arrived.
pub fn requested() -> bool {
    STOP.load(Ordering::Relaxed)
}
