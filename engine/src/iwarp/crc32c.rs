//! CRC32c (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78), the MPA FPDU
//! checksum (RFC 5044 §4.1, defined by reference to iSCSI, RFC 3720 §12.1 and B.4).
//!
//! On x86-64 CPUs with SSE4.2 the `crc32` instruction does the work, eight octets at a
//! time; elsewhere a slicing-by-8 table does. Both give identical results (unit-tested
//! against each other). Detection is `is_x86_feature_detected!`, which std caches, so the
//! per-call cost is one relaxed load.
//!
//! The value returned by [`Crc32c::value`] is the conventional CRC-32C (the RFC 3720 B.4
//! value, e.g. `0x8A9136AA` for 32 zero octets). How it is laid out in an FPDU is decided
//! in [`crate::iwarp::fpdu`].

/// Reflected Castagnoli polynomial.
const POLY: u32 = 0x82F6_3B78;

/// Slicing-by-8 tables: `TABLES[0]` is the classic byte table, `TABLES[k]` advances a byte
/// that sits `k` positions further back.
static TABLES: [[u32; 256]; 8] = make_tables();

const fn make_tables() -> [[u32; 256]; 8] {
    let mut t = [[0u32; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut i = 0;
    while i < 256 {
        let mut j = 1;
        while j < 8 {
            let prev = t[j - 1][i];
            t[j][i] = (prev >> 8) ^ t[0][(prev & 0xFF) as usize];
            j += 1;
        }
        i += 1;
    }
    t
}

/// Running CRC32c over data fed in pieces (an FPDU's header, payload and pad arrive
/// separately). `Copy`, so a partial state can be forked cheaply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crc32c {
    /// Shift register, kept inverted between calls as the algorithm defines it.
    reg: u32,
}

impl Default for Crc32c {
    fn default() -> Self {
        Self::new()
    }
}

impl Crc32c {
    /// A fresh CRC (register preset to all ones).
    #[inline]
    pub const fn new() -> Self {
        Crc32c { reg: !0 }
    }

    /// Feeds `data`.
    #[inline]
    pub fn update(&mut self, data: &[u8]) {
        self.reg = update_best(self.reg, data);
    }

    /// The CRC of everything fed so far (final inversion applied; the state is unchanged).
    #[inline]
    pub const fn value(&self) -> u32 {
        !self.reg
    }
}

/// CRC32c of `data` in one call.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    let mut c = Crc32c::new();
    c.update(data);
    c.value()
}

/// CRC32c of `data` by the portable slicing-by-8 path alone, whatever the CPU offers:
/// for cross-checks and benchmarks.
#[inline]
pub fn crc32c_portable(data: &[u8]) -> u32 {
    !update_table(!0, data)
}

/// Whether the hardware path is in use on this machine (reported by tests and benches).
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

#[inline]
fn update_best(reg: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("sse4.2") {
            // SAFETY: the CPU supports SSE4.2, checked just above.
            return unsafe { update_sse42(reg, data) };
        }
    }
    update_table(reg, data)
}

/// Portable slicing-by-8.
fn update_table(mut reg: u32, data: &[u8]) -> u32 {
    let t = &TABLES;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let lo = u32::from_le_bytes([c[0], c[1], c[2], c[3]]) ^ reg;
        let hi = u32::from_le_bytes([c[4], c[5], c[6], c[7]]);
        reg = t[7][(lo & 0xFF) as usize]
            ^ t[6][((lo >> 8) & 0xFF) as usize]
            ^ t[5][((lo >> 16) & 0xFF) as usize]
            ^ t[4][(lo >> 24) as usize]
            ^ t[3][(hi & 0xFF) as usize]
            ^ t[2][((hi >> 8) & 0xFF) as usize]
            ^ t[1][((hi >> 16) & 0xFF) as usize]
            ^ t[0][(hi >> 24) as usize];
    }
    for &b in chunks.remainder() {
        reg = (reg >> 8) ^ t[0][((reg ^ u32::from(b)) & 0xFF) as usize];
    }
    reg
}

/// SSE4.2 `crc32` instruction: it implements exactly the reflected Castagnoli update.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn update_sse42(reg: u32, data: &[u8]) -> u32 {
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

    fn bitwise(data: &[u8]) -> u32 {
        let mut reg = !0u32;
        for &b in data {
            reg ^= u32::from(b);
            for _ in 0..8 {
                reg = if reg & 1 != 0 {
                    (reg >> 1) ^ POLY
                } else {
                    reg >> 1
                };
            }
        }
        !reg
    }

    #[test]
    fn table_matches_bitwise_definition_at_every_length_and_alignment() {
        let data: Vec<u8> = (0..300u32).map(|i| (i * 151 + 7) as u8).collect();
        for start in 0..9 {
            for len in 0..(data.len() - start) {
                let d = &data[start..start + len];
                assert_eq!(!update_table(!0, d), bitwise(d), "start {start} len {len}");
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn hardware_matches_table() {
        if !std::is_x86_feature_detected!("sse4.2") {
            eprintln!("no SSE4.2 on this CPU; only the table path is exercised");
            return;
        }
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 31 + 3) as u8).collect();
        for start in 0..9 {
            for len in [0, 1, 3, 7, 8, 9, 15, 16, 17, 63, 64, 65, 500, 991] {
                let d = &data[start..start + len];
                // SAFETY: SSE4.2 presence checked above.
                let hw = unsafe { update_sse42(!0, d) };
                assert_eq!(hw, update_table(!0, d), "start {start} len {len}");
            }
        }
    }

    #[test]
    fn incremental_equals_one_shot() {
        let data: Vec<u8> = (0..200u8).collect();
        for split in 0..data.len() {
            let mut c = Crc32c::new();
            c.update(&data[..split]);
            c.update(&data[split..]);
            assert_eq!(c.value(), crc32c(&data));
        }
    }
}
