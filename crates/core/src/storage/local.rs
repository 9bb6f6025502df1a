//! Stripe files on a local or mounted filesystem.
//!
//! A stripe is written as `NAME.partial` (locked while written, so two writers never share one, and
//! one left by a killed writer is taken over rather than blocking the next), fsynced, then renamed
//! to `NAME` and the folder fsynced. A crash leaves only a `.partial`, which
//! restore never takes for a stripe: it has no trailer and is not the name the manifest gives.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::{no_lock, Capabilities, Store, Stored, StripeSink, StripeSource, UnfinishedStripe, WriteOptions};
use crate::error::{io_at, Error, ErrorKind, Result};
use crate::whole::{create_dir, create_dirs, parent_dir, rename_into_place, sync_dir};

const WRITE_BUFFER: usize = 256 * 1024;

/// Bytes of a stripe between two starts of its write-back (see [`LocalSink::write_all`]).
const WRITE_BACK_EVERY: u64 = 32 << 20;

/// The local filesystem: names are paths (relative ones to the working directory).
#[derive(Clone, Copy, Debug, Default)]
pub struct LocalStore;

impl Store for LocalStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities { readable: true, atomic_publish: true, list: true, files: true }
    }

    fn describe(&self, name: &str) -> String {
        std::path::absolute(name).map(|p| p.display().to_string()).unwrap_or_else(|_| name.to_string())
    }

    fn identity(&self, name: &str) -> String {
        // Same folder (links and `..` resolved) and same name is the same stripe.
        let p = Path::new(name);
        let dir = parent_dir(p);
        let dir = fs::canonicalize(&dir).unwrap_or(dir);
        dir.join(p.file_name().unwrap_or_default()).display().to_string()
    }

    fn create(&self, name: &str, opts: &WriteOptions) -> Result<Box<dyn StripeSink>> {
        if opts.lock.is_some() {
            return Err(no_lock(&self.describe(name)));
        }
        let mut sink = LocalSink::create(Path::new(name), opts.overwrite)?;
        sink.keep_unfinished = opts.keep_unfinished;
        Ok(Box::new(sink))
    }

    fn resume(&self, name: &str, opts: &WriteOptions) -> Result<Option<Box<dyn UnfinishedStripe>>> {
        if opts.lock.is_some() {
            return Err(no_lock(&self.describe(name)));
        }
        Ok(LocalUnfinished::take_over(Path::new(name), opts.overwrite)?.map(|u| Box::new(u) as Box<dyn UnfinishedStripe>))
    }

    fn can_resume(&self) -> bool {
        true
    }

    fn open(&self, name: &str) -> Result<Box<dyn StripeSource>> {
        Ok(Box::new(LocalSource::open(Path::new(name))?))
    }

    fn exists(&self, name: &str) -> Result<bool> {
        match fs::metadata(name) {
            Ok(m) => Ok(m.is_file()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io_at(ErrorKind::Io, "cannot look at", Path::new(name), e)),
        }
    }

    fn list(&self, prefix: &str) -> Result<Vec<Stored>> {
        let (dir, base) = match prefix.rsplit_once('/') {
            Some((d, b)) => (if d.is_empty() { "/" } else { d }, b),
            None => (".", prefix),
        };
        let mut out = Vec::new();
        // Names as given: `d/n` when the prefix had a folder, bare `n` when it had none.
        let shown = |n: &str| match prefix.rsplit_once('/') {
            Some((d, _)) => format!("{d}/{n}"),
            None => n.to_string(),
        };
        list_into(Path::new(dir), base, &shown, &mut out)?;
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn prepare(&self, name: &str, below: Option<&str>) -> Result<()> {
        let dir = parent_dir(Path::new(name));
        let Some((root, rel)) = below.map(Path::new).and_then(|r| Some((r, dir.strip_prefix(r).ok()?))) else {
            return create_dirs(&dir).map_err(|e| io_at(ErrorKind::Target, "cannot create folder", &dir, e));
        };
        // One level at a time from a root that must still be there: a repository moved or removed
        // while a writer had it open is not made again, empty, where it was.
        let mut at = root.to_path_buf();
        for c in rel.components() {
            at.push(c);
            match create_dir(&at) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && !root.exists() => {
                    return Err(Error::new(ErrorKind::Incomplete, format!("{} is gone (moved or removed while in use?): not making it again", root.display())))
                }
                Err(e) => return Err(io_at(ErrorKind::Target, "cannot create folder", &at, e)),
            }
        }
        Ok(())
    }

    fn prune(&self, dir: &str) {
        // What a stopped writer left unfinished goes too (a `.partial` no writer holds), so that a
        // backup removed whole leaves no folder behind.
        if let Ok(rd) = fs::read_dir(dir) {
            for e in rd.flatten() {
                let p = e.path();
                let unheld = p.extension().is_some_and(|x| x == "partial") && File::open(&p).is_ok_and(|f| try_lock_exclusive(&f).unwrap_or(false));
                if unheld {
                    let _ = fs::remove_file(&p);
                }
            }
        }
        let _ = fs::remove_dir(dir);
    }

    fn delete(&self, name: &str) -> Result<()> {
        let p = Path::new(name);
        match fs::remove_file(p) {
            // Durable before the caller goes on: a backup's manifest removed and then its stripes
            // must never come back after a power cut as a manifest without its stripes.
            Ok(()) => sync_dir(&parent_dir(p)).map_err(|e| io_at(ErrorKind::Target, "cannot fsync the folder of", p, e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_at(ErrorKind::Target, "cannot remove", p, e)),
        }
    }
}

