//! The backup pipeline.
//!
//! ```text
//! readers (one per device) ─► jobs ─► compressors (one per core) ─► frames ─► writers (one per stripe)
//!        ▲  take a buffer                 swap with a spare buffer       dropping returns the buffer │
//!        └────────────────────────────────── pool: buffer_count × buffer_len ◄──────────────────┘
//! ```
//! Each compressor keeps one spare buffer; it compresses a chunk into the spare and sends the spare
//! on, keeping the chunk's buffer as its next spare. Readers draw from the rest of the pool. So the
//! pipeline never holds more than `buffer_count × buffer_len` bytes of chunk data (`buffer_len` is the
//! transfer size, or lz4's worst-case output for it), and every
//! channel is bounded. Writers take the next finished frame, so a faster stripe takes more.
//!
//! A [`Backup`] is a session: start it, add trees or in-memory files (a database source adds its
//! backup_label and WAL after the data), then [`Backup::finish`] writes every stripe's footer and
//! publishes the set. Dropping an unfinished session removes what it wrote.

use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{bounded, Receiver, Sender};
use serde::Serialize;

use crate::codec::CodecSpec;
use crate::error::{io_at, Error, ErrorKind, Result};
use crate::format::{
    BackupId, FrameHeader, IndexEntry, StripeHeader, Trailer, FLAG_PACKED, FORMAT_VERSION, FRAME_HEADER_LEN,
    MAX_ZERO_FRAME,
};
use crate::manifest::{file_checksums, ChunkRef, Entry, EntryKind, Manifest, OptionsUsed, Root, StripeRef};
use crate::frame::{FrameEncoder, Payload, Sealing};
use crate::pipeline::{Pool, PoolBuf, Progress, Shared};
use crate::source::{list_tree, Listed};
use crate::storage::{Location, StripeSink};

/// Smallest transfer size.
pub const MIN_TRANSFER_SIZE: u64 = 64 << 10;
/// Largest transfer size.
pub const MAX_TRANSFER_SIZE: u64 = 16 << 20;
/// Default transfer size (SQL Server's MAXTRANSFERSIZE default is 1 MiB too).
pub const DEFAULT_TRANSFER_SIZE: u64 = 1 << 20;
/// Most stripes in one set.
pub const MAX_STRIPES: usize = 64;
/// Files smaller than this are packed: several files' bytes share one chunk, so one compressor
/// call and one frame header serve many of them.
pub const PACK_LIMIT: u64 = 64 << 10;
/// Most check findings recorded in one backup.
pub const MAX_FINDINGS: usize = 1000;

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
    /// Set it to stop the backup (Ctrl-C): readers stop at the next chunk, and the session fails
    /// with [`ErrorKind::Cancelled`], removing every stripe it wrote and aborting every upload.
    pub stop: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// Encrypt (AES-256-GCM after compression) with these keys, the master key made as this KDF
    /// says (a fresh one per backup for a set, the repository's own in a repository).
    pub encryption: Option<crate::crypto::Encryption>,
}

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
            stop: None,
            encryption: None,
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
fn stripe_bound(opts: &BackupOptions) -> u64 {
    opts.expected_bytes.unwrap_or(0)
}

/// Cores available to this process.
pub fn available_cores() -> usize {
    thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
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
            return Err(Error::invalid(format!(
                "transfer size {} is out of range: use 64KiB .. 16MiB (default 1MiB)",
                crate::size::format_size(ts)
            )));
        }
        let readers = match opts.readers {
            Some(0) => return Err(Error::invalid("--readers 0: at least one reader is needed")),
            Some(r) => r,
            None => devices.max(1),
        };
        if opts.threads == Some(0) {
            return Err(Error::invalid("--threads 0: at least one compressor thread is needed"));
        }
        let cores = available_cores();
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
        let target_memory_bytes: u64 = opts.targets.iter().map(|t| t.store().sink_memory(per_stripe)).sum();
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
    /// Readers.
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
    /// Files that changed while read, special files skipped, and the like.
    pub warnings: Vec<String>,
    /// What a [`ChunkCheck`] found (e.g. page checksum failures), also in the manifest.
    pub check_failures: Vec<String>,
    /// Files that changed while read, when the source expects it ([`Backup::expect_changes`]).
    pub changed_files: Vec<String>,
    /// Files that vanished before they were read, likewise.
    pub vanished_files: Vec<String>,
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

/// Back up one directory tree: list it, start a session, read everything, finish.
///
/// # Errors
/// Any [`Error`] from listing, reading, compressing or writing; nothing is left that looks complete.
pub fn backup_directory(source: &Path, opts: &BackupOptions, progress: Arc<dyn Progress>) -> Result<BackupReport> {
    let abs = std::path::absolute(source).map_err(|e| io_at(ErrorKind::Source, "cannot resolve", source, e))?;
    let mut warnings = Vec::new();
    let listed = list_tree(&abs, 0, &mut warnings)?;
    let devices = count_devices(&listed);
    let mut opts = opts.clone();
    if opts.expected_bytes.is_none() {
        opts.expected_bytes = Some(listed.iter().filter(|l| l.entry.kind == EntryKind::File).map(|l| l.entry.size).sum());
    }
    let tuning = Tuning::resolve(&opts, devices)?;
    let mut b = Backup::start(&opts, tuning, progress)?;
    b.warnings.extend(warnings);
    b.add_tree(Root { name: String::new(), path: abs.display().to_string() }, listed)?;
    b.finish(serde_json::json!({ "kind": "directory" }))
}

/// Distinct devices among the regular files of a listing.
pub fn count_devices(listed: &[Listed]) -> usize {
    let mut devs: Vec<u64> = listed.iter().filter(|l| l.entry.kind == EntryKind::File).map(|l| l.dev).collect();
    devs.sort_unstable();
    devs.dedup();
    devs.len().max(1)
}

/// Checks the chunks of chosen files while they pass through the compressors, in parallel and on
/// bytes already in memory (PostgreSQL's page checksums). Findings go to
/// [`Backup::finish_with`], which decides what they mean.
pub trait ChunkCheck: Send + Sync {
    /// Whether the file at `rel` under root `root` is to be checked.
    fn wants(&self, root: u16, rel: &str) -> bool;
    /// Check the chunk at `offset` of that file; return findings, empty when all is well.
    fn check(&self, root: u16, rel: &str, abs: &Path, offset: u64, data: &[u8]) -> Vec<String>;
}

