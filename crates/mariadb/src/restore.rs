//! A MariaDB backup restored to a data directory that `mariadbd` starts on: the files laid out by
//! sheaf's restore, then **prepared** ([`prepare`]):
//!
//! 1. Tablespaces DDL recreated during the backup (`NAME.sheaf-new`) take their names; those it
//!    removed (`NAME.sheaf-gone`) go.
//! 2. `ib_logfile0` is rebuilt from the redo log's copy ([`crate::redo::rebuild`]): the source's
//!    header and checkpoint, and every byte from the checkpoint to the end LSN at its place.
//! 3. The server's own crash recovery: a scratch `mariadbd` on a private socket, with the backed-up
//!    server's InnoDB geometry, applies the log and answers; it is then shut down cleanly. What it
//!    rolls back (transactions open at the consistency point) it finishes in the background, or at
//!    the next start.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use sheaf_core::set::BackupSet;
use sheaf_core::{Error, ErrorKind, Progress, RestoreOptions, RestoreReport, Result};

use crate::backup::{MariaFacts, GONE_SUFFIX, NEW_SUFFIX, REDO_FILE};
use crate::scratch::Scratch;

/// What preparing did.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Prepared {
    /// Seconds the scratch server took to recover and answer.
    pub recovery_seconds: f64,
    /// Seconds in all (the log rebuilt, recovery, the shutdown).
    pub seconds: f64,
    /// Redo log bytes applied from (the copy's size).
    pub redo_bytes: u64,
    /// Tablespaces put right for DDL during the backup.
    pub ddl_fixed: usize,
    /// The consistency point: the end LSN, and the binary log position there.
    pub end_lsn: u64,
    pub binlog: crate::server::BinlogPosition,
}

/// A restored MariaDB data directory.
#[derive(Debug)]
pub struct MariaRestored {
    /// The core restore's report.
    pub report: RestoreReport,
    /// What preparing did.
    pub prepared: Prepared,
    /// The backup's facts (the InnoDB geometry a server on it needs).
    pub facts: MariaFacts,
}

/// The facts of a MariaDB set.
///
/// # Errors
/// A manifest whose facts are not a MariaDB backup's.
pub fn facts_of(set: &BackupSet) -> Result<MariaFacts> {
    serde_json::from_value(set.manifest.source.clone()).map_err(|e| Error::corrupt(format!("the backup's MariaDB facts do not read: {e}")))
}

/// Restore `set` (a MariaDB backup) to `opts.target` and, unless `no_prepare`, prepare it.
///
/// # Errors
/// The restore's, and [`prepare`]'s.
pub fn restore_mariadb(set: &BackupSet, opts: &RestoreOptions, progress: Arc<dyn Progress>) -> Result<MariaRestored> {
    restore_mariadb_chain(&[set], opts, progress)
}

/// Restore a chain (a full backup and the incrementals on it, oldest first) to `opts.target` and,
/// unless `no_prepare`, prepare it with the newest one's redo log: every page the chain holds is
/// at least as new as that backup's start checkpoint or unchanged since ([`crate::backup::Since`]).
///
/// # Errors
/// As [`restore_mariadb`].
pub fn restore_mariadb_chain(sets: &[&BackupSet], opts: &RestoreOptions, progress: Arc<dyn Progress>) -> Result<MariaRestored> {
    let newest = sets.last().ok_or_else(|| Error::invalid("internal: an empty chain"))?;
    let facts = facts_of(newest)?;
    if opts.only.is_empty() && opts.delta {
        return Err(Error::invalid(
            "a delta restore keeps files the backup holds unchanged, but a MariaDB data directory is rewritten by its recovery: restore it whole (without --delta)",
        ));
    }
    let report = sheaf_core::restore_chain(sets, opts, progress)?;
    // A restore that did not prepare is not one: what it laid out (into a folder it found empty,
    // or emptied with --force) goes, so that nothing half made looks like a data directory.
    let prepared = prepare(&opts.target, &facts, &opts.stop).map_err(|e| {
        let e = if opts.stop.asked() { sheaf_core::stop::interrupted() } else { e };
        match clear(&opts.target) {
            Ok(()) => e.context(format!("the restore was not prepared, and what it wrote was removed from {}", opts.target.display())),
            Err(c) => e.context(format!("the restore was not prepared, and {} could not be emptied ({c}): do not start a server on it", opts.target.display())),
        }
    })?;
    Ok(MariaRestored { report, prepared, facts })
}

/// Remove everything inside `dir`.
fn clear(dir: &Path) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        if std::fs::symlink_metadata(&p)?.is_dir() {
            std::fs::remove_dir_all(&p)?;
        } else {
            std::fs::remove_file(&p)?;
        }
    }
    Ok(())
}

/// The InnoDB settings the backed-up server ran with, that its files need.
pub fn geometry(facts: &MariaFacts) -> Vec<String> {
    let log = crate::redo::restored_size(facts.log_file_size, facts.redo_bytes);
    let mut s = vec![format!("--innodb-page-size={}", facts.page_size), format!("--innodb-log-file-size={log}")];
    if !facts.data_file_path.is_empty() {
        s.push(format!("--innodb-data-file-path={}", facts.data_file_path));
    }
    // Always: 11.x makes three by default, and a restore of a server with none must not.
    s.push(format!("--innodb-undo-tablespaces={}", facts.undo_tablespaces));
    s
}

