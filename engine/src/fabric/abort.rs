//! Why a peer ended a connection abruptly, in words every provider can use: an iWARP
//! Terminate (RFC 5040 §7, RFC 5041 §7), a verbs asynchronous error, a shared-memory
//! peer's broken ring. The protocol core and the public API see only this; the
//! provider-specific form (e.g. [`TerminateReason`](crate::iwarp::terminate::TerminateReason)
//! with its layout) stays with the provider.

use core::fmt;

use crate::iwarp::terminate::TerminateCode;

/// What class of failure the peer reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AbortKind {
    /// The peer's memory protection refused an access: an invalid, stale or foreign
    /// key, an access right missing, or a range outside the registration (iWARP: RDMAP
    /// remote protection errors and DDP tagged buffer errors).
    Protection,
    /// The peer could not carry out an operation: no receive posted, a message longer
    /// than the receive, an unexpected opcode (iWARP: RDMAP remote operation errors and
    /// DDP untagged buffer errors).
    Operation,
    /// The peer failed internally (iWARP: local catastrophic errors).
    Catastrophic,
    /// The transport under the RDMA layer broke: framing, CRC, markers (iWARP: MPA).
    Transport,
    /// A code the provider does not classify.
    Other,
}

/// Where the peer stopped, when it said.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AbortSite {
    /// An untagged message (a Send or a Read Request).
    Message {
        /// The receive queue it was for.
        queue: u32,
        /// Its sequence number on that queue.
        msn: u32,
    },
    /// A tagged access (an RDMA Write or Read Response) to the peer's memory.
    Memory {
        /// The key it named.
        key: u32,
        /// The offset it targeted.
        offset: u64,
    },
}

/// Whose code book a [`PeerAbort::code`] is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AbortSource {
    /// An iWARP Terminate: `code` is layer << 12 | error type << 8 | error code
    /// (RFC 5040 §7.2, RFC 5041 §7, RFC 5044 §8).
    Iwarp,
    /// A provider that gives no code: only [`PeerAbort::kind`] says anything.
    Unspecified,
}

/// A peer's abort of the connection.
///
/// Kept to three words: it travels inside every failed call's
/// [`TransportError`](crate::requester::TransportError), so its texts are looked up from
/// `source` and `code` when shown rather than carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerAbort {
    /// What class of failure.
    pub kind: AbortKind,
    /// Whose code book `code` is from.
    pub source: AbortSource,
    /// Where the peer stopped, if it said.
    pub site: Option<AbortSite>,
    /// The provider's own code (see [`AbortSource`]).
    pub code: u32,
}

impl PeerAbort {
    /// An abort with only a class, for providers that know no more.
    pub const fn of_kind(kind: AbortKind) -> PeerAbort {
        PeerAbort {
            kind,
            source: AbortSource::Unspecified,
            site: None,
            code: 0,
        }
    }

    /// The provider's name for the failure class (e.g. "RDMAP remote protection error").
    pub fn what(&self) -> &'static str {
        match self.source {
            AbortSource::Iwarp => self.iwarp_code().kind_text(),
            AbortSource::Unspecified => match self.kind {
                AbortKind::Protection => "remote protection error",
                AbortKind::Operation => "remote operation error",
                AbortKind::Catastrophic => "peer failed",
                AbortKind::Transport => "transport failed",
                AbortKind::Other => "peer aborted",
            },
        }
    }

    /// The provider's description of the code; empty when it has none.
    pub fn detail(&self) -> &'static str {
        match self.source {
            AbortSource::Iwarp => match self.iwarp_code() {
                TerminateCode::Unknown { .. } => "",
                c => c.code_text(),
            },
            AbortSource::Unspecified => "",
        }
    }

    fn iwarp_code(&self) -> TerminateCode {
        let c = self.code;
        TerminateCode::from_parts((c >> 12) as u8 & 0xf, (c >> 8) as u8 & 0xf, c as u8)
    }
}

impl fmt::Display for PeerAbort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.what())?;
        let detail = self.detail();
        if !detail.is_empty() {
            write!(f, ": {detail}")?;
        } else if self.kind == AbortKind::Other && self.source != AbortSource::Unspecified {
            write!(f, " (code {:#06x})", self.code)?;
        }
        match self.site {
            Some(AbortSite::Message { queue, msn }) => write!(f, " (MSN {msn}, queue {queue})"),
            Some(AbortSite::Memory { key, offset }) => {
                write!(f, " (STag {key:#010x}, TO {offset:#x})")
            }
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::iwarp::terminate::{TerminateCode, TerminateReason};

    #[test]
    fn unclassified_codes_show_their_number() {
        let a = PeerAbort::from(TerminateReason::bare(TerminateCode::Unknown {
            layer: 3,
            etype: 1,
            code: 5,
        }));
        assert_eq!((a.kind, a.code), (AbortKind::Other, 0x3105));
        assert_eq!(a.to_string(), "unassigned Terminate error (code 0x3105)");
        let b = PeerAbort::of_kind(AbortKind::Catastrophic);
        assert_eq!(b.to_string(), "peer failed");
        // Three words at most: it rides in every failed call's status.
        assert!(core::mem::size_of::<PeerAbort>() <= 24);
    }
}
