//! What the repository says about its backups: a finished backup's record (`backups/ID.json`),
//! the lock a backup being written holds (`backups/ID.lock`), finding them all ([`backups`]),
//! choosing one ([`pick`]) and opening its stripes ([`open_set`]).

use crate::repo::Repo;
use serde::{Deserialize, Serialize};
use sheaf_core::manifest::BackupType;
use sheaf_core::{BackupSet, Error, ErrorKind, Location, Result, Schemes};

use super::id::BackupId;
use super::paths;
use crate::cluster::lsn::Lsn;

/// A finished backup in the repository (`backups/ID.json`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct BackupRecord {
    /// The repository's name for it, `YYYYMMDD-HHMMSS.mmmZ` of its start ([`BackupId`]).
    pub id: BackupId,
    /// The set's backup id.
    pub backup_id: String,
    /// Free text.
    pub label: Option<String>,
    /// Start and stop, UTC, by this host's clock (the database host's).
    pub start_time: String,
    /// See `start_time`.
    pub stop_time: String,
    /// Seconds since the epoch.
    pub start_unix: i64,
    /// Seconds since the epoch.
    pub stop_unix: i64,
    /// The stop in milliseconds since the epoch, taken after the backup ended: a target time at or
    /// after it is consistent with this backup.
    pub stop_ms: i64,
    /// Where WAL replay starts (the checkpoint's redo point) and where the copy is consistent.
    pub start_lsn: Lsn,
    /// See `start_lsn`.
    pub stop_lsn: Lsn,
    /// Timeline it was taken on.
    pub timeline: u32,
    /// First WAL segment it needs.
    pub start_wal: String,
    /// Last WAL segment it needs to be consistent.
    pub stop_wal: String,
    /// Bytes read from the cluster.
    pub bytes_read: u64,
    /// Bytes stored.
    pub bytes_written: u64,
    /// Codec.
    pub compression: String,
    /// Stripes, relative to the repository.
    pub stripes: Vec<String>,
    /// Server version.
    pub server_version: String,
    /// `full`, `diff` or `incr` (records written before incrementals are all full).
    #[serde(default)]
    pub backup_type: BackupType,
    /// For a diff or incr: the repository ids of the backups it builds on, its full first and its
    /// parent last. Restoring it reads them all; expiring any of them takes this one too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<BackupId>,
    /// How an incremental found what changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Raw bytes the set holds (for an incremental, its changed pages and the files it stores
    /// whole); 0 in records older than incrementals.
    #[serde(default)]
    pub bytes_held: u64,
    /// In a locked repository: until when (seconds since the epoch) none of its objects can be
    /// deleted or overwritten.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locked_until: Option<i64>,
    /// What the DBA said of it: `backup --annotation KEY=VALUE` at backup time, or as `sheaf
    /// annotate` edited it since (read back from `annotations/ID.annotations`, which wins).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub annotations: std::collections::BTreeMap<String, String>,
    /// A full backup that went on from where earlier attempts stopped: what it took of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed: Option<sheaf_core::manifest::Resumed>,
    /// A MariaDB server's backup (in its repository): where it is consistent. Its PostgreSQL
    /// fields are empty: no WAL, no timeline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mariadb: Option<MariaPoint>,
}

/// Where a MariaDB backup is consistent: its redo log's span and the binary log's position.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MariaPoint {
    /// The checkpoint LSN its recovery begins at.
    pub start_lsn: u64,
    /// The consistency point (at BLOCK_COMMIT).
    pub end_lsn: u64,
    /// The binary log file and position there, when the server writes one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binlog_file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binlog_position: Option<u64>,
    /// `@@gtid_binlog_pos` there.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub gtid_binlog_pos: String,
}

impl BackupRecord {
    /// Its parent's repository id, for a diff or incr.
    pub fn parent(&self) -> Option<&BackupId> {
        self.chain.last()
    }
    /// Stored / read.
    pub fn ratio(&self) -> f64 {
        if self.bytes_written == 0 {
            0.0
        } else {
            self.bytes_read as f64 / self.bytes_written as f64
        }
    }
}

