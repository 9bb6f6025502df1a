//! sheaf-catalog: the history of every backup, restore and verify, in SQLite (bundled), in the
//! spirit of SQL Server's msdb `backupset` / `backupmediafamily` / `restorehistory`.
//!
//! - [`Catalog::open`] finds the file (`--catalog`, `SHEAF_CATALOG`, or the XDG data directory),
//!   creates it, and brings its schema up to date with numbered migrations.
//! - [`Catalog::begin`] records a run as `running` before any work; [`Catalog::finish`] marks it
//!   `complete` or `failed` with its figures. A run whose process died is found `running` with a
//!   dead pid and marked `failed` (interrupted) the next time the catalog is opened: a run is never
//!   recorded as complete unless it completed.
//! - [`Catalog::list`] and [`Catalog::show`] read it back.

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;

use sheaf_core::ErrorKind;
pub use sheaf_core::{Error, Result};

/// A failure of SQLite (or of the file system under it) while doing `what`: the cause kept, and
/// transient where SQLite says the database is busy or locked by another sheaf (the busy timeout
/// ran out), since trying again then may succeed.
fn err(what: &str, e: impl Into<Cause>) -> Error {
    let (source, transient) = match e.into() {
        Cause::Sql(e) => {
            let busy = matches!(e.sqlite_error_code(), Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked));
            (Box::new(e) as sheaf_core::error::Source, busy)
        }
        Cause::Io(e) => (Box::new(e) as sheaf_core::error::Source, false),
    };
    Error::new(ErrorKind::Io, format!("catalog: {what}")).with_source(source).transient(transient)
}

/// What a catalog operation can fail on.
enum Cause {
    Sql(rusqlite::Error),
    Io(std::io::Error),
}

impl From<rusqlite::Error> for Cause {
    fn from(e: rusqlite::Error) -> Self {
        Cause::Sql(e)
    }
}

impl From<std::io::Error> for Cause {
    fn from(e: std::io::Error) -> Self {
        Cause::Io(e)
    }
}

/// The schema, one migration per version; `PRAGMA user_version` says how many have run.
const MIGRATIONS: &[&str] = &[
    // 1: runs and their stripes.
    "CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        operation TEXT NOT NULL CHECK (operation IN ('backup', 'restore', 'verify')),
        status TEXT NOT NULL CHECK (status IN ('running', 'complete', 'failed')),
        pid INTEGER NOT NULL,
        backup_id TEXT,
        label TEXT,
        source_kind TEXT,
        source TEXT,
        system_identifier TEXT,
        started_at TEXT NOT NULL,
        ended_at TEXT,
        seconds REAL,
        bytes_read INTEGER,
        bytes_written INTEGER,
        ratio REAL,
        mib_per_second REAL,
        compression TEXT,
        codec TEXT,
        level INTEGER,
        transfer_size INTEGER,
        buffer_count INTEGER,
        readers INTEGER,
        threads INTEGER,
        stripe_count INTEGER,
        user_cpu_seconds REAL,
        system_cpu_seconds REAL,
        peak_rss_bytes INTEGER,
        error TEXT,
        details TEXT
     );
     CREATE INDEX runs_backup_id ON runs (backup_id);
     CREATE TABLE stripes (
        run_id INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
        position INTEGER NOT NULL,
        location TEXT NOT NULL,
        PRIMARY KEY (run_id, position)
     );",
    // 2: drills (sheaf drill) are runs too. SQLite cannot change a CHECK in place: the table is
    // made again and the rows copied (foreign keys off meanwhile, so that the stripes stay).
    "CREATE TABLE runs_new (
        id INTEGER PRIMARY KEY,
        operation TEXT NOT NULL CHECK (operation IN ('backup', 'restore', 'verify', 'drill')),
        status TEXT NOT NULL CHECK (status IN ('running', 'complete', 'failed')),
        pid INTEGER NOT NULL,
        backup_id TEXT,
        label TEXT,
        source_kind TEXT,
        source TEXT,
        system_identifier TEXT,
        started_at TEXT NOT NULL,
        ended_at TEXT,
        seconds REAL,
        bytes_read INTEGER,
        bytes_written INTEGER,
        ratio REAL,
        mib_per_second REAL,
        compression TEXT,
        codec TEXT,
        level INTEGER,
        transfer_size INTEGER,
        buffer_count INTEGER,
        readers INTEGER,
        threads INTEGER,
        stripe_count INTEGER,
        user_cpu_seconds REAL,
        system_cpu_seconds REAL,
        peak_rss_bytes INTEGER,
        error TEXT,
        details TEXT
     );
     INSERT INTO runs_new SELECT * FROM runs;
     DROP TABLE runs;
     ALTER TABLE runs_new RENAME TO runs;
     CREATE INDEX runs_backup_id ON runs (backup_id);",
    // 3: the repository a run worked on (a backup into it, a restore, verify or drill from it),
    // so that one repository's metrics count its own runs only.
    "ALTER TABLE runs ADD COLUMN repo TEXT;",
];

