//! The generic engine e2e tests of `engine_send_ddp_segments.rs` (send-based DDP items
//! across the segments of a continuation group: 256 KiB and 1 MiB arguments in 64 KiB
//! segments, several items per call, the group limit, every placement error) and of
//! `engine_send_ddp_reply_segments.rs` (send-based DDP replies across segments: a
//! 1 MiB result over four 256 KiB segments, two results per reply, every broken reply
//! group), unchanged, over the `verbs` provider on a real kernel RDMA device. Needs the
//! qemu lab (`test = false`): tools/lab/verbs.sh builds it on the host and runs it in
//! the guest with `RPCRDMA_VERBS_DEV` and `RPCRDMA_VERBS_IP` set.

#[path = "../engine/engine_send_ddp_segments.rs"]
mod generic;

#[path = "../engine/engine_send_ddp_reply_segments.rs"]
mod replies;
