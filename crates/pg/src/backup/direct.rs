//! An online, consistent backup of a running PostgreSQL cluster, on its primary, on a hot standby,
//! or both (see [`crate::backup::topology`]).
//!
//! 1. Connect and check ([`crate::connect::server::Server::check`]); read `global/pg_control` under the
//!    data directory to be sure it is the server's whose files are read.
//! 2. Create the stripes (bad targets fail before the server is touched), then a temporary physical
//!    replication slot that reserves WAL now, so no segment the backup needs is recycled.
//! 3. `pg_backup_start(label, fast)`; only then list the data directory and every tablespace, so
//!    that every file created before the start LSN is listed and later ones are replayed from WAL.
//! 4. Read everything, one reader per tablespace and device, leaving out what a base backup omits
//!    ([`crate::cluster::layout`]) and verifying page checksums on the way ([`PageCheck`]).
//! 5. Read pg_control, then `pg_backup_stop()`; add the WAL from the start segment through the
//!    stop segment, backup_label and tablespace_map; drop the slot. A real checksum failure fails
//!    the backup unless told not to.
//!
//! Any failure drops the connection, which ends the server's backup and drops the temporary slot:
//! the server is left as it was.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use sheaf_core::manifest::{BackupType, Root};
use sheaf_core::source::{list_one, read_full_at, Files, Listed, Listing, LocalFiles, SourceFile};
use sheaf_core::{Backup, BackupOptions, ChunkCheck, Error, ErrorKind, Progress, Result, Tuning};

use crate::backup::changes::choose_changes;
use crate::backup::facts::{ClusterFacts, Link, Taken, WalSpan};
use crate::backup::options::{PgBackupOptions, PgBackupReport};
use crate::backup::topology::{Found, Role, Sides, Spool, WalSource, DEFAULT_WAIT};
use crate::cluster::checksum::{verify_page, Verdict, PAGE_SIZE};
use crate::cluster::control::{Control, CONTROL_FILE};
use crate::cluster::layout::{self, BLOCKS_PER_SEGMENT};
use crate::cluster::lsn::Lsn;
use crate::cluster::system::SystemId;
use crate::cluster::walname;

/// The files of the backup host's spool (WAL fetched from the archive) on this host, every other
/// file where the cluster is.
struct Spooled {
    spool: PathBuf,
    cluster: Arc<dyn Files>,
}

impl Files for Spooled {
    fn open(&self, path: &Path) -> Result<Box<dyn SourceFile>> {
        if path.starts_with(&self.spool) {
            LocalFiles.open(path)
        } else {
            self.cluster.open(path)
        }
    }
    fn walk(&self, root: &Path, root_id: u16) -> Result<Box<dyn Listing>> {
        self.cluster.walk(root, root_id)
    }
    fn each_name(&self, dir: &Path, each: &mut dyn FnMut(&std::ffi::OsStr)) -> Result<()> {
        self.cluster.each_name(dir, each)
    }
    fn list_one(&self, abs: &Path, rel: String, root_id: u16) -> Result<Option<Listed>> {
        self.cluster.list_one(abs, rel, root_id)
    }
    fn read_small(&self, abs: &Path) -> Result<Option<Vec<u8>>> {
        self.cluster.read_small(abs)
    }
    fn host(&self) -> Option<String> {
        self.cluster.host()
    }
}

/// Copy `abs` from where the cluster is to `dest` on this host, streamed.
fn copy_here(files: &dyn Files, abs: &Path, dest: &Path) -> Result<()> {
    let mut from = files.open(abs)?;
    let mut out = std::fs::File::create(dest).map_err(|e| Error::io(ErrorKind::Io, format!("cannot write {}", dest.display()), e))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    loop {
        let n = read_full_at(from.as_mut(), &mut buf, at)?;
        if n == 0 {
            return Ok(());
        }
        std::io::Write::write_all(&mut out, &buf[..n]).map_err(|e| Error::io(ErrorKind::Io, format!("cannot write {}", dest.display()), e))?;
        at += n as u64;
    }
}

