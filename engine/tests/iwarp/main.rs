//! The iWARP codecs (`rpcrdma::iwarp`: MPA, DDP, RDMAP, Terminate): one test binary, one
//! module per former file. The allocation counter (`iwarp_alloc`) is a binary of its own.

mod iwarp_handshake;
mod iwarp_proptest;
mod iwarp_stream;
mod iwarp_terminate;
mod iwarp_tshark;
mod iwarp_vectors;
