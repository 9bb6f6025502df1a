//! The block map of a chain: for every file of the newest set, which set holds each of its bytes
//! (the newest one that has it), so that a restore reads each needed chunk once from whichever set
//! holds it and writes each byte once. A full set alone is a chain of one, whose map is its own
//! chunks.
//!
//! Files are matched across sets by root name and path, never by id (an id is a position in one
//! manifest). A file an incremental holds in part ([`crate::manifest::Delta`]) takes the bytes it
//! does not hold from the same file in the set before it, and so on down to the set that holds it
//! whole; a byte no set holds is an inconsistent chain, refused before anything is written.
//!
//! The match is a merge, not a table ([`walk_chain`]): a set lists its files in key order (root,
//! then path name by name), so every set is read side by side, a manifest page at a time, each
//! set's chunks sorted by file in runs on disk and read back in step. The few files a source lists
//! out of order (PostgreSQL's pg_control and WAL, last) are held aside by key. What the map keeps
//! is a number per entry per set (which file of the newest it gives) and the ranges of the files
//! given only in part: a million files cost 4 MB a set, not their paths.

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::ops::Range;

use super::plan::Bits;
use super::scan::{ChunkSink, Decoded, Kept, Lane, Piece};
use crate::error::{Error, Result};
use crate::format::IndexEntry;
use crate::manifest::pages::key_order;
use crate::manifest::{BackupType, Entry, EntryKind, Manifest};
use crate::set::{BackupSet, FileInSet};
use crate::spill::{ByFile, Merged, Sorter};

/// What one set holds of one file of the chain's newest set: the file's id there, whether it
/// holds it whole (not in part), and its chunks in offset order.
pub(super) struct Held {
    pub(super) id: u32,
    pub(super) whole: bool,
    /// The bytes its entry there says its chunks hold: its size, or (in part) the changed bytes.
    pub(super) holds: u64,
    pub(super) chunks: Vec<IndexEntry>,
}

impl Held {
    fn of(id: u32, e: &Entry, chunks: Vec<IndexEntry>) -> Held {
        Held { id, whole: e.delta.is_none(), holds: e.delta.map_or(e.size, |d| d.bytes), chunks }
    }
}

/// What one set gives one file of the newest set: the bytes it is the newest holder of (sorted,
/// disjoint), and the chunks that hold them (all the file's chunks in that set, in offset order).
pub(super) struct Giving {
    /// The set, oldest first.
    pub(super) g: usize,
    /// The file's id in that set.
    pub(super) id: u32,
    pub(super) chunks: Vec<IndexEntry>,
    pub(super) ranges: Vec<Range<u64>>,
}

/// Where every byte of every file of a chain's newest set comes from. A single set restored whole
/// (no delta) needs no map: each of its chunks goes to its own file ([`BlockMap::single`]). A
/// chain's map holds a number per entry per set and the ranges of the files given in part: what
/// the sets' manifests and indexes say is read in key order, a page and a sorted run at a time
/// ([`walk_chain`]).
pub(super) struct BlockMap {
    /// One set, restored whole: every chunk is its own file's, whole.
    single: bool,
    /// Per set (oldest first), per file id of that set: the newest set's file it gives bytes of,
    /// plus one (0: it gives none).
    givers: Vec<Vec<u32>>,
    /// Per set: its files that give only some of their chunks' bytes, and which. A file of
    /// `givers` not here gives every byte of every chunk it has.
    parts: Vec<HashMap<u32, Vec<Range<u64>>>>,
    /// Per file of the newest set: every byte given is data (no zero chunk among them).
    dense: Bits,
    /// Per file of the newest set that a delta restore found partly on disk: the bytes kept.
    dropped: HashMap<u32, u64>,
}

