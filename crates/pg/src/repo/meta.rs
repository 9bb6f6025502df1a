//! `repo.json` of a PostgreSQL repository ([`RepoMeta`]): which cluster it belongs to, in which
//! format it is written, and whether it is locked; opening a repository checks the first two and
//! locks what it writes as the third says ([`Meta`]), creating one records them.

use serde::{Deserialize, Serialize};
use sheaf_core::repo::{Meta, Place};
use sheaf_core::storage::{LockMode, WriteLock};
use sheaf_core::{Error, Result};

use super::Repo;
use crate::cluster::system::SystemId;
use crate::connect::server::Server;

/// Newest repository format this sheaf reads: 1, or 2 for a locked repository (so that a sheaf
/// that knows no locks, and would write unlocked objects, refuses it).
pub const REPO_FORMAT: u32 = 2;

/// The longest lock `sheaf init --lock` takes, in days (S3 takes up to 100 years; ten is more
/// than any retention sheaf has been asked for, and a typo in compliance mode cannot be undone).
pub const MAX_LOCK_DAYS: u32 = 3660;

/// How long every object of a locked repository is kept from being deleted or overwritten.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepoLock {
    /// Days from when the object is written.
    pub days: u32,
    /// Governance or compliance.
    pub mode: LockMode,
}

impl RepoLock {
    /// Seconds an object stays locked.
    pub fn seconds(&self) -> i64 {
        i64::from(self.days) * 86_400
    }

    /// What the store's writes carry from `now` (seconds): objects that are removed again soon
    /// (a running backup's lock, a streamed segment's copy, `check`'s probe) are spared.
    pub fn write_lock(&self, now: i64) -> WriteLock {
        WriteLock { mode: self.mode, until: now + self.seconds(), spare: super::paths::UNLOCKED.iter().map(|s| s.to_string()).collect() }
    }
}

/// The database a repository holds the backups of: its `repo.json`'s `kind`.
pub const POSTGRES: &str = "postgres";
/// See [`POSTGRES`]: a MariaDB server's repository holds its full backups, and no WAL.
pub const MARIADB: &str = "mariadb";

/// The MariaDB server a repository belongs to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MariaSource {
    /// `@@server_uuid` where the server has one, else `@@hostname:@@datadir`.
    pub server: String,
    /// Its data directory when the repository was made.
    pub datadir: String,
}

/// `repo.json` of a repository: a PostgreSQL cluster's, or (`kind` `mariadb`) a MariaDB server's.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RepoMeta {
    /// Layout version.
    pub format: u32,
    /// `postgres` or `mariadb`.
    pub kind: String,
    /// The cluster it belongs to (0 for a MariaDB server's, which an older sheaf then refuses by
    /// kind rather than fail to read).
    pub system_identifier: SystemId,
    /// WAL segment size of that cluster.
    pub wal_segment_size: u64,
    /// The MariaDB server, in a MariaDB repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mariadb: Option<MariaSource>,
    /// Server version at creation.
    pub server_version: String,
    /// When it was created (UTC).
    pub created: String,
    /// S3 Object Lock on every object written (`sheaf init --lock`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<RepoLock>,
    /// Which of the repository's histories this describes ([`crate::repo::histories`]): 1 for
    /// `repo.json`'s cluster, 2 on for each upgrade's. Not stored: known from where it was read.
    #[serde(skip, default = "first_history")]
    pub history: u32,
}

fn first_history() -> u32 {
    1
}

impl RepoMeta {
    /// What describes history `r` of the repository this (its root's `repo.json`) describes: its
    /// cluster, with the repository's format, kind and lock.
    pub fn of_history(&self, r: &crate::repo::histories::HistoryRecord) -> RepoMeta {
        RepoMeta {
            system_identifier: r.system_identifier,
            wal_segment_size: r.wal_segment_size,
            server_version: r.server_version.clone(),
            created: r.created.clone(),
            history: r.history,
            ..self.clone()
        }
    }
}

impl RepoMeta {
    /// Whether it holds a MariaDB server's backups.
    pub fn is_mariadb(&self) -> bool {
        self.kind == MARIADB
    }
}

impl Meta for RepoMeta {
    fn check(&self, place: &str) -> Result<()> {
        if self.kind != POSTGRES && self.kind != MARIADB {
            return Err(Error::invalid(format!("{place} is a repository of {}, which this sheaf does not know: upgrade sheaf", self.kind)));
        }
        if self.format > REPO_FORMAT {
            return Err(Error::invalid(format!("{place} was written by a newer sheaf (repository format {}, this one knows {REPO_FORMAT}): upgrade sheaf", self.format)));
        }
        Ok(())
    }

    fn lock(&self, now: i64) -> Option<WriteLock> {
        self.lock.map(|l| l.write_lock(now))
    }
}

/// Open the PostgreSQL repository at `place` with its keys: what it holds read and checked (a
/// repository of another kind, or of a newer format, refused), its keys and owner checked, and in
/// a locked one every object written from now on locked. What is opened is its newest history
/// ([`crate::repo::histories`]): the cluster that archives and backs up into it now; the others
/// are [`crate::repo::histories::all`]'s.
///
/// # Errors
/// No repository there (naming `sheaf init`), one of another kind or a newer format; the keys'
/// and the store's errors.
pub fn open(place: &Place) -> Result<Repo> {
    let repo = open_any(place)?;
    postgres_only(&repo, "this command")?;
    Ok(repo)
}

