//! Point-in-time recovery from a repository: pick the newest backup that is consistent before the
//! target, on the target's timeline or one of its ancestors before they parted; restore it; write
//! `restore_command`, the target and `recovery.signal`, so that `pg_ctl start` replays to the
//! target with no manual step. What can be known before starting is checked here (a target before
//! every backup, past the end of the archive, gaps in the WAL between); the rest PostgreSQL reports.

use std::path::Path;

use std::sync::Arc;

use crate::repo::Repo;
use sheaf_core::restore::DeltaSource;
use sheaf_core::{Error, ErrorKind, Progress, RestoreReport, Result, Schemes};

use crate::cluster::lsn::Lsn;
use crate::cluster::walname::{history_name, segment_name, WalFile, WalKind};
use crate::repo::inventory::{archived, missing};
use crate::repo::paths::wal_object;
use crate::repo::records::{chain_of, complete, open_chain, pick, BackupRecord, BackupRef};
use crate::restore::directory::{restore_postgres_chain, PgRestoreOptions};
use crate::wal::history::archived_history;

/// Where recovery stops.
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    /// The end of the archive.
    End,
    /// As soon as the backup is consistent.
    Immediate,
    /// A moment: the text as given (PostgreSQL reads it) and milliseconds since the epoch.
    Time(String, i64),
    /// An LSN.
    Lsn(Lsn),
    /// A restore point made with `pg_create_restore_point`.
    Name(String),
}

/// What a restored cluster does at its recovery target (PostgreSQL's `recovery_target_action`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum TargetAction {
    /// End recovery and accept writes.
    #[default]
    Promote,
    /// Pause there, for a look before promoting by hand.
    Pause,
    /// Stop the server there.
    Shutdown,
}

impl TargetAction {
    /// PostgreSQL's word for it.
    pub fn as_pg(self) -> &'static str {
        match self {
            TargetAction::Promote => "promote",
            TargetAction::Pause => "pause",
            TargetAction::Shutdown => "shutdown",
        }
    }
}

/// The timeline recovery follows (PostgreSQL's `recovery_target_timeline`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TimelineTarget {
    /// The newest the archive holds.
    #[default]
    Latest,
    /// The restored backup's own.
    Current,
    /// This one.
    Id(u32),
}

impl std::str::FromStr for TimelineTarget {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim() {
            "latest" => Ok(TimelineTarget::Latest),
            "current" => Ok(TimelineTarget::Current),
            n => match n.parse::<u32>() {
                Ok(t) if t >= 1 => Ok(TimelineTarget::Id(t)),
                _ => Err(Error::invalid(format!("timeline '{n}': give latest, current or a timeline number (1 or more)"))),
            },
        }
    }
}

impl std::fmt::Display for TimelineTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TimelineTarget::Latest => f.write_str("latest"),
            TimelineTarget::Current => f.write_str("current"),
            TimelineTarget::Id(t) => write!(f, "{t}"),
        }
    }
}

/// How to recover.
#[derive(Clone, Debug)]
pub struct Recovery {
    /// Where to stop.
    pub target: Target,
    /// What the server does once there.
    pub action: TargetAction,
    /// The timeline to follow.
    pub timeline: TimelineTarget,
}

/// Parse `2026-11-22 10:15:00+00`, `2026-11-22T10:15:00.123Z`, `... UTC`, `... +01:00`, into
/// milliseconds since the epoch. A zone is required: without one the server's own zone would
/// decide, which sheaf cannot know.
///
/// # Errors
/// What is wrong with the text, with an example.
pub fn parse_time(text: &str) -> Result<i64> {
    parse_time_as("--target-time", text)
}

/// [`parse_time`], its errors naming `flag`.
///
/// # Errors
/// As [`parse_time`].
pub fn parse_time_as(flag: &str, text: &str) -> Result<i64> {
    sheaf_core::time::parse_instant(text).map_err(|why| Error::invalid(format!("{flag} '{text}': {why}; write e.g. '2026-11-22 10:15:00+00' or '2026-11-22T10:15:00.5Z'")))
}

/// Milliseconds since the epoch as PostgreSQL reads a UTC time: `2026-11-22 10:15:00.250+00`.
pub fn pg_time(ms: i64) -> String {
    sheaf_core::time::utc_ms(ms)
}

/// Parse a target from the flags' values: at most one of them.
///
/// # Errors
/// More than one target, or a value that does not parse.
pub fn target_from(time: Option<&str>, lsn: Option<Lsn>, name: Option<&str>, immediate: bool) -> Result<Target> {
    let n = usize::from(time.is_some()) + usize::from(lsn.is_some()) + usize::from(name.is_some()) + usize::from(immediate);
    if n > 1 {
        return Err(Error::invalid("give one recovery target: --target-time, --target-lsn, --target-name or --target immediate"));
    }
    Ok(match (time, lsn, name) {
        (Some(t), _, _) => Target::Time(t.to_string(), parse_time(t)?),
        (_, Some(l), _) => Target::Lsn(l),
        (_, _, Some(n)) if n.is_empty() || n.contains('\0') => return Err(Error::invalid("--target-name: give the name given to pg_create_restore_point")),
        (_, _, Some(n)) => Target::Name(n.to_string()),
        _ if immediate => Target::Immediate,
        _ => Target::End,
    })
}

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
    let fits = |r: &BackupRecord| match &recovery.target {
        Target::Time(_, ms) => r.stop_ms <= *ms,
        Target::Lsn(l) => r.stop_lsn <= *l,
        _ => true,
    };
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
    /// `--target immediate`.
    pub immediate: bool,
    /// What the server does at the target.
    pub action: TargetAction,
    /// The timeline to follow.
    pub timeline: TimelineTarget,
}

