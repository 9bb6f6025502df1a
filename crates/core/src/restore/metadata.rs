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

/// A file a delta restore keeps whole (every byte found there): where `p` is a regular file of
/// entry `e`'s size, set by path only what differs of its owner (as root), mode and modification
/// time, and say so; `false` (nothing done) where it is not such a file. A kept file of a restore
/// of this cluster needs nothing, one of a standby or a former primary its time: one stat, and
/// one call where anything differs, instead of an open, a truncate and three calls on it.
///
/// # Errors
/// What setting the owner, mode or time failed on.
pub(super) fn keep(e: &Entry, p: &Path, as_root: bool) -> Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let Ok(m) = fs::symlink_metadata(p) else { return Ok(false) };
    if !m.is_file() || m.len() != e.size {
        return Ok(false);
    }
    let chown = as_root && (m.uid() != e.uid || m.gid() != e.gid);
    if chown {
        let (uid, gid) = owner(e);
        rustix::fs::chownat(CWD, p, Some(uid), Some(gid), AtFlags::SYMLINK_NOFOLLOW).map_err(|err| io_at(ErrorKind::Target, "cannot set owner of", p, err.into()))?;
    }
    // A change of owner clears set-ID bits: the mode follows it.
    if chown || m.mode() & 0o7777 != e.mode & 0o7777 {
        fs::set_permissions(p, fs::Permissions::from_mode(e.mode)).map_err(|err| io_at(ErrorKind::Target, "cannot set mode of", p, err))?;
    }
    if i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()) != i128::from(e.mtime_ns) {
        rustix::fs::utimensat(CWD, p, &times(e), AtFlags::SYMLINK_NOFOLLOW).map_err(|err| io_at(ErrorKind::Target, "cannot set times of", p, err.into()))?;
    }
    Ok(true)
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