/// Check that `sets` (oldest first) form one chain whose every byte is in some set: a full set,
/// then sets each of which names the ones before it, in order, as its chain; every file the newest
/// holds in part found down the chain (what `verify --repo` checks of each chain).
///
/// # Errors
/// [`crate::error::ErrorKind::InvalidInput`] naming the set that does not belong where it is;
/// [`crate::error::ErrorKind::Corrupt`] for bytes no set of the chain holds.
pub fn check_chain(sets: &[&BackupSet]) -> Result<()> {
    check_order(sets)?;
    walk_chain(sets, |_, _, _| Ok(()))
}

/// The first half of [`check_chain`]: the sets are the chain the newest names, in order.
pub(super) fn check_order(sets: &[&BackupSet]) -> Result<()> {
    let Some((newest, _)) = sets.split_last() else { return Err(Error::invalid("no backup set to restore")) };
    let m = &newest.manifest;
    let ids: Vec<&str> = sets.iter().map(|s| s.manifest.backup_id.as_str()).collect();
    if m.chain.iter().map(String::as_str).ne(ids[..ids.len() - 1].iter().copied()) {
        return Err(Error::invalid(if m.chain.is_empty() {
            format!("backup {} is a full backup: restore it alone", m.backup_id)
        } else {
            format!(
                "backup {} is a {} backup that builds on {}: give exactly those sets, oldest first (restore it through its repository, which finds them)",
                m.backup_id,
                m.backup_type,
                m.chain.join(", ")
            )
        }));
    }
    if sets[0].manifest.backup_type != BackupType::Full {
        return Err(Error::invalid(format!("backup {} starts the chain but is not a full backup", sets[0].manifest.backup_id)));
    }
    Ok(())
}

/// `range` less the sorted, disjoint `covered`, as sorted pieces.
pub(super) fn subtract(range: Range<u64>, covered: &[Range<u64>]) -> Vec<Range<u64>> {
    let mut out = Vec::new();
    let mut at = range.start;
    let first = covered.partition_point(|c| c.end <= range.start);
    for c in &covered[first..] {
        if c.start >= range.end {
            break;
        }
        if c.start > at {
            out.push(at..c.start);
        }
        at = at.max(c.end);
    }
    if at < range.end {
        out.push(at..range.end);
    }
    out
}

/// Add sorted, disjoint `add` to sorted, disjoint `set`, merging neighbours.
fn union(set: &mut Vec<Range<u64>>, add: &[Range<u64>]) {
    set.extend_from_slice(add);
    set.sort_unstable_by_key(|r| r.start);
    let mut merged: Vec<Range<u64>> = Vec::with_capacity(set.len());
    for r in set.drain(..) {
        match merged.last_mut() {
            Some(l) if r.start <= l.end => l.end = l.end.max(r.end),
            _ => merged.push(r),
        }
    }
    *set = merged;
}

/// The parts of `supplied` (sorted, disjoint) within `start..start + len`.
pub(super) fn within(supplied: &[Range<u64>], start: u64, len: u64) -> impl Iterator<Item = Range<u64>> + '_ {
    let end = start + len;
    let first = supplied.partition_point(|r| r.end <= start);
    supplied[first..].iter().take_while(move |r| r.start < end).map(move |r| r.start.max(start)..r.end.min(end))
}

