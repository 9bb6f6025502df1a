//! The bench's work folders: created where the user pointed, removed on drop (also when the bench
//! is interrupted: it unwinds to the drops).

use std::path::{Path, PathBuf};

use sheaf_core::{Error, ErrorKind, Result};

/// A work directory `NAME` in `parent`, created now and removed on drop.
pub(super) struct WorkDir(pub(super) PathBuf);

impl WorkDir {
    /// `parent` must exist (a mistyped target is an error, not a new folder); `name` must not
    /// (created atomically, never through a planted link).
    pub(super) fn create(parent: &Path, name: &str) -> Result<WorkDir> {
        if !parent.is_dir() {
            return Err(Error::new(ErrorKind::Target, format!("{} is not a directory: create it, or name another --target or --restore-dir", parent.display())));
        }
        let path = parent.join(name);
        std::fs::create_dir(&path).map_err(|e| Error::io(ErrorKind::Target, format!("cannot create {}", path.display()), e))?;
        let dir = WorkDir(path);
        // Peers run as the server's user (pgBackRest) and must reach into it.
        set_mode(&dir.0, 0o755)?;
        Ok(dir)
    }
}

/// Whether `dest` holds a restored data directory.
pub(super) fn holds_cluster(dest: &Path) -> bool {
    dest.join("PG_VERSION").exists()
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(super) fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|e| Error::io(ErrorKind::Target, format!("chmod {}", path.display()), e))
}

pub(super) fn remove(path: &Path) -> Result<()> {
    match std::fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(ErrorKind::Target, format!("cannot remove {}", path.display()), e)),
    }
}

/// Bytes of all files under `path`.
pub(super) fn tree_bytes(path: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(path) else { return 0 };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => tree_bytes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map(|m| m.len()).unwrap_or(0),
            _ => 0,
        })
        .sum()
}
