//! Delta restore: an existing tree (a failed primary, a stale standby) made equal to the backup
//! while rewriting only what differs. Entries the backup does not have are removed and entries of
//! another kind replaced; every chunk whose bytes are on disk already, by its XXH3-128 (or, for a
//! zero chunk, by being zeros), is taken out of the block map, so the pieces it gives are neither
//! read from the backup nor written; everything else is written as in any restore, into the files
//! as they are, which are then cut or grown to their size. The result is byte for byte a fresh
//! restore's.
//!
//! A chunk of an older set that a newer set cuts into (some of its pages changed later) is compared
//! whole too: if the disk holds the whole chunk as that set had it, it holds every piece the chunk
//! still gives (a stale copy at the full's state keeps all of the full's chunks, and only the
//! incrementals' pages are written). Sets older than format 3 have no hash: all their data chunks
//! are written.

use std::collections::HashSet;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::chain::{subtract, walk_chain, within, BlockMap, Giving};
use super::options::{DeltaReport, INCOMPLETE_MARKER};
use super::plan::Plan;
use super::target::remove_any;
use crate::error::{io_at, ErrorKind, Result};
use crate::manifest::{Entry, EntryKind};
use crate::set::BackupSet;
use crate::spill::{kind_code, kind_of, ByteLog, Record, Sorter};
use crate::{backup::Changes, backup::FileChanges};

impl Plan<'_> {
    /// Remove what is under the roots but not in the plan (the markers aside), and what is there
    /// as another kind of entry than the backup's. Nothing per entry stays in memory: what the
    /// plan wants is a 128-bit hash of each destination and its kind, sorted on disk; the target
    /// is read a level of folders at a time, each level's entries sorted by the same hash (their
    /// paths aside, on disk past a few MiB) and merged with what is wanted. Only the folders to
    /// go down into are held.
    /// Returns the entries removed and the bytes of the regular files among them (those inside
    /// removed folders too).
    pub(super) fn prune_for_delta(&self) -> Result<(u64, u64)> {
        let mut wanted: Sorter<Wanted> = Sorter::default();
        self.set.each_entry(|id, e| {
            if let Some(d) = self.dest(id, e) {
                wanted.push(Wanted { hash: path_hash(&d), kind: kind_code(e.kind) })?;
            }
            Ok(())
        })?;
        let wanted = wanted.into_sorted()?;
        let (mut removed, mut bytes) = (0, 0);
        let mut level: Vec<PathBuf> = self.roots.clone();
        let mut seen: HashSet<PathBuf> = HashSet::new();
        let mut path = Vec::new();
        while !level.is_empty() {
            let mut found: Sorter<Found> = Sorter::default();
            let mut paths = ByteLog::default();
            for dir in std::mem::take(&mut level) {
                if !seen.insert(dir.clone()) {
                    continue;
                }
                let Ok(rd) = fs::read_dir(&dir) else { continue };
                for item in rd {
                    let item = item.map_err(|e| io_at(ErrorKind::Target, "cannot list", &dir, e))?;
                    let p = item.path();
                    if item.file_name() == INCOMPLETE_MARKER || self.roots.contains(&p) || self.keeps(&p) {
                        continue;
                    }
                    let ft = item.file_type().map_err(|e| io_at(ErrorKind::Target, "cannot stat", &p, e))?;
                    let kind = if ft.is_dir() {
                        EntryKind::Dir
                    } else if ft.is_symlink() {
                        EntryKind::Symlink
                    } else if ft.is_file() {
                        EntryKind::File
                    } else {
                        EntryKind::Fifo
                    };
                    let bytes = p.as_os_str().as_bytes();
                    let at = paths.push(bytes)?;
                    found.push(Found { hash: path_hash(&p), kind: kind_code(kind), at, len: bytes.len() as u32 })?;
                }
            }
            // Both in hash order: a merge. A list that ends early is an error, never a reason to
            // remove what follows.
            let mut want = wanted.read();
            let mut next = want.next();
            let mut found = Sorter::merge(vec![found]);
            for f in found.by_ref() {
                while next.is_some_and(|w| w.hash < f.hash) {
                    next = want.next();
                }
                if let Some(e) = want.error() {
                    return Err(e);
                }
                let is = kind_of(f.kind);
                let same = match next.filter(|w| w.hash == f.hash).and_then(|w| kind_of(w.kind)) {
                    None => false,
                    Some(k @ (EntryKind::Dir | EntryKind::File | EntryKind::Symlink)) => is == Some(k),
                    // Made again whatever is there.
                    Some(EntryKind::Hardlink | EntryKind::Fifo) => true,
                };
                if same && is != Some(EntryKind::Dir) {
                    continue;
                }
                paths.get(f.at, f.len as usize, &mut path)?;
                let p = PathBuf::from(std::ffi::OsStr::from_bytes(&path));
                if same {
                    level.push(p);
                } else {
                    bytes += tree_bytes(&p);
                    remove_any(&p)?;
                    removed += 1;
                }
            }
            if let Some(e) = found.error() {
                return Err(e);
            }
        }
        Ok((removed, bytes))
    }
}

