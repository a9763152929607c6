//! Setup shared by the callgrind benches: a requester and responder over shm, both in
//! this process, the responder serving ECHO through the ULP `Dispatcher`.

use std::time::Duration;

use rpcrdma::fabric::shm::{ShmAddr, ShmDevice, ShmProvider};
use rpcrdma::ConnConfig;
use rpcrdma::Pair;
use rpcrdma_ulp::builtin::EchoProgram;
use rpcrdma_ulp::program::Dispatcher;

/// How long connecting the pair may take before the bench gives up.
const SETUP_LIMIT: Duration = Duration::from_secs(10);

/// A connected shm pair, both ends configured by `cfg`, the responder serving ECHO with
/// SOURCE disabled. `tag` names the listening address; the process id is appended so
/// concurrent runs do not collide. Panics when setup fails: a bench has no caller to
/// hand the error to.
pub fn echo_pair(tag: &str, cfg: &ConnConfig) -> Pair<ShmProvider, Dispatcher> {
    let addr = ShmAddr::abstract_name(format!("{tag}-{}", std::process::id()));
    let mut d = Dispatcher::new();
    d.register(Box::new(EchoProgram::with_source_max(0)))
        .expect("register echo");
    Pair::connect(
        &ShmDevice::new(),
        ShmDevice::new(),
        &addr,
        cfg,
        cfg,
        d,
        SETUP_LIMIT,
    )
    .expect("connected pair")
}
