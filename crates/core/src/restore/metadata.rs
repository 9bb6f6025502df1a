//! Owners, modes and times of what a restore makes: through an open descriptor for files being
//! written, by path (not following links) for everything else.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use rustix::fs::{AtFlags, Gid, Mode, Timespec, Timestamps, Uid, CWD, UTIME_OMIT};

use crate::error::{io_at, ErrorKind, Result};
use crate::manifest::{Entry, EntryKind};

/// An entry's owner as the kernel takes it. Unchecked, so that an id of -1 (u32::MAX) in a
/// manifest means what it meant to chown(2): leave it as it is.
fn owner(e: &Entry) -> (Uid, Gid) {
    (Uid::from_raw_unchecked(e.uid), Gid::from_raw_unchecked(e.gid))
}

/// The access time left alone, the modification time the entry's.
fn times(e: &Entry) -> Timestamps {
    Timestamps {
        last_access: Timespec { tv_sec: 0, tv_nsec: UTIME_OMIT },
        last_modification: Timespec { tv_sec: e.mtime_ns.div_euclid(1_000_000_000), tv_nsec: e.mtime_ns.rem_euclid(1_000_000_000) as _ },
    }
}

/// Owner (`chown`: as root, where the file may not have it yet; changing it clears set-ID bits, so
/// the mode follows), mode (`chmod`) and modification time of the open file `f`, through its
/// descriptor (no walk of its path).
pub(super) fn apply_metadata_fd(e: &Entry, f: &fs::File, p: &Path, chown: bool, chmod: bool) -> Result<()> {
    if chown {
        let (uid, gid) = owner(e);
        rustix::fs::fchown(f, Some(uid), Some(gid)).map_err(|err| io_at(ErrorKind::Target, "cannot set owner of", p, err.into()))?;
    }
    if chmod {
        rustix::fs::fchmod(f, Mode::from_raw_mode(e.mode)).map_err(|err| io_at(ErrorKind::Target, "cannot set mode of", p, err.into()))?;
    }
    rustix::fs::futimens(f, &times(e)).map_err(|err| io_at(ErrorKind::Target, "cannot set times of", p, err.into()))
}

/// Whether `p` is a regular file that has entry `e`'s size, mode, modification time and (as root)
/// owner already: what a delta restore keeps as it is needs nothing done to it.
pub(super) fn already(e: &Entry, p: &Path, as_root: bool) -> bool {
    use std::os::unix::fs::MetadataExt;
    fs::symlink_metadata(p).is_ok_and(|m| {
        m.is_file()
            && m.len() == e.size
            && m.mode() & 0o7777 == e.mode & 0o7777
            && i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()) == i128::from(e.mtime_ns)
            && (!as_root || (m.uid() == e.uid && m.gid() == e.gid))
    })
}

/// Owner (as root), mode (not of a symlink) and modification time of `p`, not following a link.
pub(super) fn apply_metadata(e: &Entry, p: &Path, as_root: bool) -> Result<()> {
    if as_root {
        let (uid, gid) = owner(e);
        rustix::fs::chownat(CWD, p, Some(uid), Some(gid), AtFlags::SYMLINK_NOFOLLOW).map_err(|err| io_at(ErrorKind::Target, "cannot set owner of", p, err.into()))?;
    }
    if e.kind != EntryKind::Symlink {
        fs::set_permissions(p, fs::Permissions::from_mode(e.mode)).map_err(|err| io_at(ErrorKind::Target, "cannot set mode of", p, err))?;
    }
    rustix::fs::utimensat(CWD, p, &times(e), AtFlags::SYMLINK_NOFOLLOW).map_err(|err| io_at(ErrorKind::Target, "cannot set times of", p, err.into()))
}

/// A FIFO at `p`, owner-only until its metadata is set.
pub(super) fn mkfifo(p: &Path) -> Result<()> {
    rustix::fs::mkfifoat(CWD, p, Mode::from_raw_mode(0o600)).map_err(|err| io_at(ErrorKind::Target, "cannot create FIFO", p, err.into()))
}
