//! The restore's writer: the [`ChunkSink`] that creates each file on its first chunk (sized up
//! front, with direct I/O where the filesystem takes it), writes every chunk at its offset and
//! finishes the file (trim, owner, mode, times) on its last; and its lane per decompressor
//! thread, which keeps direct writes in flight on an io_uring of its own.

use std::collections::{HashMap, HashSet};
use std::fs::{self, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::chain::BlockMap;
use super::durable::FLUSH_EVERY;
use super::metadata::{apply_metadata, apply_metadata_fd};
use super::plan::{Bits, Plan};
use super::scan::{ChunkSink, Lane};
use crate::aligned::is_aligned;
use crate::error::{io_at, Error, ErrorKind, Result};
use crate::format::PACK_LIMIT;
use crate::manifest::{Entry, EntryKind};

mod lane;
use lane::{WriteLane, IN_FLIGHT};

/// A file being written, and how.
pub(super) struct OpenFile {
    file: fs::File,
    /// Opened with O_DIRECT: written by [`write_direct`].
    direct: bool,
    /// A tail was written padded past the file's end: trim it when the file is done.
    padded: AtomicBool,
    /// Made by this restore (O_EXCL) with the mode [`Inherit::open_mode`] gave it.
    fresh: bool,
    /// The same file opened again without O_DIRECT, for [`SMALL_WRITE`]s into a direct file.
    plain: std::sync::OnceLock<fs::File>,
}

/// Writes shorter than this into a direct file go through the page cache (a second descriptor):
/// a chain restore writes each page an incremental changed as a piece of its own, and thousands of
/// synchronous 8 KiB direct writes cost more than the page cache and the final syncfs, which
/// merges neighbours.
const SMALL_WRITE: usize = 64 << 10;

/// What a file this restore creates already has, so that setting it again can be skipped: with
/// tens of thousands of small files, each owner or mode change is a journalled inode update
/// (GNU tar sets both on every file).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Inherit {
    /// The process's umask, where a new file's mode is the requested one less it: not where a
    /// root has a default ACL (that, not the umask, decides the mode of what is made under it).
    umask: Option<u32>,
    /// Owner and group a new file gets (our effective ids, as no directory is set-group-ID while
    /// the restore runs); `None` where we cannot tell.
    owner: Option<(u32, u32)>,
}

impl Inherit {
    /// Ask the system, for files made under `roots`.
    pub(super) fn probe(roots: &[PathBuf]) -> Self {
        use std::os::unix::fs::MetadataExt;
        let has_default_acl = |r: &Path| rustix::fs::getxattr_query(r, "system.posix_acl_default").is_ok();
        let acl = roots.iter().any(|r| has_default_acl(r));
        let setgid = roots.iter().any(|r| fs::metadata(r).map_or(true, |m| m.mode() & libc::S_ISGID != 0));
        let umask = fs::read_to_string("/proc/self/status").ok().and_then(|s| s.lines().find_map(|l| l.strip_prefix("Umask:")).and_then(|v| u32::from_str_radix(v.trim(), 8).ok()));
        let ids = crate::host::effective_ids();
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

/// A file being written: only files some chunk has reached and whose last chunk has not come are
/// held, so a restore holds as many as it has in flight, not one per file of the backup.
struct Slot {
    id: u32,
    entry: Entry,
    path: PathBuf,
    /// Bytes not yet written; the write that brings it to zero finishes the file.
    remaining: AtomicU64,
    /// Open while chunks are still coming.
    handle: Mutex<Option<Arc<OpenFile>>>,
}

/// The files in flight, in shards by id (every decompressor thread looks one up per chunk).
const SHARDS: usize = 64;

pub(super) struct Writer<'a> {
    /// Where each entry goes ([`Plan::writes`]), and the set its entries are read from.
    plan: &'a Plan<'a>,
    /// How many bytes each file gets, and whether they are all data.
    map: &'a BlockMap,
    /// One set restored whole: the files with a zero chunk (the rest are data throughout).
    sparse: HashSet<u32>,
    /// Files some chunk has reached, until their last is written.
    open: Vec<Mutex<HashMap<u32, Arc<Slot>>>>,
    /// Per entry: created (by its first chunk, or by `finish_untouched`).
    created: Bits,
    /// A delta restore: per entry, a regular file was there already when it was opened.
    existed: Bits,
    as_root: bool,
    inherit: Inherit,
    /// Direct I/O still in use: cleared for good by the first filesystem that refuses it.
    pub(super) direct: AtomicBool,
    /// Direct writes go through an io_uring per decompressor thread, where the kernel offers one.
    uring: bool,
    /// Some write went through io_uring.
    pub(super) uring_used: AtomicBool,
    /// Bytes written through the page cache so far.
    buffered: std::sync::atomic::AtomicU64,
    /// Wakes the flusher every [`FLUSH_EVERY`] of them; taken when the scan ends.
    pub(super) flush: Mutex<Option<crossbeam_channel::Sender<()>>>,
    /// A delta restore: files already there are written into as they are (their matching chunks
    /// are not written again), then cut or grown to size.
    keep_existing: bool,
}

/// What [`Writer::finish_untouched`] counts: the entries restored, and of them the regular files
/// and the bytes written into them; for a delta restore, the files kept, rewritten and created.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Restored {
    pub(super) entries: usize,
    pub(super) files: usize,
    pub(super) bytes: u64,
    /// Files there already that got no byte (`.0`), and the bytes of files there already kept
    /// (`.1`).
    pub(super) kept: (u64, u64),
    /// Files there already that got some bytes, and those bytes.
    pub(super) rewritten: (u64, u64),
    /// Files that were not there, and their bytes.
    pub(super) created: (u64, u64),
}

