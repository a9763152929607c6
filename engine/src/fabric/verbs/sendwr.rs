//! Filling one preallocated `ibv_send_wr` for one verbs operation.
//!
//! A queue pair reuses its request array for every post, and `ibv_send_wr` is mostly
//! unions: a field one operation leaves alone still holds whatever the previous request
//! in that slot put there. Devices do look at fields an operation does not use: rxe's
//! userspace provider refuses (EINVAL, the whole chain) a memory-window bind whose
//! immediate-data word is not zero, and that word is where a Local Invalidate or Send
//! With Invalidate stores its key. So every request starts from all zeros here.

use std::mem::MaybeUninit;

use rdma_sys::{ibv_mr, ibv_mw, ibv_send_wr, ibv_sge, ibv_wr_opcode};

/// An all-zero request: null pointers, no entries, every union word zero.
// SAFETY: ibv_send_wr is plain C data (integers, raw pointers and unions of them), for
// which all-zero bytes are a valid value.
const BLANK: ibv_send_wr = unsafe { MaybeUninit::zeroed().assume_init() };

/// One verbs send-queue operation, with the verbs objects it names resolved.
#[derive(Debug, Clone, Copy)]
pub(crate) enum VerbsOp {
    /// `IBV_WR_SEND`.
    Send,
    /// `IBV_WR_SEND_WITH_INV` of this remote key.
    SendWithInvalidate(u32),
    /// `IBV_WR_RDMA_WRITE` to this remote address and key.
    Write { addr: u64, rkey: u32 },
    /// `IBV_WR_RDMA_READ` from this remote address and key.
    Read { addr: u64, rkey: u32 },
    /// `IBV_WR_BIND_MW`: bind `mw` over part of `mr` with the new key `rkey`.
    Bind {
        mw: *mut ibv_mw,
        mr: *mut ibv_mr,
        rkey: u32,
        addr: u64,
        length: u64,
        access: u32,
    },
    /// `IBV_WR_LOCAL_INV` of this key.
    LocalInvalidate(u32),
}

