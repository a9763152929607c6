//! The generic engine e2e tests of `engine_send_ddp.rs` (send-based DDP: a 1 MiB
//! WRITE-like call placed in one Send into the responder's DDP segment, the fallback
//! to a Read chunk, the placement errors, the segments going round), unchanged, over
//! the `verbs` provider on a real kernel RDMA device. Needs the qemu lab
//! (`test = false`): tools/lab/verbs.sh builds it on the host and runs it in the guest
//! with `RPCRDMA_VERBS_DEV` and `RPCRDMA_VERBS_IP` set.

#[path = "../engine/engine_send_ddp.rs"]
mod generic;
