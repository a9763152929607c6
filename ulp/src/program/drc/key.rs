//! [`DrcKey`]: what makes two calls "the same call" to the duplicate request cache, and
//! [`ClientAddr`], who sent it.

use std::net::IpAddr;

use crate::ddp::ReadItem;
use crate::rpc::{CallHeader, OpaqueAuth};

/// Who sent a call, as far as the transport can tell.
///
/// Part of the [`DrcKey`]: XIDs are chosen by each client, so two clients may use the
/// same one. Set it per connection with
/// [`Dispatcher::set_client`](crate::program::Dispatcher::set_client).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ClientAddr {
    /// The transport does not say (the sim provider). Calls are then told apart by XID,
    /// credential and arguments alone (see [`DrcKey`]).
    #[default]
    Unknown,
    /// The peer's IP address. The port is left out on purpose: a client that
    /// reconnects, which is when RPC-over-RDMA and TCP clients retransmit, usually
    /// comes from a new port, and keying on it would miss exactly the retransmissions
    /// the cache exists for.
    Ip(IpAddr),
    /// Any other stable identity an embedder has for the peer.
    Id(u64),
}

/// What the engine's provider knows of the peer (`Service::set_peer`): siw and verbs
/// give its IP address (the port left out, as above), shm the local process, as
/// `Id(uid << 32 | pid)` (a process that reconnects keeps both; two processes never
/// share them).
impl From<rpcrdma::fabric::PeerAddr> for ClientAddr {
    fn from(peer: rpcrdma::fabric::PeerAddr) -> Self {
        use rpcrdma::fabric::PeerAddr;
        match peer {
            PeerAddr::Unknown => ClientAddr::Unknown,
            PeerAddr::Ip(a) => ClientAddr::Ip(a.ip()),
            PeerAddr::Local { pid, uid } => ClientAddr::Id(u64::from(uid) << 32 | u64::from(pid)),
        }
    }
}

impl ClientAddr {
    /// A 64-bit digest for hashing.
    fn fold(&self) -> u64 {
        match *self {
            ClientAddr::Unknown => 0,
            ClientAddr::Ip(IpAddr::V4(a)) => 1 << 62 | u64::from(u32::from(a)),
            ClientAddr::Ip(IpAddr::V6(a)) => {
                let v = u128::from(a);
                2 << 62 ^ (v as u64) ^ ((v >> 64) as u64).rotate_left(17)
            }
            ClientAddr::Id(id) => 3 << 62 ^ id,
        }
    }
}

/// The key of a duplicate request cache entry: a retransmission of a call has the same
/// key as the original, and a different call almost never does.
///
/// As in Linux nfsd: the XID, program, version and procedure, the client's address, and
/// the arguments' length and a checksum, which catches a client reusing an XID for a
/// different call (after a restart, or when its XIDs wrap). The checksum covers:
///
/// - who is calling: the credential flavor and, for AUTH_SYS, the machine name, uid, gid
///   and groups, so that one user's cached reply is never replayed to another. The
///   AUTH_SYS stamp is left out (a client may re-encode the credential, with a new
///   stamp, when it retransmits), and so is the body of any other flavor (RPCSEC_GSS
///   puts a fresh sequence number in every transmission);
/// - the first [`CHECKSUM_PREFIX`](Self::CHECKSUM_PREFIX) octets of the inline arguments;
/// - each DDP-eligible argument's position, length and first
///   [`CHECKSUM_DDP_PREFIX`](Self::CHECKSUM_DDP_PREFIX) octets (WRITE data arrives that
///   way over RPC-over-RDMA).
///
/// The checksum is a fast 64-bit mix, not a cryptographic hash: it guards against
/// accidents, and a client that forges a key can only get the reply to a call it could
/// have made itself with the credentials it sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DrcKey {
    /// Transaction id.
    pub xid: u32,
    /// Program number.
    pub prog: u32,
    /// Program version.
    pub vers: u32,
    /// Procedure number.
    pub procedure: u32,
    /// The sender.
    pub client: ClientAddr,
    /// Octets of arguments, inline and DDP-eligible together (saturating).
    pub args_len: u32,
    /// Checksum of the caller's identity and a bounded prefix of the arguments.
    pub checksum: u64,
}

