//! XDR primitives (RFC 4506): a bounds-checked decoding cursor over borrowed bytes and an
//! encoder that writes into a caller-provided buffer. Neither allocates.
//!
//! Every multi-octet quantity is big-endian and every item occupies a multiple of four
//! octets (RFC 4506 §3). Variable-length opaque data and strings carry a 32-bit length
//! and are zero-padded to the next four-octet boundary (§4.10, §4.11).

/// The XDR basic block size (RFC 4506 §3).
pub const XDR_UNIT: usize = 4;

/// Rounds `len` up to the next multiple of four (XDR roundup, RFC 4506 §3).
///
/// Saturates instead of wrapping so that a hostile length near `usize::MAX` cannot turn
/// into a small one; such a length then fails the bounds check that follows.
#[inline]
pub const fn pad4(len: usize) -> usize {
    match len.checked_add(3) {
        Some(v) => v & !3,
        None => usize::MAX & !3,
    }
}

/// What went wrong while decoding XDR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum XdrError {
    /// The input ended before an item was complete.
    #[error("truncated XDR at offset {offset}: needed {needed} octets, {available} left")]
    Truncated {
        /// Offset at which the item started.
        offset: usize,
        /// Octets the item needs from `offset`.
        needed: usize,
        /// Octets that were left at `offset`.
        available: usize,
    },
    /// A counted item (opaque, string or array) announced more than its bound allows.
    #[error("XDR length {len} at offset {offset} exceeds the maximum of {max}")]
    TooLong {
        /// Offset of the length word.
        offset: usize,
        /// Announced length.
        len: u32,
        /// Largest length the caller accepts.
        max: u32,
    },
    /// A boolean or optional-data discriminant other than 0 or 1 (RFC 4506 §4.4, §4.19).
    #[error("XDR boolean/discriminant at offset {offset} is {value}, not 0 or 1")]
    BadDiscriminant {
        /// Offset of the discriminant word.
        offset: usize,
        /// The value found.
        value: u32,
    },
    /// Padding octets after opaque data or a string were not zero (RFC 4506 §4.10).
    #[error("XDR padding at offset {offset} is not zero")]
    NonZeroPadding {
        /// Offset of the padding.
        offset: usize,
    },
}

