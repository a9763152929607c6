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

use rpcrdma_pools::arena::PAGE_SIZE;
use rpcrdma_pools::{Arena, ArenaError, ArenaOptions, HugePages};

use super::ring::{Consumer, Producer, RingMem, Slot};
use crate::fabric::FabricError;

/// Most scatter-gather entries one request carries.
pub(crate) const MAX_SGE: usize = 8;
/// Most slots in a ring (bounds what a peer can make us trust).
pub(crate) const MAX_SLOTS: u32 = 1 << 16;

const MAGIC: u64 = u64::from_le_bytes(*b"RRSHMSEG");
const VERSION: u32 = 3;
const LINE: usize = 128;
const OFF_FLAGS: usize = LINE;
/// The tail, then the NAK record (both written by the target only).
const OFF_REQ_TAIL: usize = 2 * LINE;
const OFF_NAK_SSN: usize = OFF_REQ_TAIL + 8;
const OFF_NAK_STATUS: usize = OFF_REQ_TAIL + 16;
const OFF_REQ_SLOTS: usize = 3 * LINE;

/// Request opcodes in [`ReqHeader::op`].
pub(crate) mod op {
    pub(crate) const SEND: u32 = 1;
    pub(crate) const SEND_INV: u32 = 2;
    pub(crate) const WRITE: u32 = 3;
    pub(crate) const READ: u32 = 4;
    /// Flag on SEND and SEND_INV: the payload itself is in the slot's body (up to
    /// [`INLINE_MAX`](super::INLINE_MAX) bytes), not entries pointing at it.
    pub(crate) const INLINE: u32 = 1 << 8;
}

/// NAK statuses in the NAK record.
pub(crate) mod ack {
    pub(crate) const OK: u32 = 0;
    pub(crate) const RNR_EXCEEDED: u32 = 1;
    pub(crate) const REMOTE_ACCESS: u32 = 2;
    pub(crate) const REMOTE_INVALID: u32 = 3;
    pub(crate) const REMOTE_OP: u32 = 4;
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

/// What a request asks for; the target reads it once, then checks it.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ReqHeader {
    pub op: u32,
    /// Scatter-gather entries in the body.
    pub num_sge: u32,
    /// Target address (Write, Read).
    pub remote_addr: u64,
    /// Sum of the entries' lengths.
    pub total_len: u32,
    /// rkey (Write, Read) or key to invalidate (Send With Invalidate).
    pub key: u32,
}

/// Bytes of a slot after its sequence word and header.
const BODY_LEN: usize = 160;

/// Largest Send whose payload travels in its slot.
pub(crate) const INLINE_MAX: u32 = BODY_LEN as u32;

/// Copies `len` bytes from `src` to `dst`, with two fixed-size (possibly overlapping)
/// moves when `len` is at most [`INLINE_MAX`] (160): for the small payloads that travel inline, a libc
/// `memcpy` call costs more than the copy (14 instructions per NULL round trip, whose
/// 68-octet call and 52-octet reply are each copied twice; `perf/insns.sh`, with the
/// fabric's own 32-octet round trip unchanged). Longer copies go to `memcpy`.
///
/// # Safety
/// `src` must be valid for reads and `dst` for writes of `len` bytes, and the two
/// ranges must not overlap.
#[inline]
pub(crate) unsafe fn copy_small(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY (every arm): each move stays inside [0, len) of both ranges, per the arm's
    // guard; the ranges do not overlap, per the contract.
    unsafe {
        let both = |n: usize| {
            std::ptr::copy_nonoverlapping(src, dst, n);
            std::ptr::copy_nonoverlapping(src.add(len - n), dst.add(len - n), n);
        };
        // Up to 32 octets first, as before the larger arms came: the fabric's own small
        // messages pay no extra test for them.
        if len <= 32 {
            match len {
                16.. => both(16),
                8..=15 => both(8),
                4..=7 => both(4),
                1..=3 => {
                    *dst = *src;
                    *dst.add(len / 2) = *src.add(len / 2);
                    *dst.add(len - 1) = *src.add(len - 1);
                }
                0 => {}
            }
        } else if len <= 64 {
            // An RPC's header and a short call or reply (a NULL reply is 52 octets, its
            // call 68): two fixed moves instead of a call into the library's memcpy.
            both(32)
        } else if len <= 128 {
            both(64)
        } else if len <= INLINE_MAX as usize {
            // Up to a full inline body: an ECHO of 64 octets is a 132-octet call.
            both(128)
        } else {
            std::ptr::copy_nonoverlapping(src, dst, len)
        }
    }
}

