//! The restore's plan, made and checked before anything is touched: where each entry of the
//! backup goes (the target, a relocation, or its original path when allowed), which entries
//! `--only` chooses, which files come back hollow, and the roots that receive a tree. Nothing a
//! backup holds can make a restore write outside its targets.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::options::{RestoreOptions, INCOMPLETE_MARKER};
use crate::error::{Error, Result};
use crate::manifest::{Entry, EntryKind, Manifest};
use crate::set::BackupSet;

/// One bit per entry, which any thread may set: what a restore keeps per entry (the plan's
/// choices, the writer's created files), so that ten million files cost ten million bits, not
/// ten million paths.
pub(super) struct Bits(Vec<AtomicU64>);

impl Bits {
    pub(super) fn new(n: usize) -> Self {
        Bits((0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect())
    }

    pub(super) fn set(&self, i: u32) {
        if let Some(w) = self.0.get(i as usize / 64) {
            w.fetch_or(1 << (i % 64), Ordering::AcqRel);
        }
    }

    pub(super) fn get(&self, i: u32) -> bool {
        self.0.get(i as usize / 64).is_some_and(|w| w.load(Ordering::Acquire) & (1 << (i % 64)) != 0)
    }
}

/// Which rule places an entry: a relocation, the target (the main tree), or its original place
/// (a tree outside the main one, with `--original-paths`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Placed {
    Relocated(usize),
    Target,
    Original(u16),
}

/// Where each entry goes, decided per entry from the options; nothing per entry is held but a bit
/// for `--only`.
pub(super) struct Plan<'s> {
    /// The set whose entries are restored (a chain's newest).
    pub(super) set: &'s BackupSet,
    /// Its manifest's head: roots, id.
    pub(super) manifest: &'s Manifest,
    target: PathBuf,
    relocate: Vec<(String, PathBuf)>,
    /// Folders whose files come back hollow ([`RestoreOptions::hollow`]).
    hollow: Vec<String>,
    /// With `--only`: the entries chosen.
    chosen: Option<Bits>,
    /// With a delta restore, what the target keeps as it is ([`RestoreOptions::keep`]): paths
    /// in the main root, and where they are.
    pub(super) keep: Vec<(String, PathBuf)>,
    /// Folders that receive a tree: the target and each relocation or extra root.
    pub(super) roots: Vec<PathBuf>,
    /// One incomplete-marker per root.
    pub(super) markers: Vec<PathBuf>,
}