/// What [`Backup::read_listed`] reads: entries for a root, and the check their chunks get, if any.
pub type Batch = (u16, Vec<Listed>, Option<Arc<dyn ChunkCheck>>);

/// The file a checked chunk belongs to.
struct CheckCtx {
    check: Arc<dyn ChunkCheck>,
    root: u16,
    rel: String,
    abs: PathBuf,
}

struct Job {
    file_id: u32,
    offset: u64,
    len: usize,
    /// The chunk's bytes; none for a hole of a sparse file (`len` zeros, never read).
    buf: Option<PoolBuf>,
    check: Option<Arc<CheckCtx>>,
    /// A packed chunk: the files whose bytes lie back to back in `buf` (empty otherwise).
    members: Vec<Member>,
}

/// One small file in a packed chunk.
struct Member {
    file_id: u32,
    /// Where its bytes start in the chunk.
    at: u32,
    len: u32,
    check: Option<Arc<CheckCtx>>,
}

/// A packed frame's chunk of one file, for the index.
struct Part {
    file_id: u32,
    at: u32,
    len: u32,
    crc: u32,
}

struct Frame {
    header: FrameHeader,
    /// The payload buffer (`header.stored_len` bytes of it are the payload); none for a zero frame.
    buf: Option<PoolBuf>,
    /// A packed frame's chunks (empty otherwise).
    parts: Vec<Part>,
    /// crc32c of the raw bytes (a sealed frame's header does not show it).
    raw_crc: u32,
}

struct WriterOut {
    sink: Box<dyn StripeSink>,
    index: Vec<IndexEntry>,
    pos: u64,
    /// Frames written (a packed frame has several index entries).
    frames: u64,
}

#[derive(Default)]
struct CompressStats {
    zero: u64,
    raw: u64,
}

/// A backup in progress. See the module documentation.
pub struct Backup {
    id: BackupId,
    opts: BackupOptions,
    tuning: Tuning,
    started: Instant,
    started_unix_ms: i64,
    roots: Vec<Root>,
    entries: Vec<Entry>,
    /// Warnings gathered so far; sources may add their own.
    pub warnings: Vec<String>,
    /// Whether files changing and vanishing while read is normal (see [`Backup::expect_changes`]).
    changes_expected: bool,
    changed_files: Vec<String>,
    vanished_files: Vec<String>,
    /// The first name of each multiply-linked file seen: (device, inode) to its entry position.
    first_names: std::collections::HashMap<(u64, u64), u32>,
    shared: Arc<Shared>,
    pool: Arc<Pool>,
    /// The set's data key, for its index and manifest (frames are sealed by the compressors).
    cipher: Option<Arc<crate::crypto::Cipher>>,
    /// `auto`'s level, shared by the compressors.
    auto: Option<Arc<AutoLevel>>,
    job_tx: Option<Sender<Job>>,
    compressors: Vec<JoinHandle<CompressStats>>,
    writers: Vec<JoinHandle<Option<WriterOut>>>,
}

fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

impl Backup {
    /// Create every stripe (under temporary names) and start compressor and writer threads.
    ///
    /// # Errors
    /// [`ErrorKind::Target`] when a stripe cannot be created; nothing is left behind.
    pub fn start(opts: &BackupOptions, tuning: Tuning, progress: Arc<dyn Progress>) -> Result<Backup> {
        let mut seen = std::collections::HashSet::new();
        // Any number of nul targets may be given (each discards its own stripe); a file or object
        // given twice would be two stripes in one place.
        for t in opts.targets.iter().filter(|t| !t.is_null()) {
            if !seen.insert(t.identity()) {
                return Err(Error::invalid(format!("target {t} is given twice: each stripe needs its own file or object")));
            }
        }
        let id = BackupId::random()?;
        let now = SystemTime::now();
        // One data key for the whole set: its key block goes into every stripe's header.
        let (key_block, seal) = match &opts.encryption {
            Some(e) => {
                let (block, cipher) = e.keys.seal(e.kdf)?;
                (Some(block), Some(Sealing::new(cipher)))
            }
            None => (None, None),
        };
        let stripe_count = opts.targets.len();
        let mut sinks = Vec::with_capacity(stripe_count);
        for (k, t) in opts.targets.iter().enumerate() {
            let mut sink = t.create(opts.overwrite, stripe_bound(opts))?;
            if opts.preallocate {
                sink.reserve(stripe_bound(opts) / stripe_count as u64)?;
            }
            let header = StripeHeader {
                version: FORMAT_VERSION,
                stripe_index: k as u16,
                stripe_count: stripe_count as u16,
                backup_id: id,
                codec: opts.codec.kind,
                level: opts.codec.level as i8,
                transfer_size: tuning.transfer_size as u32,
                created_unix_ms: unix_ms(now),
                key_block,
            };
            sink.write_all(&header.encode())?;
            sinks.push((sink, header.encoded_len() as u64));
        }

        let shared = Shared::stoppable(progress, opts.stop.clone());
        // Compressors each keep one buffer; readers may hold the rest.
        let pool = Pool::new(tuning.buffer_count - tuning.threads, tuning.buffer_len);
        let (job_tx, job_rx) = bounded::<Job>(tuning.buffer_count);
        let (frame_tx, frame_rx) = bounded::<Frame>(tuning.buffer_count);

        let mut compressors = Vec::with_capacity(tuning.threads);
        let auto = opts.codec.is_auto().then(|| Arc::new(AutoLevel::new(tuning.threads)));
        for _ in 0..tuning.threads {
            let (rx, tx, shared) = (job_rx.clone(), frame_tx.clone(), shared.clone());
            let (spec, size, seal, auto) = (opts.codec, tuning.buffer_len, seal.clone(), auto.clone());
            compressors.push(thread::spawn(move || compress_loop(spec, size, seal, auto.as_deref(), &rx, &tx, &shared)));
        }
        drop(frame_tx);
        let writers = sinks
            .into_iter()
            .map(|(sink, start)| {
                let (rx, shared) = (frame_rx.clone(), shared.clone());
                thread::spawn(move || write_loop(sink, start, &rx, &shared))
            })
            .collect();

        Ok(Backup {
            id,
            opts: opts.clone(),
            tuning,
            started: Instant::now(),
            started_unix_ms: unix_ms(now),
            roots: Vec::new(),
            entries: Vec::new(),
            warnings: Vec::new(),
            changes_expected: false,
            changed_files: Vec::new(),
            vanished_files: Vec::new(),
            first_names: Default::default(),
            shared,
            pool,
            cipher: seal.as_ref().map(|s| s.cipher.clone()),
            auto,
            job_tx: Some(job_tx),
            compressors,
            writers,
        })
    }

