//! `sheaf drill`: a backup proven by restoring it, not hoped for. The backup (with its chain) is
//! restored into a folder of the drill's own, with archiving off; a server of the backup's major
//! version is started on it on a private socket, recovers through `sheaf wal-fetch` from the same
//! repository to the target, and is checked: every database connectable, `pg_amcheck
//! --heapallindexed` (or the amcheck extension's functions), and the user's own queries. Then it is
//! stopped and the folder removed. Each phase is timed, so the recovery time is measured, not
//! guessed, and the drill is recorded in the repository (`drills/`), with its verdict and first
//! failure. A drill reads the repository and writes only its record there; it never touches the
//! source cluster.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::repo::Repo;
use sheaf_core::stop::{interrupted, Stop};
use sheaf_core::{Error, ErrorKind, Progress, Result, Schemes};

use crate::cluster::lsn::Lsn;
use crate::drill::scratch::{server_bin_for, server_dir, ScratchCluster};
use crate::repo::drills::{drill_object, CheckOutcome, DrillRecord, Phases};
use crate::repo::records::{complete, pick, BackupRecord, BackupRef};
use crate::restore::directory::PgRestoreOptions;
use crate::restore::pitr::Request;

/// Which backup to drill.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pick {
    /// The one named (by default the newest finished backup).
    Named(BackupRef),
    /// One of the finished backups, at random (each night another).
    Random,
}

/// How to drill.
#[derive(Clone, Debug)]
pub struct DrillOptions {
    /// The backup.
    pub pick: Pick,
    /// The recovery target (its `set` is [`DrillOptions::pick`]'s). With no target, the end of the
    /// archive; for a backup before the retention horizon (a pinned one), its consistency point.
    pub request: Request,
    /// The drill's folder: made by the drill (it must not exist, or be empty), removed after it
    /// unless `keep`.
    pub work: PathBuf,
    /// The server's bin directory; else found for the backup's major version.
    pub pg_bin: Option<PathBuf>,
    /// Queries that must each return true.
    pub check_sql: Option<PathBuf>,
    /// The database they run in.
    pub check_db: String,
    /// Leave the server stopped and the folder in place.
    pub keep: bool,
    /// How long recovery may take to reach the target.
    pub timeout: Duration,
    /// Restore threads (the core's default when `None`).
    pub threads: Option<usize>,
    /// Asked (Ctrl-C, SIGTERM), the drill stops where it is: the restore stops, the server is
    /// stopped, the folder removed, and nothing is recorded: an interrupted drill neither passed
    /// nor failed.
    pub stop: Stop,
}

/// Choose the backup: the history holding it (after pg_upgrade, a repository holds one per
/// cluster), and its record. `--random` chooses among every history's.
///
/// # Errors
/// No finished backup, or no such backup.
pub fn choose(repo: &Repo, p: &Pick) -> Result<(Repo, BackupRecord)> {
    match p {
        Pick::Named(which) => crate::repo::histories::first_serving(repo, |h| Ok(pick(&complete(h)?, which).ok().cloned()), |newest| named_missing(newest, which)),
        Pick::Random => {
            // Of those that restore by themselves: not the bases a pinned incremental keeps as its
            // data before the retention horizon, whose own WAL is gone by design.
            let mut able = Vec::new();
            for h in crate::repo::histories::all(repo)? {
                let found = crate::repo::records::backups(&h.repo)?;
                let needs = crate::repo::inventory::WalNeeds::read(&h.repo, &found, sheaf_core::time::now_ms() / 1000)?;
                let seg = h.repo.meta().wal_segment_size;
                let records = complete(&h.repo)?;
                able.extend(records.into_iter().filter(|r| !needs.data_only(r, seg)).map(|r| (h.repo.clone(), r)));
            }
            if able.is_empty() {
                return crate::repo::histories::first_serving(repo, |h| Ok(complete(h)?.pop()), |newest| named_missing(newest, &BackupRef::Latest));
            }
            let seed = sheaf_core::time::now_ms().unsigned_abs() ^ u64::from(std::process::id()).rotate_left(32);
            // splitmix64's finaliser spreads the seed over the records.
            let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            let k = ((z ^ (z >> 31)) % able.len() as u64) as usize;
            Ok(able.swap_remove(k))
        }
    }
}

