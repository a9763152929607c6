//! A short description of the ONC RPC header (RFC 5531) that follows an RDMA_MSG or
//! RDMA_MSGP transport header.

use rpcrdma_ulp::rpc::{AcceptStatus, OpaqueAuth, Rejection, ReplyBody, RpcMessage};
use serde::Serialize;

/// What `decode` shows about the RPC message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum RpcSummary {
    /// A call header.
    Call {
        /// `xid`.
        xid: u32,
        /// Always `"CALL"`.
        #[serde(rename = "type")]
        kind: &'static str,
        /// Program number.
        prog: u32,
        /// Program version.
        vers: u32,
        /// Procedure number.
        proc: u32,
        /// Credential flavor name.
        cred: String,
        /// Offset of the procedure arguments in the input.
        args_offset: usize,
    },
    /// A reply header.
    Reply {
        /// `xid`.
        xid: u32,
        /// Always `"REPLY"`.
        #[serde(rename = "type")]
        kind: &'static str,
        /// `MSG_ACCEPTED` or `MSG_DENIED`.
        stat: &'static str,
        /// `accept_stat` or `reject_stat` name, with its details.
        status: String,
        /// Offset of the procedure results in the input.
        results_offset: usize,
    },
    /// The bytes after the transport header are not an RPC header.
    Undecodable {
        /// The decoder's complaint.
        error: String,
    },
}

fn flavor(a: &OpaqueAuth<'_>) -> String {
    a.flavor().to_string()
}

fn accept_status(s: &AcceptStatus) -> String {
    match s {
        AcceptStatus::Success => "SUCCESS".into(),
        AcceptStatus::ProgUnavail => "PROG_UNAVAIL".into(),
        AcceptStatus::ProgMismatch { low, high } => format!("PROG_MISMATCH {low}..{high}"),
        AcceptStatus::ProcUnavail => "PROC_UNAVAIL".into(),
        AcceptStatus::GarbageArgs => "GARBAGE_ARGS".into(),
        AcceptStatus::SystemErr => "SYSTEM_ERR".into(),
    }
}

fn rejection(r: &Rejection) -> String {
    match r {
        Rejection::RpcMismatch { low, high } => format!("RPC_MISMATCH {low}..{high}"),
        Rejection::AuthError(stat) => format!("AUTH_ERROR {stat}"),
    }
}

/// Summarises the RPC header at the start of `msg`, which sits at `base` in the input.
pub fn summarize(msg: &[u8], base: usize) -> RpcSummary {
    match RpcMessage::decode(msg) {
        Ok((RpcMessage::Call(c), at)) => RpcSummary::Call {
            xid: c.xid,
            kind: "CALL",
            prog: c.prog,
            vers: c.vers,
            proc: c.procedure,
            cred: flavor(&c.cred),
            args_offset: base + at,
        },
        Ok((RpcMessage::Reply(r), at)) => {
            let (stat, status) = match &r.body {
                ReplyBody::Accepted { status, .. } => ("MSG_ACCEPTED", accept_status(status)),
                ReplyBody::Denied(rej) => ("MSG_DENIED", rejection(rej)),
            };
            RpcSummary::Reply {
                xid: r.xid,
                kind: "REPLY",
                stat,
                status,
                results_offset: base + at,
            }
        }
        Err(e) => RpcSummary::Undecodable {
            error: e.to_string(),
        },
    }
}
