//! Helpers shared by the ULP service tests.

use rpcrdma_ulp::rpc::{CallHeader, OpaqueAuth};

/// A version-1 call header for `prog`/`procedure` with no credentials; the requester
/// assigns the XID, so it is left 0 here.
pub fn header(prog: u32, procedure: u32) -> CallHeader<'static> {
    CallHeader {
        xid: 0,
        prog,
        vers: 1,
        procedure,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    }
}
