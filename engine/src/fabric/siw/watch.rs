//! A diagnostic watchdog, off unless the environment asks for it
//! (`RPCRDMA_SIW_WATCH=SECONDS`): a running connection whose queue pair has work in
//! flight (requests not retired, Reads unanswered either way, a write waiting for room)
//! and whose progress has not moved for that long is described once on stderr: the
//! engine's send-queue and Read bookkeeping, the transmitter, the readiness flags and
//! what the kernel holds in the socket each way (`SIOCINQ`, `SIOCOUTQ`). Both sides of a
//! stalled connection print, so comparing them tells which end stopped. Nothing is
//! allocated or read from the clock per poll unless it is on.

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::conn::{Conn, Phase};

/// What moves while a connection makes progress.
type Signature = [u64; 10];

/// Whether connection events are logged (`RPCRDMA_SIW_WATCH_EVENTS`).
pub(crate) fn events_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("RPCRDMA_SIW_WATCH_EVENTS").is_some())
}

/// Logs a connection event, with the connection's state, when asked for.
pub(crate) fn event(c: &Conn, what: &str) {
    if events_on() {
        eprintln!(
            "siw event [pid {}] {:?}: {what}: phase {} {}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default(),
            phase_name(&c.phase),
            describe(c)
        );
    }
}

/// Every connection of every phase is described each `after` (`RPCRDMA_SIW_WATCH_ALL`),
/// so the peer of a stalled connection can be found by its ports.
fn dump_all(conns: &[Option<Box<Conn>>]) {
    for c in conns.iter().flatten() {
        eprintln!(
            "siw watch all [pid {}]: phase {} {}",
            std::process::id(),
            phase_name(&c.phase),
            describe(c)
        );
    }
}

fn phase_name(p: &Phase) -> &'static str {
    match p {
        Phase::Connecting(_) => "connecting",
        Phase::AwaitReply(_) => "await-reply",
        Phase::AwaitRequest(_) => "await-request",
        Phase::Deciding(_) => "deciding",
        Phase::Replying { .. } => "replying",
        Phase::Running => "running",
        Phase::Draining => "draining",
        Phase::Closed => "closed",
    }
}

struct Seen {
    conn: crate::fabric::ConnId,
    sig: Signature,
    since: Instant,
    reported: bool,
}

/// The watchdog of one device.
pub(crate) struct Watch {
    after: Duration,
    seen: Vec<Option<Seen>>,
    rounds: u32,
    /// Describe every connection each `after` (`RPCRDMA_SIW_WATCH_ALL`).
    all: bool,
    last_all: Instant,
}

impl Watch {
    /// The watchdog the environment asks for, if any.
    pub(crate) fn from_env() -> Option<Watch> {
        let v = std::env::var("RPCRDMA_SIW_WATCH").ok()?;
        let secs: f64 = v.trim().parse().ok().filter(|s: &f64| *s > 0.0)?;
        Some(Watch {
            after: Duration::from_secs_f64(secs),
            seen: Vec::new(),
            rounds: 0,
            all: std::env::var_os("RPCRDMA_SIW_WATCH_ALL").is_some(),
            last_all: Instant::now(),
        })
    }

    /// Looks at every connection (every 64th round).
    pub(crate) fn check(&mut self, conns: &[Option<Box<Conn>>]) {
        self.rounds = self.rounds.wrapping_add(1);
        if !self.rounds.is_multiple_of(64) {
            return;
        }
        let now = Instant::now();
        if self.all && now.duration_since(self.last_all) >= self.after {
            self.last_all = now;
            dump_all(conns);
        }
        if self.seen.len() < conns.len() {
            self.seen.resize_with(conns.len(), || None);
        }
        for (slot, c) in conns.iter().enumerate() {
            let Some(c) = c.as_ref() else {
                self.seen[slot] = None;
                continue;
            };
            let Some(sig) = signature(c) else {
                self.seen[slot] = None;
                continue;
            };
            let busy = sig[9] != 0;
            match &mut self.seen[slot] {
                Some(s) if s.conn == c.id && s.sig == sig => {
                    if busy && !s.reported && now.duration_since(s.since) >= self.after {
                        s.reported = true;
                        eprintln!(
                            "siw watch [pid {}]: no progress for {:?}: {}",
                            std::process::id(),
                            now.duration_since(s.since),
                            describe(c)
                        );
                    }
                }
                s => {
                    *s = Some(Seen {
                        conn: c.id,
                        sig,
                        since: now,
                        reported: false,
                    })
                }
            }
        }
    }
}

