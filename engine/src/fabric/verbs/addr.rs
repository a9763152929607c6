//! Connection-manager addresses.

use std::net::SocketAddr;

/// Where a verbs listener listens and connects go: an IP address owned by an RDMA device
/// (the device's netdev address for RoCE and iWARP) and a port in RDMA-CM's TCP port
/// space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VerbsAddr(pub SocketAddr);

/// The IP endpoint a C socket address names, if it is one.
///
/// # Safety
/// `sa` must point into storage as long as its family's structure (a `sockaddr_in` or
/// `sockaddr_in6`), as the RDMA CM's address unions are.
pub(crate) unsafe fn from_sockaddr(sa: &libc::sockaddr) -> Option<SocketAddr> {
    match i32::from(sa.sa_family) {
        libc::AF_INET => {
            // SAFETY: per the contract, for AF_INET.
            let sin = unsafe { &*(sa as *const libc::sockaddr).cast::<libc::sockaddr_in>() };
            let ip = std::net::Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::new(ip.into(), u16::from_be(sin.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: per the contract, for AF_INET6.
            let sin6 = unsafe { &*(sa as *const libc::sockaddr).cast::<libc::sockaddr_in6>() };
            let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(std::net::SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

impl VerbsAddr {
    /// The address as a C socket address and its length.
    pub(crate) fn to_sockaddr(self) -> libc::sockaddr_storage {
        // SAFETY: all-zero is a valid sockaddr_storage.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        match self.0 {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
                unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
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
                // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
                unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            }
        }
        ss
    }
}

impl std::fmt::Display for VerbsAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_and_ipv6_become_socket_addresses() {
        let v4 = VerbsAddr("10.0.2.15:20049".parse().expect("v4"));
        let ss = v4.to_sockaddr();
        // SAFETY: to_sockaddr wrote a sockaddr_in for a V4 address.
        let sin: libc::sockaddr_in =
            unsafe { std::ptr::read((&ss as *const libc::sockaddr_storage).cast()) };
        assert_eq!(i32::from(sin.sin_family), libc::AF_INET);
        assert_eq!(u16::from_be(sin.sin_port), 20049);
        assert_eq!(sin.sin_addr.s_addr.to_ne_bytes(), [10, 0, 2, 15]);

        let v6 = VerbsAddr("[fe80::1%2]:7".parse().expect("v6"));
        let ss = v6.to_sockaddr();
        // SAFETY: to_sockaddr wrote a sockaddr_in6 for a V6 address.
        let sin6: libc::sockaddr_in6 =
            unsafe { std::ptr::read((&ss as *const libc::sockaddr_storage).cast()) };
        assert_eq!(i32::from(sin6.sin6_family), libc::AF_INET6);
        assert_eq!(u16::from_be(sin6.sin6_port), 7);
        assert_eq!(sin6.sin6_scope_id, 2);
        assert_eq!(sin6.sin6_addr.s6_addr[0], 0xfe);
    }
}
