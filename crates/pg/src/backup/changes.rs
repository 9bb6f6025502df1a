//! What changed since a parent backup, and how it is found ([`choose_changes`]): from the WAL
//! block summaries where they vouch for the whole range ([`crate::wal::changes`]), each relation
//! file's changed pages then given by [`WalChanges`]; else the page scan
//! ([`crate::backup::incremental::PageScan`]), saying why. `--check-changes` runs both and
//! records what the summaries missed ([`Checked`]).

use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use sheaf_core::source::Files;
use sheaf_core::{Changes, Error, FileChanges, Result, UnitFilter};

use crate::backup::incremental::{page_lsn, PageScan, Parent};
use crate::cluster::checksum::PAGE_SIZE;
use crate::cluster::lsn::Lsn;
use crate::wal::blocksum::BlockSummary;
use crate::wal::changes::{blocks_named, changes_since, ranges_named, LocalWal};

/// What [`choose_changes`] chose: what the set holds of each file, how that was decided, and
/// (with `--check-changes`) where the summaries' misses are collected.
pub type Chosen = (Arc<dyn Changes>, String, Option<Misses>);

/// Pages the WAL summaries missed, as `--check-changes` finds them.
pub type Misses = Arc<Mutex<Vec<String>>>;

/// What a backup on `timeline` from `start` holds of each file, and how that was decided: from the
/// WAL block summaries where they cover the parent's start to `start` without a gap, else by the
/// page scan, saying why. With `check_changes`, the page scan decides and the misses of the
/// summaries are collected in the returned list.
///
/// # Errors
/// `check_changes` where summaries cannot be used (there is nothing to check against); the
/// repository's errors.
/// `history` is the current timeline's history file (when it is not timeline 1): summaries are
/// followed from the parent's timeline through it.
pub fn choose_changes(
    parent: &Parent,
    (timeline, start): (u32, Lsn),
    history: Option<&str>,
    pg_wal: &LocalWal<'_>,
    roots: &[(String, PathBuf)],
    files: &dyn Files,
) -> Result<Chosen> {
    let scan = PageScan::new(parent, roots, files);
    let why_not = match &parent.summaries {
        _ if parent.page_scan && !parent.check_changes => "--page-scan asked for it".to_string(),
        None => "no repository holds WAL summaries for it".to_string(),
        Some(repo) => match changes_since(repo, (parent.timeline, parent.start_lsn), (timeline, start), history, pg_wal)? {
            Ok(summary) => {
                let named = blocks_named(&summary);
                let wal = WalChanges::new(summary, parent);
                if parent.check_changes {
                    let checked = Checked::new(wal, scan);
                    let misses = checked.misses.clone();
                    return Ok((Arc::new(checked), format!("page scan, checked against the WAL summaries ({named} blocks named)"), Some(misses)));
                }
                let across = if parent.timeline == timeline { String::new() } else { format!(" (timelines {} to {timeline})", parent.timeline) };
                return Ok((Arc::new(wal), format!("WAL summaries: {named} blocks named from {} to {start}{across}", parent.start_lsn), None));
            }
            Err(why) => why,
        },
    };
    if parent.check_changes {
        return Err(Error::invalid(format!("--check-changes compares the WAL summaries with the page scan, but the summaries cannot be used: {why_not}")));
    }
    Ok((Arc::new(scan), format!("page scan (every page read, those with an LSN at or after the parent's start kept), because {why_not}"), None))
}

/// What an incremental holds of each file, from the merged summary: the pages WAL says were
/// written, every page at or past a cut, and every page past the parent's length. Databases made
/// or dropped whole, new files, and every fork but the main one are held whole.
pub struct WalChanges {
    summary: BlockSummary,
    sizes: std::collections::HashMap<(String, String), u64>,
}

impl WalChanges {
    /// From the merged summary and the parent's main-fork sizes.
    pub fn new(summary: BlockSummary, parent: &Parent) -> WalChanges {
        WalChanges { summary, sizes: parent.sizes.clone() }
    }

    /// The byte ranges of the file at (`root`, `rel`) that changed, or `None` for the whole file.
    pub fn ranges(&self, root: &str, rel: &str) -> Option<Vec<Range<u64>>> {
        let old = *self.sizes.get(&(root.to_string(), rel.to_string()))?;
        ranges_named(&self.summary, root, rel, old)
    }
}

impl Changes for WalChanges {
    fn of(&self, root: &str, rel: &str, _size: u64) -> FileChanges {
        match self.ranges(root, rel) {
            Some(r) => FileChanges::Ranges(r),
            None => FileChanges::Whole,
        }
    }
}

/// `--check-changes`: the page scan decides what the set holds (a file either holds whole is held
/// whole), and every page it finds changed that the WAL summaries did not name is recorded as a miss (pages of zeros aside: a page the
/// server extended a relation with and never wrote is not a change).
pub struct Checked {
    wal: WalChanges,
    scan: PageScan,
    /// What the WAL map missed, file and block.
    pub misses: Arc<Mutex<Vec<String>>>,
}

