//! An online, consistent physical backup of a running MariaDB server, in the order mariabackup
//! 10.11 uses the backup stages:
//!
//! 1. Connect and check (MariaDB 10.8–11.x; the privileges, by running what needs them:
//!    `BACKUP STAGE START` and `SHOW MASTER STATUS` before anything is copied).
//! 2. Read the redo log's head: its newest checkpoint is where recovery will begin. It must be the
//!    server's own (`Innodb_lsn_last_checkpoint`), or sheaf is not on the server's host. Start the
//!    [`Follower`], which copies the log from there as it is written.
//! 3. **No lock:** read every InnoDB tablespace (system, undo, `.ibd`) with sheaf's readers,
//!    checking each page ([`InnoPages`]; a torn page read again).
//! 4. `BACKUP STAGE FLUSH`, then `BLOCK_DDL`: DDL waits. List again: a tablespace created since
//!    the first listing is read now; one recreated at its name (`TRUNCATE`, a copying `ALTER`) is
//!    read again, stored as `NAME.sheaf-new`; one gone gets a `NAME.sheaf-gone` marker. The
//!    restore's prepare puts them right before recovery, as mariabackup's `.new` and `.del`.
//! 5. `BLOCK_COMMIT`: commits and non-transactional writes wait. Read every other file (`.frm`,
//!    Aria and MyISAM tables, `aria_log*`, ...); take the binary log position and GTIDs; `FLUSH
//!    NO_WRITE_TO_BINLOG ENGINE LOGS`; the end LSN is `Innodb_lsn_current` now, and the redo log
//!    is copied to exactly there. `BACKUP STAGE END`; the time in BLOCK_COMMIT is reported.
//! 6. Store the redo log's copy (`sheaf-redo.log`) and the facts the restore needs.
//!
//! Left out, as mariabackup leaves them: the binary and relay logs, `ib_logfile0` itself (its copy
//! goes instead), the temporary tablespace, the pid file and sockets. Any failure drops the
//! connection, which ends the server's backup stage: the server is left as it was.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sheaf_core::manifest::{EntryKind, Root};
use sheaf_core::source::{list_one, list_tree, Listed};
use sheaf_core::{Backup, BackupOptions, BackupReport, ChunkCheck, Error, ErrorKind, Progress, Result, Tuning};

use crate::page::{is_tablespace, space_id, InnoPages};
use crate::redo::{Follower, Head, START};
use crate::server::{BinlogPosition, Server, Stage};
use crate::url::Address;

/// What a MariaDB backup's manifest says of its source (`"kind": "mariadb"`).
pub const KIND: &str = "mariadb";
/// The redo log's copy, in the backup's data directory.
pub const REDO_FILE: &str = "sheaf-redo.log";
/// A tablespace read again after DDL recreated it, stored beside the first read.
pub const NEW_SUFFIX: &str = ".sheaf-new";
/// A tablespace that DDL removed after it was read.
pub const GONE_SUFFIX: &str = ".sheaf-gone";
/// How long the end of the redo log may take to reach the file.
const REDO_WAIT: Duration = Duration::from_secs(60);

/// What to back up.
#[derive(Clone, Debug)]
pub struct MariaBackupOptions {
    /// `mariadb://USER@HOST[:PORT]/?socket=PATH`.
    pub url: String,
    /// How often the redo log's follower looks for more (50 ms).
    pub redo_poll: Duration,
    /// Into a repository: the server it was made for; another is refused.
    pub expect: Option<sheaf_pg::repo::meta::MariaSource>,
    /// An incremental or differential: what it builds on ([`Since`]).
    pub since: Option<Since>,
}

