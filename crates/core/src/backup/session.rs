//! A backup session: [`Backup`] creates the stripes, starts the compressor and writer threads,
//! registers every entry, runs the readers over each batch, and at the end writes every stripe's
//! footer and publishes the set, or, dropped unfinished, removes what it wrote.
//!
//! Nothing kept per file stays in memory: entries go to a temporary file as they are registered,
//! what reading each file came to to another, each stripe's index and chunk list to more; the end
//! of the backup reads them back in file order to write the manifest's pages ([`crate::spill`]).
//! Files flow to the readers through bounded queues, so a listing that streams (a directory walked
//! as it is read) is never held whole either.

use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{bounded, Receiver, Sender};

use super::auto::AutoLevel;
use super::check::{Batch, CheckCtx, ChunkCheck};
use super::compress::{compress_loop, CompressStats, Frame};
use super::delta::{Changes, FileChanges, Lineage};
use super::job::{Job, Work};
use super::options::{stripe_bound, BackupOptions, Tuning};
use super::pack::{Feeder, Packer};
use super::park::Parked;
use super::read::{reader_loop, ReaderReport};
use super::resume::{Recorder, Resume, ATTEMPT_SHIFT};
use super::write::{write_loop, Kept, WriterOut};
use crate::error::{Error, ErrorKind, Result};
use crate::format::{BackupId, StripeHeader, FORMAT_VERSION, PACK_LIMIT};
use crate::frame::{FrameEncoder, Sealing};
use crate::manifest::{Delta, Entry, EntryKind, Root};
use crate::pipeline::{Pool, Progress, Shared};
use crate::source::{Files, Listed, LocalFiles};
use crate::spill::{EntrySpill, Outcomes};

mod finish;

