//! [`NfsCounters`]: calls per procedure and which chunk types they used, shared by
//! every connection's program instance (relaxed atomics: they are statistics).

use std::sync::atomic::{AtomicU64, Ordering};

use super::super::v3;

/// Counters of one procedure.
#[derive(Debug, Default)]
pub struct ProcCounters {
    /// Calls answered (any status).
    pub calls: AtomicU64,
    /// Calls answered with an NFS3ERR_* status.
    pub errors: AtomicU64,
    /// Calls whose DDP-eligible argument came in a Read chunk.
    pub read_chunks: AtomicU64,
    /// Replies whose DDP-eligible result went into a Write chunk.
    pub write_chunks: AtomicU64,
    /// Replies sent through the requester's Reply chunk.
    pub reply_chunks: AtomicU64,
}

/// A plain copy of [`ProcCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcCount {
    /// Calls answered.
    pub calls: u64,
    /// NFS3ERR_* answers.
    pub errors: u64,
    /// Read chunks used.
    pub read_chunks: u64,
    /// Write chunks used.
    pub write_chunks: u64,
    /// Reply chunks used.
    pub reply_chunks: u64,
}

impl ProcCounters {
    /// A snapshot.
    pub fn get(&self) -> ProcCount {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ProcCount {
            calls: l(&self.calls),
            errors: l(&self.errors),
            read_chunks: l(&self.read_chunks),
            write_chunks: l(&self.write_chunks),
            reply_chunks: l(&self.reply_chunks),
        }
    }
}

/// Counters of the NFSv3, NFSv4.1 and MOUNT programs.
#[derive(Debug)]
pub struct NfsCounters {
    /// NFSv3 procedures, indexed by number (NULL is answered by the dispatcher and
    /// counted only when it used chunks, which it never does).
    pub nfs: [ProcCounters; 22],
    /// MOUNT v3 procedures, indexed by number.
    pub mount: [ProcCounters; 6],
    /// NFSv4.1 COMPOUNDs: calls, and those with Read chunks or a Reply chunk (errors
    /// and Write chunks are counted per operation in [`nfs4`](Self::nfs4)).
    pub compounds: ProcCounters,
    /// NFSv4.1 operations, indexed by operation number (ILLEGAL is not counted).
    pub nfs4: [ProcCounters; 76],
    /// Calls refused for exceeding the chunk complexity limits (RFC 8267 §6.4.2).
    pub chunk_limit: AtomicU64,
    /// READs whose data the backend read straight into the registered buffer the engine
    /// RDMA-Wrote from (no copy in the server).
    pub zero_copy_reads: AtomicU64,
    /// Backchannel calls to NFSv4.1 clients (RFC 8881 §20), by callback procedure:
    /// [`CB_NULL`](super::backchannel::CB_NULL) (0) and
    /// [`CB_COMPOUND`](super::backchannel::CB_COMPOUND) (1), and (2,
    /// [`CB_RECALL_TAG`](super::backchannel::CB_RECALL_TAG)) those CB_COMPOUNDs that carry
    /// a CB_RECALL (counted under CB_COMPOUND as well). A CB_RECALL is answered when
    /// the client's CB_COMPOUND reply says NFS4_OK.
    pub callbacks: [CallbackCounters; 3],
    /// Read delegations granted by OPEN.
    pub delegations_granted: AtomicU64,
    /// Delegations returned with DELEGRETURN.
    pub delegations_returned: AtomicU64,
    /// Delegations revoked (a recall not honoured within a lease, or a failed CB_RECALL).
    pub delegations_revoked: AtomicU64,
}

/// Backchannel calls of one callback procedure.
#[derive(Debug, Default)]
pub struct CallbackCounters {
    /// Calls sent (submitted to the connection's backward direction).
    pub sent: AtomicU64,
    /// Calls answered with an accepted RPC reply, SUCCESS.
    pub answered: AtomicU64,
    /// Calls that failed: refused, an RPC error, a transport failure or no answer.
    pub failed: AtomicU64,
}

/// A plain copy of [`CallbackCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallbackCount {
    /// Sent.
    pub sent: u64,
    /// Answered with SUCCESS.
    pub answered: u64,
    /// Failed.
    pub failed: u64,
}

impl CallbackCounters {
    /// A snapshot.
    pub fn get(&self) -> CallbackCount {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CallbackCount {
            sent: l(&self.sent),
            answered: l(&self.answered),
            failed: l(&self.failed),
        }
    }
}

