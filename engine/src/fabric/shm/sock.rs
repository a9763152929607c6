//! Unix-domain `SOCK_SEQPACKET` sockets with descriptor passing (`SCM_RIGHTS`): the shm
//! connection manager's transport. Every socket is non-blocking; these calls are used
//! on setup paths only, never per work request.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use crate::fabric::FabricError;

/// Where a shm listener listens: a Unix socket address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ShmAddr {
    /// A name in Linux's abstract socket namespace: nothing on disk to clean up, gone
    /// when the listener closes.
    Abstract(String),
    /// A socket file; the listener removes it when dropped.
    Path(PathBuf),
}

impl ShmAddr {
    /// An abstract-namespace address.
    pub fn abstract_name(name: impl Into<String>) -> ShmAddr {
        ShmAddr::Abstract(name.into())
    }
}

/// Most descriptors one message carries.
pub(crate) const MAX_FDS: usize = 4;

fn sockaddr(addr: &ShmAddr) -> Result<(libc::sockaddr_un, libc::socklen_t), FabricError> {
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
    let mut sa: libc::sockaddr_un = unsafe { mem::zeroed() };
    sa.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let (bytes, lead): (&[u8], usize) = match addr {
        ShmAddr::Abstract(name) => (name.as_bytes(), 1),
        ShmAddr::Path(p) => (p.as_os_str().as_bytes(), 0),
    };
    if bytes.is_empty() {
        return Err(FabricError::BadAddress("empty socket name"));
    }
    if bytes.contains(&0) {
        return Err(FabricError::BadAddress("socket name contains a NUL byte"));
    }
    // Paths need a terminating NUL; abstract names need the leading one.
    if lead + bytes.len() + 1 > sa.sun_path.len() {
        return Err(FabricError::BadAddress("socket name longer than 107 bytes"));
    }
    for (dst, &b) in sa.sun_path[lead..].iter_mut().zip(bytes) {
        *dst = b as libc::c_char;
    }
    let base = mem::offset_of!(libc::sockaddr_un, sun_path);
    let len = match addr {
        ShmAddr::Abstract(_) => base + 1 + bytes.len(),
        ShmAddr::Path(_) => base + bytes.len() + 1,
    };
    Ok((sa, len as libc::socklen_t))
}

fn new_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Binds and listens on `addr`. A socket file appears only once its socket listens:
/// bound in place, the path would exist between `bind` and `listen`, and a client that
/// connects as soon as it sees the file (a script, the `tools` tests) would be refused
/// there (seen under load: a server that accepted nothing, the client told "connection
/// refused"). So a path is bound at a temporary name beside it, listens, and is then
/// hard-linked to the path, which fails as `bind` would (address in use) when the path
/// exists. Where the link cannot be made (a file system without hard links, a
/// temporary name too long) the path is bound in place.
pub(crate) fn listen(addr: &ShmAddr) -> Result<OwnedFd, FabricError> {
    let ShmAddr::Path(path) = addr else {
        return listen_at(addr);
    };
    let Some(tmp) = staging_path(path) else {
        return listen_at(addr);
    };
    let Ok(fd) = listen_at(&ShmAddr::Path(tmp.clone())) else {
        return listen_at(addr);
    };
    let linked = std::fs::hard_link(&tmp, path);
    // The socket stays bound to its inode; the temporary name goes either way.
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(fd),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(FabricError::Os {
            op: "bind",
            err: io::Error::from_raw_os_error(libc::EADDRINUSE),
        }),
        Err(_) => listen_at(addr),
    }
}

/// A temporary name in `path`'s directory to bind at before linking to `path`, if one
/// fits a socket address.
fn staging_path(path: &std::path::Path) -> Option<PathBuf> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!(".rpcrdma-listen-{}-{n}", std::process::id());
    let tmp = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(name),
        _ => PathBuf::from(name),
    };
    // Room for the terminating NUL in `sun_path` (108 octets).
    (tmp.as_os_str().len() < 108).then_some(tmp)
}

