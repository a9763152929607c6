//! The latency histogram against a sorted-vector oracle.

use rpcrdma_perf::histogram::{rank, Histogram, RELATIVE_PRECISION};

/// xorshift64*: deterministic inputs without a dependency.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

const PERCENTILES: [f64; 12] = [
    0.0, 1.0, 10.0, 25.0, 50.0, 75.0, 90.0, 99.0, 99.9, 99.99, 99.999, 100.0,
];

fn oracle(sorted: &[u64], p: f64) -> u64 {
    sorted[rank(p, sorted.len() as u64) as usize - 1]
}

fn check(values: &[u64]) {
    let mut h = Histogram::new();
    for &v in values {
        h.record(v);
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    assert_eq!(h.count(), values.len() as u64);
    assert_eq!(h.min(), sorted[0]);
    assert_eq!(h.max(), *sorted.last().unwrap());
    let mean = values.iter().map(|&v| v as f64).sum::<f64>() / values.len() as f64;
    assert!((h.mean() - mean).abs() <= mean * 1e-9 + 1e-9);
    for p in PERCENTILES {
        let want = oracle(&sorted, p);
        let got = h.percentile(p);
        assert!(got >= want, "p{p}: {got} below the true {want}");
        let slack = (want as f64 * RELATIVE_PRECISION).floor() as u64;
        assert!(
            got <= want.saturating_add(slack),
            "p{p}: {got} more than 1/128 above the true {want}"
        );
        if want < 128 {
            assert_eq!(got, want, "values below 128 are exact");
        }
    }
    assert_eq!(h.percentile(100.0), h.max(), "p100 is the exact max");
}

#[test]
fn uniform_latencies_match_the_oracle() {
    let mut g = Gen(1);
    let v: Vec<u64> = (0..20_000).map(|_| 200 + g.next() % 5_000).collect();
    check(&v);
}

#[test]
fn heavy_tailed_latencies_match_the_oracle() {
    // Mostly ~1 us with a Pareto tail reaching milliseconds: the shape of real runs.
    let mut g = Gen(7);
    let v: Vec<u64> = (0..50_000)
        .map(|_| {
            let u = g.unit().max(1e-12);
            (800.0 / u.powf(1.0 / 1.3)).min(1e12) as u64
        })
        .collect();
    check(&v);
}

#[test]
fn small_and_extreme_values_match_the_oracle() {
    check(&[0, 1, 2, 3, 127, 128, 129, 255, 256, 257]);
    check(&[u64::MAX, u64::MAX - 1, 1 << 63, 42]);
    check(&[5]);
    let mut g = Gen(99);
    let v: Vec<u64> = (0..10_000).map(|_| g.next() >> (g.next() % 64)).collect();
    check(&v);
}

#[test]
fn merge_equals_recording_everything_in_one() {
    let mut g = Gen(3);
    let v: Vec<u64> = (0..4_000).map(|_| g.next() % 1_000_000).collect();
    let (mut a, mut b, mut all) = (Histogram::new(), Histogram::new(), Histogram::new());
    for (i, &x) in v.iter().enumerate() {
        if i % 3 == 0 { &mut a } else { &mut b }.record(x);
        all.record(x);
    }
    a.merge(&b);
    for p in PERCENTILES {
        assert_eq!(a.percentile(p), all.percentile(p));
    }
    assert_eq!(a.count(), all.count());
    assert_eq!((a.min(), a.max()), (all.min(), all.max()));
    a.clear();
    assert_eq!((a.count(), a.percentile(50.0), a.max()), (0, 0, 0));
}
