//! Consolidation: a new full set written from a chain (a full and the incrementals on it) without
//! the source: every chunk the newest set needs is read once from the set that gives it, as a
//! restore reads it, and handed to a backup session instead of a file. A frame stored in the clear
//! by the codec the new set writes (or raw) is copied as it is stored when newer sets replaced at
//! most [`BackupOptions::keep_superseded_pct`] of it: its stored checksum checked here, its raw one
//! where the backup's compressor expands it to check it and take the hashes of the ranges still
//! used; the replaced bytes stay in it, [`crate::format::SUPERSEDED`]. Everything else is
//! decompressed and compressed, and small pieces (runs of pages) are packed back into full-size
//! chunks. The new set holds the newest set's entries, whole, and its source facts: it restores
//! to exactly what the chain restores to.

use std::sync::Arc;

use super::chain::{check_order, BlockMap};
use super::scan::{scan, ChunkSink, Decoded, Kept, Lane};
use crate::backup::{Backup, BackupOptions, BackupReport, Feeder, Tuning};
use crate::codec::CodecKind;
use crate::error::{Error, ErrorKind, Result};
use crate::pipeline::{NoProgress, Progress};
use crate::set::BackupSet;

/// Write the chain `sets` (oldest first) as one full set to `opts.targets`.
///
/// # Errors
/// A chain that is not one ([`crate::restore::check_chain`]), any problem reading it (naming the set,
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
    let sink = IntoBackup { backup: &b, codec: opts.codec.kind, transfer_size: tuning.transfer_size, keep_superseded_pct: opts.keep_superseded_pct };
    for (g, set) in sets.iter().enumerate() {
        if let Err(e) = scan(set, threads, Arc::new(NoProgress), &opts.stop, &map.sink(g, &sink)) {
            // A backup that stopped says why itself.
            return Err(b.failure().unwrap_or(e));
        }
    }
    b.finish(m.source.clone())
}

/// The sink that hands every piece to the backup, one feeder per decompressor thread; frames in
/// the new set's codec (or raw) that fit its chunk size are taken as they are stored.
struct IntoBackup<'a> {
    backup: &'a Backup,
    codec: CodecKind,
    transfer_size: usize,
    keep_superseded_pct: u8,
}

impl ChunkSink for IntoBackup<'_> {
    fn lane(&self) -> Result<Box<dyn Lane + '_>> {
        Ok(Box::new(FeedLane { feeder: self.backup.feeder(), codec: self.codec, transfer_size: self.transfer_size, keep_superseded_pct: self.keep_superseded_pct }))
    }
}

struct FeedLane {
    feeder: Feeder,
    codec: CodecKind,
    transfer_size: usize,
    keep_superseded_pct: u8,
}

impl Lane for FeedLane {
    fn takes_stored(&mut self, raw_len: usize, codec: CodecKind, live: &mut Vec<Kept>) -> bool {
        let used: u64 = live.iter().map(|k| u64::from(k.len)).sum();
        let superseded = raw_len as u64 - used.min(raw_len as u64);
        raw_len <= self.transfer_size && (codec == self.codec || codec == CodecKind::None) && superseded * 100 <= raw_len as u64 * u64::from(self.keep_superseded_pct)
    }

    fn stored(&mut self, raw_len: usize, codec: CodecKind, payload: &[u8], raw_crc: u32, live: &[Kept]) -> Result<()> {
        if self.feeder.stored(raw_len, codec, payload, raw_crc, live) {
            Ok(())
        } else {
            Err(Error::new(ErrorKind::Cancelled, "the consolidation's backup stopped"))
        }
    }

    fn chunk(&mut self, file_id: u32, offset: u64, len: usize, data: Option<&[u8]>) -> Result<()> {
        if self.feeder.piece(file_id, offset, len, data) {
            Ok(())
        } else {
            Err(Error::new(ErrorKind::Cancelled, "the consolidation's backup stopped"))
        }
    }

    fn owned(&mut self, file_id: u32, offset: u64, data: Decoded) -> Result<()> {
        self.chunk(file_id, offset, data.len(), Some(&data))
    }

    fn finish(&mut self) -> Result<()> {
        if self.feeder.finish() {
            Ok(())
        } else {
            Err(Error::new(ErrorKind::Cancelled, "the consolidation's backup stopped"))
        }
    }
}