/// The error for a backup no history holds: what [`pick`] says of the newest history's.
fn named_missing(newest: &Repo, which: &BackupRef) -> Error {
    match complete(newest) {
        Ok(records) => pick(&records, which).err().unwrap_or_else(|| Error::invalid(format!("no backup {which}"))),
        Err(e) => e,
    }
}

fn major_of(version: &str) -> Option<u32> {
    version.split(['.', ' ']).next()?.parse().ok()
}

/// A drill's failure: the phase's error kind and message, kept for the record.
struct Failed(Error);

/// Run a drill of the backup `opts.pick` names. A refusal before anything is restored (no such
/// backup, no server of its version, a repository this user may not write its record into, a
/// folder in use, no room) is an error and no drill; from
/// the restore on, the drill is recorded in the repository whatever happens, and its record
/// returned with the verdict.
///
/// # Errors
/// The refusals above, and a record that cannot be written; [`ErrorKind::Cancelled`] when
/// `opts.stop` was asked (then nothing is recorded, and the folder is removed).
pub fn drill(repo: &Repo, schemes: &dyn Schemes, opts: &DrillOptions, restore_command: impl FnOnce() -> Result<String>, progress: Arc<dyn Progress>) -> Result<DrillRecord> {
    crate::repo::meta::postgres_only(repo, "a PostgreSQL drill")?;
    // Its record is written at the end: a user who may not write it is told before the drill.
    repo.check_writer().map_err(|e| e.context("a drill records itself in the repository"))?;
    // The history holding the backup: its drill's record is kept there, beside the backup.
    let (repo, backup) = choose(repo, &opts.pick)?;
    let repo = &repo;
    let meta = repo.meta();
    let major = major_of(&backup.server_version)
        .ok_or_else(|| Error::corrupt(format!("backup {}: its record names no server version ('{}'), so no server can be chosen to drill it", backup.id, backup.server_version)))?;
    let bin = server_bin_for(major, opts.pg_bin.as_deref())?;
    let mut request = opts.request.clone();
    request.set = Some(BackupRef::Id(backup.id.to_string()));
    // A backup before the retention horizon keeps only the WAL that makes it consistent: with no
    // target asked for, it is drilled to that point.
    let targetless = request.time.is_none() && request.lsn.is_none() && request.name.is_none() && !request.immediate;
    if targetless {
        let horizon = crate::repo::horizon::read(repo)?;
        let stop = crate::cluster::walname::WalFile::parse(&backup.stop_wal, meta.wal_segment_size).map(|w| w.segno);
        if horizon.zip(stop).is_some_and(|(h, s)| s + 1 < h.segno) {
            request.immediate = true;
        }
    }
    let target = describe_target(&request);
    prepare_work(&opts.work)?;
    let data = opts.work.join("data");
    let mut popts = PgRestoreOptions::new(&data);
    popts.archive_off = true;
    popts.tablespaces_under = Some(opts.work.join("tablespaces"));
    popts.core.threads = opts.threads;
    popts.core.stop = opts.stop.clone();

    let mut record = begin(&backup, target);
    // 1. Restore.
    let t0 = Instant::now();
    let restored = crate::restore::pitr::restore(repo, schemes, &request, &popts, restore_command, progress);
    record.phases.restore_seconds = t0.elapsed().as_secs_f64();
    let outcome = match restored {
        // Refusals before a byte was written: no drill took place.
        Err(e) if nothing_written(&data) && matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::NoSpace | ErrorKind::TargetNotEmpty | ErrorKind::Key) => {
            remove_work(&opts.work);
            return Err(e);
        }
        Err(e) => Err(Failed(e.context("restore"))),
        Ok((restored, _plan)) => {
            record.bytes_restored = restored.report.bytes_written;
            run_server(&bin, &data, &backup, opts, &mut record)
        }
    };
    if opts.stop.asked() {
        remove_work(&opts.work);
        return Err(interrupted());
    }
    conclude(repo, record, outcome.err().map(|Failed(e)| e), opts, &data)
}

