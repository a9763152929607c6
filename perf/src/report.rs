//! Results: one [`Row`] per measurement, the ratio of each row to the matching row of the
//! layer below, the printed table and the JSON document.

use std::fmt::Write as _;

use serde::Serialize;

use crate::histogram::Histogram;
use crate::measure::Measurement;
use crate::paired::Paired;
use crate::spec::{Layer, Mode, RowSpec};
use crate::units::fmt_size;

/// The figures of a completed row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figures {
    /// Median latency, ns.
    pub p50_ns: u64,
    /// 90th percentile, ns.
    pub p90_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// 99.9th percentile, ns.
    pub p999_ns: u64,
    /// Largest latency, exact, ns.
    pub max_ns: u64,
    /// Smallest latency, exact, ns.
    pub min_ns: u64,
    /// Mean latency, ns.
    pub mean_ns: f64,
    /// Operations measured.
    pub ops: u64,
    /// Seconds measured.
    pub elapsed_s: f64,
    /// Operations per second.
    pub ops_per_s: f64,
    /// Payload gigabytes (1e9 octets) per second: `size` octets per operation.
    pub gb_per_s: f64,
    /// The row hit its hard deadline before its iterations or time were done.
    pub truncated: bool,
}

impl Figures {
    /// Figures of a measurement of `size`-octet operations.
    pub fn from_measurement(m: &Measurement, size: usize) -> Figures {
        let secs = m.elapsed.as_secs_f64();
        let ops_per_s = if secs > 0.0 { m.ops as f64 / secs } else { 0.0 };
        Figures {
            p50_ns: m.hist.percentile(50.0),
            p90_ns: m.hist.percentile(90.0),
            p99_ns: m.hist.percentile(99.0),
            p999_ns: m.hist.percentile(99.9),
            max_ns: m.hist.max(),
            min_ns: m.hist.min(),
            mean_ns: m.hist.mean(),
            ops: m.ops,
            elapsed_s: secs,
            ops_per_s,
            gb_per_s: ops_per_s * size as f64 / 1e9,
            truncated: m.truncated,
        }
    }
}

/// This row's figures divided by those of the row it is compared with.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ratio {
    /// The row compared with, e.g. "physical pingpong".
    pub against: String,
    /// p50 ratio (above 1: slower).
    pub p50: f64,
    /// p90 ratio.
    pub p90: f64,
    /// p99 ratio.
    pub p99: f64,
    /// p99.9 ratio.
    pub p999: f64,
    /// Max ratio.
    pub max: f64,
    /// Operations-per-second ratio (below 1: slower).
    pub ops_per_s: f64,
    /// Bandwidth ratio.
    pub gb_per_s: f64,
}

fn div(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else {
        f64::NAN
    }
}

impl Ratio {
    fn of(this: &Figures, base: &Figures, against: String) -> Ratio {
        Ratio {
            against,
            p50: div(this.p50_ns as f64, base.p50_ns as f64),
            p90: div(this.p90_ns as f64, base.p90_ns as f64),
            p99: div(this.p99_ns as f64, base.p99_ns as f64),
            p999: div(this.p999_ns as f64, base.p999_ns as f64),
            max: div(this.max_ns as f64, base.max_ns as f64),
            ops_per_s: div(this.ops_per_s, base.ops_per_s),
            gb_per_s: div(this.gb_per_s, base.gb_per_s),
        }
    }
}

/// One line of results.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Layer measured.
    pub layer: Layer,
    /// Benchmark name within the layer.
    pub bench: &'static str,
    /// Benchmark shape.
    pub mode: Mode,
    /// Octets per operation.
    pub size: usize,
    /// Operations in flight per connection.
    pub depth: u32,
    /// Connections.
    pub connections: u32,
    /// The figures, when the row ran.
    pub figures: Option<Figures>,
    /// Why the row has no figures.
    pub error: Option<String>,
    /// Comparison with the layer below.
    pub ratio: Option<Ratio>,
    /// A paired row's slices against its baseline ([`crate::paired`]); its `ratio` is
    /// then the median of the per-pair ratios.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub paired: Option<Paired>,
    /// Latency distribution, for plots.
    #[serde(skip)]
    pub hist: Option<Histogram>,
    /// The bench of the layer below this row is compared with; `None` takes the first
    /// row of that layer.
    #[serde(skip)]
    pub against: Option<&'static str>,
}