impl DrcKey {
    /// Octets of the inline arguments the checksum covers, as in Linux nfsd.
    pub const CHECKSUM_PREFIX: usize = 256;
    /// Octets of each DDP-eligible argument the checksum covers.
    pub const CHECKSUM_DDP_PREFIX: usize = 64;

    /// The key of a call from `client` whose header is `call`, with inline arguments
    /// `args` (the message after the call header) and DDP-eligible arguments `reads`.
    pub fn of_call(
        call: &CallHeader<'_>,
        client: ClientAddr,
        args: &[u8],
        reads: &[ReadItem<'_>],
    ) -> DrcKey {
        let mut sum = Mix::new();
        caller(&mut sum, &call.cred);
        sum.bytes(prefix(args, Self::CHECKSUM_PREFIX));
        let mut len = args.len() as u64;
        for r in reads {
            sum.word(u64::from(r.position) << 32 | r.data.len() as u64);
            sum.bytes(prefix(r.data, Self::CHECKSUM_DDP_PREFIX));
            len = len.saturating_add(r.data.len() as u64);
        }
        DrcKey {
            xid: call.xid,
            prog: call.prog,
            vers: call.vers,
            procedure: call.procedure,
            client,
            args_len: u32::try_from(len).unwrap_or(u32::MAX),
            checksum: sum.finish(),
        }
    }

    /// Whether `other` names the same transaction (everything but the arguments'
    /// length and checksum): a mismatch then means an XID reused for another call.
    pub(super) fn same_transaction(&self, other: &DrcKey) -> bool {
        self.xid == other.xid
            && self.prog == other.prog
            && self.vers == other.vers
            && self.procedure == other.procedure
            && self.client == other.client
    }

    /// Hash of the transaction fields only, so that every entry with one XID lands in
    /// one bucket and a checksum mismatch can be seen (and counted) there.
    pub(super) fn transaction_hash(&self) -> u64 {
        let mut m = Mix::new();
        m.word(u64::from(self.xid) << 32 | u64::from(self.procedure));
        m.word(u64::from(self.prog) << 32 | u64::from(self.vers));
        m.word(self.client.fold());
        m.finish()
    }
}

fn prefix(b: &[u8], n: usize) -> &[u8] {
    &b[..b.len().min(n)]
}

/// Mixes in the parts of a credential that name the caller.
fn caller(sum: &mut Mix, cred: &OpaqueAuth<'_>) {
    sum.word(u64::from(cred.flavor().0));
    if let OpaqueAuth::Sys(s) = cred {
        sum.word(u64::from(s.uid) << 32 | u64::from(s.gid));
        sum.bytes(s.machinename);
        let gids = s.gids.as_slice();
        sum.word(gids.len() as u64);
        for &g in gids {
            sum.word(u64::from(g));
        }
    }
}

/// A small multiply-rotate hash over 64-bit words (not cryptographic, see [`DrcKey`]).
struct Mix(u64);

impl Mix {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;

    fn new() -> Mix {
        Mix(0x243f_6a88_85a3_08d3)
    }

    fn word(&mut self, w: u64) {
        self.0 = (self.0 ^ w).wrapping_mul(Self::K).rotate_left(29);
    }

    /// Mixes the length first, so that zero padding of the last word cannot make two
    /// different byte strings collide.
    fn bytes(&mut self, b: &[u8]) {
        self.word(b.len() as u64);
        let mut words = b.chunks_exact(8);
        for w in &mut words {
            let mut a = [0u8; 8];
            a.copy_from_slice(w);
            self.word(u64::from_le_bytes(a));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut a = [0u8; 8];
            a[..rest.len()].copy_from_slice(rest);
            self.word(u64::from_le_bytes(a));
        }
    }

    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::{AuthSys, Gids};

