//! Protection domains and memory registration.
//!
//! Pools and arenas are registered once with `ibv_reg_mr`. Per-RPC registration
//! ("fast registration") uses type-2 memory windows: `alloc_fast_mr` allocates a window,
//! and a `FastReg` work request binds it over part of an existing registration with the
//! key the caller chose by [`MemoryRegion::rekey`] (same index, next low byte, as
//! `ibv_inc_rkey`); Send With Invalidate or `LocalInvalidate` unbinds it. That is the
//! userspace equivalent of the kernel's `IB_WR_REG_MR`: no system call, ordered on the
//! send queue. See the module documentation for devices without memory windows.

use std::ffi::c_void;
use std::sync::Arc;

use rdma_sys::{
    ibv_access_flags, ibv_alloc_mw, ibv_alloc_pd, ibv_dealloc_mw, ibv_dealloc_pd, ibv_dereg_mr,
    ibv_mr, ibv_mw, ibv_mw_type, ibv_pd, ibv_reg_mr,
};
use rpcrdma_pools::Arena;

use crate::fabric::mr::{key_index, next_key, retag_key};
use crate::fabric::{Access, FabricError};
use crate::fabric::{MemoryRegion, ProtectionDomain};

use super::device::DeviceShared;
use super::keytable::KeyTable;
use super::VerbsProvider;

/// Registrations (by local key) and windows (by key index) one table grows to hold
/// (it starts at 16 slots and doubles on demand: `keytable.rs`).
const TABLE_SLOTS: usize = 8192;

/// A protection domain and the keys registered in it.
pub(crate) struct PdShared {
    pub(crate) dev: Arc<DeviceShared>,
    pub(crate) pd: *mut ibv_pd,
    /// Memory registrations by local key; the extra word is unused.
    pub(crate) mrs: KeyTable,
    /// Memory windows by key index; the extra word is the slot's maximum length.
    pub(crate) mws: KeyTable,
}

// SAFETY: a verbs PD may be used from any thread; the tables are thread-safe.
unsafe impl Send for PdShared {}
// SAFETY: as above.
unsafe impl Sync for PdShared {}

impl Drop for PdShared {
    fn drop(&mut self) {
        // SAFETY: every MR, MW and QP of the PD holds an Arc to this, so none is left;
        // deallocated once.
        unsafe { ibv_dealloc_pd(self.pd) };
    }
}

/// A protection domain.
pub struct VerbsPd {
    pub(crate) shared: Arc<PdShared>,
}

impl std::fmt::Debug for VerbsPd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsPd").finish_non_exhaustive()
    }
}

impl VerbsPd {
    pub(crate) fn new(dev: &Arc<DeviceShared>) -> Result<VerbsPd, FabricError> {
        // SAFETY: the context is live while `dev` is.
        let pd = unsafe { ibv_alloc_pd(dev.ctx) };
        if pd.is_null() {
            return Err(FabricError::last_os("ibv_alloc_pd"));
        }
        Ok(VerbsPd {
            shared: Arc::new(PdShared {
                dev: dev.clone(),
                pd,
                mrs: KeyTable::new(TABLE_SLOTS),
                mws: KeyTable::new(TABLE_SLOTS),
            }),
        })
    }
}

/// Verbs access bits for a registration.
pub(crate) fn mr_access(access: Access, mw_bind: bool) -> u32 {
    let mut f = 0;
    if access.contains(Access::LOCAL_WRITE) {
        f |= ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
    }
    if access.contains(Access::REMOTE_WRITE) {
        f |= ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
    }
    if access.contains(Access::REMOTE_READ) {
        f |= ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
    }
    if mw_bind {
        f |= ibv_access_flags::IBV_ACCESS_MW_BIND.0;
    }
    f
}

/// Verbs access bits a window grants (windows carry remote rights only).
pub(crate) fn mw_access(access: Access) -> u32 {
    let mut f = 0;
    if access.contains(Access::REMOTE_WRITE) {
        f |= ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
    }
    if access.contains(Access::REMOTE_READ) {
        f |= ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
    }
    f
}

/// CAP_IPC_LOCK's bit in the capability sets (linux/capability.h).
const CAP_IPC_LOCK: u32 = 14;

/// The soft locked-memory limit in bytes when it binds this process: `None` when it is
/// unlimited, unknown, or the process holds CAP_IPC_LOCK (which lifts it).
fn memlock_limit() -> Option<u64> {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: rl is a valid rlimit to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) } != 0
        || rl.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    // Only reached when a registration already failed, so reading a file is fine here.
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let eff = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    let eff = u64::from_str_radix(eff.trim(), 16).ok()?;
    (eff & (1 << CAP_IPC_LOCK) == 0).then_some(rl.rlim_cur)
}