impl<'s> Plan<'s> {
    /// The plan for restoring `set`, checked in passes over its entries (a page at a time when the
    /// set is opened lean): every path plain and under a directory listed before it, every
    /// relocation used, every tree outside the main one placed, no two entries on one path.
    ///
    /// # Errors
    /// A manifest that would write outside its targets; options that match nothing or collide.
    pub(super) fn new(set: &'s BackupSet, opts: &RestoreOptions) -> Result<Self> {
        let manifest = &set.manifest;
        validate_roots(manifest)?;
        let chosen = choose(set, &opts.only)?;
        let mut plan = Plan {
            set,
            manifest,
            target: opts.target.clone(),
            relocate: opts.relocate.clone(),
            hollow: opts.hollow.iter().map(|h| h.trim_end_matches('/').to_string()).collect(),
            chosen,
            keep: if opts.delta { opts.keep.iter().map(|k| (k.trim_matches('/').to_string(), opts.target.join(k.trim_matches('/')))).collect() } else { Vec::new() },
            roots: Vec::new(),
            markers: Vec::new(),
        };
        let n_roots = manifest.roots.len();
        let mut paths = PathCheck::new(set.entry_count());
        let mut used = vec![false; opts.relocate.len()];
        // Per relocation, the roots whose entries it takes.
        let mut reloc_roots: Vec<Vec<u16>> = vec![Vec::new(); opts.relocate.len()];
        let mut unmapped: Vec<u16> = Vec::new();
        let (mut root_used, mut root_moved) = (vec![false; n_roots], vec![false; n_roots]);
        let (mut target_used, mut original_used) = (false, vec![false; n_roots]);
        set.each_entry(|id, e| {
            paths.check(id, e, n_roots)?;
            if !plan.chosen_entry(id, e) {
                return Ok(());
            }
            let (p, placed) = plan.place(e);
            match placed {
                Placed::Relocated(i) => {
                    used[i] = true;
                    if !reloc_roots[i].contains(&e.root) {
                        reloc_roots[i].push(e.root);
                    }
                }
                Placed::Original(k) => {
                    original_used[k as usize] = true;
                    if !opts.original_paths && !unmapped.contains(&k) {
                        unmapped.push(k);
                    }
                }
                Placed::Target => target_used = true,
            }
            let root = e.root as usize;
            root_used[root] = true;
            if e.path.is_empty() && p.as_path() != Path::new(&manifest.roots[root].path) {
                root_moved[root] = true;
            }
            Ok(())
        })?;
        if let Some(i) = used.iter().position(|u| !u).filter(|_| plan.chosen.is_none()) {
            let (old, new) = &opts.relocate[i];
            return Err(Error::invalid(format!(
                "--relocate {old}={}: nothing in the backup is under '{old}' (or a more specific --relocate takes all of it); give a path inside the backup or an original absolute path",
                new.display()
            )));
        }
        if !unmapped.is_empty() {
            let what: Vec<String> = unmapped.iter().map(|&k| &manifest.roots[k as usize]).map(|r| format!("'{}' (at {} when backed up)", r.name, r.path)).collect();
            let first = &manifest.roots[unmapped[0] as usize].path;
            return Err(Error::invalid(format!(
                "the backup holds {} outside its main directory: {}; sheaf writes outside --to only where told: map each with --relocate {first}=NEW_DIR, or pass --original-paths to restore them where they were",
                if unmapped.len() == 1 { "a tree" } else { "trees" },
                what.join(", ")
            )));
        }
        // Two entries on one path: only where two rules place entries in one region (one's
        // folder inside, or the same as, another's), or one relocation takes entries of two
        // trees. Those entries' paths are compared, by a 128-bit hash each; elsewhere every
        // path is one (root, path) of the backup, and those are distinct.
        let mut regions: Vec<(Placed, PathBuf)> = Vec::new();
        if target_used {
            regions.push((Placed::Target, opts.target.clone()));
        }
        for (i, (_, new)) in opts.relocate.iter().enumerate().filter(|(i, _)| used[*i]) {
            regions.push((Placed::Relocated(i), new.clone()));
        }
        for k in (1..n_roots).filter(|&k| original_used[k]) {
            regions.push((Placed::Original(k as u16), PathBuf::from(&manifest.roots[k].path)));
        }
        let risky: Vec<Placed> = regions
            .iter()
            .filter(|(placed, r)| {
                regions.iter().any(|(other, o)| other != placed && (o.starts_with(r) || r.starts_with(o))) || matches!(placed, Placed::Relocated(i) if reloc_roots[*i].len() > 1)
            })
            .map(|(placed, _)| *placed)
            .collect();
        if !risky.is_empty() {
            let mut seen: HashSet<u128> = HashSet::new();
            set.each_entry(|id, e| {
                if !plan.chosen_entry(id, e) {
                    return Ok(());
                }
                let (p, placed) = plan.place(e);
                if risky.contains(&placed) && !seen.insert(path_hash(&p)) {
                    return Err(Error::invalid(format!("two entries of the backup would be restored to {}: check the --relocate targets for overlaps", p.display())));
                }
                Ok(())
            })?;
        }
        let mut roots = vec![opts.target.clone()];
        roots.extend(opts.relocate.iter().map(|(_, new)| new.clone()));
        for (k, root) in manifest.roots.iter().enumerate().skip(1) {
            // With --only, a root none of whose entries is restored is not touched.
            if !root_moved[k] && root_used[k] {
                roots.push(PathBuf::from(&root.path));
            }
        }
        let mut seen = HashSet::new();
        roots.retain(|r| seen.insert(r.clone()));
        plan.markers = roots.iter().map(|r| r.join(INCOMPLETE_MARKER)).collect();
        plan.roots = roots;
        Ok(plan)
    }

    /// Whether entry `id` is restored at all: not vanished, chosen by `--only` when given, and
    /// not one the target keeps.
    fn chosen_entry(&self, id: u32, e: &Entry) -> bool {
        !e.vanished && self.chosen.as_ref().is_none_or(|c| c.get(id)) && (self.keep.is_empty() || !self.kept(e))
    }