/// A drill of `backup` to `target` beginning now: its record, nothing measured yet.
pub fn begin(backup: &BackupRecord, target: String) -> DrillRecord {
    let started_ms = sheaf_core::time::now_ms();
    DrillRecord {
        id: drill_id(started_ms),
        backup: backup.id.clone(),
        backup_type: backup.backup_type,
        started_unix: started_ms / 1000,
        ended_unix: 0,
        target,
        reached_lsn: None,
        timeline: None,
        wal_bytes_replayed: None,
        bytes_restored: 0,
        server_version: String::new(),
        phases: Phases::default(),
        checks: Vec::new(),
        passed: false,
        failure: None,
        failure_kind: None,
        host: crate::repo::records::host_name(),
        kept: None,
    }
}

/// A drill's end, whatever the database: its verdict (it passed when nothing failed and every
/// check, of which there is at least one, passed; else the first failure, with the kind the command
/// exits with: `Incomplete` for missing WAL, `Corrupt` otherwise), its total time, the restored
/// data kept (`--keep`) or removed, and its record written into `repo`.
///
/// # Errors
/// The record cannot be written.
pub fn conclude(repo: &Repo, mut record: DrillRecord, failure: Option<Error>, opts: &DrillOptions, data: &Path) -> Result<DrillRecord> {
    if let Some(e) = failure {
        record.failure = Some(e.to_string());
        record.failure_kind = Some(if e.kind() == ErrorKind::Incomplete { ErrorKind::Incomplete } else { ErrorKind::Corrupt });
    }
    record.passed = record.failure.is_none() && !record.checks.is_empty() && record.checks.iter().all(|c| c.ok);
    if record.passed {
        record.failure = None;
    } else if record.failure.is_none() {
        record.failure = record.checks.iter().find(|c| !c.ok).map_or_else(|| Some("no check ran".to_string()), |c| Some(format!("{}: {}", c.check, c.detail)));
        record.failure_kind = Some(ErrorKind::Corrupt);
    }
    record.phases.total_seconds = record.phases.restore_seconds + record.phases.recovery_seconds + record.phases.checks_seconds;
    record.ended_unix = sheaf_core::time::now_ms() / 1000;
    if opts.keep {
        record.kept = Some(data.display().to_string());
    } else {
        remove_work(&opts.work);
    }
    repo.put_json(&drill_object(&record.id, &record.backup), &record, false).map_err(|e| e.context("the drill ran, but its record could not be written"))?;
    Ok(record)
}

/// The error a failed drill exits with: damage found (`Corrupt`), WAL missing (`Incomplete`),
/// else the kind of the phase that failed.
pub fn failure_error(r: &DrillRecord) -> Option<Error> {
    if r.passed {
        return None;
    }
    let why = r.failure.clone().unwrap_or_else(|| "a check failed".into());
    let kind = r.failure_kind.unwrap_or(ErrorKind::Corrupt);
    Some(Error::new(kind, format!("the drill of backup {} failed: {why}", r.backup)))
}

fn describe_target(r: &Request) -> String {
    if let Some(t) = &r.time {
        format!("time {t}")
    } else if let Some(l) = r.lsn {
        format!("lsn {l}")
    } else if let Some(n) = &r.name {
        format!("name {n}")
    } else if r.immediate {
        "immediate".into()
    } else {
        "end of archive".into()
    }
}

/// `20261128-041500.123Z`.
pub fn drill_id(ms: i64) -> String {
    crate::repo::id::stamp(ms)
}

