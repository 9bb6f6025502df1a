//! Point-in-time recovery from a repository: pick the newest backup that is consistent before the
//! target, on the target's timeline or one of its ancestors before they parted; restore it; write
//! `restore_command`, the target and `recovery.signal` (or, for a standby, `standby.signal`:
//! [`crate::restore::startup`]), so that `pg_ctl start` replays to the target with no manual step. What can be known before starting is checked here (a target before
//! every backup, past the end of the archive, gaps in the WAL between); the rest PostgreSQL reports.

use std::sync::Arc;

use crate::repo::Repo;
use sheaf_core::restore::DeltaSource;
use sheaf_core::{Error, ErrorKind, Progress, Result, Schemes};

use crate::cluster::lsn::Lsn;
use crate::cluster::walname::{history_name, segment_name, WalFile, WalKind};
use crate::repo::inventory::{archived, missing};
use crate::repo::paths::wal_object;
use crate::repo::records::{chain_of, complete, open_chain, pick, BackupRecord, BackupRef};
use crate::restore::directory::{restore_postgres_chain, PgRestoreOptions, Restored};
use crate::restore::startup::Role;
pub use crate::restore::target::{parse_time, parse_time_as, pg_time, target_from, Recovery, Target, TargetAction, TimelineTarget};
use crate::wal::history::archived_history;

/// A timeline's ancestry from its history file: `(timeline, switch LSN)` for each ancestor,
/// oldest first; the timeline itself runs on from the last switch.
fn ancestry(repo: &Repo, timeline: u32) -> Result<Vec<(u32, Lsn)>> {
    archived_history(repo, timeline)?.ok_or_else(|| {
        Error::new(
            ErrorKind::Incomplete,
            format!("the archive lacks {}, the history of timeline {timeline}: is archive_command set on the promoted server?", history_name(timeline)),
        )
    })
}

/// What recovery will do: the backup, the timeline it ends on, the checks' findings.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Plan {
    /// The backup restored.
    pub backup: BackupRecord,
    /// The timeline recovery follows.
    pub timeline: u32,
    /// The last archived segment recovery can reach.
    pub archive_end: Option<String>,
}

