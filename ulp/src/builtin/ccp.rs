//! [`CcpProgram`]: the RFC 5666 §6 Connection Configuration Protocol.

use rpcrdma::wire::ccp::{
    ConfigRdmaReply, ConfigRdmaReq, CONFIG_RDMA_PROG, CONFIG_RDMA_VERS, CONF_RDMA,
};

use crate::binding::{ProcInfo, ReplySize};
use crate::ddp::{DdpCursor, DdpDecodeError, DdpEncoder};
use crate::program::{ProcError, Program};
use crate::rpc::CallHeader;

static CONF_RDMA_INFO: ProcInfo = ProcInfo::plain(
    CONF_RDMA,
    "CONF_RDMA",
    ReplySize::fixed(ConfigRdmaReply::ENCODED_LEN as u32),
)
.marked_idempotent();

/// Answers CONF_RDMA (program 100417, version 1) with this server's configuration, and
/// remembers the last requirements a client sent.
///
/// RFC 8166 replaced the protocol with RFC 8797 private data; it is here for RFC
/// 5666-era peers. What a client's values mean for the connection is the engine's to
/// apply ([`last_request`](Self::last_request) exposes them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CcpProgram {
    reply: ConfigRdmaReply,
    last: Option<ConfigRdmaReq>,
}

impl CcpProgram {
    /// A CCP server that answers every CONF_RDMA with `reply`.
    pub const fn new(reply: ConfigRdmaReply) -> Self {
        CcpProgram { reply, last: None }
    }

    /// The arguments of the most recent CONF_RDMA call.
    pub const fn last_request(&self) -> Option<ConfigRdmaReq> {
        self.last
    }
}

impl Program for CcpProgram {
    fn prog(&self) -> u32 {
        CONFIG_RDMA_PROG
    }

    fn versions(&self) -> (u32, u32) {
        (CONFIG_RDMA_VERS, CONFIG_RDMA_VERS)
    }

    fn proc_info(&self, _vers: u32, procedure: u32) -> Option<&'static ProcInfo> {
        (procedure == CONF_RDMA).then_some(&CONF_RDMA_INFO)
    }

    fn call<'d>(
        &'d mut self,
        call: &CallHeader<'d>,
        args: &mut DdpCursor<'d>,
        results: &mut DdpEncoder<'_, 'd>,
    ) -> Result<(), ProcError> {
        if call.procedure != CONF_RDMA {
            return Err(ProcError::ProcUnavail);
        }
        let offset = args.position();
        // The engine's codec checks a standalone buffer; hand it exactly the struct.
        let raw = args.opaque_fixed(ConfigRdmaReq::ENCODED_LEN)?;
        let req = ConfigRdmaReq::decode(raw).map_err(|_| DdpDecodeError::Invalid {
            offset,
            what: "malformed config_rdma_req",
        })?;
        args.finish()?;
        self.last = Some(req);
        let mut out = [0u8; ConfigRdmaReply::ENCODED_LEN];
        let n = self
            .reply
            .encode(&mut out)
            .map_err(|_| ProcError::SystemErr)?;
        results.opaque_fixed(&out[..n])?;
        Ok(())
    }
}
