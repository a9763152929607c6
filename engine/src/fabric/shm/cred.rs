//! Who may connect: the listener asks the kernel for each accepted socket's peer
//! credentials (`SO_PEERCRED`, fixed at `connect` time, so the peer cannot lie about
//! them) and refuses users the device's [`PeerCheck`] does not allow.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

/// Which local users may connect to a shm listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PeerCheck {
    /// Only processes running as the listener's own (effective) user id.
    #[default]
    SameUid,
    /// The listener's own user id and this one (e.g. a service user talking to a
    /// server run by another account).
    Uid(u32),
    /// Any local process. Everything it announces is still checked (seals, lengths,
    /// keys), but it can occupy connection slots.
    AnyUid,
}

impl PeerCheck {
    /// True when a peer running as `peer` may connect to a listener running as `own`.
    pub fn allows(self, own: u32, peer: u32) -> bool {
        match self {
            PeerCheck::SameUid => peer == own,
            PeerCheck::Uid(u) => peer == own || peer == u,
            PeerCheck::AnyUid => true,
        }
    }
}

/// The user id of the process at the other end of the connected Unix socket `s`.
pub(crate) fn peer_uid(s: &OwnedFd) -> io::Result<u32> {
    peer_cred(s).map(|(_, uid)| uid)
}

/// The process and user ids at the other end of the connected Unix socket `s`
/// (`SO_PEERCRED`: the peer's at `connect` or `listen` time).
pub(crate) fn peer_cred(s: &OwnedFd) -> io::Result<(u32, u32)> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: cred and len are valid for writes of a ucred and its size.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    if len as usize != std::mem::size_of::<libc::ucred>() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "short SO_PEERCRED answer",
        ));
    }
    Ok((cred.pid as u32, cred.uid))
}

/// This process's effective user id.
pub(crate) fn own_uid() -> u32 {
    // SAFETY: geteuid cannot fail and has no inputs.
    unsafe { libc::geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_allow_what_they_say() {
        assert!(PeerCheck::SameUid.allows(1000, 1000));
        assert!(!PeerCheck::SameUid.allows(1000, 0));
        assert!(PeerCheck::Uid(5).allows(1000, 5));
        assert!(PeerCheck::Uid(5).allows(1000, 1000));
        assert!(!PeerCheck::Uid(5).allows(1000, 6));
        assert!(PeerCheck::AnyUid.allows(1000, 6));
    }

    #[test]
    fn a_socket_pair_sees_our_own_uid() {
        let (a, _b) = super::super::sock::pair().unwrap();
        assert_eq!(peer_uid(&a).unwrap(), own_uid());
    }
}
