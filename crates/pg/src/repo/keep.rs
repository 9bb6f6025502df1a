//! Pinned backups (`sheaf keep`, WAL-G's backup-mark, Barman's keep): a backup pinned, forever or
//! until a date, is never expired, nor the backups it builds on, nor the WAL it needs to become
//! consistent (from its start to its stop; not the WAL after it, which only recovery past it
//! would need). A pin is its own object, `keep/ID.json`, so pinning rewrites nothing the backup
//! wrote.

use serde::{Deserialize, Serialize};
use sheaf_core::repo::Repo;
use sheaf_core::{Error, ErrorKind, Result};

use super::records::{backups, Found};

/// Where pins live.
pub const KEEP: &str = "keep/";

/// A backup's pin.
pub fn pin_object(id: &str) -> String {
    format!("{KEEP}{id}.json")
}

/// A pinned backup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pin {
    /// The backup's repository id.
    pub id: String,
    /// Until when (seconds since the epoch); `None`: until released.
    pub until: Option<i64>,
    /// When it was pinned (UTC).
    pub pinned_at: String,
}

impl Pin {
    /// Whether it holds at `now`.
    pub fn holds(&self, now: i64) -> bool {
        self.until.is_none_or(|u| u > now)
    }

    /// `forever` or the date it ends.
    pub fn until_text(&self) -> String {
        self.until.map_or_else(|| "until released".into(), |u| format!("until {}", sheaf_core::time::utc(u)))
    }
}

/// Every pin, by backup id.
///
/// # Errors
/// The repository cannot be listed, or a pin does not parse.
pub fn pins(repo: &Repo) -> Result<Vec<Pin>> {
    let mut out = Vec::new();
    for o in repo.list(KEEP)? {
        if o.name.ends_with(".json") {
            out.push(repo.get_json::<Pin>(&o.name)?);
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

/// Pin finished backup `id` until `until` (seconds since the epoch; `None`: until released),
/// replacing a pin it has.
///
/// # Errors
/// No such finished backup; a date already past.
pub fn pin(repo: &Repo, id: &str, until: Option<i64>, now: i64) -> Result<Pin> {
    let found = backups(repo)?;
    match found.iter().find(|f| f.id() == id) {
        Some(Found::Complete(_)) => {}
        Some(Found::Unfinished { .. }) => return Err(Error::invalid(format!("backup {id} is not finished: only a finished backup can be kept"))),
        None => return Err(Error::new(ErrorKind::InvalidInput, format!("no backup {id} in {} (sheaf info lists them)", repo.display()))),
    }
    if let Some(u) = until.filter(|&u| u <= now) {
        return Err(Error::invalid(format!("--until {} is already past: give a date to come", sheaf_core::time::utc(u))));
    }
    let p = Pin { id: id.to_string(), until, pinned_at: sheaf_core::time::utc_now() };
    repo.put_json(&pin_object(id), &p, true)?;
    Ok(p)
}

/// Release backup `id`'s pin; whether it had one.
///
/// # Errors
/// The store's.
pub fn release(repo: &Repo, id: &str) -> Result<bool> {
    let o = pin_object(id);
    if !repo.exists(&o)? {
        return Ok(false);
    }
    repo.delete(&o)?;
    Ok(true)
}
