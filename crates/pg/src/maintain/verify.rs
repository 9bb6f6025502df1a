//! `sheaf verify --repo`: every finished backup read and checked, every archived WAL file read and
//! checked, and the WAL each backup needs present: from its start to the end of its timeline, or
//! for a backup before the retention horizon (a pinned one) its own span ([`crate::repo::horizon`]).
//! Problems are collected, not raised one by one, so that one run names them all. What read back
//! whole is kept in the ledger ([`crate::repo::ledger`]), so that the next run reads only what is new or
//! changed since.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use crate::repo::Repo;
use serde::Serialize;
use sheaf_core::storage::Stored;
use sheaf_core::{Error, ErrorKind, NoProgress, Result, Schemes};

use crate::cluster::walname::WalFile;
use crate::repo::id::BackupId;
use crate::repo::inventory::archived_in;
use crate::repo::ledger::{BackupSeen, Ledger, Seen};
use crate::repo::paths;
use crate::repo::records::{backups, open_chain, open_set_lean, BackupRecord, Found};

/// A backup that read back whole.
#[derive(Clone, Debug, Serialize)]
pub struct Checked {
    /// Its repository id.
    pub id: BackupId,
    /// Frames read and checked (or, when not read, when they last were).
    pub frames: u64,
    /// Raw bytes they hold.
    pub bytes: u64,
    /// Whether it was read now; false when the ledger vouched for it (unchanged since it last read
    /// back whole).
    pub read: bool,
}

/// How much [`verify`] reads.
#[derive(Clone, Debug, Default)]
pub struct VerifyOptions {
    /// Read everything, whatever the ledger says.
    pub full: bool,
    /// Read again what last read back whole longer ago than this (seconds); `None`: trust the
    /// ledger whatever its age.
    pub recheck_after: Option<u64>,
    /// Asked, it stops at the next frame ([`sheaf_core::error::ErrorKind::Cancelled`]); the ledger
    /// keeps what read back whole before.
    pub stop: sheaf_core::stop::Stop,
}

/// What [`verify`] found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RepoCheck {
    /// The backups that read back whole.
    pub backups: Vec<Checked>,
    /// Archived WAL files read whole (now or, unchanged since, before).
    pub wal_files: usize,
    /// Of those, the ones read now.
    pub wal_files_read: usize,
    /// Their raw bytes (of those that read back).
    pub wal_bytes: u64,
    /// Stored bytes read now, stripes and WAL: what this verify cost.
    pub bytes_read: u64,
    /// Incrementals whose chain was checked now (the others were found whole on the same objects
    /// before).
    pub chains_checked: usize,
    /// Every problem, one line each.
    pub problems: Vec<String>,
    /// What did not stop the check but should be known (the ledger could not be read or written).
    pub warnings: Vec<String>,
    /// How far back `expire` removed WAL on purpose: a backup before it needs only its own span.
    pub horizon: Option<crate::repo::horizon::Horizon>,
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

