//! CRC32c (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78), the MPA FPDU
//! checksum (RFC 5044 §4.1, defined by reference to iSCSI, RFC 3720 §12.1 and B.4).
//!
//! Every FPDU is CRC'd, so this sits on the data path of every siw transfer. Two
//! implementations share the work, picked by the length of each piece fed:
//!
//! - From [`INTERLEAVE_FROM`] octets up, the `crc32c` crate: on x86-64 with SSE4.2 it runs
//!   three independent chains of `crc32` instructions and merges them with shift tables.
//!   The instruction's latency is three times its issue interval, so a single dependent
//!   chain leaves two thirds of the unit idle; interleaving gives about 3x on large
//!   buffers. On other CPUs the crate uses the ARM CRC instructions or a slicing-by-8
//!   table.
//! - Below it, on x86-64 with SSE4.2, one chain of `crc32` instructions written here. The
//!   crate does no interleaving at these lengths either, but it reaches its single chain
//!   through alignment splitting and two empty interleaved passes, which costs more than
//!   the CRC itself on the short pieces an FPDU is fed in (a 2-octet length field and a
//!   14- or 18-octet DDP header, a small payload, 0-3 octets of pad).
//!
//! `perf/benches/iwarp.rs` measures both against each other at each size in one process;
//! the threshold is where the crate starts to win. Both give identical results (tested
//! against a bit-at-a-time definition at every length and alignment either side of it).
//!
//! The value returned by [`Crc32c::value`] is the conventional CRC-32C (the RFC 3720 B.4
//! value, e.g. `0x8A9136AA` for 32 zero octets). How it is laid out in an FPDU is decided
//! in [`crate::iwarp::fpdu`].

/// Pieces of at least this many octets go to the `crc32c` crate. It is three times the
/// crate's (0.6) short block of 256 octets: from here on the crate interleaves three
/// `crc32` chains, below it it runs one chain as the short path here does, only with more
/// set-up per call.
pub const INTERLEAVE_FROM: usize = 768;

/// Running CRC32c over data fed in pieces (an FPDU's header, payload and pad arrive
/// separately). `Copy`, so a partial state can be forked cheaply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crc32c {
    /// The finished CRC of everything fed so far. The crate's `crc32c_append` takes and
    /// returns finished values (it inverts on the way in and out), so keeping this form
    /// makes [`Crc32c::value`] a plain read.
    crc: u32,
}

impl Default for Crc32c {
    fn default() -> Self {
        Self::new()
    }
}

impl Crc32c {
    /// A fresh CRC: the CRC of no octets, which is 0.
    #[inline]
    pub const fn new() -> Self {
        Crc32c { crc: 0 }
    }

    /// Feeds `data`.
    #[inline]
    pub fn update(&mut self, data: &[u8]) {
        self.crc = append(self.crc, data);
    }

    /// The CRC of everything fed so far (the state is unchanged).
    #[inline]
    pub const fn value(&self) -> u32 {
        self.crc
    }
}

/// CRC32c of `data` in one call.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    append(0, data)
}

/// Whether the CRC runs on the x86-64 SSE4.2 `crc32` instruction on this machine
/// (reported by tests and benches).
#[inline]
pub fn hardware_accelerated() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("sse4.2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Extends the finished CRC `crc` over `data`, choosing the implementation by length.
#[inline]
fn append(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        // `is_x86_feature_detected!` is cached by std: one relaxed load per call.
        if data.len() < INTERLEAVE_FROM && std::is_x86_feature_detected!("sse4.2") {
            // SAFETY: the CPU supports SSE4.2, checked just above.
            return !unsafe { short_sse42(!crc, data) };
        }
    }
    ::crc32c::crc32c_append(crc, data)
}

/// One chain of SSE4.2 `crc32` instructions, eight octets at a time, over the raw
/// (inverted) shift register: the instruction implements exactly the reflected
/// Castagnoli update.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
// `inline` only makes the body available to other crates (it cannot be inlined into a
// caller without SSE4.2 enabled), so callers outside the engine call it directly rather
// than through the dynamic symbol table.
#[inline]
unsafe fn short_sse42(reg: u32, data: &[u8]) -> u32 {
    use core::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let mut r = u64::from(reg);
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        r = _mm_crc32_u64(r, w);
    }
    // The instruction leaves the 32-bit result zero-extended.
    let mut r = r as u32;
    for &b in chunks.remainder() {
        r = _mm_crc32_u8(r, b);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, one bit at a time: the reference both paths are held to.
    fn bitwise(data: &[u8]) -> u32 {
        let mut reg = !0u32;
        for &b in data {
            reg ^= u32::from(b);
            for _ in 0..8 {
                reg = if reg & 1 != 0 {
                    (reg >> 1) ^ 0x82F6_3B78
                } else {
                    reg >> 1
                };
            }
        }
        !reg
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 151 + (i >> 8) + 7) as u8).collect()
    }

    #[test]
    fn matches_bitwise_definition_at_every_length_and_alignment_across_the_threshold() {
        let data = pattern(2 * INTERLEAVE_FROM + 16);
        for start in 0..9 {
            for len in 0..(data.len() - start) {
                let d = &data[start..start + len];
                assert_eq!(crc32c(d), bitwise(d), "start {start} len {len}");
            }
        }
    }

    #[test]
    fn matches_bitwise_definition_on_long_buffers() {
        // The crate's long block is 8 KiB, interleaved three ways: cover one, several, and
        // odd tails, at an unaligned start.
        let data = pattern(3 * 3 * 8192 + 1000);
        for len in [3 * 8192 - 1, 3 * 8192, 3 * 8192 + 7, 2 * 3 * 8192 + 999] {
            let d = &data[3..3 + len];
            assert_eq!(crc32c(d), bitwise(d), "len {len}");
        }
    }

    #[test]
    fn incremental_equals_one_shot_across_the_threshold() {
        let data = pattern(INTERLEAVE_FROM + 200);
        let whole = crc32c(&data);
        for split in 0..data.len() {
            let mut c = Crc32c::new();
            c.update(&data[..split]);
            c.update(&data[split..]);
            assert_eq!(c.value(), whole, "split {split}");
        }
    }

    #[test]
    fn empty_input_keeps_the_value() {
        let mut c = Crc32c::new();
        assert_eq!(c.value(), 0);
        c.update(b"123456789");
        c.update(&[]);
        assert_eq!(c.value(), 0xE306_9283);
    }
}
