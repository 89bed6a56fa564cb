//! Medians, percentiles and the result table.

use std::time::Duration;

use serde::Serialize;

/// One measured row.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub section: &'static str,
    pub name: String,
    /// Median, in microseconds (or the figure's own unit, see `unit`).
    pub median: f64,
    pub p99: Option<f64>,
    pub unit: &'static str,
    /// Ratio against the section's baseline, measured in the same run.
    pub ratio: Option<f64>,
    pub samples: usize,
    pub note: String,
    /// The row's stable key in `--json`'s `metrics` (benches/README.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<&'static str>,
    /// More stable metrics the row carries (ratios to other rows).
    #[serde(skip)]
    pub extra: Vec<(&'static str, f64)>,
}

impl Row {
    /// Gives the row its stable key: `metrics` then holds `KEY_<unit>`
    /// (the median) and, with a ratio, `KEY_ratio`.
    pub fn keyed(mut self, key: &'static str) -> Row {
        self.key = Some(key);
        self
    }
}

/// The stable metrics of a run: every keyed row's median (`key_us`,
/// `key_mib`, ...) and ratio (`key_ratio`), and the rows' extra metrics.
/// Rows not measured on this host are left out, not zero.
pub fn metrics(rows: &[Row]) -> std::collections::BTreeMap<String, f64> {
    let mut m = std::collections::BTreeMap::new();
    for r in rows {
        if let Some(key) = r.key {
            let unit = match r.unit {
                "µs" => "us",
                "ms" => "ms",
                "MiB" => "mib",
                "KiB" => "kib",
                _ => "value",
            };
            if r.median.is_finite() {
                m.insert(format!("{key}_{unit}"), r.median);
            }
            if let Some(ratio) = r.ratio.filter(|x| x.is_finite()) {
                m.insert(format!("{key}_ratio"), ratio);
            }
        }
        for (k, v) in &r.extra {
            if v.is_finite() {
                m.insert((*k).to_owned(), *v);
            }
        }
    }
    m
}

pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Median and p99 of samples, in microseconds.
pub fn summarize(mut v: Vec<Duration>) -> (f64, f64) {
    if v.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    v.sort();
    let median = us(v[v.len() / 2]);
    let p99 = us(v[((v.len() * 99) / 100).min(v.len() - 1)]);
    (median, p99)
}

pub fn row(section: &'static str, name: impl Into<String>, samples: Vec<Duration>) -> Row {
    let n = samples.len();
    let (median, p99) = summarize(samples);
    Row {
        section,
        name: name.into(),
        median,
        p99: Some(p99),
        unit: "µs",
        ratio: None,
        samples: n,
        note: String::new(),
        key: None,
        extra: Vec::new(),
    }
}

pub fn figure(
    section: &'static str,
    name: impl Into<String>,
    value: f64,
    unit: &'static str,
    note: impl Into<String>,
) -> Row {
    Row {
        section,
        name: name.into(),
        median: value,
        p99: None,
        unit,
        ratio: None,
        samples: 1,
        note: note.into(),
        key: None,
        extra: Vec::new(),
    }
}

pub fn not_built(section: &'static str, name: impl Into<String>, why: impl Into<String>) -> Row {
    Row {
        section,
        name: name.into(),
        median: f64::NAN,
        p99: None,
        unit: "",
        ratio: None,
        samples: 0,
        note: why.into(),
        key: None,
        extra: Vec::new(),
    }
}

pub fn print_table(rows: &[Row]) {
    let mut rows = rows.to_vec();
    // Sections are numbered; a stable sort keeps rows in measured order.
    rows.sort_by_key(|r| r.section);
    let mut section = "";
    for r in &rows {
        if r.section != section {
            section = r.section;
            println!("\n## {section}");
            println!(
                "{:<52} {:>12} {:>12} {:>8}  note",
                "", "median", "p99", "ratio"
            );
        }
        let fmt = |v: f64| {
            if v.is_nan() {
                "-".to_string()
            } else if r.unit == "µs" && v >= 10_000.0 {
                format!("{:.1} ms", v / 1000.0)
            } else {
                format!("{v:.1} {}", r.unit)
            }
        };
        let ratio = r.ratio.map(|x| format!("{x:.2}x")).unwrap_or_default();
        println!(
            "{:<52} {:>12} {:>12} {:>8}  {}",
            r.name,
            fmt(r.median),
            r.p99.map(fmt).unwrap_or_default(),
            ratio,
            r.note
        );
    }
}
