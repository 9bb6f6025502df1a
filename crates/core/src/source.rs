//! Listing a source tree: every directory, regular file, symlink and FIFO below a root, without
//! following links, in a stable order (by name bytes). Names are taken as bytes: any name Linux
//! allows is kept. Sockets and devices cannot be backed up as bytes and are reported.

use std::fs;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::error::{io_at, Error, ErrorKind, Result};
use crate::manifest::{Entry, EntryKind};

/// A listed entry: the manifest entry to be, its absolute path and its device (for reader placement).
#[derive(Clone, Debug)]
pub struct Listed {
    /// The manifest entry (size is the listed size; the reader records what it actually read).
    pub entry: Entry,
    /// Absolute path.
    pub abs: PathBuf,
    /// `st_dev`, so that each device gets its own reader.
    pub dev: u64,
    /// `st_ino`, with `dev` what makes two names one file (hard links).
    pub ino: u64,
    /// `st_nlink`: more than 1 for a regular file with other names.
    pub nlink: u64,
}

/// List `root` recursively. The root itself is the entry with path `""`.
///
/// # Errors
/// [`ErrorKind::Source`] when the root is missing or not a directory, or a directory cannot be read.
pub fn list_tree(root: &Path, root_id: u16, warnings: &mut Vec<String>) -> Result<Vec<Listed>> {
    let meta = fs::symlink_metadata(root).map_err(|e| io_at(ErrorKind::Source, "cannot read source", root, e))?;
    if !meta.is_dir() {
        return Err(Error::new(ErrorKind::Source, format!("source {} is not a directory: give the directory to back up", root.display())));
    }
    let mut out = vec![listed(root, String::new(), root_id, &meta)?];
    let mut listings = read_levels(root, crate::host::available_cores());
    walk(root, b"", root_id, &mut out, warnings, &mut listings)?;
    Ok(out)
}

/// A directory's names, each with its metadata (not following links) or why it has none, sorted by
/// name bytes; or why the directory could not be read.
type DirListing = std::io::Result<Vec<(std::ffi::OsString, std::io::Result<fs::Metadata>)>>;

/// Directories read at once at most: each stays open until its names are stat'ed.
const DIRS_AT_ONCE: usize = 256;

/// Every directory under `root` (itself included), read a level at a time on `threads` threads:
/// with tens of thousands of files, the `fstatat` per name is most of a listing, and one thread
/// left the other cores idle before the first file was read (100,000 files: 0.35 s). The stats of
/// one level are shared out whatever directory they are in, so one large directory (a database's
/// thousands of relations) is spread over the cores too.
fn read_levels(root: &Path, threads: usize) -> std::collections::HashMap<PathBuf, DirListing> {
    let mut listings = std::collections::HashMap::new();
    let mut level = vec![root.to_path_buf()];
    while !level.is_empty() {
        let mut next = Vec::new();
        for dirs in level.chunks(DIRS_AT_ONCE) {
            for (dir, listing) in dirs.iter().zip(read_dirs(dirs, threads)) {
                if let Ok(items) = &listing {
                    next.extend(items.iter().filter(|(_, m)| m.as_ref().is_ok_and(fs::Metadata::is_dir)).map(|(name, _)| dir.join(name)));
                }
                listings.insert(dir.clone(), listing);
            }
        }
        level = next;
    }
    listings
}

/// Read `dirs` and stat every name in them (`fstatat` on the open directory), on `threads` threads.
fn read_dirs(dirs: &[PathBuf], threads: usize) -> Vec<DirListing> {
    let names: Vec<std::io::Result<Vec<fs::DirEntry>>> = on_threads(dirs, threads, |d| fs::read_dir(d)?.collect());
    let all: Vec<&fs::DirEntry> = names.iter().flat_map(|n| n.iter().flatten()).collect();
    let mut metas = on_threads(&all, threads, |e| e.metadata()).into_iter();
    names
        .into_iter()
        .map(|n| {
            let mut items: Vec<_> = n?.into_iter().map(|e| (e.file_name(), metas.next().expect("one stat per name"))).collect();
            items.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            Ok(items)
        })
        .collect()
}

