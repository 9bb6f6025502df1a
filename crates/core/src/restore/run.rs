//! A restore's steps in order, once its plan is made and its roots are ready: directories,
//! symlinks and FIFOs; every file through the scan and the writer; hard links; then durability,
//! and metadata deepest first.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::durable::{fsync_all, Durable};
use super::metadata::{apply_metadata, mkfifo};
use super::options::RestoreOptions;
use super::plan::Plan;
use super::scan::{scan, Scanned};
use super::target::{ensure_parent, remove_any};
use super::chain::BlockMap;
use super::write::{Inherit, Writer};
use crate::aligned::ALIGN;
use crate::error::{io_at, ErrorKind, Result};
use crate::manifest::{Entry, EntryKind};
use crate::pipeline::Progress;
use crate::set::BackupSet;
use crate::storage::local::sync_dir;

impl Plan<'_> {
    /// Returns whether direct I/O held throughout, and whether io_uring carried writes.
    /// `sets` is the chain, oldest first (a full set alone is a chain of one); `map` where each
    /// byte comes from.
    pub(super) fn run(&self, sets: &[&BackupSet], map: &BlockMap, opts: &RestoreOptions, progress: Arc<dyn Progress>) -> Result<(bool, bool, Scanned)> {
        // A delta restore writes over what is there: its space is mostly taken already.
        if !opts.delta {
            self.check_space(&map.data_bytes)?;
        }
        let durable = Durable::open(&self.roots);
        let entries = &self.manifest.entries;
        let as_root = crate::host::is_root();
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
            mkfifo(d)?;
            apply_metadata(e, d, as_root)?;
        }

        // Files are created by the first of their chunks to arrive, on every core, and finished
        // (owner, mode, times) by the last; files without chunks are made here after.
        let direct = !opts.buffered && sets.iter().all(|s| s.stripes[0].header.transfer_size as usize % ALIGN == 0);
        let (kick, wake) = crossbeam_channel::bounded(1);
        let writer = Writer::new(&map.pieces, &map.data_bytes, entries, &self.dest, &self.hollow, as_root, Inherit::probe(&self.roots), direct, !opts.sync_writes, kick, opts.delta);
        let scanned = std::thread::scope(|s| {
            s.spawn(|| durable.flush_while(&wake));
            // Each set of the chain in turn, oldest first: each gives the bytes no newer set has,
            // so every byte is written once, whatever the order.
            let mut r = Ok(Scanned::default());
            for (g, set) in sets.iter().enumerate() {
                r = r.and_then(|total| {
                    let one = scan(set, opts.threads, progress.clone(), &map.sink(g, &writer))?;
                    Ok(Scanned { frames: total.frames + one.frames, bytes_read: total.bytes_read + one.bytes_read })
                });
            }
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
            fsync_all(&files, opts.threads.unwrap_or_else(crate::host::available_cores))?;
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
}
