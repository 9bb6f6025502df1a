//! Incremental and differential backups of a cluster: the parent a new backup builds on, the check
//! that the parent lies on the current timeline's history, and what the new set holds of each file.
//!
//! Changes are found by the page scan: every page of a relation's main fork is read, and those
//! whose LSN is at or after the parent's start LSN are kept, with every page past the parent's
//! length and every page that is all zeros (a page the server extended the relation with, or one
//! read mid-extension). This is always correct: a page written after the parent's start carries a
//! newer LSN, and one written before it was flushed by the parent's start checkpoint and is in the
//! parent as it is now. (Hint bits set without WAL do not change the LSN, so they are not carried;
//! PostgreSQL sets them again.) Free-space maps, visibility maps and init forks are stored whole:
//! the first is not WAL-logged, the second's bits are cleared without its page's LSN moving, and
//! the last is tiny. Files that are not relations (the control file, pg_xact, configuration) are
//! small and stored whole. One case defeats LSNs: a database dropped and made again under the same
//! OID by copying its template (`STRATEGY FILE_COPY`) has files at the parent's paths whose pages
//! keep the template's old LSNs. Its PG_VERSION is new, so every database directory whose
//! PG_VERSION differs from the parent's is stored whole.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use crate::repo::Repo;
use sheaf_core::manifest::{BackupType, EntryKind};
use sheaf_core::source::Files;
use sheaf_core::{BackupSet, Changes, FileChanges, Lineage, UnitFilter};

use crate::cluster::checksum::PAGE_SIZE;
use crate::cluster::layout;
use crate::cluster::lsn::Lsn;

/// The backup an incremental or differential builds on, and what the page scan needs of it.
#[derive(Clone, Debug)]
pub struct Parent {
    /// The new backup's type and chain (its full first, this parent last).
    pub lineage: Lineage,
    /// The parent's name in the repository (for messages and the record).
    pub name: String,
    /// Where the parent's WAL replay started: pages at or after it changed since.
    pub start_lsn: Lsn,
    /// Where the parent became consistent: the current timeline must not have left the parent's
    /// before it.
    pub stop_lsn: Lsn,
    /// The parent's timeline.
    pub timeline: u32,
    /// The length of each relation main-fork file in the parent, by (root name, path).
    pub sizes: HashMap<(String, String), u64>,
    /// Each database directory's PG_VERSION in the parent, by (root name, directory): its
    /// modification time. A database dropped and made again under the same OID by copying its
    /// template (FILE_COPY) has files whose pages keep the template's old LSNs; its new
    /// PG_VERSION says so.
    pub versions: HashMap<(String, String), i64>,
    /// The repository whose WAL block summaries say what changed; without it, the page scan.
    pub summaries: Option<Repo>,
    /// `--check-changes`: keep what the page scan finds, and fail if the summaries missed any of it.
    pub check_changes: bool,
    /// `--page-scan`: read every page, whatever the summaries hold.
    pub page_scan: bool,
}

impl Parent {
    /// The parent that the opened set `set` is; `lineage` is the new backup's.
    pub fn new(lineage: Lineage, name: &str, start_lsn: Lsn, stop_lsn: Lsn, timeline: u32, set: &BackupSet) -> Parent {
        let m = &set.manifest;
        let files = || m.entries.iter().filter(|e| e.kind == EntryKind::File && !e.vanished).map(|e| (m.roots[e.root as usize].name.clone(), e));
        let sizes = files().filter(|(root, e)| main_fork(root, &e.path)).map(|(root, e)| ((root, e.path.clone()), e.size)).collect();
        let versions = files().filter_map(|(root, e)| e.path.strip_suffix("/PG_VERSION").filter(|d| d.contains('/')).map(|d| ((root, d.to_string()), e.mtime_ns))).collect();
        Parent { lineage, name: name.to_string(), start_lsn, stop_lsn, timeline, sizes, versions, summaries: None, check_changes: false, page_scan: false }
    }

