//! What a backup is asked ([`BackupOptions`]), the knobs and memory budget that resolves to
//! ([`Tuning`]), and what a finished backup reports ([`BackupReport`]).

use serde::Serialize;

use crate::codec::CodecSpec;
use crate::error::{Error, Result};
use crate::format::{DEFAULT_TRANSFER_SIZE, MAX_STRIPES, MAX_TRANSFER_SIZE, MIN_TRANSFER_SIZE};
use crate::storage::Location;

/// What a backup is asked to do. Built by the CLI from flags; validated by [`Tuning::resolve`].
#[derive(Clone, Debug)]
pub struct BackupOptions {
    /// One entry per stripe.
    pub targets: Vec<Location>,
    /// Codec and level.
    pub codec: CodecSpec,
    /// Chunk size.
    pub transfer_size: u64,
    /// Buffers in all; default `stripes × 4 + 2 × readers` (at least `2 × threads`) for I/O, plus
    /// one per compressor thread.
    pub buffer_count: Option<usize>,
    /// Reader threads; default one per device among the source's files.
    pub readers: Option<usize>,
    /// Compressor threads; default one per core.
    pub threads: Option<usize>,
    /// Free text stored in the manifest.
    pub label: Option<String>,
    /// Replace existing stripe files.
    pub overwrite: bool,
    /// Reserve each stripe file's estimated size up front (fallocate) and trim it at the end,
    /// instead of growing it as written (SQL Server preallocates unless trace flag 3042 is on).
    /// The estimate is the source's size over the stripes. See docs/design.md for which wins.
    pub preallocate: bool,
    /// About how many bytes the source holds, when known: sizes upload parts so that no stripe
    /// object needs too many, and the memory they take.
    pub expected_bytes: Option<u64>,
    /// Ask it to stop the backup (Ctrl-C, SIGTERM): readers stop at the next chunk, and the
    /// session fails with [`ErrorKind::Cancelled`], removing every stripe it wrote and aborting
    /// every upload.
    pub stop: crate::stop::Stop,
    /// Encrypt (AES-256-GCM after compression) with these keys, the master key made as this KDF
    /// says (a fresh one per backup for a set, the repository's own in a repository).
    pub encryption: Option<crate::crypto::Encryption>,
    /// Consolidation only: the largest share of a frame's raw bytes, in percent, that newer sets
    /// replaced for the frame still to be copied as it is stored (those bytes kept in it, unused:
    /// [`crate::format::SUPERSEDED`]); a frame cut more is decompressed and what it gives is
    /// compressed again. 0 rewrites every frame a newer set cuts into (the smallest set).
    pub keep_superseded_pct: u8,
    /// Record progress here, and leave the stripes unfinished if the backup stops, so that a later
    /// backup can go on from them ([`super::resume`]).
    pub journal: Option<super::resume::Journaled>,
    /// Go on from earlier attempts of the same set rather than start one ([`super::Resume::prepare`]).
    pub resume: Option<std::sync::Arc<super::Resume>>,
}

impl BackupOptions {
    /// What a resumption must match ([`super::Resume::prepare`]).
    pub fn settings(&self) -> super::resume::Settings<'_> {
        super::resume::Settings {
            targets: &self.targets,
            codec: &self.codec,
            transfer_size: self.transfer_size,
            encryption: self.encryption.as_ref(),
            expected_bytes: stripe_bound(self),
        }
    }
}

/// [`BackupOptions::keep_superseded_pct`]'s default: a frame three quarters live is copied.
pub const DEFAULT_KEEP_SUPERSEDED_PCT: u8 = 25;

impl BackupOptions {
    /// Defaults for these targets: `zstd:low`, 1 MiB chunks, automatic buffers, readers and threads.
    pub fn new(targets: Vec<Location>) -> Self {
        BackupOptions {
            targets,
            codec: CodecSpec::default(),
            transfer_size: DEFAULT_TRANSFER_SIZE,
            buffer_count: None,
            readers: None,
            threads: None,
            label: None,
            overwrite: false,
            preallocate: false,
            expected_bytes: None,
            stop: crate::stop::Stop::new(),
            encryption: None,
            keep_superseded_pct: DEFAULT_KEEP_SUPERSEDED_PCT,
            journal: None,
            resume: None,
        }
    }
}