/// Verifies page checksums of relation files as their chunks pass through the compressors.
pub struct PageCheck {
    start_lsn: Lsn,
    /// Where a page torn by a concurrent write is read again.
    files: Arc<dyn Files>,
    /// Root id → its display prefix (`""` for the data directory, `pg_tblspc/OID/` otherwise).
    prefixes: Vec<String>,
    verified: AtomicU64,
    skipped: AtomicU64,
}

impl ChunkCheck for PageCheck {
    fn wants(&self, root: u16, rel: &str) -> bool {
        layout::is_relation_path(rel, root != 0).is_some()
    }

    fn check(&self, root: u16, rel: &str, abs: &Path, offset: u64, data: &[u8]) -> Vec<String> {
        let Some(file) = layout::is_relation_path(rel, root != 0) else { return Vec::new() };
        let mut findings = Vec::new();
        let first = (offset / PAGE_SIZE as u64) as u32 + file.segment * BLOCKS_PER_SEGMENT;
        for (i, page) in data.chunks_exact(PAGE_SIZE).enumerate() {
            let page: &[u8; PAGE_SIZE] = page.try_into().expect("exact chunk");
            let blkno = first + i as u32;
            let mut verdict = verify_page(page, blkno, self.start_lsn);
            if let Verdict::Mismatch { .. } = verdict {
                // A page read while the server wrote it can be torn: read it once more.
                let mut again = [0u8; PAGE_SIZE];
                let at = offset + (i * PAGE_SIZE) as u64;
                verdict = match self.files.open(abs).and_then(|mut f| read_full_at(f.as_mut(), &mut again, at)) {
                    Ok(n) if n == PAGE_SIZE => verify_page(&again, blkno, self.start_lsn),
                    // Truncated meanwhile (VACUUM): the page is gone, WAL replay agrees.
                    _ => Verdict::Recent,
                };
            }
            match verdict {
                Verdict::Ok => self.verified.fetch_add(1, Ordering::Relaxed),
                Verdict::New | Verdict::Recent => self.skipped.fetch_add(1, Ordering::Relaxed),
                Verdict::Mismatch { stored, computed } => {
                    findings.push(format!(
                        "{}{rel} block {blkno}: page checksum {stored} does not match its contents ({computed})",
                        self.prefixes.get(root as usize).map(String::as_str).unwrap_or_default()
                    ));
                    0
                }
            };
        }
        findings
    }
}

fn system_identifier_of(files: &dyn Files, pgdata: &Path) -> Result<SystemId> {
    let control = pgdata.join(CONTROL_FILE);
    let bytes = files
        .read_small(&control)
        .map_err(|e| match files.host() {
            Some(_) => e,
            None => e.context("sheaf must run on the host whose files it reads, as a user that can read the data directory (give it with --pgdata), or read them through that host's agent (--agent)".to_string()),
        })?
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Source,
                format!("there is no {}{}: give the data directory with --pgdata", control.display(), files.host().map(|h| format!(" on {h}")).unwrap_or_default()),
            )
        })?;
    Control::system_identifier_of(&bytes).map_err(|e| Error::corrupt(format!("{}: {e}", control.display())))
}

