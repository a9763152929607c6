//! [`NullProgram`]: a program with only procedure 0.

use crate::binding::ProcInfo;
use crate::ddp::{DdpCursor, DdpEncoder};
use crate::program::{ProcError, Program};
use crate::rpc::CallHeader;

use super::NULL_PROGRAM;

/// A program whose only procedure is NULL (answered by the dispatcher), so that a call to
/// it measures transport and dispatch alone. Any other procedure is PROC_UNAVAIL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NullProgram {
    prog: u32,
    low: u32,
    high: u32,
}

impl NullProgram {
    /// A null program with number `prog` and versions `low..=high`.
    pub const fn new(prog: u32, low: u32, high: u32) -> Self {
        NullProgram { prog, low, high }
    }
}

impl Default for NullProgram {
    /// Program [`NULL_PROGRAM`], version 1.
    fn default() -> Self {
        NullProgram::new(NULL_PROGRAM, 1, 1)
    }
}

impl Program for NullProgram {
    fn prog(&self) -> u32 {
        self.prog
    }

    fn versions(&self) -> (u32, u32) {
        (self.low, self.high)
    }

    fn proc_info(&self, _vers: u32, _procedure: u32) -> Option<&'static ProcInfo> {
        None
    }

    fn call<'d>(
        &'d mut self,
        _call: &CallHeader<'d>,
        _args: &mut DdpCursor<'d>,
        _results: &mut DdpEncoder<'_, 'd>,
    ) -> Result<(), ProcError> {
        Err(ProcError::ProcUnavail)
    }
}
