//! What the repository holds, as `sheaf info` shows it: its backups, the archived WAL per timeline
//! in runs of consecutive segments, the gaps between runs (told apart from those retention made on
//! purpose), the WAL dropped by `--queue-max`, and totals. [`archived`], [`missing`] and
//! [`WalNeeds`] are also what retention, verify, check and recovery read.

use crate::repo::Repo;
use serde::Serialize;
use sheaf_core::Result;

use super::dropped::{dropped, Dropped};
use super::horizon::{needed_to, Horizon};
use super::id::BackupId;
use super::meta::RepoMeta;
use super::paths;
use super::records::{backups, BackupRecord, Found};
use crate::cluster::walname::{segment_name, WalFile, WalKind};

/// Every archived WAL file, by name order.
///
/// # Errors
/// When the repository cannot be listed.
pub fn archived(repo: &Repo) -> Result<Vec<(WalFile, u64)>> {
    archived_since(repo).map(|l| l.files)
}

/// What the repository's `wal/` holds.
pub struct WalListing {
    /// Every archived WAL file and its stored size, by name order.
    pub files: Vec<(WalFile, u64)>,
    /// When the newest archived segment was written (seconds since the epoch; 0 when none is,
    /// or the store does not say).
    pub newest_unix: i64,
    /// Segments wal-receive holds copies of, not archived whole yet.
    pub streaming: Vec<String>,
}

/// The archived WAL with when its newest segment was written, and wal-receive's copies.
///
/// # Errors
/// When the repository cannot be listed.
pub fn archived_since(repo: &Repo) -> Result<WalListing> {
    let meta = repo.meta();
    Ok(archived_in(repo.list(paths::WAL)?, meta))
}

/// [`archived_since`] of a listing of `wal/` already made.
pub fn archived_in(listing: Vec<sheaf_core::storage::Stored>, meta: &RepoMeta) -> WalListing {
    let mut out = Vec::new();
    let mut newest = 0;
    let mut streaming = Vec::new();
    for o in listing {
        if let Some(n) = o.name.rsplit('/').next().and_then(|n| n.strip_suffix(".streaming")) {
            streaming.push(n.to_string());
        }
        let Some(name) = paths::wal_name(&o.name) else { continue };
        if let Some(w) = WalFile::parse(name, meta.wal_segment_size) {
            if w.kind == WalKind::Segment {
                newest = newest.max(o.modified);
            }
            out.push((w, o.size));
        }
    }
    out.sort_by(|a, b| a.0.name.cmp(&b.0.name));
    streaming.sort();
    WalListing { files: out, newest_unix: newest, streaming }
}

/// A run of consecutive segments on one timeline.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct WalRange {
    /// Timeline.
    pub timeline: u32,
    /// First segment.
    pub first: String,
    /// Last segment.
    pub last: String,
    /// Segments in it.
    pub segments: u64,
}

/// Consecutive runs of full segments per timeline, in order; a gap lies between two runs of one
/// timeline.
pub fn ranges(files: &[(WalFile, u64)]) -> Vec<WalRange> {
    let mut segs: Vec<&WalFile> = files.iter().map(|(w, _)| w).filter(|w| w.kind == WalKind::Segment).collect();
    segs.sort_by_key(|w| (w.timeline, w.segno));
    let mut out: Vec<WalRange> = Vec::new();
    let mut last: Option<&WalFile> = None;
    for w in segs {
        match (last, out.last_mut()) {
            (Some(p), Some(r)) if p.timeline == w.timeline && p.segno + 1 == w.segno => {
                r.last = w.name.clone();
                r.segments += 1;
            }
            _ => out.push(WalRange { timeline: w.timeline, first: w.name.clone(), last: w.name.clone(), segments: 1 }),
        }
        last = Some(w);
    }
    out
}

/// Nothing archived between two runs of one timeline: recovery cannot cross it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct WalGap {
    /// Timeline.
    pub timeline: u32,
    /// The last segment before the gap.
    pub after: String,
    /// The first segment after it.
    pub before: String,
}