/// A decoding cursor over borrowed XDR bytes.
///
/// Items returned by reference (`opaque`, `string`) borrow from the input: decoding is
/// zero-copy.
#[derive(Debug, Clone)]
pub struct XdrCursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> XdrCursor<'a> {
    /// Starts decoding at the beginning of `buf`.
    #[inline]
    pub const fn new(buf: &'a [u8]) -> Self {
        XdrCursor { buf, pos: 0 }
    }

    /// Starts decoding at `offset` (which may equal `buf.len()`; a larger offset makes the
    /// first read fail with [`XdrError::Truncated`]).
    #[inline]
    pub const fn at(buf: &'a [u8], offset: usize) -> Self {
        XdrCursor { buf, pos: offset }
    }

    /// The offset of the next item from the start of the input.
    #[inline]
    pub const fn position(&self) -> usize {
        self.pos
    }

    /// Octets left after the cursor.
    #[inline]
    pub const fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// The whole input the cursor walks.
    #[inline]
    pub const fn input(&self) -> &'a [u8] {
        self.buf
    }

    /// The input from the cursor to the end.
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or(&[])
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], XdrError> {
        let available = self.remaining();
        if n > available {
            return Err(XdrError::Truncated {
                offset: self.pos,
                needed: n,
                available,
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Decodes an unsigned 32-bit integer (RFC 4506 §4.2).
    #[inline]
    pub fn u32(&mut self) -> Result<u32, XdrError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Decodes a signed 32-bit integer (RFC 4506 §4.1).
    #[inline]
    pub fn i32(&mut self) -> Result<i32, XdrError> {
        self.u32().map(|v| v as i32)
    }

    /// Decodes an unsigned hyper integer (RFC 4506 §4.5).
    #[inline]
    pub fn u64(&mut self) -> Result<u64, XdrError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    /// Decodes a boolean (RFC 4506 §4.4); anything but 0 or 1 is an error.
    #[inline]
    pub fn bool(&mut self) -> Result<bool, XdrError> {
        let offset = self.pos;
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(XdrError::BadDiscriminant { offset, value }),
        }
    }

    /// Decodes an optional-data discriminant (RFC 4506 §4.19): `true` when an item follows.
    /// This is also the "more items follow" word of XDR linked lists.
    #[inline]
    pub fn optional(&mut self) -> Result<bool, XdrError> {
        self.bool()
    }

    /// Decodes an array length or other count bounded by `max`, without consuming items.
    #[inline]
    pub fn count(&mut self, max: u32) -> Result<u32, XdrError> {
        let offset = self.pos;
        let len = self.u32()?;
        if len > max {
            return Err(XdrError::TooLong { offset, len, max });
        }
        Ok(len)
    }

    /// Decodes fixed-length opaque data of `len` octets plus its padding (RFC 4506 §4.9).
    pub fn opaque_fixed(&mut self, len: usize) -> Result<&'a [u8], XdrError> {
        let start = self.pos;
        let padded = pad4(len);
        let available = self.remaining();
        if padded > available {
            return Err(XdrError::Truncated {
                offset: start,
                needed: padded,
                available,
            });
        }
        let data = &self.buf[start..start + len];
        let pad = &self.buf[start + len..start + padded];
        if pad.iter().any(|&b| b != 0) {
            return Err(XdrError::NonZeroPadding {
                offset: start + len,
            });
        }
        self.pos = start + padded;
        Ok(data)
    }

    /// Decodes variable-length opaque data `opaque<max>` (RFC 4506 §4.10). On error the
    /// cursor has not moved.
    // One look: the length word, the bound, the whole padded item and its padding checked
    // against what is left once each, and the cursor moved once, where `count` then
    // `opaque_fixed` checked the remaining length twice and moved it twice; the errors,
    // each the one that sequence gives, are made out of line.
    #[inline]
    pub fn opaque(&mut self, max: u32) -> Result<&'a [u8], XdrError> {
        let start = self.pos;
        let rest = self.buf.get(start..).unwrap_or(&[]);
        let Some((word, rest)) = rest.split_first_chunk::<4>() else {
            return Err(self.opaque_error(max));
        };
        let len = u32::from_be_bytes(*word);
        let n = len as usize;
        let padded = pad4(n);
        let item = match rest.get(..padded) {
            Some(item) if len <= max => item,
            _ => return Err(self.opaque_error(max)),
        };
        // The padding (0 to 3 octets) is the low-order end of the item's last word.
        if let Some(last) = item.last_chunk::<4>() {
            let mask = (1u32 << (8 * (padded - n))) - 1;
            if u32::from_be_bytes(*last) & mask != 0 {
                return Err(XdrError::NonZeroPadding {
                    offset: start + 4 + n,
                });
            }
        }
        self.pos = start + 4 + padded;
        Ok(item.get(..n).unwrap_or(&[]))
    }

    /// The error [`opaque`](Self::opaque) gives for what it found at the cursor: the
    /// general decode's (`count`, then `opaque_fixed`), the cursor left in place.
    #[cold]
    #[inline(never)]
    fn opaque_error(&self, max: u32) -> XdrError {
        let mut c = self.clone();
        match c.count(max).and_then(|len| c.opaque_fixed(len as usize)) {
            Err(e) => e,
            // Not reached: `opaque` fails only where this sequence fails.
            Ok(_) => XdrError::Truncated {
                offset: self.pos,
                needed: 4,
                available: self.remaining(),
            },
        }
    }

    /// [`opaque`](Self::opaque) as `count` then `opaque_fixed`, for tests of the one-look
    /// decode against it.
    #[cfg(test)]
    fn opaque_general(&mut self, max: u32) -> Result<&'a [u8], XdrError> {
        let start = self.pos;
        let len = self.count(max)?;
        self.opaque_fixed(len as usize).inspect_err(|_| {
            self.pos = start;
        })
    }

    /// Decodes a string `string<max>` (RFC 4506 §4.11). XDR strings are octets; the caller
    /// decides whether they must be UTF-8.
    #[inline]
    pub fn string(&mut self, max: u32) -> Result<&'a [u8], XdrError> {
        self.opaque(max)
    }

    /// Skips `len` octets of already-padded data.
    #[inline]
    pub fn skip(&mut self, len: usize) -> Result<(), XdrError> {
        self.take(len).map(|_| ())
    }
}

/// Encoding failed because the caller's buffer is too small.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("encode buffer too small: needed {needed} octets, have {available}")]
pub struct BufferTooSmall {
    /// Octets the whole encoding needed up to and including the failing item.
    pub needed: usize,
    /// Size of the caller's buffer.
    pub available: usize,
}

