//! Device discovery and opening.
//!
//! Devices come from `rdma_get_devices`, not `ibv_open_device`: RDMA-CM binds its
//! connection ids to its own verbs contexts, and a queue pair must live in the context
//! of the id it is connected through, so the provider uses those contexts for everything.

use std::ffi::CStr;
use std::io;
use std::mem::MaybeUninit;
use std::sync::Arc;

use rdma_sys::{
    ___ibv_query_port, ibv_context, ibv_device_attr, ibv_device_cap_flags, ibv_get_device_name,
    ibv_port_attr, ibv_port_state, ibv_query_device, ibv_transport_type, ibv_wc_flags,
    rdma_free_devices, rdma_get_devices,
};

use crate::fabric::Device;
use crate::fabric::{DeviceCaps, FabricError, PrivateDataLimits};

use super::cm::VerbsCm;
use super::cq::VerbsCq;
use super::pd::VerbsPd;
use super::VerbsProvider;

/// RDMA-CM private-data limits on InfiniBand and RoCE: a connect request carries 56
/// bytes after RDMA-CM's own header, a reply 196, a reject 148 (IBTA CM REQ/REP/REJ).
pub(crate) const IB_CONNECT_PRIVATE_DATA: usize = 56;
/// See [`IB_CONNECT_PRIVATE_DATA`].
pub(crate) const IB_ACCEPT_PRIVATE_DATA: usize = 196;
/// See [`IB_CONNECT_PRIVATE_DATA`].
pub(crate) const IB_REJECT_PRIVATE_DATA: usize = 148;
/// iWARP through RDMA-CM: Linux siw accepts at most 256 octets of MPA private data
/// (`MPA_MAX_PRIVDATA`), and when it sends a revision 2 frame it adds the 4 RFC 6581
/// IRD/ORD octets to the caller's length in an 8-bit variable, so 252 or more wraps and
/// the frame's PD_Length no longer matches what follows (seen in the lab: the peer
/// reports the connection unreachable). 251 is the most that arrives intact.
pub(crate) const IWARP_PRIVATE_DATA: usize = 251;

/// The transport a device speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// InfiniBand or RoCE (rxe).
    InfiniBand,
    /// iWARP (siw).
    Iwarp,
    /// Anything else libibverbs reports.
    Other,
}

/// What [`list_devices`] reports about one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device name (`rxe0`, `siw0`, `mlx5_0`).
    pub name: String,
    /// Its transport.
    pub transport: Transport,
    /// Memory windows it supports (0: no fast registration from userspace).
    pub max_mw: u32,
    /// Whether it binds type-2 memory windows, which the provider's fast registration uses.
    pub mw_type2: bool,
    /// Most scatter-gather entries of an RDMA Read sink.
    pub max_sge_rd: u32,
    /// Largest message or RDMA transfer (port 1).
    pub max_msg_size: u32,
    /// Whether port 1 is active.
    pub port_active: bool,
}

/// Everything the provider's objects share about their device; freed last.
pub(crate) struct DeviceShared {
    list: *mut *mut ibv_context,
    pub(crate) ctx: *mut ibv_context,
    pub(crate) attr: ibv_device_attr,
    pub(crate) info: DeviceInfo,
    /// `wc_flags` bits meaning "the peer invalidated a key" in receive completions.
    pub(crate) with_inv_flags: u32,
}

/// Kernel siw's vendor id (`SIW_VENDOR_ID`, ASCII "bmt").
const SIW_VENDOR_ID: u32 = 0x62_6d74;
/// rxe's vendor id (`RXE_VENDOR_ID`).
const RXE_VENDOR_ID: u32 = 0xff_ffff;
/// The kernel's internal `IB_WC_WITH_INVALIDATE` (bit 2), which rxe (through at least
/// Linux 6.1) copies into userspace completions where `IBV_WC_WITH_INV` (bit 3) belongs;
/// userspace would read it as `IBV_WC_IP_CSUM_OK`, which no RC receive carries.
const RXE_KERNEL_WITH_INVALIDATE: u32 = 1 << 2;

/// Flags that report a remote invalidation on this device.
fn with_inv_flags(attr: &ibv_device_attr, transport: Transport) -> u32 {
    let mut f = ibv_wc_flags::IBV_WC_WITH_INV.0;
    if attr.vendor_id == RXE_VENDOR_ID && transport == Transport::InfiniBand {
        f |= RXE_KERNEL_WITH_INVALIDATE;
    }
    f
}

// SAFETY: libibverbs contexts may be used from any thread (every verbs call is
// thread-safe); the list and attribute copy are only read after construction.
unsafe impl Send for DeviceShared {}
// SAFETY: as above.
unsafe impl Sync for DeviceShared {}

