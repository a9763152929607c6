//! Transport-header and private-data codecs (`rpcrdma::wire`): one test binary, one
//! module per former file; filter by module, e.g. `cargo test -p rpcrdma --test wire ccp`.
//! The allocation counter (`wire_header_alloc`) is a binary of its own.

mod wire_ccp;
mod wire_header;
mod wire_header_json;
mod wire_header_prop;
mod wire_private_data;