/// Overwrites `v` with the request for `op`: identifier, gather list (`num_sge` entries
/// at `sgl`), send flags; every field `op` does not use is zero, and `next` is null
/// (the caller links the chain).
pub(crate) fn fill(
    v: &mut ibv_send_wr,
    wr_id: u64,
    sgl: *mut ibv_sge,
    num_sge: usize,
    flags: u32,
    op: VerbsOp,
) {
    *v = BLANK;
    v.wr_id = wr_id;
    if num_sge > 0 {
        v.sg_list = sgl;
        v.num_sge = num_sge as i32;
    }
    v.send_flags = flags;
    match op {
        VerbsOp::Send => v.opcode = ibv_wr_opcode::IBV_WR_SEND,
        VerbsOp::SendWithInvalidate(rkey) => {
            v.opcode = ibv_wr_opcode::IBV_WR_SEND_WITH_INV;
            v.imm_data_invalidated_rkey_union.invalidated_rkey = rkey;
            // siw's userspace provider (rdma-core 44) takes the key to invalidate from
            // the RDMA key word, not from invalidate_rkey: left zero, the peer is told
            // to invalidate STag 0 and answers with a Terminate (invalid STag).
            v.wr.rdma.rkey = rkey;
        }
        VerbsOp::Write { addr, rkey } => {
            v.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
            v.wr.rdma = rdma_sys::rdma_t {
                remote_addr: addr,
                rkey,
            };
        }
        VerbsOp::Read { addr, rkey } => {
            v.opcode = ibv_wr_opcode::IBV_WR_RDMA_READ;
            v.wr.rdma = rdma_sys::rdma_t {
                remote_addr: addr,
                rkey,
            };
        }
        VerbsOp::Bind {
            mw,
            mr,
            rkey,
            addr,
            length,
            access,
        } => {
            v.opcode = ibv_wr_opcode::IBV_WR_BIND_MW;
            v.bind_mw_tso_union.bind_mw = rdma_sys::bind_mw_t {
                mw,
                rkey,
                bind_info: rdma_sys::ibv_mw_bind_info {
                    mr,
                    addr,
                    length,
                    mw_access_flags: access,
                },
            };
        }
        VerbsOp::LocalInvalidate(key) => {
            v.opcode = ibv_wr_opcode::IBV_WR_LOCAL_INV;
            v.imm_data_invalidated_rkey_union.invalidated_rkey = key;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops() -> [VerbsOp; 6] {
        let mw = 0x1000 as *mut ibv_mw;
        let mr = 0x2000 as *mut ibv_mr;
        [
            VerbsOp::Send,
            VerbsOp::SendWithInvalidate(0x0800_0152),
            VerbsOp::Write {
                addr: 0x7f00_0000_1000,
                rkey: 0x0800_0153,
            },
            VerbsOp::Read {
                addr: 0x7f00_0000_2000,
                rkey: 0x0800_0154,
            },
            VerbsOp::Bind {
                mw,
                mr,
                rkey: 0x0800_0155,
                addr: 0x7f00_0000_3000,
                length: 40_000,
                access: 0x4,
            },
            VerbsOp::LocalInvalidate(0x0800_0153),
        ]
    }

    /// The checks rxe's userspace provider makes on a bind before it reaches the
    /// kernel (rdma-core 44, Debian 12): no gather entries, no length, and a zero
    /// immediate-data word; anything else fails the whole post with EINVAL.
    fn rxe_accepts_bind(v: &ibv_send_wr) -> bool {
        // SAFETY: every union member is a plain integer.
        let imm = unsafe { v.imm_data_invalidated_rkey_union.imm_data };
        v.num_sge == 0 && v.sg_list.is_null() && imm == 0
    }

    /// The rxe0 Write-chunk hang: a requester slot that last held a Local Invalidate
    /// (key in the immediate-data word) was reused for a memory-window bind, which rxe
    /// refused with EINVAL, so the call never went out.
    #[test]
    fn a_bind_after_a_local_invalidate_carries_no_stale_key() {
        let mut v = BLANK;
        fill(
            &mut v,
            7,
            std::ptr::null_mut(),
            0,
            0,
            VerbsOp::LocalInvalidate(0x0800_0153),
        );
        // SAFETY: plain integer union member.
        assert_eq!(
            unsafe { v.imm_data_invalidated_rkey_union.invalidated_rkey },
            0x0800_0153
        );
        let [.., bind, _] = ops();
        fill(&mut v, 8, std::ptr::null_mut(), 0, 2, bind);
        assert_eq!(v.opcode, ibv_wr_opcode::IBV_WR_BIND_MW);
        assert!(rxe_accepts_bind(&v), "stale words in a bind");
        // SAFETY: the bind member was written last.
        let b = unsafe { v.bind_mw_tso_union.bind_mw };
        assert_eq!(
            (b.rkey, b.bind_info.length, b.bind_info.mw_access_flags),
            (0x0800_0155, 40_000, 0x4)
        );
        assert_eq!((v.wr_id, v.send_flags), (8, 2));
    }

    /// The siw0 Write-chunk Terminate: libsiw reads a Send With Invalidate's key from
    /// the RDMA key word, so a zero there told the peer to invalidate STag 0.
    #[test]
    fn send_with_invalidate_carries_its_key_where_libsiw_reads_it() {
        let mut v = BLANK;
        let [_, swi, write, ..] = ops();
        fill(&mut v, 1, std::ptr::null_mut(), 0, 0, write);
        fill(&mut v, 2, std::ptr::null_mut(), 0, 0, swi);
        assert_eq!(v.opcode, ibv_wr_opcode::IBV_WR_SEND_WITH_INV);
        // SAFETY: plain integer union members, both written by `fill`.
        let (rdma_key, inv_key) = unsafe {
            (
                v.wr.rdma.rkey,
                v.imm_data_invalidated_rkey_union.invalidated_rkey,
            )
        };
        assert_eq!((rdma_key, inv_key), (0x0800_0152, 0x0800_0152));
        // SAFETY: as above.
        assert_eq!(unsafe { v.wr.rdma.remote_addr }, 0, "stale Write address");
    }

    /// The words of `v` an operation that is not `op` would use: all must be zero.
    /// Reads only union members that `op` did not write (zero from the blank) or the
    /// one it did, never another member's padding.
    fn foreign_words(v: &ibv_send_wr, op: VerbsOp) -> Vec<u64> {
        // SAFETY: every union member is plain integers and pointers; each member read
        // here is either the one written by `fill` or untouched since the blank.
        unsafe {
            let mut w = vec![u64::from(v.qp_type.xrc.remote_srqn)];
            if !matches!(
                op,
                VerbsOp::SendWithInvalidate(_) | VerbsOp::LocalInvalidate(_)
            ) {
                w.push(u64::from(v.imm_data_invalidated_rkey_union.imm_data));
            }
            if !matches!(
                op,
                VerbsOp::Write { .. } | VerbsOp::Read { .. } | VerbsOp::SendWithInvalidate(_)
            ) {
                let a = v.wr.atomic;
                w.extend([a.remote_addr, a.compare_add, a.swap, u64::from(a.rkey)]);
            }
            if !matches!(op, VerbsOp::Bind { .. }) {
                let b = v.bind_mw_tso_union.bind_mw;
                w.extend([
                    b.mw as u64,
                    u64::from(b.rkey),
                    b.bind_info.mr as u64,
                    b.bind_info.addr,
                    b.bind_info.length,
                    u64::from(b.bind_info.mw_access_flags),
                ]);
            }
            w
        }
    }

    /// Whatever a slot held before, the new request has only its own fields set.
    #[test]
    fn every_request_is_independent_of_the_slots_previous_one() {
        let mut sges = [ibv_sge {
            addr: 0x10,
            length: 4,
            lkey: 3,
        }; 2];
        for before in ops() {
            for after in ops() {
                let mut v = BLANK;
                fill(&mut v, 1, sges.as_mut_ptr(), 2, 0x2, before);
                v.next = &mut v as *mut ibv_send_wr;
                fill(&mut v, 2, sges.as_mut_ptr(), 0, 0, after);
                assert!(
                    foreign_words(&v, after).iter().all(|&w| w == 0),
                    "{after:?} after {before:?}: {:x?}",
                    foreign_words(&v, after)
                );
                assert!(v.next.is_null(), "{after:?} after {before:?}");
                assert!(v.sg_list.is_null() && v.num_sge == 0);
                assert_eq!((v.wr_id, v.send_flags), (2, 0));
                if matches!(after, VerbsOp::Bind { .. }) {
                    assert!(rxe_accepts_bind(&v), "bind after {before:?}");
                }
            }
        }
    }
}
