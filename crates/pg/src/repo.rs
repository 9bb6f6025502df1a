//! A PostgreSQL cluster's repository: what `repo.json` and a backup's record say, backups written
//! into it, and the view of it that `sheaf info`, `sheaf expire` and point-in-time recovery read.
//! The places and bytes are [`sheaf_core::repo`]'s; this module gives them PostgreSQL's meaning.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sheaf_core::repo::Repo;
use sheaf_core::{BackupOptions, Error, ErrorKind, Progress, Result};

use crate::archive::{self, WalFile, WalKind};
use crate::backup::{backup_postgres, PgBackupOptions, PgBackupReport};
use crate::server::{parse_lsn, Server};

/// Repository format this sheaf writes.
pub const REPO_FORMAT: u32 = 1;

/// `repo.json` of a PostgreSQL repository.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RepoMeta {
    /// Layout version.
    pub format: u32,
    /// `postgres`.
    pub kind: String,
    /// The cluster it belongs to.
    pub system_identifier: String,
    /// WAL segment size of that cluster.
    pub wal_segment_size: u64,
    /// Server version at creation.
    pub server_version: String,
    /// When it was created (UTC).
    pub created: String,
}

/// A finished backup in the repository (`backups/ID.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BackupRecord {
    /// The repository's name for it, `YYYYMMDD-HHMMSSZ` of its start.
    pub id: String,
    /// The set's backup id.
    pub backup_id: String,
    /// Free text.
    pub label: Option<String>,
    /// Start and stop, UTC, by this host's clock (the database host's).
    pub start_time: String,
    /// See `start_time`.
    pub stop_time: String,
    /// Seconds since the epoch.
    pub start_unix: i64,
    /// Seconds since the epoch.
    pub stop_unix: i64,
    /// The stop in milliseconds since the epoch, taken after the backup ended: a target time at or
    /// after it is consistent with this backup.
    pub stop_ms: i64,
    /// Where WAL replay starts (the checkpoint's redo point) and where the copy is consistent.
    pub start_lsn: String,
    /// See `start_lsn`.
    pub stop_lsn: String,
    /// Timeline it was taken on.
    pub timeline: u32,
    /// First WAL segment it needs.
    pub start_wal: String,
    /// Last WAL segment it needs to be consistent.
    pub stop_wal: String,
    /// Bytes read from the cluster.
    pub bytes_read: u64,
    /// Bytes stored.
    pub bytes_written: u64,
    /// Codec.
    pub compression: String,
    /// Stripes, relative to the repository.
    pub stripes: Vec<String>,
    /// Server version.
    pub server_version: String,
}

impl BackupRecord {
    /// Where it is consistent.
    pub fn stop_lsn(&self) -> u64 {
        parse_lsn(&self.stop_lsn).unwrap_or(u64::MAX)
    }
    /// Stored / read.
    pub fn ratio(&self) -> f64 {
        if self.bytes_written == 0 {
            0.0
        } else {
            self.bytes_read as f64 / self.bytes_written as f64
        }
    }
}

/// What a backup being written leaves at `backups/ID.lock`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BackupLock {
    /// Repository id of the backup.
    pub id: String,
    /// Host name.
    pub host: String,
    /// Process id on that host.
    pub pid: u32,
    /// Start, seconds since the epoch.
    pub start_unix: i64,
}

/// Open the repository at `repo` and read what it holds.
///
/// # Errors
/// No repository there (naming `sheaf init`), one of another kind or a newer format.
pub fn open(repo: &Repo) -> Result<RepoMeta> {
    let meta: RepoMeta = repo.meta()?;
    if meta.kind != "postgres" {
        return Err(Error::invalid(format!("{} is a repository of {}, not of a PostgreSQL cluster", repo.display(), meta.kind)));
    }
    if meta.format > REPO_FORMAT {
        return Err(Error::invalid(format!(
            "{} was written by a newer sheaf (repository format {}, this one knows {REPO_FORMAT}): upgrade sheaf",
            repo.display(),
            meta.format
        )));
    }
    Ok(meta)
}