    /// The source is live and its files changing and vanishing while read is normal (a running
    /// database, whose WAL makes them consistent): instead of a warning per file, one line says how
    /// many, and the manifest and report list them.
    pub fn expect_changes(&mut self) {
        self.changes_expected = true;
    }

    /// The set's id.
    pub fn id(&self) -> BackupId {
        self.id
    }

    /// The resolved knobs.
    pub fn tuning(&self) -> Tuning {
        self.tuning
    }

    fn check(&self) -> Result<()> {
        if self.shared.is_cancelled() {
            return Err(self.shared.take_error().unwrap_or_else(|| Error::new(ErrorKind::Cancelled, "backup cancelled")));
        }
        Ok(())
    }

    /// Add a listed tree under a new root and read every file in it, one reader per device (or the
    /// configured number). Returns when every file has been read and handed to the compressors.
    ///
    /// # Errors
    /// The first error of any thread.
    pub fn add_tree(&mut self, root: Root, listed: Vec<Listed>) -> Result<()> {
        let id = self.add_root(root);
        self.read_listed(vec![(id, listed, None)])
    }

    /// Register a root (a tree the backup holds) and return its id.
    pub fn add_root(&mut self, root: Root) -> u16 {
        self.roots.push(root);
        (self.roots.len() - 1) as u16
    }

    /// Read listed entries into their roots, all batches at once: by default one reader per root
    /// and device (SQL Server's reader per volume; a database's tablespaces each get their own), or
    /// the configured number of readers over everything. A batch's `check`, if any, looks at the
    /// chunks of the files it wants. Returns when every file has been read and handed on.
    ///
    /// # Errors
    /// The first error of any thread.
    pub fn read_listed(&mut self, batches: Vec<Batch>) -> Result<()> {
        self.check()?;
        let mut work = Vec::new();
        for (root_id, listed, check) in batches {
            if root_id as usize >= self.roots.len() {
                return Err(Error::invalid(format!("internal: root {root_id} was never added")));
            }
            for mut l in listed {
                l.entry.root = root_id;
                let file_id = u32::try_from(self.entries.len()).map_err(|_| Error::invalid("more than 4 billion entries"))?;
                if l.entry.kind == EntryKind::File && l.nlink > 1 {
                    // Another name of a file already listed: its bytes are stored once.
                    if let Some(&first) = self.first_names.get(&(l.dev, l.ino)) {
                        l.entry.kind = EntryKind::Hardlink;
                        l.entry.link = Some(first);
                        l.entry.size = 0;
                    } else {
                        self.first_names.insert((l.dev, l.ino), file_id);
                    }
                }
                if l.entry.kind == EntryKind::File {
                    let ctx = check.as_ref().filter(|c| c.wants(root_id, &l.entry.path)).map(|c| {
                        Arc::new(CheckCtx { check: c.clone(), root: root_id, rel: l.entry.path.clone(), abs: l.abs.clone() })
                    });
                    work.push(Work { file_id, path: l.abs.clone(), dev: (root_id, l.dev), size: l.entry.size, check: ctx });
                }
                self.entries.push(l.entry);
            }
        }
        let total: u64 = work.iter().map(|w| w.size).sum();
        self.shared.progress.begin("backup", total);
        // Small files are packed, and read by several threads even on one device: for them the
        // time goes to opening and stat'ing, not to the disk.
        let (small, large): (Vec<Work>, Vec<Work>) = work.into_iter().partition(|w| w.size < PACK_LIMIT);
        let mut groups: Vec<(bool, Vec<Work>)> = group_for_readers(large, self.opts.readers).into_iter().map(|g| (false, g)).collect();
        let small_readers = self.opts.readers.unwrap_or_else(|| available_cores().max(self.tuning.readers)).max(1);
        let per = small.len().div_ceil(small_readers).max(1);
        let mut small = small.into_iter();
        loop {
            let slice: Vec<Work> = small.by_ref().take(per).collect();
            if slice.is_empty() {
                break;
            }
            groups.push((true, slice));
        }
        let job_tx = self.job_tx.as_ref().expect("session open");
        let outcomes: Vec<ReadOutcome> = thread::scope(|s| {
            let handles: Vec<_> = groups
                .iter()
                .map(|(packed, g)| {
                    let (tx, shared, pool) = (job_tx.clone(), &self.shared, &self.pool);
                    let ts = self.tuning.transfer_size;
                    let packed = *packed;
                    s.spawn(move || if packed { read_small(g, ts, &tx, shared, pool) } else { read_files(g, ts, &tx, shared, pool) })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| {
                    h.join().unwrap_or_else(|_| {
                        self.shared.fail(Error::new(ErrorKind::Io, "a reader thread panicked"));
                        Vec::new()
                    })
                })
                .collect()
        });
        for o in outcomes {
            let e = &mut self.entries[o.file_id as usize];
            e.size = o.size;
            e.vanished = o.vanished;
            if self.changes_expected && (o.vanished || o.changed) {
                let root = &self.roots[e.root as usize].name;
                let shown = if root.is_empty() { e.path.clone() } else { format!("{root}/{}", e.path) };
                if o.vanished { &mut self.vanished_files } else { &mut self.changed_files }.push(shown);
            } else {
                self.warnings.extend(o.warning);
            }
        }
        // A hard link whose file vanished before it was read has nothing to name.
        for i in 0..self.entries.len() {
            if let (EntryKind::Hardlink, Some(first)) = (self.entries[i].kind, self.entries[i].link) {
                if self.entries.get(first as usize).is_some_and(|f| f.vanished) {
                    self.entries[i].vanished = true;
                }
            }
        }
        self.check()
    }

    /// Add a file whose content is in memory (a database's backup_label, say) under `root`.
    ///
    /// # Errors
    /// The first error of any thread.
    pub fn add_bytes(&mut self, root: u16, path: &str, data: &[u8], mode: u32) -> Result<()> {
        self.check()?;
        let file_id = self.entries.len() as u32;
        let mtime_ns = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0);
        // An in-memory file belongs to whoever owns its root (a data directory's owner, say); with
        // no root entry, to us. SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = self
            .entries
            .iter()
            .find(|e| e.root == root && e.path.is_empty())
            .map(|e| (e.uid, e.gid))
            .unwrap_or_else(|| unsafe { (libc::getuid(), libc::getgid()) });
        self.entries.push(Entry {
            root,
            path: path.to_string(),
            kind: EntryKind::File,
            mode,
            mtime_ns,
            uid,
            gid,
            size: data.len() as u64,
            crc32c: None,
            target: None,
            vanished: false,
            ..Default::default()
        });
        let tx = self.job_tx.as_ref().expect("session open");
        for (i, chunk) in data.chunks(self.tuning.transfer_size).enumerate() {
            let Some(mut buf) = self.pool.take(&self.shared) else { break };
            buf[..chunk.len()].copy_from_slice(chunk);
            let job = Job { file_id, offset: (i * self.tuning.transfer_size) as u64, len: chunk.len(), buf: Some(buf), check: None, members: Vec::new() };
            if tx.send(job).is_err() {
                break;
            }
            self.shared.count(chunk.len() as u64);
        }
        self.check()
    }

