//! The engine (protocol core, drivers, server, poller tasks) end to end over shm, sim and
//! siw (`per_provider!`), and the cores driven by hand. One test binary, one module per
//! former file, e.g. `cargo test -p rpcrdma --test engine chunks`.
//!
//! Not here: `engine_alloc` (a counting global allocator, a binary of its own) and the
//! same tests over the verbs provider (`tests/verbs`, lab only).

#[path = "../engine_support/mod.rs"]
#[macro_use]
mod engine_support;

mod engine_backchannel;
mod engine_chunks;
mod engine_continuation;
mod engine_core;
mod engine_core_boundary;
mod engine_credits;
mod engine_disconnect;
mod engine_early_calls;
mod engine_errors;
mod engine_faults;
mod engine_groups;
mod engine_groups_pools;
mod engine_groups_srq;
mod engine_held_calls;
mod engine_inline;
mod engine_poller;
mod engine_read_chunk_replies;
mod engine_registration;
mod engine_send_ddp;
mod engine_send_ddp_reply_segments;
mod engine_send_ddp_segments;
mod engine_server_limits;
mod engine_service_api;
mod engine_shm_hostile;
mod engine_signaling;
mod engine_sim_random;
mod engine_swi_unreported;
