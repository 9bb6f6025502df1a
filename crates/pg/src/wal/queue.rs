//! The archiver's queue bound (`wal-push --queue-max`) and the one call `archive_command` makes.
//!
//! When a push fails and more WAL than the bound waits in pg_wal, the file is dropped: success is
//! reported so PostgreSQL can recycle the segment and pg_wal cannot fill the disk. The loss is
//! recorded in the spool (`dropped/NAME.json`) and published to the repository
//! ([`crate::repo::paths::dropped`]) by the next push that gets through, where `sheaf info` shows
//! it. Only whole segments are dropped: a history or backup file is tiny, and recovery needs it.

use std::fs;
use std::path::Path;

use crate::repo::Repo;
use sheaf_core::repo::Place;
use sheaf_core::{CodecSpec, Error, ErrorKind, Result};

use crate::cluster::walname;
use crate::repo::dropped::Dropped;
use crate::repo::{meta, paths};
use crate::wal::spool::{push_ahead, write_whole, PushReport, Spool};

/// What one `archive_command` call came to.
#[derive(Debug)]
pub enum Archived {
    /// The file is archived: now, or by an earlier call's look-ahead (`report.from_spool`).
    Pushed {
        /// What was pushed.
        report: PushReport,
        /// Drop records carried to the repository now that it is reachable again: how many, or
        /// why not yet.
        published: Result<usize>,
    },
    /// The push failed with more WAL waiting than the bound: the file is left out.
    Dropped(DropNotice),
}

/// Archive the file at `path` (PostgreSQL's `%p`), with `parallel - 1` segments of look-ahead;
/// under `queue_max`, a failed push of a segment is dropped when more WAL than that waits.
///
/// # Errors
/// The push failed and the file is not dropped (no bound, under the bound, not a segment).
pub fn archive(place: &Place, spool: &Spool, path: &Path, codec: CodecSpec, parallel: usize, queue_max: Option<u64>) -> Result<Archived> {
    // Pushed already by an earlier call's look-ahead: answered without the repository, so an
    // outage that starts now cannot fail (or, under a bound, drop) what is archived.
    if spool.take_pushed(path) {
        return Ok(Archived::Pushed { report: PushReport::from_spool(path), published: Ok(0) });
    }
    match meta::open(place).and_then(|repo| push_ahead(&repo, spool, path, codec, parallel).map(|r| (r, repo))) {
        Ok((report, repo)) => {
            // Which key archive_command gives, for `key remove` to refuse before archiving breaks.
            if let Err(e) = crate::repo::key_use::note(&repo, spool.dir(), sheaf_core::time::now_ms() / 1000) {
                tracing::warn!("cannot record which key wal-push used in {}: {e}", repo.display());
            }
            Ok(Archived::Pushed { report, published: publish_dropped(&repo, spool) })
        }
        Err(e) => drop_or_fail(e, queue_max, path, spool).map(Archived::Dropped),
    }
}

/// A file left out of the archive, for the server log.
#[derive(Debug)]
pub struct DropNotice {
    /// What was recorded.
    pub dropped: Dropped,
    /// `.ready` files waiting in pg_wal.
    pub files: usize,
    /// Whether the drop record is in the spool (to be published), or why not.
    pub recorded: Result<()>,
}

/// The queue in pg_wal when a push failed over the bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Over {
    /// `.ready` files waiting.
    pub files: usize,
    /// Their bytes.
    pub bytes: u64,
    /// The bound.
    pub max: u64,
}

/// Whether a failed push of `name` is dropped: only a whole segment, only under a bound, only when
/// more than it waits (`pending`, read only then: `.ready` files and their bytes). Dropped: the
/// push's error back, and the queue.
///
/// # Errors
/// `e` when the file is kept for the archiver to retry: with the queue's size when that is what
/// kept it.
fn decide(e: Error, queue_max: Option<u64>, name: &str, pending: impl FnOnce() -> Result<(usize, u64)>) -> Result<(Error, Over)> {
    let Some(max) = queue_max else { return Err(e) };
    if !walname::is_segment_name(name) {
        return Err(e);
    }
    let Ok((files, bytes)) = pending() else { return Err(e) };
    if bytes <= max {
        return Err(e.context(format!("{} of WAL waits in pg_wal ({files} files), under queue-max {}", sheaf_core::size::format_size(bytes), sheaf_core::size::format_size(max))));
    }
    Ok((e, Over { files, bytes, max }))
}

