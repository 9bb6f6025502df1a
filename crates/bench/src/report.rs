//! The results table, one row per permutation and tool (peers included), as CSV, JSON and
//! Markdown: backup time, backup CPU, size, restore time, restore CPU — medians with ranges.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sheaf_core::{Error, ErrorKind, Result};

use crate::results::{BenchResult, DiskProbe, RewindSample, Row, Sample};
use crate::stats::Summary;

/// The flat record a CSV row holds.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Flat {
    tool: String,
    backup_type: String,
    compression: String,
    settings: String,
    stripes: usize,
    transfer_size: u64,
    buffer_count: Option<usize>,
    buffers_used: Option<usize>,
    target: String,
    bytes_read: u64,
    backup_s_median: f64,
    backup_s_min: f64,
    backup_s_max: f64,
    backup_cpu_pct_median: f64,
    backup_host_cpu_pct_median: f64,
    backup_peak_rss_bytes_median: f64,
    size_bytes_median: f64,
    ratio: f64,
    backup_mb_per_s: f64,
    verify_s_median: Option<f64>,
    restore_s_median: Option<f64>,
    restore_s_min: Option<f64>,
    restore_s_max: Option<f64>,
    restore_cpu_pct_median: Option<f64>,
    restore_host_cpu_pct_median: Option<f64>,
    restore_peak_rss_bytes_median: Option<f64>,
    delta_restore_s_median: Option<f64>,
    consolidate_s_median: Option<f64>,
    repeats: usize,
}

