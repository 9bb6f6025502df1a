//! What changed since a parent backup, and how it is found ([`choose_changes`]): from WAL block
//! summaries where they vouch for the range, else the page scan. From the summaries: the summaries of every segment
//! from the parent's start to this backup's, merged in LSN order and checked to follow each other
//! without a gap; segments not yet archived are summarized from pg_wal on the spot. From the merged
//! summary, each relation file's changed pages ([`WalChanges`]); where summaries cannot vouch for
//! the range, the reason why, and the page scan is used instead.

use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use sheaf_core::repo::Repo;
use sheaf_core::source::Files;
use sheaf_core::{Changes, Error, FileChanges, Result, UnitFilter};

use crate::incremental::{page_lsn, PageScan, Parent};

use crate::blocksum::{BlockSummary, MAIN};
use crate::checksum::PAGE_SIZE;
use crate::layout::{self, BLOCKS_PER_SEGMENT};
use crate::lsn::Lsn;
use crate::repo::meta::RepoMeta;
use crate::summarize::{read_summary, summarize_from};
use crate::wal::segment_name;
use crate::walread::Locator;

/// PostgreSQL's default tablespace (`base/`) and the shared one (`global/`).
const DEFAULT_TABLESPACE: u32 = 1663;
const GLOBAL_TABLESPACE: u32 = 1664;

/// The segments that hold `[from, to)`, as (timeline, segment number), following the timelines
/// from `first` to `last` as `history` (the last one's history file, oldest first) says: on each
/// timeline before the last, the segments wholly before the one it was left in; the next
/// timeline's first segment holds the rest (PostgreSQL copies the old WAL up to the branch into
/// it), and its summary starts where the old timeline's previous segment's ends.
fn segments(first: u32, last: u32, from: Lsn, to: Lsn, history: &[(u32, Lsn)], seg: u64) -> Vec<(u32, u64)> {
    let mut out = Vec::new();
    let mut at = from.segment_number(seg);
    if first != last {
        for &(timeline, left_at) in history.iter().filter(|(t, _)| *t >= first && *t < last) {
            while at < left_at.segment_number(seg) {
                out.push((timeline, at));
                at += 1;
            }
        }
    }
    while at <= to.saturating_sub(1).segment_number(seg) {
        out.push((last, at));
        at += 1;
    }
    out
}

/// The merged summary of `[from, to)`, from `parent_timeline` to `timeline` (`history` is the
/// latter's history file, needed when they differ), or why there is none: segments whose
/// summary is missing are summarized now, from the repository when archived, from `pg_wal` when
/// not archived yet. Nothing is stored: wal-push may be storing the same summary at this moment
/// (`sheaf wal-summarize` stores what is missing).
///
/// # Errors
/// The store's errors. A gap, WAL at `wal_level = minimal`, a record sheaf cannot follow or a
/// timeline the history does not lead through are not errors: they are the `Err` of the inner
/// result, saying why.
pub fn changes_since(
    repo: &Repo,
    meta: &RepoMeta,
    (parent_timeline, from): (u32, Lsn),
    (timeline, to): (u32, Lsn),
    history: Option<&str>,
    pg_wal: &LocalWal<'_>,
) -> Result<std::result::Result<BlockSummary, String>> {
    let seg = meta.wal_segment_size;
    let history = history.map(crate::wal::parse_history).unwrap_or_default();
    if parent_timeline != timeline && !history.iter().any(|(t, _)| *t == parent_timeline) {
        return Ok(Err(format!("timeline {parent_timeline} is not in the history of timeline {timeline}")));
    }
    let mut merged = BlockSummary { timeline: parent_timeline, ..Default::default() };
    let mut prev_timeline = parent_timeline;
    for (timeline, segno) in segments(parent_timeline, timeline, from, to, &history, seg) {
        let name = segment_name(timeline, segno, seg);
        let archived = repo.exists(&crate::repo::paths::wal_object(&name))?;
        // Each segment's summary starts where the merged ones end: a stored one that does not
        // (made while its predecessor had no summary yet: segments archived in parallel, or one
        // summarized here on the spot and not stored) is made again from that end.
        let after = (merged.end != 0).then_some((prev_timeline, merged.end));
        let stored = read_summary(repo, &name)?.filter(|s| after.is_none_or(|(_, end)| s.start == end));
        let s = match stored {
            Some(s) => s,
            None => {
                let local = if archived {
                    None
                } else {
                    let Some(local) = pg_wal(&name)? else {
                        return Ok(Err(format!("WAL segment {name} is neither archived nor in pg_wal")));
                    };
                    Some(local)
                };
                summarize_from(repo, meta, &name, local.as_deref(), archived, after, pg_wal)?
            }
        };
        if let Err(e) = merged.follow(&s) {
            return Ok(Err(format!("the WAL summaries have a gap at segment {name}: {e}")));
        }
        prev_timeline = timeline;
    }
    let (start, end) = (Lsn(merged.start), Lsn(merged.end));
    if start > first_record_from(from, seg) || end < to {
        return Ok(Err(format!("the WAL summaries cover {start} .. {end}, not all of {from} .. {to}")));
    }
    if merged.minimal {
        return Ok(Err("WAL was written at wal_level = minimal since the parent: changes may be missing from it".into()));
    }
    if let Some(u) = merged.unknown.first() {
        return Ok(Err(format!("the WAL holds what sheaf cannot follow: {u}")));
    }
    Ok(Ok(merged))
}

