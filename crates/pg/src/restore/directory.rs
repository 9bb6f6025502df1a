//! Restore of a PostgreSQL backup into a data directory that `pg_ctl start` brings up consistent:
//! the files, backup_label, tablespace_map and the WAL from start to stop are all in the backup, so
//! start-up replays to consistency with no manual step. Tablespaces go back to where they were or,
//! with `--tablespace OLD=NEW`, elsewhere (WITH MOVE): their links in pg_tblspc and the lines of
//! tablespace_map are rewritten to match.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use std::sync::Arc;

use sheaf_core::{BackupSet, Error, ErrorKind, Progress, RestoreOptions, RestoreReport, Result};

use crate::backup::facts::ClusterFacts;
use crate::cluster::control::{Control, CONTROL_FILE};
use crate::cluster::system::SystemId;
use crate::connect::catalog::Tablespace;

/// How to restore a PostgreSQL backup: the core's options, whose `target` is the new data
/// directory, and what only a cluster has.
#[derive(Clone, Debug)]
pub struct PgRestoreOptions {
    /// Target, force, original paths, threads, buffered and synchronous writes, as for any set.
    /// Its `relocate` and `hollow` are set here, from `tablespaces` and `db_include`; `only`
    /// does not apply (a cluster comes whole).
    pub core: RestoreOptions,
    /// `(OLD, NEW)`: the tablespace at OLD (its location, name or OID) goes to NEW.
    pub tablespaces: Vec<(String, PathBuf)>,
    /// Restore only these databases whole (and the system ones: postgres, template0, template1);
    /// the others' files come back as sparse files of zeros, so that the cluster starts and they
    /// can be dropped (pgBackRest's `--db-include`). Empty: all.
    pub db_include: Vec<String>,
    /// Write `archive_mode = off` into the restored postgresql.auto.conf (pgBackRest's
    /// `--archive-mode=off`): a test restore then never archives its new timeline into the
    /// production repository. `false` keeps the backup's archive settings.
    pub archive_off: bool,
    /// Put every tablespace not mapped by `tablespaces` under this folder, as `DIR/OID` (a drill's
    /// scratch restore, which must never write where the source cluster's tablespaces live).
    pub tablespaces_under: Option<PathBuf>,
    /// `--delta=hash`: compare every chunk with the target by its hash, whatever the WAL could
    /// say ([`crate::restore::delta`]).
    pub delta_hash: bool,
    /// `--check-changes` with `--delta`: hash, and fail where the WAL missed a difference.
    pub check_changes: bool,
}

impl PgRestoreOptions {
    /// Restore into the data directory `target` with defaults.
    pub fn new(target: impl Into<PathBuf>) -> Self {
        PgRestoreOptions {
            core: RestoreOptions::new(target),
            tablespaces: Vec::new(),
            db_include: Vec::new(),
            archive_off: false,
            tablespaces_under: None,
            delta_hash: false,
            check_changes: false,
        }
    }

    /// The new data directory.
    pub fn target(&self) -> &Path {
        &self.core.target
    }
}

/// The databases that always come whole under `--db-include`.
pub const SYSTEM_DATABASES: [&str; 3] = ["postgres", "template0", "template1"];

/// The folders whose files `--db-include` restores as zeros: each left-out database's folder under
/// base/ and under every tablespace.
///
/// # Errors
/// A database the backup does not hold (naming those it does), or a backup that does not record
/// its databases.
pub fn left_out_folders(facts: &ClusterFacts, include: &[String]) -> Result<Vec<String>> {
    let dbs = facts.databases()?;
    for name in include {
        if !dbs.iter().any(|d| &d.name == name) {
            return Err(Error::invalid(format!(
                "--db-include {name}: the backup has no such database; it has {}",
                dbs.iter().map(|d| d.name.as_str()).collect::<Vec<_>>().join(", ")
            )));
        }
    }
    let version_dir = &facts.tablespace_version_dir;
    let mut out = Vec::new();
    for d in dbs.iter().filter(|d| !include.contains(&d.name) && !SYSTEM_DATABASES.contains(&d.name.as_str())) {
        out.push(format!("base/{}", d.oid));
        for ts in &facts.tablespaces {
            out.push(format!("pg_tblspc/{}/{version_dir}/{}", ts.oid, d.oid));
        }
    }
    Ok(out)
}

fn running_postmaster(dir: &Path) -> Option<i32> {
    let text = fs::read_to_string(dir.join("postmaster.pid")).ok()?;
    let pid: i32 = text.lines().next()?.trim().parse().ok()?;
    u32::try_from(pid).is_ok_and(sheaf_core::host::process_alive).then_some(pid)
}

