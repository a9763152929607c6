//! Short copies by fixed moves: the opaque data of a short call or reply (XDR encode)
//! and a short reply body copied behind its header (the responder's plain path).

/// Longest copy [`copy_short`] makes by fixed moves; longer ones are a `memcpy` call.
pub(crate) const SHORT_COPY_MAX: usize = 128;

/// Copies `src` into `dst`, of the same length: up to [`SHORT_COPY_MAX`] octets as two
/// overlapping moves of a fixed size each (one to three octets by bytes), inlined,
/// rather than a call into the library's `memcpy` of run-time length for a few dozen
/// octets (a NULL reply is 24, a 64-octet ECHO's argument 64). Longer, or of unequal
/// lengths, as `copy_from_slice` (which checks the lengths). Lengths are tested from
/// the top: the ones met on the hot paths are 16 and up.
#[inline(always)]
pub(crate) fn copy_short(dst: &mut [u8], src: &[u8]) {
    /// The first and the last `N` octets (`N <= len <= 2N`).
    #[inline(always)]
    fn ends<const N: usize>(dst: &mut [u8], src: &[u8]) {
        let n = src.len();
        if let (Some(d), Some(s)) = (dst.first_chunk_mut::<N>(), src.first_chunk::<N>()) {
            *d = *s;
        }
        if let (Some(d), Some(s)) = (dst.get_mut(n - N..), src.get(n - N..)) {
            d.copy_from_slice(s);
        }
    }
    let n = src.len();
    if dst.len() != n || n > SHORT_COPY_MAX {
        dst.copy_from_slice(src);
    } else if n > 64 {
        ends::<64>(dst, src);
    } else if n > 32 {
        ends::<32>(dst, src);
    } else if n > 16 {
        ends::<16>(dst, src);
    } else if n > 8 {
        ends::<8>(dst, src);
    } else if n >= 4 {
        ends::<4>(dst, src);
    } else if let (Some(d), Some(&s)) = (dst.first_mut(), src.first()) {
        // One to three octets: the first, the middle and the last.
        *d = s;
        dst[n / 2] = src[n / 2];
        dst[n - 1] = src[n - 1];
    }
}

#[cfg(test)]
mod tests {
    use super::copy_short;

    #[test]
    fn copy_short_copies_every_length_exactly() {
        let src: Vec<u8> = (0..300u32).map(|v| (v * 7 + 1) as u8).collect();
        for n in 0..=300 {
            // Guard octets either side: nothing outside `dst` may be written.
            let mut buf = vec![0xEEu8; n + 2];
            copy_short(&mut buf[1..=n], &src[..n]);
            assert_eq!(&buf[1..=n], &src[..n], "length {n}");
            assert_eq!((buf[0], buf[n + 1]), (0xEE, 0xEE), "length {n}");
        }
    }
}
