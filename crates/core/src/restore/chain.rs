//! The block map of a chain: for every file of the newest set, which set holds each of its bytes
//! (the newest one that has it), so that a restore reads each needed chunk once from whichever set
//! holds it and writes each byte once. A full set alone is a chain of one, whose map is its own
//! chunks.
//!
//! Files are matched across sets by root name and path, never by id (an id is a position in one
//! manifest). A file an incremental holds in part ([`crate::manifest::Delta`]) takes the bytes it
//! does not hold from the same file in the set before it, and so on down to the set that holds it
//! whole; a byte no set holds is an inconsistent chain, refused before anything is written.

use std::collections::HashMap;
use std::ops::Range;

use super::scan::{ChunkSink, Decoded, Lane};
use crate::error::{Error, Result};
use crate::format::IndexEntry;
use crate::manifest::{BackupType, EntryKind, Manifest};
use crate::set::{BackupSet, FileInSet};

/// What one set of a chain gives one file of the newest set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Supply {
    /// The file's position in the newest set's entries.
    pub(super) file: u32,
    /// The byte ranges this set is the newest holder of, sorted and disjoint.
    pub(super) ranges: Vec<Range<u64>>,
}

/// Where every byte of every file of a chain's newest set comes from. A single set restored whole
/// (no delta) needs no map: each of its chunks goes to its own file, and nothing is held per
/// file ([`BlockMap::single`]).
pub(super) struct BlockMap {
    /// One set, restored whole: every chunk is its own file's, whole.
    single: bool,
    /// Per set (oldest first), per file id of that set: what it gives, if anything.
    supplies: Vec<Vec<Option<Supply>>>,
    /// Per file of the newest set: bytes that come from data chunks (not zero chunks).
    data_bytes: Vec<u64>,
    /// Per file of the newest set: bytes a delta restore found on disk already, not written.
    dropped: Vec<u64>,
}

/// Check that `sets` (oldest first) form one chain whose every byte is in some set: a full set,
/// then sets each of which names the ones before it, in order, as its chain; every file the newest
/// holds in part found down the chain (what `verify --repo` checks of each chain).
///
/// # Errors
/// [`crate::ErrorKind::InvalidInput`] naming the set that does not belong where it is;
/// [`crate::ErrorKind::Corrupt`] for bytes no set of the chain holds.
pub fn check_chain(sets: &[&BackupSet]) -> Result<()> {
    check_order(sets)?;
    BlockMap::new(sets).map(|_| ())
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

/// (root name, path bytes) of each regular file of a manifest, to its position.
fn by_name(m: &Manifest) -> HashMap<(&str, &[u8]), u32> {
    m.entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind == EntryKind::File && !e.vanished)
        .map(|(i, e)| ((m.roots[e.root as usize].name.as_str(), e.path_bytes()), i as u32))
        .collect()
}

/// Chunks of a set by file id, sorted by offset: one flat list and where each file's run starts
/// in it (a list per file cost a million small allocations, 256 MB, for a million files).
struct FileChunks {
    entries: Vec<IndexEntry>,
    /// `starts[id]..starts[id + 1]` is file `id`'s run.
    starts: Vec<u32>,
}

impl FileChunks {
    fn of(&self, id: u32) -> &[IndexEntry] {
        match (self.starts.get(id as usize), self.starts.get(id as usize + 1)) {
            (Some(&a), Some(&b)) => &self.entries[a as usize..b as usize],
            _ => &[],
        }
    }
}

/// Chunks of `set` per file id, sorted by offset.
fn chunks_by_file(set: &BackupSet) -> FileChunks {
    let files = set.manifest.entries.len();
    let mut entries: Vec<IndexEntry> = set.stripes.iter().flat_map(|s| s.index.iter()).filter(|e| (e.file_id as usize) < files).copied().collect();
    entries.sort_unstable_by_key(|e| (e.file_id, e.offset));
    let mut starts = Vec::with_capacity(files + 1);
    let mut at = 0usize;
    for id in 0..=files {
        while at < entries.len() && (entries[at].file_id as usize) < id {
            at += 1;
        }
        starts.push(at as u32);
    }
    FileChunks { entries, starts }
}

