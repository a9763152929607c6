//! CRC32c by carry-less multiplication: the buffer is folded, 128 bits at a time per
//! lane, into a few independent accumulators, which are then folded into one 128-bit
//! value and finished with two `crc32` instructions. Written from the algebra below
//! (the method of Gopal et al., "Fast CRC Computation for Generic Polynomials Using
//! PCLMULQDQ", Intel, 2009); see [`super`] for where each width is used.
//!
//! # The algebra
//!
//! Over GF(2), a CRC only needs its input up to congruence modulo P (the Castagnoli
//! polynomial, x^32 + 0x1EDC6F41): the register after a message M is M·x^32 mod P. A
//! 128-bit piece A of the message that is followed by D more bits contributes A·x^D. Split
//! A into its first and last 64 bits, A = H·x^64 + L; then
//!
//! ```text
//! A·x^D ≡ H·(x^(D+64) mod P) + L·(x^D mod P)      (mod P)
//! ```
//!
//! and each product is a 64-bit by 32-bit carry-less multiply, under 96 bits: it fits a
//! 128-bit lane. `vpclmulqdq` does two such multiplies at once, one per 128-bit half of
//! a 256-bit register. XORing it into the piece D bits later moves A there without changing the
//! CRC. With several lanes, each lane folds over the stride of all of them (4 lanes of
//! 256 bits: D = 1024 per step), so the multiplies of different lanes do not wait on each
//! other; at the end the lanes fold into each other (D = 256, then 128).
//!
//! # Bit order
//!
//! CRC32c is reflected: the first octet's least significant bit is the message's highest
//! coefficient. A 16-octet little-endian load therefore holds coefficient x^(127-i) in bit
//! i, the first 64 bits (H) in the low quadword. A reflected 64-bit constant (coefficient
//! x^d in bit 63-d) multiplied by H gives a reflected product one bit short of the
//! lane's width (bit k holds x^(126-k)), which read as a lane is the product times x.
//! The constants absorb that: H's is x^(D+63) mod P and L's is x^(D-1) mod P.
//!
//! # Two widths
//!
//! The 128-bit form ([`narrow`], `pclmulqdq`, four lanes of one register each, 64
//! octets a step) issues half the work per multiply of the 256-bit one ([`wide`]). On
//! Zen 3 (fast `crc32`) it ran at 12 GB/s, below the `crc32c` crate's three `crc32`
//! chains (15-19 GB/s), so CPUs like it keep the crate. On AMD family 0x17 (Zen to Zen
//! 2), whose `crc32` issues once every three cycles so that three chains run no faster
//! than one, it is about 1.5x one chain from 64 octets up: the multiplier's issue rate
//! (one `pclmulqdq` per two cycles, eight per 64 octets) is the limit there, which is
//! why eight lanes ran no faster than four. Valgrind decodes the 128-bit form but not
//! the 256-bit one. (Running a `crc32` chain over the front of a buffer interleaved with
//! the 128-bit fold over the rest, and combining the two by a multiply, measured no
//! faster on that CPU than the fold alone: the two do not overlap there.)
//!
//! # Start and finish
//!
//! The incoming register (the inverted running CRC) is XORed into the first 32 bits of
//! the message, which is the same as starting from it. The last 128-bit accumulator A is
//! the whole message up to congruence, followed by nothing: its register is A·x^32 mod P,
//! which two `crc32` instructions over its two quadwords, from a zero register, compute
//! exactly. The octets after the last whole 16 go through `crc32` as usual.

use core::arch::x86_64::{
    __m128i, __m256i, _mm256_castsi256_si128, _mm256_clmulepi64_epi128, _mm256_extracti128_si256,
    _mm256_loadu_si256, _mm256_set_epi64x, _mm256_xor_si256, _mm_clmulepi64_si128, _mm_crc32_u64,
    _mm_cvtsi128_si64, _mm_extract_epi64, _mm_loadu_si128, _mm_set_epi64x, _mm_xor_si128,
};

/// The Castagnoli polynomial with its x^32 term, not reflected.
const POLY: u64 = 0x1_1EDC_6F41;

/// x^n mod P, not reflected (coefficient x^d in bit d).
const fn x_pow_mod(n: u32) -> u64 {
    let mut v: u64 = 1;
    let mut i = 0;
    while i < n {
        v <<= 1;
        if v >> 32 != 0 {
            v ^= POLY;
        }
        i += 1;
    }
    v
}

