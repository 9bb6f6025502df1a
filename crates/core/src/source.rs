//! Listing a source tree: every directory, regular file and symlink below a root, without following
//! links, in a stable order. Special files (sockets, FIFOs, devices) cannot be backed up as bytes and
//! are reported.

use std::fs;
use std::os::unix::fs::MetadataExt;
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
}

/// List `root` recursively. The root itself is the entry with path `""`.
///
/// # Errors
/// [`ErrorKind::Source`] when the root is missing or not a directory, or a directory cannot be read;
/// [`ErrorKind::InvalidInput`] for a name that is not UTF-8.
pub fn list_tree(root: &Path, root_id: u16, warnings: &mut Vec<String>) -> Result<Vec<Listed>> {
    let meta = fs::symlink_metadata(root).map_err(|e| io_at(ErrorKind::Source, "cannot read source", root, e))?;
    if !meta.is_dir() {
        return Err(Error::new(
            ErrorKind::Source,
            format!("source {} is not a directory: give the directory to back up", root.display()),
        ));
    }
    let mut out = vec![listed(root, String::new(), root_id, &meta)?];
    walk(root, "", root_id, &mut out, warnings)?;
    Ok(out)
}

fn walk(dir: &Path, rel: &str, root_id: u16, out: &mut Vec<Listed>, warnings: &mut Vec<String>) -> Result<()> {
    let rd = fs::read_dir(dir).map_err(|e| io_at(ErrorKind::Source, "cannot list directory", dir, e))?;
    let mut names = Vec::new();
    for item in rd {
        let item = item.map_err(|e| io_at(ErrorKind::Source, "cannot list directory", dir, e))?;
        names.push(item.file_name());
    }
    names.sort();
    for name in names {
        let abs = dir.join(&name);
        let name = name.into_string().map_err(|n| {
            Error::invalid(format!("file name {n:?} in {} is not UTF-8; sheaf stores UTF-8 names only", dir.display()))
        })?;
        let rel = if rel.is_empty() { name } else { format!("{rel}/{name}") };
        let meta = match fs::symlink_metadata(&abs) {
            Ok(m) => m,
            // Gone between listing and stat: nothing to back up, and not an error for a live source.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                warnings.push(format!("{} vanished while the tree was listed; it is not in the backup", abs.display()));
                continue;
            }
            Err(e) => return Err(io_at(ErrorKind::Source, "cannot stat", &abs, e)),
        };
        let ft = meta.file_type();
        if !(ft.is_dir() || ft.is_file() || ft.is_symlink()) {
            warnings.push(format!("skipped special file {} (sockets, FIFOs and devices hold no data to back up)", abs.display()));
            continue;
        }
        out.push(listed(&abs, rel.clone(), root_id, &meta)?);
        if ft.is_dir() {
            match walk(&abs, &rel, root_id, out, warnings) {
                // A directory dropped while we list it (a database being dropped): say so, go on.
                Err(_) if !abs.exists() => {
                    warnings.push(format!("{} vanished while the tree was listed", abs.display()));
                    out.retain(|l| !(l.entry.root == root_id && (l.entry.path == rel || l.entry.path.starts_with(&format!("{rel}/")))));
                }
                r => r?,
            }
        }
    }
    Ok(())
}

/// List one path (not following a link) as the entry `rel` of root `root`.
///
/// # Errors
/// [`ErrorKind::Source`] when it cannot be stat'ed or its link read.
pub fn list_one(abs: &Path, rel: String, root: u16) -> Result<Listed> {
    let meta = fs::symlink_metadata(abs).map_err(|e| io_at(ErrorKind::Source, "cannot stat", abs, e))?;
    listed(abs, rel, root, &meta)
}

fn listed(abs: &Path, rel: String, root: u16, meta: &fs::Metadata) -> Result<Listed> {
    let ft = meta.file_type();
    let (kind, target) = if ft.is_symlink() {
        let t = fs::read_link(abs).map_err(|e| io_at(ErrorKind::Source, "cannot read link", abs, e))?;
        let t = t.into_os_string().into_string().map_err(|t| {
            Error::invalid(format!("symlink {} points to {t:?}, which is not UTF-8", abs.display()))
        })?;
        (EntryKind::Symlink, Some(t))
    } else if ft.is_dir() {
        (EntryKind::Dir, None)
    } else {
        (EntryKind::File, None)
    };
    Ok(Listed {
        entry: Entry {
            root,
            path: rel,
            kind,
            mode: meta.mode() & 0o7777,
            mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
            uid: meta.uid(),
            gid: meta.gid(),
            size: if kind == EntryKind::File { meta.len() } else { 0 },
            crc32c: None,
            target,
            vanished: false,
        },
        abs: abs.to_path_buf(),
        dev: meta.dev(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
            vec![
                ("", EntryKind::Dir),
                ("a", EntryKind::File),
                ("b", EntryKind::Dir),
                ("b/empty", EntryKind::Dir),
                ("b/f", EntryKind::File),
                ("link", EntryKind::Symlink),
            ]
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
