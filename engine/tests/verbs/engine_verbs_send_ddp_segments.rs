//! The generic engine e2e tests of `engine_send_ddp_segments.rs` (send-based DDP items
//! across the segments of a continuation group: 256 KiB and 1 MiB arguments in 64 KiB
//! segments, several items per call, the group limit, every placement error),
//! unchanged, over the `verbs` provider on a real kernel RDMA device. Needs the qemu
//! lab (`test = false`): tools/lab/verbs.sh builds it on the host and runs it in the
//! guest with `RPCRDMA_VERBS_DEV` and `RPCRDMA_VERBS_IP` set.

#[path = "../engine/engine_send_ddp_segments.rs"]
mod generic;
