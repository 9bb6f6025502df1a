//! A restore's steps in order, once its plan is made and its roots are ready: directories,
//! symlinks and FIFOs; every file through the scan and the writer; hard links; then durability,
//! and metadata deepest first.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::chain::BlockMap;
use super::durable::{fsync_all, Durable};
use super::metadata::{apply_metadata, mkfifo};
use super::options::RestoreOptions;
use super::plan::Plan;
use super::scan::{scan, Scanned};
use super::target::{ensure_parent, remove_any, Space};
use super::write::{Inherit, Restored, Writer};
use crate::aligned::ALIGN;
use crate::error::{io_at, ErrorKind, Result};
use crate::manifest::{Entry, EntryKind};
use crate::pipeline::Progress;
use crate::set::BackupSet;
use crate::whole::sync_dir;
use std::collections::HashSet;

impl Plan<'_> {
    /// Returns whether direct I/O held throughout, whether io_uring carried writes, what was
    /// read, and what was restored. `sets` is the chain, oldest first (a full set alone is a chain
    /// of one); `map` where each byte comes from. Every step is a pass over the newest set's
    /// entries (a page at a time when it is opened lean): what is held is the directories, for
    /// their metadata last, and the files in flight.
    pub(super) fn run(
        &self,
        sets: &[&BackupSet],
        map: &BlockMap,
        mut space: Space<'_>,
        opts: &RestoreOptions,
        progress: Arc<dyn Progress>,
    ) -> Result<(bool, bool, Scanned, Restored)> {
        let set = self.set;
        // One set restored whole: its index gives the data bytes per filesystem and which files
        // have holes (a chain's map gave them to `space` as it was made). A delta restore writes
        // over what is there: its space is mostly taken already.
        let mut sparse = HashSet::new();
        if map.is_single() {
            for s in &set.stripes {
                for c in s.index_entries()? {
                    let c = c?;
                    if c.stored_len == 0 {
                        sparse.insert(c.file_id);
                    } else {
                        space.add(self, c.file_id, u64::from(c.raw_len))?;
                    }
                }
            }
        }
        if !opts.delta {
            space.check()?;
        }
        let durable = Durable::open(&self.roots);
        let as_root = crate::host::is_root();
        // Directories first (parents before children: the listing is in tree order), owner-writable
        // until the end so that their contents can be created; they are kept for their metadata,
        // set last. Symlinks and FIFOs in the same pass, their metadata at once (writing into
        // their folder later does not touch it).
        let mut dirs: Vec<(Entry, PathBuf)> = Vec::new();
        set.each_entry(|id, e| {
            if !matches!(e.kind, EntryKind::Dir | EntryKind::Symlink | EntryKind::Fifo) {
                return Ok(());
            }
            let Some(d) = self.dest(id, e) else { return Ok(()) };
            if e.kind == EntryKind::Dir {
                match fs::symlink_metadata(&d) {
                    Ok(m) if m.is_dir() => {}
                    Ok(_) => remove_any(&d)?,
                    Err(_) => {}
                }
                fs::create_dir_all(&d).map_err(|e| io_at(ErrorKind::Target, "cannot create directory", &d, e))?;
                fs::set_permissions(&d, fs::Permissions::from_mode(0o700)).map_err(|e| io_at(ErrorKind::Target, "cannot set mode of", &d, e))?;
                dirs.push((e.clone(), d));
                return Ok(());
            }
            if fs::symlink_metadata(&d).is_ok() {
                remove_any(&d)?;
            }
            // A relocated entry's folder may come later in the listing.
            ensure_parent(&d)?;
            if e.kind == EntryKind::Symlink {
                std::os::unix::fs::symlink(OsStr::from_bytes(e.target_bytes().unwrap_or_default()), &d).map_err(|e| io_at(ErrorKind::Target, "cannot create symlink", &d, e))?;
            } else {
                mkfifo(&d)?;
            }
            apply_metadata(e, &d, as_root)
        })?;

        // Files are created by the first of their chunks to arrive, on every core, and finished
        // (owner, mode, times) by the last; files without chunks are made here after.
        let direct = !opts.buffered && sets.iter().all(|s| s.stripes[0].header.transfer_size as usize % ALIGN == 0);
        let (kick, wake) = crossbeam_channel::bounded(1);
        let writer = Writer::new(self, map, sparse, as_root, Inherit::probe(&self.roots), direct, !opts.sync_writes, kick, opts.delta);
        let scanned = std::thread::scope(|s| {
            s.spawn(|| durable.flush_while(&wake));
            // Each set of the chain in turn, oldest first: each gives the bytes no newer set has,
            // so every byte is written once, whatever the order.
            let mut r = Ok(Scanned::default());
            for (g, set) in sets.iter().enumerate() {
                r = r.and_then(|total| {
                    let one = if map.is_single() {
                        scan(set, opts.threads, progress.clone(), &opts.stop, &writer)?
                    } else {
                        scan(set, opts.threads, progress.clone(), &opts.stop, &map.sink(g, &writer))?
                    };
                    Ok(Scanned { frames: total.frames + one.frames, bytes_read: total.bytes_read + one.bytes_read })
                });
            }
            // Its last sender gone, the flusher ends.
            writer.flush.lock().unwrap_or_else(|p| p.into_inner()).take();
            r
        })?;
        // Files no chunk reached, and hard links (each names a file listed before it, whole by
        // the time the pass reaches the link).
        let restored = writer.finish_untouched(|id, e| self.link_hard_link(id, e, as_root))?;

        // Durable contents, then directories deepest first.
        let synced = durable.sync()?;
        if !synced {
            // A file at a time on every core, a batch of them at a time.
            let threads = opts.threads.unwrap_or_else(crate::host::available_cores);
            let mut batch: Vec<PathBuf> = Vec::new();
            set.each_entry(|id, e| {
                if e.kind == EntryKind::File {
                    batch.extend(self.dest(id, e));
                }
                if batch.len() == 4096 {
                    fsync_all(&batch.iter().map(PathBuf::as_path).collect::<Vec<_>>(), threads)?;
                    batch.clear();
                }
                Ok(())
            })?;
            fsync_all(&batch.iter().map(PathBuf::as_path).collect::<Vec<_>>(), threads)?;
        }
        // Directories deepest first. The markers go first so that they do not disturb a root's
        // mtime, but only once every file's data is durable. Then one more syncfs, or each
        // directory is opened before its mode is set (a mode without owner read would stop us
        // opening it after), its metadata set and it fsynced.
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
        Ok((writer.direct.load(Ordering::Relaxed), writer.uring_used.load(Ordering::Relaxed), scanned, restored))
    }

    /// Hard link `id` (entry `e`; anything else is left alone), once the file it names is whole:
    /// linked where both names land on one filesystem, else (relocated apart) copied.
    fn link_hard_link(&self, id: u32, e: &Entry, as_root: bool) -> Result<()> {
        let (EntryKind::Hardlink, Some(first)) = (e.kind, e.link) else { return Ok(()) };
        let Some(d) = self.dest(id, e) else { return Ok(()) };
        let Some((target, to)) = self.set.with_entry(first, |t| self.dest(first, t).map(|to| (t.clone(), to)))? else { return Ok(()) };
        if fs::symlink_metadata(&d).is_ok() {
            remove_any(&d)?;
        }
        match fs::hard_link(&to, &d) {
            Ok(()) => Ok(()),
            Err(err) if err.raw_os_error() == Some(libc::EXDEV) => {
                fs::copy(&to, &d).map_err(|err| io_at(ErrorKind::Target, "cannot copy (for a hard link across filesystems)", &d, err))?;
                apply_metadata(&target, &d, as_root)
            }
            Err(err) => Err(io_at(ErrorKind::Target, "cannot create hard link", &d, err)),
        }
    }
}
