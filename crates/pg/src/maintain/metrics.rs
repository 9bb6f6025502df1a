//! The repository's state as Prometheus metrics (`sheaf info --format prometheus`, or
//! `--prometheus FILE` for node_exporter's textfile collector): per backup type the newest
//! backup's end, age, duration and sizes; the archived WAL, its age and (given the server) its lag
//! in bytes; gaps and dropped segments. Names follow Prometheus's conventions: the `sheaf_`
//! prefix, base units (`_seconds`, `_bytes`), `_total` only on counters.

use std::collections::BTreeMap;
use std::fmt::Write;

use sheaf_core::manifest::BackupType;

use crate::cluster::lsn::Lsn;
use crate::cluster::walname::WalKind;
use crate::repo::inventory::Inventory;
use crate::repo::meta::RepoMeta;
use crate::repo::records::Found;

/// One metric family: its samples, each with its labels.
#[derive(Clone, Debug, PartialEq)]
pub struct Metric {
    /// `sheaf_...`.
    pub name: &'static str,
    /// What it measures.
    pub help: &'static str,
    /// `gauge` or `counter`.
    pub kind: &'static str,
    /// (labels, value).
    pub samples: Vec<(Vec<(&'static str, String)>, f64)>,
}

impl Metric {
    /// A gauge with no samples yet.
    pub fn gauge(name: &'static str, help: &'static str) -> Metric {
        Metric { name, help, kind: "gauge", samples: Vec::new() }
    }

    /// A counter with no samples yet.
    pub fn counter(name: &'static str, help: &'static str) -> Metric {
        Metric { name, help, kind: "counter", samples: Vec::new() }
    }

    /// This metric with one more sample.
    pub fn with(mut self, labels: Vec<(&'static str, String)>, value: f64) -> Metric {
        self.samples.push((labels, value));
        self
    }
}

/// What the server says, for the lag: its WAL position and timeline.
#[derive(Clone, Copy, Debug)]
pub struct ServerPosition {
    /// Written WAL position.
    pub lsn: Lsn,
    /// Timeline.
    pub timeline: u32,
}

/// The repository's metrics, at `now` (seconds since the epoch).
pub fn repository(repo: &str, meta: &RepoMeta, inv: &Inventory, now: i64, server: Option<ServerPosition>) -> Vec<Metric> {
    let r = || ("repo", repo.to_string());
    let mut out = vec![Metric::gauge("sheaf_repository_info", "The repository and the cluster it holds (always 1).")
        .with(vec![r(), ("cluster", meta.system_identifier.to_string()), ("server_version", meta.server_version.clone())], 1.0)];
    let mut count = Metric::gauge("sheaf_backups", "Finished backups in the repository, by type.");
    let mut end = Metric::gauge("sheaf_backup_last_end_timestamp_seconds", "When the newest backup of each type ended.");
    let mut age = Metric::gauge("sheaf_backup_last_age_seconds", "How long ago the newest backup of each type ended.");
    let mut duration = Metric::gauge("sheaf_backup_last_duration_seconds", "How long the newest backup of each type ran.");
    let mut size = Metric::gauge("sheaf_backup_last_size_bytes", "Bytes the newest backup of each type stored in the repository.");
    let mut source = Metric::gauge("sheaf_backup_last_source_bytes", "Bytes the newest backup of each type read from the cluster.");
    let mut by_type: BTreeMap<&str, Vec<&crate::repo::records::BackupRecord>> = BTreeMap::new();
    for t in [BackupType::Full, BackupType::Diff, BackupType::Incr] {
        by_type.insert(t.name(), Vec::new());
    }
    for rec in inv.found.iter().filter_map(Found::record) {
        by_type.entry(rec.backup_type.name()).or_default().push(rec);
    }
    for (t, recs) in &by_type {
        let labels = || vec![r(), ("type", (*t).to_string())];
        count = count.with(labels(), recs.len() as f64);
        if let Some(n) = recs.iter().max_by_key(|x| x.stop_unix) {
            end = end.with(labels(), n.stop_unix as f64);
            age = age.with(labels(), (now - n.stop_unix).max(0) as f64);
            duration = duration.with(labels(), (n.stop_unix - n.start_unix).max(0) as f64);
            size = size.with(labels(), n.bytes_written as f64);
            source = source.with(labels(), n.bytes_read as f64);
        }
    }
    out.extend([count, end, age, duration, size, source]);
    let unfinished = inv.found.iter().filter(|f| matches!(f, Found::Unfinished { running: false, .. })).count();
    out.push(Metric::gauge("sheaf_backups_unfinished", "Backups left unfinished by a crash (sheaf expire removes them).").with(vec![r()], unfinished as f64));
    out.push(Metric::gauge("sheaf_backups_size_bytes", "Bytes all finished backups store.").with(vec![r()], inv.backup_bytes as f64));

    let segments = inv.files.iter().filter(|(w, _)| w.kind == WalKind::Segment).count();
    out.push(Metric::gauge("sheaf_wal_archived_segments", "WAL segments in the archive.").with(vec![r()], segments as f64));
    out.push(Metric::gauge("sheaf_wal_archived_size_bytes", "Bytes the archived WAL stores.").with(vec![r()], inv.wal_bytes as f64));
    if inv.wal_newest_unix > 0 {
        out.push(Metric::gauge("sheaf_wal_last_archived_timestamp_seconds", "When the newest archived segment was written.").with(vec![r()], inv.wal_newest_unix as f64));
        out.push(
            Metric::gauge("sheaf_wal_archive_lag_seconds", "How long ago the newest archived segment was written.").with(vec![r()], (now - inv.wal_newest_unix).max(0) as f64),
        );
    }
    if let Some(s) = server {
        // The WAL written past the end of the newest segment archived on the server's timeline.
        let seg = meta.wal_segment_size;
        let archived_end =
            inv.files.iter().filter(|(w, _)| w.kind == WalKind::Segment && w.timeline == s.timeline).map(|(w, _)| Lsn::at_segment(w.segno + 1, seg)).max().unwrap_or_default();
        out.push(
            Metric::gauge("sheaf_wal_archive_lag_bytes", "WAL the server has written past the end of the newest segment archived on its timeline.")
                .with(vec![r()], s.lsn.bytes_since(archived_end) as f64),
        );
    }
    out.push(Metric::gauge("sheaf_wal_gaps", "Gaps in the archived WAL (recovery cannot cross one); not those retention made on purpose.").with(vec![r()], inv.gaps.len() as f64));
    out.push(
        Metric::gauge("sheaf_wal_retention_gaps", "Gaps retention made on purpose: WAL sheaf expire removed between pinned backups and the oldest backup its policy keeps.")
            .with(vec![r()], inv.expired.len() as f64),
    );
    // The drills: when the newest passing one ended, whether the last passed, its phases.
    let d = &inv.drills;
    if let Some(ok) = &d.last_passed {
        out.push(Metric::gauge("sheaf_drill_last_success_timestamp_seconds", "When the newest drill that passed ended (sheaf drill).").with(vec![r()], ok.ended_unix as f64));
    }
    if let Some(last) = &d.last {
        out.push(Metric::gauge("sheaf_drill_last_result", "Whether the last drill passed (1) or failed (0).").with(vec![r()], if last.passed { 1.0 } else { 0.0 }));
        let p = &last.phases;
        let mut phases = Metric::gauge("sheaf_drill_last_phase_seconds", "How long each phase of the last drill took; total is the recovery time measured.");
        for (phase, s) in [("restore", p.restore_seconds), ("recovery", p.recovery_seconds), ("checks", p.checks_seconds), ("total", p.total_seconds)] {
            phases = phases.with(vec![r(), ("phase", phase.to_string())], s);
        }
        out.push(phases);
    }
    out.push(Metric::gauge("sheaf_wal_dropped_segments", "WAL segments wal-push --queue-max left out of the archive.").with(vec![r()], inv.dropped.len() as f64));
    out
}

/// A label value escaped for the text format.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The metrics in Prometheus's text exposition format.
pub fn render(metrics: &[Metric]) -> String {
    let mut out = String::new();
    for m in metrics.iter().filter(|m| !m.samples.is_empty()) {
        let _ = writeln!(out, "# HELP {} {}", m.name, m.help);
        let _ = writeln!(out, "# TYPE {} {}", m.name, m.kind);
        for (labels, value) in &m.samples {
            let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
            if labels.is_empty() {
                let _ = writeln!(out, "{} {value}", m.name);
            } else {
                let _ = writeln!(out, "{}{{{}}} {value}", m.name, labels.join(","));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_format_escapes_labels_and_skips_empty_families() {
        let m = vec![
            Metric::gauge("sheaf_a_bytes", "A.").with(vec![("repo", "s3://b/p \"x\"\\y".into())], 3.0),
            Metric::counter("sheaf_b_total", "B.").with(vec![], 1.5),
            Metric::gauge("sheaf_c", "C."),
        ];
        assert_eq!(
            render(&m),
            "# HELP sheaf_a_bytes A.\n# TYPE sheaf_a_bytes gauge\nsheaf_a_bytes{repo=\"s3://b/p \\\"x\\\"\\\\y\"} 3\n# HELP sheaf_b_total B.\n# TYPE sheaf_b_total counter\nsheaf_b_total 1.5\n"
        );
    }
}
