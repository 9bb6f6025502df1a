//! `sheaf check`: is this cluster's backup of record healthy now? The repository reachable and
//! writable and of this cluster, archiving working end to end (a segment switched and seen
//! arriving), the newest backup young enough, no gap in the WAL since it, and none in what older
//! backups need (retention's removals told apart, as verify does). Each finding is
//! ok, warning or critical, the worst sets the exit (Nagios's 0, 1, 2); nothing here fails as
//! an error: what cannot be checked is itself a finding.

use std::time::{Duration, Instant};

use crate::repo::Repo;
use serde::Serialize;

use crate::cluster::walname::WalFile;
use crate::connect::server::Server;
use crate::repo::inventory::{missing, Inventory};
use crate::repo::paths;
use crate::repo::records::Found;
use sheaf_core::repo::Place;

/// How bad a finding is; the order is the exit code's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Nothing to do.
    Ok,
    /// Look at it soon.
    Warning,
    /// The backups cannot be relied on now.
    Critical,
}

impl Status {
    /// `OK`, `WARNING`, `CRITICAL`, as Nagios prints them.
    pub fn word(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Warning => "WARNING",
            Status::Critical => "CRITICAL",
        }
    }
}

/// One thing checked.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    /// What was checked: `repository`, `server`, `archive`, `backup`, `wal`.
    pub check: &'static str,
    /// How it went.
    pub status: Status,
    /// What was found, and the fix when it is not ok.
    pub message: String,
}

/// What `sheaf check` found.
#[derive(Clone, Debug, Serialize)]
pub struct CheckReport {
    /// The worst of the findings.
    pub status: Status,
    /// Every finding, in the order checked.
    pub findings: Vec<Finding>,
}

/// What to hold the cluster to.
#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// The server.
    pub url: String,
    /// The newest backup may be at most this old.
    pub max_age: Duration,
    /// How long to wait for the switched segment to reach the repository.
    pub archive_timeout: Duration,
    /// The newest passing drill may be at most this old; `None`: drills are not checked.
    pub max_drill_age: Option<Duration>,
    /// Now, seconds since the epoch.
    pub now: i64,
    /// A copy of the (first) repository to compare with it (`--compare-repo`): what it lacks is a
    /// warning.
    pub compare: Option<Place>,
}

struct Findings(Vec<Finding>);

impl Findings {
    fn add(&mut self, check: &'static str, status: Status, message: impl Into<String>) {
        self.0.push(Finding { check, status, message: message.into() });
    }
}

/// Check the repositories at `repos` (not opened yet: one that does not open is a finding;
/// several when WAL goes to each) against the server at `opts.url`.
pub fn check(repos: &[Place], opts: &CheckOptions) -> CheckReport {
    let mut f = Findings(Vec::new());
    // Compared before archiving is tested: the segment that test switches is not in the copy yet.
    let mut compared = Findings(Vec::new());
    if let (Some(first), Some(other)) = (repos.first(), &opts.compare) {
        compare_with(first, other, &mut compared);
    }
    run(repos, opts, &mut f);
    f.0.extend(compared.0);
    let status = f.0.iter().map(|x| x.status).max().unwrap_or(Status::Ok);
    CheckReport { status, findings: f.0 }
}

fn run(repos: &[Place], opts: &CheckOptions, f: &mut Findings) {
    // Each repository readable and writable; those that are go on to be checked.
    let mut usable: Vec<Repo> = Vec::new();
    for place in repos {
        let repo = match crate::repo::meta::open(place) {
            Ok(r) => r,
            Err(e) => {
                f.add("repository", Status::Critical, format!("cannot read the repository at {}: {e}", place.display()));
                continue;
            }
        };
        let probe = format!("check/{}-{}.probe", std::process::id(), sheaf_core::time::now_ms());
        match repo.put_json(&probe, &serde_json::json!({ "written_by": "sheaf check" }), true).and_then(|()| repo.delete(&probe)) {
            Ok(()) => f.add("repository", Status::Ok, format!("{} is reachable and writable (cluster {})", repo.display(), repo.meta().system_identifier)),
            Err(e) => f.add("repository", Status::Critical, format!("cannot write to the repository at {}: {e}; backups and wal-push will fail the same way", repo.display())),
        }
        if let Some(who) = place.credentials() {
            f.add("credentials", Status::Ok, format!("{}: {who}", repo.display()));
        }
        usable.push(repo);
    }
    let server = Server::connect(&opts.url).and_then(|mut s| s.archiver().map(|a| (s, a)));
    let (mut server, archiver) = match server {
        Ok(x) => x,
        Err(e) => {
            f.add("server", Status::Critical, e.to_string());
            for repo in &usable {
                backups(repo, opts, f);
            }
            return;
        }
    };
    if let Err(e) = server.supported() {
        f.add("server", Status::Critical, e.to_string());
    }
    let (ours, foreign): (Vec<_>, Vec<_>) = usable.into_iter().partition(|r| r.meta().system_identifier == archiver.system_identifier);
    for repo in &foreign {
        f.add("server", Status::Critical, crate::repo::histories::not_recorded(repo, "the server", archiver.system_identifier).to_string());
    }
    if ours.is_empty() {
        return;
    }
    let targets: Vec<&Repo> = ours.iter().collect();
    archive(&targets, &mut server, &archiver, opts, f);
    for repo in &ours {
        backups(repo, opts, f);
    }
}

