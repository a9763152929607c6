//! The requester's side of RFC 5666 §6's Connection Configuration Protocol: build a
//! `CONF_RDMA` call, read its results, and turn them into what the engine applies
//! ([`rpcrdma::PeerConfig`], through `Requester::apply_peer_config`). The server's side
//! is [`CcpProgram`](crate::builtin::CcpProgram).
//!
//! RFC 8166 replaced the protocol with RFC 8797's private data, which the engine already
//! exchanges at connection set-up; CCP adds what private data cannot say: the server's
//! receive-buffer alignment, which RDMA_MSGP padding needs (RFC 5666 §3.9).

use rpcrdma::wire::ccp::{
    ConfigRdmaReply, ConfigRdmaReq, CONFIG_RDMA_PROG, CONFIG_RDMA_VERS, CONF_RDMA,
};
use rpcrdma::{CallRequest, CallStatus, Outcome, PeerConfig, RegBuf};

use crate::client::{inline_call, BuildError, OutcomeResults};
use crate::ddp::{DdpCursor, DdpDecodeError, DdpEncodeError, DdpEncoder, ReplyError, XdrCodec};
use crate::rpc::{CallHeader, OpaqueAuth};

/// Why [`reply`] found no configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CcpCallError {
    /// The call did not succeed (e.g. PROG_UNAVAIL: the server does not run CCP).
    #[error("CONF_RDMA failed: {0:?}")]
    Failed(CallStatus),
    /// The reply was not an accepted RPC reply.
    #[error("CONF_RDMA reply: {0}")]
    Reply(#[source] ReplyError),
    /// The results did not decode as `config_rdma_reply`.
    #[error("CONF_RDMA results: {0}")]
    Decode(#[source] DdpDecodeError),
}

/// `config_rdma_req` as XDR arguments (three fixed words).
struct Args(ConfigRdmaReq);

impl<'d> XdrCodec<'d> for Args {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        let mut raw = [0u8; ConfigRdmaReq::ENCODED_LEN];
        // The buffer is exactly the encoded length, so this cannot fail.
        let n = self.0.encode(&mut raw).unwrap_or(0);
        e.opaque_fixed(&raw[..n])
    }

    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        let offset = c.position();
        let raw = c.opaque_fixed(ConfigRdmaReq::ENCODED_LEN)?;
        ConfigRdmaReq::decode(raw)
            .map(Args)
            .map_err(|_| DdpDecodeError::Invalid {
                offset,
                what: "malformed config_rdma_req",
            })
    }
}

/// A `CONF_RDMA` call stating this client's requirements, encoded into `msg`.
pub fn call(msg: RegBuf, ours: ConfigRdmaReq) -> Result<CallRequest, BuildError> {
    let header = CallHeader {
        xid: 0,
        prog: CONFIG_RDMA_PROG,
        vers: CONFIG_RDMA_VERS,
        procedure: CONF_RDMA,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    };
    // An accepted reply header plus the three result words, with room for a verifier.
    let max_reply = 64 + ConfigRdmaReply::ENCODED_LEN as u32;
    Ok(inline_call(msg, &header, &Args(ours), max_reply)?.idempotent(true))
}

/// The server's configuration from a `CONF_RDMA` outcome.
pub fn reply(outcome: &Outcome) -> Result<ConfigRdmaReply, CcpCallError> {
    if outcome.status != CallStatus::Success {
        return Err(CcpCallError::Failed(outcome.status));
    }
    let results = OutcomeResults::new(outcome);
    let (_, mut c) = results.cursor().map_err(CcpCallError::Reply)?;
    let offset = c.position();
    let raw = c
        .opaque_fixed(ConfigRdmaReply::ENCODED_LEN)
        .map_err(CcpCallError::Decode)?;
    let r = ConfigRdmaReply::decode(raw).map_err(|_| {
        CcpCallError::Decode(DdpDecodeError::Invalid {
            offset,
            what: "malformed config_rdma_reply",
        })
    })?;
    c.finish().map_err(CcpCallError::Decode)?;
    Ok(r)
}

/// What a requester applies from the server's results: its largest inline call and its
/// receive-buffer alignment.
pub fn peer_config(r: &ConfigRdmaReply) -> PeerConfig {
    PeerConfig {
        max_inline_call: r.maxcall_sendsize,
        align: r.align,
    }
}
