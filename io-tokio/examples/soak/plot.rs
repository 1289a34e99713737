//! The soak's plot: throughput, pending rows and resident memory over time, one panel each, as
//! a self-contained SVG (any browser shows it), with the kills and the outage marked.

use std::fmt::Write as _;

/// One sample of the run.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// Seconds since the start.
    pub t: f64,
    /// Rows made durable per second over the last interval.
    pub rows_per_sec: f64,
    /// Rows generated and not yet committed.
    pub pending: f64,
    /// Resident memory, MiB.
    pub rss_mib: f64,
    /// Its anonymous part (not the binary's pages), MiB.
    pub rss_anon_mib: f64,
    /// Live heap bytes (allocated and not freed, counted by the global allocator), MiB.
    pub heap_mib: f64,
    /// The highest live heap since the previous sample, MiB.
    pub heap_peak_mib: f64,
}

/// A panel: its title, the value it plots (black) and optional second and third ones (green,
/// light green).
type Panel = (
    &'static str,
    fn(&Sample) -> f64,
    Option<fn(&Sample) -> f64>,
    Option<fn(&Sample) -> f64>,
);

const W: f64 = 900.0;
const PANEL: f64 = 180.0;
const LEFT: f64 = 80.0;
const GAP: f64 = 40.0;

/// The SVG: three panels over `samples`, vertical marks at `kills` (red) and the outage span
/// (grey), and `drifts` (blue).
pub fn svg(samples: &[Sample], kills: &[f64], drifts: &[f64], outage: (f64, f64)) -> String {
    let end = samples.last().map_or(1.0, |s| s.t).max(1.0);
    let panels: [Panel; 3] = [
        ("durable rows/s", |s| s.rows_per_sec, None, None),
        ("pending rows", |s| s.pending, None, None),
        (
            "memory (MiB): resident (black), live heap (green), its peak per 5 s (light green)",
            |s| s.rss_mib,
            Some(|s| s.heap_mib),
            Some(|s| s.heap_peak_mib),
        ),
    ];
    let height = GAP + 3.0 * (PANEL + GAP);
    let mut out = String::new();
    let _ = write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{height}" font-family="sans-serif" font-size="12">"##
    );
    let _ = write!(out, r##"<rect width="100%" height="100%" fill="white"/>"##);
    for (i, (title, value, second, third)) in panels.iter().enumerate() {
        let top = GAP + i as f64 * (PANEL + GAP);
        let max = samples
            .iter()
            .map(|s| {
                value(s)
                    .max(second.map_or(0.0, |f| f(s)))
                    .max(third.map_or(0.0, |f| f(s)))
            })
            .fold(0.0_f64, f64::max)
            .max(1.0);
        let x = |t: f64| LEFT + (W - LEFT - 20.0) * t / end;
        let y = |v: f64| top + PANEL - PANEL * v / max;
        let _ = write!(
            out,
            r##"<text x="{LEFT}" y="{}" font-weight="bold">{title}</text>"##,
            top - 8.0
        );
        let _ = write!(
            out,
            r##"<rect x="{}" y="{top}" width="{}" height="{PANEL}" fill="#ddd"/>"##,
            x(outage.0),
            (x(outage.1) - x(outage.0)).max(0.0)
        );
        for &k in kills {
            let _ = write!(
                out,
                r##"<line x1="{0}" x2="{0}" y1="{top}" y2="{1}" stroke="#e55" stroke-width="1"/>"##,
                x(k),
                top + PANEL
            );
        }
        for &d in drifts {
            let _ = write!(
                out,
                r##"<line x1="{0}" x2="{0}" y1="{top}" y2="{1}" stroke="#55e" stroke-dasharray="4 3"/>"##,
                x(d),
                top + PANEL
            );
        }
        let series = [(*third, "#9d9"), (Some(*value), "black"), (*second, "#2a2")];
        for (f, colour) in series {
            let Some(f) = f else { continue };
            let points: Vec<String> = samples
                .iter()
                .map(|s| format!("{:.1},{:.1}", x(s.t), y(f(s))))
                .collect();
            let _ = write!(
                out,
                r##"<polyline fill="none" stroke="{colour}" stroke-width="1.2" points="{}"/>"##,
                points.join(" ")
            );
        }
        let _ = write!(
            out,
            r##"<rect x="{LEFT}" y="{top}" width="{}" height="{PANEL}" fill="none" stroke="#888"/>"##,
            W - LEFT - 20.0
        );
        let _ = write!(
            out,
            r##"<text x="{}" y="{}" text-anchor="end">{}</text><text x="{}" y="{}" text-anchor="end">0</text>"##,
            LEFT - 6.0,
            top + 10.0,
            human(max),
            LEFT - 6.0,
            top + PANEL
        );
    }
    let _ = write!(
        out,
        r##"<text x="{LEFT}" y="{}">0 s</text><text x="{}" y="{}" text-anchor="end">{:.0} s   (red: kill -9; blue: schema drift; grey: catalog outage)</text></svg>"##,
        height - 10.0,
        W - 20.0,
        height - 10.0,
        end
    );
    out
}

fn human(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}
