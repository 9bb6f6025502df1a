//! Retention: what `sheaf expire` removes, by policy ([`plan_expire`]) or one backup named
//! ([`plan_remove`]), and removing it in an order a crash midway cannot hurt ([`expire`]). Never
//! the newest finished backup, nor WAL a kept backup needs, nor a backup that a kept or running
//! incremental builds on; history files always stay; a backup still being written is left alone.
//! Archive retention ([`Retention::keep_archive`]) keeps point-in-time recovery for the newest
//! fulls only: older kept backups keep the WAL that makes them consistent, as pinned ones do.

use crate::repo::Repo;
use serde::Serialize;
use sheaf_core::manifest::BackupType;
use sheaf_core::{Error, Result};

use crate::cluster::walname::{WalFile, WalKind};
use crate::repo::id::BackupId;
use crate::repo::inventory::archived;
use crate::repo::paths;
use crate::repo::records::{backups, complete, BackupRecord, Found};

/// What to keep and what to remove.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ExpirePlan {
    /// Backups kept.
    pub kept: Vec<BackupId>,
    /// Finished backups removed.
    pub removed: Vec<BackupId>,
    /// Unfinished backups removed (left by a crash).
    pub unfinished: Vec<BackupId>,
    /// Unfinished backups left alone because their writer still runs.
    pub running: Vec<BackupId>,
    /// WAL files removed.
    pub wal_removed: u64,
    /// Their bytes.
    pub wal_bytes: u64,
    /// First WAL segment kept (the oldest kept backup's start).
    pub wal_kept_from: Option<String>,
    /// The same, understood: the retention horizon [`expire`] raises before removing WAL.
    #[serde(skip)]
    pub horizon: Option<WalFile>,
    /// Backups kept because they are pinned (`sheaf keep`), with until when.
    pub pinned: Vec<String>,
    /// Kept backups older than what archive retention keeps WAL for: each keeps only the WAL
    /// that makes it consistent, no point-in-time recovery past it.
    pub consistent_only: Vec<BackupId>,
    /// Backups the policy would remove, left because their objects are still locked (S3 Object
    /// Lock), with until when.
    pub locked: Vec<String>,
    /// Old WAL files left because they are still locked.
    pub wal_locked: u64,
    /// Until when the last of them stays locked (seconds since the epoch).
    pub wal_locked_until: Option<i64>,
    /// Backups the policy keeps whose lock has run out: anyone with the repository's credentials
    /// can delete them now (a lock shorter than what the policy keeps).
    pub unprotected: Vec<BackupId>,
    /// Objects removed (or that would be, on a dry run).
    pub objects: Vec<String>,
    /// Bytes removed.
    pub bytes: u64,
}

/// Retention: how much to keep.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Retention {
    /// Keep the newest N full backups and the backups that build on them.
    pub keep_full: Option<usize>,
    /// Keep what recovers to any moment in the last this many seconds: the backups that end
    /// inside it and the newest one before it.
    pub keep_within: Option<i64>,
    /// Keep the WAL for point-in-time recovery from the start of the newest N full backups kept
    /// on; an older kept backup keeps only its own span, the WAL that makes it consistent.
    /// `None`: from the oldest backup kept.
    pub keep_archive: Option<usize>,
}

impl Retention {
    /// Whether it says which backups to keep (archive retention alone removes WAL, not backups).
    fn names_backups(&self) -> bool {
        self.keep_full.is_some() || self.keep_within.is_some()
    }
}

/// What the histories newer than the one being expired hold (after pg_upgrade a repository has
/// one per cluster, [`crate::repo::histories`]): retention counts across them, so that an older
/// history keeps only what the policy keeps of it as a whole, and goes entirely once it keeps
/// nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct Later {
    /// Finished backups there: the newest finished backup, which expire never removes, is there.
    pub any: bool,
    /// Finished full backups there (all newer than this history's: the first of the newest N).
    pub fulls: usize,
    /// Those of them kept (archive retention anchors on the Nth newest kept).
    pub fulls_kept: usize,
    /// One of them ends before `keep_within`'s window: it, not one here, is the newest before it.
    pub before_edge: bool,
}

/// One history's plan ([`plan_all`]).
#[derive(Debug)]
pub struct HistoryPlan {
    /// The history, opened.
    pub history: crate::repo::histories::History,
    /// What goes from it.
    pub plan: ExpirePlan,
}

/// Plan retention for every history of the repository (one, unless it went through pg_upgrade),
/// newest first so that older ones count what newer ones keep ([`Later`]); returned oldest first.
///
/// # Errors
/// As [`plan_expire`], for any history.
pub fn plan_all(repo: &Repo, keep: &Retention, now: i64) -> Result<Vec<HistoryPlan>> {
    let mut later = Later::default();
    let mut out = Vec::new();
    for history in crate::repo::histories::all(repo)?.into_iter().rev() {
        let plan = plan_expire_in(&history.repo, keep, now, &later)?;
        let found = backups(&history.repo)?;
        let done: Vec<&BackupRecord> = found.iter().filter_map(Found::record).collect();
        let fulls = || done.iter().filter(|r| r.backup_type == BackupType::Full);
        later.any |= !done.is_empty();
        later.fulls += fulls().count();
        later.fulls_kept += fulls().filter(|r| plan.kept.contains(&r.id)).count();
        later.before_edge |= keep.keep_within.is_some_and(|w| done.iter().any(|r| r.stop_unix < now - w));
        out.push(HistoryPlan { history, plan });
    }
    out.reverse();
    Ok(out)
}

/// Plan `expire --set ID` ([`plan_remove`]) in the history holding the backup; the other histories
/// are not touched.
///
/// # Errors
/// As [`plan_remove`].
pub fn plan_remove_all(repo: &Repo, id: &str, keep: &Retention, now: i64) -> Result<Vec<HistoryPlan>> {
    let all = crate::repo::histories::all(repo)?;
    let holder = crate::repo::histories::with_backup(repo, id)?;
    let mut later = Later::default();
    for h in all.iter().rev() {
        if h.number == holder.meta().history {
            let plan = plan_remove_in(&h.repo, id, keep, now, &later)?;
            return Ok(vec![HistoryPlan { history: h.clone(), plan }]);
        }
        later.any |= !complete(&h.repo)?.is_empty();
    }
    let plan = plan_remove_in(&holder, id, keep, now, &later)?;
    Ok(vec![HistoryPlan { history: crate::repo::histories::History { number: holder.meta().history, repo: holder }, plan }])
}

/// Decide what `expire` removes by policy. Never the newest finished backup, nor WAL a kept
/// backup needs (from the oldest kept backup's start onwards, every timeline; with archive
/// retention, from the start of the newest N fulls kept, older ones keeping their own span);
/// history files always stay.
///
/// # Errors
/// No retention given; the repository cannot be read.
pub fn plan_expire(repo: &Repo, keep: &Retention, now: i64) -> Result<ExpirePlan> {
    plan_expire_in(repo, keep, now, &Later::default())
}

