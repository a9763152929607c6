//! TCP sockets with the options siw needs set before connecting or listening
//! (`TCP_MAXSEG`), which std and mio do not expose.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use mio::net::{TcpListener, TcpStream};

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn set_int(fd: RawFd, level: libc::c_int, name: libc::c_int, v: libc::c_int) -> io::Result<()> {
    // SAFETY: `v` is a valid c_int for the duration of the call.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&v as *const libc::c_int).cast(),
            core::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// The socket address in C form, and its length.
fn raw_addr(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut st: libc::sockaddr_storage = unsafe { core::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is large and aligned enough for any sockaddr.
            unsafe { core::ptr::write((&mut st as *mut libc::sockaddr_storage).cast(), sin) };
            core::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above.
            unsafe { core::ptr::write((&mut st as *mut libc::sockaddr_storage).cast(), sin6) };
            core::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (st, len as libc::socklen_t)
}

/// What is set on a siw socket before it connects or listens.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SockOpts {
    /// `TCP_MAXSEG` clamp.
    pub(crate) mss: Option<u32>,
    /// `SO_SNDBUF` and `SO_RCVBUF`.
    pub(crate) buffers: Option<u32>,
}

fn socket_for(addr: &SocketAddr, opts: SockOpts) -> io::Result<OwnedFd> {
    let family = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: plain system call.
    let fd = cvt(unsafe {
        libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: `fd` was just created and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    if let Some(m) = opts.mss {
        set_int(
            fd.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_MAXSEG,
            m.min(i32::MAX as u32) as libc::c_int,
        )?;
    }
    if let Some(b) = opts.buffers {
        // Before connect or listen: the receive buffer then decides the window scale
        // the SYN offers (and accepted sockets inherit both sizes).
        let b = b.min(i32::MAX as u32) as libc::c_int;
        set_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUF, b)?;
        set_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, b)?;
    }
    Ok(fd)
}

/// Starts a non-blocking connect. `Ok` also while it is in progress; refusal may show up
/// here or later as the socket's error.
pub(crate) fn connect(addr: &SocketAddr, opts: SockOpts) -> io::Result<TcpStream> {
    let fd = socket_for(addr, opts)?;
    let (st, len) = raw_addr(addr);
    // SAFETY: `st` holds a valid sockaddr of length `len`.
    let r = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&st as *const libc::sockaddr_storage).cast(),
            len,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
    }
    Ok(TcpStream::from_std(std::net::TcpStream::from(fd)))
}

/// A non-blocking listener with address reuse.
pub(crate) fn listen(addr: &SocketAddr, opts: SockOpts) -> io::Result<TcpListener> {
    let fd = socket_for(addr, opts)?;
    set_int(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    let (st, len) = raw_addr(addr);
    // SAFETY: `st` holds a valid sockaddr of length `len`.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&st as *const libc::sockaddr_storage).cast(),
            len,
        )
    })?;
    // SAFETY: plain system call on our socket.
    cvt(unsafe { libc::listen(fd.as_raw_fd(), 128) })?;
    Ok(TcpListener::from_std(std::net::TcpListener::from(fd)))
}

/// Turns TCP keepalive on for `fd` with `k`'s timing, and `TCP_USER_TIMEOUT` to the
/// same total, so a peer that vanished without a reset is found whether the
/// connection is idle (keepalive) or has data in flight (user timeout).
pub(crate) fn set_keepalive(fd: RawFd, k: &super::config::TcpKeepalive) -> io::Result<()> {
    let secs = |d: std::time::Duration| d.as_secs().clamp(1, i32::MAX as u64) as libc::c_int;
    set_int(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, secs(k.idle))?;
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, secs(k.interval))?;
    set_int(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_KEEPCNT,
        k.count.clamp(1, 127) as libc::c_int,
    )?;
    let total_ms = k.total().as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
    set_int(fd, libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT, total_ms)
}

/// The connection's maximum segment size (`TCP_MAXSEG`), the EMSS that sizes FPDUs.
pub(crate) fn mss(fd: RawFd) -> Option<u32> {
    get_int(fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG)
        .filter(|&v| v > 0)
        .map(|v| v as u32)
}

/// An integer socket option (`None` if the kernel refuses to tell).
fn get_int(fd: RawFd, level: libc::c_int, name: libc::c_int) -> Option<libc::c_int> {
    let mut v: libc::c_int = 0;
    let mut len = core::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `v` and `len` are valid for writes of their sizes.
    let r = unsafe {
        libc::getsockopt(
            fd,
            level,
            name,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both buffer sizes reach the connecting socket and, through the listener, the
    /// accepted one (Linux reports twice the size set). 150000 octets: under the stock
    /// `rmem_max`/`wmem_max` (212992), and unlike either autotuned start (16 KiB send,
    /// 128 KiB receive).
    #[test]
    fn buffer_sizes_reach_connected_and_accepted_sockets() {
        let opts = SockOpts {
            mss: None,
            buffers: Some(150_000),
        };
        let l = listen(&"127.0.0.1:0".parse().expect("addr"), opts).expect("listen");
        let addr = l.local_addr().expect("addr");
        let c = connect(&addr, opts).expect("connect");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let a = loop {
            match l.accept() {
                Ok((a, _)) => break a,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    assert!(std::time::Instant::now() < deadline, "no connection");
                    std::thread::yield_now();
                }
                Err(e) => panic!("accept: {e}"),
            }
        };
        for fd in [c.as_raw_fd(), a.as_raw_fd()] {
            assert_eq!(
                get_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF),
                Some(300_000)
            );
            assert_eq!(
                get_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF),
                Some(300_000)
            );
        }
        // Unset, the kernel's autotuned start stays.
        let plain = connect(&addr, SockOpts::default()).expect("connect");
        let rcvbuf = get_int(plain.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF);
        assert!(rcvbuf.is_some_and(|v| v != 300_000), "{rcvbuf:?}");
    }
}