/// Restore a PostgreSQL backup set.
///
/// # Errors
/// A running server in the target, a tablespace mapping that names no tablespace, an unmapped
/// tablespace whose original place is not empty, and everything [`sheaf_core::restore`] refuses.
pub fn restore_postgres(set: &BackupSet, opts: &PgRestoreOptions, progress: Arc<dyn Progress>) -> Result<RestoreReport> {
    restore_postgres_chain(&[set], opts, progress)
}

/// [`restore_postgres`] of the newest set of a chain: a full backup and the incrementals and
/// differentials on it, oldest first ([`sheaf_core::restore_chain`]).
///
/// # Errors
/// As [`restore_postgres`], and sets that do not form the chain the newest one names.
pub fn restore_postgres_chain(sets: &[&BackupSet], opts: &PgRestoreOptions, progress: Arc<dyn Progress>) -> Result<RestoreReport> {
    // The chain itself is checked by the core's restore, before anything is written.
    let set = *sets.last().ok_or_else(|| Error::invalid("no backup set to restore"))?;
    let Some(facts) = ClusterFacts::of(set)? else {
        return Err(Error::invalid("this backup is not of a PostgreSQL cluster: restore it without --tablespace"));
    };
    let target = opts.target();
    if opts.core.delta {
        same_cluster(target, facts.system_identifier)?;
    } else if opts.check_changes {
        return Err(Error::invalid("--check-changes checks a delta restore's use of the WAL: give it with --delta"));
    }
    if let Some(pid) = running_postmaster(target) {
        return Err(Error::new(
            ErrorKind::TargetNotEmpty,
            format!("a PostgreSQL server (pid {pid}) is running on {}: stop it (pg_ctl stop -D {}) before restoring onto it", target.display(), target.display()),
        ));
    }
    let tablespaces = &facts.tablespaces;
    let mut places = Vec::new();
    for (old, new) in &opts.tablespaces {
        let ts = tablespaces.iter().find(|t| &t.location == old || &t.name == old || t.oid.to_string() == *old).ok_or_else(|| {
            Error::invalid(format!(
                "--tablespace {old}={}: the backup has no such tablespace; it has: {}",
                new.display(),
                if tablespaces.is_empty() {
                    "none".to_string()
                } else {
                    tablespaces.iter().map(|t| format!("{} (oid {}) at {}", t.name, t.oid, t.location)).collect::<Vec<_>>().join(", ")
                }
            ))
        })?;
        places.push((ts.clone(), new.clone()));
    }
    for ts in tablespaces {
        if places.iter().any(|(t, _)| t.oid == ts.oid) {
            continue;
        }
        if let Some(dir) = &opts.tablespaces_under {
            places.push((ts.clone(), dir.join(ts.oid.to_string())));
            continue;
        }
        let original = PathBuf::from(&ts.location);
        if !opts.core.original_paths {
            return Err(Error::invalid(format!(
                "the backup holds tablespace {} (oid {}), which was at {}; sheaf writes outside --to only where told: map it with --tablespace {}=NEW_DIR, or pass --original-paths to restore it where it was",
                ts.name, ts.oid, ts.location, ts.location
            )));
        }
        // Refused even with --force, which empties the restore's targets: this is most likely the
        // source cluster's live tablespace. Overwriting it takes an explicit --tablespace X=X.
        let busy = fs::read_dir(&original).map(|mut d| d.next().is_some()).unwrap_or(false);
        if busy && !opts.core.delta {
            return Err(Error::new(
                ErrorKind::TargetNotEmpty,
                format!(
                    "tablespace {} (oid {}) would be restored to its original location {}, which is not empty (the source cluster may still use it): map it elsewhere with --tablespace {}=NEW_DIR (or, to overwrite it, --tablespace {}={} --force)",
                    ts.name, ts.oid, ts.location, ts.location, ts.location, ts.location
                ),
            ));
        }
        places.push((ts.clone(), original));
    }

    let mut core = opts.core.clone();
    if core.delta && core.delta_source.how.is_empty() {
        if opts.check_changes && !opts.delta_hash {
            return Err(Error::invalid("--check-changes compares the WAL summaries with the target, and needs the repository that holds them: restore with --repo"));
        }
        core.delta_source.how = if opts.delta_hash {
            "every chunk compared with the target by its hash, as --delta=hash asks".into()
        } else {
            "every chunk compared with the target by its hash, because the backup is restored from its stripes: no repository's WAL summaries say what changed".into()
        };
    }
    if !opts.db_include.is_empty() {
        core.hollow = left_out_folders(&facts, &opts.db_include)?;
    }
    // Every tablespace has its place now, each one the user named or allowed, and each goes to the
    // core as a mapping (X=X included): a root the manifest holds that is not one of these is still
    // refused there, whatever else was allowed.
    core.relocate = places.iter().map(|(ts, new)| (ts.location.clone(), new.clone())).collect();
    let report = sheaf_core::restore_chain(sets, &core, progress)?;
    // Until the links and tablespace_map point at the new places, starting this directory would
    // write into the old ones: keep it marked incomplete meanwhile.
    let marker = target.join(sheaf_core::restore::INCOMPLETE_MARKER);
    let io = |what: &str, e: std::io::Error| Error::io(ErrorKind::Target, format!("{what} {}", marker.display()), e);
    fs::write(&marker, b"relinking tablespaces").map_err(|e| io("cannot write", e))?;
    fix_up(target, &places)?;
    if opts.archive_off {
        crate::cluster::conf::append_settings(target, "restored with --archive-mode off, so that it never archives into the repository it came from", "archive_mode = off\n")?;
    }
    fs::remove_file(&marker).map_err(|e| io("cannot remove", e))?;
    fs::File::open(target).and_then(|f| f.sync_all()).map_err(|e| io("cannot fsync the folder of", e))?;
    Ok(report)
}