/// What a backup being written leaves at `backups/ID.lock`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupLock {
    /// Repository id of the backup.
    pub id: BackupId,
    /// Host name.
    pub host: String,
    /// Process id on that host.
    pub pid: u32,
    /// Start, seconds since the epoch.
    pub start_unix: i64,
    /// For an incremental or differential: the backups it builds on (expire keeps them while it
    /// runs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<BackupId>,
    /// Where its WAL starts, when that is known before it finishes and may be older than every
    /// finished backup's (a backup being copied in by `sheaf copy`): expire keeps WAL from there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_wal: Option<String>,
}

pub(crate) fn now_unix() -> i64 {
    sheaf_core::time::now_ms().div_euclid(1000)
}

pub use sheaf_core::host::host_name;

impl BackupLock {
    /// The lock this process holds for backup `id`, begun at `start_unix`.
    pub fn ours(id: &BackupId, start_unix: i64) -> BackupLock {
        BackupLock { id: id.clone(), host: host_name(), pid: std::process::id(), start_unix, chain: Vec::new(), start_wal: None }
    }

    /// Whether its writer still runs: on this host, a live process; on another, begun less than a
    /// day ago (its process cannot be asked).
    pub fn running(&self) -> bool {
        if self.host == host_name() {
            sheaf_core::host::process_alive(self.pid)
        } else {
            now_unix() - self.start_unix < 86_400
        }
    }
}

/// A backup found in the repository.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum Found {
    /// Finished: its record.
    Complete(Box<BackupRecord>),
    /// Being written, or left by a crash: its lock, if any, and its objects.
    Unfinished {
        /// Repository id.
        id: BackupId,
        /// The lock, when it is still there.
        lock: Option<BackupLock>,
        /// Whether its writer still runs (same host, live pid) or started less than a day ago on
        /// another host.
        running: bool,
        /// Its objects (stripes, lock).
        objects: Vec<String>,
    },
}

impl Found {
    /// Its repository id.
    pub fn id(&self) -> &str {
        match self {
            Found::Complete(r) => &r.id,
            Found::Unfinished { id, .. } => id,
        }
    }

    /// The record, when the backup is finished.
    pub fn record(&self) -> Option<&BackupRecord> {
        match self {
            Found::Complete(r) => Some(r),
            Found::Unfinished { .. } => None,
        }
    }
}

/// Every backup in the repository, oldest first.
///
/// # Errors
/// When the repository cannot be listed or a record cannot be read.
pub fn backups(repo: &Repo) -> Result<Vec<Found>> {
    let listed = repo.list(paths::BACKUPS)?;
    let mut ids: Vec<BackupId> = Vec::new();
    for o in &listed {
        if let Some(id) = paths::backup_id(&o.name) {
            if !ids.iter().any(|i| i == id) {
                ids.push(id.into());
            }
        }
    }
    ids.sort();
    let edited = repo.list(paths::ANNOTATIONS)?;
    let mut out = Vec::new();
    for id in ids {
        let has = |name: &str| listed.iter().any(|o| o.name == name);
        if has(&paths::record(&id)) {
            let mut r: BackupRecord = repo.get_json(&paths::record(&id))?;
            if edited.iter().any(|o| o.name == paths::annotations(&id)) {
                r.annotations = crate::repo::annotations::read(repo, &id)?;
            }
            out.push(Found::Complete(Box::new(r)));
            continue;
        }
        let lock: Option<BackupLock> = if has(&paths::lock(&id)) { repo.get_json(&paths::lock(&id)).ok() } else { None };
        let running = lock.as_ref().is_some_and(BackupLock::running);
        let objects = listed.iter().filter(|o| paths::of_backup(&o.name, &id)).map(|o| o.name.clone()).collect();
        out.push(Found::Unfinished { id, lock, running, objects });
    }
    Ok(out)
}

/// The finished backups, oldest first.
///
/// # Errors
/// As [`backups`].
pub fn complete(repo: &Repo) -> Result<Vec<BackupRecord>> {
    Ok(backups(repo)?
        .into_iter()
        .filter_map(|f| match f {
            Found::Complete(r) => Some(*r),
            Found::Unfinished { .. } => None,
        })
        .collect())
}

/// A backup as a command names it: the newest finished one, or one by its id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum BackupRef {
    /// `latest`: the newest finished backup.
    #[default]
    Latest,
    /// Its id, as `sheaf info` lists it (or the set's own backup id).
    Id(String),
    /// The newest finished backup annotated KEY=VALUE (`--annotation KEY=VALUE`).
    Annotated(String, String),
}

