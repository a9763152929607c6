#![no_main]
//! Arbitrary bytes as what a local shm peer sends: a connection-manager message
//! (REQ/REP/REJ/RTU/DREQ) and an arena announcement. Nothing may panic, and whatever
//! decodes must re-encode to the same message.
use libfuzzer_sys::fuzz_target;
use rpcrdma::fabric::shm::fuzzing;

fuzz_target!(|data: &[u8]| {
    fuzzing::cm_message(data);
    fuzzing::announcement(data);
});