/// Create a repository for the cluster at `url`.
///
/// # Errors
/// Connection problems, a place that is not empty.
pub fn init(repo: &Repo, url: &str) -> Result<RepoMeta> {
    let mut server = Server::connect(url)?;
    let facts = server.check()?;
    let meta = RepoMeta {
        format: REPO_FORMAT,
        kind: "postgres".into(),
        system_identifier: facts.system_identifier,
        wal_segment_size: facts.wal_segment_size,
        server_version: facts.version,
        created: sheaf_core::time::utc_now(),
    };
    repo.init(&meta)?;
    Ok(meta)
}

/// The refusal for a file of another cluster.
pub fn foreign(repo: &Repo, meta: &RepoMeta, what: &str, theirs: &str) -> Error {
    Error::invalid(format!(
        "{what} is of cluster {theirs}, but the repository at {} holds cluster {}: each cluster needs a repository of its own (sheaf init --repo NEW_PLACE ...); check --repo, SHEAF_REPO or the config file",
        repo.display(),
        meta.system_identifier
    ))
}

fn now_unix() -> i64 {
    sheaf_core::time::now_ms().div_euclid(1000)
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_string()).unwrap_or_else(|_| "localhost".into())
}

/// Back up the cluster at `pg.url` into the repository, `stripes` stripes under `backups/ID/`; the
/// record is published only after every stripe is. `opts.targets` is ignored.
///
/// # Errors
/// A cluster other than the repository's (before anything is written), and everything
/// [`backup_postgres`] refuses. A failed backup leaves no record and no lock.
pub fn backup_to_repo(
    repo: &Repo,
    meta: &RepoMeta,
    pg: &PgBackupOptions,
    opts: &BackupOptions,
    stripes: usize,
    progress: Arc<dyn Progress>,
) -> Result<(PgBackupReport, BackupRecord)> {
    if !(1..=64).contains(&stripes) {
        return Err(Error::invalid(format!("--stripes {stripes}: give 1 to 64")));
    }
    let start_unix = now_unix();
    let mut id = compact_time(start_unix);
    if repo.exists(&format!("backups/{id}.json"))? || repo.exists(&format!("backups/{id}.lock"))? {
        id = format!("{id}-{}", std::process::id());
    }
    let names: Vec<String> = (1..=stripes).map(|k| format!("backups/{id}/{id}_{k}.sheaf")).collect();
    let mut opts = opts.clone();
    opts.targets = names.iter().map(|n| repo.location(n)).collect();
    // The repository's KDF, with a data key of the backup's own.
    opts.encryption = repo.encryption()?;
    for n in &names {
        repo.prepare(n)?;
    }
    let mut pg = pg.clone();
    pg.expect_system_identifier = Some(meta.system_identifier.clone());
    let lock = BackupLock { id: id.clone(), host: host_name(), pid: std::process::id(), start_unix };
    repo.put_json(&format!("backups/{id}.lock"), &lock, false)?;
    let result = backup_postgres(&pg, &opts, progress);
    let result = result.and_then(|r| {
        let p = &r.postgres;
        let s = |k: &str| p.get(k).and_then(|v| v.as_str()).unwrap_or_default().to_string();
        let stop_ms = sheaf_core::time::now_ms();
        let stop_unix = stop_ms / 1000;
        let record = BackupRecord {
            id: id.clone(),
            backup_id: r.report.backup_id.clone(),
            label: r.report.label.clone(),
            start_time: sheaf_core::time::utc(start_unix),
            stop_time: sheaf_core::time::utc(stop_unix),
            start_unix,
            stop_unix,
            stop_ms,
            start_lsn: s("start_lsn"),
            stop_lsn: s("stop_lsn"),
            timeline: p.get("timeline").and_then(|v| v.as_u64()).unwrap_or(1) as u32,
            start_wal: s("start_wal_file"),
            stop_wal: s("stop_wal_file"),
            bytes_read: r.report.bytes_read,
            bytes_written: r.report.bytes_written,
            compression: r.report.compression.clone(),
            stripes: names.clone(),
            server_version: s("server_version"),
        };
        repo.put_json(&format!("backups/{id}.json"), &record, false)?;
        Ok((r, record))
    });
    if result.is_err() {
        for n in &names {
            let _ = repo.delete(n);
        }
        repo.prune(&format!("backups/{id}"));
    }
    let _ = repo.delete(&format!("backups/{id}.lock"));
    result
}