/// What an incremental or differential builds on: the chain, and its parent's start checkpoint.
///
/// **Why the parent's start, and why every page is read.** A page whose LSN (the end of the last
/// mini-transaction that changed it) is at most the parent's start checkpoint `X` was not dirty
/// at that checkpoint (a dirty page's first change is at or after `X`), so it was on disk when the
/// parent read it, and unchanged since: the parent holds it as it is. Every other page is stored,
/// and so are a page past the parent's end of the file and a page all zero (a hole, which costs
/// nothing stored), so that a tablespace recreated since never takes a page of the old one from
/// the parent; a tablespace the parent does not have is stored whole. The redo log cannot spare
/// the reading: it wraps,
/// and nothing keeps it between backups, so it cannot say which pages changed since the parent;
/// mariabackup's `--incremental-basedir` reads every page too. The page scan runs on sheaf's
/// readers and compressors, every page checked as in a full backup.
#[derive(Clone, Debug)]
pub struct Since {
    /// The chain: the type, and the sets it builds on.
    pub lineage: sheaf_core::Lineage,
    /// The parent's start checkpoint LSN.
    pub lsn: u64,
    /// The parent's files' sizes, by path in the data directory.
    pub sizes: HashMap<String, u64>,
    /// The parent's tablespaces' ids ([`MariaFacts::space_ids`]).
    pub space_ids: std::collections::BTreeMap<String, u32>,
}

/// An incremental's answer per file: a tablespace the parent has, its pages scanned by LSN;
/// every other file whole.
struct InnoChanges {
    datadir: PathBuf,
    system: Vec<String>,
    page_size: usize,
    lsn: u64,
    /// The parent's tablespaces' sizes, by path.
    sizes: HashMap<String, u64>,
    /// The parent's tablespaces' ids, by path.
    space_ids: std::collections::BTreeMap<String, u32>,
}

/// Whether a page changed since [`Since::lsn`].
struct SinceLsn {
    unit: usize,
    lsn: u64,
    /// Whole pages the parent had of the file.
    parent_pages: u64,
}

impl sheaf_core::UnitFilter for SinceLsn {
    fn unit(&self) -> usize {
        self.unit
    }
    fn changed(&self, n: u64, data: &[u8]) -> bool {
        data.len() < self.unit || n >= self.parent_pages || u64::from_be_bytes(data[16..24].try_into().expect("8 bytes")) > self.lsn || data.iter().all(|&b| b == 0)
    }
}

impl sheaf_core::Changes for InnoChanges {
    fn of(&self, _root: &str, rel: &str, _size: u64) -> sheaf_core::FileChanges {
        let Some(&old) = self.sizes.get(rel).filter(|_| is_tablespace(rel, &self.system)) else {
            return sheaf_core::FileChanges::Whole;
        };
        // Another tablespace at the parent's name (swapped in by a rename, recreated): whole.
        let first_system = self.system.first().is_some_and(|s| s == rel);
        if (rel.ends_with(".ibd") || first_system) && space_id(&self.datadir.join(rel)) != self.space_ids.get(rel).copied() {
            return sheaf_core::FileChanges::Whole;
        }
        // Each tablespace's own page size (ROW_FORMAT=COMPRESSED pages are smaller); a later file
        // of the system tablespace has no header of its own, and takes the first's.
        let header = match self.system.iter().position(|s| s == rel) {
            Some(k) if k > 0 => self.datadir.join(&self.system[0]),
            _ => self.datadir.join(rel),
        };
        let mut head = [0u8; 58];
        let read = std::fs::File::open(header).and_then(|f| std::os::unix::fs::FileExt::read_exact_at(&f, &mut head, 0));
        match read {
            Ok(()) => {
                let flags = u32::from_be_bytes(head[54..58].try_into().expect("4 bytes"));
                let unit = crate::page::Format::of_flags(flags, self.page_size).size();
                sheaf_core::FileChanges::Scan(Arc::new(SinceLsn { unit, lsn: self.lsn, parent_pages: old / unit as u64 }))
            }
            // Too short to have a page 0, or gone: whole (what there is of it).
            Err(_) => sheaf_core::FileChanges::Whole,
        }
    }
}

