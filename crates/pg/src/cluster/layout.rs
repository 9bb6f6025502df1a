//! The shape of a PostgreSQL data directory: what a base backup leaves out, and which files are
//! relation forks whose pages carry checksums.
//!
//! Left out, as PostgreSQL's own base backup does: the contents of pg_wal (the WAL the backup needs
//! is added separately), pg_dynshmem, pg_notify, pg_replslot, pg_serial, pg_snapshots, pg_stat_tmp
//! and pg_subtrans (the directories themselves are kept); postmaster.pid and postmaster.opts;
//! pg_internal.init (rebuilt at start); a stale backup_label, tablespace_map or backup_manifest;
//! a standby's standby.signal or recovery.signal (restore writes its own);
//! temporary files (`pgsql_tmp*`) and temporary relations (`t<backend>_<node>`); and every fork of an
//! unlogged relation except its init fork, from which start-up rebuilds it empty.

use std::collections::HashSet;

use sheaf_core::manifest::EntryKind;
use sheaf_core::source::Listed;

/// Directories whose contents a base backup leaves out (the directories themselves are kept).
pub(crate) const EMPTY_DIRS: [&str; 8] = ["pg_wal", "pg_dynshmem", "pg_notify", "pg_replslot", "pg_serial", "pg_snapshots", "pg_stat_tmp", "pg_subtrans"];
/// Files in the data directory's top level that are never copied. A standby's standby.signal
/// (and a recovering cluster's recovery.signal) are left out too: restore writes the signal its
/// recovery needs, and a copy of a standby's would start the restored cluster as a standby that
/// never ends recovery.
const TOP_FILES: [&str; 8] =
    ["postmaster.pid", "postmaster.opts", "backup_label", "tablespace_map", "backup_manifest", "current_logfiles.tmp", "standby.signal", "recovery.signal"];

/// A relation file name: `NODE[_FORK][.SEGMENT]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RelFile<'a> {
    /// The relfilenode.
    pub node: &'a str,
    /// `""` (main), `fsm`, `vm` or `init`.
    pub fork: &'a str,
    /// The 1 GiB segment number.
    pub segment: u32,
}

/// Parse a relation file name; `None` for anything else.
pub fn rel_file(name: &str) -> Option<RelFile<'_>> {
    let (stem, segment) = match name.split_once('.') {
        Some((s, seg)) if !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_digit()) => (s, seg.parse().ok()?),
        Some(_) => return None,
        None => (name, 0),
    };
    let (node, fork) = match stem.split_once('_') {
        Some((n, f @ ("fsm" | "vm" | "init"))) => (n, f),
        Some(_) => return None,
        None => (stem, ""),
    };
    (!node.is_empty() && node.bytes().all(|b| b.is_ascii_digit())).then_some(RelFile { node, fork, segment })
}

/// Whether `rel` (relative to the data directory, or to a tablespace's directory when
/// `in_tablespace`) is a relation file in a database or global directory: the files whose pages
/// carry checksums.
pub fn is_relation_path(rel: &str, in_tablespace: bool) -> Option<RelFile<'_>> {
    let parts: Vec<&str> = rel.split('/').collect();
    let ok_dir = if in_tablespace {
        // PG_<version>_<catversion>/<database oid>/<file>
        parts.len() == 3 && parts[0].starts_with("PG_") && parts[1].bytes().all(|b| b.is_ascii_digit())
    } else {
        (parts.len() == 3 && parts[0] == "base" && parts[1].bytes().all(|b| b.is_ascii_digit())) || (parts.len() == 2 && parts[0] == "global")
    };
    if ok_dir {
        rel_file(parts[parts.len() - 1])
    } else {
        None
    }
}

/// Blocks per 1 GiB segment in a default build.
pub const BLOCKS_PER_SEGMENT: u32 = 131_072;

fn is_temp_relation(name: &str) -> bool {
    // t<backend id>_<relfilenode>[_fork][.segment]
    name.strip_prefix('t').and_then(|r| r.split_once('_')).is_some_and(|(b, rest)| !b.is_empty() && b.bytes().all(|c| c.is_ascii_digit()) && rel_file(rest).is_some())
}

