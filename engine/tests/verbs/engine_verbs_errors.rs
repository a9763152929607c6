//! The generic engine e2e tests of `engine_errors.rs` (RDMA errors (ERR_CHUNK, ERR_VERS and malformed headers) and Send With Invalidate on and off), unchanged, over the
//! `verbs` provider on a real kernel RDMA device. Needs the qemu lab (`test = false`):
//! tools/lab/verbs.sh builds it on the host and runs it in the guest with
//! `RPCRDMA_VERBS_DEV` and `RPCRDMA_VERBS_IP` set.

#[path = "../engine/engine_errors.rs"]
mod generic;