/// Which sets give file `e` of the newest set which of its bytes, newest first, sets that give
/// nothing left out. `ids` are the chain's backup ids, oldest first; `held(g)` what set `g` holds
/// of the file (asked newest first, each set at most once, and only down to the set that holds the
/// file whole).
///
/// # Errors
/// A set before one that holds the file in part lacks it, or bytes no set gives.
fn walk_file(ids: &[&str], e: &Entry, mut held: impl FnMut(usize) -> Result<Option<Held>>) -> Result<Vec<Giving>> {
    let size = e.size;
    let mut out = Vec::new();
    // Newest first: what each set holds of the file, less what newer sets hold.
    let mut covered: Vec<Range<u64>> = Vec::new();
    let mut g = ids.len() - 1;
    loop {
        let Some(h) = held(g)? else {
            return Err(Error::corrupt(format!("file {} of backup {} builds on backup {}, which does not have it: the chain is inconsistent", e.path, ids[g + 1], ids[g])));
        };
        // What the set's open checked (its chunks tile what its manifest says it holds) holds
        // here too, or the walk lost its step.
        let bytes: u64 = h.chunks.iter().map(|c| u64::from(c.raw_len)).sum();
        if bytes != h.holds {
            return Err(Error::corrupt(format!("file {} of backup {}: its chunks hold {bytes} bytes where its entry says {}", e.path, ids[g], h.holds)));
        }
        let mut ranges = Vec::new();
        for c in &h.chunks {
            let r = c.offset.min(size)..(c.offset + u64::from(c.raw_len)).min(size);
            if !r.is_empty() {
                ranges.extend(subtract(r, &covered));
            }
        }
        union(&mut covered, &spans(&h.chunks));
        union(&mut ranges, &[]);
        let whole = h.whole;
        if !ranges.is_empty() {
            out.push(Giving { g, id: h.id, chunks: h.chunks, ranges });
        }
        // A whole file ends the walk: nothing older counts. So does the full set.
        if whole || g == 0 {
            break;
        }
        g -= 1;
    }
    if let Some(r) = subtract(0..size, &covered).first() {
        return Err(Error::corrupt(format!(
            "file {} of backup {}: bytes {}..{} are in no set of its chain: the chain is inconsistent",
            e.path,
            ids[ids.len() - 1],
            r.start,
            r.end
        )));
    }
    Ok(out)
}

/// The byte ranges of `chunks`, as they are.
fn spans(chunks: &[IndexEntry]) -> Vec<Range<u64>> {
    chunks.iter().map(|c| c.offset..c.offset + u64::from(c.raw_len)).collect()
}

/// A file's key in a chain: the root as the newest set numbers them, then the path's bytes.
fn key_bytes(root: u16, path: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + path.len());
    k.extend_from_slice(&root.to_be_bytes());
    k.extend_from_slice(path);
    k
}

/// Whether `key` comes after every key before it (`last`, which it then becomes): what keeps a
/// set's regular files in key order. The few a source lists apart (PostgreSQL's pg_control and
/// WAL, last) do not, and are held aside.
fn in_order(last: &mut Option<(u16, Vec<u8>)>, key: (u16, &[u8])) -> bool {
    match last {
        Some((r, p)) if key_order((*r, p), key) != Ordering::Less => false,
        // The buffer kept from one entry to the next: no allocation per entry.
        Some((r, p)) => {
            *r = key.0;
            p.clear();
            p.extend_from_slice(key.1);
            true
        }
        None => {
            *last = Some((key.0, key.1.to_vec()));
            true
        }
    }
}

fn is_file(e: &Entry) -> bool {
    e.kind == EntryKind::File && !e.vanished
}

/// One set of a chain read in key order: its regular files in key order (a page at a time when
/// it is opened lean), the few out of order held aside, and its chunks file by file (sorted in
/// runs on disk when its index is not held).
struct Walk<'s> {
    /// This set's root numbers in the newest set's numbering (`u16::MAX`: a root it lacks).
    roots: Vec<u16>,
    /// Files out of key order, by key, and their chunks by id (none for a file without chunks).
    apart: HashMap<Vec<u8>, (u32, Entry)>,
    apart_chunks: HashMap<u32, Vec<IndexEntry>>,
    entries: Box<dyn Iterator<Item = Result<(u32, Entry)>> + 's>,
    /// The next file in key order, read ahead, and the greatest key so far.
    next: Option<(u32, Entry)>,
    last: Option<(u16, Vec<u8>)>,
    chunks: Merged<ByFile>,
    next_chunk: Option<IndexEntry>,
}

