//! Temporary files that keep a backup's per-file bookkeeping out of memory, so that a million
//! files (or ten) cost disk in `TMPDIR`, not RAM: the entries as they are registered
//! ([`EntrySpill`], about 60 bytes each plus the path), what reading each file came to
//! ([`Outcomes`], 9 bytes per entry, written where the entry's id says), chunk references sorted
//! in runs and merged back in file order ([`ChunkSorter`], 22 bytes per chunk), and a stripe's
//! index as it grows ([`IndexSpill`]). The files are unnamed (`O_TMPFILE`): nothing is left
//! behind, whatever way the process ends.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use crate::error::{Error, ErrorKind, Result};
use crate::format::IndexEntry;
use crate::manifest::{display_and_bytes, ChunkRef, Delta, Entry, EntryKind};

/// A new unnamed temporary file in `TMPDIR` (or `/tmp`).
fn temp() -> Result<File> {
    tempfile::tempfile().map_err(|e| io_err("cannot create a temporary file", e))
}

fn io_err(what: &str, e: std::io::Error) -> Error {
    Error::new(
        ErrorKind::Io,
        format!(
            "{what} in {} ({e}): sheaf keeps its lists of files and chunks there rather than in memory; set TMPDIR to a writable folder with room (about 100 bytes per file)",
            std::env::temp_dir().display()
        ),
    )
}

// ---------------------------------------------------------------------------------------------
// Entries

/// The fixed part of an encoded entry: root, kind, flags, mode, mtime, uid, gid, size, link, crc,
/// delta bytes, delta crc.
const ENTRY_FIXED: usize = 2 + 1 + 1 + 4 + 8 + 4 + 4 + 8 + 4 + 4 + 8 + 4;

const VANISHED: u8 = 1;
const HAS_DELTA: u8 = 2;
const HAS_LINK: u8 = 4;
const HAS_TARGET: u8 = 8;
const HAS_CRC: u8 = 16;

pub(crate) fn kind_code(k: EntryKind) -> u8 {
    match k {
        EntryKind::File => 0,
        EntryKind::Dir => 1,
        EntryKind::Symlink => 2,
        EntryKind::Hardlink => 3,
        EntryKind::Fifo => 4,
    }
}

pub(crate) fn kind_of(code: u8) -> Option<EntryKind> {
    Some(match code {
        0 => EntryKind::File,
        1 => EntryKind::Dir,
        2 => EntryKind::Symlink,
        3 => EntryKind::Hardlink,
        4 => EntryKind::Fifo,
        _ => return None,
    })
}

/// Append `e` in the spill's binary form to `out`.
fn encode_entry(e: &Entry, out: &mut Vec<u8>) {
    let target = e.target_bytes();
    let flags = [(e.vanished, VANISHED), (e.delta.is_some(), HAS_DELTA), (e.link.is_some(), HAS_LINK), (target.is_some(), HAS_TARGET), (e.crc32c.is_some(), HAS_CRC)]
        .into_iter()
        .filter(|f| f.0)
        .fold(0, |acc, f| acc | f.1);
    let delta = e.delta.unwrap_or_default();
    out.extend_from_slice(&e.root.to_le_bytes());
    out.push(kind_code(e.kind));
    out.push(flags);
    out.extend_from_slice(&e.mode.to_le_bytes());
    out.extend_from_slice(&e.mtime_ns.to_le_bytes());
    out.extend_from_slice(&e.uid.to_le_bytes());
    out.extend_from_slice(&e.gid.to_le_bytes());
    out.extend_from_slice(&e.size.to_le_bytes());
    out.extend_from_slice(&e.link.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&e.crc32c.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&delta.bytes.to_le_bytes());
    out.extend_from_slice(&delta.crc32c.to_le_bytes());
    for b in [Some(e.path_bytes()), target].into_iter().flatten() {
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    }
}

fn le<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    b[at..at + N].try_into().expect("in range")
}

/// The entries of a backup, in id order, on disk.
pub(crate) struct EntrySpill {
    out: BufWriter<File>,
    buf: Vec<u8>,
    count: u64,
}

impl EntrySpill {
    /// An empty spill.
    ///
    /// # Errors
    /// No temporary file can be made.
    pub(crate) fn new() -> Result<Self> {
        Ok(EntrySpill { out: BufWriter::with_capacity(1 << 16, temp()?), buf: Vec::with_capacity(256), count: 0 })
    }

