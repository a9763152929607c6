//! [`EchoProgram`]: payload procedures with DDP-eligible arguments and results.

use std::sync::Arc;

use rpcrdma::iwarp::crc32c::crc32c;
use rpcrdma::{RegBuf, RegBufError};

use super::echo_codec::{Echo2, EchoData, SinkRes, SourceArgs};
use super::pattern::fill_source_pattern;
use super::{echo_proc, ECHO_MAX_DATA, ECHO_PROGRAM, ECHO_VERSION};
use crate::binding::{DataBound, DdpEligible, ProcInfo, ReplySize};
use crate::ddp::{DdpCursor, DdpEncoder, XdrCodec};
use crate::program::{ProcError, Program};
use crate::rpc::CallHeader;

/// SOURCE's default limit: the size of the pattern buffer an [`EchoProgram`] keeps.
pub const DEFAULT_SOURCE_MAX: usize = 1 << 20;

const DATA: DdpEligible = DdpEligible {
    name: "echo_data.data",
    max_len: ECHO_MAX_DATA,
};
const A: DdpEligible = DdpEligible {
    name: "echo2.a",
    max_len: ECHO_MAX_DATA,
};
const B: DdpEligible = DdpEligible {
    name: "echo2.b",
    max_len: ECHO_MAX_DATA,
};

/// ECHO: the reply is the payload plus its length word; the requested size is the
/// payload length.
static ECHO: ProcInfo = ProcInfo {
    procedure: echo_proc::ECHO,
    name: "ECHO",
    ddp_args: &[DATA],
    ddp_results: &[DATA],
    reply: ReplySize::with_data(4, DataBound::Requested, true, 0),
    short_reply_retry: false,
    idempotent: true,
    reply_usually_small: false,
};

static SINK: ProcInfo = ProcInfo {
    procedure: echo_proc::SINK,
    name: "SINK",
    ddp_args: &[DATA],
    ddp_results: &[],
    reply: ReplySize::fixed(8),
    short_reply_retry: false,
    idempotent: true,
    reply_usually_small: false,
};

static DISCARD: ProcInfo = ProcInfo {
    procedure: echo_proc::DISCARD,
    name: "DISCARD",
    ddp_args: &[DATA],
    ddp_results: &[],
    reply: ReplySize::fixed(4),
    short_reply_retry: false,
    idempotent: true,
    reply_usually_small: false,
};

static SOURCE: ProcInfo = ProcInfo {
    procedure: echo_proc::SOURCE,
    name: "SOURCE",
    ddp_args: &[],
    ddp_results: &[DATA],
    reply: ReplySize::with_data(4, DataBound::Requested, true, 0),
    short_reply_retry: false,
    idempotent: true,
    reply_usually_small: false,
};

/// ECHO2: two length words and the tag, plus both payloads; the requested size is the
/// sum of the payload lengths. Each payload is rounded up on its own, which can add up
/// to four octets over rounding up the sum, hence 16 rather than 12.
static ECHO2: ProcInfo = ProcInfo {
    procedure: echo_proc::ECHO2,
    name: "ECHO2",
    ddp_args: &[A, B],
    ddp_results: &[A, B],
    reply: ReplySize::with_data(16, DataBound::Requested, true, 0),
    short_reply_retry: false,
    idempotent: true,
    reply_usually_small: false,
};

/// The echo program ([`ECHO_PROGRAM`], version [`ECHO_VERSION`]):
///
/// ```text
/// program ECHO_PROG {
///     version ECHO_VERS {
///         void        NULL(void)              = 0;
///         echo_data   ECHO(echo_data)         = 1;
///         sink_res    SINK(echo_data)         = 2;
///         echo_data   SOURCE(source_args)     = 3;
///         echo2       ECHO2(echo2)            = 4;
///     } = 1;
/// } = 0x2f000001;
/// ```
///
/// (types in [`EchoData`], [`SinkRes`], [`SourceArgs`], [`Echo2`]). ECHO and ECHO2 return
/// their arguments without copying them: the results reference the call's own data,
/// whether it arrived inline or in Read chunks. SOURCE returns the first `len` octets of
/// the [source pattern](super::source_byte) from a buffer filled once at construction;
/// asking for more than that buffer holds is SYSTEM_ERR (a server resource limit, not
/// malformed arguments). Clones share that buffer, so a server that gives each
/// connection a clone holds the pattern once, not once per connection.
///
/// Given registered memory ([`Program::attach_registered`]), SOURCE keeps a copy of the
/// pattern in one registered buffer of the connection and returns slices of it, which
/// the engine RDMA-Writes without copying (a result longer than that buffer comes from
/// the heap pattern and is copied as usual).
#[derive(Debug)]
pub struct EchoProgram {
    pattern: Arc<[u8]>,
    /// The pattern in a registered buffer of this connection (one per connection: a
    /// clone does not share it).
    registered: Option<[Arc<RegBuf>; 1]>,
}

