//! Which key wal-push opens a repository with, recorded beside the key's record
//! (`keys/ID.used`: when, and on which host), so that `sheaf key remove` refuses to remove the key
//! that archive_command still gives (archiving would fail from then on, silently to whoever
//! removed it). Written at most every 6 hours per host; key rings read only `keys/*.key`.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sheaf_core::repo::Place;
use sheaf_core::Result;

use crate::repo::Repo;

/// How often one host records that wal-push used a key.
const NOTE_EVERY: i64 = 6 * 3600;

/// When wal-push last opened the repository with a key, and where.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KeyUse {
    /// Seconds since the epoch.
    pub unix: i64,
    /// The host wal-push ran on.
    pub host: String,
}

/// Where the last use of key `id` is recorded.
pub fn name(id: &str) -> String {
    format!("{}{id}.used", sheaf_core::keyring::KEYS_DIR)
}

/// The last use by wal-push of each key in `ids` that has one recorded and readable: the
/// repository opened once (an encrypted one's ring costs a key derivation), then one small read
/// per key.
pub fn last(repo: &Place, ids: &[&str]) -> Vec<(String, KeyUse)> {
    // At the repository's root, beside the keys: not in a history's part.
    let Ok(opened) = crate::repo::meta::open(repo).map(|r| r.root()) else { return Vec::new() };
    ids.iter().filter_map(|id| opened.get_json(&name(id)).ok().map(|u| (id.to_string(), u))).collect()
}

/// Record that wal-push opened `repo` with the key it was given: into the repository at most every
/// 6 hours per host and key (a marker in `spool` says when this host last did). Nothing for a
/// repository without a key ring.
///
/// # Errors
/// The record cannot be written.
pub fn note(repo: &Repo, spool: &Path, now: i64) -> Result<()> {
    let Some(u) = repo.ring() else { return Ok(()) };
    let marker = spool.join(format!("key-used-{}", u.opened_by));
    if std::fs::read_to_string(&marker).ok().and_then(|t| t.trim().parse::<i64>().ok()).is_some_and(|t| (0..NOTE_EVERY).contains(&(now - t))) {
        return Ok(());
    }
    // At the repository's root, beside the keys, whichever history wal-push archives into.
    repo.root().put_json(&name(&u.opened_by), &KeyUse { unix: now, host: sheaf_core::host::host_name() }, true)?;
    if std::fs::create_dir_all(spool).is_ok() {
        let _ = std::fs::write(&marker, now.to_string());
    }
    Ok(())
}
