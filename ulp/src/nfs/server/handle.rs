//! NFS file handles: a [`FileKey`] and the file system id, sealed with a keyed hash so
//! that a client cannot forge a handle to a file it was never given.
//!
//! Layout (37 octets, well under NFS3_FHSIZE):
//!
//! | octets | content                                      |
//! |--------|----------------------------------------------|
//! | 0      | format version ([`HANDLE_VERSION`])          |
//! | 1-8    | fsid, big-endian                             |
//! | 9-16   | file id, big-endian                          |
//! | 17-20  | generation, big-endian                       |
//! | 21-36  | tag: 128-bit keyed hash of octets 0-20       |
//!
//! The tag is two SipHash values (std's `RandomState`, whose keys come from the
//! operating system's random source) over the first 21 octets, under two independent
//! per-server keys. SipHash is a pseudo-random function designed for exactly this use
//! (authenticating short inputs under a secret key); with 128 bits a client guessing
//! tags has no practical chance. The keys live only in memory, so handles do not survive
//! a server restart: clients then get NFS3ERR_BADHANDLE and remount, which is the
//! honest answer for a server that cannot vouch for its old handles.

use std::hash::{BuildHasher, Hasher, RandomState};

use super::super::v3::types::Nfsstat3;
use super::backend::FileKey;

/// The format version octet.
pub const HANDLE_VERSION: u8 = 1;
/// Length of every handle this server makes.
pub const HANDLE_LEN: usize = 37;
const BODY: usize = 21;

/// An encoded handle, owned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Handle(pub [u8; HANDLE_LEN]);

impl Handle {
    /// The handle's octets.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// The per-server secret that seals and checks handles.
#[derive(Clone)]
pub struct HandleKey {
    fsid: u64,
    k: [RandomState; 2],
}

impl core::fmt::Debug for HandleKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Never print the keys.
        f.debug_struct("HandleKey")
            .field("fsid", &self.fsid)
            .finish()
    }
}

impl HandleKey {
    /// A fresh random key for handles of file system `fsid`.
    pub fn new(fsid: u64) -> HandleKey {
        HandleKey {
            fsid,
            k: [RandomState::new(), RandomState::new()],
        }
    }

    fn tag(&self, body: &[u8]) -> [u8; 16] {
        let mut t = [0u8; 16];
        for (i, k) in self.k.iter().enumerate() {
            let mut h = k.build_hasher();
            h.write(body);
            t[i * 8..i * 8 + 8].copy_from_slice(&h.finish().to_be_bytes());
        }
        t
    }

    /// Seals `key` into a handle.
    pub fn seal(&self, key: FileKey) -> Handle {
        let mut b = [0u8; HANDLE_LEN];
        b[0] = HANDLE_VERSION;
        b[1..9].copy_from_slice(&self.fsid.to_be_bytes());
        b[9..17].copy_from_slice(&key.id.to_be_bytes());
        b[17..21].copy_from_slice(&key.gen.to_be_bytes());
        let t = self.tag(&b[..BODY]);
        b[BODY..].copy_from_slice(&t);
        Handle(b)
    }

    /// Opens a handle a client sent. Anything this server did not make (wrong length,
    /// version or file system, or a tag that does not verify) is NFS3ERR_BADHANDLE.
    pub fn open(&self, fh: &[u8]) -> Result<FileKey, Nfsstat3> {
        if fh.len() != HANDLE_LEN || fh[0] != HANDLE_VERSION {
            return Err(Nfsstat3::BADHANDLE);
        }
        let t = self.tag(&fh[..BODY]);
        // Compare without an early exit, so timing does not reveal a matching prefix.
        let diff = t
            .iter()
            .zip(&fh[BODY..])
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        let word = |r: core::ops::Range<usize>| {
            let mut w = [0u8; 8];
            w[8 - r.len()..].copy_from_slice(&fh[r]);
            u64::from_be_bytes(w)
        };
        if diff != 0 || word(1..9) != self.fsid {
            return Err(Nfsstat3::BADHANDLE);
        }
        Ok(FileKey {
            id: word(9..17),
            gen: word(17..21) as u32,
        })
    }
}