impl<'s> Walk<'s> {
    fn new(set: &'s BackupSet, newest: &Manifest) -> Result<Walk<'s>> {
        let roots: Vec<u16> = set.manifest.roots.iter().map(|r| newest.roots.iter().position(|n| n.name == r.name).map_or(u16::MAX, |i| i as u16)).collect();
        let key_of = |e: &Entry| roots.get(e.root as usize).copied().unwrap_or(u16::MAX);
        // The files out of key order, found in a first pass, unless the manifest says there are
        // none. Roots numbered otherwise than in the newest set can put files out of order too.
        let mut apart = HashMap::new();
        let renumbered = roots.iter().enumerate().any(|(i, &r)| r as usize != i);
        if !set.in_key_order() || renumbered {
            let mut last = None;
            set.each_entry(|id, e| {
                if is_file(e) && !in_order(&mut last, (key_of(e), e.path_bytes())) {
                    apart.insert(key_bytes(key_of(e), e.path_bytes()), (id, e.clone()));
                }
                Ok(())
            })?;
        }
        // Their chunks aside; the others sorted by file.
        let ids: HashSet<u32> = apart.values().map(|(id, _)| *id).collect();
        let mut apart_chunks: HashMap<u32, Vec<IndexEntry>> = HashMap::new();
        // One sorter for all the set's stripes: what it holds in memory is one run, whatever the
        // number of stripes.
        let mut sorter = if set.is_lean() { Sorter::default() } else { Sorter::in_memory() };
        for s in &set.stripes {
            for c in s.index_entries()? {
                let c = c?;
                if ids.contains(&c.file_id) {
                    apart_chunks.entry(c.file_id).or_default().push(c);
                } else {
                    sorter.push(ByFile(c))?;
                }
            }
        }
        for v in apart_chunks.values_mut() {
            v.sort_unstable_by_key(|c| c.offset);
        }
        let chunks = Sorter::merge(vec![sorter]);
        let mut w = Walk { roots, apart, apart_chunks, entries: set.entries(), next: None, last: None, chunks, next_chunk: None };
        w.advance()?;
        w.next_chunk = w.chunks.next().map(|c| c.0);
        Ok(w)
    }

    fn key(&self, e: &Entry) -> u16 {
        self.roots.get(e.root as usize).copied().unwrap_or(u16::MAX)
    }

    /// Read ahead to the next file in key order.
    fn advance(&mut self) -> Result<()> {
        self.next = None;
        while let Some(x) = self.entries.next() {
            let (id, e) = x?;
            let root = self.key(&e);
            if is_file(&e) && in_order(&mut self.last, (root, e.path_bytes())) {
                self.next = Some((id, e));
                break;
            }
        }
        Ok(())
    }

    /// The chunks of file `id`, in key order, which comes after every such file asked before it
    /// (a file apart has its own: [`Walk::apart_chunks`]).
    fn chunks_of(&mut self, id: u32) -> Result<Vec<IndexEntry>> {
        let mut out = Vec::new();
        while let Some(c) = self.next_chunk.filter(|c| c.file_id <= id) {
            if c.file_id == id {
                out.push(c);
            }
            self.next_chunk = self.chunks.next().map(|c| c.0);
        }
        if self.next_chunk.is_none() {
            if let Some(e) = self.chunks.error() {
                return Err(e);
            }
        }
        Ok(out)
    }

    /// What this set holds of the file with `key` (the newest set's root numbering), asked in
    /// key order.
    fn find(&mut self, root: u16, path: &[u8]) -> Result<Option<Held>> {
        if !self.apart.is_empty() {
            if let Some((id, e)) = self.apart.remove(&key_bytes(root, path)) {
                let chunks = self.apart_chunks.remove(&id).unwrap_or_default();
                return Ok(Some(Held::of(id, &e, chunks)));
            }
        }
        loop {
            let Some((_, e)) = &self.next else { return Ok(None) };
            match key_order((self.key(e), e.path_bytes()), (root, path)) {
                Ordering::Less => self.advance()?,
                Ordering::Greater => return Ok(None),
                Ordering::Equal => {
                    let (id, e) = self.next.take().expect("just matched");
                    self.advance()?;
                    let chunks = self.chunks_of(id)?;
                    return Ok(Some(Held::of(id, &e, chunks)));
                }
            }
        }
    }

    /// The next file of the newest set in key order (its own walk), with its chunks; `apart` is
    /// its files out of order, sorted by key, the next last.
    fn next_newest(&mut self, apart: &mut Vec<(u32, Entry)>) -> Result<Option<(u32, Entry, Vec<IndexEntry>)>> {
        let from_apart = match (&self.next, apart.last()) {
            (None, None) => return Ok(None),
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (Some((_, a)), Some((_, b))) => key_order((b.root, b.path_bytes()), (a.root, a.path_bytes())) == Ordering::Less,
        };
        if from_apart {
            let (id, e) = apart.pop().expect("checked");
            let chunks = self.apart_chunks.remove(&id).unwrap_or_default();
            return Ok(Some((id, e, chunks)));
        }
        let (id, e) = self.next.take().expect("checked");
        self.advance()?;
        let chunks = self.chunks_of(id)?;
        Ok(Some((id, e, chunks)))
    }
}

/// Walk the chain `sets` (oldest first) file by file of the newest set, in key order: `each` gets
/// every regular file of the newest set with what each set gives of it. Memory: a page of entries
/// and the read buffers of the sorted chunk runs per set, and the files out of key order.
///
/// # Errors
/// A file an incremental holds in part that the set before it lacks, bytes no set holds; a page or
/// index that cannot be read; `each`'s.
pub(super) fn walk_chain(sets: &[&BackupSet], mut each: impl FnMut(u32, &Entry, Vec<Giving>) -> Result<()>) -> Result<()> {
    let (newest, _) = sets.split_last().ok_or_else(|| Error::invalid("no backup set to restore"))?;
    let ids: Vec<&str> = sets.iter().map(|s| s.manifest.backup_id.as_str()).collect();
    let mut walks: Vec<Walk> = sets.iter().map(|s| Walk::new(s, &newest.manifest)).collect::<Result<_>>()?;
    let (own, older) = walks.split_last_mut().expect("at least one set");
    let mut apart: Vec<(u32, Entry)> = own.apart.drain().map(|(_, x)| x).collect();
    apart.sort_unstable_by(|(_, a), (_, b)| key_order((b.root, b.path_bytes()), (a.root, a.path_bytes())));
    while let Some((f, e, chunks)) = own.next_newest(&mut apart)? {
        let mut mine = Some(Held::of(f, &e, chunks));
        let givings = walk_file(&ids, &e, |g| match older.get_mut(g) {
            Some(w) => w.find(e.root, e.path_bytes()),
            None => Ok(mine.take()),
        })?;
        each(f, &e, givings)?;
    }
    Ok(())
}

/// One file of a chain's newest set, read in parts from only the frames that hold them, in
/// whichever set of the chain gives each byte (what extracting a relation or a page needs).
pub struct ChainFile<'a> {
    /// Which set gives which bytes, in offset order: (range, position in `files`).
    parts: Vec<(Range<u64>, usize)>,
    files: Vec<FileInSet<'a>>,
    size: u64,
}