/// Binds `addr` in place and listens.
fn listen_at(addr: &ShmAddr) -> Result<OwnedFd, FabricError> {
    let (sa, len) = sockaddr(addr)?;
    let fd = new_socket().map_err(|err| FabricError::Os { op: "socket", err })?;
    // SAFETY: sa is a valid sockaddr_un of length len.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_un).cast(),
            len,
        )
    };
    if r != 0 {
        return Err(FabricError::last_os("bind"));
    }
    // SAFETY: fd is a bound socket.
    if unsafe { libc::listen(fd.as_raw_fd(), 128) } != 0 {
        return Err(FabricError::last_os("listen"));
    }
    Ok(fd)
}

/// Accepts one pending connection, if any.
pub(crate) fn accept(listener: &OwnedFd) -> io::Result<Option<OwnedFd>> {
    // SAFETY: accept4 with null address pointers is allowed.
    let fd = unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(None),
            // The peer gave up between connect and accept; nothing to accept.
            _ if e.raw_os_error() == Some(libc::ECONNABORTED) => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: fd is a fresh descriptor owned by nobody else.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Connects to a listener. Unix sockets connect synchronously; a refused or missing
/// listener is an error right away.
pub(crate) fn connect(addr: &ShmAddr) -> Result<io::Result<OwnedFd>, FabricError> {
    let (sa, len) = sockaddr(addr)?;
    let fd = match new_socket() {
        Ok(fd) => fd,
        Err(e) => return Ok(Err(e)),
    };
    // SAFETY: sa is a valid sockaddr_un of length len.
    let r = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_un).cast(),
            len,
        )
    };
    if r != 0 {
        return Ok(Err(io::Error::last_os_error()));
    }
    Ok(Ok(fd))
}

/// A connected pair of sockets.
pub(crate) fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds: [RawFd; 2] = [-1; 2];
    // SAFETY: fds has room for the two descriptors socketpair writes.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors are fresh and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Control-message buffer, aligned for `cmsghdr`.
#[repr(C, align(8))]
struct CmsgBuf([u8; 64]);

/// Sends one message carrying `fds`. Never raises SIGPIPE.
pub(crate) fn send(sock: &OwnedFd, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many descriptors",
        ));
    }
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    let mut cbuf = CmsgBuf([0; 64]);
    // SAFETY: msghdr is plain old data; all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let payload = mem::size_of_val(fds) as u32;
        // SAFETY: CMSG_SPACE is a pure size computation.
        let space = unsafe { libc::CMSG_SPACE(payload) } as usize;
        debug_assert!(space <= cbuf.0.len());
        msg.msg_control = cbuf.0.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: msg_control points at `space` writable, aligned bytes, enough for one
        // header and `fds.len()` descriptors (MAX_FDS * 4 + header < 64).
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(payload) as _;
            let data = libc::CMSG_DATA(c).cast::<RawFd>();
            for (i, fd) in fds.iter().enumerate() {
                data.add(i).write_unaligned(fd.as_raw_fd());
            }
        }
    }
    loop {
        // SAFETY: msg points at live buffers for the duration of the call.
        let r = unsafe {
            libc::sendmsg(
                sock.as_raw_fd(),
                &msg,
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        if r >= 0 {
            return if r as usize == bytes.len() {
                Ok(())
            } else {
                Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "short seqpacket send",
                ))
            };
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Descriptors received with one message.
#[derive(Debug, Default)]
pub(crate) struct Fds {
    fds: [Option<OwnedFd>; MAX_FDS],
    n: usize,
}

impl Fds {
    /// How many arrived.
    pub(crate) fn len(&self) -> usize {
        self.n
    }

    /// Takes descriptor `i`.
    pub(crate) fn take(&mut self, i: usize) -> Option<OwnedFd> {
        self.fds.get_mut(i).and_then(Option::take)
    }
}

/// Result of a non-blocking receive.
#[derive(Debug)]
pub(crate) enum Recv {
    /// A message of this many bytes, with these descriptors.
    Msg(usize, Fds),
    /// Nothing pending.
    WouldBlock,
    /// The peer closed the connection.
    Eof,
}

/// Receives one message into `buf`. Descriptors beyond [`MAX_FDS`] are closed; a message
/// longer than `buf` or with truncated control data is an error.
pub(crate) fn recv(sock: &OwnedFd, buf: &mut [u8]) -> io::Result<Recv> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut cbuf = CmsgBuf([0; 64]);
    // SAFETY: msghdr is plain old data; all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cbuf.0.as_mut_ptr().cast();
    msg.msg_controllen = cbuf.0.len() as _;
    let r = loop {
        // SAFETY: msg points at live, writable buffers for the duration of the call.
        let r = unsafe {
            libc::recvmsg(
                sock.as_raw_fd(),
                &mut msg,
                libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
            )
        };
        if r >= 0 {
            break r as usize;
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => return Ok(Recv::WouldBlock),
            _ if e.raw_os_error() == Some(libc::ECONNRESET) => return Ok(Recv::Eof),
            _ => return Err(e),
        }
    };
    let mut fds = Fds::default();
    // SAFETY: the kernel filled msg_control with msg_controllen bytes of well-formed
    // control messages; CMSG_FIRSTHDR/NXTHDR stay within that length.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data_len = ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                for i in 0..data_len / mem::size_of::<RawFd>() {
                    let owned = OwnedFd::from_raw_fd(data.add(i).read_unaligned());
                    if fds.n < MAX_FDS {
                        fds.fds[fds.n] = Some(owned);
                        fds.n += 1;
                    }
                    // Extra descriptors are closed by dropping `owned`.
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "truncated seqpacket message",
        ));
    }
    if r == 0 && fds.n == 0 {
        return Ok(Recv::Eof);
    }
    Ok(Recv::Msg(r, fds))
}

