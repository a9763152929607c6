//! Fuzzes the engine's real drivers over the `sim` provider against a rogue peer
//! (`rpcrdma::testing::sim_peer_fuzz`): a `Requester<Sim>` whose responder is a raw
//! queue pair answering with input-chosen replies, errors, chunk writes and reads and
//! disconnects, or a `Responder<Sim>` whose requester sends input-chosen calls, chunks
//! and garbage; sim faults and virtual time from the input too. Nothing may panic, every
//! accepted call gets exactly one outcome, keys die with their calls, pools come back
//! full, no registration outlives its connection, and the rogue's memory outside what
//! it exposed is never written.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rpcrdma::testing::sim_peer_fuzz::run(data);
});
