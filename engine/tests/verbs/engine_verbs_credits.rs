//! The generic engine e2e tests of `engine_credits.rs` (credits (more calls than credits queue in order; the grant follows the responder's policy)), unchanged, over the
//! `verbs` provider on a real kernel RDMA device. Needs the qemu lab (`test = false`):
//! tools/lab/verbs.sh builds it on the host and runs it in the guest with
//! `RPCRDMA_VERBS_DEV` and `RPCRDMA_VERBS_IP` set.

#[path = "../engine/engine_credits.rs"]
mod generic;
