//! Consolidation: a new full set written from a chain (a full and the incrementals on it) without
//! the source: every chunk the newest set needs is read once from the set that gives it, as a
//! restore reads it, and handed to a backup session instead of a file. Small pieces (runs of pages)
//! are packed back into full-size chunks. The new set holds the newest set's entries, whole, and
//! its source facts: it restores to exactly what the chain restores to.

use std::sync::Arc;

use super::chain::{check_order, BlockMap};
use super::scan::{scan, ChunkSink, Decoded, Lane};
use crate::backup::{Backup, BackupOptions, BackupReport, Feeder, Tuning};
use crate::error::{Error, ErrorKind, Result};
use crate::pipeline::{NoProgress, Progress};
use crate::set::BackupSet;

/// Write the chain `sets` (oldest first) as one full set to `opts.targets`.
///
/// # Errors
/// A chain that is not one ([`crate::check_chain`]), any problem reading it (naming the set,
/// stripe and frame), and everything a backup can meet writing; nothing is left that looks whole.
pub fn consolidate(sets: &[&BackupSet], opts: &BackupOptions, threads: Option<usize>, progress: Arc<dyn Progress>) -> Result<BackupReport> {
    check_order(sets)?;
    let map = BlockMap::new(sets, |_, _| Ok(()))?;
    let newest = *sets.last().expect("checked: at least one set");
    let m = &newest.manifest;
    let mut opts = opts.clone();
    if opts.expected_bytes.is_none() {
        opts.expected_bytes = Some(m.total_file_bytes());
    }
    let tuning = Tuning::resolve(&opts, sets.iter().map(|s| s.stripes.len()).max().unwrap_or(1))?;
    let mut b = Backup::start(&opts, tuning, progress)?;
    b.warnings.extend(m.warnings.iter().cloned());
    b.adopt(m.roots.clone(), &m.entries)?;
    let sink = IntoBackup(&b);
    for (g, set) in sets.iter().enumerate() {
        if let Err(e) = scan(set, threads, Arc::new(NoProgress), &map.sink(g, &sink)) {
            // A backup that stopped says why itself.
            return Err(b.failure().unwrap_or(e));
        }
    }
    b.finish(m.source.clone())
}

/// The sink that hands every piece to the backup, one feeder per decompressor thread.
struct IntoBackup<'a>(&'a Backup);

impl ChunkSink for IntoBackup<'_> {
    fn lane(&self) -> Result<Box<dyn Lane + '_>> {
        Ok(Box::new(FeedLane(self.0.feeder())))
    }
}

struct FeedLane(Feeder);

impl Lane for FeedLane {
    fn chunk(&mut self, file_id: u32, offset: u64, len: usize, data: Option<&[u8]>) -> Result<()> {
        if self.0.piece(file_id, offset, len, data) {
            Ok(())
        } else {
            Err(Error::new(ErrorKind::Cancelled, "the consolidation's backup stopped"))
        }
    }

    fn owned(&mut self, file_id: u32, offset: u64, data: Decoded) -> Result<()> {
        self.chunk(file_id, offset, data.len(), Some(&data))
    }

    fn finish(&mut self) -> Result<()> {
        if self.0.finish() {
            Ok(())
        } else {
            Err(Error::new(ErrorKind::Cancelled, "the consolidation's backup stopped"))
        }
    }
}