impl From<&Row> for Flat {
    fn from(r: &Row) -> Flat {
        Flat {
            tool: r.setting.tool.clone(),
            backup_type: r.setting.backup_type.clone(),
            compression: r.setting.compression.clone(),
            settings: r.setting.settings.clone(),
            stripes: r.setting.stripes,
            transfer_size: r.setting.transfer_size,
            buffer_count: r.setting.buffer_count,
            buffers_used: r.buffers_used,
            target: r.setting.target.clone(),
            bytes_read: r.bytes_read,
            backup_s_median: r.backup_seconds.median,
            backup_s_min: r.backup_seconds.min,
            backup_s_max: r.backup_seconds.max,
            backup_cpu_pct_median: r.backup_cpu_pct.median,
            backup_host_cpu_pct_median: r.backup_host_cpu_pct.median,
            backup_peak_rss_bytes_median: r.backup_peak_rss_bytes.median,
            size_bytes_median: r.size_bytes.median,
            ratio: r.ratio(),
            backup_mb_per_s: r.backup_mb_per_s(),
            verify_s_median: r.verify_seconds.map(|s| s.median),
            restore_s_median: r.restore_seconds.map(|s| s.median),
            restore_s_min: r.restore_seconds.map(|s| s.min),
            restore_s_max: r.restore_seconds.map(|s| s.max),
            restore_cpu_pct_median: r.restore_cpu_pct.map(|s| s.median),
            restore_host_cpu_pct_median: r.restore_host_cpu_pct.map(|s| s.median),
            restore_peak_rss_bytes_median: r.restore_peak_rss_bytes.map(|s| s.median),
            delta_restore_s_median: r.delta_restore_seconds.map(|s| s.median),
            consolidate_s_median: r.consolidate_seconds.map(|s| s.median),
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

/// Write `report.json`'s content: the rows with their full summaries (and whatever else `value`
/// holds: [`write_all`] writes the whole [`BenchResult`]).
///
/// # Errors
/// I/O errors of `out`.
pub fn write_json<T: Serialize + ?Sized>(value: &T, out: impl Write) -> std::io::Result<()> {
    serde_json::to_writer_pretty(out, value).map_err(std::io::Error::other)
}

/// The median, and the range when it shows at this precision.
fn range(s: &Summary, unit_digits: usize) -> String {
    let (lo, hi) = (format!("{:.p$}", s.min, p = unit_digits), format!("{:.p$}", s.max, p = unit_digits));
    if s.n > 1 && lo != hi {
        format!("{:.p$} ({lo}–{hi})", s.median, p = unit_digits)
    } else {
        format!("{:.p$}", s.median, p = unit_digits)
    }
}

/// The table's columns, as text cells, for the Markdown and terminal writers.
const HEADER: [&str; 19] = [
    "tool",
    "type",
    "compression",
    "stripes",
    "transfer",
    "buffers",
    "target",
    "backup s",
    "MB/s",
    "CPU %",
    "host CPU %",
    "RSS MiB",
    "size MB",
    "ratio",
    "verify s",
    "restore s",
    "restore CPU %",
    "delta restore s",
    "consolidate s",
];

fn cells(r: &Row) -> [String; 19] {
    let sheaf = r.setting.tool == "sheaf";
    let knob = |v: String| if sheaf { v } else { "-".to_string() };
    let opt = |s: &Option<Summary>, f: &dyn Fn(&Summary) -> String| s.as_ref().map_or_else(|| "-".to_string(), f);
    [
        r.setting.tool.clone(),
        r.setting.backup_type.clone(),
        if sheaf || r.setting.settings.is_empty() { r.setting.compression.clone() } else { format!("{} ({})", r.setting.compression, r.setting.settings) },
        knob(r.setting.stripes.to_string()),
        knob(sheaf_core::size::format_size(r.setting.transfer_size)),
        knob(match (r.setting.buffer_count, r.buffers_used) {
            (Some(b), _) => b.to_string(),
            (None, Some(u)) => format!("default ({u})"),
            (None, None) => "default".into(),
        }),
        r.setting.target.clone(),
        range(&r.backup_seconds, 2),
        format!("{:.0}", r.backup_mb_per_s()),
        format!("{:.0}", r.backup_cpu_pct.median),
        format!("{:.0}", r.backup_host_cpu_pct.median),
        format!("{:.0}", r.backup_peak_rss_bytes.median / (1 << 20) as f64),
        format!("{:.1}", r.size_bytes.median / 1e6),
        format!("{:.2}", r.ratio()),
        opt(&r.verify_seconds, &|s| format!("{:.2}", s.median)),
        opt(&r.restore_seconds, &|s| range(s, 2)),
        opt(&r.restore_cpu_pct, &|s| format!("{:.0}", s.median)),
        opt(&r.delta_restore_seconds, &|s| range(s, 2)),
        opt(&r.consolidate_seconds, &|s| range(s, 2)),
    ]
}

/// Write `report.md`'s content: the seeds' table (median, min–max across repeats).
///
/// # Errors
/// I/O errors of `out`.
pub fn write_markdown(rows: &[Row], mut out: impl Write) -> std::io::Result<()> {
    writeln!(out, "| {} |", HEADER.join(" | "))?;
    writeln!(out, "|{}", "---|".repeat(HEADER.len()))?;
    for r in rows {
        // A cell may hold a pipe (tar's settings): escaped, it stays one cell.
        let cells: Vec<String> = cells(r).iter().map(|c| c.replace('|', "\\|")).collect();
        writeln!(out, "| {} |", cells.join(" | "))?;
    }
    Ok(())
}

/// Write the table for a terminal: aligned columns, numbers right-aligned.
///
/// # Errors
/// I/O errors of `out`.
pub fn write_text(rows: &[Row], mut out: impl Write) -> std::io::Result<()> {
    let all: Vec<[String; 19]> = std::iter::once(HEADER.map(str::to_string)).chain(rows.iter().map(cells)).collect();
    let width: Vec<usize> = (0..HEADER.len()).map(|c| all.iter().map(|r| r[c].chars().count()).max().unwrap_or(0)).collect();
    for r in &all {
        let line: Vec<String> = r.iter().enumerate().map(|(c, v)| if c < 3 || c == 6 { format!("{v:<w$}", w = width[c]) } else { format!("{v:>w$}", w = width[c]) }).collect();
        writeln!(out, "{}", line.join("  ").trim_end())?;
    }
    Ok(())
}

/// The former primary put back (`--type rewind`), per sheaf permutation: each way's seconds
/// (median, min–max) and its ratio to `pg_rewind`'s median, with what the delta did. Empty when
/// none ran.
fn rewind_table(rewinds: &[RewindSample], cores: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut keys: Vec<(&str, usize)> = Vec::new();
    for r in rewinds {
        if !keys.contains(&(r.compression.as_str(), r.stripes)) {
            keys.push((r.compression.as_str(), r.stripes));
        }
    }
    for (codec, stripes) in keys {
        let g: Vec<&RewindSample> = rewinds.iter().filter(|r| r.compression == codec && r.stripes == stripes).collect();
        let of = |f: &dyn Fn(&RewindSample) -> Option<&crate::measure::Cost>| {
            let costs: Option<Vec<&crate::measure::Cost>> = g.iter().map(|r| f(r)).collect();
            costs.and_then(|c| {
                Some((
                    crate::stats::summarize(&c.iter().map(|c| c.seconds).collect::<Vec<_>>())?,
                    crate::stats::summarize(&c.iter().map(|c| c.cpu_pct(cores)).collect::<Vec<_>>())?,
                ))
            })
        };
        let rewind = of(&|r| r.pg_rewind.as_ref());
        let ways = [
            ("pg_rewind against the running new primary".to_string(), rewind),
            (format!("sheaf restore --delta from the repository ({codec}, {stripes} stripe{})", if stripes == 1 { "" } else { "s" }), of(&|r| Some(&r.sheaf_delta))),
            ("sheaf restore of the same backup into an empty folder".to_string(), of(&|r| Some(&r.sheaf_restore))),
        ];
        out.push("| a former primary put back | seconds | × pg_rewind | CPU % |".into());
        out.push("|---|---|---|---|".into());
        for (way, m) in ways {
            let Some((secs, cpu)) = m else {
                out.push(format!("| {way} | not measured (no pg_rewind beside the server) | | |"));
                continue;
            };
            let ratio = rewind.map_or_else(|| "—".to_string(), |(w, _)| if w.median > 0.0 { format!("{:.2}", secs.median / w.median) } else { "—".into() });
            out.push(format!("| {way} | {} | {ratio} | {} |", range(&secs, 2), range(&cpu, 0)));
        }
        if let Some(first) = g.first() {
            out.push(String::new());
            out.push(format!(
                "The delta ({}): wrote {}, kept {}; {}",
                first.delta_method,
                sheaf_core::size::format_size(first.delta_bytes_written),
                sheaf_core::size::format_size(first.delta_bytes_kept),
                first.delta_how
            ));
        }
        out.push(String::new());
    }
    out
}

/// The disk's rate beside the full restores': dd's seconds (median, min–max) for the same bytes,
/// and each sheaf full restore's rate as a share of dd's (dd's median time over the restore's).
fn disk_lines(disk: &[DiskProbe], rows: &[Row]) -> Vec<String> {
    let Some(dd) = crate::stats::summarize(&disk.iter().map(|d| d.cost.seconds).collect::<Vec<_>>()) else { return Vec::new() };
    let bytes = disk.iter().map(|d| d.bytes).max().unwrap_or(0);
    let shares: Vec<String> = rows
        .iter()
        .filter(|r| r.setting.tool == "sheaf" && r.setting.backup_type == "full")
        .filter_map(|r| {
            let restore = r.restore_seconds?;
            (restore.median > 0.0).then(|| format!("{} ×{} {:.2}", r.setting.compression, r.setting.stripes, dd.median / restore.median))
        })
        .collect();
    let mut out = vec![format!(
        "The disk's limit: dd oflag=direct wrote the {} a full restore writes in {} s ({:.0} MB/s), in the same run, each started as a restore is.",
        sheaf_core::size::format_size(bytes),
        range(&dd, 2),
        if dd.median > 0.0 { bytes as f64 / dd.median / 1e6 } else { 0.0 }
    )];
    if !shares.is_empty() {
        out.push(format!("Full restores at that rate (dd's time over the restore's): {}.", shares.join(", ")));
    }
    out.push(String::new());
    out
}

/// Write what follows the table, for a terminal or `report.md`: the disk's rate beside the full
/// restores' (where it was measured), and the former-primary table (`--type rewind`).
///
/// # Errors
/// I/O errors of `out`.
pub fn write_extras(result: &BenchResult, mut out: impl Write) -> std::io::Result<()> {
    for line in disk_lines(&result.disk, &result.rows) {
        writeln!(out, "{line}")?;
    }
    if !result.rewinds.is_empty() {
        writeln!(out, "## A former primary put back\n")?;
        for line in rewind_table(&result.rewinds, result.info.cores) {
            writeln!(out, "{line}")?;
        }
    }
    Ok(())
}

/// Write the report into `dir` (created if missing): `report.csv`, `report.json` (rows, samples
/// and how the bench ran), `samples.csv` (every repeat), the plots (SVG and PNG), and `report.md`
/// (how it ran, the table, the plots). Returns the files.
///
/// # Errors
/// A file that cannot be written, or plots that cannot be drawn (no font): the tables are written
/// first, so they exist even then.
pub fn write_all(result: &BenchResult, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(ErrorKind::Target, format!("cannot create {}", dir.display()), e))?;
    let create = |name: &str| {
        let path = dir.join(name);
        std::fs::File::create(&path).map(|f| (std::io::BufWriter::new(f), path.clone())).map_err(|e| Error::io(ErrorKind::Target, format!("cannot write {}", path.display()), e))
    };
    let failed = |path: &Path, e: std::io::Error| Error::io(ErrorKind::Target, format!("cannot write {}", path.display()), e);
    let mut files = Vec::new();
    let (mut f, p) = create("report.csv")?;
    write_csv(&result.rows, &mut f).and_then(|_| f.flush()).map_err(|e| failed(&p, e))?;
    files.push(p);
    let (mut f, p) = create("report.json")?;
    write_json(result, &mut f).and_then(|_| f.flush()).map_err(|e| failed(&p, e))?;
    files.push(p);
    let (f, p) = create("samples.csv")?;
    let mut w = csv::Writer::from_writer(f);
    for s in &result.samples {
        w.serialize(SampleLine::from(s)).map_err(|e| failed(&p, std::io::Error::other(e)))?;
    }
    w.flush().map_err(|e| failed(&p, e))?;
    files.push(p);
    let plots = crate::plot::write_plots(&result.rows, dir);
    let (mut f, p) = create("report.md")?;
    let drawn = plots.as_ref().map(Vec::as_slice).unwrap_or(&[]);
    write_markdown_report(result, drawn, &mut f).and_then(|_| f.flush()).map_err(|e| failed(&p, e))?;
    files.push(p);
    files.extend(plots?);
    Ok(files)
}

/// One repeat as a CSV line.
#[derive(Serialize)]
struct SampleLine<'a> {
    tool: &'a str,
    backup_type: &'a str,
    compression: &'a str,
    settings: &'a str,
    stripes: usize,
    transfer_size: u64,
    buffer_count: Option<usize>,
    buffers_used: Option<usize>,
    target: &'a str,
    repeat: usize,
    bytes_read: u64,
    size_bytes: u64,
    backup_s: f64,
    backup_user_s: f64,
    backup_system_s: f64,
    backup_peak_rss_bytes: u64,
    backup_host_cpu_pct: f64,
    verify_s: Option<f64>,
    restore_s: Option<f64>,
    restore_user_s: Option<f64>,
    restore_system_s: Option<f64>,
    restore_peak_rss_bytes: Option<u64>,
    restore_host_cpu_pct: Option<f64>,
    delta_restore_s: Option<f64>,
    consolidate_s: Option<f64>,
}

impl<'a> From<&'a Sample> for SampleLine<'a> {
    fn from(s: &'a Sample) -> Self {
        SampleLine {
            tool: &s.setting.tool,
            backup_type: &s.setting.backup_type,
            compression: &s.setting.compression,
            settings: &s.setting.settings,
            stripes: s.setting.stripes,
            transfer_size: s.setting.transfer_size,
            buffer_count: s.setting.buffer_count,
            buffers_used: s.buffers_used,
            target: &s.setting.target,
            repeat: s.repeat,
            bytes_read: s.bytes_read,
            size_bytes: s.size_bytes,
            backup_s: s.backup.seconds,
            backup_user_s: s.backup.user_seconds,
            backup_system_s: s.backup.system_seconds,
            backup_peak_rss_bytes: s.backup.peak_rss_bytes,
            backup_host_cpu_pct: s.backup.host_cpu_pct,
            verify_s: s.verify.map(|c| c.seconds),
            restore_s: s.restore.map(|c| c.seconds),
            restore_user_s: s.restore.map(|c| c.user_seconds),
            restore_system_s: s.restore.map(|c| c.system_seconds),
            restore_peak_rss_bytes: s.restore.map(|c| c.peak_rss_bytes),
            restore_host_cpu_pct: s.restore.map(|c| c.host_cpu_pct),
            delta_restore_s: s.delta_restore.map(|c| c.seconds),
            consolidate_s: s.consolidate.map(|c| c.seconds),
        }
    }
}

