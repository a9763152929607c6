//! CRC32c (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78), the MPA FPDU
//! checksum (RFC 5044 §4.1, defined by reference to iSCSI, RFC 3720 §12.1 and B.4).
//!
//! Every FPDU is CRC'd, so this sits on the data path of every siw transfer. Four
//! implementations share the work; which one takes long pieces is chosen once per
//! process ([`path`], [`choose`]), and pieces shorter than that path's threshold go to
//! the single chain:
//!
//! - [`Path::Fold256`] (x86-64 with VPCLMULQDQ and AVX2), from [`FOLD_FROM`] octets: a
//!   carry-less multiplication fold written here ([`fold::wide`]), finished with two
//!   `crc32` instructions: each 32 octets cost two 256-bit multiplies and two XORs in
//!   one of four independent lanes, where a `crc32` instruction covers 8 octets.
//! - [`Path::Fold128`] (x86-64 with PCLMULQDQ but not VPCLMULQDQ, on AMD family
//!   0x17/0x18, whose `crc32` issues once per three cycles), from [`FOLD128_FROM`]
//!   octets: the same fold in 128-bit registers ([`fold::narrow`]), four lanes.
//! - [`Path::Crate`] (everything else), from [`FOLD_FROM`] octets: the `crc32c` crate,
//!   three interleaved SSE4.2 chains, the ARM CRC instructions, or a slicing-by-8 table.
//! - Below those thresholds, on x86-64 with SSE4.2, one chain of `crc32` instructions
//!   written here, cheaper on the short pieces an FPDU is fed in (a 2-octet length field
//!   and a 14- or 18-octet DDP header, a small payload, 0-3 octets of pad) than any
//!   set-up. [`Path::Chain`] uses it at every length (for measurement).
//!
//! `RPCRDMA_CRC32C=chain|crate|fold128|fold256` forces a path where the CPU runs it.
//! `perf/benches/iwarp.rs` measures every implementation at each size in one process.
//! All give identical results (each path tested against the crate at every length to
//! 1100 and 16 alignments, with seeds, and on 1 MiB buffers; the folds directly to 9000).
//!
//! The value returned by [`Crc32c::value`] is the conventional CRC-32C (the RFC 3720 B.4
//! value, e.g. `0x8A9136AA` for 32 zero octets). How it is laid out in an FPDU is decided
//! in [`crate::iwarp::fpdu`].

/// Pieces of at least this many octets go to the 256-bit carry-less fold
/// ([`fold::wide`]) on [`Path::Fold256`], and to the crate on [`Path::Crate`]. Measured
/// in `perf/benches/iwarp.rs` on the 2-core AMD EPYC (Zen 3) VM the fold was written on:
/// at 128 octets the fold and one `crc32` chain take about as long (the fold's set-up
/// and final folds against 16 dependent `crc32`s), from 256 up the fold wins.
pub const FOLD_FROM: usize = 256;

/// Pieces of at least this many octets go to the 128-bit carry-less fold
/// ([`fold::narrow`]) on [`Path::Fold128`]; shorter ones to the single chain.
pub const FOLD128_FROM: usize = 64;

use core::sync::atomic::{AtomicU8, Ordering};

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

/// How long pieces are CRC'd on this machine: chosen once per process (see [`path`]);
/// pieces shorter than the path's threshold go to the single `crc32` chain wherever the
/// CPU has SSE4.2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Path {
    /// One chain of `crc32` instructions at every length (x86-64 with SSE4.2).
    Chain = 1,
    /// The `crc32c` crate from [`FOLD_FROM`] octets (three interleaved `crc32` chains on
    /// x86-64, the ARM CRC instructions, or a table), the chain below it.
    Crate = 2,
    /// The 128-bit PCLMULQDQ fold from [`FOLD128_FROM`] octets, the chain below it.
    Fold128 = 3,
    /// The 256-bit VPCLMULQDQ fold from [`FOLD_FROM`] octets, the chain below it.
    Fold256 = 4,
}

impl Path {
    /// Every path, in the order of [`Path::name`]s accepted by the override.
    pub const ALL: [Path; 4] = [Path::Chain, Path::Crate, Path::Fold128, Path::Fold256];

    /// The name `RPCRDMA_CRC32C` takes for this path.
    pub const fn name(self) -> &'static str {
        match self {
            Path::Chain => "chain",
            Path::Crate => "crate",
            Path::Fold128 => "fold128",
            Path::Fold256 => "fold256",
        }
    }

    /// The path `name` names, if any.
    pub fn from_name(name: &str) -> Option<Path> {
        Path::ALL.into_iter().find(|p| p.name() == name.trim())
    }

    /// Whether this path can run on `cpu`.
    pub const fn runs_on(self, cpu: Cpu) -> bool {
        match self {
            Path::Crate => true,
            Path::Chain => cpu.sse42,
            Path::Fold128 => cpu.sse42 && cpu.pclmulqdq,
            Path::Fold256 => cpu.sse42 && cpu.pclmulqdq && cpu.vpclmulqdq,
        }
    }
}

