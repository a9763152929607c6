//! Everything that needs a real RDMA device through the `verbs` provider (feature
//! `verbs`, `test = false`): the fabric conformance suite (`fabric_verbs_conformance`),
//! the engine's verbs-specific tests (`engine_verbs`) and the generic engine e2e tests
//! instantiated over verbs (`engine_verbs_*`, each loading its `tests/engine/` file).
//! tools/lab/verbs.sh builds this binary on the host and the guest runs it once per
//! module (`guest/verbs-conformance.sh`, `guest/verbs-engine.sh`), with
//! `RPCRDMA_VERBS_DEV` and `RPCRDMA_VERBS_IP` set. The modules pick their ports from the
//! process id independently, so run one module per process, as the lab does.

#[path = "../conformance/mod.rs"]
#[macro_use]
mod conformance;
#[path = "../engine_support/mod.rs"]
#[macro_use]
mod engine_support;

// Defined before the generic files are loaded, this textual-scope macro shadows the
// exported `per_provider!` there: the same test bodies, instantiated over verbs only.
macro_rules! per_provider {
    ($($name:ident),* $(,)?) => {
        mod verbs {
            $(
                #[test]
                fn $name() {
                    super::$name(super::engine_support::VerbsNet::from_env());
                }
            )*
        }
    };
}

mod engine_verbs;
mod engine_verbs_chunks;
mod engine_verbs_credits;
mod engine_verbs_disconnect;
mod engine_verbs_errors;
mod engine_verbs_group_memory;
mod engine_verbs_inline;
mod engine_verbs_read_chunk_replies;
mod engine_verbs_send_ddp;
mod engine_verbs_send_ddp_segments;
mod fabric_verbs_conformance;
