//! What the disk holds and what only the cache does, without FUSE: two images of one tree (the
//! live one every read sees, the durable one a power cut leaves) and the log of changes made since
//! that are not yet durable.
//!
//! The rules are POSIX's, as ALICE and LazyFS model them:
//! - a file's data and length become durable by `fsync`/`fdatasync` of that file;
//! - a name (create, mkdir, unlink, rmdir, rename) becomes durable only by an fsync of the folder
//!   it is in (a rename, of each of its two folders);
//! - a power cut keeps the durable image, then, when asked, a prefix of the log in its order, the
//!   first change past the prefix torn at a 4 KiB boundary when it is a write.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsString;
use std::sync::Arc;
use std::time::SystemTime;

/// The unit data is kept and torn in.
pub const PAGE: u64 = 4096;

/// The root folder's inode.
pub const ROOT: u64 = 1;

/// A file's bytes: pages shared between the images until one of them writes.
#[derive(Clone, Debug, Default)]
pub struct Content {
    pub len: u64,
    pages: BTreeMap<u64, Arc<Vec<u8>>>,
}

impl Content {
    /// Up to `size` bytes from `off` (holes read as zeros).
    pub fn read(&self, off: u64, size: u64) -> Vec<u8> {
        let end = self.len.min(off.saturating_add(size));
        let mut out = vec![0u8; end.saturating_sub(off) as usize];
        let mut at = off;
        while at < end {
            let (page, within) = (at / PAGE, at % PAGE);
            let n = (PAGE - within).min(end - at);
            if let Some(p) = self.pages.get(&page) {
                let from = (at - off) as usize;
                out[from..from + n as usize].copy_from_slice(&p[within as usize..(within + n) as usize]);
            }
            at += n;
        }
        out
    }

    /// Write `data` at `off`, growing the file as needed.
    pub fn write(&mut self, off: u64, data: &[u8]) {
        let mut at = off;
        let mut rest = data;
        while !rest.is_empty() {
            let (page, within) = (at / PAGE, at % PAGE);
            let n = ((PAGE - within) as usize).min(rest.len());
            let p = Arc::make_mut(self.pages.entry(page).or_insert_with(|| Arc::new(vec![0u8; PAGE as usize])));
            p[within as usize..within as usize + n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
            at += n as u64;
        }
        self.len = self.len.max(off + data.len() as u64);
    }

    /// Cut or extend (with zeros) to `len`.
    pub fn set_len(&mut self, len: u64) {
        if len < self.len {
            let keep = len.div_ceil(PAGE);
            self.pages.retain(|&p, _| p < keep);
            let within = (len % PAGE) as usize;
            if within != 0 {
                if let Some(p) = self.pages.get_mut(&(len / PAGE)) {
                    Arc::make_mut(p)[within..].fill(0);
                }
            }
        }
        self.len = len;
    }
}

/// What never changes of an inode once made, and what a power cut keeps as last set (mode and
/// owner changes are taken as durable at once: sheaf's promises do not rest on them).
#[derive(Clone, Debug)]
pub struct Meta {
    pub dir: bool,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: SystemTime,
}

/// One state of the tree: folders' entries and files' bytes, by inode.
#[derive(Clone, Debug, Default)]
pub struct Image {
    pub dirs: HashMap<u64, BTreeMap<OsString, u64>>,
    pub files: HashMap<u64, Content>,
}

/// A change not yet durable.
#[derive(Clone, Debug)]
pub enum Op {
    Write {
        ino: u64,
        off: u64,
        data: Vec<u8>,
    },
    SetLen {
        ino: u64,
        len: u64,
    },
    /// A name made (`Some`: create, mkdir) or removed (`None`: unlink, rmdir).
    Name {
        dir: u64,
        name: OsString,
        ino: Option<u64>,
    },
    /// A rename, one change whose two halves become durable with their own folders: the side
    /// already made durable by a folder's fsync is not applied again.
    Rename {
        from: (u64, OsString),
        to: (u64, OsString),
        ino: u64,
        from_done: bool,
        to_done: bool,
    },
}

impl Op {
    fn apply(&self, img: &mut Image, meta: &HashMap<u64, Meta>) {
        match self {
            Op::Write { ino, off, data } => img.files.entry(*ino).or_default().write(*off, data),
            Op::SetLen { ino, len } => img.files.entry(*ino).or_default().set_len(*len),
            Op::Name { dir, name, ino: Some(ino) } => link(img, meta, *dir, name, *ino),
            Op::Name { dir, name, ino: None } => {
                img.dirs.entry(*dir).or_default().remove(name);
            }
            Op::Rename { from, to, ino, from_done, to_done } => {
                if !*to_done {
                    link(img, meta, to.0, &to.1, *ino);
                }
                if !*from_done {
                    let d = img.dirs.entry(from.0).or_default();
                    if d.get(&from.1) == Some(ino) {
                        d.remove(&from.1);
                    }
                }
            }
        }
    }

