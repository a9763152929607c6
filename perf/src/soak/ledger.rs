//! The soak's ledger program: one procedure that is not idempotent, so that the server's
//! duplicate request cache has something to do and the soak can prove it did it.
//!
//! RECORD carries echo data whose first eight octets are the call's soak tag (unique
//! per call for the whole run). The server marks each tag in a bitmap as it runs the
//! call and counts a call that finds its tag already marked: a retransmission that ran
//! twice, which a working cache prevents (within one server process; a server killed
//! with SIGKILL loses its cache and its bitmap together, as a real server's memory
//! would). It answers with the data, like ECHO, so the client checks the reply as
//! usual. The bitmap is one bit per tag (2 MB per 16 M calls) behind a lock taken once
//! per RECORD: this is a test program, not a hot path.

use std::sync::{Arc, Mutex, PoisonError};

use rpcrdma::{CallRequest, RegBuf};
use rpcrdma_ulp::binding::{DataBound, ProcInfo, ReplySize};
use rpcrdma_ulp::builtin::EchoData;
use rpcrdma_ulp::client::{inline_call, BuildError};
use rpcrdma_ulp::ddp::{DdpCursor, DdpEncoder, XdrCodec};
use rpcrdma_ulp::program::{Drc, DrcConfig, ProcError, Program};
use rpcrdma_ulp::rpc::{CallHeader, OpaqueAuth};

/// The ledger's program number (RFC 5531 §8.3's local range).
pub const LEDGER_PROGRAM: u32 = 0x2000_0110;
/// Its only version.
pub const LEDGER_VERSION: u32 = 1;
/// RECORD: mark the tag, echo the data. Not idempotent.
pub const RECORD: u32 = 1;

/// The largest RECORD data: its reply stays inline, where the cache keeps replies.
pub const MAX_RECORD: usize = 1024;

static RECORD_INFO: ProcInfo = ProcInfo::plain(
    RECORD,
    "RECORD",
    ReplySize::with_data(4, DataBound::Requested, false, 0),
);

/// What a ledger server saw, shared by every connection's program instance.
#[derive(Debug, Default)]
pub struct Ledger {
    seen: Mutex<Vec<u64>>,
    twice: std::sync::atomic::AtomicU64,
}

impl Ledger {
    /// Marks `tag`; true if it was marked already.
    fn mark(&self, tag: u64) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let (word, bit) = ((tag / 64) as usize, 1u64 << (tag % 64));
        if seen.len() <= word {
            seen.resize(word + 1, 0);
        }
        let was = seen[word] & bit != 0;
        seen[word] |= bit;
        was
    }

    /// Calls that ran twice.
    pub fn ran_twice(&self) -> u64 {
        self.twice.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// One connection's instance of the ledger program.
pub struct LedgerProgram {
    ledger: Arc<Ledger>,
    drc: Option<Arc<Drc>>,
}

impl LedgerProgram {
    /// An instance over the server's shared ledger and, if `cached`, its reply cache.
    pub fn new(ledger: Arc<Ledger>, drc: Arc<Drc>, cached: bool) -> Self {
        LedgerProgram {
            ledger,
            drc: cached.then_some(drc),
        }
    }
}

/// The reply cache a ledger server shares between its connections.
pub fn reply_cache() -> Arc<Drc> {
    Arc::new(Drc::new(DrcConfig::default()))
}

impl Program for LedgerProgram {
    fn prog(&self) -> u32 {
        LEDGER_PROGRAM
    }

    fn versions(&self) -> (u32, u32) {
        (LEDGER_VERSION, LEDGER_VERSION)
    }

    fn proc_info(&self, _vers: u32, procedure: u32) -> Option<&'static ProcInfo> {
        (procedure == RECORD).then_some(&RECORD_INFO)
    }

    fn call<'d>(
        &'d mut self,
        call: &CallHeader<'d>,
        args: &mut DdpCursor<'d>,
        results: &mut DdpEncoder<'_, 'd>,
    ) -> Result<(), ProcError> {
        if call.procedure != RECORD {
            return Err(ProcError::ProcUnavail);
        }
        let a = EchoData::decode(args)?;
        args.finish()?;
        let tag = a
            .data
            .first_chunk::<8>()
            .map(|t| u64::from_le_bytes(*t))
            .ok_or_else(|| {
                // The tag is the data's first eight octets (after its length word).
                let short = rpcrdma::wire::xdr::XdrError::Truncated {
                    offset: 4,
                    needed: 8,
                    available: a.data.len(),
                };
                ProcError::GarbageArgs(short.into())
            })?;
        if self.ledger.mark(tag) {
            self.ledger
                .twice
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        a.encode(results)?;
        Ok(())
    }

    fn reply_cache(&self) -> Option<Arc<Drc>> {
        self.drc.clone()
    }
}

