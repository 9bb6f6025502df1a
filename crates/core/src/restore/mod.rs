//! Restore: parallel read of every stripe, parallel decompression, positional writes into files
//! sized up front, hard links and FIFOs, then owners, modes, times and fsync. `--relocate OLD=NEW`
//! moves a subtree (SQL Server's WITH MOVE). A target that already holds data is refused unless
//! forced, and a forced restore empties it first (WITH REPLACE: the result is exactly the backup).
//! While a restore runs every target root holds [`INCOMPLETE_MARKER`]; a failed restore removes
//! what it wrote where it can and otherwise leaves the markers, so nobody mistakes it for whole.
//!
//! One room per step:
//! - `options`: [`RestoreOptions`] (what is asked), [`RestoreReport`] (what a restore says).
//! - `plan`: where each entry goes (relocation, `--only`, hollow databases), checked before
//!   anything is touched.
//! - `chain`: the block map: which set of a chain (a full and the incrementals on it) holds each
//!   byte of each file, and the sink that cuts each set's chunks to what it gives.
//! - `target`: the target roots made ready (empty, or emptied when forced), the space check, and
//!   the clean-up after a failure.
//! - `consolidate`: a chain written as one new full set, without the source.
//! - `delta`: `--delta`: what the target has that the backup lacks removed, and the chunks already
//!   on disk (by their strong hash) taken out of the block map.
//! - `scan`: the read side, shared with [`verify`]: every stripe read as one stream, every frame
//!   checked and decompressed on every core, each chunk handed to a sink.
//! - `write`: the sink that writes files, with its io_uring and direct-I/O lane per thread.
//! - `durable`: write-back while the scan runs, and the final `syncfs`/`fsync`.
//! - `metadata`: owners, modes and times.
//! - `run`: the steps in order (directories, links, FIFOs, files, hard links, durability,
//!   metadata deepest first).
//! - `verify`: RESTORE VERIFYONLY, the scan with a sink that writes nothing.
//!
//! Submodules never reach back into this file: it only assembles them.

mod chain;
mod consolidate;
mod delta;
mod durable;
mod metadata;
mod options;
mod plan;
mod run;
mod scan;
mod target;
mod verify;
mod write;

use std::sync::Arc;
use std::time::Instant;

use crate::error::Result;
use crate::pipeline::Progress;
use crate::set::BackupSet;
use chain::{check_order, BlockMap};
use plan::Plan;

pub use chain::{chain_file, check_chain, ChainFile};

pub use consolidate::consolidate;
pub use options::{parse_relocation, DeltaReport, DeltaSource, RestoreOptions, RestoreReport, INCOMPLETE_MARKER};
pub use verify::{verify, VerifyReport};

/// Restore the set `stripes` belong to.
///
/// # Errors
/// Any problem opening or reading the set (naming stripe and region), a non-empty target without
/// `force`, a relocation that matches nothing, or an I/O failure writing the target.
pub fn restore(set: &BackupSet, opts: &RestoreOptions, progress: Arc<dyn Progress>) -> Result<RestoreReport> {
    restore_chain(&[set], opts, progress)
}

/// Restore the newest set of a chain: a full set and the incrementals and differentials that build
/// on it, oldest first (a full set alone is a chain of one). Each byte is read from the newest set
/// that holds it and written once.
///
/// # Errors
/// As [`restore`]; sets that do not form the chain the newest one names, or a chain that leaves a
/// byte of some file in no set, before anything is written.
pub fn restore_chain(sets: &[&BackupSet], opts: &RestoreOptions, progress: Arc<dyn Progress>) -> Result<RestoreReport> {
    let t0 = Instant::now();
    check_order(sets)?;
    if opts.delta && (opts.force || !opts.only.is_empty() || !opts.hollow.is_empty()) {
        return Err(crate::error::Error::invalid(
            "--delta makes the target equal to the whole backup, keeping what is already right: it does not combine with --force (which empties the target), --only or --db-include",
        ));
    }
    let set = *sets.last().expect("checked: at least one set");
    let plan = Plan::new(set, opts)?;
    // One set restored whole needs no block map: each chunk is its own file's. A chain's map
    // is made (and the chain checked) before anything is written; a delta restore's compares
    // the target's files with it, reading only.
    let mut space = plan.space();
    let threads = opts.threads.unwrap_or_else(crate::host::available_cores);
    // A delta restore's map comes from what the caller knows changed, or from comparing the
    // target's chunks with the backup's hashes (and with `--check-changes`, both).
    let source = &opts.delta_source;
    let mut checks = None;
    let (map, mut delta) = match (opts.delta, &source.changes) {
        (true, Some(changes)) if !source.check => {
            let (map, d) = delta::map_from_changes(sets, &plan, changes.as_ref())?;
            (map, Some(d))
        }
        (true, changes) => {
            let check = changes.as_deref().filter(|_| source.check);
            let (map, d, c) = delta::map_what_differs(sets, &plan, threads, check)?;
            checks = check.map(|_| c);
            (map, Some(d))
        }
        (false, _) if sets.len() == 1 => (BlockMap::single(), None),
        (false, _) => (BlockMap::new(sets, |f, bytes| space.add(&plan, f, bytes))?, None),
    };
    let prepared = plan.prepare_roots(opts.force, opts.delta)?;
    let ran = (|| {
        if let Some(d) = &mut delta {
            (d.removed, d.bytes_removed) = plan.prune_for_delta()?;
        }
        plan.run(sets, &map, space, opts, progress)
    })();
    let (direct_io, io_uring, scanned, restored) = match ran {
        Ok(d) => d,
        Err(e) => return Err(plan.clean_up_after(e, &prepared)),
    };
    if let Some(d) = &mut delta {
        d.how.clone_from(&source.how);
        (d.files_kept, d.bytes_kept) = restored.kept;
        (d.files_rewritten, d.bytes_rewritten) = restored.rewritten;
        (d.files_created, d.bytes_created) = restored.created;
        if let Some(c) = checks {
            c.misses(d)?;
        }
    }
    Ok(RestoreReport {
        backup_id: set.manifest.backup_id.clone(),
        target: opts.target.display().to_string(),
        stripes: sets.iter().map(|s| s.stripes.len()).sum(),
        files: restored.files,
        entries: restored.entries,
        bytes_written: restored.bytes,
        bytes_read: scanned.bytes_read,
        set_bytes: sets.iter().map(|s| s.stored_bytes()).sum(),
        seconds: t0.elapsed().as_secs_f64(),
        threads: opts.threads.unwrap_or_else(crate::host::available_cores),
        direct_io,
        io_uring,
        delta,
    })
}