/// Take an online backup of the server at `pg.url` (a primary or a hot standby; with
/// `pg.standby`, started and stopped on the primary and read from the standby).
///
/// # Errors
/// Connection, privilege and configuration problems (naming cause and fix), a data directory that
/// is not the server's, I/O errors, and page checksum failures unless ignored; on a standby, a
/// promotion or full_page_writes off during the backup, and WAL that does not arrive in time. The
/// servers are left as they were: no backup in progress, no slot.
pub fn backup_postgres(pg: &PgBackupOptions, opts: &BackupOptions, progress: Arc<dyn Progress>) -> Result<PgBackupReport> {
    if pg.via_base_backup {
        return crate::backup::basebackup::backup_via_base_backup(pg, opts, progress);
    }
    let t0 = Instant::now();
    if opts.transfer_size % PAGE_SIZE as u64 != 0 {
        return Err(Error::invalid(format!("transfer size {} is not a multiple of PostgreSQL's 8 KiB page: use e.g. 64KiB, 1MiB or 4MiB", opts.transfer_size)));
    }
    if pg.wal_from_archive && pg.archive.is_none() {
        return Err(Error::invalid("--wal-from archive takes the WAL from a repository's archive: back up into one with --repo"));
    }
    let wait = pg.wal_timeout.unwrap_or(DEFAULT_WAIT);
    // 1. The servers, and the files that are theirs.
    let mut sides = Sides::connect(&pg.url, pg.standby.as_deref(), pg.primary.as_deref())?;
    let (role, facts) = (sides.role, sides.facts.clone());
    let (pgdata, files, reader_url) = locate(pg, &mut sides)?;
    // For sizing the pipeline only: the list that counts is read after pg_backup_start.
    let mut opts = opts.clone();
    if opts.expected_bytes.is_none() {
        opts.expected_bytes = Some(sides.reader().0.databases_size()?);
    }
    let opts = &opts;
    let tuning = Tuning::resolve(opts, 1 + sides.reader().0.tablespaces()?.len())?;
    // 2. The stripes, then the slot and the start.
    let mut session = Backup::start(opts, tuning, progress.clone())?;
    // Tables and databases are written, created and dropped while we read: WAL replay repairs them.
    session.expect_changes();
    // WAL fetched from the archive waits here to be read.
    let spool = Spool::default();
    if pg.remote.is_some() {
        session.read_through(Arc::new(Spooled { spool: spool.path()?.to_path_buf(), cluster: files.clone() }));
    }
    // The slot keeps the WAL the backup needs where it is read: on the server whose pg_wal is
    // read (a standby's slot holds back its restartpoints' removal) and on the primary.
    let slot = pg.slot.clone().unwrap_or_else(|| format!("sheaf_{}", std::process::id()));
    sides.control.create_slot(&slot)?;
    if let Some((standby, _)) = &mut sides.standby {
        standby.create_slot(&slot)?;
    }
    let label = opts.label.clone().unwrap_or_else(|| format!("sheaf backup {}", session.id().to_hex()));
    let start = sides.control.backup_start(&label, !pg.spread_checkpoint)?;
    let (start_lsn, timeline) = (start.lsn, start.timeline);
    tracing::info!(start_lsn = %start_lsn, timeline, ?role, "the backup started: pg_backup_start returned");
    sides.prepare_standby(start, wait, &progress)?;
    // 3. List only now: everything created before the start LSN is on disk and listed,
    // tablespaces included. In-place tablespaces (a relative location) live inside the data
    // directory.
    let tablespaces: Vec<_> = sides.reader().0.tablespaces()?.into_iter().filter(|t| t.location.starts_with('/')).collect();
    let cluster = Cluster { pg, files: &files, pgdata: &pgdata, tablespaces: &tablespaces };
    let changes = match &pg.parent {
        Some(parent) => cluster.changes_since(parent, &mut session, (timeline, start_lsn), &spool)?,
        None => Incremental::default(),
    };
    // 4. Read everything.
    let Read { main_root, check, dropped, databases } = cluster.read(&mut session, &mut sides, &facts, start_lsn)?;
    changes.check_misses()?;
    // pg_control last among the files and before the stop, as PostgreSQL's own base backup does:
    // a standby's minimum recovery point in it (where the copy becomes consistent) is then at or
    // before the stop, whose WAL the backup holds.
    let control = match role {
        Role::Hybrid => sides.control.read_file("global/pg_control")?.ok_or_else(|| Error::new(ErrorKind::Source, "the primary has no global/pg_control"))?,
        _ => {
            files.read_small(&pgdata.join("global/pg_control"))?.ok_or_else(|| Error::new(ErrorKind::Source, format!("{} is gone", pgdata.join("global/pg_control").display())))?
        }
    };
    let mut primary_files = Vec::new();
    if role == Role::Hybrid {
        for name in PRIMARY_FILES {
            if let Some(bytes) = sides.control.read_file(name)? {
                primary_files.push((name, bytes));
            }
        }
    }
    // 5. The stop, the WAL from start to stop, and the files that say where the copy begins.
    let stop = sides.control.backup_stop(facts.in_recovery, timeline)?;
    let span = WalSpan::of((start_lsn, timeline), &stop, facts.wal_segment_size)?;
    let segments = walname::segments_between(&span.start_wal, &span.stop_wal, facts.wal_segment_size)?;
    tracing::info!(start_wal = %span.start_wal, stop_wal = %span.stop_wal, segments = segments.len(), "pg_backup_stop returned; the WAL from start to stop goes into the backup");
    let pg_wal = pgdata.join("pg_wal");
    let source = WalSource { pg_wal: (!pg.wal_from_archive).then_some(pg_wal.as_path()), files: files.as_ref(), archive: pg.archive.as_ref(), wait };
    if source.pg_wal.is_some() {
        sides.wait_for_wal(stop.lsn, wait)?;
    }
    let wal = cluster.wal(&source, &segments, timeline, &spool, &mut sides, &progress)?;
    session.read_listed(vec![(main_root, wal, None)])?;
    drop(spool);
    // Marked as archived, so that a restored cluster does not archive the source's WAL again.
    for name in &segments {
        session.add_bytes(main_root, &format!("pg_wal/archive_status/{name}.done"), b"", 0o600)?;
    }
    for line in stop.tablespace_map.lines() {
        let oid = line.split(' ').next().unwrap_or_default();
        if !tablespaces.iter().any(|t| t.oid.to_string() == oid) {
            return Err(Error::new(
                ErrorKind::Source,
                format!("tablespace {oid} appeared while the backup started (it is in tablespace_map but was not copied): take the backup again"),
            ));
        }
    }
    session.add_bytes(main_root, "global/pg_control", &control, 0o600)?;
    for (name, bytes) in &primary_files {
        session.add_bytes(main_root, name, bytes, 0o600)?;
    }
    session.add_bytes(main_root, "backup_label", stop.backup_label.as_bytes(), 0o600)?;
    if !stop.tablespace_map.is_empty() {
        session.add_bytes(main_root, "tablespace_map", stop.tablespace_map.as_bytes(), 0o600)?;
    }
    sides.control.drop_slot(&slot);
    if let Some((standby, _)) = &mut sides.standby {
        standby.drop_slot(&slot);
    }
    // 6. What the backup records of the cluster, kept only if the pages checked out.
    let pages = check.as_ref().map_or((0, 0), |c| (c.verified.load(Ordering::Relaxed), c.skipped.load(Ordering::Relaxed)));
    let mut recorded = ClusterFacts::taken(Taken {
        server: facts,
        url: sides.control.url().to_string(),
        start: (start_lsn, timeline),
        stop,
        span,
        wal_files: segments.len(),
        tablespaces,
        databases,
        pages,
        excluded_entries: dropped,
        taken_on: role.recorded(),
        standby_url: (role == Role::Hybrid).then_some(reader_url),
        links: linked_folders(files.as_ref(), &pgdata),
    });
    let ignore = pg.ignore_checksum_failures;
    let report = session.finish_with(|failures| {
        if !failures.is_empty() && !ignore {
            return Err(Error::corrupt(format!(
                "{} page checksum failure{} (the backup was not kept): {}; fix or investigate the relation, or pass --ignore-checksum-failures to keep the backup with the failures recorded",
                failures.len(),
                if failures.len() == 1 { "" } else { "s" },
                failures.iter().take(5).cloned().collect::<Vec<_>>().join("; ")
            )));
        }
        recorded.checksum_failures = failures.len();
        Ok(recorded.to_value())
    })?;
    let Incremental { backup_type, method, full_because, .. } = changes;
    Ok(PgBackupReport { report, facts: recorded, seconds_total: t0.elapsed().as_secs_f64(), backup_type, method, full_because })
}