impl Row {
    /// A row that ran.
    pub fn measured(layer: Layer, bench: &'static str, spec: &RowSpec, m: Measurement) -> Row {
        let figures = Figures::from_measurement(&m, spec.size);
        Row {
            hist: Some(m.hist),
            figures: Some(figures),
            error: None,
            ..Row::empty(layer, bench, spec)
        }
    }

    /// A row that failed.
    pub fn failed(layer: Layer, bench: &'static str, spec: &RowSpec, error: String) -> Row {
        Row {
            error: Some(error),
            ..Row::empty(layer, bench, spec)
        }
    }

    fn empty(layer: Layer, bench: &'static str, spec: &RowSpec) -> Row {
        Row {
            layer,
            bench,
            mode: spec.mode,
            size: spec.size,
            depth: spec.depth,
            connections: spec.connections,
            figures: None,
            error: None,
            ratio: None,
            paired: None,
            hist: None,
            against: None,
        }
    }

    /// The same row with its paired comparison: its ratio is the median of the per-pair
    /// ratios (bandwidth and operation rate; the latency ratios are not paired).
    pub fn with_paired(mut self, paired: Paired) -> Row {
        self.ratio = paired.ratio.map(|r| Ratio {
            against: format!("{}, paired", paired.against),
            p50: f64::NAN,
            p90: f64::NAN,
            p99: f64::NAN,
            p999: f64::NAN,
            max: f64::NAN,
            ops_per_s: r.median,
            gb_per_s: r.median,
        });
        self.paired = Some(paired);
        self
    }

    /// The same row, compared with bench `against` of the layer below (if given).
    pub fn compared_with(mut self, against: Option<&'static str>) -> Row {
        self.against = against;
        self
    }

    /// "fabric send/recv 4k", for legends and progress lines.
    pub fn label(&self) -> String {
        format!(
            "{} {} {} {}",
            self.mode,
            self.layer,
            self.bench,
            fmt_size(self.size as u64)
        )
    }
}

/// The layer and bench a row's `against` names: a bench of the layer below, or, written
/// `"physical NAME"`, a bench of the physical layer (for an RPC row whose floor is a
/// physical baseline, such as the CRC'd sink beside memcpy+CRC).
fn against_of(row: &Row) -> (Option<Layer>, Option<&'static str>) {
    match row.against {
        Some(a) => match (a.strip_prefix("physical "), a.strip_prefix("rpc ")) {
            (Some(bench), _) => (Some(Layer::Physical), Some(bench)),
            // A row of the same RPC layer (a shape against another shape).
            (_, Some(bench)) => (Some(Layer::Rpc), Some(bench)),
            _ => (row.layer.reference(), Some(a)),
        },
        None => (row.layer.reference(), None),
    }
}

/// Fills in every row's ratio to the first row of the layer below (or the row its
/// `against` names) with the same mode, size, depth and connections.
pub fn compute_ratios(rows: &mut [Row]) {
    for i in 0..rows.len() {
        // A paired row's ratio comes from its own pairs.
        if rows[i].paired.is_some() {
            continue;
        }
        let (Some(want), bench) = against_of(&rows[i]) else {
            continue;
        };
        let base = rows.iter().find(|r| {
            r.layer == want
                && r.mode == rows[i].mode
                && r.size == rows[i].size
                && r.depth == rows[i].depth
                && r.connections == rows[i].connections
                && bench.is_none_or(|b| b == r.bench)
                && r.figures.is_some()
        });
        let ratio = match (base, &rows[i].figures) {
            (Some(b), Some(f)) => b
                .figures
                .as_ref()
                .map(|bf| Ratio::of(f, bf, format!("{} {}", b.layer, b.bench))),
            _ => None,
        };
        rows[i].ratio = ratio;
    }
}