/// Choose the backup for `recovery` among `records` (oldest first), or check the one the user
/// chose, and check that the archive can reach the target.
///
/// # Errors
/// A target before every backup, past the end of the archive, a gap in the WAL from the backup to
/// the target, a timeline the archive does not know; each names the cause and the fix.
pub fn plan(repo: &Repo, records: &[BackupRecord], chosen: Option<&BackupRecord>, recovery: &Recovery) -> Result<Plan> {
    let meta = repo.meta();
    let seg = meta.wal_segment_size;
    let files = archived(repo)?;
    let newest_tli = files.iter().map(|(w, _)| w.timeline).chain(records.iter().map(|r| r.timeline)).max().unwrap_or(1);
    let fits = |r: &BackupRecord| before_target(r, recovery);
    let timeline = match recovery.timeline {
        TimelineTarget::Latest => newest_tli,
        // The timeline of the backup that will be restored, as PostgreSQL reads 'current'.
        TimelineTarget::Current => chosen.or_else(|| records.iter().rev().find(|r| fits(r))).or(records.last()).map_or(1, |r| r.timeline),
        TimelineTarget::Id(t) => t,
    };
    let history = ancestry(repo, timeline)?;
    // A backup on this timeline, or on an ancestor and consistent before the switch away from it.
    let on_path = |r: &BackupRecord| r.timeline == timeline || history.iter().any(|(t, switch)| *t == r.timeline && r.stop_lsn <= *switch);
    let backup = match chosen {
        Some(r) => {
            if !on_path(r) {
                return Err(Error::invalid(format!(
                    "backup {} is on timeline {}, which timeline {timeline} does not descend from at that point: choose another backup, or --target-timeline {}",
                    r.id, r.timeline, r.timeline
                )));
            }
            if !fits(r) {
                return Err(Error::invalid(format!(
                    "backup {} is consistent only at {} (LSN {}), after the target: choose an older backup (sheaf info lists them) or a later target",
                    r.id, r.stop_time, r.stop_lsn
                )));
            }
            r.clone()
        }
        None => match records.iter().rev().find(|r| on_path(r) && fits(r)) {
            Some(r) => r.clone(),
            None => {
                let oldest = records.iter().find(|r| on_path(r));
                return Err(match oldest {
                    None => Error::new(ErrorKind::Incomplete, format!("the repository holds no finished backup on timeline {timeline} or its ancestors: take one with sheaf backup --repo")),
                    Some(o) => Error::invalid(format!(
                        "no backup is consistent before the target: the oldest one ({}) is consistent only at {} (LSN {}); recovery cannot reach an earlier moment. Choose a later target",
                        o.id, o.stop_time, o.stop_lsn
                    )),
                });
            }
        },
    };

    // The archive from the backup's start to its end on the path to `timeline`.
    let start = WalFile::parse(&backup.start_wal, seg).ok_or_else(|| Error::corrupt(format!("backup {}: bad start WAL name {}", backup.id, backup.start_wal)))?;
    let segs_on = |t: u32| files.iter().filter(move |(w, _)| w.kind == WalKind::Segment && w.timeline == t).map(|(w, _)| w.segno);
    let mut path: Vec<(u32, u64, u64)> = Vec::new(); // (timeline, first segno, last segno needed)
    let mut from = start.segno;
    for (t, switch) in history.iter().skip_while(|(t, _)| *t != backup.timeline) {
        // The segment holding the switch is read from the next timeline (which begins in it), so
        // the old one is needed only up to the segment before; its own copy of the switch segment
        // is often archived only as .partial.
        if let Some(last) = switch.segment_number(seg).checked_sub(1) {
            path.push((*t, from, last));
        }
        from = switch.segment_number(seg);
    }
    let end_on_target = segs_on(timeline).max();
    if let Some(end) = end_on_target {
        path.push((timeline, from, end));
    }
    // Recovery that stops as soon as the backup is consistent reads only the backup's own WAL.
    if recovery.target == Target::Immediate {
        if let Some(stop) = WalFile::parse(&backup.stop_wal, seg) {
            path = vec![(backup.timeline, start.segno, stop.segno)];
        }
    }
    let mut gaps = Vec::new();
    for (t, a, b) in &path {
        if a <= b {
            gaps.extend(missing(&files, *t, *a, *b, seg));
        }
    }
    if !gaps.is_empty() && recovery.target != Target::Immediate {
        // Retention's doing (archive retention, or a pin older than what the policy keeps): the
        // backup keeps only the WAL that makes it consistent.
        let stop = WalFile::parse(&backup.stop_wal, seg).map_or(start.segno, |w| w.segno);
        // Only when every segment missing lies between its stop and the horizon: a gap inside
        // its own span, or past the horizon, is damage, said below.
        let retentions = |h: &crate::repo::horizon::Horizon| gaps.iter().all(|g| WalFile::parse(g, seg).is_some_and(|w| w.segno > stop && h.below(w.segno)));
        if let Some(h) = crate::repo::horizon::read(repo)?.filter(|h| h.below(stop + 1) && retentions(h)) {
            let first = records.iter().find(|r| WalFile::parse(&r.start_wal, seg).is_some_and(|w| w.segno >= h.segno));
            return Err(Error::invalid(format!(
                "backup {} is older than the WAL the repository keeps for point-in-time recovery (from {} on: retention-archive, or a pin past the policy): it keeps only the WAL that makes it consistent. Restore it with --target immediate{}",
                backup.id,
                h.first_kept,
                first.map(|r| format!(", or choose a backup from {} on for a later moment", r.id)).unwrap_or_default()
            )));
        }
    }
    if !gaps.is_empty() {
        let shown = format!("{}{}", gaps.iter().take(5).map(String::as_str).collect::<Vec<_>>().join(", "), if gaps.len() > 5 { ", ..." } else { "" });
        let (n, are) = (gaps.len(), if gaps.len() == 1 { " is" } else { "s are" });
        return Err(Error::new(
            ErrorKind::Incomplete,
            if recovery.target == Target::Immediate {
                format!("the archive lacks WAL backup {} needs to become consistent: {n} segment{are} missing ({shown}); choose another backup", backup.id)
            } else {
                format!(
                    "the archive has a gap: {n} segment{are} missing between backup {} and the end of the archive ({shown}); recovery would stop there. Recover to a target before the gap, or take a new backup",
                    backup.id
                )
            },
        ));
    }
    let archive_end = end_on_target.map(|s| segment_name(timeline, s, seg));
    // The archive's end against the target.
    let end_lsn = end_on_target.map_or(Lsn(0), |s| Lsn::at_segment(s + 1, seg)).max(backup.stop_lsn);
    match &recovery.target {
        Target::Lsn(l) if *l > end_lsn => {
            return Err(Error::invalid(format!(
                "the target LSN {} is past the end of the archive ({} ends at {}): recovery would stop short. If the server runs, SELECT pg_switch_wal() archives the current segment; or choose an earlier target",
                l,
                archive_end.as_deref().unwrap_or("the backup"),
                end_lsn
            )))
        }
        Target::Time(text, ms) => {
            // Every record in a segment was written before the segment was archived: a target
            // later than the newest segment's archiving is beyond what the archive holds.
            let newest_ms = match &archive_end {
                Some(n) => {
                    let src = repo.open(&wal_object(n))?;
                    sheaf_core::blob::blob_info(src.as_ref())?.created_unix_ms
                }
                None => backup.stop_ms,
            };
            if *ms > newest_ms {
                return Err(Error::invalid(format!(
                    "the target time {text} is past the end of the archive: its newest segment ({}) was archived at {}, so WAL after that is not in it and recovery would stop short. If the server runs, SELECT pg_switch_wal() archives the current segment; or choose an earlier target",
                    archive_end.as_deref().unwrap_or("none"),
                    sheaf_core::time::utc(newest_ms / 1000)
                )));
            }
        }
        _ => {}
    }
    Ok(Plan { backup, timeline, archive_end })
}