impl Default for NfsCounters {
    fn default() -> Self {
        NfsCounters {
            nfs: Default::default(),
            mount: Default::default(),
            compounds: ProcCounters::default(),
            nfs4: std::array::from_fn(|_| ProcCounters::default()),
            chunk_limit: AtomicU64::new(0),
            zero_copy_reads: AtomicU64::new(0),
            callbacks: Default::default(),
            delegations_granted: AtomicU64::new(0),
            delegations_returned: AtomicU64::new(0),
            delegations_revoked: AtomicU64::new(0),
        }
    }
}

impl NfsCounters {
    /// A snapshot of callback procedure `procedure` (0 CB_NULL, 1 CB_COMPOUND, 2 those
    /// carrying CB_RECALL).
    pub fn callback(&self, procedure: u32) -> CallbackCount {
        self.callbacks
            .get(procedure as usize)
            .map(CallbackCounters::get)
            .unwrap_or_default()
    }

    /// The backchannel calls by procedure, e.g. `CB_NULL sent 1 answered 1 failed 0,
    /// CB_COMPOUND sent 1 answered 1 failed 0, CB_RECALL sent 1 answered 1 failed 0;
    /// delegations granted 1 returned 1 revoked 0`.
    pub fn callback_line(&self) -> String {
        let f = |name: &str, c: CallbackCount| {
            format!(
                "{name} sent {} answered {} failed {}",
                c.sent, c.answered, c.failed
            )
        };
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "{}, {}, {}; delegations granted {} returned {} revoked {}",
            f("CB_NULL", self.callback(0)),
            f("CB_COMPOUND", self.callback(1)),
            f("CB_RECALL", self.callback(2)),
            l(&self.delegations_granted),
            l(&self.delegations_returned),
            l(&self.delegations_revoked)
        )
    }

    /// A snapshot of NFSv4 operation `op`.
    pub fn nfs4_op(&self, op: u32) -> ProcCount {
        self.nfs4
            .get(op as usize)
            .map(ProcCounters::get)
            .unwrap_or_default()
    }

    /// A snapshot of NFSv3 procedure `procedure`.
    pub fn nfs_proc(&self, procedure: u32) -> ProcCount {
        self.nfs
            .get(procedure as usize)
            .map(ProcCounters::get)
            .unwrap_or_default()
    }

    /// One line per procedure that was called, e.g.
    /// `READ 12 calls (0 errors; chunks: read 0, write 12, reply 0)`, NFS first, then
    /// MOUNT.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        let fmt = |prefix: &str, name: &str, c: ProcCount| {
            format!(
                "{prefix}{name} {} calls ({} errors; chunks: read {}, write {}, reply {})",
                c.calls, c.errors, c.read_chunks, c.write_chunks, c.reply_chunks
            )
        };
        for (i, p) in self.nfs.iter().enumerate() {
            let c = p.get();
            if c != ProcCount::default() {
                let name = v3::PROCEDURES.get(i).map_or("?", |p| p.name);
                out.push(fmt("NFS3 ", name, c));
            }
        }
        let compounds = self.compounds.get();
        if compounds != ProcCount::default() {
            out.push(format!(
                "NFS4 COMPOUND {} calls (chunks: read {}, reply {})",
                compounds.calls, compounds.read_chunks, compounds.reply_chunks
            ));
        }
        for (i, p) in self.nfs4.iter().enumerate() {
            let c = p.get();
            if c != ProcCount::default() {
                let name = super::super::v4::op_name(i as u32).unwrap_or("?");
                out.push(fmt("NFS4 ", name, c));
            }
        }
        for (i, p) in self.mount.iter().enumerate() {
            let c = p.get();
            if c != ProcCount::default() {
                let name = super::super::mount::PROCEDURES
                    .get(i)
                    .map_or("?", |p| p.name);
                out.push(fmt("MOUNT3 ", name, c));
            }
        }
        let direct = self.zero_copy_reads.load(Ordering::Relaxed);
        if direct > 0 {
            out.push(format!(
                "{direct} READs read by the backend straight into registered memory"
            ));
        }
        let refused = self.chunk_limit.load(Ordering::Relaxed);
        if refused > 0 {
            out.push(format!("{refused} calls refused over the chunk limits"));
        }
        out
    }
}

pub(crate) fn bump(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}