fn us(ns: u64) -> String {
    format!("{:.3}", ns as f64 / 1e3)
}

fn rate(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.3}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.2}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

fn x(v: f64) -> String {
    if v.is_finite() {
        format!("x{v:.2}")
    } else {
        "-".to_owned()
    }
}

/// The column header line of [`table`].
pub const TABLE_HEADER: &str = "mode layer    bench        size depth conn   p50 us   p90 us   p99 us p99.9 us   max us      ops/s    GB/s";

/// The results as a fixed-width table, ratios on an indented line under each row that
/// has one.
pub fn table(rows: &[Row]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{TABLE_HEADER}");
    for r in rows {
        let _ = write!(
            s,
            "{:<4} {:<8} {:<10} {:>6} {:>5} {:>4}",
            r.mode.to_string(),
            r.layer.to_string(),
            r.bench,
            fmt_size(r.size as u64),
            r.depth,
            r.connections
        );
        match (&r.figures, &r.error) {
            (Some(f), _) => {
                let _ = writeln!(
                    s,
                    " {:>8} {:>8} {:>8} {:>8} {:>8} {:>10} {:>7.3}{}",
                    us(f.p50_ns),
                    us(f.p90_ns),
                    us(f.p99_ns),
                    us(f.p999_ns),
                    us(f.max_ns),
                    rate(f.ops_per_s),
                    f.gb_per_s,
                    if f.truncated {
                        "  (cut short at deadline)"
                    } else {
                        ""
                    }
                );
            }
            (None, Some(e)) => {
                let _ = writeln!(s, "  failed: {e}");
            }
            (None, None) => {
                let _ = writeln!(s, "  not run");
            }
        }
        if let Some(q) = &r.ratio {
            let label = format!("  vs {}", q.against);
            let _ = writeln!(
                s,
                "{label:<43} {:>8} {:>8} {:>8} {:>8} {:>8} {:>10} {:>7}",
                x(q.p50),
                x(q.p90),
                x(q.p99),
                x(q.p999),
                x(q.max),
                x(q.ops_per_s),
                x(q.gb_per_s)
            );
        }
        if let Some(p) = &r.paired {
            paired_lines(&mut s, &r.layer.to_string(), p);
        }
    }
    s
}