/// `20261122-101500Z` for a time in seconds since the epoch.
pub fn compact_time(unix: i64) -> String {
    let t = sheaf_core::time::utc(unix); // 2026-11-22T10:15:00Z
    format!("{}{}{}-{}{}{}Z", &t[0..4], &t[5..7], &t[8..10], &t[11..13], &t[14..16], &t[17..19])
}

/// A backup found in the repository.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum Found {
    /// Finished: its record.
    Complete(Box<BackupRecord>),
    /// Being written, or left by a crash: its lock, if any, and its objects.
    Unfinished {
        /// Repository id.
        id: String,
        /// The lock, when it is still there.
        lock: Option<BackupLock>,
        /// Whether its writer still runs (same host, live pid) or started less than a day ago on
        /// another host.
        running: bool,
        /// Its objects (stripes, lock).
        objects: Vec<String>,
    },
}

/// Every backup in the repository, oldest first.
///
/// # Errors
/// When the repository cannot be listed or a record cannot be read.
pub fn backups(repo: &Repo) -> Result<Vec<Found>> {
    let listed = repo.list("backups/")?;
    let mut ids: Vec<String> = Vec::new();
    for o in &listed {
        let rest = &o.name["backups/".len()..];
        let id = rest.split(['/', '.']).next().unwrap_or_default();
        if !id.is_empty() && !ids.iter().any(|i| i == id) {
            ids.push(id.to_string());
        }
    }
    ids.sort();
    let mut out = Vec::new();
    for id in ids {
        let has = |suffix: &str| listed.iter().any(|o| o.name == format!("backups/{id}{suffix}"));
        if has(".json") {
            out.push(Found::Complete(Box::new(repo.get_json(&format!("backups/{id}.json"))?)));
            continue;
        }
        let lock: Option<BackupLock> = if has(".lock") { repo.get_json(&format!("backups/{id}.lock")).ok() } else { None };
        let running = lock.as_ref().is_some_and(|l| {
            if l.host == host_name() {
                // SAFETY: signal 0 only asks whether the process exists.
                unsafe { libc::kill(l.pid as i32, 0) == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM) }
            } else {
                now_unix() - l.start_unix < 86_400
            }
        });
        let objects = listed
            .iter()
            .filter(|o| o.name.starts_with(&format!("backups/{id}/")) || o.name.starts_with(&format!("backups/{id}.")))
            .map(|o| o.name.clone())
            .collect();
        out.push(Found::Unfinished { id, lock, running, objects });
    }
    Ok(out)
}

/// The finished backups, oldest first.
///
/// # Errors
/// As [`backups`].
pub fn complete(repo: &Repo) -> Result<Vec<BackupRecord>> {
    Ok(backups(repo)?
        .into_iter()
        .filter_map(|f| match f {
            Found::Complete(r) => Some(*r),
            Found::Unfinished { .. } => None,
        })
        .collect())
}

/// Every archived WAL file, by name order.
///
/// # Errors
/// When the repository cannot be listed.
pub fn archived(repo: &Repo, meta: &RepoMeta) -> Result<Vec<(WalFile, u64)>> {
    let mut out = Vec::new();
    for o in repo.list("wal/")? {
        let Some(name) = o.name.rsplit('/').next().and_then(|n| n.strip_suffix(".wal")) else { continue };
        if let Some(w) = WalFile::parse(name, meta.wal_segment_size) {
            out.push((w, o.size));
        }
    }
    out.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    Ok(out)
}

/// A run of consecutive segments on one timeline.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct WalRange {
    /// Timeline.
    pub timeline: u32,
    /// First segment.
    pub first: String,
    /// Last segment.
    pub last: String,
    /// Segments in it.
    pub segments: u64,
}