    /// Whether `e` is at or under a path the target keeps.
    fn kept(&self, e: &Entry) -> bool {
        e.root == 0 && {
            let p = e.path_bytes();
            self.keep.iter().any(|(k, _)| p.strip_prefix(k.as_bytes()).is_some_and(|rest| rest.is_empty() || rest[0] == b'/'))
        }
    }

    /// Whether `path` (on disk) is at a path the target keeps.
    pub(super) fn keeps(&self, path: &Path) -> bool {
        self.keep.iter().any(|(_, at)| at == path)
    }

    /// Where entry `id` goes; `None` when it is not restored.
    pub(super) fn dest(&self, id: u32, e: &Entry) -> Option<PathBuf> {
        self.chosen_entry(id, e).then(|| self.place(e).0)
    }

    /// Where regular file `id` is written from the set's chunks: its destination, unless it is
    /// not restored or comes back hollow.
    pub(super) fn writes(&self, id: u32, e: &Entry) -> Option<PathBuf> {
        self.written(id, e).then(|| self.place(e).0)
    }

    /// Whether file `id` is written from the set's chunks ([`Plan::writes`] without its path).
    pub(super) fn written(&self, id: u32, e: &Entry) -> bool {
        self.chosen_entry(id, e) && !self.hollow(e)
    }

    /// A file restored as zeros of its size, unread ([`RestoreOptions::hollow`]).
    pub(super) fn hollow(&self, e: &Entry) -> bool {
        if self.hollow.is_empty() || e.kind != EntryKind::File {
            return false;
        }
        let p = logical_path(self.manifest, e);
        self.hollow.iter().any(|h| p.strip_prefix(h.as_str()).is_some_and(|rest| rest.starts_with('/')))
    }

    /// Where `e` goes if restored, and by which rule.
    fn place(&self, e: &Entry) -> (PathBuf, Placed) {
        let root = &self.manifest.roots[e.root as usize];
        let rel = e.path_bytes();
        if self.relocate.is_empty() && e.root == 0 {
            // The common case, per file of a large restore: nothing to match.
            return (if rel.is_empty() { self.target.clone() } else { self.target.join(OsStr::from_bytes(rel)) }, Placed::Target);
        }
        let logical = if root.name.is_empty() { rel.to_vec() } else { join_rel(root.name.as_bytes(), rel) };
        let original = join_rel(root.path.as_bytes(), rel);
        let root_depth = depth(root.path.as_bytes());
        // The most specific relocation wins, counting path components below the backup's root
        // whichever way OLD was written.
        let mut best: Option<(usize, usize, PathBuf)> = None;
        for (i, (old, new)) in self.relocate.iter().enumerate() {
            let old = old.as_bytes();
            let hit = strip_prefix(&logical, old).map(|rest| (depth(old), rest)).or_else(|| strip_prefix(&original, old).map(|rest| (depth(old).saturating_sub(root_depth), rest)));
            if let Some((d, rest)) = hit {
                if best.as_ref().is_none_or(|b| d > b.0) {
                    let p = if rest.is_empty() { new.clone() } else { new.join(OsStr::from_bytes(rest)) };
                    best = Some((d, i, p));
                }
            }
        }
        match best {
            Some((_, i, p)) => (p, Placed::Relocated(i)),
            None if e.root == 0 => (if rel.is_empty() { self.target.clone() } else { self.target.join(OsStr::from_bytes(rel)) }, Placed::Target),
            None => (PathBuf::from(OsStr::from_bytes(&original)), Placed::Original(e.root)),
        }
    }
}