    /// Append `e`; it gets the next id.
    ///
    /// # Errors
    /// The temporary file cannot be written (a full `TMPDIR`).
    pub(crate) fn push(&mut self, e: &Entry) -> Result<()> {
        self.buf.clear();
        encode_entry(e, &mut self.buf);
        self.out.write_all(&self.buf).map_err(|e| io_err("cannot write the list of entries", e))?;
        self.count += 1;
        Ok(())
    }

    /// Entries pushed so far.
    pub(crate) fn len(&self) -> u64 {
        self.count
    }

    /// Read the entries back, in order.
    ///
    /// # Errors
    /// The temporary file cannot be written or rewound.
    pub(crate) fn into_reader(self) -> Result<EntryReader> {
        let mut f = self.out.into_inner().map_err(|e| io_err("cannot write the list of entries", e.into_error()))?;
        f.seek(SeekFrom::Start(0)).map_err(|e| io_err("cannot read the list of entries", e))?;
        Ok(EntryReader { r: BufReader::with_capacity(1 << 16, f), left: self.count, buf: Vec::with_capacity(256) })
    }
}

/// The entries of an [`EntrySpill`], read back in order.
pub(crate) struct EntryReader {
    r: BufReader<File>,
    left: u64,
    buf: Vec<u8>,
}

impl EntryReader {
    fn bytes(&mut self) -> Result<Vec<u8>> {
        let mut n = [0u8; 4];
        self.r.read_exact(&mut n).map_err(|e| io_err("cannot read the list of entries", e))?;
        let mut b = vec![0u8; u32::from_le_bytes(n) as usize];
        self.r.read_exact(&mut b).map_err(|e| io_err("cannot read the list of entries", e))?;
        Ok(b)
    }

    fn read_one(&mut self) -> Result<Entry> {
        self.buf.resize(ENTRY_FIXED, 0);
        self.r.read_exact(&mut self.buf).map_err(|e| io_err("cannot read the list of entries", e))?;
        let b = &self.buf;
        let flags = b[3];
        let kind = kind_of(b[2]).ok_or_else(|| Error::corrupt("the temporary list of entries holds an unknown kind"))?;
        let mut e = Entry {
            root: u16::from_le_bytes(le(b, 0)),
            kind,
            mode: u32::from_le_bytes(le(b, 4)),
            mtime_ns: i64::from_le_bytes(le(b, 8)),
            uid: u32::from_le_bytes(le(b, 16)),
            gid: u32::from_le_bytes(le(b, 20)),
            size: u64::from_le_bytes(le(b, 24)),
            link: (flags & HAS_LINK != 0).then(|| u32::from_le_bytes(le(b, 32))),
            crc32c: (flags & HAS_CRC != 0).then(|| u32::from_le_bytes(le(b, 36))),
            delta: (flags & HAS_DELTA != 0).then(|| Delta { bytes: u64::from_le_bytes(le(b, 40)), crc32c: u32::from_le_bytes(le(b, 48)) }),
            vanished: flags & VANISHED != 0,
            ..Default::default()
        };
        let path = self.bytes()?;
        e.set_path_bytes(path);
        if flags & HAS_TARGET != 0 {
            let (shown, bytes) = display_and_bytes(self.bytes()?);
            (e.target, e.target_bytes) = (Some(shown), bytes);
        }
        Ok(e)
    }
}

impl Iterator for EntryReader {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Result<Entry>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        Some(self.read_one())
    }
}

// ---------------------------------------------------------------------------------------------
// Outcomes

/// What reading a file came to, as [`Outcomes`] keeps it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Outcome {
    /// Bytes read.
    pub(crate) size: u64,
    /// It vanished before it was read.
    pub(crate) vanished: bool,
    /// It changed (size or time) or shrank while read.
    pub(crate) changed: bool,
}

const OUTCOME_LEN: u64 = 9;
/// A record's flag byte: set for every record written (a record never written reads as zeros).
const READ: u8 = 1;

/// Outcomes by entry id, in a file where record `id` lies at `id × 9`: readers write theirs as
/// they finish, in any order and from any thread, and the end of the backup reads them in id
/// order beside the entries. An entry no reader read (a directory, a file whose bytes came
/// another way) has no record.
pub(crate) struct Outcomes {
    file: File,
}

impl Outcomes {
    /// An empty file of outcomes.
    ///
    /// # Errors
    /// No temporary file can be made.
    pub(crate) fn new() -> Result<Self> {
        Ok(Outcomes { file: temp()? })
    }

