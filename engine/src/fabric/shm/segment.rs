//! The per-direction connection segment: a small shareable mapping created by the side
//! whose send queue feeds it, mapped by its peer.
//!
//! It holds the request ring (initiator → target, in posting order), the initiator's
//! "failed" flag and its count of announced arenas. Acks are coalesced: the ring's tail,
//! which the target advances past every request it has finished, acknowledges them all
//! at once; the one request that can fail (a NAK moves both sides to the error state, so
//! nothing after it executes) is named in a NAK record beside the tail, written before
//! the tail moves past it. Every shared counter sits on its own 128-byte block so that
//! the two sides never write the same cache line (or adjacent-line prefetch pair).

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use rpcrdma_pools::{Arena, ArenaOptions, HugePages};

use super::ring::{Consumer, Pod, Producer, RingMem};
use crate::fabric::error::FabricError;

/// Most scatter-gather entries one request carries.
pub(crate) const MAX_SGE: usize = 8;
/// Most slots in a ring (bounds what a peer can make us trust).
pub(crate) const MAX_SLOTS: u32 = 1 << 16;

const MAGIC: u64 = u64::from_le_bytes(*b"RRSHMSEG");
const VERSION: u32 = 2;
const LINE: usize = 128;
const OFF_FLAGS: usize = LINE;
const OFF_REQ_HEAD: usize = 2 * LINE;
/// The tail, then the NAK record (both written by the target only).
const OFF_REQ_TAIL: usize = 3 * LINE;
const OFF_NAK_SSN: usize = OFF_REQ_TAIL + 8;
const OFF_NAK_STATUS: usize = OFF_REQ_TAIL + 16;
const OFF_REQ_SLOTS: usize = 4 * LINE;

/// Request opcodes in [`ReqSlot::op`].
pub(crate) mod op {
    pub const SEND: u32 = 1;
    pub const SEND_INV: u32 = 2;
    pub const WRITE: u32 = 3;
    pub const READ: u32 = 4;
}

/// NAK statuses in the NAK record.
pub(crate) mod ack {
    pub const OK: u32 = 0;
    pub const RNR_EXCEEDED: u32 = 1;
    pub const REMOTE_ACCESS: u32 = 2;
    pub const REMOTE_INVALID: u32 = 3;
    pub const REMOTE_OP: u32 = 4;
}

/// A scatter-gather entry translated by the initiator: bytes at `offset` in the
/// initiator's arena number `arena`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct WireSge {
    pub arena: u32,
    pub len: u32,
    pub offset: u64,
}

/// One request (192 bytes: three cache lines).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ReqSlot {
    pub op: u32,
    pub num_sge: u32,
    /// Send sequence number, echoed by the ack.
    pub ssn: u64,
    /// Target address (Write, Read).
    pub remote_addr: u64,
    /// Sum of the entries' lengths.
    pub total_len: u32,
    /// rkey (Write, Read) or key to invalidate (Send With Invalidate).
    pub key: u32,
    pub _pad: [u64; 4],
    pub sge: [WireSge; MAX_SGE],
}

/// Bytes of a request before its scatter-gather entries.
const REQ_HEADER: usize = std::mem::offset_of!(ReqSlot, sge);

// SAFETY: a repr(C) struct of integers and arrays of integers.
unsafe impl Pod for ReqSlot {
    /// Copies the header and the entries in use only: a one-entry request moves two
    /// cache lines instead of three.
    #[inline]
    unsafe fn store(dst: *mut Self, v: &Self) {
        let n = (v.num_sge as usize).min(MAX_SGE);
        let len = REQ_HEADER + n * std::mem::size_of::<WireSge>();
        // SAFETY: len <= size_of::<ReqSlot>(); dst is valid for a whole slot.
        unsafe {
            std::ptr::copy_nonoverlapping((v as *const Self).cast::<u8>(), dst.cast::<u8>(), len)
        }
    }