/// `range` less the sorted, disjoint `covered`, as sorted pieces.
fn subtract(range: Range<u64>, covered: &[Range<u64>]) -> Vec<Range<u64>> {
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
fn within(supplied: &[Range<u64>], start: u64, len: u64) -> impl Iterator<Item = Range<u64>> + '_ {
    let end = start + len;
    let first = supplied.partition_point(|r| r.end <= start);
    supplied[first..].iter().take_while(move |r| r.start < end).map(move |r| r.start.max(start)..r.end.min(end))
}

/// What one set gives of one file: (set, the file's id there, the ranges it gives).
type Given = (usize, u32, Vec<Range<u64>>);

/// Which sets give file `f` of the newest set which of its bytes: as (set, the file's id there,
/// ranges), newest first, sets that give nothing left out. `find(g)` is the file's id in set `g`,
/// `chunks(g, id)` that file's chunks there in offset order.
///
/// # Errors
/// A set before one that holds the file in part lacks it, or bytes no set gives.
fn walk_file<'c>(
    sets: &[&BackupSet],
    f: u32,
    find: impl Fn(usize) -> Option<u32>,
    chunks: impl Fn(usize, u32) -> &'c [IndexEntry],
) -> Result<Vec<Given>> {
    let newest = sets.last().expect("checked: at least one set");
    let e = &newest.manifest.entries[f as usize];
    let size = e.size;
    let mut out = Vec::new();
    // Newest first: what each set holds of the file, less what newer sets hold.
    let mut covered: Vec<Range<u64>> = Vec::new();
    let mut g = sets.len() - 1;
    loop {
        let m = &sets[g].manifest;
        let Some(id) = find(g) else {
            return Err(Error::corrupt(format!(
                "file {} of backup {} builds on backup {}, which does not have it: the chain is inconsistent",
                e.path,
                sets[g + 1].manifest.backup_id,
                m.backup_id
            )));
        };
        let here = &m.entries[id as usize];
        let mut ranges = Vec::new();
        for c in chunks(g, id) {
            let r = c.offset.min(size)..(c.offset + u64::from(c.raw_len)).min(size);
            if !r.is_empty() {
                ranges.extend(subtract(r, &covered));
            }
        }
        let held: Vec<Range<u64>> = chunks(g, id).iter().map(|c| c.offset..c.offset + u64::from(c.raw_len)).collect();
        union(&mut covered, &held);
        union(&mut ranges, &[]);
        if !ranges.is_empty() {
            out.push((g, id, ranges));
        }
        // A whole file ends the walk: nothing older counts. So does the full set.
        if here.delta.is_none() || g == 0 {
            break;
        }
        g -= 1;
    }
    if let Some(r) = subtract(0..size, &covered).first() {
        return Err(Error::corrupt(format!(
            "file {} of backup {}: bytes {}..{} are in no set of its chain: the chain is inconsistent",
            e.path, newest.manifest.backup_id, r.start, r.end
        )));
    }
    Ok(out)
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
    let find = |g: usize| {
        let m = &sets[g].manifest;
        m.entries.iter().position(|x| x.kind == EntryKind::File && !x.vanished && m.roots[x.root as usize].name == root && x.path_bytes() == e.path_bytes()).map(|i| i as u32)
    };
    let ids: Vec<Option<u32>> = (0..sets.len()).map(find).collect();
    let chunks: Vec<Vec<IndexEntry>> = sets
        .iter()
        .zip(&ids)
        .map(|(s, id)| {
            let mut v: Vec<IndexEntry> = id.map(|id| s.stripes.iter().flat_map(|x| x.index.iter()).filter(|c| c.file_id == id).copied().collect()).unwrap_or_default();
            v.sort_unstable_by_key(|c| c.offset);
            v
        })
        .collect();
    let walked = walk_file(sets, file_id, |g| ids[g], |g, _| &chunks[g])?;
    let mut parts = Vec::new();
    let mut files = Vec::new();
    for (g, id, ranges) in walked {
        parts.extend(ranges.into_iter().map(|r| (r, files.len())));
        files.push(sets[g].file(id)?);
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
        let end = offset.checked_add(out.len() as u64).filter(|&e| e <= self.size).ok_or_else(|| {
            Error::invalid(format!("bytes {offset}..+{} are past the end of the file ({} bytes)", out.len(), self.size))
        })?;
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
    /// The map of the chain `sets` (oldest first; checked with [`check_chain`]).
    ///
    /// # Errors
    /// [`crate::ErrorKind::Corrupt`] for a file an incremental holds in part that the set before it
    /// lacks, or bytes of a file no set holds.
    pub(super) fn new(sets: &[&BackupSet]) -> Result<BlockMap> {
        if sets.iter().any(|s| s.is_lean()) {
            return Err(Error::invalid("internal: a chain's block map needs its sets opened whole, not lean"));
        }
        let newest = sets.last().expect("checked: at least one set");
        let files = newest.manifest.entries.len();
        let mut supplies: Vec<Vec<Option<Supply>>> = sets.iter().map(|s| vec![None; s.manifest.entries.len()]).collect();
        // By name in the older sets only: in the newest a file is its own id.
        let last = sets.len() - 1;
        let names: Vec<HashMap<(&str, &[u8]), u32>> = sets[..last].iter().map(|s| by_name(&s.manifest)).collect();
        let chunks: Vec<FileChunks> = sets.iter().map(|s| chunks_by_file(s)).collect();
        for (f, e) in newest.manifest.entries.iter().enumerate() {
            if e.kind != EntryKind::File || e.vanished {
                continue;
            }
            let key = (newest.manifest.roots[e.root as usize].name.as_str(), e.path_bytes());
            let walked = walk_file(sets, f as u32, |g| if g == last { Some(f as u32) } else { names[g].get(&key).copied() }, |g, id| chunks[g].of(id))?;
            for (g, id, ranges) in walked {
                supplies[g][id as usize] = Some(Supply { file: f as u32, ranges });
            }
        }
        // Each file's data bytes.
        let mut data_bytes = vec![0u64; files];
        for (g, set) in sets.iter().enumerate() {
            for c in set.stripes.iter().flat_map(|s| s.index.iter()) {
                let Some(Some(s)) = supplies[g].get(c.file_id as usize) else { continue };
                if c.stored_len > 0 {
                    data_bytes[s.file as usize] += within(&s.ranges, c.offset, c.raw_len.into()).map(|r| r.end - r.start).sum::<u64>();
                }
            }
        }
        Ok(BlockMap { single: false, supplies, data_bytes, dropped: vec![0; files] })
    }

    /// The map of one set restored whole: none is needed (see [`BlockMap`]).
    pub(super) fn single() -> BlockMap {
        BlockMap { single: true, supplies: Vec::new(), data_bytes: Vec::new(), dropped: Vec::new() }
    }

    /// One set restored whole: its chunks go to the writer as they are ([`BlockMap::sink`] is
    /// not needed).
    pub(super) fn is_single(&self) -> bool {
        self.single
    }

    /// Bytes the restore writes into file `f` of the newest set, whose entry is `e`: all of them
    /// (each given once, by one set), less what a delta restore found on disk already.
    pub(super) fn expected(&self, f: u32, e: &crate::manifest::Entry) -> u64 {
        e.size - self.dropped.get(f as usize).copied().unwrap_or(0)
    }

    /// A chain's data bytes per file of the newest set (zero chunks left out); empty for a single
    /// set, whose index gives them.
    pub(super) fn data_bytes(&self) -> &[u64] {
        &self.data_bytes
    }

    /// Every chunk that gives some bytes of a file, whole or cut by a newer set: as (set, index
    /// entry, file of the newest set). What a delta restore compares by hash: where the bytes on
    /// disk over the whole chunk are the chunk's, every piece it gives is on disk already.
    pub(super) fn giving_chunks(&self, sets: &[&BackupSet]) -> Vec<(usize, IndexEntry, u32)> {
        let mut out = Vec::new();
        for (g, set) in sets.iter().enumerate() {
            for e in set.stripes.iter().flat_map(|s| s.index.iter()) {
                let Some(s) = self.supply(g, e.file_id) else { continue };
                if within(&s.ranges, e.offset, e.raw_len.into()).next().is_some() {
                    out.push((g, *e, s.file));
                }
            }
        }
        out
    }

    /// A chunk (from [`BlockMap::giving_chunks`]) is on disk already: the pieces it gives are
    /// neither read nor written. Returns the bytes taken out of the map.
    pub(super) fn drop_chunk(&mut self, g: usize, e: &IndexEntry) -> u64 {
        let Some(Some(s)) = self.supplies.get_mut(g).and_then(|v| v.get_mut(e.file_id as usize)) else { return 0 };
        let r = e.offset..e.offset + u64::from(e.raw_len);
        let bytes: u64 = within(&s.ranges, r.start, r.end - r.start).map(|x| x.end - x.start).sum();
        s.ranges = s.ranges.iter().flat_map(|x| subtract(x.clone(), std::slice::from_ref(&r))).collect();
        let f = s.file as usize;
        self.dropped[f] += bytes;
        if e.stored_len > 0 {
            self.data_bytes[f] -= bytes;
        }
        bytes
    }

    /// What set `g` gives, for its file `file_id`.
    fn supply(&self, g: usize, file_id: u32) -> Option<&Supply> {
        self.supplies.get(g)?.get(file_id as usize)?.as_ref()
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
        self.map.supply(self.g, file_id).is_some_and(|s| self.inner.wants(s.file))
    }

    fn wants_chunk(&self, e: &IndexEntry) -> bool {
        self.map.supply(self.g, e.file_id).is_some_and(|s| self.inner.wants(s.file) && within(&s.ranges, e.offset, e.raw_len.into()).next().is_some())
    }
}

struct SetLane<'s> {
    map: &'s BlockMap,
    g: usize,
    inner: Box<dyn Lane + 's>,
}

