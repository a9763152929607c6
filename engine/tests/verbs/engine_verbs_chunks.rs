//! The generic engine e2e tests of `engine_chunks.rs` (every chunk shape (long calls, Reply chunks, Read chunks at odd positions, Write chunks filled, partly filled and empty)), unchanged, over the
//! `verbs` provider on a real kernel RDMA device. Needs the qemu lab (`test = false`):
//! tools/lab/verbs.sh builds it on the host and runs it in the guest with
//! `RPCRDMA_VERBS_DEV` and `RPCRDMA_VERBS_IP` set.

#[path = "../engine/engine_chunks.rs"]
mod generic;
