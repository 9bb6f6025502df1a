//! `restore --delta` from what the WAL says changed, as `pg_rewind` decides what to copy: when the
//! target is a copy of this cluster whose state the repository can place (a restore of one of its
//! backups never started, a standby, a former primary shut down cleanly), the blocks that can
//! differ between it and the backup are those the repository's WAL summaries name between the
//! lower of the target's redo point and the backup's start and the higher of where the target's
//! pages may reach and the backup's end, following the timelines; for a target that ran on past
//! the point where the backup's timeline left its own (a former primary after a promotion
//! elsewhere), also those its own WAL names from there, read from the repository or its
//! `pg_wal`. Those blocks, every file that is not a relation's main fork, and files made, dropped
//! or cut in the range are written; nothing else is read or written.
//!
//! Where that cannot be decided, the delta restore hashes the target (the core's path), and the
//! report says why: a target not shut down cleanly, a gap in the summaries, timelines that do not
//! lead to each other, or a former primary that diverged with neither page checksums nor
//! `wal_log_hints` (its hint bits were set without WAL, and may refer to transactions the
//! backup's history never committed).

use std::fs;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::repo::Repo;
use sheaf_core::restore::DeltaSource;
use sheaf_core::{Changes, FileChanges, Result};

use crate::cluster::control::{Control, DbState};
use crate::cluster::label::BackupLabel;
use crate::cluster::lsn::Lsn;
use crate::repo::records::BackupRecord;
use crate::wal::blocksum::BlockSummary;
use crate::wal::changes::{blocks_named, changes_since, ranges_named};

/// Where a target's pages stand: every page holds at least the changes before `low` and none
/// after `high`, on `timeline` (where `high` lies).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Standing {
    what: String,
    timeline: u32,
    low: Lsn,
    high: Lsn,
}

/// Where the target in `data` stands, from its `backup_label` (a restore never started: its pages
/// are those of the backup the repository lists with that start) or its `pg_control`; `Err` says
/// why that cannot be told.
fn standing(data: &Path, control: &Control, records: &[BackupRecord]) -> std::result::Result<Standing, String> {
    if let Ok(label) = fs::read_to_string(data.join("backup_label")) {
        let BackupLabel { start_lsn: start, timeline, .. } = BackupLabel::parse(&label).map_err(|e| format!("its {}", e.message()))?;
        // Backups taken on a standby between two of its restartpoints share a start: the one
        // that ended last bounds them all.
        let r = records.iter().filter(|r| r.start_lsn == start && r.timeline == timeline).max_by_key(|r| r.stop_lsn).ok_or_else(|| {
            format!(
                "it holds the backup_label of a backup that started at {start} on timeline {timeline}, which the repository does not list, so where its pages reach is not known"
            )
        })?;
        return Ok(Standing { what: format!("a restore of backup {} never started", r.id), timeline, low: start, high: r.stop_lsn });
    }
    match control.state {
        DbState::ShutDown => Ok(Standing { what: format!("a primary shut down cleanly at {}", control.checkpoint), timeline: control.timeline, low: control.redo, high: control.checkpoint }),
        DbState::ShutDownInRecovery | DbState::InArchiveRecovery => {
            if control.backup_start != Lsn(0) && control.backup_end == Lsn(0) {
                return Err(format!("it was recovering from a backup that started at {} and had not reached that backup's end", control.backup_start));
            }
            let high = control.min_recovery.max(control.checkpoint).max(control.backup_end);
            let timeline = control.timeline.max(control.min_recovery_timeline);
            Ok(Standing { what: format!("a standby {} with pages up to {high}", control.state), timeline, low: control.redo, high })
        }
        DbState::Other(_) => Err(format!(
            "it was not shut down cleanly (its pg_control says {}), so its pages may hold changes up to any point of its WAL: start it and stop it cleanly (pg_ctl start, then pg_ctl stop -m fast), or accept the hashing",
            control.state
        )),
    }
}

