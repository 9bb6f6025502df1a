//! The drills' records (`sheaf drill`, [`crate::drill::run`]): one object per drill, `drills/DRILL_BACKUP.json`,
//! so that a listing alone says which backup each drill was of; and what `info`, `check` and the
//! metrics read of them ([`summary`]).

use sheaf_core::error::ErrorKind;
use sheaf_core::manifest::BackupType;

use crate::cluster::lsn::Lsn;
use crate::repo::id::BackupId;
use crate::repo::Repo;
use serde::{Deserialize, Serialize};
use sheaf_core::Result;

/// Where drill records live in the repository.
pub const DRILLS: &str = "drills/";

/// Seconds each phase took.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Phases {
    /// Restoring the backup and its chain.
    pub restore_seconds: f64,
    /// Starting the server and replaying WAL to the target.
    pub recovery_seconds: f64,
    /// The checks.
    pub checks_seconds: f64,
    /// Their sum: the recovery time objective, measured.
    pub total_seconds: f64,
}

/// One check and how it went.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CheckOutcome {
    /// What was checked: `connect DB`, `pg_amcheck`, `amcheck DB`, `check-sql N`.
    pub check: String,
    /// Whether it passed.
    pub ok: bool,
    /// What it found.
    pub detail: String,
}

/// A drill, as recorded in the repository and the catalog.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct DrillRecord {
    /// The drill's id (when it started, to the millisecond).
    pub id: String,
    /// The backup drilled.
    pub backup: BackupId,
    /// Its type (full, diff, incr).
    pub backup_type: BackupType,
    /// When the drill started and ended (seconds since the epoch).
    pub started_unix: i64,
    /// When it ended.
    pub ended_unix: i64,
    /// The target, as asked: `end of archive`, `immediate`, a time, an LSN or a name.
    pub target: String,
    /// Where recovery ended (the last WAL record replayed), when it did.
    pub reached_lsn: Option<Lsn>,
    /// The timeline the server opened on.
    pub timeline: Option<u32>,
    /// WAL replayed from the backup's start to where recovery ended.
    pub wal_bytes_replayed: Option<u64>,
    /// Bytes the restore wrote.
    pub bytes_restored: u64,
    /// The server that ran it.
    pub server_version: String,
    /// Each phase's time.
    pub phases: Phases,
    /// Each check.
    pub checks: Vec<CheckOutcome>,
    /// The verdict.
    pub passed: bool,
    /// The first failure, when it failed.
    pub failure: Option<String>,
    /// What kind: `incomplete` (WAL missing) or `corrupt` (damage found, a check failed); the
    /// kind the command exits with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_kind: Option<ErrorKind>,
    /// The host it ran on.
    pub host: String,
    /// Where the restored cluster was left (`--keep`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kept: Option<String>,
}

/// The object of a drill record: `drills/DRILL_BACKUP.json`, so that a listing alone says which
/// backup each drill was of.
pub fn drill_object(id: &str, backup: &str) -> String {
    format!("{DRILLS}{id}_{backup}.json")
}

/// The backup a drill object is of.
pub fn drill_backup(object: &str) -> Option<&str> {
    object.strip_prefix(DRILLS)?.strip_suffix(".json")?.split_once('_').map(|(_, b)| b)
}

/// Every drill's object name, oldest first.
///
/// # Errors
/// When the repository cannot be listed.
pub fn drill_objects(repo: &Repo) -> Result<Vec<String>> {
    let mut names: Vec<String> = repo.list(DRILLS)?.into_iter().map(|o| o.name).filter(|n| drill_backup(n).is_some()).collect();
    names.sort();
    Ok(names)
}

/// The newest drill of each backup, and the newest drill and newest passing drill overall.
#[derive(Clone, Debug, Default)]
pub struct DrillSummary {
    /// Per backup, its newest drill.
    pub last_of: Vec<DrillRecord>,
    /// The newest drill of any backup.
    pub last: Option<DrillRecord>,
    /// The newest drill that passed.
    pub last_passed: Option<DrillRecord>,
}

/// Read what [`DrillSummary`] needs: one record per backup drilled, and going back from the newest
/// drill until one that passed.
///
/// # Errors
/// When the repository cannot be listed or a record read.
pub fn summary(repo: &Repo) -> Result<DrillSummary> {
    let names = drill_objects(repo)?;
    let mut out = DrillSummary::default();
    let mut seen = std::collections::BTreeSet::new();
    for name in names.iter().rev() {
        let backup = drill_backup(name).unwrap_or_default().to_string();
        let first_of_backup = seen.insert(backup);
        if !first_of_backup && out.last_passed.is_some() {
            continue;
        }
        let r: DrillRecord = repo.get_json(name)?;
        if out.last.is_none() {
            out.last = Some(r.clone());
        }
        if out.last_passed.is_none() && r.passed {
            out.last_passed = Some(r.clone());
        }
        if first_of_backup {
            out.last_of.push(r);
        }
    }
    out.last_of.reverse();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drill_objects_name_their_backup() {
        let o = drill_object("20261121-103045.123Z", "20261121-100000Z");
        assert_eq!(o, "drills/20261121-103045.123Z_20261121-100000Z.json");
        assert_eq!(drill_backup(&o), Some("20261121-100000Z"));
        assert_eq!(drill_backup("drills/notes.txt"), None);
    }
}
