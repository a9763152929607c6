//! The device's STag table: the shared software key table
//! ([`crate::fabric::keytable`]) with nothing beside each key (siw places straight into
//! registered memory, which lives in arenas the device keeps mapped for its whole life,
//! so an address that passes a check stays mapped), and the mapping of its faults to
//! RDMAP Remote Protection codes.
//!
//! Inbound RDMA Writes, Read Requests and Read Responses, and every local scatter-gather
//! entry, are checked here before a byte moves, on the poller thread; registrations and
//! deregistrations may happen on any thread.

use crate::fabric::keytable::{self, KeyFault};
use crate::fabric::mr::Access;
use crate::fabric::FabricError;
use crate::fabric::Sge;
use crate::iwarp::terminate::RdmapProtectionError;

/// Why a key check failed.
pub(crate) type Fault = KeyFault;

impl KeyFault {
    /// The RDMAP Remote Protection code a peer is told for this fault (RFC 5040 §7.2).
    pub(crate) const fn protection_code(self) -> RdmapProtectionError {
        match self {
            KeyFault::UnknownKey | KeyFault::Invalid => RdmapProtectionError::InvalidStag,
            KeyFault::WrongPd => RdmapProtectionError::StagNotAssociated,
            KeyFault::Access => RdmapProtectionError::AccessRights,
            KeyFault::Bounds | KeyFault::BadRegion => RdmapProtectionError::BaseOrBounds,
            KeyFault::NotFast | KeyFault::StaleKey | KeyFault::TooLong | KeyFault::BadAccess => {
                RdmapProtectionError::CannotInvalidate
            }
        }
    }
}

/// The device's key table.
pub(crate) struct KeyTable(keytable::KeyTable);

impl KeyTable {
    #[cfg(test)]
    pub(crate) fn new(cap: u32) -> KeyTable {
        KeyTable(keytable::KeyTable::new(cap))
    }

    /// A table whose keys come from `seed` (`None`: a secret from the OS).
    pub(crate) fn with_seed(cap: u32, seed: Option<u64>) -> KeyTable {
        KeyTable(keytable::KeyTable::build(cap, 0, seed))
    }

    pub(crate) fn capacity(&self) -> usize {
        self.0.capacity()
    }

    /// Slots in use (registrations and fast-registration slots).
    pub(crate) fn in_use(&self) -> usize {
        self.0.in_use()
    }

    /// Registers `[start, start + len)` for protection domain `pd`; returns slot and key.
    pub(crate) fn register(
        &self,
        pd: u32,
        access: Access,
        start: u64,
        len: u64,
    ) -> Result<(u32, u32), FabricError> {
        self.0.register(pd, access, start, len, ())
    }

    /// Allocates a fast-registration slot covering up to `max_len` bytes, initially
    /// invalid; returns slot and key.
    pub(crate) fn alloc_fast(&self, pd: u32, max_len: u64) -> Result<(u32, u32), FabricError> {
        self.0.alloc_fast(pd, max_len)
    }

    /// Deregisters slot `idx`: every key it issued dies and the slot is reusable.
    pub(crate) fn release(&self, idx: u32) {
        self.0.release(idx)
    }

    /// Checks that `key` grants `need` on `[addr, addr + len)` in protection domain
    /// `pd`. Zero-length ranges still need a valid key in the right domain.
    #[inline]
    pub(crate) fn check(
        &self,
        key: u32,
        pd: u32,
        need: Access,
        addr: u64,
        len: u64,
    ) -> Result<(), Fault> {
        self.0.check(key, pd, need, addr, len).map(|_| ())
    }

    /// Executes a FastReg work request: the slot of `key` (protection domain `pd`) now
    /// covers `region` with `access` under `key`. A valid local key of `pd` must cover
    /// `region`; the fast slot's own faults are reported before the region's
    /// ([`KeyFault::BadRegion`]). There is deliberately no unchecked variant: a work
    /// request must never map memory its queue pair could not already reach.
    pub(crate) fn fast_reg_over(
        &self,
        key: u32,
        pd: u32,
        access: Access,
        region: &Sge,
    ) -> Result<(), Fault> {
        let r = (region.lkey, region.addr, u64::from(region.length));
        self.0.fast_reg_over(key, pd, access, r, |_| ()).map(|_| ())
    }