impl Restored {
    /// A delta restore's file of `size` bytes, `written` of them written: kept, rewritten or
    /// created.
    fn count_delta(&mut self, existed: bool, size: u64, written: u64) {
        let add = |c: &mut (u64, u64), bytes: u64| *c = (c.0 + 1, c.1 + bytes);
        if !existed {
            add(&mut self.created, written);
            return;
        }
        self.kept.1 += size - written;
        if written == 0 {
            self.kept.0 += 1;
        } else {
            add(&mut self.rewritten, written);
        }
    }
}

impl<'a> Writer<'a> {
    #[allow(clippy::too_many_arguments)]
    /// `map` says how many bytes each file gets; `sparse` (one set restored whole) which files
    /// have a zero chunk.
    pub(super) fn new(
        plan: &'a Plan<'a>,
        map: &'a BlockMap,
        sparse: HashSet<u32>,
        as_root: bool,
        inherit: Inherit,
        direct: bool,
        uring: bool,
        flush: crossbeam_channel::Sender<()>,
        keep_existing: bool,
    ) -> Self {
        Writer {
            plan,
            map,
            sparse,
            open: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            created: Bits::new(plan.set.entry_count()),
            existed: Bits::new(if keep_existing { plan.set.entry_count() } else { 0 }),
            as_root,
            inherit,
            direct: AtomicBool::new(direct),
            uring,
            uring_used: AtomicBool::new(false),
            buffered: Default::default(),
            flush: Mutex::new(Some(flush)),
            keep_existing,
        }
    }

    /// Every byte of file `id` is data (no chunk is a hole): worth reserving its blocks.
    fn dense(&self, id: u32, e: &Entry) -> bool {
        if self.plan.hollow(e) {
            return false;
        }
        if self.map.is_single() {
            return !self.sparse.contains(&id);
        }
        self.map.dense(id)
    }

    /// The file `id` in flight, taken up by the first chunk to reach it; `None` for a file that is
    /// not written (not restored, hollow) or is finished already.
    fn slot(&self, id: u32) -> Result<Option<Arc<Slot>>> {
        let shard = &self.open[id as usize % SHARDS];
        if let Some(s) = shard.lock().unwrap_or_else(|p| p.into_inner()).get(&id) {
            return Ok(Some(s.clone()));
        }
        if self.created.get(id) {
            // Created by a chunk and let go by its last write: during the scan only a file whose
            // bytes are all written is, so this chunk is one too many.
            let path = self.plan.set.with_entry(id, |e| self.plan.dest(id, e))?.unwrap_or_default();
            return Err(Error::new(ErrorKind::Io, format!("internal: a chunk of {} came after its last", path.display())));
        }
        // Not in flight and not created: this chunk is one of the file's, so the file cannot be
        // finished before it is written; two first chunks meet in the shard below.
        let Some((entry, path)) = self.plan.set.with_entry(id, |e| self.plan.writes(id, e).map(|p| (e.clone(), p)))? else { return Ok(None) };
        let remaining = AtomicU64::new(self.map.expected(id, &entry));
        let mut open = shard.lock().unwrap_or_else(|p| p.into_inner());
        Ok(Some(open.entry(id).or_insert_with(|| Arc::new(Slot { id, entry, path, remaining, handle: Mutex::new(None) })).clone()))
    }

