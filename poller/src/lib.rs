//! rpcrdma-poller: pinned busy-polling threads with an idle policy, cross-core mailboxes,
//! timers and clean shutdown. Knows nothing of RDMA.
#![warn(missing_docs)]