/// What the path choice depends on, read from the CPU by [`Cpu::here`] (or made up in
/// tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cpu {
    /// SSE4.2 (`crc32`) and SSE4.1.
    pub sse42: bool,
    /// PCLMULQDQ.
    pub pclmulqdq: bool,
    /// VPCLMULQDQ with AVX2.
    pub vpclmulqdq: bool,
    /// An AMD or Hygon CPU of family 0x17 or 0x18 (Zen, Zen+, Zen 2, Dhyana), whose
    /// `crc32` issues once every three cycles, so that the crate's three interleaved
    /// chains run no faster than one.
    pub slow_crc32: bool,
}

impl Cpu {
    /// This machine's CPU.
    pub fn here() -> Cpu {
        #[cfg(target_arch = "x86_64")]
        {
            Cpu {
                sse42: std::is_x86_feature_detected!("sse4.2")
                    && std::is_x86_feature_detected!("sse4.1"),
                pclmulqdq: std::is_x86_feature_detected!("pclmulqdq"),
                vpclmulqdq: fold::wide_available(),
                slow_crc32: amd_family_17h_or_18h(),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Cpu::default()
        }
    }
}

/// Whether CPUID names an AMD or Hygon CPU of family 0x17 or 0x18.
#[cfg(target_arch = "x86_64")]
fn amd_family_17h_or_18h() -> bool {
    use core::arch::x86_64::__cpuid;
    // SAFETY: CPUID leaves 0 and 1 exist on every x86-64 CPU.
    #[allow(unused_unsafe)]
    let (v, f) = unsafe { (__cpuid(0), __cpuid(1)) };
    let mut vendor = [0u8; 12];
    vendor[..4].copy_from_slice(&v.ebx.to_le_bytes());
    vendor[4..8].copy_from_slice(&v.edx.to_le_bytes());
    vendor[8..].copy_from_slice(&v.ecx.to_le_bytes());
    let base = (f.eax >> 8) & 0xF;
    let family = if base == 0xF {
        base + ((f.eax >> 20) & 0xFF)
    } else {
        base
    };
    matches!(&vendor, b"AuthenticAMD" | b"HygonGenuine") && matches!(family, 0x17 | 0x18)
}

/// The path for `cpu`, or the one `wanted` names (the `RPCRDMA_CRC32C` override) if it
/// runs there; an unknown name or a path the CPU cannot run is ignored. The rule, from
/// `perf/benches/iwarp.rs`:
///
/// - VPCLMULQDQ: the 256-bit fold (2x the crate on Zen 3, where the crate is fastest
///   among the rest);
/// - no VPCLMULQDQ, PCLMULQDQ and a slow `crc32` (AMD family 0x17/0x18): the 128-bit
///   fold, about 2x one `crc32` chain there and the crate no faster than one chain;
/// - otherwise the crate from [`FOLD_FROM`] up: where `crc32` issues every cycle
///   (Intel, AMD from Zen 3) its three chains were measured above the 128-bit fold.
pub fn choose(wanted: Option<&str>, cpu: Cpu) -> Path {
    if let Some(p) = wanted.and_then(Path::from_name) {
        if p.runs_on(cpu) {
            return p;
        }
    }
    if Path::Fold256.runs_on(cpu) {
        Path::Fold256
    } else if cpu.slow_crc32 && Path::Fold128.runs_on(cpu) {
        Path::Fold128
    } else {
        Path::Crate
    }
}

/// The chosen path, `Path as u8`, or 0 before the first CRC.
static PATH: AtomicU8 = AtomicU8::new(0);

/// The path this process CRCs long pieces by: [`choose`] for this CPU and the
/// `RPCRDMA_CRC32C` environment variable (`chain`, `crate`, `fold128`, `fold256`),
/// resolved on the first call; later calls cost one relaxed load, as std's cached
/// feature detection does.
#[inline]
pub fn path() -> Path {
    match PATH.load(Ordering::Relaxed) {
        1 => Path::Chain,
        2 => Path::Crate,
        3 => Path::Fold128,
        4 => Path::Fold256,
        _ => resolve(),
    }
}

#[cold]
#[inline(never)]
fn resolve() -> Path {
    let wanted = std::env::var("RPCRDMA_CRC32C").ok();
    let p = choose(wanted.as_deref(), Cpu::here());
    // Racing first calls compute the same value.
    PATH.store(p as u8, Ordering::Relaxed);
    p
}

/// Extends the finished CRC `crc` over `data` by `path`, or `None` if this CPU cannot run
/// `path`: for tests and benches that compare paths in one process.
pub fn append_with(path: Path, crc: u32, data: &[u8]) -> Option<u32> {
    if !path.runs_on(Cpu::here()) {
        return None;
    }
    // SAFETY: the CPU runs `path`, checked just above.
    Some(unsafe { append_by(path, crc, data) })
}

/// Extends the finished CRC `crc` over `data` by this process's path.
#[inline]
fn append(crc: u32, data: &[u8]) -> u32 {
    // SAFETY: `path` only resolves to paths this CPU runs.
    unsafe { append_by(path(), crc, data) }
}

/// Extends the finished CRC `crc` over `data` by `path`, choosing by length.
///
/// # Safety
/// The CPU must run `path` ([`Path::runs_on`]).
#[inline]
unsafe fn append_by(path: Path, crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        let long = match path {
            Path::Chain => false,
            Path::Crate => {
                // `is_x86_feature_detected!` is cached by std: one relaxed load.
                if data.len() >= FOLD_FROM || !std::is_x86_feature_detected!("sse4.2") {
                    return ::crc32c::crc32c_append(crc, data);
                }
                false
            }
            Path::Fold128 => data.len() >= FOLD128_FROM,
            Path::Fold256 => data.len() >= FOLD_FROM,
        };
        // SAFETY (all three): every path but the crate's runs only where the CPU has
        // SSE4.2 (the caller's contract), the folds where it has their multiplies, and
        // the thresholds are at least the folds' minimum lengths (asserted below).
        !unsafe {
            match (long, path) {
                (true, Path::Fold256) => fold::wide(!crc, data),
                (true, _) => fold::narrow(!crc, data),
                (false, _) => short_sse42(!crc, data),
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = path;
        ::crc32c::crc32c_append(crc, data)
    }
}

#[cfg(target_arch = "x86_64")]
const _: () = assert!(FOLD_FROM >= fold::WIDE_MIN && FOLD128_FROM >= fold::NARROW_MIN);

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
        // SAFETY: the CPU has VPCLMULQDQ and AVX2; `len >= WIDE_MIN`.
        let wide = |reg, d: &[u8]| unsafe { fold::wide(reg, d) };
        fold_matches_the_crate_to_9000(
            0x2545_F491_4F6C_DD1D,
            0x1234_5678,
            fold::WIDE_MIN,
            "wide",
            wide,
        );
    }

