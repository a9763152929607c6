//! The ULP layer: DDP positions, the dispatcher, the echo program, the NFS binding tables
//! and the service API end to end. One test binary, one module per former file. The
//! allocation counter (`ulp_alloc`) is a binary of its own.

#[path = "../support/mod.rs"]
mod support;

mod ulp_ddp;
mod ulp_dispatch;
mod ulp_echo_prop;
mod ulp_nfs_binding;
mod ulp_null_fast;
mod ulp_service_api;
mod ulp_service_e2e;
