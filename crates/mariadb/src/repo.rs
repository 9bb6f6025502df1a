//! A MariaDB server's backups in a repository of its own (`repo.json` of kind `mariadb`, beside
//! no PostgreSQL cluster's): made by `sheaf init --repo R mariadb://...`, backed up into as a
//! PostgreSQL cluster's repository is (the set under `backups/ID/`, its lock while it runs, its
//! record last; [`sheaf_pg::backup::repo::publish_or_clean_up`]), and restored from by id. The
//! repository's `info`, `verify`, `expire`, `keep` and `annotate` are the PostgreSQL ones: a
//! MariaDB record has no WAL, and every backup is full and whole by itself.

use std::sync::Arc;

use sheaf_core::repo::Place;
use sheaf_core::{BackupOptions, Error, ErrorKind, Progress, RestoreOptions, Result, Schemes};
use sheaf_pg::cluster::system::SystemId;
use sheaf_pg::maintain::expire::{apply, HistoryPlan, Retention};
use sheaf_pg::repo::id::BackupId;
use sheaf_pg::repo::meta::{check_lock, MariaSource, RepoLock, RepoMeta, MARIADB};
use sheaf_pg::repo::records::{complete, open_set_lean, pick, BackupLock, BackupRecord, BackupRef, MariaPoint};
use sheaf_pg::repo::Repo;

use crate::backup::{backup_mariadb, is_mariadb, MariaBackupOptions, MariaBackupReport};
use crate::restore::{restore_mariadb, MariaRestored};
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
    /// Stripes (1 to 64).
    pub stripes: usize,
    /// Retention applied once it is published.
    pub expire_after: Option<Retention>,
    /// `backup --annotation KEY=VALUE`.
    pub annotations: std::collections::BTreeMap<String, String>,
}

/// A backup into the repository: its report, record, and what expire-auto did after it.
pub struct InRepo {
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
pub fn backup_to_repo(repo: &Repo, m: &MariaBackupOptions, opts: &BackupOptions, o: InRepoOptions, progress: Arc<dyn Progress>) -> Result<InRepo> {
    let source = mariadb_only(repo)?.clone();
    if !(1..=64).contains(&o.stripes) {
        return Err(Error::invalid(format!("--stripes {}: give 1 to 64", o.stripes)));
    }
    let m = MariaBackupOptions { expect: Some(source), ..m.clone() };
    let start_ms = sheaf_core::time::now_ms();
    let id = BackupId::at(start_ms);
    let lock = BackupLock::ours(&id, start_ms / 1000);
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
            backup_type: Default::default(),
            chain: Vec::new(),
            method: None,
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
    Ok(InRepo { backup, record, expired })
}

/// Restore backup `which` of `repo` to `opts.target`, prepared.
///
/// # Errors
/// A repository of PostgreSQL; no such backup; the restore's errors.
pub fn restore_from_repo(repo: &Repo, schemes: &dyn Schemes, which: &BackupRef, opts: &RestoreOptions, progress: Arc<dyn Progress>) -> Result<(MariaRestored, BackupRecord)> {
    mariadb_only(repo)?;
    let records = complete(repo)?;
    let record = pick(&records, which)?.clone();
    let set = open_set_lean(repo, &record, schemes).map_err(|e| e.context(format!("backup {}", record.id)))?;
    if !is_mariadb(&set) {
        return Err(Error::new(ErrorKind::Corrupt, format!("backup {} of {} is not a MariaDB backup", record.id, repo.display())));
    }
    let restored = restore_mariadb(&set, opts, false, progress)?;
    Ok((restored, record))
}
