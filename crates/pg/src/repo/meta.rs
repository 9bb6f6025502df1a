//! `repo.json` of a PostgreSQL repository: which cluster it belongs to and in which format it is
//! written; opening a repository checks both, creating one records them.

use serde::{Deserialize, Serialize};
use sheaf_core::repo::Repo;
use sheaf_core::{Error, Result};

use crate::server::Server;

/// Repository format this sheaf writes.
pub const REPO_FORMAT: u32 = 1;

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
}

/// Open the repository at `repo` and read what it holds.
///
/// # Errors
/// No repository there (naming `sheaf init`), one of another kind or a newer format.
pub fn open(repo: &Repo) -> Result<RepoMeta> {
    let meta: RepoMeta = repo.meta()?;
    if meta.kind != "postgres" {
        return Err(Error::invalid(format!("{} is a repository of {}, not of a PostgreSQL cluster", repo.display(), meta.kind)));
    }
    if meta.format > REPO_FORMAT {
        return Err(Error::invalid(format!(
            "{} was written by a newer sheaf (repository format {}, this one knows {REPO_FORMAT}): upgrade sheaf",
            repo.display(),
            meta.format
        )));
    }
    Ok(meta)
}

/// Create a repository for the cluster at `url`.
///
/// # Errors
/// Connection problems, a place that is not empty.
pub fn init(repo: &Repo, url: &str) -> Result<RepoMeta> {
    let mut server = Server::connect(url)?;
    let facts = server.check()?;
    let meta = RepoMeta {
        format: REPO_FORMAT,
        kind: "postgres".into(),
        system_identifier: facts.system_identifier,
        wal_segment_size: facts.wal_segment_size,
        server_version: facts.version,
        created: sheaf_core::time::utc_now(),
    };
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