/// `f` of each item, in order, computed on up to `threads` threads taking items as they go.
fn on_threads<T: Sync, R: Send>(items: &[T], threads: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let threads = threads.clamp(1, items.len().max(1));
    if threads == 1 {
        return items.iter().map(f).collect();
    }
    // Small batches: few atomic operations, and the threads still end together.
    const BATCH: usize = 64;
    let next = AtomicUsize::new(0);
    let mut parts: Vec<(usize, Vec<R>)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut got = Vec::new();
                    loop {
                        let at = next.fetch_add(BATCH, Ordering::Relaxed);
                        if at >= items.len() {
                            return got;
                        }
                        got.push((at, items[at..(at + BATCH).min(items.len())].iter().map(&f).collect::<Vec<R>>()));
                    }
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().expect("a listing thread panicked")).collect()
    });
    parts.sort_unstable_by_key(|p| p.0);
    parts.into_iter().flat_map(|p| p.1).collect()
}

fn walk(dir: &Path, rel: &[u8], root_id: u16, out: &mut Vec<Listed>, warnings: &mut Vec<String>, listings: &mut std::collections::HashMap<PathBuf, DirListing>) -> Result<()> {
    let items = match listings.remove(dir) {
        Some(l) => l.map_err(|e| io_at(ErrorKind::Source, "cannot list directory", dir, e))?,
        // Every directory walked was seen as one when its level was read.
        None => return Err(Error::new(ErrorKind::Source, format!("internal: {} was not read with its level", dir.display()))),
    };
    for (name, meta) in items {
        let abs = dir.join(&name);
        let mut rel_name = Vec::with_capacity(rel.len() + 1 + name.len());
        if !rel.is_empty() {
            rel_name.extend_from_slice(rel);
            rel_name.push(b'/');
        }
        rel_name.extend_from_slice(name.as_bytes());
        let meta = match meta {
            Ok(m) => m,
            // Gone between listing and stat: nothing to back up, and not an error for a live source.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                warnings.push(format!("{} vanished while the tree was listed; it is not in the backup", abs.display()));
                continue;
            }
            Err(e) => return Err(io_at(ErrorKind::Source, "cannot stat", &abs, e)),
        };
        let ft = meta.file_type();
        if !(ft.is_dir() || ft.is_file() || ft.is_symlink() || ft.is_fifo()) {
            warnings.push(format!("skipped special file {} (sockets and devices hold no data to back up)", abs.display()));
            continue;
        }
        let l = listed_bytes(&abs, rel_name, root_id, &meta)?;
        let rel = l.entry.path_bytes().to_vec();
        out.push(l);
        if ft.is_dir() {
            let before = out.len();
            match walk(&abs, &rel, root_id, out, warnings, listings) {
                // A directory dropped while we list it (a database being dropped): say so, go on.
                Err(_) if !abs.exists() => {
                    warnings.push(format!("{} vanished while the tree was listed", abs.display()));
                    out.truncate(before - 1);
                }
                r => r?,
            }
        }
    }
    Ok(())
}

/// Entries that come as a tree is walked, in tree order, one at a time ([`Walk`] here; an
/// agent's walk of another host's tree), with what the walk had to say.
pub trait Listing: Iterator<Item = Result<Listed>> {
    /// The warnings so far, taken (as [`Walk::take_warnings`]).
    fn take_warnings(&mut self) -> Vec<String>;
}

impl Listing for Walk {
    fn take_warnings(&mut self) -> Vec<String> {
        Walk::take_warnings(self)
    }
}

/// Names statted at once when a tree is walked: a block is shared out among the threads.
const STAT_BLOCK: usize = 1024;

/// A tree listed as it is walked, in the order [`list_tree`] gives, one entry at a time: what a
/// backup of millions of files reads from, since only the names of the directories being walked
/// (and one block of their stats) are held, never the whole listing. Each directory's names are
/// sorted as it is entered; their stats are taken a block at a time on every core.
///
/// A directory that vanishes while walked is warned of (its entry stays, empty); warnings gather
/// in [`Walk::take_warnings`].
pub struct Walk {
    root_id: u16,
    first: Option<Listed>,
    stack: Vec<WalkDir>,
    threads: usize,
    warnings: Vec<String>,
    /// Names gone between their folder's listing and their stat (a live source), for one line:
    /// how many, and the first few.
    vanished: (usize, Vec<PathBuf>),
}

