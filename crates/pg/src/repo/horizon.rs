//! How far back `sheaf expire` removed WAL on purpose: the retention horizon, `retention.json`.
//!
//! Retention keeps the WAL from the oldest backup the policy keeps onwards; a pinned backup older
//! than that keeps only its own span, the WAL that makes it consistent. The segments between are
//! gone by design, not by damage, and `verify`, `info`, `check` and the metrics must say so and
//! still fail on a real gap. They tell the two apart by this record: `expire` raises it before
//! it removes the first segment (so a cut midway never leaves a gap it does not explain), and it
//! only ever moves forward. Below it, a finished backup needs only its own span; at or above it,
//! every segment of the archive is needed.

use crate::repo::Repo;
use serde::{Deserialize, Serialize};
use sheaf_core::Result;

use crate::cluster::walname::WalFile;

/// Where the horizon lives, relative to the repository's root.
pub const HORIZON: &str = "retention.json";

/// Every archived segment before `segno` (on any timeline) is retention's to remove, except the
/// span from a kept backup's start to its stop.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Horizon {
    /// The first segment kept: the oldest backup the policy kept starts in it.
    pub first_kept: String,
    /// Its segment number (log and segment, whatever the timeline).
    pub segno: u64,
    /// When `expire` set it (UTC).
    pub set_at: String,
}

impl Horizon {
    /// Whether segment `segno` is before the horizon, where only backups' own spans are kept.
    pub fn below(&self, segno: u64) -> bool {
        segno < self.segno
    }
}

/// The repository's horizon, if `expire` ever set one.
///
/// # Errors
/// When the store cannot be asked, or the record is damaged.
pub fn read(repo: &Repo) -> Result<Option<Horizon>> {
    if !repo.exists(HORIZON)? {
        return Ok(None);
    }
    repo.get_json(HORIZON).map(Some)
}

/// Raise the horizon to `first_kept` (never lower it): called before any WAL before it is removed.
/// Returns the horizon in force afterwards.
///
/// # Errors
/// When the record cannot be read or written.
pub fn raise(repo: &Repo, first_kept: &WalFile) -> Result<Horizon> {
    if let Some(h) = read(repo)? {
        if h.segno >= first_kept.segno {
            return Ok(h);
        }
    }
    let h = Horizon { first_kept: first_kept.name.clone(), segno: first_kept.segno, set_at: sheaf_core::time::utc_now() };
    repo.put_json(HORIZON, &h, true)?;
    Ok(h)
}

/// The last segment a finished backup consistent at segment `stop` needs, given the newest
/// segment archived on its timeline (`last`): the end of the archive, unless its span ends before
/// the horizon (a pinned backup older than what the policy keeps), where it needs only its own.
pub fn needed_to(stop: u64, last: u64, horizon: Option<&Horizon>) -> u64 {
    match horizon {
        Some(h) if stop + 1 < h.segno => stop.min(last),
        _ => last,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_horizon_only_moves_forward() {
        let d = tempfile::tempdir().unwrap();
        let repo = super::super::meta::test_repo(&d.path().join("r"));
        let seg = repo.meta().wal_segment_size;
        let at = |n: u64| WalFile::parse(&crate::cluster::walname::segment_name(1, n, seg), seg).unwrap();
        assert_eq!(read(&repo).unwrap(), None);
        assert_eq!(raise(&repo, &at(8)).unwrap().segno, 8);
        assert_eq!(raise(&repo, &at(5)).unwrap().segno, 8, "a looser policy later does not bring removed WAL back");
        assert_eq!(read(&repo).unwrap().unwrap().first_kept, crate::cluster::walname::segment_name(1, 8, seg));
        assert_eq!(raise(&repo, &at(12)).unwrap().segno, 12);
    }

    #[test]
    fn a_backup_before_the_horizon_needs_only_its_own_span() {
        let h = Horizon { first_kept: String::new(), segno: 10, set_at: String::new() };
        assert_eq!(needed_to(3, 20, None), 20, "no horizon: every backup needs the archive to its end");
        assert_eq!(needed_to(3, 20, Some(&h)), 3, "pinned, before the horizon");
        assert_eq!(needed_to(9, 20, Some(&h)), 20, "its span reaches the horizon: the archive continues it");
        assert_eq!(needed_to(10, 20, Some(&h)), 20);
    }
}