/// Drop what a base backup leaves out from a listing of the data directory (`in_tablespace`
/// false) or of one tablespace's directory, as it streams in tree order (a
/// [`sheaf_core::source::Walk`], or an agent's walk, of the cluster's `files`), holding nothing
/// per file. Each directory's unlogged relations are found from its names when the directory comes
/// by; pg_wal/archive_status, which a backup always has, is added after pg_wal's own entries when
/// the walk did not give it. Nothing here looks at this host's disk: the files may be another
/// host's. `dropped` counts what is left out.
pub fn filter_stream<'a>(
    listing: impl Iterator<Item = sheaf_core::Result<Listed>> + 'a,
    in_tablespace: bool,
    dropped: &'a std::cell::Cell<usize>,
    files: &'a dyn sheaf_core::source::Files,
) -> impl Iterator<Item = sheaf_core::Result<Listed>> + 'a {
    let mut rules = Rules::new(in_tablespace);
    let mut unlogged: HashSet<(String, String)> = HashSet::new();
    // pg_wal/archive_status, until the walk gives it or leaves pg_wal (whose other contents are
    // all left out, so the next entry kept is either it or past pg_wal).
    let mut status: Option<Listed> = None;
    let mut queued: Option<Listed> = None;
    let mut listing = listing;
    std::iter::from_fn(move || {
        if let Some(q) = queued.take() {
            return Some(Ok(q));
        }
        loop {
            let mut l = match listing.next() {
                None => return status.take().map(Ok),
                Some(Err(e)) => return Some(Err(e)),
                Some(Ok(l)) => l,
            };
            if l.entry.kind == EntryKind::Dir {
                // Names only (no stats): a database's init forks, before its other files come.
                let found = files.each_name(&l.abs, &mut |name| {
                    if let Some(r) = name.to_str().and_then(rel_file).filter(|r| r.fork == "init") {
                        unlogged.insert((l.entry.path.clone(), r.node.to_string()));
                    }
                });
                if let Err(e) = found {
                    return Some(Err(e));
                }
            }
            if !rules.keep(&mut l, &unlogged) {
                dropped.set(dropped.get() + 1);
                continue;
            }
            if !in_tablespace && l.entry.path == "pg_wal/archive_status" {
                status = None;
            }
            if let Some(s) = status.take() {
                queued = Some(l);
                return Some(Ok(s));
            }
            if !in_tablespace && l.entry.path == "pg_wal" {
                status = Some(archive_status(&l));
            }
            return Some(Ok(l));
        }
    })
}

/// The rules of [`filter_stream`], one entry at a time.
struct Rules {
    in_tablespace: bool,
    /// The owner of the data directory (the first entry), for what becomes a plain directory.
    owner: Option<(u32, u32)>,
}

impl Rules {
    fn new(in_tablespace: bool) -> Self {
        Rules { in_tablespace, owner: None }
    }

    /// Whether `l` is kept, given the (dir, node) pairs of unlogged relations. A directory whose
    /// contents are left out may be a symlink (`initdb -X` puts pg_wal elsewhere): in the backup
    /// it becomes a plain directory, owned like the data directory, as PostgreSQL's base backup
    /// does.
    fn keep(&mut self, l: &mut Listed, unlogged: &HashSet<(String, String)>) -> bool {
        let path = l.entry.path.as_str();
        if path.is_empty() {
            self.owner = Some((l.entry.uid, l.entry.gid));
        }
        let (dir, name) = split(path);
        if !self.in_tablespace {
            if dir.is_empty() && l.entry.kind != EntryKind::Dir && TOP_FILES.contains(&name) {
                return false;
            }
            // Keep the directories themselves, and pg_wal/archive_status, but not their contents.
            let top = path.split('/').next().unwrap_or_default();
            if EMPTY_DIRS.contains(&top) && path != top && path != "pg_wal/archive_status" {
                return false;
            }
        }
        if name == "pg_internal.init" || name.starts_with("pgsql_tmp") || path.split('/').any(|c| c.starts_with("pgsql_tmp") && c != name) {
            return false;
        }
        if l.entry.kind == EntryKind::File && is_temp_relation(name) {
            return false;
        }
        if let Some(r) = rel_file(name) {
            if r.fork != "init" && unlogged.contains(&(dir.to_string(), r.node.to_string())) {
                return false;
            }
        }
        if !self.in_tablespace && l.entry.kind == EntryKind::Symlink && EMPTY_DIRS.contains(&path) {
            if let Some((uid, gid)) = self.owner {
                l.entry.kind = EntryKind::Dir;
                l.entry.target = None;
                l.entry.mode = 0o700;
                (l.entry.uid, l.entry.gid) = (uid, gid);
            }
        }
        true
    }
}

/// pg_wal/archive_status, which exists in a backup whatever the source had: like pg_wal.
fn archive_status(pg_wal: &Listed) -> Listed {
    let mut dir = pg_wal.clone();
    dir.entry.path = "pg_wal/archive_status".into();
    dir.abs = dir.abs.join("archive_status");
    dir
}

