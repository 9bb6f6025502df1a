//! Restore of a PostgreSQL backup into a data directory that `pg_ctl start` brings up consistent:
//! the files, backup_label, tablespace_map and the WAL from start to stop are all in the backup, so
//! start-up replays to consistency with no manual step. Tablespaces go back to where they were or,
//! with `--tablespace OLD=NEW`, elsewhere (WITH MOVE): their links in pg_tblspc and the lines of
//! tablespace_map are rewritten to match. A folder that was a symbolic link (pg_wal, put
//! elsewhere by `initdb -X`) comes back as a folder, or as a link to where it was
//! (`--original-paths`) or to where `--link-map` says. How the cluster starts (a standby, a
//! recovery to a target, as backed up) is decided before anything is written and written last
//! ([`crate::restore::startup`]).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use std::sync::Arc;

use sheaf_core::{BackupSet, Error, ErrorKind, Progress, RestoreOptions, RestoreReport, Result};

use crate::backup::facts::{ClusterFacts, Link};
use crate::cluster::control::{Control, CONTROL_FILE};
use crate::cluster::system::SystemId;
use crate::connect::catalog::Tablespace;
use crate::restore::startup::{self, Role, Startup, Written};

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
    /// How the restored cluster starts, and what else goes into its settings.
    pub startup: Startup,
    /// `(NAME, DIR)`: the folder NAME of the data directory (pg_wal, or a link the backup holds)
    /// becomes a link to DIR, its contents restored there (pgBackRest's `--link-map`).
    pub link_map: Vec<(String, PathBuf)>,
}