/// The folders whose contents a backup leaves out that are symbolic links in `pgdata` (pg_wal put
/// elsewhere by `initdb -X`), with where they point: backed up as plain folders, recorded so that a
/// restore can link them again.
fn linked_folders(files: &dyn Files, pgdata: &Path) -> Vec<Link> {
    layout::EMPTY_DIRS
        .iter()
        .filter_map(|name| {
            let l = files.list_one(&pgdata.join(name), (*name).to_string(), 0).ok()??;
            let target = l.entry.target.filter(|_| l.entry.kind == sheaf_core::manifest::EntryKind::Symlink)?;
            Some(Link { path: (*name).to_string(), target })
        })
        .collect()
}

/// The data directory of the server whose files are read, where they are read from (this host or
/// an agent's), and that server's URL; refused when the files are another cluster's, or the
/// server is not the cluster the repository holds.
fn locate(pg: &PgBackupOptions, sides: &mut Sides) -> Result<(PathBuf, Arc<dyn Files>, String)> {
    let facts = &sides.facts;
    pg.check_cluster(sides.control.url(), facts.system_identifier)?;
    let system = facts.system_identifier;
    let (reader, reader_facts) = sides.reader();
    let reader_url = reader.url().to_string();
    // Through an agent, the data directory is the one it serves unless told otherwise.
    let pgdata = match (pg.pgdata.as_ref().or(pg.remote.as_ref().map(|r| &r.pgdata)), &reader_facts.data_directory) {
        (Some(p), _) => p.clone(),
        (None, Some(d)) => PathBuf::from(d),
        (None, None) => return Err(Error::invalid("the server will not say where its data directory is (the role lacks pg_read_all_settings): give it with --pgdata")),
    };
    let files: Arc<dyn Files> = pg.remote.as_ref().map(|r| r.files.clone()).unwrap_or_else(|| Arc::new(LocalFiles));
    let local_id = system_identifier_of(files.as_ref(), &pgdata)?;
    if local_id != system {
        return Err(Error::invalid(format!(
            "{} holds cluster {local_id}, but {reader_url} is cluster {system}: give the data directory of that server with --pgdata (sheaf must run on the host whose files it reads)",
            pgdata.display(),
        )));
    }
    Ok((pgdata, files, reader_url))
}

