//! A MariaDB server's backups in a repository of its own (`repo.json` of kind `mariadb`, beside
//! no PostgreSQL cluster's): made by `sheaf init --repo R mariadb://...`, backed up into as a
//! PostgreSQL cluster's repository is (the set under `backups/ID/`, its lock while it runs, its
//! record last; [`sheaf_pg::backup::repo::publish_or_clean_up`]), and restored from by id. The
//! repository's `info`, `verify`, `expire`, `keep` and `annotate` are the PostgreSQL ones: a
//! MariaDB record has no WAL, and every backup is full and whole by itself.

use std::sync::Arc;

use sheaf_core::manifest::{BackupType, EntryKind};
use sheaf_core::repo::Place;
use sheaf_core::Lineage;
use sheaf_core::{BackupOptions, Error, ErrorKind, Progress, RestoreOptions, Result, Schemes};
use sheaf_pg::backup::incremental::may_build_on;
use sheaf_pg::cluster::system::SystemId;
use sheaf_pg::maintain::expire::{apply, HistoryPlan, Retention};
use sheaf_pg::repo::id::BackupId;
use sheaf_pg::repo::meta::{check_lock, MariaSource, RepoLock, RepoMeta, MARIADB};
use sheaf_pg::repo::records::{chain_of, complete, open_chain, open_set, pick, BackupLock, BackupRecord, BackupRef, MariaPoint};
use sheaf_pg::repo::Repo;

use crate::backup::{backup_mariadb, is_mariadb, MariaBackupOptions, MariaBackupReport, Since};
use crate::restore::{restore_mariadb_chain, MariaRestored};
use crate::server::Server;
use crate::url::Address;

/// Make a repository at `place` for the MariaDB server at `url`.
///
/// # Errors
/// The server cannot be reached or is not one sheaf backs up; a place that is not empty; a lock
/// that cannot be taken.
pub fn init(place: &Place, url: &str, lock: Option<RepoLock>) -> Result<Repo> {
    check_lock(place, lock.as_ref())?;
    let mut server = Server::connect(&Address::parse(url, |k| std::env::var(k).ok())?)?;
    let meta = RepoMeta {
        format: if lock.is_some() { 2 } else { 1 },
        kind: MARIADB.into(),
        system_identifier: SystemId(0),
        wal_segment_size: 0,
        mariadb: Some(server.identity()?),
        server_version: server.version.clone(),
        created: sheaf_core::time::utc_now(),
        lock,
        history: 1,
    };
    place.init(&meta)
}

fn mariadb_only(repo: &Repo) -> Result<&MariaSource> {
    repo.meta().mariadb.as_ref().filter(|_| repo.meta().is_mariadb()).ok_or_else(|| {
        Error::invalid(format!(
            "{} holds a PostgreSQL cluster's backups: a repository holds one server's backups, so give the MariaDB server its own (sheaf init --repo NEW mariadb://...)",
            repo.display()
        ))
    })
}

/// What a backup into the repository takes besides the source.
#[derive(Clone, Debug, Default)]
pub struct InRepoOptions {
    /// Full, or an incremental (on the newest backup) or differential (on the newest full).
    pub backup_type: BackupType,
    /// Stripes (1 to 64).
    pub stripes: usize,
    /// Retention applied once it is published.
    pub expire_after: Option<Retention>,
    /// `backup --annotation KEY=VALUE`.
    pub annotations: std::collections::BTreeMap<String, String>,
}

/// A backup into the repository: its report, record, and what expire-auto did after it.
pub struct InRepo {
    /// Why a full backup was taken where an incremental or differential was asked for (nothing
    /// to build on).
    pub full_because: Option<String>,
    /// The backup's report.
    pub backup: MariaBackupReport,
    /// Its record.
    pub record: BackupRecord,
    /// With [`InRepoOptions::expire_after`]: what expire removed, or why it failed.
    pub expired: Option<Result<Vec<HistoryPlan>>>,
}

