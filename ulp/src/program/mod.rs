//! ONC RPC program dispatch: the [`Program`] trait upper layers implement, the
//! [`Dispatcher`] that decodes a call, routes it by program, version and procedure, and
//! writes the complete reply, and the duplicate request cache ([`Drc`]) it keeps
//! non-idempotent procedures' replies in.

mod auth;
mod dispatch;
mod drc;
mod error;
mod service;

pub use auth::AuthPolicy;
pub use dispatch::{
    DispatchError, DispatchStats, Dispatched, Dispatcher, InboundCall, RegisterError, WrittenReply,
};
pub use drc::{
    ClientAddr, Drc, DrcConfig, DrcConfigError, DrcKey, DrcLookup, DrcPending, DrcStats,
    MAX_DRC_ENTRIES,
};
pub use error::ProcError;

use std::sync::Arc;

use rpcrdma::{RegBuf, RegBufError};

use crate::binding::ProcInfo;
use crate::ddp::{DdpCursor, DdpEncoder};
use crate::rpc::CallHeader;

/// An RPC program served through a [`Dispatcher`].
///
/// Procedure 0 (NULL) of every version is answered by the dispatcher itself, so
/// implementations only handle their other procedures.
pub trait Program: Send {
    /// Program number.
    fn prog(&self) -> u32;

    /// Lowest and highest supported version; a call outside the range gets
    /// PROG_MISMATCH with them (RFC 5531 §9). The dispatcher asks once, when the program
    /// is registered (as for [`prog`](Self::prog)).
    fn versions(&self) -> (u32, u32);

    /// The declarations of procedure `procedure` of version `vers` (within
    /// [`versions`](Self::versions)), or `None` if it does not exist (PROC_UNAVAIL).
    fn proc_info(&self, vers: u32, procedure: u32) -> Option<&'static ProcInfo>;

    /// Runs a procedure that [`proc_info`](Self::proc_info) declared.
    ///
    /// Decode the arguments from `args` (and call [`DdpCursor::finish`] before acting on
    /// them: the dispatcher answers GARBAGE_ARGS for leftovers either way, but only a
    /// procedure knows whether it already did something), then encode the results into
    /// `results`, whose DDP-eligible items go to the requester's Write chunks. The
    /// dispatcher has already written the SUCCESS header; on error it replaces the reply
    /// with the one the error names. `'d` is the lifetime of the call's data and of the
    /// borrow of `self`, so results may reference either without copying.
    fn call<'d>(
        &'d mut self,
        call: &CallHeader<'d>,
        args: &mut DdpCursor<'d>,
        results: &mut DdpEncoder<'_, 'd>,
    ) -> Result<(), ProcError>;

    /// The duplicate request cache for this program's procedures that are not
    /// [`idempotent`](ProcInfo::idempotent), usually one shared by every instance of the
    /// program in a server; `None` (the default) runs every call. The dispatcher asks
    /// once, when the program is registered.
    fn reply_cache(&self) -> Option<Arc<Drc>> {
        None
    }

    /// Offered once per connection, before the first call that offers Write chunks:
    /// `alloc` hands out registered buffers of the connection's large pool. A program
    /// whose results are the same bytes every time (a preformatted result, a pattern)
    /// may copy them into such buffers once and return slices of them as DDP results;
    /// the dispatcher then has the engine RDMA-Write them straight from there instead
    /// of copying each result into a fresh registered buffer (it must also list the
    /// buffers in [`registered_results`](Self::registered_results)). Buffers taken are
    /// held until the program is dropped. The default takes none.
    fn attach_registered(&mut self, alloc: &mut dyn FnMut() -> Result<RegBuf, RegBufError>) {
        let _ = alloc;
    }

    /// The registered buffers this program's DDP results may lie in (see
    /// [`attach_registered`](Self::attach_registered)); the contents must not change
    /// while any is shared. The default has none.
    fn registered_results(&self) -> &[Arc<RegBuf>] {
        &[]
    }
}