/// [`plan_expire`] of one history, given what newer histories hold.
fn plan_expire_in(repo: &Repo, keep: &Retention, now: i64, later: &Later) -> Result<ExpirePlan> {
    let meta = repo.meta();
    if !keep.names_backups() && keep.keep_archive.is_none() {
        return Err(Error::invalid(
            "say what to keep: --keep-full N (the newest N full backups), --keep-within DURATION (e.g. 14d) and/or --keep-archive N (WAL for point-in-time recovery from the newest N fulls on), or retention-full / retention-within / retention-archive in the config file; or --set ID to remove one backup",
        ));
    }
    if keep.keep_full == Some(0) {
        return Err(Error::invalid("--keep-full 0 would remove every backup: keep at least 1"));
    }
    check_archive(keep)?;
    if let (Some(l), Some(w)) = (&meta.lock, keep.keep_within) {
        if w > l.seconds() {
            return Err(Error::invalid(format!(
                "--keep-within {} is longer than the repository's lock ({} days): the oldest backups it keeps would no longer be locked, and anyone with the repository's credentials could delete them; keep within {} days at most, or move to a repository locked for longer (sheaf init --lock DAYS at a new place)",
                sheaf_core::time::span(w),
                l.days,
                l.days
            )));
        }
    }
    let found = backups(repo)?;
    let done: Vec<&BackupRecord> = found.iter().filter_map(Found::record).collect();
    let mut keep_ids = std::collections::BTreeSet::new();
    if !keep.names_backups() {
        // Archive retention alone: every backup stays, only WAL goes.
        keep_ids.extend(done.iter().map(|r| r.id.clone()));
    }
    if let Some(n) = keep.keep_full {
        // The newest N full backups, and every backup that builds on one of them (counting those
        // newer histories keep).
        let n = n.saturating_sub(later.fulls);
        let fulls: Vec<&str> = done.iter().rev().filter(|r| r.backup_type == BackupType::Full).take(n).map(|r| r.id.as_str()).collect();
        for r in &done {
            if fulls.contains(&r.id.as_str()) || r.chain.first().is_some_and(|f| fulls.contains(&f.as_str())) {
                keep_ids.insert(r.id.clone());
            }
        }
    }
    if let Some(w) = keep.keep_within {
        let edge = now - w;
        for r in &done {
            if r.stop_unix >= edge {
                keep_ids.insert(r.id.clone());
            }
        }
        // The newest backup that ends before the window: recovery to the window's first moment
        // starts from it.
        if let Some(r) = done.iter().rev().find(|r| r.stop_unix < edge).filter(|_| !later.before_edge) {
            keep_ids.insert(r.id.clone());
        }
    }
    if let Some(r) = done.last().filter(|_| !later.any) {
        keep_ids.insert(r.id.clone());
    }
    settle(repo, keep, &found, keep_ids, None, now, later)
}

/// Decide what `expire --set ID` removes: that one backup (its repository id or its set's backup
/// id), with the WAL that no backup left needs, as retention would (`keep`'s archive retention
/// applies; which backups it keeps does not). Refused, naming why, when it is the newest finished
/// backup, another backup builds on it, it is pinned, still locked, or still being written.
///
/// # Errors
/// [`sheaf_core::ErrorKind::NotFound`] when the repository holds no such backup; one of the
/// refusals above; the repository cannot be read.
pub fn plan_remove(repo: &Repo, id: &str, keep: &Retention, now: i64) -> Result<ExpirePlan> {
    plan_remove_in(repo, id, keep, now, &Later::default())
}

/// [`plan_remove`] in one history, given what newer histories hold.
fn plan_remove_in(repo: &Repo, id: &str, keep: &Retention, now: i64, later: &Later) -> Result<ExpirePlan> {
    check_archive(keep)?;
    let keep = &Retention { keep_archive: keep.keep_archive, ..Retention::default() };
    let found = backups(repo)?;
    let done: Vec<&BackupRecord> = found.iter().filter_map(Found::record).collect();
    let target = found.iter().find(|f| f.id() == id || f.record().is_some_and(|r| r.backup_id == id)).ok_or_else(|| {
        Error::new(
            sheaf_core::ErrorKind::NotFound,
            format!(
                "no backup {id} in {}; it holds: {} (sheaf info lists them)",
                repo.display(),
                if found.is_empty() { "none".to_string() } else { found.iter().map(Found::id).collect::<Vec<_>>().join(", ") }
            ),
        )
    })?;
    let record = match target {
        Found::Unfinished { id, running: true, .. } => {
            return Err(Error::invalid(format!("backup {id} is still being written (its writer runs): stop that backup first, or let it finish")));
        }
        // Left by a crash: it goes as expire removes those.
        Found::Unfinished { id, .. } => {
            let keep_ids = done.iter().map(|r| r.id.clone()).collect();
            return settle(repo, keep, &found, keep_ids, Some(id), now, later);
        }
        Found::Complete(r) => r,
    };
    let id = &record.id;
    // What builds on it, newest first: each must go before it.
    for f in &found {
        if let Found::Unfinished { id: other, lock: Some(l), running: true, .. } = f {
            if l.chain.contains(id) {
                return Err(Error::invalid(format!("backup {id} is the base of backup {other}, still being written: wait for it to finish, then remove both, newest first")));
            }
        }
    }
    let builders: Vec<&str> = done.iter().rev().filter(|r| r.chain.contains(id)).map(|r| r.id.as_str()).collect();
    if !builders.is_empty() {
        return Err(Error::invalid(format!(
            "backup {id} is the base of {}: they cannot be restored without it. Remove {} first (newest first: sheaf expire --set {}), or keep {id}",
            builders.join(", "),
            if builders.len() == 1 { "it" } else { "them" },
            builders[0]
        )));
    }
    if done.last().is_some_and(|r| &r.id == id) && !later.any {
        return Err(Error::invalid(format!(
            "backup {id} is the newest finished backup, which expire never removes (restore and drill take it by default): take another backup first, then remove this one"
        )));
    }
    if let Some(p) = crate::repo::keep::pins(repo)?.into_iter().find(|p| &p.id == id && p.holds(now)) {
        return Err(Error::invalid(format!("backup {id} is pinned ({}): release it first with sheaf keep --release {id}", p.until_text())));
    }
    if let Some(l) = repo.meta().lock {
        let until = record.locked_until.unwrap_or(record.start_unix + l.seconds());
        if until > now {
            return Err(Error::invalid(format!(
                "backup {id} is locked until {} (S3 Object Lock): no one can delete it before then; expire removes it once its lock runs out",
                sheaf_core::time::utc(until)
            )));
        }
    }
    let keep_ids = done.iter().filter(|r| &r.id != id).map(|r| r.id.clone()).collect();
    settle(repo, keep, &found, keep_ids, Some(id), now, later)
}