/// What `restore --repo` was asked for, as given: parsed here, in the order the repository is read.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// The backup; by default the newest that is consistent before the target.
    pub set: Option<BackupRef>,
    /// `--target-time`.
    pub time: Option<String>,
    /// `--target-lsn`.
    pub lsn: Option<Lsn>,
    /// `--target-name`.
    pub name: Option<String>,
    /// `--target-xid`.
    pub xid: Option<u64>,
    /// `--target immediate`.
    pub immediate: bool,
    /// `--target-exclusive`.
    pub exclusive: bool,
    /// What the server does at the target.
    pub action: TargetAction,
    /// The timeline to follow.
    pub timeline: TimelineTarget,
}

impl Request {
    /// The recovery asked for.
    ///
    /// # Errors
    /// More than one target, a value that does not parse, `--target-exclusive` with a target that
    /// has no before and after.
    pub fn recovery(&self) -> Result<Recovery> {
        let target = target_from(self.time.as_deref(), self.lsn, self.name.as_deref(), self.xid, self.immediate)?;
        if self.exclusive && !matches!(target, Target::Time(..) | Target::Lsn(_) | Target::Xid(_)) {
            return Err(Error::invalid("--target-exclusive stops just before a --target-time, --target-lsn or --target-xid: a restore point or `immediate` has no before"));
        }
        Ok(Recovery { target, action: self.action, timeline: self.timeline, inclusive: !self.exclusive })
    }
}

