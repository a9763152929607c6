//! `verbs`: the provider over rdma-core (libibverbs and librdmacm, through `rdma-sys`),
//! for real RDMA devices and the kernel's software ones (rxe, siw). Built with the
//! `verbs` cargo feature.
//!
//! # Mapping
//!
//! | fabric | verbs |
//! | --- | --- |
//! | [`VerbsDevice::open`] | `rdma_get_devices` (RDMA-CM's contexts), `ibv_query_device`/`_port` |
//! | `alloc_pd`, `reg_mr` | `ibv_alloc_pd`, `ibv_reg_mr` (plus `IBV_ACCESS_MW_BIND` where windows exist) |
//! | `alloc_fast_mr`, `FastReg`, `LocalInvalidate` | `ibv_alloc_mw(IBV_MW_TYPE_2)`, `IBV_WR_BIND_MW` with the caller's key, `IBV_WR_LOCAL_INV` |
//! | `SendWithInvalidate` | `IBV_WR_SEND_WITH_INV`; the receiver sees `IBV_WC_WITH_INV` |
//! | `create_cq`, `poll` | `ibv_create_cq`; `ibv_poll_cq` in batches of up to 32 |
//! | `post_send`, `post_recv` | one `ibv_post_send`/`ibv_post_recv` per chain, from preallocated arrays; small Sends and Writes inline (`max_inline_data`) |
//! | connection manager | `rdma_create_event_channel` (non-blocking fd), `rdma_resolve_addr`/`_route`, `rdma_connect`, `rdma_accept`, `rdma_reject`, `rdma_disconnect` |
//!
//! Every `ibv_wc_status` maps to a [`WcStatus`](crate::fabric::WcStatus) (see
//! [`wc_status`]). The fabric's queue depths are enforced by the provider (the device
//! may round its queues up), and completions report the caller's `wr_id` and opcode
//! even when verbs leaves the opcode undefined (failed requests). Requests posted to a
//! queue pair already in error complete as flushed without reaching the device.
//!
//! # Fast registration without memory windows (siw)
//!
//! Userspace verbs has no `IB_WR_REG_MR`; the userspace equivalent of per-RPC fast
//! registration with rkey rotation is a type-2 memory window bound on the send queue,
//! which rxe supports (`max_mw` > 0, `MEM_WINDOW_TYPE_2B`). siw has no memory windows
//! (`max_mw` = 0) and no userspace fast registration; `ibv_rereg_mr` is not implemented
//! by siw either. There `alloc_fast_mr` fails with [`FabricError::Exhausted`] naming the
//! missing windows, and an upper layer registers each chunk with
//! [`ProtectionDomain::reg_mr`](crate::fabric::ProtectionDomain::reg_mr) instead: one
//! `ibv_reg_mr` and one `ibv_dereg_mr` system call per RPC (page pinning: measured in the
//! TCG lab on siw0, about 70 µs per register-and-deregister for 4 KiB, 90 µs for 64 KiB
//! and 560 µs for 1 MiB, where a window bind is one work request and no system call),
//! with a key the device chooses (so no key rotation under the caller's
//! control), and the registration dies by deregistration rather than by invalidation.
//!
//! # Transport differences the provider cannot hide
//!
//! - InfiniBand/RoCE carry at most 56 bytes of private data in a connect request and
//!   148 in a reject, and the receiver sees the whole fixed-size field (zero padded),
//!   not the sender's length; iWARP carries exact lengths.
//! - iWARP has no receiver-not-ready retry: a Send finding no receive is a fatal error
//!   for the connection, whatever `rnr_retry` says.
//! - iWARP RDMA Read sinks take one scatter entry (`max_sge_rd` = 1 on siw): the
//!   provider splits a Read into one Read per entry, of consecutive remote ranges.
//!
//! # Threads
//!
//! All objects may move between threads. A fast-registration slot must be bound by one
//! queue pair at a time (the window's current key lives in the shared `ibv_mw`).
//!
//! [`FabricError::Exhausted`]: crate::fabric::FabricError::Exhausted

mod addr;
mod cm;
mod cq;
mod device;
mod keytable;
mod pd;
mod qp;
mod ring;
mod rnr;
mod sendwr;
mod srq;
mod status;

pub use addr::VerbsAddr;
pub use cm::{VerbsCm, VerbsConnRequest};
pub use cq::{VerbsCq, POLL_BATCH};
pub use device::{available, list_devices, DeviceInfo, Transport, VerbsDevice};
pub use pd::{VerbsMr, VerbsPd};
pub use qp::VerbsQp;
pub use rnr::min_rnr_timer_code;
pub use srq::VerbsSrq;
pub use status::{wc_opcode, wc_status};

use crate::fabric::Provider;

/// The verbs provider's family of types.
#[derive(Debug)]
pub enum VerbsProvider {}

impl Provider for VerbsProvider {
    const NAME: &'static str = "verbs";
    type Device = VerbsDevice;
    type Pd = VerbsPd;
    type Mr = VerbsMr;
    type Cq = VerbsCq;
    type Qp = VerbsQp;
    type Srq = VerbsSrq;
    type Cm = VerbsCm;
    type ConnRequest = VerbsConnRequest;
    type Addr = VerbsAddr;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a machine without RDMA devices (the build host, CI) opening fails with an
    /// error that says why, instead of crashing or hanging.
    #[test]
    fn missing_devices_are_reported_clearly() {
        match VerbsDevice::open("rpcrdma-no-such-device") {
            Ok(d) => panic!("opened a device that does not exist: {d:?}"),
            Err(e) => {
                let msg = e.to_string();
                assert!(
                    msg.contains("no RDMA device"),
                    "unclear error for a missing device: {msg}"
                );
            }
        }
        match list_devices() {
            Ok(list) => {
                assert!(available());
                assert!(list.iter().all(|d| !d.name.is_empty()));
            }
            Err(e) => {
                assert!(!available());
                assert!(e.to_string().contains("no RDMA device"), "{e}");
            }
        }
    }
}