    /// Drain the pipeline, write every stripe's index, manifest and trailer, make them durable and
    /// publish them. `source` is stored in the manifest as facts about the source.
    ///
    /// # Errors
    /// The first error of any thread, or of writing footers; every stripe is then removed.
    pub fn finish(self, source: serde_json::Value) -> Result<BackupReport> {
        self.finish_with(|_| Ok(source))
    }

    /// [`Backup::finish`], letting `decide` see the findings of every [`ChunkCheck`] once all chunks
    /// are through, before anything is published: it returns the source facts for the manifest, or
    /// an error that removes every stripe.
    ///
    /// # Errors
    /// As [`Backup::finish`], or `decide`'s error.
    pub fn finish_with(mut self, decide: impl FnOnce(&[String]) -> Result<serde_json::Value>) -> Result<BackupReport> {
        self.shared.progress.end();
        self.job_tx = None;
        let mut stats = CompressStats::default();
        for h in self.compressors.drain(..) {
            match h.join() {
                Ok(s) => {
                    stats.zero += s.zero;
                    stats.raw += s.raw;
                }
                Err(_) => self.shared.fail(Error::new(ErrorKind::Io, "a compressor thread panicked")),
            }
        }
        let outs: Vec<Option<WriterOut>> = self.writers.drain(..).map(|h| h.join().unwrap_or(None)).collect();
        if let Some(e) = self.shared.take_error() {
            return Err(e);
        }
        if self.shared.is_cancelled() {
            return Err(Error::new(ErrorKind::Cancelled, "backup cancelled"));
        }
        let mut outs: Vec<WriterOut> = outs.into_iter().collect::<Option<_>>().ok_or_else(|| {
            Error::new(ErrorKind::Io, "a stripe writer stopped without an error (internal)")
        })?;
        let findings = std::mem::take(&mut *self.shared.findings.lock().unwrap_or_else(|p| p.into_inner()));
        if !self.changed_files.is_empty() || !self.vanished_files.is_empty() {
            self.warnings.push(format!(
                "{} file{} changed and {} vanished while being read, as they do in a running database; WAL replay makes them consistent (listed in --json and the manifest)",
                self.changed_files.len(),
                if self.changed_files.len() == 1 { "" } else { "s" },
                self.vanished_files.len()
            ));
        }
        // On an error here the sinks are dropped unpublished, which removes them.
        let source = decide(&findings)?;

        self.fill_checksums(&outs)?;
        let manifest = Manifest {
            format_version: FORMAT_VERSION,
            backup_id: self.id.to_hex(),
            label: self.opts.label.clone(),
            tool: format!("sheaf {}", env!("CARGO_PKG_VERSION")),
            started_unix_ms: self.started_unix_ms,
            finished_unix_ms: unix_ms(SystemTime::now()),
            roots: std::mem::take(&mut self.roots),
            stripes: self
                .opts
                .targets
                .iter()
                .map(|t| StripeRef { name: t.file_name(), path: t.display() })
                .collect(),
            options: OptionsUsed {
                compression: self.opts.codec.to_string(),
                codec: self.opts.codec.kind.name().into(),
                level: self.opts.codec.level,
                transfer_size: self.tuning.transfer_size as u64,
                buffer_count: self.tuning.buffer_count as u64,
                readers: self.tuning.readers as u64,
                threads: self.tuning.threads as u64,
            },
            entries: std::mem::take(&mut self.entries),
            bytes_read: self.shared.bytes.load(std::sync::atomic::Ordering::Relaxed),
            warnings: std::mem::take(&mut self.warnings),
            check_failures: findings.clone(),
            changed_files: std::mem::take(&mut self.changed_files),
            vanished_files: std::mem::take(&mut self.vanished_files),
            source,
        };
        let mut stored = manifest.to_stored_bytes()?;
        if let Some(c) = &self.cipher {
            // Sealed once: every stripe carries the same bytes, as unencrypted sets do.
            stored = c.seal_region(crate::crypto::NONCE_MANIFEST, 0, &stored);
        }
        let stripe_count = outs.len() as u16;

        // Footers in parallel: each stripe's fsync is independent.
        let results: Vec<Result<()>> = thread::scope(|s| {
            let hs: Vec<_> = outs
                .iter_mut()
                .enumerate()
                .map(|(k, out)| {
                    let (stored, cipher) = (&stored, self.cipher.as_deref());
                    let id = self.id;
                    s.spawn(move || write_footer(out, k as u16, stripe_count, id, stored, cipher))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(Error::new(ErrorKind::Io, "footer writer panicked")))).collect()
        });
        if let Some(e) = results.into_iter().find_map(Result::err) {
            outs.iter_mut().for_each(|o| o.sink.discard());
            return Err(e);
        }
        for k in 0..outs.len() {
            if let Err(e) = outs[k].sink.publish() {
                outs.iter_mut().for_each(|o| o.sink.discard());
                return Err(e);
            }
        }
        let frames: u64 = outs.iter().map(|o| o.frames).sum();
        Ok(BackupReport {
            backup_id: self.id.to_hex(),
            label: manifest.label.clone(),
            bytes_read: manifest.bytes_read,
            bytes_written: outs.iter().map(|o| o.sink.written()).sum(),
            seconds: self.started.elapsed().as_secs_f64(),
            stripes: outs.len(),
            encryption: if self.cipher.is_some() { "aes-256-gcm" } else { "none" }.into(),
            targets: self.opts.targets.iter().map(Location::display).collect(),
            codec: self.opts.codec.kind.name().into(),
            compression: self.opts.codec.to_string(),
            level: self.opts.codec.level,
            transfer_size: self.tuning.transfer_size as u64,
            buffer_count: self.tuning.buffer_count,
            readers: self.tuning.readers,
            threads: self.tuning.threads,
            buffer_len: self.tuning.buffer_len as u64,
            target_memory_bytes: self.tuning.target_memory_bytes,
            memory_budget_bytes: self.tuning.memory_budget_bytes,
            files: manifest.file_count(),
            entries: manifest.entries.len(),
            frames,
            zero_chunks: stats.zero,
            raw_chunks: stats.raw,
            warnings: manifest.warnings,
            changed_files: manifest.changed_files,
            vanished_files: manifest.vanished_files,
            check_failures: findings,
            auto_levels: self.auto.as_ref().map(|a| a.levels()),
        })
    }

