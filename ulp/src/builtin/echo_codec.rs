//! Arguments and results of the echo program, as zero-copy [`XdrCodec`]s.
//!
//! ```text
//! struct echo_data { opaque data<ECHO_MAX_DATA>; };   /* data: DDP-eligible */
//! struct sink_res  { unsigned int len; unsigned int crc32c; };
//! struct source_args { unsigned int len; };           /* len <= ECHO_MAX_DATA */
//! struct echo2 {                                      /* a, b: DDP-eligible */
//!     opaque a<ECHO_MAX_DATA>;
//!     unsigned int tag;
//!     opaque b<ECHO_MAX_DATA>;
//! };
//! ```

use super::ECHO_MAX_DATA;
use crate::ddp::{DdpCursor, DdpDecodeError, DdpEncodeError, DdpEncoder, XdrCodec};

/// `echo_data`: the argument of ECHO and SINK, the result of ECHO and SOURCE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EchoData<'a> {
    /// The payload (DDP-eligible).
    pub data: &'a [u8],
}

// Inlined: ECHO's argument and result, encoded and decoded where the call is made and
// served, without an out-of-line call around a few dozen instructions.
impl<'d> XdrCodec<'d> for EchoData<'d> {
    #[inline(always)]
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        check_len(self.data)?;
        e.opaque_ddp(self.data)
    }

    #[inline(always)]
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        Ok(EchoData {
            data: c.opaque_ddp(ECHO_MAX_DATA)?,
        })
    }
}

/// `sink_res`: what SINK returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SinkRes {
    /// Octets received.
    pub len: u32,
    /// CRC32c (Castagnoli) of the octets received.
    pub crc32c: u32,
}

impl<'d> XdrCodec<'d> for SinkRes {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        e.u32(self.len)?;
        e.u32(self.crc32c)
    }

    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        Ok(SinkRes {
            len: c.u32()?,
            crc32c: c.u32()?,
        })
    }
}

/// `source_args`: how many octets SOURCE should return.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SourceArgs {
    /// Octets wanted, at most [`ECHO_MAX_DATA`].
    pub len: u32,
}

impl<'d> XdrCodec<'d> for SourceArgs {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        if self.len > ECHO_MAX_DATA {
            return Err(DdpEncodeError::TooLong {
                value: self.len as usize,
            });
        }
        e.u32(self.len)
    }

    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        let offset = c.position();
        let len = c.u32()?;
        if len > ECHO_MAX_DATA {
            return Err(DdpDecodeError::Invalid {
                offset,
                what: "SOURCE length exceeds ECHO_MAX_DATA",
            });
        }
        Ok(SourceArgs { len })
    }
}

/// `echo2`: the argument and result of ECHO2, with two DDP-eligible items at different
/// XDR positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Echo2<'a> {
    /// First payload (DDP-eligible).
    pub a: &'a [u8],
    /// A word between the payloads, so that the second sits after inline data.
    pub tag: u32,
    /// Second payload (DDP-eligible).
    pub b: &'a [u8],
}

impl<'d> XdrCodec<'d> for Echo2<'d> {
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        check_len(self.a)?;
        check_len(self.b)?;
        e.opaque_ddp(self.a)?;
        e.u32(self.tag)?;
        e.opaque_ddp(self.b)
    }

    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        Ok(Echo2 {
            a: c.opaque_ddp(ECHO_MAX_DATA)?,
            tag: c.u32()?,
            b: c.opaque_ddp(ECHO_MAX_DATA)?,
        })
    }
}

/// Refuses to encode what the other side would refuse to decode.
fn check_len(data: &[u8]) -> Result<(), DdpEncodeError> {
    if data.len() > ECHO_MAX_DATA as usize {
        return Err(DdpEncodeError::TooLong { value: data.len() });
    }
    Ok(())
}