/// The error for an `ibv_reg_mr` of `len` bytes that failed with `err`, given the
/// binding locked-memory limit: the kernel reports pinning past RLIMIT_MEMLOCK as
/// ENOMEM, which would otherwise read as the machine being out of memory.
pub(crate) fn reg_mr_error(err: std::io::Error, len: usize, memlock: Option<u64>) -> FabricError {
    match (err.raw_os_error(), memlock) {
        (Some(libc::ENOMEM), Some(limit)) => FabricError::LockedMemoryLimit { len, limit },
        _ => FabricError::Os {
            op: "ibv_reg_mr",
            err,
        },
    }
}

enum Kind {
    Region {
        mr: *mut ibv_mr,
        _arena: Arc<Arena>,
    },
    Window {
        mw: *mut ibv_mw,
        key: u32,
        max_len: usize,
    },
}

/// A memory registration (`ibv_mr`) or a fast-registration slot (a type-2 `ibv_mw`).
pub struct VerbsMr {
    kind: Kind,
    pd: Arc<PdShared>,
}

// SAFETY: verbs MRs and MWs may be used and freed from any thread; the handle is the
// only owner of its object.
unsafe impl Send for VerbsMr {}

impl std::fmt::Debug for VerbsMr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsMr")
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .field("addr", &self.addr())
            .field("len", &self.len())
            .finish()
    }
}

impl Drop for VerbsMr {
    fn drop(&mut self) {
        match self.kind {
            Kind::Region { mr, .. } => {
                // SAFETY: mr is live until dereg below.
                let lkey = unsafe { (*mr).lkey };
                self.pd.mrs.remove(lkey);
                // SAFETY: no poster can still use the pointer (remove waited), and it is
                // deregistered once.
                unsafe { ibv_dereg_mr(mr) };
            }
            Kind::Window { mw, key, .. } => {
                self.pd.mws.remove(key_index(key));
                // SAFETY: as above, for the window.
                unsafe { ibv_dealloc_mw(mw) };
            }
        }
    }
}

impl MemoryRegion for VerbsMr {
    fn lkey(&self) -> u32 {
        match self.kind {
            // SAFETY: the MR is live while the handle is.
            Kind::Region { mr, .. } => unsafe { (*mr).lkey },
            Kind::Window { key, .. } => key,
        }
    }

    fn rkey(&self) -> u32 {
        match self.kind {
            // SAFETY: the MR is live while the handle is.
            Kind::Region { mr, .. } => unsafe { (*mr).rkey },
            Kind::Window { key, .. } => key,
        }
    }

    fn addr(&self) -> u64 {
        match self.kind {
            // SAFETY: the MR is live while the handle is.
            Kind::Region { mr, .. } => unsafe { (*mr).addr as u64 },
            Kind::Window { .. } => 0,
        }
    }

    fn len(&self) -> usize {
        match self.kind {
            // SAFETY: the MR is live while the handle is.
            Kind::Region { mr, .. } => unsafe { (*mr).length },
            Kind::Window { max_len, .. } => max_len,
        }
    }

    fn rekey(&mut self) -> u32 {
        match &mut self.kind {
            Kind::Region { mr, .. } => {
                // SAFETY: the MR is live while the handle is.
                unsafe { (**mr).rkey }
            }
            Kind::Window { key, .. } => {
                *key = next_key(*key);
                *key
            }
        }
    }

    fn rekey_with(&mut self, tag: u8) -> u32 {
        match &mut self.kind {
            Kind::Region { mr, .. } => {
                // SAFETY: the MR is live while the handle is.
                unsafe { (**mr).rkey }
            }
            Kind::Window { key, .. } => {
                // The low byte is the consumer-owned part of the key (as ibv_inc_rkey
                // moves it); the rest is the device's.
                *key = retag_key(*key, tag);
                *key
            }
        }
    }
}

impl ProtectionDomain for VerbsPd {
    type P = VerbsProvider;