/// Consecutive runs of full segments per timeline, in order; a gap lies between two runs of one
/// timeline.
pub fn ranges(files: &[(WalFile, u64)]) -> Vec<WalRange> {
    let mut segs: Vec<&WalFile> = files.iter().map(|(w, _)| w).filter(|w| w.kind == WalKind::Segment).collect();
    segs.sort_by_key(|w| (w.timeline, w.segno));
    let mut out: Vec<WalRange> = Vec::new();
    let mut last: Option<&WalFile> = None;
    for w in segs {
        match (last, out.last_mut()) {
            (Some(p), Some(r)) if p.timeline == w.timeline && p.segno + 1 == w.segno => {
                r.last = w.name.clone();
                r.segments += 1;
            }
            _ => out.push(WalRange { timeline: w.timeline, first: w.name.clone(), last: w.name.clone(), segments: 1 }),
        }
        last = Some(w);
    }
    out
}

/// The segments missing between `from` and `to` (inclusive) on `timeline`, given what is archived.
pub fn missing(files: &[(WalFile, u64)], timeline: u32, from: u64, to: u64, seg_size: u64) -> Vec<String> {
    let have: std::collections::HashSet<(u32, u64)> =
        files.iter().filter(|(w, _)| w.kind == WalKind::Segment).map(|(w, _)| (w.timeline, w.segno)).collect();
    (from..=to).filter(|s| !have.contains(&(timeline, *s))).map(|s| archive::segment_name(timeline, s, seg_size)).collect()
}

/// What to keep and what to remove.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ExpirePlan {
    /// Backups kept.
    pub kept: Vec<String>,
    /// Finished backups removed.
    pub removed: Vec<String>,
    /// Unfinished backups removed (left by a crash).
    pub unfinished: Vec<String>,
    /// Unfinished backups left alone because their writer still runs.
    pub running: Vec<String>,
    /// WAL files removed.
    pub wal_removed: u64,
    /// Their bytes.
    pub wal_bytes: u64,
    /// First WAL segment kept (the oldest kept backup's start).
    pub wal_kept_from: Option<String>,
    /// Objects removed (or that would be, on a dry run).
    pub objects: Vec<String>,
    /// Bytes removed.
    pub bytes: u64,
}

/// Retention: how much to keep.
#[derive(Clone, Debug, Default)]
pub struct Retention {
    /// Keep the newest N finished backups.
    pub keep_full: Option<usize>,
    /// Keep what recovers to any moment in the last this many seconds: the backups that end
    /// inside it and the newest one before it.
    pub keep_within: Option<i64>,
}