/// The two multipliers that move a 128-bit lane on by `bits`: `(for H, for L)`, each
/// reflected into 64 bits (see the module comment).
const fn fold_by(bits: u32) -> (u64, u64) {
    (
        x_pow_mod(bits + 63).reverse_bits(),
        x_pow_mod(bits - 1).reverse_bits(),
    )
}

/// Lanes of the fold: four registers of two 128-bit lanes, 128 octets a step. On the
/// AMD EPYC this was written on the loop runs at about 24 GB/s, one 256-bit multiply
/// every two cycles: the multiplier's issue rate, not the latency of a lane's chain
/// (multiply, XOR) is the limit, so more lanes would only lengthen set-up and tail.
const WIDE_REGS: usize = 4;
/// The shortest input [`wide`] takes: one load of every register.
pub const WIDE_MIN: usize = 32 * WIDE_REGS;
/// Whether [`wide`] may run on this CPU (std caches the detection: a load per feature).
#[inline]
pub fn wide_available() -> bool {
    std::is_x86_feature_detected!("vpclmulqdq")
        && std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("pclmulqdq")
        && std::is_x86_feature_detected!("sse4.2")
}

/// The 256-bit broadcast of a lane's two multipliers.
#[inline]
#[target_feature(enable = "avx2")]
fn k256((h, l): (u64, u64)) -> __m256i {
    _mm256_set_epi64x(l as i64, h as i64, l as i64, h as i64)
}

/// Both 128-bit lanes of `x` moved on by the distance `k` was made for, plus `next`.
#[inline]
#[target_feature(enable = "avx2,vpclmulqdq")]
fn step256(x: __m256i, k: __m256i, next: __m256i) -> __m256i {
    let h = _mm256_clmulepi64_epi128::<0x00>(x, k);
    let l = _mm256_clmulepi64_epi128::<0x11>(x, k);
    _mm256_xor_si256(_mm256_xor_si256(h, l), next)
}

/// `x` moved on by the distance `k` was made for, plus `next`.
#[inline]
#[target_feature(enable = "pclmulqdq")]
fn step128(x: __m128i, k: __m128i, next: __m128i) -> __m128i {
    let h = _mm_clmulepi64_si128::<0x00>(x, k);
    let l = _mm_clmulepi64_si128::<0x11>(x, k);
    _mm_xor_si128(_mm_xor_si128(h, l), next)
}

/// The 128-bit pair of a lane's two multipliers.
#[inline]
#[target_feature(enable = "sse2")]
fn k128((h, l): (u64, u64)) -> __m128i {
    _mm_set_epi64x(l as i64, h as i64)
}

/// The register after the last accumulator `x` and then `tail` (under 16 octets).
#[inline]
#[target_feature(enable = "sse4.2,sse4.1")]
fn finish(x: __m128i, tail: &[u8]) -> u32 {
    let r = _mm_crc32_u64(0, _mm_cvtsi128_si64(x) as u64);
    let r = _mm_crc32_u64(r, _mm_extract_epi64::<1>(x) as u64);
    // SAFETY: SSE4.2 is enabled for this function, so for its callers.
    unsafe { super::short_sse42(r as u32, tail) }
}

/// The raw CRC register after `data` from `reg`, by 256-bit `vpclmulqdq` folds.
///
/// # Safety
/// The CPU must have what [`wide_available`] checks; `data` must be at least
/// [`WIDE_MIN`] octets (checked: shorter input panics rather than reading past it).
#[target_feature(enable = "avx2,vpclmulqdq,pclmulqdq,sse4.2,sse4.1")]
pub unsafe fn wide(reg: u32, data: &[u8]) -> u32 {
    assert!(data.len() >= WIDE_MIN);
    let p = data.as_ptr();
    let load = |off: usize| {
        debug_assert!(off + 32 <= data.len());
        // SAFETY: every caller below keeps `off + 32 <= data.len()`.
        unsafe { _mm256_loadu_si256(p.add(off).cast()) }
    };
    let mut x: [__m256i; WIDE_REGS] = core::array::from_fn(|i| load(32 * i));
    // Starting from `reg` is XORing it into the first 32 bits.
    x[0] = _mm256_xor_si256(x[0], _mm256_set_epi64x(0, 0, 0, i64::from(reg)));
    let mut off = WIDE_MIN;

    let k = k256(const { fold_by(256 * WIDE_REGS as u32) });
    while data.len() - off >= WIDE_MIN {
        for (i, xi) in x.iter_mut().enumerate() {
            *xi = step256(*xi, k, load(off + 32 * i));
        }
        off += WIDE_MIN;
    }

    let k = k256(const { fold_by(256) });
    let mut acc = x[0];
    for xi in &x[1..] {
        acc = step256(acc, k, *xi);
    }
    while data.len() - off >= 32 {
        acc = step256(acc, k, load(off));
        off += 32;
    }

    let k = k128(const { fold_by(128) });
    let mut y = step128(
        _mm256_castsi256_si128(acc),
        k,
        _mm256_extracti128_si256::<1>(acc),
    );
    if data.len() - off >= 16 {
        // SAFETY: 16 octets at `off` are inside `data`.
        y = step128(y, k, unsafe { _mm_loadu_si128(p.add(off).cast()) });
        off += 16;
    }
    finish(y, &data[off..])
}

