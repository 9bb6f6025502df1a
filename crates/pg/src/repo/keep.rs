//! Pins (`sheaf keep`, WAL-G's backup-mark, Barman's keep): a backup pinned, forever or until a
//! date, is never expired, nor the backups it builds on, nor the WAL it needs to become
//! consistent. A pin is its own object, `keep/ID.json`, so pinning rewrites nothing the backup
//! wrote. Pinning and releasing are [`crate::maintain::keep`]'s.

use super::id::BackupId;
use crate::repo::Repo;
use serde::{Deserialize, Serialize};
use sheaf_core::Result;

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
    pub id: BackupId,
    /// Until when (seconds since the epoch); `None`: until released.
    pub until: Option<i64>,
    /// When it was pinned (UTC).
    pub pinned_at: String,
    /// In a locked repository: until when its objects (and those of the backups it builds on, and
    /// the WAL it needs to be consistent) were locked for the pin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locked_until: Option<i64>,
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
