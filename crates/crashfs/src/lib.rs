//! A file system that loses power, for sheaf's durability tests.
//!
//! SIGKILL tests cannot find a missing fsync: the kernel keeps the page cache when a process dies.
//! This FUSE file system keeps every change in its own cache until it is made durable the way
//! POSIX says (a file's data by its fsync, a name by its folder's: see [`model`]), and on
//! [`CrashFs::cut`] throws away what was not, optionally keeping a random prefix of those changes
//! in their order with the next write torn at a 4 KiB boundary: the crash states ALICE (OSDI 2014)
//! and LazyFS explore.
//!
//! The durable image lives in a backing folder: read when mounted, written back when unmounted
//! or after a cut, so that what survived is an ordinary folder to look at. Mounting needs
//! `/dev/fuse` and root (mount(2)) or Debian's `fuse3` (fusermount3). Mode and owner changes, and
//! the mtime, are taken as durable at once; symlinks, hard links and extended attributes are not
//! served (sheaf uses none of them in a repository).

pub mod model;

mod fuse;

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use model::{Content, Image, Meta, State, ROOT};
pub use model::{Cut, CutReport};

/// A mounted power-loss file system.
pub struct CrashFs {
    backing: PathBuf,
    mnt: PathBuf,
    state: Arc<Mutex<State>>,
    session: Option<fuser::BackgroundSession>,
    /// An unmount failed (a process still used it) after the session was given up: the mount is
    /// still there, served by the session's thread, and must go before any mount again, or the
    /// next would land on top of it.
    orphaned: bool,
}

impl CrashFs {
    /// Mount `backing`'s tree at `mnt` (an empty folder); all of it starts durable.
    ///
    /// # Errors
    /// `backing` cannot be read, or the mount fails (no `/dev/fuse`, no permission).
    pub fn mount(backing: &Path, mnt: &Path) -> io::Result<CrashFs> {
        let state = Arc::new(Mutex::new(load(backing)?));
        let session = serve(&state, mnt)?;
        Ok(CrashFs { backing: backing.to_path_buf(), mnt: mnt.to_path_buf(), state, session: Some(session), orphaned: false })
    }

    /// Where it is mounted.
    pub fn path(&self) -> &Path {
        &self.mnt
    }

    /// Changes not yet durable.
    pub fn pending(&self) -> usize {
        self.lock().log.len()
    }

    /// fsyncs of files and of folders served since the mount.
    pub fn fsyncs(&self) -> (u64, u64) {
        let s = self.lock();
        (s.fsyncs, s.dir_fsyncs)
    }

    /// Lose power now: from here every operation fails with EIO, and only the crash state `how`
    /// picks is left. Kill the processes using the mount, then [`CrashFs::remount`].
    pub fn cut(&self, how: Cut) -> CutReport {
        self.lock().cut(how)
    }

    /// Unmount, write the durable image to the backing folder and mount it again: power is back.
    ///
    /// # Errors
    /// The unmount (a process still has a file open), the write-back or the mount.
    pub fn remount(&mut self) -> io::Result<()> {
        self.unmount_only()?;
        save(&self.lock(), &self.backing)?;
        let state = load(&self.backing)?;
        *self.lock() = state;
        self.session = Some(serve(&self.state, &self.mnt)?);
        Ok(())
    }

    /// A clean unmount: everything written becomes durable, as `umount` does, and is written to
    /// the backing folder.
    ///
    /// # Errors
    /// As [`CrashFs::remount`].
    pub fn unmount(mut self) -> io::Result<()> {
        self.unmount_only()?;
        let mut s = self.lock();
        s.sync_all();
        save(&s, &self.backing)
    }