/// A paired row's lines under its ratio: both sides' medians, the per-pair ratios'
/// median and range, the TCP side's system calls, then every pair.
fn paired_lines(s: &mut String, side: &str, p: &Paired) {
    let slices = match p.slice_ops {
        Some(n) => format!("{n} operations"),
        None => format!("{:.0} ms", p.slice_ms),
    };
    let _ = writeln!(
        s,
        "  paired with {}: {} pairs of {slices} slices, alternated; medians {:.3} GB/s \
         (tcp) and {:.3} GB/s ({side})",
        p.against,
        p.pairs.len(),
        p.base_median_gb_per_s,
        p.median_gb_per_s
    );
    if let Some(r) = &p.ratio {
        let _ = write!(
            s,
            "  paired ratio: median {}, min {}, max {} (spread {:.1}% of the median); \
             ratio of the means {}",
            x(r.median),
            x(r.min),
            x(r.max),
            r.relative_spread() * 100.0,
            x(p.ratio_of_means.unwrap_or(f64::NAN))
        );
    }
    match p.base_syscalls_per_mib {
        Some((c, idle)) => {
            let _ = writeln!(
                s,
                "; tcp {c:.1} system calls per MiB ({:.1} moved data)",
                c - idle
            );
        }
        None => {
            let _ = writeln!(s);
        }
    }
    let _ = write!(s, "  pairs (tcp/{side} GB/s=ratio):");
    for (i, q) in p.pairs.iter().enumerate() {
        if i > 0 && i % 6 == 0 {
            let _ = write!(s, "\n   ");
        }
        let _ = write!(
            s,
            " {:.2}/{:.2}={}",
            q.base_gb_per_s,
            q.gb_per_s,
            x(q.ratio)
        );
    }
    let _ = writeln!(s);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn spec(mode: Mode, size: usize) -> RowSpec {
        RowSpec {
            mode,
            size,
            depth: 1,
            connections: 1,
            client_core: 0,
            server_core: 1,
        }
    }

    fn measured(layer: Layer, values: &[u64], secs: f64) -> Row {
        let mut hist = Histogram::new();
        for &v in values {
            hist.record(v);
        }
        let m = Measurement {
            ops: values.len() as u64,
            elapsed: Duration::from_secs_f64(secs),
            truncated: false,
            cpu: None,
            started: std::time::Instant::now(),
            hist,
        };
        Row::measured(layer, "b", &spec(Mode::Lat, 64), m)
    }

    #[test]
    fn ratios_compare_with_the_layer_below() {
        let mut rows = vec![
            measured(Layer::Physical, &[100; 10], 1.0),
            measured(Layer::Fabric, &[300; 10], 2.0),
            measured(Layer::Rpc, &[600; 10], 4.0),
        ];
        compute_ratios(&mut rows);
        assert!(rows[0].ratio.is_none());
        let f = rows[1].ratio.as_ref().unwrap();
        assert_eq!(f.against, "physical b");
        assert!((f.p50 - 3.0).abs() < 1e-9);
        assert!((f.ops_per_s - 0.5).abs() < 1e-9);
        let r = rows[2].ratio.as_ref().unwrap();
        assert_eq!(r.against, "fabric b");
        assert!((r.max - 2.0).abs() < 1e-9);
        let t = table(&rows);
        assert!(t.contains("vs physical b"), "{t}");
        assert!(t.contains("x3.00"), "{t}");
        assert_eq!(
            rows[0].figures.as_ref().unwrap().gb_per_s,
            10.0 * 64.0 / 1e9
        );
    }

    /// A paired row keeps the median of its own pairs as its ratio (compute_ratios
    /// does not replace it with the ratio to the separate row) and prints its pairs.
    #[test]
    fn paired_rows_keep_their_own_ratio() {
        use crate::paired::{pair, Paired};
        let pairs = [(2.0, 1.8), (5.0, 2.0), (4.0, 2.4)]
            .iter()
            .filter_map(|&(b, s)| pair(Some(b), Some(s), true))
            .collect();
        let paired = Paired::of(
            "physical b".into(),
            None,
            Some(50),
            pairs,
            Some((20.0, 8.0)),
        );
        let mut rows = vec![
            measured(Layer::Physical, &[100; 10], 1.0),
            measured(Layer::Fabric, &[300; 10], 2.0).with_paired(paired),
        ];
        compute_ratios(&mut rows);
        let r = rows[1].ratio.as_ref().unwrap();
        assert_eq!(r.against, "physical b, paired");
        assert!((r.gb_per_s - 0.6).abs() < 1e-12, "{r:?}");
        assert!(r.p50.is_nan());
        let t = table(&rows);
        assert!(
            t.contains("paired ratio: median x0.60, min x0.40, max x0.90"),
            "{t}"
        );
        assert!(
            t.contains("2.00/1.80=x0.90 5.00/2.00=x0.40 4.00/2.40=x0.60"),
            "{t}"
        );
        assert!(
            t.contains("tcp 20.0 system calls per MiB (12.0 moved data)"),
            "{t}"
        );
    }

    #[test]
    fn failed_rows_say_why() {
        let rows = vec![Row::failed(
            Layer::Fabric,
            "write",
            &spec(Mode::Bw, 4096),
            "fabric: boom".into(),
        )];
        let t = table(&rows);
        assert!(t.contains("failed: fabric: boom"), "{t}");
    }
}