/// A backup in progress. See the module documentation.
pub struct Backup {
    id: BackupId,
    opts: BackupOptions,
    tuning: Tuning,
    started: Instant,
    started_unix_ms: i64,
    roots: Vec<Root>,
    /// Every entry registered, in id order, on disk.
    entries: EntrySpill,
    /// What reading each file came to, by id, on disk.
    outcomes: Arc<Outcomes>,
    /// The owner of each root's own entry (for files added from memory).
    root_owners: std::collections::HashMap<u16, (u32, u32)>,
    /// Warnings gathered so far; sources may add their own.
    pub warnings: Vec<String>,
    /// Whether files changing and vanishing while read is normal (see [`Backup::expect_changes`]).
    changes_expected: bool,
    changed_files: Vec<String>,
    vanished_files: Vec<String>,
    /// The most reader threads that read files in one pass (the small files' pool and each
    /// device's reader): what the set records as its readers.
    readers_ran: usize,
    /// The first name of each multiply-linked file seen: (device, inode) to its entry position.
    first_names: std::collections::HashMap<(u64, u64), u32>,
    shared: Arc<Shared>,
    pool: Arc<Pool>,
    /// The set's data key, for its index and manifest (frames are sealed by the compressors).
    cipher: Option<Arc<crate::crypto::Cipher>>,
    /// `auto`'s level, shared by the compressors.
    auto: Option<Arc<AutoLevel>>,
    /// An incremental's or differential's place in its chain, and what it holds of each file.
    lineage: Option<Lineage>,
    changes: Option<Arc<dyn Changes>>,
    /// Where listed files are opened: this host, unless [`Backup::read_through`] says otherwise.
    files: Arc<dyn Files>,
    /// Packs the pieces of [`Backup::add_piece`].
    stream_feeder: Option<Feeder>,
    job_tx: Option<Sender<Job>>,
    compressors: Vec<JoinHandle<CompressStats>>,
    writers: Vec<JoinHandle<Option<WriterOut>>>,
    /// A resumable backup's journal ([`super::resume`]).
    recorder: Option<Recorder>,
    /// The attempts this one goes on from, and, per attempt, the id each of their files has now
    /// ([`crate::format::SUPERSEDED`] for one read again or gone).
    resume: Option<Arc<Resume>>,
    remap: Vec<Vec<u32>>,
    /// Files taken whole from earlier attempts, and their bytes.
    taken: (u64, u64),
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
        let now = SystemTime::now();
        let stripe_count = opts.targets.len();
        let resume = opts.resume.clone();
        let mut sinks = Vec::with_capacity(stripe_count);
        let (id, seal, recorder) = match &resume {
            Some(r) => {
                // The same set, its data key opened from the stripes' key block; this attempt's
                // frames sealed under nonces of its own.
                let cipher = match (&r.key_block, &opts.encryption) {
                    (Some(b), Some(e)) => Some(e.keys.open(b)?),
                    (None, None) => None,
                    _ => return Err(Error::invalid("internal: a resumed backup's encryption differs from its stripes'")),
                };
                let seal = cipher.map(|cipher| Sealing { cipher, counter: Arc::new(std::sync::atomic::AtomicU64::new(u64::from(r.attempt) << ATTEMPT_SHIFT)) });
                let kept = std::mem::take(&mut *r.stripes.lock().unwrap_or_else(|p| p.into_inner()));
                if kept.len() != stripe_count {
                    return Err(Error::invalid("internal: a resumption is for one backup, once"));
                }
                let journal = opts.journal.as_ref().ok_or_else(|| Error::invalid("internal: a resumed backup keeps a journal"))?;
                // Its head, where this attempt's frames begin, recorded before any stripe is cut. A
                // stripe that keeps nothing begins again with the header it had.
                let starts = kept.iter().map(|k| if k.keep == 0 { k.header.len() as u64 } else { k.keep }).collect();
                let headers: Vec<Vec<u8>> = kept.iter().map(|k| k.header.clone()).collect();
                let recorder = Recorder::begin(journal, r.attempt, r.backup_id, unix_ms(now), starts, &headers, &opts.settings())?;
                for k in kept {
                    let mut sink = k.unfinished.go_on(k.keep)?;
                    let start = if k.keep == 0 {
                        sink.write_all(&k.header)?;
                        k.header.len() as u64
                    } else {
                        k.keep
                    };
                    sinks.push((sink, start, k.entries));
                }
                (r.backup_id, seal, Some(recorder))
            }
            None => {
                let id = BackupId::random()?;
                // One data key for the whole set: its key block goes into every stripe's header.
                let (key_block, seal) = match &opts.encryption {
                    Some(e) => {
                        let (block, cipher) = e.keys.seal(e.kdf)?;
                        (Some(block), Some(Sealing::new(cipher)))
                    }
                    None => (None, None),
                };
                let mut headers = Vec::with_capacity(stripe_count);
                for (k, t) in opts.targets.iter().enumerate() {
                    let mut sink = if opts.journal.is_some() { t.create_resumable(opts.overwrite, stripe_bound(opts))? } else { t.create(opts.overwrite, stripe_bound(opts))? };
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
                    let bytes = header.encode();
                    sink.write_all(&bytes)?;
                    sinks.push((sink, bytes.len() as u64, Vec::new()));
                    headers.push(bytes);
                }
                let recorder = match &opts.journal {
                    Some(j) => Some(Recorder::begin(j, 0, id, unix_ms(now), sinks.iter().map(|s| s.1).collect(), &headers, &opts.settings())?),
                    None => None,
                };
                (id, seal, recorder)
            }
        };

        let shared = Shared::stoppable(progress, Some(opts.stop.clone()));
        // Each compressor that writes output keeps one buffer of the pool as its spare, taken here
        // before any reader runs; readers draw from the rest (`buffer_count - threads` of them).
        let encoders = (0..tuning.threads).map(|_| Ok(FrameEncoder::new(opts.codec)?.sealed(seal.clone()))).collect::<Result<Vec<_>>>()?;
        let spares = encoders.iter().filter(|e| e.writes_output()).count();
        let pool = Pool::new(tuning.buffer_count - tuning.threads + spares, tuning.buffer_len);
        let (job_tx, job_rx) = bounded::<Job>(tuning.buffer_count);
        let (frame_tx, frame_rx) = bounded::<Frame>(tuning.buffer_count);