    /// Write the outcomes of `recs` (ids ascending); ids that follow each other go in one write.
    ///
    /// # Errors
    /// The temporary file cannot be written.
    pub(crate) fn write(&self, recs: &mut Vec<(u32, Outcome)>) -> Result<()> {
        recs.sort_unstable_by_key(|r| r.0);
        let mut buf = Vec::with_capacity(recs.len() * OUTCOME_LEN as usize);
        let mut i = 0;
        while i < recs.len() {
            let first = recs[i].0;
            buf.clear();
            let mut j = i;
            while j < recs.len() && recs[j].0 == first + (j - i) as u32 {
                buf.extend_from_slice(&recs[j].1.size.to_le_bytes());
                buf.push(READ | if recs[j].1.vanished { 2 } else { 0 } | if recs[j].1.changed { 4 } else { 0 });
                j += 1;
            }
            self.file.write_all_at(&buf, u64::from(first) * OUTCOME_LEN).map_err(|e| io_err("cannot write what reading the files came to", e))?;
            i = j;
        }
        recs.clear();
        Ok(())
    }

    /// The outcome of entry `id`, if a reader recorded one.
    ///
    /// # Errors
    /// The temporary file cannot be read.
    pub(crate) fn get(&self, id: u32) -> Result<Option<Outcome>> {
        let mut b = [0u8; OUTCOME_LEN as usize];
        let n = read_at_most(&self.file, &mut b, u64::from(id) * OUTCOME_LEN)?;
        Ok(decode_outcome(&b[..n]))
    }

    /// The outcomes of entries `0..count`, in order.
    pub(crate) fn in_order(&self, count: u64) -> OutcomeReader<'_> {
        OutcomeReader { file: &self.file, next: 0, count, buf: Vec::new(), at: 0, base: 0 }
    }
}

fn decode_outcome(b: &[u8]) -> Option<Outcome> {
    if b.len() < OUTCOME_LEN as usize || b[8] & READ == 0 {
        return None;
    }
    Some(Outcome { size: u64::from_le_bytes(le(b, 0)), vanished: b[8] & 2 != 0, changed: b[8] & 4 != 0 })
}

/// Read into `b` from `pos` until it is full or the file ends; how many bytes came.
fn read_at_most(f: &File, b: &mut [u8], pos: u64) -> Result<usize> {
    let mut got = 0;
    while got < b.len() {
        match f.read_at(&mut b[got..], pos + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err("cannot read a temporary file", e)),
        }
    }
    Ok(got)
}

/// [`Outcomes::in_order`].
pub(crate) struct OutcomeReader<'a> {
    file: &'a File,
    next: u64,
    count: u64,
    buf: Vec<u8>,
    /// Where in `buf` record `next` starts.
    at: usize,
    /// The id of `buf`'s first record.
    base: u64,
}

impl OutcomeReader<'_> {
    /// The outcome of the next entry (None: no reader recorded one), or None past the end.
    ///
    /// # Errors
    /// The temporary file cannot be read.
    pub(crate) fn next_outcome(&mut self) -> Result<Option<Option<Outcome>>> {
        if self.next >= self.count {
            return Ok(None);
        }
        if self.at + OUTCOME_LEN as usize > self.buf.len() {
            const RECORDS: u64 = 1 << 14;
            let n = RECORDS.min(self.count - self.next) as usize * OUTCOME_LEN as usize;
            self.buf.resize(n, 0);
            let got = read_at_most(self.file, &mut self.buf, self.next * OUTCOME_LEN)?;
            // Past the last record written the file ends: those entries have none.
            self.buf[got..].fill(0);
            (self.at, self.base) = (0, self.next);
        }
        debug_assert_eq!(self.base + (self.at as u64 / OUTCOME_LEN), self.next);
        let o = decode_outcome(&self.buf[self.at..self.at + OUTCOME_LEN as usize]);
        self.at += OUTCOME_LEN as usize;
        self.next += 1;
        Ok(Some(o))
    }
}

// ---------------------------------------------------------------------------------------------
// Chunk references, sorted on disk

/// Records kept in memory before a sorted run goes to disk: 4 MiB of chunk references.
const RUN: usize = 1 << 17;

/// A record [`Sorter`] sorts: its order, and a fixed-length encoding for the runs on disk.
pub(crate) trait Record: Ord + Copy {
    /// Encoded length.
    const LEN: usize;
    /// Append the encoding to `out`.
    fn encode(&self, out: &mut Vec<u8>);
    /// Decode `LEN` bytes.
    fn decode(b: &[u8]) -> Self;
}

const CHUNK_REF_LEN: usize = 4 + 8 + 4 + 4 + 2;