    /// The first `keep` bytes of a write (the rest never reached the disk).
    fn torn(&self, keep: usize) -> Op {
        match self {
            Op::Write { ino, off, data } => Op::Write { ino: *ino, off: *off, data: data[..keep].to_vec() },
            other => other.clone(),
        }
    }
}

fn link(img: &mut Image, meta: &HashMap<u64, Meta>, dir: u64, name: &OsString, ino: u64) {
    img.dirs.entry(dir).or_default().insert(name.clone(), ino);
    // A folder made but never fsynced has no durable entries: it comes back empty.
    if meta.get(&ino).is_some_and(|m| m.dir) {
        img.dirs.entry(ino).or_default();
    }
}

/// How much of what was not durable a power cut keeps.
#[derive(Clone, Copy, Debug)]
pub enum Cut {
    /// Nothing: the durable image alone.
    Clean,
    /// A random prefix of the changes not yet durable, in their order, the first one past it
    /// torn at a 4 KiB boundary of the file when it is a write; `seed` picks both.
    Prefix { seed: u64 },
}

/// What a power cut threw away.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CutReport {
    /// Changes that were not durable at the cut.
    pub pending: usize,
    /// Of those, how many the crash state keeps.
    pub kept: usize,
    /// Whether a write was torn.
    pub torn: bool,
}

/// The file system's whole state.
#[derive(Debug)]
pub struct State {
    pub live: Image,
    pub durable: Image,
    pub meta: HashMap<u64, Meta>,
    pub log: Vec<Op>,
    pub next: u64,
    /// Power is off: every operation fails until the next mount.
    pub off: bool,
    /// fsyncs of files and of folders served since the mount.
    pub fsyncs: u64,
    pub dir_fsyncs: u64,
}

impl State {
    /// A tree already on disk: all of it durable.
    pub fn new(img: Image, meta: HashMap<u64, Meta>, next: u64) -> State {
        State { live: img.clone(), durable: img, meta, log: Vec::new(), next, off: false, fsyncs: 0, dir_fsyncs: 0 }
    }

    /// Record and apply a change to the live image.
    pub fn change(&mut self, op: Op) {
        op.apply(&mut self.live, &self.meta);
        self.log.push(op);
    }

    /// A new inode.
    pub fn make(&mut self, meta: Meta) -> u64 {
        let ino = self.next;
        self.next += 1;
        if meta.dir {
            self.live.dirs.insert(ino, BTreeMap::new());
        } else {
            self.live.files.insert(ino, Content::default());
        }
        self.meta.insert(ino, meta);
        ino
    }

    /// fsync of a file: its bytes and length are durable.
    pub fn sync_file(&mut self, ino: u64) {
        self.fsyncs += 1;
        if let Some(c) = self.live.files.get(&ino) {
            self.durable.files.insert(ino, c.clone());
        }
        self.log.retain(|op| !matches!(op, Op::Write { ino: i, .. } | Op::SetLen { ino: i, .. } if *i == ino));
    }