/// `report.md`: how the bench ran, the table, the plots.
fn write_markdown_report(result: &BenchResult, plots: &[PathBuf], mut out: impl Write) -> std::io::Result<()> {
    let i = &result.info;
    writeln!(out, "# sheaf bench\n")?;
    writeln!(out, "- started: {} ({:.0} s in all)", i.started, i.seconds)?;
    writeln!(out, "- source: {}", i.source)?;
    writeln!(out, "- machine: {} cores; CPU % is of all of them (\"CPU %\": the tool's own processes, user + system; \"host CPU %\": the whole machine, a server's work for the tool included)", i.cores)?;
    writeln!(out, "- cache: {}", i.cache)?;
    writeln!(out, "- every figure is the median of {} runs, with (min–max) where they differ; every operation is timed until durable (sync)", i.repeats)?;
    writeln!(out, "- sheaf {}", i.sheaf_version)?;
    for w in &i.warnings {
        writeln!(out, "- warning: {w}")?;
    }
    writeln!(out)?;
    write_markdown(&result.rows, &mut out)?;
    writeln!(out)?;
    write_extras(result, &mut out)?;
    for p in plots.iter().filter(|p| p.extension().is_some_and(|e| e == "svg")) {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        writeln!(out, "![{}]({name})\n", name.trim_end_matches(".svg").replace('_', " "))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::Setting;
    use crate::stats::summarize;

    fn rows() -> Vec<Row> {
        vec![
            Row {
                setting: Setting {
                    tool: "sheaf".into(),
                    compression: "zstd:low".into(),
                    settings: String::new(),
                    stripes: 2,
                    transfer_size: 1 << 20,
                    buffer_count: None,
                    target: "/tmp/b, with comma".into(),
                    backup_type: "full".into(),
                },
                buffers_used: Some(14),
                backup_seconds: summarize(&[2.5, 2.4, 2.9]).unwrap(),
                backup_cpu_pct: summarize(&[90.0, 91.0, 89.0]).unwrap(),
                backup_host_cpu_pct: summarize(&[93.0, 94.0, 92.0]).unwrap(),
                backup_peak_rss_bytes: summarize(&[18e6, 18e6, 19e6]).unwrap(),
                size_bytes: summarize(&[451e6, 451e6, 451e6]).unwrap(),
                bytes_read: 1_397_000_000,
                verify_seconds: summarize(&[1.0, 1.1, 0.9]),
                restore_seconds: summarize(&[3.6, 3.3, 5.0]),
                restore_cpu_pct: summarize(&[50.0, 49.0, 52.0]),
                restore_host_cpu_pct: summarize(&[55.0, 59.0, 52.0]),
                restore_peak_rss_bytes: summarize(&[11e6, 11e6, 12e6]),
                delta_restore_seconds: None,
                consolidate_seconds: None,
            },
            Row {
                setting: Setting {
                    tool: "sheaf".into(),
                    compression: "lz4".into(),
                    settings: String::new(),
                    stripes: 1,
                    transfer_size: 65536,
                    buffer_count: Some(7),
                    target: "nul".into(),
                    backup_type: "full".into(),
                },
                buffers_used: Some(7),
                backup_seconds: summarize(&[1.6]).unwrap(),
                backup_cpu_pct: summarize(&[95.0]).unwrap(),
                backup_host_cpu_pct: summarize(&[96.0]).unwrap(),
                backup_peak_rss_bytes: summarize(&[12e6]).unwrap(),
                size_bytes: summarize(&[587e6]).unwrap(),
                bytes_read: 1_397_000_000,
                verify_seconds: None,
                restore_seconds: None,
                restore_cpu_pct: None,
                restore_host_cpu_pct: None,
                restore_peak_rss_bytes: None,
                delta_restore_seconds: None,
                consolidate_seconds: None,
            },
            Row {
                setting: Setting {
                    tool: "pg_basebackup (server)".into(),
                    compression: "zstd:low".into(),
                    settings: "--compress=server-zstd:level=1,workers=2".into(),
                    stripes: 1,
                    transfer_size: 0,
                    buffer_count: None,
                    target: "/tmp/b".into(),
                    backup_type: "incr".into(),
                },
                buffers_used: None,
                backup_seconds: summarize(&[2.9, 3.0]).unwrap(),
                backup_cpu_pct: summarize(&[10.0, 11.0]).unwrap(),
                backup_host_cpu_pct: summarize(&[95.0, 96.0]).unwrap(),
                backup_peak_rss_bytes: summarize(&[8e6, 8e6]).unwrap(),
                size_bytes: summarize(&[450e6, 450e6]).unwrap(),
                bytes_read: 1_397_000_000,
                verify_seconds: None,
                restore_seconds: summarize(&[4.4, 4.5]),
                restore_cpu_pct: summarize(&[60.0, 61.0]),
                restore_host_cpu_pct: summarize(&[62.0, 63.0]),
                restore_peak_rss_bytes: summarize(&[30e6, 31e6]),
                delta_restore_seconds: None,
                consolidate_seconds: None,
            },
        ]
    }

    /// What a writer writes, as text.
    fn written(write: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>) -> String {
        let mut buf = Vec::new();
        write(&mut buf).unwrap();
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn the_disk_and_pg_rewind_are_put_beside_what_they_measure() {
        let cost = |s: f64| crate::measure::Cost { seconds: s, user_seconds: s, system_seconds: 0.0, peak_rss_bytes: 0, host_cpu_pct: 0.0 };
        // dd's median 1.8 s against the sheaf full restore's 3.6 s: half its rate. The restore
        // to nul and the peer's incr have no share.
        let disk: Vec<DiskProbe> = [1.8, 1.6, 1.9].iter().enumerate().map(|(i, &s)| DiskProbe { repeat: i + 1, bytes: 900 << 20, cost: cost(s) }).collect();
        let lines = disk_lines(&disk, &rows());
        assert!(lines[0].contains("wrote the 900 MiB") && lines[0].contains("in 1.80 (1.60–1.90) s (524 MB/s)"), "{lines:?}");
        assert_eq!(lines[1], "Full restores at that rate (dd's time over the restore's): zstd:low ×2 0.50.");
        assert!(disk_lines(&[], &rows()).is_empty(), "not measured: nothing said");

        let sample = |repeat: usize, rewind: Option<f64>, delta: f64| RewindSample {
            compression: "zstd:low".into(),
            stripes: 1,
            repeat,
            pg_rewind: rewind.map(cost),
            sheaf_delta: cost(delta),
            sheaf_restore: cost(2.0),
            delta_method: "wal".into(),
            delta_how: "WAL summaries: 12 blocks".into(),
            delta_bytes_written: 1 << 20,
            delta_bytes_kept: 9 << 20,
        };
        let table = rewind_table(&[sample(1, Some(2.0), 0.55), sample(2, Some(2.2), 0.66), sample(3, Some(2.4), 0.77)], 1).join("\n");
        assert!(table.contains("| pg_rewind against the running new primary | 2.20 (2.00–2.40) | 1.00 | 100 |"), "{table}");
        assert!(table.contains("| sheaf restore --delta from the repository (zstd:low, 1 stripe) | 0.66 (0.55–0.77) | 0.30 | 100 |"), "{table}");
        assert!(table.contains("| sheaf restore of the same backup into an empty folder | 2.00 | 0.91 |"), "{table}");
        assert!(table.contains("The delta (wal): wrote 1 MiB, kept 9 MiB; WAL summaries: 12 blocks"), "{table}");
        // Without pg_rewind beside the server: said so, and no ratios to it.
        let table = rewind_table(&[sample(1, None, 0.5)], 1).join("\n");
        assert!(table.contains("| pg_rewind against the running new primary | not measured") && table.contains("| 0.50 | — |"), "{table}");
    }

    #[test]
    fn csv_parses_back() {
        let text = written(|b| write_csv(&rows(), b));
        let mut r = csv::Reader::from_reader(text.as_bytes());
        let back: Vec<Flat> = r.deserialize().collect::<Result<_, _>>().unwrap();
        assert_eq!(back.len(), 3);
        assert_eq!(back[0], Flat::from(&rows()[0]));
        assert_eq!(back[0].target, "/tmp/b, with comma", "quoting survives");
        assert_eq!(back[0].backup_s_median, 2.5);
        assert_eq!(back[1].restore_s_median, None);
        assert!((back[0].ratio - 1397.0 / 451.0).abs() < 1e-9);
    }

    #[test]
    fn json_parses_back() {
        let back: Vec<Row> = serde_json::from_str(&written(|b| write_json(&rows(), b))).unwrap();
        assert_eq!(back, rows());
    }

    #[test]
    fn markdown_has_a_row_per_result_with_ranges() {
        let text = written(|b| write_markdown(&rows(), b));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 5);
        assert!(lines[2].contains("| 2.50 (2.40–2.90) |") && lines[2].contains("| 3.60 (3.30–5.00) |"), "{}", lines[2]);
        assert!(lines[2].contains("| default (14) |"), "{}", lines[2]);
        assert!(lines[3].contains("| nul |") && lines[3].ends_with("| - | - | - | - |"), "{}", lines[3]);
        assert!(lines[2].contains("| 17 | 451.0 | 3.10 | 1.00 |"), "RSS MiB, size, ratio, verify: {}", lines[2]);
        assert!(lines[4].starts_with("| pg_basebackup (server) | incr |"), "the backup type: {}", lines[4]);
        assert!(lines[4].contains("| zstd:low (--compress=server-zstd:level=1,workers=2) | - | - | - |"), "peers have no sheaf knobs: {}", lines[4]);
        assert_eq!(lines.iter().map(|l| l.matches('|').count()).collect::<Vec<_>>(), vec![20; 5], "every line has all columns");
        let mut piped = rows();
        piped[2].setting.settings = "tar -cf - | zstd -1".into();
        let text = written(|b| write_markdown(&piped, b));
        let line = text.lines().nth(4).unwrap();
        assert!(line.contains("tar -cf - \\| zstd -1"), "{line}");
        assert_eq!(line.matches('|').count() - line.matches("\\|").count(), 20, "a pipe in a cell does not split it: {line}");
    }

    #[test]
    fn text_table_aligns_columns() {
        let text = written(|b| write_text(&rows(), b));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[0].starts_with("tool") && lines[1].starts_with("sheaf"));
        // The backup-seconds column ends at the same character in every line.
        let end = |l: &str, needle: &str| l.char_indices().find(|(i, _)| l[*i..].starts_with(needle)).map(|(i, _)| l[..i].chars().count() + needle.chars().count());
        assert_eq!(end(lines[0], "backup s"), end(lines[1], "2.50 (2.40–2.90)"), "{text}");
        assert_eq!(end(lines[0], "backup s"), end(lines[2], "1.60"), "{text}");
    }
}
