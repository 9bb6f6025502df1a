//! A repository through major-version upgrades: its histories. History 1 is the cluster `sheaf
//! init` recorded (`repo.json`), kept at the repository's root; each `sheaf repo upgrade` after
//! `pg_upgrade` records the new cluster as the next history (`history/N.json`, written once),
//! whose backups, WAL and records live under `history/N/` in the root's layout
//! ([`crate::repo::paths`]). A history is opened as a repository of its own
//! ([`sheaf_core::repo::Repo::part`]), so that everything that works on one cluster's backups and
//! WAL works on any history unchanged.
//!
//! Opening a repository ([`crate::repo::meta::open`]) gives its newest history: the cluster that
//! archives and backs up now. What reads the whole repository (info, verify, check, expire,
//! restore and drill choosing a backup, wal-fetch for a restored cluster) goes through [`all`].
//!
//! Why a part per history rather than one namespace: `pg_upgrade` starts the new cluster on
//! timeline 1 again, and a cluster upgraded with `--copy` can be started again and archive WAL
//! under the same names; two clusters' WAL never share a folder.

use serde::{Deserialize, Serialize};
use sheaf_core::{Error, Result};

use super::Repo;
use crate::cluster::lsn::Lsn;
use crate::cluster::system::SystemId;

pub use super::paths::{history_folder as folder, history_record as record, HISTORIES};

/// A history's record (`history/N.json`): the cluster `sheaf repo upgrade` recorded.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct HistoryRecord {
    /// Its number: 2 for the first upgrade.
    pub history: u32,
    /// The cluster.
    pub system_identifier: SystemId,
    /// Its WAL segment size.
    pub wal_segment_size: u64,
    /// Its server version when recorded.
    pub server_version: String,
    /// When it was recorded (UTC).
    pub created: String,
    /// The cluster of the history before (the one pg_upgrade upgraded).
    pub upgraded_from: SystemId,
    /// Where the new cluster's WAL stood when recorded (its last checkpoint's redo).
    pub start_lsn: Lsn,
}

/// One history of a repository, opened as a repository of its own.
#[derive(Clone, Debug)]
pub struct History {
    /// Its number, from 1.
    pub number: u32,
    /// Its backups, WAL and records (the root for history 1); its meta describes its cluster.
    pub repo: Repo,
}

impl History {
    /// How it is named in messages: `history 2 (cluster 7…, PostgreSQL 18.1)`.
    pub fn describe(&self) -> String {
        let m = self.repo.meta();
        format!("history {} (cluster {}, PostgreSQL {})", self.number, m.system_identifier, major_text(&m.server_version))
    }
}

/// The major version in a server version (`18` of `18.1 (Debian ...)`), or the text itself.
pub fn major_text(version: &str) -> &str {
    version.split(['.', ' ']).next().filter(|m| !m.is_empty()).unwrap_or(version)
}

/// Every history of the repository `repo` is one of (any history of it will do), oldest first:
/// history 1 at the root, then each upgrade's.
///
/// # Errors
/// A history's record that cannot be read or is not one; the store's errors.
pub fn all(repo: &Repo) -> Result<Vec<History>> {
    let root = repo.root();
    let first = root.meta().clone();
    let mut out = vec![History { number: 1, repo: root.clone() }];
    for n in 2.. {
        let name = record(n);
        // A look per history and one that finds nothing: a repository never upgraded pays one
        // small request when opened (wal-push opens it for every segment).
        if !root.exists(&name)? {
            break;
        }
        let r: HistoryRecord = root.get_json(&name)?;
        if r.history != n {
            return Err(Error::corrupt(format!("{}: the record of history {} under the name of history {n} (moved by hand?)", root.describe(&name), r.history)));
        }
        let meta = first.of_history(&r);
        out.push(History { number: n, repo: root.part(&folder(n), meta) });
    }
    Ok(out)
}

/// The newest history of the repository `root` (opened at its root): the cluster that archives
/// and backs up now.
///
/// # Errors
/// As [`all`].
pub fn newest(root: Repo) -> Result<Repo> {
    Ok(all(&root)?.pop().map_or(root, |h| h.repo))
}