struct WalkDir {
    abs: PathBuf,
    rel: Vec<u8>,
    names: Vec<std::ffi::OsString>,
    next: usize,
    stats: std::collections::VecDeque<std::io::Result<fs::Metadata>>,
}

impl Walk {
    /// Walk `root`, whose entries belong to root `root_id`.
    ///
    /// # Errors
    /// [`ErrorKind::Source`] when the root is missing, not a directory or cannot be read.
    pub fn new(root: &Path, root_id: u16) -> Result<Walk> {
        let meta = fs::symlink_metadata(root).map_err(|e| io_at(ErrorKind::Source, "cannot read source", root, e))?;
        if !meta.is_dir() {
            return Err(Error::new(ErrorKind::Source, format!("source {} is not a directory: give the directory to back up", root.display())));
        }
        let first = listed(root, String::new(), root_id, &meta)?;
        let names = dir_names(root).map_err(|e| io_at(ErrorKind::Source, "cannot list directory", root, e))?;
        let top = WalkDir { abs: root.to_path_buf(), rel: Vec::new(), names, next: 0, stats: Default::default() };
        Ok(Walk { root_id, first: Some(first), stack: vec![top], threads: crate::host::available_cores(), warnings: Vec::new(), vanished: (0, Vec::new()) })
    }

    /// What the walk had to say so far (special files skipped, names that vanished). Names that
    /// vanished come one per line when a few, else in one line: a folder is walked as its files
    /// are read, so in a live source (a database dropping tables) many can go meanwhile.
    pub fn take_warnings(&mut self) -> Vec<String> {
        let mut out = std::mem::take(&mut self.warnings);
        let (n, first) = std::mem::take(&mut self.vanished);
        match n {
            0 => {}
            1..=3 => out.extend(first.iter().map(|p| format!("{} vanished while the tree was listed; it is not in the backup", p.display()))),
            n => out.push(format!("{n} names vanished while the tree was walked (the first: {}); they are not in the backup", first[0].display())),
        }
        out
    }

    fn step(&mut self) -> Option<Result<Listed>> {
        loop {
            let top = self.stack.last_mut()?;
            if top.next >= top.names.len() {
                self.stack.pop();
                continue;
            }
            if top.stats.is_empty() {
                let block = &top.names[top.next..(top.next + STAT_BLOCK).min(top.names.len())];
                let dir = &top.abs;
                top.stats = on_threads(block, self.threads, |n| fs::symlink_metadata(dir.join(n))).into();
            }
            let name = std::mem::take(&mut top.names[top.next]);
            top.next += 1;
            let meta = top.stats.pop_front().expect("a stat per name");
            let abs = top.abs.join(&name);
            let mut rel = Vec::with_capacity(top.rel.len() + 1 + name.len());
            if !top.rel.is_empty() {
                rel.extend_from_slice(&top.rel);
                rel.push(b'/');
            }
            rel.extend_from_slice(name.as_bytes());
            let meta = match meta {
                Ok(m) => m,
                // Gone between listing and stat: nothing to back up, and not an error for a live source.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    self.vanished.0 += 1;
                    if self.vanished.1.len() < 3 {
                        self.vanished.1.push(abs);
                    }
                    continue;
                }
                Err(e) => return Some(Err(io_at(ErrorKind::Source, "cannot stat", &abs, e))),
            };
            let ft = meta.file_type();
            if !(ft.is_dir() || ft.is_file() || ft.is_symlink() || ft.is_fifo()) {
                self.warnings.push(format!("skipped special file {} (sockets and devices hold no data to back up)", abs.display()));
                continue;
            }
            let l = match listed_bytes(&abs, rel, self.root_id, &meta) {
                Ok(l) => l,
                Err(e) => return Some(Err(e)),
            };
            if ft.is_dir() {
                match dir_names(&abs) {
                    Ok(names) => {
                        let rel = l.entry.path_bytes().to_vec();
                        self.stack.push(WalkDir { abs, rel, names, next: 0, stats: Default::default() });
                    }
                    // A directory dropped while we walk it (a database being dropped): say so, go on.
                    Err(_) if !abs.exists() => self.warnings.push(format!("{} vanished while the tree was listed", abs.display())),
                    Err(e) => return Some(Err(io_at(ErrorKind::Source, "cannot list directory", &abs, e))),
                }
            }
            return Some(Ok(l));
        }
    }
}