/// The schema version this sheaf writes.
pub fn schema_version() -> i64 {
    MIGRATIONS.len() as i64
}

/// Where the catalog lives unless told: `$XDG_DATA_HOME/sheaf/catalog.db`, or
/// `~/.local/share/sheaf/catalog.db`.
pub fn default_path() -> Option<PathBuf> {
    let base =
        std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()).map(PathBuf::from).or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))?;
    Some(base.join("sheaf").join("catalog.db"))
}

/// What a run is, known before it starts.
#[derive(Clone, Debug, Default)]
pub struct RunStart {
    /// `backup`, `restore`, `verify` or `drill`.
    pub operation: String,
    /// `directory` or `postgres`.
    pub source_kind: Option<String>,
    /// The source, without password.
    pub source: Option<String>,
    /// Label.
    pub label: Option<String>,
    /// Stripe locations.
    pub stripes: Vec<String>,
    /// The repository it works on, as given (`--repo`, or the settings).
    pub repo: Option<String>,
}

/// What a run produced. Fields it does not know stay `None`.
#[derive(Clone, Debug, Default)]
pub struct RunEnd {
    /// The set's id.
    pub backup_id: Option<String>,
    /// PostgreSQL's system identifier.
    pub system_identifier: Option<String>,
    /// Wall time.
    pub seconds: Option<f64>,
    /// Bytes read.
    pub bytes_read: Option<u64>,
    /// Bytes written.
    pub bytes_written: Option<u64>,
    /// Codec spec, family, level.
    pub compression: Option<String>,
    /// Codec family.
    pub codec: Option<String>,
    /// Level.
    pub level: Option<i64>,
    /// Knobs.
    pub transfer_size: Option<u64>,
    /// Knobs.
    pub buffer_count: Option<u64>,
    /// Knobs.
    pub readers: Option<u64>,
    /// Knobs.
    pub threads: Option<u64>,
    /// The full JSON report.
    pub details: Option<serde_json::Value>,
}

/// A recorded run.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Run {
    /// Catalog id.
    pub id: i64,
    /// backup, restore, verify.
    pub operation: String,
    /// running, complete, failed.
    pub status: String,
    /// The set's id.
    pub backup_id: Option<String>,
    /// Label.
    pub label: Option<String>,
    /// directory or postgres.
    pub source_kind: Option<String>,
    /// Source without password.
    pub source: Option<String>,
    /// PostgreSQL's system identifier.
    pub system_identifier: Option<String>,
    /// Start (UTC, RFC 3339).
    pub started_at: String,
    /// End.
    pub ended_at: Option<String>,
    /// Wall seconds.
    pub seconds: Option<f64>,
    /// Bytes read.
    pub bytes_read: Option<i64>,
    /// Bytes written.
    pub bytes_written: Option<i64>,
    /// bytes_read / bytes_written.
    pub ratio: Option<f64>,
    /// Throughput.
    pub mib_per_second: Option<f64>,
    /// Codec spec.
    pub compression: Option<String>,
    /// Codec family.
    pub codec: Option<String>,
    /// Level.
    pub level: Option<i64>,
    /// Chunk size.
    pub transfer_size: Option<i64>,
    /// Buffers.
    pub buffer_count: Option<i64>,
    /// Readers.
    pub readers: Option<i64>,
    /// Compressor threads.
    pub threads: Option<i64>,
    /// Stripes.
    pub stripe_count: Option<i64>,
    /// User CPU seconds of the process.
    pub user_cpu_seconds: Option<f64>,
    /// System CPU seconds of the process.
    pub system_cpu_seconds: Option<f64>,
    /// Peak RSS of the process.
    pub peak_rss_bytes: Option<i64>,
    /// Why it failed.
    pub error: Option<String>,
    /// Stripe locations.
    pub stripes: Vec<String>,
    /// The full JSON report, for `show`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