    /// Whether `key` could be invalidated now by protection domain `pd`.
    pub(crate) fn can_invalidate(&self, key: u32, pd: u32) -> Result<(), Fault> {
        self.0.can_invalidate(key, pd)
    }

    /// Invalidates fast-registration key `key` of protection domain `pd` (local
    /// invalidation, or a peer's Send with Invalidate).
    pub(crate) fn invalidate(&self, key: u32, pd: u32) -> Result<(), Fault> {
        self.0.invalidate(key, pd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::mr::{make_key, next_key};

    #[test]
    fn every_fault_names_the_rdmap_protection_code_a_peer_is_told() {
        let t = KeyTable::new(4);
        let (_, key) = t
            .register(1, Access::LOCAL_WRITE | Access::REMOTE_READ, 0x1000, 50)
            .unwrap();
        let (_, fast) = t.alloc_fast(1, 64).unwrap();
        let code = |r: Result<(), Fault>| r.map_err(Fault::protection_code);
        use RdmapProtectionError as P;
        let cases = [
            (
                t.check(key, 1, Access::REMOTE_READ, 0x1000, 51),
                P::BaseOrBounds,
            ),
            (
                t.check(key, 2, Access::REMOTE_READ, 0x1000, 1),
                P::StagNotAssociated,
            ),
            (
                t.check(key, 1, Access::REMOTE_WRITE, 0x1000, 1),
                P::AccessRights,
            ),
            (
                t.check(next_key(key), 1, Access::NONE, 0x1000, 1),
                P::InvalidStag,
            ),
            (
                t.check(make_key(99, 0), 1, Access::NONE, 0, 0),
                P::InvalidStag,
            ),
            (t.check(fast, 1, Access::NONE, 0, 0), P::InvalidStag),
            (t.invalidate(key, 1), P::CannotInvalidate),
            (t.can_invalidate(key, 1), P::CannotInvalidate),
            (
                t.fast_reg_over(fast, 1, Access::ALL, &Sge::new(0x1000, 8, key)),
                P::CannotInvalidate,
            ),
            // The stale key is the fault reported, not the uncovered region.
            (
                t.fast_reg_over(fast, 1, Access::ALL, &Sge::new(0x1000, 51, key)),
                P::CannotInvalidate,
            ),
            // A region its local key does not cover, or a foreign domain's key.
            (
                t.fast_reg_over(next_key(fast), 1, Access::ALL, &Sge::new(0x1000, 51, key)),
                P::BaseOrBounds,
            ),
            (
                t.fast_reg_over(next_key(fast), 1, Access::ALL, &Sge::new(0xfff, 8, key)),
                P::BaseOrBounds,
            ),
            (
                t.fast_reg_over(next_key(fast), 1, Access::ALL, &Sge::new(0x1000, 8, fast)),
                P::BaseOrBounds,
            ),
        ];
        for (got, want) in cases {
            assert_eq!(code(got), Err(want));
        }
        let k1 = next_key(fast);
        assert_eq!(
            code(t.check(k1, 1, Access::NONE, 0x1000, 8)),
            Err(P::InvalidStag),
            "refused registrations left the slot invalid"
        );
        t.fast_reg_over(k1, 1, Access::ALL, &Sge::new(0x1000, 8, key))
            .unwrap();
        assert_eq!(t.check(k1, 1, Access::REMOTE_WRITE, 0x1000, 8), Ok(()));
        assert_eq!(t.can_invalidate(k1, 1), Ok(()));
        t.invalidate(k1, 1).unwrap();
        assert_eq!(code(t.invalidate(next_key(k1), 1)), Err(P::InvalidStag));
        assert_eq!(t.invalidate(k1, 1), Ok(()), "already invalid stays invalid");
    }
}
