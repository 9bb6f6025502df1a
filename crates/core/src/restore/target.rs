//! The target roots made ready for a restore and cleaned up after a failed one: a non-empty root
//! is refused unless forced (then emptied), missing ones are made, markers written; the space
//! check per filesystem; and what a failure leaves (nothing, or the markers).

use std::fs;
use std::path::Path;

use super::options::INCOMPLETE_MARKER;
use super::plan::Plan;
use crate::error::{io_at, Error, ErrorKind, Result};
use crate::host::free_space;
use crate::manifest::EntryKind;

/// What each destination root looked like before we started, for clean-up.
pub(super) struct Prepared {
    pub(super) was_empty: Vec<bool>,
}

impl Plan<'_> {
    /// Refuse non-empty roots unless forced (then empty them) or restoring a delta (then keep
    /// them: a failed delta restore leaves its markers, never removes what was there); create
    /// missing ones; write markers.
    pub(super) fn prepare_roots(&self, force: bool, delta: bool) -> Result<Prepared> {
        let mut was_empty = Vec::with_capacity(self.roots.len());
        for r in &self.roots {
            match fs::read_dir(r) {
                Ok(mut rd) => {
                    let first = rd.next();
                    let Some(item) = first else {
                        was_empty.push(true);
                        continue;
                    };
                    if delta {
                        was_empty.push(false);
                        continue;
                    }
                    if !force {
                        let what = match item {
                            Ok(i) => format!("it holds {:?}, among others", i.file_name()),
                            Err(e) => format!("it cannot be listed: {e}"),
                        };
                        return Err(Error::new(
                            ErrorKind::TargetNotEmpty,
                            format!("restore target {} is not empty ({what}): choose an empty or new directory, or pass --force to replace what is there", r.display()),
                        ));
                    }
                    clear_dir(r)?;
                    was_empty.push(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    fs::create_dir_all(r).map_err(|e| io_at(ErrorKind::Target, "cannot create restore target", r, e))?;
                    was_empty.push(true);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
                    return Err(Error::new(ErrorKind::Target, format!("restore target {} is a file, not a directory", r.display())))
                }
                Err(e) => return Err(io_at(ErrorKind::Target, "cannot read restore target", r, e)),
            }
        }
        for m in &self.markers {
            fs::write(m, self.manifest.backup_id.as_bytes()).map_err(|e| io_at(ErrorKind::Target, "cannot write to restore target", m, e))?;
        }
        Ok(Prepared { was_empty })
    }

    /// What each filesystem of the roots will receive, counted with [`Space::add`] and checked
    /// with [`Space::check`].
    pub(super) fn space(&self) -> Space<'_> {
        // Each root's filesystem, asked once: (root, device), and per device the bytes it receives.
        let roots: Vec<(&Path, u64)> = self.roots.iter().filter_map(|r| free_space(r).map(|(dev, _)| (r.as_path(), dev))).collect();
        let mut need: Vec<(u64, u64, &Path)> = Vec::new();
        for &(r, dev) in &roots {
            if !need.iter().any(|n| n.0 == dev) {
                need.push((dev, 0, r));
            }
        }
        Space { roots, need }
    }
    pub(super) fn clean_up_after(&self, e: Error, prepared: &Prepared) -> Error {
        let mut removed = true;
        for (r, &empty) in self.roots.iter().zip(&prepared.was_empty) {
            if empty {
                if let Ok(rd) = fs::read_dir(r) {
                    for item in rd.flatten() {
                        removed &= remove_any(&item.path()).is_ok();
                    }
                }
            } else {
                removed = false;
            }
        }
        if removed {
            e.context(format!("restore failed and what it wrote was removed from {}", self.roots[0].display()))
        } else {
            // The markers stay (or are written again) so the target never looks whole.
            for m in &self.markers {
                let _ = fs::write(m, self.manifest.backup_id.as_bytes());
            }
            e.context(format!("restore failed; {} is incomplete (marked by {INCOMPLETE_MARKER})", self.roots[0].display()))
        }
    }
}

/// Remove everything inside `dir` (for `--force`), never `/` itself.
pub(super) fn clear_dir(dir: &Path) -> Result<()> {
    let canonical = fs::canonicalize(dir).map_err(|e| io_at(ErrorKind::Target, "cannot resolve", dir, e))?;
    if canonical.parent().is_none() {
        return Err(Error::invalid(format!("refusing to clear {} for a forced restore", canonical.display())));
    }
    for item in fs::read_dir(dir).map_err(|e| io_at(ErrorKind::Target, "cannot list", dir, e))? {
        let item = item.map_err(|e| io_at(ErrorKind::Target, "cannot list", dir, e))?;
        remove_any(&item.path())?;
    }
    Ok(())
}

pub(super) fn ensure_parent(p: &Path) -> Result<()> {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() && !d.exists() => fs::create_dir_all(d).map_err(|e| io_at(ErrorKind::Target, "cannot create directory", d, e)),
        _ => Ok(()),
    }
}

pub(super) fn remove_any(p: &Path) -> Result<()> {
    let m = fs::symlink_metadata(p).map_err(|e| io_at(ErrorKind::Target, "cannot stat", p, e))?;
    let r = if m.is_dir() { fs::remove_dir_all(p) } else { fs::remove_file(p) };
    r.map_err(|e| io_at(ErrorKind::Target, "cannot remove", p, e))
}

/// Refuse, before writing a byte, a restore whose data cannot fit: per filesystem, the bytes its
/// files will hold (holes excluded) against what is free there. Metadata is not counted, so a
/// write can still find the disk full; that fails and is cleaned up the same way.
pub(super) struct Space<'p> {
    /// Each root and its filesystem.
    roots: Vec<(&'p Path, u64)>,
    /// Per filesystem: (device, bytes it receives, a root on it).
    need: Vec<(u64, u64, &'p Path)>,
}

impl Space<'_> {
    /// `bytes` of data (not zero chunks) go to file `id` of the plan's set, if it is written.
    ///
    /// # Errors
    /// A page of the manifest that does not check.
    pub(super) fn add(&mut self, plan: &Plan<'_>, id: u32, bytes: u64) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let dev = if let [(dev, _, _)] = self.need[..] {
            // One filesystem for every root (the usual case): whether the file is written is
            // enough, without its path.
            if !plan.set.with_entry(id, |e| e.kind == EntryKind::File && plan.written(id, e))? {
                return Ok(());
            }
            dev
        } else {
            let Some(d) = plan.set.with_entry(id, |e| if e.kind == EntryKind::File { plan.writes(id, e) } else { None })? else { return Ok(()) };
            let Some(&(_, dev)) = self.roots.iter().filter(|(r, _)| d.starts_with(r)).max_by_key(|(r, _)| r.as_os_str().len()) else { return Ok(()) };
            dev
        };
        if let Some(n) = self.need.iter_mut().find(|n| n.0 == dev) {
            n.1 += bytes;
        }
        Ok(())
    }

    /// # Errors
    /// [`ErrorKind::NoSpace`] naming the filesystem that lacks room.
    pub(super) fn check(self) -> Result<()> {
        for (_, bytes, root) in self.need {
            let Some((_, free)) = free_space(root) else { continue };
            if bytes > free {
                return Err(Error::io(
                    ErrorKind::NoSpace,
                    format!("the restore writes {} to the filesystem of {}, which has {} free", crate::size::format_size(bytes), root.display(), crate::size::format_size(free)),
                    std::io::Error::from_raw_os_error(libc::ENOSPC),
                ));
            }
        }
        Ok(())
    }
}
