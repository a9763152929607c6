//! A preallocated log-linear latency histogram (in the style of HdrHistogram) with an
//! exact minimum, maximum and mean.
//!
//! Values below 128 get a bucket each; above that, every power-of-two range is cut into
//! 128 equal buckets, so a bucket is never wider than 1/128 (0.78%) of the values in it.
//! Recording is an index computation and an increment: no allocation, no branch on the
//! data beyond the small-value test, so it can sit inside a measured loop.
//!
//! Percentiles use the nearest-rank definition (see [`rank`]) and report the highest
//! value of the bucket holding that rank, capped at the exact maximum: the reported value
//! is never below the true one and at most 1/128 above it.

/// Sub-buckets per power of two, as a power of two.
const SUB_BITS: u32 = 7;
/// Sub-buckets per power of two.
const SUB: usize = 1 << SUB_BITS;
/// Groups: one linear group for values below [`SUB`], then one per power of two from
/// 2^7 to 2^63.
const GROUPS: usize = 64 - SUB_BITS as usize + 1;
/// Number of buckets.
pub const BUCKETS: usize = GROUPS * SUB;

/// Largest relative error of a reported percentile: a bucket's width over its low bound.
pub const RELATIVE_PRECISION: f64 = 1.0 / SUB as f64;

/// The nearest rank (1-based) of percentile `p` (0..=100) among `n` values:
/// `ceil(p / 100 * n)`, at least 1. Computed in integers (`p` in millionths of a percent)
/// so that, say, p99.9 of 1000 values is rank 999 and not 1000 through rounding.
pub fn rank(p: f64, n: u64) -> u64 {
    let p = p.clamp(0.0, 100.0);
    // Millionths of a percent; 100% is 1e8.
    let micro = (p * 1_000_000.0).round() as u128;
    let num = micro * u128::from(n);
    let den = 100_000_000u128;
    let r = num.div_ceil(den);
    u64::try_from(r).unwrap_or(u64::MAX).clamp(1, n.max(1))
}

/// A latency histogram. Create it before the measured loop; [`record`](Self::record)
/// never allocates.
#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64]>,
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("count", &self.count)
            .field("min", &self.min())
            .field("max", &self.max())
            .finish_non_exhaustive()
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram::new()
    }
}

#[inline]
fn index(v: u64) -> usize {
    if v < SUB as u64 {
        return v as usize;
    }
    let msb = 63 - v.leading_zeros();
    let shift = msb - SUB_BITS;
    let sub = (v >> shift) as usize - SUB;
    (shift as usize + 1) * SUB + sub
}

/// Lowest and highest value of bucket `i`.
fn bounds(i: usize) -> (u64, u64) {
    let group = i / SUB;
    let sub = (i % SUB) as u64;
    if group == 0 {
        return (sub, sub);
    }
    let shift = (group - 1) as u32;
    let low = (SUB as u64 + sub) << shift;
    let width = 1u64 << shift;
    (low, low.saturating_add(width - 1))
}

impl Histogram {
    /// An empty histogram (one allocation of [`BUCKETS`] counters, up front).
    pub fn new() -> Histogram {
        Histogram {
            counts: vec![0u64; BUCKETS].into_boxed_slice(),
            count: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }

    /// Adds one value.
    #[inline]
    pub fn record(&mut self, v: u64) {
        // index() < BUCKETS for every u64 (largest: group 57, sub 127).
        if let Some(c) = self.counts.get_mut(index(v)) {
            *c += 1;
        }
        self.count += 1;
        self.sum += u128::from(v);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    /// Adds everything recorded in `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += *b;
        }
        self.count += other.count;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    /// Forgets everything (e.g. after warm-up) without freeing.
    pub fn clear(&mut self) {
        self.counts.fill(0);
        self.count = 0;
        self.sum = 0;
        self.min = u64::MAX;
        self.max = 0;
    }

    /// Values recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Smallest value, exact (0 when empty).
    pub fn min(&self) -> u64 {
        if self.count == 0 {
            0
        } else {
            self.min
        }
    }

    /// Largest value, exact (0 when empty).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// Mean, exact up to floating-point rounding (0 when empty).
    pub fn mean(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum as f64 / self.count as f64
        }
    }

    /// The value at percentile `p` (0..=100, nearest rank), at most
    /// [`RELATIVE_PRECISION`] above the true one; exact for `p == 100` and for values
    /// below 128. 0 when empty.
    pub fn percentile(&self, p: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let want = rank(p, self.count);
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                let (_, high) = bounds(i);
                return high.clamp(self.min, self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_tile_the_range_without_gaps() {
        let mut next = 0u64;
        for i in 0..BUCKETS {
            let (low, high) = bounds(i);
            assert_eq!(low, next, "bucket {i}");
            assert!(high >= low);
            assert_eq!(index(low), i);
            assert_eq!(index(high), i);
            if i >= SUB {
                assert!((high - low + 1) as f64 <= low as f64 * RELATIVE_PRECISION + 1e-9);
            }
            next = high.wrapping_add(1);
        }
        assert_eq!(next, 0, "the last bucket ends at u64::MAX");
    }

    #[test]
    fn rank_is_nearest_rank() {
        assert_eq!(rank(50.0, 100), 50);
        assert_eq!(rank(99.9, 1000), 999);
        assert_eq!(rank(99.9, 1001), 1000);
        assert_eq!(rank(0.0, 10), 1);
        assert_eq!(rank(100.0, 10), 10);
        assert_eq!(rank(50.0, 0), 1);
    }
}
