//! Upper-layer binding declarations (RFC 8166 §6, RFC 8267 §2–§4): for each procedure,
//! which XDR items are DDP-eligible and how large its reply can be.
//!
//! Requesters use these to decide what to move into Read chunks, which Write chunks to
//! offer and when to provide a Reply chunk; responders use the same declarations to know
//! which items may arrive in, or be returned through, chunks. [`with_keepalive`] points
//! the requester's keepalive probe at the program's own NULL procedure.

mod keepalive;
mod proc_info;
mod reply_size;

pub use keepalive::with_keepalive;
pub use proc_info::{DdpEligible, ProcInfo};
pub use reply_size::{
    DataBound, ReplySize, ACCEPTED_REPLY_HEADER_LEN, LONGEST_HEADER_ONLY_REPLY_LEN,
};