    /// Whole-file crc32c from the chunks' crcs, checking that the chunks tile each file exactly.
    fn fill_checksums(&mut self, outs: &[WriterOut]) -> Result<()> {
        let chunks = outs
            .iter()
            .enumerate()
            .flat_map(|(k, o)| o.index.iter().map(move |e| ChunkRef { file_id: e.file_id, offset: e.offset, len: e.raw_len, crc: e.raw_crc, stripe: k }))
            .collect();
        let sums = file_checksums(&self.entries, chunks)
            .map_err(|f| Error::new(ErrorKind::Io, format!("internal: the chunks written do not tile the files: {f:?}")))?;
        for (entry, sum) in self.entries.iter_mut().zip(sums) {
            entry.crc32c = sum;
        }
        Ok(())
    }
}

impl Drop for Backup {
    /// An unfinished session cancels its threads; their sinks remove what they wrote.
    fn drop(&mut self) {
        if self.compressors.is_empty() && self.writers.is_empty() {
            return;
        }
        self.shared.cancel();
        self.job_tx = None;
        for h in self.compressors.drain(..) {
            let _ = h.join();
        }
        for h in self.writers.drain(..) {
            let _ = h.join();
        }
    }
}

fn write_footer(out: &mut WriterOut, k: u16, n: u16, id: BackupId, manifest: &[u8], cipher: Option<&crate::crypto::Cipher>) -> Result<()> {
    let mut index = Vec::with_capacity(out.index.len() * crate::format::INDEX_ENTRY_LEN);
    for e in &out.index {
        e.encode_into(&mut index);
    }
    if let Some(c) = cipher {
        // The index holds every chunk's raw checksum, a fingerprint of the plaintext.
        index = c.seal_region(crate::crypto::NONCE_INDEX, u64::from(k), &index);
    }
    let trailer = Trailer {
        index_offset: out.pos,
        index_len: index.len() as u64,
        manifest_offset: out.pos + index.len() as u64,
        manifest_len: manifest.len() as u64,
        frame_count: out.index.len() as u64,
        index_crc: crc32c::crc32c(&index),
        manifest_crc: crc32c::crc32c(manifest),
        stripe_index: k,
        stripe_count: n,
        backup_id: id,
    };
    out.sink.write_all(&index)?;
    out.sink.write_all(manifest)?;
    out.sink.write_all(&trailer.encode())?;
    out.sink.sync()
}

/// A file to read.
struct Work {
    file_id: u32,
    path: PathBuf,
    /// Root and device: the unit that gets its own reader by default.
    dev: (u16, u64),
    size: u64,
    check: Option<Arc<CheckCtx>>,
}

/// Split files among readers: by root and device by default (SQL Server's reader per volume), or into
/// `readers` groups of about equal bytes.
fn group_for_readers(work: Vec<Work>, readers: Option<usize>) -> Vec<Vec<Work>> {
    match readers {
        None => {
            let mut by_dev: std::collections::BTreeMap<(u16, u64), Vec<Work>> = Default::default();
            for w in work {
                by_dev.entry(w.dev).or_default().push(w);
            }
            by_dev.into_values().collect()
        }
        Some(n) => {
            let mut groups: Vec<(u64, Vec<Work>)> = (0..n).map(|_| (0, Vec::new())).collect();
            let mut sorted = work;
            sorted.sort_by_key(|w| std::cmp::Reverse(w.size));
            for w in sorted {
                let g = groups.iter_mut().min_by_key(|g| g.0).expect("n >= 1");
                g.0 += w.size.max(1);
                g.1.push(w);
            }
            groups.into_iter().map(|g| g.1).filter(|g| !g.is_empty()).collect()
        }
    }
}

#[derive(Default)]
struct ReadOutcome {
    file_id: u32,
    size: u64,
    vanished: bool,
    /// It changed (size or mtime) or shrank while read.
    changed: bool,
    warning: Option<String>,
}

fn read_files(files: &[Work], ts: usize, tx: &Sender<Job>, shared: &Shared, pool: &Arc<Pool>) -> Vec<ReadOutcome> {
    let mut out = Vec::with_capacity(files.len());
    for w in files {
        if shared.is_cancelled() {
            break;
        }
        match read_one(w, ts, tx, shared, pool) {
            Ok(o) => out.push(o),
            Err(e) => {
                shared.fail(e);
                break;
            }
        }
    }
    out
}