    /// Create and size the file for entry `id`: with direct I/O while the filesystem takes it, for
    /// files of a chunk or more (small files were packed: their bytes are not aligned, and the page
    /// cache with one syncfs at the end beats a synchronous write each). `first` is the length of
    /// the chunk that creates it: when that is the whole file, no sizing is needed.
    fn create(&self, id: u32, e: &Entry, path: &Path, first: Option<usize>) -> Result<OpenFile> {
        // Its directory exists: every parent is a directory entry (the plan's path check), made
        // first. Nothing is there (the target was empty or emptied, and no two entries share a
        // path), so it is made new; should something be there after all, it is truncated and its
        // owner and mode set as for any file.
        let mut o = OpenOptions::new();
        o.write(true).create_new(!self.keep_existing).create(true).mode(self.inherit.open_mode(e));
        let size = e.size;
        let open = |o: &OpenOptions| {
            let direct = |p: &Path| o.clone().custom_flags(libc::O_DIRECT).open(p);
            if size >= PACK_LIMIT {
                open_output(o, path, &self.direct, &direct)
            } else {
                o.open(path).map(|file| OpenFile { file, direct: false, padded: AtomicBool::new(false), fresh: true, plain: Default::default() })
            }
        };
        // A delta restore's file already there, and its length.
        let there = if self.keep_existing { fs::symlink_metadata(path).ok().filter(fs::Metadata::is_file).map(|m| m.len()) } else { None };
        if there.is_some() {
            self.existed.set(id);
        }
        let f = match open(&o) {
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
                o.create_new(false).create(true).truncate(true);
                open(&o).map(|f| OpenFile { fresh: false, ..f })
            }
            r => r,
        };
        let mut f = f.map_err(|e| io_at(ErrorKind::Target, "cannot create file", path, e))?;
        self.created.set(id);
        if self.keep_existing {
            // What was there keeps its chunks that match; it may be longer or shorter than the
            // backup's file, and its owner and mode may differ. Sized only where its length
            // differs: a truncate to the same length still has ext4 read the last block to zero
            // its tail, one synchronous read per file from a cold cache.
            f.fresh = false;
            if there != Some(size) {
                f.file.set_len(size).map_err(|e| io_at(ErrorKind::Target, "cannot size file", path, e))?;
            }
            return Ok(f);
        }
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
        if f.direct && self.dense(id, e) && preallocate(&f.file, size) {
            return Ok(f);
        }
        f.file.set_len(size).map_err(|e| io_at(ErrorKind::Target, "cannot size file", path, e))?;
        Ok(f)
    }

    /// Files no chunk touched (empty, hollow, or every chunk on disk already): create and finish
    /// them, in one pass over the entries that also counts what the restore restored and hands
    /// every entry that is not a regular file to `also`.
    pub(super) fn finish_untouched(&self, mut also: impl FnMut(u32, &Entry) -> Result<()>) -> Result<Restored> {
        let mut n = Restored::default();
        self.plan.set.each_entry(|id, e| {
            if e.kind != EntryKind::File {
                also(id, e)?;
            }
            let Some(d) = self.plan.dest(id, e) else { return Ok(()) };
            let hollow = self.plan.hollow(e);
            if !hollow {
                n.entries += 1;
            }
            if e.kind != EntryKind::File {
                return Ok(());
            }
            if !self.created.get(id) {
                // Kept as it is (a delta found every byte there): of a file of the right size,
                // only what differs of its owner, mode and time is set.
                if self.keep_existing && super::metadata::keep(e, &d, self.as_root)? {
                    self.existed.set(id);
                } else {
                    let f = self.create(id, e, &d, None)?;
                    self.finish_file(e, &f, &d)?;
                }
            }
            if !hollow {
                let written = self.map.expected(id, e);
                n.files += 1;
                n.bytes += written;
                if self.keep_existing {
                    n.count_delta(self.existed.get(id), e.size, written);
                }
            }
            Ok(())
        })?;
        Ok(n)
    }
}