/// File `file_id` of the newest of `sets` (a chain, oldest first; a full set alone is one).
///
/// # Errors
/// Sets that are not one chain, or a chain that does not hold every byte of the file; an entry
/// that is not a regular file.
pub fn chain_file<'a>(sets: &[&'a BackupSet], file_id: u32) -> Result<ChainFile<'a>> {
    check_order(sets)?;
    let newest = sets.last().expect("checked: at least one set");
    let e = newest.manifest.entries.get(file_id as usize).ok_or_else(|| Error::invalid(format!("the backup has no entry {file_id}")))?;
    if e.kind != EntryKind::File {
        return Err(Error::invalid(format!("{} is not a regular file in the backup", e.path)));
    }
    let root = newest.manifest.roots[e.root as usize].name.as_str();
    let ids: Vec<&str> = sets.iter().map(|s| s.manifest.backup_id.as_str()).collect();
    let held = |g: usize| -> Result<Option<Held>> {
        let s = sets[g];
        let m = &s.manifest;
        let Some(id) = m.entries.iter().position(|x| is_file(x) && m.roots[x.root as usize].name == root && x.path_bytes() == e.path_bytes()) else { return Ok(None) };
        let id = id as u32;
        let mut chunks: Vec<IndexEntry> = Vec::new();
        for st in &s.stripes {
            for c in st.index_entries()? {
                let c = c?;
                if c.file_id == id {
                    chunks.push(c);
                }
            }
        }
        chunks.sort_unstable_by_key(|c| c.offset);
        Ok(Some(Held::of(id, &m.entries[id as usize], chunks)))
    };
    let walked = walk_file(&ids, e, held)?;
    let mut parts = Vec::new();
    let mut files = Vec::new();
    for gv in walked {
        parts.extend(gv.ranges.into_iter().map(|r| (r, files.len())));
        files.push(sets[gv.g].file(gv.id)?);
    }
    parts.sort_unstable_by_key(|(r, _)| r.start);
    Ok(ChainFile { parts, files, size: e.size })
}

