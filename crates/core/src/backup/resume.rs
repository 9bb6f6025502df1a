//! Resuming a full backup that stopped (killed, a power cut, a target gone away) from what it
//! stored, rather than from zero.
//!
//! While a resumable backup runs, it records its progress in a [`Journal`] (a repository keeps one
//! per backup, beside its stripes), attempt by attempt:
//!
//! ```text
//! AAAA/head               the attempt: set id, settings, where its frames begin in each stripe
//! AAAA/files-NNNNNN       files as listed before they were read: id, name, size, mtime, inode
//! AAAA/index-KK-NNNNNN    stripe KK's index entries of frames written (ids are the attempt's),
//!                         every 64 MiB stored or every second
//! AAAA/suspect-NNNNNN     a file a source's check found fault with (never taken again)
//! AAAA/footers            the footers are being written (the set's index and manifest nonces
//!                         are spent: nothing may go on from here)
//! ```
//!
//! Its stripes are kept unfinished when it stops ([`crate::storage::WriteOptions::keep_unfinished`]).
//! The next attempt ([`Resume::prepare`]) takes each stripe over, walks the frames the journal
//! names from the start, checks each one's header and stored checksum, and keeps the stripe up to
//! the first frame that is missing or damaged. It then goes on writing the same set (same id, same
//! data key; its frames sealed under nonces of its own attempt's range) after what it kept.
//!
//! A file listed again is **taken** from an earlier attempt, not read, when:
//! - the newest attempt that listed it holds its bytes in frames kept (a file it held in part is
//!   taken in part: only the ranges it lacks are read);
//! - its size, mtime and inode are what that attempt listed; and
//! - that mtime is older than that attempt's start by more than a second.
//!
//! Why that is enough: a write to a file sets its mtime to the time of the write. Every write after
//! the earlier attempt listed the file came after that attempt began, so it would have left an
//! mtime later than the one listed (which is a second older than the start, more than the file
//! system's timestamp granularity). An equal mtime therefore means that nothing wrote the file from
//! that listing to this one: what the earlier attempt read is what the file holds now, after this
//! attempt's start checkpoint, as if this attempt had read it. PostgreSQL never sets a data file's
//! times itself. Page LSNs alone would not do: a page written between the two attempts' start
//! checkpoints carries an LSN older than this attempt's redo point, whose WAL this backup does not
//! hold.

use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::crypto::KeyBlock;
use crate::error::{Error, Result};
use crate::format::{frame_agrees, BackupId, FrameHeader, IndexEntry, StripeHeader, FORMAT_VERSION, FRAME_HEADER_LEN, HEADER_LEN, INDEX_ENTRY_LEN, MAX_ZERO_FRAME};
use crate::manifest::Entry;
use crate::storage::UnfinishedStripe;

/// What a backup is asked that a resumption must match ([`crate::BackupOptions::settings`]).
#[derive(Clone, Copy, Debug)]
pub struct Settings<'a> {
    /// The stripes.
    pub targets: &'a [crate::storage::Location],
    /// Codec and level.
    pub codec: &'a crate::codec::CodecSpec,
    /// Chunk size.
    pub transfer_size: u64,
    /// Encryption, if any.
    pub encryption: Option<&'a crate::crypto::Encryption>,
    /// About how many bytes the source holds: sizes a stripe's upload parts when it goes on.
    pub expected_bytes: u64,
}

/// Where a resumable backup records its progress: small objects, each written whole (a
/// repository's are sealed when it is encrypted).
pub trait Journal: Send + Sync + std::fmt::Debug {
    /// Write object `name` whole (durably where the place allows).
    ///
    /// # Errors
    /// It cannot be written.
    fn put(&self, name: &str, bytes: &[u8]) -> Result<()>;
    /// Object `name`, or `None` when there is none.
    ///
    /// # Errors
    /// It cannot be read, or is damaged.
    fn get(&self, name: &str) -> Result<Option<Vec<u8>>>;
    /// Every object's name.
    ///
    /// # Errors
    /// The place cannot be listed.
    fn list(&self) -> Result<Vec<String>>;
}