impl Drop for DeviceShared {
    fn drop(&mut self) {
        if self.is_kernel_siw() {
            unplug_siw(self.ctx);
        }
        // SAFETY: `list` came from rdma_get_devices and is freed once; every object
        // using the context holds an Arc to this, so none is left.
        unsafe { rdma_free_devices(self.list) }
    }
}

/// Mapping offsets the siw plug must cover: libsiw (rdma-core 44) takes a queue whose
/// mapping key is `SIW_INVAL_UOBJ_KEY` (0x90000, `rdma/siw-abi.h`) for one the kernel
/// could not map, and fails the creation without setting errno. Kernel siw (since its
/// queues went through `rdma_user_mmap_entry`, Linux 5.x) hands out keys that are page
/// offsets in the context's mapping space, first fit from 0, so the queue mapped at
/// page 0x90 (the 145th page) gets exactly that key: in the lab the clients' process
/// failed its 19th connection's `ibv_create_cq` that way (a stale EAGAIN from a
/// non-blocking CM read was all errno held).
const SIW_PLUG_PAGES: u64 = 0x90 + 1;
/// Octets of one entry of a kernel siw completion queue (`struct siw_cqe`).
const SIW_CQE_LEN: u64 = 32;

/// The siw plugs: per context, its queue and the devices using the context.
struct SiwPlug {
    ctx: usize,
    cq: usize,
    users: usize,
}

static SIW_PLUGS: std::sync::Mutex<Vec<SiwPlug>> = std::sync::Mutex::new(Vec::new());

/// Takes the mapping offsets up to and including page 0x90 of `ctx` with one completion
/// queue that lives while a device of this process uses the context (libsiw checks a
/// queue's key only where its mapping starts, and this one starts below): made with
/// the context's first device, before any queue, it starts at offset 0. About 1 MiB of
/// kernel memory, mapped once per process; nothing uses it. Best effort: where it
/// cannot be made, the queue that lands on page 0x90 fails as before (reported as a
/// provider failure with no errno).
fn plug_siw_invalid_key(ctx: *mut ibv_context) {
    let mut plugs = SIW_PLUGS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(p) = plugs.iter_mut().find(|p| p.ctx == ctx as usize) {
        p.users += 1;
        return;
    }
    let entries = (SIW_PLUG_PAGES * 4096).div_ceil(SIW_CQE_LEN) as i32;
    // SAFETY: the context is live while a device holds its list; no channel, no
    // vector. Destroyed by the context's last device (`unplug_siw`).
    let cq = unsafe {
        rdma_sys::ibv_create_cq(ctx, entries, std::ptr::null_mut(), std::ptr::null_mut(), 0)
    };
    plugs.push(SiwPlug {
        ctx: ctx as usize,
        cq: cq as usize,
        users: 1,
    });
}

/// A device of `ctx` is going: the last one destroys the context's plug.
fn unplug_siw(ctx: *mut ibv_context) {
    let mut plugs = SIW_PLUGS.lock().unwrap_or_else(|p| p.into_inner());
    let Some(k) = plugs.iter().position(|p| p.ctx == ctx as usize) else {
        return;
    };
    plugs[k].users -= 1;
    if plugs[k].users == 0 {
        let p = plugs.swap_remove(k);
        if p.cq != 0 {
            // SAFETY: made by `plug_siw_invalid_key` on this context, destroyed once,
            // never used otherwise.
            unsafe { rdma_sys::ibv_destroy_cq(p.cq as *mut rdma_sys::ibv_cq) };
        }
    }
}

impl DeviceShared {
    /// Whether the device is iWARP (no RNR retry, no connectionless QP exchange).
    pub(crate) fn is_iwarp(&self) -> bool {
        self.info.transport == Transport::Iwarp
    }

    /// Whether this is kernel soft-iWARP, which writes no remote-invalidation report
    /// (neither the `SIW_WQE_REM_INVAL` flag nor the key) into completions of a
    /// userspace completion queue, only of a kernel one: libsiw would map it to
    /// `IBV_WC_WITH_INV` but never sees it. So [`DeviceCaps`]'s
    /// `reports_remote_invalidation` is false there.
    pub(crate) fn is_kernel_siw(&self) -> bool {
        self.is_iwarp()
            && (self.attr.vendor_id == SIW_VENDOR_ID || self.info.name.starts_with("siw"))
    }