impl Writer<'_> {
    /// The open file of `slot` (created by the first chunk to come), or `None` when it is
    /// finished already.
    fn handle(&self, slot: &Slot, first: Option<usize>) -> Result<Option<Arc<OpenFile>>> {
        let mut h = slot.handle.lock().unwrap_or_else(|p| p.into_inner());
        if h.is_none() && !self.created.get(slot.id) {
            *h = Some(Arc::new(self.create(slot.id, &slot.entry, &slot.path, first)?));
        }
        Ok(h.clone())
    }

    fn write(&self, f: &OpenFile, path: &Path, data: &[u8], offset: u64) -> Result<()> {
        if f.direct && data.len() >= SMALL_WRITE {
            if !write_direct(&f.file, data, offset).map_err(|e| io_at(ErrorKind::Target, "cannot write", path, e))? {
                self.direct.store(false, Ordering::Relaxed);
            }
        } else {
            let file = match &f.plain {
                _ if !f.direct => &f.file,
                plain => match plain.get() {
                    Some(p) => p,
                    None => {
                        let p = OpenOptions::new().write(true).open(path).map_err(|e| io_at(ErrorKind::Target, "cannot open", path, e))?;
                        plain.get_or_init(|| p)
                    }
                },
            };
            file.write_all_at(data, offset).map_err(|e| io_at(ErrorKind::Target, "cannot write", path, e))?;
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

    /// `n` more bytes of `slot`'s file are on disk; the write that completes it finishes the
    /// file (trim, owner, mode, times) and lets it go. Every write counts itself only after it is
    /// done, so the last to count comes after every write of the file, whichever thread made it.
    fn done(&self, slot: &Slot, n: u64) -> Result<()> {
        if slot.remaining.fetch_sub(n, Ordering::AcqRel) != n {
            return Ok(());
        }
        self.open[slot.id as usize % SHARDS].lock().unwrap_or_else(|p| p.into_inner()).remove(&slot.id);
        let path = &slot.path;
        match slot.handle.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(f) => {
                if f.padded.load(Ordering::Acquire) {
                    // A tail written padded to the block ran past the end: back to the true size.
                    f.file.set_len(slot.entry.size).map_err(|e| io_at(ErrorKind::Target, "cannot size file", path, e))?;
                }
                self.finish_file(&slot.entry, &f, path)
            }
            None => apply_metadata(&slot.entry, path, self.as_root),
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
        // A set's index names only its entries; one that does not read is not wanted here, and
        // the scan reports the damage where it reads the frame.
        self.plan.set.with_entry(file_id, |e| self.plan.written(file_id, e)).unwrap_or(false)
    }
}

/// Reserve `size` bytes of blocks for `f` and set its size; false where the filesystem cannot (the
/// caller only sizes it then).
fn preallocate(f: &fs::File, size: u64) -> bool {
    rustix::fs::fallocate(f, rustix::fs::FallocateFlags::empty(), 0, size).is_ok()
}

/// Open `path` with `open_direct` (O_DIRECT) while `direct` holds; a filesystem that refuses it
/// (EINVAL: older tmpfs, some network and FUSE filesystems) clears `direct` for the rest of the
/// restore, and the file is opened buffered.
fn open_output(o: &OpenOptions, path: &Path, direct: &AtomicBool, open_direct: &dyn Fn(&Path) -> std::io::Result<fs::File>) -> std::io::Result<OpenFile> {
    if direct.load(Ordering::Relaxed) {
        match open_direct(path) {
            Ok(file) => return Ok(OpenFile { file, direct: true, padded: AtomicBool::new(false), fresh: true, plain: Default::default() }),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => direct.store(false, Ordering::Relaxed),
            Err(e) => return Err(e),
        }
    }
    Ok(OpenFile { file: o.open(path)?, direct: false, padded: AtomicBool::new(false), fresh: true, plain: Default::default() })
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
    let flags = rustix::fs::fcntl_getfl(f)?;
    rustix::fs::fcntl_setfl(f, flags - rustix::fs::OFlags::DIRECT)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aligned::AlignedBuf;
    use crate::manifest::Entry;
    use std::os::unix::fs::PermissionsExt;

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
        assert_eq!(plain.owner, Some(crate::host::effective_ids()));
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
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => return crate::testing::missing(&format!("{} takes no O_DIRECT", d.path().display())),
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
}