/// A resumable backup's journal and the facts its head records (a database's system identifier),
/// which the next attempt compares before it goes on ([`Resume::prepare`]).
#[derive(Clone, Debug)]
pub struct Journaled {
    /// Where progress goes.
    pub journal: Arc<dyn Journal>,
    /// Facts about the source, recorded in each attempt's head.
    pub facts: serde_json::Value,
}

/// Files listed between two writes of a journal's file list, at most.
const FILES_PER_PUT: usize = 4096;
/// Index entries between two writes of a stripe's, at most.
const ENTRIES_PER_PUT: usize = 4096;
/// Stored bytes of a stripe between two writes of its index entries, at most: what a stop loses
/// of a fast backup is bounded by bytes, of a slow one by [`PUT_EVERY`].
const BYTES_PER_PUT: u64 = 64 << 20;
/// The longest a journal waits before recording what it holds.
const PUT_EVERY: Duration = Duration::from_secs(1);
/// How much older than its attempt's start a file's mtime must be for it to be taken again.
const MTIME_MARGIN_MS: i64 = 1000;
/// Frame nonces of attempt `a` are `a << ATTEMPT_SHIFT` on: each attempt's frames under a data
/// key shared with the attempts before it are sealed under nonces none of them used.
pub(crate) const ATTEMPT_SHIFT: u32 = 40;

fn name_head(a: u32) -> String {
    format!("{a:04}/head")
}

/// What an attempt records first.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Head {
    attempt: u32,
    backup_id: String,
    started_unix_ms: i64,
    /// Where this attempt's frames begin in each stripe (what it kept of the attempts before).
    starts: Vec<u64>,
    compression: String,
    transfer_size: u64,
    encrypted: bool,
    #[serde(default)]
    facts: serde_json::Value,
}

/// A file as an attempt listed it.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct FileRec {
    id: u32,
    root: String,
    path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bytes: Option<String>,
    size: u64,
    mtime_ns: i64,
    ino: u64,
}

/// A file's key across attempts: its root's name and its path (bytes, in hex, when not UTF-8).
type FileKey = (String, String, Option<String>);

fn key_of(root: &str, e: &Entry) -> FileKey {
    (root.to_string(), e.path.clone(), e.path_bytes.as_ref().map(|b| crate::text::hex(b)))
}

/// The journal an attempt writes: its file list from the listing thread, its suspects from the
/// compressors, each stripe's index from its writer ([`IndexLog`]).
#[derive(Debug)]
pub(crate) struct Recorder {
    journal: Arc<dyn Journal>,
    attempt: u32,
    files: Vec<FileRec>,
    files_put: u32,
    last: Instant,
    pub(crate) suspects: Arc<Suspects>,
}

/// Files a check found fault with, recorded from the compressors as they are found.
#[derive(Debug)]
pub(crate) struct Suspects {
    journal: Arc<dyn Journal>,
    attempt: u32,
    n: Mutex<u32>,
}

impl Suspects {
    /// A file (`rel` under root `root`) a check found fault with: never taken by a later attempt
    /// (it is read again, and checked again). Recorded before its chunk goes on to be written.
    pub(crate) fn record(&self, root: &str, rel: &str) -> Result<()> {
        let mut n = self.n.lock().unwrap_or_else(|p| p.into_inner());
        let rec = FileRec { id: 0, root: root.to_string(), path: rel.to_string(), bytes: None, size: 0, mtime_ns: 0, ino: 0 };
        self.journal.put(&format!("{:04}/suspect-{:06}", self.attempt, *n), &serde_json::to_vec(&rec).unwrap_or_default())?;
        *n += 1;
        Ok(())
    }
}

