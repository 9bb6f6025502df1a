//! Writing a file whole, the one way sheaf does it outside the stripe sinks: the bytes go to a
//! temporary name of their own beside the file (`.NAME.PID-N.tmp`, created exclusively, so two
//! writers of one file or of `X.ok` and `X.json` never share one), are fsynced, renamed over the
//! name, and the folder is fsynced. After a crash the file is either the old one or the new one,
//! never a part; a temporary left behind by a crash is a dot-file nobody reads. A writer dropped
//! before [`WholeFile::commit`] removes its temporary.
//!
//! [`WholeFile`] streams (a restored file, a fetched segment); [`write_whole`] writes bytes held in
//! memory.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{io_at, Error, ErrorKind, Result};

/// Numbers the temporaries one process makes, so that none shares a name.
static NEXT: AtomicU64 = AtomicU64::new(0);

/// How a [`WholeFile`] is made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// The data fsynced before the rename, the folder after it: the default.
    Full,
    /// The data fsynced before the rename, the folder not: a cache that is fetched again when a
    /// crash loses its name, written out now so that a later fsync of it (PostgreSQL's, of a
    /// prefetched segment) finds nothing left to write.
    DataOnly,
    /// Renamed without an fsync, for a reader that makes the file durable itself (PostgreSQL
    /// fsyncs each segment a `restore_command` gives it): still never seen half-written.
    RenameOnly,
}

/// A file being written whole: a temporary beside it until [`WholeFile::commit`].
#[derive(Debug)]
pub struct WholeFile {
    dest: PathBuf,
    tmp: PathBuf,
    file: Option<File>,
    sync: Durability,
    replace: bool,
    kind: ErrorKind,
}

/// The temporary name beside `dest` for this writer.
fn temporary(dest: &Path) -> PathBuf {
    let name = dest.file_name().map_or_else(|| "file".into(), |n| n.to_string_lossy().into_owned());
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    dest.with_file_name(format!(".{name}.{}-{n}.tmp", std::process::id()))
}

impl WholeFile {
    /// Start writing `dest` (mode 0666 less the umask, as `File::create`); nothing is at `dest`
    /// until the commit.
    ///
    /// # Errors
    /// The folder cannot be written ([`ErrorKind::Target`], or [`ErrorKind::NoSpace`]).
    pub fn create(dest: &Path) -> Result<WholeFile> {
        WholeFile::create_with(dest, 0o666, ErrorKind::Target)
    }

    /// As [`WholeFile::create`], with the file's `mode` and the error kind failures take (a
    /// spool or a cache is [`ErrorKind::Io`], a target [`ErrorKind::Target`]).
    ///
    /// # Errors
    /// As [`WholeFile::create`].
    pub fn create_with(dest: &Path, mode: u32, kind: ErrorKind) -> Result<WholeFile> {
        let tmp = temporary(dest);
        let file = OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp).map_err(|e| io_at(kind, "cannot write", dest, e))?;
        Ok(WholeFile { dest: dest.to_path_buf(), tmp, file: Some(file), sync: Durability::Full, replace: true, kind })
    }

    /// As [`WholeFile::create_with`], under the temporary name `tmp_name` beside `dest`: a name
    /// others look for (a fetch in flight, a leftover to clean up). One left there by a writer
    /// that was killed is written over.
    ///
    /// # Errors
    /// As [`WholeFile::create`].
    pub fn create_named(dest: &Path, tmp_name: &str, mode: u32, kind: ErrorKind) -> Result<WholeFile> {
        let tmp = dest.with_file_name(tmp_name);
        let file = OpenOptions::new().write(true).create(true).truncate(true).mode(mode).open(&tmp).map_err(|e| io_at(kind, "cannot write", dest, e))?;
        Ok(WholeFile { dest: dest.to_path_buf(), tmp, file: Some(file), sync: Durability::Full, replace: true, kind })
    }

    /// Made durable as `sync` says (the default is [`Durability::Full`]).
    pub fn sync(mut self, sync: Durability) -> Self {
        self.sync = sync;
        self
    }

    /// Refuse to replace a file already at the name (where the filesystem can say): a key or a
    /// certificate is never overwritten.
    pub fn no_replace(mut self) -> Self {
        self.replace = false;
        self
    }

    /// The file being written, for positioned writes or its length.
    pub fn file(&mut self) -> &mut File {
        self.file.as_mut().expect("a WholeFile's file is there until commit")
    }

    /// Put the file in place: fsynced, renamed over the name, the folder fsynced.
    ///
    /// # Errors
    /// A failed write-back (EIO, ENOSPC), the rename, or, with [`WholeFile::no_replace`], a file
    /// already at the name; the temporary is removed and the name left as it was.
    pub fn commit(mut self) -> Result<()> {
        let file = self.file.take().expect("committed once");
        match self.sync {
            Durability::Full => file.sync_all().map_err(|e| io_at(self.kind, "cannot write back", &self.dest, e))?,
            Durability::DataOnly => file.sync_data().map_err(|e| io_at(self.kind, "cannot write back", &self.dest, e))?,
            Durability::RenameOnly => {}
        }
        drop(file);
        rename_into_place(&self.tmp, &self.dest, self.replace).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                Error::new(ErrorKind::Target, format!("{} already exists; nothing was replaced", self.dest.display()))
            } else {
                io_at(self.kind, "cannot put in place", &self.dest, e)
            }
        })?;
        // In place: nothing to remove on drop from here on.
        self.tmp = PathBuf::new();
        if self.sync == Durability::Full {
            sync_dir(&parent_dir(&self.dest)).map_err(|e| io_at(self.kind, "cannot fsync the folder of", &self.dest, e))?;
        }
        Ok(())
    }
}

