//! The results table, one row per permutation and tool (peers included), as CSV, JSON and
//! Markdown: backup time, backup CPU, size, restore time, restore CPU — medians with ranges.

use std::io::Write;

use serde::{Deserialize, Serialize};

use crate::stats::Summary;

/// One row of the table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// `sheaf`, `pg_basebackup`, `pgbackrest`.
    pub tool: String,
    /// Codec spec.
    pub compression: String,
    /// Stripes.
    pub stripes: usize,
    /// Transfer size in bytes.
    pub transfer_size: u64,
    /// Buffer count (empty: default).
    pub buffer_count: Option<usize>,
    /// Target.
    pub target: String,
    /// Backup wall seconds.
    pub backup_seconds: Summary,
    /// Backup CPU percent of all cores.
    pub backup_cpu_pct: Summary,
    /// Backup size in bytes.
    pub size_bytes: Summary,
    /// Bytes read.
    pub bytes_read: u64,
    /// Restore wall seconds (absent for a nul target).
    pub restore_seconds: Option<Summary>,
    /// Restore CPU percent of all cores.
    pub restore_cpu_pct: Option<Summary>,
}

impl Row {
    /// bytes_read / median size.
    pub fn ratio(&self) -> f64 {
        if self.size_bytes.median > 0.0 {
            self.bytes_read as f64 / self.size_bytes.median
        } else {
            0.0
        }
    }

    /// Backup throughput at the median time, MB/s.
    pub fn backup_mb_per_s(&self) -> f64 {
        if self.backup_seconds.median > 0.0 {
            self.bytes_read as f64 / self.backup_seconds.median / 1e6
        } else {
            0.0
        }
    }
}

/// The flat record a CSV row holds.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Flat {
    tool: String,
    compression: String,
    stripes: usize,
    transfer_size: u64,
    buffer_count: Option<usize>,
    target: String,
    bytes_read: u64,
    backup_s_median: f64,
    backup_s_min: f64,
    backup_s_max: f64,
    backup_cpu_pct_median: f64,
    size_bytes_median: f64,
    ratio: f64,
    backup_mb_per_s: f64,
    restore_s_median: Option<f64>,
    restore_s_min: Option<f64>,
    restore_s_max: Option<f64>,
    restore_cpu_pct_median: Option<f64>,
    repeats: usize,
}

impl From<&Row> for Flat {
    fn from(r: &Row) -> Flat {
        Flat {
            tool: r.tool.clone(),
            compression: r.compression.clone(),
            stripes: r.stripes,
            transfer_size: r.transfer_size,
            buffer_count: r.buffer_count,
            target: r.target.clone(),
            bytes_read: r.bytes_read,
            backup_s_median: r.backup_seconds.median,
            backup_s_min: r.backup_seconds.min,
            backup_s_max: r.backup_seconds.max,
            backup_cpu_pct_median: r.backup_cpu_pct.median,
            size_bytes_median: r.size_bytes.median,
            ratio: r.ratio(),
            backup_mb_per_s: r.backup_mb_per_s(),
            restore_s_median: r.restore_seconds.map(|s| s.median),
            restore_s_min: r.restore_seconds.map(|s| s.min),
            restore_s_max: r.restore_seconds.map(|s| s.max),
            restore_cpu_pct_median: r.restore_cpu_pct.map(|s| s.median),
            repeats: r.backup_seconds.n,
        }
    }
}

/// Write `report.csv`'s content: a header and one line per row.
///
/// # Errors
/// I/O errors of `out`.
pub fn write_csv(rows: &[Row], out: impl Write) -> std::io::Result<()> {
    let mut w = csv::Writer::from_writer(out);
    for r in rows {
        w.serialize(Flat::from(r)).map_err(std::io::Error::other)?;
    }
    w.flush()
}

/// Write `report.json`'s content: the rows with their full summaries.
///
/// # Errors
/// I/O errors of `out`.
pub fn write_json(rows: &[Row], out: impl Write) -> std::io::Result<()> {
    serde_json::to_writer_pretty(out, rows).map_err(std::io::Error::other)
}

