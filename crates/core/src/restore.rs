//! Restore: parallel read of every stripe, parallel decompression, positional writes into files
//! sized up front, hard links and FIFOs, then owners, modes, times and fsync. `--relocate OLD=NEW` moves a subtree (SQL
//! Server's WITH MOVE). A target that already holds data is refused unless forced, and a forced
//! restore empties it first (WITH REPLACE: the result is exactly the backup). While a restore runs
//! every target root holds [`INCOMPLETE_MARKER`]; a failed restore removes what it wrote where it
//! can and otherwise leaves the markers, so nobody mistakes it for whole.

use std::collections::HashSet;
use std::fs::{self, OpenOptions};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;

use crate::aligned::{is_aligned, ALIGN};
use crate::error::{io_at, Error, ErrorKind, Result};
use crate::manifest::{Entry, EntryKind, Manifest, Root};
use crate::pipeline::Progress;
use crate::set::{scan, BackupSet, ChunkSink, Decoded, Lane};
use crate::storage::local::sync_dir;

/// Name of the file a restore keeps in its target until it has finished.
pub const INCOMPLETE_MARKER: &str = ".sheaf-restore-incomplete";

/// How to restore.
#[derive(Clone, Debug)]
pub struct RestoreOptions {
    /// Where the backup's main root goes.
    pub target: PathBuf,
    /// `(OLD, NEW)`: entries under OLD (a path inside the backup, or an original absolute path)
    /// go under NEW instead.
    pub relocate: Vec<(String, PathBuf)>,
    /// Restore into non-empty directories: their contents are removed first, so that the result is
    /// exactly the backup (no stale file survives).
    pub force: bool,
    /// Restore the backup's other roots (tablespaces, say) to the absolute paths they had at backup
    /// time. Without it, sheaf writes outside `target` only where a relocation says so, and refuses
    /// a set with an unmapped root: a set made elsewhere could name any folder on this machine.
    pub original_paths: bool,
    /// Decompressor threads (default: one per core).
    pub threads: Option<usize>,
    /// Write through the page cache instead of with direct I/O. Direct I/O is used where the
    /// filesystem takes it (not tmpfs, say) and the set's transfer size is a multiple of 4 KiB.
    pub buffered: bool,
    /// Write each direct chunk synchronously from its decompressor thread instead of queueing it
    /// on an io_uring (for comparison; without io_uring in the kernel, or refused by a sandbox,
    /// sheaf writes synchronously by itself).
    pub sync_writes: bool,
    /// Restore only the entries whose path (as the backup holds it: `base/16384/16385`,
    /// `pg_tblspc/OID/...`, or relative to a directory backup's root), or a folder above it,
    /// matches one of these globs (`*` and `?` within a name, `**` across folders). Empty: all.
    /// Only the frames that hold the chosen files are read.
    pub only: Vec<String>,
    /// Files under these folders (paths as the backup holds them, e.g. `base/16384`) come back
    /// as sparse files of their backed-up size, all zeros, without a byte of them read: the
    /// databases `--db-include` leaves out, which the restored cluster can then drop.
    pub hollow: Vec<String>,
}

impl RestoreOptions {
    /// Restore into `target` with defaults.
    pub fn new(target: impl Into<PathBuf>) -> Self {
        RestoreOptions {
            target: target.into(),
            relocate: Vec::new(),
            force: false,
            original_paths: false,
            threads: None,
            buffered: false,
            sync_writes: false,
            only: Vec::new(),
            hollow: Vec::new(),
        }
    }
}

/// Parse `OLD=NEW`.
///
/// # Errors
/// [`ErrorKind::InvalidInput`] when there is no `=` or a side is empty.
pub fn parse_relocation(text: &str) -> Result<(String, PathBuf)> {
    match text.split_once('=') {
        Some((old, new)) if !old.is_empty() && !new.is_empty() => {
            Ok((old.trim_end_matches('/').to_string(), PathBuf::from(new)))
        }
        _ => Err(Error::invalid(format!("--relocate '{text}': write OLD=NEW, e.g. --relocate base/16384=/mnt/fast/16384"))),
    }
}

/// What a restore reports.
#[derive(Clone, Debug, Serialize)]
pub struct RestoreReport {
    /// The set's id.
    pub backup_id: String,
    /// Where the main root went.
    pub target: String,
    /// Stripes read.
    pub stripes: usize,
    /// Regular files restored.
    pub files: usize,
    /// Entries restored (files, directories, symlinks).
    pub entries: usize,
    /// Raw bytes restored.
    pub bytes_written: u64,
    /// Bytes of frames read from the stripes (all of them, or with `only`, those that hold the
    /// chosen files).
    pub bytes_read: u64,
    /// Bytes of the whole set.
    pub set_bytes: u64,
    /// Wall time.
    pub seconds: f64,
    /// Decompressor threads.
    pub threads: usize,
    /// Files of 64 KiB or more were written with direct I/O (O_DIRECT) throughout; false when
    /// written buffered (`--buffered-io`, a transfer size not a multiple of 4 KiB, or a filesystem
    /// that refused it). Smaller files (packed in the set) are always written buffered and made
    /// durable with one `syncfs`.
    pub direct_io: bool,
    /// Direct writes were kept in flight on io_uring while the next chunks decompressed (false:
    /// each was written synchronously, by `--sync-writes` or for want of io_uring).
    pub io_uring: bool,
}

/// Restore the set `stripes` belong to.
///
/// # Errors
/// Any problem opening or reading the set (naming stripe and region), a non-empty target without
/// `force`, a relocation that matches nothing, or an I/O failure writing the target.
pub fn restore(set: &BackupSet, opts: &RestoreOptions, progress: Arc<dyn Progress>) -> Result<RestoreReport> {
    let t0 = Instant::now();
    let plan = Plan::new(&set.manifest, opts)?;
    let prepared = plan.prepare_roots(opts.force)?;
    let (direct_io, io_uring, scanned) = match plan.run(set, opts, progress) {
        Ok(d) => d,
        Err(e) => return Err(plan.clean_up_after(e, &prepared)),
    };
    let restored = || set.manifest.entries.iter().zip(&plan.dest).zip(&plan.hollow).filter(|((_, d), h)| d.is_some() && !**h).map(|((e, _), _)| e);
    Ok(RestoreReport {
        backup_id: set.manifest.backup_id.clone(),
        target: opts.target.display().to_string(),
        stripes: set.stripes.len(),
        files: restored().filter(|e| e.kind == EntryKind::File).count(),
        entries: restored().count(),
        bytes_written: restored().filter(|e| e.kind == EntryKind::File).map(|e| e.size).sum(),
        bytes_read: scanned.bytes_read,
        set_bytes: set.stored_bytes(),
        seconds: t0.elapsed().as_secs_f64(),
        threads: opts.threads.unwrap_or_else(crate::backup::available_cores),
        direct_io,
        io_uring,
    })
}

/// An entry's path as the backup holds it: under its root's name (`pg_tblspc/OID/...` for a
/// tablespace), or as is under the main root.
fn logical_path(manifest: &Manifest, e: &Entry) -> String {
    let root = &manifest.roots[e.root as usize].name;
    match (root.is_empty(), e.path.is_empty()) {
        (true, _) => e.path.clone(),
        (false, true) => root.clone(),
        (false, false) => format!("{root}/{}", e.path),
    }
}