impl Recorder {
    /// Start attempt `attempt` of set `id`: its head written before any frame is.
    pub(crate) fn begin(j: &Journaled, attempt: u32, id: BackupId, started_unix_ms: i64, starts: Vec<u64>, opts: &Settings<'_>) -> Result<Recorder> {
        let head = Head {
            attempt,
            backup_id: id.to_hex(),
            started_unix_ms,
            starts,
            compression: opts.codec.to_string(),
            transfer_size: opts.transfer_size,
            encrypted: opts.encryption.is_some(),
            facts: j.facts.clone(),
        };
        j.journal.put(&name_head(attempt), &serde_json::to_vec(&head).map_err(|e| Error::invalid(format!("internal: a journal head: {e}")))?)?;
        let suspects = Arc::new(Suspects { journal: j.journal.clone(), attempt, n: Mutex::new(0) });
        Ok(Recorder { journal: j.journal.clone(), attempt, files: Vec::new(), files_put: 0, last: Instant::now(), suspects })
    }

    /// A regular file listed, about to be read.
    pub(crate) fn file(&mut self, id: u32, root: &str, e: &Entry, ino: u64) -> Result<()> {
        let (root, path, bytes) = key_of(root, e);
        self.files.push(FileRec { id, root, path, bytes, size: e.size, mtime_ns: e.mtime_ns, ino });
        if self.files.len() >= FILES_PER_PUT || self.last.elapsed() >= PUT_EVERY {
            self.flush()?;
        }
        Ok(())
    }

    /// Record the files listed since the last time.
    pub(crate) fn flush(&mut self) -> Result<()> {
        self.last = Instant::now();
        if self.files.is_empty() {
            return Ok(());
        }
        let bytes = serde_json::to_vec(&self.files).map_err(|e| Error::invalid(format!("internal: a journal's files: {e}")))?;
        self.journal.put(&format!("{:04}/files-{:06}", self.attempt, self.files_put), &bytes)?;
        self.files_put += 1;
        self.files.clear();
        Ok(())
    }

    /// The footers are about to be written: no later attempt may go on from this one.
    pub(crate) fn footers(&self) -> Result<()> {
        self.journal.put(&format!("{:04}/footers", self.attempt), b"")
    }

    /// The log stripe `k`'s writer keeps.
    pub(crate) fn index_log(&self, k: usize) -> IndexLog {
        IndexLog { journal: self.journal.clone(), attempt: self.attempt, k, buf: Vec::new(), entries: 0, bytes: 0, put: 0, last: Instant::now() }
    }
}

/// A stripe's index entries, recorded as its writer writes frames.
pub(crate) struct IndexLog {
    journal: Arc<dyn Journal>,
    attempt: u32,
    k: usize,
    buf: Vec<u8>,
    entries: usize,
    /// Stored bytes of the frames held.
    bytes: u64,
    put: u32,
    last: Instant,
}

impl IndexLog {
    /// An index entry of the frame being written.
    pub(crate) fn entry(&mut self, e: &IndexEntry) {
        e.encode_into(&mut self.buf);
        self.entries += 1;
    }

    /// The frame (`bytes` stored, its header included) whose entries came last is written: what
    /// is held is recorded when enough is.
    pub(crate) fn frame_done(&mut self, bytes: u64) -> Result<()> {
        self.bytes += bytes;
        if self.entries >= ENTRIES_PER_PUT || self.bytes >= BYTES_PER_PUT || self.last.elapsed() >= PUT_EVERY {
            self.flush()?;
        }
        Ok(())
    }

    /// Record what is held.
    pub(crate) fn flush(&mut self) -> Result<()> {
        self.last = Instant::now();
        if self.buf.is_empty() {
            return Ok(());
        }
        self.journal.put(&format!("{:04}/index-{:02}-{:06}", self.attempt, self.k, self.put), &self.buf)?;
        self.put += 1;
        self.buf.clear();
        (self.entries, self.bytes) = (0, 0);
        Ok(())
    }
}

