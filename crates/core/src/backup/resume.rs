//! Resuming a full backup that stopped (killed, a power cut, a target gone away) from what it
//! stored, rather than from zero.
//!
//! While a resumable backup runs, it records its progress in a [`Journal`] (a repository keeps one
//! per backup, beside its stripes), attempt by attempt:
//!
//! ```text
//! AAAA/head               the attempt: set id, settings, each stripe's header and where its
//!                         frames begin
//! AAAA/files-NNNNNN       files as listed before they were read: id, name, size, mtime, inode
//! AAAA/index-KK-NNNNNN    stripe KK's index entries of frames written (ids are the attempt's),
//!                         every 64 MiB stored, every second, and (a stripe sent in parts)
//!                         each time a part is sent
//! AAAA/suspect-NNNNNN     a file a source's check found fault with (never taken again)
//! AAAA/footers            the footers are being written (the set's index and manifest nonces
//!                         are spent: nothing may go on from here)
//! ```
//!
//! Its stripes are kept unfinished when it stops ([`crate::storage::WriteOptions::keep_unfinished`]).
//! The next attempt ([`Resume::prepare`]) takes each stripe over and keeps what it can prove:
//! - a stripe that can be read back (a file's `.partial`): it walks the frames the journal names
//!   from the start, checks each one's header and stored checksum, and keeps the stripe up to the
//!   first frame that is missing, cut short or damaged;
//! - a stripe sent in parts that cannot be read before the upload completes (S3): parts end only
//!   where frames do ([`crate::storage::StripeSink::frame_end`]) and the journal records every
//!   frame up to a part's end when the part is sent, so it keeps the unbroken run of parts the
//!   server holds up to the last one whose end the journal's frames reach exactly. The server
//!   checked each part against its signed checksum as it was received; nothing is read back.
//!
//! It then goes on writing the same set (same id, same data key; its frames sealed under nonces
//! of its own attempt's range) after what it kept: a file cut, an upload given more parts.
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
use crate::error::{Error, ErrorKind, Result};
use crate::format::{frame_agrees, BackupId, FrameHeader, IndexEntry, StripeHeader, FORMAT_VERSION, FRAME_HEADER_LEN, HEADER_LEN, INDEX_ENTRY_LEN, MAX_ZERO_FRAME};
use crate::manifest::Entry;
use crate::storage::{Holding, UnfinishedStripe};

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
    /// Each stripe's header, in hex: a stripe that cannot be read back before it is published is
    /// checked, and one kept from nothing is begun again, from these.
    #[serde(default)]
    headers: Vec<String>,
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
    pub(crate) fn begin(j: &Journaled, attempt: u32, id: BackupId, started_unix_ms: i64, starts: Vec<u64>, headers: &[Vec<u8>], opts: &Settings<'_>) -> Result<Recorder> {
        let head = Head {
            attempt,
            backup_id: id.to_hex(),
            started_unix_ms,
            starts,
            headers: headers.iter().map(|h| crate::text::hex(h)).collect(),
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
    /// Its header, as written when the set began.
    pub(crate) header: Vec<u8>,
    /// Bytes kept: the header and every frame checked, or nothing (0: the stripe begins again,
    /// header and all).
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
            let journaled = last.headers.get(k).and_then(|h| crate::text::unhex(h.as_bytes()));
            let whole = match u.holds() {
                Holding::Bytes(src) => {
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
                    if journaled.as_ref().is_some_and(|j| *j != whole) {
                        return Ok(Resumable::Afresh(format!("stripe {} does not begin with the header its journal recorded", k + 1)));
                    }
                    whole
                }
                Holding::Parts(_) => match journaled {
                    Some(h) => h,
                    None => return Ok(Resumable::Afresh(format!("stripe {} cannot be read back and its journal does not record its header", k + 1))),
                },
            };
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
            stripes.push((u, whole));
        }

        // Each stripe's kept frames: walked from the start, attempt after attempt.
        let mut kept = Vec::with_capacity(stripes.len());
        for (k, (u, header)) in stripes.into_iter().enumerate() {
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
            let start = header.len() as u64;
            let (keep, entries) = match u.holds() {
                Holding::Bytes(src) => walk(src, start, &logged, &starts, opts.transfer_size, key_block.is_some())?,
                Holding::Parts(ends) => walk_parts(ends, start, &logged, &starts, opts.transfer_size),
            };
            kept.push(KeptStripe { unfinished: u, header, keep, entries });
        }

        if kept.iter().all(|s| s.entries.is_empty()) {
            return Ok(Resumable::Afresh("none of its stripes holds a frame that can be kept".into()));
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

/// The journal's frames in the order logged, each with its attempt and index entries, leaving
/// out those a later attempt cut away: each attempt's frames begin where its head says (`starts`)
/// and end where the first later attempt began (a later one may have kept less than the one
/// before it).
fn frames<'a>(logged: &'a [(u32, IndexEntry)], starts: &'a [u64]) -> impl Iterator<Item = (u32, &'a [(u32, IndexEntry)])> + 'a {
    let mut i = 0;
    std::iter::from_fn(move || loop {
        let &(a, first) = logged.get(i)?;
        let mut j = i + 1;
        while j < logged.len() && logged[j].0 == a && logged[j].1.frame_pos == first.frame_pos {
            j += 1;
        }
        let members = &logged[i..j];
        i = j;
        let region_end = starts[a as usize + 1..].iter().copied().min().unwrap_or(u64::MAX);
        if first.frame_pos >= starts[a as usize] && first.frame_pos < region_end {
            return Some((a, members));
        }
    })
}

