//! CRC32c (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78), the MPA FPDU
//! checksum (RFC 5044 §4.1, defined by reference to iSCSI, RFC 3720 §12.1 and B.4).
//!
//! Every FPDU is CRC'd, so this sits on the data path of every siw transfer. Three
//! implementations share the work, picked by the length of each piece fed and the CPU:
//!
//! - From [`FOLD_FROM`] octets up, on x86-64 with VPCLMULQDQ and AVX2, a carry-less
//!   multiplication fold written here ([`fold`]), finished with two `crc32`
//!   instructions: each 32 octets cost two 256-bit multiplies and two XORs in one of
//!   four independent lanes, where a `crc32` instruction covers 8 octets.
//! - Below it, on x86-64 with SSE4.2, one chain of `crc32` instructions written here,
//!   cheaper on the short pieces an FPDU is fed in (a 2-octet length field and a 14- or
//!   18-octet DDP header, a small payload, 0-3 octets of pad) than any set-up.
//! - From [`FOLD_FROM`] up elsewhere (other CPUs, x86-64 without VPCLMULQDQ, valgrind),
//!   the `crc32c` crate: three interleaved SSE4.2 chains, the ARM CRC instructions, or a
//!   slicing-by-8 table.
//!
//! `perf/benches/iwarp.rs` measures the engine's path against the crate and the single
//! chain at each size in one process; [`FOLD_FROM`] is where the fold starts to win. All
//! give identical results (tested against the crate at every length to 9000 and nine
//! alignments, against a bit-at-a-time definition either side of the threshold).
//!
//! The value returned by [`Crc32c::value`] is the conventional CRC-32C (the RFC 3720 B.4
//! value, e.g. `0x8A9136AA` for 32 zero octets). How it is laid out in an FPDU is decided
//! in [`crate::iwarp::fpdu`].

/// Pieces of at least this many octets go to the carry-less fold ([`fold`]) where the CPU
/// has it. Measured in `perf/benches/iwarp.rs` on the 2-core AMD EPYC VM this was
/// written on: at 128 octets the fold and one `crc32` chain take about as long (the
/// fold's set-up and final folds against 16 dependent `crc32`s), from 256 up the fold
/// wins.
pub const FOLD_FROM: usize = 256;

#[cfg(target_arch = "x86_64")]
pub mod fold;

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

    /// Feeds `data`. An empty piece (an FPDU without pad, a message without inline
    /// bytes) costs a test, not a call.
    #[inline]
    pub fn update(&mut self, data: &[u8]) {
        if !data.is_empty() {
            self.crc = append(self.crc, data);
        }
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
        // `is_x86_feature_detected!` is cached by std: one relaxed load per feature.
        if data.len() < FOLD_FROM {
            if std::is_x86_feature_detected!("sse4.2") {
                // SAFETY: the CPU supports SSE4.2, checked just above.
                return !unsafe { short_sse42(!crc, data) };
            }
        } else if fold::wide_available() {
            // SAFETY: the CPU has what `wide` needs (checked just above), and
            // FOLD_FROM >= WIDE_MIN.
            return !unsafe { fold::wide(!crc, data) };
        }
    }
    ::crc32c::crc32c_append(crc, data)
}