    /// fsync of a folder: its entries are durable.
    pub fn sync_dir(&mut self, dir: u64) {
        self.dir_fsyncs += 1;
        if let Some(d) = self.live.dirs.get(&dir) {
            self.durable.dirs.insert(dir, d.clone());
            // Folders it names that are new come with no durable entries of their own.
            for ino in d.values() {
                if self.meta.get(ino).is_some_and(|m| m.dir) {
                    self.durable.dirs.entry(*ino).or_default();
                }
            }
        }
        self.log.retain_mut(|op| match op {
            Op::Name { dir: d, .. } => *d != dir,
            Op::Rename { from, to, from_done, to_done, .. } => {
                *from_done |= from.0 == dir;
                *to_done |= to.0 == dir;
                !(*from_done && *to_done)
            }
            _ => true,
        });
    }

    /// Every change durable (a clean unmount, `sync`).
    pub fn sync_all(&mut self) {
        self.durable = self.live.clone();
        self.log.clear();
    }

    /// Lose power: the crash state becomes the whole state, and every operation fails until the
    /// file system is mounted again.
    pub fn cut(&mut self, how: Cut) -> CutReport {
        let pending = self.log.len();
        let mut img = self.durable.clone();
        let mut report = CutReport { pending, ..CutReport::default() };
        if let Cut::Prefix { seed } = how {
            let mut rng = Rng(seed | 1);
            let keep = rng.below(pending as u64 + 1) as usize;
            for op in &self.log[..keep] {
                op.apply(&mut img, &self.meta);
            }
            report.kept = keep;
            if let Some(Op::Write { off, data, .. }) = self.log.get(keep) {
                // The 4 KiB boundaries of the file strictly inside this write.
                let first = off / PAGE + 1;
                let last = (off + data.len() as u64).saturating_sub(1) / PAGE;
                if first <= last && rng.below(2) == 1 {
                    let at = (first + rng.below(last - first + 1)) * PAGE;
                    self.log[keep].torn((at - off) as usize).apply(&mut img, &self.meta);
                    report.torn = true;
                }
            }
        }
        // What no name reaches is gone.
        let reach = reachable(&img);
        img.dirs.retain(|i, _| reach.contains(i));
        img.files.retain(|i, _| reach.contains(i));
        self.meta.retain(|i, _| reach.contains(i));
        self.live = img.clone();
        self.durable = img;
        self.log.clear();
        self.off = true;
        report
    }
}

/// The inodes reachable from the root.
pub fn reachable(img: &Image) -> HashSet<u64> {
    let mut seen = HashSet::from([ROOT]);
    let mut todo = vec![ROOT];
    while let Some(d) = todo.pop() {
        for ino in img.dirs.get(&d).into_iter().flat_map(|e| e.values()) {
            if seen.insert(*ino) && img.dirs.contains_key(ino) {
                todo.push(*ino);
            }
        }
    }
    seen
}

