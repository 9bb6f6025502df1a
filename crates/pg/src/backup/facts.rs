//! What a PostgreSQL backup records about its cluster, as one type: [`ClusterFacts`] is made in
//! one place ([`ClusterFacts::taken`], from what either backup path saw: sheaf reading the files,
//! or `BASE_BACKUP`), written into the manifest's `source` once and read back from it by everything
//! else: the repository's records, restore (tablespaces, `--db-include`), extract and lab (the
//! catalogs), the CLI's report and history. The core keeps `source` opaque JSON, so that it knows
//! nothing of PostgreSQL; the keys are this struct's fields, unchanged since the first backups,
//! and a key an older sheaf did not write reads as its default.

use serde::{Deserialize, Serialize};
use sheaf_core::{BackupSet, Error, ErrorKind, Result};

use crate::cluster::label::BackupLabel;
use crate::cluster::lsn::Lsn;
use crate::cluster::system::SystemId;
use crate::cluster::walname;
use crate::connect::catalog::{DatabaseInfo, Tablespace};
use crate::connect::server::{ServerFacts, StopInfo};

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
    /// Folders of the data directory that were symbolic links (`initdb -X` puts pg_wal
    /// elsewhere), backed up as plain folders: where each pointed, so that a restore can put the
    /// link back (`--original-paths`, `--link-map`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<Link>,
}

/// A folder of the data directory that was a symbolic link when backed up.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// Its path in the data directory: `pg_wal`.
    pub path: String,
    /// Where it pointed, as the link read.
    pub target: String,
}

/// Whether a set is a backup of a PostgreSQL cluster.
pub fn is_postgres(set: &BackupSet) -> bool {
    set.manifest.source.get("kind").and_then(|k| k.as_str()) == Some(KIND)
}

/// The WAL a backup needs, from the segment of its start to that of its stop, and its label.
#[derive(Clone, Debug)]
pub(crate) struct WalSpan {
    pub label: BackupLabel,
    pub start_wal: String,
    pub stop_wal: String,
}

impl WalSpan {
    /// The span from `start` (LSN and timeline, as the server gave them at the start) to `stop`,
    /// checked: the stop is not before the start, and the label starts where the server said.
    ///
    /// # Errors
    /// Either check failing ([`ErrorKind::Source`]: take the backup again); a label that does
    /// not parse.
    pub fn of(start: (Lsn, u32), stop: &StopInfo, segment_size: u64) -> Result<WalSpan> {
        let (start_lsn, timeline) = start;
        if stop.lsn < start_lsn {
            return Err(Error::new(
                ErrorKind::Source,
                format!("the backup's stop {} is before its start {start_lsn}: the server's minimum recovery point went back (was it restarted?); take the backup again", stop.lsn),
            ));
        }
        let label = BackupLabel::parse(&stop.backup_label)?;
        let start_wal = walname::segment_holding(timeline, start_lsn, segment_size, false);
        if label.start_wal != start_wal {
            return Err(Error::new(
                ErrorKind::Source,
                format!(
                    "backup_label starts in WAL file {}, not {start_wal} as the server said at the start: the timeline changed as the backup started; take the backup again",
                    label.start_wal
                ),
            ));
        }
        let stop_wal = walname::segment_holding(stop.timeline, stop.lsn, segment_size, true);
        Ok(WalSpan { label, start_wal, stop_wal })
    }
}

/// What a backup saw of its cluster, by either path: made into its [`ClusterFacts`] by
/// [`ClusterFacts::taken`].
pub(crate) struct Taken {
    /// The server's facts, from the start.
    pub server: ServerFacts,
    /// The server that started and stopped the backup, without password.
    pub url: String,
    /// The start's LSN and timeline.
    pub start: (Lsn, u32),
    /// The stop, with the label and map the server returned.
    pub stop: StopInfo,
    /// Its WAL ([`WalSpan::of`]).
    pub span: WalSpan,
    /// WAL segments the backup holds.
    pub wal_files: usize,
    pub tablespaces: Vec<Tablespace>,
    pub databases: Vec<DatabaseInfo>,
    /// Pages whose checksum was verified, and pages not checked.
    pub pages: (u64, u64),
    /// Entries a base backup leaves out that were left out.
    pub excluded_entries: usize,
    /// `standby` or `hybrid`, when not on a primary alone.
    pub taken_on: Option<String>,
    /// A hybrid backup's standby.
    pub standby_url: Option<String>,
    /// Linked folders, where the backup saw them.
    pub links: Vec<Link>,
}

impl ClusterFacts {
    /// The record of a backup taken: the one place a backup's facts are made.
    pub(crate) fn taken(t: Taken) -> ClusterFacts {
        ClusterFacts {
            kind: KIND.into(),
            url: t.url,
            server_version: t.server.version,
            server_version_num: t.server.version_num,
            system_identifier: t.server.system_identifier,
            timeline: t.start.1,
            start_lsn: t.start.0,
            stop_lsn: t.stop.lsn,
            checkpoint_lsn: Some(t.span.label.checkpoint),
            start_wal_file: t.span.start_wal,
            stop_wal_file: t.span.stop_wal,
            wal_files: t.wal_files,
            data_checksums: t.server.data_checksums,
            pages_verified: t.pages.0,
            pages_not_checked: t.pages.1,
            tablespaces: t.tablespaces,
            tablespace_version_dir: t.server.tablespace_version_dir,
            excluded_entries: t.excluded_entries,
            backup_label: t.stop.backup_label,
            tablespace_map: t.stop.tablespace_map,
            databases: Some(t.databases),
            checksum_failures: 0,
            taken_on: t.taken_on,
            standby_url: t.standby_url,
            links: t.links,
        }
    }

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

    /// The server's major version: 15 for 15.18.
    pub fn major(&self) -> u32 {
        u32::try_from(self.server_version_num / 10_000).unwrap_or(0)
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

    fn stop(lsn: Lsn, label_start: &str) -> StopInfo {
        let backup_label = format!("START WAL LOCATION: 0/2000028 (file {label_start})\nCHECKPOINT LOCATION: 0/2000060\nSTART TIMELINE: 1\n");
        StopInfo { lsn, backup_label, tablespace_map: String::new(), timeline: 1 }
    }

    #[test]
    fn a_backups_wal_span_is_checked_against_its_label() {
        const SEG: u64 = 16 << 20;
        let start = (Lsn(0x200_0028), 1);
        let span = WalSpan::of(start, &stop(Lsn(0x500_0100), "000000010000000000000002"), SEG).unwrap();
        assert_eq!((span.start_wal.as_str(), span.stop_wal.as_str()), ("000000010000000000000002", "000000010000000000000005"));
        assert_eq!(span.label.checkpoint, Lsn(0x200_0060));
        // The stop before the start (a standby restarted), and a label of another start: both
        // refused as the source's, to be taken again.
        let e = WalSpan::of(start, &stop(Lsn(0x100_0000), "000000010000000000000002"), SEG).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Source);
        assert!(e.to_string().contains("before its start"), "{e}");
        let e = WalSpan::of(start, &stop(Lsn(0x500_0100), "000000020000000000000002"), SEG).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Source);
        assert!(e.to_string().contains("the timeline changed"), "{e}");
    }

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