#[cfg(target_arch = "x86_64")]
const _: () = assert!(FOLD_FROM >= fold::WIDE_MIN);

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
    use core::arch::x86_64::{_mm_crc32_u16, _mm_crc32_u32, _mm_crc32_u64, _mm_crc32_u8};
    let mut r = u64::from(reg);
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        r = _mm_crc32_u64(r, w);
    }
    // The instruction leaves the 32-bit result zero-extended. The 0-7 octets left go
    // four, two and one at a time (a 2-octet length field and an 18-octet header leave
    // four: one instruction, not four).
    let mut r = r as u32;
    let mut rest = chunks.remainder();
    if let [a, b, c, d, tail @ ..] = rest {
        r = _mm_crc32_u32(r, u32::from_le_bytes([*a, *b, *c, *d]));
        rest = tail;
    }
    if let [a, b, tail @ ..] = rest {
        r = _mm_crc32_u16(r, u16::from_le_bytes([*a, *b]));
        rest = tail;
    }
    if let [a] = rest {
        r = _mm_crc32_u8(r, *a);
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
        let data = pattern(2 * FOLD_FROM + 16);
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
        let data = pattern(FOLD_FROM + 200);
        let whole = crc32c(&data);
        for split in 0..data.len() {
            let mut c = Crc32c::new();
            c.update(&data[..split]);
            c.update(&data[split..]);
            assert_eq!(c.value(), whole, "split {split}");
        }
    }

    /// The crate (three `crc32` chains) as the reference, from any start value.
    fn reference(crc: u32, data: &[u8]) -> u32 {
        ::crc32c::crc32c_append(crc, data)
    }

    /// A small xorshift generator: reproducible random inputs without a dependency.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    fn random_bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
        (0..len).map(|_| rng.next() as u8).collect()
    }

    #[test]
    fn engine_matches_the_crate_at_every_length_to_9000_and_nine_alignments() {
        let data = random_bytes(&mut Rng(0x9E37_79B9_7F4A_7C15), 9000 + 8);
        for start in 0..9 {
            for len in 0..=(data.len() - start).min(9000) {
                let d = &data[start..start + len];
                assert_eq!(crc32c(d), reference(0, d), "start {start} len {len}");
            }
        }
    }

    /// Whether the 256-bit fold can be tested here (the engine tests above cover the
    /// crate's path where it cannot).
    #[cfg(target_arch = "x86_64")]
    fn wide_here() -> bool {
        let here = fold::wide_available();
        if !here {
            eprintln!("no VPCLMULQDQ on this CPU: the fold is not tested directly");
        }
        here
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn fold_matches_the_crate_at_every_length_to_9000_and_nine_alignments() {
        if !wide_here() {
            return;
        }
        let data = random_bytes(&mut Rng(0x2545_F491_4F6C_DD1D), 9000 + 8);
        for start in 0..9 {
            for len in fold::WIDE_MIN..=(data.len() - start).min(9000) {
                let d = &data[start..start + len];
                // SAFETY: the CPU has VPCLMULQDQ and AVX2; `len >= WIDE_MIN`.
                let got = !unsafe { fold::wide(!0x1234_5678, d) };
                assert_eq!(got, reference(0x1234_5678, d), "start {start} len {len}");
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn fold_matches_the_crate_on_random_inputs_and_start_values() {
        if !wide_here() {
            return;
        }
        let mut rng = Rng(0xD1B5_4A32_D192_ED03);
        let data = random_bytes(&mut rng, 3 << 16);
        for _ in 0..2000 {
            let span = if rng.next() & 1 == 0 { 600 } else { 1 << 17 };
            let len = (fold::WIDE_MIN + rng.below(span)).min(data.len());
            let start = rng.below(data.len() - len + 1);
            let d = &data[start..start + len];
            let crc = rng.next() as u32;
            // SAFETY: as above.
            let got = !unsafe { fold::wide(!crc, d) };
            assert_eq!(got, reference(crc, d), "start {start} len {len}");
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    #[should_panic]
    fn fold_refuses_input_shorter_than_its_registers() {
        if !fold::wide_available() {
            panic!("nothing to test on this CPU");
        }
        let d = [0u8; fold::WIDE_MIN - 1];
        // SAFETY: the CPU has what `wide` needs; the length is what is under test (it
        // must panic before reading).
        unsafe { fold::wide(0, &d) };
    }

    #[test]
    fn engine_matches_the_crate_fed_in_random_pieces() {
        let mut rng = Rng(0x6A09_E667_F3BC_C909);
        for _ in 0..300 {
            let len = rng.below(20_000);
            let data = random_bytes(&mut rng, len);
            let mut c = Crc32c::new();
            let mut at = 0;
            while at < data.len() {
                let n = (1 + rng.below(3000)).min(data.len() - at);
                c.update(&data[at..at + n]);
                at += n;
            }
            assert_eq!(c.value(), reference(0, &data), "len {}", data.len());
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