impl Lane for SetLane<'_> {
    fn chunk(&mut self, file_id: u32, offset: u64, len: usize, data: Option<&[u8]>) -> Result<()> {
        let Some(s) = self.map.supply(self.g, file_id) else { return Ok(()) };
        for r in within(&s.ranges, offset, len as u64) {
            let (from, n) = ((r.start - offset) as usize, (r.end - r.start) as usize);
            self.inner.chunk(s.file, r.start, n, data.map(|d| &d[from..from + n]))?;
        }
        Ok(())
    }

    fn owned(&mut self, file_id: u32, offset: u64, data: Decoded) -> Result<()> {
        let Some(s) = self.map.supply(self.g, file_id) else { return Ok(()) };
        let len = data.len() as u64;
        let mut parts = within(&s.ranges, offset, len);
        match (parts.next(), parts.next()) {
            // Wholly given: the buffer goes on as it is (a direct write in flight).
            (Some(r), None) if r == (offset..offset + len) => self.inner.owned(s.file, offset, data),
            (None, _) => Ok(()),
            (Some(a), b) => {
                let pieces: Vec<(u64, std::ops::Range<usize>)> = [a].into_iter().chain(b).chain(parts).map(|r| (r.start, (r.start - offset) as usize..(r.end - offset) as usize)).collect();
                self.inner.owned_pieces(s.file, data, &pieces)
            }
        }
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