/// What an incremental or differential backup decided (a full backup's is the default).
#[derive(Default)]
struct Incremental {
    backup_type: BackupType,
    method: Option<String>,
    full_because: Option<String>,
    /// With `--check-changes`: the pages the WAL summaries missed.
    misses: Option<crate::backup::changes::Misses>,
}

/// What [`Cluster::read`] read.
struct Read {
    /// The data directory's root id.
    main_root: u16,
    /// The page check, when the pages have checksums sheaf can verify.
    check: Option<Arc<PageCheck>>,
    /// Entries a base backup omits, left out.
    dropped: usize,
    /// Which database and relation each file is.
    databases: Vec<crate::connect::catalog::DatabaseInfo>,
}

impl Incremental {
    /// `--check-changes` found no page the WAL summaries missed.
    fn check_misses(&self) -> Result<()> {
        let Some(m) = &self.misses else { return Ok(()) };
        let m = m.lock().unwrap_or_else(|p| p.into_inner());
        if m.is_empty() {
            return Ok(());
        }
        Err(Error::corrupt(format!(
            "--check-changes: the WAL summaries missed {}{} page(s) that the page scan found changed (the backup was not kept): {}",
            m.len(),
            if m.len() >= 100 { " or more" } else { "" },
            m.iter().take(5).cloned().collect::<Vec<_>>().join("; ")
        )))
    }
}

/// The cluster's files as the backup reads them: where they are, and its tablespaces.
struct Cluster<'a> {
    pg: &'a PgBackupOptions,
    files: &'a Arc<dyn Files>,
    pgdata: &'a Path,
    tablespaces: &'a [crate::connect::catalog::Tablespace],
}