impl Iterator for Walk {
    type Item = Result<Listed>;

    fn next(&mut self) -> Option<Result<Listed>> {
        if let Some(l) = self.first.take() {
            return Some(Ok(l));
        }
        self.step()
    }
}

/// A directory's names, sorted by their bytes.
fn dir_names(dir: &Path) -> std::io::Result<Vec<std::ffi::OsString>> {
    let mut names = fs::read_dir(dir)?.map(|e| e.map(|e| e.file_name())).collect::<std::io::Result<Vec<_>>>()?;
    names.sort_unstable_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    Ok(names)
}

/// List one path (not following a link) as the entry `rel` of root `root`.
///
/// # Errors
/// [`ErrorKind::Source`] when it cannot be stat'ed or its link read.
pub fn list_one(abs: &Path, rel: String, root: u16) -> Result<Listed> {
    let meta = fs::symlink_metadata(abs).map_err(|e| {
        let kind = if e.kind() == std::io::ErrorKind::NotFound { ErrorKind::NotFound } else { ErrorKind::Source };
        io_at(kind, "cannot stat", abs, e)
    })?;
    listed(abs, rel, root, &meta)
}

fn listed(abs: &Path, rel: String, root: u16, meta: &fs::Metadata) -> Result<Listed> {
    listed_bytes(abs, rel.into_bytes(), root, meta)
}