/// `--keep-archive 0` refused.
fn check_archive(keep: &Retention) -> Result<()> {
    if keep.keep_archive == Some(0) {
        return Err(Error::invalid("--keep-archive 0 would leave no backup that recovers to a point in time: keep the WAL of at least the newest full (1)"));
    }
    Ok(())
}

/// The plan, once it is known which finished backups the policy keeps (`keep_ids`): what those
/// need stays (their bases, pinned and still-locked backups, the WAL), the rest goes in a
/// crash-safe order. Unfinished backups left by a crash go too, all of them by policy (`one` is
/// `None`), else only `one` if it is one of them. In a history older than others (`later`), WAL
/// is anchored by what it keeps alone: keeping nothing, it loses all its WAL.
#[allow(clippy::too_many_arguments)]
fn settle(
    repo: &Repo,
    keep: &Retention,
    found: &[Found],
    mut keep_ids: std::collections::BTreeSet<BackupId>,
    one: Option<&BackupId>,
    now: i64,
    later: &Later,
) -> Result<ExpirePlan> {
    let meta = repo.meta();
    let lock = meta.lock.map(|l| l.seconds());
    // Until when a backup's objects are locked: its record says (they all carry the lock of the
    // process that wrote them).
    let locked_until = |r: &BackupRecord| lock.map(|s| r.locked_until.unwrap_or(r.start_unix + s)).filter(|&u| u > now);
    let done: Vec<&BackupRecord> = found.iter().filter_map(Found::record).collect();
    // A kept backup keeps the backups it builds on, and so does a backup being written now: an
    // incremental is only ever removed with, or after, those that depend on it.
    let mut needed: Vec<BackupId> = done.iter().filter(|r| keep_ids.contains(&r.id)).flat_map(|r| r.chain.iter().cloned()).collect();
    for f in found {
        if let Found::Unfinished { lock: Some(l), running: true, .. } = f {
            needed.extend(l.chain.iter().cloned());
        }
    }
    // Pinned backups (and what they build on) stay, with the WAL that makes each consistent; the
    // WAL after them stays only if the policy keeps it.
    let pins: Vec<crate::repo::keep::Pin> = crate::repo::keep::pins(repo)?.into_iter().filter(|p| p.holds(now) && done.iter().any(|r| r.id == p.id)).collect();
    let by_policy: std::collections::BTreeSet<BackupId> = keep_ids.iter().cloned().chain(needed.iter().cloned()).collect();
    let seg = meta.wal_segment_size;
    let span = |r: &BackupRecord| Some((WalFile::parse(&r.start_wal, seg)?.segno, WalFile::parse(&r.stop_wal, seg)?.segno));
    let mut own_spans: Vec<(u64, u64)> = Vec::new();
    for p in &pins {
        let r = done.iter().find(|r| r.id == p.id).expect("filtered on it");
        keep_ids.insert(r.id.clone());
        needed.extend(r.chain.iter().cloned());
        own_spans.extend(span(r));
    }
    // Backups still locked stay (with what they build on) whatever the policy says: removing one
    // would only hide it behind a delete marker.
    let (mut locked, mut locked_ids) = (Vec::new(), std::collections::BTreeSet::new());
    for r in &done {
        if let Some(u) = locked_until(r).filter(|_| !keep_ids.contains(&r.id) && !needed.contains(&r.id)) {
            locked.push(format!("{} (until {})", r.id, sheaf_core::time::utc(u)));
            locked_ids.insert(r.id.clone());
            keep_ids.insert(r.id.clone());
            needed.extend(r.chain.iter().cloned());
        }
    }
    let unprotected = if lock.is_some() && keep.names_backups() {
        done.iter().filter(|r| by_policy.contains(&r.id) && locked_until(r).is_none()).map(|r| r.id.clone()).collect()
    } else {
        Vec::new()
    };
    keep_ids.extend(needed);
    let mut plan = ExpirePlan { pinned: pins.iter().map(|p| format!("{} ({})", p.id, p.until_text())).collect(), locked, unprotected, ..ExpirePlan::default() };
    // Until when an object written at `modified` is locked, at the latest.
    let object_lock = |modified: i64| lock.map(|s| modified + s).filter(|&u| u > now);
    let listed = repo.list(paths::BACKUPS)?;
    let pin_objects: std::collections::HashMap<String, i64> = repo.list(crate::repo::keep::KEEP)?.into_iter().map(|o| (o.name, o.modified)).collect();
    let size_of = |n: &str| listed.iter().find(|o| o.name == n).map_or(0, |o| o.size);
    let drills = crate::repo::drills::drill_objects(repo)?;
    let edited: std::collections::HashSet<String> = repo.list(paths::ANNOTATIONS)?.into_iter().map(|o| o.name).collect();
    // Records first, newest first: a backup is complete while its record is there, so a crash (or
    // a kill) midway leaves stripes without a record, an unfinished backup the next expire
    // removes, never a record without its stripes, nor an incremental listed on a base whose
    // record is gone. Then the stripes and what unfinished backups left; pins that ran out and the
    // removed backups' drill records last.
    let (mut records, mut rest, mut pins) = (Vec::new(), Vec::new(), Vec::new());
    for f in found {
        match f {
            Found::Complete(r) if keep_ids.contains(&r.id) => plan.kept.push(r.id.clone()),
            Found::Complete(r) => {
                plan.removed.push(r.id.clone());
                records.push(paths::record(&r.id));
                for s in &r.stripes {
                    plan.bytes += size_of(s);
                    rest.push(s.clone());
                }
                let pin = crate::repo::keep::pin_object(&r.id);
                if pin_objects.get(&pin).is_some_and(|&m| object_lock(m).is_none()) {
                    pins.push(pin);
                }
                if edited.contains(&paths::annotations(&r.id)) {
                    pins.push(paths::annotations(&r.id));
                }
                // Its drills' records go with it, last.
                pins.extend(drills.iter().filter(|d| crate::repo::drills::drill_backup(d) == Some(r.id.as_str())).cloned());
            }
            Found::Unfinished { id, running: true, .. } => plan.running.push(id.clone()),
            Found::Unfinished { id, .. } if one.is_some_and(|o| o != id) => {}
            Found::Unfinished { id, objects, .. } => {
                let newest = objects.iter().filter(|o| !o.ends_with(".lock")).filter_map(|o| listed.iter().find(|l| &l.name == o)).map(|l| l.modified).max();
                if let Some(u) = newest.and_then(object_lock) {
                    plan.locked.push(format!("{id} (unfinished, until {})", sheaf_core::time::utc(u)));
                    continue;
                }
                plan.unfinished.push(id.clone());
                for o in objects {
                    plan.bytes += size_of(o);
                }
                let (locks, others): (Vec<&String>, Vec<&String>) = objects.iter().partition(|o| o.ends_with(".lock"));
                rest.extend(others.into_iter().cloned());
                rest.extend(locks.into_iter().cloned());
            }
        }
    }
    plan.objects = records.into_iter().rev().chain(rest).chain(pins).collect();
    plan.kept.retain(|id| !locked_ids.contains(id));
    // The WAL from the oldest backup the policy keeps on (with archive retention, the start of
    // the Nth newest full it keeps); each kept backup older than that, and each pinned one, keeps
    // its own span besides.
    let kept: Vec<&&BackupRecord> = done.iter().filter(|r| by_policy.contains(&r.id)).collect();
    let start_of = |r: &BackupRecord| WalFile::parse(&r.start_wal, seg);
    // Archive retention: point-in-time recovery from the Nth newest full kept on, in the order
    // the backups were taken (after a restore to an earlier moment, a newer timeline's segment
    // numbers are lower than an older one's), and never less than a time window keeps.
    // Newer histories count first: the fulls they keep are the newest.
    let from = keep.keep_archive.and_then(|n| {
        let nth = match n.saturating_sub(later.fulls_kept) {
            0 => kept.len(),
            n => kept.iter().enumerate().rev().filter(|(_, r)| r.backup_type == BackupType::Full).nth(n - 1).map(|(i, _)| i)?,
        };
        let window = keep.keep_within.map(|w| if later.before_edge { kept.len() } else { kept.iter().rposition(|r| r.stop_unix < now - w).unwrap_or(0) });
        Some(window.map_or(nth, |w| w.min(nth)))
    });
    if let Some(from) = from {
        for r in &kept[..from] {
            own_spans.extend(span(r));
            plan.consistent_only.push(r.id.clone());
        }
    }
    // Running backups need WAL from their start, which is after every finished one's, but for a
    // backup being copied in (its lock says where its WAL starts). With no finished backup kept
    // there is nothing to anchor WAL to: keep all of it.
    let copied_in = found.iter().filter_map(|f| match f {
        Found::Unfinished { lock: Some(l), running: true, .. } => l.start_wal.as_deref().and_then(|w| WalFile::parse(w, seg)),
        _ => None,
    });
    let mut oldest = kept[from.unwrap_or(0)..].iter().filter_map(|r| start_of(r)).chain(copied_in).min_by_key(|w| w.segno);
    // An older history than others, keeping no backup's WAL for recovery to a point in time: its
    // WAL goes, but for the spans of the backups it still keeps; keeping none, its history files
    // too. Its horizon is past its last segment, so that what is left never looks damaged.
    let whole_history = later.any && oldest.is_none();
    if whole_history {
        let last = archived(repo)?.into_iter().filter(|(w, _)| w.kind != WalKind::History).map(|(w, _)| w).max_by_key(|w| w.segno);
        oldest = last.map(|w| WalFile::parse(&crate::cluster::walname::segment_name(w.timeline, w.segno + 1, seg), seg).expect("a segment name"));
    }
    let history_files_go = whole_history && own_spans.is_empty() && keep_ids.is_empty();
    if let Some(oldest) = oldest {
        plan.wal_kept_from = (!whole_history).then(|| oldest.name.clone());
        plan.horizon = Some(oldest.clone());
        let listed = repo.list(paths::WAL)?;
        let summaries: std::collections::HashSet<String> = listed.iter().map(|o| o.name.clone()).filter(|n| n.ends_with(".sum")).collect();
        let in_a_span = |segno: u64| own_spans.iter().any(|&(a, b)| (a..=b).contains(&segno));
        // wal-receive's copies of segments never completed (a receiver that stopped for good, a
        // timeline's last segment) go with the WAL around them.
        for o in listed.iter().filter(|o| o.name.ends_with(".streaming")) {
            let name = o.name.rsplit('/').next().and_then(|n| n.strip_suffix(".streaming")).unwrap_or_default();
            let old = WalFile::parse(name, seg).is_some_and(|w| w.segno < oldest.segno && !in_a_span(w.segno));
            if old {
                plan.bytes += o.size;
                plan.objects.push(o.name.clone());
            }
        }
        let written: std::collections::HashMap<&str, i64> = listed.iter().map(|o| (o.name.as_str(), o.modified)).collect();
        for (w, size) in archived(repo)? {
            let goes = if w.kind == WalKind::History { history_files_go } else { w.segno < oldest.segno && !in_a_span(w.segno) };
            if goes {
                if let Some(u) = written.get(paths::wal_object(&w.name).as_str()).copied().and_then(object_lock) {
                    plan.wal_locked += 1;
                    plan.wal_locked_until = plan.wal_locked_until.max(Some(u));
                    continue;
                }
                plan.wal_removed += 1;
                plan.wal_bytes += size;
                plan.bytes += size;
                // Its block summary first: a summary never outlives its segment.
                let sum = crate::repo::paths::summary_object(&w.name);
                if summaries.contains(&sum) {
                    plan.objects.push(sum);
                }
                plan.objects.push(paths::wal_object(&w.name));
            }
        }
    }
    Ok(plan)
}