/// Open a listed file for reading and stat it, or say what happened to it instead.
fn open_source(w: &Work) -> Result<std::result::Result<(File, std::fs::Metadata), ReadOutcome>> {
    let (file_id, path) = (w.file_id, w.path.as_path());
    // No following a link swapped in since listing, no hanging on a FIFO.
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let file = match opened {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Err(ReadOutcome {
                file_id,
                vanished: true,
                warning: Some(format!("{} vanished before it was read; it is not in the backup", path.display())),
                ..Default::default()
            }))
        }
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(Error::new(
                ErrorKind::Source,
                format!("{} became a symbolic link while the backup ran", path.display()),
            ))
        }
        Err(e) => return Err(io_at(ErrorKind::Source, "cannot read source file", path, e)),
    };
    let before = file.metadata().map_err(|e| io_at(ErrorKind::Source, "cannot stat source file", path, e))?;
    if !before.file_type().is_file() {
        return Err(Error::new(
            ErrorKind::Source,
            format!("{} is no longer a regular file (it changed while the backup ran)", path.display()),
        ));
    }
    Ok(Ok((file, before)))
}

/// What reading a file came to, from its stat at open and the bytes read: changed (size or mtime)
/// or shrank while read, with a warning saying so.
fn outcome(w: &Work, file: &File, before: &std::fs::Metadata, read: u64, shrank: bool) -> Result<ReadOutcome> {
    let after = file.metadata().map_err(|e| io_at(ErrorKind::Source, "cannot stat source file", &w.path, e))?;
    let changed = after.len() != before.len() || after.mtime() != before.mtime() || after.mtime_nsec() != before.mtime_nsec();
    let warning = (changed || shrank).then(|| {
        format!(
            "{} changed while being read (size {} at open, {} after; {} bytes backed up)",
            w.path.display(),
            before.len(),
            after.len(),
            read
        )
    });
    Ok(ReadOutcome { file_id: w.file_id, size: read, vanished: false, changed: changed || shrank, warning })
}