/// Files in `dir` whose names start with `base`, and everything below folders whose names do, as
/// `shown(relative name)`. A `.partial` is never a published stripe.
fn list_into(dir: &Path, base: &str, shown: &dyn Fn(&str) -> String, out: &mut Vec<Stored>) -> Result<()> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_at(ErrorKind::Io, "cannot list", dir, e)),
    };
    for item in rd {
        let item = item.map_err(|e| io_at(ErrorKind::Io, "cannot list", dir, e))?;
        let n = item.file_name().to_string_lossy().into_owned();
        if !n.starts_with(base) {
            continue;
        }
        let Ok(meta) = item.metadata() else { continue };
        if meta.is_dir() {
            let inner = |rest: &str| shown(&format!("{n}/{rest}"));
            list_into(&item.path(), "", &inner, out)?;
        } else if meta.is_file() && !n.ends_with(".partial") {
            out.push(stored(shown(&n), &meta));
        }
    }
    Ok(())
}

/// A published file as [`Store::list`] gives it, called `name`: its tag is its inode and its
/// modification time in nanoseconds.
fn stored(name: String, meta: &fs::Metadata) -> Stored {
    let since = meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).unwrap_or_default();
    let tag = format!("{:x}-{:x}", std::os::unix::fs::MetadataExt::ino(meta), since.as_nanos());
    Stored { name, size: meta.len(), modified: since.as_secs() as i64, tag }
}

/// The published file at `path`, as [`Store::list`] would give it under `name` (`None`: nothing
/// there, or not a file).
///
/// # Errors
/// When it cannot be looked at.
pub fn stored_at(path: &Path, name: String) -> Result<Option<Stored>> {
    match fs::metadata(path) {
        Ok(meta) if meta.is_file() => Ok(Some(stored(name, &meta))),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_at(ErrorKind::Io, "cannot look at", path, e)),
    }
}

/// Writes one stripe file.
pub struct LocalSink {
    path: PathBuf,
    partial: PathBuf,
    file: Option<BufWriter<File>>,
    written: u64,
    /// Bytes of the file whose write-back has been started.
    kicked: u64,
    /// Room was reserved past what is written: trim before the final fsync.
    reserved: bool,
    published: bool,
    overwrite: bool,
    /// Left in place, not removed, when dropped or discarded unpublished (a resumable backup).
    keep_unfinished: bool,
    /// Bytes of the file before the first written here (kept of a stopped attempt).
    base: u64,
}

/// Take an exclusive, non-blocking `flock` on `file`: `Ok(false)` when another process holds it.
/// A filesystem without flock (some network and FUSE ones) counts as unlocked: the lock guards
/// against a second writer, and without it sheaf behaves as before it had one.
///
/// # Errors
/// Any other failure of `flock`.
pub fn try_lock_exclusive(file: &File) -> std::io::Result<bool> {
    use rustix::io::Errno;
    // Released when the descriptor is closed.
    match rustix::fs::flock(file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
        Ok(()) => Ok(true),
        Err(Errno::WOULDBLOCK) => Ok(false),
        Err(Errno::NOLCK | Errno::OPNOTSUPP | Errno::NOSYS) => Ok(true),
        Err(e) => Err(e.into()),
    }
}

