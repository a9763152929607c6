//! Shared receive queues on verbs (`ibv_create_srq`, `ibv_post_srq_recv`).
//!
//! Receives of one shared queue are taken in post order, but their completions arrive
//! from many queue pairs, so they are not released in order: each posted receive owns
//! a slot (its verbs `wr_id` names the queue and the slot), the completion frees the
//! slot out of order, and a post is refused while the slot its sequence number maps
//! to still waits for its completion. A device reporting `max_srq` 0 has none:
//! [`create_srq`](crate::fabric::ProtectionDomain::create_srq) answers
//! [`FabricError::Unsupported`].

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use rdma_sys::{
    ibv_create_srq, ibv_destroy_srq, ibv_post_srq_recv, ibv_recv_wr, ibv_sge, ibv_srq,
    ibv_srq_init_attr,
};

use super::cq::CqShared;
use super::pd::PdShared;
use super::ring::RECV_TAG;
use crate::fabric::{FabricError, PostError, PostErrorKind, RecvWr, SharedReceiveQueue, SrqConfig};

/// Tag bit of a shared receive's verbs `wr_id` (beside [`RECV_TAG`]): then bits 40..62
/// name the queue and bits 0..40 the receive's sequence number. Queue pairs' own
/// sequence numbers stay below bit 62 (2^22 queue pairs of 2^40 each).
pub(crate) const SRQ_TAG: u64 = 1 << 62;
const SEQ_BITS: u32 = 40;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;
const ID_MASK: u64 = (1 << 22) - 1;

static NEXT_SRQ: AtomicU64 = AtomicU64::new(1);

struct Slot {
    wr_id: AtomicU64,
    len: AtomicU32,
    busy: AtomicBool,
}

/// What the handle, its completion queue and the attached queue pairs share.
pub(crate) struct SrqShared {
    pub(crate) srq: *mut ibv_srq,
    pub(crate) id: u64,
    pub(crate) cq: Arc<CqShared>,
    /// Keeps the domain alive past the queue (destroyed before it).
    _pd: Arc<PdShared>,
    pub(crate) cfg: SrqConfig,
    slots: Box<[Slot]>,
    mask: u64,
    /// Receives posted (sequence numbers handed out); the handle writes it.
    posted: AtomicU64,
    /// Receives whose completion was reaped.
    reaped: AtomicU64,
}

// SAFETY: verbs SRQs may be used from any thread; posting is serialised by the handle
// (`&mut self`), the rest is atomics.
unsafe impl Send for SrqShared {}
// SAFETY: as above.
unsafe impl Sync for SrqShared {}

impl Drop for SrqShared {
    fn drop(&mut self) {
        // SAFETY: the last reference is gone, so every attached queue pair (each holds
        // one) was destroyed first, as ibv_destroy_srq requires; destroyed once.
        unsafe { ibv_destroy_srq(self.srq) };
        self.cq.release(u64::from(self.cfg.max_wr));
    }
}

impl SrqShared {
    /// The verbs `wr_id` of receive `seq`.
    fn tag(&self, seq: u64) -> u64 {
        RECV_TAG | SRQ_TAG | (self.id & ID_MASK) << SEQ_BITS | (seq & SEQ_MASK)
    }

    /// Whether the verbs `wr_id` names a receive of this queue.
    pub(crate) fn owns(&self, wr_id: u64) -> bool {
        wr_id & SRQ_TAG != 0 && (wr_id >> SEQ_BITS) & ID_MASK == self.id & ID_MASK
    }

    /// Frees the slot of the receive `wr_id` names; returns the caller's `wr_id` and
    /// the receive's length. Only the completion queue's poll calls this.
    pub(crate) fn complete(&self, wr_id: u64) -> Option<(u64, u32)> {
        let s = &self.slots[(wr_id & SEQ_MASK & self.mask) as usize];
        if !s.busy.load(Ordering::Acquire) {
            return None;
        }
        let out = (
            s.wr_id.load(Ordering::Relaxed),
            s.len.load(Ordering::Relaxed),
        );
        s.busy.store(false, Ordering::Release);
        self.reaped.fetch_add(1, Ordering::Relaxed);
        Some(out)
    }
}

