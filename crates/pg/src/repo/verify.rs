//! `sheaf verify --repo`: every finished backup read and checked, every archived WAL file read and
//! checked, and the WAL each backup needs present: from its start to the end of its timeline, or
//! for a backup before the retention horizon (a pinned one) its own span ([`super::horizon`]).
//! Problems are collected, not raised one by one, so that one run names them all.

use std::sync::Arc;

use serde::Serialize;
use sheaf_core::repo::Repo;
use sheaf_core::{Error, ErrorKind, NoProgress, Result, Schemes};

use super::inventory::archived;
use super::meta::RepoMeta;
use super::paths;
use super::records::{backups, open_chain, open_set_lean, BackupRecord, Found};
use crate::wal::WalFile;

/// A backup that read back whole.
#[derive(Clone, Debug, Serialize)]
pub struct Checked {
    /// Its repository id.
    pub id: String,
    /// Frames read and checked.
    pub frames: u64,
    /// Raw bytes they hold.
    pub bytes: u64,
}

/// What [`verify`] found.
#[derive(Clone, Debug, Serialize)]
pub struct RepoCheck {
    /// The backups that read back whole.
    pub backups: Vec<Checked>,
    /// Archived WAL files read.
    pub wal_files: usize,
    /// Their raw bytes (of those that read back).
    pub wal_bytes: u64,
    /// Every problem, one line each.
    pub problems: Vec<String>,
    /// How far back `expire` removed WAL on purpose: a backup before it needs only its own span.
    pub horizon: Option<super::horizon::Horizon>,
    /// Whether any problem is WAL a backup needs that is not there.
    #[serde(skip)]
    pub wal_missing: bool,
}

impl RepoCheck {
    /// Whether nothing was wrong.
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }

    /// The error that sums the problems up, if there were any: [`ErrorKind::Incomplete`] when WAL a
    /// backup needs is missing, else [`ErrorKind::Corrupt`].
    pub fn failure(&self) -> Option<Error> {
        let first = self.problems.first()?;
        let kind = if self.wal_missing { ErrorKind::Incomplete } else { ErrorKind::Corrupt };
        let n = self.problems.len();
        Some(Error::new(kind, format!("the repository has {n} problem{}; the first: {first}", if n == 1 { "" } else { "s" })))
    }
}

/// Read and check everything in the repository with `threads` decompressors.
///
/// # Errors
/// Only when the repository cannot be listed or a record read; what is damaged or missing is in
/// the [`RepoCheck`].
pub fn verify(repo: &Repo, meta: &RepoMeta, schemes: &dyn Schemes, threads: Option<usize>) -> Result<RepoCheck> {
    let found = backups(repo)?;
    let files = archived(repo, meta)?;
    let needs = super::inventory::WalNeeds::read(repo, &found, sheaf_core::time::now_ms() / 1000)?;
    let horizon = needs.horizon.clone();
    let mut check = RepoCheck { backups: Vec::new(), wal_files: files.len(), wal_bytes: 0, problems: Vec::new(), wal_missing: false, horizon: horizon.clone() };
    let records: Vec<BackupRecord> = found.iter().filter_map(Found::record).cloned().collect();
    for r in &records {
        match open_set_lean(repo, r, schemes).and_then(|set| sheaf_core::verify(&set, threads, Arc::new(NoProgress))) {
            Ok(v) => check.backups.push(Checked { id: r.id.clone(), frames: v.frames, bytes: v.bytes_raw }),
            Err(e) => check.problems.push(format!("backup {}: {e}", r.id)),
        }
        // An incremental is whole only with its chain: every set of it there, in order, and every
        // byte of every file in one of them.
        if !r.chain.is_empty() {
            let whole = open_chain(repo, &records, r, schemes, true).and_then(|sets| sheaf_core::check_chain(&sets.iter().collect::<Vec<_>>()));
            if let Err(e) = whole {
                check.problems.push(format!("backup {} ({} on {}): its chain does not restore: {e}", r.id, r.backup_type, r.chain.join(" <- ")));
            }
        }
        // The WAL it needs: to the archive's end, or only its own span when it lies before the
        // retention horizon (what expire removed there on purpose is not missing), or none when it
        // is only the data of a pinned incremental's chain there.
        let gaps = needs.missing(&files, r, meta.wal_segment_size).unwrap_or_default();
        if !gaps.is_empty() {
            check.wal_missing = true;
            let within = if horizon.as_ref().is_some_and(|h| WalFile::parse(&r.stop_wal, meta.wal_segment_size).is_some_and(|w| h.below(w.segno + 1))) {
                "of its own span, which makes it consistent: it cannot be restored"
            } else {
                "after its start: recovery from it stops there"
            };
            check.problems.push(format!(
                "backup {}: {} WAL segment{} missing {within} ({}{})",
                r.id,
                gaps.len(),
                if gaps.len() == 1 { " is" } else { "s are" },
                gaps.iter().take(3).cloned().collect::<Vec<_>>().join(", "),
                if gaps.len() > 3 { ", ..." } else { "" }
            ));
        }
    }
    for (w, _) in &files {
        let r = repo.open(&paths::wal_object(&w.name)).and_then(|src| sheaf_core::blob::read_blob(src.as_ref(), repo.keys(), &mut |_| Ok(())));
        match r {
            Ok(info) => check.wal_bytes += info.raw_len,
            Err(e) => check.problems.push(format!("WAL {}: {e}", w.name)),
        }
    }
    Ok(check)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_wal_outranks_damage() {
        let mut c = RepoCheck { backups: Vec::new(), wal_files: 0, wal_bytes: 0, problems: Vec::new(), wal_missing: false, horizon: None };
        assert!(c.ok() && c.failure().is_none());
        c.problems = vec!["backup a: damaged".into(), "backup b: 2 WAL segments are missing".into()];
        assert_eq!(c.failure().unwrap().kind(), ErrorKind::Corrupt);
        c.wal_missing = true;
        let e = c.failure().unwrap();
        assert_eq!(e.kind(), ErrorKind::Incomplete);
        assert!(e.to_string().contains("has 2 problems; the first: backup a: damaged"), "{e}");
    }
}