impl ChainFile<'_> {
    /// The file's size in the newest set.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Bytes read from the stripes so far.
    pub fn bytes_read(&self) -> u64 {
        self.files.iter().map(|f| f.bytes_read).sum()
    }

    /// Fill `out` with the file's bytes from `offset`, each from the set that gives it.
    ///
    /// # Errors
    /// A range past the file's end; damage in a frame read (naming set, stripe and frame).
    pub fn read_at(&mut self, offset: u64, out: &mut [u8]) -> Result<()> {
        let end = offset
            .checked_add(out.len() as u64)
            .filter(|&e| e <= self.size)
            .ok_or_else(|| Error::invalid(format!("bytes {offset}..+{} are past the end of the file ({} bytes)", out.len(), self.size)))?;
        let first = self.parts.partition_point(|(r, _)| r.end <= offset);
        for (r, k) in &self.parts[first..] {
            if r.start >= end {
                break;
            }
            let (from, to) = (r.start.max(offset), r.end.min(end));
            self.files[*k].read_at(from, &mut out[(from - offset) as usize..(to - offset) as usize])?;
        }
        Ok(())
    }
}

impl BlockMap {
    /// The map of the chain `sets` (oldest first; in order, [`check_order`]), nothing found on
    /// disk yet; `data(f, bytes)` hears, for each file of the newest set, the bytes that come from
    /// data chunks (not zero chunks).
    ///
    /// # Errors
    /// As [`walk_chain`].
    pub(super) fn new(sets: &[&BackupSet], mut data: impl FnMut(u32, u64) -> Result<()>) -> Result<BlockMap> {
        let mut map = BlockMap::empty(sets);
        walk_chain(sets, |f, e, givings| {
            let bytes = map.record(f, e, &givings, 0);
            data(f, bytes)
        })?;
        Ok(map)
    }

    /// A chain's map with nothing in it yet: see [`BlockMap::record`].
    pub(super) fn empty(sets: &[&BackupSet]) -> BlockMap {
        let newest = sets.last().map_or(0, |s| s.entry_count());
        BlockMap {
            single: false,
            givers: sets.iter().map(|s| vec![0; s.entry_count()]).collect(),
            parts: sets.iter().map(|_| HashMap::new()).collect(),
            dense: Bits::new(newest),
            dropped: HashMap::new(),
        }
    }