    fn call(cred: OpaqueAuth<'_>) -> CallHeader<'_> {
        CallHeader {
            xid: 7,
            prog: 100_003,
            vers: 3,
            procedure: 12,
            cred,
            verf: OpaqueAuth::None,
        }
    }

    fn sys(stamp: u32, uid: u32, name: &[u8]) -> OpaqueAuth<'_> {
        OpaqueAuth::Sys(AuthSys {
            stamp,
            machinename: name,
            uid,
            gid: 100,
            gids: Gids::new(&[1, 2, 3]).unwrap(),
        })
    }

    #[test]
    fn retransmissions_match_and_other_calls_do_not() {
        let key = |cred, args: &[u8]| DrcKey::of_call(&call(cred), ClientAddr::Unknown, args, &[]);
        let a = key(sys(1, 500, b"host"), b"remove this");
        // A re-encoded credential (new stamp) is the same caller.
        assert_eq!(a, key(sys(99, 500, b"host"), b"remove this"));
        assert_ne!(
            a.checksum,
            key(sys(1, 501, b"host"), b"remove this").checksum
        );
        assert_ne!(
            a.checksum,
            key(sys(1, 500, b"hast"), b"remove this").checksum
        );
        assert_ne!(a.checksum, key(OpaqueAuth::None, b"remove this").checksum);
        assert_ne!(
            a.checksum,
            key(sys(1, 500, b"host"), b"remove that").checksum
        );
        // Zero padding of the last word does not hide a length difference.
        let b = key(OpaqueAuth::None, b"abc");
        let c = key(OpaqueAuth::None, b"abc\0");
        assert_ne!(b.checksum, c.checksum);
        assert!(b.same_transaction(&c));
        assert_eq!(b.transaction_hash(), c.transaction_hash());
    }

    #[test]
    fn only_a_prefix_of_the_arguments_is_summed_but_all_of_the_length_counts() {
        let mut long = vec![5u8; 1000];
        let a = DrcKey::of_call(&call(OpaqueAuth::None), ClientAddr::Unknown, &long, &[]);
        long[999] = 6;
        let b = DrcKey::of_call(&call(OpaqueAuth::None), ClientAddr::Unknown, &long, &[]);
        assert_eq!(a, b);
        let c = DrcKey::of_call(
            &call(OpaqueAuth::None),
            ClientAddr::Unknown,
            &long[..999],
            &[],
        );
        assert_eq!(c.args_len, 999);
        assert_ne!(a, c);
    }

    #[test]
    fn ddp_arguments_count() {
        let h = call(OpaqueAuth::None);
        let read = |data| ReadItem { position: 40, data };
        let a = DrcKey::of_call(&h, ClientAddr::Unknown, b"args", &[read(&b"data one"[..])]);
        let b = DrcKey::of_call(&h, ClientAddr::Unknown, b"args", &[read(&b"data two"[..])]);
        assert_eq!(a.args_len, 12);
        assert_ne!(a.checksum, b.checksum);
    }

    #[test]
    fn clients_are_part_of_the_transaction() {
        let h = call(OpaqueAuth::None);
        let one = ClientAddr::Ip(IpAddr::from([10, 0, 0, 1]));
        let two = ClientAddr::Ip(IpAddr::from([10, 0, 0, 2]));
        let a = DrcKey::of_call(&h, one, b"x", &[]);
        let b = DrcKey::of_call(&h, two, b"x", &[]);
        assert!(!a.same_transaction(&b));
        assert_ne!(a.transaction_hash(), b.transaction_hash());
        assert_ne!(ClientAddr::Id(1).fold(), ClientAddr::Unknown.fold());
    }
}
