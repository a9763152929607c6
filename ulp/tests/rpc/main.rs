//! ONC RPC v2 headers: vectors, typed errors, property tests and the serde form. One test
//! binary, one module per former file.

mod rpc_errors;
mod rpc_proptest;
mod rpc_serde;
mod rpc_vectors;
