//! Parsing and printing of the harness's command-line quantities: message sizes and size
//! ranges (`64,4k..1m`), durations (`500ms`, `2s`), warm-up (`1000` iterations or a
//! duration) and core lists (`0,1`, `0-3`).

use core::fmt;
use std::time::Duration;

/// A command-line value that does not parse, with the reason in words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{input:?}: {reason}")]
pub struct ParseError {
    /// The text given.
    pub input: String,
    /// What is wrong and what would be right.
    pub reason: String,
}

fn err(input: &str, reason: impl Into<String>) -> ParseError {
    ParseError {
        input: input.to_owned(),
        reason: reason.into(),
    }
}

/// Largest message size accepted: 1 GiB.
pub const MAX_SIZE: u64 = 1 << 30;

/// Parses one size: digits with an optional binary suffix `k`, `m`, `g` (also `kb`,
/// `kib`, any case). `4k` is 4096.
pub fn parse_size(s: &str) -> Result<u64, ParseError> {
    let t = s.trim().to_ascii_lowercase();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(digits_end);
    if digits.is_empty() {
        return Err(err(s, "a size starts with digits, e.g. 64, 4k, 1m"));
    }
    let mult: u64 = match suffix {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => {
            return Err(err(
                s,
                "unknown size suffix; use k, m or g (powers of 1024)",
            ))
        }
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| err(s, "size does not fit in 64 bits"))?;
    let v = n
        .checked_mul(mult)
        .ok_or_else(|| err(s, "size does not fit in 64 bits"))?;
    if v == 0 {
        return Err(err(s, "a size must be at least 1 octet"));
    }
    if v > MAX_SIZE {
        return Err(err(s, "sizes above 1g are not supported"));
    }
    Ok(v)
}

/// Parses a comma-separated list of sizes and ranges. `A..B` means A, 2A, 4A, ... up to
/// and including B (B itself is added if the doubling skips it). The result is sorted
/// and free of duplicates.
pub fn parse_sizes(s: &str) -> Result<Vec<u64>, ParseError> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once("..") {
            Some((lo, hi)) => {
                let lo_v = parse_size(lo)?;
                let hi_v = parse_size(hi)?;
                if lo_v > hi_v {
                    return Err(err(part, "a range goes from small to large, e.g. 4k..1m"));
                }
                let mut v = lo_v;
                while v < hi_v {
                    out.push(v);
                    v = v.saturating_mul(2);
                }
                out.push(hi_v);
            }
            None => out.push(parse_size(part)?),
        }
    }
    if out.is_empty() {
        return Err(err(s, "give at least one size, e.g. 64 or 4k..1m"));
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Parses a duration: a number (fractions allowed) with unit `ns`, `us`, `ms`, `s` or
/// `m`; a bare number means seconds.
pub fn parse_duration(s: &str) -> Result<Duration, ParseError> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| err(s, "a duration is a number with a unit, e.g. 500ms, 2s"))?;
    let secs = match unit.trim() {
        "ns" => n / 1e9,
        "us" | "µs" => n / 1e6,
        "ms" => n / 1e3,
        "" | "s" => n,
        "m" | "min" => n * 60.0,
        _ => return Err(err(s, "unknown unit; use ns, us, ms, s or m")),
    };
    if !secs.is_finite() || secs > 24.0 * 3600.0 {
        return Err(err(s, "durations above a day are not supported"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// How long a warm-up or measurement lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Amount {
    /// A number of operations.
    Iters(u64),
    /// A stretch of time.
    Time(Duration),
}

impl fmt::Display for Amount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Amount::Iters(n) => write!(f, "{n} iterations"),
            Amount::Time(d) => write!(f, "{}", fmt_duration(*d)),
        }
    }
}

/// Parses a warm-up: a plain integer is a number of iterations, anything with a unit a
/// duration.
pub fn parse_amount(s: &str) -> Result<Amount, ParseError> {
    let t = s.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t
            .parse()
            .map(Amount::Iters)
            .map_err(|_| err(s, "iteration count does not fit in 64 bits"));
    }
    parse_duration(t).map(Amount::Time)
}

/// Parses a core list: `0,1`, `0-3`, `0,2-3`. Duplicates are dropped; order is that of
/// first appearance, because the first core runs the measuring thread.
pub fn parse_cores(s: &str) -> Result<Vec<usize>, ParseError> {
    let mut out: Vec<usize> = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let num = |x: &str| {
            x.trim()
                .parse::<usize>()
                .map_err(|_| err(part, "a core is a number; lists look like 0,1 or 0-3"))
        };
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let c = num(part)?;
                (c, c)
            }
        };
        if lo > hi || hi - lo > 4096 {
            return Err(err(part, "a core range goes from low to high, e.g. 0-3"));
        }
        for c in lo..=hi {
            if !out.contains(&c) {
                out.push(c);
            }
        }
    }
    if out.is_empty() {
        return Err(err(s, "give at least one core, e.g. 0,1"));
    }
    Ok(out)
}

/// A size for people: `64`, `4k`, `1m`, `1536`.
pub fn fmt_size(v: u64) -> String {
    for (shift, suffix) in [(30, "g"), (20, "m"), (10, "k")] {
        if v >= 1 << shift && v & ((1 << shift) - 1) == 0 {
            return format!("{}{suffix}", v >> shift);
        }
    }
    v.to_string()
}

/// A duration for people: `1.5s`, `200ms`, `40us`.
pub fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 1.0 {
        format!("{s}s")
    } else if s >= 1e-3 {
        format!("{}ms", s * 1e3)
    } else {
        format!("{}us", s * 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_ranges() {
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("1M").unwrap(), 1 << 20);
        assert_eq!(parse_size("2KiB").unwrap(), 2048);
        assert_eq!(parse_sizes("4k..1m").unwrap().len(), 9);
        assert_eq!(
            parse_sizes("64, 4k..16k,64").unwrap(),
            vec![64, 4096, 8192, 16384]
        );
        assert_eq!(parse_sizes("3..10").unwrap(), vec![3, 6, 10]);
        assert!(parse_sizes("1m..4k").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("2g").is_err());
        assert!(parse_size("4q").is_err());
        assert!(parse_sizes("").is_err());
        assert_eq!(fmt_size(4096), "4k");
        assert_eq!(fmt_size(1536), "1536");
    }

    #[test]
    fn durations_amounts_and_cores() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("5 parsecs").is_err());
        assert_eq!(parse_amount("200").unwrap(), Amount::Iters(200));
        assert_eq!(
            parse_amount("100ms").unwrap(),
            Amount::Time(Duration::from_millis(100))
        );
        assert_eq!(parse_cores("0,1").unwrap(), vec![0, 1]);
        assert_eq!(parse_cores("1,0-2").unwrap(), vec![1, 0, 2]);
        assert!(parse_cores("3-1").is_err());
        assert!(parse_cores("x").is_err());
    }
}