/// Whether the open `file` is still the one named `path`.
fn still_named(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

fn partial_name(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".partial");
    PathBuf::from(s)
}

impl LocalSink {
    /// Create `path.partial`.
    ///
    /// # Errors
    /// [`ErrorKind::Target`] when the folder is missing, `path` exists and `overwrite` is false,
    /// a `.partial` exists (another backup may be writing it), or creation fails.
    pub fn create(path: &Path, overwrite: bool) -> Result<Self> {
        let dir = parent_dir(path);
        if !dir.is_dir() {
            return Err(Error::new(ErrorKind::Target, format!("target folder {} does not exist: create it first", dir.display())));
        }
        if path.is_dir() {
            return Err(Error::new(ErrorKind::Target, format!("target {} is a directory: give a file name, e.g. {}/backup_1.sheaf", path.display(), path.display())));
        }
        if path.exists() && !overwrite {
            return Err(Error::new(ErrorKind::Target, format!("target {} already exists: remove it, choose another name, or pass --overwrite", path.display())));
        }
        let partial = partial_name(path);
        // The writer holds an exclusive lock on its .partial for as long as it writes; the kernel
        // drops it when the process ends however it ends. A .partial nobody holds was left by a
        // killed writer and is taken over; one that is held belongs to a writer still at work.
        let mut tries = 0;
        let file = loop {
            let file = OpenOptions::new().write(true).create(true).truncate(false).open(&partial).map_err(|e| io_at(ErrorKind::Target, "cannot create", &partial, e))?;
            if !try_lock_exclusive(&file).map_err(|e| io_at(ErrorKind::Target, "cannot lock", &partial, e))? {
                // Transient: waiting for the other writer resolves it.
                return Err(Error::new(
                    ErrorKind::Target,
                    format!("{} is being written by another process (a backup or wal-push to the same name): wait for it, or choose another name", partial.display()),
                )
                .transient(true));
            }
            // The file locked must still be the one under the name: a writer that held it may have
            // published (renamed) or discarded (unlinked) it between our open and our lock.
            if still_named(&file, &partial) {
                break file;
            }
            tries += 1;
            if tries == 8 {
                return Err(Error::new(ErrorKind::Target, format!("{} keeps being replaced by another writer: choose another name", partial.display())));
            }
        };
        file.set_len(0).map_err(|e| io_at(ErrorKind::Target, "cannot truncate", &partial, e))?;
        Ok(LocalSink::over(path, partial, file, overwrite))
    }

    /// A sink writing `file`, locked and named `partial`, to be published as `path`.
    fn over(path: &Path, partial: PathBuf, file: File, overwrite: bool) -> Self {
        LocalSink {
            path: path.to_path_buf(),
            partial,
            file: Some(BufWriter::with_capacity(WRITE_BUFFER, file)),
            written: 0,
            kicked: 0,
            reserved: false,
            published: false,
            overwrite,
            keep_unfinished: false,
            base: 0,
        }
    }

    fn file(&mut self) -> Result<&mut BufWriter<File>> {
        self.file.as_mut().ok_or_else(|| Error::new(ErrorKind::Target, format!("stripe {} is closed", self.path.display())))
    }
}

impl StripeSink for LocalSink {
    fn write_all(&mut self, buf: &[u8]) -> Result<()> {
        let path = self.partial.clone();
        self.file()?.write_all(buf).map_err(|e| io_at(ErrorKind::Target, "cannot write stripe", &path, e))?;
        self.written += buf.len() as u64;
        // Start writing back what reached the page cache every WRITE_BACK_EVERY bytes, as
        // PostgreSQL's *_flush_after settings do: the disk works while the backup runs instead of
        // all at the final fsync, and dirty memory stays bounded. The fsync still makes it durable.
        let (written, kicked, base) = (self.written, self.kicked, self.base);
        let f = self.file()?;
        let in_file = written - f.buffer().len() as u64 + base;
        if in_file >= kicked + WRITE_BACK_EVERY {
            use std::os::fd::AsRawFd;
            // rustix has no sync_file_range. SAFETY: a plain system call on a descriptor we own,
            // with no memory passed; a hint, whose failure the final fsync would report.
            unsafe { libc::sync_file_range(f.get_ref().as_raw_fd(), kicked as libc::off64_t, (in_file - kicked) as libc::off64_t, libc::SYNC_FILE_RANGE_WRITE) };
            self.kicked = in_file;
        }
        Ok(())
    }