impl Clone for EchoProgram {
    fn clone(&self) -> Self {
        EchoProgram {
            pattern: self.pattern.clone(),
            registered: None,
        }
    }
}

impl Default for EchoProgram {
    fn default() -> Self {
        Self::new()
    }
}

impl EchoProgram {
    /// An echo program whose SOURCE returns up to [`DEFAULT_SOURCE_MAX`] octets.
    pub fn new() -> Self {
        Self::with_source_max(DEFAULT_SOURCE_MAX)
    }

    /// An echo program whose SOURCE returns up to `max` octets (capped at
    /// [`ECHO_MAX_DATA`]).
    pub fn with_source_max(max: usize) -> Self {
        let mut pattern = vec![0u8; max.min(ECHO_MAX_DATA as usize)].into_boxed_slice();
        fill_source_pattern(&mut pattern);
        EchoProgram {
            pattern: pattern.into(),
            registered: None,
        }
    }

    /// Most octets SOURCE returns.
    pub fn source_max(&self) -> usize {
        self.pattern.len()
    }

    /// The declarations of an echo procedure.
    pub fn info(procedure: u32) -> Option<&'static ProcInfo> {
        match procedure {
            echo_proc::NULL => Some(&ProcInfo::NULL),
            echo_proc::ECHO => Some(&ECHO),
            echo_proc::SINK => Some(&SINK),
            echo_proc::SOURCE => Some(&SOURCE),
            echo_proc::ECHO2 => Some(&ECHO2),
            echo_proc::DISCARD => Some(&DISCARD),
            _ => None,
        }
    }
}

impl Program for EchoProgram {
    fn prog(&self) -> u32 {
        ECHO_PROGRAM
    }

    fn versions(&self) -> (u32, u32) {
        (ECHO_VERSION, ECHO_VERSION)
    }

    fn proc_info(&self, _vers: u32, procedure: u32) -> Option<&'static ProcInfo> {
        Self::info(procedure)
    }

    fn attach_registered(&mut self, alloc: &mut dyn FnMut() -> Result<RegBuf, RegBufError>) {
        if self.registered.is_some() || self.pattern.is_empty() {
            return;
        }
        // Without a buffer (an exhausted pool), SOURCE copies from the heap pattern.
        let Ok(mut buf) = alloc() else { return };
        let n = buf.capacity().min(self.pattern.len());
        if buf.fill(&self.pattern[..n]).is_ok() {
            self.registered = Some([Arc::new(buf)]);
        }
    }

    fn registered_results(&self) -> &[Arc<RegBuf>] {
        self.registered.as_ref().map_or(&[], |r| &r[..])
    }

    // ECHO (the procedure the benchmarks and nearly every call make) is decoded and
    // encoded here, the others out of line (`call_other`): a small function lets the
    // argument cursor's and the encoder's inline paths be inlined into it, without the
    // other arms' register saves.
    fn call<'d>(
        &'d mut self,
        call: &CallHeader<'d>,
        args: &mut DdpCursor<'d>,
        results: &mut DdpEncoder<'_, 'd>,
    ) -> Result<(), ProcError> {
        if call.procedure == echo_proc::ECHO {
            // No `args.finish()` first: ECHO acts on nothing, and the dispatcher checks
            // for leftovers after every procedure (GARBAGE_ARGS, the same answer).
            let a = EchoData::decode(args)?;
            a.encode(results)?;
            return Ok(());
        }
        self.call_other(call, args, results)
    }
}

impl EchoProgram {
    /// [`Program::call`] of every procedure but ECHO.
    #[inline(never)]
    fn call_other<'d>(
        &'d mut self,
        call: &CallHeader<'d>,
        args: &mut DdpCursor<'d>,
        results: &mut DdpEncoder<'_, 'd>,
    ) -> Result<(), ProcError> {
        match call.procedure {
            echo_proc::SINK => {
                let a = EchoData::decode(args)?;
                args.finish()?;
                SinkRes {
                    // Bounded by ECHO_MAX_DATA when decoded.
                    len: a.data.len() as u32,
                    crc32c: crc32c(a.data),
                }
                .encode(results)?;
            }
            echo_proc::SOURCE => {
                let a = SourceArgs::decode(args)?;
                args.finish()?;
                let len = a.len as usize;
                let data = match &self.registered {
                    Some([r]) if len <= r.len() => r.as_slice().get(..len),
                    _ => self.pattern.get(..len),
                }
                .ok_or(ProcError::SystemErr)?;
                EchoData { data }.encode(results)?;
            }
            echo_proc::ECHO2 => {
                let a = Echo2::decode(args)?;
                args.finish()?;
                a.encode(results)?;
            }
            echo_proc::DISCARD => {
                let a = EchoData::decode(args)?;
                args.finish()?;
                // Bounded by ECHO_MAX_DATA when decoded.
                results.u32(a.data.len() as u32)?;
            }
            _ => return Err(ProcError::ProcUnavail),
        }
        Ok(())
    }
}