    /// Largest private data for a connect, accept or reject on this transport.
    pub(crate) fn private_data_limit(&self, kind: PrivateDataKind) -> usize {
        if self.is_iwarp() {
            return IWARP_PRIVATE_DATA;
        }
        match kind {
            PrivateDataKind::Connect => IB_CONNECT_PRIVATE_DATA,
            PrivateDataKind::Accept => IB_ACCEPT_PRIVATE_DATA,
            PrivateDataKind::Reject => IB_REJECT_PRIVATE_DATA,
        }
    }

    pub(crate) fn max_sge_rd(&self) -> u32 {
        self.info.max_sge_rd.max(1)
    }
}

/// Which connection message private data rides in.
#[derive(Debug, Clone, Copy)]
pub(crate) enum PrivateDataKind {
    Connect,
    Accept,
    Reject,
}

fn no_devices() -> FabricError {
    FabricError::Os {
        op: "rdma_get_devices",
        err: io::Error::new(
            io::ErrorKind::NotFound,
            "no RDMA device: load a driver (e.g. rdma_rxe or siw and `rdma link add`) or \
             use another provider",
        ),
    }
}

/// The device list and its length; the list must be freed with rdma_free_devices.
fn device_list() -> Result<(*mut *mut ibv_context, usize), FabricError> {
    let mut n = 0;
    // SAFETY: rdma_get_devices writes the count and returns a NULL-terminated array it
    // allocated (or NULL).
    let list = unsafe { rdma_get_devices(&mut n) };
    if list.is_null() {
        return Err(no_devices());
    }
    let n = usize::try_from(n).unwrap_or(0);
    if n == 0 {
        // SAFETY: non-null list from rdma_get_devices, freed once.
        unsafe { rdma_free_devices(list) };
        return Err(no_devices());
    }
    Ok((list, n))
}

/// Queries one context.
///
/// # Safety
/// `ctx` must be a live context from rdma_get_devices.
unsafe fn describe(ctx: *mut ibv_context) -> Result<(ibv_device_attr, DeviceInfo), FabricError> {
    let mut attr = MaybeUninit::<ibv_device_attr>::zeroed();
    // SAFETY: ctx is live (caller); attr is writable memory of the right type.
    if unsafe { ibv_query_device(ctx, attr.as_mut_ptr()) } != 0 {
        return Err(FabricError::last_os("ibv_query_device"));
    }
    // SAFETY: ibv_query_device filled it; the all-zero pattern was valid already.
    let attr = unsafe { attr.assume_init() };
    // SAFETY: a live context's device pointer and its name (a NUL-terminated string
    // owned by libibverbs for the device's lifetime).
    let name = unsafe { CStr::from_ptr(ibv_get_device_name((*ctx).device)) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: as above.
    let transport = match unsafe { (*(*ctx).device).transport_type } {
        ibv_transport_type::IBV_TRANSPORT_IB => Transport::InfiniBand,
        ibv_transport_type::IBV_TRANSPORT_IWARP => Transport::Iwarp,
        _ => Transport::Other,
    };
    let mut port = MaybeUninit::<ibv_port_attr>::zeroed();
    // SAFETY: ctx is live; port is writable memory of the right type and size.
    if unsafe { ___ibv_query_port(ctx, 1, port.as_mut_ptr()) } != 0 {
        return Err(FabricError::last_os("ibv_query_port"));
    }
    // SAFETY: filled by the query; all-zero was valid already.
    let port = unsafe { port.assume_init() };
    let flags = ibv_device_cap_flags(attr.device_cap_flags);
    let mw_type2 =
        attr.max_mw > 0 && flags.0 & ibv_device_cap_flags::IBV_DEVICE_MEM_WINDOW_TYPE_2B.0 != 0;
    let info = DeviceInfo {
        name,
        transport,
        max_mw: attr.max_mw.max(0) as u32,
        mw_type2,
        max_sge_rd: attr.max_sge_rd.max(0) as u32,
        max_msg_size: port.max_msg_sz,
        port_active: port.state == ibv_port_state::IBV_PORT_ACTIVE,
    };
    Ok((attr, info))
}

/// Every RDMA device RDMA-CM can use. Fails with a clear error when there is none (no
/// driver loaded, or the process cannot reach `/dev/infiniband`).
pub fn list_devices() -> Result<Vec<DeviceInfo>, FabricError> {
    let (list, n) = device_list()?;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: i < n entries of the array rdma_get_devices returned.
        let ctx = unsafe { *list.add(i) };
        // SAFETY: a context from that array, alive until the list is freed below.
        match unsafe { describe(ctx) } {
            Ok((_, info)) => out.push(info),
            Err(e) => {
                // SAFETY: freed once, nothing refers to it any more.
                unsafe { rdma_free_devices(list) };
                return Err(e);
            }
        }
    }
    // SAFETY: freed once, nothing refers to it any more.
    unsafe { rdma_free_devices(list) };
    Ok(out)
}