/// A timeline's history file as text: from the repository, else from `pg_wal` in `data`.
fn history_text(repo: &Repo, data: &Path, timeline: u32) -> Result<Option<String>> {
    let name = crate::cluster::walname::history_name(timeline);
    Ok(crate::wal::history::archived_history_text(repo, timeline)?.or_else(|| fs::read_to_string(data.join("pg_wal").join(name)).ok()))
}

/// What differs between a target and a backup, by the union of the WAL summaries of the ranges
/// that can hold a difference.
pub struct WalDelta {
    summaries: Vec<BlockSummary>,
}

impl Changes for WalDelta {
    fn of(&self, root: &str, rel: &str, size: u64) -> FileChanges {
        let mut all: Vec<Range<u64>> = Vec::new();
        for s in &self.summaries {
            let Some(r) = ranges_named(s, root, rel, size) else { return FileChanges::Whole };
            all.extend(r);
        }
        // Sorted and disjoint, as the core takes them.
        all.sort_unstable_by_key(|r| r.start);
        let mut out: Vec<Range<u64>> = Vec::with_capacity(all.len());
        for r in all {
            match out.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => out.push(r),
            }
        }
        FileChanges::Ranges(out)
    }
}

/// A span of WAL to summarize: from (timeline, LSN), to (timeline, LSN), and the history file of
/// the latter where the timelines differ.
type Span = ((u32, Lsn), (u32, Lsn), Option<String>);

