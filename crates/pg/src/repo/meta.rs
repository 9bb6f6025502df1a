//! `repo.json` of a PostgreSQL repository: which cluster it belongs to and in which format it is
//! written; opening a repository checks both, creating one records them.

use serde::{Deserialize, Serialize};
use sheaf_core::repo::Repo;
use sheaf_core::storage::{LockMode, WriteLock};
use sheaf_core::{Error, Result};

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

/// `repo.json` of a PostgreSQL repository.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RepoMeta {
    /// Layout version.
    pub format: u32,
    /// `postgres`.
    pub kind: String,
    /// The cluster it belongs to.
    pub system_identifier: String,
    /// WAL segment size of that cluster.
    pub wal_segment_size: u64,
    /// Server version at creation.
    pub server_version: String,
    /// When it was created (UTC).
    pub created: String,
    /// S3 Object Lock on every object written (`sheaf init --lock`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<RepoLock>,
}

/// Open the repository at `repo` and read what it holds; in a locked one, every object written
/// from now on carries the lock.
///
/// # Errors
/// No repository there (naming `sheaf init`), one of another kind or a newer format.
pub fn open(repo: &Repo) -> Result<RepoMeta> {
    let meta: RepoMeta = repo.meta()?;
    if meta.kind != "postgres" {
        return Err(Error::invalid(format!("{} is a repository of {}, not of a PostgreSQL cluster", repo.display(), meta.kind)));
    }
    if meta.format > REPO_FORMAT {
        return Err(Error::invalid(format!("{} was written by a newer sheaf (repository format {}, this one knows {REPO_FORMAT}): upgrade sheaf", repo.display(), meta.format)));
    }
    if let Some(lock) = &meta.lock {
        if repo.write_lock().is_none() {
            repo.lock_writes(lock.write_lock(sheaf_core::time::now_ms() / 1000))?;
        }
    }
    Ok(meta)
}

/// Create a repository for the cluster at `url`; with `lock`, one whose every object is kept from
/// being deleted or overwritten for `lock.days` after it is written (S3 Object Lock).
///
/// # Errors
/// Connection problems, a place that is not empty; a lock on a place without Object Lock, or of
/// no days or too many.
pub fn init(repo: &Repo, url: &str, lock: Option<RepoLock>) -> Result<RepoMeta> {
    if let Some(l) = &lock {
        if l.days == 0 || l.days > MAX_LOCK_DAYS {
            return Err(Error::invalid(format!(
                "--lock {}: give the days each object stays locked, 1 .. {MAX_LOCK_DAYS}; at least your retention (expire --keep-within) plus the time between full backups",
                l.days
            )));
        }
        if !repo.lock_enabled()? {
            return Err(Error::invalid(format!(
                "the bucket of {} does not have Object Lock enabled, so --lock cannot keep anything: create a bucket with it (aws s3api create-bucket --object-lock-enabled-for-bucket, or mc mb --with-lock) and init the repository there; it cannot be turned on for an existing bucket by sheaf",
                repo.display()
            )));
        }
    }
    let mut server = Server::connect(url)?;
    let facts = server.check()?;
    let meta = RepoMeta {
        format: if lock.is_some() { 2 } else { 1 },
        kind: "postgres".into(),
        system_identifier: facts.system_identifier,
        wal_segment_size: facts.wal_segment_size,
        server_version: facts.version,
        created: sheaf_core::time::utc_now(),
        lock,
    };
    // repo.json itself is locked: without it nothing in the repository can be read.
    if let Some(l) = &lock {
        repo.lock_writes(l.write_lock(sheaf_core::time::now_ms() / 1000))?;
    }
    repo.init(&meta)?;
    Ok(meta)
}

/// The refusal for a file of another cluster.
pub fn foreign(repo: &Repo, meta: &RepoMeta, what: &str, theirs: &str) -> Error {
    Error::invalid(format!(
        "{what} is of cluster {theirs}, but the repository at {} holds cluster {}: each cluster needs a repository of its own (sheaf init --repo NEW_PLACE ...); check --repo, SHEAF_REPO or the config file",
        repo.display(),
        meta.system_identifier
    ))
}
