//! WAL file names, in one place: what PostgreSQL calls a segment (`TTTTTTTTXXXXXXXXYYYYYYYY`), a
//! timeline's history (`TTTTTTTT.history`), the last piece of a timeline left at a promotion
//! (`SEGMENT.partial`) and a backup's history file (`SEGMENT.OFFSET.backup`); segment numbers and
//! the names between two segments. The backup, the archive, the repository's inventory and
//! point-in-time recovery all read names through here.

use std::path::Path;

use sheaf_core::{Error, Result};

use crate::cluster::lsn::Lsn;

/// What kind of file PostgreSQL archives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WalKind {
    /// A whole segment, `TTTTTTTTXXXXXXXXYYYYYYYY`.
    Segment,
    /// The last, partial segment of a timeline that was left at a promotion, `SEGMENT.partial`.
    Partial,
    /// A timeline's history, `TTTTTTTT.history`.
    History,
    /// A backup's history file, `SEGMENT.OFFSET.backup`.
    Backup,
}

/// An archived file's name, understood.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalFile {
    /// The name PostgreSQL gives it.
    pub name: String,
    /// Its kind.
    pub kind: WalKind,
    /// Its timeline.
    pub timeline: u32,
    /// Segment number (log × segments per log + seg); 0 for history files.
    pub segno: u64,
}

fn hex8(s: &str) -> Option<u32> {
    (s.len() == 8 && s.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_lowercase())).then(|| u32::from_str_radix(s, 16).ok()).flatten()
}

/// Segments per 4 GiB "log" for a segment size.
fn per_log(seg_size: u64) -> u64 {
    0x1_0000_0000 / seg_size.max(1)
}

impl WalFile {
    /// Parse a name PostgreSQL archives; `None` for anything else.
    pub fn parse(name: &str, seg_size: u64) -> Option<WalFile> {
        let per = per_log(seg_size);
        let segment = |s: &str| -> Option<(u32, u64)> {
            if s.len() != 24 {
                return None;
            }
            let (t, log, seg) = (hex8(&s[..8])?, hex8(&s[8..16])?, hex8(&s[16..])?);
            (u64::from(seg) < per).then_some((t, u64::from(log) * per + u64::from(seg)))
        };
        let mk = |kind, timeline, segno| Some(WalFile { name: name.to_string(), kind, timeline, segno });
        if let Some((t, s)) = segment(name) {
            return mk(WalKind::Segment, t, s);
        }
        if let Some(base) = name.strip_suffix(".partial") {
            let (t, s) = segment(base)?;
            return mk(WalKind::Partial, t, s);
        }
        if let Some(t) = name.strip_suffix(".history").and_then(hex8) {
            return mk(WalKind::History, t, 0);
        }
        if let Some(rest) = name.strip_suffix(".backup") {
            let (seg, off) = rest.split_once('.')?;
            hex8(off)?;
            let (t, s) = segment(seg)?;
            return mk(WalKind::Backup, t, s);
        }
        None
    }
}

/// The segment's file name.
pub fn segment_name(timeline: u32, segno: u64, seg_size: u64) -> String {
    let per = per_log(seg_size);
    format!("{timeline:08X}{:08X}{:08X}", segno / per, segno % per)
}

/// The name of the segment holding the WAL byte at `lsn` on `timeline`; with `ending`, of the byte
/// before it, as `pg_walfile_name` names the segment of a stop LSN (a record that ends exactly at
/// a segment's end lies in that segment, not the next).
pub fn segment_holding(timeline: u32, lsn: Lsn, seg_size: u64, ending: bool) -> String {
    let byte = if ending { lsn.saturating_sub(1) } else { lsn };
    segment_name(timeline, byte.segment_number(seg_size.max(1)), seg_size)
}

/// A timeline's history file name, `TTTTTTTT.history`.
pub fn history_name(timeline: u32) -> String {
    format!("{timeline:08X}.history")
}

/// A timeline history file's lines, `parent-timeline switch-LSN reason`, as (timeline, the LSN
/// where the next timeline left it), oldest first: the ancestry of the file's timeline.
pub fn parse_history(text: &str) -> Vec<(u32, Lsn)> {
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect()
}

/// A whole segment's name: 24 upper-case hex digits (whatever the segment size).
pub fn is_segment_name(name: &str) -> bool {
    name.len() == 24 && name.bytes().all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b))
}

