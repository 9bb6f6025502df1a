//! What the WAL says changed between two positions, from its block summaries
//! ([`changes_since`]): the summaries of every segment in the range, merged in LSN order and
//! checked to follow each other without a gap (segments not yet archived summarized from pg_wal
//! on the spot), or why they cannot vouch for the range; and, from a merged summary, the byte
//! ranges of each relation file it names ([`ranges_named`]). Backups ([`crate::backup::changes`])
//! and delta restores ([`crate::restore::delta`]) both decide what to copy from here.

use std::ops::Range;
use std::path::PathBuf;

use crate::repo::Repo;
use sheaf_core::Result;

use crate::cluster::checksum::PAGE_SIZE;
use crate::cluster::layout::{self, BLOCKS_PER_SEGMENT};
use crate::cluster::lsn::Lsn;
use crate::cluster::walname::segment_name;
use crate::wal::blocksum::{BlockSummary, MAIN};
use crate::wal::read::Locator;
use crate::wal::summarize::{read_summary, summarize_from};

/// PostgreSQL's default tablespace (`base/`) and the shared one (`global/`).
pub const DEFAULT_TABLESPACE: u32 = 1663;
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
    (parent_timeline, from): (u32, Lsn),
    (timeline, to): (u32, Lsn),
    history: Option<&str>,
    pg_wal: &LocalWal<'_>,
) -> Result<std::result::Result<BlockSummary, String>> {
    let meta = repo.meta();
    let seg = meta.wal_segment_size;
    let history = history.map(crate::cluster::walname::parse_history).unwrap_or_default();
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
                summarize_from(repo, &name, local.as_deref(), archived, after, pg_wal)?
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
    match (at.0 % seg, at.0 % crate::wal::read::PAGE as u64) {
        (0, _) => Lsn(at.0 + 40),
        (_, 0) => Lsn(at.0 + 24),
        _ => at,
    }
}

/// A WAL segment not archived yet, by name, as a file on this host (pg_wal's, or a copy of the
/// agent's host's); `None` where the cluster has none.
pub type LocalWal<'a> = dyn Fn(&str) -> Result<Option<PathBuf>> + 'a;

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

/// Blocks named per relation fork in a summary, for reports.
/// Blocks named per relation fork in a summary, for reports.
pub fn blocks_named(s: &BlockSummary) -> u64 {
    s.forks.values().map(|c| c.blocks.len() as u64).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