fn split(path: &str) -> (&str, &str) {
    match path.rsplit_once('/') {
        Some((d, n)) => (d, n),
        None => ("", path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sheaf_core::manifest::Entry;

    fn l(path: &str, kind: EntryKind) -> Listed {
        Listed {
            entry: Entry { root: 0, path: path.into(), kind, mode: 0o600, mtime_ns: 0, uid: 0, gid: 0, size: 0, crc32c: None, target: None, vanished: false, ..Default::default() },
            abs: path.into(),
            dev: 0,
            ino: 0,
            nlink: 1,
        }
    }

    /// Another host's files as a listing gives them: names come from the listing, and nothing is
    /// at those paths on this host (they are relative), as through an agent.
    struct Remote(Vec<Listed>);

    impl sheaf_core::source::Files for Remote {
        fn open(&self, _: &std::path::Path) -> sheaf_core::Result<Box<dyn sheaf_core::source::SourceFile>> {
            Err(sheaf_core::Error::invalid("not opened here"))
        }
        fn walk(&self, _: &std::path::Path, _: u16) -> sheaf_core::Result<Box<dyn sheaf_core::source::Listing>> {
            Err(sheaf_core::Error::invalid("not walked here"))
        }
        fn each_name(&self, dir: &std::path::Path, each: &mut dyn FnMut(&std::ffi::OsStr)) -> sheaf_core::Result<()> {
            self.0.iter().filter(|l| l.abs.parent() == Some(dir)).for_each(|l| each(l.abs.file_name().expect("a name")));
            Ok(())
        }
        fn list_one(&self, _: &std::path::Path, _: String, _: u16) -> sheaf_core::Result<Option<Listed>> {
            Ok(None)
        }
        fn read_small(&self, _: &std::path::Path) -> sheaf_core::Result<Option<Vec<u8>>> {
            Ok(None)
        }
    }

    /// [`filter_stream`] over `listed` as another host's: what it keeps, and how many it drops.
    fn filter(listed: Vec<Listed>, in_tablespace: bool) -> (Vec<Listed>, usize) {
        let files = Remote(listed.clone());
        let dropped = std::cell::Cell::new(0);
        let kept = filter_stream(listed.into_iter().map(Ok), in_tablespace, &dropped, &files).collect::<sheaf_core::Result<Vec<_>>>().unwrap();
        (kept, dropped.get())
    }

    #[test]
    fn relation_names() {
        assert_eq!(rel_file("16384"), Some(RelFile { node: "16384", fork: "", segment: 0 }));
        assert_eq!(rel_file("16384.2"), Some(RelFile { node: "16384", fork: "", segment: 2 }));
        assert_eq!(rel_file("16384_vm"), Some(RelFile { node: "16384", fork: "vm", segment: 0 }));
        assert_eq!(rel_file("16384_fsm.1"), Some(RelFile { node: "16384", fork: "fsm", segment: 1 }));
        for no in ["PG_VERSION", "pg_filenode.map", "16384_x", "16384.", "_vm", "t3_16384"] {
            assert_eq!(rel_file(no), None, "{no}");
        }
        assert!(is_relation_path("base/5/16384.1", false).is_some());
        assert!(is_relation_path("global/1262", false).is_some());
        assert!(is_relation_path("global/pg_control", false).is_none());
        assert!(is_relation_path("pg_xact/0000", false).is_none());
        assert!(is_relation_path("PG_15_202209061/5/16390", true).is_some());
    }

    #[test]
    fn filter_leaves_out_what_a_base_backup_omits() {
        let listed = vec![
            l("", EntryKind::Dir),
            l("PG_VERSION", EntryKind::File),
            l("postmaster.pid", EntryKind::File),
            l("postmaster.opts", EntryKind::File),
            l("backup_label", EntryKind::File),
            l("pg_wal", EntryKind::Dir),
            l("pg_wal/000000010000000000000001", EntryKind::File),
            l("pg_wal/archive_status", EntryKind::Dir),
            l("pg_replslot", EntryKind::Dir),
            l("pg_replslot/slot1", EntryKind::Dir),
            l("pg_replslot/slot1/state", EntryKind::File),
            l("pg_stat_tmp", EntryKind::Dir),
            l("pg_stat_tmp/global.stat", EntryKind::File),
            l("base", EntryKind::Dir),
            l("base/5", EntryKind::Dir),
            l("base/5/1259", EntryKind::File),
            l("base/5/pg_internal.init", EntryKind::File),
            l("base/5/t3_16400", EntryKind::File),
            l("base/5/16500", EntryKind::File),
            l("base/5/16500_fsm", EntryKind::File),
            l("base/5/16500_init", EntryKind::File),
            l("base/pgsql_tmp", EntryKind::Dir),
            l("base/pgsql_tmp/pgsql_tmp123.0", EntryKind::File),
            l("global", EntryKind::Dir),
            l("global/pg_control", EntryKind::File),
        ];
        let (kept, dropped) = filter(listed, false);
        let paths: Vec<&str> = kept.iter().map(|l| l.entry.path.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                "",
                "PG_VERSION",
                "pg_wal",
                "pg_wal/archive_status",
                "pg_replslot",
                "pg_stat_tmp",
                "base",
                "base/5",
                "base/5/1259",
                "base/5/16500_init",
                "global",
                "global/pg_control"
            ]
        );
        assert_eq!(dropped, 13);
        // A pg_wal without archive_status gets one, once, in its place.
        let (kept, _) =
            filter(vec![l("", EntryKind::Dir), l("pg_wal", EntryKind::Dir), l("pg_wal/000000010000000000000001", EntryKind::File), l("pg_xact", EntryKind::Dir)], false);
        let paths: Vec<&str> = kept.iter().map(|l| l.entry.path.as_str()).collect();
        assert_eq!(paths, vec!["", "pg_wal", "pg_wal/archive_status", "pg_xact"]);
    }

    #[test]
    fn a_symlinked_pg_wal_becomes_a_directory_with_archive_status() {
        let mut wal = l("pg_wal", EntryKind::Symlink);
        wal.entry.target = Some("/elsewhere/wal".into());
        let mut root = l("", EntryKind::Dir);
        root.entry.uid = 26;
        let (kept, _) = filter(vec![root, wal, l("pg_wal/000000010000000000000001", EntryKind::File)], false);
        let paths: Vec<(&str, EntryKind)> = kept.iter().map(|l| (l.entry.path.as_str(), l.entry.kind)).collect();
        assert_eq!(paths, vec![("", EntryKind::Dir), ("pg_wal", EntryKind::Dir), ("pg_wal/archive_status", EntryKind::Dir)]);
        assert_eq!((kept[1].entry.uid, kept[1].entry.mode, kept[1].entry.target.as_deref()), (26, 0o700, None));
    }

    /// On a real folder, walked: what a base backup omits is left out, a symlinked pg_wal becomes
    /// a folder with archive_status, and what is dropped is counted.
    #[test]
    fn the_filter_over_a_real_walk_keeps_what_a_base_backup_keeps() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("pgdata");
        for dir in ["base/5", "base/pgsql_tmp", "global", "pg_stat_tmp", "pg_replslot/slot"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        for f in [
            "PG_VERSION",
            "postmaster.pid",
            "standby.signal",
            "base/5/1259",
            "base/5/1259_fsm",
            "base/5/16500",
            "base/5/16500.1",
            "base/5/16500_fsm",
            "base/5/16500_init",
            "base/5/t3_16400",
            "base/5/pg_internal.init",
            "base/pgsql_tmp/pgsql_tmp1.0",
            "global/pg_control",
            "pg_stat_tmp/x",
            "pg_replslot/slot/state",
        ] {
            std::fs::write(root.join(f), b"x").unwrap();
        }
        let elsewhere = d.path().join("wal");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("000000010000000000000001"), b"w").unwrap();
        let kept = [
            "",
            "PG_VERSION",
            "base",
            "base/5",
            "base/5/1259",
            "base/5/1259_fsm",
            "base/5/16500_init",
            "global",
            "global/pg_control",
            "pg_replslot",
            "pg_stat_tmp",
            "pg_wal",
            "pg_wal/archive_status",
        ];
        // Dropped: the pid file, standby.signal, 16500 and its fork and segment, the temporary
        // relation, pg_internal.init, pgsql_tmp and its file, and the three files in emptied folders.
        for (symlinked, dropped) in [(false, 13), (true, 12)] {
            if symlinked {
                std::fs::remove_dir_all(root.join("pg_wal")).unwrap();
                std::os::unix::fs::symlink(&elsewhere, root.join("pg_wal")).unwrap();
            } else {
                std::fs::create_dir_all(root.join("pg_wal")).unwrap();
                std::fs::write(root.join("pg_wal/000000010000000000000001"), b"w").unwrap();
            }
            let count = std::cell::Cell::new(0);
            let streamed: Vec<Listed> =
                filter_stream(sheaf_core::source::Walk::new(&root, 0).unwrap(), false, &count, &sheaf_core::source::LocalFiles).collect::<sheaf_core::Result<_>>().unwrap();
            let paths: Vec<&str> = streamed.iter().map(|l| l.entry.path.as_str()).collect();
            assert_eq!(paths, kept, "symlinked pg_wal: {symlinked}");
            assert!(streamed.iter().filter(|l| l.entry.path.starts_with("pg_wal")).all(|l| l.entry.kind == EntryKind::Dir));
            assert_eq!(count.get(), dropped, "symlinked pg_wal: {symlinked}");
        }
    }
}