impl std::str::FromStr for BackupRef {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim() {
            "" => Err(Error::invalid("no backup named: give its id, as sheaf info lists it, or latest")),
            "latest" => Ok(BackupRef::Latest),
            id => Ok(BackupRef::Id(id.to_string())),
        }
    }
}

impl std::fmt::Display for BackupRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackupRef::Latest => f.write_str("latest"),
            BackupRef::Id(id) => f.write_str(id),
            BackupRef::Annotated(k, v) => write!(f, "the newest backup annotated {k}={v}"),
        }
    }
}

/// The backup `which` names among `records` (oldest first).
///
/// # Errors
/// None there, or no such id (listing those there are).
pub fn pick<'a>(records: &'a [BackupRecord], which: &BackupRef) -> Result<&'a BackupRecord> {
    let id = match which {
        BackupRef::Latest => {
            return records.last().ok_or_else(|| Error::new(ErrorKind::Incomplete, "the repository holds no finished backup: take one with sheaf backup --repo"));
        }
        BackupRef::Id(id) => id.as_str(),
        BackupRef::Annotated(key, value) => {
            return records.iter().rev().find(|r| r.annotations.get(key) == Some(value)).ok_or_else(|| {
                let seen: std::collections::BTreeSet<&str> = records.iter().filter_map(|r| r.annotations.get(key)).map(String::as_str).collect();
                Error::invalid(format!(
                    "no finished backup is annotated {key}={value}; {}",
                    if seen.is_empty() {
                        format!("none has {key} (sheaf annotate --set ID {key}=VALUE adds it)")
                    } else {
                        format!("{key} has: {}", seen.into_iter().collect::<Vec<_>>().join(", "))
                    }
                ))
            });
        }
    };
    records.iter().find(|r| r.id == id || r.backup_id == id).ok_or_else(|| {
        Error::invalid(format!(
            "no backup {id} in the repository; it holds: {}",
            if records.is_empty() { "none".to_string() } else { records.iter().map(|r| r.id.as_str()).collect::<Vec<_>>().join(", ") }
        ))
    })
}

/// The records of the chain a backup restores through: its full first, itself last (a full
/// backup alone).
///
/// # Errors
/// A backup of the chain that is not in the repository (expired, deleted), naming it.
pub fn chain_of<'a>(records: &'a [BackupRecord], record: &'a BackupRecord) -> Result<Vec<&'a BackupRecord>> {
    let mut out = Vec::with_capacity(record.chain.len() + 1);
    for id in &record.chain {
        let found = records.iter().find(|r| &r.id == id).ok_or_else(|| {
            Error::new(
                ErrorKind::Incomplete,
                format!(
                    "backup {} is a {} backup that builds on backup {id}, which is not in the repository (deleted by hand?): it cannot be restored; take a full backup",
                    record.id, record.backup_type
                ),
            )
        })?;
        out.push(found);
    }
    out.push(record);
    Ok(out)
}

/// The sets of a backup's chain, opened, oldest first (see [`chain_of`]). With `lean`, each is
/// opened lean ([`BackupSet::open_lean`]: what a restore or a check of the chain reads; extract
/// and consolidation read them whole).
///
/// # Errors
/// As [`chain_of`] and [`open_set`], naming the backup of the chain at fault.
pub fn open_chain(repo: &Repo, records: &[BackupRecord], record: &BackupRecord, schemes: &dyn Schemes, lean: bool) -> Result<Vec<BackupSet>> {
    let chain = chain_of(records, record)?;
    chain
        .into_iter()
        .map(|r| {
            let opened = if lean { open_set_lean(repo, r, schemes) } else { open_set(repo, r, schemes) };
            opened.map_err(|e| if r.id == record.id { e } else { e.context(format!("backup {} (which {} builds on)", r.id, record.id)) })
        })
        .collect()
}

/// [`open_set`], lean ([`BackupSet::open_lean`]).
///
/// # Errors
/// As [`open_set`].
pub fn open_set_lean(repo: &Repo, record: &BackupRecord, schemes: &dyn Schemes) -> Result<BackupSet> {
    let stripes: Vec<Location> = record.stripes.iter().map(|n| repo.location(n)).collect();
    BackupSet::open_lean(&stripes, schemes, repo.keys())
}