/// A frame's stored length (its header included) as its first index entry gives it, or `None`
/// when no frame of chunks of `transfer_size` can be that long (a damaged journal).
fn frame_len(first: &IndexEntry, transfer_size: u64) -> Option<u64> {
    let raw_max = if first.stored_len == 0 { u64::from(MAX_ZERO_FRAME) } else { transfer_size };
    (u64::from(first.raw_len) <= raw_max && u64::from(first.stored_len) <= transfer_size * 2 + 4096).then(|| FRAME_HEADER_LEN as u64 + u64::from(first.stored_len))
}

/// Walk a stripe's frames from `start`, as the journal's entries place them ([`frames`]),
/// checking each frame's header against its entries and its stored bytes against their checksum:
/// the bytes kept (up to the first frame missing, cut short or damaged) and the entries of the
/// frames kept.
///
/// # Errors
/// The stripe cannot be read (a link or a disk failing), as opposed to ending early: nothing is
/// decided on part of what it holds.
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
    for (_, frame) in frames(logged, starts) {
        let first = frame[0].1;
        let Some(n) = frame_len(&first, transfer_size).filter(|n| first.frame_pos == pos && pos + n <= src.len()) else { break };
        buf.resize(n as usize, 0);
        if let Err(e) = stream.read_exact(&mut buf) {
            // Cut short: kept up to here. The link or the disk failing is not damage: the error,
            // and what was stored stays as it is for the next try.
            let e = crate::storage::from_io(e, || format!("reading back {}", src.location()));
            if e.kind() == ErrorKind::Incomplete {
                break;
            }
            return Err(e);
        }
        let Ok(h) = FrameHeader::decode(&buf[..FRAME_HEADER_LEN]) else { break };
        let shown = if sealed && h.stored_len != 0 { None } else { Some(h.raw_crc) };
        let members: Vec<IndexEntry> = frame.iter().map(|(_, e)| *e).collect();
        if !frame_agrees(&h, &members, shown, false) {
            break;
        }
        if h.stored_len != 0 && crc32c::crc32c(&buf[FRAME_HEADER_LEN..]) != h.stored_crc {
            break;
        }
        kept.extend_from_slice(frame);
        pos += n;
    }
    Ok((pos, kept))
}