/// Apply `keep` at `now`: plan ([`plan_expire`]) and carry the plan out ([`expire`]), as
/// `sheaf expire` without `--dry-run` and a backup with expire-auto do.
///
/// # Errors
/// As [`plan_expire`] and [`expire`].
pub fn apply(repo: &Repo, keep: &Retention, now: i64) -> Result<Vec<HistoryPlan>> {
    let plans = plan_all(repo, keep, now)?;
    for p in &plans {
        expire(&p.history.repo, &p.plan)?;
    }
    Ok(plans)
}

/// Carry out a plan: raise the retention horizon (so that the WAL removed is known to be the
/// policy's, [`crate::repo::horizon`]), remove its objects in order, then empty folders.
///
/// # Errors
/// The horizon cannot be written; the first object that cannot be removed (what was removed
/// before it stays removed; running expire again finishes the work).
pub fn expire(repo: &Repo, plan: &ExpirePlan) -> Result<()> {
    if let Some(first) = &plan.horizon {
        crate::repo::horizon::raise(repo, first).map_err(|e| e.context("expire removed nothing: the retention horizon could not be written"))?;
    }
    for o in &plan.objects {
        tracing::debug!(object = o.as_str(), "removing");
        repo.delete(o).map_err(|e| e.context("expire stopped; run it again to finish"))?;
    }
    for id in plan.removed.iter().chain(&plan.unfinished) {
        repo.prune(&paths::backup_dir(id));
        tracing::info!(backup = %id, "expired");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::walname::segment_name;
    use crate::repo::records::{host_name, BackupLock};

    fn record(id: &str, stop_unix: i64, start_wal: &str) -> BackupRecord {
        BackupRecord {
            start_unix: stop_unix - 10,
            stop_unix,
            stop_ms: stop_unix * 1000,
            start_wal: start_wal.into(),
            stop_wal: start_wal.into(),
            ..crate::repo::records::test_record(id)
        }
    }

    /// A repository with 16 MiB segments in `dir`: it, and the segment size.
    fn test_repo(dir: &std::path::Path) -> (Repo, u64) {
        let repo = crate::repo::meta::test_repo(&dir.join("r"));
        let seg = repo.meta().wal_segment_size;
        (repo, seg)
    }

    #[test]
    fn expire_spares_a_running_backup_and_removes_one_left_by_a_crash() {
        let d = tempfile::tempdir().unwrap();
        let (repo, seg) = test_repo(d.path());
        let put = |name: &str| repo.put(name, &mut &b"x"[..], sheaf_core::CodecSpec::default(), false, name).unwrap();
        for (id, stop, wal) in [("a", 1000, 2u64), ("b", 2000, 4), ("c", 3000, 6)] {
            let r = record(id, stop, &segment_name(1, wal, seg));
            put(&r.stripes[0]);
            repo.put_json(&paths::record(id), &r, false).unwrap();
        }
        for s in 1..=7 {
            put(&paths::wal_object(&segment_name(1, s, seg)));
        }
        put(&paths::wal_object("00000002.history"));
        // What wal-receive left of two segments it never completed: one before the WAL kept.
        put(&crate::repo::paths::streaming_object(&segment_name(1, 2, seg)));
        put(&crate::repo::paths::streaming_object(&segment_name(1, 7, seg)));
        // Being written by this very process (alive), and one whose writer is gone.
        let live = BackupLock { id: "d".into(), host: host_name(), pid: std::process::id(), start_unix: 3500, chain: vec![], start_wal: None };
        repo.put_json("backups/d.lock", &live, false).unwrap();
        put("backups/d/d_1.sheaf");
        let dead = BackupLock { id: "e".into(), host: host_name(), pid: 0x7fff_fff0, start_unix: 3400, chain: vec![], start_wal: None };
        repo.put_json("backups/e.lock", &dead, false).unwrap();
        put("backups/e/e_1.sheaf");

        let keep = Retention { keep_full: Some(2), keep_within: None, keep_archive: None };
        let plan = plan_expire(&repo, &keep, 4000).unwrap();
        assert_eq!(plan.kept, vec!["b", "c"]);
        assert_eq!(plan.removed, vec!["a"]);
        assert_eq!(plan.running, vec!["d"], "a backup still being written is left alone");
        assert_eq!(plan.unfinished, vec!["e"], "one left by a crash goes");
        assert_eq!(plan.wal_removed, 3, "segments 1..3: before b's start (4)");
        expire(&repo, &plan).unwrap();
        let left: Vec<String> = repo.list("").unwrap().into_iter().map(|o| o.name).collect();
        assert!(left.contains(&"backups/d.lock".to_string()) && left.contains(&"backups/d/d_1.sheaf".to_string()), "{left:?}");
        assert!(!left.iter().any(|n| n.starts_with("backups/e") || n.starts_with("backups/a")), "{left:?}");
        assert!(left.contains(&paths::wal_object("00000002.history")), "history stays");
        assert!(left.contains(&paths::wal_object(&segment_name(1, 4, seg))));
        assert!(!left.contains(&paths::wal_object(&segment_name(1, 3, seg))));
        assert!(!left.contains(&crate::repo::paths::streaming_object(&segment_name(1, 2, seg))), "an old streamed copy goes");
        assert!(left.contains(&crate::repo::paths::streaming_object(&segment_name(1, 7, seg))), "a recent one stays");

        // Time-based: the window [3500, 4000] holds no backup end; the newest before it (c) stays.
        let keep = Retention { keep_full: None, keep_within: Some(500), keep_archive: None };
        let plan = plan_expire(&repo, &keep, 4000).unwrap();
        assert_eq!(plan.kept, vec!["c"]);
        assert_eq!(plan.removed, vec!["b"]);
        assert!(plan_expire(&repo, &Retention::default(), 4000).is_err(), "a policy is required");
    }

    #[test]
    fn an_incremental_goes_only_with_or_after_what_depends_on_it() {
        let d = tempfile::tempdir().unwrap();
        let (repo, seg) = test_repo(d.path());
        let put = |name: &str| repo.put(name, &mut &b"x"[..], sheaf_core::CodecSpec::default(), false, name).unwrap();
        // a full, b incr on a; c full, d diff on c, e incr on d.
        let chains: [(&str, i64, &[&str]); 5] = [("a", 1000, &[]), ("b", 2000, &["a"]), ("c", 3000, &[]), ("d", 4000, &["c"]), ("e", 5000, &["c", "d"])];
        for (i, (id, stop, chain)) in chains.iter().enumerate() {
            let mut r = record(id, *stop, &segment_name(1, 2 + 2 * i as u64, seg));
            r.chain = chain.iter().map(|c| BackupId::from(*c)).collect();
            r.backup_type = if chain.is_empty() { BackupType::Full } else { BackupType::Incr };
            put(&r.stripes[0]);
            repo.put_json(&paths::record(id), &r, false).unwrap();
        }
        let kept = |keep: Retention| plan_expire(&repo, &keep, 5500).unwrap().kept;
        // The newest full, and everything built on it.
        assert_eq!(kept(Retention { keep_full: Some(1), keep_within: None, keep_archive: None }), vec!["c", "d", "e"]);
        assert_eq!(kept(Retention { keep_full: Some(2), keep_within: None, keep_archive: None }), vec!["a", "b", "c", "d", "e"]);
        // A window holding only e's end: e, the newest before the window (d), and their full.
        assert_eq!(kept(Retention { keep_full: None, keep_within: Some(1000), keep_archive: None }), vec!["c", "d", "e"]);
        // An incremental being written on b keeps b and a.
        let live = BackupLock { id: "f".into(), host: host_name(), pid: std::process::id(), start_unix: 5400, chain: vec!["a".into(), "b".into()], start_wal: None };
        repo.put_json("backups/f.lock", &live, false).unwrap();
        assert_eq!(kept(Retention { keep_full: Some(1), keep_within: None, keep_archive: None }), vec!["a", "b", "c", "d", "e"]);
    }

    #[test]
    fn records_go_first_newest_first_so_no_cut_leaves_a_record_without_its_stripes() {
        let d = tempfile::tempdir().unwrap();
        let (repo, seg) = test_repo(d.path());
        let put = |name: &str| repo.put(name, &mut &b"x"[..], sheaf_core::CodecSpec::default(), false, name).unwrap();
        // a full, b incr on a, c full: keeping one full removes b and a.
        for (i, (id, chain)) in [("a", &[][..]), ("b", &["a"][..]), ("c", &[][..])].iter().enumerate() {
            let mut r = record(id, 1000 * (i as i64 + 1), &segment_name(1, 2 + 2 * i as u64, seg));
            r.chain = chain.iter().map(|c| BackupId::from(*c)).collect();
            r.backup_type = if chain.is_empty() { BackupType::Full } else { BackupType::Incr };
            put(&r.stripes[0]);
            repo.put_json(&paths::record(id), &r, false).unwrap();
        }
        let plan = plan_expire(&repo, &Retention { keep_full: Some(1), keep_within: None, keep_archive: None }, 5000).unwrap();
        assert_eq!(plan.removed, vec!["a", "b"]);
        assert_eq!(plan.objects[..2], [paths::record("b"), paths::record("a")], "{:?}", plan.objects);
        // Cut after each step: what is left never lists a backup whose stripes or base are gone.
        for n in 0..plan.objects.len() {
            let found = crate::repo::records::backups(&repo).unwrap();
            for f in &found {
                if let Found::Complete(r) = f {
                    for s in &r.stripes {
                        assert!(repo.exists(s).unwrap(), "after {n} removals {} is listed without {s}", r.id);
                    }
                    for base in &r.chain {
                        assert!(found.iter().any(|g| matches!(g, Found::Complete(b) if &b.id == base)), "after {n} removals {} is listed without its base {base}", r.id);
                    }
                }
            }
            repo.delete(&plan.objects[n]).unwrap();
        }
    }

    #[test]
    fn the_bases_of_a_pinned_incremental_are_its_data_and_need_no_wal_of_their_own() {
        let d = tempfile::tempdir().unwrap();
        let (repo, seg) = test_repo(d.path());
        let put = |name: &str| repo.put(name, &mut &b"x"[..], sheaf_core::CodecSpec::default(), false, name).unwrap();
        // a full (2), b incr on a (4), c incr on a, b (6), pinned; d full (9), the newest.
        let chains: [(&str, i64, u64, &[&str]); 4] = [("a", 1000, 2, &[]), ("b", 2000, 4, &["a"]), ("c", 3000, 6, &["a", "b"]), ("d", 4000, 9, &[])];
        for (id, stop, wal, chain) in chains {
            let mut r = record(id, stop, &segment_name(1, wal, seg));
            r.chain = chain.iter().map(|c| BackupId::from(*c)).collect();
            r.backup_type = if chain.is_empty() { BackupType::Full } else { BackupType::Incr };
            put(&r.stripes[0]);
            repo.put_json(&paths::record(id), &r, false).unwrap();
        }
        for s in 1..=10 {
            put(&paths::wal_object(&segment_name(1, s, seg)));
        }
        crate::maintain::keep::pin(&repo, "c", None, 4500).unwrap();
        let plan = plan_expire(&repo, &Retention { keep_full: Some(1), keep_within: None, keep_archive: None }, 4500).unwrap();
        assert_eq!(plan.kept, vec!["a", "b", "c", "d"], "c is pinned, and builds on a and b");
        expire(&repo, &plan).unwrap();
        let inv = crate::repo::inventory::Inventory::take(&repo).unwrap();
        assert!(inv.gaps.is_empty(), "{:?}", inv.gaps);
        for r in inv.found.iter().filter_map(Found::record) {
            assert_eq!(inv.needs.missing(&inv.files, r, seg), Some(vec![]), "{}", r.id);
            assert_eq!(inv.needs.data_only(r, seg), r.id == "a" || r.id == "b", "{}", r.id);
        }
        // Pinning a base now would promise a backup that cannot restore by itself: refused.
        let e = crate::maintain::keep::pin(&repo, "a", None, 4500).unwrap_err();
        assert_eq!(e.kind(), sheaf_core::ErrorKind::Incomplete);
        assert!(e.to_string().contains("pin c, the newest backup built on it, instead"), "{e}");
        // c's own segment lost is damage still.
        repo.delete(&paths::wal_object(&segment_name(1, 6, seg))).unwrap();
        let inv = crate::repo::inventory::Inventory::take(&repo).unwrap();
        let c = inv.found.iter().filter_map(Found::record).find(|r| r.id == "c").unwrap();
        assert_eq!(inv.needs.missing(&inv.files, c, seg), Some(vec![segment_name(1, 6, seg)]));
    }

    #[test]
    fn a_pinned_backup_stays_with_the_wal_that_makes_it_consistent_until_its_pin_ends() {
        let d = tempfile::tempdir().unwrap();
        let (repo, seg) = test_repo(d.path());
        let put = |name: &str| repo.put(name, &mut &b"x"[..], sheaf_core::CodecSpec::default(), false, name).unwrap();
        // a: WAL 2..3; b: 6..6; c: 9..9. Segments 1..=10 archived.
        for (id, stop, start, end) in [("a", 1000, 2u64, 3u64), ("b", 2000, 6, 6), ("c", 3000, 9, 9)] {
            let mut r = record(id, stop, &segment_name(1, start, seg));
            r.stop_wal = segment_name(1, end, seg);
            put(&r.stripes[0]);
            repo.put_json(&paths::record(id), &r, false).unwrap();
        }
        for s in 1..=10 {
            put(&paths::wal_object(&segment_name(1, s, seg)));
        }
        assert!(crate::maintain::keep::pin(&repo, "nope", None, 4000).is_err(), "no such backup");
        assert!(crate::maintain::keep::pin(&repo, "a", Some(3999), 4000).is_err(), "a date already past");
        crate::maintain::keep::pin(&repo, "a", Some(5000), 4000).unwrap();
        let keep = Retention { keep_full: Some(1), keep_within: None, keep_archive: None };
        let plan = plan_expire(&repo, &keep, 4000).unwrap();
        assert_eq!(plan.kept, vec!["a", "c"]);
        assert_eq!(plan.removed, vec!["b"]);
        assert_eq!(plan.pinned.len(), 1);
        // Removed: 1, 4, 5, 6, 7, 8 (before c's start, outside a's 2..3).
        assert_eq!(plan.wal_removed, 6);
        expire(&repo, &plan).unwrap();
        let left: Vec<String> = repo.list("").unwrap().into_iter().map(|o| o.name).collect();
        for s in [2, 3, 9, 10] {
            assert!(left.contains(&paths::wal_object(&segment_name(1, s, seg))), "{s}: {left:?}");
        }
        for s in [1, 4, 8] {
            assert!(!left.contains(&paths::wal_object(&segment_name(1, s, seg))), "{s}: {left:?}");
        }
        // The gap before c is the policy's: the horizon says so, and a needs only its own span.
        let h = crate::repo::horizon::read(&repo).unwrap().expect("expire raised the horizon");
        assert_eq!(h.first_kept, segment_name(1, 9, seg));
        assert_eq!(crate::repo::horizon::needed_to(3, 10, Some(&h)), 3);
        let inv = crate::repo::inventory::Inventory::take(&repo).unwrap();
        assert!(inv.gaps.is_empty(), "retention's gaps are not damage: {:?}", inv.gaps);
        assert_eq!(inv.expired.iter().map(|g| (g.after.clone(), g.before.clone())).collect::<Vec<_>>(), vec![(segment_name(1, 3, seg), segment_name(1, 9, seg))]);
        for r in inv.found.iter().filter_map(Found::record) {
            assert_eq!(inv.needs.missing(&inv.files, r, seg), Some(vec![]), "{}", r.id);
        }
        // A segment of a's own span lost, and one after the horizon: both are damage.
        repo.delete(&paths::wal_object(&segment_name(1, 3, seg))).unwrap();
        repo.delete(&paths::wal_object(&segment_name(1, 10, seg))).unwrap();
        put(&paths::wal_object(&segment_name(1, 11, seg)));
        let inv = crate::repo::inventory::Inventory::take(&repo).unwrap();
        assert_eq!(inv.gaps.len(), 2, "{:?}", inv.gaps);
        assert!(inv.expired.is_empty(), "{:?}", inv.expired);
        let a = inv.found.iter().filter_map(Found::record).find(|r| r.id == "a").unwrap();
        assert_eq!(inv.needs.missing(&inv.files, a, seg), Some(vec![segment_name(1, 3, seg)]));
        put(&paths::wal_object(&segment_name(1, 3, seg)));
        put(&paths::wal_object(&segment_name(1, 10, seg)));
        // Once the pin has run out, a goes, and its pin with it.
        let plan = plan_expire(&repo, &keep, 6000).unwrap();
        assert_eq!((plan.kept.clone(), plan.removed.clone()), (vec![BackupId::from("c")], vec![BackupId::from("a")]));
        expire(&repo, &plan).unwrap();
        assert!(crate::repo::keep::pins(&repo).unwrap().is_empty());
        // Released by hand.
        crate::maintain::keep::pin(&repo, "c", None, 6000).unwrap();
        assert!(crate::maintain::keep::release(&repo, "c").unwrap());
        assert!(!crate::maintain::keep::release(&repo, "c").unwrap());
    }
    /// Backups `(id, stop time, first and last WAL segment, chain)` recorded in `repo`, fulls
    /// where the chain is empty, and segments `wal` archived.
    fn lay_out(repo: &Repo, seg: u64, backups: &[(&str, i64, u64, u64, &[&str])], wal: std::ops::RangeInclusive<u64>) {
        let put = |name: &str| repo.put(name, &mut &b"x"[..], sheaf_core::CodecSpec::default(), false, name).unwrap();
        for (id, stop, a, b, chain) in backups {
            let mut r = record(id, *stop, &segment_name(1, *a, seg));
            r.stop_wal = segment_name(1, *b, seg);
            r.chain = chain.iter().map(|c| BackupId::from(*c)).collect();
            r.backup_type = if chain.is_empty() { BackupType::Full } else { BackupType::Incr };
            put(&r.stripes[0]);
            repo.put_json(&paths::record(id), &r, false).unwrap();
        }
        for s in wal {
            put(&paths::wal_object(&segment_name(1, s, seg)));
        }
    }

    #[test]
    fn one_backup_goes_by_its_id_and_whatever_still_needs_it_is_named() {
        let d = tempfile::tempdir().unwrap();
        let (repo, seg) = test_repo(d.path());
        // a full (2..3), b incr on a (4), c full (6), d full (8), the newest.
        lay_out(&repo, seg, &[("a", 1000, 2, 3, &[]), ("b", 2000, 4, 4, &["a"]), ("c", 3000, 6, 6, &[]), ("d", 4000, 8, 8, &[])], 2..=9);
        let none = Retention::default();
        let refused = |id: &str| plan_remove(&repo, id, &none, 5000).unwrap_err().to_string();
        assert!(refused("a").contains("backup a is the base of b") && refused("a").contains("sheaf expire --set b"), "{}", refused("a"));
        assert!(refused("d").contains("the newest finished backup"), "{}", refused("d"));
        assert!(refused("zz").contains("no backup zz") && refused("zz").contains("a, b, c, d"), "{}", refused("zz"));
        crate::maintain::keep::pin(&repo, "c", None, 5000).unwrap();
        assert!(refused("c").contains("sheaf keep --release c"), "{}", refused("c"));
        crate::maintain::keep::release(&repo, "c").unwrap();
        // By its set's id as well; the WAL stays, every backup left starting after it.
        let plan = plan_remove(&repo, "b-set", &none, 5000).unwrap();
        assert_eq!((plan.removed.clone(), plan.kept.clone()), (vec![BackupId::from("b")], vec!["a".into(), "c".into(), "d".into()]));
        assert_eq!(plan.wal_removed, 0);
        expire(&repo, &plan).unwrap();
        // Now a: the WAL before c's start goes with it, as retention would remove it.
        let plan = plan_remove(&repo, "a", &none, 5000).unwrap();
        assert_eq!(plan.removed, vec![BackupId::from("a")]);
        assert_eq!(plan.wal_removed, 4, "segments 2..5");
        expire(&repo, &plan).unwrap();
        let left: Vec<String> = crate::repo::records::backups(&repo).unwrap().iter().map(|f| f.id().to_string()).collect();
        assert_eq!(left, ["c", "d"]);
        let inv = crate::repo::inventory::Inventory::take(&repo).unwrap();
        assert!(inv.gaps.is_empty(), "{:?}", inv.gaps);
        // One left by a crash, named: it alone goes.
        let dead = crate::repo::records::BackupLock { id: "e".into(), host: crate::repo::records::host_name(), pid: 0x7fff_fff0, start_unix: 4400, chain: vec![], start_wal: None };
        repo.put_json("backups/e.lock", &dead, false).unwrap();
        let plan = plan_remove(&repo, "e", &none, 5000).unwrap();
        assert_eq!((plan.unfinished.clone(), plan.removed.len()), (vec![BackupId::from("e")], 0));
    }

    #[test]
    fn archive_retention_keeps_recovery_to_any_moment_for_the_newest_fulls_and_consistency_for_older() {
        let d = tempfile::tempdir().unwrap();
        let (repo, seg) = test_repo(d.path());
        // Fulls a (2..3), b (5..6), c (8..9); b2 incr on b (7); WAL 1..=11.
        lay_out(&repo, seg, &[("a", 1000, 2, 3, &[]), ("b", 2000, 5, 6, &[]), ("b2", 2500, 7, 7, &["b"]), ("c", 3000, 8, 9, &[])], 1..=11);
        assert!(plan_expire(&repo, &Retention { keep_archive: Some(0), ..Retention::default() }, 4000).is_err());
        // Every backup kept, WAL for point-in-time recovery from the newest two fulls (b) on.
        let two = plan_expire(&repo, &Retention { keep_full: Some(3), keep_archive: Some(2), ..Retention::default() }, 4000).unwrap();
        assert_eq!(two.kept.len(), 4);
        assert_eq!(two.consistent_only, vec![BackupId::from("a")]);
        assert_eq!((two.wal_removed, two.wal_kept_from.clone()), (2, Some(segment_name(1, 5, seg))), "1 and 4");
        // A window asks for more: recovery to any moment of its span, from b (the newest backup
        // ending before it) on, whatever the archive retention says.
        let window = plan_expire(&repo, &Retention { keep_full: Some(3), keep_within: Some(1500), keep_archive: Some(1) }, 4000).unwrap();
        assert_eq!(window.consistent_only, vec![BackupId::from("a")]);
        // Archive retention alone keeps every backup too.
        let one = Retention { keep_archive: Some(1), ..Retention::default() };
        let plan = plan_expire(&repo, &one, 4000).unwrap();
        assert_eq!(plan.kept, vec!["a", "b", "b2", "c"]);
        assert_eq!(plan.consistent_only, vec!["a", "b", "b2"]);
        assert_eq!(plan.wal_removed, 2, "1 and 4: 7 is b2's own span");
        expire(&repo, &plan).unwrap();
        // What it removed is retention's, not damage; every backup has what it needs.
        let inv = crate::repo::inventory::Inventory::take(&repo).unwrap();
        assert!(inv.gaps.is_empty(), "{:?}", inv.gaps);
        assert_eq!(inv.expired.len(), 1, "3 to 5: segment 1 went from before the first run, {:?}", inv.expired);
        for r in inv.found.iter().filter_map(Found::record) {
            assert_eq!(inv.needs.missing(&inv.files, r, seg), Some(vec![]), "{}", r.id);
        }
        // A point in time after a is no longer in reach (4 is gone): restore says why. b's span
        // runs on into b2's and c's, so b still recovers to the end.
        let records: Vec<BackupRecord> = inv.found.iter().filter_map(Found::record).cloned().collect();
        let pick = |id: &str| records.iter().find(|r| r.id == id).unwrap();
        use crate::restore::target::{Recovery, Target, TargetAction, TimelineTarget};
        let to = |target| Recovery { target, action: TargetAction::Promote, timeline: TimelineTarget::Latest, inclusive: true };
        let to_end = to(Target::End);
        let e = crate::restore::pitr::plan(&repo, &records, Some(pick("a")), &to_end).unwrap_err().to_string();
        assert!(e.contains("keeps only the WAL that makes it consistent") && e.contains("--target immediate") && e.contains("from c on"), "{e}");
        let now = to(Target::Immediate);
        assert_eq!(crate::restore::pitr::plan(&repo, &records, Some(pick("a")), &now).unwrap().backup.id, "a");
        assert_eq!(crate::restore::pitr::plan(&repo, &records, Some(pick("b")), &to_end).unwrap().backup.id, "b");
        // A segment inside a's own span lost is damage.
        repo.delete(&paths::wal_object(&segment_name(1, 3, seg))).unwrap();
        let inv = crate::repo::inventory::Inventory::take(&repo).unwrap();
        assert_eq!(inv.gaps.len(), 1, "{:?}", inv.gaps);
    }

    /// After pg_upgrade: fulls a and b in history 1, c in history 2 (the cluster that backs up
    /// now). Retention counts fulls across both; archive retention anchors across both; a policy
    /// that keeps nothing of history 1 removes it whole, its timeline history files too.
    #[test]
    fn retention_counts_across_histories_and_an_old_history_goes_whole() {
        let d = tempfile::tempdir().unwrap();
        let (root, seg) = test_repo(d.path());
        let record2 = crate::repo::histories::HistoryRecord {
            history: 2,
            system_identifier: crate::cluster::system::SystemId(2),
            wal_segment_size: seg,
            server_version: "18.1".into(),
            created: String::new(),
            upgraded_from: crate::cluster::system::SystemId(1),
            start_lsn: Default::default(),
        };
        root.prepare("history/2/repo.json").unwrap();
        root.put_json(&crate::repo::histories::record(2), &record2, false).unwrap();
        let all = crate::repo::histories::all(&root).unwrap();
        assert_eq!(all.len(), 2);
        let (old, new) = (&all[0].repo, &all[1].repo);
        for (repo, backups, wal) in [(old, vec![("a", 1000, 2u64), ("b", 2000, 4)], 1..=6u64), (new, vec![("c", 3000, 8)], 8..=9)] {
            let put = |name: &str| repo.put(name, &mut &b"x"[..], sheaf_core::CodecSpec::default(), false, name).unwrap();
            for (id, stop, start) in backups {
                let r = record(id, stop, &segment_name(1, start, seg));
                put(&r.stripes[0]);
                repo.put_json(&paths::record(id), &r, false).unwrap();
            }
            for s in wal {
                put(&paths::wal_object(&segment_name(1, s, seg)));
            }
        }
        old.put(&paths::wal_object("00000002.history"), &mut &b"x"[..], sheaf_core::CodecSpec::default(), false, "h").unwrap();
        let plans = |keep: Retention| plan_all(old, &keep, 4000).unwrap();
        let ids = |v: &[BackupId]| v.iter().map(|i| i.as_str().to_string()).collect::<Vec<_>>();

        // Two fulls: c, then b; a goes, with the WAL before b.
        let p = plans(Retention { keep_full: Some(2), ..Retention::default() });
        assert_eq!((ids(&p[0].plan.kept), ids(&p[0].plan.removed), p[0].plan.wal_removed), (vec!["b".to_string()], vec!["a".to_string()], 3));
        assert_eq!(ids(&p[1].plan.kept), ["c"]);
        // Archive retention for the newest full only: b keeps its own span.
        let p = plans(Retention { keep_full: Some(2), keep_archive: Some(1), ..Retention::default() });
        assert_eq!(ids(&p[0].plan.consistent_only), ["b"]);
        assert_eq!(p[0].plan.wal_removed, 5, "all but b's own segment (4), history files kept");
        assert!(p[1].plan.consistent_only.is_empty());
        // A window reaching back before c: the newest backup before it is history 1's b.
        let p = plans(Retention { keep_within: Some(1500), ..Retention::default() });
        assert_eq!((ids(&p[0].plan.kept), ids(&p[0].plan.removed)), (vec!["b".to_string()], vec!["a".to_string()]));
        // One full: c. History 1 goes whole: its backups, segments and history files.
        let p = plans(Retention { keep_full: Some(1), ..Retention::default() });
        assert_eq!(ids(&p[0].plan.removed), ["a", "b"]);
        for h in &p {
            expire(&h.history.repo, &h.plan).unwrap();
        }
        let left: Vec<String> = old.list(paths::WAL).unwrap().into_iter().chain(old.list(paths::BACKUPS).unwrap()).map(|o| o.name).collect();
        assert!(left.is_empty(), "{left:?}");
        assert_eq!(crate::repo::records::complete(new).unwrap().len(), 1);
        assert_eq!(archived(new).unwrap().len(), 2, "history 2's WAL stays");
        // --set refuses the newest backup of all, not an old history's newest.
        assert!(plan_remove_all(old, "c", &Retention::default(), 4000).unwrap_err().to_string().contains("newest finished backup"));
    }
}