    #[inline]
    unsafe fn load(src: *const Self) -> Self {
        let mut v = ReqSlot::default();
        let dst = (&mut v as *mut Self).cast::<u8>();
        // SAFETY: src is valid for a whole slot; the header is copied first and the
        // entry count it holds is clamped before it sizes the second copy.
        unsafe {
            std::ptr::copy_nonoverlapping(src.cast::<u8>(), dst, REQ_HEADER);
            let n = (v.num_sge as usize).min(MAX_SGE);
            std::ptr::copy_nonoverlapping(
                src.cast::<u8>().add(REQ_HEADER),
                dst.add(REQ_HEADER),
                n * std::mem::size_of::<WireSge>(),
            );
        }
        v
    }
}
const _: () = assert!(std::mem::size_of::<ReqSlot>() == 192);
const _: () = assert!(REQ_HEADER == 64);

#[repr(C)]
struct Header {
    magic: u64,
    version: u32,
    req_slots: u32,
    req_slot_size: u32,
}

/// A mapped connection segment.
#[derive(Clone)]
pub(crate) struct Segment {
    map: Arc<Arena>,
    slots: u32,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("len", &self.map.len())
            .field("slots", &self.slots)
            .finish()
    }
}

fn layout_len(slots: u32) -> usize {
    let s = slots as usize;
    OFF_REQ_SLOTS + s * std::mem::size_of::<ReqSlot>()
}

impl Segment {
    /// Creates a segment whose rings have `slots` slots (a power of two).
    pub(crate) fn create(slots: u32) -> Result<Segment, FabricError> {
        if !slots.is_power_of_two() || slots > MAX_SLOTS {
            return Err(FabricError::InvalidCaps {
                what: "ring slots",
                requested: slots,
                max: MAX_SLOTS,
            });
        }
        let opts = ArenaOptions::new(layout_len(slots))
            .shareable(true)
            .hugepages(HugePages::Never)
            .name("rpcrdma-shm-seg");
        let map = Arena::new(&opts).map_err(|e| FabricError::Os {
            op: "create connection segment",
            err: std::io::Error::other(e.to_string()),
        })?;
        let h = Header {
            magic: MAGIC,
            version: VERSION,
            req_slots: slots,
            req_slot_size: std::mem::size_of::<ReqSlot>() as u32,
        };
        // SAFETY: the fresh mapping is at least layout_len bytes, page aligned, and not
        // yet visible to anyone else.
        unsafe { map.base().cast::<Header>().write(h) };
        Ok(Segment {
            map: Arc::new(map),
            slots,
        })
    }

    /// Maps a segment the peer created and checks its header.
    pub(crate) fn open(fd: OwnedFd, len: u64) -> Result<Segment, FabricError> {
        let len = usize::try_from(len).map_err(|_| FabricError::Protocol("segment length"))?;
        if len < OFF_REQ_SLOTS {
            return Err(FabricError::Protocol("segment too short"));
        }
        let map = Arena::from_fd(fd, len).map_err(|e| FabricError::Os {
            op: "map peer segment",
            err: std::io::Error::other(e.to_string()),
        })?;
        // SAFETY: the mapping is at least OFF_REQ_SLOTS bytes and page aligned; Header
        // is plain integers, valid for any bytes.
        let h = unsafe { map.base().cast::<Header>().read_volatile() };
        if h.magic != MAGIC || h.version != VERSION {
            return Err(FabricError::Protocol("bad segment magic or version"));
        }
        if h.req_slot_size as usize != std::mem::size_of::<ReqSlot>() {
            return Err(FabricError::Protocol("segment slot sizes differ"));
        }
        if !h.req_slots.is_power_of_two()
            || h.req_slots > MAX_SLOTS
            || layout_len(h.req_slots) > map.len()
        {
            return Err(FabricError::Protocol("bad segment ring sizes"));
        }
        Ok(Segment {
            map: Arc::new(map),
            slots: h.req_slots,
        })
    }