/// The gaps between the runs [`ranges`] found.
pub fn gaps(ranges: &[WalRange]) -> Vec<WalGap> {
    ranges.windows(2).filter(|w| w[0].timeline == w[1].timeline).map(|w| WalGap { timeline: w[0].timeline, after: w[0].last.clone(), before: w[1].first.clone() }).collect()
}

/// The segments missing between `from` and `to` (inclusive) on `timeline`, given what is archived.
pub fn missing(files: &[(WalFile, u64)], timeline: u32, from: u64, to: u64, seg_size: u64) -> Vec<String> {
    let have: std::collections::HashSet<(u32, u64)> = files.iter().filter(|(w, _)| w.kind == WalKind::Segment).map(|(w, _)| (w.timeline, w.segno)).collect();
    (from..=to).filter(|s| !have.contains(&(timeline, *s))).map(|s| segment_name(timeline, s, seg_size)).collect()
}

/// What WAL each finished backup needs: from its start to the end of its timeline; before the
/// retention horizon only its own span (start to stop), which makes it consistent; and none when it
/// lies before the horizon, is not pinned, and another backup builds on it (kept only as the data
/// of a pinned incremental's chain, which recovers from its own start).
#[derive(Clone, Debug, Default)]
pub struct WalNeeds {
    /// How far back `expire` removed WAL, if it ever did.
    pub horizon: Option<Horizon>,
    /// Backups pinned now.
    pinned: std::collections::BTreeSet<BackupId>,
    /// Backups another finished backup builds on.
    bases: std::collections::BTreeSet<BackupId>,
}

impl WalNeeds {
    /// The horizon and pins of `repo` at `now` (seconds since the epoch), and the chains of `found`.
    ///
    /// # Errors
    /// When the horizon or the pins cannot be read.
    pub fn read(repo: &Repo, found: &[Found], now: i64) -> Result<WalNeeds> {
        let horizon = super::horizon::read(repo)?;
        let pinned = super::keep::pins(repo)?.into_iter().filter(|p| p.holds(now)).map(|p| p.id).collect();
        let bases = found.iter().filter_map(Found::record).flat_map(|r| r.chain.iter().cloned()).collect();
        Ok(WalNeeds { horizon, pinned, bases })
    }

    /// Whether `r` needs no WAL of its own (see [`WalNeeds`]).
    pub fn data_only(&self, r: &BackupRecord, seg_size: u64) -> bool {
        let below = self.horizon.as_ref().is_some_and(|h| WalFile::parse(&r.stop_wal, seg_size).is_some_and(|w| h.below(w.segno + 1)));
        below && !self.pinned.contains(&r.id) && self.bases.contains(&r.id)
    }

    /// Whether `r` recovers only to its own end: it lies before the retention horizon (archive
    /// retention, or a pin older than the policy) and a segment between its stop and the
    /// horizon is gone, so no point in time after it is in reach.
    pub fn to_its_end_only(&self, files: &[(WalFile, u64)], r: &BackupRecord, seg_size: u64) -> bool {
        let (Some(h), Some(stop)) = (&self.horizon, WalFile::parse(&r.stop_wal, seg_size)) else { return false };
        h.below(stop.segno + 1) && !missing(files, r.timeline, stop.segno + 1, h.segno - 1, seg_size).is_empty()
    }

    /// The archived segments `r` needs that are missing; `None` when nothing of its timeline is
    /// archived.
    pub fn missing(&self, files: &[(WalFile, u64)], r: &BackupRecord, seg_size: u64) -> Option<Vec<String>> {
        let start = WalFile::parse(&r.start_wal, seg_size)?;
        let stop = WalFile::parse(&r.stop_wal, seg_size).map_or(start.segno, |w| w.segno.max(start.segno));
        let last = files.iter().filter(|(w, _)| w.timeline == r.timeline && w.kind == WalKind::Segment).map(|(w, _)| w.segno).max()?;
        if self.data_only(r, seg_size) {
            return Some(Vec::new());
        }
        Some(missing(files, r.timeline, start.segno, needed_to(stop, last, self.horizon.as_ref()), seg_size))
    }
}