    /// Note what `givings` give file `f` (entry `e`) of the newest set, `dropped` bytes of it
    /// having been found on disk already (taken out of the givings' ranges). Returns the bytes
    /// that come from data chunks.
    pub(super) fn record(&mut self, f: u32, e: &Entry, givings: &[Giving], dropped: u64) -> u64 {
        let mut data = 0;
        for gv in givings.iter().filter(|gv| !gv.ranges.is_empty()) {
            if let Some(slot) = self.givers.get_mut(gv.g).and_then(|v| v.get_mut(gv.id as usize)) {
                *slot = f + 1;
            }
            let mut held = Vec::new();
            union(&mut held, &spans(&gv.chunks));
            if gv.ranges != held {
                self.parts[gv.g].insert(gv.id, gv.ranges.clone());
            }
            for c in gv.chunks.iter().filter(|c| c.stored_len > 0) {
                data += within(&gv.ranges, c.offset, c.raw_len.into()).map(|r| r.end - r.start).sum::<u64>();
            }
        }
        if data == e.size {
            self.dense.set(f);
        }
        if dropped > 0 {
            self.dropped.insert(f, dropped);
        }
        data
    }

    /// The map of one set restored whole: none is needed (see [`BlockMap`]).
    pub(super) fn single() -> BlockMap {
        BlockMap { single: true, givers: Vec::new(), parts: Vec::new(), dense: Bits::new(0), dropped: HashMap::new() }
    }

    /// One set restored whole: its chunks go to the writer as they are ([`BlockMap::sink`] is
    /// not needed).
    pub(super) fn is_single(&self) -> bool {
        self.single
    }

    /// Bytes the restore writes into file `f` of the newest set, whose entry is `e`: all of them
    /// (each given once, by one set), less what a delta restore found on disk already.
    pub(super) fn expected(&self, f: u32, e: &Entry) -> u64 {
        e.size - self.dropped.get(&f).copied().unwrap_or(0)
    }

    /// A chain's file `f` of the newest set gets only data chunks (no zero chunk): worth
    /// reserving its blocks.
    pub(super) fn dense(&self, f: u32) -> bool {
        self.dense.get(f)
    }

    /// What set `g` gives of chunk `offset..offset + len` of its file `file_id`: the newest set's
    /// file, and the pieces.
    fn cut(&self, g: usize, file_id: u32, offset: u64, len: u64) -> Option<(u32, Vec<Range<u64>>)> {
        let f = self.giver(g, file_id)?;
        let pieces = match self.parts[g].get(&file_id) {
            Some(ranges) => within(ranges, offset, len).collect(),
            None => std::iter::once(offset..offset + len).collect(),
        };
        Some((f, pieces))
    }

    /// The newest set's file that set `g`'s file `file_id` gives bytes of.
    fn giver(&self, g: usize, file_id: u32) -> Option<u32> {
        self.givers.get(g)?.get(file_id as usize)?.checked_sub(1)
    }

    /// The newest set's file that set `g`'s chunk `e` gives some bytes of ([`BlockMap::cut`]
    /// without making the pieces: the scan asks it of every chunk).
    fn gives(&self, g: usize, e: &IndexEntry) -> Option<u32> {
        let f = self.giver(g, e.file_id)?;
        match self.parts[g].get(&e.file_id) {
            Some(ranges) => within(ranges, e.offset, e.raw_len.into()).next().map(|_| f),
            None => Some(f),
        }
    }

    /// The sink that takes set `g`'s chunks to `inner`, keyed by the newest set's file ids and cut
    /// to what `g` gives.
    pub(super) fn sink<'s>(&'s self, g: usize, inner: &'s dyn ChunkSink) -> SetSink<'s> {
        SetSink { map: self, g, inner }
    }
}

/// One set's chunks, translated: see [`BlockMap::sink`].
pub(super) struct SetSink<'s> {
    map: &'s BlockMap,
    g: usize,
    inner: &'s dyn ChunkSink,
}

impl ChunkSink for SetSink<'_> {
    fn lane(&self) -> Result<Box<dyn Lane + '_>> {
        Ok(Box::new(SetLane { map: self.map, g: self.g, inner: self.inner.lane()? }))
    }

    fn holds(&self) -> usize {
        self.inner.holds()
    }

    fn wants(&self, file_id: u32) -> bool {
        self.map.giver(self.g, file_id).is_some_and(|f| self.inner.wants(f))
    }

    fn wants_chunk(&self, e: &IndexEntry) -> bool {
        self.map.gives(self.g, e).is_some_and(|f| self.inner.wants(f))
    }
}