impl Record for ChunkRef {
    const LEN: usize = CHUNK_REF_LEN;

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.file_id.to_le_bytes());
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.crc.to_le_bytes());
        out.extend_from_slice(&(self.stripe as u16).to_le_bytes());
    }

    fn decode(b: &[u8]) -> ChunkRef {
        ChunkRef {
            file_id: u32::from_le_bytes(le(b, 0)),
            offset: u64::from_le_bytes(le(b, 4)),
            len: u32::from_le_bytes(le(b, 12)),
            crc: u32::from_le_bytes(le(b, 16)),
            stripe: usize::from(u16::from_le_bytes(le(b, 20))),
        }
    }
}

/// An index entry ordered by (file, offset): a set's chunks file by file, for a chain's block map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ByFile(pub(crate) IndexEntry);

impl Ord for ByFile {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        let key = |e: &IndexEntry| (e.file_id, e.offset, e.frame_pos, e.frame_off, e.raw_len, e.stored_len, e.raw_crc, e.hash);
        key(&self.0).cmp(&key(&o.0))
    }
}

impl PartialOrd for ByFile {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

impl Record for ByFile {
    const LEN: usize = crate::format::INDEX_ENTRY_LEN;

    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode_into(out);
    }

    fn decode(b: &[u8]) -> ByFile {
        ByFile(IndexEntry::decode_one(b))
    }
}

/// Records (chunk references as a stripe writer records them, in the order frames finish),
/// handed back in order: sorted in memory a run at a time, each run written to a temporary file,
/// the runs merged when read back. Memory: one run, and a read buffer per run when merging.
pub(crate) struct Sorter<T: Record> {
    /// Never write a run: for records whose index is held in memory anyway.
    in_memory: bool,
    buf: Vec<T>,
    file: Option<File>,
    /// (start, count) of each run written.
    runs: Vec<(u64, u64)>,
    end: u64,
}

/// Chunk references, sorted by (file, offset).
pub(crate) type ChunkSorter = Sorter<ChunkRef>;

impl<T: Record> Default for Sorter<T> {
    fn default() -> Self {
        Sorter { in_memory: false, buf: Vec::new(), file: None, runs: Vec::new(), end: 0 }
    }
}

impl<T: Record> Sorter<T> {
    /// Add a reference.
    ///
    /// # Errors
    /// A full run cannot be written.
    pub(crate) fn push(&mut self, c: T) -> Result<()> {
        self.buf.push(c);
        if self.buf.len() >= RUN && !self.in_memory {
            self.spill()?;
        }
        Ok(())
    }

    /// A sorter that keeps everything in memory (no temporary file needed).
    pub(crate) fn in_memory() -> Self {
        Sorter { in_memory: true, ..Default::default() }
    }