/// The facts a MariaDB backup records (in the manifest's `source`), for its restore and reports.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct MariaFacts {
    /// Always [`KIND`].
    pub kind: String,
    /// `VERSION()`.
    pub server_version: String,
    /// The data directory backed up.
    pub datadir: String,
    /// `innodb_page_size`.
    pub page_size: u64,
    /// `innodb_data_file_path`.
    pub data_file_path: String,
    /// `innodb_undo_tablespaces`.
    pub undo_tablespaces: u64,
    /// `innodb_checksum_algorithm`.
    pub checksum_algorithm: String,
    /// `ib_logfile0`'s size: the restored log's.
    pub log_file_size: u64,
    /// The checkpoint LSN recovery begins at (the copy's first byte).
    pub start_lsn: u64,
    /// The consistency point: the LSN at BLOCK_COMMIT, where the copy ends.
    pub end_lsn: u64,
    /// The binary log's position and GTIDs at the consistency point.
    pub binlog: BinlogPosition,
    /// Seconds commits waited: from BLOCK_COMMIT taken to the backup stage ended.
    pub block_commit_seconds: f64,
    /// Seconds DDL waited: from BLOCK_DDL taken to the stage ended.
    pub block_ddl_seconds: f64,
    /// Bytes of redo log copied.
    pub redo_bytes: u64,
    /// The least headroom the copy had before the server would have overwritten it.
    pub redo_least_headroom: u64,
    /// Pages whose checksum was checked, left unchecked (empty, compressed), read again.
    pub pages_verified: u64,
    pub pages_not_checked: u64,
    pub pages_read_again: u64,
    /// An incremental's or differential's parent's start checkpoint: pages newer are held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_lsn: Option<u64>,
    /// Each tablespace's id (page 0), as the backup holds it: an incremental on this one stores
    /// whole a file whose id differs (a table swapped in by a rename, recreated at its name).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub space_ids: std::collections::BTreeMap<String, u32>,
    /// Tablespaces DDL created, recreated or removed during the backup.
    pub ddl_created: Vec<String>,
    pub ddl_recreated: Vec<String>,
    pub ddl_removed: Vec<String>,
}

/// The report of a MariaDB backup: the core's, and the facts.
#[derive(Debug)]
pub struct MariaBackupReport {
    /// The core report.
    pub report: BackupReport,
    /// The source's facts.
    pub facts: MariaFacts,
}

/// Whether a set is a MariaDB backup.
pub fn is_mariadb(set: &sheaf_core::set::BackupSet) -> bool {
    set.manifest.source.get("kind").and_then(|k| k.as_str()) == Some(KIND)
}

/// Where the server's files are, as it says.
struct Places {
    datadir: PathBuf,
    /// The system tablespace's files, relative to the data directory.
    system: Vec<String>,
    /// Names (relative) never copied: the binary and relay logs and their indexes.
    logs: Vec<String>,
}

/// `dir` (a server variable: absolute, or relative to the data directory) as a path.
fn under(datadir: &Path, dir: &str) -> PathBuf {
    let p = Path::new(dir);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        datadir.join(p)
    }
}

fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