/// Every file under `dir` whose name ends with `suffix`, to two levels (the data directory and
/// its databases).
fn with_suffix(dir: &Path, suffix: &str) -> Result<Vec<PathBuf>> {
    let io = |d: &Path, e| Error::io(ErrorKind::Io, format!("cannot read {}", d.display()), e);
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
        let e = e.map_err(|e| io(dir, e))?;
        let p = e.path();
        if e.file_type().map_err(|e| io(&p, e))?.is_dir() {
            for f in std::fs::read_dir(&p).map_err(|e| io(&p, e))? {
                let f = f.map_err(|e| io(&p, e))?.path();
                if f.to_string_lossy().ends_with(suffix) {
                    out.push(f);
                }
            }
        } else if p.to_string_lossy().ends_with(suffix) {
            out.push(p);
        }
    }
    Ok(out)
}

/// Prepare the restored data directory `datadir`: see the module documentation.
///
/// # Errors
/// A copy of the redo log missing or not what the facts say; a server that does not recover (its
/// log's end quoted).
pub fn prepare(datadir: &Path, facts: &MariaFacts, stop: &sheaf_core::stop::Stop) -> Result<Prepared> {
    let t0 = Instant::now();
    let io = |p: &Path, e| Error::io(ErrorKind::Io, format!("cannot put {} right", p.display()), e);
    let mut ddl_fixed = 0;
    for new in with_suffix(datadir, NEW_SUFFIX)? {
        let name = PathBuf::from(new.to_string_lossy().trim_end_matches(NEW_SUFFIX));
        std::fs::rename(&new, &name).map_err(|e| io(&new, e))?;
        ddl_fixed += 1;
    }
    for gone in with_suffix(datadir, GONE_SUFFIX)? {
        let name = PathBuf::from(gone.to_string_lossy().trim_end_matches(GONE_SUFFIX));
        match std::fs::remove_file(&name) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&name, e)),
        }
        std::fs::remove_file(&gone).map_err(|e| io(&gone, e))?;
        ddl_fixed += 1;
    }
    let redo = datadir.join(REDO_FILE);
    if !redo.is_file() {
        return Err(Error::incomplete(format!("{} is missing: the redo log's copy is restored with the backup (was it left out with --only?)", redo.display())));
    }
    let log = crate::redo::rebuild(datadir, &redo, facts.start_lsn, facts.redo_bytes, crate::redo::restored_size(facts.log_file_size, facts.redo_bytes))?;
    // The log belongs to whoever owns the data directory (sheaf may run as root).
    if let Ok(m) = std::fs::metadata(datadir) {
        use std::os::unix::fs::MetadataExt;
        let _ = std::os::unix::fs::chown(&log, Some(m.uid()), Some(m.gid()));
    }
    let run = run_dir(datadir)?;
    // Grants skipped (the private socket and no networking: nothing but sheaf reaches it), so
    // that it answers whatever its users' passwords.
    let mut settings = geometry(facts);
    settings.push("--skip-grant-tables".into());
    let mut server = Scratch::over(datadir, run.path(), &settings.iter().map(String::as_str).collect::<Vec<_>>())?;
    server.stop_with(stop);
    let t_rec = Instant::now();
    let not_recovered = |why: String| Error::corrupt(format!("the restored data directory {} did not recover: {why}", datadir.display()));
    server.start().map_err(|e| not_recovered(e.to_string()))?;
    let recovery_seconds = t_rec.elapsed().as_secs_f64();
    // Recovered to the end LSN at least, with nothing InnoDB called an error on the way (a page
    // in the future, a tablespace missing or corrupted: the server starts all the same).
    let reached = server.sql("SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'INNODB_LSN_CURRENT'");
    let reached = reached.map_err(|e| not_recovered(e.to_string()))?.trim().parse::<u64>().unwrap_or(0);
    let errors = server.errors();
    server.stop().map_err(|e| not_recovered(e.to_string()))?;
    if reached < facts.end_lsn {
        return Err(not_recovered(format!("its log reaches LSN {reached}, before the backup's end {}", facts.end_lsn)));
    }
    if !errors.is_empty() {
        return Err(not_recovered(format!("its error log says: {}", errors.join(" / "))));
    }
    // Only now: a prepare that failed can be run again from the copy.
    std::fs::remove_file(&redo).map_err(|e| Error::io(ErrorKind::Io, format!("cannot remove {}", redo.display()), e))?;
    Ok(Prepared { recovery_seconds, seconds: t0.elapsed().as_secs_f64(), redo_bytes: facts.redo_bytes, ddl_fixed, end_lsn: facts.end_lsn, binlog: facts.binlog.clone() })
}

/// A short-named folder for a scratch server's socket and log, the data directory owner's.
pub fn run_dir(datadir: &Path) -> Result<tempfile::TempDir> {
    let run = tempfile::Builder::new().prefix("sheaf-mdb.").tempdir_in("/tmp").map_err(|e| Error::io(ErrorKind::Io, "cannot make a folder for the scratch server", e))?;
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(datadir).map_err(|e| Error::io(ErrorKind::Io, format!("cannot look at {}", datadir.display()), e))?;
    if sheaf_core::host::is_root() {
        let ids = if m.uid() == 0 { crate::scratch::mysql_user()? } else { (m.uid(), m.gid()) };
        std::os::unix::fs::chown(run.path(), Some(ids.0), Some(ids.1)).map_err(|e| Error::io(ErrorKind::Io, "cannot give the scratch folder to the server's user", e))?;
    }
    Ok(run)
}
