//! The bench's results, as the runner makes them and the report and plots read them: each
//! repeat a [`Sample`], the samples of one [`Setting`] summed up in a [`Row`], and the whole
//! run a [`BenchResult`] (what `report.json` holds, and what `sheaf bench --from` reads back).

use serde::{Deserialize, Serialize};

use crate::measure::Cost;
use crate::stats::{summarize, Summary};

/// What a row (and each of its samples) measured: a tool and its settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Setting {
    /// `sheaf`, `pg_basebackup (server)`, `pg_basebackup (client)`, `pgbackrest`.
    pub tool: String,
    /// Codec spec (for a peer: the sheaf codec it was matched to).
    pub compression: String,
    /// A peer's own options for that codec, e.g. `--compress=server-zstd:level=1,workers=2`.
    pub settings: String,
    /// Stripes (1 for a peer).
    pub stripes: usize,
    /// Transfer size in bytes (0 for a peer).
    pub transfer_size: u64,
    /// Buffer count asked for (`None`: default).
    pub buffer_count: Option<usize>,
    /// Target.
    pub target: String,
    /// `full`, or `diff`/`incr` (after `--change` of the pages since the backup it builds on);
    /// `incr 2`, ... for the later incrementals of a chain.
    #[serde(default = "full")]
    pub backup_type: String,
}

/// What a report without a backup type measured (written before there were incrementals).
fn full() -> String {
    "full".to_string()
}

/// One row of the table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Which tool with which settings.
    #[serde(flatten)]
    pub setting: Setting,
    /// Buffer count used (the default resolved); `None` for peers.
    pub buffers_used: Option<usize>,
    /// Backup wall seconds.
    pub backup_seconds: Summary,
    /// Backup CPU percent of all cores: the tool's own processes.
    pub backup_cpu_pct: Summary,
    /// Backup CPU percent of all cores: the whole host (a server compressing for the tool counts).
    pub backup_host_cpu_pct: Summary,
    /// Backup peak RSS, bytes.
    pub backup_peak_rss_bytes: Summary,
    /// Backup size in bytes.
    pub size_bytes: Summary,
    /// Bytes the backup read (for a peer: what sheaf read of the same source).
    pub bytes_read: u64,
    /// Verify wall seconds (sheaf to disk only).
    pub verify_seconds: Option<Summary>,
    /// Restore wall seconds (absent for a nul target).
    pub restore_seconds: Option<Summary>,
    /// Restore CPU percent of all cores: the tool's own processes.
    pub restore_cpu_pct: Option<Summary>,
    /// Restore CPU percent of all cores: the whole host.
    pub restore_host_cpu_pct: Option<Summary>,
    /// Restore peak RSS, bytes.
    pub restore_peak_rss_bytes: Option<Summary>,
    /// Delta restore wall seconds (incrementals: onto a restore of the backup before).
    pub delta_restore_seconds: Option<Summary>,
    /// `sheaf consolidate` wall seconds of the cycle's last backup (an incremental's chain
    /// written as one full backup).
    #[serde(default)]
    pub consolidate_seconds: Option<Summary>,
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

/// One repeat of one permutation or peer.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sample {
    /// Which tool with which settings.
    #[serde(flatten)]
    pub setting: Setting,
    /// Buffer count used.
    pub buffers_used: Option<usize>,
    /// Which repeat, from 1.
    pub repeat: usize,
    /// Bytes read from the source.
    pub bytes_read: u64,
    /// Bytes of the backup.
    pub size_bytes: u64,
    /// The backup.
    pub backup: Cost,
    /// The verify (sheaf to disk).
    pub verify: Option<Cost>,
    /// The restore (disk targets).
    pub restore: Option<Cost>,
    /// For an incremental: `restore --delta` of it onto a restore of the backup before it (a copy
    /// one change behind, as a standby rebuilt or a test copy refreshed).
    #[serde(default)]
    pub delta_restore: Option<Cost>,
    /// For the last backup of a cycle of incrementals: `sheaf consolidate` of its chain.
    #[serde(default)]
    pub consolidate: Option<Cost>,
}

/// One repeat of a former primary put back (`--type rewind`): the standby of a primary promoted
/// and changed, the old primary (which wrote on after the split, then stopped) brought to the new
/// primary's state by `pg_rewind` against the running new primary and, on an identical copy, by
/// `sheaf restore --delta` of the new primary's backup from the repository.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RewindSample {
    /// The sheaf permutation's codec and stripes.
    pub compression: String,
    pub stripes: usize,
    /// Which repeat, from 1.
    pub repeat: usize,
    /// `pg_rewind`; `None` where the server's binaries lack it.
    pub pg_rewind: Option<Cost>,
    /// `sheaf restore --delta` onto the former primary.
    pub sheaf_delta: Cost,
    /// `sheaf restore` of the same backup into an empty folder.
    pub sheaf_restore: Cost,
    /// The delta's method (`wal`: from the WAL summaries; `hash`: it read the target) and how it
    /// found what differs, as its `--json` says.
    pub delta_method: String,
    pub delta_how: String,
    /// Bytes the delta wrote (rewritten and created) and kept.
    pub delta_bytes_written: u64,
    pub delta_bytes_kept: u64,
}

/// The disk's own rate for a restore's writes, measured in the same run as the restores: `dd
/// oflag=direct` writing as many bytes as the full backups read (what their restores write) into
/// the folder restores go to, the cache dropped before it as before them.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DiskProbe {
    /// Which repeat, from 1.
    pub repeat: usize,
    /// Bytes written.
    pub bytes: u64,
    /// dd's run.
    pub cost: Cost,
}