/// For `--delta`: the target is empty, or a data directory of the cluster the backup is of.
pub(crate) fn same_cluster(target: &Path, system_identifier: SystemId) -> Result<()> {
    let empty = fs::read_dir(target).map(|mut d| d.next().is_none()).unwrap_or(true);
    if empty {
        return Ok(());
    }
    let control = target.join(CONTROL_FILE);
    let theirs = fs::read(&control).ok().and_then(|b| Control::system_identifier_of(&b).ok());
    match theirs {
        Some(id) if id == system_identifier => Ok(()),
        Some(id) => Err(Error::new(
            ErrorKind::TargetNotEmpty,
            format!(
                "--delta: {} is a data directory of cluster {id}, but the backup is of cluster {system_identifier}: a delta restore only updates a copy of the same cluster; restore into an empty directory, or replace it with --force",
                target.display()
            ),
        )),
        None => Err(Error::new(
            ErrorKind::TargetNotEmpty,
            format!(
                "--delta: {} is not empty and holds no global/pg_control, so it is not a PostgreSQL data directory: restore into an empty directory, or replace it with --force",
                target.display()
            ),
        )),
    }
}

/// Point pg_tblspc links and tablespace_map at where the tablespaces now are; data directory 0700.
fn fix_up(target: &Path, places: &[(Tablespace, PathBuf)]) -> Result<()> {
    let io = |what: &str, p: &Path, e: std::io::Error| Error::io(ErrorKind::Target, format!("{what} {}", p.display()), e);
    for (ts, new) in places {
        let new = std::path::absolute(new).map_err(|e| io("cannot resolve", new, e))?;
        let link = target.join("pg_tblspc").join(ts.oid.to_string());
        if fs::symlink_metadata(&link).is_ok() {
            fs::remove_file(&link).map_err(|e| io("cannot replace", &link, e))?;
        }
        std::os::unix::fs::symlink(&new, &link).map_err(|e| io("cannot link", &link, e))?;
    }
    let map = target.join("tablespace_map");
    if let Ok(text) = fs::read_to_string(&map) {
        let mut out = String::new();
        for line in text.lines() {
            let oid = line.split_once(' ').map(|(o, _)| o).unwrap_or(line);
            match places.iter().find(|(t, _)| t.oid.to_string() == oid) {
                Some((_, new)) => {
                    let new = std::path::absolute(new).map_err(|e| io("cannot resolve", new, e))?;
                    out.push_str(&format!("{oid} {}\n", new.display()));
                }
                None => {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        fs::write(&map, out).map_err(|e| io("cannot rewrite", &map, e))?;
        fs::File::open(&map).and_then(|f| f.sync_all()).map_err(|e| io("cannot fsync", &map, e))?;
    }
    fs::set_permissions(target, fs::Permissions::from_mode(0o700)).map_err(|e| io("cannot set mode of", target, e))?;
    for d in [target.join("pg_tblspc"), target.to_path_buf()] {
        if let Ok(f) = fs::File::open(&d) {
            f.sync_all().map_err(|e| io("cannot fsync", &d, e))?;
        }
    }
    Ok(())
}
