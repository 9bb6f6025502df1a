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
use super::scan::{ChunkSink, Decoded, Lane};
use crate::aligned::{is_aligned, ALIGN};
use crate::error::{io_at, Error, ErrorKind, Result};
use crate::format::PACK_LIMIT;
use crate::manifest::{Entry, EntryKind};

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
/// and their bytes.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Restored {
    pub(super) entries: usize,
    pub(super) files: usize,
    pub(super) bytes: u64,
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
            // backup's file, and its owner and mode may differ.
            f.fresh = false;
            f.file.set_len(size).map_err(|e| io_at(ErrorKind::Target, "cannot size file", path, e))?;
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
            if !hollow {
                n.files += 1;
                n.bytes += e.size;
            }
            if !self.created.get(id) {
                let f = self.create(id, e, &d, None)?;
                self.finish_file(e, &f, &d)?;
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

/// Chunk buffers one decompressor thread keeps in flight: while the disk writes them, the thread
/// decompresses the next chunks (a thread that waited for each of its writes left the CPU idle
/// for every write and the disk idle for every decompression).
const IN_FLIGHT: usize = 3;

/// Writes one thread keeps in flight: a chunk that newer sets of a chain cut into goes out as
/// several writes from its one buffer.
const WRITES: usize = 32;

/// A write the kernel is doing: its buffer and file stay alive until it completes.
struct InFlight {
    slot: Arc<Slot>,
    offset: u64,
    file: Arc<OpenFile>,
    /// The chunk (a file's last one zero-padded to the block), shared by the writes of its pieces.
    data: Arc<Decoded>,
    /// What of it this write writes.
    range: std::ops::Range<usize>,
    /// The file's bytes it counts as written (a padded tail counts its true length).
    counts: u64,
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
    /// Writes in flight.
    busy: usize,
    /// Chunk buffers in flight (at most [`IN_FLIGHT`]).
    buffers: usize,
}

impl<'w, 'a> WriteLane<'w, 'a> {
    pub(super) fn new(writer: &'w Writer<'a>) -> Self {
        let ring = if writer.uring { io_uring::IoUring::new(WRITES.next_power_of_two() as u32).ok() } else { None };
        WriteLane { writer, ring, flight: (0..WRITES).map(|_| None).collect(), busy: 0, buffers: 0 }
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
            // The last write from its buffer: the buffer is free once this one settles.
            if Arc::strong_count(&w.data) == 1 {
                self.buffers -= 1;
            }
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
        let path = &w.slot.path;
        let written = match res {
            r if r == -libc::EINVAL => 0,
            r if r < 0 => return Err(io_at(ErrorKind::Target, "cannot write", path, std::io::Error::from_raw_os_error(-r))),
            r => r as usize,
        };
        if written < w.range.len() {
            self.writer.write(&w.file, path, &w.data[w.range.start + written..w.range.end], w.offset + written as u64)?;
        }
        drop(w.data);
        self.writer.done(&w.slot, w.counts)
    }
}

impl WriteLane<'_, '_> {
    /// Take a buffer slot for a chunk about to go out: wait until fewer than [`IN_FLIGHT`] are.
    fn take_buffer(&mut self) -> Result<()> {
        while self.buffers >= IN_FLIGHT && self.busy > 0 {
            self.reap(1)?;
        }
        self.buffers += 1;
        Ok(())
    }

    /// Hand the buffer slot of `data` back if none of its writes is in flight any more.
    fn release_buffer(&mut self, data: &Arc<Decoded>) {
        if Arc::strong_count(data) == 1 {
            self.buffers -= 1;
        }
    }

    /// Start writing `range` of `data` (aligned for direct I/O) at `offset` of file `id`; it counts
    /// as `counts` of the file's bytes when it completes.
    fn submit(&mut self, slot: &Arc<Slot>, file: &Arc<OpenFile>, data: &Arc<Decoded>, range: std::ops::Range<usize>, offset: u64, counts: u64) -> Result<()> {
        if self.busy == WRITES {
            self.reap(1)?;
        }
        let key = self.flight.iter().position(Option::is_none).expect("a free slot after reaping");
        use std::os::unix::io::AsRawFd;
        let op =
            io_uring::opcode::Write::new(io_uring::types::Fd(file.file.as_raw_fd()), data[range.clone()].as_ptr(), range.len() as u32).offset(offset).build().user_data(key as u64);
        let ring = self.ring.as_mut().expect("only with a ring");
        // SAFETY: the buffer and the descriptor live in `flight` until the kernel reports the write
        // complete (`reap`), and the lane waits for every write before it is dropped.
        unsafe { ring.submission().push(&op) }.map_err(|_| Error::new(ErrorKind::Io, "internal: io_uring submission queue full"))?;
        self.flight[key] = Some(InFlight { slot: slot.clone(), offset, file: file.clone(), data: data.clone(), range, counts });
        self.busy += 1;
        self.writer.uring_used.store(true, Ordering::Relaxed);
        if let Err(e) = ring.submit() {
            if e.raw_os_error() != Some(libc::EINTR) && e.raw_os_error() != Some(libc::EAGAIN) && e.raw_os_error() != Some(libc::EBUSY) {
                return Err(Error::io(ErrorKind::Io, "io_uring: cannot submit a write", e));
            }
        }
        Ok(())
    }
}

impl Lane for WriteLane<'_, '_> {
    fn chunk(&mut self, file_id: u32, offset: u64, len: usize, data: Option<&[u8]>) -> Result<()> {
        // A hollow file's chunks (in a packed frame read for another file) are dropped too.
        let Some(slot) = self.writer.slot(file_id)? else { return Ok(()) };
        let handle = self.writer.handle(&slot, data.map(<[u8]>::len))?;
        if let (Some(data), Some(f)) = (data, &handle) {
            self.writer.write(f, &slot.path, data, offset)?;
        }
        drop(handle);
        self.writer.done(&slot, len as u64)
    }

    fn owned(&mut self, file_id: u32, offset: u64, mut data: Decoded) -> Result<()> {
        let Some(slot) = self.writer.slot(file_id)? else { return Ok(()) };
        let Some(file) = self.writer.handle(&slot, Some(data.len()))? else {
            return Err(Error::new(ErrorKind::Io, format!("internal: a chunk of {} came after its last", slot.path.display())));
        };
        // A direct file's last, partial block goes out zero-padded to the block, in the chunk's own
        // buffer (a whole number of blocks long: direct I/O needs a transfer size that is); the
        // file is trimmed back when it is done. The write counts as the chunk's own length.
        let len = data.len();
        if file.direct && len % ALIGN != 0 {
            data.set_len(len.next_multiple_of(ALIGN));
            data[len..].fill(0);
            file.padded.store(true, Ordering::Release);
        }
        if self.ring.is_none() || !file.direct || !is_aligned(&data, offset) || data.len() > u32::MAX as usize {
            self.writer.write(&file, &slot.path, &data, offset)?;
            drop(file);
            return self.writer.done(&slot, len as u64);
        }
        self.take_buffer()?;
        let data = Arc::new(data);
        self.submit(&slot, &file, &data, 0..data.len(), offset, len as u64)?;
        self.release_buffer(&data);
        drop(data);
        self.reap(0)
    }

    fn owned_pieces(&mut self, file_id: u32, data: Decoded, pieces: &[(u64, std::ops::Range<usize>)]) -> Result<()> {
        let Some(slot) = self.writer.slot(file_id)? else { return Ok(()) };
        let Some(file) = self.writer.handle(&slot, None)? else {
            return Err(Error::new(ErrorKind::Io, format!("internal: a chunk of {} came after its last", slot.path.display())));
        };
        let data = Arc::new(data);
        let mut held = false;
        for (offset, r) in pieces {
            // Small or unaligned pieces (a page an incremental changed, a file's tail) go through
            // the page cache; large aligned ones straight to the disk, several in flight.
            let direct = self.ring.is_some() && file.direct && r.len() >= SMALL_WRITE && is_aligned(&data[r.clone()], *offset) && r.len() <= u32::MAX as usize;
            if !direct {
                self.writer.write(&file, &slot.path, &data[r.clone()], *offset)?;
                self.writer.done(&slot, r.len() as u64)?;
                continue;
            }
            if !held {
                self.take_buffer()?;
                held = true;
            }
            self.submit(&slot, &file, &data, r.clone(), *offset, r.len() as u64)?;
        }
        if held {
            self.release_buffer(&data);
        }
        drop(data);
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