/// `pread` until `buf` is full or the file ends.
fn read_full_at(f: &File, buf: &mut [u8], mut offset: u64) -> std::io::Result<usize> {
    use std::os::unix::fs::FileExt;
    let mut got = 0;
    while got < buf.len() {
        match f.read_at(&mut buf[got..], offset) {
            Ok(0) => break,
            Ok(n) => {
                got += n;
                offset += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// `lseek(SEEK_DATA or SEEK_HOLE)` from `offset`: `Ok(None)` when no data follows (ENXIO);
/// `Err` when the filesystem cannot say (then the file is read as all data).
fn seek(f: &File, offset: u64, whence: libc::c_int) -> std::result::Result<Option<u64>, ()> {
    use std::os::fd::AsRawFd;
    // SAFETY: lseek on a descriptor we own.
    let r = unsafe { libc::lseek(f.as_raw_fd(), offset as libc::off_t, whence) };
    if r >= 0 {
        return Ok(Some(r as u64));
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ENXIO) => Ok(None),
        _ => Err(()),
    }
}

fn read_one(w: &Work, ts: usize, tx: &Sender<Job>, shared: &Shared, pool: &Arc<Pool>) -> Result<ReadOutcome> {
    let (file_id, path) = (w.file_id, w.path.as_path());
    let (file, before) = match open_source(w)? {
        Ok(x) => x,
        Err(gone) => return Ok(gone),
    };
    // The size at open is what we copy: a file that grows meanwhile is reported, not chased.
    let size = before.len();
    // SAFETY: advisory only; the fd is valid.
    unsafe { libc::posix_fadvise(std::os::fd::AsRawFd::as_raw_fd(&file), 0, 0, libc::POSIX_FADV_SEQUENTIAL) };
    let stopped = |offset| Ok(ReadOutcome { file_id, size: offset, ..Default::default() });
    let send = |job: Job| {
        let ok = tx.send(job).is_ok();
        if !ok {
            shared.fail(Error::new(ErrorKind::Cancelled, "the compressors stopped before the source was read"));
        }
        ok
    };
    let mut offset = 0u64;
    let mut shrank = false;
    // Sparse files are read by their data extents; holes become zero frames without a read.
    let mut sparse = true;
    'file: while offset < size {
        let mut end = size;
        if sparse {
            match seek(&file, offset, libc::SEEK_DATA) {
                Ok(data) => {
                    let data = data.unwrap_or(size).min(size);
                    while offset < data {
                        if shared.is_cancelled() {
                            return stopped(offset);
                        }
                        let len = (data - offset).min(MAX_ZERO_FRAME as u64);
                        if !send(Job { file_id, offset, len: len as usize, buf: None, check: None, members: Vec::new() }) {
                            break 'file;
                        }
                        shared.count(len);
                        offset += len;
                    }
                    if offset >= size {
                        break;
                    }
                    end = seek(&file, offset, libc::SEEK_HOLE).ok().flatten().unwrap_or(size).clamp(offset, size);
                    if end == offset {
                        // Data and hole at once: the file is changing under us. Read a chunk.
                        end = size.min(offset + ts as u64);
                    }
                }
                Err(()) => sparse = false,
            }
        }
        while offset < end {
            if shared.is_cancelled() {
                return stopped(offset);
            }
            let Some(mut buf) = pool.take(shared) else { return stopped(offset) };
            let want = (end - offset).min(ts as u64) as usize;
            let got = read_full_at(&file, &mut buf[..want], offset).map_err(|e| io_at(ErrorKind::Source, "cannot read source file", path, e))?;
            if got == 0 {
                shrank = true;
                break 'file;
            }
            if !send(Job { file_id, offset, len: got, buf: Some(buf), check: w.check.clone(), members: Vec::new() }) {
                break 'file;
            }
            shared.count(got as u64);
            offset += got as u64;
            if got < want {
                shrank = true;
                break 'file;
            }
        }
    }
    outcome(w, &file, &before, offset, shrank)
}

/// Read small files into shared chunks: each file's bytes follow the previous file's in one pool
/// buffer, and a full buffer goes to the compressors as one packed chunk. A file that has grown
/// past [`PACK_LIMIT`] since listing is read on its own.
fn read_small(files: &[Work], ts: usize, tx: &Sender<Job>, shared: &Shared, pool: &Arc<Pool>) -> Vec<ReadOutcome> {
    let mut out = Vec::with_capacity(files.len());
    let mut pack: Option<(PoolBuf, Vec<Member>, usize)> = None;
    let flush = |pack: &mut Option<(PoolBuf, Vec<Member>, usize)>| -> bool {
        let Some((buf, members, used)) = pack.take() else { return true };
        if members.is_empty() {
            return true;
        }
        let job = Job { file_id: members[0].file_id, offset: 0, len: used, buf: Some(buf), check: None, members };
        if tx.send(job).is_err() {
            shared.fail(Error::new(ErrorKind::Cancelled, "the compressors stopped before the source was read"));
            return false;
        }
        true
    };
    for w in files {
        if shared.is_cancelled() {
            break;
        }
        let r = (|| -> Result<Option<ReadOutcome>> {
            let (file, before) = match open_source(w)? {
                Ok(x) => x,
                Err(gone) => return Ok(Some(gone)),
            };
            let size = before.len();
            if size >= PACK_LIMIT {
                // Grown since listing: read on its own. The pack goes first, so that this thread
                // never holds a buffer while it waits for another (a pool of one would deadlock).
                drop(file);
                if !flush(&mut pack) {
                    return Ok(None);
                }
                return read_one(w, ts, tx, shared, pool).map(Some);
            }
            if size == 0 {
                return outcome(w, &file, &before, 0, false).map(Some);
            }
            let size = size as usize;
            if pack.as_ref().is_some_and(|p| p.2 + size > ts) && !flush(&mut pack) {
                return Ok(None);
            }
            if pack.is_none() {
                let Some(buf) = pool.take(shared) else { return Ok(None) };
                pack = Some((buf, Vec::new(), 0));
            }
            let (buf, members, used) = pack.as_mut().expect("just made");
            let got = read_full_at(&file, &mut buf[*used..*used + size], 0)
                .map_err(|e| io_at(ErrorKind::Source, "cannot read source file", &w.path, e))?;
            if got > 0 {
                members.push(Member { file_id: w.file_id, at: *used as u32, len: got as u32, check: w.check.clone() });
                *used += got;
                shared.count(got as u64);
            }
            outcome(w, &file, &before, got as u64, got < size).map(Some)
        })();
        match r {
            Ok(Some(o)) => out.push(o),
            Ok(None) => break,
            Err(e) => {
                shared.fail(e);
                break;
            }
        }
    }
    if !shared.is_cancelled() {
        flush(&mut pack);
    }
    out
}

fn run_check(c: &CheckCtx, offset: u64, raw: &[u8], shared: &Shared) {
    let findings = c.check.check(c.root, &c.rel, &c.abs, offset, raw);
    if findings.is_empty() {
        return;
    }
    let mut all = shared.findings.lock().unwrap_or_else(|p| p.into_inner());
    for f in findings {
        // Keep the record bounded; the count past the cap is still reported.
        if all.len() < MAX_FINDINGS {
            all.push(f);
        } else if all.len() == MAX_FINDINGS {
            all.push("... and more findings past the first 1000".into());
        }
    }
}

/// `--compression auto`: the zstd level, steered chunk by chunk from the pipeline's own pressure.
/// Over windows of at least [`AUTO_SETTLE`] it watches two things: how much of their time the
/// compressors spent waiting for a chunk, and how often a frame was waiting for the writers.
/// Compressors idle while frames wait: the output (a slow target, `--max-rate`) holds the pipeline
/// up and the compressors have time to spare, so a level up costs nothing. Compressors hardly ever
/// idle: the CPU is the bottleneck, so a level down (to zstd:low at the least). Compressors idle
/// with nothing waiting for the writers: the reader is the bottleneck, and the level stays. One
/// step per window at most, so each change shows before the next. (Frames waiting alone say too
/// little: on a machine whose cores are all compressing, the writer thread waits for a core too.)
pub(crate) struct AutoLevel {
    step: AtomicUsize,
    /// Chunks compressed at each step.
    chunks: Vec<AtomicU64>,
    threads: u64,
    /// The window: when it started (ns after `epoch`), the compressors' waiting time in it, and
    /// the looks at the writers' queue and how many found a frame waiting. Atomics, so that a
    /// chunk costs no lock; the compressor that closes a window claims it with one exchange.
    epoch: Instant,
    started_ns: AtomicU64,
    idle_ns: AtomicU64,
    out_busy: AtomicU64,
    samples: AtomicU64,
}

/// The levels `auto` moves over: zstd low (1) to past high (7).
pub const AUTO_LEVELS: [i32; 9] = [1, 2, 3, 4, 5, 6, 7, 9, 12];
/// Least time over which the pipeline is watched before a level change.
pub const AUTO_SETTLE: std::time::Duration = std::time::Duration::from_millis(100);

impl AutoLevel {
    pub(crate) fn new(threads: usize) -> AutoLevel {
        AutoLevel {
            step: Default::default(),
            chunks: AUTO_LEVELS.iter().map(|_| Default::default()).collect(),
            threads: threads.max(1) as u64,
            epoch: Instant::now(),
            started_ns: Default::default(),
            idle_ns: Default::default(),
            out_busy: Default::default(),
            samples: Default::default(),
        }
    }

    /// The level for the next chunk, from a compressor that waited `idle` for it and sees
    /// `waiting_out` frames queued for the writers.
    pub(crate) fn next(&self, idle: std::time::Duration, waiting_out: usize) -> i32 {
        self.idle_ns.fetch_add(idle.as_nanos() as u64, Relaxed);
        self.out_busy.fetch_add(u64::from(waiting_out > 0), Relaxed);
        let samples = self.samples.fetch_add(1, Relaxed) + 1;
        let now = self.epoch.elapsed().as_nanos() as u64;
        let started = self.started_ns.load(Relaxed);
        let span = now.saturating_sub(started);
        let mut step = self.step.load(Relaxed);
        if span >= AUTO_SETTLE.as_nanos() as u64 && samples >= 4 && self.started_ns.compare_exchange(started, now, Relaxed, Relaxed).is_ok() {
            let (idle, busy, samples) = (self.idle_ns.swap(0, Relaxed), self.out_busy.swap(0, Relaxed), self.samples.swap(0, Relaxed));
            // Idle share of the compressors' time; frames waiting at half the looks or more.
            let idle_share = idle as f64 / (span as f64 * self.threads as f64);
            let output_bound = busy * 2 >= samples;
            let want = if idle_share >= 0.15 && output_bound {
                (step + 1).min(AUTO_LEVELS.len() - 1)
            } else if idle_share < 0.05 {
                step.saturating_sub(1)
            } else {
                step
            };
            if want != step {
                step = want;
                self.step.store(step, Relaxed);
            }
        }
        self.chunks[step].fetch_add(1, Relaxed);
        AUTO_LEVELS[step]
    }

    /// Chunks compressed at each level used.
    pub(crate) fn levels(&self) -> std::collections::BTreeMap<i32, u64> {
        AUTO_LEVELS
            .iter()
            .zip(&self.chunks)
            .map(|(&l, n)| (l, n.load(Relaxed)))
            .filter(|&(_, n)| n > 0)
            .collect()
    }
}

fn compress_loop(
    spec: CodecSpec,
    size: usize,
    seal: Option<Sealing>,
    auto: Option<&AutoLevel>,
    rx: &Receiver<Job>,
    tx: &Sender<Frame>,
    shared: &Shared,
) -> CompressStats {
    let mut stats = CompressStats::default();
    let mut level = spec.level;
    let mut encoder = match FrameEncoder::new(spec, size) {
        Ok(e) => e.sealed(seal, size),
        Err(e) => {
            shared.fail(e);
            return stats;
        }
    };
    loop {
        // How long this compressor waits for a chunk: `auto`'s measure of spare time.
        let waited = Instant::now();
        let Ok(job) = rx.recv() else { break };
        let idle = waited.elapsed();
        if shared.is_cancelled() {
            continue;
        }
        let Some(buf) = job.buf else {
            stats.zero += 1;
            let header = FrameEncoder::hole(job.file_id, job.offset, job.len as u32);
            if tx.send(Frame { header, buf: None, parts: Vec::new(), raw_crc: header.raw_crc }).is_err() {
                break;
            }
            continue;
        };
        let raw = &buf[..job.len];
        if let Some(c) = &job.check {
            run_check(c, job.offset, raw, shared);
        }
        let mut parts = Vec::with_capacity(job.members.len());
        let mut raw_crc = if job.members.is_empty() { crc32c::crc32c(raw) } else { 0 };
        for m in &job.members {
            let bytes = &raw[m.at as usize..(m.at + m.len) as usize];
            if let Some(c) = &m.check {
                run_check(c, 0, bytes, shared);
            }
            let crc = crc32c::crc32c(bytes);
            raw_crc = crate::crc::combine(raw_crc, crc, m.len.into());
            parts.push(Part { file_id: m.file_id, at: m.at, len: m.len, crc });
        }
        if let Some(auto) = auto {
            let want = auto.next(idle, tx.len());
            if want != level {
                if let Err(e) = encoder.set_level(want) {
                    shared.fail(e);
                    continue;
                }
                level = want;
            }
        }
        let flags = if parts.is_empty() { 0 } else { FLAG_PACKED };
        let encoded = encoder.encode_checked(job.file_id, job.offset, raw, raw_crc, flags);
        let frame = match encoded {
            Ok((header, Payload::Zero)) => {
                stats.zero += 1;
                Frame { header, buf: None, parts, raw_crc }
            }
            Ok((header, Payload::Raw)) => {
                stats.raw += u64::from(encoder.compresses());
                Frame { header, buf: Some(buf), parts, raw_crc }
            }
            Ok((header, Payload::Packed(_))) => {
                // Sealed frames are all "packed" into the encoder's output, stored raw or not.
                stats.raw += u64::from(encoder.compresses() && header.codec == crate::codec::CodecKind::None as u8);
                // The chunk's buffer becomes the encoder's output; the guard carries the payload on.
                let (mut payload, mut spare) = (buf, Vec::new());
                encoder.swap_output(&mut spare);
                payload.swap_vec(&mut spare);
                encoder.swap_output(&mut spare);
                Frame { header, buf: Some(payload), parts, raw_crc }
            }
            Err(e) => {
                shared.fail(e);
                continue;
            }
        };
        if tx.send(frame).is_err() {
            break;
        }
    }
    stats
}

fn write_loop(mut sink: Box<dyn StripeSink>, start: u64, rx: &Receiver<Frame>, shared: &Shared) -> Option<WriterOut> {
    let mut index = Vec::new();
    let mut pos = start;
    let mut frames = 0;
    for frame in rx {
        if shared.is_cancelled() {
            continue;
        }
        let h = frame.header;
        let mut result = sink.write_all(&h.encode());
        if let (Ok(()), Some(b)) = (&result, &frame.buf) {
            result = sink.write_all(&b[..h.stored_len as usize]);
        }
        let Frame { buf, parts, raw_crc, .. } = frame;
        drop(buf);
        if let Err(e) = result {
            shared.fail(e);
            continue;
        }
        if parts.is_empty() {
            index.push(IndexEntry {
                file_id: h.file_id,
                offset: h.offset,
                frame_pos: pos,
                raw_len: h.raw_len,
                stored_len: h.stored_len,
                raw_crc,
                frame_off: 0,
            });
        }
        for p in &parts {
            index.push(IndexEntry {
                file_id: p.file_id,
                offset: 0,
                frame_pos: pos,
                raw_len: p.len,
                stored_len: h.stored_len,
                raw_crc: p.crc,
                frame_off: p.at,
            });
        }
        pos += (FRAME_HEADER_LEN + h.stored_len as usize) as u64;
        frames += 1;
    }
    if shared.is_cancelled() {
        sink.discard();
        return None;
    }
    Some(WriterOut { sink, index, pos, frames })
}