/// Whether the restore wrote nothing into `data` yet (a refusal, not a failed drill).
pub fn nothing_written(data: &Path) -> bool {
    std::fs::read_dir(data).map(|mut d| d.next().is_none()).unwrap_or(true)
}

/// The drill's folder: made here, or an empty one given.
pub fn prepare_work(work: &Path) -> Result<()> {
    match std::fs::read_dir(work).map(|mut d| d.next().is_some()) {
        Ok(true) => {
            return Err(Error::new(
                ErrorKind::TargetNotEmpty,
                format!("{} is not empty: a drill restores into a folder of its own; give --to a new or empty folder", work.display()),
            ))
        }
        Ok(false) => {}
        Err(_) => std::fs::create_dir_all(work).map_err(|e| Error::io(ErrorKind::Target, format!("cannot make the drill's folder {}", work.display()), e))?,
    }
    // The server's user must reach its data directory and socket inside.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(work, std::fs::Permissions::from_mode(0o755)).map_err(|e| Error::io(ErrorKind::Target, format!("cannot set the mode of {}", work.display()), e))
}

/// Remove the drill's folder.
pub fn remove_work(work: &Path) {
    let _ = std::fs::remove_dir_all(work);
}

/// 2. and 3.: start the server on the restore, wait for recovery to reach the target, check.
fn run_server(bin: &Path, data: &Path, backup: &BackupRecord, opts: &DrillOptions, record: &mut DrillRecord) -> std::result::Result<(), Failed> {
    let t0 = Instant::now();
    let work = &opts.work;
    // A configuration kept outside the data directory (Debian's /etc/postgresql) is not in the
    // backup: the drill brings what a start needs, and its own pg_hba.conf (local trust on the
    // private socket, no TCP), whatever the original's authentication.
    if !data.join("postgresql.conf").exists() {
        std::fs::write(data.join("postgresql.conf"), "# Written by sheaf drill: the backup held no postgresql.conf.\n")
            .map_err(|e| Failed(Error::io(ErrorKind::Target, "cannot write postgresql.conf", e)))?;
    }
    let hba = work.join("pg_hba.conf");
    std::fs::write(&hba, "# sheaf drill: the private socket only.\nlocal all all trust\n")
        .map_err(|e| Failed(Error::io(ErrorKind::Target, "cannot write the drill's pg_hba.conf", e)))?;
    // A short socket path (the limit is about 100 bytes), made for the server's user.
    let sock = tempfile::Builder::new().prefix("sheaf-drill.").tempdir().map_err(|e| Failed(Error::io(ErrorKind::Io, "cannot make a socket folder", e)))?;
    server_dir(sock.path()).map_err(Failed)?;
    let user = superuser_name(data);
    let settings = vec![format!("hba_file = '{}'", hba.display()), "archive_mode = off".to_string(), "log_min_messages = warning".to_string()];
    let started = ScratchCluster::over_restore(bin.to_path_buf(), data, sock.path(), &user, &settings, &opts.stop, opts.timeout);
    let mut server = match started {
        Ok(s) => s,
        Err(e) => {
            record.phases.recovery_seconds = t0.elapsed().as_secs_f64();
            return Err(Failed(e));
        }
    };
    let reached = wait_for_recovery(&server, opts.timeout, &opts.stop);
    if let Ok(v) = server.query("postgres", "SELECT version()") {
        record.server_version = v;
    }
    record.phases.recovery_seconds = t0.elapsed().as_secs_f64();
    let result = match reached {
        Err(e) => Err(Failed(e)),
        Ok(()) => {
            // Where replay ended, and the timeline the server now writes (its current segment's).
            let sql = "SELECT coalesce(pg_last_wal_replay_lsn(), pg_current_wal_lsn())::text || ' ' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8)";
            if let Ok(pos) = server.query("postgres", sql) {
                let mut it = pos.split_whitespace();
                if let Some(lsn) = it.next().and_then(|l| l.parse::<Lsn>().ok()) {
                    record.reached_lsn = Some(lsn);
                    record.wal_bytes_replayed = Some(lsn.bytes_since(backup.start_lsn));
                }
                record.timeline = it.next().and_then(|t| u32::from_str_radix(t, 16).ok());
            }
            let t1 = Instant::now();
            record.checks = checks(&server, opts);
            record.phases.checks_seconds = t1.elapsed().as_secs_f64();
            Ok(())
        }
    };
    server.stop();
    drop(sock);
    result
}

