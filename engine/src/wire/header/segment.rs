//! RDMA segments, the building blocks of every chunk (RFC 8166 §3.4.3, RFC 5666 §4.3
//! `xdr_rdma_segment` and `xdr_read_chunk`).

/// One registered memory region of the requester: `xdr_rdma_segment`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Segment {
    /// Steering tag (R_key) of the registration.
    pub handle: u32,
    /// Length of the region in octets.
    pub length: u32,
    /// Address or offset of the region's first octet in the handle's address space.
    pub offset: u64,
}

impl Segment {
    /// A segment of `length` octets at `offset` under `handle`.
    #[inline]
    pub const fn new(handle: u32, length: u32, offset: u64) -> Segment {
        Segment {
            handle,
            length,
            offset,
        }
    }

    /// The offset one past the region's last octet, or `None` when that is not
    /// representable in 64 bits (including a region that ends exactly at the top of the
    /// address space; see [`wraps`](Self::wraps) for validity).
    #[inline]
    pub const fn end(&self) -> Option<u64> {
        self.offset.checked_add(self.length as u64)
    }

    /// Whether the region runs past the end of the 64-bit address space, i.e. its last
    /// octet's offset overflows. The decoder rejects such segments.
    #[inline]
    pub const fn wraps(&self) -> bool {
        self.length != 0 && self.offset.checked_add(self.length as u64 - 1).is_none()
    }

    /// Decodes the 16 wire octets of a segment. Infallible: the caller proved the length.
    #[inline]
    pub(crate) fn from_wire(b: &[u8; 16]) -> Segment {
        let [h0, h1, h2, h3, l0, l1, l2, l3, o0, o1, o2, o3, o4, o5, o6, o7] = *b;
        Segment {
            handle: u32::from_be_bytes([h0, h1, h2, h3]),
            length: u32::from_be_bytes([l0, l1, l2, l3]),
            offset: u64::from_be_bytes([o0, o1, o2, o3, o4, o5, o6, o7]),
        }
    }
}

/// One entry of the Read list: a segment and the XDR position of the data it holds
/// (`xdr_read_chunk`). Consecutive entries with the same position form one Read chunk
/// (RFC 8166 §3.4.5); position zero means the chunk holds the whole RPC message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ReadSegment {
    /// Offset in the RPC message's XDR stream where the chunk's data belongs.
    pub position: u32,
    /// Where the requester's data is.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub segment: Segment,
}

impl ReadSegment {
    /// A Read list entry for `segment` at XDR `position`.
    #[inline]
    pub const fn new(position: u32, segment: Segment) -> ReadSegment {
        ReadSegment { position, segment }
    }

    /// Decodes position and segment from the 20 wire octets that follow the entry's
    /// discriminator. Infallible: the caller proved the length.
    #[inline]
    pub(crate) fn from_wire(b: &[u8; 20]) -> ReadSegment {
        let [p0, p1, p2, p3, seg @ ..] = *b;
        ReadSegment {
            position: u32::from_be_bytes([p0, p1, p2, p3]),
            segment: Segment::from_wire(&seg),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_end_and_wrap() {
        assert_eq!(Segment::new(1, 16, 0x1000).end(), Some(0x1010));
        assert_eq!(Segment::new(1, 1, u64::MAX).end(), None);
        assert_eq!(Segment::new(1, 0, u64::MAX).end(), Some(u64::MAX));
        assert!(!Segment::new(1, 16, 0x1000).wraps());
        // Last octet at u64::MAX: the region fits exactly.
        assert!(!Segment::new(1, 1, u64::MAX).wraps());
        assert!(!Segment::new(1, 0x10, u64::MAX - 0xf).wraps());
        assert!(Segment::new(1, 0x11, u64::MAX - 0xf).wraps());
        assert!(Segment::new(1, 2, u64::MAX).wraps());
        assert!(!Segment::new(1, 0, u64::MAX).wraps());
        assert!(Segment::new(1, u32::MAX, u64::MAX - 0x1000).wraps());
    }

    #[test]
    fn wire_layout_is_big_endian_handle_length_offset() {
        let b = [
            0, 0, 0, 7, 0, 0, 1, 0, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,
        ];
        assert_eq!(
            Segment::from_wire(&b),
            Segment::new(7, 256, 0x1122_3344_5566_7788)
        );
        let mut r = [0u8; 20];
        r[..4].copy_from_slice(&[0, 0, 0, 0x40]);
        r[4..].copy_from_slice(&b);
        assert_eq!(
            ReadSegment::from_wire(&r),
            ReadSegment::new(0x40, Segment::new(7, 256, 0x1122_3344_5566_7788))
        );
    }
}
