//! A timeline's history file as the repository's archive holds it: where a point-in-time
//! recovery, a delta restore or the WAL summaries learn which timelines led to the one they
//! follow.

use crate::repo::Repo;
use sheaf_core::{ErrorKind, Result};

use crate::cluster::lsn::Lsn;
use crate::cluster::walname::{history_name, parse_history};
use crate::repo::paths::wal_object;

/// Timeline `timeline`'s ancestry from its history file in the repository (see [`parse_history`]);
/// `None` where the repository lacks the file. Timeline 1 has none: empty.
///
/// # Errors
/// The store's errors, a damaged file.
pub fn archived_history(repo: &Repo, timeline: u32) -> Result<Option<Vec<(u32, Lsn)>>> {
    Ok(archived_history_text(repo, timeline)?.map(|text| parse_history(&text)))
}

/// Timeline `timeline`'s history file in the repository, as text; `None` where the repository
/// lacks it. Timeline 1 has none: empty.
///
/// # Errors
/// The store's errors.
pub fn archived_history_text(repo: &Repo, timeline: u32) -> Result<Option<String>> {
    if timeline <= 1 {
        return Ok(Some(String::new()));
    }
    match repo.get_bytes(&wal_object(&history_name(timeline))) {
        Ok(text) => Ok(Some(String::from_utf8_lossy(&text).into_owned())),
        Err(e) if e.kind() == ErrorKind::Incomplete => Ok(None),
        Err(e) => Err(e),
    }
}