/// The bootstrap superuser's name: by default the user who ran initdb, who owns the data
/// directory; `postgres` when that cannot be told.
fn superuser_name(data: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(data.join("PG_VERSION")).map(|m| sheaf_core::host::user_name(m.uid())).ok().filter(|n| !n.starts_with("uid ")).unwrap_or_else(|| "postgres".into())
}

/// Wait until the server has left recovery (it promoted at the target or at the end of the
/// archive), or it stopped, or `timeout` passed, or `stop` was asked.
fn wait_for_recovery(server: &ScratchCluster, timeout: Duration, stop: &Stop) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        match server.query("postgres", "SELECT pg_is_in_recovery()") {
            Ok(v) if v == "f" => return Ok(()),
            _ if !server.alive() => {
                return Err(Error::new(ErrorKind::Incomplete, format!("recovery failed: the server stopped before reaching the target; its log ends:\n{}", server.log_tail(12))))
            }
            _ => {}
        }
        if Instant::now() >= deadline {
            return Err(Error::new(
                ErrorKind::Incomplete,
                format!("recovery did not reach the target within {} s (--timeout); the server log ends:\n{}", timeout.as_secs(), server.log_tail(12)),
            ));
        }
        stop.sleep(Duration::from_millis(200))?;
    }
}

/// 4.: every database connectable, amcheck on every one, the user's queries.
fn checks(server: &ScratchCluster, opts: &DrillOptions) -> Vec<CheckOutcome> {
    let mut out = Vec::new();
    let dbs = match server.query("postgres", "SELECT datname FROM pg_database WHERE datallowconn ORDER BY 1") {
        Ok(list) => list.lines().map(str::to_string).collect::<Vec<_>>(),
        Err(e) => {
            out.push(CheckOutcome { check: "connect postgres".into(), ok: false, detail: e.to_string() });
            return out;
        }
    };
    for db in &dbs {
        if opts.stop.asked() {
            return out;
        }
        match server.query(db, "SELECT 1") {
            Ok(_) => out.push(CheckOutcome { check: format!("connect {db}"), ok: true, detail: "connected".into() }),
            Err(e) => out.push(CheckOutcome { check: format!("connect {db}"), ok: false, detail: e.to_string() }),
        }
    }
    out.extend(amcheck(server, &dbs));
    if let Some(file) = opts.check_sql.as_ref().filter(|_| !opts.stop.asked()) {
        out.extend(check_sql(server, file, &opts.check_db));
    }
    out
}

/// `pg_amcheck --heapallindexed` over every database, installing the extension where missing;
/// without pg_amcheck, the amcheck extension's functions database by database.
fn amcheck(server: &ScratchCluster, dbs: &[String]) -> Vec<CheckOutcome> {
    if server.bin.join("pg_amcheck").exists() {
        let out = server.tool("pg_amcheck").args(["--all", "--heapallindexed", "--install-missing", "--no-strict-names"]).output();
        return vec![match out {
            Ok(o) if o.status.success() => CheckOutcome { check: "pg_amcheck".into(), ok: true, detail: format!("--heapallindexed on {} database(s): no corruption", dbs.len()) },
            Ok(o) => {
                let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
                let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).take(6).collect();
                CheckOutcome { check: "pg_amcheck".into(), ok: false, detail: format!("corruption found (exit {:?}): {}", o.status.code(), lines.join(" | ")) }
            }
            Err(e) => CheckOutcome { check: "pg_amcheck".into(), ok: false, detail: format!("cannot run pg_amcheck: {e}") },
        }];
    }
    let sql = "CREATE EXTENSION IF NOT EXISTS amcheck; \
               SELECT count(bt_index_check(c.oid, true)) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
               JOIN pg_am a ON a.oid = c.relam WHERE a.amname = 'btree' AND c.relpersistence <> 't' AND i.indisready AND i.indisvalid";
    dbs.iter()
        .filter(|d| d.as_str() != "template0")
        .map(|db| match server.query(db, sql) {
            Ok(n) => CheckOutcome { check: format!("amcheck {db}"), ok: true, detail: format!("{n} B-tree index(es) checked with heapallindexed") },
            Err(e) => CheckOutcome {
                check: format!("amcheck {db}"),
                ok: false,
                detail: format!("{e} (without pg_amcheck the amcheck extension is needed: install the server's contrib package)"),
            },
        })
        .collect()
}

