//! [`ProcInfo`]: what an upper-layer binding declares about one procedure.

use super::reply_size::{DataBound, ReplySize};

/// A DDP-eligible XDR data item (RFC 8166 §6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct DdpEligible {
    /// Where the item sits in the XDR definition, e.g. `"WRITE3args.data"`.
    pub name: &'static str,
    /// Most octets the item may hold (`u32::MAX` when the XDR leaves it unbounded).
    pub max_len: u32,
}

/// The per-procedure declarations of an upper-layer binding.
///
/// DDP-eligible items are listed in XDR order. Arguments are matched to Read chunks by
/// position, so any subset of them may be sent in chunks. Results are paired with Write
/// chunks in the order they occur in the results: for procedures with a fixed layout the
/// `n`th Write chunk a requester offers serves `ddp_results[n]`; for NFSv4 COMPOUND,
/// whose results are a sequence of operations, the list names the kinds of item and
/// [`nfs::v4::WriteChunkPairing`](crate::nfs::v4::WriteChunkPairing) does the pairing
/// (RFC 8267 §6.4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ProcInfo {
    /// Procedure number.
    pub procedure: u32,
    /// Procedure name as its specification spells it.
    pub name: &'static str,
    /// DDP-eligible argument items.
    pub ddp_args: &'static [DdpEligible],
    /// DDP-eligible result items.
    pub ddp_results: &'static [DdpEligible],
    /// How large the results can be.
    pub reply: ReplySize,
    /// Whether the binding allows short Reply chunk retry for this procedure (RFC 8267
    /// §3.1): resending with a larger Reply chunk, under a new XID, after a transport
    /// error. Elsewhere an undersized estimate is an implementation bug.
    pub short_reply_retry: bool,
    /// Whether running the procedure twice has the effect of running it once, so that a
    /// retransmission may simply run again (RFC 1813 §4.5 and Linux nfsd's
    /// `pc_cachetype` give the NFS answers). A server's duplicate request cache
    /// ([`Drc`](crate::program::Drc)) keeps the replies of procedures that are not, and
    /// only those. Declarations default to `false`: caching a reply needlessly costs a
    /// little memory, running a non-idempotent procedure twice by mistake corrupts state.
    pub idempotent: bool,
    /// The reply is usually small although its maximum is large, so a requester may
    /// leave the Reply chunk out and let a rare large reply come in a responder-provided
    /// Read chunk (draft-cel-nfsv4-rpcrdma-reliable-reply §5.3.1; see
    /// [`prefers_read_chunk_reply`](Self::prefers_read_chunk_reply)).
    pub reply_usually_small: bool,
}

impl ProcInfo {
    /// Procedure 0 of every program: no arguments, no results (RFC 5531 §12.1 shows the
    /// convention in its examples; every program this crate serves follows it).
    pub const NULL: ProcInfo = ProcInfo::plain(0, "NULL", ReplySize::fixed(0)).marked_idempotent();

    /// A procedure without DDP-eligible items or short Reply chunk retry, not declared
    /// idempotent.
    pub const fn plain(procedure: u32, name: &'static str, reply: ReplySize) -> ProcInfo {
        ProcInfo {
            procedure,
            name,
            ddp_args: &[],
            ddp_results: &[],
            reply,
            short_reply_retry: false,
            idempotent: false,
            reply_usually_small: false,
        }
    }

    /// This declaration with [`idempotent`](Self::idempotent) set.
    pub const fn marked_idempotent(self) -> ProcInfo {
        ProcInfo {
            idempotent: true,
            ..self
        }
    }

    /// This declaration with [`reply_usually_small`](Self::reply_usually_small) set.
    pub const fn marked_reply_usually_small(self) -> ProcInfo {
        ProcInfo {
            reply_usually_small: true,
            ..self
        }
    }

    /// Whether a requester should leave the Reply chunk out of this procedure's calls
    /// when the responder provides Read chunks for replies (the draft's §5.3.1: "when
    /// the maximum reply size is unknown or the reply is usually small"): its results'
    /// variable item is unbounded (NFSv4 COMPOUND, GETACL) or it is declared
    /// [`reply_usually_small`](Self::reply_usually_small). A requester under
    /// `ReplyChunks::PerCall` sets `CallRequest::prefers_read_chunk_reply` from it.
    pub const fn prefers_read_chunk_reply(&self) -> bool {
        self.reply_usually_small || matches!(self.reply.data, DataBound::Unbounded)
    }

    /// Whether any argument is DDP-eligible.
    pub const fn has_ddp_args(&self) -> bool {
        !self.ddp_args.is_empty()
    }

    /// Whether any result is DDP-eligible, i.e. whether Write chunks are useful.
    pub const fn has_ddp_results(&self) -> bool {
        !self.ddp_results.is_empty()
    }

    /// Largest RPC reply message for a call asking for `requested` octets of variable
    /// data; see [`ReplySize::max_reply_len`].
    pub const fn max_reply_len(&self, requested: u32, write_chunk: bool, verf_body: u32) -> u64 {
        self.reply.max_reply_len(requested, write_chunk, verf_body)
    }
}
