//! What a PostgreSQL backup records about its cluster, as one type: [`ClusterFacts`] is written
//! into the manifest's `source` once (by [`crate::backup::direct`]) and read back from it by everything
//! else: the repository's records, restore (tablespaces, `--db-include`), extract and lab (the
//! catalogs), the CLI's report and history. The core keeps `source` opaque JSON, so that it knows
//! nothing of PostgreSQL; the keys are this struct's fields, unchanged since the first backups,
//! and a key an older sheaf did not write reads as its default.

use serde::{Deserialize, Serialize};
use sheaf_core::{BackupSet, Error, Result};

use crate::cluster::lsn::Lsn;
use crate::cluster::system::SystemId;
use crate::connect::catalog::{DatabaseInfo, Tablespace};

/// The `kind` of a PostgreSQL backup's source facts.
pub const KIND: &str = "postgres";

/// What a backup recorded about the cluster it copied (the manifest's `source`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClusterFacts {
    /// `postgres`.
    pub kind: String,
    /// The server's URL, without its password.
    pub url: String,
    /// `server_version`, e.g. `15.18 (Debian 15.18-0+deb12u1)`.
    pub server_version: String,
    /// `server_version_num`, e.g. 150018.
    pub server_version_num: i32,
    /// The cluster's system identifier.
    pub system_identifier: SystemId,
    /// The timeline the backup was taken on.
    pub timeline: u32,
    /// Where WAL replay starts (the checkpoint's redo point).
    pub start_lsn: Lsn,
    /// Where the copy is consistent.
    pub stop_lsn: Lsn,
    /// The start checkpoint's own LSN, from backup_label.
    pub checkpoint_lsn: Option<Lsn>,
    /// First WAL segment the backup needs.
    pub start_wal_file: String,
    /// Last WAL segment it needs to be consistent.
    pub stop_wal_file: String,
    /// WAL segments the backup holds.
    pub wal_files: usize,
    /// Whether pages carry checksums.
    pub data_checksums: bool,
    /// Pages whose checksum was verified while they were read.
    pub pages_verified: u64,
    /// Pages not checked: new, or written while the backup ran.
    pub pages_not_checked: u64,
    /// Tablespaces outside the data directory.
    pub tablespaces: Vec<Tablespace>,
    /// `PG_<major>_<catversion>`: the folder a tablespace keeps this server's files in.
    pub tablespace_version_dir: String,
    /// Entries a base backup leaves out that were left out.
    pub excluded_entries: usize,
    /// The backup_label `pg_backup_stop` returned.
    pub backup_label: String,
    /// The tablespace_map `pg_backup_stop` returned (empty without tablespaces).
    pub tablespace_map: String,
    /// The catalogs when the backup started; `None` in backups made before sheaf recorded them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub databases: Option<Vec<DatabaseInfo>>,
    /// Page checksum failures kept by `--ignore-checksum-failures`.
    pub checksum_failures: usize,
    /// Where it was taken, when not on the primary alone: `standby` (started and stopped on a
    /// hot standby, its files read there) or `hybrid` (started and stopped on the primary, the
    /// files read from [`ClusterFacts::standby_url`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub taken_on: Option<String>,
    /// The standby a hybrid backup read its files from, without password.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub standby_url: Option<String>,
}

/// Whether a set is a backup of a PostgreSQL cluster.
pub fn is_postgres(set: &BackupSet) -> bool {
    set.manifest.source.get("kind").and_then(|k| k.as_str()) == Some(KIND)
}

impl ClusterFacts {
    /// The facts a PostgreSQL backup recorded; `None` for a backup of something else.
    ///
    /// # Errors
    /// [`sheaf_core::ErrorKind::Corrupt`] when the recorded facts do not parse.
    pub fn of(set: &BackupSet) -> Result<Option<ClusterFacts>> {
        if !is_postgres(set) {
            return Ok(None);
        }
        serde_json::from_value(set.manifest.source.clone()).map(Some).map_err(|e| Error::corrupt(format!("the manifest's facts about the PostgreSQL cluster do not parse: {e}")))
    }

    /// As JSON, for the manifest.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("facts serialise")
    }

    /// The databases and relations the backup recorded.
    ///
    /// # Errors
    /// A backup made before sheaf recorded them.
    pub fn databases(&self) -> Result<&[DatabaseInfo]> {
        self.databases
            .as_deref()
            .ok_or_else(|| Error::invalid("this backup does not record its databases and relations (made by an older sheaf): restore it, or extract files by path"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_keep_their_json_keys_and_older_backups_still_read() {
        let facts = ClusterFacts { kind: KIND.into(), system_identifier: SystemId(7), timeline: 2, databases: Some(Vec::new()), ..Default::default() };
        let v = facts.to_value();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "backup_label",
                "checkpoint_lsn",
                "checksum_failures",
                "data_checksums",
                "databases",
                "excluded_entries",
                "kind",
                "pages_not_checked",
                "pages_verified",
                "server_version",
                "server_version_num",
                "start_lsn",
                "start_wal_file",
                "stop_lsn",
                "stop_wal_file",
                "system_identifier",
                "tablespace_map",
                "tablespace_version_dir",
                "tablespaces",
                "timeline",
                "url",
                "wal_files"
            ]
        );
        assert_eq!(v["checkpoint_lsn"], serde_json::Value::Null);
        assert_eq!(serde_json::from_value::<ClusterFacts>(v).unwrap(), facts);
        // LSNs are the strings PostgreSQL writes, as they always were.
        let facts = ClusterFacts { start_lsn: Lsn(0x200_0028), stop_lsn: Lsn(0x1_0000_00A0), checkpoint_lsn: Some(Lsn(0x200_0060)), ..facts };
        let v = facts.to_value();
        assert_eq!((&v["start_lsn"], &v["stop_lsn"], &v["checkpoint_lsn"]), (&serde_json::json!("0/2000028"), &serde_json::json!("1/A0"), &serde_json::json!("0/2000060")));
        assert_eq!(serde_json::from_value::<ClusterFacts>(v).unwrap(), facts);
        // Before sheaf recorded the catalogs: no databases, and no complaint until they are asked for.
        let old: ClusterFacts = serde_json::from_str(r#"{"kind":"postgres","system_identifier":"7","start_lsn":"0/2000028"}"#).unwrap();
        assert!(old.databases.is_none() && old.databases().is_err());
        assert_eq!(old.start_lsn, Lsn(0x0200_0028));
    }
}
