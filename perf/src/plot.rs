//! The latency distribution of every row as an SVG percentile plot, written by hand (a
//! few hundred octets of markup do not justify a plotting library).
//!
//! The x axis is in "nines": 0 is the median's left end (p0), 1 is p90, 2 is p99, 3 is
//! p99.9, 4 is p99.99, so the tail gets as much room as the body. The y axis is latency
//! on a log scale.

use std::fmt::Write as _;

use crate::report::Row;

const W: f64 = 900.0;
const H: f64 = 520.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 260.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const MAX_NINES: f64 = 4.0;
const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Percentiles sampled along the x axis.
fn sample_points() -> Vec<f64> {
    let steps = 80;
    (0..=steps)
        .map(|i| {
            let nines = MAX_NINES * i as f64 / steps as f64;
            100.0 * (1.0 - 10f64.powf(-nines))
        })
        .collect()
}

/// The SVG document for the rows that have a latency distribution.
pub fn svg(title: &str, rows: &[Row]) -> String {
    let series: Vec<(String, Vec<(f64, f64)>)> = rows
        .iter()
        .filter_map(|r| {
            let h = r.hist.as_ref().filter(|h| h.count() > 0)?;
            let pts = sample_points()
                .into_iter()
                .map(|p| {
                    let nines = -(1.0 - p / 100.0).max(1e-12).log10();
                    (nines.min(MAX_NINES), h.percentile(p).max(1) as f64 / 1e3)
                })
                .collect();
            Some((r.label(), pts))
        })
        .collect();
    let (mut lo, mut hi) = (f64::MAX, f64::MIN);
    for (_, pts) in &series {
        for &(_, y) in pts {
            lo = lo.min(y);
            hi = hi.max(y);
        }
    }
    if series.is_empty() {
        (lo, hi) = (0.1, 10.0);
    }
    let lo_dec = lo.log10().floor();
    let hi_dec = hi.log10().ceil().max(lo_dec + 1.0);
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let px = |n: f64| LEFT + n / MAX_NINES * pw;
    let py = |us: f64| TOP + ph - (us.log10() - lo_dec) / (hi_dec - lo_dec) * ph;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" font-size="13" text-anchor="middle">{}</text>"#,
        W / 2.0,
        escape(title)
    );
    // Grid and axis labels.
    for (n, label) in [
        (0.0, "p0"),
        (1.0, "p90"),
        (2.0, "p99"),
        (3.0, "p99.9"),
        (4.0, "p99.99"),
    ] {
        let xx = px(n);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" y1="{TOP}" x2="{xx:.1}" y2="{:.1}" stroke="#ddd"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{label}</text>"##,
            TOP + ph,
            TOP + ph + 18.0
        );
    }
    let mut d = lo_dec;
    while d <= hi_dec + 1e-9 {
        let v = 10f64.powf(d);
        let yy = py(v);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + pw,
            LEFT - 6.0,
            yy + 4.0,
            if v >= 1.0 {
                format!("{v:.0}")
            } else {
                format!("{v}")
            }
        );
        d += 1.0;
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">percentile</text>"#,
        LEFT + pw / 2.0,
        H - 16.0
    );
    let _ = writeln!(
        s,
        r#"<text x="18" y="{}" text-anchor="middle" transform="rotate(-90 18 {})">latency (us, log scale)</text>"#,
        TOP + ph / 2.0,
        TOP + ph / 2.0
    );
    let _ = writeln!(
        s,
        r#"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
    );
    for (i, (label, pts)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut path = String::new();
        for &(n, us) in pts {
            let _ = write!(path, "{:.1},{:.1} ", px(n), py(us));
        }
        let _ = writeln!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            path.trim_end()
        );
        let ly = TOP + 10.0 + i as f64 * 18.0;
        let lx = LEFT + pw + 14.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
            lx + 20.0,
            lx + 26.0,
            ly + 4.0,
            escape(label)
        );
    }
    if series.is_empty() {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">no rows with latencies</text>"#,
            LEFT + pw / 2.0,
            TOP + ph / 2.0
        );
    }
    s.push_str("</svg>\n");
    s
}