/// The bytes of the regular files at or under `p` (for the report: unreadable parts count 0).
fn tree_bytes(p: &Path) -> u64 {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_file() => m.len(),
        Ok(m) if m.is_dir() => fs::read_dir(p).map(|rd| rd.flatten().map(|i| tree_bytes(&i.path())).sum()).unwrap_or(0),
        _ => 0,
    }
}

/// What the plan puts at a destination: the destination's [`path_hash`] and the entry's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Wanted {
    hash: [u8; 16],
    kind: u8,
}

impl Record for Wanted {
    const LEN: usize = 17;
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.hash);
        out.push(self.kind);
    }
    fn decode(b: &[u8]) -> Wanted {
        Wanted { hash: b[..16].try_into().expect("16 bytes"), kind: b[16] }
    }
}

/// What the target holds at a path: its [`path_hash`], its kind, and where its path is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Found {
    hash: [u8; 16],
    kind: u8,
    at: u64,
    len: u32,
}

impl Record for Found {
    const LEN: usize = 29;
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.hash);
        out.push(self.kind);
        out.extend_from_slice(&self.at.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
    }
    fn decode(b: &[u8]) -> Found {
        Found {
            hash: b[..16].try_into().expect("16 bytes"),
            kind: b[16],
            at: u64::from_le_bytes(b[17..25].try_into().expect("8 bytes")),
            len: u32::from_le_bytes(b[25..29].try_into().expect("4 bytes")),
        }
    }
}

/// A path's hash, name by name: two spellings of one path (`a//b`, `a/./b`) hash alike, as
/// they compare equal as paths.
fn path_hash(p: &Path) -> [u8; 16] {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    for c in p.components() {
        h.update(c.as_os_str().as_bytes());
        h.update(b"/");
    }
    h.digest128().to_le_bytes()
}

/// Bytes read from disk at a time when comparing (a zero chunk may be up to 1 GiB).
const COMPARE_STEP: usize = 1 << 20;

/// The bytes of one file a comparing thread takes at a time.
const RUN_BYTES: u64 = 64 << 20;

/// Files, and chunks, compared in one batch: the walk of the chain waits while a batch is
/// compared on every core, so that what is held stays bounded.
const BATCH_FILES: usize = 4096;
const BATCH_CHUNKS: usize = 1 << 16;

/// Whether the `len` bytes of `file` at `offset` are zeros (`hash` 0) or hash to `hash`, read
/// [`COMPARE_STEP`] at a time into `buf`.
fn same_on_disk(file: &fs::File, path: &Path, offset: u64, len: u64, zero: bool, hash: u128, buf: &mut Vec<u8>) -> Result<bool> {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut at = 0u64;
    while at < len {
        let n = (len - at).min(COMPARE_STEP as u64) as usize;
        buf.resize(n, 0);
        file.read_exact_at(buf, offset + at).map_err(|err| io_at(ErrorKind::Target, "cannot read", path, err))?;
        if zero {
            if buf.iter().any(|&b| b != 0) {
                return Ok(false);
            }
        } else {
            hasher.update(buf);
        }
        at += n as u64;
    }
    Ok(zero || hasher.digest128() == hash)
}

/// A file of the newest set waiting in a batch to be compared with the disk.
struct Pending {
    f: u32,
    entry: Entry,
    dest: PathBuf,
    givings: Vec<Giving>,
    /// `--check-changes`: the ranges the caller says may differ (the rest is checked).
    given: Option<Vec<std::ops::Range<u64>>>,
}

