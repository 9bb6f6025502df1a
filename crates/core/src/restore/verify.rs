//! RESTORE VERIFYONLY: the restore's scan with a sink that writes nothing, so that every byte of
//! every stripe is read and every checksum checked.

use std::sync::Arc;

use super::scan::{scan, ChunkSink, Lane};
use crate::error::Result;
use crate::pipeline::Progress;
use crate::set::BackupSet;
use crate::stop::Stop;

/// What a verify reports.
#[derive(Clone, Debug, serde::Serialize)]
pub struct VerifyReport {
    /// The set's id.
    pub backup_id: String,
    /// Stripes read.
    pub stripes: usize,
    /// Frames checked.
    pub frames: u64,
    /// Raw bytes those frames hold.
    pub bytes_raw: u64,
    /// Bytes of the stripes.
    pub bytes_stored: u64,
    /// Regular files in the manifest.
    pub files: usize,
    /// Wall time.
    pub seconds: f64,
}

/// The sink of a verify: every chunk checked, nothing kept.
struct Discard;
impl ChunkSink for Discard {
    fn lane(&self) -> Result<Box<dyn Lane + '_>> {
        Ok(Box::new(Discard))
    }
}
impl Lane for Discard {
    fn chunk(&mut self, _: u32, _: u64, _: usize, _: Option<&[u8]>) -> Result<()> {
        Ok(())
    }
}

/// RESTORE VERIFYONLY: read every byte of every stripe, check every checksum, decompress, write
/// nothing.
///
/// # Errors
/// The first problem found, naming the stripe and region; [`crate::error::ErrorKind::Cancelled`]
/// once `stop` is asked.
pub fn verify(set: &BackupSet, threads: Option<usize>, progress: Arc<dyn Progress>, stop: &Stop) -> Result<VerifyReport> {
    let t0 = std::time::Instant::now();
    let frames = scan(set, threads, progress, stop, &Discard)?.frames;
    Ok(VerifyReport {
        backup_id: set.manifest.backup_id.clone(),
        stripes: set.stripes.len(),
        frames,
        bytes_raw: set.raw_bytes(),
        bytes_stored: set.stored_bytes(),
        files: set.file_count(),
        seconds: t0.elapsed().as_secs_f64(),
    })
}