/// A verbs shared receive queue.
pub struct VerbsSrq {
    pub(crate) shared: Arc<SrqShared>,
    wrs: Box<[ibv_recv_wr]>,
    sges: Box<[ibv_sge]>,
}

// SAFETY: the arrays hold pointers into themselves only during a post by the owner.
unsafe impl Send for VerbsSrq {}

impl std::fmt::Debug for VerbsSrq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsSrq")
            .field("id", &self.shared.id)
            .field("depth", &self.shared.cfg.max_wr)
            .finish()
    }
}

/// Most receives chained into one `ibv_post_srq_recv`.
const CHAIN: usize = 32;

impl VerbsSrq {
    pub(crate) fn create(
        pd: &Arc<PdShared>,
        cq: &Arc<CqShared>,
        cfg: SrqConfig,
    ) -> Result<VerbsSrq, FabricError> {
        let dev = &pd.dev;
        if !Arc::ptr_eq(&cq.dev, dev) {
            return Err(FabricError::WrongDevice);
        }
        let a = &dev.attr;
        if a.max_srq <= 0 {
            return Err(FabricError::Unsupported(
                "shared receive queues (the device reports max_srq 0; post receives per queue pair)",
            ));
        }
        let max_wr = a.max_srq_wr.max(0) as u32;
        if cfg.max_wr == 0 || cfg.max_wr > max_wr {
            return Err(FabricError::InvalidCaps {
                what: "srq max_wr",
                requested: cfg.max_wr,
                max: max_wr,
            });
        }
        let max_sge = a.max_srq_sge.max(0) as u32;
        if cfg.max_sge == 0 || cfg.max_sge > max_sge {
            return Err(FabricError::InvalidCaps {
                what: "srq max_sge",
                requested: cfg.max_sge,
                max: max_sge,
            });
        }
        cq.commit(u64::from(cfg.max_wr))?;
        // SAFETY: all-zero is a valid ibv_srq_init_attr.
        let mut attr: ibv_srq_init_attr = unsafe { MaybeUninit::zeroed().assume_init() };
        attr.attr.max_wr = cfg.max_wr;
        attr.attr.max_sge = cfg.max_sge;
        // SAFETY: the PD is live; attr is initialised.
        let srq = unsafe { ibv_create_srq(pd.pd, &mut attr) };
        if srq.is_null() {
            let e = FabricError::last_os("ibv_create_srq");
            cq.release(u64::from(cfg.max_wr));
            return Err(e);
        }
        let n = cfg.max_wr.next_power_of_two();
        let slots = (0..n)
            .map(|_| Slot {
                wr_id: AtomicU64::new(0),
                len: AtomicU32::new(0),
                busy: AtomicBool::new(false),
            })
            .collect();
        let shared = Arc::new(SrqShared {
            srq,
            id: NEXT_SRQ.fetch_add(1, Ordering::Relaxed),
            cq: cq.clone(),
            _pd: pd.clone(),
            cfg,
            slots,
            mask: u64::from(n - 1),
            posted: AtomicU64::new(0),
            reaped: AtomicU64::new(0),
        });
        cq.register_srq(&shared);
        Ok(VerbsSrq {
            shared,
            // SAFETY: all-zero request and SGE structs are valid (null pointers, zero
            // counts).
            wrs: (0..CHAIN)
                .map(|_| unsafe { MaybeUninit::<ibv_recv_wr>::zeroed().assume_init() })
                .collect(),
            sges: (0..CHAIN * cfg.max_sge as usize)
                .map(|_| ibv_sge {
                    addr: 0,
                    length: 0,
                    lkey: 0,
                })
                .collect(),
        })
    }

