//! Keepalive probes the way the Linux client sends them.
//!
//! RFC 8267 §6.7.2 leaves the probe to the implementation; the Linux NFS/RDMA client
//! sends an RPC NULL call (procedure 0) to the upper-layer program it is using (NFS,
//! its version) on the connection. Any responder serving that program answers NULL
//! with SUCCESS, so the probe proves the peer alive without the PROG_UNAVAIL reply (and
//! the server-side log noise) that a private probe program gets. The engine cannot know
//! which program its calls belong to, so the binding picks the probe target here;
//! [`Dispatcher`](crate::program::Dispatcher) answers NULL for every registered
//! program.

use core::time::Duration;

use rpcrdma::ConnConfig;

/// `cfg` with keepalive probes every `interval` of silence, each an RPC NULL call to
/// `prog`/`vers` (the program the connection's calls go to), as the Linux client does.
pub fn with_keepalive(cfg: ConnConfig, prog: u32, vers: u32, interval: Duration) -> ConnConfig {
    ConnConfig {
        keepalive: Some(interval),
        probe_program: (prog, vers),
        ..cfg
    }
}
