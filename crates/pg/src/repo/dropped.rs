//! WAL files `wal-push --queue-max` left out of the archive, recorded in the repository
//! (`dropped/NAME.json`) so that `sheaf info` and `check` name the gap and why it is there.

use crate::repo::Repo;
use serde::{Deserialize, Serialize};
use sheaf_core::Result;

use super::paths;

/// A WAL file left out of the archive because the queue bound tripped.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Dropped {
    /// The file's name.
    pub name: String,
    /// When, RFC 3339 UTC.
    pub at: String,
    /// WAL waiting in pg_wal then.
    pub pending_bytes: u64,
    /// The bound.
    pub queue_max: u64,
    /// Why the push failed.
    pub error: String,
}

/// The drop records in the repository, oldest name first.
///
/// # Errors
/// The repository cannot be listed or read.
pub fn dropped(repo: &Repo) -> Result<Vec<Dropped>> {
    let mut v = Vec::new();
    for s in repo.list(paths::DROPPED)? {
        if s.name.ends_with(".json") {
            v.push(repo.get_json::<Dropped>(&s.name)?);
        }
    }
    v.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(v)
}