/// An XDR encoder writing into a caller-provided buffer.
#[derive(Debug)]
pub struct XdrEncoder<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl<'a> XdrEncoder<'a> {
    /// Starts encoding at the beginning of `buf`.
    #[inline]
    pub fn new(buf: &'a mut [u8]) -> Self {
        XdrEncoder { buf, pos: 0 }
    }

    /// Octets written so far.
    #[inline]
    pub const fn position(&self) -> usize {
        self.pos
    }

    /// Consumes the encoder, returning the number of octets written.
    #[inline]
    pub const fn finish(self) -> usize {
        self.pos
    }

    /// The octets written so far.
    #[inline]
    pub fn written(&self) -> &[u8] {
        &self.buf[..self.pos]
    }

    /// The octets written so far, to patch a value whose final content is known only
    /// later (e.g. a count written before the items).
    #[inline]
    pub fn written_mut(&mut self) -> &mut [u8] {
        &mut self.buf[..self.pos]
    }

    #[inline]
    fn reserve(&mut self, n: usize) -> Result<&mut [u8], BufferTooSmall> {
        let end = self.pos.checked_add(n).ok_or(BufferTooSmall {
            needed: usize::MAX,
            available: self.buf.len(),
        })?;
        if end > self.buf.len() {
            return Err(BufferTooSmall {
                needed: end,
                available: self.buf.len(),
            });
        }
        let s = &mut self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// Encodes an unsigned 32-bit integer.
    #[inline]
    pub fn u32(&mut self, v: u32) -> Result<(), BufferTooSmall> {
        self.reserve(4)?.copy_from_slice(&v.to_be_bytes());
        Ok(())
    }

    /// Encodes a signed 32-bit integer.
    #[inline]
    pub fn i32(&mut self, v: i32) -> Result<(), BufferTooSmall> {
        self.u32(v as u32)
    }

    /// Encodes an unsigned hyper integer.
    #[inline]
    pub fn u64(&mut self, v: u64) -> Result<(), BufferTooSmall> {
        self.reserve(8)?.copy_from_slice(&v.to_be_bytes());
        Ok(())
    }

    /// Encodes a boolean.
    #[inline]
    pub fn bool(&mut self, v: bool) -> Result<(), BufferTooSmall> {
        self.u32(v as u32)
    }

    /// Encodes an optional-data discriminant / list continuation word.
    #[inline]
    pub fn optional(&mut self, present: bool) -> Result<(), BufferTooSmall> {
        self.bool(present)
    }

    /// Encodes fixed-length opaque data followed by zero padding.
    #[inline]
    pub fn opaque_fixed(&mut self, data: &[u8]) -> Result<(), BufferTooSmall> {
        let padded = pad4(data.len());
        let out = self.reserve(padded)?;
        // The padding (at most three octets) zeroed as the last word, before the data
        // goes over it: a store, where filling the padding's slice called `memset`
        // even when there was none (about 13 instructions per opaque).
        if let Some(last) = out.last_chunk_mut::<4>() {
            *last = [0; 4];
        }
        if let Some(d) = out.get_mut(..data.len()) {
            super::copy::copy_short(d, data);
        }
        Ok(())
    }

    /// Encodes variable-length opaque data: length, bytes, zero padding.
    ///
    /// Data longer than `u32::MAX` octets cannot be represented; it is reported as a
    /// buffer that is too small, since no buffer could hold it. On error the position
    /// has not moved.
    // Short data that fits (nearly every opaque: handles, verifiers, small payloads) in
    // one look: one bounds check for the length word and the padded data, the data
    // copied by fixed moves rather than a call into the library's memcpy, and no call
    // at all, so that it inlines without register saves. Long data and every error go
    // to the general steps, out of line.
    #[inline(always)]
    pub fn opaque(&mut self, data: &[u8]) -> Result<(), BufferTooSmall> {
        let n = data.len();
        if n <= SHORT_OPAQUE {
            let start = self.pos;
            // No overflow: `pos` never passes the buffer's length.
            let end = start + 4 + pad4(n);
            if let Some((word, body)) = self
                .buf
                .get_mut(start..end)
                .and_then(|out| out.split_first_chunk_mut::<4>())
            {
                *word = (n as u32).to_be_bytes();
                // The padding zeroed as the last word, then the data over it.
                if let Some(last) = body.last_chunk_mut::<4>() {
                    *last = [0; 4];
                }
                if let Some(d) = body.get_mut(..n) {
                    super::copy::copy_short(d, data);
                }
                self.pos = end;
                return Ok(());
            }
        }
        self.opaque_general(data)
    }

    /// [`opaque`](Self::opaque) in two steps: the length word, then the padded data.
    #[inline(never)]
    fn opaque_general(&mut self, data: &[u8]) -> Result<(), BufferTooSmall> {
        let len = u32::try_from(data.len()).map_err(|_| BufferTooSmall {
            needed: usize::MAX,
            available: self.buf.len(),
        })?;
        let start = self.pos;
        self.u32(len)?;
        self.opaque_fixed(data).inspect_err(|_| self.pos = start)
    }

    /// Encodes a string (same layout as variable-length opaque data).
    #[inline]
    pub fn string(&mut self, s: &[u8]) -> Result<(), BufferTooSmall> {
        self.opaque(s)
    }
}

/// Longest opaque data [`XdrEncoder::opaque`] writes by fixed moves.
const SHORT_OPAQUE: usize = super::copy::SHORT_COPY_MAX;

/// Encoded size of variable-length opaque data of `len` octets.
#[inline]
pub const fn opaque_len(len: usize) -> usize {
    4 + pad4(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 4506 §4.2: unsigned integer, big-endian.
    #[test]
    fn u32_is_big_endian() {
        let b = [0x12, 0x34, 0x56, 0x78];
        assert_eq!(XdrCursor::new(&b).u32(), Ok(0x1234_5678));
        let mut out = [0u8; 4];
        XdrEncoder::new(&mut out).u32(0x1234_5678).unwrap();
        assert_eq!(out, b);
    }

    // RFC 4506 §4.5: hyper integer, eight octets, big-endian.
    #[test]
    fn u64_round_trip() {
        let b = [1, 2, 3, 4, 5, 6, 7, 8];
        assert_eq!(XdrCursor::new(&b).u64(), Ok(0x0102_0304_0506_0708));
        let mut out = [0u8; 8];
        XdrEncoder::new(&mut out)
            .u64(0x0102_0304_0506_0708)
            .unwrap();
        assert_eq!(out, b);
    }

    // RFC 4506 §4.4: booleans are 0 or 1; anything else is malformed.
    #[test]
    fn bool_rejects_other_values() {
        assert_eq!(XdrCursor::new(&[0, 0, 0, 1]).bool(), Ok(true));
        assert_eq!(XdrCursor::new(&[0, 0, 0, 0]).bool(), Ok(false));
        assert_eq!(
            XdrCursor::new(&[0, 0, 0, 2]).bool(),
            Err(XdrError::BadDiscriminant {
                offset: 0,
                value: 2
            })
        );
    }

    // RFC 4506 §4.10: length, data, zero padding to a multiple of four.
    #[test]
    fn opaque_layout() {
        let mut out = [0xffu8; 12];
        let n = {
            let mut e = XdrEncoder::new(&mut out);
            e.opaque(b"abcde").unwrap();
            e.finish()
        };
        assert_eq!(n, 12);
        assert_eq!(out, [0, 0, 0, 5, b'a', b'b', b'c', b'd', b'e', 0, 0, 0]);
        let mut c = XdrCursor::new(&out);
        assert_eq!(c.opaque(8), Ok(&b"abcde"[..]));
        assert_eq!(c.position(), 12);
        assert_eq!(
            XdrCursor::new(&out).opaque(4),
            Err(XdrError::TooLong {
                offset: 0,
                len: 5,
                max: 4
            })
        );
    }

    #[test]
    fn opaque_truncated_and_bad_padding() {
        let b = [0, 0, 0, 5, b'a', b'b', b'c', b'd', b'e', 0, 0];
        let mut c = XdrCursor::new(&b);
        assert_eq!(
            c.opaque(100),
            Err(XdrError::Truncated {
                offset: 4,
                needed: 8,
                available: 7
            })
        );
        assert_eq!(c.position(), 0, "a failed read leaves the cursor in place");
        let b = [0, 0, 0, 1, b'a', 0, 1, 0];
        assert_eq!(
            XdrCursor::new(&b).opaque(100),
            Err(XdrError::NonZeroPadding { offset: 5 })
        );
    }

    #[test]
    fn huge_length_does_not_overflow() {
        let b = [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0];
        assert!(matches!(
            XdrCursor::new(&b).opaque(u32::MAX),
            Err(XdrError::Truncated { .. })
        ));
        assert_eq!(pad4(usize::MAX), usize::MAX & !3);
    }

    /// The one-look opaque encode (short data, fixed moves) writes what the general two
    /// steps write, for every length 0..=200 at two offsets and into every buffer too
    /// short by up to the whole item: the same octets (padding zeroed, nothing written
    /// past the item), the same position, the same error, the cursor back on error.
    #[test]
    fn opaque_encode_matches_the_general_steps() {
        let src: Vec<u8> = (0..200u32).map(|v| (v * 13 + 5) as u8).collect();
        for len in 0..=200 {
            let data = &src[..len];
            for at in [0usize, 4] {
                let whole = at + opaque_len(len);
                for size in (at..=whole).chain([whole + 9]) {
                    let mut a = vec![0xEEu8; size];
                    let mut b = vec![0xEEu8; size];
                    let (ra, pa) = {
                        let mut e = XdrEncoder::new(&mut a);
                        e.pos = at;
                        (e.opaque(data), e.position())
                    };
                    let (rb, pb) = {
                        let mut e = XdrEncoder::new(&mut b);
                        e.pos = at;
                        (e.opaque_general(data), e.position())
                    };
                    assert_eq!(ra, rb, "length {len} at {at} into {size}");
                    assert_eq!(pa, pb, "length {len} at {at} into {size}");
                    if ra.is_ok() {
                        let mut want = vec![0xEEu8; size];
                        want[at..at + 4].copy_from_slice(&(len as u32).to_be_bytes());
                        want[at + 4..at + 4 + len].copy_from_slice(data);
                        want[at + 4 + len..whole].fill(0);
                        assert_eq!(a, want, "length {len} at {at} into {size}");
                    } else {
                        assert_eq!(pa, at, "moved on error: length {len}");
                    }
                    assert_eq!(a, b, "length {len} at {at} into {size}");
                }
            }
        }
    }

    /// The one-look opaque decode answers as `count` then `opaque_fixed` do, for every
    /// length 0..=200 against bounds below, at and above it, every truncation, and a
    /// non-zero octet in each padding place; on error the cursor has not moved.
    #[test]
    fn opaque_decode_matches_the_general_steps() {
        for len in 0..=200usize {
            let padded = pad4(len);
            let mut msg = vec![0xAAu8; 4];
            msg.extend_from_slice(&(len as u32).to_be_bytes());
            msg.extend((0..len).map(|v| (v * 7 + 3) as u8));
            msg.resize(8 + padded, 0);
            let mut inputs: Vec<Vec<u8>> = (0..msg.len()).map(|cut| msg[..cut].to_vec()).collect();
            inputs.push(msg.clone());
            inputs.push([msg.clone(), vec![1, 2, 3, 4]].concat());
            for p in len..padded {
                let mut bad = msg.clone();
                bad[8 + p] = 0x10;
                inputs.push(bad);
            }
            for input in &inputs {
                for max in [
                    len as u32,
                    len as u32 + 1,
                    (len as u32).saturating_sub(1),
                    u32::MAX,
                ] {
                    let mut fast = XdrCursor::at(input, 4);
                    let mut general = XdrCursor::at(input, 4);
                    let (f, g) = (fast.opaque(max), general.opaque_general(max));
                    assert_eq!(f, g, "length {len} max {max} input {input:?}");
                    if f.is_ok() {
                        assert_eq!(fast.position(), general.position(), "length {len}");
                        assert_eq!(fast.position(), 8 + padded, "length {len}");
                    } else {
                        assert_eq!(fast.position(), 4, "moved on error: length {len}");
                    }
                }
            }
        }
        // A cursor past the end of its input (`at` allows it) fails as `count` does.
        let b = [0u8; 4];
        assert_eq!(
            XdrCursor::at(&b, 9).opaque(8),
            XdrCursor::at(&b, 9).opaque_general(8)
        );
    }

    #[test]
    fn encoder_reports_short_buffer() {
        let mut out = [0u8; 6];
        let mut e = XdrEncoder::new(&mut out);
        e.u32(1).unwrap();
        assert_eq!(
            e.u32(2),
            Err(BufferTooSmall {
                needed: 8,
                available: 6
            })
        );
        assert_eq!(e.position(), 4);
    }
}