/// Progress counters of a running connection; the last entry is non-zero when it has
/// work in flight.
fn signature(c: &Conn) -> Option<Signature> {
    if !matches!(c.phase, Phase::Running) {
        return None;
    }
    let e = c.engine.as_ref()?;
    let posted = e.qp.sq_posted.load(Ordering::Acquire);
    // Bytes the kernel holds for us unread count as work too: a connection that stopped
    // reading has nothing of its own in flight.
    let unread = c
        .sock
        .as_ref()
        .is_some_and(|s| ioctl_int(s.as_raw_fd(), libc::FIONREAD as libc::c_ulong) > 0);
    let busy =
        e.sq.head < posted || !e.orq.is_empty() || !e.irq.is_empty() || e.tx_waiting() || unread;
    Some([
        e.sq.head,
        e.sq.next,
        posted,
        e.sq.confirmed,
        e.rq.head,
        e.rq.next,
        e.orq.len() as u64,
        e.irq.len() as u64,
        e.tx.progress(),
        u64::from(busy),
    ])
}

fn ioctl_int(fd: i32, req: libc::c_ulong) -> i64 {
    let mut v: libc::c_int = 0;
    // SAFETY: SIOCINQ/SIOCOUTQ write one int.
    let r = unsafe { libc::ioctl(fd, req as _, &mut v) };
    if r < 0 {
        -1
    } else {
        i64::from(v)
    }
}

/// Whether the peer's end of stream (or an error) is what the next read returns.
fn at_end(fd: i32) -> bool {
    let mut b = [0u8; 1];
    // SAFETY: a one-octet peek into our own buffer.
    let r = unsafe {
        libc::recv(
            fd,
            b.as_mut_ptr().cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    r == 0 || (r < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::WouldBlock)
}

/// One line about `c`.
pub(crate) fn describe(c: &Conn) -> String {
    let (inq, outq) = c.sock.as_ref().map_or((-1, -1), |s| {
        let fd = s.as_raw_fd();
        (
            ioctl_int(fd, libc::FIONREAD as libc::c_ulong),
            ioctl_int(fd, libc::TIOCOUTQ as libc::c_ulong),
        )
    });
    let mut s = format!(
        "conn {:?} {} -> {} readable {} writable {} socket in {} out {} at end {}",
        c.id,
        c.local,
        c.peer,
        c.readable,
        c.writable,
        inq,
        outq,
        c.sock.as_ref().is_some_and(|s| at_end(s.as_raw_fd())),
    );
    if let Some(e) = c.engine.as_ref() {
        let posted = e.qp.sq_posted.load(Ordering::Acquire);
        let rq_posted = e.qp.rq_posted.load(Ordering::Acquire);
        s.push_str(&format!(
            "; sq head {} next {} posted {} confirmed {} uncovered {:?} signaled {:?} \
             states [",
            e.sq.head, e.sq.next, posted, e.sq.confirmed, e.sq.uncovered, e.sq.signaled
        ));
        let mut sq = e.sq.head;
        while sq < e.sq.next.min(e.sq.head + 16) {
            // SAFETY: started and not retired.
            let w = unsafe { e.qp.sq.read(sq) };
            s.push_str(&format!(
                "{}:{:?}{}{} ",
                sq,
                w.wc_opcode(),
                if w.signaled { "/sig" } else { "" },
                match e.sq.state(sq) {
                    super::engine::SqState::Busy => "=busy".to_owned(),
                    super::engine::SqState::Sent => "=sent".to_owned(),
                    super::engine::SqState::Done(st) => format!("=done({st:?})"),
                }
            ));
            sq += 1;
        }
        s.push_str(&format!(
            "]; rq head {} next {} posted {}; orq {:?}; irq {}; ord {} ird {}; failed {}; \
             tx {}; rx at boundary {}",
            e.rq.head,
            e.rq.next,
            rq_posted,
            e.orq
                .iter()
                .map(|o| (o.seq, o.covers, o.size, o.placed))
                .collect::<Vec<_>>(),
            e.irq.len(),
            e.link.ord,
            e.link.ird,
            e.failed,
            e.tx.describe(),
            e.rx.at_boundary(),
        ));
    }
    s
}