impl Cluster<'_> {
    /// What changed since `parent` (from the WAL summaries, or a page scan), set on `session`; a
    /// full backup, saying why, when the parent is off this timeline's history.
    fn changes_since(&self, parent: &crate::backup::incremental::Parent, session: &mut Backup, (timeline, start_lsn): (u32, Lsn), spool: &Spool) -> Result<Incremental> {
        let history = if timeline > 1 {
            self.files.read_small(&self.pgdata.join("pg_wal").join(walname::history_name(timeline)))?.map(|b| String::from_utf8_lossy(&b).into_owned())
        } else {
            None
        };
        if let Some(why) = parent.off_history(timeline, history.as_deref()) {
            return Ok(Incremental { full_because: Some(format!("{why}: taking a full backup")), ..Incremental::default() });
        }
        let mut roots = vec![(String::new(), self.pgdata.to_path_buf())];
        roots.extend(self.tablespaces.iter().map(|t| (format!("pg_tblspc/{}", t.oid), PathBuf::from(&t.location))));
        // A segment not archived yet is summarized from the cluster's pg_wal: a copy of it when
        // the cluster is on another host.
        let local_wal = |name: &str| -> Result<Option<PathBuf>> {
            let abs = self.pgdata.join("pg_wal").join(name);
            if self.files.list_one(&abs, String::new(), 0)?.is_none() {
                return Ok(None);
            }
            if self.pg.remote.is_none() {
                return Ok(Some(abs));
            }
            let copy = spool.path()?.join(format!("summarize-{name}"));
            copy_here(self.files.as_ref(), &abs, &copy)?;
            Ok(Some(copy))
        };
        let (changes, how, misses) = choose_changes(parent, (timeline, start_lsn), history.as_deref(), &local_wal, &roots, self.files.as_ref())?;
        session.incremental(parent.lineage.clone(), changes);
        Ok(Incremental { backup_type: parent.lineage.backup_type, method: Some(how), misses, ..Incremental::default() })
    }

    /// Read the data directory and every tablespace into `session` (all but pg_control and, in
    /// a hybrid backup, the primary's configuration), their pages checked on the way: the data
    /// directory's root id, the page check, and how many entries a base backup omits were left.
    fn read(&self, session: &mut Backup, sides: &mut Sides, facts: &crate::connect::server::ServerFacts, start_lsn: Lsn) -> Result<Read> {
        let role = sides.role;
        // The catalogs as the files are listed: which database and relation each file is, for
        // restoring or extracting less than everything. Relations created or rewritten during
        // the backup come back by WAL replay, not through this list.
        let mut catalog_warnings = Vec::new();
        // Hybrid: from the standby, so that the primary reads no catalog page either.
        let catalog_url = self.pg.standby.as_deref().unwrap_or(&self.pg.url);
        let databases = sides.reader().0.catalog(catalog_url, &mut catalog_warnings)?;
        // pg_control is read after everything else, and (in a hybrid backup) the configuration
        // too, on the primary.
        let from_primary = |path: &str| path == "global/pg_control" || (role == Role::Hybrid && PRIMARY_FILES.contains(&path));
        let verify = facts.data_checksums && facts.default_layout;
        if facts.data_checksums && !facts.default_layout {
            catalog_warnings.push("page checksums not verified: this server was built with a non-default block or segment size".into());
        }
        let mut prefixes = vec![String::new()];
        let main_root = session.add_root(Root { name: String::new(), path: self.pgdata.display().to_string() });
        let mut ts_roots = Vec::new();
        for ts in self.tablespaces {
            let id = session.add_root(Root { name: format!("pg_tblspc/{}", ts.oid), path: ts.location.clone() });
            prefixes.push(format!("pg_tblspc/{}/", ts.oid));
            ts_roots.push((id, Path::new(&ts.location)));
        }
        let check: Option<Arc<PageCheck>> =
            verify.then(|| Arc::new(PageCheck { start_lsn, files: self.files.clone(), prefixes, verified: AtomicU64::new(0), skipped: AtomicU64::new(0) }));
        let as_check = || check.clone().map(|c| c as Arc<dyn ChunkCheck>);
        // A tablespace's directory holds one folder per server version: ours only.
        let ours = format!("{}/", facts.tablespace_version_dir);
        let in_ours = |l: &Listed| l.entry.path.is_empty() || l.entry.path == facts.tablespace_version_dir || l.entry.path.starts_with(&ours);
        session.warnings.extend(catalog_warnings);
        // The cluster's files, walked as they are read, so that a cluster of millions of relation
        // files holds no listing of them. The data directory is walked first, then each
        // tablespace, so that entries stay in root order for the manifest's page index; the walk
        // never waits for the readers (work waits on disk), so each tablespace's reader starts
        // once the walk reaches it, not once the data directory has been read. A tablespace's
        // walk starts only then: an agent sends a listing as it is read, and one asked for early
        // would sit on the link.
        let mut walk = self.files.walk(self.pgdata, 0)?;
        let ts_warnings = std::cell::RefCell::new(Vec::new());
        let (dropped, ts_dropped) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
        let read = {
            let main = layout::filter_stream(&mut walk, false, &dropped, self.files.as_ref())
                .filter(|l| !l.as_ref().is_ok_and(|l| from_primary(&l.entry.path)))
                .map(|l| l.map(|l| (main_root, l, as_check())));
            let ts_warnings = &ts_warnings;
            let spaces = ts_roots.iter().flat_map(|&(id, location)| {
                let mut w = Some(self.files.walk(location, 0));
                let listing = std::iter::from_fn(move || match w.as_mut()? {
                    Err(_) => w.take().and_then(|r| r.err()).map(Err),
                    Ok(walk) => {
                        let next = walk.next();
                        if next.is_none() {
                            ts_warnings.borrow_mut().extend(walk.take_warnings());
                            w = None;
                        }
                        next
                    }
                });
                layout::filter_stream(listing.filter(|l| l.as_ref().map_or(true, in_ours)), true, &ts_dropped, self.files.as_ref()).map(move |l| l.map(|l| (id, l, as_check())))
            });
            session.read_streamed(main.chain(spaces))
        };
        session.warnings.extend(walk.take_warnings());
        session.warnings.extend(ts_warnings.into_inner());
        read?;
        Ok(Read { main_root, check, dropped: dropped.get(), databases })
    }

    /// The WAL files from the start's segment to the stop's (and the timeline's history file),
    /// found in pg_wal or the archive, listed for reading.
    fn wal(&self, source: &WalSource, segments: &[String], timeline: u32, spool: &Spool, sides: &mut Sides, progress: &Arc<dyn Progress>) -> Result<Vec<Listed>> {
        let list_found = |found: Found, name: &str| -> Result<Listed> {
            let rel = format!("pg_wal/{name}");
            match found {
                Found::Cluster(abs) => {
                    self.files.list_one(&abs, rel, 0)?.ok_or_else(|| Error::new(ErrorKind::Source, format!("WAL file {name}, which the backup needs, vanished from pg_wal")))
                }
                Found::Fetched(abs) => list_one(&abs, rel, 0),
            }
        };
        let mut wal = Vec::with_capacity(segments.len() + 1);
        for name in segments {
            let found = source.find(name, spool, sides, progress)?;
            wal.push(list_found(found, name).map_err(|e| e.context(format!("WAL file {name}, which the backup needs")))?);
        }
        if timeline > 1 {
            let name = walname::history_name(timeline);
            match source.find(&name, spool, sides, progress) {
                Ok(found) => wal.push(list_found(found, &name)?),
                Err(e) if e.kind() == ErrorKind::Incomplete || e.kind() == ErrorKind::Source => {}
                Err(e) => return Err(e),
            }
        }
        Ok(wal)
    }
}

/// Files of a hybrid backup read on the primary rather than the standby: the configuration, which
/// is not replicated (a standby's names its primary, and would make a restored copy a standby).
const PRIMARY_FILES: [&str; 4] = ["postgresql.conf", "postgresql.auto.conf", "pg_hba.conf", "pg_ident.conf"];