/// Lanes of the 128-bit fold: four registers, 64 octets a step. On the AMD EPYC (family
/// 0x17) this was measured on, a `pclmulqdq` issues every two cycles, so a step's eight
/// take 16 cycles, longer than one lane's multiply and XORs: four lanes already keep the
/// multiplier busy (4 GB/s per GHz-ish, 1.5x one `crc32` chain). Eight ran no faster
/// from 256 octets and slower below (longer set-up and final folds); `perf/benches/
/// iwarp.rs` measures both.
pub const NARROW_LANES: usize = 4;
/// The shortest input [`narrow`] takes: one load of every lane.
pub const NARROW_MIN: usize = 16 * NARROW_LANES;

/// Whether [`narrow`] may run on this CPU (std caches the detection: a load per feature).
/// Valgrind 3.19 models and decodes these instructions, unlike the 256-bit form.
#[inline]
pub fn narrow_available() -> bool {
    std::is_x86_feature_detected!("pclmulqdq")
        && std::is_x86_feature_detected!("sse4.2")
        && std::is_x86_feature_detected!("sse4.1")
}

/// The raw CRC register after `data` from `reg`, by 128-bit `pclmulqdq` folds in
/// [`NARROW_LANES`] independent lanes.
///
/// # Safety
/// The CPU must have what [`narrow_available`] checks; `data` must be at least
/// [`NARROW_MIN`] octets (checked: shorter input panics rather than reading past it).
#[target_feature(enable = "pclmulqdq,sse4.2,sse4.1")]
pub unsafe fn narrow(reg: u32, data: &[u8]) -> u32 {
    // SAFETY: the caller's contract is this function's.
    unsafe { narrow_lanes::<NARROW_LANES>(reg, data) }
}

/// [`narrow`] with `LANES` lanes (the bench measures 4 and 8; [`NARROW_LANES`] is used).
///
/// # Safety
/// As [`narrow`], with `16 * LANES` for [`NARROW_MIN`]; `LANES` must be at least 1.
#[target_feature(enable = "pclmulqdq,sse4.2,sse4.1")]
#[inline]
pub unsafe fn narrow_lanes<const LANES: usize>(reg: u32, data: &[u8]) -> u32 {
    let stride = 16 * LANES;
    assert!(LANES >= 1 && data.len() >= stride);
    let p = data.as_ptr();
    let load = |off: usize| {
        debug_assert!(off + 16 <= data.len());
        // SAFETY: every caller below keeps `off + 16 <= data.len()`.
        unsafe { _mm_loadu_si128(p.add(off).cast()) }
    };
    let mut x: [__m128i; LANES] = core::array::from_fn(|i| load(16 * i));
    // Starting from `reg` is XORing it into the first 32 bits.
    x[0] = _mm_xor_si128(x[0], _mm_set_epi64x(0, i64::from(reg)));
    let mut off = stride;

    let k = k128(const { fold_by(128 * LANES as u32) });
    while data.len() - off >= stride {
        for (i, xi) in x.iter_mut().enumerate() {
            *xi = step128(*xi, k, load(off + 16 * i));
        }
        off += stride;
    }

    // The lanes into one: lane i is followed by the LANES - 1 - i after it, so folding
    // each into the next moves it on by 128 bits per lane, as the stride loop does.
    let k = k128(const { fold_by(128) });
    let mut y = x[0];
    for xi in &x[1..] {
        y = step128(y, k, *xi);
    }
    while data.len() - off >= 16 {
        y = step128(y, k, load(off));
        off += 16;
    }
    finish(y, &data[off..])
}