impl Checked {
    /// Check `wal` against `scan`.
    pub fn new(wal: WalChanges, scan: PageScan) -> Checked {
        Checked { wal, scan, misses: Arc::new(Mutex::new(Vec::new())) }
    }
}

struct CheckedFilter {
    inner: Arc<dyn UnitFilter>,
    wal: Vec<Range<u64>>,
    file: String,
    misses: Arc<Mutex<Vec<String>>>,
}

impl UnitFilter for CheckedFilter {
    fn unit(&self) -> usize {
        self.inner.unit()
    }

    fn changed(&self, n: u64, data: &[u8]) -> bool {
        let changed = self.inner.changed(n, data);
        if changed && data.len() == PAGE_SIZE && data.iter().any(|&b| b != 0) {
            let at = n * PAGE_SIZE as u64;
            if !self.wal.iter().any(|r| r.start <= at && at < r.end) {
                let mut m = self.misses.lock().unwrap_or_else(|p| p.into_inner());
                if m.len() < 100 {
                    m.push(format!("{} block {n} (page LSN {})", self.file, page_lsn(data)));
                }
            }
        }
        changed
    }
}

impl Changes for Checked {
    fn of(&self, root: &str, rel: &str, size: u64) -> FileChanges {
        // Whole where either says whole.
        match (self.scan.of(root, rel, size), self.wal.ranges(root, rel)) {
            (FileChanges::Scan(inner), Some(wal)) => {
                let file = if root.is_empty() { rel.to_string() } else { format!("{root}/{rel}") };
                FileChanges::Scan(Arc::new(CheckedFilter { inner, wal, file, misses: self.misses.clone() }))
            }
            _ => FileChanges::Whole,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::layout::BLOCKS_PER_SEGMENT;
    use crate::wal::blocksum::{BlockSummary, ForkChanges, MAIN};
    use crate::wal::changes::DEFAULT_TABLESPACE;
    use crate::wal::read::Locator;

    type Fork<'a> = ((Locator, u8), Option<u32>, &'a [u32]);

    fn wal(forks: &[Fork<'_>], databases: &[(u32, u32)]) -> WalChanges {
        let mut s = BlockSummary::default();
        for (k, limit, blocks) in forks {
            s.forks.insert(*k, ForkChanges { limit: *limit, blocks: blocks.iter().copied().collect() });
        }
        s.databases = databases.iter().copied().collect();
        let mut sizes = std::collections::HashMap::new();
        for (root, rel) in [("", "base/5/16384"), ("", "base/5/16384.1"), ("pg_tblspc/16400", "PG_18_202506291/5/16401"), ("", "global/1262")] {
            sizes.insert((root.to_string(), rel.to_string()), 10 * PAGE_SIZE as u64);
        }
        WalChanges { summary: s, sizes }
    }

    const P: u64 = PAGE_SIZE as u64;

    #[test]
    fn pages_written_cuts_and_growth_become_ranges() {
        let t = Locator { spc: DEFAULT_TABLESPACE, db: 5, rel: 16384 };
        let w = wal(&[((t, MAIN), None, &[1, 2, 7, BLOCKS_PER_SEGMENT + 3])], &[]);
        assert_eq!(w.ranges("", "base/5/16384").unwrap(), vec![P..3 * P, 7 * P..8 * P, 10 * P..u64::MAX]);
        assert_eq!(w.ranges("", "base/5/16384.1").unwrap(), vec![3 * P..4 * P, 10 * P..u64::MAX], "the second segment's own blocks");
        assert_eq!(w.ranges("", "base/5/16384_vm"), None, "other forks whole");
        assert_eq!(w.ranges("", "base/5/99999"), None, "a new file whole");
        assert_eq!(w.ranges("", "global/1262").unwrap(), vec![10 * P..u64::MAX], "unchanged: only what grew");
        // Cut to 5 blocks: everything from 5 on, whatever the parent had.
        let w = wal(&[((t, MAIN), Some(5), &[1, 7])], &[]);
        assert_eq!(w.ranges("", "base/5/16384").unwrap(), vec![P..2 * P, 5 * P..u64::MAX]);
        let w = wal(&[((t, MAIN), Some(0), &[])], &[]);
        assert_eq!(w.ranges("", "base/5/16384"), None, "made again: whole");
        let ts = Locator { spc: 16400, db: 5, rel: 16401 };
        let w = wal(&[((ts, MAIN), None, &[0])], &[(DEFAULT_TABLESPACE, 5)]);
        assert_eq!(w.ranges("pg_tblspc/16400", "PG_18_202506291/5/16401").unwrap(), vec![0..P, 10 * P..u64::MAX], "in its tablespace");
        assert_eq!(w.ranges("", "base/5/16384"), None, "its database was made again");
    }
}