fn listed_bytes(abs: &Path, rel: Vec<u8>, root: u16, meta: &fs::Metadata) -> Result<Listed> {
    let ft = meta.file_type();
    let mut entry = Entry { root, mode: meta.mode() & 0o7777, mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(), uid: meta.uid(), gid: meta.gid(), ..Default::default() };
    entry.set_path_bytes(rel);
    if ft.is_symlink() {
        let t = fs::read_link(abs).map_err(|e| io_at(ErrorKind::Source, "cannot read link", abs, e))?;
        entry.kind = EntryKind::Symlink;
        let (shown, bytes) = crate::manifest::display_and_bytes(t.into_os_string().into_vec());
        (entry.target, entry.target_bytes) = (Some(shown), bytes);
    } else if ft.is_dir() {
        entry.kind = EntryKind::Dir;
    } else if ft.is_fifo() {
        entry.kind = EntryKind::Fifo;
    } else {
        entry.kind = EntryKind::File;
        entry.size = meta.len();
    }
    Ok(Listed { entry, abs: abs.to_path_buf(), dev: meta.dev(), ino: meta.ino(), nlink: meta.nlink() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_threads_list_what_one_does_in_the_same_order() {
        let d = tempfile::tempdir().unwrap();
        // One large directory, many small ones, three levels, names that sort differently as
        // bytes than as numbers.
        for i in 0..300 {
            fs::write(d.path().join(format!("f{i}")), b"x").unwrap();
        }
        for i in 0..40 {
            let sub = d.path().join(format!("d{i}/e{}", i % 3));
            fs::create_dir_all(&sub).unwrap();
            fs::write(sub.join("g"), b"y").unwrap();
        }
        let paths = |threads| {
            let mut listings = read_levels(d.path(), threads);
            let mut out = Vec::new();
            walk(d.path(), b"", 0, &mut out, &mut Vec::new(), &mut listings).unwrap();
            assert!(listings.is_empty(), "every directory read is walked");
            out.into_iter().map(|l| l.entry.path).collect::<Vec<_>>()
        };
        let one = paths(1);
        assert_eq!(one.len(), 300 + 40 * 3);
        let mut sorted = one.clone();
        sorted.sort_by(|a, b| a.split('/').cmp(b.split('/')));
        assert_eq!(one, sorted, "tree order, by name bytes");
        assert_eq!(paths(3), one);
        let walked: Vec<Listed> = Walk::new(d.path(), 0).unwrap().collect::<Result<_>>().unwrap();
        let listed = list_tree(d.path(), 0, &mut Vec::new()).unwrap();
        assert_eq!(walked.len(), listed.len());
        for (w, l) in walked.iter().zip(&listed) {
            assert_eq!((&w.entry, &w.abs, w.dev, w.ino), (&l.entry, &l.abs, l.dev, l.ino), "a walk lists what list_tree does");
        }
        assert_eq!(on_threads(&(0..1000).collect::<Vec<u32>>(), 3, |i| i * 2), (0..1000).map(|i| i * 2).collect::<Vec<_>>());
    }

    #[test]
    fn names_that_vanish_while_walked_are_summed_up_beyond_a_few() {
        for gone in [2usize, 5] {
            let d = tempfile::tempdir().unwrap();
            for i in 0..8 {
                fs::write(d.path().join(format!("f{i}")), b"x").unwrap();
            }
            // The root's names are read when the walk starts; these go before their stat.
            let mut walk = Walk::new(d.path(), 0).unwrap();
            for i in 0..gone {
                fs::remove_file(d.path().join(format!("f{i}"))).unwrap();
            }
            let listed: Vec<Listed> = walk.by_ref().collect::<Result<_>>().unwrap();
            assert_eq!(listed.len(), 1 + 8 - gone);
            let w = walk.take_warnings();
            if gone <= 3 {
                assert_eq!(w.len(), gone, "{w:?}");
            } else {
                assert_eq!(w.len(), 1, "{w:?}");
                assert!(w[0].starts_with("5 names vanished while the tree was walked") && w[0].contains("f0"), "{w:?}");
            }
        }
    }

    #[test]
    fn lists_files_dirs_links_in_order() {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir_all(d.path().join("b/empty")).unwrap();
        fs::write(d.path().join("b/f"), b"xy").unwrap();
        fs::write(d.path().join("a"), b"").unwrap();
        std::os::unix::fs::symlink("b/f", d.path().join("link")).unwrap();
        let mut w = vec![];
        let l = list_tree(d.path(), 0, &mut w).unwrap();
        let paths: Vec<_> = l.iter().map(|x| (x.entry.path.as_str(), x.entry.kind)).collect();
        assert_eq!(
            paths,
            vec![("", EntryKind::Dir), ("a", EntryKind::File), ("b", EntryKind::Dir), ("b/empty", EntryKind::Dir), ("b/f", EntryKind::File), ("link", EntryKind::Symlink),]
        );
        assert_eq!(l[4].entry.size, 2);
        assert_eq!(l[5].entry.target.as_deref(), Some("b/f"));
        assert!(w.is_empty());
    }

    #[test]
    fn missing_root_is_a_source_error() {
        let e = list_tree(Path::new("/nonexistent/sheaf"), 0, &mut vec![]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Source);
        assert!(e.to_string().contains("/nonexistent/sheaf"));
    }
}

/// A chunk its host compressed before sending it (the agent's `--compress-on agent`): what
/// [`SourceFile::read_stored_at`] put at the start of the buffer it was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredChunk {
    /// The chunk's raw bytes (0: the file ends at the offset asked).
    pub raw_len: usize,
    /// How the bytes in the buffer are stored: a codec's id ([`crate::codec::CodecKind`]; `none`
    /// is the raw bytes themselves), or [`crate::format::ZERO_FRAME`] for an all-zero chunk
    /// (nothing in the buffer).
    pub codec: u8,
    /// Bytes of the buffer that hold it.
    pub stored_len: usize,
    /// crc32c of the raw bytes, as the host computed it before compressing.
    pub raw_crc: u32,
}

/// What a reader judges a source file by: its size and modification time when opened and after.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileStat {
    /// Bytes.
    pub len: u64,
    /// Modification time, seconds.
    pub mtime: i64,
    /// ... and nanoseconds.
    pub mtime_nsec: i64,
    /// A regular file (not a directory, link or device).
    pub is_file: bool,
}

impl From<&fs::Metadata> for FileStat {
    fn from(m: &fs::Metadata) -> FileStat {
        FileStat { len: m.len(), mtime: m.mtime(), mtime_nsec: m.mtime_nsec(), is_file: m.file_type().is_file() }
    }
}