/// One request slot (192 bytes: three cache lines): the ring's sequence word, the
/// header, and a body holding translated scatter-gather entries or, for a small Send,
/// the payload itself. A Send of up to 32 bytes fits in the slot's first line; a
/// request with one entry touches the first two lines only.
#[repr(C)]
pub(crate) struct ReqSlot {
    seq: AtomicU64,
    hdr: ReqHeader,
    body: [u64; BODY_LEN / 8],
}

// SAFETY: repr(C), the AtomicU64 sequence word first, then integers only.
unsafe impl Slot for ReqSlot {}

const _: () = assert!(std::mem::size_of::<ReqSlot>() == 192);
const _: () = assert!(std::mem::offset_of!(ReqSlot, body) == 32);
const _: () = assert!(MAX_SGE * std::mem::size_of::<WireSge>() <= BODY_LEN);

impl ReqSlot {
    /// Writes the header of an unpublished slot.
    ///
    /// # Safety
    /// `slot` must be a slot of a live ring that only the caller writes now.
    #[inline]
    pub(crate) unsafe fn set_header(slot: *mut ReqSlot, h: ReqHeader) {
        // SAFETY: per the contract.
        unsafe { std::ptr::addr_of_mut!((*slot).hdr).write(h) }
    }

    /// Writes entry `i` (< MAX_SGE) of an unpublished slot.
    ///
    /// # Safety
    /// As for [`ReqSlot::set_header`].
    #[inline]
    pub(crate) unsafe fn set_sge(slot: *mut ReqSlot, i: usize, e: WireSge) {
        debug_assert!(i < MAX_SGE);
        // SAFETY: per the contract; i < MAX_SGE keeps the entry inside the body, which
        // is 8-byte aligned like WireSge.
        unsafe {
            std::ptr::addr_of_mut!((*slot).body)
                .cast::<WireSge>()
                .add(i)
                .write(e)
        }
    }

    /// The body of a slot, as bytes: [`INLINE_MAX`] of them.
    ///
    /// # Safety
    /// `slot` must be a slot of a live ring.
    #[inline]
    pub(crate) unsafe fn body(slot: *mut ReqSlot) -> *mut u8 {
        // SAFETY: per the contract; no reference is made, only a pointer.
        unsafe { std::ptr::addr_of_mut!((*slot).body).cast() }
    }

    /// Reads the header of a published slot, once.
    ///
    /// # Safety
    /// `slot` must be a slot of a live ring.
    #[inline]
    pub(crate) unsafe fn header(slot: *const ReqSlot) -> ReqHeader {
        // SAFETY: per the contract; any bytes are a valid ReqHeader. Volatile: the peer
        // could rewrite the slot, and a value checked must be the value used.
        unsafe { std::ptr::addr_of!((*slot).hdr).read_volatile() }
    }