/// What `--check-changes` keeps of a block outside the given ranges of a chunk that differed:
/// its file's path (its place and length in [`Checks::paths`]), the block and its hash before the
/// restore. In that order, so that sorted they come file by file, in offset order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Suspect {
    path_at: u64,
    path_len: u32,
    offset: u64,
    len: u32,
    hash: u64,
}

impl Record for Suspect {
    const LEN: usize = 32;
    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.path_at.to_le_bytes());
        out.extend_from_slice(&self.path_len.to_le_bytes());
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.len.to_le_bytes());
        out.extend_from_slice(&self.hash.to_le_bytes());
    }
    fn decode(b: &[u8]) -> Suspect {
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        Suspect { path_at: u64_at(0), path_len: u32_at(8), offset: u64_at(12), len: u32_at(20), hash: u64_at(24) }
    }
}

/// `--check-changes`' blocks to read again once the restore is done: any whose bytes changed
/// was outside the ranges given, yet differed. On disk past a few MiB, as the prune's lists are:
/// a target that differs everywhere has a suspect per 8 KiB block of it.
#[derive(Default)]
pub(super) struct Checks {
    paths: ByteLog,
    suspects: Sorter<Suspect>,
}

/// The unit `--check-changes` checks in (PostgreSQL's page: the ranges a caller gives are in
/// whole units of it).
const CHECK_UNIT: u64 = 8192;

/// Ranges `a` cut to those in `b` (both sorted and disjoint).
fn intersect(a: &[std::ops::Range<u64>], b: &[std::ops::Range<u64>]) -> Vec<std::ops::Range<u64>> {
    a.iter().flat_map(|r| within(b, r.start, r.end - r.start)).collect()
}

/// The chain's block map for a target whose differences from the backup the caller knows
/// (`changes`: PostgreSQL's WAL summaries): of each file the target holds as a regular file, only
/// the bytes in the ranges `changes` gives for it (given its length there) are written; the rest
/// is kept, neither read from the backup nor written, and the target is not read at all. A file
/// not there, or that `changes` says to write whole, is written whole.
pub(super) fn map_from_changes(sets: &[&BackupSet], plan: &Plan, changes: &dyn Changes) -> Result<(BlockMap, DeltaReport)> {
    let mut map = BlockMap::empty(sets);
    let roots = &plan.set.manifest.roots;
    walk_chain(sets, |f, e, mut givings| {
        let mut dropped = 0;
        let on_disk = plan.dest(f, e).and_then(|d| fs::symlink_metadata(d).ok()).filter(fs::Metadata::is_file);
        if let (Some(m), Some(root)) = (on_disk, roots.get(usize::from(e.root))) {
            if let FileChanges::Ranges(keep) = changes.of(&root.name, &e.path, m.len()) {
                for gv in &mut givings {
                    let before: u64 = gv.ranges.iter().map(|r| r.end - r.start).sum();
                    gv.ranges = intersect(&gv.ranges, &keep);
                    dropped += before - gv.ranges.iter().map(|r| r.end - r.start).sum::<u64>();
                }
            }
        }
        map.record(f, e, &givings, dropped);
        Ok(())
    })?;
    Ok((map, DeltaReport { method: "wal", ..DeltaReport::default() }))
}

impl Checks {
    /// Read every suspect block again (the restore has written the backup's bytes there), file by
    /// file in offset order: those that changed are the misses, `path bytes A..B`, the first 100
    /// named.
    pub(super) fn misses(self, report: &mut DeltaReport) -> Result<()> {
        let sorted = self.suspects.into_sorted()?;
        let mut suspects = sorted.read();
        let (mut buf, mut name) = (Vec::new(), Vec::new());
        let mut open: Option<(u64, PathBuf, fs::File)> = None;
        for s in suspects.by_ref() {
            if open.as_ref().is_none_or(|(at, _, _)| *at != s.path_at) {
                self.paths.get(s.path_at, s.path_len as usize, &mut name)?;
                let path = PathBuf::from(std::ffi::OsStr::from_bytes(&name));
                let f = fs::File::open(&path).map_err(|e| io_at(ErrorKind::Target, "cannot open", &path, e))?;
                open = Some((s.path_at, path, f));
            }
            let (_, path, file) = open.as_ref().expect("opened");
            buf.resize(s.len as usize, 0);
            file.read_exact_at(&mut buf, s.offset).map_err(|e| io_at(ErrorKind::Target, "cannot read", path, e))?;
            report.bytes_compared += u64::from(s.len);
            if xxhash_rust::xxh3::xxh3_64(&buf) != s.hash {
                report.missed += 1;
                if report.misses.len() < 100 {
                    report.misses.push(format!("{} bytes {}..{}", path.display(), s.offset, s.offset + u64::from(s.len)));
                }
            }
        }
        suspects.error().map_or(Ok(()), Err)
    }
}

