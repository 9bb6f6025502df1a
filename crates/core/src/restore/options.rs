//! What a restore is asked ([`RestoreOptions`], `--relocate`'s `OLD=NEW`), what it reports
//! ([`RestoreReport`]), and the marker it keeps in every target root until it has finished.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

use crate::backup::Changes;
use crate::error::{Error, Result};

/// Name of the file a restore keeps in its target until it has finished.
pub const INCOMPLETE_MARKER: &str = ".sheaf-restore-incomplete";

/// How to restore.
#[derive(Clone, Debug)]
pub struct RestoreOptions {
    /// Where the backup's main root goes.
    pub target: PathBuf,
    /// `(OLD, NEW)`: entries under OLD (a path inside the backup, or an original absolute path)
    /// go under NEW instead.
    pub relocate: Vec<(String, PathBuf)>,
    /// Restore into non-empty directories: their contents are removed first, so that the result is
    /// exactly the backup (no stale file survives).
    pub force: bool,
    /// Restore the backup's other roots (tablespaces, say) to the absolute paths they had at backup
    /// time. Without it, sheaf writes outside `target` only where a relocation says so, and refuses
    /// a set with an unmapped root: a set made elsewhere could name any folder on this machine.
    pub original_paths: bool,
    /// Decompressor threads (default: one per core).
    pub threads: Option<usize>,
    /// Write through the page cache instead of with direct I/O. Direct I/O is used where the
    /// filesystem takes it (not tmpfs, say) and the set's transfer size is a multiple of 4 KiB.
    pub buffered: bool,
    /// Write each direct chunk synchronously from its decompressor thread instead of queueing it
    /// on an io_uring (for comparison; without io_uring in the kernel, or refused by a sandbox,
    /// sheaf writes synchronously by itself).
    pub sync_writes: bool,
    /// Restore only the entries whose path (as the backup holds it: `base/16384/16385`,
    /// `pg_tblspc/OID/...`, or relative to a directory backup's root), or a folder above it,
    /// matches one of these globs (`*` and `?` within a name, `**` across folders). Empty: all.
    /// Only the frames that hold the chosen files are read.
    pub only: Vec<String>,
    /// Files under these folders (paths as the backup holds them, e.g. `base/16384`) come back
    /// as sparse files of their backed-up size, all zeros, without a byte of them read: the
    /// databases `--db-include` leaves out, which the restored cluster can then drop.
    pub hollow: Vec<String>,
    /// Make an existing tree equal to the backup, rewriting only what differs (`--delta`): what
    /// the backup lacks is removed, and each chunk already on disk as the backup has it (by its
    /// XXH3-128) is neither read nor written.
    pub delta: bool,
    /// How a delta restore finds what differs: by hashing the target (the default), or from what
    /// the caller knows changed (PostgreSQL's WAL summaries).
    pub delta_source: DeltaSource,
    /// With `delta`: paths under the target (as the backup holds them, e.g. `standby.signal`)
    /// that the restore leaves exactly as the target has them, neither removed nor rewritten nor
    /// created: what belongs to the copy being updated rather than to the backup (a standby's own
    /// signal file and settings). Kept through an interrupted restore too, so that running it
    /// again still finds them.
    pub keep: Vec<String>,
    /// Ask it to stop the restore (Ctrl-C, SIGTERM): it fails with
    /// [`crate::error::ErrorKind::Cancelled`] at the next frame, and what it wrote is removed as
    /// after any failure.
    pub stop: crate::stop::Stop,
}

/// What says which bytes of a delta restore's target may differ from the backup.
#[derive(Clone, Default)]
pub struct DeltaSource {
    /// Per file of the backup (by its root's name and path), the byte ranges that may differ from
    /// what the target holds, given the target file's length (past it, everything is written).
    /// `None`: every chunk is compared with the target by its hash.
    pub changes: Option<Arc<dyn Changes>>,
    /// How that was decided, or why the target is hashed: said in the report.
    pub how: String,
    /// `--check-changes`: hash as without `changes`, and record as a miss every block outside the
    /// ranges `changes` gives that differed all the same.
    pub check: bool,
}

impl std::fmt::Debug for DeltaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeltaSource").field("changes", &self.changes.is_some()).field("how", &self.how).field("check", &self.check).finish()
    }
}