/// What a stripe held as parts (`ends`: where each of the unbroken run from the first ends) keeps:
/// the frames the journal places back to back from `start` ([`frames`]) up to the last part end
/// they reach exactly (0 when they reach none: the stripe begins again), and those frames'
/// entries. Frames recorded past it, or in parts the server does not hold, are not kept.
fn walk_parts(ends: &[u64], start: u64, logged: &[(u32, IndexEntry)], starts: &[u64], transfer_size: u64) -> (u64, Vec<(u32, IndexEntry)>) {
    let last = ends.last().copied().unwrap_or(0);
    let (mut pos, mut keep) = (start, 0);
    let (mut kept, mut pending) = (Vec::new(), Vec::new());
    for (_, frame) in frames(logged, starts) {
        let first = frame[0].1;
        let Some(n) = frame_len(&first, transfer_size).filter(|n| first.frame_pos == pos && pos + n <= last) else { break };
        pending.extend_from_slice(frame);
        pos += n;
        if ends.binary_search(&pos).is_ok() {
            keep = pos;
            kept.append(&mut pending);
        }
    }
    (keep, kept)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames of `stored` bytes each (header included) from `start`, all of attempt `a`.
    fn frames_of(a: u32, start: u64, stored: &[u64]) -> Vec<(u32, IndexEntry)> {
        let mut pos = start;
        stored
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let stored_len = (n - FRAME_HEADER_LEN as u64) as u32;
                let e = IndexEntry { file_id: i as u32, offset: 0, frame_pos: pos, raw_len: stored_len, stored_len, raw_crc: 0, frame_off: 0, hash: 0 };
                pos += n;
                (a, e)
            })
            .collect()
    }

    const TS: u64 = 1 << 20;
    const F: u64 = 1000 + FRAME_HEADER_LEN as u64;

    #[test]
    fn parts_are_kept_up_to_the_last_end_the_journal_reaches() {
        // Header of 100 bytes, then ten frames; parts end after frames 3, 6 and 9.
        let logged = frames_of(0, 100, &[F; 10]);
        let ends = [100 + 3 * F, 100 + 6 * F, 100 + 9 * F];
        let (keep, kept) = walk_parts(&ends, 100, &logged, &[100], TS);
        assert_eq!((keep, kept.len()), (ends[2], 9));
        // The journal recorded only seven frames: the third part is not kept.
        let (keep, kept) = walk_parts(&ends, 100, &logged[..7], &[100], TS);
        assert_eq!((keep, kept.len()), (ends[1], 6));
        // The server holds only the first part.
        let (keep, kept) = walk_parts(&ends[..1], 100, &logged, &[100], TS);
        assert_eq!((keep, kept.len()), (ends[0], 3));
        // No part at all, or one that ends inside a frame (a stripe sent in parts of fixed size):
        // nothing is kept, and the stripe begins again.
        assert_eq!(walk_parts(&[], 100, &logged, &[100], TS), (0, Vec::new()));
        assert_eq!(walk_parts(&[100 + 3 * F + 7], 100, &logged, &[100], TS), (0, Vec::new()));
        // A frame missing from the journal (a gap): nothing after it is kept.
        let mut gap = logged.clone();
        gap.remove(4);
        assert_eq!(walk_parts(&ends, 100, &gap, &[100], TS).0, ends[0]);
        // A frame longer than a chunk can make is damage: nothing from it on.
        let mut long = logged.clone();
        long[1].1.raw_len = (TS + 1) as u32;
        assert_eq!(walk_parts(&ends, 100, &long, &[100], TS), (0, Vec::new()));
    }

    #[test]
    fn a_later_attempt_goes_on_from_where_it_began() {
        // Attempt 0 kept up to its second part's end; attempt 1 wrote on from there, and its
        // frames replace attempt 0's third part.
        let first = frames_of(0, 100, &[F; 10]);
        let second = frames_of(1, 100 + 6 * F, &[F; 6]);
        let logged: Vec<_> = first.iter().chain(&second).copied().collect();
        let ends = [100 + 3 * F, 100 + 6 * F, 100 + 9 * F, 100 + 12 * F];
        let (keep, kept) = walk_parts(&ends, 100, &logged, &[100, 100 + 6 * F], TS);
        assert_eq!(keep, ends[3]);
        assert_eq!(kept.iter().filter(|(a, _)| *a == 0).count(), 6, "attempt 0's frames past where attempt 1 began are not kept");
        assert_eq!(kept.iter().filter(|(a, _)| *a == 1).count(), 6);
        // Attempt 1 kept nothing and began again after the header: attempt 0's frames are gone.
        let again = frames_of(1, 100, &[F; 3]);
        let logged: Vec<_> = first.iter().chain(&again).copied().collect();
        let (keep, kept) = walk_parts(&ends[..1], 100, &logged, &[100, 100], TS);
        assert_eq!(keep, ends[0]);
        assert!(kept.iter().all(|(a, _)| *a == 1));
    }
}
