//! `backup_label`: the file a backup's stop returns (or `BASE_BACKUP` sends), which a restored
//! copy reads when it first starts to know where WAL replay begins. Read here once, for the
//! backup's record, its checks, and a delta restore that finds one in its target.
//!
//! ```text
//! START WAL LOCATION: 0/2000028 (file 000000010000000000000002)
//! CHECKPOINT LOCATION: 0/2000060
//! BACKUP METHOD: streamed
//! BACKUP FROM: primary
//! START TIME: 2026-11-29 13:58:59 UTC
//! LABEL: sheaf backup ...
//! START TIMELINE: 1
//! ```

use sheaf_core::{Error, Result};

use crate::cluster::lsn::Lsn;

/// What a `backup_label` says of where its backup starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupLabel {
    /// `START WAL LOCATION`: where WAL replay starts (the checkpoint's redo point).
    pub start_lsn: Lsn,
    /// The WAL file that location is in, as the label names it.
    pub start_wal: String,
    /// `CHECKPOINT LOCATION`: the start checkpoint's own record.
    pub checkpoint: Lsn,
    /// `START TIMELINE`.
    pub timeline: u32,
}

impl BackupLabel {
    /// Read `text`.
    ///
    /// # Errors
    /// [`sheaf_core::ErrorKind::Corrupt`] naming the line that is missing or does not parse.
    pub fn parse(text: &str) -> Result<BackupLabel> {
        let line = |key: &str| {
            text.lines().find_map(|l| l.strip_prefix(key).and_then(|rest| rest.strip_prefix(": "))).ok_or_else(|| Error::corrupt(format!("backup_label has no {key} line")))
        };
        let bad = |key: &str, v: &str| Error::corrupt(format!("backup_label's {key} '{v}' does not parse"));
        let start = line("START WAL LOCATION")?;
        let (lsn, file) = start.split_once(" (file ").and_then(|(lsn, rest)| Some((lsn, rest.strip_suffix(')')?))).ok_or_else(|| bad("START WAL LOCATION", start))?;
        let checkpoint = line("CHECKPOINT LOCATION")?;
        let timeline = line("START TIMELINE")?;
        Ok(BackupLabel {
            start_lsn: lsn.parse().map_err(|_| bad("START WAL LOCATION", start))?,
            start_wal: file.to_string(),
            checkpoint: checkpoint.trim().parse().map_err(|_| bad("CHECKPOINT LOCATION", checkpoint))?,
            timeline: timeline.trim().parse().map_err(|_| bad("START TIMELINE", timeline))?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LABEL: &str = "START WAL LOCATION: 0/2000028 (file 000000010000000000000002)\nCHECKPOINT LOCATION: 0/2000060\nBACKUP METHOD: streamed\nBACKUP FROM: primary\nSTART TIME: 2026-11-29 13:58:59 UTC\nLABEL: sheaf backup: START TIMELINE: 9\nSTART TIMELINE: 1\n";

    #[test]
    fn a_label_is_read_by_its_lines() {
        let l = BackupLabel::parse(LABEL).unwrap();
        assert_eq!(l, BackupLabel { start_lsn: Lsn(0x200_0028), start_wal: "000000010000000000000002".into(), checkpoint: Lsn(0x200_0060), timeline: 1 });
    }

    #[test]
    fn a_label_missing_a_line_or_garbled_is_named() {
        let without = LABEL.replace("CHECKPOINT LOCATION: 0/2000060\n", "");
        assert!(BackupLabel::parse(&without).unwrap_err().to_string().contains("no CHECKPOINT LOCATION line"));
        let garbled = LABEL.replace("(file 000000010000000000000002)", "000000010000000000000002");
        let e = BackupLabel::parse(&garbled).unwrap_err();
        assert_eq!(e.kind(), sheaf_core::ErrorKind::Corrupt);
        assert!(e.to_string().contains("START WAL LOCATION"));
        assert!(BackupLabel::parse(&LABEL.replace("START TIMELINE: 1", "START TIMELINE: one")).is_err());
    }
}