    /// Reads entry `i` (< MAX_SGE) of a published slot, once.
    ///
    /// # Safety
    /// As for [`ReqSlot::header`].
    #[inline]
    pub(crate) unsafe fn sge(slot: *const ReqSlot, i: usize) -> WireSge {
        debug_assert!(i < MAX_SGE);
        // SAFETY: as in `set_sge` and `header`.
        unsafe {
            std::ptr::addr_of!((*slot).body)
                .cast::<WireSge>()
                .add(i)
                .read_volatile()
        }
    }
}

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
        // Lazily mapped: a ring's slots become resident as they are first used, so an
        // idle connection holds its header page and the slots it has used, not its
        // whole ring.
        let opts = ArenaOptions::new(layout_len(slots))
            .shareable(true)
            .hugepages(HugePages::Never)
            .prefault(false)
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
        // Bounded before mapping what the peer claims; mapped without pre-faulting
        // (only the slots the peer publishes become resident here).
        let max = layout_len(MAX_SLOTS).next_multiple_of(PAGE_SIZE);
        if len > max {
            return Err(FabricError::Protocol("segment longer than any ring needs"));
        }
        let map = Arena::from_peer_fd(fd, len, max).map_err(|e| match e {
            ArenaError::Untrusted(_) => {
                FabricError::Protocol("peer segment is not sealed memory of its length")
            }
            e => FabricError::Os {
                op: "map peer segment",
                err: std::io::Error::other(e.to_string()),
            },
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

    /// Test hook for a hostile peer: stores `word` at `offset` (rounded down to 8
    /// octets) of this segment, as a process holding the mapping could. Returns false
    /// (storing nothing) past the end.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn scribble(&self, offset: usize, word: u64) -> bool {
        let off = offset & !7;
        if off + 8 > self.map.len() {
            return false;
        }
        // SAFETY: inside the mapping (checked above), 8-aligned (the base is page
        // aligned), and the mapping lives as long as `self.map`; an atomic store is how
        // either side writes shared memory.
        unsafe { (*self.at::<AtomicU64>(off)).store(word, Ordering::Release) };
        true
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
    /// Reads the tail, then the NAK record it publishes. The caller checks the tail
    /// against what it has published: the target is not trusted.
    #[inline]
    pub(crate) fn read(&self) -> AckState {
        // SAFETY: the counters live in the mapping kept alive by `_map`.
        unsafe {
            let done = (*self.tail).load(Ordering::Acquire);
            AckState {
                done,
                nak_ssn1: (*self.nak_ssn).load(Ordering::Relaxed),
                nak_status: (*self.nak_status).load(Ordering::Relaxed),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::testutil::memfd as raw_memfd;

    #[test]
    fn peer_segments_that_could_hurt_us_are_refused() {
        let is_protocol = |r: Result<Segment, FabricError>| {
            assert!(matches!(r, Err(FabricError::Protocol(_))), "{r:?}")
        };
        // A well-formed segment whose descriptor is not sealed.
        let good = Segment::create(16).unwrap();
        let len = good.len() as u64;
        let unsealed = raw_memfd(len as i64, false);
        is_protocol(Segment::open(unsealed, len));
        // Sealed but shorter than claimed.
        is_protocol(Segment::open(raw_memfd(4096, true), 2 * 4096 * 16));
        // Longer than any ring needs (never mapped, let alone pre-faulted).
        is_protocol(Segment::open(raw_memfd(1 << 36, true), 1 << 36));
        // Ours, passed as a peer would: accepted.
        let fd = good.fd().unwrap().try_clone_to_owned().unwrap();
        assert!(Segment::open(fd, len).is_ok());
    }

    fn publish(p: &mut Producer<ReqSlot>, key: u32) {
        assert!(p.room().unwrap() > 0);
        let s = p.slot();
        // SAFETY: an unpublished slot of a live ring; this test is its only writer.
        unsafe {
            ReqSlot::set_header(
                s,
                ReqHeader {
                    key,
                    num_sge: 1,
                    ..ReqHeader::default()
                },
            );
            ReqSlot::set_sge(
                s,
                0,
                WireSge {
                    arena: 1,
                    len: 2,
                    offset: u64::from(key),
                },
            );
        }
        p.commit();
    }

    /// A 4-slot segment and a second mapping of it, as the peer process would open it.
    fn two_mappings() -> (Segment, Segment) {
        let a = Segment::create(4).unwrap();
        let fd = a.fd().unwrap().try_clone_to_owned().unwrap();
        let b = Segment::open(fd, a.len() as u64).unwrap();
        (a, b)
    }

    fn take(c: &mut Consumer<ReqSlot>) -> Option<(ReqHeader, WireSge)> {
        let s = c.peek()?;
        // SAFETY: a published slot of a live ring.
        let got = unsafe { (ReqSlot::header(s), ReqSlot::sge(s, 0)) };
        c.advance();
        Some(got)
    }

    #[test]
    fn rings_pass_slots_between_two_mappings() {
        let (a, b) = two_mappings();
        let mut p = a.req_producer();
        let mut c = b.req_consumer();
        assert!(c.peek().is_none());
        assert_eq!(p.room(), Ok(4));
        // Two laps: stale sequence words from the first never look new.
        for lap in 0..2u32 {
            for i in 0..4 {
                publish(&mut p, lap * 10 + i);
            }
            assert_eq!(p.room(), Ok(0));
            for i in 0..4 {
                let (h, e) = take(&mut c).expect("published slot");
                assert_eq!(h.key, lap * 10 + i);
                assert_eq!(e.offset, u64::from(lap * 10 + i));
            }
            assert!(c.peek().is_none());
            assert_eq!(p.room(), Ok(0), "slots come back only on release");
            c.release();
            assert_eq!(p.room(), Ok(4));
        }
        // A slot filled but not committed is invisible.
        let s = p.slot();
        // SAFETY: unpublished slot, only writer.
        unsafe { ReqSlot::set_header(s, ReqHeader::default()) };
        assert!(c.peek().is_none());
        b.set_failed();
        assert!(a.has_failed());
    }

    #[test]
    fn the_prefetching_peek_sees_exactly_what_peek_sees() {
        let (a, b) = two_mappings();
        let mut p = a.req_producer();
        let mut c = b.req_consumer();
        // Three laps over every slot, the last one included (its later lines end the
        // mapping's ring): unpublished, then published with a full body that reads
        // back whole after the prefetching peek.
        for n in 0..12u32 {
            assert!(c.peek_prefetching().is_none());
            assert_eq!(c.peek_prefetching(), c.peek());
            let s = p.slot();
            // SAFETY: an unpublished slot; we are its only writer.
            unsafe {
                ReqSlot::set_header(
                    s,
                    ReqHeader {
                        key: n,
                        total_len: INLINE_MAX,
                        ..ReqHeader::default()
                    },
                );
                for i in 0..INLINE_MAX as usize {
                    *ReqSlot::body(s).add(i) = (n as usize + i) as u8;
                }
            }
            assert!(c.peek_prefetching().is_none(), "filled is not published");
            p.commit();
            let got = c.peek_prefetching().expect("published slot");
            assert_eq!(Some(got), c.peek());
            // SAFETY: a published slot of a live ring.
            unsafe {
                assert_eq!(ReqSlot::header(got).key, n);
                for i in 0..INLINE_MAX as usize {
                    let b = *ReqSlot::body(got.cast_mut()).add(i);
                    assert_eq!(b, (n as usize + i) as u8, "slot {n} octet {i}");
                }
            }
            c.advance();
            c.release();
        }
        // A forged word (not the next sequence number) is "not yet" for both.
        // SAFETY: test-only poke at the next slot's sequence word.
        unsafe {
            let slot = b.req_mem().slots.cast::<ReqSlot>().add(12 % 4);
            (*slot.cast::<AtomicU64>()).store(99, Ordering::Release);
        }
        assert!(c.peek_prefetching().is_none());
        assert!(c.peek().is_none());
    }

    #[test]
    fn corrupt_counters_are_detected() {
        let a = Segment::create(2).unwrap();
        let mut p = a.req_producer();
        publish(&mut p, 1);
        publish(&mut p, 2);
        // A hostile consumer claims to have consumed slots never produced; the full
        // ring makes the producer reread the tail.
        // SAFETY: test-only poke at the shared tail counter.
        unsafe { (*a.req_mem().tail).store(10, Ordering::Release) };
        assert!(p.room().is_err());
        // A hostile producer's sequence words other than the expected one are ignored.
        let c = a.req_consumer();
        assert!(c.peek().is_some());
        // SAFETY: test-only poke at slot 0's sequence word.
        unsafe { (*a.req_mem().slots.cast::<AtomicU64>()).store(7, Ordering::Release) };
        assert!(c.peek().is_none());
    }

    #[test]
    fn tail_acknowledges_and_the_nak_record_names_the_failure() {
        let (a, b) = two_mappings();
        let mut p = a.req_producer();
        let mut c = b.req_consumer();
        let acks = a.acks();
        let none = AckState {
            done: 0,
            nak_ssn1: 0,
            nak_status: 0,
        };
        assert_eq!(acks.read(), none);
        for i in 0..3 {
            publish(&mut p, i);
        }
        take(&mut c).unwrap();
        take(&mut c).unwrap();
        c.release();
        assert_eq!(acks.read(), AckState { done: 2, ..none });
        b.post_nak(c.position(), ack::REMOTE_ACCESS);
        take(&mut c).unwrap();
        c.release();
        assert_eq!(
            acks.read(),
            AckState {
                done: 3,
                nak_ssn1: 3,
                nak_status: ack::REMOTE_ACCESS
            }
        );
    }

    #[test]
    fn copy_small_copies_every_length_exactly() {
        let src: Vec<u8> = (1..=200u8).collect();
        for len in 0..=INLINE_MAX as usize {
            let mut dst = vec![0u8; len + 8];
            // SAFETY: both buffers hold len bytes; separate allocations.
            unsafe { copy_small(src.as_ptr(), dst.as_mut_ptr(), len) };
            assert_eq!(&dst[..len], &src[..len], "length {len}");
            assert!(dst[len..].iter().all(|&b| b == 0), "length {len} overran");
        }
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