/// The resolved throughput knobs and the memory budget they imply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Tuning {
    /// Compressor threads.
    pub threads: usize,
    /// Reader threads.
    pub readers: usize,
    /// Buffers.
    pub buffer_count: usize,
    /// Chunk size.
    pub transfer_size: usize,
    /// Bytes per buffer: the transfer size, or the codec's worst-case output if larger (lz4).
    pub buffer_len: usize,
    /// What the targets hold outside the pool, all stripes together (upload parts in flight).
    pub target_memory_bytes: u64,
    /// `buffer_count × buffer_len + target_memory_bytes`: the most data in memory at once.
    pub memory_budget_bytes: u64,
}

/// The most one stripe may hold: the whole source (writers take frames from one queue, so a fast
/// stripe can take far more than its share; compression only makes it less), or 0 when unknown.
pub(super) fn stripe_bound(opts: &BackupOptions) -> u64 {
    opts.expected_bytes.unwrap_or(0)
}

impl Tuning {
    /// Resolve defaults and check ranges. `devices` is how many devices the source spans.
    ///
    /// # Errors
    /// [`ErrorKind::InvalidInput`] naming the option, the value and the accepted range.
    pub fn resolve(opts: &BackupOptions, devices: usize) -> Result<Tuning> {
        let stripes = opts.targets.len();
        if stripes == 0 {
            return Err(Error::invalid("no target: give at least one --to FILE (or --to nul)"));
        }
        let nulls = opts.targets.iter().filter(|t| t.is_null()).count();
        if nulls > 0 && nulls < stripes {
            return Err(Error::invalid(
                "nul cannot be mixed with file targets: the frames sent to nul would be missing from the set; use only nul targets (one or more) to measure read + compress",
            ));
        }
        if stripes > MAX_STRIPES {
            return Err(Error::invalid(format!("{stripes} targets: at most {MAX_STRIPES} stripes per backup")));
        }
        let ts = opts.transfer_size;
        if !(MIN_TRANSFER_SIZE..=MAX_TRANSFER_SIZE).contains(&ts) {
            return Err(Error::invalid(format!("transfer size {} is out of range: use 64KiB .. 16MiB (default 1MiB)", crate::size::format_size(ts))));
        }
        let readers = match opts.readers {
            Some(0) => return Err(Error::invalid("--readers 0: at least one reader is needed")),
            Some(r) => r,
            None => devices.max(1),
        };
        if opts.threads == Some(0) {
            return Err(Error::invalid("--threads 0: at least one compressor thread is needed"));
        }
        let cores = crate::host::available_cores();
        // SQL Server's rule of thumb sizes the I/O buffers; each compressor's spare (its output
        // buffer) comes on top. Measured on PostgreSQL pages, fewer starve the compressors.
        let io_buffers = (stripes * 4 + 2 * readers).max(2 * opts.threads.unwrap_or(cores));
        let buffer_count = opts.buffer_count.unwrap_or(io_buffers + opts.threads.unwrap_or(cores));
        if buffer_count < 2 {
            return Err(Error::invalid(format!("--buffer-count {buffer_count}: at least 2 buffers are needed")));
        }
        // Each compressor keeps one buffer as its spare; readers need at least one more.
        let threads = match opts.threads {
            Some(t) if t >= buffer_count => {
                return Err(Error::invalid(format!(
                    "--buffer-count {buffer_count} is too small for --threads {t}: each compressor keeps one buffer, so use --buffer-count {} or more",
                    t + 1
                )))
            }
            Some(t) => t,
            None => cores.min(buffer_count - 1),
        };
        // Encrypted, a buffer also holds a frame's sealing (its number, raw checksum and tag).
        let sealing = if opts.encryption.is_some() { crate::crypto::FRAME_OVERHEAD } else { 0 };
        let buffer_len = opts.codec.buffer_len(ts as usize) + sealing;
        let per_stripe = stripe_bound(opts);
        let resumable = |t: &crate::storage::Location| if opts.journal.is_some() { t.store().resumable_memory(per_stripe) } else { 0 };
        let target_memory_bytes: u64 = opts.targets.iter().map(|t| t.store().sink_memory(per_stripe) + resumable(t)).sum();
        Ok(Tuning {
            threads,
            readers,
            buffer_count,
            transfer_size: ts as usize,
            buffer_len,
            target_memory_bytes,
            memory_budget_bytes: (buffer_count * buffer_len) as u64 + target_memory_bytes,
        })
    }
}

