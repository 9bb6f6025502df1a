//! What a PostgreSQL backup is asked to do ([`PgBackupOptions`]) and what it reports
//! ([`PgBackupReport`]), whichever way it reads the cluster: its files ([`crate::backup::direct`]) or the
//! replication protocol ([`crate::backup::basebackup`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::repo::Repo;
use sheaf_core::manifest::BackupType;
use sheaf_core::source::Files;
use sheaf_core::BackupReport;

use crate::backup::facts::ClusterFacts;
use crate::backup::incremental::Parent;

/// What a PostgreSQL backup is asked to do, beyond the engine's options.
#[derive(Clone, Debug, Default)]
pub struct PgBackupOptions {
    /// libpq-style URL of the server.
    pub url: String,
    /// The data directory, when the server will not say (or to check it is the one meant).
    pub pgdata: Option<PathBuf>,
    /// Replication slot name (default `sheaf_<pid>`).
    pub slot: Option<String>,
    /// Spread the start checkpoint instead of doing it at once.
    pub spread_checkpoint: bool,
    /// Keep a backup that found page checksum failures (they are still recorded).
    pub ignore_checksum_failures: bool,
    /// Refuse a cluster with another system identifier (a repository's), before writing anything.
    pub expect_system_identifier: Option<crate::cluster::system::SystemId>,
    /// Build on this backup (an incremental or differential): only what changed since it is read
    /// into the set. A parent that the server's timeline left before it was consistent makes the
    /// backup a full one, saying so.
    pub parent: Option<Parent>,
    /// Hybrid: read the files from this standby of the primary at `url` (where the backup
    /// starts and stops); `pgdata` is then the standby's.
    pub standby: Option<String>,
    /// When `url` is a standby: its primary, asked to switch WAL segments while the backup waits
    /// for WAL to reach the archive.
    pub primary: Option<String>,
    /// Take the backup's WAL from `archive` only, not from the pg_wal beside the files.
    pub wal_from_archive: bool,
    /// How long to wait for WAL to arrive or a standby to replay (default
    /// [`crate::backup::topology::DEFAULT_WAIT`]).
    pub wal_timeout: Option<Duration>,
    /// The repository the primary archives into: where WAL missing from pg_wal is found.
    pub archive: Option<Repo>,
    /// Read the cluster's files on another host, through its agent, rather than on this one.
    pub remote: Option<Remote>,
    /// Read the cluster over the replication protocol (BASE_BACKUP) instead of its files.
    pub via_base_backup: bool,
}

impl PgBackupOptions {
    /// Refuse the cluster `theirs` (at `url`) when another is expected
    /// ([`PgBackupOptions::expect_system_identifier`]): named against the repository's histories
    /// when backing up into one ([`crate::repo::histories::not_recorded`]).
    ///
    /// # Errors
    /// The refusal.
    pub fn check_cluster(&self, url: &str, theirs: crate::cluster::system::SystemId) -> sheaf_core::Result<()> {
        let Some(want) = self.expect_system_identifier.filter(|w| *w != theirs) else { return Ok(()) };
        Err(match &self.archive {
            Some(repo) => crate::repo::histories::not_recorded(repo, url, theirs),
            None => crate::repo::histories::mismatch(url, theirs, want, None, None),
        })
    }
}

/// Another host's files (through its agent): the backup is taken on a backup host.
#[derive(Clone)]
pub struct Remote {
    /// Its files.
    pub files: Arc<dyn Files>,
    /// The data directory it serves: read unless [`PgBackupOptions::pgdata`] says otherwise.
    pub pgdata: PathBuf,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Remote({}:{})", self.files.host().unwrap_or_default(), self.pgdata.display())
    }
}

/// A finished PostgreSQL backup: the engine's report and the facts recorded in the manifest.
#[derive(Clone, Debug)]
pub struct PgBackupReport {
    /// The engine's report.
    pub report: BackupReport,
    /// Server, LSNs, timeline, tablespaces, pages verified: what the manifest records.
    pub facts: ClusterFacts,
    /// Wall time of the whole backup, connection and checks included.
    pub seconds_total: f64,
    /// `full`, `diff` or `incr`: what was taken.
    pub backup_type: BackupType,
    /// How an incremental found what changed (`page scan`), and why.
    pub method: Option<String>,
    /// Why a full backup was taken where an incremental or differential was asked for.
    pub full_because: Option<String>,
}

impl PgBackupReport {
    /// The facts as a backup's report gives them (`sheaf backup --json`'s `postgres`): the
    /// manifest's, less backup_label and tablespace_map, the databases by name (their relation
    /// lists stay in the manifest), the checksum failures listed, and the whole time.
    pub fn postgres(&self) -> serde_json::Value {
        let mut v = self.facts.to_value();
        if let Some(o) = v.as_object_mut() {
            o.remove("backup_label");
            o.remove("tablespace_map");
            let names: Vec<serde_json::Value> = self.facts.databases.iter().flatten().map(|d| serde_json::json!(d.name)).collect();
            o.insert("databases".into(), serde_json::Value::Array(names));
            o.insert("checksum_failures".into(), serde_json::json!(self.report.check_failures));
            o.insert("seconds_total".into(), serde_json::json!(self.seconds_total));
            o.insert("backup_type".into(), serde_json::json!(self.backup_type));
            if let Some(m) = &self.method {
                o.insert("method".into(), serde_json::json!(m));
            }
            if let Some(w) = &self.full_because {
                o.insert("full_because".into(), serde_json::json!(w));
            }
        }
        v
    }
}
