//! The backup pipeline, one stage per file.
//!
//! ```text
//! readers (one per device) ─► jobs ─► compressors (one per core) ─► frames ─► writers (one per stripe)
//!        ▲  take a buffer            encode into a spare buffer        dropping returns the buffer │
//!        └────────────────────────────────── pool: buffer_count × buffer_len ◄──────────────────┘
//! ```
//! Each compressor keeps one spare buffer of the pool; it encodes a chunk into the spare and sends
//! the spare on as the frame's payload, keeping the chunk's buffer as its next spare. Readers draw
//! from the rest of the pool. So the pipeline never holds more than `buffer_count × buffer_len`
//! bytes of chunk data (`buffer_len` is the transfer size, or lz4's worst-case output for it), and
//! every channel is bounded. Writers take the next finished frame, so a faster stripe takes more.
//!
//! A [`Backup`] is a session: start it, add trees or in-memory files (a database source adds its
//! backup_label and WAL after the data), then [`Backup::finish`] writes every stripe's footer and
//! publishes the set. Dropping an unfinished session removes what it wrote.
//!
//! - [`options`](self): [`BackupOptions`] (what is asked), [`Tuning`] (the knobs resolved, and the
//!   memory budget), [`BackupReport`] (what a finished backup says).
//! - `session`: [`Backup`], which starts the threads, registers entries and writes the footers.
//! - `read`: the readers (one per device, small files packed into shared chunks).
//! - `job`: what readers hand on (jobs, packed members, work, outcomes) and the file operations
//!   they share.
//! - `delta`: what an incremental holds of each file ([`Changes`]); `pack`: the packer of small
//!   files and changed runs, the reader of changed runs, and consolidation's feeder.
//! - `park`: work waiting for a reader's queue, in memory and then on disk, so the walk never
//!   waits.
//! - `check`: the [`ChunkCheck`] hook a source plugs in (PostgreSQL's page checksums).
//! - `compress`: the compressors; `auto`: `--compression auto`'s level.
//! - `write`: the stripe writers and each stripe's footer.
//! - `resume`: the journal a resumable backup keeps, and going on from a stopped one's stripes.
//!
//! Submodules never reach back into this file: it only assembles them.

mod auto;
mod check;
mod compress;
mod delta;
mod job;
mod options;
mod pack;
mod park;
mod read;
mod resume;
mod session;
mod write;

use std::path::Path;
use std::sync::Arc;

use crate::error::{io_at, ErrorKind, Result};
use crate::manifest::{EntryKind, Root};
use crate::pipeline::Progress;
use crate::source::{Listed, Walk};
use crate::storage::Location;

pub use auto::{AUTO_LEVELS, AUTO_SETTLE};
pub use check::{Batch, ChunkCheck, MAX_FINDINGS};
pub use delta::{Changes, FileChanges, Lineage, UnitFilter};
pub use options::DEFAULT_KEEP_SUPERSEDED_PCT;
pub use options::{BackupOptions, BackupReport, Tuning};
pub(crate) use pack::{Feeder, Kept};
pub use resume::{Journal, Journaled, Resumable, Resume, Settings};
pub use session::Backup;

/// Back up one directory tree: list it, start a session, read everything, finish.
///
/// # Errors
/// Any [`Error`] from listing, reading, compressing or writing; nothing is left that looks complete.
pub fn backup_directory(source: &Path, opts: &BackupOptions, progress: Arc<dyn Progress>) -> Result<BackupReport> {
    let abs = std::path::absolute(source).map_err(|e| io_at(ErrorKind::Source, "cannot resolve", source, e))?;
    let mut walk = Walk::new(&abs, 0)?;
    let mut opts = opts.clone();
    // The tree is walked as it is read, so its size is not known when the stripes are made. Where
    // the size shapes them (--preallocate, an upload's part size), a first walk sums it.
    if opts.expected_bytes.is_none() && (opts.preallocate || opts.targets.iter().any(Location::wants_size)) {
        let mut bytes = 0;
        for l in Walk::new(&abs, 0)? {
            let l = l?;
            bytes += if l.entry.kind == EntryKind::File { l.entry.size } else { 0 };
        }
        opts.expected_bytes = Some(bytes);
    }
    let tuning = Tuning::resolve(&opts, 1)?;
    let mut b = Backup::start(&opts, tuning, progress)?;
    let read = b.add_tree_streamed(Root { name: String::new(), path: abs.display().to_string() }, &mut walk);
    b.warnings.extend(walk.take_warnings());
    read?;
    b.finish(serde_json::json!({ "kind": "directory" }))
}

/// Distinct devices among the regular files of a listing.
pub fn count_devices(listed: &[Listed]) -> usize {
    let mut devs: Vec<u64> = listed.iter().filter(|l| l.entry.kind == EntryKind::File).map(|l| l.dev).collect();
    devs.sort_unstable();
    devs.dedup();
    devs.len().max(1)
}