    /// Descriptor to pass to the peer.
    pub(crate) fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.map.fd()
    }

    /// Mapping length to tell the peer.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    fn at<T>(&self, off: usize) -> *mut T {
        // Every offset used is inside layout_len(slots) <= map.len().
        self.map.base().wrapping_add(off).cast()
    }

    /// The initiator's "my queue pair failed" flag.
    pub(crate) fn failed(&self) -> &AtomicU32 {
        // SAFETY: OFF_FLAGS is inside the mapping, 128-byte aligned, and lives as long as
        // `self.map`; atomics in shared memory are how both sides talk.
        unsafe { &*self.at::<AtomicU32>(OFF_FLAGS) }
    }

    /// How many arenas the initiator has announced on its announcement socket.
    pub(crate) fn arenas_announced(&self) -> &AtomicU32 {
        // SAFETY: as for `failed`, four bytes further.
        unsafe { &*self.at::<AtomicU32>(OFF_FLAGS + 4) }
    }

    /// True when the initiator flagged its queue pair as failed.
    #[inline]
    pub(crate) fn has_failed(&self) -> bool {
        self.failed().load(Ordering::Acquire) != 0
    }

    /// Flags the initiator's queue pair as failed.
    pub(crate) fn set_failed(&self) {
        self.failed().store(1, Ordering::Release);
    }

    fn req_mem(&self) -> RingMem {
        RingMem {
            head: self.at::<AtomicU64>(OFF_REQ_HEAD),
            tail: self.at::<AtomicU64>(OFF_REQ_TAIL),
            slots: self.at::<u8>(OFF_REQ_SLOTS),
            cap: u64::from(self.slots),
        }
    }

    /// The request ring's producer (the initiator's poster).
    pub(crate) fn req_producer(&self) -> Producer<ReqSlot> {
        // SAFETY: the layout was checked against the mapping length; one producer.
        unsafe { Producer::new(self.map.clone(), self.req_mem()) }
    }

    /// The request ring's consumer (the target's executor).
    pub(crate) fn req_consumer(&self) -> Consumer<ReqSlot> {
        // SAFETY: as above; one consumer.
        unsafe { Consumer::new(self.map.clone(), self.req_mem()) }
    }

    /// The initiator's view of what the target has finished.
    pub(crate) fn acks(&self) -> Acks {
        Acks {
            tail: self.at::<AtomicU64>(OFF_REQ_TAIL),
            head: self.at::<AtomicU64>(OFF_REQ_HEAD),
            nak_ssn: self.at::<AtomicU64>(OFF_NAK_SSN),
            nak_status: self.at::<AtomicU32>(OFF_NAK_STATUS),
            _map: self.map.clone(),
        }
    }

    /// Records that request `ssn` failed with `status` (target side). The caller then
    /// moves the tail past it, which publishes the record.
    pub(crate) fn post_nak(&self, ssn: u64, status: u32) {
        // SAFETY: both fields are inside the mapping, aligned, and live as long as it.
        unsafe {
            (*self.at::<AtomicU32>(OFF_NAK_STATUS)).store(status, Ordering::Relaxed);
            (*self.at::<AtomicU64>(OFF_NAK_SSN)).store(ssn + 1, Ordering::Relaxed);
        }
    }
}

/// The request ring's tail and NAK record as the initiator reads them: coalesced acks.
pub(crate) struct Acks {
    _map: Arc<Arena>,
    tail: *const AtomicU64,
    head: *const AtomicU64,
    nak_ssn: *const AtomicU64,
    nak_status: *const AtomicU32,
}

// SAFETY: the pointers target the mapping `_map` keeps alive; only loads go through them.
unsafe impl Send for Acks {}

/// What the target has acknowledged so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AckState {
    /// Requests finished (acked or NAKed): every ssn below this.
    pub done: u64,
    /// The NAKed request's ssn plus one, or zero.
    pub nak_ssn1: u64,
    /// Its NAK status.
    pub nak_status: u32,
}