/// A RECORD call of `data` (its first eight octets the tag, at most [`MAX_RECORD`]).
pub fn record(msg: RegBuf, data: &[u8]) -> Result<CallRequest, BuildError> {
    let header = CallHeader {
        xid: 0,
        prog: LEDGER_PROGRAM,
        vers: LEDGER_VERSION,
        procedure: RECORD,
        cred: OpaqueAuth::None,
        verf: OpaqueAuth::None,
    };
    let max_reply = RECORD_INFO.max_reply_len(data.len() as u32, false, 0) as u32;
    inline_call(msg, &header, &EchoData { data }, max_reply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rpcrdma_ulp::ddp::encode_call;
    use rpcrdma_ulp::program::{Dispatched, Dispatcher, InboundCall};

    /// Sends one RECORD (XID 7, tag 42) to `d` twice, as a retransmission would.
    fn record_twice(d: &mut Dispatcher) {
        let mut data = vec![0u8; 64];
        data[..8].copy_from_slice(&42u64.to_le_bytes());
        let header = CallHeader {
            xid: 7,
            prog: LEDGER_PROGRAM,
            vers: LEDGER_VERSION,
            procedure: RECORD,
            cred: OpaqueAuth::None,
            verf: OpaqueAuth::None,
        };
        let mut msg = vec![0u8; 256];
        let len = encode_call(&mut msg, &header, &EchoData { data: &data }, 4096)
            .expect("encodes")
            .len;
        for _ in 0..2 {
            let mut out = vec![0u8; 512];
            let r = d.dispatch(&InboundCall::inline(&msg[..len]), &mut out);
            assert!(matches!(r, Ok(Dispatched::Reply(_))), "answered: {r:?}");
        }
    }

    fn ledger_server(cached: bool) -> (Dispatcher, Arc<Ledger>, Arc<Drc>) {
        let (book, drc) = (Arc::new(Ledger::default()), reply_cache());
        let mut d = Dispatcher::new();
        d.register(Box::new(LedgerProgram::new(
            book.clone(),
            drc.clone(),
            cached,
        )))
        .expect("registers");
        (d, book, drc)
    }

    #[test]
    fn the_cache_answers_a_retransmitted_record_without_running_it() {
        let (mut d, book, drc) = ledger_server(true);
        record_twice(&mut d);
        assert_eq!(book.ran_twice(), 0);
        assert_eq!(drc.stats().hits, 1, "the second was replayed");
    }

    #[test]
    fn without_the_cache_the_ledger_sees_a_record_run_twice() {
        let (mut d, book, drc) = ledger_server(false);
        record_twice(&mut d);
        assert_eq!(book.ran_twice(), 1);
        assert_eq!(drc.stats().hits, 0);
    }

    #[test]
    fn a_record_without_its_tag_is_garbage() {
        let (mut d, book, _) = ledger_server(true);
        let header = CallHeader {
            xid: 9,
            prog: LEDGER_PROGRAM,
            vers: LEDGER_VERSION,
            procedure: RECORD,
            cred: OpaqueAuth::None,
            verf: OpaqueAuth::None,
        };
        let mut msg = vec![0u8; 256];
        let len = encode_call(&mut msg, &header, &EchoData { data: &[1, 2, 3] }, 4096)
            .expect("encodes")
            .len;
        let mut out = vec![0u8; 512];
        match d.dispatch(&InboundCall::inline(&msg[..len]), &mut out) {
            // accept_stat GARBAGE_ARGS (4) is the reply's sixth word.
            Ok(Dispatched::Reply(r)) => assert_eq!(&out[..r.len][20..24], &4u32.to_be_bytes()),
            other => panic!("{other:?}"),
        }
        assert_eq!(book.ran_twice(), 0);
    }
}