    fn sync(&mut self) -> Result<()> {
        let path = self.partial.clone();
        let (written, reserved, base) = (self.written, self.reserved, self.base);
        let f = self.file()?;
        f.flush().map_err(|e| io_at(ErrorKind::Target, "cannot write stripe", &path, e))?;
        if reserved {
            // Give back the room reserved and not used.
            f.get_ref().set_len(base + written).map_err(|e| io_at(ErrorKind::Target, "cannot trim stripe", &path, e))?;
        }
        f.get_ref().sync_all().map_err(|e| io_at(ErrorKind::Target, "cannot fsync stripe", &path, e))
    }

    fn reserve(&mut self, bytes: u64) -> Result<bool> {
        if bytes == 0 || i64::try_from(bytes).is_err() {
            return Ok(false);
        }
        let f = self.file()?;
        // Mode 0 also sets the size; sync trims it. Refused (no room for the estimate, or a
        // filesystem without fallocate): the stripe grows as written, as it does by default.
        let ok = rustix::fs::fallocate(f.get_ref(), rustix::fs::FallocateFlags::empty(), 0, bytes).is_ok();
        self.reserved |= ok;
        Ok(ok)
    }

    fn publish(&mut self) -> Result<()> {
        self.sync()?;
        // The lock is held (the file open) until the rename is done: released earlier, another
        // writer could take the .partial over and truncate what is being published.
        rename_into_place(&self.partial, &self.path, self.overwrite).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                Error::new(ErrorKind::Target, format!("target {} appeared while the backup ran: remove it, or pass --overwrite", self.path.display()))
            } else {
                io_at(ErrorKind::Target, "cannot rename stripe into place:", &self.path, e)
            }
        })?;
        self.published = true;
        self.file = None;
        sync_dir(&parent_dir(&self.path)).map_err(|e| io_at(ErrorKind::Target, "cannot fsync folder of", &self.path, e))
    }

    fn discard(&mut self) {
        // Unlinked while still locked, so no other writer can take over a name about to vanish;
        // a resumable backup's is left for the next attempt, with what reached the file.
        if self.file.is_some() && self.keep_unfinished {
            if let Some(mut f) = self.file.take() {
                let _ = f.flush();
            }
        } else if self.file.is_some() {
            let _ = fs::remove_file(&self.partial);
        }
        self.file = None;
        if self.published {
            let _ = fs::remove_file(&self.path);
            self.published = false;
        }
    }

    fn written(&self) -> u64 {
        self.written
    }
}

impl Drop for LocalSink {
    fn drop(&mut self) {
        if !self.published {
            self.discard();
        }
    }
}

/// A `.partial` a stopped backup left, locked by this process ([`Store::resume`]).
struct LocalUnfinished {
    sink: LocalSink,
    source: LocalSource,
}

impl LocalUnfinished {
    /// Take over `path.partial`: `None` when there is none; refused while another process
    /// writes it (holds its lock).
    fn take_over(path: &Path, overwrite: bool) -> Result<Option<Self>> {
        let partial = partial_name(path);
        let file = match OpenOptions::new().read(true).write(true).open(&partial) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_at(ErrorKind::Target, "cannot open", &partial, e)),
        };
        if !try_lock_exclusive(&file).map_err(|e| io_at(ErrorKind::Target, "cannot lock", &partial, e))? {
            return Err(Error::new(ErrorKind::Target, format!("{} is being written by another process: wait for it to finish or stop", partial.display())).transient(true));
        }
        if !still_named(&file, &partial) {
            return Ok(None);
        }
        let reader = file.try_clone().map_err(|e| io_at(ErrorKind::Target, "cannot open", &partial, e))?;
        let len = reader.metadata().map_err(|e| io_at(ErrorKind::Io, "cannot stat", &partial, e))?.len();
        let source = LocalSource { path: partial.clone(), shown: partial.display().to_string(), file: reader, len };
        let mut sink = LocalSink::over(path, partial, file, overwrite);
        sink.keep_unfinished = true;
        Ok(Some(LocalUnfinished { sink, source }))
    }
}