impl Acks {
    /// Reads the tail, then the NAK record it publishes. `None` if the target claims to
    /// have finished requests never published.
    #[inline]
    pub(crate) fn read(&self) -> Option<AckState> {
        // SAFETY: the counters live in the mapping kept alive by `_map`.
        unsafe {
            let done = (*self.tail).load(Ordering::Acquire);
            // The head is ours: only this process writes it.
            if done > (*self.head).load(Ordering::Relaxed) {
                return None;
            }
            Some(AckState {
                done,
                nak_ssn1: (*self.nak_ssn).load(Ordering::Relaxed),
                nak_status: (*self.nak_status).load(Ordering::Relaxed),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rings_pass_slots_between_two_mappings() {
        let a = Segment::create(4).unwrap();
        let fd = a.fd().unwrap().try_clone_to_owned().unwrap();
        let b = Segment::open(fd, a.len() as u64).unwrap();
        let mut p = a.req_producer();
        let mut c = b.req_consumer();
        assert!(c.peek().unwrap().is_none());
        assert_eq!(p.room(), Ok(4));
        for i in 0..4 {
            p.push(ReqSlot {
                ssn: i,
                ..ReqSlot::default()
            });
        }
        assert_eq!(p.room(), Ok(0));
        assert!(
            c.peek().unwrap().is_none(),
            "nothing visible before publish"
        );
        p.publish();
        for i in 0..4 {
            assert_eq!(c.peek().unwrap().map(|s| s.ssn), Some(i));
            c.advance();
        }
        assert!(c.peek().unwrap().is_none());
        assert_eq!(p.room(), Ok(0), "slots come back only on release");
        c.release();
        assert_eq!(p.room(), Ok(4));
        b.set_failed();
        assert!(a.has_failed());
    }

    #[test]
    fn corrupt_counters_are_detected() {
        let a = Segment::create(2).unwrap();
        let mut c = a.req_consumer();
        // A hostile producer claims ten slots in flight in a two-slot ring.
        // SAFETY: test-only poke at the shared head counter.
        unsafe { (*a.req_mem().head).store(10, Ordering::Release) };
        assert!(c.peek().is_err());
        // A hostile target acknowledges requests never published.
        // SAFETY: as above, on the head (nothing published) and the tail.
        unsafe {
            (*a.req_mem().head).store(0, Ordering::Release);
            (*a.req_mem().tail).store(1, Ordering::Release);
        }
        assert_eq!(a.acks().read(), None);
    }

    #[test]
    fn tail_acknowledges_and_the_nak_record_names_the_failure() {
        let a = Segment::create(4).unwrap();
        let fd = a.fd().unwrap().try_clone_to_owned().unwrap();
        let b = Segment::open(fd, a.len() as u64).unwrap();
        let mut p = a.req_producer();
        let mut c = b.req_consumer();
        let acks = a.acks();
        let none = AckState {
            done: 0,
            nak_ssn1: 0,
            nak_status: 0,
        };
        assert_eq!(acks.read(), Some(none));
        for _ in 0..3 {
            p.push(ReqSlot::default());
        }
        p.publish();
        for _ in 0..2 {
            c.peek().unwrap().unwrap();
            c.advance();
        }
        c.release();
        assert_eq!(acks.read(), Some(AckState { done: 2, ..none }));
        b.post_nak(2, ack::REMOTE_ACCESS);
        c.advance();
        c.release();
        assert_eq!(
            acks.read(),
            Some(AckState {
                done: 3,
                nak_ssn1: 3,
                nak_status: ack::REMOTE_ACCESS
            })
        );
    }

    #[test]
    fn bad_segments_are_refused() {
        let a = Segment::create(2).unwrap();
        let fd = a.fd().unwrap().try_clone_to_owned().unwrap();
        assert!(Segment::open(fd, 64).is_err());
        // SAFETY: test-only corruption of the header magic.
        unsafe { a.map.base().write(0) };
        let fd = a.fd().unwrap().try_clone_to_owned().unwrap();
        assert!(matches!(
            Segment::open(fd, a.len() as u64),
            Err(FabricError::Protocol(_))
        ));
        assert!(Segment::create(3).is_err());
    }
}
