//! The restore's plan, made and checked before anything is touched: where each entry of the
//! backup goes (the target, a relocation, or its original path when allowed), which entries
//! `--only` chooses, which files come back hollow, and the roots that receive a tree. Nothing a
//! backup holds can make a restore write outside its targets.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::options::{RestoreOptions, INCOMPLETE_MARKER};
use crate::error::{Error, Result};
use crate::manifest::{Entry, EntryKind, Manifest, Root};

pub(super) struct Plan<'m> {
    pub(super) manifest: &'m Manifest,
    /// Destination of each entry (None: not restored).
    pub(super) dest: Vec<Option<PathBuf>>,
    /// Per entry: a file restored as zeros of its size, unread ([`RestoreOptions::hollow`]).
    pub(super) hollow: Vec<bool>,
    /// Folders that receive a tree: the target and each relocation or extra root.
    pub(super) roots: Vec<PathBuf>,
    /// One incomplete-marker per root.
    pub(super) markers: Vec<PathBuf>,
}

impl<'m> Plan<'m> {
    pub(super) fn new(manifest: &'m Manifest, opts: &RestoreOptions) -> Result<Self> {
        validate_paths(manifest)?;
        let chosen = choose(manifest, &opts.only)?;
        let mut used = vec![false; opts.relocate.len()];
        let mut dest = Vec::with_capacity(manifest.entries.len());
        let mut unmapped: Vec<&Root> = Vec::new();
        for (i, e) in manifest.entries.iter().enumerate() {
            if e.vanished || chosen.as_ref().is_some_and(|c| !c[i]) {
                dest.push(None);
                continue;
            }
            let root = &manifest.roots[e.root as usize];
            let rel = e.path_bytes();
            let logical = if root.name.is_empty() { rel.to_vec() } else { join_rel(root.name.as_bytes(), rel) };
            let original = join_rel(root.path.as_bytes(), rel);
            let root_depth = depth(root.path.as_bytes());
            // The most specific relocation wins, counting path components below the backup's root
            // whichever way OLD was written.
            let mut best: Option<(usize, usize, PathBuf)> = None;
            for (i, (old, new)) in opts.relocate.iter().enumerate() {
                let old = old.as_bytes();
                let hit = strip_prefix(&logical, old)
                    .map(|rest| (depth(old), rest))
                    .or_else(|| strip_prefix(&original, old).map(|rest| (depth(old).saturating_sub(root_depth), rest)));
                if let Some((d, rest)) = hit {
                    if best.as_ref().is_none_or(|b| d > b.0) {
                        let p = if rest.is_empty() { new.clone() } else { new.join(OsStr::from_bytes(rest)) };
                        best = Some((d, i, p));
                    }
                }
            }
            let p = match best {
                Some((_, i, p)) => {
                    used[i] = true;
                    p
                }
                None if e.root == 0 => {
                    if rel.is_empty() {
                        opts.target.clone()
                    } else {
                        opts.target.join(OsStr::from_bytes(rel))
                    }
                }
                None => {
                    if !opts.original_paths && !unmapped.iter().any(|r| std::ptr::eq(*r, root)) {
                        unmapped.push(root);
                    }
                    PathBuf::from(OsStr::from_bytes(&original))
                }
            };
            dest.push(Some(p));
        }
        if let Some(i) = used.iter().position(|u| !u).filter(|_| chosen.is_none()) {
            let (old, new) = &opts.relocate[i];
            return Err(Error::invalid(format!(
                "--relocate {old}={}: nothing in the backup is under '{old}' (or a more specific --relocate takes all of it); give a path inside the backup or an original absolute path",
                new.display()
            )));
        }
        if !unmapped.is_empty() {
            let what: Vec<String> = unmapped
                .iter()
                .map(|r| format!("'{}' (at {} when backed up)", r.name, r.path))
                .collect();
            let first = &unmapped[0].path;
            return Err(Error::invalid(format!(
                "the backup holds {} outside its main directory: {}; sheaf writes outside --to only where told: map each with --relocate {first}=NEW_DIR, or pass --original-paths to restore them where they were",
                if unmapped.len() == 1 { "a tree" } else { "trees" },
                what.join(", ")
            )));
        }
        let mut seen = HashSet::new();
        for d in dest.iter().flatten() {
            if !seen.insert(d.clone()) {
                return Err(Error::invalid(format!(
                    "two entries of the backup would be restored to {}: check the --relocate targets for overlaps",
                    d.display()
                )));
            }
        }
        let mut roots = vec![opts.target.clone()];
        roots.extend(opts.relocate.iter().map(|(_, new)| new.clone()));
        for (k, root) in manifest.roots.iter().enumerate().skip(1) {
            let relocated = manifest.entries.iter().zip(&dest).any(|(e, d)| {
                e.root as usize == k && e.path.is_empty() && d.as_deref() != Some(Path::new(&root.path))
            });
            // With --only, a root none of whose entries is restored is not touched.
            let used = manifest.entries.iter().zip(&dest).any(|(e, d)| e.root as usize == k && d.is_some());
            if !relocated && used {
                roots.push(PathBuf::from(&root.path));
            }
        }
        let mut seen = HashSet::new();
        roots.retain(|r| seen.insert(r.clone()));
        let markers = roots.iter().map(|r| r.join(INCOMPLETE_MARKER)).collect();
        let hollow = manifest
            .entries
            .iter()
            .map(|e| {
                let p = logical_path(manifest, e);
                e.kind == EntryKind::File && opts.hollow.iter().any(|h| p.strip_prefix(h.trim_end_matches('/')).is_some_and(|rest| rest.starts_with('/')))
            })
            .collect();
        Ok(Plan { manifest, dest, hollow, roots, markers })
    }
}