/// A failed push under a bound: when more WAL than the bound waits in pg_wal, drop the file and
/// record it in the spool; the caller reports success and says so loudly.
///
/// # Errors
/// As [`decide`]: `e`, when the file is not dropped.
fn drop_or_fail(e: Error, queue_max: Option<u64>, path: &Path, spool: &Spool) -> Result<DropNotice> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let (e, over) = decide(e, queue_max, &name, || pending_wal(walname::wal_dir(path)))?;
    let dropped = Dropped { name, at: sheaf_core::time::utc_now(), pending_bytes: over.bytes, queue_max: over.max, error: e.to_string() };
    let recorded = record_dropped(spool, &dropped);
    Ok(DropNotice { dropped, files: over.files, recorded })
}

// ---------------------------------------------------------------------------------------------
// Drop records.

/// WAL waiting to be archived in `wal_dir`: the `.ready` files and their bytes.
///
/// # Errors
/// The status folder cannot be read.
fn pending_wal(wal_dir: &Path) -> Result<(usize, u64)> {
    let status = wal_dir.join("archive_status");
    let dir = fs::read_dir(&status).map_err(|e| Error::io(ErrorKind::Io, format!("cannot read {}", status.display()), e))?;
    let (mut files, mut bytes) = (0, 0);
    for e in dir.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if let Some(f) = n.strip_suffix(".ready") {
            files += 1;
            bytes += fs::metadata(wal_dir.join(f)).map(|m| m.len()).unwrap_or(0);
        }
    }
    Ok((files, bytes))
}

/// Record in the spool that `d` was dropped; [`publish_dropped`] carries it to the repository.
///
/// # Errors
/// The spool cannot be written.
fn record_dropped(spool: &Spool, d: &Dropped) -> Result<()> {
    let dir = spool.sub("dropped")?;
    write_whole(&dir.join(format!("{}.json", d.name)), &serde_json::to_vec_pretty(d).expect("serialises"))
}

/// Copy the spool's drop records into the repository (`dropped/NAME.json`) and forget them
/// locally. Returns how many.
///
/// # Errors
/// The repository cannot be written.
fn publish_dropped(repo: &Repo, spool: &Spool) -> Result<usize> {
    let Ok(dir) = fs::read_dir(spool.dir().join("dropped")) else { return Ok(0) };
    let mut n = 0;
    for e in dir.flatten() {
        let Ok(text) = fs::read(e.path()) else { continue };
        let Ok(d) = serde_json::from_slice::<Dropped>(&text) else { continue };
        repo.put_json(&paths::dropped(&d.name), &d, true)?;
        let _ = fs::remove_file(e.path());
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEG: &str = "000000010000000000000007";

    fn failed() -> Error {
        Error::new(ErrorKind::Target, "the repository is unreachable")
    }

    #[test]
    fn only_a_segment_over_the_bound_is_dropped() {
        let over = || Ok((3, 48 << 20));
        assert_eq!(decide(failed(), None, SEG, over).unwrap_err().to_string(), failed().to_string(), "no bound: the push fails");
        assert!(decide(failed(), Some(1 << 20), "00000002.history", over).is_err(), "history files are never dropped");
        assert!(decide(failed(), Some(1 << 20), SEG, || Err(failed())).is_err(), "an unreadable queue keeps the file");
        let under = decide(failed(), Some(64 << 20), SEG, over).unwrap_err().to_string();
        assert!(under.contains("48 MiB of WAL waits in pg_wal (3 files), under queue-max 64 MiB"), "{under}");
        let (e, q) = decide(failed(), Some(16 << 20), SEG, over).unwrap();
        assert_eq!(q, Over { files: 3, bytes: 48 << 20, max: 16 << 20 });
        assert_eq!(e.kind(), ErrorKind::Target);
    }

    #[test]
    fn a_drop_is_recorded_in_the_spool() {
        let d = tempfile::tempdir().unwrap();
        let wal_dir = d.path().join("pg_wal");
        fs::create_dir_all(wal_dir.join("archive_status")).unwrap();
        for n in ["000000010000000000000007", "000000010000000000000008"] {
            fs::write(wal_dir.join(n), vec![0u8; 4096]).unwrap();
            fs::write(wal_dir.join("archive_status").join(format!("{n}.ready")), b"").unwrap();
        }
        let spool = Spool::new(Some(&d.path().join("spool")), &wal_dir, "repo");
        assert!(drop_or_fail(failed(), Some(8192), &wal_dir.join(SEG), &spool).is_err(), "8 KiB waiting is not over 8 KiB");
        let n = drop_or_fail(failed(), Some(4096), &wal_dir.join(SEG), &spool).unwrap();
        assert_eq!((n.dropped.name.as_str(), n.files, n.dropped.pending_bytes, n.dropped.queue_max), (SEG, 2, 8192, 4096));
        assert!(n.recorded.is_ok());
        let kept: Dropped = serde_json::from_slice(&fs::read(spool.dir().join("dropped").join(format!("{SEG}.json"))).unwrap()).unwrap();
        assert_eq!(kept.error, failed().to_string());
    }
}