/// xorshift64*: the crash states a seed picks are the same on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(dir: bool) -> Meta {
        Meta { dir, mode: 0o644, uid: 0, gid: 0, mtime: SystemTime::UNIX_EPOCH }
    }

    fn empty() -> State {
        let mut img = Image::default();
        img.dirs.insert(ROOT, BTreeMap::new());
        State::new(img, HashMap::from([(ROOT, meta(true))]), ROOT + 1)
    }

    fn create(s: &mut State, dir: u64, name: &str, is_dir: bool) -> u64 {
        let ino = s.make(meta(is_dir));
        s.change(Op::Name { dir, name: name.into(), ino: Some(ino) });
        ino
    }

    fn names(img: &Image, dir: u64) -> Vec<String> {
        img.dirs[&dir].keys().map(|k| k.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn content_reads_what_was_written_with_holes_as_zeros() {
        let mut c = Content::default();
        c.write(5000, b"abc");
        assert_eq!(c.len, 5003);
        assert_eq!(c.read(4999, 10), [0, b'a', b'b', b'c']);
        assert_eq!(c.read(0, 2), [0, 0]);
        c.set_len(5001);
        c.set_len(6000);
        assert_eq!(c.read(5000, 3), [b'a', 0, 0], "a cut then grown file reads zeros past the cut");
        c.write(PAGE * 3 - 1, &[9; 2]);
        assert_eq!(c.read(PAGE * 3 - 1, 2), [9, 9], "a write across a page boundary");
    }

    #[test]
    fn a_file_fsynced_in_a_folder_never_fsynced_is_lost() {
        let mut s = empty();
        let f = create(&mut s, ROOT, "seg", false);
        s.change(Op::Write { ino: f, off: 0, data: vec![1; 10] });
        s.sync_file(f);
        s.cut(Cut::Clean);
        assert!(names(&s.live, ROOT).is_empty(), "the name was never made durable");
    }

    #[test]
    fn a_name_made_durable_before_its_data_comes_back_empty() {
        let mut s = empty();
        let f = create(&mut s, ROOT, "seg", false);
        s.change(Op::Write { ino: f, off: 0, data: vec![1; 10] });
        s.sync_dir(ROOT);
        s.cut(Cut::Clean);
        let ino = s.live.dirs[&ROOT][&OsString::from("seg")];
        assert_eq!(s.live.files.get(&ino).map_or(0, |c| c.len), 0);
    }

    #[test]
    fn the_durable_way_keeps_the_file_and_a_rename_is_atomic() {
        let mut s = empty();
        let d = create(&mut s, ROOT, "wal", true);
        s.sync_dir(ROOT);
        let f = create(&mut s, d, ".seg.tmp", false);
        s.change(Op::Write { ino: f, off: 0, data: vec![7; 9000] });
        s.sync_file(f);
        s.change(Op::Rename { from: (d, ".seg.tmp".into()), to: (d, "seg".into()), ino: f, from_done: false, to_done: false });
        s.sync_dir(d);
        s.change(Op::Write { ino: f, off: 0, data: vec![8; 9000] });
        s.cut(Cut::Clean);
        assert_eq!(names(&s.live, ROOT), ["wal"]);
        assert_eq!(names(&s.live, d), ["seg"]);
        assert_eq!(s.live.files[&f].read(0, 9000), vec![7; 9000], "the unsynced overwrite is gone");
    }

    #[test]
    fn a_prefix_keeps_changes_in_their_order_and_tears_on_a_page() {
        let mut seen_torn = false;
        for seed in 0..200 {
            let mut s = empty();
            let f = create(&mut s, ROOT, "f", false);
            s.sync_dir(ROOT);
            s.sync_file(f);
            s.change(Op::Write { ino: f, off: 0, data: vec![1; 3 * PAGE as usize] });
            s.change(Op::Write { ino: f, off: 0, data: vec![2; 3 * PAGE as usize] });
            let r = s.cut(Cut::Prefix { seed });
            assert_eq!(r.pending, 2);
            let c = s.live.files[&f].read(0, 3 * PAGE);
            let ones = c.iter().take_while(|&&b| b == 1 || b == 2).count();
            // Whatever was kept is a page-aligned prefix of one write over a whole earlier one.
            assert!(ones == 0 || ones as u64 % PAGE == 0, "seed {seed}: {ones} bytes");
            if r.kept == 1 && !r.torn {
                assert_eq!(c, vec![1; 3 * PAGE as usize]);
            }
            if r.torn && r.kept == 1 {
                assert_eq!(c[0], 2);
                assert_eq!(*c.last().unwrap(), 1);
                seen_torn = true;
            }
        }
        assert!(seen_torn, "some seed tears the second write");
    }

    #[test]
    fn half_a_rename_across_folders_is_durable_with_its_folder() {
        let mut s = empty();
        let a = create(&mut s, ROOT, "a", true);
        let b = create(&mut s, ROOT, "b", true);
        let f = create(&mut s, a, "f", false);
        s.sync_dir(ROOT);
        s.sync_dir(a);
        s.change(Op::Rename { from: (a, "f".into()), to: (b, "f".into()), ino: f, from_done: false, to_done: false });
        s.sync_dir(b);
        assert_eq!(s.log.len(), 1, "the source side is still pending");
        s.cut(Cut::Clean);
        assert_eq!(names(&s.live, a), ["f"]);
        assert_eq!(names(&s.live, b), ["f"]);
    }
}