/// What the copy at `other` lacks of the repository at `place` ([`crate::maintain::copy::compare`]).
fn compare_with(place: &Place, other: &Place, f: &mut Findings) {
    let compared = crate::repo::meta::open(place).and_then(|a| crate::repo::meta::open(other).and_then(|b| crate::maintain::copy::compare(&a, &b)));
    match compared {
        Err(e) => f.add("copy", Status::Critical, format!("cannot compare {} with {}: {e}", place.display(), other.display())),
        Ok(c) if c.complete() => f.add(
            "copy",
            Status::Ok,
            format!(
                "{} holds every backup and WAL file {} holds{}",
                other.display(),
                place.display(),
                if c.extra_backups.is_empty() {
                    String::new()
                } else {
                    format!(", and {} more ({})", c.extra_backups.len(), c.extra_backups.iter().map(|i| i.as_str()).collect::<Vec<_>>().join(", "))
                }
            ),
        ),
        Ok(c) => f.add(
            "copy",
            Status::Warning,
            format!(
                "{} lacks {} that {} holds: sheaf copy --repo {} --to-repo {} --all",
                other.display(),
                [
                    (!c.missing_backups.is_empty()).then(|| format!(
                        "{} backup(s) ({})",
                        c.missing_backups.len(),
                        c.missing_backups.iter().map(|i| i.as_str()).collect::<Vec<_>>().join(", ")
                    )),
                    (c.missing_wal_count > 0).then(|| format!("{} WAL file(s) (the first {})", c.missing_wal_count, c.missing_wal.first().map_or("", String::as_str))),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(" and "),
                place.display(),
                place.display(),
                other.display()
            ),
        ),
    }
}

/// Archiving, end to end: a segment switched on the server and waited for in the repository.
fn archive(repos: &[&Repo], server: &mut Server, a: &crate::connect::server::Archiver, opts: &CheckOptions, f: &mut Findings) {
    let command = if a.library.is_empty() { format!("archive_command = '{}'", a.command) } else { format!("archive_library = '{}'", a.library) };
    if a.mode == "off" {
        return f.add("archive", Status::Critical, "archive_mode is off: no WAL reaches the repository, so no backup can be restored past its end; set archive_mode = on and archive_command = 'sheaf wal-push %p', and restart");
    }
    if a.in_recovery {
        return f.add(
            "archive",
            Status::Warning,
            "the server is a standby: it cannot switch segments, so archiving was not tested end to end; run sheaf check against the primary",
        );
    }
    let segment = match server.switch_wal_named() {
        Ok(s) => s,
        Err(e) => return f.add("archive", Status::Critical, format!("cannot test archiving: {e}")),
    };
    // The segment, waited for in every repository: archived means archived in each.
    let t0 = Instant::now();
    let mut waiting: Vec<&Repo> = repos.to_vec();
    while !waiting.is_empty() {
        let mut still = Vec::new();
        for repo in waiting {
            match repo.exists(&paths::wal_object(&segment)) {
                Ok(true) => f.add("archive", Status::Ok, format!("{segment}, switched now, reached {} in {:.1} s ({command})", repo.display(), t0.elapsed().as_secs_f64())),
                Ok(false) => still.push(repo),
                Err(e) => f.add("archive", Status::Critical, format!("cannot look for {segment} in {}: {e}", repo.display())),
            }
        }
        waiting = still;
        if waiting.is_empty() {
            break;
        }
        if t0.elapsed() >= opts.archive_timeout {
            // pg_stat_archiver as it is now: a failure to archive the switched segment came after
            // the first look.
            let now = server.archiver().ok();
            let a = now.as_ref().unwrap_or(a);
            let failing = if a.last_failed_wal.is_empty() {
                String::new()
            } else {
                format!("; pg_stat_archiver: {} failure(s), the last on {} at {}", a.failed_count, a.last_failed_wal, sheaf_core::time::utc(a.last_failed_time))
            };
            for repo in waiting {
                f.add(
                    "archive",
                    Status::Critical,
                    format!(
                        "{segment}, switched now, did not reach {} within {} s ({command}{failing}): is archive_command pointed at this repository, and does it succeed? The server log says why it fails",
                        repo.display(),
                        opts.archive_timeout.as_secs()
                    ),
                );
            }
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The drills (`sheaf drill`): the last one failed is critical; no passing one within `max` a
/// warning.
fn drills(s: &crate::repo::drills::DrillSummary, max: Duration, now: i64, f: &mut Findings) {
    let max_s = max.as_secs() as i64;
    match (&s.last, &s.last_passed) {
        (None, _) => f.add("drill", Status::Warning, format!("no backup was ever drilled: run sheaf drill (daily, within --max-drill-age {})", sheaf_core::time::span(max_s))),
        (Some(last), _) if !last.passed => f.add(
            "drill",
            Status::Critical,
            format!(
                "the last drill ({}, of backup {}) failed: {}; sheaf info --repo shows it, sheaf drill --set {} --keep leaves the cluster to look at",
                last.id,
                last.backup,
                last.failure.as_deref().unwrap_or("a check failed"),
                last.backup
            ),
        ),
        (Some(_), Some(ok)) if now - ok.ended_unix > max_s => f.add(
            "drill",
            Status::Warning,
            format!(
                "the newest passing drill ({}, of backup {}) ended {} ago: older than --max-drill-age {}; is the drill job running?",
                ok.id,
                ok.backup,
                sheaf_core::time::span(now - ok.ended_unix),
                sheaf_core::time::span(max_s)
            ),
        ),
        (Some(_), Some(ok)) => f.add(
            "drill",
            Status::Ok,
            format!(
                "the newest drill ({}, of backup {}) passed {} ago; the recovery took {:.1} s",
                ok.id,
                ok.backup,
                sheaf_core::time::span(now - ok.ended_unix),
                ok.phases.total_seconds
            ),
        ),
        (Some(_), None) => f.add("drill", Status::Warning, "no drill has passed yet"),
    }
}

/// The newest backup's age, unfinished backups, and the WAL since the newest backup, each
/// finding naming the repository it is about.
/// After pg_upgrade, each older history too ([`older_history`]).
fn backups(repo: &Repo, opts: &CheckOptions, f: &mut Findings) {
    let mut here = Findings(Vec::new());
    backups_in(repo, opts, &mut here);
    match crate::repo::histories::all(repo) {
        Ok(all) => {
            for h in all.iter().filter(|h| h.number != repo.meta().history) {
                older_history(h, &mut here);
            }
        }
        Err(e) => here.add("history", Status::Critical, format!("cannot read the repository's histories: {e}")),
    }
    for x in here.0 {
        f.add(x.check, x.status, format!("{}: {}", repo.display(), x.message));
    }
}

/// A history an upgrade left behind: its backups restore the old cluster, so the WAL each needs
/// must be there (what retention removed on purpose aside); no age applies.
fn older_history(h: &crate::repo::histories::History, f: &mut Findings) {
    let what = h.describe();
    let inv = match Inventory::take(&h.repo) {
        Ok(i) => i,
        Err(e) => return f.add("history", Status::Critical, format!("{what}: cannot list its backups: {e}")),
    };
    let seg = h.repo.meta().wal_segment_size;
    let records: Vec<_> = inv.found.iter().filter_map(Found::record).collect();
    let short: Vec<String> = records
        .iter()
        .filter_map(|r| inv.needs.missing(&inv.files, r, seg).filter(|m| !m.is_empty()).map(|m| format!("{} ({} missing, the first {})", r.id, m.len(), m[0])))
        .collect();
    if short.is_empty() {
        f.add("history", Status::Ok, format!("{what}, upgraded since: {} backup(s), with the WAL each needs ({} files)", records.len(), inv.files.len()));
    } else {
        f.add("history", Status::Warning, format!("{what}, upgraded since: WAL its backups need is missing: {}; sheaf verify --repo names every segment", short.join(", ")));
    }
}

fn backups_in(repo: &Repo, opts: &CheckOptions, f: &mut Findings) {
    let meta = repo.meta();
    let inv = match Inventory::take(repo) {
        Ok(i) => i,
        Err(e) => return f.add("backup", Status::Critical, format!("cannot list the repository's backups: {e}")),
    };
    let crashed: Vec<&str> = inv.found.iter().filter_map(|x| if let Found::Unfinished { id, running: false, .. } = x { Some(id.as_str()) } else { None }).collect();
    if !crashed.is_empty() {
        f.add(
            "backup",
            Status::Warning,
            format!("unfinished backup(s) left by a crash: {}; the next full backup resumes the newest (sheaf expire removes them)", crashed.join(", ")),
        );
    }
    let Some(newest) = inv.found.iter().filter_map(Found::record).max_by_key(|r| r.stop_unix) else {
        if meta.history > 1 {
            return f.add(
                "backup",
                Status::Critical,
                format!("the repository holds no backup of cluster {} (history {}, since pg_upgrade): take a full backup now (sheaf backup URL --repo ...); the older histories' backups restore the old cluster only", meta.system_identifier, meta.history),
            );
        }
        return f.add("backup", Status::Critical, "the repository holds no backup: take one (sheaf backup URL --repo ...)");
    };
    let age = opts.now - newest.stop_unix;
    let max = opts.max_age.as_secs() as i64;
    let what = format!("the newest backup, {} ({}), ended {} ago", newest.id, newest.backup_type.name(), sheaf_core::time::span(age));
    if age > max {
        f.add("backup", Status::Critical, format!("{what}: older than --max-age {}; is the backup job running?", sheaf_core::time::span(max)));
    } else {
        f.add("backup", Status::Ok, what);
    }
    // In a locked repository the newest backup must still be locked: else nothing is protected.
    if let Some(l) = &meta.lock {
        match newest.locked_until {
            Some(u) if u > opts.now => f.add("lock", Status::Ok, format!("{} is locked until {} ({} mode)", newest.id, sheaf_core::time::utc(u), l.mode)),
            Some(u) => f.add(
                "lock",
                Status::Warning,
                format!(
                    "the newest backup's lock ran out at {}: anyone with the repository's credentials can delete every backup; take a backup (each one is locked for {} days)",
                    sheaf_core::time::utc(u),
                    l.days
                ),
            ),
            None => f.add("lock", Status::Warning, format!("the newest backup, {}, was written without a lock (by a sheaf that knows none?): it can be deleted", newest.id)),
        }
    }
    if let Some(max) = opts.max_drill_age {
        drills(&inv.drills, max, opts.now, f);
    }
    // The WAL from the newest backup's start to the newest archived segment of its timeline.
    let seg = meta.wal_segment_size;
    let Some(start) = WalFile::parse(&newest.start_wal, seg) else { return };
    let last = inv.files.iter().map(|(w, _)| w).filter(|w| w.timeline == start.timeline && w.kind == crate::cluster::walname::WalKind::Segment).map(|w| w.segno).max();
    match last {
        None => f.add("wal", Status::Critical, format!("no WAL of timeline {} is archived: {} cannot be restored", start.timeline, newest.id)),
        Some(last) => {
            let gap = missing(&inv.files, start.timeline, start.segno, last, seg);
            if gap.is_empty() {
                f.add(
                    "wal",
                    Status::Ok,
                    format!(
                        "no gap in the WAL from {} to {} ({} segments)",
                        newest.start_wal,
                        crate::cluster::walname::segment_name(start.timeline, last, seg),
                        last + 1 - start.segno
                    ),
                );
            } else {
                f.add(
                    "wal",
                    Status::Critical,
                    format!("{} segment(s) missing since the newest backup's start, the first {}: recovery cannot pass it; take a new backup", gap.len(), gap[0]),
                );
            }
        }
    }
    // Older backups: WAL they need that is missing is a real gap (what retention removed on
    // purpose, before its horizon, is not), as verify and the metrics count it.
    let older: Vec<String> = inv
        .found
        .iter()
        .filter_map(Found::record)
        .filter(|r| r.id != newest.id)
        .filter_map(|r| inv.needs.missing(&inv.files, r, seg).filter(|m| !m.is_empty()).map(|m| format!("{} ({} missing, the first {})", r.id, m.len(), m[0])))
        .collect();
    if !older.is_empty() {
        f.add(
            "wal",
            Status::Warning,
            format!("WAL that older backups need is missing: {}: point-in-time recovery from them cannot pass the gap; sheaf verify --repo names every segment", older.join(", ")),
        );
    }
    if let Some(h) = &inv.needs.horizon {
        if !inv.expired.is_empty() {
            f.add("wal", Status::Ok, format!("WAL before {} removed by retention (sheaf expire, {}), not missing: pinned backups keep their own span", h.first_kept, h.set_at));
        }
    }
}