/// With `only` globs, which entries to restore: those whose path (or a folder above it) matches,
/// and the folders above them; `None` for everything.
///
/// # Errors
/// A glob that does not parse, or one that matches nothing in the backup.
fn choose(manifest: &Manifest, only: &[String]) -> Result<Option<Vec<bool>>> {
    if only.is_empty() {
        return Ok(None);
    }
    let globs = only
        .iter()
        .map(|g| glob::Pattern::new(g.trim_end_matches('/')).map_err(|e| Error::invalid(format!("--only '{g}': {e}"))))
        .collect::<Result<Vec<_>>>()?;
    let how = glob::MatchOptions { case_sensitive: true, require_literal_separator: true, require_literal_leading_dot: false };
    let path_of = |e: &Entry| logical_path(manifest, e);
    let mut hit = vec![false; globs.len()];
    let mut chosen = vec![false; manifest.entries.len()];
    let mut above: HashSet<String> = HashSet::new();
    for (i, e) in manifest.entries.iter().enumerate() {
        let p = path_of(e);
        if p.is_empty() {
            continue;
        }
        // The path itself, then each folder above it.
        let mut candidates = vec![p.as_str()];
        candidates.extend(p.match_indices('/').map(|(at, _)| &p[..at]));
        for (k, g) in globs.iter().enumerate() {
            if candidates.iter().any(|c| g.matches_with(c, how)) {
                hit[k] = true;
                chosen[i] = true;
            }
        }
        if chosen[i] {
            above.extend(p.match_indices('/').map(|(at, _)| p[..at].to_string()));
            above.insert(String::new());
        }
    }
    if let Some(k) = hit.iter().position(|h| !h) {
        return Err(Error::invalid(format!(
            "--only '{}' matches nothing in the backup: paths are as the backup holds them, e.g. base/16384/16385 or pg_tblspc/16390/... for PostgreSQL, or relative to the directory backed up",
            only[k]
        )));
    }
    for (i, e) in manifest.entries.iter().enumerate() {
        if e.kind == EntryKind::Dir && above.contains(&path_of(e)) {
            chosen[i] = true;
        }
    }
    Ok(Some(chosen))
}

struct Plan<'m> {
    manifest: &'m Manifest,
    /// Destination of each entry (None: not restored).
    dest: Vec<Option<PathBuf>>,
    /// Per entry: a file restored as zeros of its size, unread ([`RestoreOptions::hollow`]).
    hollow: Vec<bool>,
    /// Folders that receive a tree: the target and each relocation or extra root.
    roots: Vec<PathBuf>,
    /// One incomplete-marker per root.
    markers: Vec<PathBuf>,
}

/// What each destination root looked like before we started, for clean-up.
struct Prepared {
    was_empty: Vec<bool>,
}

impl<'m> Plan<'m> {
    fn new(manifest: &'m Manifest, opts: &RestoreOptions) -> Result<Self> {
        validate_paths(manifest)?;
        let chosen = choose(manifest, &opts.only)?;
        let mut used = vec![false; opts.relocate.len()];
        let mut dest = Vec::with_capacity(manifest.entries.len());
        let mut unmapped: Vec<&Root> = Vec::new();
        for (i, e) in manifest.entries.iter().enumerate() {
            if e.vanished || chosen.as_ref().is_some_and(|c| !c[i]) {
                dest.push(None);
                continue;
            }
            let root = &manifest.roots[e.root as usize];
            let rel = e.path_bytes();
            let logical = if root.name.is_empty() { rel.to_vec() } else { join_rel(root.name.as_bytes(), rel) };
            let original = join_rel(root.path.as_bytes(), rel);
            let root_depth = depth(root.path.as_bytes());
            // The most specific relocation wins, counting path components below the backup's root
            // whichever way OLD was written.
            let mut best: Option<(usize, usize, PathBuf)> = None;
            for (i, (old, new)) in opts.relocate.iter().enumerate() {
                let old = old.as_bytes();
                let hit = strip_prefix(&logical, old)
                    .map(|rest| (depth(old), rest))
                    .or_else(|| strip_prefix(&original, old).map(|rest| (depth(old).saturating_sub(root_depth), rest)));
                if let Some((d, rest)) = hit {
                    if best.as_ref().is_none_or(|b| d > b.0) {
                        let p = if rest.is_empty() { new.clone() } else { new.join(OsStr::from_bytes(rest)) };
                        best = Some((d, i, p));
                    }
                }
            }
            let p = match best {
                Some((_, i, p)) => {
                    used[i] = true;
                    p
                }
                None if e.root == 0 => {
                    if rel.is_empty() {
                        opts.target.clone()
                    } else {
                        opts.target.join(OsStr::from_bytes(rel))
                    }
                }
                None => {
                    if !opts.original_paths && !unmapped.iter().any(|r| std::ptr::eq(*r, root)) {
                        unmapped.push(root);
                    }
                    PathBuf::from(OsStr::from_bytes(&original))
                }
            };
            dest.push(Some(p));
        }
        if let Some(i) = used.iter().position(|u| !u).filter(|_| chosen.is_none()) {
            let (old, new) = &opts.relocate[i];
            return Err(Error::invalid(format!(
                "--relocate {old}={}: nothing in the backup is under '{old}' (or a more specific --relocate takes all of it); give a path inside the backup or an original absolute path",
                new.display()
            )));
        }
        if !unmapped.is_empty() {
            let what: Vec<String> = unmapped
                .iter()
                .map(|r| format!("'{}' (at {} when backed up)", r.name, r.path))
                .collect();
            let first = &unmapped[0].path;
            return Err(Error::invalid(format!(
                "the backup holds {} outside its main directory: {}; sheaf writes outside --to only where told: map each with --relocate {first}=NEW_DIR, or pass --original-paths to restore them where they were",
                if unmapped.len() == 1 { "a tree" } else { "trees" },
                what.join(", ")
            )));
        }
        let mut seen = HashSet::new();
        for d in dest.iter().flatten() {
            if !seen.insert(d.clone()) {
                return Err(Error::invalid(format!(
                    "two entries of the backup would be restored to {}: check the --relocate targets for overlaps",
                    d.display()
                )));
            }
        }
        let mut roots = vec![opts.target.clone()];
        roots.extend(opts.relocate.iter().map(|(_, new)| new.clone()));
        for (k, root) in manifest.roots.iter().enumerate().skip(1) {
            let relocated = manifest.entries.iter().zip(&dest).any(|(e, d)| {
                e.root as usize == k && e.path.is_empty() && d.as_deref() != Some(Path::new(&root.path))
            });
            // With --only, a root none of whose entries is restored is not touched.
            let used = manifest.entries.iter().zip(&dest).any(|(e, d)| e.root as usize == k && d.is_some());
            if !relocated && used {
                roots.push(PathBuf::from(&root.path));
            }
        }
        let mut seen = HashSet::new();
        roots.retain(|r| seen.insert(r.clone()));
        let markers = roots.iter().map(|r| r.join(INCOMPLETE_MARKER)).collect();
        let hollow = manifest
            .entries
            .iter()
            .map(|e| {
                let p = logical_path(manifest, e);
                e.kind == EntryKind::File && opts.hollow.iter().any(|h| p.strip_prefix(h.trim_end_matches('/')).is_some_and(|rest| rest.starts_with('/')))
            })
            .collect();
        Ok(Plan { manifest, dest, hollow, roots, markers })
    }