/// Back the server `m.url` names up into `repo` (its own: the same server the repository was made
/// for).
///
/// # Errors
/// A repository of another server or of PostgreSQL; the backup's errors (nothing is recorded, and
/// what it wrote is removed).
pub fn backup_to_repo(repo: &Repo, m: &MariaBackupOptions, opts: &BackupOptions, o: InRepoOptions, schemes: &dyn Schemes, progress: Arc<dyn Progress>) -> Result<InRepo> {
    let source = mariadb_only(repo)?.clone();
    if !(1..=64).contains(&o.stripes) {
        return Err(Error::invalid(format!("--stripes {}: give 1 to 64", o.stripes)));
    }
    // The parent, opened before anything is written: one missing or damaged is named now.
    let records = complete(repo)?;
    let mut full_because = None;
    let wanted = o.backup_type;
    let parent = match records.iter().rev().find(|r| may_build_on(wanted, r.backup_type)) {
        _ if wanted == BackupType::Full => None,
        None => {
            full_because =
                Some(format!("the repository holds no {} to build a {wanted} on: taking a full backup", if wanted == BackupType::Diff { "full backup" } else { "backup" }));
            None
        }
        Some(p) => {
            let chain = chain_of(&records, p)?;
            let set = open_set(repo, p, schemes).map_err(|e| e.context(format!("parent backup {}", p.id)))?;
            let lsn = p.mariadb.as_ref().map(|x| x.start_lsn).ok_or_else(|| Error::corrupt(format!("parent backup {}: its record has no MariaDB LSNs", p.id)))?;
            // A tablespace the parent read twice (recreated during it: its second read is stored
            // as NAME.sheaf-new) is not built on: the child stores it whole.
            let files = || set.manifest.entries.iter().filter(|e| e.kind == EntryKind::File && !e.vanished);
            let read_again: std::collections::HashSet<&str> = files().filter_map(|e| e.path.strip_suffix(crate::backup::NEW_SUFFIX)).collect();
            let sizes = files().filter(|e| !read_again.contains(e.path.as_str())).map(|e| (e.path.clone(), e.size)).collect();
            let space_ids = crate::restore::facts_of(&set)?.space_ids;
            let lineage = Lineage { backup_type: wanted, chain: chain.iter().map(|r| r.backup_id.clone()).collect() };
            Some((Since { lineage, lsn, sizes, space_ids }, chain.iter().map(|r| r.id.clone()).collect::<Vec<_>>()))
        }
    };
    let backup_type = if parent.is_some() { wanted } else { BackupType::Full };
    let (since, chain) = match parent {
        Some((s, c)) => (Some(s), c),
        None => (None, Vec::new()),
    };
    let m = MariaBackupOptions { expect: Some(source), since, ..m.clone() };
    let start_ms = sheaf_core::time::now_ms();
    let id = BackupId::at(start_ms);
    let mut lock = BackupLock::ours(&id, start_ms / 1000);
    // While it runs, expire keeps the chain it builds on.
    lock.chain = chain.clone();
    let (backup, record) = sheaf_pg::backup::repo::publish_or_clean_up(repo, &id, o.stripes, lock, None, opts, |opts, names| {
        let r = backup_mariadb(&m, opts, progress)?;
        let stop_ms = sheaf_core::time::now_ms();
        let f = &r.facts;
        let record = BackupRecord {
            id: id.clone(),
            backup_id: r.report.backup_id.clone(),
            label: r.report.label.clone(),
            start_time: sheaf_core::time::utc(start_ms / 1000),
            stop_time: sheaf_core::time::utc(stop_ms / 1000),
            start_unix: start_ms / 1000,
            stop_unix: stop_ms / 1000,
            stop_ms,
            start_lsn: Default::default(),
            stop_lsn: Default::default(),
            timeline: 0,
            start_wal: String::new(),
            stop_wal: String::new(),
            bytes_read: r.report.bytes_read,
            bytes_written: r.report.bytes_written,
            compression: r.report.compression.clone(),
            stripes: names.to_vec(),
            server_version: f.server_version.clone(),
            backup_type,
            chain: chain.clone(),
            method: m.since.as_ref().map(|x| format!("every page read, those with an LSN past the parent's start checkpoint {} kept", x.lsn)),
            bytes_held: r.report.bytes_held,
            locked_until: repo.write_lock().map(|l| l.until),
            annotations: o.annotations.clone(),
            resumed: None,
            mariadb: Some(MariaPoint {
                start_lsn: f.start_lsn,
                end_lsn: f.end_lsn,
                binlog_file: f.binlog.file.clone(),
                binlog_position: f.binlog.position,
                gtid_binlog_pos: f.binlog.gtid_binlog_pos.clone(),
            }),
        };
        Ok((r, record))
    })?;
    let expired = o.expire_after.map(|keep| apply(repo, &keep, sheaf_core::time::now_ms() / 1000));
    Ok(InRepo { full_because, backup, record, expired })
}

/// Restore backup `which` of `repo` to `opts.target`, prepared.
///
/// # Errors
/// A repository of PostgreSQL; no such backup; the restore's errors.
pub fn restore_from_repo(repo: &Repo, schemes: &dyn Schemes, which: &BackupRef, opts: &RestoreOptions, progress: Arc<dyn Progress>) -> Result<(MariaRestored, BackupRecord)> {
    mariadb_only(repo)?;
    let records = complete(repo)?;
    let record = pick(&records, which)?.clone();
    // An incremental with the backups it builds on, oldest first.
    let sets = open_chain(repo, &records, &record, schemes, true)?;
    if let Some(s) = sets.iter().find(|s| !is_mariadb(s)) {
        return Err(Error::new(ErrorKind::Corrupt, format!("backup {} of {} is not a MariaDB backup", s.manifest.backup_id, repo.display())));
    }
    let restored = restore_mariadb_chain(&sets.iter().collect::<Vec<_>>(), opts, progress)?;
    Ok((restored, record))
}
