//! The deterministic byte pattern SOURCE returns.

/// Octet `i` of the source pattern. The period, 251, is prime so that the pattern never
/// lines up with power-of-two buffer or segment boundaries: a chunk placed at the wrong
/// offset shows up as a mismatch.
#[inline]
pub const fn source_byte(i: usize) -> u8 {
    (i % 251) as u8
}

/// Fills `out` with the pattern from offset 0.
pub fn fill_source_pattern(out: &mut [u8]) {
    for (i, b) in out.iter_mut().enumerate() {
        *b = source_byte(i);
    }
}

/// Whether `data` is the pattern from offset 0.
pub fn is_source_pattern(data: &[u8]) -> bool {
    data.iter().enumerate().all(|(i, &b)| b == source_byte(i))
}