        let mut compressors = Vec::with_capacity(tuning.threads);
        let auto = opts.codec.is_auto().then(|| Arc::new(AutoLevel::new(tuning.threads)));
        for encoder in encoders {
            let spare = if encoder.writes_output() { Some(pool.take(&shared).ok_or_else(|| Error::new(ErrorKind::Cancelled, "backup cancelled"))?) } else { None };
            let (rx, tx, shared, auto, level) = (job_rx.clone(), frame_tx.clone(), shared.clone(), auto.clone(), opts.codec.level);
            compressors.push(thread::spawn(move || compress_loop(encoder, level, spare, auto.as_deref(), &rx, &tx, &shared)));
        }
        drop(frame_tx);
        let writers = sinks
            .into_iter()
            .enumerate()
            .map(|(k, (sink, start, kept))| {
                let (rx, shared) = (frame_rx.clone(), shared.clone());
                let log = recorder.as_ref().map(|r| r.index_log(k));
                thread::spawn(move || write_loop(sink, k, Kept { start, entries: kept }, log, &rx, &shared))
            })
            .collect();
        let remap = resume.as_ref().map(|r| r.ids.iter().map(|&n| vec![crate::format::SUPERSEDED; n as usize]).collect()).unwrap_or_default();

        Ok(Backup {
            id,
            opts: opts.clone(),
            tuning,
            started: Instant::now(),
            started_unix_ms: unix_ms(now),
            roots: Vec::new(),
            entries: EntrySpill::new()?,
            outcomes: Arc::new(Outcomes::new()?),
            root_owners: Default::default(),
            warnings: Vec::new(),
            changes_expected: false,
            changed_files: Vec::new(),
            vanished_files: Vec::new(),
            readers_ran: 0,
            first_names: Default::default(),
            shared,
            pool,
            cipher: seal.as_ref().map(|s| s.cipher.clone()),
            auto,
            lineage: None,
            changes: None,
            files: Arc::new(LocalFiles),
            stream_feeder: None,
            job_tx: Some(job_tx),
            compressors,
            writers,
            recorder,
            resume,
            remap,
            taken: (0, 0),
        })
    }

    /// Open the listed files through `files` (another host's, through an agent) rather than
    /// this host's file systems.
    pub fn read_through(&mut self, files: Arc<dyn Files>) {
        self.files = files;
    }

    /// The source is live and its files changing and vanishing while read is normal (a running
    /// database, whose WAL makes them consistent): instead of a warning per file, one line says how
    /// many, and the manifest and report list them.
    pub fn expect_changes(&mut self) {
        self.changes_expected = true;
    }

    /// Make this set an incremental or differential one: `changes` says what it holds of each file
    /// read from now on (files it holds in part get a [`crate::manifest::Delta`]), `lineage` the
    /// sets it builds on, recorded in the manifest.
    pub fn incremental(&mut self, lineage: Lineage, changes: Arc<dyn Changes>) {
        self.lineage = Some(lineage);
        self.changes = Some(changes);
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
        // A file's second names (hard links) are not read again.
        let mut linked = std::collections::HashSet::new();
        let total = batches
            .iter()
            .flat_map(|b| b.1.iter())
            .filter(|l| l.entry.kind == EntryKind::File && (l.nlink <= 1 || (!self.first_names.contains_key(&(l.dev, l.ino)) && linked.insert((l.dev, l.ino)))))
            .map(|l| l.entry.size)
            .sum();
        self.shared.progress.begin("backup", total);
        let items = batches.into_iter().flat_map(|(root, listed, check)| listed.into_iter().map(move |l| Ok((root, l, check.clone()))));
        self.read_stream(items, false)
    }

    /// Add a tree under a new root and read its entries as they come from `listing` (a walk that
    /// streams: [`crate::source::Walk`]), so that neither the listing nor the entries are ever
    /// held whole: a million files cost no more memory than a thousand.
    ///
    /// # Errors
    /// The listing's first error, or the first error of any thread.
    pub fn add_tree_streamed(&mut self, root: Root, listing: impl Iterator<Item = Result<Listed>>) -> Result<()> {
        let id = self.add_root(root);
        self.read_streamed(listing.map(move |l| l.map(|l| (id, l, None))))
    }

    /// Read entries as they come from `items` (root, entry, the check its chunks get), a listing
    /// that streams: neither it nor the entries are ever held whole. The progress total grows as
    /// files come.
    ///
    /// # Errors
    /// The listing's first error, or the first error of any thread.
    pub fn read_streamed(&mut self, items: impl Iterator<Item = Result<(u16, Listed, Option<Arc<dyn ChunkCheck>>)>>) -> Result<()> {
        self.shared.progress.begin("backup", 0);
        self.read_stream(items, true)
    }

    /// Register each listed entry and hand each regular file to a reader as it comes: small files
    /// in batches to a pool of readers that pack them (for them the time goes to opening and
    /// stat'ing, so several threads read even one device), large ones to the reader of their
    /// root and device (or, with a set number of readers, to those readers together). Queues are
    /// bounded; what a full one cannot take waits aside, on disk past a few batches, so the
    /// listing never waits for the readers and every root's reader starts as soon as its first
    /// file is listed ([`Parked`]). `growing`: the
    /// progress total is not known yet, and each file adds its size.
    fn read_stream(&mut self, items: impl Iterator<Item = Result<(u16, Listed, Option<Arc<dyn ChunkCheck>>)>>, growing: bool) -> Result<()> {
        /// Small files handed to a reader at once: consecutive ids, so their outcomes are written
        /// together.
        const BATCH: usize = 256;
        self.check()?;
        let small_readers = self.opts.readers.unwrap_or_else(|| crate::host::available_cores().max(self.tuning.readers)).max(1);
        let job_tx = self.job_tx.clone().expect("session open");
        let (shared, pool, files, outcomes) = (self.shared.clone(), self.pool.clone(), self.files.clone(), self.outcomes.clone());
        let ts = self.tuning.transfer_size;
        let (set_readers, expected) = (self.opts.readers, self.changes_expected);
        let reports: Vec<ReaderReport> = thread::scope(|s| {
            let spawn = |rx: Receiver<Vec<Work>>| {
                let (tx, shared, pool, files, outcomes) = (job_tx.clone(), shared.clone(), pool.clone(), files.clone(), outcomes.clone());
                s.spawn(move || reader_loop(&rx, files.as_ref(), ts, &tx, &shared, &pool, &outcomes, expected))
            };
            let (small_tx, small_rx) = bounded::<Vec<Work>>(small_readers * 2);
            let mut handles: Vec<_> = (0..small_readers).map(|_| spawn(small_rx.clone())).collect();
            drop(small_rx);
            // Queue 0 takes small files; large ones get a queue per root and device, its reader
            // started when the first comes (with `--readers N`, one queue for N readers).
            let mut queues = vec![small_tx];
            let mut large: std::collections::HashMap<(u16, u64), usize> = Default::default();
            // Work whose queue is full waits aside (a few batches in memory, the rest on disk)
            // while the walk goes on: one device's full queue leaves no other reader idle.
            let suspects = self.recorder.as_ref().map(|r| r.suspects.clone());
            let mut parked = Parked::new(self.changes.clone(), self.roots.iter().map(|r| r.name.clone()).collect(), suspects);
            let sent = |r: Result<bool>| {
                r.unwrap_or_else(|e| {
                    shared.fail(e);
                    false
                })
            };
            let mut batch = Vec::with_capacity(BATCH);
            let mut going = true;
            for item in items {
                if shared.is_cancelled() {
                    break;
                }
                let work = match item.and_then(|(root, l, check)| self.register(root, l, check.as_ref())) {
                    Ok(Some(w)) => w,
                    Ok(None) => continue,
                    Err(e) => {
                        shared.fail(e);
                        break;
                    }
                };
                if growing {
                    shared.progress.more(work.size);
                }
                if work.size >= PACK_LIMIT {
                    let key = if set_readers.is_some() { (0, 0) } else { work.dev };
                    let q = *large.entry(key).or_insert_with(|| {
                        let (tx, rx) = bounded::<Vec<Work>>(4);
                        for _ in 0..set_readers.unwrap_or(1) {
                            handles.push(spawn(rx.clone()));
                        }
                        queues.push(tx);
                        queues.len() - 1
                    });
                    going = sent(parked.send(&queues, q, vec![work]));
                } else {
                    batch.push(work);
                    if batch.len() == BATCH {
                        going = sent(parked.send(&queues, 0, std::mem::replace(&mut batch, Vec::with_capacity(BATCH))));
                    }
                }
                if !going {
                    // A reader stopped: its error (or the cancel) is recorded.
                    break;
                }
            }
            // The listing is done: what is left of it recorded now, not once every file is read.
            if let Some(Err(e)) = self.recorder.as_mut().map(Recorder::flush) {
                shared.fail(e);
                going = false;
            }
            if going && !batch.is_empty() {
                going = sent(parked.send(&queues, 0, batch));
            }
            if going {
                sent(parked.drain(&queues));
            }
            drop(queues);
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        shared.fail(Error::new(ErrorKind::Io, "a reader thread panicked"));
                        ReaderReport::default()
                    })
                })
                .collect()
        });
        self.readers_ran = self.readers_ran.max(reports.iter().filter(|r| r.files > 0).count());
        for r in reports {
            self.warnings.extend(r.warnings);
        }
        if let Some(r) = &mut self.recorder {
            r.flush()?;
        }
        self.check()
    }

    /// Give a listed entry its id and record it; a regular file to read comes back as work.
    fn register(&mut self, root_id: u16, mut l: Listed, check: Option<&Arc<dyn ChunkCheck>>) -> Result<Option<Work>> {
        if root_id as usize >= self.roots.len() {
            return Err(Error::invalid(format!("internal: root {root_id} was never added")));
        }
        l.entry.root = root_id;
        let file_id = self.next_id()?;
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
        let mut work = None;
        let mut resumed_ranges = None;
        if l.entry.kind == EntryKind::File && self.changes.is_none() {
            let root = &self.roots[root_id as usize].name;
            // Held by an earlier attempt and unchanged since: taken, not read; held in part, only
            // the ranges it lacks are read.
            if let Some(t) = self.resume.as_ref().and_then(|r| r.take(root, &l.entry, l.ino)) {
                if let Some(slot) = self.remap.get_mut(t.attempt as usize).and_then(|m| m.get_mut(t.id as usize)) {
                    *slot = file_id;
                    let size = l.entry.size;
                    let lacking: u64 = t.missing.iter().map(|r| r.end.min(size) - r.start.min(size)).sum();
                    let held = l.entry.size - lacking.min(l.entry.size);
                    self.taken.0 += u64::from(t.missing.is_empty());
                    self.taken.1 += held;
                    self.shared.progress.advance(held);
                    if t.missing.is_empty() {
                        self.push_entry(&l.entry)?;
                        return Ok(None);
                    }
                    resumed_ranges = Some(FileChanges::Ranges(t.missing));
                }
            }
            if let Some(r) = &mut self.recorder {
                r.file(file_id, root, &l.entry, l.ino)?;
            }
        }
        if l.entry.kind == EntryKind::File {
            let suspects = self.recorder.as_ref().map(|r| (r.suspects.clone(), self.roots[root_id as usize].name.clone()));
            let ctx = check
                .filter(|c| c.wants(root_id, &l.entry.path))
                .map(|c| Arc::new(CheckCtx { check: c.clone(), root: root_id, rel: l.entry.path.clone(), abs: l.abs.clone(), suspects: suspects.clone() }));
            let changes = match self.changes.as_ref().map(|c| c.of(&self.roots[root_id as usize].name, &l.entry.path, l.entry.size)) {
                // A file an earlier attempt holds in part: the rest read, the file held whole.
                None => resumed_ranges,
                Some(FileChanges::Whole) => None,
                Some(c) => {
                    l.entry.delta = Some(Delta::default());
                    Some(c)
                }
            };
            let rel = matches!(changes, Some(FileChanges::Scan(_))).then(|| l.entry.path.clone());
            work = Some(Work { file_id, path: std::mem::take(&mut l.abs), dev: (root_id, l.dev), size: l.entry.size, check: ctx, changes, rel });
        }
        self.push_entry(&l.entry)?;
        Ok(work)
    }

    /// The readers to record: those that read files, or the tuning's when none did.
    fn readers(&self) -> usize {
        if self.readers_ran > 0 {
            self.readers_ran
        } else {
            self.tuning.readers
        }
    }

    /// The id the next entry gets.
    fn next_id(&self) -> Result<u32> {
        u32::try_from(self.entries.len()).map_err(|_| Error::invalid("more than 4 billion entries"))
    }

    /// Record an entry (under the next id).
    fn push_entry(&mut self, e: &Entry) -> Result<()> {
        if e.path.is_empty() {
            self.root_owners.insert(e.root, (e.uid, e.gid));
        }
        self.entries.push(e)
    }

    /// Take `roots` and `entries` (a backup's manifest: a chain's newest) as this backup's, whole
    /// files all (no delta); their bytes come through [`Backup::feeder`]s. For consolidation.
    pub(crate) fn adopt(&mut self, roots: Vec<Root>, entries: &[Entry]) -> Result<()> {
        self.roots = roots;
        for e in entries {
            self.push_entry(&Entry { delta: None, crc32c: None, ..e.clone() })?;
        }
        let total = entries.iter().filter(|e| e.kind == EntryKind::File && !e.vanished).map(|e| e.size).sum();
        self.shared.progress.begin("consolidate", total);
        Ok(())
    }

    /// The error that stopped the session, if one did (taken: [`Backup::finish`] will not see it).
    pub(crate) fn failure(&self) -> Option<Error> {
        self.shared.take_error()
    }

    /// A way into the compressors for chunks of the adopted entries, one per thread that feeds.
    pub(crate) fn feeder(&self) -> Feeder {
        let tx = self.job_tx.as_ref().expect("session open");
        Packer::new(self.tuning.transfer_size, tx, &self.shared, &self.pool).feeder()
    }

    /// Add an entry whose content (for a file) comes through [`Backup::add_piece`], in order, as a
    /// stream brings it (the tar members of PostgreSQL's BASE_BACKUP, say); returns its id.
    ///
    /// # Errors
    /// The list of entries cannot be written (a full `TMPDIR`).
    pub fn add_entry(&mut self, root: u16, mut entry: Entry) -> Result<u32> {
        entry.root = root;
        let id = self.next_id()?;
        self.push_entry(&entry)?;
        Ok(id)
    }

    /// Bytes of a file added with [`Backup::add_entry`], from `offset`: packed with others when
    /// smaller than a pack, else a chunk of its own (at most the transfer size).
    ///
    /// # Errors
    /// The first error of any thread.
    pub fn add_piece(&mut self, file_id: u32, offset: u64, data: &[u8]) -> Result<()> {
        if self.stream_feeder.is_none() {
            self.stream_feeder = Some(self.feeder());
        }
        let feeder = self.stream_feeder.as_mut().expect("just made");
        if !feeder.piece(file_id, offset, data.len(), Some(data)) {
            return self.check();
        }
        Ok(())
    }

    /// Send what [`Backup::add_piece`] still holds packed.
    ///
    /// # Errors
    /// The first error of any thread.
    pub fn end_pieces(&mut self) -> Result<()> {
        if let Some(mut f) = self.stream_feeder.take() {
            f.finish();
        }
        self.check()
    }

    /// Add a file whose content is in memory (a database's backup_label, say) under `root`.
    ///
    /// # Errors
    /// The first error of any thread.
    pub fn add_bytes(&mut self, root: u16, path: &str, data: &[u8], mode: u32) -> Result<()> {
        self.check()?;
        let file_id = self.next_id()?;
        let mtime_ns = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0);
        // An in-memory file belongs to whoever owns its root (a data directory's owner, say); with
        // no root entry, to us.
        let (uid, gid) = self.root_owners.get(&root).copied().unwrap_or_else(crate::host::real_ids);
        self.push_entry(&Entry {
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
        })?;
        let tx = self.job_tx.as_ref().expect("session open");
        for (i, chunk) in data.chunks(self.tuning.transfer_size).enumerate() {
            let Some(mut buf) = self.pool.take(&self.shared) else { break };
            buf[..chunk.len()].copy_from_slice(chunk);
            let job = Job { file_id, offset: (i * self.tuning.transfer_size) as u64, len: chunk.len(), buf: Some(buf), check: None, members: Vec::new(), stored: None };
            if tx.send(job).is_err() {
                break;
            }
            self.shared.count(chunk.len() as u64);
        }
        self.check()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::CodecSpec;
    use crate::pipeline::NoProgress;
    use crate::storage::{LocalOnly, Location};

    /// Every chunk buffer a backup allocates comes from its one pool: readers and compressors'
    /// spares together never exceed `buffer_count`, and a codec that writes no output (`none`)
    /// keeps no spares at all.
    #[test]
    fn buffers_stay_within_the_count_spares_included() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        std::fs::create_dir_all(&src).unwrap();
        for i in 0..4 {
            crate::datagen::write_file(&src.join(format!("f{i}")), 3 << 20, i, 0.5).unwrap();
        }
        for (codec, spares) in [("zstd:low", 2), ("none", 0)] {
            let mut opts = BackupOptions::new(vec![Location::parse("nul", &LocalOnly).unwrap()]);
            opts.codec = CodecSpec::parse(codec).unwrap();
            opts.transfer_size = 64 << 10;
            opts.threads = Some(2);
            opts.buffer_count = Some(5);
            let tuning = Tuning::resolve(&opts, 1).unwrap();
            let mut b = Backup::start(&opts, tuning, Arc::new(NoProgress)).unwrap();
            let pool = b.pool.clone();
            assert_eq!(pool.allocated(), spares, "{codec}: spares are taken before any reader runs");
            let listed = crate::source::list_tree(&src, 0, &mut Vec::new()).unwrap();
            b.add_tree(Root { name: String::new(), path: src.display().to_string() }, listed).unwrap();
            let r = b.finish(serde_json::json!({})).unwrap();
            assert_eq!(r.bytes_read, 12 << 20);
            // Readers had `buffer_count - threads` of them; the spares come on top.
            assert!(pool.allocated() <= tuning.buffer_count - tuning.threads + spares, "{codec}: {} buffers", pool.allocated());
            assert!(pool.allocated() > spares, "{codec}: the readers used the pool");
        }
    }

    /// A live source (files vanishing and changing is normal): files gone between listing and
    /// reading are summed up in one warning and listed by name, whether they came in a listing
    /// held whole or one that streams; the set restores without them.
    #[test]
    fn files_vanishing_under_a_live_source_are_summed_up_not_warned_one_by_one() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        std::fs::create_dir_all(src.join("db")).unwrap();
        for i in 0..20 {
            std::fs::write(src.join(format!("db/f{i:02}")), vec![i as u8; 100 + i]).unwrap();
        }
        for streamed in [false, true] {
            let stripe = d.path().join(format!("s{streamed}.sheaf"));
            let opts = BackupOptions::new(vec![Location::file(&stripe)]);
            let tuning = Tuning::resolve(&opts, 1).unwrap();
            let mut b = Backup::start(&opts, tuning, Arc::new(NoProgress)).unwrap();
            b.expect_changes();
            let root = Root { name: "main".into(), path: src.display().to_string() };
            let listed = crate::source::list_tree(&src, 0, &mut Vec::new()).unwrap();
            // Gone after the listing, before any read.
            let gone: Vec<_> = listed.iter().filter(|l| l.entry.path.ends_with('3')).map(|l| l.abs.clone()).collect();
            let renamed: Vec<_> = gone.iter().map(|p| p.with_extension("moved")).collect();
            for (p, to) in gone.iter().zip(&renamed) {
                std::fs::rename(p, to).unwrap();
            }
            if streamed {
                b.add_tree_streamed(root, listed.into_iter().map(Ok)).unwrap();
            } else {
                b.add_tree(root, listed).unwrap();
            }
            for (p, to) in gone.iter().zip(&renamed) {
                std::fs::rename(to, p).unwrap();
            }
            let r = b.finish(serde_json::json!({})).unwrap();
            assert_eq!(r.vanished_files, vec!["main/db/f03".to_string(), "main/db/f13".to_string()], "streamed: {streamed}");
            assert_eq!(r.warnings.len(), 1, "one line for all: {:?}", r.warnings);
            assert!(r.warnings[0].contains("0 files changed and 2 vanished"), "{:?}", r.warnings);
            let set = crate::set::BackupSet::open(&[Location::file(&stripe)], &LocalOnly).unwrap();
            let gone: Vec<&str> = set.manifest.entries.iter().filter(|e| e.vanished).map(|e| e.path.as_str()).collect();
            assert_eq!(gone, vec!["db/f03", "db/f13"]);
            assert_eq!(set.file_count(), 20);
        }
    }
}