/// A path's 128-bit hash (two keyed SipHashes): for the overlap check, where a false match (about
/// one in 10^20 for ten million paths) only refuses a restore.
fn path_hash(p: &Path) -> u128 {
    use std::hash::{Hash, Hasher};
    let half = |key: u64| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut h);
        p.hash(&mut h);
        h.finish()
    };
    (u128::from(half(0x5EAF_0001)) << 64) | u128::from(half(0x5EAF_0002))
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
/// and the folders above them; `None` for everything. Two passes over the entries: the matches,
/// then the folders above them (listed before them).
///
/// # Errors
/// A glob that does not parse, or one that matches nothing in the backup.
fn choose(set: &BackupSet, only: &[String]) -> Result<Option<Bits>> {
    if only.is_empty() {
        return Ok(None);
    }
    let manifest = &set.manifest;
    let globs = only.iter().map(|g| glob::Pattern::new(g.trim_end_matches('/')).map_err(|e| Error::invalid(format!("--only '{g}': {e}")))).collect::<Result<Vec<_>>>()?;
    let how = glob::MatchOptions { case_sensitive: true, require_literal_separator: true, require_literal_leading_dot: false };
    let mut hit = vec![false; globs.len()];
    let chosen = Bits::new(set.entry_count());
    // The folders above a chosen entry: as many as the backup has folders.
    let mut above: HashSet<String> = HashSet::new();
    set.each_entry(|id, e| {
        if e.root as usize >= manifest.roots.len() {
            return Ok(());
        }
        let p = logical_path(manifest, e);
        if p.is_empty() {
            return Ok(());
        }
        // The path itself, then each folder above it.
        let mut candidates = vec![p.as_str()];
        candidates.extend(p.match_indices('/').map(|(at, _)| &p[..at]));
        let mut this = false;
        for (k, g) in globs.iter().enumerate() {
            if candidates.iter().any(|c| g.matches_with(c, how)) {
                hit[k] = true;
                this = true;
            }
        }
        if this {
            chosen.set(id);
            above.extend(p.match_indices('/').map(|(at, _)| p[..at].to_string()));
            above.insert(String::new());
        }
        Ok(())
    })?;
    if let Some(k) = hit.iter().position(|h| !h) {
        return Err(Error::invalid(format!(
            "--only '{}' matches nothing in the backup: paths are as the backup holds them, e.g. base/16384/16385 or pg_tblspc/16390/... for PostgreSQL, or relative to the directory backed up",
            only[k]
        )));
    }
    set.each_entry(|id, e| {
        if e.kind == EntryKind::Dir && (e.root as usize) < manifest.roots.len() && above.contains(&logical_path(manifest, e)) {
            chosen.set(id);
        }
        Ok(())
    })?;
    Ok(Some(chosen))
}

/// The path checks of [`Plan::new`], fed the entries in order: what it keeps is the
/// directories (as many as the backup has) and a bit per entry for the regular files.
struct PathCheck {
    /// Each directory as its root (2 bytes) and path.
    dirs: HashSet<Vec<u8>>,
    files: Bits,
    /// The key looked up, made again for each entry without an allocation.
    key: Vec<u8>,
}

impl PathCheck {
    fn new(entries: usize) -> Self {
        PathCheck { dirs: HashSet::new(), files: Bits::new(entries), key: Vec::new() }
    }

    /// Entries may only name plain relative paths, and every entry's parent must be a directory
    /// entry of the same root listed before it: nothing a backup holds can make a restore write
    /// outside its targets, whether through `..`, an absolute path, or a symlink standing where a
    /// directory should be.
    fn check(&mut self, id: u32, e: &Entry, roots: usize) -> Result<()> {
        if e.root as usize >= roots {
            return Err(Error::corrupt(format!("manifest: entry '{}' names root {} but the backup has {roots} root(s); refusing to restore", e.path, e.root)));
        }
        let p = e.path_bytes();
        if !p.is_empty() {
            if p.split(|&b| b == b'/').any(|c| c.is_empty() || c == b"." || c == b"..") || p.contains(&0) {
                return Err(Error::corrupt(format!("manifest: entry path '{}' is not a plain relative path; refusing to restore", e.path)));
            }
            let parent = p.iter().rposition(|&b| b == b'/').map_or(&p[..0], |at| &p[..at]);
            self.key.clear();
            self.key.extend_from_slice(&e.root.to_le_bytes());
            self.key.extend_from_slice(parent);
            if !self.dirs.contains(self.key.as_slice()) {
                return Err(Error::corrupt(format!("manifest: '{}' comes before, or without, its directory '{}'; refusing to restore", e.path, String::from_utf8_lossy(parent))));
            }
        }
        match e.kind {
            EntryKind::Dir => {
                let mut key = e.root.to_le_bytes().to_vec();
                key.extend_from_slice(p);
                self.dirs.insert(key);
            }
            EntryKind::File => self.files.set(id),
            // A hard link names a regular file listed before it.
            EntryKind::Hardlink if !e.link.is_some_and(|l| l < id && self.files.get(l)) => {
                return Err(Error::corrupt(format!("manifest: hard link '{}' names no regular file before it; refusing to restore", e.path)));
            }
            _ => {}
        }
        Ok(())
    }
}

/// Root names are plain relative paths.
fn validate_roots(m: &Manifest) -> Result<()> {
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