/// What a finished backup reports.
#[derive(Clone, Debug, Serialize)]
pub struct BackupReport {
    /// The set's id, hex.
    pub backup_id: String,
    /// Label.
    pub label: Option<String>,
    /// Bytes read from the source.
    pub bytes_read: u64,
    /// Raw bytes the set holds: every file's for a full backup; for an incremental, the changed
    /// pages and the files stored whole.
    pub bytes_held: u64,
    /// Bytes written to all stripes (headers, frames, footers).
    pub bytes_written: u64,
    /// Wall time from start to published.
    pub seconds: f64,
    /// Stripe count.
    pub stripes: usize,
    /// `aes-256-gcm`, or `none`.
    pub encryption: String,
    /// Where each stripe went.
    pub targets: Vec<String>,
    /// Codec family.
    pub codec: String,
    /// Codec spec as asked, e.g. `zstd:low`.
    pub compression: String,
    /// Numeric level.
    pub level: i32,
    /// `auto` only: chunks compressed at each zstd level it chose.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_levels: Option<std::collections::BTreeMap<i32, u64>>,
    /// Chunk size.
    pub transfer_size: u64,
    /// Buffers.
    pub buffer_count: usize,
    /// Reader threads that read files (as [`crate::manifest::OptionsUsed::readers`]).
    pub readers: usize,
    /// Compressor threads.
    pub threads: usize,
    /// Bytes per buffer (see [`Tuning`]).
    pub buffer_len: u64,
    /// Upload parts in flight, all stripes together (see [`Tuning`]).
    pub target_memory_bytes: u64,
    /// `buffer_count × buffer_len + target_memory_bytes`.
    pub memory_budget_bytes: u64,
    /// Regular files backed up.
    pub files: usize,
    /// All entries (files, directories, symlinks).
    pub entries: usize,
    /// Frames written.
    pub frames: u64,
    /// Chunks that were all zero (stored without payload).
    pub zero_chunks: u64,
    /// Chunks stored raw because compression did not pay.
    pub raw_chunks: u64,
    /// Chunks taken as they came stored, not compressed here: compressed on the source's host
    /// (`--compress-on agent`), or frames `consolidate` copied from the set that held them.
    #[serde(default)]
    pub stored_chunks: u64,
    /// Bytes of frames copied as stored that no file uses (a consolidation's: newer sets replaced
    /// them; [`crate::format::SUPERSEDED`]). Not in `bytes_held`.
    #[serde(default)]
    pub superseded_bytes: u64,
    /// Files that changed while read, special files skipped, and the like.
    pub warnings: Vec<String>,
    /// What a [`ChunkCheck`] found (e.g. page checksum failures), also in the manifest.
    pub check_failures: Vec<String>,
    /// Files that changed while read, when the source expects it ([`Backup::expect_changes`]).
    pub changed_files: Vec<String>,
    /// Files that vanished before they were read, likewise.
    pub vanished_files: Vec<String>,
    /// A full backup that went on from earlier attempts: what it kept of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumed: Option<crate::manifest::Resumed>,
}

impl BackupReport {
    /// bytes_read / bytes_written.
    pub fn ratio(&self) -> f64 {
        if self.bytes_written == 0 {
            0.0
        } else {
            self.bytes_read as f64 / self.bytes_written as f64
        }
    }
}