    fn spill(&mut self) -> Result<()> {
        self.buf.sort_unstable();
        let mut bytes = Vec::with_capacity(self.buf.len() * T::LEN);
        for c in &self.buf {
            c.encode(&mut bytes);
        }
        if self.file.is_none() {
            self.file = Some(temp()?);
        }
        let f = self.file.as_ref().expect("just made");
        f.write_all_at(&bytes, self.end).map_err(|e| io_err("cannot write the chunk list", e))?;
        self.runs.push((self.end, self.buf.len() as u64));
        self.end += bytes.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Every reference of every sorter, in (file, offset) order.
    pub(crate) fn merge(sorters: Vec<Sorter<T>>) -> Merged<T> {
        let mut sources = Vec::new();
        for mut s in sorters {
            s.buf.sort_unstable();
            let file = s.file.take().map(Arc::new);
            for &(start, count) in &s.runs {
                let file = file.clone().expect("a run has a file");
                sources.push(Run::Disk { file, pos: start, left: count, buf: Vec::new(), at: 0 });
            }
            if !s.buf.is_empty() {
                sources.push(Run::Memory(std::mem::take(&mut s.buf).into_iter()));
            }
        }
        let mut m = Merged { heap: BinaryHeap::new(), sources, error: None };
        for k in 0..m.sources.len() {
            m.refill(k);
        }
        m
    }
}

impl<T: Record> Sorter<T> {
    /// Everything pushed, sorted once to be read in order as often as asked ([`Sorted::read`]):
    /// in memory when it never filled a run, else merged into one temporary file.
    ///
    /// # Errors
    /// A temporary file that cannot be written or read.
    pub(crate) fn into_sorted(mut self) -> Result<Sorted<T>> {
        if self.runs.is_empty() {
            self.buf.sort_unstable();
            return Ok(Sorted::Memory(self.buf));
        }
        let file = temp()?;
        let mut merged = Sorter::merge(vec![self]);
        let mut out = BufWriter::with_capacity(1 << 16, &file);
        let (mut count, mut bytes) = (0u64, Vec::with_capacity(T::LEN));
        for r in merged.by_ref() {
            bytes.clear();
            r.encode(&mut bytes);
            out.write_all(&bytes).map_err(|e| io_err("cannot write a sorted list", e))?;
            count += 1;
        }
        if let Some(e) = merged.error() {
            return Err(e);
        }
        out.flush().map_err(|e| io_err("cannot write a sorted list", e))?;
        drop(out);
        Ok(Sorted::Disk { file: Arc::new(file), count })
    }
}

/// Records in order, to be read from the start as often as asked ([`Sorter::into_sorted`]).
pub(crate) enum Sorted<T: Record> {
    /// At most one run's worth.
    Memory(Vec<T>),
    /// `count` records in a temporary file.
    Disk { file: Arc<File>, count: u64 },
}

impl<T: Record> Sorted<T> {
    /// The records from the first; [`Merged::error`] says why it ended early, if it did.
    pub(crate) fn read(&self) -> Merged<T> {
        let source = match self {
            Sorted::Memory(v) => Run::Memory(v.clone().into_iter()),
            Sorted::Disk { file, count } => Run::Disk { file: file.clone(), pos: 0, left: *count, buf: Vec::new(), at: 0 },
        };
        let mut m = Merged { heap: BinaryHeap::new(), sources: vec![source], error: None };
        m.refill(0);
        m
    }
}

enum Run<T> {
    Memory(std::vec::IntoIter<T>),
    Disk { file: Arc<File>, pos: u64, left: u64, buf: Vec<u8>, at: usize },
}

impl<T: Record> Run<T> {
    fn next(&mut self) -> Result<Option<T>> {
        match self {
            Run::Memory(it) => Ok(it.next()),
            Run::Disk { file, pos, left, buf, at } => {
                if *at >= buf.len() {
                    if *left == 0 {
                        return Ok(None);
                    }
                    // 64 KiB of references at a time from each run.
                    let n = (*left).min(((64 << 10) / T::LEN) as u64);
                    buf.resize(n as usize * T::LEN, 0);
                    if read_at_most(file, buf, *pos)? != buf.len() {
                        return Err(Error::new(ErrorKind::Io, "a temporary file of chunk references ended early"));
                    }
                    *pos += buf.len() as u64;
                    *left -= n;
                    *at = 0;
                }
                let c = T::decode(&buf[*at..*at + T::LEN]);
                *at += T::LEN;
                Ok(Some(c))
            }
        }
    }
}

/// [`ChunkSorter::merge`]: an iterator over references in order. A temporary file that cannot
/// be read ends it early; [`Merged::error`] then says why.
pub(crate) struct Merged<T: Record> {
    heap: BinaryHeap<Reverse<(T, usize)>>,
    sources: Vec<Run<T>>,
    error: Option<Error>,
}

impl<T: Record> Merged<T> {
    fn refill(&mut self, k: usize) {
        match self.sources[k].next() {
            Ok(Some(c)) => self.heap.push(Reverse((c, k))),
            Ok(None) => {}
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
    }

    /// Why the merge ended early, if it did.
    pub(crate) fn error(&mut self) -> Option<Error> {
        self.error.take()
    }
}

impl<T: Record> Iterator for Merged<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        if self.error.is_some() {
            return None;
        }
        let Reverse((c, k)) = self.heap.pop()?;
        self.refill(k);
        Some(c)
    }
}

// ---------------------------------------------------------------------------------------------
// A stripe's index

/// A stripe's index entries, encoded, on disk until its footer is written.
pub(crate) struct IndexSpill {
    out: BufWriter<File>,
    buf: Vec<u8>,
    /// Entries written.
    pub(crate) count: u64,
    /// Their raw bytes.
    pub(crate) raw_bytes: u64,
}

impl IndexSpill {
    /// An empty index.
    ///
    /// # Errors
    /// No temporary file can be made.
    pub(crate) fn new() -> Result<Self> {
        Ok(IndexSpill { out: BufWriter::with_capacity(1 << 16, temp()?), buf: Vec::with_capacity(64), count: 0, raw_bytes: 0 })
    }

    /// Append an entry.
    ///
    /// # Errors
    /// The temporary file cannot be written.
    pub(crate) fn push(&mut self, e: &IndexEntry) -> Result<()> {
        self.buf.clear();
        e.encode_into(&mut self.buf);
        self.out.write_all(&self.buf).map_err(|e| io_err("cannot write a stripe's index", e))?;
        self.count += 1;
        self.raw_bytes += u64::from(e.raw_len);
        Ok(())
    }