    /// Refuse non-empty roots unless forced (then empty them); create missing ones; write markers.
    fn prepare_roots(&self, force: bool) -> Result<Prepared> {
        let mut was_empty = Vec::with_capacity(self.roots.len());
        for r in &self.roots {
            match fs::read_dir(r) {
                Ok(mut rd) => {
                    let first = rd.next();
                    let Some(item) = first else {
                        was_empty.push(true);
                        continue;
                    };
                    if !force {
                        let what = match item {
                            Ok(i) => format!("it holds {:?}, among others", i.file_name()),
                            Err(e) => format!("it cannot be listed: {e}"),
                        };
                        return Err(Error::new(
                            ErrorKind::TargetNotEmpty,
                            format!(
                                "restore target {} is not empty ({what}): choose an empty or new directory, or pass --force to replace what is there",
                                r.display()
                            ),
                        ));
                    }
                    clear_dir(r)?;
                    was_empty.push(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    fs::create_dir_all(r).map_err(|e| io_at(ErrorKind::Target, "cannot create restore target", r, e))?;
                    was_empty.push(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
                    return Err(Error::new(ErrorKind::Target, format!("restore target {} is a file, not a directory", r.display())))
                }
                Err(e) => return Err(io_at(ErrorKind::Target, "cannot read restore target", r, e)),
            }
        }
        for m in &self.markers {
            fs::write(m, self.manifest.backup_id.as_bytes()).map_err(|e| io_at(ErrorKind::Target, "cannot write to restore target", m, e))?;
        }
        Ok(Prepared { was_empty })
    }

    /// Refuse, before writing a byte, a restore whose data cannot fit: per filesystem, the bytes
    /// its files will hold (holes excluded) against what is free there. Metadata is not counted, so
    /// a write can still find the disk full; that fails and is cleaned up the same way.
    fn check_space(&self, set: &BackupSet) -> Result<()> {
        let bytes = data_bytes(set, self.manifest.entries.len());
        // Each root's filesystem, asked once: (root, device), and per device the bytes it receives.
        let roots: Vec<(&Path, u64)> = self.roots.iter().filter_map(|r| free_space(r).map(|(dev, _)| (r.as_path(), dev))).collect();
        let mut need: Vec<(u64, u64, &Path)> = Vec::new(); // (device, bytes, a root on it)
        for &(r, dev) in &roots {
            if !need.iter().any(|n| n.0 == dev) {
                need.push((dev, 0, r));
            }
        }
        for (((e, d), b), &h) in self.manifest.entries.iter().zip(&self.dest).zip(bytes).zip(&self.hollow) {
            let (Some(d), EntryKind::File, false) = (d, e.kind, h) else { continue };
            let Some(&(_, dev)) = roots.iter().filter(|(r, _)| d.starts_with(r)).max_by_key(|(r, _)| r.as_os_str().len()) else { continue };
            if let Some(n) = need.iter_mut().find(|n| n.0 == dev) {
                n.1 += b;
            }
        }
        for (_, bytes, root) in need {
            let Some((_, free)) = free_space(root) else { continue };
            if bytes > free {
                return Err(Error::io(
                    ErrorKind::NoSpace,
                    format!(
                        "the restore writes {} to the filesystem of {}, which has {} free",
                        crate::size::format_size(bytes),
                        root.display(),
                        crate::size::format_size(free)
                    ),
                    std::io::Error::from_raw_os_error(libc::ENOSPC),
                ));
            }
        }
        Ok(())
    }

    /// Returns whether direct I/O held throughout, and whether io_uring carried writes.
    fn run(&self, set: &BackupSet, opts: &RestoreOptions, progress: Arc<dyn Progress>) -> Result<(bool, bool, crate::set::Scanned)> {
        self.check_space(set)?;
        let durable = Durable::open(&self.roots);
        let entries = &self.manifest.entries;
        // SAFETY: geteuid cannot fail.
        let as_root = unsafe { libc::geteuid() } == 0;
        // Directories first (parents before children: the listing is in tree order), owner-writable
        // until the end so that their contents can be created.
        for (e, d) in entries.iter().zip(&self.dest) {
            let (Some(d), EntryKind::Dir) = (d, e.kind) else { continue };
            match fs::symlink_metadata(d) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => remove_any(d)?,
                Err(_) => {}
            }
            fs::create_dir_all(d).map_err(|e| io_at(ErrorKind::Target, "cannot create directory", d, e))?;
            fs::set_permissions(d, fs::Permissions::from_mode(0o700))
                .map_err(|e| io_at(ErrorKind::Target, "cannot set mode of", d, e))?;
        }
        for (e, d) in entries.iter().zip(&self.dest) {
            let (Some(d), EntryKind::Symlink) = (d, e.kind) else { continue };
            if fs::symlink_metadata(d).is_ok() {
                remove_any(d)?;
            }
            ensure_parent(d)?;
            std::os::unix::fs::symlink(OsStr::from_bytes(e.target_bytes().unwrap_or_default()), d)
                .map_err(|e| io_at(ErrorKind::Target, "cannot create symlink", d, e))?;
        }
        for (e, d) in entries.iter().zip(&self.dest) {
            let (Some(d), EntryKind::Fifo) = (d, e.kind) else { continue };
            if fs::symlink_metadata(d).is_ok() {
                remove_any(d)?;
            }
            let c = c_path(d)?;
            // SAFETY: a valid C string.
            if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
                return Err(io_at(ErrorKind::Target, "cannot create FIFO", d, std::io::Error::last_os_error()));
            }
            apply_metadata(e, d, as_root)?;
        }

        // Files are created by the first of their chunks to arrive, on every core, and finished
        // (owner, mode, times) by the last; files without chunks are made here after.
        let direct = !opts.buffered && set.stripes[0].header.transfer_size as usize % ALIGN == 0;
        let (kick, wake) = crossbeam_channel::bounded(1);
        let writer = Writer::new(set, entries, &self.dest, &self.hollow, as_root, Inherit::probe(&self.roots), direct, !opts.sync_writes, kick);
        let scanned = std::thread::scope(|s| {
            s.spawn(|| durable.flush_while(&wake));
            let r = scan(set, opts.threads, progress, &writer);
            // Its last sender gone, the flusher ends.
            writer.flush.lock().unwrap_or_else(|p| p.into_inner()).take();
            r
        })?;
        writer.finish_untouched()?;
        self.link_hard_links(as_root)?;

        // Durable contents, then metadata of links, then directories deepest first.
        let synced = durable.sync()?;
        if !synced {
            let files: Vec<&Path> = entries
                .iter()
                .zip(&self.dest)
                .filter_map(|(e, d)| (e.kind == EntryKind::File).then_some(d.as_deref()).flatten())
                .collect();
            fsync_all(&files, opts.threads.unwrap_or_else(crate::backup::available_cores))?;
        }
        for (e, d) in entries.iter().zip(&self.dest) {
            if let (Some(d), EntryKind::Symlink) = (d, e.kind) {
                apply_metadata(e, d, as_root)?;
            }
        }
        // Directories deepest first. The markers go first so that they do not disturb a root's
        // mtime, but only once every file's data is durable. Then one more syncfs, or each
        // directory is opened before its mode is set (a mode without owner read would stop us
        // opening it after), its metadata set and it fsynced.
        let mut dirs: Vec<(&Entry, &PathBuf)> =
            entries.iter().zip(&self.dest).filter_map(|(e, d)| d.as_ref().filter(|_| e.kind == EntryKind::Dir).map(|d| (e, d))).collect();
        dirs.sort_by_key(|(_, d)| std::cmp::Reverse(d.components().count()));
        let handles: Vec<fs::File> = if synced {
            Vec::new()
        } else {
            dirs.iter().map(|(_, d)| fs::File::open(d).map_err(|e| io_at(ErrorKind::Target, "cannot open directory", d, e))).collect::<Result<_>>()?
        };
        for m in &self.markers {
            fs::remove_file(m).map_err(|e| io_at(ErrorKind::Target, "cannot remove", m, e))?;
        }
        for (e, d) in &dirs {
            apply_metadata(e, d, as_root)?;
        }
        if synced {
            durable.sync()?;
        } else {
            for ((_, d), h) in dirs.iter().zip(&handles) {
                h.sync_all().map_err(|e| io_at(ErrorKind::Target, "cannot fsync directory", d, e))?;
            }
            for r in &self.roots {
                sync_dir(r).map_err(|e| io_at(ErrorKind::Target, "cannot fsync directory", r, e))?;
            }
        }
        Ok((writer.direct.load(Ordering::Relaxed), writer.uring_used.load(Ordering::Relaxed), scanned))
    }