impl RestoreOptions {
    /// Restore into `target` with defaults.
    pub fn new(target: impl Into<PathBuf>) -> Self {
        RestoreOptions {
            target: target.into(),
            relocate: Vec::new(),
            force: false,
            original_paths: false,
            threads: None,
            buffered: false,
            sync_writes: false,
            only: Vec::new(),
            hollow: Vec::new(),
            delta: false,
            delta_source: DeltaSource::default(),
            keep: Vec::new(),
            stop: crate::stop::Stop::new(),
        }
    }
}

/// Parse `OLD=NEW`.
///
/// # Errors
/// [`ErrorKind::InvalidInput`] when there is no `=` or a side is empty.
pub fn parse_relocation(text: &str) -> Result<(String, PathBuf)> {
    match text.split_once('=') {
        Some((old, new)) if !old.is_empty() && !new.is_empty() => Ok((old.trim_end_matches('/').to_string(), PathBuf::from(new))),
        _ => Err(Error::invalid(format!("--relocate '{text}': write OLD=NEW, e.g. --relocate base/16384=/mnt/fast/16384"))),
    }
}

/// What a restore reports.
#[derive(Clone, Debug, Serialize)]
pub struct RestoreReport {
    /// The set's id.
    pub backup_id: String,
    /// Where the main root went.
    pub target: String,
    /// Stripes read.
    pub stripes: usize,
    /// Regular files restored.
    pub files: usize,
    /// Entries restored (files, directories, symlinks).
    pub entries: usize,
    /// Raw bytes written (for a delta restore, not those found on disk already).
    pub bytes_written: u64,
    /// Bytes of frames read from the stripes (all of them, or with `only`, those that hold the
    /// chosen files).
    pub bytes_read: u64,
    /// Bytes of the whole set.
    pub set_bytes: u64,
    /// Wall time.
    pub seconds: f64,
    /// Decompressor threads.
    pub threads: usize,
    /// Files of 64 KiB or more were written with direct I/O (O_DIRECT) throughout; false when
    /// written buffered (`--buffered-io`, a transfer size not a multiple of 4 KiB, or a filesystem
    /// that refused it). Smaller files (packed in the set) are always written buffered and made
    /// durable with one `syncfs`.
    pub direct_io: bool,
    /// Direct writes were kept in flight on io_uring while the next chunks decompressed (false:
    /// each was written synchronously, by `--sync-writes` or for want of io_uring).
    pub io_uring: bool,
    /// For a delta restore: what was on disk already, and what was removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delta: Option<DeltaReport>,
}

/// What a delta restore did: what it found right and kept, what it wrote, what it removed.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DeltaReport {
    /// `wal` (the ranges came from what the caller knows changed) or `hash` (every chunk compared
    /// with the target).
    pub method: &'static str,
    /// How the ranges were found, or why the target was hashed.
    pub how: String,
    /// Files already there that needed no byte written, and the bytes of every file already there
    /// that were kept (not read from the backup, not written).
    pub files_kept: u64,
    /// See `files_kept`.
    pub bytes_kept: u64,
    /// Files already there that got some bytes written, and those bytes.
    pub files_rewritten: u64,
    /// See `files_rewritten`.
    pub bytes_rewritten: u64,
    /// Files that were not there, and their bytes.
    pub files_created: u64,
    /// See `files_created`.
    pub bytes_created: u64,
    /// Entries removed (not in the backup, or of another kind there), and the bytes of the
    /// regular files among them.
    pub removed: u64,
    /// See `removed`.
    pub bytes_removed: u64,
    /// Chunks found on disk as the backup has them (hashing).
    pub chunks_kept: u64,
    /// Bytes read from the target to compare (hashing) or to check (`--check-changes`).
    pub bytes_compared: u64,
    /// `--check-changes`: blocks outside the ranges given that differed all the same (up to 100,
    /// as `path block N`), and their number.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub misses: Vec<String>,
    /// See `misses`.
    pub missed: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relocation_parsing() {
        assert_eq!(parse_relocation("a/b=/x").unwrap(), ("a/b".to_string(), PathBuf::from("/x")));
        assert_eq!(parse_relocation("a/=/x").unwrap().0, "a");
        for bad in ["a", "=x", "a="] {
            assert!(parse_relocation(bad).unwrap_err().to_string().contains("OLD=NEW"));
        }
    }
}