fn places(server: &mut Server) -> Result<Places> {
    let datadir = PathBuf::from(server.var("datadir")?.ok_or_else(|| Error::new(ErrorKind::Source, "the server names no datadir"))?);
    // Every InnoDB file in the data directory itself: the layouts sheaf restores to one folder.
    for (var, default) in [("innodb_data_home_dir", ""), ("innodb_log_group_home_dir", "./"), ("innodb_undo_directory", "./")] {
        let dir = server.var(var)?.unwrap_or_default();
        let dir = if dir.is_empty() { default.to_string() } else { dir };
        if !dir.is_empty() && !same_dir(&under(&datadir, &dir), &datadir) {
            return Err(Error::invalid(format!(
                "{var} is {dir}, outside the data directory {}: sheaf backs up servers whose InnoDB files are all in the data directory (mariadb-backup takes this layout)",
                datadir.display()
            )));
        }
    }
    if let Some(aria) = server.var("aria_log_dir_path")?.filter(|d| !d.is_empty() && !same_dir(&under(&datadir, d), &datadir)) {
        return Err(Error::invalid(format!(
            "aria_log_dir_path is {aria}, outside the data directory {}: sheaf backs up servers whose logs are all in the data directory",
            datadir.display()
        )));
    }
    let path = server.var("innodb_data_file_path")?.unwrap_or_else(|| "ibdata1:12M:autoextend".into());
    let system = path.split(';').filter_map(|f| f.split(':').next()).filter(|n| !n.is_empty()).map(str::to_string).collect();
    let mut logs = Vec::new();
    for var in ["log_bin_basename", "relay_log_basename"] {
        if let Some(base) = server.var(var)?.filter(|b| !b.is_empty()) {
            if let Ok(rel) = Path::new(&base).strip_prefix(&datadir) {
                logs.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    Ok(Places { datadir, system, logs })
}

/// What a file in the data directory is to the backup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    /// A folder (a database), or the data directory itself.
    Folder,
    /// An InnoDB tablespace: read without a lock, its pages checked.
    Tablespace,
    /// Any other file: read under BLOCK_COMMIT.
    Other,
    /// Not copied.
    Skipped,
}

fn part_of(l: &Listed, p: &Places) -> Part {
    let rel = l.entry.path.as_str();
    let name = rel.rsplit('/').next().unwrap_or(rel);
    match l.entry.kind {
        EntryKind::Dir if name == "lost+found" => Part::Skipped,
        EntryKind::Dir => Part::Folder,
        EntryKind::File | EntryKind::Hardlink => {
            let log = p.logs.iter().any(|b| {
                rel.strip_prefix(b.as_str())
                    .is_some_and(|rest| rest == ".index" || rest == ".state" || rest.strip_prefix('.').is_some_and(|n| n.bytes().all(|c| c.is_ascii_digit())))
            });
            let top = !rel.contains('/');
            if log || (top && (name.starts_with("ib_logfile") || name.starts_with("ibtmp") || name.ends_with(".pid") || name == REDO_FILE)) || rel.contains("lost+found/") {
                Part::Skipped
            } else if is_tablespace(rel, &p.system) {
                Part::Tablespace
            } else {
                Part::Other
            }
        }
        // Sockets and the like; links are kept as links.
        EntryKind::Symlink => Part::Other,
        _ => Part::Skipped,
    }
}

/// Whether `rel` is read under BLOCK_DDL: a table definition, or a MyISAM, CSV or ARCHIVE
/// table outside the `mysql` schema (whose log and statistics tables are written all along, and
/// are read under BLOCK_COMMIT with Aria's tables and logs, as mariabackup reads them).
fn quiet_now(rel: &str) -> bool {
    let Some((db, name)) = rel.split_once('/') else { return false };
    if db == "mysql" || name.contains('/') {
        return false;
    }
    let ext = name.rsplit_once('.').map_or("", |(_, e)| e);
    matches!(ext, "frm" | "par" | "TRG" | "TRN" | "opt" | "MYD" | "MYI" | "ARZ" | "ARM" | "CSV" | "CSM")
}

/// The data directory's listing now.
fn list(p: &Places, warnings: &mut Vec<String>) -> Result<Vec<Listed>> {
    list_tree(&p.datadir, 0, warnings).map_err(|e| match e.kind() {
        ErrorKind::Source | ErrorKind::Io => e.context(format!(
            "sheaf reads the server's files directly: run it on the server's host as the user the server runs as (or root); {} is the server's data directory",
            p.datadir.display()
        )),
        _ => e,
    })
}

/// Read the redo log's head, making sure it is the server's: its newest checkpoint must be the
/// one the server reports (asked on either side of the read, a checkpoint may fall between).
fn own_head(server: &mut Server, log: &Path) -> Result<Head> {
    let mut last = (0, 0);
    for _ in 0..20 {
        let before = server.status("Innodb_lsn_last_checkpoint")?;
        let head = Head::read(log)?;
        let after = server.status("Innodb_lsn_last_checkpoint")?;
        if head.checkpoint == before || head.checkpoint == after {
            return Ok(head);
        }
        last = (head.checkpoint, after);
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(Error::new(
        ErrorKind::Source,
        format!(
            "{} is not the redo log of the server connected to (its checkpoint is LSN {}, the server's {}): sheaf must run on the server's host, where @@datadir is the data directory it reads",
            log.display(),
            last.0,
            last.1
        ),
    ))
}

/// Take an online backup of the MariaDB server at `m.url`.
///
/// # Errors
/// Connection, version and privilege problems (naming the fix), files sheaf cannot read, a redo
/// log overwritten before it was copied, a page whose checksum never checks out; the server is
/// left as it was.
pub fn backup_mariadb(m: &MariaBackupOptions, opts: &BackupOptions, progress: Arc<dyn Progress>) -> Result<MariaBackupReport> {
    let address = Address::parse(&m.url, |k| std::env::var(k).ok())?;
    let mut server = Server::connect(&address)?;
    // The session sits idle through the copy, holding the backup stage: it must outlive the
    // server's wait_timeout; a stage that waits for a lock waits a bounded time.
    server.exec("SET SESSION wait_timeout = 2147483")?;
    server.exec(&format!("SET SESSION lock_wait_timeout = {}", crate::server::LOCK_WAIT))?;
    let places = places(&mut server)?;
    if let Some(want) = &m.expect {
        let got = server.identity()?;
        if got.server != want.server {
            return Err(Error::invalid(format!(
                "the server at {} is {}, and the repository holds the backups of {}: a repository holds one server's backups; make one for this server with sheaf init --repo NEW {}",
                server.describe(),
                got.server,
                want.server,
                crate::url::redact(&m.url)
            )));
        }
    }
    let page_size: u64 = server.var("innodb_page_size")?.and_then(|v| v.parse().ok()).unwrap_or(16384);
    if opts.transfer_size % page_size != 0 {
        return Err(Error::invalid(format!("transfer size {} is not a multiple of the server's {page_size}-byte InnoDB page: use e.g. 1MiB or 4MiB", opts.transfer_size)));
    }
    let mut facts = MariaFacts {
        kind: KIND.into(),
        server_version: server.version.clone(),
        datadir: places.datadir.display().to_string(),
        page_size,
        data_file_path: server.var("innodb_data_file_path")?.unwrap_or_default(),
        undo_tablespaces: server.var("innodb_undo_tablespaces")?.and_then(|v| v.parse().ok()).unwrap_or(0),
        checksum_algorithm: server.var("innodb_checksum_algorithm")?.unwrap_or_default(),
        ..Default::default()
    };
    // The privileges, before anything is copied: the binary log position is asked for at the
    // end, under BLOCK_COMMIT.
    server.binlog_position()?;
    // The first listing (the tablespaces read without a lock are those it names; what DDL does
    // after it is found under BLOCK_DDL) also sizes the pipeline.
    let mut warnings = Vec::new();
    let first = list(&places, &mut warnings)?;
    // A link (a database folder elsewhere, MyISAM's DATA or INDEX DIRECTORY) would be restored
    // as a link to the live server's files; MyRocks' files change under a checkpoint of its own.
    if let Some(link) = first.iter().find(|l| l.entry.kind == EntryKind::Symlink) {
        return Err(Error::invalid(format!(
            "{} in the data directory is a symbolic link (a database folder elsewhere, or a MyISAM table's DATA or INDEX DIRECTORY): a restore would point it at the live server's files; sheaf backs up servers whose files are all in the data directory; move them in, or back this server up with mariadb-backup",
            link.entry.path
        )));
    }
    if first.iter().any(|l| l.entry.path == "#rocksdb") {
        return Err(Error::invalid("the server has MyRocks tables (#rocksdb in the data directory): sheaf backs up InnoDB, Aria, MyISAM and the other file-based engines; back this server up with mariadb-backup"));
    }
    // A table made with DATA DIRECTORY keeps its tablespace elsewhere, named by an .isl file: a
    // backup of the data directory alone would restore without it.
    if let Some(isl) = first.iter().find(|l| l.entry.path.ends_with(".isl")) {
        return Err(Error::invalid(format!(
            "{} names a tablespace outside the data directory (a table made with DATA DIRECTORY): sheaf backs up servers whose InnoDB files are all in the data directory; move the table in (ALTER TABLE ... DATA DIRECTORY removed, rebuilt) or back this server up with mariadb-backup",
            isl.entry.path
        )));
    }
    let mut opts = opts.clone();
    if opts.expected_bytes.is_none() {
        opts.expected_bytes = Some(first.iter().filter(|l| l.entry.kind == EntryKind::File).map(|l| l.entry.size).sum());
    }
    let tuning = Tuning::resolve(&opts, 1)?;
    let mut session = Backup::start(&opts, tuning, progress)?;
    session.warnings.extend(warnings);
    if let Some(since) = &m.since {
        facts.since_lsn = Some(since.lsn);
        let changes = InnoChanges {
            datadir: places.datadir.clone(),
            system: places.system.clone(),
            page_size: page_size as usize,
            lsn: since.lsn,
            sizes: since.sizes.clone(),
            space_ids: since.space_ids.clone(),
        };
        session.incremental(since.lineage.clone(), Arc::new(changes));
    }
    // Tables are written, created and dropped while they are read: the redo log makes them
    // consistent.
    session.expect_changes();

    // 2. The stage, the redo log's head, its follower.
    server.stage(Stage::Start)?;
    let log = places.datadir.join("ib_logfile0");
    let head = own_head(&mut server, &log)?;
    if let Some(since) = m.since.as_ref().filter(|s| head.checkpoint < s.lsn) {
        return Err(Error::invalid(format!(
            "the server's checkpoint is at LSN {}, before the start of the backup this one would build on ({}): its redo log went back (the server restored or rebuilt in place?), and the pages it changed since cannot be told by their LSNs; take a full backup (--type full)",
            head.checkpoint, since.lsn
        )));
    }
    facts.log_file_size = head.file_size;
    facts.start_lsn = head.checkpoint;
    let follower = Follower::start(&log, head, server.another()?, m.redo_poll)?;
    tracing::info!(checkpoint = facts.start_lsn, "copying the redo log from the checkpoint");

    // 3. The tablespaces, no lock held.
    let pages = Arc::new(InnoPages::new(page_size as usize, places.system.clone()));
    let check: Arc<dyn ChunkCheck> = pages.clone();
    let root = session.add_root(Root { name: String::new(), path: places.datadir.display().to_string() });
    let owner = first.iter().find(|l| l.entry.path.is_empty()).map(|l| (l.entry.uid, l.entry.gid));
    // Each tablespace as first listed: its file, and the id its page 0 names.
    let mut seen: HashMap<String, (u64, u64, Option<u32>)> = HashMap::new();
    let mut folders = std::collections::HashSet::new();
    let mut batch = Vec::new();
    for l in first {
        match part_of(&l, &places) {
            Part::Folder => {
                folders.insert(l.entry.path.clone());
                batch.push(l);
            }
            Part::Tablespace => {
                seen.insert(l.entry.path.clone(), (l.dev, l.ino, space_id(&l.abs)));
                batch.push(l);
            }
            Part::Other | Part::Skipped => {}
        }
    }
    session.read_listed(vec![(root, batch, Some(check.clone()))])?;
    if let Some(e) = follower.failure() {
        return Err(e);
    }

    // 4. FLUSH, BLOCK_DDL: what DDL did meanwhile. A tablespace is the one first read when its
    // file and its page 0's id are the same (an inode number may be used again; a tablespace id
    // never is).
    server.stage(Stage::Flush)?;
    server.stage(Stage::BlockDdl)?;
    let ddl_taken = Instant::now();
    let now = list(&places, &mut session.warnings)?;
    pages.forget();
    let mut again = Vec::new();
    let mut present = std::collections::HashSet::new();
    let mut quiet = Vec::new();
    for mut l in now.iter().cloned() {
        match part_of(&l, &places) {
            Part::Folder if !folders.contains(&l.entry.path) => again.push(l),
            Part::Tablespace => {
                present.insert(l.entry.path.clone());
                let space = space_id(&l.abs);
                if let Some(id) = space {
                    facts.space_ids.insert(l.entry.path.clone(), id);
                }
                match seen.get(&l.entry.path) {
                    None => {
                        facts.ddl_created.push(l.entry.path.clone());
                        again.push(l);
                    }
                    Some(&was) if was != (l.dev, l.ino, space) => {
                        facts.ddl_recreated.push(l.entry.path.clone());
                        l.entry.path.push_str(NEW_SUFFIX);
                        again.push(l);
                    }
                    Some(_) => {}
                }
            }
            // Non-transactional tables and table definitions: after FLUSH nothing writes them,
            // and under BLOCK_DDL nothing creates or drops them, so they are read here rather
            // than while commits wait.
            Part::Other if quiet_now(&l.entry.path) => quiet.push(l),
            _ => {}
        }
    }
    session.read_listed(vec![(root, again, Some(check.clone()))])?;
    let read_quiet: std::collections::HashSet<String> = quiet.iter().map(|l| l.entry.path.clone()).collect();
    session.read_listed(vec![(root, quiet, None)])?;
    let mut gone: Vec<String> = seen.keys().filter(|p| !present.contains(*p)).cloned().collect();
    gone.sort();
    for g in &gone {
        session.add_bytes(root, &format!("{g}{GONE_SUFFIX}"), b"", 0o640)?;
    }
    facts.ddl_removed = gone;
    if !(facts.ddl_created.is_empty() && facts.ddl_recreated.is_empty() && facts.ddl_removed.is_empty()) {
        tracing::info!(created = facts.ddl_created.len(), recreated = facts.ddl_recreated.len(), removed = facts.ddl_removed.len(), "tablespaces changed by DDL during the backup");
    }

    // 5. BLOCK_COMMIT: everything else, the binary log position, the end LSN.
    server.stage(Stage::BlockCommit)?;
    let commit_taken = Instant::now();
    let others: Vec<Listed> = list(&places, &mut session.warnings)?.into_iter().filter(|l| part_of(l, &places) == Part::Other && !read_quiet.contains(&l.entry.path)).collect();
    session.read_listed(vec![(root, others, None)])?;
    facts.binlog = server.binlog_position()?;
    server.exec("FLUSH NO_WRITE_TO_BINLOG ENGINE LOGS")?;
    facts.end_lsn = server.status("Innodb_lsn_current")?;
    let redo = follower.finish(facts.end_lsn, REDO_WAIT)?;
    server.stage(Stage::End)?;
    facts.block_commit_seconds = commit_taken.elapsed().as_secs_f64();
    facts.block_ddl_seconds = ddl_taken.elapsed().as_secs_f64();
    tracing::info!(seconds = facts.block_commit_seconds, "commits waited in BLOCK_COMMIT");

    // 6. The redo log's copy, to exactly the end LSN (what follows was committed after the
    // consistency point).
    let spill = redo.file;
    let kept = START + facts.end_lsn - redo.start_lsn;
    spill.as_file().set_len(kept).map_err(|e| Error::io(ErrorKind::Io, "cannot cut the redo log's copy at the end LSN (TMPDIR)", e))?;
    facts.redo_bytes = facts.end_lsn - redo.start_lsn;
    facts.redo_least_headroom = redo.least_headroom;
    let mut l = list_one(spill.path(), REDO_FILE.to_string(), root)?;
    if let Some((uid, gid)) = owner {
        (l.entry.uid, l.entry.gid) = (uid, gid);
    }
    l.entry.mode = 0o640;
    session.read_listed(vec![(root, vec![l], None)])?;
    facts.pages_verified = pages.verified.load(Ordering::Relaxed);
    facts.pages_not_checked = pages.unchecked.load(Ordering::Relaxed);
    facts.pages_read_again = pages.mended.load(Ordering::Relaxed);
    let source = serde_json::to_value(&facts).expect("facts serialise");
    let report = session.finish_with(|findings| {
        if findings.is_empty() {
            return Ok(source);
        }
        Err(Error::corrupt(format!(
            "{} InnoDB page{} did not check out in ten reads, and InnoDB's recovery cannot repair a damaged page: {}; run CHECK TABLE on the tables named (mariadb-check), and restore them from an earlier backup",
            findings.len(),
            if findings.len() == 1 { "" } else { "s" },
            findings.iter().take(5).cloned().collect::<Vec<_>>().join("; ")
        )))
    })?;
    Ok(MariaBackupReport { report, facts })
}