/// An entry's path as the backup holds it: under its root's name (`pg_tblspc/OID/...` for a
/// tablespace), or as is under the main root.
fn logical_path(manifest: &Manifest, e: &Entry) -> String {
    let root = &manifest.roots[e.root as usize].name;
    match (root.is_empty(), e.path.is_empty()) {
        (true, _) => e.path.clone(),
        (false, true) => root.clone(),
        (false, false) => format!("{root}/{}", e.path),
    }
}

/// With `only` globs, which entries to restore: those whose path (or a folder above it) matches,
/// and the folders above them; `None` for everything.
///
/// # Errors
/// A glob that does not parse, or one that matches nothing in the backup.
fn choose(manifest: &Manifest, only: &[String]) -> Result<Option<Vec<bool>>> {
    if only.is_empty() {
        return Ok(None);
    }
    let globs = only
        .iter()
        .map(|g| glob::Pattern::new(g.trim_end_matches('/')).map_err(|e| Error::invalid(format!("--only '{g}': {e}"))))
        .collect::<Result<Vec<_>>>()?;
    let how = glob::MatchOptions { case_sensitive: true, require_literal_separator: true, require_literal_leading_dot: false };
    let path_of = |e: &Entry| logical_path(manifest, e);
    let mut hit = vec![false; globs.len()];
    let mut chosen = vec![false; manifest.entries.len()];
    let mut above: HashSet<String> = HashSet::new();
    for (i, e) in manifest.entries.iter().enumerate() {
        let p = path_of(e);
        if p.is_empty() {
            continue;
        }
        // The path itself, then each folder above it.
        let mut candidates = vec![p.as_str()];
        candidates.extend(p.match_indices('/').map(|(at, _)| &p[..at]));
        for (k, g) in globs.iter().enumerate() {
            if candidates.iter().any(|c| g.matches_with(c, how)) {
                hit[k] = true;
                chosen[i] = true;
            }
        }
        if chosen[i] {
            above.extend(p.match_indices('/').map(|(at, _)| p[..at].to_string()));
            above.insert(String::new());
        }
    }
    if let Some(k) = hit.iter().position(|h| !h) {
        return Err(Error::invalid(format!(
            "--only '{}' matches nothing in the backup: paths are as the backup holds them, e.g. base/16384/16385 or pg_tblspc/16390/... for PostgreSQL, or relative to the directory backed up",
            only[k]
        )));
    }
    for (i, e) in manifest.entries.iter().enumerate() {
        if e.kind == EntryKind::Dir && above.contains(&path_of(e)) {
            chosen[i] = true;
        }
    }
    Ok(Some(chosen))
}

/// Entries may only name plain relative paths, and every entry's parent must be a directory entry
/// of the same root: nothing a backup holds can make a restore write outside its targets, whether
/// through `..`, an absolute path, or a symlink standing where a directory should be.
pub(super) fn validate_paths(m: &Manifest) -> Result<()> {
    let bad = |e: &Entry| Error::corrupt(format!("manifest: entry path '{}' is not a plain relative path; refusing to restore", e.path));
    let mut dirs: HashSet<(u16, &[u8])> = HashSet::new();
    for (i, e) in m.entries.iter().enumerate() {
        let p = e.path_bytes();
        if !p.is_empty() {
            if p.split(|&b| b == b'/').any(|c| c.is_empty() || c == b"." || c == b"..") || p.contains(&0) {
                return Err(bad(e));
            }
            let parent = p.iter().rposition(|&b| b == b'/').map_or(&p[..0], |at| &p[..at]);
            if !dirs.contains(&(e.root, parent)) {
                return Err(Error::corrupt(format!(
                    "manifest: '{}' comes before, or without, its directory '{}'; refusing to restore",
                    e.path,
                    String::from_utf8_lossy(parent)
                )));
            }
        }
        match e.kind {
            EntryKind::Dir => {
                dirs.insert((e.root, p));
            }
            // A hard link names a regular file listed before it.
            EntryKind::Hardlink if !e.link.is_some_and(|l| (l as usize) < i && m.entries[l as usize].kind == EntryKind::File) => {
                return Err(Error::corrupt(format!("manifest: hard link '{}' names no regular file before it; refusing to restore", e.path)));
            }
            _ => {}
        }
    }
    for r in &m.roots {
        if r.name.split('/').any(|c| c == "..") {
            return Err(Error::corrupt(format!("manifest: root name '{}' is not a plain relative path; refusing to restore", r.name)));
        }
    }
    Ok(())
}

/// Components below `/` of a `/`-separated path.
fn depth(p: &[u8]) -> usize {
    p.split(|&b| b == b'/').filter(|c| !c.is_empty()).count()
}

fn join_rel(base: &[u8], rel: &[u8]) -> Vec<u8> {
    let mut out = base.to_vec();
    if !rel.is_empty() {
        while out.last() == Some(&b'/') {
            out.pop();
        }
        out.push(b'/');
        out.extend_from_slice(rel);
    }
    out
}

/// `path` with `prefix` removed if `prefix` is a whole-component prefix.
fn strip_prefix<'a>(path: &'a [u8], prefix: &[u8]) -> Option<&'a [u8]> {
    let rest = path.strip_prefix(prefix)?;
    if rest.is_empty() {
        Some(rest)
    } else {
        rest.strip_prefix(b"/")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_is_whole_components() {
        assert_eq!(strip_prefix(b"base/1/2", b"base/1"), Some(&b"2"[..]));
        assert_eq!(strip_prefix(b"base/1", b"base/1"), Some(&b""[..]));
        assert_eq!(strip_prefix(b"base/12", b"base/1"), None);
    }
}