/// How `restore --delta` of `backup` into `target` finds what differs: from the repository's WAL
/// summaries where they can say (see the module's notes), else by hashing, with the reason.
///
/// # Errors
/// The repository's errors. Every reason the WAL cannot decide is a fallback, not an error.
pub fn plan(repo: &Repo, records: &[BackupRecord], backup: &BackupRecord, target: &Path) -> Result<DeltaSource> {
    let hash = |why: String| Ok(DeltaSource { changes: None, how: format!("every chunk compared with the target by its hash, because {why}"), check: false });
    if !target.join("global/pg_control").exists() {
        return hash("the target holds no data directory yet (everything is created)".into());
    }
    let control = match Control::read(target) {
        Ok(c) => c,
        Err(why) => return hash(format!("the target's pg_control cannot be used: {why}")),
    };
    let stand = match standing(target, &control, records) {
        Ok(s) => s,
        Err(why) => return hash(format!("the target cannot be placed: {why}")),
    };
    let local = |name: &str| -> Result<Option<PathBuf>> {
        let p = target.join("pg_wal").join(name);
        Ok(p.is_file().then_some(p))
    };
    let (start, stop, tl) = (backup.start_lsn, backup.stop_lsn, backup.timeline);
    let hints = control.checksums || control.wal_log_hints;
    let unhinted = |split: Lsn| {
        hash(format!(
            "the target ran on timeline {t} past {split}, where its history and the backup's timeline {tl} part, and has neither page checksums nor wal_log_hints: its hint bits were set without WAL, and may name transactions that never committed in the backup's history (pg_rewind's rule)",
            t = stand.timeline
        ))
    };
    let mut spans: Vec<Span> = Vec::new();
    let t = stand.timeline;
    if t == tl {
        spans.push(((tl, stand.low.min(start)), (tl, stand.high.max(stop)), None));
    } else {
        let theirs = history_text(repo, target, tl)?;
        let ours = history_text(repo, target, t)?;
        let left =
            |history: &Option<String>, of: u32| history.as_deref().map(crate::cluster::walname::parse_history).and_then(|h| h.iter().find(|(x, _)| *x == of).map(|(_, at)| *at));
        if let Some(split) = left(&theirs, t) {
            // The target's timeline is an ancestor of the backup's, left at `split`.
            if stand.high <= split {
                spans.push(((t, stand.low.min(start)), (tl, stop.max(stand.high)), theirs));
            } else if !hints {
                return unhinted(split);
            } else {
                let from = stand.low.min(start).min(split);
                spans.push(((t, from), (tl, stop), theirs));
                // What the target wrote after the split, from its own WAL.
                spans.push(((t, split), (t, stand.high), None));
            }
        } else if let Some(split) = left(&ours, tl) {
            // The backup's timeline is an ancestor of the target's, left at `split`.
            if stop <= split {
                spans.push(((tl, stand.low.min(start)), (t, stand.high.max(stop)), ours));
            } else if !hints {
                return unhinted(split);
            } else {
                // Both ran on after the split: the backup's side, and what the target wrote on
                // its own timeline.
                spans.push(((tl, stand.low.min(start).min(split)), (tl, stop), None));
                spans.push(((tl, split), (t, stand.high), ours));
            }
        } else {
            return hash(format!(
                "the target is on timeline {t} and the backup on {tl}, and neither timeline's history (in the repository or the target's pg_wal) leads to the other"
            ));
        }
    }
    let mut summaries = Vec::new();
    let mut named = 0;
    let mut said = Vec::new();
    for (from, to, history) in spans {
        match changes_since(repo, from, to, history.as_deref(), &local)? {
            Ok(s) => {
                named += blocks_named(&s);
                said.push(if from.0 == to.0 {
                    format!("{} .. {} on timeline {}", from.1, to.1, to.0)
                } else {
                    format!("{} on timeline {} .. {} on timeline {}", from.1, from.0, to.1, to.0)
                });
                summaries.push(s);
            }
            Err(why) => return hash(format!("the WAL summaries cannot say what changed: {why}")),
        }
    }
    Ok(DeltaSource {
        changes: Some(Arc::new(WalDelta { summaries })),
        how: format!("WAL summaries: {named} blocks named in {} (the target: {})", said.join(" and "), stand.what),
        check: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::control::sample;

    #[test]
    fn a_standby_reaches_its_minimum_recovery_point_and_an_unclean_primary_cannot_be_placed() {
        let d = tempfile::tempdir().unwrap();
        let c = Control::parse(&sample(1800, 5, true)).unwrap();
        let s = standing(d.path(), &c, &[]).unwrap();
        assert_eq!((s.timeline, s.low, s.high), (3, Lsn(0x0300_0028), Lsn(0x0400_0000)));
        let c = Control::parse(&sample(1800, 6, true)).unwrap();
        assert!(standing(d.path(), &c, &[]).unwrap_err().contains("not shut down cleanly"));
        let c = Control::parse(&sample(1800, 1, true)).unwrap();
        let s = standing(d.path(), &c, &[]).unwrap();
        assert_eq!((s.timeline, s.low, s.high), (2, Lsn(0x0300_0028), Lsn(0x0300_0060)));
        // A restore never started: its backup_label names a backup the repository must list.
        fs::write(d.path().join("backup_label"), "START WAL LOCATION: 0/5000028 (file 000000010000000000000005)\nCHECKPOINT LOCATION: 0/5000060\nSTART TIMELINE: 1\n").unwrap();
        assert!(standing(d.path(), &c, &[]).unwrap_err().contains("does not list"));
    }

    #[test]
    fn several_summaries_give_the_union_of_their_ranges() {
        use crate::wal::blocksum::{ForkChanges, MAIN};
        use crate::wal::read::Locator;
        let t = Locator { spc: 1663, db: 5, rel: 16384 };
        let one = |blocks: &[u32]| {
            let mut s = BlockSummary::default();
            s.forks.insert((t, MAIN), ForkChanges { limit: None, blocks: blocks.iter().copied().collect() });
            s
        };
        let p = 8192u64;
        let w = WalDelta { summaries: vec![one(&[1, 2]), one(&[2, 3, 7])] };
        match w.of("", "base/5/16384", 10 * p) {
            FileChanges::Ranges(r) => assert_eq!(r, vec![p..4 * p, 7 * p..8 * p, 10 * p..u64::MAX]),
            other => panic!("{other:?}"),
        }
        assert!(matches!(w.of("", "base/5/16384_vm", p), FileChanges::Whole));
        assert!(matches!(w.of("", "global/pg_control", p), FileChanges::Whole));
    }
}