    /// Hard links, once the files they name are whole: linked where both names land on one
    /// filesystem, else (relocated apart) copied.
    fn link_hard_links(&self, as_root: bool) -> Result<()> {
        let entries = &self.manifest.entries;
        for (e, d) in entries.iter().zip(&self.dest) {
            let (Some(d), EntryKind::Hardlink, Some(first)) = (d, e.kind, e.link) else { continue };
            let Some(to) = &self.dest[first as usize] else { continue };
            if fs::symlink_metadata(d).is_ok() {
                remove_any(d)?;
            }
            match fs::hard_link(to, d) {
                Ok(()) => {}
                Err(err) if err.raw_os_error() == Some(libc::EXDEV) => {
                    fs::copy(to, d).map_err(|err| io_at(ErrorKind::Target, "cannot copy (for a hard link across filesystems)", d, err))?;
                    apply_metadata(&entries[first as usize], d, as_root)?;
                }
                Err(err) => return Err(io_at(ErrorKind::Target, "cannot create hard link", d, err)),
            }
        }
        Ok(())
    }

    fn clean_up_after(&self, e: Error, prepared: &Prepared) -> Error {
        let mut removed = true;
        for (r, &empty) in self.roots.iter().zip(&prepared.was_empty) {
            if empty {
                if let Ok(rd) = fs::read_dir(r) {
                    for item in rd.flatten() {
                        removed &= remove_any(&item.path()).is_ok();
                    }
                }
            } else {
                removed = false;
            }
        }
        if removed {
            e.context(format!("restore failed and what it wrote was removed from {}", self.roots[0].display()))
        } else {
            // The markers stay (or are written again) so the target never looks whole.
            for m in &self.markers {
                let _ = fs::write(m, self.manifest.backup_id.as_bytes());
            }
            e.context(format!(
                "restore failed; {} is incomplete (marked by {INCOMPLETE_MARKER})",
                self.roots[0].display()
            ))
        }
    }
}

/// A file being written, and how.
struct OpenFile {
    file: fs::File,
    /// Opened with O_DIRECT: written by [`write_direct`].
    direct: bool,
    /// A tail was written padded past the file's end: trim it when the file is done.
    padded: AtomicBool,
    /// Made by this restore (O_EXCL) with the mode [`Inherit::open_mode`] gave it.
    fresh: bool,
}

/// What a file this restore creates already has, so that setting it again can be skipped: with
/// tens of thousands of small files, each owner or mode change is a journalled inode update
/// (GNU tar sets both on every file).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Inherit {
    /// The process's umask, where a new file's mode is the requested one less it: not where a
    /// root has a default ACL (that, not the umask, decides the mode of what is made under it).
    umask: Option<u32>,
    /// Owner and group a new file gets (our effective ids, as no directory is set-group-ID while
    /// the restore runs); `None` where we cannot tell.
    owner: Option<(u32, u32)>,
}

impl Inherit {
    /// Ask the system, for files made under `roots`.
    fn probe(roots: &[PathBuf]) -> Self {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: getxattr with a null buffer of length 0 only asks for the size.
        let has_default_acl = |r: &Path| {
            c_path(r).is_ok_and(|c| unsafe { libc::getxattr(c.as_ptr(), c"system.posix_acl_default".as_ptr(), std::ptr::null_mut(), 0) } >= 0)
        };
        let acl = roots.iter().any(|r| has_default_acl(r));
        let setgid = roots.iter().any(|r| fs::metadata(r).map_or(true, |m| m.mode() & libc::S_ISGID != 0));
        let umask = fs::read_to_string("/proc/self/status").ok().and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Umask:")).and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        });
        // SAFETY: getters that cannot fail.
        let ids = unsafe { (libc::geteuid(), libc::getegid()) };
        Inherit { umask: umask.filter(|_| !acl), owner: (!setgid).then_some(ids) }
    }

    /// Nothing is known: every file gets its owner and mode set.
    #[cfg(test)]
    const NONE: Inherit = Inherit { umask: None, owner: None };

    /// The mode to create a file of entry `e` with: its own permission bits where the umask is
    /// known (the directories above are owner-only until the end, so nobody else reaches it
    /// meanwhile), else owner-only.
    fn open_mode(&self, e: &Entry) -> u32 {
        if self.umask.is_some() {
            e.mode & 0o777
        } else {
            0o600
        }
    }

    /// Whether a file of entry `e`, created fresh, already has `e`'s mode.
    fn has_mode(&self, e: &Entry) -> bool {
        self.umask.is_some_and(|u| e.mode & 0o7777 == e.mode & 0o777 & !u)
    }

    /// Whether a file created fresh already has `e`'s owner and group.
    fn has_owner(&self, e: &Entry) -> bool {
        self.owner == Some((e.uid, e.gid))
    }
}

/// Where one file stands during the scan.
struct FileSlot {
    /// Chunks not yet written; the one that brings it to zero finishes the file.
    remaining: AtomicU32,
    /// Open while chunks are still coming.
    handle: Mutex<Option<Arc<OpenFile>>>,
    /// Created (by the first chunk, or by `finish_untouched`).
    created: AtomicBool,
}

struct Writer<'a> {
    entries: &'a [Entry],
    dest: &'a [Option<PathBuf>],
    /// Per entry: restored as zeros, its chunks not wanted.
    hollow: &'a [bool],
    slots: Vec<FileSlot>,
    /// Per entry: every byte of it is data (no chunk is a hole).
    dense: Vec<bool>,
    as_root: bool,
    inherit: Inherit,
    /// Direct I/O still in use: cleared for good by the first filesystem that refuses it.
    direct: AtomicBool,
    /// Direct writes go through an io_uring per decompressor thread, where the kernel offers one.
    uring: bool,
    /// Some write went through io_uring.
    uring_used: AtomicBool,
    /// Bytes written through the page cache so far.
    buffered: std::sync::atomic::AtomicU64,
    /// Wakes the flusher every [`FLUSH_EVERY`] of them; taken when the scan ends.
    flush: Mutex<Option<crossbeam_channel::Sender<()>>>,
}