/// Decide what `expire` removes. Never the newest finished backup, nor WAL a kept backup needs
/// (from the oldest kept backup's start onwards, every timeline); history files always stay.
///
/// # Errors
/// No retention given; the repository cannot be read.
pub fn plan_expire(repo: &Repo, meta: &RepoMeta, keep: &Retention, now: i64) -> Result<ExpirePlan> {
    if keep.keep_full.is_none() && keep.keep_within.is_none() {
        return Err(Error::invalid("say what to keep: --keep-full N (the newest N backups) and/or --keep-within DURATION (e.g. 14d)"));
    }
    if keep.keep_full == Some(0) {
        return Err(Error::invalid("--keep-full 0 would remove every backup: keep at least 1"));
    }
    let found = backups(repo)?;
    let done: Vec<&BackupRecord> = found
        .iter()
        .filter_map(|f| match f {
            Found::Complete(r) => Some(r.as_ref()),
            Found::Unfinished { .. } => None,
        })
        .collect();
    let mut keep_ids = std::collections::BTreeSet::new();
    if let Some(n) = keep.keep_full {
        for r in done.iter().rev().take(n) {
            keep_ids.insert(r.id.clone());
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
        if let Some(r) = done.iter().rev().find(|r| r.stop_unix < edge) {
            keep_ids.insert(r.id.clone());
        }
    }
    if let Some(r) = done.last() {
        keep_ids.insert(r.id.clone());
    }
    let mut plan = ExpirePlan::default();
    let listed = repo.list("backups/")?;
    let size_of = |n: &str| listed.iter().find(|o| o.name == n).map_or(0, |o| o.size);
    for f in &found {
        match f {
            Found::Complete(r) if keep_ids.contains(&r.id) => plan.kept.push(r.id.clone()),
            Found::Complete(r) => {
                plan.removed.push(r.id.clone());
                for s in &r.stripes {
                    plan.bytes += size_of(s);
                    plan.objects.push(s.clone());
                }
                // The record goes last, so a crash midway leaves an unfinished backup, which the
                // next expire removes, never a record without its stripes.
                plan.objects.push(format!("backups/{}.json", r.id));
            }
            Found::Unfinished { id, running: true, .. } => plan.running.push(id.clone()),
            Found::Unfinished { id, objects, .. } => {
                plan.unfinished.push(id.clone());
                for o in objects {
                    plan.bytes += size_of(o);
                }
                let (locks, rest): (Vec<&String>, Vec<&String>) = objects.iter().partition(|o| o.ends_with(".lock"));
                plan.objects.extend(rest.into_iter().cloned());
                plan.objects.extend(locks.into_iter().cloned());
            }
        }
    }
    let kept: Vec<&&BackupRecord> = done.iter().filter(|r| keep_ids.contains(&r.id)).collect();
    let seg = meta.wal_segment_size;
    // Running backups need WAL from their start, which is after every finished one's: nothing to
    // add. With no finished backup kept there is nothing to anchor WAL to: keep all of it.
    let oldest = kept.iter().filter_map(|r| WalFile::parse(&r.start_wal, seg)).min_by_key(|w| w.segno);
    if let Some(oldest) = oldest {
        plan.wal_kept_from = Some(oldest.name.clone());
        for (w, size) in archived(repo, meta)? {
            if w.kind != WalKind::History && w.segno < oldest.segno {
                plan.wal_removed += 1;
                plan.wal_bytes += size;
                plan.bytes += size;
                plan.objects.push(archive::object_name(&w.name));
            }
        }
    }
    Ok(plan)
}

/// Carry out a plan: remove its objects in order, then empty folders.
///
/// # Errors
/// The first object that cannot be removed (what was removed before it stays removed; running
/// expire again finishes the work).
pub fn expire(repo: &Repo, plan: &ExpirePlan) -> Result<()> {
    for o in &plan.objects {
        repo.delete(o).map_err(|e| e.context("expire stopped; run it again to finish"))?;
    }
    for id in plan.removed.iter().chain(&plan.unfinished) {
        repo.prune(&format!("backups/{id}"));
    }
    Ok(())
}

/// The newest finished backup, or the one named.
///
/// # Errors
/// None there, or no such id (listing those there are).
pub fn pick<'a>(records: &'a [BackupRecord], id: &str) -> Result<&'a BackupRecord> {
    if id == "latest" {
        return records.last().ok_or_else(|| Error::new(ErrorKind::Incomplete, "the repository holds no finished backup: take one with sheaf backup --repo"));
    }
    records.iter().find(|r| r.id == id || r.backup_id == id).ok_or_else(|| {
        Error::invalid(format!(
            "no backup {id} in the repository; it holds: {}",
            if records.is_empty() { "none".to_string() } else { records.iter().map(|r| r.id.as_str()).collect::<Vec<_>>().join(", ") }
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_sort_by_time() {
        assert_eq!(compact_time(1_795_257_045), "20261121-103045Z");
    }

    #[test]
    fn ranges_and_gaps() {
        let seg = 16 << 20;
        let mk = |t: u32, s: u64| (WalFile::parse(&archive::segment_name(t, s, seg), seg).unwrap(), 1u64);
        let files = vec![mk(1, 3), mk(1, 4), mk(1, 6), mk(2, 6), mk(2, 7)];
        let r = ranges(&files);
        assert_eq!(r.len(), 3);
        assert_eq!((r[0].segments, r[1].segments, r[2].segments), (2, 1, 2));
        assert_eq!(missing(&files, 1, 3, 6, seg), vec![archive::segment_name(1, 5, seg)]);
    }
}

#[cfg(test)]
mod expire_tests {
    use super::*;
    use sheaf_core::repo::Repo;
    use sheaf_core::LocalOnly;

    fn record(id: &str, stop_unix: i64, start_wal: &str) -> BackupRecord {
        BackupRecord {
            id: id.into(),
            backup_id: format!("{id}-set"),
            label: None,
            start_time: String::new(),
            stop_time: String::new(),
            start_unix: stop_unix - 10,
            stop_unix,
            stop_ms: stop_unix * 1000,
            start_lsn: "0/0".into(),
            stop_lsn: "0/0".into(),
            timeline: 1,
            start_wal: start_wal.into(),
            stop_wal: start_wal.into(),
            bytes_read: 0,
            bytes_written: 0,
            compression: "zstd:low".into(),
            stripes: vec![format!("backups/{id}/{id}_1.sheaf")],
            server_version: String::new(),
        }
    }

    #[test]
    fn expire_spares_a_running_backup_and_removes_one_left_by_a_crash() {
        let d = tempfile::tempdir().unwrap();
        let repo = Repo::at(d.path().join("r").to_str().unwrap(), &LocalOnly).unwrap();
        let seg = 16 << 20;
        let meta = RepoMeta { format: 1, kind: "postgres".into(), system_identifier: "1".into(), wal_segment_size: seg, server_version: String::new(), created: String::new() };
        repo.init(&meta).unwrap();
        let put = |name: &str| repo.put(name, &mut &b"x"[..], sheaf_core::CodecSpec::default(), false, name).unwrap();
        for (id, stop, wal) in [("a", 1000, 2u64), ("b", 2000, 4), ("c", 3000, 6)] {
            let r = record(id, stop, &archive::segment_name(1, wal, seg));
            put(&r.stripes[0]);
            repo.put_json(&format!("backups/{id}.json"), &r, false).unwrap();
        }
        for s in 1..=7 {
            put(&archive::object_name(&archive::segment_name(1, s, seg)));
        }
        put(&archive::object_name("00000002.history"));
        // Being written by this very process (alive), and one whose writer is gone.
        let live = BackupLock { id: "d".into(), host: host_name(), pid: std::process::id(), start_unix: 3500 };
        repo.put_json("backups/d.lock", &live, false).unwrap();
        put("backups/d/d_1.sheaf");
        let dead = BackupLock { id: "e".into(), host: host_name(), pid: 0x7fff_fff0, start_unix: 3400 };
        repo.put_json("backups/e.lock", &dead, false).unwrap();
        put("backups/e/e_1.sheaf");

        let keep = Retention { keep_full: Some(2), keep_within: None };
        let plan = plan_expire(&repo, &meta, &keep, 4000).unwrap();
        assert_eq!(plan.kept, vec!["b", "c"]);
        assert_eq!(plan.removed, vec!["a"]);
        assert_eq!(plan.running, vec!["d"], "a backup still being written is left alone");
        assert_eq!(plan.unfinished, vec!["e"], "one left by a crash goes");
        assert_eq!(plan.wal_removed, 3, "segments 1..3: before b's start (4)");
        expire(&repo, &plan).unwrap();
        let left: Vec<String> = repo.list("").unwrap().into_iter().map(|o| o.name).collect();
        assert!(left.contains(&"backups/d.lock".to_string()) && left.contains(&"backups/d/d_1.sheaf".to_string()), "{left:?}");
        assert!(!left.iter().any(|n| n.starts_with("backups/e") || n.starts_with("backups/a")), "{left:?}");
        assert!(left.contains(&archive::object_name("00000002.history")), "history stays");
        assert!(left.contains(&archive::object_name(&archive::segment_name(1, 4, seg))));
        assert!(!left.contains(&archive::object_name(&archive::segment_name(1, 3, seg))));

        // Time-based: the window [3500, 4000] holds no backup end; the newest before it (c) stays.
        let keep = Retention { keep_full: None, keep_within: Some(500) };
        let plan = plan_expire(&repo, &meta, &keep, 4000).unwrap();
        assert_eq!(plan.kept, vec!["c"]);
        assert_eq!(plan.removed, vec!["b"]);
        assert!(plan_expire(&repo, &meta, &Retention::default(), 4000).is_err(), "a policy is required");
    }
}
