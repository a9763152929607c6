//! Built-in programs for tests, benchmarks and interoperability checks.
//!
//! - [`NullProgram`]: a program with only procedure 0, to measure the bare round trip.
//! - [`EchoProgram`]: ECHO, SINK, SOURCE and ECHO2 over DDP-eligible opaque payloads, to
//!   exercise every chunk shape (Read chunks at one or several positions, Write chunks,
//!   long messages).
//! - [`CcpProgram`]: the RFC 5666 §6 Connection Configuration Protocol (CONF_RDMA), for
//!   RFC 5666-era peers.
//!
//! The private program numbers come from the range 0x20000000–0x3fffffff, which RFC 5531
//! §8.3 leaves to the local administrator: fine inside one deployment, not for
//! interoperating with strangers.

mod ccp;
mod echo;
mod echo_codec;
mod null;
mod pattern;

pub use ccp::CcpProgram;
pub use echo::{EchoProgram, DEFAULT_SOURCE_MAX};
pub use echo_codec::{Echo2, EchoData, SinkRes, SourceArgs};
pub use null::NullProgram;
pub use pattern::{fill_source_pattern, is_source_pattern, source_byte};

/// Program number of [`NullProgram`] by default.
pub const NULL_PROGRAM: u32 = 0x2f00_0000;

/// Program number of [`EchoProgram`].
pub const ECHO_PROGRAM: u32 = 0x2f00_0001;

/// The only version of [`EchoProgram`].
pub const ECHO_VERSION: u32 = 1;

/// Largest payload any echo procedure accepts or returns (16 MiB).
pub const ECHO_MAX_DATA: u32 = 1 << 24;

/// Procedure numbers of [`EchoProgram`].
pub mod echo_proc {
    /// NULL: no arguments, no results.
    pub const NULL: u32 = 0;
    /// ECHO: returns its `opaque data<>` argument.
    pub const ECHO: u32 = 1;
    /// SINK: returns the length and CRC32c of its `opaque data<>` argument.
    pub const SINK: u32 = 2;
    /// SOURCE: returns the requested number of octets of the source pattern.
    pub const SOURCE: u32 = 3;
    /// ECHO2: returns its two opaques and the word between them.
    pub const ECHO2: u32 = 4;
    /// DISCARD: returns the length of its `opaque data<>` argument and nothing about
    /// its octets, which it never reads: a bandwidth sink costing nothing per octet
    /// (SINK's CRC is a second pass over the data).
    pub const DISCARD: u32 = 5;
}