/// A source file open for reading.
pub trait SourceFile: Send {
    /// Its size and modification time now.
    ///
    /// # Errors
    /// The file system's or the link's ([`ErrorKind::Source`]), naming the file.
    fn stat(&mut self) -> Result<FileStat>;
    /// Read at `offset` (fewer bytes than asked only at the end of the file, or none past it).
    ///
    /// # Errors
    /// The file system's or the link's ([`ErrorKind::Source`]), naming the file.
    fn read_at(&mut self, buf: &mut [u8], offset: u64) -> Result<usize>;
    /// Where the next data from `offset` starts (`Some(None)`: no more data), for reading a
    /// sparse file by its extents; `None` where the source cannot say (then it is read as all
    /// data).
    fn seek_data(&mut self, _offset: u64) -> Option<Option<u64>> {
        None
    }
    /// Where the next hole from `offset` starts (`Some(None)`: none); `None` where unknown.
    fn seek_hole(&mut self, _offset: u64) -> Option<Option<u64>> {
        None
    }
    /// Advice: it will be read from start to end.
    fn sequential(&mut self) {}
    /// Advice: these bytes will be read soon.
    fn will_need(&mut self, _offset: u64, _len: u64) {}
    /// Where the file's host compresses what it sends: the chunk of up to `want` raw bytes at
    /// `offset`, stored into `out` (of at least `want` bytes). `None` where the host sends raw
    /// bytes (every local file): the reader then uses [`SourceFile::read_at`].
    fn read_stored_at(&mut self, _out: &mut [u8], _offset: u64, _want: usize) -> Option<Result<StoredChunk>> {
        None
    }
}

/// Where a backup's files are listed and opened: this host's file systems ([`LocalFiles`]), or
/// another host's through an agent.
pub trait Files: Send + Sync {
    /// Open `path` for reading, never following a link in its last part (a link swapped in since
    /// listing fails with `ELOOP`) nor hanging on a FIFO.
    ///
    /// # Errors
    /// [`ErrorKind::NotFound`] for a file gone since listing; [`ErrorKind::Source`] otherwise
    /// (a link swapped in, the file system's or the link's failure), naming the file.
    fn open(&self, path: &Path) -> Result<Box<dyn SourceFile>>;
    /// `root` walked as it is read, in the order [`list_tree`] gives: a [`Walk`] of this host's
    /// files, an agent's walk streamed over its link. Never held whole.
    ///
    /// # Errors
    /// As [`Walk::new`]; the link's.
    fn walk(&self, root: &Path, root_id: u16) -> Result<Box<dyn Listing>>;
    /// The names in directory `dir` (not recursive, no stats), each handed to `each` as it is
    /// read; none when `dir` cannot be read (a directory gone since it was listed).
    ///
    /// # Errors
    /// The link's, where the files are another host's.
    fn each_name(&self, dir: &Path, each: &mut dyn FnMut(&std::ffi::OsStr)) -> Result<()>;
    /// As [`list_one`]; `None` where nothing is at `abs`.
    ///
    /// # Errors
    /// As [`list_one`], but for a missing entry.
    fn list_one(&self, abs: &Path, rel: String, root_id: u16) -> Result<Option<Listed>>;
    /// A small file whole, read until two reads agree (a file rewritten in place, such as
    /// PostgreSQL's pg_control, is never kept torn); `None` where it does not exist.
    ///
    /// # Errors
    /// The file system's or the link's.
    fn read_small(&self, abs: &Path) -> Result<Option<Vec<u8>>>;
    /// Where they are, for messages: `None` for this host.
    fn host(&self) -> Option<String> {
        None
    }
}

/// This host's file systems.
pub struct LocalFiles;

struct LocalFile {
    f: fs::File,
    /// For messages.
    path: std::path::PathBuf,
}

/// Where the next data (`SeekFrom::Data`) or hole (`SeekFrom::Hole`) is: `Some(None)` when none
/// follows (ENXIO); `None` when the filesystem cannot say.
fn seek(f: &fs::File, to: rustix::fs::SeekFrom) -> Option<Option<u64>> {
    match rustix::fs::seek(f, to) {
        Ok(at) => Some(Some(at)),
        Err(rustix::io::Errno::NXIO) => Some(None),
        Err(_) => None,
    }
}

