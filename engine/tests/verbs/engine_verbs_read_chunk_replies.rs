//! The generic engine e2e tests of `engine_read_chunk_replies.rs` (replies in responder-provided Read chunks: pulls, RDMA_DONE, its timeout, the old key dead), unchanged, over the
//! `verbs` provider on a real kernel RDMA device. Needs the qemu lab (`test = false`):
//! tools/lab/verbs.sh builds it on the host and runs it in the guest with
//! `RPCRDMA_VERBS_DEV` and `RPCRDMA_VERBS_IP` set.

#[path = "../engine/engine_read_chunk_replies.rs"]
mod generic;
