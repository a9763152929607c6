//! Reply size estimation (RFC 8267 §3): the largest results a procedure can return, with
//! and without its DDP-eligible data moved to a Write chunk.

use rpcrdma::wire::xdr::pad4;

/// Octets of an accepted reply header with an empty (AUTH_NONE) verifier: xid, msg_type,
/// reply_stat, verifier flavor and length, accept_stat (RFC 5531 §9).
pub const ACCEPTED_REPLY_HEADER_LEN: u64 = 24;

/// Octets of the longest reply that carries no results with an empty verifier:
/// PROG_MISMATCH, which adds the supported version range to the accepted header. Denied
/// replies are shorter (RPC_MISMATCH 24, AUTH_ERROR 20).
pub const LONGEST_HEADER_ONLY_REPLY_LEN: u64 = ACCEPTED_REPLY_HEADER_LEN + 8;

/// How large a procedure's one variable-length data item can be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum DataBound {
    /// The results have no variable-length data item.
    None,
    /// The protocol bounds the item (e.g. NFSv2 `path<MAXPATHLEN>`, 1024 octets).
    Protocol(u32),
    /// The call names the most it wants back (READ `count`, READDIR `count`, the ECHO
    /// payload), or the client knows it from cached attributes (READLINK, RFC 8267 §3):
    /// the caller passes that bound.
    Requested,
    /// Nothing in the protocol bounds it (NFSv4 attributes, ACLs, RFC 8267 §5.2 and
    /// §6.2): the caller passes a negotiated limit (NFSv4.1 `ca_maxresponsesize`) or its
    /// own implementation limit, and may use short Reply chunk retry (RFC 8267 §3.1).
    Unbounded,
}

/// The largest results of a procedure, as RFC 8267 §3 asks a requester to estimate them
/// from the XDR definition.
///
/// The results are modelled as the arm that carries the variable-length item (`fixed`
/// octets plus the item's data and roundup) and the largest arm that does not
/// (`other_arms`, e.g. a failure arm with post-operation attributes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ReplySize {
    /// Octets of the largest results apart from the variable item's data and roundup
    /// (its length word included).
    pub fixed: u32,
    /// Bound of the variable item's data.
    pub data: DataBound,
    /// Whether the variable item is DDP-eligible, so that it leaves the inline reply when
    /// the requester offers a Write chunk for it.
    pub data_is_ddp: bool,
    /// Octets of the largest results without the variable item.
    pub other_arms: u32,
}

impl ReplySize {
    /// Results of exactly known maximum size: `octets` (0 for `void`).
    pub const fn fixed(octets: u32) -> Self {
        ReplySize {
            fixed: octets,
            data: DataBound::None,
            data_is_ddp: false,
            other_arms: 0,
        }
    }

    /// Results with a variable item: `fixed` octets besides its data in the arm that
    /// carries it, `other_arms` octets in the largest arm that does not.
    pub const fn with_data(
        fixed: u32,
        data: DataBound,
        data_is_ddp: bool,
        other_arms: u32,
    ) -> Self {
        ReplySize {
            fixed,
            data,
            data_is_ddp,
            other_arms,
        }
    }

    /// Octets of the variable item's data for a call that asked for `requested`.
    const fn data_len(&self, requested: u32) -> u64 {
        match self.data {
            DataBound::None => 0,
            DataBound::Protocol(max) => max as u64,
            DataBound::Requested | DataBound::Unbounded => requested as u64,
        }
    }

    /// Largest results, all inline, for a call that asked for `requested` octets of the
    /// variable item (ignored when the item's bound is in the protocol).
    pub const fn max_results(&self, requested: u32) -> u64 {
        let with = self.fixed as u64 + pad4(self.data_len(requested) as usize) as u64;
        if with > self.other_arms as u64 {
            with
        } else {
            self.other_arms as u64
        }
    }

    /// Largest results left inline when the requester offers a Write chunk for the
    /// variable item (if it is DDP-eligible): its data and roundup leave the reply.
    pub const fn max_inline_results(&self, requested: u32, write_chunk: bool) -> u64 {
        if write_chunk && self.data_is_ddp {
            if self.fixed > self.other_arms {
                self.fixed as u64
            } else {
                self.other_arms as u64
            }
        } else {
            self.max_results(requested)
        }
    }

    /// Largest RPC reply message (header and inline results) for a call that asked for
    /// `requested` octets, with or without a Write chunk for the variable item, when the
    /// responder's verifier body is at most `verf_body` octets (0 for AUTH_NONE). This is
    /// the size a requester compares with its receive inline threshold, together with the
    /// transport header, to decide whether to offer a Reply chunk.
    pub const fn max_reply_len(&self, requested: u32, write_chunk: bool, verf_body: u32) -> u64 {
        let verf = pad4(verf_body as usize) as u64;
        let success =
            ACCEPTED_REPLY_HEADER_LEN + verf + self.max_inline_results(requested, write_chunk);
        let header_only = LONGEST_HEADER_ONLY_REPLY_LEN + verf;
        if success > header_only {
            success
        } else {
            header_only
        }
    }
}