/// The chain's block map, with every chunk whose bytes are at its place on disk already taken
/// out: the chain walked file by file in key order ([`walk_chain`]), each file's giving chunks
/// compared in batches on `threads` threads, each taking a run of one file's chunks in offset
/// order at a time. Only the target is read: nothing is written.
///
/// With `check` (`--check-changes`), each block outside the ranges `check` gives for its file of
/// a chunk that differs is hashed and kept in the returned [`Checks`], to be read again after the
/// restore.
pub(super) fn map_what_differs(sets: &[&BackupSet], plan: &Plan, threads: usize, check: Option<&dyn Changes>) -> Result<(BlockMap, DeltaReport, Checks)> {
    let mut map = BlockMap::empty(sets);
    let mut report = DeltaReport { method: "hash", ..DeltaReport::default() };
    let mut checks = Checks::default();
    let mut batch: Vec<Pending> = Vec::new();
    let mut chunks = 0;
    let roots = &plan.set.manifest.roots;
    // Checking, a batch's threads hold up to a suspect (32 bytes) per 8 KiB block of each chunk
    // that differed until the batch ends: smaller batches keep that under 16 MiB for 1 MiB chunks.
    let batch_chunks = if check.is_some() { BATCH_CHUNKS / 16 } else { BATCH_CHUNKS };
    walk_chain(sets, |f, e, givings| {
        // A delta restore has no hollow files and no `--only`: every file has its place.
        let Some(dest) = plan.dest(f, e) else {
            map.record(f, e, &givings, 0);
            return Ok(());
        };
        let given = check.and_then(|c| {
            let m = fs::symlink_metadata(&dest).ok().filter(fs::Metadata::is_file)?;
            match c.of(&roots.get(usize::from(e.root))?.name, &e.path, m.len()) {
                FileChanges::Ranges(r) => Some(r),
                _ => None,
            }
        });
        chunks += givings.iter().map(|g| g.chunks.len()).sum::<usize>();
        batch.push(Pending { f, entry: e.clone(), dest, givings, given });
        if batch.len() >= BATCH_FILES || chunks >= batch_chunks {
            compare(&mut map, std::mem::take(&mut batch), threads, &mut report, &mut checks)?;
            chunks = 0;
        }
        Ok(())
    })?;
    compare(&mut map, batch, threads, &mut report, &mut checks)?;
    Ok((map, report, checks))
}