/// Runs of one operation that ended one way ([`Catalog::tally`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tally {
    /// The repository the runs worked on (`None`: stripes given directly, or runs recorded before
    /// the catalog kept it).
    pub repo: Option<String>,
    /// backup, restore, verify.
    pub operation: String,
    /// complete, failed, running.
    pub status: String,
    /// How many.
    pub runs: u64,
    /// When the last of them ended, seconds since the epoch.
    pub last_unix: i64,
}

/// An open catalog.
pub struct Catalog {
    conn: Connection,
    path: PathBuf,
}

fn now() -> String {
    sheaf_core::time::utc_now()
}

impl Catalog {
    /// Open (creating it and its folder) the catalog at `path`, or at `SHEAF_CATALOG`, or at the
    /// default path; migrate its schema; mark runs of dead processes as failed.
    ///
    /// # Errors
    /// When no path can be found, the file cannot be opened, or it was written by a newer sheaf.
    pub fn open(path: Option<&Path>) -> Result<Catalog> {
        let path = match path {
            Some(p) => p.to_path_buf(),
            None => match std::env::var_os("SHEAF_CATALOG").filter(|v| !v.is_empty()) {
                Some(p) => PathBuf::from(p),
                None => default_path().ok_or_else(|| Error::new(ErrorKind::Io, "catalog: no HOME or XDG_DATA_HOME; give --catalog PATH"))?,
            },
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            sheaf_core::whole::create_dirs(dir).map_err(|e| err(&format!("cannot create {}", dir.display()), e))?;
        }
        let new = !path.exists();
        if new {
            // What the catalog holds (repositories, URLs, errors) is the user's alone; SQLite
            // gives its WAL and shared-memory files the database's mode.
            use std::os::unix::fs::OpenOptionsExt;
            let _ = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path);
        }
        let conn = Connection::open(&path).map_err(|e| err(&format!("cannot open {}", path.display()), e))?;
        conn.busy_timeout(std::time::Duration::from_secs(10)).map_err(|e| err("busy timeout", e))?;
        conn.execute_batch("PRAGMA journal_mode = WAL; PRAGMA foreign_keys = ON;").map_err(|e| err("pragmas", e))?;
        let mut c = Catalog { conn, path };
        c.migrate()?;
        if new {
            // SQLite fsyncs the folder for its WAL file, not for the database it creates: without
            // this, a power cut could take the whole catalog's name with it.
            let dir = sheaf_core::whole::parent_dir(&c.path);
            sheaf_core::whole::sync_dir(&dir).map_err(|e| err(&format!("cannot fsync {}", dir.display()), e))?;
        }
        c.mark_interrupted()?;
        Ok(c)
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn migrate(&mut self) -> Result<()> {
        let version: i64 = self.conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(|e| err("schema version", e))?;
        if version > schema_version() {
            return Err(Error::new(
                ErrorKind::Io,
                format!("catalog {} has schema version {version}, newer than this sheaf's {}: upgrade sheaf or use another --catalog", self.path.display(), schema_version()),
            ));
        }
        // A migration may make a table again (SQLite's way to change a constraint): with foreign
        // keys on, dropping the old one would take the rows that refer to it. They are checked
        // before each commit instead.
        self.conn.pragma_update(None, "foreign_keys", false).map_err(|e| err("pragmas", e))?;
        let migrated = (|| {
            for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
                let tx = self.conn.transaction().map_err(|e| err("migration", e))?;
                tx.execute_batch(sql).map_err(|e| err(&format!("migration {}", i + 1), e))?;
                let dangling: i64 = tx.query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| r.get(0)).map_err(|e| err("migration", e))?;
                if dangling > 0 {
                    return Err(Error::new(
                        ErrorKind::Io,
                        format!("catalog {}: migration {} would leave {dangling} rows without their run; nothing was changed", self.path.display(), i + 1),
                    ));
                }
                tx.pragma_update(None, "user_version", i as i64 + 1).map_err(|e| err("migration", e))?;
                tx.commit().map_err(|e| err("migration", e))?;
            }
            Ok(())
        })();
        self.conn.pragma_update(None, "foreign_keys", true).map_err(|e| err("pragmas", e))?;
        migrated
    }

    /// Runs left `running` by a process that no longer exists were interrupted.
    fn mark_interrupted(&self) -> Result<()> {
        let mut stmt = self.conn.prepare("SELECT id, pid FROM runs WHERE status = 'running'").map_err(|e| err("reading runs", e))?;
        let running: Vec<(i64, i64)> = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).map_err(|e| err("reading runs", e))?.flatten().collect();
        for (id, pid) in running {
            let alive = u32::try_from(pid).is_ok_and(sheaf_core::host::process_alive);
            if !alive {
                self.conn
                    .execute(
                        "UPDATE runs SET status = 'failed', error = 'interrupted: the process ended before the run finished', ended_at = coalesce(ended_at, ?2) WHERE id = ?1",
                        params![id, now()],
                    )
                    .map_err(|e| err("marking interrupted runs", e))?;
            }
        }
        Ok(())
    }

    /// Record a run as started (`running`) and return its id.
    ///
    /// # Errors
    /// A database error.
    pub fn begin(&self, s: &RunStart) -> Result<i64> {
        self.conn
            .execute(
                "INSERT INTO runs (operation, status, pid, label, source_kind, source, started_at, stripe_count, repo) VALUES (?1, 'running', ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![s.operation, std::process::id(), s.label, s.source_kind, s.source, now(), s.stripes.len() as i64, s.repo],
            )
            .map_err(|e| err("recording the run", e))?;
        let id = self.conn.last_insert_rowid();
        for (k, loc) in s.stripes.iter().enumerate() {
            self.conn.execute("INSERT INTO stripes (run_id, position, location) VALUES (?1, ?2, ?3)", params![id, k as i64, loc]).map_err(|e| err("recording stripes", e))?;
        }
        Ok(id)
    }

    /// Record how run `id` ended: `complete` when `error` is `None`, else `failed` with it.
    ///
    /// # Errors
    /// A database error.
    pub fn finish(&self, id: i64, end: &RunEnd, error: Option<&str>) -> Result<()> {
        let (user, sys, rss) = sheaf_core::host::process_usage();
        let ratio = match (end.bytes_read, end.bytes_written) {
            (Some(r), Some(w)) if w > 0 => Some(r as f64 / w as f64),
            _ => None,
        };
        let mibs = match (end.bytes_read.or(end.bytes_written), end.seconds) {
            (Some(b), Some(s)) if s > 0.0 => Some(b as f64 / (1 << 20) as f64 / s),
            _ => None,
        };
        let as_i = |v: Option<u64>| v.map(|x| x as i64);
        self.conn
            .execute(
                "UPDATE runs SET status = ?2, ended_at = ?3, error = ?4, backup_id = coalesce(?5, backup_id),
                    system_identifier = ?6, seconds = ?7, bytes_read = ?8, bytes_written = ?9, ratio = ?10,
                    mib_per_second = ?11, compression = ?12, codec = ?13, level = ?14, transfer_size = ?15,
                    buffer_count = ?16, readers = ?17, threads = ?18, user_cpu_seconds = ?19,
                    system_cpu_seconds = ?20, peak_rss_bytes = ?21, details = ?22
                 WHERE id = ?1",
                params![
                    id,
                    if error.is_none() { "complete" } else { "failed" },
                    now(),
                    error,
                    end.backup_id,
                    end.system_identifier,
                    end.seconds,
                    as_i(end.bytes_read),
                    as_i(end.bytes_written),
                    ratio,
                    mibs,
                    end.compression,
                    end.codec,
                    end.level,
                    as_i(end.transfer_size),
                    as_i(end.buffer_count),
                    as_i(end.readers),
                    as_i(end.threads),
                    user,
                    sys,
                    rss as i64,
                    end.details.as_ref().map(|d| d.to_string()),
                ],
            )
            .map_err(|e| err("recording the end of the run", e))?;
        Ok(())
    }

    /// Runs counted by operation and how they ended (`complete`, `failed`, `running`), with when
    /// the last of each ended (seconds since the epoch; its start while running), for monitoring.
    ///
    /// # Errors
    /// A database error.
    pub fn tally(&self) -> Result<Vec<Tally>> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT repo, operation, status, count(*), coalesce(max(CAST(strftime('%s', coalesce(ended_at, started_at)) AS INTEGER)), 0) \
                 FROM runs GROUP BY repo, operation, status ORDER BY repo, operation, status",
            )
            .map_err(|e| err("counting runs", e))?;
        let rows = stmt
            .query_map([], |r| Ok(Tally { repo: r.get(0)?, operation: r.get(1)?, status: r.get(2)?, runs: r.get::<_, i64>(3)? as u64, last_unix: r.get(4)? }))
            .map_err(|e| err("counting runs", e))?;
        rows.collect::<std::result::Result<Vec<_>, _>>().map_err(|e| err("counting runs", e))
    }

    /// The run a backup id names: the backup's run for its set id (the 32 hex digits a backup
    /// prints) or its id in a repository (`20261129-103307.323Z`, as `sheaf info` lists it); the
    /// newest when several (a backup recorded twice). `None` when no backup run has it.
    ///
    /// # Errors
    /// A database error.
    pub fn backup_run(&self, id: &str) -> Result<Option<i64>> {
        self.conn
            .query_row(
                "SELECT id FROM runs WHERE operation = 'backup' AND (backup_id = ?1 OR json_extract(details, '$.postgres.repository_id') = ?1 OR json_extract(details, '$.mariadb.repository_id') = ?1) ORDER BY id DESC LIMIT 1",
                [id],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| err("finding the backup's run", e))
    }

    /// Runs, newest first.
    ///
    /// # Errors
    /// A database error.
    pub fn list(&self, limit: usize) -> Result<Vec<Run>> {
        let ids: Vec<i64> = {
            let mut stmt = self.conn.prepare("SELECT id FROM runs ORDER BY id DESC LIMIT ?1").map_err(|e| err("listing", e))?;
            let rows = stmt.query_map([limit as i64], |r| r.get(0)).map_err(|e| err("listing", e))?;
            rows.flatten().collect()
        };
        ids.into_iter().filter_map(|id| self.show(id, false).transpose()).collect()
    }

    /// One run, by id; with its full report when `details`.
    ///
    /// # Errors
    /// A database error.
    pub fn show(&self, id: i64, details: bool) -> Result<Option<Run>> {
        let run = self
            .conn
            .query_row(
                "SELECT id, operation, status, backup_id, label, source_kind, source, system_identifier, started_at, ended_at,
                        seconds, bytes_read, bytes_written, ratio, mib_per_second, compression, codec, level, transfer_size,
                        buffer_count, readers, threads, stripe_count, user_cpu_seconds, system_cpu_seconds, peak_rss_bytes,
                        error, details
                 FROM runs WHERE id = ?1",
                [id],
                |r| {
                    Ok(Run {
                        id: r.get(0)?,
                        operation: r.get(1)?,
                        status: r.get(2)?,
                        backup_id: r.get(3)?,
                        label: r.get(4)?,
                        source_kind: r.get(5)?,
                        source: r.get(6)?,
                        system_identifier: r.get(7)?,
                        started_at: r.get(8)?,
                        ended_at: r.get(9)?,
                        seconds: r.get(10)?,
                        bytes_read: r.get(11)?,
                        bytes_written: r.get(12)?,
                        ratio: r.get(13)?,
                        mib_per_second: r.get(14)?,
                        compression: r.get(15)?,
                        codec: r.get(16)?,
                        level: r.get(17)?,
                        transfer_size: r.get(18)?,
                        buffer_count: r.get(19)?,
                        readers: r.get(20)?,
                        threads: r.get(21)?,
                        stripe_count: r.get(22)?,
                        user_cpu_seconds: r.get(23)?,
                        system_cpu_seconds: r.get(24)?,
                        peak_rss_bytes: r.get(25)?,
                        error: r.get(26)?,
                        stripes: Vec::new(),
                        details: if details { r.get::<_, Option<String>>(27)?.and_then(|d| serde_json::from_str(&d).ok()) } else { None },
                    })
                },
            )
            .optional()
            .map_err(|e| err("reading a run", e))?;
        let Some(mut run) = run else { return Ok(None) };
        let mut stmt = self.conn.prepare("SELECT location FROM stripes WHERE run_id = ?1 ORDER BY position").map_err(|e| err("stripes", e))?;
        run.stripes = stmt.query_map([id], |r| r.get(0)).map_err(|e| err("stripes", e))?.flatten().collect();
        Ok(Some(run))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrates_from_empty_and_refuses_newer() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sub/catalog.db");
        let c = Catalog::open(Some(&p)).unwrap();
        let v: i64 = c.conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(v, schema_version());
        let mode = |f: &str| std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(d.path().join("sub").join(f)).unwrap().permissions()) & 0o777;
        assert_eq!((mode("catalog.db"), mode("catalog.db-wal")), (0o600, 0o600), "the user's alone, its WAL too");
        drop(c);
        Catalog::open(Some(&p)).unwrap(); // idempotent
        let conn = Connection::open(&p).unwrap();
        conn.pragma_update(None, "user_version", 99).unwrap();
        drop(conn);
        let e = Catalog::open(Some(&p)).err().unwrap();
        assert!(e.to_string().contains("newer than this sheaf"), "{e}");
    }

    #[test]
    fn runs_are_counted_per_repository() {
        let dir = tempfile::tempdir().unwrap();
        let c = Catalog::open(Some(&dir.path().join("c.db"))).unwrap();
        for (repo, fail) in [(Some("/a"), false), (Some("/a"), true), (Some("/b"), true), (None, false)] {
            let id = c.begin(&RunStart { operation: "backup".into(), repo: repo.map(str::to_string), ..Default::default() }).unwrap();
            c.finish(id, &RunEnd::default(), fail.then_some("boom")).unwrap();
        }
        let t = c.tally().unwrap();
        let of = |repo: Option<&str>, status: &str| t.iter().find(|x| x.repo.as_deref() == repo && x.status == status).map(|x| x.runs);
        assert_eq!((of(Some("/a"), "complete"), of(Some("/a"), "failed"), of(Some("/b"), "failed"), of(None, "complete")), (Some(1), Some(1), Some(1), Some(1)));
        assert_eq!(of(Some("/b"), "complete"), None);
    }

    #[test]
    fn a_catalog_of_the_first_schema_keeps_its_runs_and_takes_drills() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c.db");
        let conn = Connection::open(&p).unwrap();
        conn.execute_batch(MIGRATIONS[0]).unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        conn.execute_batch(
            "PRAGMA foreign_keys = ON;
             INSERT INTO runs (id, operation, status, pid, backup_id, started_at) VALUES (7, 'backup', 'complete', 1, 'old', '2026-01-01T00:00:00Z');
             INSERT INTO stripes VALUES (7, 0, '/srv/a.sheaf'), (7, 1, '/srv/b.sheaf');",
        )
        .unwrap();
        let e = conn.execute("INSERT INTO runs (operation, status, pid, started_at) VALUES ('drill', 'running', 1, 'x')", []).unwrap_err();
        assert!(e.to_string().contains("CHECK"), "{e}");
        drop(conn);
        let c = Catalog::open(Some(&p)).unwrap();
        let old = c.show(7, false).unwrap().unwrap();
        assert_eq!((old.operation.as_str(), old.stripes.len()), ("backup", 2), "the run and its stripes survive");
        let drill = c.begin(&RunStart { operation: "drill".into(), ..Default::default() }).unwrap();
        assert_eq!(c.show(drill, false).unwrap().unwrap().operation, "drill");
        // Foreign keys are on again: a stripe of no run is refused.
        assert!(c.conn.execute("INSERT INTO stripes VALUES (999, 0, 'x')", []).is_err());
    }

    #[test]
    fn runs_are_complete_only_when_finished_well() {
        let d = tempfile::tempdir().unwrap();
        let c = Catalog::open(Some(&d.path().join("c.db"))).unwrap();
        let start = RunStart { operation: "backup".into(), stripes: vec!["/a".into(), "/b".into()], ..Default::default() };
        let ok = c.begin(&start).unwrap();
        assert_eq!(c.show(ok, false).unwrap().unwrap().status, "running");
        let end = RunEnd { bytes_read: Some(1000), bytes_written: Some(250), seconds: Some(2.0), backup_id: Some("ab".into()), ..Default::default() };
        c.finish(ok, &end, None).unwrap();
        let bad = c.begin(&start).unwrap();
        c.finish(bad, &RunEnd::default(), Some("disk full")).unwrap();
        let runs = c.list(10).unwrap();
        assert_eq!(runs.len(), 2);
        assert_eq!((runs[0].status.as_str(), runs[0].error.as_deref()), ("failed", Some("disk full")));
        assert_eq!(runs[1].status, "complete");
        assert_eq!(runs[1].ratio, Some(4.0));
        assert_eq!(runs[1].stripes, vec!["/a".to_string(), "/b".to_string()]);
        assert!(runs[1].user_cpu_seconds.is_some() && runs[1].peak_rss_bytes.unwrap() > 0);
        let tally = c.tally().unwrap();
        let now = sheaf_core::time::now_ms() / 1000;
        assert_eq!(tally.iter().map(|t| (t.operation.as_str(), t.status.as_str(), t.runs)).collect::<Vec<_>>(), vec![("backup", "complete", 1), ("backup", "failed", 1)]);
        assert!(tally.iter().all(|t| (now - t.last_unix).abs() < 60), "{tally:?}");
    }

    #[test]
    fn a_run_whose_process_died_is_failed_not_running() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c.db");
        let c = Catalog::open(Some(&p)).unwrap();
        let id = c.begin(&RunStart { operation: "backup".into(), ..Default::default() }).unwrap();
        // Pretend it was another process that is gone.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        c.conn.execute("UPDATE runs SET pid = ?1 WHERE id = ?2", params![dead, id]).unwrap();
        drop(c);
        let c = Catalog::open(Some(&p)).unwrap();
        let run = c.show(id, false).unwrap().unwrap();
        assert_eq!(run.status, "failed");
        assert!(run.error.unwrap().contains("interrupted"));
    }

    #[test]
    fn dates_are_rfc3339_utc() {
        let n = now();
        assert_eq!(n.len(), 20, "{n}");
        assert!(n.ends_with('Z') && n.as_bytes()[4] == b'-' && n.as_bytes()[10] == b'T', "{n}");
    }

    #[test]
    fn a_busy_or_locked_database_is_transient_and_keeps_its_cause() {
        let sql = |code| rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None);
        for code in [rusqlite::ffi::SQLITE_BUSY, rusqlite::ffi::SQLITE_LOCKED] {
            let e = err("recording the run", sql(code));
            assert!(e.is_transient(), "{e}");
            assert!(e.to_string().starts_with("catalog: recording the run: "), "{e}");
            assert!(std::error::Error::source(&e).is_some());
        }
        let corrupt = err("reading runs", sql(rusqlite::ffi::SQLITE_CORRUPT));
        assert!(!corrupt.is_transient());
        assert_eq!(corrupt.kind(), ErrorKind::Io);
        assert!(!err("cannot create /x", std::io::Error::from(std::io::ErrorKind::PermissionDenied)).is_transient());
    }
}
