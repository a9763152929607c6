//! The simulation's only source of randomness: SplitMix64, seeded by the test.
//!
//! SplitMix64 is tiny, has no bad seeds (zero included) and passes BigCrush, which is
//! more than a scheduler needs; what matters here is that the same seed gives the same
//! stream on every platform, so a failing seed reproduces exactly.

/// A seeded SplitMix64 generator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimRng {
    state: u64,
}

impl SimRng {
    /// A generator whose stream is fully determined by `seed`.
    pub const fn new(seed: u64) -> Self {
        SimRng { state: seed }
    }

    /// An independent stream for `purpose`, derived from `seed`, so that consumers
    /// (delays, faults, a test's workload) do not shift each other's draws.
    pub fn stream(seed: u64, purpose: u64) -> Self {
        let mut mix = SimRng::new(seed ^ purpose.wrapping_mul(0xA076_1D64_78BD_642F));
        SimRng::new(mix.next_u64())
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..n`; 0 when `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        // Multiply-shift instead of `%`: no division, and the bias is negligible for the
        // small ranges a scheduler draws.
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// A value in `lo..=hi` (`lo` when `hi <= lo`).
    pub fn range_inclusive(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        match (hi - lo).checked_add(1) {
            Some(span) => lo + self.below(span),
            None => self.next_u64(),
        }
    }

    /// True with probability `per_mille / 1000` (never when 0, always from 1000 on).
    pub fn chance(&mut self, per_mille: u16) -> bool {
        per_mille > 0 && self.below(1000) < u64::from(per_mille)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_streams_differ() {
        let mut a = SimRng::new(7);
        let mut b = SimRng::new(7);
        let xs: Vec<u64> = (0..16).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..16).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        let mut c = SimRng::new(8);
        assert_ne!(xs[0], c.next_u64());
        assert_ne!(SimRng::stream(7, 1), SimRng::stream(7, 2));
    }

    #[test]
    fn ranges_stay_in_bounds() {
        let mut r = SimRng::new(1);
        for _ in 0..1000 {
            let v = r.range_inclusive(3, 9);
            assert!((3..=9).contains(&v));
            assert!(r.below(5) < 5);
        }
        assert_eq!(r.range_inclusive(4, 4), 4);
        assert_eq!(r.below(0), 0);
        assert!(!r.chance(0));
        assert!(r.chance(1000));
    }

    #[test]
    fn known_first_value_for_seed_zero() {
        // Pins the algorithm: a change here would silently change every recorded seed.
        assert_eq!(SimRng::new(0).next_u64(), 0xE220_A839_7B1D_CDAF);
    }
}