/// What [`Resume::prepare`] found.
#[derive(Debug)]
pub enum Resumable {
    /// Go on from the attempts before.
    Ready(Box<Resume>),
    /// Start afresh, and why.
    Afresh(String),
}

/// A file an earlier attempt holds, whole or in part.
#[derive(Clone, Debug)]
struct Held {
    attempt: u32,
    id: u32,
    size: u64,
    mtime_ns: i64,
    ino: u64,
    /// The byte ranges it does not hold (none: it holds the whole file), sorted.
    missing: Vec<std::ops::Range<u64>>,
}

/// What an earlier attempt holds of a file listed now ([`Resume::take`]).
#[derive(Clone, Debug)]
pub(crate) struct Taken {
    /// The attempt, and the file's id there.
    pub(crate) attempt: u32,
    pub(crate) id: u32,
    /// The byte ranges still to read (none: the file is held whole).
    pub(crate) missing: Vec<std::ops::Range<u64>>,
}

/// A stripe taken over, and what of it is kept.
pub(crate) struct KeptStripe {
    pub(crate) unfinished: Box<dyn UnfinishedStripe>,
    /// Bytes kept: the header and every frame checked.
    pub(crate) keep: u64,
    /// The kept frames' index entries, in stripe order, each with its attempt (ids are that
    /// attempt's).
    pub(crate) entries: Vec<(u32, IndexEntry)>,
}

/// A backup's earlier attempts, checked and ready to go on from ([`Resume::prepare`]); hand it to
/// [`crate::Backup::start`] through [`crate::BackupOptions::resume`].
pub struct Resume {
    pub(crate) attempt: u32,
    pub(crate) backup_id: BackupId,
    pub(crate) key_block: Option<KeyBlock>,
    pub(crate) first_started_unix_ms: i64,
    pub(crate) stripes: Mutex<Vec<KeptStripe>>,
    held: HashMap<FileKey, Held>,
    /// Per attempt, one more than the largest file id it used.
    pub(crate) ids: Vec<u32>,
    facts: serde_json::Value,
}

impl std::fmt::Debug for Resume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Resume {{ attempt: {}, set: {}, files held: {} }}", self.attempt, self.backup_id.to_hex(), self.held.len())
    }
}

