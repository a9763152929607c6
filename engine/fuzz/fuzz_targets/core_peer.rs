//! Fuzzes the protocol cores from the peer's side: a requester core and a responder core
//! back to back, the input choosing calls, Sends carried or mangled between them,
//! arbitrary received messages and completions (any wr_id, status, length), time and
//! disconnects (`rpcrdma::testing::peer_fuzz`). Nothing may panic, and no call may get two
//! outcomes (or, with only well-formed completions, none).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rpcrdma::testing::peer_fuzz::run(data);
});