/// The set a record names: its stripes in the repository, read with the repository's keys (and
/// its rate limit, where it has one).
///
/// # Errors
/// As [`BackupSet::open_with`]: stripes missing, damaged or of another set.
pub fn open_set(repo: &Repo, record: &BackupRecord, schemes: &dyn Schemes) -> Result<BackupSet> {
    let stripes: Vec<Location> = record.stripes.iter().map(|n| repo.location(n)).collect();
    BackupSet::open_with(&stripes, schemes, repo.keys())
}

/// A finished backup of the repository with the backups it builds on, opened, oldest first (a
/// full backup alone).
///
/// # Errors
/// As [`complete`], [`pick`] and [`open_chain`].
pub fn open_backup_chain(repo: &Repo, which: &BackupRef, schemes: &dyn Schemes, lean: bool) -> Result<Vec<BackupSet>> {
    let records = complete(repo)?;
    open_chain(repo, &records, pick(&records, which)?, schemes, lean)
}

/// A finished full backup's record with nothing in it but its id and one stripe (tests).
#[cfg(test)]
pub(crate) fn test_record(id: &str) -> BackupRecord {
    BackupRecord {
        id: id.into(),
        backup_id: format!("{id}-set"),
        label: None,
        start_time: String::new(),
        stop_time: String::new(),
        start_unix: 0,
        stop_unix: 0,
        stop_ms: 0,
        start_lsn: crate::cluster::lsn::Lsn(0),
        stop_lsn: crate::cluster::lsn::Lsn(0),
        timeline: 1,
        start_wal: String::new(),
        stop_wal: String::new(),
        bytes_read: 0,
        bytes_written: 0,
        compression: "zstd:low".into(),
        stripes: vec![format!("backups/{id}/{id}_1.sheaf")],
        server_version: String::new(),
        backup_type: Default::default(),
        chain: vec![],
        method: None,
        bytes_held: 0,
        locked_until: None,
        annotations: Default::default(),
        resumed: None,
        mariadb: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_of_this_process_is_running_and_one_of_a_gone_process_is_not() {
        assert!(BackupLock::ours(&"a".into(), now_unix()).running());
        let gone = BackupLock { pid: 0x7fff_fff0, ..BackupLock::ours(&"b".into(), now_unix()) };
        assert!(!gone.running());
        let elsewhere = BackupLock { host: format!("{}-not", host_name()), pid: 1, id: "c".into(), start_unix: now_unix() - 2 * 86_400, chain: vec![], start_wal: None };
        assert!(!elsewhere.running(), "another host's lock older than a day is stale");
    }

    #[test]
    fn a_record_written_before_reads_and_writes_back_the_same() {
        let old = r#"{"id":"20260101-000000Z","backup_id":"b","label":null,"start_time":"2026-01-01 00:00:00","stop_time":"2026-01-01 00:00:02","start_unix":1767225600,"stop_unix":1767225602,"stop_ms":1767225602000,"start_lsn":"0/2000028","stop_lsn":"1/A0","timeline":1,"start_wal":"000000010000000000000002","stop_wal":"000000010000000100000000","bytes_read":1,"bytes_written":1,"compression":"zstd:3","stripes":["backups/20260101-000000Z/1.sheaf"],"server_version":"17.2","backup_type":"full","bytes_held":0}"#;
        let r: BackupRecord = serde_json::from_str(old).unwrap();
        assert_eq!((r.start_lsn, r.stop_lsn), (Lsn(0x200_0028), Lsn(0x1_0000_00A0)));
        assert_eq!(serde_json::to_string(&r).unwrap(), old);
        assert!(serde_json::from_str::<BackupRecord>(&old.replace("1/A0", "1/A0/0")).is_err(), "an LSN that does not parse is refused");
    }

    #[test]
    fn pick_names_what_there_is() {
        assert_eq!(pick(&[], &BackupRef::Latest).unwrap_err().kind(), ErrorKind::Incomplete);
        assert!(pick(&[], &BackupRef::Id("x".into())).unwrap_err().to_string().contains("it holds: none"));
    }
}