    /// `fold` (a raw-register fold taking at least `min` octets) against the crate at
    /// every length from `min` to 9000 at nine alignments, from the start value `crc`.
    #[cfg(target_arch = "x86_64")]
    fn fold_matches_the_crate_to_9000(
        seed: u64,
        crc: u32,
        min: usize,
        what: &str,
        fold: impl Fn(u32, &[u8]) -> u32,
    ) {
        let data = random_bytes(&mut Rng(seed), 9000 + 8);
        for start in 0..9 {
            for len in min..=(data.len() - start).min(9000) {
                let d = &data[start..start + len];
                let got = !fold(!crc, d);
                assert_eq!(got, reference(crc, d), "{what} start {start} len {len}");
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

    /// The paths this CPU runs (the others are reported, not tested).
    fn paths_here() -> Vec<Path> {
        let cpu = Cpu::here();
        Path::ALL
            .into_iter()
            .filter(|p| {
                let here = p.runs_on(cpu);
                if !here {
                    eprintln!("{p:?} does not run on this CPU: not tested here");
                }
                here
            })
            .collect()
    }

    /// `append_with` where the path runs (callers only pass those).
    fn by(path: Path, crc: u32, data: &[u8]) -> u32 {
        match append_with(path, crc, data) {
            Some(v) => v,
            None => panic!("{path:?} does not run here"),
        }
    }

    #[test]
    fn every_path_matches_the_crate_and_the_chain_at_every_length_to_1100_and_16_alignments() {
        let data = random_bytes(&mut Rng(0x3C6E_F372_FE94_F82B), 1100 + 16);
        let paths = paths_here();
        for start in 0..16 {
            for len in 0..=1100 {
                let d = &data[start..start + len];
                for seed in [0, 0xA54F_F53A] {
                    let want = reference(seed, d);
                    for &p in &paths {
                        assert_eq!(by(p, seed, d), want, "{p:?} start {start} len {len}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_path_continues_a_seeded_crc() {
        let data = random_bytes(&mut Rng(0xBB67_AE85_84CA_A73B), 3000);
        let mut rng = Rng(0x510E_527F_ADE6_82D1);
        for p in paths_here() {
            for _ in 0..400 {
                let len = rng.below(data.len() + 1);
                let split = rng.below(len + 1);
                let (a, b) = data[..len].split_at(split);
                let whole = by(p, 0, &data[..len]);
                assert_eq!(by(p, by(p, 0, a), b), whole, "{p:?} {split}+{}", b.len());
                assert_eq!(whole, reference(0, &data[..len]), "{p:?} len {len}");
            }
        }
    }

    #[test]
    fn every_path_matches_the_crate_on_random_1_mib_buffers() {
        let mut rng = Rng(0x9B05_688C_2B3E_6C1F);
        for round in 0..3 {
            let data = random_bytes(&mut rng, (1 << 20) + round);
            let crc = rng.next() as u32;
            let want = reference(crc, &data[round..]);
            for p in paths_here() {
                assert_eq!(by(p, crc, &data[round..]), want, "{p:?} round {round}");
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn fold128_matches_the_crate_at_every_length_to_9000_and_nine_alignments() {
        if !fold::narrow_available() {
            eprintln!("no PCLMULQDQ on this CPU: the 128-bit fold is not tested directly");
            return;
        }
        // SAFETY (both): the CPU has PCLMULQDQ and SSE4.2; the helper passes at least
        // each one's minimum (`NARROW_MIN`, eight lanes' 128).
        let four = |reg, d: &[u8]| unsafe { fold::narrow(reg, d) };
        let eight = |reg, d: &[u8]| unsafe { fold::narrow_lanes::<8>(reg, d) };
        fold_matches_the_crate_to_9000(
            0x1F83_D9AB_FB41_BD6B,
            0x8765_4321,
            fold::NARROW_MIN,
            "x4",
            four,
        );
        fold_matches_the_crate_to_9000(0x1F83_D9AB_FB41_BD6B, 0x8765_4321, 128, "x8", eight);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    #[should_panic]
    fn fold128_refuses_input_shorter_than_its_lanes() {
        if !fold::narrow_available() {
            panic!("nothing to test on this CPU");
        }
        let d = [0u8; fold::NARROW_MIN - 1];
        // SAFETY: the CPU has what `narrow` needs; the length is what is under test.
        unsafe { fold::narrow(0, &d) };
    }

    const ZEN2: Cpu = Cpu {
        sse42: true,
        pclmulqdq: true,
        vpclmulqdq: false,
        slow_crc32: true,
    };
    const SKYLAKE: Cpu = Cpu {
        slow_crc32: false,
        ..ZEN2
    };
    const ZEN3: Cpu = Cpu {
        vpclmulqdq: true,
        ..SKYLAKE
    };

    #[test]
    fn the_rule_takes_the_fastest_path_measured_for_each_cpu() {
        assert_eq!(choose(None, ZEN3), Path::Fold256);
        assert_eq!(choose(None, ZEN2), Path::Fold128);
        assert_eq!(choose(None, SKYLAKE), Path::Crate);
        assert_eq!(choose(None, Cpu::default()), Path::Crate);
        // A slow `crc32` without PCLMULQDQ has no fold to take.
        let no_clmul = Cpu {
            pclmulqdq: false,
            ..ZEN2
        };
        assert_eq!(choose(None, no_clmul), Path::Crate);
    }

    #[test]
    fn the_override_is_taken_where_it_runs_and_ignored_elsewhere() {
        for p in Path::ALL {
            assert_eq!(Path::from_name(p.name()), Some(p));
            assert_eq!(choose(Some(p.name()), ZEN3), p);
        }
        assert_eq!(choose(Some(" chain\n"), ZEN2), Path::Chain);
        assert_eq!(choose(Some("fold256"), ZEN2), Path::Fold128);
        assert_eq!(choose(Some("fold128"), Cpu::default()), Path::Crate);
        assert_eq!(choose(Some("chain"), Cpu::default()), Path::Crate);
        assert_eq!(choose(Some("fast"), ZEN2), Path::Fold128);
        assert_eq!(choose(Some(""), SKYLAKE), Path::Crate);
    }

    #[test]
    fn the_process_path_is_the_rule_for_this_cpu_and_runs_here() {
        let wanted = std::env::var("RPCRDMA_CRC32C").ok();
        let p = path();
        assert_eq!(p, choose(wanted.as_deref(), Cpu::here()));
        assert!(p.runs_on(Cpu::here()));
        assert_eq!(path(), p, "resolved once");
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
