//! Wire codecs: XDR primitives and every RPC-over-RDMA message the engine puts on the wire.
//!
//! Decoders return zero-copy views over the received bytes; encoders write into caller
//! buffers. Nothing here allocates.

pub mod ccp;
pub(crate) mod copy;
pub mod header;
pub mod private_data;
pub mod rtr;
pub mod xdr;