/// How the bench ran: what a reader of the report needs to judge it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunInfo {
    /// When it started (UTC).
    pub started: String,
    /// The source.
    pub source: String,
    /// Cores (CPU % is of all of them).
    pub cores: usize,
    /// `warm` or `dropped before every operation`.
    pub cache: String,
    /// Repeats per permutation.
    pub repeats: usize,
    /// sheaf's version.
    pub sheaf_version: String,
    /// Seconds the whole bench took.
    pub seconds: f64,
    /// Warnings (peers skipped or failing).
    pub warnings: Vec<String>,
}

/// The bench's results.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BenchResult {
    /// How it ran.
    pub info: RunInfo,
    /// One row per permutation and tool, in run order.
    pub rows: Vec<Row>,
    /// Every repeat.
    pub samples: Vec<Sample>,
    /// A former primary put back, each repeat (`--type rewind`).
    #[serde(default)]
    pub rewinds: Vec<RewindSample>,
    /// The disk's rate, each repeat (directory targets with restores).
    #[serde(default)]
    pub disk: Vec<DiskProbe>,
}

/// Group the samples into rows (medians and ranges), in the order they first ran.
pub fn rows(samples: &[Sample], cores: usize) -> Vec<Row> {
    let mut order: Vec<&Setting> = Vec::new();
    for s in samples {
        if !order.contains(&&s.setting) {
            order.push(&s.setting);
        }
    }
    order
        .into_iter()
        .filter_map(|setting| {
            let g: Vec<&Sample> = samples.iter().filter(|s| &s.setting == setting).collect();
            let of = |f: &dyn Fn(&Sample) -> f64| summarize(&g.iter().map(|s| f(s)).collect::<Vec<_>>());
            let of_opt = |f: &dyn Fn(&Sample) -> Option<f64>| {
                let v: Option<Vec<f64>> = g.iter().map(|s| f(s)).collect();
                v.and_then(|v| summarize(&v))
            };
            let mut used: Vec<usize> = g.iter().filter_map(|s| s.buffers_used).collect();
            used.sort_unstable();
            Some(Row {
                setting: setting.clone(),
                buffers_used: used.get(used.len() / 2).copied(),
                backup_seconds: of(&|s| s.backup.seconds)?,
                backup_cpu_pct: of(&|s| s.backup.cpu_pct(cores))?,
                backup_host_cpu_pct: of(&|s| s.backup.host_cpu_pct)?,
                backup_peak_rss_bytes: of(&|s| s.backup.peak_rss_bytes as f64)?,
                size_bytes: of(&|s| s.size_bytes as f64)?,
                bytes_read: g[0].bytes_read,
                verify_seconds: of_opt(&|s| s.verify.map(|c| c.seconds)),
                restore_seconds: of_opt(&|s| s.restore.map(|c| c.seconds)),
                restore_cpu_pct: of_opt(&|s| s.restore.map(|c| c.cpu_pct(cores))),
                restore_host_cpu_pct: of_opt(&|s| s.restore.map(|c| c.host_cpu_pct)),
                restore_peak_rss_bytes: of_opt(&|s| s.restore.map(|c| c.peak_rss_bytes as f64)),
                delta_restore_seconds: of_opt(&|s| s.delta_restore.map(|c| c.seconds)),
                consolidate_seconds: of_opt(&|s| s.consolidate.map(|c| c.seconds)),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(tool: &str, repeat: usize, secs: f64, restore: Option<f64>) -> Sample {
        let cost = |s: f64| Cost { seconds: s, user_seconds: s, system_seconds: 0.0, peak_rss_bytes: 1 << 20, host_cpu_pct: 60.0 };
        Sample {
            setting: Setting {
                tool: tool.into(),
                compression: "lz4".into(),
                settings: String::new(),
                stripes: 2,
                transfer_size: 1 << 20,
                buffer_count: None,
                target: "/t".into(),
                backup_type: full(),
            },
            buffers_used: Some(14),
            repeat,
            bytes_read: 1000,
            size_bytes: 500 + repeat as u64,
            backup: cost(secs),
            verify: None,
            restore: restore.map(cost),
            delta_restore: None,
            consolidate: None,
        }
    }

    #[test]
    fn samples_group_into_rows_with_medians_in_run_order() {
        let s = vec![sample("sheaf", 1, 3.0, Some(1.0)), sample("pgbackrest", 1, 9.0, Some(5.0)), sample("sheaf", 2, 1.0, Some(2.0)), sample("sheaf", 3, 2.0, Some(4.0))];
        let r = rows(&s, 2);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].setting.tool, "sheaf");
        assert_eq!(r[1].setting.tool, "pgbackrest");
        assert_eq!((r[0].backup_seconds.median, r[0].backup_seconds.min, r[0].backup_seconds.max, r[0].backup_seconds.n), (2.0, 1.0, 3.0, 3));
        assert_eq!(r[0].restore_seconds.unwrap().median, 2.0);
        assert_eq!(r[0].size_bytes.median, 502.0);
        assert_eq!(r[0].backup_cpu_pct.median, 50.0, "one core busy of two");
        assert_eq!(r[0].buffers_used, Some(14));
        assert_eq!(r[0].verify_seconds, None);
    }
}