/// The user's queries, run in `db`: each that returns rows must return one, whose first value is
/// true.
fn check_sql(server: &ScratchCluster, file: &Path, db: &str) -> Vec<CheckOutcome> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => return vec![CheckOutcome { check: "check-sql".into(), ok: false, detail: format!("cannot read {}: {e}", file.display()) }],
    };
    let results = match crate::connect::server::Server::connect(&server.url(db)).and_then(|mut s| s.simple_query(&text)) {
        Ok(r) => r,
        Err(e) => return vec![CheckOutcome { check: "check-sql".into(), ok: false, detail: format!("{}: {e}", file.display()) }],
    };
    // Each statement's text, to name a failing one by what it says (when the split agrees with
    // the server's count of statements; else by number alone).
    let statements = statements(&text);
    let statements = (statements.len() == results.len()).then_some(statements);
    let mut out = Vec::new();
    for (k, rows) in results.into_iter().enumerate().filter_map(|(k, r)| r.map(|rows| (k, rows))) {
        let check = format!("check-sql {}", k + 1);
        let first = rows.first().and_then(|r| r.first().cloned().flatten());
        let ok = rows.len() == 1 && first.as_deref() == Some("t");
        let detail = if ok {
            "true".to_string()
        } else if rows.len() != 1 {
            format!("returned {} rows; a check returns one row holding true", rows.len())
        } else {
            format!("returned {}", first.unwrap_or_else(|| "NULL".into()))
        };
        let detail = match statements.as_ref().and_then(|s| s.get(k)) {
            Some(q) if !ok => format!("{detail}: {q}"),
            _ => detail,
        };
        out.push(CheckOutcome { check, ok, detail });
    }
    if out.is_empty() {
        out.push(CheckOutcome { check: "check-sql".into(), ok: false, detail: format!("{} holds no query that returns rows", file.display()) });
    }
    out
}

