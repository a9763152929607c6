//! iWARP wire codecs: the sans-IO half of a software iWARP (`siw`) provider.
//!
//! The stack, bottom up, as it appears on a TCP byte stream:
//!
//! - [`mpa`] and [`handshake`]: MPA Request/Reply frames and the connection start-up
//!   exchange (RFC 5044 §7, enhanced mode of RFC 6581), driven by feeding received bytes.
//! - [`fpdu`]: MPA framing of one DDP segment (length, pad, CRC32c; RFC 5044 §4), the
//!   MULPDU computation, and contiguous encode/decode.
//! - [`segmenter`] splits an outbound message into FPDUs; [`reader`] parses an inbound byte
//!   stream into headers and payload slices for direct placement.
//! - [`ddp`] (RFC 5041) and [`rdmap`] (RFC 5040): the 14- or 18-octet segment header, the
//!   RDMA Read Request body; [`terminate`]: Terminate messages and error codes.
//! - [`crc32c`]: the Castagnoli CRC, hardware accelerated where the CPU allows.
//! - [`pcap`]: test support that wraps our bytes in synthetic TCP/IPv4 captures so that
//!   Wireshark can check them.
//!
//! Wire compatibility target: Linux `siw` (drivers/infiniband/sw/siw) and Wireshark's
//! `iwarp_mpa` / `iwarp_ddp_rdmap` dissectors. Nothing here allocates or locks except the
//! capture writer in [`pcap`].

pub mod crc32c;
pub mod ddp;
pub mod fpdu;
pub mod handshake;
pub mod mpa;
mod octets;
pub mod pcap;
pub mod rdmap;
pub mod reader;
pub mod segmenter;
pub mod terminate;