/// True when at least one RDMA device is usable (the provider was built in, since this
/// function exists only with the `verbs` feature).
pub fn available() -> bool {
    list_devices().map(|l| !l.is_empty()).unwrap_or(false)
}

/// An opened verbs device.
pub struct VerbsDevice {
    pub(crate) shared: Arc<DeviceShared>,
}

impl std::fmt::Debug for VerbsDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsDevice")
            .field("info", &self.shared.info)
            .finish()
    }
}

impl VerbsDevice {
    /// Opens the device called `name` (as `ibv_devices` lists it).
    pub fn open(name: &str) -> Result<VerbsDevice, FabricError> {
        let (list, n) = device_list()?;
        let mut names = Vec::new();
        for i in 0..n {
            // SAFETY: i < n entries of the array rdma_get_devices returned.
            let ctx = unsafe { *list.add(i) };
            // SAFETY: a context from that array, alive until the list is freed.
            let described = unsafe { describe(ctx) };
            match described {
                Ok((attr, info)) if info.name == name => {
                    let shared = Arc::new(DeviceShared {
                        list,
                        ctx,
                        with_inv_flags: with_inv_flags(&attr, info.transport),
                        attr,
                        info,
                    });
                    if shared.is_kernel_siw() {
                        plug_siw_invalid_key(ctx);
                    }
                    return Ok(VerbsDevice { shared });
                }
                Ok((_, info)) => names.push(info.name),
                Err(_) => {}
            }
        }
        // SAFETY: freed once; no context of it was handed out.
        unsafe { rdma_free_devices(list) };
        Err(FabricError::Os {
            op: "open RDMA device",
            err: io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "no RDMA device named {name:?}; present: {}",
                    names.join(", ")
                ),
            ),
        })
    }

    /// Opens the first device.
    pub fn open_first() -> Result<VerbsDevice, FabricError> {
        let first = list_devices()?.into_iter().next().ok_or_else(no_devices)?;
        VerbsDevice::open(&first.name)
    }

    /// What the device is.
    pub fn info(&self) -> &DeviceInfo {
        &self.shared.info
    }
}

fn clamp(v: i32) -> u32 {
    v.max(0) as u32
}

impl Device for VerbsDevice {
    type P = VerbsProvider;

    fn caps(&self) -> DeviceCaps {
        let a = &self.shared.attr;
        DeviceCaps {
            max_qp_wr: clamp(a.max_qp_wr),
            max_sge: clamp(a.max_sge),
            max_mr: clamp(a.max_mr),
            max_cq_depth: clamp(a.max_cqe),
            max_msg_size: self.shared.info.max_msg_size,
            private_data: PrivateDataLimits {
                connect: self.shared.private_data_limit(PrivateDataKind::Connect),
                accept: self.shared.private_data_limit(PrivateDataKind::Accept),
                reject: self.shared.private_data_limit(PrivateDataKind::Reject),
                // IB CM REJ has no length field; iw_cm passes the MPA PD_Length through.
                reject_padded: !self.shared.is_iwarp(),
            },
            rnr_retry: !self.shared.is_iwarp(),
            fast_reg: self.shared.info.mw_type2,
            send_completes_on_transmit: self.shared.is_iwarp(),
            // The kernel's devices pick their own status for several faults.
            exact_error_statuses: false,
            // Kernel siw, the iWARP device we can test, checks neither (seen in the
            // conformance suite); other iWARP devices are assumed no better.
            invalidate_checks_generation: !self.shared.is_iwarp(),
            read_checks_access: !self.shared.is_iwarp(),
            reports_remote_invalidation: !self.shared.is_kernel_siw(),
            // ibv_reg_mr pins the pages: the device keeps writing to them even if the
            // process's mapping were given new ones.
            release_registered: false,
            peer_maps_registrations: false,
            places_in_poll: false,
            rdma_round_trip: true,
            max_srq_wr: if a.max_srq > 0 {
                clamp(a.max_srq_wr)
            } else {
                0
            },
            srq_checks_qp_domain: true,
        }
    }

    fn alloc_pd(&self) -> Result<VerbsPd, FabricError> {
        VerbsPd::new(&self.shared)
    }

    fn create_cq(&self, depth: u32) -> Result<VerbsCq, FabricError> {
        VerbsCq::new(&self.shared, depth)
    }

    fn create_cm(&self) -> Result<VerbsCm, FabricError> {
        VerbsCm::new(&self.shared)
    }
}