fn range(s: &Summary, unit_digits: usize) -> String {
    if s.n > 1 && s.min != s.max {
        format!("{:.p$} ({:.p$}–{:.p$})", s.median, s.min, s.max, p = unit_digits)
    } else {
        format!("{:.p$}", s.median, p = unit_digits)
    }
}

/// Write `report.md`'s content: the seeds' table (median, min–max across repeats).
///
/// # Errors
/// I/O errors of `out`.
pub fn write_markdown(rows: &[Row], mut out: impl Write) -> std::io::Result<()> {
    writeln!(out, "| tool | compression | stripes | transfer | buffers | target | backup s | backup CPU % | size MB | ratio | restore s | restore CPU % |")?;
    writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|---|")?;
    for r in rows {
        writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {:.0} | {:.1} | {:.2} | {} | {} |",
            r.tool,
            r.compression,
            r.stripes,
            sheaf_core::size::format_size(r.transfer_size),
            r.buffer_count.map_or_else(|| "default".into(), |b| b.to_string()),
            r.target,
            range(&r.backup_seconds, 2),
            r.backup_cpu_pct.median,
            r.size_bytes.median / 1e6,
            r.ratio(),
            r.restore_seconds.as_ref().map_or_else(|| "-".into(), |s| range(s, 2)),
            r.restore_cpu_pct.as_ref().map_or_else(|| "-".into(), |s| format!("{:.0}", s.median)),
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::summarize;

    fn rows() -> Vec<Row> {
        vec![
            Row {
                tool: "sheaf".into(),
                compression: "zstd:low".into(),
                stripes: 2,
                transfer_size: 1 << 20,
                buffer_count: None,
                target: "/tmp/b, with comma".into(),
                backup_seconds: summarize(&[2.5, 2.4, 2.9]).unwrap(),
                backup_cpu_pct: summarize(&[90.0, 91.0, 89.0]).unwrap(),
                size_bytes: summarize(&[451e6, 451e6, 451e6]).unwrap(),
                bytes_read: 1_397_000_000,
                restore_seconds: summarize(&[3.6, 3.3, 5.0]),
                restore_cpu_pct: summarize(&[50.0, 49.0, 52.0]),
            },
            Row {
                tool: "sheaf".into(),
                compression: "lz4".into(),
                stripes: 1,
                transfer_size: 65536,
                buffer_count: Some(7),
                target: "nul".into(),
                backup_seconds: summarize(&[1.6]).unwrap(),
                backup_cpu_pct: summarize(&[95.0]).unwrap(),
                size_bytes: summarize(&[587e6]).unwrap(),
                bytes_read: 1_397_000_000,
                restore_seconds: None,
                restore_cpu_pct: None,
            },
        ]
    }

    #[test]
    fn csv_parses_back() {
        let mut buf = Vec::new();
        write_csv(&rows(), &mut buf).unwrap();
        let mut r = csv::Reader::from_reader(&buf[..]);
        let back: Vec<Flat> = r.deserialize().collect::<Result<_, _>>().unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[0], Flat::from(&rows()[0]));
        assert_eq!(back[0].target, "/tmp/b, with comma", "quoting survives");
        assert_eq!(back[0].backup_s_median, 2.5);
        assert_eq!(back[1].restore_s_median, None);
        assert!((back[0].ratio - 1397.0 / 451.0).abs() < 1e-9);
    }

    #[test]
    fn json_parses_back() {
        let mut buf = Vec::new();
        write_json(&rows(), &mut buf).unwrap();
        let back: Vec<Row> = serde_json::from_slice(&buf).unwrap();
        assert_eq!(back, rows());
    }

    #[test]
    fn markdown_has_a_row_per_result_with_ranges() {
        let mut buf = Vec::new();
        write_markdown(&rows(), &mut buf).unwrap();
        let text = String::from_utf8(buf).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[2].contains("| 2.50 (2.40–2.90) |") && lines[2].contains("| 3.60 (3.30–5.00) |"), "{}", lines[2]);
        assert!(lines[3].contains("| nul |") && lines[3].ends_with("| - | - |"), "{}", lines[3]);
        assert_eq!(lines.iter().map(|l| l.matches('|').count()).collect::<Vec<_>>(), vec![13; 4], "every line has all columns");
    }
}