/// Compare a batch's giving chunks with the disk, take the pieces of those that match out of
/// their givings, and record the files in `map`.
fn compare(map: &mut BlockMap, mut batch: Vec<Pending>, threads: usize, report: &mut DeltaReport, checks: &mut Checks) -> Result<()> {
    // Per file, its chunks that give something, in offset order, so that reading them is
    // sequential (read-ahead works), cut into runs of [`RUN_BYTES`] that the threads take in
    // turn, so that a large file is compared by all of them. A data chunk of a set older than
    // format 3 has no hash to compare with.
    let mut runs: Vec<(usize, Vec<(usize, usize)>)> = Vec::new();
    for (i, p) in batch.iter().enumerate() {
        let mut mine: Vec<(usize, usize)> = Vec::new();
        for (j, gv) in p.givings.iter().enumerate() {
            for (k, c) in gv.chunks.iter().enumerate() {
                if (c.hash != 0 || c.stored_len == 0) && within(&gv.ranges, c.offset, c.raw_len.into()).next().is_some() {
                    mine.push((j, k));
                }
            }
        }
        mine.sort_unstable_by_key(|&(j, k)| p.givings[j].chunks[k].offset);
        let mut run = Vec::new();
        let mut bytes = 0u64;
        for (j, k) in mine {
            bytes += u64::from(p.givings[j].chunks[k].raw_len);
            run.push((j, k));
            if bytes >= RUN_BYTES {
                runs.push((i, std::mem::take(&mut run)));
                bytes = 0;
            }
        }
        if !run.is_empty() {
            runs.push((i, run));
        }
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    // Per thread: the chunks that matched (file, giving, chunk), the bytes compared, and
    // `--check-changes`' suspect blocks (file, offset, length, hash).
    type Found = Result<(Vec<(usize, usize, usize)>, u64, Vec<(usize, u64, u32, u64)>)>;
    let results: Vec<Found> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|_| {
                s.spawn(|| {
                    let mut matched = Vec::new();
                    let mut suspects = Vec::new();
                    let mut compared = 0u64;
                    let mut buf = Vec::new();
                    loop {
                        let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some((i, run)) = runs.get(n) else { break };
                        let p = &batch[*i];
                        let Ok(file) = fs::File::open(&p.dest) else { continue };
                        let meta = file.metadata().map_err(|e| io_at(ErrorKind::Target, "cannot stat", &p.dest, e))?;
                        // Another kind of entry is there: the prune replaces it.
                        if !meta.is_file() {
                            continue;
                        }
                        for &(j, k) in run {
                            let c = &p.givings[j].chunks[k];
                            let n = u64::from(c.raw_len);
                            if c.offset + n > meta.len() {
                                continue;
                            }
                            compared += n;
                            if same_on_disk(&file, &p.dest, c.offset, n, c.stored_len == 0, c.hash, &mut buf)? {
                                matched.push((*i, j, k));
                            } else if let Some(given) = &p.given {
                                // Differs: each block of it outside the given ranges is hashed
                                // now, and read again once the restore has written it.
                                for r in subtract(c.offset..c.offset + n, given) {
                                    let mut at = r.start;
                                    while at < r.end {
                                        let len = (CHECK_UNIT - at % CHECK_UNIT).min(r.end - at);
                                        buf.resize(len as usize, 0);
                                        file.read_exact_at(&mut buf, at).map_err(|e| io_at(ErrorKind::Target, "cannot read", &p.dest, e))?;
                                        compared += len;
                                        suspects.push((*i, at, len as u32, xxhash_rust::xxh3::xxh3_64(&buf)));
                                        at += len;
                                    }
                                }
                            }
                        }
                    }
                    Ok((matched, compared, suspects))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(crate::error::Error::new(ErrorKind::Io, "a delta comparer thread panicked")))).collect()
    });
    let mut dropped = vec![0u64; batch.len()];
    // Each file with suspects has its path kept once.
    let mut named: std::collections::HashMap<usize, (u64, u32)> = std::collections::HashMap::new();
    for r in results {
        let (matched, compared, suspects) = r?;
        report.bytes_compared += compared;
        for (i, offset, len, hash) in suspects {
            let (path_at, path_len) = match named.get(&i) {
                Some(&p) => p,
                None => {
                    let bytes = batch[i].dest.as_os_str().as_bytes();
                    let p = (checks.paths.push(bytes)?, bytes.len() as u32);
                    named.insert(i, p);
                    p
                }
            };
            checks.suspects.push(Suspect { path_at, path_len, offset, len, hash })?;
        }
        for (i, j, k) in matched {
            let gv = &mut batch[i].givings[j];
            let c = gv.chunks[k];
            let r = c.offset..c.offset + u64::from(c.raw_len);
            let bytes: u64 = within(&gv.ranges, r.start, r.end - r.start).map(|x| x.end - x.start).sum();
            gv.ranges = gv.ranges.iter().flat_map(|x| subtract(x.clone(), std::slice::from_ref(&r))).collect();
            dropped[i] += bytes;
            report.chunks_kept += 1;
        }
    }
    for (p, d) in batch.iter().zip(dropped) {
        map.record(p.f, &p.entry, &p.givings, d);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_spellings_of_a_path_hash_alike_and_other_paths_do_not() {
        let h = |p: &str| path_hash(Path::new(p));
        assert_eq!(h("/t/a//b/./c"), h("/t/a/b/c"));
        assert_eq!(h("/t/a/b/"), h("/t/a/b"));
        assert_ne!(h("/t/a/b"), h("/t/ab"));
        assert_ne!(h("/t/a/b"), h("/t/a/b/c"));
    }
}