    /// Posts up to [`CHAIN`] receives with one call.
    fn post_chain(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let sh = &*self.shared;
        let head = sh.posted.load(Ordering::Relaxed);
        let mut built = 0usize;
        let mut ns = 0usize;
        let mut refused = None;
        for (i, wr) in wrs.iter().enumerate() {
            if wr.sgl.len() > sh.cfg.max_sge as usize {
                refused = Some(PostErrorKind::TooManySge {
                    given: wr.sgl.len(),
                    max: sh.cfg.max_sge,
                });
                break;
            }
            let seq = head + i as u64;
            let slot = &sh.slots[(seq & sh.mask) as usize];
            // Posted and not completed receives never exceed the depth; the slot of
            // `seq` is also still busy while an older receive's completion is not in.
            let outstanding = head + i as u64 - sh.reaped.load(Ordering::Relaxed);
            if outstanding >= u64::from(sh.cfg.max_wr) || slot.busy.load(Ordering::Acquire) {
                refused = Some(PostErrorKind::QueueFull {
                    depth: sh.cfg.max_wr,
                });
                break;
            }
            let at = ns;
            let mut total = 0u64;
            for s in wr.sgl {
                self.sges[ns] = ibv_sge {
                    addr: s.addr,
                    length: s.length,
                    lkey: s.lkey,
                };
                total += u64::from(s.length);
                ns += 1;
            }
            slot.wr_id.store(wr.wr_id, Ordering::Relaxed);
            slot.len
                .store(total.min(u64::from(u32::MAX)) as u32, Ordering::Relaxed);
            slot.busy.store(true, Ordering::Release);
            let v = &mut self.wrs[i];
            v.wr_id = sh.tag(seq);
            v.sg_list = self.sges[at..].as_mut_ptr();
            v.num_sge = wr.sgl.len() as i32;
            built += 1;
        }
        if built == 0 {
            return match refused {
                Some(kind) => Err(PostError { posted: 0, kind }),
                None => Ok(()),
            };
        }
        let base = self.wrs.as_mut_ptr();
        for k in 0..built {
            let next = if k + 1 < built {
                // SAFETY: k + 1 < built <= the array's length.
                unsafe { base.add(k + 1) }
            } else {
                std::ptr::null_mut()
            };
            self.wrs[k].next = next;
        }
        let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
        // SAFETY: the SRQ is live; the chain links `built` initialised receives whose
        // SGE pointers point into `sges`.
        let rc = unsafe { ibv_post_srq_recv(sh.srq, base, &mut bad) };
        let posted = if rc == 0 {
            built
        } else if bad.is_null() {
            0
        } else {
            // SAFETY: bad points into the chain, i.e. into `wrs`.
            unsafe { bad.offset_from(base) }.clamp(0, built as isize) as usize
        };
        for seq in head + posted as u64..head + built as u64 {
            sh.slots[(seq & sh.mask) as usize]
                .busy
                .store(false, Ordering::Release);
        }
        sh.posted.store(head + posted as u64, Ordering::Release);
        if rc != 0 {
            return Err(PostError {
                posted,
                kind: if rc.abs() == libc::ENOMEM {
                    PostErrorKind::QueueFull {
                        depth: sh.cfg.max_wr,
                    }
                } else {
                    PostErrorKind::Malformed("ibv_post_srq_recv refused the chain")
                },
            });
        }
        match refused {
            Some(kind) => Err(PostError { posted, kind }),
            None => Ok(()),
        }
    }
}

impl SharedReceiveQueue for VerbsSrq {
    fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let mut done = 0;
        for chunk in wrs.chunks(CHAIN) {
            self.post_chain(chunk).map_err(|e| PostError {
                posted: done + e.posted,
                kind: e.kind,
            })?;
            done += chunk.len();
        }
        Ok(())
    }

    fn depth(&self) -> u32 {
        self.shared.cfg.max_wr
    }

    fn posted(&self) -> u32 {
        let sh = &*self.shared;
        let posted = sh.posted.load(Ordering::Acquire);
        posted.saturating_sub(sh.reaped.load(Ordering::Relaxed)) as u32
    }
}

impl Drop for VerbsSrq {
    fn drop(&mut self) {
        self.shared.cq.unregister_srq(&self.shared);
    }
}