/// The statements of a SQL script as the server splits a simple query: at each `;` outside quotes,
/// quoted identifiers, dollar quotes and comments; each with its whitespace collapsed and cut to
/// 120 characters, for a message. An empty statement (`;;`) counts as the server counts it: not.
fn statements(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    let push = |cur: &mut String, out: &mut Vec<String>| {
        let one = cur.split_whitespace().collect::<Vec<_>>().join(" ");
        if !one.is_empty() {
            out.push(if one.chars().count() > 120 { format!("{}...", one.chars().take(117).collect::<String>()) } else { one });
        }
        cur.clear();
    };
    while i < chars.len() {
        let c = chars[i];
        let rest: String = chars[i..chars.len().min(i + 2)].iter().collect();
        if rest == "--" {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if rest == "/*" {
            let end = (i + 2..chars.len().saturating_sub(1)).find(|&j| chars[j] == '*' && chars[j + 1] == '/').map_or(chars.len(), |j| j + 2);
            i = end;
            cur.push(' ');
            continue;
        }
        match c {
            '\'' | '"' => {
                let start = i;
                i += 1;
                while i < chars.len() && chars[i] != c {
                    i += 1;
                }
                i = (i + 1).min(chars.len());
                cur.extend(&chars[start..i]);
                continue;
            }
            '$' => {
                // $tag$ ... $tag$ (a tag of letters, digits and underscores, or none).
                let tag_end = (i + 1..chars.len()).find(|&j| !(chars[j].is_alphanumeric() || chars[j] == '_'));
                if let Some(t) = tag_end.filter(|&t| chars[t] == '$') {
                    let tag: String = chars[i..=t].iter().collect();
                    let body: String = chars[t + 1..].iter().collect();
                    let close = body.find(&tag).map_or(chars.len(), |b| t + 1 + body[..b].chars().count() + tag.chars().count());
                    cur.extend(&chars[i..close]);
                    i = close;
                    continue;
                }
            }
            ';' => {
                push(&mut cur, &mut out);
                i += 1;
                continue;
            }
            _ => {}
        }
        cur.push(c);
        i += 1;
    }
    push(&mut cur, &mut out);
    out
}

/// Where a drill puts its folder when not told: beside the spool (or in the system's temporary
/// folder), named after its start.
pub fn default_work(spool: Option<&Path>) -> PathBuf {
    let parent = spool.map(Path::to_path_buf).unwrap_or_else(std::env::temp_dir);
    parent.join(format!("sheaf-drill-{}", drill_id(sheaf_core::time::now_ms())))
}

#[cfg(test)]
mod tests {

    #[test]
    fn statements_split_as_the_server_splits_them() {
        let sql = "SELECT 1;\n-- a comment; with a semicolon\nSELECT ';' = ';' /* ; */ ;\nDO $x$ BEGIN PERFORM 1; END $x$;;\nSELECT \"a;b\"\n  FROM t";
        assert_eq!(statements(sql), ["SELECT 1", "SELECT ';' = ';'", "DO $x$ BEGIN PERFORM 1; END $x$", "SELECT \"a;b\" FROM t"]);
        assert_eq!(statements(&format!("SELECT {};", "x".repeat(200)))[0].len(), 120);
    }
    use super::*;

    #[test]
    fn drill_ids_sort_by_time_to_the_millisecond() {
        assert_eq!(drill_id(1_795_257_045_123), "20261121-103045.123Z");
        assert!(drill_id(1_795_257_045_123) < drill_id(1_795_257_045_124));
    }

    #[test]
    fn targets_read_as_asked() {
        let mut r = Request::default();
        assert_eq!(describe_target(&r), "end of archive");
        r.immediate = true;
        assert_eq!(describe_target(&r), "immediate");
        r.name = Some("before_upgrade".into());
        assert_eq!(describe_target(&r), "name before_upgrade");
        assert_eq!(major_of("15.18 (Debian 15.18-0+deb12u1)"), Some(15));
        assert_eq!(major_of("18.1"), Some(18));
    }

    #[test]
    fn a_failed_drill_says_what_kind_of_failure() {
        let mut r = DrillRecord {
            id: "d".into(),
            backup: "b".into(),
            backup_type: sheaf_core::manifest::BackupType::Full,
            started_unix: 0,
            ended_unix: 0,
            target: "end of archive".into(),
            reached_lsn: None,
            timeline: None,
            wal_bytes_replayed: None,
            bytes_restored: 0,
            server_version: String::new(),
            phases: Phases::default(),
            checks: vec![],
            passed: true,
            failure: None,
            failure_kind: None,
            host: String::new(),
            kept: None,
        };
        assert!(failure_error(&r).is_none());
        r.passed = false;
        r.failure = Some("pg_amcheck: corruption found".into());
        assert_eq!(failure_error(&r).unwrap().kind(), ErrorKind::Corrupt);
        r.failure_kind = Some(ErrorKind::Corrupt);
        assert_eq!(failure_error(&r).unwrap().kind(), ErrorKind::Corrupt);
        r.failure = Some("restore: the archive has a gap: 1 segment is missing".into());
        r.failure_kind = Some(ErrorKind::Incomplete);
        assert_eq!(failure_error(&r).unwrap().kind(), ErrorKind::Incomplete);
    }
}