impl<'a> Writer<'a> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        set: &BackupSet,
        entries: &'a [Entry],
        dest: &'a [Option<PathBuf>],
        hollow: &'a [bool],
        as_root: bool,
        inherit: Inherit,
        direct: bool,
        uring: bool,
        flush: crossbeam_channel::Sender<()>,
    ) -> Self {
        let mut counts = vec![0u32; entries.len()];
        for e in set.stripes.iter().flat_map(|s| s.index.iter()) {
            counts[e.file_id as usize] += 1;
        }
        let slots = counts
            .into_iter()
            .map(|c| FileSlot { remaining: AtomicU32::new(c), handle: Mutex::new(None), created: AtomicBool::new(false) })
            .collect();
        // A hollow file is only sized, so that it stays sparse.
        let dense = data_bytes(set, entries.len()).into_iter().zip(entries).zip(hollow).map(|((b, e), &h)| b == e.size && !h).collect();
        Writer {
            entries,
            dest,
            hollow,
            slots,
            dense,
            as_root,
            inherit,
            direct: AtomicBool::new(direct),
            uring,
            uring_used: AtomicBool::new(false),
            buffered: Default::default(),
            flush: Mutex::new(Some(flush)),
        }
    }

    /// Create and size the file for entry `id`: with direct I/O while the filesystem takes it, for
    /// files of a chunk or more (small files were packed: their bytes are not aligned, and the page
    /// cache with one syncfs at the end beats a synchronous write each). `first` is the length of
    /// the chunk that creates it: when that is the whole file, no sizing is needed.
    fn create(&self, id: usize, path: &Path, first: Option<usize>) -> Result<OpenFile> {
        // Its directory exists: every parent is a directory entry (validate_paths), made first.
        // Nothing is there (the target was empty or emptied, and no two entries share a path), so
        // it is made new; should something be there after all, it is truncated and its owner and
        // mode set as for any file.
        let e = &self.entries[id];
        let mut o = OpenOptions::new();
        o.write(true).create_new(true).mode(self.inherit.open_mode(e));
        let size = e.size;
        let open = |o: &OpenOptions| {
            let direct = |p: &Path| o.clone().custom_flags(libc::O_DIRECT).open(p);
            if size >= crate::backup::PACK_LIMIT {
                open_output(o, path, &self.direct, &direct)
            } else {
                o.open(path).map(|file| OpenFile { file, direct: false, padded: AtomicBool::new(false), fresh: true })
            }
        };
        let f = match open(&o) {
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
                o.create_new(false).create(true).truncate(true);
                open(&o).map(|f| OpenFile { fresh: false, ..f })
            }
            r => r,
        };
        let f = f.map_err(|e| io_at(ErrorKind::Target, "cannot create file", path, e))?;
        self.slots[id].created.store(true, Ordering::Release);
        if first.is_some_and(|n| n as u64 == size) {
            return Ok(f);
        }
        // Sized up front: chunks land by position, and all-zero chunks need no write. A file
        // written directly that is data throughout also gets its blocks reserved: with them
        // allocated, concurrent direct writes to it share the inode instead of taking turns
        // to allocate (ext4), and the kernel takes them without handing each to a worker thread.
        // Measured here, TPC-H scale 1, lz4, median of 5 with dd in each round: 0.64 s with, 0.91 s
        // without (dd 0.74 s). Buffered files are only sized: converting reserved (unwritten)
        // extents at writeback cost seconds of system time per GiB here. Files with holes are only
        // sized too, so that they come back sparse.
        if f.direct && self.dense[id] && preallocate(&f.file, size) {
            return Ok(f);
        }
        f.file.set_len(size).map_err(|e| io_at(ErrorKind::Target, "cannot size file", path, e))?;
        Ok(f)
    }

    /// Files no chunk touched (empty, or every chunk elsewhere... none): create and finish them.
    fn finish_untouched(&self) -> Result<()> {
        for (id, (e, d)) in self.entries.iter().zip(self.dest).enumerate() {
            let (Some(d), EntryKind::File) = (d, e.kind) else { continue };
            if !self.slots[id].created.load(Ordering::Acquire) {
                let f = self.create(id, d, None)?;
                self.finish_file(e, &f, d)?;
            }
        }
        Ok(())
    }
}

impl Writer<'_> {
    /// The open file for entry `id` (created by the first chunk to come), or `None` when it is
    /// not restored or already finished.
    fn handle(&self, id: usize, path: &Path, first: Option<usize>) -> Result<Option<Arc<OpenFile>>> {
        let slot = &self.slots[id];
        let mut h = slot.handle.lock().unwrap_or_else(|p| p.into_inner());
        if h.is_none() && !slot.created.load(Ordering::Acquire) {
            *h = Some(Arc::new(self.create(id, path, first)?));
        }
        Ok(h.clone())
    }

    fn write(&self, f: &OpenFile, path: &Path, data: &[u8], offset: u64) -> Result<()> {
        if f.direct {
            if !write_direct(&f.file, data, offset).map_err(|e| io_at(ErrorKind::Target, "cannot write", path, e))? {
                self.direct.store(false, Ordering::Relaxed);
            }
        } else {
            f.file.write_all_at(data, offset).map_err(|e| io_at(ErrorKind::Target, "cannot write", path, e))?;
            let n = data.len() as u64;
            let before = self.buffered.fetch_add(n, Ordering::Relaxed);
            if before / FLUSH_EVERY != (before + n) / FLUSH_EVERY {
                if let Some(tx) = &*self.flush.lock().unwrap_or_else(|p| p.into_inner()) {
                    // Already woken and not yet started: nothing more to do.
                    let _ = tx.try_send(());
                }
            }
        }
        Ok(())
    }

    /// One more chunk of entry `id` is on disk; the last one finishes the file (trim, owner, mode,
    /// times). Every chunk counts itself only after its own write, so the last to count comes
    /// after every write of the file, whichever thread made it.
    fn done(&self, id: usize, path: &Path) -> Result<()> {
        let slot = &self.slots[id];
        if slot.remaining.fetch_sub(1, Ordering::AcqRel) != 1 {
            return Ok(());
        }
        match slot.handle.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(f) => {
                if f.padded.load(Ordering::Acquire) {
                    // A tail written padded to the block ran past the end: back to the true size.
                    f.file.set_len(self.entries[id].size).map_err(|e| io_at(ErrorKind::Target, "cannot size file", path, e))?;
                }
                self.finish_file(&self.entries[id], &f, path)
            }
            None => apply_metadata(&self.entries[id], path, self.as_root),
        }
    }
}

impl Writer<'_> {
    /// A file whose every byte is written: its owner and mode (where it has not had them since it
    /// was made) and times. (Starting each small file's write-back here, with sync_file_range,
    /// was measured slower: 100,000 separate 8 KiB writes instead of the merged ones a syncfs
    /// makes, 5.7 s against 4.5 s.)
    fn finish_file(&self, e: &Entry, f: &OpenFile, path: &Path) -> Result<()> {
        let fresh = |has: bool| f.fresh && has;
        let chown = self.as_root && !fresh(self.inherit.has_owner(e));
        // Set-ID bits, which a change of owner clears, always mean a chmod after it.
        let chmod = !fresh(self.inherit.has_mode(e));
        apply_metadata_fd(e, &f.file, path, chown, chmod)
    }
}

impl ChunkSink for Writer<'_> {
    fn lane(&self) -> Result<Box<dyn Lane + '_>> {
        Ok(Box::new(WriteLane::new(self)))
    }

    fn holds(&self) -> usize {
        IN_FLIGHT
    }

    fn wants(&self, file_id: u32) -> bool {
        let id = file_id as usize;
        self.dest.get(id).is_some_and(Option::is_some) && !self.hollow.get(id).copied().unwrap_or(false)
    }
}

/// Direct writes one decompressor thread keeps in flight: while the disk writes them, the thread
/// decompresses the next chunks (a thread that waited for each of its writes left the CPU idle
/// for every write and the disk idle for every decompression).
const IN_FLIGHT: usize = 3;

/// A write the kernel is doing: its buffer and file stay alive until it completes.
struct InFlight {
    id: usize,
    offset: u64,
    file: Arc<OpenFile>,
    /// The chunk, a file's last one zero-padded to the block.
    data: Decoded,
}

/// One decompressor thread's writes. Packed chunks (small files, through the page cache) and
/// files without direct I/O are written at once; whole chunks of direct files go to the disk
/// asynchronously through an io_uring of the thread's own, or synchronously where the kernel
/// offers none (disabled, or refused by a sandbox).
struct WriteLane<'w, 'a> {
    writer: &'w Writer<'a>,
    ring: Option<io_uring::IoUring>,
    /// Indexed by the request's user data.
    flight: Vec<Option<InFlight>>,
    busy: usize,
}

impl<'w, 'a> WriteLane<'w, 'a> {
    fn new(writer: &'w Writer<'a>) -> Self {
        let ring = if writer.uring { io_uring::IoUring::new(IN_FLIGHT.next_power_of_two() as u32).ok() } else { None };
        WriteLane { writer, ring, flight: (0..IN_FLIGHT).map(|_| None).collect(), busy: 0 }
    }