    /// Why this parent cannot serve a backup on `timeline`, whose history file (`N.history`, absent
    /// for timeline 1) is `history`; `None` when it can. It can when it was taken on this timeline,
    /// or on an ancestor that the current timeline left only after the parent was consistent: a
    /// page changed on the old timeline after the branch is not in this timeline's history.
    pub fn off_history(&self, timeline: u32, history: Option<&str>) -> Option<String> {
        if self.timeline == timeline {
            return None;
        }
        let parent = format!("backup {} (timeline {}, consistent at {})", self.name, self.timeline, self.stop_lsn);
        let Some(history) = history else {
            return Some(format!("{parent} is not on timeline {timeline}, whose history file could not be read"));
        };
        match crate::cluster::walname::parse_history(history).into_iter().find(|(tli, _)| *tli == self.timeline) {
            Some((_, switch)) if self.stop_lsn <= switch => None,
            Some((_, switch)) => Some(format!("{parent}: timeline {timeline} branched from it at {switch}, before the parent was consistent")),
            None => Some(format!("{parent} is not in the history of timeline {timeline}")),
        }
    }
}

/// Whether `rel` under the root named `root` is a segment of a relation's main fork.
fn main_fork(root: &str, rel: &str) -> bool {
    layout::is_relation_path(rel, !root.is_empty()).is_some_and(|f| f.fork.is_empty())
}

/// The page scan: what an incremental holds of each file, from the parent's sizes and start LSN.
pub struct PageScan {
    since: Lsn,
    sizes: HashMap<(String, String), u64>,
    /// Database directories made again since the parent (by root name): held whole.
    remade: HashSet<(String, String)>,
}

impl PageScan {
    /// Pages changed since `parent` started; `roots` are the backup's roots (name and place), where
    /// each database directory's PG_VERSION is compared with the parent's.
    pub fn new(parent: &Parent, roots: &[(String, PathBuf)], files: &dyn Files) -> PageScan {
        let remade = parent
            .versions
            .iter()
            .filter(|((root, dir), &was)| {
                let now = roots.iter().find(|(r, _)| r == root).and_then(|(_, place)| files.list_one(&place.join(dir).join("PG_VERSION"), String::new(), 0).ok().flatten());
                now.is_none_or(|l| l.entry.mtime_ns != was)
            })
            .map(|(k, _)| k.clone())
            .collect();
        PageScan { since: parent.start_lsn, sizes: parent.sizes.clone(), remade }
    }
}

impl Changes for PageScan {
    fn of(&self, root: &str, rel: &str, _size: u64) -> FileChanges {
        if !main_fork(root, rel) {
            return FileChanges::Whole;
        }
        if rel.rsplit_once('/').is_some_and(|(dir, _)| self.remade.contains(&(root.to_string(), dir.to_string()))) {
            return FileChanges::Whole;
        }
        match self.sizes.get(&(root.to_string(), rel.to_string())) {
            Some(&old) => FileChanges::Scan(Arc::new(SinceLsn { since: self.since, parent_pages: old / PAGE_SIZE as u64 })),
            // New since the parent (or a relation rewritten under a new file node).
            None => FileChanges::Whole,
        }
    }
}

/// A page changed since `since`: see the module documentation.
struct SinceLsn {
    since: Lsn,
    /// Whole pages the parent had of the file.
    parent_pages: u64,
}

/// A page's LSN: its first 8 bytes, the high half first.
pub fn page_lsn(page: &[u8]) -> Lsn {
    let half = |at: usize| u64::from(u32::from_le_bytes(page[at..at + 4].try_into().expect("4 bytes")));
    Lsn((half(0) << 32) | half(4))
}

impl UnitFilter for SinceLsn {
    fn unit(&self) -> usize {
        PAGE_SIZE
    }

    fn changed(&self, n: u64, data: &[u8]) -> bool {
        data.len() < PAGE_SIZE || n >= self.parent_pages || page_lsn(data) >= self.since || data.iter().all(|&b| b == 0)
    }
}