/// The gaps retention made on purpose, apart from the rest: a gap wholly before the horizon that
/// the own span (start to stop) of no finished backup that needs it reaches into. Returns (real
/// gaps, retention's).
pub fn split_gaps(gaps: Vec<WalGap>, found: &[Found], needs: &WalNeeds, seg_size: u64) -> (Vec<WalGap>, Vec<WalGap>) {
    let Some(h) = &needs.horizon else { return (gaps, Vec::new()) };
    let segno = |name: &str| WalFile::parse(name, seg_size).map(|w| w.segno);
    let spans: Vec<(u32, u64, u64)> = found
        .iter()
        .filter_map(Found::record)
        .filter(|r| !needs.data_only(r, seg_size))
        .filter_map(|r| {
            let a = segno(&r.start_wal)?;
            Some((r.timeline, a, segno(&r.stop_wal).unwrap_or(a)))
        })
        .collect();
    gaps.into_iter().partition(|g| {
        let (Some(after), Some(before)) = (segno(&g.after), segno(&g.before)) else { return true };
        // Missing: after + 1 ..= before - 1.
        !h.below(before - 1) || spans.iter().any(|&(t, a, b)| t == g.timeline && a < before && b > after)
    })
}

/// What the repository holds.
#[derive(Clone, Debug)]
pub struct Inventory {
    /// Every backup, oldest first, finished or not.
    pub found: Vec<Found>,
    /// Every archived WAL file and its stored size, by name order.
    pub files: Vec<(WalFile, u64)>,
    /// Runs of consecutive segments per timeline.
    pub ranges: Vec<WalRange>,
    /// Gaps between the runs: WAL that is missing, not removed by retention.
    pub gaps: Vec<WalGap>,
    /// Gaps retention made on purpose (before its horizon, outside every backup's own span).
    pub expired: Vec<WalGap>,
    /// What WAL each backup needs, by the retention horizon and the pins.
    pub needs: WalNeeds,
    /// The drills (`sheaf drill`): each backup's last, the last, the last that passed.
    pub drills: super::drills::DrillSummary,
    /// WAL files `wal-push --queue-max` left out.
    pub dropped: Vec<Dropped>,
    /// Stored bytes of the archived WAL.
    pub wal_bytes: u64,
    /// Stored bytes of the finished backups.
    pub backup_bytes: u64,
    /// When the newest archived segment was written, seconds since the epoch (0: unknown).
    pub wal_newest_unix: i64,
    /// Segments wal-receive holds copies of, not archived whole yet.
    pub streaming: Vec<String>,
}

impl Inventory {
    /// Take stock of the repository.
    ///
    /// # Errors
    /// When the repository cannot be listed or a record cannot be read.
    pub fn take(repo: &Repo) -> Result<Inventory> {
        let meta = repo.meta();
        let found = backups(repo)?;
        let WalListing { files, newest_unix: wal_newest_unix, streaming } = archived_since(repo)?;
        let ranges = ranges(&files);
        let wal_bytes = files.iter().map(|(_, s)| s).sum();
        let backup_bytes = found.iter().filter_map(Found::record).map(|r| r.bytes_written).sum();
        let dropped = dropped(repo)?;
        let needs = WalNeeds::read(repo, &found, sheaf_core::time::now_ms() / 1000)?;
        let (gaps, expired) = split_gaps(gaps(&ranges), &found, &needs, meta.wal_segment_size);
        let drills = super::drills::summary(repo)?;
        Ok(Inventory { found, files, ranges, gaps, expired, needs, drills, dropped, wal_bytes, backup_bytes, wal_newest_unix, streaming })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_and_gaps() {
        let seg = 16 << 20;
        let mk = |t: u32, s: u64| (WalFile::parse(&segment_name(t, s, seg), seg).unwrap(), 1u64);
        let files = vec![mk(1, 3), mk(1, 4), mk(1, 6), mk(2, 6), mk(2, 7)];
        let r = ranges(&files);
        assert_eq!(r.len(), 3);
        assert_eq!((r[0].segments, r[1].segments, r[2].segments), (2, 1, 2));
        assert_eq!(missing(&files, 1, 3, 6, seg), vec![segment_name(1, 5, seg)]);
        assert_eq!(gaps(&r), vec![WalGap { timeline: 1, after: segment_name(1, 4, seg), before: segment_name(1, 6, seg) }]);
    }
}