impl Resume {
    /// Read the journal, take over every stripe of `opts.targets`, and check what they hold:
    /// [`Resumable::Afresh`] with the reason when nothing can be resumed, or when the settings
    /// differ (codec and level, chunk size, stripes, encryption and its key: a resumed set has
    /// one of each). `never` names files (root name, path) never taken from an earlier attempt.
    ///
    /// # Errors
    /// The journal cannot be read or a stripe cannot be taken over (another process writes it).
    pub fn prepare(journal: &dyn Journal, opts: &Settings<'_>, never: &[(&str, &str)]) -> Result<Resumable> {
        let names = journal.list()?;
        let mut heads: Vec<Head> = Vec::new();
        for n in names.iter().filter(|n| n.ends_with("/head")) {
            if let Some(b) = journal.get(n)? {
                heads.push(serde_json::from_slice(&b).map_err(|e| Error::corrupt(format!("journal {n}: {e}")))?);
            }
        }
        heads.sort_by_key(|h| h.attempt);
        let Some(last) = heads.last().cloned() else {
            return Ok(Resumable::Afresh("nothing was recorded to resume from".into()));
        };
        if heads.iter().enumerate().any(|(i, h)| h.attempt as usize != i) {
            return Ok(Resumable::Afresh("its journal lacks an attempt's head".into()));
        }
        if names.iter().any(|n| n.ends_with("/footers")) {
            return Ok(Resumable::Afresh("it stopped while writing its footers, which cannot be written twice".into()));
        }
        let asked = opts.codec.to_string();
        if last.compression != asked {
            return Ok(Resumable::Afresh(format!("it was written with --compression {}, not {asked}", last.compression)));
        }
        if last.transfer_size != opts.transfer_size {
            return Ok(Resumable::Afresh(format!("it was written with chunks of {} bytes, not {}", last.transfer_size, opts.transfer_size)));
        }
        if last.encrypted != opts.encryption.is_some() {
            return Ok(Resumable::Afresh(if last.encrypted { "it is encrypted and this backup is not" } else { "it is not encrypted and this backup is" }.into()));
        }
        if last.starts.len() != opts.targets.len() {
            return Ok(Resumable::Afresh(format!("it has {} stripes, not {}", last.starts.len(), opts.targets.len())));
        }
        if heads.iter().any(|h| h.starts.len() != last.starts.len() || h.backup_id != last.backup_id) {
            return Ok(Resumable::Afresh("its attempts do not agree on what they wrote (a damaged journal)".into()));
        }
        let id = BackupId::from_hex(&last.backup_id).ok_or_else(|| Error::corrupt(format!("journal head: backup id {:?}", last.backup_id)))?;

        let mut stripes = Vec::with_capacity(opts.targets.len());
        let mut key_block = None;
        for (k, t) in opts.targets.iter().enumerate() {
            let Some(u) = t.resume(opts.expected_bytes)? else {
                return Ok(Resumable::Afresh(format!("stripe {} ({}) was not left unfinished", k + 1, t.display())));
            };
            let src = u.source();
            let mut first = [0u8; HEADER_LEN];
            if src.len() < HEADER_LEN as u64 {
                return Ok(Resumable::Afresh(format!("stripe {} holds no header", k + 1)));
            }
            src.read_exact_at(&mut first, 0)?;
            let mut whole = vec![0u8; StripeHeader::len_from(&first)];
            if src.len() < whole.len() as u64 {
                return Ok(Resumable::Afresh(format!("stripe {} holds no header", k + 1)));
            }
            src.read_exact_at(&mut whole, 0)?;
            let h = match StripeHeader::decode(&whole) {
                Ok(h) => h,
                Err(e) => return Ok(Resumable::Afresh(format!("stripe {}: {}", k + 1, e.message()))),
            };
            if h.backup_id != id || h.stripe_index as usize != k || h.stripe_count as usize != opts.targets.len() || h.version != FORMAT_VERSION {
                return Ok(Resumable::Afresh(format!("stripe {} is not the one its journal describes (another set, place or format)", k + 1)));
            }
            if h.codec != opts.codec.kind || i32::from(h.level) != opts.codec.level || u64::from(h.transfer_size) != opts.transfer_size {
                return Ok(Resumable::Afresh(format!("stripe {} was written with other settings", k + 1)));
            }
            if let (Some(b), Some(e)) = (&h.key_block, &opts.encryption) {
                if b.kdf != e.kdf {
                    return Ok(Resumable::Afresh(
                        "its key is not the one backups are sealed with now (rotated or replaced): a resumed backup would be sealed under the old one".into(),
                    ));
                }
                // The secret opens it, or the backup cannot go on.
                e.keys.open(b)?;
            }
            key_block = h.key_block;
            stripes.push((u, whole.len() as u64));
        }

        // Each stripe's kept frames: walked from the start, attempt after attempt.
        let mut kept = Vec::with_capacity(stripes.len());
        for (k, (u, header_len)) in stripes.into_iter().enumerate() {
            let mut logged: Vec<(u32, IndexEntry)> = Vec::new();
            for h in &heads {
                let prefix = format!("{:04}/index-{k:02}-", h.attempt);
                let mut parts: Vec<&String> = names.iter().filter(|n| n.starts_with(&prefix)).collect();
                parts.sort();
                for n in parts {
                    let Some(b) = journal.get(n)? else { continue };
                    if b.len() % INDEX_ENTRY_LEN != 0 {
                        return Err(Error::corrupt(format!("journal {n}: {} bytes is not a whole number of index entries", b.len())));
                    }
                    logged.extend(b.chunks(INDEX_ENTRY_LEN).map(|e| (h.attempt, IndexEntry::decode_one(e))));
                }
            }
            // Each attempt's frames end where the first later attempt began (a later one may have
            // kept less than the one before it).
            let starts: Vec<u64> = heads.iter().map(|h| h.starts[k]).collect();
            let (keep, entries) = walk(u.source(), header_len, &logged, &starts, opts.transfer_size, key_block.is_some())?;
            kept.push(KeptStripe { unfinished: u, keep, entries });
        }

        // What each attempt holds of each of its files, then the files held whole.
        let mut ids: Vec<u32> = vec![0; heads.len()];
        let mut pieces: HashMap<(u32, u32), Vec<(u64, u32)>> = HashMap::new();
        for s in &kept {
            for (a, e) in s.entries.iter().filter(|(_, e)| !e.is_superseded()) {
                ids[*a as usize] = ids[*a as usize].max(e.file_id.saturating_add(1));
                pieces.entry((*a, e.file_id)).or_default().push((e.offset, e.raw_len));
            }
        }
        let mut newest: HashMap<FileKey, (FileRec, u32)> = HashMap::new();
        let mut suspects = std::collections::HashSet::new();
        for h in &heads {
            let files = format!("{:04}/files-", h.attempt);
            let suspect = format!("{:04}/suspect-", h.attempt);
            let mut parts: Vec<&String> = names.iter().filter(|n| n.starts_with(&files) || n.starts_with(&suspect)).collect();
            parts.sort();
            for n in parts {
                let Some(b) = journal.get(n)? else { continue };
                if n.starts_with(&suspect) {
                    let r: FileRec = serde_json::from_slice(&b).map_err(|e| Error::corrupt(format!("journal {n}: {e}")))?;
                    suspects.insert((r.root, r.path, r.bytes));
                    continue;
                }
                let recs: Vec<FileRec> = serde_json::from_slice(&b).map_err(|e| Error::corrupt(format!("journal {n}: {e}")))?;
                for r in recs {
                    ids[h.attempt as usize] = ids[h.attempt as usize].max(r.id.saturating_add(1));
                    // A later attempt's listing is what counts: it read the file again.
                    newest.insert((r.root.clone(), r.path.clone(), r.bytes.clone()), (r, h.attempt));
                }
            }
        }
        // Ids are positions in an attempt's listing: one past a hundred million is damage, and
        // would ask for a table that large.
        if ids.iter().any(|&n| n > 100_000_000) {
            return Ok(Resumable::Afresh("its journal names a file id no listing reaches (a damaged journal)".into()));
        }
        let mut held = HashMap::new();
        for (key, (r, a)) in newest {
            let old_enough = r.mtime_ns < (heads[a as usize].started_unix_ms - MTIME_MARGIN_MS).saturating_mul(1_000_000);
            let excluded = suspects.contains(&key) || never.iter().any(|(root, path)| key.0 == *root && key.1 == *path && key.2.is_none());
            if !old_enough || excluded {
                continue;
            }
            // What it holds: chunks that do not overlap and end within the file; the gaps are read.
            let Some(p) = pieces.get_mut(&(a, r.id)) else {
                if r.size == 0 {
                    held.insert(key, Held { attempt: a, id: r.id, size: 0, mtime_ns: r.mtime_ns, ino: r.ino, missing: Vec::new() });
                }
                continue;
            };
            p.sort_unstable();
            let mut missing = Vec::new();
            let mut end = 0u64;
            let mut sound = true;
            for &(off, len) in p.iter() {
                let Some(to) = off.checked_add(u64::from(len)).filter(|&to| off >= end && to <= r.size) else {
                    sound = false;
                    break;
                };
                if off > end {
                    missing.push(end..off);
                }
                end = to;
            }
            // Held in part: the rest from its last chunk on is read to wherever the file ends
            // then (a file that grew since it was listed is read to its new end).
            if end < r.size {
                missing.push(end..u64::MAX);
            }
            if sound {
                held.insert(key, Held { attempt: a, id: r.id, size: r.size, mtime_ns: r.mtime_ns, ino: r.ino, missing });
            }
        }
        if held.is_empty() {
            return Ok(Resumable::Afresh("no file it stored is unchanged since".into()));
        }
        Ok(Resumable::Ready(Box::new(Resume {
            attempt: last.attempt + 1,
            backup_id: id,
            key_block,
            first_started_unix_ms: heads[0].started_unix_ms,
            stripes: Mutex::new(kept),
            held,
            ids,
            facts: last.facts,
        })))
    }