/// Restore from the repository for point-in-time recovery: choose the backup ([`plan`]), open its
/// stripes and check they hold the backup its record names, restore it, and write the recovery
/// settings with the `restore_command` the restored server will run. That command is built after
/// the checks and before the long restore: a restored cluster without its recovery settings
/// would not recover. `opts.startup.role` says a standby ([`Role::Standby`], which then stops at
/// the target if there is one); anything else recovers to the target and does its action.
///
/// # Errors
/// A backup or target the repository cannot serve ([`plan`]), stripes that hold another backup
/// ([`ErrorKind::Corrupt`]: the repository is damaged), `restore_command`'s error, and everything
/// [`restore_postgres`] refuses.
pub fn restore(
    repo: &Repo,
    schemes: &dyn Schemes,
    request: &Request,
    opts: &PgRestoreOptions,
    restore_command: impl FnOnce() -> Result<String>,
    progress: Arc<dyn Progress>,
) -> Result<(Restored, Plan)> {
    crate::repo::meta::postgres_only(repo, "point-in-time recovery of a PostgreSQL cluster")?;
    let recovery = request.recovery()?;
    // The history that holds the backup asked for, or the newest whose backups and WAL serve the
    // target (after pg_upgrade, a moment before the upgrade is the old cluster's).
    let (repo, (records, plan)) = crate::repo::histories::first_serving(
        repo,
        |h| {
            let records = complete(h)?;
            let chosen = match &request.set {
                Some(which) => match pick(&records, which) {
                    Ok(r) => Some(r),
                    Err(_) => return Ok(None),
                },
                None if !holds_one_for(&records, &recovery) => return Ok(None),
                None => None,
            };
            let plan = plan(h, &records, chosen, &recovery)?;
            Ok(Some((records, plan)))
        },
        // No history holds it: the newest says why, as a repository never upgraded would.
        |newest| match complete(newest).and_then(|records| {
            let chosen = request.set.as_ref().map(|which| pick(&records, which)).transpose()?;
            plan(newest, &records, chosen, &recovery).map(drop)
        }) {
            Err(e) => e,
            Ok(()) => Error::invalid("no history of the repository serves this restore"),
        },
    )?;
    let repo = &repo;
    let meta = repo.meta();
    // An incremental restores through its chain: every set of it opened and checked first.
    let sets = open_chain(repo, &records, &plan.backup, schemes, true)?;
    for (set, r) in sets.iter().zip(chain_of(&records, &plan.backup)?) {
        if set.manifest.backup_id != r.backup_id {
            return Err(Error::corrupt(format!(
                "backup {}: its stripes hold backup {}, its record says {} (the repository is damaged)",
                r.id, set.manifest.backup_id, r.backup_id
            )));
        }
    }
    let mut opts = opts.clone();
    opts.startup.restore_command = Some(restore_command()?);
    opts.startup.role = match &opts.startup.role {
        Role::Standby(up, _) => Role::Standby(up.clone(), (recovery.target != Target::End).then(|| recovery.clone())),
        _ => Role::Recover(recovery),
    };
    if opts.core.delta && !opts.delta_hash {
        crate::restore::directory::same_cluster(opts.target(), meta.system_identifier)?;
        let source = crate::restore::delta::plan(repo, &records, &plan.backup, opts.target())?;
        if opts.check_changes && source.changes.is_none() {
            return Err(Error::invalid(format!("--check-changes compares what the WAL says changed with the target, but the WAL cannot say here: {}", source.how)));
        }
        opts.core.delta_source = DeltaSource { check: opts.check_changes, ..source };
    }
    let restored = restore_postgres_chain(&sets.iter().collect::<Vec<_>>(), &opts, progress)?;
    if let Some(d) = restored.report.delta.as_ref().filter(|d| d.missed > 0) {
        return Err(Error::corrupt(format!(
            "--check-changes: the target differed from the backup in {} block(s) that the WAL summaries did not name (the restore itself is whole: it hashed the target, and wrote them): {}",
            d.missed,
            d.misses.iter().take(5).cloned().collect::<Vec<_>>().join("; ")
        )));
    }
    Ok((restored, plan))
}

/// Whether `records` hold a backup a restore without `--set` could start from for `recovery`: one
/// at all, and for a time or LSN target one consistent before it ([`plan`] decides the rest). After
/// pg_upgrade, a history that holds none is passed over for the older one.
fn holds_one_for(records: &[BackupRecord], recovery: &Recovery) -> bool {
    records.iter().any(|r| before_target(r, recovery))
}

/// Whether backup `r` is consistent before `recovery`'s target (any target but a time or an LSN
/// takes any backup).
fn before_target(r: &BackupRecord, recovery: &Recovery) -> bool {
    match &recovery.target {
        // Stopping just before the target needs a backup consistent strictly before it.
        Target::Time(_, ms) => r.stop_ms < *ms || (recovery.inclusive && r.stop_ms == *ms),
        Target::Lsn(l) => r.stop_lsn < *l || (recovery.inclusive && r.stop_lsn == *l),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusive_only_where_there_is_a_before() {
        let r = |name: Option<&str>, xid: Option<u64>| Request { name: name.map(String::from), xid, exclusive: true, ..Request::default() }.recovery();
        assert!(!r(None, Some(900)).unwrap().inclusive);
        assert!(r(Some("before_migration"), None).unwrap_err().to_string().contains("has no before"));
        assert!(r(None, None).is_err(), "no target: nothing to stop before");
    }
}