    /// The encoded index from its start, for copying into the footer.
    ///
    /// # Errors
    /// The temporary file cannot be written or rewound.
    pub(crate) fn reader(&mut self) -> Result<impl Read + '_> {
        self.out.flush().map_err(|e| io_err("cannot write a stripe's index", e))?;
        let f = self.out.get_mut();
        f.seek(SeekFrom::Start(0)).map_err(|e| io_err("cannot read a stripe's index", e))?;
        Ok(BufReader::with_capacity(1 << 16, f))
    }
}

// ---------------------------------------------------------------------------------------------
// Records waiting their turn

/// Records waiting on disk, first in, first out: a queue that grows in `TMPDIR`, not in memory.
/// Its file is made when the first record comes and cut back to nothing whenever the queue
/// empties, so it holds only the backlog.
#[derive(Default)]
pub(crate) struct Fifo {
    file: Option<File>,
    read: u64,
    write: u64,
    records: u64,
}

impl Fifo {
    /// Nothing waits.
    pub(crate) fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Append `record`.
    ///
    /// # Errors
    /// No temporary file can be made or written (a full `TMPDIR`).
    pub(crate) fn push(&mut self, record: &[u8]) -> Result<()> {
        let len = u32::try_from(record.len()).map_err(|_| Error::invalid("internal: a queued record over 4 GiB"))?;
        if self.file.is_none() {
            self.file = Some(temp()?);
        }
        let f = self.file.as_ref().expect("made above");
        let mut head = [0u8; 4];
        head.copy_from_slice(&len.to_le_bytes());
        let fail = |e| io_err("cannot write the work waiting for the readers", e);
        f.write_all_at(&head, self.write).map_err(fail)?;
        f.write_all_at(record, self.write + 4).map_err(fail)?;
        self.write += 4 + u64::from(len);
        self.records += 1;
        Ok(())
    }

    /// The oldest record into `buf` (replacing what it held); false when none waits.
    ///
    /// # Errors
    /// The temporary file cannot be read or cut back.
    pub(crate) fn pop(&mut self, buf: &mut Vec<u8>) -> Result<bool> {
        let Some(f) = self.file.as_ref().filter(|_| self.records > 0) else {
            return Ok(false);
        };
        let fail = |e| io_err("cannot read the work waiting for the readers", e);
        let mut head = [0u8; 4];
        f.read_exact_at(&mut head, self.read).map_err(fail)?;
        let len = u32::from_le_bytes(head) as usize;
        buf.clear();
        buf.resize(len, 0);
        f.read_exact_at(buf, self.read + 4).map_err(fail)?;
        self.read += 4 + len as u64;
        self.records -= 1;
        if self.records == 0 {
            f.set_len(0).map_err(fail)?;
            (self.read, self.write) = (0, 0);
        }
        Ok(true)
    }
}

// ---------------------------------------------------------------------------------------------
// Byte strings kept aside

/// Bytes a [`ByteLog`] keeps in memory before they go to its temporary file.
const LOG_MEM: usize = 8 << 20;

/// Byte strings (paths) appended and read back by their place: the newest [`LOG_MEM`] bytes in
/// memory, the rest in a temporary file, made only when they outgrow that.
#[derive(Default)]
pub(crate) struct ByteLog {
    /// The bytes from `flushed` on.
    tail: Vec<u8>,
    file: Option<File>,
    flushed: u64,
}

impl ByteLog {
    /// Append `b`; its place.
    ///
    /// # Errors
    /// The temporary file cannot be made or written.
    pub(crate) fn push(&mut self, b: &[u8]) -> Result<u64> {
        let at = self.flushed + self.tail.len() as u64;
        self.tail.extend_from_slice(b);
        if self.tail.len() >= LOG_MEM {
            if self.file.is_none() {
                self.file = Some(temp()?);
            }
            let f = self.file.as_ref().expect("made above");
            f.write_all_at(&self.tail, self.flushed).map_err(|e| io_err("cannot write a list of paths", e))?;
            self.flushed += self.tail.len() as u64;
            self.tail.clear();
        }
        Ok(at)
    }