    /// The facts the last attempt's head recorded about its source.
    pub fn facts(&self) -> &serde_json::Value {
        &self.facts
    }

    /// This attempt's number (the first resumption is 1).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// How many files earlier attempts hold, whole or in part, that may be taken if unchanged.
    pub fn files_held(&self) -> usize {
        self.held.len()
    }

    /// What an earlier attempt holds of the file listed now as `e` (inode `ino`) under root `root`,
    /// when the file has not changed since: its chunks are taken, and only the ranges it lacks
    /// are read.
    pub(crate) fn take(&self, root: &str, e: &Entry, ino: u64) -> Option<Taken> {
        let h = self.held.get(&key_of(root, e))?;
        (h.size == e.size && h.mtime_ns == e.mtime_ns && h.ino == ino).then(|| Taken { attempt: h.attempt, id: h.id, missing: h.missing.clone() })
    }
}

/// Walk a stripe's frames from `start`, as the journal's entries place them, each attempt's only
/// from where it began (`starts`), checking each frame's header against its entries and its
/// stored bytes against their checksum: the bytes kept (up to the first frame missing, cut short
/// or damaged) and the entries of the frames kept.
fn walk(
    src: &dyn crate::storage::StripeSource,
    start: u64,
    logged: &[(u32, IndexEntry)],
    starts: &[u64],
    transfer_size: u64,
    sealed: bool,
) -> Result<(u64, Vec<(u32, IndexEntry)>)> {
    let mut pos = start;
    let mut kept = Vec::new();
    let mut buf = Vec::new();
    // Frames are back to back from the header: one stream (an object store's reads ahead).
    let mut stream = src.stream(start, src.len())?;
    let mut i = 0;
    while i < logged.len() {
        let (a, first) = logged[i];
        let mut j = i + 1;
        while j < logged.len() && logged[j].0 == a && logged[j].1.frame_pos == first.frame_pos {
            j += 1;
        }
        let members: Vec<IndexEntry> = logged[i..j].iter().map(|(_, e)| *e).collect();
        i = j;
        // Frames of an attempt past where a later one began were cut away by it.
        let region_end = starts[a as usize + 1..].iter().copied().min().unwrap_or(u64::MAX);
        if first.frame_pos < starts[a as usize] || first.frame_pos >= region_end {
            continue;
        }
        if first.frame_pos != pos {
            break;
        }
        let raw_max = if first.stored_len == 0 { u64::from(MAX_ZERO_FRAME) } else { transfer_size };
        let n = FRAME_HEADER_LEN as u64 + u64::from(first.stored_len);
        if u64::from(first.raw_len) > raw_max || u64::from(first.stored_len) > transfer_size * 2 + 4096 || pos + n > src.len() {
            break;
        }
        buf.resize(n as usize, 0);
        if stream.read_exact(&mut buf).is_err() {
            break;
        }
        let Ok(h) = FrameHeader::decode(&buf[..FRAME_HEADER_LEN]) else { break };
        let shown = if sealed && h.stored_len != 0 { None } else { Some(h.raw_crc) };
        if !frame_agrees(&h, &members, shown, false) {
            break;
        }
        if h.stored_len != 0 && crc32c::crc32c(&buf[FRAME_HEADER_LEN..]) != h.stored_crc {
            break;
        }
        kept.extend(members.into_iter().map(|e| (a, e)));
        pos += n;
    }
    Ok((pos, kept))
}