/// The timeline a segment's name begins with (1 when it does not parse).
pub fn timeline_of(name: &str) -> u32 {
    name.get(..8).and_then(|t| u32::from_str_radix(t, 16).ok()).unwrap_or(1)
}

/// The folder PostgreSQL's `%p` lives in (pg_wal, as archive_command and restore_command see it).
pub fn wal_dir(p: &Path) -> &Path {
    p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// WAL file names from `first` through `last` on one timeline.
///
/// # Errors
/// Names that are not segments' ([`sheaf_core::ErrorKind::Corrupt`]); a timeline that changed
/// between them.
pub fn segments_between(first: &str, last: &str, segment_size: u64) -> Result<Vec<String>> {
    let parse = |n: &str| WalFile::parse(n, segment_size).filter(|w| w.kind == WalKind::Segment);
    let bad = || Error::corrupt(format!("unexpected WAL file names {first} .. {last}"));
    let (a, b) = (parse(first).ok_or_else(bad)?, parse(last).ok_or_else(bad)?);
    if a.timeline != b.timeline || b.segno < a.segno {
        return Err(Error::invalid(format!("the timeline changed during the backup ({first} .. {last}): the server was promoted or restored meanwhile; take the backup again")));
    }
    Ok((a.segno..=b.segno).map(|s| segment_name(a.timeline, s, segment_size)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_postgres_archives() {
        let seg = 16 << 20;
        let w = WalFile::parse("0000000200000001000000FF", seg).unwrap();
        assert_eq!((w.kind, w.timeline, w.segno), (WalKind::Segment, 2, 0x1FF));
        assert_eq!(segment_name(2, 0x1FF, seg), "0000000200000001000000FF");
        assert_eq!(segment_name(1, 256, seg), "000000010000000100000000");
        assert_eq!(WalFile::parse("00000003.history", seg).unwrap().kind, WalKind::History);
        assert_eq!(WalFile::parse("000000010000000000000003.00000028.backup", seg).unwrap().segno, 3);
        assert_eq!(WalFile::parse("000000010000000000000005.partial", seg).unwrap().kind, WalKind::Partial);
        for bad in ["RECOVERYXLOG", "0000000100000000000001000", "000000010000000000000100", "00000001000000000000000g", "x.history"] {
            assert!(WalFile::parse(bad, seg).is_none(), "{bad}");
        }
        assert_eq!(history_name(3), "00000003.history");
        assert_eq!(segment_holding(1, Lsn(0x0300_0028), seg, false), "000000010000000000000003");
        assert_eq!(segment_holding(2, Lsn(0x0400_0000), seg, true), "000000020000000000000003");
        assert_eq!(segment_holding(2, Lsn(0x0400_0000), seg, false), "000000020000000000000004");
        assert_eq!(segment_holding(1, Lsn(0x1_0000_0010), seg, true), "000000010000000100000000");
        assert!(is_segment_name("0000000200000001000000FF"));
        assert!(!is_segment_name("00000002.history") && !is_segment_name("0000000200000001000000ff"));
        assert_eq!(timeline_of("0000000A00000001000000FF"), 10);
    }

    #[test]
    fn history_files_read_as_postgres_writes_them() {
        let text = "1\t0/5000000\tno recovery target specified\n\n# a comment\n2\t1/A0\tbefore 2026-11-24 10:00:00+00\n3\tnot-an-lsn\tx\n";
        assert_eq!(parse_history(text), [(1, Lsn(0x500_0000)), (2, Lsn(0x1_0000_00A0))]);
    }

    #[test]
    fn wal_segment_names_cross_log_boundaries() {
        let s = segments_between("0000000100000000000000FE", "000000010000000100000001", 16 << 20).unwrap();
        assert_eq!(s, vec!["0000000100000000000000FE", "0000000100000000000000FF", "000000010000000100000000", "000000010000000100000001"]);
        assert_eq!(segments_between("000000010000000000000003", "000000010000000000000003", 16 << 20).unwrap().len(), 1);
        assert!(segments_between("000000010000000000000003", "000000020000000000000004", 16 << 20).is_err());
    }

    #[test]
    fn the_folder_of_a_bare_name_is_here() {
        assert_eq!(wal_dir(Path::new("000000010000000000000001")), Path::new("."));
        assert_eq!(wal_dir(Path::new("pg_wal/000000010000000000000001")), Path::new("pg_wal"));
    }
}