/// A PostgreSQL restore's outcome: the core's report, and what was written for the start.
#[derive(Clone, Debug)]
pub struct Restored {
    /// Files, bytes, time; a delta's counts.
    pub report: RestoreReport,
    /// The signal file, the settings written and removed, the links.
    pub startup: Written,
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
            startup: Startup::default(),
            link_map: Vec::new(),
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
pub fn restore_postgres(set: &BackupSet, opts: &PgRestoreOptions, progress: Arc<dyn Progress>) -> Result<Restored> {
    restore_postgres_chain(&[set], opts, progress)
}

/// [`restore_postgres`] of the newest set of a chain: a full backup and the incrementals and
/// differentials on it, oldest first ([`sheaf_core::restore_chain`]).
///
/// # Errors
/// As [`restore_postgres`], and sets that do not form the chain the newest one names.
pub fn restore_postgres_chain(sets: &[&BackupSet], opts: &PgRestoreOptions, progress: Arc<dyn Progress>) -> Result<Restored> {
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
    // What the target is decides how it starts (a delta onto a standby keeps it one): read
    // before a byte of it changes, and everything asked checked before a byte is written.
    let decided = opts.startup.decide(&startup::found(target), opts.core.delta)?;
    startup::check_options(&opts.startup.options, facts.major(), opts.startup.pg_bin.as_deref())?;
    let links = plan_links(set, &facts, opts)?;
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
    core.relocate.extend(links.iter().filter(|l| l.folder).filter_map(|l| Some((l.path.clone(), l.to.clone()?))));
    core.keep = decided.kept_paths();
    // The slot is made before the restore, so that the primary keeps the WAL from now on for
    // the standby that the restore makes; dropped again if the restore fails.
    let slot = match &opts.startup.role {
        Role::Standby(up, _) if up.create_slot => startup::create_slot(up)?,
        _ => None,
    };
    let report = match sheaf_core::restore_chain(sets, &core, progress) {
        Ok(r) => r,
        Err(e) => return Err(drop_made_slot(slot, e)),
    };
    // Until the links and tablespace_map point at the new places, starting this directory would
    // write into the old ones: keep it marked incomplete meanwhile.
    let marker = target.join(sheaf_core::restore::INCOMPLETE_MARKER);
    let io = |what: &str, e: std::io::Error| Error::io(ErrorKind::Target, format!("{what} {}", marker.display()), e);
    fs::write(&marker, b"relinking tablespaces").map_err(|e| io("cannot write", e))?;
    let finished = (|| {
        fix_up(target, &places)?;
        let said = make_links(target, &links)?;
        if opts.archive_off && !decided.standby() {
            crate::cluster::conf::append_settings(target, "restored with --archive-mode off, so that it never archives into the repository it came from", "archive_mode = off\n")?;
        }
        let mut written = decided.write(target)?;
        written.links = said;
        written.slot_created.clone_from(&slot.as_ref().map(|(_, name)| name.clone()));
        fs::remove_file(&marker).map_err(|e| io("cannot remove", e))?;
        fs::File::open(target).and_then(|f| f.sync_all()).map_err(|e| io("cannot fsync the folder of", e))?;
        Ok(written)
    })();
    match finished {
        Ok(startup) => Ok(Restored { report, startup }),
        Err(e) => Err(drop_made_slot(slot, e)),
    }
}

/// After a failed restore, drop the slot it made on the primary (which would keep WAL there for
/// a standby that does not exist); the restore's error, with the slot's fate when it stayed.
fn drop_made_slot(slot: Option<(String, String)>, e: Error) -> Error {
    match slot {
        Some((conninfo, name)) => match startup::drop_slot(&conninfo, &name) {
            Ok(()) => e,
            Err(d) => Error::new(
                e.kind(),
                format!("{e}; and the replication slot {name} made on the primary for it could not be dropped ({d}): drop it with SELECT pg_drop_replication_slot('{name}'), or the primary keeps WAL for it"),
            ),
        },
        None => e,
    }
}

/// A folder of the data directory restored as a link, or said to come back as a folder.
#[derive(Clone, Debug)]
struct LinkPlan {
    /// Its path in the data directory.
    path: String,
    /// Where the link points; `None`: a plain folder (the backup's link not kept).
    to: Option<PathBuf>,
    /// The backup holds its contents as a folder (pg_wal), restored at `to`; otherwise the
    /// backup holds a link, which is pointed at `to`.
    folder: bool,
    /// Where it pointed when backed up.
    was: Option<String>,
}

/// The links to make: each `--link-map NAME=DIR` (NAME a folder the backup recorded as a link,
/// or a link it holds), and with `--original-paths` every recorded link as it was.
fn plan_links(set: &BackupSet, facts: &ClusterFacts, opts: &PgRestoreOptions) -> Result<Vec<LinkPlan>> {
    let mut out: Vec<LinkPlan> = Vec::new();
    let recorded = |name: &str| facts.links.iter().find(|l| l.path == name);
    for (name, dir) in &opts.link_map {
        let name = name.trim_matches('/');
        let dir = std::path::absolute(dir).map_err(|e| Error::io(ErrorKind::Target, format!("cannot resolve {}", dir.display()), e))?;
        if dir.starts_with(opts.target()) {
            return Err(Error::invalid(format!("--link-map {name}={}: that is inside the data directory; give a folder outside --to", dir.display())));
        }
        let folder = name == "pg_wal" || recorded(name).is_some();
        if !folder && !holds_link(set, name)? {
            let mut known: Vec<String> = facts.links.iter().map(|l: &Link| l.path.clone()).collect();
            if !known.iter().any(|k| k == "pg_wal") {
                known.insert(0, "pg_wal".into());
            }
            return Err(Error::invalid(format!("--link-map {name}={}: the backup holds no linked folder {name}; it can link {}", dir.display(), known.join(", "))));
        }
        out.push(LinkPlan { path: name.to_string(), to: Some(dir), folder, was: recorded(name).map(|l| l.target.clone()) });
    }
    for l in &facts.links {
        if out.iter().any(|p| p.path == l.path) {
            continue;
        }
        let to = opts.core.original_paths.then(|| PathBuf::from(&l.target));
        out.push(LinkPlan { path: l.path.clone(), to, folder: true, was: Some(l.target.clone()) });
    }
    Ok(out)
}

/// Whether the backup holds a symbolic link at `path` in the data directory.
fn holds_link(set: &BackupSet, path: &str) -> Result<bool> {
    let mut found = false;
    set.each_entry(|_, e| {
        if e.root == 0 && e.kind == sheaf_core::manifest::EntryKind::Symlink && e.path == path {
            found = true;
        }
        Ok(())
    })?;
    Ok(found)
}

/// Make the planned links in `target`; what was done, in a line each.
fn make_links(target: &Path, links: &[LinkPlan]) -> Result<Vec<String>> {
    let io = |what: &str, p: &Path, e: std::io::Error| Error::io(ErrorKind::Target, format!("{what} {}", p.display()), e);
    let mut said = Vec::new();
    for l in links {
        let at = target.join(&l.path);
        let Some(to) = &l.to else {
            said.push(format!(
                "{} was a link to {} when backed up: restored as a folder (--link-map {}=DIR or --original-paths makes it a link)",
                l.path,
                l.was.as_deref().unwrap_or("?"),
                l.path
            ));
            continue;
        };
        if fs::symlink_metadata(&at).is_ok() {
            if fs::symlink_metadata(&at).is_ok_and(|m| m.is_dir()) {
                // An empty folder the restore left (nothing of it in the backup): the link replaces it.
                fs::remove_dir(&at).map_err(|e| io("cannot replace the folder", &at, e))?;
            } else {
                fs::remove_file(&at).map_err(|e| io("cannot replace", &at, e))?;
            }
        }
        std::os::unix::fs::symlink(to, &at).map_err(|e| io("cannot link", &at, e))?;
        crate::cluster::conf::owned_like_folder(target, &at);
        said.push(format!("{} is a link to {}{}", l.path, to.display(), if l.folder { ", its contents restored there" } else { "" }));
    }
    Ok(said)
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