/// The history of cluster `id`, if the repository records it.
///
/// # Errors
/// As [`all`].
pub fn of_cluster(repo: &Repo, id: SystemId) -> Result<Option<History>> {
    Ok(all(repo)?.into_iter().find(|h| h.repo.meta().system_identifier == id))
}

/// The history holding backup `id` (its repository id or its set's backup id; finished or not),
/// newest first; `repo` itself when none does (so that what is asked of it says the backup is
/// not there, as it would without histories).
///
/// # Errors
/// As [`all`]; a history whose backups cannot be listed.
pub fn with_backup(repo: &Repo, id: &str) -> Result<Repo> {
    for h in all(repo)?.into_iter().rev() {
        let found = super::records::backups(&h.repo)?;
        if found.iter().any(|f| f.id() == id || f.record().is_some_and(|r| r.backup_id == id)) {
            return Ok(h.repo);
        }
    }
    Ok(repo.clone())
}

/// The refusal for `what` of cluster `theirs`, which the repository `repo` (its newest history)
/// does not record: the cluster of an older history (it was upgraded since), or one the
/// repository has never seen (after pg_upgrade, `sheaf repo upgrade` records it).
pub fn not_recorded(repo: &Repo, what: &str, theirs: SystemId) -> Error {
    let m = repo.meta();
    if let Ok(Some(old)) = of_cluster(repo, theirs) {
        return Error::invalid(format!(
            "{what} is of cluster {theirs}, history {} of the repository at {} (PostgreSQL {}), which has been upgraded since: it now records cluster {} (history {}, PostgreSQL {}), and only that cluster backs up into it. Back up the new cluster; the old one's backups stay restorable",
            old.number,
            repo.display(),
            major_text(&old.repo.meta().server_version),
            m.system_identifier,
            m.history,
            major_text(&m.server_version)
        ));
    }
    mismatch(what, theirs, m.system_identifier, Some(&m.server_version), Some(repo.display()))
}

/// The refusal for `what` of cluster `theirs` where cluster `ours` (of server `version`, when
/// known) was expected, naming the repository when known: the fix after pg_upgrade, and
/// otherwise.
pub fn mismatch(what: &str, theirs: SystemId, ours: SystemId, version: Option<&str>, repo: Option<&str>) -> Error {
    let shown = repo.unwrap_or("R");
    Error::invalid(format!(
        "{what} is of cluster {theirs}, but the repository{} holds cluster {ours}{}: if {theirs} is that cluster upgraded with pg_upgrade, record it first with `sheaf repo upgrade --repo {shown} URL` (its backups and WAL then live beside the old cluster's); otherwise each cluster needs a repository of its own (sheaf init --repo NEW_PLACE ...): check --repo, SHEAF_REPO or the config file",
        repo.map(|r| format!(" at {r}")).unwrap_or_default(),
        version.map(|v| format!(" (PostgreSQL {})", major_text(v))).unwrap_or_default()
    ))
}

/// `serve` on the newest history, else on the next older one, and so on: the first that holds
/// what was asked for, with what it gave. `serve` says `Ok(None)` for a history that does not hold
/// it (no such backup, none finished, none before the target); any error is final, so that
/// damage in the newest history (a gap, a damaged record) never quietly serves an older cluster's
/// backup. With none holding it, the newest history is asked again through `none`, for the error
/// that says so.
///
/// # Errors
/// As [`all`]; `serve`'s first error; `none`'s.
pub fn first_serving<T>(repo: &Repo, mut serve: impl FnMut(&Repo) -> Result<Option<T>>, none: impl FnOnce(&Repo) -> Error) -> Result<(Repo, T)> {
    let all = all(repo)?;
    for h in all.iter().rev() {
        if let Some(v) = serve(&h.repo)? {
            return Ok((h.repo.clone(), v));
        }
    }
    Err(none(&all.last().expect("a repository has one history at least").repo))
}