struct SetLane<'s> {
    map: &'s BlockMap,
    g: usize,
    inner: Box<dyn Lane + 's>,
}

impl Lane for SetLane<'_> {
    fn chunk(&mut self, file_id: u32, offset: u64, len: usize, data: Option<&[u8]>) -> Result<()> {
        let Some((f, pieces)) = self.map.cut(self.g, file_id, offset, len as u64) else { return Ok(()) };
        for r in pieces {
            let (from, n) = ((r.start - offset) as usize, (r.end - r.start) as usize);
            self.inner.chunk(f, r.start, n, data.map(|d| &d[from..from + n]))?;
        }
        Ok(())
    }

    fn owned(&mut self, file_id: u32, offset: u64, data: Decoded) -> Result<()> {
        let len = data.len() as u64;
        let Some((f, pieces)) = self.map.cut(self.g, file_id, offset, len) else { return Ok(()) };
        match pieces.as_slice() {
            [] => Ok(()),
            // Wholly given: the buffer goes on as it is (a direct write in flight).
            [r] if *r == (offset..offset + len) => self.inner.owned(f, offset, data),
            _ => {
                let pieces: Vec<Piece> = pieces.iter().map(|r| (f, r.start, (r.start - offset) as usize..(r.end - offset) as usize)).collect();
                self.inner.owned_pieces(data, &pieces)
            }
        }
    }

    fn owned_pieces(&mut self, data: Decoded, pieces: &[Piece]) -> Result<()> {
        // Each piece cut to what this set gives, under the newest set's ids.
        let mut given = Vec::with_capacity(pieces.len());
        for (file_id, offset, r) in pieces {
            let Some((f, cut)) = self.map.cut(self.g, *file_id, *offset, r.len() as u64) else { continue };
            given.extend(cut.into_iter().map(|c| (f, c.start, r.start + (c.start - offset) as usize..r.start + (c.end - offset) as usize)));
        }
        if given.is_empty() {
            return Ok(());
        }
        self.inner.owned_pieces(data, &given)
    }

    fn takes_stored(&mut self, raw_len: usize, codec: crate::codec::CodecKind, live: &mut Vec<Kept>) -> bool {
        // The bytes this set gives, under the newest set's ids: the rest of the frame is
        // superseded (a newer set gives it). The sink decides whether that is worth a copy (a
        // restore's never is: it writes only what is given).
        let mut given = Vec::with_capacity(live.len());
        for k in live.iter() {
            let Some((f, pieces)) = self.map.cut(self.g, k.file_id, k.offset, k.len.into()) else { continue };
            given.extend(pieces.into_iter().map(|r| Kept { file_id: f, offset: r.start, at: k.at + (r.start - k.offset) as u32, len: (r.end - r.start) as u32 }));
        }
        *live = given;
        !live.is_empty() && self.inner.takes_stored(raw_len, codec, live)
    }

    fn stored(&mut self, raw_len: usize, codec: crate::codec::CodecKind, payload: &[u8], raw_crc: u32, live: &[Kept]) -> Result<()> {
        self.inner.stored(raw_len, codec, payload, raw_crc, live)
    }

    fn finish(&mut self) -> Result<()> {
        self.inner.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_subtract_and_merge() {
        assert_eq!(subtract(0..100, &[10..20, 30..40]), vec![0..10, 20..30, 40..100]);
        assert_eq!(subtract(15..35, &[10..20, 30..40]), vec![20..30]);
        assert_eq!(subtract(0..10, std::slice::from_ref(&(0..10))), Vec::<Range<u64>>::new());
        let mut s = vec![0..10, 30..40];
        union(&mut s, &[10..20, 35..50]);
        assert_eq!(s, vec![0..20, 30..50]);
        assert_eq!(within(&[0..10, 20..30, 40..50], 5, 20).collect::<Vec<_>>(), vec![5..10, 20..25]);
    }
}