/// Where the first record at or after `at` can start: no record starts inside a page's header,
/// so a span that starts at a page boundary (a timeline left at the end of a segment) starts past
/// it (40 bytes at a segment's start, 24 at another page's).
fn first_record_from(at: Lsn, seg: u64) -> Lsn {
    match (at.0 % seg, at.0 % crate::walread::PAGE as u64) {
        (0, _) => Lsn(at.0 + 40),
        (_, 0) => Lsn(at.0 + 24),
        _ => at,
    }
}

/// A WAL segment not archived yet, by name, as a file on this host (pg_wal's, or a copy of the
/// agent's host's); `None` where the cluster has none.
pub type LocalWal<'a> = dyn Fn(&str) -> Result<Option<PathBuf>> + 'a;

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
        Some((repo, meta)) => match changes_since(repo, meta, (parent.timeline, parent.start_lsn), (timeline, start), history, pg_wal)? {
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

/// The relation a file is, in WAL's terms: (locator, fork, segment number), for main, visibility
/// map and init forks alike.
fn locate(root: &str, rel: &str) -> Option<(Locator, &'static str, u32)> {
    let file = layout::is_relation_path(rel, !root.is_empty())?;
    let parts: Vec<&str> = rel.split('/').collect();
    let relnode: u32 = file.node.parse().ok()?;
    let (spc, db) = if let Some(ts) = root.strip_prefix("pg_tblspc/") {
        (ts.parse().ok()?, parts.get(1)?.parse().ok()?)
    } else if parts[0] == "global" {
        (GLOBAL_TABLESPACE, 0)
    } else {
        (DEFAULT_TABLESPACE, parts.get(1)?.parse().ok()?)
    };
    let fork: &'static str = match file.fork {
        "" => "",
        "vm" => "vm",
        "fsm" => "fsm",
        _ => "init",
    };
    Some((Locator { spc, db, rel: relnode }, fork, file.segment))
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

/// The byte ranges of the file at (`root`, `rel`), `old` bytes long before the WAL `summary`
/// covers, that the WAL says may have changed: the pages it names, every page at or past a cut,
/// and everything past `old`; `None` for the whole file (not a relation's main fork, a relation
/// made again, or a database made or dropped whole).
pub fn ranges_named(summary: &BlockSummary, root: &str, rel: &str, old: u64) -> Option<Vec<Range<u64>>> {
    let (locator, fork, segno) = locate(root, rel)?;
    if !fork.is_empty() {
        return None;
    }
    if summary.databases.contains(&(locator.spc, locator.db)) {
        return None;
    }
    let first = u64::from(segno) * u64::from(BLOCKS_PER_SEGMENT);
    let page = PAGE_SIZE as u64;
    // Past the old length, every page (the relation grew, maybe without WAL yet).
    let mut from_end = old;
    let mut ranges: Vec<Range<u64>> = Vec::new();
    if let Some(c) = summary.forks.get(&(locator, MAIN)) {
        if let Some(limit) = c.limit {
            let limit = u64::from(limit);
            if limit <= first {
                return None;
            }
            from_end = from_end.min((limit - first) * page);
        }
        for &b in c.blocks.range(first as u32..(first + u64::from(BLOCKS_PER_SEGMENT)).min(u64::from(u32::MAX)) as u32) {
            let at = (u64::from(b) - first) * page;
            match ranges.last_mut() {
                Some(r) if r.end == at => r.end += page,
                _ => ranges.push(at..at + page),
            }
        }
    }
    ranges.retain(|r| r.start < from_end);
    if let Some(last) = ranges.last_mut() {
        last.end = last.end.min(from_end);
    }
    ranges.push(from_end..u64::MAX);
    Some(ranges)
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

/// Blocks named per relation fork in a summary, for reports.
pub fn blocks_named(s: &BlockSummary) -> u64 {
    s.forks.values().map(|c| c.blocks.len() as u64).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::blocksum::ForkChanges;

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
    fn no_record_starts_inside_a_page_header() {
        let seg = 16 << 20;
        assert_eq!(first_record_from(Lsn(0x9D00_0000), seg), Lsn(0x9D00_0028), "a segment's long header");
        assert_eq!(first_record_from(Lsn(0x9D00_2000), seg), Lsn(0x9D00_2018), "a page's short header");
        assert_eq!(first_record_from(Lsn(0x9D00_2060), seg), Lsn(0x9D00_2060));
    }

    #[test]
    fn segments_follow_the_timelines_through_the_history() {
        let seg = 16 << 20;
        // One timeline: the segments from the one holding `from` to the one holding `to - 1`.
        assert_eq!(segments(1, 1, Lsn(3 * seg + 40), Lsn(5 * seg), &[], seg), [(1, 3), (1, 4)]);
        // Timeline 1 left for 2 inside segment 6, 2 left for 3 at the start of segment 9: 1's
        // segments before 6, then 2's from 6 (its copy of 1's WAL up to the branch), then 3's.
        let history = [(1, Lsn(6 * seg + 0x1000)), (2, Lsn(9 * seg))];
        assert_eq!(segments(1, 3, Lsn(4 * seg), Lsn(10 * seg + 1), &history, seg), [(1, 4), (1, 5), (2, 6), (2, 7), (2, 8), (3, 9), (3, 10)]);
        // A parent on 2 skips 1's part of the history; one in the branch's segment starts on 2.
        assert_eq!(segments(2, 3, Lsn(7 * seg), Lsn(9 * seg + 1), &history, seg), [(2, 7), (2, 8), (3, 9)]);
        assert_eq!(segments(1, 2, Lsn(6 * seg + 8), Lsn(7 * seg), &history[..1], seg), [(2, 6)]);
    }

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
