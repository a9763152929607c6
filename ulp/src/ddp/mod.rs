//! Direct Data Placement for upper layers (RFC 8166 §3.4, RFC 8267): encoding and
//! decoding RPC arguments and results whose DDP-eligible items travel in chunks.
//!
//! An upper-layer binding names the XDR items that are DDP-eligible. On the wire such an
//! item keeps its length word in the inline stream while its data moves to a chunk:
//!
//! - a call argument to a Read chunk whose *position* is the offset the data would have
//!   in the reconstructed message, counted from the first octet of the XID;
//! - a result to a Write chunk, paired with results in the order they appear
//!   (RFC 8267 §6.4.1).
//!
//! A chunk carries no XDR roundup and neither does the inline stream, but positions of
//! later Read chunks count it, because they are offsets in the XDR stream the receiver
//! reconstructs (RFC 8166 §3.4.5; RFC 5666 §3.7 describes the same stream and lets a
//! sender leave roundup in a chunk, which [`DdpCursor`] accepts).
//!
//! One encoder ([`DdpEncoder`], wrapped as [`CallEncoder`] by requesters) and one cursor
//! ([`DdpCursor`]) serve both directions, so a procedure's [`XdrCodec`] is written once.
//! Nothing here allocates: chunk data is borrowed, and the chunk lists are
//! [`DdpList`]s of at most [`MAX_DDP_ITEMS`].

mod call;
mod decode;
mod encode;
mod list;

pub use call::{encode_call, reply_results, CallEncoder, EncodedCall, ReplyError};
pub use decode::{DdpCursor, DdpDecodeError};
pub use encode::{DdpEncodeError, DdpEncoder, Encoded};
pub use list::{DdpList, ListFull, ReadItem, WriteItem, MAX_DDP_ITEMS};

/// The XDR codec of one procedure's arguments or results, written against the
/// DDP-aware encoder and cursor so that the same code serves requester and responder.
///
/// `'d` is the lifetime of the data: decoded values borrow the message and chunk memory,
/// and encoding records references to DDP-eligible data rather than copying it.
pub trait XdrCodec<'d>: Sized {
    /// Encodes the value.
    fn encode(&self, e: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError>;

    /// Decodes a value (the caller checks for leftovers with [`DdpCursor::finish`]).
    fn decode(c: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError>;
}

/// The empty argument or result list (`void`), e.g. of procedure 0 (NULL).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Void;

impl<'d> XdrCodec<'d> for Void {
    fn encode(&self, _: &mut DdpEncoder<'_, 'd>) -> Result<(), DdpEncodeError> {
        Ok(())
    }

    fn decode(_: &mut DdpCursor<'d>) -> Result<Self, DdpDecodeError> {
        Ok(Void)
    }
}