    fn reg_mr(
        &self,
        arena: &Arc<Arena>,
        offset: usize,
        len: usize,
        access: Access,
    ) -> Result<VerbsMr, FabricError> {
        if !access.is_valid() {
            return Err(FabricError::InvalidAccess(access));
        }
        let end = offset.checked_add(len);
        if end.is_none_or(|e| e > arena.len()) {
            return Err(FabricError::OutOfRange {
                offset,
                len,
                arena_len: arena.len(),
            });
        }
        if len == 0 || len as u64 > self.shared.dev.attr.max_mr_size {
            return Err(FabricError::BadLength(len));
        }
        let flags = mr_access(access, self.shared.dev.info.mw_type2);
        // SAFETY: the range lies inside the arena (checked above), which the returned
        // handle keeps alive for as long as the registration exists.
        let addr = unsafe { arena.base().add(offset) };
        // SAFETY: pd is live; addr..addr+len is mapped memory of the arena.
        let mr = unsafe { ibv_reg_mr(self.shared.pd, addr.cast::<c_void>(), len, flags as i32) };
        if mr.is_null() {
            return Err(reg_mr_error(
                std::io::Error::last_os_error(),
                len,
                memlock_limit(),
            ));
        }
        // SAFETY: ibv_reg_mr returned a live MR.
        let lkey = unsafe { (*mr).lkey };
        if !self.shared.mrs.insert(lkey, mr.cast(), 0) {
            // SAFETY: just registered, never shared.
            unsafe { ibv_dereg_mr(mr) };
            return Err(FabricError::Exhausted {
                what: "registrations in this protection domain's key table",
                max: self.shared.mrs.max_entries(),
            });
        }
        Ok(VerbsMr {
            kind: Kind::Region {
                mr,
                _arena: arena.clone(),
            },
            pd: self.shared.clone(),
        })
    }

    /// `ibv_create_srq`; [`FabricError::Unsupported`] where the device reports
    /// `max_srq` 0.
    fn create_srq(
        &self,
        recv_cq: &super::VerbsCq,
        cfg: crate::fabric::SrqConfig,
    ) -> Result<super::VerbsSrq, FabricError> {
        super::VerbsSrq::create(&self.shared, &recv_cq.shared, cfg)
    }

    fn alloc_fast_mr(&self, max_len: usize) -> Result<VerbsMr, FabricError> {
        if !self.shared.dev.info.mw_type2 {
            return Err(FabricError::Exhausted {
                what: "type-2 memory windows (this device has none, so no fast registration; \
                       register with reg_mr instead, see rpcrdma::fabric::verbs)",
                max: 0,
            });
        }
        if max_len == 0 || max_len as u64 > self.shared.dev.attr.max_mr_size {
            return Err(FabricError::BadLength(max_len));
        }
        // SAFETY: pd is live.
        let mw = unsafe { ibv_alloc_mw(self.shared.pd, ibv_mw_type::IBV_MW_TYPE_2) };
        let mw = match mw {
            Some(mw) if !mw.is_null() => mw,
            _ => return Err(FabricError::last_os("ibv_alloc_mw")),
        };
        // SAFETY: ibv_alloc_mw returned a live window.
        let key = unsafe { (*mw).rkey };
        if !self
            .shared
            .mws
            .insert(key_index(key), mw.cast(), max_len as u64)
        {
            // SAFETY: just allocated, never shared.
            unsafe { ibv_dealloc_mw(mw) };
            return Err(FabricError::Exhausted {
                what: "memory windows in this protection domain's key table",
                max: self.shared.mws.max_entries(),
            });
        }
        Ok(VerbsMr {
            kind: Kind::Window { mw, key, max_len },
            pd: self.shared.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enomem() -> std::io::Error {
        std::io::Error::from_raw_os_error(libc::ENOMEM)
    }

    /// ENOMEM under a binding limit names the limit and how to raise it, not a
    /// generic out-of-memory (the CLI used to call this "cannot reach server").
    #[test]
    fn enomem_under_a_memlock_limit_names_the_limit() {
        let e = reg_mr_error(enomem(), 1 << 20, Some(8 << 20));
        assert!(
            matches!(
                e,
                FabricError::LockedMemoryLimit {
                    len: 1_048_576,
                    limit: 8_388_608
                }
            ),
            "{e:?}"
        );
        let msg = e.to_string();
        for want in ["RLIMIT_MEMLOCK", "8192 KiB", "ulimit -l", "1048576 bytes"] {
            assert!(msg.contains(want), "{want:?} missing from: {msg}");
        }
    }

    /// Without a binding limit (unlimited, or CAP_IPC_LOCK) ENOMEM is real memory
    /// shortage, and other errors stay what they are.
    #[test]
    fn other_registration_failures_stay_os_errors() {
        let e = reg_mr_error(enomem(), 4096, None);
        assert!(
            matches!(
                e,
                FabricError::Os {
                    op: "ibv_reg_mr",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(!e.to_string().contains("RLIMIT_MEMLOCK"));
        let einval = std::io::Error::from_raw_os_error(libc::EINVAL);
        let e = reg_mr_error(einval, 4096, Some(65536));
        assert!(matches!(e, FabricError::Os { .. }), "{e:?}");
    }

    /// The limit this process runs under is readable (whatever its value).
    #[test]
    fn memlock_limit_reads_without_failing() {
        let mut rl = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: rl is a valid rlimit to fill.
        assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut rl) }, 0);
        if rl.rlim_cur == libc::RLIM_INFINITY {
            assert_eq!(memlock_limit(), None);
        } else if let Some(l) = memlock_limit() {
            assert_eq!(l, rl.rlim_cur);
        }
    }
}