impl Write for WholeFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.file().write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.file().write_all(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file().flush()
    }
}

impl Drop for WholeFile {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// Write `bytes` as the whole of `dest` (mode 0666 less the umask), durably: see the module.
///
/// # Errors
/// As [`WholeFile::create`] and [`WholeFile::commit`], naming `dest`.
pub fn write_whole(dest: &Path, bytes: &[u8]) -> Result<()> {
    write_whole_with(dest, bytes, 0o666, ErrorKind::Target)
}

/// As [`write_whole`], with the file's `mode` and the error kind failures take.
///
/// # Errors
/// As [`write_whole`].
pub fn write_whole_with(dest: &Path, bytes: &[u8], mode: u32, kind: ErrorKind) -> Result<()> {
    let mut w = WholeFile::create_with(dest, mode, kind)?;
    w.write_all(bytes).map_err(|e| io_at(kind, "cannot write", dest, e))?;
    w.commit()
}

/// Rename, refusing to replace an existing file unless `overwrite` (where the filesystem can say).
pub(crate) fn rename_into_place(from: &Path, to: &Path, overwrite: bool) -> std::io::Result<()> {
    if overwrite {
        return fs::rename(from, to);
    }
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
        Ok(()) => Ok(()),
        // Filesystems without RENAME_NOREPLACE: the existence check at create time stands.
        Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {
            if to.exists() {
                return Err(std::io::Error::from(std::io::ErrorKind::AlreadyExists));
            }
            fs::rename(from, to)
        }
        Err(e) => Err(e.into()),
    }
}

/// The folder `path` is in (`.` for a bare name).
pub fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// fsync a directory so that a rename or create in it is durable.
///
/// # Errors
/// The directory cannot be opened or written back.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Make folder `dir`, durably: a name is durable only once the folder holding it is fsynced, and
/// a file fsynced into a folder whose own name was lost with the power is lost with it.
///
/// # Errors
/// As `mkdir(2)` (`AlreadyExists` among them), or the parent's fsync.
pub fn create_dir(dir: &Path) -> std::io::Result<()> {
    fs::create_dir(dir)?;
    sync_dir(&parent_dir(dir))
}

/// [`create_dir`] for `dir` and every missing folder above it, as `mkdir -p`; a folder already
/// there is success.
///
/// # Errors
/// As [`create_dir`].
pub fn create_dirs(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(up) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_dirs(up)?;
    }
    match create_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    }

    #[test]
    fn a_file_appears_whole_and_replaces_the_old_one() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.json");
        write_whole(&p, b"one").unwrap();
        write_whole(&p, b"two, longer").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two, longer");
        assert_eq!(names(d.path()), ["x.json"], "no temporary left");
    }

    #[test]
    fn two_writers_of_names_that_differ_by_extension_never_share_a_temporary() {
        // `with_extension("tmp")` gave X.ok and X.json one temporary: each must land whole.
        let d = tempfile::tempdir().unwrap();
        let mut a = WholeFile::create(&d.path().join("X.ok")).unwrap();
        let mut b = WholeFile::create(&d.path().join("X.json")).unwrap();
        a.write_all(b"ok").unwrap();
        b.write_all(b"{\"json\":1}").unwrap();
        a.commit().unwrap();
        b.commit().unwrap();
        assert_eq!(fs::read(d.path().join("X.ok")).unwrap(), b"ok");
        assert_eq!(fs::read(d.path().join("X.json")).unwrap(), b"{\"json\":1}");
        assert_eq!(names(d.path()), ["X.json", "X.ok"]);
    }

    #[test]
    fn a_writer_dropped_before_its_commit_leaves_the_old_file_and_no_temporary() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state");
        write_whole(&p, b"old").unwrap();
        let mut w = WholeFile::create(&p).unwrap();
        w.write_all(b"half of the new").unwrap();
        drop(w);
        assert_eq!(fs::read(&p).unwrap(), b"old");
        assert_eq!(names(d.path()), ["state"]);
    }

    #[test]
    fn no_replace_refuses_a_file_already_there_and_keeps_it() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("ca.key");
        write_whole_with(&p, b"first key", 0o600, ErrorKind::Target).unwrap();
        assert_eq!(fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600, "a key is the owner's alone");
        let mut w = WholeFile::create_with(&p, 0o600, ErrorKind::Target).unwrap().no_replace();
        w.write_all(b"second key").unwrap();
        let e = w.commit().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Target);
        assert!(e.to_string().contains("already exists"), "{e}");
        assert_eq!(fs::read(&p).unwrap(), b"first key");
        assert_eq!(names(d.path()), ["ca.key"]);
    }

    #[test]
    fn a_folder_that_cannot_be_written_is_a_target_error_naming_it() {
        let e = write_whole(Path::new("/nonexistent/sheaf/x"), b"x").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Target);
        // The file asked for, not the temporary beside it.
        assert!(e.to_string().contains("cannot write /nonexistent/sheaf/x:"), "{e}");
    }
}