impl UnfinishedStripe for LocalUnfinished {
    fn holds(&self) -> super::Holding<'_> {
        super::Holding::Bytes(&self.source)
    }

    fn go_on(self: Box<Self>, keep: u64) -> Result<Box<dyn StripeSink>> {
        use std::io::{Seek, SeekFrom};
        let LocalUnfinished { mut sink, source } = *self;
        drop(source);
        let path = sink.partial.clone();
        let f = sink.file()?.get_mut();
        f.set_len(keep).map_err(|e| io_at(ErrorKind::Target, "cannot cut", &path, e))?;
        // Cut durably before anything is written after it: a power cut then never brings back an
        // earlier attempt's frames behind this one's.
        f.sync_all().map_err(|e| io_at(ErrorKind::Target, "cannot fsync", &path, e))?;
        f.seek(SeekFrom::Start(keep)).map_err(|e| io_at(ErrorKind::Target, "cannot seek in", &path, e))?;
        (sink.base, sink.kicked) = (keep, keep);
        Ok(Box::new(sink))
    }

    fn abandon(self: Box<Self>) {
        let LocalUnfinished { mut sink, source } = *self;
        drop(source);
        // Not kept: dropped unpublished, it removes its `.partial`.
        sink.keep_unfinished = false;
    }
}

/// Reads one stripe file.
pub struct LocalSource {
    path: PathBuf,
    shown: String,
    file: File,
    len: u64,
}

impl LocalSource {
    /// Open `path`.
    ///
    /// # Errors
    /// [`ErrorKind::Incomplete`] when it does not exist, else I/O.
    pub fn open(path: &Path) -> Result<Self> {
        let file = File::open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::incomplete(format!("stripe {} does not exist", path.display())).with_object(path.display().to_string())
            } else {
                io_at(ErrorKind::Io, "cannot open stripe", path, e)
            }
        })?;
        let len = file.metadata().map_err(|e| io_at(ErrorKind::Io, "cannot stat stripe", path, e))?.len();
        Ok(LocalSource { path: path.to_path_buf(), shown: path.display().to_string(), file, len })
    }
}

impl StripeSource for LocalSource {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        super::checked_range(&self.shown, offset, buf.len() as u64, self.len)?;
        self.file.read_exact_at(buf, offset).map_err(|e| io_at(ErrorKind::Io, "cannot read stripe", &self.path, e))
    }
    fn location(&self) -> &str {
        &self.shown
    }
    fn stream(&self, start: u64, end: u64) -> Result<Box<dyn std::io::Read + Send + '_>> {
        let range = super::stream_range(&self.shown, start, end, self.len)?;
        Ok(Box::new(AheadReader { src: self, pos: range.start, end: range.end, advised: range.start }))
    }
}

/// How far ahead of a stream's position the kernel is told the stripe will be read: enough
/// requests in the disk's queue that the reader rarely waits for one (the kernel's own read-ahead
/// is 128 KiB by default, a frame or less).
const READ_AHEAD: u64 = 32 << 20;

/// A local stripe read in order ([`StripeSource::stream`]), the kernel told [`READ_AHEAD`] bytes
/// ahead, a quarter of that at a time.
struct AheadReader<'a> {
    src: &'a LocalSource,
    pos: u64,
    end: u64,
    /// Told up to here.
    advised: u64,
}

impl std::io::Read for AheadReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (self.end - self.pos).min(buf.len() as u64) as usize;
        if n == 0 {
            return Ok(0);
        }
        if self.advised < self.end && self.advised < self.pos + READ_AHEAD - READ_AHEAD / 4 {
            let to = (self.pos + READ_AHEAD).min(self.end);
            // Advice only: a kernel that ignores it reads as it would have.
            let _ = rustix::fs::fadvise(&self.src.file, self.advised, std::num::NonZeroU64::new(to - self.advised), rustix::fs::Advice::WillNeed);
            self.advised = to;
        }
        self.src.file.read_exact_at(&mut buf[..n], self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}