/// Removes a listener's socket file.
pub(crate) fn unlink(addr: &ShmAddr) {
    if let ShmAddr::Path(p) = addr {
        // The file may already be gone; nothing useful to do about a failure here.
        let _ = std::fs::remove_file(p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// A listener's socket file appears listening (bound at a temporary name, then
    /// linked), leaves nothing else behind, and a second listener on the same path is
    /// refused as `bind` refuses it.
    #[test]
    fn a_socket_file_appears_listening_and_only_once() {
        let dir = std::env::temp_dir().join(format!("rpcrdma-sock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let addr = ShmAddr::Path(dir.join("l.sock"));
        let names = || {
            let mut v: Vec<_> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            v.sort();
            v
        };
        let l = listen(&addr).unwrap();
        let c = connect(&addr).unwrap().unwrap();
        assert!(accept(&l).unwrap().is_some(), "connected at once");
        assert_eq!(names(), vec![std::ffi::OsString::from("l.sock")]);
        match listen(&addr) {
            Err(FabricError::Os { op: "bind", err }) => {
                assert_eq!(err.raw_os_error(), Some(libc::EADDRINUSE));
            }
            other => panic!("expected address in use, got {other:?}"),
        }
        assert_eq!(names(), vec![std::ffi::OsString::from("l.sock")]);
        drop((c, l));
        unlink(&addr);
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn pair_passes_bytes_and_descriptors() {
        let (a, b) = pair().unwrap();
        let (x, _y) = pair().unwrap();
        send(&a, b"hello", &[x.as_fd()]).unwrap();
        let mut buf = [0u8; 16];
        match recv(&b, &mut buf).unwrap() {
            Recv::Msg(n, mut fds) => {
                assert_eq!(&buf[..n], b"hello");
                assert_eq!(fds.len(), 1);
                assert!(fds.take(0).is_some());
                assert!(fds.take(0).is_none());
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(recv(&b, &mut buf).unwrap(), Recv::WouldBlock));
        drop(a);
        assert!(matches!(recv(&b, &mut buf).unwrap(), Recv::Eof));
    }

    #[test]
    fn oversized_message_is_an_error() {
        let (a, b) = pair().unwrap();
        send(&a, &[7u8; 32], &[]).unwrap();
        let mut buf = [0u8; 8];
        assert!(recv(&b, &mut buf).is_err());
    }

    #[test]
    fn bad_names_are_refused() {
        assert!(matches!(
            sockaddr(&ShmAddr::abstract_name("")),
            Err(FabricError::BadAddress(_))
        ));
        assert!(matches!(
            sockaddr(&ShmAddr::abstract_name("x".repeat(200))),
            Err(FabricError::BadAddress(_))
        ));
        assert!(sockaddr(&ShmAddr::abstract_name("ok")).is_ok());
    }
}