impl SourceFile for LocalFile {
    fn stat(&mut self) -> Result<FileStat> {
        self.f.metadata().map(|m| FileStat::from(&m)).map_err(|e| io_at(ErrorKind::Source, "cannot stat source file", &self.path, e))
    }
    fn read_at(&mut self, buf: &mut [u8], offset: u64) -> Result<usize> {
        loop {
            match std::os::unix::fs::FileExt::read_at(&self.f, buf, offset) {
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                r => return r.map_err(|e| io_at(ErrorKind::Source, "cannot read source file", &self.path, e)),
            }
        }
    }
    fn seek_data(&mut self, offset: u64) -> Option<Option<u64>> {
        seek(&self.f, rustix::fs::SeekFrom::Data(offset))
    }
    fn seek_hole(&mut self, offset: u64) -> Option<Option<u64>> {
        seek(&self.f, rustix::fs::SeekFrom::Hole(offset))
    }
    fn sequential(&mut self) {
        // Advisory only: a filesystem that ignores it reads the same bytes.
        let _ = rustix::fs::fadvise(&self.f, 0, None, rustix::fs::Advice::Sequential);
    }
    fn will_need(&mut self, offset: u64, len: u64) {
        let _ = rustix::fs::fadvise(&self.f, offset, std::num::NonZeroU64::new(len), rustix::fs::Advice::WillNeed);
    }
}

/// The error for a source file that cannot be opened: [`ErrorKind::NotFound`] when it is gone,
/// [`ErrorKind::Source`] with what happened otherwise.
pub fn open_error(path: &Path, e: std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::NotFound => Error::io(ErrorKind::NotFound, format!("{} vanished before it was read", path.display()), e),
        _ if e.raw_os_error() == Some(libc::ELOOP) => Error::new(ErrorKind::Source, format!("{} became a symbolic link while the backup ran", path.display())),
        _ => io_at(ErrorKind::Source, "cannot read source file", path, e),
    }
}

impl Files for LocalFiles {
    fn open(&self, path: &Path) -> Result<Box<dyn SourceFile>> {
        use std::os::unix::fs::OpenOptionsExt;
        let f = fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path).map_err(|e| open_error(path, e))?;
        Ok(Box::new(LocalFile { f, path: path.to_path_buf() }))
    }
    fn walk(&self, root: &Path, root_id: u16) -> Result<Box<dyn Listing>> {
        Ok(Box::new(Walk::new(root, root_id)?))
    }
    fn each_name(&self, dir: &Path, each: &mut dyn FnMut(&std::ffi::OsStr)) -> Result<()> {
        if let Ok(names) = fs::read_dir(dir) {
            for name in names.flatten() {
                each(&name.file_name());
            }
        }
        Ok(())
    }
    fn list_one(&self, abs: &Path, rel: String, root_id: u16) -> Result<Option<Listed>> {
        match list_one(abs, rel, root_id) {
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            r => r.map(Some),
        }
    }
    fn read_small(&self, abs: &Path) -> Result<Option<Vec<u8>>> {
        let read = || match fs::read(abs) {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_at(ErrorKind::Source, "cannot read", abs, e)),
        };
        settled(read, &abs.display().to_string())
    }
}

/// `read` again until two reads agree.
///
/// # Errors
/// `read`'s; a file that kept changing over 100 reads.
pub fn settled(mut read: impl FnMut() -> Result<Option<Vec<u8>>>, what: &str) -> Result<Option<Vec<u8>>> {
    let mut last = read()?;
    for _ in 0..100 {
        let next = read()?;
        if next == last {
            return Ok(next);
        }
        last = next;
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Err(Error::new(ErrorKind::Source, format!("{what} kept changing while it was read")))
}

/// `read_at` until `buf` is full or the file ends.
///
/// # Errors
/// The source's.
pub fn read_full_at(f: &mut dyn SourceFile, buf: &mut [u8], mut offset: u64) -> Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match f.read_at(&mut buf[got..], offset)? {
            0 => break,
            n => {
                got += n;
                offset += n as u64;
            }
        }
    }
    Ok(got)
}