    /// The `len` bytes pushed at `at`, into `out` (replacing what it held).
    ///
    /// # Errors
    /// The temporary file cannot be read; a place never given.
    pub(crate) fn get(&self, at: u64, len: usize, out: &mut Vec<u8>) -> Result<()> {
        out.clear();
        if at >= self.flushed {
            let from = (at - self.flushed) as usize;
            let b = self.tail.get(from..from + len).ok_or_else(|| Error::invalid("internal: a path's place past the list's end"))?;
            out.extend_from_slice(b);
            return Ok(());
        }
        out.resize(len, 0);
        let f = self.file.as_ref().ok_or_else(|| Error::invalid("internal: a path's place in no file"))?;
        f.read_exact_at(out, at).map_err(|e| io_err("cannot read a list of paths", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
    struct N(u32);

    impl Record for N {
        const LEN: usize = 4;
        fn encode(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(&self.0.to_le_bytes());
        }
        fn decode(b: &[u8]) -> N {
            N(u32::from_le_bytes(le(b, 0)))
        }
    }

    #[test]
    fn a_sorted_list_reads_in_order_again_and_again_from_memory_or_disk() {
        for n in [0u32, 5, RUN as u32 * 2 + 7] {
            let mut s = Sorter::default();
            // A scrambled order: multiplying by an odd number is a bijection mod 2^32.
            for i in 0..n {
                s.push(N(i.wrapping_mul(2_654_435_761) % (n.max(1) * 3))).unwrap();
            }
            let sorted = s.into_sorted().unwrap();
            assert_eq!(matches!(sorted, Sorted::Disk { .. }), n > RUN as u32, "{n} records");
            for _ in 0..2 {
                let mut r = sorted.read();
                let got: Vec<N> = r.by_ref().collect();
                assert!(r.error().is_none());
                assert_eq!(got.len(), n as usize);
                assert!(got.windows(2).all(|w| w[0] <= w[1]), "{n} records in order");
            }
        }
    }

    #[test]
    fn a_byte_log_gives_each_string_back_by_its_place_from_memory_or_disk() {
        let mut log = ByteLog::default();
        let s = |i: usize| format!("/restore/base/16384/{i}_{}", "x".repeat(i % 50)).into_bytes();
        let mut places = Vec::new();
        let mut i = 0;
        while log.file.is_none() || places.len() < 2 * (LOG_MEM / 40) {
            places.push((log.push(&s(i)).unwrap(), s(i).len()));
            i += 1;
        }
        assert!(log.flushed > 0 && !log.tail.is_empty(), "some on disk, some in memory");
        let mut out = Vec::new();
        for (k, (at, len)) in places.iter().enumerate().rev() {
            log.get(*at, *len, &mut out).unwrap();
            assert_eq!(out, s(k), "string {k}");
        }
        assert!(log.get(log.flushed + log.tail.len() as u64, 1, &mut out).is_err());
    }

    #[test]
    fn a_fifo_gives_records_back_in_order_and_holds_only_its_backlog() {
        let mut q = Fifo::default();
        let mut buf = Vec::new();
        assert!(!q.pop(&mut buf).unwrap(), "an empty queue gives nothing");
        let rec = |i: usize| vec![i as u8; i * 7];
        for i in 0..10 {
            q.push(&rec(i)).unwrap();
        }
        for i in 0..4 {
            assert!(q.pop(&mut buf).unwrap());
            assert_eq!(buf, rec(i));
        }
        // Pushes while it drains go behind what waits.
        q.push(&rec(20)).unwrap();
        for i in (4..10).chain([20]) {
            assert!(q.pop(&mut buf).unwrap());
            assert_eq!(buf, rec(i), "record {i}");
        }
        assert!(q.is_empty() && !q.pop(&mut buf).unwrap());
        assert_eq!(q.file.as_ref().unwrap().metadata().unwrap().len(), 0, "an emptied queue keeps no bytes on disk");
        q.push(b"again").unwrap();
        assert!(q.pop(&mut buf).unwrap());
        assert_eq!(buf, b"again");
    }

    #[test]
    fn entries_come_back_as_they_went_in() {
        let mut s = EntrySpill::new().unwrap();
        let mut odd = Entry { root: 3, path: "a/b".into(), kind: EntryKind::Symlink, target: Some("../t".into()), mode: 0o777, mtime_ns: -5, uid: 7, gid: 8, ..Default::default() };
        odd.set_path_bytes(b"x/\xff\xfe".to_vec());
        let sample = vec![
            Entry { path: String::new(), kind: EntryKind::Dir, mode: 0o700, ..Default::default() },
            Entry { path: "f".into(), size: 1 << 40, crc32c: Some(9), mtime_ns: 1_700_000_000_123_456_789, ..Default::default() },
            Entry { path: "g".into(), kind: EntryKind::Hardlink, link: Some(1), vanished: true, ..Default::default() },
            Entry { path: "h".into(), size: 100, delta: Some(Delta { bytes: 16, crc32c: 0xdead_beef }), ..Default::default() },
            Entry { path: "p".into(), kind: EntryKind::Fifo, ..Default::default() },
            odd,
        ];
        for e in &sample {
            s.push(e).unwrap();
        }
        assert_eq!(s.len(), sample.len() as u64);
        let back: Vec<Entry> = s.into_reader().unwrap().collect::<Result<_>>().unwrap();
        assert_eq!(back, sample);
    }

    #[test]
    fn outcomes_are_found_by_id_whoever_wrote_them_and_whenever() {
        let o = Outcomes::new().unwrap();
        let at = |size, vanished| Outcome { size, vanished, changed: size == 40 };
        // Two readers, interleaved ids, out of order; entry 2 and 6 never read.
        o.write(&mut vec![(5, at(50, false)), (3, at(30, true)), (4, at(40, false))]).unwrap();
        o.write(&mut vec![(1, at(10, false)), (0, at(0, false))]).unwrap();
        assert_eq!(o.get(3).unwrap(), Some(at(30, true)));
        assert_eq!(o.get(2).unwrap(), None);
        assert_eq!(o.get(99).unwrap(), None, "past the end: none");
        let mut r = o.in_order(7);
        let mut got = Vec::new();
        while let Some(x) = r.next_outcome().unwrap() {
            got.push(x);
        }
        assert_eq!(got, vec![Some(at(0, false)), Some(at(10, false)), None, Some(at(30, true)), Some(at(40, false)), Some(at(50, false)), None]);
    }

    #[test]
    fn chunk_references_merge_in_order_across_runs_and_sorters() {
        // More than a run in one sorter, a little in another: disk and memory runs together.
        let mut a = ChunkSorter::default();
        let mut b = ChunkSorter::default();
        let n = RUN * 2 + 100;
        let mut want = Vec::new();
        for i in 0..n as u64 {
            // A scrambled order of (file, offset).
            let k = (i * 2_654_435_761) % n as u64;
            let c = ChunkRef { file_id: (k / 3) as u32, offset: (k % 3) * 10, len: 10, crc: k as u32, stripe: (k % 2) as usize };
            want.push(c);
            if i % 5 == 0 { &mut b } else { &mut a }.push(c).unwrap();
        }
        assert_eq!(a.runs.len(), 1, "one run went to disk");
        want.sort_unstable();
        let mut m = ChunkSorter::merge(vec![a, b]);
        let got: Vec<ChunkRef> = m.by_ref().collect();
        assert!(m.error().is_none());
        assert_eq!(got.len(), want.len());
        assert!(got == want, "merged in (file, offset) order");
    }

    #[test]
    fn index_entries_sort_by_file_through_runs_on_disk() {
        let mut s: Sorter<ByFile> = Sorter::default();
        let n = RUN + 10;
        for i in (0..n as u64).rev() {
            s.push(ByFile(IndexEntry { file_id: (i % 7) as u32, offset: i, frame_pos: i * 3, raw_len: 1, stored_len: 2, raw_crc: 3, frame_off: 4, hash: u128::from(i) << 64 })).unwrap();
        }
        assert_eq!(s.runs.len(), 1, "one run went to disk");
        let mut m = Sorter::merge(vec![s]);
        let got: Vec<IndexEntry> = m.by_ref().map(|b| b.0).collect();
        assert!(m.error().is_none());
        assert_eq!(got.len(), n);
        assert!(got.windows(2).all(|w| (w[0].file_id, w[0].offset) < (w[1].file_id, w[1].offset)), "by file, then offset");
        assert!(got.iter().all(|e| e.frame_pos == e.offset * 3 && e.hash == u128::from(e.offset) << 64), "every field back");
    }

    #[test]
    fn an_index_reads_back_as_written() {
        let mut s = IndexSpill::new().unwrap();
        let e = IndexEntry { file_id: 1, offset: 2, frame_pos: 3, raw_len: 4, stored_len: 5, raw_crc: 6, frame_off: 7, hash: 8 };
        s.push(&e).unwrap();
        s.push(&IndexEntry { raw_len: 10, ..e }).unwrap();
        assert_eq!((s.count, s.raw_bytes), (2, 14));
        let mut bytes = Vec::new();
        s.reader().unwrap().read_to_end(&mut bytes).unwrap();
        let back = IndexEntry::decode_all(&bytes, crate::format::FORMAT_VERSION).unwrap();
        assert_eq!(back, vec![e, IndexEntry { raw_len: 10, ..e }]);
    }
}