/// The backup types a new backup may build on, newest first: an `incr` on any, a `diff` on a full.
pub fn may_build_on(wanted: BackupType, parent: BackupType) -> bool {
    match wanted {
        BackupType::Full => false,
        BackupType::Diff => parent == BackupType::Full,
        BackupType::Incr => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(lsn: u64, fill: u8) -> Vec<u8> {
        let mut p = vec![fill; PAGE_SIZE];
        p[0..4].copy_from_slice(&((lsn >> 32) as u32).to_le_bytes());
        p[4..8].copy_from_slice(&(lsn as u32).to_le_bytes());
        p
    }

    #[test]
    fn pages_count_as_changed_by_lsn_length_and_zeros() {
        let f = SinceLsn { since: Lsn(0x1_0000_2000), parent_pages: 10 };
        assert_eq!(page_lsn(&page(0x1_0000_2000, 1)), Lsn(0x1_0000_2000));
        assert!(f.changed(0, &page(0x1_0000_2000, 1)), "at the parent's start");
        assert!(f.changed(0, &page(0x2_0000_0000, 1)));
        assert!(!f.changed(0, &page(0x1_0000_1fff, 1)), "before it");
        assert!(f.changed(10, &page(5, 1)), "past the parent's end");
        assert!(f.changed(3, &vec![0; PAGE_SIZE]), "all zeros");
        assert!(f.changed(3, &page(5, 1)[..100]), "a short tail");
    }

    #[test]
    fn only_main_forks_the_parent_had_are_scanned() {
        let mut sizes = HashMap::new();
        sizes.insert((String::new(), "base/5/16384".to_string()), 3 * PAGE_SIZE as u64);
        sizes.insert(("pg_tblspc/16400".to_string(), "PG_18_202506291/5/16401.1".to_string()), PAGE_SIZE as u64);
        let s = PageScan { since: Lsn(1), sizes, remade: [(String::new(), "base/6".to_string())].into_iter().collect() };
        let mut more = s.sizes.clone();
        more.insert((String::new(), "base/6/16384".to_string()), PAGE_SIZE as u64);
        let s = PageScan { sizes: more, ..s };
        assert!(matches!(s.of("", "base/6/16384", 0), FileChanges::Whole), "a database made again: whole");
        assert!(matches!(s.of("", "base/5/16384", 0), FileChanges::Scan(_)));
        assert!(matches!(s.of("pg_tblspc/16400", "PG_18_202506291/5/16401.1", 0), FileChanges::Scan(_)));
        for (root, rel) in [("", "base/5/16384_vm"), ("", "base/5/16384_fsm"), ("", "base/5/99999"), ("", "global/pg_control"), ("", "pg_xact/0000")] {
            assert!(matches!(s.of(root, rel, 0), FileChanges::Whole), "{rel}");
        }
    }

    #[test]
    fn a_parent_serves_its_timeline_and_descendants_that_left_after_it() {
        let p = Parent {
            lineage: Lineage { backup_type: BackupType::Incr, chain: vec![] },
            name: "b".into(),
            start_lsn: Lsn(0x100),
            stop_lsn: Lsn(0x3000000),
            timeline: 1,
            sizes: HashMap::new(),
            versions: HashMap::new(),
            summaries: None,
            check_changes: false,
            page_scan: false,
        };
        assert_eq!(p.off_history(1, None), None);
        assert_eq!(p.off_history(2, Some("1\t0/5000000\tno recovery target specified\n")), None);
        let early = p.off_history(2, Some("1\t0/2000000\tbefore 2026-11-24\n")).unwrap();
        assert!(early.contains("before the parent was consistent"), "{early}");
        let elsewhere = p.off_history(3, Some("2\t0/5000000\tx\n")).unwrap();
        assert!(elsewhere.contains("not in the history"), "{elsewhere}");
        assert!(p.off_history(3, Some("1\t0/4000000\tx\n2\t0/6000000\ty\n")).is_none(), "an ancestor two steps back");
    }
}