/// Read and check what is in the repository with `threads` decompressors: every backup and
/// archived WAL file that is new or changed since it last read back whole (all of them with
/// `opts.full`), every incremental's chain unless the same chain was found whole on the same
/// objects before, and the WAL each backup needs present (always, from the listing). What read
/// back whole goes into the ledger ([`crate::repo::ledger`]).
///
/// # Errors
/// Only when the repository cannot be listed or a record read; what is damaged or missing is in
/// the [`RepoCheck`].
pub fn verify(repo: &Repo, schemes: &dyn Schemes, threads: Option<usize>, opts: &VerifyOptions) -> Result<RepoCheck> {
    let meta = repo.meta();
    let now = sheaf_core::time::now_ms() / 1000;
    let found = backups(repo)?;
    let wal_listing = repo.list(paths::WAL)?;
    let wal_tags: HashMap<String, Stored> = wal_listing.iter().filter_map(|o| Some((paths::wal_name(&o.name)?.to_string(), o.clone()))).collect();
    let files = archived_in(wal_listing, meta).files;
    let stripes_listed: BTreeMap<String, Stored> = repo.list(paths::BACKUPS)?.into_iter().map(|o| (o.name.clone(), o)).collect();
    let needs = crate::repo::inventory::WalNeeds::read(repo, &found, now)?;
    let horizon = needs.horizon.clone();
    let mut check = RepoCheck { horizon: horizon.clone(), ..RepoCheck::default() };
    let before = if opts.full {
        Ledger::default()
    } else {
        Ledger::read(repo).unwrap_or_else(|e| {
            check.warnings.push(format!("the verify ledger could not be read ({e}): everything is read"));
            Ledger::default()
        })
    };
    let fresh_after = opts.recheck_after.map_or(i64::MIN, |s| now.saturating_sub(s as i64));
    let mut after = Ledger { format: 1, ..Ledger::default() };
    let records: Vec<BackupRecord> = found.iter().filter_map(Found::record).cloned().collect();
    // The backups the ledger vouches for: every stripe as it was when it last read back whole.
    let vouched: HashSet<&str> =
        records.iter().filter(|r| before.backups.get(&r.id).is_some_and(|b| b.vouches(&r.stripes, &stripes_listed, fresh_after))).map(|r| r.id.as_str()).collect();
    for r in &records {
        let mut seen = match before.backups.get(&r.id).filter(|_| vouched.contains(r.id.as_str())) {
            Some(b) => {
                check.backups.push(Checked { id: r.id.clone(), frames: b.frames, bytes: b.bytes, read: false });
                Some(b.clone())
            }
            None => match open_set_lean(repo, r, schemes).and_then(|set| sheaf_core::verify(&set, threads, Arc::new(NoProgress), &opts.stop)) {
                Ok(v) => {
                    check.backups.push(Checked { id: r.id.clone(), frames: v.frames, bytes: v.bytes_raw, read: true });
                    let stripes: Option<BTreeMap<String, Seen>> = r.stripes.iter().map(|n| Some((n.clone(), Seen::now(stripes_listed.get(n)?, now, 0)))).collect();
                    check.bytes_read += stripes.iter().flat_map(|s| s.values()).map(|s| s.size).sum::<u64>();
                    stripes.map(|stripes| BackupSeen { stripes, frames: v.frames, bytes: v.bytes_raw, chain: Vec::new() })
                }
                Err(e) => {
                    check.problems.push(format!("backup {}: {e}", r.id));
                    None
                }
            },
        };
        // An incremental is whole only with its chain: every set of it there, in order, and every
        // byte of every file in one of them. Found so before on the very same objects, it still is.
        if !r.chain.is_empty() {
            let known = seen.as_ref().is_some_and(|s| s.chain == r.chain) && vouched.contains(r.id.as_str()) && r.chain.iter().all(|id| vouched.contains(id.as_str()));
            if !known {
                check.chains_checked += 1;
                let whole = open_chain(repo, &records, r, schemes, true).and_then(|sets| sheaf_core::check_chain(&sets.iter().collect::<Vec<_>>()));
                match whole {
                    Ok(()) => {
                        if let Some(s) = seen.as_mut() {
                            s.chain = r.chain.clone();
                        }
                    }
                    Err(e) => {
                        check.problems.push(format!(
                            "backup {} ({} on {}): its chain does not restore: {e}",
                            r.id,
                            r.backup_type,
                            r.chain.iter().map(BackupId::as_str).collect::<Vec<_>>().join(" <- ")
                        ));
                        if let Some(s) = seen.as_mut() {
                            s.chain.clear();
                        }
                    }
                }
            }
        }
        if let Some(s) = seen {
            after.backups.insert(r.id.clone(), s);
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
        let listed = wal_tags.get(&w.name);
        if let (Some(seen), Some(l)) = (before.wal.get(&w.name), listed) {
            if seen.vouches(l, fresh_after) {
                check.wal_files += 1;
                check.wal_bytes += seen.raw;
                after.wal.insert(w.name.clone(), seen.clone());
                continue;
            }
        }
        let r = repo.open(&paths::wal_object(&w.name)).and_then(|src| sheaf_core::blob::read_blob(src.as_ref(), repo.keys(), &mut |_| Ok(())));
        match r {
            Ok(info) => {
                check.wal_files += 1;
                check.wal_files_read += 1;
                check.wal_bytes += info.raw_len;
                if let Some(l) = listed {
                    check.bytes_read += l.size;
                    after.wal.insert(w.name.clone(), Seen::now(l, now, info.raw_len));
                }
            }
            Err(e) => check.problems.push(format!("WAL {}: {e}", w.name)),
        }
    }
    if after != before {
        if let Err(e) = after.write(repo) {
            check.warnings.push(format!("the verify ledger could not be written ({e}): the next verify reads again what this one read"));
        }
    }
    Ok(check)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_wal_outranks_damage() {
        let mut c = RepoCheck::default();
        assert!(c.ok() && c.failure().is_none());
        c.problems = vec!["backup a: damaged".into(), "backup b: 2 WAL segments are missing".into()];
        assert_eq!(c.failure().unwrap().kind(), ErrorKind::Corrupt);
        c.wal_missing = true;
        let e = c.failure().unwrap();
        assert_eq!(e.kind(), ErrorKind::Incomplete);
        assert!(e.to_string().contains("has 2 problems; the first: backup a: damaged"), "{e}");
    }
}