/// Open the repository at `place`, of either kind ([`open`] takes only a PostgreSQL cluster's).
///
/// # Errors
/// As [`open`].
pub fn open_any(place: &Place) -> Result<Repo> {
    let repo: Repo = place.open()?;
    if repo.meta().is_mariadb() {
        return Ok(repo);
    }
    crate::repo::histories::newest(repo)
}

/// Refuse `what` (a PostgreSQL-only operation: WAL, PITR, a cluster's backup) in a MariaDB
/// server's repository.
///
/// # Errors
/// [`sheaf_core::ErrorKind::InvalidInput`], naming the repository's server.
pub fn postgres_only(repo: &Repo, what: &str) -> Result<()> {
    if repo.meta().is_mariadb() {
        return Err(Error::invalid(format!(
            "{} holds a MariaDB server's backups ({}): {what} is PostgreSQL's; a repository holds one server's backups, so give a PostgreSQL cluster its own",
            repo.display(),
            repo.meta().mariadb.as_ref().map_or("", |m| m.server.as_str())
        )));
    }
    Ok(())
}

/// Open the repository at `place` as [`open`] does, at the history of cluster `cluster` when one
/// is given (a cluster restored from an older history's backup recovers from that history's WAL),
/// else at its newest.
///
/// # Errors
/// As [`open`]; a cluster given that the repository does not record ([`foreign`]).
pub fn open_for(place: &Place, cluster: Option<SystemId>) -> Result<Repo> {
    let repo = open(place)?;
    match cluster.filter(|c| *c != repo.meta().system_identifier) {
        // A cluster the repository does not record: its WAL is not here, and another cluster's
        // under the same names must never be served to it.
        Some(c) => crate::repo::histories::of_cluster(&repo, c)?.map(|h| h.repo).ok_or_else(|| foreign(&repo, "the cluster recovering here", c)),
        None => Ok(repo),
    }
}

/// The cluster whose data directory sheaf runs in: PostgreSQL runs `restore_command` there.
/// `None` elsewhere (`global/pg_control` not there, or not readable).
pub fn cluster_here() -> Option<SystemId> {
    let bytes = std::fs::read("global/pg_control").ok()?;
    crate::cluster::control::Control::system_identifier_of(&bytes).ok()
}

/// Create a repository at `place` for the cluster at `url` (encrypted, when the place has keys);
/// with `lock`, one whose every object is kept from being deleted or overwritten for `lock.days`
/// after it is written (S3 Object Lock).
///
/// # Errors
/// Connection problems, a place that is not empty; a lock on a place without Object Lock, or of
/// no days or too many.
pub fn init(place: &Place, url: &str, lock: Option<RepoLock>) -> Result<Repo> {
    check_lock(place, lock.as_ref())?;
    let mut server = Server::connect(url)?;
    let facts = server.check()?;
    let meta = RepoMeta {
        format: if lock.is_some() { 2 } else { 1 },
        kind: POSTGRES.into(),
        system_identifier: facts.system_identifier,
        wal_segment_size: facts.wal_segment_size,
        mariadb: None,
        server_version: facts.version,
        created: sheaf_core::time::utc_now(),
        lock,
        history: 1,
    };
    place.init(&meta)
}

/// Refuse a lock sheaf cannot take at `place`: of no days or too many, or on a bucket without
/// Object Lock.
///
/// # Errors
/// [`sheaf_core::ErrorKind::InvalidInput`], naming the fix.
pub fn check_lock(place: &Place, lock: Option<&RepoLock>) -> Result<()> {
    if let Some(l) = lock {
        if l.days == 0 || l.days > MAX_LOCK_DAYS {
            return Err(Error::invalid(format!(
                "--lock {}: give the days each object stays locked, 1 .. {MAX_LOCK_DAYS}; at least your retention (expire --keep-within) plus the time between full backups",
                l.days
            )));
        }
        if !place.lock_enabled()? {
            return Err(Error::invalid(format!(
                "the bucket of {} does not have Object Lock enabled, so --lock cannot keep anything: create a bucket with it (aws s3api create-bucket --object-lock-enabled-for-bucket, or mc mb --with-lock) and init the repository there; it cannot be turned on for an existing bucket by sheaf",
                place.display()
            )));
        }
    }
    Ok(())
}

/// The refusal for `what` of another cluster than the one `repo` (a history) records
/// ([`crate::repo::histories::not_recorded`]).
pub fn foreign(repo: &Repo, what: &str, theirs: SystemId) -> Error {
    crate::repo::histories::not_recorded(repo, what, theirs)
}

/// A repository for tests at `dir` (made there), of a cluster with 16 MiB segments.
#[cfg(test)]
pub(crate) fn test_repo(dir: &std::path::Path) -> Repo {
    let meta = RepoMeta {
        format: 1,
        kind: POSTGRES.into(),
        system_identifier: SystemId(1),
        wal_segment_size: 16 << 20,
        mariadb: None,
        server_version: String::new(),
        created: String::new(),
        lock: None,
        history: 1,
    };
    Place::at(dir.to_str().unwrap(), &sheaf_core::LocalOnly).unwrap().init(&meta).unwrap()
}
