//! A backup's id in the repository ([`BackupId`]): when it started, to the millisecond
//! (`20261121-103045.123Z`), so that ids sort by time and two backups taken a moment apart never
//! share one. Records written before kept whole seconds (`20261121-103045Z`) and are still read.
//! Not the set's random id ([`sheaf_core::format::BackupId`]), which a record keeps beside it.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A backup's id in the repository.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct BackupId(String);

/// `20261121-103045.123Z` for `ms` milliseconds since the epoch (UTC): what backup and drill ids
/// are made of.
pub fn stamp(ms: i64) -> String {
    let t = sheaf_core::time::utc(ms.div_euclid(1000)); // 2026-11-21T10:30:45Z
    format!("{}{}{}-{}{}{}.{:03}Z", &t[0..4], &t[5..7], &t[8..10], &t[11..13], &t[14..16], &t[17..19], ms.rem_euclid(1000))
}

impl BackupId {
    /// The id of a backup that started at `ms` (milliseconds since the epoch).
    pub fn at(ms: i64) -> BackupId {
        BackupId(stamp(ms))
    }

    /// This id, told apart from another backup that started in the same millisecond on another
    /// process: `ID-PID`.
    pub fn of_process(&self, pid: u32) -> BackupId {
        BackupId(format!("{}-{pid}", self.0))
    }

    /// The id of the full backup a consolidation of this one writes: `ID-full`.
    pub fn consolidated(&self) -> BackupId {
        BackupId(format!("{}-full", self.0))
    }

    /// As text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for BackupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::ops::Deref for BackupId {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for BackupId {
    fn from(s: &str) -> BackupId {
        BackupId(s.to_string())
    }
}

impl From<String> for BackupId {
    fn from(s: String) -> BackupId {
        BackupId(s)
    }
}

impl PartialEq<str> for BackupId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for BackupId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for BackupId {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_sort_by_time_to_the_millisecond() {
        assert_eq!(BackupId::at(1_795_257_045_123).as_str(), "20261121-103045.123Z");
        assert!(BackupId::at(1_795_257_045_123) < BackupId::at(1_795_257_045_124));
        assert!(BackupId::at(1_795_257_045_999) < BackupId::at(1_795_257_046_000));
        // Ids of the whole second (records written before) sort by time among the new ones.
        let (before, after) = (BackupId::from("20261121-103044Z"), BackupId::from("20261121-103046Z"));
        assert!(before < BackupId::at(1_795_257_045_000) && BackupId::at(1_795_257_045_000) < after);
        assert_eq!(BackupId::at(0).consolidated().as_str(), "19700101-000000.000Z-full");
        assert_eq!(serde_json::to_string(&BackupId::from("x")).unwrap(), "\"x\"");
    }
}