    fn unmount_only(&mut self) -> io::Result<()> {
        if let Some(session) = self.session.take() {
            if let Err(e) = session.umount_and_join() {
                self.orphaned = true;
                return Err(e);
            }
        }
        if self.orphaned {
            unmount_path(&self.mnt, false)?;
            self.orphaned = false;
        }
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for CrashFs {
    fn drop(&mut self) {
        // A process still using it (a server a test left running) makes the unmount fail: then
        // detach it, so that no dead mount outlives this process.
        if self.unmount_only().is_err() {
            detach(&self.mnt);
        }
    }
}

/// Unmount `mnt`; `lazy`: gone from the tree at once, released when its last user lets go. As
/// root umount2(2), else fusermount3.
fn unmount_path(mnt: &Path, lazy: bool) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(mnt.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // SAFETY: `path` is a NUL-terminated string that lives across the call; umount2 only reads it.
    if unsafe { libc::umount2(path.as_ptr(), if lazy { libc::MNT_DETACH } else { 0 }) } == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() != Some(libc::EPERM) {
        return Err(err);
    }
    let ok = std::process::Command::new("fusermount3").args(if lazy { &["-u", "-z"][..] } else { &["-u"][..] }).arg(mnt).status()?.success();
    if ok {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(libc::EBUSY))
    }
}

/// Unmount `mnt` lazily, whatever still uses it.
fn detach(mnt: &Path) {
    let _ = unmount_path(mnt, true);
}

fn serve(state: &Arc<Mutex<State>>, mnt: &Path) -> io::Result<fuser::BackgroundSession> {
    let mut config = fuser::Config::default();
    config.mount_options = vec![fuser::MountOption::FSName("sheaf-crashfs".into()), fuser::MountOption::DefaultPermissions];
    // The cluster's user writes here too (the tests run sheaf as postgres).
    config.acl = fuser::SessionACL::All;
    config.n_threads = Some(2);
    fuser::spawn_mount(fuse::Fs(Arc::clone(state)), mnt, &config)
}

fn meta_of(m: &fs::Metadata) -> Meta {
    Meta { dir: m.is_dir(), mode: m.mode() & 0o7777, uid: m.uid(), gid: m.gid(), mtime: m.modified().unwrap_or(std::time::UNIX_EPOCH) }
}

/// The backing folder's tree, all of it durable.
fn load(backing: &Path) -> io::Result<State> {
    let mut img = Image::default();
    let mut meta = HashMap::from([(ROOT, meta_of(&fs::metadata(backing)?))]);
    let mut next = ROOT + 1;
    let mut todo = vec![(ROOT, backing.to_path_buf())];
    while let Some((dir, path)) = todo.pop() {
        let mut entries = BTreeMap::new();
        for e in fs::read_dir(&path)? {
            let e = e?;
            let m = e.metadata()?;
            if !m.is_dir() && !m.is_file() {
                continue;
            }
            let ino = next;
            next += 1;
            if m.is_dir() {
                todo.push((ino, e.path()));
            } else {
                let mut c = Content::default();
                c.write(0, &fs::read(e.path())?);
                c.set_len(m.len());
                img.files.insert(ino, c);
            }
            meta.insert(ino, meta_of(&m));
            entries.insert(e.file_name(), ino);
        }
        img.dirs.insert(dir, entries);
    }
    Ok(State::new(img, meta, next))
}

/// Write the durable image as the backing folder's whole content.
fn save(s: &State, backing: &Path) -> io::Result<()> {
    let old = backing.with_extension("before-save");
    let _ = fs::remove_dir_all(&old);
    fs::rename(backing, &old)?;
    fs::create_dir(backing)?;
    let mut todo = vec![(ROOT, backing.to_path_buf())];
    while let Some((dir, path)) = todo.pop() {
        if let Some(m) = s.meta.get(&dir) {
            std::os::unix::fs::chown(&path, Some(m.uid), Some(m.gid))?;
            fs::set_permissions(&path, fs::Permissions::from_mode(m.mode))?;
        }
        for (name, ino) in s.durable.dirs.get(&dir).into_iter().flatten() {
            let p = path.join(name);
            let Some(m) = s.meta.get(ino) else { continue };
            if m.dir {
                fs::create_dir(&p)?;
                todo.push((*ino, p));
            } else {
                let c = s.durable.files.get(ino).cloned().unwrap_or_default();
                fs::write(&p, c.read(0, c.len))?;
                std::os::unix::fs::chown(&p, Some(m.uid), Some(m.gid))?;
                fs::set_permissions(&p, fs::Permissions::from_mode(m.mode))?;
            }
        }
    }
    fs::remove_dir_all(&old)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A mount, or None (with why) where this host cannot mount FUSE.
    fn mounted(d: &Path) -> Option<CrashFs> {
        let (b, m) = (d.join("backing"), d.join("mnt"));
        fs::create_dir_all(&b).unwrap();
        fs::create_dir_all(&m).unwrap();
        match CrashFs::mount(&b, &m) {
            Ok(fs) => Some(fs),
            Err(e) => {
                assert!(std::env::var_os("CI").is_none(), "a prerequisite of this test is missing in CI: cannot mount FUSE: {e}");
                eprintln!("skipped: cannot mount FUSE: {e}");
                None
            }
        }
    }

    #[test]
    fn what_was_synced_the_posix_way_survives_a_cut_and_nothing_else_does() {
        let d = tempfile::tempdir().unwrap();
        let Some(mut cfs) = mounted(d.path()) else { return };
        let m = cfs.path().to_path_buf();
        // Durable: a folder made and its parent fsynced, a file written, fsynced, renamed into
        // place, the folder fsynced.
        fs::create_dir(m.join("wal")).unwrap();
        fs::File::open(&m).unwrap().sync_all().unwrap();
        let mut f = fs::File::create(m.join("wal/.seg.tmp")).unwrap();
        f.write_all(&[7u8; 10_000]).unwrap();
        f.sync_all().unwrap();
        drop(f);
        fs::rename(m.join("wal/.seg.tmp"), m.join("wal/seg")).unwrap();
        fs::File::open(m.join("wal")).unwrap().sync_all().unwrap();
        // Not durable: a file fsynced in a folder never fsynced since, and the classic `cp`.
        fs::create_dir(m.join("new")).unwrap();
        let mut g = fs::File::create(m.join("new/lost")).unwrap();
        g.write_all(b"fsynced, but its name is not").unwrap();
        g.sync_all().unwrap();
        drop(g);
        fs::write(m.join("wal/copied"), b"never fsynced").unwrap();
        assert_eq!(fs::read(m.join("wal/copied")).unwrap(), b"never fsynced", "the live view reads back what was written");
        assert!(cfs.pending() > 0);

        let r = cfs.cut(Cut::Clean);
        assert!(r.pending > 0 && r.kept == 0);
        assert!(fs::metadata(m.join("wal/seg")).is_err(), "power is off: operations fail");
        cfs.remount().unwrap();
        assert_eq!(fs::read(m.join("wal/seg")).unwrap(), vec![7u8; 10_000]);
        assert!(!m.join("new").exists(), "a folder whose parent was never fsynced is gone");
        assert!(!m.join("wal/copied").exists(), "a name whose folder was never fsynced is gone");
        assert!(!m.join("wal/.seg.tmp").exists());
        assert_eq!(fs::read(d.path().join("backing/wal/seg")).unwrap(), vec![7u8; 10_000], "the backing folder holds what survived");

        // Power is back: the file system works as before, and a clean unmount keeps everything.
        fs::write(m.join("after"), b"x").unwrap();
        cfs.unmount().unwrap();
        assert_eq!(fs::read(d.path().join("backing/after")).unwrap(), b"x");
    }

    /// How many mounts sit on `m` (stacked ones count each).
    fn mounts_at(m: &Path) -> usize {
        let m = fs::canonicalize(m).unwrap();
        fs::read_to_string("/proc/self/mountinfo").unwrap().lines().filter(|l| l.split(' ').nth(4) == Some(m.to_str().unwrap())).count()
    }

    /// A mount again while a process still holds a file on it fails (EBUSY) and leaves one mount;
    /// once the file is let go the mount again succeeds, still one mount, not one on top of a
    /// stale one; dropped with a file still open, nothing is left mounted.
    #[test]
    fn a_busy_mount_is_never_stacked_nor_left_behind() {
        let d = tempfile::tempdir().unwrap();
        let Some(mut cfs) = mounted(d.path()) else { return };
        let m = cfs.path().to_path_buf();
        fs::write(m.join("f"), b"x").unwrap();
        let held = fs::File::open(m.join("f")).unwrap();
        assert!(cfs.remount().is_err(), "busy");
        assert_eq!(mounts_at(&m), 1);
        drop(held);
        cfs.remount().unwrap();
        assert_eq!(mounts_at(&m), 1, "not stacked");
        // Served (the file was never synced: power came back without it).
        fs::write(m.join("g"), b"y").unwrap();
        let _held = fs::File::open(m.join("g")).unwrap();
        drop(cfs);
        assert_eq!(mounts_at(&m), 0, "detached, not left behind");
    }

    #[test]
    fn a_prefix_cut_leaves_each_file_whole_or_a_page_aligned_prefix() {
        let d = tempfile::tempdir().unwrap();
        let Some(mut cfs) = mounted(d.path()) else { return };
        let m = cfs.path().to_path_buf();
        fs::write(m.join("f"), b"").unwrap();
        fs::File::open(&m).unwrap().sync_all().unwrap();
        let mut f = fs::OpenOptions::new().write(true).open(m.join("f")).unwrap();
        f.sync_all().unwrap();
        for i in 1..=8u8 {
            f.write_all(&[i; 16384]).unwrap();
        }
        drop(f);
        let r = cfs.cut(Cut::Prefix { seed: 12345 });
        cfs.remount().unwrap();
        let got = fs::read(m.join("f")).unwrap();
        assert!(got.len() as u64 % model::PAGE == 0, "{} bytes", got.len());
        assert!(got.len() <= 8 * 16384);
        for (i, chunk) in got.chunks(16384).enumerate() {
            assert!(chunk.iter().all(|&b| b == i as u8 + 1), "write {i} kept in order");
        }
        assert!(r.kept <= r.pending);
        cfs.unmount().unwrap();
    }
}