/// Restore from the repository for point-in-time recovery: choose the backup ([`plan`]), open its
/// stripes and check they hold the backup its record names, restore it, and write the recovery
/// settings with the `restore_command` the restored server will run. That command is built after
/// the checks and before the long restore: a restored cluster without its recovery settings
/// would not recover.
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
) -> Result<(RestoreReport, Plan)> {
    let meta = repo.meta();
    let records = complete(repo)?;
    let chosen = request.set.as_ref().map(|which| pick(&records, which)).transpose()?;
    let target = target_from(request.time.as_deref(), request.lsn, request.name.as_deref(), request.immediate)?;
    let recovery = Recovery { target, action: request.action, timeline: request.timeline };
    let plan = plan(repo, &records, chosen, &recovery)?;
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
    let command = restore_command()?;
    let mut opts = opts.clone();
    if opts.core.delta && !opts.delta_hash {
        crate::restore::directory::same_cluster(opts.target(), meta.system_identifier)?;
        let source = crate::restore::delta::plan(repo, &records, &plan.backup, opts.target())?;
        if opts.check_changes && source.changes.is_none() {
            return Err(Error::invalid(format!("--check-changes compares what the WAL says changed with the target, but the WAL cannot say here: {}", source.how)));
        }
        opts.core.delta_source = DeltaSource { check: opts.check_changes, ..source };
    }
    let report = restore_postgres_chain(&sets.iter().collect::<Vec<_>>(), &opts, progress)?;
    write_recovery(opts.target(), &command, &recovery)?;
    if let Some(d) = report.delta.as_ref().filter(|d| d.missed > 0) {
        return Err(Error::corrupt(format!(
            "--check-changes: the target differed from the backup in {} block(s) that the WAL summaries did not name (the restore itself is whole: it hashed the target, and wrote them): {}",
            d.missed,
            d.misses.iter().take(5).cloned().collect::<Vec<_>>().join("; ")
        )));
    }
    Ok((report, plan))
}

/// Write the recovery settings into `data`'s postgresql.auto.conf and create recovery.signal.
///
/// # Errors
/// I/O errors naming the file.
pub fn write_recovery(data: &Path, restore_command: &str, recovery: &Recovery) -> Result<()> {
    let lit = |s: &str| format!("'{}'", s.replace('\'', "''"));
    let mut conf = format!("restore_command = {}\nrecovery_target_timeline = {}\n", lit(restore_command), lit(&recovery.timeline.to_string()));
    match &recovery.target {
        Target::End => {}
        Target::Immediate => conf.push_str("recovery_target = 'immediate'\n"),
        // Normalised to UTC: the server parses it, and takes fewer spellings than sheaf does.
        Target::Time(_, ms) => conf.push_str(&format!("recovery_target_time = {}\n", lit(&pg_time(*ms)))),
        Target::Lsn(l) => conf.push_str(&format!("recovery_target_lsn = {}\n", lit(&l.to_string()))),
        Target::Name(n) => conf.push_str(&format!("recovery_target_name = {}\n", lit(n))),
    }
    if recovery.target != Target::End {
        conf.push_str(&format!("recovery_target_action = {}\n", lit(recovery.action.as_pg())));
    }
    crate::cluster::conf::append_settings(data, "recovery from the repository (remove after recovery ends)", &conf)?;
    let io = |p: &Path, e: std::io::Error| Error::io(ErrorKind::Target, format!("cannot write {}", p.display()), e);
    let signal = data.join("recovery.signal");
    std::fs::File::create(&signal).and_then(|f| f.sync_all()).map_err(|e| io(&signal, e))?;
    // Restored as root, the data directory belongs to the server's user: so must the signal.
    if let Ok(m) = std::fs::metadata(data) {
        use std::os::unix::fs::MetadataExt;
        let _ = std::os::unix::fs::chown(&signal, Some(m.uid()), Some(m.gid()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_name_their_flag() {
        assert_eq!(parse_time("2026-11-21 11:30:45+01:00").unwrap(), 1_795_257_045_000);
        let e = parse_time_as("--until", "2026-11-21 10:30:45").unwrap_err().to_string();
        assert!(e.contains("--until '2026-11-21 10:30:45'") && e.contains("zone") && e.contains("write e.g."), "{e}");
        assert_eq!(pg_time(1_795_257_045_250), "2026-11-21 10:30:45.250+00");
        assert_eq!(parse_time(&pg_time(1_795_257_045_250)).unwrap(), 1_795_257_045_250);
    }

    #[test]
    fn one_target_at_most() {
        assert!(target_from(Some("2026-11-21 10:30:45Z"), Some(Lsn(1)), None, false).is_err());
        assert_eq!(target_from(None, Some(Lsn((1 << 32) | 0xA0)), None, false).unwrap(), Target::Lsn(Lsn((1 << 32) | 0xA0)));
        assert_eq!(target_from(None, None, None, false).unwrap(), Target::End);
    }
}
