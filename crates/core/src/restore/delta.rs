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

use std::collections::{HashMap, HashSet};
use std::fs;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::chain::BlockMap;
use super::options::{DeltaReport, INCOMPLETE_MARKER};
use super::plan::Plan;
use super::target::remove_any;
use crate::error::{io_at, ErrorKind, Result};
use crate::format::IndexEntry;
use crate::manifest::EntryKind;
use crate::set::BackupSet;

impl Plan<'_> {
    /// Remove what is under the roots but not in the plan (the markers aside), and what is there
    /// as another kind of entry than the backup's.
    pub(super) fn prune_for_delta(&self) -> Result<u64> {
        let mut wanted: HashMap<PathBuf, EntryKind> = HashMap::new();
        self.set.each_entry(|id, e| {
            wanted.extend(self.dest(id, e).map(|d| (d, e.kind)));
            Ok(())
        })?;
        let mut removed = 0;
        let mut stack: Vec<PathBuf> = self.roots.clone();
        let mut seen: HashSet<PathBuf> = HashSet::new();
        while let Some(dir) = stack.pop() {
            if !seen.insert(dir.clone()) {
                continue;
            }
            let Ok(rd) = fs::read_dir(&dir) else { continue };
            for item in rd {
                let item = item.map_err(|e| io_at(ErrorKind::Target, "cannot list", &dir, e))?;
                let path = item.path();
                if item.file_name() == INCOMPLETE_MARKER || self.roots.contains(&path) {
                    continue;
                }
                let ft = item.file_type().map_err(|e| io_at(ErrorKind::Target, "cannot stat", &path, e))?;
                let same = match wanted.get(path.as_path()) {
                    None => false,
                    Some(EntryKind::Dir) => ft.is_dir(),
                    Some(EntryKind::File) => ft.is_file(),
                    Some(EntryKind::Symlink) => ft.is_symlink(),
                    // Made again whatever is there.
                    Some(EntryKind::Hardlink | EntryKind::Fifo) => true,
                };
                if !same {
                    remove_any(&path)?;
                    removed += 1;
                } else if ft.is_dir() {
                    stack.push(path);
                }
            }
        }
        Ok(removed)
    }
}

/// Bytes read from disk at a time when comparing (a zero chunk may be up to 1 GiB).
const COMPARE_STEP: usize = 1 << 20;

/// The bytes of one file a comparing thread takes at a time.
const RUN_BYTES: u64 = 64 << 20;

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

/// Compare every chunk of the map with the bytes at its place on disk, on `threads`
/// threads, each taking a run of one file's chunks in offset order at a time; take the pieces of
/// those that match out of the map.
/// `dest` is each entry's destination (a delta restore has no hollow files).
pub(super) fn keep_what_matches(map: &mut BlockMap, sets: &[&BackupSet], dest: &[Option<PathBuf>], threads: usize) -> Result<DeltaReport> {
    let mut by_file: HashMap<u32, Vec<(usize, IndexEntry)>> = HashMap::new();
    for (g, e, f) in map.giving_chunks(sets) {
        // A data chunk of a set older than format 3 has no hash to compare with.
        if e.hash == 0 && e.stored_len > 0 {
            continue;
        }
        if dest.get(f as usize).is_some_and(Option::is_some) {
            by_file.entry(f).or_default().push((g, e));
        }
    }
    // Each file's chunks in offset order, so that reading them is sequential (read-ahead works),
    // cut into runs of [`RUN_BYTES`] that the threads take in turn, so that a large file is
    // compared by all of them.
    let mut files: Vec<(u32, Vec<(usize, IndexEntry)>)> = Vec::new();
    let mut by_file: Vec<(u32, Vec<(usize, IndexEntry)>)> = by_file.into_iter().collect();
    by_file.sort_unstable_by_key(|(f, _)| *f);
    for (f, mut chunks) in by_file {
        chunks.sort_unstable_by_key(|(_, e)| e.offset);
        let mut run: Vec<(usize, IndexEntry)> = Vec::new();
        let mut bytes = 0u64;
        for c in chunks {
            bytes += u64::from(c.1.raw_len);
            run.push(c);
            if bytes >= RUN_BYTES {
                files.push((f, std::mem::take(&mut run)));
                bytes = 0;
            }
        }
        if !run.is_empty() {
            files.push((f, run));
        }
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    // Per thread: the chunks that matched, and the bytes compared.
    type Found = Result<(Vec<(usize, IndexEntry)>, u64)>;
    let results: Vec<Found> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads.max(1))
            .map(|_| {
                s.spawn(|| {
                    let mut matched = Vec::new();
                    let mut compared = 0u64;
                    let mut buf = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some((f, chunks)) = files.get(i) else { break };
                        let path = dest[*f as usize].as_deref().expect("filtered above");
                        let Ok(file) = fs::File::open(path) else { continue };
                        let len = file.metadata().map_err(|e| io_at(ErrorKind::Target, "cannot stat", path, e))?.len();
                        for &(g, e) in chunks {
                            let n = u64::from(e.raw_len);
                            if e.offset + n > len {
                                continue;
                            }
                            compared += n;
                            if same_on_disk(&file, path, e.offset, n, e.stored_len == 0, e.hash, &mut buf)? {
                                matched.push((g, e));
                            }
                        }
                    }
                    Ok((matched, compared))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err(crate::Error::new(ErrorKind::Io, "a delta comparer thread panicked")))).collect()
    });
    let mut report = DeltaReport::default();
    for r in results {
        let (matched, compared) = r?;
        report.bytes_compared += compared;
        for (g, e) in matched {
            report.chunks_kept += 1;
            report.bytes_kept += map.drop_chunk(g, &e);
        }
    }
    Ok(report)
}