    /// Wait for at least `want` writes to complete (0: only those done already), and settle them.
    fn reap(&mut self, want: usize) -> Result<()> {
        let Some(ring) = &mut self.ring else { return Ok(()) };
        if want > 0 {
            loop {
                match ring.submit_and_wait(want) {
                    Ok(_) => break,
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                    Err(e) => return Err(Error::io(ErrorKind::Io, "io_uring: cannot wait for writes", e)),
                }
            }
        }
        let done: Vec<(u64, i32)> = ring.completion().map(|c| (c.user_data(), c.result())).collect();
        let mut first_err = None;
        for (key, res) in done {
            let Some(w) = self.flight.get_mut(key as usize).and_then(Option::take) else { continue };
            self.busy -= 1;
            if let Err(e) = self.settle(w, res) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// A completed write: what the kernel did not write (a short write, or all of it where it
    /// refused direct I/O after all: EINVAL) is written synchronously, falling back to the page
    /// cache as [`write_direct`] does; then the chunk counts.
    fn settle(&self, w: InFlight, res: i32) -> Result<()> {
        let path = self.writer.dest[w.id].as_deref().expect("only restored files are written");
        let written = match res {
            r if r == -libc::EINVAL => 0,
            r if r < 0 => return Err(io_at(ErrorKind::Target, "cannot write", path, std::io::Error::from_raw_os_error(-r))),
            r => r as usize,
        };
        if written < w.data.len() {
            self.writer.write(&w.file, path, &w.data[written..], w.offset + written as u64)?;
        }
        drop(w.data);
        self.writer.done(w.id, path)
    }
}

impl Lane for WriteLane<'_, '_> {
    fn chunk(&mut self, file_id: u32, offset: u64, _len: usize, data: Option<&[u8]>) -> Result<()> {
        let id = file_id as usize;
        // A hollow file's chunks (in a packed frame read for another file) are dropped too.
        let Some(path) = self.writer.dest[id].as_ref().filter(|_| !self.writer.hollow[id]) else { return Ok(()) };
        let handle = self.writer.handle(id, path, data.map(<[u8]>::len))?;
        if let (Some(data), Some(f)) = (data, &handle) {
            self.writer.write(f, path, data, offset)?;
        }
        drop(handle);
        self.writer.done(id, path)
    }

    fn owned(&mut self, file_id: u32, offset: u64, mut data: Decoded) -> Result<()> {
        let id = file_id as usize;
        let Some(path) = self.writer.dest[id].as_ref().filter(|_| !self.writer.hollow[id]) else { return Ok(()) };
        let Some(file) = self.writer.handle(id, path, Some(data.len()))? else {
            return Err(Error::new(ErrorKind::Io, format!("internal: a chunk of {} came after its last", path.display())));
        };
        // A direct file's last, partial block goes out zero-padded to the block, in the chunk's own
        // buffer (a whole number of blocks long: direct I/O needs a transfer size that is); the
        // file is trimmed back when it is done.
        let len = data.len();
        if file.direct && len % ALIGN != 0 {
            data.set_len(len.next_multiple_of(ALIGN));
            data[len..].fill(0);
            file.padded.store(true, Ordering::Release);
        }
        if self.ring.is_none() || !file.direct || !is_aligned(&data, offset) || data.len() > u32::MAX as usize {
            self.writer.write(&file, path, &data, offset)?;
            drop(file);
            return self.writer.done(id, path);
        }
        if self.busy == IN_FLIGHT {
            self.reap(1)?;
        }
        let key = self.flight.iter().position(Option::is_none).expect("a free slot after reaping");
        use std::os::unix::io::AsRawFd;
        let op = io_uring::opcode::Write::new(io_uring::types::Fd(file.file.as_raw_fd()), data.as_ptr(), data.len() as u32)
            .offset(offset)
            .build()
            .user_data(key as u64);
        let ring = self.ring.as_mut().expect("checked above");
        // SAFETY: the buffer and the descriptor live in `flight` until the kernel reports the write
        // complete (`reap`), and the lane waits for every write before it is dropped.
        unsafe { ring.submission().push(&op) }.map_err(|_| Error::new(ErrorKind::Io, "internal: io_uring submission queue full"))?;
        self.flight[key] = Some(InFlight { id, offset, file, data });
        self.busy += 1;
        self.writer.uring_used.store(true, Ordering::Relaxed);
        if let Err(e) = ring.submit() {
            if e.raw_os_error() != Some(libc::EINTR) && e.raw_os_error() != Some(libc::EAGAIN) && e.raw_os_error() != Some(libc::EBUSY) {
                return Err(Error::io(ErrorKind::Io, "io_uring: cannot submit a write", e));
            }
        }
        self.reap(0)
    }

    fn finish(&mut self) -> Result<()> {
        let mut first_err = None;
        while self.busy > 0 {
            let before = self.busy;
            if let Err(e) = self.reap(1) {
                first_err.get_or_insert(e);
                if self.busy == before {
                    // The wait itself failed: `drop` deals with what is still in flight.
                    break;
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

impl Drop for WriteLane<'_, '_> {
    /// The kernel may still be writing from buffers this lane owns: wait for every write before
    /// they are freed (an error path that left early gets here too).
    fn drop(&mut self) {
        let Some(ring) = &mut self.ring else { return };
        while self.flight.iter().any(Option::is_some) {
            if let Err(e) = ring.submit_and_wait(1) {
                if e.raw_os_error() != Some(libc::EINTR) {
                    // Waiting is impossible: leak the buffers rather than free memory in use.
                    std::mem::forget(std::mem::take(&mut self.flight));
                    return;
                }
            }
            for c in ring.completion() {
                if let Some(slot) = self.flight.get_mut(c.user_data() as usize) {
                    *slot = None;
                }
            }
        }
    }
}

/// Reserve `size` bytes of blocks for `f` and set its size; false where the filesystem cannot (the
/// caller only sizes it then).
fn preallocate(f: &fs::File, size: u64) -> bool {
    use std::os::unix::io::AsRawFd;
    let Ok(len) = libc::off_t::try_from(size) else { return false };
    // SAFETY: fallocate on a descriptor we own.
    unsafe { libc::fallocate(f.as_raw_fd(), 0, 0, len) == 0 }
}

/// Open `path` with `open_direct` (O_DIRECT) while `direct` holds; a filesystem that refuses it
/// (EINVAL: older tmpfs, some network and FUSE filesystems) clears `direct` for the rest of the
/// restore, and the file is opened buffered.
fn open_output(o: &OpenOptions, path: &Path, direct: &AtomicBool, open_direct: &dyn Fn(&Path) -> std::io::Result<fs::File>) -> std::io::Result<OpenFile> {
    if direct.load(Ordering::Relaxed) {
        match open_direct(path) {
            Ok(file) => return Ok(OpenFile { file, direct: true, padded: AtomicBool::new(false), fresh: true }),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => direct.store(false, Ordering::Relaxed),
            Err(e) => return Err(e),
        }
    }
    Ok(OpenFile { file: o.open(path)?, direct: false, padded: AtomicBool::new(false), fresh: true })
}

/// Write `data` at `offset` to a file opened with O_DIRECT: as it is where it is aligned (whole
/// blocks from an aligned buffer at a block offset: a decompressor's chunk, its tail padded), else,
/// or where the kernel refuses it (EINVAL), through the page cache from then on. Returns whether
/// it stayed direct.
fn write_direct(f: &fs::File, data: &[u8], offset: u64) -> std::io::Result<bool> {
    if is_aligned(data, offset) {
        match f.write_all_at(data, offset) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            r => return r.map(|()| true),
        }
    }
    buffered_from_now_on(f)?;
    f.write_all_at(data, offset).map(|()| false)
}

/// Drop O_DIRECT from `f` (every thread writing that file then goes through the page cache).
fn buffered_from_now_on(f: &fs::File) -> std::io::Result<()> {
    use std::os::unix::io::AsRawFd;
    let fd = f.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own; F_GETFL/F_SETFL touch only its status flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_DIRECT) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Per file, the bytes that will be written (zero frames stay holes), from every stripe's index.
fn data_bytes(set: &BackupSet, files: usize) -> Vec<u64> {
    let mut out = vec![0u64; files];
    for e in set.stripes.iter().flat_map(|s| s.index.iter()).filter(|e| e.stored_len > 0) {
        if let Some(b) = out.get_mut(e.file_id as usize) {
            *b += u64::from(e.raw_len);
        }
    }
    out
}

/// Bytes free to this user on the filesystem of `dir`, and its device; `None` if it cannot say.
pub fn free_space(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let dev = fs::metadata(dir).ok()?.dev();
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: a valid C string and a zeroed struct for statvfs to fill.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    (unsafe { libc::statvfs(c.as_ptr(), &mut st) } == 0).then(|| (dev, st.f_bavail as u64 * st.f_frsize as u64))
}

/// Entries may only name plain relative paths, and every entry's parent must be a directory entry
/// of the same root: nothing a backup holds can make a restore write outside its targets, whether
/// through `..`, an absolute path, or a symlink standing where a directory should be.
fn validate_paths(m: &Manifest) -> Result<()> {
    let bad = |e: &Entry| Error::corrupt(format!("manifest: entry path '{}' is not a plain relative path; refusing to restore", e.path));
    let mut dirs: HashSet<(u16, &[u8])> = HashSet::new();
    for (i, e) in m.entries.iter().enumerate() {
        let p = e.path_bytes();
        if !p.is_empty() {
            if p.split(|&b| b == b'/').any(|c| c.is_empty() || c == b"." || c == b"..") || p.contains(&0) {
                return Err(bad(e));
            }
            let parent = p.iter().rposition(|&b| b == b'/').map_or(&p[..0], |at| &p[..at]);
            if !dirs.contains(&(e.root, parent)) {
                return Err(Error::corrupt(format!(
                    "manifest: '{}' comes before, or without, its directory '{}'; refusing to restore",
                    e.path,
                    String::from_utf8_lossy(parent)
                )));
            }
        }
        match e.kind {
            EntryKind::Dir => {
                dirs.insert((e.root, p));
            }
            // A hard link names a regular file listed before it.
            EntryKind::Hardlink if !e.link.is_some_and(|l| (l as usize) < i && m.entries[l as usize].kind == EntryKind::File) => {
                return Err(Error::corrupt(format!("manifest: hard link '{}' names no regular file before it; refusing to restore", e.path)));
            }
            _ => {}
        }
    }
    for r in &m.roots {
        if r.name.split('/').any(|c| c == "..") {
            return Err(Error::corrupt(format!("manifest: root name '{}' is not a plain relative path; refusing to restore", r.name)));
        }
    }
    Ok(())
}

/// Components below `/` of a `/`-separated path.
fn depth(p: &[u8]) -> usize {
    p.split(|&b| b == b'/').filter(|c| !c.is_empty()).count()
}

/// Remove everything inside `dir` (for `--force`), never `/` itself.
fn clear_dir(dir: &Path) -> Result<()> {
    let canonical = fs::canonicalize(dir).map_err(|e| io_at(ErrorKind::Target, "cannot resolve", dir, e))?;
    if canonical.parent().is_none() {
        return Err(Error::invalid(format!("refusing to clear {} for a forced restore", canonical.display())));
    }
    for item in fs::read_dir(dir).map_err(|e| io_at(ErrorKind::Target, "cannot list", dir, e))? {
        let item = item.map_err(|e| io_at(ErrorKind::Target, "cannot list", dir, e))?;
        remove_any(&item.path())?;
    }
    Ok(())
}

fn join_rel(base: &[u8], rel: &[u8]) -> Vec<u8> {
    let mut out = base.to_vec();
    if !rel.is_empty() {
        while out.last() == Some(&b'/') {
            out.pop();
        }
        out.push(b'/');
        out.extend_from_slice(rel);
    }
    out
}

/// `path` with `prefix` removed if `prefix` is a whole-component prefix.
fn strip_prefix<'a>(path: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    let rest = path.strip_prefix(prefix)?;
    if rest.is_empty() {
        Some(rest)
    } else {
        rest.strip_prefix(b"/")
    }
}

fn ensure_parent(p: &Path) -> Result<()> {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() && !d.exists() => {
            fs::create_dir_all(d).map_err(|e| io_at(ErrorKind::Target, "cannot create directory", d, e))
        }
        _ => Ok(()),
    }
}

fn remove_any(p: &Path) -> Result<()> {
    let m = fs::symlink_metadata(p).map_err(|e| io_at(ErrorKind::Target, "cannot stat", p, e))?;
    let r = if m.is_dir() { fs::remove_dir_all(p) } else { fs::remove_file(p) };
    r.map_err(|e| io_at(ErrorKind::Target, "cannot remove", p, e))
}

/// The filesystems a restore writes to, opened before its first write: a write-back error is
/// reported to every descriptor open when it happened, so one opened at the end could miss an
/// error from before (the kernel's own write-back during the scan, say).
struct Durable {
    /// A directory on each filesystem, once per filesystem, and its path.
    dirs: Vec<(fs::File, PathBuf)>,
    /// Every root was opened: a syncfs of `dirs` covers everything restored (it all lies in
    /// directories this restore made under the roots).
    whole: bool,
}

/// Bytes written through the page cache between two early write-backs ([`Durable::flush_while`]).
const FLUSH_EVERY: u64 = 32 << 20;

impl Durable {
    fn open(roots: &[PathBuf]) -> Self {
        use std::os::unix::fs::MetadataExt;
        let mut devices = HashSet::new();
        let mut dirs = Vec::new();
        let mut whole = true;
        for r in roots {
            match fs::File::open(r) {
                Ok(d) => {
                    if devices.insert(d.metadata().map(|m| m.dev()).unwrap_or(0)) {
                        dirs.push((d, r.clone()));
                    }
                }
                Err(_) => whole = false,
            }
        }
        Durable { dirs, whole }
    }

    /// Everything written so far durable: one `syncfs` per filesystem (thousands of small files
    /// cost one call, as PostgreSQL's `--sync-method=syncfs`). False where that does not cover
    /// it all: the caller fsyncs each file then.
    ///
    /// # Errors
    /// A write-back error on a filesystem (EIO, ENOSPC): some restored data did not reach it.
    fn sync(&self) -> Result<bool> {
        use std::os::fd::AsRawFd;
        if !self.whole {
            return Ok(false);
        }
        for (d, _) in &self.dirs {
            // SAFETY: a descriptor we own.
            if unsafe { libc::syncfs(d.as_raw_fd()) } != 0 {
                return Err(Error::io(ErrorKind::Target, "cannot write restored files back to disk (syncfs): some of their data may not have reached it", std::io::Error::last_os_error()));
            }
        }
        Ok(true)
    }

    /// Until `wake` closes, write back what is dirty each time it is woken ([`FLUSH_EVERY`] bytes
    /// written through the page cache): the disk works while the scan goes on, instead of after
    /// it on one thread (100,000 files of 8 KiB: a 1.5 s final syncfs on this machine), and dirty
    /// memory stays bounded. Through descriptors of its own (not duplicates, which would share
    /// the error cursor): an error here is for the final [`Durable::sync`] to report (each open
    /// file sees it once).
    fn flush_while(&self, wake: &crossbeam_channel::Receiver<()>) {
        use std::os::fd::AsRawFd;
        let own: Vec<fs::File> = self.dirs.iter().filter_map(|(_, p)| fs::File::open(p).ok()).collect();
        for () in wake {
            for d in &own {
                // SAFETY: a descriptor we own; the result is the final sync's to report.
                unsafe { libc::syncfs(d.as_raw_fd()) };
            }
        }
    }
}

fn fsync_all(files: &[&Path], threads: usize) -> Result<()> {
    if files.is_empty() {
        return Ok(());
    }
    let per = files.len().div_ceil(threads.max(1));
    std::thread::scope(|s| {
        let hs: Vec<_> = files
            .chunks(per)
            .map(|group| {
                s.spawn(move || -> Result<()> {
                    for p in group {
                        let f = fs::File::open(p).map_err(|e| io_at(ErrorKind::Target, "cannot open", p, e))?;
                        f.sync_all().map_err(|e| io_at(ErrorKind::Target, "cannot fsync", p, e))?;
                    }
                    Ok(())
                })
            })
            .collect();
        hs.into_iter().try_for_each(|h| h.join().unwrap_or_else(|_| Err(Error::new(ErrorKind::Io, "fsync thread panicked"))))
    })
}

fn c_path(p: &Path) -> Result<std::ffi::CString> {
    std::ffi::CString::new(p.as_os_str().as_bytes()).map_err(|_| Error::invalid(format!("path {} holds a NUL byte", p.display())))
}

/// Owner, mode and modification time of a file being written, through its descriptor (no walk
/// of its path): owner first, since a change of owner clears set-id bits.
/// Owner (`chown`: as root, where the file may not have it yet; changing it clears set-ID bits, so
/// the mode follows), mode (`chmod`) and times of the open file `f`.
fn apply_metadata_fd(e: &Entry, f: &fs::File, p: &Path, chown: bool, chmod: bool) -> Result<()> {
    use std::os::fd::AsRawFd;
    let fd = f.as_raw_fd();
    // SAFETY: calls on a descriptor we own, with a two-element timespec array.
    unsafe {
        if chown && libc::fchown(fd, e.uid, e.gid) != 0 {
            return Err(io_at(ErrorKind::Target, "cannot set owner of", p, std::io::Error::last_os_error()));
        }
        if chmod && libc::fchmod(fd, e.mode as libc::mode_t) != 0 {
            return Err(io_at(ErrorKind::Target, "cannot set mode of", p, std::io::Error::last_os_error()));
        }
        let times = [libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT }, mtime_spec(e)];
        if libc::futimens(fd, times.as_ptr()) != 0 {
            return Err(io_at(ErrorKind::Target, "cannot set times of", p, std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

fn mtime_spec(e: &Entry) -> libc::timespec {
    libc::timespec { tv_sec: e.mtime_ns.div_euclid(1_000_000_000) as _, tv_nsec: e.mtime_ns.rem_euclid(1_000_000_000) as _ }
}

fn apply_metadata(e: &Entry, p: &Path, as_root: bool) -> Result<()> {
    let c = c_path(p)?;
    if as_root {
        // SAFETY: valid C string; lchown does not follow links.
        if unsafe { libc::lchown(c.as_ptr(), e.uid, e.gid) } != 0 {
            return Err(io_at(ErrorKind::Target, "cannot set owner of", p, std::io::Error::last_os_error()));
        }
    }
    if e.kind != EntryKind::Symlink {
        fs::set_permissions(p, fs::Permissions::from_mode(e.mode)).map_err(|err| io_at(ErrorKind::Target, "cannot set mode of", p, err))?;
    }
    let times = [libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT }, mtime_spec(e)];
    // SAFETY: valid C string and a two-element timespec array.
    if unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(io_at(ErrorKind::Target, "cannot set times of", p, std::io::Error::last_os_error()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aligned::AlignedBuf;

    #[test]
    fn a_new_files_mode_and_owner_are_trusted_only_where_certain() {
        let e = |mode: u32, uid: u32, gid: u32| Entry { mode: 0o100000 | mode, uid, gid, ..Entry::default() };
        let known = Inherit { umask: Some(0o022), owner: Some((0, 0)) };
        assert_eq!(known.open_mode(&e(0o4755, 0, 0)), 0o755, "set-ID bits never on creation");
        for (mode, has) in [(0o644, true), (0o600, true), (0o400, true), (0o000, true), (0o666, false), (0o664, false), (0o4755, false), (0o2750, false), (0o1644, false)] {
            assert_eq!(known.has_mode(&e(mode, 0, 0)), has, "{mode:o} under umask 022");
        }
        assert!(Inherit { umask: Some(0), ..known }.has_mode(&e(0o666, 0, 0)));
        assert!(known.has_owner(&e(0o644, 0, 0)) && !known.has_owner(&e(0o644, 0, 1)) && !known.has_owner(&e(0o644, 26, 0)));
        // Unknown (a default ACL, a set-group-ID root): owner-only on creation, everything set.
        assert_eq!(Inherit::NONE.open_mode(&e(0o644, 0, 0)), 0o600);
        assert!(!Inherit::NONE.has_mode(&e(0o600, 0, 0)) && !Inherit::NONE.has_owner(&e(0o600, 0, 0)));
    }

    #[test]
    fn a_set_group_id_root_makes_the_owner_unknown() {
        let d = tempfile::tempdir().unwrap();
        fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let plain = Inherit::probe(&[d.path().to_path_buf()]);
        // SAFETY: getters that cannot fail.
        assert_eq!(plain.owner, Some(unsafe { (libc::geteuid(), libc::getegid()) }));
        fs::set_permissions(d.path(), fs::Permissions::from_mode(0o2755)).unwrap();
        assert_eq!(Inherit::probe(&[d.path().to_path_buf()]).owner, None);
    }

    #[test]
    fn a_filesystem_refusing_direct_io_gets_buffered_writes() {
        let d = tempfile::tempdir().unwrap();
        let mut o = OpenOptions::new();
        o.write(true).create(true).truncate(true);
        let direct = AtomicBool::new(true);
        let refuse = |_: &Path| -> std::io::Result<fs::File> { Err(std::io::Error::from_raw_os_error(libc::EINVAL)) };
        let f = open_output(&o, &d.path().join("a"), &direct, &refuse).unwrap();
        assert!(!f.direct && !direct.load(Ordering::Relaxed), "buffered from now on");
        f.file.write_all_at(b"x", 0).unwrap();
        assert_eq!(fs::read(d.path().join("a")).unwrap(), b"x");
        let never = |_: &Path| -> std::io::Result<fs::File> { panic!("not tried again") };
        assert!(!open_output(&o, &d.path().join("b"), &direct, &never).unwrap().direct);
        // Any other error is the file's own problem, named.
        let direct = AtomicBool::new(true);
        let denied = |_: &Path| -> std::io::Result<fs::File> { Err(std::io::Error::from_raw_os_error(libc::EACCES)) };
        assert!(open_output(&o, &d.path().join("c"), &direct, &denied).is_err());
        assert!(direct.load(Ordering::Relaxed));
    }

    #[test]
    fn direct_writes_go_direct_only_when_aligned() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        let f = match OpenOptions::new().write(true).create(true).truncate(true).custom_flags(libc::O_DIRECT).open(&p) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return eprintln!("skipped: {} takes no O_DIRECT", d.path().display()),
            Err(e) => panic!("{e}"),
        };
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        // Whole blocks from an aligned buffer go direct.
        let mut b = AlignedBuf::new(12_288);
        b[..10_000].copy_from_slice(&data);
        assert!(write_direct(&f, &b[..8192], 0).unwrap(), "whole aligned blocks stay direct");
        assert!(write_direct(&f, &b, 0).unwrap(), "a tail padded to the block stays direct");
        assert_eq!(fs::metadata(&p).unwrap().len(), 12_288);
        f.set_len(10_000).unwrap();
        assert_eq!(fs::read(&p).unwrap(), data);
        // Not aligned (an address off the block, a length short of it): through the page cache,
        // exactly, and buffered from then on.
        assert!(!write_direct(&f, &data[1..], 0).unwrap());
        f.set_len(9_999).unwrap();
        assert_eq!(fs::read(&p).unwrap(), &data[1..]);
    }

    #[test]
    fn relocation_parsing() {
        assert_eq!(parse_relocation("a/b=/x").unwrap(), ("a/b".to_string(), PathBuf::from("/x")));
        assert_eq!(parse_relocation("a/=/x").unwrap().0, "a");
        for bad in ["a", "=x", "a="] {
            assert!(parse_relocation(bad).unwrap_err().to_string().contains("OLD=NEW"));
        }
    }

    #[test]
    fn prefix_is_whole_components() {
        assert_eq!(strip_prefix(b"base/1/2", b"base/1"), Some(&b"2"[..]));
        assert_eq!(strip_prefix(b"base/1", b"base/1"), Some(&b""[..]));
        assert_eq!(strip_prefix(b"base/12", b"base/1"), None);
    }
}
